"""The plugin's tile algorithms as Inductor ``TritonTemplate``s, so epilogues fuse into them.

A routed matmul lowered to an extern kernel is opaque: Inductor writes its output to memory
and runs the bias, activation, residual or cast in a separate kernel. Lowered to this
template instead, the scheduler inlines those pointwise epilogues into the kernel's store
(``store_output`` below), and Inductor's autotuner can compare the template's configs,
with their epilogue, against the extern plugin kernel and aten.

Two templates, each the algorithm of one eager kernel:

* ``inductor_mm_plugin_mm_tma`` (``TMA_SOURCE``), the persistent TMA kernel
  (``kernels/matmul_tma.py``, ``_matmul_kernel_tma``) without split-K: ``NUM_SMS``
  programs (the eager kernel's count, ``configs.persistent_programs``) loop over grouped
  output tiles, operands read through device-side TMA descriptors in their storage order. Used for fp16/bf16 when both operands qualify for
  TMA (Inductor's own ``can_use_tma``) and every size and stride is static; its config is
  the eager kernel's heuristic pick for the same problem (``kernels/configs.py``).
* ``inductor_mm_plugin_mm`` (``SOURCE``), the pointer kernel (``kernels/matmul.py``,
  ``_matmul_kernel``): one program per tile, loads masked on the true indices. Everything
  else (unaligned strides, dynamic shapes, fp32).

``tests/test_template.py`` checks each template against its kernel line by line (CPU) and
bit for bit on the same configs (GPU), which is what keeps them from drifting apart.
Differences from the eager kernels: no batch dimension (bmm stays on the extern kernel),
no split-K; alpha, beta and any bias go through Inductor's epilogue, except that the TMA
template adds an ``nn.Linear`` bias itself (``HAS_BIAS``, as the eager kernel's vector
load: Inductor's epilogue would gather a whole tile of it). The output is stored through
pointers (the fused epilogue computes on the stored indices); tiles of 128 x 256 and up run
the epilogue in two halves (``EPILOGUE_SUBTILE``; a GELU over the whole tile spills).

CUDA only: on the CPU (Triton's interpreter) and wherever the template cannot be built,
the lowering uses the extern kernel.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import torch

from ..kernels import configs
from ..kernels.configs import MatmulConfig
from ..kernels.matmul import _tile_coords_int
from ..ops.matmul import input_precision  # TF32 exactly when torch allows it, as in eager
from ..ops.matmul import no_tma_reason
from . import compat

TEMPLATE_NAME = "inductor_mm_plugin_mm"
TMA_TEMPLATE_NAME = "inductor_mm_plugin_mm_tma"

# Inductor's template language: def_kernel declares the inputs, size/stride read their
# (possibly symbolic) sizes and strides, store_output stores the tile and appends any fused
# epilogue. The rest is the plugin's kernel, line for line, its grouped tile order inlined
# from the kernels' _tile_coords_int (TILE_COORDS below): the same order as the eager
# kernels' _tile_coords (tests/test_kernel_paths.py checks every tile), written with integer
# divisions. The eager kernels avoid those (kernels/matmul.py, _divmod); inlining _divmod
# here as well is not done yet, nor measured. Both templates open alike:
_PROLOGUE = r"""
{{DEF_KERNEL}}
    # inductor_mm_plugin template: WHAT
    M = {{size("A", 0)}}
    N = {{size("B", 1)}}
    K = {{size("A", 1)}}
    if M * N == 0:
        return"""


def _prologue(what: str, def_kernel: str = 'def_kernel("A", "B")') -> str:
    return _PROLOGUE.replace("WHAT", what).replace("DEF_KERNEL", def_kernel)


def _inline_tile_coords(source: str) -> str:
    """``source`` with each ``TILE_COORDS(var)`` line replaced by the body of
    ``_tile_coords_int`` (kernels/matmul.py) on ``var``: template source cannot call a
    JIT function, so the grouped tile order is inlined from its definition. The body's
    first line (``tiles_per_group``, loop-invariant) is each template's own."""
    fn = getattr(_tile_coords_int, "fn", _tile_coords_int)  # JIT or interpreter wrapper
    lines = [ln.strip() for ln in inspect.getsource(fn).splitlines()]
    body = lines[lines.index("tiles_per_group = GROUP_M * num_pid_n") + 1:lines.index("return pid_m, pid_n")]

    def inline(match: re.Match) -> str:
        indent, var = match.group(1), match.group(2)
        return "".join(indent + re.sub(r"\btile\b", var, ln) + "\n" for ln in body)

    return re.sub(r"^( *)TILE_COORDS\((\w+)\)\n", inline, source, flags=re.M)


