"""torch.neuron streams: a clock per stream, ordered by wait_stream / wait_event, ops of every stream
sharing the core (DeviceRuntime::set_stream, frontend/python/trnsim/device.py)."""
import pytest
import torch

import trnsim


def _kernels():
    return [r for r in trnsim.op_log() if r["kind"] == "kernel"]


@pytest.fixture(autouse=True)
def _fresh_clock():
    trnsim.reset_simulated_time()
    yield
    torch.neuron.set_stream(torch.neuron.default_stream())


def test_a_side_stream_has_its_own_clock_and_shares_the_core():
    a = torch.randn(256, 256, device="neuron")
    side = torch.neuron.Stream()
    assert side != torch.neuron.current_stream()
    before = trnsim.simulated_ns()
    side.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(side):
        assert torch.neuron.current_stream() == side
        b = a @ a
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    assert trnsim.simulated_ns() == before  # the default stream did not run it
    side_kernel = _kernels()[-1]
    assert side_kernel["start_ns"] == pytest.approx(before)
    c = a + 1  # the default stream's next op: the core is busy with the side stream's matmul until it ends
    add = _kernels()[-1]
    assert add["start_ns"] == pytest.approx(side_kernel["start_ns"] + side_kernel["ns"])
    assert trnsim.simulated_ns() == pytest.approx(add["start_ns"] + add["ns"])
    del b, c


def test_wait_event_orders_the_default_stream_after_the_side_stream():
    a = torch.randn(128, 128, device="neuron")
    side = torch.neuron.Stream()
    side.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(side):
        for _ in range(3):
            a = a @ a
        done = side.record_event()
    side_end = done._ns
    start = torch.neuron.Event()
    start.record()
    torch.neuron.current_stream().wait_event(done)
    assert trnsim.simulated_ns() == pytest.approx(side_end)
    waits = [r for r in trnsim.op_log() if r["kind"] == "wait"]
    assert waits and waits[-1]["op"] == "wait event"
    assert waits[-1]["start_ns"] + waits[-1]["ns"] == pytest.approx(side_end)
    end = torch.neuron.Event()
    end.record()
    assert start.elapsed_time(end) == pytest.approx((side_end - start._ns) / 1e6)


def test_exposed_communication_is_only_the_wait_on_collectives():
    """Issue 39 item 5. The default stream waits (wait_event) for a side stream that computes, waits on a
    collective ending 5 us after its first kernel, and computes again: of that wait only the 5 us are exposed
    communication; the side stream's two kernels are a wait on another stream's compute."""
    a = torch.randn(128, 128, device="neuron")
    side = torch.neuron.Stream()
    side.wait_stream(torch.neuron.current_stream())
    start_ns = trnsim.simulated_ns()
    with trnsim.profile() as prof:
        with torch.neuron.stream(side):
            b = a @ a
            first = _kernels()[-1]
            collective_end_ns = first["start_ns"] + first["ns"] + 5000.0
            trnsim._C.wait_collective(a.device.index, collective_end_ns, "all_gather")
            c = b @ b
            second = _kernels()[-1]
            done = side.record_event()
        torch.neuron.current_stream().wait_event(done)
    end_ns = second["start_ns"] + second["ns"]
    assert first["start_ns"] == pytest.approx(start_ns) and second["start_ns"] == pytest.approx(collective_end_ns)
    assert trnsim.simulated_ns() == pytest.approx(end_ns)
    totals = prof.totals()
    assert totals["exposed_communication_ns"] == pytest.approx(5000.0)
    assert totals["stream_wait_ns"] == pytest.approx(first["ns"] + second["ns"])
    # The default stream's wait in three pieces: the side's kernel, the collective, the side's kernel.
    waits = [r for r in prof.records if r["kind"] == "wait"]
    assert [r["bottleneck"] for r in waits] == ["stream", "collective", "stream"]
    first_end_ns = first["start_ns"] + first["ns"]
    assert [r["start_ns"] for r in waits] == pytest.approx([start_ns, first_end_ns, collective_end_ns])
    assert [r["ns"] for r in waits] == pytest.approx([first["ns"], 5000.0, second["ns"]])
    del c


def test_exposed_communication_carries_through_streams_to_synchronize():
    """A stream that waits for a stream waiting on a collective waits on that collective too: the default stream's
    synchronize (waiting for the stream that ends last) is exposed communication over the collective's 5 us only."""
    a = torch.randn(128, 128, device="neuron")
    gather, compute = torch.neuron.Stream(), torch.neuron.Stream()
    gather.wait_stream(torch.neuron.current_stream())
    compute.wait_stream(torch.neuron.current_stream())
    start_ns = trnsim.simulated_ns()
    with trnsim.profile() as prof:
        with torch.neuron.stream(gather):
            trnsim._C.wait_collective(a.device.index, start_ns + 5000.0, "all_gather")
        with torch.neuron.stream(compute):
            compute.wait_stream(gather)
            b = a @ a
            kernel = _kernels()[-1]
        torch.neuron.synchronize()
    assert kernel["start_ns"] == pytest.approx(start_ns + 5000.0)
    assert trnsim.simulated_ns() == pytest.approx(kernel["start_ns"] + kernel["ns"])
    totals = prof.totals()
    assert totals["exposed_communication_ns"] == pytest.approx(5000.0)
    assert totals["stream_wait_ns"] == pytest.approx(kernel["ns"])
    del b


def test_synchronize_joins_every_stream():
    a = torch.randn(128, 128, device="neuron")
    side = torch.neuron.Stream()
    with torch.neuron.stream(side):
        b = a @ a
    ends = _kernels()[-1]
    torch.neuron.synchronize()
    assert trnsim.simulated_ns() == pytest.approx(ends["start_ns"] + ends["ns"])
    del b


def test_one_stream_runs_as_before():
    a = torch.randn(64, 64, device="neuron")
    b = a @ a
    c = b + 1
    k = _kernels()
    for first, second in zip(k, k[1:]):
        assert second["start_ns"] == pytest.approx(first["start_ns"] + first["ns"])
    del c


def test_a_torch_stream_of_the_device_runs_on_its_own_clock():
    """torch.Stream("neuron") (what DDP makes to copy inputs) has an id apart from torch.neuron.Stream's."""
    s = torch.Stream("neuron")
    assert s.stream_id != torch.neuron.Stream().stream_id
    before = trnsim.simulated_ns()
    with torch.neuron.stream(s):
        x = torch.ones(64, 64, device="neuron") @ torch.ones(64, 64, device="neuron")
    assert trnsim.simulated_ns() == before
    assert torch.equal(x.cpu(), torch.full((64, 64), 64.0))
