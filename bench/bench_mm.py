"""Time the plugin's matmul against torch.mm (cuBLAS), side by side, in one run.

    python bench/bench_mm.py                      # the default shape set, bf16
    python bench/bench_mm.py --classes square llm --dtypes bf16 fp16 --out bench/results

Each row: fresh random inputs; the plugin's output checked against a float64 reference
(the same bound the tests use) before any number is printed; then the median of
``triton.testing.do_bench`` (which flushes L2 between repetitions) for torch.mm and for
the plugin op, or of ``do_bench_cudagraph`` for the skinny class, where launch overhead
would otherwise be half the time. TFLOP/s = 2*M*N*K / median; ratio = plugin / torch.mm
throughput (above 1 is faster). Skinny rows also report the fraction of the copy
bandwidth measured in the same run (bytes = A + B + C).

Writes ``<out>/<date>-<gpu>-mm.json`` and ``.md`` with date, GPU, torch and triton versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib
import platform
import sys

import torch
import triton
import triton.testing

import inductor_mm_plugin
from inductor_mm_plugin.ops.matmul import set_autotune
from inductor_mm_plugin.ops.reference import assert_matmul_close

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

LLM_NK = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (4096, 11008)]
SHAPES = {
    "square": [(4096, 4096, 4096), (8192, 8192, 8192)],
    "llm": [(m, n, k) for m in (2048, 4096, 8192, 16384) for n, k in LLM_NK],
    "skinny": [(m, n, k) for m in (1, 8, 16, 32, 64, 128) for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]],
    "odd": [(1000, 1000, 1000), (1531, 1531, 1531), (4097, 4095, 4096), (2000, 3000, 500), (768, 768, 768)],
    "largek": [(2048, 2048, 32768), (1024, 1024, 65536)],
}


def make_operands(M, N, K, dtype, layout):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    if layout == "linear":  # B is a transposed (N, K) weight, as nn.Linear passes it
        b = torch.randn(N, K, device="cuda", dtype=dtype).t()
    else:
        b = torch.randn(K, N, device="cuda", dtype=dtype)
    return a, b


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy rate (bytes read + written per second), measured now."""
    src = torch.empty(2**30 // 2, device="cuda", dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def time_ms(fn, cudagraph: bool) -> float:
    if cudagraph:
        return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def bench_row(cls, M, N, K, dtype_name, layout, copy_gbs, tune):
    dtype = DTYPES[dtype_name]
    a, b = make_operands(M, N, K, dtype, layout)
    plugin = lambda: torch.ops.inductor_mm_plugin.mm(a, b)  # noqa: E731
    aten = lambda: torch.mm(a, b)  # noqa: E731
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    assert_matmul_close(plugin(), a, b, tf32=tf32)  # heuristic config, compiled here
    cudagraph = cls == "skinny"
    aten_ms, plugin_ms = time_ms(aten, cudagraph), time_ms(plugin, cudagraph)
    tuned_ms = None
    if tune:
        old = set_autotune(True)
        try:
            assert_matmul_close(plugin(), a, b, tf32=tf32)  # autotunes here, outside the timed region
            tuned_ms = time_ms(plugin, cudagraph)
        finally:
            set_autotune(old)
    flops = 2.0 * M * N * K
    row = {
        "class": cls,
        "shape": [M, N, K],
        "dtype": dtype_name,
        "layout": layout,
        "timing": "cudagraph" if cudagraph else "do_bench",
        "cublas_ms": aten_ms,
        "plugin_ms": plugin_ms,
        "cublas_tflops": flops / aten_ms / 1e9,
        "plugin_tflops": flops / plugin_ms / 1e9,
        "ratio": aten_ms / plugin_ms,
    }
    if tuned_ms is not None:
        row.update(tuned_ms=tuned_ms, tuned_tflops=flops / tuned_ms / 1e9, tuned_ratio=aten_ms / tuned_ms)
    if cudagraph:
        moved = (M * K + K * N + M * N) * a.element_size()
        row["cublas_bw_frac"] = moved / (aten_ms * 1e-3) / 1e9 / copy_gbs
        row["plugin_bw_frac"] = moved / (plugin_ms * 1e-3) / 1e9 / copy_gbs
    return row


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def to_markdown(meta, rows):
    lines = [
        f"# Plugin matmul vs torch.mm — {meta['date']}",
        "",
        f"GPU {meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, plugin {meta['plugin']}; "
        f"copy bandwidth measured in this run: {meta['copy_gbs']:.0f} GB/s. Median of do_bench "
        "(L2 flushed between reps); skinny rows under CUDA graphs. ratio = torch.mm time / plugin time.",
        "",
        "| class | M×N×K | dtype | layout | torch.mm TFLOP/s | plugin TFLOP/s | ratio | tuned TFLOP/s | tuned ratio | plugin % of copy BW |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        bw = f"{100 * r['plugin_bw_frac']:.0f}%" if "plugin_bw_frac" in r else ""
        M, N, K = r["shape"]
        lines.append(
            f"| {r['class']} | {M}×{N}×{K} | {r['dtype']} | {r['layout']} | {r['cublas_tflops']:.1f} | "
            f"{r['plugin_tflops']:.1f} | {r['ratio']:.2f} | {r.get('tuned_tflops', float('nan')):.1f} | "
            f"{r.get('tuned_ratio', float('nan')):.2f} | {bw} |"
        )
    lines += ["", "| class | dtype | layout | geomean ratio | min ratio |", "|---|---|---|---|---|"]
    groups = sorted({(r["class"], r["dtype"], r["layout"]) for r in rows})
    for g in groups:
        rs = [r["ratio"] for r in rows if (r["class"], r["dtype"], r["layout"]) == g]
        lines.append(f"| {g[0]} | {g[1]} | {g[2]} | {geomean(rs):.3f} | {min(rs):.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--dtypes", nargs="+", default=["bf16"], choices=list(DTYPES))
    p.add_argument("--layouts", nargs="+", default=["row"], choices=["row", "linear"])
    p.add_argument("--out", default="bench/results")
    p.add_argument("--tag", default="mm")
    p.add_argument("--tune", action="store_true", help="also time the autotuned kernel")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_mm.py times GPU kernels: it needs a CUDA device")

    copy_gbs = copy_bandwidth_gbs()
    meta = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "plugin": inductor_mm_plugin.__version__,
        "python": platform.python_version(),
        "copy_gbs": copy_gbs,
    }
    rows = []
    for cls in args.classes:
        for dtype_name in args.dtypes:
            for layout in args.layouts:
                for M, N, K in SHAPES[cls]:
                    row = bench_row(cls, M, N, K, dtype_name, layout, copy_gbs, args.tune)
                    rows.append(row)
                    print(
                        f"{cls:7s} {M:6d}x{N:6d}x{K:6d} {dtype_name} {layout:6s} "
                        f"torch.mm {row['cublas_tflops']:7.1f}  plugin {row['plugin_tflops']:7.1f}  "
                        f"ratio {row['ratio']:.3f}  tuned {row.get('tuned_ratio', float('nan')):.3f}",
                        flush=True,
                    )
    md = to_markdown(meta, rows)
    print(md)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{meta['date']}-{meta['gpu'].replace(' ', '_')}-{args.tag}"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / f"{stem}.md").write_text(md)


if __name__ == "__main__":
    main()
