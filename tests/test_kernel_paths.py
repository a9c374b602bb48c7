"""The two kernels and the launcher's choices: which path a call takes, each path against the
float64 reference with forced configs (split-K, subtiled and pointer-stored epilogues, every
operand layout), the split-K counters, the launch-plan cache and the heuristic's configs.

On the CPU these run through Triton's interpreter, which supports device-side tensor
descriptors (triton 3.7.1); the ``gpu`` tests add GPU-sized configs, the direct-launch fast
path, and CUDA-graph capture.
"""

import dataclasses
import itertools
import os

import pytest
import torch
import triton
import triton.language as tl
from cases import DTYPES, bias_of, operand, randn
from conftest import DEVICE, HAS_CUDA

import inductor_mm_plugin  # noqa: F401  (registers the ops)
from inductor_mm_plugin.kernels.configs import (
    INTERPRETER_TMA,
    SMEM_LIMIT_BYTES,
    MatmulConfig,
    Problem,
    candidate_configs,
    heuristic_config,
    k_per_split,
    persistent_programs,
    smem_bytes,
)
from inductor_mm_plugin.kernels.matmul import _divmod, _tile_coords, _tile_coords_int
from inductor_mm_plugin.ops import matmul as impl
from inductor_mm_plugin.ops import split_k
from inductor_mm_plugin.ops.reference import assert_matmul_close


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


# ------------------------------------------------------------------------ path selection


def _layout(a, b, out=None):
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device) if out is None else out
    return impl._tma_layout(a, b, out)


def test_tma_path_for_aligned_operands_in_any_orientation():
    M, N, K = 64, 48, 40  # bf16 rows of 80 / 96 / 128 bytes: all multiples of 16
    for ta, tb in itertools.product((False, True), repeat=2):
        a = operand(M, K, torch.bfloat16, transposed=ta)
        b = operand(K, N, torch.bfloat16, transposed=tb)
        a_kmajor, lda, b_kmajor, ldb, c_tma, ldc = _layout(a, b)
        assert (a_kmajor, b_kmajor, c_tma) == (not ta, tb, True)
        assert lda == (M if ta else K) and ldb == (K if tb else N) and ldc == N


def test_pointer_path_for_unaligned_strided_or_batched_operands():
    dt = torch.float16
    # Rows of 56 halves (112 bytes) are 16-byte aligned; rows of 52 (104 bytes) are not.
    assert _layout(randn(8, 56, dtype=dt), randn(56, 16, dtype=dt)) is not None
    assert _layout(randn(8, 52, dtype=dt), randn(52, 16, dtype=dt)) is None
    assert _layout(randn(8, 16, dtype=dt), randn(16, 52, dtype=dt)) is None
    # A strided slice has no unit stride.
    assert _layout(operand(16, 16, dt, sliced=True), randn(16, 16, dtype=dt)) is None
    # A base pointer 2 bytes past an aligned one.
    off = randn(16 * 16 + 1, dtype=dt)[1:].view(16, 16)
    assert _layout(off, randn(16, 16, dtype=dt)) is None
    # K == 0: a descriptor needs non-empty dimensions.
    assert _layout(randn(8, 0, dtype=dt), randn(0, 16, dtype=dt)) is None
    # A batch whose matrices are not stacked at rows x leading stride (here padded apart).
    padded = randn(2, 9, 16, dtype=dt)[:, :8]
    b3 = randn(2, 16, 16, dtype=dt)
    assert impl._tma_layout(padded, b3, torch.empty(2, 8, 16, dtype=dt, device=DEVICE)) is None


@pytest.mark.parametrize(
    "values,divisor,hint",
    [
        ((2000, 3000, 500, 500, 1, 3000, 1, 3000, 1), 4, 4),  # 2000x3000x500, row-major
        ((1000, 1000, 1000, 1, 1000), 8, 8),
        ((64, 48, 16, 1, 0), 16, 1),  # all divisible by 16: Triton knows without a hint
        ((1531, 1531, 1531, 1), 1, 1),
        ((1, 3000, 500, 1, 3000), 4, 4),  # M = 1 is a constant to Triton, not a constraint
        ((4096, 4096, 4094, 1), 2, 2),
    ],
)
def test_pointer_kernel_divisor_divides_every_size_and_stride(values, divisor, hint):
    assert impl.pow2_divisor(values) == divisor
    assert all(v % divisor == 0 for v in values if v not in (0, 1))
    assert impl.pointer_kernel_divisor(divisor) == hint


def test_problem_carries_the_divisor_and_the_pointer_layout():
    dt = torch.bfloat16
    a, b = randn(20, 50, dtype=dt), randn(30, 50, dtype=dt).t()  # a Linear weight, K = 50
    plan = impl._launch(a, b, poisoned(20, 30, dtype=dt))
    assert plan.cfg.kernel == "ptr"
    assert (plan.problem.divisor, plan.problem.a_kmajor, plan.problem.b_kmajor) == (2, True, True)
    assert "ptr2|" in plan.problem.bucket()


_PTX_OF_THE_POINTER_KERNEL = r"""
import re, sys
import triton
from triton.backends.compiler import GPUTarget
from inductor_mm_plugin.kernels.matmul import _matmul_kernel
from inductor_mm_plugin.ops.matmul import pointer_kernel_divisor, pow2_divisor

# mm of a (2000, 500) by a (500, 3000) bf16 matrix, both row-major: the arguments as the
# launcher passes them, specialized as Triton's JIT would (ints divisible by 16 marked,
# strides of 1 made constants).
M, N, K = 2000, 3000, 500
mid = dict(M=M, N=N, K=K, stride_ab=0, stride_am=K, stride_ak=1, stride_bb=0, stride_bk=N, stride_bn=1,
           stride_cb=0, stride_cm=N, stride_cn=1, stride_biasb=0, stride_biasm=0, stride_biasn=0)
consts = dict(HAS_BIAS=False, SCALE_ACC=False, INPUT_PRECISION="ieee", INTERPRETER_BF16=False,
              BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, PDL=2 if sys.argv[1] == "pdl" else 0,
              DIVISOR=pointer_kernel_divisor(pow2_divisor(list(mid.values())[:12])) if sys.argv[1] == "hint" else 1)
sig, attrs = {}, {}
for i, name in enumerate(_matmul_kernel.arg_names):
    value = mid.get(name)
    if name in consts or value == 1:
        sig[name] = "constexpr"
        consts.setdefault(name, value)
    elif name.endswith("_ptr"):
        sig[name] = "*bf16"
        attrs[(i,)] = [["tt.divisibility", 16]]
    elif name in ("alpha", "beta"):
        sig[name] = "fp32"
    else:
        sig[name] = "i32"
        if value % 16 == 0:
            attrs[(i,)] = [["tt.divisibility", 16]]
src = triton.compiler.ASTSource(_matmul_kernel, sig, consts, attrs)
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=4)).asm["ptx"]
if sys.argv[1] in ("pdl", "nopdl"):
    # The offsets of the first griddepcontrol instructions and of the first global memory access.
    first = lambda pat: next((m.start() for m in re.finditer(pat, ptx)), len(ptx))  # noqa: E731
    print(first(r"griddepcontrol\.wait"), first(r"griddepcontrol\.launch_dependents"),
          first(r"(cp\.async|ld\.global|st\.global|cp\.async\.bulk)"), len(ptx))
else:
    print(consts["DIVISOR"], len(re.findall(r"cp\.async\.c[ag]\.shared\.global", ptx)),
          len(re.findall(r"ld\.global\.b16", ptx)))
"""


