#include "record/replay.h"

#include <map>
#include <set>

#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "kernels/kernel_common.h"
#include "kernels/kernel_invocation.h"
#include "record/launch_timeline.h"
#include "record/launch_timing.h"
#include "record/program_store.h"

namespace trnsim::record {
namespace {

constexpr size_t kShownIssues = 6;     // legality issues quoted per illegal program (the rest counted)
constexpr size_t kShownFailures = 12;  // launches quoted when kernels cannot be rebuilt (the rest counted)

// A recorded program as the target runs it, and why it cannot (empty when it can).
struct TargetProgram {
  std::shared_ptr<const isa::Program> program;
  std::string illegal;
};

// A kernel built again for the target from its invocation: the per-core programs and their hashes,
// or why it cannot be built.
struct Rebuilt {
  std::vector<std::shared_ptr<const isa::Program>> parts;
  std::vector<std::string> hashes;
  std::string error;
};

// A simulated program set's result, for the launches that share it.
struct Simulated {
  sim::SimStats stats;
  std::shared_ptr<const sim::TraceWriter> trace;
};

class Replayer {
 public:
  Replayer(const Recording& recording, const HardwareConfig& config, const std::string& hash, const ReplayOptions& options)
      : m_recording(recording), m_config(config), m_hash(hash), m_options(options) {}

  ReplayResult run() {
    ReplayResult result;
    if (m_options.trace) result.timeline = std::make_unique<sim::TraceWriter>();
    std::map<int, double> clock;  // each device's replayed clock
    for (const Launch& recorded : m_recording.launches) {
      Launch launch = recorded;
      std::shared_ptr<const sim::TraceWriter> trace;
      if (launch.kind == "kernel") {
        trace = replay_kernel(launch, result);
      } else if (launch.kind == "estimate") {
        if (launch.transfer_bytes.size() != 2) throw ReplayError("launch " + std::to_string(launch.index) +
                                                                 ": an estimate needs [bytes read, bytes written]");
        launch.launch_ns = m_config.chip.kernel_launch_ns;
        launch.ns = estimate_ns(m_config, kernels::logical_core_size(m_config), launch.transfer_bytes[0],
                                launch.transfer_bytes[1]);
      } else {
        launch.ns = transfers_ns(m_config, launch.transfer_bytes);
      }
      launch.start_ns = clock[launch.device];
      clock[launch.device] += launch.ns;
      if (result.timeline) add_launch_to_timeline(*result.timeline, launch, launch.start_ns, trace.get());
      result.total_ns += launch.ns;
      result.recorded_total_ns += recorded.ns;
      result.launches.push_back(std::move(launch));
    }
    if (!m_failures.empty()) throw ReplayError(failures_message());
    result.simulations = m_simulated.size();
    result.builds = m_rebuilt.size();
    result.notes = m_notes;
    if (m_options.rebuild) {
      result.notes.push_back(rebuild_note(result));
    } else if (!own_config()) {
      result.notes.push_back("the programs are replayed as recorded, not rebuilt for this config: figures that "
                             "only shape how kernels are built (e.g. SBUF size, LNC) do not move their time");
    }
    if (m_retargeted) {
      result.notes.push_back("programs built for " + m_retargeted_from + " run under " +
                             std::string(enum_name(m_config.generation)) + "'s rules (" + m_config.name +
                             "): the kernels are not rebuilt or re-tuned for the target");
    }
    return result;
  }

 private:
  std::shared_ptr<const sim::TraceWriter> replay_kernel(Launch& launch, ReplayResult& result) {
    if (m_options.rebuild) {
      if (!launch.invocation) {
        ++result.not_rebuilt;
      } else {
        const Rebuilt& rebuilt = rebuild(*launch.invocation);
        if (!rebuilt.error.empty()) {
          // Every launch that cannot be rebuilt is named at the end; this one is not timed.
          m_failures.push_back(describe_launch(launch) + ": kernel '" + launch.invocation->kernel + "' " +
                               rebuilt.error);
          return nullptr;
        }
        ++result.rebuilt;
        if (rebuilt.hashes == launch.program_hashes) ++result.rebuilt_as_recorded;
        launch.programs = rebuilt.parts;
        launch.program_hashes = rebuilt.hashes;
      }
    }
    if (launch.programs.size() > m_config.chip.physical_cores) {
      throw ReplayError(describe_launch(launch) + ": its kernel has " + std::to_string(launch.programs.size()) +
                        " per-core programs but config '" + m_config.name + "' has " +
                        std::to_string(m_config.chip.physical_cores) + " physical core(s) per chip [physical-cores]");
    }
    std::vector<const isa::Program*> programs;
    std::string key;
    for (size_t core = 0; core < launch.programs.size(); ++core) {
      const std::string& hash = launch.program_hashes.at(core);
      const TargetProgram& target = target_program(hash, launch.programs[core]);
      if (!target.illegal.empty() && own_config()) {
        // The device ran it on this very config (it does not check legality): replay it as it ran,
        // so the recording reproduces, and say so.
        if (m_warned.insert(hash).second) {
          m_notes.push_back(describe_launch(launch) + ": the program of core " + std::to_string(core) +
                            " breaks rules of its own config (the device ran it unchecked):\n" + target.illegal);
        }
      } else if (!target.illegal.empty()) {
        throw ReplayError(describe_launch(launch) + ": the program of core " + std::to_string(core) + " (" +
                          program_file(hash, m_recording.header.compressed_programs) + ") is not legal on config '" +
                          m_config.name + "':\n" + target.illegal);
      }
      programs.push_back(target.program.get());
      key += hash + ",";
    }
    auto it = m_simulated.find(key);
    if (it == m_simulated.end()) {
      try {
        sim::SimResult sim = simulate_kernel(programs, m_config, m_hash, /*timing_only=*/true, m_options.trace, nullptr);
        it = m_simulated.emplace(key, Simulated{sim.stats, std::move(sim.trace)}).first;
      } catch (const std::exception& e) {
        throw ReplayError(describe_launch(launch) + ": the timing model stopped: " + e.what());
      }
    } else {
      ++result.reused;
    }
    set_kernel_result(launch, it->second.stats);
    return it->second.trace;
  }

