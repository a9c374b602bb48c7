"""Stock's SwiGLU product, ``silu(gate) * up``, as Inductor generates it: one pointwise pass
that reads both matmul results and writes the product, computing in fp32.

Not a kernel the plugin runs in a model: it is the last third of stock's form when the
routing pass times the fused SwiGLU kernel against cuBLAS's two matmuls plus this
(``inductor/measure.py``). Eager ``F.silu(gate) * up`` would take two passes, one more
write and read of the whole result, and make stock look slower than it is.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _silu_mul_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(gate_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask).to(tl.float32)
    out = g * tl.sigmoid(g) * u
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)
