// `trnsim bench collective`: a collective across the chips of a system (sim/system), timed for each size and
// algorithm; prints latency, algbw and busbw as nccl-tests / nccom-test report them (GB/s = 1e9 bytes/s).
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "config/config_loader.h"
#include "sim/system/collectives.h"
#include "tools/cli/commands.h"
#include "tools/cli/option_checks.h"
#include "tools/cli/output_files.h"

namespace trnsim::cli {
namespace {

struct CollectiveOptions {
  std::string system, config, op = "all_reduce", sizes = "1K:1G", group, algorithms = "auto", csv, plot;
  std::string root;  // broadcast / reduce: the root rank (empty: not given, the group's first)
  std::vector<std::string> overrides;
  uint32_t ranks_per_chip = 1;
  bool force = false;
};

// Shorthands for the shipped systems: the config they are in and their name there.
const std::map<std::string, std::pair<std::string, std::string>> kSystems = {
    {"trn2-16", {"trn2", "trn2-48xlarge"}},
    {"trn2-32", {"trn2", "trn2-48xlarge-x2"}},
    {"trn2-64", {"trn2", "trn2-ultraserver"}},
    {"trn3-64", {"trn3", "trn3-ultraserver-gen1"}},
    {"trn3-144", {"trn3", "trn3-ultraserver-gen2"}},
};

// The number `text` starts with; `rest` gets what follows it (nullptr: nothing may). False if none.
template <typename Number>
bool parse_number(const std::string& text, Number& value, std::string* rest = nullptr) {
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || (!rest && stop != end)) return false;
  if (rest) *rest = std::string(stop, end);
  return true;
}

// A simulator limit (assumed, not hardware): every point is a fresh simulation, so a list longer
// than a plot's worth is a typo (a factor of 1.0000001), refused before it is built.
constexpr size_t kMaxSizePoints = 1024;

// Items of a comma list, empty ones kept ("ring," is "ring" and "", which the item's parser refuses).
std::vector<std::string> split_list(const std::string& text, char separator = ',') {
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(separator, start);
    items.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return items;
    start = end + 1;
  }
}

uint64_t parse_bytes(const std::string& text) {
  double value = 0;
  std::string unit;
  const std::map<std::string, double> units = {{"", 1}, {"B", 1}, {"K", 1024}, {"KB", 1024}, {"KiB", 1024},
                                               {"M", 1 << 20}, {"MB", 1 << 20}, {"MiB", 1 << 20},
                                               {"G", 1 << 30}, {"GB", 1 << 30}, {"GiB", 1 << 30}};
  // from_chars reads "nan" and "inf" as numbers: converting those (or 2^64 and more) to uint64_t is undefined.
  if (!parse_number(text, value, &unit) || !units.count(unit) || !std::isfinite(value) || value <= 0) {
    throw std::invalid_argument("--sizes: '" + text + "' is not a size (a finite number of bytes, e.g. 4096, 64K, 1M, 1G)");
  }
  const double bytes = value * units.at(unit);
  if (bytes >= 0x1p64) throw std::invalid_argument("--sizes: '" + text + "' is 2^64 bytes or more");
  if (bytes < 1) throw std::invalid_argument("--sizes: '" + text + "' is less than one byte");
  return uint64_t(bytes);
}

// "1K:1G" (powers of two), "1K:1G:4" (times 4), "4K,1M,64M".
std::vector<uint64_t> parse_sizes(const std::string& text) {
  std::vector<uint64_t> sizes;
  if (text.find(':') != std::string::npos) {
    const std::vector<std::string> parts = split_list(text, ':');
    if (parts.size() < 2 || parts.size() > 3) throw std::invalid_argument("--sizes: FROM:TO or FROM:TO:FACTOR");
    const uint64_t from = parse_bytes(parts[0]), to = parse_bytes(parts[1]);
    double factor = 2.0;
    if (parts.size() == 3 && !parse_number(parts[2], factor)) {
      throw std::invalid_argument("--sizes: factor '" + parts[2] + "' is not a number");
    }
    if (!std::isfinite(factor)) throw std::invalid_argument("--sizes: factor '" + parts[2] + "' is not a finite number");
    if (factor <= 1) throw std::invalid_argument("--sizes: the factor must be above 1");
    // The count from the range and factor, before any point is made.
    const double points = to < from ? 0 : std::floor(std::log(double(to) / double(from)) / std::log(factor) + 1e-9) + 1;
    if (points > double(kMaxSizePoints)) {
      std::ostringstream message;
      message << "--sizes: '" << text << "' makes " << std::fixed << std::setprecision(0) << points
              << " sizes, more than the " << kMaxSizePoints << " one command runs (a larger factor or a narrower range)";
      throw std::invalid_argument(message.str());
    }
    for (double s = double(from); s <= double(to) * (1 + 1e-12); s *= factor) {
      const uint64_t size = uint64_t(s);
      if (!sizes.empty() && size == sizes.back()) {
        throw std::invalid_argument("--sizes: factor " + parts[2] + " does not step from " + std::to_string(size) +
                                    " bytes to a larger whole number of bytes (a larger factor or FROM)");
      }
      sizes.push_back(size);
    }
  } else {
    const std::vector<std::string> items = split_list(text);
    if (items.size() > kMaxSizePoints) {
      throw std::invalid_argument("--sizes: " + std::to_string(items.size()) + " sizes, more than the " +
                                  std::to_string(kMaxSizePoints) + " one command runs");
    }
    for (const std::string& item : items) sizes.push_back(parse_bytes(item));
  }
  if (sizes.empty()) throw std::invalid_argument("--sizes: no size");
  return sizes;
}

