"""The plugin's matmul against torch.mm (cuBLAS) on shapes nobody chose for it (issue 22).

    python bench/shapes.py --suite random --out DIR          # >= 200 fresh shapes, new seed each run
    python bench/shapes.py --suite models --out DIR          # a random sample of real nn.Linear shapes
    python bench/shapes.py --suite all --tf32 --out DIR      # both, and the TF32 4096^3 row
    python bench/shapes.py --suite random --seed 1234        # repeat one run's shapes
    python bench/shapes.py --device cpu --n 4                # a dry run through Triton's interpreter

Suites (drawn in ``suites.py``):

* ``random``: ``--n`` shapes (default 200) drawn from a seed that is new every run (printed,
  recorded; ``--seed`` repeats one; never tune against one seed): M log-uniform in
  [1, 16384], N and K log-uniform in [64, 32768]; from 8 up, each size a multiple of 8 three
  times in four, else not; bf16 or fp16; B row-major (``row``) or an ``nn.Linear`` weight
  (``linear``: b = w.t(), w of shape (N, K)), with A as is or transposed (``t_row``,
  ``t_linear``: a = x.t(), x of shape (K, M), as in a weight gradient), a quarter each. Shapes over
  ``FLOP_CAP`` (2^41 FLOP, ~3 ms of bf16) or ``BYTE_CAP`` (1 GiB of operands and result)
  are drawn again: the run has to fit ~4 minutes of H200 time.
* ``models``: every ``nn.Linear`` of the configurations in ``MODELS`` (Llama-3 8B/70B,
  Mistral 7B, Qwen2.5 7B/14B/32B, Phi-3-mini, Gemma-2 9B, ViT-B/L/H, BERT-base/large, GPT-2 XL)
  at tensor-parallel degree 1, 2, 4, 8 (column-parallel layers slice N, row-parallel slice K)
  and M in ``TOKENS`` (ViT: 197 tokens per image), bf16, deduplicated: about 1,200 shapes.
  A run takes a random sample of ``--limit`` (default 240; 0: all) from a fresh seed,
  printed and recorded (``--seed`` repeats it).
* ``--tf32``: fp32 with TF32 allowed, B row-major, 4096^3.

Method, per shape: fresh random inputs; the plugin checked against float64 first, with the
tests' error bound (``ops/reference.py``; all rows of the result up to 384, else 384 rows
covering every 64-row block's edges), once through the launcher into a NaN-poisoned output
(every element written) and once through the op that is timed; a wrong result is reported and
left out of the timing. Then torch.mm and ``torch.ops.inductor_mm_plugin.mm`` in ``--rounds``
rounds (default 3), the order reversed each round (``_timing.rounds``), ratio = torch.mm time
/ plugin time within a round, the median over rounds (above 1: the plugin is faster). Shapes
whose floor (FLOPs at 700 TFLOP/s, bytes at 3.5 TB/s) is under 50 us run as CUDA graphs of
back-to-back calls (``_timing.GraphTimer``), cycling through enough input sets to exceed the
L2 three times (at most 64); larger ones with ``do_bench`` (L2 flushed before each call).
Every shape's kernels are compiled first, in ``--jobs`` processes.

Second anchor (issue 31): on ``--inductor-n`` shapes of each suite (default 12, spread evenly
over it), Inductor's own Triton GEMM templates run in the same rounds as a third arm: torch.mm
compiled with ``max_autotune`` and ``max_autotune_gemm_backends="TRITON"``, checked against
float64 like the plugin; its generated code says whether a template ran
(``inductor_triton_kernel``), and a shape no template takes is an ``inductor_triton_err``.
The report compares, per shape class, the plugin's geomean ratio with theirs.

``--copy-arms``: on unaligned shapes, the plugin forced to read the operands in place (the
pointer kernel) and forced onto aligned copies (the TMA kernel) as two more arms, each checked
against float64 (``in_place_ms``/``_ratio``/``_config``, ``copied_ms``/``_ratio``/``_config``;
``copies`` names what the default copied): the data behind ``configs.copies_pay``.

Writes one JSONL row per shape to ``<out>/shapes.jsonl`` (date, commit, gpu, torch, triton,
suite, seed, M, N, K, dtype, layout, cublas_ms, plugin_ms, ratio, and ratio_rounds, config,
kernel, timing, aligned, shape_class, err, fallback, source, plugin_err, cublas_err, err_ratio
(normwise error against float64 on the checked rows); on anchored shapes inductor,
inductor_triton_ms, inductor_triton_ratio, plugin_vs_inductor_triton, inductor_triton_kernel,
inductor_triton_compile_s or inductor_triton_err) and ``<out>/shapes-classes.json``:
per ``shape_class``, the rows of this GPU and commit in that file (every run so far),
their geomean / p10 / min ratio and a verdict, for the routing pass to stay on stock
where the kernel loses (``--classes-from FILE`` rewrites it from a JSONL file, no GPU).
Prints geomean, p10, min and the worst rows against the targets.

Time on the H200 (2026-12-02): random, 240 shapes with the copy arms: 26 s compiling + 32 s
timing; both suites with 4 Inductor shapes each: about 5 min, most of it Inductor's autotuning.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import sys
import time
import warnings

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the package defines its kernels

import torch
from inductor_mm_plugin.inductor import shape_table
from inductor_mm_plugin.inductor.shape_table import is_aligned, shape_class  # noqa: F401  (is_aligned: tests read it here)
from suites import BYTE_CAP, FLOP_CAP, LAYOUTS, flops_bytes, model_shapes, random_shapes, shape_aligned  # noqa: F401
from _timing import (
    GraphTimer, add_common_args, append_jsonl, check_rows, config_name, dtype_of, error_ratio, geomean, header,
    make_operands, matmul_error, relative_errors,
    median, percentile, plugin_runtime, precompile, ratios, read_jsonl, require_cuda, rotating, rotation, rounds,
    run_meta, spread, time_ms,
)  # fmt: skip

TARGETS = {"random": {"geomean": 1.00, "p10": 0.92, "min": 0.85}, "models": {"geomean": 1.02, "min": 0.90},
           "tf32": {"min": 0.90}}  # fmt: skip
GRAPH_BELOW_US = 50.0
ERR_RATIO = 1.1  # issue 31: the plugin's error against float64 at most this times cuBLAS's

# ----------------------------------------------------------------------- shape classes
# shape_class, is_aligned and the class table live in the package (inductor/shape_table.py):
# the routing pass reads the committed table to skip timing sure losers.


def class_summary(rows: list[dict]) -> dict:
    """shape_class -> n, best, worst, geomean, verdict (shape_table.build) and the shape of its
    lowest row."""
    classes = shape_table.build(rows)
    for cls, entry in classes.items():
        worst = min((r for r in rows if r.get("ratio") and r["shape_class"] == cls), key=lambda r: r["ratio"])
        entry["worst_shape"] = f"{worst['M']}x{worst['N']}x{worst['K']} {worst['dtype']} {worst['layout']}"
    return classes


# ---------------------------------------------------------------------------- timing


def _floor_us(M, N, K, elem):
    flops, nbytes = flops_bytes(M, N, K, elem)
    return max(flops / 700e12, nbytes / 3.5e12) * 1e6


def _operands(shape, device, fill=True):
    dtype = dtype_of("fp32" if shape["dtype"] == "tf32" else shape["dtype"])
    return make_operands(shape["M"], shape["N"], shape["K"], dtype, shape["layout"], fill=fill, device=device)


def _compile_shape(shape):
    """Worker: compile the heuristic's kernel for one shape (no launch)."""
    torch.backends.cuda.matmul.allow_tf32 = shape["dtype"] == "tf32"
    rt = plugin_runtime()
    a, b = _operands(shape, "cuda", fill=False)
    out = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=a.dtype)
    try:
        rt.launch(a, b, out, compile_only=True)
        for flag in (False, True) if shape.get("copy_arms") else ():
            rt.launch(a, b, out, compile_only=True, copy_unaligned=flag)
    except Exception as e:  # noqa: BLE001 (the timed run compiles again and reports it)
        return f"{shape}: {type(e).__name__}: {str(e)[:200]}"
    return None


