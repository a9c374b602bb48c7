"""Split-K's per-tile counters, zeroed once and reused, so that a launch needs no memset.

The TMA kernel's split-K (kernels/matmul_tma.py) counts the K slices of each output tile
that have stored their partials: one int32 per tile, zero when the launch starts. The last
slice of a tile sets its counter back to zero, so every launch leaves its counters as it
found them. A fresh ``torch.zeros`` per launch is one more node in a CUDA graph, and on the
H200 it cost ~1 us of a 10 us decode call (1x4096x4096 under CUDA graphs: 10.6-10.8 against
9.5-9.8 us with these counters,
bench/results/archive/2026-12-01-NVIDIA_H200-split-k-reused-counters.txt).

Reused counters are correct as long as no two launches that share them run at the same time.
That is what this module arranges:

* an eager launch takes its stream's counters (one region per device and stream): launches
  on one stream run one after another, launches on two streams never share;
* a launch captured into a CUDA graph takes counters of its own, carved from a reserve zeroed
  before the capture and never handed out again, so no eager launch and no other captured
  launch shares them (only the same graph replayed on two streams at once would, and that
  already shares every buffer the graph allocated).

Captured counters stay taken after their graph is gone (nothing says when a graph is freed):
4 bytes per output tile per captured split-K launch, a few hundred bytes each.

Where neither applies, the launch gets fresh zeroed counters as before: a grid of more than
``REGION`` tiles, or a capture with no reserve left (the reserve is filled by eager launches,
so a capture whose first split-K launch is inside it takes this path once).

The counters are allocated outside CUDA-graph memory pools. CUDA-graph trees
(``torch.compile(mode="reduce-overhead")``) route every allocation of the thread that warms a
graph up into their private pool (``torch._inductor.cudagraph_trees._use_cuda_memory_pool_manager``,
``torch._C._cuda_beginAllocateCurrentThreadToPool``) and reject any tensor still alive there
afterwards that is not a graph output ("Detected 1 tensor(s) in the cudagraph pool not tracked
as outputs"; warm-up moved into the pool in pytorch/pytorch#96433, and the same problem for
cuBLAS's cached workspaces was pytorch/pytorch#194109, closed: warm-up and capture are to stay
on one thread). So the long-lived counters are allocated, and zeroed, on a short-lived thread of
their own, on a stream of their own, which the launching thread waits for. That thread
synchronizes its stream once per region or reserve chunk; if another thread is capturing a
CUDA graph in torch's default "global" capture mode at that moment, CUDA refuses the call and
that capture fails with an error (never a wrong result). Warm up before capturing on several
threads at once.
"""

from __future__ import annotations

import threading

import torch

# Counters per region: one per output tile. Split-K is chosen for grids of a few hundred
# tiles at most (configs/eager.py); larger ones take fresh counters.
REGION = 4096
# Counters per reserve chunk, from which captured launches take their own.
RESERVE_CHUNK = 1 << 16
_PER_16_BYTES = 4  # int32 counters

_lock = threading.Lock()
_by_stream: dict[tuple[str, int, int], torch.Tensor] = {}
_reserve: dict[tuple[str, int], list] = {}  # device -> [chunk, next free counter]
_kept: list[torch.Tensor] = []  # spent reserve chunks: captured graphs still use them


def fresh_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Zeroed counters for one launch (the fallback, and what the launcher did before)."""
    return torch.zeros(tiles, dtype=torch.int32, device=device)


def counters(device: torch.device, tiles: int, stream: int = 0) -> torch.Tensor:
    """Zeroed counters for a launch of ``tiles`` output tiles on ``stream`` (a raw stream
    handle; CPU launches, which run in Triton's interpreter one at a time, pass 0)."""
    if tiles > REGION:
        return fresh_counters(device, tiles)
    dev = (device.type, device.index or 0)
    if _capturing(device):
        with _lock:
            chunk = _reserve.get(dev)
            if chunk is None or chunk[1] + tiles > RESERVE_CHUNK:
                # Nothing zeroed outside the graph to take from: the graph zeroes its own.
                return fresh_counters(device, tiles)
            start = chunk[1]
            # Whole 16-byte groups: Triton specializes a pointer on 16-byte alignment, so an
            # unaligned slice would compile the kernel again, inside the capture.
            chunk[1] += -(-tiles // _PER_16_BYTES) * _PER_16_BYTES
            return chunk[0][start : start + tiles]
    key = (*dev, stream)
    region = _by_stream.get(key)
    chunk = _reserve.get(dev)
    if region is None or chunk is None or chunk[1] + REGION > RESERVE_CHUNK:
        region = _refill(device, key)
    return region[:tiles]


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _refill(device: torch.device, key: tuple[str, int, int]) -> torch.Tensor:
    """The stream's region, allocated if missing, and a reserve with at least a region's
    worth of counters left for captured launches."""
    dev = key[:2]
    with _lock:
        region = _by_stream.get(key)
        chunk = _reserve.get(dev)
        need_region = region is None
        need_chunk = chunk is None or chunk[1] + REGION > RESERVE_CHUNK
        if need_region or need_chunk:
            n = (REGION if need_region else 0) + (RESERVE_CHUNK if need_chunk else 0)
            fresh = _zeros_outside_graph_pools(device, n)
            if need_region:
                region = _by_stream[key] = fresh[:REGION]
            if need_chunk:
                if chunk is not None:
                    _kept.append(chunk[0])
                _reserve[dev] = [fresh[REGION if need_region else 0 :], 0]
        return region


def _zeros_outside_graph_pools(device: torch.device, n: int) -> torch.Tensor:
    """``torch.zeros(n, int32)`` in the caching allocator's ordinary pool, complete before
    this returns (see the module docstring for why another thread)."""
    if device.type != "cuda":
        return torch.zeros(n, dtype=torch.int32, device=device)

    def allocate():
        with torch.cuda.device(device):
            stream = torch.cuda.Stream(device)
            with torch.cuda.stream(stream):
                zeros = torch.zeros(n, dtype=torch.int32, device=device)
            stream.synchronize()
        return zeros

    return _on_own_thread(allocate)


def _on_own_thread(fn):
    """``fn()`` run on a new thread, waited for; its result, or its exception raised here."""
    result: dict = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
            result["error"] = e

    thread = threading.Thread(target=run, name="inductor_mm_plugin split-K counters")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def clear() -> None:
    """Forget every region and the reserve (tests). Counters that captured graphs use stay
    alive."""
    with _lock:
        _kept.extend(chunk[0] for chunk in _reserve.values())
        _by_stream.clear()
        _reserve.clear()
