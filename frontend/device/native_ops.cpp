// Native ops of the device: factories, copies (host <-> device over the host link, within a device
// as copy kernels), fill / zero, views, resize / set, the scalar read. Device memory is host
// memory, so a device tensor's bytes can be viewed as a CPU tensor without a copy (host_alias).
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
#include "frontend/neuron_device.h"
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>

#include <stdexcept>

#include "kernels/data_movement.h"
#include "kernels/kernel_common.h"
#include "kernels/elementwise.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {

using kernels::UnaryOp;
using kernels::UnarySpec;

// ---------------------------------------------------------------------------------------------
// Native ops: factories, copies, fill/zero, views, resize/set, scalar read. Device memory is host memory,
// so a device tensor's bytes can be viewed as a CPU tensor without a copy ("host alias").


void check_options(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided, "neuron supports only strided tensors");
  TORCH_CHECK(!pin_memory.has_value() || !*pin_memory, "pin_memory is for host tensors, not neuron tensors");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  c10::DeviceGuard guard(device.value_or(c10::Device(kNeuron, current_device_index())));
  return at::detail::empty_generic(size, hbm_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  c10::DeviceGuard guard(device.value_or(c10::Device(kNeuron, current_device_index())));
  return at::detail::empty_strided_generic(size, stride, hbm_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// A non-dense view (a slice, a strided window) made contiguous: one DMA pattern over the storage span
// the view reaches, same dtype only.
bool strided_copy_kernel(const at::Tensor& src, const at::Tensor& dst) {
  const std::optional<DType> dt = sim_dtype(src.scalar_type());
  if (!dt || src.scalar_type() != dst.scalar_type() || src.numel() == 0) return false;
  kernels::StridedCopySpec spec;
  spec.dtype = *dt;
  int64_t span = 1;
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (src.stride(d) < 0) return false;
    spec.shape.push_back(src.size(d));
    spec.src_strides.push_back(src.stride(d));
    span += (src.size(d) - 1) * src.stride(d);
  }
  if (span > std::numeric_limits<uint32_t>::max()) return false;
  spec.src_elements = span;
  std::ostringstream key;
  key << "strided_copy|" << dims_key(src.sizes()) << dims_key(src.strides()) << "|" << span << "|"
      << dtype_name(*dt);
  OpRecord record = record_for("copy device->device", {src}, src.scalar_type());
  const HostBuffer source{"x", src.data_ptr(), static_cast<size_t>(span), *dt};
  try {
    execute_kernel(dst.device().index(), key.str(), kernels::invocation(kernels::strided_copy_program, spec), {source},
                   {buffer("y", dst)}, std::move(record));
  } catch (const kernels::KernelUnsupported&) {
    return false;
  }
  return true;
}


// A copy within one device as a kernel (values and time from the simulator): into a contiguous
// destination from any dense source (a permutation of contiguous storage: .contiguous() after
// transpose/permute) of the same float dtype (permute kernel: DMA, or PE transposes when the
// innermost dim moves), any other strided view of the same dtype (strided DMA), or a cast between
// contiguous float tensors (unary copy kernel). Returns false for what it does not cover (integer
// dtypes, a cast with a strided source, other devices).
bool device_copy_kernel(const at::Tensor& src, const at::Tensor& dst) {
  // Between two logical cores of the chip too: the destination's DMA engines read the other core's
  // HBM (one chip in the simulated system), on the destination's clock.
  if (src.sizes() != dst.sizes()) return false;
  if (!dst.is_contiguous()) {
    // A dense destination in another dim order (e.g. `.to(dtype)` of a transposed tensor keeps its
    // strides): both viewed in the destination's storage order, where it is contiguous.
    if (!dst.is_non_overlapping_and_dense()) return false;
    std::vector<int64_t> order(static_cast<size_t>(dst.dim()));
    for (int64_t i = 0; i < dst.dim(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return dst.stride(a) > dst.stride(b); });
    const at::Tensor dst_stored = dst.permute(order);
    if (!dst_stored.is_contiguous()) return false;
    return device_copy_kernel(src.permute(order), dst_stored);
  }
  if (at::isIntegralType(src.scalar_type(), true) && sim_dtype(dst.scalar_type()) && src.is_contiguous())
    return integer_to_float_kernel(src, dst);
  const std::optional<DType> src_dt = sim_dtype(src.scalar_type()), dst_dt = sim_dtype(dst.scalar_type());
  if (!src_dt || !dst_dt) return false;
  const int64_t rank = src.dim();
  // Storage order of src: its dims from the largest stride to the smallest.
  std::vector<int64_t> order(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return src.stride(a) > src.stride(b); });
  const at::Tensor stored = rank == 0 ? src.reshape({1}) : src.permute(order);
  if (*src_dt != *dst_dt && !src.is_contiguous()) {
    // A cast from a strided source: gathered into a contiguous tensor of the source dtype first
    // (the DMA copy), then cast (two device kernels).
    at::Tensor gathered = at::empty(src.sizes(), src.options());
    if (!device_copy_kernel(src, gathered)) return false;
    return device_copy_kernel(gathered, dst);
  }
  if (!stored.is_contiguous()) return strided_copy_kernel(src, dst);
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(rank, 1)), 0);
  for (int64_t k = 0; k < rank; ++k) perm[static_cast<size_t>(order[k])] = k;  // output dim k = stored dim perm[k]
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == int64_t(k);
  const int device = dst.device().index();
  OpRecord record = record_for("copy device->device", {src}, src.scalar_type());
  try {
    if (*src_dt != *dst_dt) {
      if (!identity) return false;
      kernels::UnarySpec spec;
      spec.shape = {src.numel()};
      spec.op = UnaryOp::copy;
      spec.input_dtype = *src_dt;
      spec.output_dtype = *dst_dt;
      record.op = "cast";
      execute_kernel(device,
                     "cast|" + std::to_string(src.numel()) + "|" + std::string(dtype_name(*src_dt)) + ">" +
                         std::string(dtype_name(*dst_dt)),
                     kernels::invocation(kernels::unary_program, spec), {buffer("x", stored)}, {buffer("y", dst)},
                     std::move(record));
      return true;
    }
    kernels::PermuteSpec spec;
    spec.shape = rank == 0 ? std::vector<int64_t>{1} : dims(stored.sizes());
    spec.perm = perm;
    spec.dtype = *src_dt;
    std::ostringstream key;
    key << "copy|" << dims_key(stored.sizes()) << "|";
    for (int64_t p : perm) key << p << ",";
    key << "|" << dtype_name(*src_dt);
    execute_kernel(device, key.str(), kernels::invocation(kernels::permute_program, spec), {buffer("x", stored)},
                   {buffer("y", dst)}, std::move(record));
    return true;
  } catch (const kernels::KernelUnsupported&) {
    return false;
  }
}


