"""The A/B comparison: report structure and values, JSON, text, CLI end to end and its errors."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE
from integration_utils import MLP, SwiGLU

import inductor_mm_plugin
from inductor_mm_plugin import cli
from inductor_mm_plugin.comparison import CompareError, compare

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def mlp_with_opted_out_down():
    model = MLP()
    inductor_mm_plugin.opt_out(model.down)
    return model, (torch.randn(8, 16, device=DEVICE),)


@pytest.fixture(scope="module")
def mlp_report():
    torch.manual_seed(0)
    model, inputs = mlp_with_opted_out_down()
    with torch.no_grad():
        return compare(model, inputs, options={"select": "all"})


def test_report_values(mlp_report):
    r = mlp_report
    assert r.ok and r.model["ok"]
    assert len(r.graphs) == 1
    g = r.graphs[0]
    assert (g.sites, g.routed) == (2, 1)
    # fp32 through the plugin: IEEE accumulation, far inside the fp32 tolerance
    assert g.plugin_err.max_rel < 1e-5 and r.model["plugin_err"].max_rel < 1e-5
    assert g.stock is not None and g.plugin is not None and g.speedup > 0
    up, down = sorted(r.sites, key=lambda s: s.module, reverse=True)
    assert (up.module, up.routed, up.reason) == ("up", True, "")
    assert (down.module, down.routed, down.reason) == ("down", False, "inside an opted-out module (opt_out)")
    assert up.plugin_ms is not None and up.aten_ms is not None  # routed sites are timed
    assert down.plugin_ms is None
    assert r.timing_meaningful == (DEVICE == "cuda")
    assert ("times on the CPU are not meaningful" in str(r)) == (DEVICE != "cuda")
    assert r.reference.startswith("float64 eager")


def test_json_round_trip(mlp_report, tmp_path):
    path = tmp_path / "ab.json"
    mlp_report.to_json(path)
    data = json.loads(path.read_text())
    assert set(data["versions"]) == {"torch", "triton", "plugin"}
    assert data["versions"]["plugin"] == inductor_mm_plugin.__version__
    assert {"device", "graphs", "sites", "model", "ok"} <= set(data)
    for key in ("stock_ms", "plugin_ms", "speedup", "stock_err", "plugin_err"):
        assert key in data["graphs"][0]
    for key in ("graph", "module", "op", "shapes", "dtype", "routed", "reason"):
        assert key in data["sites"][0]
    assert data["sites"][0]["shapes"] == [[32], [8, 16], [16, 32]]
    assert data["graphs"][0]["plugin_err"]["max_rel"] == mlp_report.graphs[0].plugin_err.max_rel


try:
    import expecttest

    _TestCase = expecttest.TestCase
except ImportError:  # the `test` extra installs it; the GPU machine's image does not have it
    import unittest

    _TestCase = unittest.TestCase
    expecttest = None


@pytest.mark.skipif(expecttest is None, reason="needs expecttest (pip install -e '.[test]')")
class TestReportText(_TestCase):
    def test_site_table(self):
        torch.manual_seed(0)
        model, inputs = mlp_with_opted_out_down()
        with torch.no_grad():
            report = compare(model, inputs, options={"select": "all"}, timing=False)
        self.assertExpectedInline(
            report.site_table(),
            """\
