"""The fused SwiGLU kernel's launch (kernels/swiglu_tma.py): which operands it takes, and one
call of it. ``ops/swiglu.py`` runs it where ``fused_reason`` is None, else the plugin's two
plain matmuls and the product. ``stock_swiglu`` is what stock runs instead, for the routing
pass to time the fused kernel against (inductor/measure.py)."""

from __future__ import annotations

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from ..configs import MatmulConfig, persistent_programs, swiglu_config
from ..interpreter import interpreting
from ..kernels.silu_mul import _silu_mul_kernel
from ..kernels.swiglu_tma import _swiglu_kernel_tma
from .device import device_guard, num_sms
from .layout import pointer_kernel_reason, storage_orders, tma_layout
from .plan import load

_FUSED_DTYPES = (torch.float16, torch.bfloat16)
_SILU_MUL_BLOCK = 1024  # Inductor's usual pick for a large 1-D pointwise kernel (XBLOCK, 4 warps)


def fused_reason(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> str | None:
    """Why the fused kernel cannot take these (valid, kernel-supported) operands, or None;
    from dtypes, shapes, strides and storage offsets alone."""
    if x.dtype not in _FUSED_DTYPES:
        return f"{x.dtype} (the fused kernel is for fp16 and bf16): two matmuls, then the product"
    if x.shape[0] * x.shape[1] * w_gate.shape[1] == 0:
        return "an empty dimension: nothing to fuse"
    for w in (w_gate, w_up):
        reason = pointer_kernel_reason(x, w)
        if reason is not None:
            return reason
    if storage_orders(x, w_gate)[1] != storage_orders(x, w_up)[1]:
        return "the two weights are in different storage orders: two matmuls, then the product"
    return None


def swiglu_launch(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, out: torch.Tensor,
                  config: MatmulConfig | None = None, compile_only: bool = False) -> bool:  # fmt: skip
    """``out = silu(x @ w_gate) * (x @ w_up)`` on the fused kernel, for operands whose
    ``fused_reason`` is None; False (nothing launched) where TMA cannot read them after all
    (then the caller runs the two matmuls). ``config`` forces a TMA config (its tiles, group,
    warps, stages and subtiled store; the sweep, bench/sweep_swiglu.py); ``compile_only``
    compiles and loads the kernel without launching it (``compile_swiglu``)."""
    cfg = config or swiglu_config(interpreting())
    interpreter_bf16 = interpreting() and x.dtype == torch.bfloat16
    # Interpreter only: its fp32 -> bf16 cast truncates (runtime/launch.py): store fp32, torch rounds.
    kout = out.new_empty(out.shape, dtype=torch.float32) if interpreter_bf16 else out
    gate, up = tma_layout(x, w_gate, kout), tma_layout(x, w_up, kout)
    if gate is None or up is None or gate.b_kmajor != up.b_kmajor:
        return False
    (M, K), N = x.shape, w_gate.shape[1]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    if gate.a_kmajor:
        x_desc = TensorDescriptor(x, [M, K], [gate.lda, 1], [bm, bk])
    else:
        x_desc = TensorDescriptor(x, [K, M], [gate.lda, 1], [bk, bm])
    shape, block = ([N, K], [bn, bk]) if gate.b_kmajor else ([K, N], [bk, bn])
    w_descs = [TensorDescriptor(w, shape, [lay.ldb, 1], block) for w, lay in ((w_gate, gate), (w_up, up))]
    sub_n = bn // 2 if cfg.epilogue_subtile else bn
    c_desc = TensorDescriptor(kout, [M, N], [gate.ldc, 1], [bm, sub_n]) if gate.c_tma else kout
    programs = persistent_programs(triton.cdiv(M, bm) * triton.cdiv(N, bn), num_sms(x.device))
    args = (x_desc, *w_descs, c_desc, kout, M, N, K, programs, kout.stride(0), kout.stride(1))
    consts = dict(X_KMAJOR=gate.a_kmajor, W_KMAJOR=gate.b_kmajor, C_TMA=gate.c_tma, INTERPRETER_BF16=interpreter_bf16,
                  BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, EPILOGUE_SUBTILE=cfg.epilogue_subtile)  # fmt: skip
    with device_guard(x.device):
        if compile_only:
            load(_swiglu_kernel_tma.warmup(*args, **consts, grid=(programs,), num_warps=cfg.num_warps,
                                           num_stages=cfg.num_stages))  # fmt: skip
            return True
        _swiglu_kernel_tma[(programs,)](*args, **consts, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if interpreter_bf16:
        out.copy_(kout)
    return True


def stock_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                 out: torch.Tensor, compile_only: bool = False) -> None:  # fmt: skip
    """``out = silu(x @ w_gate) * (x @ w_up)`` as stock's compiled graph runs it: cuBLAS writes
    both matmul results (into ``gate`` and ``up``, contiguous), then one pointwise kernel reads
    them and writes the product (``kernels/silu_mul.py``; ``out`` contiguous). ``compile_only``:
    compile and load that kernel, nothing else."""
    n = out.numel()
    grid, consts = (triton.cdiv(n, _SILU_MUL_BLOCK),), dict(BLOCK=_SILU_MUL_BLOCK, num_warps=4)
    if compile_only:
        with device_guard(x.device):
            load(_silu_mul_kernel.warmup(gate, up, out, n, grid=grid, **consts))
        return
    torch.mm(x, w_gate, out=gate)
    torch.mm(x, w_up, out=up)
    with device_guard(x.device):
        _silu_mul_kernel[grid](gate, up, out, n, **consts)


def compile_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, out: torch.Tensor) -> bool:
    """Compile and load, without launching, the Triton kernels of both arms of a SwiGLU pair's
    timing (``inductor/measure.py``): the fused kernel, and stock's silu*mul pass (its gate and
    up buffers contiguous like ``out``, so ``out`` stands for them). So that the routing pass
    compiles them beside its sites' kernels (``ahead.compile_calls``), not one after another
    at the pair's timing. False where the fused kernel does not take these operands."""
    if fused_reason(x, w_gate, w_up) is not None:
        return False
    stock_swiglu(x, w_gate, w_up, out, out, out, compile_only=True)
    return swiglu_launch(x, w_gate, w_up, out, compile_only=True)
