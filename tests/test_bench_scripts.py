"""The bench scripts' logic on the CPU: shape draws and classes (shapes.py), a wrong result
kept out of the timing, two versions of the package in one process (ab.py), the model
clients (models.py). No timing is checked here, only the bookkeeping around it."""

import dataclasses
import importlib
import os
import pathlib
import statistics
import subprocess
import sys
import time

import pytest
import torch

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import _compiling  # noqa: E402
import _timing  # noqa: E402
import shapes  # noqa: E402


def test_random_shapes_follow_the_seed_and_the_caps():
    drawn = shapes.random_shapes(200, seed=1234)
    assert drawn == shapes.random_shapes(200, seed=1234)
    assert drawn != shapes.random_shapes(200, seed=1235)
    keys = {(s["M"], s["N"], s["K"], s["dtype"], s["layout"]) for s in drawn}
    assert len(keys) == 200
    for s in drawn:
        assert 1 <= s["M"] <= 16384 and 64 <= s["N"] <= 32768 and 64 <= s["K"] <= 32768
        flops, nbytes = shapes.flops_bytes(s["M"], s["N"], s["K"])
        assert flops <= shapes.FLOP_CAP and nbytes <= shapes.BYTE_CAP
    assert {s["dtype"] for s in drawn} == {"bf16", "fp16"} and {s["layout"] for s in drawn} == set(shapes.LAYOUTS)
    sizes = [s[k] for s in drawn for k in "MNK" if s[k] >= 8]
    assert 0.15 < sum(x % 8 != 0 for x in sizes) / len(sizes) < 0.35  # about a quarter not multiples of 8


