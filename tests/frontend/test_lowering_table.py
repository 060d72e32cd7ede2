"""The lowering table (frontend/lowering/lowering.h): what trnsim.lowered_ops() lists is what the
dispatcher runs, each op once, and a kernel builder's refusal (KernelUnsupported) is a counted
fallback with the kernel's reason, while the result stays the CPU's."""
import warnings

import pytest
import torch

import trnsim


def test_rows_are_unique_aten_ops_registered_on_the_device():
    rows = trnsim.lowered_ops()
    assert len(rows) > 250
    names = [r["op"] for r in rows] + [o for r in rows for o in r["out_forms"]]
    assert len(names) == len(set(names)), "an op is in two rows"
    for name in names:
        base, _, overload = name.partition(".")
        schema = torch._C._get_schema("aten::" + base, overload)  # raises for a name ATen lacks
        assert (schema.name, schema.overload_name) == ("aten::" + base, overload)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1"), name
    families = {r["family"] for r in rows}
    assert {"matmul", "elementwise", "reduction", "norm", "attention", "conv", "optimizer", "index"} <= families


def test_out_forms_take_the_functional_schema_plus_out():
    for r in trnsim.lowered_ops():
        base, _, overload = r["op"].partition(".")
        functional = torch._C._get_schema("aten::" + base, overload)
        for out in r["out_forms"]:
            ob, _, oo = out.partition(".")
            schema = torch._C._get_schema("aten::" + ob, oo)
            assert len(schema.arguments) == len(functional.arguments) + 1, out
            assert schema.arguments[-1].name in ("out", "grad_input"), out


def test_kernel_refusal_is_a_counted_fallback_with_the_reason():
    # An SBUF of 64 bytes per partition leaves no room for any element-wise tile: the builder throws
    # KernelUnsupported, the op runs on the CPU (same values), counted, and the warning says why.
    try:
        trnsim.set_config("trn2", ["core.sbuf.bytes_per_partition=64"])
        x = torch.randn(64, 64)
        d = x.to("neuron")
        trnsim.reset_fallback_report()
        trnsim.set_fallback_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = torch.exp(d)
        assert torch.equal(y.cpu(), torch.exp(x))
        assert trnsim.fallback_report().get("aten::exp", 0) == 1
        assert any("SBUF" in str(w.message) for w in caught), [str(w.message) for w in caught]
    finally:
        trnsim.set_config("trn2")
        trnsim.reset_fallback_report()
