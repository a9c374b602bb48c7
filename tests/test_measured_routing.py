"""compete="auto": a CUDA site is routed only where the plugin's kernel measured faster, and a
routing plan is obeyed exactly. On the CPU the measurement is stubbed (the interpreter's times
mean nothing) and the site treated as a CUDA one; the generated code proves what ran where."""

import importlib
import json

import pytest
import torch
from conftest import DEVICE
from integration_utils import MLP, run_compiled
from test_routing import check_code_matches

import inductor_mm_plugin
from inductor_mm_plugin.comparison.timing import AB
from inductor_mm_plugin.comparison.report import Timing
from inductor_mm_plugin.inductor import measure, plan_file, routing
from inductor_mm_plugin.inductor.measure import Measurement
from inductor_mm_plugin.inductor.records import record_sites


def x_of(*shape):
    return torch.randn(*shape, device=DEVICE)


@pytest.fixture
def as_if_cuda(monkeypatch):
    """Sites count as CUDA sites, and measuring one answers from ``times`` (module -> (plugin
    us, aten us) per round), recording which sites were measured."""
    measured = []
    times = {}

    def fake(key, op, vals, alpha, beta, graphs):
        plugin_us, aten_us = times[_module_of(vals)]
        measured.append(key)
        return Measurement(plugin_us, aten_us, tuple(aten_us / plugin_us for _ in range(5)), graphs)

    def _module_of(vals):  # the Linear's in/out features tell the two sites apart
        return "up" if vals[-1].shape[-1] == 32 else "down"

    monkeypatch.setattr(routing, "_on_cuda", lambda node: True)
    monkeypatch.setattr(measure, "cached_or_measure", fake)
    return times, measured


def test_auto_routes_only_the_site_measured_faster(as_if_cuda):
    times, measured = as_if_cuda
    times.update(up=(8.0, 10.0), down=(10.0, 9.0))  # up: plugin faster; down: aten faster
    with torch.no_grad(), record_sites() as records:
        _, _, codes = run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin",
                                   options={"select": "all", "compete": "auto"})  # fmt: skip
    by_module = {r.site.module: r for r in records}
    assert by_module["up"].routed and not by_module["down"].routed
    assert "stays on stock" in by_module["down"].reason and "GPU time 10.0 us against aten's 9.0 us" in by_module["down"].reason
    assert by_module["up"].measured.ratio == pytest.approx(1.25)
    assert len(measured) == 2
    check_code_matches(records, codes)


def test_faster_needs_every_round_the_margin_and_the_saving():
    assert Measurement(10.0, 10.5, (1.05, 1.04, 1.06, 1.05, 1.05), True).faster
    assert not Measurement(10.0, 10.1, (1.01,) * 5, True).faster  # below the 2% margin
    assert not Measurement(10.0, 10.5, (1.05, 1.04, 0.99, 1.05, 1.05), True).faster  # one round slower
    # won in the median, but one round within the model's noise (under ROUND_MARGIN)
    assert not Measurement(10.0, 10.5, (1.05, 1.04, 1.005, 1.05, 1.05), True).faster
    assert Measurement(10.0, 10.5, (1.05, 1.04, measure.ROUND_MARGIN, 1.05, 1.05), True).faster
    # 10% faster in every round, but 0.3 us a call: under MIN_SAVING_US, a model cannot see it
    assert not Measurement(3.0, 3.3, (1.1,) * 5, True).faster
    assert Measurement(3.0, 3.0 + measure.MIN_SAVING_US, (1.17,) * 5, True).faster
    assert Measurement.from_json(Measurement(1.0, 2.0, (2.0,), False).to_json()) == Measurement(1.0, 2.0, (2.0,), False)


def test_signature_covers_layout_and_form_and_skips_symbolic_sizes():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    key = measure.signature("mm", [a, b], 1, 1, graphs=True)
    assert key != measure.signature("mm", [a, b.t().contiguous().t()], 1, 1, graphs=True)  # layout
    assert key != measure.signature("mm", [a, b], 1, 1, graphs=False)  # timed form
    assert key != measure.signature("mm", [a[:, 1:9], b[1:9]], 1, 1, graphs=True)  # alignment
    symbolic = torch.empty(0).new_empty((torch.SymInt.__new__(torch.SymInt) if False else 8, 16))
    assert measure.signature("mm", [symbolic, b], 1, 1, True) is not None

    class Symbolic:  # what a fake tensor with a dynamic size reports
        shape, dtype = ("s0", 16), torch.float32

        def stride(self):
            return (16, 1)

        def storage_offset(self):
            return 0

    assert measure.signature("mm", [Symbolic(), b], 1, 1, True) is None


