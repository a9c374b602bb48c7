"""The routing pass: replace the selected aten matmuls of a post-grad graph by the plugin's ops.

It runs in Inductor's ``post_grad_custom_pre_pass`` slot, once on each forward graph and once
on each (lazily compiled) backward graph. Nodes not selected are left exactly as they are.
A pass the user already put in that slot runs first (torch 2.11 holds one object there).
With ``fuse_swiglu`` on, SwiGLU's two input matmuls become one ``mm_swiglu`` node instead
(``swiglu_pattern.py``).

Each decision is logged, counted for Inductor's caches and handed to ``compare`` by
``records.py``; what a result feeds (an epilogue?) is read by ``graph.py``.

Cache correctness: Inductor's FX graph cache keys on the graph and on this pass's ``uuid()``,
never on node metadata, where the module markers are read from. So ``uuid()`` covers the
plugin's source and version, the options, the modules around the compiled frame
(``RootInfo``: their innermost marker, their paths, whether the model opts a module in, which
of its modules are marked),
every marked class, and whether Triton interprets; a predicate it cannot fingerprint, or a
chained pass without a uuid, makes it return None, which tells Inductor not to cache.
"""

from __future__ import annotations

import builtins
import dataclasses
import dis
import hashlib
import inspect
import pathlib
import types

import torch

from ..interpreter import interpreting
from ..runtime.swiglu import fused_reason
from ..version import __version__
from . import compat, decision, measure
from .activation_pattern import fuse_activation, match_activation
from .decision import Compete, RouteDecision
from .graph import copy_meta, feeds_pointwise
from .measure import Measurement
from .records import SiteRecord, log_decision, publish
from .swiglu_pattern import fuse_swiglu, swiglu_pairs
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
    root_from_dynamo,
)

PLUGIN_OPS = {
    "mm": torch.ops.inductor_mm_plugin.mm.default,
    "addmm": torch.ops.inductor_mm_plugin.addmm.default,
    "bmm": torch.ops.inductor_mm_plugin.bmm.default,
}


def _package_source_hash() -> str:
    package = pathlib.Path(__file__).resolve().parents[1]
    # The templates' Jinja sources too (inductor/templates/*.py.jinja): they are code Inductor
    # compiles; and the shape tables (inductor/shape_tables/*.json), which decide routing.
    files = tuple(sorted(str(p) for pattern in ("*.py", "*.py.jinja", "shape_tables/*.json")
                         for p in package.rglob(pattern)))  # fmt: skip
    return compat.get_hash_for_files(files).hex()


# What a select predicate's fingerprint can prove. Its answer may depend only on the site
# and on what the fingerprint holds: its code, and the values of its defaults, its closure
# and the globals it reads, where those are plain data (_plain_text). Builtins it may use:
# pure functions of their arguments, no I/O and no per-process state (hash seeds, ids).
_PURE_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "bytes", "complex", "dict", "divmod", "enumerate", "filter", "float", "frozenset",
    "getattr", "hasattr", "int", "isinstance", "issubclass", "len", "list", "map", "max", "min", "pow", "range",
    "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip",
})  # fmt: skip
_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_IMPURE_OPS = {"IMPORT_NAME", "IMPORT_FROM", "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME"}


def _plain_text(value, depth: int = 0) -> str | None:
    """``value`` as text where it is plain data (None, bools, numbers, strings, bytes, and
    tuples, lists, sets and dicts of them; exact types, nested at most 8 deep), so the text
    is all a predicate can read from it; else None."""
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return repr(value)
    if depth >= 8 or kind not in (tuple, list, set, frozenset, dict):
        return None
    items = [x for pair in value.items() for x in pair] if kind is dict else list(value)
    parts = [_plain_text(x, depth + 1) for x in items]
    if None in parts:
        return None
    if kind in (set, frozenset):
        parts.sort()  # a set's order follows string hashes, which differ from process to process
    return f"{kind.__name__}({','.join(parts)})"


