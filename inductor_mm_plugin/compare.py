"""A/B comparison of the plugin against stock Inductor on the same captured graphs.

    report = inductor_mm_plugin.compare(model, example_inputs, options={"select": "all"})
    print(report)                 # readable tables
    report.to_json("ab.json")     # machine-readable
    report.to_markdown()          # for pasting into an issue
    report.plot("ab.png")         # when matplotlib is installed

How: Dynamo captures the model's graphs once (it may split the model into several). Each
captured graph is compiled twice from copies of itself (``compile_fx`` mutates its input):
stock Inductor, and Inductor with the plugin's routing pass. Both arms then run on the same
inputs:

* numerics — every graph output, and the model output (and parameter gradients for a
  training step), against a float64 eager reference: an upcast copy of the model on
  upcast inputs, or for one graph the captured graph itself on upcast inputs;
* speed — median time per call with its spread, per graph and arm, from device events
  after warm-up (optionally under CUDA graphs); per routed site, the plugin kernel against
  the aten kernel on fresh operands of the same shapes, dtype and layout. The two matmuls of
  a fused SwiGLU product run as one kernel, so their rows time that pair instead:
  ``silu(x @ w_gate) * (x @ w_up)`` compiled alone on the sites' shapes, by the plugin
  (the fused kernel) and by stock Inductor (two matmuls and a pointwise kernel). On the
  CPU the kernels run in Triton's interpreter: times are reported and marked not meaningful.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import json
import math
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import __version__
from .inductor import compat
from .inductor.backend import config_patches
from .inductor.options import PLUGIN_KEYS
from .inductor.routing import SiteRecord, _root_from_dynamo, record_sites
from .inductor.selection import RootInfo
from .kernels.matmul import interpreting
from .runtime import addmm_launch, bmm_launch, mm_launch
from .ops.reference import UNIT_ROUNDOFF

# A model output passes when the plugin's relative error (max |out - ref| / max |ref|) is
# within the dtype's tolerance, or within twice stock Inductor's own error on the same graph
# (a deep graph accumulates rounding that no matmul can remove). Tolerances: 8 output
# roundings (three bits) for fp16/bf16; for fp32, TF32's operand rounding (about 1e-3).
# A dropped K slice or a wrong tile is off by whole products, far beyond either.
TOLERANCE = {torch.float32: 1e-3, torch.float16: 8 * UNIT_ROUNDOFF[torch.float16],
             torch.bfloat16: 8 * UNIT_ROUNDOFF[torch.bfloat16], torch.float64: 1e-10}  # fmt: skip


class CompareError(RuntimeError):
    """A comparison that cannot be made (no matmul, a model that does not compile, ...)."""


# ------------------------------------------------------------------------ results


@dataclasses.dataclass
class Error:
    max_abs: float
    max_rel: float  # max |out - ref| / max |ref|

    def __str__(self) -> str:
        return f"{self.max_abs:.2e} ({self.max_rel:.1e} rel)"


@dataclasses.dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float


@dataclasses.dataclass
class GraphResult:
    index: int
    sites: int
    routed: int
    stock_err: Error | None
    plugin_err: Error | None
    tolerance: float
    ok: bool
    stock: Timing | None = None
    plugin: Timing | None = None

    @property
    def speedup(self) -> float | None:
        return self.stock.median_ms / self.plugin.median_ms if self.stock and self.plugin else None


@dataclasses.dataclass
class SiteResult:
    graph: int | None
    module: str
    op: str
    phase: str
    shapes: list
    dtype: str
    strides: list
    routed: bool
    reason: str
    plugin_ms: float | None = None
    compete: str | None = None  # routed, but Inductor's autotuner may have kept aten (routing.competition)
    fused: str | None = None  # "swiglu": one of the two matmuls of an inductor_mm_plugin::mm_swiglu
    aten_ms: float | None = None
    # What plugin_ms and aten_ms time: "kernel", the site's matmul (plugin kernel against aten),
    # or "swiglu pair", the fused pair the site belongs to (_time_swiglu_pair); None: not timed.
    timed: str | None = None

    @property
    def speedup(self) -> float | None:
        return self.aten_ms / self.plugin_ms if self.plugin_ms and self.aten_ms else None


@dataclasses.dataclass
class Report:
    versions: dict
    device: str
    timing_meaningful: bool
    timing_note: str
    reference: str
    graphs: list[GraphResult]
    sites: list[SiteResult]
    model: dict  # stock_err, plugin_err, tolerance, ok, grads (training step)
    options: dict
    date: str = dataclasses.field(default_factory=lambda: datetime.date.today().isoformat())

    @property
    def ok(self) -> bool:
        return self.model["ok"] and all(g.ok for g in self.graphs)

    # -- text

    def site_table(self) -> str:
        """The per-site table: deterministic for a given model and options (no times)."""
        rows = [("graph", "phase", "module", "op", "shapes", "dtype", "layout", "routed", "reason")]
        for s in self.sites:
            rows.append((
                "-" if s.graph is None else str(s.graph), s.phase, s.module or "<root>", s.op,
                " ".join("x".join(map(str, shape)) or "[]" for shape in s.shapes), s.dtype,
                " ".join(_layout(st) for st in s.strides[-2:]), _routed(s), s.reason,
            ))  # fmt: skip
        return _table(rows)

    def __str__(self) -> str:
        lines = [
            f"inductor_mm_plugin {self.versions['plugin']} A/B on {self.device} "
            f"(torch {self.versions['torch']}, triton {self.versions['triton']})",
            f"reference: {self.reference}",
            f"verdict: {'PASS' if self.ok else 'FAIL'}",
            "",
            "model output: stock {}  plugin {}  tolerance {:.1e}  {}".format(
                self.model["stock_err"], self.model["plugin_err"], self.model["tolerance"],
                "ok" if self.model["ok"] else "FAIL"),
        ]  # fmt: skip
        for name, g in self.model.get("grads", {}).items():
            lines.append(f"  grad {name}: stock {g['stock_err']}  plugin {g['plugin_err']}  {'ok' if g['ok'] else 'FAIL'}")
        rows = [("graph", "sites", "routed", "stock err", "plugin err", "stock ms", "plugin ms", "speedup", "numerics")]
        for g in self.graphs:
            rows.append((
                str(g.index), str(g.sites), str(g.routed), str(g.stock_err), str(g.plugin_err),
                _ms(g.stock), _ms(g.plugin), _x(g.speedup), "ok" if g.ok else "FAIL",
            ))  # fmt: skip
        lines += ["", "graphs:", _table(rows), "", "sites:", self.site_table()]
        timed = [s for s in self.sites if s.speedup is not None]
        if timed:
            rows = [("graph", "phase", "module", "op", "shapes", "plugin ms", "aten ms", "speedup")]
            for s in timed:
                rows.append((str(s.graph), s.phase, s.module or "<root>", s.op,
                             " ".join("x".join(map(str, x)) for x in s.shapes),
                             f"{s.plugin_ms:.4f}", f"{s.aten_ms:.4f}", _x(s.speedup)))  # fmt: skip
            lines += ["", "routed sites, plugin against aten on the same shapes:", _table(rows)]
            lines += [line for note in _notes(timed) for line in ("", f"note: {note}")]
        if not self.timing_meaningful:
            lines += ["", f"note: {self.timing_note}"]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        out = [
            f"### inductor_mm_plugin A/B — {self.device}, {self.date}",
            "",
            f"plugin {self.versions['plugin']}, torch {self.versions['torch']}, triton {self.versions['triton']}; "
            f"options `{self.options}`; reference: {self.reference}. Verdict: **{'PASS' if self.ok else 'FAIL'}**.",
            "",
            f"Model output error: stock {self.model['stock_err']}, plugin {self.model['plugin_err']} "
            f"(tolerance {self.model['tolerance']:.1e}).",
            "",
            "| graph | sites | routed | stock err | plugin err | stock ms | plugin ms | speedup |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for g in self.graphs:
            out.append(f"| {g.index} | {g.sites} | {g.routed} | {g.stock_err} | {g.plugin_err} | {_ms(g.stock)} | "
                       f"{_ms(g.plugin)} | {_x(g.speedup)} |")  # fmt: skip
        out += ["", "| graph | phase | module | op | shapes | dtype | routed | reason | plugin ms | aten ms | speedup |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for s in self.sites:
            shapes = " ".join("x".join(map(str, x)) for x in s.shapes)
            out.append(f"| {s.graph} | {s.phase} | {s.module or '&lt;root&gt;'} | {s.op} | {shapes} | {s.dtype} | "
                       f"{_routed(s)} | {s.reason} | {_f(s.plugin_ms)} | {_f(s.aten_ms)} | "
                       f"{_x(s.speedup)} |")  # fmt: skip
        out += [line for note in _notes(self.sites) for line in ("", f"_{note}_")]
        if not self.timing_meaningful:
            out += ["", f"_{self.timing_note}_"]
        return "\n".join(out) + "\n"

    # -- machine-readable

    def to_dict(self) -> dict:
        def err(e):
            return dataclasses.asdict(e) if e else None

        graphs = [{
            "index": g.index, "sites": g.sites, "routed": g.routed, "ok": g.ok, "tolerance": g.tolerance,
            "stock_err": err(g.stock_err), "plugin_err": err(g.plugin_err),
            "stock_ms": g.stock.median_ms if g.stock else None, "plugin_ms": g.plugin.median_ms if g.plugin else None,
            "stock_spread_ms": [g.stock.p20_ms, g.stock.p80_ms] if g.stock else None,
            "plugin_spread_ms": [g.plugin.p20_ms, g.plugin.p80_ms] if g.plugin else None,
            "speedup": g.speedup,
        } for g in self.graphs]  # fmt: skip
        sites = [{**dataclasses.asdict(s), "speedup": s.speedup} for s in self.sites]
        model = {k: (err(v) if isinstance(v, Error) else v) for k, v in self.model.items() if k != "grads"}
        model["grads"] = {n: {k: err(v) if isinstance(v, Error) else v for k, v in g.items()}
                          for n, g in self.model.get("grads", {}).items()}  # fmt: skip
        return {
            "versions": self.versions, "device": self.device, "timing_meaningful": self.timing_meaningful,
            "timing_note": self.timing_note, "reference": self.reference, "options": self.options, "date": self.date,
            "ok": self.ok, "model": model, "graphs": graphs, "sites": sites,
        }  # fmt: skip

    def to_json(self, path=None) -> str:
        text = json.dumps(self.to_dict(), indent=1, default=str)
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    def plot(self, path) -> None:
        """Bar charts of the speedup per graph and per routed site (needs matplotlib)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise CompareError("report.plot needs matplotlib: pip install matplotlib") from e
        sites = [s for s in self.sites if s.speedup is not None]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 3]})
        for ax, labels, values, title in (
            (axes[0], [f"graph {g.index}" for g in self.graphs], [g.speedup or 0 for g in self.graphs], "per graph"),
            (axes[1], [f"{s.graph}:{s.phase[0]}:{s.module or 'root'}:{s.op}" for s in sites],
             [s.speedup for s in sites], "per routed site (plugin vs aten)"),
        ):  # fmt: skip
            ax.bar(range(len(values)), values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(values)), labels, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel("speedup (stock time / plugin time)")
            ax.set_title(title)
        note = "" if self.timing_meaningful else " — CPU interpreter: times not meaningful"
        fig.suptitle(f"inductor_mm_plugin A/B on {self.device}{note}")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


