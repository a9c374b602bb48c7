"""``fuse_swiglu="auto"`` (the default) under ``compete="auto"``: a SwiGLU pair is fused where the fused
kernel timed faster than stock's form (cuBLAS's two matmuls, then one pointwise kernel), and
then runs that kernel, not the template (inductor/measure.py, inductor/routing.py).

CPU: the two timed arms compute the same thing (in the interpreter), and the routing pass on
graphs of fake CUDA tensors with the measurement stubbed (what is timed, what is fused, what
the lowering is told). GPU: the compiled model runs the extern kernel where the pair fused.
"""

from unittest.mock import patch

import pytest
import torch
from cases import randn
from conftest import DEVICE
from integration_utils import SWIGLU_MARKER, SwiGLU, fresh_inductor_cache
from torch._inductor.utils import run_and_get_code

from inductor_mm_plugin.inductor import measure
from inductor_mm_plugin.inductor.decision import META_KEY
from inductor_mm_plugin.inductor.measure import Measurement
from inductor_mm_plugin.inductor.options import PluginOptions
from inductor_mm_plugin.inductor.records import record_sites
from inductor_mm_plugin.inductor.routing import route_graph
from inductor_mm_plugin.inductor.selection import RootInfo
from inductor_mm_plugin.ops.reference import assert_mm_swiglu_close

aten = torch.ops.aten
MM_SWIGLU = torch.ops.inductor_mm_plugin.mm_swiglu.default
FUSED_CALL = "extern_kernels.inductor_mm_plugin_mm_swiglu("


# ------------------------------------------------------------------ the two timed arms


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,k,n", [(40, 32, 24), (17, 48, 40)])
def test_both_timed_arms_compute_the_swiglu(dtype, m, k, n):
    """What ``measure`` times as the plugin and as stock both write silu(x @ wg) * (x @ wu)
    into the buffer it is given (poisoned first), within the float64 bound: a timing of two
    different computations would decide nothing."""
    x = randn(m, k, dtype=dtype)
    w_gate, w_up = randn(n, k, dtype=dtype).t(), randn(n, k, dtype=dtype).t()  # nn.Linear weights
    for plugin in (True, False):
        out = torch.full((m, n), float("nan"), dtype=dtype, device=DEVICE)
        measure._call("swiglu", [x, w_gate, w_up], out, 1, 1, plugin=plugin)()
        assert_mm_swiglu_close(out, x, w_gate, w_up)


def test_swiglu_out_shape_and_signature():
    layouts = [((300, 64), (64, 1), 0), ((64, 96), (1, 64), 0), ((64, 96), (1, 64), 0)]
    assert measure._out_shape("swiglu", layouts) == (300, 96)
    assert measure._out_shape("mm", layouts[:2]) == (300, 96)
    x, w = torch.empty(300, 64), torch.empty(96, 64).t()
    assert measure.signature("swiglu", [x, w, w], 1, 1, True).split("|")[1] == "swiglu"


# ------------------------------------------------------------------ the decision


@pytest.fixture
def timed(monkeypatch):
    """Timing answers ``ratios[op]`` (stock time / plugin time) in every round; ``calls`` lists
    each timed op; ``precompiled`` each compile ahead: (ops timed before it, its sites' ops)."""
    state = {"ratios": {"swiglu": 1.2, "mm": 0.9}, "calls": [], "precompiled": []}

    def fake(key, op, vals, alpha, beta, graphs):
        state["calls"].append(op)
        ratio = state["ratios"][op]
        return Measurement(10.0, 10.0 * ratio, (ratio,) * 5, graphs)

    monkeypatch.setattr(measure, "cached_or_measure", fake)
    monkeypatch.setattr(measure, "precompile",
                        lambda sites: state["precompiled"].append((len(state["calls"]), [s[0] for s in sites])) or 0)  # fmt: skip
    monkeypatch.setattr(measure, "compile_routed", lambda sites: len(sites))
    return state


