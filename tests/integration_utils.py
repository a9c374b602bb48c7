"""Helpers for compiled-graph tests: compile, run, read the generated code, count calls."""

import contextlib
import re

import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import DEVICE
from torch._inductor.utils import fresh_cache as fresh_inductor_cache
from torch._inductor.utils import run_and_get_code

PLUGIN_CALL = re.compile(r"extern_kernels\.inductor_mm_plugin_(mm|addmm|bmm|mm_swiglu|mm_activation)\(")
# Stock Inductor's matmuls on CPU/GPU: aten extern kernels (or its own bias_addmm).
STOCK_CALL = re.compile(r"extern_kernels\.(mm|addmm|bmm|bias_addmm)\(")


# The comment every plugin template kernel carries (inductor/templates/__init__.py, prologue),
# and the SwiGLU template's addition to it (inductor/templates/tma.py).
TEMPLATE_MARKER = "inductor_mm_plugin template"
SWIGLU_MARKER = "two weights (SwiGLU)"


def kernels_of(codes):
    """{kernel name: source} of every Triton kernel in the generated code."""
    found = {}
    for code in codes:
        for name, src in re.findall(r"async_compile\.triton\('(\w+)', '''(.*?)'''", code, flags=re.S):
            found[name] = src
    return found


def count_calls(codes):
    """(plugin calls, stock aten matmul calls) over all generated code. Plugin calls are the
    extern plugin kernels plus the launches of plugin template kernels (on CUDA a site with
    a pointwise user lowers to a template)."""
    text = "\n".join(codes)
    plugin = len(PLUGIN_CALL.findall(text))
    for name, src in kernels_of(codes).items():
        if TEMPLATE_MARKER in src:
            plugin += len(re.findall(rf"\b{name}\.run\(", text))
    return plugin, len(STOCK_CALL.findall(text))


def no_graph_caches():
    """Inductor's FX graph and AOT autograd caches off, so the routing pass runs on every
    graph, while the compiled C++ kernels stay cached (a fresh cache directory, as
    ``run_compiled`` uses by default, recompiles each of them, about 2 s apiece on the CPU).
    Use with ``run_compiled(..., fresh_cache=False)``."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


def run_compiled(model, *inputs, train=False, fresh_cache=True, **compile_kwargs):
    """Compile, run (forward, and backward when train), return (output, grads, codes).

    A fresh Inductor cache by default: a cache hit skips the routing pass, and these tests
    read what the pass decided. tests/test_cache.py tests the cache itself.

    The plugin backend gets ``compete=False`` unless the test sets ``compete`` (or a mode):
    these tests count which sites run the plugin, and under the default ``compete="auto"``
    a CUDA site with nothing to fuse runs whichever of the plugin's kernel and aten's the
    autotuner times faster. The tests of "auto" set it themselves.
    """
    if compile_kwargs.get("backend") == "inductor_mm_plugin" and "mode" not in compile_kwargs:
        compile_kwargs["options"] = {"compete": False, **(compile_kwargs.get("options") or {})}
    if fresh_cache:
        with fresh_inductor_cache():
            return run_compiled(model, *inputs, train=train, fresh_cache=False, **compile_kwargs)
    torch._dynamo.reset()
    compiled = torch.compile(model, **compile_kwargs)

    def step():
        out = compiled(*inputs)
        grads = None
        if train:
            out.float().square().sum().backward()
            grads = [p.grad.clone() for p in model.parameters()]
        return out, grads

    (out, grads), codes = run_and_get_code(step)
    return out, grads, codes


class MLP(nn.Module):
    def __init__(self, d=16, f=32, dtype=torch.float32):
        super().__init__()
        self.up = nn.Linear(d, f, device=DEVICE, dtype=dtype)
        self.down = nn.Linear(f, d, device=DEVICE, dtype=dtype)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))``, bias-free. ``form`` writes the SiLU product as the
    routing pass must recognise it: "silu" (F.silu), "sigmoid" (g * sigmoid(g)), "up_first"
    (up(x) * silu(g))."""

    def __init__(self, d=32, f=48, dtype=torch.float32, form="silu"):
        super().__init__()
        kw = dict(bias=False, device=DEVICE, dtype=dtype)
        self.gate, self.up, self.down = nn.Linear(d, f, **kw), nn.Linear(d, f, **kw), nn.Linear(f, d, **kw)
        self.form = form

    def forward(self, x):
        g = self.gate(x)
        act = g * torch.sigmoid(g) if self.form == "sigmoid" else F.silu(g)
        return self.down(act * self.up(x)) if self.form != "up_first" else self.down(self.up(x) * F.silu(g))


class Attention(nn.Module):
    def __init__(self, d=16, dtype=torch.float32):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, device=DEVICE, dtype=dtype)
        self.proj = nn.Linear(d, d, device=DEVICE, dtype=dtype)

    def forward(self, x):  # x: (batch, seq, d)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = torch.bmm(q, k.transpose(1, 2)) * q.shape[-1] ** -0.5
        return self.proj(torch.bmm(scores.softmax(-1), v))


class Block(nn.Module):
    def __init__(self, d=16, dtype=torch.float32):
        super().__init__()
        self.attn = Attention(d, dtype)
        self.mlp = MLP(d, 2 * d, dtype)

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)
