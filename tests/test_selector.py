"""configs/selector.py: the fitted config selector and its committed table."""

import dataclasses
import json
import random

import pytest

from inductor_mm_plugin.configs import MatmulConfig, Problem, fits, heuristic_config, rule_config, selector
from inductor_mm_plugin.configs.space import useful_split


def bf16(M, N, K, **kw):
    return Problem(M, N, K, 1, 2, "bfloat16", tma=True, **kw)


def test_the_committed_table_is_valid_and_says_where_it_came_from():
    data = json.loads(selector.TABLE.read_text())
    prov = data["provenance"]
    for key in ("command", "seeds", "shapes", "date", "commit", "gpu", "torch", "triton"):
        assert prov.get(key), key
    assert prov["command"].startswith("bench/sweep_selector.py --fit") and prov["gpu"] == "NVIDIA H200"
    entries = selector.table()
    assert len(entries) == len(data["entries"]) > 20
    for cfg, skinny, coef, per_sm in entries:
        cfg.validate()
        assert fits(cfg, 2) and len(coef) == len(selector.FEATURES) and 1 <= per_sm <= 4
        assert all(c >= 0 for c in coef)
        if cfg.kernel == "tma":
            assert skinny == (cfg.group_m == 1) and per_sm == 1  # the skinny grid's tiles take no grouping
        else:
            assert cfg.kernel == "ptr" and not skinny
    assert {e.skinny for e in entries} == {True, False}


def test_select_picks_a_valid_config_from_the_table_for_drawn_problems():
    rng = random.Random(0)
    for _ in range(300):
        M, N, K = (int(2 ** rng.uniform(0, 14)) for _ in range(3))
        p = bf16(max(M, 1), max(N, 16), max(K, 16), a_kmajor=rng.random() < 0.5, b_kmajor=rng.random() < 0.5)
        cfg = selector.select(p)
        assert cfg is not None
        assert fits(cfg, 2) and useful_split(p.K, cfg.block_k, cfg.split_k)
        rounded = [max(16, 1 << (x - 1).bit_length()) for x in (p.M, p.N, p.K)]
        if cfg.kernel == "ptr":  # Inductor's configs as it shrinks them to the problem
            assert all(b <= r for b, r in zip((cfg.block_m, cfg.block_n, cfg.block_k), rounded))
            assert all(b >= 32 or b == r for b, r in zip((cfg.block_m, cfg.block_n), rounded))
        else:
            assert (cfg.group_m == 1) == (p.M <= selector.SKINNY_MAX_M)
            if p.M <= selector.SKINNY_MAX_M:
                assert cfg.block_m == rounded[0]
        assert heuristic_config(p) == cfg


@pytest.mark.parametrize("p", [
    Problem(4096, 4096, 4096, 1, 4, "float32", tma=True, precision="tf32"),  # TF32: the hand rules
    Problem(512, 512, 512, 4, 2, "bfloat16", tma=True),  # a batch
    Problem(512, 512, 512, 1, 2, "bfloat16", tma=False),  # the pointer kernel
])  # fmt: skip
def test_select_leaves_what_its_table_does_not_cover_to_the_hand_rules(p):
    assert selector.select(p) is None
    assert heuristic_config(p) == rule_config(p)
    assert heuristic_config(p, interpreting=True) == rule_config(p, interpreting=True)


def test_select_takes_the_lowest_estimate():
    fast_per_step = MatmulConfig("tma", 128, 128, 64, 8, 8, 4)
    fast_fixed = MatmulConfig("tma", 128, 64, 64, 8, 4, 4)
    Entry = selector.Entry
    entries = (Entry(fast_per_step, False, (0.01, 1.0, 10.0, 0.0)), Entry(fast_fixed, False, (0.1, 1.0, 1.0, 0.0)))
    short, long = bf16(512, 512, 64), bf16(512, 512, 65536)
    for p in (short, long):
        est = {e.config: selector.estimate_us(p, e) for e in entries}
        assert selector.select(p, entries) == min(est, key=est.get)
    assert selector.select(short, entries) == fast_fixed and selector.select(long, entries) == fast_per_step
    # A skinny problem takes only skinny entries of its own tile height.
    assert selector.select(bf16(64, 4096, 4096), entries) is None
    tall = dataclasses.replace(fast_fixed, block_m=64, group_m=1)
    assert selector.select(bf16(64, 4096, 4096), (Entry(tall, True, (0.1, 1.0, 1.0, 0.0)),)) == tall
    assert selector.select(bf16(8, 4096, 4096), (Entry(tall, True, (0.1, 1.0, 1.0, 0.0)),)) is None


