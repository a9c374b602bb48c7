"""SwiGLU's two matmuls and their product in one persistent TMA kernel (Hopper):

    C = silu(X @ W_gate) * (X @ W_up)

The eager form of the SwiGLU template (``inductor/templates/tma.py.jinja`` with ``SWIGLU``),
which ``mm_swiglu`` runs eagerly and as Inductor's extern kernel: each X tile is read
once for both weights, the product is taken on the two fp32 accumulators, and only the
product is written, where stock writes both matmul results and reads them back in a third
kernel. Operands arrive as host-side TMA descriptors, as for ``_matmul_kernel_tma`` (whose
module says why): X (M, K) K-major or M-major, both weights (K, N) in one storage order.

The loop is ``_matmul_kernel_tma``'s without split-K (the product is not linear in a K
slice), without a bias and unflattened (the template's measurement: flattened ran 0.99 and
0.88 of stock at (M, d, f) = (2048, 1024, 4096) and (2048, 4096, 14336), against 1.16 and
1.03; configs/hopper.py, ``SWIGLU``). It is its own kernel rather than a flag of that one so
that the plain matmul's launch path (its parameter positions, runtime/direct.py) stays as it
is. fp16/bf16 only: fp32 takes the two plain matmuls (ops/swiglu.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .matmul import _tile_coords
from .matmul_tma import _store_tile


@triton.jit(do_not_specialize=["num_programs"])
def _swiglu_kernel_tma(
    x_desc, wg_desc, wu_desc, c_desc, c_ptr,
    M, N, K, num_programs, stride_cm, stride_cn,
    X_KMAJOR: tl.constexpr,
    W_KMAJOR: tl.constexpr,
    C_TMA: tl.constexpr,  # c_desc is C's descriptor (else unused: masked stores through c_ptr)
    INTERPRETER_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
):  # fmt: skip
    SUB_N: tl.constexpr = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, num_programs):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K  # past K the descriptors read zeros
            if X_KMAJOR:
                x = x_desc.load([off_m, off_k])
            else:
                x = x_desc.load([off_k, off_m]).T
            if W_KMAJOR:
                wg = wg_desc.load([off_n, off_k]).T
                wu = wu_desc.load([off_n, off_k]).T
            else:
                wg = wg_desc.load([off_k, off_n])
                wu = wu_desc.load([off_k, off_n])
            if INTERPRETER_BF16:
                # Interpreter only: its bf16 tl.dot multiplies raw bit patterns
                # (triton-lang/triton#11584). The GPU path never sets this flag.
                x = x.to(tl.float32)
                wg = wg.to(tl.float32)
                wu = wu.to(tl.float32)
            acc = tl.dot(x, wg, acc)
            acc2 = tl.dot(x, wu, acc2)
        acc = acc * tl.sigmoid(acc) * acc2  # silu(x @ w_gate) * (x @ w_up), rounded once at the store
        if EPILOGUE_SUBTILE:
            acc3 = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            acc0, acc1 = tl.split(acc3)
            _store_tile(acc0, c_desc, c_ptr, 0, c_ptr, off_m, off_n, M, N, stride_cm, stride_cn, 0, 0, 1.0,
                        False, "n", C_TMA, BLOCK_M, SUB_N, "")  # fmt: skip
            _store_tile(acc1, c_desc, c_ptr, 0, c_ptr, off_m, off_n + SUB_N, M, N, stride_cm, stride_cn, 0, 0, 1.0,
                        False, "n", C_TMA, BLOCK_M, SUB_N, "")  # fmt: skip
        else:
            _store_tile(acc, c_desc, c_ptr, 0, c_ptr, off_m, off_n, M, N, stride_cm, stride_cn, 0, 0, 1.0,
                        False, "n", C_TMA, BLOCK_M, BLOCK_N, "")  # fmt: skip
