"""The plugin's tile algorithm as an Inductor ``TritonTemplate``, so epilogues fuse into it.

A routed matmul lowered to an extern kernel is opaque: Inductor writes its output to memory
and runs the bias, activation, residual or cast in a separate kernel. Lowered to this
template instead, the scheduler inlines those pointwise epilogues into the kernel's store
(``store_output`` below), and Inductor's autotuner can compare the template's configs,
with their epilogue, against the extern plugin kernel and aten.

Same algorithm as the eager pointer kernel (``kernels/matmul.py``, ``_matmul_kernel``):
one program per BLOCK_M x BLOCK_N tile in grouped order, a K loop of BLOCK_K slices into an
fp32 accumulator, loads masked on the true indices. ``tests/test_template.py`` proves the
two agree bit for bit on the same configs (the GPU-marked test), which is what keeps them
from drifting apart. Differences: no batch dimension (bmm stays on the extern kernel), and
alpha/beta/bias go through Inductor's epilogue instead of kernel flags.

CUDA only: on the CPU (Triton's interpreter) and wherever the template cannot be built,
the lowering uses the extern kernel.
"""

from __future__ import annotations

import dataclasses

import torch

from . import compat

TEMPLATE_NAME = "inductor_mm_plugin_mm"

# Inductor's template language: def_kernel declares the inputs, size/stride read their
# (possibly symbolic) sizes and strides, store_output stores the tile and appends any fused
# epilogue. The rest is the plugin's kernel, line for line.
SOURCE = r"""
{{def_kernel("A", "B")}}
    # inductor_mm_plugin template: the plugin's tile algorithm (kernels/matmul.py)
    M = {{size("A", 0)}}
    N = {{size("B", 1)}}
    K = {{size("A", 1)}}
    if M * N == 0:
        return
    stride_am = {{stride("A", 0)}}
    stride_ak = {{stride("A", 1)}}
    stride_bk = {{stride("B", 0)}}
    stride_bn = {{stride("B", 1)}}

    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    group_id = pid // tiles_per_group
    first_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % tiles_per_group) % group_size_m)
    pid_n = (pid % tiles_per_group) // group_size_m

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


@dataclasses.dataclass(frozen=True)
class TemplateConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def kwargs(self) -> dict:
        return {
            "BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "GROUP_M": self.group_m,
            "num_warps": self.num_warps, "num_stages": self.num_stages,
        }  # fmt: skip


# Shared memory per block on the H200; the pipelined A and B tiles must fit.
_SMEM_LIMIT = 232448
_NUM_SMS = 132

# The configs offered when the site competes (Inductor benchmarks them with the epilogue).
COMPETE_CONFIGS = [
    TemplateConfig(128, 256, 64, 8, 8, 3),
    TemplateConfig(256, 128, 64, 8, 8, 3),
    TemplateConfig(128, 128, 64, 8, 8, 4),
    TemplateConfig(128, 128, 64, 8, 4, 4),
    TemplateConfig(64, 128, 64, 8, 4, 4),
]


def heuristic_config(m: int, n: int, k: int, elem_bytes: int) -> TemplateConfig:
    """One config for the shape, chosen without benchmarking (the template's default)."""
    if elem_bytes == 4:
        return TemplateConfig(128, 128, 32, 8, 8, 3)
    if m <= 64:
        return TemplateConfig(max(16, 1 << (max(m, 1) - 1).bit_length()), 128, 128, 1, 4, 4)
    tiles = lambda bm, bn: -(-m // bm) * -(-n // bn)  # noqa: E731
    if tiles(128, 256) >= _NUM_SMS:
        return TemplateConfig(128, 256, 64, 8, 8, 3)
    if tiles(128, 128) >= _NUM_SMS:
        return TemplateConfig(128, 128, 64, 8, 8, 4)
    return TemplateConfig(64, 128, 64, 8, 4, 4)


def fits(cfg: TemplateConfig, elem_bytes: int) -> bool:
    return (cfg.block_m + cfg.block_n) * cfg.block_k * elem_bytes * cfg.num_stages <= _SMEM_LIMIT


def input_precision(dtype: torch.dtype) -> str:
    return "tf32" if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else "ieee"


_template = None


def plugin_template():
    """The TritonTemplate, created once per process (Inductor asserts on duplicate names)."""
    global _template
    if _template is None:
        existing = compat.TritonTemplate.all_templates.get(TEMPLATE_NAME)
        _template = existing or compat.TritonTemplate(name=TEMPLATE_NAME, grid=compat.mm_grid, source=SOURCE)
    return _template


def usable(layout) -> bool:
    """The template needs a CUDA device, where Inductor generates Triton."""
    device = layout.device
    return device is not None and device.type == "cuda"


def _scale_epilogue(dtype, alpha):
    def epilogue(acc):
        return compat.V.ops.mul(acc, compat.V.ops.constant(alpha, dtype))

    return epilogue


def append_choices(choices: list, a, b, layout, *, m, n, k, bias=None, alpha=1, beta=1, compete=False) -> None:
    """Append the template's choices for ``alpha * (a @ b) + beta * bias``."""
    dtype = layout.dtype
    elem = dtype.itemsize
    hints = [compat.V.graph.sizevars.size_hint(x, fallback=4096) for x in (m, n, k)]
    configs = [heuristic_config(*hints, elem)]
    if compete:
        configs += [c for c in COMPETE_CONFIGS if c not in configs]
    # Inductor writes each template kwarg into the kernel as `NAME : tl.constexpr = value`,
    # so a string constexpr carries its own quotes.
    common = {"INPUT_PRECISION": repr(input_precision(dtype))}
    if bias is not None and beta != 0:
        nodes = (bias, a, b)
        extra = {
            "prefix_args": 1,
            "epilogue_fn": compat.addmm_epilogue(dtype, alpha, beta),
            "epilogue_fn_hash": str(["inductor_mm_plugin_addmm", dtype, alpha, beta]),
        }
    elif alpha != 1:  # beta == 0: the bias is ignored entirely (NaN in it must not propagate)
        nodes = (a, b)
        extra = {"epilogue_fn": _scale_epilogue(dtype, alpha), "epilogue_fn_hash": str(["scale", dtype, alpha])}
    else:
        nodes, extra = (a, b), {}
    template = plugin_template()
    for cfg in configs:
        if fits(cfg, elem):
            template.maybe_append_choice(choices, input_nodes=nodes, layout=layout, **cfg.kwargs(), **common, **extra)