graph  phase    module  op     shapes         dtype    layout   routed  reason
-----  -------  ------  -----  -------------  -------  -------  ------  ------------------------------------
0      forward  up      addmm  32 8x16 16x32  float32  row col  yes
0      forward  down    addmm  16 8x32 32x16  float32  row col  no      inside an opted-out module (opt_out)""",
        )
        text = str(report)
        assert "verdict: PASS" in text and "graphs:" in text and "sites:" in text
        md = report.to_markdown()
        assert md.startswith("### inductor_mm_plugin A/B") and "| 0 | forward | up | addmm |" in md
        assert "not meaningful" not in text + md  # nothing was timed


def test_training_step_reports_gradients_and_backward_sites():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import train_step
    finally:
        sys.path.remove(str(EXAMPLES))
    model, inputs = train_step.make()
    report = compare(model, inputs, timing=False)
    assert report.ok
    assert {s.phase for s in report.sites} == {"forward", "backward"}
    assert all(s.routed for s in report.sites)
    assert "model.mlp.down.weight" in report.model["grads"]
    assert all(g["ok"] for g in report.model["grads"].values())
    if DEVICE == "cpu":  # fp32 on the interpreter; on CUDA the example is bf16 (judged by "ok")
        assert all(g["plugin_err"].max_rel < 1e-4 for g in report.model["grads"].values())


def test_graph_break_gives_two_graphs():
    class Broken(MLP):
        def forward(self, x):
            h = torch.relu(self.up(x))
            torch._dynamo.graph_break()
            return self.down(h)

    with torch.no_grad():
        report = compare(Broken(), (torch.randn(4, 16, device=DEVICE),), timing=False)
    assert [g.index for g in report.graphs] == [0, 1]
    assert [(s.graph, s.module) for s in report.sites] == [(0, "up"), (1, "down")]
    assert all(g.ok and g.plugin_err is not None for g in report.graphs)


@pytest.fixture
def nan_kernel(monkeypatch):
    """A fault in the plugin's kernel: every routed mm/addmm writes NaN everywhere."""
    from inductor_mm_plugin.inductor import lowering

    for name in ("mm_launch", "addmm_launch"):
        real = getattr(lowering, name)

        def broken(*args, real=real, **kwargs):
            return real(*args, **kwargs).fill_(float("nan"))

        monkeypatch.setattr(lowering, name, broken)


def _linear_with_a_nan():
    x = torch.randn(4, 16, device=DEVICE)
    x[1, 3] = float("nan")  # row 1 of every output is NaN, in the reference and stock alike
    return nn.Linear(16, 8, device=DEVICE), (x,)


def test_a_kernel_writing_nan_fails_though_the_input_has_a_nan(nan_kernel):
    """With a NaN in the input every error used to be inf, and inf <= 2 * inf passed."""
    model, inputs = _linear_with_a_nan()
    with torch.no_grad():
        report = compare(model, inputs, options={"select": "all", "compete": False}, timing=False)
    assert report.sites[0].routed
    assert not report.model["ok"] and not report.graphs[0].ok and not report.ok
    # 3 rows of 8 are NaN where the reference and stock are finite
    assert report.model["plugin_err"].nonfinite == 24 and report.model["stock_err"].nonfinite == 0
    assert "24 NaN/inf differ" in str(report) and "verdict: FAIL" in str(report)


def test_nan_where_the_reference_has_it_passes():
    model, inputs = _linear_with_a_nan()
    with torch.no_grad():
        report = compare(model, inputs, options={"select": "all", "compete": False}, timing=False)
    assert report.sites[0].routed
    assert report.ok and report.model["plugin_err"].nonfinite == 0
    # the finite rows are still compared: fp32 on the plugin's kernel, far inside the tolerance
    assert 0 < report.model["plugin_err"].max_rel < 1e-5


@pytest.mark.gpu
def test_gpu_fp16_overflow_that_stock_shares_passes():
    """fp16 outputs past 65504 are inf in stock and plugin alike, finite in float64: the
    dtype's overflow, not the kernel's, so the comparison passes."""
    torch.manual_seed(0)
    model = nn.Linear(16, 8, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        model.weight.copy_(torch.rand(8, 16) + 0.5)
    x = torch.randn(6, 16, device="cuda", dtype=torch.float16)
    x[0] = 2e4  # row 0: at least 1.6e5 per output, far past fp16's 65504
    with torch.no_grad():
        report = compare(model, (x,), options={"select": "all", "compete": False}, timing=False)
    assert report.sites[0].routed
    assert report.model["stock_err"].nonfinite == report.model["plugin_err"].nonfinite == 8
    assert report.ok, str(report)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "stock,plugin,ok",
    [
        ([1.0, NAN, INF], [1.0, NAN, INF], True),  # the reference's pattern
        ([1.0, 2.0, INF], [1.0, 2.0, INF], True),  # stock's (say fp16 overflow, finite in float64)
        ([1.0, NAN, INF], [1.0, NAN, 5.0], False),  # finite where the reference and stock are inf
        ([1.0, NAN, INF], [1.0, NAN, -INF], False),  # the sign of an inf counts
        ([1.0, NAN, INF], [NAN, NAN, INF], False),  # NaN where both are finite
        ([1.0, NAN, INF], [1.0, INF, INF], False),  # inf for NaN
        ([1.0, NAN, INF], [1.5, NAN, INF], False),  # then the finite values: 50% off
    ],
)  # fmt: skip
def test_verdict_compares_nan_inf_patterns_then_finite_values(stock, plugin, ok):
    from inductor_mm_plugin.comparison.ab import _judge

    ref = torch.tensor([1.0, NAN, INF], dtype=torch.float64)
    judged = _judge(torch.tensor(stock), torch.tensor(plugin), ref, 1e-3)
    assert judged["ok"] is ok
    assert judged["plugin_err"].max_rel == (0.5 if plugin[0] == 1.5 else 0.0)  # over the finite elements


