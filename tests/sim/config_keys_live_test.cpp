// Every config key is live (issue 13, item 4): each leaf key of the config schema, walked through the same visitor
// that drives parsing and `trnsim config keys` (describe_config_keys, so a new key is covered without touching this
// file), either changes some simulated quantity of a small fixed probe set when it is perturbed, or says in its doc
// that it is informational (the doc starts with kInformationalPrefix, config/hardware_config.h).
//
// A perturbation is a valid other value, applied as a `--set` override through load_config: x2 and /2 of a number
// (then the ends of its range), the other words of an enum, the other boolean, a list with an element dropped, added,
// scaled or rotated, a per-dtype map scaled or without an entry. An override the config's validation refuses is no
// perturbation; a key that no valid override of its own can move (lanes equal the partitions, PSUM bytes are banks x
// bank bytes, ...) is perturbed together with the keys its validation rule ties it to (kScaledTogether,
// kCoupledOtherwise).
//
// The simulated quantities of a probe: its legality outcome (the rules it breaks, or the generation it cannot run
// on), and when legal, its timing-only simulation: total ns and cycles, per-engine busy ns and instruction counts,
// FLOPs, DMA / HBM bytes and the memory high-water marks (not MFU: a peak from the derived figures is not a
// simulated quantity). The probes cover the Tensor engine (bf16 / fp32 / fp8 double_row / MX matmuls, PSUM
// accumulation, a PE transpose), the Vector engine (bf16 / fp32 ops in and out of the performance modes), the
// Scalar engine (activation with its accumulator, the v4 copy modes), GpSimd, the sequencers (semaphores, barrier),
// DMA of a few shapes between HBM and SBUF (strided, SBUF -> SBUF, read-add-write, hardware DGE, transposes), the
// PSUM and SBUF access conflicts, two cores sharing an HBM stack, memory bounds, a library kernel split over the
// config's logical core, and one host-link copy. Each key is tried on trn2, trn1 and trn3.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "config/config_printer.h"
#include "config/config_tree.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_invocation.h"
#include "record/launch_timing.h"
#include "sim/simulator.h"
#include "sim/system/collectives.h"

