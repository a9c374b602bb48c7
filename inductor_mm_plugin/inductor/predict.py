"""The matmul sites a graph will have after AOTAutograd and Inductor's decompositions,
predicted from the graph Dynamo hands the backend, so that their kernels start compiling in
the background (``measure.compile_predicted``) while AOTAutograd traces the graph; the
routing pass then finds them compiled, or compiling, and waits (``runtime.compile_calls``).

A cold compile of the decode step spent 1.2-1.4 s in the routing pass compiling the kernels
of the sites it was about to time (bench/models.py at 9606ec5), after AOTAutograd's tracing,
with nothing else running. A site predicted wrong costs a background compile of a kernel no
one uses; a site missed is compiled in the routing pass, as without a prediction.

What is predicted, from the values Dynamo recorded (``node.meta["example_value"]``), with
static sizes only (an operation on a symbolic size could add a guard to Dynamo's shape env):

* ``F.linear(x, w, b)`` and ``x @ w`` with a 2-D ``w``: ``addmm(b, x2, w.t())`` or
  ``mm(x2, w)`` with ``x2 = x.reshape(-1, K)`` (a view where one exists, else a contiguous
  copy, as Inductor makes it); under autocast, the operands in the result's dtype;
* when grad mode is on and the result needs a gradient: the backward's ``grad @ w`` (for
  ``x``) and ``grad.t() @ x2`` (for ``w``), ``grad`` a contiguous (M, N) tangent;
* ``a @ b`` with both 3-D or more: ``bmm`` over the broadcast batch, each operand reshaped;
* ``torch.addmm``, ``torch.mm`` and ``torch.bmm`` as called;
* no product of vectors (mv, dot), and none over K = 1 (Llama's rotary frequencies), which
  Inductor may turn into a pointwise multiply.
"""

from __future__ import annotations

import logging
import operator

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

_LINEAR = {F.linear}  # torch._C._nn.linear itself, as Dynamo records it
_MATMUL = {torch.matmul, operator.matmul, torch.mm, torch.bmm}
_MATMUL_METHODS = {"matmul", "__matmul__", "mm", "bmm"}


def predicted_sites(gm: torch.fx.GraphModule, graphs: bool) -> list[tuple]:
    """(op, vals, alpha, beta, graphs) of each matmul the graph will likely route, as
    ``measure`` takes sites; vals are fake tensors with the predicted layouts."""
    training = torch.is_grad_enabled()
    sites = []
    for node in gm.graph.nodes:
        try:
            sites.extend((op, vals, alpha, beta, graphs) for op, vals, alpha, beta in _sites_of(node, training)
                         if all(isinstance(v, torch.Tensor) for v in vals))  # fmt: skip
        except Exception:  # noqa: BLE001 (a prediction only saves time: the routing pass compiles what it misses)
            log.debug("no prediction for %s", node.format_node(), exc_info=True)
    return sites


def _sites_of(node: torch.fx.Node, training: bool) -> list[tuple]:
    if node.op == "call_function" and node.target in _LINEAR:
        kind = "linear"
    elif (node.op == "call_function" and node.target in _MATMUL) or (node.op == "call_method" and node.target in _MATMUL_METHODS):
        kind = "matmul"
    elif node.op == "call_function" and node.target is torch.addmm:
        kind = "addmm"
    else:
        return []
    out = node.meta.get("example_value")
    args = [_value(a) for a in node.args]
    if not isinstance(out, torch.Tensor) or not all(_static(t) for t in (out, *args) if isinstance(t, torch.Tensor)):
        return []
    if kind == "addmm":
        bias, a, b = args[:3]
        return [("addmm", [bias, a, b], node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1))]
    x, w = (t if t is None or t.dtype == out.dtype else t.to(out.dtype) for t in args[:2])  # autocast
    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)) or min(x.dim(), w.dim()) < 2:
        return []  # a vector takes mv or a dot product, not a matmul site
    if x.shape[-1] == 1:
        return []  # Inductor may make a product over K = 1 a pointwise multiply (torch 2.13 does)
    if kind == "linear":
        b = args[2] if len(args) > 2 else _value(node.kwargs.get("bias"))
        b = b if b is None or b.dtype == out.dtype else b.to(out.dtype)
        return _product(x, w.t(), b, training and out.requires_grad, weight=w)
    if x.dim() >= 2 and w.dim() == 2:
        return _product(x, w, None, training and out.requires_grad, weight=None)
    if x.dim() >= 3 or w.dim() >= 3:
        batch = torch.broadcast_shapes(x.shape[:-2], w.shape[:-2])
        a3 = x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:])
        b3 = w.expand(*batch, *w.shape[-2:]).reshape(-1, *w.shape[-2:])
        return [("bmm", [a3, b3], 1, 1)]
    return []


def _product(x: torch.Tensor, wt: torch.Tensor, bias, backward: bool, weight) -> list[tuple]:
    """``x @ wt`` (+ bias) on ``x``'s rows as one matrix, and, with ``backward``, the two
    products of its gradients (``weight``: the (N, K) tensor ``wt`` is a transpose of)."""
    x2 = x.reshape(-1, x.shape[-1])
    sites = [("addmm", [bias, x2, wt], 1, 1) if bias is not None else ("mm", [x2, wt], 1, 1)]
    if backward:
        grad = x2.new_empty((x2.shape[0], wt.shape[1]))
        if x.requires_grad:
            sites.append(("mm", [grad, weight if weight is not None else wt.t()], 1, 1))
        if wt.requires_grad:
            sites.append(("mm", [grad.t(), x2], 1, 1) if weight is not None else ("mm", [x2.t(), grad], 1, 1))
    return sites


def _value(arg):
    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else None


def _static(t: torch.Tensor) -> bool:
    return all(type(d) is int for d in (*t.shape, *t.stride(), t.storage_offset()))
