#include "kernels/attention_backward.h"

#include <array>
#include <cmath>

#include "isa/isa_error.h"

namespace trnsim::kernels {
namespace {

using isa::Opcode;
constexpr int64_t kQueryTile = 128;
constexpr int64_t kKeyBlock = 512;  // one fp32 PSUM bank of scores per query row
constexpr int64_t kSubTiles = kKeyBlock / kQueryTile;
// Query tiles whose scores are in flight ahead of the gradients (software pipelining depth):
// the chain S -> exp -> dP - D -> dS spans three engines, so one tile ahead leaves the PE idle.
constexpr int64_t kLookahead = 2;
constexpr int64_t kSlots = kLookahead + 1;  // SBUF slots of P, dS, dS^T

// DMA queues: the per-head loads, the per-block loads, the dS transposes and the stores each get
// their own, so no transfer waits behind an unrelated one in a queue (queues serve in order).
enum Queue : uint32_t {
  kQtQueue = 0, kDotQueue = 1, kQQueue = 2, kDoQueue = 3, kOQueue = 4, kLseQueue = 5,
  kKtQueue = 6, kVtQueue = 7, kKQueue = 8, kDqStoreQueue = 11, kDkStoreQueue = 12, kDvStoreQueue = 13,
};
constexpr uint32_t kTransposeQueues[kSubTiles] = {9, 10, 14, 15};

// dst = src * mult (+ acc): one PSUM evacuation that applies the softmax scale and, for every
// contribution after the first, adds what the earlier ones left in SBUF (fp32).
void scale_add(isa::ProgramBuilder& b, const isa::AccessPattern& dst, const isa::AccessPattern& src, double mult,
               const isa::AccessPattern* acc, Engine engine) {
  if (acc) {
    b.emit(Opcode::scalar_tensor_tensor).tensor("dst", dst).tensor("data", src).word("op0", "multiply")
        .imm("operand0", mult).word("op1", "add").tensor("operand1", *acc);
  } else if (engine == Engine::scalar) {
    b.emit(Opcode::activation).tensor("dst", dst).word("op", "copy").tensor("data", src).imm("scale", mult);
  } else {
    b.emit(Opcode::tensor_scalar).tensor("dst", dst).tensor("data", src).word("op0", "multiply").imm("operand0", mult);
  }
}

// An SBUF buffer that ends on a 256-byte boundary of each partition, so the next one does not
// share a dependency-tracking granule with it (which would serialise unrelated double-buffer slots).
uint32_t sbuf_padded(const KernelContext& ctx, const std::string& name, DType dtype, std::vector<uint32_t> shape) {
  constexpr uint64_t kGranuleBytes = 256;
  uint64_t bytes = dtype_size_bytes(dtype);
  for (size_t i = 1; i < shape.size(); ++i) bytes *= shape[i];
  uint32_t id = ctx.builder.sbuf(ctx.name(name), dtype, std::move(shape));
  bytes = ceil_div(int64_t(bytes), 64) * 64;  // the builder places SBUF buffers on 64-byte boundaries
  if (uint64_t pad = (kGranuleBytes - bytes % kGranuleBytes) % kGranuleBytes) {
    ctx.builder.sbuf(ctx.name(name + "_pad"), DType::bf16, {ctx.partitions(), uint32_t(pad / 2)});
  }
  return id;
}

}  // namespace

double attention_backward_flops(const AttentionSpec& spec) { return 2.5 * attention_forward_flops(spec); }

void build_flash_attention_backward(const KernelContext& ctx, const AttentionSpec& spec,
                                    const AttentionBackwardTensors& t) {
  isa::ProgramBuilder& b = ctx.builder;
  const int64_t d = spec.head_dim, sq = spec.seq_q, sk = spec.seq_k;
  const int64_t p = ctx.partitions();
  if (d <= 0 || d > p || sq <= 0 || sk <= 0 || spec.kv_heads <= 0 || spec.heads % spec.kv_heads != 0) {
    throw KernelUnsupported("flash attention backward: head_dim must be 1..128, sequences non-empty, heads a multiple "
                        "of kv_heads");
  }
  if (!ctx.config.core.dma.transpose_supported || dtype_size_bytes(spec.dtype) != 2) {
    throw KernelUnsupported("flash attention backward loads Q^T, dO^T, K^T and V^T by DMA transpose: needs a 2-byte "
                        "dtype on trn2 or later");
  }
  if (spec.causal && sq != sk) throw KernelUnsupported("flash attention backward: causal needs seq_q == seq_k");
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(double(d));
  const DType dt = spec.dtype;
  const uint32_t up = uint32_t(p), ud = uint32_t(d);
  const int64_t q_tiles = ceil_div(sq, kQueryTile), key_tiles = ceil_div(sk, kQueryTile);
  const int64_t group = spec.heads / spec.kv_heads;
  const uint32_t uq = uint32_t(q_tiles), ukb = uint32_t(kKeyBlock), ut = uint32_t(kQueryTile);

  // Per query head, resident: the Q and dO sides in both layouts, -L and D per row, fp32 dQ.
  const uint64_t resident = uint64_t(sq) * 2 * 2 + uint64_t(q_tiles) * ud * (2 * 2 + 4) +
                            (group > 1 ? uint64_t(key_tiles) * ud * 4 * 2 : 0);
  if (resident + 64 * 1024 > ctx.config.core.sbuf.bytes_per_partition) {
    throw KernelUnsupported("flash attention backward: seq_q " + std::to_string(sq) + " / seq_k " + std::to_string(sk) +
                        " do not fit the per-head SBUF residency of this kernel");
  }
  uint32_t q_t = sbuf_padded(ctx, "fab_qT", dt, {ud, uint32_t(sq)});
  uint32_t do_t = sbuf_padded(ctx, "fab_doT", dt, {ud, uint32_t(sq)});
  uint32_t q_sb = sbuf_padded(ctx, "fab_q", dt, {up, uq, ud});
  uint32_t do_sb = sbuf_padded(ctx, "fab_do", dt, {up, uq, ud});
  uint32_t o_sb = sbuf_padded(ctx, "fab_o", dt, {up, 2, ud});
  uint32_t prod = sbuf_padded(ctx, "fab_do_o", DType::fp32, {up, 2, ud});
  uint32_t rows = sbuf_padded(ctx, "fab_rows", DType::fp32, {up, 2, uq});  // [:, 0] = -L, [:, 1] = -D
  uint32_t dq_acc = sbuf_padded(ctx, "fab_dq_acc", DType::fp32, {up, uq, ud});
  uint32_t dq_out = sbuf_padded(ctx, "fab_dq_out", dt, {up, 2, ud});
  // Per key block, double-buffered: K^T, V^T [d, 512] and K [512 -> 128-key tiles, d].
  uint32_t k_t = sbuf_padded(ctx, "fab_kT", dt, {ud, 2, ukb});
  uint32_t v_t = sbuf_padded(ctx, "fab_vT", dt, {ud, 2, ukb});
  uint32_t k_sb = sbuf_padded(ctx, "fab_k", dt, {up, 2, uint32_t(kSubTiles), ud});
  // Per (query tile, key block), double-buffered.
  uint32_t p_sb = sbuf_padded(ctx, "fab_p", dt, {up, kSlots, ukb});
  uint32_t dpd_sb = sbuf_padded(ctx, "fab_dp_minus_d", dt, {up, kSlots, ukb});
  uint32_t ds_sb = sbuf_padded(ctx, "fab_ds", dt, {up, kSlots, ukb});
  uint32_t ds_t = sbuf_padded(ctx, "fab_dsT", dt, {up, kSlots, uint32_t(kSubTiles), ut});
  uint32_t dk_out = sbuf_padded(ctx, "fab_dk_out", dt, {up, 2, uint32_t(kSubTiles), ud});
  uint32_t dv_out = sbuf_padded(ctx, "fab_dv_out", dt, {up, 2, uint32_t(kSubTiles), ud});
  // dK and dV summed over the query heads of a group (fp32), only when there is more than one.
  uint32_t dk_acc = 0, dv_acc = 0;
  if (group > 1) {
    dk_acc = sbuf_padded(ctx, "fab_dk_acc", DType::fp32, {up, uint32_t(key_tiles), ud});
    dv_acc = sbuf_padded(ctx, "fab_dv_acc", DType::fp32, {up, uint32_t(key_tiles), ud});
  }
  // PSUM, 7 of the 8 banks: S and dP double-buffered (4), dV and dK of one key block accumulated
  // over the query tiles (2) and dQ (1).
  uint32_t s_ps = b.psum(ctx.name("fab_s"), DType::fp32, {up, 2, ukb});
  uint32_t dp_ps = b.psum(ctx.name("fab_dp"), DType::fp32, {up, 2, ukb});
  uint32_t dv_ps = b.psum(ctx.name("fab_dv"), DType::fp32, {up, uint32_t(kSubTiles), ud});
  uint32_t dk_ps = b.psum(ctx.name("fab_dk"), DType::fp32, {up, uint32_t(kSubTiles), ud});
  uint32_t dq_ps = b.psum(ctx.name("fab_dq"), DType::fp32, {up, 2, ud});
  uint32_t s_masked = 0, masks = 0;
  if (spec.causal) {
    // Additive causal masks (0 / -inf) for the 4 ways a 128-row query tile can sit on a 512-key
    // diagonal block, as in the forward: keep where (row offset + p) - i >= 0.
    s_masked = sbuf_padded(ctx, "fab_s_masked", DType::fp32, {up, 2, ukb});
    uint32_t zeros = sbuf_padded(ctx, "fab_zeros", DType::fp32, {up, ukb});
    masks = sbuf_padded(ctx, "fab_masks", DType::fp32, {up, uint32_t(kSubTiles), ukb});
    b.emit(Opcode::memset).tensor("dst", b.view(zeros)).imm("value", 0).on(Engine::gpsimd);
    for (int64_t o = 0; o < kSubTiles; ++o) {
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
  auto row_stat = [&](int64_t which, int64_t qt, int64_t qw) { return b.view(rows, {span(0, qw), at(which), at(qt)}); };

  const std::vector<Range> key_blocks = tiles(sk, kKeyBlock);
  const std::vector<Range> query_tiles = tiles(sq, kQueryTile);
  int64_t pair_step = 0, block_step = 0, dq_step = 0;
  // Split across cores by (batch, kv head) units in this loop order: each core takes a contiguous
  // share of them, with every query head of the group, so it writes whole dK / dV outputs (no
  // partial sums across cores) and the dQ rows of its query heads. All units cost the same.
  const Range mine = ctx.share(spec.batch * spec.kv_heads);
  for (int64_t batch = 0; batch < spec.batch; ++batch) {
    for (int64_t kvh = 0; kvh < spec.kv_heads; ++kvh) {
      const int64_t unit = batch * spec.kv_heads + kvh;
      if (unit < mine.begin || unit >= mine.begin + mine.size) continue;
      for (int64_t hi = 0; hi < group; ++hi) {
        const int64_t h = kvh * group + hi;
        // ---- per head: Q^T, dO^T (512-row DMA transposes), Q, dO, -L and D = rowsum(dO * O) ----
        for (const Range& r : tiles(sq, kKeyBlock)) {
          b.emit(Opcode::dma_transpose).tensor("dst", b.view(q_t, {all(), span(r)}))
              .tensor("src", b.view(t.q, {at(batch), at(h), span(r), all()})).imm("queue", kQtQueue);
          b.emit(Opcode::dma_transpose).tensor("dst", b.view(do_t, {all(), span(r)}))
              .tensor("src", b.view(t.dout, {at(batch), at(h), span(r), all()})).imm("queue", kDotQueue);
        }
        for (size_t qt = 0; qt < query_tiles.size(); ++qt) {
          const Range& qr = query_tiles[qt];
          const int64_t qw = qr.size, os = int64_t(qt % 2);
          b.emit(Opcode::dma_copy).tensor("dst", b.view(q_sb, {span(0, qw), at(qt), all()}))
              .tensor("src", b.view(t.q, {at(batch), at(h), span(qr), all()})).imm("queue", kQQueue);
          b.emit(Opcode::dma_copy).tensor("dst", b.view(do_sb, {span(0, qw), at(qt), all()}))
              .tensor("src", b.view(t.dout, {at(batch), at(h), span(qr), all()})).imm("queue", kDoQueue);
          b.emit(Opcode::dma_copy).tensor("dst", b.view(o_sb, {span(0, qw), at(os), all()}))
              .tensor("src", b.view(t.o, {at(batch), at(h), span(qr), all()})).imm("queue", kOQueue);
          b.emit(Opcode::dma_copy).tensor("dst", row_stat(0, qt, qw))
              .tensor("src", b.view(t.lse, {at(batch), at(h), span(qr)})).imm("queue", kLseQueue);
          // The GpSimd engine is otherwise idle: it negates L (the exp's bias) and forms dO * O.
          b.emit(Opcode::tensor_scalar).tensor("dst", row_stat(0, qt, qw)).tensor("data", row_stat(0, qt, qw))
              .word("op0", "multiply").imm("operand0", -1.0).on(Engine::gpsimd);
          b.emit(Opcode::tensor_tensor).tensor("dst", b.view(prod, {span(0, qw), at(os), all()}))
              .tensor("data1", b.view(do_sb, {span(0, qw), at(qt), all()}))
              .tensor("data2", b.view(o_sb, {span(0, qw), at(os), all()})).word("op", "multiply").on(Engine::gpsimd);
          b.emit(Opcode::tensor_reduce).tensor("dst", row_stat(1, qt, qw)).word("op", "add")
              .tensor("data", b.view(prod, {span(0, qw), at(os), all()})).word("axis", "[1]").imm("negate", 1);
        }
        for (size_t kbi = 0; kbi < key_blocks.size(); ++kbi) {
          const Range& kb = key_blocks[kbi];
          const int64_t ks = block_step++ % 2, kb_subs = ceil_div(kb.size, kQueryTile);
          // ---- per key block: K^T, V^T and K ----
          b.emit(Opcode::dma_transpose).tensor("dst", b.view(k_t, {all(), at(ks), span(0, kb.size)}))
              .tensor("src", b.view(t.k, {at(batch), at(kvh), span(kb), all()})).imm("queue", kKtQueue);
          b.emit(Opcode::dma_transpose).tensor("dst", b.view(v_t, {all(), at(ks), span(0, kb.size)}))
              .tensor("src", b.view(t.v, {at(batch), at(kvh), span(kb), all()})).imm("queue", kVtQueue);
          for (int64_t c = 0; c < kb_subs; ++c) {
            const Range kr{kb.begin + c * kQueryTile, std::min(kQueryTile, kb.size - c * kQueryTile)};
            b.emit(Opcode::dma_copy).tensor("dst", b.view(k_sb, {span(0, kr.size), at(ks), at(c), all()}))
                .tensor("src", b.view(t.k, {at(batch), at(kvh), span(kr), all()})).imm("queue", kKQueue);
          }
          std::array<bool, kSubTiles> started{};
          struct Pair {
            int64_t qt, slot, ps, kw;  // slot: SBUF, ps: PSUM; kw: the keys at or below the diagonal
            Range qr;
          };
          // Scores, probabilities and dS of one (query tile, key block).
          auto stage_scores = [&](const Pair& pr) {
            const int64_t qw = pr.qr.size, kw = pr.kw, s = pr.slot;
            isa::AccessPattern scores = b.view(s_ps, {span(0, qw), at(pr.ps), span(0, kw)});
            isa::AccessPattern dprobs = b.view(dp_ps, {span(0, qw), at(pr.ps), span(0, kw)});
            b.emit(Opcode::nc_matmul).tensor("dst", scores).tensor("stationary", b.view(q_t, {all(), span(pr.qr)}))
                .tensor("moving", b.view(k_t, {all(), at(ks), span(0, kw)})).word("accumulate", "false");
            b.emit(Opcode::nc_matmul).tensor("dst", dprobs).tensor("stationary", b.view(do_t, {all(), span(pr.qr)}))
                .tensor("moving", b.view(v_t, {all(), at(ks), span(0, kw)})).word("accumulate", "false");
            isa::AccessPattern src = scores;
            if (spec.causal && kb.begin + kw > pr.qr.begin) {
              const int64_t offset = pr.qr.begin - kb.begin;  // 0, 128, 256 or 384
              src = b.view(s_masked, {span(0, qw), at(pr.ps), span(0, kw)});
              b.emit(Opcode::tensor_tensor).tensor("dst", src).tensor("data1", scores)
                  .tensor("data2", b.view(masks, {span(0, qw), at(offset / kQueryTile), span(0, kw)}))
                  .word("op", "add");
            }
            isa::AccessPattern probs = b.view(p_sb, {span(0, qw), at(s), span(0, kw)});
            b.emit(Opcode::activation).tensor("dst", probs).word("op", "exp").tensor("data", src)
                .imm("scale", scale).tensor("bias", row_stat(0, pr.qt, qw));
            // dS = (dP - D) * P, with the softmax scale left for the dK / dQ evacuations. The Scalar
            // engine takes dP - D out of PSUM as bf16 so that the Vector engine's product runs at
            // its 16-bit SBUF rate (a PSUM fp32 operand would halve it, and it is the busier engine).
            isa::AccessPattern shifted = b.view(dpd_sb, {span(0, qw), at(s), span(0, kw)});
            b.emit(Opcode::activation).tensor("dst", shifted).word("op", "copy").tensor("data", dprobs)
                .tensor("bias", row_stat(1, pr.qt, qw));
          };
          // The product is emitted after the previous tiles' gradients, so that the Vector engine
          // (in order) drains their dS^T and dQ before it waits on this tile's chain.
          auto stage_ds = [&](const Pair& pr) {
            const int64_t qw = pr.qr.size, kw = pr.kw, s = pr.slot;
            isa::AccessPattern probs = b.view(p_sb, {span(0, qw), at(s), span(0, kw)});
            isa::AccessPattern shifted = b.view(dpd_sb, {span(0, qw), at(s), span(0, kw)});
            b.emit(Opcode::tensor_tensor).tensor("dst", b.view(ds_sb, {span(0, qw), at(s), span(0, kw)}))
                .tensor("data1", shifted).tensor("data2", probs).word("op", "multiply");
          };
          // dV, dK (accumulated in PSUM over the query tiles) and dQ of one (query tile, key block).
          auto stage_grads = [&](const Pair& pr) {
            const int64_t qw = pr.qr.size, s = pr.slot, subs = ceil_div(pr.kw, kQueryTile);
            auto width = [&](int64_t c) { return std::min(kQueryTile, pr.kw - c * kQueryTile); };
            // dS^T in 128-key tiles by DMA, on four queues: the PE array is the busiest engine (a PE
            // transpose costs it as much as a dQ matmul, and its PSUM evacuation stalls the chain).
            for (int64_t c = 0; c < subs; ++c) {
              const int64_t cw = width(c);
              b.emit(Opcode::dma_transpose)
                  .tensor("dst", b.view(ds_t, {span(0, cw), at(s), at(c), span(0, qw)}))
                  .tensor("src", b.view(ds_sb, {span(0, qw), at(s), span(c * kQueryTile, cw)}))
                  .imm("queue", kTransposeQueues[c]);
            }
            for (int64_t c = 0; c < subs; ++c) {
              const int64_t cw = width(c);
              const char* accumulate = started[c] ? "true" : "false";
              started[c] = true;
              b.emit(Opcode::nc_matmul).tensor("dst", b.view(dv_ps, {span(0, cw), at(c), all()}))
                  .tensor("stationary", b.view(p_sb, {span(0, qw), at(s), span(c * kQueryTile, cw)}))
                  .tensor("moving", b.view(do_sb, {span(0, qw), at(pr.qt), all()})).word("accumulate", accumulate);
              b.emit(Opcode::nc_matmul).tensor("dst", b.view(dk_ps, {span(0, cw), at(c), all()}))
                  .tensor("stationary", b.view(ds_sb, {span(0, qw), at(s), span(c * kQueryTile, cw)}))
                  .tensor("moving", b.view(q_sb, {span(0, qw), at(pr.qt), all()})).word("accumulate", accumulate);
            }
            const int64_t dqs = dq_step++ % 2;
            isa::AccessPattern dq_part = b.view(dq_ps, {span(0, qw), at(dqs), all()});
            for (int64_t c = 0; c < subs; ++c) {
              const int64_t cw = width(c);
              b.emit(Opcode::nc_matmul).tensor("dst", dq_part)
                  .tensor("stationary", b.view(ds_t, {span(0, cw), at(s), at(c), span(0, qw)}))
                  .tensor("moving", b.view(k_sb, {span(0, cw), at(ks), at(c), all()}))
                  .word("accumulate", c ? "true" : "false");
            }
            // dQ over the key blocks: the first writes the fp32 accumulator, the last the output.
            const size_t last_block =
                spec.causal ? size_t((pr.qr.begin + qw - 1) / kKeyBlock) : key_blocks.size() - 1;
            isa::AccessPattern acc = b.view(dq_acc, {span(0, qw), at(pr.qt), all()});
            isa::AccessPattern dst = kbi == last_block ? b.view(dq_out, {span(0, qw), at(dqs), all()}) : acc;
            scale_add(b, dst, dq_part, scale, kbi == 0 ? nullptr : &acc, Engine::vector);
            if (kbi == last_block) {
              b.emit(Opcode::dma_copy).tensor("dst", b.view(t.dq, {at(batch), at(h), span(pr.qr), all()}))
                  .tensor("src", dst).imm("queue", kDqStoreQueue);
            }
          };
          // Software-pipelined in program order: the scores of tile i are emitted before the
          // gradients of tile i - kLookahead, so the in-order engines do not idle on each tile's
          // dependency chain.
          std::vector<Pair> pairs;
          for (size_t qt = spec.causal ? size_t(kb.begin / kQueryTile) : 0; qt < query_tiles.size(); ++qt) {
            const Range& qr = query_tiles[qt];
            const int64_t kw = spec.causal ? std::min(kb.size, qr.begin + qr.size - kb.begin) : kb.size;
            const int64_t step = pair_step++;
            pairs.push_back({int64_t(qt), step % kSlots, step % 2, kw, qr});
          }
          const size_t n = pairs.size(), ahead = size_t(kLookahead);
          for (size_t i = 0; i < n + ahead; ++i) {
            if (i < n) stage_scores(pairs[i]);
            if (i >= ahead) stage_grads(pairs[i - ahead]);
            if (i < n) stage_ds(pairs[i]);
          }
          // ---- dK, dV of this key block leave PSUM: summed into the group's fp32 accumulators,
          // or (last query head of the group) written out ----
          const bool first_head = hi == 0, last_head = hi == group - 1;
          for (int64_t c = 0; c < kb_subs; ++c) {
            const Range kr{kb.begin + c * kQueryTile, std::min(kQueryTile, kb.size - c * kQueryTile)};
            const int64_t kt = kr.begin / kQueryTile;
            for (int which = 0; which < 2; ++which) {
              const uint32_t ps = which ? dk_ps : dv_ps, out = which ? dk_out : dv_out;
              const uint32_t acc_id = which ? dk_acc : dv_acc;
              isa::AccessPattern acc = group > 1 ? b.view(acc_id, {span(0, kr.size), at(kt), all()}) : isa::AccessPattern{};
              isa::AccessPattern dst = last_head ? b.view(out, {span(0, kr.size), at(ks), at(c), all()}) : acc;
              scale_add(b, dst, b.view(ps, {span(0, kr.size), at(c), all()}), which ? scale : 1.0,
                        first_head ? nullptr : &acc, which ? Engine::vector : Engine::scalar);
              if (last_head) {
                b.emit(Opcode::dma_copy)
                    .tensor("dst", b.view(which ? t.dk : t.dv, {at(batch), at(kvh), span(kr), all()}))
                    .tensor("src", dst).imm("queue", which ? kDkStoreQueue : kDvStoreQueue);
              }
            }
          }
        }
      }
    }
  }
}

isa::Program flash_attention_backward_program(const AttentionSpec& spec, const HardwareConfig& config, uint32_t core,
                                               uint32_t cores) {
  isa::ProgramBuilder b("flash_attention_bwd", config.generation);
  auto shape = [](int64_t a, int64_t h, int64_t s, int64_t d) {
    return std::vector<uint32_t>{uint32_t(a), uint32_t(h), uint32_t(s), uint32_t(d)};
  };
  const auto in = isa::AllocationRole::input, out = isa::AllocationRole::output;
  const auto q_shape = shape(spec.batch, spec.heads, spec.seq_q, spec.head_dim);
  const auto kv_shape = shape(spec.batch, spec.kv_heads, spec.seq_k, spec.head_dim);
  AttentionBackwardTensors t{};
  t.q = b.hbm("q", spec.dtype, q_shape, in);
  t.k = b.hbm("k", spec.dtype, kv_shape, in);
  t.v = b.hbm("v", spec.dtype, kv_shape, in);
  t.o = b.hbm("o", spec.dtype, q_shape, in);
  t.dout = b.hbm("do", spec.dtype, q_shape, in);
  t.lse = b.hbm("lse", DType::fp32, {uint32_t(spec.batch), uint32_t(spec.heads), uint32_t(spec.seq_q)}, in);
  t.dq = b.hbm("dq", spec.dtype, q_shape, out);
  t.dk = b.hbm("dk", spec.dtype, kv_shape, out);
  t.dv = b.hbm("dv", spec.dtype, kv_shape, out);
  KernelContext ctx{b, config, "", core, cores};
  build_flash_attention_backward(ctx, spec, t);
  return b.finish();
}

}  // namespace trnsim::kernels
