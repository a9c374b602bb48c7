"""How much of the plugin's gap to cuBLAS on prefill shapes is its last, partial wave of tiles.

    python bench/wave_quantization.py [--out FILE] [--rounds 3]

Every prefill shape of issue 5's table has a multiple of 128 tiles of 128x256, so on the
H200's 132 SMs the persistent kernel's last wave leaves 4 SMs in 132 idle (3%). If that tail
is the gap, then (a) the same config on 128 programs runs as fast as on 132, and (b) a shape
grown to whole waves (M = 4224: 33 row tiles, so 33 x 16 = 528 = 4 x 132 tiles at N = 4096)
closes part of the gap: its rate rises against the shape it grew from, more than cuBLAS's.
Per shape (bf16, row-major and nn.Linear layouts): torch.mm, the plugin's heuristic config on
every SM, and the same config on 128 programs, in rounds (_timing.py), do_bench medians with
L2 flushed; each output checked against torch.mm first.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.testing
from _timing import median, rounds, sm_clock, write_rows

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops import matmul as impl

SHAPES = [
    (4096, 4096, 4096), (4224, 4096, 4096), (8192, 4096, 4096), (8448, 4096, 4096),
    (4096, 14336, 4096), (4224, 14336, 4096), (4096, 28672, 4096), (4224, 28672, 4096),
    (1024, 1024, 65536),
]  # fmt: skip


def operands(M, N, K, layout):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    if layout == "linear":
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    else:
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    return a, b


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--programs", type=int, default=128, help="the second plugin arm's program count")
    args = p.parse_args()
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    print("clock at start:", sm_clock(), flush=True)
    sms = impl._num_sms(torch.device("cuda", 0))
    rows = []
    for M, N, K in SHAPES:
        for layout in ("row", "linear"):
            a, b = operands(M, N, K, layout)
            ref = torch.mm(a, b)
            cfg = impl._launch(a, b, torch.empty_like(ref)).cfg  # the heuristic's pick on every SM

            def plugin(programs):
                out = torch.empty_like(ref)

                def run():
                    impl._NUM_SMS[0] = programs
                    impl._PLANS.clear()
                    impl._FAST_PLANS.clear()
                    try:
                        impl._launch(a, b, out, config=cfg)
                        err = float((out.float() - ref.float()).norm() / ref.float().norm())
                        assert err < 1e-2, (programs, err)
                        return 1e3 * triton.testing.do_bench(lambda: impl._launch(a, b, out, config=cfg),
                                                             return_mode="median")  # fmt: skip
                    finally:
                        impl._NUM_SMS[0] = sms
                        impl._PLANS.clear()
                        impl._FAST_PLANS.clear()

                return run

            fns = {
                "torch.mm": lambda: 1e3 * triton.testing.do_bench(lambda: torch.mm(a, b), return_mode="median"),
                f"plugin {sms}": plugin(sms),
                f"plugin {args.programs}": plugin(args.programs),
            }
            times = rounds(fns, lambda f: f(), args.rounds)
            tiles = triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n) * cfg.split_k
            flops = 2 * M * N * K
            row = {"shape": [M, N, K], "layout": layout, "config": cfg.short(), "work_items": tiles,
                   "waves": tiles / sms, "us": times}  # fmt: skip
            rows.append(row)
            rate = "  ".join(f"{k} {flops / median(v) / 1e6:6.1f}" for k, v in times.items())
            ratio = median([t / p for t, p in zip(times["torch.mm"], times[f"plugin {sms}"])])
            same = median([x / y for x, y in zip(times[f"plugin {args.programs}"], times[f"plugin {sms}"])])
            print(f"{M}x{N}x{K} {layout:6s} [{cfg.short()}] {tiles} items = {tiles / sms:.2f} waves | TFLOP/s: {rate}"
                  f" | mm/plugin {ratio:.3f}  plugin{args.programs}/plugin{sms} time {same:.3f}", flush=True)  # fmt: skip
    print("clock at end:", sm_clock(), flush=True)
    if args.out:
        write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
