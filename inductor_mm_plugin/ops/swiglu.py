"""``inductor_mm_plugin::mm_swiglu``: a SwiGLU MLP's two input matmuls and their product,
``silu(x @ w_gate) * (x @ w_up)``.

The routing pass puts this op where a compiled graph computes that pattern from two routed
matmuls of the same input whose results nothing else reads (``inductor/swiglu_pattern.py``).
Its lowering (``inductor/lowering.py``) runs both matmuls in one Triton template kernel
(``inductor/templates/tma.py``, the TMA template with ``SWIGLU``): each x tile is read once for both
weights, the product is taken on the two fp32 accumulators, and only the product is
written. Stock Inductor writes both matmul results and reads them back in a third kernel.

Eagerly, and as the extern kernel where the template does not apply, fp16/bf16 operands TMA
can read run the same fused loop as one eager kernel (``kernels/swiglu_tma.py``, launched by
``runtime/swiglu.py``); others run the plugin's two matmul kernels followed by the product in
fp32, rounded once to the inputs' dtype. The fused forms skip the rounding of the two matmul
results, so the forms agree to within that rounding
(``tests/test_swiglu.py`` bounds both against float64). Where the kernel cannot run (float64,
complex, integer dtypes, sparse operands, ...) it is torch's own ``silu(x @ w_gate) * (x @ w_up)``
at the inputs' precision, with one ``KernelFallbackWarning`` naming this op: float64 stays
float64, complex keeps its imaginary part, integers raise ``F.silu``'s error.

Same order as ``matmul.py``: checks, launcher, op, fake, autograd, autocast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import torch_c
from ..runtime.checks import (
    SUPPORTED_DTYPES,
    check_same,
    check_tensor_args,
    fmt_shape,
    kernel_unsupported_reason,
    layout_unsupported_reason,
    warn_fallback,
)
from ..runtime.launch import mm_launch
from ..runtime.swiglu import fused_reason, swiglu_launch
from .matmul import AUTOCAST_KEYS, PT2, SPARSE_KEYS, autocast_kernel, mm, needs_grad

OP = "inductor_mm_plugin.mm_swiglu"


# ----------------------------------------------------------------------------- checks


def check_mm_swiglu_args(op: str, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> None:
    """Raise what ``silu(x @ w_gate) * (x @ w_up)`` would reject: ranks, inner dimensions,
    the two weights' shapes, dtypes, devices."""
    if x.dim() != 2 or w_gate.dim() != 2 or w_up.dim() != 2:
        raise RuntimeError(
            f"{op}: expected 2-D matrices, but got x with shape ({fmt_shape(x)}), w_gate with shape "
            f"({fmt_shape(w_gate)}) and w_up with shape ({fmt_shape(w_up)})"
        )
    if w_gate.shape != w_up.shape:
        raise RuntimeError(
            f"{op}: expected w_gate and w_up to have the same shape, but got ({fmt_shape(w_gate)}) "
            f"and ({fmt_shape(w_up)})"
        )
    if x.shape[1] != w_gate.shape[0]:
        raise RuntimeError(
            f"{op}: x and w_gate shapes cannot be multiplied ({fmt_shape(x)} and {fmt_shape(w_gate)}): "
            f"x.shape[1] = {x.shape[1]} must equal w_gate.shape[0] = {w_gate.shape[0]}"
        )
    check_same(op, [("x", x), ("w_gate", w_gate), ("w_up", w_up)])


def unsupported_reason(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> str | None:
    """Why the kernel cannot take these (valid) operands, or None."""
    return layout_unsupported_reason(x, w_gate, w_up) or kernel_unsupported_reason(x, w_gate, w_up)


# --------------------------------------------------------------------------- launcher


def mm_swiglu_launch(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                     out: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Both matmuls and the product in the fused kernel (runtime/swiglu.py) where it takes the
    operands; else the two matmuls on the plugin's kernel, then the product in fp32, rounded
    once; where the kernel cannot run, torch's composition (``aten_mm_swiglu``)."""
    check_tensor_args(OP, ("x", "w_gate", "w_up"), x, w_gate, w_up)
    check_mm_swiglu_args(OP, x, w_gate, w_up)
    reason = unsupported_reason(x, w_gate, w_up)
    if reason is not None:
        result = aten_mm_swiglu(x, w_gate, w_up, reason)
        return result if out is None else out.copy_(result)
    if fused_reason(x, w_gate, w_up) is None:
        result = torch.empty((x.shape[0], w_gate.shape[1]), dtype=x.dtype, device=x.device) if out is None else out
        if swiglu_launch(x, w_gate, w_up, result):
            return result
    gate = mm_launch(x, w_gate)
    up = mm_launch(x, w_up)
    product = F.silu(gate.float()) * up.float()
    if out is None:
        return product.to(x.dtype)
    return out.copy_(product)


def aten_mm_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, reason: str) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)`` in torch's own ops, with one KernelFallbackWarning
    (given ``reason``) once it has run: torch's error, where torch raises, comes alone. The
    kernel's dtypes keep the kernel path's fp32 product, rounded once; others compute in
    their own dtype (float64, complex) or raise as ``F.silu`` does (integers). Above
    autograd, torch's ops record their own gradients."""
    gate, up = torch.mm(x, w_gate), torch.mm(x, w_up)
    gate, up = (t.to_dense() if t.layout != torch.strided else t for t in (gate, up))  # sparse @ sparse is sparse
    if x.dtype in SUPPORTED_DTYPES:
        result = (F.silu(gate.float()) * up.float()).to(x.dtype)
    else:
        result = F.silu(gate) * up
    warn_fallback(OP, reason, 3)
    return result.contiguous()


