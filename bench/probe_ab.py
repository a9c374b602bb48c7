"""Interleaved A/B of the plugin's TMA kernel against bench/tma_fixed_cost.py's probe kernel
with the same config, under CUDA graphs: is the gap between them the kernels' or the order
they were timed in?

    python bench/probe_ab.py --shape 16x4096x4096 --tile 16x32x256 --stages 6 [--rounds 4]
"""

from __future__ import annotations

import argparse
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import tma_fixed_cost as probe  # noqa: E402

import inductor_mm_plugin  # noqa: E402,F401
from inductor_mm_plugin.kernels.configs import MatmulConfig  # noqa: E402
from inductor_mm_plugin.ops import matmul as impl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="16x4096x4096")
    ap.add_argument("--tile", default="16x32x256")
    ap.add_argument("--stages", type=int, default=6)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    import triton

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
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        impl._launch(a, b, out, config=cfg)
        run_probe = probe.probe_fn(a, bs, layout == "linear", c, cfg, True, True)
        run_probe()
        torch.cuda.synchronize()
        for name, t in (("plugin", out), ("probe", c)):
            err = ((t.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (name, err)
        fns = {
            "torch.mm": lambda: torch.mm(a, b),
            "plugin kernel": lambda: impl._launch(a, b, out, config=cfg),
            "probe": run_probe,
        }
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
