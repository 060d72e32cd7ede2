// Perfetto / Chrome-trace JSON (opens in ui.perfetto.dev): one process per NeuronCore, one
// thread (track) per engine and DMA queue named like the hardware's rows, one slice per
// instruction with its operands as args, and flow arrows for the dependencies that made an
// instruction wait. Output is deterministic (fixed ordering and number formatting).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace trnsim::sim {

class TraceWriter {
 public:
  // Names a process (e.g. "core 0") and returns its id; sort_index orders processes in the UI.
  int add_process(const std::string& name, int sort_index);
  // Names a track (e.g. "TensorMatrix", "qSyncIO0") in a process and returns its id.
  int add_track(int process, const std::string& name, int sort_index);

  // One slice; args are key/value pairs (values are JSON-escaped strings unless they parse as
  // numbers). Returns the slice id used for flows.
  int64_t slice(int process, int track, double start_ns, double duration_ns, const std::string& name,
                const std::vector<std::pair<std::string, std::string>>& args);
  // An arrow from the end of slice `from` to the start of slice `to` (a dependency).
  void flow(int64_t from, int64_t to, const std::string& name);
  // A counter value (e.g. pending DMAs, SBUF bytes in use) on a process.
  void counter(int process, const std::string& name, double time_ns, double value);

  // The process / track of that name, added when missing (merging per-op traces into one timeline).
  int find_or_add_process(const std::string& name, int sort_index);
  int find_or_add_track(int process, const std::string& name, int sort_index);
  // Appends `other`'s slices, flows and counters shifted by `offset_ns`, its processes renamed
  // `process_prefix + name` and merged with same-named processes (and tracks) already here.
  void append(const TraceWriter& other, double offset_ns, const std::string& process_prefix, int process_sort_base);

  void write(std::ostream& out) const;
  size_t slice_count() const { return m_slices.size(); }

 private:
  struct Slice {
    int process, track;
    double start_ns, duration_ns;
    std::string name;
    std::vector<std::pair<std::string, std::string>> args;
  };
  struct Flow {
    int64_t from, to;
    std::string name;
  };
  struct Counter {
    int process;
    std::string name;
    double time_ns, value;
  };
  struct Named {
    std::string name;
    int sort_index;
    int process;
  };
  std::vector<Named> m_processes, m_tracks;
  std::vector<Slice> m_slices;
  std::vector<Flow> m_flows;
  std::vector<Counter> m_counters;
};

}  // namespace trnsim::sim
