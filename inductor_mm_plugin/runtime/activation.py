"""Stock's form of a Linear and its activation, which the routing pass times the fused kernel
(``ops/activation.py``'s ``mm_activation``) against: cuBLAS writes the matmul's result, then one
pointwise kernel reads it back and writes the activation (``kernels/activation.py``), as stock
``torch.compile`` runs an ``nn.Linear`` followed by GELU, SiLU or ReLU."""

from __future__ import annotations

import torch
import triton

from ..kernels.activation import _stock_activation_kernel
from .device import device_guard

_BLOCK = 1024  # Inductor's usual pick for a large 1-D pointwise kernel (XBLOCK, 4 warps)


def stock_mm_activation(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor,
                        out: torch.Tensor, activation: str) -> None:  # fmt: skip
    """``out = activation(a @ b + bias)`` as stock runs it, through ``z`` (the matmul's result;
    ``z`` and ``out`` contiguous, of the result's shape and dtype)."""
    if bias is None:
        torch.mm(a, b, out=z)
    else:
        torch.addmm(bias, a, b, out=z)
    n = out.numel()
    with device_guard(a.device):
        _stock_activation_kernel[(triton.cdiv(n, _BLOCK),)](z, out, n, ACTIVATION=activation, BLOCK=_BLOCK,
                                                            num_warps=4)  # fmt: skip
