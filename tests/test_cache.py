"""Inductor's FX graph cache: a different selection never reuses another's compiled graph,
and the same selection compiled twice does hit the cache."""

import os
import pathlib
import subprocess
import sys
import types

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE
from integration_utils import MLP, count_calls
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache, run_and_get_code

from inductor_mm_plugin import opt_in, opt_out
from inductor_mm_plugin.inductor.records import record_sites


def compile_and_run(model, x, options):
    torch._dynamo.reset()
    counters["inductor"].clear()
    # compete=False unless set: the counts below are of routed sites (see run_compiled).
    compiled = torch.compile(model, backend="inductor_mm_plugin", options={"compete": False, **options})
    out, codes = run_and_get_code(compiled, x)
    return out, codes, counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def test_same_selection_hits_different_selection_misses():
    model, x = MLP(), torch.randn(4, 16, device=DEVICE)
    with fresh_cache(), torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=True):
        _, codes, hits, misses = compile_and_run(model, x, {"select": "all"})
        assert (hits, misses) == (0, 1)
        assert count_calls(codes) == (2, 0)

        _, codes, hits, misses = compile_and_run(model, x, {"select": "all"})
        assert (hits, misses) == (1, 0), "the same selection must hit the cache"
        assert count_calls(codes) == (2, 0)

        predicate = lambda site: site.module == "up"  # noqa: E731
        _, codes, hits, misses = compile_and_run(model, x, {"select": predicate})
        assert (hits, misses) == (0, 1), "a different selection must not reuse the cached graph"
        assert count_calls(codes) == (1, 1)

        _, codes, hits, misses = compile_and_run(model, x, {"select": "all", "compete": True})
        assert misses == 1 and hits == 0


def test_opting_in_a_module_changes_the_key():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = MLP(), MLP()

        def forward(self, x):
            return self.b(self.a(x))

    model, x = Model(), torch.randn(4, 16, device=DEVICE)
    with fresh_cache(), torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=True):
        _, codes, hits, misses = compile_and_run(model, x, {"select": "auto"})
        assert misses == 1 and count_calls(codes) == (4, 0)
        opt_in(model.a)  # the graph is the same; the markers (node metadata) are not
        _, codes, hits, misses = compile_and_run(model, x, {"select": "auto"})
        assert (hits, misses) == (0, 1)
        assert count_calls(codes) == (2, 2)
        _, codes, hits, misses = compile_and_run(model, x, {"select": "auto"})
        assert (hits, misses) == (1, 0)
        assert count_calls(codes) == (2, 2)


def test_uuid_covers_options_and_is_none_for_unreadable_predicates():
    from inductor_mm_plugin.inductor.options import PluginOptions
    from inductor_mm_plugin.inductor.routing import RoutePass

    a = RoutePass(PluginOptions(select="all")).uuid()
    assert a == RoutePass(PluginOptions(select="all")).uuid()
    assert a != RoutePass(PluginOptions(select="opted_in")).uuid()
    assert a != RoutePass(PluginOptions(select="all", compete=True)).uuid()
    # A predicate built from exec'd source has no readable source: no caching for it.
    namespace = {}
    exec("def pred(site):\n    return True\n", namespace)
    assert RoutePass(PluginOptions(select=namespace["pred"])).uuid() is None
    # A chained pass without a uuid (a plain function) disables caching too.
    assert RoutePass(PluginOptions(), chained=lambda graph: None).uuid() is None


def test_moving_a_marker_to_another_instance_of_its_class_changes_the_key():
    # The same graph, and the same marked classes (Linear[opt_out]): only where the marker is differs.
    x = torch.randn(4, 16, device=DEVICE)
    with fresh_cache(), torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=True):
        model = MLP()
        opt_out(model.up)
        _, codes, hits, misses = compile_and_run(model, x, {"select": "all"})
        assert misses == 1 and count_calls(codes) == (1, 1)
        model = MLP()
        opt_out(model.down)
        with record_sites() as records:
            _, codes, hits, misses = compile_and_run(model, x, {"select": "all"})
        assert (hits, misses) == (0, 1), "a marker on another module must not reuse the cached graph"
        assert [(r.site.module, r.routed) for r in records] == [("up", True), ("down", False)]
# ------------------------------------------------------------- select predicates
# What a predicate's fingerprint can prove (routing._callable_fingerprint): its source, and
# the values of its defaults, closure and the globals it reads when those are plain data.
# Anything else it could read (a module such as os, another function, an object) or do (an
# import, a builtin outside the pure ones) turns Inductor's cache off for the compile.

ROUTE_UP = True  # read by up_if_flag; the tests below change it
ROUTED_MODULES = ("up",)


def up_if_flag(site):
    return site.module == "up" if ROUTE_UP else False


def in_routed_modules(site):
    return site.module in ROUTED_MODULES and len(site.shapes) >= 2


def by_env(site):
    return os.environ.get("ROUTE_MODULE", "up") == site.module


def _helper(site):
    return site.module == "up"


def calls_a_helper(site):
    return _helper(site)


def imports(site):
    import os as _os

    return _os.sep == "/" and site.module == "up"


def prints(site):
    print(site)
    return True


