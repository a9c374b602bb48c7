"""Valid-but-unsupported input falls back to aten (with a warning); invalid input raises."""

import os
import subprocess
import sys
import textwrap

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
        from inductor_mm_plugin.kernels.matmul import interpreting
        assert not interpreting()
        a, b = torch.randn(6, 5), torch.randn(5, 3)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = torch.ops.inductor_mm_plugin.mm(a, b)
        torch.testing.assert_close(out, a @ b, rtol=0, atol=0)
        print([str(x.message) for x in w if issubclass(x.category, inductor_mm_plugin.KernelFallbackWarning)])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "CPU tensors need Triton's interpreter" in res.stdout


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
    from inductor_mm_plugin.kernels.matmul import interpreter_defect_of

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
