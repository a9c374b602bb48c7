"""Which matmul sites of a post-grad graph go to the plugin, and why the others do not.

A *site* is one ``aten.mm`` / ``aten.addmm`` / ``aten.bmm`` node. It is routed when it is

* **eligible**: the kernel takes its device, dtype, shapes and strides, and
* **selected**: by ``select="all"`` (every eligible site), ``"opted_in"`` (sites inside a module
  marked with ``opt_in``; backward matmuls follow their forward module), ``"auto"`` (the
  default: ``"opted_in"`` when the compiled model has an opted-in module, else ``"all"``),
  or a predicate ``select(site) -> bool``.

``opt_out`` always wins: a site inside an opted-out module is never routed. Every site that
is not routed carries a reason, logged on the ``inductor_mm_plugin.inductor.routing`` logger
(records.py).

Module markers live on classes (see ``inductor_mm_plugin.opt_in``): Dynamo's node metadata
names each enclosing module's class, never the instance, and never the modules around the
compiled frame (the compiled model itself; after a graph break inside a child, the child's
ancestors) — so those are looked up once per frame, from the modules calling it, and passed
in (``RootInfo``). ``torch.export`` (strict or not, and so AOTInductor) writes the class as a
string, ``"module.QualName"``, and the root module first: the string is resolved among the
module classes this process defines (``_named_class``); a marked instance's class names its
marker (``"...Linear[opt_out]"``). A class it cannot resolve leaves the site's marker unknown,
and the site is not routed, with a reason that says so.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from typing import Any

import torch
import torch.nn as nn
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..interpreter import INTERPRETER_DEFECT, interpreter_defect, interpreting
from ..runtime import SUPPORTED_DTYPES
from . import compat

aten = torch.ops.aten
MATMULS = {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm"}

# ------------------------------------------------------------------------ reasons

# Every reason a site is not routed, as the routing log and compare's site table give it: one
# str.format template per kind, filled in by ``not_routed``. README.md's table lists each one
# (tests/test_reasons.py checks the table against this list, and the code against its kinds).
REASONS = {
    "no_metadata": "not eligible: operand metadata missing (no 'val' on an input node)",
    "mixed_dtypes": "not eligible: mixed dtypes {dtypes}",
    "dtype": "not eligible: dtype {dtype} is not supported by the kernel (float16, bfloat16, float32)",
    "needs_interpreter": "not eligible: CPU tensors need Triton's interpreter (TRITON_INTERPRET=1 before import)",
    "interpreter_defect": "not eligible: " + INTERPRETER_DEFECT,
    "device": "not eligible: device {device} is not supported by the kernel",
    "strides": "not eligible: operand {operand} has strides {strides} with no unit-stride dimension: the kernel "
               "would read it uncoalesced; stock Inductor lays it out first",
    "class_undefined": "marker unknown: module {module} is of class {name} (as torch.export records it), which is "
                       "not defined in this process: import the module that defines it before compiling",
    "class_ambiguous": "marker unknown: module {module} is of class {name} (as torch.export records it), a name "
                       "several classes here carry, with different markers: mark the module itself (an instance's "
                       "marker travels with it)",
    "opted_out": "inside an opted-out module (opt_out)",
    "predicate": "the select predicate returned False",
    "not_opted_in": "not inside an opted-in module (select='opted_in')",
    "not_opted_in_auto": "not inside an opted-in module (select='auto' and the model has opted-in modules)",
    "symbolic": "symbolic sizes: not measured, so it stays on stock (compete=False routes it)",
    "sure_loser": "{rows} on the {gpu} (shape table): a sure loser, not timed, so it stays on stock",
    "slower": "{measured}: not faster by {round_margin:.2f}x in every round, by {margin:.2f}x and {saving} us per call in the median, so it "
              "stays on stock",
    "plan": "the routing plan {plan} keeps it on stock (the plugin did not win there when measured)",
    "plan_unfused": "the routing plan {plan} has it winning fused with its SwiGLU pair, which is not fused here: its "
                    "plain kernel was not measured, so it stays on stock",
}  # fmt: skip


def not_routed(kind: str, **fields) -> str:
    """Why a site is not routed: the ``REASONS`` template of this kind, filled in."""
    return REASONS[kind].format(**fields)


# ------------------------------------------------------------------------ markers

MARKER_ATTR = "_inductor_mm_plugin_opt"
IN, OUT = "in", "out"
_marked_classes: weakref.WeakSet = weakref.WeakSet()


def set_marker(cls: type, marker: str) -> None:
    setattr(cls, MARKER_ATTR, marker)
    _marked_classes.add(cls)


def instance_class_qualname(base: type, marker: str) -> str:
    """The qualified name of the class ``opt_in``/``opt_out`` gives a marked instance of ``base``:
    what torch.export's metadata records for it, and how ``_named_class`` reads its marker."""
    return f"{base.__qualname__}[opt_{marker}]"