# What a fused site's times measure: the pair it runs as (normally), or, where that pair did
# not fuse when compiled alone, what the site would run by itself.
_PAIR_NOTE = ("\"yes, SwiGLU\" sites: each row times the pair it belongs to, silu(x @ w_gate) * (x @ w_up) "
              "compiled alone on its shapes: the plugin's fused kernel (inductor_mm_plugin::mm_swiglu) against "
              "stock Inductor's two matmuls and its pointwise kernel; both rows of a pair show the same times")
_FUSED_NOTE = ("\"yes, SwiGLU\" sites marked *: their times are the plugin's plain matmul kernel on each site's "
               "shapes (the pair did not fuse when compiled alone); in the compiled graph the pair runs as one "
               "fused kernel (inductor_mm_plugin::mm_swiglu), timed only as part of the graph")


def _notes(sites) -> list[str]:
    """The notes a report's timed fused sites need."""
    timed = [s for s in sites if s.fused and s.speedup is not None]
    return ([_PAIR_NOTE] if any(s.timed == "swiglu pair" for s in timed) else []) + (
        [_FUSED_NOTE] if any(s.timed != "swiglu pair" for s in timed) else [])


def _routed(s: SiteResult) -> str:
    """"yes", "no", "yes, competes": routed, then timed against aten by Inductor's
    autotuner, which keeps the faster (the per-site times below say which that is), or
    "yes, SwiGLU": fused with the other matmul of a SwiGLU product (routing._swiglu_pairs)."""
    if not s.routed:
        return "no"
    if s.fused == "swiglu":
        star = "*" if s.timed == "kernel" else ""
        return "yes, SwiGLU" + star + (", competes" if s.compete else "")
    return "yes, competes" if s.compete else "yes"


