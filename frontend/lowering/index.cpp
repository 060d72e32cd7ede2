// Indexing lowerings of the PyTorch device: advanced indexing (index.Tensor, _index_put_impl_ with and without
// accumulate), gather / scatter / scatter_add / scatter_reduce (sum, mean), index_add, histc,
// bincount, arange and flip, on the kernels of kernels/indexing.h (indirect DMA: dma_gather /
// dma_scatter).
//
// Index tensors are integer metadata the host reads (device memory is host memory here) to check
// what torch checks (every index in range); anything out of range or otherwise invalid goes to the
// counted CPU fallback untouched, so the CPU raises its own exception (IndexError / RuntimeError)
// with its own message. Masks become coordinates by the nonzero kernel. When an op needs flattened
// row offsets (several index tensors, masks,
// gather / scatter along a dim, index_add along a dim > 0) the host computes them as int32 (the
// kernel then reads 4 bytes per id); a single int64 index along dim 0 is read by the kernel as it
// lies in HBM (int32 pairs), negative ids wrapped on the device.
//
// Repeated indices: rows are applied in index order (see kernels/indexing.h), so put / scatter
// without accumulation keep the last value and accumulation sums in index order, as torch's CPU
// loops do (fp32 sums equal the CPU's; bf16 rounds after each add, as the CPU's bf16 loops do).
// scatter_reduce amax / amin run on a select-and-reduce kernel (exact in any order); prod goes to
// the CPU (its product in index order is not what a reduction tree rounds to). Whatever a lowering
// does not take (dtypes, prod, integer accumulation) goes explicitly to the counted fallback.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontend/index_support.h"
#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "kernels/kernel_common.h"
#include "frontend/lowering_support.h"
#include "isa/isa_error.h"
#include "kernels/data_movement.h"
#include "kernels/indexing.h"
#include "kernels/sort.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {

using kernels::IndexWidth;
using Args = c10::ArrayRef<c10::IValue>;
using Results = std::optional<std::vector<at::Tensor>>;

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n) throw kernels::KernelUnsupported("dim out of range");  // the CPU raises torch's error
  return dim < 0 ? dim + n : dim;
}

bool is_index_dtype(const at::Tensor& t) { return t.scalar_type() == at::kLong || t.scalar_type() == at::kInt; }

// Index tensors may live on the CPU or on self's device.
bool usable_index(const at::Tensor& idx, const at::Tensor& self) {
  return idx.defined() && (idx.is_cpu() || idx.device() == self.device());
}

bool fits_int32(int64_t v) { return v >= 0 && v <= int64_t{INT32_MAX}; }

std::string key_of(std::initializer_list<int64_t> values) {
  std::ostringstream s;
  for (int64_t v : values) s << v << ",";
  return s.str();
}

// ---- the two kernels, as the lowerings call them ----

// Host-made row ids (int32) or an index tensor the kernel reads as it is.
struct Ids {
  at::Tensor tensor;  // contiguous: int32 host ids, or the user's int64 / int32 index
  IndexWidth width = IndexWidth::int32;
  bool wrap_negative = false;
  int64_t count() const { return tensor.numel(); }
};

Ids host_ids(const at::Tensor& ids_long) {
  return Ids{ids_long.reshape({-1}).to(at::kInt).contiguous(), IndexWidth::int32, false};
}

HostBuffer ids_buffer(const Ids& ids) {
  const size_t words = static_cast<size_t>(ids.count()) * (ids.width == IndexWidth::int64 ? 2 : 1);
  return HostBuffer{"ids", ids.tensor.data_ptr(), words, DType::int32};
}

// y [count, D] = table [rows, D] rows by ids; `table` contiguous. Moves bytes (any dtype).
void run_gather(const std::string& op, const at::Tensor& table, int64_t rows, int64_t row_elements, const Ids& ids,
                const at::Tensor& y) {
  const auto raw = *raw_dtype(table.scalar_type());
  kernels::GatherRowsSpec spec;
  spec.num_ids = ids.count();
  spec.rows = rows;
  spec.row_elements = row_elements * raw.second;
  spec.dtype = raw.first;
  spec.index = ids.width;
  spec.wrap_negative = ids.wrap_negative;
  const std::string key = "gather_rows|" + key_of({spec.num_ids, spec.rows, spec.row_elements, int64_t(spec.dtype),
                                                   int64_t(spec.index), spec.wrap_negative});
  execute_kernel(table.device().index(), key, kernels::invocation(kernels::gather_rows_program, spec),
                 {ids_buffer(ids), raw_buffer("table", table)}, {raw_buffer("y", y)},
                 record_for(op, {table, ids.tensor}, table.scalar_type()));
}

bool ids_unique(const Ids& ids, int64_t rows) {
  at::Tensor v = host_alias(ids.tensor).reshape({-1}).to(at::kLong);
  if (ids.wrap_negative) v = at::where(v < 0, v + rows, v);
  return std::get<0>(at::_unique(v)).numel() == v.numel();
}

void run_scatter_kernel(const std::string& op, const at::Tensor& y, int64_t rows, int64_t row_elements, const Ids& ids,
                        const at::Tensor& src, bool accumulate);

// y [rows, D] (contiguous, in place) rows ids[i] = / += src [count, D]. bf16 sums accumulate in an
// fp32 copy of y, rounded once at the end (as torch's CPU scatter_add / index_add along dim 0 do):
// two casts of y more, against a bf16 rounding after every add.
void run_scatter(const std::string& op, const at::Tensor& y, int64_t rows, int64_t row_elements, const Ids& ids,
                 const at::Tensor& src, bool accumulate) {
  if (accumulate && y.scalar_type() == at::kBFloat16) {
    at::Tensor wide = y.to(at::kFloat), wide_src = src.to(at::kFloat);
    run_scatter_kernel(op, wide, rows, row_elements, ids, wide_src, true);
    y.copy_(wide);
    return;
  }
  run_scatter_kernel(op, y, rows, row_elements, ids, src, accumulate);
}

