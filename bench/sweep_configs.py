"""Time candidate kernel configs per shape class on the GPU: the data behind the heuristic in
``inductor_mm_plugin/kernels/configs.py``, plus a probe of the host-side cost per call.

    python bench/sweep_configs.py --out DIR [--jobs 16] [--groups llm skinny ...]

Compiles every (config, shape, layout) in a process pool first (Triton's disk cache is
shared), then times them one by one on an idle GPU: ``do_bench`` (L2 flushed between
reps), or ``do_bench_cudagraph`` for the skinny group. Each config's output is checked
against torch.mm (relative Frobenius error) before it is timed. Writes ``sweep.json`` and
prints, per shape, torch.mm, the heuristic's pick and the best config.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import pathlib
import sys
import time

import torch
from _timing import make_operands

from inductor_mm_plugin.kernels.configs import MatmulConfig, fits

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def T(bm, bn, bk, g, w, s, split=1, sub=False, flat=False, ws=False, per_sm=1):
    return MatmulConfig("tma", bm, bn, bk, g, w, s, split, sub, flat, ws, per_sm)


def P(bm, bn, bk, g, w, s):
    return MatmulConfig("ptr", bm, bn, bk, g, w, s)


def _deepest(cfg, most=6):
    import dataclasses

    for s in range(most, 1, -1):
        if fits(dataclasses.replace(cfg, num_stages=s), 2):
            return dataclasses.replace(cfg, num_stages=s)
    return cfg


def _skinny_configs(M):
    """BLOCK_N x split x BLOCK_K (x warps for the widest tiles), as deep as shared memory allows."""
    bm = max(16, 1 << (M - 1).bit_length()) if M > 1 else 16
    out = []
    for bn in (32, 64, 128):
        for split in (1, 2, 3, 4):
            for bk in (128, 256) if bm < 64 else (128,):
                for w in (4, 8) if bn == 128 else (4,):
                    out.append(_deepest(T(bm, bn, bk, 1, w, 6, split, False, split == 1)))
    return list(dict.fromkeys(out))


def _skinny_unsplit(M):
    """The skinny sweep's unsplit 4-warp tiles, each with the tile loop flattened and not: the
    heuristic's sweeps (``skinny``) only timed them flattened, and a probe kernel without
    flattening ran 16x4096x4096 in 8.8 us against the op's 10.8 (bench/tma_fixed_cost.py)."""
    import dataclasses

    unsplit = [c for c in _skinny_configs(M) if c.split_k == 1 and c.num_warps == 4]
    return [dataclasses.replace(c, flatten=flat) for c in unsplit for flat in (True, False)]


def _skinny_lows(M):
    """The skinny sweep's configs plus BLOCK_K = 256 for 64- and 128-row tiles (the skinny sweep
    gave those 128 only), for the rows still below 0.95 of cuBLAS once split-K's counters were
    reused (2026-12-01: no memset per launch, which the skinny sweeps had charged every split
    config ~1 us)."""
    bm = max(16, 1 << (M - 1).bit_length()) if M > 1 else 16
    extra = []
    if bm >= 64:
        extra = [_deepest(T(bm, bn, 256, 1, 4, 6, split, False, split == 1)) for bn in (32, 64) for split in (1, 2, 4)]
    return list(dict.fromkeys(_skinny_configs(M) + extra))


