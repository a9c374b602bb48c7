"""The case matrix shared by the op and kernel tests: shapes, dtypes, layouts, bias shapes; the
operands and NaN-poisoned outputs built from it; a launch plan's kernel arguments by name."""

import itertools

import torch

from conftest import DEVICE, HAS_CUDA

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# (M, N, K): degenerate, odd, one-column, zero-size. The interpreter is slow, so the CPU
# list stays small; the GPU adds shapes with many full and partial tiles.
SHAPES = [(1, 1, 1), (257, 129, 63), (64, 32, 48), (33, 1, 17), (16, 40, 0), (0, 16, 8), (8, 0, 8)]
if HAS_CUDA:
    SHAPES += [(727, 577, 859), (1024, 1024, 1024), (16, 4096, 4096), (3, 5000, 300)]

# (transpose_a, transpose_b): a transposed operand is a view of a contiguous buffer of the
# other orientation, like the weight of nn.Linear.
LAYOUTS = list(itertools.product((False, True), repeat=2))

BIAS_SHAPES = ["N", "1N", "M1", "MN", "scalar"]

# (beta, alpha)
SCALES = [(1, 1), (0.5, -2.0), (0, 1), (2, 0.25)]


def randn(*shape, dtype, device=DEVICE):
    return torch.randn(shape, dtype=dtype, device=device)


def operand(rows, cols, dtype, transposed=False, sliced=False, device=DEVICE):
    """A (rows, cols) matrix: plain, transposed view, or a strided slice of a larger one."""
    if sliced:
        big = randn(rows * 2 + 1, cols * 3 + 2, dtype=dtype, device=device)
        t = big[1::2, 2::3][:rows, :cols]
        assert t.shape == (rows, cols) and not t.is_contiguous() or rows * cols <= 1
        return t
    if transposed:
        return randn(cols, rows, dtype=dtype, device=device).t()
    return randn(rows, cols, dtype=dtype, device=device)


def bias_of(kind, M, N, dtype, device=DEVICE):
    shape = {"N": (N,), "1N": (1, N), "M1": (M, 1), "MN": (M, N), "scalar": ()}[kind]
    return randn(*shape, dtype=dtype, device=device)


def poisoned(*shape, dtype, device=DEVICE):
    """An output buffer full of NaN: an element the kernel does not write stays NaN and fails."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def kernel_args(plan, a, b, out, bias=None, alpha=1.0, beta=1.0) -> dict:
    """What ``plan`` passes its kernel for this call, by the kernel's parameter names."""
    return dict(zip(plan.kernel.arg_names, plan.args(a, b, out, bias, alpha, beta), strict=True))