def test_no_matmul_is_a_clear_error():
    with pytest.raises(CompareError, match="has no matmul"):
        compare(nn.ReLU(), (torch.randn(4, 4),), timing=False)


def test_progress_goes_to_stderr(capsys):
    with torch.no_grad():
        compare(MLP(), (torch.randn(4, 16, device=DEVICE),), timing=False, quiet=False)
    err = capsys.readouterr().err
    assert "float64 eager reference" in err and "compiling the stock and plugin arms" in err and "done" in err


def test_plot(mlp_report, tmp_path):
    pytest.importorskip("matplotlib")
    mlp_report.plot(tmp_path / "ab.png")
    assert (tmp_path / "ab.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------- CLI


def run_cli(*args, cwd=None, interpret=False):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, "-m", "inductor_mm_plugin", *args], capture_output=True, text=True,
                          timeout=900, cwd=cwd, env=env)  # fmt: skip


def test_cli_end_to_end(tmp_path):
    # Without TRITON_INTERPRET on a CPU machine: the CLI re-runs itself under the interpreter.
    res = run_cli("compare", f"{EXAMPLES}/mlp.py:make", "--json", str(tmp_path / "ab.json"),
                  "--markdown", str(tmp_path / "ab.md"), "--strict", "--no-timing")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "verdict: PASS" in res.stdout
    assert "not meaningful" not in res.stdout  # --no-timing: no times to qualify
    assert "compiling the stock and plugin arms" in res.stderr  # progress
    data = json.loads((tmp_path / "ab.json").read_text())
    assert data["ok"] and all(s["routed"] for s in data["sites"])
    assert (tmp_path / "ab.md").read_text().startswith("### inductor_mm_plugin A/B")


def test_every_example_is_a_script():
    # README: each example runs as a script (mlp.py and train_step.py only defined make() once);
    # running them is slow under the interpreter, test_cli_end_to_end runs mlp.py's make().
    for path in EXAMPLES.glob("[!_]*.py"):
        assert 'if __name__ == "__main__":' in path.read_text(), path.name


def write_target(tmp_path, body):
    path = tmp_path / "target.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize(
    "body,message",
    [
        ("def make():\n    raise ValueError('no weights here')\n", "the factory .* failed: ValueError: no weights here"),
        ("import torch\ndef make():\n    return torch.nn.ReLU(), (torch.randn(3, 3),)\n", "has no matmul"),
        ("import torch\ndef make():\n    return (lambda x: x @ torch.ones(5, 2)), (torch.randn(3, 4),)\n",
         "does not run eagerly: RuntimeError"),
    ],
)  # fmt: skip
def test_cli_errors_are_one_clear_line(tmp_path, body, message):
    res = run_cli("compare", f"{write_target(tmp_path, body)}:make", "--quiet", interpret=True)
    assert res.returncode == cli.EXIT_ERROR, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    import re

    assert re.search(message, res.stderr), res.stderr


def test_cli_bad_target(tmp_path):
    res = run_cli("compare", "no_such_file.py:make", interpret=True)
    assert res.returncode == cli.EXIT_ERROR and "no such file: no_such_file.py" in res.stderr
    assert "Traceback" not in res.stderr


def test_strict_exits_nonzero_on_numerics_failure(monkeypatch, capsys):
    class Failing:
        ok = False

        def __str__(self):
            return "verdict: FAIL"

    monkeypatch.setattr("inductor_mm_plugin.comparison.compare", lambda *a, **k: Failing())
    target = f"{EXAMPLES}/mlp.py:make"
    assert cli.main(["compare", target, "--strict", "--quiet"]) == cli.EXIT_NUMERICS
    assert cli.main(["compare", target, "--quiet"]) == 0


