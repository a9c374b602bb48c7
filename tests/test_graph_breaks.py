"""Module markers across graph breaks: a frame Dynamo resumes after a break inside a child
module is rooted at that child, yet ``opt_in``/``opt_out`` on its ancestors and
``select="auto"`` still apply as if the model compiled whole (issue 24, item 4).

Every case reads the generated code of the forward and backward graphs and counts the
plugin's and aten's matmul calls.
"""

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE
from integration_utils import count_calls, no_graph_caches, run_compiled
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache, run_and_get_code

import inductor_mm_plugin
from inductor_mm_plugin import opt_in, opt_out
from inductor_mm_plugin.inductor.records import record_sites

D = 16


def linear():
    return nn.Linear(D, D, device=DEVICE)


class Leaf(nn.Module):
    def __init__(self, breaks: bool):
        super().__init__()
        self.up, self.down, self.breaks = linear(), linear(), breaks

    def forward(self, x):
        h = torch.relu(self.up(x))
        if self.breaks:
            torch._dynamo.graph_break()
        return self.down(h)


class Child(nn.Module):
    def __init__(self, break_in: str):
        super().__init__()
        self.inner, self.proj, self.breaks = Leaf(break_in == "grandchild"), linear(), break_in == "child"

    def forward(self, x):
        h = self.inner(x)
        if self.breaks:
            torch._dynamo.graph_break()
        return self.proj(h)


class Model(nn.Module):
    """before -> child (inner.up, inner.down, proj) -> after: the graph breaks inside ``child``
    (or inside ``child.inner``), so ``after`` runs in a resumed frame of Model.forward and the
    rest of the child in resumed frames rooted at the child (or the grandchild)."""

    def __init__(self, break_in: str):
        super().__init__()
        self.before, self.child, self.after = linear(), Child(break_in), linear()

    def forward(self, x):
        return self.after(torch.relu(self.child(self.before(x))))


ALL = {"before", "child.inner.up", "child.inner.down", "child.proj", "after"}
CHILD = {"child.inner.up", "child.inner.down", "child.proj"}


def mark_nothing(model):
    pass


def opt_out_model(model):
    opt_out(model)


def opt_in_child(model):
    opt_in(model.child)


def opt_in_model(model):
    opt_in(model)


def opt_in_model_opt_out_child(model):
    opt_in(model)
    opt_out(model.child)


# (how the model is marked, select, the modules whose matmuls must be routed)
CASES = [
    (opt_out_model, "all", set()),  # opt_out always wins
    (opt_in_child, "auto", CHILD),  # "auto" means "opted_in": the model has an opted-in module
    (opt_in_child, "opted_in", CHILD),
    (opt_in_model, "opted_in", ALL),  # the root's marker reaches the resumed child frames
    (opt_in_model_opt_out_child, "opted_in", ALL - CHILD),
    (mark_nothing, "auto", ALL),
]
CASE_IDS = [f"{mark.__name__}-{select}" for mark, select, _ in CASES]


def sites_per_module(train: bool):
    """{module: number of its matmul sites}: a forward addmm each; backward, dX and dW
    (``before`` has no dX: the input needs no gradient)."""
    forward = dict.fromkeys(ALL, 1)
    backward = {m: (1 if m == "before" else 2) for m in ALL} if train else {}
    return {m: forward[m] + backward.get(m, 0) for m in ALL}


def run(model, x, select, *, stock_backend=False):
    """Compile ``model`` (plugin backend, or the stock backend with ``inductor_options``),
    run a training step; return (records, plugin calls, aten calls, loss, grads)."""
    kwargs = (
        {"options": inductor_mm_plugin.inductor_options(select=select, compete=False)}
        if stock_backend
        else {"backend": "inductor_mm_plugin", "options": {"select": select}}
    )
    with record_sites() as records, no_graph_caches():
        out, grads, codes = run_compiled(model, x, train=True, fresh_cache=False, **kwargs)
    plugin, stock = count_calls(codes)
    return records, plugin, stock, out, grads


