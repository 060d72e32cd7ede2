#include "isa/memory_image.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

namespace trnsim::isa {

MemoryImage::MemoryImage(uint32_t partitions, uint64_t bytes_per_partition)
    : m_partitions(partitions),
      m_bytes_per_partition(bytes_per_partition),
      m_written_low(partitions, std::numeric_limits<uint64_t>::max()),
      m_written_high(partitions, 0) {
  const size_t bytes = size_t(partitions) * bytes_per_partition;
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  m_data = static_cast<uint8_t*>(p);
}

MemoryImage::~MemoryImage() {
  if (m_data != nullptr) ::munmap(m_data, size_t(m_partitions) * m_bytes_per_partition);
}

void MemoryImage::mark_written(uint32_t first_partition, uint32_t count, uint64_t first_byte, uint64_t end_byte) {
  const uint32_t end_partition = std::min(m_partitions, first_partition + count);
  end_byte = std::min(end_byte, m_bytes_per_partition);
  for (uint32_t p = first_partition; p < end_partition; ++p) {
    m_written_low[p] = std::min(m_written_low[p], first_byte);
    m_written_high[p] = std::max(m_written_high[p], end_byte);
  }
}

void MemoryImage::clear() {
  for (uint32_t p = 0; p < m_partitions; ++p) {
    if (m_written_low[p] < m_written_high[p]) {
      std::memset(m_data + size_t(p) * m_bytes_per_partition + m_written_low[p], 0, m_written_high[p] - m_written_low[p]);
    }
    m_written_low[p] = std::numeric_limits<uint64_t>::max();
    m_written_high[p] = 0;
  }
}

MemoryImagePool::MemoryImagePool(size_t max_idle_images) : m_idle(std::make_shared<Idle>()) {
  m_idle->max_images = max_idle_images;
}

std::shared_ptr<MemoryImage> MemoryImagePool::acquire(uint32_t partitions, uint64_t bytes_per_partition, bool zeroed) {
  std::unique_ptr<MemoryImage> image;
  {
    std::lock_guard<std::mutex> lock(m_idle->mutex);
    auto& images = m_idle->images;
    auto it = std::find_if(images.begin(), images.end(), [&](const std::unique_ptr<MemoryImage>& m) {
      return m->partitions() == partitions && m->bytes_per_partition() == bytes_per_partition;
    });
    if (it != images.end()) {
      image = std::move(*it);
      images.erase(it);
    }
  }
  if (!image) image = std::make_unique<MemoryImage>(partitions, bytes_per_partition);
  // Zeroed where written when a user needs zeros: an image keeps recording what was written across users, so
  // skipping the clear for one user leaves it to the next that needs it.
  if (zeroed) image->clear();
  // A pool gone by the time the image comes back means the image is just freed.
  std::weak_ptr<Idle> idle = m_idle;
  return std::shared_ptr<MemoryImage>(image.release(), [idle](MemoryImage* memory) {
    std::unique_ptr<MemoryImage> owned(memory);
    std::shared_ptr<Idle> pool = idle.lock();
    if (!pool) return;
    std::lock_guard<std::mutex> lock(pool->mutex);
    if (pool->images.size() < pool->max_images) pool->images.push_back(std::move(owned));
  });
}

}  // namespace trnsim::isa
