"""What the routing pass decided, site by site: the records ``compare`` collects, and the
decision log, also for graphs Inductor loads from its caches.

Logs: each decision goes to the routing pass's logger, ``inductor_mm_plugin.inductor.routing``
(the module that decides; each line names its place in routing.py). Torch's logging system
takes module names, so ``TORCH_LOGS="+inductor_mm_plugin"`` (all the package's logs),
``TORCH_LOGS="+inductor_mm_plugin.inductor.routing"`` (the decisions) and
``torch._logging.set_logs(modules={"inductor_mm_plugin": logging.INFO})`` show them. The
plugin registers no log alias with torch: TORCH_LOGS is parsed when torch is imported,
before any plugin code can register one, and a registered log is reset (no propagation to
the root logger) by every later ``set_logs`` call.

On a cache hit (Inductor's FX graph cache or AOTAutograd's) the pass does not run, so each
decision is also counted in ``counters["inductor"]`` under ``DECISION_PREFIX``: Inductor
stores those counts with the compiled graph (``CompiledFxGraph.counter_deltas``) and adds
them back when it loads the graph from either cache. ``reporting_cached_decisions`` (the
plugin backend wraps every compile in it) logs the decisions that came back that way.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
from typing import Callable, Iterator

from . import compat
from .decision import Compete
from .measure import Measurement
from .selection import Site

# The pass's module name: what users give TORCH_LOGS and set_logs for the decisions.
log = logging.getLogger("inductor_mm_plugin.inductor.routing")


@dataclasses.dataclass(frozen=True)
class SiteRecord:
    """A site and what the pass decided for it (what ``compare`` and the logs report)."""

    site: Site
    routed: bool
    reason: str
    graph: object = None  # the RoutePass's label: which captured graph (``compare``)
    # What a routed site competes with in Inductor's autotuner: None, or Compete.ALL
    # (compete=True). A competing site may end up running aten's kernel.
    compete: Compete | None = None
    # "swiglu": the site was fused with the other matmul of a SwiGLU product into one
    # ``inductor_mm_plugin::mm_swiglu`` (swiglu_pattern.py); "relu", "gelu", "gelu_tanh" or
    # "silu": with the activation its result feeds, into one ``mm_activation`` (activation_pattern.py).
    fused: str | None = None
    # compete="auto" on CUDA: the plugin's kernel against aten's on the site's operands (for a
    # fused site, the fused kernel against stock's form).
    measured: Measurement | None = None


# Listeners that want every decision (``compare``); a context manager adds one.
_listeners: list[Callable[[SiteRecord], None]] = []


@contextlib.contextmanager
def record_sites() -> Iterator[list[SiteRecord]]:
    """Collect the SiteRecord of every site any routing pass decides while inside."""
    records: list[SiteRecord] = []
    _listeners.append(records.append)
    try:
        yield records
    finally:
        _listeners.remove(records.append)


def publish(record: SiteRecord) -> None:
    """Hand one site's record to every listener."""
    for listener in list(_listeners):
        listener(record)


# Each decision's log line, counted in Inductor's counters (see the module docstring).
DECISION_PREFIX = "inductor_mm_plugin.routing: "
_from_the_pass: collections.Counter = collections.Counter()  # what the pass itself counted


def log_decision(message: str, *args) -> None:
    """Log one site's decision (at the pass's line that made it) and count it where a cached
    graph keeps it."""
    text = message % args
    log.info("%s", text, stacklevel=2)
    compat.counters["inductor"][DECISION_PREFIX + text] += 1
    _from_the_pass[text] += 1


def _decision_counts() -> collections.Counter:
    return collections.Counter({key[len(DECISION_PREFIX):]: n for key, n in compat.counters["inductor"].items()
                                if key.startswith(DECISION_PREFIX)})  # fmt: skip


@contextlib.contextmanager
def reporting_cached_decisions() -> Iterator[None]:
    """Log the decisions of graphs that Inductor loads from its caches inside the block
    (counted back by the cache, not by the pass), marked as such. Nested blocks report each
    decision once."""
    counts, own = _decision_counts(), _from_the_pass.copy()
    try:
        yield
    finally:
        replayed = (_decision_counts() - counts) - (_from_the_pass - own)
        for text, n in replayed.items():
            for _ in range(n):
                log.info("%s (graph loaded from Inductor's cache)", text)
        _from_the_pass.update(replayed)  # an enclosing block must not report them again