def test_cli_option_without_value_is_an_error(capsys):
    assert cli.main(["compare", f"{EXAMPLES}/mlp.py:make", "--option", "max_autotune", "--quiet"]) == cli.EXIT_ERROR
    assert "--option expects KEY=VALUE, got 'max_autotune'" in capsys.readouterr().err


def test_competing_sites_are_marked_in_the_tables():
    from inductor_mm_plugin.comparison.report import SiteResult, _routed

    site = dict(graph=0, module="down", op="mm", phase="forward", shapes=[[4, 32], [32, 16]], dtype="bfloat16",
                strides=[[32, 1], [1, 32]])  # fmt: skip
    assert _routed(SiteResult(**site, routed=True, reason="", compete="kernels")) == "yes, competes"
    assert _routed(SiteResult(**site, routed=True, reason="")) == "yes"
    assert _routed(SiteResult(**site, routed=False, reason="select")) == "no"
    assert _routed(SiteResult(**site, routed=True, reason="", fused="swiglu")) == "yes, SwiGLU"
    assert _routed(SiteResult(**site, routed=True, reason="", fused="gelu")) == "yes, fused with gelu"


def test_json_names_what_a_site_competes_with():
    """The report's "compete" is the option's word ("all", "kernels"), as before the routing
    pass typed it (inductor/decision.py's Compete)."""
    from inductor_mm_plugin.comparison.ab import _site_result
    from inductor_mm_plugin.inductor.decision import Compete
    from inductor_mm_plugin.inductor.records import SiteRecord
    from inductor_mm_plugin.inductor.selection import Site

    site = Site(op="mm", module="down", module_type="Linear", phase="forward", shapes=((4, 32), (32, 16)),
                dtypes=("bfloat16",) * 2, strides=((32, 1), (1, 32)), device="cuda", node="mm", opt=None)  # fmt: skip
    for compete, word in ((Compete.ALL, "all"), (Compete.KERNELS, "kernels"), (None, None)):
        result = _site_result(SiteRecord(site, routed=True, reason="", compete=compete))
        assert json.loads(json.dumps(dataclasses.asdict(result), default=str))["compete"] == word


def test_fused_sites_say_what_their_times_measure(mlp_report):
    """A SwiGLU site's row times the fused pair it belongs to; where that pair did not fuse
    alone, the plain kernel on its shapes, starred. Each case is said under both tables when
    such a row is timed, and neither otherwise."""
    site = dataclasses.replace(mlp_report.sites[0], routed=True, fused="swiglu", plugin_ms=1.0, aten_ms=1.0)
    pair_note, kernel_note = "each row times the pair it belongs to", "their times are the plugin's plain matmul kernel"
    for timed, present, absent in (("swiglu pair", pair_note, kernel_note), ("kernel", kernel_note, pair_note)):
        fused = dataclasses.replace(mlp_report, sites=[dataclasses.replace(site, timed=timed)])
        assert present in fused.to_markdown() and present in str(fused), timed
        assert absent not in fused.to_markdown() and absent not in str(fused), timed
        assert ("yes, SwiGLU*" in fused.site_table()) == (timed == "kernel")
    unfused = dataclasses.replace(mlp_report, sites=[dataclasses.replace(site, fused=None, timed="kernel")])
    assert pair_note not in str(unfused) and kernel_note not in str(unfused)
    # A Linear fused with its activation: its own note, not the SwiGLU ones.
    act = dataclasses.replace(mlp_report, sites=[dataclasses.replace(site, fused="gelu", timed="kernel")])
    assert "inductor_mm_plugin::mm_activation" in str(act) and "yes, fused with gelu" in act.site_table()
    assert pair_note not in str(act) and kernel_note not in str(act)
    assert "mm_activation" not in str(unfused) and "mm_activation" not in str(fused)


def swiglu_report(**kwargs):
    torch.manual_seed(0)
    with torch.no_grad():
        return compare(SwiGLU(), (torch.randn(24, 32, device=DEVICE),),
                       options={"select": "all", "fuse_swiglu": True, "compete": False}, **kwargs)  # fmt: skip


