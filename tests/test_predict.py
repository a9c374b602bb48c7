"""inductor/predict.py: the matmul sites predicted from Dynamo's graph, before AOTAutograd, are
the routing pass's own sites (same op, sizes, strides, offsets, dtype: one signature), forward
and backward; and the backend starts compiling them only where the routing pass would time
or route them."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import DEVICE

from inductor_mm_plugin.inductor import compat, measure, predict, routing


class Block(nn.Module):
    """Linears with and without bias on 3-D input, a product with a bare weight, attention's
    two batched products on transposed views."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 128)
        self.down = nn.Linear(128, 64, bias=False)
        self.proj = nn.Parameter(torch.randn(64, 32) / 8)

    def forward(self, x):
        y = self.down(F.gelu(self.up(x)))
        q = y.view(2, 8, 4, 16).transpose(1, 2)
        att = torch.softmax(q @ q.transpose(-1, -2), dim=-1) @ q
        return y @ self.proj, att


def _signatures(sites):
    return {measure.signature(op, vals, alpha, beta, graphs) for op, vals, alpha, beta, graphs in sites}


@pytest.fixture
def sites_seen(monkeypatch):
    """What the backend predicted, and the sites the routing pass measured (its CPU sites
    counted as CUDA ones; nothing timed, nothing routed)."""
    seen = {"predicted": [], "routed_pass": []}
    torch._dynamo.reset()
    monkeypatch.setattr(measure, "compile_predicted", lambda sites: seen["predicted"].extend(sites) or 0)
    monkeypatch.setattr(routing, "_on_cuda", lambda node: True)
    monkeypatch.setattr(measure, "precompile", lambda sites: seen["routed_pass"].extend(sites) or 0)
    monkeypatch.setattr(measure, "decide", lambda *site: (False, "not measured in this test", None))
    monkeypatch.setattr(measure, "decide_activation", lambda *site: (False, "not measured in this test", None))
    monkeypatch.setattr(measure, "compile_routed", lambda sites: 0)
    with compat.fresh_inductor_cache():  # the routing pass runs: no graph from Inductor's cache
        yield seen


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_predicted_sites_are_the_routing_passes_sites(sites_seen, train):
    torch.manual_seed(0)
    model, x = Block().to(DEVICE), torch.randn(2, 8, 64, device=DEVICE)
    compiled = torch.compile(model, backend="inductor_mm_plugin", options={"select": "all"})
    with torch.set_grad_enabled(train):
        out, att = compiled(x)
        if train:
            (out.sum() + att.sum()).backward()
    predicted, actual = _signatures(sites_seen["predicted"]), _signatures(sites_seen["routed_pass"])
    assert None not in predicted and predicted <= actual, predicted - actual  # nothing compiled in vain
    # Every linear and weight product predicted, forward and backward: only the backward's
    # batched products (softmax's and the transposes' gradients) are not, nor a Linear's form
    # fused with its GELU (mm_activation), which the pass compiles beside the sites it times.
    missed = [s for s in actual - predicted if s.split("|")[1] not in ("bmm", measure.ACTIVATION_OP + "gelu")]
    assert not missed, missed
    assert len(predicted) == (10 if train else 5)


def test_symbolic_sizes_are_not_predicted(sites_seen):
    """With dynamic shapes the linears' rows are symbolic: not predicted (an operation on them
    could add a guard to Dynamo's shape env). The attention products' view fixes their sizes."""
    compiled = torch.compile(Block().to(DEVICE), backend="inductor_mm_plugin", options={"select": "all"}, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(2, 8, 64, device=DEVICE))
    assert [site[0] for site in sites_seen["predicted"]] == ["bmm", "bmm"]
    assert _signatures(sites_seen["predicted"]) <= _signatures(sites_seen["routed_pass"])


@pytest.mark.parametrize("options", [{"select": "opted_in"}, {"compete": False}, {"compete": True}])
def test_nothing_is_predicted_where_the_routing_pass_would_not_measure(sites_seen, options):
    with torch.no_grad():
        torch.compile(Block().to(DEVICE), backend="inductor_mm_plugin", options=options)(torch.randn(2, 8, 64, device=DEVICE))
    assert sites_seen["predicted"] == []


def test_vectors_and_other_calls_are_not_predicted():
    seen = []

    def backend(gm, example_inputs):
        seen.extend(predict.predicted_sites(gm, graphs=False))
        return gm.forward

    w, v = torch.randn(32, 16), torch.randn(16)
    torch._dynamo.reset()
    torch.compile(lambda a: (F.linear(a, w) + 1, w @ a, torch.dot(a, a)), backend=backend)(v)
    assert seen == []
    torch._dynamo.reset()
    bias = torch.randn(16)
    torch.compile(lambda a: torch.addmm(bias, a.t(), w, beta=2), backend=backend)(torch.randn(32, 16))
    assert [(op, alpha, beta) for op, vals, alpha, beta, graphs in seen] == [("addmm", 1, 2)]


