"""Optional autotuning whose results persist on disk across processes.

The runtime uses the heuristic (``configs.heuristic_config``) unless autotuning is on
(``INDUCTOR_MM_PLUGIN_AUTOTUNE=1`` or ``set_autotune(True)``); then, per shape bucket
(``Problem.bucket()``), it asks a ``TuningCache`` first and times the candidates only on a
miss. The cache file is keyed by GPU name, Triton version and a hash of the kernels, their
configurations and tables, and the runtime (``kernel_source_hash``), so a new GPU, a Triton
upgrade, an edited kernel or a refitted table starts a new file instead of reusing stale
choices. A second process with a warm file times nothing.

File safety: a write reads the file, merges its entry in and replaces the file (a temporary
file in the same folder, then ``os.replace``, atomic on POSIX and Windows), so a reader never
sees a torn file. The read-merge-replace runs under an exclusive lock across processes
(``_exclusive``), so writers at the same moment keep every entry: without it, two writers
of 200 buckets each kept 298 of 400 (each replaced the file with its own merge, made before
the other's). One file under a lock rather than a file per entry: one read serves every
lookup, and the format stays one JSON file a person can read. A file that does not parse
(deep nesting included), or whose header does not match in value and type, is treated as
empty (and replaced on the next write); an entry that fails its validation (``valid``: every
field with its type) is ignored, and measured again.

A folder that cannot be written (read-only, full, or not a folder) costs the next process a
re-tune, never this one: every entry this process tuned or read stays in memory.

Location: ``$INDUCTOR_MM_PLUGIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/inductor_mm_plugin``,
else ``~/.cache/inductor_mm_plugin``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pathlib
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator

try:
    import fcntl as _fcntl
except ImportError:  # Windows: the lock-folder fallback
    _fcntl = None

from ..configs import MatmulConfig

FORMAT_VERSION = 1


def cache_dir() -> pathlib.Path:
    explicit = os.environ.get("INDUCTOR_MM_PLUGIN_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "inductor_mm_plugin"


def kernel_source_hash(package: pathlib.Path | None = None) -> str:
    """Hash of the files that decide which kernel a call runs and how: the kernels, their
    configurations and the selector's tables, and the runtime that picks and launches them.
    A refitted table or a launch-path change makes cached timings stale (a routing decision
    timed before the ``_copies`` fix of 2026-12-02 measured another path than runs now)."""
    package = package or pathlib.Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = [*(package / "kernels").glob("*.py"), *(package / "configs").glob("*.py"),
             *(package / "configs" / "tables").glob("*.json"), *(package / "runtime").glob("*.py")]  # fmt: skip
    for path in sorted(files):
        h.update(str(path.relative_to(package)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "unknown"


class DiskCache:
    """JSON entries by key for one (GPU, versions, kernel source), kept across processes: the
    file safety and lookups described above. ``kind`` names the file; subclasses say which
    entries are valid."""

    kind = "entries"

    def __init__(self, gpu: str, triton_version: str, source_hash: str, directory: pathlib.Path | None = None,
                 **versions: str):  # fmt: skip
        self.header = {"format": FORMAT_VERSION, "gpu": gpu, "triton": triton_version, "source": source_hash,
                       **versions}  # fmt: skip
        self.directory = pathlib.Path(directory) if directory is not None else cache_dir()
        tags = "".join(f"-{k}{_slug(v)}" for k, v in sorted(versions.items()))
        self.path = self.directory / f"{self.kind}-{_slug(gpu)}-triton{_slug(triton_version)}{tags}-{source_hash}.json"
        self._entries: dict[str, dict] | None = None
        self._lock = threading.Lock()

    def valid(self, entry) -> bool:
        return isinstance(entry, dict)

    # -- reading

    def _read_file(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError, RecursionError):
            return {}  # missing, unreadable or corrupt (RecursionError: nested too deep): start empty
        header = data.get("header") if isinstance(data, dict) else None
        # Then as JSON text too: in Python, a header's true equals our 1.
        if header != self.header or _canonical(header) != _canonical(self.header):
            return {}
        entries = data.get("entries")
        if not isinstance(entries, dict):
            return {}
        return {key: entry for key, entry in entries.items() if self.valid(entry)}  # a bad entry spoils no other

    def get_entry(self, key: str) -> dict | None:
        with self._lock:
            if self._entries is None or key not in self._entries:
                # Another process may have written this key since we last looked. Merged
                # into memory, not replacing it: an entry whose write failed stays known.
                self._entries = {**(self._entries or {}), **self._read_file()}
            return self._entries.get(key)

    # -- writing

    def put_entry(self, key: str, entry: dict) -> None:
        with self._lock, _exclusive(self.path):
            # What is in memory goes in too: entries whose earlier write failed get another try.
            merged = {**(self._entries or {}), **self._read_file(), key: entry}
            self._entries = merged
            self._write(merged)

    def _write(self, entries: dict[str, dict]) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({"header": self.header, "entries": entries}, f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            pass  # a read-only or full disk costs the next process a re-run (this one keeps its entries)


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


def _time_ms(value) -> bool:
    """A time as the tuner stores it: a finite, non-negative number (a bool is no number)."""
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


class TuningCache(DiskCache):
    """Best config per shape bucket for one (GPU, Triton version, kernel source) triple."""

    kind = "tuning"

    def valid(self, entry) -> bool:
        """``{"config": MatmulConfig.to_json(), "ms": time, "timings_ms"?: {name: time or null}}``."""
        if not isinstance(entry, dict) or not {"config", "ms"} <= set(entry) <= {"config", "ms", "timings_ms"}:
            return False
        try:
            MatmulConfig.from_json(entry["config"])
        except ValueError:
            return False
        timings = entry.get("timings_ms", {})
        return _time_ms(entry["ms"]) and isinstance(timings, dict) and all(
            t is None or _time_ms(t) for t in timings.values())  # fmt: skip

    def get(self, key: str) -> MatmulConfig | None:
        entry = self.get_entry(key)
        return MatmulConfig.from_json(entry["config"]) if entry else None

    def put(self, key: str, cfg: MatmulConfig, ms: float, timings: dict[str, float] | None = None) -> None:
        entry = {"config": cfg.to_json(), "ms": float(ms)}
        if timings:
            entry["timings_ms"] = {k: (v if math.isfinite(v) else None) for k, v in timings.items()}
        self.put_entry(key, entry)


# How long a writer waits for another's lock before writing without it, and the age past
# which the fallback's lock folder counts as left behind by a dead process. A merge and
# replace of the file takes milliseconds.
_LOCK_TIMEOUT_S = 10.0
_STALE_LOCK_S = 60.0


@contextlib.contextmanager
def _exclusive(path: pathlib.Path) -> Iterator[None]:
    """Hold an exclusive lock across processes on ``path`` while the block runs.

    POSIX: ``fcntl.flock`` on a sidecar file ``<name>.lock`` (left in place; the kernel drops
    the lock when its holder exits, also when it crashes). Where flock is missing (Windows)
    or refused (ENOLCK on some network file systems): a sidecar folder ``<name>.lockdir``,
    whose creation is atomic everywhere, removed on release and broken when older than
    ``_STALE_LOCK_S``. A lock that cannot be had within ``_LOCK_TIMEOUT_S``, or a folder
    where no lock file can be made (read-only: the write will fail too), gives way to an
    unlocked write, which at worst drops another writer's entry: autotuning never waits
    on the cache for long.
    """
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)  # the lock lives beside the file
    fd = None
    if _fcntl is not None:
        with contextlib.suppress(OSError):
            fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    if fd is not None:
        try:
            if _poll(lambda: _flock(fd)) is not None:
                yield
                return
        finally:
            os.close(fd)  # closing releases the lock
    folder = pathlib.Path(f"{path}.lockdir")
    held = _poll(lambda: _make_lock_folder(folder))
    try:
        yield
    finally:
        if held:
            with contextlib.suppress(OSError):
                folder.rmdir()


def _poll(try_once: Callable[[], bool | None]) -> bool | None:
    """Call ``try_once`` until it returns True (taken) or None (cannot be taken here), for
    at most ``_LOCK_TIMEOUT_S``; False means "held by another, try again"."""
    deadline = time.monotonic() + _LOCK_TIMEOUT_S
    while True:
        taken = try_once()
        if taken is not False or time.monotonic() > deadline:
            return taken or None
        time.sleep(0.001)


def _flock(fd: int) -> bool | None:
    try:
        _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return None  # flock refused (ENOLCK): the lock folder instead


def _make_lock_folder(folder: pathlib.Path) -> bool | None:
    try:
        folder.mkdir()
        return True
    except FileExistsError:
        with contextlib.suppress(OSError):
            if time.time() - folder.stat().st_mtime > _STALE_LOCK_S:
                folder.rmdir()  # left behind by a process that died holding it
        return False
    except OSError:
        return None  # no folder can be made here: the write will fail as well


def autotune(
    key: str,
    candidates: Iterable[MatmulConfig],
    time_ms: Callable[[MatmulConfig], float],
    cache: TuningCache,
) -> MatmulConfig:
    """The cached best config for ``key``, or time every candidate, store the best and return it.

    ``time_ms(cfg)`` runs the problem with ``cfg`` and returns milliseconds; it may raise for
    a config that does not compile or does not fit the device, which then drops out.
    """
    hit = cache.get(key)
    if hit is not None:
        return hit
    candidates = list(candidates)
    timings: dict[MatmulConfig, float] = {}
    errors = []
    for cfg in candidates:
        try:
            timings[cfg] = float(time_ms(cfg))
        except Exception as e:  # noqa: BLE001  (compile errors, out of resources)
            errors.append(f"{cfg.short()}: {type(e).__name__}: {str(e)[:200]}")
    timings = {c: t for c, t in timings.items() if math.isfinite(t)}
    if not timings:
        raise RuntimeError(f"inductor_mm_plugin autotuning: no candidate ran for {key}: " + "; ".join(errors))
    best = min(timings, key=timings.get)
    cache.put(key, best, timings[best], {c.short(): t for c, t in timings.items()})
    return best
