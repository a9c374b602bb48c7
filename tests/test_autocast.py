"""The ops under ``torch.autocast``: they cast as torch's own matmuls do (ops/matmul.py's
autocast kernels), to the autocast dtype, and give torch.mm's dtype and values."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from cases import randn
from conftest import DEVICE

import inductor_mm_plugin
from inductor_mm_plugin.ops.reference import assert_matmul_close, assert_mm_swiglu_close

ops = torch.ops.inductor_mm_plugin
# Autocast's default lower-precision dtype on each device (torch.get_autocast_dtype).
LOW = {"cpu": torch.bfloat16, "cuda": torch.float16}


def _cases(a, b, bias):
    """(plugin call, torch call, reference operands) per op."""
    return [
        (lambda: ops.mm(a, b), lambda: torch.mm(a, b), "mm"),
        (lambda: ops.addmm(bias, a, b, beta=0.5, alpha=2), lambda: torch.addmm(bias, a, b, beta=0.5, alpha=2), "addmm"),
        (lambda: ops.bmm(a[None], b[None])[0], lambda: torch.bmm(a[None], b[None])[0], "bmm"),
    ]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("b_dtype", [torch.float32, torch.bfloat16], ids=str)  # mixed dtypes: both cast
def test_ops_cast_to_the_autocast_dtype_like_torch(dtype, b_dtype):
    a, b, bias = randn(24, 40, dtype=torch.float32), randn(40, 16, dtype=b_dtype), randn(16, dtype=torch.float32)
    with torch.autocast(DEVICE, dtype=dtype):
        for ours, theirs, name in _cases(a, b, bias):
            got, want = ours(), theirs()
            assert got.dtype == want.dtype == dtype, name
            low = [t.to(dtype) for t in (a, b, bias)]
            if name == "addmm":
                assert_matmul_close(got, low[0], low[1], low[2], beta=0.5, alpha=2)
            else:
                assert_matmul_close(got, low[0], low[1])
            torch.testing.assert_close(got, want, rtol=2 ** -6, atol=1e-2 * want.abs().max().item())


def test_mm_swiglu_casts_too():
    x, w_gate, w_up = (randn(*s, dtype=torch.float32) for s in ((12, 24), (24, 8), (24, 8)))
    with torch.autocast(DEVICE, dtype=LOW[DEVICE]):
        got = ops.mm_swiglu(x, w_gate, w_up)
        want = F.silu(x @ w_gate) * (x @ w_up)
    assert got.dtype == want.dtype == LOW[DEVICE]
    assert_mm_swiglu_close(got, *(t.to(LOW[DEVICE]) for t in (x, w_gate, w_up)))


def test_float64_and_other_devices_are_left_alone_like_torch():
    """Autocast casts neither float64 nor tensors of another device (torch's is_eligible)."""
    a, b = randn(8, 8, dtype=torch.float64), randn(8, 8, dtype=torch.float64)
    with torch.autocast(DEVICE, dtype=LOW[DEVICE]), warnings.catch_warnings():
        warnings.simplefilter("ignore", inductor_mm_plugin.KernelFallbackWarning)
        assert ops.mm(a, b).dtype == torch.mm(a, b).dtype == torch.float64
    other = "cuda" if DEVICE == "cpu" else "cpu"
    a32, b32 = randn(8, 8, dtype=torch.float32), randn(8, 8, dtype=torch.float32)
    with torch.autocast(other, dtype=torch.bfloat16):
        assert ops.mm(a32, b32).dtype == torch.mm(a32, b32).dtype == torch.float32


def test_gradients_flow_back_through_the_cast_like_torch():
    a, b = (randn(*s, dtype=torch.float32).requires_grad_() for s in ((16, 32), (32, 8)))
    grad = randn(16, 8, dtype=torch.float32)
    with torch.autocast(DEVICE, dtype=LOW[DEVICE]):
        out = ops.mm(a, b)
    ga, gb = torch.autograd.grad(out, (a, b), grad.to(out.dtype))
    a2, b2 = (t.detach().clone().requires_grad_() for t in (a, b))
    with torch.autocast(DEVICE, dtype=LOW[DEVICE]):
        want = torch.mm(a2, b2)
    wa, wb = torch.autograd.grad(want, (a2, b2), grad.to(want.dtype))
    assert (ga.dtype, gb.dtype) == (wa.dtype, wb.dtype) == (torch.float32, torch.float32)
    for g, w in ((ga, wa), (gb, wb)):
        torch.testing.assert_close(g, w, rtol=2 ** -6, atol=1e-2 * w.abs().max().item())


def test_autocast_off_changes_nothing():
    a, b = randn(8, 16, dtype=torch.float32), randn(16, 4, dtype=torch.float32)
    with torch.autocast(DEVICE, dtype=LOW[DEVICE], enabled=False):
        assert ops.mm(a, b).dtype == torch.float32


def test_compiled_under_autocast():
    model = torch.nn.Linear(32, 16, device=DEVICE)
    x = randn(8, 32, dtype=torch.float32)

    def step(x):
        with torch.autocast(DEVICE, dtype=LOW[DEVICE]):
            return ops.addmm(model.bias, x, model.weight.t())

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(step, backend="inductor_mm_plugin", options={"compete": False})(x)
        with torch.autocast(DEVICE, dtype=LOW[DEVICE]):
            want = model(x)
    torch._dynamo.reset()
    assert got.dtype == want.dtype == LOW[DEVICE]
    torch.testing.assert_close(got, want, rtol=2 ** -6, atol=1e-2 * want.abs().max().item())
