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
from . import config_kwargs, num_sms, prologue, template

NAME = "inductor_mm_plugin_mm"

SOURCE = prologue("the plugin's tile algorithm (kernels/matmul.py)") + r"""
    stride_am = {{stride("A", 0)}}
    stride_ak = {{stride("A", 1)}}
    stride_bk = {{stride("B", 0)}}
    stride_bn = {{stride("B", 1)}}

    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    {{tile_coords("pid") | indent(4)}}

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N
    a_ptrs = A + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = B + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    idx_m = offs_m[:, None]
    idx_n = offs_n[None, :]
    mask = mask_m & mask_n
    {{store_output(("idx_m", "idx_n"), "acc", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}
"""


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
