"""The sweep behind the selector's table (issue 31): drawn shapes x a grid of configs, GPU time.

    python bench/sweep_selector.py --draw random --n 150 --seed 7 --out DIR   # resumes DIR/selector.jsonl
    python bench/sweep_selector.py --draw models --n 120 --seed 7 --out DIR
    python bench/sweep_selector.py --fit DIR/selector.jsonl ...                # the table, from the rows
    python bench/sweep_selector.py --device cpu --draw random --n 2 --out DIR  # a dry run (interpreter)

Shapes are drawn, not listed: ``random`` from ``shapes.random_shapes`` (the random suite's
distribution, bf16), ``models`` a sample of ``shapes.model_shapes``; the seed is recorded and a
rerun with the same ``--seed`` and ``--out`` skips the shapes already in the file, so a sweep
cut short by a 10-minute device call resumes where it stopped. Unaligned shapes run every
config on aligned copies (``copy_unaligned=True``), the path the runtime takes for them.

Per shape: every config of ``GRID`` (or the skinny grid, M <= 128) that fits, checked against
float64 into a NaN-poisoned output, then cuBLAS, the default op and every config in
``--rounds`` interleaved rounds (order reversed each round): CUDA graphs cycling through
operand sets beyond the L2 where the shape's floor is under 50 us, ``do_bench`` above.
One JSONL row per shape: date, commit, GPU, torch, triton, seed, index, M, N, K, layout,
cublas_ms, default_ms, default_config, and ``results`` (config, ms, ratio to cuBLAS).
``--fit`` writes ``configs/tables/NVIDIA_H200.json`` from these rows: per config, the
coefficients of ``configs/selector.py``'s time estimate, with the sweep's provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sys

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1 :][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the package defines its kernels

import torch
from _timing import (
    GraphTimer, add_common_args, append_jsonl, config_name, dtype_of, make_operands, matmul_error, median,
    plugin_runtime, precompile, ratios, read_jsonl, rotating, rotation, rounds, run_meta, time_ms,
)  # fmt: skip
from shapes import GRAPH_BELOW_US, _floor_us, shape_aligned
from suites import model_shapes, random_shapes
from sweep_configs import T, _deepest, _ptr_inductor, _skinny_configs, _skinny_rows, _spec

from inductor_mm_plugin.configs import Problem, fits, selector, tail_fits
from inductor_mm_plugin.configs.space import DEFAULT_NUM_SMS, cdiv, useful_split
from inductor_mm_plugin.runtime.layout import pointer_hints

TABLE = pathlib.Path(selector.__file__).parent / "tables" / "NVIDIA_H200.json"

# Above the skinny range: the tiles the tables hold, each unsplit and split.
GRID = [
    T(128, 256, 64, 8, 8, 3, flat=True),
    T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
    T(256, 128, 64, 8, 8, 3, sub=True, flat=True),
    T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
    T(128, 128, 128, 8, 8, 3, sub=True, flat=True),
    T(128, 128, 64, 8, 4, 4, flat=True),
    T(128, 64, 64, 8, 4, 4, flat=True),
    T(64, 128, 64, 8, 4, 4, flat=True),
    T(64, 64, 64, 8, 4, 4, flat=True),
    T(128, 256, 64, 8, 8, 3, 2, sub=True),
    T(128, 128, 64, 8, 8, 4, 2, sub=True),
    T(128, 128, 64, 8, 8, 4, 4, sub=True),
    T(128, 128, 64, 8, 8, 4, 8, sub=True),
    T(128, 64, 64, 8, 4, 4, 2),
    T(128, 64, 64, 8, 4, 4, 4),
    T(64, 128, 64, 8, 4, 4, 2),
    T(64, 64, 64, 8, 4, 4, 2),
    T(64, 64, 64, 8, 4, 4, 4),
    T(64, 64, 64, 8, 4, 4, 8),
    # Not yet swept (2026-12-02): what the first sweep's losing classes may want (docs/performance.md,
    # "The selector"): wide 64-row tiles for 129-256 rows, deeper splits for few tiles and a long K.
    T(64, 256, 64, 8, 8, 3, flat=True),
    T(64, 256, 64, 8, 8, 3, 2),
    T(128, 256, 64, 8, 8, 3, 4, sub=True),
    T(128, 128, 64, 8, 8, 4, 16, sub=True),
    T(64, 128, 64, 8, 4, 4, 4),
    # The last round split, the full ones whole (split_tail), for tiles that fill one to a few
    # rounds and part of one more, on the flattened tiles that win the mid-size shapes, 8 warps
    # (a 4-warp 128x128 tail ran 0.36-0.57 of its whole tile, 255 registers), at most 4 slices
    # (8 never beat the whole tile). Swept once, H100, 2026-12-07 (--tail-only, 55 shapes; rows
    # in bench/results/archive): not in the H200 table. Timed only where they apply (_tail_applies).
    T(128, 256, 64, 8, 8, 3, 2, sub=True, flat=True, tail=True),
    T(128, 256, 64, 8, 8, 3, 4, sub=True, flat=True, tail=True),
    T(128, 128, 64, 8, 8, 4, 2, sub=True, flat=True, tail=True),
    T(128, 128, 64, 8, 8, 4, 4, sub=True, flat=True, tail=True),
]  # fmt: skip


def configs_for(M: int, N: int, K: int, aligned: bool = True) -> list:
    """The TMA grid (the skinny one for M <= 128) and, where TMA reads the operands in place,
    Inductor's mm configs scaled to the shape through the pointer kernel (the kernel Inductor's
    templates win with on short K and 64 < M <= 256: issue 31)."""
    grid = _skinny_configs(M) + _skinny_deep_splits(M, N) if M <= 128 else GRID
    if aligned:
        grid = grid + _ptr_inductor((M, N, K))
    return [c for c in grid if fits(c, 2) and useful_split(K, c.block_k, c.split_k) and _tail_applies(M, N, c)]


def _tail_applies(M: int, N: int, cfg) -> bool:
    """A split_tail config only where it applies (``configs.tail_fits``)."""
    if not getattr(cfg, "split_tail", False):
        return True
    return tail_fits(Problem(M, N, 1, 1, 2, "bfloat16", tma=True), cfg)


def _skinny_deep_splits(M: int, N: int, sms: int = DEFAULT_NUM_SMS) -> list:
    """Skinny tiles split 8 and 16 ways where they stay within two waves: few columns and a
    long K leave most SMs idle at split 4 (1x104x29120: 4 tiles of 32 columns, 16 programs,
    0.49x cuBLAS at 2fe7d4d). Not yet swept (2026-12-02)."""
    bm = _skinny_rows(M)
    return [_deepest(T(bm, bn, bk, 1, 4, 6, split, False, False))
            for bn in (32, 64) for bk in ((128, 256) if bm < 64 else (128,)) for split in (8, 16)
            if cdiv(N, bn) * cdiv(M, bm) * split <= 2 * sms]  # fmt: skip


def _compile_key(s: dict, cfg) -> tuple:
    """What one compiled kernel serves: Triton's integer specializations (== 1, divisible by
    16) and, for the pointer kernel, its per-operand load widths (runtime.layout)."""
    key = (s["layout"], shape_aligned(s), cfg, *map(_spec, (s["M"], s["N"], s["K"])))
    if cfg.kernel == "ptr":
        a, b = make_operands(s["M"], s["N"], s["K"], dtype_of(s["dtype"]), s["layout"], fill=False, device="meta")
        key += tuple(sorted(pointer_hints(a, b, torch.empty(s["M"], s["N"], device="meta")).items()))
    return key


def drawn(kind: str, n: int, seed: int) -> list[dict]:
    if kind == "random":
        shapes = [dict(s, dtype="bf16") for s in random_shapes(n, seed)]
    else:
        pool = model_shapes()
        shapes = random.Random(seed).sample(pool, min(n, len(pool)))
    return [dict(s, draw=kind, seed=seed, index=i) for i, s in enumerate(shapes)]


def _launch_kw(s) -> dict:
    return {} if shape_aligned(s) else {"copy_unaligned": True}


def _compile(task):
    s, cfg = task
    try:
        a, b = make_operands(s["M"], s["N"], s["K"], dtype_of(s["dtype"]), s["layout"], fill=False)
        out = torch.empty(s["M"], s["N"], device="cuda", dtype=a.dtype)
        plugin_runtime().launch(a, b, out, config=cfg, compile_only=True, **_launch_kw(s))
        return None
    except Exception as e:  # noqa: BLE001 (the timed run reports it per config)
        return f"{s['M']}x{s['N']}x{s['K']} {s['layout']} {config_name(cfg)}: {type(e).__name__}: {str(e)[:200]}"


def sweep_shape(s: dict, n_rounds: int, device: str) -> dict:
    rt = plugin_runtime()
    M, N, K = s["M"], s["N"], s["K"]
    a, b = make_operands(M, N, K, dtype_of(s["dtype"]), s["layout"], device=device)
    kw = _launch_kw(s)
    op = torch.ops.inductor_mm_plugin.mm
    default = rt.launch(a, b, torch.empty(M, N, device=device, dtype=a.dtype))
    fns = {"cublas": torch.mm, "default": op}
    results = {}
    for cfg in configs_for(M, N, K, shape_aligned(s)):
        name = cfg.short()
        out = torch.full((M, N), float("nan"), device=device, dtype=a.dtype)
        try:
            rt.launch(a, b, out, config=cfg, **kw)
            wrong = matmul_error(out, a, b)
        except Exception as e:  # noqa: BLE001 (a config that fails is a result)
            wrong = f"{type(e).__name__}: {str(e)[:200]}"
        results[name] = dict(config=name, error=wrong) if wrong else dict(config=name)
        if not wrong:
            fns[name] = lambda x, y, cfg=cfg, out=out: rt.launch(x, y, out, config=cfg, **kw)
    if device != "cuda":
        times = rounds({k: (lambda f=f: f(a, b)) for k, f in fns.items()}, lambda fn: (fn(), 1.0)[1], n_rounds)
        timing = "none (cpu)"
    elif _floor_us(M, N, K, 2) < GRAPH_BELOW_US:
        more = rotation((M * K + K * N + M * N) * 2) - 1
        sets = [(a, b)] + [make_operands(M, N, K, a.dtype, s["layout"]) for _ in range(more)]
        timers = {k: GraphTimer(rotating(f, sets)) for k, f in fns.items()}
        times = rounds(timers, lambda timer: timer(), n_rounds)
        timing = "cudagraph"
        del timers, sets
    else:
        times = rounds({k: (lambda f=f: f(a, b)) for k, f in fns.items()}, time_ms, n_rounds)
        timing = "do_bench"
    for name, r in results.items():
        if name in times:
            r.update(ms=median(times[name]), ratio=median(ratios(times, "cublas", name)))
    return dict(s, aligned=shape_aligned(s), timing=timing, cublas_ms=median(times["cublas"]),
                default_ms=median(times["default"]), default_ratio=median(ratios(times, "cublas", "default")),
                default_config=config_name(default.cfg), results=list(results.values()))  # fmt: skip


def _fit_nonnegative(X, y):
    """Least squares on relative error, ``min sum(((X c - y) / y)^2)``, with every coefficient
    at least 0 (no config may be estimated to take negative time): a feature whose coefficient
    comes out negative is dropped and the rest fitted again."""
    import numpy as np

    keep = list(range(X.shape[1]))
    while True:
        sub, *_ = np.linalg.lstsq(X[:, keep] / y[:, None], np.ones(len(y)), rcond=None)
        if (sub >= 0).all():
            coef = np.zeros(X.shape[1])
            coef[keep] = sub
            return coef
        keep.pop(int(np.argmin(sub)))


PER_SM = (1, 2, 3, 4)  # the pointer kernel's programs per SM the fit tries (selector.Entry.per_sm)


def _grid(rows: list[dict]) -> dict:
    """Config name -> config, for every config the rows' shapes were swept with."""
    return {c.short(): c for r in rows for c in configs_for(r["M"], r["N"], r["K"], r.get("aligned", True))}


