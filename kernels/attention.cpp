#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "isa/isa_error.h"

namespace trnsim::kernels {
namespace {

using isa::Opcode;
constexpr int64_t kQueryTile = 128;
constexpr int64_t kKeyBlock = 512;  // one fp32 PSUM bank of scores per query row

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
    throw isa::IsaError("flash attention: head_dim must be 1..128, sequences non-empty, heads a multiple of kv_heads");
  }
  if (!ctx.config.core.dma.transpose_supported || dtype_size_bytes(spec.dtype) != 2) {
    throw isa::IsaError("flash attention loads Q^T and K^T by DMA transpose: needs a 2-byte dtype on trn2 or later");
  }
  if (spec.causal && sq != sk) throw isa::IsaError("flash attention: causal needs seq_q == seq_k");
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(double(d));
  const DType dt = spec.dtype;
  const uint32_t up = uint32_t(p), ud = uint32_t(d);
  const int64_t key_tiles = ceil_div(sk, p);

  // Pipeline depth: the scores/max/exp of block i are emitted before the transposes/P V/rescale
  // of block i - kDepth, across query-tile boundaries, because every engine runs its instructions
  // in order and one block's chain (scores -> max -> exp -> P^T -> P V -> rescale) is ~3x longer
  // than its throughput cost. Slots rotate over kDepth + 1 blocks.
  constexpr int64_t kDepth = 3;
  // P^T by DMA transpose only: the PE-array path needs a PSUM evacuation on the Scalar engine,
  // which then sits in that engine's in-order stream behind later blocks' exps and couples the
  // engines into one chain; four DMA queues keep up with the Vector-bound block rate.
  const bool dma_transposes_only = true;
  constexpr int64_t kSlots = kDepth + 1;
  const uint32_t us = uint32_t(kSlots);
  // K^T and V per kv head, double-buffered so the next head's loads overlap this head's tail.
  uint32_t k_t = b.sbuf(ctx.name("fa_kT"), dt, {ud, 2, uint32_t(sk)});
  uint32_t v_sb = b.sbuf(ctx.name("fa_v"), dt, {up, 2, uint32_t(key_tiles), ud});
  uint32_t q_t = b.sbuf(ctx.name("fa_qT"), dt, {ud, 2, uint32_t(kQueryTile)});
  uint32_t s_ps = b.psum(ctx.name("fa_s"), DType::fp32, {up, us, uint32_t(kKeyBlock)});  // a bank per slot
  uint32_t pt_ps = b.psum(ctx.name("fa_pT"), DType::fp32, {up, 2, uint32_t(kQueryTile)});
  uint32_t pv_ps = b.psum(ctx.name("fa_pv"), DType::fp32, {up, us, ud});
  uint32_t s_sb = b.sbuf(ctx.name("fa_s_masked"), DType::fp32, {up, us, uint32_t(kKeyBlock)});
  uint32_t p_sb = b.sbuf(ctx.name("fa_p"), dt, {up, us, uint32_t(kKeyBlock)});
  uint32_t pt_sb = b.sbuf(ctx.name("fa_pT_sb"), dt, {up, us, uint32_t(kKeyBlock / p), uint32_t(kQueryTile)});
  // Per-row statistics, each in its own 256-byte run so that dependency tracking (like the
  // hardware's semaphores) sees them as separate: per query-tile parity m[2], l, 1/l; per block
  // slot the block max, -scale*max, row sums and the rescale factor.
  constexpr int64_t kStatStride = 64;  // fp32 elements = 256 bytes
  uint32_t stats = b.sbuf(ctx.name("fa_stats"), DType::fp32, {up, uint32_t((10 + 4 * kSlots) * kStatStride)});
  uint32_t o_sb = b.sbuf(ctx.name("fa_o"), DType::fp32, {up, 2, ud});
  uint32_t out_sb = b.sbuf(ctx.name("fa_out"), dt, {up, 2, ud});
  uint32_t zeros = 0, masks = 0;
  if (spec.causal) {
    // Additive causal masks (0 / -inf) for the 4 ways a 128-row query tile can sit on a 512-key
    // diagonal block, built once on GpSimd: keep where (row offset + p) - i >= 0.
    zeros = b.sbuf(ctx.name("fa_zeros"), DType::fp32, {up, uint32_t(kKeyBlock)});
    masks = b.sbuf(ctx.name("fa_masks"), DType::fp32, {up, uint32_t(kKeyBlock / kQueryTile), uint32_t(kKeyBlock)});
    b.emit(Opcode::memset).tensor("dst", b.view(zeros)).imm("value", 0).on(Engine::gpsimd);
    for (int64_t o = 0; o < kKeyBlock / kQueryTile; ++o) {
      b.emit(Opcode::affine_select)
          .tensor("dst", b.view(masks, {all(), at(o)}))
          .word("pattern", "[[-1, " + std::to_string(kKeyBlock) + "]]")
          .imm("channel_multiplier", 1)
          .imm("offset", double(o * kQueryTile))
          .tensor("on_true_tile", b.view(zeros))
          .imm("on_false_value", -INFINITY)
          .word("cmp_op", "greater_equal");
    }
  }
  auto stat = [&](int64_t column, int64_t rows) {
    return b.view(stats, {span(0, rows), span(column * kStatStride, 1)});
  };
  auto tile_stat = [&](int64_t which, int64_t parity, int64_t rows) { return stat(which + 5 * parity, rows); };
  auto slot_stat = [&](int64_t which, int64_t slot, int64_t rows) { return stat(10 + which + 4 * slot, rows); };
  enum { kMax0 = 0, kMax1 = 1, kSum = 2, kInvSum = 3, kLse = 4 };   // per query tile
  enum { kBlockMax = 0, kNegMax = 1, kRowSum = 2, kRescale = 3 };   // per block slot

