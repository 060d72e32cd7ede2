// conv2d backward: the weight gradient's schedule (the input gradient is the forward's machinery on
// another geometry, see conv_builder.h) and the backward program.
#include <map>
#include <string>
#include <vector>

#include "isa/isa_error.h"
#include "kernels/conv.h"
#include "kernels/conv_builder.h"

namespace trnsim::kernels {
namespace conv_detail {
namespace {

using isa::Opcode;

constexpr int64_t kGradAccBanks = 6;          // dW accumulators at most; the other banks take the transposes
constexpr int64_t kSlotsPerBank = 4;          // [<=128, <=128] fp32 transposes per bank
constexpr int64_t kLookAhead = 2;             // tiles transposed ahead of their matmuls (one pass)
constexpr int64_t kRingSlots = kLookAhead + 2;  // tiles in flight between transpose and matmul (one pass)
constexpr int64_t kGroupTiles = 8;            // tiles per PSUM round when the accumulators need passes
constexpr int64_t kGradTargetBlockPixels = 2048;
constexpr int64_t kGradOutputQueue = 4, kGradStoreQueue = 6;

}  // namespace

// dW[O, C*KH*KW (+1)] as [O-tile <= 128, 512-column] PSUM accumulators. When they fit the banks
// they accumulate over the whole kernel; otherwise tiles go in groups and each group's partials are
// added into an fp32 SBUF copy, pass by pass over the accumulators.
void Conv2dBuilder::allocate_grad_weight() {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const uint32_t p = m_ctx.partitions();
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  m_ckk = s.c * s.kh * s.kw;
  m_cols = m_ckk + (s.bias ? 1 : 0);  // the ones column: grad_bias = dY^T . 1 in the same matmuls
  m_o_chunks = tiles(s.o, p);
  for (const Range& ot : m_o_chunks) {
    for (const Range& ct : tiles(m_cols, bank)) m_accs.push_back({ot, ct});
  }
  m_passes = ceil_div(int64_t(m_accs.size()), kGradAccBanks);
  m_slots = m_passes == 1 ? kRingSlots : kGroupTiles;
  const uint32_t banks = uint32_t(std::min<int64_t>(int64_t(m_accs.size()), kGradAccBanks));
  m_acc = b.psum(m_ctx.name("convw_acc"), DType::fp32, {p, banks, uint32_t(bank)});
  // Every bank the accumulators leave takes transposes: a tile needs KH*KW*chunks + 1 of them, and
  // a transpose waiting for its slot's copy-out stalls the PE for a whole PSUM round trip.
  const int64_t psum_banks = int64_t(m_ctx.config.core.psum.banks);
  const int64_t trans_banks = std::max<int64_t>(2, psum_banks - int64_t(banks));
  m_tslots = trans_banks * kSlotsPerBank;
  m_tps = b.psum(m_ctx.name("convw_trans"), DType::fp32, {p, uint32_t(trans_banks), uint32_t(bank)});
  // Slots padded to 128 elements so one slot's writes do not share dependency granules with the next's.
  m_ostride = ceil_div(s.o, 128) * 128;
  m_cstride = ceil_div(m_cols, 128) * 128;
  m_dyt = b.sbuf(m_ctx.name("convw_dyt"), s.input_dtype, {p, uint32_t(m_slots), uint32_t(m_ostride)});
  m_colt = b.sbuf(m_ctx.name("convw_colt"), s.input_dtype, {p, uint32_t(m_slots), uint32_t(m_cstride)});
  if (m_passes > 1) {
    m_wacc = b.sbuf(m_ctx.name("convw_wacc"), DType::fp32, {p, uint32_t(m_accs.size()), uint32_t(bank)});
  }
  m_wrow = b.sbuf(m_ctx.name("convw_row"), DType::fp32, {p, uint32_t(m_cols)});
  m_stage = b.sbuf(m_ctx.name("convw_out"), s.output_dtype, {p, uint32_t(m_ckk)});
  allocate_blocks(int64_t(m_o_chunks.size()) * m_in_bytes, kGradTargetBlockPixels);
  const uint32_t dy_free = uint32_t(int64_t(m_o_chunks.size()) * m_nb * m_rb * m_wo);
  for (int i = 0; i < 2; ++i) {
    m_dy[i] = b.sbuf(m_ctx.name("convw_dy" + std::to_string(i)), s.input_dtype, {p, dy_free});
  }
}

// dY of a block, O-chunks on partitions: one contiguous run per (channel, image).
void Conv2dBuilder::load_grad_output(const Block& blk, int64_t index) {
  const int64_t plane = m_ho * m_wo;
  for (size_t k = 0; k < m_o_chunks.size(); ++k) {
    const Range& oc = m_o_chunks[k];
    for (int64_t n = 0; n < blk.nb; ++n) {
      dma_emit(ap(m_dy[index % 2], (int64_t(k) * m_nb + n) * m_rb * m_wo,
                  {{0, uint32_t(oc.size)}, {1, uint32_t(blk.rb * m_wo)}}),
               ap(m_t.grad_output, ((blk.n0 + n) * m_s.o + oc.begin) * plane + blk.r0 * m_wo,
                  {{plane, uint32_t(oc.size)}, {1, uint32_t(blk.rb * m_wo)}}),
               kGradOutputQueue + (m_store_step++ % 2));
    }
  }
}

// Pixels onto partitions for one tile: dY^T[pixels, O] and im2col(X)^T[pixels, (c, kh, kw)], each
// a PE transpose of a [channels, pixels] window (the forward's moving pattern) through PSUM.
void Conv2dBuilder::transpose_tile(const Block& blk, int64_t index, const PixelTile& t, int64_t slot) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const uint32_t px = uint32_t(t.pixels()), nc = uint32_t(t.nc), rc = uint32_t(t.rc), cc = uint32_t(t.cc);
  (void)blk;
  auto transpose = [&](const isa::AccessPattern& data, uint32_t channels, uint32_t dst, int64_t dst_offset,
                       int64_t dst_stride) {
    const int64_t ps = m_wprep_step % m_tslots;
    isa::AccessPattern tr = ap(m_tps, ps * bank / kSlotsPerBank, {{0, px}, {1, channels}});
    b.emit(Opcode::nc_transpose).tensor("dst", tr).tensor("data", data);
    evacuate(b, ap(dst, dst_offset, {{0, px}, {dst_stride, channels}}), tr, nullptr,
             m_wprep_step++ % 2 ? Engine::scalar : Engine::vector);
  };
  for (size_t k = 0; k < m_o_chunks.size(); ++k) {
    const Range& oc = m_o_chunks[k];
    const int64_t offset = ((int64_t(k) * m_nb + t.n) * m_rb + t.row) * m_wo + t.col;
    transpose(ap(m_dy[index % 2], offset, {{0, uint32_t(oc.size)}, {m_rb * m_wo, nc}, {m_wo, rc}, {1, cc}}),
              uint32_t(oc.size), m_dyt, slot * m_ostride + oc.begin, 1);
  }
  const uint32_t buf = m_buf[index % 2];
  for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
    const Range& cr = m_chunks[ch];
    for (int64_t kh = 0; kh < s.kh; ++kh) {
      for (int64_t kw = 0; kw < s.kw; ++kw) {
        const int64_t row = (int64_t(ch) * m_nb + t.n) * m_rows_in + t.row * s.stride_h + kh * s.dilation_h;
        const int64_t offset = row * m_wb + t.col * s.stride_w + kw * s.dilation_w;
        transpose(ap(buf, offset,
                     {{0, uint32_t(cr.size)}, {m_rows_in * m_wb, nc}, {s.stride_h * m_wb, rc}, {s.stride_w, cc}}),
                  uint32_t(cr.size), m_colt, slot * m_cstride + (kh * s.kw + kw) * s.c + cr.begin, 1);
      }
    }
  }
}