def comprehension_reads_os(site):
    return any(os.sep == c for c in site.module)


def with_default(site, wanted="up"):
    return site.module == wanted


def _closure_over(value):
    def pred(site):
        return site.module == value

    return pred


def _empty_cell():
    def pred(site):
        return later(site)  # noqa: F821  (assigned below, never: the cell stays empty)

    return pred
    later = None  # noqa: F841


class _BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")


def _fingerprint(fn):
    from inductor_mm_plugin.inductor.routing import _callable_fingerprint

    return _callable_fingerprint(fn)


def test_fingerprint_is_none_unless_it_covers_what_the_predicate_reads():
    import functools

    for pred in (by_env, calls_a_helper, imports, prints, comprehension_reads_os, _closure_over(_helper),
                 _closure_over(_BadRepr()), _closure_over(os), _empty_cell(), functools.partial(with_default),
                 _helper.__call__, type("Callable", (), {"__call__": lambda self, site: True})()):  # fmt: skip
        assert _fingerprint(pred) is None, pred
    for pred in (up_if_flag, in_routed_modules, with_default, _closure_over("up"), _closure_over(("up", 1.5)),
                 lambda site: site.module.startswith("u") and isinstance(site.op, str)):  # fmt: skip
        assert _fingerprint(pred) is not None, pred


def test_fingerprint_follows_the_values_read(monkeypatch):
    first = _fingerprint(up_if_flag)
    monkeypatch.setattr(sys.modules[__name__], "ROUTE_UP", False)
    assert _fingerprint(up_if_flag) != first
    assert _fingerprint(_closure_over("up")) != _fingerprint(_closure_over("down"))
    assert _fingerprint(_closure_over({"up", "down"})) == _fingerprint(_closure_over({"down", "up"}))
    down = types.FunctionType(with_default.__code__, with_default.__globals__, "with_default", ("down",))
    assert _fingerprint(down) != _fingerprint(with_default)


def test_a_predicate_reading_a_global_or_the_environment_never_gets_stale_routing(monkeypatch):
    """A cache hit after torch._dynamo.reset() must not bring back the routing of the old
    value: a plain global is in the key; an environment variable turns the cache off."""
    model, x = MLP(), torch.randn(4, 16, device=DEVICE)
    module = sys.modules[__name__]
    with fresh_cache(), torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=True):
        monkeypatch.setattr(module, "ROUTE_UP", True)
        _, codes, hits, misses = compile_and_run(model, x, {"select": up_if_flag})
        assert count_calls(codes) == (1, 1) and misses == 1
        monkeypatch.setattr(module, "ROUTE_UP", False)
        _, codes, hits, misses = compile_and_run(model, x, {"select": up_if_flag})
        assert count_calls(codes) == (0, 2) and (hits, misses) == (0, 1)
        monkeypatch.setattr(module, "ROUTE_UP", True)
        _, codes, hits, misses = compile_and_run(model, x, {"select": up_if_flag})
        assert count_calls(codes) == (1, 1) and (hits, misses) == (1, 0)  # the first graph again

        for module_name, calls in (("up", (1, 1)), ("down", (1, 1)), ("none", (0, 2)), ("up", (1, 1))):
            monkeypatch.setenv("ROUTE_MODULE", module_name)
            _, codes, hits, misses = compile_and_run(model, x, {"select": by_env})
            assert count_calls(codes) == calls and hits == 0, module_name


_PROCESS_SCRIPT = '''
import os, sys
sys.path.insert(0, {tests!r})
import torch
from integration_utils import MLP, count_calls
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

ROUTED = os.environ["ROUTE_MODULE"]  # a plain global, read when this file is imported


def by_global(site):
    return site.module == ROUTED


def by_env(site):
    return site.module == os.environ["ROUTE_MODULE"]


torch.manual_seed(0)
torch._inductor.config.fx_graph_cache = True
compiled = torch.compile(MLP(), backend="inductor_mm_plugin", options={{"select": {kind}, "compete": False}})
with torch.no_grad():
    _, codes = run_and_get_code(compiled, torch.randn(4, 16, device="cuda"))
print(*count_calls(codes), counters["inductor"]["fxgraph_cache_hit"])
'''


@pytest.mark.gpu
@pytest.mark.parametrize("kind,hits", [("by_global", [0, 0, 1, 0]), ("by_env", [0, 0, 0, 0])])
def test_gpu_predicates_get_fresh_routing_across_processes(tmp_path, kind, hits):
    """Four processes share one Inductor cache, each routing the module its environment
    names: a plain global is in the key (the third process, like the first, hits); a
    predicate that reads the environment itself turns the cache off."""
    script = tmp_path / "route.py"  # a file, so that the predicates' source can be read
    script.write_text(_PROCESS_SCRIPT.format(tests=str(pathlib.Path(__file__).parent), kind=kind))
    seen = []
    for module in ("up", "down", "up", "none"):
        env = {**os.environ, "ROUTE_MODULE": module, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
        res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        plugin, stock, hit = map(int, res.stdout.split()[-3:])
        assert (plugin, stock) == ((0, 2) if module == "none" else (1, 1)), module
        seen.append(hit)
    assert seen == hits