def test_ab_verdict_from_the_rounds_spread():
    t = Timing(1.0, 1.0, 1.0)
    assert AB(t, t, [1.05, 1.04, 1.06, 1.03, 1.05], True).verdict == "faster"
    assert AB(t, t, [0.95, 0.97, 0.96, 0.94, 0.96], True).verdict == "slower"
    assert AB(t, t, [1.05, 0.97, 1.02, 0.99, 1.01], True).verdict == "within noise"
    assert AB(t, t, [1.0, 1.2, 1.1], True).speedup == pytest.approx(1.1)


# ------------------------------------------------------------------------------ plans


def _write(path, routes, **setup):
    data = {"format": plan_file.FORMAT, "version": plan_file.FORMAT_VERSION, "model": "MLP",
            "setup": {**plan_file.setup(), **setup}, "sites": [{"site": k, "route": v} for k, v in routes.items()]}
    path.write_text(json.dumps(data))
    return str(path)


def test_plan_is_obeyed_site_by_site(tmp_path):
    # The first compile records the sites' keys; the plan then routes only "up".
    with torch.no_grad(), record_sites() as records:
        run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin", options={"select": "all"})
    routes = {plan_file.site_key(r.site): r.site.module == "up" for r in records}
    plan = _write(tmp_path / "plan.json", routes)
    with torch.no_grad(), record_sites() as records:
        _, _, codes = run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin",
                                   options={"select": "all", "plan": plan})  # fmt: skip
    assert [(r.site.module, r.routed) for r in records] == [("up", True), ("down", False)]
    assert "routing plan" in records[1].reason
    check_code_matches(records, codes)


def test_plan_for_another_model_is_refused(tmp_path):
    plan = _write(tmp_path / "plan.json", {"forward|other|mm|1x2 2x3|2,1 3,1|float32": True})
    with pytest.raises(Exception, match="written for another model or other shapes"):
        with torch.no_grad():
            run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin", options={"select": "all", "plan": plan})


@pytest.mark.parametrize("field,value", [("torch", "0.0.1"), ("plugin", "9.9"), ("gpu", "NVIDIA B200")])
def test_plan_of_another_setup_is_refused(tmp_path, field, value):
    plan = _write(tmp_path / "plan.json", {}, **{field: value})
    with pytest.raises(plan_file.PlanError, match=f"measured with another setup: {field}"):
        plan_file.load(plan)


def _plan_json(**fields):
    data = {"format": plan_file.FORMAT, "version": plan_file.FORMAT_VERSION, "model": "MLP",
            "setup": plan_file.setup(), "sites": [{"site": "forward|up|mm|4x16 16x32|16,1 1,16|float32",
                                                    "route": True}]}  # fmt: skip
    return json.dumps({**data, **fields})


