"""Input checks: what torch would reject raises before anything runs, and what torch accepts
but the Triton kernel cannot take gets a reason (the op then runs aten, with a warning)."""

from __future__ import annotations

import math
import struct
import warnings
from collections.abc import Sequence

import torch

from ..interpreter import interpreter_defect, interpreting

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Element offsets inside one matrix are 32-bit in the kernels.
_MAX_OFFSET = 2**31 - 1


class KernelFallbackWarning(UserWarning):
    """An op ran the aten kernel instead of the plugin's Triton kernel."""


def fmt_shape(t: torch.Tensor) -> str:
    return "x".join(str(s) for s in t.shape) if t.dim() else "[]"


def check_same(op: str, tensors: Sequence[tuple[str, torch.Tensor]]) -> None:
    """Same device and dtype, as torch's matmuls require."""
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


def _check_shapes(op: str, a: torch.Tensor, b: torch.Tensor, rank: int, what: str) -> None:
    """Ranks and the inner dimension (the last of a against the second-to-last of b)."""
    if a.dim() != rank or b.dim() != rank:
        raise RuntimeError(
            f"{op}: expected {what}, but got a with shape ({fmt_shape(a)}) and b with shape ({fmt_shape(b)})"
        )
    if rank == 3 and a.shape[0] != b.shape[0]:
        raise RuntimeError(
            f"{op}: expected a and b to have the same batch size, but got "
            f"a with shape ({fmt_shape(a)}) and b with shape ({fmt_shape(b)})"
        )
    ka, kb = rank - 1, rank - 2
    if a.shape[ka] != b.shape[kb]:
        raise RuntimeError(
            f"{op}: a and b shapes cannot be multiplied ({fmt_shape(a)} and {fmt_shape(b)}): "
            f"a.shape[{ka}] = {a.shape[ka]} must equal b.shape[{kb}] = {b.shape[kb]}"
        )
    check_same(op, [("a", a), ("b", b)])


def check_mm_args(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise what torch.mm would reject: ranks, inner dimensions, dtypes, devices."""
    _check_shapes(op, a, b, 2, "2-D matrices")


def check_bmm_args(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise what torch.bmm would reject: ranks, batch sizes, inner dimensions, dtypes, devices."""
    _check_shapes(op, a, b, 3, "3-D batches of matrices")


def check_addmm_args(op: str, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    check_mm_args(op, a, b)
    check_same(op, [("a", a), ("bias", bias)])
    M, N = a.shape[0], b.shape[1]
    ok = bias.dim() <= 2 and all(s == 1 or s == want for s, want in zip(reversed(bias.shape), (N, M)))
    if not ok:
        raise RuntimeError(
            f"{op}: bias with shape ({fmt_shape(bias)}) cannot be broadcast to the "
            f"output shape ({M}x{N}); expected (N,), (1, N), (M, 1), (M, N) or a scalar"
        )


def check_tensor_args(op: str, names: Sequence[str], *args) -> None:
    """Raise torch's TypeError for an argument that is not a tensor. The only such value
    that reaches a kernel is None: the dispatcher passes None for a ``Tensor`` argument
    given None (an undefined tensor), where torch.mm's own binding rejects it."""
    for position, (name, value) in enumerate(zip(names, args), 1):
        if not isinstance(value, torch.Tensor):
            given = type(value).__name__
            raise TypeError(f"{op}(): argument '{name}' (position {position}) must be Tensor, not {given}")


_FLOAT32_MAX = torch.finfo(torch.float32).max


def check_scalar(op: str, name: str, value, dtype: torch.dtype):
    """``beta`` or ``alpha`` as the kernel takes it, or torch.addmm's error for it.

    torch converts both to the dtype's opmath type, float32 for fp16, bf16 and fp32 alike
    (c10::checked_convert), and raises for a finite value beyond float32's range or a
    complex one with an imaginary part; inf, nan, bools and ints convert. The kernel
    computes in float32 too, so it takes the same values (a complex one as its real part),
    rounded to float32 here, so that "beta == 0 ignores the bias" holds for a beta that
    rounds to 0 (1e-50), as in torch's BLAS path. Other dtypes run the aten op, which checks
    for itself (float64 takes any double).
    """
    if dtype not in SUPPORTED_DTYPES:
        return value
    real = value.real if isinstance(value, complex) and value.imag == 0 else value
    if isinstance(real, complex) or (isinstance(real, float) and math.isfinite(real) and abs(real) > _FLOAT32_MAX):
        raise RuntimeError(f"{op}: value cannot be converted to type float without overflow: {name} = {value!r} "
                           f"(torch computes {dtype} in float32)")  # fmt: skip
    return struct.unpack("f", struct.pack("f", real))[0] if isinstance(real, float) else real


def layout_unsupported_reason(*tensors: torch.Tensor) -> str | None:
    """Why the kernel cannot read these tensors' memory (sparse or nested), or None."""
    for t in tensors:
        if t.is_nested:
            return "nested tensors are not supported by the kernel (strided tensors only)"
        if t.layout != torch.strided:
            return f"sparse layout {t.layout} is not supported by the kernel (strided tensors only)"
    return None


def check_warmup_device(device: torch.device) -> None:
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"warmup: device {device} was asked for, but CUDA is not available (torch.cuda.is_available() is "
            "False); device='cpu' warms up the CPU path, which runs under Triton's interpreter (TRITON_INTERPRET=1)"
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
    defect = interpreter_defect()
    if defect is not None:
        return defect
    for t in tensors:
        # The last two dims are one matrix; the batch offset is computed in 64 bits.
        if t.dim() >= 2 and t.numel():
            last = sum((s - 1) * abs(st) for s, st in zip(t.shape[-2:], t.stride()[-2:]))
            if last > _MAX_OFFSET:
                return "a matrix spans more than 2**31 elements (the kernel uses 32-bit offsets)"
    return None


def warn_fallback(op: str, reason: str, stacklevel: int = 4) -> None:
    # Deduplicated by Python's warning filter (same text, same place): once per reason.
    warnings.warn(f"{op}: running the aten op instead of the Triton kernel: {reason}", KernelFallbackWarning,
                  stacklevel)  # fmt: skip
