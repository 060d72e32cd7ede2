#include "isa/host_workers.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <unistd.h>

namespace trnsim::isa {
namespace {

// Host tuning, assumed: how long a thread watches before it sleeps. Long enough to span the gap between two
// instructions' tasks, short enough that a loaded machine loses little to it.
constexpr auto kWatch = std::chrono::microseconds(20);

// Spins until done() or kWatch has passed; true when done().
template <class Done>
bool watch(Done&& done) {
  const auto until = std::chrono::steady_clock::now() + kWatch;
  for (unsigned i = 0;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 63 && std::chrono::steady_clock::now() >= until) return done();
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

HostWorkers::HostWorkers(unsigned threads) {
  if (threads == 0) {
    const char* env = std::getenv("TRNSIM_HOST_THREADS");
    threads = env ? static_cast<unsigned>(std::max(1, std::atoi(env))) : std::thread::hardware_concurrency();
    threads = std::clamp(threads, 1u, 8u);
  }
  m_size = threads;
}

HostWorkers::~HostWorkers() {
  if (m_crew == nullptr || m_crew->pid != ::getpid()) return;  // none, or a forked child's ghost (see Crew)
  {
    std::lock_guard<std::mutex> lock(m_crew->mutex);
    m_crew->stop = true;
  }
  m_crew->wake.notify_all();
  for (std::thread& t : m_crew->threads) t.join();
  delete m_crew;
}

void HostWorkers::run(const std::function<void(unsigned)>& task) {
  std::unique_lock<std::mutex> run_lock(m_run_mutex, std::try_to_lock);
  if (m_size == 1 || !run_lock.owns_lock()) {
    for (unsigned i = 0; i < m_size; ++i) task(i);
    return;
  }
  const pid_t pid = ::getpid();
  if (m_crew != nullptr && m_crew->pid != pid) m_crew = nullptr;  // a forked child: the parent's crew is a ghost
  if (m_crew == nullptr) {
    m_crew = new Crew;
    m_crew->pid = pid;
    for (unsigned i = 1; i < m_size; ++i) m_crew->threads.emplace_back(worker_loop, m_crew, i);
  }
  Crew& crew = *m_crew;
  {
    std::lock_guard<std::mutex> lock(crew.mutex);
    crew.task = &task;
    crew.pending = static_cast<unsigned>(crew.threads.size());
    ++crew.generation;
  }
  crew.wake.notify_all();
  task(0);
  watch([&] { return crew.pending.load(std::memory_order_acquire) == 0; });
  std::unique_lock<std::mutex> lock(crew.mutex);
  crew.done.wait(lock, [&] { return crew.pending == 0; });
  crew.task = nullptr;
  m_last_run_end_ns.store(now_ns(), std::memory_order_relaxed);
}

bool HostWorkers::watching() const {
  if (m_size == 1) return false;
  const int64_t last = m_last_run_end_ns.load(std::memory_order_relaxed);
  // Host tuning, assumed: half the watch, since a thread that finished its share early started watching before
  // the run ended.
  return last != 0 && now_ns() - last < std::chrono::duration_cast<std::chrono::nanoseconds>(kWatch).count() / 2;
}

void HostWorkers::worker_loop(Crew* crew, unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(unsigned)>* task = nullptr;
    watch([&] { return crew->stop.load(std::memory_order_acquire) || crew->generation.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(crew->mutex);
      crew->wake.wait(lock, [&] { return crew->stop || crew->generation != seen; });
      if (crew->stop) return;
      seen = crew->generation;
      task = crew->task;
    }
    (*task)(index);
    {
      std::lock_guard<std::mutex> lock(crew->mutex);
      if (--crew->pending == 0) crew->done.notify_one();
    }
  }
}

}  // namespace trnsim::isa
