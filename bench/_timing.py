"""What every bench script shares: timing in rounds, CUDA-graph timing, the float64 check,
the precompile pool, and the JSONL rows with their run metadata.

Why rounds: the H200 runs large bf16 products at its 700 W power limit, and its SM clock moves
between about 1300 and 1980 MHz within seconds. Timing each implementation once, one after
the other, compares two clock states as much as two kernels: on one shape and one build,
cuBLAS / plugin ranged 0.86-1.18 over five rounds
(bench/results/archive/2026-11-29-NVIDIA_H200-ab-configs.json). Here every implementation is
timed once per round, the order reversed each round (A B C, C B A, A B C, ...), each ratio is
taken between timings of the same round, and the report gives the median over rounds and its
range.

The package is reached only through its runtime interface (``plugin_runtime``: launch,
candidates_for, chosen_config, clear_plans, set_autotune, warmup), its public ops and
``MatmulConfig``; ``bench/ab.py`` loads trees from before that interface existed, so both
spellings are found here and nowhere else.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime
import importlib
import json
import math
import multiprocessing as mp
import os
import pathlib
import subprocess
import sys
import time
import types
from typing import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
if str(REPO) not in sys.path:  # the package of this tree, installed or not
    sys.path.insert(1, str(REPO))
from inductor_mm_plugin.runtime import benchmarking  # noqa: E402  (after the path above)
from inductor_mm_plugin.runtime.benchmarking import geomean, median, ratios  # noqa: E402,F401  (re-exported)
L2_BYTES = 60 * 2**20  # H200: 60 MB of L2 (torch.cuda.get_device_properties reads 60 MiB there)


# ------------------------------------------------------------------------------ rounds
# The package's one timing toolkit (inductor_mm_plugin/runtime/benchmarking.py) does the
# rounds, the statistics and the CUDA graphs; these names keep the scripts short.


def rounds(fns: dict[str, Callable], time_one: Callable[[Callable], float], n: int,
           mirrored: bool = False) -> dict[str, list[float]]:  # fmt: skip
    """name -> the ``n`` times of ``time_one(fns[name])``, one per round, the order reversed each
    round; ``mirrored``: each round's order and then its reverse (``benchmarking.interleaved``)."""
    return benchmarking.interleaved({name: (lambda fn=fn: time_one(fn)) for name, fn in fns.items()}, n,
                                    mirrored=mirrored)  # fmt: skip


def percentile(xs, q: float) -> float:
    """The ``q``-th percentile (0-100) of ``xs``, linear between order statistics."""
    return benchmarking.quantile(xs, q / 100)


def spread(xs: list[float] | None, fmt: str = ".2f") -> str:
    """``lowest–highest`` of a row's per-round ratios, for the reports ('' for one round)."""
    return f"{min(xs):{fmt}}–{max(xs):{fmt}}" if xs and len(xs) > 1 else ""


def print_configs(results: list[dict], most: int | None = None, fmt: str = ".2f", extra=lambda r: "") -> None:
    """A sweep row's configs, fastest first: ratio (its per-round spread), ``extra(r)``, name, error."""
    for r in sorted(results, key=lambda r: -(r.get("ratio") or 0))[:most]:
        ratio = f"{r['ratio']:{fmt}} ({spread(r.get('ratio_rounds'), fmt)})" if r.get("ratio") else "  -  "
        print(f"      {ratio}  {extra(r)}{r['config']}  {r.get('error') or ''}", flush=True)


# ------------------------------------------------------------------------------ timing


def require_cuda(script: str) -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"{script} times GPU kernels: it needs a CUDA device (see --help for a CPU mode where there is one)")


def time_ms(fn: Callable, warmup: int = 5, rep: int = 25) -> float:
    """Median of ``triton.testing.do_bench`` (events around each call, L2 flushed before it)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


class GraphTimer:
    """One CUDA graph of back-to-back calls of ``fn`` (about ``target_ms`` of them, at most
    ``most``), captured once and replayed every round (``benchmarking.Timer``): GPU time, launch
    gaps gone as in a model's CUDA graph. ``fn`` must be capture-safe and already compiled;
    rotate its inputs (``rotating``) where they fit in L2."""

    def __init__(self, fn: Callable, target_ms: float = 2.0, most: int = 500):
        self.timer = benchmarking.Timer([fn], target_us=target_ms * 1e3, most=most)
        if self.timer.how != "graphs":
            raise RuntimeError(self.timer.note)
        self.calls = self.timer.reps

    def __call__(self, replays: int = 5) -> float:
        """ms per call: the median over ``replays`` replays."""
        return median([self.timer() / 1e3 for _ in range(replays)])


def rotation(bytes_per_call: int, most: int = 64) -> int:
    """How many input sets to cycle through so that CUDA-graph replays read their inputs from
    memory, not L2: enough sets for three times the L2, at most ``most`` (tiny shapes stay
    partly cached; they are launch- and latency-bound anyway)."""
    return max(1, min(most, math.ceil(3 * L2_BYTES / max(bytes_per_call, 1))))


def rotating(fn: Callable, sets: list) -> Callable:
    """A zero-argument callable that calls ``fn(*sets[i])`` for i = 0, 1, 2, ... cyclically
    (each call captured into a graph binds the set it was captured with)."""
    state = {"i": 0}

    def call():
        args = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(*args)

    return call


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy rate (bytes read + written per second), measured now."""
    import torch

    src = torch.empty(2**30 // 2, device="cuda", dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), warmup=25, rep=100)
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def sm_clock() -> str:
    """The SM clock, power draw and temperature, as ``nvidia-smi`` reads them now."""
    try:
        query = "--query-gpu=clocks.sm,power.draw,temperature.gpu"
        return subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10).stdout.strip()  # fmt: skip
    except Exception as e:  # noqa: BLE001 (a report field, never a failure)
        return f"nvidia-smi: {e}"