  struct QueryTile {
    int64_t batch, head, kv_parity, parity;
    Range rows;
    int64_t blocks;
  };
  struct Block {
    int64_t tile;  // index into tiles_
    Range keys;
    int64_t index, slot;
  };
  std::vector<QueryTile> query_tiles;
  std::vector<Block> pending;
  int64_t block_count = 0, kv_count = 0;

  auto stage_scores = [&](const Block& blk) {
    const QueryTile& qt = query_tiles[blk.tile];
    const Range& kr = blk.keys;
    const int64_t qw = qt.rows.size, kw = kr.size, bs = blk.slot;
    const int64_t m_old = blk.index % 2 ? kMax1 : kMax0, m_new = blk.index % 2 ? kMax0 : kMax1;
    isa::AccessPattern scores = b.view(s_ps, {span(0, qw), at(bs), span(0, kw)});
    b.emit(Opcode::nc_matmul)
        .tensor("dst", scores)
        .tensor("stationary", b.view(q_t, {all(), at(qt.parity), span(0, qw)}))
        .tensor("moving", b.view(k_t, {all(), at(qt.kv_parity), span(kr)}))
        .word("accumulate", "false");
    isa::AccessPattern src = scores;
    if (spec.causal && kr.begin + kw > qt.rows.begin) {
      const int64_t offset = qt.rows.begin - kr.begin;  // 0, 128, 256 or 384
      src = b.view(s_sb, {span(0, qw), at(bs), span(0, kw)});
      b.emit(Opcode::tensor_tensor)
          .tensor("dst", src)
          .tensor("data1", scores)
          .tensor("data2", b.view(masks, {span(0, qw), at(offset / kQueryTile), span(0, kw)}))
          .word("op", "add");
    }
    b.emit(Opcode::tensor_reduce).tensor("dst", slot_stat(kBlockMax, bs, qw)).word("op", "maximum")
        .tensor("data", src).word("axis", "[1]");
    b.emit(Opcode::tensor_tensor).tensor("dst", tile_stat(m_new, qt.parity, qw))
        .tensor("data1", tile_stat(m_old, qt.parity, qw)).tensor("data2", slot_stat(kBlockMax, bs, qw))
        .word("op", "maximum");
    // -scale * max on the Scalar engine, just ahead of the exp that uses it (the Vector engine is
    // the bottleneck of this kernel).
    b.emit(Opcode::tensor_scalar).tensor("dst", slot_stat(kNegMax, bs, qw)).tensor("data", tile_stat(m_new, qt.parity, qw))
        .word("op0", "multiply").imm("operand0", -scale).on(Engine::scalar);
    b.emit(Opcode::activation).tensor("dst", b.view(p_sb, {span(0, qw), at(bs), span(0, kw)})).word("op", "exp")
        .tensor("data", src).imm("scale", scale).tensor("bias", slot_stat(kNegMax, bs, qw)).word("reduce_op", "add")
        .tensor("reduce_res", slot_stat(kRowSum, bs, qw));
    b.emit(Opcode::activation).tensor("dst", slot_stat(kRescale, bs, qw)).word("op", "exp")
        .tensor("data", tile_stat(m_old, qt.parity, qw)).imm("scale", scale).tensor("bias", slot_stat(kNegMax, bs, qw));
  };

