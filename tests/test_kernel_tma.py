"""kernels/matmul_tma.py, the persistent TMA kernel, against the float64 reference with forced
configs: split-K, subtiled and pointer-stored epilogues, every operand layout, stacked
batches, fewer programs than SMs; compiled for sm_90, the descriptor prefetch reads the
parameters the TMA copies read.

On the CPU these run through Triton's interpreter, which supports host-side tensor
descriptors (triton 3.7.1); the ``gpu`` tests add GPU-sized configs, the heuristic's picks on
decode and prefill shapes, and TF32.
"""

import dataclasses
import itertools
import os
import subprocess
import sys

import pytest
import torch
from cases import DTYPES, bias_of, kernel_args, operand, poisoned, randn
from conftest import DEVICE, HAS_CUDA

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import (
    MatmulConfig,
    Problem,
    candidate_configs,
    heuristic_config,
    persistent_programs,
    tail_fits,
    tma_programs,
    whole_tiles,
    work_items,
)
from inductor_mm_plugin.configs.hopper import INTERPRETER_TMA
from inductor_mm_plugin.ops.reference import assert_matmul_close
from inductor_mm_plugin.runtime.device import num_sms
from inductor_mm_plugin.runtime import layout as runtime_layout
from inductor_mm_plugin.runtime.layout import input_precision, tf32_enabled, tma_layout

if HAS_CUDA:
    TMA_CONFIGS = [
        MatmulConfig("tma", 64, 64, 32, 8, 4, 3, epilogue_subtile=True, flatten=True),
        MatmulConfig("tma", 128, 128, 64, 8, 8, 3, epilogue_subtile=True, flatten=True),
        MatmulConfig("tma", 64, 128, 64, 4, 4, 3, split_k=3),
        MatmulConfig("tma", 16, 64, 128, 1, 4, 4, split_k=2),
        MatmulConfig("tma", 64, 64, 32, 8, 4, 3, split_k=4, epilogue_subtile=True),
    ]
else:
    TMA_CONFIGS = [
        INTERPRETER_TMA,
        dataclasses.replace(INTERPRETER_TMA, epilogue_subtile=False, flatten=True),
        dataclasses.replace(INTERPRETER_TMA, split_k=3),
        dataclasses.replace(INTERPRETER_TMA, split_k=4, epilogue_subtile=False, group_m=1),
    ]


def cfg_id(cfg):
    return cfg.short().replace(" ", "_")


