"""The config selector fitted to a sweep: each candidate config's time on a problem estimated
from the work it schedules, and the fastest estimate taken.

    time ~ c0 * rounds * k_steps + c1 * rounds + c2 + c3 * split-K partial MB

``rounds`` is the wave-quantized number of work items per SM (output tiles times K slices
over the SMs, rounded up), ``k_steps`` the BLOCK_K steps of one slice: how long the busiest
SM computes, the step cost and the per-item cost being the config's own (tile shape, warps,
stages, flattening, layout handled by the fit). The last term is the partials' round trip
through the workspace. The coefficients are fitted per config, by least squares on relative
error, to ``bench/sweep_selector.py`` over drawn shapes (random and real models' shapes,
GPU time against cuBLAS); the table, with the sweep's command, seeds, date and commit, is
``tables/NVIDIA_H200.json``. It covers 16-bit single matrices read through TMA: batches,
fp32 and the pointer kernel keep the hand rules of ``eager.py``.

Leave-one-shape-out on the first sweep (270 shapes, 7f517da's rows): geomean 1.037 of cuBLAS
against 0.991 for the hand rules, the per-shape best config 1.065 (docs/performance.md,
"The selector").
"""

from __future__ import annotations

import functools
import json
import pathlib

from .hopper import SKINNY_MAX_M  # the skinny grid's range: its tiles are M rows tall
from .space import DEFAULT_NUM_SMS, MatmulConfig, Problem, cdiv, fits, pow2_ceil, useful_split

FEATURES = ["rounds * k_steps", "rounds", "1", "split-K partials (MB)"]
MIN_POINTS = 5  # a config timed on fewer shapes gets no entry
TABLE = pathlib.Path(__file__).parent / "tables" / "NVIDIA_H200.json"


def features(M: int, N: int, K: int, cfg: MatmulConfig, num_sms: int = DEFAULT_NUM_SMS) -> list[float]:
    items = cdiv(M, cfg.block_m) * cdiv(N, cfg.block_n) * cfg.split_k
    rounds = cdiv(items, num_sms)
    k_steps = cdiv(cdiv(K, cfg.block_k), cfg.split_k)
    partials = M * N * cfg.split_k * 4 / 1e6 if cfg.split_k > 1 else 0.0
    return [float(rounds * k_steps), float(rounds), 1.0, partials]


@functools.lru_cache(maxsize=4)
def table(path: pathlib.Path = TABLE) -> tuple:
    """((config, skinny, coefficients), ...) of a fitted table; empty where there is none."""
    if not path.exists():
        return ()
    data = json.loads(path.read_text())
    if data.get("features") != FEATURES:
        raise ValueError(f"{path}: fitted for features {data.get('features')}, the selector computes {FEATURES}")
    return tuple((MatmulConfig.from_json(e["config"]), bool(e["skinny"]), tuple(e["coef"])) for e in data["entries"])


def estimate_us(p: Problem, cfg: MatmulConfig, coef) -> float:
    return sum(c * f for c, f in zip(coef, features(p.M, p.N, p.K, cfg, p.num_sms)))


def select(p: Problem, entries: tuple | None = None) -> MatmulConfig | None:
    """The table's config with the lowest estimated time for ``p``, or None where the table
    does not cover it. Skinny problems (M <= 128) choose among the skinny grid's tiles of
    their own height (M rounded up to a power of two, at least 16); the others among the
    main grid."""
    if not p.tma or p.elem_bytes != 2 or p.batch != 1:
        return None
    entries = table() if entries is None else entries
    skinny = p.M <= SKINNY_MAX_M
    best = None
    for cfg, is_skinny, coef in entries:
        if is_skinny != skinny or (skinny and cfg.block_m != max(16, pow2_ceil(p.M))):
            continue
        if not (fits(cfg, p.elem_bytes) and useful_split(p.K, cfg.block_k, cfg.split_k)):
            continue
        t = estimate_us(p, cfg, coef)
        if best is None or t < best[0]:
            best = (t, cfg)
    return None if best is None else best[1]
