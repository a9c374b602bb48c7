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
from . import config_kwargs, known_equal, num_sms, prologue, static, template, usable

NAME = "inductor_mm_plugin_mm_tma"
SWIGLU_NAME = "inductor_mm_plugin_mm_swiglu_tma"

SOURCE = prologue(
    "the plugin's persistent TMA kernel (kernels/matmul_tma.py){{ ', two weights (SwiGLU)' if SWIGLU else '' }}",
    'def_kernel("A", "B", "B2") if SWIGLU else (def_kernel("BIAS", "A", "B") if HAS_BIAS else def_kernel("A", "B"))',
) + r"""
    if A_KMAJOR:
        a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[{{stride("A", 0)}}, 1], block_shape=[BLOCK_M, BLOCK_K])
    else:
        a_desc = tl.make_tensor_descriptor(A, shape=[K, M], strides=[{{stride("A", 1)}}, 1], block_shape=[BLOCK_K, BLOCK_M])
    if B_KMAJOR:
        b_desc = tl.make_tensor_descriptor(B, shape=[N, K], strides=[{{stride("B", 1)}}, 1], block_shape=[BLOCK_N, BLOCK_K])
        {%- if SWIGLU %}
        b2_desc = tl.make_tensor_descriptor(B2, shape=[N, K], strides=[{{stride("B2", 1)}}, 1], block_shape=[BLOCK_N, BLOCK_K])
        {%- endif %}
    else:
        b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[{{stride("B", 0)}}, 1], block_shape=[BLOCK_K, BLOCK_N])
        {%- if SWIGLU %}
        b2_desc = tl.make_tensor_descriptor(B2, shape=[K, N], strides=[{{stride("B2", 0)}}, 1], block_shape=[BLOCK_K, BLOCK_N])
        {%- endif %}

    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_work = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tiles_per_group = GROUP_M * num_pid_n
    work_c = start - NUM_SMS

    for work in tl.range(start, num_work, NUM_SMS, flatten=FLATTEN):
        {{tile_coords("work") | indent(8)}}
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        {%- if SWIGLU %}
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        {%- endif %}
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if A_KMAJOR:
                a = a_desc.load([off_m, off_k])
            else:
                a = a_desc.load([off_k, off_m]).T
            if B_KMAJOR:
                b = b_desc.load([off_n, off_k]).T
                {%- if SWIGLU %}
                b2 = b2_desc.load([off_n, off_k]).T
                {%- endif %}
            else:
                b = b_desc.load([off_k, off_n])
                {%- if SWIGLU %}
                b2 = b2_desc.load([off_k, off_n])
                {%- endif %}
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
            {%- if SWIGLU %}
            acc2 = tl.dot(a, b2, acc2, input_precision=INPUT_PRECISION)
            {%- endif %}

        # The epilogue recomputes its tile from its own counter, flattened or not (the eager
        # kernel does so only when flattened; unmeasured here). FLATTEN comes from the eager
        # heuristic, which unflattens where each program has one tile.
        work_c += NUM_SMS
        {{tile_coords("work_c") | indent(8)}}
        {%- if HAS_BIAS %}
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        bias = tl.load(BIAS + offs_n * {{stride("BIAS", 1)}}, mask=offs_n < N, other=0.0)[None, :]
        acc = acc + bias.to(tl.float32)
        {%- endif %}
        {%- if SWIGLU %}
        acc = acc * tl.sigmoid(acc) * acc2  # silu(x @ w_gate) * (x @ w_up)
        {%- endif %}
        idx_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]
        {%- if EPILOGUE_SUBTILE %}
        # Two BLOCK_N / 2 halves, each through the fused epilogue on its own: an activation
        # over a whole 128 x 256 tile runs out of registers and spills.
        acc3 = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(acc3)
        for half in tl.static_range(2):
            sub = (acc0, acc1)[half]
            idx_n = (pid_n * BLOCK_N + half * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2))[None, :]
            mask = (idx_m < M) & (idx_n < N)
            {{store_output(("idx_m", "idx_n"), "sub", "mask", indent_width=12, val_shape=("BLOCK_M", "BLOCK_N // 2"))}}
        {%- else %}
        idx_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]
        mask = (idx_m < M) & (idx_n < N)
        {{store_output(("idx_m", "idx_n"), "acc", "mask", indent_width=8, val_shape=("BLOCK_M", "BLOCK_N"))}}
        {%- endif %}
"""


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