// "0-15", "0,2,4,6", "0-3,8-11": each rank checked against the system's `system_ranks` before the
// list is built (a range of 10^9 ranks is an error, not an allocation of that many).
std::vector<uint32_t> parse_group(const std::string& text, uint32_t system_ranks) {
  auto rank = [&](const std::string& item) {
    uint32_t value = 0;
    if (!parse_number(item, value)) {
      throw std::invalid_argument("--group: '" + item + "' in '" + text + "' is not a rank (e.g. 0-15 or 0,4,8)");
    }
    if (value >= system_ranks) {
      throw std::invalid_argument("--group: rank " + std::to_string(value) + " is not in the system (" +
                                  std::to_string(system_ranks) + " ranks)");
    }
    return value;
  };
  std::vector<uint32_t> ranks;
  std::vector<bool> listed(system_ranks, false);  // so the list never holds more than the system's ranks
  for (const std::string& part : split_list(text)) {
    const size_t dash = part.find('-');
    const uint32_t first = rank(part.substr(0, dash));
    const uint32_t last = dash == std::string::npos ? first : rank(part.substr(dash + 1));
    if (last < first) throw std::invalid_argument("--group: '" + part + "' runs backwards");
    for (uint32_t r = first; r <= last; ++r) {
      if (listed[r]) throw std::invalid_argument("--group: rank " + std::to_string(r) + " is in the group twice");
      listed[r] = true;
      ranks.push_back(r);
    }
  }
  return ranks;
}

// --root: a rank number, -1 when the option is left out (the group's first). A negative number is an error, not
// the default (refuse_empty_values refuses an empty one).
int64_t parse_root(const std::string& text) {
  uint32_t value = 0;
  if (text.empty()) return -1;
  if (!parse_number(text, value)) {
    throw std::invalid_argument("--root: " + text + " is not a rank (a number from 0)");
  }
  return int64_t(value);
}

std::string size_text(uint64_t bytes) {
  const char* units[] = {"B", "K", "M", "G"};
  size_t u = 0;
  double v = double(bytes);
  while (v >= 1024 && u + 1 < std::size(units) && std::fmod(v, 1024) == 0) {
    v /= 1024;
    ++u;
  }
  std::ostringstream out;
  out << v << units[u];
  return out.str();
}

