"""``inductor_mm_plugin_mm_tma``: the persistent TMA kernel (kernels/matmul_tma.py,
``_matmul_kernel_tma``) as an Inductor template, and ``inductor_mm_plugin_mm_swiglu_tma``, the
same loop with a second weight for SwiGLU (the op ``inductor_mm_plugin::mm_swiglu``).

The TMA kernel's loop with SPLIT_K = 1, no SWAP_AB and pointer stores: NUM_SMS programs (the
eager kernel's count, configs/templates.py ``template_programs``) loop over grouped output
tiles, operands read through device-side TMA descriptors in their storage order (A_KMAJOR /
B_KMAJOR). For fp16/bf16 where both operands qualify for TMA (Inductor's ``can_use_tma``)
and every size and stride is static (a descriptor built for one shape's strides must not be
reused for another's).

HAS_BIAS: an ``nn.Linear`` bias (broadcast along M, alpha = beta = 1) is a kernel input,
added as the eager kernel adds a bias broadcast along M (its BIAS_MODE "n"): one vector per
tile. Through Inductor's addmm epilogue it would be gathered as a whole tile of loads.

SWIGLU: every line that reads B or updates the accumulator has a twin for the second weight
(B2, acc2), and ``silu(acc) * acc2`` is taken before the store, so the fused epilogue sees
silu(x @ w_gate) * (x @ w_up); no bias, no subtiled store (the product halves what is stored).

Tiles of 128 x 256 and up run the epilogue in two halves (EPILOGUE_SUBTILE; a GELU over the
whole tile spills). The output is stored through pointers: the fused epilogue computes on
the stored indices.
"""

from __future__ import annotations

import torch

from ...configs import templates as template_configs
from ...runtime import input_precision
from ...runtime.device import no_tma_reason
from .. import compat
from . import config_kwargs, jinja_source, known_equal, num_sms, static, template, usable

NAME = "inductor_mm_plugin_mm_tma"
SWIGLU_NAME = "inductor_mm_plugin_mm_swiglu_tma"

SOURCE = jinja_source("tma")  # tma.py.jinja; SWIGLU on: the SwiGLU template


def tma_template():
    return template(NAME, compat.persistent_mm_grid, SOURCE)


def swiglu_template():
    return template(SWIGLU_NAME, compat.persistent_mm_grid, SOURCE)


def _storage_order(a, b) -> tuple[bool, bool]:
    """(A K-major, B K-major) of IR operands."""
    return known_equal(a.get_stride()[1], 1), known_equal(b.get_stride()[0], 1)


def _kwargs(cfg, a_kmajor: bool, b_kmajor: bool, programs: int, dtype, has_bias=False, swiglu=False) -> dict:
    # NUM_SMS (the name Inductor's persistent_mm_grid reads) is the program count.
    return {**config_kwargs(cfg), "NUM_SMS": programs, "FLATTEN": cfg.flatten, "A_KMAJOR": a_kmajor,
            "B_KMAJOR": b_kmajor, "EPILOGUE_SUBTILE": cfg.epilogue_subtile, "HAS_BIAS": has_bias, "SWIGLU": swiglu,
            "INPUT_PRECISION": repr(input_precision(dtype))}  # fmt: skip


def applies(layout, *nodes) -> bool:
    """Whether the TMA templates can read these IR operands: a GPU with TMA (sm_90 and
    later; an Ampere GPU takes the pointer template), static sizes and strides (a descriptor
    built for one shape's strides must not be reused for another's), and 16-byte alignment
    (Inductor's own ``can_use_tma``)."""
    if no_tma_reason(layout.device) is not None:
        return False
    return all(static(t) for t in nodes) and compat.can_use_tma(*nodes)


def append_choices(choices: list, a, b, nodes, layout, hints, extra: dict, *, linear_bias=False,
                   compete=False) -> bool:  # fmt: skip
    """Append the TMA template's choices (``applies`` must hold); False where it offers none.
    ``linear_bias``: ``nodes`` starts with an nn.Linear bias, which the kernel adds itself
    (``extra``, the epilogue that would add it, is then left out)."""
    a_kmajor, b_kmajor = _storage_order(a, b)
    sms = num_sms(layout)
    dtype = layout.dtype
    cfgs = template_configs.tma_template_configs(*hints, dtype.itemsize, str(dtype).removeprefix("torch."), a_kmajor,
                                                 b_kmajor, sms, compete=compete)  # fmt: skip
    # The inputs keep the extern choice's order (bias, a, b), which autotuning feeds to all.
    for cfg in cfgs:
        programs = template_configs.template_programs(cfg, *hints[:2], sms)
        tma_template().maybe_append_choice(
            choices, input_nodes=nodes, layout=layout,
            **_kwargs(cfg, a_kmajor, b_kmajor, programs, dtype, linear_bias), **({} if linear_bias else extra),
        )  # fmt: skip
    return bool(cfgs)


def swiglu_applies(x, w_gate, w_up, layout) -> bool:
    """Whether the SwiGLU template can run these IR operands: CUDA, fp16/bf16, static sizes
    and strides, TMA-readable, both weights in the same storage order."""
    if not usable(layout) or layout.dtype not in (torch.float16, torch.bfloat16):
        return False
    if not applies(layout, x, w_gate, w_up):
        return False
    return known_equal(w_gate.get_stride()[0], 1) == known_equal(w_up.get_stride()[0], 1)


def append_swiglu_choices(choices: list, x, w_gate, w_up, layout, *, compete=False) -> None:
    """Append the SwiGLU template's choices (``swiglu_applies`` must hold)."""
    a_kmajor, b_kmajor = _storage_order(x, w_gate)
    sms = num_sms(layout)
    m, n = (compat.V.graph.sizevars.size_hint(d) for d in layout.size)  # static (swiglu_applies)
    for cfg in template_configs.swiglu_template_configs(layout.dtype.itemsize, compete=compete):
        programs = template_configs.template_programs(cfg, m, n, sms)
        swiglu_template().maybe_append_choice(
            choices, input_nodes=(x, w_gate, w_up), layout=layout,
            **_kwargs(cfg, a_kmajor, b_kmajor, programs, layout.dtype, swiglu=True),
        )  # fmt: skip