  bool own_config() const { return m_hash == m_recording.header.config.hash; }

  // The invocation built for the target, split across its LNC; once per distinct invocation.
  const Rebuilt& rebuild(const kernels::KernelInvocation& invocation) {
    const std::string key = invocation.key();
    auto it = m_rebuilt.find(key);
    if (it != m_rebuilt.end()) return it->second;
    Rebuilt rebuilt;
    try {
      rebuilt.parts = kernels::build_parts(invocation, m_config, kernels::logical_core_size(m_config));
      for (const auto& part : rebuilt.parts) rebuilt.hashes.push_back(program_hash(isa::print_tasm(*part)));
    } catch (const kernels::KernelUnsupported& e) {
      rebuilt.error = "cannot be built for config '" + m_config.name + "': " + e.what();
    } catch (const kernels::InvocationError& e) {
      rebuilt.error = "has an invocation this trnsim cannot read: " + std::string(e.what());
    } catch (const std::exception& e) {
      // Not a kernel declining a spec: a builder that fails another way is a bug of the library,
      // reported as such (still per launch, not a crash).
      rebuilt.error = "failed to build for config '" + m_config.name + "' (a kernel-library bug): " + e.what();
    }
    return m_rebuilt.emplace(key, std::move(rebuilt)).first->second;
  }

  std::string failures_message() const {
    std::string message = std::to_string(m_failures.size()) + " kernel launch(es) cannot be rebuilt for config '" +
                          m_config.name + "':\n";
    for (size_t i = 0; i < m_failures.size() && i < kShownFailures; ++i) message += "  " + m_failures[i] + "\n";
    if (m_failures.size() > kShownFailures) {
      message += "  ... and " + std::to_string(m_failures.size() - kShownFailures) + " more\n";
    }
    return message + "(replay without --rebuild re-times the recorded programs instead)";
  }

  std::string rebuild_note(const ReplayResult& result) const {
    std::string note = std::to_string(result.rebuilt) + " kernel launches rebuilt for " + m_config.name + " (" +
                       std::to_string(m_rebuilt.size()) + " distinct invocations built, LNC " +
                       std::to_string(kernels::logical_core_size(m_config)) + "); " +
                       std::to_string(result.rebuilt_as_recorded) + " of them built the recorded programs";
    if (result.not_rebuilt) {
      note += "; " + std::to_string(result.not_rebuilt) +
              " kernel launches carry no kernel invocation (recorded before invocations were) and are re-timed as "
              "recorded";
    }
    return note;
  }

  const TargetProgram& target_program(const std::string& hash, const std::shared_ptr<const isa::Program>& recorded) {
    auto it = m_targets.find(hash);
    if (it != m_targets.end()) return it->second;
    TargetProgram target{recorded, ""};
    if (recorded->generation != m_config.generation) {
      auto copy = std::make_shared<isa::Program>(*recorded);
      copy->generation = m_config.generation;
      m_retargeted = true;
      m_retargeted_from = enum_name(recorded->generation);
      target.program = copy;
    }
    const std::vector<isa::LegalityIssue> issues = isa::find_legality_issues(*target.program, m_config);
    for (size_t i = 0; i < issues.size() && i < kShownIssues; ++i) {
      target.illegal += "  " + isa::format_legality_issue(*target.program, issues[i]) + "\n";
    }
    if (issues.size() > kShownIssues) {
      target.illegal += "  ... and " + std::to_string(issues.size() - kShownIssues) + " more\n";
    }
    return m_targets.emplace(hash, std::move(target)).first->second;
  }

  const Recording& m_recording;
  const HardwareConfig& m_config;
  const std::string& m_hash;
  const ReplayOptions& m_options;
  std::map<std::string, TargetProgram> m_targets;  // by program hash
  std::map<std::string, Simulated> m_simulated;    // by the launch's program hashes
  std::map<std::string, Rebuilt> m_rebuilt;        // by invocation (the target is fixed for the replay)
  std::vector<std::string> m_failures;             // launches that cannot be rebuilt
  std::vector<std::string> m_notes;
  std::set<std::string> m_warned;  // programs whose broken rules were noted
  bool m_retargeted = false;
  std::string m_retargeted_from;
};

}  // namespace

std::string describe_launch(const Launch& launch) {
  return "launch " + std::to_string(launch.index) + " (" + launch.op +
         (launch.shapes.empty() ? "" : " " + shapes_text(launch.shapes)) + ")";
}

ReplayResult replay(const Recording& recording, const HardwareConfig& config, const std::string& config_hash,
                    const ReplayOptions& options) {
  return Replayer(recording, config, config_hash, options).run();
}

}  // namespace trnsim::record
