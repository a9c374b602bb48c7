"""Time the fused SwiGLU kernel's candidate configs on the GPU, in rounds against cuBLAS's two
matmuls and stock's form: the data behind ``configs/hopper.SWIGLU`` (issue 32).

    python bench/sweep_swiglu.py --out DIR [--rounds 5] [--draw 6]

Per shape (M rows, d in, f out; x row-major, both weights ``nn.Linear``'s (f, d) seen
transposed, bf16): fresh random operands, enough copies that a replay reads them from memory
(``_timing.rotation``); every config's output (``runtime.swiglu.swiglu_launch`` with
``config=``, NaN-poisoned first) checked against the float64 bound of the tests (a wrong or
failing config is recorded, not timed); then, each a CUDA graph of calls (GPU time), timed in
``--rounds`` rounds, the order reversed each round:

- ``pair``: cuBLAS's two matmuls alone, the issue's floor ("the fused kernel costs at most the
  two matmuls");
- ``stock``: what a stock compile runs, the pair and then one pointwise pass for the product
  (``runtime.swiglu.stock_swiglu``, the routing pass's stock arm);
- the default config (``configs.swiglu_config``) and each candidate.

``ratio`` = pair time / config time and ``stock_ratio`` = stock time / config time, per round,
then the median (above 1: the fused kernel is faster). The shapes: Llama/Qwen/Mistral MLP
widths at prefill sizes, and ``--draw`` more drawn fresh each run (M log-uniform in
[513, 16384], d and f multiples of 64 in [512, 16384]: the routing pass times pairs of more
than 512 rows only, ``measure.SWIGLU_LOSES_UP_TO_M``).

Appends one JSONL row per shape to ``<out>/sweep_swiglu.jsonl``: date, commit, gpu, torch,
triton, M, d, f, seed, pair_ms, stock_ms, default, default_ratio, default_stock_ratio, best,
best_ratio, best_stock_ratio, and ``results`` (config, ms, ratio, stock_ratio, ratio_rounds,
error for each).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import random

import torch
from _timing import (
    GraphTimer, add_common_args, append_jsonl, config_name, median, print_configs, ratios, require_cuda, rotating,
    rotation, rounds, run_meta,
)  # fmt: skip
from sweep_configs import SMEM_LIMIT_BYTES, T

# (M, d, f) of real MLPs at prefill sizes: Llama-3-8B, Llama-2-7B, Qwen2.5-1.5B, TinyLlama,
# Mistral-7B; the shapes of docs/performance.md's first measurement among them.
SHAPES = [
    (2048, 4096, 14336), (8192, 4096, 14336), (4096, 4096, 11008), (1000, 1536, 8960), (4096, 2048, 5632),
    (2048, 2048, 5632), (2048, 1024, 4096), (1024, 4096, 14336), (4096, 2048, 11008),
]  # fmt: skip

# Two 128 x 128 accumulators are the registers of one 128 x 256 tile (hopper.SWIGLU); the
# others trade them for more tiles per wave (64-wide weights), more stages, or other groups.
CONFIGS = [
    T(128, 128, 64, 16, 8, 3),
    T(128, 128, 64, 8, 8, 3),
    T(128, 128, 64, 16, 8, 4),
    T(128, 128, 64, 16, 8, 3, sub=True),
    T(128, 64, 64, 16, 4, 4),
    T(128, 64, 64, 16, 8, 4),
    T(64, 128, 64, 16, 4, 4),
    T(256, 64, 64, 16, 8, 3),
    T(64, 256, 32, 16, 8, 4),
    T(128, 128, 32, 16, 8, 5),
]  # fmt: skip


def fits(cfg) -> bool:
    """An x tile and two weight tiles per stage, plus the store's buffer, in shared memory."""
    sub_n = cfg.block_n // 2 if cfg.epilogue_subtile else cfg.block_n
    return ((cfg.block_m + 2 * cfg.block_n) * cfg.block_k * cfg.num_stages + cfg.block_m * sub_n) * 2 <= SMEM_LIMIT_BYTES


