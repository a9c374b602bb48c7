"""The stream-K TMA matmul kernel (Hopper): single matrices whose output tiles leave SMs idle.

    C = alpha * (A @ B) + beta * bias        (bias term only when HAS_BIAS)

Why: the persistent kernel (``matmul_tma.py``) gives each program whole work items, so a
grid of 72 tiles of 128 x 256 keeps 72 of 132 SMs busy and a grid of 144 tiles of 128 x 128
takes two rounds for 1.09 rounds' work. Prefill and ViT shapes with M of 197-2048 and N, K of
1-5k land there (512x4608x3072: 0.57-0.65 of cuBLAS, every tile and split of the sweep's
grid; docs/performance.md, "Stream-K"). Stream-K (Osama et al., "Stream-K: Work-centric
Parallel Decomposition for Dense Matrix-Matrix Multiplication on the GPU", PPoPP 2023) deals
out BLOCK_K steps instead: the busiest SM runs ceil(tiles * k_steps / SMs) steps, whatever
the tile count.

Structure (the paper's "data-parallel + one-wave stream-K" hybrid):

* ``num_programs`` programs, one per SM. With at least two whole rounds of tiles, all but the
  last whole round run data-parallel first (program p: tiles p, p + P, ...), as in the
  persistent kernel; the remaining tiles (one round plus the remainder, or all of them) are
  dealt out as one range of BLOCK_K steps, split evenly: program p runs steps
  [p * per, (p + 1) * per) of it, ``per`` = ceil(steps / P), crossing tile boundaries;
* a program's range touches each tile in one contiguous segment; a segment that covers its
  whole tile is stored directly;
* a partial segment goes to the workspace: slot 2p for program p's first segment, 2p + 1 for
  its last (only the first and the last segment of a range can be partial), and the program
  bumps the tile's counter. The program that finds every other contributor arrived sums the
  partials in contributor order and runs the epilogue, so the result's bits never depend on
  which program came last (torch.use_deterministic_algorithms). The tile's first contributor
  computes its segment at the end of its own range, so it is usually the last to arrive: it
  reads the counter first, and where everyone else is in, it keeps its partial in registers
  and never writes it (the same sum: its partial comes first either way);
* the last arrival resets the counter to zero, so launches reuse counters without a memset
  (runtime/split_k.py), as the persistent kernel's split-K does.

No batches, no SWAP_AB (TF32 with an N-major B) and no flattened loop: the runtime sends
stream-K configs only to 16-bit single matrices read through TMA (configs/space.py,
``MatmulConfig.validate`` and ``stream_k_fits``). The workspace holds 2 x num_programs tiles
of fp32 (34.6 MB at 128 x 256 on 132 SMs), allocated per launch from the caching allocator.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .matmul import _tile_coords
from .matmul_tma import _store_tile


@triton.jit
def _segment(a_desc, b_desc, off_m, off_n, k_lo, k_hi, A_KMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr,
             INPUT_PRECISION: tl.constexpr, INTERPRETER_BF16: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """The fp32 partial of one output tile over BLOCK_K steps [k_lo, k_hi)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_lo, k_hi):
        off_k = ki * BLOCK_K  # past K the descriptor reads zeros
        if A_KMAJOR:
            a = a_desc.load([off_m, off_k])
        else:
            a = a_desc.load([off_k, off_m]).T
        if B_KMAJOR:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        if INTERPRETER_BF16:  # interpreter only (triton-lang/triton#11584; see matmul_tma.py)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def _epilogue(acc, c_desc, c_ptr, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
              alpha, beta, HAS_BIAS: tl.constexpr, BIAS_MODE: tl.constexpr, C_TMA: tl.constexpr,
              SCALE_ACC: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """alpha, bias and the store of one finished tile, as in the persistent kernel."""
    if SCALE_ACC:
        acc = acc * alpha
    if EPILOGUE_SUBTILE:
        SUB_N: tl.constexpr = BLOCK_N // 2
        acc3 = tl.permute(tl.reshape(acc, (BLOCK_M, 2, SUB_N)), (0, 2, 1))
        acc0, acc1 = tl.split(acc3)
        _store_tile(acc0, c_desc, c_ptr, 0, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn,
                    stride_biasm, stride_biasn, beta, HAS_BIAS, BIAS_MODE, C_TMA, BLOCK_M, SUB_N)  # fmt: skip
        _store_tile(acc1, c_desc, c_ptr, 0, bias_ptr, off_m, off_n + SUB_N, M, N, stride_cm, stride_cn,
                    stride_biasm, stride_biasn, beta, HAS_BIAS, BIAS_MODE, C_TMA, BLOCK_M, SUB_N)  # fmt: skip
    else:
        _store_tile(acc, c_desc, c_ptr, 0, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn,
                    stride_biasm, stride_biasn, beta, HAS_BIAS, BIAS_MODE, C_TMA, BLOCK_M, BLOCK_N)  # fmt: skip