  auto stage_values = [&](const Block& blk) {
    const QueryTile& qt = query_tiles[blk.tile];
    const Range& kr = blk.keys;
    const int64_t qw = qt.rows.size, kw = kr.size, bs = blk.slot;
    // P^T in 128-key tiles: even tiles on the PE array (through PSUM), odd ones by DMA.
    const int64_t sub_tiles = ceil_div(kw, p);
    for (int64_t c = 0; c < sub_tiles; ++c) {
      const int64_t cw = std::min(p, kw - c * p);
      isa::AccessPattern pt = b.view(pt_sb, {span(0, cw), at(bs), at(c), span(0, qw)});
      isa::AccessPattern piece = b.view(p_sb, {span(0, qw), at(bs), span(c * p, cw)});
      if (!dma_transposes_only && c % 2 == 0) {
        isa::AccessPattern staged = b.view(pt_ps, {span(0, cw), at(c / 2 % 2), span(0, qw)});
        b.emit(Opcode::nc_transpose).tensor("dst", staged).tensor("data", piece);
        // The Scalar engine drains this PSUM tile; the Vector engine is the busier one here.
        b.emit(Opcode::activation).tensor("dst", pt).word("op", "copy").tensor("data", staged);
      } else {
        b.emit(Opcode::dma_transpose).tensor("dst", pt).tensor("src", piece).imm("queue", 4 + c % 4);
      }
    }
    for (int64_t c = 0; c < sub_tiles; ++c) {
      const int64_t cw = std::min(p, kw - c * p);
      b.emit(Opcode::nc_matmul)
          .tensor("dst", b.view(pv_ps, {span(0, qw), at(bs), all()}))
          .tensor("stationary", b.view(pt_sb, {span(0, cw), at(bs), at(c), span(0, qw)}))
          .tensor("moving", b.view(v_sb, {span(0, cw), at(qt.kv_parity), at(kr.begin / p + c), all()}))
          .word("accumulate", c ? "true" : "false");
    }
    // o = o * rescale + P V, l = l * rescale + row sums (online softmax).
    isa::AccessPattern o = b.view(o_sb, {span(0, qw), at(qt.parity), all()});
    // The rescale runs on GpSimd (SBUF only); the Vector engine adds P V straight from PSUM, one
    // pass (PSUM + SBUF inputs) instead of the two a fused scalar_tensor_tensor costs.
    b.emit(Opcode::tensor_scalar).tensor("dst", o).tensor("data", o).word("op0", "multiply")
        .tensor("operand0", slot_stat(kRescale, bs, qw)).on(Engine::gpsimd);
    b.emit(Opcode::tensor_tensor).tensor("dst", o).tensor("data1", o)
        .tensor("data2", b.view(pv_ps, {span(0, qw), at(bs), all()})).word("op", "add");
    b.emit(Opcode::scalar_tensor_tensor).tensor("dst", tile_stat(kSum, qt.parity, qw))
        .tensor("data", tile_stat(kSum, qt.parity, qw)).word("op0", "multiply")
        .tensor("operand0", slot_stat(kRescale, bs, qw)).word("op1", "add")
        .tensor("operand1", slot_stat(kRowSum, bs, qw));
    if (blk.index + 1 == qt.blocks) {
      // Last block of the tile: normalise once and store.
      const int64_t qw_rows = qt.rows.size;
      b.emit(Opcode::reciprocal).tensor("dst", tile_stat(kInvSum, qt.parity, qw_rows))
          .tensor("data", tile_stat(kSum, qt.parity, qw_rows));
      isa::AccessPattern out = b.view(out_sb, {span(0, qw_rows), at(qt.parity), all()});
      b.emit(Opcode::tensor_scalar).tensor("dst", out).tensor("data", o).word("op0", "multiply")
          .tensor("operand0", tile_stat(kInvSum, qt.parity, qw_rows));
      b.emit(Opcode::dma_copy)
          .tensor("dst", b.view(t.o, {at(qt.batch), at(qt.head), span(qt.rows), all()}))
          .tensor("src", out)
          .imm("queue", 8);
      if (spec.write_lse) {
        // logsumexp of scale * S = scale * max + log(sum): the backward recomputes P from it.
        const int64_t m_final = blk.index % 2 ? kMax0 : kMax1;
        isa::AccessPattern lse = tile_stat(kLse, qt.parity, qw_rows);
        b.emit(Opcode::activation).tensor("dst", lse).word("op", "log").tensor("data", tile_stat(kSum, qt.parity, qw_rows));
        b.emit(Opcode::scalar_tensor_tensor).tensor("dst", lse).tensor("data", tile_stat(m_final, qt.parity, qw_rows))
            .word("op0", "multiply").imm("operand0", scale).word("op1", "add").tensor("operand1", lse);
        b.emit(Opcode::dma_copy)
            .tensor("dst", b.view(uint32_t(t.lse), {at(qt.batch), at(qt.head), span(qt.rows)}))
            .tensor("src", lse)
            .imm("queue", 9);
      }
    }
  };

