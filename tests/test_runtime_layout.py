"""runtime/layout.py: which kernel a call's operands allow (the TMA kernel where descriptors
can read them, the pointer kernel for the rest), how the TMA kernel reads them, and the facts
a config is chosen from (the pointer kernel's per-operand load-width divisors among them)."""

import itertools

import pytest
import torch
from cases import operand, poisoned, randn
from conftest import DEVICE

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import hopper
from inductor_mm_plugin.runtime.layout import (
    load_divisors,
    pointer_hints,
    pointer_kernel_divisor,
    pointer_kernel_reason,
    pow2_divisor,
    tf32_a_from_registers,
    tma_layout,
)


def layout_of(a, b, out=None):
    """The TmaLayout of ``mm(a, b)`` into a row-major output (or ``out``), or None."""
    if out is None:
        out = torch.empty(*a.shape[:-1], b.shape[-1], dtype=a.dtype, device=a.device)
    return tma_layout(a, b, out)


def test_tma_path_for_aligned_operands_in_any_orientation():
    M, N, K = 64, 48, 40  # bf16 rows of 80 / 96 / 128 bytes: all multiples of 16
    for ta, tb in itertools.product((False, True), repeat=2):
        a = operand(M, K, torch.bfloat16, transposed=ta)
        b = operand(K, N, torch.bfloat16, transposed=tb)
        lay = layout_of(a, b)
        assert (lay.a_kmajor, lay.b_kmajor, lay.c_tma) == (not ta, tb, True)
        assert (lay.lda, lay.ldb, lay.ldc) == (M if ta else K, K if tb else N, N)


def test_pointer_path_for_unaligned_strided_or_batched_operands():
    dt = torch.float16
    # Rows of 56 halves (112 bytes) are 16-byte aligned; rows of 52 (104 bytes) are not.
    assert layout_of(randn(8, 56, dtype=dt), randn(56, 16, dtype=dt)) is not None
    assert layout_of(randn(8, 52, dtype=dt), randn(52, 16, dtype=dt)) is None
    assert layout_of(randn(8, 16, dtype=dt), randn(16, 52, dtype=dt)) is None
    # A strided slice has no unit stride.
    assert layout_of(operand(16, 16, dt, sliced=True), randn(16, 16, dtype=dt)) is None
    # A base pointer 2 bytes past an aligned one.
    off = randn(16 * 16 + 1, dtype=dt)[1:].view(16, 16)
    assert layout_of(off, randn(16, 16, dtype=dt)) is None
    # K == 0: a descriptor needs non-empty dimensions.
    assert layout_of(randn(8, 0, dtype=dt), randn(0, 16, dtype=dt)) is None
    # A batch whose matrices are not stacked at rows x leading stride (here padded apart).
    padded = randn(2, 9, 16, dtype=dt)[:, :8]
    assert layout_of(padded, randn(2, 16, 16, dtype=dt)) is None


def test_tma_path_for_stacked_batches_in_any_orientation():
    dt = torch.bfloat16
    B, M, N, K = 3, 24, 16, 40
    for ta, tb in itertools.product((False, True), repeat=2):
        a = randn(B, K, M, dtype=dt).transpose(1, 2) if ta else randn(B, M, K, dtype=dt)
        b = randn(B, N, K, dtype=dt).transpose(1, 2) if tb else randn(B, K, N, dtype=dt)
        lay = layout_of(a, b)
        assert lay is not None and (lay.a_kmajor, lay.b_kmajor) == (not ta, tb), (ta, tb, lay)


def test_size_one_dims_get_aligned_stand_in_strides():
    dt = torch.bfloat16
    # (1, K) with an odd reported row stride: the row stride is never used.
    a = torch.as_strided(randn(1, 40, dtype=dt), (1, 40), (7, 1))
    lay = layout_of(a, randn(40, 32, dtype=dt))
    assert lay is not None and lay.a_kmajor and (lay.lda * 2) % 16 == 0


def test_output_that_is_not_row_major_is_stored_through_pointers():
    dt = torch.float32
    a, b = randn(24, 32, dtype=dt), randn(32, 20, dtype=dt)
    col_major = torch.empty(20, 24, dtype=dt, device=DEVICE).t()
    lay = layout_of(a, b, col_major)
    assert lay is not None and lay.c_tma is False and lay.ldc == col_major.stride(0)


@pytest.mark.parametrize(
    "values,divisor,hint",
    [
        ((2000, 3000, 500, 500, 1, 3000, 1, 3000, 1), 4, 4),  # 2000x3000x500, row-major
        ((1000, 1000, 1000, 1, 1000), 8, 8),
        ((64, 48, 16, 1, 0), 16, 1),  # all divisible by 16: Triton knows without a hint
        ((1531, 1531, 1531, 1), 1, 1),
        ((1, 3000, 500, 1, 3000), 4, 4),  # M = 1 is a constant to Triton, not a constraint
        ((4096, 4096, 4094, 1), 2, 2),
    ],
)
def test_pointer_kernel_divisor_divides_every_size_and_stride(values, divisor, hint):
    assert pow2_divisor(values) == divisor
    assert all(v % divisor == 0 for v in values if v not in (0, 1))
    assert pointer_kernel_divisor(divisor) == hint