def _pointer_kernel_ptx_facts(arg):
    """Compile the pointer kernel for sm_90 in a process without the interpreter; the facts
    the script prints for ``arg``."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _PTX_OF_THE_POINTER_KERNEL, arg], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    if res.returncode != 0 and ("ptxas" in res.stderr or "NVPTX" in res.stderr):
        pytest.skip(f"this Triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    return list(map(int, res.stdout.split()))


def test_dependent_launch_waits_before_the_first_memory_access():
    """With PDL the kernel may start while the previous kernel on the stream still runs: the
    wait must come before any load or store (a load before it could read stale data)."""
    wait, trigger, first_access, end = _pointer_kernel_ptx_facts("pdl")
    assert wait < first_access < end and wait < trigger < end
    none_wait, _, _, none_end = _pointer_kernel_ptx_facts("nopdl")
    assert none_wait == none_end  # no griddepcontrol without PDL


def test_pdl_mode_is_scoped_and_replans():
    a, b = operand(40, 48, torch.float16), operand(48, 24, torch.float16)
    impl.mm_launch(a, b)
    before = impl.PDL
    with impl.pdl_mode(2):
        assert impl.PDL == 2 and not impl._PLANS and not impl._FAST_PLANS
        impl.mm_launch(a, b)
        # Never on the CPU (the interpreter runs no griddepcontrol).
        assert all(p.pdl == (2 if p.device.type == "cuda" else 0) for p in impl._PLANS.values())
    assert impl.PDL == before and not impl._PLANS and not impl._FAST_PLANS


def test_launcher_setting_is_checked_scoped_and_replans():
    with pytest.raises(ValueError, match="expected one of PDL, PREFETCH_DESCRIPTORS, persistent_programs, got 'NUM_SMS'"):
        with impl.launcher_setting("NUM_SMS", 1):
            pass
    M, N, K = 64, 64, 48  # 16 tiles of 16 x 16
    a, b = operand(M, K, torch.float16), operand(K, N, torch.float16, transposed=True)
    cfg = dataclasses.replace(INTERPRETER_TMA, block_m=16, block_n=16)
    impl._launch(a, b, poisoned(M, N, dtype=torch.float16), config=cfg)
    with impl.launcher_setting("persistent_programs", lambda items, programs: 1):
        assert not impl._PLANS and not impl._FAST_PLANS
        out = poisoned(M, N, dtype=torch.float16)
        plan = impl._launch(a, b, out, config=cfg)
        assert plan.grid == (1,) and plan.mid[5] == 1  # one program strides over all 16 tiles
        assert_matmul_close(out, a, b)
    assert impl.persistent_programs is persistent_programs and not impl._PLANS
    on_gpu = a.device.type == "cuda"
    assert impl._launch(a, b, torch.empty(M, N, dtype=torch.float16, device=DEVICE), config=cfg).consts[-1] == (
        3 if on_gpu else 0)  # prefetch A, B and C's descriptors; never in the interpreter
    with impl.launcher_setting("PREFETCH_DESCRIPTORS", False):
        assert impl._launch(a, b, torch.empty(M, N, dtype=torch.float16, device=DEVICE), config=cfg).consts[-1] == 0


@pytest.mark.parametrize("hint", ["hint", "none"])
def test_divisor_turns_element_loads_into_cp_async(hint):
    """Compiled for sm_90 on the CPU (Triton's own ptxas): with K = 500 and rows of 3000
    elements, the unhinted kernel loads one bf16 at a time; DIVISOR = 4 gives pipelined
    8-byte cp.async copies and no element loads."""
    divisor, cp_async, element_loads = _pointer_kernel_ptx_facts(hint)
    if hint == "hint":
        assert divisor == 4 and cp_async > 0 and element_loads == 0
    else:
        assert divisor == 1 and cp_async == 0 and element_loads > 0


_PTX_OF_THE_TMA_KERNEL = r"""
import re, sys
import triton
from triton.backends.compiler import GPUTarget
from inductor_mm_plugin.kernels.matmul_tma import _matmul_kernel_tma

# A decode-shaped config, A K-major, B N-major, C through a TMA store or through pointers.
c_tma, prefetch = sys.argv[1] == "c_tma", int(sys.argv[2])
BM, BN, BK = 64, 32, 256
descs = {"a_desc": f"tensordesc<bf16[{BM}, {BK}]>", "b_desc": f"tensordesc<bf16[{BK}, {BN}]>"}
if c_tma:
    descs["c_desc"] = f"tensordesc<bf16[{BM}, {BN}]>"
consts = dict(A_KMAJOR=True, B_KMAJOR=False, C_TMA=c_tma, HAS_BIAS=False, BIAS_MODE="mn", SCALE_ACC=False,
              INPUT_PRECISION="ieee", SWAP_AB=False, INTERPRETER_BF16=False, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
              GROUP_M=1, SPLIT_K=1, EPILOGUE_SUBTILE=False, FLATTEN=False, WARP_SPECIALIZE=False, PDL=0,
              PREFETCH=prefetch, BATCH=1)
sig = {}
for name in _matmul_kernel_tma.arg_names:
    if name in consts:
        sig[name] = "constexpr"
    elif name in descs:
        sig[name] = descs[name]
    elif name.endswith(("_ptr", "_desc")):
        sig[name] = "*fp32" if name == "ws_ptr" else "*i32" if name == "lock_ptr" else "*bf16"
    else:
        sig[name] = "fp32" if name in ("alpha", "beta") else "i32"
src = triton.compiler.ASTSource(_matmul_kernel_tma, sig, consts, {})
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=4)).asm["ptx"]
# The parameter behind each register: `mov.b64 %rdN, <param>` then `cvta.param.u64 %rdM, %rdN`.
param_of = {m[1]: m[2] for m in re.finditer(r"mov\.b64\s+(%rd\d+), (_matmul_kernel_tma_param_\d+);", ptx)}
for m in re.finditer(r"cvta\.param\.u64\s+(%rd\d+), (%rd\d+);", ptx):
    param_of[m[1]] = param_of.get(m[2], m[2])
