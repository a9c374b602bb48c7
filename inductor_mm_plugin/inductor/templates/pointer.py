"""``inductor_mm_plugin_mm``: the pointer kernel's tile algorithm (kernels/matmul.py,
``_matmul_kernel``) as an Inductor template: one program per tile, loads masked on the true
indices, any strides. Used where the TMA template does not apply (unaligned strides,
dynamic shapes, fp32) and where one wave of small tiles does the whole problem. No batch
dimension (bmm stays on the extern kernel); alpha, beta and any bias go through Inductor's
epilogue."""

from __future__ import annotations

from ...configs import templates as template_configs
from ...runtime import input_precision  # TF32 exactly when torch allows it, as in eager
from .. import compat
from . import config_kwargs, jinja_source, num_sms, template

NAME = "inductor_mm_plugin_mm"

SOURCE = jinja_source("pointer")  # pointer.py.jinja


def pointer_template():
    return template(NAME, compat.mm_grid, SOURCE)


def append_choices(choices: list, nodes, layout, hints, extra: dict, compete: bool) -> None:
    """Append the pointer template's choices for ``nodes`` (the epilogue in ``extra``)."""
    m, n, _ = hints
    elem = layout.dtype.itemsize
    for cfg in template_configs.pointer_template_configs(m, n, elem, num_sms(layout), compete=compete):
        pointer_template().maybe_append_choice(
            choices, input_nodes=nodes, layout=layout, **config_kwargs(cfg),
            INPUT_PRECISION=repr(input_precision(layout.dtype)), **extra,
        )  # fmt: skip
