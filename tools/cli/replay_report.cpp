#include "tools/cli/replay_report.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "record/launch_timeline.h"

namespace trnsim::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string ratio_text(double recorded, double replayed) {
  if (recorded == 0) return replayed == 0 ? "1" : "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.6f", replayed / recorded);
  return text;
}

std::string us(double ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", ns / 1e3);
  return text;
}

// Columns padded to their widest cell; the first `left` columns left-aligned, the rest right.
std::string format_columns(const std::vector<std::vector<std::string>>& rows, size_t left) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::ostringstream out;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line;
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const std::string& cell = rows[r][i];
      const std::string pad(widths[i] - cell.size(), ' ');
      line += (i ? "  " : "") + (i < left ? cell + pad : pad + cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
    if (r == 0) {
      std::string rule;
      for (size_t i = 0; i < widths.size(); ++i) rule += (i ? "  " : "") + std::string(widths[i], '-');
      out << rule << "\n";
    }
  }
  return out.str();
}

Json config_json(const ReplayConfigInfo& config) {
  return {{"name", config.name}, {"source", config.source}, {"overrides", config.overrides}, {"hash", config.hash}};
}

}  // namespace

std::string exact(double value) {
  char text[64];
  auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return ec == std::errc() ? std::string(text, end) : std::to_string(value);
}

std::vector<std::pair<std::string, OpTotals>> per_op_totals(const record::Recording& recording,
                                                           const record::ReplayResult& result) {
  std::vector<std::pair<std::string, OpTotals>> ops;
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < result.launches.size(); ++i) {
    const record::Launch& launch = result.launches[i];
    auto [it, fresh] = position.emplace(launch.op, ops.size());
    if (fresh) ops.push_back({launch.op, OpTotals{launch.kind}});
    OpTotals& totals = ops[it->second].second;
    ++totals.count;
    totals.recorded_ns += recording.launches[i].ns;
    totals.ns += launch.ns;
  }
  return ops;
}

std::vector<size_t> changed_launches(const record::Recording& recording, const record::ReplayResult& result) {
  std::vector<size_t> changed;
  for (size_t i = 0; i < result.launches.size(); ++i) {
    if (result.launches[i].ns != recording.launches[i].ns) changed.push_back(i);
  }
  return changed;
}

std::string per_op_table(const record::Recording& recording, const record::ReplayResult& result, size_t top) {
  auto ops = per_op_totals(recording, result);
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.second.recorded_ns > b.second.recorded_ns; });
  std::vector<std::vector<std::string>> rows = {{"op", "kind", "count", "recorded us", "replayed us", "ratio"}};
  OpTotals rest;
  size_t rest_ops = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpTotals& t = ops[i].second;
    if (i >= top) {
      rest.count += t.count;
      rest.recorded_ns += t.recorded_ns;
      rest.ns += t.ns;
      ++rest_ops;
      continue;
    }
    rows.push_back({ops[i].first, t.kind, std::to_string(t.count), us(t.recorded_ns), us(t.ns),
                    ratio_text(t.recorded_ns, t.ns)});
  }
  if (rest_ops) {
    rows.push_back({"(" + std::to_string(rest_ops) + " more ops)", "", std::to_string(rest.count), us(rest.recorded_ns),
                    us(rest.ns), ratio_text(rest.recorded_ns, rest.ns)});
  }
  rows.push_back({"total", "", std::to_string(result.launches.size()), us(result.recorded_total_ns), us(result.total_ns),
                  ratio_text(result.recorded_total_ns, result.total_ns)});
  return format_columns(rows, 2);
}

std::string diff_table(const record::Recording& recording, const record::ReplayResult& result,
                       const std::vector<size_t>& changed) {
  std::vector<std::vector<std::string>> rows = {{"index", "op", "shapes", "old ns", "new ns", "ratio"}};
  for (size_t i : changed) {
    const record::Launch& launch = result.launches[i];
    rows.push_back({std::to_string(launch.index), launch.op, "[" + record::shapes_text(launch.shapes) + "]",
                    exact(recording.launches[i].ns), exact(launch.ns), ratio_text(recording.launches[i].ns, launch.ns)});
  }
  return format_columns(rows, 3);
}

