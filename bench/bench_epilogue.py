"""Fused-epilogue suite: the plugin backend against stock torch.compile, side by side, one run.

    python bench/bench_epilogue.py                      # suite + transformer block, default mode
    python bench/bench_epilogue.py --max-autotune       # also stock max-autotune (slow to compile)

Blocks (bf16): Linear+GELU, Linear+SiLU, a SwiGLU MLP (down(silu(gate(x)) * up(x))) and
Linear + residual, at tokens M in {2048, 8192} and (hidden, ffn) in {(4096, 14336),
(2048, 8192), (1024, 4096)}; then the A/B example's transformer block (8 x 2048, d 4096).
Each block is compiled outside the timed region (``torch._dynamo.reset()`` per block) and
timed under CUDA graphs (``triton.testing.do_bench_cudagraph``, median), every arm on the
same inputs, after checking the plugin's output against eager; the arms are timed in
``--rounds`` rounds, the order reversed each round (``_timing.py``), and speedup = stock time
/ plugin time within a round, the median over rounds. Writes
``<out>/<date>-<gpu>-epilogue.{json,md}`` with date, GPU and versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.testing
from _timing import frames_compiled, median, ratios, rounds, sm_clock, spread

import inductor_mm_plugin

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

DT = torch.bfloat16
TOKENS = (2048, 8192)
WIDTHS = ((4096, 14336), (2048, 8192), (1024, 4096))


class LinearAct(nn.Module):
    def __init__(self, d, f, act):
        super().__init__()
        self.lin, self.act = nn.Linear(d, f, device="cuda", dtype=DT), act

    def forward(self, x):
        return self.act(self.lin(x))


class SwiGLU(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        kw = dict(bias=False, device="cuda", dtype=DT)
        self.gate, self.up, self.down = nn.Linear(d, f, **kw), nn.Linear(d, f, **kw), nn.Linear(f, d, **kw)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Residual(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d, device="cuda", dtype=DT)

    def forward(self, x):
        return x + self.lin(x)


def suite(quick=False, tokens=TOKENS, widths=WIDTHS):
    for m in TOKENS[-1:] if quick else tokens:
        for d, f in (WIDTHS[0], WIDTHS[-1]) if quick else widths:
            yield "Linear+GELU", m, d, f, d, lambda d=d, f=f: LinearAct(d, f, F.gelu)
            yield "Linear+SiLU", m, d, f, d, lambda d=d, f=f: LinearAct(d, f, F.silu)
            yield "SwiGLU MLP", m, d, f, d, lambda d=d, f=f: SwiGLU(d, f)
            yield "Linear+residual", m, d, d, d, lambda d=d: Residual(d)


def init_(model):
    for p in model.parameters():  # trained-model scale keeps bf16 activations O(1)
        if p.dim() == 2:
            nn.init.normal_(p, std=p.shape[1] ** -0.5)
    return model


def compile_arm(model, x, **compile_kwargs):
    t0 = time.perf_counter()
    compiled = torch.compile(model, **compile_kwargs)
    out = compiled(x)
    torch.cuda.synchronize()
    return compiled, out, time.perf_counter() - t0


def bench_block(name, model, x, max_autotune, n_rounds=3):
    """Compile every arm, then time them in rounds (``_timing.rounds``): the same code object
    compiled by several backends keeps one Dynamo cache entry per backend, so the arms can
    alternate without recompiling (checked below)."""
    arms = {"plugin": dict(backend="inductor_mm_plugin"), "stock": {}}
    if max_autotune:
        arms["max_autotune"] = dict(mode="max-autotune-no-cudagraphs")
    with torch.no_grad():
        torch._dynamo.reset()
        ref = model(x)
        compiled, compile_s = {}, {}
        for arm, kwargs in arms.items():
            compiled[arm], out, compile_s[arm] = compile_arm(model, x, **kwargs)
            if arm == "plugin":
                err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                assert err < 3e-2, f"{name}: plugin output differs from eager by {err:.2e} (relative)"
            del out
        frames = frames_compiled()
        times = rounds({arm: (lambda c=c: c(x)) for arm, c in compiled.items()},
                       lambda fn: triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median"), n_rounds)
        if frames_compiled() != frames:
            raise RuntimeError(f"{name}: an arm recompiled while timed; the rounds would time compiles")
        speedups = ratios(times, "stock", "plugin")
        row = {"block": name, "plugin_ms": median(times["plugin"]), "stock_ms": median(times["stock"]),
               "speedup": median(speedups), "speedup_rounds": speedups, "rel_err": err,
               "plugin_compile_s": compile_s["plugin"], "stock_compile_s": compile_s["stock"]}  # fmt: skip
        if max_autotune:
            row.update(max_autotune_ms=median(times["max_autotune"]),
                       speedup_vs_max_autotune=median(ratios(times, "max_autotune", "plugin")),
                       max_autotune_compile_s=compile_s["max_autotune"])  # fmt: skip
    return row


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-autotune", action="store_true", help="also time stock max-autotune")
    p.add_argument("--no-block", action="store_true", help="skip the transformer block")
    p.add_argument("--quick", action="store_true", help="M=8192 and (hidden, ffn) in {(4096, 14336), (1024, 4096)} only")
    p.add_argument("--tokens", nargs="*", type=int, default=list(TOKENS), choices=TOKENS,
                   help="the suite's token counts M to run (both by default)")
    p.add_argument("--widths", nargs="*", default=[f"{d}x{f}" for d, f in WIDTHS],
                   choices=[f"{d}x{f}" for d, f in WIDTHS], help="the suite's (hidden x ffn) pairs to run (all by default)")
    p.add_argument("--rounds", type=int, default=3,
                   help="time the arms this many times, order reversed each round (_timing.py)")
    p.add_argument("--out", default="bench/results")
    p.add_argument("--tag", default="", help="suffix of the output file names")
    p.add_argument("--commit", default=None, help="commit to record (the GPU machine's copy has no git history)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_epilogue.py needs a CUDA device")

    meta = {
        "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "plugin": inductor_mm_plugin.__version__, "commit": args.commit,
        "rounds": args.rounds, "tokens": args.tokens, "widths": args.widths, "sm_clock_start": sm_clock(),
    }  # fmt: skip
    rows = []
    for name, m, d, f, k, make in suite(args.quick, args.tokens, [tuple(map(int, w.split('x'))) for w in args.widths]):
        torch.manual_seed(0)
        model = init_(make())
        x = torch.randn(m, d, device="cuda", dtype=DT)
        row = bench_block(name, model, x, args.max_autotune, args.rounds)
        row.update(M=m, hidden=d, ffn=f, K=k)
        rows.append(row)
        mat = f"  max-autotune {row['max_autotune_ms']:.3f}" if "max_autotune_ms" in row else ""
        print(f"{name:16s} M={m:5d} d={d:5d} f={f:5d}  stock {row['stock_ms']:.3f} ms  plugin {row['plugin_ms']:.3f} ms"
              f"  x{row['speedup']:.3f}{mat}", flush=True)  # fmt: skip
        write(args, meta, rows, None)  # after every row: a run cut short keeps what it measured
        del model, x

    block = None
    if not args.no_block:
        import transformer_block

        model, (x,) = transformer_block.make()
        block = bench_block("transformer block 8x2048 d4096", model, x, args.max_autotune, args.rounds)
        print(f"transformer block: stock {block['stock_ms']:.3f} ms  plugin {block['plugin_ms']:.3f} ms  "
              f"x{block['speedup']:.3f}", flush=True)  # fmt: skip
    meta["sm_clock_end"] = sm_clock()
    print(write(args, meta, rows, block))


def write(args, meta, rows, block) -> str:
    """Write ``<out>/<date>-<gpu>-epilogue.{json,md}``; returns the markdown."""
    summary = {
        "geomean_vs_stock": geomean([r["speedup"] for r in rows]),
        "min_k_le_2048_vs_stock": min((r["speedup"] for r in rows if r["K"] <= 2048), default=float("nan")),
    }
    if args.max_autotune:
        summary["geomean_vs_max_autotune"] = geomean([r["speedup_vs_max_autotune"] for r in rows])
    md = [f"# Fused-epilogue suite — {meta['date']}", "",
          f"GPU {meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, plugin {meta['plugin']} "
          f"(commit {meta['commit']}); bf16; "
          "ms per call under CUDA graphs (do_bench_cudagraph median), arms timed in "
          f"{meta.get('rounds', 1)} round(s), order reversed each round (bench/_timing.py); speedup = stock / "
          "plugin within a round, median over rounds (range: lowest-highest round). SM clock (nvidia-smi) at "
          f"start: {meta.get('sm_clock_start', '?')}; at end: {meta.get('sm_clock_end', '(run cut short)')}.", "",
          "| block | M | hidden | ffn | stock ms | plugin ms | speedup | range | max-autotune ms | vs max-autotune |",
          "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows + ([block] if block else []):
        mat = f"{r['max_autotune_ms']:.3f} | {r['speedup_vs_max_autotune']:.3f}" if "max_autotune_ms" in r else "- | -"
        md.append(f"| {r['block']} | {r.get('M', 16384)} | {r.get('hidden', 4096)} | {r.get('ffn', 14336)} | "
                  f"{r['stock_ms']:.3f} | {r['plugin_ms']:.3f} | {r['speedup']:.3f} | {spread(r.get('speedup_rounds'), '.3f')} | "
                  f"{mat} |")  # fmt: skip
    part = "" if sorted(meta.get("tokens", TOKENS)) == list(TOKENS) else f" (M = {', '.join(map(str, meta['tokens']))} only)"
    if len(meta.get("widths", WIDTHS)) < len(WIDTHS):
        part += f" (hidden x ffn = {', '.join(meta['widths'])} only)"
    md += ["", f"Suite{part} geomean vs stock default: {summary['geomean_vs_stock']:.3f}; "
               f"smallest speedup with K ≤ 2048: {summary['min_k_le_2048_vs_stock']:.3f}"
               + (f"; geomean vs stock max-autotune: {summary['geomean_vs_max_autotune']:.3f}" if args.max_autotune else "")]  # fmt: skip
    text = "\n".join(md) + "\n"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{meta['date']}-{meta['gpu'].replace(' ', '_')}-epilogue" + (f"-{args.tag}" if args.tag else "")
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows, "block": block, "summary": summary}, indent=1))
    (out / f"{stem}.md").write_text(text)
    return text

if __name__ == "__main__":
    main()