copies = sorted({param_of.get(r, r) for r in re.findall(r"cp\.async\.bulk\.tensor[^\n]*?\[(%rd\d+), \{", ptx)})
prefetched = sorted(re.findall(r"prefetch\.param\.tensormap \[(\w+)\]", ptx))
first_copy = ptx.find("cp.async.bulk.tensor")
last_prefetch = max((m.end() for m in re.finditer(r"prefetch\.param\.tensormap", ptx)), default=-1)
print(" ".join(copies), "|", " ".join(prefetched), "|", int(last_prefetch < first_copy))
"""


@pytest.mark.parametrize("c_tma", [True, False])
def test_tma_kernel_prefetches_the_descriptors_its_copies_read(c_tma):
    """Compiled for sm_90 on the CPU: the prefetched parameters (_prefetch_descriptors names
    them, triton's expansion of a descriptor argument fixes them) are exactly those the TMA
    copies read, and the prefetches come first."""
    import subprocess
    import sys

    prefetch = 3 if c_tma else 2  # what the launcher passes on the GPU (ops/matmul.py, _Plan)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    args = ["c_tma" if c_tma else "c_ptr", str(prefetch)]
    res = subprocess.run([sys.executable, "-c", _PTX_OF_THE_TMA_KERNEL, *args], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    if res.returncode != 0 and ("ptxas" in res.stderr or "NVPTX" in res.stderr):
        pytest.skip(f"this Triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    copies, prefetched, first = (part.split() for part in res.stdout.split("|"))
    assert len(copies) == prefetch and copies == prefetched and first == ["1"], res.stdout


def test_tma_path_for_stacked_batches_in_any_orientation():
    dt = torch.bfloat16
    B, M, N, K = 3, 24, 16, 40
    for ta, tb in itertools.product((False, True), repeat=2):
        a = randn(B, K, M, dtype=dt).transpose(1, 2) if ta else randn(B, M, K, dtype=dt)
        b = randn(B, N, K, dtype=dt).transpose(1, 2) if tb else randn(B, K, N, dtype=dt)
        layout = impl._tma_layout(a, b, torch.empty(B, M, N, dtype=dt, device=DEVICE))
        assert layout is not None and layout[:3:2] == (not ta, tb), (ta, tb, layout)


def test_size_one_dims_get_aligned_stand_in_strides():
    dt = torch.bfloat16
    # (1, K) with an odd reported row stride: the row stride is never used.
    a = torch.as_strided(randn(1, 40, dtype=dt), (1, 40), (7, 1))
    layout = _layout(a, randn(40, 32, dtype=dt))
    assert layout is not None and layout[0] and (layout[1] * 2) % 16 == 0


def test_output_that_is_not_row_major_is_stored_through_pointers():
    dt = torch.float32
    a, b = randn(24, 32, dtype=dt), randn(32, 20, dtype=dt)
    col_major = torch.empty(20, 24, dtype=dt, device=DEVICE).t()
    layout = _layout(a, b, col_major)
    assert layout is not None and layout[4] is False and layout[5] == col_major.stride(0)


# --------------------------------------------------------------- kernels against float64

if HAS_CUDA:
    TMA_CONFIGS = [
        MatmulConfig("tma", 64, 64, 32, 8, 4, 3, epilogue_subtile=True, flatten=True),
        MatmulConfig("tma", 128, 128, 64, 8, 8, 3, epilogue_subtile=True, flatten=True),
        MatmulConfig("tma", 64, 128, 64, 4, 4, 3, split_k=3),
        MatmulConfig("tma", 16, 64, 128, 1, 4, 4, split_k=2),
        MatmulConfig("tma", 64, 64, 32, 8, 4, 3, split_k=4, epilogue_subtile=True),
        MatmulConfig("tma", 64, 64, 64, 8, 4, 4, programs_per_sm=2),
        MatmulConfig("tma", 64, 128, 64, 4, 4, 3, split_k=3, programs_per_sm=3),
    ]
else:
    TMA_CONFIGS = [
        INTERPRETER_TMA,
        dataclasses.replace(INTERPRETER_TMA, epilogue_subtile=False, flatten=True),
        dataclasses.replace(INTERPRETER_TMA, split_k=3),
        dataclasses.replace(INTERPRETER_TMA, split_k=4, epilogue_subtile=False, group_m=1),
        # SMs x 2 and x 3 programs: fewer tiles per program, split-K slices of one tile
        # spread differently over programs.
        dataclasses.replace(INTERPRETER_TMA, programs_per_sm=2),
        dataclasses.replace(INTERPRETER_TMA, split_k=3, epilogue_subtile=False, programs_per_sm=3),
    ]
TMA_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("cfg", TMA_CONFIGS, ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("dtype", TMA_DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
def test_tma_kernel_forced_config(cfg, dtype, ta, tb):
    # 72 x 40 x 136: partial tiles in every dimension; K = 136 leaves split-K slices of
    # unequal length, and with 4 slices of 16 columns one slice reads past K entirely.
    M, N, K = (72, 40, 136) if not HAS_CUDA else (312, 200, 1000)
    a = operand(M, K, dtype, transposed=ta)
    b = operand(K, N, dtype, transposed=tb)
    out = poisoned(M, N, dtype=dtype)
    plan = impl._launch(a, b, out, config=cfg)
    assert plan.cfg.kernel == "tma"
    assert_matmul_close(out, a, b, tf32=dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("mnk", [(40, 24, 48), (33, 24, 48), (40, 24, 40)], ids=str)
def test_tma_kernel_batched(dtype, ta, tb, mnk):
    """Stacked batches: partial tiles along M must not spill into the next matrix (M = 33:
    pointer stores), and K that is not a whole number of BLOCK_K steps leaves operands
    stacked along K to the pointer kernel (K = 40 with an M-major A or an N-major B)."""
    B, (M, N, K) = 3, mnk
    if HAS_CUDA:
        B, M, N, K = 5, M * 8 + 1, N * 8, K * 8
    a = randn(B, K, M, dtype=dtype).transpose(1, 2) if ta else randn(B, M, K, dtype=dtype)
    b = randn(B, N, K, dtype=dtype).transpose(1, 2) if tb else randn(B, K, N, dtype=dtype)
    out = poisoned(B, M, N, dtype=dtype)
    plan = impl._launch(a, b, out)
    k_outer = ta or not tb
    aligned = (M if ta else K) * 2 % 16 == 0 and (K if tb else N) * 2 % 16 == 0  # 16-byte rows
    expect_tma = aligned and (not k_outer or K % plan.cfg.block_k == 0)
    assert (plan.cfg.kernel == "tma") == expect_tma, plan.cfg
    assert_matmul_close(out, a, b)


@pytest.mark.parametrize("cfg", TMA_CONFIGS[:3], ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias_shape", ["N", "M1", "MN", "scalar"])
def test_tma_kernel_epilogue(cfg, dtype, bias_shape):
    M, N, K = 40, 24, 72
    a, b = operand(M, K, dtype), operand(K, N, dtype, transposed=True)
    bias = bias_of(bias_shape, M, N, dtype)
    out = poisoned(M, N, dtype=dtype)
    plan = impl._launch(a, b, out, bias.expand(M, N), 0.5, -2.0, config=cfg)
    assert plan.cfg.kernel == "tma"
    assert_matmul_close(out, a, b, bias, beta=0.5, alpha=-2.0)


@pytest.mark.parametrize("cfg", TMA_CONFIGS[:3], ids=lambda c: c.short().replace(" ", "_"))
def test_tma_kernel_pointer_store(cfg):
    # An output whose rows are 4 bytes apart from alignment: loads by TMA, stores by pointers.
    M, N, K = 33, 20, 48
    dtype = torch.float32
    a, b = operand(M, K, dtype), operand(K, N, dtype)
    buf = poisoned(M, N + 1, dtype=dtype)
    out = buf[:, :N]
    plan = impl._launch(a, b, out, config=cfg)
    assert plan.cfg.kernel == "tma" and plan.layout[4] is False
    assert_matmul_close(out, a, b)
    assert buf[:, N].isnan().all()  # the column past N is untouched


def _stream_region():
    dev = torch.empty(0, device=DEVICE).device  # with its index, as the launcher's operands have
    return split_k._by_stream[(dev.type, dev.index or 0, impl._raw_stream(dev))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_k_counters_are_reused_and_return_to_zero(dtype):
    """Every launch on one stream takes the same counters (no memset per launch), so each
    launch must leave them at zero: fresh inputs, poisoned outputs, then the region is read."""
    cfg = TMA_CONFIGS[2]
    M, N, K = (40, 24, 200) if not HAS_CUDA else (256, 256, 4096)
    split_k.clear()
    impl._PLANS.clear()
    pointers = set()
    for _ in range(3):
        a, b = operand(M, K, dtype), operand(K, N, dtype)
        out = poisoned(M, N, dtype=dtype)
        plan = impl._launch(a, b, out, config=cfg)
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
    import threading

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
    # 54 counters left in the reserve: a capture that needs 60 zeroes its own.
    fresh = split_k.counters(dev, 60)
    assert int(fresh.abs().sum()) == 0 and all(fresh.data_ptr() != t.data_ptr() for t in taken)
    assert split_k._reserve[(dev.type, dev.index or 0)][1] == 110
    # The next eager launch refills the reserve (less than a region left); the spent chunk,
    # which captured graphs still use, is kept alive.
    capturing["on"] = False
    assert split_k.counters(dev, 10).data_ptr() == region.data_ptr()
    assert split_k._reserve[(dev.type, dev.index or 0)][1] == 0
    assert any(k.data_ptr() <= taken[0].data_ptr() < k.data_ptr() + 4 * k.numel() for k in split_k._kept)


def test_k_per_split_slices_never_overlap():
    for K, bk, split in itertools.product((1, 15, 16, 17, 136, 1000, 4096), (16, 64, 256), (1, 2, 3, 4, 8)):
        step = k_per_split(K, bk, split)
        assert step % bk == 0 and step * split >= K


# ------------------------------------------------------------------------ tile order


@triton.jit
def _divmod_probe(n_ptr, d_ptr, q_ptr, r_ptr, COUNT: tl.constexpr):
    for i in range(COUNT):
        q, r = _divmod(tl.load(n_ptr + i), tl.load(d_ptr + i))
        tl.store(q_ptr + i, q)
        tl.store(r_ptr + i, r)


def test_divmod_is_exact_without_integer_division():
    """The kernels' fp32-based n // d and n % d against Python's, over the range it promises
    (0 <= n < 2**30, d >= 1): small divisors (largest estimate error), powers of two and their
    neighbours, the top of the range, random pairs. Every one must be exact."""
    ns, ds = [], []
    for d in (1, 2, 3, 5, 7, 31, 32, 33, 127, 255, 1000, 4095, 65537, (1 << 20) + 3, (1 << 29) + 11):
        for n in (0, 1, d - 1, d, d + 1, 5 * d + 3, (1 << 24) + 1, (1 << 30) - 1, (1 << 30) - d, (1 << 29) + 7):
            if 0 <= n < 1 << 30:
                ns.append(n)
                ds.append(d)
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ()).item()))
    ns += torch.randint(0, 1 << 30, (64,), generator=gen).tolist()
    ds += (torch.randint(0, 30, (64,), generator=gen).exp2().long() + torch.randint(0, 7, (64,), generator=gen)).clamp_min(1).tolist()
    n = torch.tensor(ns, dtype=torch.int32, device=DEVICE)
    d = torch.tensor(ds, dtype=torch.int32, device=DEVICE)
    q = torch.full_like(n, -1)
    r = torch.full_like(n, -1)
    _divmod_probe[(1,)](n, d, q, r, len(ns))
    assert q.tolist() == [a // b for a, b in zip(ns, ds)]
    assert r.tolist() == [a % b for a, b in zip(ns, ds)]


@triton.jit
def _tile_order_probe(out_ptr, num_pid_m, num_pid_n, GROUP_M: tl.constexpr, COUNT: tl.constexpr):
    for tile in range(COUNT):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        ref_m, ref_n = _tile_coords_int(tile, num_pid_m, num_pid_n, GROUP_M)
        tl.store(out_ptr + 4 * tile, pid_m)
        tl.store(out_ptr + 4 * tile + 1, pid_n)
        tl.store(out_ptr + 4 * tile + 2, ref_m)
        tl.store(out_ptr + 4 * tile + 3, ref_n)


@pytest.mark.parametrize("num_pid_m,num_pid_n,group_m", [(1, 13, 1), (7, 5, 1), (7, 5, 8), (13, 3, 4), (16, 16, 8)])
def test_tile_order_matches_the_integer_division_version(num_pid_m, num_pid_n, group_m):
    """The eager kernels' grouped tile order (_tile_coords, no integer division) is the one
    the templates inline (_tile_coords_int): same (row, column) tile for every tile index,
    each output tile exactly once, including a last group shorter than GROUP_M."""
    count = num_pid_m * num_pid_n
    out = torch.full((count, 4), -1, dtype=torch.int32, device=DEVICE)
    _tile_order_probe[(1,)](out, num_pid_m, num_pid_n, group_m, count)
    got, ref = out[:, :2].tolist(), out[:, 2:].tolist()
    assert got == ref
    assert sorted(map(tuple, got)) == [(m, n) for m in range(num_pid_m) for n in range(num_pid_n)]


# --------------------------------------------------------------------- launch-plan cache


def test_plan_is_reused_and_keyed_on_alignment():
    dt = torch.float32
    a, b = randn(24, 32, dtype=dt), randn(32, 16, dtype=dt)
    p1 = impl._launch(a, b, poisoned(24, 16, dtype=dt))
    p2 = impl._launch(a, b, poisoned(24, 16, dtype=dt))
    assert p1 is p2
    # Same shape and strides, base 4 bytes off 16-byte alignment: another specialization.
    big = randn(24 * 32 + 1, dtype=dt)
    a_off = big[1:].view(24, 32)
    p3 = impl._launch(a_off, b, poisoned(24, 16, dtype=dt))
    assert p3 is not p1 and p3.cfg.kernel == "ptr"
    assert_matmul_close(impl.mm_launch(a_off, b, out=poisoned(24, 16, dtype=dt)), a_off, b)


@pytest.mark.parametrize("ta,tb,c_tma", [(False, True, True), (True, False, True), (False, False, False)])
def test_plan_keeps_descriptors_without_tensors_and_rebases_them(ta, tb, c_tma):
    # The direct launch reuses the first call's host-side TMA descriptors over the next call's
    # tensors; the plan itself must hold no tensor (CUDA-graph trees reject a live one).
    dt = torch.float16
    M, N, K = 40, 48, 64
    a, b = operand(M, K, dt, transposed=ta), operand(K, N, dt, transposed=tb)
    out = poisoned(M, N, dtype=dt) if c_tma else poisoned(N, M, dtype=dt).t()
    plan = impl._launch(a, b, out)
    assert plan.cfg.kernel == "tma" and plan.c_tma == c_tma
    assert not any(isinstance(v, torch.Tensor) for d in plan.descs if d is not None for v in vars(d).values())
    a2, b2 = operand(M, K, dt, transposed=ta), operand(K, N, dt, transposed=tb)
    out2 = poisoned(M, N, dtype=dt)
    first = plan._descriptors(a, b, out)
    rebased = plan._rebased_descriptors(a2, b2, out2)
    for old, new, base in zip(first, rebased, (a2, b2, out2)):
        if isinstance(old, torch.Tensor):  # C without a TMA store: the tensor itself
            assert new is base
            continue
        assert new.base is base
        assert (new.shape, new.strides, new.block_shape) == (old.shape, old.strides, old.block_shape)
    assert first[0].block_shape == ([plan.cfg.block_k, plan.cfg.block_m] if ta else [plan.cfg.block_m, plan.cfg.block_k])
    assert first[1].block_shape == ([plan.cfg.block_n, plan.cfg.block_k] if tb else [plan.cfg.block_k, plan.cfg.block_n])


class _RecordingLauncher:
    """Stands in for a compiled kernel's launcher: records what the direct launch passes."""

    function, packed_metadata = "function", "metadata"

    def __init__(self, error=None):
        self.calls, self.error = [], error

    def run(self, *args):
        if self.error:
            raise self.error
        self.calls.append(args)


@pytest.mark.parametrize("split_k", [1, 2])
def test_direct_launch_passes_what_the_jit_launch_passes(monkeypatch, split_k):
    # The GPU's repeated calls skip Triton's JIT: same arguments, descriptors rebased onto the
    # new tensors, data pointers as integers (checked here without a GPU).
    dt = torch.float16
    M, N, K = 40, 48, 256
    cfg = dataclasses.replace(INTERPRETER_TMA, split_k=split_k)
    a, b = operand(M, K, dt), operand(K, N, dt, transposed=True)
    plan = impl._launch(a, b, poisoned(M, N, dtype=dt), config=cfg)
    launcher = _RecordingLauncher()
    monkeypatch.setattr(plan, "compiled", launcher)  # the plan stays cached: restore it afterwards
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    a2, b2, out2 = operand(M, K, dt), operand(K, N, dt, transposed=True), poisoned(M, N, dtype=dt)
    assert plan.launch_direct(a2, b2, out2, None, 2.0, 1.0)
    ((grid, gy, gz, stream, function, metadata, *hooks_and_args),) = launcher.calls
    assert (grid, gy, gz, stream, function, metadata) == (plan.grid[0], 1, 1, 7, "function", "metadata")
    assert hooks_and_args[:3] == [None, None, None]  # launch metadata and hooks
    passed = tuple(hooks_and_args[3:])
    expected = plan.args(a2, b2, out2, None, 2.0, 1.0)
    assert [d.base for d in passed[:3]] == [a2, b2, out2]
    assert [(d.shape, d.strides, d.block_shape) for d in passed[:3]] == [
        (d.shape, d.strides, d.block_shape) for d in expected[:3]
    ]
    assert passed[3:5] == (out2.data_ptr(), out2.data_ptr())  # C's pointer; no bias: C again
    if split_k == 1:
        assert passed[5:7] == (out2.data_ptr(), out2.data_ptr())  # no workspace or counters
    assert passed[7:] == expected[7:]  # sizes, strides, alpha, beta, constexprs


_BASE_ARGS_FORMAT_LEN = 13  # the fake launcher below reads this global, as triton 3.6's does


def _fake_tensormap(desc, meta):
    return [("tensormap", desc.base.data_ptr(), tuple(desc.block_shape), meta["swizzle"]), *desc.shape, *desc.strides]


class _Triton36Launcher:
    """The shape of triton 3.6's CudaLauncher (backends/nvidia/driver.py): ``__call__`` adds
    the scratch arguments and calls ``launch``, a closure that expands each descriptor and
    calls the C launcher (here: a recorder)."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, False

    def __init__(self, n_descs):
        self.calls = []
        tensordesc_indices, tensordesc_meta = set(range(n_descs)), [{"swizzle": 3}] * n_descs
        def launcher(*args):
            self.calls.append(args)

        def launch(*args):
            final_args = list(args[:_BASE_ARGS_FORMAT_LEN])
            tensordesc_idx = 0
            for i, arg in enumerate(args[_BASE_ARGS_FORMAT_LEN:]):
                if i in tensordesc_indices:
                    final_args.extend(_fake_tensormap(arg, tensordesc_meta[tensordesc_idx]))
                    tensordesc_idx += 1
                else:
                    final_args.append(arg)
            return launcher(*final_args)

        self.launch = launch

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.launch(gx, gy, gz, stream, function, False, False, None, None, *args)


@pytest.mark.parametrize("c_tma", [True, False])
def test_raw_launch_passes_what_triton36s_launcher_passes(monkeypatch, c_tma):
    # Triton 3.6's launcher is bypassed down to its C launcher, with each operand's tensormap
    # encoding cached by data pointer: the C launcher must see exactly the arguments the
    # whole launcher would have given it for the JIT path's arguments.
    dt = torch.float16
    M, N, K = 40, 48, 256
    a, b = operand(M, K, dt), operand(K, N, dt, transposed=True)
    out = poisoned(M, N, dtype=dt) if c_tma else poisoned(N, M, dtype=dt).t()
    plan = impl._launch(a, b, out, config=INTERPRETER_TMA)
    assert plan.cfg.split_k == 1 and plan.c_tma == c_tma
    compiled = _RecordingLauncher()
    compiled.run = _Triton36Launcher(3 if c_tma else 2)
    for name, value in (("compiled", compiled), ("raw", None), ("encoded", {})):
        monkeypatch.setattr(plan, name, value)  # the plan stays cached: restore it afterwards
    encodes = []
    monkeypatch.setattr(impl, "_DIRECT_LAUNCH", True)
    monkeypatch.setattr(impl, "_tensormap_args", lambda d, m: encodes.append(d) or _fake_tensormap(d, m))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)

    def ptrs(args):  # the JIT path passes tensors where the direct launch passes their pointers
        return tuple(x.data_ptr() if isinstance(x, torch.Tensor) else x for x in args)

    a2, b2 = operand(M, K, dt), operand(K, N, dt, transposed=True)
    out2 = poisoned(M, N, dtype=dt) if c_tma else poisoned(N, M, dtype=dt).t()
    compiled.run(plan.grid[0], 1, 1, 7, "function", "metadata", None, None, None, *plan.args(a2, b2, out2, None, 2.0, 1.0))
    assert plan.launch_direct(a2, b2, out2, None, 2.0, 1.0)
    via_launcher, raw = compiled.run.calls
    assert raw == ptrs(via_launcher)
    assert len(encodes) == (3 if c_tma else 2)
    assert plan.launch_direct(a2, b2, out2, None, 2.0, 1.0)  # same pointers: no new encoding
    assert len(encodes) == (3 if c_tma else 2) and compiled.run.calls[-1] == raw
    a3 = operand(M, K, dt)
    assert plan.launch_direct(a3, b2, out2, None, 2.0, 1.0)  # a new A: its tensormap only
    assert len(encodes) == (4 if c_tma else 3) and encodes[-1].base is a3
    assert compiled.run.calls[-1][13][1] == a3.data_ptr()
    assert not any(isinstance(x, torch.Tensor) for v in plan.encoded.values() for x in v)


def test_raw_launch_that_the_c_launcher_rejects_falls_back(monkeypatch):
    dt = torch.float16
    a, b = operand(40, 64, dt), operand(64, 48, dt)
    plan = impl._launch(a, b, poisoned(40, 48, dtype=dt), config=INTERPRETER_TMA)
    compiled = _RecordingLauncher()
    compiled.run = _Triton36Launcher(3 if plan.c_tma else 2)
    cells = dict(zip(compiled.run.launch.__code__.co_freevars, compiled.run.launch.__closure__))

    def rejecting(*args):
        raise TypeError("function takes exactly 40 arguments (41 given)")

    cells["launcher"].cell_contents = rejecting
    for name, value in (("compiled", compiled), ("raw", None), ("encoded", {})):
        monkeypatch.setattr(plan, name, value)
    monkeypatch.setattr(impl, "_tensormap_args", _fake_tensormap)
    _assert_direct_launch_falls_back(monkeypatch, plan, a, b, "direct kernel launch failed.*40 arguments")


def test_raw_launch_only_for_triton36s_launcher():
    plan = impl._launch(operand(40, 64, torch.float16), operand(64, 48, torch.float16), poisoned(40, 48, dtype=torch.float16))
    compiled = _RecordingLauncher()
    compiled.run = _Triton36Launcher(3)
    assert impl._raw_launcher(compiled, 3) is not None
    assert impl._raw_launcher(compiled, 2) is None  # descriptors elsewhere than expected
    compiled.run.global_scratch_size = 64
    assert impl._raw_launcher(compiled, 3) is None  # it would need scratch memory
    assert impl._raw_launcher(_RecordingLauncher(), 3) is None  # no closure to look into
    assert plan.raw is None


def test_direct_launch_that_the_launcher_rejects_falls_back(monkeypatch):
    dt = torch.float16
    a, b = operand(40, 64, dt), operand(64, 48, dt)
    plan = impl._launch(a, b, poisoned(40, 48, dtype=dt))
    monkeypatch.setattr(plan, "compiled", _RecordingLauncher(error=TypeError("launcher changed its calling convention")))
    _assert_direct_launch_falls_back(monkeypatch, plan, a, b, "direct kernel launch failed")


def _assert_direct_launch_falls_back(monkeypatch, plan, a, b, match):
    """A direct launch the launcher rejects launches nothing, warns, and turns direct launch off."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(impl, "_DIRECT_LAUNCH", True)
    with pytest.warns(RuntimeWarning, match=match):
        assert not plan.launch_direct(a, b, poisoned(a.shape[0], b.shape[1], dtype=a.dtype), None, 1.0, 1.0)
    assert impl._DIRECT_LAUNCH is False  # Triton's own launch from now on


def test_launch_takes_batch_one_as_one_matrix():
    dt = torch.float16
    a, b = randn(1, 32, 48, dtype=dt), randn(1, 48, 16, dtype=dt)
    out = poisoned(1, 32, 16, dtype=dt)
    impl._launch(a, b, out)
    assert_matmul_close(out, a, b)
    assert impl.chosen_config(a[0], b[0]).kernel == "tma"


# ----------------------------------------------------------------------------- heuristic

HEURISTIC_SHAPES = [
    (1, 4096, 4096), (16, 14336, 4096), (64, 4096, 14336), (128, 14336, 4096), (768, 768, 768),
    (1000, 1000, 1000), (2048, 4096, 4096), (8192, 28672, 4096), (2048, 2048, 32768), (1024, 1024, 65536),
    (4097, 4095, 4096), (3, 5000, 300), (7, 7, 7),
]  # fmt: skip


@pytest.mark.parametrize("M,N,K", HEURISTIC_SHAPES)
@pytest.mark.parametrize("elem,precision", [(2, "ieee"), (4, "tf32"), (4, "ieee")])
@pytest.mark.parametrize("tma", [True, False])
def test_heuristic_and_candidates_fit_shared_memory(M, N, K, elem, precision, tma):
    p = Problem(M, N, K, 1, elem, {2: "bfloat16", 4: "float32"}[elem], tma=tma, precision=precision)
    cfg = heuristic_config(p)
    cfg.validate()
    # fp32 without TF32 takes the pointer kernel even where TMA could read the operands.
    assert cfg.kernel == ("tma" if tma and (elem == 2 or precision == "tf32") else "ptr")
    assert smem_bytes(cfg, elem) <= SMEM_LIMIT_BYTES, cfg
    cands = candidate_configs(p)
    assert cands[0] == cfg and len(set(cands)) == len(cands)
    for c in cands:
        c.validate()
        assert smem_bytes(c, elem) <= SMEM_LIMIT_BYTES, c
        assert c.kernel == cfg.kernel
        if c.split_k > 1:  # every slice has real K to read
            assert k_per_split(K, c.block_k, c.split_k) * (c.split_k - 1) < K


@pytest.mark.parametrize("b_kmajor,expected", [(False, MatmulConfig("ptr", 64, 128, 16, 8, 4, 6)),
                                               (True, MatmulConfig("ptr", 64, 128, 32, 8, 8, 4))])
def test_pointer_heuristic_for_element_loads_follows_b_layout(b_kmajor, expected):
    """1531^3: no load wider than one element; the measured best config differs by B's layout."""
    p = Problem(M=1531, N=1531, K=1531, batch=1, elem_bytes=2, dtype="bfloat16", tma=False, b_kmajor=b_kmajor,
                c_tma=False, divisor=1)  # fmt: skip
    assert heuristic_config(p) == expected
    # With wider loads (2000x3000x500: 4 elements) the layout does not decide.
    p4 = dataclasses.replace(p, M=2000, N=3000, K=500, divisor=4)
    assert heuristic_config(p4) == MatmulConfig("ptr", 64, 128, 32, 8, 4, 4)


def test_skinny_heuristic_takes_wide_k_steps_for_unsplit_64x32_tiles():
    # 64x4096x4096 on the H200: 64x32x256 (4 stages) 4-5% ahead of 64x32x128 (6 stages).
    cfg = heuristic_config(Problem(64, 4096, 4096, 1, 2, "bfloat16", tma=True, num_sms=132))
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages, cfg.split_k) == (64, 32, 256, 4, 1)
    assert smem_bytes(cfg, 2) <= SMEM_LIMIT_BYTES
    # Split 64x32 tiles and wider ones keep 128 (not measured with 256).
    for N in (1024, 14336):
        other = heuristic_config(Problem(64, N, 4096, 1, 2, "bfloat16", tma=True, num_sms=132))
        assert other.block_k == 128 and (other.block_n, other.split_k) != (32, 1)


