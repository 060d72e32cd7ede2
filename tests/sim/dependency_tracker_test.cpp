// DependencyTracker: RAW/WAR/WAW with the right producer, dependencies exact to the byte (small tensors
// sharing a 256-byte run, disjoint slices, interleaved strided patterns, partition ranges, HBM rows and
// columns, PSUM), a randomized comparison against a byte-by-byte model, and a query-rate
// micro-benchmark (logged, not asserted).
#include "sim/base/dependency_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <unordered_map>

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

TEST_F(DependencyTrackerTest, DisjointPartitionRangesAreIndependent) {
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
  // Partitions 16..23 are among the written 0..31.
  AccessPattern inside = tile(0, MemorySpace::sbuf, 16, 8, 0, 512);
  EXPECT_EQ(t.query({&inside}, {}).kind, 'R');
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
  // Columns 510..1021 include two written columns; columns 512.. none.
  EXPECT_EQ(read_kind(t, hbm_block(3, 4096, 0, 64, 510, 512)), 'R');
  EXPECT_EQ(read_kind(t, hbm_block(3, 4096, 0, 64, 512, 512)), ' ');
  // A transposed read (column-major walk: outer stride 1, inner stride = row width) spans all rows.
  AccessPattern column = hbm_block(3, 4096, 0, 1, 5, 1);
  column.partition = ApDim{1, 4};
  column.free[0] = ApDim{4096, 64};
  EXPECT_EQ(read_producer(t, column), 0);
  // Columns 2000..2003 of every row were never written.
  column.offset = 2000;
  EXPECT_EQ(read_producer(t, column), -1);
  // Every other element of bytes 0..4095, then the elements in between: no byte in common.
  AccessPattern even = tile(0, MemorySpace::sbuf, 0, 128, 0, 512, 2);
  AccessPattern odd = tile(0, MemorySpace::sbuf, 0, 128, 1, 512, 2);
  AccessPattern beyond = tile(0, MemorySpace::sbuf, 0, 128, 1024, 512);  // bytes 4096..6143
  t.record(1, 200, {}, {&even});
  EXPECT_EQ(t.query({&odd}, {&odd}).producer, -1);
  EXPECT_EQ(t.query({&even}, {}).producer, 1);
  EXPECT_EQ(t.query({&beyond}, {}).producer, -1);
  // A negative stride walks down from its offset: elements 1535..1024 are bytes 4096..6143.
  AccessPattern reversed = tile(0, MemorySpace::sbuf, 0, 128, 1535, 512, -1);
  t.record(2, 300, {}, {&reversed});
  EXPECT_EQ(t.query({&beyond}, {}).producer, 2);
  EXPECT_EQ(read_producer(t, tile(0, MemorySpace::sbuf, 0, 128, 1536, 64)), -1);
  // Two free dims: a 2 x 64 block at element stride 1024, bytes 0..255 and 4096..4351 of b.
  AccessPattern two_d = tile(1, MemorySpace::sbuf, 0, 128, 0, 64);
  two_d.num_free_dims = 2;
  two_d.free[0] = ApDim{1024, 2};
  two_d.free[1] = ApDim{1, 64};
  t.record(3, 400, {}, {&two_d});
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 128, 1024, 1)), 3);
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 128, 63, 1)), 3);
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 128, 64, 960)), -1);   // the gap between the rows
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 128, 1088, 64)), -1);  // past the block (bytes 4352..)
}

TEST_F(DependencyTrackerTest, AbsentOperandsAndEmptyPatternsTouchNothing) {
  DependencyTracker t(config, program);
  AccessPattern absent;
  AccessPattern empty = tile(0, MemorySpace::sbuf, 0, 128, 0, 0);
  AccessPattern a = tile(0, MemorySpace::sbuf, 0, 128, 0, 512);
  t.record(0, 10, {nullptr, &absent}, {&empty, nullptr});
  EXPECT_EQ(t.query({&a}, {&a}).producer, -1);
}