@pytest.mark.parametrize("cfg", TMA_CONFIGS, ids=cfg_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
def test_tma_kernel_forced_config(cfg, dtype, ta, tb):
    # 72 x 40 x 136: partial tiles in every dimension; K = 136 leaves split-K slices of
    # unequal length, and with 4 slices of 16 columns one slice reads past K entirely.
    M, N, K = (72, 40, 136) if not HAS_CUDA else (312, 200, 1000)
    a = operand(M, K, dtype, transposed=ta)
    b = operand(K, N, dtype, transposed=tb)
    out = poisoned(M, N, dtype=dtype)
    plan = runtime.launch(a, b, out, config=cfg)
    assert plan.cfg.kernel == "tma"
    assert_matmul_close(out, a, b, tf32=dtype == torch.float32 and tf32_enabled())


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
    plan = runtime.launch(a, b, out)
    k_outer = ta or not tb
    aligned = (M if ta else K) * 2 % 16 == 0 and (K if tb else N) * 2 % 16 == 0  # 16-byte rows
    expect_tma = aligned and (not k_outer or K % plan.cfg.block_k == 0)
    assert (plan.cfg.kernel == "tma") == expect_tma, plan.cfg
    assert_matmul_close(out, a, b)


@pytest.mark.parametrize("cfg", TMA_CONFIGS[:3], ids=cfg_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias_shape", ["N", "M1", "MN", "scalar"])
def test_tma_kernel_epilogue(cfg, dtype, bias_shape):
    M, N, K = 40, 24, 72
    a, b = operand(M, K, dtype), operand(K, N, dtype, transposed=True)
    bias = bias_of(bias_shape, M, N, dtype)
    out = poisoned(M, N, dtype=dtype)
    plan = runtime.launch(a, b, out, bias.expand(M, N), 0.5, -2.0, config=cfg)
    assert plan.cfg.kernel == "tma"
    assert_matmul_close(out, a, b, bias, beta=0.5, alpha=-2.0)


@pytest.mark.parametrize("cfg", TMA_CONFIGS[:3], ids=cfg_id)
def test_tma_kernel_pointer_store(cfg):
    # An output whose rows are 4 bytes apart from alignment: loads by TMA, stores by pointers.
    M, N, K = 33, 20, 48
    dtype = torch.float32
    a, b = operand(M, K, dtype), operand(K, N, dtype)
    buf = poisoned(M, N + 1, dtype=dtype)
    out = buf[:, :N]
    plan = runtime.launch(a, b, out, config=cfg)
    assert plan.cfg.kernel == "tma" and not plan.layout.c_tma and not plan.c_tma
    assert_matmul_close(out, a, b)
    assert buf[:, N].isnan().all()  # the column past N is untouched


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
    plan = runtime.launch(a, b, out, config=cfg)
    programs = persistent_programs(m_tiles * n_tiles * split, num_sms(a.device))
    assert plan.grid == (programs,) and kernel_args(plan, a, b, out)["num_programs"] == programs
    assert_matmul_close(out, a, b)


# (output tiles, split): whole rounds of the SMs and a partial one (9 tiles on 4 SMs: 8 whole,
# 1 split in 3 or 4), tiles fewer than the SMs (3 tiles: all split, as split-K), and whole
# rounds only (8 tiles: nothing split).
SPLIT_TAIL_CASES = [((3, 3), 3), ((3, 3), 4), ((2, 5), 2), ((1, 3), 2), ((2, 4), 2), ((3, 2), 2)]


@pytest.mark.parametrize("grid_tiles,split", SPLIT_TAIL_CASES, ids=str)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("flatten", [False, True])
def test_split_tail_computes_every_tile_once(grid_tiles, split, bias, flatten):
    _split_tail_case(grid_tiles, split, bias, flatten)


@pytest.mark.gpu
@pytest.mark.parametrize("grid_tiles,split", SPLIT_TAIL_CASES[:3], ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_gpu_split_tail_computes_every_tile_once(grid_tiles, split, bias):
    """The same on the GPU suite's run (``-m gpu``), flattened as the sweep's tails are."""
    _split_tail_case(grid_tiles, split, bias, flatten=True)


def _split_tail_case(grid_tiles, split, bias, flatten):
    """split_tail: the whole rounds' tiles over all of K, the last round's in ``split`` slices
    of unequal length (K = 136 in 16-deep steps: 9 steps, slices of 3 and the rest). An
    unwritten tile stays NaN; a slice added twice or a whole tile reduced as a slice is off
    by far more than the bound. The same inputs give the same bits, launch after launch."""
    (m_tiles, n_tiles), sms = grid_tiles, num_sms(torch.device(DEVICE))
    bm, bn = (16, 16) if not HAS_CUDA else (128, 128)
    if HAS_CUDA:  # the device's own SM count: tiles past whole rounds of them
        m_tiles, n_tiles = 1, sms + m_tiles * n_tiles % sms
    cfg = dataclasses.replace(INTERPRETER_TMA, block_m=bm, block_n=bn, split_k=split, split_tail=True,
                              epilogue_subtile=False, flatten=flatten, num_stages=1 if not HAS_CUDA else 3)  # fmt: skip
    M, N, K = bm * m_tiles - 3, bn * n_tiles - 8, 136 if not HAS_CUDA else 4104
    a, b = operand(M, K, torch.float16), operand(K, N, torch.float16, transposed=True)
    bias_t = randn(N, dtype=torch.float16).expand(M, N) if bias else None
    out = poisoned(M, N, dtype=torch.float16)
    plan = runtime.launch(a, b, out, bias_t, config=cfg)
    tiles = m_tiles * n_tiles
    whole = tiles // sms * sms
    args = kernel_args(plan, a, b, out, bias_t)
    assert args["num_whole"] == whole and args["SPLIT_TAIL"]
    assert plan.grid == ((sms if whole else persistent_programs(tiles * split, sms)),)
    if bias:
        assert_matmul_close(out, a, b, bias_t)
    else:
        assert_matmul_close(out, a, b)
    again = poisoned(M, N, dtype=torch.float16)
    runtime.launch(a, b, again, bias_t, config=cfg)
    assert torch.equal(out.view(torch.int16), again.view(torch.int16))


def test_split_tail_config_rules():
    p = Problem(M=16 * 3, N=16 * 3, K=64, batch=1, elem_bytes=2, dtype="float16", tma=True, num_sms=4)
    cfg = MatmulConfig("tma", 16, 16, 16, split_k=3, split_tail=True)
    assert (whole_tiles(p, cfg), work_items(p, cfg), tma_programs(p, cfg)) == (8, 8 + 3, 4)
    assert tail_fits(p, cfg) and not tail_fits(p, dataclasses.replace(cfg, split_k=8))  # 8 slices > 4 SMs
    assert not tail_fits(dataclasses.replace(p, N=16 * 4), cfg)  # 12 tiles: whole rounds, nothing to split
    assert not tail_fits(dataclasses.replace(p, batch=2), cfg)
    assert cfg.short() == "tma 16x16x16 w4 s3 split3 tail"
    assert MatmulConfig.from_json(cfg.to_json()) == cfg
    for bad in (dict(split_k=1), dict(kernel="ptr")):
        with pytest.raises(ValueError, match="split_tail"):
            dataclasses.replace(cfg, **bad).validate()


_PTX_OF_THE_TMA_KERNEL = r"""
import re, sys
import triton
from triton.backends.compiler import GPUTarget
from inductor_mm_plugin.kernels.matmul_tma import _matmul_kernel_tma

# A decode-shaped config, A K-major, B N-major, C through a TMA store or through pointers.
c_tma, prefetch, activation = sys.argv[1] == "c_tma", int(sys.argv[2]), sys.argv[3]
BM, BN, BK = 64, 32, 256
descs = {"a_desc": f"tensordesc<bf16[{BM}, {BK}]>", "b_desc": f"tensordesc<bf16[{BK}, {BN}]>"}
if c_tma:
    descs["c_desc"] = f"tensordesc<bf16[{BM}, {BN}]>"
consts = dict(A_KMAJOR=True, B_KMAJOR=False, C_TMA=c_tma, HAS_BIAS=False, BIAS_MODE="mn", SCALE_ACC=False,
              INPUT_PRECISION="ieee", SWAP_AB=False, INTERPRETER_BF16=False, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
              GROUP_M=1, SPLIT_K=1, SPLIT_TAIL=False, EPILOGUE_SUBTILE=False, FLATTEN=False, PREFETCH=prefetch,
              BATCH=1, ACTIVATION=activation)
missing = {p.name for p in _matmul_kernel_tma.params if p.is_constexpr} - set(consts)
assert not missing, f"the script does not set the kernel's constexprs {sorted(missing)}"
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


@pytest.mark.parametrize("c_tma, activation", [(True, ""), (False, ""), (True, "gelu"), (False, "silu")])
def test_tma_kernel_prefetches_the_descriptors_its_copies_read(c_tma, activation):
    """Compiled for sm_90 on the CPU: the prefetched parameters (_prefetch_descriptors names
    them, triton's expansion of a descriptor argument fixes them) are exactly those the TMA
    copies read, and the prefetches come first; with a fused activation too."""
    prefetch = 3 if c_tma else 2  # what the plan passes on the GPU (runtime/plan.py)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    args = ["c_tma" if c_tma else "c_ptr", str(prefetch), activation]
    res = subprocess.run([sys.executable, "-c", _PTX_OF_THE_TMA_KERNEL, *args], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    if res.returncode != 0 and ("ptxas" in res.stderr or "NVPTX" in res.stderr):
        pytest.skip(f"this Triton cannot compile for sm_90 here: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    copies, prefetched, first = (part.split() for part in res.stdout.split("|"))
    assert len(copies) == prefetch and copies == prefetched and first == ["1"], res.stdout


# -------------------------------------------------------------------------- GPU only


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["row", "linear"])
@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (16, 4096, 14336), (128, 1024, 4096), (2048, 2048, 8192),
                                   (512, 512, 3584), (304, 64, 10832), (357, 120, 6256), (2032, 128, 2072)])  # fmt: skip
def test_heuristic_on_gpu_shapes(layout, M, N, K):
    dt = torch.bfloat16
    a = randn(M, K, dtype=dt)
    b = randn(N, K, dtype=dt).t() if layout == "linear" else randn(K, N, dtype=dt)
    for _ in range(3):  # the first call compiles; the others take the direct launch
        a.normal_()
        out = runtime.mm_launch(a, b, out=poisoned(M, N, dtype=dt))
        assert_matmul_close(out, a, b)
    # Aligned operands take the selector's pick, the pointer kernel included (its Inductor-shaped
    # entries win some aligned shapes); never the hand rules' pointer fallback for alignment.
    layout = tma_layout(a, b, out)
    assert layout is not None
    prob = runtime_layout.problem(a, b, out, layout, False, input_precision(dt))
    assert runtime.chosen_config(a, b) == heuristic_config(prob)


@pytest.mark.gpu
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize(
    "cfg",
    [None, MatmulConfig("tma", 128, 128, 32, 8, 8, 3, split_k=2), MatmulConfig("tma", 64, 128, 32, 8, 4, 3)],
    ids=lambda c: cfg_id(c) if c else "heuristic",
)
def test_tf32_operand_swap_paths(tf32, ta, tb, cfg):
    # TF32 with an N-major B takes it from registers (B^T A^T).
    M, N, K = 384, 256, 1000
    a = operand(M, K, torch.float32, transposed=ta)
    b = operand(K, N, torch.float32, transposed=tb)
    bias = bias_of("N", M, N, torch.float32)
    expanded = bias.expand(M, N)
    out = poisoned(M, N, dtype=torch.float32)
    if ta and tb:
        # A from registers computed wrong results with a bias on the H200: the pointer kernel.
        assert runtime.pointer_kernel_reason(a, b).startswith("TF32 with an M-major A")
        if cfg is not None:
            with pytest.raises(ValueError, match="not TF32 with an M-major A and a K-major B"):
                runtime.launch(a, b, out, expanded, 0.5, 2.0, config=cfg)
            return
    plan = runtime.launch(a, b, out, expanded, 0.5, 2.0, config=cfg)
    assert plan.cfg.kernel == ("ptr" if ta and tb else "tma")
    if plan.cfg.kernel == "tma":
        assert kernel_args(plan, a, b, out, expanded, 2.0, 0.5)["SWAP_AB"] == (not ta and not tb)
    assert_matmul_close(out, a, b, bias, beta=0.5, alpha=2.0, tf32=True)


@pytest.mark.gpu
@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False)])
def test_gpu_every_tf32_candidate_is_right(tf32, ta, tb):
    """Every config the heuristic or the autotuner can run for TF32, in each layout the TMA
    kernel takes, two tiles per program: on the H200 one unflattened config with an N-major B
    (256x128x32 s3, never a candidate) computed wrong results (docs/performance.md, fp32 with TF32)."""
    M, N, K = 4096, 2048, 256
    a = operand(M, K, torch.float32, transposed=ta)
    b = operand(K, N, torch.float32, transposed=tb)
    lay = tma_layout(a, b, torch.empty(M, N, dtype=torch.float32, device=DEVICE))
    p = Problem(M, N, K, 1, 4, "float32", tma=True, a_kmajor=lay.a_kmajor, b_kmajor=lay.b_kmajor, precision="tf32",
                num_sms=num_sms(a.device))  # fmt: skip
    for cfg in candidate_configs(p):
        for _ in range(2):  # fresh inputs each time
            a.normal_(), b.normal_()
            out = poisoned(M, N, dtype=torch.float32)
            runtime.launch(a, b, out, config=cfg)
            assert_matmul_close(out, a, b, tf32=True)
