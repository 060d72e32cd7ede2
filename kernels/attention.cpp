#include "kernels/attention.h"

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

  uint32_t k_t = b.sbuf(ctx.name("fa_kT"), dt, {ud, uint32_t(sk)});
  uint32_t v_sb = b.sbuf(ctx.name("fa_v"), dt, {up, uint32_t(key_tiles), ud});
  uint32_t q_t = b.sbuf(ctx.name("fa_qT"), dt, {ud, 2, uint32_t(kQueryTile)});
  uint32_t s_ps = b.psum(ctx.name("fa_s"), DType::fp32, {up, 2, uint32_t(kKeyBlock)});
  uint32_t pt_ps = b.psum(ctx.name("fa_pT"), DType::fp32, {up, 2, uint32_t(kQueryTile)});
  uint32_t pv_ps = b.psum(ctx.name("fa_pv"), DType::fp32, {up, 2, ud});
  uint32_t s_sb = b.sbuf(ctx.name("fa_s_masked"), DType::fp32, {up, 2, uint32_t(kKeyBlock)});
  uint32_t p_sb = b.sbuf(ctx.name("fa_p"), dt, {up, 2, uint32_t(kKeyBlock)});
  uint32_t pt_sb = b.sbuf(ctx.name("fa_pT_sb"), dt, {up, 2, uint32_t(kKeyBlock / p), uint32_t(kQueryTile)});
  // Per-row statistics: m[2], l, and per block slot mx, negm, rowsum, corr; then 1/l. Each sits in
  // its own 256-byte run so the dependency tracking (and the hardware's semaphores) see them as
  // separate, letting block i+1's max run while block i is still in exp and P V.
  constexpr int64_t kStatStride = 64;  // fp32 elements = 256 bytes
  uint32_t stats = b.sbuf(ctx.name("fa_stats"), DType::fp32, {up, uint32_t(12 * kStatStride)});
  uint32_t o_sb = b.sbuf(ctx.name("fa_o"), DType::fp32, {up, ud});
  uint32_t out_sb = b.sbuf(ctx.name("fa_out"), dt, {up, ud});
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
  // Slot-dependent statistics: mx 3, negm 4, rowsum 5, corr 6 for slot 0; 8..11 for slot 1.
  auto slot_stat = [&](int64_t column, int64_t slot, int64_t rows) { return stat(column + 5 * slot, rows); };

  int64_t q_step = 0, block_step = 0;
  const int64_t group = spec.heads / spec.kv_heads;
  for (int64_t batch = 0; batch < spec.batch; ++batch) {
    for (int64_t kvh = 0; kvh < spec.kv_heads; ++kvh) {
      // K^T [d, Sk] in 512-row DMA transposes; V in 128-key tiles with keys on partitions.
      for (const Range& r : tiles(sk, kKeyBlock)) {
        b.emit(Opcode::dma_transpose)
            .tensor("dst", b.view(k_t, {all(), span(r)}))
            .tensor("src", b.view(t.k, {at(batch), at(kvh), span(r), all()}))
            .imm("queue", 0);
      }
      for (int64_t kt = 0; kt < key_tiles; ++kt) {
        const Range r{kt * p, std::min(p, sk - kt * p)};
        b.emit(Opcode::dma_copy)
            .tensor("dst", b.view(v_sb, {span(0, r.size), at(kt), all()}))
            .tensor("src", b.view(t.v, {at(batch), at(kvh), span(r), all()}))
            .imm("queue", 1);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (const Range& qr : tiles(sq, kQueryTile)) {
          const int64_t qs = q_step++ % 2, qw = qr.size;
          b.emit(Opcode::dma_transpose)
              .tensor("dst", b.view(q_t, {all(), at(qs), span(0, qw)}))
              .tensor("src", b.view(t.q, {at(batch), at(h), span(qr), all()}))
              .imm("queue", 2 + qs);
          b.emit(Opcode::memset).tensor("dst", b.view(o_sb, {span(0, qw), all()})).imm("value", 0);
          b.emit(Opcode::memset).tensor("dst", stat(2, qw)).imm("value", 0);
          b.emit(Opcode::memset).tensor("dst", stat(0, qw)).imm("value", -INFINITY);
          int64_t m_old = 0;
          const int64_t key_end = spec.causal ? std::min(sk, qr.begin + qw) : sk;
          // Software-pipelined in program order: the scores, max and exp of block i are emitted
          // before the transposes, P V and rescale of block i-1, since each engine runs its
          // instructions in order and would otherwise idle on every block's dependency chain.
          struct Block {
            Range keys;
            int64_t slot;
          };
          auto stage_scores = [&](const Block& blk) {
            const Range& kr = blk.keys;
            const int64_t bs = blk.slot, kw = kr.size, m_new = 1 - m_old;
            isa::AccessPattern scores = b.view(s_ps, {span(0, qw), at(bs), span(0, kw)});
            b.emit(Opcode::nc_matmul)
                .tensor("dst", scores)
                .tensor("stationary", b.view(q_t, {all(), at(qs), span(0, qw)}))
                .tensor("moving", b.view(k_t, {all(), span(kr)}))
                .word("accumulate", "false");
            isa::AccessPattern src = scores;
            if (spec.causal && kr.begin + kw > qr.begin) {
              const int64_t offset = qr.begin - kr.begin;  // 0, 128, 256 or 384
              src = b.view(s_sb, {span(0, qw), at(bs), span(0, kw)});
              b.emit(Opcode::tensor_tensor)
                  .tensor("dst", src)
                  .tensor("data1", scores)
                  .tensor("data2", b.view(masks, {span(0, qw), at(offset / kQueryTile), span(0, kw)}))
                  .word("op", "add");
            }
            b.emit(Opcode::tensor_reduce).tensor("dst", slot_stat(3, bs, qw)).word("op", "maximum").tensor("data", src)
                .word("axis", "[1]");
            b.emit(Opcode::tensor_tensor).tensor("dst", stat(m_new, qw)).tensor("data1", stat(m_old, qw))
                .tensor("data2", slot_stat(3, bs, qw)).word("op", "maximum");
            b.emit(Opcode::tensor_scalar).tensor("dst", slot_stat(4, bs, qw)).tensor("data", stat(m_new, qw))
                .word("op0", "multiply").imm("operand0", -scale);
            isa::AccessPattern probs = b.view(p_sb, {span(0, qw), at(bs), span(0, kw)});
            b.emit(Opcode::activation).tensor("dst", probs).word("op", "exp").tensor("data", src)
                .imm("scale", scale).tensor("bias", slot_stat(4, bs, qw)).word("reduce_op", "add")
                .tensor("reduce_res", slot_stat(5, bs, qw));
            b.emit(Opcode::activation).tensor("dst", slot_stat(6, bs, qw)).word("op", "exp")
                .tensor("data", stat(m_old, qw)).imm("scale", scale).tensor("bias", slot_stat(4, bs, qw));
            m_old = m_new;
          };
          auto stage_values = [&](const Block& blk) {
            const Range& kr = blk.keys;
            const int64_t bs = blk.slot, kw = kr.size;
            // P^T in 128-key tiles: even tiles on the PE array (through PSUM), odd ones by DMA.
            const int64_t sub_tiles = ceil_div(kw, p);
            for (int64_t c = 0; c < sub_tiles; ++c) {
              const int64_t cw = std::min(p, kw - c * p);
              isa::AccessPattern pt = b.view(pt_sb, {span(0, cw), at(bs), at(c), span(0, qw)});
              isa::AccessPattern piece = b.view(p_sb, {span(0, qw), at(bs), span(c * p, cw)});
              if (c % 2 == 0) {
                isa::AccessPattern staged = b.view(pt_ps, {span(0, cw), at(c / 2 % 2), span(0, qw)});
                b.emit(Opcode::nc_transpose).tensor("dst", staged).tensor("data", piece);
                // The Scalar engine drains this PSUM tile; the Vector engine is the busier one here.
                b.emit(Opcode::activation).tensor("dst", pt).word("op", "copy").tensor("data", staged);
              } else {
                b.emit(Opcode::dma_transpose).tensor("dst", pt).tensor("src", piece).imm("queue", 4 + c / 2 % 2);
              }
            }
            for (int64_t c = 0; c < sub_tiles; ++c) {
              const int64_t cw = std::min(p, kw - c * p);
              b.emit(Opcode::nc_matmul)
                  .tensor("dst", b.view(pv_ps, {span(0, qw), at(bs), all()}))
                  .tensor("stationary", b.view(pt_sb, {span(0, cw), at(bs), at(c), span(0, qw)}))
                  .tensor("moving", b.view(v_sb, {span(0, cw), at(kr.begin / p + c), all()}))
                  .word("accumulate", c ? "true" : "false");
            }
            // o = o * correction + P V (online softmax rescaling).
            b.emit(Opcode::scalar_tensor_tensor).tensor("dst", b.view(o_sb, {span(0, qw), all()}))
                .tensor("data", b.view(o_sb, {span(0, qw), all()})).word("op0", "multiply")
                .tensor("operand0", slot_stat(6, bs, qw)).word("op1", "add")
                .tensor("operand1", b.view(pv_ps, {span(0, qw), at(bs), all()}));
            // l = l * correction + row sums (here rather than after the exp, so the Vector engine
            // does not stall on the Scalar engine before the next block's max).
            b.emit(Opcode::scalar_tensor_tensor).tensor("dst", stat(2, qw)).tensor("data", stat(2, qw))
                .word("op0", "multiply").tensor("operand0", slot_stat(6, bs, qw)).word("op1", "add")
                .tensor("operand1", slot_stat(5, bs, qw));
          };
          std::vector<Block> blocks;
          for (const Range& kr : tiles(key_end, kKeyBlock)) blocks.push_back({kr, block_step++ % 2});
          for (size_t i = 0; i < blocks.size(); ++i) {
            stage_scores(blocks[i]);
            if (i > 0) stage_values(blocks[i - 1]);
          }
          stage_values(blocks.back());
          b.emit(Opcode::reciprocal).tensor("dst", stat(7, qw)).tensor("data", stat(2, qw));
          b.emit(Opcode::tensor_scalar).tensor("dst", b.view(out_sb, {span(0, qw), all()}))
              .tensor("data", b.view(o_sb, {span(0, qw), all()})).word("op0", "multiply")
              .tensor("operand0", stat(7, qw));
          b.emit(Opcode::dma_copy)
              .tensor("dst", b.view(t.o, {at(batch), at(h), span(qr), all()}))
              .tensor("src", b.view(out_sb, {span(0, qw), all()}))
              .imm("queue", 6);
        }
      }
    }
  }
}

isa::Program flash_attention_forward_program(const AttentionSpec& spec, const HardwareConfig& config) {
  isa::ProgramBuilder b("flash_attention_fwd", config.generation);
  auto shape = [](int64_t a, int64_t h, int64_t s, int64_t d) {
    return std::vector<uint32_t>{uint32_t(a), uint32_t(h), uint32_t(s), uint32_t(d)};
  };
  AttentionTensors t{};
  t.q = b.hbm("q", spec.dtype, shape(spec.batch, spec.heads, spec.seq_q, spec.head_dim), isa::AllocationRole::input);
  t.k = b.hbm("k", spec.dtype, shape(spec.batch, spec.kv_heads, spec.seq_k, spec.head_dim), isa::AllocationRole::input);
  t.v = b.hbm("v", spec.dtype, shape(spec.batch, spec.kv_heads, spec.seq_k, spec.head_dim), isa::AllocationRole::input);
  t.o = b.hbm("o", spec.dtype, shape(spec.batch, spec.heads, spec.seq_q, spec.head_dim), isa::AllocationRole::output);
  KernelContext ctx{b, config, ""};
  build_flash_attention_forward(ctx, spec, t);
  return b.finish();
}

}  // namespace trnsim::kernels
