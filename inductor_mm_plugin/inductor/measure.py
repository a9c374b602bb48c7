"""Route only where measured faster: a site's plugin kernel against aten's, on operands with
the site's exact sizes, strides, alignment and dtype, timed when the site is compiled.

What runs at a routed site under ``compete="auto"`` is the plugin's extern kernel, its
epilogue in Inductor's own pointwise kernel, exactly as stock runs cuBLAS there; so the
kernel against aten's is the form it will run in. Timing follows bench/'s method: the two
arms alternate in rounds (the H200's SM clock drifts with power within seconds, so a
sequential A-then-B timing compares clock states), and the decision takes the median of
the per-round ratios. Under CUDA graphs (``triton.cudagraphs``, ``mode="reduce-overhead"``)
a round replays a captured graph of each arm, which is GPU time alone; otherwise it times a
loop of back-to-back calls, which includes each op's host cost, as the model pays it.

A site is routed when the plugin was faster in every round and by ``MARGIN`` in the median:
"when unsure, stock wins". Decisions are cached in memory and on disk (runtime/tuning.py, ``routing_cache``), keyed
by GPU, versions, kernel source and the site's signature, so a second compile measures
nothing.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable

import torch

from ..runtime import tuning
from . import compat

MARGIN = 1.02  # the plugin must be at least this much faster in the median round
ROUNDS = 5
_TARGET_US = 300.0  # each timed region: about this long, so that event timing resolves it
_MAX_REPS = 64


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One site's timing: the median per-call times and the per-round ratios aten / plugin."""

    plugin_us: float
    aten_us: float
    ratios: tuple[float, ...]
    graphs: bool  # timed under CUDA graphs (GPU time) rather than as back-to-back calls

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def faster(self) -> bool:
        return self.ratio >= MARGIN and min(self.ratios) > 1.0

    def describe(self) -> str:
        how = "under CUDA graphs" if self.graphs else "back to back"
        return (f"measured {self.plugin_us:.1f} us against aten's {self.aten_us:.1f} us {how} "
                f"({self.ratio:.2f}x, {min(self.ratios):.2f}-{max(self.ratios):.2f} over {len(self.ratios)} rounds)")  # fmt: skip

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Measurement:
        return cls(float(d["plugin_us"]), float(d["aten_us"]), tuple(float(r) for r in d["ratios"]), bool(d["graphs"]))


def signature(op: str, vals: list[torch.Tensor], alpha, beta, graphs: bool) -> str | None:
    """What a site's timing depends on, as a cache key; None when a size or stride is symbolic."""
    parts = [op, str(vals[-1].dtype).removeprefix("torch."), f"a{alpha}", f"b{beta}", "graphs" if graphs else "calls"]
    for v in vals:
        dims = (*v.shape, *v.stride(), v.storage_offset())
        if not all(isinstance(d, int) for d in dims):
            return None
        # Alignment of the base decides TMA; the allocator aligns storage itself.
        parts.append(f"{tuple(v.shape)}:{tuple(v.stride())}:{v.storage_offset() * v.element_size() % 16}")
    return "|".join(parts)


def layouts(vals: list[torch.Tensor]) -> list[tuple[tuple, tuple, int]]:
    """(sizes, strides, storage offset) of each operand (fake or real tensors)."""
    return [(tuple(v.shape), tuple(v.stride()), v.storage_offset()) for v in vals]


def _operand(layout: tuple[tuple, tuple, int], dtype, device) -> torch.Tensor:
    """Fresh random data with these sizes, strides and storage offset."""
    shape, stride, offset = layout
    return torch.randn(_extent(layout), dtype=dtype, device=device).as_strided(shape, stride, offset)


