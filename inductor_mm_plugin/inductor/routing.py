"""The routing pass: replace the selected aten matmuls of a post-grad graph by the plugin's ops.

It runs in Inductor's ``post_grad_custom_pre_pass`` slot, once on each forward graph and once
on each (lazily compiled) backward graph. Nodes not selected are left exactly as they are.
A pass the user already put in that slot runs first (torch 2.11 holds one object there).
With ``fuse_swiglu`` on, SwiGLU's two input matmuls become one ``mm_swiglu`` node instead
(``_swiglu_pairs``, at the end of this file).

Logs: each decision goes to this module's logger, ``inductor_mm_plugin.inductor.routing``.
Torch's logging system takes module names, so ``TORCH_LOGS="+inductor_mm_plugin"`` (all the
package's logs), ``TORCH_LOGS="+inductor_mm_plugin.inductor.routing"`` (this one) and
``torch._logging.set_logs(modules={"inductor_mm_plugin": logging.INFO})`` show them. The
plugin registers no log alias with torch: TORCH_LOGS is parsed when torch is imported,
before any plugin code can register one, and a registered log is reset (no propagation to
the root logger) by every later ``set_logs`` call.
On a cache hit (Inductor's FX graph cache or AOTAutograd's) the pass does not run, so each
decision is also counted in ``counters["inductor"]`` under ``DECISION_PREFIX``: Inductor
stores those counts with the compiled graph (``CompiledFxGraph.counter_deltas``) and adds
them back when it loads the graph from either cache. ``reporting_cached_decisions`` (the
plugin backend wraps every compile in it) logs the decisions that came back that way.

Cache correctness: Inductor's FX graph cache keys on the graph and on this pass's ``uuid()``,
never on node metadata, where the module markers are read from. So ``uuid()`` covers the
plugin's source and version, the options, the root module's marker, every marked class,
and whether Triton interprets; a predicate it cannot fingerprint, or a chained pass without
a uuid, makes it return None, which tells Inductor not to cache.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import inspect
import logging
import pathlib
from typing import Callable, Iterator

import torch
import torch.nn as nn

from .. import __version__
from ..kernels.matmul import interpreting
from ..ops.matmul import pointer_kernel_reason
from . import compat
from .options import PluginOptions
from .selection import (
    IN,
    MATMULS,
    RootInfo,
    Site,
    decide,
    describe,
    ineligible_reason,
    marked_classes_fingerprint,
    slower_path_reason,
)

log = logging.getLogger(__name__)  # "inductor_mm_plugin.inductor.routing": a module name TORCH_LOGS accepts

PLUGIN_OPS = {
    "mm": torch.ops.inductor_mm_plugin.mm.default,
    "addmm": torch.ops.inductor_mm_plugin.addmm.default,
    "bmm": torch.ops.inductor_mm_plugin.bmm.default,
}
MM_SWIGLU = torch.ops.inductor_mm_plugin.mm_swiglu.default
# Metadata carried from the aten node to the plugin node. ``val`` is the same fake tensor:
# the plugin ops return exactly what aten's do (a new contiguous tensor, same dtype).
COPIED_META = ("val", "tensor_meta", "nn_module_stack", "fwd_nn_module_stack", "custom", "stack_trace",
               "seq_nr", "partitioner_tag", "source_fn_stack", "original_aten", "from_node")  # fmt: skip
META_KEY = "inductor_mm_plugin"  # the routing decision, read by the lowering


@dataclasses.dataclass(frozen=True)
class SiteRecord:
    """A site and what the pass decided for it (what ``compare`` and the logs report)."""

    site: Site
    routed: bool
    reason: str
    graph: object = None  # the RoutePass's label: which captured graph (``compare``)
    # What a routed site competes with in Inductor's autotuner (``competition``): None,
    # COMPETE_ALL or COMPETE_KERNELS. A competing site may end up running aten's kernel.
    compete: str | None = None
    # "swiglu": the site was fused with the other matmul of a SwiGLU product into one
    # ``inductor_mm_plugin::mm_swiglu`` (``_swiglu_pairs``).
    fused: str | None = None


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


# Each decision's log line, counted in Inductor's counters (see the module docstring).
DECISION_PREFIX = "inductor_mm_plugin.routing: "
_from_the_pass: collections.Counter = collections.Counter()  # what the pass itself counted (never cleared)


def _decided(message: str, *args) -> None:
    """Log one site's decision and count it where a cached graph keeps it."""
    text = message % args
    log.info("%s", text)
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


