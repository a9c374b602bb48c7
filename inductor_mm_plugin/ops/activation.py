"""``inductor_mm_plugin::mm_activation``: a Linear and its activation in one kernel,
``activation(a @ b + bias)``.

    mm_activation(a, b, bias, activation)   a: (M, K), b: (K, N), bias broadcastable to (M, N)
                                            or None; activation "relu", "gelu", "gelu_tanh"
                                            (GELU's approximate="tanh") or "silu"  -> (M, N)

The routing pass puts this op where a compiled graph applies one of these activations to a
routed matmul's result and nothing else reads that result, and where the fused kernel timed
faster than stock's cuBLAS plus Inductor's pointwise kernel (``inductor/activation_pattern.py``).
Stock writes the matmul's result and reads it back in a second kernel; here the activation
runs on the fp32 accumulator before the one store (``kernels/activation.py``), so the result
is rounded once where stock rounds twice, and GELU's erf is evaluated to 1.7e-6 relative
error rather than by libdevice (``tests/test_activation.py`` bounds both against float64).

Where the kernel cannot run (float64, complex, integer dtypes, sparse operands, ...) it is
torch's own ``activation(torch.addmm(bias, a, b))`` at the inputs' precision, with one
``KernelFallbackWarning`` naming this op. Backward recomputes ``a @ b + bias`` rather than
saving it: the op exists so that it is never written in forward.

Same order as ``matmul.py``: checks, launcher, op, fake, autograd, autocast.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .. import torch_c
from ..runtime.checks import (
    SUPPORTED_DTYPES,
    check_addmm_args,
    check_mm_args,
    check_tensor_args,
    kernel_unsupported_reason,
    layout_unsupported_reason,
    warn_fallback,
)
from ..runtime.launch import mm_activation_launch
from .matmul import AUTOCAST_KEYS, PT2, SPARSE_KEYS, addmm, autocast_kernel, mm, needs_grad

OP = "inductor_mm_plugin.mm_activation"

# Each activation as torch computes it: the fallback, the reference, and backward's derivative.
ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
}


# ----------------------------------------------------------------------------- checks


def check_mm_activation_args(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                             activation: str) -> None:  # fmt: skip
    """Raise what ``torch.addmm`` would reject, or an activation this op does not know."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    if bias is None:
        check_mm_args(op, a, b)
    else:
        check_addmm_args(op, bias, a, b)


def _operands(a, b, bias) -> tuple:
    return (a, b) if bias is None else (a, b, bias)


# --------------------------------------------------------------------------- launcher


def mm_activation_launch_checked(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
                                 out: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The matmul, bias and activation on the plugin's kernel; where it cannot run, torch's
    composition (``aten_mm_activation``)."""
    check_tensor_args(OP, ("a", "b"), a, b)
    check_mm_activation_args(OP, a, b, bias, activation)
    reason = kernel_unsupported_reason(*_operands(a, b, bias))
    if reason is not None:
        result = aten_mm_activation(a, b, bias, activation, reason)
        return result if out is None else out.copy_(result)
    return mm_activation_launch(a, b, bias, activation, out)


def aten_mm_activation(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
                       reason: str) -> torch.Tensor:  # fmt: skip
    """``activation(a @ b + bias)`` in torch's own ops, with one KernelFallbackWarning (given
    ``reason``) once it has run: torch's error, where torch raises, comes alone."""
    z = torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)
    z = z.to_dense() if z.layout != torch.strided else z
    if z.dtype in SUPPORTED_DTYPES:
        result = ACTIVATIONS[activation](z.float()).to(z.dtype)
    else:
        result = ACTIVATIONS[activation](z)
    warn_fallback(OP, reason, 3)
    return result.contiguous()


# -------------------------------------------------------------------------------- op

_LIB = torch.library.Library("inductor_mm_plugin", "FRAGMENT")
_LIB.define("mm_activation(Tensor a, Tensor b, Tensor? bias, str activation) -> Tensor", tags=PT2)
_LIB.impl("mm_activation", mm_activation_launch_checked, "CompositeExplicitAutograd")
_MM_ACTIVATION = torch.ops.inductor_mm_plugin.mm_activation.default


def _mm_activation_sparse(a, b, bias, activation):
    """Sparse operands, which the kernel cannot read: torch's composition (its result with
    the fallback warning, or its error)."""
    check_tensor_args(OP, ("a", "b"), a, b)
    check_mm_activation_args(OP, a, b, bias, activation)
    with torch_c.below_autograd_and_views():  # as ops/matmul.py's sparse kernels (see there)
        return aten_mm_activation(a, b, bias, activation, layout_unsupported_reason(*_operands(a, b, bias)))


for _key in SPARSE_KEYS:
    _LIB.impl("mm_activation", _mm_activation_sparse, _key)


def mm_activation(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                  activation: str = "gelu") -> torch.Tensor:  # fmt: skip
    """``activation(a @ b + bias)`` (the op ``torch.ops.inductor_mm_plugin.mm_activation``). For an
    ``nn.Linear`` ``lin`` followed by GELU: ``mm_activation(x, lin.weight.t(), lin.bias, "gelu")``."""
    return _MM_ACTIVATION(a, b, bias, activation)


# ------------------------------------------------------------------------------- fake


@torch.library.register_fake("inductor_mm_plugin::mm_activation", lib=_LIB)
def _mm_activation_fake(a, b, bias, activation):
    check_mm_activation_args(OP, a, b, bias, activation)
    return a.new_empty((a.shape[0], b.shape[1]))


# --------------------------------------------------------------------------- autograd


class _MmActivationFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, bias, activation):
        ctx.save_for_backward(a, b, bias)
        ctx.activation = activation
        return _MM_ACTIVATION(a, b, bias, activation)

    @staticmethod
    def backward(ctx, grad):
        a, b, bias = ctx.saved_tensors
        z = mm(a, b) if bias is None else addmm(bias, a, b)
        with torch.enable_grad():  # the activation's derivative at z, by torch's own rule
            zf = z.float().requires_grad_()
            (grad_z,) = torch.autograd.grad(ACTIVATIONS[ctx.activation](zf), zf, grad.float())
        grad_z = grad_z.to(a.dtype)
        needs_a, needs_b, needs_bias, _ = ctx.needs_input_grad
        grad_a = mm(grad_z, b.mT) if needs_a else None
        grad_b = mm(a.mT, grad_z) if needs_b else None
        grad_bias = grad_z.sum_to_size(bias.shape) if needs_bias else None
        return grad_a, grad_b, grad_bias, None


def _mm_activation_autograd(a, b, bias, activation):
    if needs_grad(*_operands(a, b, bias)):
        check_mm_activation_args(OP, a, b, bias, activation)
        reason = kernel_unsupported_reason(*_operands(a, b, bias))
        if reason is not None:  # torch's ops record the gradients: exact in float64, right for complex
            return aten_mm_activation(a, b, bias, activation, reason)
        return _MmActivationFunction.apply(a, b, bias, activation)
    with torch_c.below_autograd():
        return _MM_ACTIVATION(a, b, bias, activation)


_LIB.impl("mm_activation", _mm_activation_autograd, "Autograd")
for _device, _key in AUTOCAST_KEYS.items():  # cast as torch.addmm does (matmul.py)
    _LIB.impl("mm_activation", autocast_kernel(_MM_ACTIVATION, _device), _key)