@pytest.mark.parametrize(
    "M,N,K,ta,tb,expected",
    [
        (53, 136, 552, True, True, (1, 8, 8)),  # an odd M narrows only A, read along M
        (53, 136, 552, False, False, (8, 8, 8)),  # ... and nothing when A is read along K
        (43, 152, 4218, False, False, (2, 8, 8)),
        (2000, 3000, 500, False, True, (4, 4, 8)),  # B = w.t(): rows of K = 500
        (64, 48, 16, False, False, (16, 16, 16)),
        (1, 300, 100, True, False, (4, 4, 4)),  # a (1, K) view with both strides 1: along K
    ],
)
def test_load_divisors_are_per_operand(M, N, K, ta, tb, expected):
    """Each matrix's divisor divides its strides and its size along its unit stride, and no
    other size: the kernel tests only that size in the masks along its loads."""
    dt = torch.bfloat16
    a, b, out = operand(M, K, dt, transposed=ta), operand(K, N, dt, transposed=tb), poisoned(M, N, dtype=dt)
    assert load_divisors(a, b, out) == expected
    for t, rows, cols, d in zip((a, b, out), (M, K, M), (K, N, N), expected):
        along = cols if t.stride(-1) == 1 else rows
        assert all(v % d == 0 for v in (*t.stride(), along) if v not in (0, 1))
    hints = pointer_hints(a, b, out)
    assert [hints[f"{x}_DIVISOR"] for x in "ABC"] == [pointer_kernel_divisor(d) for d in expected]
    assert [hints[f"{x}_ROW_MAJOR"] for x in "ABC"] == [a.stride(-1) == 1, b.stride(-1) == 1, True]


def test_load_divisors_of_a_matrix_without_a_unit_stride():
    a = randn(40, 64, dtype=torch.float16)[:, ::2]  # strides (64, 2): no load is wider than one element
    b = randn(32, 24, dtype=torch.float16)
    assert load_divisors(a, b, poisoned(40, 24, dtype=torch.float16)) == (1, 8, 8)


def test_problem_carries_the_divisor_and_the_pointer_layout():
    dt = torch.bfloat16
    a, b = randn(20, 50, dtype=dt), randn(30, 50, dtype=dt).t()  # a Linear weight, K = 50
    plan = runtime.launch(a, b, poisoned(20, 30, dtype=dt), copy_unaligned=False)
    assert plan.cfg.kernel == "ptr"
    assert (plan.problem.divisor, plan.problem.a_kmajor, plan.problem.b_kmajor) == (2, True, True)
    assert "ptr2|" in plan.problem.bucket()


def test_tf32_with_m_major_a_and_k_major_b_takes_the_pointer_kernel():
    assert tf32_a_from_registers(False, True, "tf32")
    assert not tf32_a_from_registers(False, True, "ieee")
    assert not any(tf32_a_from_registers(ak, bk, "tf32") for ak, bk in ((True, True), (True, False), (False, False)))


def test_pointer_kernel_reason_follows_the_tma_rules():
    """Judged from shapes and strides alone (fake tensors in the routing pass): the same
    answer as the layout for 2-D operands; a batch stacked along K wants K in 64-deep steps."""
    dt = torch.bfloat16
    cases = [(randn(64, 40, dtype=dt), randn(40, 48, dtype=dt)), (randn(8, 52, dtype=dt), randn(52, 16, dtype=dt)),
             (operand(16, 16, dt, sliced=True), randn(16, 16, dtype=dt)), (randn(64, 40, dtype=dt).t(), randn(64, 8, dtype=dt))]  # fmt: skip
    for a, b in cases:
        assert (pointer_kernel_reason(a, b) is None) == (layout_of(a, b) is not None), (a.shape, a.stride())
    assert "not TMA-readable" in pointer_kernel_reason(randn(8, 52, dtype=dt), randn(52, 16, dtype=dt))
    stacked_k = pointer_kernel_reason(randn(8, 256, 1000, dtype=dt), randn(8, 1000, 128, dtype=dt))
    assert "stacked along K = 1000" in stacked_k
    assert pointer_kernel_reason(randn(8, 256, 1024, dtype=dt), randn(8, 1024, 128, dtype=dt)) is None


def test_forced_tma_config_the_call_cannot_take_is_a_clear_error():
    dt = torch.bfloat16
    # Rows of 52 halves (104 bytes) are not 16-byte aligned: no TMA descriptor.
    with pytest.raises(ValueError, match="needs TMA-compatible operands"):
        runtime.launch(randn(8, 52, dtype=dt), randn(52, 16, dtype=dt), poisoned(8, 16, dtype=dt),
                       config=hopper.INTERPRETER_TMA)  # fmt: skip
    # A batch stacked along K (an N-major B) with K = 40, not a whole number of 16-deep steps.
    a, b = randn(3, 8, 40, dtype=dt), randn(3, 40, 16, dtype=dt)
    with pytest.raises(ValueError, match="needs TMA-compatible operands"):
        runtime.launch(a, b, poisoned(3, 8, 16, dtype=dt), config=hopper.INTERPRETER_TMA)