SOURCE = _inline_tile_coords(_prologue("the plugin's tile algorithm (kernels/matmul.py)") + r"""
    stride_am = {{stride("A", 0)}}
    stride_ak = {{stride("A", 1)}}
    stride_bk = {{stride("B", 0)}}
    stride_bn = {{stride("B", 1)}}

    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    TILE_COORDS(pid)

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
""")

# The persistent TMA kernel's loop (kernels/matmul_tma.py) with SPLIT_K = 1, no SWAP_AB and
# pointer stores. A_KMAJOR / B_KMAJOR pick each operand's descriptor in its storage order.
# HAS_BIAS: the bias is a kernel input, added as the eager kernel adds a bias broadcast
# along M (its BIAS_MODE "n"): one vector per tile. Through Inductor's addmm epilogue it
# would be gathered as a whole BLOCK_M x BLOCK_N tile of loads.
TMA_SOURCE = _inline_tile_coords(_prologue("the plugin's persistent TMA kernel (kernels/matmul_tma.py)",
                       'def_kernel("BIAS", "A", "B") if HAS_BIAS else def_kernel("A", "B")') + r"""
    if A_KMAJOR:
        a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[{{stride("A", 0)}}, 1], block_shape=[BLOCK_M, BLOCK_K])
    else:
        a_desc = tl.make_tensor_descriptor(A, shape=[K, M], strides=[{{stride("A", 1)}}, 1], block_shape=[BLOCK_K, BLOCK_M])
    if B_KMAJOR:
        b_desc = tl.make_tensor_descriptor(B, shape=[N, K], strides=[{{stride("B", 1)}}, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[{{stride("B", 0)}}, 1], block_shape=[BLOCK_K, BLOCK_N])

    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_work = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tiles_per_group = GROUP_M * num_pid_n
    work_c = start - NUM_SMS

    for work in tl.range(start, num_work, NUM_SMS, flatten=FLATTEN):
        TILE_COORDS(work)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if A_KMAJOR:
                a = a_desc.load([off_m, off_k])
            else:
                a = a_desc.load([off_k, off_m]).T
            if B_KMAJOR:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)

        # The epilogue recomputes its tile from its own counter, flattened or not (the eager
        # kernel does so only when flattened, and otherwise reuses the prologue's tile; that
        # change is not measured here). The config's FLATTEN comes from the eager heuristic,
        # which unflattens where each program has one tile (configs._one_item_unflattened).
        work_c += NUM_SMS
        TILE_COORDS(work_c)
        {%- if HAS_BIAS %}
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        bias = tl.load(BIAS + offs_n * {{stride("BIAS", 1)}}, mask=offs_n < N, other=0.0)[None, :]
        acc = acc + bias.to(tl.float32)
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
""")


# SwiGLU's two matmuls in one kernel (the op inductor_mm_plugin::mm_swiglu): the TMA
# template with every line that reads B or updates the accumulator doubled for the second
# weight (B2, acc2), and the product taken before the store, so the fused epilogue sees
# silu(x @ w_gate) * (x @ w_up). Generated from TMA_SOURCE so that the loop stays the TMA
# kernel's; no bias, no subtiled store (the product halves what is stored).
_SECOND_WEIGHT_LINE = re.compile(r"\bb_desc\b|^ *acc = tl\.(zeros|dot)\(")


