// One in-order engine queue of a NeuronCore (Tensor, Vector, Scalar, GpSimd or Sync): an
// instruction starts when the engine has issued the previous one and its inputs are ready,
// occupies the engine for its initiation interval and becomes visible to dependents after the
// engine's pipeline latency. Loosely timed: the core calls schedule() directly (no thread).
#pragma once

#include <systemc>

#include "config/hardware_config.h"
#include "sim/stats.h"

namespace trnsim::sim {

struct Slot {
  double start_ns = 0;  // issue
  double end_ns = 0;    // the engine may issue the next instruction
  double done_ns = 0;   // results visible to dependents
};

class EngineModel : public sc_core::sc_module {
 public:
  EngineModel(sc_core::sc_module_name name, Engine kind);

  Slot schedule(double ready_ns, double occupancy_ns, double latency_ns);
  // An instruction on a part of the engine (a PE-array tile) beside others: it starts at start_ns (the
  // caller has checked its part is free), and counts as busy only where no earlier instruction already
  // is (callers issue in program order, so starts never decrease). Later schedule() calls wait for it.
  Slot schedule_beside(double start_ns, double occupancy_ns, double latency_ns);
  // The engine issues nothing before `time_ns` (barriers, semaphore waits).
  void hold_until(double time_ns);

  Engine engine_kind() const { return m_kind; }
  double free_at_ns() const { return m_free_at_ns; }
  double last_done_ns() const { return m_last_done_ns; }
  const EngineStats& stats() const { return m_stats; }

 private:
  Engine m_kind;
  double m_free_at_ns = 0;
  double m_last_done_ns = 0;
  double m_busy_until_ns = 0;  // the end of the busy time counted so far
  EngineStats m_stats;
};

}  // namespace trnsim::sim