def _mm(a, b):
    return torch.mm(a, b)


def inductor_triton(a, b):
    """Inductor's own Triton GEMM templates on these operands (issue 31's second anchor): mm
    compiled with max-autotune over Triton templates alone. Returns (compiled fn, what its
    generated code runs: "template", or "aten" where no template took the shape)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()  # a compile per shape: Dynamo stops recompiling one function after 8
    fn = torch.compile(_mm, dynamic=False, options={"max_autotune": True, "max_autotune_gemm_backends": "TRITON",
                                                    "triton.cudagraphs": False})  # fmt: skip
    _, codes = run_and_get_code(fn, a, b)
    return fn, "aten" if "extern_kernels.mm" in "\n".join(codes) else "template"


def _copy_arms(a, b, rt, rows, tf32) -> tuple[dict, dict]:
    """Where TMA cannot read the operands in place: the plugin forced to read them in place
    (the pointer kernel) and forced onto aligned copies (the TMA kernel), each checked against
    float64 first; (arms, row fields). The data behind ``configs.copies_pay``."""
    out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
    arms, fields = {}, {}
    for arm, flag in (("in_place", False), ("copied", True)):
        poisoned = torch.full_like(out, float("nan"))
        plan = rt.launch(a, b, poisoned, copy_unaligned=flag)
        fields[f"{arm}_config"] = config_name(plan.cfg)
        bad = matmul_error(poisoned, a, b, tf32=tf32, rows=rows)
        if bad:
            fields[f"{arm}_err"] = bad
        else:
            arms[arm] = lambda x, y, flag=flag: rt.launch(x, y, out, copy_unaligned=flag)
    return arms, fields


def bench_shape(shape: dict, rt, n_rounds: int, device: str, copy_arms: bool = False) -> dict:
    """One JSONL row: the float64 check, then the implementations in rounds: cuBLAS, the
    plugin, on shapes marked ``inductor`` Inductor's Triton templates, and with ``copy_arms``
    on unaligned shapes the plugin reading in place and reading aligned copies."""
    M, N, K, layout = shape["M"], shape["N"], shape["K"], shape["layout"]
    tf32 = shape["dtype"] == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = _operands(shape, device)
    elem = a.element_size()
    aligned = shape_aligned(shape)
    row = dict(shape, aligned=aligned, shape_class=shape_class(M, N, K, shape["dtype"], layout, aligned),
               cublas_ms=None, plugin_ms=None, ratio=None)  # fmt: skip
    op = torch.ops.inductor_mm_plugin.mm
    rows = check_rows(M, seed=M * 31 + N)
    poisoned = torch.full((M, N), float("nan"), device=device, dtype=a.dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = rt.launch(a, b, poisoned)
        err = matmul_error(poisoned, a, b, tf32=tf32, rows=rows)
        out = op(a, b)
        err = err or matmul_error(out, a, b, tf32=tf32, rows=rows)
    fallback = [str(w.message)[:200] for w in caught if type(w.message).__name__ == "KernelFallbackWarning"]
    row.update(config=config_name(getattr(plan, "cfg", None)), kernel=getattr(getattr(plan, "cfg", None), "kernel", None))
    if any(getattr(plan, "copies", ())):
        row["copies"] = "".join(n for n, c in zip("ab", plan.copies) if c)
    if fallback:
        row["fallback"] = fallback[0]
    if err:
        row["err"] = err
        return row
    # Numerics (issue 31: within 1.1x of cuBLAS's error): both against float64, same rows.
    errs = relative_errors({"plugin": out, "cublas": torch.mm(a, b)}, a, b, rows=rows)
    row.update(plugin_err=errs["plugin"], cublas_err=errs["cublas"], err_ratio=error_ratio(errs["plugin"], errs["cublas"]))
    del poisoned, out
    arms = {"cublas": torch.mm, "plugin": op}
    if shape.get("inductor") and not tf32:
        t0 = time.perf_counter()
        try:
            fn, row["inductor_triton_kernel"] = inductor_triton(a, b)
            row["inductor_triton_compile_s"] = round(time.perf_counter() - t0, 1)
            bad = matmul_error(fn(a, b), a, b, rows=rows)
        except Exception as e:  # noqa: BLE001 (the anchor's failure is recorded; the other arms still run)
            fn, bad = None, f"{type(e).__name__}: {str(e)[:300]}"
        if bad:
            row["inductor_triton_err"] = bad
        else:
            arms["inductor_triton"] = fn
    if copy_arms and device == "cuda":
        extra, fields = _copy_arms(a, b, rt, rows, tf32)
        arms.update(extra)
        row.update(fields)
    calls = {arm: (lambda f=f: f(a, b)) for arm, f in arms.items()}
    if device != "cuda":  # a dry run: the logic, not the numbers
        t = lambda fn: median([_wall_ms(fn) for _ in range(3)])  # noqa: E731
        times = rounds(calls, t, n_rounds)
        row["timing"] = "wall (cpu)"
    elif _floor_us(M, N, K, elem) < GRAPH_BELOW_US:
        per_call = (M * K + K * N + M * N) * elem
        sets = [(a, b)] + [_operands(shape, device) for _ in range(rotation(per_call) - 1)]
        timers = {arm: GraphTimer(rotating(f, sets)) for arm, f in arms.items()}
        times = rounds(timers, lambda timer: timer(), n_rounds)
        row.update(timing="cudagraph", rotate=len(sets), graph_calls=timers["plugin"].calls)
        del timers, sets
    else:
        times = rounds(calls, time_ms, n_rounds)
        row["timing"] = "do_bench"
    rs = ratios(times, "cublas", "plugin")
    row.update(cublas_ms=median(times["cublas"]), plugin_ms=median(times["plugin"]), ratio=median(rs),
               ratio_rounds=[round(r, 4) for r in rs])  # fmt: skip
    if "inductor_triton" in times:  # its ratio to cuBLAS, and the plugin's to it, per round
        row.update(inductor_triton_ms=median(times["inductor_triton"]),
                   inductor_triton_ratio=median(ratios(times, "cublas", "inductor_triton")),
                   plugin_vs_inductor_triton=median(ratios(times, "inductor_triton", "plugin")))  # fmt: skip
    for arm in ("in_place", "copied"):
        if arm in times:
            row.update({f"{arm}_ms": median(times[arm]), f"{arm}_ratio": median(ratios(times, "cublas", arm))})
    return row


def _wall_ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


# ---------------------------------------------------------------------------- report


def report(rows: list[dict], suite: str) -> str:
    timed = [r for r in rows if r.get("ratio")]
    wrong = [r for r in rows if r.get("err")]
    xs = [r["ratio"] for r in timed]
    lines = [f"## {suite}: {len(timed)} shapes timed, {len(wrong)} wrong (not timed)"]
    if xs:
        target = TARGETS.get(suite, {})
        got = {"geomean": geomean(xs), "p10": percentile(xs, 10), "min": min(xs)}
        for k, v in got.items():
            t = target.get(k)
            mark = "" if t is None else f"   target >= {t:.2f} {'ok' if v >= t else 'MISSED'}"
            lines.append(f"  {k:8s} {v:.3f}{mark}")
        lines.append("  worst rows:")
        for r in sorted(timed, key=lambda r: r["ratio"])[:10]:
            lines.append(f"    {r['ratio']:.3f} ({spread(r.get('ratio_rounds'))})  {r['M']}x{r['N']}x{r['K']} "
                         f"{r['dtype']} {r['layout']:6s} cublas {1e3 * r['cublas_ms']:8.1f} us  "
                         f"plugin {1e3 * r['plugin_ms']:8.1f} us  [{r.get('config')}] {r.get('source', '')}")  # fmt: skip
    for r in wrong:
        lines.append(f"  WRONG {r['M']}x{r['N']}x{r['K']} {r['dtype']} {r['layout']} [{r.get('config')}]: {r['err']}")
    lines += numerics_report(rows)
    lines += anchor_report(timed)
    return "\n".join(lines)


def numerics_report(rows: list[dict]) -> list[str]:
    """How many shapes have the plugin's error against float64 within ``ERR_RATIO`` of
    cuBLAS's (issue 31's numerics target: every shape), and the worst few."""
    checked = [r for r in rows if r.get("err_ratio") is not None]
    if not checked:
        return []
    over = sorted((r for r in checked if r["err_ratio"] > ERR_RATIO), key=lambda r: -r["err_ratio"])
    lines = [f"  numerics: error within {ERR_RATIO}x of cuBLAS's on {len(checked) - len(over)} of {len(checked)} "
             f"shapes (target: all {'ok' if not over else 'MISSED'}); the largest ratio "
             f"{max(r['err_ratio'] for r in checked):.3g}"]  # fmt: skip
    for r in over[:5]:
        lines.append(f"    {r['err_ratio']:.3g}  {r['M']}x{r['N']}x{r['K']} {r['dtype']} {r['layout']} "
                     f"plugin {r['plugin_err']:.3g} cuBLAS {r['cublas_err']:.3g} [{r.get('config')}]")  # fmt: skip
    return lines


def anchor_report(rows: list[dict]) -> list[str]:
    """Per shape class of the rows with the inductor_triton arm: the plugin's geomean ratio to
    cuBLAS against Inductor's Triton templates' (target: at or above theirs in every class)."""
    anchored = [r for r in rows if r.get("inductor_triton_ratio")]
    if not anchored:
        return []
    by: dict = {}
    for r in anchored:
        by.setdefault(r["shape_class"], []).append(r)
    below = {c: rs for c, rs in by.items() if geomean([r["ratio"] for r in rs]) < geomean([r["inductor_triton_ratio"] for r in rs])}
    lines = [f"  against Inductor's Triton templates ({len(anchored)} shapes, {len(by)} classes): plugin / theirs "
             f"geomean {geomean([r['plugin_vs_inductor_triton'] for r in anchored]):.3f}; at or above theirs in "
             f"{len(by) - len(below)} of {len(by)} classes (target: all {'ok' if not below else 'MISSED'})"]  # fmt: skip
    for cls, rs in sorted(below.items()):
        lines.append(f"    below: {cls:48s} plugin {geomean([r['ratio'] for r in rs]):.3f}  Inductor's Triton "
                     f"{geomean([r['inductor_triton_ratio'] for r in rs]):.3f}  ({len(rs)} shapes, e.g. "
                     f"{rs[0]['M']}x{rs[0]['N']}x{rs[0]['K']} {rs[0]['layout']})")  # fmt: skip
    return lines


def write_classes(jsonl: pathlib.Path, out_dir: pathlib.Path, meta: dict | None = None, routing_table: bool = False,
                  command: str = "") -> dict:  # fmt: skip
    """``<out_dir>/shapes-classes.json`` from every row of ``jsonl`` with ``meta``'s GPU and
    commit (default: the last row's): all the runs at that commit so far. ``routing_table``:
    also the package's table for this GPU (inductor/shape_tables/), which the routing pass
    reads; commit it with the rows it came from."""
    all_rows = read_jsonl(jsonl)
    if meta is None:
        if not all_rows:
            sys.exit(f"{jsonl}: no rows")
        meta = {k: all_rows[-1][k] for k in ("gpu", "commit", "torch", "triton", "date")}
    rows = [r for r in all_rows if r.get("gpu") == meta["gpu"] and r.get("commit") == meta["commit"]
            and r.get("suite") != "tf32"]  # fmt: skip
    classes = class_summary(rows)
    doc = {
        "gpu": meta["gpu"], "commit": meta["commit"], "torch": meta["torch"], "triton": meta["triton"],
        "date": meta["date"], "rows": len(rows), "seeds": sorted({r.get("seed") for r in rows}, key=str),
        "key": "width/layout/alignment/M bucket/N bucket/K bucket (inductor/shape_table.py: shape_class)",
        "verdict": (f"loses: >= {shape_table.MIN_ROWS} rows, the best under {shape_table.LOSES_BELOW:.3f}x cuBLAS; "
                    f"wins: >= {shape_table.MIN_ROWS} rows, the worst over {shape_table.WINS_ABOVE:.2f}x; "
                    "else measure (GPU time: cuBLAS ms / plugin ms)"),
        "command": command,
        "classes": classes,
    }  # fmt: skip
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "shapes-classes.json").write_text(json.dumps(doc, indent=1) + "\n")
    if routing_table:
        path = shape_table.TABLES / f"{shape_table._slug(meta['gpu'])}.json"
        slim = {k: {f: v[f] for f in ("n", "best", "worst", "verdict")} for k, v in classes.items()}
        path.write_text(json.dumps({**doc, "classes": slim}, indent=1) + "\n")
        print(f"routing table: {sum(v['verdict'] != 'measure' for v in slim.values())} sure classes -> {path}")
    return classes


# ------------------------------------------------------------------------------ main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=["random", "models", "all", "none"], default="random",
                   help="'none' with --tf32: the TF32 row alone")  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="repeat a run's shapes (default: a new seed)")
    p.add_argument("--n", type=int, default=200, help="random suite: shapes drawn (default 200)")
    p.add_argument("--limit", type=int, default=240, help="models suite: shapes sampled per run (0: all)")
    p.add_argument("--inductor-n", type=int, default=12,
                   help="shapes per suite also timed with Inductor's Triton templates (max-autotune, TRITON only; "
                        "a compile of 10-30 s each); 0: none")  # fmt: skip
    p.add_argument("--copy-arms", action="store_true",
                   help="on unaligned shapes also time the plugin reading the operands in place and reading aligned "
                        "copies (the data behind configs.copies_pay)")  # fmt: skip
    p.add_argument("--tf32", action="store_true", help="also fp32 with TF32, row-major B, 4096^3 (target >= 0.90)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a dry run through Triton's interpreter on tiny shapes (the logic, not the numbers)")
    p.add_argument("--list", action="store_true", help="print the shapes and exit (no GPU needed)")
    p.add_argument("--routing-table", action="store_true",
                   help="also write the package's routing table for this GPU (inductor/shape_tables/) from the "
                        "rows at this commit: the routing pass then skips timing the classes it is sure of")  # fmt: skip
    p.add_argument("--classes-from", metavar="JSONL", default=None,
                   help="only rewrite <out>/shapes-classes.json from this file's rows at its last row's GPU and "
                        "commit (no GPU needed), e.g. after appending a device run's rows to bench/results")  # fmt: skip
    add_common_args(p, "shapes.jsonl, and shapes-classes.json rewritten", jobs=True)
    args = p.parse_args(argv)
    if args.classes_from:
        classes = write_classes(pathlib.Path(args.classes_from), pathlib.Path(args.out),
                                routing_table=args.routing_table, command=" ".join(["bench/shapes.py", *sys.argv[1:]]))
        print(f"{len(classes)} classes -> {pathlib.Path(args.out) / 'shapes-classes.json'}")
        return

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    cpu = args.device == "cpu"
    todo: list[dict] = []
    if args.suite in ("random", "all"):
        caps = dict(flop_cap=2**21, byte_cap=2**18, m_range=(1, 48), nk_range=(16, 96)) if cpu else {}
        todo += [dict(s, suite="random", seed=seed) for s in random_shapes(args.n, seed, **caps)]
    if args.suite in ("models", "all"):
        shapes = model_shapes()
        total = len(shapes)
        if args.limit and args.limit < total:
            shapes = random.Random(seed).sample(shapes, args.limit)
        if cpu:  # the same structure, sizes scaled to what the interpreter runs in seconds
            shapes = [dict(s, M=min(s["M"], 33), N=max(16, s["N"] // 128), K=max(16, s["K"] // 128)) for s in shapes]
        todo += [dict(s, suite="models", seed=seed) for s in sorted(shapes, key=lambda s: (s["M"], s["N"], s["K"]))]
        print(f"models: {len(shapes)} of {total} distinct shapes (sample seed {seed})", flush=True)
    if args.tf32:
        n = 64 if cpu else 4096
        todo.append(dict(M=n, N=n, K=n, dtype="tf32", layout="row", suite="tf32", seed=None))
    for suite in ("random", "models"):  # the anchor arm on an even spread of each suite's shapes
        mine = [s for s in todo if s["suite"] == suite]
        for i in range(min(args.inductor_n, len(mine))):
            mine[i * len(mine) // args.inductor_n]["inductor"] = True
    for s in todo:
        if args.copy_arms and not shape_aligned(s):
            s["copy_arms"] = True
    if args.list:
        for s in todo:
            print(s)
        return
    if not cpu:
        require_cuda("shapes.py")
    print(f"seed {seed}: {len(todo)} shapes", flush=True)

    import inductor_mm_plugin  # noqa: F401  (registers the ops)

    rt = plugin_runtime()
    meta = run_meta(args.commit)
    print(header(meta), flush=True)
    if not cpu:
        errors = [e for e in precompile(todo, _compile_shape, args.jobs) if e]
        for e in errors[:10]:
            print("  compile error:", e, flush=True)
    out_dir = pathlib.Path(args.out)
    results, t0 = [], time.time()
    for i, shape in enumerate(todo):
        torch.manual_seed(seed + i)
        try:
            row = bench_shape(shape, rt, args.rounds, args.device, copy_arms=shape.get("copy_arms", False))
        except Exception as e:  # noqa: BLE001 (one shape's failure is a row, not the end of the run)
            row = dict(shape, err=f"{type(e).__name__}: {str(e)[:300]}", ratio=None)
        row["suite"], row["seed"] = shape["suite"], shape["seed"]
        results.append(row)
        append_jsonl(out_dir / "shapes.jsonl", [row], meta)  # each row at once: a run cut short keeps them
        ratio = f"{row['ratio']:.3f}" if row.get("ratio") else "  -  "
        print(f"[{i + 1:3d}/{len(todo)}] {row['suite']:6s} {row['M']:5d}x{row['N']:5d}x{row['K']:5d} {row['dtype']} "
              f"{row['layout']:6s} ratio {ratio} {row.get('timing', '')} [{row.get('config')}]"
              + (f"  ERROR {row['err']}" if row.get("err") else ""), flush=True)  # fmt: skip
        if not cpu:
            torch.cuda.empty_cache()
    print(f"timed {len(todo)} shapes in {time.time() - t0:.0f}s", flush=True)
    classes = write_classes(out_dir / "shapes.jsonl", out_dir, meta, routing_table=args.routing_table,
                            command=" ".join(["bench/shapes.py", *sys.argv[1:]]))  # fmt: skip
    losing = {k: v for k, v in classes.items() if v["verdict"] == "loses"}
    print(f"\nshape classes with rows at this commit: {len(classes)}; sure losers: {len(losing)}")
    for k, v in sorted(losing.items(), key=lambda kv: kv[1]["geomean"])[:15]:
        print(f"  {k:48s} n={v['n']:3d} geomean {v['geomean']:.3f} best {v['best']:.3f}  worst {v['worst_shape']}")
    print()
    for suite in ("random", "models", "tf32"):
        rows = [r for r in results if r["suite"] == suite]
        if rows:
            print(report(rows, suite))
    print(f"\n{header(meta)}; seed {seed}; rows appended to {out_dir / 'shapes.jsonl'}")


if __name__ == "__main__":
    main()
