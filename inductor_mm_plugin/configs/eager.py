"""Which config the eager kernels run: ``heuristic_config`` picks one from the problem at once
(no benchmarking); ``candidate_configs`` lists what the optional autotuner times.

The configs themselves, and the measurements behind them, are the tables in ``hopper.py``.
"""

from __future__ import annotations

import dataclasses

from . import hopper as H
from . import selector
from .space import (
    MatmulConfig,
    Problem,
    batch_fits,
    cdiv,
    deepest,
    fills_a_wave,
    fits,
    k_per_split,
    pow2_ceil,
    tail_fits,
    tiles,
    useful_split,
    work_items,
)


def heuristic_config(p: Problem, interpreting: bool = False, kernels=("tma", "ptr")) -> MatmulConfig:
    """A config for this problem, chosen instantly: the fitted selector's (``selector.py``,
    among ``kernels``) where its table covers the problem, else the hand rules (``rule_config``)."""
    return _heuristic_pick(p, interpreting, kernels)[0]


def _heuristic_pick(p: Problem, interpreting: bool, kernels) -> tuple[MatmulConfig, bool]:
    """``heuristic_config``'s pick, and whether the selector made it (not the hand rules)."""
    picked = None if interpreting else selector.select(p, kernels=kernels)
    return (rule_config(p, interpreting), False) if picked is None else (picked, True)


def rule_config(p: Problem, interpreting: bool = False) -> MatmulConfig:
    """The hand rules' config: thresholds on tiles, waves and K from the tables in hopper.py
    (batches, fp32, the pointer kernel, the interpreter, and the Inductor templates where the
    table has no unsplit entry for the problem)."""
    cfg = _one_item_unflattened(p, _heuristic(p, interpreting))
    if batch_fits(p, cfg):
        return cfg
    narrower = dataclasses.replace(cfg, split_k=1, block_k=min(cfg.block_k, 64))
    if batch_fits(p, narrower):
        return narrower
    return H.INTERPRETER_PTR if interpreting else _pointer(p)


def _heuristic(p: Problem, interpreting: bool) -> MatmulConfig:
    if interpreting:
        if not p.tma:
            return H.INTERPRETER_PTR
        # Exercise split-K on the CPU as well when K is long next to the output.
        split = 2 if p.K >= 4 * max(p.M, p.N) and p.K >= 64 and p.batch == 1 else 1
        return dataclasses.replace(H.INTERPRETER_TMA, split_k=split)
    if not p.tma or (p.elem_bytes == 4 and p.precision != "tf32"):
        return _pointer(p)
    if p.elem_bytes == 4:
        return _tf32(p)
    if p.M <= H.SKINNY_MAX_M:
        return _skinny(p)
    return _tma(p)


def swiglu_config(interpreting: bool = False) -> MatmulConfig:
    """The fused SwiGLU kernel's config (``hopper.SWIGLU``, measured as the template; small
    tiles with subtiled stores in the interpreter, as the TMA kernel's there)."""
    return dataclasses.replace(H.INTERPRETER_TMA, split_k=1) if interpreting else H.SWIGLU


def _one_item_unflattened(p: Problem, cfg: MatmulConfig) -> MatmulConfig:
    """The loop unflattened where every program has at most one work item. Flattening lets a
    program load its next tile during this one's epilogue; with no next tile it only costs
    (H200 under CUDA graphs: 768^3 with 128x64 tiles 4.85 against 4.77 us, 16x4096x4096 with
    16x32 tiles and a row-major B 10.04 against 9.52 us)."""
    if cfg.kernel == "tma" and cfg.flatten and work_items(p, cfg) <= p.num_sms:
        return dataclasses.replace(cfg, flatten=False)
    return cfg


def _pointer(p: Problem) -> MatmulConfig:
    if p.elem_bytes == 4:
        return H.PTR_FP32
    if p.M <= H.PTR_SKINNY_MAX_M:
        return _pointer_skinny(p)
    if p.M * p.N * p.batch >= H.PTR_LARGE_FROM:
        return H.PTR_LARGE
    if p.divisor == 1:
        return H.PTR_UNALIGNED_KMAJOR_B if p.b_kmajor else H.PTR_UNALIGNED
    return H.PTR


