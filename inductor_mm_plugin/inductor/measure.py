"""Route only where measured faster, in GPU time: a site's plugin kernel against aten's, on
operands with the site's exact sizes, strides, alignment and dtype, timed when the site is
compiled (runtime/benchmarking.py does the timing).

What runs at a routed site under ``compete="auto"`` is the plugin's extern kernel, its
epilogue in Inductor's own pointwise kernel, exactly as stock runs cuBLAS there; so the
kernel against aten's is the form it will run in, and its GPU time is what a model step pays
for it: the GPU runs behind a queue of launches, and under CUDA graphs there is no host cost.

The rule, as the README states it:

* GPU time decides. Each arm is a CUDA graph of calls cycling through fresh operand copies
  that span twice the L2; the arms alternate in ``ROUNDS`` rounds. The plugin must be faster
  by ``ROUND_MARGIN`` in every round, by ``MARGIN`` in the median, and by ``MIN_SAVING_US`` per call ("when
  unsure, stock wins"; ``wins``); the first round it is not ends the timing (the verdict
  cannot change after it).
* Host cost counts only where it can reach the step: in a compile without CUDA graphs, each
  arm costs the larger of its GPU time and its host cost per call (a kernel shorter than its
  launch path leaves the GPU waiting on the host), and the plugin must not lose on that
  either. Under CUDA graphs (``triton.cudagraphs``, ``mode="reduce-overhead"``) it is
  ignored.
* A shape class that the committed per-GPU table (``shape_table.py``) marks as a sure loser
  is not timed at all; a sure winner is routed untimed under CUDA graphs, where the site is
  large enough for the saving floor (smaller ones are timed).

A SwiGLU pair (``fuse_swiglu="auto"``) is timed the same way as one site, op
``"swiglu"``: the fused kernel (``mm_swiglu``'s extern kernel) against stock's form, cuBLAS's two
matmuls and Inductor's one pointwise pass for the product (``runtime.swiglu.stock_swiglu``).
Pairs of at most ``SWIGLU_LOSES_UP_TO_M`` rows are not timed (``decide_swiglu``).

Decisions are cached in memory and on disk (``RoutingCache``), keyed by GPU, versions, kernel
source and the site's signature, so a second compile measures nothing.

The sites' kernels are compiled ahead (``runtime/ahead.py`` does the compiling): those a graph
will likely route, in the background from the backend's entry (``compile_predicted``); those
about to be timed, side by side before the timing (``precompile``); and those routed, in the
background after the pass (``compile_routed``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics

import torch

from ..runtime import benchmarking, tuning
from . import compat, shape_table
from .selection import not_routed

# Entries from before the GPU-time rule timed back-to-back calls (issue 30): never read back.
_KEY_VERSION = "gpu-time-2"
MARGIN = 1.02  # the plugin must be at least this much faster in the median round
# ... and save at least this much GPU time per call: below it a model's profile cannot tell the
# arms apart. llama-prefill's rotary site (64x1 @ 1x2048, fp32), faster alone, ran 3.3 us in the
# model against stock's 3.0 (bench/models.py at 9606ec5).
MIN_SAVING_US = 0.5
# ... and win every round by at least this much: a site won in the median with a round near 1.0
# is within the model's own noise. llama-train's backward down_proj (4096x1024 @ 1024x2816) timed
# 1.01x (rounds 1.00-1.02) alone and ran 0.970x in the model (H100, 151daa3); of 1,013
# median-margin wins in bench/results/shapes.jsonl, 7 have a round under 1.01.
ROUND_MARGIN = 1.01
ROUNDS = 5
_HOST_REPS = 32
# The fused SwiGLU kernel lost to stock's form at every M <= 512 measured, so such pairs are
# not timed and decode times nothing new. H100, 672969a (docs/performance.md): stock / fused
# 0.81, 0.85 and 0.82 at M = 16, 128 and 512 (d = 2048, f = 5632); 0.98-1.18 from M = 1000.
SWIGLU_LOSES_UP_TO_M = 512
# A Linear + activation site's op in measurements and their cache keys: this, then the activation's name.
ACTIVATION_OP = "mm_activation:"


def _activation_of(op: str) -> str:
    """The activation of a Linear + activation site's op, else ""."""
    return op.removeprefix(ACTIVATION_OP) if op.startswith(ACTIVATION_OP) else ""