void run_scatter_kernel(const std::string& op, const at::Tensor& y, int64_t rows, int64_t row_elements, const Ids& ids,
                        const at::Tensor& src, bool accumulate) {
  kernels::ScatterRowsSpec spec;
  DType dt;
  int64_t per = 1;
  if (accumulate) {
    dt = *accumulate_dtype(y.scalar_type());
  } else {
    std::tie(dt, per) = *raw_dtype(y.scalar_type());
  }
  spec.num_ids = ids.count();
  spec.rows = rows;
  spec.row_elements = row_elements * per;
  spec.dtype = dt;
  spec.index = ids.width;
  spec.wrap_negative = ids.wrap_negative;
  spec.accumulate = accumulate;
  // Timing-only mode cannot see a device index: its ids count as repeating (the tiles stay on one core), as any
  // real batch of token ids does; distinct ids in values mode split over the cores and time faster.
  spec.unique_ids = host_check(ids.tensor, [&](const at::Tensor&) { return ids_unique(ids, rows); }, false);
  const std::string key = "scatter_rows|" + key_of({spec.num_ids, spec.rows, spec.row_elements, int64_t(spec.dtype),
                                                    int64_t(spec.index), spec.wrap_negative, accumulate,
                                                    spec.unique_ids});
  const HostBuffer table{"y", y.data_ptr(), static_cast<size_t>(rows * spec.row_elements), dt};
  const HostBuffer source{"src", src.data_ptr(), static_cast<size_t>(spec.num_ids * spec.row_elements), dt};
  execute_kernel(y.device().index(), key, kernels::invocation(kernels::scatter_rows_program, spec),
                 {ids_buffer(ids), source, table}, {table}, record_for(op, {y, ids.tensor, src}, y.scalar_type()));
}

// ---- advanced indexing (self[indices], self[indices] = values) ----

// self[indices] as a gather of contiguous rows of `post` elements: the dims after the last indexed
// dim stay contiguous in self and last in the result (whether the indexed dims are adjacent, result
// (pre..., broadcast..., post...), or not, result (broadcast..., others..., post...)).
struct AdvancedIndex {
  std::vector<int64_t> out_shape;
  int64_t rows = 0, post = 1;  // self as [rows, post]
  Ids ids;
};

std::optional<AdvancedIndex> advanced_index(const at::Tensor& self, const c10::IValue& list) {
  if (self.dim() == 0 || !list.isList()) return std::nullopt;
  std::vector<at::Tensor> per_dim;  // one per dim of self, undefined = a full slice
  bool direct_ok = true;            // a single int index at dim 0, read by the kernel as is
  at::Tensor direct;
  for (const c10::IValue& v : list.toListRef()) {
    if (v.isNone()) {
      per_dim.emplace_back();
      continue;
    }
    const at::Tensor t = v.toTensor();
    if (!t.defined()) {
      per_dim.emplace_back();
      continue;
    }
    if (!usable_index(t, self)) return std::nullopt;
    if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) {
      // A mask covers t.dim() dims and must match them (else the CPU raises IndexError).
      const size_t first = per_dim.size();
      if (t.dim() == 0 || first + size_t(t.dim()) > size_t(self.dim())) return std::nullopt;
      for (int64_t d = 0; d < t.dim(); ++d)
        if (t.size(d) != self.size(int64_t(first) + d)) return std::nullopt;
      // The mask's coordinates: the nonzero kernel for a device mask, the host's for a CPU one.
      at::Tensor nz = at::nonzero(t);
      if (!nz.is_cpu()) nz = host_alias(nz).clone();  // a host copy: the alias does not keep the device tensor alive
      for (int64_t d = 0; d < t.dim(); ++d) per_dim.push_back(nz.select(1, d));
      direct_ok = false;
    } else if (is_index_dtype(t)) {
      if (per_dim.size() == 0) direct = t;
      else direct_ok = false;
      per_dim.push_back(host_alias(t));
    } else {
      return std::nullopt;  // float indices: the CPU raises IndexError
    }
  }
  if (per_dim.size() > size_t(self.dim())) return std::nullopt;
  per_dim.resize(size_t(self.dim()));
  std::vector<int64_t> indexed;
  std::vector<at::Tensor> defined;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (per_dim[size_t(d)].defined()) {
      indexed.push_back(d);
      defined.push_back(per_dim[size_t(d)]);
    }
  }
  if (indexed.empty()) return std::nullopt;
  if (indexed.size() > 1) direct_ok = false;
  std::vector<at::Tensor> b = at::broadcast_tensors(defined);  // throws (-> fallback) when they do not
  bool negative = false;
  for (size_t k = 0; k < b.size(); ++k) {
    const int64_t size = self.size(indexed[k]);
    if (b[k].numel() == 0) continue;
    const int64_t lo = b[k].min().item<int64_t>(), hi = b[k].max().item<int64_t>();
    if (lo < -size || hi >= size) return std::nullopt;  // the CPU raises IndexError
    negative = negative || lo < 0;
  }
  const int64_t last = indexed.back();
  AdvancedIndex r;
  for (int64_t d = last + 1; d < self.dim(); ++d) r.post *= self.size(d);
  r.rows = r.post == 0 ? 0 : self.numel() / r.post;
  const bool adjacent = last - indexed.front() + 1 == int64_t(indexed.size());
  std::vector<int64_t> bshape = dims(b[0].sizes());
  std::vector<int64_t> others;  // non-indexed dims before the last indexed one
  for (int64_t d = 0; d < last; ++d)
    if (!per_dim[size_t(d)].defined()) others.push_back(d);
  std::vector<int64_t> other_shape;
  for (int64_t d : others) other_shape.push_back(self.size(d));
  const std::vector<int64_t> post_shape(self.sizes().begin() + last + 1, self.sizes().end());
  if (adjacent) {
    r.out_shape = other_shape;
    r.out_shape.insert(r.out_shape.end(), bshape.begin(), bshape.end());
  } else {
    r.out_shape = bshape;
    r.out_shape.insert(r.out_shape.end(), other_shape.begin(), other_shape.end());
  }
  r.out_shape.insert(r.out_shape.end(), post_shape.begin(), post_shape.end());
  if (r.rows == 0 || c10::multiply_integers(r.out_shape) == 0) return r;
  if (!fits_int32(r.rows)) return std::nullopt;
  if (direct_ok) {
    // A CPU index goes to the device first (charged to the host link), as CUDA copies it.
    at::Tensor idx = direct.is_cpu() ? direct.to(self.device()) : direct.contiguous();
    r.ids = Ids{idx, direct.scalar_type() == at::kLong ? IndexWidth::int64 : IndexWidth::int32, negative};
    if (negative && r.rows >= (int64_t{1} << 24)) {  // beyond the device's exact fp32 wrap: wrapped here
      const at::Tensor h = host_alias(idx).to(at::kLong);
      r.ids = host_ids(at::where(h < 0, h + r.rows, h));
    }
    return r;
  }
  // Row offsets (in rows of `post` elements) of self, contiguous: stride(d) / post.
  auto row_stride = [&](int64_t d) {
    int64_t s = 1;
    for (int64_t e = d + 1; e <= last; ++e) s *= self.size(e);
    return s;
  };
  at::Tensor off_b = at::zeros(bshape, at::kLong);
  for (size_t k = 0; k < b.size(); ++k) {
    at::Tensor v = b[k].to(at::kLong);
    v = at::where(v < 0, v + self.size(indexed[k]), v);
    off_b = off_b + v * row_stride(indexed[k]);
  }
  at::Tensor off_o = at::zeros(other_shape, at::kLong);
  for (size_t k = 0; k < others.size(); ++k) {
    std::vector<int64_t> shape(others.size(), 1);
    shape[k] = other_shape[k];
    off_o = off_o + at::arange(other_shape[k], at::kLong).reshape(shape) * row_stride(others[k]);
  }
  std::vector<int64_t> ob = other_shape, bo = bshape;
  ob.insert(ob.end(), bshape.size(), 1);
  bo.insert(bo.end(), other_shape.size(), 1);
  at::Tensor ids = adjacent ? off_o.reshape(ob) + off_b : off_b.reshape(bo) + off_o;
  r.ids = host_ids(ids);
  return r;
}