Allocation on_chip_typed(const std::string& name, MemorySpace space, DType dtype, uint32_t partitions,
                         uint32_t elements, uint64_t base_byte, uint32_t base_partition = 0) {
  Allocation a = on_chip(name, space, partitions, elements, base_byte, base_partition);
  a.dtype = dtype;
  return a;
}

AccessPattern typed(AccessPattern ap, DType dtype) {
  ap.dtype = dtype;
  return ap;
}

// One-pattern queries and records.
Dependency reading(const DependencyTracker& t, AccessPattern ap) { return t.query({&ap}, {}); }
Dependency writing(const DependencyTracker& t, AccessPattern ap) { return t.query({}, {&ap}); }
void read_by(DependencyTracker& t, int64_t index, double done_ns, AccessPattern ap) { t.record(index, done_ns, {&ap}, {}); }
void write_by(DependencyTracker& t, int64_t index, double done_ns, AccessPattern ap) { t.record(index, done_ns, {}, {&ap}); }

TEST_F(DependencyTrackerTest, SmallTensorsSharingA256ByteRunAreIndependent) {
  // Three [128, 8] fp32 tiles, 32 bytes per partition each, back to back in one 256-byte run, in SBUF
  // and in one PSUM bank.
  for (MemorySpace space : {MemorySpace::sbuf, MemorySpace::psum}) {
    isa::Program p;
    for (int i = 0; i < 3; ++i) p.allocations.push_back(on_chip("s" + std::to_string(i), space, 128, 8, 32 * i));
    DependencyTracker t(config, p);
    AccessPattern s0 = tile(0, space, 0, 128, 0, 8), s1 = tile(1, space, 0, 128, 0, 8), s2 = tile(2, space, 0, 128, 0, 8);
    t.record(0, 100, {&s2}, {&s0});  // reads s2, writes s0
    EXPECT_EQ(t.query({&s1}, {&s1}).producer, -1);  // s1 is neither read nor written
    EXPECT_EQ(t.query({&s2}, {}).producer, -1);     // reads never wait for reads
    Dependency raw = t.query({&s0}, {}), waw = t.query({}, {&s0}), war = t.query({}, {&s2});
    EXPECT_EQ(raw.producer, 0);
    EXPECT_EQ(raw.kind, 'R');
    EXPECT_EQ(waw.kind, 'W');
    EXPECT_EQ(war.producer, 0);
    EXPECT_EQ(war.kind, 'A');
    t.record(1, 50, {}, {&s1});  // finishes before instruction 0: readers of s1 wait for it alone
    Dependency d = t.query({&s1}, {});
    EXPECT_EQ(d.producer, 1);
    EXPECT_EQ(d.ready_ns, 50);
  }
}

TEST_F(DependencyTrackerTest, OneSharedByteIsADependencyOfEachKind) {
  // a: fp32 [128, 8] at bytes 0..31; b: uint8 [128, 4] at bytes 31..34 (shares byte 31); c: at 32..35.
  isa::Program p;
  p.allocations.push_back(on_chip("a", MemorySpace::sbuf, 128, 8, 0));
  p.allocations.push_back(on_chip_typed("b", MemorySpace::sbuf, DType::uint8, 128, 4, 31));
  p.allocations.push_back(on_chip_typed("c", MemorySpace::sbuf, DType::uint8, 128, 4, 32));
  AccessPattern a = tile(0, MemorySpace::sbuf, 0, 128, 0, 8);
  AccessPattern b = typed(tile(1, MemorySpace::sbuf, 0, 128, 0, 4), DType::uint8);
  AccessPattern c = typed(tile(2, MemorySpace::sbuf, 0, 128, 0, 4), DType::uint8);
  {
    DependencyTracker t(config, p);
    t.record(0, 10, {}, {&a});
    EXPECT_EQ(t.query({&b}, {}).kind, 'R');
    EXPECT_EQ(t.query({}, {&b}).kind, 'W');
    EXPECT_EQ(t.query({&c}, {&c}).producer, -1);
  }
  {
    DependencyTracker t(config, p);
    t.record(0, 10, {&a}, {});
    EXPECT_EQ(t.query({}, {&b}).kind, 'A');
    EXPECT_EQ(t.query({&b}, {}).producer, -1);
    EXPECT_EQ(t.query({}, {&c}).producer, -1);
  }
  // The last byte of one element and the first of the next, through patterns of another dtype: the
  // bf16 element 1 of an fp32 allocation is bytes 2..3 (in fp32 element 0), element 2 is bytes 4..5.
  DependencyTracker t(config, p);
  AccessPattern first = tile(0, MemorySpace::sbuf, 0, 128, 0, 1);
  t.record(0, 10, {}, {&first});
  EXPECT_EQ(reading(t, typed(tile(0, MemorySpace::sbuf, 0, 128, 1, 1), DType::bf16)).producer, 0);
  EXPECT_EQ(reading(t, typed(tile(0, MemorySpace::sbuf, 0, 128, 2, 1), DType::bf16)).producer, -1);
}

