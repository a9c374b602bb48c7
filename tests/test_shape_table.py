"""The committed shape-class table (inductor/shape_table.py): which sites it answers, what it
answers, and that a sure loser is never timed while everything else is."""

import json

import pytest
import torch

from inductor_mm_plugin.inductor import measure, shape_table
from inductor_mm_plugin.inductor.measure import Measurement


def rows(cls, *ratios):
    return [dict(shape_class=cls, ratio=r) for r in ratios]


def test_build_marks_only_sure_classes():
    table = shape_table.build(rows("lose", 0.5, 0.9, 0.97) + rows("near", 0.6, 0.97, 0.99) + rows("win", 1.2, 1.3, 2.0)
                              + rows("mixed", 0.5, 1.5, 1.2) + rows("few", 0.1, 0.2) + rows("bad", float("nan")))  # fmt: skip
    verdicts = {k: v["verdict"] for k, v in table.items()}
    assert verdicts == {"lose": "loses", "near": "measure", "win": "wins", "mixed": "measure", "few": "measure"}
    assert table["lose"] == {"n": 3, "best": 0.97, "worst": 0.5, "geomean": pytest.approx(0.758, abs=1e-3),
                             "verdict": "loses"}  # fmt: skip


def T(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype)


@pytest.mark.parametrize("op, vals, expected", [
    ("mm", [T(64, 4096), T(4096, 1024)], "16bit/row/aligned/M17-64/N1-1024/K1025-4096"),
    ("mm", [T(64, 4096), T(1024, 4096).t()], "16bit/linear/aligned/M17-64/N1-1024/K1025-4096"),
    ("addmm", [T(1000), T(5000, 100), T(100, 1000)], "16bit/row/unaligned/M>4096/N1-1024/K1-1024"),
    ("mm", [T(1, 8).expand(1, 8), T(8, 8)], "16bit/row/aligned/M1/N1-1024/K1-1024"),  # M = 1: A's stride is moot
    ("mm", [T(4096, 64).t(), T(4096, 1024)], "16bit/t_row/aligned/M17-64/N1-1024/K1025-4096"),  # A transposed
    ("mm", [T(4096, 60).t(), T(1024, 4096).t()], "16bit/t_linear/unaligned/M17-64/N1-1024/K1025-4096"),  # its rows M long
    ("mm", [T(64, 4096).as_strided((64, 64), (1, 128)), T(64, 1024)], None),  # A with a gap between columns
    ("mm", [T(64, 4097)[:, 1:], T(4096, 1024)], None),  # an unaligned base
    ("mm", [T(64, 64, dtype=torch.float32), T(64, 64, dtype=torch.float32)], None),  # fp32: measured
    ("bmm", [T(2, 64, 64), T(2, 64, 64)], None),
])  # fmt: skip
def test_site_class_answers_only_the_layouts_the_table_measured(op, vals, expected):
    assert shape_table.site_class(op, vals) == expected


@pytest.fixture
def table_here(monkeypatch, tmp_path):
    """A table for "TEST GPU" in a temporary folder, the sites' device named that."""
    monkeypatch.setattr(shape_table, "TABLES", tmp_path)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "TEST GPU")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(shape_table.PEAKS, "TEST GPU", (1e15, 4e12))
    shape_table.clear()
    classes = {"16bit/row/aligned/M17-64/N1-1024/K1025-4096": {"n": 5, "best": 0.9, "worst": 0.5, "verdict": "loses"},
               "16bit/row/aligned/M65-256/N1-1024/K1025-4096": {"n": 4, "best": 3.0, "worst": 1.5, "verdict": "wins"},
               "16bit/row/aligned/M257-1024/N1-1024/K1025-4096": {"n": 4, "best": 1.1, "worst": 0.9,
                                                                 "verdict": "measure"}}  # fmt: skip
    (tmp_path / "TEST_GPU.json").write_text(json.dumps({"classes": classes}))
    yield
    shape_table.clear()


