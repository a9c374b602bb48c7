"""Interleaved A/B of the SwiGLU template's configs against stock torch.compile.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python bench/swiglu_configs.py --out $OUT

``silu(x @ w_gate.T) * (x @ w_up.T)`` (bf16, nn.Linear weights) compiled by stock Inductor
(cuBLAS twice, then one pointwise kernel) and by the plugin backend with the fused
``mm_swiglu`` template under each forced config (``fuse_swiglu="auto"``,
``template.SWIGLU_CONFIG`` patched; the caches must be off, they do not see the patch), and
by the plugin backend unfused (``fuse_swiglu=False``: the two matmuls as two sites). Each arm is checked against eager, then all
are timed under CUDA graphs in rounds, the order reversed each round (``_timing.py``); the
ratio stock / arm is taken within a round. Writes ``<out>/swiglu-configs.json``.

Each arm compiles its own copy of the function's code object: Dynamo keeps its cache on the
code object, and arms sharing one (with ``torch._dynamo.reset()`` between compiles, as a
first version of this script did) recompiled or fell back to eager while timed, every
config arm timing the same thing. A recompile while timed is an error here.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import types

import torch
import torch.nn.functional as F
from _timing import frames_compiled, median, ratios, rounds, sm_clock

from inductor_mm_plugin.inductor import template
from inductor_mm_plugin.kernels.configs import MatmulConfig

T = MatmulConfig
CONFIGS = {
    "128x128x64 s3 flat": T("tma", 128, 128, 64, 8, 8, 3, flatten=True),
    "128x128x64 s3": T("tma", 128, 128, 64, 8, 8, 3),
    "128x128x32 s4 flat": T("tma", 128, 128, 32, 8, 8, 4, flatten=True),
    "128x128x32 s4": T("tma", 128, 128, 32, 8, 8, 4),
    "128x128x32 s6": T("tma", 128, 128, 32, 8, 8, 6),
    "128x64x64 w4 s4 flat": T("tma", 128, 64, 64, 8, 4, 4, flatten=True),
    "128x64x64 w4 s4": T("tma", 128, 64, 64, 8, 4, 4),
    "128x64x64 w8 s4 flat": T("tma", 128, 64, 64, 8, 8, 4, flatten=True),
    "128x64x64 w8 s4": T("tma", 128, 64, 64, 8, 8, 4),
    "256x64x64 w8 s3 flat": T("tma", 256, 64, 64, 8, 8, 3, flatten=True),
    "256x64x64 w8 s3": T("tma", 256, 64, 64, 8, 8, 3),
    "128x128x64 s3 g16": T("tma", 128, 128, 64, 16, 8, 3),
}
SHAPES = {"2048x1024x4096": (2048, 1024, 4096), "8192x4096x14336": (8192, 4096, 14336),
          "2048x4096x14336": (2048, 4096, 14336)}  # M, d, f


def _own_code(fn, name: str):
    """``fn`` with a code object of its own (its own Dynamo cache)."""
    code = fn.__code__.replace(co_name=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


def main():
    import triton
    import triton.testing

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/swiglu"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("swiglu_configs.py needs a CUDA device")
    if os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") != "1":
        sys.exit("run with TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 (see the docstring)")
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "rounds": args.rounds, "rows": []}  # fmt: skip
    saved = template.SWIGLU_CONFIG
    for m, d, f in (SHAPES[s] for s in args.shapes):
        x = torch.randn(m, d, device="cuda", dtype=torch.bfloat16)
        w_gate, w_up = (torch.randn(f, d, device="cuda", dtype=torch.bfloat16) * d**-0.5 for _ in range(2))

        def fn(x):
            return F.silu(x @ w_gate.T) * (x @ w_up.T)

        ref = fn(x).float()
        arms, errors = {}, {}
        torch._dynamo.reset()
        for name in ["stock", "unfused", *args.configs]:
            arm_fn = _own_code(fn, "swiglu_" + "".join(c if c.isalnum() else "_" for c in name))
            try:
                if name == "stock":
                    compiled = torch.compile(arm_fn)
                elif name == "unfused":
                    compiled = torch.compile(arm_fn, backend="inductor_mm_plugin", options={"fuse_swiglu": False})
                else:
                    template.SWIGLU_CONFIG = CONFIGS[name]
                    compiled = torch.compile(arm_fn, backend="inductor_mm_plugin", options={"fuse_swiglu": "auto"})
                err = ((compiled(x).float() - ref).abs().max() / ref.abs().max()).item()
                if not err < 3e-2:
                    errors[name] = f"wrong: relative error {err:.3g}"
                    continue
                arms[name] = lambda c=compiled: c(x)
            except Exception as e:  # noqa: BLE001  (a config that does not compile: report, go on)
                errors[name] = f"{type(e).__name__}: {str(e)[-300:]}"
            finally:
                template.SWIGLU_CONFIG = saved
        clock, frames = sm_clock(), frames_compiled()
        times = rounds(arms, lambda g: triton.testing.do_bench_cudagraph(g, rep=100, return_mode="median"), args.rounds)
        if frames_compiled() != frames:
            raise RuntimeError(f"M={m} d={d} f={f}: an arm recompiled while timed; the rounds would time compiles")
        row = {"shape": [m, d, f], "times_ms": times, "errors": errors, "clock_before": clock, "clock_after": sm_clock(),
               "ratios": {n: ratios(times, "stock", n) for n in arms if n != "stock"}}  # fmt: skip
        result["rows"].append(row)
        print(f"M={m} d={d} f={f}: stock {median(times['stock']) * 1e3:.1f} us [{row['clock_before']} -> "
              f"{row['clock_after']}]", flush=True)  # fmt: skip
        for n, r in row["ratios"].items():
            print(f"    {n:22s} {median(times[n]) * 1e3:9.1f} us  stock/arm {median(r):.3f} ({min(r):.3f}-{max(r):.3f})",
                  flush=True)  # fmt: skip
        for n, e in errors.items():
            print(f"    {n:22s} {e}", flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "swiglu-configs.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
