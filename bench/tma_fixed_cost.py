"""Where a TMA matmul's fixed cost per launch goes: device-side against host-side descriptors.

    python bench/tma_fixed_cost.py [--out FILE]

Small and skinny matmuls run a few microseconds. On the H200 the plugin's TMA kernel with
device-side descriptors trailed cuBLAS there by a near-constant 2.5-4 us even under CUDA
graphs (768^3: 7.9 against 4.1 us; 16x4096x4096: 14.2 against 9.4 us): a fixed cost per
launch rather than bandwidth. This times, under CUDA graphs (``do_bench_cudagraph``,
median), next to torch.mm and the plugin op in the same run:

* the descriptors: a small stand-alone kernel (the plugin's tile loop, no split-K) with its
  three TMA descriptors built on the device (``tl.make_tensor_descriptor``: a 128-byte
  tensormap written to global memory and a proxy fence per program) or passed from the host
  (``TensorDescriptor``, a kernel parameter), persistent and one program per tile. The
  measurement is why the plugin's kernel now takes host-side descriptors
  (bench/results/2026-11-29-NVIDIA_H200-tma-fixed-cost.txt has both runs);
* the programmatic dependent launch (PDL) of the plugin's kernels, off by default: the op
  against the same op launched with it (mode 1; bench/ab_pdl.py times every mode in rounds);
* split-K's counter memset (``torch.zeros`` per launch, one extra node in the graph): the
  plugin op, which reuses its counters (ops/split_k.py), against the same op with a fresh
  zeroed buffer per launch.

Every kernel's output is checked against torch.mm before it is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch
import triton
import triton.language as tl
import triton.testing
from _timing import write_rows
from triton.tools.tensor_descriptor import TensorDescriptor

import inductor_mm_plugin  # noqa: F401
from inductor_mm_plugin.ops import matmul as impl
from inductor_mm_plugin.ops import split_k


@triton.jit
def _probe_kernel(
    a, b, c, M, N, K,
    HOST: tl.constexpr, PERSISTENT: tl.constexpr, B_KMAJOR: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NUM_SMS: tl.constexpr,
):  # fmt: skip
    if HOST:
        a_desc = a
        b_desc = b
        c_desc = c
    else:
        a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        if B_KMAJOR:
            b_desc = tl.make_tensor_descriptor(b, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        else:
            b_desc = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
        c_desc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    num_m = tl.cdiv(M, BM)
    tiles = num_m * tl.cdiv(N, BN)
    step = NUM_SMS if PERSISTENT else tiles
    for tile in tl.range(tl.program_id(0), tiles, step):
        off_m = (tile % num_m) * BM
        off_n = (tile // num_m) * BN
        acc = probe_tile(a_desc, b_desc, off_m, off_n, K, B_KMAJOR, BM, BN, BK)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def probe_tile(a_desc, b_desc, off_m, off_n, K, B_KMAJOR: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):  # fmt: skip
    """One output tile's K loop, nothing else (shared with bench/probe_ab.py's variants)."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = a_desc.load([off_m, k])
        if B_KMAJOR:
            y = b_desc.load([off_n, k]).T
        else:
            y = b_desc.load([k, off_n])
        acc = tl.dot(x, y, acc)
    return acc


@triton.jit
def _empty_kernel(x):
    pass


