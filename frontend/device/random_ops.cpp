// Random ops of the device (uniform_, normal_, bernoulli_, random_, exponential_, dropout) from the
// per-device default generators (guard.cpp), and the generator API of neuron_device.h.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/device/device_internal.h"
#include "frontend/kernel_executor.h"
#include "frontend/lowering_support.h"
#include "frontend/device/sim_generator.h"
#include "frontend/neuron_device.h"
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {

// ---------------------------------------------------------------------------------------------
// The device generator (sim_generator.h).

namespace {

// SplitMix64's finaliser: a bijection that spreads nearby seeds and offsets over the 64 bits.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

SimGenerator::SimGenerator(c10::DeviceIndex index)
    : c10::GeneratorImpl(c10::Device(kNeuron, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      m_host(at::make_generator<at::CPUGeneratorImpl>()) {
  set_current_seed(c10::default_rng_seed_val);
}

void SimGenerator::set_current_seed(uint64_t seed) {
  m_seed = seed;
  m_offset = 0;
  restart_host();
}

void SimGenerator::set_offset(uint64_t offset) {
  m_offset = offset;
  restart_host();
}

uint64_t SimGenerator::get_offset() const { return m_offset; }
uint64_t SimGenerator::current_seed() const { return m_seed; }

uint64_t SimGenerator::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom();
  set_current_seed(random);
  return random;
}

void SimGenerator::restart_host() const {
  // Offset 0 is the seed's own stream, the CPU's; any other offset a stream of its own.
  m_host.set_current_seed(m_offset == 0 ? m_seed : mix64(m_seed ^ mix64(m_offset)));
  m_host_at_offset = true;
}

void SimGenerator::advance(uint64_t elements) {
  m_offset += (elements + 3) / 4 * 4;
  m_host_at_offset = false;  // the engine has drawn on: it is no longer the offset's fresh stream
}

void SimGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && new_state.numel() == kStateBytes &&
                  new_state.is_contiguous(),
              "a neuron generator's state is ", kStateBytes, " uint8 bytes (seed, offset; as CUDA's), got ",
              new_state.numel(), " elements of ", new_state.dtype().name());
  uint64_t seed_and_offset[2];
  std::memcpy(seed_and_offset, new_state.data(), sizeof seed_and_offset);
  m_seed = seed_and_offset[0];
  m_offset = seed_and_offset[1];
  restart_host();
}

c10::intrusive_ptr<c10::TensorImpl> SimGenerator::get_state() const {
  if (!m_host_at_offset) restart_host();  // so that setting this state again gives the numbers that follow it now
  at::Tensor state = at::empty({kStateBytes}, at::TensorOptions().dtype(at::kByte));
  const uint64_t seed_and_offset[2] = {m_seed, m_offset};
  std::memcpy(state.data_ptr(), seed_and_offset, sizeof seed_and_offset);
  return state.getIntrusivePtr();
}

SimGenerator* SimGenerator::clone_impl() const {
  auto* copy = new SimGenerator(device().index());
  copy->m_seed = m_seed;
  copy->m_offset = m_offset;
  copy->m_host = m_host.clone();
  copy->m_host_at_offset = m_host_at_offset;
  return copy;
}

namespace {

using kernels::UnaryOp;

// ---------------------------------------------------------------------------------------------
// Random numbers from the device generators: values as sim_generator.h says (the CPU's from a seed). The time: one element-wise pass over the output on the device (a unary kernel, in place); the
// ISA has no rng instruction yet, so the generation itself is not modelled beyond that pass.

void charge_elementwise_pass(const at::Tensor& self, const std::string& op) {
  const std::optional<DType> dt = sim_dtype(self.scalar_type());
  if (!dt || self.numel() == 0 || !self.is_contiguous()) return;  // integer / bool / strided: not timed
  kernels::UnarySpec spec;
  spec.shape = {self.numel()};
  spec.op = UnaryOp::copy;
  spec.input_dtype = spec.output_dtype = *dt;
  execute_kernel(self.device().index(), "rng|" + std::to_string(self.numel()) + "|" + std::string(dtype_name(*dt)),
                 kernels::invocation(kernels::unary_program, spec), {buffer("x", self)}, {buffer("y", self)},
                 record_for(op, {self}, self.scalar_type()));
}

template <typename Fill>
at::Tensor& with_device_generator(at::Tensor& self, const std::optional<at::Generator>& generator, const char* op,
                                  Fill&& fill) {
  at::Generator gen = generator && generator->defined() ? *generator : default_generator(self.device().index());
  TORCH_CHECK(gen.device().type() == kNeuron, op, ": expected a neuron generator, got one for ", gen.device());
  auto* device_generator = dynamic_cast<SimGenerator*>(gen.unsafeGetGeneratorImpl());
  TORCH_CHECK(device_generator, op, ": the neuron generator is not trnsim's");
  if (self.numel() == 0) return self;
  // Timing only: no numbers are drawn (the generator does not advance), the pass is still timed.
  if (values_enabled()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor host = host_alias(self);
    fill(host, device_generator->host_generator());
    device_generator->advance(uint64_t(self.numel()));
  }
  charge_elementwise_pass(self, op);
  return self;
}

at::Tensor& uniform(at::Tensor& self, double from, double to, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "uniform_",
                               [&](at::Tensor& h, const at::Generator& g) { h.uniform_(from, to, g); });
}

at::Tensor& normal(at::Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "normal_",
                               [&](at::Tensor& h, const at::Generator& g) { h.normal_(mean, std, g); });
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "bernoulli_",
                               [&](at::Tensor& h, const at::Generator& g) { h.bernoulli_(p, g); });
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "bernoulli_",
                               [&](at::Tensor& h, const at::Generator& g) { h.bernoulli_(host_alias(p), g); });
}