Results lower_index(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  if (!on_neuron(self) || !raw_dtype(self.scalar_type())) return std::nullopt;
  std::optional<AdvancedIndex> ix = advanced_index(self, a[1]);
  if (!ix) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor y = at::empty(ix->out_shape, self.options());
  if (y.numel() == 0) return std::vector<at::Tensor>{y};
  run_gather(op, self.contiguous(), ix->rows, ix->post, ix->ids, y);
  return std::vector<at::Tensor>{y};
}

// _index_put_impl_(self, indices, values, accumulate, unsafe): self in place (contiguous).
Results lower_index_put(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  at::Tensor values = a[2].toTensor();
  const bool accumulate = a[3].toBool();
  if (!on_neuron(self) || !raw_dtype(self.scalar_type())) return std::nullopt;
  if (values.scalar_type() != self.scalar_type()) return std::nullopt;  // the CPU raises
  if (!(values.is_cpu() || values.device() == self.device())) return std::nullopt;
  if (accumulate && !accumulate_dtype(self.scalar_type())) return std::nullopt;  // no integer read-add-write DMA
  std::optional<AdvancedIndex> ix = advanced_index(self, a[1]);
  if (!ix) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  if (c10::multiply_integers(ix->out_shape) == 0) {
    (void)values.expand(ix->out_shape);  // the CPU's shape check
    return std::vector<at::Tensor>{self};
  }
  if (values.is_cpu()) values = values.to(self.device());
  at::Tensor src = values.expand(ix->out_shape).contiguous();
  // A strided self (x[idx, 2] = v puts into a column view) is updated through a contiguous copy.
  at::Tensor target = self.is_contiguous() ? self : self.contiguous();
  run_scatter(op, target, ix->rows, ix->post, ix->ids, src, accumulate);
  if (!target.is_same(self)) self.copy_(target);
  return std::vector<at::Tensor>{self};
}

// index_copy(_)(self, dim, index, source): the slices of `source` put at `index` along dim, an
// index_put_ at (:, ..., index) (the static KV cache's update). The CPU's argument rules first (an
// int64 index of at most one dim on self's device, in [0, size); source of self's dtype and shape but
// index.numel() along dim): anything else goes to the CPU, which raises its error.
Results lower_index_copy(const std::string& op, Args a, bool inplace) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& index = a[2].toTensor();
  const at::Tensor& source = a[3].toTensor();
  if (!on_neuron(self) || self.dim() == 0 || !on_neuron(source) || source.scalar_type() != self.scalar_type()) return std::nullopt;
  if (index.scalar_type() != at::kLong || index.dim() > 1 || index.device() != self.device()) return std::nullopt;
  const int64_t dim = wrap_dim(a[1].toInt(), self.dim());
  std::vector<int64_t> expect = dims(self.sizes());
  expect[size_t(dim)] = index.numel();
  if (dims(source.sizes()) != expect) return std::nullopt;
  const int64_t size = self.size(dim);
  const bool in_range = host_check(index, [&](const at::Tensor& h) {
    return h.numel() == 0 || (h.min().item<int64_t>() >= 0 && h.max().item<int64_t>() < size);
  }, true);
  if (!in_range) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  const at::Tensor target = inplace ? self : self.clone();
  c10::List<std::optional<at::Tensor>> indices;
  for (int64_t d = 0; d < dim; ++d) indices.push_back(std::nullopt);
  indices.push_back(index.reshape({-1}));
  const std::vector<c10::IValue> put_args{target, indices, source, false, false};
  if (!lower_index_put(op, put_args)) return std::nullopt;  // (nothing written)
  return std::vector<at::Tensor>{target};
}

// ---- gather / scatter along a dim ----

// Element offsets into contiguous `self` of index's elements along `dim`, as torch's
// gather / scatter address them; nullopt where the CPU raises (dtype, ranks, sizes, range).
std::optional<at::Tensor> element_offsets(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                          const at::Tensor* src) {
  if (!is_index_dtype(index) || !usable_index(index, self)) return std::nullopt;
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  if (std::max<int64_t>(index.dim(), 1) != nd) return std::nullopt;
  if (src && std::max<int64_t>(src->dim(), 1) != nd) return std::nullopt;
  auto size = [](const at::Tensor& t, int64_t d) { return t.dim() == 0 ? int64_t{1} : t.size(d); };
  for (int64_t d = 0; d < nd; ++d) {
    if (d != dim && size(index, d) > size(self, d)) return std::nullopt;
    if (src && size(index, d) > size(*src, d)) return std::nullopt;
  }
  at::Tensor idx =
      host_alias(index).to(at::kLong).reshape(index.dim() == 0 ? std::vector<int64_t>{1} : dims(index.sizes()));
  if (idx.numel() > 0) {
    if (idx.min().item<int64_t>() < 0 || idx.max().item<int64_t>() >= size(self, dim)) return std::nullopt;
  }
  std::vector<int64_t> stride(size_t(nd), 1);
  for (int64_t d = nd - 1; d > 0; --d) stride[size_t(d - 1)] = stride[size_t(d)] * size(self, d);
  at::Tensor off = idx * stride[size_t(dim)];
  for (int64_t d = 0; d < nd; ++d) {
    if (d == dim) continue;
    std::vector<int64_t> shape(size_t(nd), 1);
    shape[size_t(d)] = idx.size(d);
    off = off + at::arange(idx.size(d), at::kLong).reshape(shape) * stride[size_t(d)];
  }
  return off;
}

