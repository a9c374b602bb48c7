"""The ``compete`` option, read off the typed RouteDecision the pass leaves on each plugin node
(inductor/decision.py): "auto" routes a CUDA site only where its measurement says the plugin
is faster (inductor/measure.py, stubbed here) and runs the extern kernel there; True lets
Inductor's autotuner choose among the plugin's choices and aten; False always runs the plugin."""

import logging
from unittest.mock import patch

import pytest
import torch
from conftest import DEVICE
from integration_utils import MLP, count_calls, run_compiled

from inductor_mm_plugin.inductor.decision import META_KEY, RouteDecision
from inductor_mm_plugin.inductor.options import PluginOptions
from inductor_mm_plugin.inductor.records import record_sites
from inductor_mm_plugin.inductor.routing import route_graph
from inductor_mm_plugin.inductor import measure
from inductor_mm_plugin.inductor.measure import Measurement
from inductor_mm_plugin.inductor.selection import RootInfo


@pytest.mark.skipif(DEVICE == "cuda", reason="on the CPU the interpreted plugin kernel always loses: a known winner")
def test_compete_lets_aten_win_where_faster():
    """On the CPU the interpreted plugin kernel is far slower than aten: aten must win."""
    with record_sites() as records:
        out, _, codes = run_compiled(MLP(), torch.randn(64, 16, device=DEVICE), backend="inductor_mm_plugin",
                                     options={"select": "all", "compete": True})  # fmt: skip
    assert sum(r.routed for r in records) == 2
    plugin, stock = count_calls(codes)
    assert (plugin, stock) == (0, 2), codes


def test_compete_compiles_with_tf32_set_through_the_new_api():
    """transformers' imports set TF32 through ``torch.backends.*.fp32_precision``, after which
    ``torch.get_float32_matmul_precision()`` raises (pytorch/pytorch#196728). Inductor's
    autotuning reads it as soon as it has two choices to time, so compete=True crashed the
    compile where stock (one choice) did not. Float32 operands, so the precision is read."""
    from conftest import default_tf32_flags, tf32_flags_restored

    model, x = MLP().to(DEVICE), torch.randn(64, 16, device=DEVICE)
    with tf32_flags_restored():
        default_tf32_flags()
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
            torch.get_float32_matmul_precision()  # the state this test is about
        with record_sites() as records:
            out, _, codes = run_compiled(model, x, backend="inductor_mm_plugin",
                                         options={"select": "all", "compete": True})  # fmt: skip
    assert sum(r.routed for r in records) == 2
    assert sum(count_calls(codes)) == 2, codes
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))


def test_the_whole_graph_compile_reads_the_matmul_precision():
    """Under max_autotune Inductor times the templates' choices in the scheduler, after the
    lowering's select_algorithm returned, so the backend's inner compile answers the getter
    for the whole compile of each graph (pytorch/pytorch#196728), and restores it after."""
    from conftest import default_tf32_flags, tf32_flags_restored

    from inductor_mm_plugin.inductor import backend, compat

    seen = []

    def compile_fx_inner(*args, **kwargs):
        seen.append(torch.get_float32_matmul_precision())  # as codecache.PersistentCache.lookup does
        return "compiled"

    legacy = torch.get_float32_matmul_precision
    with tf32_flags_restored(), patch.object(compat, "compile_fx_inner", compile_fx_inner):
        default_tf32_flags()
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        assert backend._inner_compile() == "compiled"
    assert seen == ["cuda=tf32,mkldnn=ieee"] and torch.get_float32_matmul_precision is legacy


# ------------------------------------------------------------------ on graphs of fake tensors


def _mm_graph(a_val, b_val, op=torch.ops.aten.mm.default):
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    a.meta["val"], b.meta["val"] = a_val, b_val
    mm = graph.call_function(op, (a, b))
    graph.output(mm)
    return graph, mm


def _fake(*shape, dtype=torch.bfloat16, device="cuda"):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.empty(*shape, dtype=dtype, device=device)


def _relu_after(graph, mm):
    """Give ``mm`` a pointwise user (an epilogue the template would fuse)."""
    (out,) = [n for n in graph.nodes if n.op == "output"]
    with graph.inserting_before(out):
        relu = graph.call_function(torch.ops.aten.relu.default, (mm,))
    out.args = (relu,)


