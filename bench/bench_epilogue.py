"""Fused-epilogue suite: the plugin backend against stock torch.compile, side by side, one run.

    python bench/bench_epilogue.py                      # suite + transformer block, default mode
    python bench/bench_epilogue.py --max-autotune       # also stock max-autotune (slow to compile)
    python bench/bench_epilogue.py --floors --no-block  # also issue 32's floors (Linear+GELU/SiLU)

Blocks (bf16): Linear+GELU, Linear+SiLU, a SwiGLU MLP (down(silu(gate(x)) * up(x))) and
Linear + residual, at tokens M in {2048, 8192} and (hidden, ffn) in {(4096, 14336),
(2048, 8192), (1024, 4096)}; then the A/B example's transformer block (8 x 2048, d 4096).
Each block is compiled outside the timed region (``torch._dynamo.reset()`` per block) and
timed under CUDA graphs (each arm's call captured once, ``_timing.GraphTimer``, the median of
its replays), every arm on the same inputs, after checking each arm's output against eager;
the arms are timed in ``--rounds`` rounds, the order reversed each round (``_timing.py``), and
speedup = stock time / plugin time within a round, the median over rounds. Appends one JSONL
row per block to ``<out>/epilogue.jsonl`` (date, commit, gpu, torch, triton, block, M, hidden,
ffn, K, stock_ms, plugin_ms, speedup, speedup_rounds, rel_err, the compile times, the
max-autotune fields with ``--max-autotune`` and ``floor_fields``' with ``--floors``) and prints
the markdown table (``--md FILE`` writes it too).
"""


from __future__ import annotations

import argparse
import copy
import pathlib
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from _timing import (
    GraphTimer, add_common_args, append_jsonl, frames_compiled, geomean, median, plugin_backend, ratios, require_cuda,
    rounds, run_meta, sm_clock, spread,
)  # fmt: skip

from inductor_mm_plugin.kernels.activation import GELU_Q  # the fused kernel's erfc polynomial

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

DT = torch.bfloat16
TOKENS = (2048, 8192)
WIDTHS = ((4096, 14336), (2048, 8192), (1024, 4096))


class LinearAct(nn.Module):
    def __init__(self, d, f, act, device="cuda"):
        super().__init__()
        self.lin, self.act = nn.Linear(d, f, device=device, dtype=DT), act

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


BLOCKS = ("Linear+GELU", "Linear+SiLU", "SwiGLU MLP", "Linear+residual")


def suite(quick=False, tokens=TOKENS, widths=WIDTHS, blocks=BLOCKS):
    for m in TOKENS[-1:] if quick else tokens:
        for d, f in (WIDTHS[0], WIDTHS[-1]) if quick else widths:
            made = {"Linear+GELU": (f, lambda d=d, f=f: LinearAct(d, f, F.gelu)),
                    "Linear+SiLU": (f, lambda d=d, f=f: LinearAct(d, f, F.silu)),
                    "SwiGLU MLP": (f, lambda d=d, f=f: SwiGLU(d, f)),
                    "Linear+residual": (d, lambda d=d: Residual(d))}  # fmt: skip
            for name in blocks:
                yield name, m, d, made[name][0], d, made[name][1]


def init_(model):
    for p in model.parameters():  # trained-model scale keeps bf16 activations O(1)
        if p.dim() == 2:
            nn.init.normal_(p, std=p.shape[1] ** -0.5)
    return model


def relative_error(out, ref) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def time_arms(name, x, arms: dict[str, tuple], n_rounds=3, max_err=3e-2):
    """Each arm is ``(fn, reference)``: ``fn(x)`` compiles at its first call (a
    ``torch.compile``d module) or runs eagerly, and must match the eager ``reference(x)``.
    Call each once (timed as its compile), check it, then time the arms in rounds
    (``_timing.rounds``); returns (times per arm, compile seconds per arm, relative error per
    arm). The same code object compiled by several backends keeps one Dynamo cache entry per
    backend, so the arms alternate without recompiling (checked)."""
    with torch.no_grad():
        torch._dynamo.reset()
        compile_s, err = {}, {}
        for arm, (fn, reference) in arms.items():
            t0 = time.perf_counter()
            out = fn(x)
            torch.cuda.synchronize()
            compile_s[arm] = time.perf_counter() - t0
            err[arm] = relative_error(out, reference(x))
            assert err[arm] < max_err, f"{name}: arm {arm} differs from eager by {err[arm]:.2e} (relative)"
            del out
        frames = frames_compiled()
        timers = {arm: GraphTimer(lambda fn=fn: fn(x), target_ms=10.0) for arm, (fn, _) in arms.items()}
        rounds(timers, lambda timer: timer(replays=5), 1, mirrored=True)  # the GPU warmed first (discarded)
        times = rounds(timers, lambda timer: timer(replays=5), n_rounds, mirrored=True)
        if frames_compiled() != frames:
            raise RuntimeError(f"{name}: an arm recompiled while timed; the rounds would time compiles")
    return times, compile_s, err


