"""Unaligned operands on aligned copies (runtime/layout.aligned, Plan.copies): what gets
copied, that the TMA kernel's result on the copies is right in every layout, with a bias,
sliced and offset inputs, and the same bits every run; and when the selector copies
(configs.copies_pay)."""

import itertools

import pytest
import torch
from cases import BIAS_SHAPES, bias_of, operand, poisoned, randn
from conftest import DEVICE, HAS_CUDA

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import Problem, copies_pay, hopper
from inductor_mm_plugin.ops.reference import assert_matmul_close
from inductor_mm_plugin.runtime.layout import aligned, tma_layout, unaligned_operands

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (M, N, K): odd everywhere, odd K only, odd N only, odd M only (A transposed then unaligned).
SHAPES = [(33, 47, 61), (24, 32, 45), (24, 37, 32), (37, 24, 40)] if not HAS_CUDA else [
    (333, 470, 611), (240, 320, 4501), (1000, 1003, 2048), (37, 2400, 4000)]  # fmt: skip


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("rows,cols", [(5, 7), (1, 9), (9, 1), (6, 8)])
def test_aligned_copy_keeps_values_and_storage_order_with_16_byte_rows(rows, cols, transposed):
    t = operand(rows, cols, torch.bfloat16, transposed=transposed)
    c = aligned(t)
    assert torch.equal(c, t) and c.data_ptr() % 16 == 0
    lead = c.stride(1) if c.stride(0) == 1 and c.stride(1) != 1 else c.stride(0)
    assert (lead * c.element_size()) % 16 == 0
    if transposed and rows > 1 and cols > 1:
        assert c.stride(0) == 1  # column-major stays column-major: the copy reads and writes in order
    assert aligned(t, copy=False).stride() == c.stride()


def test_unaligned_operands_names_what_tma_cannot_read():
    dt = torch.bfloat16
    assert unaligned_operands(randn(8, 16, dtype=dt), randn(16, 24, dtype=dt)) is None  # both readable
    assert unaligned_operands(randn(8, 20, dtype=dt), randn(20, 24, dtype=dt)) == (True, False)  # K = 20
    assert unaligned_operands(randn(8, 20, dtype=dt), randn(24, 20, dtype=dt).t()) == (True, True)  # a weight too
    assert unaligned_operands(randn(8, 16, dtype=dt), randn(16, 20, dtype=dt)) == (False, True)  # N = 20
    assert unaligned_operands(randn(20, 8, dtype=dt).t(), randn(20, 16, dtype=dt)) is None  # M = 8: 16 bytes
    assert unaligned_operands(randn(20, 9, dtype=dt).t(), randn(20, 16, dtype=dt)) == (True, False)
    offset = randn(8 * 16 + 1, dtype=dt)[1:].view(8, 16)  # an unaligned base
    assert unaligned_operands(offset, randn(16, 16, dtype=dt)) == (True, False)
    assert unaligned_operands(randn(2, 8, 20, dtype=dt), randn(2, 20, 24, dtype=dt)) is None  # batches: no copy
    assert unaligned_operands(randn(8, 0, dtype=dt), randn(0, 24, dtype=dt)) is None  # K = 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_copies_give_the_tma_kernel_every_unaligned_layout(M, N, K, ta, tb, dtype):
    a, b = operand(M, K, dtype, transposed=ta), operand(K, N, dtype, transposed=tb)
    need = unaligned_operands(a, b)
    out = poisoned(M, N, dtype=dtype)
    plan = runtime.launch(a, b, out, copy_unaligned=True)
    tf32 = dtype == torch.float32 and runtime.tf32_enabled()
    if need is None:
        assert plan.copies == (False, False)
    elif plan.cfg.kernel == "tma":
        assert plan.copies == need
        assert tma_layout(*plan.operands(a, b, copy=False), out) is not None
    else:  # fp32 without TF32 (CUDA cores), or TF32 with an M-major A and a K-major B
        assert dtype == torch.float32 and plan.copies == (False, False)
    assert_matmul_close(out, a, b, tf32=tf32)
    # The operands are not changed, and a second run gives the same bits.
    again = poisoned(M, N, dtype=dtype)
    runtime.launch(a, b, again, copy_unaligned=True)
    assert torch.equal(out, again)


@pytest.mark.parametrize("bias_shape", BIAS_SHAPES)
def test_copies_with_a_bias_sliced_inputs_and_scales(bias_shape):
    M, N, K = SHAPES[0]
    dt = torch.bfloat16
    a, b = operand(M, K, dt, sliced=True), operand(K, N, dt, transposed=True)
    bias = bias_of(bias_shape, M, N, dt)
    out = poisoned(M, N, dtype=dt)
    plan = runtime.launch(a, b, out, bias.expand(M, N), 0.5, -2.0, copy_unaligned=True)
    assert plan.cfg.kernel == "tma" and plan.copies[0]
    assert_matmul_close(out, a, b, bias, beta=0.5, alpha=-2.0)


def test_copies_are_planned_once_and_the_repeated_call_copies_again():
    """The plan is kept per call signature; each call copies its own operands (new data each time)."""
    M, N, K = SHAPES[1]
    dt = torch.bfloat16
    a, b = randn(M, K, dtype=dt), randn(K, N, dtype=dt)
    first = runtime.launch(a, b, poisoned(M, N, dtype=dt), copy_unaligned=True)
    for _ in range(3):
        a.normal_()
        out = poisoned(M, N, dtype=dt)
        assert runtime.launch(a, b, out, copy_unaligned=True) is first
        assert_matmul_close(out, a, b)