// Host <-> device copies go over the host link and advance the device's simulated clock (the
// bytes that cross are the device side's: a cast happens on the host). Copies within a device
// run as kernels where device_copy_kernel covers them; others are not timed.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy between undefined tensors");
  if (self.numel() == 0 && dst.numel() == 0) return dst;
  const bool lazy_bits = self.is_conj() || self.is_neg() || dst.is_conj() || dst.is_neg();
  if (!lazy_bits && self.device().type() == kNeuron && dst.device().type() == kNeuron && device_copy_kernel(self, dst))
    return dst;
  const bool from_device = self.device().type() == kNeuron, to_device = dst.device().type() == kNeuron;
  if (!values_enabled()) {
    // Timing only: nothing is computed, so a host <-> device copy moves nothing, except that a small host->device
    // copy of a whole storage keeps its bytes and the host may read back a block that holds values: the index and
    // metadata tensors frameworks send through the device and read back (DDP's parameter check and bucket order
    // go through collectives) keep working. Kernels' outputs never hold values in this mode.
    const bool whole_storage = dst.is_non_overlapping_and_dense() && dst.nbytes() == dst.storage().nbytes();
    const bool keep = to_device && !from_device && whole_storage && dst.nbytes() <= kTimingOnlyKeptCopyBytes;
    const bool readable = from_device && !to_device && holds_values(self.data_ptr());
    TORCH_CHECK(!(from_device && !to_device) || readable, "trnsim timing-only mode: copying a neuron tensor of shape ",
                dims_key(self.sizes()), " to the ", dst.device(),
                " needs its values (.cpu(), .item(), .tolist(), .numpy(), printing), which this mode does not compute. "
                "Leave trnsim.timing_only() (or set TRNSIM_VALUES=1) to read values.");
    if (keep || readable) raw_host_alias(dst).copy_(raw_host_alias(self));
    if (to_device) keep ? mark_with_values(dst.data_ptr()) : mark_without_values(dst.data_ptr());
  } else {
    if (from_device && !to_device) {
      TORCH_CHECK(holds_values(self.data_ptr()), "trnsim: this neuron tensor (shape ", dims_key(self.sizes()),
                  ") was written in timing-only mode and holds no values; recompute it outside trnsim.timing_only()");
    }
    at::Tensor src_host = host_alias(self);
    at::Tensor dst_host = host_alias(dst);
    dst_host.copy_(src_host);
    // A copy that rewrites all of a device storage gives it values again; a partial one keeps what it had.
    if (to_device && dst.is_non_overlapping_and_dense() && dst.nbytes() == dst.storage().nbytes() &&
        (!from_device || holds_values(self.data_ptr())))
      mark_with_values(dst.data_ptr());
    else if (to_device && from_device && !holds_values(self.data_ptr()))
      mark_without_values(dst.data_ptr());
  }
  if (from_device != to_device && self.nbytes() > 0 && !in_fallback()) {
    const at::Tensor& device_side = to_device ? dst : self;
    record_host_transfer(device_side.device().index(), device_side.nbytes(),
                         record_for(to_device ? "copy host->device" : "copy device->host", {device_side}, device_side.scalar_type()));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    at::native::resize_(dst, self.sizes(), std::nullopt);
  }
  return copy_from(self, dst, false);
}