DEEP = "[" * 100_000 + "]" * 100_000
BAD_PLANS = [
    ("{", "is not JSON"),
    ('{"format": "x"}', "is not a routing plan"),
    (DEEP, "is not JSON"),  # RecursionError in json
    (_plan_json(sites=json.loads("[" * 50 + "]" * 50)), "malformed site list"),
    ('{"format": ' + DEEP + "}", "is not JSON"),
    ("[1, 2]", "is not a routing plan"),
    (_plan_json(version=True), "is not a routing plan of format version 2"),  # True == 1
    (_plan_json(version="2"), "is not a routing plan of format version 2"),
    (_plan_json(version=1), "is not a routing plan of format version 2"),  # no fused pairs: SwiGLU sites misread
    (_plan_json(setup="cpu"), "'setup' must be an object"),  # was AttributeError
    (_plan_json(setup=None), "'setup' must be an object"),
    (_plan_json(setup={**plan_file.setup(), "gpu": 7}), "'setup' field 'gpu' must be a string"),
    (_plan_json(model=3), "'model' must be a string"),
    (_plan_json(sites={"a": True}), "'sites' must be a list"),
    (_plan_json(sites=[{"site": "a", "route": "false"}]), "site 0: 'route' must be true or false, got 'false'"),
    (_plan_json(sites=[{"site": "a", "route": 1}]), "site 0: 'route' must be true or false, got 1"),
    (_plan_json(sites=[{"site": 5, "route": True}]), "site 0: 'site' must be a string"),
    (_plan_json(sites=[{"site": "a"}]), "site 0: expected an object with 'site', 'route' and optionally 'fused'"),
    (_plan_json(sites=["a"]), "site 0: expected an object with 'site', 'route' and optionally 'fused'"),
    (_plan_json(sites=[{"site": "a", "route": True, "why": "x"}]), "site 0: expected an object with 'site', 'route'"),
    (_plan_json(sites=[{"site": "a", "route": True, "fused": "tanh"}]),
     "site 0: 'fused' must be one of \\['swiglu', 'relu', 'gelu', 'gelu_tanh', 'silu'\\], got 'tanh'"),
    (_plan_json(sites=[{"site": "a", "route": True, "fused": ["swiglu"]}]), "site 0: 'fused' must be one of .*, got list"),
    (_plan_json(sites=[{"site": "a", "route": False, "fused": "swiglu"}]), "site 0: a site marked fused must have 'route' true"),
    (_plan_json(sites=[{"site": "a", "route": True}, {"site": "a", "route": False}]), "site 1: 'a' is listed twice"),
]


@pytest.mark.parametrize("text,message", BAD_PLANS)
def test_unreadable_plans_are_clear_errors(tmp_path, text, message):
    (tmp_path / "p.json").write_text(text)
    with pytest.raises(plan_file.PlanError, match=message):
        plan_file.load(tmp_path / "p.json")
    with pytest.raises(plan_file.PlanError, match="cannot read"):
        plan_file.load(tmp_path / "missing.json")


def test_compare_writes_a_plan_that_the_backend_obeys(tmp_path):
    import inductor_mm_plugin

    x = x_of(4, 16)
    path = tmp_path / "plan.json"
    report = inductor_mm_plugin.compare(MLP(), (x,), options={"select": "all"}, write_plan=path)
    data = json.loads(path.read_text())
    assert data["model"] == "MLP" and len(data["sites"]) == len(report.sites) == 2
    routes = {s["site"]: s["route"] for s in data["sites"]}
    with torch.no_grad(), record_sites() as records:
        _, _, codes = run_compiled(MLP(), x, backend="inductor_mm_plugin", options={"plan": str(path)})
    assert [r.routed for r in records] == [routes[plan_file.site_key(r.site)] for r in records]
    check_code_matches(records, codes)


def test_compare_can_be_called_twice():
    """``inductor_mm_plugin.compare`` stays the function after its module is imported (a
    subpackage of the same name would replace it on the package)."""
    import inductor_mm_plugin

    for _ in range(2):
        assert callable(inductor_mm_plugin.compare)
        inductor_mm_plugin.compare(MLP(), (x_of(4, 16),), options={"select": "all"}, timing=False)


GOOD = {"plugin_us": 8.0, "aten_us": 10.0, "ratios": [1.25] * 5, "graphs": True, "plugin_host_us": 0.0,
        "aten_host_us": 0.0}
MALFORMED = [
    {"plugin_us": "fast"},
    {"plugin_us": 1.0},
    {**GOOD, "ratios": None},
    {**GOOD, "ratios": []},  # crashed the compile: statistics.median of nothing
    {**GOOD, "ratios": "123"},  # read as three rounds
    {**GOOD, "ratios": [1.2, float("nan")]},
    {**GOOD, "ratios": [1.2, -1.0]},
    {**GOOD, "ratios": [1.2, True]},
    {**GOOD, "ratios": {"a": 1.2}},
    {**GOOD, "graphs": "no"},  # read as true
    {**GOOD, "graphs": 1},
    {**GOOD, "plugin_us": float("inf")},
    {**GOOD, "aten_us": 0},
    {**GOOD, "aten_us": "10"},
    {**GOOD, "plugin_host_us": -1.0},
    {**GOOD, "aten_host_us": None},
    {k: v for k, v in GOOD.items() if k != "aten_host_us"},
    {**GOOD, "extra": 1},
    ["not", "an", "object"],
]


