"""GPUs without TMA (before sm_90, e.g. Ampere's sm_80/sm_86) take the pointer kernel and the
pointer template. On the CPU the capability is faked through the plugin's own lookup
(``runtime.device.device_capability``); the interpreter runs either kernel."""

import types

import pytest
import torch
from cases import operand
from conftest import DEVICE

from inductor_mm_plugin import runtime
from inductor_mm_plugin.inductor.templates import tma as tma_template
from inductor_mm_plugin.runtime import device, layout
from inductor_mm_plugin.ops.reference import assert_matmul_close

AMPERE, HOPPER = (8, 0), (9, 0)


@pytest.fixture
def capability(monkeypatch):
    """Set the capability every device reports (for the test); plans are made afresh."""

    def fake(value):
        monkeypatch.setattr(device, "device_capability", lambda dev: value)
        runtime.clear_plans()

    yield fake
    runtime.clear_plans()


@pytest.mark.parametrize("cap,kernel", [(AMPERE, "ptr"), ((8, 6), "ptr"), (HOPPER, "tma"), ((10, 0), "tma")])
def test_the_launcher_takes_tma_only_from_sm_90(capability, cap, kernel):
    capability(cap)
    M, N, K = 96, 80, 64  # TMA-readable: 16-byte aligned rows
    a, b = operand(M, K, torch.float16), operand(K, N, torch.float16, transposed=True)
    out = torch.empty(M, N, dtype=torch.float16, device=DEVICE)
    plan = runtime.launch(a, b, out)
    assert plan.cfg.kernel == kernel
    assert_matmul_close(out, a, b)
    assert (layout.tma_layout(a, b, out) is None) == (kernel == "ptr")


def test_pointer_kernel_reason_names_the_gpu(capability):
    a, b = operand(64, 64, torch.bfloat16), operand(64, 64, torch.bfloat16)
    capability((8, 6))
    assert runtime.pointer_kernel_reason(a, b) == "the GPU (sm_86) has no TMA (sm_90 and later): the pointer kernel"
    capability(HOPPER)
    assert runtime.pointer_kernel_reason(a, b) is None


def test_the_capability_is_looked_up_once_per_device(monkeypatch, fresh_state):
    calls = []

    def get_device_capability(index):
        calls.append(index)
        return (8, 0) if index == 1 else (9, 0)

    monkeypatch.setattr(torch.cuda, "get_device_capability", get_device_capability)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for _ in range(3):
        assert device.device_capability(torch.device("cuda", 0)) == (9, 0)
        assert device.device_capability(torch.device("cuda")) == (9, 0)  # the current device
        assert device.device_capability(torch.device("cuda", 1)) == (8, 0)
    assert calls == [0, 1]
    assert device.device_capability(torch.device("cpu")) is None and device.no_tma_reason(torch.device("cpu")) is None


class _Node:
    """An IR operand as templates.tma.applies reads it: static sizes and strides."""

    def __init__(self, size, stride):
        self.size, self.stride = size, stride

    def get_size(self):
        return self.size

    def get_stride(self):
        return self.stride


def test_the_tma_templates_need_sm_90(capability, monkeypatch):
    monkeypatch.setattr(tma_template.compat, "can_use_tma", lambda *nodes: True)  # aligned (Inductor's check)
    layout = types.SimpleNamespace(device=torch.device("cuda", 0), dtype=torch.bfloat16)
    a, b = _Node([256, 128], [128, 1]), _Node([128, 512], [1, 128])
    capability(HOPPER)
    assert tma_template.applies(layout, a, b)
    capability(AMPERE)
    assert not tma_template.applies(layout, a, b)


@pytest.mark.gpu
def test_gpu_faked_ampere_takes_the_pointer_kernel_and_template(capability):
    from integration_utils import TEMPLATE_MARKER, kernels_of, run_compiled

    capability(AMPERE)
    a, b = operand(512, 256, torch.bfloat16), operand(256, 384, torch.bfloat16, transposed=True)
    out = torch.empty(512, 384, dtype=torch.bfloat16, device="cuda")
    assert runtime.launch(a, b, out).cfg.kernel == "ptr"
    assert_matmul_close(out, a, b)

    model = torch.nn.Sequential(torch.nn.Linear(256, 384, device="cuda", dtype=torch.bfloat16), torch.nn.GELU())
    x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        got, _, codes = run_compiled(model, x, backend="inductor_mm_plugin", options={"select": "all"})
    sources = [src for src in kernels_of(codes).values() if TEMPLATE_MARKER in src]
    assert sources and not any("persistent TMA kernel" in src for src in sources), "expected the pointer template"
    torch.testing.assert_close(got, model(x), rtol=2e-2, atol=2e-2)