@pytest.mark.parametrize("break_in", ["child", "grandchild"])
@pytest.mark.parametrize("mark,select,expected", CASES, ids=CASE_IDS)
def test_markers_survive_graph_breaks(break_in, mark, select, expected):
    model = Model(break_in)
    mark(model)
    x = torch.randn(4, D, device=DEVICE)
    records, plugin, stock, out, grads = run(model, x, select)
    # The break splits the model into several graphs, each with a backward graph.
    assert {r.site.phase for r in records} == {"forward", "backward"}
    per_module = sites_per_module(train=True)
    want_plugin = sum(per_module[m] for m in expected)
    assert (plugin, stock) == (want_plugin, sum(per_module.values()) - want_plugin), records
    # Site paths are the module's path in the compiled model, whichever frame it ran in.
    assert {r.site.module for r in records} == ALL
    assert {r.site.module for r in records if r.routed} == expected
    for r in records:
        if r.site.module not in expected and select != "all":
            assert "opt" in r.reason, r


@pytest.mark.parametrize("mark,select,expected", CASES[:2], ids=CASE_IDS[:2])
def test_markers_survive_graph_breaks_with_the_stock_backend(mark, select, expected):
    """One routing pass serves every graph of a stock-backend compile, and the backward
    graphs compile later, outside Dynamo's trace: each must use its own forward's modules."""
    model = Model("grandchild")
    mark(model)
    records, plugin, stock, _, _ = run(model, torch.randn(4, D, device=DEVICE), select, stock_backend=True)
    per_module = sites_per_module(train=True)
    want_plugin = sum(per_module[m] for m in expected)
    assert (plugin, stock) == (want_plugin, sum(per_module.values()) - want_plugin), records
    assert {r.site.module for r in records if r.routed} == expected


def test_numerics_across_graph_breaks():
    """Routed across four graphs (and their backward graphs): loss and gradients match a
    float64 eager reference within fp32's tolerance."""
    model = Model("grandchild")
    opt_in(model.child)
    x = torch.randn(4, D, device=DEVICE)
    _, plugin, _, out, grads = run(model, x, "auto")
    assert plugin == sum(n for m, n in sites_per_module(train=True).items() if m in CHILD)
    ref = Model("grandchild").to(torch.float64)
    ref.load_state_dict(model.state_dict())
    ref_out = ref(x.double())
    ref_out.square().sum().backward()
    # fp32 operands, fp32 accumulation over K = 16, five layers deep: 1e-4 is ~1000 ulp.
    torch.testing.assert_close(out.double(), ref_out, rtol=1e-4, atol=1e-4)
    for g, p in zip(grads, ref.parameters()):
        torch.testing.assert_close(g.double(), p.grad, rtol=1e-4, atol=1e-4)


def test_cache_key_covers_the_markers_of_a_resumed_frames_ancestors():
    """The grandchild's resumed frame compiles to the same graph under a marked and an
    unmarked model: its cache key must still differ, or one would reuse the other's code."""

    @opt_out
    class OptedOutModel(Model):
        pass

    x = torch.randn(4, D, device=DEVICE)
    with fresh_cache(), torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=True):
        for model, want in ((OptedOutModel("grandchild"), 0), (Model("grandchild"), len(ALL))):
            torch._dynamo.reset()
            counters["inductor"].clear()
            compiled = torch.compile(model, backend="inductor_mm_plugin", options={"select": "all", "compete": False})
            _, codes = run_and_get_code(compiled, x)
            assert count_calls(codes) == (want, len(ALL) - want), codes


def test_a_child_compiled_inside_an_eager_parent_is_the_compiled_model():
    """``select="auto"`` and the markers look at the compiled model: a child compiled on its
    own and called from an eager parent with an opted-in sibling and an opt_out on the
    parent's class routes all of its own matmuls, before and after its graph break."""

    @opt_out
    class Parent(Model):
        pass

    model = Parent("grandchild")
    opt_in(model.before)
    torch._dynamo.reset()
    model.child = torch.compile(model.child, backend="inductor_mm_plugin", options={"compete": False})
    with record_sites() as records, no_graph_caches():
        _, codes = run_and_get_code(model, torch.randn(4, D, device=DEVICE))
    assert count_calls(codes) == (3, 0), records
    assert {r.site.module for r in records} == {"inner.up", "inner.down", "proj"}
