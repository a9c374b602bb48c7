"""Where a fused-epilogue block's time goes: one Linear(+activation) block, arm by arm.

    python bench/epilogue_breakdown.py                 # Linear+GELU 8192 x 4096 -> 14336, and two smaller
    python bench/epilogue_breakdown.py --code DIR      # also write the plugin's generated kernels

Run it with ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``: the forced variants patch the template,
which Inductor's graph caches do not see (they would return the first variant's code).

A diagnostic for the fused-epilogue suite (bench_epilogue.py), not one of its targets. Arms,
each timed under CUDA graphs (``do_bench_cudagraph`` median) on the same inputs:

* eager cuBLAS: ``x @ w.T``, ``F.linear``, ``F.linear`` + the activation (two kernels);
* the plugin's eager ops ``inductor_mm_plugin::mm`` / ``::addmm`` (the TMA kernel);
* stock ``torch.compile`` of the block;
* the plugin backend's template (``--variants``: ``heuristic``, the backend's own pick, or a
  forced config, programs per SM, TMA store or not) on four arms (``--arms``), each with a pointwise user so the routed matmul takes the template:
  ``(x @ w.T) * 2`` (the template and its store), ``linear(x) * 2`` (+ the bias),
  ``act(x @ w.T)`` (+ the activation) and ``act(linear(x))`` (both), with the template
  kernel's registers, spills and shared memory.

``--swiglu M D F`` profiles a compiled SwiGLU MLP kernel by kernel, stock and plugin.

Outputs are checked against eager before timing. Prints one line per arm.
"""

from __future__ import annotations

