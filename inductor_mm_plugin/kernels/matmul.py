"""The plugin's tiled matmul kernel (pointer-based, any strides, batched, fused addmm epilogue).

    C[b] = alpha * (A[b] @ B[b]) + beta * bias[b]        (bias term only when HAS_BIAS)

Shapes: A is (BATCH, M, K), B is (BATCH, K, N), C is (BATCH, M, N); ``mm``/``addmm`` use
BATCH = 1. Every operand is addressed through its own strides, so transposed and sliced
views (a ``Linear`` weight arrives as a transposed view) are read in place. The bias is
addressed through strides too: a broadcast bias has stride 0 on its broadcast dims.

Structure (from the design document in shared/reference): one program per
BLOCK_M x BLOCK_N output tile, decoded from a 1-D program id; a K loop over BLOCK_K
slices into an fp32 accumulator; masked loads and stores; ``@triton.autotune`` over tile
sizes, ``num_warps`` and ``num_stages`` keyed on the problem shape. Added on top:

* grouped (L2-swizzled) tile order: GROUP_M row-tiles share the same B column panel;
* the batch index is folded into the 1-D program id (grid axis 1 is capped at 65535);
* the addmm epilogue (alpha, beta, bias) runs on the fp32 accumulator before the store;
* fp32 inputs use TF32 or IEEE dot products, chosen by the launcher (INPUT_PRECISION).

Dtypes: fp16, bf16, fp32 in; output in the input dtype; fp32 accumulation.
Known gaps: 32-bit element offsets inside one matrix (the launcher sends larger
operands to aten); no split-K, so skinny and large-K shapes under-fill the GPU.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU through its interpreter.

    The decision is made once, when ``@triton.jit`` below runs: TRITON_INTERPRET must be
    set before this module is imported for the CPU path to exist.
    """
    return _INTERPRETING


_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

# Shared memory per block on the H200 (sm_90): Triton's configs that need more fail
# with "out of resource: Required 262144, Hardware limit 232448".
SMEM_LIMIT_BYTES = 232448


def _config(bm, bn, bk, group_m, num_warps, num_stages) -> triton.Config:
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m},
        num_warps=num_warps,
        num_stages=num_stages,
    )


def _gpu_configs() -> list[triton.Config]:
    rows = [
        # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
        (128, 256, 64, 8, 8, 3),
        (256, 128, 64, 8, 8, 3),
        (128, 128, 64, 8, 8, 4),
        (128, 128, 64, 8, 4, 4),
        (64, 256, 64, 8, 4, 4),
        (128, 64, 64, 8, 4, 4),
        (64, 128, 64, 8, 4, 4),
        (64, 64, 64, 8, 4, 4),
        (128, 128, 32, 8, 8, 3),
        # Skinny M (decode): a 16/32/64-row tile wastes no tensor-core work.
        (16, 128, 128, 1, 4, 4),
        (32, 128, 128, 1, 4, 4),
        (64, 128, 128, 1, 4, 4),
        (16, 64, 256, 1, 4, 3),
        (32, 64, 128, 1, 4, 5),
    ]
    return [_config(*r) for r in rows]


_INTERPRETER_CONFIG = _config(32, 32, 16, 4, 4, 1)


def _interpreter_configs() -> list[triton.Config]:
    # One config: the autotuner's benchmarker needs a GPU driver ("0 active drivers"),
    # and with a single config it never benchmarks. Small tiles keep the interpreter fast
    # while still giving odd shapes several partial tiles.
    return [_INTERPRETER_CONFIG]


def matmul_configs() -> list[triton.Config]:
    return _interpreter_configs() if _INTERPRETING else _gpu_configs()


# H200: 132 SMs. A grid with fewer tiles than SMs leaves the chip partly idle, so the
# heuristic shrinks the tile until the grid covers the SMs once.
_NUM_SMS = 132


