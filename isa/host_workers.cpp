#include "isa/host_workers.h"

#include <algorithm>
#include <cstdlib>

namespace trnsim::isa {

HostWorkers::HostWorkers(unsigned threads) {
  if (threads == 0) {
    const char* env = std::getenv("TRNSIM_HOST_THREADS");
    threads = env ? static_cast<unsigned>(std::max(1, std::atoi(env))) : std::thread::hardware_concurrency();
    threads = std::clamp(threads, 1u, 8u);
  }
  m_size = threads;
}

HostWorkers::~HostWorkers() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  for (std::thread& t : m_threads) t.join();
}

void HostWorkers::run(const std::function<void(unsigned)>& task) {
  std::unique_lock<std::mutex> run_lock(m_run_mutex, std::try_to_lock);
  if (m_size == 1 || !run_lock.owns_lock()) {
    for (unsigned i = 0; i < m_size; ++i) task(i);
    return;
  }
  if (m_threads.empty()) {
    for (unsigned i = 1; i < m_size; ++i) m_threads.emplace_back([this, i] { worker_loop(i); });
  }
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_task = &task;
    m_pending = static_cast<unsigned>(m_threads.size());
    ++m_generation;
  }
  m_wake.notify_all();
  task(0);
  std::unique_lock<std::mutex> lock(m_mutex);
  m_done.wait(lock, [this] { return m_pending == 0; });
  m_task = nullptr;
}

void HostWorkers::worker_loop(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(unsigned)>* task = nullptr;
    {
      std::unique_lock<std::mutex> lock(m_mutex);
      m_wake.wait(lock, [&] { return m_stop || m_generation != seen; });
      if (m_stop) return;
      seen = m_generation;
      task = m_task;
    }
    (*task)(index);
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (--m_pending == 0) m_done.notify_one();
    }
  }
}

}  // namespace trnsim::isa
