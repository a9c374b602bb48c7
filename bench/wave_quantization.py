"""The persistent kernel's program count: one per SM against as many as spread the work evenly.

    python bench/wave_quantization.py [--out FILE] [--rounds 3] [--shapes probe|llm|MxNxK ...]

Every prefill shape of issue 5's table has a multiple of 128 tiles of 128x256, so on the
H200's 132 SMs one program per SM gives 4 programs one tile fewer than the rest: no earlier
finish, only more tiles in flight at once. ``configs.persistent_programs`` runs the fewest
programs that finish in as few rounds (128 there). Per shape (bf16, row-major and nn.Linear
layouts): torch.mm, the plugin as it launches (``plugin``), and the same config on one
program per SM (``plugin 1/SM``, the launcher's rule before persistent_programs), in rounds
(_timing.py), do_bench medians with L2 flushed; each output checked against torch.mm first.
The ``probe`` shapes pair prefill shapes with ones grown to whole rounds of 132 tiles
(M = 4224: 33 row tiles, 33 x 16 = 528 = 4 x 132 tiles at N = 4096), where both arms run 132
programs.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.testing
from _timing import header, make_operands, median, rounds, sm_clock, write_rows

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops import matmul as impl

PROBE = [
    (4096, 4096, 4096), (4224, 4096, 4096), (8192, 4096, 4096), (8448, 4096, 4096),
    (4096, 14336, 4096), (4224, 14336, 4096), (4096, 28672, 4096), (4224, 28672, 4096),
    (1024, 1024, 65536),
]  # fmt: skip
LLM = [(m, n, k) for m in (2048, 4096, 8192, 16384)
       for n, k in ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (4096, 11008))]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", nargs="+", default=["probe"], help="probe, llm, or MxNxK ...")
    args = p.parse_args()
    torch.manual_seed(0)
    print(header(), flush=True)
    print("clock at start:", sm_clock(), flush=True)
    sms = impl._num_sms(torch.device("cuda", 0))
    balanced = impl.persistent_programs
    shapes = []
    for spec in args.shapes:
        shapes += PROBE if spec == "probe" else LLM if spec == "llm" else [tuple(map(int, spec.split("x")))]
    rows = []
    for M, N, K in shapes:
        for layout in ("row", "linear"):
            a, b = make_operands(M, N, K, torch.bfloat16, layout)
            ref = torch.mm(a, b)
            cfg = impl._launch(a, b, torch.empty_like(ref)).cfg  # the heuristic's pick on every SM

            def plugin(one_per_sm):
                out = torch.empty_like(ref)

                def run():
                    # one_per_sm: the launcher's rule before configs.persistent_programs
                    rule = (lambda items, programs: max(1, min(items, programs))) if one_per_sm else balanced
                    with impl.launcher_setting("persistent_programs", rule):
                        plan = impl._launch(a, b, out, config=cfg)
                        err = float((out.float() - ref.float()).norm() / ref.float().norm())
                        assert err < 1e-2, (one_per_sm, err)
                        grids.setdefault(one_per_sm, plan.grid[0])
                        return 1e3 * triton.testing.do_bench(lambda: impl._launch(a, b, out, config=cfg),
                                                             return_mode="median")  # fmt: skip

                return run

            grids = {}
            fns = {
                "torch.mm": lambda: 1e3 * triton.testing.do_bench(lambda: torch.mm(a, b), return_mode="median"),
                "plugin": plugin(False),
                "plugin 1/SM": plugin(True),
            }
            times = rounds(fns, lambda f: f(), args.rounds)
            items = triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n) * cfg.split_k
            flops = 2 * M * N * K
            row = {"shape": [M, N, K], "layout": layout, "config": cfg.short(), "work_items": items,
                   "rounds_of_sms": items / sms, "programs": grids[False], "programs_1_per_sm": grids[True],
                   "us": times}  # fmt: skip
            rows.append(row)
            rate = "  ".join(f"{k} {flops / median(v) / 1e6:6.1f}" for k, v in times.items())
            ratio = median([t / p for t, p in zip(times["torch.mm"], times["plugin"])])
            old = median([t / p for t, p in zip(times["torch.mm"], times["plugin 1/SM"])])
            gain = median([o / p for o, p in zip(times["plugin 1/SM"], times["plugin"])])
            print(f"{M}x{N}x{K} {layout:6s} [{cfg.short()}] {items} items = {items / sms:.2f} x {sms}, "
                  f"{grids[False]} / {grids[True]} programs | TFLOP/s: {rate} | mm/plugin {ratio:.3f}  "
                  f"mm/plugin 1/SM {old:.3f}  speedup {gain:.3f}", flush=True)  # fmt: skip
    print("clock at end:", sm_clock(), flush=True)
    if args.out:
        write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
