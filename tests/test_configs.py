"""configs/: which config the eager kernels run (heuristic, autotuning candidates), which the
Inductor templates are offered, and the arithmetic both share (shared memory, split-K slices,
the persistent kernel's program count, the JSON form the tuning cache stores).

Pure arithmetic on shapes: no tensor, no kernel. What the configs compute is tested in
test_kernel_tma.py and test_kernel_pointer.py.
"""

import dataclasses
import itertools

import pytest

from inductor_mm_plugin.configs import (
    heuristic_config,
    SMEM_LIMIT_BYTES,
    MatmulConfig,
    Problem,
    candidate_configs,
    fits,
    rule_config,
    k_per_split,
    persistent_programs,
    smem_bytes,
)
from inductor_mm_plugin.configs import hopper, selector
from inductor_mm_plugin.configs.templates import (
    SMEM_BUDGET,
    pointer_template_configs,
    swiglu_smem_bytes,
    swiglu_template_configs,
    template_programs,
    tma_template_configs,
)

# ------------------------------------------------------------------- eager heuristic

HEURISTIC_SHAPES = [
    (1, 4096, 4096), (16, 14336, 4096), (64, 4096, 14336), (128, 14336, 4096), (768, 768, 768),
    (1000, 1000, 1000), (2048, 4096, 4096), (8192, 28672, 4096), (2048, 2048, 32768), (1024, 1024, 65536),
    (4097, 4095, 4096), (3, 5000, 300), (7, 7, 7),
]  # fmt: skip


def bf16(M, N, K, **kw):
    """A bf16 problem the TMA kernel can take (the H200's 132 SMs unless ``num_sms`` says)."""
    return Problem(M, N, K, 1, 2, "bfloat16", tma=True, **kw)


@pytest.mark.parametrize("M,N,K", HEURISTIC_SHAPES)
@pytest.mark.parametrize("elem,precision", [(2, "ieee"), (4, "tf32"), (4, "ieee")])
@pytest.mark.parametrize("tma", [True, False])
def test_heuristic_and_candidates_fit_shared_memory(M, N, K, elem, precision, tma):
    p = Problem(M, N, K, 1, elem, {2: "bfloat16", 4: "float32"}[elem], tma=tma, precision=precision)
    cfg = rule_config(p)
    cfg.validate()
    # fp32 without TF32 takes the pointer kernel even where TMA could read the operands.
    assert cfg.kernel == ("tma" if tma and (elem == 2 or precision == "tf32") else "ptr")
    assert smem_bytes(cfg, elem) <= SMEM_LIMIT_BYTES, cfg
    cands = candidate_configs(p)
    assert cands[0] == heuristic_config(p) and len(set(cands)) == len(cands)
    for c in cands:
        c.validate()
        assert smem_bytes(c, elem) <= SMEM_LIMIT_BYTES, c
        assert c.kernel == cfg.kernel
        if c.split_k > 1:  # every slice has real K to read
            assert k_per_split(K, c.block_k, c.split_k) * (c.split_k - 1) < K


