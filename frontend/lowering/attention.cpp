// SDPA lowerings: F.scaled_dot_product_attention through the PrivateUse1 overrideable path, on the
// flash-attention kernels (kernels/attention.h, attention_backward.h).
#include <ATen/ATen.h>
#include <ATen/native/transformers/attention.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "frontend/neuron_device.h"
#include "kernels/attention.h"
#include "kernels/attention_backward.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {

// SDPA (F.scaled_dot_product_attention) through the PrivateUse1 overrideable path: _fused_sdp_choice
// picks the overrideable backend (flash attention kernels, forward with lse, backward) for what they
// support (2-byte dtypes, head dim 64 / 128, no mask, no dropout, causal only with Sq == Sk, GQA
// when enable_gqa) and the math path (composed of other ops) otherwise.
bool sdpa_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const c10::IValue& mask,
                    double dropout_p, bool is_causal, bool enable_gqa) {
  if (!on_neuron(q) || !on_neuron(k) || !on_neuron(v)) return false;
  if (!(mask.isNone() || (mask.isTensor() && !mask.toTensor().defined())) || dropout_p != 0.0) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  const at::ScalarType t = q.scalar_type();
  if ((t != at::kBFloat16 && t != at::kHalf) || k.scalar_type() != t || v.scalar_type() != t) return false;
  const int64_t d = q.size(3);
  if ((d != 64 && d != 128) || k.size(3) != d || v.size(3) != d) return false;
  if (k.size(0) != q.size(0) || v.sizes() != k.sizes()) return false;
  const int64_t h = q.size(1), hkv = k.size(1);
  if (hkv == 0 || (enable_gqa ? h % hkv != 0 : h != hkv)) return false;
  if (q.size(0) == 0 || h == 0 || q.size(2) == 0 || k.size(2) == 0) return false;
  if (is_causal && q.size(2) != k.size(2)) return false;
  return config_info().dma_transpose;
}

LoweredResults lower_fused_sdp_choice(const std::string&, LoweringArgs a) {
  const bool ok = sdpa_supported(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3], a[4].toDouble(),
                                 a[5].toBool(), a[7].toBool());
  // sdp::SDPBackend: math = 0, overrideable = 4
  return std::vector<c10::IValue>{static_cast<int64_t>(ok ? 4 : 0)};
}

kernels::AttentionSpec sdpa_spec(const at::Tensor& q, const at::Tensor& k, bool causal, const c10::IValue& scale) {
  kernels::AttentionSpec spec;
  spec.batch = q.size(0);
  spec.heads = q.size(1);
  spec.kv_heads = k.size(1);
  spec.seq_q = q.size(2);
  spec.seq_k = k.size(2);
  spec.head_dim = q.size(3);
  spec.causal = causal;
  spec.scale = scale.isNone() ? 0.0 : scale.toDouble();
  spec.dtype = *sim_dtype(q.scalar_type());
  return spec;
}

std::string sdpa_key(const std::string& op, const kernels::AttentionSpec& s) {
  std::ostringstream key;
  key << std::hexfloat << op << "|" << s.batch << "," << s.heads << "," << s.kv_heads << "," << s.seq_q << ","
      << s.seq_k << "," << s.head_dim << "|" << s.causal << "|" << s.scale << "|" << static_cast<int>(s.dtype);
  return key.str();
}

// The kernels write contiguous [B, H, S, D] results; the op's meta function promises the layout of
// the matching input (empty_like: a [B, S, H, D] buffer viewed transposed, as every Hugging Face
// attention passes it), and torch.compile relies on those strides. A result in another layout is
// moved there by a device copy kernel.
at::Tensor in_layout_of(const at::Tensor& result, const at::Tensor& like) {
  at::Tensor target = at::empty_like(like);
  if (target.strides() == result.strides()) return result;
  target.copy_(result);
  return target;
}

