"""Timing for ``compare``: the two arms in interleaved rounds (runtime/benchmarking.py), and
the GPU time of routed sites that the model's profile (profile.py) cannot attribute."""

from __future__ import annotations

import copy
import dataclasses
import time
import warnings
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..inductor import compat
from ..inductor.backend import patches_for
from ..inductor.measure import measure
from ..inductor.options import PluginOptions
from ..inductor.records import record_sites
from ..runtime import benchmarking
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
        return benchmarking.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        return benchmarking.quantile(self.ratios, 0.2), benchmarking.quantile(self.ratios, 0.8)

    @property
    def verdict(self) -> str:
        lo, hi = self.spread
        return "faster" if lo > 1 else "slower" if hi < 1 else "within noise"


def interleaved(stock: Callable, plugin: Callable, device: str, *, rounds: int = ROUNDS, reps: int = 20,
                warmup: int = 5, cudagraphs: bool = True) -> AB:  # fmt: skip
    """Time ``stock`` and ``plugin`` (a model step or a graph) in ``rounds`` interleaved rounds,
    each mirrored (stock plugin plugin stock, then the reverse: ``benchmarking.interleaved``).
    On CUDA with ``cudagraphs``: replays of a CUDA graph of ``reps`` calls, GPU time (a step
    that cannot be captured is timed as below, and the note says why). Without: ``reps``
    back-to-back calls between events, which is what a step run without CUDA graphs costs,
    the host's part included. On the CPU: the host clock."""
    arms, note = {"stock": stock, "plugin": plugin}, ""
    cuda = device.startswith("cuda")
    for fn in arms.values():
        for _ in range(max(1, warmup if cuda else 1)):
            fn()
    graphs = False
    if cuda:
        torch.cuda.synchronize()
        if cudagraphs:
            timers = {name: benchmarking.Timer([fn], reps) for name, fn in arms.items()}
            graphs = all(t.how == "graphs" for t in timers.values())
            note = next((f"timed without CUDA graphs: {t.note}" for t in timers.values() if t.note), "")
        if not graphs:
            timers = {name: _calls(fn, reps, lambda f: benchmarking.elapsed_us(f) / 1e3) for name, fn in arms.items()}
    else:
        timers = {name: _calls(fn, reps, _host_ms) for name, fn in arms.items()}
    times = benchmarking.interleaved(timers, rounds, mirrored=True)  # a step's clock drifts within a round
    if graphs:
        times = {name: [t / 1e3 for t in ts] for name, ts in times.items()}  # Timer gives us per call
    return AB(_timing(times["stock"]), _timing(times["plugin"]), benchmarking.ratios(times, "stock", "plugin"), graphs,
              note)  # fmt: skip


def _calls(fn: Callable, reps: int, clock: Callable[[Callable], float]) -> Callable[[], float]:
    run = benchmarking.cycle([fn], reps)
    return lambda: clock(run) / reps


def _host_ms(fn: Callable) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def _timing(times: list[float]) -> Timing:
    return Timing(benchmarking.median(times), benchmarking.quantile(times, 0.2), benchmarking.quantile(times, 0.8))


def _operands(site: SiteResult, device: str) -> list[torch.Tensor]:
    """Fresh operands with the site's exact sizes, strides and storage offsets."""
    dtype = getattr(torch, site.dtype)
    return [benchmarking.operand(*layout, dtype, device) for layout in _layouts(site)]


def _layouts(site: SiteResult) -> list[tuple]:
    offsets = site.offsets or [0] * len(site.shapes)
    return [(tuple(shape), tuple(stride), offset) for shape, stride, offset in zip(site.shapes, site.strides, offsets)]


def _concrete(site: SiteResult) -> bool:
    return all(isinstance(d, int) for shape in (*site.shapes, *site.strides) for d in shape)