def test_heuristic_splits_k_only_when_the_grid_is_small():
    big = heuristic_config(Problem(8192, 8192, 8192, 1, 2, "bfloat16", tma=True))
    assert big.split_k == 1 and (big.block_m, big.block_n) in ((128, 256), (256, 128))
    long_k = heuristic_config(Problem(1024, 1024, 65536, 1, 2, "bfloat16", tma=True))
    assert long_k.split_k > 1


def test_heuristic_takes_the_wide_tile_when_one_wave_nearly_fills_the_sms():
    # 2048 x 2048: 128 tiles of 128 x 256 on 132 SMs (97%), one wave rather than two of 128 x 128.
    wide = heuristic_config(Problem(2048, 2048, 32768, 1, 2, "bfloat16", tma=True, num_sms=132))
    assert (wide.block_m, wide.block_n, wide.split_k) == (128, 256, 1)
    # 1024 x 2048: 64 such tiles, half the SMs idle: not the wide tile.
    narrow = heuristic_config(Problem(1024, 2048, 32768, 1, 2, "bfloat16", tma=True, num_sms=132))
    assert (narrow.block_m, narrow.block_n) != (128, 256)
    # 2048 x 1024 with a short K: 128 tiles of 128 x 128, one wave rather than two of 128 x 64.
    short_k = heuristic_config(Problem(2048, 1024, 1024, 1, 2, "bfloat16", tma=True, num_sms=132))
    assert (short_k.block_m, short_k.block_n, short_k.split_k) == (128, 128, 1)
    # 768^3: 36 such tiles, latency-bound: the narrower 128 x 64 tiles.
    small = heuristic_config(Problem(768, 768, 768, 1, 2, "bfloat16", tma=True, num_sms=132))
    assert (small.block_m, small.block_n) == (128, 64)


