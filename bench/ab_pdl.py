"""The plugin's kernels with and without programmatic dependent launch (PDL), in rounds.

    python bench/ab_pdl.py [--out FILE] [--rounds 3]

Modes (``ops/matmul.py``, ``PDL``; kernels/matmul.py, ``_dependent_launch``): 0 off; 1 launched
with PDL, ``griddepcontrol.wait`` before the first memory access; 2 also
``launch_dependents`` at once, so that the next PDL-launched kernel may start before this one
ends. Each shape is timed under CUDA graphs (``do_bench_cudagraph``, median, back-to-back calls
of the same matmul, as a decode step's weights are read) and, for ``chain``, as a matmul
followed by a SiLU, where the kernel after the matmul is one of torch's (launched without
PDL). torch.mm is timed in the same rounds; every output is checked against it first.
"""

from __future__ import annotations

import argparse
import sys

import torch
import triton
import triton.testing
from _timing import header, make_operands, median, rounds, write_rows

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops import matmul as impl

SHAPES = [
    (1, 4096, 4096), (8, 4096, 14336), (16, 4096, 4096), (16, 14336, 4096), (16, 4096, 14336), (32, 4096, 4096),
    (64, 4096, 4096), (64, 14336, 4096), (128, 4096, 4096), (128, 14336, 4096), (768, 768, 768), (1000, 1000, 1000),
]  # fmt: skip
MODES = (0, 1, 2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", nargs="+", help="MxNxK ... (default: a decode and small set)")
    args = p.parse_args()
    torch.manual_seed(0)
    print(header(), flush=True)
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes] if args.shapes else SHAPES
    rows = []
    for M, N, K in shapes:
        for layout in ("linear", "row"):
            for chain in (False, True):
                a, b = make_operands(M, N, K, torch.bfloat16, layout)
                ref = torch.mm(a, b)
                post = torch.nn.functional.silu if chain else (lambda t: t)

                def arm(mode):
                    def run():
                        if mode is None:
                            fn = lambda: post(torch.mm(a, b))  # noqa: E731
                            return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")
                        with impl.pdl_mode(mode):
                            fn = lambda: post(torch.ops.inductor_mm_plugin.mm(a, b))  # noqa: E731
                            out = torch.ops.inductor_mm_plugin.mm(a, b)
                            err = float((out.float() - ref.float()).norm() / ref.float().norm())
                            assert err < 1e-2, (mode, err)
                            return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")

                    return run

                fns = {"torch.mm": arm(None), **{f"pdl{m}": arm(m) for m in MODES}}
                times = rounds(fns, lambda f: f(), args.rounds)
                torch.ops.inductor_mm_plugin.mm(a, b)  # plans the call: chosen_config reads the plan
                row = {"shape": [M, N, K], "layout": layout, "chain": chain, "config": impl.chosen_config(a, b).short(),
                       "us": times}  # fmt: skip
                rows.append(row)
                cells = "  ".join(f"{k} {median(v):7.2f}" for k, v in times.items())
                ratio = "  ".join(f"pdl{m}/pdl0 {median([x / y for x, y in zip(times[f'pdl{m}'], times['pdl0'])]):.3f}"
                                  for m in MODES[1:])  # fmt: skip
                where = "chain" if chain else "alone"
                print(f"{M}x{N}x{K} {layout:6s} {where} [{row['config']}] us: {cells} | {ratio}", flush=True)
    if args.out:
        write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
