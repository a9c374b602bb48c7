"""kernels/matmul_streamk.py, the stream-K TMA kernel, against the float64 reference with forced
configs: every layout and dtype, bias shapes, K not a whole number of BLOCK_K steps and shorter
than one, program counts that put the data-parallel phase, tile-crossing ranges and ranges
inside one tile in play; NaN-poisoned outputs; the same bits from a second launch that reuses
the counters; what it refuses.

On the CPU these run through Triton's interpreter (programs one after another, so the
first contributor of a tile never finds the others in and always reduces through the
workspace); the ``gpu`` tests add GPU-sized configs on the shapes the kernel is for, the
register path, and bitwise determinism over many launches and under a CUDA graph.
"""

import dataclasses
import itertools

import pytest
import torch
from cases import DTYPES, bias_of, operand, poisoned
from conftest import DEVICE, HAS_CUDA

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import MatmulConfig, selector
from inductor_mm_plugin.configs.space import cdiv, stream_k_split
from inductor_mm_plugin.ops.reference import assert_matmul_close
from inductor_mm_plugin.runtime import device as runtime_device
from inductor_mm_plugin.runtime import split_k

SK = MatmulConfig("tma", 16, 16, 16, 8, 4, 2, stream_k=True)
if HAS_CUDA:
    SK_CONFIGS = [
        MatmulConfig("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, stream_k=True),
        MatmulConfig("tma", 128, 128, 64, 8, 4, 4, stream_k=True),
        MatmulConfig("tma", 64, 128, 64, 1, 4, 4, stream_k=True),
    ]
else:
    SK_CONFIGS = [SK, dataclasses.replace(SK, epilogue_subtile=True, group_m=1)]


def launch_twice(a, b, cfg, bias=None):
    """The output of a launch into a poisoned buffer, checked to be the same bits as a second
    launch's (which reuses the first one's counters: split_k.py)."""
    M, N = a.shape[0], b.shape[1]
    outs = []
    for _ in range(2):
        out = poisoned(M, N, dtype=a.dtype)
        plan = runtime.launch(a, b, out, bias, config=cfg) if bias is not None else runtime.launch(a, b, out, config=cfg)
        assert plan.kernel.fn.__name__ == "_matmul_kernel_streamk"
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "a second launch gave other bits"
    return outs[0]


@pytest.mark.parametrize("cfg", SK_CONFIGS, ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
def test_stream_k_forced_config(cfg, dtype, ta, tb):
    # Partial tiles in M and N; K = 200 is 12.5 steps of 16: the last step overhangs.
    M, N, K = (40, 56, 200) if not HAS_CUDA else (700, 1000, 3000)
    a, b = operand(M, K, dtype, transposed=ta), operand(K, N, dtype, transposed=tb)
    assert_matmul_close(launch_twice(a, b, cfg), a, b, tf32=False)


@pytest.mark.parametrize("programs", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("M,N,K", [(48, 48, 64), (40, 80, 24), (16, 16, 400), (33, 17 * 8, 8)])
def test_stream_k_program_counts(programs, M, N, K, monkeypatch, fresh_state):
    """Each program count deals the K steps out differently: whole rounds before the stream-K
    range (9 tiles on 1-3 programs), ranges across several tiles, ranges inside one tile with
    several contributors (one tile of 25 steps), K shorter than a step."""
    if HAS_CUDA:
        pytest.skip("the interpreter's pretend SM count")
    monkeypatch.setattr(runtime_device, "INTERPRETER_NUM_SMS", programs)
    a, b = operand(M, K, torch.float16), operand(K, N, torch.float16, transposed=True)
    out = launch_twice(a, b, SK)
    assert_matmul_close(out, a, b)
    plan = runtime.launch(a, b, poisoned(M, N, dtype=a.dtype), config=SK)
    assert plan.grid == (programs,)


@pytest.mark.parametrize("bias", ["N", "M1", "MN", "scalar"])
def test_stream_k_bias_and_scales(bias):
    M, N, K = (37, 48, 72) if not HAS_CUDA else (513, 4608, 3072)
    cfg = SK_CONFIGS[0]
    a, b = operand(M, K, torch.bfloat16), operand(K, N, torch.bfloat16, transposed=True)
    c = bias_of(bias, M, N, torch.bfloat16)
    out = poisoned(M, N, dtype=a.dtype)
    runtime.launch(a, b, out, c.expand(M, N), beta=0.5, alpha=-2.0, config=cfg)
    assert_matmul_close(out, a, b, c, beta=0.5, alpha=-2.0)


def test_stream_k_counters_left_zero():
    """The last arrival at each tile resets its counter: the stream's region is all zeros
    after the launch, for the next launch to reuse."""
    M, N, K = 37, 40, 200
    a, b = operand(M, K, torch.float16), operand(K, N, torch.float16)
    runtime.launch(a, b, poisoned(M, N, dtype=a.dtype), config=SK)
    if HAS_CUDA:
        torch.cuda.synchronize()
    regions = [r for key, r in split_k._by_stream.items() if key[0] == torch.device(DEVICE).type]
    assert regions and all(int(r.abs().sum()) == 0 for r in regions)


def test_stream_k_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="stream_k deals out K steps itself"):
        MatmulConfig("tma", 64, 64, 64, stream_k=True, split_k=2).validate()
    with pytest.raises(ValueError, match="'tma' kernel only"):
        MatmulConfig("ptr", 64, 64, 64, stream_k=True).validate()
    a = torch.randn(3, 32, 48, dtype=torch.float16, device=DEVICE)
    b = torch.randn(3, 48, 32, dtype=torch.float16, device=DEVICE)
    with pytest.raises(ValueError, match="needs TMA-compatible operands"):
        runtime.launch(a, b, poisoned(3, 32, 32, dtype=a.dtype), config=SK)


def test_stream_k_split_matches_the_kernels_rule():
    """``stream_k_split`` (what the plan sizes the counters and the selector its features by)
    covers every step exactly once: whole rounds data-parallel, the rest dealt out evenly."""
    for n_tiles, k_steps, programs in itertools.product((1, 5, 72, 131, 132, 133, 264, 300, 1000), (1, 7, 48), (4, 132)):
        dp, per = stream_k_split(n_tiles, k_steps, programs)
        assert dp % programs == 0 and n_tiles - dp < 2 * programs or n_tiles - dp == n_tiles < 2 * programs
        assert per * programs >= (n_tiles - dp) * k_steps > (per - 1) * programs
        f = selector.features(n_tiles * 16, 16, k_steps * 16, MatmulConfig("tma", 16, 16, 16, stream_k=True), programs)
        assert f[0] == dp // programs * k_steps + per and f[1] >= 1


# -------------------------------------------------------------------------- GPU only

# The shapes the kernel is for (docs/performance.md, "Stream-K"): tiles that leave SMs idle.
GPU_SHAPES = [(512, 4608, 3072), (512, 1792, 3584), (2048, 640, 5120), (6304, 160, 1280), (197, 1280, 5120),
              (128, 9472, 3584), (1023, 1025, 4096)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
def test_gpu_stream_k_deterministic(M, N, K):
    """The same bits over 20 launches, whichever contributor arrives last (on the GPU the
    first contributor usually sums in registers, sometimes through the workspace)."""
    cfg = MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, stream_k=True)
    a = operand(M, K, torch.bfloat16)
    b = operand(K, N, torch.bfloat16, transposed=True)
    first = launch_twice(a, b, cfg)
    assert_matmul_close(first, a, b)
    for _ in range(18):
        out = poisoned(M, N, dtype=a.dtype)
        runtime.launch(a, b, out, config=cfg)
        assert torch.equal(out, first)


@pytest.mark.gpu
def test_gpu_stream_k_in_a_cuda_graph():
    M, N, K = 512, 4608, 3072
    cfg = MatmulConfig("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, stream_k=True)
    a, b = operand(M, K, torch.bfloat16), operand(K, N, torch.bfloat16, transposed=True)
    eager = launch_twice(a, b, cfg)
    out = poisoned(M, N, dtype=a.dtype)
    runtime.launch(a, b, out, config=cfg)  # warm: compiled and counters made outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        runtime.launch(a, b, out, config=cfg)
    for _ in range(5):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)


def test_stream_k_tiles_per_program_feature():
    """The selector's stream-K features: a grid of 72 tiles x 48 steps on 132 SMs costs the
    busiest program 27 steps (not 48), on at most two tiles, with partials."""
    cfg = MatmulConfig("tma", 128, 256, 64, stream_k=True)
    steps, touched, _, partial_mb = selector.features(512, 4608, 3072, cfg, 132)
    assert steps == cdiv(72 * 48, 132) == 27 and touched == 2 and partial_mb > 0