def _bias_first(op: str, args: list) -> tuple:
    """(bias or None, a, b) of a site's operands: addmm's, and a fused Linear's with a bias, lead with it."""
    return (args[0], *args[1:]) if op == "addmm" or (_activation_of(op) and len(args) == 3) else (None, *args)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One site's timing: median GPU time per call of each arm, the per-round ratios aten /
    plugin, and each arm's host cost per call (what a compile without CUDA graphs may pay)."""

    plugin_us: float
    aten_us: float
    ratios: tuple[float, ...]
    graphs: bool  # the compile runs under CUDA graphs: host cost never reaches the step
    plugin_host_us: float = 0.0
    aten_host_us: float = 0.0

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def host_bound(self) -> bool:
        """Without CUDA graphs, whether either arm's launch path outlasts its kernel."""
        return not self.graphs and (self.plugin_host_us > self.plugin_us or self.aten_host_us > self.aten_us)

    @property
    def faster(self) -> bool:
        gpu = self.ratio >= MARGIN and min(self.ratios) >= ROUND_MARGIN and wins(self.plugin_us, self.aten_us)
        if not gpu or not self.host_bound:
            return gpu
        return max(self.plugin_us, self.plugin_host_us) <= max(self.aten_us, self.aten_host_us)

    def describe(self) -> str:
        text = (f"GPU time {self.plugin_us:.1f} us against aten's {self.aten_us:.1f} us "
                f"({self.ratio:.2f}x, {min(self.ratios):.2f}-{max(self.ratios):.2f} over {len(self.ratios)} rounds)")  # fmt: skip
        if self.host_bound:
            text += f"; host-bound without CUDA graphs: {self.plugin_host_us:.1f} us against {self.aten_host_us:.1f} us per call"  # fmt: skip
        return text

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Measurement:
        """A measurement read back from the routing cache; ValueError for anything that is not
        one (then it is measured again): other or missing fields, GPU times or ratios that are
        not finite positive numbers (a bool is no number, "123" no list), no ratios (a list;
        to_json's tuple too), host costs that are not finite and >= 0, a ``graphs`` not a bool."""
        if not isinstance(d, dict) or set(d) != _FIELDS:
            raise ValueError(f"a routing-cache entry is an object of {', '.join(sorted(_FIELDS))}")
        times, ratios, hosts = [d["plugin_us"], d["aten_us"]], d["ratios"], [d["plugin_host_us"], d["aten_host_us"]]
        if not (type(ratios) in (list, tuple) and ratios and all(_number(x) and x > 0 for x in (*times, *ratios))
                and all(_number(x) and x >= 0 for x in hosts) and type(d["graphs"]) is bool):  # fmt: skip
            raise ValueError("a routing-cache entry needs positive times and ratios (a non-empty list), host costs "
                             ">= 0 and a bool graphs")  # fmt: skip
        return cls(float(times[0]), float(times[1]), tuple(float(r) for r in ratios), d["graphs"], float(hosts[0]),
                   float(hosts[1]))  # fmt: skip


_FIELDS = {f.name for f in dataclasses.fields(Measurement)}


def wins(plugin_us: float, aten_us: float) -> bool:
    """Whether a plugin time per call beats aten's by the routing rule: ``MARGIN`` and
    ``MIN_SAVING_US`` (the routing pass's medians; compare's per-site profile for a plan)."""
    return aten_us >= plugin_us * MARGIN and aten_us - plugin_us >= MIN_SAVING_US


