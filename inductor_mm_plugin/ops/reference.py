"""Float64 reference for the plugin's ops, and the error each dtype is allowed.

The tolerance is the classical bound for a dot product (Higham, *Accuracy and Stability of
Numerical Algorithms*, 3.1): accumulating K products in fp32 errs by at most about
K * u32 * sum_k |a_ik| |b_kj|, and rounding the result to the output dtype adds u_out * |c|
(plus, for results that underflow, half a subnormal spacing per rounding).
TF32 rounds each operand to a 10-bit mantissa first (2 * u_tf32 per product). A factor of
2 covers the tensor cores' accumulation order. Any real bug (a dropped K slice, a wrong
stride, a stale tile) shows up as an error of the order of a whole product, far above it.
"""

from __future__ import annotations

import torch

from .activation import ACTIVATIONS

# Unit roundoff (half an ulp at 1.0) of each dtype.
UNIT_ROUNDOFF = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}
TF32_UNIT_ROUNDOFF = 2.0**-11
# Half the spacing of each dtype's subnormals: the absolute error of a rounding that
# underflows (Higham 2.1: fl(x) = x (1 + d) + e, |e| at most this). Without it the bound
# failed a correct fp16 result of -0.0 for beta = 6e-8 times a bias of -0.29 (1.7e-8).
UNDERFLOW = {
    torch.float64: 0.0,  # 2**-1075 is not a double; nothing here underflows in float64
    torch.float32: 2.0**-150,
    torch.float16: 2.0**-25,
    torch.bfloat16: 2.0**-134,
}


def matmul_reference(a, b, bias=None, *, beta=1, alpha=1) -> torch.Tensor:
    """alpha * (a @ b) + beta * bias in float64 (2-D or batched 3-D)."""
    out = torch.matmul(a.double(), b.double()) * alpha
    if bias is not None and beta != 0:
        out = out + beta * bias.double()
    return out


def error_bound(a, b, bias=None, *, beta=1, alpha=1, out_dtype=None, tf32=False, reference=None) -> torch.Tensor:
    """Per-element bound on |kernel - reference| for these operands (``reference``: their
    ``matmul_reference``, when the caller has it already)."""
    out_dtype = out_dtype or a.dtype
    K = a.shape[-1]
    magnitude = abs(alpha) * torch.matmul(a.double().abs(), b.double().abs())
    if bias is not None and beta != 0:
        magnitude = magnitude + abs(beta) * bias.double().abs()
    per_product = 2 * TF32_UNIT_ROUNDOFF if tf32 else 0.0
    accumulate = (K + 2) * UNIT_ROUNDOFF[torch.float32] + per_product
    if reference is None:
        reference = matmul_reference(a, b, bias, beta=beta, alpha=alpha)
    underflow = (K + 2) * UNDERFLOW[torch.float32] + UNDERFLOW[out_dtype]
    return 2 * (accumulate * magnitude + UNIT_ROUNDOFF[out_dtype] * reference.abs() + underflow) + 1e-30


def assert_matmul_close(out, a, b, bias=None, *, beta=1, alpha=1, tf32=False) -> None:
    """Fail with the worst element when ``out`` is outside the bound (NaN always fails)."""
    ref = matmul_reference(a, b, bias, beta=beta, alpha=alpha)
    if _empty_or_checked(out, ref, a.dtype):
        return
    _assert_within(out, ref, error_bound(a, b, bias, beta=beta, alpha=alpha, out_dtype=out.dtype, tf32=tf32,
                                         reference=ref))  # fmt: skip


def _empty_or_checked(out, ref, dtype) -> bool:
    """Assert ``out``'s shape and dtype; True when it is empty (nothing else to compare)."""
    assert out.shape == ref.shape, f"shape: expected {tuple(ref.shape)}, got {tuple(out.shape)}"
    assert out.dtype == dtype, f"dtype: expected {dtype}, got {out.dtype}"
    return out.numel() == 0