def fit_entries(rows: list[dict], grid: dict | None = None) -> list[tuple]:
    """(selector.Entry, points) per config timed on at least selector.MIN_POINTS (pointer
    kernel: POINTER_MIN_POINTS) of the rows: its time
    fitted over the selector's features, on relative error; for a pointer-kernel config with
    the programs per SM (PER_SM) that fit best."""
    import numpy as np

    from inductor_mm_plugin.configs import MatmulConfig, selector

    grid = _grid(rows) if grid is None else grid
    timed: dict[str, list] = {}
    for r in rows:
        for x in r["results"]:
            if x.get("ms") and x["config"] in grid:
                timed.setdefault(x["config"], []).append((r["M"], r["N"], r["K"], x["ms"] * 1e3))
    entries = []
    for name, pts in sorted(timed.items()):
        cfg = MatmulConfig(**grid[name].to_json())
        if len(pts) < (selector.POINTER_MIN_POINTS if cfg.kernel == "ptr" else selector.MIN_POINTS):
            continue
        y = np.array([t for *_, t in pts])
        best = None
        for per_sm in PER_SM if cfg.kernel == "ptr" else (1,):
            X = np.array([selector.features(M, N, K, cfg, per_sm=per_sm) for M, N, K, _ in pts])
            coef = _fit_nonnegative(X, y)
            err = float(np.sum(((X @ coef - y) / y) ** 2))
            if best is None or err < best[0]:
                best = (err, per_sm, coef)
        _, per_sm, coef = best
        skinny = cfg.kernel == "tma" and grid[name] not in GRID
        entries.append((selector.Entry(cfg, skinny, tuple(float(round(c, 6)) for c in coef), per_sm), len(pts)))
    return entries


