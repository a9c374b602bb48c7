"""Where a fused-epilogue block's time goes: one Linear(+activation) block, arm by arm.

    python bench/epilogue_breakdown.py                 # Linear+GELU 8192 x 4096 -> 14336, and two smaller
    python bench/epilogue_breakdown.py --code DIR      # also write the plugin's generated kernels

A diagnostic for the fused-epilogue suite (bench_epilogue.py), not one of its targets. Arms,
each timed under CUDA graphs (``do_bench_cudagraph`` median) on the same inputs:

* eager cuBLAS: ``F.linear`` alone, then ``F.linear`` + the activation (two kernels);
* the plugin's eager op ``inductor_mm_plugin::addmm`` (its TMA kernel, bias fused);
* stock ``torch.compile`` of the block;
* the plugin backend on ``x @ w.T`` (the template, no epilogue), ``F.linear`` (bias
  epilogue) and the whole block (bias + activation), with the template's own config and
  with each config of ``--configs`` forced.

Outputs are checked against eager before timing. Prints one line per arm.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys

import torch
import torch.nn.functional as F
import triton.testing

import inductor_mm_plugin
from inductor_mm_plugin.inductor import template
from inductor_mm_plugin.kernels.configs import MatmulConfig

DT = torch.bfloat16
BLOCKS = {  # name: (M, d, f, activation)
    "gelu-8192x4096x14336": (8192, 4096, 14336, F.gelu),
    "gelu-8192x1024x4096": (8192, 1024, 4096, F.gelu),
    "none-8192x1024x1024": (8192, 1024, 1024, None),
}
CONFIGS = {
    "128x256x64w8s3": MatmulConfig("tma", 128, 256, 64, 8, 8, 3, flatten=True),
    "128x256x64w8s3-noflat": MatmulConfig("tma", 128, 256, 64, 8, 8, 3, flatten=False),
    "128x128x64w8s4": MatmulConfig("tma", 128, 128, 64, 8, 8, 4, flatten=True),
    "128x128x64w4s4": MatmulConfig("tma", 128, 128, 64, 8, 4, 4, flatten=True),
    "256x128x64w8s3": MatmulConfig("tma", 256, 128, 64, 8, 8, 3, flatten=True),
}


# The TMA template with Inductor's TMA store of the output (``store_output(...,
# block_indexing=True)`` on the tile's offsets, ``tma_store=True``), as Inductor's own
# persistent TMA template stores when ``triton.enable_template_tma_store`` is set.
_POINTER_STORE_TAIL = template.TMA_SOURCE[template.TMA_SOURCE.index("        idx_m = (pid_m"):]
TMA_STORE_SOURCE = template.TMA_SOURCE.replace(_POINTER_STORE_TAIL, """\
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        {{store_output(("off_m", "off_n"), "acc", indent_width=8, val_shape=("BLOCK_M", "BLOCK_N"), block_indexing=True)}}
""")


class _TmaStore:
    def __init__(self, wrapped):
        self.wrapped = wrapped

    def maybe_append_choice(self, choices, **kwargs):
        return self.wrapped.maybe_append_choice(choices, tma_store=True, **kwargs)


@contextlib.contextmanager
def tma_store():
    saved = template.plugin_tma_template
    t = template._template("inductor_mm_plugin_mm_tma_store_exp", template.compat.persistent_mm_grid, TMA_STORE_SOURCE)
    template.plugin_tma_template = lambda: _TmaStore(t)
    try:
        yield
    finally:
        template.plugin_tma_template = saved


@contextlib.contextmanager
def forced_config(cfg):
    saved = template.tma_configs
    template.tma_configs = lambda *a, **k: [cfg]
    try:
        yield
    finally:
        template.tma_configs = saved


def bench(fn):
    return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")


def compiled_ms(fn, x, ref, code_to=None, **kw):
    torch._dynamo.reset()
    c = torch.compile(fn, **kw)
    out, codes = torch._inductor.utils.run_and_get_code(c, x)
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    assert err < 3e-2, f"relative error {err:.2e}"
    if code_to is not None:
        code_to.write_text("\n\n".join(codes))
    return bench(lambda: c(x))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", nargs="+", default=list(BLOCKS), choices=list(BLOCKS))
    p.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--code", default=None, help="directory for the plugin's generated code of each block")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("epilogue_breakdown.py needs a CUDA device")
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
          f"plugin {inductor_mm_plugin.__version__}")  # fmt: skip
    plugin = dict(backend="inductor_mm_plugin")
    for name in args.blocks:
        m, d, f, act = BLOCKS[name]
        torch.manual_seed(0)
        x = torch.randn(m, d, device="cuda", dtype=DT)
        w = torch.randn(f, d, device="cuda", dtype=DT) * d**-0.5
        b = torch.randn(f, device="cuda", dtype=DT)
        act = act or (lambda y: y)
        mm = lambda x: x @ w.T  # noqa: E731
        linear = lambda x: F.linear(x, w, b)  # noqa: E731
        block = lambda x: act(F.linear(x, w, b))  # noqa: E731
        refs = {fn: fn(x) for fn in (mm, linear, block)}
        flops = 2 * m * d * f
        rows = [
            ("eager cuBLAS mm", bench(lambda: mm(x))),
            ("eager cuBLAS linear", bench(lambda: linear(x))),
            ("eager cuBLAS linear+act", bench(lambda: block(x))),
            ("plugin eager mm op", bench(lambda: torch.ops.inductor_mm_plugin.mm(x, w.T))),
            ("plugin eager addmm op", bench(lambda: torch.ops.inductor_mm_plugin.addmm(b, x, w.T))),
            ("stock compile block", compiled_ms(block, x, refs[block])),
        ]
        code = pathlib.Path(args.code) if args.code else None
        if code:
            code.mkdir(parents=True, exist_ok=True)
        for label, fn in (("mm", mm), ("linear", linear), ("block", block)):
            to = code / f"{name}-{label}.py" if code and label == "block" else None
            rows.append((f"plugin compile {label} (own config)", compiled_ms(fn, x, refs[fn], to, **plugin)))
        with tma_store():
            for label, fn in (("mm", mm), ("block", block)):
                to = code / f"{name}-{label}-tma-store.py" if code and label == "block" else None
                try:
                    rows.append((f"plugin compile {label} TMA store", compiled_ms(fn, x, refs[fn], to, **plugin)))
                except Exception as e:
                    print(f"  {name} {label} TMA store: {type(e).__name__}: {str(e)[:300]}")
        for cname in args.configs:
            with forced_config(CONFIGS[cname]):
                for label, fn in (("mm", mm), ("block", block)):
                    try:
                        rows.append((f"plugin compile {label} {cname}", compiled_ms(fn, x, refs[fn], **plugin)))
                    except Exception as e:  # a config that does not compile: report, go on
                        print(f"  {name} {label} {cname}: {type(e).__name__}: {str(e)[:200]}")
        print(f"== {name}: M={m} K={d} N={f}")
        for label, ms in rows:
            print(f"  {label:42s} {ms * 1e3:9.1f} us  {flops / ms / 1e9:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
