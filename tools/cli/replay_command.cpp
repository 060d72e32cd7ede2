// `trnsim replay REC [--config C] [--set k=v]... [--rebuild] [--diff] [--stats F] [--trace F] [--json F]`:
// re-times a recording made by trnsim.record() without PyTorch (record/replay.h); with --rebuild the
// kernels are built again for the target config from their recorded invocations.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>

#include "config/config_loader.h"
#include "record/recording_reader.h"
#include "record/replay.h"
#include "tools/cli/commands.h"
#include "tools/cli/output_files.h"
#include "tools/cli/replay_report.h"

namespace trnsim::cli {
namespace {

struct ReplayCommandOptions {
  std::string recording;
  std::string config;  // empty: the recording's own
  std::vector<std::string> overrides;
  bool rebuild = false;      // build the kernels again for the target from their invocations
  bool diff = false;
  bool force = false;
  std::string stats_path, trace_path, json_path;
  size_t top = 20;
};

// A name from a recording's header, shortened for a message (the header is the recording's, not the user's).
std::string shown(const std::string& name) {
  constexpr size_t kShown = 120;
  return name.size() <= kShown ? name : name.substr(0, kShown) + "... (" + std::to_string(name.size()) + " bytes)";
}

// Whether `file` lies inside one of the config search folders (symlinks and ".." resolved).
bool in_config_search_path(const std::string& file, const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(file, ec);
  if (ec) return false;
  for (const std::string& dir : dirs) {
    const fs::path root = fs::weakly_canonical(dir, ec);
    if (ec) continue;
    const fs::path relative = canonical.lexically_relative(root);
    if (!relative.empty() && *relative.begin() != ".." && relative.is_relative()) return true;
  }
  return false;
}

// The recording's own config, found as it was named when recording (a shipped name resolves in
// the search path), else by the file it resolved to then. A recording is data from elsewhere: the
// file it names is read only when it lies in the config search path ($TRNSIM_CONFIG_PATH, configs/),
// never an arbitrary path such as /etc/passwd (whose bytes a parse error would echo).
std::string recorded_config_file(const record::RecordedConfig& recorded) {
  const std::vector<std::string> dirs = default_config_dirs();
  std::string outside;
  for (const std::string& candidate : {recorded.name_or_path, recorded.source}) {
    if (candidate.empty()) continue;
    std::string file;
    try {
      file = resolve_config_path(candidate, dirs);
    } catch (const ConfigError&) {
      continue;
    }
    if (in_config_search_path(file, dirs)) return file;
    outside = file;
  }
  std::string where;
  for (const std::string& dir : dirs) where += (where.empty() ? "" : ", ") + dir;
  if (!outside.empty()) {
    throw ConfigError("the recording's config '" + shown(recorded.name_or_path) + "' (" + shown(outside) +
                      ") is outside the config search path (" + where +
                      "): not reading it; pass --config to replay on it, or add its folder to TRNSIM_CONFIG_PATH");
  }
  throw ConfigError("the recording's config '" + shown(recorded.name_or_path) + "' (recorded from " +
                    shown(recorded.source) + ") is not found here: pass --config");
}

int replay_command(const ReplayCommandOptions& o) {
  const auto host_start = std::chrono::steady_clock::now();
  check_destinations({{"--stats", o.stats_path}, {"--trace", o.trace_path}, {"--json", o.json_path}}, o.force);
  record::Recording recording = record::read_recording(o.recording);
  const record::RecordedConfig& recorded = recording.header.config;
  if (!recording.complete()) {
    std::cerr << "warning: " << o.recording << " is incomplete: " << recording.incomplete_reason() << "; replaying its "
              << recording.launches.size() << " launches\n";
  }

  ReplayConfigInfo info;
  LoadedConfig config;
  const bool own = o.config.empty();
  if (own) {
    const std::string file = recorded_config_file(recorded);
    std::vector<std::string> overrides = recorded.overrides;
    LoadedConfig as_recorded = load_config(file, overrides);
    if (as_recorded.hash != recorded.hash) {
      std::cerr << "warning: the recording's config " << recorded.name_or_path << " (" << file << ") hashes to "
                << as_recorded.hash << " today but the launches ran on " << recorded.hash
                << ": the config changed since recording, so times may differ\n";
    }
    overrides.insert(overrides.end(), o.overrides.begin(), o.overrides.end());
    config = o.overrides.empty() ? std::move(as_recorded) : load_config(file, overrides);
    info = {config.hardware.name, config.source_file, overrides, config.hash, o.rebuild};
  } else {
    config = load_config(o.config, o.overrides);
    info = {config.hardware.name, config.source_file, o.overrides, config.hash, o.rebuild};
  }

  record::ReplayOptions options;
  options.trace = !o.trace_path.empty();
  options.rebuild = o.rebuild;
  record::ReplayResult result = record::replay(recording, config.hardware, config.hash, options);
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  const std::vector<size_t> changed = changed_launches(recording, result);

  size_t kernels = 0, copies = 0, fallbacks = 0, estimates = 0;
  for (const record::Launch& l : result.launches)
    (l.kind == "kernel" ? kernels : l.kind == "copy" ? copies : l.kind == "estimate" ? estimates : fallbacks)++;
  std::cout << "replayed " << o.recording << ": " << result.launches.size() << " launches (" << kernels << " kernels, "
            << copies << " copies, " << fallbacks << " fallbacks"
            << (estimates ? ", " + std::to_string(estimates) + " timing-only estimates" : std::string()) << ") recorded on " << recorded.name << " (" << recorded.hash
            << "), replayed on " << config.hardware.name << " (" << config.hash << ")";
  for (const std::string& s : info.overrides) std::cout << " --set " << s;
  std::cout << "\n  timing only (tensor values are not recorded); "
            << (o.rebuild ? "kernels rebuilt for this config from their recorded invocations (where launches carry one)"
                          : "the recorded programs (not rebuilt)")
            << "; " << result.simulations << " distinct kernel simulations, " << result.reused
            << " launches reused an identical program set's time; host " << exact(host_s) << " s (recording took "
            << (recording.footer ? exact(recording.footer->host_s) : "?") << " s)\n";
  for (const std::string& note : result.notes) std::cout << "  note: " << note << "\n";
  std::cout << "\n" << per_op_table(recording, result, o.top);
  if (changed.empty()) {
    std::cout << "\nevery launch's time equals its recorded time (bit for bit)\n";
  } else {
    std::cout << "\n" << changed.size() << " of " << result.launches.size() << " launches changed time"
              << (o.diff ? ":\n" + diff_table(recording, result, changed) : " (--diff lists them)\n");
  }

  if (!o.stats_path.empty()) {
    write_text_file("--stats", o.stats_path,
                    [&](std::ostream& out) { out << replay_stats_json(recording, result, info, host_s); });
  }
  if (!o.trace_path.empty()) {
    write_text_file("--trace", o.trace_path, [&](std::ostream& out) { result.timeline->write(out); });
  }
  if (!o.json_path.empty()) {
    write_text_file("--json", o.json_path, [&](std::ostream& out) { out << replay_json(recording, result, info, host_s); });
  }
  return o.diff && !changed.empty() ? 1 : 0;
}

}  // namespace

void add_replay_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReplayCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Re-time a recording of trnsim.record() without PyTorch, on its own config (bit for bit) or another one "
      "(what-if). Timing only: tensor values are not recorded (the timing model never reads them). Launches with "
      "identical programs are simulated once per replay (the model is deterministic, so this is exact). By default "
      "programs are replayed as recorded, not rebuilt or re-tuned for another config; --rebuild builds each kernel "
      "again for the target from its recorded invocation (kernel name and spec), so SBUF size, LNC and tile choices "
      "move the time too.");
  cmd->add_option("recording", o->recording, "Recording directory (e.g. step.trnrec)")->required();
  cmd->add_option("--config", o->config, "Hardware config file or name (default: the recording's own, with its overrides)");
  cmd->add_option("--set", o->overrides,
                  "Override a config value, e.g. core.sbuf.bytes_per_partition=458752 (repeatable; on top of the "
                  "recording's own config when --config is not given)");
  cmd->add_flag("--timing-only", "Timing only (always so: values are not recorded); the explicit form");
  cmd->add_flag("--rebuild", o->rebuild,
                "Build every kernel launch that carries its kernel invocation again for the target config (its LNC, "
                "SBUF, ...) and simulate the new programs; launches without one are re-timed as recorded (counted). "
                "A kernel the target cannot build is an error naming the launch");
  cmd->add_flag("--diff", o->diff,
                "List every launch whose time changed (index, op, shapes, old ns, new ns, ratio); exit 1 if any did");
  cmd->add_option("--stats", o->stats_path, "Write replay statistics as JSON to this file");
  cmd->add_option("--trace", o->trace_path, "Write a Perfetto/Chrome trace of the whole replay (open in ui.perfetto.dev)");
  cmd->add_option("--json", o->json_path, "Write per-launch and per-op times, recorded and replayed, as JSON");
  cmd->add_option("--top", o->top, "Rows of the per-op table (default 20)");
  cmd->add_flag("--force", o->force, "Overwrite existing --stats, --trace and --json files");
  cmd->callback([o, &exit_code] { exit_code = replay_command(*o); });
  // ReplayError, ConfigError, OutputFileError and a malformed recording end in main's catch: "error: ..." and exit 1.
}

}  // namespace trnsim::cli