def frames_compiled() -> int:
    """Frames Dynamo has compiled so far in this process: the same before and after a timed
    region when nothing recompiled inside it (a recompile there would be timed too)."""
    import torch._dynamo.utils

    return sum(torch._dynamo.utils.counters["frames"].values())


# ---------------------------------------------------------------------------- operands


DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def dtype_of(name: str):
    import torch

    return getattr(torch, DTYPES[name])


def make_operands(M, N, K, dtype, layout, fill=True, device="cuda"):
    """(a, b) for ``a @ b``: B row-major (``"row"``), or a transposed (N, K) weight as
    nn.Linear passes it (``"linear"``); ``"t_row"``/``"t_linear"``: the same with A a transposed
    (K, M) matrix, as a weight gradient's ``grad.t() @ x`` has it; random, or uninitialized
    with ``fill=False`` (compiling)."""
    import torch

    new = torch.randn if fill else torch.empty
    a = new(K, M, device=device, dtype=dtype).t() if layout.startswith("t_") else new(M, K, device=device, dtype=dtype)
    layout = layout.removeprefix("t_")
    if layout == "linear":
        b = new(N, K, device=device, dtype=dtype).t()
    else:
        b = new(K, N, device=device, dtype=dtype)
    return a, b


def check_rows(M: int, most: int = 384, seed: int = 0) -> list[int] | None:
    """The rows of an (M, N) result that the float64 check compares: all of them up to
    ``most``; else the first and last row of every 64-row block (each tile's edges, for any
    BLOCK_M up to 64 and a stride pattern of the larger ones) plus random rows, ``most`` in
    all. None: every row."""
    import random

    if M <= most:
        return None
    rows = {0, M - 1}
    for start in range(0, M, 64):
        rows.update((start, min(start + 63, M - 1)))
    rows = sorted(rows)
    if len(rows) >= most:
        rows = rows[:: math.ceil(len(rows) / most)] + [M - 1]
    rng = random.Random(seed)
    extra = most - len(rows)
    if extra > 0:
        rows = sorted(set(rows) | set(rng.sample(range(M), extra)))
    return sorted(set(rows))


def matmul_error(out, a, b, *, tf32=False, rows=None) -> str | None:
    """None when ``out`` (= a @ b) is within the tests' float64 error bound
    (``ops/reference.py``: Higham's dot-product bound), else a one-line description.
    ``rows``: compare only these rows (``check_rows``: a big result's reference costs a
    float64 product of the whole shape)."""
    import torch

    from inductor_mm_plugin.ops.reference import assert_matmul_close

    if rows is not None:
        idx = torch.tensor(rows, device=a.device)
        out, a = out.index_select(0, idx), a.index_select(0, idx)
    try:
        assert_matmul_close(out, a, b, tf32=tf32)
    except AssertionError as e:
        return str(e).splitlines()[0][:300]
    return None


def relative_errors(outs: dict, a, b, rows=None) -> dict[str, float]:
    """Each output's normwise error against the float64 product of ``a @ b`` on ``rows``
    (all if None): ||out - ref|| / ||ref|| (0 where the product is 0). Issue 31's numerics
    target compares the plugin's with cuBLAS's on the same operands."""
    import torch

    from inductor_mm_plugin.ops.reference import matmul_reference

    if rows is not None:
        idx = torch.tensor(rows, device=a.device)
        outs, a = {k: v.index_select(0, idx) for k, v in outs.items()}, a.index_select(0, idx)
    ref = matmul_reference(a, b)
    scale = float(torch.linalg.vector_norm(ref))
    return {k: float(torch.linalg.vector_norm(v.double() - ref)) / scale if scale else 0.0 for k, v in outs.items()}


def error_ratio(ours: float, theirs: float) -> float:
    """ours / theirs, 1.0 where both are exact (0) and a large number where only theirs is."""
    return ours / theirs if theirs else (1.0 if ours == 0 else 1e30)


# ------------------------------------------------------------------- the plugin's runtime