def _pointer_skinny(p: Problem) -> MatmulConfig:
    """M <= 64 read in place: many programs, since each one's loads wait on memory. BLOCK_N
    64 where that gives half a wave of tiles, else 32; fewer than two waves split K, in
    powers of two up to PTR_SPLIT_K_MAX, while each slice keeps PTR_SPLIT_K_MIN_SLICE columns
    and the items stay within PTR_SPLIT_K_MAX_WAVES waves (hopper.py, "pointer kernel")."""
    bm = max(16, pow2_ceil(p.M))
    m_tiles = cdiv(p.M, bm) * p.batch
    bn = 64 if cdiv(p.N, 64) * m_tiles * 2 >= p.num_sms else 32
    n_tiles = cdiv(p.N, bn) * m_tiles
    split = 1
    if p.batch == 1 and n_tiles < H.PTR_SPLIT_K_BELOW_WAVES * p.num_sms:
        while (split * 2 <= H.PTR_SPLIT_K_MAX and cdiv(p.K, split * 2) >= H.PTR_SPLIT_K_MIN_SLICE
               and n_tiles * split * 2 <= H.PTR_SPLIT_K_MAX_WAVES * p.num_sms
               and useful_split(p.K, 128, split * 2)):  # fmt: skip
            split *= 2
    return MatmulConfig("ptr", bm, bn, 128, 1, 4, 3, split_k=split)


def _tf32(p: Problem) -> MatmulConfig:
    # An N-major B goes through registers (SWAP_AB in the kernel), where the flattened loop
    # cost 15-30%; fewer than a wave of 128 x 256 tiles, or an M-major A: 128 x 128.
    swap = p.a_kmajor and not p.b_kmajor
    wide = fills_a_wave(tiles(p, 128, 256), p.num_sms) and p.a_kmajor
    cfg = dataclasses.replace(H.TF32_WIDE if wide else H.TF32, flatten=not swap)
    return deepest(cfg, 4, 3 if wide else 4)


def _tma(p: Problem) -> MatmulConfig:
    sms = p.num_sms
    if fills_a_wave(tiles(p, 128, 256), sms) and p.N > 128:
        return H.PREFILL
    if p.N <= 128 and tiles(p, 128, 128) >= sms and p.K >= 1024:
        return H.NARROW_N_LONG_K
    if fills_a_wave(tiles(p, 128, 128), sms) or p.batch > 1:
        return deepest(H.WAVE_128, 2, 4)
    if 4 * tiles(p, 128, 128) < sms:
        return _few_tiles(p)
    n = tiles(p, 128, 128)
    split = 1
    while n * split * 2 <= sms and cdiv(p.K, split * 2) >= H.SPLIT_K_MIN_SLICE:
        split *= 2
    if split > 1:
        return dataclasses.replace(H.SPLIT_K_BASE, split_k=split)
    if p.K >= 2048:
        return deepest(H.WAVE_128, 2, 4)
    return H.SHORT_K


def _few_tiles(p: Problem) -> MatmulConfig:
    """Less than a quarter wave of 128 x 128 tiles: the (tile, split) with the most work items
    that still fit one wave (hopper.FEW_TILES)."""
    best = (tiles(p, 128, 128), 128, 128, 1)  # unsplit 128 x 128 always fits one wave here
    for split in H.FEW_TILES_SPLITS:
        for bm, bn in H.FEW_TILES:
            items = tiles(p, bm, bn) * split
            if items > p.num_sms or (split > 1 and k_per_split(p.K, 64, split) < H.FEW_TILES_MIN_SLICE):
                continue
            if not useful_split(p.K, 64, split):
                continue
            if items > best[0]:  # ties keep fewer splits, then the larger tile
                best = (items, bm, bn, split)
    _, bm, bn, split = best
    cfg = MatmulConfig("tma", bm, bn, 64, 8, 8 if bm * bn > 128 * 64 else 4, 4, split_k=split,
                       epilogue_subtile=bn >= 128)  # fmt: skip
    return deepest(cfg, p.elem_bytes, 4)


