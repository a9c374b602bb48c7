"""The Linear + activation pattern of a post-grad graph, and its rewrite to one
``inductor_mm_plugin::mm_activation`` node (ops/activation.py).

A post-grad graph holds an activation decomposed: ``F.gelu(addmm(b, x, w))`` in bf16 is

    addmm -> [view] -> convert(fp32) -> {mul 0.5, mul 0.7071.. -> erf -> add 1} -> mul -> convert(bf16)

Each activation's decomposed form is written below as a small function of aten ops (what
Inductor's decompositions produce, read from torch 2.11 and 2.13; tests/test_activation.py
compiles each activation and checks that the pattern finds it). A match starts at a 2-D
``mm``/``addmm`` (alpha = beta = 1) whose result reaches the activation only through views,
and requires that nothing outside the pattern reads the matmul's result or any value inside
the activation: the fused kernel writes only the activation's result.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from .graph import VIEWS, copy_meta

aten, prims = torch.ops.aten, torch.ops.prims
_MM, _ADDMM = aten.mm.default, aten.addmm.default
_CONVERT = prims.convert_element_type.default


def _relu(x):
    return aten.relu.default(x)


def _gelu(x):
    return aten.mul.Tensor(aten.mul.Tensor(x, 0.5), aten.add.Tensor(aten.erf.default(aten.mul.Tensor(x, 0.7071067811865476)), 1))


def _gelu_tanh(x):
    inner = aten.mul.Tensor(aten.add.Tensor(x, aten.mul.Tensor(aten.mul.Tensor(aten.mul.Tensor(x, x), x), 0.044715)),
                            0.7978845608028654)  # fmt: skip
    return aten.mul.Tensor(aten.mul.Tensor(x, 0.5), aten.add.Tensor(aten.tanh.default(inner), 1))


def _silu(x):
    return aten.div.Tensor(x, aten.add.Tensor(aten.exp.default(aten.neg.default(x)), 1))


# name (as ops/activation.py takes it) -> its decomposed form. fp16/bf16 results are converted
# to fp32 first and back after, except ReLU's, which runs in the result's dtype.
PATTERNS = {"relu": _relu, "gelu": _gelu, "gelu_tanh": _gelu_tanh, "silu": _silu}


@functools.cache
def _pattern_graph(name: str) -> torch.fx.Graph:
    return torch.fx.symbolic_trace(PATTERNS[name]).graph


@dataclasses.dataclass
class ActivationSite:
    """A matmul node, the views between it and its activation, the activation's last node,
    the nodes the rewrite removes, and the activation's name."""

    matmul: torch.fx.Node
    views: list
    end: torch.fx.Node
    inner: list
    activation: str


def _same_literal(p, g) -> bool:
    return type(p) in (int, float) and type(g) in (int, float) and p == g


def _match(pattern: torch.fx.Graph, start: torch.fx.Node, end: torch.fx.Node) -> dict | None:
    """The pattern's nodes mapped onto the graph's, backwards from ``end``, its placeholder on
    ``start``; None where the graph computes something else."""
    placeholder = next(n for n in pattern.nodes if n.op == "placeholder")
    out = next(n for n in pattern.nodes if n.op == "output").args[0]
    mapping = {placeholder: start}

    def walk(p, g) -> bool:
        if p in mapping:
            return mapping[p] is g
        if not isinstance(g, torch.fx.Node) or g.op != "call_function" or g.target is not p.target:
            return False
        if len(p.args) != len(g.args) or p.kwargs != g.kwargs or g in mapping.values():
            return False
        mapping[p] = g
        for pa, ga in zip(p.args, g.args):
            ok = walk(pa, ga) if isinstance(pa, torch.fx.Node) else _same_literal(pa, ga)
            if not ok:
                return False
        return True

    return mapping if walk(out, end) else None


def _sole_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def match_activation(node: torch.fx.Node) -> ActivationSite | None:
    """The activation ``node`` (an aten ``mm``/``addmm``) feeds, or None."""
    if node.target not in (_MM, _ADDMM) or node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("beta", 1) != 1:
        return None
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 2:
        return None
    views, start = [], node
    while (user := _sole_user(start)) is not None and user.target in VIEWS:
        views.append(user)
        start = user
    low = val.dtype in (torch.float16, torch.bfloat16)
    for name in PATTERNS:
        head, first = start, _sole_user(start)
        if low and name != "relu":
            if first is None or first.target is not _CONVERT or first.args[1] != torch.float32:
                continue
            head = first
        for end in _candidates(head):
            last = end
            if low and name != "relu":
                if end.target is not _CONVERT or end.args[1] != val.dtype:
                    continue
                end = end.args[0]
            mapping = _match(_pattern_graph(name), head, end)
            if mapping is None:
                continue
            inner = {g for p, g in mapping.items() if p.op != "placeholder"} | {head, end, last}
            inner.discard(start)
            # Only the pattern reads the matmul's result and each value inside it (its last excepted).
            if all(set(n.users) <= inner for n in inner | {start} if n is not last):
                return ActivationSite(node, views, last, list(inner), name)
    return None


def _candidates(head: torch.fx.Node, depth: int = 12) -> list:
    """The nodes computed from ``head`` within ``depth`` steps, nearest last (an activation's
    last node is among them)."""
    seen, frontier = [], [head]
    for _ in range(depth):
        frontier = [u for n in frontier for u in n.users if u.op == "call_function" and u not in seen]
        seen.extend(dict.fromkeys(frontier))
    return seen[::-1]


def fuse_activation(graph: torch.fx.Graph, site: ActivationSite) -> torch.fx.Node:
    """Rewrite the site to ``mm_activation`` followed by its views; returns the new op's node."""
    node = site.matmul
    if node.target is _ADDMM:
        bias, a, b = node.args[:3]
    else:
        (a, b), bias = node.args[:2], None
    with graph.inserting_before(site.end):
        new = graph.call_function(torch.ops.inductor_mm_plugin.mm_activation.default, (a, b, bias, site.activation))
        copy_meta(node, new)
        result = new
        for view in site.views:
            result = graph.call_function(view.target, (result, *view.args[1:]), dict(view.kwargs))
            copy_meta(view, result)
    copy_meta(site.end, result)  # the activation's value: its dtype is the matmul's, its shape the views'
    site.end.replace_all_uses_with(result)
    pending = {*site.views, *site.inner, node}
    while pending:  # users before what they use
        unused = [n for n in pending if not n.users]
        if not unused:
            raise AssertionError(f"inductor_mm_plugin: the activation at {node} is still read after its rewrite")
        for n in unused:
            graph.erase_node(n)
            pending.discard(n)
    return new
