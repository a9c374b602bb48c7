"""Host (CPU) cost per call of the plugin's op against torch.mm, and what do_bench reports,
before and after Dynamo has compiled something in the process.

    python bench/host_overhead.py

Per call: a loop of 2000 calls without synchronisation, wall time / 2000 (the CPU-bound
cost); do_bench median (L2 flushed between reps: a ~60 us memset per rep, which hides host
cost below that); do_bench_cudagraph median (the kernel alone). Small shapes, where host
cost matters. Small matmuls take a few microseconds on the GPU, so per-call Python decides
what an eager caller sees.
"""

from __future__ import annotations

import time

import torch
import triton.testing

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops import matmul as impl


def per_call_us(fn, n=2000):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def probe(tag):
    for M in (768,):
        a = torch.randn(M, M, device="cuda", dtype=torch.bfloat16)
        for layout, b in (("row", torch.randn(M, M, device="cuda", dtype=torch.bfloat16)),
                          ("linear", torch.randn(M, M, device="cuda", dtype=torch.bfloat16).t())):  # fmt: skip
            fns = {
                "torch.mm": lambda: torch.mm(a, b),
                "ops.mm": lambda: torch.ops.inductor_mm_plugin.mm(a, b),
                "mm_launch": lambda: impl.mm_launch(a, b),
            }
            for name, fn in fns.items():
                host = per_call_us(fn)
                bench = 1e3 * triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")
                graph = 1e3 * triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")
                print(f"{tag:14s} {M}^3 {layout:6s} {name:10s} host {host:6.1f} us/call  do_bench {bench:6.1f} us  "
                      f"cudagraph {graph:6.1f} us", flush=True)  # fmt: skip


def breakdown():
    """Host cost of the steps of a repeated mm call (768^3 bf16, row-major B), each alone."""
    M = 768
    a, b = (torch.randn(M, M, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = impl.mm_launch(a, b)
    impl.mm_launch(a, b)
    key = impl._signature(a, b, None, None)
    plan = impl._FAST_PLANS[key]
    c = plan.compiled
    stream = torch._C._cuda_getCurrentRawStream(0)
    descs = plan._rebased_descriptors(a, b, out)
    args = (*descs, out.data_ptr(), out.data_ptr(), out.data_ptr(), out.data_ptr(), *plan.mid, 1.0, 1.0,
            *plan.consts)  # fmt: skip
    steps = {
        "signature": lambda: impl._signature(a, b, None, None),
        "new_empty": lambda: a.new_empty((M, M)),
        "rebase 3 descriptors": lambda: plan._rebased_descriptors(a, b, out),
        "launcher call": lambda: c.run(plan.grid[0], 1, 1, stream, c.function, c.packed_metadata, None, None, None,
                                       *args),
        "plan.launch_direct": lambda: plan.launch_direct(a, b, out, None, 1.0, 1.0),
        "mm_launch": lambda: impl.mm_launch(a, b),
        "ops.mm": lambda: torch.ops.inductor_mm_plugin.mm(a, b),
        "torch.mm": lambda: torch.mm(a, b),
    }
    # A batched call (attention's p @ v shape at sequence 1024): the same fast path.
    p, v = torch.randn(8, 256, 1024, device="cuda", dtype=torch.bfloat16), torch.randn(8, 1024, 128, device="cuda",
                                                                                       dtype=torch.bfloat16)
    steps["ops.bmm 8x256x128x1024"] = lambda: torch.ops.inductor_mm_plugin.bmm(p, v)
    steps["torch.bmm 8x256x128x1024"] = lambda: torch.bmm(p, v)
    steps.update(_launcher_steps(c, plan, stream, args))
    for name, fn in steps.items():
        print(f"breakdown {name:22s} {per_call_us(fn):6.2f} us/call", flush=True)


def _launcher_steps(c, plan, stream, args):
    """Inside Triton's launcher (triton 3.6 backends/nvidia/driver.py): the tensormap
    encoding of each descriptor, the Python argument expansion, the C launch alone (found
    the way the plugin's raw launch finds it, ``_raw_launcher``)."""
    ndesc = 3 if plan.c_tma else 2
    raw = impl._raw_launcher(c, ndesc)
    if not raw:
        print("breakdown launcher internals unavailable: not triton 3.6's launcher")
        return {}
    launcher, metas, (cooperative, pdl) = raw
    base = (plan.grid[0], 1, 1, stream, c.function, cooperative, pdl, None, None, c.packed_metadata, None, None, None)
    descs, rest = args[:ndesc], args[ndesc:]

    def encode():
        return [x for d, m in zip(descs, metas) for x in impl._tensormap_args(d, m)]

    expanded = encode()
    print(f"breakdown launcher: {ndesc} descriptors, meta {metas}, scratch {c.run.global_scratch_size}")
    return {
        f"encode {ndesc} tensormaps": encode,
        "inner (expand+launch)": lambda: c.run.launch(*base, *args),
        "raw C launch, cached": lambda: launcher(*base, *expanded, *rest),
    }


def main():
    breakdown()
    probe("fresh process")
    torch._dynamo.reset()
    f = torch.compile(lambda x, y: x @ y)
    f(torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda"))
    probe("after compile")


if __name__ == "__main__":
    main()