GROUPS = {
    "llm": dict(
        shapes=[(4096, 4096, 4096), (2048, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336), (16384, 6144, 4096)],
        dtype="bf16", layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
            T(128, 256, 64, 8, 8, 4, sub=True, flat=True),
            T(256, 128, 64, 8, 8, 3, sub=True, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 256, 64, 8, 8, 3, sub=True, flat=False),
            T(128, 256, 64, 8, 8, 3, sub=False, flat=True),
            T(256, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 128, 128, 8, 8, 3, sub=True, flat=True),
            T(128, 256, 64, 16, 8, 3, sub=True, flat=True),
            P(128, 256, 64, 8, 8, 3),
        ],
    ),
    "largek": dict(
        shapes=[(2048, 2048, 32768), (1024, 1024, 65536)], dtype="bf16", layouts=["row"], graph=False,
        configs=[
            T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 128, 64, 8, 8, 4, 2, sub=True),
            T(128, 128, 64, 8, 8, 4, 4, sub=True),
            T(128, 256, 64, 8, 8, 3, 2, sub=True),
            T(128, 256, 64, 8, 8, 3, 4, sub=True),
            T(256, 128, 64, 8, 8, 3, 2, sub=True),
        ],
    ),
    "odd_tma": dict(
        shapes=[(1000, 1000, 1000), (768, 768, 768)], dtype="bf16", layouts=["row"], graph=False,
        configs=[
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(64, 128, 64, 8, 4, 4, flat=True),
            T(64, 64, 64, 8, 4, 4, flat=True),
            T(128, 128, 64, 8, 8, 4, 2, sub=True),
            T(64, 128, 64, 8, 4, 4, 2),
            T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
        ],
    ),
    # One wave of tiles, one per program: the pointer kernel (no descriptor prefetch, no
    # persistent loop; with the alignment hint, 16-byte cp.async at K = 1000) against the
    # TMA kernel the heuristic picks there.
    "odd_small": dict(
        shapes=[(1000, 1000, 1000), (768, 768, 768), (1024, 1024, 1024), (2048, 1024, 1024)], dtype="bf16",
        layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            P(128, 64, 64, 8, 4, 3),
            P(64, 128, 64, 8, 4, 3),
            P(64, 64, 64, 8, 4, 4),
            P(128, 128, 64, 8, 8, 3),
            P(64, 128, 32, 8, 4, 4),
            P(64, 64, 32, 8, 4, 4),
            P(128, 64, 32, 8, 4, 4),
        ],
    ),
    # One tile per program: the persistent loop has nothing to flatten; unflattened and
    # other depths against the heuristic's flattened 128x64x64 s4.
    "odd_tma_unflat": dict(
        shapes=[(1000, 1000, 1000), (768, 768, 768), (1024, 1024, 1024)], dtype="bf16", layouts=["row", "linear"],
        graph=False,
        configs=[
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(128, 64, 64, 8, 4, 4),
            T(128, 64, 64, 8, 4, 3),
            T(128, 64, 64, 8, 4, 5),
            T(64, 128, 64, 8, 4, 4),
            T(128, 64, 32, 8, 4, 6),
            T(128, 128, 64, 8, 8, 4, sub=True),
        ],
    ),
    # Less than a wave of 128 x 64 tiles (768^3: 72 of them on 132 SMs): smaller tiles, two or
    # three programs per SM, so that one program's load latency hides behind another's MMAs.
    "odd_per_sm": dict(
        shapes=[(1000, 1000, 1000), (768, 768, 768), (1024, 1024, 1024)], dtype="bf16", layouts=["row", "linear"],
        graph=False,
        configs=[
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(64, 64, 64, 8, 4, 4, per_sm=2),
            T(64, 64, 64, 8, 4, 4, per_sm=3),
            T(64, 64, 64, 8, 4, 3, per_sm=4),
            T(64, 128, 64, 8, 4, 4, per_sm=2),
            T(128, 64, 64, 8, 4, 3, per_sm=2),
            T(64, 64, 128, 8, 4, 3, per_sm=2),
            T(128, 128, 64, 8, 8, 3, sub=True, per_sm=2),
        ],
    ),
    # Odd strides: no divisor, so every load is one element (no cp.async); more warps to issue them?
    "odd_unaligned": dict(
        shapes=[(1531, 1531, 1531)], dtype="bf16", layouts=["row", "linear"], graph=False,
        configs=[
            P(64, 128, 32, 8, 4, 4),
            P(64, 128, 32, 8, 8, 4),
            P(128, 128, 32, 8, 8, 4),
            P(128, 64, 32, 8, 8, 4),
            P(64, 64, 32, 8, 4, 6),
            P(64, 128, 16, 8, 4, 6),
            P(32, 128, 32, 8, 4, 4),
            P(64, 256, 32, 8, 8, 3),
        ],
    ),
    "odd_linear": dict(
        shapes=[(4097, 4095, 4096)], dtype="bf16", layouts=["linear"], graph=False,
        configs=[T(128, 256, 64, 8, 8, 3, sub=True, flat=True), T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
                 P(128, 256, 64, 8, 8, 3), P(128, 128, 64, 8, 8, 3)],
    ),
    "odd_ptr": dict(
        shapes=[(1531, 1531, 1531), (2000, 3000, 500), (4097, 4095, 4096)], dtype="bf16", layouts=["row"],
        graph=False,
        configs=[
            P(128, 128, 64, 8, 8, 3), P(64, 128, 64, 8, 4, 3), P(128, 64, 64, 8, 4, 3), P(64, 64, 64, 8, 4, 3),
            P(64, 64, 32, 8, 4, 2), P(128, 128, 32, 8, 8, 2), P(128, 256, 64, 8, 8, 3), P(64, 128, 32, 8, 4, 4),
        ],
    ),
    "fp32": dict(
        shapes=[(4096, 4096, 4096), (8192, 4096, 4096)], dtype="fp32", layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 128, 32, 8, 8, 3, sub=True, flat=True),
            T(128, 128, 32, 8, 8, 4, sub=True, flat=True),
            T(128, 256, 32, 8, 8, 3, sub=True, flat=True),
            T(128, 64, 32, 8, 4, 4, flat=True),
            T(64, 128, 32, 8, 4, 4, flat=True),
            P(128, 128, 32, 8, 8, 3),
            P(64, 128, 32, 8, 4, 3),
        ],
    ),
    # Hopper warp specialization (tl.range(warp_specialize=True), Meta's autoWS pass in
    # Triton 3.6's sm90 pipeline): a probe against the flattened non-WS heuristic config.
    # Upstream's Hopper WS takes the loop unflattened (meta-pytorch/tritonbench#1025).
    "ws": dict(
        shapes=[(4096, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336), (2048, 2048, 32768)],
        dtype="bf16", layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
            T(128, 256, 64, 8, 8, 3, sub=True, ws=True),
            T(128, 256, 64, 8, 4, 3, sub=True, ws=True),
            T(128, 256, 64, 8, 8, 3, ws=True),
            T(128, 128, 64, 8, 4, 4, sub=True, ws=True),
            T(128, 128, 64, 8, 8, 4, sub=True, ws=True),
            T(128, 256, 64, 8, 8, 4, sub=True, ws=True),
            T(128, 128, 128, 8, 8, 3, sub=True, ws=True),
        ],
    ),
    "ws_llm": dict(
        shapes=[(m, n, k) for m in (2048, 4096, 8192, 16384)
                for n, k in [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (4096, 11008)]],
        dtype="bf16", layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 256, 64, 8, 8, 3, flat=True),
            T(128, 256, 64, 8, 8, 3, ws=True),
            T(256, 128, 64, 8, 8, 3, ws=True),
            T(128, 256, 64, 16, 8, 3, ws=True),
            T(128, 256, 64, 4, 8, 3, ws=True),
            T(128, 256, 64, 8, 8, 4, sub=True, ws=True),
            T(128, 128, 64, 8, 8, 4, ws=True),
        ],
    ),
    "ws_misc": dict(
        shapes=[(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 32768), (1024, 1024, 65536),
                (1000, 1000, 1000), (768, 768, 768), (2048, 1024, 4096), (2048, 4096, 1024)],
        dtype="bf16", layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 256, 64, 8, 8, 3, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(128, 128, 64, 8, 8, 4, 2, sub=True),
            T(128, 256, 64, 8, 8, 3, ws=True),
            T(128, 128, 64, 8, 8, 4, ws=True),
            T(128, 64, 64, 8, 8, 4, ws=True),
            T(128, 128, 64, 8, 8, 4, 2, ws=True),
            T(128, 256, 64, 8, 8, 3, 2, ws=True),
            T(128, 256, 64, 8, 8, 3, 4, ws=True),
        ],
    ),
    "ws_skinny": dict(
        shapes=[(m, n, k) for m in (64, 128) for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]],
        dtype="bf16", layouts=["linear"], graph=True,
        configs=[
            T(64, 64, 128, 1, 8, 4, ws=True),
            T(128, 64, 128, 1, 8, 4, ws=True),
            T(128, 128, 64, 1, 8, 4, ws=True),
            T(64, 128, 64, 1, 8, 4, ws=True),
        ],
    ),
    "skinny": dict(
        shapes=[(m, n, k) for m in (1, 8, 16, 32, 64, 128) for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]],
        dtype="bf16", layouts=["row", "linear"], graph=True, configs=None,
    ),
    # Decode shapes outside issue 5's table (Llama-2 MLP, GQA projections), for the heuristic's
    # rules between its measured points.
    "skinny_more": dict(
        shapes=[(m, n, k) for m in (1, 16, 64) for n, k in [(11008, 4096), (4096, 11008), (6144, 4096), (1024, 4096)]],
        dtype="bf16", layouts=["linear"], graph=True, configs=None,
    ),
    "skinny_lows": dict(
        shapes=[(64, 4096, 4096), (128, 14336, 4096), (32, 14336, 4096), (128, 4096, 4096), (128, 4096, 14336)],
        dtype="bf16", layouts=["row", "linear"], graph=True, configs=_skinny_lows,
    ),
    "skinny_unflat": dict(
        shapes=[(m, n, k) for m in (1, 8, 16, 32, 64, 128) for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]],
        dtype="bf16", layouts=["row", "linear"], graph=True, configs=_skinny_unsplit,
    ),
}  # fmt: skip