def heuristic_config(M: int, N: int, K: int, elem_bytes: int) -> triton.Config:
    """A good config for this shape, chosen instantly (no benchmarking)."""
    if _INTERPRETING:
        return _INTERPRETER_CONFIG
    if elem_bytes == 4:  # fp32 tiles take twice the shared memory per element
        return _config(128, 128, 32, 8, 8, 3)
    if M <= 64:  # decode / skinny: the smallest M tile, a deep K slice, no grouping
        return _config(max(16, triton.next_power_of_2(M)), 128, 128, 1, 4, 4)
    tiles = lambda bm, bn: triton.cdiv(M, bm) * triton.cdiv(N, bn)  # noqa: E731
    if tiles(128, 256) >= _NUM_SMS:
        return _config(128, 256, 64, 8, 8, 3)
    if tiles(128, 128) >= _NUM_SMS:
        return _config(128, 128, 64, 8, 8, 4)
    return _config(64, 128, 64, 8, 4, 4)


def smem_bytes(config: triton.Config, elem_bytes: int) -> int:
    """Shared memory one pipelined stage set of A and B tiles needs."""
    kw = config.kwargs
    per_stage = (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * elem_bytes
    return per_stage * max(config.num_stages - 1, 1)


def _prune_configs(configs, named_args, **kwargs):
    """Drop configs that cannot fit shared memory or that are far too big for the shape."""
    if _INTERPRETING:
        return configs
    M, N, K = named_args["M"], named_args["N"], named_args["K"]
    elem = named_args["a_ptr"].element_size()
    kept = []
    for c in configs:
        kw = c.kwargs
        if smem_bytes(c, elem) > SMEM_LIMIT_BYTES:
            continue
        # A tile more than twice the rows of M (rounded up to 16) is wasted tensor-core work.
        if kw["BLOCK_M"] > max(16, 2 * triton.next_power_of_2(M)):
            continue
        if kw["BLOCK_N"] > max(16, 2 * triton.next_power_of_2(N)):
            continue
        if kw["BLOCK_K"] > max(16, triton.next_power_of_2(K)):
            continue
        kept.append(c)
    return kept or [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    stride_biasb, stride_biasm, stride_biasn,
    alpha, beta,
    HAS_BIAS: tl.constexpr,
    SCALE_ACC: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):  # fmt: skip
    # Tile coordinates from the 1-D program id: batch, then grouped (row-panel) order.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_batch = num_pid_m * num_pid_n
    pid_b = pid // tiles_per_batch
    tile = pid % tiles_per_batch
    tiles_per_group = GROUP_M * num_pid_n
    group_id = tile // tiles_per_group
    first_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((tile % tiles_per_group) % group_size_m)
    pid_n = (tile % tiles_per_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Loads are masked on the true indices, never wrapped with `% M`: a wrapped index with
    # a contiguity hint can read past the end of a column-major operand. Triton
    # specializes M, N, K divisible by 16, which keeps aligned loads vectorized.
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N
    # 64-bit batch offsets: BATCH * stride can pass 2**31 even when one matrix does not.
    a_ptrs = a_ptr + pid_b.to(tl.int64) * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + pid_b.to(tl.int64) * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)
        if INTERPRETER_BF16:
            # Interpreter only: its bf16 tl.dot multiplies raw bit patterns
            # (triton-lang/triton#11584). The GPU path never sets this flag.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # Epilogue on the fp32 accumulator: alpha * acc + beta * bias, then one cast.
    if SCALE_ACC:
        acc = acc * alpha
    c_mask = mask_m & mask_n
    if HAS_BIAS:
        bias_ptrs = (
            bias_ptr
            + pid_b.to(tl.int64) * stride_biasb
            + offs_m[:, None] * stride_biasm
            + offs_n[None, :] * stride_biasn
        )
        bias = tl.load(bias_ptrs, mask=c_mask, other=0.0).to(tl.float32)
        acc = acc + beta * bias
    c_ptrs = c_ptr + pid_b.to(tl.int64) * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


# The autotuned entry point. The key is the problem shape plus the K strides of A and B,
# which tell a row-major operand from a transposed one (the autotuner adds the operands'
# dtypes itself); prune_configs_by drops configs that overflow shared memory.
matmul_kernel = triton.autotune(
    configs=matmul_configs(),
    key=["M", "N", "K", "stride_ak", "stride_bk"],
    prune_configs_by={"early_config_prune": _prune_configs},
)(_matmul_kernel)