Results lower_gather(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& index = a[2].toTensor();
  if (!on_neuron(self) || !raw_dtype(self.scalar_type())) return std::nullopt;
  const int64_t dim = wrap_dim(a[1].toInt(), self.dim());
  std::optional<at::Tensor> off = element_offsets(self, dim, index, nullptr);
  if (!off) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor y = at::empty(index.sizes(), self.options());
  if (y.numel() == 0) return std::vector<at::Tensor>{y};
  if (!fits_int32(self.numel())) return std::nullopt;
  run_gather(op, self.contiguous(), self.numel(), 1, host_ids(*off), y);
  return std::vector<at::Tensor>{y};
}

// src's elements at index's positions (src may be larger than index), contiguous on the device.
at::Tensor source_block(const at::Tensor& src, const at::Tensor& index) {
  at::Tensor s = src;
  for (int64_t d = 0; d < index.dim(); ++d) s = s.narrow(d, 0, index.size(d));
  return s.contiguous();
}

// self (contiguous, in place)[offsets] = / += values; identity fill first when !include_self.
void scatter_elements(const std::string& op, const at::Tensor& self, const at::Tensor& offsets,
                      const at::Tensor& values, bool accumulate) {
  if (offsets.numel() == 0) return;
  run_scatter(op, self, self.numel(), 1, host_ids(offsets), values, accumulate);
}

// scatter_reduce(_).two with amax / amin: the rows of self that index reaches, the scattered dim
// moved last, through the select-and-reduce kernel; the rest of self is left as it is.
Results lower_scatter_max(const std::string& op, Args a, bool inplace) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& index = a[2].toTensor();
  const at::Tensor& src = a[3].toTensor();
  const bool maximum = a[4].toStringRef() == "amax", include_self = a[5].toBool();
  if (!accumulate_dtype(self.scalar_type()) || self.dim() == 0) return std::nullopt;
  if (!on_neuron(src) || src.device() != self.device() || src.scalar_type() != self.scalar_type()) return std::nullopt;
  const int64_t dim = wrap_dim(a[1].toInt(), self.dim());
  if (!element_offsets(self, dim, index, &src)) return std::nullopt;  // the CPU's checks
  const int64_t S = self.size(dim), J = index.dim() == 0 ? 1 : index.size(dim);
  if (S > 4096 || J > 8192 || S * J > (int64_t{1} << 22)) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor out = inplace ? self : self.clone(at::MemoryFormat::Contiguous);
  if (index.numel() == 0) return std::vector<at::Tensor>{out};
  auto block = [&](const at::Tensor& t, bool whole_dim) {
    at::Tensor b = t;
    for (int64_t d = 0; d < index.dim(); ++d)
      if (d != dim || !whole_dim) b = b.narrow(d, 0, index.size(d));
    return b;
  };
  at::Tensor base = block(out, true).movedim(dim, -1).contiguous();
  at::Tensor ids = host_alias(index).to(at::kLong).movedim(dim, -1).contiguous();
  at::Tensor values = block(src, false).movedim(dim, -1).contiguous();
  const int64_t rows = ids.numel() / J;
  at::Tensor y = at::empty(base.sizes(), base.options());
  kernels::ScatterMaxSpec spec;
  spec.rows = rows;
  spec.targets = S;
  spec.per_row = J;
  spec.dtype = *accumulate_dtype(self.scalar_type());
  spec.maximum = maximum;
  spec.include_self = include_self;
  const std::string key = "scatter_max|" + key_of({rows, S, J, int64_t(spec.dtype), maximum, include_self});
  execute_kernel(self.device().index(), key, kernels::invocation(kernels::scatter_max_program, spec),
                 {*value_buffer("self", base), *value_buffer("index", ids), *value_buffer("src", values)},
                 {*value_buffer("y", y)}, record_for(op, {self, index, src}, self.scalar_type()));
  block(out, true).copy_(y.movedim(-1, dim));
  return std::vector<at::Tensor>{out};
}

// scatter / scatter_ (src or value), scatter_add(_), scatter_reduce(_).two with sum / mean.
enum class ScatterKind { plain, add, reduce };

Results lower_scatter(const std::string& op, Args a, ScatterKind kind, bool inplace, bool is_value) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& index = a[2].toTensor();
  if (!on_neuron(self) || !raw_dtype(self.scalar_type())) return std::nullopt;
  if (!fits_int32(self.numel())) return std::nullopt;
  const int64_t dim = wrap_dim(a[1].toInt(), self.dim());
  const bool is_add = kind == ScatterKind::add;
  const bool is_reduce = kind == ScatterKind::reduce;
  std::string reduce = is_reduce ? a[4].toStringRef() : "";
  const bool include_self = is_reduce ? a[5].toBool() : true;
  if (reduce == "amax" || reduce == "amin") return lower_scatter_max(op, a, inplace);
  if (is_reduce && reduce != "sum" && reduce != "mean") return std::nullopt;  // prod: see the header
  if (reduce == "mean" && !at::isFloatingType(self.scalar_type())) return std::nullopt;  // integer mean floors
  const bool accumulate = is_add || is_reduce;
  if (accumulate && !accumulate_dtype(self.scalar_type())) return std::nullopt;
  at::Tensor src;
  if (!is_value) {
    src = a[3].toTensor();
    if (!on_neuron(src) || src.device() != self.device() || src.scalar_type() != self.scalar_type())
      return std::nullopt;
  }
  std::optional<at::Tensor> off = element_offsets(self, dim, index, is_value ? nullptr : &src);
  if (!off) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor values = is_value ? at::full(index.sizes(), a[3].toScalar(), self.options())
                               : source_block(src, index.dim() == 0 ? index.reshape({1}) : index);
  if (index.dim() == 0) values = values.reshape({1});
  at::Tensor out = inplace && self.is_contiguous() ? self : self.clone(at::MemoryFormat::Contiguous);
  // bf16 sums (and means) are taken in an fp32 copy and rounded once, as torch's CPU does.
  const bool widen = accumulate && self.scalar_type() == at::kBFloat16;
  at::Tensor work = widen ? out.to(at::kFloat) : out;
  if (widen) values = values.to(at::kFloat);
  if (is_reduce && !include_self) {
    // torch first sets the scattered positions to the reduction's identity (0 for sum and mean).
    scatter_elements(op + ".init", work, *off, at::zeros(values.sizes(), work.options()), false);
  }
  scatter_elements(op, work, *off, values, accumulate);
  if (reduce == "mean") {
    at::Tensor count = at::full(self.sizes(), include_self ? 1 : 0, work.options());
    scatter_elements(op + ".count", count, *off, at::ones(values.sizes(), work.options()), true);
    work = at::div(work, at::clamp_min(count, 1));
  }
  if (!work.is_same(out)) out.copy_(work);
  if (inplace && !out.is_same(self)) self.copy_(out);  // a strided self, through a contiguous copy
  return std::vector<at::Tensor>{inplace ? self : out};
}

