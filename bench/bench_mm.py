"""The issue's benchmark table: the plugin's matmul against torch.mm (cuBLAS), in one run.

    python bench/bench_mm.py                                   # the whole table
    python bench/bench_mm.py --classes skinny --dtypes bf16    # a part of it
    python bench/bench_mm.py --inductor-shapes 4096x4096x4096  # + Inductor max-autotune there

Classes (named shape sets below): square, llm (prefill), skinny (decode), odd, largek, each in
bf16 and fp16, with B row-major ("row") and as a transposed (N, K) weight as ``nn.Linear``
passes it ("linear"); and fp32 with TF32 allowed. Implementations, each a zero-argument
callable timed the same way:

* ``aten``: ``torch.mm`` (cuBLAS), the baseline;
* ``plugin``: ``torch.ops.inductor_mm_plugin.mm`` with the shape heuristic's config;
* ``tuned``: the same op with autotuning on (rows of ``--tune-classes``; tuned outside the
  timed region, through the on-disk cache);
* ``inductor``: ``torch.compile(torch.mm, mode="max-autotune-no-cudagraphs")``, compiled
  outside the timed region after ``torch._dynamo.reset()``, for the bf16 (or fp32),
  row-layout rows of ``--inductor-shapes`` (each compile takes seconds to a minute, so a
  subset).

Per row: fresh random inputs; every implementation's output checked against the float64
reference with the tests' error bound before anything is timed (and the launcher's output into
a NaN-poisoned buffer: every element written); then the median of ``triton.testing.do_bench``
(L2 flushed between reps), or, for the skinny class, where launch overhead would otherwise be
half the time, of CUDA-graph replays (one graph of back-to-back calls per implementation,
``_timing.GraphTimer``: what ``do_bench_cudagraph`` times, captured once per row). The implementations of
a row are timed in ``--rounds`` rounds (default 3), back to back, the order reversed each round
(``_timing.py``: under the H200's power limit the SM clock drifts within seconds). ratio =
torch.mm time / plugin time within a round, the median over rounds (above 1: the plugin is
faster); TFLOP/s = 2*M*N*K / median time. Skinny rows
also report the fraction of the device copy bandwidth measured in the same run (bytes =
A + B + C); the others the fraction of the best cuBLAS rate of the run (its "peak").

Kernels are compiled before timing in a pool of processes (Triton's disk cache is shared).
Appends one JSONL row per shape to ``<out>/mm.jsonl`` (date, commit, gpu, torch, triton, class,
M, N, K, dtype, layout, timing, cublas_ms, plugin_ms, cublas_tflops, plugin_tflops, ratio,
ratio_rounds, plugin_config, copy_gbs, sm_clock, and the tuned / inductor / bandwidth fields
of the rows that have them) and prints the table in markdown: per class the geomean and
minimum ratio against issue 5's targets, then every row (``--md FILE`` also writes it).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import platform
import time

import torch
from _timing import (
    GraphTimer, add_common_args, append_jsonl, config_name, copy_bandwidth_gbs, dtype_of, geomean, make_operands,
    matmul_error, median, plugin_runtime, precompile, ratios, require_cuda, rounds, run_meta, sm_clock, spread, time_ms,
)  # fmt: skip

LLM_NK = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (4096, 11008)]
SHAPES = {
    "square": [(4096, 4096, 4096), (8192, 8192, 8192)],
    "llm": [(m, n, k) for m in (2048, 4096, 8192, 16384) for n, k in LLM_NK],
    "skinny": [(m, n, k) for m in (1, 8, 16, 32, 64, 128) for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]],
    "odd": [(1000, 1000, 1000), (1531, 1531, 1531), (4097, 4095, 4096), (2000, 3000, 500), (768, 768, 768)],
    "largek": [(2048, 2048, 32768), (1024, 1024, 65536)],
    "fp32": [(4096, 4096, 4096), (8192, 4096, 4096)],
}
# Targets from issue 5: (geomean ratio, lowest ratio allowed) per class.
TARGETS = {"llm": (1.00, 0.90), "skinny": (1.03, 0.95), "odd": (None, 0.90), "largek": (None, 1.00),
           "fp32": (None, 0.90), "square": (None, None)}  # fmt: skip
SKINNY_BW_TARGET = 0.85


def rows_of(classes, dtypes, layouts):
    """(class, (M, N, K), dtype, layout) for every row of the table, in run order."""
    rows = []
    for cls in classes:
        for dtype_name in ["fp32"] if cls == "fp32" else [d for d in dtypes if d != "fp32"]:
            for layout in layouts:
                for shape in SHAPES[cls]:
                    rows.append((cls, shape, dtype_name, layout))
    return rows


# ------------------------------------------------------------------- parallel compile


def _compile_row(job):
    """Worker: compile the heuristic's kernel for a row, and the tuning candidates if asked."""
    (cls, (M, N, K), dtype_name, layout), tune = job
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "fp32"
    rt = plugin_runtime()
    a, b = make_operands(M, N, K, dtype_of(dtype_name), layout, fill=False)
    out = torch.empty(M, N, device="cuda", dtype=a.dtype)
    errors = []
    for cfg in [None] + (rt.candidates_for(a, b) if tune else []):
        try:
            rt.launch(a, b, out, config=cfg, compile_only=True)
        except Exception as e:  # noqa: BLE001  (reported; the timed run compiles again and shows it)
            errors.append(f"{cfg.short() if cfg else 'heuristic'}: {type(e).__name__}: {str(e)[:200]}")
    return errors