def test_model_shapes_are_distinct_and_sliced_by_tensor_parallelism():
    table = shapes.model_shapes()
    keys = [(s["M"], s["N"], s["K"], s["layout"]) for s in table]
    assert len(keys) == len(set(keys))
    assert (1, 4096, 4096, "linear") in keys  # Llama-3 8B q_proj at M = 1
    assert (8192, 14336 // 8, 4096, "linear") in keys  # column-parallel gate_proj, tp 8
    assert (8192, 8192, 28672 // 8, "linear") in keys  # row-parallel down_proj of the 70B, tp 8
    assert (197 * 64, 3072, 768, "linear") in keys  # ViT-B fc1 on 64 images
    assert (512, 4800, 1600, "row") in keys  # GPT-2 XL's Conv1D c_attn: a row-major B
    assert (2048, 128, 4096, "linear") in keys  # one KV head per rank at tp 8 (8 KV heads)


def test_shape_class_and_the_class_summary():
    assert shapes.shape_class(1, 4096, 4096, "bf16", "linear", True) == "16bit/linear/aligned/M1/N1025-4096/K1025-4096"
    assert shapes.shape_class(5000, 100, 20000, "fp16", "row", False) == "16bit/row/unaligned/M>4096/N1-1024/K>4096"
    assert shapes.shape_class(4096, 4096, 4096, "tf32", "row", True).startswith("fp32/")
    assert shapes.is_aligned(4096, 4096, "bf16") and not shapes.is_aligned(4095, 4096, "bf16")
    rows = [dict(M=1, N=64, K=64, dtype="bf16", layout="row", shape_class="c", ratio=r) for r in (0.8, 0.9, 0.95)]
    summary = shapes.class_summary(rows + [dict(rows[0], ratio=None, err="wrong")])
    assert summary["c"]["n"] == 3 and summary["c"]["worst"] == 0.8 and summary["c"]["verdict"] == "loses"
    assert summary["c"]["worst_shape"] == "1x64x64 bf16 row"


def test_a_wrong_result_is_reported_and_not_timed():
    import inductor_mm_plugin  # noqa: F401

    real = _timing.plugin_runtime()

    class Corrupting:
        def launch(self, a, b, out, *args, **kwargs):
            plan = real.launch(a, b, out, *args, **kwargs)
            out[-1, -1] += 100  # one wrong element
            return plan

    row = shapes.bench_shape(dict(M=8, N=16, K=16, dtype="bf16", layout="linear"), Corrupting(), 1, "cpu")
    assert row["err"] and row["ratio"] is None and row["plugin_ms"] is None
    good = shapes.bench_shape(dict(M=8, N=16, K=16, dtype="bf16", layout="linear"), real, 1, "cpu")
    assert "err" not in good and good["ratio"] > 0 and len(good["ratio_rounds"]) == 1


def test_check_rows_cover_every_block_edge():
    assert _timing.check_rows(300) is None
    rows = _timing.check_rows(16384)
    assert len(rows) <= 400 and rows[0] == 0 and rows[-1] == 16383
    assert _timing.percentile([1, 2, 3, 4, 5], 50) == 3 and _timing.percentile([1.0, 2.0], 10) == pytest.approx(1.1)
    assert _timing.rotation(1) == 64 and _timing.rotation(10 * _timing.L2_BYTES) == 1


def test_ab_loads_a_second_version_under_its_own_name(tmp_path):
    import ab

    import inductor_mm_plugin  # noqa: F401

    if subprocess.run(["git", "-C", str(BENCH), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("needs the repository's git history")
    snapshot = tmp_path / "snap"
    ab.export("HEAD", snapshot)
    base, label = ab.load_version(str(snapshot), "inductor_mm_plugin_testbase", tmp_path)
    assert label and base.__name__ == "inductor_mm_plugin_testbase"
    a, b = torch.randn(8, 24), torch.randn(24, 16)
    out = torch.ops.inductor_mm_plugin_testbase.mm(a, b)
    assert _timing.matmul_error(out, a, b) is None
    assert _timing.plugin_runtime(base).chosen_config(a, b) is not None  # its own launch plans


def test_models_tiny_client_builds_and_reports():
    pytest.importorskip("transformers")
    import models

    client = models.Client("llama-decode", "cpu", tiny=True)
    step = client.arm(lambda m: m)  # eager: the step, not a compile
    ref = client.reference()
    first, again = step(), step()
    assert torch.equal(first, again)  # the decode step rewinds its cache: the same work every call
    assert models.relative_error(first, ref) < 0.05
    rows = [dict(model="m", workload="decode", arm="stock", ms=2.0, speedup=1.0, ratio_spread="", compile_s=10.0,
                 err=1e-3, routed_sites=0, sites=0, cudagraphs=True),
            dict(model="m", workload="decode", arm="plugin", ms=1.0, speedup=2.0, ratio_spread="1.9-2.1", compile_s=20.0,
                 err=1e-3, routed_sites=3, sites=3, cudagraphs=True)]  # fmt: skip
    text = models.table(rows)
    assert "geomean 2.000" in text and "compile time at most 2.00x" in text and "MISSED" in text


def test_models_compile_rounds_alternate_and_ratios_are_per_round(monkeypatch):
    """Compile time is compared like step time: arms in rounds of alternating order, the
    median of per-round ratios (one compile's time moves 10-20% from run to run)."""
    order = []
    seconds = iter([10.0, 13.0, 12.0, 11.0, 9.0, 12.0])
    def compile_once(client, arm, device, cold):
        order.append((arm, cold))
        t = next(seconds)
        return t, {"compile_fx_inner": t / 2}, {"timed": int(t) % 2, "precompile_s": t / 10}

    monkeypatch.setattr(_compiling, "compile_once", compile_once)
    cold, cold_phases, cold_routing = _compiling.compile_rounds(None, ["stock", "plugin"], "cpu", 2, cold=True, flip=True)
    assert order == [("plugin", True), ("stock", True), ("stock", True), ("plugin", True)]
    assert cold == {"stock": [13.0, 12.0], "plugin": [10.0, 11.0]}
    assert cold_phases["plugin"] == [{"compile_fx_inner": 5.0}, {"compile_fx_inner": 5.5}]
    assert _compiling.median_phases(cold_phases["plugin"]) == {"compile_fx_inner": 5.25}
    # Each round's routing clock, rounded, in the order of the rounds.
    assert cold_routing["plugin"] == [{"timed": 0, "precompile_s": 1.0}, {"timed": 1, "precompile_s": 1.1}]
    warm, _, _ = _compiling.compile_rounds(None, ["stock", "plugin"], "cpu", 1, cold=False, flip=False)
    assert warm == {"stock": [9.0], "plugin": [12.0]} and order[-2:] == [("stock", False), ("plugin", False)]
    rows = [dict(arm="stock", first_compile_s=8.0), dict(arm="plugin", first_compile_s=16.0)]
    _compiling.add_compile_rounds(rows, cold, warm)
    stock, plugin = rows  # the first compiles shared a cache dir: not cold, not in the rounds
    assert plugin["compile_s_rounds"] == [10.0, 11.0] and stock["compile_s_rounds"] == [13.0, 12.0]
    assert plugin["compile_s"] == 10.5 and plugin["first_compile_s"] == 16.0
    assert plugin["compile_ratio"] == pytest.approx(round(statistics.median([10 / 13, 11 / 12]), 3))
    assert plugin["warm_compile_ratio"] == pytest.approx(1.333) and plugin["warm_compile_s"] == 12.0
    assert "compile_ratio" not in stock
    assert _compiling.compile_ratio(plugin, stock) == plugin["compile_ratio"]
    assert _compiling.compile_ratio(dict(compile_s=3.0), dict(compile_s=2.0)) == 1.5  # rows of one compile


def test_models_phase_gaps_name_where_the_extra_compile_time_went():
    ours = {"compile_fx_inner": 6.0, "routing.decide_s": 1.2, "GraphLowering.run": 1.0, "tiny": 0.04}
    theirs = {"compile_fx_inner": 4.0, "GraphLowering.run": 1.1}
    assert _compiling.phase_gaps(ours, theirs) == "compile_fx_inner +2.00s, routing.decide_s +1.20s"
    assert _compiling.phase_gaps(theirs, theirs) == "none over 0.05 s"
    # A phase a round lacks counts as 0 s there, so the median sees it.
    assert _compiling.median_phases([{"a": 1.0}, {"a": 3.0, "b": 2.0}, {"a": 2.0}]) == {"a": 2.0, "b": 0.0}
    kept = _compiling.median_phases([{"a": 3.0, "b": 2.0, "routing.precompile_s": 0.1, "after_compile_s": 0.5}], top=1)
    assert kept == {"a": 3.0, "after_compile_s": 0.5, "routing.precompile_s": 0.1}  # the clocks always


@pytest.mark.parametrize("layout, a_stride, b_stride", [
    ("row", (48, 1), (24, 1)), ("linear", (48, 1), (1, 48)), ("t_row", (1, 40), (24, 1)), ("t_linear", (1, 40), (1, 48)),
])  # fmt: skip
def test_operands_have_the_layout_they_are_named_for(layout, a_stride, b_stride):
    a, b = _timing.make_operands(40, 24, 48, torch.float32, layout, device="cpu")
    assert (a.shape, b.shape, a.stride(), b.stride()) == ((40, 48), (48, 24), a_stride, b_stride)


def test_anchor_report_names_the_classes_below_inductors_triton():
    row = lambda cls, ours, theirs: dict(shape_class=cls, ratio=ours, inductor_triton_ratio=theirs,  # noqa: E731
                                         plugin_vs_inductor_triton=ours / theirs, M=8, N=8, K=8, layout="row")  # fmt: skip
    lines = shapes.anchor_report([row("a", 1.2, 1.0), row("a", 0.9, 1.0), row("b", 0.5, 0.8), dict(shape_class="c", ratio=1)])
    assert "2 classes" in lines[0] and "at or above theirs in 1 of 2 classes" in lines[0] and "MISSED" in lines[0]
    assert len(lines) == 2 and "below: b" in lines[1] and "plugin 0.500" in lines[1]
    assert shapes.anchor_report([dict(shape_class="c", ratio=1)]) == []


def test_models_cold_plugin_forgets_before_and_keeps_what_the_block_learned(monkeypatch, tmp_path):
    """A cold compile starts from nothing (decisions, plans, a routing cache folder of its own);
    the warm compiles after it read the decisions it made."""
    from inductor_mm_plugin.inductor import measure

    monkeypatch.setenv("INDUCTOR_MM_PLUGIN_CACHE_DIR", str(tmp_path))
    measure._MEMORY["before"] = "an old decision"
    with _compiling.cold_plugin():
        assert "before" not in measure._MEMORY
        folder = os.environ["INDUCTOR_MM_PLUGIN_CACHE_DIR"]
        assert folder != str(tmp_path) and os.path.isdir(folder)
        measure._MEMORY["made"] = "a decision of this compile"
    assert os.environ["INDUCTOR_MM_PLUGIN_CACHE_DIR"] == str(tmp_path)
    assert measure._MEMORY.pop("made") == "a decision of this compile" and os.path.isdir(folder)


def test_models_a_stock_compile_leaves_the_plugin_alone_and_a_warm_one_keeps_its_decisions(monkeypatch):
    """A stock arm's compile, cold or warm, forgets nothing of the plugin's (a reset there made
    the plugin's next warm compile measure every site again); a warm plugin compile forgets
    the plugin's plans and compiled kernels but keeps its decisions."""
    from inductor_mm_plugin import runtime
    from inductor_mm_plugin.inductor import measure

    forgot = []
    monkeypatch.setattr(_compiling, "forget_kernels", lambda: forgot.append("kernels"))
    monkeypatch.setattr(_compiling, "_forget_compiled_kernels", lambda: forgot.append("kernels"))  # what cold_plugin calls
    monkeypatch.setattr(runtime, "clear_plans", lambda: forgot.append("plans"))
    measure._MEMORY["kept"] = "a decision"
    for cold in (True, False):
        with _compiling.forgotten("stock", cold), _compiling.forgotten("stock_again", cold):
            pass
    assert forgot == [] and measure._MEMORY["kept"] == "a decision"
    with _compiling.forgotten("plugin", cold=False):
        assert forgot == ["kernels"] and measure._MEMORY["kept"] == "a decision"
    with _compiling.forgotten("plugin_max_autotune", cold=True):
        assert "kept" not in measure._MEMORY and forgot[-1] == "kernels"


def x_of(*shape):
    return torch.randn(*shape)


def test_models_routing_clock_counts_what_a_compile_timed_and_compiled(monkeypatch):
    from inductor_mm_plugin.inductor import measure

    monkeypatch.setattr(measure, "precompile", lambda sites: len(sites))
    monkeypatch.setattr(measure, "compile_routed", lambda sites: len(sites) - 1)
    monkeypatch.setattr(measure, "compile_predicted", lambda sites: 2 * len(sites))
    monkeypatch.setattr(measure, "measure", lambda *args, **kwargs: "timed")
    from inductor_mm_plugin.runtime import ahead

    monkeypatch.setattr(ahead, "_compile_call", lambda *call: time.sleep(0.01 * len(call)) or True)
    with _compiling.routing_clock() as spent:
        measure.precompile([1, 2, 3])
        measure.compile_routed([1, 2])
        measure.compile_predicted([1, 2])
        measure.measure("mm")
        fp16 = [x_of(2, 3).half(), x_of(3, 2).half(), x_of(2, 2).half()]  # another kernel than fp32's
        ahead.compile_calls([(x_of(2, 3), x_of(3, 2), x_of(2, 2)), (*fp16, None, 1)], 2)
    assert (spent["precompiled"], spent["behind"], spent["predicted"], spent["timed"]) == (3, 1, 4, 1)
    assert spent["precompile_s"] >= 0
    assert spent["kernel_compiles"] == 2 and 0.04 <= spent["kernel_compile_max_s"] < spent["kernel_compile_sum_s"]
    assert measure.compile_routed([1, 2]) == 1 and measure.measure() == "timed"  # put back as they were


def test_models_routing_clock_counts_the_ops_first_calls_and_their_compiles(monkeypatch):
    """The model's own calls of the plugin's ops (main thread, outside the timing) and the
    plugin kernels Triton's JIT compiled outside the ahead-of-time compiles are counted; the
    JIT hook in place before is called on and put back."""
    import types

    import triton
    from inductor_mm_plugin.inductor import measure
    from inductor_mm_plugin.runtime import ahead
    launch_module = importlib.import_module("inductor_mm_plugin.runtime.launch")

    seen = []
    monkeypatch.setattr(triton.knobs.runtime, "jit_post_compile_hook", lambda **kw: seen.append(kw["fn"].module))
    before = triton.knobs.runtime.jit_post_compile_hook
    ours, theirs = (types.SimpleNamespace(module=m) for m in ("inductor_mm_plugin.kernels.matmul", "user.kernels"))
    monkeypatch.setattr(launch_module, "_matmul", lambda *args: time.sleep(0.02))
    monkeypatch.setattr(measure, "decide", lambda *args: launch_module._matmul() or triton.knobs.runtime.jit_post_compile_hook(fn=ours))  # fmt: skip
    monkeypatch.setattr(ahead, "_compile_call", lambda *call: triton.knobs.runtime.jit_post_compile_hook(fn=ours))
    # A SwiGLU pair's timing and its kernels compiled ahead (qwen2-prefill's fused kernel and
    # stock form's silu*mul read as compiled at calls on the H100 at fa33f33 before these two).
    monkeypatch.setattr(measure, "decide_swiglu", lambda *args: triton.knobs.runtime.jit_post_compile_hook(fn=ours))
    monkeypatch.setattr(ahead, "compile_swiglu", lambda *call: triton.knobs.runtime.jit_post_compile_hook(fn=ours))
    with _compiling.routing_clock() as spent:
        launch_module._matmul("mm")  # the model's call: counted
        measure.decide("mm")  # timing a site: neither its call nor its compile counted
        ahead._compile_call(1)  # compiled ahead: not counted
        measure.decide_swiglu([], True)  # timing a pair: not counted
        ahead._compile_quietly((1,), swiglu=True)  # a pair compiled ahead: not counted
        hook = triton.knobs.runtime.jit_post_compile_hook
        jit = types.SimpleNamespace(arg_names=["a_ptr", "M", "BLOCK"])
        at_call = types.SimpleNamespace(module=ours.module, name="k", jit_function=jit)
        compiled = {"num_warps": 4, "num_stages": 3, "constants": {(2,): 64, (1,): 1},
                    "configs": [{(0,): [["tt.divisibility", 16]]}]}  # fmt: skip
        hook(fn=at_call, compile=compiled, repr="k(a_ptr: ())")  # compiled at a call: counted
        hook(fn=theirs, repr="theirs()")  # not the plugin's kernel
    assert 0.02 <= spent["op_calls_s"] < 0.04 and spent["call_compiles"] == 1
    # Which specialization compiled where, named from Triton's compile kwargs (not its repr,
    # which pairs parameters with characters of the cache key); the other compiles passed none.
    described = "k[warps=4, stages=3] constants={'BLOCK': 64, 'M': 1} attrs={'a_ptr': [['tt.divisibility', 16]]}"
    nothing = "?[warps=None, stages=None] constants={} attrs={}"
    assert spent["specializations"] == {"at_calls": [described], "ahead": [nothing] * 4}
    assert spent["kernel_compiles"] == 2  # the matmul's and the pair's compiled ahead
    assert seen == ["inductor_mm_plugin.kernels.matmul"] * 5 + ["user.kernels"]  # the earlier hook still ran
    assert triton.knobs.runtime.jit_post_compile_hook is before


def _a_kernel(x):
    pass


def test_models_forget_kernels_drops_plans_and_compiled_kernels(monkeypatch):
    import types

    from triton.runtime.jit import JITFunction

    launch_mod = importlib.import_module("inductor_mm_plugin.runtime.launch")  # runtime.launch is also a function
    kernel = JITFunction(_a_kernel)  # a GPU kernel object, whether or not the interpreter runs the tests
    kernel.device_caches.update({0: "device 0's compiled kernels"})  # (a defaultdict: [0] needs a GPU driver)
    monkeypatch.setitem(sys.modules, "inductor_mm_plugin._kernels_of_a_test", types.SimpleNamespace(k=kernel))
    monkeypatch.setitem(launch_mod._PLANS, "a signature", "its plan")
    monkeypatch.setitem(launch_mod._FAST_PLANS, "a signature", "its plan")
    _compiling.forget_kernels()
    assert not launch_mod._PLANS and not launch_mod._FAST_PLANS and not kernel.device_caches


def test_sweep_selector_fit_recovers_each_configs_time_model_and_resumes(tmp_path):
    """Rows whose times follow known coefficients: the fit gives them back (none negative),
    with the sweep's provenance; and a sweep rerun with the same seed skips what is done."""
    import sweep_selector

    from inductor_mm_plugin.configs import selector

    cfg = sweep_selector.GRID[3]
    true = [0.05, 1.5, 2.0, 0.0]
    rows = []
    for i, (M, N, K) in enumerate([(512, 512, 4096), (2048, 1024, 1024), (8192, 8192, 512), (300, 7000, 9000),
                                   (4096, 256, 16384), (1024, 3072, 3072), (640, 640, 640)]):  # fmt: skip
        us = sum(c * f for c, f in zip(true, selector.features(M, N, K, cfg)))
        rows.append(dict(M=M, N=N, K=K, layout="row", draw="random", seed=5, index=i, date="d", commit="c", gpu="g",
                         results=[dict(config=cfg.short(), ms=us / 1e3)]))  # fmt: skip
    table = sweep_selector.fit(rows, "cmd")
    (entry,) = table["entries"]
    assert entry["points"] == 7 and not entry["skinny"] and table["features"] == selector.FEATURES
    assert all(c >= 0 for c in entry["coef"])
    assert entry["coef"] == pytest.approx(true, abs=1e-4)
    assert table["provenance"]["seeds"] == [("random", 5)] and table["provenance"]["command"] == "cmd"
    # Resuming: the shapes of a seed already in the file are not drawn again.
    drawn = sweep_selector.drawn("random", 3, seed=9)
    assert drawn == sweep_selector.drawn("random", 3, seed=9) and [s["index"] for s in drawn] == [0, 1, 2]


def test_sweep_selector_times_split_tail_entries_only_where_a_last_round_spills():
    """The grid's split_tail entries reach a shape only where its tiles fill a whole round of
    the SMs and part of one more, and the split tiles' slices make one round at most (what
    ``--tail-only`` keeps of a draw)."""
    import sweep_selector

    tails = {c.short(): c for c in sweep_selector.GRID if c.split_tail}
    assert tails and all(c.num_warps == 8 and c.flatten for c in tails.values())
    got = {c.short() for c in sweep_selector.configs_for(512, 4608, 3072) if c.split_tail}
    assert got == {"tma 128x128x64 w8 s4 split2 tail sub flat",
                   "tma 128x128x64 w8 s4 split4 tail sub flat"}  # 144 tiles of 128x128: 12 spill  # fmt: skip
    assert not any(c.split_tail for c in sweep_selector.configs_for(512, 1792, 3584))  # 56 tiles: under a round
    assert not any(c.split_tail for c in sweep_selector.configs_for(2048, 8448, 4096))  # 128x128: 4 whole rounds
    spills = [s for s in sweep_selector.drawn("models", 60, seed=3)
              if any(c.split_tail for c in sweep_selector.configs_for(s["M"], s["N"], s["K"]))]
    for s in spills:
        for c in sweep_selector.configs_for(s["M"], s["N"], s["K"]):
            if c.split_tail:
                n = -(-s["M"] // c.block_m) * -(-s["N"] // c.block_n)
                assert n > 132 and 0 < n % 132 * c.split_k <= 132


def test_sweep_selector_leave_one_out_reads_each_pick_off_its_own_row():
    """Two configs whose times follow known models, one faster on short K and one on long K:
    each shape's pick, from a fit without its row, is the faster one, so the geomean of the
    picks equals the per-shape best's; a pointer config competes only on aligned rows."""
    import sweep_selector

    from inductor_mm_plugin.configs import selector

    tma = sweep_selector.GRID[3]  # 128x128x64
    ptr = next(c for c in sweep_selector._ptr_inductor((2048, 2048, 64)) if c.short() == "ptr 64x64x64 w8 s3")
    true = {tma.short(): [0.004, 1.0, 6.0, 0.0], ptr.short(): [0.008, 0.5, 1.0, 0.0]}
    rows = []
    for i, K in enumerate([64, 96, 128, 192, 256, 512, 8192, 12288, 16384, 24576, 32768, 65536]):
        M = N = 2048
        times = {c.short(): sum(a * f for a, f in zip(true[c.short()], selector.features(M, N, K, c))) for c in (tma, ptr)}
        cublas = min(times.values())
        results = [dict(config=n, ms=t / 1e3, ratio=cublas / t) for n, t in times.items()]
        rows.append(dict(M=M, N=N, K=K, layout="row", aligned=True, draw="random", seed=5, index=i,
                         default_ratio=0.5, results=results))  # fmt: skip
    got = sweep_selector.leave_one_out(rows)
    assert got["shapes"] == 12 and got["picked"] == pytest.approx(1.0) and got["within_5pct"] == 1.0
    assert got["default"] == pytest.approx(0.5) and got["best"] == pytest.approx(1.0)
    # TMA entries only: the short-K rows lose what the pointer config gave them.
    assert sweep_selector.leave_one_out(rows, ("tma",))["picked"] < 1.0
    # An unaligned row ran on copies: only a TMA pick counts there.
    rows = [dict(r, aligned=False) for r in rows]
    assert sweep_selector.leave_one_out(rows)["picked"] == sweep_selector.leave_one_out(rows, ("tma",))["picked"]


def test_models_site_check_reads_the_profiles_of_both_arms():
    """Each routed site's kernels in the plugin arm's profiles against stock's for the same
    shapes, round by round: right, wrong (named), or unseen; sites not routed do not count."""
    import types

    import models
    from inductor_mm_plugin.comparison.profile import Kernels, Profile, site_key

    def record(op, shapes, routed=True, module="layers.0.up"):
        site = types.SimpleNamespace(op=op, shapes=shapes, phase="forward", module=module)
        return types.SimpleNamespace(site=site, routed=routed, measured=None)

    fast, slow, unseen, kept = (record("mm", ((64, 32), (32, 16))), record("addmm", ((16,), (64, 32), (32, 48))),
                                record("mm", ((8, 8), (8, 8))), record("mm", ((4, 4), (4, 4)), routed=False))  # fmt: skip
    k_fast, k_slow = site_key("mm", fast.site.shapes), site_key("addmm", slow.site.shapes)
    plugin = Profile({("plugin", k_fast): Kernels(10.0, 2), ("plugin", k_slow): Kernels(30.0, 1)}, 100.0)
    stock = Profile({("aten", k_fast): Kernels(12.0, 2), ("aten", k_slow): Kernels(20.0, 1)}, 100.0)
    got = models.site_check([fast, slow, unseen, kept], [plugin], [stock])
    assert got["sites_right"] == 0.5 and got["sites_unseen"] == 1
    assert got["sites_wrong"] == ["forward layers.0.up addmm 64x32@32x48 (30.0 us against 20.0, 0.667x over 1 rounds)"]
    assert [(r["site"], r["timed"], r["in_model"]) for r in got["site_ratios"]] == [
        ("forward layers.0.up mm 64x32@32x16", None, 1.2), ("forward layers.0.up addmm 64x32@32x48", None, 0.667)]
    assert models.site_check([fast, kept], [], [stock]) == dict(sites_right=None, sites_wrong=[], sites_unseen=1,
                                                                site_ratios=[])  # fmt: skip
    # A site timed at compile: its timing stands beside its ratio in the model.
    from inductor_mm_plugin.inductor.measure import Measurement

    timed = types.SimpleNamespace(site=slow.site, routed=True, measured=Measurement(10.0, 10.3, (1.03, 1.01, 1.05), True))
    got = models.site_check([timed], [plugin], [stock])
    assert got["site_ratios"][0]["timed"] == 1.03 and got["site_ratios"][0]["timed_rounds"] == [1.03, 1.01, 1.05]
    assert got["sites_wrong"][0].endswith("0.667x over 1 rounds; timed at compile 1.030x, 1.010-1.050)")
    # A shape that unrouted sites share: the routed call meets stock's own call of it, not the mean.
    shared = record("mm", ((64, 32), (32, 16)), module="layers.0.down")
    plugin = Profile({("plugin", k_fast): Kernels(9.0, 1), ("aten", k_fast): Kernels(10.0, 2)}, 100.0)
    stock = Profile({("aten", k_fast): Kernels(18.0, 3)}, 100.0)  # 5 + 5 for those kept, 8 for the routed one
    assert models.site_check([shared], [plugin], [stock])["sites_wrong"] == [
        "forward layers.0.down mm 64x32@32x16 (9.0 us against 8.0, 0.889x over 1 rounds)"]
    # Rounds: each round's plugin profile meets the same round's stock profile, and the verdict
    # is the median of the per-round ratios. The GPU's clock fell in round 2 (both arms slower):
    # paired by round, the plugin wins every round; a median of each arm alone would not say so.
    plugins = [Profile({("plugin", k_fast): Kernels(us, 1)}, 100.0) for us in (10.0, 14.0, 10.2)]
    stocks = [Profile({("aten", k_fast): Kernels(us, 1)}, 100.0) for us in (10.5, 14.5, 10.1)]
    got = models.site_check([fast], plugins, stocks)
    assert got["sites_right"] == 1.0, got
    # A stock round that did not see the site is left out, not paired with another round.
    stocks[1] = Profile({}, 100.0)
    plugins[0] = Profile({("plugin", k_fast): Kernels(10.8, 1)}, 100.0)
    got = models.site_check([fast], plugins, stocks)
    assert got["sites_right"] == 0.0 and "0.981x over 2 rounds" in got["sites_wrong"][0], got


@pytest.mark.parametrize("script", sorted(p.stem for p in BENCH.glob("*.py")))
def test_bench_scripts_name_nothing_undefined(script):
    """Every global name a bench script's functions read is defined in the script or a
    builtin: the GPU-only paths (models.py's site check, which once named a function a
    refactor had removed) never run in CPU CI, so a missing name would surface on the GPU."""
    import builtins
    import importlib
    import symtable

    module = importlib.import_module(script)
    source = (BENCH / f"{script}.py").read_text()
    missing = set()

    def walk(table):
        for child in table.get_children():
            if child.get_type() == "function":
                for sym in child.get_symbols():
                    if sym.is_global() and sym.is_referenced() and not sym.is_assigned():
                        name = sym.get_name()
                        if not hasattr(module, name) and not hasattr(builtins, name):
                            missing.add(f"{child.get_name()}: {name}")
            walk(child)

    walk(symtable.symtable(source, f"{script}.py", "exec"))
    assert not missing, sorted(missing)


def test_relative_errors_against_float64_and_the_numerics_report():
    """Issue 31's numerics target: the plugin's error against float64 within 1.1x of cuBLAS's."""
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(40, 24, generator=g), torch.randn(24, 16, generator=g)
    exact = (a.double() @ b.double()).float()
    off = exact.clone()
    off[3] += 1.0  # one row wrong
    errs = _timing.relative_errors({"exact": exact, "off": off}, a, b)
    assert errs["exact"] < 1e-6 < errs["off"]
    assert _timing.relative_errors({"off": off}, a, b, rows=[0, 1])["off"] < 1e-6  # the wrong row not compared
    assert _timing.relative_errors({"z": torch.zeros(40, 16)}, torch.zeros(40, 24), b) == {"z": 0.0}
    assert _timing.error_ratio(2.0, 1.0) == 2.0 and _timing.error_ratio(0.0, 0.0) == 1.0
    assert _timing.error_ratio(1e-3, 0.0) > 1e20
    row = lambda r: dict(err_ratio=r, plugin_err=r * 1e-3, cublas_err=1e-3, M=8, N=8, K=8, dtype="bf16", layout="row")  # noqa: E731
    lines = shapes.numerics_report([row(1.0), row(1.05), row(1.5), dict(ratio=1.0)])
    assert "on 2 of 3 shapes" in lines[0] and "MISSED" in lines[0] and len(lines) == 2 and lines[1].strip().startswith("1.5")
    assert "ok" in shapes.numerics_report([row(1.0)])[0] and shapes.numerics_report([dict(ratio=1.0)]) == []


def test_models_plugin_unfused_arm_compiles_without_swiglu_fusion_and_is_reported(monkeypatch):
    import _compiling
    import models

    seen = {}
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: seen.update(kwargs) or model)
    _compiling.compile_fn("plugin_unfused")("model")
    assert seen["options"] == {"fuse_swiglu": False} and seen["backend"] == _timing.plugin_backend()
    seen.clear()
    _compiling.compile_fn("plugin")("model")
    assert "options" not in seen  # the default arm keeps the defaults
    rows = [dict(model="m", workload="prefill", arm=arm, ms=ms, speedup=2.0 / ms, ratio_spread="", compile_s=10.0,
                 err=1e-3, routed_sites=0, sites=0, cudagraphs=True)
            for arm, ms in (("stock", 2.0), ("plugin", 2.0), ("plugin_unfused", 1.6))]  # fmt: skip
    text = models.table(rows)
    assert "plugin_unfused vs stock: lowest 1.250" in text and "geomean 1.250" in text


def test_sweep_swiglu_candidates_fit_and_draws_are_timed_sizes():
    import sweep_swiglu

    from inductor_mm_plugin.configs import swiglu_config
    from inductor_mm_plugin.inductor.measure import SWIGLU_LOSES_UP_TO_M

    names = [c.short() for c in sweep_swiglu.CONFIGS]
    assert len(set(names)) == len(names) and swiglu_config() in sweep_swiglu.CONFIGS
    assert all(sweep_swiglu.fits(c) for c in sweep_swiglu.CONFIGS)
    too_deep = dataclasses.replace(swiglu_config(), num_stages=5)  # 5 x 48 KiB of tiles
    assert not sweep_swiglu.fits(too_deep)
    shapes = sweep_swiglu.drawn(50, seed=7)
    assert shapes == sweep_swiglu.drawn(50, seed=7) and shapes != sweep_swiglu.drawn(50, seed=8)
    assert all(SWIGLU_LOSES_UP_TO_M < M <= 16384 and d % 64 == 0 and f % 64 == 0 and 512 <= min(d, f)
               for M, d, f in shapes)  # fmt: skip


def test_epilogue_floors_pair_each_round_and_report_the_bar():
    """Issue 32's floors in bench_epilogue.py: ratios within each round, median over rounds;
    the report counts the blocks above the 1.05 bar and marks a block without cuBLASLt's GELU."""
    import argparse

    import bench_epilogue

    # Round 2 ran with the GPU's clock down (every arm slower): per-round pairing keeps it out.
    times = {"stock": [1.30, 2.60, 1.31], "plugin": [1.20, 2.40, 1.21], "fused": [1.10, 2.30, 1.09],
             "bare_plugin": [1.00, 2.00, 1.00], "bare_cublas": [0.95, 1.90, 0.96],
             "cublaslt_gelu": [1.02, 2.04, 1.03], "fused_one_exp": [1.04, 2.08, 1.05],
             "op_fused": [1.05, 2.10, 1.06]}  # fmt: skip
    row = bench_epilogue.floor_fields(times)
    assert row["op_fused_over_bare"] == pytest.approx(1.05) and row["op_fused_ms"] == 1.06
    assert row["op_fused_vs_stock"] == pytest.approx(1.30 / 1.05)
    assert row["fused_one_exp_over_bare"] == pytest.approx(1.04) and row["fused_one_exp_ms"] == 1.05
    assert row["fused_one_exp_vs_fused"] == pytest.approx(1.10 / 1.04)
    assert row["fused_one_exp_vs_stock"] == pytest.approx(1.30 / 1.04)
    assert row["fused_over_bare_rounds"] == pytest.approx([1.10, 1.15, 1.09])
    assert row["fused_over_bare"] == pytest.approx(1.10)
    assert row["bare_plugin_vs_cublas"] == pytest.approx(0.95)
    assert row["cublaslt_over_bare"] == pytest.approx(1.02 / 0.95)
    assert row["fused_vs_cublaslt"] == pytest.approx(1.02 / 1.10)
    assert row["fused_vs_stock"] == pytest.approx(1.30 / 1.10) and row["fused_ms"] == 1.10
    silu = bench_epilogue.floor_fields({k: v for k, v in times.items() if k not in ("cublaslt_gelu", "fused_one_exp")})
    assert "cublaslt_over_bare" not in silu and "cublaslt_gelu_ms" not in silu and "fused_one_exp_ms" not in silu

    base = dict(M=8192, hidden=1024, ffn=4096, K=1024, stock_ms=1.3, plugin_ms=1.2, speedup=1.08, speedup_rounds=None)
    rows = [dict(base, block="Linear+GELU", **row, fused_kernels=1, fused_one_exp_kernels=1),
            dict(base, block="Linear+SiLU", **{**silu, "fused_over_bare": 1.04}), dict(base, block="SwiGLU MLP")]
    args = argparse.Namespace(max_autotune=False)
    meta = dict(date="d", gpu="g", torch="t", triton="tr", plugin="p", commit="c", rounds=3, sm_clock_start=0,
                tokens=[2048, 8192], widths=["4096x14336", "2048x8192", "1024x4096"])  # fmt: skip
    md = bench_epilogue.to_markdown(args, meta, rows, None)
    assert "| Linear+GELU | 8192 | 1024 | 4096 | 0.960 | 1.000 | 1.100 | 1.030 | 1.100 (1.090–1.150) |" in md
    assert "| Linear+SiLU | 8192 | 1024 | 4096 | 0.960 | 1.000 | 1.100 | - | 1.040" in md
    assert "Fused over bare above 1.05 on 1 of 2 blocks." in md
    assert "| Linear+GELU | 8192 | 1024 | 4096 | 1.100 | 1.050 | 1.040 | 1.058 | 1.250 | 1, 1 |" in md
    assert md.count("| Linear+SiLU |") == 2  # the one-exp table has the GELU block only


@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_epilogue_floor_arms_compute_what_they_are_checked_against(act):
    """Each floor arm matches its own eager reference (cuBLASLt's GELU is the tanh one), run
    here on the CPU: the bare and fused arms through the plugin backend, as on the GPU."""
    import bench_epilogue
    import torch.nn.functional as F
    from integration_utils import count_calls, run_and_get_code

    torch.manual_seed(0)
    model = bench_epilogue.init_(bench_epilogue.LinearAct(32, 48, getattr(F, act), device="cpu"))
    x = torch.randn(20, 32, dtype=bench_epilogue.DT)
    arms = bench_epilogue.floor_arms(model, _timing.plugin_backend())
    gelu_arms = {"cublaslt_gelu", "fused_one_exp"}
    assert set(arms) == {"fused", "bare_plugin", "bare_cublas", "op_fused"} | (gelu_arms if act == "gelu" else set())
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        for name, (fn, reference) in arms.items():
            forced = name in ("fused", "bare_plugin", "fused_one_exp")
            out, codes = run_and_get_code(fn, x) if forced else (fn(x), None)
            torch.testing.assert_close(out, reference(x), rtol=2e-2, atol=2e-2, msg=name)
            if codes is not None:  # the forced arms run the plugin, never aten's matmul
                assert count_calls(codes) == (1, 0), (name, count_calls(codes))
    if act == "gelu":  # the tanh reference is not the erf one: the arm is checked against what it computes
        with torch.no_grad():
            assert not torch.equal(arms["cublaslt_gelu"][1](x), model(x))


@pytest.mark.parametrize("forced", [False, True])
def test_ab_epilogue_rows_hand_bench_epilogue_its_arms(monkeypatch, forced):
    """ab.py's epilogue suite builds each version's arm as bench_epilogue.time_arms takes it
    (a compiled module and its eager reference; ``--forced`` passes compete=False to each
    backend), and its row pairs the two versions by round. time_arms itself needs CUDA, so it
    is replaced by one that checks what it is given and runs each arm once on the CPU."""
    import ab
    import bench_epilogue
    import torch.nn.functional as F

    def fake_time_arms(name, x, arms, n_rounds=3, max_err=3e-2):
        assert set(arms) == {"base", "head"}
        with torch.no_grad():
            for fn, reference in arms.values():
                torch.testing.assert_close(fn(x), reference(x), rtol=2e-2, atol=2e-2)
        times = {"base": [2.0, 4.0, 2.2], "head": [1.0, 2.0, 1.0]}
        return times, {"base": 1.0, "head": 1.5}, {"base": 0.0, "head": 0.0}

    seen = []
    monkeypatch.setattr(bench_epilogue, "time_arms", fake_time_arms)
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: seen.append(kwargs) or model)
    model = bench_epilogue.LinearAct(16, 24, F.gelu, device="cpu")
    import inductor_mm_plugin

    backends = ab.epilogue_arms({"base": inductor_mm_plugin, "head": inductor_mm_plugin}, False, forced)
    assert all(kw["backend"] is ab._backend(inductor_mm_plugin) for kw in backends.values())
    assert all(kw.get("options") == (bench_epilogue.FORCED if forced else None) for kw in backends.values())
    row = ab._epilogue_row(bench_epilogue, "Linear+GELU", model, torch.randn(8, 16, dtype=bench_epilogue.DT),
                           backends, 3, dict(M=8, hidden=16, ffn=24, K=16))  # fmt: skip
    assert seen == list(backends.values())
    assert row["ratio_rounds"] == [2.0, 2.0, 2.2] and row["ratio"] == 2.0 and row["head_compile_s"] == 1.5


def test_epilogue_block_with_floors_runs_end_to_end_on_the_cpu(monkeypatch):
    """bench_epilogue.bench_block with ``floors`` through every step but the GPU timer: each
    arm compiled (the plugin backend, stock, and the forced floors) and checked against eager,
    the rounds run, the row's fields filled. The timer stands in for CUDA graphs: it calls the
    arm once and returns a time per arm, so the row's ratios are known."""
    import bench_epilogue
    import torch.nn.functional as F

    ms = {"stock": 1.3, "plugin": 1.2, "fused": 1.1, "bare_plugin": 1.0, "bare_cublas": 0.9, "op_fused": 1.02,
          "cublaslt_gelu": 0.95, "fused_one_exp": 1.04}  # fmt: skip
    order = iter(["plugin", "stock", "fused", "bare_plugin", "bare_cublas", "op_fused", "cublaslt_gelu",
                  "fused_one_exp"])  # fmt: skip

    class FakeTimer:
        def __init__(self, fn, target_ms=2.0, most=500):
            self.fn, self.arm = fn, next(order)  # built in the arms' order (bench_block's dict)

        def __call__(self, replays=5):
            self.fn()
            return ms[self.arm]

    monkeypatch.setattr(bench_epilogue, "GraphTimer", FakeTimer)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    torch.manual_seed(0)
    model = bench_epilogue.init_(bench_epilogue.LinearAct(32, 48, F.gelu, device="cpu"))
    row = bench_epilogue.bench_block("Linear+GELU", model, torch.randn(24, 32, dtype=bench_epilogue.DT), False,
                                     n_rounds=2, floors=True)  # fmt: skip
    assert row["speedup"] == pytest.approx(1.3 / 1.2) and row["fused_over_bare"] == pytest.approx(1.1)
    assert row["bare_plugin_vs_cublas"] == pytest.approx(0.9) and row["cublaslt_over_bare"] == pytest.approx(0.95 / 0.9)
    assert row["rel_err"] < 3e-2 and row["fused_ms"] == 1.1
    assert row["fused_one_exp_over_bare"] == pytest.approx(1.04) and row["op_fused_over_bare"] == pytest.approx(1.02)
    # On the CPU the plugin's kernel is an extern call and the whole epilogue one C++ kernel of Inductor's.
    assert row["fused_kernels"] == 1 and row["fused_one_exp_kernels"] == 1


def test_gelu_one_exp_is_the_exact_gelu_to_float32_accuracy():
    """bench_epilogue's one-exp GELU in torch ops (the fused arm's epilogue), float32 across
    [-12, 12] against float64's erf GELU: the bound kernels/activation.py's ``_gelu_erf`` is held to."""
    import bench_epilogue
    import torch.nn.functional as F

    torch.manual_seed(0)
    x = torch.cat([torch.linspace(-12, 12, 48001), torch.randn(8000) * 3])
    out = bench_epilogue.gelu_one_exp(x)
    ref = F.gelu(x.double())
    err = (out.double() - ref).abs()
    big = ref.abs() > 1e-3
    assert out.dtype == torch.float32 and bench_epilogue.gelu_one_exp(x.bfloat16()).dtype == torch.bfloat16
    assert (err[big] / ref[big].abs()).max() <= 4e-6 and err[~big].max() <= 1e-6


def test_probe_overlap_checks_every_config_and_activation_on_the_cpu(tmp_path):
    """bench/probe_overlap.py through the interpreter: every (config, activation) arm's output
    against float64, one row written; a kernel computing the wrong activation is refused."""
    import json

    import probe_overlap
    import torch.nn.functional as F

    probe_overlap.main(["--device", "cpu", "--out", str(tmp_path), "--commit", "test"])
    (row,) = [json.loads(line) for line in (tmp_path / "probe_overlap.jsonl").read_text().splitlines()]
    assert len(row["err"]) == len(probe_overlap.CONFIGS) * len(probe_overlap.ACTS)
    assert all(isinstance(e, float) and e < 1e-3 for e in row["err"].values()), row["err"]
    torch.manual_seed(0)
    x, w, bias = torch.randn(40, 64, dtype=torch.float16), torch.randn(72, 64, dtype=torch.float16), torch.randn(72)
    z = x.double() @ w.double().T + bias.double()
    _, err = probe_overlap._checked(x, w, bias.half(), (32, 32, 32, 4, 3, 2, True, False, False), "silu", 4, F.gelu(z))
    assert isinstance(err, str) and err.startswith("wrong")