def _configs_of(spec, shape):
    """A group's configs for one shape: its list, a function of M, or the skinny sweep's."""
    configs = spec["configs"] or _skinny_configs
    return configs(shape[0]) if callable(configs) else configs


def _spec(x):
    # Triton specializes integer arguments on == 1 and on divisibility by 16.
    return 1 if x == 1 else 16 if x % 16 == 0 else 0


def tasks_of(groups):
    """One compile task per distinct kernel specialization (shapes sharing one are compiled once)."""
    tasks, seen = [], set()
    for g in groups:
        spec = GROUPS[g]
        for shape in spec["shapes"]:
            for layout in spec["layouts"]:
                configs = _configs_of(spec, shape)
                for cfg in [None, *configs]:  # None: the heuristic's pick
                    key = (spec["dtype"], layout, cfg, *(map(_spec, shape) if cfg else shape))
                    if key not in seen:
                        seen.add(key)
                        tasks.append((g, shape, spec["dtype"], layout, cfg))
    return tasks


def _compile(task):
    """Worker: compile one config for one call signature (no launch)."""
    g, (M, N, K), dtype_name, layout, cfg = task
    torch.backends.cuda.matmul.allow_tf32 = True
    from inductor_mm_plugin.ops import matmul as impl

    t0 = time.time()
    try:
        a, b = make_operands(M, N, K, DTYPES[dtype_name], layout, fill=False)
        out = torch.empty(M, N, device="cuda", dtype=a.dtype)
        impl._launch(a, b, out, config=cfg, compile_only=True)
        return task, None, time.time() - t0
    except Exception as e:  # noqa: BLE001
        return task, f"{type(e).__name__}: {str(e)[:300]}", time.time() - t0