# Issue 32's floors, for a Linear+activation block: the same Linear without its activation,
# by cuBLAS and by the plugin (its extern kernel: ``compete=False`` routes a site with no
# epilogue there); the block with its activation fused into the plugin's template (where
# ``compete=False`` routes a site with one); and cuBLASLt's own bias+GELU epilogue
# (``torch._addmm_activation``, tanh GELU), the bar the issue sets. A GELU block also runs
# fused with its GELU written as ``gelu_one_exp``.
FORCED = dict(select="all", compete=False)

def gelu_one_exp(x: torch.Tensor) -> torch.Tensor:
    """The exact (erf) GELU in torch ops with one exp: x (1 - erfc(u) / 2) for u = x / sqrt(2) >= 0,
    x erfc(-u) / 2 below, erfc(a) = exp(Q(a) - a^2). Inductor writes ``libdevice.erf`` for
    ``F.gelu`` (an erf's polynomials on both sides of its branch, per element); fused into the
    template's epilogue this is one ``libdevice.exp`` and a Horner chain: what an epilogue of the
    plugin's own would cost (issue 32). Computed in float32 as Inductor computes GELU."""
    xf = x.float()
    u = xf * 0.7071067811865476
    s = u.abs().clamp_max(4.0) - 2.0
    q = torch.full_like(s, GELU_Q[-1])
    for c in GELU_Q[-2::-1]:
        q = q * s + c
    half_erfc = 0.5 * torch.exp(q - u * u)
    return torch.where(u >= 0, xf - xf * half_erfc, xf * half_erfc).to(x.dtype)


def generated_kernels(fn, x) -> int:
    """How many kernels Inductor generated for ``fn`` (Triton's, or C++ on the CPU), counted in
    its output code at the first call, which compiles it: 1 where a Linear's epilogue is fused
    into the template."""
    from torch._inductor.utils import run_and_get_code

    with torch.no_grad():
        _, codes = run_and_get_code(fn, x)
    return sum(c.count("async_compile.triton(") + c.count("async_compile.cpp") for c in codes)


def floor_arms(model, plugin) -> dict[str, tuple]:
    """The floors' arms for ``time_arms``: each callable with the eager function it computes."""
    lin = model.lin
    arms = {
        "fused": (torch.compile(model, backend=plugin, options=FORCED), model),
        "bare_plugin": (torch.compile(lin, backend=plugin, options=FORCED), lin),
        "bare_cublas": (lin, lin),
    }
    # The plugin's own fused kernel, eagerly (``mm_activation``): what the routing pass puts at a
    # Linear+activation site where it times faster than stock's cuBLAS plus pointwise kernel.
    from inductor_mm_plugin import mm_activation

    name = {F.gelu: "gelu", F.silu: "silu"}[model.act]
    arms["op_fused"] = (lambda x: mm_activation(x, lin.weight.t(), lin.bias, name), model)
    if model.act is F.gelu:
        arms["cublaslt_gelu"] = (lambda x: torch._addmm_activation(lin.bias, x, lin.weight.t(), use_gelu=True),
                                 lambda x: F.gelu(lin(x), approximate="tanh"))  # fmt: skip
        one_exp = copy.copy(model)  # the same Linear; its own act
        one_exp.act = gelu_one_exp
        arms["fused_one_exp"] = (torch.compile(one_exp, backend=plugin, options=FORCED), model)
    return arms


