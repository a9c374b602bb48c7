"""The plugin's matmul ops: ``inductor_mm_plugin::mm``, ``::addmm`` and ``::bmm``.

Same semantics as ``torch.mm`` / ``torch.addmm`` / ``torch.bmm``:

    mm(a, b)                            a: (M, K), b: (K, N)          -> (M, N)
    addmm(bias, a, b, *, beta, alpha)   bias broadcastable to (M, N)  -> beta * bias + alpha * (a @ b)
    bmm(a, b)                           a: (B, M, K), b: (B, K, N)    -> (B, M, N)

The output is always a new contiguous tensor in the inputs' dtype. ``beta == 0`` ignores
the bias entirely (NaN in it does not propagate), like torch.

Where the Triton kernel runs: fp16, bf16 and fp32 tensors on CUDA, or on the CPU when
Triton's interpreter is on (TRITON_INTERPRET=1 before import). fp32 uses TF32 exactly where
torch lets cuBLAS use it (set by either API: ``torch.backends.cuda.matmul.fp32_precision`` or
the legacy ``allow_tf32``; ``runtime.tf32_enabled``). Anything else that torch itself accepts
(float64, integer dtypes, sparse or nested tensors, CPU tensors without the interpreter,
matrices whose element offsets pass 2**31) runs the matching aten op instead, with a ``KernelFallbackWarning``
that says why. Input torch would reject raises a ``RuntimeError`` naming the shapes,
dtypes or devices, before anything runs. The checks and launches are in ``runtime/``.

Inside ``torch.autocast`` they cast as ``torch.mm`` does (autocast's lower-precision list, on
CUDA and the CPU): to the autocast dtype, then run with autocast off.

Order in this file: ops -> fake -> autograd -> autocast.
"""

from __future__ import annotations

import torch

from .. import torch_c
from ..runtime.checks import (
    check_addmm_args,
    check_bmm_args,
    check_mm_args,
    check_tensor_args,
    layout_unsupported_reason,
    warn_fallback,
)
from ..runtime.launch import addmm_launch, bmm_launch, mm_launch

# -------------------------------------------------------------------------------- ops
# Defined with ``torch.library.Library`` rather than ``torch.library.custom_op``, for host
# time: custom_op wraps the backend kernel and the autograd kernel in Python layers
# (argument flattening, an output-aliasing check, a Dynamo-disable frame) that cost about
# 9 us per call on CI's CPU (a no-op body: 15 us against 6 us here) and 16-21 us on the
# H200's host, more than the whole kernel of a 768^3 matmul (upstream: pytorch/pytorch#139500,
# #177109; when custom_op's fast path lands in the supported torch versions, this can go
# back to custom_op). The registrations are the
# ones custom_op makes: schema with the pt2_compliant tag, one kernel for every backend
# (CompositeExplicitAutograd), a fake kernel, and an autograd kernel that leaves the
# graph below autograd when no input needs a gradient.

_LIB = torch.library.Library("inductor_mm_plugin", "DEF")
PT2 = (torch.Tag.pt2_compliant_tag,)
_LIB.define("mm(Tensor a, Tensor b) -> Tensor", tags=PT2)
_LIB.define("addmm(Tensor bias, Tensor a, Tensor b, *, Scalar beta=1, Scalar alpha=1) -> Tensor", tags=PT2)
_LIB.define("bmm(Tensor a, Tensor b) -> Tensor", tags=PT2)
_LIB.impl("mm", mm_launch, "CompositeExplicitAutograd")
_LIB.impl("addmm", addmm_launch, "CompositeExplicitAutograd")
_LIB.impl("bmm", bmm_launch, "CompositeExplicitAutograd")



