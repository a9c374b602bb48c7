"""kernels/matmul.py: the pointer kernel against the float64 reference with forced configs, its
per-operand load-width divisors (compiled for sm_90: cp.async instead of element loads), and the jit
helpers both kernels share: ``_divmod`` (exact without an integer division) and the grouped
tile order ``_tile_coords`` (test_templates.py checks the templates' copy of it against
``eager_tile_coords`` here)."""

import functools
import itertools
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from cases import DTYPES, bias_of, kernel_args, operand, poisoned, randn
from conftest import DEVICE, HAS_CUDA

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import MatmulConfig
from inductor_mm_plugin.configs.hopper import INTERPRETER_PTR
from inductor_mm_plugin.kernels.matmul import _divmod, _tile_coords
from inductor_mm_plugin.ops.reference import assert_matmul_close
from inductor_mm_plugin.runtime.layout import tf32_enabled

PTR_CONFIG = MatmulConfig("ptr", 64, 128, 32, 8, 4, 4) if HAS_CUDA else INTERPRETER_PTR


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("batch,bias_shape", [(None, None), (None, "M1"), (3, None)])
def test_pointer_kernel_forced_config(dtype, ta, tb, batch, bias_shape):
    """Any strides, partial tiles in every dimension, a batch folded into the program id,
    the addmm epilogue."""
    M, N, K = (72, 40, 136) if not HAS_CUDA else (312, 200, 1000)
    if batch is None:
        a, b = operand(M, K, dtype, transposed=ta), operand(K, N, dtype, transposed=tb)
        out = poisoned(M, N, dtype=dtype)
    else:
        a = randn(batch, K, M, dtype=dtype).transpose(1, 2) if ta else randn(batch, M, K, dtype=dtype)
        b = randn(batch, N, K, dtype=dtype).transpose(1, 2) if tb else randn(batch, K, N, dtype=dtype)
        out = poisoned(batch, M, N, dtype=dtype)
    bias = None if bias_shape is None else bias_of(bias_shape, M, N, dtype)
    plan = runtime.launch(a, b, out, None if bias is None else bias.expand(M, N), 0.5, 2.0, config=PTR_CONFIG)
    assert plan.cfg.kernel == "ptr"
    tf32 = dtype == torch.float32 and tf32_enabled()
    assert_matmul_close(out, a, b, bias, beta=0.5, alpha=2.0, tf32=tf32)


@pytest.mark.parametrize("split", [2, 3, 5])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True)])
def test_pointer_kernel_split_k(split, dtype, ta, tb):
    """Split-K in the pointer kernel: unaligned sizes (odd K, so the last slice is shorter and
    its last step overhangs), partial tiles, a bias; the same bits from a second launch, which
    reuses the first one's counters (each reset by its tile's last slice)."""
    M, N, K = (19, 37, 211) if not HAS_CUDA else (30, 1656, 25974)
    cfg = MatmulConfig("ptr", 32, 64, 32 if not HAS_CUDA else 128, 1, 4, 3, split_k=split)
    a, b = operand(M, K, dtype, transposed=ta), operand(K, N, dtype, transposed=tb)
    bias = bias_of("N", M, N, dtype)
    outs = []
    for _ in range(2):
        out = poisoned(M, N, dtype=dtype)
        plan = runtime.launch(a, b, out, bias.expand(M, N), 0.5, 2.0, config=cfg)
        outs.append(out)
    assert plan.cfg.kernel == "ptr" and plan.grid == (triton.cdiv(M, 32) * triton.cdiv(N, 64) * split,)
    assert kernel_args(plan, a, b, outs[0], bias.expand(M, N), 2.0, 0.5)["SPLIT_K"] == split
    tf32 = dtype == torch.float32 and tf32_enabled()
    assert_matmul_close(outs[0], a, b, bias, beta=0.5, alpha=2.0, tf32=tf32)
    assert torch.equal(outs[0], outs[1]), "a second launch gave other bits"


def test_pointer_kernel_split_k_is_for_single_matrices():
    a = randn(2, 16, 64, dtype=torch.float16)
    b = randn(2, 64, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="splits K only for a single matrix, got a batch of 2"):
        runtime.launch(a, b, poisoned(2, 16, 16, dtype=torch.float16), config=MatmulConfig("ptr", 16, 16, 16, split_k=2))