TEST_F(DependencyTrackerTest, InterleavedStridedPatterns) {
  DependencyTracker t(config, program);
  // Blocks of 4 elements every 8 (elements 0..3, 8..11, ...) and the blocks in between.
  AccessPattern blocks = tile(0, MemorySpace::sbuf, 0, 128, 0, 4);
  blocks.num_free_dims = 2;
  blocks.free[0] = ApDim{8, 16};
  blocks.free[1] = ApDim{1, 4};
  AccessPattern between = blocks, shifted = blocks;
  between.offset = 4;
  shifted.offset = 3;  // elements 3..6, 11..14, ...: element 3 is in a block
  t.record(0, 10, {}, {&blocks});
  EXPECT_EQ(t.query({&between}, {&between}).producer, -1);
  EXPECT_EQ(t.query({&shifted}, {}).producer, 0);
  // The odd elements walked backwards against the even ones.
  AccessPattern even = tile(1, MemorySpace::sbuf, 0, 128, 0, 256, 2);
  AccessPattern odd_down = tile(1, MemorySpace::sbuf, 0, 128, 511, 256, -2);
  t.record(1, 20, {&even}, {});
  EXPECT_EQ(t.query({}, {&odd_down}).producer, -1);
  EXPECT_EQ(writing(t, tile(1, MemorySpace::sbuf, 0, 128, 510, 1)).kind, 'A');
  // Every other row of an HBM tensor, and the rows in between.
  AccessPattern even_rows = hbm_block(3, 4096, 0, 32, 0, 4096), odd_rows = hbm_block(3, 4096, 1, 32, 0, 4096);
  even_rows.partition.stride = odd_rows.partition.stride = 2 * 4096;
  t.record(2, 30, {}, {&even_rows});
  EXPECT_EQ(t.query({&odd_rows}, {&odd_rows}).producer, -1);
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 62, 1, 4095, 1)), 2);
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 63, 1, 0, 4096)), -1);
}

TEST_F(DependencyTrackerTest, PartitionsAreExact) {
  // Allocations "lo" (partitions 0..63) and "hi" (64..127) at the same bytes, "alias" over lo.
  isa::Program p;
  p.allocations.push_back(on_chip("lo", MemorySpace::sbuf, 64, 64, 1024));
  p.allocations.push_back(on_chip("hi", MemorySpace::sbuf, 64, 64, 1024, 64));
  p.allocations.push_back(on_chip("alias", MemorySpace::sbuf, 64, 64, 1024));
  DependencyTracker t(config, p);
  AccessPattern first8 = tile(0, MemorySpace::sbuf, 0, 8, 0, 64);
  t.record(0, 10, {}, {&first8});
  EXPECT_EQ(read_producer(t, tile(0, MemorySpace::sbuf, 8, 8, 0, 64)), -1);  // partitions 8..15, one quadrant
  EXPECT_EQ(read_producer(t, tile(0, MemorySpace::sbuf, 7, 2, 0, 64)), 0);   // partitions 7..8
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 0, 64, 0, 64)), -1);  // the other half
  EXPECT_EQ(read_producer(t, tile(2, MemorySpace::sbuf, 0, 1, 63, 1)), 0);   // the same bytes of partition 0
  // Partitions 60..67 straddle lo and hi.
  AccessPattern straddle = tile(0, MemorySpace::sbuf, 60, 4, 0, 64), straddle_hi = tile(1, MemorySpace::sbuf, 0, 4, 0, 64);
  t.record(1, 20, {}, {&straddle, &straddle_hi});
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 2, 1, 5, 1)), 1);
  EXPECT_EQ(read_producer(t, tile(1, MemorySpace::sbuf, 4, 60, 0, 64)), -1);
  EXPECT_EQ(read_producer(t, tile(0, MemorySpace::sbuf, 8, 52, 0, 64)), -1);
}