def copies_pay(in_place: Problem, copied: Problem, b_bytes: int) -> bool:
    """Whether the TMA kernel on aligned copies of the unaligned operands (``copied``: the
    problem it then solves; ``b_bytes``: the bytes of B copied, 0 if B is read in place) is
    expected to beat the pointer kernel reading them in place (``in_place``). Each copy is
    one more kernel, a read and a write of its operand (hopper.py, "unaligned operands"):

    * up to 64 rows, in place, unless an operand loads one element at a time (divisor 1)
      over a K longer than COPY_NARROW_MIN_K and B is small enough for its copy to be read
      back from the L2;
    * more rows: copies, unless K is at most COPY_SHORT_K_MAX and the output at most
      COPY_SHORT_K_MAX_OUTPUT elements.
    """
    if not copied.tma or copied.batch != 1:
        return False
    if in_place.M <= H.PTR_SKINNY_MAX_M:
        narrow = in_place.divisor == 1 and in_place.K > H.COPY_NARROW_MIN_K
        return narrow and b_bytes < H.COPY_SKINNY_B_MAX_BYTES
    return not (in_place.K <= H.COPY_SHORT_K_MAX and in_place.M * in_place.N <= H.COPY_SHORT_K_MAX_OUTPUT)


# ----------------------------------------------------------------------------- skinny


def _skinny(p: Problem) -> MatmulConfig:
    """M <= 128: reading B is the cost; what matters is spreading it evenly over the SMs with
    enough bytes in flight, in one wave of about one work item per SM. Under CUDA graphs
    (bf16; ratios cuBLAS / plugin, the runner-up in brackets; docs/performance.md, "Skinny"):

    * the widest BLOCK_N, unsplit, whose tiles fill at least 55% of the SMs in one wave:
      N = 14336 and 11008 take BLOCK_N 128: 0.91-1.08 (32 at 11008: 0.80-0.85); N = 6144
      takes 64 (96 tiles): 0.88-1.02 (32: 0.59-0.75);
    * N too narrow for that even with BLOCK_N 32 (N = 1024): split K up to 4 ways: 0.83-0.85
      (unsplit: 0.69-0.78);
    * N = 4096 with K = 11008 or 14336: BLOCK_N 32 unsplit for 1 < M <= 16 and M = 64:
      1.01-1.06 (64 split 2: 0.96-1.02); for M = 1, and M = 32 or 128, BLOCK_N 64 split 2:
      0.92-0.99;
    * N = K = 4096 (about 10 us): BLOCK_N 128 split 4 for M <= 8: 0.85-0.98; BLOCK_N 64
      split 2 for M = 16, 32: 0.91-0.95; BLOCK_N 32 unsplit for M = 64, 128: 0.81-1.03.
    """
    bm = max(16, pow2_ceil(p.M))
    m_tiles = cdiv(p.M, bm) * p.batch
    fill = p.num_sms * H.SKINNY_FILL[0] // H.SKINNY_FILL[1]

    def items(bn: int, split: int = 1) -> int:
        return cdiv(p.N, bn) * m_tiles * split

    def one_wave(bn: int, split: int) -> bool:  # at most ~one work item per SM, every slice real
        most = p.num_sms * H.SKINNY_ONE_WAVE[0] // H.SKINNY_ONE_WAVE[1]
        return items(bn, split) <= most and useful_split(p.K, 256, split)

    if items(128) >= fill:
        bn, split = 128, 1
    elif items(64) >= fill:
        bn, split = 64, 1
    elif items(32) < fill:
        bn = 32
        split = next((s for s in (4, 3, 2) if one_wave(32, s)), 1)
    elif p.K >= 8192:
        if bm == 16 and p.M > 1 or bm == 64:
            bn, split = 32, 1
        else:
            bn, split = 64, 2 if one_wave(64, 2) else 1
    elif p.M <= 8 and one_wave(128, 4):
        bn, split = 128, 4
    elif bm <= 32 and one_wave(64, 2):
        bn, split = 64, 2
    else:
        bn, split = 32, 1
    return skinny_config(p, bm, bn, split)


def skinny_config(p: Problem, bm: int, bn: int, split: int) -> MatmulConfig:
    """A skinny tile: four warps, no grouping, as many stages (up to 6) as fit, and 256-wide
    K steps while 3 stages of them fit (measured with M <= 32), else 128. Unsplit 64 x 32
    tiles take 256-wide steps too, 4 stages deep: at 64x4096x4096 under CUDA graphs 8.82
    against 9.24 us (row-major B) and 8.59 against 9.13 (K-major), cuBLAS 8.1 and 7.9."""
    w = H.SKINNY_WARPS
    if bm < 64:
        wide_k = fits(MatmulConfig("tma", bm, bn, 256, 1, w, 3), p.elem_bytes)
    else:
        wide_k = (bm, bn, split) == (64, 32, 1) and fits(MatmulConfig("tma", bm, bn, 256, 1, w, 4), p.elem_bytes)
    bk = 256 if wide_k else 128
    cfg = MatmulConfig("tma", bm, bn, bk, 1, w, H.SKINNY_MAX_STAGES, split_k=split, flatten=split == 1)
    return deepest(cfg, p.elem_bytes, H.SKINNY_MAX_STAGES)


