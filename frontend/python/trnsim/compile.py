"""``torch.compile`` for the device: ``torch.compile(model, backend=trnsim.compile_backend)``.

Dynamo captures the graph and AOT autograd splits it into forward and backward graphs of ATen
ops; the graphs then run op by op on the device, each op lowered to its kernel as in eager mode
(no fusion across ops yet, so the simulated time equals eager's). Inductor, torch.compile's
default backend, has no code generator for "neuron" (torch 2.13 stops with an ``AssertionError``
in ``torch/_inductor/codegen/common.py``: no scheduling for the device).
"""

_BACKEND = None


def compile_backend(gm, example_inputs):
    """A torch.compile backend (a callable, so importing trnsim does not import torch._dynamo)."""
    global _BACKEND
    if _BACKEND is None:
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func

        def run_graph(graph, _inputs):
            return make_boxed_func(graph.forward)

        _BACKEND = aot_autograd(fw_compiler=run_graph, bw_compiler=run_graph)
    return _BACKEND(gm, example_inputs)