def floor_fields(times: dict[str, list[float]]) -> dict:
    """The floors' row fields from the rounds' times: each floor arm's ms, and per round (median
    over rounds) the fused block's cost over the plugin's bare Linear (the issue's bar: at most
    1.05), the plugin's bare Linear against cuBLAS's (speedup), the fused block against stock's
    block and cuBLASLt's bias+GELU (speedups), and cuBLASLt's cost over cuBLAS's bare Linear."""
    row = {f"{arm}_ms": median(times[arm]) for arm in ("fused", "bare_plugin", "bare_cublas", "cublaslt_gelu")
           if arm in times}  # fmt: skip
    row["fused_over_bare_rounds"] = ratios(times, "fused", "bare_plugin")
    row["fused_over_bare"] = median(row["fused_over_bare_rounds"])
    row["bare_plugin_vs_cublas"] = median(ratios(times, "bare_cublas", "bare_plugin"))
    row["fused_vs_stock"] = median(ratios(times, "stock", "fused"))
    if "cublaslt_gelu" in times:
        row["cublaslt_over_bare"] = median(ratios(times, "cublaslt_gelu", "bare_cublas"))
        row["fused_vs_cublaslt"] = median(ratios(times, "cublaslt_gelu", "fused"))
    if "op_fused" in times:
        row["op_fused_ms"] = median(times["op_fused"])
        row["op_fused_over_bare"] = median(ratios(times, "op_fused", "bare_plugin"))
        row["op_fused_vs_stock"] = median(ratios(times, "stock", "op_fused"))
    if "fused_one_exp" in times:
        row["fused_one_exp_ms"] = median(times["fused_one_exp"])
        row["fused_one_exp_over_bare"] = median(ratios(times, "fused_one_exp", "bare_plugin"))
        row["fused_one_exp_vs_stock"] = median(ratios(times, "stock", "fused_one_exp"))
        row["fused_one_exp_vs_fused"] = median(ratios(times, "fused", "fused_one_exp"))
    return row


