"""runtime/benchmarking.py, the one timing toolkit: its bookkeeping on the CPU, and on a GPU
that graph replays and queued calls both give GPU time (no host gaps), while back-to-back
calls of a tiny kernel are dominated by the host."""

import math

import pytest
import torch

from inductor_mm_plugin.runtime import benchmarking


def test_interleaved_reverses_the_order_and_stops_when_asked():
    order = []

    def timer(name):
        return lambda: order.append(name) or float(len(order))

    times = benchmarking.interleaved({"a": timer("a"), "b": timer("b")}, 4)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert benchmarking.ratios(times, "a", "b") == [1 / 2, 4 / 3, 5 / 6, 8 / 7]
    order.clear()
    stopped = benchmarking.interleaved({"a": timer("a"), "b": timer("b")}, 5, stop=lambda t: len(t["a"]) == 2)
    assert len(stopped["a"]) == len(stopped["b"]) == 2


def test_mirrored_rounds_cancel_a_clock_drifting_within_a_round():
    """Each round's order then its reverse: under a clock that slows by 5% a timing, per-round
    ratios read the true ratio (1.25) exactly, where plain rounds alternate around it; any
    number of arms."""
    calls = []

    def timer(name, base):
        return lambda: calls.append(name) or base * (1 + 0.05 * (len(calls) - 1))

    arms = {"stock": timer("stock", 5.0), "plugin": timer("plugin", 4.0), "again": timer("again", 5.0)}
    times = benchmarking.interleaved(arms, 3, mirrored=True)
    assert calls[:6] == ["stock", "plugin", "again", "again", "plugin", "stock"]
    assert calls[6:12] == ["again", "plugin", "stock", "stock", "plugin", "again"]
    assert benchmarking.ratios(times, "stock", "plugin") == pytest.approx([1.25] * 3)
    assert benchmarking.ratios(times, "stock", "again") == pytest.approx([1.0] * 3)
    calls.clear()
    plain = benchmarking.ratios(benchmarking.interleaved({k: arms[k] for k in ("stock", "plugin")}, 3), "stock", "plugin")
    assert plain[0] < 1.25 < plain[1] and plain[2] < 1.25  # the drift, in whichever arm came second
    calls.clear()
    stopped = benchmarking.interleaved(arms, 5, stop=lambda t: len(t["stock"]) == 2, mirrored=True)
    assert len(calls) == 12 and all(len(v) == 2 for v in stopped.values())


def test_statistics():
    assert benchmarking.quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert benchmarking.quantile([1.0, 2.0], 0.2) == pytest.approx(1.2)
    assert math.isnan(benchmarking.quantile([], 0.5))
    assert benchmarking.geomean([1.0, 4.0, float("nan"), 0.0]) == pytest.approx(2.0)


@pytest.mark.parametrize("shape,stride,offset", [((4, 6), (6, 1), 0), ((4, 6), (1, 4), 3), ((3, 5), (8, 1), 2),
                                                 ((0, 5), (5, 1), 0), ((2, 3, 4), (12, 1, 3), 1)])  # fmt: skip
def test_operand_has_the_exact_layout(shape, stride, offset):
    t = benchmarking.operand(shape, stride, offset, torch.float16, "cpu")
    assert (tuple(t.shape), t.stride(), t.storage_offset()) == (shape, stride, offset)
    assert t.untyped_storage().nbytes() == benchmarking.extent(shape, stride, offset) * 2
    if t.numel():
        assert t.abs().sum() > 0  # random, never zeros


@pytest.mark.gpu
def test_gpu_time_is_the_same_queued_or_replayed_and_beats_the_host():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    big = [lambda: torch.mm(a, a)]
    replayed = benchmarking.Timer(big)
    queued = benchmarking.Timer(big, reps=replayed.reps, graphs=False)
    assert replayed.how == "graphs" and queued.how == "queued"
    g, q = (benchmarking.median([t() for _ in range(5)]) for t in (replayed, queued))
    assert abs(g / q - 1) < 0.1, (g, q)
    # A kernel shorter than its launch: back-to-back calls between events read the host's
    # cost; a graph replay reads the kernel's.
    x = torch.randn(16, device="cuda")
    tiny = [lambda: x.add_(1)]
    kernel_us = benchmarking.median([benchmarking.Timer(tiny)() for _ in range(3)])
    host = benchmarking.host_us(tiny, 64)
    assert kernel_us < host, (kernel_us, host)


@pytest.mark.gpu
def test_copies_span_twice_the_l2():
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert benchmarking.copies(l2 // 4, "cuda") == 8
    assert benchmarking.copies(10 * l2, "cuda") == 1
    assert benchmarking.copies(1, "cuda") == benchmarking.MOST_COPIES