def compile_jobs(rows, tune_rows):
    """One job per distinct call (row), with its tuning candidates where asked."""
    seen, jobs = set(), []
    for row in rows:
        tune = (row[0], row[2]) in tune_rows
        key = (row[1], row[2], row[3], tune)
        if key not in seen:
            seen.add(key)
            jobs.append((row, tune))
    return jobs


# ----------------------------------------------------------------------------- timing


def time_row(fn, cudagraph: bool) -> float:
    return fn() if cudagraph else time_ms(fn, warmup=10, rep=50)


def implementations(a, b, row, tune_rows, inductor_shapes, inductor_pass=False):
    """name -> zero-argument callable; ``aten`` is the baseline.

    Inductor is timed in a pass of its own after every other row (``inductor_pass``), so
    its compiles (worker processes, GPU benchmarking) happen after the plugin's rows. This
    was first done on the suspicion that Dynamo slows the op's host path afterwards;
    a probe on the H200 (``host_overhead.py``, removed; its log is in results/archive) showed no
    such effect (2026-11-29), the order just keeps the rows independent.
    """
    if inductor_pass:
        torch._dynamo.reset()
        compiled = torch.compile(torch.mm, mode="max-autotune-no-cudagraphs")
        return {"aten": lambda: torch.mm(a, b), "inductor": lambda: compiled(a, b)}
    set_autotune = plugin_runtime().set_autotune
    cls, shape, dtype_name, _ = row
    impls = {"aten": lambda: torch.mm(a, b), "plugin": lambda: torch.ops.inductor_mm_plugin.mm(a, b)}
    if (cls, dtype_name) in tune_rows:

        def tuned():
            old = set_autotune(True)
            try:
                return torch.ops.inductor_mm_plugin.mm(a, b)
            finally:
                set_autotune(old)

        impls["tuned"] = tuned
    return impls


def wants_inductor(row, inductor_shapes):
    return "x".join(map(str, row[1])) in inductor_shapes and row[2] in ("bf16", "fp32") and row[3] == "row"


def _check(out, a, b, name, tf32):
    err = matmul_error(out, a, b, tf32=tf32)
    if err:
        raise AssertionError(f"{name}: {tuple(a.shape)} @ {tuple(b.shape)}: {err}")


def _timers(impls, cudagraph):
    """For CUDA-graph rows, each implementation captured once (``GraphTimer``), replayed each round."""
    return {name: GraphTimer(fn, target_ms=5.0) for name, fn in impls.items()} if cudagraph else impls


