"""Inductor lowerings for ``inductor_mm_plugin::mm/addmm/bmm/mm_swiglu/mm_activation``.

Without a lowering a custom op reaches Inductor as an opaque fallback kernel. With one,
Inductor decides how each routed op runs, by the pass's ``RouteDecision`` (decision.py):

    compete ALL (compete=True):   template configs + extern plugin kernel + aten, benchmarked by Inductor
    an epilogue (compete=False):  the template alone, so the scheduler fuses the epilogue into it
    otherwise:                    the extern plugin kernel (the persistent TMA kernel where it applies)

On the CPU (Triton's interpreter) only the extern kernel and aten exist.

Under the C++ wrapper (``cpp_wrapper=True``, and AOTInductor, whose wrapper is always C++)
the extern kernels cannot be called: they are Python functions, and Inductor asks an extern
choice for a C++ name it does not have (a bare AssertionError in ``ir.get_kernel_name``).
There a site lowers to its template where one applies (Triton, launched from C++ like any
Inductor kernel), else to the op itself as a fallback kernel, which the C++ wrapper calls
through the dispatcher and an AOTInductor package through its proxy executor: what Inductor
does with a custom op that has no lowering, so registering these lowerings never breaks a
compile that worked without them.

Registration is lazy (``register_lowerings()``, called by the backend and by
``inductor_options``) and idempotent. The extern choices are created when this module is
imported: ``ExternKernelChoice`` asserts on duplicate names, and a graph loaded from
Inductor's cache calls ``extern_kernels.<name>`` without lowering anything again, so the
names must exist before any compiled plugin graph runs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Iterator

import torch

from ..ops.activation import mm_activation_launch_checked
from ..ops.swiglu import mm_swiglu_launch
from ..runtime import addmm_launch, bmm_launch, mm_launch
from . import compat, decision
from .decision import Compete
from .templates import pointer, tma, usable

plugin_ops = torch.ops.inductor_mm_plugin
log = logging.getLogger(__name__)


# The extern kernels: Inductor allocates ``out`` with the layout it planned and passes it in.
# Where the Triton kernel cannot run the launchers return aten's result instead of writing
# ``out`` (they warn); copy it so the planned buffer holds the answer either way.


# While ``profiled_calls()`` is on (comparison/profile.py profiles a model step), each extern
# call runs inside a profiler range named like its op, with the shapes of a and b, so that its
# kernels, launched from Python and not through the dispatcher, can be attributed to the site.
_PROFILED = [False]


@contextlib.contextmanager
def profiled_calls() -> Iterator[None]:
    _PROFILED[0] = True
    try:
        yield
    finally:
        _PROFILED[0] = False


def _in_range(op: str, first: int):
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if not _PROFILED[0]:
                return fn(*args, **kwargs)
            a, b = args[first], args[first + 1]
            with torch.profiler.record_function(f"inductor_mm_plugin::{op} {_dims(a)} {_dims(b)}"):
                return fn(*args, **kwargs)

        return call

    return wrap


def _dims(t) -> str:
    return "x".join(map(str, t.shape))


@_in_range("mm", 0)
def inductor_mm_plugin_mm(a, b, *, out):
    result = mm_launch(a, b, out=out)
    if result is not out:
        out.copy_(result)
    return out


@_in_range("addmm", 1)
def inductor_mm_plugin_addmm(bias, a, b, *, beta=1, alpha=1, out):
    result = addmm_launch(bias, a, b, beta, alpha, out=out)
    if result is not out:
        out.copy_(result)
    return out


@_in_range("bmm", 0)
def inductor_mm_plugin_bmm(a, b, *, out):
    result = bmm_launch(a, b, out=out)
    if result is not out:
        out.copy_(result)
    return out


def inductor_mm_plugin_mm_swiglu(x, w_gate, w_up, *, out):
    return mm_swiglu_launch(x, w_gate, w_up, out=out)


def inductor_mm_plugin_mm_activation(a, b, bias=None, *, activation, out):
    return mm_activation_launch_checked(a, b, bias, activation, out=out)  # its fallback writes ``out`` too


def _extern_choice(fn):
    # Created once per process; a reload of this module replaces the old attribute instead
    # of tripping the duplicate-name assertion.
    if hasattr(compat.extern_kernels, fn.__name__):
        delattr(compat.extern_kernels, fn.__name__)
    return compat.ExternKernelChoice(fn, None, name=fn.__name__)


plugin_mm_choice = _extern_choice(inductor_mm_plugin_mm)
plugin_addmm_choice = _extern_choice(inductor_mm_plugin_addmm)
plugin_bmm_choice = _extern_choice(inductor_mm_plugin_bmm)
plugin_mm_swiglu_choice = _extern_choice(inductor_mm_plugin_mm_swiglu)
plugin_mm_activation_choice = _extern_choice(inductor_mm_plugin_mm_activation)


def _template_choices(choices, a, b, nodes, layout, m, n, k, bias, alpha, beta, compete: bool) -> None:
    """The templates' choices for ``alpha * (a @ b) + beta * bias``: the TMA template where the
    operands allow it (and, where it offers nothing or the site competes, the pointer template)."""
    hints = tuple(compat.V.graph.sizevars.size_hint(x, fallback=4096) for x in (m, n, k))
    dtype = layout.dtype
    if bias is not None and beta != 0:
        extra = {"prefix_args": 1, "epilogue_fn": compat.addmm_epilogue(dtype, alpha, beta),
                 "epilogue_fn_hash": str(["inductor_mm_plugin_addmm", dtype, alpha, beta])}  # fmt: skip
    elif alpha != 1:  # beta == 0: the bias is ignored entirely (NaN in it must not propagate)
        extra = {"epilogue_fn": _scale_epilogue(dtype, alpha), "epilogue_fn_hash": str(["scale", dtype, alpha])}
    else:
        extra = {}
    offered = False
    if tma.applies(layout, a, b):
        # nn.Linear's bias (broadcast along M, alpha = beta = 1) goes into the kernel.
        linear_bias = (bias is not None and alpha == 1 and beta == 1 and tma.static(bias)
                       and tma.known_equal(bias.get_stride()[0], 0))  # fmt: skip
        offered = tma.append_choices(choices, a, b, nodes, layout, hints, extra, linear_bias=linear_bias,
                                     compete=compete)  # fmt: skip
    if compete or not offered:
        pointer.append_choices(choices, nodes, layout, hints, extra, compete)


def _scale_epilogue(dtype, alpha):
    def epilogue(acc):
        return compat.V.ops.mul(acc, compat.V.ops.constant(alpha, dtype))

    return epilogue


def _as_fallback(op, *args, **kwargs):
    """The op as a fallback kernel: what the C++ wrapper can call where no template applies."""
    log.info("%s: the C++ wrapper cannot call the plugin's extern kernel; lowered as a fallback kernel "
             "that calls the op (%s)", decision.current().site or op, op)  # fmt: skip
    return compat.fallback_lowering(op, *args, **kwargs)


def _mm_like(name, extern, aten_choice, a, b, layout, m, n, k, bias=None, alpha=1, beta=1, fallback=None):
    routed = decision.current()
    nodes = [bias, a, b] if bias is not None else [a, b]
    scalars = {"beta": beta, "alpha": alpha} if bias is not None else {}
    choices = []
    if usable(layout) and (routed.compete is Compete.ALL or (routed.epilogue and routed.compete is None)):
        _template_choices(choices, a, b, nodes, layout, m, n, k, bias, alpha, beta, routed.compete is Compete.ALL)
    if compat.cpp_wrapper():
        if not choices:
            return fallback()
    elif routed.compete or not choices:
        choices.append(extern.bind(tuple(nodes), layout, **scalars))
    if routed.compete:
        choices.append(aten_choice.bind(tuple(nodes), layout, **scalars))
    return compat.select_algorithm(name, choices, nodes, layout)


def lower_mm(a, b):
    fallback = lambda: _as_fallback(plugin_ops.mm.default, a, b)  # noqa: E731
    m, n, k, layout, a, b = compat.mm_args(a, b)
    return _mm_like("inductor_mm_plugin_mm", plugin_mm_choice, compat.aten_mm, a, b, layout, m, n, k,
                    fallback=fallback)  # fmt: skip


def lower_addmm(bias, a, b, *, beta=1, alpha=1):
    fallback = lambda: _as_fallback(plugin_ops.addmm.default, bias, a, b, beta=beta, alpha=alpha)  # noqa: E731
    m, n, k, layout, a, b, bias = compat.mm_args(a, b, bias)
    return _mm_like("inductor_mm_plugin_addmm", plugin_addmm_choice, compat.aten_addmm, a, b, layout, m, n, k,
                    bias=bias, alpha=alpha, beta=beta, fallback=fallback)  # fmt: skip


def lower_bmm(a, b):
    if compat.cpp_wrapper():  # bmm has no template
        return _as_fallback(plugin_ops.bmm.default, a, b)
    _, _, _, layout, a, b = compat.mm_args(a, b)
    choices = [plugin_bmm_choice.bind((a, b), layout)]
    if decision.current().compete:
        choices.append(compat.aten_bmm.bind((a, b), layout))
    return compat.select_algorithm("inductor_mm_plugin_bmm", choices, [a, b], layout)


def lower_mm_swiglu(x, w_gate, w_up):
    """Both matmuls and the product in the SwiGLU template where it applies (CUDA, fp16/bf16,
    TMA-readable static operands); otherwise, also when the site competes, the extern op
    (the fused eager kernel where it takes the operands, else the plugin's two matmul kernels
    and the product). A pair fused because its extern kernel timed faster runs that alone."""
    fallback = lambda: _as_fallback(plugin_ops.mm_swiglu.default, x, w_gate, w_up)  # noqa: E731
    _, _, _, layout, x, w_gate = compat.mm_args(x, w_gate)
    _, _, _, _, x, w_up = compat.mm_args(x, w_up)
    routed = decision.current()
    compete = routed.compete is not None
    choices = []
    if not routed.timed and tma.swiglu_applies(x, w_gate, w_up, layout):
        tma.append_swiglu_choices(choices, x, w_gate, w_up, layout, compete=compete)
    if compat.cpp_wrapper():
        if not choices:
            return fallback()
    elif compete or not choices:
        choices.append(plugin_mm_swiglu_choice.bind((x, w_gate, w_up), layout))
    return compat.select_algorithm("inductor_mm_plugin_mm_swiglu", choices, [x, w_gate, w_up], layout)


def lower_mm_activation(a, b, bias, activation):
    """The extern op alone: the routing pass puts ``mm_activation`` only where its kernel timed
    faster than stock's form (activation_pattern.py), so that kernel is what runs."""
    if compat.cpp_wrapper():
        return _as_fallback(plugin_ops.mm_activation.default, a, b, bias, activation)
    if bias is None:
        _, _, _, layout, a, b = compat.mm_args(a, b)
        nodes = [a, b]
    else:
        _, _, _, layout, a, b, bias = compat.mm_args(a, b, bias)
        nodes = [a, b, bias]
    choice = plugin_mm_activation_choice.bind(tuple(nodes), layout, activation=activation)
    return compat.select_algorithm("inductor_mm_plugin_mm_activation", [choice], nodes, layout)


LOWERINGS = {
    plugin_ops.mm.default: lower_mm,
    plugin_ops.addmm.default: lower_addmm,
    plugin_ops.bmm.default: lower_bmm,
    plugin_ops.mm_swiglu.default: lower_mm_swiglu,
    plugin_ops.mm_activation.default: lower_mm_activation,
}


def register_lowerings() -> None:
    """Register the lowerings (idempotent: ``register_lowering`` silently overwrites)."""
    for op, fn in LOWERINGS.items():
        current = compat.lowerings.get(op)
        if getattr(current, "__wrapped__", None) is fn:
            continue
        compat.register_lowering(op, type_promotion_kind=None)(fn)