// index_add(_)(self, dim, index, source, alpha): rows of self viewed [pre, S, post].
Results lower_index_add(const std::string& op, Args a, bool inplace) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& index = a[2].toTensor();
  const at::Tensor& source = a[3].toTensor();
  const c10::Scalar alpha = a[4].toScalar();
  if (!on_neuron(self) || !accumulate_dtype(self.scalar_type())) return std::nullopt;
  if (!on_neuron(source) || source.device() != self.device() || source.scalar_type() != self.scalar_type())
    return std::nullopt;
  if (!is_index_dtype(index) || index.dim() > 1 || !usable_index(index, self)) return std::nullopt;
  const int64_t dim = wrap_dim(a[1].toInt(), self.dim());
  const int64_t n = index.numel();
  // alpha != 1: the CPU rounds self + alpha * src once (a fused multiply-add); a scaling kernel
  // before the read-add-write DMA would round twice.
  if (alpha.toDouble() != 1.0) return std::nullopt;
  // source must be self's shape with index.numel() along dim (0-d self / source as [1]).
  std::vector<int64_t> expect = self.dim() == 0 ? std::vector<int64_t>{1} : dims(self.sizes());
  expect[size_t(dim)] = n;
  const std::vector<int64_t> got = source.dim() == 0 ? std::vector<int64_t>{1} : dims(source.sizes());
  if (got != expect) return std::nullopt;
  const int64_t S = self.dim() == 0 ? 1 : self.size(dim);
  int64_t pre = 1, post = 1;
  for (int64_t d = 0; d < dim; ++d) pre *= self.size(d);
  for (int64_t d = dim + 1; d < self.dim(); ++d) post *= self.size(d);
  if (!fits_int32(pre * S)) return std::nullopt;
  // In timing-only mode a device index has no values: its ids are taken to be in range (the kernel reads them on
  // the device). Along dim > 0 the host makes the row ids from its values, and host_alias says it cannot.
  const bool in_range = host_check(index, [&](const at::Tensor& h) {
    const at::Tensor v = h.reshape({-1});
    return n == 0 || (v.min().item<int64_t>() >= 0 && v.max().item<int64_t>() < S);
  }, true);
  if (!in_range) return std::nullopt;
  const at::Tensor idx = pre == 1 ? at::Tensor() : host_alias(index).reshape({-1}).to(at::kLong);
  c10::DeviceGuard guard(self.device());
  if (n == 0 || post == 0 || pre == 0) return std::vector<at::Tensor>{inplace ? self : self.clone()};
  at::Tensor out = inplace && self.is_contiguous() ? self : self.clone(at::MemoryFormat::Contiguous);
  at::Tensor src = source.contiguous();
  if (pre == 1) {
    lower_index_add_rows(op, out.view({S, post}), index, src.view({n, post}));
  } else {
    run_scatter(op, out, pre * S, post, host_ids(at::arange(pre, at::kLong).reshape({pre, 1}) * S + idx.reshape({1, n})),
                src, true);
  }
  if (inplace && !out.is_same(self)) self.copy_(out);  // a strided self, through a contiguous copy
  return std::vector<at::Tensor>{inplace ? self : out};
}

// ---- histc, bincount ----

void run_histogram(const std::string& op, const kernels::HistogramSpec& spec, const at::Tensor& x,
                   const at::Tensor& weights, const at::Tensor& y) {
  std::vector<HostBuffer> inputs = {*value_buffer("x", x)};
  if (spec.weighted) inputs.push_back(HostBuffer{"weights", weights.data_ptr(), size_t(spec.n), DType::fp32});
  std::ostringstream key;
  key << "histogram|" << spec.n << "," << spec.bins << "," << int(spec.mode) << "," << int(spec.input_dtype) << ","
      << int(spec.input_width) << "," << std::hexfloat << spec.min << "," << spec.max << "," << spec.weighted << ","
      << int(spec.output_dtype) << "," << spec.output_pairs;
  execute_kernel(x.device().index(), key.str(), kernels::invocation(kernels::histogram_program, spec), inputs,
                 {*value_buffer("y", y)}, record_for(op, {x}, x.scalar_type()));
}

kernels::HistogramSpec histogram_input(const at::Tensor& x) {
  kernels::HistogramSpec spec;
  spec.n = x.numel();
  spec.input_width = x.scalar_type() == at::kLong ? IndexWidth::int64 : IndexWidth::int32;
  spec.input_dtype = x.scalar_type() == at::kFloat ? DType::fp32 : DType::int32;
  return spec;
}

// histc(self, bins, min, max). fp32 as torch's CPU computes it; int32 / int64 as CUDA does (the
// CPU has no integer histc): same dtype out, integer min / max, which agrees with the CPU's fp32
// formula on the same values while |values| and (max - min) * bins stay below 2^24.
Results lower_histc(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  const int64_t bins = a[1].toInt();
  const double lo = a[2].toScalar().toDouble(), hi = a[3].toScalar().toDouble();
  const at::ScalarType t = self.scalar_type();
  if (!on_neuron(self) || (t != at::kFloat && t != at::kInt && t != at::kLong)) return std::nullopt;
  if (bins < 1 || bins > 4096 || !(lo < hi) || !std::isfinite(lo) || !std::isfinite(hi)) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor x = self.contiguous().reshape({-1});
  kernels::HistogramSpec spec = histogram_input(x);
  spec.bins = bins;
  spec.min = lo;
  spec.max = hi;
  if (t == at::kFloat) {
    if (!(float(lo) < float(hi))) return std::nullopt;
    spec.output_dtype = DType::fp32;
  } else {
    constexpr double kExact = double(1 << 24);
    if (lo != std::floor(lo) || hi != std::floor(hi) || std::abs(lo) >= kExact || std::abs(hi) >= kExact ||
        (hi - lo) * double(bins) >= kExact)
      return std::nullopt;
    if (t == at::kLong && x.numel() > 0) {
      at::Tensor h = host_alias(x);
      // The kernel reads the low words: values beyond int32 would alias in-range ones.
      if (h.min().item<int64_t>() < INT32_MIN || h.max().item<int64_t>() > INT32_MAX) return std::nullopt;
    }
    spec.output_dtype = DType::int32;
    spec.output_pairs = t == at::kLong;
  }
  at::Tensor y = at::empty({bins}, self.options());
  if (x.numel() == 0) return std::vector<at::Tensor>{y.zero_()};
  run_histogram(op, spec, x, at::Tensor(), y);
  return std::vector<at::Tensor>{y};
}