# ----------------------------------------------------------------------- load width

_PTX_OF_THE_POINTER_KERNEL = r"""
import re, sys
import torch
import triton
from triton.backends.compiler import GPUTarget
from inductor_mm_plugin.kernels.matmul import _matmul_kernel
from inductor_mm_plugin.runtime.layout import pointer_hints

# mm of bf16 operands laid out as the argument says (A transposed: a = x.t(); B a Linear
# weight: b = w.t()): the arguments as the launcher passes them, specialized as Triton's JIT
# would (ints divisible by 16 marked, strides of 1 made constants).
M, N, K = map(int, sys.argv[1].split("x"))
ta, tb = sys.argv[2] == "t", sys.argv[3] == "t"
a = torch.empty(K, M, dtype=torch.bfloat16).t() if ta else torch.empty(M, K, dtype=torch.bfloat16)
b = torch.empty(N, K, dtype=torch.bfloat16).t() if tb else torch.empty(K, N, dtype=torch.bfloat16)
c = torch.empty(M, N, dtype=torch.bfloat16)
mid = dict(M=M, N=N, K=K, stride_ab=0, stride_am=a.stride(0), stride_ak=a.stride(1), stride_bb=0,
           stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cb=0, stride_cm=N, stride_cn=1, stride_biasb=0,
           stride_biasm=0, stride_biasn=0, k_per_split=K)
hints = pointer_hints(a, b, c)
if sys.argv[4] == "none":
    hints.update(A_DIVISOR=1, B_DIVISOR=1, C_DIVISOR=1)
consts = dict(HAS_BIAS=False, SCALE_ACC=False, INPUT_PRECISION="ieee", INTERPRETER_BF16=False, ACTIVATION="",
              BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, SPLIT_K=1, **hints)
missing = {p.name for p in _matmul_kernel.params if p.is_constexpr} - set(consts)
assert not missing, f"the script does not set the kernel's constexprs {sorted(missing)}"
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
copies = re.findall(r"cp\.async\.c[ag]\.shared\.global[^;]*", ptx)
widths = sorted({int(c.split(",")[2].strip(), 0) for c in copies})
print(hints["A_DIVISOR"], hints["B_DIVISOR"], hints["C_DIVISOR"], ",".join(map(str, widths)) or "-",
      len(re.findall(r"ld\.global(?:\.\w+)*\.b16", ptx)), len(re.findall(r"st\.global(?:\.\w+)*\.b16", ptx)))
"""


