"""Valid-but-unsupported input falls back to aten (with a warning); invalid input raises."""

import contextlib
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch
from cases import randn

import inductor_mm_plugin
from inductor_mm_plugin import KernelFallbackWarning

ops = torch.ops.inductor_mm_plugin


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64], ids=str)
def test_unsupported_dtype_falls_back_to_aten(dtype):
    a = torch.randint(-5, 5, (7, 6)).to(dtype) if not dtype.is_floating_point else torch.randn(7, 6, dtype=dtype)
    b = torch.randint(-5, 5, (6, 4)).to(dtype) if not dtype.is_floating_point else torch.randn(6, 4, dtype=dtype)
    bias = torch.ones(4, dtype=dtype)
    with pytest.warns(KernelFallbackWarning, match=f"dtype {dtype} is not supported"):
        got = ops.mm(a, b)
    torch.testing.assert_close(got, torch.mm(a, b), rtol=0, atol=0)
    with pytest.warns(KernelFallbackWarning):
        got = ops.addmm(bias, a, b, beta=2, alpha=3)
    torch.testing.assert_close(got, torch.addmm(bias, a, b, beta=2, alpha=3), rtol=0, atol=0)
    with pytest.warns(KernelFallbackWarning):
        got = ops.bmm(a[None], b[None])
    torch.testing.assert_close(got, torch.bmm(a[None], b[None]), rtol=0, atol=0)


def test_float64_gradients_through_fallback():
    a = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    with pytest.warns(KernelFallbackWarning):
        assert torch.autograd.gradcheck(lambda a, b: ops.mm(a, b), (a, b))


