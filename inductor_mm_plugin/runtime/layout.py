"""Which kernel a call's operands allow, and the facts its config is chosen from.

The persistent TMA kernel (kernels/matmul_tma.py) takes operands TMA descriptors can read:
16-byte aligned bases and leading strides, a unit stride on one dimension, and batches
stacked at a uniform stride. Everything else (unaligned or oddly strided operands, K == 0)
takes the pointer kernel (kernels/matmul.py), which reads any strides.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..configs import MatmulConfig, Problem, batch_fits
from ..interpreter import interpreting
from . import device as _device
from .device import num_sms

_TMA_ALIGN = 16  # bytes: TMA descriptors need 16-byte aligned bases and leading strides


class TmaLayout(NamedTuple):
    """How the TMA kernel reads a call: each operand's storage order and leading stride."""

    a_kmajor: bool
    lda: int
    b_kmajor: bool
    ldb: int
    c_tma: bool  # a row-major output, stored through a TMA descriptor
    ldc: int


def tf32_enabled() -> bool:
    """Whether torch lets fp32 matmuls round their operands to TF32, as it decides for cuBLAS.

    The one reader of the flag. torch has two APIs for it: the legacy one
    (``torch.backends.cuda.matmul.allow_tf32``, ``torch.set_float32_matmul_precision``) and
    the new one (``torch.backends.cuda.matmul.fp32_precision``, whose "none" inherits from
    ``torch.backends.fp32_precision``). The legacy setters write the new value too, so the
    new getter, resolved, follows both; Inductor reads the same. The legacy getter raises
    ("mix of the legacy and new APIs") once the new API has set it.
    """
    return torch.backends.cuda.matmul.fp32_precision == "tf32"


def input_precision(dtype: torch.dtype) -> str:
    """The dot's precision: TF32 for fp32 exactly when torch allows it (the eager kernels and
    the Inductor templates alike); the interpreter has only IEEE."""
    if dtype == torch.float32 and tf32_enabled() and not interpreting():
        return "tf32"
    return "ieee"


