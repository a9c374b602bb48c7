"""Interleaved A/B of the plugin's TMA kernel against bench/tma_fixed_cost.py's probe kernel
with the same config, under CUDA graphs: is the gap between them the kernels' or the order
they were timed in?

    python bench/probe_ab.py --shape 16x4096x4096 --tile 16x32x256 --stages 6 [--rounds 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch
import triton
import triton.language as tl

import tma_fixed_cost as probe  # bench/, the script's own directory

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.kernels.configs import MatmulConfig
from inductor_mm_plugin.kernels.matmul import _tile_coords
from inductor_mm_plugin.ops import matmul as impl


@triton.jit
def _probe_variant(
    a_desc, b_desc, c_desc, M, N, K,
    DIVIDE: tl.constexpr, RECOMPUTE: tl.constexpr, B_KMAJOR: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NUM_SMS: tl.constexpr,
):  # fmt: skip
    # The probe with one of the plugin kernel's differences at a time: DIVIDE, the plugin's
    # grouped tile order (kernels/matmul.py _tile_coords, GROUP_M = 1: integer divisions by
    # runtime values until commit 479f3f2, division-free since); RECOMPUTE, the epilogue's
    # tile recomputed from its own counter after the K loop (as the flattened kernel does).
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    tiles = num_m * num_n
    work_c = tl.program_id(0) - NUM_SMS
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS):
        off_m, off_n = _offsets(tile, num_m, num_n, DIVIDE, BM, BN)
        acc = probe.probe_tile(a_desc, b_desc, off_m, off_n, K, B_KMAJOR, BM, BN, BK)
        if RECOMPUTE:
            work_c += NUM_SMS
            off_m, off_n = _offsets(work_c, num_m, num_n, DIVIDE, BM, BN)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _offsets(tile, num_m, num_n, DIVIDE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    if DIVIDE:
        pid_m, pid_n = _tile_coords(tile, num_m, num_n, 1)
    else:  # the probe's own order
        pid_m = tile % num_m
        pid_n = tile // num_m
    return pid_m * BM, pid_n * BN


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="16x4096x4096")
    ap.add_argument("--tile", default="16x32x256")
    ap.add_argument("--stages", type=int, default=6)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    triton.set_allocator(probe._alloc)
    M, N, K = map(int, args.shape.split("x"))
    bm, bn, bk = map(int, args.tile.split("x"))
    cfg = MatmulConfig("tma", bm, bn, bk, 1, args.warps, args.stages)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{M}x{N}x{K} bf16, {cfg.short()}; us per call, do_bench_cudagraph median", flush=True)  # fmt: skip
    for layout in ("linear", "row"):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        bs = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) if layout == "linear" else \
            torch.randn(K, N, device="cuda", dtype=torch.bfloat16)  # fmt: skip
        b = bs.t() if layout == "linear" else bs
        ref = torch.mm(a.double(), b.double())

        def check(t, what):
            err = ((t.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{what}: relative error {err:.3g}"
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        flat = dataclasses.replace(cfg, flatten=True)
        for c_ in (cfg, flat):
            out.fill_(float("nan"))
            impl._launch(a, b, out, config=c_)
            torch.cuda.synchronize()
            check(out, c_.short())
        run_probe = probe.probe_fn(a, bs, layout == "linear", c, cfg, True, True)
        run_probe()
        torch.cuda.synchronize()
        check(c, "probe")
        fns = {
            "torch.mm": lambda: torch.mm(a, b),
            "plugin kernel": lambda: impl._launch(a, b, out, config=cfg),
            "plugin kernel, flattened": lambda: impl._launch(a, b, out, config=flat),
            "probe": run_probe,
        }
        lin = layout == "linear"
        descs = probe.host_descriptors(a, bs, lin, c, cfg)
        programs, sms = probe.persistent_grid(M, N, cfg)
        for divide, recompute in ((False, False), (True, False), (False, True), (True, True)):

            def variant(divide=divide, recompute=recompute):
                _probe_variant[(programs,)](*descs, M, N, K, divide, recompute, lin, bm, bn, bk, sms,
                                     num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # fmt: skip

            c.fill_(float("nan"))
            variant()
            torch.cuda.synchronize()
            check(c, f"variant divide={divide} recompute={recompute}")
            fns[f"variant{' divide' * divide}{' recompute' * recompute}"] = variant
        times = {k: [] for k in fns}
        for r in range(args.rounds):
            order = list(fns) if r % 2 == 0 else list(fns)[::-1]
            for k in order:
                times[k].append(probe.cg_us(fns[k]))
        cells = "  ".join(f"{k} " + "/".join(f"{t:.2f}" for t in v) for k, v in times.items())
        print(f"{layout:6s} {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
