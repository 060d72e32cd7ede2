// A few host threads for the interpreter's hot loops (the matmul GEMM). The caller works too,
// and threads sleep on a condition variable between tasks: on a shared machine a spinning pool
// (OpenMP's default) was 20x slower under load. Work is split so that every output element is
// computed by exactly one thread in the same order, so results do not depend on the thread count.
// Threads start on the first run(), so a pool that never runs a task (an element-wise op) costs nothing, and one
// pool can serve many simulations (the PyTorch device keeps one for all its ops).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace trnsim::isa {

class HostWorkers {
 public:
  // `threads` counts the caller; 0 = $TRNSIM_HOST_THREADS, else the host's cores (at most 8).
  explicit HostWorkers(unsigned threads = 0);
  ~HostWorkers();
  HostWorkers(const HostWorkers&) = delete;
  HostWorkers& operator=(const HostWorkers&) = delete;

  unsigned size() const { return m_size; }
  // Calls task(i) for every i in [0, size()) — i = 0 on the calling thread — and waits for all. While another
  // caller has the threads, the calling thread runs every i itself.
  void run(const std::function<void(unsigned)>& task);

 private:
  void worker_loop(unsigned index);

  unsigned m_size = 1;
  std::mutex m_run_mutex;  // one caller at a time has the threads
  std::vector<std::thread> m_threads;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::condition_variable m_done;
  const std::function<void(unsigned)>* m_task = nullptr;
  uint64_t m_generation = 0;
  unsigned m_pending = 0;
  bool m_stop = false;
};

}  // namespace trnsim::isa