@pytest.mark.parametrize(
    "shape,ta,tb,hint,expected",
    [
        # K = 500 and rows of 3000 elements: unhinted, one bf16 at a time, loaded and stored.
        ("2000x3000x500", "n", "n", "none", (1, 1, 1, "-", True, True)),
        # Hinted: 8-byte cp.async for A (K = 500), 16-byte for B and whole-vector stores (N = 3000).
        ("2000x3000x500", "n", "n", "hint", (4, 8, 8, "8,16", False, False)),
        # M = 53 under a transposed A: only A's loads (along M) go one element at a time; B's
        # rows of 552 and C's of 136 keep 16 bytes (one divisor for all gave none of them).
        ("53x136x552", "t", "t", "hint", (1, 8, 8, "16", True, False)),
    ],
)
def test_divisors_turn_element_loads_into_cp_async(shape, ta, tb, hint, expected):
    """Compiled for sm_90 on the CPU (Triton's own ptxas): each operand's divisor
    (layout.load_divisors) sets the width of its own loads, or of C's stores."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _PTX_OF_THE_POINTER_KERNEL, shape, ta, tb, hint], env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    if res.returncode != 0 and ("ptxas" in res.stderr or "NVPTX" in res.stderr):
        pytest.skip(f"this Triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    da, db, dc, widths, element_loads, element_stores = res.stdout.split()
    assert (int(da), int(db), int(dc), widths, int(element_loads) > 0, int(element_stores) > 0) == expected


# ------------------------------------------------------------------- shared jit helpers


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
def _tile_order_probe(out_ptr, tiles_ptr, count, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    for i in range(count):
        tile = tl.load(tiles_ptr + i)  # a tensor, as the tile index is in the kernels
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        tl.store(out_ptr + 2 * i, pid_m)
        tl.store(out_ptr + 2 * i + 1, pid_n)


# (num_pid_m, num_pid_n, GROUP_M): one row or column of tiles, no grouping, a group taller
# than the grid, last groups shorter than GROUP_M. The interpreter takes ~5 ms a tile.
TILE_GRIDS = [(1, 13, 1), (7, 5, 1), (7, 5, 8), (13, 3, 4), (16, 16, 8), (9, 4, 2), (5, 6, 4), (3, 1, 8), (1, 1, 8)]


@functools.cache
def eager_tile_coords(num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[tuple[int, int], ...]:
    """(row tile, column tile) of every tile index, as the eager kernels' ``_tile_coords``
    computes them (on the GPU, or through Triton's interpreter)."""
    count = num_pid_m * num_pid_n
    out = torch.full((count, 2), -1, dtype=torch.int32, device=DEVICE)
    tiles = torch.arange(count, dtype=torch.int32, device=DEVICE)
    _tile_order_probe[(1,)](out, tiles, count, num_pid_m, num_pid_n, group_m)
    return tuple(tuple(t) for t in out.tolist())


@pytest.mark.parametrize("num_pid_m,num_pid_n,group_m", TILE_GRIDS)
def test_tile_order_covers_each_tile_once_in_groups_of_rows(num_pid_m, num_pid_n, group_m):
    """Every output tile exactly once; tiles come in groups of GROUP_M row tiles (the last
    group shorter), each group walked column by column, so that its row tiles share the
    column panel of B they read."""
    coords = eager_tile_coords(num_pid_m, num_pid_n, group_m)
    assert sorted(coords) == [(m, n) for m in range(num_pid_m) for n in range(num_pid_n)]
    start = 0
    for first in range(0, num_pid_m, group_m):
        rows = min(group_m, num_pid_m - first)
        group = coords[start : start + rows * num_pid_n]
        assert list(group) == [(first + i, n) for n in range(num_pid_n) for i in range(rows)], (first, group)
        start += rows * num_pid_n


# -------------------------------------------------------------------------- GPU only


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
        (torch.bfloat16, 1, 53, 136, 552, None),  # A's divisor 1 along M (transposed), else 8
    ],
    ids=str,
)
def test_gpu_pointer_kernel_with_alignment_hint(ta, tb, dtype, batch, M, N, K, divisor):
    """Rows the TMA cannot take but divisors can vectorize: every layout, the batch, M = 1,
    an odd M that narrows only the loads along M."""
    if batch == 1:
        a, b = operand(M, K, dtype, transposed=ta), operand(K, N, dtype, transposed=tb)
        launch, shape = runtime.mm_launch, (M, N)
    else:
        a = randn(batch, K, M, dtype=dtype).transpose(1, 2) if ta else randn(batch, M, K, dtype=dtype)
        b = randn(batch, N, K, dtype=dtype).transpose(1, 2) if tb else randn(batch, K, N, dtype=dtype)
        launch, shape = runtime.bmm_launch, (batch, M, N)
    out = poisoned(*shape, dtype=dtype)
    # Read in place (the default may copy: layout.aligned); the mixed case forced onto the pointer kernel, which
    # the TMA kernel would otherwise take where A is not transposed.
    plan = runtime.launch(a, b, out, copy_unaligned=False, config=None if divisor else PTR_CONFIG)
    hints = kernel_args(plan, a, b, out)
    expected = (divisor,) * 3 if divisor else (1 if ta else 8, 8, 8)
    assert plan.cfg.kernel == "ptr" and (hints["A_DIVISOR"], hints["B_DIVISOR"], hints["C_DIVISOR"]) == expected
    for _ in range(3):  # the first call compiles; the others take the direct launch
        a.normal_()
        out = launch(a, b, out=poisoned(*shape, dtype=dtype))
        assert_matmul_close(out, a, b)
