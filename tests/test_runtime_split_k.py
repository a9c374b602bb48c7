"""runtime/split_k.py: split-K's per-tile counters, zeroed once and reused by every launch on a
stream, counters of their own for launches captured into CUDA graphs; on the GPU, split-K
launches under graph capture, on two streams at once and under CUDA-graph trees."""

import dataclasses
import threading

import pytest
import torch
from cases import DTYPES, operand, poisoned, randn
from conftest import DEVICE, HAS_CUDA

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import MatmulConfig
from inductor_mm_plugin.configs.hopper import INTERPRETER_TMA
from inductor_mm_plugin.ops.reference import assert_matmul_close
from inductor_mm_plugin.runtime import split_k
from inductor_mm_plugin.runtime.device import raw_stream

SPLIT_CONFIG = MatmulConfig("tma", 64, 128, 64, 4, 4, 3, split_k=3) if HAS_CUDA else dataclasses.replace(
    INTERPRETER_TMA, split_k=3)  # fmt: skip


def _stream_region():
    dev = torch.empty(0, device=DEVICE).device  # with its index, as the launcher's operands have
    return split_k._by_stream[(dev.type, dev.index or 0, raw_stream(dev))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_k_counters_are_reused_and_return_to_zero(dtype):
    """Every launch on one stream takes the same counters (no memset per launch), so each
    launch must leave them at zero: fresh inputs, poisoned outputs, then the region is read."""
    M, N, K = (40, 24, 200) if not HAS_CUDA else (256, 256, 4096)
    split_k.clear()
    runtime.clear_plans()
    pointers = set()
    for _ in range(3):
        a, b = operand(M, K, dtype), operand(K, N, dtype)
        out = poisoned(M, N, dtype=dtype)
        plan = runtime.launch(a, b, out, config=SPLIT_CONFIG)
        assert plan.cfg.split_k > 1
        assert_matmul_close(out, a, b)
        region = _stream_region()
        pointers.add(region.data_ptr())
        assert int(region.abs().sum()) == 0
    assert len(pointers) == 1


def test_split_k_counters_of_two_plans_share_the_stream_region():
    # Launches on one stream run in order, so plans of different tile counts share a region.
    split_k.clear()
    first = split_k.counters(torch.device(DEVICE), 7, stream=0)
    second = split_k.counters(torch.device(DEVICE), 30, stream=0)
    other_stream = split_k.counters(torch.device(DEVICE), 30, stream=1)
    assert first.data_ptr() == second.data_ptr() != other_stream.data_ptr()
    assert first.shape == (7,) and second.shape == (30,) and int(second.abs().sum()) == 0


def test_split_k_counters_for_a_large_grid_are_fresh(monkeypatch):
    monkeypatch.setattr(split_k, "REGION", 8)
    split_k.clear()
    one, two = (split_k.counters(torch.device(DEVICE), 9) for _ in range(2))
    assert one.data_ptr() != two.data_ptr() and int(one.abs().sum()) == int(two.abs().sum()) == 0
    assert not split_k._by_stream  # the region is not even allocated


def test_counters_are_allocated_on_a_thread_of_their_own_and_its_errors_come_back():
    # CUDA-graph trees route the warming-up thread's allocations into their pool; the
    # counters come from another thread, whose exception must reach the launch.
    assert split_k._on_own_thread(threading.get_ident) != threading.get_ident()
    with pytest.raises(ZeroDivisionError):
        split_k._on_own_thread(lambda: 1 // 0)


def test_captured_split_k_launches_take_counters_of_their_own(monkeypatch):
    """Under capture each launch gets reserve counters no one else ever gets: not the stream's
    region (eager launches run beside graph replays), not another captured launch's."""
    dev = torch.device(DEVICE)
    monkeypatch.setattr(split_k, "REGION", 64)
    monkeypatch.setattr(split_k, "RESERVE_CHUNK", 164)
    split_k.clear()
    region = split_k.counters(dev, 10)  # an eager launch fills the reserve
    capturing = {"on": True}
    monkeypatch.setattr(split_k, "_capturing", lambda device: capturing["on"])
    taken = [split_k.counters(dev, n) for n in (10, 40, 60)]
    spans = sorted((t.data_ptr(), t.data_ptr() + 4 * t.numel()) for t in [region[:64], *taken])
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:])), "counters overlap"
    assert all(int(t.abs().sum()) == 0 for t in taken)
    # Each starts 16-byte aligned (10 counters take 12): Triton specializes pointers on it.
    assert all(t.data_ptr() % 16 == 0 for t in taken), [t.data_ptr() % 16 for t in taken]
    # 52 counters left in the reserve: a capture that needs 60 zeroes its own.
    fresh = split_k.counters(dev, 60)
    assert int(fresh.abs().sum()) == 0 and all(fresh.data_ptr() != t.data_ptr() for t in taken)
    assert split_k._reserve[(dev.type, dev.index or 0)][1] == 112
    # The next eager launch refills the reserve (less than a region left); the spent chunk,
    # which captured graphs still use, is kept alive.
    capturing["on"] = False
    assert split_k.counters(dev, 10).data_ptr() == region.data_ptr()
    assert split_k._reserve[(dev.type, dev.index or 0)][1] == 0
    assert any(k.data_ptr() <= taken[0].data_ptr() < k.data_ptr() + 4 * k.numel() for k in split_k._kept)


