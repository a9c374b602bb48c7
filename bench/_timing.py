"""Timing in rounds, shared by the bench scripts: each row's implementations are timed back to
back, in an order reversed every round, and compared within each round.

Why rounds: the H200 runs large bf16 products at its 700 W power limit, and its SM clock moves
between about 1300 and 1980 MHz within seconds (``bench/ab_configs.py`` logs it). Timing each
implementation once, one after the other, compares two clock states as much as two kernels:
on one shape and one build, cuBLAS / plugin ranged 0.86-1.18 over five rounds
(bench/results/2026-11-29-NVIDIA_H200-ab-configs.json). Here every implementation is timed
once per round, the order reversed each round (A B C, C B A, A B C, ...), each ratio is taken
between timings of the same round, and the report gives the median over rounds and its range.
"""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
from typing import Callable


def rounds(fns: dict[str, Callable], time_one: Callable[[Callable], float], n: int) -> dict[str, list[float]]:
    """name -> the ``n`` times of ``time_one(fns[name])``, one per round."""
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n):
        for name in names if i % 2 == 0 else names[::-1]:
            times[name].append(time_one(fns[name]))
    return times


def ratios(times: dict[str, list[float]], base: str, other: str) -> list[float]:
    """Per round: ``base``'s time over ``other``'s (above 1: ``other`` is faster)."""
    return [b / o for b, o in zip(times[base], times[other])]


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float] | None, fmt: str = ".2f") -> str:
    """``lowest–highest`` of a row's per-round ratios, for the reports ('' for one round)."""
    return f"{min(xs):{fmt}}–{max(xs):{fmt}}" if xs and len(xs) > 1 else ""


def sm_clock() -> str:
    """The SM clock, power draw and temperature, as ``nvidia-smi`` reads them now."""
    try:
        query = "--query-gpu=clocks.sm,power.draw,temperature.gpu"
        return subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10).stdout.strip()  # fmt: skip
    except Exception as e:  # noqa: BLE001 (a report field, never a failure)
        return f"nvidia-smi: {e}"


def make_operands(M, N, K, dtype, layout, fill=True):
    """(a, b) on CUDA for ``a @ b``: B row-major (``"row"``), or a transposed (N, K) weight as
    nn.Linear passes it (``"linear"``); random, or uninitialized with ``fill=False`` (compiling)."""
    import torch

    new = torch.randn if fill else torch.empty
    a = new(M, K, device="cuda", dtype=dtype)
    if layout == "linear":
        b = new(N, K, device="cuda", dtype=dtype).t()
    else:
        b = new(K, N, device="cuda", dtype=dtype)
    return a, b


def header() -> str:
    """The GPU and the torch and triton versions, for a bench script's first line."""
    import torch
    import triton

    return f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}"


def frames_compiled() -> int:
    """Frames Dynamo has compiled so far in this process: the same before and after a timed
    region when nothing recompiled inside it (a recompile there would be timed too)."""
    import torch._dynamo.utils

    return sum(torch._dynamo.utils.counters["frames"].values())


def write_rows(path: str, rows: list) -> None:
    """A bench script's rows as JSON, with the date, the GPU and the torch and triton versions."""
    import torch
    import triton

    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "rows": rows}  # fmt: skip
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