void Conv2dBuilder::grad_weight_matmuls(const PixelTile& t, int64_t slot, int64_t pass, bool first, bool last) {
  (void)last;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const uint32_t px = uint32_t(t.pixels());
  const int64_t end = std::min<int64_t>(int64_t(m_accs.size()), (pass + 1) * kGradAccBanks);
  for (int64_t a = pass * kGradAccBanks; a < end; ++a) {
    const Accumulator& acc = m_accs[a];
    m_ctx.builder.emit(Opcode::nc_matmul)
        .tensor("dst", ap(m_acc, (a - pass * kGradAccBanks) * bank, {{0, uint32_t(acc.o.size)}, {1, uint32_t(acc.cols.size)}}))
        .tensor("stationary", ap(m_dyt, slot * m_ostride + acc.o.begin, {{0, px}, {1, uint32_t(acc.o.size)}}))
        .tensor("moving", ap(m_colt, slot * m_cstride + acc.cols.begin, {{0, px}, {1, uint32_t(acc.cols.size)}}))
        .word("accumulate", first ? "false" : "true");
  }
}

// One group's partials of a pass into the fp32 SBUF copy (a plain copy the first time).
void Conv2dBuilder::flush_grad_weight(int64_t pass, bool first_group) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const int64_t end = std::min<int64_t>(int64_t(m_accs.size()), (pass + 1) * kGradAccBanks);
  for (int64_t a = pass * kGradAccBanks; a < end; ++a) {
    const Accumulator& acc = m_accs[a];
    const std::vector<isa::ApDim> d = {{0, uint32_t(acc.o.size)}, {1, uint32_t(acc.cols.size)}};
    isa::AccessPattern src = ap(m_acc, (a - pass * kGradAccBanks) * bank, d), dst = ap(m_wacc, a * bank, d);
    if (first_group) {
      evacuate(b, dst, src, nullptr, m_evac_step++ % 2 ? Engine::scalar : Engine::vector);
    } else {
      b.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", src).tensor("data2", dst).word("op", "add");
    }
  }
}

