// The instruction scheduler a kernel compiler runs before the hardware sees a program (issue 37). The NKI docs say
// neuronx-cc's scheduler "is free to reorder independent operations" (../shared/reference/nki-api.md §5): a traced
// kernel's program order is not the order its engines execute. Each engine of a NeuronCore runs its own instruction
// stream in order, so the order the compiler chooses per engine decides how much the engines overlap.
//
// list_schedule() returns such an order for a program: a list scheduler over the program's dependency graph with
// the engines' queues as resources and the cost model's times as estimates. The timing model then runs the
// reordered program exactly as it runs any program (each engine in order, waiting on true dependencies), so the
// scheduler changes only which instruction an engine takes next, never what a program computes.
//
// Rules (each stated where it is implemented in list_scheduler.cpp):
//  - Dependencies are RAW, WAR and WAW on the bytes two instructions touch (bounding boxes of their access patterns:
//    partitions x bytes of one on-chip memory, or bytes of one HBM tensor; conservative), plus the engine-internal
//    state some instructions share (the lane accumulators of reduce_cmd, the PRNG states): those keep their order on
//    their engine. Tile addresses are already allocated (buffers rotate as the kernel's tracer placed them), so
//    reusing a buffer is a WAR/WAW dependency like any other.
//  - Fences: control flow, register instructions and dynamically addressed operands, semaphores, barriers and
//    everything that reaches other cores (collectives, sendrecv, core_barrier) keep their place; nothing moves across
//    them.
//  - Look-ahead: the scheduler picks among the first `lookahead_instructions` unscheduled instructions of the
//    program (a bounded window, as a compiler's list scheduler over unrolled loop bodies).
//  - Choice: the candidate whose dependencies are met that would start earliest on its engine (estimated from the
//    cost model: compute occupancy and latency, DMA start latency and engine time per queue); ties in program order.
//  - keep_order ranges (NKI's `nl.no_reorder()` blocks, sequential loops) keep program order per engine inside them;
//    extra edges (NKI's `kernel.with_schedule`) are honoured as dependencies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "config/hardware_config.h"
#include "isa/program.h"

namespace trnsim::sim {

struct ScheduleOptions {
  // Assumed: neuronx-cc's scheduling window is not published. 256 instructions hold several iterations of the
  // unrolled loop bodies of the published kernels (a few to a few dozen instructions each), which is as far as their
  // rotating buffers let an iteration run ahead anyway.
  size_t lookahead_instructions = 256;
  // [begin, end) instruction index ranges whose instructions keep program order on each engine.
  std::vector<std::pair<size_t, size_t>> keep_order;
  // (later, earlier): instruction `later` is scheduled after instruction `earlier`, whichever comes first in the
  // program. Both must lie between the same fences; edges that form a cycle with the dependencies are an
  // std::invalid_argument.
  std::vector<std::pair<size_t, size_t>> edges;
};

// The scheduled order: a permutation of 0 .. program.instructions.size() - 1 (the i-th entry is the index of the
// instruction that comes i-th). Every dependency of the program keeps its order.
std::vector<size_t> list_schedule(const isa::Program& program, const HardwareConfig& config,
                                  const ScheduleOptions& options = {});

// The program with its instructions in `order` (each keeps its source_line, so messages still name the line the
// instruction came from).
isa::Program reorder_program(const isa::Program& program, const std::vector<size_t>& order);

}  // namespace trnsim::sim