def _layout(stride) -> str:
    if len(stride) < 2:
        return "vec"
    if stride[-1] == 1:
        return "row"
    if stride[-2] == 1:
        return "col"
    return "strided"


def _table(rows) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _ms(t: Timing | None) -> str:
    return "-" if t is None else f"{t.median_ms:.4f} [{t.p20_ms:.4f}, {t.p80_ms:.4f}]"


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _f(v) -> str:
    return "-" if v is None else f"{v:.4f}"


# ---------------------------------------------------------------------- helpers


class _Progress:
    def __init__(self, quiet: bool):
        self.quiet, self.start = quiet, time.perf_counter()

    def __call__(self, stage: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.start:7.1f}s] {stage}", file=sys.stderr, flush=True)


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _error(out, ref) -> Error:
    outs, refs = _tensors(out), _tensors(ref)
    if len(outs) != len(refs):
        raise CompareError(f"output structure differs: {len(outs)} tensors against {len(refs)} in the reference")
    max_abs, max_ref = 0.0, 0.0
    for o, r in zip(outs, refs):
        if not (o.is_floating_point() and o.numel()):
            continue
        diff = (o.detach().double() - r.detach().double().to(o.device)).abs()
        max_abs = max(max_abs, float(diff.max()) if not diff.isnan().any() else math.inf)
        max_ref = max(max_ref, float(r.detach().double().abs().max()))
    return Error(max_abs, max_abs / max_ref if max_ref > 0 else max_abs)


