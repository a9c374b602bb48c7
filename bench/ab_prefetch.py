"""The TMA kernel with and without its tensormap prefetch, in rounds, against torch.mm.

    python bench/ab_prefetch.py [--out FILE] [--rounds 3] [--shapes MxNxK ...]

The kernel's first TMA copy through each descriptor waits for the descriptor to reach the
SM's tensormap cache; ``_prefetch_descriptors`` (kernels/matmul_tma.py) asks for all of them
as the kernel starts, as CUTLASS does. A fixed cost per program, so the decode shapes of
issue 5's skinny class and small odd shapes are where it can show: each is timed under CUDA
graphs (``do_bench_cudagraph``, median) with the prefetch on (``prefetch``, the default) and off
(``ops.matmul.PREFETCH_DESCRIPTORS``), and torch.mm, in rounds (_timing.py); every output is
checked against torch.mm first.
"""

from __future__ import annotations

import argparse
import math

import torch
import triton
import triton.testing
from _timing import header, make_operands, median, rounds, sm_clock, write_rows

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops import matmul as impl

SHAPES = [(m, n, k) for m in (1, 8, 16, 32, 64, 128) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]
SHAPES += [(768, 768, 768), (1000, 1000, 1000)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", nargs="+", help="MxNxK ... (default: the skinny class, 768^3, 1000^3)")
    args = p.parse_args()
    torch.manual_seed(0)
    print(header(), flush=True)
    print("clock at start:", sm_clock(), flush=True)
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes] if args.shapes else SHAPES
    rows, gains = [], []
    for M, N, K in shapes:
        for layout in ("row", "linear"):
            a, b = make_operands(M, N, K, torch.bfloat16, layout)
            ref = torch.mm(a, b)

            def arm(prefetch):
                def run():
                    if prefetch is None:
                        return 1e3 * triton.testing.do_bench_cudagraph(lambda: torch.mm(a, b), rep=30,
                                                                        return_mode="median")  # fmt: skip
                    with impl.launcher_setting("PREFETCH_DESCRIPTORS", prefetch):
                        out = torch.ops.inductor_mm_plugin.mm(a, b)
                        err = float((out.float() - ref.float()).norm() / ref.float().norm())
                        assert err < 1e-2, (prefetch, err)
                        fn = lambda: torch.ops.inductor_mm_plugin.mm(a, b)  # noqa: E731
                        return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")

                return run

            times = rounds({"torch.mm": arm(None), "prefetch": arm(True), "no prefetch": arm(False)},
                           lambda f: f(), args.rounds)  # fmt: skip
            torch.ops.inductor_mm_plugin.mm(a, b)  # plans the call: chosen_config reads the plan
            cfg = impl.chosen_config(a, b)
            gain = median([n / p for n, p in zip(times["no prefetch"], times["prefetch"])])
            ratio = median([t / p for t, p in zip(times["torch.mm"], times["prefetch"])])
            old = median([t / n for t, n in zip(times["torch.mm"], times["no prefetch"])])
            gains.append(gain)
            rows.append({"shape": [M, N, K], "layout": layout, "config": cfg.short() if cfg else None, "us": times})
            cells = "  ".join(f"{k} {median(v):7.2f}" for k, v in times.items())
            print(f"{M}x{N}x{K} {layout:6s} [{cfg.short() if cfg else '-'}] us: {cells} | mm/plugin {ratio:.3f} "
                  f"(no prefetch {old:.3f})  speedup {gain:.3f}", flush=True)  # fmt: skip
    print(f"speedup geomean {math.exp(sum(map(math.log, gains)) / len(gains)):.3f}, "
          f"range {min(gains):.3f}-{max(gains):.3f}", flush=True)  # fmt: skip
    print("clock at end:", sm_clock(), flush=True)
    if args.out:
        write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