_INSTANCE_MARK = re.compile(r"\[opt_(in|out)\]$")


def marker_of(cls_or_module) -> str | None:
    """'in', 'out' or None for a module class or instance."""
    cls = cls_or_module if isinstance(cls_or_module, type) else type(cls_or_module)
    return getattr(cls, MARKER_ATTR, None)


def marked_classes_fingerprint() -> list[tuple[str, str]]:
    """A stable description of every marked class (part of the routing pass's cache key)."""
    return sorted((f"{c.__module__}.{c.__qualname__}", str(marker_of(c))) for c in list(_marked_classes))


@dataclasses.dataclass(frozen=True)
class RootInfo:
    """What the routing pass needs to know about the modules around a compiled frame.

    Dynamo's metadata names the modules a graph calls, relative to the frame it compiles,
    never the modules around that frame: the compiled model itself, and after a graph break
    inside a child, the child's ancestors. The plugin reads them from the frame (``of_frame``)
    when the forward graph compiles. Only strings and flags: it is part of the cache key.
    """

    marker: str | None = None  # the innermost marker among the modules around the frame
    has_opted_in: bool = False  # the compiled model has an opted-in module (select="auto")
    # (frame local, its module's path in the compiled model): "L['self'].up" in a frame
    # resumed inside ``child`` is the site "child.up".
    paths: tuple[tuple[str, str], ...] = ()
    # (path, class name) of the frame's own module below the compiled model: where a site
    # in the frame's own code (not inside a submodule it calls) is.
    frame: tuple[str, str] = ("", "")
    # (path, marker) of every marked module in the compiled model. The FX graph cache never
    # sees node metadata: an opt_out moved from layers.0 to layers.1 leaves the graph and the
    # set of marked classes as they were, and only this tells the two compiles apart.
    marked: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of_frame(around: list[nn.Module], frame_locals: dict[str, Any]) -> RootInfo:
        """``around``: the modules whose calls enclose the frame, the compiled model first."""
        if not around:
            return RootInfo()
        marker = None
        for module in around:  # outermost to innermost: the innermost marker wins
            marker = marker_of(module) or marker
        model = around[0]
        path_of = {id(m): name for name, m in model.named_modules()}
        paths = tuple(sorted((name, path_of[id(v)]) for name, v in frame_locals.items()
                             if isinstance(v, nn.Module) and id(v) in path_of))  # fmt: skip
        opted_in = any(marker_of(m) == IN for m in (*model.modules(), *around))
        own = frame_locals.get("self")
        below = isinstance(own, nn.Module) and path_of.get(id(own))  # "" for the model itself
        frame = (path_of[id(own)], type(own).__name__) if below else ("", "")
        marked = tuple(sorted((name, m) for name, module in model.named_modules() if (m := marker_of(module))))
        return RootInfo(marker, opted_in, paths, frame, marked)


def root_from_dynamo() -> RootInfo | None:
    """The modules around the frame Dynamo is compiling (``RootInfo``), or None outside a trace."""
    frame_locals = compat.dynamo_frame_locals()
    if frame_locals is None:
        return None
    around = compat.calling_modules()
    # The frame's own module: on the stack when Dynamo compiles its forward, not when it
    # compiles ``_call_impl`` itself (``model.compile()``) or a method called directly.
    own = frame_locals.get("self")
    if isinstance(own, nn.Module) and not any(m is own for m in around):
        around.append(own)
    if not around:  # a function: the compiled model is the first module among its locals
        around = [v for v in frame_locals.values() if isinstance(v, nn.Module)][:1]
    return RootInfo.of_frame(around, frame_locals)


# -------------------------------------------------------------------------- sites