// Per O tile: the accumulators into one fp32 row [O, (kh, kw, c) + ones], then one Vector copy
// permutes it to the HBM order (c, kh, kw) with the output cast, and the rows go out contiguous.
// (im2col^T columns are tap-major so each transpose's copy-out writes one contiguous run.)
void Conv2dBuilder::store_grad_weight() {
  isa::ProgramBuilder& b = m_ctx.builder;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4), khw = m_s.kh * m_s.kw;
  for (const Range& ot : m_o_chunks) {
    const uint32_t on = uint32_t(ot.size);
    for (size_t a = 0; a < m_accs.size(); ++a) {
      const Accumulator& acc = m_accs[a];
      if (acc.o.begin != ot.begin) continue;
      const std::vector<isa::ApDim> d = {{0, on}, {1, uint32_t(acc.cols.size)}};
      isa::AccessPattern from = m_passes == 1 ? ap(m_acc, int64_t(a) * bank, d) : ap(m_wacc, int64_t(a) * bank, d);
      evacuate(b, ap(m_wrow, acc.cols.begin, d), from, nullptr, m_evac_step++ % 2 ? Engine::scalar : Engine::vector);
    }
    b.emit(Opcode::tensor_copy)
        .tensor("dst", ap(m_stage, 0, {{0, on}, {1, uint32_t(m_ckk)}}))
        .tensor("src", ap(m_wrow, 0, {{0, on}, {1, uint32_t(m_s.c)}, {m_s.c, uint32_t(khw)}}))
        .on(Engine::vector);
    dma_emit(ap(m_t.grad_weight, ot.begin * m_ckk, {{m_ckk, on}, {1, uint32_t(m_ckk)}}),
             ap(m_stage, 0, {{0, on}, {1, uint32_t(m_ckk)}}), kGradStoreQueue);
    if (m_t.grad_bias >= 0) {
      // grad_bias: the ones column, cast through the first column of the stage once dW has left.
      isa::AccessPattern db = ap(m_stage, 0, {{0, on}, {1, 1}});
      evacuate(b, db, ap(m_wrow, m_ckk, {{0, on}, {1, 1}}), nullptr, Engine::scalar);
      dma_emit(ap(uint32_t(m_t.grad_bias), ot.begin, {{1, on}, {1, 1}}), db, kGradStoreQueue + 1);
    }
  }
}

void Conv2dBuilder::emit_grad_weight() {
  const int64_t p = m_ctx.partitions();
  if (m_s.bias) {  // the ones column, never overwritten by the transposes
    m_ctx.builder.emit(Opcode::memset)
        .tensor("dst", ap(m_colt, m_ckk, {{0, uint32_t(p)}, {m_cstride, uint32_t(m_slots)}}))
        .imm("value", 1)
        .on(Engine::gpsimd);
  }
  const std::vector<Block> all_blocks = blocks();
  load_block(all_blocks[0], 0);
  load_grad_output(all_blocks[0], 0);
  bool first_tile = true, first_group = true;
  for (size_t i = 0; i < all_blocks.size(); ++i) {
    const int64_t index = int64_t(i);
    if (i + 1 < all_blocks.size()) {
      load_block(all_blocks[i + 1], index + 1);
      load_grad_output(all_blocks[i + 1], index + 1);
    }
    const std::vector<PixelTile> tl = pixel_tiles(all_blocks[i], p);
    if (m_passes == 1) {
      // Look-ahead: the PE transposes tile j+kLookAhead while the copies of tile j drain.
      std::vector<int64_t> slot(tl.size());
      const size_t ahead = size_t(kLookAhead);
      for (size_t j = 0; j < tl.size() + ahead; ++j) {
        if (j < tl.size()) {
          slot[j] = m_tile_step++ % m_slots;
          transpose_tile(all_blocks[i], index, tl[j], slot[j]);
        }
        if (j >= ahead) {
          grad_weight_matmuls(tl[j - ahead], slot[j - ahead], 0, first_tile, false);
          first_tile = false;
        }
      }
      continue;
    }
    for (size_t g0 = 0; g0 < tl.size(); g0 += kGroupTiles) {
      const size_t g1 = std::min(tl.size(), g0 + kGroupTiles);
      for (size_t j = g0; j < g1; ++j) transpose_tile(all_blocks[i], index, tl[j], int64_t(j - g0));
      for (int64_t pass = 0; pass < m_passes; ++pass) {
        for (size_t j = g0; j < g1; ++j) grad_weight_matmuls(tl[j], int64_t(j - g0), pass, j == g0, j + 1 == g1);
        flush_grad_weight(pass, first_group);
      }
      first_group = false;
    }
  }
  store_grad_weight();
}

