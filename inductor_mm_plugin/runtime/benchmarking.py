"""GPU time: the one way the package measures speed. Routing decisions (inductor/measure.py),
``compare`` (comparison/) and the bench scripts (bench/_timing.py) all time through here, as
every autotuner in Inductor goes through ``torch/_inductor/runtime/benchmarking.py``.

What a model step pays for a kernel is its GPU time: in a compiled model the GPU runs behind
a queue of launches, and under CUDA graphs there is no host cost at all. So a timed region is
either the replay of a CUDA graph of ``reps`` calls (``Timer``, the default) or, where the
calls cannot be captured, the same calls queued behind a GPU sleep long enough that the host
has enqueued them all before the GPU reaches the first (``queued``): either way the events
bracket GPU work with no host gaps in it. A loop of back-to-back calls timed with events
measures the host's cost per call whenever a kernel is shorter than that cost (issue 30:
kernels that ran 0.65x cuBLAS on the GPU read "1.64x faster" that way), so it is never used
for a verdict; ``host_us`` measures the host cost separately, for the one place it counts
(a graph compiled without CUDA graphs whose launches outrun its kernels).

Interleaved rounds: the H200's SM clock moves between about 1300 and 1980 MHz within seconds
under load, so arms are timed in rounds, the order alternating, and compared round by round
(``interleaved``); verdicts use the median of the per-round ratios.

Operands: ``operand`` makes fresh random data with a site's exact sizes, strides and storage
offset (so alignment, and with it the kernel path, is the site's), and ``copies`` says how
many operand sets to cycle through so that a replay reads them from memory, not from the L2 a
repeated call leaves them in (small sites measured on one buffer set read up to 1.07x faster
than they ran in a model; docs/performance.md).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Sequence

import torch

from .. import torch_c

TARGET_US = 300.0  # each timed region lasts about this long: events resolve it to ~1%
MOST_REPS = 64
MOST_COPIES = 16
_SLEEP_CYCLES_PER_US = 2000  # torch_c.gpu_sleep spins this many cycles per microsecond at ~2 GHz


# ------------------------------------------------------------------------- statistics


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``xs``, linear between order statistics (nan when empty)."""
    xs = sorted(xs)
    if not xs:
        return math.nan
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


# --------------------------------------------------------------------------- operands


def extent(shape: Sequence[int], stride: Sequence[int], offset: int = 0) -> int:
    """Elements of storage a tensor with this layout spans."""
    if not all(shape):
        return offset
    return offset + 1 + sum((s - 1) * st for s, st in zip(shape, stride))