def test_fused_swiglu_sites_time_their_pair():
    """gate and up run as one fused kernel: both rows carry the times of that pair compiled
    alone (plugin against stock), the same numbers; down is timed as its own kernel."""
    r = swiglu_report()
    assert r.ok
    by_module = {s.module: s for s in r.sites}
    gate, up, down = by_module["gate"], by_module["up"], by_module["down"]
    assert gate.fused == up.fused == "swiglu" and down.fused is None
    assert gate.timed == up.timed == "swiglu pair" and down.timed == "kernel"
    assert gate.plugin_ms > 0 and gate.aten_ms > 0
    assert (gate.plugin_ms, gate.aten_ms) == (up.plugin_ms, up.aten_ms)
    assert "each row times the pair it belongs to" in str(r) and "yes, SwiGLU*" not in str(r)


def test_a_pair_that_does_not_fuse_alone_times_each_kernel(monkeypatch):
    """Where compiling the pair alone does not fuse it, each site times its own kernel and
    its row says so (starred, with the note)."""
    monkeypatch.setattr("inductor_mm_plugin.comparison.timing._time_swiglu_pair", lambda *a, **k: None)
    r = swiglu_report()
    gate = next(s for s in r.sites if s.module == "gate")
    assert gate.timed == "kernel" and gate.plugin_ms > 0 and gate.aten_ms > 0
    assert "yes, SwiGLU*" in str(r) and "their times are the plugin's plain matmul kernel" in str(r)


def test_a_pair_that_fails_to_time_warns_and_times_each_kernel(monkeypatch):
    def broken(self, x, w_gate, w_up):
        raise RuntimeError("no pair today")

    monkeypatch.setattr("inductor_mm_plugin.comparison.timing._SwiGLUPair.forward", broken)
    with pytest.warns(UserWarning, match="timing the SwiGLU pair of gate .RuntimeError: no pair today"):
        r = swiglu_report()
    assert {s.module: s.timed for s in r.sites} == {"gate": "kernel", "up": "kernel", "down": "kernel"}
    assert "yes, SwiGLU*" in str(r)


def test_swiglu_pair_is_timed_only_when_it_fuses():
    """_time_swiglu_pair reads the routing records of its own compile: with fusion off the
    pair compiles as two matmuls, and it returns None."""
    from inductor_mm_plugin.comparison.report import SiteResult
    from inductor_mm_plugin.comparison.timing import _time_swiglu_pair
    from inductor_mm_plugin.inductor.options import PluginOptions

    site = SiteResult(graph=0, module="gate", op="mm", phase="forward", shapes=[[8, 16], [16, 24]],
                      dtype="float32", strides=[[16, 1], [1, 16]], routed=True, reason="", fused="swiglu")  # fmt: skip
    assert _time_swiglu_pair(site, PluginOptions(fuse_swiglu=False), {}, DEVICE, 1, 2, False) is None
    times = _time_swiglu_pair(site, PluginOptions(fuse_swiglu=True), {}, DEVICE, 1, 2, False)
    assert times is not None and all(t > 0 for t in times)


@pytest.fixture
def cli_options(monkeypatch):
    """The options the CLI passes to compare (replaced by a stub that passes)."""
    seen = {}

    class Passing:
        ok = True

        def __str__(self):
            return "verdict: PASS"

    def fake_compare(model, inputs, options=None, **kwargs):
        seen.update(options or {})
        return Passing()

    monkeypatch.setattr("inductor_mm_plugin.comparison.compare", fake_compare)
    return seen


@pytest.mark.parametrize("flags,expect", [([], "unset"), (["--compete"], True), (["--no-compete"], False)])
def test_cli_compete_flags_reach_the_options(cli_options, flags, expect):
    assert cli.main(["compare", f"{EXAMPLES}/mlp.py:make", "--quiet", *flags]) == 0
    assert cli_options.get("compete", "unset") == expect


def test_cli_option_takes_plugin_keys(cli_options):
    args = ["--option", "fuse_swiglu=auto", "--option", "max_autotune=true"]
    assert cli.main(["compare", f"{EXAMPLES}/mlp.py:make", "--quiet", *args]) == 0
    assert cli_options == {"fuse_swiglu": "auto", "max_autotune": True}