at::Tensor& random_full(at::Tensor& self, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "random_",
                               [&](at::Tensor& h, const at::Generator& g) { h.random_(g); });
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "random_",
                               [&](at::Tensor& h, const at::Generator& g) { h.random_(to, g); });
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "random_",
                               [&](at::Tensor& h, const at::Generator& g) { h.random_(from, to, g); });
}

at::Tensor& exponential(at::Tensor& self, double lambda, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "exponential_",
                               [&](at::Tensor& h, const at::Generator& g) { h.exponential_(lambda, g); });
}

// Dropout as the CPU computes it (a bool keep-mask drawn with bernoulli(1 - p), output = input *
// mask / (1 - p)), the mask from the device generator and the arithmetic as device kernels.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  c10::DeviceGuard guard(input.device());
  if (input.numel() == 0 || !train.value_or(true) || p == 0) {
    return {input.clone(), at::ones(input.sizes(), input.options().dtype(at::kBool))};
  }
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  bernoulli_float(mask, 1.0 - p, std::nullopt);
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  at::Tensor zero = at::scalar_tensor(0, input.options().device(at::kCPU));
  return {at::where(mask, input * scale, zero), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  c10::DeviceGuard guard(grad.device());
  at::Tensor zero = at::scalar_tensor(0, grad.options().device(at::kCPU));
  return at::where(mask, grad * scale, zero);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", uniform);
  m.impl("normal_", normal);
  m.impl("bernoulli_.float", bernoulli_float);
  m.impl("bernoulli_.Tensor", bernoulli_tensor);
  m.impl("random_", random_full);
  m.impl("random_.to", random_to);
  m.impl("random_.from", random_from);
  m.impl("exponential_", exponential);
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
}

}  // namespace

void manual_seed(int device, uint64_t seed) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

uint64_t initial_seed(int device) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.current_seed();
}

std::vector<uint8_t> get_rng_state(int device) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  const at::Tensor state = gen.get_state();
  const auto* bytes = state.const_data_ptr<uint8_t>();
  return std::vector<uint8_t>(bytes, bytes + state.numel());
}

void set_rng_state(int device, const std::vector<uint8_t>& state) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  at::Tensor t = at::empty({static_cast<int64_t>(state.size())}, at::kByte);
  std::memcpy(t.data_ptr(), state.data(), state.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
}

}  // namespace trnsim::frontend