def test_forbidden_copies_read_in_place_with_the_pointer_kernel():
    M, N, K = SHAPES[0]
    a, b = randn(M, K, dtype=torch.bfloat16), randn(K, N, dtype=torch.bfloat16)
    out = poisoned(M, N, dtype=torch.bfloat16)
    plan = runtime.launch(a, b, out, copy_unaligned=False)
    assert plan.cfg.kernel == "ptr" and plan.copies == (False, False)
    assert_matmul_close(out, a, b)


def _problems(M, N, K, divisor=2, batch=1):
    """(in place, copied) of one call: the pointer kernel's view (its narrower input's load
    divisor) and the aligned copies' TMA view."""
    return (Problem(M, N, K, batch, 2, "bfloat16", tma=False, divisor=divisor),
            Problem(M, N, K, batch, 2, "bfloat16", tma=True))  # fmt: skip


def test_skinny_products_read_in_place_unless_element_loads_meet_a_long_k():
    big_b = hopper.COPY_SKINNY_B_MAX_BYTES
    assert not copies_pay(*_problems(4, 856, 69, divisor=1), 856 * 69 * 2)  # K short: the copy's launch is the cost
    assert not copies_pay(*_problems(16, 1148, 27576, divisor=4), 1148 * 27576 * 2)  # loads 8 bytes wide
    assert copies_pay(*_problems(56, 224, 2989, divisor=1), 224 * 2989 * 2)  # one element at a time, K long
    assert copies_pay(*_problems(46, 685, 5904, divisor=1), 0)  # A copied
    assert not copies_pay(*_problems(8, 32351, 7200, divisor=1), big_b)  # a weight past half the L2
    k = hopper.COPY_NARROW_MIN_K
    assert not copies_pay(*_problems(16, 1851, k, divisor=1), 0) and copies_pay(*_problems(16, 1851, k + 1, divisor=1), 0)


def test_more_rows_copy_unless_k_and_the_output_are_small():
    assert copies_pay(*_problems(1552, 13672, 855), 0)
    assert not copies_pay(*_problems(192, 2282, 80), 0)
    assert copies_pay(*_problems(1565, 768, 120), 0)  # 1.2M outputs
    assert copies_pay(*_problems(192, 2282, hopper.COPY_SHORT_K_MAX + 1), 0)
    assert not copies_pay(*_problems(512, 512, 512, batch=2), 0)  # batches keep the pointer kernel
    in_place, _ = _problems(512, 512, 512)
    assert not copies_pay(in_place, in_place, 0)  # copies TMA cannot read either


@pytest.mark.gpu
def test_gpu_default_copies_where_the_selector_says_and_the_op_is_right():
    dt = torch.bfloat16
    # 230x271x19224: B's rows (271 halves) unaligned, few tiles and a long K: copied.
    a, b = randn(230, 19224, dtype=dt), randn(19224, 271, dtype=dt)
    plan = runtime.launch(a, b, poisoned(230, 271, dtype=dt))
    assert plan.cfg.kernel == "tma" and plan.copies == (False, True)
    for _ in range(3):  # the first call plans; the others take the op's direct launch, which copies too
        b.normal_()
        assert_matmul_close(runtime.mm_launch(a, b, out=poisoned(230, 271, dtype=dt)), a, b)
    # A skinny product's unaligned weight of 32 MB, past half the L2: read in place.
    x, w = randn(16, 14631, dtype=dt), randn(1100, 14631, dtype=dt)
    out = poisoned(16, 1100, dtype=dt)
    plan = runtime.launch(x, w.t(), out)
    assert plan.cfg.kernel == "ptr" and plan.copies == (False, False)
    assert_matmul_close(out, x, w.t())
    # 4160x64x1949: A's rows unaligned, copied; the selector's pick for the copies would be a
    # pointer config, which must not drop them for the unaligned rules (0.26x cuBLAS so).
    a, b = randn(4160, 1949, dtype=dt), randn(1949, 64, dtype=dt)
    plan = runtime.launch(a, b, out := poisoned(4160, 64, dtype=dt))
    assert plan.cfg.kernel == "tma" and plan.copies == (True, False)
    assert_matmul_close(out, a, b)


def test_the_copies_take_a_tma_pick_where_the_selector_would_take_the_pointer_kernel():
    from inductor_mm_plugin.configs import MatmulConfig, heuristic_config, selector

    packed = Problem(4160, 64, 1949, 1, 2, "bfloat16", tma=True, a_kmajor=True, b_kmajor=False)
    tma = selector.Entry(MatmulConfig("tma", 128, 64, 64, 8, 4, 4), False, (0.01, 1.0, 1.0, 0.0))
    ptr = selector.Entry(MatmulConfig("ptr", 64, 32, 128, 8, 4, 5), False, (0.001, 0.1, 0.1, 0.0))
    assert selector.select(packed, (tma, ptr)) == ptr.config
    assert selector.select(packed, (tma, ptr), kernels=("tma",)) == tma.config
    assert heuristic_config(packed, kernels=("tma",)).kernel == "tma"  # the committed table


@pytest.mark.parametrize("which", ["a", "b"])
def test_copies_materialize_a_broadcast_operand(which):
    """A stride-0 (expanded) operand has no leading stride TMA can take: its copy is the full
    matrix, and the product is the broadcast's."""
    M, N, K = SHAPES[1]
    dt = torch.bfloat16
    a = randn(1, K, dtype=dt).expand(M, K) if which == "a" else randn(M, K, dtype=dt)
    b = randn(K, 1, dtype=dt).expand(K, N) if which == "b" else randn(K, N, dtype=dt)
    out = poisoned(M, N, dtype=dt)
    plan = runtime.launch(a, b, out, copy_unaligned=True)
    assert plan.cfg.kernel == "tma" and plan.copies[0 if which == "a" else 1]
    assert_matmul_close(out, a, b)