namespace trnsim::sim {
namespace {

// Keys that are dead today and owned by work in progress elsewhere: each must still be dead (so the entry is removed
// when that work makes it live), and the list should shrink to nothing.
const std::map<std::string, std::string> kPending = {
};

// Keys the config's validation ties to others, perturbed together when no perturbation of their own is valid (see
// coupled_perturbations). These are scaled together by the same factor, so the rule that ties them still holds.
const std::map<std::string, std::vector<std::string>> kScaledTogether = {
    // lanes == SBUF partitions == PSUM partitions (config_validate); pe_rows <= partitions.
    {"core.sbuf.partitions",
     {"core.psum.partitions", "core.vector.lanes", "core.scalar.lanes", "core.gpsimd.lanes", "core.tensor.pe_rows"}},
    {"core.psum.partitions",
     {"core.sbuf.partitions", "core.vector.lanes", "core.scalar.lanes", "core.gpsimd.lanes", "core.tensor.pe_rows"}},
    {"core.vector.lanes",
     {"core.sbuf.partitions", "core.psum.partitions", "core.scalar.lanes", "core.gpsimd.lanes", "core.tensor.pe_rows"}},
    {"core.scalar.lanes",
     {"core.sbuf.partitions", "core.psum.partitions", "core.vector.lanes", "core.gpsimd.lanes", "core.tensor.pe_rows"}},
    {"core.gpsimd.lanes",
     {"core.sbuf.partitions", "core.psum.partitions", "core.vector.lanes", "core.scalar.lanes", "core.tensor.pe_rows"}},
    // banks x bank_bytes == bytes_per_partition.
    {"core.psum.banks", {"core.psum.bytes_per_partition"}},
    {"core.psum.bank_bytes", {"core.psum.bytes_per_partition"}},
    {"core.psum.bytes_per_partition", {"core.psum.banks"}},
    // max_stationary_free_size <= pe_columns.
    {"core.tensor.pe_columns", {"core.tensor.max_stationary_free_size"}},
};

// The other coupled keys, each with the rule and how coupled_perturbations keeps it.
const std::map<std::string, std::string> kCoupledOtherwise = {
    // A system's chips are the product of its torus dimensions or of its switch levels' group sizes.
    {"systems.<name>.chips", "half the chips: the last torus dimension or the outermost group halved"},
    {"systems.<name>.torus_dimensions", "the last dimension halved, with the chips"},
    {"systems.<name>.switch_levels[].chips_per_group", "the outermost group halved, with the chips"},
    // Each topology has its own lists.
    {"systems.<name>.topology", "a torus as one switch level of all its chips (and back: a switch as a ring)"},
    // stack_by_core lists one stack per core, every stack serving one.
    {"chip.physical_cores", "half the chip: the first half of hbm.stack_by_core, half the stacks and their bandwidth"},
    {"hbm.stacks", "half the stacks: each core's stack index halved"},
    // Each width is at most lanes x the fastest mode: the list cannot lose its fastest mode unless the widths narrow.
    {"core.vector.performance_modes", "without the fastest mode: the widths capped at lanes x the next one"},
    {"core.scalar.performance_modes", "without the fastest mode: the widths capped at lanes x the next one"},
};

bool informational(const ConfigKeyDoc& key) { return key.doc.rfind(kInformationalPrefix, 0) == 0; }

std::string number_text(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e15) return std::to_string(int64_t(value));
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

std::vector<std::string> split_list(const std::string& text) {  // "[a, b]" or "{a: 1, b: 2}" -> items
  std::vector<std::string> items;
  std::string inner = text.substr(1, text.size() - 2);
  std::stringstream in(inner);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

std::string join_list(const std::vector<std::string>& items, char open, char close) {
  std::string text(1, open);
  for (size_t i = 0; i < items.size(); ++i) text += (i ? ", " : "") + items[i];
  return text + close;
}

// ---- the probe set ----

struct Probe {
  enum Kind { program, kernel_split, host_link, collectives };
  Probe(std::string name_, std::string text_, std::vector<uint32_t> cores_ = {0}, bool simulate_ = true,
        const char* illegal_on_ = "", Kind kind_ = program)
      : name(std::move(name_)), text(std::move(text_)), cores(std::move(cores_)), simulate(simulate_),
        illegal_on(illegal_on_), kind(kind_) {}
  std::string name;
  std::string text;            // .tasm, without its target line (the base config's generation is put first)
  std::vector<uint32_t> cores;  // physical cores it runs on (SPMD)
  bool simulate;                // false: legality only (it declares more HBM than a run should touch)
  const char* illegal_on;       // "*": illegal on every shipped config (a perturbation may make it legal)
  Kind kind;
  std::optional<isa::Program> parsed;  // the program for the base config's generation (none: not on that one)
};

std::vector<Probe> make_probes(const HardwareConfig& base) {
  std::vector<Probe> probes = {
      {"tensor", R"(
sbuf w : bf16[128, 128]
sbuf x : bf16[128, 512]
sbuf wf : fp32[128, 128]
sbuf xf : fp32[128, 128]
sbuf tf : fp32[32, 128]
sbuf out : fp32[128, 512]
psum acc : fp32[128, 512]
psum acc2 : fp32[128, 64]
psum acc3 : fp32[16, 8]
psum accf : fp32[128, 128]
psum tp : fp32[128, 32]
nc_matmul dst=acc, stationary=w, moving=x, accumulate=false
nc_matmul dst=acc, stationary=w, moving=x, accumulate=true
nc_matmul dst=acc2, stationary=w, moving=x[0:128, 0:64], accumulate=false
nc_matmul dst=acc3, stationary=w[0:128, 0:16], moving=x[0:128, 0:8], accumulate=false
nc_matmul dst=accf, stationary=wf, moving=xf, accumulate=false
nc_transpose dst=tp, data=tf
tensor_copy dst=out, src=acc
)"},
      {"pe_tiling", R"(
sbuf w : bf16[128, 128]
sbuf x : bf16[128, 512]
psum acc : fp32[128, 4, 512]
nc_matmul dst=acc[0:32, 0, 0:512], stationary=w[0:32, 0:32], moving=x[0:32, 0:512], tile_position=[0,0], tile_size=[32,32]
nc_matmul dst=acc[0:32, 1, 0:512], stationary=w[32:64, 0:32], moving=x[32:64, 0:512], tile_position=[32,32], tile_size=[32,32]
nc_matmul dst=acc[0:64, 2, 0:512], stationary=w[64:128, 0:64], moving=x[64:128, 0:512], tile_position=[64,64], tile_size=[64,64]
nc_matmul dst=acc[0:128, 3, 0:512], stationary=w, moving=x
)"},
      {"double_row", R"(
sbuf w : fp8_e4m3[128, 2, 128]
sbuf x : fp8_e4m3[128, 2, 512]
psum acc : fp32[128, 512]
nc_matmul dst=acc, stationary=w, moving=x, perf_mode=double_row
nc_matmul dst=acc, stationary=w, moving=x, perf_mode=double_row
)"},
      {"mx", R"(
sbuf w : mxfp8_e4m3[128, 128]
sbuf x : mxfp8_e4m3[128, 512]
sbuf ws : uint8[128, 128]
sbuf xs : uint8[128, 512]
psum acc : fp32[128, 512]
nc_matmul_mx dst=acc, stationary=w, moving=x, stationary_scale=ws, moving_scale=xs
nc_matmul_mx dst=acc, stationary=w, moving=x, stationary_scale=ws, moving_scale=xs
)"},
      {"vector", R"(
sbuf a : bf16[128, 1024]
sbuf b : bf16[128, 512]
sbuf af : fp32[128, 512]
sbuf bf : fp32[128, 512]
sbuf of : fp32[128, 512]
sbuf ob : bf16[128, 512]
sbuf r : fp32[128, 1]
tensor_copy dst=ob, src=a[0:128, 0:512]
tensor_copy dst=ob, src=a[0:128, 0:1024:2]
tensor_scalar dst=ob, data=b, op0=add, operand0=1.0
tensor_tensor dst=of, data1=af, data2=bf, op=add
tensor_tensor dst=ob, data1=a[0:128, 0:512], data2=b, op=add
tensor_reduce dst=r, op=add, data=af, axis=[1]
tensor_scalar dst=of, data=of, op0=multiply, operand0=2.0
tensor_copy dst=ob[0:128, 0:32], src=b[0:128, 0:32]
reciprocal dst=r, data=r
)"},
      {"scalar", R"(
sbuf x : fp32[128, 512]
sbuf y : fp32[128, 512]
sbuf s : fp32[128, 1]
activation dst=y, op=exp, data=x, reduce_op=add, reduce_res=s
activation dst=x, op=exp, data=y
activation dst=y[0:128, 0:16], op=exp, data=x[0:128, 0:16]
)"},
      {"scalar_copy", R"(
sbuf a : bf16[128, 512]
sbuf b : bf16[128, 512]
tensor_copy dst=b, src=a, engine=scalar
tensor_scalar dst=a, data=b, op0=multiply, operand0=2.0, engine=scalar
)"},
      {"gpsimd", R"(
sbuf a : fp32[128, 512]
sbuf b : fp32[128, 512]
sbuf c : fp32[128, 512]
sbuf i : int32[128, 64]
sbuf r : fp32[1, 512]
tensor_tensor dst=c, data1=a, data2=b, op=add, engine=gpsimd
iota dst=i, pattern=[[1, 64]]
tensor_partition_reduce dst=r, op=add, data=a
)"},
      {"sync", R"(
sbuf a : fp32[128, 64]
sbuf b : fp32[128, 64]
tensor_copy dst=b, src=a
sem_signal sem=0, value=1, engine=vector
sem_wait sem=0, value=1, engine=sync
sem_signal sem=1, value=1, engine=gpsimd
sem_wait sem=1, value=1, engine=scalar
sem_signal sem=2, value=1, engine=tensor
barrier
tensor_copy dst=a, src=b
)"},
      {"dma", R"(
hbm x : bf16[128, 2048] input
hbm y : bf16[4, 4096] input
hbm z : bf16[128, 2048] output
hbm s : fp32[128, 64] input
sbuf xs : bf16[128, 2048]
sbuf ys : bf16[4, 4096]
sbuf ss : fp32[128, 16]
sbuf xs2 : bf16[128, 2048]
dma_copy dst=xs, src=x
dma_copy dst=ys, src=y, queue=1
dma_copy dst=ss, src=s[0:128, 0:64:4], queue=2
dma_copy dst=xs2, src=xs, queue=3
dma_copy dst=z, src=xs2, queue=15
)"},
      {"dma_read_add_write", R"(
hbm w : fp32[128, 256] input
sbuf ws : fp32[128, 256]
sbuf ws2 : fp32[128, 256]
dma_copy dst=ws, src=w
dma_copy dst=ws2, src=ws, dst_rmw_op=add, queue=1
)"},
      {"dma_hardware_dge", R"(
hbm x : bf16[128, 1024] input
hbm w : fp32[128, 256] input
sbuf xs : bf16[128, 1024]
sbuf ws : fp32[128, 256]
sbuf xs2 : bf16[128, 1024]
dma_copy dst=xs, src=x, dge_mode=hwdge
dma_copy dst=ws, src=w, dge_mode=hwdge, queue=1
dma_copy dst=xs2, src=x, dge_mode=hwdge, queue=2
dma_copy dst=ws[0:32, 0:8], src=w[0:32, 0:8], dge_mode=hwdge, queue=3
dma_copy dst=ws[32:64, 0:8], src=w[32:64, 0:8], dge_mode=hwdge, queue=4
dma_copy dst=ws[64:96, 0:8], src=w[64:96, 0:8], dge_mode=hwdge, queue=5
dma_copy dst=ws[96:128, 0:8], src=w[96:128, 0:8], dge_mode=hwdge, queue=6
dma_copy dst=xs[0:32, 0:8], src=x[0:32, 0:8], dge_mode=hwdge, queue=7
)"},
      {"dma_software_dge", R"(
hbm x : bf16[128, 1024] input
sbuf xs : bf16[128, 1024]
dma_copy dst=xs[:, 0:1024:2], src=x[:, 0:1024:2], dge_mode=swdge
)"},
      {"dma_transpose", R"(
hbm x : bf16[128, 128] input
sbuf t : bf16[128, 128]
sbuf t2 : bf16[128, 128]
dma_transpose dst=t, src=x
dma_transpose dst=t2, src=t, queue=1
)"},
      {"psum_conflicts", R"(
sbuf w : bf16[128, 128]
sbuf x : bf16[128, 512]
psum p0 : fp32[128, 512]
psum p1 : fp32[128, 512]
sbuf o0 : fp32[128, 512]
sbuf o1 : fp32[128, 512]
sbuf o2 : fp32[128, 512]
nc_matmul dst=p0, stationary=w, moving=x, accumulate=false
nc_matmul dst=p0, stationary=w, moving=x, accumulate=true
nc_matmul dst=p1, stationary=w, moving=x, accumulate=false
tensor_copy dst=o0, src=p0
activation dst=o1, op=exp, data=p1
tensor_copy dst=o2, src=p1
)"},
      {"sbuf_conflicts", R"(
sbuf a : bf16[128, 2048]
sbuf b : bf16[128, 2048]
sbuf c : fp32[128, 1024]
sbuf d : fp32[128, 1024]
sbuf e : fp32[128, 1024]
sbuf w : bf16[128, 128]
psum p : fp32[128, 512]
tensor_copy dst=b, src=a
tensor_tensor dst=d, data1=c, data2=c, op=add, engine=gpsimd
nc_matmul dst=p, stationary=w, moving=a[0:128, 0:512]
tensor_tensor dst=e, data1=c, data2=c, op=add
tensor_tensor dst=d, data1=c, data2=e, op=add, engine=gpsimd
sbuf f : fp32[128, 1024]
sbuf g : fp32[128, 1024]
tensor_tensor dst=f, data1=c, data2=c, op=multiply
activation dst=g, op=exp, data=c
)"},
      {"two_cores_one_stack", R"(
hbm x : bf16[128, 8192] input
sbuf xs : bf16[128, 8192]
dma_copy dst=xs, src=x
dma_copy dst=xs, src=x, queue=1
)",
       {0, 1}},
      {"gpsimd_reads_psum", R"(
psum p : fp32[128, 512]
sbuf o : fp32[128, 512]
tensor_copy dst=o, src=p, engine=gpsimd
)",
       {0}, true, "*"},
  };
  // A DMA on the chip's last core (a chip of fewer cores does not have it).
  probes.push_back({"last_core", R"(
hbm x : bf16[128, 512] input
sbuf xs : bf16[128, 512]
dma_copy dst=xs, src=x
)",
                    {base.chip.physical_cores - 1}});
  // Memory bounds at the base config's sizes: a tensor at the top of SBUF, one in the last PSUM bank, a 32-partition
  // access on the second quadrant, and HBM tensors filling most of the HBM (declared, never moved: legality only).
  const uint64_t hbm_rows = base.hbm.capacity_bytes * 3 / 4 / (1u << 20);
  probes.push_back({"memory_bounds",
                    "hbm big : uint8[" + std::to_string(hbm_rows) + ", 1048576]\n"
                    "sbuf top : fp32[128, 1024] @ 0:" + std::to_string(base.core.sbuf.bytes_per_partition - 4096) + "\n"
                    "sbuf s0 : fp32[128, 1024]\n"
                    "psum last : fp32[128, 512] @ 0:" + std::to_string(base.core.psum.bytes_per_partition - 2048) + "\n"
                    "sbuf q : fp32[128, 64]\n"
                    "sbuf q2 : fp32[128, 64]\n"
                    "tensor_copy dst=top, src=s0\n"
                    "tensor_copy dst=s0[0:128, 0:512], src=last\n"
                    "tensor_copy dst=q[32:64, 0:64], src=q2[32:64, 0:64]\n",
                    {0},
                    false});
  probes.emplace_back("kernel_split_over_the_logical_core", "", std::vector<uint32_t>{0}, true, "",
                      Probe::kernel_split);
  probes.emplace_back("host_link_copy", "", std::vector<uint32_t>{0}, true, "", Probe::host_link);
  probes.emplace_back("collectives_on_every_system", "", std::vector<uint32_t>{0}, true, "", Probe::collectives);