TEST_F(DependencyTrackerTest, HbmRowAndColumnSlices) {
  isa::Program p = program;
  p.allocations.push_back(hbm("narrow", 1024, 16));  // 6: 64-byte rows
  Allocation flat;
  flat.name = "flat";
  flat.space = MemorySpace::hbm;
  flat.dtype = DType::bf16;
  flat.shape = {1u << 21};  // 7: one 4 MiB row
  p.allocations.push_back(flat);
  DependencyTracker t(config, p);
  // Columns 0..7 of every row of x (16 KiB rows), then columns 8..15; rows 0..31, then rows 32..63.
  AccessPattern left = hbm_block(3, 4096, 0, 64, 0, 8);
  t.record(0, 10, {}, {&left});
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 0, 64, 8, 8)), -1);
  EXPECT_EQ(read_producer(t, hbm_block(3, 4096, 63, 1, 7, 1)), 0);
  AccessPattern top = hbm_block(4, 4096, 0, 32, 0, 4096);
  t.record(1, 20, {}, {&top});
  EXPECT_EQ(read_producer(t, hbm_block(4, 4096, 32, 32, 0, 4096)), -1);
  EXPECT_EQ(read_producer(t, hbm_block(4, 4096, 31, 1, 4095, 1)), 1);
  // Column 0 of every 64-byte row, then column 1.
  AccessPattern col0 = hbm_block(6, 16, 0, 1024, 0, 1), col1 = hbm_block(6, 16, 0, 1024, 1, 1);
  t.record(2, 30, {}, {&col0});
  EXPECT_EQ(t.query({&col1}, {&col1}).producer, -1);
  EXPECT_EQ(read_producer(t, hbm_block(6, 16, 5, 1, 0, 16)), 2);
  // A 1-row tensor in 512-element chunks of each 16384-element stretch (AdamW's pattern): chunk 0,
  // then chunk 1; one element more overlaps.
  AccessPattern chunk0 = typed(hbm_block(7, 16384, 0, 128, 0, 512), DType::bf16);
  AccessPattern chunk1 = typed(hbm_block(7, 16384, 0, 128, 512, 512), DType::bf16);
  t.record(3, 40, {}, {&chunk0});
  EXPECT_EQ(t.query({}, {&chunk1}).producer, -1);
  EXPECT_EQ(writing(t, typed(hbm_block(7, 16384, 0, 128, 511, 512), DType::bf16)).kind, 'W');
}

TEST_F(DependencyTrackerTest, PsumSlicesOfOneBank) {
  DependencyTracker t(config, program);
  AccessPattern left = tile(2, MemorySpace::psum, 0, 128, 0, 256), right = tile(2, MemorySpace::psum, 0, 128, 256, 256);
  AccessPattern bank = tile(2, MemorySpace::psum, 0, 128, 0, 512);
  t.record(0, 10, {}, {&left});
  EXPECT_EQ(t.query({&right}, {&right}).producer, -1);
  t.record(1, 20, {}, {&right});
  Dependency whole = t.query({&bank}, {});
  EXPECT_EQ(whole.producer, 1);
  EXPECT_EQ(whole.ready_ns, 20);
  Dependency half = t.query({&left}, {});
  EXPECT_EQ(half.producer, 0);
  EXPECT_EQ(half.ready_ns, 10);
  // An accumulating matmul queries without its destination but records it: later readers wait.
  AccessPattern w = tile(0, MemorySpace::sbuf, 0, 128, 0, 128);
  EXPECT_EQ(t.query({&w}, {}).producer, -1);
  t.record(2, 30, {&w}, {&left});
  EXPECT_EQ(t.query({&left}, {}).producer, 2);
  EXPECT_EQ(t.query({&right}, {}).producer, 1);
}

