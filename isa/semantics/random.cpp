// The PRNG instructions of the Vector and GpSimd engines (rng, rand2, dropout, set_rng_seed, rand_set_state,
// rand_get_state) on the per-core generator states of CoreState; the generator, the state layout and the seeding
// are described in isa/rng.h.
#include <string>

#include "isa/isa_error.h"
#include "isa/rng.h"
#include "isa/semantics/bit_alias.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {
namespace {

std::string shape_text(const AccessPattern& ap) {
  return "[" + std::to_string(ap.partitions()) + ", " + std::to_string(ap.free_elements()) + "]";
}

bool is_32bit_integer(DType d) { return d == DType::int32 || d == DType::uint32; }

// The states of the lanes of `ap`'s partitions on the instruction's engine.
XorwowState* lane_states(const Instruction& inst, ExecContext& ctx, const AccessPattern& ap, uint32_t& per_lane) {
  std::vector<XorwowState>& states = ctx.state.rng_states(inst.engine);
  per_lane = ctx.state.rng_states_per_lane(inst.engine);
  uint32_t first = ctx.state.first_partition(ap);
  if ((size_t{first} + ap.partitions()) * per_lane > states.size()) {
    throw IsaError("partitions " + std::to_string(first) + ".." + std::to_string(first + ap.partitions() - 1) +
                   " have no lane on the " + std::string(enum_name(inst.engine)) + " engine");
  }
  return states.data() + size_t{first} * per_lane;
}

// One 32-bit draw per element of a [partitions, free] tile, row-major: element i of partition p from state
// i % per_lane of lane p (isa/rng.h).
std::vector<uint32_t> draw(const Instruction& inst, ExecContext& ctx, const AccessPattern& ap) {
  uint32_t per_lane = 1;
  XorwowState* states = lane_states(inst, ctx, ap, per_lane);
  std::vector<uint32_t> bits(ap.elements());
  uint64_t free = ap.free_elements();
  for (uint32_t p = 0; p < ap.partitions(); ++p) {
    for (uint64_t i = 0; i < free; ++i) bits[p * free + i] = states[size_t{p} * per_lane + i % per_lane].next();
  }
  return bits;
}

Tile read_bits(ExecContext& ctx, const AccessPattern& ap) {
  AccessPattern raw = ap;
  raw.dtype = DType::fp32;
  return ctx.read(raw);
}

void write_bits(ExecContext& ctx, const AccessPattern& ap, const std::vector<uint32_t>& bits) {
  AccessPattern raw = ap;
  raw.dtype = DType::fp32;
  Tile tile(ap.partitions(), ap.free_elements());
  for (size_t i = 0; i < bits.size(); ++i) tile.values[i] = numerics::bits_float(bits[i]);
  ctx.state.write(raw, tile);
  ctx.state.set_psum_accumulating(raw, false);
}

// The rng dtypes (ISA rng: "must be an integer type").
bool is_rng_dtype(DType d) {
  return d == DType::int8 || d == DType::int16 || d == DType::int32 || d == DType::uint8 || d == DType::uint16 ||
         d == DType::uint32;
}

}  // namespace

void exec_rng(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  if (!is_rng_dtype(dst.dtype)) {
    throw IsaError("dst must be int8, int16, int32, uint8, uint16 or uint32, not " + std::string(dtype_name(dst.dtype)));
  }
  std::vector<uint32_t> bits = draw(inst, ctx, dst);
  if (is_32bit_integer(dst.dtype)) {
    write_bits(ctx, dst, bits);
    return;
  }
  // The least significant bits of each draw (ISA rng), as the narrow integer they spell.
  const uint32_t width = dtype_info(dst.dtype).size_bits;
  const bool is_signed = dst.dtype == DType::int8 || dst.dtype == DType::int16;
  Tile tile(dst.partitions(), dst.free_elements());
  for (size_t i = 0; i < bits.size(); ++i) {
    int64_t v = bits[i] & ((uint32_t{1} << width) - 1);
    if (is_signed && (v >> (width - 1)) & 1) v -= int64_t{1} << width;
    tile.values[i] = static_cast<float>(v);
  }
  ctx.write(dst, tile);  // exact: narrow integers are exact in fp32
}

