"""SwiGLU's pattern: ``silu(x @ w_gate) * (x @ w_up)`` from two routed mm sites becomes one
``inductor_mm_plugin::mm_swiglu``, whose template runs both matmuls in one kernel and writes
only the product (ops/swiglu.py, templates/tma.py), or, for a pair fused because it timed
faster (under ``compete="auto"``), whose extern kernel does. Called by the routing pass."""

from __future__ import annotations

import torch

from ..interpreter import interpreting
from ..runtime import pointer_kernel_reason
from . import decision
from .decision import Compete, RouteDecision
from .graph import VIEWS, copy_meta, elementwise
from .selection import Site

MM_SWIGLU = torch.ops.inductor_mm_plugin.mm_swiglu.default

_aten = torch.ops.aten
_CONVERT = torch.ops.prims.convert_element_type.default


def _skip(node, targets) -> torch.fx.Node:
    """``node`` with any chain of ``targets`` ops above it removed (their first argument)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets:
        node = node.args[0]
    return node


def _is(node, target) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target == target


def _silu_argument(node) -> torch.fx.Node | None:
    """What ``node`` is the SiLU of, in the forms a post-grad graph holds it: ``aten.silu``,
    ``g * sigmoid(g)``, or Inductor's decomposition ``g / (1 + exp(-g))``, with dtype
    conversions around it (fp16/bf16 SiLU is computed in fp32); None for anything else."""
    node = _skip(node, {_CONVERT})
    if _is(node, _aten.silu.default):
        return node.args[0]
    if _is(node, _aten.mul.Tensor):
        for g, s in (node.args, node.args[::-1]):
            if _is(s, _aten.sigmoid.default) and s.args[0] is g:
                return g
    if _is(node, _aten.div.Tensor):
        g, den = node.args
        if _is(den, _aten.add.Tensor) and den.args[1] == 1 and _is(den.args[0], _aten.exp.default):
            neg = den.args[0].args[0]
            if _is(neg, _aten.neg.default) and neg.args[0] is g:
                return g
    return None


def _carries(user: torch.fx.Node) -> bool:
    """Whether a value flows on through ``user`` unchanged in kind: a view, a pointwise op or
    a dtype conversion (``prims.convert_element_type`` carries no pointwise tag)."""
    return user.op == "call_function" and (elementwise(user) or user.target == _CONVERT)


def _same_input(a, b) -> bool:
    """The same tensor, or the same view of it (Dynamo reshapes x once per Linear)."""
    if a is b:
        return True
    return (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node) and a.op == b.op == "call_function"
            and a.target == b.target and a.target in VIEWS and a.args == b.args and a.kwargs == b.kwargs)  # fmt: skip


def _only_feeds(sources, sink) -> bool:
    """Whether everything computed from ``sources`` by views and pointwise ops flows into
    ``sink`` alone: once the product is fused, nothing else (another op, a graph output, a
    tensor saved for backward) may need the matmul results."""
    seen, stack = set(sources), list(sources)
    while stack:
        for user in stack.pop().users:
            if user is sink or user in seen:
                continue
            if not _carries(user):
                return False
            seen.add(user)
            stack.append(user)
    return True


def _fusable_here(gate: torch.fx.Node, up: torch.fx.Node, option) -> bool:
    """``fuse_swiglu="auto"``: where the template runs: CUDA, fp16/bf16, static shapes,
    operands TMA can read (elsewhere the fused op would run two plain matmuls and a
    separate product, no better than stock's fused pointwise kernel)."""
    if option is True:
        return True
    val = gate.meta.get("val")
    if not (isinstance(val, torch.Tensor) and val.device.type == "cuda" and not interpreting()
            and val.dtype in (torch.float16, torch.bfloat16)):  # fmt: skip
        return False
    x, w_gate, w_up = (n.meta.get("val") if isinstance(n, torch.fx.Node) else None
                       for n in (gate.args[0], gate.args[1], up.args[1]))  # fmt: skip
    tensors = (val, x, w_gate, w_up)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    if any(not isinstance(d, int) for t in tensors for d in (*t.shape, *t.stride())):
        return False
    return pointer_kernel_reason(x, w_gate) is None and pointer_kernel_reason(x, w_up) is None


def _mul_users(node: torch.fx.Node, depth: int = 8) -> list[torch.fx.Node]:
    """The ``aten.mul`` nodes reached from ``node`` through views, conversions and SiLU's pieces."""
    found, stack, seen = [], [(node, 0)], {node}
    while stack:
        current, d = stack.pop()
        for user in current.users:
            if user in seen or d == depth or user.op != "call_function":
                continue
            seen.add(user)
            if user.target == _aten.mul.Tensor:
                found.append(user)
            if _carries(user):
                stack.append((user, d + 1))
    return found


def _same_shape_and_dtype(gate, up, product) -> bool:
    g, u, p = (n.meta.get("val") for n in (gate, up, product))
    if not all(isinstance(t, torch.Tensor) for t in (g, u, p)):
        return False
    return g.shape == u.shape and g.dtype == u.dtype == p.dtype and p.numel() == g.numel()


def swiglu_pairs(mms: list[torch.fx.Node], option) -> list[tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]]:
    """(gate mm, up mm, product) for each ``silu(x @ w_gate) * (x @ w_up)`` whose two
    matmuls are routed mm sites of the same input and dtype, read by nothing else."""
    if option is False:
        return []
    pairs, used = [], set()
    for gate in mms:
        for product in _mul_users(gate):
            for i, side in enumerate(product.args[:2]):
                arg = _silu_argument(side)
                if arg is None or _skip(arg, {_CONVERT, *VIEWS}) is not gate:
                    continue
                up = _skip(product.args[1 - i], VIEWS)
                ok = (up in mms and up is not gate and not {gate, up} & used
                      and _same_input(gate.args[0], up.args[0]) and _same_shape_and_dtype(gate, up, product)
                      and _fusable_here(gate, up, option) and _only_feeds((gate, up), product))  # fmt: skip
                if ok:
                    pairs.append((gate, up, product))
                    used |= {gate, up}
    return pairs


def fuse_swiglu(graph, gate, up, product, site: Site, compete: Compete | None, timed: bool = False) -> None:
    """Replace the pair and its product by one ``mm_swiglu`` node; ``timed``: the pair was fused
    because its extern kernel timed faster (under ``compete="auto"``), so that form runs."""
    x, w_gate, w_up = gate.args[0], gate.args[1], up.args[1]
    with graph.inserting_before(product):
        fused = graph.call_function(MM_SWIGLU, (x, w_gate, w_up))
        out = fused
        if tuple(product.meta["val"].shape) != tuple(gate.meta["val"].shape):
            out = graph.call_function(_aten.reshape.default, (fused, list(product.meta["val"].shape)))
            out.meta["val"] = product.meta["val"]
    copy_meta(gate, fused)
    decision.record(fused, RouteDecision(str(site), compete, epilogue=not timed, timed=timed))
    product.replace_all_uses_with(out)
    # Erase the product, then whatever only fed it, users before producers.
    dead = [product]
    while dead:
        node = dead.pop()
        inputs = node.all_input_nodes
        graph.erase_node(node)
        dead.extend(n for n in inputs if not n.users and n.op == "call_function" and n not in dead)
