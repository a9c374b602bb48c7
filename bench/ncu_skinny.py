"""Hardware counters of a decode matmul: the plugin's kernel against cuBLAS's, under Nsight Compute.

    ncu --clock-control none --cache-control none --profile-from-start off --csv \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,... python bench/ncu_skinny.py 64x4096x4096 linear

Runs each kernel a few times first (compiles, plans, warms L2 as graph replays do), then,
between cudaProfilerStart/Stop, the plugin op and torch.mm twice each, so the report holds
four kernels: which of the two reads more bytes from DRAM, hits L2 more, keeps more of the
SMs and the memory system busy. ``--cache-control none`` keeps L2 as the previous kernel left
it, as in a CUDA-graph replay loop (do_bench_cudagraph); ncu's default flushes it.
"""

from __future__ import annotations

import sys

import torch
from _timing import make_operands

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops import matmul as impl


def main(argv):
    shape, layout = argv[0], argv[1] if len(argv) > 1 else "linear"
    M, N, K = map(int, shape.split("x"))
    a, b = make_operands(M, N, K, torch.bfloat16, layout)
    for _ in range(5):
        out = torch.ops.inductor_mm_plugin.mm(a, b)
        ref = torch.mm(a, b)
    torch.cuda.synchronize()
    assert (out.float() - ref.float()).norm() / ref.float().norm() < 1e-2
    print(f"{M}x{N}x{K} {layout}: plugin config {impl.chosen_config(a, b).short()}", flush=True)
    torch.cuda.profiler.start()
    for _ in range(2):
        torch.ops.inductor_mm_plugin.mm(a, b)
        torch.mm(a, b)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
