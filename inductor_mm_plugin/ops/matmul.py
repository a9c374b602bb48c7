"""The plugin's matmul ops: ``inductor_mm_plugin::mm``, ``::addmm`` and ``::bmm``.

Same semantics as ``torch.mm`` / ``torch.addmm`` / ``torch.bmm``:

    mm(a, b)                            a: (M, K), b: (K, N)          -> (M, N)
    addmm(bias, a, b, *, beta, alpha)   bias broadcastable to (M, N)  -> beta * bias + alpha * (a @ b)
    bmm(a, b)                           a: (B, M, K), b: (B, K, N)    -> (B, M, N)

The output is always a new contiguous tensor in the inputs' dtype. ``beta == 0`` ignores
the bias entirely (NaN in it does not propagate), like torch.

Where the Triton kernel runs: fp16, bf16 and fp32 tensors on CUDA, or on the CPU when
Triton's interpreter is on (TRITON_INTERPRET=1 before import). fp32 uses TF32 exactly when
``torch.backends.cuda.matmul.allow_tf32`` is set. Anything else that torch itself accepts
(float64, integer dtypes, CPU tensors without the interpreter, matrices whose element
offsets pass 2**31) runs the matching aten op instead, with a ``KernelFallbackWarning``
that says why. Input torch would reject raises a ``RuntimeError`` naming the shapes,
dtypes or devices, before anything runs.

Order in this file: checks -> launcher -> custom ops -> fake -> autograd.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Sequence

import torch
import triton

from ..kernels.matmul import _matmul_kernel, heuristic_config, interpreting, matmul_kernel

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Element offsets inside one matrix are 32-bit in the kernel.
_MAX_OFFSET = 2**31 - 1


class KernelFallbackWarning(UserWarning):
    """An op ran the aten kernel instead of the plugin's Triton kernel."""


# ----------------------------------------------------------------------------- checks


def _fmt_shape(t: torch.Tensor) -> str:
    return "x".join(str(s) for s in t.shape) if t.dim() else "[]"


def _check_same(op: str, tensors: Sequence[tuple[str, torch.Tensor]]) -> None:
    (name0, t0), rest = tensors[0], tensors[1:]
    for name, t in rest:
        if t.device != t0.device:
            raise RuntimeError(
                f"{op}: expected all tensors to be on the same device, but found "
                f"{name0} on {t0.device} and {name} on {t.device}"
            )
    for name, t in rest:
        if t.dtype != t0.dtype:
            raise RuntimeError(
                f"{op}: expected {name0} and {name} to have the same dtype, but got "
                f"{name0}: {t0.dtype} and {name}: {t.dtype}"
            )