def _assert_within(out, ref, bound) -> None:
    err = (out.double() - ref).abs()
    bad = ~(err <= bound)  # NaN compares False, so NaN is bad
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {out.numel()} elements outside the {out.dtype} bound; first at {idx}: "
            f"got {out[idx].item()}, expected {ref[idx].item()}, |err| {err[idx].item():.3g} > "
            f"bound {bound[idx].item():.3g}"
        )


# SiLU's derivative, sigmoid(g) * (1 + g * (1 - sigmoid(g))), lies in [-0.1, 1.1]: an error
# e in the gate moves silu(gate) by at most 1.1 e.
_SILU_LIPSCHITZ = 1.1


def mm_swiglu_reference(x, w_gate, w_up) -> torch.Tensor:
    """silu(x @ w_gate) * (x @ w_up) in float64."""
    gate, up = _swiglu_matmuls(x, w_gate, w_up)
    return torch.nn.functional.silu(gate) * up


def _swiglu_matmuls(x, w_gate, w_up) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.matmul(x.double(), w_gate.double()), torch.matmul(x.double(), w_up.double())


def assert_mm_swiglu_close(out, x, w_gate, w_up) -> None:
    """Fail with the worst element when ``out`` is outside the bound for
    ``silu(x @ w_gate) * (x @ w_up)``: each matmul within its own bound (rounded to the
    dtype or not: eager rounds them, the fused template does not), propagated through SiLU
    and the product, plus the output's rounding (underflow included), times 2."""
    gate, up = _swiglu_matmuls(x, w_gate, w_up)
    silu = torch.nn.functional.silu(gate)
    ref = silu * up
    if _empty_or_checked(out, ref, x.dtype):
        return
    e_gate, e_up = error_bound(x, w_gate, reference=gate), error_bound(x, w_up, reference=up)
    bound = 2 * (_SILU_LIPSCHITZ * e_gate * (up.abs() + e_up) + silu.abs() * e_up
                 + (UNIT_ROUNDOFF[out.dtype] + 4 * UNIT_ROUNDOFF[torch.float32]) * ref.abs()
                 + 4 * UNDERFLOW[torch.float32] + UNDERFLOW[out.dtype]) + 1e-30  # fmt: skip
    _assert_within(out, ref, bound)


# The activations' largest slopes (|d act / dz|): GELU's is 1.129 (at z = 2.42), SiLU's 1.1.
_ACTIVATION_LIPSCHITZ = {"relu": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1}
# The fused kernel's activation in fp32 (kernels/activation.py): GELU's erf to 1.7e-6 relative
# error, and 1e-8 absolute in its negative tail; the exp2 forms to a few fp32 ulps.
_ACTIVATION_RELATIVE, _ACTIVATION_ABSOLUTE = 4e-6, 1e-7


def mm_activation_reference(a, b, bias, activation: str) -> torch.Tensor:
    """``activation(a @ b + bias)`` in float64."""
    return ACTIVATIONS[activation](matmul_reference(a, b, bias))


def assert_mm_activation_close(out, a, b, bias, activation: str) -> None:
    """Fail with the worst element when ``out`` is outside the bound for ``activation(a @ b +
    bias)``: the matmul's own bound (rounded to the dtype or not: stock rounds it, the fused
    kernel does not) through the activation's largest slope, plus the activation's evaluation
    in fp32 and the output's rounding, times 2."""
    z = matmul_reference(a, b, bias)
    ref = mm_activation_reference(a, b, bias, activation)
    if _empty_or_checked(out, ref, a.dtype):
        return
    e_z = error_bound(a, b, bias, reference=z)
    bound = 2 * (_ACTIVATION_LIPSCHITZ[activation] * e_z
                 + (UNIT_ROUNDOFF[out.dtype] + _ACTIVATION_RELATIVE) * ref.abs() + _ACTIVATION_ABSOLUTE * z.abs()
                 + UNDERFLOW[out.dtype]) + 1e-30  # fmt: skip
    _assert_within(out, ref, bound)