  const std::string target = "target " + std::string(enum_name(base.generation)) + "\n";
  for (Probe& probe : probes) {
    if (probe.kind != Probe::program) continue;
    try {
      probe.parsed = isa::parse_tasm(target + probe.text, probe.name);
    } catch (const isa::IsaError&) {
      // An instruction or engine this generation does not have (nc_matmul_mx before trn3, ...).
    }
  }
  return probes;
}

std::string stats_signature(const SimStats& s) {
  std::ostringstream out;
  out.precision(17);
  out << "ns=" << s.total_ns << " launch=" << s.launch_ns << " cycles=" << s.total_cycles << " flops=" << s.flops << " dma=" << s.dma_bytes
      << " hbm=" << s.hbm_bytes << " sbuf_hw=" << s.sbuf_high_water_bytes << " psum_hw=" << s.psum_high_water_bytes;
  for (const auto& [engine, e] : s.engines) out << ' ' << engine << '=' << e.busy_ns << '/' << e.instructions;
  return out.str();
}

std::string legality_signature(const isa::Program& program, const HardwareConfig& hw) {
  if (program.generation != hw.generation) return "targets another generation";
  std::string rules;
  for (const isa::LegalityIssue& issue : isa::find_legality_issues(program, hw)) {
    rules += " " + std::to_string(issue.instruction) + ":" + issue.rule;
  }
  return rules.empty() ? "" : "illegal:" + rules;
}

