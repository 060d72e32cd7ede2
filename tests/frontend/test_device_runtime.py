"""The device runtime (frontend/device_runtime.h) owns the device's state; set_config installs a new
one and hands the session over: live tensors' memory, the fallback's mode and counts, the clocks."""
import torch

import trnsim


def test_memory_of_live_tensors_survives_set_config():
    trnsim.set_config("trn2")
    before = trnsim._C.memory_stats(0)["allocated_bytes"]
    try:
        x = torch.empty(1024, 1024, device="neuron")  # 4 MiB
        assert trnsim._C.memory_stats(0)["allocated_bytes"] == before + 4 * 2**20
        trnsim.set_config("trn3")
        stats = trnsim._C.memory_stats(0)
        assert stats["allocated_bytes"] == before + 4 * 2**20
        assert stats["capacity_bytes"] == trnsim.config()["hbm_bytes_per_device"]
        del x
        assert trnsim._C.memory_stats(0)["allocated_bytes"] == before
    finally:
        trnsim.set_config("trn2")


def test_fallback_mode_and_counts_carry_over():
    trnsim.set_config("trn2")
    mode = trnsim._C.fallback_mode()
    try:
        trnsim.set_fallback_mode("allow")
        trnsim.reset_fallback_report()
        x = torch.randn(8, device="neuron")
        torch.fmax(x, -x)  # not lowered: the counted CPU fallback (as fmax.out)
        assert trnsim.fallback_report() == {"aten::fmax.out": 1}
        trnsim.set_config("trn3")
        assert trnsim._C.fallback_mode() == "allow"
        assert trnsim.fallback_report() == {"aten::fmax.out": 1}
    finally:
        trnsim.set_fallback_mode(mode)
        trnsim.reset_fallback_report()
        trnsim.set_config("trn2")


def test_clock_carries_over_and_the_config_is_the_new_one():
    trnsim.set_config("trn2")
    try:
        x = torch.randn(256, 256, device="neuron")
        (x @ x).cpu()
        t = trnsim.simulated_ns()
        assert t > 0
        trnsim.set_config("trn3")
        assert trnsim.simulated_ns() == t
        assert trnsim.config()["name"] == "trn3"
    finally:
        trnsim.set_config("trn2")