@dataclasses.dataclass(frozen=True)
class Site:
    """One matmul of a compiled graph, as a ``select`` predicate and the reports see it."""

    op: str  # "mm", "addmm", "bmm"
    module: str  # module path, e.g. "layers.0.mlp.up"; "" for the compiled root's own code
    module_type: str  # class name of the innermost module, "" at the root
    phase: str  # "forward" or "backward"
    shapes: tuple  # shapes of (a, b) or (bias, a, b)
    dtypes: tuple
    strides: tuple
    device: str
    node: str  # the FX node's name in its graph
    opt: str | None  # the closest module marker: "in", "out" or None
    offsets: tuple = ()  # storage offset of each operand (its base's alignment decides the kernel path)
    # Why ``opt`` cannot be read ('' when it can): a torch.export graph names a module class
    # this process does not define (or several with different markers). Such a site is not routed.
    marker_unknown: str = ""

    def __str__(self) -> str:
        shapes = " ".join("x".join(map(str, s)) or "[]" for s in self.shapes)
        where = self.module or "<root>"
        return f"{self.phase} {self.op} {where} ({self.module_type or '-'}) [{shapes}] {self.dtypes[-1]}"


def _clean_path(path: str, prefixes: dict[str, str]) -> str:
    """ "L['self'].layers.0" -> "layers.0", under the frame local's own path in the compiled
    model (``RootInfo.paths``); older spellings use "._modules['layers']"."""
    path = re.sub(r"\._modules\['([^']*)'\]", r".\1", path)
    local = re.match(r"^L\['([^']*)'\]\.?", path)
    if local is None:
        return path
    rest = path[local.end():]
    prefix = prefixes.get(local.group(1), "")
    return f"{prefix}.{rest}" if prefix and rest else prefix or rest


@dataclasses.dataclass(frozen=True)
class _Module:
    """One enclosing module of a site, as the node metadata names it."""

    path: str  # in the compiled model; "" for the model itself
    name: str  # its class's __name__
    marker: str | None
    unknown: str = ""  # why its marker cannot be read ('' when it can): a class named by a string


# Per graph: every nn.Module class this process defines, by "module.QualName" (built on the
# first string entry of a graph, so a class defined between two compiles is found).
_classes_by_name: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _module_classes() -> dict[str, list[type]]:
    found: dict[str, list[type]] = {}
    todo, seen = [nn.Module], set()
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
                found.setdefault(f"{sub.__module__}.{sub.__qualname__}", []).append(sub)
    return found


def _named_class(name: str, path: str, classes: dict[str, list[type]]) -> _Module:
    """The module a torch.export entry names by its class's qualified name, with the marker of
    the class of that name in this process (found among nn.Module's subclasses, so a class
    defined inside a function is found too, while it exists)."""
    short = _INSTANCE_MARK.sub("", name).rsplit(".", 1)[-1]
    instance = _INSTANCE_MARK.search(name)
    if instance:  # a marked instance's class: the marker is its own, whatever its base says
        return _Module(path, short, instance.group(1))
    markers = {marker_of(cls) for cls in classes.get(name, ())}
    if len(markers) == 1:
        return _Module(path, short, markers.pop())
    return _Module(path, short, None, _marker_unknown(path, name, ambiguous=bool(markers)))


def _marker_unknown(path: str, name, ambiguous: bool = False) -> str:
    kind = "class_ambiguous" if ambiguous else "class_undefined"
    return not_routed(kind, module=repr(path or "<root>"), name=repr(name))