def precompile(tasks, jobs):
    t0 = time.time()
    errors = {}
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        for task, err, _ in pool.map(_compile, tasks, chunksize=1):
            if err:
                errors[(task[0], task[1], task[3], task[4])] = err
    print(f"precompiled {len(tasks)} kernels in {time.time() - t0:.1f}s with {jobs} processes; "
          f"{len(errors)} failed", flush=True)  # fmt: skip
    for k, e in list(errors.items())[:20]:
        print("  compile failed:", k[0], k[1], k[2], k[3].short() if k[3] else "heuristic", "->", e, flush=True)
    return errors


def rel_err(out, ref):
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def time_fn(fn, graph):
    import triton.testing

    if graph:
        return triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


def sweep(groups, errors):
    from inductor_mm_plugin.kernels.configs import Problem  # noqa: F401
    from inductor_mm_plugin.ops import matmul as impl

    rows = []
    for g in groups:
        spec = GROUPS[g]
        dtype = DTYPES[spec["dtype"]]
        for M, N, K in spec["shapes"]:
            for layout in spec["layouts"]:
                a, b = make_operands(M, N, K, dtype, layout)
                ref = torch.mm(a, b)
                out = torch.empty(M, N, device="cuda", dtype=dtype)
                cublas_ms = time_fn(lambda: torch.mm(a, b), spec["graph"])
                # The heuristic's pick, through the public op path.
                heur_out = torch.ops.inductor_mm_plugin.mm(a, b)
                heur_cfg = impl.chosen_config(a, b)
                heur_err = rel_err(heur_out, ref)
                heur_ms = time_fn(lambda: torch.ops.inductor_mm_plugin.mm(a, b), spec["graph"])
                configs = _configs_of(spec, (M, N, K))
                results = []
                for cfg in configs:
                    if (g, (M, N, K), layout, cfg) in errors:
                        results.append((cfg, None, "compile"))
                        continue
                    try:
                        out.fill_(float("nan"))
                        impl._launch(a, b, out, config=cfg)
                        err = rel_err(out, ref)
                        if not err < (5e-3 if dtype == torch.float32 else 1e-2):
                            results.append((cfg, None, f"wrong: rel err {err:.3g}"))
                            continue
                        ms = time_fn(lambda: impl._launch(a, b, out, config=cfg), spec["graph"])
                        results.append((cfg, ms, None))
                    except Exception as e:  # noqa: BLE001
                        results.append((cfg, None, f"{type(e).__name__}: {str(e)[:200]}"))
                ok = [(c, ms) for c, ms, e in results if ms is not None]
                best_cfg, best_ms = min(ok, key=lambda x: x[1]) if ok else (None, float("nan"))
                flops = 2.0 * M * N * K
                row = dict(
                    group=g, shape=[M, N, K], dtype=spec["dtype"], layout=layout, cublas_ms=cublas_ms,
                    heuristic=heur_cfg.short() if heur_cfg else None, heuristic_ms=heur_ms, heuristic_err=heur_err,
                    best=best_cfg.short() if best_cfg else None, best_ms=best_ms,
                    results=[dict(config=c.short(), ms=ms, error=e) for c, ms, e in results],
                )  # fmt: skip
                rows.append(row)
                print(
                    f"{g:10s} {M:6d}x{N:6d}x{K:6d} {layout:6s} cublas {flops / cublas_ms / 1e9:6.1f} TF | "
                    f"heur {cublas_ms / heur_ms:5.2f} [{row['heuristic']}] err {heur_err:.1e} | "
                    f"best {cublas_ms / best_ms:5.2f} [{row['best']}]",
                    flush=True,
                )
                for c, ms, e in sorted(results, key=lambda r: r[1] or 1e9):
                    print(f"      {cublas_ms / ms if ms else 0:5.2f}  {c.short()}  {e or ''}", flush=True)
    return rows