def _number(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def signature(op: str, vals: list[torch.Tensor], alpha, beta, graphs: bool) -> str | None:
    """What a site's timing depends on, as a cache key; None when a size or stride is symbolic."""
    parts = [_KEY_VERSION, op, str(vals[-1].dtype).removeprefix("torch."), f"a{alpha}", f"b{beta}", "graphs" if graphs else "calls"]
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


def measure(op: str, operands: list[tuple[tuple, tuple, int]], dtype: torch.dtype, device, alpha=1, beta=1,
            graphs: bool = False) -> Measurement:  # fmt: skip
    """Time the plugin's kernel against aten's in GPU time on fresh operands with these
    ``layouts`` (CUDA); ``graphs``: the compile runs under CUDA graphs, so host cost is not
    measured."""
    with compat.unset_fake_temporarily(), torch.no_grad():
        device = torch.device(device)
        out_shape = _out_shape(op, operands)
        # Stock's SwiGLU writes both matmul results, then the product; a Linear + activation, its
        # result, then the activation's.
        outs = 3 if op == "swiglu" else 2 if _activation_of(op) else 1
        one_set = (sum(benchmarking.extent(*layout) for layout in operands) + outs * math.prod(out_shape)) * dtype.itemsize
        plugin_calls, aten_calls = [], []
        for _ in range(benchmarking.copies(one_set, device)):
            args = [benchmarking.operand(*layout, dtype, device) for layout in operands]
            out = torch.empty(out_shape, dtype=dtype, device=device)
            plugin_calls.append(_call(op, args, out, alpha, beta, plugin=True))
            aten_calls.append(_call(op, args, out, alpha, beta, plugin=False))
        for fn in (*plugin_calls, *aten_calls):  # compile, plan, and create cuBLAS handles first
            fn()
        torch.cuda.synchronize()
        plugin = benchmarking.Timer(plugin_calls)
        aten = benchmarking.Timer(aten_calls, reps=plugin.reps)
        # A round the plugin does not win by ROUND_MARGIN decides (every round must be): stop there.
        lost = lambda t: len(t["aten"]) == len(t["plugin"]) and t["aten"][-1] < t["plugin"][-1] * ROUND_MARGIN  # noqa: E731
        times = benchmarking.interleaved({"plugin": plugin, "aten": aten}, ROUNDS, stop=lost)
        host = {"plugin": 0.0, "aten": 0.0}
        if not graphs:
            host = {"plugin": benchmarking.host_us(plugin_calls, _HOST_REPS),
                    "aten": benchmarking.host_us(aten_calls, _HOST_REPS)}  # fmt: skip
        return Measurement(statistics.median(times["plugin"]), statistics.median(times["aten"]),
                           tuple(benchmarking.ratios(times, "aten", "plugin")), graphs, host["plugin"], host["aten"])  # fmt: skip


def _out_shape(op: str, operands: list[tuple[tuple, tuple, int]]) -> tuple:
    """The result's sizes from the operands' layouts: a's leading dims, b's last (SwiGLU's
    (x, w_gate, w_up): x's rows, the weights' columns)."""
    a, b = (operands[0], operands[1]) if op == "swiglu" else (operands[-2], operands[-1])
    return (*a[0][:-1], b[0][-1])


def _call(op: str, args: list, out, alpha, beta, plugin: bool):
    """One call of the plugin's op or aten's on ``args``, writing ``out``; for ``"swiglu"``
    the fused kernel as ``mm_swiglu``'s extern kernel runs it, or stock's form; for
    ``"mm_activation:<name>"`` (args: [bias,] a, b) ``mm_activation``'s kernel, or stock's form."""
    from ..runtime import addmm_launch, bmm_launch, mm_launch

    name = _activation_of(op)
    if name:
        from ..ops.activation import mm_activation_launch_checked
        from ..runtime.activation import stock_mm_activation

        bias, a, b = _bias_first(op, args)
        if plugin:
            return lambda: mm_activation_launch_checked(a, b, bias, name, out=out)
        z = torch.empty_like(out)
        return lambda: stock_mm_activation(a, b, bias, z, out, name)

    if op == "swiglu":
        from ..ops.swiglu import mm_swiglu_launch
        from ..runtime.swiglu import stock_swiglu

        x, w_gate, w_up = args
        if plugin:
            return lambda: mm_swiglu_launch(x, w_gate, w_up, out=out)
        gate, up = torch.empty_like(out), torch.empty_like(out)
        return lambda: stock_swiglu(x, w_gate, w_up, gate, up, out)
    if op == "addmm":
        bias, a, b = args
        if plugin:
            return lambda: addmm_launch(bias, a, b, beta, alpha, out=out)
        return lambda: torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=out)
    a, b = args
    fn = (mm_launch if op == "mm" else bmm_launch) if plugin else (torch.mm if op == "mm" else torch.bmm)
    return lambda: fn(a, b, out=out)