// rand2: u in [0, 1) from the top 24 bits of a draw (isa/rng.h), then min + u * (max - min) in fp32, rounded once
// to dst.dtype. NKI writes the range as [min, max]; max itself is not reached here.
void exec_rand2(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  std::vector<float> low = ctx.per_partition(inst, "min", dst.partitions());
  std::vector<float> high = ctx.per_partition(inst, "max", dst.partitions());
  std::vector<uint32_t> bits = draw(inst, ctx, dst);
  Tile tile(dst.partitions(), dst.free_elements());
  for (uint32_t p = 0; p < tile.partitions; ++p) {
    float span = high[p] - low[p];
    for (uint64_t i = 0; i < tile.free; ++i) {
      float u = static_cast<float>(unit_interval(bits[p * tile.free + i]));
      tile.at(p, i) = low[p] + u * span;
    }
  }
  ctx.write(dst, tile);
}

// dropout: element kept where its draw u (as rand2's) is >= prob, else 0 (all-zero bits, 0 in every dtype).
// ISA dropout does not scale the kept elements. The kept ones are copied bit for bit (dst.dtype == data.dtype).
void exec_dropout(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  if (dst.partitions() != data.partitions() || dst.free_elements() != data.free_elements()) {
    throw IsaError("dst is " + shape_text(dst) + " but data is " + shape_text(data) +
                   " (partitions and elements per partition must match)");
  }
  if (dst.dtype != data.dtype) {
    throw IsaError("dst.dtype must match data.dtype (" + std::string(dtype_name(data.dtype)) + "), not " +
                   std::string(dtype_name(dst.dtype)));
  }
  std::vector<float> prob = ctx.per_partition(inst, "prob", data.partitions());
  DType alias{};
  bool bits = bit_alias(data.dtype, alias);
  AccessPattern s = data, d = dst;
  if (bits) s.dtype = d.dtype = alias;
  Tile x = ctx.read(s);
  std::vector<uint32_t> draws = draw(inst, ctx, data);
  for (uint32_t p = 0; p < x.partitions; ++p) {
    for (uint64_t i = 0; i < x.free; ++i) {
      if (unit_interval(draws[p * x.free + i]) < double{prob[p]}) x.at(p, i) = 0.0f;
    }
  }
  write_aliased(ctx, dst, d, x, bits);
}

void exec_set_rng_seed(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& seeds = inst.tensor("src_seeds");
  if (seeds.partitions() != 1 || seeds.free_elements() != 1 || dtype_size_bytes(seeds.dtype) != 4) {
    throw IsaError("src_seeds must be a [1, 1] tensor of a 32-bit dtype, got " + std::string(dtype_name(seeds.dtype)) +
                   shape_text(seeds));
  }
  Tile seed = read_bits(ctx, seeds);
  ctx.state.seed_rng(Engine::vector, numerics::float_bits(seed.values[0]));
}

void exec_rand_set_state(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& src = inst.tensor("src_seeds");
  uint32_t per_lane = 1;
  XorwowState* states = lane_states(inst, ctx, src, per_lane);
  if (src.dtype != DType::uint32 || src.free_elements() != uint64_t{per_lane} * kXorwowWords) {
    throw IsaError("src_seeds must be uint32 [P, " + std::to_string(per_lane * kXorwowWords) + "] on the " +
                   std::string(enum_name(inst.engine)) + " engine, got " + std::string(dtype_name(src.dtype)) +
                   shape_text(src));
  }
  Tile words = read_bits(ctx, src);
  for (uint32_t p = 0; p < src.partitions(); ++p) {
    for (uint32_t w = 0; w < per_lane * kXorwowWords; ++w) {
      states[size_t{p} * per_lane + w / kXorwowWords].words[w % kXorwowWords] = numerics::float_bits(words.at(p, w));
    }
  }
}

void exec_rand_get_state(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  uint32_t per_lane = 1;
  XorwowState* states = lane_states(inst, ctx, dst, per_lane);
  if (dst.dtype != DType::uint32 || dst.free_elements() != uint64_t{per_lane} * kXorwowWords) {
    throw IsaError("dst must be uint32 [P, " + std::to_string(per_lane * kXorwowWords) + "] on the " +
                   std::string(enum_name(inst.engine)) + " engine, got " + std::string(dtype_name(dst.dtype)) +
                   shape_text(dst));
  }
  std::vector<uint32_t> bits(dst.elements());
  for (uint32_t p = 0; p < dst.partitions(); ++p) {
    for (uint32_t w = 0; w < per_lane * kXorwowWords; ++w) {
      bits[size_t{p} * per_lane * kXorwowWords + w] = states[size_t{p} * per_lane + w / kXorwowWords].words[w % kXorwowWords];
    }
  }
  write_bits(ctx, dst, bits);
}

}  // namespace trnsim::isa