def measure(op: str, operands: list[tuple[tuple, tuple, int]], dtype: torch.dtype, device, alpha=1, beta=1,
            graphs: bool = False) -> Measurement:  # fmt: skip
    """Time the plugin's kernel against aten's on fresh operands with these ``layouts`` (CUDA).

    Small problems cycle through several copies of their operands, at least twice the L2
    between them: in a model, weights come from memory, not from the L2 that a repeated call
    leaves them in (sites measured up to 1.07x faster on the same buffers ran a model 1.5%
    slower on the H200; docs/performance.md)."""
    with compat.unset_fake_temporarily(), torch.no_grad():
        device = torch.device(device)
        out_shape = (*operands[-2][0][:-1], operands[-1][0][-1])
        one_set = (sum(_extent(layout) for layout in operands) + _numel(out_shape)) * dtype.itemsize
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
        copies = max(1, min(_MAX_COPIES, -(-2 * l2 // max(1, one_set))))
        plugin_calls, aten_calls = [], []
        for _ in range(copies):
            args = [_operand(layout, dtype, device) for layout in operands]
            out = torch.empty(out_shape, dtype=dtype, device=device)
            plugin_calls.append(_call(op, args, out, alpha, beta, plugin=True))
            aten_calls.append(_call(op, args, out, alpha, beta, plugin=False))
        return _interleaved(plugin_calls, aten_calls, graphs)


_MAX_COPIES = 16


def _call(op: str, args: list, out, alpha, beta, plugin: bool) -> Callable:
    """One call of the plugin's op or aten's on ``args``, writing ``out``."""
    from ..runtime import addmm_launch, bmm_launch, mm_launch

    if op == "addmm":
        bias, a, b = args
        if plugin:
            return lambda: addmm_launch(bias, a, b, beta, alpha, out=out)
        return lambda: torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=out)
    a, b = args
    fn = (mm_launch if op == "mm" else bmm_launch) if plugin else (torch.mm if op == "mm" else torch.bmm)
    return lambda: fn(a, b, out=out)


def _extent(layout) -> int:
    """Elements of storage an operand with this layout spans."""
    shape, stride, offset = layout
    return offset + (1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _interleaved(plugin: list[Callable], aten: list[Callable], graphs: bool) -> Measurement:
    for fn in (*plugin, *aten):  # compile, plan, and create cuBLAS handles outside the timing
        fn()
    torch.cuda.synchronize()
    reps = _reps(plugin[0], aten[0])
    reps = -(-reps // len(plugin)) * len(plugin)  # every copy as often
    make = graphed if graphs else looped
    arms = {"plugin": make(plugin, reps), "aten": make(aten, reps)}
    times: dict[str, list[float]] = {"plugin": [], "aten": []}
    for i in range(ROUNDS):
        for name in ("plugin", "aten") if i % 2 == 0 else ("aten", "plugin"):
            times[name].append(elapsed_us(arms[name]) / reps)
    ratios = tuple(a / p for a, p in zip(times["aten"], times["plugin"]))
    return Measurement(statistics.median(times["plugin"]), statistics.median(times["aten"]), ratios, graphs)


def _reps(*fns: Callable) -> int:
    """Calls per timed region, so that the slower arm's region lasts about _TARGET_US."""
    longest = max(elapsed_us(fn) for fn in fns)
    return max(1, min(_MAX_REPS, int(_TARGET_US / max(longest, 1.0))))


# The timing pieces compare's interleaved rounds use too (comparison/timing.py).


def looped(fns: list[Callable], reps: int) -> Callable:
    """``reps`` back-to-back calls, cycling through ``fns``."""

    def run():
        for i in range(reps):
            fns[i % len(fns)]()

    return run


def graphed(fns: list[Callable], reps: int) -> Callable:
    """The replay of a CUDA graph of ``reps`` calls, cycling through ``fns``."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()  # warm-up on a side stream, as torch.cuda.graph's docs ask
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            fns[i % len(fns)]()
    graph.replay()
    return graph.replay


def elapsed_us(fn: Callable) -> float:
    """``fn``'s GPU time in microseconds, from events around it."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


# ------------------------------------------------------------------------ cached decisions

_MEMORY: dict[str, Measurement] = {}


def cached_or_measure(key: str, op: str, vals: list[torch.Tensor], alpha, beta, graphs: bool) -> Measurement:
    """The site's measurement from this process or the disk cache, else measured now and stored."""
    hit = _MEMORY.get(key)
    if hit is None:
        store = tuning.routing_cache(torch.cuda.get_device_name(vals[-1].device))
        entry = store.get_entry(key)
        try:
            hit = Measurement.from_json(entry) if entry is not None else None
        except (KeyError, TypeError, ValueError):
            hit = None  # a malformed entry is measured again
        if hit is None:
            hit = measure(op, layouts(vals), vals[-1].dtype, vals[-1].device, alpha, beta, graphs)
            store.put_entry(key, hit.to_json())
        _MEMORY[key] = hit
    return hit

