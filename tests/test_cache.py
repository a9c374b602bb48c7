"""Inductor's FX graph cache: a different selection never reuses another's compiled graph,
and the same selection compiled twice does hit the cache."""

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