def test_pointer_entries_compete_where_their_tiles_fit_the_problem_and_share_the_sms():
    Entry = selector.Entry
    tma = Entry(MatmulConfig("tma", 128, 128, 64, 8, 8, 4), False, (0.01, 2.0, 1.0, 0.0))
    ptr = Entry(MatmulConfig("ptr", 64, 64, 64, 8, 4, 3), False, (0.01, 1.0, 1.0, 0.0), per_sm=2)
    assert selector.select(bf16(512, 512, 512), (tma, ptr)) == ptr.config
    # Larger than the problem rounded up along one side (N = 32): not what the sweep timed.
    assert selector.select(bf16(512, 32, 512), (tma, ptr)) == tma.config
    assert selector.select(bf16(16, 512, 512), (ptr,)) is None
    # Smaller than Inductor's smallest (32) where the side is longer: never swept there.
    small = Entry(MatmulConfig("ptr", 16, 32, 32, 8, 2, 5), False, (0.01, 1.0, 1.0, 0.0))
    assert selector.select(bf16(16, 512, 512), (small,)) == small.config
    assert selector.select(bf16(38, 512, 512), (small,)) is None
    # Two programs per SM: 264 tiles are one round, 265 two.
    assert selector.features(64 * 264, 64, 64, ptr.config, per_sm=2)[1] == 1.0
    assert selector.features(64 * 265, 64, 64, ptr.config, per_sm=2)[1] == 2.0
    # Unaligned operands (not p.tma) stay with the hand rules, pointer entries or not.
    assert selector.select(Problem(512, 512, 512, 1, 2, "bfloat16", tma=False), (ptr,)) is None


def test_features_count_wave_quantized_rounds_and_k_steps():
    cfg = MatmulConfig("tma", 128, 128, 64, split_k=2)
    # 1024 x 1024: 64 tiles x 2 slices = 128 items, one round on 132 SMs; 4096 / 64 / 2 = 32 steps.
    assert selector.features(1024, 1024, 4096, cfg) == [32.0, 1.0, 1.0, 1024 * 1024 * 2 * 4 / 1e6]
    assert selector.features(1024, 1088, 4096, cfg)[1] == 2.0  # 136 items: a second round


def test_split_tail_features_and_selection():
    cfg = MatmulConfig("tma", 128, 128, 64, split_k=4, split_tail=True)
    # 512 x 4608: 144 tiles, one whole round of 132 and 12 tiles in 4 slices; K = 3072: 48
    # steps whole, 12 a slice; 12 tiles' partials.
    assert selector.features(512, 4608, 3072, cfg) == [48.0 + 12.0, 2.0, 1.0, 12 * 128 * 128 * 4 * 4 / 1e6]
    # Whole rounds only: nothing split, nothing added.
    assert selector.features(512, 128 * 132 // 4, 3072, cfg) == [48.0, 1.0, 1.0, 0.0]
    tail = selector.Entry(cfg, False, (0.01, 1.0, 1.0, 0.0))
    plain = selector.Entry(dataclasses.replace(cfg, split_k=1, split_tail=False), False, (0.01, 1.0, 1.0, 0.0))
    assert selector.select(bf16(512, 4608, 3072), (tail, plain)) == cfg  # 60 steps in 2 rounds against 96
    # 40 tiles left: 160 slices, more than a round; the entry does not apply.
    assert selector.select(bf16(512, 128 * 43, 3072), (tail, plain)) == plain.config


def test_a_table_fitted_for_other_features_is_refused(tmp_path):
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"features": ["rounds"], "entries": []}))
    with pytest.raises(ValueError, match="fitted for features"):
        selector.table(path)
    with pytest.warns(RuntimeWarning, match="no config selector table"):
        assert selector.table(tmp_path / "none.json") == ()  # no table: the hand rules everywhere
