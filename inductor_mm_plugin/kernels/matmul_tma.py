"""The persistent TMA matmul kernel (Hopper), with split-K and the fused addmm epilogue.

    C = act(alpha * (A @ B) + beta * bias)   (bias term only when HAS_BIAS, act only with ACTIVATION)

Shapes: A (BATCH, M, K), B (BATCH, K, N), C (BATCH, M, N); ``mm``/``addmm`` use BATCH = 1
(Triton specializes the argument, so the batch arithmetic folds away). Operands arrive as
host-side TMA descriptors (``triton.tools.tensor_descriptor.TensorDescriptor``, made by the
runtime, ``runtime/plan.py``), so each must have a 16-byte aligned base, a unit stride on one
dimension and a 16-byte aligned stride on the other; runtime/layout.py checks this and uses the
pointer kernel otherwise. Host-side rather than device-side descriptors
(``tl.make_tensor_descriptor``): a device-side one costs every program a tensormap write to
global memory and a proxy fence before its first load, 3-4.5 us per launch on the H200
(768^3 7.3 against 4.7 us, 16x4096x4096 13.1 against 8.7 us;
bench/results/archive/2026-11-29-NVIDIA_H200-tma-fixed-cost.txt), as much as a whole small
matmul takes.

Batches: each operand's descriptor covers all its matrices stacked along the outer
(non-unit-stride) dimension, e.g. a K-major A as a (BATCH * M, K) matrix, and a work item
of matrix ``bid`` reads rows ``bid * M + ...``. This needs (runtime/layout.py's checks): batch
strides equal to rows x leading stride; K a multiple of BLOCK_K for an operand whose outer
dimension is K (an M-major A, an N-major B), since the overhang of the last K step would
read the next matrix's rows; and a TMA store only when BLOCK_M divides M, for the same
reason on the output (masked pointer stores otherwise). Split-K is for single matrices.

A transposed operand gets a descriptor of its storage order and is transposed in shared
memory (``.T``), as in Triton's persistent matmul tutorial
(python/tutorials/09-persistent-matmul.py): ``A_KMAJOR`` / ``B_KMAJOR`` say which. The
descriptors' block shapes are the tiles: A [BLOCK_M, BLOCK_K] (K-major) or [BLOCK_K,
BLOCK_M], B [BLOCK_N, BLOCK_K] (K-major) or [BLOCK_K, BLOCK_N], C [BLOCK_M, BLOCK_N] or
[BLOCK_M, BLOCK_N // 2] with ``EPILOGUE_SUBTILE``.

Structure:

* persistent: ``num_programs`` programs (at most one per SM, fewer where that spreads the
  work items more evenly: configs.persistent_programs) loop over work items (output tile x
  K slice) in grouped (L2-swizzled) tile order; with ``FLATTEN`` the tile loop and the K
  loop form one software pipeline, so the next tile's loads overlap this tile's epilogue;
* the descriptors are prefetched into the tensormap cache as the kernel starts
  (``PREFETCH``, ``_prefetch_descriptors``);
* split-K on the last round only (``SPLIT_TAIL``): where the output tiles fill some whole
  rounds over the SMs and part of one more, the whole rounds' tiles (``num_whole``, a
  multiple of the program count) are one work item each over all of K, and only the last
  round's tiles are cut into ``SPLIT_K`` slices, so that the last round fills the SMs with
  shorter items instead of running a few tiles alone (512x4608 in 128x128 tiles: 144 tiles,
  one round of 132 and 12 tiles left). The whole tiles run in the main loop (flattened where
  ``FLATTEN``), the slices in a second loop after it; summed as split-K's, below. A
  data-parallel plus split-K hybrid in the spirit of stream-K (Osama et al., 2023), with whole
  slices and the data-parallel loop kept as it is (the stream-K kernel measured in
  docs/performance.md ran its loop 10% slower even without partials);
* split-K (``SPLIT_K > 1``): each work item computes one K slice; every slice stores its
  fp32 partial tile in a workspace and bumps the tile's counter; the last slice to arrive
  sums all the partials in slice order (so the result's bits do not depend on which slice
  came last), runs the epilogue and resets the counter to zero, so that the runtime can
  hand the next launch the same counters without a memset (runtime/split_k.py);
* epilogue on the fp32 accumulator: alpha, beta * bias (any broadcast, through strides),
  then a TMA store, split into two BLOCK_N / 2 halves with ``EPILOGUE_SUBTILE`` to halve
  the store buffer; outputs that do not qualify for TMA (``C_TMA`` off) use masked stores.

Dtypes: fp16, bf16, fp32 (TF32 or IEEE dot by INPUT_PRECISION) in, the output in the input
dtype, fp32 accumulation. TF32 with an N-major B (and a K-major A) puts B first in the dot,
taken from registers (``SWAP_AB`` computes C^T = B^T A^T). TF32 with an M-major A and a
K-major B never comes here: taking A from registers the same way computed wrong results
with a bias epilogue on the H200 (triton 3.6; deterministic with split-K, one rep in three
without; possibly the register-operand wgmma ordering hazard of triton-lang/triton#5003),
so the runtime sends that layout to the pointer kernel.

Known gaps: fp32 with an N-major B, through registers, reaches 0.80-0.95 of cuBLAS with the
loop unflattened (flattened: 0.54-0.67; configs/hopper.py). Tried and left out, with their
measurements in docs/performance.md: warp specialization (within 3% of the flattened loop),
several programs per SM (no faster at 768-1024 cubed), programmatic dependent launch (faster
back to back, slower after another kernel, as in a model).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .activation import apply_activation
from .matmul import _divmod, _split_k_sum, _tile_coords  # shared with the pointer kernel


@triton.jit
def _via_registers(x):
    # An opaque register copy (PTX mov; ptxas removes it): the dot then takes this operand
    # from registers. TF32 wgmma reads only K-major operands from shared memory; for an
    # MN-major tile triton 3.6 otherwise copies it to a K-major buffer through registers at
    # every K step and waits for each wgmma (pendings = 0): 0.2x cuBLAS on the H200 for
    # fp32 with a row-major B, against 0.85x with a K-major one.
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _prefetch_descriptors(PREFETCH: tl.constexpr):
    """Start fetching the first ``PREFETCH`` descriptors (A, B, then C) into the SM's tensormap
    cache at once, rather than when the first TMA copy through each needs it, as CUTLASS's
    Hopper kernels do (``prefetch_tma_descriptor``). Triton 3.6 emits no such prefetch, and
    its TensorDescriptor API does not expose a descriptor's address: Triton's own tutorials
    prefetched with inline PTX until that API replaced host-side descriptor pointers
    (triton-lang/triton#6465, "could hack around it if this is really needed"; Meta's TLX
    fork since has a prefetch op, facebookexperimental/triton#1182). So the PTX here names
    the parameters: a 2-D host-side descriptor argument becomes five kernel parameters (the
    tensormap, then its shape and strides; triton 3.6 and 3.7, backends/nvidia/driver.py,
    expand_signature), and A, B and C are the first three arguments, so their tensormaps are
    parameters 0, 5 and 10. tests/test_kernel_tma.py compiles the kernel for sm_90 and
    checks that these are the parameters its TMA copies read. GPU only: the runtime passes 0
    in the interpreter. On the H200 it saved 0.3-0.4 us of 4.9 at 768^3 and was within 1% on
    most decode shapes (bench/results/archive/2026-12-01-NVIDIA_H200-ab-prefetch.txt).
    """
    if PREFETCH == 2:
        tl.inline_asm_elementwise(
            "prefetch.param.tensormap [_matmul_kernel_tma_param_0];\n\t"
            "prefetch.param.tensormap [_matmul_kernel_tma_param_5];\n\tmov.u32 $0, 0;",
            "=r", [], dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip
    elif PREFETCH == 3:
        tl.inline_asm_elementwise(
            "prefetch.param.tensormap [_matmul_kernel_tma_param_0];\n\t"
            "prefetch.param.tensormap [_matmul_kernel_tma_param_5];\n\t"
            "prefetch.param.tensormap [_matmul_kernel_tma_param_10];\n\tmov.u32 $0, 0;",
            "=r", [], dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip


@triton.jit
def _work_coords(tile, num_tiles, num_pid_m, num_pid_n, BATCH, GROUP_M: tl.constexpr):
    """(matrix, row tile, column tile) of a work item's output tile."""
    if isinstance(BATCH, tl.tensor):
        bid, tile = _divmod(tile, num_tiles)
    else:  # BATCH == 1: Triton makes an argument equal to 1 a constant
        bid = tile * 0  # a tensor, as the batched branch's (the epilogue casts it)
    pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    return bid, pid_m, pid_n


@triton.jit
def _store_tile(
    acc, c_desc, c_ptr, c_row0, bias_ptr, off_m, off_n, M, N,
    stride_cm, stride_cn, stride_biasm, stride_biasn, beta,
    HAS_BIAS: tl.constexpr, BIAS_MODE: tl.constexpr, C_TMA: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    ACTIVATION: tl.constexpr,
):  # fmt: skip
    if HAS_BIAS or not C_TMA:
        offs_m = off_m + tl.arange(0, BM)
        offs_n = off_n + tl.arange(0, BN)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_BIAS:
        # A broadcast bias is loaded as the vector it is: fewer loads and registers than
        # the (BM, BN) tile of addresses (which spilled with 128 x 256 tiles).
        if BIAS_MODE == "n":  # (N,) or (1, N): one row, or a scalar (both strides 0)
            bias = tl.load(bias_ptr + offs_n * stride_biasn, mask=offs_n < N, other=0.0)[None, :]
        elif BIAS_MODE == "m":  # (M, 1): one column
            bias = tl.load(bias_ptr + offs_m * stride_biasm, mask=offs_m < M, other=0.0)[:, None]
        else:
            bias = tl.load(bias_ptr + offs_m[:, None] * stride_biasm + offs_n[None, :] * stride_biasn, mask=mask,
                           other=0.0)  # fmt: skip
        acc = acc + beta * bias.to(tl.float32)
    acc = apply_activation(acc, ACTIVATION)
    if C_TMA:
        # The descriptor clips rows and columns past M and N.
        c_desc.store([c_row0 + off_m, off_n], acc.to(c_desc.dtype))
    else:
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _accumulate(
    a_desc, b_desc, bid, off_m, off_n, k_start, k_tiles, M, N, K,
    A_KMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr, INPUT_PRECISION: tl.constexpr, SWAP_AB: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """One output tile's fp32 sum over ``k_tiles`` BLOCK_K steps from ``k_start``."""
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_tiles):
        # Past K (the last slice may overhang) the descriptor reads zeros.
        off_k = k_start + ki * BLOCK_K
        if A_KMAJOR:
            a = a_desc.load([bid * M + off_m, off_k])
        else:
            a = a_desc.load([bid * K + off_k, off_m]).T
        if B_KMAJOR:
            b = b_desc.load([bid * N + off_n, off_k]).T
        else:
            b = b_desc.load([bid * K + off_k, off_n])
        if INTERPRETER_BF16:
            # Interpreter only: its bf16 tl.dot multiplies raw bit patterns
            # (triton-lang/triton#11584). The GPU path never sets this flag.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if SWAP_AB:
            acc = tl.dot(_via_registers(tl.trans(b)), tl.trans(a), acc, input_precision=INPUT_PRECISION)
        else:
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _finish_tile(
    acc, c_desc, c_mat, c_row0, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, HAS_BIAS: tl.constexpr, BIAS_MODE: tl.constexpr, C_TMA: tl.constexpr, SCALE_ACC: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACTIVATION: tl.constexpr,
):  # fmt: skip
    """The epilogue of a tile's whole sum: alpha, the bias, the activation, the store."""
    if SCALE_ACC:
        acc = acc * alpha
    if EPILOGUE_SUBTILE:
        # Two BLOCK_N / 2 halves: half the store buffer in shared memory.
        SUB_N: tl.constexpr = BLOCK_N // 2
        acc3 = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(acc3)
        _store_tile(acc0, c_desc, c_mat, c_row0, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn,
                    stride_biasm, stride_biasn, beta, HAS_BIAS, BIAS_MODE, C_TMA, BLOCK_M, SUB_N, ACTIVATION)  # fmt: skip
        _store_tile(acc1, c_desc, c_mat, c_row0, bias_ptr, off_m, off_n + SUB_N, M, N, stride_cm, stride_cn,
                    stride_biasm, stride_biasn, beta, HAS_BIAS, BIAS_MODE, C_TMA, BLOCK_M, SUB_N, ACTIVATION)  # fmt: skip
    else:
        _store_tile(acc, c_desc, c_mat, c_row0, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn,
                    stride_biasm, stride_biasn, beta, HAS_BIAS, BIAS_MODE, C_TMA, BLOCK_M, BLOCK_N, ACTIVATION)  # fmt: skip


# num_programs and num_whole vary with the shape (configs.tma_programs, configs.whole_tiles):
# unspecialized, so that 128 and 132 programs share one compiled kernel.
@triton.jit(do_not_specialize=["num_programs", "num_whole"])
def _matmul_kernel_tma(
    a_desc, b_desc, c_desc, c_ptr, bias_ptr, ws_ptr, lock_ptr,
    M, N, K, k_per_split, BATCH, num_programs, num_whole,
    stride_cb, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta,
    A_KMAJOR: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    C_TMA: tl.constexpr,  # c_desc is C's descriptor (else unused: the epilogue stores through c_ptr)
    HAS_BIAS: tl.constexpr,
    BIAS_MODE: tl.constexpr,  # "n": stride_biasm == 0, "m": stride_biasn == 0, "mn": neither
    SCALE_ACC: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    SWAP_AB: tl.constexpr,  # TF32 with an N-major B: accumulate C^T = B^T A^T, B^T from registers
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    SPLIT_TAIL: tl.constexpr,  # split only the tiles past num_whole (the last, partial round)
    EPILOGUE_SUBTILE: tl.constexpr,
    FLATTEN: tl.constexpr,
    PREFETCH: tl.constexpr,  # descriptors to prefetch (_prefetch_descriptors): 0, 2 (A, B) or 3 (and C)
    ACTIVATION: tl.constexpr,  # on the whole sum after the bias (kernels/activation.py); "" for none
):  # fmt: skip
    _prefetch_descriptors(PREFETCH)
    # The main loop's items: output tiles x K slices, or with SPLIT_TAIL whole tiles only.
    ITEM_SPLIT: tl.constexpr = 1 if SPLIT_TAIL else SPLIT_K

    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n  # per matrix
    if SPLIT_TAIL:
        num_work = num_whole
        k_tiles = tl.cdiv(K, BLOCK_K)
    else:
        num_work = num_tiles * BATCH * SPLIT_K
        k_tiles = tl.cdiv(k_per_split, BLOCK_K)
    # With FLATTEN the epilogue recomputes its tile from its own counter rather than carrying
    # the prologue's values across the flattened loop (as tutorial 09 does).
    work_c = start - num_programs

    for work in tl.range(start, num_work, num_programs, flatten=FLATTEN):
        tile = work // ITEM_SPLIT
        k_start = (work % ITEM_SPLIT) * k_per_split
        bid, pid_m, pid_n = _work_coords(tile, num_tiles, num_pid_m, num_pid_n, BATCH, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = _accumulate(a_desc, b_desc, bid, off_m, off_n, k_start, k_tiles, M, N, K, A_KMAJOR, B_KMAJOR,
                          INPUT_PRECISION, SWAP_AB, INTERPRETER_BF16, BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip

        if FLATTEN:
            work_c += num_programs
            tile_c = work_c // ITEM_SPLIT
            bid_c, pid_m, pid_n = _work_coords(tile_c, num_tiles, num_pid_m, num_pid_n, BATCH, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
        else:
            # The prologue's values are still live here; recomputing them cost 16x4096x4096
            # 1.4 us of 8.7 on the H200 (bench/results/archive/2026-11-30-NVIDIA_H200-probe-ab.txt).
            work_c = work
            tile_c = tile
            bid_c = bid
        c_row0 = bid_c * M  # this matrix's first row in the stacked output descriptor
        c_mat = c_ptr + bid_c.to(tl.int64) * stride_cb

        is_last = True
        if ITEM_SPLIT > 1:
            acc, is_last = _split_k_sum(acc, ws_ptr, lock_ptr, tile_c, work_c % ITEM_SPLIT, ITEM_SPLIT, BLOCK_M,
                                        BLOCK_N)  # fmt: skip
        if is_last:
            _finish_tile(acc, c_desc, c_mat, c_row0, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn, stride_biasm,
                         stride_biasn, alpha, beta, HAS_BIAS, BIAS_MODE, C_TMA, SCALE_ACC, EPILOGUE_SUBTILE, BLOCK_M,
                         BLOCK_N, ACTIVATION)  # fmt: skip

    if SPLIT_TAIL:
        # The last, partial round (single matrices): its tiles in SPLIT_K slices each, after the
        # whole tiles above, so the loop above keeps its one trip count and its flattening.
        # One slice per program where the slices fit the programs (configs.tail_fits).
        for t in tl.range(start, (num_tiles - num_whole) * SPLIT_K, num_programs):
            tile = num_whole + t // SPLIT_K
            _, pid_m, pid_n = _work_coords(tile, num_tiles, num_pid_m, num_pid_n, 1, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            acc = _accumulate(a_desc, b_desc, 0, off_m, off_n, (t % SPLIT_K) * k_per_split, tl.cdiv(k_per_split, BLOCK_K),
                              M, N, K, A_KMAJOR, B_KMAJOR, INPUT_PRECISION, SWAP_AB, INTERPRETER_BF16, BLOCK_M,
                              BLOCK_N, BLOCK_K)  # fmt: skip
            acc, is_last = _split_k_sum(acc, ws_ptr, lock_ptr, tile - num_whole, t % SPLIT_K, SPLIT_K, BLOCK_M, BLOCK_N)
            if is_last:
                _finish_tile(acc, c_desc, c_ptr, 0, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn, stride_biasm,
                             stride_biasn, alpha, beta, HAS_BIAS, BIAS_MODE, C_TMA, SCALE_ACC, EPILOGUE_SUBTILE,
                             BLOCK_M, BLOCK_N, ACTIVATION)  # fmt: skip
