"""opcheck, gradients against float64, non-contiguous incoming gradients, compile."""

import pytest
import torch
from cases import BIAS_SHAPES, bias_of, randn

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops.reference import assert_matmul_close

ops = torch.ops.inductor_mm_plugin


def _leaf(*shape, dtype=torch.float32, requires_grad=True):
    return randn(*shape, dtype=dtype).requires_grad_(requires_grad)


def _opcheck_cases(requires_grad):
    rg = requires_grad
    yield ops.mm.default, (_leaf(9, 7, requires_grad=rg), _leaf(7, 5, requires_grad=rg)), {}
    yield ops.mm.default, (_leaf(7, 9, requires_grad=rg).t(), _leaf(5, 7, requires_grad=rg).t()), {}
    for kind in BIAS_SHAPES:
        bias = bias_of(kind, 9, 5, torch.float32).requires_grad_(rg)
        yield ops.addmm.default, (bias, _leaf(9, 7, requires_grad=rg), _leaf(7, 5, requires_grad=rg)), {
            "beta": 0.5,
            "alpha": 2.0,
        }
    yield ops.bmm.default, (_leaf(3, 9, 7, requires_grad=rg), _leaf(3, 7, 5, requires_grad=rg)), {}


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(requires_grad):
    for op, args, kwargs in _opcheck_cases(requires_grad):
        torch.library.opcheck(op, args, kwargs)


def _grads(fn, inputs, grad_out):
    out = fn(*inputs)
    return torch.autograd.grad(out, inputs, grad_out)


@pytest.mark.parametrize("bias_shape", [None, *BIAS_SHAPES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gradients_match_float64(bias_shape, dtype):
    M, N, K = 23, 19, 31
    beta, alpha = 0.75, -1.5
    a = _leaf(M, K, dtype=dtype)
    b = randn(N, K, dtype=dtype).t().requires_grad_()  # nn.Linear layout
    # A non-contiguous incoming gradient (pytorch#194719): the kernel must read its strides.
    grad_out = randn(N, M, dtype=dtype).t()
    if bias_shape is None:
        inputs, fn = (a, b), lambda a, b: ops.mm(a, b)
        ref_fn = lambda a, b: a @ b  # noqa: E731
    else:
        bias = bias_of(bias_shape, M, N, dtype).requires_grad_()
        inputs = (bias, a, b)
        fn = lambda bias, a, b: ops.addmm(bias, a, b, beta=beta, alpha=alpha)  # noqa: E731
        ref_fn = lambda bias, a, b: beta * bias + alpha * (a @ b)  # noqa: E731
    got = _grads(fn, inputs, grad_out)
    ref_inputs = tuple(t.detach().double().requires_grad_() for t in inputs)
    want = _grads(ref_fn, ref_inputs, grad_out.double())
    for i, (g, w, x) in enumerate(zip(got, want, inputs)):
        assert g.shape == x.shape and g.dtype == x.dtype
        # Each input gradient is itself one matmul of K' = M or N terms (or a reduction for
        # the bias); bf16 rounds once at the output: a relative 2**-7, plus accumulation.
        rtol = 1e-5 if dtype == torch.float32 else 2**-7
        scale = w.abs().max().item()
        if bias_shape is not None and i == 0:
            # The bias gradient sums up to M * N terms, which may cancel: its rounding error
            # scales with the terms' magnitudes, not with the (possibly small) sum.
            scale = max(scale, abs(beta) * grad_out.double().abs().sum_to_size(x.shape).max().item())
        torch.testing.assert_close(g.double(), w, rtol=rtol, atol=rtol * scale)


def test_bmm_gradients_match_float64():
    a, b = _leaf(2, 11, 13), _leaf(2, 13, 7)
    grad_out = randn(2, 7, 11, dtype=torch.float32).mT
    got = _grads(ops.bmm, (a, b), grad_out)
    want = _grads(torch.bmm, (a.detach().double().requires_grad_(), b.detach().double().requires_grad_()), grad_out.double())
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5 * w.abs().max().item())


def test_backward_runs_on_plugin_ops():
    """dA and dB are computed by the plugin's mm, not by aten."""
    a, b = _leaf(6, 4), _leaf(4, 5)
    seen = []

    class Recorder(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    out = ops.mm(a, b)
    with Recorder():
        out.backward(torch.ones_like(out))
    assert seen.count("inductor_mm_plugin.mm.default") == 2, seen
    assert not any(s.startswith("aten.mm") for s in seen), seen


def test_compile_fullgraph_matches_eager():
    def f(bias, a, b, x, w):
        y = ops.addmm(bias, a, b, beta=0.5, alpha=2.0)
        return torch.relu(y), ops.bmm(x, w), ops.mm(a, b)

    args = (randn(5, dtype=torch.float32), randn(8, 6, dtype=torch.float32), randn(6, 5, dtype=torch.float32),
            randn(2, 3, 4, dtype=torch.float32), randn(2, 4, 7, dtype=torch.float32))  # fmt: skip
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    for got, want in zip(compiled(*args), f(*args)):
        torch.testing.assert_close(got, want)


def test_compile_raises_clear_error_on_bad_shapes():
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: ops.mm(a, b), fullgraph=True)
    with pytest.raises(Exception, match=r"cannot be multiplied \(4x3 and 5x2\)"):
        compiled(randn(4, 3, dtype=torch.float32), randn(5, 2, dtype=torch.float32))


def test_launch_uses_the_tensors_device(monkeypatch):
    import importlib

    # The module: the package's ``runtime.launch`` is the function of that name.
    launch = importlib.import_module("inductor_mm_plugin.runtime.launch")
    devices = []
    real = launch.device_guard
    monkeypatch.setattr(launch, "device_guard", lambda d: devices.append(d) or real(d))
    a = randn(3, 4, dtype=torch.float32)
    ops.mm(a, randn(4, 2, dtype=torch.float32))
    assert devices == [a.device]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_launch_on_non_current_device():
    with torch.cuda.device(0):
        a = torch.randn(64, 32, device="cuda:1")
        b = torch.randn(32, 16, device="cuda:1")
        out = ops.mm(a, b)
    assert out.device == torch.device("cuda:1")
    assert_matmul_close(out, a, b)


def test_autograd_kernel_records_a_graph_only_when_a_gradient_is_needed():
    # The ops are registered with torch.library.Library and an autograd kernel of their own
    # (ops/matmul.py says why): check what custom_op would have guaranteed.
    for op in (ops.mm.default, ops.addmm.default, ops.bmm.default):
        assert torch.Tag.pt2_compliant_tag in op.tags
    a, b = _leaf(6, 4), _leaf(4, 3)
    assert ops.mm(a, b).grad_fn is not None
    with torch.no_grad():
        assert ops.mm(a, b).grad_fn is None
    assert ops.mm(a.detach(), b.detach()).grad_fn is None
    bias = _leaf(3)
    out = ops.addmm(bias.detach(), a.detach(), b, beta=0.5, alpha=2.0)
    (grad_b,) = torch.autograd.grad(out.sum(), (b,))
    assert_matmul_close(grad_b, 2.0 * a.detach().t(), torch.ones(6, 3, device=a.device))


def test_double_backward_runs_on_the_ops():
    a, b = _leaf(5, 4, dtype=torch.float64), _leaf(4, 3, dtype=torch.float64)
    with pytest.warns(inductor_mm_plugin.KernelFallbackWarning):  # float64: aten, same graph
        assert torch.autograd.gradgradcheck(lambda a, b: ops.mm(a, b), (a, b))