def test_cli_compete_flags_are_exclusive(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", f"{EXAMPLES}/mlp.py:make", "--compete", "--no-compete"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_profile_attributes_matmul_events_to_sites():
    """comparison/profile.py on the CPU profiler's real events: stock's aten matmuls by their
    input shapes, the plugin's extern-kernel ranges by their names, an aten call inside the
    plugin's range counted for the range; sites meet them by (a, b) shapes."""
    from inductor_mm_plugin.comparison.profile import attribute, site_key
    from inductor_mm_plugin.inductor.lowering import inductor_mm_plugin_addmm, profiled_calls

    a, b, bias = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    with profiled_calls(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                  record_shapes=True) as prof:  # fmt: skip
        for _ in range(2):
            torch.mm(a, b)
            torch.addmm(bias, a, b)
            with torch.profiler.record_function("inductor_mm_plugin::addmm 8x16 16x4"):
                torch.mm(a, b)  # e.g. the launcher's aten fallback: inside the plugin's range
            inductor_mm_plugin_addmm(bias, a, b, out=torch.empty(8, 4))
    found = attribute(prof.events(), steps=2, time_of=lambda e: 1.0)
    key = site_key("addmm", [(4,), (8, 16), (16, 4)])
    assert key == site_key("mm", [(8, 16), (16, 4)]) == ("mm", (8, 16), (16, 4))
    assert found[("aten", key)].calls == 2  # torch.mm and torch.addmm, once each per step
    assert found[("plugin", key)].calls == 2 and found[("plugin", key)].per_call_us == 1.0
    assert set(found) == {("aten", key), ("plugin", key)}


def _site(module, op="mm", shapes=((8, 16), (16, 4)), routed=True, timed=None):
    from inductor_mm_plugin.comparison.report import SiteResult

    return SiteResult(graph=0, module=module, op=op, phase="forward", shapes=[list(s) for s in shapes],
                      dtype="bfloat16", strides=[[16, 1], [4, 1]], routed=routed, reason="", timed=timed)  # fmt: skip


def test_site_times_and_the_why_come_from_the_profiles():
    """Routed sites take their per-call times from each arm's profile; when the routed kernels
    win but the step is slower, the report says where the step lost."""
    from inductor_mm_plugin.comparison.ab import _from_profiles, _profile_summary
    from inductor_mm_plugin.comparison.profile import Kernels, Profile

    key = ("mm", (8, 16), (16, 4))
    stock = Profile({("aten", key): Kernels(20.0, 2), ("aten", ("mm", (8, 4), (4, 4))): Kernels(5.0, 1)}, 100.0)
    plugin = Profile({("plugin", key): Kernels(10.0, 2), ("aten", ("mm", (8, 4), (4, 4))): Kernels(5.0, 1)}, 130.0)
    sites = [_site("up"), _site("out", shapes=((8, 4), (4, 4)), routed=False),
             _site("bias", op="addmm", shapes=((4,), (8, 16), (16, 4)))]  # fmt: skip
    _from_profiles(sites, {"stock": [stock], "plugin": [plugin]})
    up, out, bias = sites
    assert (up.timed, up.plugin_ms, up.aten_ms) == ("profile", 0.005, 0.010)
    assert bias.timed == "profile" and bias.speedup == 2.0  # addmm meets its (a, b) calls too
    assert out.timed is None
    slower = {"verdict": "slower", "cudagraphs": True, "speedup": 0.8}
    summary = _profile_summary({"stock": stock, "plugin": plugin}, slower)
    assert (summary["routed_plugin_us"], summary["routed_stock_us"]) == (10.0, 20.0)
    assert "the rest of the step's kernels took 120.0 us" in summary["why"] and "against 80.0 us" in summary["why"]
    assert _profile_summary({"stock": stock, "plugin": plugin}, {**slower, "verdict": "within noise"})["why"] == ""


def test_a_routed_site_meets_stocks_calls_of_its_own_shape_only():
    """Where routed and unrouted sites share their shapes (llama-train's backward down_proj and
    forward gate/up products), the routed ones meet stock's calls less those the plugin arm
    kept on aten: the unrouted calls run stock's code in both arms."""
    from inductor_mm_plugin.comparison.ab import _from_profiles
    from inductor_mm_plugin.comparison.profile import Kernels, Profile, stock_paid

    key = ("mm", (8, 16), (16, 4))
    # Per step: stock ran 3 calls, 2 at 10 us (the layout left on aten) and 1 at 40 us (the routed one).
    stock = Profile({("aten", key): Kernels(60.0, 3)}, 100.0)
    plugin = Profile({("plugin", key): Kernels(30.0, 1), ("aten", key): Kernels(20.0, 2)}, 100.0)
    paid = stock_paid(stock, plugin, key)
    assert (paid.us, paid.calls, paid.per_call_us) == (40.0, 1, 40.0)
    sites = [_site("down"), _site("gate", routed=False)]
    _from_profiles(sites, {"stock": [stock], "plugin": [plugin]})
    assert (sites[0].plugin_ms, sites[0].aten_ms) == (0.030, 0.040)  # the mean of all three would read 0.020
    assert stock_paid(stock, Profile({("plugin", key): Kernels(30.0, 1)}, 1.0), key) is stock.time("aten", key)
    # Nothing left to attribute (the plugin arm kept every call on aten): not seen.
    assert stock_paid(stock, Profile({("aten", key): Kernels(60.0, 3)}, 1.0), key) is None


def test_a_plan_routes_where_the_profile_won(tmp_path):
    """--write-plan routes a site only where its kernels beat stock's by the margin in the model."""
    from inductor_mm_plugin.comparison.ab import _write_plan
    from inductor_mm_plugin.inductor import plan_file
    from inductor_mm_plugin.inductor.records import SiteRecord
    from inductor_mm_plugin.inductor.selection import Site

    def record(module):
        site = Site("mm", module, "Linear", "forward", ((8, 16), (16, 4)), ("bfloat16",) * 2, ((16, 1), (4, 1)),
                    "cuda:0", "mm", None)  # fmt: skip
        return SiteRecord(site, True, "")

    names = ("won", "close", "lost", "tiny")
    records = [record(m) for m in names]
    sites = [_site(m, timed="profile") for m in names]
    # ms per call; "tiny" wins by 10% but saves 0.3 us a call, under MIN_SAVING_US
    for s, (p, a) in zip(sites, ((1.0, 2.0), (1.0, 1.01), (2.0, 1.0), (0.0030, 0.0033))):
        s.plugin_ms, s.aten_ms = p, a
    # A site the routing pass kept on stock untimed (a sure loser): in the plan, unrouted, so
    # that the backend finds it there (a site the plan lacks means another model: PlanError).
    records.append(dataclasses.replace(record("untimed"), routed=False, reason="a sure loser"))
    sites.append(_site("untimed", timed=None))
    path = tmp_path / "plan.json"
    _write_plan(path, records, sites, nn.Linear(2, 2))
    plan = plan_file.load(path)
    assert plan.model == "Linear"
    assert [plan.route[plan_file.site_key(r.site)] for r in records] == [True, False, False, False, False]
    assert plan.decide(records[-1].site)[0] is False


def test_a_plan_marks_a_pair_that_won_fused(tmp_path):
    """A SwiGLU pair's two sites that won as the fused kernel are written routed and marked
    fused, so that the plan fuses the pair again; a pair that lost is written unrouted."""
    from inductor_mm_plugin.comparison.ab import _write_plan
    from inductor_mm_plugin.inductor import plan_file
    from inductor_mm_plugin.inductor.records import SiteRecord
    from inductor_mm_plugin.inductor.selection import Site

    def record(module):
        site = Site("mm", module, "Linear", "forward", ((8, 16), (16, 4)), ("bfloat16",) * 2, ((16, 1), (1, 16)),
                    "cuda:0", "mm", None)  # fmt: skip
        return SiteRecord(site, True, "", fused="swiglu")

    names = ("gate", "up", "gate2", "up2")
    records = [record(m) for m in names]
    sites = [_site(m, timed="swiglu pair") for m in names]
    for s, (p, a) in zip(sites, ((1.0, 1.5), (1.0, 1.5), (1.5, 1.0), (1.5, 1.0))):
        s.plugin_ms, s.aten_ms = p, a
    path = tmp_path / "plan.json"
    _write_plan(path, records, sites, nn.Linear(2, 2))
    plan = plan_file.load(path)
    assert [plan.route[plan_file.site_key(r.site)] for r in records] == [True, True, False, False]
    assert [plan.fused_swiglu(r.site) for r in records] == [True, True, False, False]
    assert plan.decide(records[0].site)[0] is False  # never run as a plain kernel: that did not win


def test_kernel_time_skips_the_ranges_own_gpu_annotation():
    """A profiler range's GPU-side annotation, linked to the range and named like it, spans its
    kernels: counting it too would double the range's time."""
    from types import SimpleNamespace as E

    from inductor_mm_plugin.comparison.profile import kernel_us

    name = "inductor_mm_plugin::mm 8x16 16x4"
    child = E(name="aten::zero_", kernels=[E(name="memset", duration=1.0)], cpu_children=[])
    rng = E(name=name, kernels=[E(name=name, duration=7.0), E(name="_matmul_kernel", duration=6.0)],
            cpu_children=[child])  # fmt: skip
    assert kernel_us(rng) == 7.0


def test_plugin_kernels_are_found_inside_their_ranges_gpu_annotation():
    """As the H200's trace has it (torch 2.11): the plugin's Triton kernel, launched through
    cuLaunchKernelEx, is linked to no CPU event; Kineto records the range a second time on
    the GPU's side (a user annotation spanning its kernels). The kernel time comes from the
    kernels inside that annotation, the call count from the CPU range; stock's aten::mm keeps
    its linked kernels."""
    from types import SimpleNamespace as NS

    from inductor_mm_plugin.comparison.profile import attribute

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    span = lambda start, end: NS(start=start, end=end)  # noqa: E731
    name = "inductor_mm_plugin::mm 16x4096 4096x4096"
    events = []
    for step in range(2):
        t = 100.0 * step
        events += [
            NS(name=name, device_type=cpu, cpu_parent=None, kernels=[], cpu_children=[], time_range=span(t, t + 5)),
            NS(name="_matmul_kernel_tma", device_type=cuda, time_range=span(t + 10, t + 18.5)),
            NS(name=name, device_type=cuda, is_user_annotation=True, time_range=span(t + 9, t + 19)),
            NS(name="triton_poi_fused_gelu_0", device_type=cuda, time_range=span(t + 20, t + 23)),  # outside
            NS(name="aten::mm", device_type=cpu, cpu_parent=None, cpu_children=[], input_shapes=[[16, 4096], [4096, 4096]],
               kernels=[NS(name="nvjet_sm90", duration=9.0)], time_range=span(t + 30, t + 31)),
        ]  # fmt: skip
    found = attribute(events, steps=2)
    key = ("mm", (16, 4096), (4096, 4096))
    assert found["plugin", key].calls == 1 and found["plugin", key].per_call_us == pytest.approx(8.5)
    assert found["aten", key].calls == 1 and found["aten", key].per_call_us == pytest.approx(9.0)


def test_profiles_are_taken_in_rounds_of_alternating_order(monkeypatch):
    """``profile_rounds`` profiles each arm once a round, the order reversed every round, and
    ``median_profile`` gives one arm's typical step (a key missing from a round counts 0 there)."""
    from inductor_mm_plugin.comparison import profile
    from inductor_mm_plugin.comparison.profile import Kernels, Profile

    order = []
    key = ("mm", (8, 16), (16, 4))

    def fake_profile(step):
        order.append(step())
        us = 10.0 + len(order)
        if len(order) == 7:
            return None  # round 4's first profile saw no GPU time
        return Profile({("plugin", key): Kernels(us, 1)} if len(order) != 3 else {}, 100.0 + len(order))

    monkeypatch.setattr(profile, "profile_step", fake_profile)
    got = profile.profile_rounds({"stock": lambda: "stock", "plugin": lambda: "plugin"}, rounds=4)
    assert order == ["stock", "plugin", "plugin", "stock", "stock", "plugin", "plugin", "stock"]
    # Round 4 is left out for both arms: the lists stay paired by round.
    assert [p.total_us for p in got["stock"]] == [101.0, 104.0, 105.0]
    assert [p.total_us for p in got["plugin"]] == [102.0, 103.0, 106.0]
    typical = profile.median_profile(got["plugin"])  # 12 us, nothing (round 2), 16 us
    assert typical.time("plugin", key).us == 12.0 and typical.total_us == 103.0
    assert profile.median_profile([]) is None