std::string replay_json(const record::Recording& recording, const record::ReplayResult& result,
                        const ReplayConfigInfo& config, double host_s) {
  Json j;
  j["recording"] = recording.path;
  j["config"] = config_json(config);
  j["recorded_config_hash"] = recording.header.config.hash;
  j["rebuild"] = config.rebuild;
  if (config.rebuild) {
    j["rebuilt_launches"] = result.rebuilt;
    j["rebuilt_as_recorded"] = result.rebuilt_as_recorded;
    j["not_rebuilt_launches"] = result.not_rebuilt;
  }
  Json launches = Json::array();
  for (size_t i = 0; i < result.launches.size(); ++i) {
    const record::Launch& launch = result.launches[i];
    launches.push_back({{"index", launch.index},
                        {"op", launch.op},
                        {"kind", launch.kind},
                        {"device", launch.device},
                        {"shapes", launch.shapes},
                        {"dtype", launch.dtype},
                        {"recorded_ns", recording.launches[i].ns},
                        {"ns", launch.ns}});
  }
  j["launches"] = launches;
  Json per_op = Json::object();
  for (const auto& [op, t] : per_op_totals(recording, result)) {
    per_op[op] = {{"count", t.count}, {"recorded_ns", t.recorded_ns}, {"ns", t.ns}};
  }
  j["per_op"] = per_op;
  j["total_ns"] = result.total_ns;
  j["recorded_total_ns"] = result.recorded_total_ns;
  j["host_s"] = host_s;
  j["recorded_host_s"] = recording.footer ? recording.footer->host_s : 0.0;
  j["complete"] = recording.complete();
  return j.dump(2) + "\n";
}

std::string replay_stats_json(const record::Recording& recording, const record::ReplayResult& result,
                              const ReplayConfigInfo& config, double host_s) {
  std::map<std::string, uint64_t> count_by_kind;
  std::map<std::string, double> ns_by_kind, busy_by_engine;
  std::map<int, double> ns_by_device;
  uint64_t flops = 0;
  for (const record::Launch& launch : result.launches) {
    ++count_by_kind[launch.kind];
    ns_by_kind[launch.kind] += launch.ns;
    ns_by_device[launch.device] += launch.ns;
    flops += launch.flops;
    for (const auto& [engine, ns] : launch.busy_ns) {
      const size_t dot = engine.find('.');
      busy_by_engine[dot == std::string::npos ? engine : engine.substr(dot + 1)] += ns;
    }
  }
  Json j;
  j["recording"] = recording.path;
  j["complete"] = recording.complete();
  j["config"] = config_json(config);
  j["recorded_config_hash"] = recording.header.config.hash;
  j["total_ns"] = result.total_ns;
  j["recorded_total_ns"] = result.recorded_total_ns;
  Json devices = Json::object();
  for (const auto& [device, ns] : ns_by_device) devices[std::to_string(device)] = ns;
  j["ns_by_device"] = devices;
  Json kinds = Json::object();
  for (const char* kind : {"kernel", "copy", "fallback"}) {
    kinds[kind] = {{"launches", count_by_kind[kind]}, {"ns", ns_by_kind[kind]}};
  }
  j["by_kind"] = kinds;
  j["busy_ns_by_engine"] = busy_by_engine;  // summed over launches and cores
  j["flops"] = flops;
  j["launches"] = result.launches.size();
  j["changed_launches"] = changed_launches(recording, result).size();
  j["distinct_programs"] = recording.programs.size();
  j["simulations"] = result.simulations;
  j["reused_simulations"] = result.reused;
  j["rebuild"] = config.rebuild;
  if (config.rebuild) {
    j["rebuilt_launches"] = result.rebuilt;
    j["rebuilt_as_recorded"] = result.rebuilt_as_recorded;
    j["not_rebuilt_launches"] = result.not_rebuilt;
    j["distinct_builds"] = result.builds;
  }
  j["host_s"] = host_s;
  j["recorded_host_s"] = recording.footer ? recording.footer->host_s : 0.0;
  j["notes"] = result.notes;
  return j.dump(2) + "\n";
}

}  // namespace trnsim::cli