def bench_block(name, model, x, max_autotune, n_rounds=3, floors=False):
    """The plugin backend against stock (and stock max-autotune; and with ``floors``, issue
    32's floors for a Linear+activation block): one row."""
    plugin = plugin_backend()
    arms = {"plugin": (torch.compile(model, backend=plugin), model), "stock": (torch.compile(model), model)}
    if max_autotune:
        arms["max_autotune"] = (torch.compile(model, mode="max-autotune-no-cudagraphs"), model)
    kernels = {}
    if floors and isinstance(model, LinearAct):
        floor = floor_arms(model, plugin)
        # Compiled once here to read their code, and again in time_arms: run_and_get_code resets
        # Dynamo before it calls, so inside time_arms it would drop the arms compiled before it.
        kernels = {f"{arm}_kernels": generated_kernels(floor[arm][0], x) for arm in ("fused", "fused_one_exp")
                   if arm in floor}  # fmt: skip
        arms.update(floor)
    times, compile_s, err = time_arms(name, x, arms, n_rounds)
    speedups = ratios(times, "stock", "plugin")
    row = {"block": name, "plugin_ms": median(times["plugin"]), "stock_ms": median(times["stock"]),
           "speedup": median(speedups), "speedup_rounds": speedups, "rel_err": err["plugin"],
           "stock_rel_err": err["stock"], "plugin_compile_s": compile_s["plugin"],
           "stock_compile_s": compile_s["stock"]}  # fmt: skip
    if max_autotune:
        row.update(max_autotune_ms=median(times["max_autotune"]),
                   speedup_vs_max_autotune=median(ratios(times, "max_autotune", "plugin")),
                   max_autotune_compile_s=compile_s["max_autotune"])  # fmt: skip
    if "fused" in times:
        row.update(floor_fields(times), **kernels)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-autotune", action="store_true", help="also time stock max-autotune")
    p.add_argument("--no-block", action="store_true", help="skip the transformer block")
    p.add_argument("--floors", action="store_true",
                   help="Linear+GELU/SiLU blocks also time issue 32's floors: the bare Linear (cuBLAS, the plugin), the "
                        "block fused into the plugin's template, cuBLASLt's bias+GELU")
    p.add_argument("--quick", action="store_true", help="M=8192 and (hidden, ffn) in {(4096, 14336), (1024, 4096)} only")
    p.add_argument("--tokens", nargs="*", type=int, default=list(TOKENS), choices=TOKENS,
                   help="the suite's token counts M to run (both by default)")
    p.add_argument("--widths", nargs="*", default=[f"{d}x{f}" for d, f in WIDTHS],
                   choices=[f"{d}x{f}" for d, f in WIDTHS], help="the suite's (hidden x ffn) pairs to run (all by default)")
    p.add_argument("--blocks", nargs="*", default=list(BLOCKS), choices=BLOCKS, help="the suite's blocks (all by default)")
    p.add_argument("--md", default=None, help="also write the markdown table to this file")
    add_common_args(p, "epilogue.jsonl")
    args = p.parse_args(argv)
    require_cuda("bench_epilogue.py")
    import inductor_mm_plugin

    meta = run_meta(args.commit)
    run = dict(meta, plugin=inductor_mm_plugin.__version__, rounds=args.rounds, tokens=args.tokens,
               widths=args.widths, sm_clock_start=sm_clock())  # fmt: skip
    jsonl = pathlib.Path(args.out) / "epilogue.jsonl"
    rows = []
    widths = [tuple(map(int, w.split("x"))) for w in args.widths]
    for name, m, d, f, k, make in suite(args.quick, args.tokens, widths, args.blocks):
        torch.manual_seed(0)
        model = init_(make())
        x = torch.randn(m, d, device="cuda", dtype=DT)
        row = bench_block(name, model, x, args.max_autotune, args.rounds, args.floors)
        row.update(M=m, hidden=d, ffn=f, K=k, sm_clock=sm_clock())
        rows.append(row)
        append_jsonl(jsonl, [row], meta)  # after every row: a run cut short keeps what it measured
        mat = f"  max-autotune {row['max_autotune_ms']:.3f}" if "max_autotune_ms" in row else ""
        fl = f"  fused/bare {row['fused_over_bare']:.3f}" if "fused_over_bare" in row else ""
        if "op_fused_ms" in row:
            fl += (f"  mm_activation {row['op_fused_ms']:.3f} ms, /bare {row['op_fused_over_bare']:.3f}, "
                   f"vs stock x{row['op_fused_vs_stock']:.3f}")  # fmt: skip
        print(f"{name:16s} M={m:5d} d={d:5d} f={f:5d}  stock {row['stock_ms']:.3f} ms  plugin {row['plugin_ms']:.3f} ms"
              f"  x{row['speedup']:.3f}{mat}{fl}", flush=True)  # fmt: skip
        del model, x

    block = None
    if not args.no_block:
        import transformer_block

        model, (x,) = transformer_block.make()
        block = bench_block("transformer block 8x2048 d4096", model, x, args.max_autotune, args.rounds)
        block.update(M=16384, hidden=4096, ffn=14336, K=4096, sm_clock=sm_clock())
        append_jsonl(jsonl, [block], meta)
        print(f"transformer block: stock {block['stock_ms']:.3f} ms  plugin {block['plugin_ms']:.3f} ms  "
              f"x{block['speedup']:.3f}", flush=True)  # fmt: skip
    run["sm_clock_end"] = sm_clock()
    md = to_markdown(args, run, rows, block)
    if args.md:
        pathlib.Path(args.md).write_text(md)
    print(md)
    print(f"rows appended to {jsonl}")