def test_heuristic_for_few_tiles_keeps_128x128_when_k_is_long():
    # 2048x1024x4096: 128 tiles of 128x128 on 132 SMs, too many to split: one wave of them.
    one_wave = heuristic_config(Problem(2048, 1024, 4096, 1, 2, "bfloat16", tma=True))
    assert (one_wave.block_m, one_wave.block_n, one_wave.split_k) == (128, 128, 1)
    # Short K with few tiles stays on the latency-bound 128x64 tiles (768^3, 1000^3).
    for n in (768, 1000):
        short = heuristic_config(Problem(n, n, n, 1, 2, "bfloat16", tma=True))
        assert (short.block_m, short.block_n, short.split_k) == (128, 64, 1)


@pytest.mark.parametrize("M", [1, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("N,K", [(4096, 4096), (14336, 4096), (4096, 14336), (11008, 4096), (6144, 4096),
                                 (1024, 4096), (32768, 4096)])  # fmt: skip
def test_skinny_heuristic_fills_one_wave(M, N, K):
    # Decode shapes are a read of B: one wave of work items (132 SMs on the H200) that keeps
    # at least 55% of the SMs busy, K split where N alone cannot; or, for N wider than one
    # wave of 128-wide tiles, 128-wide tiles. Every split slice has real K.
    p = Problem(M, N, K, 1, 2, "bfloat16", tma=True)
    cfg = heuristic_config(p)
    items = -(-M // cfg.block_m) * -(-N // cfg.block_n) * cfg.split_k
    assert cfg.block_m >= M and cfg.num_warps == 4
    if cfg.block_n == 128 and cfg.split_k == 1:
        assert items >= p.num_sms * 0.55, (cfg, items)
    else:
        assert p.num_sms * 0.55 <= items <= p.num_sms * 1.1, (cfg, items)
    assert cfg.split_k == 1 or k_per_split(K, cfg.block_k, cfg.split_k) * (cfg.split_k - 1) < K


def test_config_json_round_trip_and_validation():
    cfg = MatmulConfig("tma", 128, 256, 64, 8, 8, 3, split_k=2, epilogue_subtile=True)
    assert MatmulConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="power of two"):
        MatmulConfig.from_json({**cfg.to_json(), "block_n": 96})
    with pytest.raises(ValueError, match="unknown MatmulConfig fields"):
        MatmulConfig.from_json({**cfg.to_json(), "blockn": 96})
    with pytest.raises(ValueError, match="'tma' kernel only"):
        MatmulConfig("ptr", 64, 64, 32, split_k=2).validate()
    with pytest.raises(ValueError, match="'tma' kernel only"):
        MatmulConfig("ptr", 64, 64, 32, programs_per_sm=2).validate()
    with pytest.raises(ValueError, match="programs_per_sm must be at least 1"):
        MatmulConfig("tma", 64, 64, 32, programs_per_sm=0).validate()
    three = MatmulConfig("tma", 64, 64, 64, programs_per_sm=3)
    assert MatmulConfig.from_json(three.to_json()) == three and three.short().endswith(" x3")
    old = {k: v for k, v in cfg.to_json().items() if k != "programs_per_sm"}  # a cache entry from before the field
    assert MatmulConfig.from_json(old) == cfg


def test_programs_per_sm_multiplies_the_persistent_grid():
    a, b = randn(64, 32, dtype=torch.float16), randn(32, 64, dtype=torch.float16)
    cfg = dataclasses.replace(INTERPRETER_TMA, block_m=16, block_n=16, programs_per_sm=2)
    plan = impl._launch(a, b, torch.empty(64, 64, dtype=torch.float16, device=DEVICE), config=cfg)
    sms = impl._num_sms(a.device)
    assert plan.grid == (persistent_programs(16, 2 * sms),) and plan.mid[5] == plan.grid[0]


@pytest.mark.parametrize(
    "items,programs,expected",
    [(512, 132, 128), (528, 132, 132), (1792, 132, 128), (3584, 132, 128), (3696, 132, 132), (133, 132, 67),
     (64, 132, 64), (0, 132, 1), (1, 132, 1), (5, 4, 3), (9, 4, 3), (8, 4, 4)],
)  # fmt: skip
def test_persistent_programs_spread_work_evenly(items, programs, expected):
    assert persistent_programs(items, programs) == expected


def test_persistent_programs_are_the_fewest_for_the_fewest_rounds():
    for items, programs in itertools.product(range(1, 300), (1, 4, 7, 132)):
        n = persistent_programs(items, programs)
        rounds = -(-items // programs)
        assert 1 <= n <= programs and -(-items // n) == rounds, (items, programs, n)
        assert n == 1 or -(-items // (n - 1)) > rounds, (items, programs, n)


@pytest.mark.parametrize("m_tiles,n_tiles,split", [(1, 5, 1), (3, 3, 1), (2, 3, 1), (3, 3, 3), (5, 2, 2), (1, 1, 1)])
@pytest.mark.parametrize("flatten", [False, True])
def test_fewer_programs_than_sms_cover_every_tile(m_tiles, n_tiles, split, flatten):
    """Work items that do not fill whole rounds of the SMs: the grid shrinks (5 items on 4
    SMs: 3 programs) and the kernel's loop strides by the grid, so every tile and K slice is
    computed exactly once; an unwritten tile stays NaN, a slice added twice is off by far
    more than the bound."""
    cfg = dataclasses.replace(INTERPRETER_TMA, block_m=16, block_n=16, split_k=split, flatten=flatten)
    if HAS_CUDA:
        cfg = dataclasses.replace(cfg, num_stages=3)
    M, N, K = 16 * m_tiles - 3, 16 * n_tiles - 8, 48
    a, b = operand(M, K, torch.float16), operand(K, N, torch.float16, transposed=True)
    out = poisoned(M, N, dtype=torch.float16)
    plan = impl._launch(a, b, out, config=cfg)
    items = m_tiles * n_tiles * split
    assert plan.grid == (persistent_programs(items, impl._num_sms(a.device)),) and plan.mid[5] == plan.grid[0]
    assert_matmul_close(out, a, b)


# -------------------------------------------------------------------------- GPU only


@pytest.mark.gpu
@pytest.mark.parametrize("batch,M,N,K,b_t", [(1, 256, 512, 128, False), (6, 256, 128, 1024, False),
                                             (6, 96, 200, 64, True), (4, 77, 50, 33, False)])  # fmt: skip
def test_repeated_bmm_takes_the_direct_launch(batch, M, N, K, b_t):
    # The first call plans (a batch of one on 2-D views); the next ones launch that plan
    # directly on new data, into poisoned outputs, and must match a fresh reference.
    dt = torch.bfloat16
    a = randn(batch, M, K, dtype=dt)
    b = randn(batch, N, K, dtype=dt).mT if b_t else randn(batch, K, N, dtype=dt)
    for i in range(3):
        a.normal_()
        b.normal_()
        out = impl.bmm_launch(a, b, out=poisoned(batch, M, N, dtype=dt))
        assert_matmul_close(out, a, b)
        if i == 0:
            assert any(key[-1] == "bmm" for key in impl._FAST_PLANS)
    fresh = impl.bmm_launch(a, b)  # no out: a new tensor per call
    assert fresh.shape == (batch, M, N) and fresh.is_contiguous()
    assert_matmul_close(fresh, a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["row", "linear"])
@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (16, 4096, 14336), (128, 1024, 4096), (2048, 2048, 8192)])
def test_heuristic_on_gpu_shapes(layout, M, N, K):
    dt = torch.bfloat16
    a = randn(M, K, dtype=dt)
    b = randn(N, K, dtype=dt).t() if layout == "linear" else randn(K, N, dtype=dt)
    for _ in range(3):  # the first call compiles; the others take the direct launch
        a.normal_()
        out = impl.mm_launch(a, b, out=poisoned(M, N, dtype=dt))
        assert_matmul_close(out, a, b)
    assert impl.chosen_config(a, b).kernel == "tma"


@pytest.mark.gpu
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize(
    "dtype,batch,M,N,K,divisor",
    [
        (torch.bfloat16, 1, 500, 300, 100, 4),
        (torch.float16, 1, 202, 306, 98, 2),
        (torch.bfloat16, 1, 1, 300, 100, 4),  # M = 1: a constant, left alone by the hint
        (torch.float32, 1, 202, 306, 98, 2),
        (torch.bfloat16, 3, 500, 300, 100, 4),
    ],
    ids=str,
)
def test_gpu_pointer_kernel_with_alignment_hint(ta, tb, dtype, batch, M, N, K, divisor):
    """Rows the TMA cannot take but a divisor can vectorize: every layout, the batch, M = 1."""
    if batch == 1:
        a, b = operand(M, K, dtype, transposed=ta), operand(K, N, dtype, transposed=tb)
        launch, shape = impl.mm_launch, (M, N)
    else:
        a = randn(batch, K, M, dtype=dtype).transpose(1, 2) if ta else randn(batch, M, K, dtype=dtype)
        b = randn(batch, N, K, dtype=dtype).transpose(1, 2) if tb else randn(batch, K, N, dtype=dtype)
        launch, shape = impl.bmm_launch, (batch, M, N)
    plan = impl._launch(a, b, poisoned(*shape, dtype=dtype))
    assert plan.cfg.kernel == "ptr" and plan.consts[-2] == divisor
    for _ in range(3):  # the first call compiles; the others take the direct launch
        a.normal_()
        out = launch(a, b, out=poisoned(*shape, dtype=dtype))
        assert_matmul_close(out, a, b)


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
        impl._launch(a, b, outs[0], config=cfg)  # compile and fill the reserve outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graphs = [torch.cuda.CUDAGraph() for _ in range(2)]
    for graph, x, out in zip(graphs, (a, a2), outs):
        with torch.cuda.graph(graph, stream=stream):
            impl._launch(x, b, out, config=cfg)
    captured = [ptr for capturing, ptr in seen if capturing]
    eager = {ptr for capturing, ptr in seen if not capturing}
    assert len(captured) == 2 and len(set(captured)) == 2 and not eager & set(captured)
    for _ in range(3):
        a.normal_()
        a2.normal_()
        for out in outs:
            out.fill_(float("nan"))
        graphs[0].replay()
        eager_out = impl.mm_launch(a2, b)  # the stream's counters, between two replays
        graphs[1].replay()
        torch.cuda.synchronize()
        assert_matmul_close(outs[0], a, b)
        assert_matmul_close(outs[1], a2, b)
        assert_matmul_close(eager_out, a2, b)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [1, 2])
def test_dependent_launch_reads_what_the_kernel_before_wrote(mode):
    """PDL is off by default (ops/matmul.py says why); when on, each launch must still see its
    predecessor's writes: a chain where every operand was just written by the kernel before
    (torch's, then the plugin's own, split-K and not), eager and under a CUDA graph."""
    with impl.pdl_mode(mode):
        _run_dependent_chain(mode)


def _run_dependent_chain(mode):
    dt = torch.bfloat16
    x = randn(16, 4096, dtype=dt)
    w1, w2 = randn(4096, 4096, dtype=dt) / 64, randn(1024, 4096, dtype=dt).t() / 64

    def chain():
        x.normal_()  # written by a torch kernel right before the first matmul reads it
        h = impl.mm_launch(x, w1)  # split-K (16x4096x4096)
        return h, impl.mm_launch(h, w2)

    h, y = chain()
    assert impl.chosen_config(x, w1).split_k > 1 and impl._PLANS and all(p.pdl == mode for p in impl._PLANS.values())
    for _ in range(3):
        h, y = chain()
        assert_matmul_close(h, x, w1)
        assert_matmul_close(y, h, w2)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        h, y = chain()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert_matmul_close(h, x, w1)
        assert_matmul_close(y, h, w2)


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
    impl._launch(xs[0][0], b, outs[0][0], config=cfg)  # compile first
    torch.cuda.synchronize()
    for i in range(8):
        for s, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                impl._launch(xs[s][i], b, outs[s][i], config=cfg)
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
    impl.mm_launch(x, lin.weight.t())
    assert impl.chosen_config(x, lin.weight.t()).split_k > 1
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


@pytest.mark.gpu
def test_warmup_then_capture_runs_the_warmed_config():
    shapes = [(8, 2048, 4096)]
    chosen = impl.warmup(shapes, torch.float16, layout="linear", tune=False)
    cfg = chosen[shapes[0]]
    a = randn(8, 4096, dtype=torch.float16)
    b = randn(2048, 4096, dtype=torch.float16).t()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=stream):
        out = torch.ops.inductor_mm_plugin.mm(a, b)
    graph.replay()
    torch.cuda.synchronize()
    assert_matmul_close(out, a, b)
    assert impl.chosen_config(a, b) == cfg


@pytest.mark.gpu
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize(
    "cfg",
    [None, MatmulConfig("tma", 128, 128, 32, 8, 8, 3, split_k=2), MatmulConfig("tma", 64, 128, 32, 8, 4, 3)],
    ids=lambda c: c.short().replace(" ", "_") if c else "heuristic",
)
def test_tf32_operand_swap_paths(tf32, ta, tb, cfg):
    # TF32 with an N-major B takes it from registers (B^T A^T).
    M, N, K = 384, 256, 1000
    a = operand(M, K, torch.float32, transposed=ta)
    b = operand(K, N, torch.float32, transposed=tb)
    bias = bias_of("N", M, N, torch.float32)
    out = poisoned(M, N, dtype=torch.float32)
    if ta and tb:
        # A from registers computed wrong results with a bias on the H200: the pointer kernel.
        assert impl.pointer_kernel_reason(a, b).startswith("TF32 with an M-major A")
        if cfg is not None:
            with pytest.raises(ValueError, match="not TF32 with an M-major A and a K-major B"):
                impl._launch(a, b, out, bias.expand(M, N), 0.5, 2.0, config=cfg)
            return
    plan = impl._launch(a, b, out, bias.expand(M, N), 0.5, 2.0, config=cfg)
    assert plan.cfg.kernel == ("ptr" if ta and tb else "tma")
    if plan.cfg.kernel == "tma":
        assert plan.consts[7] == (not ta and not tb)  # SWAP_AB
    assert_matmul_close(out, a, b, bias, beta=0.5, alpha=2.0, tf32=True)


def test_one_work_item_per_program_is_unflattened():
    """The heuristic flattens the persistent loop only where a program has a next work item
    to prefetch: 768^3 (72 tiles of 128 x 64) and decode shapes (one wave) run unflattened,
    4096^3 (256 tiles of 128 x 256 on 132 SMs) flattened."""
    bf16 = dict(batch=1, elem_bytes=2, dtype="bfloat16", tma=True)
    for shape in ((768, 768, 768), (16, 4096, 4096), (1, 14336, 4096), (64, 4096, 14336)):
        cfg = heuristic_config(Problem(*shape, **bf16))
        assert cfg.kernel == "tma" and not cfg.flatten, (shape, cfg.short())
    assert heuristic_config(Problem(4096, 4096, 4096, **bf16)).flatten
    assert heuristic_config(Problem(768, 768, 768, **bf16, num_sms=16)).flatten  # 72 tiles on 16 SMs


@pytest.mark.parametrize("a_kmajor,b_kmajor,tile,flat", [(True, True, 256, True), (True, False, 256, False),
                                                          (False, False, 128, True)])  # fmt: skip
def test_tf32_heuristic_by_layout(a_kmajor, b_kmajor, tile, flat):
    """A wave of 128 x 256 tiles where measured (both operands K-major; an N-major B, which
    takes the unflattened loop); 128 x 128 for small problems, unflattened there in every
    layout (64 tiles: one per program)."""
    big = heuristic_config(Problem(4096, 4096, 4096, 1, 4, "float32", tma=True, a_kmajor=a_kmajor,
                                   b_kmajor=b_kmajor, precision="tf32"))  # fmt: skip
    assert (big.block_m, big.block_n, big.block_k, big.flatten) == (128, tile, 32, flat)
    small = heuristic_config(Problem(1000, 1000, 1000, 1, 4, "float32", tma=True, a_kmajor=a_kmajor,
                                     b_kmajor=b_kmajor, precision="tf32"))  # fmt: skip
    assert (small.block_m, small.block_n, small.flatten) == (128, 128, False)
    assert all(smem_bytes(c, 4) <= SMEM_LIMIT_BYTES for c in (big, small))


@pytest.mark.gpu
@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False)])
def test_gpu_every_tf32_candidate_is_right(tf32, ta, tb):
    """Every config the heuristic or the autotuner can run for TF32, in each layout the TMA
    kernel takes, two tiles per program: on the H200 one unflattened config with an N-major B
    (256x128x32 s3, never a candidate) computed wrong results (bench/ab_configs.py)."""
    M, N, K = 4096, 2048, 256
    a = operand(M, K, torch.float32, transposed=ta)
    b = operand(K, N, torch.float32, transposed=tb)
    (a_kmajor, _, b_kmajor, *_) = _layout(a, b)
    p = Problem(M, N, K, 1, 4, "float32", tma=True, a_kmajor=a_kmajor, b_kmajor=b_kmajor, precision="tf32",
                num_sms=torch.cuda.get_device_properties(DEVICE).multi_processor_count)  # fmt: skip
    for cfg in candidate_configs(p):
        for _ in range(2):  # fresh inputs each time
            a.normal_(), b.normal_()
            out = poisoned(M, N, dtype=torch.float32)
            impl._launch(a, b, out, config=cfg)
            assert_matmul_close(out, a, b, tf32=True)


