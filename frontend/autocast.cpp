// Autocast for the device "neuron": the per-op cast policies torch.autocast("neuron", dtype=...)
// applies on the AutocastPrivateUse1 key, before the ops reach the PrivateUse1 kernels.
//
// The policy lists are the ones CUDA uses (ATen/autocast_mode.h's AT_FORALL_* lists), so models
// tuned for CUDA AMP see the same casts: matmuls and convolutions in bf16/fp16 (the simulated
// TensorEngine accumulates in fp32 either way), transcendentals, norms, losses and reductions in
// fp32. Its own TU: the policy macros expand to a few hundred typed wrappers.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace trnsim::frontend {
namespace {

// The AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE list spells its signatures unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// Same stance as CUDA: the loss is unstable once its input was rounded to 16 bits, and casting it
// back to fp32 silently would hide that the model should use the logits form.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast on neuron: "
              "use torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, "
              "or run the loss with torch.autocast('neuron', enabled=False) on fp32 inputs.");
}

// torch registers no fallback for AutocastPrivateUse1, and the key is in every neuron tensor's key
// set once autocast is on: without this, an op with no policy would find no kernel there.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TRNSIM_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TRNSIM_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TRNSIM_AUTOCAST_FP32_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TRNSIM_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

  AT_FORALL_LOWER_PRECISION_FP(TRNSIM_AUTOCAST_LOWER)
  // Reached directly by code that picks an SDPA backend itself; the CUDA list has only the flash one.
  TRNSIM_AUTOCAST_LOWER(_scaled_dot_product_efficient_attention)

  AT_FORALL_FP32(TRNSIM_AUTOCAST_FP32)
  // As autocast on the CPU does: cross_entropy_loss asks log_softmax for its input's dtype
  // explicitly, so without this a bf16/fp16 input would take its log_softmax in 16 bits.
  TRNSIM_AUTOCAST_FP32(cross_entropy_loss)
  AT_FORALL_FP32_SET_OPT_DTYPE(TRNSIM_AUTOCAST_FP32_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

  AT_FORALL_PROMOTE(TRNSIM_AUTOCAST_PROMOTE)
  // index_copy requires equal dtypes, so a buffer updated from an autocast output of the other
  // precision would fail without this. cat and stack stay out, as on CUDA: they promote by
  // themselves, and autocast's promote rejects an fp16 + bf16 mix that their own promotion accepts.
  TRNSIM_AUTOCAST_PROMOTE(index_copy)

#undef TRNSIM_AUTOCAST_LOWER
#undef TRNSIM_AUTOCAST_FP32
#undef TRNSIM_AUTOCAST_FP32_OPT_DTYPE
#undef TRNSIM_AUTOCAST_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace
}  // namespace trnsim::frontend
