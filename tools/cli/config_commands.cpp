// `trnsim config ...`: validate, show, diff and summarise hardware configs.
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "config/config_loader.h"
#include "config/config_printer.h"
#include "config/derived_figures.h"
#include "tools/cli/commands.h"

namespace trnsim::cli {
namespace {

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

std::string dtype_map_text(const std::map<DType, double>& values) {
  std::string text = "{";
  for (const auto& [dtype, value] : values) {
    text += (text.size() > 1 ? ", " : "") + std::string(dtype_name(dtype)) + ": " + fixed(value, 2);
  }
  return text + "}";
}

std::string derived_yaml(const DerivedFigures& d) {
  std::ostringstream out;
  out << "derived:\n"
      << "  peak_tflops_per_core: " << dtype_map_text(d.peak_tflops_per_core) << "\n"
      << "  peak_tflops_per_logical_core: " << dtype_map_text(d.peak_tflops_per_logical_core) << "\n"
      << "  peak_tflops_per_chip: " << dtype_map_text(d.peak_tflops_per_chip) << "\n"
      << "  logical_cores_per_chip: " << d.logical_cores_per_chip << "\n"
      << "  sbuf_bytes_per_core: " << d.sbuf_bytes_per_core << "\n"
      << "  sbuf_bytes_per_chip: " << d.sbuf_bytes_per_chip << "\n"
      << "  psum_bytes_per_core: " << d.psum_bytes_per_core << "\n"
      << "  psum_bytes_per_chip: " << d.psum_bytes_per_chip << "\n"
      << "  hbm_bandwidth_per_stack_gbps: " << fixed(d.hbm_bandwidth_per_stack_gbps, 1) << "\n"
      << "  hbm_bandwidth_per_core_gbps: " << fixed(d.hbm_bandwidth_per_core_gbps, 1) << "\n"
      << "  dma_bandwidth_per_core_gbps: " << fixed(d.dma_bandwidth_per_core_gbps, 1) << "\n"
      << "  hbm_bytes_per_bf16_flop: " << fixed(d.hbm_bytes_per_bf16_flop, 5) << "\n"
      << "  default_system_chips: " << d.default_system_chips << "\n"
      << "  default_system_logical_cores: " << d.default_system_logical_cores << "\n";
  return out.str();
}

std::string mib(uint64_t bytes) { return fixed(bytes / 1048576.0, 0) + " MiB"; }

void print_summary(const std::vector<LoadedConfig>& configs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](const std::string& label, auto&& cell) {
    std::vector<std::string> cells;
    for (const LoadedConfig& c : configs) cells.push_back(cell(c, derive_figures(c.hardware)));
    rows.emplace_back(label, std::move(cells));
  };
  auto peak = [](const DerivedFigures& d, DType dtype, bool chip) {
    const auto& table = chip ? d.peak_tflops_per_chip : d.peak_tflops_per_core;
    auto it = table.find(dtype);
    return it == table.end() ? std::string("-") : fixed(it->second, 1);
  };
  row("config", [](const LoadedConfig& c, const DerivedFigures&) { return c.hardware.name; });
  row("generation (NeuronCore)", [](const LoadedConfig& c, const DerivedFigures&) {
    return std::string(enum_name(c.hardware.generation)) + " (NC-v" +
           std::to_string(neuron_core_version(c.hardware.generation)) + ")";
  });
  row("config hash", [](const LoadedConfig& c, const DerivedFigures&) { return c.hash; });
  row("physical cores / LNC", [](const LoadedConfig& c, const DerivedFigures&) {
    return std::to_string(c.hardware.chip.physical_cores) + " / " +
           std::to_string(c.hardware.chip.default_logical_core_size);
  });
  row("tensor clock GHz", [](const LoadedConfig& c, const DerivedFigures&) {
    return fixed(c.hardware.core.tensor.clock_ghz, 2);
  });
  for (DType dtype : {DType::bf16, DType::fp32, DType::fp8_e4m3, DType::mxfp8_e4m3}) {
    std::string name(dtype_name(dtype));
    row(name + " TFLOPS per core", [&](const LoadedConfig&, const DerivedFigures& d) { return peak(d, dtype, false); });
    row(name + " TFLOPS per chip", [&](const LoadedConfig&, const DerivedFigures& d) { return peak(d, dtype, true); });
  }
  row("SBUF per core", [](const LoadedConfig&, const DerivedFigures& d) { return mib(d.sbuf_bytes_per_core); });
  row("PSUM per core", [](const LoadedConfig&, const DerivedFigures& d) { return mib(d.psum_bytes_per_core); });
  row("HBM capacity", [](const LoadedConfig& c, const DerivedFigures&) {
    return fixed(c.hardware.hbm.capacity_bytes / 1073741824.0, 0) + " GiB";
  });
  row("HBM GB/s chip / per core", [](const LoadedConfig& c, const DerivedFigures& d) {
    return fixed(c.hardware.hbm.bandwidth_gbps, 0) + " / " + fixed(d.hbm_bandwidth_per_core_gbps, 0);
  });
  row("DMA GB/s per core", [](const LoadedConfig&, const DerivedFigures& d) {
    return fixed(d.dma_bandwidth_per_core_gbps, 1);
  });
  row("HBM bytes per bf16 FLOP", [](const LoadedConfig&, const DerivedFigures& d) {
    return fixed(d.hbm_bytes_per_bf16_flop, 5);
  });
  row("largest system (chips)", [](const LoadedConfig& c, const DerivedFigures&) {
    std::pair<uint32_t, std::string> largest{0, ""};
    for (const auto& [name, system] : c.hardware.systems) largest = std::max(largest, {system.chips, name});
    return largest.second + " (" + std::to_string(largest.first) + ")";
  });
  size_t label_width = 0;
  std::vector<size_t> widths(configs.size(), 0);
  for (const auto& [label, cells] : rows) {
    label_width = std::max(label_width, label.size());
    for (size_t i = 0; i < cells.size(); ++i) widths[i] = std::max(widths[i], cells[i].size());
  }
  for (const auto& [label, cells] : rows) {
    std::cout << std::left << std::setw(static_cast<int>(label_width) + 2) << label;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::cout << std::right << std::setw(static_cast<int>(widths[i]) + 2) << cells[i];
    }
    std::cout << "\n";
  }
}