void bench_collective(const CollectiveOptions& o) {
  std::string config_name = o.config, system = o.system;
  auto shorthand = kSystems.find(o.system);
  if (shorthand != kSystems.end()) {
    if (config_name.empty()) config_name = shorthand->second.first;
    system = shorthand->second.second;
  }
  if (config_name.empty()) config_name = "trn2";
  LoadedConfig config = load_config(config_name, o.overrides);
  if (system.empty()) system = config.hardware.default_system;
  const sim::CollectiveOp op = sim::parse_collective_op(o.op);
  std::vector<sim::CollectiveAlgorithm> algorithms;
  for (const std::string& part : split_list(o.algorithms)) {
    try {
      algorithms.push_back(sim::parse_collective_algorithm(part));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--algorithm: ") + e.what());
    }
  }
  const std::vector<uint64_t> sizes = parse_sizes(o.sizes);
  const uint32_t system_ranks = sim::CollectiveSimulator(config.hardware, system, o.ranks_per_chip).ranks();
  const std::vector<uint32_t> group = o.group.empty() ? std::vector<uint32_t>{} : parse_group(o.group, system_ranks);
  const int64_t root = parse_root(o.root);
  std::string csv_path = o.csv;
  if (!o.plot.empty() && csv_path.empty()) csv_path = o.plot + ".csv";  // the plot is drawn from it
  check_destinations({{"--csv", csv_path}, {"--plot", o.plot}}, o.force);

  std::ostringstream csv;
  csv << "config,config_hash,system,op,ranks,bytes,algorithm,time_ns,algbw_gbps,busbw_gbps,steps,transfers\n";
  bool header = false;
  for (sim::CollectiveAlgorithm asked : algorithms) {
    for (uint64_t bytes : sizes) {
      sim::CollectiveSimulator simulator(config.hardware, system, o.ranks_per_chip);  // fresh links per point
      sim::CollectiveRequest request;
      request.op = op;
      request.bytes = bytes;
      request.algorithm = asked;
      request.ranks = group;
      request.root = root;
      const sim::CollectiveTiming t = simulator.run(request);
      if (!header) {
        std::cout << sim::collective_op_name(op) << " on " << config.hardware.name << " " << system << " ("
                  << simulator.topology().chips() << " chips, " << t.ranks << " ranks); GB/s = 1e9 bytes/s\n"
                  << std::setw(10) << "size" << std::setw(14) << "algorithm" << std::setw(14) << "time_us"
                  << std::setw(12) << "algbw" << std::setw(12) << "busbw" << std::setw(8) << "steps" << "\n";
        header = true;
      }
      std::cout << std::fixed << std::setprecision(2) << std::setw(10) << size_text(bytes) << std::setw(14)
                << sim::collective_algorithm_name(t.algorithm) << std::setw(14) << t.latency_ns / 1e3
                << std::setw(12) << t.algbw_gbps << std::setw(12) << t.busbw_gbps << std::setw(8) << t.steps
                << "\n";
      csv << std::setprecision(6) << config.hardware.name << "," << config.hash << "," << system << ","
          << sim::collective_op_name(op) << "," << t.ranks << "," << bytes << ","
          << sim::collective_algorithm_name(t.algorithm) << "," << t.latency_ns << "," << t.algbw_gbps << ","
          << t.busbw_gbps << "," << t.steps << "," << t.transfers << "\n";
    }
  }
  if (!csv_path.empty()) {
    write_text_file("--csv", csv_path, [&](std::ostream& out) { out << csv.str(); });
  }
  if (!o.plot.empty()) {
    // The plot is drawn by tools/bench/plot_collective.py (matplotlib) from the CSV.
    const char* python = std::getenv("TRNSIM_PYTHON");
    std::string interpreter = python ? python : std::string(TRNSIM_SOURCE_DIR) + "/.venv/bin/python";
    if (!python && !std::filesystem::exists(interpreter)) interpreter = "python3";
    const std::string command = "'" + interpreter + "' '" + std::string(TRNSIM_SOURCE_DIR) +
                                "/tools/bench/plot_collective.py' '" + csv_path + "' '" + o.plot + "'";
    if (std::system(command.c_str()) != 0) {
      throw std::runtime_error("--plot: " + command + " failed (matplotlib is in requirements.txt; TRNSIM_PYTHON "
                               "names another interpreter)");
    }
    std::cout << "wrote " << o.plot << "\n";
  }
}

}  // namespace

void add_collective_bench(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<CollectiveOptions>();
  CLI::App* c = bench.add_subcommand(
      "collective", "A collective across a multi-chip system: latency, algbw and busbw per size and algorithm");
  c->add_option("--system", o->system,
                "trn2-16, trn2-32 (two servers over EFA), trn2-64, trn3-64, trn3-144, or a system of --config (default: its default_system)");
  c->add_option("--config", o->config, "Hardware config file or name (default: the --system's, else trn2)");
  c->add_option("--set", o->overrides, "Override a config value (repeatable)");
  c->add_option("--op", o->op,
                "all_reduce, all_gather, reduce_scatter, all_to_all, permute, send_recv, broadcast, reduce");
  c->add_option("--root", o->root, "broadcast / reduce: the root rank (default: the group's first)");
  c->add_option("--sizes", o->sizes, "FROM:TO[:FACTOR] or a comma list (bytes; K, M, G = KiB, MiB, GiB)");
  c->add_option("--group", o->group, "Ranks taking part, e.g. 0-15 or 0,4,8,12 (default: all)");
  c->add_option("--ranks-per-chip", o->ranks_per_chip, "Ranks (logical cores) per chip")->check(CLI::Range(1, 64));
  c->add_option("--algorithm", o->algorithms, "auto, mesh, recursive, ring, kangaring, hierarchical, or a comma list");
  c->add_option("--csv", o->csv, "Write the points as CSV");
  c->add_option("--plot", o->plot, "Draw busbw against size per algorithm as a PNG");
  c->add_flag("--force", o->force, "Overwrite existing --csv / --plot files");
  c->callback([o, c, &exit_code] {
    try {
      refuse_empty_values(*c);
      bench_collective(*o);
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace trnsim::cli
