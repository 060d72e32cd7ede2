// DependencyTracker: RAW/WAR/WAW with the right producer, independence of disjoint memory (quadrants,
// byte ranges, HBM tensors), strided patterns, and a query-rate micro-benchmark (logged, not asserted).
#include "sim/base/dependency_tracker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

namespace trnsim::sim {
namespace {

using isa::AccessPattern;
using isa::Allocation;
using isa::ApDim;
using isa::MemorySpace;

HardwareConfig small_config() {
  HardwareConfig config;
  config.core.sbuf.partitions = 128;
  config.core.sbuf.bytes_per_partition = 192 * 1024;
  config.core.sbuf.quadrant_partitions = 32;
  config.core.psum.partitions = 128;
  config.core.psum.bytes_per_partition = 16 * 1024;
  config.core.psum.banks = 8;
  config.core.psum.bank_bytes = 2048;
  return config;
}

Allocation on_chip(const std::string& name, MemorySpace space, uint32_t partitions, uint32_t elements,
                   uint64_t base_byte, uint32_t base_partition = 0) {
  Allocation a;
  a.name = name;
  a.space = space;
  a.dtype = DType::fp32;
  a.shape = {partitions, elements};
  a.base_partition = base_partition;
  a.base_byte = base_byte;
  return a;
}

Allocation hbm(const std::string& name, uint32_t rows, uint32_t columns) {
  Allocation a;
  a.name = name;
  a.space = MemorySpace::hbm;
  a.dtype = DType::fp32;
  a.shape = {rows, columns};
  return a;
}

// Partitions [start, start + count) x elements offset + stride * i for i < size (fp32).
AccessPattern tile(uint32_t allocation, MemorySpace space, uint32_t start, uint32_t count, int64_t offset,
                   uint32_t size, int64_t stride = 1) {
  AccessPattern ap;
  ap.space = space;
  ap.dtype = DType::fp32;
  ap.allocation = allocation;
  ap.start_partition = start;
  ap.partition = ApDim{1, count};
  ap.offset = offset;
  ap.num_free_dims = 1;
  ap.free[0] = ApDim{stride, size};
  return ap;
}

// Rows [row0, row0 + rows) x columns [col0, col0 + cols) of a row-major HBM tensor with `width` columns.
AccessPattern hbm_block(uint32_t allocation, uint32_t width, uint32_t row0, uint32_t rows, uint32_t col0,
                        uint32_t cols) {
  AccessPattern ap;
  ap.space = MemorySpace::hbm;
  ap.dtype = DType::fp32;
  ap.allocation = allocation;
  ap.partition = ApDim{width, rows};
  ap.offset = int64_t{row0} * width + col0;
  ap.num_free_dims = 1;
  ap.free[0] = ApDim{1, cols};
  return ap;
}

// The producer a read of `ap` waits for (-1: none), and its kind.
int64_t read_producer(const DependencyTracker& t, AccessPattern ap) { return t.query({&ap}, {}).producer; }
char read_kind(const DependencyTracker& t, AccessPattern ap) { return t.query({&ap}, {}).kind; }

class DependencyTrackerTest : public ::testing::Test {
 protected:
  DependencyTrackerTest() {
    program.allocations.push_back(on_chip("a", MemorySpace::sbuf, 128, 2048, 0));              // 0: 8 KiB/partition
    program.allocations.push_back(on_chip("b", MemorySpace::sbuf, 128, 2048, 8192));           // 1: right after a
    program.allocations.push_back(on_chip("acc", MemorySpace::psum, 128, 512, 0));             // 2: one bank
    program.allocations.push_back(hbm("x", 64, 4096));                                         // 3: 16 KiB rows
    program.allocations.push_back(hbm("y", 64, 4096));                                         // 4
    program.allocations.push_back(on_chip("hi", MemorySpace::sbuf, 64, 2048, 16384, 64));      // 5: partitions 64..127
  }
  isa::Program program;
  HardwareConfig config = small_config();
};

TEST_F(DependencyTrackerTest, ReadAfterWrite) {
  DependencyTracker t(config, program);
  AccessPattern a = tile(0, MemorySpace::sbuf, 0, 128, 0, 512);
  EXPECT_EQ(t.query({&a}, {}).producer, -1);
  t.record(3, 100, {}, {&a});
  Dependency d = t.query({&a}, {});
  EXPECT_EQ(d.ready_ns, 100);
  EXPECT_EQ(d.producer, 3);
  EXPECT_EQ(d.kind, 'R');
}

TEST_F(DependencyTrackerTest, WriteAfterRead) {
  DependencyTracker t(config, program);
  AccessPattern a = tile(0, MemorySpace::sbuf, 0, 128, 0, 512);
  t.record(1, 40, {&a}, {});
  t.record(2, 50, {&a}, {});
  t.record(3, 45, {&a}, {});  // reads overlap; the latest completion counts
  Dependency d = t.query({}, {&a});
  EXPECT_EQ(d.ready_ns, 50);
  EXPECT_EQ(d.producer, 2);
  EXPECT_EQ(d.kind, 'A');
  EXPECT_EQ(t.query({&a}, {}).producer, -1);  // reads don't wait for reads
}

TEST_F(DependencyTrackerTest, WriteAfterWriteAndTheLaterOfWawAndWar) {
  DependencyTracker t(config, program);
  AccessPattern acc = tile(2, MemorySpace::psum, 0, 128, 0, 512);
  t.record(0, 70, {}, {&acc});
  Dependency d = t.query({}, {&acc});
  EXPECT_EQ(d.ready_ns, 70);
  EXPECT_EQ(d.producer, 0);
  EXPECT_EQ(d.kind, 'W');
  t.record(1, 90, {&acc}, {});  // a reader finishing after the write: the next writer waits for it
  d = t.query({}, {&acc});
  EXPECT_EQ(d.ready_ns, 90);
  EXPECT_EQ(d.producer, 1);
  EXPECT_EQ(d.kind, 'A');
  t.record(2, 120, {}, {&acc});  // a new write supersedes the earlier reads
  d = t.query({}, {&acc});
  EXPECT_EQ(d.ready_ns, 120);
  EXPECT_EQ(d.producer, 2);
  EXPECT_EQ(d.kind, 'W');
}

TEST_F(DependencyTrackerTest, ReadModifyWriteInOneInstruction) {
  DependencyTracker t(config, program);
  AccessPattern a = tile(0, MemorySpace::sbuf, 0, 128, 0, 512);
  t.record(0, 10, {}, {&a});
  Dependency d = t.query({&a}, {&a});  // RAW and WAW on the same producer: the read is reported
  EXPECT_EQ(d.producer, 0);
  EXPECT_EQ(d.kind, 'R');
  t.record(1, 30, {&a}, {&a});
  d = t.query({&a}, {});
  EXPECT_EQ(d.producer, 1);
  EXPECT_EQ(d.ready_ns, 30);
}

TEST_F(DependencyTrackerTest, DisjointQuadrantsAreIndependentSharedQuadrantsAreNot) {
  DependencyTracker t(config, program);
  AccessPattern q0 = tile(0, MemorySpace::sbuf, 0, 32, 0, 512);
  AccessPattern q1 = tile(0, MemorySpace::sbuf, 32, 32, 0, 512);
  AccessPattern upper = tile(5, MemorySpace::sbuf, 0, 64, 0, 512);  // partitions 64..127, other bytes anyway
  t.record(0, 100, {}, {&q0});
  EXPECT_EQ(t.query({&q1}, {&q1}).producer, -1);
  EXPECT_EQ(t.query({&upper}, {}).producer, -1);
  // Partitions 16..47 straddle quadrants 0 and 1: they share quadrant 0 with the write.
  AccessPattern straddle = tile(0, MemorySpace::sbuf, 16, 32, 0, 512);
  EXPECT_EQ(t.query({&straddle}, {}).producer, 0);
  // Different partitions inside one quadrant: conservatively dependent (the granule is the quadrant).
  AccessPattern same_quadrant = tile(0, MemorySpace::sbuf, 16, 8, 0, 512);
  EXPECT_EQ(t.query({&same_quadrant}, {}).kind, 'R');
}

TEST_F(DependencyTrackerTest, DisjointByteRangesAreIndependent) {
  DependencyTracker t(config, program);
  AccessPattern low = tile(0, MemorySpace::sbuf, 0, 128, 0, 256);    // bytes 0..1023
  AccessPattern high = tile(0, MemorySpace::sbuf, 0, 128, 256, 256);  // bytes 1024..2047
  AccessPattern other = tile(1, MemorySpace::sbuf, 0, 128, 0, 2048);  // allocation b: bytes 8192..
  t.record(0, 100, {}, {&low});
  EXPECT_EQ(t.query({&high}, {&high}).producer, -1);
  EXPECT_EQ(t.query({&other}, {&other}).producer, -1);
  // The last element of a (byte 8188..8191) and the first of b (8192..) are in different granules.
  AccessPattern a_last = tile(0, MemorySpace::sbuf, 0, 128, 2047, 1);
  t.record(1, 200, {}, {&a_last});
  EXPECT_EQ(t.query({&other}, {}).producer, -1);
  // PSUM and SBUF at the same byte offsets are different memories.
  AccessPattern acc = tile(2, MemorySpace::psum, 0, 128, 0, 256);
  EXPECT_EQ(t.query({&acc}, {&acc}).producer, -1);
}

TEST_F(DependencyTrackerTest, HbmTensorsAreDistinct) {
  DependencyTracker t(config, program);
  AccessPattern x = hbm_block(3, 4096, 0, 64, 0, 4096);
  AccessPattern y = hbm_block(4, 4096, 0, 64, 0, 4096);
  t.record(0, 500, {}, {&x});
  EXPECT_EQ(t.query({&y}, {&y}).producer, -1);
  Dependency d = t.query({&x}, {});
  EXPECT_EQ(d.producer, 0);
  EXPECT_EQ(d.ready_ns, 500);
}

TEST_F(DependencyTrackerTest, OverlappingStridedPatterns) {
  DependencyTracker t(config, program);
  // HBM: a column block of every row (bytes 0..2047 of each 16 KiB row).
  AccessPattern columns = hbm_block(3, 4096, 0, 64, 0, 512);
  t.record(0, 100, {}, {&columns});
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 0, 64, 1024, 1024)), -1);  // bytes 4096..8191 of each row
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 10, 11, 0, 128)), 0);      // a sub-block
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 63, 1, 4000, 10)), -1);    // the tail of the last row
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 63, 1, 0, 10)), 0);        // the head of the last row
  // Columns 510..1021 share a 256-byte granule (bytes 1792..2047 of each row) with the write:
  // conservatively dependent; columns 512.. start a granule of their own.
  EXPECT_EQ(read_kind(t, hbm_block(3, 4096, 0, 64, 510, 512)), 'R');
  EXPECT_EQ(read_kind(t, hbm_block(3, 4096, 0, 64, 512, 512)), ' ');
  // A transposed read (column-major walk: outer stride 1, inner stride = row width) spans all rows.
  AccessPattern column = hbm_block(3, 4096, 0, 1, 5, 1);
  column.partition = ApDim{1, 4};
  column.free[0] = ApDim{4096, 64};
  EXPECT_EQ(read_producer(t, column), 0);
  // The model tracks the bounding range per outer index, so columns 2000..2003 (never written) still
  // wait: conservative, never wrong.
  column.offset = 2000;
  EXPECT_EQ(read_producer(t, column), 0);
  // Every other element of bytes 0..4095, then the elements in between: the same granules.
  AccessPattern even = tile(0, MemorySpace::sbuf, 0, 128, 0, 512, 2);
  AccessPattern odd = tile(0, MemorySpace::sbuf, 0, 128, 1, 512, 2);
  AccessPattern beyond = tile(0, MemorySpace::sbuf, 0, 128, 1024, 512);  // bytes 4096..6143
  t.record(1, 200, {}, {&even});
  EXPECT_EQ(t.query({&odd}, {}).producer, 1);
  EXPECT_EQ(t.query({&beyond}, {}).producer, -1);
  // A negative stride walks down from its offset: elements 1535..1024 are bytes 4096..6143.
  AccessPattern reversed = tile(0, MemorySpace::sbuf, 0, 128, 1535, 512, -1);
  t.record(2, 300, {}, {&reversed});
  EXPECT_EQ(t.query({&beyond}, {}).producer, 2);
  EXPECT_EQ(read_producer(t, tile(0, MemorySpace::sbuf, 0, 128, 1536, 64)), -1);
  // Two free dims: a 2 x 64 block at element stride 1024, bytes 0..255 and 4096..4351; tracked as its
  // bounding range 0..4351.
  AccessPattern two_d = tile(1, MemorySpace::sbuf, 0, 128, 0, 64);
  two_d.num_free_dims = 2;
  two_d.free[0] = ApDim{1024, 2};
  two_d.free[1] = ApDim{1, 64};
  t.record(3, 400, {}, {&two_d});
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 128, 1024, 1)), 3);
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 128, 512, 1)), 3);  // inside the bounding range
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 128, 1088, 64)), -1);  // past it (bytes 4352..)
}