def _swiglu_graph(m, k=256, n=512, up_transposed=False, device="cuda"):
    """x (m, k) @ w_gate, x @ w_up (nn.Linear weights, (k, n) views) -> silu(gate) * up, its
    values fake bf16 tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        vals = {"x": torch.empty(m, k, dtype=torch.bfloat16, device=device)}
        vals["w_gate"] = torch.empty(n, k, dtype=torch.bfloat16, device=device).t()
        vals["w_up"] = torch.empty(k, n, dtype=torch.bfloat16, device=device) if up_transposed else \
            torch.empty(n, k, dtype=torch.bfloat16, device=device).t()  # fmt: skip
        result = vals["x"] @ vals["w_gate"]
    graph = torch.fx.Graph()
    x, wg, wu = (graph.placeholder(name) for name in vals)
    for node in (x, wg, wu):
        node.meta["val"] = vals[node.name]
    gate, up = graph.call_function(aten.mm.default, (x, wg)), graph.call_function(aten.mm.default, (x, wu))
    silu = graph.call_function(aten.silu.default, (gate,))
    product = graph.call_function(aten.mul.Tensor, (silu, up))
    for node in (gate, up, silu, product):
        node.meta["val"] = result
    graph.output(product)
    return graph


def _route(graph, **options):
    # The pattern is fused only where Triton compiles (not the interpreter the CPU tests run).
    with patch("inductor_mm_plugin.inductor.swiglu_pattern.interpreting", return_value=False):
        return route_graph(graph, PluginOptions(select="all", compete="auto", **options), RootInfo())


def _fused_nodes(graph):
    return [n for n in graph.nodes if n.target == MM_SWIGLU]


def test_a_pair_that_times_faster_is_fused_and_runs_the_extern_kernel(timed):
    graph = _swiglu_graph(1024)
    records = _route(graph)
    assert timed["calls"] == ["swiglu"]  # the pair, not its two matmuls
    (node,) = _fused_nodes(graph)
    decision = node.meta[META_KEY]  # what the lowering reads: the timed form, no template
    assert decision.timed and not decision.epilogue and decision.compete is None
    assert [r.fused for r in records] == ["swiglu", "swiglu"] and all(r.routed for r in records)
    assert all(r.measured is not None and r.measured.ratio == 1.2 for r in records)
    assert not [n for n in graph.nodes if n.target in (aten.mm.default, aten.mul.Tensor)]


@pytest.mark.parametrize("ratio", [1.2, 0.95])
def test_a_timed_pair_compiles_beside_its_sites_before_anything_is_timed(timed, ratio):
    """The pair's kernels and its two matmuls' compile side by side ahead (either may run:
    that is what the timing decides), once, before the first timing."""
    timed["ratios"]["swiglu"] = ratio
    _route(_swiglu_graph(1024))
    assert timed["precompiled"] == [(0, ["mm", "mm", "swiglu"])]


def test_a_pair_that_times_slower_keeps_its_two_matmuls_decided_alone(timed, caplog):
    timed["ratios"]["swiglu"] = 0.95
    graph = _swiglu_graph(1024)
    with caplog.at_level("INFO", logger="inductor_mm_plugin.inductor.routing"):
        records = _route(graph)
    assert timed["calls"] == ["swiglu", "mm", "mm"]
    assert not _fused_nodes(graph) and all(r.fused is None and not r.routed for r in records)
    assert "not fused" in caplog.text and "not faster by 1.01x in every round" in caplog.text


def test_a_faster_pair_fuses_where_its_matmuls_alone_would_route(timed):
    timed["ratios"]["mm"] = 1.3  # both arms win: the pair's own timing decides the fusion
    graph = _swiglu_graph(2048)
    _route(graph)
    assert timed["calls"] == ["swiglu"] and len(_fused_nodes(graph)) == 1


@pytest.mark.parametrize("m", [1, 16, measure.SWIGLU_LOSES_UP_TO_M])
def test_pairs_of_few_rows_are_not_timed(timed, m):
    graph = _swiglu_graph(m)
    _route(graph)
    assert timed["calls"] == ["mm", "mm"] and not _fused_nodes(graph)


def test_weights_in_two_storage_orders_are_not_timed(timed):
    graph = _swiglu_graph(1024, up_transposed=True)
    _route(graph)
    assert timed["calls"] == ["mm", "mm"] and not _fused_nodes(graph)


@pytest.mark.parametrize("option", [False])
def test_other_options_time_no_pair_under_compete_auto(timed, option):
    graph = _swiglu_graph(1024)
    _route(graph, fuse_swiglu=option)
    assert timed["calls"] == ["mm", "mm"] and not _fused_nodes(graph)
    assert timed["precompiled"] == [(0, ["mm", "mm"])]


def _plan_from(records, tmp_path, won: bool):
    """A routing plan of these sites: each routed and marked fused where ``won``."""
    from inductor_mm_plugin.inductor import plan_file

    keys = [plan_file.site_key(r.site) for r in records]
    path = tmp_path / "plan.json"
    plan_file.write(path, dict.fromkeys(keys, won), model="SwiGLU", fused=dict.fromkeys(keys, "swiglu") if won else {})
    return str(path)


def test_a_plan_fuses_the_pair_it_won_fused_without_timing(timed, tmp_path):
    """Under a plan that has the pair winning fused, the pair is fused again, as the extern
    kernel (the timed form), and nothing is timed."""
    plan = _plan_from(_route(_swiglu_graph(1024)), tmp_path, won=True)
    timed["calls"].clear()
    graph = _swiglu_graph(1024)
    records = _route(graph, plan=plan)
    (node,) = _fused_nodes(graph)
    decision = node.meta[META_KEY]
    assert timed["calls"] == [] and decision.timed and not decision.epilogue and decision.compete is None
    assert [(r.fused, r.routed) for r in records] == [("swiglu", True)] * 2


def test_a_plan_keeps_a_pair_that_lost_on_stock(timed, tmp_path):
    plan = _plan_from(_route(_swiglu_graph(1024)), tmp_path, won=False)
    graph = _swiglu_graph(1024)
    records = _route(graph, plan=plan)
    assert not _fused_nodes(graph) and all(r.fused is None and not r.routed for r in records)
    assert all("routing plan" in r.reason for r in records)


def test_a_plan_pair_left_unfused_by_the_options_stays_on_stock(timed, tmp_path):
    """fuse_swiglu=False under a plan whose pair won fused: its sites' plain kernels were never
    what won, so they stay on stock, and the reason says why."""
    plan = _plan_from(_route(_swiglu_graph(1024)), tmp_path, won=True)
    graph = _swiglu_graph(1024)
    records = _route(graph, plan=plan, fuse_swiglu=False)
    assert not _fused_nodes(graph) and not any(r.routed for r in records)
    assert all("winning fused with its SwiGLU pair" in r.reason for r in records)


def test_outside_compete_auto_auto_fuses_untimed_where_the_template_runs(timed):
    """Under compete=False nothing is timed: "auto" fuses where the template runs."""
    graph = _swiglu_graph(1024)
    with patch("inductor_mm_plugin.inductor.swiglu_pattern.interpreting", return_value=False):
        route_graph(graph, PluginOptions(select="all", compete=False), RootInfo())
    (node,) = _fused_nodes(graph)
    assert timed["calls"] == [] and not node.meta[META_KEY].timed and node.meta[META_KEY].epilogue


def test_on_the_cpu_nothing_is_timed(timed):
    """The interpreter's sites are never timed: the pair stays as "auto" leaves it, unfused."""
    with fresh_inductor_cache(), record_sites() as records, torch.no_grad():
        torch._dynamo.reset()
        module, x = SwiGLU(), randn(24, 32, dtype=torch.float32)
        compiled = torch.compile(module, backend="inductor_mm_plugin")
        out, codes = run_and_get_code(compiled, x)
        torch.testing.assert_close(out, module(x))
    assert timed["calls"] == [] and FUSED_CALL not in "\n".join(codes)
    assert records and all(r.fused is None for r in records)