@pytest.mark.parametrize("bad", [GOOD, *MALFORMED])
def test_measurement_from_json_checks_every_field(bad):
    if bad is GOOD:
        assert Measurement.from_json(GOOD) == Measurement(8.0, 10.0, (1.25,) * 5, True, 0.0, 0.0)
        return
    with pytest.raises(ValueError):
        Measurement.from_json(bad)


# The last: well formed, but timed the other way than the key says (under CUDA graphs).
@pytest.mark.parametrize("bad", [*MALFORMED, {**GOOD, "graphs": False}])
def test_a_malformed_routing_cache_entry_is_measured_again(tmp_path, monkeypatch, fresh_state, bad):
    store = measure.RoutingCache("TEST GPU", "3.6.0", "abc", tmp_path, torch="2.11.0")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "TEST GPU")
    monkeypatch.setattr(measure, "routing_cache", lambda gpu: store if gpu == "TEST GPU" else None)
    measured = []

    def fake_measure(op, layouts, dtype, device, alpha, beta, graphs):
        measured.append(op)
        return Measurement(8.0, 10.0, (1.25,) * 5, graphs)

    monkeypatch.setattr(measure, "measure", fake_measure)
    store.put_entry("mm|key", bad)
    vals = [x_of(4, 16), x_of(16, 32)]
    hit = measure.cached_or_measure("mm|key", "mm", vals, 1, 1, True)
    assert measured == ["mm"] and hit.ratio == pytest.approx(1.25)
    # The new measurement replaced the bad entry, on disk too: a new process reads it back.
    inductor_mm_plugin.reset()
    fresh = measure.RoutingCache("TEST GPU", "3.6.0", "abc", tmp_path, torch="2.11.0")
    monkeypatch.setattr(measure, "routing_cache", lambda gpu: fresh)
    assert measure.cached_or_measure("mm|key", "mm", vals, 1, 1, True) == hit
    assert measured == ["mm"]


def test_routing_cache_keeps_measurements_apart_from_tuning(tmp_path):
    """The measured routing decisions live in a file of their own, keyed by the torch version
    too, and an entry written by one process is read by the next; an entry that is not a
    measurement is never read back."""
    from inductor_mm_plugin.runtime.tuning import TuningCache

    entry = Measurement(1.0, 2.0, (2.0,), True, 3.0, 4.0).to_json()
    a = measure.RoutingCache("NVIDIA H200", "3.6.0", "abc", tmp_path, torch="2.11.0")
    a.put_entry("mm|bfloat16|...", entry)
    a.put_entry("mm|old", {"plugin_us": 1.0, "aten_us": 2.0, "ratios": [2.0], "graphs": True})  # before host times
    b = measure.RoutingCache("NVIDIA H200", "3.6.0", "abc", tmp_path, torch="2.11.0")
    assert Measurement.from_json(b.get_entry("mm|bfloat16|...")) == Measurement(1.0, 2.0, (2.0,), True, 3.0, 4.0)
    assert b.get_entry("mm|old") is None
    assert measure.RoutingCache("NVIDIA H200", "3.6.0", "abc", tmp_path, torch="2.13.0").get_entry("mm|bfloat16|...") is None
    tuning = TuningCache("NVIDIA H200", "3.6.0", "abc", tmp_path)
    assert tuning.path != a.path and tuning.get("mm|bfloat16|...") is None


def test_host_cost_counts_only_without_cuda_graphs_and_where_it_outlasts_the_kernel():
    """GPU time decides; a compile without CUDA graphs also needs the plugin not to lose on the
    larger of GPU time and host cost per call (measure.py's rule)."""
    gpu_win = (1.25,) * 5
    # Host cost under the kernels' GPU time: GPU time alone decides.
    assert Measurement(8.0, 10.0, gpu_win, False, 5.0, 3.0).faster
    # A kernel shorter than its launch path, without CUDA graphs: the host decides too.
    slow_host = Measurement(8.0, 10.0, gpu_win, False, 14.0, 4.0)
    assert slow_host.host_bound and not slow_host.faster and "host-bound" in slow_host.describe()
    # The same under CUDA graphs: host cost never reaches the step.
    assert Measurement(8.0, 10.0, gpu_win, True, 14.0, 4.0).faster
    # Both host-bound, the plugin's launch no costlier than what aten's step pays: routed.
    assert Measurement(8.0, 10.0, gpu_win, False, 9.0, 11.0).faster