def _aten_for_sparse(name: str, check, arg_names: tuple[str, ...]):
    """The kernel of op ``name`` for sparse tensors, which the Triton kernel cannot read:
    torch's own op, so its result (with a KernelFallbackWarning) or its error. A sparse
    result comes back dense and contiguous, the op's output as its fake has it."""
    op, aten = f"inductor_mm_plugin.{name}", getattr(torch, name)

    def kernel(*args, **kwargs):
        check_tensor_args(op, arg_names, *args)
        check(op, *args)  # shapes, dtypes, devices: the same messages as the dense path's
        # Below ADInplaceOrView too, as in inference mode: below autograd alone, torch 2.13's
        # sparse @ sparse (aten::_sparse_sparse_matmul) returned an empty result on the CPU
        # (no upstream issue found).
        with torch_c.below_autograd_and_views():
            result = aten(*args, **kwargs)
        warn_fallback(op, layout_unsupported_reason(*args), 3)
        return (result.to_dense() if result.layout != torch.strided else result).contiguous()

    return kernel


def _aten_for_nested(name: str, arg_names: tuple[str, ...]):
    """The kernel of op ``name`` for nested tensors: torch's own op, above autograd (a
    composite kernel), so torch's op records its own gradients; the result stays nested."""
    op, aten = f"inductor_mm_plugin.{name}", getattr(torch, name)

    def kernel(*args, **kwargs):
        check_tensor_args(op, arg_names, *args)
        result = aten(*args, **kwargs)
        warn_fallback(op, layout_unsupported_reason(*args), 3)
        return result

    return kernel


# The dispatch keys of sparse tensors (COO; CSR, CSC, BSR, BSC), and the alias key of the
# composite kernel nested tensors run (strided and jagged layouts, with or without autograd,
# in inference mode too). Dense calls never reach these kernels, so they pay nothing for them.
SPARSE_KEYS = ("SparseCPU", "SparseCUDA", "SparseCsrCPU", "SparseCsrCUDA")
NESTED_KEY = "CompositeImplicitAutogradNestedTensor"
for _name, _check, _names in (("mm", check_mm_args, ("a", "b")), ("addmm", check_addmm_args, ("bias", "a", "b")),
                              ("bmm", check_bmm_args, ("a", "b"))):  # fmt: skip
    for _key in SPARSE_KEYS:
        _LIB.impl(_name, _aten_for_sparse(_name, _check, _names), _key)
    _LIB.impl(_name, _aten_for_nested(_name, _names), NESTED_KEY)

_MM = torch.ops.inductor_mm_plugin.mm.default
_ADDMM = torch.ops.inductor_mm_plugin.addmm.default
_BMM = torch.ops.inductor_mm_plugin.bmm.default


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.mm`` on the plugin's Triton kernel (the op ``torch.ops.inductor_mm_plugin.mm``)."""
    return _MM(a, b)


def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1) -> torch.Tensor:
    """``torch.addmm`` on the plugin's Triton kernel, the epilogue fused into it."""
    return _ADDMM(bias, a, b, beta=beta, alpha=alpha)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm`` on the plugin's Triton kernel."""
    return _BMM(a, b)


# ------------------------------------------------------------------------------- fake
# Output metadata is a pure function of the input shapes and dtypes, exactly what the
# real implementations return: a new contiguous tensor in the inputs' dtype.