# -------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_a_pair_fused_by_measurement_runs_the_extern_kernel(timed):
    """Where the pair timed faster, the compiled graph calls mm_swiglu's extern kernel (the form
    that was timed) and no SwiGLU template; the model's output matches eager's."""
    module = SwiGLU(d=256, f=512, dtype=torch.bfloat16)
    x = randn(1024, 256, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad(), fresh_inductor_cache(), record_sites() as records:
        compiled = torch.compile(module, backend="inductor_mm_plugin")
        out, codes = run_and_get_code(compiled, x)
    code = "\n".join(codes)
    assert timed["calls"][0] == "swiglu" and code.count(FUSED_CALL) == 1 and SWIGLU_MARKER not in code, code
    assert sorted(r.fused or "-" for r in records) == ["-", "swiglu", "swiglu"]
    with torch.no_grad():
        torch.testing.assert_close(out.float(), module(x).float(), rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
def test_gpu_measured_swiglu_times_on_the_gpu():
    """Unstubbed: the pair is timed in GPU time and the graph runs what the decision says."""
    module = SwiGLU(d=1024, f=4096, dtype=torch.bfloat16)
    x = randn(2048, 1024, dtype=torch.bfloat16)
    measure.clear()
    torch._dynamo.reset()
    with torch.no_grad(), fresh_inductor_cache(), record_sites() as records:
        compiled = torch.compile(module, backend="inductor_mm_plugin")
        out, codes = run_and_get_code(compiled, x)
    code = "\n".join(codes)
    fused = [r for r in records if r.fused == "swiglu"]
    assert code.count(FUSED_CALL) == (1 if fused else 0) and SWIGLU_MARKER not in code, code
    assert all(r.measured is not None and r.measured.faster for r in fused)
    torch.testing.assert_close(out.float(), module(x).float(), rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
def test_gpu_a_plan_written_by_compare_runs_the_pair_as_it_won(tmp_path):
    """compare's plan of a SwiGLU MLP, applied to the same model: a pair the plan marks as
    won fused runs mm_swiglu's extern kernel, else neither of its sites is fused."""
    import inductor_mm_plugin
    from inductor_mm_plugin.inductor import plan_file

    module = SwiGLU(d=1024, f=4096, dtype=torch.bfloat16)
    x = randn(2048, 1024, dtype=torch.bfloat16)
    path = tmp_path / "plan.json"
    inductor_mm_plugin.compare(module, (x,), write_plan=path)
    plan = plan_file.load(path)
    torch._dynamo.reset()
    with torch.no_grad(), fresh_inductor_cache(), record_sites() as records:
        compiled = torch.compile(module, backend="inductor_mm_plugin", options={"plan": str(path)})
        out, codes = run_and_get_code(compiled, x)
    code = "\n".join(codes)
    won_fused = [r for r in records if plan.fused_swiglu(r.site)]
    assert [r.site for r in records if r.fused == "swiglu"] == [r.site for r in won_fused]
    assert code.count(FUSED_CALL) == (1 if won_fused else 0) and SWIGLU_MARKER not in code, code
    torch.testing.assert_close(out.float(), module(x).float(), rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
def test_gpu_a_precompiled_pair_is_timed_without_compiling_again(tmp_path, monkeypatch, fresh_state):
    """``measure.precompile`` compiles and loads both arms' Triton kernels of a pair it will time
    (the fused kernel, stock's silu*mul pass): timing the pair afterwards compiles nothing."""
    from inductor_mm_plugin.kernels.silu_mul import _silu_mul_kernel
    from inductor_mm_plugin.kernels.swiglu_tma import _swiglu_kernel_tma

    def compiled():
        return [k for fn in (_swiglu_kernel_tma, _silu_mul_kernel) for c in fn.device_caches.values() for k in c[0].values()]

    monkeypatch.setenv("INDUCTOR_MM_PLUGIN_CACHE_DIR", str(tmp_path))
    x = randn(1000, 384, dtype=torch.bfloat16)
    w_gate, w_up = (randn(768, 384, dtype=torch.bfloat16).t() for _ in range(2))
    sites = [("swiglu", [x, w_gate, w_up], 1, 1, True), ("mm", [x, w_gate], 1, 1, True)]
    with measure.compat.inductor_config.patch(compile_threads=4):
        assert measure.precompile(sites) == 2
    kernels = compiled()  # (kernels of one specialization an earlier test compiled count once)
    assert kernels and all(k.module is not None for k in kernels)  # compiled and loaded
    fused, reason, measured = measure.decide_swiglu([x, w_gate, w_up], True)
    assert measured is not None and measured.plugin_us > 0, reason
    assert len(compiled()) == len(kernels)
