"""GPU reliability: what the launcher caches must never outlive what it describes.

The launcher keeps, per call signature, a launch plan and (for the TMA kernel) each
operand's encoded tensormap by data pointer (runtime/plan.py, ``Plan._tensormap``). These
tests free operands and put tensors of other shapes, strides and dtypes at the same
address; run the ops from 8 threads on 8 streams at once; and replay CUDA graphs whose
memory is reused between and across captures. Every result is checked against the float64
reference (ops/reference.py).

Run on a GPU machine:  pytest -m gpu tests/test_gpu_reliability.py
"""

import threading

import pytest
import torch
from cases import bias_of, randn

import inductor_mm_plugin  # noqa: F401  (registers the ops)
from inductor_mm_plugin import runtime
from inductor_mm_plugin.ops.reference import assert_matmul_close

ops = torch.ops.inductor_mm_plugin

pytestmark = pytest.mark.gpu

DT = torch.bfloat16
# (M, N, K): TMA tiles, and a decode shape the heuristic gives split-K (16x1024x8192).
SHAPES = [(256, 384, 512), (16, 1024, 8192)]


def _run(op, a, b, bias=None):
    """The op on (a, b) and its check; 3 calls, so the later ones take the direct launch
    with the tensormaps cached for these addresses."""
    for _ in range(3):
        if op == "mm":
            assert_matmul_close(ops.mm(a, b), a, b)
        else:
            assert_matmul_close(ops.addmm(bias, a, b, beta=0.5, alpha=2), a, b, bias, beta=0.5, alpha=2)


# -------------------------------------------------------- (a) a new tensor at an old address