def host_overhead():
    """Per-call host cost (CPU-bound loop, no sync inside) and the times do_bench reports."""
    import triton.testing

    from inductor_mm_plugin.ops import matmul as impl

    res = {}
    for M in (768, 1000):
        a, b = make_operands(M, M, M, torch.bfloat16, "row")
        out = torch.empty(M, M, device="cuda", dtype=torch.bfloat16)
        plan = impl._launch(a, b, out)
        fns = {
            "torch.mm": lambda: torch.mm(a, b),
            "ops.mm": lambda: torch.ops.inductor_mm_plugin.mm(a, b),
            "mm_launch": lambda: impl.mm_launch(a, b),
            "_launch(out)": lambda: impl._launch(a, b, out),
            "plan.launch": lambda: plan.launch(a, b, out, None, 1.0, 1.0),
        }

        def jit_path():
            # Triton's own launch path with the same config, for comparison.
            args = plan.args(a, b, out, None, 1.0, 1.0)
            plan.kernel[plan.grid](*args, num_warps=plan.cfg.num_warps, num_stages=plan.cfg.num_stages)

        fns["triton jit launch"] = jit_path
        for name, fn in fns.items():
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            n = 2000
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            host_us = (t1 - t0) / n * 1e6
            bench_us = 1e3 * triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")
            graph_us = 1e3 * triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")
            res[f"{M} {name}"] = dict(host_us=host_us, do_bench_us=bench_us, cudagraph_us=graph_us)
            print(f"overhead {M}^3 {name:18s} host {host_us:6.1f} us/call   do_bench {bench_us:7.1f} us   "
                  f"cudagraph {graph_us:7.1f} us   [{plan.cfg.short()}]", flush=True)  # fmt: skip
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/sweep"))
    p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--groups", nargs="+", default=list(GROUPS), choices=list(GROUPS))
    p.add_argument("--skip-overhead", action="store_true")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("sweep_configs.py needs a CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = True
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    import triton

    result["triton"] = triton.__version__
    tasks = tasks_of(args.groups)
    errors = precompile(tasks, args.jobs)
    if not args.skip_overhead:
        result["overhead"] = host_overhead()
        (out / "sweep.json").write_text(json.dumps(result, indent=1))
    result["rows"] = sweep(args.groups, errors)
    result["compile_errors"] = {f"{k[0]} {k[1]} {k[2]} {k[3].short() if k[3] else 'heuristic'}": e
                                for k, e in errors.items()}
    (out / "sweep.json").write_text(json.dumps(result, indent=1))
    # The heuristic's choice per shape, for the record.
    for r in result["rows"]:
        print(f"{r['group']:10s} {r['shape']} {r['layout']:6s} heuristic {r['cublas_ms'] / r['heuristic_ms']:.2f} "
              f"best {r['cublas_ms'] / r['best_ms']:.2f} [{r['best']}]")  # fmt: skip


if __name__ == "__main__":
    main()