def test_tf32_with_m_major_a_and_k_major_b_takes_the_pointer_kernel():
    # (a_kmajor, lda, b_kmajor, ...): only TF32 with an M-major A and a K-major B.
    rule = impl._tf32_a_from_registers
    assert rule((False, 64, True), "tf32")
    assert not rule((False, 64, True), "ieee")
    assert not any(rule((ak, 64, bk), "tf32") for ak, bk in ((True, True), (True, False), (False, False)))


def test_forced_tma_config_the_call_cannot_take_is_a_clear_error():
    dt = torch.bfloat16
    # Rows of 52 halves (104 bytes) are not 16-byte aligned: no TMA descriptor.
    with pytest.raises(ValueError, match="needs TMA-compatible operands"):
        impl._launch(randn(8, 52, dtype=dt), randn(52, 16, dtype=dt), poisoned(8, 16, dtype=dt), config=INTERPRETER_TMA)
    # A batch stacked along K (an N-major B) with K = 40, not a whole number of 16-deep steps.
    a, b = randn(3, 8, 40, dtype=dt), randn(3, 40, 16, dtype=dt)
    with pytest.raises(ValueError, match="needs TMA-compatible operands"):
        impl._launch(a, b, poisoned(3, 8, 16, dtype=dt), config=INTERPRETER_TMA)
