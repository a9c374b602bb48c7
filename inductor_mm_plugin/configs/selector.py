"""The config selector fitted to a sweep: each candidate config's time on a problem estimated
from the work it schedules, and the fastest estimate taken.

    time ~ c0 * rounds * k_steps + c1 * rounds + c2 + c3 * split-K partial MB

``rounds`` is the wave-quantized number of work items per SM (output tiles times K slices
over the SMs, rounded up), ``k_steps`` the BLOCK_K steps of one slice (with ``split_tail``:
the whole rounds' steps plus one slice's, and ``rounds`` those rounds plus the slices' one):
how long the busiest SM computes, the step cost and the per-item cost being the config's own
(tile shape, warps, stages, flattening, layout handled by the fit). The last term is the
partials' round trip through the workspace. The pointer kernel is not persistent: ``per_sm``
of its programs share an SM at once, a number fitted with the coefficients (the one of 1-4
that fits best); the TMA kernel runs one program per SM.

The coefficients are fitted per config, by least squares on relative
error, to ``bench/sweep_selector.py`` over drawn shapes (random and real models' shapes,
GPU time against cuBLAS); the table, with the sweep's command, seeds, date and commit, is
``tables/NVIDIA_H200.json``. It covers 16-bit single matrices whose operands TMA can read;
there the pointer kernel's entries (Inductor's own mm configs) compete with the TMA kernel's.
Batches, fp32 and unaligned operands keep the hand rules of ``eager.py``.

Leave-one-shape-out on the first sweep (270 shapes, 7f517da's rows): geomean 1.037 of cuBLAS
against 0.991 for the hand rules, the per-shape best config 1.065 (docs/performance.md,
"The selector").
"""

from __future__ import annotations

import functools
import json
import pathlib
import warnings
from typing import NamedTuple

from .hopper import SKINNY_MAX_M  # the skinny grid's range: its tiles are M rows tall
from .space import DEFAULT_NUM_SMS, MatmulConfig, Problem, cdiv, fits, pow2_ceil, tail_fits, useful_split

FEATURES = ["rounds * k_steps", "rounds", "1", "split-K partials (MB)"]
MIN_POINTS = 5  # a config timed on fewer shapes gets no entry
# The pointer kernel's entries, swept on one draw (41001, aligned shapes only), are fitted on
# fewer shapes each: they need 10, and win only where estimated 1.2x faster than the best TMA
# entry. Leave-one-shape-out on that draw's 51 aligned shapes: geomean 0.908 of cuBLAS, p10
# 0.731, against 0.874 / 0.726 for the TMA entries alone and 0.906 / 0.702 without the margin
# (docs/performance.md, "The selector").
POINTER_MIN_POINTS = 10
POINTER_MARGIN = 1.2
TABLE = pathlib.Path(__file__).parent / "tables" / "NVIDIA_H200.json"


class Entry(NamedTuple):
    config: MatmulConfig
    skinny: bool  # a TMA tile of the skinny grid (M <= SKINNY_MAX_M, as tall as M)
    coef: tuple
    per_sm: int = 1  # programs an SM runs at once


def features(M: int, N: int, K: int, cfg: MatmulConfig, num_sms: int = DEFAULT_NUM_SMS, per_sm: int = 1) -> list[float]:
    if cfg.split_tail:
        # The whole rounds over all of K, then (where tiles are left) one round of slices.
        n_tiles = cdiv(M, cfg.block_m) * cdiv(N, cfg.block_n)
        whole_rounds, tail = divmod(n_tiles, num_sms)
        k_full = cdiv(K, cfg.block_k)
        k_steps = whole_rounds * k_full + (cdiv(k_full, cfg.split_k) if tail else 0)
        partials = tail * cfg.block_m * cfg.block_n * cfg.split_k * 4 / 1e6
        return [float(k_steps), float(whole_rounds + (tail > 0)), 1.0, partials]
    items = cdiv(M, cfg.block_m) * cdiv(N, cfg.block_n) * cfg.split_k
    rounds = cdiv(items, num_sms * per_sm)
    k_steps = cdiv(cdiv(K, cfg.block_k), cfg.split_k)
    partials = M * N * cfg.split_k * 4 / 1e6 if cfg.split_k > 1 else 0.0
    return [float(rounds * k_steps), float(rounds), 1.0, partials]


@functools.lru_cache(maxsize=4)
def table(path: pathlib.Path = TABLE) -> tuple[Entry, ...]:
    """The entries of a fitted table; empty, with a warning (once per path: cached), where
    there is none, as in an install that left the package data out."""
    if not path.exists():
        warnings.warn(f"inductor_mm_plugin: no config selector table at {path}; every call takes the hand-written "
                      "rules (configs/eager.py), which are slower on most shapes", RuntimeWarning, 2)  # fmt: skip
        return ()
    data = json.loads(path.read_text())
    if data.get("features") != FEATURES:
        raise ValueError(f"{path}: fitted for features {data.get('features')}, the selector computes {FEATURES}")
    return tuple(Entry(MatmulConfig.from_json(e["config"]), bool(e["skinny"]), tuple(e["coef"]), e.get("per_sm", 1))
                 for e in data["entries"])  # fmt: skip


def estimate_us(p: Problem, e: Entry) -> float:
    return sum(c * f for c, f in zip(e.coef, features(p.M, p.N, p.K, e.config, p.num_sms, e.per_sm)))


def covers(p: Problem, e: Entry) -> bool:
    """Whether ``e`` was fitted on problems like ``p``: a skinny TMA tile exactly as tall as M
    rounded up (the grid's), the main grid above SKINNY_MAX_M; a pointer tile shaped as
    Inductor shrinks its configs to a problem, as swept: along each side no larger than the
    side rounded up to a power of two, and BLOCK_M and BLOCK_N at least 32 (Inductor's
    smallest) unless that is the side rounded up."""
    cfg = e.config
    if cfg.kernel == "ptr":
        sides = ((cfg.block_m, max(16, pow2_ceil(p.M)), 32), (cfg.block_n, max(16, pow2_ceil(p.N)), 32),
                 (cfg.block_k, max(16, pow2_ceil(p.K)), 16))  # fmt: skip
        return all(b == side or least <= b < side for b, side, least in sides)
    if e.skinny != (p.M <= SKINNY_MAX_M):
        return False
    return not e.skinny or cfg.block_m == max(16, pow2_ceil(p.M))


def select(p: Problem, entries: tuple[Entry, ...] | None = None, kernels=("tma", "ptr"),
           unsplit: bool = False) -> MatmulConfig | None:  # fmt: skip
    """The config with the lowest estimated time for ``p`` among the entries of ``kernels``
    that cover it (``covers``; with ``unsplit``, only those timed without split-K), or None
    where the table does not cover the problem at all."""
    if not p.tma or p.elem_bytes != 2 or p.batch != 1:
        return None
    entries = table() if entries is None else entries
    best = None
    for e in entries:
        cfg = e.config
        if cfg.kernel not in kernels or (unsplit and cfg.split_k > 1):
            continue
        if not (covers(p, e) and fits(cfg, p.elem_bytes) and useful_split(p.K, cfg.block_k, cfg.split_k)):
            continue
        if cfg.split_tail and not tail_fits(p, cfg):
            continue
        t = estimate_us(p, e) * (POINTER_MARGIN if cfg.kernel == "ptr" else 1.0)
        if best is None or t < best[0]:
            best = (t, cfg)
    return None if best is None else best[1]