// The Conjugate / Negative keys' boxed fallbacks materialise a conj()/neg view by cloning it, and a
// clone of a device tensor is a copy_ that reaches _copy_from again: an endless recursion. copy_from
// resolves the bits itself (host_alias keeps them), so these keys go straight to it.
at::Tensor copy_from_lazy_bits(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}));
  return copy_from(self, dst, non_blocking);
}
at::Tensor copy_from_and_resize_lazy_bits(const at::Tensor& self, const at::Tensor& dst) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}));
  return copy_from_and_resize(self, dst);
}

// Module.to("neuron") keeps parameter identity (and so tied weights) only when the CPU tensor can
// take the device tensor's data in place (`param.data = moved`), as it does for CUDA: a dense
// strided tensor on the CPU or on the device can shallow-copy any other. c10's built-in rule knows
// only the in-tree dense backends and leaves PrivateUse1 to this op.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.device().is_cpu() || t.device().type() == kNeuron);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) || (dense(self) && dense(from));
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  // Timing-only mode: only a block that holds values (a small copy from the host, see copy_from) can be read.
  TORCH_CHECK(values_enabled() || holds_values(self.data_ptr()), "trnsim timing-only mode: reading a neuron tensor's ",
              "value on the host (.item(), bool(), int(), float(), a data-dependent branch) needs values, which this "
              "mode does not compute. Leave trnsim.timing_only() (or set TRNSIM_VALUES=1) to read values.");
  TORCH_CHECK(holds_values(self.data_ptr()), "trnsim: this neuron tensor was written in timing-only mode and holds no ",
              "values; recompute it outside trnsim.timing_only()");
  return at::_local_scalar_dense(raw_host_alias(self));
}

