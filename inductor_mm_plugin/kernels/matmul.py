"""The plugin's tiled matmul kernel (pointer-based, any strides, batched, fused addmm epilogue).

    C[b] = act(alpha * (A[b] @ B[b]) + beta * bias[b])   (bias term only when HAS_BIAS, act only with ACTIVATION)

Shapes: A is (BATCH, M, K), B is (BATCH, K, N), C is (BATCH, M, N); ``mm``/``addmm`` use
BATCH = 1. Every operand is addressed through its own strides, so transposed and sliced
views (a ``Linear`` weight arrives as a transposed view) are read in place. The bias is
addressed through strides too: a broadcast bias has stride 0 on its broadcast dims.

This is the general path: any strides, any alignment, any batch layout. Aligned matrices,
and batches of them stacked at a uniform stride, go to the persistent TMA kernel in
``matmul_tma.py`` instead (runtime/layout.py decides); the
configs of both kernels are chosen in ``configs/`` (heuristic) and ``runtime/tuning.py``
(optional autotuning with a disk cache).

Structure (from the project's original design document, a tutorial on Triton matmul): one program per
BLOCK_M x BLOCK_N output tile, decoded from a 1-D program id; a K loop over BLOCK_K
slices into an fp32 accumulator; masked loads and stores. Added on top:

* grouped (L2-swizzled) tile order: GROUP_M row-tiles share the same B column panel;
* the batch index is folded into the 1-D program id (grid axis 1 is capped at 65535);
* the addmm epilogue (alpha, beta, bias) and an activation (``activation.py``) run on the fp32
  accumulator before the store;
* fp32 inputs use TF32 or IEEE dot products, chosen by the runtime (INPUT_PRECISION).

Dtypes: fp16, bf16, fp32 in; output in the input dtype; fp32 accumulation.
Split-K (``SPLIT_K > 1``, single matrices): the skinny products whose weight is read in place
(configs/eager.py) run too few tiles to fill the SMs (1x1665x30629: 27 tiles); each slice is a
program with the K loop over its own K columns, summed by ``_split_k_sum`` as in the TMA kernel.

Known gaps: 32-bit element offsets inside one matrix (the runtime sends larger
operands to aten); operands whose sizes and strides share
no power-of-two divisor (1531 x 1531) load one element at a time, without cp.async.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .activation import apply_activation


@triton.jit
def _divmod(n, d):
    """(n // d, n % d) for 0 <= n < 2**30 and d >= 1, without an integer division.

    ``div.s32`` by a runtime divisor is a long dependent chain in SASS, and the tile
    coordinates sit on the path to each tile's first load and to its store. On the H200,
    under CUDA graphs (bench/results/archive/2026-11-30-NVIDIA_H200-probe-ab.txt), a probe
    kernel given the grouped tile order with integer divisions went from 4.70 to 4.96 us at
    768^3 and from 9.5 to 10.1 us at 16x4096x4096 (row-major B); with this function, 4.78
    and 9.46. Here the quotient is estimated in fp32 from d's reciprocal, refined once on the
    remainder, and corrected to the exact integer result. Error bound: the estimate is within
    2**30 / d * 2**-22 <= 256 / d of n / d, so the first remainder is within 257 * d of zero,
    its own estimate within 1 of exact, and one correction each way makes 0 <= r < d.
    The callers' n are program and tile indices: 2**30 of them would be at least 2**38
    output elements (tiles of 16 x 16 or more), past any GPU's memory.
    """
    if isinstance(d, tl.tensor) and isinstance(n, tl.tensor):
        rcp = 1.0 / d.to(tl.float32)
        q = (n.to(tl.float32) * rcp).to(tl.int32)
        r = n - q * d
        q2 = (r.to(tl.float32) * rcp).to(tl.int32)
        q += q2
        r -= q2 * d
        q = tl.where(r < 0, q - 1, q)
        r = tl.where(r < 0, r + d, r)
        q = tl.where(r >= d, q + 1, q)
        r = tl.where(r >= d, r - d, r)
        return q, r
    return n // d, n % d


@triton.jit
def _multiple_of(x, DIVISOR: tl.constexpr):
    """``x`` itself, written as ``x // DIVISOR * DIVISOR`` (the runtime checked that DIVISOR
    divides it) so that Triton's alignment analysis knows it; constants (a stride or size of
    1, which Triton makes constexpr) pass unchanged, as ``1 // DIVISOR * DIVISOR`` is 0."""
    if DIVISOR > 1:
        if isinstance(x, tl.tensor):
            x = x // DIVISOR * DIVISOR
    return x


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # Grouped order: GROUP_M row-tiles in a row share the same B column panel in L2.
    # Without integer divisions (_divmod).
    if GROUP_M == 1:
        return _divmod(tile, num_pid_n)
    group_id, in_group = _divmod(tile, GROUP_M * num_pid_n)
    first_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_m, GROUP_M)
    pid_n, pid_m = _divmod(in_group, group_size_m)
    return first_m + pid_m, pid_n


