// What the record/ tests share: a fresh directory per test, and the trn2 config loaded once.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "config/config_loader.h"
#include "isa/program.h"

namespace trnsim::record::testing_support {

// A fresh directory per test (named after the test and the process), removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    m_path = std::filesystem::temp_directory_path() /
             (prefix + info->test_suite_name() + "-" + info->name() + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(m_path);
    std::filesystem::create_directories(m_path);
  }
  ~TempDir() { std::filesystem::remove_all(m_path); }
  std::string operator/(const std::string& name) const { return (m_path / name).string(); }

 private:
  std::filesystem::path m_path;
};

inline const LoadedConfig& trn2() {
  static const LoadedConfig config = load_config("trn2");
  return config;
}

// Per-core programs as the raw pointers sim::simulate takes.
inline std::vector<const isa::Program*> raw(const std::vector<std::shared_ptr<const isa::Program>>& parts) {
  std::vector<const isa::Program*> out;
  for (const auto& p : parts) out.push_back(p.get());
  return out;
}

}  // namespace trnsim::record::testing_support