def fit(rows: list[dict], command: str) -> dict:
    """The selector's table (``configs/selector.py``) from sweep rows, with their provenance."""
    from inductor_mm_plugin.configs import selector

    entries = [dict(config=e.config.to_json(), skinny=e.skinny, points=n, coef=list(e.coef), per_sm=e.per_sm)
               for e, n in fit_entries(rows)]  # fmt: skip
    last = rows[-1]
    provenance = dict(command=command, seeds=sorted({(r.get("draw", r.get("group")), r["seed"]) for r in rows}),
                      shapes=len(rows), date=last.get("date"), commit=last.get("commit"), gpu=last.get("gpu"),
                      torch=last.get("torch"), triton=last.get("triton"))  # fmt: skip
    return dict(provenance=provenance, features=selector.FEATURES, entries=entries)


def _problem(r: dict):
    from inductor_mm_plugin.configs import Problem

    t = r["layout"].startswith("t_")
    return Problem(r["M"], r["N"], r["K"], 1, 2, "bfloat16", tma=True, a_kmajor=not t,
                   b_kmajor=r["layout"].endswith("linear"))  # fmt: skip


def leave_one_out(rows: list[dict], kernels=("tma", "ptr")) -> dict:
    """Each shape's pick from a table fitted without that shape's row, read off the row: the
    geomeans over shapes of cuBLAS / picked, / default (the op as it ran) and / best (the
    row's best config), and the fraction within 5% of the best. ``kernels``: which entries
    compete (("tma",): the table before the pointer kernel's entries)."""
    from inductor_mm_plugin.configs import selector
    from inductor_mm_plugin.runtime.benchmarking import geomean

    grid = _grid(rows)
    picked, default, best, close = [], [], [], 0
    for i, r in enumerate(rows):
        ratio = {x["config"]: x["ratio"] for x in r["results"] if x.get("ratio")}
        if not ratio:
            continue
        # Unaligned shapes ran on aligned copies, where only a TMA pick is a copy's (runtime._copies).
        allowed = kernels if r.get("aligned", True) else ("tma",)
        entries = [e for e, _ in fit_entries(rows[:i] + rows[i + 1 :], grid) if e.config.kernel in allowed]
        cfg = selector.select(_problem(r), tuple(entries))
        got = ratio.get(cfg.short()) if cfg else None
        if got is None:  # a pick the row did not time: count the default
            got = r["default_ratio"]
        picked.append(got)
        default.append(r["default_ratio"])
        best.append(max(ratio.values()))
        close += got >= 0.95 * best[-1]
    return dict(shapes=len(picked), picked=geomean(picked), default=geomean(default), best=geomean(best),
                within_5pct=close / max(1, len(picked)))  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draw", choices=["random", "models"], default="random")
    p.add_argument("--n", type=int, default=150, help="shapes drawn (default 150)")
    p.add_argument("--seed", type=int, default=None, help="the draw's seed (required to sweep; a rerun with it resumes)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tail-only", action="store_true",
                   help="sweep only the drawn shapes where a split_tail entry of the grid applies (more rows for "
                        "those entries per device second; each shape still times the whole grid)")
    p.add_argument("--fit", metavar="JSONL", nargs="+", default=None,
                   help="no sweep: fit the selector's table from these files' rows and write it to --table")
    p.add_argument("--table", default=str(TABLE), help=f"where --fit writes the table (default {TABLE})")
    p.add_argument("--loo", action="store_true",
                   help="with --fit: also print the leave-one-shape-out geomeans (TMA entries only, and all)")
    add_common_args(p, "selector.jsonl", rounds=3, jobs=True)
    args = p.parse_args(argv)
    if args.fit:
        rows = [r for f in args.fit for r in read_jsonl(f)]
        table = fit(rows, " ".join(["bench/sweep_selector.py", *sys.argv[1:]]))
        pathlib.Path(args.table).write_text(json.dumps(table, indent=1) + "\n")
        print(f"{len(table['entries'])} configs fitted from {len(rows)} shapes -> {args.table}")
        if args.loo:
            for kernels in (("tma",), ("tma", "ptr")):
                print(f"leave-one-shape-out, {'+'.join(kernels)} entries:", leave_one_out(rows, kernels))
        return
    if args.seed is None:
        p.error("--seed is required to sweep (a new one per sweep; the same one resumes)")
    import inductor_mm_plugin  # noqa: F401  (registers the ops)

    jsonl = pathlib.Path(args.out) / "selector.jsonl"
    done = {(r.get("draw"), r.get("seed"), r.get("index")) for r in read_jsonl(jsonl)} if jsonl.exists() else set()
    todo = [s for s in drawn(args.draw, args.n, args.seed) if (s["draw"], s["seed"], s["index"]) not in done]
    if args.tail_only:
        todo = [s for s in todo if any(c.split_tail for c in configs_for(s["M"], s["N"], s["K"], shape_aligned(s)))]
    if args.device == "cpu":
        todo = [dict(s, M=min(s["M"], 40), N=min(s["N"], 48), K=min(s["K"], 64)) for s in todo]
    print(f"{args.draw} seed {args.seed}: {len(todo)} shapes to sweep ({len(done)} in {jsonl})", flush=True)
    meta = run_meta(args.commit)
    if args.device == "cuda":
        # One compile per kernel specialization (Triton's: integers equal to 1 or divisible by 16).
        tasks = {_compile_key(s, c): (s, c) for s in todo for c in configs_for(s["M"], s["N"], s["K"], shape_aligned(s))}
        tasks = list(tasks.values())
        for e in [e for e in precompile(tasks, _compile, args.jobs) if e][:10]:
            print("  compile failed:", e, flush=True)
    for s in todo:
        row = sweep_shape(s, args.rounds, args.device)
        append_jsonl(jsonl, [row], meta)  # each shape at once: a cut-short call keeps its rows
        ok = [r for r in row["results"] if r.get("ratio")]
        best = max(ok, key=lambda r: r["ratio"]) if ok else {}
        print(f"{s['index']:4d} {s['M']:6d}x{s['N']:6d}x{s['K']:6d} {s['layout']:8s} default {row['default_ratio']:.3f} "
              f"[{row['default_config']}] best {best.get('ratio', 0):.3f} [{best.get('config')}]", flush=True)  # fmt: skip
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