# ------------------------------------------------------------------------ the decision


def decide(op: str, vals: list[torch.Tensor], alpha, beta, graphs: bool) -> tuple[bool, str, Measurement | None]:
    """(routed, reason, measurement) of a CUDA site: the shape table's answer where it is sure,
    else the cached or new measurement."""
    key = signature(op, vals, alpha, beta, graphs)
    if key is None:
        return False, not_routed("symbolic"), None
    sure = _sure(op, vals, alpha, beta, graphs)
    if sure is not None:
        return sure.verdict == "wins", sure.describe(), None
    return _timed_verdict(key, op, vals, alpha, beta, graphs)


def _timed_verdict(key: str, op: str, vals: list[torch.Tensor], alpha, beta, graphs: bool) -> tuple[bool, str, Measurement]:
    """(faster, reason, measurement) from the cached or new measurement of ``key``."""
    measured = cached_or_measure(key, op, vals, alpha, beta, graphs)
    if measured.faster:
        return True, "", measured
    return False, not_routed("slower", measured=measured.describe(), round_margin=ROUND_MARGIN, margin=MARGIN,
                             saving=MIN_SAVING_US), measured


def decide_swiglu(vals: list[torch.Tensor], graphs: bool) -> tuple[bool, str, Measurement | None]:
    """(fused, reason, measurement) of a SwiGLU pair on CUDA (``vals``: x, w_gate, w_up, which
    the fused kernel takes, ``runtime.swiglu.fused_reason``): fused where the fused kernel beat
    stock's form by the routing rule, as a site's kernel must beat aten's (``decide``)."""
    key = signature("swiglu", vals, 1, 1, graphs)
    reason = "symbolic sizes: not timed" if key is None else _swiglu_untimed(vals)
    if reason is not None:
        return False, reason, None
    return _timed_verdict(key, "swiglu", vals, 1, 1, graphs)


def decide_activation(activation: str, vals: list[torch.Tensor], graphs: bool) -> tuple[bool, str, Measurement | None]:
    """(fused, reason, measurement) of a Linear + ``activation`` site on CUDA (``vals``: [bias,]
    a, b): fused where ``mm_activation``'s kernel beat stock's form (cuBLAS, then Inductor's
    pointwise kernel; ``runtime.activation``) by the routing rule, as a site's kernel must beat
    aten's (``decide``)."""
    op = ACTIVATION_OP + activation
    key = signature(op, vals, 1, 1, graphs)
    if key is None:
        return False, "symbolic sizes: not timed", None
    return _timed_verdict(key, op, vals, 1, 1, graphs)


def _swiglu_untimed(vals: list[torch.Tensor]) -> str | None:
    """Why a SwiGLU pair is kept unfused without timing it, or None."""
    rows = vals[0].shape[0]
    if rows <= SWIGLU_LOSES_UP_TO_M:
        return (f"{rows} rows: the fused kernel lost to stock's form at every M <= {SWIGLU_LOSES_UP_TO_M} "
                "measured, so it is not timed")  # fmt: skip
    return None


def _sure(op: str, vals: list[torch.Tensor], alpha, beta, graphs: bool):
    """The shape table's answer where it decides untimed: a sure loser always; a sure winner
    under CUDA graphs (its measurement had no host cost in it), where the site is large enough
    to save ``MIN_SAVING_US`` per call at the class's worst ratio (``least_saving_us``)."""
    sure = shape_table.lookup(op, vals, alpha, beta)
    if sure is None or sure.verdict == "loses":
        return sure
    return sure if graphs and sure.least_saving_us(vals) >= MIN_SAVING_US else None