def _upcast(tree, dtype=torch.float64):
    def up(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().to(dtype).requires_grad_(x.requires_grad)
        return x

    return torch.utils._pytree.tree_map(up, tree)


def _float_dtype(tree) -> torch.dtype:
    for t in _tensors(tree):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _time(fn: Callable, device: str, warmup: int, reps: int, cudagraphs: bool) -> Timing:
    if device.startswith("cuda"):
        if cudagraphs:
            import triton.testing

            q = triton.testing.do_bench_cudagraph(fn, rep=max(reps, 20), quantiles=[0.2, 0.5, 0.8])
            return Timing(q[1], q[0], q[2])
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(min(warmup, 1)):
            fn()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    q = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
    return Timing(statistics.median(times), q[1], q[7])


def _site_operands(site: SiteResult, device: str):
    dtype = getattr(torch, site.dtype)

    def make(shape, stride):
        t = torch.randn(shape, device=device, dtype=dtype)
        if len(shape) >= 2 and stride[-1] != 1 and stride[-2] == 1:  # a transposed view
            t = torch.randn((*shape[:-2], shape[-1], shape[-2]), device=device, dtype=dtype).mT
        return t

    return [make(tuple(shape), tuple(stride)) for shape, stride in zip(site.shapes, site.strides)]


def _time_site(site: SiteResult, device: str, warmup: int, reps: int, cudagraphs: bool) -> None:
    if not all(isinstance(d, int) for shape in site.shapes for d in shape):
        return  # symbolic shapes (dynamic=True): no concrete operands to time
    operands = _site_operands(site, device)
    plugin = {"mm": mm_launch, "addmm": addmm_launch, "bmm": bmm_launch}[site.op]
    aten = {"mm": torch.mm, "addmm": torch.addmm, "bmm": torch.bmm}[site.op]
    plugin(*operands)  # compile and choose the config outside the timed region
    site.plugin_ms = _time(lambda: plugin(*operands), device, warmup, reps, cudagraphs).median_ms
    site.aten_ms = _time(lambda: aten(*operands), device, warmup, reps, cudagraphs).median_ms
    site.timed = "kernel"


class _SwiGLUPair(nn.Module):
    def forward(self, x, w_gate, w_up):
        return F.silu(torch.mm(x, w_gate)) * torch.mm(x, w_up)


def _time_swiglu_pair(site: SiteResult, options: dict, device: str, warmup: int, reps: int,
                      cudagraphs: bool) -> tuple[float, float] | None:  # fmt: skip
    """(plugin ms, stock ms) of the SwiGLU pair a fused site belongs to: ``_SwiGLUPair`` on
    fresh operands of the site's shapes, dtype and layout (both weights alike, as the fusion
    requires), compiled by Inductor with the plugin's routing (every matmul selected, the
    model's other options) and by stock Inductor. None where the pair does not fuse when
    compiled alone (the caller times the site's own kernel then)."""
    if not all(isinstance(d, int) for shape in site.shapes for d in shape):
        return None
    x, w_gate = _site_operands(site, device)
    (w_up,) = _site_operands(dataclasses.replace(site, shapes=site.shapes[1:], strides=site.strides[1:]), device)
    inputs = [x, w_gate, w_up]
    inductor_only = {k: v for k, v in options.items() if k not in PLUGIN_KEYS}
    with torch.no_grad(), compat.fresh_inductor_cache(), record_sites() as records:
        graph = torch.fx.symbolic_trace(_SwiGLUPair())
        plugin = compat.compile_fx(copy.deepcopy(graph), inputs, config_patches=config_patches({**options, "select": "all"}))
        if not any(r.fused == "swiglu" for r in records):
            return None
        stock = compat.compile_fx(graph, inputs, config_patches=dict(inductor_only))
        return (_time(lambda: plugin(*inputs), device, warmup, reps, cudagraphs).median_ms,
                _time(lambda: stock(*inputs), device, warmup, reps, cudagraphs).median_ms)  # fmt: skip


def _time_sites(sites: list[SiteResult], options: dict, device: str, warmup: int, reps: int, cudagraphs: bool):
    """Time every routed site: its kernel against aten's, or for a fused SwiGLU site its pair
    (once per distinct shape, dtype and layout)."""
    pairs: dict = {}
    for s in sites:
        if not s.routed:
            continue
        if s.fused == "swiglu":
            key = (s.dtype, repr(s.shapes), repr(s.strides))
            if key not in pairs:
                try:
                    pairs[key] = _time_swiglu_pair(s, options, device, warmup, reps, cudagraphs)
                except Exception as e:  # noqa: BLE001  (a side measurement: the report goes on, and says so)
                    warnings.warn(f"inductor_mm_plugin.compare: timing the SwiGLU pair of {s.module or '<root>'} "
                                  f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}) failed; "
                                  "its rows time the plain kernel instead", stacklevel=2)  # fmt: skip
                    pairs[key] = None
            if pairs[key] is not None:
                s.plugin_ms, s.aten_ms = pairs[key]
                s.timed = "swiglu pair"
                continue
        _time_site(s, device, warmup, reps, cudagraphs)