TEST_F(DependencyTrackerTest, EachByteKeepsItsLastWriterAndTheReadsSince) {
  isa::Program p;
  p.allocations.push_back(on_chip_typed("m", MemorySpace::sbuf, DType::uint8, 128, 64, 0));
  DependencyTracker t(config, p);
  auto bytes = [](int64_t first, uint32_t count) { return typed(tile(0, MemorySpace::sbuf, 0, 128, first, count), DType::uint8); };
  AccessPattern a = bytes(0, 32), b = bytes(32, 32), c = bytes(16, 32);
  t.record(0, 100, {}, {&a});
  t.record(1, 50, {}, {&b});  // recorded later, finishes earlier: bytes 0..31 still wait for instruction 0
  EXPECT_EQ(read_producer(t, bytes(0, 32)), 0);
  EXPECT_EQ(reading(t, bytes(0, 32)).ready_ns, 100);
  EXPECT_EQ(read_producer(t, bytes(32, 32)), 1);
  t.record(2, 200, {}, {&c});  // overwrites 16..47
  EXPECT_EQ(read_producer(t, bytes(0, 16)), 0);
  EXPECT_EQ(read_producer(t, bytes(40, 24)), 2);
  EXPECT_EQ(read_producer(t, bytes(48, 16)), 1);
  read_by(t, 3, 300, bytes(0, 64));
  read_by(t, 4, 400, bytes(0, 16));
  read_by(t, 5, 250, bytes(0, 8));  // finishes before instruction 4's read of the same bytes
  Dependency d = writing(t, bytes(32, 32));
  EXPECT_EQ(d.producer, 3);
  EXPECT_EQ(d.kind, 'A');
  EXPECT_EQ(writing(t, bytes(0, 8)).producer, 4);
  EXPECT_EQ(writing(t, bytes(8, 8)).producer, 4);
  write_by(t, 6, 500, bytes(0, 12));  // a write clears the reads of its bytes only
  EXPECT_EQ(writing(t, bytes(0, 12)).kind, 'W');
  EXPECT_EQ(writing(t, bytes(12, 4)).producer, 4);
  EXPECT_EQ(writing(t, bytes(16, 8)).producer, 3);
}

// A byte-by-byte model of the same rules: each byte keeps its last write and the latest-finishing
// read since; a read waits for the writes of its bytes, a write also for their reads.
class ByteModel {
 public:
  explicit ByteModel(const isa::Program& p) : m_program(p) {}
  Dependency query(const std::vector<const AccessPattern*>& reads, const std::vector<const AccessPattern*>& writes) {
    Dependency dep;
    m_kinds.clear();
    auto consider = [&](double done, int64_t producer, char kind) {
      if (producer < 0) return;
      if (done > dep.ready_ns || dep.producer < 0) {
        dep = Dependency{done, producer, kind};
        m_kinds.clear();
      }
      if (done == dep.ready_ns && producer == dep.producer) m_kinds.insert(kind);
    };
    for (const AccessPattern* ap : reads) each_byte(*ap, [&](State& s) { consider(s.write_ns, s.writer, 'R'); });
    for (const AccessPattern* ap : writes) {
      each_byte(*ap, [&](State& s) {
        consider(s.write_ns, s.writer, 'W');
        consider(s.read_ns, s.reader, 'A');
      });
    }
    return dep;
  }
  // The kinds the last query's producer was found with (an instruction that read some bytes and
  // wrote others is both a writer and a reader: either kind describes the wait).
  const std::set<char>& kinds() const { return m_kinds; }
  void record(int64_t index, double done, const std::vector<const AccessPattern*>& reads,
              const std::vector<const AccessPattern*>& writes) {
    for (const AccessPattern* ap : reads) {
      each_byte(*ap, [&](State& s) {
        if (s.reader < 0 || done > s.read_ns) s = State{s.write_ns, s.writer, done, index};
      });
    }
    for (const AccessPattern* ap : writes) each_byte(*ap, [&](State& s) { s = State{done, index, 0, -1}; });
  }