def precompile(sites: list[tuple[str, list[torch.Tensor], object, object, bool]]) -> int:
    """Compile the plugin kernels of the CUDA sites that ``decide`` will time (``sites``: op,
    vals, alpha, beta, graphs each; op ``"swiglu"``: a pair ``decide_swiglu`` will time, both
    arms' Triton kernels) side by side in threads before any is timed, on operands
    laid out as ``measure`` lays them out (the same plans and specializations), so that timing
    them one by one finds each compiled: a cold compile of the decode step spent 2.7 s
    compiling its sites' kernels one after another. Returns how many were compiled."""
    def untimed(key, site) -> bool:
        if site[0] == "swiglu" and _swiglu_untimed(site[1]) is not None:
            return True
        return _sure(*site) is not None or _cached(key, site[1], site[4]) is not None

    todo = _distinct(sites, skip=untimed)
    kernels = len(todo) + sum(site[0] == "swiglu" for site in todo.values())  # a pair has two
    workers = min(kernels, int(compat.inductor_config.compile_threads or 1))
    if workers < 2:
        return 0  # nothing to overlap: the first timed call compiles
    from ..runtime import compile_calls

    try:
        with compat.unset_fake_temporarily(), torch.no_grad():
            calls, swiglu_calls = _compile_args(todo)
            return compile_calls(calls, workers, swiglu_calls)
    except Exception:  # noqa: BLE001 (compiling ahead only saves time: the timing compiles and reports)
        log.info("compiling %d sites' kernels ahead failed; each compiles when it is timed", len(todo), exc_info=True)
        return 0


def compile_routed(sites: list[tuple[str, list[torch.Tensor], object, object, bool]]) -> int:
    """Start compiling the plugin kernels of the CUDA sites routed to the extern kernel, in the
    background (``runtime.compile_behind``), and return: they compile while Inductor compiles
    the rest of the graph, where otherwise the compiled graph's first call would compile them
    one after another (a compile whose decisions were cached times nothing, so nothing
    compiled them before). Kernels this process compiled already are found in Triton's cache
    at once. Returns how many sites were started."""
    return _behind(_distinct(sites), "routed")


def compile_predicted(sites: list[tuple[str, list[torch.Tensor], object, object, bool]]) -> int:
    """Start compiling, in the background, the plugin kernels of the CUDA sites a graph will
    likely route (``predict.predicted_sites``), before AOTAutograd traces it: every site but
    the shape table's sure losers and those a cached decision keeps on stock. The routing
    pass then waits for them instead of compiling them (``runtime.compile_calls``). Returns
    how many sites were started."""
    from ..runtime import SUPPORTED_DTYPES

    def stays_on_stock(key, site) -> bool:
        if any(v.dtype not in SUPPORTED_DTYPES for v in site[1]):
            return True  # aten's (float64, integers): never the plugin's kernel
        sure = _sure(*site)
        if sure is not None:
            return sure.verdict == "loses"
        hit = _cached(key, site[1], site[4])
        return hit is not None and not hit.faster

    return _behind(_distinct(sites, skip=stays_on_stock), "predicted")


def _behind(todo: dict, what: str) -> int:
    """``runtime.compile_behind`` for ``_distinct``'s sites, up to Inductor's compile_threads."""
    if not todo:
        return 0
    from ..runtime import compile_behind

    try:
        with compat.unset_fake_temporarily(), torch.no_grad():
            return compile_behind(_compile_args(todo)[0], max(1, int(compat.inductor_config.compile_threads or 1)))
    except Exception:  # noqa: BLE001 (compiling ahead only saves time: each kernel compiles at its first call)
        log.info("compiling %d %s sites' kernels ahead failed; each compiles at its first call", len(todo), what,
                 exc_info=True)  # fmt: skip
        return 0


def _distinct(sites, skip=lambda key, site: False) -> dict:
    """Signature -> (op, layouts, dtype, device, alpha, beta) of the CUDA sites with static
    layouts, one per signature, but those ``skip(signature, site)`` names."""
    todo = {}
    for site in sites:
        op, vals, alpha, beta, graphs = site
        key = signature(op, vals, alpha, beta, graphs) if _on_cuda(vals) else None
        if key is not None and key not in todo and not skip(key, site):
            todo[key] = (op, layouts(vals), vals[-1].dtype, vals[-1].device, alpha, beta)
    return todo