  auto drain = [&](size_t keep) {
    while (pending.size() > keep) {
      stage_values(pending.front());
      pending.erase(pending.begin());
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
      const int64_t kvp = kv_count++ % 2;
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
            .imm("queue", 1);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (const Range& qr : tiles(sq, kQueryTile)) {
          if (owner[size_t(head_tile++)] != int64_t(ctx.core)) continue;
          const int64_t tile_index = int64_t(query_tiles.size());
          const int64_t parity = tile_index % 2, qw = qr.size;
          const int64_t key_end = spec.causal ? std::min(sk, qr.begin + qw) : sk;
          query_tiles.push_back({batch, h, kvp, parity, qr, ceil_div(key_end, kKeyBlock)});
          // The tile two back used the same parity buffers: finish it before reusing them.
          while (!pending.empty() && pending.front().tile <= tile_index - 2) drain(pending.size() - 1);
          b.emit(Opcode::dma_transpose)
              .tensor("dst", b.view(q_t, {all(), at(parity), span(0, qw)}))
              .tensor("src", b.view(t.q, {at(batch), at(h), span(qr), all()}))
              .imm("queue", 2 + parity);
          b.emit(Opcode::memset).tensor("dst", b.view(o_sb, {span(0, qw), at(parity), all()})).imm("value", 0);
          b.emit(Opcode::memset).tensor("dst", tile_stat(kSum, parity, qw)).imm("value", 0);
          b.emit(Opcode::memset).tensor("dst", tile_stat(kMax0, parity, qw)).imm("value", -INFINITY);
          int64_t index = 0;
          for (const Range& kr : tiles(key_end, kKeyBlock)) {
            Block blk{tile_index, kr, index++, block_count++ % kSlots};
            stage_scores(blk);
            pending.push_back(blk);
            drain(kDepth);
          }
        }
      }
    }
  }
  drain(0);
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