# -------------------------------------------------------------------------------- op

_LIB = torch.library.Library("inductor_mm_plugin", "FRAGMENT")
_LIB.define("mm_swiglu(Tensor x, Tensor w_gate, Tensor w_up) -> Tensor", tags=PT2)
_LIB.impl("mm_swiglu", mm_swiglu_launch, "CompositeExplicitAutograd")
_MM_SWIGLU = torch.ops.inductor_mm_plugin.mm_swiglu.default


def _mm_swiglu_sparse(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """Sparse operands, which the kernel cannot read: torch's composition (its result with
    the fallback warning, or its error)."""
    check_tensor_args(OP, ("x", "w_gate", "w_up"), x, w_gate, w_up)
    check_mm_swiglu_args(OP, x, w_gate, w_up)
    with torch_c.below_autograd_and_views():  # as ops/matmul.py's sparse kernels (see there)
        return aten_mm_swiglu(x, w_gate, w_up, layout_unsupported_reason(x, w_gate, w_up))


for _key in SPARSE_KEYS:
    _LIB.impl("mm_swiglu", _mm_swiglu_sparse, _key)


def mm_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)`` (the op ``torch.ops.inductor_mm_plugin.mm_swiglu``).
    For ``nn.Linear`` weights of shape (N, K), pass ``gate.weight.t()`` and ``up.weight.t()``."""
    return _MM_SWIGLU(x, w_gate, w_up)


# ------------------------------------------------------------------------------- fake


@torch.library.register_fake("inductor_mm_plugin::mm_swiglu", lib=_LIB)
def _mm_swiglu_fake(x, w_gate, w_up):
    check_mm_swiglu_args(OP, x, w_gate, w_up)
    return x.new_empty((x.shape[0], w_gate.shape[1]))


# --------------------------------------------------------------------------- autograd
# The two matmul results are recomputed in backward rather than saved: the op exists so
# that they are never written in forward.


class _MmSwigluFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_gate, w_up):
        ctx.save_for_backward(x, w_gate, w_up)
        return _MM_SWIGLU(x, w_gate, w_up)

    @staticmethod
    def backward(ctx, grad):
        x, w_gate, w_up = ctx.saved_tensors
        gate, up = mm(x, w_gate).float(), mm(x, w_up).float()
        sig = torch.sigmoid(gate)
        grad = grad.float()
        # d silu(g) / dg = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
        grad_gate = (grad * up * sig * (1 + gate * (1 - sig))).to(x.dtype)
        grad_up = (grad * gate * sig).to(x.dtype)
        needs_x, needs_gate, needs_up = ctx.needs_input_grad
        grad_x = mm(grad_gate, w_gate.mT) + mm(grad_up, w_up.mT) if needs_x else None
        return grad_x, mm(x.mT, grad_gate) if needs_gate else None, mm(x.mT, grad_up) if needs_up else None


def _mm_swiglu_autograd(x, w_gate, w_up):
    if needs_grad(x, w_gate, w_up):
        check_mm_swiglu_args(OP, x, w_gate, w_up)
        reason = unsupported_reason(x, w_gate, w_up)
        if reason is not None:  # torch's ops record the gradients: exact in float64, right for complex
            return aten_mm_swiglu(x, w_gate, w_up, reason)
        return _MmSwigluFunction.apply(x, w_gate, w_up)
    with torch_c.below_autograd():
        return _MM_SWIGLU(x, w_gate, w_up)


_LIB.impl("mm_swiglu", _mm_swiglu_autograd, "Autograd")
for _device, _key in AUTOCAST_KEYS.items():  # cast as torch.mm does (matmul.py)
    _LIB.impl("mm_swiglu", autocast_kernel(_MM_SWIGLU, _device), _key)