def _alloc(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def host_descriptors(a, b_storage, b_kmajor, c, cfg) -> tuple:
    """The probe's three host-side descriptors, blocks the size of ``cfg``'s tiles."""
    (M, K), N = a.shape, c.shape[1]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    return (
        TensorDescriptor(a, [M, K], [K, 1], [bm, bk]),
        TensorDescriptor(b_storage, [N, K] if b_kmajor else [K, N], [K, 1] if b_kmajor else [N, 1],
                         [bn, bk] if b_kmajor else [bk, bn]),
        TensorDescriptor(c, [M, N], [N, 1], [bm, bn]),
    )  # fmt: skip


def persistent_grid(M, N, cfg) -> tuple[int, int]:
    """(programs, SM count): one program per tile, at most one per SM."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return min(sms, triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n)), sms


def probe_fn(a, b_storage, b_kmajor, c, cfg, host, persistent):
    M, K = a.shape
    N = c.shape[1]
    programs, sms = persistent_grid(M, N, cfg)
    grid = (programs if persistent else triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n),)
    args = host_descriptors(a, b_storage, b_kmajor, c, cfg) if host else (a, b_storage, c)

    def run():
        return _probe_kernel[grid](*args, M, N, K, host, persistent, b_kmajor, cfg.block_m, cfg.block_n,
                                   cfg.block_k, sms, num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # fmt: skip

    return run


def _dump(directory, name, compiled):
    os.makedirs(directory, exist_ok=True)
    for ext in ("ttgir", "ptx"):
        with open(os.path.join(directory, f"{name}.{ext}"), "w") as f:
            f.write(compiled.asm[ext])


def cg_us(fn):
    return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")


SHAPES = [
    (1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096),
    (16, 14336, 4096), (16, 4096, 14336), (768, 768, 768), (1000, 1000, 1000), (4096, 4096, 4096),
]  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="JSON file for the rows")
    ap.add_argument("--shapes", nargs="+", help="MxNxK shapes (default: all of SHAPES)")
    ap.add_argument("--tile", help="BMxBNxBK for the probe and the plugin kernel beside it (default: the heuristic's)")
    ap.add_argument("--stages", type=int, help="num_stages for the probe and the plugin kernel beside it")
    ap.add_argument("--dump", help="directory for both kernels' TTGIR and PTX (host-descriptor persistent probe)")
    args = ap.parse_args()
    triton.set_allocator(_alloc)
    torch.manual_seed(0)
    dtype = torch.bfloat16
    props = torch.cuda.get_device_properties(0)
    head = f"{props.name}, torch {torch.__version__}, triton {triton.__version__}"
    print(head, flush=True)
    x = torch.empty(1, device="cuda")
    print(f"empty Triton kernel, 132 programs: {cg_us(lambda: _empty_kernel[(132,)](x)):.2f} us", flush=True)
    rows = []
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes] if args.shapes else SHAPES
    for M, N, K in shapes:
        for layout in ("linear", "row"):
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b_storage = torch.randn(N, K, device="cuda", dtype=dtype) if layout == "linear" else \
                torch.randn(K, N, device="cuda", dtype=dtype)  # fmt: skip
            b = b_storage.t() if layout == "linear" else b_storage
            ref = torch.mm(a.double(), b.double())
            torch.ops.inductor_mm_plugin.mm(a, b)  # plans the call: chosen_config reads the plan
            cfg = impl.chosen_config(a, b)
            row = {"shape": [M, N, K], "layout": layout, "config": cfg.short()}
            row["torch.mm"] = cg_us(lambda: torch.mm(a, b))
            row["plugin"] = cg_us(lambda: torch.ops.inductor_mm_plugin.mm(a, b))
            # The same op launched with PDL (kernels/matmul.py, _dependent_launch; off by default).
            with impl.pdl_mode(1):
                row["plugin, PDL 1"] = cg_us(lambda: torch.ops.inductor_mm_plugin.mm(a, b))
            if cfg.split_k > 1:
                # What the reused counters save: the plugin with a zeroed buffer per launch,
                # as it ran before ops/split_k.py.
                orig = split_k.counters
                split_k.counters = lambda device, tiles, stream=0: split_k.fresh_counters(device, tiles)
                try:
                    out = torch.ops.inductor_mm_plugin.mm(a, b)
                    assert (out.double() - ref).norm() / ref.norm() < 1e-2
                    row["plugin, torch.zeros counters"] = cg_us(lambda: torch.ops.inductor_mm_plugin.mm(a, b))
                finally:
                    split_k.counters = orig
            pcfg = dataclasses.replace(cfg, split_k=1, flatten=False) if cfg.kernel == "tma" else cfg
            if args.tile:
                bm, bn, bk = map(int, args.tile.split("x"))
                pcfg = dataclasses.replace(pcfg, block_m=bm, block_n=bn, block_k=bk)
            if args.stages:
                pcfg = dataclasses.replace(pcfg, num_stages=args.stages)
            row["probe config"] = pcfg.short()
            if pcfg.kernel == "tma":
                # The plugin's kernel with the probe's config: what the kernel's extra
                # generality (grouped order, batch and split-K arithmetic, epilogue) costs.
                out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                plan = impl._launch(a, b, out, config=pcfg)
                if args.dump:
                    _dump(args.dump, f"{M}x{N}x{K}-{layout}-plugin", plan.compiled)
                assert (out.double() - ref).norm() / ref.norm() < 1e-2
                row["plugin kernel, probe config"] = cg_us(lambda: impl._launch(a, b, out, config=pcfg))
                # The same kernel through Triton's own launcher (descriptors encoded per call):
                # tells the kernel's cost from the direct launch path's.
                kargs = plan.args(a, b, out, None, 1.0, 1.0)

                def jit_launch():
                    plan.kernel[plan.grid](*kargs, num_warps=pcfg.num_warps, num_stages=pcfg.num_stages)

                row["plugin kernel, probe config, Triton launch"] = cg_us(jit_launch)
                row["probe config, again"] = cg_us(lambda: impl._launch(a, b, out, config=pcfg))
            for host in (False, True):
                for persistent in (False, True):
                    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                    name = f"probe {'host' if host else 'device'} desc, {'persistent' if persistent else 'grid=tiles'}"
                    try:
                        fn = probe_fn(a, b_storage, layout == "linear", c, pcfg, host, persistent)
                        compiled = fn()
                        if args.dump and host and persistent:
                            _dump(args.dump, f"{M}x{N}x{K}-{layout}-probe", compiled)
                        torch.cuda.synchronize()
                        err = ((c.double() - ref).norm() / ref.norm()).item()
                        if not err < 1e-2:
                            row[name] = f"wrong: rel err {err:.2e}"
                            continue
                        row[name] = cg_us(fn)
                    except Exception as e:  # noqa: BLE001 - report and go on
                        row[name] = f"error: {type(e).__name__}: {str(e)[:200]}"
            rows.append(row)
            cells = "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                              if k not in ("shape", "layout", "config", "probe config"))  # fmt: skip
            print(f"{M}x{N}x{K} {layout:6s} [{row['config']}; probes {row['probe config']}] us: {cells}", flush=True)
    if args.out:
        write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