def _code_reads(code) -> tuple[str, set[str]] | None:
    """(the code as text, the global or builtin names it reads), with the functions and
    comprehensions defined inside it; None where it imports or writes a global."""
    names, text = set(), [code.co_code.hex(), repr(code.co_names)]
    for ins in dis.get_instructions(code):
        if ins.opname in _IMPURE_OPS:
            return None
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") or "GLOBALS" in ins.opname:  # 3.12: ..._OR_GLOBALS
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner = _code_reads(const)
            if inner is None:
                return None
            text.append(inner[0])
            names |= inner[1]
        else:
            text.append(_plain_text(const) or repr(type(const)))
    return "|".join(text), names


def _callable_fingerprint(fn) -> str | None:
    """What a ``select`` predicate's answers depend on, as text, or None where that cannot be
    proven, which turns Inductor's cache off for the compile (so a changed value it reads
    can never bring back a graph routed by the old one).

    Proven: a plain Python function whose source can be read, whose defaults and closure
    cells hold plain data (``_plain_text``), and whose code (with the functions and
    comprehensions inside it) reads only globals holding plain data and the pure builtins
    (``_PURE_BUILTINS``), and neither imports nor writes a global. Their values are part of
    the text, so changing one changes the key. Not proven, so None: a global or closure
    value that is a module (``os.environ``), a function (a helper), a class or any other
    object; an empty closure cell; a callable object or ``functools.partial``.
    """
    if not isinstance(fn, types.FunctionType):
        return None
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    reads = _code_reads(fn.__code__)
    if reads is None:
        return None
    code, names = reads
    read = []
    for name in sorted(names):
        pure = name in _PURE_BUILTINS
        if name in fn.__globals__:
            value = fn.__globals__[name]
            text = "builtin" if pure and value is getattr(builtins, name, None) else _plain_text(value)
        else:
            text = "builtin" if pure else None
        if text is None:
            return None
        read.append(f"{name}={text}")
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(_plain_text(cell.cell_contents))
        except ValueError:  # an empty cell: a name the function's scope assigns after defining it
            return None
    defaults = (_plain_text(fn.__defaults__), _plain_text(fn.__kwdefaults__))
    if None in cells or None in defaults:
        return None
    return f"{fn.__module__}.{fn.__qualname__}|{source}|{code}|{read}|{cells}|{defaults}"