def test_from_json_refuses_what_is_not_a_measurement():
    good = Measurement(1.0, 2.0, (2.0, 1.9), False, 3.0, 4.0).to_json()
    assert Measurement.from_json(good) == Measurement(1.0, 2.0, (2.0, 1.9), False, 3.0, 4.0)
    for bad in ({**good, "ratios": []}, {**good, "graphs": "no"}, {**good, "plugin_us": float("nan")},
                {**good, "aten_us": -1.0}, {k: v for k, v in good.items() if k != "plugin_host_us"}):  # fmt: skip
        with pytest.raises((KeyError, TypeError, ValueError)):
            Measurement.from_json(bad)


def test_precompile_compiles_only_the_sites_that_will_be_timed(monkeypatch, fresh_state):
    """The sites the shape table answers, those already measured and repeats of one signature
    are not compiled ahead; the rest go to the threads together, on operands of their layout."""
    # Inductor's config through its own patch(): pytest 9's monkeypatch restores a module's
    # attribute through its __dict__ (pytest-dev/pytest#10644), where torch's config module
    # keeps none, so its undo deletes the entry (compile_threads then "does not exist" for
    # every later compile; torch's advice for mock.patch alike: pytorch/pytorch#140779).
    threads = measure.compat.inductor_config.patch
    monkeypatch.setattr(measure, "_on_cuda", lambda vals: True)  # CPU tensors stand in for CUDA ones
    compiled = []
    def compile_calls(calls, workers, swiglu_calls=()):  # runtime.compile_calls' own signature
        compiled.append((calls, swiglu_calls, workers))
        return len(calls) + len(swiglu_calls)

    monkeypatch.setattr("inductor_mm_plugin.runtime.compile_calls", compile_calls)
    monkeypatch.setattr(measure, "_sure", lambda op, vals, alpha, beta, graphs: vals[-2].shape[0] == 7 or None)
    seen = [x_of(64, 96), x_of(96, 128)]
    seen_key = measure.signature("mm", seen, 1, 1, True)
    monkeypatch.setattr(measure, "_cached", lambda key, vals, graphs: key == seen_key or None)
    weight = x_of(32, 16)
    sites = [("mm", [x_of(8, 16), weight.t()], 1, 1, True),  # compiled
             ("mm", [x_of(8, 16), weight.t()], 1, 1, True),  # the same signature again
             ("mm", [x_of(7, 16), x_of(16, 32)], 1, 1, True),  # the shape table is sure
             ("mm", seen, 1, 1, True),  # measured before
             ("addmm", [x_of(32), x_of(8, 16), weight.t()], 1, 1, True),  # compiled, with its bias
             ("swiglu", [x_of(520, 16), weight.t(), weight.t()], 1, 1, True),  # a pair timed: its kernels
             ("swiglu", [x_of(512, 16), weight.t(), weight.t()], 1, 1, True)]  # a pair of 512 rows: untimed  # fmt: skip
    with threads(compile_threads=4):
        assert measure.precompile(sites) == 3
    (calls, swiglu_calls, workers), = compiled
    assert workers == 4  # a thread per kernel: two sites' and the pair's two
    (x, w_gate, w_up, fused_out), = swiglu_calls
    assert (x.shape, w_gate.shape, w_up.stride(), fused_out.shape) == ((520, 16), (16, 32), (1, 16), (520, 32))
    (a, b, out, bias, _, _), (a2, b2, out2, bias2, _, _) = calls
    assert bias is None and tuple(bias2.shape) == (32,)
    for x, w, o in ((a, b, out), (a2, b2, out2)):
        assert (x.shape, w.shape, w.stride(), o.shape) == ((8, 16), (16, 32), (1, 16), (8, 32))
        assert x.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()  # one buffer: nothing runs on them
    # One thread, nothing to overlap: the timed call compiles, as before.
    with threads(compile_threads=1):
        assert measure.precompile(sites) == 0 and len(compiled) == 1
    # Compiling ahead only saves time: a failure there is logged and left to the timing.
    monkeypatch.setattr("inductor_mm_plugin.runtime.compile_calls", lambda calls, workers, swiglu_calls=(): 1 / 0)
    with threads(compile_threads=4):
        assert measure.precompile(sites) == 0


