"""The plugin's Inductor template: epilogues fuse into it (GPU), the extern path elsewhere (CPU)."""

import inspect
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import DEVICE
from integration_utils import fresh_inductor_cache
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck

from inductor_mm_plugin.inductor import template
from inductor_mm_plugin.inductor.routing import record_sites
from inductor_mm_plugin.kernels.matmul import _matmul_kernel

MARKER = "inductor_mm_plugin template"


def kernels_of(codes):
    """{kernel name: source} of every Triton kernel in the generated code."""
    found = {}
    for code in codes:
        for name, src in re.findall(r"async_compile\.triton\('(\w+)', '''(.*?)'''", code, flags=re.S):
            found[name] = src
    return found


def compile_code(fn, *args, **compile_kwargs):
    torch._dynamo.reset()
    with fresh_inductor_cache(), record_sites() as records:
        out, codes = run_and_get_code(torch.compile(fn, backend="inductor_mm_plugin", **compile_kwargs), *args)
    return out, codes, records


# ------------------------------------------------------------------------- CPU


def test_template_mirrors_the_eager_kernel():
    """The template's tile algorithm is the eager kernel's, line for line (drift fails here;
    the GPU test below checks they agree bit for bit)."""
    kernel = inspect.getsource(getattr(_matmul_kernel, "fn", _matmul_kernel))  # JIT or interpreter wrapper
    lines = [
        "num_pid_m = tl.cdiv(M, BLOCK_M)",
        "group_size_m = min(num_pid_m - first_m, GROUP_M)",
        "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "mask_m = offs_m[:, None] < M",
        "for k in range(0, tl.cdiv(K, BLOCK_K)):",
        "k_left = K - k * BLOCK_K",
        "a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)",
        "b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)",
        "acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)",
        "a_ptrs += BLOCK_K * stride_ak",
    ]
    for line in lines:
        assert line in kernel, f"eager kernel lost: {line}"
        assert line in template.SOURCE, f"template lost: {line}"


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 14336, 4096), (128, 4096, 4096), (8192, 14336, 4096), (1000, 1000, 1000)])
@pytest.mark.parametrize("elem", [2, 4])
def test_configs_fit_shared_memory(m, n, k, elem):
    assert template.fits(template.heuristic_config(m, n, k, elem), elem)
    assert all(template.fits(c, 2) for c in template.COMPETE_CONFIGS)


@pytest.mark.skipif(DEVICE == "cuda", reason="the CPU fallback path")
def test_cpu_epilogue_site_uses_the_extern_kernel():
    lin = nn.Linear(16, 32, device=DEVICE)
    x = torch.randn(8, 16, device=DEVICE)
    with torch.no_grad():
        out, codes, records = compile_code(lambda x: F.gelu(lin(x)), x)
        torch.testing.assert_close(out, F.gelu(lin(x)), rtol=1e-5, atol=1e-5)
    text = "\n".join(codes)
    assert "extern_kernels.inductor_mm_plugin_addmm(" in text
    assert MARKER not in text


# ------------------------------------------------------------------------- GPU

D, F_ = 512, 1024


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        kw = dict(bias=False, device=DEVICE, dtype=torch.bfloat16)
        self.gate, self.up, self.down = nn.Linear(D, F_, **kw), nn.Linear(D, F_, **kw), nn.Linear(F_, D, **kw)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def _linear(bias=True):
    return nn.Linear(D, F_, bias=bias, device=DEVICE, dtype=torch.bfloat16)


EPILOGUES = {
    # name: (module factory, forward, text the epilogue leaves inside the template kernel)
    "gelu": (_linear, lambda m, x: F.gelu(m(x)), "erf"),
    "silu": (_linear, lambda m, x: F.silu(m(x)), "libdevice.exp"),  # x / (1 + exp(-x))
    "residual": (lambda: nn.Linear(D, D, device=DEVICE, dtype=torch.bfloat16), lambda m, x: m(x) + x, "tmp"),
    "cast": (_linear, lambda m, x: m(x).float(), "tl.float32"),
    "swiglu": (SwiGLU, lambda m, x: m(x), "libdevice.exp"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(EPILOGUES))
def test_gpu_epilogue_fuses_into_the_template(name):
    make, forward, marker = EPILOGUES[name]
    module = make()
    x = torch.randn(2048, D, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        out, codes, records = compile_code(lambda x: forward(module, x), x)
        ref = forward(module, x)
    assert all(r.routed for r in records)
    fused = [src for src in kernels_of(codes).values() if MARKER in src]
    assert fused, "no plugin template kernel in the generated code"
    # The epilogue sits in a template kernel, after the K loop, before its store. (SwiGLU
    # has two templates, gate and up: the product fuses into one of them.)
    with_epilogue = [src for src in fused if re.search(re.escape(marker), src.split("tl.dot", 1)[-1])]
    assert with_epilogue, fused
    FileCheck().check(MARKER).check("tl.dot").check(marker).check("tl.store").run(with_epilogue[0])
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(512, 384, 256), (1000, 520, 333), (4096, 4096, 4096), (64, 4096, 4096)])
def test_gpu_template_and_eager_kernel_agree_bitwise(m, n, k):
    from inductor_mm_plugin.kernels.configs import MatmulConfig
    from inductor_mm_plugin.ops.matmul import _launch

    a = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16).t()
    out, codes, _ = compile_code(lambda a, b: torch.relu(a @ b), a, b)
    assert any(MARKER in src for src in kernels_of(codes).values())
    cfg = template.heuristic_config(m, n, k, 2)
    eager = torch.empty(m, n, device=DEVICE, dtype=torch.bfloat16)
    _launch(a, b, eager, config=MatmulConfig("ptr", cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m,
                                             cfg.num_warps, cfg.num_stages))  # fmt: skip
    assert torch.equal(out, torch.relu(eager)), (out - torch.relu(eager)).abs().max()


@pytest.mark.gpu
def test_gpu_training_through_the_template():
    module = SwiGLU()
    x = torch.randn(1024, D, device=DEVICE, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="inductor_mm_plugin")
    compiled(x).float().square().mean().backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    module(x).float().square().mean().backward()
    for g, p in zip(grads, module.parameters()):
        torch.testing.assert_close(g.float(), p.grad.float(), rtol=5e-2, atol=5e-2 * p.grad.abs().max().item())


@pytest.mark.gpu
def test_gpu_compete_picks_among_template_extern_and_aten():
    module = _linear()
    x = torch.randn(2048, D, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        out, codes, records = compile_code(lambda x: F.gelu(module(x)), x,
                                           options={"compete": True, "max_autotune": True})  # fmt: skip
        ref = F.gelu(module(x))
    assert all(r.routed for r in records)
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
