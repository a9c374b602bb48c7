"""Batched matmuls of attention (the transformer block's bmm sites) against torch.bmm, in one run.

    python bench/bench_bmm.py [--out bench/results]

Rows: the forward and backward bmms of attention with batch x heads = 8 x 32, seq 2048,
head dim 128 (the A/B example's shapes, bf16), each in the layout autograd produces (a
transposed operand is a view, as in the compiled graph), plus a plain row-major batch and
an unaligned one (head dim 100: rows not 16-byte aligned, so the pointer kernel). Per row:
fresh random inputs, the plugin's output checked against the float64 reference with the
tests' error bound, then the median of ``triton.testing.do_bench`` (L2 flushed) for
``torch.bmm`` and ``torch.ops.inductor_mm_plugin.bmm`` side by side; ratio = torch.bmm time
/ plugin time. Writes ``<out>/<date>-<gpu>-bmm.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib

import torch

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
    from inductor_mm_plugin.kernels.configs import MatmulConfig as C

    return [
        C("tma", 128, 256, 64, 8, 8, 3, flatten=True), C("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, flatten=True),
        C("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True), C("tma", 128, 128, 64, 8, 4, 4, flatten=True),
        C("tma", 256, 128, 64, 8, 8, 3, epilogue_subtile=True, flatten=True),
        C("tma", 128, 128, 128, 8, 8, 3, epilogue_subtile=True, flatten=True), C("ptr", 128, 128, 64, 8, 8, 3),
    ]  # fmt: skip


def main() -> None:
    import triton
    import triton.testing

    import inductor_mm_plugin  # noqa: F401  (registers the ops)
    from inductor_mm_plugin.ops import matmul as impl
    from inductor_mm_plugin.ops.reference import assert_matmul_close

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="bench/results")
    p.add_argument("--sweep", action="store_true", help="also time _sweep_configs()'s configs on the QK^T and PV rows")
    args = p.parse_args()
    plugin_bmm = torch.ops.inductor_mm_plugin.bmm
    results = []
    for name in ROWS:
        a, b = operands(name)
        B, M, K = a.shape
        N = b.shape[2]
        out = torch.full((B, M, N), float("nan"), device="cuda", dtype=a.dtype)
        impl.bmm_launch(a, b, out=out)
        # Check a few matrices of the batch against float64 (the whole batch is gigabytes).
        idx = torch.tensor([0, B // 2, B - 1], device="cuda")
        assert_matmul_close(out[idx], a[idx], b[idx])
        plan_cfg = impl.chosen_config(a, b)
        t_aten = triton.testing.do_bench(lambda a=a, b=b: torch.bmm(a, b), return_mode="median")
        t_plugin = triton.testing.do_bench(lambda a=a, b=b: plugin_bmm(a, b), return_mode="median")
        flops = 2 * B * M * N * K
        row = {
            "shape": [B, M, N, K], "name": name.split()[0], "a_stride": list(a.stride()), "b_stride": list(b.stride()),
            "config": plan_cfg.short(), "cublas_tflops": flops / t_aten / 1e9, "plugin_tflops": flops / t_plugin / 1e9,
            "cublas_ms": t_aten, "plugin_ms": t_plugin, "ratio": t_aten / t_plugin,
        }  # fmt: skip
        if args.sweep and name in ROWS[:2]:
            row["sweep"] = {}
            for cfg in _sweep_configs():
                ms = triton.testing.do_bench(lambda a=a, b=b, o=out, cfg=cfg: impl._launch(a, b, o, config=cfg),
                                             return_mode="median")  # fmt: skip
                row["sweep"][cfg.short()] = t_aten / ms
                print(f"    sweep {cfg.short():32s} ratio {t_aten / ms:.2f}", flush=True)
        results.append(row)
        print(f"{name:30s} {B}x{M}x{N}x{K}  cuBLAS {row['cublas_tflops']:6.1f}  plugin {row['plugin_tflops']:6.1f} "
              f"TFLOP/s  ratio {row['ratio']:.2f}  [{row['config']}]", flush=True)  # fmt: skip
        del a, b, out
        torch.cuda.empty_cache()
    attention = [r["ratio"] for r in results[:6]]
    geomean = math.exp(sum(map(math.log, attention)) / len(attention))
    print(f"attention bmm geomean {geomean:.3f}, min {min(attention):.3f}")

    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{date}-{gpu.replace(' ', '_')}-bmm"
    meta = {"date": date, "gpu": gpu, "torch": torch.__version__, "triton": triton.__version__}
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": results}, indent=1))
    lines = [
        f"# Attention bmm — {date}", "",
        f"GPU {gpu}, torch {torch.__version__}, triton {triton.__version__}; bf16; median of do_bench "
        "(L2 flushed); ratio = torch.bmm time / plugin time.", "",
        "| bmm | B×M×N×K | cuBLAS TFLOP/s | plugin TFLOP/s | ratio | plugin config |", "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in results:
        lines.append(f"| {r['name']} | {'×'.join(map(str, r['shape']))} | {r['cublas_tflops']:.1f} | "
                     f"{r['plugin_tflops']:.1f} | {r['ratio']:.2f} | {r['config']} |")  # fmt: skip
    lines += ["", f"Attention rows (first six): geomean {geomean:.3f}, min {min(attention):.3f}."]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