def _views_of(buffer: torch.Tensor, M: int, K: int):
    """Tensors of other shapes, strides and dtypes over the same bytes: (name, a, K of a)."""
    elems = buffer.view(DT)
    return [
        ("same signature, new values", elems.view(M, K).normal_(), K),
        ("transposed strides", elems.view(K, M).normal_().t(), K),
        ("half the rows, twice the K", elems.view(M // 2, 2 * K).normal_(), 2 * K),
        ("float16 bytes", buffer.view(torch.float16).view(M, K).normal_(), K),
        ("one row shorter, offset by a row", elems.view(M, K)[1:].normal_(), K),
    ]


@pytest.mark.parametrize("op", ["mm", "addmm"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_new_tensor_at_the_same_address_gets_its_own_descriptor(op, M, N, K):
    """The first operand's bytes reinterpreted as tensors of other shapes, strides and
    dtypes, each used right after the last: a plan or tensormap kept for the address alone
    would read the old shape, strides or dtype."""
    buffer = torch.empty(M * K * 2, dtype=torch.uint8, device="cuda")
    for name, a, k in _views_of(buffer, M, K):
        assert a.data_ptr() in (buffer.data_ptr(), buffer.data_ptr() + K * 2), name
        b = randn(N, k, dtype=a.dtype).t()  # the nn.Linear layout
        bias = bias_of("N", a.shape[0], N, a.dtype)
        _run(op, a, b, bias)
    # And the weight: the same plan's second operand at the first's address.
    a = randn(M, K, dtype=DT)
    weight_bytes = torch.empty(K * N * 2, dtype=torch.uint8, device="cuda")
    for w in (weight_bytes.view(DT).view(N, K).normal_().t(), weight_bytes.view(DT).view(K, N).normal_()):
        _run(op, a, w, bias_of("N", M, N, DT))


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_freed_operand_reallocated_by_the_caching_allocator(M, N, K):
    """The same through torch's caching allocator: free the operand, allocate the same byte
    size with another shape and strides (the allocator hands the freed block back)."""
    b = randn(N, K, dtype=DT).t()
    a = randn(M, K, dtype=DT)
    _run("mm", a, b)
    address, nbytes = a.data_ptr(), a.numel() * a.element_size()
    del a
    reused = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    if reused.data_ptr() != address:
        pytest.skip("the caching allocator did not hand the freed block back; the test above reinterprets one buffer")
    a = reused.view(DT).view(K, M).normal_().t()  # same shape, transposed strides
    _run("mm", a, b)
    del a, reused
    reused = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    assert reused.data_ptr() == address
    a = reused.view(DT).view(M // 2, 2 * K).normal_()  # another shape
    _run("mm", a, randn(N, 2 * K, dtype=DT).t())


# ------------------------------------------------------------ (b) threads on their own streams


def test_threads_on_their_own_streams():
    """8 threads, each on a stream of its own with shapes of its own (split-K ones too:
    per-stream counters), 12 calls each on fresh inputs, all started together."""
    threads, calls = 8, 12
    start = threading.Barrier(threads)
    failures = []

    def shape_of(i):
        # Thread i: shapes no other thread has; odd threads a split-K decode shape.
        return (8 + i, 1024 + 64 * i, 8192) if i % 2 else (96 + 16 * i, 320 + 32 * i, 256 + 64 * i)

    def work(i):
        M, N, K = shape_of(i)
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                start.wait(timeout=120)
                for j in range(calls):
                    a, b = randn(M, K, dtype=DT), randn(N, K, dtype=DT).t()
                    if j % 3 == 0:
                        assert_matmul_close(ops.mm(a, b), a, b)
                    elif j % 3 == 1:
                        bias = bias_of("N", M, N, DT)
                        out = ops.addmm(bias, a, b, beta=0.5, alpha=2)
                        assert_matmul_close(out, a, b, bias, beta=0.5, alpha=2)
                    else:
                        a3, b3 = randn(3, M, K, dtype=DT), randn(3, K, N, dtype=DT)
                        assert_matmul_close(ops.bmm(a3, b3), a3, b3)
            stream.synchronize()
        except Exception as e:  # noqa: BLE001  (reported below, with the thread)
            failures.append(f"thread {i} ({M}x{N}x{K}): {type(e).__name__}: {str(e)[:500]}")

    # Plan and compile each thread's shapes first: compiling is not what this test is about.
    for i in range(threads):
        M, N, K = shape_of(i)
        a, b = randn(M, K, dtype=DT), randn(N, K, dtype=DT).t()
        ops.mm(a, b)
        ops.addmm(bias_of("N", M, N, DT), a, b, beta=0.5, alpha=2)
        ops.bmm(randn(3, M, K, dtype=DT), randn(3, K, N, dtype=DT))
    torch.cuda.synchronize()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    torch.cuda.synchronize()
    assert not failures, "\n".join(failures)


# ----------------------------------------------- (c) CUDA graphs: replays, reuse, a shared pool


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_cuda_graphs_replay_new_data_with_memory_reused(M, N, K):
    """Graph 1: two chained matmuls whose intermediate is freed during the capture, so the
    third matmul's output may take its memory. Graph 2, captured into graph 1's pool: an
    addmm of another shape, whose memory may be graph 1's freed intermediate. Replayed in
    capture order (what a shared pool requires), three times, after copying new data into
    the static inputs; each output checked after each replay."""
    x = randn(M, K, dtype=DT)
    # w1 = the first N columns of the identity (N <= K): h = x[:, :N] exactly, whatever the
    # summation order (split-K), so y can be checked against x[:, :N] @ w2.
    w1 = torch.eye(N, K, dtype=DT, device="cuda").t()
    w2 = randn(K, N, dtype=DT).t()  # (N, K)
    x2 = randn(2 * M, K, dtype=DT)
    w3, bias3 = randn(N, K, dtype=DT).t(), bias_of("N", 2 * M, N, DT)

    def graph1():
        h = ops.mm(x, w1)  # (M, N), freed below
        y = ops.mm(h, w2)  # (M, K)
        del h
        z = ops.mm(x, w1)  # (M, N): the allocator may give it h's block
        return y, z

    def graph2():
        return ops.addmm(bias3, x2, w3, beta=0.5, alpha=2)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # plan, compile and fill the split-K reserve outside the captures
            graph1(), graph2()
    torch.cuda.current_stream().wait_stream(stream)
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, stream=stream):
        y, z = graph1()
    with torch.cuda.graph(g2, pool=g1.pool(), stream=stream):
        out2 = graph2()
    for _ in range(3):
        x.copy_(randn(M, K, dtype=DT))
        x2.copy_(randn(2 * M, K, dtype=DT))
        bias3.copy_(bias_of("N", 2 * M, N, DT))
        for t in (y, z, out2):
            t.fill_(float("nan"))
        g1.replay()
        g2.replay()
        torch.cuda.synchronize()
        assert_matmul_close(z, x, w1)
        assert_matmul_close(y, x[:, :N], w2)
        assert_matmul_close(out2, x2, w3, bias3, beta=0.5, alpha=2)


def test_cuda_graph_replay_after_eager_calls_reuse_the_addresses():
    """Eager calls between replays allocate from the ordinary pool and may land where the
    warm-up's operands were; the graph keeps the tensormaps it captured, the eager calls get
    their own (the plan's tensormap cache is keyed by address within one signature)."""
    M, N, K = SHAPES[0]
    a, b = randn(M, K, dtype=DT), randn(N, K, dtype=DT).t()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        ops.mm(a, b)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = ops.mm(a, b)
    for _ in range(3):
        a.normal_()
        graph.replay()
        eager_a = randn(M, K, dtype=DT)  # same signature as a: the same plan
        eager = ops.mm(eager_a, b)
        torch.cuda.synchronize()
        assert_matmul_close(out, a, b)
        assert_matmul_close(eager, eager_a, b)
        assert runtime.chosen_config(a, b) is not None