def test_cpu_without_interpreter_falls_back_to_aten():
    # The interpreter is chosen when the kernel is defined, so this needs a fresh process.
    code = textwrap.dedent(
        """
        import warnings, torch, inductor_mm_plugin
        from inductor_mm_plugin.interpreter import interpreting
        assert not interpreting()
        a, b = torch.randn(6, 5), torch.randn(5, 3)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = torch.ops.inductor_mm_plugin.mm(a, b)
        torch.testing.assert_close(out, a @ b, rtol=0, atol=0)
        print([str(x.message) for x in w if issubclass(x.category, inductor_mm_plugin.KernelFallbackWarning)])
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.ops.inductor_mm_plugin.mm_swiglu(a, b, b)
        print([str(x.message) for x in w if issubclass(x.category, inductor_mm_plugin.KernelFallbackWarning)])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    mm, mm_swiglu = res.stdout.splitlines()[-2:]
    assert "CPU tensors need Triton's interpreter" in mm
    # mm_swiglu warns once, as itself (it used to warn twice, as mm)
    assert mm_swiglu.count("running the aten op") == 1
    assert "inductor_mm_plugin.mm_swiglu: running the aten op" in mm_swiglu, mm_swiglu


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: ops.mm(randn(3, 4, dtype=torch.float32), randn(5, 2, dtype=torch.float32)),
         r"a and b shapes cannot be multiplied \(3x4 and 5x2\): a.shape\[1\] = 4 must equal b.shape\[0\] = 5"),
        (lambda: ops.mm(randn(2, 3, 4, dtype=torch.float32), randn(4, 2, dtype=torch.float32)),
         r"expected 2-D matrices, but got a with shape \(2x3x4\) and b with shape \(4x2\)"),
        (lambda: ops.mm(randn(3, 4, dtype=torch.float32), randn(4, 2, dtype=torch.float16)),
         r"expected a and b to have the same dtype, but got a: torch.float32 and b: torch.float16"),
        (lambda: ops.mm(randn(3, 4, dtype=torch.float32), torch.empty(4, 2, device="meta")),
         r"expected all tensors to be on the same device, but found a on [\w:]+ and b on meta"),
        (lambda: ops.addmm(randn(3, dtype=torch.float32), randn(2, 4, dtype=torch.float32), randn(4, 5, dtype=torch.float32)),
         r"bias with shape \(3\) cannot be broadcast to the output shape \(2x5\)"),
        (lambda: ops.addmm(randn(5, dtype=torch.float16), randn(2, 4, dtype=torch.float32), randn(4, 5, dtype=torch.float32)),
         r"expected a and bias to have the same dtype, but got a: torch.float32 and bias: torch.float16"),
        (lambda: ops.bmm(randn(2, 3, 4, dtype=torch.float32), randn(3, 4, 5, dtype=torch.float32)),
         r"expected a and b to have the same batch size, but got a with shape \(2x3x4\) and b with shape \(3x4x5\)"),
        (lambda: ops.bmm(randn(2, 3, 4, dtype=torch.float32), randn(2, 5, 5, dtype=torch.float32)),
         r"a and b shapes cannot be multiplied \(2x3x4 and 2x5x5\)"),
        (lambda: ops.bmm(randn(3, 4, dtype=torch.float32), randn(4, 5, dtype=torch.float32)),
         r"expected 3-D batches of matrices"),
    ],
)  # fmt: skip
def test_invalid_input_raises_like_torch(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_errors_name_the_op():
    with pytest.raises(RuntimeError, match=r"^inductor_mm_plugin.addmm: "):
        ops.addmm(randn(3, dtype=torch.float32), randn(2, 4, dtype=torch.float32), randn(4, 5, dtype=torch.float32))


def test_import_has_no_side_effects():
    code = textwrap.dedent(
        """
        import torch, torch._inductor.config as c
        before = c.save_config_portable() if hasattr(c, "save_config_portable") else dict(c.get_config_copy())
        import inductor_mm_plugin
        after = c.save_config_portable() if hasattr(c, "save_config_portable") else dict(c.get_config_copy())
        assert before == after, {k for k in before if before[k] != after.get(k)}
        assert not torch.cuda.is_initialized()
        assert hasattr(torch.ops.inductor_mm_plugin, "mm")
        print("ok")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


def test_version():
    assert inductor_mm_plugin.__version__.count(".") == 2


def test_interpreter_defect_is_named_for_triton_36_with_numpy_24():
    from inductor_mm_plugin.interpreter import interpreter_defect_of

    reason = interpreter_defect_of("3.6.0", "2.4.1")
    assert "triton-lang/triton#9171" in reason and "numpy 2.4.1" in reason
    assert interpreter_defect_of("3.6.0", "2.3.5") is None
    assert interpreter_defect_of("3.7.1", "2.4.6") is None


def test_interpreter_defect_falls_back_to_aten(monkeypatch):
    from inductor_mm_plugin.runtime import checks

    monkeypatch.setattr(checks, "interpreter_defect", lambda: "a broken interpreter (stand-in)")
    a, b = randn(9, 5, dtype=torch.float32), randn(5, 3, dtype=torch.float32)
    with pytest.warns(KernelFallbackWarning, match="a broken interpreter"):
        got = ops.mm(a, b)
    torch.testing.assert_close(got, torch.mm(a, b))


# -- sparse and nested operands: the aten op, or torch's own error


SPARSE = {"coo": torch.Tensor.to_sparse, "csr": torch.Tensor.to_sparse_csr}


def _outcome(call):
    """(result, None) or (None, the exception) of ``call()``."""
    try:
        return call(), None
    except Exception as e:  # noqa: BLE001  (whatever torch raises is what the op must raise)
        return None, e


def _assert_same_outcome(ours, theirs, fallback_match):
    """The op gives torch's values as a dense contiguous tensor, with a fallback warning,
    or raises torch's own error."""
    want, error = _outcome(theirs)
    if error is not None:
        with pytest.raises(type(error), match=re.escape(str(error))):
            ours()
        return
    with pytest.warns(KernelFallbackWarning, match=fallback_match):
        got = ours()
    assert got.layout == torch.strided and got.is_contiguous()
    want = want.to_dense() if want.layout != torch.strided else want
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.parametrize("layout", SPARSE)
@pytest.mark.parametrize("which", ["a", "b", "both"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_sparse_operands_run_the_aten_op(layout, which, dtype):
    # Before: "Cannot access data pointer of Tensor that doesn't have storage" (COO) and
    # "Sparse CSR tensors do not have strides" from inside the launcher.
    to_sparse = SPARSE[layout]
    a, b, bias = randn(6, 5, dtype=dtype), randn(5, 4, dtype=dtype), randn(4, dtype=dtype)
    sa = to_sparse(a) if which != "b" else a
    sb = to_sparse(b) if which != "a" else b
    match = f"sparse layout torch.sparse_{layout} is not supported by the kernel"
    _assert_same_outcome(lambda: ops.mm(sa, sb), lambda: torch.mm(sa, sb), match)
    _assert_same_outcome(lambda: ops.addmm(bias, sa, sb, beta=0.5, alpha=2),
                         lambda: torch.addmm(bias, sa, sb, beta=0.5, alpha=2), match)  # fmt: skip
    sa3 = to_sparse(a[None]) if which != "b" else a[None]
    sb3 = to_sparse(b[None]) if which != "a" else b[None]
    _assert_same_outcome(lambda: ops.bmm(sa3, sb3), lambda: torch.bmm(sa3, sb3), match)
    _assert_same_outcome(lambda: ops.mm_swiglu(sa, sb, sb), lambda: _swiglu_in_torch(sa, sb, sb), match)


def _swiglu_in_torch(x, w_gate, w_up):
    gate, up = torch.mm(x, w_gate), torch.mm(x, w_up)
    gate, up = (t.to_dense() if t.layout != torch.strided else t for t in (gate, up))
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(x.dtype)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.parametrize("layout", SPARSE)
def test_sparse_bias_is_rejected_like_torch(layout):
    a, b = randn(6, 5, dtype=torch.float32), randn(5, 4, dtype=torch.float32)
    bias = SPARSE[layout](randn(6, 4, dtype=torch.float32))
    _assert_same_outcome(lambda: ops.addmm(bias, a, b), lambda: torch.addmm(bias, a, b), "sparse")


def test_sparse_operand_gradients_match_torch():
    a, b = randn(6, 5, dtype=torch.float32), randn(5, 4, dtype=torch.float32)
    grads = []
    for mm in (torch.mm, ops.mm):
        sa = a.to_sparse().requires_grad_()
        bb = b.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", KernelFallbackWarning)
            mm(sa, bb).pow(2).sum().backward()
        grads.append((sa.grad.to_dense(), bb.grad))
    torch.testing.assert_close(grads[1], grads[0])


def _nested(layout, *shapes, requires_grad=False):
    return torch.nested.nested_tensor([randn(*s, dtype=torch.float32) for s in shapes], layout=layout,
                                      requires_grad=requires_grad)  # fmt: skip


NESTED = {"strided": torch.strided, "jagged": torch.jagged}


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
@pytest.mark.parametrize("layout", NESTED)
@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference_mode"])
def test_nested_bmm_runs_the_aten_op(layout, mode):
    # Before: NotImplementedError (no kernel for the NestedTensorCPU key, or none in the
    # jagged layout's op table), where torch.bmm works.
    grad = mode == "grad"
    a = _nested(NESTED[layout], (2, 3), (4, 3), requires_grad=grad)
    # Jagged: a dense b, the one the layout takes; strided: a nested b (torch's own backward
    # of a strided nested a with a dense b returns a wrongly shaped gradient for b).
    if layout == "jagged":
        b = randn(2, 3, 5, dtype=torch.float32).requires_grad_(grad)
    else:
        b = _nested(torch.strided, (3, 5), (3, 5), requires_grad=grad)
    context = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    with context():
        want = torch.bmm(a, b)
        with pytest.warns(KernelFallbackWarning, match="nested tensors are not supported by the kernel"):
            got = ops.bmm(a, b)
    assert got.is_nested and got.layout == want.layout
    for g, w in zip(got.unbind(), want.unbind()):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    if mode == "grad":
        grad_out = _nested(NESTED[layout], (2, 5), (4, 5))
        if layout == "jagged":
            grad_out = torch.nested.nested_tensor_from_jagged(grad_out.values(), offsets=want.offsets())
        want_grads = torch.autograd.grad(want, (a, b), grad_out)
        got_grads = torch.autograd.grad(got, (a, b), grad_out)
        for g, w in zip(got_grads, want_grads):
            for gi, wi in zip(g.unbind(), w.unbind()):
                torch.testing.assert_close(gi, wi, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore::inductor_mm_plugin.KernelFallbackWarning")
def test_nested_bmm_compiles():
    # The composite kernel runs while Dynamo traces, so the graph holds aten.bmm on the
    # nested tensor (before: "UnsupportedFakeTensorException when running FX node").
    torch._dynamo.reset()
    a, b = _nested(torch.jagged, (2, 3), (4, 3)), randn(2, 3, 5, dtype=torch.float32)
    got = torch.compile(lambda a, b: ops.bmm(a, b) * 2, backend="aot_eager", fullgraph=True)(a, b)
    for g, w in zip(got.unbind(), (torch.bmm(a, b) * 2).unbind()):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_mm_raises_like_torch():
    a = _nested(torch.strided, (2, 3), (4, 3))
    b = randn(3, 5, dtype=torch.float32)
    _, error = _outcome(lambda: torch.mm(a, b))
    assert error is not None  # torch.mm takes no nested tensors
    with pytest.raises(type(error), match="aten::mm"):
        ops.mm(a, b)


# -- scalars: beta and alpha reach the kernel as float32, as torch's opmath does


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize(
    "beta,alpha",
    [(1e300, 1), (1, 1e39), (-1e39, 1), (0, 1e300), (1, 1 + 1j), (1j, 1), (2 - 1j, 0.5)],
    ids=["beta=1e300", "alpha=1e39", "beta=-1e39", "beta=0,alpha=1e300", "alpha=1+1j", "beta=1j", "beta=2-1j"],
)
def test_scalar_torch_cannot_convert_raises_like_torch(dtype, beta, alpha):
    # Before: beta=1e300 or alpha=1e39 returned +-inf; a complex alpha failed with a
    # TypeError inside the launcher.
    a, b, bias = randn(6, 5, dtype=dtype), randn(5, 4, dtype=dtype), randn(4, dtype=dtype)
    _, error = _outcome(lambda: torch.addmm(bias, a, b, beta=beta, alpha=alpha))
    assert isinstance(error, RuntimeError) and "value cannot be converted to type float without overflow" in str(error)
    with pytest.raises(RuntimeError, match=re.escape(str(error))):
        ops.addmm(bias, a, b, beta=beta, alpha=alpha)


def test_float64_takes_any_double_scalar_like_torch():
    a, b, bias = (randn(*s, dtype=torch.float64) for s in ((6, 5), (5, 4), (4,)))
    with pytest.warns(KernelFallbackWarning):
        got = ops.addmm(bias, a, b, beta=1e300, alpha=1e39)
    torch.testing.assert_close(got, torch.addmm(bias, a, b, beta=1e300, alpha=1e39), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize(
    "beta,alpha",
    [(1 + 0j, 2), (True, 0.5), (float("inf"), 1), (1, float("-inf")), (float("nan"), 1), (1, 3e38), (1e5, 1)],
    ids=["beta=1+0j", "beta=True", "beta=inf", "alpha=-inf", "beta=nan", "alpha=3e38", "beta=1e5"],
)
def test_scalar_torch_converts_is_taken_like_torch(dtype, beta, alpha):
    # Finite values up to float32's max, inf, nan, bools and complex numbers with no
    # imaginary part all convert; the output may overflow to inf, as torch's does.
    a, b, bias = randn(6, 5, dtype=dtype), randn(5, 4, dtype=dtype), randn(4, dtype=dtype)
    beta_, alpha_ = complex(beta).real, complex(alpha).real
    want = torch.addmm(bias.double(), a.double(), b.double(), beta=beta_, alpha=alpha_)
    got = ops.addmm(bias, a, b, beta=beta, alpha=alpha)
    assert got.dtype == dtype
    # With an infinite alpha, torch's own answer depends on its BLAS: MKL on some CPUs scales
    # each product before summing (NaN where products of both signs meet), elsewhere the sum
    # (a signed infinity). Either is torch's; the plugin's must be one of them, element for element.
    answers = [want]
    if math.isinf(alpha_):
        answers.append(alpha_ * (a.double() @ b.double()) + beta_ * bias.double())
    assert any(_same_values(got, ans.to(dtype)) for ans in answers), (got, answers)  # rounded like the output


def _same_values(got, want) -> bool:
    """NaN and ±inf exactly where ``want`` has them, the finite values close."""
    finite = want.isfinite()
    return (torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
            and torch.equal(got[want.isinf()], want[want.isinf()])
            and torch.allclose(got[finite], want[finite], rtol=1e-2, atol=1e-2))  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_beta_that_rounds_to_zero_in_float32_ignores_the_bias(dtype):
    # torch's addmm hands BLAS beta as float32: 1e-50 is 0 there, so a NaN bias is ignored.
    # Before: the launcher decided on the double (not 0), and the kernel computed 0 * NaN.
    a, b = randn(6, 5, dtype=dtype), randn(5, 4, dtype=dtype)
    bias = torch.full((4,), float("nan"), dtype=dtype, device=a.device)
    got = ops.addmm(bias, a, b, beta=1e-50)
    assert not got.isnan().any()
    torch.testing.assert_close(got, torch.addmm(bias, a, b, beta=1e-50))


# -- arguments that are not tensors


@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference_mode"])
@pytest.mark.parametrize(
    "call,message",
    [
        (lambda a, b: ops.mm(None, b), "inductor_mm_plugin.mm(): argument 'a' (position 1) must be Tensor, not NoneType"),
        (lambda a, b: ops.mm(a, None), "inductor_mm_plugin.mm(): argument 'b' (position 2) must be Tensor, not NoneType"),
        (lambda a, b: ops.addmm(None, a, b), "inductor_mm_plugin.addmm(): argument 'bias' (position 1) must be Tensor, not NoneType"),
        (lambda a, b: ops.bmm(a[None], None), "inductor_mm_plugin.bmm(): argument 'b' (position 2) must be Tensor, not NoneType"),
        (lambda a, b: ops.mm_swiglu(a, None, b), "inductor_mm_plugin.mm_swiglu(): argument 'w_gate' (position 2) must be Tensor, not NoneType"),
        (lambda a, b: inductor_mm_plugin.mm(None, b), "inductor_mm_plugin.mm(): argument 'a' (position 1) must be Tensor, not NoneType"),
    ],
    ids=["mm-a", "mm-b", "addmm-bias", "bmm-b", "mm_swiglu-w_gate", "wrapper-mm-a"],
)  # fmt: skip
def test_none_for_a_tensor_is_a_type_error_like_torch(mode, call, message):
    # Before: AttributeError: 'NoneType' object has no attribute 'requires_grad'. torch says
    # "mm(): argument 'input' (position 1) must be Tensor, not NoneType".
    a = randn(4, 4, dtype=torch.float32).requires_grad_(mode == "grad")
    b = randn(4, 4, dtype=torch.float32).requires_grad_(mode == "grad")
    context = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    with context(), pytest.raises(TypeError, match=re.escape(message)):
        call(a, b)


# -- threads on the interpreter


def test_threads_on_the_interpreter_get_right_results():
    # Triton's interpreter patches triton.language while a kernel runs, so two kernels at
    # once break each other: 8 threads raised InterpreterErrors and once returned a wrong
    # result. Launches under the interpreter are serialized (runtime/launch.py, _interpreter_lock).
    from inductor_mm_plugin.interpreter import interpreting
    from inductor_mm_plugin.ops.reference import assert_matmul_close

    if not interpreting():
        pytest.skip("the lock is for the interpreter; the GPU path runs threads in tests/test_gpu_reliability.py")
    threads, calls = 8, 8
    start = threading.Barrier(threads)
    failures = []

    def work(i):
        start.wait(timeout=120)
        for j in range(calls):
            # Fresh inputs and a new shape each call: a result computed from another
            # thread's operands, or a plan of another shape, shows as a wrong value.
            dtype = (torch.float32, torch.float16, torch.bfloat16)[(i + j) % 3]
            M, N, K = 9 + i, 5 + j, 17 + (i * j) % 5
            a, b = randn(M, K, dtype=dtype), randn(K, N, dtype=dtype)
            bias = randn(N, dtype=dtype)
            try:
                if j % 2:
                    assert_matmul_close(ops.mm(a, b), a, b)
                else:
                    assert_matmul_close(ops.addmm(bias, a, b, beta=0.5, alpha=2), a, b, bias, beta=0.5, alpha=2)
            except Exception as e:  # noqa: BLE001
                failures.append(f"thread {i} call {j} ({M}x{N}x{K} {dtype}): {type(e).__name__}: {str(e)[:300]}")

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often, so kernels overlap on every run
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(switch)
    assert not failures, "\n".join(failures)


# -- warmup


def test_warmup_without_cuda_says_so(monkeypatch):
    from inductor_mm_plugin.runtime import warmup

    # Before: AssertionError: Torch not compiled with CUDA enabled.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"warmup: device cuda was asked for, but CUDA is not available.*'cpu'"):
        warmup([(16, 16, 16)])


def test_warmup_on_the_cpu_under_the_interpreter():
    from inductor_mm_plugin.interpreter import interpreting
    from inductor_mm_plugin.runtime import warmup

    if not interpreting():
        pytest.skip("the CPU path needs Triton's interpreter")
    chosen = warmup([(16, 24, 8), (2, 8, 8, 16)], dtype=torch.float32, device="cpu", bias=True, layout="linear")
    assert set(chosen) == {(16, 24, 8), (2, 8, 8, 16)}