def check_mm_args(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise what torch.mm would reject: ranks, inner dimensions, dtypes, devices."""
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(
            f"{op}: expected 2-D matrices, but got a with shape ({_fmt_shape(a)}) "
            f"and b with shape ({_fmt_shape(b)})"
        )
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"{op}: a and b shapes cannot be multiplied ({_fmt_shape(a)} and {_fmt_shape(b)}): "
            f"a.shape[1] = {a.shape[1]} must equal b.shape[0] = {b.shape[0]}"
        )
    _check_same(op, [("a", a), ("b", b)])


def check_bmm_args(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError(
            f"{op}: expected 3-D batches of matrices, but got a with shape ({_fmt_shape(a)}) "
            f"and b with shape ({_fmt_shape(b)})"
        )
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(
            f"{op}: expected a and b to have the same batch size, but got "
            f"a with shape ({_fmt_shape(a)}) and b with shape ({_fmt_shape(b)})"
        )
    if a.shape[2] != b.shape[1]:
        raise RuntimeError(
            f"{op}: a and b shapes cannot be multiplied ({_fmt_shape(a)} and {_fmt_shape(b)}): "
            f"a.shape[2] = {a.shape[2]} must equal b.shape[1] = {b.shape[1]}"
        )
    _check_same(op, [("a", a), ("b", b)])


def check_addmm_args(op: str, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    check_mm_args(op, a, b)
    _check_same(op, [("a", a), ("bias", bias)])
    M, N = a.shape[0], b.shape[1]
    ok = bias.dim() <= 2 and all(
        s == 1 or s == want for s, want in zip(reversed(bias.shape), (N, M))
    )
    if not ok:
        raise RuntimeError(
            f"{op}: bias with shape ({_fmt_shape(bias)}) cannot be broadcast to the "
            f"output shape ({M}x{N}); expected (N,), (1, N), (M, 1), (M, N) or a scalar"
        )


def kernel_unsupported_reason(*tensors: torch.Tensor) -> str | None:
    """Why the Triton kernel cannot take these (valid) operands, or None when it can."""
    t0 = tensors[0]
    if t0.dtype not in SUPPORTED_DTYPES:
        return f"dtype {t0.dtype} is not supported by the kernel (float16, bfloat16, float32)"
    if t0.device.type == "cpu":
        if not interpreting():
            return "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1 before import)"
    elif t0.device.type != "cuda":
        return f"device {t0.device} is not supported by the kernel (cuda, or cpu when interpreting)"
    for t in tensors:
        # The last two dims are one matrix; the batch offset is computed in 64 bits.
        if t.dim() >= 2 and t.numel():
            last = sum((s - 1) * abs(st) for s, st in zip(t.shape[-2:], t.stride()[-2:]))
            if last > _MAX_OFFSET:
                return "a matrix spans more than 2**31 elements (the kernel uses 32-bit offsets)"
    return None


def _warn_fallback(op: str, reason: str) -> None:
    # Deduplicated by Python's warning filter (same text, same place): once per reason.
    warnings.warn(f"{op}: running the aten op instead of the Triton kernel: {reason}", KernelFallbackWarning, 3)


# --------------------------------------------------------------------------- launcher

# Config choice: the shape heuristic by default (instant, no tuning storm on first call);
# ``@triton.autotune`` over the config list when INDUCTOR_MM_PLUGIN_AUTOTUNE=1 or after
# ``set_autotune(True)``.
_AUTOTUNE = os.environ.get("INDUCTOR_MM_PLUGIN_AUTOTUNE", "0") not in ("", "0")


def set_autotune(enabled: bool) -> bool:
    """Choose between the shape heuristic (False) and autotuning (True); returns the old value."""
    global _AUTOTUNE
    old, _AUTOTUNE = _AUTOTUNE, bool(enabled)
    return old



def _device_guard(device: torch.device):
    # Launch on the tensors' device, not on whatever device happens to be current.
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _input_precision(dtype: torch.dtype) -> str:
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 and not interpreting():
        return "tf32"
    return "ieee"


def launch_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    beta: float = 1.0,
    alpha: float = 1.0,
) -> torch.Tensor:
    """Run the kernel on 3-D views: out[i] = alpha * a[i] @ b[i] (+ beta * bias[i]).

    ``bias``, when given, is already expanded to ``out``'s shape (stride 0 where broadcast).
    No checks here: callers validate first.
    """
    batch, M, K = a.shape
    N = b.shape[2]
    if out.numel() == 0:
        return out
    has_bias = bias is not None and beta != 0
    bias_arg = bias if has_bias else out
    bias_strides = bias.stride() if has_bias else (0, 0, 0)
    grid = lambda meta: (  # noqa: E731
        batch * triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),
    )
    interpreter_bf16 = interpreting() and a.dtype == torch.bfloat16
    # Interpreter only: its fp32 -> bf16 cast truncates instead of rounding to nearest
    # even (cast_impl passes no rounding mode; triton 3.7.1 runtime/interpreter.py), so
    # the kernel stores fp32 and torch rounds. The GPU path stores bf16 directly.
    kernel_out = out.new_empty(out.shape, dtype=torch.float32) if interpreter_bf16 else out
    args = (
        a, b, kernel_out, bias_arg,
        M, N, K,
        *a.stride(), *b.stride(), *kernel_out.stride(), *bias_strides,
        float(alpha), float(beta),
    )  # fmt: skip
    flags = dict(
        HAS_BIAS=has_bias,
        SCALE_ACC=alpha != 1,
        INPUT_PRECISION=_input_precision(a.dtype),
        INTERPRETER_BF16=interpreter_bf16,
    )
    with _device_guard(a.device):
        if _AUTOTUNE:
            matmul_kernel[grid](*args, **flags)
        else:
            cfg = heuristic_config(M, N, K, a.element_size())
            _matmul_kernel[grid](*args, **flags, **cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if interpreter_bf16:
        out.copy_(kernel_out)
    return out


# The three entry points below are what the custom ops run. ``out`` exists for tests,
# which pass a NaN-poisoned buffer to prove that every element is written.


def mm_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    check_mm_args("inductor_mm_plugin.mm", a, b)
    reason = kernel_unsupported_reason(a, b)
    if reason is not None:
        _warn_fallback("inductor_mm_plugin.mm", reason)
        return torch.mm(a, b).contiguous()
    out = a.new_empty((a.shape[0], b.shape[1])) if out is None else out
    launch_matmul(a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0))
    return out


def addmm_launch(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta=1, alpha=1, out: torch.Tensor | None = None
) -> torch.Tensor:
    check_addmm_args("inductor_mm_plugin.addmm", bias, a, b)
    reason = kernel_unsupported_reason(a, b, bias)
    if reason is not None:
        _warn_fallback("inductor_mm_plugin.addmm", reason)
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha).contiguous()
    M, N = a.shape[0], b.shape[1]
    out = a.new_empty((M, N)) if out is None else out
    launch_matmul(
        a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0), bias.expand(M, N).unsqueeze(0), beta=beta, alpha=alpha
    )
    return out


def bmm_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    check_bmm_args("inductor_mm_plugin.bmm", a, b)
    reason = kernel_unsupported_reason(a, b)
    if reason is not None:
        _warn_fallback("inductor_mm_plugin.bmm", reason)
        return torch.bmm(a, b).contiguous()
    out = a.new_empty((a.shape[0], a.shape[1], b.shape[2])) if out is None else out
    launch_matmul(a, b, out)
    return out


# ------------------------------------------------------------------------- custom ops


@torch.library.custom_op("inductor_mm_plugin::mm", mutates_args=())
def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.mm`` on the plugin's Triton kernel."""
    return mm_launch(a, b)


@torch.library.custom_op(
    "inductor_mm_plugin::addmm",
    mutates_args=(),
    schema="(Tensor bias, Tensor a, Tensor b, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
)
def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1) -> torch.Tensor:
    """``torch.addmm`` on the plugin's Triton kernel, the epilogue fused into it."""
    return addmm_launch(bias, a, b, beta, alpha)