def test_compile_predicted_skips_what_stays_on_stock(monkeypatch):
    """Sure losers and sites whose cached decision keeps stock are not compiled; sure winners,
    routed decisions and sites still to be timed are."""
    started = []
    monkeypatch.setattr(measure, "_on_cuda", lambda vals: True)
    monkeypatch.setattr("inductor_mm_plugin.runtime.compile_behind",
                        lambda calls, workers: started.extend(c[0].shape[0] for c in calls) or len(calls))  # fmt: skip
    verdicts = {1: "loses", 2: "wins"}
    monkeypatch.setattr(measure, "_sure", lambda op, vals, alpha, beta, graphs: (
        type("Sure", (), {"verdict": verdicts[vals[0].shape[0]]})() if vals[0].shape[0] in verdicts else None))
    faster = {3: True, 4: False}
    monkeypatch.setattr(measure, "_cached", lambda key, vals, graphs: (
        type("Hit", (), {"faster": faster[vals[0].shape[0]]})() if vals[0].shape[0] in faster else None))
    sites = [("mm", [torch.randn(m, 16), torch.randn(16, 8)], 1, 1, True) for m in (1, 2, 3, 4, 5)]
    sites.append(("mm", [torch.randn(6, 16, dtype=torch.float64), torch.randn(16, 8, dtype=torch.float64)], 1, 1, True))
    assert measure.compile_predicted(sites) == 3
    assert sorted(started) == [2, 3, 5]


@pytest.mark.gpu
def test_on_cuda_the_routing_pass_compiles_no_predicted_kernel_again(monkeypatch, tmp_path, fresh_state):
    """A cold compile (no cached decision; every site timed) of an MLP, forward and backward:
    each kernel compiled ahead is compiled by a background thread started at the backend's
    entry or after routing, none by the routing pass's own threads, and the model is right."""
    import threading

    from inductor_mm_plugin.runtime import ahead

    monkeypatch.setenv("INDUCTOR_MM_PLUGIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(measure, "_sure", lambda *site: None)  # every site timed
    threads, real = [], ahead._compile_call
    monkeypatch.setattr(ahead, "_compile_call", lambda *call: threads.append(threading.current_thread().name) or real(*call))
    model = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 512)).to("cuda", torch.bfloat16)
    x = torch.randn(384, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    with compat.fresh_inductor_cache():
        out = torch.compile(model, backend="inductor_mm_plugin")(x)
        out.float().square().sum().backward()
    assert threads and all(name.startswith("inductor_mm_plugin-behind") for name in threads), threads
    ref = model.double()(x.double())
    torch.testing.assert_close(out.double(), ref, atol=5e-2, rtol=5e-2)


def test_compile_ahead_end_to_end_on_the_cpu(monkeypatch, fresh_state):
    """The whole path with the interpreter standing in for the GPU (CPU sites counted as CUDA
    ones, every site routed untimed): the predicted kernels compile in background threads,
    the routing pass and the compiled graph's first calls wait for them and compile none
    themselves, forward and backward, and the results are right."""
    import threading

    from inductor_mm_plugin.runtime import ahead

    threads, real = [], ahead._compile_call
    monkeypatch.setattr(ahead, "_compile_call", lambda *call: threads.append(threading.current_thread().name) or real(*call))
    monkeypatch.setattr(measure, "_on_cuda", lambda vals: True)
    monkeypatch.setattr(routing, "_on_cuda", lambda node: True)
    monkeypatch.setattr(measure, "_sure", lambda *site: None)
    monkeypatch.setattr(measure, "_cached", lambda *site: None)
    monkeypatch.setattr(measure, "decide", lambda *site: (True, "", None))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16)).to(DEVICE)
    x = torch.randn(24, 32, device=DEVICE, requires_grad=True)
    with compat.fresh_inductor_cache(), compat.inductor_config.patch(compile_threads=4):
        out = torch.compile(model, backend="inductor_mm_plugin", options={"select": "all"})(x)
        out.square().sum().backward()
    assert threads and all(name.startswith("inductor_mm_plugin-behind") for name in threads), threads
    assert not ahead.pending()
    grad = x.grad.clone()
    x.grad = None
    ref = model(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad, x.grad, atol=1e-4, rtol=1e-4)


def test_the_backend_returns_with_no_kernel_compiling(monkeypatch):
    """A background compile the compiled graph never waits for (a wrong prediction, a backward
    never run) is waited for before the backend returns: none is left to meet a CUDA graph
    the caller captures next."""
    import time

    from inductor_mm_plugin.runtime import ahead

    done = []

    def slow(*call):
        time.sleep(0.5)
        done.append(time.perf_counter())
        return True

    def compile_fx(gm, example_inputs, **kwargs):  # Inductor's compile, instant; a kernel still compiling
        ahead.compile_behind([(torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4))], workers=1)
        return gm.forward

    monkeypatch.setattr(ahead, "_compile_call", slow)
    monkeypatch.setattr(compat, "compile_fx", compile_fx)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(nn.Linear(8, 8).to(DEVICE), backend="inductor_mm_plugin")(torch.randn(2, 8, device=DEVICE))
    returned = time.perf_counter()
    assert done and done[0] <= returned and not ahead.pending()


def test_a_failing_prediction_leaves_the_compile_alone(monkeypatch):
    monkeypatch.setattr(predict, "predicted_sites", lambda gm, graphs: 1 / 0)
    torch._dynamo.reset()
    model, x = nn.Linear(8, 8).to(DEVICE), torch.randn(2, 8, device=DEVICE)
    with torch.no_grad():
        out = torch.compile(model, backend="inductor_mm_plugin")(x)
        torch.testing.assert_close(out, model(x))
