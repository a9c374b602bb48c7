"""Inductor lowerings for ``inductor_mm_plugin::mm/addmm/bmm``.

Without a lowering a custom op reaches Inductor as an opaque fallback kernel. With one,
Inductor decides how each routed op runs: the plugin kernel as an extern kernel choice
(``extern_kernels.inductor_mm_plugin_mm(...)`` in the generated code) and, when the routing
pass asked the site to compete, aten's kernel beside it, benchmarked by Inductor's
autotuner so the faster one runs ("route only where faster").

Registration is lazy (``register_lowerings()``, called by the backend and by
``inductor_options``) and idempotent. The extern choices are created when this module is
imported: ``ExternKernelChoice`` asserts on duplicate names, and a graph loaded from
Inductor's cache calls ``extern_kernels.<name>`` without lowering anything again, so the
names must exist before any compiled plugin graph runs.
"""

from __future__ import annotations

import torch

from ..ops.matmul import addmm_launch, bmm_launch, mm_launch
from . import compat
from .routing import META_KEY

plugin_ops = torch.ops.inductor_mm_plugin


# The extern kernels: Inductor allocates ``out`` with the layout it planned and passes it in.
# Where the Triton kernel cannot run the launchers return aten's result instead of writing
# ``out`` (they warn); copy it so the planned buffer holds the answer either way.


def inductor_mm_plugin_mm(a, b, *, out):
    result = mm_launch(a, b, out=out)
    if result is not out:
        out.copy_(result)
    return out


def inductor_mm_plugin_addmm(bias, a, b, *, beta=1, alpha=1, out):
    result = addmm_launch(bias, a, b, beta, alpha, out=out)
    if result is not out:
        out.copy_(result)
    return out


def inductor_mm_plugin_bmm(a, b, *, out):
    result = bmm_launch(a, b, out=out)
    if result is not out:
        out.copy_(result)
    return out


def _extern_choice(fn):
    # Created once per process; a reload of this module replaces the old attribute instead
    # of tripping the duplicate-name assertion.
    if hasattr(compat.extern_kernels, fn.__name__):
        delattr(compat.extern_kernels, fn.__name__)
    return compat.ExternKernelChoice(fn, None, name=fn.__name__)


plugin_mm_choice = _extern_choice(inductor_mm_plugin_mm)
plugin_addmm_choice = _extern_choice(inductor_mm_plugin_addmm)
plugin_bmm_choice = _extern_choice(inductor_mm_plugin_bmm)


def _compete() -> bool:
    node = compat.current_fx_node()
    meta = node.meta.get(META_KEY, {}) if node is not None else {}
    return bool(meta.get("compete", False))


def lower_mm(a, b):
    _, _, _, layout, a, b = compat.mm_args(a, b)
    choices = [plugin_mm_choice.bind((a, b), layout)]
    if _compete():
        choices.append(compat.aten_mm.bind((a, b), layout))
    return compat.select_algorithm("inductor_mm_plugin_mm", choices, [a, b], layout)


def lower_addmm(bias, a, b, *, beta=1, alpha=1):
    _, _, _, layout, a, b, bias = compat.mm_args(a, b, bias)
    choices = [plugin_addmm_choice.bind((bias, a, b), layout, beta=beta, alpha=alpha)]
    if _compete():
        choices.append(compat.aten_addmm.bind((bias, a, b), layout, alpha=alpha, beta=beta))
    return compat.select_algorithm("inductor_mm_plugin_addmm", choices, [bias, a, b], layout)


def lower_bmm(a, b):
    _, _, _, layout, a, b = compat.mm_args(a, b)
    choices = [plugin_bmm_choice.bind((a, b), layout)]
    if _compete():
        choices.append(compat.aten_bmm.bind((a, b), layout))
    return compat.select_algorithm("inductor_mm_plugin_bmm", choices, [a, b], layout)


LOWERINGS = {
    plugin_ops.mm.default: lower_mm,
    plugin_ops.addmm.default: lower_addmm,
    plugin_ops.bmm.default: lower_bmm,
}


def register_lowerings() -> None:
    """Register the lowerings (idempotent: ``register_lowering`` silently overwrites)."""
    for op, fn in LOWERINGS.items():
        current = compat.lowerings.get(op)
        if getattr(current, "__wrapped__", None) is fn:
            continue
        compat.register_lowering(op, type_promotion_kind=None)(fn)
