"""Time candidate kernel configs per shape class on the GPU, in rounds against torch.mm: the data
behind the config tables in the package (``configs``), and the way to settle one choice.

    python bench/sweep_configs.py --groups llm skinny --out DIR [--rounds 3] [--jobs 16]

Compiles every (config, shape, layout) in a process pool first (Triton's disk cache is
shared). Then per shape: fresh random inputs; every config's output (``runtime.launch`` with
``config=``) checked against the float64 reference with the tests' error bound (a wrong or
failing config is recorded, not timed); then torch.mm, the op with the heuristic's pick and
every config timed in ``--rounds`` rounds, the order reversed each round (``_timing.rounds``:
under the H200's power limit two sweeps minutes apart disagreed by up to 18% on one shape
when each config was timed once), with ``do_bench`` (L2 flushed) or, for the decode groups,
CUDA graphs (``_timing.GraphTimer``). ratio = torch.mm time / config time within a round, the
median over rounds (above 1: faster than cuBLAS).

Appends one JSONL row per (group, shape, layout) to ``<out>/sweep.jsonl``: date, commit, gpu,
torch, triton, group, M, N, K, dtype, layout, timing, cublas_ms, heuristic, heuristic_ms,
heuristic_ratio, best, best_ms, best_ratio, and ``results`` (config, ms, ratio,
ratio_rounds, error for each config), and prints per shape torch.mm, the heuristic's pick and
the best config.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys

import torch
from _timing import (
    GraphTimer, add_common_args, append_jsonl, config_name, dtype_of, make_operands, matmul_config_class, matmul_error,
    median, plugin_runtime, precompile, print_configs, ratios, require_cuda, rounds, run_meta, time_ms,
)  # fmt: skip

SMEM_LIMIT_BYTES = 232448  # H100 / H200: 227 KB of shared memory per block


def T(bm, bn, bk, g, w, s, split=1, sub=False, flat=False, tail=False):
    """A TMA-kernel config (keywords: the fields the package keeps; ``split_tail`` only where
    set, so the grid still builds against a commit without it)."""
    extra = {"split_tail": True} if tail else {}
    return matmul_config_class()("tma", bm, bn, bk, group_m=g, num_warps=w, num_stages=s, split_k=split,
                                 epilogue_subtile=sub, flatten=flat, **extra)  # fmt: skip


def P(bm, bn, bk, g, w, s):
    """A pointer-kernel config."""
    return matmul_config_class()("ptr", bm, bn, bk, group_m=g, num_warps=w, num_stages=s)


def _fits(cfg, elem_bytes=2) -> bool:
    """The package's shared-memory rule where it exposes one (``configs.fits``), else the same
    arithmetic: pipelined A and B stages, plus the TMA kernel's store buffer."""
    module = sys.modules[type(cfg).__module__]
    if hasattr(module, "fits"):
        return module.fits(cfg, elem_bytes)
    per_stage = (cfg.block_m + cfg.block_n) * cfg.block_k * elem_bytes
    if cfg.kernel == "ptr":
        return per_stage * cfg.num_stages <= SMEM_LIMIT_BYTES
    sub_n = cfg.block_n // 2 if cfg.epilogue_subtile else cfg.block_n
    return per_stage * cfg.num_stages + cfg.block_m * sub_n * elem_bytes + 1024 <= SMEM_LIMIT_BYTES


def _deepest(cfg, most=6):
    for s in range(most, 1, -1):
        if _fits(dataclasses.replace(cfg, num_stages=s)):
            return dataclasses.replace(cfg, num_stages=s)
    return cfg


def _skinny_rows(M):
    """The skinny tiles' height: M rounded up to a power of two, at least 16."""
    return max(16, 1 << (M - 1).bit_length()) if M > 1 else 16


def _skinny_configs(M):
    """BLOCK_N x split x BLOCK_K (x warps for the widest tiles), as deep as shared memory allows."""
    bm = _skinny_rows(M)
    out = []
    for bn in (32, 64, 128):
        for split in (1, 2, 3, 4):
            for bk in (128, 256) if bm < 64 else (128,):
                for w in (4, 8) if bn == 128 else (4,):
                    out.append(_deepest(T(bm, bn, bk, 1, w, 6, split, False, split == 1)))
    return list(dict.fromkeys(out))


