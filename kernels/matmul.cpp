#include "kernels/matmul.h"

#include "isa/isa_error.h"
#include "isa/view.h"

namespace trnsim::kernels {
namespace {

using isa::Opcode;

constexpr int64_t kPsumTilesPerSet = 4;      // two alternating sets fill the 8 banks (A-V2)
constexpr int64_t kRingSlots = 6;            // A^T tiles in flight: two per load queue hide a load's start latency
constexpr double kResidentBudget = 0.7;      // share of an SBUF partition the resident B block may take
constexpr uint32_t kLoadQueues = 3;          // DMA queues that feed the ring
constexpr uint32_t kResidentQueues[] = {3, 7};  // B loads alternate between two queues
constexpr uint32_t kStoreQueue = 4;          // C stores (and +1)
constexpr uint32_t kSideQueue = 6;           // bias / residual

uint32_t declare_scratch(const KernelContext& ctx, const std::string& name, DType dtype, std::vector<uint32_t> shape) {
  return ctx.builder.hbm(ctx.name(name), dtype, std::move(shape));
}

const isa::Allocation& alloc(const KernelContext& ctx, uint32_t id) { return ctx.builder.program().allocations.at(id); }

// PSUM -> SBUF copy with a cast. The Scalar engine copies through activation(copy), which every
// generation has (its tensor_copy is v3+).
void evacuate(isa::ProgramBuilder& b, const isa::AccessPattern& dst, const isa::AccessPattern& src, Engine engine) {
  if (engine == Engine::scalar) {
    b.emit(Opcode::activation).tensor("dst", dst).tensor("data", src).word("op", "copy");
  } else {
    b.emit(Opcode::tensor_copy).tensor("dst", dst).tensor("src", src).on(engine);
  }
}

// The [rows, cols] HBM view of a 2-D tensor, or of one batch slice of a 3-D one.
isa::AccessPattern hbm_2d(const KernelContext& ctx, uint32_t tensor, int64_t batch, Range rows, Range cols) {
  if (alloc(ctx, tensor).shape.size() == 3) return ctx.builder.view(tensor, {at(batch), span(rows), span(cols)});
  return ctx.builder.view(tensor, {span(rows), span(cols)});
}

// An allocation of this name if the program has one (a kernel called twice reuses its buffers),
// else a new one.
uint32_t sbuf_once(const KernelContext& ctx, const std::string& name, DType dtype, std::vector<uint32_t> shape) {
  int existing = ctx.builder.program().find_allocation(ctx.name(name));
  return existing >= 0 ? uint32_t(existing) : ctx.builder.sbuf(ctx.name(name), dtype, std::move(shape));
}

// The transpose through SBUF; a PE transpose borrows two [P, P] fp32 slots of `psum` (banks the
// caller is not using at that point).
void transpose_2d(const KernelContext& ctx, uint32_t src, uint32_t dst, int64_t batch_index, uint32_t psum) {
  const isa::Allocation& s = alloc(ctx, src);
  const size_t rank = s.shape.size();
  const int64_t rows = s.shape[rank - 2], cols = s.shape[rank - 1];
  const int64_t batch = std::max<int64_t>(batch_index, 0);
  const DType dtype = s.dtype;
  const int64_t p = ctx.partitions();
  const bool dma_transpose = ctx.config.core.dma.transpose_supported && dtype_size_bytes(dtype) == 2;
  isa::ProgramBuilder& b = ctx.builder;
  // DMA transpose: src rows become dst partitions; move 512 source rows per instruction.
  const int64_t row_step = dma_transpose ? 512 : p;
  uint32_t stage = sbuf_once(ctx, std::string("transpose_stage_") + std::string(dtype_name(dtype)), dtype,
                             {uint32_t(p), 2, uint32_t(row_step)});
  uint32_t tile_in = dma_transpose ? 0
                                   : sbuf_once(ctx, std::string("transpose_in_") + std::string(dtype_name(dtype)), dtype,
                                               {uint32_t(p), 2, uint32_t(p)});
  int64_t step = 0;
  for (const Range& r : tiles(rows, row_step)) {
    for (const Range& c : tiles(cols, p)) {
      const int64_t slot = step++ % 2;
      isa::AccessPattern staged = b.view(stage, {span(0, c.size), at(slot), span(0, r.size)});
      if (dma_transpose) {
        b.emit(Opcode::dma_transpose)
            .tensor("dst", staged)
            .tensor("src", hbm_2d(ctx, src, batch, r, c))
            .imm("queue", double(slot));
      } else {
        isa::AccessPattern in = b.view(tile_in, {span(0, r.size), at(slot), span(0, c.size)});
        b.emit(Opcode::dma_copy).tensor("dst", in).tensor("src", hbm_2d(ctx, src, batch, r, c)).imm("queue", double(slot));
        isa::AccessPattern t = b.view(psum, {span(0, c.size), at(slot), span(0, r.size)});  // one bank each
        b.emit(Opcode::nc_transpose).tensor("dst", t).tensor("data", in);
        evacuate(b, staged, t, slot ? Engine::scalar : Engine::vector);
      }
      b.emit(Opcode::dma_copy)
          .tensor("dst", hbm_2d(ctx, dst, batch, c, r))
          .tensor("src", staged)
          .imm("queue", double(2 + slot));
    }
  }
}

}  // namespace

void build_transpose_2d(const KernelContext& ctx, uint32_t src, uint32_t dst, int64_t batch_index) {
  int existing = ctx.builder.program().find_allocation(ctx.name("transpose_psum"));
  uint32_t psum = existing >= 0 ? uint32_t(existing)
                                : ctx.builder.psum(ctx.name("transpose_psum"), DType::fp32,
                                                   {ctx.partitions(), 2, uint32_t(ctx.config.core.psum.bank_bytes / 4)});
  transpose_2d(ctx, src, dst, batch_index, psum);
}

void build_matmul(const KernelContext& ctx, const MatmulSpec& spec, const MatmulTensors& tensors) {
  const TensorEngineConfig& pe = ctx.config.core.tensor;
  isa::ProgramBuilder& b = ctx.builder;
  if (spec.m <= 0 || spec.k <= 0 || spec.n <= 0 || spec.batch <= 0) throw KernelUnsupported("matmul: empty shape");
  const int64_t p = ctx.partitions();
  const int64_t kt = std::min<int64_t>(p, pe.pe_rows);                       // contraction per instruction
  const int64_t mt = std::min<int64_t>(p, pe.max_stationary_free_size);      // output partitions per tile
  const int64_t nt = int64_t(ctx.config.core.psum.bank_bytes / 4);           // one fp32 PSUM bank
  const DType in = spec.input_dtype;
  const int64_t in_bytes = dtype_size_bytes(in);

  // Operands in the layouts the Tensor engine streams: A^T [K, M] (stationary) and B [K, N] (moving).
  uint32_t a_t = tensors.a, b_kn = tensors.b;
  // Where the DMA engines transpose 2-byte dtypes (trn2+), operands stored the other way round
  // are transposed on the fly by the loads themselves (~90% of copy throughput); otherwise they
  // go through a transposing pass into scratch HBM first.
  const bool transpose_on_load = ctx.config.core.dma.transpose_supported && in_bytes == 2;
  const bool a_pass = !spec.a_transposed && !transpose_on_load;
  const bool b_pass = spec.b_transposed && !transpose_on_load;
  if (a_pass) {
    std::vector<uint32_t> shape = {uint32_t(spec.k), uint32_t(spec.m)};
    if (spec.batch > 1) shape.insert(shape.begin(), uint32_t(spec.batch));
    a_t = declare_scratch(ctx, "a_t", in, shape);
  }
  if (b_pass) {
    std::vector<uint32_t> shape = {uint32_t(spec.k), uint32_t(spec.n)};
    if (spec.batch > 1) shape.insert(shape.begin(), uint32_t(spec.batch));
    b_kn = declare_scratch(ctx, "b_kn", in, shape);
  }

  // FP8 double_row mode (v3+): K = 256 per instruction as [128, 2, F] (contraction index 2p + r),
  // twice the FLOPs in the time of a bf16 K = 128 (A-V3). Used when both operands arrive in the
  // stationary/moving layouts and K splits into whole 256-row tiles.
  const auto& dr = pe.double_row_dtypes;
  const bool double_row = spec.a_transposed && !spec.b_transposed && spec.k % (2 * kt) == 0 &&
                          std::find(dr.begin(), dr.end(), in) != dr.end();
  const int64_t rows_per_partition = double_row ? 2 : 1;
  // Block shape: 4 output tiles per PSUM set; 2 x 2 when N is wide and B[K, 1024] fits in SBUF
  // (A is then re-read N/1024 times), else 4 M-tiles x 1 (B[K, 512] resident).
  const std::vector<Range> n_tiles = tiles(spec.n, nt), m_tiles = tiles(spec.m, mt),
                           k_tiles = tiles(spec.k, kt * rows_per_partition);
  const double budget = kResidentBudget * double(ctx.config.core.sbuf.bytes_per_partition);
  const int64_t tile_bytes = in_bytes * rows_per_partition;
  const bool wide_fits = double(2 * nt * tile_bytes) * double(k_tiles.size()) <= budget;
  const int64_t nb_tiles = std::min<int64_t>(n_tiles.size(), spec.n > nt && wide_fits ? 2 : 1);
  const int64_t mb_tiles = kPsumTilesPerSet / nb_tiles;
  const int64_t nb_cols = nb_tiles * nt;
  // As much of B[K, N-block] as the budget allows stays resident; K is chunked beyond that (then
  // each M block re-reads its B chunks).
  const int64_t chunk_tiles =
      std::clamp<int64_t>(int64_t(budget / double(nb_cols * tile_bytes)), 1, int64_t(k_tiles.size()));
  const int64_t chunks = ceil_div(k_tiles.size(), chunk_tiles);

  const uint32_t rpp = uint32_t(rows_per_partition);
  uint32_t resident =
      b.sbuf(ctx.name("b_resident"), in, {uint32_t(p), uint32_t(chunk_tiles), rpp, uint32_t(nb_cols)});
  uint32_t ring = b.sbuf(ctx.name("a_ring"), in, {uint32_t(p), uint32_t(kRingSlots), rpp, uint32_t(mb_tiles * mt)});
  // An operand tile [rows of K, cols] as the engine reads it: [partitions, (2,) cols].
  auto operand = [&](uint32_t buffer, int64_t kr_size, int64_t index, Range cols) {
    if (double_row) return b.view(buffer, {span(0, kr_size / 2), at(index), all(), span(cols)});
    return b.view(buffer, {span(0, kr_size), at(index), at(0), span(cols)});
  };
  // The HBM side of a double_row load: row k0 + 2p + r of a [K, X] tensor into partition p, slot r.
  auto double_row_source = [&](uint32_t tensor, int64_t batch, const Range& kr, const Range& cols) {
    const isa::Allocation& a = alloc(ctx, tensor);
    const int64_t width = a.shape.back(), rows = a.shape[a.shape.size() - 2];
    const int64_t offset = ((a.shape.size() == 3 ? batch * rows : 0) + kr.begin) * width + cols.begin;
    return isa::raw_access_pattern(b.program(), tensor, offset,
                                   {isa::ApDim{2 * width, uint32_t(kr.size / 2)}, isa::ApDim{width, 2},
                                    isa::ApDim{1, uint32_t(cols.size)}});
  };
  uint32_t psum = b.psum(ctx.name("acc"), DType::fp32, {uint32_t(p), uint32_t(2 * kPsumTilesPerSet), uint32_t(nt)});
  const bool epilogue = spec.bias || spec.activation || spec.residual;
  uint32_t out = b.sbuf(ctx.name("c_stage"), spec.output_dtype, {uint32_t(p), 2, uint32_t(mb_tiles), uint32_t(nb_cols)});
  uint32_t work = epilogue ? b.sbuf(ctx.name("epilogue"), DType::fp32, {uint32_t(p), 2, uint32_t(nb_cols)}) : 0;
  uint32_t bias_tile = spec.bias ? b.sbuf(ctx.name("bias_sb"), DType::fp32, {uint32_t(p), uint32_t(nb_cols)}) : 0;
  uint32_t residual_tile =
      spec.residual ? b.sbuf(ctx.name("residual_sb"), DType::fp32, {uint32_t(p), 2, uint32_t(nb_cols)}) : 0;

  if (ctx.cores > 1 && (a_pass || b_pass)) {
    throw SplitUnsupported("matmul split across cores needs its operands pre-transposed or DMA transposes "
                        "(trn2+, 2-byte dtypes): the transposing pass would race between cores");
  }
  // Split across cores by whole N blocks when there are enough (each core keeps its own resident
  // B block), else by M blocks.
  const int64_t n_blocks = ceil_div(n_tiles.size(), nb_tiles), m_blocks = ceil_div(m_tiles.size(), mb_tiles);
  const bool split_n = n_blocks >= int64_t(ctx.cores) || m_blocks < int64_t(ctx.cores);
  int64_t ring_step = 0, block_step = 0, evac_step = 0;
  for (int64_t batch = 0; batch < spec.batch; ++batch) {
    // Operands stored the other way round are transposed into scratch HBM first, borrowing two
    // accumulator banks (the matmuls that use them come after).
    if (a_pass) transpose_2d(ctx, tensors.a, a_t, spec.batch > 1 ? batch : -1, psum);
    if (b_pass) transpose_2d(ctx, tensors.b, b_kn, spec.batch > 1 ? batch : -1, psum);
    for (size_t nb = 0; nb < n_tiles.size(); nb += nb_tiles) {
      if (split_n && !ctx.mine(int64_t(nb) / nb_tiles)) continue;
      bool first_block = true;
      const Range cols{n_tiles[nb].begin, std::min<int64_t>(nb_cols, spec.n - n_tiles[nb].begin)};
      const int64_t block_n = std::min<int64_t>(nb_tiles, n_tiles.size() - nb);
      if (spec.bias) {
        // bias[N] broadcast to every partition: a stride-0 partition pattern on the HBM side.
        isa::AccessPattern row = isa::raw_access_pattern(b.program(), uint32_t(tensors.bias), cols.begin,
                                                         {isa::ApDim{0, uint32_t(p)}, isa::ApDim{1, uint32_t(cols.size)}});
        b.emit(Opcode::dma_copy)
            .tensor("dst", b.view(bias_tile, {all(), span(0, cols.size)}))
            .tensor("src", row)
            .imm("queue", kSideQueue);
      }
      for (size_t mb = 0; mb < m_tiles.size(); mb += mb_tiles) {
        if (!split_n && !ctx.mine(int64_t(mb) / mb_tiles)) continue;
        const bool load_resident = first_block;
        first_block = false;
        const int64_t block_m = std::min<int64_t>(mb_tiles, m_tiles.size() - mb);
        const Range rows{m_tiles[mb].begin, std::min<int64_t>(mb_tiles * mt, spec.m - m_tiles[mb].begin)};
        const int64_t set = block_step++ % 2;
        for (int64_t chunk = 0; chunk < chunks; ++chunk) {
          const int64_t first = chunk * chunk_tiles;
          const int64_t count = std::min<int64_t>(chunk_tiles, k_tiles.size() - first);
          // B tiles are loaded just ahead of the first block's matmuls that read them, so the
          // Tensor engine starts after one tile instead of after the whole resident block.
          const bool load_b = chunks > 1 || load_resident;
          for (int64_t j = 0; j < count; ++j) {
            const Range& kr = k_tiles[first + j];
            if (load_b) {
              isa::AccessPattern dst = operand(resident, kr.size, j, {0, cols.size});
              if (double_row) {
                b.emit(Opcode::dma_copy)
                    .tensor("dst", dst)
                    .tensor("src", double_row_source(b_kn, batch, kr, cols))
                    .imm("queue", kResidentQueues[j % 2]);
              } else if (spec.b_transposed && transpose_on_load) {
                b.emit(Opcode::dma_transpose)
                    .tensor("dst", dst)
                    .tensor("src", hbm_2d(ctx, tensors.b, batch, cols, kr))
                    .imm("queue", kResidentQueues[j % 2]);
              } else {
                b.emit(Opcode::dma_copy)
                    .tensor("dst", dst)
                    .tensor("src", hbm_2d(ctx, b_kn, batch, kr, cols))
                    .imm("queue", kResidentQueues[j % 2]);
              }
            }
            const int64_t slot = ring_step++ % kRingSlots;
            isa::AccessPattern ring_tile = operand(ring, kr.size, slot, {0, rows.size});
            if (double_row) {
              b.emit(Opcode::dma_copy)
                  .tensor("dst", ring_tile)
                  .tensor("src", double_row_source(a_t, batch, kr, rows))
                  .imm("queue", double(slot % kLoadQueues));
            } else if (!spec.a_transposed && transpose_on_load) {
              b.emit(Opcode::dma_transpose)
                  .tensor("dst", ring_tile)
                  .tensor("src", hbm_2d(ctx, tensors.a, batch, rows, kr))
                  .imm("queue", double(slot % kLoadQueues));
            } else {
              b.emit(Opcode::dma_copy)
                  .tensor("dst", ring_tile)
                  .tensor("src", hbm_2d(ctx, a_t, batch, kr, rows))
                  .imm("queue", double(slot % kLoadQueues));
            }
            const bool start = chunk == 0 && j == 0;
            for (int64_t mi = 0; mi < block_m; ++mi) {
              const Range& mr = m_tiles[mb + mi];
              for (int64_t ni = 0; ni < block_n; ++ni) {
                const Range& nr = n_tiles[nb + ni];
                b.emit(Opcode::nc_matmul)
                    .tensor("dst", b.view(psum, {span(0, mr.size), at(set * kPsumTilesPerSet + mi * nb_tiles + ni),
                                                 span(0, nr.size)}))
                    .tensor("stationary", operand(ring, kr.size, slot, {mi * mt, mr.size}))
                    .tensor("moving", operand(resident, kr.size, j, {ni * nt, nr.size}))
                    .word("accumulate", start ? "false" : "true")
                    .word("perf_mode", double_row ? "double_row" : "none");
              }
            }
          }
        }
        // Evacuate the block: PSUM -> (epilogue) -> output dtype in SBUF -> HBM, alternating the
        // Vector and Scalar engines so both drain PSUM while the Tensor engine starts the next block.
        const int64_t parity = set;
        for (int64_t mi = 0; mi < block_m; ++mi) {
          const Range& mr = m_tiles[mb + mi];
          if (spec.residual) {
            b.emit(Opcode::dma_copy)
                .tensor("dst", b.view(residual_tile, {span(0, mr.size), at(parity), span(0, cols.size)}))
                .tensor("src", hbm_2d(ctx, uint32_t(tensors.residual), batch, mr, cols))
                .imm("queue", kSideQueue);
          }
          for (int64_t ni = 0; ni < block_n; ++ni) {
            const Range& nr = n_tiles[nb + ni];
            const Engine engine = evac_step++ % 2 ? Engine::scalar : Engine::vector;
            isa::AccessPattern acc =
                b.view(psum, {span(0, mr.size), at(set * kPsumTilesPerSet + mi * nb_tiles + ni), span(0, nr.size)});
            isa::AccessPattern dst = b.view(out, {span(0, mr.size), at(parity), at(mi), span(ni * nt, nr.size)});
            if (!epilogue) {
              evacuate(b, dst, acc, engine);
              continue;
            }
            isa::AccessPattern x = b.view(work, {span(0, mr.size), at(parity), span(ni * nt, nr.size)});
            isa::AccessPattern current = acc;
            if (spec.bias) {
              b.emit(Opcode::tensor_tensor)
                  .tensor("dst", x)
                  .tensor("data1", acc)
                  .tensor("data2", b.view(bias_tile, {span(0, mr.size), span(ni * nt, nr.size)}))
                  .word("op", "add");
              current = x;
            }
            if (spec.activation) {
              b.emit(Opcode::activation)
                  .tensor("dst", spec.residual ? x : dst)
                  .tensor("data", current)
                  .imm("op", double(*spec.activation));
              current = x;
            } else if (!spec.residual) {
              evacuate(b, dst, current, engine);
            }
            if (spec.residual) {
              b.emit(Opcode::tensor_tensor)
                  .tensor("dst", dst)
                  .tensor("data1", current)
                  .tensor("data2", b.view(residual_tile, {span(0, mr.size), at(parity), span(ni * nt, nr.size)}))
                  .word("op", "add");
            }
          }
          b.emit(Opcode::dma_copy)
              .tensor("dst", hbm_2d(ctx, tensors.c, batch, mr, cols))
              .tensor("src", b.view(out, {span(0, mr.size), at(parity), at(mi), span(0, cols.size)}))
              .imm("queue", double(kStoreQueue + parity));
        }
      }
    }
  }
}

isa::Program matmul_program(const MatmulSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder b("matmul", config.generation);
  auto shape = [&](int64_t rows, int64_t cols) {
    std::vector<uint32_t> s = {uint32_t(rows), uint32_t(cols)};
    if (spec.batch > 1) s.insert(s.begin(), uint32_t(spec.batch));
    return s;
  };
  MatmulTensors t{};
  t.a = b.hbm("a", spec.input_dtype, spec.a_transposed ? shape(spec.k, spec.m) : shape(spec.m, spec.k),
              isa::AllocationRole::input);
  t.b = b.hbm("b", spec.input_dtype, spec.b_transposed ? shape(spec.n, spec.k) : shape(spec.k, spec.n),
              isa::AllocationRole::input);
  if (spec.bias) t.bias = b.hbm("bias", DType::fp32, {uint32_t(spec.n)}, isa::AllocationRole::input);
  if (spec.residual) t.residual = b.hbm("residual", DType::fp32, shape(spec.m, spec.n), isa::AllocationRole::input);
  t.c = b.hbm("c", spec.output_dtype, shape(spec.m, spec.n), isa::AllocationRole::output);
  KernelContext ctx{b, config, "", core, cores};
  build_matmul(ctx, spec, t);
  return b.finish();
}

}  // namespace trnsim::kernels