class RoutePass(compat.CustomGraphPass):
    """Routes the selected ``aten.mm/addmm/bmm`` nodes to ``inductor_mm_plugin::mm/addmm/bmm``."""

    def __init__(self, options: PluginOptions, root: RootInfo | None = None, chained=None, label=None):
        self.options = options
        self.label = label  # copied into each SiteRecord; not part of the cache key
        self.chained = compat.passes_in_slot(chained)
        # The plugin backend makes one pass per Dynamo graph and knows its root. With the
        # stock backend one pass serves every graph of the compile: it reads the root from
        # Dynamo's frame as each forward graph compiles, and keeps it by Dynamo's compile id
        # for that graph's backward, which AOT autograd compiles later, outside the trace,
        # under the same compile id.
        self._fixed_root = root
        self._roots: dict = {}
        self._last_root = RootInfo()

    def root(self) -> RootInfo:
        if self._fixed_root is not None:
            return self._fixed_root
        compile_id = compat.current_compile_id()
        found = root_from_dynamo()
        if found is not None:
            self._roots[compile_id] = self._last_root = found
            return found
        return self._roots.get(compile_id, self._last_root)

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
            (sorted(self.options.plan.route.items()), sorted(self.options.plan.fused.items())) if self.options.plan else None,
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
    site_of = dict(zip(nodes, sites))
    fused = {}  # mm node -> the SwiGLU pair it belongs to
    pair_measured = {}  # mm node -> its fused pair's measurement
    # fuse_swiglu="auto" fuses where the SwiGLU template runs; under compete="auto" (no plan)
    # only where the fused extern kernel timed faster than stock's form, as a site is routed:
    # inside a Llama model the fused template (with the RMSNorm fused into it) took 603 us where
    # stock took 572 (docs/performance.md), so an untimed fusion is no default. Under a plan,
    # where the plan says the pair won fused (in the model it was written from).
    timed_pairs = options.fuse_swiglu == "auto" and options.compete == "auto" and options.plan is None
    planned_pairs = options.fuse_swiglu == "auto" and options.plan is not None
    if timed_pairs or planned_pairs:
        fuse = "auto"  # the pairs the fused kernel takes; each is timed, or looked up, below
    elif options.compete == "auto" or options.plan is not None:
        fuse = options.fuse_swiglu is True
    else:
        fuse = options.fuse_swiglu
    pairs = swiglu_pairs(routed_mms, fuse)
    if planned_pairs:
        pairs = [p for p in pairs if all(options.plan.fused_swiglu(site_of[n]) for n in p[:2])]
    fused_untimed = set() if timed_pairs else {n for pair in pairs for n in pair[:2]}
    # The sites measured below: selected, not fused, on CUDA, under compete="auto" without a plan.
    # A timed pair's sites are among them until their pair is fused: its kernels and theirs
    # compile side by side (``measure.precompile``) before anything is timed.
    timed = [n for n, (routed, _) in zip(nodes, decisions) if routed and n not in fused_untimed and _on_cuda(n)]
    timed = timed if options.compete == "auto" and options.plan is None else []
    timed_pair_sites = [_swiglu_site(pair) for pair in pairs if _on_cuda(pair[0])] if timed_pairs else []
    # A timed site whose result only an activation reads is timed fused first (below): its
    # fused kernel compiles beside the others.
    matched = {n: act for n in timed if n not in fused_untimed and (act := match_activation(n)) is not None}
    fused_sites = [(measure.ACTIVATION_OP + act.activation, *_measured_site(n)[1:]) for n, act in matched.items()]
    measure.precompile([_measured_site(n) for n in timed] + timed_pair_sites + fused_sites)
    for pair in pairs:
        if timed_pairs:
            take, measured = _timed_swiglu(pair, site_of[pair[0]])
            if not take:
                continue
            pair_measured.update(dict.fromkeys(pair[:2], measured))
        fused.update(dict.fromkeys(pair[:2], pair))
    timed = [n for n in timed if n not in fused]
    activations = _fused_activations({n: a for n, a in matched.items() if n not in fused}, nodes, decisions, fused,
                                     site_of, options)  # fmt: skip
    timed = [n for n in timed if n not in activations]
    done = set()
    records = []
    extern = []  # the routed CUDA sites that run the plugin's extern kernel: compiled behind
    for node, site, (routed, reason) in zip(nodes, sites, decisions):
        compete, measured = None, None
        if node in fused:
            gate, up, product = fused[node]
            compete = Compete.ALL if options.compete is True and options.plan is None else None
            measured = pair_measured.get(node)
            if gate not in done:  # the pair's first site in graph order rewrites both
                # A timed or planned pair runs the form that was timed: the extern kernel.
                timed_form = measured is not None or planned_pairs
                fuse_swiglu(graph, gate, up, product, site_of[gate], compete, timed=timed_form)
                done.add(gate)
            why = f": the fused kernel's {measured.describe()}" if measured else " (routing plan)" if planned_pairs else ""
            log_decision("routed %s; fused with the other matmul of silu(x @ w_gate) * (x @ w_up) into "
                         "inductor_mm_plugin::mm_swiglu%s", site, why)  # fmt: skip
        elif node in activations:
            act, measured = activations[node]
            fuse_activation(graph, act)
            why = f": the fused kernel's {measured.describe()}" if measured else " (routing plan)"
            log_decision("routed %s; fused with its %s into inductor_mm_plugin::mm_activation%s", site,
                         act.activation, why)  # fmt: skip
        elif routed:
            if options.plan is not None:
                routed, reason = options.plan.decide(site)
            elif node in timed:
                routed, reason, measured = measure.decide(*_measured_site(node))
            if routed:
                # Under compete="auto" the routed site runs the measured form: the extern kernel,
                # its epilogue in Inductor's pointwise kernel as stock.
                # A measured or planned site runs the form that was timed: the extern kernel.
                timed_form = measured is not None or options.plan is not None
                epilogue = site.op != "bmm" and not timed_form and feeds_pointwise(node)
                compete = Compete.ALL if options.compete is True and options.plan is None else None
                if compete is None and not epilogue and _on_cuda(node):
                    extern.append(_measured_site(node))
                _replace(graph, node, site, compete, epilogue)
                why = f"; {measured.describe()}" if measured else "; competes with aten (compete=True)" if compete else ""
                log_decision("routed %s%s", site, why)
            else:
                log_decision("not routed %s: %s", site, reason)
        else:
            log_decision("not routed %s: %s", site, reason)
        kind = "swiglu" if node in fused else activations[node][0].activation if node in activations else None
        record = SiteRecord(site, routed, reason, label, compete, kind, measured)
        records.append(record)
        publish(record)
    graph.lint()
    measure.compile_routed(extern)
    return records