# ------------------------------------------------------------------------ compare


@dataclasses.dataclass
class _Graph:
    index: int
    gm: torch.fx.GraphModule
    stock: Callable
    plugin: Callable
    inputs: list = dataclasses.field(default_factory=list)  # the args of its first call


def compare(
    model: nn.Module | Callable,
    example_inputs,
    *,
    options: dict[str, Any] | None = None,
    train: bool | None = None,
    timing: bool = True,
    cudagraphs: bool = False,
    warmup: int = 5,
    reps: int = 20,
    quiet: bool = True,
) -> Report:
    """Compare the plugin against stock Inductor on ``model(*example_inputs)``.

    options: the plugin backend's options (``select``, ``compete`` and Inductor config keys).
    train:   also run backward on the (scalar) output and compare parameter gradients;
             None means: when the output is a scalar that requires grad.
    """
    progress = _Progress(quiet)
    options = dict(options or {})
    if not torch.cuda.is_available():  # interpreter times mean nothing: keep them short
        warmup, reps = min(warmup, 1), min(reps, 3)
    inductor_only = {k: v for k, v in options.items() if k not in PLUGIN_KEYS}
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    params = [p for p in model.parameters()] if isinstance(model, nn.Module) else []
    device = str(next((t.device for t in _tensors(example_inputs) + params), torch.device("cpu")))
    dtype = _float_dtype(list(example_inputs) + params)

    # The float64 reference first: an upcast copy of the model, so nothing is shared.
    progress("float64 eager reference")
    reference = "float64 eager (upcast copy of the model and its inputs)"
    try:
        ref_model = copy.deepcopy(model)
        if isinstance(ref_model, nn.Module):
            ref_model = ref_model.to(torch.float64)
        ref_out, ref_grads, trained = _run(ref_model, _upcast(example_inputs), train)
    except Exception as e:  # noqa: BLE001  (an op without float64 support, for example)
        reference = f"float32 eager (float64 failed: {type(e).__name__}: {str(e).splitlines()[0][:100]})"
        ref_model = copy.deepcopy(model)
        if isinstance(ref_model, nn.Module):
            ref_model = ref_model.float()
        try:
            ref_out, ref_grads, trained = _run(ref_model, _upcast(example_inputs, torch.float32), train)
        except Exception as e2:  # noqa: BLE001
            raise CompareError(f"the model does not run eagerly: {type(e2).__name__}: {e2}") from e2
    train = trained

    graphs: list[_Graph] = []
    state = {"arm": "stock", "record_inputs": False}

    def capture(gm, graph_inputs):
        index = len(graphs)
        progress(f"graph {index}: compiling the stock and plugin arms ({len(gm.graph.nodes)} nodes)")
        root = RootInfo.of(_root_from_dynamo())
        stock = compat.compile_fx(copy.deepcopy(gm), graph_inputs, config_patches=dict(inductor_only))
        plugin = compat.compile_fx(copy.deepcopy(gm), graph_inputs,
                                   config_patches=config_patches(options, root=root, label=index))  # fmt: skip
        entry = _Graph(index, copy.deepcopy(gm), stock, plugin)
        graphs.append(entry)

        def run(*args):
            if state["record_inputs"] and not entry.inputs:
                entry.inputs = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
            return (entry.stock if state["arm"] == "stock" else entry.plugin)(*args)

        return run

    # Caches off for this compare: a cache hit would skip the routing pass, and the site
    # table is what the pass decided.
    with compat.fresh_inductor_cache(), record_sites() as records:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=capture)
        outs, grads = {}, {}
        for arm in ("stock", "plugin"):
            progress(f"running the {arm} arm" + (" (forward + backward)" if train else ""))
            state.update(arm=arm, record_inputs=arm == "stock")
            try:
                outs[arm], grads[arm], _ = _run(compiled, example_inputs, train)
            except CompareError:
                raise
            except Exception as e:
                raise CompareError(f"the model does not compile or run under torch.compile: {type(e).__name__}: {e}") from e
        torch._dynamo.reset()
    if not records:
        raise CompareError("the model has no matmul (aten.mm, aten.addmm or aten.bmm) in its compiled graphs")

    tolerance = TOLERANCE.get(dtype, 1e-3)
    model_result = _judge(outs["stock"], outs["plugin"], ref_out, tolerance)
    if train:
        model_result["grads"] = {
            name: _judge(grads["stock"][name], grads["plugin"][name], ref_grads[name], tolerance)
            for name in ref_grads if ref_grads[name] is not None and grads["stock"].get(name) is not None
        }  # fmt: skip
        model_result["ok"] = model_result["ok"] and all(g["ok"] for g in model_result["grads"].values())

    progress("per-graph numerics" + (" and timing" if timing else ""))
    graph_results = [_graph_result(g, records, tolerance, device, timing, warmup, reps, cudagraphs) for g in graphs]

    sites = [_site_result(r) for r in records]
    if timing:
        progress(f"timing {sum(s.routed for s in sites)} routed sites against aten")
        _time_sites(sites, options, device, warmup, reps, cudagraphs)

    meaningful = device.startswith("cuda")
    note = "" if meaningful else (
        "times on the CPU are not meaningful: the plugin's kernels run in Triton's interpreter"
        if interpreting() else "times on the CPU are not meaningful")  # fmt: skip
    import triton

    progress("done")
    return Report(
        versions={"torch": torch.__version__, "triton": triton.__version__, "plugin": __version__},
        device=torch.cuda.get_device_name(torch.device(device)) if meaningful else "cpu",
        timing_meaningful=meaningful,
        timing_note=note,
        reference=reference,
        graphs=graph_results,
        sites=sites,
        model=model_result,
        options={k: (v if isinstance(v, (str, bool, int, float)) else repr(v)) for k, v in options.items()},
    )