def _second_weight(line: str) -> str:
    line = re.sub(r"\bb_desc\b", "b2_desc", line)
    line = re.sub(r"\bb\b", "b2", line)
    line = re.sub(r"\bacc\b", "acc2", line)
    return line.replace('"B"', '"B2"').replace("make_tensor_descriptor(B,", "make_tensor_descriptor(B2,")


def _swiglu_source(tma_source: str) -> str:
    head, body = tma_source.split("\n    if A_KMAJOR:\n", 1)
    head = head.replace('def_kernel("BIAS", "A", "B") if HAS_BIAS else def_kernel("A", "B")', 'def_kernel("A", "B", "B2")')
    head = head.replace("persistent TMA kernel (kernels/matmul_tma.py)", "persistent TMA kernel, two weights (SwiGLU)")
    lines = []
    for line in ("    if A_KMAJOR:\n" + body).splitlines(keepends=True):
        if line.strip().startswith("idx_m = (pid_m"):
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(f"{indent}acc = acc * tl.sigmoid(acc) * acc2  # silu(x @ w_gate) * (x @ w_up)\n")
        lines.append(line)
        if _SECOND_WEIGHT_LINE.search(line):
            lines.append(_second_weight(line))
    source = head + "\n" + "".join(lines)
    for expected in ("b2_desc = tl.make_tensor_descriptor(B2,", "b2 = b2_desc.load(", "acc2 = tl.dot(a, b2, acc2",
                     "acc2 = tl.zeros(", "* acc2  # silu", 'def_kernel("A", "B", "B2")'):  # fmt: skip
        assert expected in source, f"SwiGLU template: TMA_SOURCE changed shape, {expected!r} missing"
    return source


SWIGLU_TMA_SOURCE = _swiglu_source(TMA_SOURCE)
SWIGLU_TEMPLATE_NAME = "inductor_mm_plugin_mm_swiglu_tma"

# Each program holds two 128 x 128 accumulators (the registers of one 128 x 256 tile) and
# stages an x tile and two weight tiles per K step: 3 stages of 48 KiB. The tile and K loops
# stay two loops: flattened into one (the plain template's choice for 128 x 256 tiles) the
# kernel ran 0.99 and 0.88 of stock at (M, d, f) = (2048, 1024, 4096) and (2048, 4096, 14336),
# against 1.16 and 1.03 as two loops; 128 x 64, 256 x 64 and 128 x 128 x 32 tiles ran
# 0.73-1.06. Groups of 16 row tiles, not 8: 1.019 and 1.049 of stock against 1.005 and 1.020
# at (8192, 4096, 14336) and (2048, 4096, 14336), 1.150 against 1.161 at (2048, 1024, 4096)
# (bench/swiglu_configs.py, 2 interleaved rounds; bench/results/*-swiglu-configs*.json).
SWIGLU_CONFIG = MatmulConfig("tma", 128, 128, 64, 16, 8, 3)
SWIGLU_COMPETE_CONFIGS = [SWIGLU_CONFIG, MatmulConfig("tma", 128, 128, 64, 8, 8, 3)]


def swiglu_smem_bytes(cfg: MatmulConfig, elem_bytes: int) -> int:
    """Shared memory of the SwiGLU template: the TMA kernel's (x and weight stages, a tile
    of output for the store) plus the second weight's tile in every stage."""
    return configs.smem_bytes(cfg, elem_bytes) + cfg.block_n * cfg.block_k * elem_bytes * cfg.num_stages


def plugin_swiglu_template():
    return _template(SWIGLU_TEMPLATE_NAME, compat.persistent_mm_grid, SWIGLU_TMA_SOURCE)