// bincount(self, weights, minlength): non-negative int32 / int64 1-D, fp32 weights.
Results lower_bincount(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor weights = a[1].isNone() ? at::Tensor() : a[1].toTensor();
  const int64_t minlength = a[2].toInt();
  if (!on_neuron(self) || !is_index_dtype(self) || self.dim() != 1 || minlength < 0) return std::nullopt;
  if (weights.defined() && (!on_neuron(weights) || weights.device() != self.device() ||
                            weights.scalar_type() != at::kFloat || weights.dim() != 1 ||
                            weights.size(0) != self.size(0)))
    return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor x = self.contiguous();
  const at::TensorOptions out_options = weights.defined() ? weights.options() : self.options().dtype(at::kLong);
  if (x.numel() == 0) return std::vector<at::Tensor>{at::zeros({minlength}, out_options)};
  at::Tensor h = host_alias(x);
  const int64_t lo = h.min().item<int64_t>(), hi = h.max().item<int64_t>();
  if (lo < 0) return std::nullopt;  // the CPU raises
  const int64_t bins = std::max(hi + 1, minlength);
  if (bins > 4096) return std::nullopt;
  kernels::HistogramSpec spec = histogram_input(x);
  spec.mode = kernels::HistogramMode::bincount;
  spec.bins = bins;
  spec.weighted = weights.defined();
  spec.output_dtype = weights.defined() ? DType::fp32 : DType::int32;
  spec.output_pairs = !weights.defined();
  at::Tensor y = at::empty({bins}, out_options);
  run_histogram(op, spec, x, weights.defined() ? weights.contiguous() : at::Tensor(), y);
  return std::vector<at::Tensor>{y};
}

// ---- arange, flip ----

// arange.start_out(start, end, step, out): integer-valued start and step (iota is exact on
// integers; a fractional step would need the CPU's double arithmetic), int64 / int32 / fp32 out.
Results lower_arange(const std::string& op, Args a) {
  at::Tensor out = a[3].toTensor();
  const c10::Scalar start = a[0].toScalar(), end = a[1].toScalar(), step = a[2].toScalar();
  const at::ScalarType t = out.scalar_type();
  if (!on_neuron(out) || (t != at::kLong && t != at::kInt && t != at::kFloat)) return std::nullopt;
  const double s = start.toDouble(), st = step.toDouble();
  double e = end.toDouble();
  if (!std::isfinite(s) || !std::isfinite(e) || !std::isfinite(st) || s != std::floor(s) || st != std::floor(st) ||
      st == 0)
    return std::nullopt;
  if ((st > 0 && e < s) || (st < 0 && e > s)) return std::nullopt;  // the CPU raises
  // The CPU's size formula (RangeFactories): for int64 the bounds are first converted to int64 (a
  // fractional end truncated: arange(3.1) has 3 elements) and the size is (end - start + step -
  // sign(step)) / step in int64 division; other dtypes take ceil((end - start) / step) in double.
  double n_d = std::ceil((e - s) / st);
  if (t == at::kLong) {
    e = std::trunc(e);
    n_d = std::trunc((e - s + st - (st > 0 ? 1 : -1)) / st);
  }
  const double limit = t == at::kFloat ? double(1 << 24) : double(INT32_MAX);
  const double last = s + st * std::max(0.0, n_d - 1);
  if (n_d > 1e9 || std::abs(s) > limit || std::abs(last) > limit) return std::nullopt;
  const int64_t n = int64_t(n_d);
  if (out.numel() != n) out.resize_({n});
  if (!out.is_contiguous()) return std::nullopt;
  if (n == 0) return std::vector<at::Tensor>{out};
  kernels::ArangeSpec spec;
  spec.n = n;
  spec.start = int64_t(s);
  spec.step = int64_t(st);
  spec.dtype = t == at::kFloat ? DType::fp32 : DType::int32;
  spec.pairs = t == at::kLong;
  const std::string key = "arange|" + key_of({n, spec.start, spec.step, int64_t(spec.dtype), spec.pairs});
  OpRecord record;
  record.op = op;
  record.dtype = c10::toString(t);
  execute_kernel(out.device().index(), key, kernels::invocation(kernels::arange_program, spec), {},
                 {*value_buffer("y", out)}, std::move(record));
  return std::vector<at::Tensor>{out};
}

// flip(self, dims): one strided HBM -> HBM DMA reading the flipped dims backwards.
Results lower_flip(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  if (!on_neuron(self) || !raw_dtype(self.scalar_type())) return std::nullopt;
  std::vector<bool> flipped(size_t(std::max<int64_t>(self.dim(), 1)), false);
  for (const c10::IValue& v : a[1].toListRef()) {
    const int64_t d = wrap_dim(v.toInt(), self.dim());
    if (flipped[size_t(d)]) return std::nullopt;  // the CPU raises on a repeated dim
    flipped[size_t(d)] = true;
  }
  c10::DeviceGuard guard(self.device());
  at::Tensor x = self.contiguous();
  at::Tensor y = at::empty(self.sizes(), self.options());
  if (y.numel() == 0 || self.dim() == 0) return std::vector<at::Tensor>{self.dim() == 0 ? x.clone() : y};
  const auto raw = *raw_dtype(self.scalar_type());
  kernels::FlipSpec spec;
  spec.dtype = raw.first;
  spec.elements = x.numel() * raw.second;
  for (int64_t d = 0; d < self.dim(); ++d) {
    const int64_t stride = x.stride(d) * raw.second;
    spec.dims.push_back({self.size(d), flipped[size_t(d)] ? -stride : stride, stride});
    if (flipped[size_t(d)]) spec.src_offset += (self.size(d) - 1) * stride;
  }
  if (raw.second == 2) spec.dims.push_back({2, 1, 1});  // the two words of an 8-byte element, in order
  std::ostringstream key;
  key << "flip|" << int(spec.dtype);
  for (const auto& c : spec.dims) key << "|" << c.size << "," << c.src_stride;
  execute_kernel(self.device().index(), key.str(), kernels::invocation(kernels::flip_program, spec),
                 {raw_buffer("x", x)}, {raw_buffer("y", y)}, record_for(op, {self}, self.scalar_type()));
  return std::vector<at::Tensor>{y};
}