// Collectives on every multi-chip system of the config: all-reduces at the runtime's size thresholds (1 MiB and
// 56 MiB, the defaults of collectives.mesh_max_bytes / recursive_max_bytes) and above, and an all-gather. Cached by
// what they read (most perturbations leave it alone, and the 144-chip system is the costliest probe).
std::string collectives_signature(const HardwareConfig& hw) {
  std::ostringstream key;
  key.precision(17);
  key << hw.chip.collective_cores << ' ' << hw.hbm.bandwidth_gbps << ' ' << hw.neuronlink.latency_ns << ' '
      << hw.collectives.step_latency_ns << ' ' << hw.collectives.mesh_max_bytes << ' '
      << hw.collectives.recursive_max_bytes;
  for (const auto& [name, system] : hw.systems) {
    key << ' ' << name << ':' << system.chips << ':' << int(system.topology);
    for (uint32_t d : system.torus_dimensions) key << ',' << d;
    for (double b : system.bandwidth_per_chip_gbps_by_dimension) key << ',' << b;
    for (const SwitchLevelConfig& l : system.switch_levels) {
      key << ';' << l.chips_per_group << ',' << l.bandwidth_per_chip_gbps << ',' << l.latency_ns;
    }
  }
  static std::map<std::string, std::string> cache;
  auto hit = cache.find(key.str());
  if (hit != cache.end()) return hit->second;
  std::ostringstream out;
  out.precision(17);
  for (const auto& [name, system] : hw.systems) {
    if (system.chips < 2) continue;
    out << name << ':';
    for (auto [op, bytes] : std::vector<std::pair<CollectiveOp, uint64_t>>{{CollectiveOp::all_reduce, 1u << 20},
                                                                          {CollectiveOp::all_reduce, 56u << 20},
                                                                          {CollectiveOp::all_reduce, 256u << 20},
                                                                          {CollectiveOp::all_gather, 64u << 10}}) {
      CollectiveSimulator simulator(hw, name);
      CollectiveRequest request;
      request.op = op;
      request.bytes = bytes;
      const CollectiveTiming t = simulator.run(request);
      out << ' ' << collective_algorithm_name(t.algorithm) << '=' << t.latency_ns;
    }
    out << "; ";
  }
  return cache[key.str()] = out.str();
}