def _tma_operand(rows: int, cols: int, s_rows: int, s_cols: int, elem: int, ptr: int, cols_is_k: bool):
    """How a TMA descriptor reads a (rows, cols) operand: (k_major, leading stride), or None.

    The descriptor is made over the storage order: unit stride along cols -> shape
    (rows, cols); along rows -> shape (cols, rows), the kernel transposing in shared memory.
    A dimension of size 1 has an unused stride, which torch may report as anything; it gets
    an aligned stand-in.
    """
    if ptr % _TMA_ALIGN:
        return None
    stand_in = lambda n: -(-n * elem // _TMA_ALIGN) * _TMA_ALIGN // elem  # noqa: E731
    if s_cols == 1 or cols == 1:
        lead = s_rows if rows > 1 else stand_in(cols)
        if (lead * elem) % _TMA_ALIGN == 0 and lead > 0:
            return cols_is_k, lead
    if s_rows == 1 or rows == 1:
        lead = s_cols if cols > 1 else stand_in(rows)
        if (lead * elem) % _TMA_ALIGN == 0 and lead > 0:
            return not cols_is_k, lead
    return None


def _stacked(t: torch.Tensor, major_is_cols: bool, lead: int) -> bool:
    """A batch of matrices is one stacked matrix along its outer dimension: the batch stride
    is (outer extent) x (leading stride), as the TMA kernel's descriptors assume."""
    if t.dim() == 2 or t.shape[0] == 1:
        return True
    outer = t.shape[-2] if major_is_cols else t.shape[-1]
    return t.stride(0) == outer * lead


def _tma_operands(a, b, ptr_a: int, ptr_b: int):
    """((a_kmajor, lda), (b_kmajor, ldb)) when TMA descriptors can read both operands, else None."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if K == 0:
        return None
    elem = a.element_size()
    ta = _tma_operand(M, K, a.stride(-2), a.stride(-1), elem, ptr_a, cols_is_k=True)
    tb = _tma_operand(K, N, b.stride(-2), b.stride(-1), elem, ptr_b, cols_is_k=False)
    if ta is None or tb is None:
        return None
    # Stacked batches: the (unit-stride) columns of a K-major A are K, so its outer dim is M.
    if not (_stacked(a, ta[0], ta[1]) and _stacked(b, not tb[0], tb[1])):
        return None
    return ta, tb


def tf32_a_from_registers(a_kmajor: bool, b_kmajor: bool, precision: str) -> bool:
    """TF32 with an M-major A and a K-major B: the TMA kernel would have to take A from
    registers, which computed wrong results with a bias epilogue on the H200 (triton 3.6:
    every time with split-K, one run in three without; kernels/matmul_tma.py). Such calls
    take the pointer kernel. Root cause not isolated; the likeliest is the ordering hazard of
    a register-operand wgmma, whose registers must not change before the wgmma completes
    (discussed in triton-lang/triton#5003), with no minimal repro filed yet."""
    return precision == "tf32" and not a_kmajor and b_kmajor


def tma_layout(a, b, out) -> TmaLayout | None:
    """How the TMA kernel reads this call, or None when it cannot."""
    if _device.no_tma_reason(a.device) is not None:
        return None
    operands = _tma_operands(a, b, a.data_ptr(), b.data_ptr())
    if operands is None:
        return None
    ta, tb = operands
    M, N = a.shape[-2], b.shape[-1]
    oelem = out.element_size()
    tc = _tma_operand(M, N, out.stride(-2), out.stride(-1), oelem, out.data_ptr(), cols_is_k=True)
    c_tma = tc is not None and tc[0] and _stacked(out, True, tc[1])  # row-major output only
    return TmaLayout(ta[0], ta[1], tb[0], tb[1], c_tma, tc[1] if c_tma else out.stride(-2))


def settled(t: torch.Tensor) -> torch.Tensor:
    """``t`` with the stride of each size-1 matrix dimension set from the other one: a column
    (N, 1) as column-major (1, N) spaced, a row (1, N) as row-major, a 1 x 1 as (1, 1). Such
    a stride addresses nothing, and the two sides of a compile disagree on it: Dynamo's fake
    tensors and Inductor's buffers (decode's rotary product, 16 x 64 x 1 @ 16 x 1 x 1). Planned
    from one and called with the other, the kernel compiled again at the call, since Triton
    specializes an integer on being 1 or a multiple of 16; settled, both plan alike."""
    if t.dim() < 2:
        return t
    rows, cols = t.shape[-2:]
    sr, sc = t.stride()[-2:]
    if rows != 1 and cols != 1:
        return t
    if rows == 1 and cols == 1:
        new = (1, 1)
    elif cols == 1:
        new = (sr, sr * rows)
    else:
        new = (sc * cols, sc)
    if new == (sr, sc):
        return t
    return t.as_strided(t.shape, (*t.stride()[:-2], *new), t.storage_offset())


def unaligned_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, bool] | None:
    """Which of a single matrix product's operands TMA cannot read in place, when an aligned
    copy of them (``aligned``) would let the TMA kernel take the call: (copy A, copy B), or
    None (both readable already, or no copy helps: no TMA, a batch, K == 0)."""
    if a.dim() != 2 or a.shape[1] == 0 or _device.no_tma_reason(a.device) is not None:
        return None
    M, K = a.shape
    elem = a.element_size()
    need_a = _tma_operand(M, K, *a.stride(), elem, a.data_ptr(), True) is None
    need_b = _tma_operand(K, b.shape[1], *b.stride(), elem, b.data_ptr(), False) is None
    return (need_a, need_b) if need_a or need_b else None


def aligned(t: torch.Tensor, copy: bool = True) -> torch.Tensor:
    """A matrix in its own storage order (column-major stays column-major, anything else
    becomes row-major) with 16-byte aligned rows: the leading stride rounded up, the padding
    never read. ``copy=False`` leaves it uninitialized (a stand-in to plan with)."""
    rows, cols = t.shape
    step = _TMA_ALIGN // t.element_size()
    if t.stride(0) == 1 and t.stride(1) != 1 and rows > 1:
        out = torch.empty_strided((rows, cols), (1, -(-rows // step) * step), dtype=t.dtype, device=t.device)
    else:
        out = torch.empty_strided((rows, cols), (-(-cols // step) * step, 1), dtype=t.dtype, device=t.device)
    return out.copy_(t) if copy else out


def storage_orders(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, bool] | None:
    """(a_kmajor, b_kmajor) as the TMA kernel would read ``a @ b``, from strides and storage
    offsets alone (fake tensors too); None where TMA cannot read them."""
    offset = lambda t: t.storage_offset() * t.element_size()  # noqa: E731
    operands = _tma_operands(a, b, offset(a), offset(b))
    return None if operands is None else (operands[0][0], operands[1][0])


def pointer_kernel_reason(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Why operands laid out like ``a`` and ``b`` would take the pointer kernel rather than
    the TMA kernel, or None. Judged from the device, shapes, strides and storage offsets
    alone, so it works on fake tensors too (allocations themselves are assumed 16-byte
    aligned, as torch's allocators make them); the same rules as ``tma_layout`` and
    ``batch_fits``.
    """
    no_tma = _device.no_tma_reason(a.device)
    if no_tma is not None:
        return no_tma
    orders = storage_orders(a, b)
    if orders is None:
        return "its operands are not TMA-readable (rows not 16-byte aligned or batches not stacked): the pointer kernel"
    a_kmajor, b_kmajor = orders
    if tf32_a_from_registers(a_kmajor, b_kmajor, input_precision(a.dtype)):
        return "TF32 with an M-major A and a K-major B: the pointer kernel"
    M, K = a.shape[-2:]
    batch = a.shape[0] if a.dim() == 3 else 1
    problem = Problem(M, b.shape[-1], K, batch, a.element_size(), str(a.dtype).removeprefix("torch."), tma=True,
                      a_kmajor=a_kmajor, b_kmajor=b_kmajor)  # fmt: skip
    # 64-deep K steps: the narrowest the heuristic falls back to before the pointer kernel.
    if not batch_fits(problem, MatmulConfig("tma", 128, 128, 64)):
        return f"a batch stacked along K = {K}, not a multiple of 64: the pointer kernel"
    return None


def pow2_divisor(values) -> int:
    """The largest power of two up to 16 dividing every value other than 0 and 1."""
    d = 16
    while d > 1 and any(v % d for v in values if v not in (0, 1)):
        d //= 2
    return d


def pointer_kernel_divisor(divisor: int) -> int:
    """The pointer kernel's DIVISOR for an operand's ``pow2_divisor``: 1 where that is 16,
    since Triton specializes on 16 already (the kernel stays the one it compiled before),
    else the divisor itself."""
    return 1 if divisor >= 16 else divisor


def load_divisors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> tuple[int, int, int]:
    """(A, B, C): for each matrix, ``pow2_divisor`` of its strides and its size along its
    unit stride (columns first, as the kernel's ``*_ROW_MAJOR``), 1 where it has none: how wide
    the pointer kernel's loads and stores of it can be. Per operand, so that M = 123 narrows
    only the loads along M (kernels/matmul.py)."""
    M, K = a.shape[-2:]
    N = b.shape[-1]

    def one(t, rows, cols):
        strides = t.stride() if t.dim() == 3 else (0, *t.stride())
        along = cols if strides[2] == 1 else rows if strides[1] == 1 else None
        return 1 if along is None else pow2_divisor((*strides, along))

    return one(a, M, K), one(b, K, N), one(out, M, N)


def pointer_hints(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> dict:
    """The pointer kernel's alignment constexprs for these operands (``load_divisors``)."""
    da, db, dc = load_divisors(a, b, out)
    return dict(A_DIVISOR=pointer_kernel_divisor(da), B_DIVISOR=pointer_kernel_divisor(db),
                C_DIVISOR=pointer_kernel_divisor(dc), A_ROW_MAJOR=a.stride(-1) == 1, B_ROW_MAJOR=b.stride(-1) == 1,
                C_ROW_MAJOR=out.stride(-1) == 1)  # fmt: skip


def bias_mode(bias: torch.Tensor) -> str:
    """How the epilogue loads an expanded bias: "n" one row, "m" one column, "mn" a tile."""
    sm, sn = bias.stride()[-2:]
    return "n" if sm == 0 else "m" if sn == 0 else "mn"


def problem(a, b, out, layout: TmaLayout | None, has_bias: bool, precision: str = "ieee") -> Problem:
    """The facts a config is chosen from (configs.Problem), read off a call."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = a.shape[0] if a.dim() == 3 else 1
    tma = layout is not None
    return Problem(
        M=M, N=N, K=K, batch=batch, elem_bytes=a.element_size(), dtype=str(a.dtype).removeprefix("torch."),
        tma=tma, a_kmajor=layout.a_kmajor if tma else a.stride(-1) == 1,
        b_kmajor=layout.b_kmajor if tma else b.stride(-2) == 1, c_tma=layout.c_tma if tma else False,
        has_bias=has_bias, num_sms=num_sms(a.device), precision=precision,
        divisor=min(load_divisors(a, b, out)[:2]),
    )  # fmt: skip