def bench_row(row, copy_gbs, tune_rows, inductor_shapes, inductor_pass=False, n_rounds=3):
    rt = plugin_runtime()
    cls, (M, N, K), dtype_name, layout = row
    dtype = dtype_of(dtype_name)
    torch.backends.cuda.matmul.allow_tf32 = dtype == torch.float32
    a, b = make_operands(M, N, K, dtype, layout)
    cudagraph = cls == "skinny"
    impls = implementations(a, b, row, tune_rows, inductor_shapes, inductor_pass)
    if inductor_pass:
        for name, fn in impls.items():
            t0 = time.time()
            out = fn()
            if name == "inductor":
                _check(out, a, b, name, dtype == torch.float32)
                compile_s = time.time() - t0
        times = rounds(_timers(impls, cudagraph), lambda fn: time_row(fn, cudagraph), n_rounds)
        ms = {name: median(t) for name, t in times.items()}
        return {"inductor_ms": ms["inductor"], "inductor_tflops": 2.0 * M * N * K / ms["inductor"] / 1e9,
                "inductor_ratio": median(ratios(times, "aten", "inductor")), "inductor_compile_s": compile_s}  # fmt: skip
    compile_s = {}
    for name, fn in impls.items():
        t0 = time.time()
        out = fn()  # compiles (and for "tuned", tunes) outside the timed region
        compile_s[name] = time.time() - t0
        if name != "aten":
            _check(out, a, b, name, dtype == torch.float32)
        del out
    # Every element written: the heuristic's plan into a NaN-poisoned output.
    poisoned = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    rt.launch(a, b, poisoned)
    _check(poisoned, a, b, "plugin (poisoned output)", dtype == torch.float32)
    del poisoned
    # Rounds (bench/_timing.py): the clock drifts under the power limit; ratios within a round.
    times = rounds(_timers(impls, cudagraph), lambda fn: time_row(fn, cudagraph), n_rounds)
    ms = {name: median(t) for name, t in times.items()}
    flops = 2.0 * M * N * K
    tflops = {name: flops / t / 1e9 for name, t in ms.items()}
    heur = rt.chosen_config(a, b)
    old = rt.set_autotune(True)
    tuned_cfg = rt.chosen_config(a, b) if "tuned" in impls else None
    rt.set_autotune(old)
    r = {
        "class": cls,
        "M": M, "N": N, "K": K,
        "dtype": dtype_name,
        "layout": layout,
        "timing": "cudagraph" if cudagraph else "do_bench",
        "cublas_ms": ms["aten"],
        "plugin_ms": ms["plugin"],
        "cublas_tflops": tflops["aten"],
        "plugin_tflops": tflops["plugin"],
        "ratio": median(ratios(times, "aten", "plugin")),
        "ratio_rounds": ratios(times, "aten", "plugin"),
        "plugin_config": config_name(heur),
        "copy_gbs": copy_gbs,
        "sm_clock": sm_clock(),
    }
    if "tuned" in ms:
        r.update(tuned_ms=ms["tuned"], tuned_tflops=tflops["tuned"], tuned_ratio=median(ratios(times, "aten", "tuned")),
                 tuned_config=config_name(tuned_cfg), tune_s=compile_s["tuned"])  # fmt: skip
    if cudagraph:
        moved = (M * K + K * N + M * N) * a.element_size()
        for name in ms:
            r[f"{'cublas' if name == 'aten' else name}_bw_frac"] = moved / (ms[name] * 1e-3) / 1e9 / copy_gbs
    return r


# ---------------------------------------------------------------------------- report


def summary(rows):
    """(class, dtype, layout) -> dict of geomean/min ratios (and skinny bandwidth)."""
    out = {}
    for key in sorted({(r["class"], r["dtype"], r["layout"]) for r in rows}):
        rs = [r for r in rows if (r["class"], r["dtype"], r["layout"]) == key]
        s = {"n": len(rs), "geomean": geomean([r["ratio"] for r in rs]), "min": min(r["ratio"] for r in rs)}
        if all("tuned_ratio" in r for r in rs):
            s["tuned_geomean"] = geomean([r["tuned_ratio"] for r in rs])
            s["tuned_min"] = min(r["tuned_ratio"] for r in rs)
            s["heuristic_within_10pct_of_tuned"] = sum(r["plugin_ms"] <= 1.1 * r["tuned_ms"] for r in rs)
        if key[0] == "skinny":
            s["min_bw_frac"] = min(r["plugin_bw_frac"] for r in rs)
            s["cublas_min_bw_frac"] = min(r["cublas_bw_frac"] for r in rs)
        out["/".join(key)] = s
    return out