namespace {

// Appends a program built on its own (its SBUF/PSUM placed from 0, aliasing what `dst` already
// uses: the dependency tracker orders the reuse) to `dst`; its HBM tensors map by name.
void append_program(isa::Program& dst, const isa::Program& part) {
  std::vector<uint32_t> remap(part.allocations.size());
  for (size_t i = 0; i < part.allocations.size(); ++i) {
    const isa::Allocation& a = part.allocations[i];
    const int existing = a.space == isa::MemorySpace::hbm ? dst.find_allocation(a.name) : -1;
    if (existing >= 0) {
      remap[i] = uint32_t(existing);
    } else {
      dst.allocations.push_back(a);
      remap[i] = uint32_t(dst.allocations.size() - 1);
    }
  }
  for (isa::Instruction inst : part.instructions) {
    for (isa::AccessPattern& t : inst.tensors) {
      if (t.present()) t.allocation = remap[t.allocation];
    }
    dst.instructions.push_back(std::move(inst));
  }
}

}  // namespace
}  // namespace conv_detail

void build_conv2d_backward(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dBackwardTensors& tensors) {
  using namespace conv_detail;
  if (spec.groups != 1) throw isa::IsaError("conv2d: groups > 1 is not supported yet");
  if (spec.pad_h < 0 || spec.pad_w < 0) throw isa::IsaError("conv2d: stride and dilation must be >= 1, padding >= 0");
  isa::Program& program = ctx.builder.mutable_program();
  // Each pass is built in a builder of its own, so it may use all of SBUF and PSUM, and appended.
  auto part = [&](const std::string& prefix, const ConvGeometry& g, ConvMode mode) {
    isa::ProgramBuilder b(program.name, program.generation);
    ConvTensors t;
    auto copy = [&](int64_t id) { return id < 0 ? -1 : int64_t(b.place(program.allocations.at(size_t(id)))); };
    t.input = uint32_t(copy(mode == ConvMode::grad_input ? tensors.grad_output : tensors.input));
    if (mode == ConvMode::grad_input) {
      t.weight = uint32_t(copy(tensors.weight));
      t.output = uint32_t(copy(tensors.grad_input));
    } else {
      t.grad_output = uint32_t(copy(tensors.grad_output));
      t.grad_weight = uint32_t(copy(tensors.grad_weight));
      t.grad_bias = copy(tensors.grad_bias);
    }
    KernelContext sub{b, ctx.config, ctx.name(prefix), ctx.core, ctx.cores};
    Conv2dBuilder(sub, g, t, mode).build();
    append_program(program, b.program());
  };
  part("dx_", grad_input_geometry(spec), ConvMode::grad_input);
  ConvGeometry gw = forward_geometry(spec);
  gw.bias = tensors.grad_bias >= 0;
  part("dw_", gw, ConvMode::grad_weight);
}

isa::Program conv2d_backward_program(const Conv2dSpec& spec, const HardwareConfig& config) {
  isa::ProgramBuilder b("conv2d_backward", config.generation);
  auto u = [](int64_t v) { return uint32_t(v); };
  if (spec.out_h() <= 0 || spec.out_w() <= 0) throw isa::IsaError("conv2d: the kernel does not fit the padded input");
  const std::vector<uint32_t> x = {u(spec.n), u(spec.c), u(spec.h), u(spec.w)};
  const std::vector<uint32_t> w = {u(spec.o), u(spec.c), u(spec.kh), u(spec.kw)};
  Conv2dBackwardTensors t{};
  t.input = b.hbm("input", spec.input_dtype, x, isa::AllocationRole::input);
  t.weight = b.hbm("weight", spec.input_dtype, w, isa::AllocationRole::input);
  t.grad_output = b.hbm("grad_output", spec.input_dtype, {u(spec.n), u(spec.o), u(spec.out_h()), u(spec.out_w())},
                        isa::AllocationRole::input);
  t.grad_input = b.hbm("grad_input", spec.output_dtype, x, isa::AllocationRole::output);
  t.grad_weight = b.hbm("grad_weight", spec.output_dtype, w, isa::AllocationRole::output);
  if (spec.bias) t.grad_bias = b.hbm("grad_bias", spec.output_dtype, {u(spec.o)}, isa::AllocationRole::output);
  KernelContext ctx{b, config, ""};
  build_conv2d_backward(ctx, spec, t);
  return b.finish();
}

}  // namespace trnsim::kernels
