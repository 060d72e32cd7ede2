// Host resources the device reuses across simulations: recycled SBUF/PSUM images (a state must still start from
// all-zero memories, whatever the previous user wrote and however it wrote it) and one pool of host threads that
// several callers share.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "isa/builder.h"
#include "isa/core_state.h"
#include "isa/host_workers.h"
#include "isa/memory_image.h"
#include "kernel_fixture.h"

namespace trnsim::isa {
namespace {

const HardwareConfig& trn2() { return testing_support::config("trn2"); }

bool all_zero(const Tile& tile) {
  for (float v : tile.values) {
    if (v != 0.0f) return false;
  }
  return true;
}

TEST(MemoryImagePool, AReturnedImageIsReusedAndZeroedWhereItWasWritten) {
  MemoryImagePool pool;
  uint8_t* first_data = nullptr;
  {
    std::shared_ptr<MemoryImage> image = pool.acquire(4, 8192);
    first_data = image->data();
    std::memset(image->data() + 1 * 8192 + 100, 0xAB, 300);
    image->mark_written(1, 1, 100, 400);
    std::memset(image->data() + 3 * 8192 + 8000, 0xCD, 192);
    image->mark_written(3, 1, 8000, 8192);
  }
  std::shared_ptr<MemoryImage> again = pool.acquire(4, 8192);
  EXPECT_EQ(again->data(), first_data);
  for (size_t i = 0; i < 4 * 8192; ++i) ASSERT_EQ(again->data()[i], 0) << "byte " << i;
  // Another shape is another image.
  std::shared_ptr<MemoryImage> other = pool.acquire(2, 8192);
  EXPECT_NE(other->data(), first_data);
}

TEST(MemoryImagePool, AnImageOutlivingItsPoolIsFreed) {
  std::shared_ptr<MemoryImage> image;
  {
    MemoryImagePool pool;
    image = pool.acquire(2, 4096);
    image->data()[5] = 1;
    image->mark_written(0, 1, 5, 6);
  }
  // No pool to return to: freed, not written back into the destroyed pool (a use after free `make test-asan`
  // reports).
  image.reset();
}

// Every path that writes on-chip memory (write, copy_elements, fp32_rows) leaves nothing behind for the next
// state, including a program whose tensors sit elsewhere in the same image.
TEST(CoreStateWithPool, TheNextStateReadsZerosEverywhereThePreviousOneWrote) {
  MemoryImagePool pool;
  ProgramBuilder first("first", Generation::trn2);
  const uint32_t a = first.sbuf("a", DType::bf16, {128, 96});
  const uint32_t b = first.sbuf("b", DType::bf16, {128, 96});
  const uint32_t acc = first.psum("acc", DType::fp32, {128, 512});
  const AccessPattern va = first.view(a), vb = first.view(b), vacc = first.view(acc);
  const Program written = first.finish();
  {
    CoreState state(trn2().core, written, nullptr, &pool);
    Tile ones(128, 96, 1.5f);
    state.write(va, ones);
    state.copy_elements(vb, va);
    int64_t row_stride = 0;
    float* rows = state.fp32_rows(vacc, row_stride);
    ASSERT_NE(rows, nullptr);
    for (uint32_t p = 0; p < 128; ++p) {
      for (uint32_t i = 0; i < 512; ++i) rows[p * row_stride + i] = 2.0f;
    }
    ASSERT_FALSE(all_zero(state.read(vb)));
  }
  // One tensor over the first partitions' whole SBUF range the builder used, one over the whole PSUM bank.
  ProgramBuilder second("second", Generation::trn2);
  const uint32_t wide = second.sbuf("wide", DType::fp32, {128, 256});
  const uint32_t bank = second.psum("bank", DType::fp32, {128, 512});
  const AccessPattern vwide = second.view(wide), vbank = second.view(bank);
  const Program reader = second.finish();
  CoreState state(trn2().core, reader, nullptr, &pool);
  EXPECT_TRUE(all_zero(state.read(vwide)));
  EXPECT_TRUE(all_zero(state.read(vbank)));
}

TEST(HostWorkers, CallersSharingOnePoolEachGetEveryIndexRunOnce) {
  HostWorkers workers(3);
  ASSERT_EQ(workers.size(), 3u);
  std::atomic<int> failures{0};
  auto caller = [&](int seed) {
    for (int round = 0; round < 200; ++round) {
      std::vector<int> seen(workers.size(), 0);
      workers.run([&](unsigned i) { seen[i] += seed + round; });
      for (int v : seen) {
        if (v != seed + round) ++failures;
      }
    }
  };
  std::thread one(caller, 1), two(caller, 1000);
  one.join();
  two.join();
  EXPECT_EQ(failures.load(), 0);
}

// A process that forks after its pool started threads (a DataLoader worker): the child has none of them, and
// neither a run nor the pool's end may wait for them.
TEST(HostWorkers, AForkedChildRunsTasksAndEndsWithoutItsParentsThreads) {
  auto pool = std::make_unique<HostWorkers>(2);
  std::vector<int> seen(2, 0);
  pool->run([&](unsigned i) { seen[i] = 1; });
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::vector<int> in_child(2, 0);
    pool->run([&](unsigned i) { in_child[i] = 2; });
    const bool ok = in_child[0] == 2 && in_child[1] == 2;
    pool.reset();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  pool->run([&](unsigned i) { seen[i] = 3; });
  EXPECT_EQ(seen, std::vector<int>({3, 3}));
}

}  // namespace
}  // namespace trnsim::isa
