#include "kernels/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "isa/isa_error.h"

namespace trnsim::kernels {
namespace {

using isa::Opcode;
constexpr int64_t kQueryTile = 128;
constexpr int64_t kKeyBlock = 512;  // one fp32 PSUM bank of scores per query row (one matmul)
// Keys per softmax section: the row max, the exp, the P V accumulation and the output update run
// once per section, so their fixed costs are paid once per 1024 keys (two PSUM banks of scores).
constexpr int64_t kSection = 1024;

// Pipeline: the softmax of a section trails its score matmuls by one section, its P^T / P V by
// 1 + kValuesLag and its output update by 1 + kOutputLag (see the stage table in the builder).
constexpr int64_t kValuesLag = 2, kOutputLag = 3;
// PSUM: kScoreBanks banks of scores (a section takes 1 or 2, in rotation, so short sections have
// more in flight) + a bank of kPvSlots P V accumulators = 7 of the 8 banks. The SBUF buffers and
// statistics of a section rotate over kRing slots.
constexpr int64_t kScoreBanks = 6, kBankColumns = 512, kPvSlots = 4, kRing = 10;
static_assert(kOutputLag > kValuesLag && kOutputLag < kValuesLag + 2, "P V is drained before its slot is reused");
static_assert(kRing > kOutputLag + 5, "statistics outlive the stages that read them");

// Per section the Vector engine reads kSection fp32 scores for the row max (one cycle each) and
// the Scalar engine exps them (plus the accumulator read-out and the rescale exp). The P V
// accumulator (head_dim columns in PSUM) is drained by whichever of the two then finishes first:
// the Scalar engine copying it to SBUF for GpSimd to add (trn2, Vector at 0.96 GHz), or the
// Vector engine adding it straight from PSUM (trn3, Vector at 1.2 GHz).
bool pv_add_on_vector(const HardwareConfig& config, int64_t head_dim) {
  const VectorEngineConfig& dve = config.core.vector;
  const ScalarEngineConfig& act = config.core.scalar;
  const double vector_ns = double(kSection) / dve.clock_ghz;
  const double scalar_ns =
      double(kSection + act.accumulator_readout_cycles + act.min_initiation_interval_cycles) / act.clock_ghz;
  const double drain = double(std::max<int64_t>(head_dim, int64_t(act.min_initiation_interval_cycles)));
  return std::max(vector_ns + drain / dve.clock_ghz, scalar_ns) <
         std::max(vector_ns, scalar_ns + drain / act.clock_ghz);
}

}  // namespace

double attention_forward_flops(const AttentionSpec& s) {
  double pairs = double(s.seq_q) * double(s.seq_k);
  if (s.causal) pairs = double(s.seq_q) * (double(s.seq_q) + 1) / 2 + double(s.seq_q) * double(s.seq_k - s.seq_q);
  return 4.0 * double(s.batch) * double(s.heads) * pairs * double(s.head_dim);
}

void build_flash_attention_forward(const KernelContext& ctx, const AttentionSpec& spec, const AttentionTensors& t) {
  isa::ProgramBuilder& b = ctx.builder;
  const int64_t d = spec.head_dim, sq = spec.seq_q, sk = spec.seq_k;
  const int64_t p = ctx.partitions();
  if (d <= 0 || d > p || sq <= 0 || sk <= 0 || spec.heads % spec.kv_heads != 0) {
    throw KernelUnsupported("flash attention: head_dim must be 1..128, sequences non-empty, heads a multiple of kv_heads");
  }
  if (!ctx.config.core.dma.transpose_supported || dtype_size_bytes(spec.dtype) != 2) {
    throw KernelUnsupported("flash attention loads Q^T and K^T by DMA transpose: needs a 2-byte dtype on trn2 or later");
  }
  if (spec.causal && sq != sk) throw KernelUnsupported("flash attention: causal needs seq_q == seq_k");
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(double(d));
  const DType dt = spec.dtype;
  const uint32_t up = uint32_t(p), ud = uint32_t(d);
  const int64_t key_tiles = ceil_div(sk, p);
  const bool vector_adds_pv = pv_add_on_vector(ctx.config, d);
  const int64_t ring = kRing;
  // K^T and V per kv head, double-buffered so the next head's loads overlap this head's tail.
  uint32_t k_t = b.sbuf(ctx.name("fa_kT"), dt, {ud, 2, uint32_t(sk)});
  uint32_t v_sb = b.sbuf(ctx.name("fa_v"), dt, {up, 2, uint32_t(key_tiles), ud});
  uint32_t q_t = b.sbuf(ctx.name("fa_qT"), dt, {ud, 2, uint32_t(kQueryTile)});
  uint32_t s_ps = b.psum(ctx.name("fa_s"), DType::fp32, {up, uint32_t(kScoreBanks * kBankColumns)});
  uint32_t pv_ps = b.psum(ctx.name("fa_pv"), DType::fp32, {up, uint32_t(kPvSlots), ud});
  uint32_t p_sb = b.sbuf(ctx.name("fa_p"), dt, {up, uint32_t(ring), uint32_t(kSection)});
  uint32_t pt_sb = b.sbuf(ctx.name("fa_pT_sb"), dt, {up, uint32_t(ring), uint32_t(kSection / p), uint32_t(kQueryTile)});
  uint32_t pv_sb = b.sbuf(ctx.name("fa_pv_sb"), DType::fp32, {up, uint32_t(ring), ud});
  // Per-row statistics, each in its own 256-byte run so that dependency tracking (like the
  // hardware's semaphores) sees them as separate: per query-tile parity the lse; per section slot
  // the statistics of the online softmax (below).
  constexpr int64_t kStatStride = 64;  // fp32 elements = 256 bytes
  constexpr int64_t kTileStats = 1, kSlotStats = 5;
  uint32_t stats = b.sbuf(ctx.name("fa_stats"), DType::fp32,
                          {up, uint32_t((2 * kTileStats + kSlotStats * ring) * kStatStride)});
  uint32_t o_sb = b.sbuf(ctx.name("fa_o"), DType::fp32, {up, 2, ud});
  uint32_t out_sb = b.sbuf(ctx.name("fa_out"), dt, {up, 2, ud});
  uint32_t ident = 0, mask = 0;
  if (spec.causal) {
    // The causal mask is added on the PE array: scores of a diagonal 128 x 128 square += I^T M,
    // M = 0 where key <= query and -1e30 above (finite: 0 * -inf would be NaN), so the row max
    // and the exp read the scores straight from PSUM like every other block. Built once on GpSimd.
    uint32_t ones = b.sbuf(ctx.name("fa_ones"), dt, {up, uint32_t(kQueryTile)});
    uint32_t zeros = b.sbuf(ctx.name("fa_zeros"), dt, {up, uint32_t(kQueryTile)});
    ident = b.sbuf(ctx.name("fa_ident"), dt, {up, uint32_t(kQueryTile)});
    mask = b.sbuf(ctx.name("fa_mask"), dt, {up, uint32_t(kQueryTile)});
    b.emit(Opcode::memset).tensor("dst", b.view(ones)).imm("value", 1).on(Engine::gpsimd);
    b.emit(Opcode::memset).tensor("dst", b.view(zeros)).imm("value", 0).on(Engine::gpsimd);
    const std::string pattern = "[[-1, " + std::to_string(kQueryTile) + "]]";
    b.emit(Opcode::affine_select).tensor("dst", b.view(ident)).word("pattern", pattern)
        .imm("channel_multiplier", 1).imm("offset", 0).tensor("on_true_tile", b.view(ones))
        .imm("on_false_value", 0).word("cmp_op", "equal");
    b.emit(Opcode::affine_select).tensor("dst", b.view(mask)).word("pattern", pattern)
        .imm("channel_multiplier", 1).imm("offset", 0).tensor("on_true_tile", b.view(zeros))
        .imm("on_false_value", -1e30).word("cmp_op", "greater_equal");
  }
  auto stat = [&](int64_t column, int64_t rows) {
    return b.view(stats, {span(0, rows), span(column * kStatStride, 1)});
  };
  auto tile_stat = [&](int64_t which, int64_t parity, int64_t rows) { return stat(which + kTileStats * parity, rows); };
  auto slot_stat = [&](int64_t which, int64_t slot, int64_t rows) {
    return stat(2 * kTileStats + which + kSlotStats * slot, rows);
  };
  enum { kLse = 0 };                                             // per query tile
  // Per section slot: the section's row max, nm = -scale * (running max), the section's row sums,
  // the rescale factor, and the running row sums l.
  enum { kSecMax = 0, kNegMax = 1, kRowSum = 2, kRescale = 3, kSum = 4 };

  struct QueryTile {
    int64_t batch, head, kv_index, kv_parity, parity;
    Range rows;
    int64_t sections;
  };
  struct Section {
    int64_t tile;   // index into query_tiles
    Range keys;     // up to kSection keys
    int64_t index;  // within the tile
    int64_t count;  // sections emitted before this one (all tiles)
    int64_t bank;   // first of its PSUM score banks
  };
  std::vector<QueryTile> query_tiles;
  int64_t section_count = 0, kv_count = 0, next_bank = 0;
  auto ring_slot = [&](const Section& s) { return s.count % ring; };

  auto stage_matmul = [&](const Section& sec) {
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    const Range& kr = sec.keys;
    const int64_t qw = qt.rows.size, kw = kr.size, s0 = sec.bank * kBankColumns;
    for (const Range& blk : tiles(kw, kKeyBlock)) {
      b.emit(Opcode::nc_matmul)
          .tensor("dst", b.view(s_ps, {span(0, qw), span(s0 + blk.begin, blk.size)}))
          .tensor("stationary", b.view(q_t, {all(), at(qt.parity), span(0, qw)}))
          .tensor("moving", b.view(k_t, {all(), at(qt.kv_parity), span(kr.begin + blk.begin, blk.size)}))
          .word("accumulate", "false");
    }
    if (spec.causal && kr.begin + kw > qt.rows.begin) {
      // The diagonal square: queries rows.begin + i, keys rows.begin + j, masked where j > i.
      const int64_t offset = qt.rows.begin - kr.begin;
      b.emit(Opcode::nc_matmul)
          .tensor("dst", b.view(s_ps, {span(0, qw), span(s0 + offset, qw)}))
          .tensor("stationary", b.view(ident, {span(0, qw), span(0, qw)}))
          .tensor("moving", b.view(mask, {span(0, qw), span(0, qw)}))
          .word("accumulate", "true");
    }
  };

  // What the softmax stages of a section read: its query rows, keys, ring slot (and the previous
  // section's), and its scores in PSUM.
  struct SectionView {
    int64_t qw, kw, rs, prev;
    bool first;
    isa::AccessPattern scores;
  };
  auto section_view = [&](const Section& sec) {
    const int64_t qw = query_tiles[size_t(sec.tile)].rows.size, kw = sec.keys.size, rs = ring_slot(sec);
    return SectionView{qw, kw, rs, (rs + ring - 1) % ring, sec.index == 0,
                       b.view(s_ps, {span(0, qw), span(sec.bank * kBankColumns, kw)})};
  };

  auto stage_softmax = [&](const Section& sec) {
    const auto [qw, kw, rs, prev, first, scores] = section_view(sec);
    // Row max of the section on the Vector engine (its one pass over the fp32 scores); GpSimd
    // folds it into nm = -scale * running max in one instruction, off the Vector engine.
    b.emit(Opcode::tensor_reduce).tensor("dst", slot_stat(kSecMax, rs, qw)).word("op", "maximum")
        .tensor("data", scores).word("axis", "[1]");
    auto nm = b.emit(Opcode::tensor_scalar);
    nm.tensor("dst", slot_stat(kNegMax, rs, qw)).tensor("data", slot_stat(kSecMax, rs, qw))
        .word("op0", "multiply").imm("operand0", -scale);
    if (!first) nm.word("op1", "minimum").tensor("operand1", slot_stat(kNegMax, prev, qw));
    nm.on(Engine::gpsimd);
  };

  auto stage_exp = [&](const Section& sec) {
    const auto [qw, kw, rs, prev, first, scores] = section_view(sec);
    b.emit(Opcode::activation).tensor("dst", b.view(p_sb, {span(0, qw), at(rs), span(0, kw)})).word("op", "exp")
        .tensor("data", scores).imm("scale", scale).tensor("bias", slot_stat(kNegMax, rs, qw)).word("reduce_op", "add")
        .tensor("reduce_res", slot_stat(first ? kSum : kRowSum, rs, qw));
    if (!first) {
      // exp(scale * (m_old - m_new)) = exp(nm_new - nm_old).
      b.emit(Opcode::activation).tensor("dst", slot_stat(kRescale, rs, qw)).word("op", "exp")
          .tensor("data", slot_stat(kNegMax, prev, qw)).imm("scale", -1.0).tensor("bias", slot_stat(kNegMax, rs, qw));
    }
  };

  // logsumexp of scale * S = scale * max + log(sum) = log(l) - nm, what the backward recomputes P
  // from: the log on the Scalar engine and a section later the subtraction on GpSimd, both well
  // after l is final, so that neither engine waits in its in-order stream.
  auto lse_tile = [&](const Section& sec) {
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    return spec.write_lse && sec.index + 1 == qt.sections;
  };
  auto stage_log = [&](const Section& sec) {
    if (!lse_tile(sec)) return;
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    b.emit(Opcode::activation).tensor("dst", tile_stat(kLse, qt.parity, qt.rows.size)).word("op", "log")
        .tensor("data", slot_stat(kSum, ring_slot(sec), qt.rows.size));
  };
  auto stage_lse = [&](const Section& sec) {
    if (!lse_tile(sec)) return;
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    isa::AccessPattern lse = tile_stat(kLse, qt.parity, qt.rows.size);
    b.emit(Opcode::tensor_tensor).tensor("dst", lse).tensor("data1", lse)
        .tensor("data2", slot_stat(kNegMax, ring_slot(sec), qt.rows.size)).word("op", "subtract").on(Engine::gpsimd);
    b.emit(Opcode::dma_copy)
        .tensor("dst", b.view(uint32_t(t.lse), {at(qt.batch), at(qt.head), span(qt.rows)}))
        .tensor("src", lse)
        .imm("queue", 9);
  };

  auto stage_values = [&](const Section& sec) {
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    const Range& kr = sec.keys;
    const int64_t qw = qt.rows.size, kw = kr.size, rs = ring_slot(sec), ps = sec.count % kPvSlots;
    // P^T in 128-key tiles by DMA transpose on four queues (each runs at half the DMA rate, so
    // they overlap). The PE array has the time for the transposes, but their PSUM evacuation would
    // land on the Vector or Scalar engine, which are the bottleneck.
    const int64_t sub_tiles = ceil_div(kw, p);
    for (int64_t c = 0; c < sub_tiles; ++c) {
      const int64_t cw = std::min(p, kw - c * p);
      b.emit(Opcode::dma_transpose)
          .tensor("dst", b.view(pt_sb, {span(0, cw), at(rs), at(c), span(0, qw)}))
          .tensor("src", b.view(p_sb, {span(0, qw), at(rs), span(c * p, cw)}))
          .imm("queue", 4 + c % 4);
    }
    isa::AccessPattern pv = b.view(pv_ps, {span(0, qw), at(ps), all()});
    for (int64_t c = 0; c < sub_tiles; ++c) {
      const int64_t cw = std::min(p, kw - c * p);
      b.emit(Opcode::nc_matmul)
          .tensor("dst", pv)
          .tensor("stationary", b.view(pt_sb, {span(0, cw), at(rs), at(c), span(0, qw)}))
          .tensor("moving", b.view(v_sb, {span(0, cw), at(qt.kv_parity), at(kr.begin / p + c), all()}))
          .word("accumulate", c ? "true" : "false");
    }
  };

  auto stage_output = [&](const Section& sec) {
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    const int64_t qw = qt.rows.size, rs = ring_slot(sec), ps = sec.count % kPvSlots;
    const bool first = sec.index == 0;
    isa::AccessPattern pv = b.view(pv_ps, {span(0, qw), at(ps), all()});
    // o = o * rescale + P V, l = l * rescale + row sums (online softmax, here and in stage_update
    // and stage_finish); the first section of a tile just copies P V into o.
    isa::AccessPattern o = b.view(o_sb, {span(0, qw), at(qt.parity), all()});
    isa::AccessPattern staged = b.view(pv_sb, {span(0, qw), at(rs), all()});
    if (first) {
      b.emit(Opcode::activation).tensor("dst", o).word("op", "copy").tensor("data", pv);
    } else if (!vector_adds_pv) {
      // The Scalar engine drains P V to SBUF (GpSimd, which adds it, cannot read PSUM).
      b.emit(Opcode::activation).tensor("dst", staged).word("op", "copy").tensor("data", pv);
    }
  };

  auto stage_update = [&](const Section& sec) {
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    const int64_t qw = qt.rows.size, rs = ring_slot(sec);
    const bool first = sec.index == 0;
    isa::AccessPattern o = b.view(o_sb, {span(0, qw), at(qt.parity), all()});
    isa::AccessPattern staged = b.view(pv_sb, {span(0, qw), at(rs), all()});
    if (!first) {
      b.emit(Opcode::tensor_scalar).tensor("dst", o).tensor("data", o).word("op0", "multiply")
          .tensor("operand0", slot_stat(kRescale, rs, qw)).on(Engine::gpsimd);
      if (!vector_adds_pv) {
        b.emit(Opcode::tensor_tensor).tensor("dst", o).tensor("data1", o).tensor("data2", staged).word("op", "add")
            .on(Engine::gpsimd);
      }
      b.emit(Opcode::tensor_scalar).tensor("dst", slot_stat(kSum, rs, qw))
          .tensor("data", slot_stat(kSum, (rs + ring - 1) % ring, qw)).word("op0", "multiply")
          .tensor("operand0", slot_stat(kRescale, rs, qw)).word("op1", "add")
          .tensor("operand1", slot_stat(kRowSum, rs, qw)).on(Engine::gpsimd);
    }
  };

  // The part of the output update that trails stage_update by a section: the Vector engine's add of
  // P V (when it does it: it then finds GpSimd's rescale done instead of waiting for it), and the
  // final normalisation.
  auto stage_finish = [&](const Section& sec) {
    const QueryTile& qt = query_tiles[size_t(sec.tile)];
    const int64_t qw = qt.rows.size, rs = ring_slot(sec), ps = sec.count % kPvSlots;
    const bool first = sec.index == 0, last = sec.index + 1 == qt.sections;
    isa::AccessPattern o = b.view(o_sb, {span(0, qw), at(qt.parity), all()});
    if (!first && vector_adds_pv) {
      b.emit(Opcode::tensor_tensor).tensor("dst", o).tensor("data1", o)
          .tensor("data2", b.view(pv_ps, {span(0, qw), at(ps), all()})).word("op", "add");
    }
    if (last) {
      // Normalise once (GpSimd divides by the row sums) and store.
      isa::AccessPattern out = b.view(out_sb, {span(0, qw), at(qt.parity), all()});
      b.emit(Opcode::tensor_scalar).tensor("dst", out).tensor("data", o).word("op0", "divide")
          .tensor("operand0", slot_stat(kSum, rs, qw)).on(Engine::gpsimd);
      b.emit(Opcode::dma_copy)
          .tensor("dst", b.view(t.o, {at(qt.batch), at(qt.head), span(qt.rows), all()}))
          .tensor("src", out)
          .imm("queue", 8);
    }
  };

  std::vector<Section> sections;
  // Stages of a section in emission order, and how many sections each trails the newest score
  // matmuls by. Each engine runs its instructions in order, so this table decides who waits for
  // whom. The critical loop is scores -> row max (Vector) -> nm (GpSimd) -> exp (Scalar), which
  // frees the PSUM banks for the scores three sections on: the next scores are issued before the
  // Vector engine starts this row max; GpSimd runs the output update of an old section right after
  // the nm it is on the critical path for (its inputs long ready); the Scalar engine drains an old
  // P V before the exp; the transposes and P V trail far enough not to stall the PE array. A
  // stage that must follow another of the same section has a larger lag, or the same lag and a
  // later place in the table (what `flush` relies on).
  const std::array<std::function<void(const Section&)>, 9> stages{
      stage_matmul, stage_softmax, stage_lse, stage_finish, stage_update, stage_output, stage_log, stage_exp,
      stage_values};
  const std::array<int64_t, 9> lags{
      0, 1, 5 + kOutputLag, 3 + kOutputLag, 2 + kOutputLag, 1 + kOutputLag, 4 + kOutputLag, 1, 1 + kValuesLag};
  std::array<size_t, 9> next{};
  // Emit, stage by stage, what the lags allow with `newest` sections pushed, up to `until`.
  auto advance = [&](int64_t newest, size_t until) {
    for (size_t s = 0; s < stages.size(); ++s) {
      while (int64_t(next[s]) < std::min<int64_t>(newest - lags[s], int64_t(until))) stages[s](sections[next[s]++]);
    }
  };
  // Everything of the sections before `until`, in the order steady state would emit it.
  auto flush = [&](size_t until) {
    for (int64_t newest = int64_t(sections.size()); *std::min_element(next.begin(), next.end()) < until; ++newest) {
      advance(newest, until);
    }
  };
  const int64_t group = spec.heads / spec.kv_heads;
  // Split across cores by (batch, head, query tile) blocks in this loop order: each core takes a
  // contiguous run of them (so it loads K and V only for the kv heads its run touches), balanced by
  // the number of key blocks (causal tiles near the top have fewer). Rows are independent, so the
  // values equal the one-core values.
  std::vector<int64_t> owner;
  {
    std::vector<int64_t> cost;
    int64_t total = 0;
    for (int64_t i = 0; i < spec.batch * spec.heads; ++i) {
      for (const Range& qr : tiles(sq, kQueryTile)) {
        cost.push_back(ceil_div(spec.causal ? std::min(sk, qr.begin + qr.size) : sk, kKeyBlock));
        total += cost.back();
      }
    }
    int64_t before = 0;
    for (int64_t c : cost) {
      // The core whose equal share of the total holds this tile's midpoint.
      owner.push_back(std::min<int64_t>(int64_t(ctx.cores) - 1, (2 * before + c) * int64_t(ctx.cores) / (2 * total)));
      before += c;
    }
  }
  const int64_t tiles_per_head = ceil_div(sq, kQueryTile);
  // DMA queues: K^T on 0, V alternately on 1 and 10 (a queue runs its transfers one after
  // another and the first sections wait for V; more queues take bandwidth from the P^T
  // transposes), Q^T on 2-3, P^T on 4-7, O on 8, lse on 9.
  constexpr std::array<int64_t, 2> kVQueues{1, 10};
  int64_t global_tile = 0;
  for (int64_t batch = 0; batch < spec.batch; ++batch) {
    for (int64_t kvh = 0; kvh < spec.kv_heads; ++kvh) {
      const int64_t first = global_tile, count = group * tiles_per_head;
      global_tile += count;
      if (std::find(owner.begin() + first, owner.begin() + first + count, int64_t(ctx.core)) ==
          owner.begin() + first + count) {
        continue;  // no query tile of this kv head is this core's
      }
      int64_t head_tile = first;
      const int64_t kv_index = kv_count++, kvp = kv_index % 2;
      // The kv head two back used these K^T and V buffers: emit all of its sections first.
      size_t done = 0;
      while (done < sections.size() && query_tiles[size_t(sections[done].tile)].kv_index <= kv_index - 2) ++done;
      flush(done);
      // K^T [d, Sk] in 512-row DMA transposes; V in 128-key tiles with keys on partitions.
      for (const Range& r : tiles(sk, kKeyBlock)) {
        b.emit(Opcode::dma_transpose)
            .tensor("dst", b.view(k_t, {all(), at(kvp), span(r)}))
            .tensor("src", b.view(t.k, {at(batch), at(kvh), span(r), all()}))
            .imm("queue", 0);
      }
      for (int64_t kt = 0; kt < key_tiles; ++kt) {
        const Range r{kt * p, std::min(p, sk - kt * p)};
        b.emit(Opcode::dma_copy)
            .tensor("dst", b.view(v_sb, {span(0, r.size), at(kvp), at(kt), all()}))
            .tensor("src", b.view(t.v, {at(batch), at(kvh), span(r), all()}))
            .imm("queue", kVQueues[size_t(kt) % kVQueues.size()]);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (const Range& qr : tiles(sq, kQueryTile)) {
          if (owner[size_t(head_tile++)] != int64_t(ctx.core)) continue;
          const int64_t tile_index = int64_t(query_tiles.size());
          const int64_t parity = tile_index % 2, qw = qr.size;
          const int64_t key_end = spec.causal ? std::min(sk, qr.begin + qw) : sk;
          // Sections of near-equal width (multiples of 128 keys), so that no short section leaves
          // the pipeline waiting on fixed latencies.
          const int64_t width = ceil_div(ceil_div(key_end, ceil_div(key_end, kSection)), p) * p;
          query_tiles.push_back({batch, h, kv_index, kvp, parity, qr, ceil_div(key_end, width)});
          // No wait for the tile two back, whose q, o, out and lse buffers this one reuses: every
          // stage touching them is emitted in section order, and its statistics live in the ring.
          b.emit(Opcode::dma_transpose)
              .tensor("dst", b.view(q_t, {all(), at(parity), span(0, qw)}))
              .tensor("src", b.view(t.q, {at(batch), at(h), span(qr), all()}))
              .imm("queue", 2 + parity);
          int64_t index = 0;
          for (const Range& kr : tiles(key_end, width)) {
            const int64_t banks = ceil_div(kr.size, kBankColumns);
            if (next_bank + banks > kScoreBanks) next_bank = 0;
            sections.push_back({tile_index, kr, index++, section_count++, next_bank});
            next_bank += banks;
            advance(int64_t(sections.size()), sections.size());
          }
        }
      }
    }
  }
  flush(sections.size());
}

isa::Program flash_attention_forward_program(const AttentionSpec& spec, const HardwareConfig& config, uint32_t core,
                                              uint32_t cores) {
  isa::ProgramBuilder b("flash_attention_fwd", config.generation);
  auto shape = [](int64_t a, int64_t h, int64_t s, int64_t d) {
    return std::vector<uint32_t>{uint32_t(a), uint32_t(h), uint32_t(s), uint32_t(d)};
  };
  AttentionTensors t{};
  t.q = b.hbm("q", spec.dtype, shape(spec.batch, spec.heads, spec.seq_q, spec.head_dim), isa::AllocationRole::input);
  t.k = b.hbm("k", spec.dtype, shape(spec.batch, spec.kv_heads, spec.seq_k, spec.head_dim), isa::AllocationRole::input);
  t.v = b.hbm("v", spec.dtype, shape(spec.batch, spec.kv_heads, spec.seq_k, spec.head_dim), isa::AllocationRole::input);
  t.o = b.hbm("o", spec.dtype, shape(spec.batch, spec.heads, spec.seq_q, spec.head_dim), isa::AllocationRole::output);
  if (spec.write_lse) {
    t.lse = b.hbm("lse", DType::fp32, {uint32_t(spec.batch), uint32_t(spec.heads), uint32_t(spec.seq_q)},
                  isa::AllocationRole::output);
  }
  KernelContext ctx{b, config, "", core, cores};
  build_flash_attention_forward(ctx, spec, t);
  return b.finish();
}

}  // namespace trnsim::kernels