// ---- nonzero ----

// nonzero(self) -> [count, ndim] int64: the count is read on the host (the output's size; torch's
// nonzero synchronises with the host on every device), the coordinates come from the kernel.
Results lower_nonzero(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  const at::ScalarType t = self.scalar_type();
  if (!on_neuron(self) || self.dim() == 0) return std::nullopt;
  DType dt;
  switch (t) {
    case at::kFloat: dt = DType::fp32; break;
    case at::kBFloat16: dt = DType::bf16; break;
    case at::kInt: case at::kLong: dt = DType::int32; break;
    case at::kBool: case at::kByte: dt = DType::uint8; break;
    default: return std::nullopt;
  }
  const int64_t n = self.numel();
  if (n >= (int64_t{1} << 24)) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor x = self.contiguous();
  const int64_t count = n == 0 ? 0 : at::count_nonzero(host_alias(x)).item<int64_t>();
  at::Tensor y = at::empty({count, self.dim()}, self.options().dtype(at::kLong));
  if (count == 0) return std::vector<at::Tensor>{y};
  kernels::NonzeroSpec spec;
  spec.shape = dims(self.sizes());
  spec.nonzeros = count;
  spec.dtype = dt;
  spec.pairs = t == at::kLong;
  const HostBuffer in{"x", x.data_ptr(), static_cast<size_t>(n * (spec.pairs ? 2 : 1)), dt};
  execute_kernel(self.device().index(), "nonzero|" + dims_key(self.sizes()) + key_of({count, int64_t(dt), spec.pairs}),
                 kernels::invocation(kernels::nonzero_program, spec), {in}, {*value_buffer("y", y)},
                 record_for(op, {self}, t));
  return std::vector<at::Tensor>{y};
}

// ---- topk ----

// topk(self, k, dim, largest, sorted): k <= 8 along any dim (moved last), fp32 / bf16, sorted.
// Equal values inside the top k take ascending positions (a second kernel resolves them, only when
// the first found a repeated position; the CPU orders such ties its own way, so indices may differ
// from its among equal values only). A tie across the k-th place (which element is in the top k is
// the CPU's choice) and NaN (which nc_find_index8 cannot find) go to the CPU.
Results lower_topk(const std::string& op, Args a) {
  const at::Tensor& self = a[0].toTensor();
  const int64_t k = a[1].toInt();
  const bool largest = a[3].toBool();
  // sorted=False leaves the order to the implementation: the kernel's (sorted) order is one.
  if (!on_neuron(self) || self.dim() == 0 || !accumulate_dtype(self.scalar_type())) return std::nullopt;
  const int64_t dim = wrap_dim(a[2].toInt(), self.dim());
  const int64_t n = self.size(dim);
  if (k < 1 || k > std::min<int64_t>(n, 8) || n > 16384) return std::nullopt;  // k == 0, k > n: the CPU
  c10::DeviceGuard guard(self.device());
  at::Tensor x = self.movedim(dim, -1).contiguous();
  const int64_t rows = x.numel() / n;
  std::vector<int64_t> shape = dims(x.sizes());
  shape.back() = k;
  at::Tensor values = at::empty(shape, self.options()), indices = at::empty(shape, self.options().dtype(at::kLong));
  auto result = [&] {
    return std::vector<at::Tensor>{values.movedim(-1, dim).contiguous(), indices.movedim(-1, dim).contiguous()};
  };
  if (rows == 0) return result();
  at::Tensor kth = at::empty({rows}, at::kFloat);
  auto run = [&](bool resolve_ties) {
    kernels::TopkSpec spec;
    spec.rows = rows;
    spec.n = n;
    spec.k = k;
    spec.dtype = *accumulate_dtype(self.scalar_type());
    spec.largest = largest;
    spec.resolve_ties = resolve_ties;
    execute_kernel(
        self.device().index(), "topk|" + key_of({rows, n, k, int64_t(spec.dtype), largest, resolve_ties}),
        kernels::invocation(kernels::topk_program, spec), {*value_buffer("x", x)},
        {*value_buffer("values", values), *value_buffer("indices", indices), *value_buffer("kth_count", kth)},
        record_for(resolve_ties ? op + ".ties" : op, {self}, self.scalar_type()));
  };
  run(false);
  at::Tensor v = host_alias(values).reshape({rows, k}).to(at::kFloat);
  if (at::any(at::isnan(v)).item<bool>()) return std::nullopt;
  const at::Tensor taken = (v == v.narrow(1, k - 1, 1)).sum(1).to(at::kFloat);
  if (at::any(kth > taken).item<bool>()) return std::nullopt;  // a tie across the k-th place
  at::Tensor found = std::get<0>(host_alias(indices).reshape({rows, k}).sort(-1));
  if (k > 1 && at::any(found.narrow(1, 1, k - 1) == found.narrow(1, 0, k - 1)).item<bool>()) run(true);
  return result();
}

// ---- sort ----