def test_a_sure_loser_is_not_timed_and_the_rest_is(table_here, monkeypatch):
    timed = []

    def fake(key, op, vals, alpha, beta, graphs):
        timed.append(vals[0].shape[0])
        return Measurement(8.0, 10.0, (1.25,) * 5, graphs)

    monkeypatch.setattr(measure, "cached_or_measure", fake)
    loser = measure.decide("mm", [T(64, 4096), T(4096, 1024)], 1, 1, graphs=False)
    assert loser[0] is False and loser[2] is None and "sure loser" in loser[1] and "TEST GPU" in loser[1]
    # A sure winner is routed untimed under CUDA graphs; without them (host cost) it is timed.
    winner = measure.decide("mm", [T(128, 4096), T(4096, 1024)], 1, 1, graphs=True)
    assert winner[0] is True and winner[2] is None and "sure winner" in winner[1]
    assert timed == []
    assert measure.decide("mm", [T(128, 4096), T(4096, 1024)], 1, 1, graphs=False)[0] is True
    # A winner's class answers plain mm only: a bias epilogue is timed.
    measure.decide("addmm", [T(1024), T(128, 4096), T(4096, 1024)], 1, 1, graphs=True)
    measure.decide("mm", [T(512, 4096), T(4096, 1024)], 1, 1, graphs=True)  # "measure"
    assert timed == [128, 1024, 512]
    # A winner's site too small to save MIN_SAVING_US per call at the class's worst ratio (1.5)
    # is timed: 65x1025x1025 moves 2.4 MB, 0.6 us at the peaks, so it saves 0.2 us at the least.
    small = measure.decide("mm", [T(65, 1025), T(1025, 1024)], 1, 1, graphs=True)
    assert timed[-1] == 65 and small[2] is not None


def test_floor_us_is_the_work_at_the_gpus_peaks():
    a, b = T(128, 4096), T(4096, 1024)
    bytes_ = (128 * 4096 + 4096 * 1024 + 128 * 1024) * 2
    assert shape_table.floor_us([a, b], "NVIDIA H200") == pytest.approx(bytes_ / 4.8e12 * 1e6)
    big = [T(8192, 8192), T(8192, 8192)]
    assert shape_table.floor_us(big, "NVIDIA H200") == pytest.approx(2 * 8192**3 / 989e12 * 1e6)
    assert shape_table.floor_us(big, "a GPU with no peaks listed") < shape_table.floor_us(big, "NVIDIA H200")


def test_no_table_or_a_broken_table_means_measure(table_here, tmp_path):
    (tmp_path / "TEST_GPU.json").write_text("{not json")
    shape_table.clear()
    assert shape_table.lookup("mm", [T(64, 4096), T(4096, 1024)]) is None
    (tmp_path / "TEST_GPU.json").write_text(json.dumps({"classes": {"16bit/row/aligned/M17-64/N1-1024/K1025-4096": {
        "verdict": "loses", "n": "three"}}}))  # fmt: skip
    shape_table.clear()
    assert shape_table.lookup("mm", [T(64, 4096), T(4096, 1024)]) is None


@pytest.mark.parametrize("path", sorted(shape_table.TABLES.glob("*.json")), ids=lambda p: p.stem)
def test_every_committed_table_was_built_by_the_rule(path):
    """Each shipped table's verdicts follow from its own rows' numbers under today's thresholds,
    and its GPU has datasheet peaks (the floor a site is checked against)."""
    data = json.loads(path.read_text())
    assert shape_table._slug(data["gpu"]) == path.stem
    assert data["gpu"] in shape_table.PEAKS
    for cls, entry in data["classes"].items():
        rebuilt = shape_table.build(rows(cls, entry["worst"], *([entry["best"]] * (entry["n"] - 1))))
        assert rebuilt[cls]["verdict"] == entry["verdict"], cls
    assert {"gpu", "commit", "torch", "triton", "date", "seeds", "command"} <= set(data)