def plugin_runtime(pkg=None) -> types.ModuleType | types.SimpleNamespace:
    """The runtime interface of the package ``pkg`` (default: ``inductor_mm_plugin``):
    ``pkg.runtime`` (launch, candidates_for, chosen_config, clear_plans, set_autotune,
    warmup), or, for a tree from before it (``ab.py``'s older commits), the same functions
    under their old names in ``pkg.ops.matmul``."""
    pkg = pkg or importlib.import_module("inductor_mm_plugin")
    try:
        return importlib.import_module(pkg.__name__ + ".runtime")
    except ModuleNotFoundError as e:
        if e.name != pkg.__name__ + ".runtime":
            raise
    old = importlib.import_module(pkg.__name__ + ".ops.matmul")
    return types.SimpleNamespace(
        launch=old._launch, candidates_for=old._candidates_for, chosen_config=old.chosen_config,
        clear_plans=old.clear_plans, set_autotune=old.set_autotune, warmup=old.warmup,
    )  # fmt: skip


def matmul_config_class(pkg=None):
    """``MatmulConfig`` of ``pkg``: ``pkg.configs`` (after the refactor) or ``pkg.kernels.configs``."""
    pkg = pkg or importlib.import_module("inductor_mm_plugin")
    for name in (".configs", ".kernels.configs"):
        try:
            return importlib.import_module(pkg.__name__ + name).MatmulConfig
        except (ModuleNotFoundError, AttributeError):
            continue
    raise ImportError(f"{pkg.__name__}: no MatmulConfig in .configs or .kernels.configs")


def plugin_backend():
    """``backend=`` for the plugin: its name where the entry point is installed
    (``pip install -e .``), else the backend function itself (the same code)."""
    import torch

    if "inductor_mm_plugin" in torch._dynamo.list_backends(exclude_tags=()):
        return "inductor_mm_plugin"
    from inductor_mm_plugin.inductor.backend import backend

    return backend


def config_name(cfg) -> str | None:
    return cfg.short() if cfg is not None else None


# ----------------------------------------------------------------------- precompiling


def precompile(tasks: list, worker: Callable, jobs: int, initializer: Callable | None = None, initargs=()) -> list:
    """Run ``worker(task)`` for every task in ``jobs`` spawned processes (Triton's disk cache is
    shared, so the timed process finds the kernels compiled); returns the workers' results and
    prints how long it took. ``jobs`` <= 1: nothing (the first timed call compiles)."""
    if jobs <= 1 or not tasks:
        return []
    t0 = time.time()
    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=initializer,
                                initargs=initargs) as pool:  # fmt: skip
        results = list(pool.map(worker, tasks, chunksize=max(1, len(tasks) // (8 * jobs))))
    print(f"precompiled {len(tasks)} calls in {time.time() - t0:.0f}s ({jobs} processes)", flush=True)
    return results


# ----------------------------------------------------------------------- results rows


def git_commit() -> str:
    """The commit the package was measured at: ``.commit`` at the repository root (written
    where the tree is a snapshot without git history, ``tools/gpu_check.sh``), else git's short
    hash, with ``+dirty`` when the package or bench/ has uncommitted changes."""
    snap = REPO / ".commit"
    if snap.exists():
        return snap.read_text().strip()
    try:
        run = lambda *a: subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True, check=True,
                                        timeout=20).stdout.strip()  # noqa: E731  # fmt: skip
        commit = run("rev-parse", "--short", "HEAD")
        dirty = run("status", "--porcelain", "--untracked-files=no", "--", "inductor_mm_plugin", "bench")
        return commit + ("+dirty" if dirty else "")
    except Exception:  # noqa: BLE001 (a report field)
        return "unknown"


def run_meta(commit: str | None = None) -> dict:
    """The fields every JSONL row starts with: date, commit, gpu, torch, triton."""
    import torch
    import triton

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit or git_commit(),
            "gpu": gpu, "torch": torch.__version__, "triton": triton.__version__}  # fmt: skip


def append_jsonl(path, rows: list[dict], meta: dict) -> pathlib.Path:
    """Append ``rows`` to the JSONL file ``path``, one line each, ``meta``'s fields first."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps({**meta, **row}, default=str) + "\n")
    return path


def read_jsonl(path) -> list[dict]:
    path = pathlib.Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def header(meta: dict) -> str:
    """The GPU and the versions, for a bench script's first line."""
    return f"{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}, {meta['date']}"


def add_common_args(p, results: str, rounds: int = 3, jobs: bool = False) -> None:
    """--rounds, --out, --commit (and --jobs), the same in every script."""
    p.add_argument("--rounds", type=int, default=rounds,
                   help=f"time the implementations this many times, the order reversed each round (default {rounds})")
    if jobs:
        p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                       help="processes that compile the kernels before timing (1: none, the first call compiles)")
    p.add_argument("--out", default=os.environ.get("BENCH_OUT", str(RESULTS)),
                   help=f"folder of the JSONL file ({results}) the rows are appended to (default bench/results; "
                        "$BENCH_OUT if set)")  # fmt: skip
    p.add_argument("--commit", default=None,
                   help="commit to record (default: .commit at the repo root, else git's)")  # fmt: skip
