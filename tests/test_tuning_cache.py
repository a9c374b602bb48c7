"""The autotuning cache on disk, with a fake timing function (the real tuner needs a GPU):
a warm cache tunes nothing, also in a second process; corrupt, foreign and concurrently
written files do no harm."""

import json
import multiprocessing
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from inductor_mm_plugin.configs import MatmulConfig, Problem
from inductor_mm_plugin.runtime.tuning import TuningCache, autotune, kernel_source_hash

CANDIDATES = [
    MatmulConfig("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 64, 128, 64, 8, 4, 4, split_k=2),
]
FAKE_MS = {CANDIDATES[0]: 2.0, CANDIDATES[1]: 1.0, CANDIDATES[2]: 3.0}
KEY = Problem(4096, 4096, 4096, 1, 2, "bfloat16", tma=True).bucket()


class FakeTimer:
    def __init__(self, fail=()):
        self.calls = []
        self.fail = set(fail)

    def __call__(self, cfg):
        self.calls.append(cfg)
        if cfg in self.fail:
            raise RuntimeError("out of resource: shared memory")
        return FAKE_MS[cfg]


def make_cache(tmp_path, gpu="NVIDIA H200", triton_version="3.6.0"):
    return TuningCache(gpu, triton_version, kernel_source_hash(), directory=tmp_path)


def test_cold_cache_times_every_candidate_and_stores_the_best(tmp_path):
    timer = FakeTimer()
    best = autotune(KEY, CANDIDATES, timer, make_cache(tmp_path))
    assert best == CANDIDATES[1]
    assert timer.calls == CANDIDATES
    data = json.loads(make_cache(tmp_path).path.read_text())
    assert data["header"]["gpu"] == "NVIDIA H200" and data["header"]["triton"] == "3.6.0"
    assert MatmulConfig.from_json(data["entries"][KEY]["config"]) == best


def test_warm_cache_tunes_nothing(tmp_path):
    autotune(KEY, CANDIDATES, FakeTimer(), make_cache(tmp_path))
    timer = FakeTimer()
    # A new cache object reads the file, as a new process would.
    assert autotune(KEY, CANDIDATES, timer, make_cache(tmp_path)) == CANDIDATES[1]
    assert timer.calls == []


def test_second_process_with_a_warm_cache_tunes_nothing(tmp_path):
    autotune(KEY, CANDIDATES, FakeTimer(), make_cache(tmp_path))
    script = textwrap.dedent(
        f"""
        from inductor_mm_plugin.configs import MatmulConfig
        from inductor_mm_plugin.runtime.tuning import TuningCache, autotune, kernel_source_hash
        calls = []
        def timer(cfg):
            calls.append(cfg)
            return 1.0
        cache = TuningCache("NVIDIA H200", "3.6.0", kernel_source_hash())
        best = autotune({KEY!r}, [MatmulConfig("tma", 64, 64, 64)], timer, cache)
        print(len(calls), best.block_m, best.block_n)
        """
    )
    env = {**os.environ, "INDUCTOR_MM_PLUGIN_CACHE_DIR": str(tmp_path)}
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "128", "128"]


def test_cache_is_keyed_by_gpu_triton_and_source(tmp_path):
    autotune(KEY, CANDIDATES, FakeTimer(), make_cache(tmp_path))
    for other in (make_cache(tmp_path, gpu="NVIDIA H100 80GB HBM3"), make_cache(tmp_path, triton_version="3.7.1")):
        assert other.path != make_cache(tmp_path).path
        assert other.get(KEY) is None
    moved = TuningCache("NVIDIA H200", "3.6.0", "0" * 16, directory=tmp_path)
    assert moved.get(KEY) is None


def test_file_with_a_foreign_header_is_ignored(tmp_path):
    cache = make_cache(tmp_path)
    autotune(KEY, CANDIDATES, FakeTimer(), cache)
    data = json.loads(cache.path.read_text())
    data["header"]["source"] = "edited-kernel"
    cache.path.write_text(json.dumps(data))
    assert make_cache(tmp_path).get(KEY) is None


DEEP = "[" * 100_000 + "]" * 100_000  # json raises RecursionError on it


@pytest.mark.parametrize("garbage", ["", "{", "[]", '{"header": 1}', '{"header": null, "entries": []}', "\x00\xff",
                                     DEEP, '{"header": ' + DEEP + ', "entries": {}}'])  # fmt: skip
