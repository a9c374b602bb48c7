"""The bench scripts' timing in rounds (bench/_timing.py): the order each round, and ratios
taken within a round. CPU only: no timing happens here, only the bookkeeping."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))

import _timing  # noqa: E402


def test_rounds_reverse_the_order_every_round():
    order = []
    times = _timing.rounds({"a": "a", "b": "b", "c": "c"}, lambda name: order.append(name) or float(len(order)), 3)
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    # Each name's times are its own, in round order.
    assert times == {"a": [1.0, 6.0, 7.0], "b": [2.0, 5.0, 8.0], "c": [3.0, 4.0, 9.0]}


def test_ratios_pair_timings_of_the_same_round():
    # A clock that slows both arms by the same factor in round 2 leaves the ratio unchanged.
    times = {"aten": [1.0, 2.0, 1.1], "plugin": [0.5, 1.0, 0.55]}
    assert _timing.ratios(times, "aten", "plugin") == [2.0, 2.0, 2.0]
    assert _timing.median([0.9, 1.3, 1.0]) == 1.0
    assert _timing.spread([0.91, 1.2, 1.0]) == "0.91–1.20"
    assert _timing.spread([1.0]) == ""


def test_frames_compiled_counts_a_compile():
    import torch

    torch._dynamo.reset()
    before = _timing.frames_compiled()
    f = torch.compile(lambda x: x + 1, backend="eager")
    f(torch.ones(2))
    compiled = _timing.frames_compiled()
    assert compiled > before
    f(torch.ones(2))  # a cache hit compiles nothing
    assert _timing.frames_compiled() == compiled