// What a probe gives on a config (empty optional: the probe does not exist for this generation).
std::optional<std::string> outcome(const Probe& probe, const HardwareConfig& hw) {
  SimOptions options;
  options.timing_only = true;
  try {
    if (probe.kind == Probe::host_link) return number_text(record::host_link_ns(hw, 1u << 20));
    if (probe.kind == Probe::collectives) return collectives_signature(hw);
    if (probe.kind == Probe::kernel_split) {
      // A library kernel as the device builds it: split over the config's logical core (kernels::build_parts).
      kernels::BinarySpec spec;
      spec.a_shape = spec.b_shape = {512, 2048};
      const uint32_t lnc = kernels::logical_core_size(hw);
      kernels::ProgramParts parts = kernels::build_parts(
          [&](const HardwareConfig& c, uint32_t core, uint32_t cores) {
            return kernels::binary_program(spec, c, core, cores);
          },
          hw, lnc);
      std::vector<const isa::Program*> programs;
      std::string legality;
      for (const auto& part : parts) {
        programs.push_back(part.get());
        legality += legality_signature(*part, hw);
      }
      if (!legality.empty()) return legality;
      options.cores.clear();
      for (uint32_t c = 0; c < lnc; ++c) options.cores.push_back(c);
      return stats_signature(simulate(programs, hw, "probe", options, nullptr, /*shared_hbm=*/true).stats);
    }
    if (!probe.parsed) return std::nullopt;
    std::string legality = legality_signature(*probe.parsed, hw);
    if (!legality.empty()) return legality;
    if (!probe.simulate) return std::string("legal");
    options.cores = probe.cores;
    return stats_signature(simulate(*probe.parsed, hw, "probe", options).stats);
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

// ---- perturbations ----

struct Leaf {
  std::string path;      // the flattened path: "core.tensor.clock_ghz", "core.memory_access.conflicts[0].scope"
  std::string override;  // the same as an override path: "core.memory_access.conflicts.0.scope"
  std::string value;     // as printed canonically
};

// The concrete leaves of a schema key in a config ("a[].b" -> "a[0].b", "<name>" -> every name, a per-dtype map ->
// the map itself, its entries as one value "{bf16: 512, ...}").
std::vector<Leaf> concrete_leaves(const ConfigKeyDoc& key, const std::vector<ConfigLeaf>& flat) {
  const bool map = key.range.rfind("dtype -> ", 0) == 0;
  std::string pattern;
  for (size_t i = 0; i < key.path.size(); ++i) {
    if (key.path.compare(i, 2, "[]") == 0) {
      pattern += "\\[[0-9]+\\]";
      ++i;
    } else if (key.path.compare(i, 6, "<name>") == 0) {
      pattern += "[^.]+";
      i += 5;
    } else if (std::string(".[]()*+?^$\\|{}").find(key.path[i]) != std::string::npos) {
      pattern += std::string("\\") + key.path[i];
    } else {
      pattern += key.path[i];
    }
  }
  const std::regex whole(pattern), entry(pattern + "\\.([a-z0-9_]+)");
  std::vector<Leaf> leaves;
  std::map<std::string, std::vector<std::string>> maps;  // map path -> "dtype: value" entries
  for (const ConfigLeaf& leaf : flat) {
    std::smatch m;
    if (map && std::regex_match(leaf.path, m, entry)) {
      std::string prefix = leaf.path.substr(0, leaf.path.size() - m[1].length() - 1);
      maps[prefix].push_back(m[1].str() + ": " + leaf.value);
    } else if (map && std::regex_match(leaf.path, whole) && leaf.value == "{}") {
      maps[leaf.path];
    } else if (!map && std::regex_match(leaf.path, whole)) {
      leaves.push_back({leaf.path, "", leaf.value});
    }
  }
  for (const auto& [path, entries] : maps) leaves.push_back({path, "", join_list(entries, '{', '}')});
  for (Leaf& leaf : leaves) {
    leaf.override = std::regex_replace(leaf.path, std::regex("\\[([0-9]+)\\]"), ".$1");
  }
  return leaves;
}

struct NumberRange {
  bool integer = false;
  double min = 0, max = 0;
};

std::optional<NumberRange> number_range(const std::string& range) {
  std::smatch m;
  static const std::regex re("(integer|number) in \\[([^,]+), ([^\\]]+)\\]");
  if (!std::regex_search(range, m, re)) return std::nullopt;
  return NumberRange{m[1] == "integer", std::stod(m[2]), std::stod(m[3])};
}

// Other valid numbers: x2 and /2, then the ends of the range; integers rounded down, each clamped into the range.
std::vector<double> other_numbers(double value, const NumberRange& range, bool with_ends) {
  std::vector<double> candidates = {value * 2, value / 2, value == 0 ? 1 : value};
  if (with_ends) candidates.insert(candidates.end(), {range.min, range.max});
  std::vector<double> out;
  for (double c : candidates) {
    if (range.integer) c = std::floor(c);
    c = std::clamp(c, range.min, range.max);
    if (c != value && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

std::vector<std::string> words_of(const std::string& range) {  // "a|b|c" (or "a|b|c each") -> words
  std::string text = range.substr(0, range.find(' '));
  std::vector<std::string> words;
  std::stringstream in(text);
  for (std::string w; std::getline(in, w, '|');) words.push_back(w);
  return words;
}

// Every perturbation of one leaf: each a list of overrides applied together.
std::vector<std::vector<std::string>> perturbations(const ConfigKeyDoc& key, const Leaf& leaf) {
  std::vector<std::vector<std::string>> out;
  auto set = [&](const std::string& value) { out.push_back({leaf.override + "=" + value}); };
  const std::string& r = key.range;
  if (r == "true|false") {
    set(leaf.value == "true" ? "false" : "true");
  } else if (r == "string") {
    set("\"" + leaf.value.substr(1, leaf.value.size() - 2) + " (perturbed)\"");
  } else if (r.rfind("dtype -> ", 0) == 0) {
    const NumberRange range = *number_range(r);
    std::vector<std::string> entries = split_list(leaf.value);
    for (double factor : {0.5, 2.0}) {
      std::vector<std::string> scaled;
      for (const std::string& e : entries) {
        size_t colon = e.find(':');
        double v = std::stod(e.substr(colon + 1)) * factor;
        if (range.integer) v = std::floor(v);
        scaled.push_back(e.substr(0, colon) + ": " + number_text(std::clamp(v, range.min, range.max)));
      }
      set(join_list(scaled, '{', '}'));
    }
    if (!entries.empty()) set(join_list(std::vector<std::string>(entries.begin() + 1, entries.end()), '{', '}'));
  } else if (r.size() > 5 && r.compare(r.size() - 5, 5, " each") == 0) {
    std::vector<std::string> items = split_list(leaf.value);
    for (size_t i = 0; i < items.size(); ++i) {  // without one element
      std::vector<std::string> fewer = items;
      fewer.erase(fewer.begin() + long(i));
      set(join_list(fewer, '[', ']'));
    }
    if (!items.empty()) {
      std::vector<std::string> rotated(items.begin() + 1, items.end());
      rotated.push_back(items.front());
      set(join_list(rotated, '[', ']'));
    }
    if (std::optional<NumberRange> range = number_range(r)) {
      for (double factor : {2.0, 0.5}) {
        std::vector<std::string> scaled;
        for (const std::string& item : items) {
          double v = std::stod(item) * factor;
          if (range->integer) v = std::floor(v);
          scaled.push_back(number_text(std::clamp(v, range->min, range->max)));
        }
        if (!items.empty()) set(join_list(scaled, '[', ']'));
      }
      std::vector<std::string> longer = items;
      longer.push_back(number_text(items.empty() ? std::max(1.0, range->min) : std::stod(items.back()) * 2));
      set(join_list(longer, '[', ']'));
    } else {
      // A list of words (engines, dtypes): add the first word it lacks.
      std::vector<std::string> words;
      if (r == "dtype each") {
        for (const DTypeInfo& d : all_dtypes()) words.emplace_back(d.name);
      } else {
        words = words_of(r);
      }
      for (const std::string& w : words) {
        if (std::find(items.begin(), items.end(), w) != items.end()) continue;
        std::vector<std::string> longer = items;
        longer.push_back(w);
        set(join_list(longer, '[', ']'));
        break;
      }
    }
  } else if (std::optional<NumberRange> range = number_range(r)) {
    for (double v : other_numbers(std::stod(leaf.value), *range, /*with_ends=*/true)) set(number_text(v));
  } else {
    for (const std::string& w : words_of(r)) {
      if (w != leaf.value) set(w);
    }
  }
  return out;
}

// A key perturbed together with the keys a validation rule ties it to (kScaledTogether, kCoupledOtherwise).
std::vector<std::vector<std::string>> coupled_perturbations(const std::string& key,
                                                            const std::vector<ConfigLeaf>& flat) {
  auto text_of = [&](const std::string& path) {
    for (const ConfigLeaf& leaf : flat) {
      if (leaf.path == path) return leaf.value;
    }
    ADD_FAILURE() << "a coupling names " << path << ", which the config lacks";
    return std::string("0");
  };
  auto value_of = [&](const std::string& path) { return std::stod(text_of(path)); };
  auto scaled = [&](const std::string& path, double factor) {
    return path + "=" + number_text(std::max(1.0, std::floor(value_of(path) * factor)));
  };
  std::vector<std::vector<std::string>> out;
  if (kScaledTogether.count(key)) {
    for (double factor : {0.5, 2.0}) {
      std::vector<std::string> overrides = {scaled(key, factor)};
      for (const std::string& companion : kScaledTogether.at(key)) overrides.push_back(scaled(companion, factor));
      out.push_back(overrides);
    }
  } else if (key == "chip.physical_cores") {
    std::vector<std::string> stacks = split_list(text_of("hbm.stack_by_core"));
    stacks.resize(stacks.size() / 2);
    out.push_back({scaled(key, 0.5), "hbm.stack_by_core=" + join_list(stacks, '[', ']'), scaled("hbm.stacks", 0.5),
                   "hbm.bandwidth_gbps=" + number_text(value_of("hbm.bandwidth_gbps") / 2)});
  } else if (key == "hbm.stacks") {
    std::vector<std::string> stacks;
    for (const std::string& stack : split_list(text_of("hbm.stack_by_core"))) {
      stacks.push_back(number_text(std::stoi(stack) / 2));
    }
    out.push_back({scaled(key, 0.5), "hbm.stack_by_core=" + join_list(stacks, '[', ']')});
  } else if (key.rfind("systems.<name>.", 0) == 0 && kCoupledOtherwise.count(key)) {
    // Every multi-chip system of the config, by the leaves it has.
    std::map<std::string, std::map<std::string, std::string>> systems;  // name -> leaf (after the name) -> value
    for (const ConfigLeaf& leaf : flat) {
      if (leaf.path.rfind("systems.", 0) != 0) continue;
      const size_t dot = leaf.path.find('.', 8);
      if (dot == std::string::npos) continue;
      systems[leaf.path.substr(8, dot - 8)][leaf.path.substr(dot + 1)] = leaf.value;
    }
    for (const auto& [name, leaves] : systems) {
      const std::string at = "systems." + name + ".";
      const double chips = std::stod(leaves.at("chips"));
      if (chips < 2) continue;
      const std::string topology = leaves.at("topology");
      if (key == "systems.<name>.topology") {
        if (topology == "torus") {
          out.push_back({at + "topology=switched", at + "torus_dimensions=[]", at + "bandwidth_per_chip_gbps_by_dimension=[]",
                         at + "switch_levels=[{chips_per_group: " + number_text(chips) +
                             ", bandwidth_per_chip_gbps: 512, latency_ns: 500}]"});
        } else {
          out.push_back({at + "topology=torus", at + "switch_levels=[]", at + "torus_dimensions=[" + number_text(chips) + "]",
                         at + "bandwidth_per_chip_gbps_by_dimension=[512]"});
        }
        continue;
      }
      if (topology == "torus") {
        std::vector<std::string> dims = split_list(leaves.at("torus_dimensions"));
        if (dims.empty() || std::stoi(dims.back()) % 2) continue;
        dims.back() = number_text(std::stoi(dims.back()) / 2);
        out.push_back({at + "chips=" + number_text(chips / 2), at + "torus_dimensions=" + join_list(dims, '[', ']')});
      } else if (topology == "switched") {
        size_t levels = 0;
        while (leaves.count("switch_levels[" + std::to_string(levels) + "].chips_per_group")) ++levels;
        if (!levels) continue;
        const std::string last = "switch_levels[" + std::to_string(levels - 1) + "].chips_per_group";
        const int group = std::stoi(leaves.at(last));
        if (group % 2) continue;
        out.push_back({at + "chips=" + number_text(chips / 2),
                       at + "switch_levels." + std::to_string(levels - 1) + ".chips_per_group=" + number_text(group / 2)});
      }
    }
  } else if (kCoupledOtherwise.count(key)) {  // an engine's performance_modes
    const std::string engine = key.substr(0, key.rfind('.'));
    std::vector<std::string> modes = split_list(text_of(key));
    if (modes.size() < 2) return out;
    modes.pop_back();
    const double widest = value_of(engine + ".lanes") * std::stod(modes.back());
    std::vector<std::string> overrides = {key + "=" + join_list(modes, '[', ']')};
    const std::string prefix = engine + ".elements_per_cycle_by_dtype.";
    for (const ConfigLeaf& leaf : flat) {
      if (leaf.path.rfind(prefix, 0) == 0 && std::stod(leaf.value) > widest) {
        overrides.push_back(leaf.path + "=" + number_text(widest));
      }
    }
    out.push_back(overrides);
  }
  return out;
}

// ---- the walk ----

struct BaseConfig {
  std::string name;
  HardwareConfig hardware;
  std::vector<ConfigLeaf> flat;
  std::vector<Probe> probes;
  std::vector<std::optional<std::string>> baseline;  // outcome of each probe
};

const std::vector<BaseConfig>& bases() {
  static const std::vector<BaseConfig> configs = [] {
    std::vector<BaseConfig> out;
    for (const char* name : {"trn2", "trn1", "trn3"}) {
      BaseConfig base{name, load_config(name).hardware, {}, {}, {}};
      base.flat = flatten_config(base.hardware);
      base.probes = make_probes(base.hardware);
      for (const Probe& probe : base.probes) base.baseline.push_back(outcome(probe, base.hardware));
      out.push_back(std::move(base));
    }
    return out;
  }();
  return configs;
}

struct Finding {
  bool live = false;
  std::string evidence;     // the config, override and probe that moved (when live)
  int valid = 0, refused = 0;  // perturbations tried / refused by validation
  std::string last_refusal;
};

// Tries each perturbation on each base config until one moves a probe.
Finding probe_key(const ConfigKeyDoc& key, const std::vector<std::string>& base_names) {
  Finding finding;
  for (const BaseConfig& base : bases()) {
    if (std::find(base_names.begin(), base_names.end(), base.name) == base_names.end()) continue;
    std::vector<std::vector<std::string>> all;
    for (const Leaf& leaf : concrete_leaves(key, base.flat)) {
      for (auto& p : perturbations(key, leaf)) all.push_back(std::move(p));
    }
    auto try_all = [&](const std::vector<std::vector<std::string>>& candidates) {
      for (const std::vector<std::string>& overrides : candidates) {
        HardwareConfig hw;
        try {
          hw = load_config(base.name, overrides).hardware;
        } catch (const ConfigError& e) {
          ++finding.refused;
          finding.last_refusal = e.what();
          continue;
        }
        ++finding.valid;
        for (size_t i = 0; i < base.probes.size(); ++i) {
          std::optional<std::string> now = outcome(base.probes[i], hw);
          if (now != base.baseline[i]) {
            std::string sets;
            for (const std::string& o : overrides) sets += " --set " + o;
            finding.live = true;
            finding.evidence = base.name + sets + " moves probe " + base.probes[i].name + ": " +
                               base.baseline[i].value_or("(none)") + "  ->  " + now.value_or("(none)");
            return true;
          }
        }
      }
      return false;
    };
    if (try_all(all)) return finding;
    if (try_all(coupled_perturbations(key.path, base.flat))) return finding;
  }
  return finding;
}

TEST(ConfigKeysLive, TheProbesRunOnEveryShippedConfig) {
  // The probes must be legal where their instructions exist, or a key could look live only through a broken probe.
  for (const BaseConfig& base : bases()) {
    for (size_t i = 0; i < base.probes.size(); ++i) {
      const Probe& probe = base.probes[i];
      if (!base.baseline[i]) {  // instructions or engines of later generations
        EXPECT_TRUE(probe.name == "mx" || (base.name == "trn1" && (probe.name == "dma_transpose" ||
                                                                   probe.name == "scalar_copy")))
            << base.name << ": probe " << probe.name << " does not parse";
        continue;
      }
      const std::string& result = *base.baseline[i];
      // trn1 has no double_row mode, and its PE tiles are 64 rows / columns (the pe_tiling probe has 32).
      const bool illegal = std::string(probe.illegal_on) == "*" ||
                           (base.name == "trn1" && (probe.name == "double_row" || probe.name == "pe_tiling"));
      EXPECT_EQ(result.rfind("illegal:", 0) == 0, illegal) << base.name << " " << probe.name << ": " << result;
      EXPECT_NE(result.rfind("error", 0), 0u) << base.name << " " << probe.name << ": " << result;
    }
  }
}

TEST(ConfigKeysLive, EveryKeyMovesASimulatedQuantityOrIsInformational) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<ConfigKeyDoc> keys = describe_config_keys();
  ASSERT_GT(keys.size(), 50u);
  std::string dead, informational_list, pending_live;
  int live = 0;
  std::set<std::string> schema;
  for (const ConfigKeyDoc& key : keys) {
    schema.insert(key.path);
    if (informational(key)) {
      informational_list += "\n  " + key.path;
      continue;
    }
    Finding f = probe_key(key, {"trn2", "trn1", "trn3"});
    if (kPending.count(key.path)) {
      if (f.live) pending_live += "\n  " + key.path + ": " + f.evidence;
      continue;
    }
    if (f.live) {
      ++live;
      // TRNSIM_CONFIG_KEYS_EVIDENCE=1 prints what moved for every key.
      if (std::getenv("TRNSIM_CONFIG_KEYS_EVIDENCE")) std::cout << key.path << ": " << f.evidence << "\n";
      continue;
    }
    dead += "\n  " + key.path + " (" + key.doc + "): " + std::to_string(f.valid) +
            " valid perturbation(s) moved no probe" +
            (f.valid == 0 ? "; every one was refused, last: " + f.last_refusal : "");
  }
  for (const auto& [path, reason] : kPending) {
    EXPECT_TRUE(schema.count(path)) << "kPending names " << path << ", which is no config key";
  }
  for (const auto& [path, companions] : kScaledTogether) {
    EXPECT_TRUE(schema.count(path)) << "kScaledTogether names " << path << ", which is no config key";
  }
  for (const auto& [path, how] : kCoupledOtherwise) {
    EXPECT_TRUE(schema.count(path)) << "kCoupledOtherwise names " << path << ", which is no config key";
  }
  EXPECT_TRUE(dead.empty()) << "dead config keys (read by nothing simulated; make them drive the model, or start the "
                               "doc with \"" << kInformationalPrefix << "\" and say why):" << dead;
  EXPECT_TRUE(pending_live.empty()) << "pending keys that are live now: remove them from kPending" << pending_live;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << live << " live keys, " << kPending.size() << " pending, informational:" << informational_list << "\n("
            << seconds << " s)\n";
}

// An informational key must indeed move nothing: its cheap perturbations (trn2) leave every probe as it was.
TEST(ConfigKeysLive, InformationalKeysMoveNothing) {
  for (const ConfigKeyDoc& key : describe_config_keys()) {
    if (!informational(key)) continue;
    Finding f = probe_key(key, {"trn2"});
    EXPECT_FALSE(f.live) << key.path << " is marked informational but " << f.evidence;
  }
}

// Spot checks that the walk finds what a reader expects: the keys this issue named, through the probe that shows them.
TEST(ConfigKeysLive, TheKeysIssue13NamedDriveTheModel) {
  for (const char* path : {"core.tensor.load_stationary_speedup", "core.tensor.double_row_rate_factor",
                           "core.vector.elements_per_cycle_by_dtype", "core.scalar.elements_per_cycle_by_dtype",
                           "core.gpsimd.elements_per_cycle_by_dtype"}) {
    ConfigKeyDoc key;
    for (const ConfigKeyDoc& k : describe_config_keys()) {
      if (k.path == path) key = k;
    }
    ASSERT_EQ(key.path, path);
    Finding f = probe_key(key, {"trn2"});
    EXPECT_TRUE(f.live) << path;
    std::cout << f.evidence << "\n";
  }
}

}  // namespace
}  // namespace trnsim::sim