def _f(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) else ""


def to_markdown(meta, rows, summ):
    peak = max([r["cublas_tflops"] for r in rows if r["dtype"] != "fp32"] or [float("nan")])
    lines = [
        f"# Plugin matmul vs torch.mm — {meta['date']}",
        "",
        f"GPU {meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, plugin {meta['plugin']} "
        f"(commit {meta['commit']}). Copy bandwidth measured in this run: {meta['copy_gbs']:.0f} GB/s; best "
        f"cuBLAS bf16/fp16 rate of the run (\"peak\"): {peak:.0f} TFLOP/s. Median of "
        "`do_bench` (L2 flushed between reps); skinny rows: CUDA graphs of back-to-back calls. "
        f"Each row timed in {meta['rounds']} round(s), the order reversed each round (bench/_timing.py); "
        "ratio = torch.mm time / plugin time within a round, median over rounds (above 1: the plugin is "
        "faster), range = lowest-highest round; TFLOP/s from median times. SM clock (nvidia-smi) at start: "
        f"{meta['sm_clock_start']}; at end: {meta.get('sm_clock_end', '(run cut short)')}. `tuned` = the plugin "
        "with autotuning (classes " + (", ".join(meta["tune_classes"]) or "none") + "; dtypes "
        + ", ".join(meta["tune_dtypes"]) + "); `inductor` = "
        "`torch.compile(torch.mm, mode=\"max-autotune-no-cudagraphs\")` (bf16/fp32 row rows of "
        + (", ".join(meta["inductor_shapes"]) or "none") + ").",
        "",
        "## Per class (geomean and lowest ratio; targets from issue 5)",
        "",
        "| class | dtype | layout | rows | geomean | min | target | tuned geomean | tuned min | heuristic ≤ 1.1× tuned | "
        "lowest % of copy BW |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, s in summ.items():
        cls, dtype, layout = key.split("/")
        g, lo = TARGETS.get(cls, (None, None))
        target = " / ".join(x for x in [f"geomean ≥ {g:.2f}" if g else "", f"min ≥ {lo:.2f}" if lo else ""] if x)
        if cls == "skinny":
            target += f", ≥ {SKINNY_BW_TARGET:.0%} BW"
        within = f"{s['heuristic_within_10pct_of_tuned']}/{s['n']}" if "tuned_geomean" in s else ""
        bw = f"{100 * s['min_bw_frac']:.0f}% (cuBLAS {100 * s['cublas_min_bw_frac']:.0f}%)" if "min_bw_frac" in s else ""
        lines.append(
            f"| {cls} | {dtype} | {layout} | {s['n']} | {s['geomean']:.3f} | {s['min']:.3f} | {target} | "
            f"{_f(s.get('tuned_geomean'), '.3f')} | {_f(s.get('tuned_min'), '.3f')} | {within} | {bw} |"
        )
    lines += [
        "",
        "## Rows",
        "",
        "| class | M×N×K | dtype | layout | torch.mm TFLOP/s | plugin TFLOP/s | ratio | range | % peak / BW | "
        "plugin config | tuned ratio | inductor ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "plugin_bw_frac" in r:
            frac = f"{100 * r['plugin_bw_frac']:.0f}% BW"
        else:
            frac = f"{100 * r['plugin_tflops'] / peak:.0f}%" if r["dtype"] != "fp32" else ""
        lines.append(
            f"| {r['class']} | {r['M']}×{r['N']}×{r['K']} | {r['dtype']} | {r['layout']} | {r['cublas_tflops']:.1f} | "
            f"{r['plugin_tflops']:.1f} | {r['ratio']:.2f} | {spread(r.get('ratio_rounds'))} | {frac} | "
            f"{r.get('plugin_config') or ''} | "
            f"{_f(r.get('tuned_ratio'), '.2f')} | {_f(r.get('inductor_ratio'), '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"], choices=["bf16", "fp16"])
    p.add_argument("--layouts", nargs="+", default=["row", "linear"], choices=["row", "linear"])
    p.add_argument("--tune-classes", nargs="*", default=[], choices=list(SHAPES),
                   help="also time the autotuned plugin on these classes' rows")  # fmt: skip
    p.add_argument("--tune-dtypes", nargs="*", default=["bf16", "fp32"], choices=["bf16", "fp16", "fp32"],
                   help="... and these dtypes (tuning every row doubles the run)")  # fmt: skip
    p.add_argument("--inductor-shapes", nargs="*", default=[], metavar="MxNxK",
                   help="also time Inductor max-autotune on these shapes (their bf16 / fp32, row-layout rows)")  # fmt: skip
    p.add_argument("--md", default=None, help="also write the markdown table to this file")
    add_common_args(p, "mm.jsonl", jobs=True)
    args = p.parse_args(argv)
    require_cuda("bench_mm.py")
    import inductor_mm_plugin

    rows_todo = rows_of(args.classes, args.dtypes, args.layouts)
    tune_rows = {(c, d) for c in args.tune_classes for d in args.tune_dtypes}
    for errors in precompile(compile_jobs(rows_todo, tune_rows), _compile_row, args.jobs):
        for e in errors[:3]:
            print("  compile error:", e, flush=True)
    copy_gbs = copy_bandwidth_gbs()
    meta = run_meta(args.commit)
    run = dict(meta, plugin=inductor_mm_plugin.__version__, python=platform.python_version(), copy_gbs=copy_gbs,
               tune_classes=args.tune_classes, tune_dtypes=args.tune_dtypes, inductor_shapes=args.inductor_shapes,
               rounds=args.rounds, sm_clock_start=sm_clock())  # fmt: skip
    jsonl = pathlib.Path(args.out) / "mm.jsonl"
    rows = []
    t_start = time.time()
    for row in rows_todo:
        r = bench_row(row, copy_gbs, tune_rows, set(args.inductor_shapes), n_rounds=args.rounds)
        r = dict(kind="plugin", **r)
        rows.append(r)
        append_jsonl(jsonl, [r], meta)  # after every row: a run cut short keeps what it measured
        extra = f"  tuned {r['tuned_ratio']:.3f}" if "tuned_ratio" in r else ""
        bw = f"  BW {100 * r['plugin_bw_frac']:.0f}% (cuBLAS {100 * r['cublas_bw_frac']:.0f}%)" if "plugin_bw_frac" in r else ""
        print(
            f"{r['class']:7s} {r['M']:6d}x{r['N']:6d}x{r['K']:6d} {r['dtype']} {r['layout']:6s} torch.mm "
            f"{r['cublas_tflops']:7.1f}  plugin {r['plugin_tflops']:7.1f}  ratio {r['ratio']:.3f}{extra}{bw}  "
            f"[{r['plugin_config']}]",
            flush=True,
        )
    # Inductor last (see implementations()); its ratio is against torch.mm timed in that pass,
    # in a row of its own (kind "inductor").
    for row, r in zip(rows_todo, rows):
        if wants_inductor(row, set(args.inductor_shapes)):
            ind = bench_row(row, copy_gbs, tune_rows, set(args.inductor_shapes), inductor_pass=True,
                            n_rounds=args.rounds)  # fmt: skip
            r.update(ind)
            append_jsonl(jsonl, [dict(kind="inductor", **{k: r[k] for k in ("class", "M", "N", "K", "dtype", "layout")},
                                      **ind)], meta)  # fmt: skip
            print(f"inductor {row[0]:7s} {'x'.join(map(str, row[1]))} {row[2]} {row[3]}: ratio "
                  f"{r['inductor_ratio']:.3f} (compile {r['inductor_compile_s']:.0f}s)", flush=True)  # fmt: skip
    run["bench_seconds"] = time.time() - t_start
    run["sm_clock_end"] = sm_clock()
    md = to_markdown(run, rows, summary(rows))
    if args.md:
        pathlib.Path(args.md).write_text(md)
    print(md)
    print(f"rows appended to {jsonl}")


if __name__ == "__main__":
    main()