@triton.jit
def _split_k_sum(acc, ws_ptr, lock_ptr, tile, split, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr):  # fmt: skip
    """Split-K's serial reduction, shared by both kernels: (the tile's sum, whether this slice
    holds it). Every slice's fp32 partial goes to its own workspace slot; the barrier orders
    all threads' stores before the counter's release, and the acq_rel increment orders the
    last slice's reads after every other release. The last slice to arrive sums the partials
    in slice order, its own read back too, so the result's bits do not depend on which slice
    came last (torch.use_deterministic_algorithms), and resets the counter to zero for the
    next launch (runtime/split_k.py)."""
    offs_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    slot0 = ws_ptr + tile.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
    tl.store(slot0 + split * (BLOCK_M * BLOCK_N) + offs_tile, acc)
    tl.debug_barrier()
    arrived = tl.atomic_add(lock_ptr + tile, 1, sem="acq_rel", scope="gpu")
    is_last = arrived == SPLIT_K - 1
    if is_last:
        tl.debug_barrier()
        # .cg: read from L2, never a stale L1 line.
        acc = tl.load(slot0 + offs_tile, cache_modifier=".cg")
        for s in tl.static_range(1, SPLIT_K):
            acc += tl.load(slot0 + s * (BLOCK_M * BLOCK_N) + offs_tile, cache_modifier=".cg")
        tl.atomic_xchg(lock_ptr + tile, 0)  # ready for the next launch
    return acc, is_last


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, lock_ptr,
    M, N, K, k_per_split,
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
    SPLIT_K: tl.constexpr,  # single matrices: K cut into slices of k_per_split, summed by _split_k_sum
    A_DIVISOR: tl.constexpr, B_DIVISOR: tl.constexpr, C_DIVISOR: tl.constexpr,  # load and store widths
    A_ROW_MAJOR: tl.constexpr, B_ROW_MAJOR: tl.constexpr, C_ROW_MAJOR: tl.constexpr,  # unit stride along columns
    ACTIVATION: tl.constexpr,  # on the whole sum after the bias (kernels/activation.py); "" for none
):  # fmt: skip
    # Alignment. Triton specializes an integer argument divisible by 16 (and makes one equal
    # to 1 a constant), nothing in between: with K = 500 or rows of 3000 elements every
    # masked load goes one element at a time, without cp.async (ld.global.b16 in the PTX;
    # triton-lang/triton#4478; a divisible-by-8 tier was proposed in triton-lang/triton#10389).
    # Each operand's DIVISOR is a power of two that the runtime found dividing its strides
    # and its size along its unit stride (layout.load_divisors): one operand's odd size
    # (M = 123) no longer narrows the others' loads. Rewritten by _multiple_of, whose
    # multiply Triton's alignment analysis reads: 8-byte cp.async at 4 for bf16, 16-byte at 8.
    stride_ab = _multiple_of(stride_ab, A_DIVISOR)
    stride_am = _multiple_of(stride_am, A_DIVISOR)
    stride_ak = _multiple_of(stride_ak, A_DIVISOR)
    stride_bb = _multiple_of(stride_bb, B_DIVISOR)
    stride_bk = _multiple_of(stride_bk, B_DIVISOR)
    stride_bn = _multiple_of(stride_bn, B_DIVISOR)
    stride_cb = _multiple_of(stride_cb, C_DIVISOR)
    stride_cm = _multiple_of(stride_cm, C_DIVISOR)
    stride_cn = _multiple_of(stride_cn, C_DIVISOR)
    # Tile coordinates from the 1-D program id: batch, then grouped (row-panel) order.
    pid = tl.program_id(0)
    if SPLIT_K > 1:
        # Consecutive programs take one tile's slices; below, K is this slice's length.
        pid, split = _divmod(pid, SPLIT_K)
        k_start = split * k_per_split
        K = tl.minimum(K - k_start, k_per_split)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_batch = num_pid_m * num_pid_n
    pid_b, tile = _divmod(pid, tiles_per_batch)
    pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Loads are masked on the true indices, never wrapped with `% M`: a wrapped index with
    # a contiguity hint can read past the end of a column-major operand. A mask vectorizes
    # along an operand's unit stride where the size it tests is a known multiple there: the
    # operand's own divisor, on its own copy of that size.
    if A_ROW_MAJOR:
        m_a, k_a = M, _multiple_of(K, A_DIVISOR)
    else:
        m_a, k_a = _multiple_of(M, A_DIVISOR), K
    if B_ROW_MAJOR:
        k_b, n_b = K, _multiple_of(N, B_DIVISOR)
    else:
        k_b, n_b = _multiple_of(K, B_DIVISOR), N
    if C_ROW_MAJOR:
        m_c, n_c = M, _multiple_of(N, C_DIVISOR)
    else:
        m_c, n_c = _multiple_of(M, C_DIVISOR), N
    mask_am = offs_m[:, None] < m_a
    mask_bn = offs_n[None, :] < n_b
    # 64-bit batch offsets: BATCH * stride can pass 2**31 even when one matrix does not.
    a_ptrs = a_ptr + pid_b.to(tl.int64) * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + pid_b.to(tl.int64) * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    if SPLIT_K > 1:
        a_ptrs += k_start * stride_ak
        b_ptrs += k_start * stride_bk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=mask_am & (offs_k[None, :] < k_a - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_b - k * BLOCK_K) & mask_bn, other=0.0)
        if INTERPRETER_BF16:
            # Interpreter only: its bf16 tl.dot multiplies raw bit patterns
            # (triton-lang/triton#11584). The GPU path never sets this flag.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    is_last = True
    if SPLIT_K > 1:
        acc, is_last = _split_k_sum(acc, ws_ptr, lock_ptr, tile, split, SPLIT_K, BLOCK_M, BLOCK_N)

    # Epilogue on the fp32 accumulator: alpha * acc + beta * bias, the activation, then one cast.
    if is_last:
        if SCALE_ACC:
            acc = acc * alpha
        if HAS_BIAS:
            bias_ptrs = (
                bias_ptr
                + pid_b.to(tl.int64) * stride_biasb
                + offs_m[:, None] * stride_biasm
                + offs_n[None, :] * stride_biasn
            )
            bias = tl.load(bias_ptrs, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N), other=0.0).to(tl.float32)
            acc = acc + beta * bias
        acc = apply_activation(acc, ACTIVATION)
        c_ptrs = c_ptr + pid_b.to(tl.int64) * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < m_c) & (offs_n[None, :] < n_c))
