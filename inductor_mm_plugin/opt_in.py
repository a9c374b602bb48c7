"""``opt_in`` / ``opt_out``: choose, module by module, which matmuls go to the plugin.

    @inductor_mm_plugin.opt_in            # a class: every instance, subclasses too
    class MLP(nn.Module): ...

    model.attn = inductor_mm_plugin.opt_in(model.attn)    # one instance
    inductor_mm_plugin.opt_out(model.attn.proj)           # a subtree stays on stock Inductor

Nested modules inherit their closest marked ancestor's choice: the innermost marker wins,
and ``opt_out`` wins over every ``select`` mode.

How it is recorded: Dynamo writes each matmul's enclosing modules into the graph's node
metadata as ``(path, class)`` pairs (``nn_module_stack``; ``fwd_nn_module_stack`` on backward
nodes): the class, never the instance. So the marker lives on a class. Decorating a class
sets an attribute on it; marking an instance swaps its ``__class__`` for a marked subclass
(``isinstance`` still holds; marking many instances of one class reuses one subclass). A
marked instance pickles as its original class and is marked again when loaded
(``torch.save(model)`` / ``torch.load(..., weights_only=False)``, ``copy.deepcopy``).
Markers survive graph breaks: Dynamo's metadata never names the modules around the frame it
compiles (the compiled model; after a break inside a child, the child's ancestors), so the
plugin reads those from the modules calling that frame (``RootInfo``, ``root_from_dynamo``).
``torch.export`` records the class by name; a marked instance's class is named after its
marker (``"Linear[opt_out]"``), so the marker travels with the exported program.
"""

from __future__ import annotations

import torch.nn as nn

from .inductor.selection import IN, OUT, instance_class_qualname, marker_of, set_marker

# (original class, marker) -> its marked subclass
_instance_classes: dict[tuple[type, str], type] = {}


def _marked_class(base: type, marker: str) -> type:
    cls = _instance_classes.get((base, marker))
    if cls is None:
        cls = type(
            base.__name__,
            (base,),
            {
                "_inductor_mm_plugin_instance_class": True,
                "__module__": base.__module__,
                "__qualname__": instance_class_qualname(base, marker),
                "__reduce_ex__": _reduce_marked,
            },
        )
        set_marker(cls, marker)
        _instance_classes[(base, marker)] = cls
    return cls


def _reduce_marked(self, protocol):
    """Pickle (``torch.save``) finds a class by its qualified name, and "Linear[opt_in]"
    names none: the instance is pickled as its original class, and marked again on load."""
    cls = type(self)
    base = cls.__mro__[1]
    build, args, *rest = super(cls, self).__reduce_ex__(protocol)
    if build is cls:  # a base whose __reduce__ calls the class itself
        build = base
    args = tuple(base if a is cls else a for a in args)  # copyreg's __newobj__ / _reconstructor
    return (_rebuild_marked, (marker_of(cls), build, args), *rest)


def _rebuild_marked(marker: str, build, args):
    # pickle then restores the instance's state (nn.Module.__setstate__), as for any module
    return _mark(build(*args), marker)


def _mark(target, marker: str):
    what = f"inductor_mm_plugin.opt_{marker}"
    if isinstance(target, type):
        if not issubclass(target, nn.Module):
            raise TypeError(f"{what}: expected an nn.Module class or instance, got class {target.__qualname__}")
        set_marker(target, marker)
        return target
    if not isinstance(target, nn.Module):
        raise TypeError(f"{what}: expected an nn.Module class or instance, got {type(target).__name__}")
    base = type(target)
    if base.__dict__.get("_inductor_mm_plugin_instance_class"):
        base = base.__mro__[1]  # re-marking an instance: derive from its original class
    target.__class__ = _marked_class(base, marker)
    return target


def opt_in(target):
    """Route the matmuls of this module class or instance (and of every module inside it)."""
    return _mark(target, IN)


def opt_out(target):
    """Keep the matmuls of this module class or instance (and inside it) on stock Inductor."""
    return _mark(target, OUT)