// sort.stable(self, *, stable, dim, descending) and its out= form sort.values_stable: a stable sort
// (a valid answer for stable=False too, as on CUDA) along any dim (moved last). fp32 / bf16 without
// NaN (which the rank comparisons cannot place), int32 / int64 below 2^24 in magnitude (exact in
// the engines' fp32).
Results lower_sort(const std::string& op, Args a, bool out_form) {
  const at::Tensor& self = a[0].toTensor();
  const at::ScalarType t = self.scalar_type();
  if (!on_neuron(self) || self.dim() == 0) return std::nullopt;
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kInt && t != at::kLong) return std::nullopt;
  const int64_t dim = wrap_dim(a[2].toInt(), self.dim());
  const bool descending = a[3].toBool();
  const int64_t n = self.size(dim);
  if (n > 16384) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  at::Tensor x = self.movedim(dim, -1).contiguous();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  if (rows * n >= (int64_t{1} << 24)) return std::nullopt;
  int64_t lo = 0, hi = 0;
  if (rows * n > 0) {
    at::Tensor h = host_alias(x);
    if (at::isFloatingType(t)) {
      if (at::any(at::isnan(h)).item<bool>()) return std::nullopt;
    } else {
      lo = h.min().item<int64_t>();
      hi = h.max().item<int64_t>();
      if (lo <= -(int64_t{1} << 24) || hi >= (int64_t{1} << 24)) return std::nullopt;
    }
  }
  // Integer keys over a short range (expert ids): the counting sort, O(n * keys) not O(n^2).
  const bool counting = !at::isFloatingType(t) && hi - lo + 1 <= 512;
  at::Tensor values = at::empty(x.sizes(), self.options());
  at::Tensor indices = at::empty(x.sizes(), self.options().dtype(at::kLong));
  if (rows * n > 0 && counting) {
    kernels::CountingSortSpec spec;
    spec.rows = rows;
    spec.n = n;
    spec.key_min = lo;
    spec.keys = hi - lo + 1;
    spec.pairs = t == at::kLong;
    spec.descending = descending;
    execute_kernel(self.device().index(), "counting_sort|" + key_of({rows, n, lo, spec.keys, spec.pairs, descending}),
                   kernels::invocation(kernels::counting_sort_program, spec), {*value_buffer("x", x)},
                   {*value_buffer("values", values), *value_buffer("indices", indices)}, record_for(op, {self}, t));
  } else if (rows * n > 0) {
    kernels::SortSpec spec;
    spec.rows = rows;
    spec.n = n;
    spec.pairs = t == at::kLong;
    spec.dtype = t == at::kFloat ? DType::fp32 : t == at::kBFloat16 ? DType::bf16 : DType::int32;
    spec.descending = descending;
    execute_kernel(self.device().index(), "sort|" + key_of({rows, n, int64_t(spec.dtype), spec.pairs, descending}),
                   kernels::invocation(kernels::sort_program, spec), {*value_buffer("x", x)},
                   {*value_buffer("values", values), *value_buffer("indices", indices)}, record_for(op, {self}, t));
  }
  values = values.movedim(-1, dim).contiguous();
  indices = indices.movedim(-1, dim).contiguous();
  if (!out_form) return std::vector<at::Tensor>{values, indices};
  at::Tensor out_values = a[4].toTensor(), out_indices = a[5].toTensor();
  if (!on_neuron(out_values) || !on_neuron(out_indices) || out_values.scalar_type() != t ||
      out_indices.scalar_type() != at::kLong)
    return std::nullopt;
  out_values.resize_(values.sizes());
  out_indices.resize_(indices.sizes());
  out_values.copy_(values);
  out_indices.copy_(indices);
  return std::vector<at::Tensor>{out_values, out_indices};
}

// Index tensors whose shapes do not broadcast, and other argument errors torch checks, surface as
// c10::Error from the ATen calls a lowering makes on the host side: the call then goes to the CPU
// untouched, which raises torch's own error with its own message.
template <typename F>
LowerFn cpu_checks_arguments(F f) {
  return [f](const std::string& op, LoweringArgs a) -> LoweredResults {
    try {
      return lowered(f(op, a));
    } catch (const c10::Error&) {
      return std::nullopt;
    }
  };
}

Lowering with_out_forms(Lowering r, std::vector<std::string> out_forms) {
  r.out_forms = std::move(out_forms);
  return r;
}

Lowering index_row(std::string op, LowerFn f) { return Lowering{std::move(op), std::move(f), {}, "", nullptr, true, std::nullopt, false}; }

}  // namespace

void lower_index_add_rows(const std::string& op, const at::Tensor& y, const at::Tensor& ids, const at::Tensor& src) {
  TORCH_CHECK(y.dim() == 2 && y.is_contiguous() && src.dim() == 2 && src.size(1) == y.size(1) &&
                  ids.numel() == src.size(0) && fits_int32(y.size(0)),
              "internal: lower_index_add_rows needs y [rows, D] contiguous, src [n, D] and n ids");
  if (ids.numel() == 0 || y.size(1) == 0) return;
  const at::Tensor on_device = ids.is_cpu() ? ids.to(y.device()) : ids;
  const Ids device_ids{on_device.reshape({-1}).contiguous(),
                       ids.scalar_type() == at::kLong ? IndexWidth::int64 : IndexWidth::int32, false};
  run_scatter(op, y, y.size(0), y.size(1), device_ids, src.contiguous(), true);
}

std::vector<Lowering> index_lowerings() {
  auto scatter = [](ScatterKind kind, bool inplace, bool is_value) {
    return cpu_checks_arguments([=](const std::string& op, Args a) { return lower_scatter(op, a, kind, inplace, is_value); });
  };
  auto sort = [](bool out_form) {
    return cpu_checks_arguments([=](const std::string& op, Args a) { return lower_sort(op, a, out_form); });
  };
  return {
      index_row("index.Tensor", cpu_checks_arguments(lower_index)),
      index_row("_index_put_impl_", cpu_checks_arguments(lower_index_put)),
      index_row("gather", cpu_checks_arguments(lower_gather)),
      index_row("scatter.src", scatter(ScatterKind::plain, false, false)),
      index_row("scatter_.src", scatter(ScatterKind::plain, true, false)),
      index_row("scatter.value", scatter(ScatterKind::plain, false, true)),
      index_row("scatter_.value", scatter(ScatterKind::plain, true, true)),
      index_row("scatter_add", scatter(ScatterKind::add, false, false)),
      index_row("scatter_add_", scatter(ScatterKind::add, true, false)),
      index_row("scatter_reduce.two", scatter(ScatterKind::reduce, false, false)),
      index_row("scatter_reduce_.two", scatter(ScatterKind::reduce, true, false)),
      index_row("index_add", cpu_checks_arguments([](const std::string& op, Args a) { return lower_index_add(op, a, false); })),
      index_row("index_add_", cpu_checks_arguments([](const std::string& op, Args a) { return lower_index_add(op, a, true); })),
      with_out_forms(index_row("index_copy", cpu_checks_arguments([](const std::string& op, Args a) { return lower_index_copy(op, a, false); })),
                     {"index_copy.out"}),
      index_row("index_copy_", cpu_checks_arguments([](const std::string& op, Args a) { return lower_index_copy(op, a, true); })),
      index_row("histc", cpu_checks_arguments(lower_histc)),
      index_row("bincount", cpu_checks_arguments(lower_bincount)),
      index_row("arange.start_out", cpu_checks_arguments(lower_arange)),
      index_row("flip", cpu_checks_arguments(lower_flip)),
      index_row("topk", cpu_checks_arguments(lower_topk)),
      index_row("nonzero", cpu_checks_arguments(lower_nonzero)),
      index_row("sort.stable", sort(false)),
      index_row("sort.values_stable", sort(true)),
  };
}

}  // namespace trnsim::frontend
