"""Routing decisions through torch's logging system, and from graphs Inductor loads from its
caches (where the routing pass does not run)."""

import gc
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import DEVICE
from integration_utils import MLP
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache

ROUTING_LOG = "inductor_mm_plugin.inductor.routing"
FROM_CACHE = "(graph loaded from Inductor's cache)"

# Compiles an MLP twice with a fresh Inductor cache of its own: the second compile loads the
# graph from the FX graph cache. A file, not ``-c``: the select predicate's source must be
# readable for the graph to be cached (RoutePass.uuid).
SCRIPT = textwrap.dedent("""
    import torch
    from torch._dynamo.utils import counters
    import inductor_mm_plugin  # noqa: F401
    import sys; sys.path.insert(0, {tests!r})
    from integration_utils import MLP

    model, x = MLP(), torch.randn(4, 16)
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=True):
        for attempt in range(2):
            torch._dynamo.reset()
            print("compile", attempt, file=sys.stderr, flush=True)
            torch.compile(model, backend="inductor_mm_plugin", options={{"select": lambda site: site.module == "up"}})(x)
    print("hits", counters["inductor"]["fxgraph_cache_hit"], file=sys.stderr)
""")


def run_script(tmp_path, torch_logs, extra=""):
    env = {**os.environ, "TRITON_INTERPRET": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("TORCH_LOGS", None)
    if torch_logs is not None:
        env["TORCH_LOGS"] = torch_logs
    script = tmp_path / "compile_twice.py"
    script.write_text(extra + SCRIPT.format(tests=os.path.dirname(__file__)))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.skipif(DEVICE != "cpu", reason="the script runs the CPU model")
def test_torch_logs_shows_the_decisions_also_on_a_cache_hit(tmp_path):
    res = run_script(tmp_path, "+inductor_mm_plugin")
    assert res.returncode == 0, res.stderr[-3000:]
    err = res.stderr
    assert "hits 1" in err, err[-3000:]
    first, second = err.split("compile 1")
    routed = "routed forward addmm up (Linear) [32 4x16 16x32] float32"
    not_routed = "not routed forward addmm down (Linear) [16 4x32 32x16] float32: the select predicate returned False"
    for line in (routed, not_routed):
        assert line in first and FROM_CACHE not in first, first[-3000:]
        assert f"{line} {FROM_CACHE}" in second, second[-3000:]
    # torch's format: "[rank...]I... [__file__:line] message" through torch's own handler
    assert "routing.py" in first


@pytest.mark.skipif(DEVICE != "cpu", reason="the script runs the CPU model")
def test_set_logs_and_torch_logs_take_module_names(tmp_path):
    # set_logs and TORCH_LOGS take the package's or the routing module's name. In a
    # subprocess: set_logs resets the handlers of every log it knows.
    extra = "import logging, torch\ntorch._logging.set_logs(modules={'inductor_mm_plugin': logging.INFO})\n"
    res = run_script(tmp_path, None, extra)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "routed forward addmm up (Linear)" in res.stderr and "hits 1" in res.stderr
    res = run_script(tmp_path, "inductor_mm_plugin.inductor.routing")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"routed forward addmm up (Linear) [32 4x16 16x32] float32 {FROM_CACHE}" in res.stderr


def compile_twice(model, x, train):
    """Compile and run twice in one fresh Inductor cache: (log records of each compile, hits).

    First a full garbage collection: the routing pass's cache key covers every marked class
    alive (selection.marked_classes_fingerprint, a WeakSet), and a class an earlier test marked
    and dropped, collected between the two compiles, changed the key of the second (a cache
    miss: hits [0, 0] once in three CI runs)."""
    gc.collect()
    records, hits = [], []
    for _ in range(2):
        torch._dynamo.reset()
        counters["inductor"].clear()
        handler = _Collect()
        logging.getLogger(ROUTING_LOG).addHandler(handler)
        try:
            compiled = torch.compile(model, backend="inductor_mm_plugin", options={"select": "all", "compete": False})
            out = compiled(x)
            if train:
                out.sum().backward()
        finally:
            logging.getLogger(ROUTING_LOG).removeHandler(handler)
        records.append(handler.lines)
        hits.append(counters["inductor"]["fxgraph_cache_hit"])
    return records, hits


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("train,autograd_cache", [(False, True), (True, True), (True, False)],
                         ids=["inference", "training", "training-no-autograd-cache"])  # fmt: skip
def test_a_cache_hit_reports_the_decisions(train, autograd_cache):
    # Training with AOTAutograd's cache: both graphs load in the backend's call. Without it,
    # the backward graph is compiled (here: loaded from the FX graph cache) at its first call.
    model = MLP()
    x = torch.randn(4, 16, device=DEVICE, requires_grad=train)
    level = logging.getLogger(ROUTING_LOG).level
    logging.getLogger(ROUTING_LOG).setLevel(logging.INFO)
    try:
        with fresh_cache(), torch.set_grad_enabled(train), torch._inductor.config.patch(fx_graph_cache=True), \
                torch._functorch.config.patch(enable_autograd_cache=autograd_cache):  # fmt: skip
            (fresh, cached), hits = compile_twice(model, x, train)
    finally:
        logging.getLogger(ROUTING_LOG).setLevel(level)
    graphs = 2 if train else 1
    assert hits == [0, graphs]
    assert len(fresh) == (6 if train else 2) and all(FROM_CACHE not in line for line in fresh), fresh
    assert sorted(cached) == sorted(f"{line} {FROM_CACHE}" for line in fresh)