def _module_stack(node: torch.fx.Node, root: RootInfo) -> list[_Module]:
    """Each enclosing module (forward or backward node), outermost first. Dynamo's entries are
    ``(path, class)``; torch.export's ``(path, "module.QualName")``, the model itself first."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    prefixes = dict(root.paths)
    out = []
    for entry in stack.values():
        path, cls = _clean_path(str(entry[0]), prefixes), entry[1]
        if isinstance(cls, type):
            out.append(_Module(path, cls.__name__, marker_of(cls)))
        elif isinstance(cls, str):
            if node.graph not in _classes_by_name:
                _classes_by_name[node.graph] = _module_classes()
            out.append(_named_class(cls, path, _classes_by_name[node.graph]))
        else:
            out.append(_Module(path, "", None, _marker_unknown(path, cls)))
    return out


def is_backward(node: torch.fx.Node) -> bool:
    return node.meta.get("partitioner_tag") == "is_backward" or "fwd_nn_module_stack" in node.meta


def _int(x) -> Any:
    return int(x) if isinstance(x, int) or not isinstance(x, torch.SymInt) else x


def describe(node: torch.fx.Node, root: RootInfo, graph_is_backward: bool = False) -> Site:
    vals = [a.meta.get("val") for a in node.args if isinstance(a, torch.fx.Node)]
    stack = _module_stack(node, root)
    opt, unknown = root.marker, ""
    for module in stack:  # outermost to innermost: the innermost marker wins
        opt = module.marker or opt
        # A module whose marker is unknown decides the site's unless a module inside it is marked.
        unknown = module.unknown or ("" if module.marker else unknown)
    # torch.export's stack starts at the model itself, which Dynamo's never names: a site in
    # the model's own code is at "" either way.
    inner = [m for m in stack if m.path]
    path, cls_name = (inner[-1].path, inner[-1].name) if inner else root.frame
    return Site(
        op=MATMULS[node.target],
        module=path,
        module_type=cls_name,
        phase="backward" if graph_is_backward or is_backward(node) else "forward",
        shapes=tuple(tuple(_int(s) for s in v.shape) for v in vals),
        dtypes=tuple(str(v.dtype).replace("torch.", "") for v in vals),
        strides=tuple(tuple(_int(s) for s in v.stride()) for v in vals),
        device=str(vals[0].device) if vals else "",
        node=node.name,
        opt=opt,
        offsets=tuple(_int(v.storage_offset()) for v in vals),
        marker_unknown=unknown,
    )


# -------------------------------------------------------------------- eligibility


def _has_unit_stride(v: torch.Tensor) -> bool:
    if v.dim() < 2:
        return True
    return any(statically_known_true(v.stride(d) == 1) or statically_known_true(v.size(d) <= 1) for d in (-1, -2))


def ineligible_reason(node: torch.fx.Node) -> str | None:
    """Why the plugin kernel cannot take this site ("not eligible: ..."), or None when it can."""
    vals = [a.meta.get("val") for a in node.args if isinstance(a, torch.fx.Node)]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return not_routed("no_metadata")
    dtypes = {v.dtype for v in vals}
    if len(dtypes) != 1:
        return not_routed("mixed_dtypes", dtypes=sorted(map(str, dtypes)))
    dtype = vals[0].dtype
    if dtype not in SUPPORTED_DTYPES:
        return not_routed("dtype", dtype=dtype)
    device = vals[0].device
    if device.type == "cpu" and not interpreting():
        return not_routed("needs_interpreter")
    defect = interpreter_defect()
    if defect is not None:
        return f"not eligible: {defect}"  # REASONS["interpreter_defect"], as interpreter.py words it
    if device.type not in ("cpu", "cuda"):
        return not_routed("device", device=device)
    operands = vals[-2:]  # a and b (addmm's bias reads any strides in the epilogue)
    for name, v in zip(("a", "b"), operands):
        if not _has_unit_stride(v):
            return not_routed("strides", operand=name, strides=tuple(v.stride()))
    return None


# ---------------------------------------------------------------------- selection

SelectSpec = Any  # "all" | "opted_in" | "auto" | Callable[[Site], bool]
SELECT_MODES = ("auto", "all", "opted_in")


def validate_select(select: SelectSpec) -> None:
    if callable(select) or select in SELECT_MODES:
        return
    raise ValueError(
        f"inductor_mm_plugin: select must be one of {', '.join(map(repr, SELECT_MODES))} or a callable "
        f"taking a Site and returning bool, got {select!r}"
    )


def resolved_mode(select: SelectSpec, root: RootInfo) -> str | None:
    """"all" or "opted_in" as ``select`` means it for this root ("auto": opted-in modules
    where the model has any, else all); None for a predicate."""
    if callable(select):
        return None
    return ("opted_in" if root.has_opted_in else "all") if select == "auto" else select


def decide(site: Site, ineligible: str | None, select: SelectSpec, root: RootInfo) -> tuple[bool, str]:
    """(routed, reason): the reason says why a site is not routed ('' when it is); ``ineligible``
    is ``ineligible_reason``'s."""
    if ineligible:
        return False, ineligible
    if site.marker_unknown:
        return False, site.marker_unknown
    if site.opt == OUT:
        return False, not_routed("opted_out")
    if callable(select):
        ok = bool(select(site))
        return ok, "" if ok else not_routed("predicate")
    mode = resolved_mode(select, root)
    if mode == "all":
        return True, ""
    if site.opt == IN:
        return True, ""
    return False, not_routed("not_opted_in" if select == "opted_in" else "not_opted_in_auto")

