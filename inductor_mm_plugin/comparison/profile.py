"""What the model paid, site by site: each arm's compiled step under ``torch.profiler``, the GPU
time of every matmul's kernels attributed to the site that launched them.

Attribution: every matmul a compiled graph runs is a profiler event with the kernels it
launched (their GPU time, ``kernel_us``): stock's
``aten::mm/addmm/bmm`` (Inductor's extern kernels) with its input shapes
(``record_shapes``), and the plugin's extern kernel, which launches from Python and so is
wrapped, while profiling only, in a range named ``inductor_mm_plugin::<op> <a> <b>``
(``inductor/lowering.py: profiled_calls``), its kernels found inside the range's GPU-side
annotation (``attribute``); the plugin's op called eagerly is a dispatcher event of its own.
A site is matched by its operand shapes, ``(a, b)`` of ``a @ b``, so that stock's addmm
split into an mm and a fused bias (Inductor's ``unfuse_bias_add``) still meets its site; an
event inside another matmul op (the plugin's aten fallback) counts for the outer one. Sites of the same shapes share their events' mean. What is not an op event
cannot be attributed: a template kernel (``compete=True``/``False``) or the fused SwiGLU's
pair, whose rows ``timing.py`` measures instead. The profile runs the steps without CUDA
graphs; a kernel's GPU time is the same either way.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, Iterable

import torch

_STOCK = {"aten::mm": "mm", "aten::addmm": "mm", "aten::bmm": "bmm", "aten::baddbmm": "bmm"}
_PLUGIN = {"inductor_mm_plugin::mm": "mm", "inductor_mm_plugin::addmm": "mm", "inductor_mm_plugin::bmm": "bmm"}
_MATMULS = {**_STOCK, **_PLUGIN}


@dataclasses.dataclass
class Kernels:
    """The GPU time of one shape's matmul calls in a profiled step."""

    us: float = 0.0  # per step, all calls together
    calls: float = 0.0  # per step

    @property
    def per_call_us(self) -> float:
        return self.us / self.calls if self.calls else 0.0


@dataclasses.dataclass
class Profile:
    """One arm's step: matmul GPU time by (family, a's shape, b's shape) and by who ran it
    ("plugin" or "aten"), and every kernel's GPU time together, per step."""

    matmuls: dict  # (runner, key) -> Kernels
    total_us: float  # all kernels of the step

    def time(self, runner: str, key) -> Kernels | None:
        return self.matmuls.get((runner, key))

    def matmul_us(self, runner: str | None = None) -> float:
        return sum(k.us for (who, _), k in self.matmuls.items() if runner in (None, who))


def site_key(op: str, shapes) -> tuple | None:
    """How a site meets its events: the matmul family and the shapes of ``a`` and ``b``."""
    ab = list(shapes[-2:]) if op != "addmm" else list(shapes[1:3])
    if len(ab) != 2 or not all(isinstance(d, int) for s in ab for d in s):
        return None
    return ("bmm" if op == "bmm" else "mm", tuple(ab[0]), tuple(ab[1]))


def stock_paid(stock: Profile, plugin: Profile, key) -> Kernels | None:
    """What stock's step paid for the calls of shapes ``key`` that the plugin arm ran on the
    plugin's kernels: stock's calls of these shapes less those the plugin arm left on aten,
    which run stock's code in both arms. Sites of one shape in another layout would otherwise
    share stock's mean: in llama-train (bench/models.py at 8926e50) the backward down_proj
    product (B N-major) was held against the mean of it and the forward gate/up products
    (4096x1024 @ 1024x2816 too, B K-major). None where nothing is left to attribute."""
    theirs = stock.time("aten", key)
    kept = plugin.time("aten", key)
    if theirs is None or kept is None:
        return theirs
    us, calls = theirs.us - kept.us, theirs.calls - kept.calls
    return Kernels(us, calls) if calls > 0.5 and us > 0 else None


def _matmul_name(event) -> str | None:
    name = event.name.split(" ", 1)[0]
    return name if name in _MATMULS else None


def _event_key(event) -> tuple | None:
    name = _matmul_name(event)
    family = _MATMULS[name]
    if " " in event.name:  # a range of the plugin's extern kernel: "inductor_mm_plugin::mm 8x16 16x4"
        try:
            a, b = (tuple(int(d) for d in dims.split("x")) for dims in event.name.split(" ")[1:3])
        except ValueError:
            return None
        return (family, a, b)
    shapes = [tuple(s) for s in (event.input_shapes or []) if isinstance(s, (list, tuple))]
    ab = shapes[1:3] if name.endswith("addmm") or name.endswith("baddbmm") else shapes[:2]
    if len(ab) != 2 or not all(ab):
        return None
    return (family, ab[0], ab[1])


