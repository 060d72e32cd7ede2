// Helpers for config tests: temporary YAML files and error capture.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/config_loader.h"

namespace trnsim::testing {

// A scratch directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    m_path = std::filesystem::temp_directory_path() /
             ("trnsim_" + std::string(test->test_suite_name()) + "_" + test->name() + "_" +
              std::to_string(::getpid()));
    std::filesystem::create_directories(m_path);
  }
  ~TempDir() { std::filesystem::remove_all(m_path); }

  std::string write(const std::string& name, const std::string& text) const {
    std::filesystem::path file = m_path / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.string();
  }
  std::string path() const { return m_path.string(); }

 private:
  std::filesystem::path m_path;
};

// The message of the ConfigError that loading raises, or "" if it loads.
inline std::string load_error(const std::string& file, const std::vector<std::string>& overrides = {}) {
  try {
    load_config(file, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

inline std::string shipped(const std::string& name) { return std::string(TRNSIM_CONFIG_DIR) + "/" + name; }

}  // namespace trnsim::testing