def _package_source_hash() -> str:
    files = tuple(sorted(str(p) for p in pathlib.Path(__file__).resolve().parents[1].rglob("*.py")))
    return compat.get_hash_for_files(files).hex()


def _callable_fingerprint(fn) -> str | None:
    """Source, closure and defaults of a predicate, or None when they cannot be read."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    closure = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
    return f"{getattr(fn, '__qualname__', fn)}|{source}|{closure!r}|{getattr(fn, '__defaults__', None)!r}"


def _root_from_dynamo() -> nn.Module | None:
    frame = compat.dynamo_frame_locals()
    if not frame:
        return None
    # Methods name their module "self"; Dynamo's resume functions keep the same name.
    candidates = [frame.get("self"), *frame.values()]
    return next((v for v in candidates if isinstance(v, nn.Module)), None)


class RoutePass(compat.CustomGraphPass):
    """Routes the selected ``aten.mm/addmm/bmm`` nodes to ``inductor_mm_plugin::mm/addmm/bmm``."""

    def __init__(self, options: PluginOptions, root: RootInfo | None = None, chained=None, label=None):
        self.options = options
        self.label = label  # copied into each SiteRecord; not part of the cache key
        self.chained = compat.passes_in_slot(chained)
        # The plugin backend knows the root when it is called; with the stock backend the
        # pass finds it in Dynamo's frame during the forward compile and keeps it for the
        # backward compile, which runs later, outside the trace.
        self._fixed_root = root
        self._root = root or RootInfo()

    def root(self) -> RootInfo:
        if self._fixed_root is None:
            module = _root_from_dynamo()
            if module is not None:
                self._root = RootInfo.of(module)
        return self._root

    # -- Inductor's CustomGraphPass interface

    def uuid(self) -> str | None:
        select = self.options.select
        select_key = _callable_fingerprint(select) if callable(select) else select
        chained = [p.uuid() if isinstance(p, compat.CustomGraphPass) else None for p in self.chained]
        if select_key is None or any(u is None for u in chained):
            return None  # Inductor bypasses its FX graph cache for this compile
        key = (
            "inductor_mm_plugin", __version__, _package_source_hash(), select_key, self.options.compete,
            self.options.fuse_swiglu,
            dataclasses.astuple(self.root()), marked_classes_fingerprint(), interpreting(), repr(chained),
        )  # fmt: skip
        return hashlib.sha256(repr(key).encode()).hexdigest()

    def __call__(self, graph: torch.fx.Graph) -> None:
        for p in self.chained:
            p(graph)
        route_graph(graph, self.options, self.root(), self.label)


def route_graph(graph: torch.fx.Graph, options: PluginOptions, root: RootInfo, label=None) -> list[SiteRecord]:
    nodes = [n for n in graph.nodes if n.op == "call_function" and n.target in MATMULS]
    if not nodes:
        return []
    backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes)
    sites = [describe(n, root, backward) for n in nodes]
    # A root we could not see (a plain function, or a backward compiled outside the trace)
    # still counts as having opted-in modules when this graph shows one.
    if not root.has_opted_in and any(s.opt == IN for s in sites):
        root = dataclasses.replace(root, has_opted_in=True)
    decisions = [decide(site, ineligible_reason(node), options.select, root) for node, site in zip(nodes, sites)]
    routed_mms = [n for n, s, (routed, _) in zip(nodes, sites, decisions) if routed and s.op == "mm"]
    fused = {}  # mm node -> the SwiGLU pair it belongs to
    for pair in _swiglu_pairs(routed_mms, options.fuse_swiglu):
        fused.update(dict.fromkeys(pair[:2], pair))
    site_of = dict(zip(nodes, sites))
    done = set()
    records = []
    for node, site, (routed, reason) in zip(nodes, sites, decisions):
        compete = None
        if node in fused:
            gate, up, product = fused[node]
            compete = COMPETE_ALL if options.compete is True else None
            if gate not in done:  # the pair's first site in graph order rewrites both
                _fuse_swiglu(graph, gate, up, product, site_of[gate], compete)
                done.add(gate)
            _decided("routed %s; fused with the other matmul of silu(x @ w_gate) * (x @ w_up) into "
                     "inductor_mm_plugin::mm_swiglu", site)  # fmt: skip
        elif routed:
            epilogue = site.op != "bmm" and _feeds_pointwise(node)
            compete, why = competition(node, options.compete, epilogue)
            _replace(graph, node, site, compete, epilogue)
            if compete and why:
                _decided("routed %s; competes with aten (compete='auto'): %s", site, why)
            else:
                _decided("routed %s%s", site, "; competes with aten (compete=True)" if compete else "")
        else:
            _decided("not routed %s: %s", site, reason)
        record = SiteRecord(site, routed, reason, label, compete, "swiglu" if node in fused else None)
        records.append(record)
        for listener in list(_listeners):
            listener(record)
    graph.lint()
    return records


# The matmuls an epilogue must not join (aten's, and the plugin's once routed).
_MATMUL_TARGETS = {*MATMULS, *PLUGIN_OPS.values()}
# Ops that only reinterpret a result's shape: an epilogue after them still fuses.
_VIEWS = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default,
          torch.ops.aten.unsqueeze.default, torch.ops.aten.squeeze.dim}  # fmt: skip


_EPILOGUE_DEPTH = 8  # how far along views and pointwise ops an epilogue is followed


def _pointwise(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and torch.Tag.pointwise in getattr(node.target, "tags", ())


def _elementwise(node: torch.fx.Node) -> bool:
    """A view or a pointwise op: what an epilogue is made of."""
    return node.target in _VIEWS or _pointwise(node)


def _from_other_matmul(node: torch.fx.Node, origin: torch.fx.Node, depth: int = 4) -> bool:
    """Whether ``node`` is computed from a matmul other than ``origin`` through views and
    pointwise ops (a few levels deep)."""
    if node is origin or node.op != "call_function" or depth == 0:
        return False
    if node.target in _MATMUL_TARGETS:
        return True
    if _elementwise(node):
        return any(_from_other_matmul(arg, origin, depth - 1) for arg in node.all_input_nodes)
    return False


def _computed_from(node: torch.fx.Node, origin: torch.fx.Node, depth: int = 4) -> bool:
    """Whether ``node`` is ``origin`` or computed from it alone by views and pointwise ops."""
    if node is origin:
        return True
    if node.op != "call_function" or depth == 0 or not _elementwise(node):
        return False
    return bool(node.all_input_nodes) and all(_computed_from(arg, origin, depth - 1) for arg in node.all_input_nodes)


def _feeds_pointwise(node: torch.fx.Node) -> bool:
    """Whether the matmul's result goes into a pointwise op (an epilogue Inductor can fuse),
    directly or through views (a Linear on a 3-D input is view -> mm -> view), and that
    epilogue does not combine it with another matmul's result.

    The exception is SwiGLU's ``silu(gate(x)) * up(x)``: Inductor fuses the product into
    one of the two templates, whose epilogue then loads the other matmul's whole output
    tile with its latency exposed, and the other template runs with no epilogue at all. On
    the H200 that lost to the extern kernels plus Inductor's separate pointwise kernel
    (M = 8192, d = 4096, f = 14336: 1620 + 1425 us against 1382 + 1382 + 163;
    bench/results/2026-11-29-NVIDIA_H200-epilogue-breakdown.md)."""
    found = False
    frontier = [(node, 0)]  # the result and what is computed from it by views and pointwise ops
    while frontier:
        current, depth = frontier.pop()
        for user in current.users:
            if user.op != "call_function" or depth == _EPILOGUE_DEPTH:
                continue
            if user.target in _VIEWS:
                frontier.append((user, depth + 1))
            elif _pointwise(user):
                others = [arg for arg in user.all_input_nodes if arg is not current]
                if any(_from_other_matmul(arg, node) for arg in others):
                    return False
                found = True
                # Follow ops that only compute on this result (an activation, GELU's pieces);
                # stop at one that brings in another tensor (a residual add).
                if all(_computed_from(arg, node) for arg in others):
                    frontier.append((user, depth + 1))
    return found


# What a routed site lets Inductor's autotuner choose from (the lowering reads it):
COMPETE_ALL = "all"  # the plugin's template configs, its extern kernel and aten
COMPETE_KERNELS = "kernels"  # the plugin's extern kernel and aten


def competition(node: torch.fx.Node, option: bool | str, epilogue: bool) -> tuple[str | None, str]:
    """(what the site competes with, or None; why, for the log) under the ``compete`` option.

    ``compete="auto"`` lets a CUDA site compete where routing it could only cost time:
    * where the plugin would run its slower pointer kernel (``slower_path_reason``): its
      template configs, its kernel and aten;
    * where nothing fuses into it (no pointwise user, or a bmm, which has no template): the
      plugin's value there is its kernel's speed alone, so its kernel competes with aten's
      and the faster runs. A site with an epilogue keeps the template without competing:
      Inductor's autotuner in default mode times a choice without its epilogue, which would
      hide what the fusion saves.
    """
    if option is True:
        return COMPETE_ALL, ""
    if option is False:
        return None, ""
    slower = slower_path_reason(node)
    if slower is not None:
        return COMPETE_ALL, slower
    if not epilogue and _on_cuda(node):
        return COMPETE_KERNELS, "nothing fuses into it, so its kernel runs only where the autotuner times it faster"
    return None, ""


def _on_cuda(node: torch.fx.Node) -> bool:
    val = node.args[-1].meta.get("val") if isinstance(node.args[-1], torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.device.type == "cuda"


def _copy_meta(src: torch.fx.Node, dst: torch.fx.Node) -> None:
    for key in COPIED_META:
        if key in src.meta:
            dst.meta[key] = src.meta[key]


def _replace(graph: torch.fx.Graph, node: torch.fx.Node, site: Site, compete: str | None, epilogue: bool) -> None:
    op = PLUGIN_OPS[site.op]
    if site.op == "addmm":
        bias, a, b = node.args[:3]
        kwargs = {"beta": node.kwargs.get("beta", 1), "alpha": node.kwargs.get("alpha", 1)}
        args = (bias, a, b)
    else:
        args, kwargs = tuple(node.args[:2]), {}
    with graph.inserting_before(node):
        new = graph.call_function(op, args, kwargs)
    _copy_meta(node, new)
    new.meta[META_KEY] = {"compete": compete, "site": str(site), "epilogue": epilogue}
    node.replace_all_uses_with(new)
    graph.erase_node(node)


# ------------------------------------------------------------------------------ SwiGLU
# silu(x @ w_gate) * (x @ w_up) from two routed mm sites becomes one mm_swiglu, whose
# template runs both matmuls in one kernel and writes only the product (ops/swiglu.py).

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
    return user.op == "call_function" and (_elementwise(user) or user.target == _CONVERT)


def _same_input(a, b) -> bool:
    """The same tensor, or the same view of it (Dynamo reshapes x once per Linear)."""
    if a is b:
        return True
    return (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node) and a.op == b.op == "call_function"
            and a.target == b.target and a.target in _VIEWS and a.args == b.args and a.kwargs == b.kwargs)  # fmt: skip


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


def _swiglu_pairs(mms: list[torch.fx.Node], option) -> list[tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]]:
    """(gate mm, up mm, product) for each ``silu(x @ w_gate) * (x @ w_up)`` whose two
    matmuls are routed mm sites of the same input and dtype, read by nothing else."""
    if option is False:
        return []
    pairs, used = [], set()
    for gate in mms:
        for product in _mul_users(gate):
            for i, side in enumerate(product.args[:2]):
                arg = _silu_argument(side)
                if arg is None or _skip(arg, {_CONVERT, *_VIEWS}) is not gate:
                    continue
                up = _skip(product.args[1 - i], _VIEWS)
                ok = (up in mms and up is not gate and not {gate, up} & used
                      and _same_input(gate.args[0], up.args[0]) and _same_shape_and_dtype(gate, up, product)
                      and _fusable_here(gate, up, option) and _only_feeds((gate, up), product))  # fmt: skip
                if ok:
                    pairs.append((gate, up, product))
                    used |= {gate, up}
    return pairs


def _fuse_swiglu(graph, gate, up, product, site: Site, compete: str | None) -> None:
    x, w_gate, w_up = gate.args[0], gate.args[1], up.args[1]
    with graph.inserting_before(product):
        fused = graph.call_function(MM_SWIGLU, (x, w_gate, w_up))
        out = fused
        if tuple(product.meta["val"].shape) != tuple(gate.meta["val"].shape):
            out = graph.call_function(_aten.reshape.default, (fused, list(product.meta["val"].shape)))
            out.meta["val"] = product.meta["val"]
    _copy_meta(gate, fused)
    fused.meta[META_KEY] = {"compete": compete, "site": str(site), "epilogue": True}
    product.replace_all_uses_with(out)
    # Erase the product, then whatever only fed it, users before producers.
    dead = [product]
    while dead:
        node = dead.pop()
        inputs = node.all_input_nodes
        graph.erase_node(node)
        dead.extend(n for n in inputs if not n.users and n.op == "call_function" and n not in dead)