@torch.library.register_fake("inductor_mm_plugin::mm", lib=_LIB)
def _mm_fake(a, b):
    check_mm_args("inductor_mm_plugin.mm", a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("inductor_mm_plugin::addmm", lib=_LIB)
def _addmm_fake(bias, a, b, *, beta=1, alpha=1):
    check_addmm_args("inductor_mm_plugin.addmm", bias, a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("inductor_mm_plugin::bmm", lib=_LIB)
def _bmm_fake(a, b):
    check_bmm_args("inductor_mm_plugin.bmm", a, b)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


# --------------------------------------------------------------------------- autograd
# Backward runs on the plugin's own ops. Incoming gradients may be non-contiguous
# (pytorch#194719); the kernel reads any strides, so they are passed as they come.


def _scaled(t: torch.Tensor, s) -> torch.Tensor:
    return t if s == 1 else t * s


def _addmm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_bias = grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        # Sum over the dims the bias was broadcast along, like torch's addmm backward.
        grad_bias = _scaled(grad.sum_to_size(ctx.bias_shape), ctx.beta)
    if ctx.needs_input_grad[1]:
        grad_a = _scaled(mm(grad, b.mT), ctx.alpha)
    if ctx.needs_input_grad[2]:
        grad_b = _scaled(mm(a.mT, grad), ctx.alpha)
    return grad_bias, grad_a, grad_b, None, None  # beta and alpha get none


class _MatmulFunction(torch.autograd.Function):
    """mm and bmm (``op``): the gradients are the same products with one operand transposed.
    Inside ``forward`` grad mode is off, so ``op`` passes its autograd kernel straight through."""

    @staticmethod
    def forward(ctx, op, a, b):
        ctx.op = op
        ctx.save_for_backward(a, b)
        return op(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        _, needs_a, needs_b = ctx.needs_input_grad
        grad_a = ctx.op(grad, b.mT) if needs_a else None
        grad_b = ctx.op(a.mT, grad) if needs_b else None
        return None, grad_a, grad_b


class _AddmmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, bias, a, b, beta, alpha):
        ctx.save_for_backward(a, b)
        ctx.bias_shape, ctx.beta, ctx.alpha = bias.shape, beta, alpha
        return _ADDMM(bias, a, b, beta=beta, alpha=alpha)

    backward = staticmethod(_addmm_backward)


def needs_grad(*tensors: torch.Tensor) -> bool:
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t is None:
            return False  # below autograd, where the op's kernel raises torch's TypeError (check_tensor_args)
    return any(t.requires_grad for t in tensors)


# The autograd kernels. ``torch_c.below_autograd`` is how torch's own register_autograd
# kernels (torch/_library/autograd.py) run an op below autograd; no public spelling exists.


def _matmul_autograd(op):
    def kernel(a, b):
        if needs_grad(a, b):
            return _MatmulFunction.apply(op, a, b)
        with torch_c.below_autograd():
            return op(a, b)

    return kernel


def _addmm_autograd(bias, a, b, *, beta=1, alpha=1):
    if needs_grad(bias, a, b):
        return _AddmmFunction.apply(bias, a, b, beta, alpha)
    with torch_c.below_autograd():
        return _ADDMM(bias, a, b, beta=beta, alpha=alpha)


_LIB.impl("mm", _matmul_autograd(_MM), "Autograd")
_LIB.impl("addmm", _addmm_autograd, "Autograd")
_LIB.impl("bmm", _matmul_autograd(_BMM), "Autograd")


# --------------------------------------------------------------------------- autocast
# What torch's matmuls do under torch.autocast (they are on its lower-precision list, on CUDA
# and the CPU): each floating-point tensor on the autocast device, float64 excepted, cast to
# the autocast dtype (torch.get_autocast_dtype, what torch.autocast(dtype=...) set), then the
# op below the Autocast key. The guard is the one torch.library.register_autocast uses; that
# function itself casts to a dtype fixed at registration and takes no keyword arguments
# (addmm's beta and alpha), so it cannot express torch.mm's rule.

AUTOCAST_KEYS = {"cuda": "AutocastCUDA", "cpu": "AutocastCPU"}


def autocast_kernel(op, device_type: str):
    """``op``'s kernel for the Autocast key of ``device_type``."""
    below_autocast = torch_c.below_key(AUTOCAST_KEYS[device_type])

    def cast(t):
        eligible = (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
                    and t.device.type == device_type)  # fmt: skip
        return t.to(torch.get_autocast_dtype(device_type)) if eligible else t

    def kernel(*args, **kwargs):
        args = [cast(a) for a in args]
        with below_autocast():
            return op(*args, **kwargs)

    return kernel


for _name, _op in (("mm", _MM), ("addmm", _ADDMM), ("bmm", _BMM)):
    for _device, _key in AUTOCAST_KEYS.items():
        _LIB.impl(_name, autocast_kernel(_op, _device), _key)