def _compiled_kernels() -> list:
    from inductor_mm_plugin.kernels.matmul import _matmul_kernel
    from inductor_mm_plugin.kernels.matmul_tma import _matmul_kernel_tma

    return [kernel for k in (_matmul_kernel, _matmul_kernel_tma) for c in k.device_caches.values() for kernel in c[0].values()]


@pytest.mark.gpu
def test_precompiled_sites_are_timed_without_compiling_again(tmp_path, monkeypatch, fresh_state):
    """The kernels compiled side by side are the ones the timing launches: timing the sites
    afterwards compiles nothing new (same plan, same specialization, same Triton state)."""
    monkeypatch.setenv("INDUCTOR_MM_PLUGIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(measure, "_sure", lambda *args: None)
    inductor_mm_plugin.runtime.clear_plans()
    dev, dt = "cuda", torch.bfloat16
    w = torch.randn(389, 200, device=dev, dtype=dt)  # an nn.Linear weight, transposed below
    sites = [("mm", [torch.randn(100, 200, device=dev, dtype=dt), w.t()], 1, 1, True),
             ("mm", [torch.randn(256, 512, device=dev, dtype=dt), torch.randn(512, 768, device=dev, dtype=dt)], 1, 1, True),
             ("mm", [torch.randn(33, 301, device=dev, dtype=dt), torch.randn(301, 96, device=dev, dtype=dt)], 1, 1, True),
             ("addmm", [torch.randn(389, device=dev, dtype=dt), torch.randn(100, 200, device=dev, dtype=dt), w.t()],
              1, 1, True),
             ("bmm", [torch.randn(3, 64, 80, device=dev, dtype=dt), torch.randn(3, 80, 48, device=dev, dtype=dt)], 1, 1, True)]  # fmt: skip
    before = len(_compiled_kernels())
    with measure.compat.inductor_config.patch(compile_threads=4):
        assert measure.precompile(sites) == len(sites)
    compiled = _compiled_kernels()
    assert len(compiled) > before
    assert all(k.module is not None for k in compiled)  # loaded too: the first launch builds nothing
    for op, vals, alpha, beta, graphs in sites:
        routed, reason, measured = measure.decide(op, vals, alpha, beta, graphs)
        assert measured is not None and measured.plugin_us > 0, reason
    assert len(_compiled_kernels()) == len(compiled)


@pytest.mark.gpu
def test_routed_sites_compiled_behind_are_what_their_first_calls_launch(monkeypatch, fresh_state):
    """The background compile of routed sites (``compile_routed``) compiles and loads the
    kernels that the ops' first calls on such operands launch: those calls compile nothing."""
    inductor_mm_plugin.runtime.clear_plans()
    dev, dt = "cuda", torch.bfloat16
    w = torch.randn(389, 200, device=dev, dtype=dt)
    sites = [("mm", [torch.randn(100, 200, device=dev, dtype=dt), w.t()], 1, 1, True),
             ("addmm", [torch.randn(389, device=dev, dtype=dt), torch.randn(100, 200, device=dev, dtype=dt), w.t()],
              1, 1, True),
             ("mm", [torch.randn(48, 1024, device=dev, dtype=dt), torch.randn(1024, 3072, device=dev, dtype=dt)], 1, 1,
              False)]  # fmt: skip
    before = len(_compiled_kernels())
    with measure.compat.inductor_config.patch(compile_threads=4):
        assert measure.compile_routed(sites) == len(sites)
    for op, vals, alpha, beta, graphs in sites:  # the ops on operands of the sites' layouts
        out = getattr(inductor_mm_plugin, op)(*vals)  # a first call waits for its kernel
        ref = getattr(torch, op)(*[v.double() for v in vals]).to(dt)
        torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    inductor_mm_plugin.runtime.ahead.join_behind()
    compiled = _compiled_kernels()
    assert len(compiled) > before and all(k.module is not None for k in compiled)  # compiled and loaded
    for op, vals, alpha, beta, graphs in sites:
        getattr(inductor_mm_plugin, op)(*vals)
    assert len(_compiled_kernels()) == len(compiled)


def _groups(calls):
    from inductor_mm_plugin.runtime import ahead

    return list(ahead.kernel_groups(calls).values())


def _half(*call):
    """A call in fp16: another kernel than the same call in fp32."""
    return tuple(t.half() if isinstance(t, torch.Tensor) else t for t in call)


def test_calls_of_one_kernel_are_compiled_once(monkeypatch):
    """Calls whose plans share a config and Triton's specialization compile one kernel: the
    first of them compiles it, and all count as compiled; a dtype, a 16-byte misaligned
    pointer or a size Triton specializes on (1, a multiple of 16) is another kernel."""
    from inductor_mm_plugin.runtime import ahead

    w = x_of(64, 48)
    same = [(x_of(40, 48), w.t(), x_of(40, 64)), (x_of(44, 48), w.t(), x_of(44, 64)), (x_of(40, 48), w.t(), x_of(40, 64))]
    storage = x_of(40 * 48 + 1)
    shifted = (storage[1 : 1 + 40 * 48].view(40, 48), w.t(), x_of(40, 64))  # A 4 bytes off 16-byte alignment
    sixteen = (x_of(48, 48), w.t(), x_of(48, 64))
    groups = _groups([*same, _half(*same[0]), shifted, sixteen])
    assert [len(g) for g in groups] == [3, 1, 1, 1] and groups[0] == same
    compiled = []
    def fake(a, b, out, bias=None, beta=1, alpha=1):
        compiled.append(a.shape)
        return a.shape[0] != 48
    monkeypatch.setattr(ahead, "_compile_call", fake)
    assert ahead.compile_calls([*same, sixteen], workers=2) == 3  # the 48-row kernel failed
    assert sorted(compiled) == [(40, 48), (48, 48)]


def test_compile_calls_leaves_a_failing_call_to_its_first_real_call(monkeypatch, caplog):
    """A call that cannot be compiled ahead is logged and not counted; the others still are."""
    from inductor_mm_plugin.runtime import ahead

    def fake(a, b, out, bias=None, beta=1, alpha=1):
        if a.shape[0] == 3:
            raise RuntimeError("no kernel for this one")
        return True

    monkeypatch.setattr(ahead, "_compile_call", fake)
    calls = [(x_of(3, 4), x_of(4, 5), x_of(3, 5), None, 1, 1), _half(x_of(2, 4), x_of(4, 5), x_of(2, 5), None, 1, 1)]
    with caplog.at_level("DEBUG", logger=ahead.__name__):
        assert ahead.compile_calls(calls, workers=2) == 1
    assert "compiling (3, 4)" in caplog.text and "no kernel for this one" in caplog.text


def test_compile_behind_returns_at_once_and_a_first_call_waits_for_its_kernel(monkeypatch):
    """Kernels compile in the background while Inductor compiles on; the ops' first call of a
    kernel waits for that one (no kernel compiled twice at once), not for the others, and a
    compile that failed there is quiet: the call compiles and runs as it always did."""
    import threading

    from inductor_mm_plugin.runtime import ahead

    started, release, finished = threading.Event(), {torch.float32: threading.Event(), torch.float16: threading.Event()}, []

    def slow(a, b, out, bias=None, beta=1, alpha=1):
        started.set()
        assert release[a.dtype].wait(30)
        finished.append(a.dtype)
        if a.dtype == torch.float32:
            raise RuntimeError("no kernel for this one")
        return True

    monkeypatch.setattr(ahead, "_compile_call", slow)
    calls = [(x_of(3, 4), x_of(4, 5), x_of(3, 5), None, 1, 1), _half(x_of(2, 4), x_of(4, 5), x_of(2, 5), None, 1, 1)]
    assert ahead.compile_behind(calls, workers=2) == 2
    assert started.wait(30) and finished == []  # returned while the compiles run
    threading.Timer(1.0, release[torch.float32].set).start()  # longer than the interpreted call below takes
    a, b = x_of(6, 4), x_of(4, 5)
    out = inductor_mm_plugin.mm(a, b)  # the fp32 kernel's first call: waits for it alone, then runs
    assert finished == [torch.float32] and ahead.pending()
    torch.testing.assert_close(out, (a.double() @ b.double()).to(out.dtype), atol=1e-4, rtol=1e-4)
    release[torch.float16].set()
    inductor_mm_plugin.mm(a.half(), b.half())
    assert finished == [torch.float32, torch.float16] and not ahead.pending()
    assert ahead.compile_behind([], workers=4) == 0


def test_compile_routed_hands_each_cuda_signature_over_once(monkeypatch, fresh_state):
    """Routed extern sites go to the background compile once per signature, on operands of
    their own layout (a transposed weight stays transposed); symbolic or non-CUDA ones never."""
    behind = []
    monkeypatch.setattr("inductor_mm_plugin.runtime.compile_behind",
                        lambda calls, workers: behind.append((calls, workers)) or len(calls))  # fmt: skip
    monkeypatch.setattr(measure, "_on_cuda", lambda vals: vals[-1].shape[-1] != 7)  # N = 7: a CPU site
    weight = x_of(32, 16)
    sites = [("mm", [x_of(8, 16), weight.t()], 1, 1, True), ("mm", [x_of(8, 16), weight.t()], 1, 1, True),
             ("mm", [x_of(8, 16), x_of(16, 7)], 1, 1, True),
             ("addmm", [x_of(32), x_of(8, 16), weight.t()], 1, 1, False)]  # fmt: skip
    with measure.compat.inductor_config.patch(compile_threads=3):
        assert measure.compile_routed(sites) == 2
        assert measure.compile_routed([]) == 0 and len(behind) == 1
    (calls, workers), = behind
    assert workers == 3
    (a, b, out, bias, _, _), (a2, b2, out2, bias2, _, _) = calls
    assert bias is None and tuple(bias2.shape) == (32,)
    for x, w, o in ((a, b, out), (a2, b2, out2)):
        assert (x.shape, w.shape, w.stride(), o.shape) == ((8, 16), (16, 32), (1, 16), (8, 32))
    monkeypatch.setattr("inductor_mm_plugin.runtime.compile_behind", lambda calls, workers: 1 / 0)
    assert measure.compile_routed(sites) == 0  # compiling ahead only saves time


def test_while_autotuning_each_call_compiles_apart(monkeypatch):
    """Planning a call under autotuning times configs: kernel_groups then plans nothing,
    and each call is compiled (and tuned) on its own thread, as before."""
    monkeypatch.setattr(importlib.import_module("inductor_mm_plugin.runtime.launch"), "_AUTOTUNE", True)
    monkeypatch.setattr(importlib.import_module("inductor_mm_plugin.runtime.launch"), "launch",
                        lambda *args, **kwargs: pytest.fail("planned while autotuning"))  # fmt: skip
    w = x_of(64, 48)
    calls = [(x_of(40, 48), w.t(), x_of(40, 64)), (x_of(44, 48), w.t(), x_of(44, 64))]
    assert _groups(calls) == [[calls[0]], [calls[1]]]


def test_a_kernel_compiling_behind_is_waited_for_not_compiled_again(monkeypatch):
    """compile_calls finds a kernel the background is compiling (a site predicted before the
    routing pass, or routed by an earlier graph) and waits for it; it compiles the rest."""
    import threading

    from inductor_mm_plugin.runtime import ahead

    compiled, release = [], threading.Event()

    def slow(a, b, out, bias=None, beta=1, alpha=1):
        if a.dtype == torch.float32:
            assert release.wait(30)
        compiled.append(a.dtype)
        return True

    monkeypatch.setattr(ahead, "_compile_call", slow)
    w = x_of(64, 48)
    fp32 = (x_of(40, 48), w.t(), x_of(40, 64))
    assert ahead.compile_behind([fp32], workers=2) == 1
    assert ahead.compile_behind([(x_of(44, 48), w.t(), x_of(44, 64))], workers=2) == 1  # the same kernel: not again
    threading.Timer(0.5, release.set).start()
    assert ahead.compile_calls([(x_of(36, 48), w.t(), x_of(36, 64)), _half(*fp32)], workers=2) == 2
    assert compiled == [torch.float16, torch.float32] and not ahead.pending()


def test_a_call_that_cannot_be_planned_keeps_a_group_of_its_own(monkeypatch, caplog):
    from inductor_mm_plugin.runtime import ahead

    launch_module = importlib.import_module("inductor_mm_plugin.runtime.launch")
    monkeypatch.setattr(launch_module, "launch", lambda *args, **kwargs: 1 / 0)
    w = x_of(64, 48)
    calls = [(x_of(40, 48), w.t(), x_of(40, 64)), (x_of(40, 48), w.t(), x_of(40, 64))]
    with caplog.at_level("DEBUG", logger=ahead.__name__):
        assert _groups(calls) == [[calls[0]], [calls[1]]]
    assert "planning (40, 48)" in caplog.text and "ZeroDivisionError" in caplog.text