def to_markdown(args, meta, rows, block) -> str:
    """The run as a markdown table, with the suite's geomean and lowest speedup with K <= 2048."""
    summary = {
        "geomean_vs_stock": geomean([r["speedup"] for r in rows]),
        "min_k_le_2048_vs_stock": min((r["speedup"] for r in rows if r["K"] <= 2048), default=float("nan")),
    }
    if args.max_autotune:
        summary["geomean_vs_max_autotune"] = geomean([r["speedup_vs_max_autotune"] for r in rows])
    md = [f"# Fused-epilogue suite — {meta['date']}", "",
          f"GPU {meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, plugin {meta['plugin']} "
          f"(commit {meta['commit']}); bf16; "
          "ms per call under CUDA graphs (median of graph replays), arms timed in "
          f"{meta['rounds']} round(s), order reversed each round (bench/_timing.py); speedup = stock / "
          "plugin within a round, median over rounds (range: lowest-highest round). SM clock (nvidia-smi) at "
          f"start: {meta['sm_clock_start']}; at end: {meta.get('sm_clock_end', '(run cut short)')}.", "",
          "| block | M | hidden | ffn | stock ms | plugin ms | speedup | range | max-autotune ms | vs max-autotune |",
          "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows + ([block] if block else []):
        mat = f"{r['max_autotune_ms']:.3f} | {r['speedup_vs_max_autotune']:.3f}" if "max_autotune_ms" in r else "- | -"
        md.append(f"| {r['block']} | {r['M']} | {r['hidden']} | {r['ffn']} | "
                  f"{r['stock_ms']:.3f} | {r['plugin_ms']:.3f} | {r['speedup']:.3f} | {spread(r.get('speedup_rounds'), '.3f')} | "
                  f"{mat} |")  # fmt: skip
    part = "" if sorted(meta["tokens"]) == list(TOKENS) else f" (M = {', '.join(map(str, meta['tokens']))} only)"
    if len(meta["widths"]) < len(WIDTHS):
        part += f" (hidden x ffn = {', '.join(meta['widths'])} only)"
    floored = [r for r in rows if "fused_over_bare" in r]
    if floored:
        md += ["", "Issue 32's floors (Linear+activation blocks; ratios per round, median): the block fused into the "
                   "plugin's template over the plugin's bare Linear (bar: at most 1.05); cuBLASLt's bias+GELU over "
                   "cuBLAS's bare Linear; speedups of the plugin's bare Linear over cuBLAS's, and of the fused block "
                   "over stock's and over cuBLASLt's.", "",
               "| block | M | hidden | ffn | bare cuBLAS ms | bare plugin ms | fused ms | cuBLASLt ms | fused / bare "
               "| cuBLASLt / bare | bare plugin vs cuBLAS | fused vs stock | fused vs cuBLASLt |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in floored:
            lt = (f"{r['cublaslt_gelu_ms']:.3f}", f"{r['cublaslt_over_bare']:.3f}", f"{r['fused_vs_cublaslt']:.3f}") \
                if "cublaslt_gelu_ms" in r else ("-", "-", "-")  # fmt: skip
            md.append(f"| {r['block']} | {r['M']} | {r['hidden']} | {r['ffn']} | {r['bare_cublas_ms']:.3f} | "
                      f"{r['bare_plugin_ms']:.3f} | {r['fused_ms']:.3f} | {lt[0]} | {r['fused_over_bare']:.3f} "
                      f"({spread(r['fused_over_bare_rounds'], '.3f')}) | {lt[1]} | {r['bare_plugin_vs_cublas']:.3f} | "
                      f"{r['fused_vs_stock']:.3f} | {lt[2]} |")  # fmt: skip
        over = [r for r in floored if r["fused_over_bare"] > 1.05]
        md += ["", f"Fused over bare above 1.05 on {len(over)} of {len(floored)} blocks."]
        one_exp = [r for r in floored if "fused_one_exp_ms" in r]
        if one_exp:
            md += ["", "GELU written with one exp (`gelu_one_exp`) in the fused epilogue; kernels Inductor generated "
                       "for each fused arm (1: the epilogue is in the template).", "",
                   "| block | M | hidden | ffn | fused ms | one-exp ms | one-exp / bare | one-exp vs fused "
                   "| one-exp vs stock | kernels (fused, one-exp) |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
            md += [f"| {r['block']} | {r['M']} | {r['hidden']} | {r['ffn']} | {r['fused_ms']:.3f} | "
                   f"{r['fused_one_exp_ms']:.3f} | {r['fused_one_exp_over_bare']:.3f} | "
                   f"{r['fused_one_exp_vs_fused']:.3f} | {r['fused_one_exp_vs_stock']:.3f} | "
                   f"{r.get('fused_kernels', '-')}, {r.get('fused_one_exp_kernels', '-')} |" for r in one_exp]  # fmt: skip
    if rows:
        md += ["", f"Suite{part} geomean vs stock default: {summary['geomean_vs_stock']:.3f}; "
                   f"smallest speedup with K ≤ 2048: {summary['min_k_le_2048_vs_stock']:.3f}"
                   + (f"; geomean vs stock max-autotune: {summary['geomean_vs_max_autotune']:.3f}" if args.max_autotune else "")]  # fmt: skip
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    main()
