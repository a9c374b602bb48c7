"""Which configs Inductor's templates (inductor/templates.py) are offered: the TMA template
takes the selector's unsplit pick for the same problem (else the hand rules'), the pointer
template has its own short rule, and SwiGLU's template its table entry. The tables are in
``hopper.py``.
"""

from __future__ import annotations

import dataclasses

from . import hopper as H
from . import selector
from .eager import candidate_configs, rule_config
from .space import SMEM_LIMIT_BYTES, MatmulConfig, Problem, cdiv, fills_a_wave, fits, persistent_programs, smem_bytes

SMEM_BUDGET = SMEM_LIMIT_BYTES - H.TEMPLATE_SMEM_HEADROOM


def pointer_template_configs(m: int, n: int, elem_bytes: int, num_sms: int, compete: bool = False) -> list[MatmulConfig]:
    """The pointer template's config for the shape (and, competing, the table's others)."""
    first = _pointer_template_config(m, n, elem_bytes, num_sms)
    chosen = [first] + ([c for c in H.TEMPLATE_PTR_COMPETE if c != first] if compete else [])
    return [c for c in chosen if fits(c, elem_bytes)]


def _pointer_template_config(m: int, n: int, elem_bytes: int, num_sms: int) -> MatmulConfig:
    if elem_bytes == 4:
        return H.TEMPLATE_PTR_FP32
    if m <= H.TEMPLATE_PTR_SKINNY_MAX_M:
        return MatmulConfig("ptr", max(16, 1 << (max(m, 1) - 1).bit_length()), 128, 128, 1, 4, 4)
    n_tiles = lambda bm, bn: cdiv(m, bm) * cdiv(n, bn)  # noqa: E731
    if n_tiles(128, 256) >= num_sms:
        return H.TEMPLATE_PTR_WIDE
    if fills_a_wave(n_tiles(128, 128), num_sms):
        return H.TEMPLATE_PTR_WAVE
    return H.TEMPLATE_PTR


def one_tile_per_program(cfg: MatmulConfig, m: int, n: int, k: int, num_sms: int) -> bool:
    """Whether the pointer template beats the TMA template here (hopper.TEMPLATE_ONE_WAVE_MAX_K)."""
    small_tiles = cfg.block_m * cfg.block_n <= 128 * 128
    n_tiles = cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n)
    return m > H.SKINNY_MAX_M and k <= H.TEMPLATE_ONE_WAVE_MAX_K and small_tiles and n_tiles <= num_sms


def tma_template_configs(m: int, n: int, k: int, elem_bytes: int, dtype: str, a_kmajor: bool, b_kmajor: bool,
                         num_sms: int, compete: bool = False) -> list[MatmulConfig]:  # fmt: skip
    """The TMA template's configs: the selector's pick among its unsplit TMA entries for the
    same problem, else the eager hand rules' (and the autotuning candidates when competing),
    without split-K (the template has no partial-sum workspace); [] where the hand rules would
    not use the TMA kernel, for fp32, or where one wave of the hand rules' tiles does the whole
    problem (``one_tile_per_program``: the pointer template takes it)."""
    problem = Problem(m, n, k, 1, elem_bytes, dtype, tma=True, a_kmajor=a_kmajor, b_kmajor=b_kmajor, c_tma=False,
                      num_sms=num_sms)  # fmt: skip
    rule = rule_config(problem)  # which template runs is decided on its tiles, as measured
    if rule.kernel != "tma" or elem_bytes == 4:
        return []
    if not compete and one_tile_per_program(rule, m, n, k, num_sms):
        return []
    # The selector's pick among the table's unsplit TMA entries (the template has no split-K),
    # else the hand rules'. By the table, 13-30% faster than the hand rules' tile on MLP-sized
    # problems with a narrow output (8192x768x3072: 63 against 72 us; 2048x3072x768: 20.5
    # against 23.8), the same tile on wide ones; not yet timed as a template.
    first = selector.select(problem, kernels=("tma",), unsplit=True) or rule
    out = []
    for cfg in [first, *candidate_configs(problem, kernels=("tma",))] if compete else [first]:
        # The store's layout conversion needs about a BLOCK_M x BLOCK_N output tile of shared
        # memory, which smem_bytes counts (half of that with the subtiled epilogue).
        subtile = cfg.block_m * cfg.block_n >= H.TEMPLATE_SUBTILE_FROM
        cfg = dataclasses.replace(cfg, split_k=1, split_tail=False, epilogue_subtile=subtile,
                                  flatten=cfg.flatten or cfg.split_k > 1)  # fmt: skip
        while smem_bytes(cfg, elem_bytes) > SMEM_BUDGET and cfg.num_stages > 2:
            cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
        if cfg.kernel == "tma" and smem_bytes(cfg, elem_bytes) <= SMEM_BUDGET and cfg not in out:
            out.append(cfg)
    return out


def swiglu_smem_bytes(cfg: MatmulConfig, elem_bytes: int) -> int:
    """Shared memory of the SwiGLU template: the TMA kernel's plus the second weight's tile in
    every stage."""
    return smem_bytes(cfg, elem_bytes) + cfg.block_n * cfg.block_k * elem_bytes * cfg.num_stages


def swiglu_template_configs(elem_bytes: int, compete: bool = False) -> list[MatmulConfig]:
    return [c for c in (H.SWIGLU_COMPETE if compete else [H.SWIGLU]) if swiglu_smem_bytes(c, elem_bytes) <= SMEM_BUDGET]


def template_programs(cfg: MatmulConfig, m: int, n: int, num_sms: int) -> int:
    """The persistent templates' program count: as many as the eager kernel runs for the same
    tiles (``persistent_programs``), a constant there because those templates take static shapes."""
    return persistent_programs(cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n), num_sms)