def operand(shape, stride, offset: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Fresh random data with exactly these sizes, strides and storage offset."""
    storage = torch.randn(extent(shape, stride, offset), dtype=dtype, device=device)
    return storage.as_strided(tuple(shape), tuple(stride), offset)


def copies(bytes_per_set: int, device, factor: int = 2, most: int = MOST_COPIES) -> int:
    """How many operand sets to cycle through so that together they span ``factor`` times the
    device's L2 (at most ``most``: tiny problems stay partly cached; they are latency-bound)."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
    return max(1, min(most, -(-factor * l2 // max(1, bytes_per_set))))


# ----------------------------------------------------------------------------- timing


def elapsed_us(fn: Callable) -> float:
    """GPU time between events recorded before and after ``fn`` (whatever it enqueues)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def cycle(fns: Sequence[Callable], reps: int) -> Callable:
    """``reps`` calls, cycling through ``fns`` (one callable per operand set)."""

    def run():
        for i in range(reps):
            fns[i % len(fns)]()

    return run


def host_us(fns: Sequence[Callable], reps: int = 32) -> float:
    """The host's cost per call: the wall time to enqueue ``reps`` calls, the GPU idle before
    them so that no call waits on a full launch queue."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    cycle(fns, reps)()
    took = time.perf_counter() - t0
    torch.cuda.synchronize()
    return took * 1e6 / reps


def _warm(fns: Sequence[Callable]) -> None:
    # On a side stream, as torch.cuda.graph's documentation asks before a capture.
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()


class Timer:
    """The GPU time of one call, from ``reps`` calls cycling through ``fns``: ``timer()`` times
    one region and returns microseconds per call.

    ``reps`` (default: enough for about ``TARGET_US`` per region, a multiple of ``len(fns)``
    so every set runs as often) calls are captured once into a CUDA graph and replayed per
    region. Where capture fails (an op that cannot be captured), the calls are queued behind
    a GPU sleep instead (``how == "queued"``); ``graphs=False`` asks for that directly.
    ``fns`` must be compiled and planned already (call each once before)."""

    def __init__(self, fns: Sequence[Callable], reps: int | None = None, *, graphs: bool = True,
                 target_us: float = TARGET_US, most: int = MOST_REPS):  # fmt: skip
        fns = list(fns)
        _warm(fns)
        if reps is None:
            per_call = max(elapsed_us(cycle(fns, len(fns))) / len(fns), 0.5)
            reps = max(1, min(most, int(target_us / per_call)))
            reps = -(-reps // len(fns)) * len(fns)
        self.reps, self.how, self.note = reps, "queued", ""
        self._run = cycle(fns, reps)
        self._graph = None
        if graphs:
            try:
                graph = torch.cuda.CUDAGraph()
                # Thread-local: kernels the routing pass compiles in background threads load
                # modules and allocate meanwhile, which fails a capture in global mode.
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    self._run()
                graph.replay()  # the first replay uploads the graph
                torch.cuda.synchronize()
                self._graph, self.how = graph, "graphs"
            except Exception as e:  # noqa: BLE001  (timed queued instead, and said so)
                torch.cuda.synchronize()
                self.note = f"CUDA graph capture failed ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"  # fmt: skip
        if self._graph is None:
            self._sleep_cycles = int(host_us(fns, reps) * reps * 1.5 * _SLEEP_CYCLES_PER_US) + 10_000

    def __call__(self) -> float:
        if self._graph is not None:
            return elapsed_us(self._graph.replay) / self.reps
        torch_c.gpu_sleep(self._sleep_cycles)  # the GPU waits while the host enqueues every call
        return elapsed_us(self._run) / self.reps


def interleaved(timers: dict[str, Callable[[], float]], rounds: int,
                stop: Callable[[dict[str, list[float]]], bool] | None = None,
                mirrored: bool = False) -> dict[str, list[float]]:  # fmt: skip
    """name -> one time per round of ``timers[name]()``, the order reversed every round (A B,
    B A, A B, ...). ``stop(times)``, checked after each round, ends the rounds early.

    ``mirrored``: each round runs its order and then the reverse (A B B A, then B A A B), and an
    arm's time for the round is the mean of its two, so that a clock drifting within a round
    weighs on every arm alike. For steps of milliseconds: on the H200 a prefill step's time
    rose 4-12% from the first round to the second, and with the order alternating, an odd
    number of rounds put one arm first in most of them (llama-prefill's rounds read 0.951,
    1.042, 0.977: median 0.977; the two pairs of adjacent rounds 0.995 and 1.009)."""
    names = list(timers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        order = names if i % 2 == 0 else names[::-1]
        if mirrored:
            first = {name: timers[name]() for name in order}
            for name in order[::-1]:
                times[name].append((first[name] + timers[name]()) / 2)
        else:
            for name in order:
                times[name].append(timers[name]())
        if stop is not None and stop(times):
            break
    return times


def ratios(times: dict[str, list[float]], base: str, other: str) -> list[float]:
    """Per round, ``base``'s time over ``other``'s (above 1: ``other`` is faster)."""
    return [b / o for b, o in zip(times[base], times[other])]


__all__ = ["Timer", "copies", "cycle", "elapsed_us", "extent", "geomean", "host_us", "interleaved", "median",
           "operand", "quantile", "ratios"]  # fmt: skip
