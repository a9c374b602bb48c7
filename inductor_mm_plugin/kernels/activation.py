"""Activations on an fp32 tile, for the matmul kernels' fused epilogue (``ACTIVATION``), and
stock's activation pass, which the routing pass times the fused kernel against.

The names are those ``ops/activation.py`` accepts: ``"relu"``, ``"gelu"`` (exact, erf),
``"gelu_tanh"`` (``approximate="tanh"``), ``"silu"``; ``""`` is none.

The fused GELU is not Inductor's ``0.5 x (1 + erf(x / sqrt 2))``: libdevice's erf evaluates
polynomials on both sides of its branch per element, and fused into the matmul's epilogue it
cost 1.76x the bare matmul on ViT-B's fc1 (12608x768->3072, H100), against 1.26x for SiLU
(docs/performance.md, "Device runs (2026-12-07, eighth session)"). ``_gelu_erf`` takes one
exp2 and a Horner chain instead, to 1.7e-6 relative error in float32 (where |GELU| > 1e-3;
``0.5 x (1 + erf)`` in float32: 5.1e-5), bounded against float64 in tests/test_activation.py.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Q(a) = log(erfcx(a)) on [0, 4] as a polynomial in a - 2, lowest power first: ``_gelu_erf``'s
# Horner chain, written there as literals (a jit function reads no Python tuple); a test holds
# the two to one another. bench/bench_epilogue.py's torch-op GELU takes them from here.
GELU_Q = (-1.36494124, -0.418159962, 0.0762483999, -0.0164693296, 0.00357270753, -0.000726536207, 0.00013342085,
          -2.40024874e-05, 2.7987569e-06, 9.89686214e-07, -3.51833222e-07)  # fmt: skip


@triton.jit
def _gelu_erf(x):
    """Exact (erf) GELU with one exp2: x (1 - erfc(u) / 2) for u = x / sqrt(2) >= 0, x erfc(-u) / 2
    below, with erfc(a) = exp(Q(a) - a^2) and Q = log(erfcx) on [0, 4] as a degree-10 polynomial in
    a - 2 (near-minimax on absolute error, fitted in float64). Past |u| = 4 (|x| > 5.66) Q is held
    at Q(4): there erfc < 2e-8, so GELU is x or 0 to within float32's rounding of x, and its
    tiny negative tail is off by at most 25% (absolute error below 1e-8)."""
    u = x * 0.7071067811865476
    s = tl.minimum(tl.abs(u), 4.0) - 2.0
    q = -3.51833222e-07 * s + 9.89686214e-07
    q = q * s + 2.7987569e-06
    q = q * s - 2.40024874e-05
    q = q * s + 0.00013342085
    q = q * s - 0.000726536207
    q = q * s + 0.00357270753
    q = q * s - 0.0164693296
    q = q * s + 0.0762483999
    q = q * s - 0.418159962
    q = q * s - 1.36494124
    half_erfc = 0.5 * tl.exp2((q - u * u) * 1.4426950408889634)
    return tl.where(u >= 0, x - x * half_erfc, x * half_erfc)


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr):
    """``ACTIVATION`` of the fp32 tile ``x`` (``""``: ``x`` itself)."""
    if ACTIVATION == "relu":
        x = tl.maximum(x, 0.0)
    elif ACTIVATION == "gelu":
        x = _gelu_erf(x)
    elif ACTIVATION == "gelu_tanh":
        # tanh(t) = 1 - 2 / (1 + exp(2t)): 0.5 x (1 + tanh(t)) = x - x / (1 + exp(2t)), one exp2.
        t = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = x - x / (1.0 + tl.exp2(t * 2.8853900817779268))
    elif ACTIVATION == "silu":
        x = x / (1.0 + tl.exp2(x * -1.4426950408889634))
    return x


@triton.jit
def _stock_activation_kernel(z_ptr, out_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    """``out = ACTIVATION(z)`` as Inductor generates it after a matmul: one pointwise pass in
    fp32, GELU through libdevice's erf (the rest as the fused epilogue computes them: one exp
    each, as Inductor's decompositions), rounded once to ``out``'s dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = tl.load(z_ptr + offs, mask=mask).to(tl.float32)
    if ACTIVATION == "gelu":
        z = 0.5 * z * (1 + tl.math.erf(z * 0.7071067811865476))
    else:
        z = apply_activation(z, ACTIVATION)
    tl.store(out_ptr + offs, z.to(out_ptr.dtype.element_ty), mask=mask)
