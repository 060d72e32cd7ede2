// The c10d Backend under trnsim.distributed's process group. c10d's Python API calls the process group's Python
// methods directly, but its C++ (functional collectives, DTensor, FSDP2's all_gather_into_tensor and
// reduce_scatter_tensor) reaches some collectives through the dispatcher, which asks the process group for its
// backend of the tensors' device. This backend forwards each collective to the Python process group's method of
// the same job, so every collective has one implementation (frontend/python/trnsim/distributed.py).
//
// The one translation unit that includes torch's Python headers (it links libtorch_python).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PyProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace trnsim::frontend {
namespace {

class ForwardingBackend final : public c10d::Backend {
 public:
  // `group`: the Python process group; held weakly (it holds this backend).
  ForwardingBackend(const py::object& group, int rank, int size)
      : c10d::Backend(rank, size), m_group(py::weakref(group)) {}

  ~ForwardingBackend() override {
    py::gil_scoped_acquire gil;
    m_group = py::weakref();
  }

  const std::string getBackendName() const override { return "neuron"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    return call("broadcast", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    return call("allreduce", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    c10d::AllreduceOptions single;
    single.reduceOp = opts.reduceOp;
    return call("allreduce", tensors, single);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    return call("reduce", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override {
    return call("allgather", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return call("all_gather_single", output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    return call("all_gather_single_coalesced", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter_single", output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter_single_coalesced", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    return call("all_to_all_single", output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    return call("alltoall", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return call("gather", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return call("scatter", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override {
    return call("send", tensors, dst_rank, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override {
    return call("recv", tensors, src_rank, tag);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override { return call("barrier", opts); }

 private:
  template <class... Args>
  c10::intrusive_ptr<c10d::Work> call(const char* method, Args&&... args) {
    py::gil_scoped_acquire gil;
    py::object group = m_group();
    if (group.is_none()) throw std::runtime_error(std::string("trnsim.distributed: ") + method +
                                                  " on a process group that no longer exists");
    py::object work = group.attr(method)(std::forward<Args>(args)...);
    return c10::make_intrusive<c10d::PyProcessGroup::PyWorkHolder>(work);
  }

  py::weakref m_group;
};

}  // namespace

void bind_distributed_backend(py::module_& m) {
  m.def("premul_sum_factor", [](const c10d::ReduceOp& op) -> py::object {
    // PREMUL_SUM's factor (dist._make_nccl_premul_sum): a float or a one-element tensor; None for other ops.
    if (op.op_ != c10d::ReduceOp::PREMUL_SUM || !op.supplement_) return py::none();
    const auto* supplement = static_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
    if (supplement->tensor_factor.defined()) return py::cast(supplement->tensor_factor);
    return py::float_(supplement->double_factor);
  }, py::arg("op"), "The factor of a PREMUL_SUM ReduceOp (None for other ops).");
  m.def("forwarding_backend", [](const py::object& group, int rank, int size) {
    return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<ForwardingBackend>(group, rank, size));
  }, py::arg("group"), py::arg("rank"), py::arg("size"),
     "A c10d Backend whose collectives call the Python process group `group`'s methods (trnsim.distributed).");
}

}  // namespace trnsim::frontend