@triton.jit(do_not_specialize=["num_programs"])
def _matmul_kernel_streamk(
    a_desc, b_desc, c_desc, c_ptr, bias_ptr, ws_ptr, lock_ptr,
    M, N, K, num_programs,
    stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta,
    A_KMAJOR: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    C_TMA: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BIAS_MODE: tl.constexpr,
    SCALE_ACC: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # All whole rounds but the last run data-parallel; the rest is dealt out in K steps.
    dp_tiles = tl.maximum(num_tiles // num_programs - 1, 0) * num_programs

    for tile in tl.range(pid, dp_tiles, num_programs):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = _segment(a_desc, b_desc, off_m, off_n, 0, k_tiles, A_KMAJOR, B_KMAJOR, INPUT_PRECISION,
                       INTERPRETER_BF16, BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip
        _epilogue(acc, c_desc, c_ptr, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn, stride_biasm,
                  stride_biasn, alpha, beta, HAS_BIAS, BIAS_MODE, C_TMA, SCALE_ACC, EPILOGUE_SUBTILE,
                  BLOCK_M, BLOCK_N)  # fmt: skip

    steps = (num_tiles - dp_tiles) * k_tiles  # the stream-K range, counted from tile dp_tiles
    per = tl.cdiv(steps, num_programs)
    start = tl.minimum(pid * per, steps)
    end = tl.minimum(start + per, steps)
    offs_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    it = start
    while it < end:
        sk_tile = it // k_tiles
        tile_start = sk_tile * k_tiles  # the tile's first step
        k_lo = it - tile_start
        k_hi = tl.minimum(end - tile_start, k_tiles)
        pid_m, pid_n = _tile_coords(dp_tiles + sk_tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = _segment(a_desc, b_desc, off_m, off_n, k_lo, k_hi, A_KMAJOR, B_KMAJOR, INPUT_PRECISION,
                       INTERPRETER_BF16, BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip
        done = (k_lo == 0) & (k_hi == k_tiles)  # a whole tile: stored as it is
        if not done:
            # The tile's contributors: the programs whose ranges hold its first and last steps.
            first = tile_start // per
            last = (tile_start + k_tiles - 1) // per
            others = last - first  # contributors other than this one
            lock = lock_ptr + sk_tile
            in_registers = done  # False here
            if pid == first:
                # Everyone else in already: keep this partial, it comes first in the sum.
                in_registers = tl.atomic_add(lock, 0, sem="acquire", scope="gpu") == others
            done = in_registers
            if not in_registers:
                slot = 2 * pid + (it != start).to(tl.int32)  # this range's first or last segment
                tl.store(ws_ptr + slot.to(tl.int64) * TILE + offs_tile, acc)
                tl.debug_barrier()  # every thread's partial stored before the release
                done = tl.atomic_add(lock, 1, sem="acq_rel", scope="gpu") == others
                if done:
                    tl.debug_barrier()
                    # The first contributor's slot: 2 * first + 1 unless its range starts here.
                    first_slot = 2 * first + (first * per < tile_start).to(tl.int32)
                    acc = tl.load(ws_ptr + first_slot.to(tl.int64) * TILE + offs_tile, cache_modifier=".cg")
            if done:
                # Every later contributor's range starts inside this tile: slot 2q. In
                # contributor order, whoever sums; .cg: from L2, never a stale L1 line.
                # A scalar base stepped per slot: a tile of 64-bit pointers carried through
                # the loop took 256 registers a thread and spilled.
                slot_base = ws_ptr + (2 * first).to(tl.int64) * TILE
                for _ in range(first + 1, last + 1):
                    slot_base += 2 * TILE
                    acc += tl.load(slot_base + offs_tile, cache_modifier=".cg")
                tl.atomic_xchg(lock, 0)  # ready for the next launch
        if done:
            _epilogue(acc, c_desc, c_ptr, bias_ptr, off_m, off_n, M, N, stride_cm, stride_cn, stride_biasm,
                      stride_biasn, alpha, beta, HAS_BIAS, BIAS_MODE, C_TMA, SCALE_ACC, EPILOGUE_SUBTILE,
                      BLOCK_M, BLOCK_N)  # fmt: skip
        it = tile_start + k_hi
