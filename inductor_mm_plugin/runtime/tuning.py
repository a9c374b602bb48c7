"""Optional autotuning whose results persist on disk across processes.

The runtime uses the heuristic (``configs.heuristic_config``) unless autotuning is on
(``INDUCTOR_MM_PLUGIN_AUTOTUNE=1`` or ``set_autotune(True)``); then, per shape bucket
(``Problem.bucket()``), it asks a ``TuningCache`` first and times the candidates only on a
miss. The cache file is keyed by GPU name, Triton version and a hash of the kernel sources,
so a new GPU, a Triton upgrade or an edited kernel starts a new file instead of reusing
stale choices. A second process with a warm file times nothing.

File safety: writes go to a temporary file in the same folder, then ``os.replace`` (atomic
on POSIX and Windows), after merging with what is on disk at that moment, so concurrent
writers lose at most each other's newest entry, never the file. A file that does not
parse, or whose header does not match, is treated as empty (and replaced on the next
write).

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
from collections.abc import Callable, Iterable

from ..configs import MatmulConfig

FORMAT_VERSION = 1


def cache_dir() -> pathlib.Path:
    explicit = os.environ.get("INDUCTOR_MM_PLUGIN_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "inductor_mm_plugin"


def kernel_source_hash() -> str:
    """Hash of the files that define the kernels and their configurations."""
    package = pathlib.Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted([*(package / "kernels").glob("*.py"), *(package / "configs").glob("*.py")]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "unknown"


class TuningCache:
    """Best config per shape bucket for one (GPU, Triton version, kernel source) triple."""

    def __init__(self, gpu: str, triton_version: str, source_hash: str, directory: pathlib.Path | None = None):
        self.header = {"format": FORMAT_VERSION, "gpu": gpu, "triton": triton_version, "source": source_hash}
        self.directory = pathlib.Path(directory) if directory is not None else cache_dir()
        self.path = self.directory / f"tuning-{_slug(gpu)}-triton{_slug(triton_version)}-{source_hash}.json"
        self._entries: dict[str, dict] | None = None
        self._lock = threading.Lock()

    # -- reading

    def _read_file(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # missing, unreadable or corrupt: start empty
        if not isinstance(data, dict) or data.get("header") != self.header:
            return {}
        entries = data.get("entries")
        if not isinstance(entries, dict):
            return {}
        good = {}
        for key, entry in entries.items():
            try:
                MatmulConfig.from_json(entry["config"])
                float(entry["ms"])
            except (KeyError, TypeError, ValueError):
                continue  # one bad entry does not spoil the rest
            good[key] = entry
        return good

    def get(self, key: str) -> MatmulConfig | None:
        with self._lock:
            if self._entries is None or key not in self._entries:
                # Another process may have tuned this bucket since we last looked.
                self._entries = self._read_file()
            entry = self._entries.get(key)
        return MatmulConfig.from_json(entry["config"]) if entry else None

    # -- writing

    def put(self, key: str, cfg: MatmulConfig, ms: float, timings: dict[str, float] | None = None) -> None:
        entry = {"config": cfg.to_json(), "ms": float(ms)}
        if timings:
            entry["timings_ms"] = {k: (v if math.isfinite(v) else None) for k, v in timings.items()}
        with self._lock:
            merged = self._read_file()
            merged[key] = entry
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
            pass  # a read-only or full disk costs the next process a re-tune, nothing more


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