def swiglu_template_applies(x, w_gate, w_up, layout) -> bool:
    """Whether the SwiGLU template can run these IR operands: CUDA, fp16/bf16, static sizes
    and strides, TMA-readable, both weights in the same storage order."""
    if not usable(layout) or layout.dtype not in (torch.float16, torch.bfloat16):
        return False
    if not tma_readable(layout, x, w_gate, w_up):
        return False
    return _known_equal(w_gate.get_stride()[0], 1) == _known_equal(w_up.get_stride()[0], 1)


def append_swiglu_choices(choices: list, x, w_gate, w_up, layout, *, compete=False) -> None:
    """Append the SwiGLU template's choices (``swiglu_template_applies`` must hold)."""
    a_kmajor, b_kmajor, num_sms = _tma_operands(x, w_gate, layout)
    m, n = (compat.V.graph.sizevars.size_hint(d) for d in layout.size)  # static (swiglu_template_applies)
    for cfg in SWIGLU_COMPETE_CONFIGS if compete else [SWIGLU_CONFIG]:
        if swiglu_smem_bytes(cfg, layout.dtype.itemsize) <= _TEMPLATE_SMEM_BUDGET:
            plugin_swiglu_template().maybe_append_choice(
                choices, input_nodes=(x, w_gate, w_up), layout=layout,
                **_tma_kwargs(cfg, a_kmajor, b_kmajor, num_sms, m, n),
                INPUT_PRECISION=repr(input_precision(layout.dtype)),
            )  # fmt: skip


_NUM_SMS = 132  # H200; the pointer template's tile choice only

# The configs offered when the site competes (Inductor benchmarks them with the epilogue).
COMPETE_CONFIGS = [
    MatmulConfig("ptr", 128, 256, 64, 8, 8, 3),
    MatmulConfig("ptr", 256, 128, 64, 8, 8, 3),
    MatmulConfig("ptr", 128, 128, 64, 8, 8, 4),
    MatmulConfig("ptr", 128, 128, 64, 8, 4, 4),
    MatmulConfig("ptr", 64, 128, 64, 8, 4, 4),
]