TEST_F(DependencyTrackerTest, AbsentOperandsAndEmptyPatternsTouchNothing) {
  DependencyTracker t(config, program);
  AccessPattern absent;
  AccessPattern empty = tile(0, MemorySpace::sbuf, 0, 128, 0, 0);
  AccessPattern a = tile(0, MemorySpace::sbuf, 0, 128, 0, 512);
  t.record(0, 10, {nullptr, &absent}, {&empty, nullptr});
  EXPECT_EQ(t.query({&a}, {&a}).producer, -1);
}

TEST_F(DependencyTrackerTest, QueryRateForA128By2KiBTile) {
  DependencyTracker t(config, program);
  // Three 128-partition x 2 KiB tiles (512 fp32): 4 quadrants x 8 granules each.
  AccessPattern in0 = tile(0, MemorySpace::sbuf, 0, 128, 0, 512);
  AccessPattern in1 = tile(0, MemorySpace::sbuf, 0, 128, 512, 512);
  AccessPattern out = tile(1, MemorySpace::sbuf, 0, 128, 0, 512);
  t.record(0, 1, {}, {&in0, &in1});
  constexpr int kQueries = 200000;
  double sink = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kQueries; ++i) sink += t.query({&in0, &in1}, {&out}).ready_ns;
  double query_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kQueries; ++i) t.record(i + 1, i + 2, {&in0, &in1}, {&out});
  double record_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ perf     ] DependencyTracker, 2 reads + 1 write of 128x2KiB (96 granules): %.2f M queries/s, "
              "%.2f M records/s\n",
              kQueries / query_s / 1e6, kQueries / record_s / 1e6);
  EXPECT_EQ(sink, kQueries);
}

}  // namespace
}  // namespace trnsim::sim