LoweredResults lower_sdpa_overrideable(const std::string& op, LoweringArgs a) {
  const at::Tensor &q_in = a[0].toTensor(), &k_in = a[1].toTensor(), &v_in = a[2].toTensor();
  const double dropout_p = a[4].toDouble();
  const bool causal = a[5].toBool();
  TORCH_CHECK(sdpa_supported(q_in, k_in, v_in, a[3], dropout_p, causal, true),
              "neuron: _scaled_dot_product_fused_attention_overrideable: unsupported inputs (query ", q_in.sizes(),
              " ", q_in.scalar_type(), ", key ", k_in.sizes(), ", dropout ", dropout_p, ", causal ", causal,
              "); the flash-attention kernels take bf16/fp16, head dim 64 or 128, no mask, no dropout, causal "
              "only with equal query and key lengths (_fused_sdp_choice routes anything else to the math path)");
  c10::DeviceGuard guard(q_in.device());
  kernels::AttentionSpec spec = sdpa_spec(q_in, k_in, causal, a[7]);
  spec.write_lse = true;
  const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  at::Tensor o = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({spec.batch, spec.heads, spec.seq_q}, q.options().dtype(at::kFloat));
  OpRecord record = record_for(op, {q_in, k_in, v_in}, q.scalar_type());
  record.flops = static_cast<uint64_t>(kernels::attention_forward_flops(spec));
  execute_kernel(q.device().index(), sdpa_key("sdpa_fwd", spec),
                 kernels::invocation(kernels::flash_attention_forward_program, spec),
                 {buffer("q", q), buffer("k", k), buffer("v", v)}, {buffer("o", o), buffer("lse", lse)},
                 std::move(record));
  const at::Tensor undefined;
  // The philox seed and offset are tensors even without dropout (0-dim int64 on the host, as CUDA's
  // flash op returns them and the meta function promises): AOT autograd saves them for the backward.
  const at::Tensor seed = at::zeros({}, at::kLong), offset = at::zeros({}, at::kLong);
  // output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask
  return std::vector<c10::IValue>{in_layout_of(o, q_in), lse, undefined, undefined, c10::SymInt(spec.seq_q),
                                  c10::SymInt(spec.seq_k), seed, offset, undefined};
}

LoweredResults lower_sdpa_overrideable_backward(const std::string& op, LoweringArgs a) {
  const at::Tensor &dout_in = a[0].toTensor(), &q_in = a[1].toTensor(), &k_in = a[2].toTensor(),
                   &v_in = a[3].toTensor(), &o_in = a[6].toTensor(), &lse_in = a[7].toTensor();
  const double dropout_p = a[12].toDouble();
  const bool causal = a[13].toBool();
  TORCH_CHECK(sdpa_supported(q_in, k_in, v_in, a[4], dropout_p, causal, true) && on_neuron(dout_in) &&
                  dout_in.scalar_type() == q_in.scalar_type() && lse_in.scalar_type() == at::kFloat,
              "neuron: _scaled_dot_product_fused_attention_overrideable_backward: unsupported inputs (query ",
              q_in.sizes(), " ", q_in.scalar_type(), ", grad_out ", dout_in.scalar_type(), ", logsumexp ",
              lse_in.scalar_type(), ", dropout ", dropout_p, ", causal ", causal,
              "); needs the forward's supported set, grad_out in the query's dtype and an fp32 logsumexp");
  c10::DeviceGuard guard(q_in.device());
  kernels::AttentionSpec spec = sdpa_spec(q_in, k_in, causal, a[16]);
  const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous(), o = o_in.contiguous(),
                   dout = dout_in.contiguous(), lse = lse_in.contiguous();
  at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options()),
             dv = at::empty(v.sizes(), v.options());
  OpRecord record =
      record_for(op, {dout_in, q_in, k_in, v_in}, q.scalar_type());
  record.flops = static_cast<uint64_t>(kernels::attention_backward_flops(spec));
  execute_kernel(q.device().index(), sdpa_key("sdpa_bwd", spec),
                 kernels::invocation(kernels::flash_attention_backward_program, spec),
                 {buffer("q", q), buffer("k", k), buffer("v", v), buffer("o", o), buffer("do", dout),
                  HostBuffer{"lse", lse.data_ptr(), static_cast<size_t>(lse.numel()), DType::fp32}},
                 {buffer("dq", dq), buffer("dk", dk), buffer("dv", dv)}, std::move(record));
  return std::vector<c10::IValue>{in_layout_of(dq, q_in), in_layout_of(dk, k_in), in_layout_of(dv, v_in), at::Tensor()};
}

int64_t neuron_fused_sdp_choice_stub(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                                     std::optional<double> /*scale*/, bool enable_gqa) {
  const c10::IValue m = mask ? c10::IValue(*mask) : c10::IValue();
  return sdpa_supported(q, k, v, m, dropout_p, is_causal, enable_gqa) ? 4 : 0;
}

}  // namespace
}  // namespace trnsim::frontend

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &trnsim::frontend::neuron_fused_sdp_choice_stub)
}  // namespace at::native

namespace trnsim::frontend {

std::vector<Lowering> attention_lowerings() {
  return {
      row("_fused_sdp_choice", lower_fused_sdp_choice),
      row("_scaled_dot_product_fused_attention_overrideable", lower_sdpa_overrideable),
      row("_scaled_dot_product_fused_attention_overrideable_backward", lower_sdpa_overrideable_backward),
  };
}

}  // namespace trnsim::frontend