// Memory initialisation on the host (device memory is host memory); not timed. In timing-only
// mode nothing is written (the block holds no values).
at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  if (!values_enabled()) {
    mark_without_values(self.data_ptr());
    return self;
  }
  host_alias(self).fill_(value);
  if (self.is_non_overlapping_and_dense() && self.nbytes() == self.storage().nbytes()) mark_with_values(self.data_ptr());
  return self;
}

at::Tensor& zero(at::Tensor& self) { return fill_scalar(self, 0); }

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> fmt) {
  return at::native::resize_(self, size, fmt);
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return at::native::set_storage_cpu_(self, std::move(source), 0, {elements}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) { return at::native::set_tensor_(self, source); }

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, hbm_allocator(), /*resizable=*/true);
  return at::native::set_storage_cpu_(self, std::move(storage), 0, {0}, {});
}

at::Tensor unfold(const at::Tensor& self, int64_t dim, int64_t size, int64_t step) {
  return at::native::unfold(self, dim, size, step);
}
at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }
at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("zero_", zero);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("unfold", unfold);
  m.impl("view_as_real", view_as_real);
  m.impl("view_as_complex", view_as_complex);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

// torch.ops.trnsim.host_alias(t): a CPU tensor viewing a neuron tensor's bytes, no copy and no simulated time
// (trnsim.distributed moves a collective's values with it; its time comes from the system model). The alias
// does not keep the device tensor alive, and it does not check the mode: the caller asks _C.holds_values first.
at::Tensor host_alias_op(const at::Tensor& self) { return raw_host_alias(self); }

TORCH_LIBRARY(trnsim, m) { m.def("host_alias(Tensor(a) self) -> Tensor(a)"); }
TORCH_LIBRARY_IMPL(trnsim, PrivateUse1, m) { m.impl("host_alias", host_alias_op); }

TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", copy_from_lazy_bits);
  m.impl("_copy_from_and_resize", copy_from_and_resize_lazy_bits);
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", copy_from_lazy_bits);
  m.impl("_copy_from_and_resize", copy_from_and_resize_lazy_bits);
}

}  // namespace

// An integer (or bool) tensor cast to a float dtype: the DMA converts on the way (through fp32 with
// RNE, which is torch's conversion while |value| <= 2^24; int64 narrowed to int32 on the host
// first). Larger values are left to the host copy.
bool integer_to_float_kernel(const at::Tensor& src, const at::Tensor& dst) {
  if (src.numel() == 0 || !dst.is_contiguous()) return false;
  const bool wide = c10::elementSize(src.scalar_type()) >= 4;
  if (wide && host_max_abs(src) > kExactIntegerBound) return false;
  const at::Tensor stored = kernel_input(src);
  const DType in_dt = *elementwise_dtype(src.scalar_type());
  kernels::UnarySpec spec;
  spec.shape = {src.numel()};
  spec.op = UnaryOp::copy;
  spec.input_dtype = in_dt;
  spec.output_dtype = *sim_dtype(dst.scalar_type());
  OpRecord record = record_for("cast", {src}, src.scalar_type());
  try {
    execute_kernel(dst.device().index(),
                   "cast|" + std::to_string(src.numel()) + "|" + std::string(dtype_name(in_dt)) + ">" +
                       std::string(dtype_name(spec.output_dtype)),
                   kernels::invocation(kernels::unary_program, spec),
                   {HostBuffer{"x", stored.data_ptr(), size_t(src.numel()), in_dt}}, {buffer("y", dst)},
                   std::move(record));
  } catch (const kernels::KernelUnsupported&) {
    return false;
  }
  return true;
}

}  // namespace trnsim::frontend
