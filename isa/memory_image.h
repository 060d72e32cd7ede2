// SBUF and PSUM images for the functional interpreter, and a pool that recycles them across simulations.
// A fresh image is zero pages the OS maps on first touch, so a core's 24 MiB of SBUF costs only what a kernel
// writes. The PyTorch device simulates every op afresh, and mapping fresh pages each time made page faults most
// of a small op's host time; a recycled image keeps its pages and is zeroed again where it was written, so a
// simulation still starts from all-zero memories (or, for a program shown to read only what it wrote itself,
// from whatever it cannot see).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace trnsim::isa {

// One memory of partitions x bytes_per_partition, partition-major, reading zero wherever it was not written.
class MemoryImage {
 public:
  MemoryImage(uint32_t partitions, uint64_t bytes_per_partition);
  ~MemoryImage();
  MemoryImage(const MemoryImage&) = delete;
  MemoryImage& operator=(const MemoryImage&) = delete;

  uint8_t* data() const { return m_data; }
  uint32_t partitions() const { return m_partitions; }
  uint64_t bytes_per_partition() const { return m_bytes_per_partition; }
  // Records that bytes [first_byte, end_byte) of partitions [first_partition, first_partition + count) may have
  // been written (callers pass a superset; bounds are the caller's to check).
  void mark_written(uint32_t first_partition, uint32_t count, uint64_t first_byte, uint64_t end_byte);
  // Zeroes everything written since the last clear.
  void clear();

 private:
  uint8_t* m_data = nullptr;
  uint32_t m_partitions = 0;
  uint64_t m_bytes_per_partition = 0;
  // Per partition, the written byte range [low, high); low > high when untouched.
  std::vector<uint64_t> m_written_low, m_written_high;
};

// Idle images by shape. Thread-safe; an image still in use when the pool goes away is freed by its last user.
class MemoryImagePool {
 public:
  // At most `max_idle_images` idle images are kept (each holds the pages its users wrote).
  explicit MemoryImagePool(size_t max_idle_images = 8);
  // An image reading zero everywhere, or with `zeroed` false one that may still hold what its last users wrote
  // (for a program that reads only what it wrote itself: zeroing a large image costs as much as copying it).
  std::shared_ptr<MemoryImage> acquire(uint32_t partitions, uint64_t bytes_per_partition, bool zeroed = true);

 private:
  struct Idle {
    std::mutex mutex;
    size_t max_images;
    std::vector<std::unique_ptr<MemoryImage>> images;
  };
  std::shared_ptr<Idle> m_idle;
};

}  // namespace trnsim::isa