def _fused_activations(matched: dict, nodes: list, decisions: list, fused: dict, site_of: dict,
                       options: PluginOptions) -> dict:  # fmt: skip
    """The sites that run as one ``mm_activation`` with the activation their result feeds
    (activation_pattern.py), each with its measurement: under compete="auto", a timed site
    (``matched``: each with its activation) where the fused kernel timed faster than stock's
    cuBLAS plus pointwise kernel (``measure.decide_activation``; a site that loses is then
    timed alone); under a plan, where the plan says the site won fused with this activation."""
    if options.plan is not None:
        routed = [n for n, (ok, _) in zip(nodes, decisions) if ok and n not in fused]
        return {n: (act, None) for n in routed if (act := match_activation(n)) is not None
                and options.plan.fused_activation(site_of[n]) == act.activation}  # fmt: skip
    activations = {}
    for node, act in matched.items():
        _, vals, _, _, graphs = _measured_site(node)
        take, reason, measured = measure.decide_activation(act.activation, vals, graphs)
        if take:
            activations[node] = (act, measured)
        else:
            log_decision("not fused %s with its %s: %s", site_of[node], act.activation, reason)
    return activations


def _timed_swiglu(pair: tuple, site: Site) -> tuple[bool, Measurement | None]:
    """Whether a SwiGLU pair on CUDA runs fused under ``compete="auto"``: where the
    fused kernel takes its operands and timed faster than stock's form (``measure.decide_swiglu``);
    else its two matmuls are decided as any other sites."""
    _, vals, _, _, graphs = _swiglu_site(pair)
    reason = fused_reason(*vals) if _on_cuda(pair[0]) else "not on CUDA: nothing to time"
    measured = None
    if reason is None:
        take, reason, measured = measure.decide_swiglu(vals, graphs)
        if take:
            return True, measured
    log_decision("not fused %s with the other matmul of silu(x @ w_gate) * (x @ w_up): %s", site, reason)
    return False, measured


def _swiglu_site(pair: tuple) -> tuple:
    """What ``measure`` times a SwiGLU pair by: op ``"swiglu"``, (x, w_gate, w_up), 1, 1 and
    whether the compile runs under CUDA graphs."""
    gate, up, _ = pair
    vals = [n.meta.get("val") for n in (gate.args[0], gate.args[1], up.args[1])]
    return "swiglu", vals, 1, 1, bool(compat.inductor_config.triton.cudagraphs)


def _measured_site(node: torch.fx.Node) -> tuple:
    """What ``measure`` times a CUDA site by under ``compete="auto"`` (routed where the
    plugin's kernel is faster than aten's on the site's operands in GPU time): op, operand
    values, alpha, beta and whether the compile runs under CUDA graphs."""
    vals = [a.meta.get("val") for a in node.args if isinstance(a, torch.fx.Node)]
    alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
    return MATMULS[node.target], vals, alpha, beta, bool(compat.inductor_config.triton.cudagraphs)


def _on_cuda(node: torch.fx.Node) -> bool:
    val = node.args[-1].meta.get("val") if isinstance(node.args[-1], torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.device.type == "cuda"


def _replace(graph: torch.fx.Graph, node: torch.fx.Node, site: Site, compete: Compete | None, epilogue: bool) -> None:
    op = PLUGIN_OPS[site.op]
    if site.op == "addmm":
        bias, a, b = node.args[:3]
        kwargs = {"beta": node.kwargs.get("beta", 1), "alpha": node.kwargs.get("alpha", 1)}
        args = (bias, a, b)
    else:
        args, kwargs = tuple(node.args[:2]), {}
    with graph.inserting_before(node):
        new = graph.call_function(op, args, kwargs)
    copy_meta(node, new)
    decision.record(new, RouteDecision(str(site), compete, epilogue))
    node.replace_all_uses_with(new)
    graph.erase_node(node)