def test_corrupt_file_is_treated_as_empty_and_replaced(tmp_path, garbage):
    cache = make_cache(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    cache.path.write_text(garbage, errors="ignore")
    timer = FakeTimer()
    assert autotune(KEY, CANDIDATES, timer, make_cache(tmp_path)) == CANDIDATES[1]
    assert len(timer.calls) == len(CANDIDATES)
    assert make_cache(tmp_path).get(KEY) == CANDIDATES[1]  # the file parses again


GOOD_CONFIG = CANDIDATES[1].to_json()
BAD_ENTRIES = [
    {"config": {**GOOD_CONFIG, "block_m": True}, "ms": 1.0},  # a bool for an int (True == 1)
    {"config": {**GOOD_CONFIG, "block_m": 128.0}, "ms": 1.0},
    {"config": {**GOOD_CONFIG, "num_stages": "3"}, "ms": 1.0},
    {"config": {**GOOD_CONFIG, "num_stages": 0}, "ms": 1.0},
    {"config": {**GOOD_CONFIG, "block_k": 1 << 20}, "ms": 1.0},
    {"config": {**GOOD_CONFIG, "epilogue_subtile": "no"}, "ms": 1.0},  # "no" is truthy
    {"config": {**GOOD_CONFIG, "kernel": ["tma"]}, "ms": 1.0},
    {"config": [GOOD_CONFIG], "ms": 1.0},
    {"config": GOOD_CONFIG, "ms": "1.0"},
    {"config": GOOD_CONFIG, "ms": float("nan")},
    {"config": GOOD_CONFIG, "ms": -1.0},
    {"config": GOOD_CONFIG, "ms": True},
    {"config": GOOD_CONFIG, "ms": 1.0, "timings_ms": [1.0]},
    {"config": GOOD_CONFIG, "ms": 1.0, "timings_ms": {"a": "fast"}},
    {"config": GOOD_CONFIG, "ms": 1.0, "extra": 1},
    {"config": GOOD_CONFIG},
    "entry",
]


@pytest.mark.parametrize("entry", BAD_ENTRIES)
def test_every_field_is_checked_with_its_type(tmp_path, entry):
    cache = make_cache(tmp_path)
    autotune(KEY, CANDIDATES, FakeTimer(), cache)
    data = json.loads(cache.path.read_text())
    data["entries"]["bad"] = entry
    cache.path.write_text(json.dumps(data))
    fresh = make_cache(tmp_path)
    assert fresh.get("bad") is None
    assert fresh.get(KEY) == CANDIDATES[1]


def test_a_header_must_match_in_type_too(tmp_path):
    cache = make_cache(tmp_path)
    autotune(KEY, CANDIDATES, FakeTimer(), cache)
    data = json.loads(cache.path.read_text())
    data["header"]["format"] = True  # == 1 in Python
    cache.path.write_text(json.dumps(data))
    assert make_cache(tmp_path).get(KEY) is None


def test_one_bad_entry_does_not_spoil_the_rest(tmp_path):
    cache = make_cache(tmp_path)
    autotune(KEY, CANDIDATES, FakeTimer(), cache)
    data = json.loads(cache.path.read_text())
    data["entries"]["broken"] = {"config": {"kernel": "tma", "block_m": 96}, "ms": 1}
    cache.path.write_text(json.dumps(data))
    fresh = make_cache(tmp_path)
    assert fresh.get("broken") is None
    assert fresh.get(KEY) == CANDIDATES[1]


def test_writers_merge_instead_of_overwriting(tmp_path):
    # Two processes' caches, both loaded before either wrote.
    first, second = make_cache(tmp_path), make_cache(tmp_path)
    assert first.get("a") is None and second.get("b") is None
    first.put("a", CANDIDATES[0], 1.0)
    second.put("b", CANDIDATES[1], 1.0)
    fresh = make_cache(tmp_path)
    assert fresh.get("a") == CANDIDATES[0] and fresh.get("b") == CANDIDATES[1]


def test_failing_candidates_drop_out(tmp_path):
    timer = FakeTimer(fail={CANDIDATES[1]})
    assert autotune(KEY, CANDIDATES, timer, make_cache(tmp_path)) == CANDIDATES[0]
    with pytest.raises(RuntimeError, match="no candidate ran"):
        autotune("other", CANDIDATES, FakeTimer(fail=set(CANDIDATES)), make_cache(tmp_path))


def test_unwritable_directory_costs_a_retune_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = TuningCache("NVIDIA H200", "3.6.0", kernel_source_hash(), directory=blocker / "cache")
    assert autotune(KEY, CANDIDATES, FakeTimer(), cache) == CANDIDATES[1]


def test_bucket_rounds_dimensions_and_keeps_layout():
    p = Problem(1000, 14336, 4096, 1, 2, "bfloat16", tma=True, b_kmajor=True)
    assert p.bucket() == "tma|bfloat16|kk|c1|bias0|b1|1024x16384x4096"
    assert Problem(1000, 14336, 4096, 1, 2, "bfloat16", tma=True).bucket() != p.bucket()
    assert Problem(1024, 16384, 4096, 1, 2, "bfloat16", tma=True, b_kmajor=True).bucket() == p.bucket()


# -- concurrent writers, unwritable folders


LOCKS = {"flock": "cache-flock", "lock-folder": "cache-lock-folder"}  # lock -> the folder its writers share


def _write_buckets(root: str, writer: int, buckets: int, start) -> None:
    """One process's writes (multiprocessing target): ``buckets`` entries of its own into
    each lock's folder, all writers starting together so their read-merge-replace cycles
    overlap. Both locks in one process: a process start (importing torch) is most of the cost."""
    from inductor_mm_plugin.runtime import tuning

    for lock, folder in LOCKS.items():
        if lock == "lock-folder":
            tuning._fcntl = None  # as on a platform without fcntl
        cache = TuningCache("NVIDIA H200", "3.6.0", kernel_source_hash(), directory=os.path.join(root, folder))
        start.wait()
        for i in range(buckets):
            cache.put(f"w{writer}-{i}", CANDIDATES[i % len(CANDIDATES)], float(i))


def test_concurrent_writers_keep_every_entry(tmp_path):
    # Without a lock around read-merge-replace, 2 writers x 200 buckets kept 298 of 400 entries.
    writers, buckets = 4, 50
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with torch's threads
    start = ctx.Barrier(writers)
    procs = [ctx.Process(target=_write_buckets, args=(str(tmp_path), w, buckets, start)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * writers
    for lock, name in LOCKS.items():
        # The folders did not exist: the first writers created them together.
        folder = tmp_path / name
        entries = json.loads(make_cache(folder).path.read_text())["entries"]  # parses: no torn writes
        missing = {f"w{w}-{i}" for w in range(writers) for i in range(buckets)} - set(entries)
        assert not missing, f"{lock}: {len(missing)} of {writers * buckets} entries lost, e.g. {sorted(missing)[:5]}"
        assert not [p for p in folder.iterdir() if p.suffix == ".tmp" or p.name.endswith(".lockdir")]


def _unwritable_folder_cases(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    yield "under-a-file", blocker / "cache"
    if os.name == "posix" and os.geteuid() != 0:  # root writes through chmod
        readonly = tmp_path / "readonly"
        readonly.mkdir()
        readonly.chmod(0o500)
        yield "read-only", readonly


@pytest.mark.parametrize("how", ["under-a-file", "read-only"])
def test_unwritable_folder_never_retunes_within_a_process(tmp_path, how):
    folders = dict(_unwritable_folder_cases(tmp_path))
    if how not in folders:
        pytest.skip("running as root: chmod does not stop root from writing")
    cache = TuningCache("NVIDIA H200", "3.6.0", kernel_source_hash(), directory=folders[how])
    timer = FakeTimer()
    assert autotune(KEY, CANDIDATES, timer, cache) == CANDIDATES[1]
    assert len(timer.calls) == len(CANDIDATES)
    # Misses on other buckets re-read the (missing) file; the tuned bucket stays in memory.
    assert autotune("other", CANDIDATES, timer, cache) == CANDIDATES[1]
    assert cache.get("third") is None
    calls = len(timer.calls)
    assert autotune(KEY, CANDIDATES, timer, cache) == CANDIDATES[1]
    assert autotune("other", CANDIDATES, timer, cache) == CANDIDATES[1]
    assert len(timer.calls) == calls, "re-timed a bucket tuned before in this process"
    assert not cache.path.exists()


def test_the_source_hash_covers_tables_and_the_runtime(tmp_path):
    """Cached timings (tuning, routing) go stale when what a call runs changes: a kernel, a
    config rule, the selector's fitted table or the launch path; not with other code."""
    import shutil

    import inductor_mm_plugin

    src = pathlib.Path(inductor_mm_plugin.__file__).parent
    pkg = tmp_path / "pkg"
    for part in ("kernels", "configs", "runtime", "inductor"):
        shutil.copytree(src / part, pkg / part, ignore=shutil.ignore_patterns("__pycache__"))
    base = kernel_source_hash(pkg)
    assert base == kernel_source_hash(src)  # the same files, wherever they are
    for path in ("configs/tables/NVIDIA_H200.json", "runtime/launch.py", "kernels/matmul_tma.py", "configs/eager.py"):
        original = (pkg / path).read_bytes()
        (pkg / path).write_bytes(original + b"\n")
        assert kernel_source_hash(pkg) != base, path
        (pkg / path).write_bytes(original)
    (pkg / "inductor" / "routing.py").write_text("# another pass\n")
    assert kernel_source_hash(pkg) == base