def skinny_cost_us(p: Problem, cfg: MatmulConfig) -> float:
    """Estimated time: the busiest SM's share of bytes over its bandwidth, plus per-item costs."""
    rounds = cdiv(work_items(p, cfg), p.num_sms)
    k_slice = min(p.K, k_per_split(p.K, cfg.block_k, cfg.split_k))
    item_bytes = (cfg.block_n + min(cfg.block_m, p.M)) * k_slice * p.elem_bytes
    # Items of one program run back to back (persistent loop): the fill cost is paid once
    # when flattened, per item otherwise; a split adds the partial-sum round trip.
    fixed = H.SKINNY_ITEM_OVERHEAD_US * (1 if cfg.flatten else rounds)
    if cfg.split_k > 1:
        fixed += 1.0
    return rounds * item_bytes / H.SKINNY_SM_BYTES_PER_US + fixed


def _skinny_candidates(p: Problem) -> list[MatmulConfig]:
    bm = max(16, pow2_ceil(p.M))
    cands = (skinny_config(p, bm, bn, split) for bn in (32, 64, 128) for split in (1, 2, 4))
    return sorted((c for c in cands if useful_split(p.K, c.block_k, c.split_k)), key=lambda c: skinny_cost_us(p, c))


# ------------------------------------------------------------------------- candidates


def _tail_candidates(p: Problem, cands: list[MatmulConfig]) -> list[MatmulConfig]:
    """The unsplit TMA candidates whose tiles fill whole rounds of the SMs and part of one
    more, with that last round split (``split_tail``) as finely as it fits the SMs, up to
    H.TAIL_MAX_SPLIT slices."""
    out = []
    for c in cands:
        # 8 warps: a 4-warp 128 x 128 tail ran 0.36-0.57 of its whole tile (H100, 2026-12-07).
        tail = tiles(p, c.block_m, c.block_n) % p.num_sms
        if c.kernel != "tma" or c.split_k != 1 or c.num_warps < 8 or not tail:
            continue
        split = min(H.TAIL_MAX_SPLIT, p.num_sms // tail)
        tailed = dataclasses.replace(c, split_k=split, split_tail=True)
        if split > 1 and useful_split(p.K, c.block_k, split) and tail_fits(p, tailed):
            out.append(tailed)
    return out


def candidate_configs(p: Problem, interpreting: bool = False, kernels=("tma", "ptr")) -> list[MatmulConfig]:
    """What the autotuner times for this problem: the heuristic's pick first (among
    ``kernels``), then its neighbours from the tables; every one fits shared memory and the batch."""
    first, from_selector = _heuristic_pick(p, interpreting, kernels)
    if interpreting:
        return [first]
    if first.kernel == "ptr" and not from_selector:
        cands = H.PTR_CANDIDATES  # the hand rules' pointer kernel: operands TMA cannot read, fp32, ...
    elif p.elem_bytes == 4:
        cands = H.TF32_CANDIDATES
    elif p.M <= H.SKINNY_MAX_M:
        cands = _skinny_candidates(p)[:8]
    else:
        cands = list(H.TMA_CANDIDATES)
        if tiles(p, 128, 128) < 2 * p.num_sms and p.batch == 1:
            for split, bn in H.TMA_SPLIT_CANDIDATES:
                if useful_split(p.K, 64, split) and cdiv(p.K, split) >= H.TMA_SPLIT_CANDIDATE_MIN_SLICE:
                    cands.append(dataclasses.replace(H.SPLIT_K_BASE, block_n=bn, num_stages=3, split_k=split))
        cands += _tail_candidates(p, [first, *cands])
    out = [first]
    for c in cands:
        if c not in out and fits(c, p.elem_bytes) and batch_fits(p, c):
            out.append(c)
    return out