 private:
  struct State {
    double write_ns = 0;
    int64_t writer = -1;
    double read_ns = 0;
    int64_t reader = -1;
  };
  template <class F>
  void each_byte(const AccessPattern& ap, F&& f) {
    const Allocation& a = m_program.allocation(ap);
    const int64_t esize = dtype_size_bytes(ap.dtype);
    std::vector<int64_t> offsets{ap.offset};
    for (int d = 0; d < ap.num_free_dims; ++d) {
      std::vector<int64_t> next;
      for (int64_t o : offsets) {
        for (int64_t i = 0; i < ap.free[d].size; ++i) next.push_back(o + i * ap.free[d].stride);
      }
      offsets.swap(next);
    }
    if (a.space == MemorySpace::hbm) {
      for (int64_t r = 0; r < ap.partition.size; ++r) {
        for (int64_t o : offsets) {
          for (int64_t b = 0; b < esize; ++b) f(m_state[key(ap.allocation, 0, (o + r * ap.partition.stride) * esize + b)]);
        }
      }
      return;
    }
    const uint32_t memory = a.space == MemorySpace::psum ? 0xffff : 0xfffe;
    for (uint32_t q = 0; q < ap.partitions(); ++q) {
      for (int64_t o : offsets) {
        for (int64_t b = 0; b < esize; ++b) {
          f(m_state[key(memory, a.base_partition + ap.start_partition + q, int64_t(a.base_byte) + o * esize + b)]);
        }
      }
    }
  }
  const isa::Program& m_program;
  // (HBM tensor or 0xfffe SBUF / 0xffff PSUM, partition, byte)
  static uint64_t key(uint64_t memory, uint64_t partition, int64_t byte) {
    return memory << 48 | partition << 32 | uint64_t(byte);
  }
  std::unordered_map<uint64_t, State> m_state;
  std::set<char> m_kinds;
};