def _compile_args(todo: dict) -> tuple[list[tuple], list[tuple]]:
    """``runtime.compile_calls``' calls for ``_distinct``'s sites (outside fake mode): the
    matmuls' (a, b, out, bias, beta, alpha[, activation]) and the SwiGLU pairs' (x, w_gate, w_up, out), on
    tensors with each site's sizes, strides and storage offsets, so the calls plan and
    specialize as ``measure``'s timed calls and the model's own calls do. Nothing is launched
    on them, so they are views of one uninitialized buffer per device and dtype, the size of
    the largest: a compile whose sites include a 128k-row output layer's 1 GB weight holds
    1 GB, not the sum of its sites' operands."""
    need: dict = {}
    for op, operands, dtype, device, alpha, beta in todo.values():
        extents = [benchmarking.extent(*layout) for layout in operands] + [math.prod(_out_shape(op, operands))]
        need[(device, dtype)] = max(need.get((device, dtype), 1), *extents)
    buffers = {key: torch.empty(n, dtype=key[1], device=key[0]) for key, n in need.items()}
    calls, swiglu_calls = [], []
    for op, operands, dtype, device, alpha, beta in todo.values():
        buf = buffers[(device, dtype)]
        args = [buf.as_strided(*layout) for layout in operands]
        out_shape = _out_shape(op, operands)
        out = buf[: math.prod(out_shape)].view(out_shape)
        if op == "swiglu":
            swiglu_calls.append((*args, out))
            continue
        bias, a, b = _bias_first(op, args)
        activation = _activation_of(op)
        calls.append((a, b, out, bias, beta, alpha, *((activation,) if activation else ())))
    return calls, swiglu_calls


def _on_cuda(vals: list[torch.Tensor]) -> bool:
    return vals[-1].device.type == "cuda"


# ------------------------------------------------------------------------ cached decisions


class RoutingCache(tuning.DiskCache):
    """Measured routing decisions by site signature, beside the tuning cache's file; keyed by
    the torch version too, since aten's kernel is half of each measurement."""

    kind = "routing"

    def valid(self, entry) -> bool:
        try:
            Measurement.from_json(entry)
        except (KeyError, TypeError, ValueError):
            return False
        return True


_ROUTING_CACHES: dict[str, RoutingCache] = {}
_MEMORY: dict[str, Measurement] = {}


def routing_cache(gpu: str) -> RoutingCache:
    """The process's routing cache for this GPU and the installed versions."""
    cache = _ROUTING_CACHES.get(gpu)
    if cache is None:
        import triton

        cache = _ROUTING_CACHES[gpu] = RoutingCache(gpu, triton.__version__, tuning.kernel_source_hash(),
                                                    torch=torch.__version__)  # fmt: skip
    return cache


def cached_or_measure(key: str, op: str, vals: list[torch.Tensor], alpha, beta, graphs: bool) -> Measurement:
    """The site's measurement from this process or the disk cache, else measured now and stored."""
    hit = _cached(key, vals, graphs)
    if hit is None:
        hit = measure(op, layouts(vals), vals[-1].dtype, vals[-1].device, alpha, beta, graphs)
        routing_cache(torch.cuda.get_device_name(vals[-1].device)).put_entry(key, hit.to_json())
    _MEMORY[key] = hit
    return hit


def _cached(key: str, vals: list[torch.Tensor], graphs: bool) -> Measurement | None:
    """The site's measurement from this process or the disk cache; None to measure it."""
    hit = _MEMORY.get(key)
    if hit is not None:
        return hit
    entry = routing_cache(torch.cuda.get_device_name(vals[-1].device)).get_entry(key)
    try:
        hit = Measurement.from_json(entry) if entry is not None else None
    except ValueError:
        return None  # a malformed entry is measured again
    if hit is not None and hit.graphs != graphs:
        return None  # and so is one timed the other way than the key says
    return hit


def clear() -> None:
    """Forget every measurement held in memory (the disk cache stays)."""
    _MEMORY.clear()
    _ROUTING_CACHES.clear()