def _run(fn, inputs, train):
    """Run forward, and backward when train (None: when the output is a scalar that
    requires grad); return (output, {param name: grad}, whether backward ran)."""
    module = getattr(fn, "_orig_mod", fn)  # a torch.compile'd module names its parameters "_orig_mod.*"
    named = list(module.named_parameters()) if isinstance(module, nn.Module) else []
    for _, p in named:
        p.grad = None
    grad_ctx = contextlib.nullcontext() if train is not False else torch.no_grad()
    with grad_ctx:
        out = fn(*inputs)
    do_backward = train if train is not None else (
        isinstance(out, torch.Tensor) and out.dim() == 0 and out.requires_grad)  # fmt: skip
    grads = {}
    if do_backward:
        out.backward()
        grads = {n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in named}
    out = torch.utils._pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, out)
    return out, grads, do_backward


def _judge(stock, plugin, ref, tolerance) -> dict:
    stock_err, plugin_err = _error(stock, ref), _error(plugin, ref)
    ok = plugin_err.max_rel <= max(tolerance, 2 * stock_err.max_rel)
    return {"stock_err": stock_err, "plugin_err": plugin_err, "tolerance": tolerance, "ok": ok}


def _graph_result(g: _Graph, records, tolerance, device, timing, warmup, reps, cudagraphs) -> GraphResult:
    mine = [r for r in records if r.graph == g.index]
    result = GraphResult(g.index, len(mine), sum(r.routed for r in mine), None, None, tolerance, True)
    if not g.inputs:
        return result
    args = g.inputs
    with torch.no_grad():
        stock_out, plugin_out = g.stock(*args), g.plugin(*args)
        try:
            ref_out = g.gm(*_upcast(args))
        except Exception:  # noqa: BLE001  (the captured graph may not run in float64)
            ref_out = g.gm(*_upcast(args, torch.float32))
        judged = _judge(stock_out, plugin_out, ref_out, tolerance)
        result.stock_err, result.plugin_err, result.ok = judged["stock_err"], judged["plugin_err"], judged["ok"]
        if timing:
            result.stock = _time(lambda: g.stock(*args), device, warmup, reps, cudagraphs)
            result.plugin = _time(lambda: g.plugin(*args), device, warmup, reps, cudagraphs)
    return result


def _site_result(r: SiteRecord) -> SiteResult:
    s = r.site

    def concrete(dims):  # symbolic sizes (dynamic=True) are reported by name, e.g. "s77"
        return [d if isinstance(d, int) else str(d) for d in dims]

    return SiteResult(
        graph=r.graph, module=s.module, op=s.op, phase=s.phase,
        shapes=[concrete(x) for x in s.shapes], dtype=s.dtypes[-1], strides=[concrete(x) for x in s.strides],
        routed=r.routed, reason=r.reason, compete=r.compete, fused=r.fused,
    )  # fmt: skip
