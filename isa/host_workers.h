// A few host threads for the interpreter's hot loops (the matmul GEMM). The caller works too,
// and threads sleep on a condition variable between tasks: on a shared machine a spinning pool
// (OpenMP's default) was 20x slower under load. They watch for the next task (and the caller for
// the last finisher) for a few microseconds before sleeping, since an op's instructions hand out
// tasks back to back and a wake-up through the kernel costs more than that. Work is split so that every output element is
// computed by exactly one thread in the same order, so results do not depend on the thread count.
// Threads start on the first run(), so a pool that never runs a task (an element-wise op) costs nothing, and one
// pool can serve many simulations (the PyTorch device keeps one for all its ops).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/types.h>

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
  // Whether the threads are still watching for a task (a run ended moments ago), so that handing out a small one
  // costs no wake-up through the kernel.
  bool watching() const;

 private:
  // The threads and what they synchronise on, started together by one process. A forked child (a DataLoader
  // worker of a process that ran ops) has none of its parent's threads and may find their mutex held by a thread
  // that does not exist there: it lets the whole crew go (leaked; destroying it would terminate or hang) and starts
  // its own.
  struct Crew {
    pid_t pid = 0;
    std::mutex mutex;
    std::condition_variable wake;
    std::condition_variable done;
    const std::function<void(unsigned)>* task = nullptr;
    // Written under `mutex`; atomic so that a thread can watch them for a moment before it sleeps.
    std::atomic<uint64_t> generation{0};
    std::atomic<unsigned> pending{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
  };
  static void worker_loop(Crew* crew, unsigned index);

  unsigned m_size = 1;
  std::atomic<int64_t> m_last_run_end_ns{0};  // steady clock
  std::mutex m_run_mutex;  // one caller at a time has the crew
  Crew* m_crew = nullptr;  // started on the first run that needs threads
};

// Calls rows(first, end) over [0, count), split into one contiguous range per thread of `workers` when `worth_threads`
// (and there are threads and at least two rows), else once on the calling thread. Each range is [count * i / n,
// count * (i + 1) / n), so which thread computes a row does not change what it computes.
template <class Rows>
void run_row_ranges(HostWorkers* workers, uint32_t count, bool worth_threads, Rows&& rows) {
  const unsigned threads = workers ? workers->size() : 1;
  if (!worth_threads || threads < 2 || count < 2) {
    rows(uint32_t{0}, count);
    return;
  }
  workers->run([&](unsigned index) {
    const uint32_t first = uint32_t(uint64_t(count) * index / threads);
    const uint32_t end = uint32_t(uint64_t(count) * (index + 1) / threads);
    if (first < end) rows(first, end);
  });
}

}  // namespace trnsim::isa