def _skinny_unsplit(M):
    """The skinny sweep's unsplit 4-warp tiles, each with the tile loop flattened and not: the
    heuristic's sweeps (``skinny``) only timed them flattened, and a probe kernel without
    flattening ran 16x4096x4096 in 8.8 us against the op's 10.8 (tma_fixed_cost.py, removed)."""
    unsplit = [c for c in _skinny_configs(M) if c.split_k == 1 and c.num_warps == 4]
    return [dataclasses.replace(c, flatten=flat) for c in unsplit for flat in (True, False)]


def _skinny_lows(M):
    """The skinny sweep's configs plus BLOCK_K = 256 for 64- and 128-row tiles (the skinny sweep
    gave those 128 only), for the rows still below 0.95 of cuBLAS once split-K's counters were
    reused (2026-12-01: no memset per launch, which the skinny sweeps had charged every split
    config ~1 us)."""
    bm = _skinny_rows(M)
    extra = []
    if bm >= 64:
        extra = [_deepest(T(bm, bn, 256, 1, 4, 6, split, False, split == 1)) for bn in (32, 64) for split in (1, 2, 4)]
    return list(dict.fromkeys(_skinny_configs(M) + extra))


def _ptr_skinny(M):
    """Pointer-kernel tiles for a skinny product read in place: (M rounded up) x BLOCK_N, K
    split up to 16 ways, 64- or 128-deep steps (eager._pointer's rule is one point of this)."""
    bm = _skinny_rows(M)
    cfg = matmul_config_class()
    return [cfg("ptr", bm, bn, bk, group_m=1, num_warps=4, num_stages=3, split_k=split)
            for bn in (32, 64, 128) for bk in (64, 128) for split in (1, 2, 4, 8, 16)]  # fmt: skip


def _drawn_unaligned_skinny(seed, n=16):
    """``n`` shapes of the random suite's distribution (suites.random_shapes) with M <= 64 and
    at least one operand whose rows TMA cannot read: drawn, not listed."""
    from suites import random_shapes, shape_aligned

    picked = []
    for s in random_shapes(40 * n, seed):
        if s["M"] <= 64 and not shape_aligned(s) and len(picked) < n:
            picked.append(((s["M"], s["N"], s["K"]), s["layout"], s["dtype"]))
    return picked


# Inductor's own Triton mm template configs (template_heuristics.triton.BaseConfigHeuristic
# .mm_configs: BLOCK_M, BLOCK_N, BLOCK_K, stages, warps), shrunk to the problem the way
# Inductor shrinks them (_scale_mm_configs: each block at most the size rounded up to a power
# of two, at least 16; warps at most BLOCK_M * BLOCK_N / 256), run by our pointer kernel:
# part of sweep_selector.py's grid on aligned shapes.
INDUCTOR_MM_CONFIGS = [
    (32, 32, 16, 1, 2), (32, 32, 128, 2, 4), (32, 64, 32, 5, 8), (64, 32, 32, 5, 8), (64, 32, 128, 5, 4),
    (64, 64, 16, 2, 4), (64, 64, 32, 2, 4), (64, 64, 64, 3, 8), (64, 64, 128, 5, 4), (64, 128, 32, 3, 4),
    (64, 128, 32, 4, 8), (64, 128, 64, 3, 4), (64, 128, 128, 4, 4), (128, 64, 32, 3, 4), (128, 64, 32, 4, 8),
    (128, 128, 32, 2, 8), (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8), (128, 128, 128, 4, 8),
    (128, 256, 64, 4, 8),
]  # fmt: skip