def _time_site(site: SiteResult, device: str, cudagraphs: bool) -> None:
    """The site's kernel against aten's on its exact layout: GPU time on CUDA (measure.py's
    method); on the CPU, the interpreter's host time (not meaningful, and marked so)."""
    if not _concrete(site):
        return  # symbolic shapes (dynamic=True): no concrete operands to time
    if device.startswith("cuda"):
        m = measure(site.op, _layouts(site), getattr(torch, site.dtype), device, graphs=cudagraphs)
        site.plugin_ms, site.aten_ms, site.timed = m.plugin_us / 1e3, m.aten_us / 1e3, "kernel"
        return
    from ..runtime import addmm_launch, bmm_launch, mm_launch

    operands = _operands(site, device)
    plugin = {"mm": mm_launch, "addmm": addmm_launch, "bmm": bmm_launch}[site.op]
    aten = {"mm": torch.mm, "addmm": torch.addmm, "bmm": torch.bmm}[site.op]
    ab = interleaved(lambda: aten(*operands), lambda: plugin(*operands), device, reps=2, warmup=1, rounds=1)
    site.plugin_ms, site.aten_ms, site.timed = ab.plugin.median_ms, ab.stock.median_ms, "kernel"


class _SwiGLUPair(nn.Module):
    def forward(self, x, w_gate, w_up):
        return F.silu(torch.mm(x, w_gate)) * torch.mm(x, w_up)


def _time_swiglu_pair(site: SiteResult, plugin_options: PluginOptions, inductor: dict, device: str, warmup: int,
                      reps: int, cudagraphs: bool) -> tuple[float, float] | None:  # fmt: skip
    """(plugin ms, stock ms) of the SwiGLU pair a fused site belongs to: ``_SwiGLUPair`` on
    fresh operands of the site's shapes, dtype and layout (both weights alike, as the fusion
    requires), compiled by Inductor with the plugin's routing (every matmul selected, the
    model's other options) and by stock Inductor. None where the pair does not fuse when
    compiled alone (the caller times the site's own kernel then)."""
    if not _concrete(site):
        return None
    x, w_gate = _operands(site, device)
    (w_up,) = _operands(dataclasses.replace(site, shapes=site.shapes[1:], strides=site.strides[1:],
                                            offsets=site.offsets[1:]), device)  # fmt: skip
    inputs = [x, w_gate, w_up]
    with torch.no_grad(), compat.fresh_inductor_cache(), record_sites() as records:
        graph = torch.fx.symbolic_trace(_SwiGLUPair())
        patches = patches_for(dataclasses.replace(plugin_options, select="all"), inductor)
        plugin = compat.compile_fx(copy.deepcopy(graph), inputs, config_patches=patches)
        if not any(r.fused == "swiglu" for r in records):
            return None
        stock = compat.compile_fx(graph, inputs, config_patches=dict(inductor))
        ab = interleaved(lambda: stock(*inputs), lambda: plugin(*inputs), device, reps=reps, warmup=warmup,
                         cudagraphs=cudagraphs)  # fmt: skip
        return ab.plugin.median_ms, ab.stock.median_ms


def time_sites(sites: list[SiteResult], plugin_options: PluginOptions, inductor: dict, device: str, warmup: int,
               reps: int, cudagraphs: bool):  # fmt: skip
    """Time every routed site that neither the routing pass nor the model's profile timed: its
    kernel against aten's, or for a fused SwiGLU site its pair (once per distinct shape, dtype
    and layout)."""
    pairs: dict = {}
    for s in sites:
        if not s.routed or s.timed:
            continue
        if s.fused == "swiglu":
            key = (s.dtype, repr(s.shapes), repr(s.strides), repr(s.offsets))
            if key not in pairs:
                try:
                    pairs[key] = _time_swiglu_pair(s, plugin_options, inductor, device, warmup, reps, cudagraphs)
                except Exception as e:  # noqa: BLE001  (a side measurement: the report goes on, and says so)
                    warnings.warn(f"inductor_mm_plugin.compare: timing the SwiGLU pair of {s.module or '<root>'} "
                                  f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}) failed; "
                                  "its rows time the plain kernel instead", stacklevel=2)  # fmt: skip
                    pairs[key] = None
            if pairs[key] is not None:
                s.plugin_ms, s.aten_ms = pairs[key]
                s.timed = "swiglu pair"
                continue
        _time_site(s, device, cudagraphs)