@pytest.fixture
def measured_as(monkeypatch):
    """Measuring a site answers ``ratio`` (aten time / plugin time) in every round."""
    state = {"ratio": 1.2, "calls": 0, "behind": []}

    def fake(key, op, vals, alpha, beta, graphs):
        state["calls"] += 1
        return Measurement(10.0, 10.0 * state["ratio"], (state["ratio"],) * 5, graphs)

    monkeypatch.setattr(measure, "cached_or_measure", fake)
    monkeypatch.setattr(measure, "precompile", lambda sites: 0)  # nothing real to compile ahead
    monkeypatch.setattr(measure, "compile_routed", lambda sites: state["behind"].extend(sites) or len(sites))
    return state


# (device, pointwise user) per site; the CPU site is the interpreter's, never measured.
SITES = [("cuda", False), ("cuda", True), ("cpu", False), ("cpu", True)]


@pytest.mark.parametrize("compete,ratio,expect", [
    # per site: (routed, compete mark, epilogue)
    ("auto", 1.2, [(True, None, False), (True, None, False), (True, None, False), (True, None, True)]),
    ("auto", 0.9, [(False, None, None), (False, None, None), (True, None, False), (True, None, True)]),
    (True, 0.9, [(True, "all", False), (True, "all", True), (True, "all", False), (True, "all", True)]),
    (False, 0.9, [(True, None, False), (True, None, True), (True, None, False), (True, None, True)]),
], ids=str)  # fmt: skip
def test_compete_marks(measured_as, compete, ratio, expect):
    measured_as["ratio"] = ratio
    got = []
    for device, epilogue in SITES:
        graph, mm = _mm_graph(_fake(1024, 128, device=device), _fake(128, 512, device=device))
        if epilogue:
            _relu_after(graph, mm)
        with patch("inductor_mm_plugin.inductor.selection.interpreting", return_value=True):
            (record,) = route_graph(graph, PluginOptions(select="all", compete=compete), RootInfo())
        nodes = [n for n in graph.nodes if n.target == torch.ops.inductor_mm_plugin.mm.default]
        if not record.routed:
            assert not nodes and "stays on stock" in record.reason
            got.append((False, None, None))
            continue
        decision = nodes[0].meta[META_KEY]  # what the lowering reads
        assert isinstance(decision, RouteDecision) and record.compete is decision.compete
        got.append((True, decision.compete.value if decision.compete else None, decision.epilogue))
    assert got == expect
    assert measured_as["calls"] == (2 if compete == "auto" else 0)  # CUDA sites under "auto" only
    # The routed CUDA sites that run the extern kernel have it compiled in the background; a
    # template site (competing, or with an epilogue to fuse) is compiled by Inductor.
    extern = [e for (device, _), e in zip(SITES, expect) if device == "cuda" and e[0] and e[1:] == (None, False)]
    assert len(measured_as["behind"]) == len(extern)
    for op, vals, alpha, beta, graphs in measured_as["behind"]:
        assert op == "mm" and [tuple(v.shape) for v in vals] == [(1024, 128), (128, 512)] and vals[0].is_cuda


def test_compete_auto_keeps_symbolic_sizes_on_stock(measured_as):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    with mode:
        m = mode.shape_env.create_unbacked_symint()
        a = torch.empty(m, 128, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(128, 512, dtype=torch.bfloat16, device="cuda")
    graph, _ = _mm_graph(a, b)
    (record,) = route_graph(graph, PluginOptions(select="all"), RootInfo())
    assert not record.routed and "symbolic sizes" in record.reason and measured_as["calls"] == 0


def test_compete_auto_logs_the_measurement(measured_as, caplog):
    with caplog.at_level(logging.INFO, logger="inductor_mm_plugin.inductor.routing"):
        for ratio in (1.2, 0.9):
            measured_as["ratio"] = ratio
            graph, _ = _mm_graph(_fake(1024, 128), _fake(128, 512))
            route_graph(graph, PluginOptions(select="all"), RootInfo())
    assert "routed forward mm" in caplog.text and "(1.20x, 1.20-1.20 over 5 rounds)" in caplog.text
    assert "not routed forward mm" in caplog.text and "so it stays on stock" in caplog.text


def test_compete_option_values():
    assert PluginOptions().compete == "auto"
    assert PluginOptions(compete="auto").compete == "auto"
    with pytest.raises(TypeError, match="compete must be True, False or 'auto', got 'sometimes'"):
        PluginOptions(compete="sometimes")


def test_compete_auto_through_the_backend_on_the_cpu():
    # On the CPU (the interpreter) nothing is measured: "auto" routes the selected sites.
    with record_sites() as records:
        out, _, codes = run_compiled(MLP(), torch.randn(4, 16, device=DEVICE), backend="inductor_mm_plugin",
                                     options={"select": "all", "compete": "auto"})  # fmt: skip
    assert sum(r.routed for r in records) == 2
    if DEVICE == "cpu":
        assert count_calls(codes) == (2, 0)