@pytest.mark.parametrize("M,N,K", [(512, 4608, 3072), (2480, 1776, 16544), (9488, 456, 2424), (8192, 8192, 4096)])
def test_autotune_candidates_split_the_last_round_where_tiles_spill_past_whole_rounds(M, N, K):
    """Each unsplit TMA candidate whose tiles fill whole rounds and part of one more has a twin
    with that round split as finely as the SMs allow (at most hopper.TAIL_MAX_SPLIT slices);
    where two slices of each leftover tile pass a round (8192 x 8192 in 128 x 256: 2048 tiles,
    68 left over), none."""
    p = bf16(M, N, K)
    cands = candidate_configs(p)
    tails = [c for c in cands if c.split_tail]
    for c in tails:
        n = -(-M // c.block_m) * -(-N // c.block_n)
        assert n > p.num_sms and c.num_warps >= 8 and c.split_k == min(hopper.TAIL_MAX_SPLIT, p.num_sms // (n % p.num_sms))
        assert dataclasses.replace(c, split_k=1, split_tail=False) in cands
    unsplit = {(c.block_m, c.block_n) for c in cands if c.kernel == "tma" and c.split_k == 1 and c.num_warps >= 8}
    spilling = {t for t in unsplit if -(-M // t[0]) * -(-N // t[1]) > p.num_sms
                and 0 < -(-M // t[0]) * -(-N // t[1]) % p.num_sms * 2 <= p.num_sms}  # fmt: skip
    assert spilling <= {(c.block_m, c.block_n) for c in tails}
    if (M, N) == (512, 4608):
        assert any(c.block_m == c.block_n == 128 and c.split_k == 4 for c in tails)  # 144 tiles: 12 left


@pytest.mark.parametrize(
    "M,N,K,block_n,split",
    [
        (5, 144, 18100, 32, 16),  # 5 tiles: up to 16 slices (sweep: 1.83 of cuBLAS, unsplit 0.20)
        (3, 5440, 3040, 64, 4),  # 85 tiles of 64: slices of at least 512 columns
        (2, 5088, 31387, 64, 16),
        (3, 11680, 21928, 64, 8),  # 183 tiles: at most 12 waves of items
        (7, 24288, 4740, 64, 1),  # 380 tiles, two waves already
        (4, 312, 624, 32, 1),  # K too short to cut
        (16, 1148, 27576, 32, 16),
        (6, 632, 8368, 32, 8),  # 16 slices would leave the last one empty: the deepest useful split
        (46, 4840, 10411, 64, 8),
    ],
)
def test_skinny_pointer_config_splits_k_into_many_programs(M, N, K, block_n, split):
    """A skinny product read in place: BLOCK_N 32 under half a wave of 64-wide tiles, and K
    split in powers of two while the tiles are under two waves, each slice at least
    PTR_SPLIT_K_MIN_SLICE long and the items within PTR_SPLIT_K_MAX_WAVES waves."""
    p = Problem(M=M, N=N, K=K, batch=1, elem_bytes=2, dtype="bfloat16", tma=False, divisor=2)
    cfg = rule_config(p)
    assert (cfg.kernel, cfg.block_n, cfg.block_k, cfg.split_k) == ("ptr", block_n, 128, split)
    tiles = -(-N // block_n) * -(-M // cfg.block_m)
    assert split == 1 or (-(-K // split) >= hopper.PTR_SPLIT_K_MIN_SLICE
                          and tiles * split <= hopper.PTR_SPLIT_K_MAX_WAVES * p.num_sms)  # fmt: skip
    assert rule_config(dataclasses.replace(p, batch=2)).split_k == 1  # batches: no split


@pytest.mark.parametrize("b_kmajor,expected", [(False, MatmulConfig("ptr", 64, 128, 16, 8, 4, 6)),
                                               (True, MatmulConfig("ptr", 64, 128, 32, 8, 8, 4))])  # fmt: skip
def test_pointer_heuristic_for_element_loads_follows_b_layout(b_kmajor, expected):
    """1531^3: no load wider than one element; the measured best config differs by B's layout."""
    p = Problem(M=1531, N=1531, K=1531, batch=1, elem_bytes=2, dtype="bfloat16", tma=False, b_kmajor=b_kmajor,
                c_tma=False, divisor=1)  # fmt: skip
    assert rule_config(p) == expected
    # With wider loads (2000x3000x500: 4 elements) the layout does not decide.
    p4 = dataclasses.replace(p, M=2000, N=3000, K=500, divisor=4)
    assert rule_config(p4) == MatmulConfig("ptr", 64, 128, 32, 8, 4, 4)


def test_skinny_heuristic_takes_wide_k_steps_for_unsplit_64x32_tiles():
    # 64x4096x4096 on the H200: 64x32x256 (4 stages) 4-5% ahead of 64x32x128 (6 stages).
    cfg = rule_config(bf16(64, 4096, 4096, num_sms=132))
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages, cfg.split_k) == (64, 32, 256, 4, 1)
    assert smem_bytes(cfg, 2) <= SMEM_LIMIT_BYTES
    # Split 64x32 tiles and wider ones keep 128 (not measured with 256).
    for N in (1024, 14336):
        other = rule_config(bf16(64, N, 4096, num_sms=132))
        assert other.block_k == 128 and (other.block_n, other.split_k) != (32, 1)


def test_heuristic_splits_k_only_when_the_grid_is_small():
    big = rule_config(bf16(8192, 8192, 8192))
    assert big.split_k == 1 and (big.block_m, big.block_n) in ((128, 256), (256, 128))
    assert rule_config(bf16(1024, 1024, 65536)).split_k > 1


def test_heuristic_takes_the_wide_tile_when_one_wave_nearly_fills_the_sms():
    # 2048 x 2048: 128 tiles of 128 x 256 on 132 SMs (97%), one wave rather than two of 128 x 128.
    wide = rule_config(bf16(2048, 2048, 32768, num_sms=132))
    assert (wide.block_m, wide.block_n, wide.split_k) == (128, 256, 1)
    # 1024 x 2048: 64 such tiles, half the SMs idle: not the wide tile.
    narrow = rule_config(bf16(1024, 2048, 32768, num_sms=132))
    assert (narrow.block_m, narrow.block_n) != (128, 256)
    # 2048 x 1024 with a short K: 128 tiles of 128 x 128, one wave rather than two of 128 x 64.
    short_k = rule_config(bf16(2048, 1024, 1024, num_sms=132))
    assert (short_k.block_m, short_k.block_n, short_k.split_k) == (128, 128, 1)
    # 768^3: 36 such tiles, latency-bound: the narrower 128 x 64 tiles.
    small = rule_config(bf16(768, 768, 768, num_sms=132))
    assert (small.block_m, small.block_n) == (128, 64)


def test_heuristic_for_few_tiles_keeps_128x128_when_k_is_long():
    # 2048x1024x4096: 128 tiles of 128x128 on 132 SMs, too many to split: one wave of them.
    one_wave = rule_config(bf16(2048, 1024, 4096))
    assert (one_wave.block_m, one_wave.block_n, one_wave.split_k) == (128, 128, 1)
    # Short K with few tiles stays on the latency-bound 128x64 tiles (768^3, 1000^3).
    for n in (768, 1000):
        short = rule_config(bf16(n, n, n))
        assert (short.block_m, short.block_n, short.split_k) == (128, 64, 1)


@pytest.mark.parametrize("M", [1, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("N,K", [(4096, 4096), (14336, 4096), (4096, 14336), (11008, 4096), (6144, 4096),
                                 (1024, 4096), (32768, 4096)])  # fmt: skip
def test_skinny_heuristic_fills_one_wave(M, N, K):
    # Decode shapes are a read of B: one wave of work items (132 SMs on the H200) that keeps
    # at least 55% of the SMs busy, K split where N alone cannot; or, for N wider than one
    # wave of 128-wide tiles, 128-wide tiles. Every split slice has real K.
    p = bf16(M, N, K)
    cfg = rule_config(p)
    items = -(-M // cfg.block_m) * -(-N // cfg.block_n) * cfg.split_k
    assert cfg.block_m >= M and cfg.num_warps == 4
    if cfg.block_n == 128 and cfg.split_k == 1:
        assert items >= p.num_sms * 0.55, (cfg, items)
    else:
        assert p.num_sms * 0.55 <= items <= p.num_sms * 1.1, (cfg, items)
    assert cfg.split_k == 1 or k_per_split(K, cfg.block_k, cfg.split_k) * (cfg.split_k - 1) < K


def test_one_work_item_per_program_is_unflattened():
    """The heuristic flattens the persistent loop only where a program has a next work item
    to prefetch: 768^3 (72 tiles of 128 x 64) and decode shapes (one wave) run unflattened,
    4096^3 (256 tiles of 128 x 256 on 132 SMs) flattened."""
    for shape in ((768, 768, 768), (16, 4096, 4096), (1, 14336, 4096), (64, 4096, 14336)):
        cfg = rule_config(bf16(*shape))
        assert cfg.kernel == "tma" and not cfg.flatten, (shape, cfg.short())
    assert rule_config(bf16(4096, 4096, 4096)).flatten
    assert rule_config(bf16(768, 768, 768, num_sms=16)).flatten  # 72 tiles on 16 SMs


@pytest.mark.parametrize("a_kmajor,b_kmajor,tile,flat", [(True, True, 256, True), (True, False, 256, False),
                                                          (False, False, 128, True)])  # fmt: skip
def test_tf32_heuristic_by_layout(a_kmajor, b_kmajor, tile, flat):
    """A wave of 128 x 256 tiles where measured (both operands K-major; an N-major B, which
    takes the unflattened loop); 128 x 128 for small problems, unflattened there in every
    layout (64 tiles: one per program)."""
    fp32 = dict(batch=1, elem_bytes=4, dtype="float32", tma=True, a_kmajor=a_kmajor, b_kmajor=b_kmajor,
                precision="tf32")  # fmt: skip
    big = rule_config(Problem(4096, 4096, 4096, **fp32))
    assert (big.block_m, big.block_n, big.block_k, big.flatten) == (128, tile, 32, flat)
    small = rule_config(Problem(1000, 1000, 1000, **fp32))
    assert (small.block_m, small.block_n, small.flatten) == (128, 128, False)
    assert all(smem_bytes(c, 4) <= SMEM_LIMIT_BYTES for c in (big, small))


# --------------------------------------------------------------- shared arithmetic


def test_k_per_split_slices_never_overlap():
    for K, bk, split in itertools.product((1, 15, 16, 17, 136, 1000, 4096), (16, 64, 256), (1, 2, 3, 4, 8)):
        step = k_per_split(K, bk, split)
        assert step % bk == 0 and step * split >= K


@pytest.mark.parametrize(
    "items,programs,expected",
    [(512, 132, 128), (528, 132, 132), (1792, 132, 128), (3584, 132, 128), (3696, 132, 132), (133, 132, 67),
     (64, 132, 64), (0, 132, 1), (1, 132, 1), (5, 4, 3), (9, 4, 3), (8, 4, 4)],
)  # fmt: skip
def test_persistent_programs_spread_work_evenly(items, programs, expected):
    assert persistent_programs(items, programs) == expected


def test_persistent_programs_are_the_fewest_for_the_fewest_rounds():
    for items, programs in itertools.product(range(1, 300), (1, 4, 7, 132)):
        n = persistent_programs(items, programs)
        rounds = -(-items // programs)
        assert 1 <= n <= programs and -(-items // n) == rounds, (items, programs, n)
        assert n == 1 or -(-items // (n - 1)) > rounds, (items, programs, n)


def test_config_json_round_trip_and_validation():
    cfg = MatmulConfig("tma", 128, 256, 64, 8, 8, 3, split_k=2, epilogue_subtile=True)
    assert MatmulConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="power of two"):
        MatmulConfig.from_json({**cfg.to_json(), "block_n": 96})
    with pytest.raises(ValueError, match="unknown MatmulConfig fields"):
        MatmulConfig.from_json({**cfg.to_json(), "blockn": 96})
    with pytest.raises(ValueError, match="'tma' kernel only"):
        MatmulConfig("ptr", 64, 64, 32, flatten=True).validate()
    with pytest.raises(ValueError, match="must be 'tma' or 'ptr'"):
        MatmulConfig("cublas", 64, 64, 32).validate()


# ----------------------------------------------------------------- template configs

TEMPLATE_LAYOUTS = [(True, True), (True, False), (False, True)]


def tma_template(m, n, k, a_kmajor=True, b_kmajor=True, compete=False, elem=2, dtype="bfloat16"):
    return tma_template_configs(m, n, k, elem, dtype, a_kmajor, b_kmajor, 132, compete=compete)


@pytest.mark.parametrize("m,n,k", [(2048, 4096, 4096), (8192, 14336, 4096), (64, 4096, 4096), (1, 4096, 14336),
                                   (2048, 2048, 2048), (2048, 2048, 32768), (32768, 128, 4096)])  # fmt: skip
@pytest.mark.parametrize("a_kmajor,b_kmajor", TEMPLATE_LAYOUTS)
def test_tma_template_takes_the_hand_rules_without_a_table_and_without_split_k(m, n, k, a_kmajor, b_kmajor,
                                                                               monkeypatch):  # fmt: skip
    monkeypatch.setattr(selector, "table", lambda *args: ())
    (cfg,) = tma_template(m, n, k, a_kmajor, b_kmajor)
    eager = rule_config(bf16(m, n, k, a_kmajor=a_kmajor, b_kmajor=b_kmajor, c_tma=False))
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps) == (eager.block_m, eager.block_n, eager.block_k,
                                                                      eager.num_warps)  # fmt: skip
    assert cfg.split_k == 1 and fits(cfg, 2)
    assert cfg.epilogue_subtile == (cfg.block_m * cfg.block_n >= 128 * 256)
    assert smem_bytes(cfg, 2) <= SMEM_BUDGET
    competing = tma_template(m, n, k, a_kmajor, b_kmajor, compete=True)
    assert competing[0] == cfg and len(competing) > 1
    assert all(c.split_k == 1 and not c.split_tail and fits(c, 2) for c in competing)


def test_competing_tma_template_offers_each_unsplit_tile_once():
    """The autotuning candidates' split_tail twins (512 x 4608: 144 tiles of 128 x 128) become
    their whole tiles in the template, which has no split-K: offered once, not twice."""
    p = bf16(512, 4608, 3072, c_tma=False)
    assert any(c.split_tail for c in candidate_configs(p, kernels=("tma",)))
    competing = tma_template(512, 4608, 3072, compete=True)
    assert competing and not any(c.split_tail or c.split_k > 1 for c in competing)
    assert len(competing) == len(set(competing))


@pytest.mark.parametrize("m,n,k", [(8192, 768, 3072), (2048, 3072, 768), (12608, 3072, 768), (2048, 4096, 4096),
                                   (64, 4096, 4096), (1, 4096, 14336), (2048, 2048, 32768)])  # fmt: skip
@pytest.mark.parametrize("a_kmajor,b_kmajor", TEMPLATE_LAYOUTS)
def test_tma_template_takes_the_selectors_fastest_unsplit_entry(m, n, k, a_kmajor, b_kmajor):
    """Where the table covers the problem: the tile of the unsplit TMA entry with the lowest
    estimate, never a split entry's (the template has no split-K), and no slower by the table
    than the hand rules' tile where that has an entry."""
    (cfg,) = tma_template(m, n, k, a_kmajor, b_kmajor)
    p = bf16(m, n, k, a_kmajor=a_kmajor, b_kmajor=b_kmajor, c_tma=False)
    covering = [e for e in selector.table() if e.config.kernel == "tma" and selector.covers(p, e)
                and fits(e.config, 2)]  # fmt: skip
    unsplit = [e for e in covering if e.config.split_k == 1]
    assert unsplit and len(unsplit) < len(covering)  # the table covers it, with split entries too
    best = min(unsplit, key=lambda e: selector.estimate_us(p, e))
    tile = lambda c: (c.block_m, c.block_n, c.block_k, c.num_warps, c.group_m)  # noqa: E731
    assert tile(cfg) == tile(best.config) and cfg.split_k == 1
    rule = rule_config(p)
    ruled = [e for e in unsplit if tile(e.config) == tile(rule) and e.config.flatten == rule.flatten]
    if ruled:
        assert selector.estimate_us(p, best) <= selector.estimate_us(p, ruled[0])


@pytest.mark.parametrize("m,n,k", [(2048, 1024, 1024), (2048, 1024, 4096), (768, 768, 768), (1024, 2048, 2048),
                                   (16384, 128, 4096), (129, 64, 8)])  # fmt: skip
def test_one_wave_of_tiles_takes_the_pointer_template_unless_competing(m, n, k):
    """Every 128 x 128 tile in one wave, one per program, K <= 4096: the pointer template (no
    device-side descriptors to build); the TMA template still competes when asked."""
    assert tma_template(m, n, k) == []
    assert tma_template(m, n, k, compete=True)


@pytest.mark.parametrize("m,n,k", [(2048, 2048, 2048), (2048, 2048, 1024), (4096, 1024, 1024), (2048, 1024, 8192),
                                   (300, 4096, 1024), (128, 4096, 1024)])  # fmt: skip
def test_wide_tiles_two_waves_long_k_or_decode_sized_m_keep_the_tma_template(m, n, k):
    (cfg,) = tma_template(m, n, k)
    assert cfg.kernel == "tma"


@pytest.mark.parametrize("m,n,k", [(2048, 128, 2048), (197, 768, 768)])
def test_competing_tma_template_keeps_its_tma_candidates_where_the_selector_picks_the_pointer_kernel(m, n, k):
    """The eager selector takes the pointer kernel here; the TMA template still competes with
    the TMA kernel's neighbours, not with pointer configs it cannot run."""
    assert heuristic_config(bf16(m, n, k, c_tma=False)).kernel == "ptr"  # on the committed table
    competing = tma_template(m, n, k, compete=True)
    assert len(competing) > 1 and all(c.kernel == "tma" and c.split_k == 1 for c in competing)


def test_autotuning_a_selector_pointer_pick_also_times_the_tma_kernel():
    p = bf16(2048, 128, 2048)
    cands = candidate_configs(p)
    assert cands[0] == heuristic_config(p) and cands[0].kernel == "ptr"  # on the committed table
    assert any(c.kernel == "tma" for c in cands)
    tma_only = candidate_configs(p, kernels=("tma",))
    assert tma_only[0].kernel == "tma" and all(c.kernel == "tma" for c in tma_only)


def test_tma_template_leaves_fp32_to_the_pointer_template():
    assert tma_template(4096, 4096, 4096, elem=4, dtype="float32") == []


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 14336, 4096), (128, 4096, 4096), (8192, 14336, 4096),
                                   (1000, 1000, 1000)])  # fmt: skip
@pytest.mark.parametrize("elem", [2, 4])
def test_pointer_template_configs_fit_shared_memory(m, n, k, elem):
    first = pointer_template_configs(m, n, elem, 132)
    assert len(first) == 1 and first[0].kernel == "ptr" and fits(first[0], elem)
    competing = pointer_template_configs(m, n, elem, 132, compete=True)
    assert competing[0] == first[0] and len(set(competing)) == len(competing)
    assert all(fits(c, elem) for c in competing)
    assert all(fits(c, 2) for c in hopper.TEMPLATE_PTR_COMPETE)


@pytest.mark.parametrize("compete", [False, True])
def test_swiglu_template_configs_fit_the_template_budget(compete):
    cfgs = swiglu_template_configs(2, compete=compete)
    assert cfgs[0] == hopper.SWIGLU and len(cfgs) == (2 if compete else 1)
    # The second weight's tiles count: more than the TMA kernel's shared memory.
    assert all(smem_bytes(c, 2) < swiglu_smem_bytes(c, 2) <= SMEM_BUDGET for c in cfgs)


@pytest.mark.parametrize("m,n", [(8192, 8192), (4096, 4096), (4224, 4096), (2048, 14336), (100, 300)])
def test_tma_template_runs_as_many_programs_as_the_eager_kernel(m, n):
    """The template's program count (its NUM_SMS) is the eager kernel's for the same tiles:
    at most one per SM, fewer where that spreads the tiles more evenly."""
    cfg = MatmulConfig("tma", 64, 64, 64)
    tiles = -(-m // 64) * -(-n // 64)
    assert template_programs(cfg, m, n, 132) == persistent_programs(tiles, 132)
    big = MatmulConfig("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, flatten=True)
    assert template_programs(big, 4096, 4096, 132) == 128  # 512 tiles: 128 programs of 4


@pytest.mark.parametrize("M,N,K", [(512, 512, 3584), (304, 64, 10832), (357, 120, 6256), (2032, 128, 2072),
                                   (512, 128, 1024), (200, 200, 200), (129, 8, 100000)])  # fmt: skip
def test_few_tiles_fill_one_wave_with_long_enough_slices(M, N, K):
    """Under a quarter wave of 128 x 128 tiles: the most work items that fit one wave, every K
    slice at least FEW_TILES_MIN_SLICE long (or K whole), fewer splits before smaller tiles."""
    from inductor_mm_plugin.configs import hopper, selector
    from inductor_mm_plugin.configs.space import tiles

    p = Problem(M, N, K, 1, 2, "bfloat16", tma=True, a_kmajor=True, b_kmajor=True)
    cfg = rule_config(p)
    items = tiles(p, cfg.block_m, cfg.block_n) * cfg.split_k
    assert cfg.kernel == "tma" and items <= p.num_sms and fits(cfg, 2)
    assert cfg.split_k == 1 or k_per_split(K, 64, cfg.split_k) >= hopper.FEW_TILES_MIN_SLICE
    for bm, bn in hopper.FEW_TILES:  # nothing in the table puts more items in one wave
        for split in hopper.FEW_TILES_SPLITS:
            more = tiles(p, bm, bn) * split
            ok_slice = split == 1 or k_per_split(K, 64, split) >= hopper.FEW_TILES_MIN_SLICE
            assert not (ok_slice and items < more <= p.num_sms), (cfg.short(), bm, bn, split)
    assert rule_config(Problem(512, 512, 3584, 1, 2, "bfloat16", tma=True)).short() == "tma 64x64x64 w4 s4 split2"