def _inside_a_matmul(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if _matmul_name(parent):
            return True
        parent = parent.cpu_parent
    return False


def kernel_us(event) -> float:
    """The GPU time of the kernels an op or range launched, its children's included. Not
    ``device_time_total``: Kineto also links a range's GPU-side annotation (named like the
    range, spanning its kernels) to the range, which would count the time twice (the same
    double count as pytorch/pytorch#130730's in the profiler's own totals)."""
    own = sum(k.duration for k in event.kernels if k.name != event.name)
    return own + sum(kernel_us(child) for child in event.cpu_children)


def attribute(events: Iterable, steps: int, time_of: Callable = kernel_us) -> dict:
    """(runner, key) -> Kernels per step, from profiler op events (``prof.events()``).

    The plugin's Triton kernels launch through the driver (``cuLaunchKernelEx``, triton 3.6),
    and on the H200 (torch 2.11) Kineto linked them to no CPU event: its driver-API support
    (pytorch/kineto#752) links ``cuLaunchKernel``. So a plugin range's kernels are found on
    the GPU's side instead, inside the annotation Kineto records for the range there (named like it). Its
    CPU range gives the call count, and its time where the trace has no GPU side."""
    events = list(events)
    gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [e for e in gpu if not getattr(e, "is_user_annotation", False)]
    on_gpu: dict = {}  # plugin key -> its ranges' kernel time on the GPU, all steps
    for e in gpu:
        name = _matmul_name(e)
        if name in _PLUGIN and getattr(e, "is_user_annotation", False) and (key := _event_key(e)) is not None:
            on_gpu[key] = on_gpu.get(key, 0.0) + _kernels_within(kernels, e.time_range.start, e.time_range.end)
    out: dict = {}
    for e in events:
        name = _matmul_name(e)
        if name is None or e.device_type == torch.autograd.DeviceType.CUDA or _inside_a_matmul(e):
            continue
        key = _event_key(e)
        if key is None:
            continue
        plugin = name in _PLUGIN
        k = out.setdefault(("plugin" if plugin else "aten", key), Kernels())
        k.us += 0.0 if plugin and key in on_gpu else time_of(e) / steps
        k.calls += 1 / steps
    for key, us in on_gpu.items():
        if ("plugin", key) in out:
            out["plugin", key].us += us / steps
    return out


def _kernels_within(kernels: list, start: float, end: float) -> float:
    """The GPU time of the kernels that ran inside [start, end]."""
    return sum(k.time_range.end - k.time_range.start for k in kernels
               if start <= k.time_range.start and k.time_range.end <= end)  # fmt: skip


def profile_step(step: Callable, steps: int = 3) -> Profile | None:
    """Profile ``steps`` calls of a warmed-up CUDA step; None where no GPU time is recorded
    (the CPU, or a profiler that cannot trace the device)."""
    if not torch.cuda.is_available():
        return None
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    from ..inductor.lowering import profiled_calls

    torch.cuda.synchronize()
    with profiled_calls(), torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    events = prof.events()
    total = sum(e.device_time_total for e in events
                if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)) / steps  # fmt: skip
    if total <= 0:
        return None
    return Profile(attribute(events, steps), total)


def profile_rounds(steps: dict[str, Callable], rounds: int = 3) -> dict[str, list[Profile]]:
    """Each arm's step profiled once a round, in an order reversed every round, as the timings'
    interleaved rounds: the GPU's clock drifts between two profiles taken one after the other
    by more than a routed site's margin (llama-train's backward down_proj on the H100 at
    bc8900d: 37.6 us against stock's 37.5, one profile each). A round where any arm recorded
    no GPU time is left out for every arm, so that the lists stay paired by round; they are
    empty where the profiler sees no GPU (the CPU)."""
    order, out = list(steps), {arm: [] for arm in steps}
    for r in range(rounds):
        seen = {arm: profile_step(steps[arm]) for arm in (order if r % 2 == 0 else order[::-1])}
        if all(profile is not None for profile in seen.values()):
            for arm, profile in seen.items():
                out[arm].append(profile)
    return out


@dataclasses.dataclass(frozen=True)
class SitePaid:
    """A routed site's kernels per call in the model, the plugin arm's against stock's for the
    same calls (``stock_paid``), in each round where both were seen."""

    plugin_us: tuple[float, ...]
    stock_us: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """The median over rounds of stock's time over the plugin's (above 1: the plugin faster)."""
        return statistics.median(s / p for p, s in zip(self.plugin_us, self.stock_us))

    @property
    def plugin_median_us(self) -> float:
        return statistics.median(self.plugin_us)

    @property
    def stock_median_us(self) -> float:
        return statistics.median(self.stock_us)


def site_paid(stock: list[Profile], plugin: list[Profile], key) -> SitePaid | None:
    """``key``'s plugin kernels against what stock paid for them, round by round (the two arms'
    profiles of one round paired, ``profile_rounds``); None where no round saw both."""
    ours, theirs = [], []
    for s, p in zip(stock, plugin):
        o, t = p.time("plugin", key), stock_paid(s, p, key)
        if o and t and o.us > 0 and t.us > 0:
            ours.append(o.per_call_us)
            theirs.append(t.per_call_us)
    return SitePaid(tuple(ours), tuple(theirs)) if ours else None


def median_profile(profiles: list[Profile]) -> Profile | None:
    """One profile of an arm's rounds: each (runner, key)'s median time and calls per step, and
    the median total (a key missing from a round counts as 0 there)."""
    if not profiles:
        return None
    keys = {k for p in profiles for k in p.matmuls}
    zero = Kernels()
    matmuls = {k: Kernels(statistics.median(p.matmuls.get(k, zero).us for p in profiles),
                          statistics.median(p.matmuls.get(k, zero).calls for p in profiles)) for k in keys}  # fmt: skip
    return Profile(matmuls, statistics.median(p.total_us for p in profiles))


__all__ = ["Kernels", "Profile", "SitePaid", "attribute", "median_profile", "profile_rounds", "profile_step",
           "site_key", "site_paid", "stock_paid"]
