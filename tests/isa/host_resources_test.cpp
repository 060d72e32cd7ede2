// Host resources the device reuses across simulations: recycled SBUF/PSUM images (a state must still start from
// all-zero memories, whatever the previous user wrote and however it wrote it) and one pool of host threads that
// several callers share.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "isa/builder.h"
#include "isa/core_state.h"
#include "isa/host_workers.h"
#include "isa/interpreter.h"
#include "isa/memory_image.h"
#include "isa/view.h"
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

TEST(HostWorkers, WatchingRightAfterARunAndNotOnceTheThreadsSleep) {
  HostWorkers workers(2);
  EXPECT_FALSE(workers.watching());  // no run yet
  // Right after a run (a few tries: a loaded machine may preempt this thread between the two calls).
  bool watching = false;
  for (int attempt = 0; attempt < 50 && !watching; ++attempt) {
    workers.run([](unsigned) {});
    watching = workers.watching();
  }
  EXPECT_TRUE(watching);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(workers.watching());
  HostWorkers alone(1);
  alone.run([](unsigned) {});
  EXPECT_FALSE(alone.watching());  // no threads to hand a task to
}

// bn_stats tiles of 64 K values are split over the threads when they are still watching (after the 256 K-value
// activations here, which are split): each row's statistics are the same bits on 1, 2 and 3 threads, and match a double reference.
TEST(HostWorkers, BnStatsGivesTheSameBitsOnAnyNumberOfHostThreads) {
  ProgramBuilder b("bn_stats_split", Generation::trn2);
  const uint32_t wide = b.sbuf("wide", DType::fp32, {128, 2048});
  const uint32_t copy = b.sbuf("copy", DType::fp32, {128, 2048});
  const uint32_t stats = b.sbuf("stats", DType::fp32, {128, 12});
  for (uint32_t half = 0; half < 2; ++half) {
    b.emit(Opcode::activation).tensor("dst", b.view(copy)).word("op", "copy").tensor("data", b.view(wide));
    b.emit(Opcode::bn_stats)
        .tensor("dst", b.view(stats, {Slice::all(), Slice::range(6 * half, 6 * half + 6)}))
        .tensor("data", b.view(copy, {Slice::all(), Slice::range(512 * half, 512 * half + 512)}));
  }
  const Program program = b.finish();
  std::vector<float> input(128 * 2048);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(3.0f, 2.0f);
  for (float& v : input) v = normal(rng);
  auto run = [&](unsigned threads) {
    CoreState state(trn2().core, program);
    Tile tile(128, 2048);
    tile.values = input;
    state.write(full_allocation(program, wide), tile);
    InterpreterOptions options;
    options.host_threads = threads;
    interpret(program, state, trn2(), options);
    return state.read(full_allocation(program, stats));
  };
  const Tile one = run(1);
  for (unsigned threads : {2u, 3u}) {
    const Tile many = run(threads);
    for (size_t i = 0; i < one.values.size(); ++i) {
      ASSERT_EQ(std::memcmp(&one.values[i], &many.values[i], sizeof(float)), 0) << threads << " threads, value " << i;
    }
  }
  for (uint32_t p = 0; p < 128; p += 9) {
    for (uint32_t half = 0; half < 2; ++half) {
      for (uint32_t parity = 0; parity < 2; ++parity) {
        double sum = 0, m2 = 0;
        for (uint32_t i = parity; i < 512; i += 2) sum += input[p * 2048 + 512 * half + i];
        const double mean = sum / 256;
        for (uint32_t i = parity; i < 512; i += 2) m2 += std::pow(input[p * 2048 + 512 * half + i] - mean, 2);
        const uint32_t column = 6 * half + 3 * parity;
        EXPECT_EQ(one.at(p, column), 256.0f);
        EXPECT_NEAR(one.at(p, column + 1), mean, 1e-5);
        EXPECT_NEAR(one.at(p, column + 2), m2, 1e-5 * m2);
      }
    }
  }
}

}  // namespace
}  // namespace trnsim::isa