@torch.library.custom_op("inductor_mm_plugin::bmm", mutates_args=())
def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm`` on the plugin's Triton kernel."""
    return bmm_launch(a, b)


# ------------------------------------------------------------------------------- fake
# Output metadata is a pure function of the input shapes and dtypes, exactly what the
# real implementations return: a new contiguous tensor in the inputs' dtype.


@mm.register_fake
def _mm_fake(a, b):
    check_mm_args("inductor_mm_plugin.mm", a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@addmm.register_fake
def _addmm_fake(bias, a, b, *, beta=1, alpha=1):
    check_addmm_args("inductor_mm_plugin.addmm", bias, a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@bmm.register_fake
def _bmm_fake(a, b):
    check_bmm_args("inductor_mm_plugin.bmm", a, b)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


# --------------------------------------------------------------------------- autograd
# Backward runs on the plugin's own ops. Incoming gradients may be non-contiguous
# (pytorch#194719); the kernel reads any strides, so they are passed as they come.


def _mm_setup_context(ctx, inputs, output):
    a, b = inputs
    ctx.save_for_backward(a, b)


def _mm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = mm(grad, b.mT) if ctx.needs_input_grad[0] else None
    grad_b = mm(a.mT, grad) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


def _addmm_setup_context(ctx, inputs, keyword_only_inputs, output):
    bias, a, b = inputs
    ctx.save_for_backward(a, b)
    ctx.bias_shape = bias.shape
    ctx.beta = keyword_only_inputs["beta"]
    ctx.alpha = keyword_only_inputs["alpha"]


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
    return grad_bias, grad_a, grad_b


def _bmm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = bmm(grad, b.mT) if ctx.needs_input_grad[0] else None
    grad_b = bmm(a.mT, grad) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


mm.register_autograd(_mm_backward, setup_context=_mm_setup_context)
addmm.register_autograd(_addmm_backward, setup_context=_addmm_setup_context)
bmm.register_autograd(_bmm_backward, setup_context=_mm_setup_context)