def drawn(n: int, seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    width = lambda: 64 * round(math.exp(rng.uniform(math.log(512), math.log(16384))) / 64)  # noqa: E731
    return [(round(math.exp(rng.uniform(math.log(513), math.log(16384)))), width(), width()) for _ in range(n)]


def sweep_shape(M: int, d: int, f: int, n_rounds: int) -> dict:
    from inductor_mm_plugin.configs import swiglu_config
    from inductor_mm_plugin.ops.reference import assert_mm_swiglu_close
    from inductor_mm_plugin.runtime.swiglu import stock_swiglu, swiglu_launch

    def operands():
        x = torch.randn(M, d, device="cuda", dtype=torch.bfloat16)
        w_gate, w_up = (torch.randn(f, d, device="cuda", dtype=torch.bfloat16).t() / d**0.5 for _ in range(2))
        out, gate, up = (torch.empty(M, f, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        return x, w_gate, w_up, out, gate, up

    sets = [operands() for _ in range(rotation((M * d + 2 * d * f + 3 * M * f) * 2))]
    x, w_gate, w_up = sets[0][:3]
    default = swiglu_config()
    fns = {
        "pair": rotating(lambda x, wg, wu, out, g, u: (torch.mm(x, wg, out=g), torch.mm(x, wu, out=u)), sets),
        "stock": rotating(lambda x, wg, wu, out, g, u: stock_swiglu(x, wg, wu, g, u, out), sets),
    }
    results = {}
    for cfg in [default, *(c for c in CONFIGS if c != default)]:
        name = config_name(cfg)
        if not fits(cfg):
            results[name] = dict(config=name, ms=None, error="does not fit shared memory")
            continue
        try:
            out = torch.full((M, f), float("nan"), device="cuda", dtype=torch.bfloat16)
            if not swiglu_launch(x, w_gate, w_up, out, config=cfg):
                raise RuntimeError("swiglu_launch declined the operands")
            assert_mm_swiglu_close(out, x, w_gate, w_up)
        except Exception as e:  # noqa: BLE001 (a config that fails to compile, launch or check is a result)
            results[name] = dict(config=name, ms=None, error=f"{type(e).__name__}: {str(e)[:200]}")
            continue
        results[name] = dict(config=name)
        fns[name] = rotating(lambda x, wg, wu, out, g, u, cfg=cfg: swiglu_launch(x, wg, wu, out, config=cfg), sets)
    timers = {name: GraphTimer(fn, target_ms=5.0) for name, fn in fns.items()}
    times = rounds(timers, lambda timer: timer(), n_rounds)
    for name in times:
        if name in results:
            pair, stock = ratios(times, "pair", name), ratios(times, "stock", name)
            results[name].update(ms=median(times[name]), ratio=median(pair), stock_ratio=median(stock),
                                 ratio_rounds=pair, error=None)  # fmt: skip
    ok = [r for r in results.values() if r.get("ms")]
    best = max(ok, key=lambda r: r["ratio"]) if ok else {}
    first = results[config_name(default)]
    return dict(M=M, d=d, f=f, pair_ms=median(times["pair"]), stock_ms=median(times["stock"]),
                default=first["config"], default_ratio=first.get("ratio"), default_stock_ratio=first.get("stock_ratio"),
                best=best.get("config"), best_ratio=best.get("ratio"), best_stock_ratio=best.get("stock_ratio"),
                results=list(results.values()))  # fmt: skip


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draw", type=int, default=6, help="shapes drawn fresh beside the fixed ones (default 6)")
    p.add_argument("--seed", type=int, default=None, help="repeat a draw (default: new)")
    p.add_argument("--only-drawn", action="store_true", help="skip the fixed shapes")
    add_common_args(p, "sweep_swiglu.jsonl", rounds=5)
    args = p.parse_args()
    require_cuda("sweep_swiglu.py")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}", flush=True)
    import inductor_mm_plugin  # noqa: F401  (registers the ops)

    meta = run_meta(args.commit)
    jsonl = pathlib.Path(args.out) / "sweep_swiglu.jsonl"
    for M, d, f in ([] if args.only_drawn else SHAPES) + drawn(args.draw, seed):
        row = sweep_shape(M, d, f, args.rounds)
        append_jsonl(jsonl, [{**row, "seed": seed}], meta)
        print(f"{M:6d} x {d:6d} x {f:6d}  pair {row['pair_ms']:.3f} ms  stock {row['stock_ms']:.3f} ms  "
              f"default {row['default_ratio'] or 0:.3f} (stock {row['default_stock_ratio'] or 0:.3f})  "
              f"best {row['best_ratio'] or 0:.3f} (stock {row['best_stock_ratio'] or 0:.3f}) [{row['best']}]", flush=True)
        print_configs(row["results"], fmt=".3f", extra=lambda r: f"stock {r.get('stock_ratio') or 0:.3f}  ")
        torch.cuda.empty_cache()
    print(f"rows appended to {jsonl}")


if __name__ == "__main__":
    main()