import argparse
import contextlib
import os
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
    # Issue 6's smallest blocks (~10-40 us): the TMA template's device-side descriptors cost
    # 3-4.5 us per launch there; the pointer template ("ptr-" variants) makes none.
    "none-2048x1024x1024": (2048, 1024, 1024, None),
    "gelu-2048x1024x4096": (2048, 1024, 4096, F.gelu),
    "none-2048x2048x2048": (2048, 2048, 2048, None),
    # The rest of the suite's matmuls with K <= 2048, and one with K = 4096 (a down projection).
    "gelu-2048x2048x8192": (2048, 2048, 8192, F.gelu),
    "none-8192x2048x2048": (8192, 2048, 2048, None),
    "none-2048x4096x1024": (2048, 4096, 1024, None),
}
# Forced template configs: (config, programs per SM, TMA store). Two programs per SM overlap
# one program's epilogue with the other's main loop (a software ping-pong without warp
# specialization), if both fit an SM's shared memory and registers.
VARIANTS = {
    "heuristic": None,  # what the plugin backend picks by itself
    "ptr-heuristic": (None, 1, False),  # the pointer template with its own heuristic pick
    "128x256x64w8s3": (MatmulConfig("tma", 128, 256, 64, 8, 8, 3, flatten=True), 1, False),
    "128x256x64w8s3-sub": (MatmulConfig("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, flatten=True), 1, False),
    "256x128x64w8s3": (MatmulConfig("tma", 256, 128, 64, 8, 8, 3, flatten=True), 1, False),
    "256x128x64w8s3-sub": (MatmulConfig("tma", 256, 128, 64, 8, 8, 3, epilogue_subtile=True, flatten=True), 1, False),
    "128x128x64w8s4": (MatmulConfig("tma", 128, 128, 64, 8, 8, 4, flatten=True), 1, False),
    "128x128x64w8s4-sub": (MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True), 1, False),
    "128x128x64w4s4": (MatmulConfig("tma", 128, 128, 64, 8, 4, 4, flatten=True), 1, False),
    "128x128x64w4s3-x2": (MatmulConfig("tma", 128, 128, 64, 8, 4, 3, flatten=True), 2, False),
    # Two programs per SM with shallower pipelines (2 x 64 KiB of stages) and 4 or 8 warps:
    # at K <= 2048 a GELU epilogue is a larger share of each tile's time than at K = 4096.
    "128x128x64w4s2-x2": (MatmulConfig("tma", 128, 128, 64, 8, 4, 2, flatten=True), 2, False),
    "128x128x64w8s2-x2": (MatmulConfig("tma", 128, 128, 64, 8, 8, 2, flatten=True), 2, False),
    "128x128x64w4s3-unflat-x2": (MatmulConfig("tma", 128, 128, 64, 8, 4, 3), 2, False),
    "128x64x64w4s4-x2": (MatmulConfig("tma", 128, 64, 64, 8, 4, 4, flatten=True), 2, False),
    "128x256x64w8s3-tmastore": (MatmulConfig("tma", 128, 256, 64, 8, 8, 3, flatten=True), 1, True),
    "128x64x64w4s4": (MatmulConfig("tma", 128, 64, 64, 8, 4, 4, flatten=True), 1, False),
    "ptr-64x128x64w4s4": (MatmulConfig("ptr", 64, 128, 64, 8, 4, 4), 1, False),
    "ptr-128x128x64w8s4": (MatmulConfig("ptr", 128, 128, 64, 8, 8, 4), 1, False),
    "ptr-128x64x64w4s4": (MatmulConfig("ptr", 128, 64, 64, 8, 4, 4), 1, False),
    "ptr-128x128x64w4s3": (MatmulConfig("ptr", 128, 128, 64, 8, 4, 3), 1, False),  # 96 KiB: two per SM
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


ARMS = ("(x @ w.T) * 2", "linear(x) * 2", "act(x @ w.T)", "act(linear(x))")


class _TmaStore:
    def __init__(self, wrapped):
        self.wrapped = wrapped

    def maybe_append_choice(self, choices, **kwargs):
        return self.wrapped.maybe_append_choice(choices, tma_store=True, **kwargs)


@contextlib.contextmanager
def forced(cfg, per_sm, store):
    """The TMA template with only ``cfg``, ``per_sm`` programs per SM, TMA store or not; or,
    for a "ptr" config, the pointer template with only ``cfg``; for None, the pointer
    template with its own heuristic."""
    saved = template.tma_configs, template._tma_kwargs, template.plugin_tma_template, template.heuristic_config
    template.tma_configs = lambda *a, **k: [] if cfg is None or cfg.kernel == "ptr" else [cfg]
    if cfg is not None and cfg.kernel == "ptr":
        template.heuristic_config = lambda *a, **k: cfg
    template._tma_kwargs = lambda c, ak, bk, num_sms, *rest: saved[1](c, ak, bk, num_sms * per_sm, *rest)
    if store:
        t = template._template("inductor_mm_plugin_mm_tma_store_exp", template.compat.persistent_mm_grid,
                               TMA_STORE_SOURCE)  # fmt: skip
        template.plugin_tma_template = lambda: _TmaStore(t)
    try:
        yield
    finally:
        (template.tma_configs, template._tma_kwargs, template.plugin_tma_template,
         template.heuristic_config) = saved


_loaded = []  # (name, registers, spills, shared bytes) of each Triton kernel loaded


def _record_loaded_kernels():
    """Record registers, spills and shared memory of every kernel Triton loads (needs
    TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER=0: Inductor's static launcher loads cubins itself)."""
    from triton.compiler.compiler import CompiledKernel

    init = CompiledKernel._init_handles

    def recording(self):
        fresh = self.module is None
        init(self)
        if fresh:
            _loaded.append((self.name, self.n_regs, self.n_spills, self.metadata.shared))

    CompiledKernel._init_handles = recording


def template_stats(since):
    tem = [k for k in _loaded[since:] if k[0].startswith("triton_tem")]
    return f"regs {tem[-1][1]} spills {tem[-1][2]} smem {tem[-1][3] // 1024} KiB" if tem else ""


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


def profile_swiglu(m, d, f):
    """Per-kernel CUDA time of a compiled SwiGLU MLP, stock and plugin (torch.profiler)."""
    torch.manual_seed(0)
    kw = {"bias": False, "device": "cuda", "dtype": DT}
    gate, up, down = torch.nn.Linear(d, f, **kw), torch.nn.Linear(d, f, **kw), torch.nn.Linear(f, d, **kw)
    for lin in (gate, up, down):
        torch.nn.init.normal_(lin.weight, std=lin.weight.shape[1] ** -0.5)
    x = torch.randn(m, d, device="cuda", dtype=DT)

    def fn(x):
        return down(F.silu(gate(x)) * up(x))

    print(f"== SwiGLU M={m} d={d} f={f}", flush=True)
    with torch.no_grad():
        for arm, kw in (("stock", {}), ("plugin", {"backend": "inductor_mm_plugin"})):
            torch._dynamo.reset()
            c = torch.compile(fn, **kw)
            for _ in range(5):
                c(x)
            torch.cuda.synchronize()
            ms = bench(lambda c=c: c(x))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    c(x)
                torch.cuda.synchronize()
            print(f"  {arm}: {ms * 1e3:.1f} us per call (CUDA graphs)", flush=True)
            for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
                if e.device_time_total > 0:
                    print(f"    {e.device_time_total / 20:8.1f} us  x{e.count // 20:<2d} {e.key[:110]}", flush=True)


def breakdown_block(name, variants, arm_names=ARMS, code=None):
    """Time one block of ``BLOCKS`` arm by arm and print a line per arm."""
    m, d, f, act = BLOCKS[name]
    torch.manual_seed(0)
    x = torch.randn(m, d, device="cuda", dtype=DT)
    w = torch.randn(f, d, device="cuda", dtype=DT) * d**-0.5
    b = torch.randn(f, device="cuda", dtype=DT)
    act = act or (lambda y: y)
    flops = 2 * m * d * f
    print(f"== {name}: M={m} K={d} N={f}", flush=True)

    def report(label, ms, stats=""):
        regs = f"  [{stats}]" if stats else ""
        print(f"  {label:44s} {ms * 1e3:9.1f} us  {flops / ms / 1e9:7.1f} TFLOP/s{regs}", flush=True)

    def block(x):
        return act(F.linear(x, w, b))

    for label, ms in [
        ("eager cuBLAS mm", bench(lambda: x @ w.T)),
        ("eager cuBLAS linear", bench(lambda: F.linear(x, w, b))),
        ("eager cuBLAS linear+act", bench(lambda: block(x))),
        ("plugin eager mm op", bench(lambda: torch.ops.inductor_mm_plugin.mm(x, w.T))),
        ("plugin eager addmm op", bench(lambda: torch.ops.inductor_mm_plugin.addmm(b, x, w.T))),
        ("stock compile block", compiled_ms(block, x, block(x))),
    ]:
        report(label, ms)
    # Each with a pointwise user, so the routed matmul takes the template (a lone matmul
    # takes the extern kernel): the template's store, + the bias, + the activation, both.
    arms = {
        "(x @ w.T) * 2": lambda x: (x @ w.T) * 2,
        "linear(x) * 2": lambda x: F.linear(x, w, b) * 2,
        "act(x @ w.T)": lambda x: act(x @ w.T),
        "act(linear(x))": block,
    }
    plugin = {"backend": "inductor_mm_plugin"}
    arms = {label: arms[label] for label in arm_names}
    for vname in variants:
        with forced(*VARIANTS[vname]) if VARIANTS[vname] else contextlib.nullcontext():
            for label, fn in arms.items():
                since = len(_loaded)
                to = code / f"{name}-{vname}.py" if code and fn is block else None
                try:
                    ms = compiled_ms(fn, x, fn(x), to, **plugin)
                    report(f"template {vname} {label}", ms, template_stats(since))
                except Exception as e:  # a variant that does not compile: report, go on
                    print(f"  {name} {label} {vname}: {type(e).__name__}: {str(e)[-600:]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", nargs="*", default=list(BLOCKS), choices=list(BLOCKS))
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS), help="the template arms to time")
    p.add_argument("--code", default=None, help="directory for the plugin's generated code of each block")
    p.add_argument("--swiglu", nargs=3, type=int, metavar=("M", "D", "F"), action="append", default=[],
                   help="profile a compiled SwiGLU MLP kernel by kernel, stock and plugin (repeatable)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("epilogue_breakdown.py needs a CUDA device")
    if os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") != "1":
        sys.exit("run with TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 (see the docstring)")
    os.environ.setdefault("TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER", "0")  # read at the first compile
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
          f"plugin {inductor_mm_plugin.__version__}")  # fmt: skip
    _record_loaded_kernels()
    for m, d, f in args.swiglu:
        profile_swiglu(m, d, f)
    code = pathlib.Path(args.code) if args.code else None
    if code:
        code.mkdir(parents=True, exist_ok=True)
    for name in args.blocks:
        breakdown_block(name, args.variants, args.arms, code)

if __name__ == "__main__":
    main()