def heuristic_config(m: int, n: int, k: int, elem_bytes: int) -> MatmulConfig:
    """The pointer template's config for the shape, chosen without benchmarking."""
    if elem_bytes == 4:
        return MatmulConfig("ptr", 128, 128, 32, 8, 8, 3)
    if m <= 64:
        return MatmulConfig("ptr", max(16, 1 << (max(m, 1) - 1).bit_length()), 128, 128, 1, 4, 4)
    tiles = lambda bm, bn: -(-m // bm) * -(-n // bn)  # noqa: E731
    if tiles(128, 256) >= _NUM_SMS:
        return MatmulConfig("ptr", 128, 256, 64, 8, 8, 3)
    if configs.fills_a_wave(tiles(128, 128), _NUM_SMS):
        return MatmulConfig("ptr", 128, 128, 64, 8, 8, 4)
    return MatmulConfig("ptr", 64, 128, 64, 8, 4, 4)


# The pipelined A and B tiles must fit shared memory (the pointer kernel's rule).
fits = configs.fits


_templates: dict[str, object] = {}


def _template(name: str, grid, source: str):
    """A TritonTemplate, created once per process (Inductor asserts on duplicate names)."""
    if name not in _templates:
        existing = compat.TritonTemplate.all_templates.get(name)
        _templates[name] = existing or compat.TritonTemplate(name=name, grid=grid, source=source)
    return _templates[name]


def plugin_template():
    return _template(TEMPLATE_NAME, compat.mm_grid, SOURCE)


def plugin_tma_template():
    return _template(TMA_TEMPLATE_NAME, compat.persistent_mm_grid, TMA_SOURCE)


def usable(layout) -> bool:
    """The template needs a CUDA device, where Inductor generates Triton."""
    device = layout.device
    return device is not None and device.type == "cuda"


def _scale_epilogue(dtype, alpha):
    def epilogue(acc):
        return compat.V.ops.mul(acc, compat.V.ops.constant(alpha, dtype))

    return epilogue


def _known_equal(x, value) -> bool:
    return compat.V.graph.sizevars.statically_known_equals(x, value)


def _tma_operands(a, b, layout) -> tuple[bool, bool, int]:
    """(A K-major, B K-major, the device's SM count): what the TMA templates' kwargs read
    off IR operands (``_tma_kwargs``)."""
    num_sms = torch.cuda.get_device_properties(layout.device).multi_processor_count
    return _known_equal(a.get_stride()[1], 1), _known_equal(b.get_stride()[0], 1), num_sms


def _static(node) -> bool:
    return all(not getattr(x, "free_symbols", None) for x in (*node.get_size(), *node.get_stride()))


def tma_readable(layout, *nodes) -> bool:
    """Whether the TMA templates can read these IR operands: a GPU with TMA (sm_90 and
    later; an Ampere GPU takes the pointer template), static sizes and strides (a
    descriptor built for one shape's strides must not be reused for another's), and
    16-byte alignment (Inductor's own ``can_use_tma``)."""
    if no_tma_reason(layout.device) is not None:
        return False
    return all(_static(t) for t in nodes) and compat.can_use_tma(*nodes)


# The fused epilogue's layout conversion takes scratch that Triton sizes, not the plugin:
# keep 16 KiB of headroom below the hardware limit (128x256x64 with 3 stages, 209 KiB by
# smem_bytes, compiles and runs on the H200).
_TEMPLATE_SMEM_BUDGET = configs.SMEM_LIMIT_BYTES - 16 * 1024


# Tiles from this many elements run the fused epilogue in two halves (EPILOGUE_SUBTILE):
# on the H200 a GELU epilogue over a whole 128 x 256 tile (8 warps) needs 255 registers
# and spills (bench/epilogue_breakdown.py).
_SUBTILE_FROM = 128 * 256


# A problem whose 128 x 128 (or smaller) tiles all run in one wave, one per program, with K
# up to 4096: the persistent loop has nothing to spread its device-side descriptors over
# (each program builds its own, every launch), and the pointer template is faster with the
# same tiles. H200, under CUDA graphs, with a pointwise user (bench/epilogue_breakdown.py,
# bench/results/*-epilogue-breakdown-small.md): M x N x K = 2048 x 1024 x 1024 9.1 vs
# 10.1 us, 2048 x 1024 x 4096 27.3 vs 28.5 us. Not for one wave of 128 x 256 tiles (2048^3:
# 27.5 us, the pointer template's 128 x 128 tiles 30.3) nor for two waves or more (8192 x
# 1024 x 1024: 30.8 vs 32.9 us). Decode-sized M (the skinny branch) keeps the TMA template:
# not measured there.
_ONE_WAVE_MAX_K = 4096


def one_tile_per_program(cfg: MatmulConfig, m: int, n: int, k: int, num_sms: int) -> bool:
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    small_tiles = cfg.block_m * cfg.block_n <= 128 * 128
    programs = num_sms * cfg.programs_per_sm  # the most programs _tma_kwargs gives NUM_SMS
    return m > configs.SKINNY_MAX_M and k <= _ONE_WAVE_MAX_K and small_tiles and tiles <= programs


def tma_configs(m: int, n: int, k: int, dtype: torch.dtype, a_kmajor: bool, b_kmajor: bool, num_sms: int,
                compete: bool = False) -> list[MatmulConfig]:  # fmt: skip
    """The TMA template's configs: the eager TMA kernel's heuristic pick for the same problem
    (and its autotuning candidates when competing), without split-K; [] where the eager
    heuristic would not use the TMA kernel, or where one wave of tiles does the whole problem
    (``one_tile_per_program``); the pointer template is used there."""
    problem = configs.Problem(m, n, k, 1, dtype.itemsize, str(dtype).removeprefix("torch."), tma=True,
                              a_kmajor=a_kmajor, b_kmajor=b_kmajor, c_tma=False, num_sms=num_sms)  # fmt: skip
    first = configs.heuristic_config(problem)
    if first.kernel != "tma" or dtype == torch.float32:
        return []
    if not compete and one_tile_per_program(first, m, n, k, num_sms):
        return []
    chosen = configs.candidate_configs(problem) if compete else [first]
    out = []
    for cfg in chosen:
        # No split-K (the template has no partial-sum workspace). The store's layout
        # conversion needs about a BLOCK_M x BLOCK_N output tile of shared memory, which
        # smem_bytes counts (half of that with the subtiled epilogue).
        subtile = cfg.block_m * cfg.block_n >= _SUBTILE_FROM
        cfg = dataclasses.replace(cfg, split_k=1, epilogue_subtile=subtile, flatten=cfg.flatten or cfg.split_k > 1)
        while configs.smem_bytes(cfg, dtype.itemsize) > _TEMPLATE_SMEM_BUDGET and cfg.num_stages > 2:
            cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
        if cfg.kernel == "tma" and configs.smem_bytes(cfg, dtype.itemsize) <= _TEMPLATE_SMEM_BUDGET and cfg not in out:
            out.append(cfg)
    return out


def _kwargs(cfg: MatmulConfig) -> dict:
    """A config as template kwargs: the tile constexprs and the launch options."""
    return {
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m,
        "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
    }  # fmt: skip


def _tma_kwargs(cfg: MatmulConfig, a_kmajor: bool, b_kmajor: bool, num_sms: int, m: int, n: int,
                has_bias: bool = False) -> dict:  # fmt: skip
    # NUM_SMS (the name Inductor's persistent_mm_grid reads) is the program count: as many as
    # the eager kernel runs for the same tiles (configs.persistent_programs), a constant here
    # because the TMA templates take static shapes only.
    programs = configs.persistent_programs(-(-m // cfg.block_m) * -(-n // cfg.block_n), num_sms * cfg.programs_per_sm)
    return {**_kwargs(cfg), "NUM_SMS": programs, "FLATTEN": cfg.flatten, "A_KMAJOR": a_kmajor,
            "B_KMAJOR": b_kmajor, "EPILOGUE_SUBTILE": cfg.epilogue_subtile, "HAS_BIAS": has_bias}  # fmt: skip


def append_choices(choices: list, a, b, layout, *, m, n, k, bias=None, alpha=1, beta=1, compete=False) -> None:
    """Append the template's choices for ``alpha * (a @ b) + beta * bias``."""
    dtype = layout.dtype
    elem = dtype.itemsize
    hints = [compat.V.graph.sizevars.size_hint(x, fallback=4096) for x in (m, n, k)]
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

    # The TMA template where the GPU and the operands allow it (tma_readable).
    tma = []
    if tma_readable(layout, a, b):
        a_kmajor, b_kmajor, num_sms = _tma_operands(a, b, layout)
        tma = tma_configs(*hints, dtype, a_kmajor, b_kmajor, num_sms, compete=compete)
        # nn.Linear's bias (broadcast along M, alpha = beta = 1) goes into the kernel; the
        # inputs keep the extern choice's order (bias, a, b), which autotuning feeds to all.
        has_bias = (bias is not None and alpha == 1 and beta == 1 and _static(bias)
                    and _known_equal(bias.get_stride()[0], 0))
        for cfg in tma:
            plugin_tma_template().maybe_append_choice(
                choices, input_nodes=nodes, layout=layout,
                **_tma_kwargs(cfg, a_kmajor, b_kmajor, num_sms, *hints[:2], has_bias),
                **common, **({} if has_bias else extra),
            )  # fmt: skip
    if tma and not compete:
        return
    pointer_configs = [heuristic_config(*hints, elem)]
    if compete:
        pointer_configs += [c for c in COMPETE_CONFIGS if c not in pointer_configs]
    template = plugin_template()
    for cfg in pointer_configs:
        if fits(cfg, elem):
            template.maybe_append_choice(choices, input_nodes=nodes, layout=layout, **_kwargs(cfg), **common, **extra)