struct ConfigOptions {
  std::vector<std::string> files;
  std::vector<std::string> overrides;
  std::vector<std::string> overrides_b;
  bool effective_only = false;
  bool exit_code_on_difference = false;
};

}  // namespace

void add_config_commands(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ConfigOptions>();
  CLI::App* config = app.add_subcommand("config", "Validate, show and compare hardware configs");
  config->require_subcommand(1);
  const char* set_help = "Override a value, e.g. --set core.sbuf.bytes_per_partition=458752 (repeatable)";

  CLI::App* validate = config->add_subcommand("validate", "Check config files; print each one's hash");
  validate->add_option("files", options->files, "Config files or names (trn2, configs/whatif/x.yaml)")->required();
  validate->add_option("--set", options->overrides, set_help);
  validate->callback([options, &exit_code] {
    for (const std::string& file : options->files) {
      try {
        LoadedConfig loaded = load_config(file, options->overrides);
        std::cout << "ok  " << loaded.source_file << "  (" << loaded.hardware.name << ", hash " << loaded.hash << ")\n";
      } catch (const ConfigError& e) {
        std::cerr << "error: " << e.what() << "\n";
        exit_code = 1;
      }
    }
  });

  CLI::App* show = config->add_subcommand("show", "Print the effective config as YAML, with derived figures");
  show->add_option("file", options->files, "Config file or name")->required()->expected(1);
  show->add_option("--set", options->overrides, set_help);
  show->add_flag("--effective-only", options->effective_only, "Print only the loadable config, no derived figures");
  show->callback([options] {
    LoadedConfig loaded = load_config(options->files.front(), options->overrides);
    std::cout << "# trnsim effective config from " << loaded.source_file << "\n" << loaded.canonical_yaml;
    if (!options->effective_only) {
      std::cout << derived_yaml(derive_figures(loaded.hardware)) << "config_hash: \"" << loaded.hash << "\"\n";
    }
  });

  CLI::App* diff = config->add_subcommand("diff", "List the values that differ between two effective configs");
  diff->add_option("files", options->files, "Two config files or names")->required()->expected(2);
  diff->add_option("--set-a", options->overrides, "Override in the first config (repeatable)");
  diff->add_option("--set-b", options->overrides_b, "Override in the second config (repeatable)");
  diff->add_flag("--exit-code", options->exit_code_on_difference, "Exit with 1 when the configs differ (as git diff)");
  diff->callback([options, &exit_code] {
    LoadedConfig a = load_config(options->files[0], options->overrides);
    LoadedConfig b = load_config(options->files[1], options->overrides_b);
    std::map<std::string, std::string> left, right;
    std::vector<std::string> order;
    for (const ConfigLeaf& leaf : flatten_config(a.hardware)) {
      left[leaf.path] = leaf.value;
      order.push_back(leaf.path);
    }
    for (const ConfigLeaf& leaf : flatten_config(b.hardware)) {
      if (!left.count(leaf.path)) order.push_back(leaf.path);
      right[leaf.path] = leaf.value;
    }
    std::cout << "--- " << a.source_file << " (" << a.hash << ")\n+++ " << b.source_file << " (" << b.hash << ")\n";
    size_t differences = 0;
    for (const std::string& path : order) {
      auto l = left.find(path);
      auto r = right.find(path);
      std::string lv = l == left.end() ? "(absent)" : l->second;
      std::string rv = r == right.end() ? "(absent)" : r->second;
      if (lv == rv) continue;
      ++differences;
      std::cout << path << ": " << lv << " -> " << rv << "\n";
    }
    std::cout << (differences ? std::to_string(differences) + " values differ\n" : "identical\n");
    if (differences && options->exit_code_on_difference) exit_code = 1;
  });

  CLI::App* summary = config->add_subcommand("summary", "Compare the headline figures of configs side by side");
  summary->add_option("files", options->files, "Config files or names")->required();
  summary->add_option("--set", options->overrides, set_help);
  summary->callback([options] {
    std::vector<LoadedConfig> loaded;
    for (const std::string& file : options->files) loaded.push_back(load_config(file, options->overrides));
    print_summary(loaded);
  });

  CLI::App* keys = config->add_subcommand("keys", "List every config key with its meaning and allowed values");
  keys->callback([] {
    for (const ConfigKeyDoc& key : describe_config_keys()) {
      std::cout << key.path << "\n    " << key.doc << (key.range.empty() ? "" : "  [" + key.range + "]") << "\n";
    }
  });
}

}  // namespace trnsim::cli