# -------------------------------------------------------------------------- GPU only


def _spy_on_counters(monkeypatch):
    """Every split-K launch's counters, with whether it was being captured."""
    seen = []
    real = split_k.counters

    def spy(device, tiles, stream=0):
        t = real(device, tiles, stream)
        seen.append((split_k._capturing(device), t.data_ptr()))
        return t

    monkeypatch.setattr(split_k, "counters", spy)
    return seen


@pytest.mark.gpu
def test_split_k_under_cuda_graph_capture(monkeypatch):
    """Two captured graphs and eager launches in between, every replay on fresh inputs: each
    captured launch has counters of its own, none of them the stream's."""
    dt = torch.bfloat16
    M, N, K = 16, 1024, 8192
    cfg = MatmulConfig("tma", 16, 64, 256, 1, 4, 4, split_k=4)
    seen = _spy_on_counters(monkeypatch)
    a, b = randn(M, K, dtype=dt), randn(N, K, dtype=dt).t()
    a2 = randn(M, K, dtype=dt)
    outs = [torch.empty(M, N, dtype=dt, device="cuda") for _ in range(2)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        runtime.launch(a, b, outs[0], config=cfg)  # compile and fill the reserve outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graphs = [torch.cuda.CUDAGraph() for _ in range(2)]
    for graph, x, out in zip(graphs, (a, a2), outs):
        with torch.cuda.graph(graph, stream=stream):
            runtime.launch(x, b, out, config=cfg)
    captured = [ptr for capturing, ptr in seen if capturing]
    eager = {ptr for capturing, ptr in seen if not capturing}
    assert len(captured) == 2 and len(set(captured)) == 2 and not eager & set(captured)
    for _ in range(3):
        a.normal_()
        a2.normal_()
        for out in outs:
            out.fill_(float("nan"))
        graphs[0].replay()
        eager_out = runtime.mm_launch(a2, b)  # the stream's counters, between two replays
        graphs[1].replay()
        torch.cuda.synchronize()
        assert_matmul_close(outs[0], a, b)
        assert_matmul_close(outs[1], a2, b)
        assert_matmul_close(eager_out, a2, b)


@pytest.mark.gpu
def test_split_k_on_two_streams_at_once():
    """Launches on two streams overlap on the GPU; each stream has counters of its own."""
    dt = torch.bfloat16
    M, N, K = 8, 2048, 16384
    cfg = MatmulConfig("tma", 16, 64, 256, 1, 4, 4, split_k=4)
    b = randn(N, K, dtype=dt).t()
    streams = [torch.cuda.Stream() for _ in range(2)]
    xs = [[randn(M, K, dtype=dt) for _ in range(8)] for _ in streams]
    outs = [[poisoned(M, N, dtype=dt) for _ in range(8)] for _ in streams]
    runtime.launch(xs[0][0], b, outs[0][0], config=cfg)  # compile first
    torch.cuda.synchronize()
    for i in range(8):
        for s, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                runtime.launch(xs[s][i], b, outs[s][i], config=cfg)
    torch.cuda.synchronize()
    for s in range(2):
        for x, out in zip(xs[s], outs[s]):
            assert_matmul_close(out, x, b)


@pytest.mark.gpu
def test_split_k_under_reduce_overhead_cuda_graph_trees(monkeypatch):
    """CUDA-graph trees warm up in their private memory pool and reject a live tensor there
    that is not an output: the reused counters must come from outside it."""
    from torch._inductor.utils import run_and_get_code

    seen = _spy_on_counters(monkeypatch)
    dt = torch.bfloat16
    lin = torch.nn.Linear(4096, 1024, bias=False, device="cuda", dtype=dt)
    x = randn(16, 4096, dtype=dt)
    runtime.mm_launch(x, lin.weight.t())
    assert runtime.chosen_config(x, lin.weight.t()).split_k > 1
    split_k.clear()  # the first counters are then allocated inside the trees' warm-up
    torch._dynamo.reset()
    compiled = torch.compile(lin, backend="inductor_mm_plugin", options={"compete": False, "triton.cudagraphs": True})
    with torch.no_grad():
        _, codes = run_and_get_code(compiled, x)
        assert "inductor_mm_plugin" in "\n".join(codes)
        for _ in range(4):  # warm-up, recording, then replays
            x.normal_()
            out = compiled(x).clone()
            assert_matmul_close(out, x, lin.weight.t())
    assert any(capturing for capturing, _ in seen), "no split-K launch was captured"
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_k_results_are_the_same_bits_every_run(dtype):
    """The last slice to arrive sums the partials in slice order, so which slice came last
    (it changes from run to run on the GPU: 64 tiles x 4 slices over 132 SMs) never shows
    in the result: the same inputs give the same bits, launch after launch."""
    M, N, K = (40, 24, 200) if not HAS_CUDA else (512, 512, 16384)
    config = dataclasses.replace(SPLIT_CONFIG, split_k=4)
    runtime.clear_plans()
    a, b = operand(M, K, dtype), operand(K, N, dtype)
    first = poisoned(M, N, dtype=dtype)
    runtime.launch(a, b, first, config=config)
    assert_matmul_close(first, a, b)
    for _ in range(3 if not HAS_CUDA else 50):
        again = poisoned(M, N, dtype=dtype)
        runtime.launch(a, b, again, config=config)
        assert torch.equal(again, first)