TEST_F(DependencyTrackerTest, MatchesAByteByByteModelOnRandomPatterns) {
  // Overlapping SBUF allocations (aliasing placements), a PSUM one, HBM tensors with rows (a row
  // not a multiple of 256 bytes), few rows and one row; random strided patterns of random dtypes,
  // reads and writes, finishing times out of order, queries with and without the destination.
  isa::Program p;
  p.allocations.push_back(on_chip_typed("s0", MemorySpace::sbuf, DType::fp32, 128, 96, 100));
  p.allocations.push_back(on_chip_typed("s1", MemorySpace::sbuf, DType::bf16, 40, 300, 300, 50));
  p.allocations.push_back(on_chip_typed("s2", MemorySpace::sbuf, DType::uint8, 128, 700, 0));
  p.allocations.push_back(on_chip_typed("acc", MemorySpace::psum, DType::fp32, 128, 512, 1024));
  Allocation h;
  h.space = MemorySpace::hbm;
  h.name = "rows";
  h.dtype = DType::bf16;
  h.shape = {40, 300};  // 600-byte rows
  p.allocations.push_back(h);
  h.name = "few";
  h.dtype = DType::fp32;
  h.shape = {3, 1000};
  p.allocations.push_back(h);
  h.name = "line";
  h.dtype = DType::bf16;
  h.shape = {5000};
  p.allocations.push_back(h);
  h.name = "tall";  // 256-byte rows across blocks of 128 rows
  h.shape = {300, 128};
  p.allocations.push_back(h);
  // A wider on-chip memory too, so that patterns cross blocks of 128 partitions.
  HardwareConfig wide = config;
  wide.core.sbuf.partitions = wide.core.psum.partitions = 200;
  p.allocations.push_back(on_chip_typed("w0", MemorySpace::sbuf, DType::bf16, 200, 100, 50));
  p.allocations.push_back(on_chip_typed("w1", MemorySpace::sbuf, DType::fp32, 70, 40, 0, 100));

  std::mt19937_64 rng(1234);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const DType dtypes[] = {DType::fp32, DType::bf16, DType::uint8};
  // A random pattern inside allocation `index` (bytes checked against the allocation's size).
  auto random_pattern = [&](uint32_t index) {
    const Allocation& a = p.allocations[index];
    const bool hbm_tensor = a.space == MemorySpace::hbm;
    const int64_t bytes = int64_t((hbm_tensor ? a.total_elements() : a.elements_per_partition()) * dtype_size_bytes(a.dtype));
    while (true) {
      AccessPattern ap;
      ap.space = a.space;
      ap.allocation = index;
      ap.dtype = dtypes[uniform(0, 2)];
      const int64_t esize = dtype_size_bytes(ap.dtype), elements = bytes / esize;
      if (hbm_tensor) {
        ap.partition = ApDim{uniform(-2 * int64_t(a.shape.back()), 2 * int64_t(a.shape.back())), uint32_t(uniform(1, 6))};
      } else {
        ap.start_partition = uint32_t(uniform(0, a.partitions() - 1));
        ap.partition = ApDim{1, uint32_t(uniform(1, a.partitions() - ap.start_partition))};
      }
      ap.num_free_dims = uint8_t(uniform(0, 3));
      for (int d = 0; d < ap.num_free_dims; ++d) {
        const int64_t choice = uniform(0, 3);
        ap.free[d] = ApDim{choice == 0 ? 1 : uniform(-40, 40), uint32_t(uniform(1, choice == 0 ? 64 : 6))};
      }
      int64_t low = 0, high = 0;
      for (int d = 0; d < ap.num_free_dims; ++d) {
        (ap.free[d].stride < 0 ? low : high) += ap.free[d].stride * (ap.free[d].size - 1);
      }
      if (hbm_tensor) (ap.partition.stride < 0 ? low : high) += ap.partition.stride * (ap.partition.size - 1);
      if (high - low >= elements) continue;
      ap.offset = uniform(-low, elements - 1 - high);
      return ap;
    }
  };

  for (int round = 0; round < 8; ++round) {
    // Even rounds on the 128-partition config (without the 200-partition allocations), odd ones on 200.
    const bool wide_round = round % 2 == 1;
    const uint32_t allocations = uint32_t(p.allocations.size()) - (wide_round ? 0 : 2);
    DependencyTracker t(wide_round ? wide : config, p);
    ByteModel model(p);
    std::vector<AccessPattern> patterns(4);
    for (int i = 0; i < 400; ++i) {
      // Half the time one allocation (and its aliases), so that patterns collide often.
      const uint32_t focus = uint32_t(uniform(0, allocations - 1));
      for (AccessPattern& ap : patterns) ap = random_pattern(uniform(0, 1) ? focus : uint32_t(uniform(0, allocations - 1)));
      std::vector<const AccessPattern*> reads, writes;
      for (int k = 0, n = int(uniform(0, 2)); k < n; ++k) reads.push_back(&patterns[k]);
      for (int k = 0, n = int(uniform(0, 2)); k < n; ++k) writes.push_back(&patterns[2 + k]);
      if (!reads.empty() && uniform(0, 4) == 0) writes.push_back(reads[0]);  // an in-out operand
      const double done = double(uniform(0, 1 << 20)) + i * 1e-3;  // out of order, never tied
      const int mode = int(uniform(0, 5));
      std::vector<const AccessPattern*> queried = writes;
      if (mode == 0 && !queried.empty()) queried.pop_back();  // an accumulating destination
      if (mode != 1) {
        Dependency expected = model.query(reads, queried), actual = t.query(reads, queried);
        ASSERT_EQ(actual.producer, expected.producer) << "round " << round << " instruction " << i;
        ASSERT_EQ(actual.ready_ns, expected.ready_ns) << "round " << round << " instruction " << i;
        if (expected.producer >= 0) {
          ASSERT_EQ(model.kinds().count(actual.kind), 1u) << "round " << round << " instruction " << i;
        }
      }
      t.record(i, done, reads, writes);
      model.record(i, done, reads, writes);
    }
  }
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
