// The device's random-number generator. Its state is what CUDA's Philox generator exposes, (seed, offset) in
// 16 bytes, because PyTorch's own code reads and moves it as such: DTensor's RNG tracker sets each shard's
// offset before a random op and every rank's offset past the whole tensor after it. Its numbers come from the
// CPU's algorithm (mt19937 with PyTorch's transforms), so torch.manual_seed(s) gives the device the CPU's values:
//
//   - after a seed (offset 0) the host engine is mt19937(seed): the CPU's stream, draw for draw;
//   - each random op draws on, and moves the offset past its elements (rounded up to 4, as Philox's does);
//   - a state set at another offset, and a state read (get_state) after draws, starts the engine again from
//     mt19937(mix(seed, offset)), so a state read and later set again gives the same numbers after it, in
//     this process or another.
//
// So the device draws the CPU's values from a seed until its state is read or set at a non-zero offset (a
// fork_rng, activation checkpointing or DTensor region); after that it draws its own stream, which is a pure
// function of (seed, offset) and the ops drawn since.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>

namespace trnsim::frontend {

class SimGenerator final : public c10::GeneratorImpl {
 public:
  static constexpr int64_t kStateBytes = 16;  // seed (uint64), offset (uint64), little-endian

  explicit SimGenerator(c10::DeviceIndex index);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator the next op draws from (hold this generator's mutex); then advance() by its elements.
  const at::Generator& host_generator() { return m_host; }
  void advance(uint64_t elements);

 private:
  SimGenerator* clone_impl() const override;
  // m_host := the fresh engine of (m_seed, m_offset).
  void restart_host() const;

  uint64_t m_seed = 0;
  uint64_t m_offset = 0;
  // Mutable: reading the state restarts the host engine at the offset read (see above), which changes no
  // number the state names.
  mutable at::Generator m_host;
  mutable bool m_host_at_offset = true;  // no draw since restart_host (get_state need not restart it)
};

}  // namespace trnsim::frontend
