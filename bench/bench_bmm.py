"""Batched matmuls of attention (the transformer block's bmm sites) against torch.bmm, in one run.

    python bench/bench_bmm.py [--out bench/results]

Rows: the forward and backward bmms of attention with batch x heads = 8 x 32, seq 2048,
head dim 128 (the A/B example's shapes, bf16), each in the layout autograd produces (a
transposed operand is a view, as in the compiled graph), plus a plain row-major batch and
an unaligned one (head dim 100: rows not 16-byte aligned, so the pointer kernel). Per row:
fresh random inputs, the plugin's output (the op's, and the launcher's into a NaN-poisoned
buffer) checked against the float64 reference with the tests' error bound on three matrices
of the batch, then ``torch.bmm`` and ``torch.ops.inductor_mm_plugin.bmm`` timed with
``triton.testing.do_bench`` (median, L2 flushed) in ``--rounds`` rounds, the order reversed
each round; ratio = torch.bmm time / plugin time within a round, the median over rounds.
Appends one JSONL row per bmm to ``<out>/bmm.jsonl`` (date, commit, gpu, torch, triton, name,
B, M, N, K, a_stride, b_stride, config, cublas_ms, plugin_ms, cublas_tflops, plugin_tflops,
ratio, ratio_rounds; ``sweep`` with ``--sweep``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import pathlib

import torch
from _timing import (
    add_common_args, append_jsonl, config_name, geomean, matmul_config_class, matmul_error, median, plugin_runtime,
    ratios, require_cuda, rounds, run_meta, spread, time_ms,
)  # fmt: skip

BH, S, D = 256, 2048, 128


def _t(x):
    return x.transpose(1, 2)


def operands(name):
    """(a, b) for a row, in the layout the attention graph hands to bmm."""
    r = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    return {
        "QK^T  (q @ k^T)": lambda: (r(BH, S, D), _t(r(BH, S, D))),
        "PV    (p @ v)": lambda: (r(BH, S, S), r(BH, S, D)),
        "dP    (dO @ v^T)": lambda: (r(BH, S, D), _t(r(BH, S, D))),
        "dV    (p^T @ dO)": lambda: (_t(r(BH, S, S)), r(BH, S, D)),
        "dQ    (dS @ k)": lambda: (r(BH, S, S), r(BH, S, D)),
        "dK    (dS^T @ q)": lambda: (_t(r(BH, S, S)), r(BH, S, D)),
        "row-major 64x1024^3": lambda: (r(64, 1024, 1024), r(64, 1024, 1024)),
        "unaligned 256x2048x2048x100": lambda: (r(BH, S, 100), _t(r(BH, S, 100))),
    }[name]()


ROWS = ["QK^T  (q @ k^T)", "PV    (p @ v)", "dP    (dO @ v^T)", "dV    (p^T @ dO)", "dQ    (dS @ k)",
        "dK    (dS^T @ q)", "row-major 64x1024^3", "unaligned 256x2048x2048x100"]  # fmt: skip


def _sweep_configs():
    C = matmul_config_class()
    tma = lambda bm, bn, bk, w, st, sub: C("tma", bm, bn, bk, group_m=8, num_warps=w, num_stages=st,  # noqa: E731
                                          epilogue_subtile=sub, flatten=True)  # fmt: skip
    return [tma(128, 256, 64, 8, 3, False), tma(128, 256, 64, 8, 3, True), tma(128, 128, 64, 8, 4, True),
            tma(128, 128, 64, 4, 4, False), tma(256, 128, 64, 8, 3, True), tma(128, 128, 128, 8, 3, True),
            C("ptr", 128, 128, 64, group_m=8, num_warps=8, num_stages=3)]  # fmt: skip


def main() -> None:
    import inductor_mm_plugin  # noqa: F401  (registers the ops)

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", action="store_true", help="also time _sweep_configs()'s configs on the QK^T and PV rows")
    add_common_args(p, "bmm.jsonl")
    args = p.parse_args()
    require_cuda("bench_bmm.py")
    rt = plugin_runtime()
    meta = run_meta(args.commit)
    jsonl = pathlib.Path(args.out) / "bmm.jsonl"
    plugin_bmm = torch.ops.inductor_mm_plugin.bmm
    results = []
    for name in ROWS:
        a, b = operands(name)
        B, M, K = a.shape
        N = b.shape[2]
        # Check a few matrices of the batch against float64 (the whole batch is gigabytes).
        idx = torch.tensor([0, B // 2, B - 1], device="cuda")
        poisoned = torch.full((B, M, N), float("nan"), device="cuda", dtype=a.dtype)
        plan = rt.launch(a, b, poisoned)
        for what, out in (("launcher, poisoned output", poisoned), ("op", plugin_bmm(a, b))):
            err = matmul_error(out[idx], a[idx], b[idx])
            if err:
                raise AssertionError(f"{name} ({what}): {err}")
        del poisoned, out
        times = rounds({"aten": lambda a=a, b=b: torch.bmm(a, b), "plugin": lambda a=a, b=b: plugin_bmm(a, b)},
                       time_ms, args.rounds)  # fmt: skip
        t_aten, t_plugin = median(times["aten"]), median(times["plugin"])
        flops = 2 * B * M * N * K
        rs = ratios(times, "aten", "plugin")
        row = {
            "name": name.split()[0], "B": B, "M": M, "N": N, "K": K, "a_stride": list(a.stride()),
            "b_stride": list(b.stride()), "config": config_name(plan.cfg), "cublas_tflops": flops / t_aten / 1e9,
            "plugin_tflops": flops / t_plugin / 1e9, "cublas_ms": t_aten, "plugin_ms": t_plugin, "ratio": median(rs),
            "ratio_rounds": rs,
        }  # fmt: skip
        if args.sweep and name in ROWS[:2]:
            row["sweep"] = {}
            out = torch.empty(B, M, N, device="cuda", dtype=a.dtype)
            for cfg in _sweep_configs():
                ms = time_ms(lambda a=a, b=b, o=out, cfg=cfg: rt.launch(a, b, o, config=cfg))
                row["sweep"][cfg.short()] = t_aten / ms
                print(f"    sweep {cfg.short():32s} ratio {t_aten / ms:.2f}", flush=True)
        results.append(row)
        append_jsonl(jsonl, [row], meta)
        print(f"{name:30s} {B}x{M}x{N}x{K}  cuBLAS {row['cublas_tflops']:6.1f}  plugin {row['plugin_tflops']:6.1f} "
              f"TFLOP/s  ratio {row['ratio']:.2f} ({spread(rs)})  [{row['config']}]", flush=True)  # fmt: skip
        del a, b
        torch.cuda.empty_cache()
    attention = [r["ratio"] for r in results[:6]]
    lines = [
        f"# Attention bmm — {meta['date']}", "",
        f"GPU {meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}; bf16; median "
        f"of do_bench (L2 flushed), {args.rounds} rounds; ratio = torch.bmm time / plugin time.", "",
        "| bmm | B×M×N×K | cuBLAS TFLOP/s | plugin TFLOP/s | ratio | range | plugin config |", "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in results:
        lines.append(f"| {r['name']} | {r['B']}×{r['M']}×{r['N']}×{r['K']} | {r['cublas_tflops']:.1f} | "
                     f"{r['plugin_tflops']:.1f} | {r['ratio']:.2f} | {spread(r['ratio_rounds'])} | {r['config']} |")  # fmt: skip
    lines += ["", f"Attention rows (first six): geomean {geomean(attention):.3f}, min {min(attention):.3f}."]
    print("\n".join(lines))
    print(f"rows appended to {jsonl}")


if __name__ == "__main__":
    main()
