"""Timing for ``compare``: the two arms in interleaved rounds, and each routed site's kernel."""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
import warnings
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..inductor import compat
from ..inductor.backend import config_patches
from ..inductor.measure import elapsed_us, graphed, looped
from ..inductor.options import PLUGIN_KEYS
from ..inductor.routing import record_sites
from ..runtime import addmm_launch, bmm_launch, mm_launch
from .report import SiteResult, Timing


# A verdict needs the arms apart in most rounds: faster when the 20th percentile of the
# per-round ratios (stock / plugin) is above 1, slower when the 80th is below 1.
ROUNDS = 7


@dataclasses.dataclass
class AB:
    """The two arms timed in interleaved rounds: per-arm times and the per-round ratios."""

    stock: Timing
    plugin: Timing
    ratios: list[float]  # stock / plugin, one per round: above 1, the plugin is faster
    cudagraphs: bool
    note: str = ""

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        return _quantile(self.ratios, 0.2), _quantile(self.ratios, 0.8)

    @property
    def verdict(self) -> str:
        lo, hi = self.spread
        return "faster" if lo > 1 else "slower" if hi < 1 else "within noise"


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    i = int(pos)
    return xs[i] if i + 1 >= len(xs) else xs[i] + (xs[i + 1] - xs[i]) * (pos - i)


def interleaved(stock: Callable, plugin: Callable, device: str, *, rounds: int = ROUNDS, reps: int = 20,
                warmup: int = 5, cudagraphs: bool = True) -> AB:  # fmt: skip
    """Time ``stock`` and ``plugin`` in ``rounds`` rounds, the order alternating each round (the
    H200's SM clock drifts with power within seconds: a sequential A-then-B timing compares
    clock states). Each round times ``reps`` calls of each arm, under a captured CUDA graph
    where ``cudagraphs`` and the calls can be captured (GPU time), else back to back with
    events; on the CPU with the host clock."""
    arms, note = {"stock": stock, "plugin": plugin}, ""
    for fn in arms.values():
        for _ in range(max(1, warmup if device.startswith("cuda") else 1)):
            fn()
    graphs = False
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        if cudagraphs:
            try:
                arms = {name: graphed([fn], reps) for name, fn in arms.items()}
                graphs = True
            except Exception as e:  # noqa: BLE001  (a model that cannot be captured is timed without)
                torch.cuda.synchronize()
                note = f"timed without CUDA graphs: capture failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    if not graphs:
        arms = {name: looped([fn], reps) for name, fn in arms.items()}
    times: dict[str, list[float]] = {"stock": [], "plugin": []}
    for i in range(rounds):
        for name in ("stock", "plugin") if i % 2 == 0 else ("plugin", "stock"):
            times[name].append(_elapsed_ms(arms[name], device) / reps)
    ratios = [s / p for s, p in zip(times["stock"], times["plugin"])]
    return AB(_timing(times["stock"]), _timing(times["plugin"]), ratios, graphs, note)


def _timing(times: list[float]) -> Timing:
    return Timing(statistics.median(times), _quantile(times, 0.2), _quantile(times, 0.8))


def _elapsed_ms(fn: Callable, device: str) -> float:
    if device.startswith("cuda"):
        return elapsed_us(fn) / 1e3
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


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
    ab = interleaved(lambda: aten(*operands), lambda: plugin(*operands), device, reps=reps, warmup=warmup,
                     cudagraphs=cudagraphs)  # fmt: skip
    site.plugin_ms, site.aten_ms, site.timed = ab.plugin.median_ms, ab.stock.median_ms, "kernel"


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
        ab = interleaved(lambda: stock(*inputs), lambda: plugin(*inputs), device, reps=reps, warmup=warmup,
                         cudagraphs=cudagraphs)  # fmt: skip
        return ab.plugin.median_ms, ab.stock.median_ms


def time_sites(sites: list[SiteResult], options: dict, device: str, warmup: int, reps: int, cudagraphs: bool):
    """Time every routed site not timed yet (the routing pass times the sites it measured): its
    kernel against aten's, or for a fused SwiGLU site its pair (once per distinct shape, dtype
    and layout)."""
    pairs: dict = {}
    for s in sites:
        if not s.routed or s.timed:
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


