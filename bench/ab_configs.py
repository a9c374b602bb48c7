"""Interleaved A/B of kernel configs against torch.mm: for decisions a single sweep cannot make.

    python bench/ab_configs.py --rounds 5 --out $OUT            # bf16: warp specialization
    python bench/ab_configs.py --set fp32 --rounds 3 --out $OUT # TF32 tile shapes
    python bench/ab_configs.py --set groups --rounds 3 --out $OUT  # GROUP_M on prefill shapes

A sweep (``sweep_configs.py``) times each config once, one after the other; on the H200 two
sweeps of the same configs minutes apart disagreed by up to 18% on the same shape (sustained
large bf16 products run the card at its power limit, and its clocks drift). Here cuBLAS and
every candidate are timed in rounds (``_timing.rounds``: back to back, the order reversed
each round) and the ratio cuBLAS / candidate is taken within each round; the report gives
each candidate's median ratio over the rounds and its range, with the SM clock read by
``nvidia-smi`` before and after each shape. Outputs are checked against torch.mm first.

Writes ``<out>/ab-configs[-<set>].json`` and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys

import torch
from _timing import make_operands, median, ratios, rounds, sm_clock

from inductor_mm_plugin.kernels.configs import MatmulConfig

T = MatmulConfig  # MatmulConfig("tma", bm, bn, bk, group_m, warps, stages, split_k, subtile, flatten, ws)

HEURISTIC_LLM = T("tma", 128, 256, 64, 8, 8, 3, flatten=True)
CANDIDATES = {
    "flat": HEURISTIC_LLM,
    "ws": T("tma", 128, 256, 64, 8, 8, 3, warp_specialize=True),
    "ws g16": T("tma", 128, 256, 64, 16, 8, 3, warp_specialize=True),
    "ws s4 sub": T("tma", 128, 256, 64, 8, 8, 4, epilogue_subtile=True, warp_specialize=True),
    "ws 128x128": T("tma", 128, 128, 64, 8, 8, 4, warp_specialize=True),
}
SHAPES = [
    (4096, 4096, 4096, "row"), (4096, 4096, 4096, "linear"),
    (2048, 14336, 4096, "row"), (8192, 4096, 14336, "row"), (8192, 4096, 14336, "linear"),
    (8192, 28672, 4096, "row"), (16384, 6144, 4096, "linear"), (2048, 2048, 32768, "row"),
    (8192, 8192, 8192, "row"),
]  # fmt: skip


# fp32 with TF32 allowed (issue 5's fp32 class), both layouts: an N-major B goes through
# registers as the first operand (SWAP_AB in kernels/matmul_tma.py), so BLOCK_N is the
# wgmma's M there. Shared memory per stage is twice bf16's: 128 x 256 needs the subtiled store.
FP32_CANDIDATES = {
    "128x128x32 s4 sub": T("tma", 128, 128, 32, 8, 8, 4, epilogue_subtile=True),
    "128x128x32 s5 sub flat": T("tma", 128, 128, 32, 8, 8, 5, epilogue_subtile=True, flatten=True),
    "128x128x32 w4 s4 sub flat": T("tma", 128, 128, 32, 8, 4, 4, epilogue_subtile=True, flatten=True),
    "128x128x32 g16 s4 sub flat": T("tma", 128, 128, 32, 16, 8, 4, epilogue_subtile=True, flatten=True),
    "128x256x32 s3 sub flat": T("tma", 128, 256, 32, 8, 8, 3, epilogue_subtile=True, flatten=True),
    "256x128x32 s3 sub flat": T("tma", 256, 128, 32, 8, 8, 3, epilogue_subtile=True, flatten=True),
    "128x256x16 s5 sub flat": T("tma", 128, 256, 16, 8, 8, 5, epilogue_subtile=True, flatten=True),
    "128x128x16 s6 sub flat": T("tma", 128, 128, 16, 8, 8, 6, epilogue_subtile=True, flatten=True),
    "128x128x64 s2 sub flat": T("tma", 128, 128, 64, 8, 8, 2, epilogue_subtile=True, flatten=True),
    # The first run (bench/results/*-ab-configs-fp32.json): the N-major B lost 15-30% to the
    # flattened loop; these are the widest tiles without it.
    "128x256x32 s3 sub": T("tma", 128, 256, 32, 8, 8, 3, epilogue_subtile=True),
    "256x128x32 s3 sub": T("tma", 256, 128, 32, 8, 8, 3, epilogue_subtile=True),
    "128x256x16 s5 sub": T("tma", 128, 256, 16, 8, 8, 5, epilogue_subtile=True),
    "256x128x16 s5 sub": T("tma", 256, 128, 16, 8, 8, 5, epilogue_subtile=True),
    "128x128x32 w4 s4 sub": T("tma", 128, 128, 32, 8, 4, 4, epilogue_subtile=True),
    "128x64x32 w4 s4 flat": T("tma", 128, 64, 32, 8, 4, 4, flatten=True),
    "64x128x32 w4 s4 flat": T("tma", 64, 128, 32, 8, 4, 4, flatten=True),
}
FP32_SHAPES = [(4096, 4096, 4096, "row"), (4096, 4096, 4096, "linear"), (8192, 4096, 4096, "row"),
               (8192, 4096, 4096, "linear")]  # fmt: skip
# Tile groups (GROUP_M row tiles per L2 group) on the prefill shapes, now that these run 128
# programs (configs.persistent_programs): at N = 4096 a group of 8 x 16 tiles of 128 x 256 is
# exactly one round of 128 programs; at N = 6144, 14336 and 28672 a group spans 1.5, 3.5 and 7
# rounds.
GROUP_CANDIDATES = {
    "g8 (heuristic)": HEURISTIC_LLM,
    "g4": T("tma", 128, 256, 64, 4, 8, 3, flatten=True),
    "g16": T("tma", 128, 256, 64, 16, 8, 3, flatten=True),
    "g32": T("tma", 128, 256, 64, 32, 8, 3, flatten=True),
}
GROUP_SHAPES = [
    (4096, 4096, 4096, "row"), (2048, 6144, 4096, "row"), (8192, 6144, 4096, "linear"), (16384, 6144, 4096, "row"),
    (4096, 14336, 4096, "row"), (8192, 14336, 4096, "linear"), (4096, 28672, 4096, "row"),
    (8192, 4096, 14336, "linear"), (2048, 4096, 11008, "row"),
]  # fmt: skip
LLM_SHAPES = [(m, n, k, layout) for m in (2048, 4096, 8192, 16384)
              for n, k in ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (4096, 11008))
              for layout in ("row", "linear")]  # fmt: skip
SETS = {"ws": (CANDIDATES, SHAPES), "fp32": (FP32_CANDIDATES, FP32_SHAPES), "groups": (GROUP_CANDIDATES, GROUP_SHAPES),
        "groups-llm": (GROUP_CANDIDATES, LLM_SHAPES)}  # fmt: skip


def main():
    import triton
    import triton.testing

    from inductor_mm_plugin.ops import matmul as impl

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/ab"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--set", default="ws", choices=list(SETS), help="candidates and shapes (fp32: TF32 allowed)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"], help="for the bf16/fp16 sets")
    p.add_argument("--candidates", nargs="*", help="a subset of the set's candidates")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("ab_configs.py needs a CUDA device")
    candidates, shapes = SETS[args.set]
    if args.candidates:
        unknown = set(args.candidates) - set(candidates)
        if unknown:
            sys.exit(f"unknown candidates {sorted(unknown)} for set {args.set}; expected some of {list(candidates)}")
        candidates = {n: candidates[n] for n in args.candidates}
    if args.set == "fp32":
        dtype, args.dtype = torch.float32, "fp32"
        torch.backends.cuda.matmul.allow_tf32 = True  # this script's own process: TF32 for both sides
    else:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "dtype": args.dtype, "rounds": args.rounds,
              "rows": []}  # fmt: skip
    for M, N, K, layout in shapes:
        a, b = make_operands(M, N, K, dtype, layout)
        ref = torch.mm(a, b)
        out = torch.empty(M, N, device="cuda", dtype=dtype)
        fns = {"heuristic": lambda: torch.ops.inductor_mm_plugin.mm(a, b)}
        errors = {}
        for name, cfg in candidates.items():
            try:
                out.fill_(float("nan"))
                impl._launch(a, b, out, config=cfg)
                err = float((out.float() - ref.float()).norm() / ref.float().norm())
                if not err < 1e-2:
                    errors[name] = f"wrong: rel err {err:.3g}"
                    continue
                fns[name] = lambda cfg=cfg: impl._launch(a, b, out, config=cfg)
            except Exception as e:  # noqa: BLE001
                errors[name] = f"{type(e).__name__}: {str(e)[:200]}"
        clock_before = sm_clock()
        times = rounds({"cublas": lambda: torch.mm(a, b), **fns},
                       lambda fn: triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"), args.rounds)
        clock_after = sm_clock()
        per_round = {n: ratios(times, "cublas", n) for n in fns}
        row = dict(shape=[M, N, K], layout=layout, heuristic=impl.chosen_config(a, b).short(), times_ms=times,
                   ratios=per_round, errors=errors, clock_before=clock_before, clock_after=clock_after)  # fmt: skip
        result["rows"].append(row)
        flops = 2.0 * M * N * K
        print(f"{M}x{N}x{K} {layout}: cublas {flops / median(times['cublas']) / 1e9:.0f} TF "
              f"[{clock_before} -> {clock_after}] heuristic={row['heuristic']}", flush=True)  # fmt: skip
        for n in fns:
            r = per_round[n]
            print(f"    {n:12s} ratio median {median(r):.3f}  range {min(r):.3f}-{max(r):.3f}", flush=True)
        for n, e in errors.items():
            print(f"    {n:12s} {e}", flush=True)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ("ab-configs.json" if args.set == "ws" else f"ab-configs-{args.set}.json")).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
