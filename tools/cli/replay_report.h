// What `trnsim replay` prints and writes: the per-op table (recorded against replayed time), the
// launches whose time changed (--diff), the --json document (a fixed schema other tools parse)
// and the --stats document.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "record/recording_reader.h"
#include "record/replay.h"

namespace trnsim::cli {

// The config a replay ran on, as the user named it.
struct ReplayConfigInfo {
  std::string name;
  std::string source;
  std::vector<std::string> overrides;
  std::string hash;
  bool rebuild = false;  // kernels rebuilt for this config (replay --rebuild)
};

struct OpTotals {
  std::string kind;
  uint64_t count = 0;
  double recorded_ns = 0;
  double ns = 0;
};

// Per op name, in order of first appearance in the recording.
std::vector<std::pair<std::string, OpTotals>> per_op_totals(const record::Recording& recording,
                                                           const record::ReplayResult& result);

// Launches whose replayed time differs from the recorded one (exact comparison).
std::vector<size_t> changed_launches(const record::Recording& recording, const record::ReplayResult& result);

// The table, sorted by recorded time (at most `top` rows, then one line for the rest), and the totals.
std::string per_op_table(const record::Recording& recording, const record::ReplayResult& result, size_t top);
// One row per changed launch: index, op, shapes, old ns, new ns, ratio.
std::string diff_table(const record::Recording& recording, const record::ReplayResult& result,
                       const std::vector<size_t>& changed);

std::string replay_json(const record::Recording& recording, const record::ReplayResult& result,
                        const ReplayConfigInfo& config, double host_s);
std::string replay_stats_json(const record::Recording& recording, const record::ReplayResult& result,
                              const ReplayConfigInfo& config, double host_s);

// The shortest text that reads back as the same double (so a diff shows every changed bit).
std::string exact(double value);

}  // namespace trnsim::cli