def _ptr_inductor(shape):
    """Inductor's mm configs scaled to ``shape`` (M, N, K), as pointer-kernel configs."""
    M, N, K = shape
    hint = [max(16, 1 << (x - 1).bit_length()) for x in (M, N, K)]
    out = []
    for bm, bn, bk, s, w in INDUCTOR_MM_CONFIGS:
        bm, bn, bk = (max(16, min(b, h)) for b, h in zip((bm, bn, bk), hint))
        w = max(1, min(w, bm * bn // 256))
        if _fits(P(bm, bn, bk, 8, w, s)):
            out.append(P(bm, bn, bk, 8, w, s))
    if M > 64 and K > 512:  # what Inductor's list lacks there: split K
        cfg, bm = matmul_config_class(), min(128, hint[0])
        out += [cfg("ptr", bm, bn, 64, group_m=8, num_warps=4 if bn == 64 else 8, num_stages=3, split_k=split)
                for bn in (64, 128) for split in (2, 4, 8) if K // split >= 256]  # fmt: skip
    return list(dict.fromkeys(out))


def _tiles(shape, c) -> int:
    """Output tiles of ``c`` over an (M, N, K) shape."""
    return -(-shape[0] // c.block_m) * -(-shape[1] // c.block_n)


def _with_tails(shape, sms=132, most=8):
    """Each of the mid-size shapes' flattened tiles, then its split_tail twin where its tiles
    spill past whole rounds of the SMs: the last round's tiles in as many slices as fit the
    SMs, at most ``most``."""
    out = []
    for c in (T(128, 128, 64, 8, 4, 4, flat=True), T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
              T(128, 256, 64, 8, 8, 3, sub=True, flat=True)):  # fmt: skip
        # (the 4-warp tile's tail ran 0.36-0.57 of it whole: kept as a control)
        out.append(c)
        tiles = _tiles(shape, c)
        left = tiles % sms
        if tiles > sms and left and sms // left >= 2:
            out.append(T(c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages,
                         min(most, sms // left), sub=c.epilogue_subtile, flat=c.flatten, tail=True))  # fmt: skip
    return out


def _even(items: int, sms: int) -> bool:
    """Whether ``items`` work items fill ``sms`` SMs evenly enough to time (``_balanced_splits``)."""
    return items <= 2 * sms or (items <= 4 * sms and (items % sms == 0 or items % sms >= 0.8 * sms))


def _balanced_splits(shape, sms=132, most=8):
    """Each tile whole, and split K 2 to ``most`` ways wherever the slices keep at least 4 K
    steps each and fill the SMs evenly (at most two rounds, or up to four with the last round
    at least 80% full): an even share of K per SM for shapes under one wave of tiles, where
    the grid has only splits 2, 4 and 8 of some tiles."""
    out = []
    for c in (T(128, 256, 64, 8, 8, 3, sub=True, flat=True), T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
              T(64, 128, 64, 8, 4, 4, flat=True), T(128, 64, 64, 8, 4, 4, flat=True)):  # fmt: skip
        out.append(c)
        steps = -(-shape[2] // c.block_k)
        out += [dataclasses.replace(c, split_k=split, flatten=False) for split in range(2, most + 1)
                if steps // split >= 4 and _even(_tiles(shape, c) * split, sms)]  # fmt: skip
    return out


GROUPS = {
    "llm": dict(
        shapes=[(4096, 4096, 4096), (2048, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336), (16384, 6144, 4096)],
        dtype="bf16", layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
            T(128, 256, 64, 8, 8, 4, sub=True, flat=True),
            T(256, 128, 64, 8, 8, 3, sub=True, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 256, 64, 8, 8, 3, sub=True, flat=False),
            T(128, 256, 64, 8, 8, 3, sub=False, flat=True),
            T(256, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 128, 128, 8, 8, 3, sub=True, flat=True),
            T(128, 256, 64, 16, 8, 3, sub=True, flat=True),
            P(128, 256, 64, 8, 8, 3),
        ],
    ),
    "largek": dict(
        shapes=[(2048, 2048, 32768), (1024, 1024, 65536)], dtype="bf16", layouts=["row"], graph=False,
        configs=[
            T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 128, 64, 8, 8, 4, 2, sub=True),
            T(128, 128, 64, 8, 8, 4, 4, sub=True),
            T(128, 256, 64, 8, 8, 3, 2, sub=True),
            T(128, 256, 64, 8, 8, 3, 4, sub=True),
            T(256, 128, 64, 8, 8, 3, 2, sub=True),
        ],
    ),
    "odd_tma": dict(
        shapes=[(1000, 1000, 1000), (768, 768, 768)], dtype="bf16", layouts=["row"], graph=False,
        configs=[
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(64, 128, 64, 8, 4, 4, flat=True),
            T(64, 64, 64, 8, 4, 4, flat=True),
            T(128, 128, 64, 8, 8, 4, 2, sub=True),
            T(64, 128, 64, 8, 4, 4, 2),
            T(128, 256, 64, 8, 8, 3, sub=True, flat=True),
        ],
    ),
    # One wave of tiles, one per program: the pointer kernel (no descriptor prefetch, no
    # persistent loop; with the alignment hint, 16-byte cp.async at K = 1000) against the
    # TMA kernel the heuristic picks there.
    "odd_small": dict(
        shapes=[(1000, 1000, 1000), (768, 768, 768), (1024, 1024, 1024), (2048, 1024, 1024)], dtype="bf16",
        layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            P(128, 64, 64, 8, 4, 3),
            P(64, 128, 64, 8, 4, 3),
            P(64, 64, 64, 8, 4, 4),
            P(128, 128, 64, 8, 8, 3),
            P(64, 128, 32, 8, 4, 4),
            P(64, 64, 32, 8, 4, 4),
            P(128, 64, 32, 8, 4, 4),
        ],
    ),
    # One tile per program: the persistent loop has nothing to flatten; unflattened and
    # other depths against the heuristic's flattened 128x64x64 s4.
    "odd_tma_unflat": dict(
        shapes=[(1000, 1000, 1000), (768, 768, 768), (1024, 1024, 1024)], dtype="bf16", layouts=["row", "linear"],
        graph=False,
        configs=[
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(128, 64, 64, 8, 4, 4),
            T(128, 64, 64, 8, 4, 3),
            T(128, 64, 64, 8, 4, 5),
            T(64, 128, 64, 8, 4, 4),
            T(128, 64, 32, 8, 4, 6),
            T(128, 128, 64, 8, 8, 4, sub=True),
        ],
    ),
    # Odd strides: no divisor, so every load is one element (no cp.async); more warps to issue them?
    "odd_unaligned": dict(
        shapes=[(1531, 1531, 1531)], dtype="bf16", layouts=["row", "linear"], graph=False,
        configs=[
            P(64, 128, 32, 8, 4, 4),
            P(64, 128, 32, 8, 8, 4),
            P(128, 128, 32, 8, 8, 4),
            P(128, 64, 32, 8, 8, 4),
            P(64, 64, 32, 8, 4, 6),
            P(64, 128, 16, 8, 4, 6),
            P(32, 128, 32, 8, 4, 4),
            P(64, 256, 32, 8, 8, 3),
        ],
    ),
    "odd_linear": dict(
        shapes=[(4097, 4095, 4096)], dtype="bf16", layouts=["linear"], graph=False,
        configs=[T(128, 256, 64, 8, 8, 3, sub=True, flat=True), T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
                 P(128, 256, 64, 8, 8, 3), P(128, 128, 64, 8, 8, 3)],
    ),
    "odd_ptr": dict(
        shapes=[(1531, 1531, 1531), (2000, 3000, 500), (4097, 4095, 4096)], dtype="bf16", layouts=["row"],
        graph=False,
        configs=[
            P(128, 128, 64, 8, 8, 3), P(64, 128, 64, 8, 4, 3), P(128, 64, 64, 8, 4, 3), P(64, 64, 64, 8, 4, 3),
            P(64, 64, 32, 8, 4, 2), P(128, 128, 32, 8, 8, 2), P(128, 256, 64, 8, 8, 3), P(64, 128, 32, 8, 4, 4),
        ],
    ),
    "fp32": dict(
        shapes=[(4096, 4096, 4096), (8192, 4096, 4096)], dtype="fp32", layouts=["row", "linear"], graph=False,
        configs=[
            T(128, 128, 32, 8, 8, 3, sub=True, flat=True),
            T(128, 128, 32, 8, 8, 4, sub=True, flat=True),
            T(128, 256, 32, 8, 8, 3, sub=True, flat=True),
            T(128, 64, 32, 8, 4, 4, flat=True),
            T(64, 128, 32, 8, 4, 4, flat=True),
            P(128, 128, 32, 8, 8, 3),
            P(64, 128, 32, 8, 4, 3),
        ],
    ),
    # Skinny products with an unaligned operand, read in place: drawn from the random suite
    # (--seed), the data behind eager._pointer's tile and split (hopper.PTR_SPLIT_K_*).
    "ptr_skinny": dict(draw=_drawn_unaligned_skinny, graph=True, configs=_ptr_skinny),
    "skinny": dict(
        shapes=[(m, n, k) for m in (1, 8, 16, 32, 64, 128) for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]],
        dtype="bf16", layouts=["row", "linear"], graph=True, configs=None,
    ),
    # Decode shapes outside issue 5's table (Llama-2 MLP, GQA projections), for the heuristic's
    # rules between its measured points.
    "skinny_more": dict(
        shapes=[(m, n, k) for m in (1, 16, 64) for n, k in [(11008, 4096), (4096, 11008), (6144, 4096), (1024, 4096)]],
        dtype="bf16", layouts=["linear"], graph=True, configs=None,
    ),
    "skinny_lows": dict(
        shapes=[(64, 4096, 4096), (128, 14336, 4096), (32, 14336, 4096), (128, 4096, 4096), (128, 4096, 14336)],
        dtype="bf16", layouts=["row", "linear"], graph=True, configs=_skinny_lows,
    ),
    "skinny_unflat": dict(
        shapes=[(m, n, k) for m in (1, 8, 16, 32, 64, 128) for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]],
        dtype="bf16", layouts=["row", "linear"], graph=True, configs=_skinny_unsplit,
    ),
    # split_tail (issue 31): the flattened tiles that win mid-size shapes, each whole and with
    # its last round split as finely as the SMs allow; shapes whose tiles fill one to a few
    # rounds and part of one more, where the first sweep's best stayed at 0.58-0.92 of cuBLAS.
    "tail": dict(
        shapes=[(512, 4608, 3072), (512, 5120, 6912), (2048, 1152, 3072), (152, 17584, 1312), (6304, 768, 1536),
                (8192, 768, 768), (3376, 5472, 10160), (8192, 2304, 3072), (512, 19008, 5120)],
        dtype="bf16", layouts=["linear"], graph=True, configs=_with_tails, per_shape=True,
    ),
    # Many rows, few columns (M in the thousands, N 128-320; issue 31): the random suite's worst
    # class, 0.40-0.75 of cuBLAS on both GPUs with the grid's 64-128-column tiles, whose last
    # column of tiles is mostly empty (N = 160 in two 128-wide tiles), and every column of
    # tiles reads all of A again. Narrow and tall tiles, and tiles as wide as N split along K,
    # against the ones picked today. H100, 36831dd: 64-column tiles won, the wide split ones
    # nowhere (docs/performance.md, "Device runs (2026-12-07, eighth session)").
    "narrow_n": dict(
        shapes=[(3384, 160, 2248), (2888, 152, 1368), (8192, 128, 3584), (12608, 320, 1280), (4544, 144, 11984),
                (2048, 256, 3584), (6304, 256, 1024), (12608, 192, 768)],
        dtype="bf16", layouts=["linear", "t_linear"], graph=True,
        configs=[
            T(64, 128, 64, 8, 4, 4, flat=True),
            T(128, 128, 64, 8, 8, 4, sub=True, flat=True),
            T(128, 64, 64, 8, 4, 4, flat=True),
            T(64, 64, 64, 8, 4, 4, flat=True),
            T(128, 64, 64, 8, 4, 4, 2),
            T(64, 64, 64, 8, 4, 4, 2),
            T(128, 32, 128, 8, 4, 4, flat=True),
            T(128, 32, 64, 8, 4, 6, flat=True),
            T(64, 32, 128, 8, 4, 5, flat=True),
            T(128, 64, 128, 8, 4, 3, flat=True),
            T(256, 64, 64, 8, 8, 4, flat=True),
            T(256, 32, 64, 8, 8, 5, flat=True),
            T(128, 32, 128, 8, 4, 4, 2),
            T(256, 64, 64, 8, 8, 4, 2),
            # One column of tiles as wide as N, so A is read once, the SMs filled by splitting K.
            T(64, 256, 64, 8, 8, 3, flat=True),
            T(64, 256, 64, 8, 8, 3, 2),
            T(64, 256, 64, 8, 8, 3, 4),
            T(128, 256, 64, 8, 8, 3, 2, sub=True),
            T(128, 256, 64, 8, 8, 3, 4, sub=True),
        ],
    ),
    # Under one wave of tiles, most with a long K (issue 31): 13 of the 25 aligned shapes whose
    # best grid config ran under 0.76 of cuBLAS in the selector's H200 sweep (docs/performance.md,
    # "What the aligned tail is made of"). Every split from 2 to 8 that fills the SMs evenly.
    "balance": dict(
        shapes=[(512, 5120, 13824), (512, 4608, 3072), (512, 2560, 5120), (152, 1008, 9832), (144, 1808, 15184),
                (1040, 1152, 25120), (1936, 888, 22488), (512, 1792, 3584)],
        dtype="bf16", layouts=["linear"], graph=True, configs=_balanced_splits, per_shape=True,
    ),
}  # fmt: skip


def _configs_of(spec, shape):
    """A group's configs for one shape: its list, a function of the shape (``per_shape``) or of
    M, or the skinny sweep's."""
    configs = spec["configs"] or _skinny_configs
    if not callable(configs):
        return configs
    return configs(shape) if spec.get("per_shape") else configs(shape[0])


def _spec(x):
    # Triton specializes integer arguments on == 1 and on divisibility by 16.
    return 1 if x == 1 else 16 if x % 16 == 0 else 0


def cases_of(spec, seed):
    """A group's (shape, layout, dtype) cases: its shapes in each of its layouts, or drawn."""
    if "draw" in spec:
        return spec["draw"](seed)
    return [(shape, layout, spec["dtype"]) for shape in spec["shapes"] for layout in spec["layouts"]]


def tasks_of(groups, seed=0):
    """One compile task per distinct kernel specialization (shapes sharing one are compiled once)."""
    tasks, seen = [], set()
    for g in groups:
        spec = GROUPS[g]
        for shape, layout, dtype in cases_of(spec, seed):
            for cfg in [None, *_configs_of(spec, shape)]:  # None: the heuristic's pick
                key = (dtype, layout, cfg, *(map(_spec, shape) if cfg else shape))
                if key not in seen:
                    seen.add(key)
                    tasks.append((g, shape, dtype, layout, cfg))
    return tasks


def _compile(task):
    """Worker: compile one config for one call signature (no launch); an error message or None."""
    g, (M, N, K), dtype_name, layout, cfg = task
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a, b = make_operands(M, N, K, dtype_of(dtype_name), layout, fill=False)
        out = torch.empty(M, N, device="cuda", dtype=a.dtype)
        plugin_runtime().launch(a, b, out, config=cfg, compile_only=True)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{g} {M}x{N}x{K} {layout} {config_name(cfg) or 'heuristic'}: {type(e).__name__}: {str(e)[:300]}"


def sweep_shape(g, spec, shape, layout, n_rounds, dtype_name=None):
    """One JSONL row: every config checked, then all timed in rounds against torch.mm."""
    rt = plugin_runtime()
    M, N, K = shape
    dtype_name = dtype_name or spec["dtype"]
    dtype = dtype_of(dtype_name)
    tf32 = dtype == torch.float32
    a, b = make_operands(M, N, K, dtype, layout)
    op = torch.ops.inductor_mm_plugin.mm
    err = matmul_error(op(a, b), a, b, tf32=tf32)
    heur = rt.chosen_config(a, b)
    fns = {"cublas": lambda: torch.mm(a, b)}
    if not err:
        fns["heuristic"] = lambda: op(a, b)
    results = {}
    for cfg in _configs_of(spec, shape):
        name = cfg.short()
        try:
            out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
            rt.launch(a, b, out, config=cfg)
            wrong = matmul_error(out, a, b, tf32=tf32)
        except Exception as e:  # noqa: BLE001 (a config that does not compile or launch is a result)
            wrong = f"{type(e).__name__}: {str(e)[:200]}"
        if wrong:
            results[name] = dict(config=name, ms=None, error=wrong)
        else:
            results[name] = dict(config=name)
            fns[name] = lambda cfg=cfg, out=out: rt.launch(a, b, out, config=cfg)
    if spec["graph"]:
        timers = {name: GraphTimer(fn, target_ms=5.0) for name, fn in fns.items()}
        times = rounds(timers, lambda timer: timer(), n_rounds)
    else:
        times = rounds(fns, time_ms, n_rounds)
    for name in times:
        if name in ("cublas", "heuristic"):
            continue
        rs = ratios(times, "cublas", name)
        results[name].update(ms=median(times[name]), ratio=median(rs), ratio_rounds=rs, error=None)
    ok = [r for r in results.values() if r.get("ms")]
    best = max(ok, key=lambda r: r["ratio"]) if ok else None
    row = dict(group=g, M=M, N=N, K=K, dtype=dtype_name, layout=layout,
               timing="cudagraph" if spec["graph"] else "do_bench", cublas_ms=median(times["cublas"]),
               heuristic=config_name(heur), heuristic_error=err,
               heuristic_ms=median(times["heuristic"]) if "heuristic" in times else None,
               heuristic_ratio=median(ratios(times, "cublas", "heuristic")) if "heuristic" in times else None,
               heuristic_rounds=ratios(times, "cublas", "heuristic") if "heuristic" in times else None,
               best=best and best["config"], best_ms=best and best["ms"], best_ratio=best and best["ratio"],
               results=list(results.values()))  # fmt: skip
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", nargs="+", default=["llm", "skinny"], choices=list(GROUPS))
    p.add_argument("--seed", type=int, default=None, help="drawn groups (ptr_skinny): repeat a draw (default: new)")
    add_common_args(p, "sweep.jsonl", jobs=True)
    args = p.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}", flush=True)
    require_cuda("sweep_configs.py")
    import inductor_mm_plugin  # noqa: F401  (registers the ops)

    torch.backends.cuda.matmul.allow_tf32 = True
    meta = run_meta(args.commit)
    jsonl = pathlib.Path(args.out) / "sweep.jsonl"
    errors = [e for e in precompile(tasks_of(args.groups, seed), _compile, args.jobs) if e]
    for e in errors[:20]:
        print("  compile failed:", e, flush=True)
    for g in args.groups:
        spec = GROUPS[g]
        for shape, layout, dtype_name in cases_of(spec, seed):
            row = sweep_shape(g, spec, shape, layout, args.rounds, dtype_name)
            if "draw" in spec:
                row["seed"] = seed
            append_jsonl(jsonl, [row], meta)
            h = f"{row['heuristic_ratio']:5.2f}" if row["heuristic_ratio"] else "WRONG"
            best = f"{row['best_ratio']:5.2f}" if row["best_ratio"] else "  -  "
            print(f"{g:10s} {shape[0]:6d}x{shape[1]:6d}x{shape[2]:6d} {layout:8s} heuristic {h} "
                  f"[{row['heuristic']}] best {best} [{row['best']}]", flush=True)  # fmt: skip
            print_configs(row["results"], most=8, fmt="5.2f")
            torch.cuda.empty_cache()
    print(f"rows appended to {jsonl}")


if __name__ == "__main__":
    main()
