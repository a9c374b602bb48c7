"""Sure losers and sure winners, answered without timing them: a committed per-GPU table of
measured shape classes (``shape_tables/<GPU>.json``, built by ``bench/shapes.py
--routing-table`` from its GPU-time rows).

A shape class (``shape_class``) groups matmuls that take the same kernel path and fill the
GPU alike. Where every measured shape of a class lost to cuBLAS by more than the routing
margin, a site of that class stays on stock untimed; where every one won by ``WINS_ABOVE``,
it is routed untimed (only under CUDA graphs: without them, host cost can matter, which the
table does not know). Everything else is measured (measure.py). Only sites laid out as the
table's rows were (A row-major, B row-major or an ``nn.Linear`` weight, 16-bit, aligned
bases) are answered; any other layout is measured.

The table cuts compile time where the kernel is known to lose, which on the H200 is most
classes (docs/performance.md); it never routes on a guess: a class needs ``MIN_ROWS`` rows,
and a winner must have won each by 10%.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib

import torch

from .selection import not_routed

# Datasheet peaks (dense 16-bit FLOP/s, memory bytes/s) per table's GPU: no kernel runs a site
# faster than its work at these rates (``floor_us``). Unknown GPUs: above any shipping part.
PEAKS = {"NVIDIA H200": (989e12, 4.8e12), "NVIDIA H100 80GB HBM3": (989e12, 3.35e12)}
_ANY_GPU_PEAKS = (2.5e15, 8e12)
LOSES_BELOW = 1 / 1.02  # the best row of the class: below this, no row came near the margin
WINS_ABOVE = 1.10  # the worst row of the class: above this, every row won clearly
MIN_ROWS = 3
TABLES = pathlib.Path(__file__).with_name("shape_tables")

_M_EDGES = (1, 16, 64, 256, 1024, 4096)  # M buckets: 1, 2-16, 17-64, ..., 1025-4096, >4096
_NK_EDGES = (1024, 4096)  # N and K buckets: <=1024, 1025-4096, >4096


def _bucket(x: int, edges: tuple[int, ...], name: str) -> str:
    lo = 1
    for edge in edges:
        if x <= edge:
            return f"{name}{lo}-{edge}" if lo != edge else f"{name}{edge}"
        lo = edge + 1
    return f"{name}>{edges[-1]}"


def shape_class(M: int, N: int, K: int, dtype: str, layout: str, aligned: bool) -> str:
    """The measurement class of a matmul, e.g. ``"16bit/linear/aligned/M17-64/N>4096/K1025-4096"``.

    What decides which kernel runs and how well it does: the element width (bf16 and fp16
    take the same kernels; fp32 TF32 others), the layout (B ``row`` or ``linear``; ``t_row``
    and ``t_linear`` with A transposed, as a weight gradient's ``grad.t() @ x`` has it),
    whether the rows are 16-byte aligned (TMA or the pointer kernel), M (decode sizes take split-K and
    narrow tiles), and N, K (waves of tiles, split-K). Buckets on powers of four, so that a
    log-uniform draw fills them evenly: M 1, 2-16, 17-64, 65-256, 257-1024, 1025-4096, >4096;
    N and K <=1024, 1025-4096, >4096 (252 classes per width). ``dtype``: "bf16", "fp16" or
    "fp32"; ``aligned``: every operand's rows 16 bytes apart (``is_aligned``)."""
    width = "fp32" if dtype in ("fp32", "tf32") else "16bit"
    return "/".join((width, layout, "aligned" if aligned else "unaligned", _bucket(M, _M_EDGES, "M"),
                     _bucket(N, _NK_EDGES, "N"), _bucket(K, _NK_EDGES, "K")))  # fmt: skip


def is_aligned(N: int, K: int, dtype: str, M: int | None = None) -> bool:
    """Rows of A, B and the result start 16 bytes apart (what TMA needs) in either layout of
    B; ``M`` where A is transposed (its rows are M long then)."""
    per16 = 4 if dtype in ("fp32", "tf32") else 8
    return N % per16 == 0 and K % per16 == 0 and (M is None or M % per16 == 0)


def site_class(op: str, vals: list, alpha=1, beta=1) -> str | None:
    """The class of a site laid out as the table's rows were, else None (measured instead)."""
    if op not in ("mm", "addmm") or alpha != 1 or beta not in (0, 1):
        return None
    a, b = vals[-2], vals[-1]
    if a.dtype not in (torch.bfloat16, torch.float16) or any(v.dtype != a.dtype for v in vals):
        return None
    if any(v.storage_offset() * v.element_size() % 16 for v in vals):
        return None
    (M, K), N = a.shape, b.shape[-1]
    if not all(isinstance(d, int) for d in (M, N, K, *a.stride(), *b.stride())):
        return None
    a_t = M > 1 and K > 1 and tuple(a.stride()) == (1, M)
    if tuple(a.stride()) != (K, 1) and M > 1 and not a_t:
        return None
    layout = "row" if tuple(b.stride()) == (N, 1) else "linear" if tuple(b.stride()) == (1, K) else None
    if layout is None:
        return None
    return shape_class(M, N, K, "bf16", "t_" * a_t + layout, is_aligned(N, K, "bf16", M if a_t else None))


@dataclasses.dataclass(frozen=True)
class Answer:
    verdict: str  # "loses" or "wins"
    shape_class: str
    n: int
    best: float  # cuBLAS time / plugin time, the class's best and worst rows
    worst: float
    gpu: str

    def least_saving_us(self, vals: list) -> float:
        """What a winner's site saves per call at the least: its time is at least ``floor_us``,
        and the class's worst row won by ``worst``."""
        return floor_us(vals, self.gpu) * (1 - 1 / self.worst)

    def describe(self) -> str:
        rows = f"{self.n} shapes of class {self.shape_class} measured {self.worst:.2f}-{self.best:.2f}x cuBLAS"
        if self.verdict == "loses":
            return not_routed("sure_loser", rows=rows, gpu=self.gpu)
        return f"{rows} on the {self.gpu} (shape table): a sure winner, routed without timing"


def floor_us(vals: list, gpu: str) -> float:
    """The least time of an (a, b) or (bias, a, b) site on ``gpu``: its FLOPs or its bytes
    (operands and result) at the GPU's peaks (``PEAKS``)."""
    a, b = vals[-2], vals[-1]
    (M, K), N = a.shape, b.shape[-1]
    flops, bytes_ = 2 * M * N * K, (M * K + K * N + M * N) * a.element_size()
    peak_flops, peak_bytes = PEAKS.get(gpu, _ANY_GPU_PEAKS)
    return max(flops / peak_flops, bytes_ / peak_bytes) * 1e6


def _slug(gpu: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in gpu)


@functools.lru_cache(maxsize=None)
def table(gpu: str) -> dict:
    """The committed table of this GPU (``{}`` where there is none, or it does not parse)."""
    try:
        data = json.loads((TABLES / f"{_slug(gpu)}.json").read_text())
    except (OSError, ValueError):
        return {}
    classes = data.get("classes") if isinstance(data, dict) else None
    return classes if isinstance(classes, dict) else {}


def lookup(op: str, vals: list, alpha=1, beta=1) -> Answer | None:
    """The table's sure answer for a CUDA site, or None (measure it)."""
    cls = site_class(op, vals, alpha, beta)
    if cls is None:
        return None
    if not torch.cuda.is_available():
        return None  # no GPU to name a table by (the routing tests' fake CUDA sites)
    gpu = torch.cuda.get_device_name(vals[-1].device)
    entry = table(gpu).get(cls)
    if not isinstance(entry, dict) or entry.get("verdict") not in ("loses", "wins"):
        return None
    if entry["verdict"] == "wins" and op != "mm":
        return None  # winners were measured as plain mm; a bias epilogue is measured
    try:
        return Answer(entry["verdict"], cls, int(entry["n"]), float(entry["best"]), float(entry["worst"]), gpu)
    except (KeyError, TypeError, ValueError):
        return None


def build(rows: list[dict]) -> dict:
    """shape class -> n, best, worst, geomean and verdict ("loses", "wins" or "measure"), from
    ``bench/shapes.py`` rows (``ratio`` = cuBLAS time / plugin time, GPU time)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r.get("ratio") and math.isfinite(r["ratio"]):
            by.setdefault(r["shape_class"], []).append(float(r["ratio"]))
    out = {}
    for cls in sorted(by):
        xs = by[cls]
        verdict = "measure"
        if len(xs) >= MIN_ROWS and max(xs) < LOSES_BELOW:
            verdict = "loses"
        elif len(xs) >= MIN_ROWS and min(xs) > WINS_ABOVE:
            verdict = "wins"
        geomean = math.exp(sum(math.log(x) for x in xs) / len(xs))
        out[cls] = {"n": len(xs), "best": round(max(xs), 4), "worst": round(min(xs), 4),
                    "geomean": round(geomean, 4), "verdict": verdict}  # fmt: skip
    return out


def clear() -> None:
    table.cache_clear()
