"""The plugin's tile algorithms as Inductor ``TritonTemplate``s, so epilogues fuse into them.

A routed matmul lowered to an extern kernel is opaque: Inductor writes its output to memory
and runs the bias, activation, residual or cast in a separate kernel. Lowered to a template
instead, the scheduler inlines those pointwise epilogues into the kernel's store
(``store_output``), and Inductor's autotuner can compare the template's configs, with their
epilogue, against the extern plugin kernel and aten. One template per file:

* ``pointer.py``: the pointer kernel's algorithm (kernels/matmul.py), any strides;
* ``tma.py``: the persistent TMA kernel's (kernels/matmul_tma.py), and SwiGLU's two matmuls
  in one kernel from the same source.

Which configs each is offered comes from ``configs/templates.py``. CUDA only: on the CPU
(Triton's interpreter) and wherever a template cannot be built, the lowering uses the
extern kernel.
"""

from __future__ import annotations

import torch

from .. import compat

_templates: dict[str, object] = {}


def template(name: str, grid, source: str):
    """A TritonTemplate, created once per process (Inductor asserts on duplicate names)."""
    if name not in _templates:
        existing = compat.TritonTemplate.all_templates.get(name)
        _templates[name] = existing or compat.TritonTemplate(name=name, grid=grid, source=source)
    return _templates[name]


def usable(layout) -> bool:
    """The templates need a CUDA device, where Inductor generates Triton."""
    device = layout.device
    return device is not None and device.type == "cuda"


def known_equal(x, value) -> bool:
    return compat.V.graph.sizevars.statically_known_equals(x, value)


def static(node) -> bool:
    return all(not getattr(x, "free_symbols", None) for x in (*node.get_size(), *node.get_stride()))


def num_sms(layout) -> int:
    """The SM count of the layout's device, from the runtime (one source for eager and templates)."""
    from ...runtime.device import num_sms as device_num_sms

    return device_num_sms(torch.device(layout.device))


# The grouped tile order of the eager kernels' ``_tile_coords`` (kernels/matmul.py), written
# with integer divisions: template source cannot call a JIT function, and the eager kernels'
# division-free ``_divmod`` is not measured in the templates. tests/test_templates.py checks
# the two orders agree on every tile. Each template calls it as ``{{tile_coords("var")}}``.
TILE_COORDS = r"""
{%- macro tile_coords(tile) -%}
group_id = {{tile}} // tiles_per_group
first_m = group_id * GROUP_M
group_size_m = min(num_pid_m - first_m, GROUP_M)
pid_m = first_m + (({{tile}} % tiles_per_group) % group_size_m)
pid_n = ({{tile}} % tiles_per_group) // group_size_m
{%- endmacro %}"""


def prologue(what: str, def_kernel: str = 'def_kernel("A", "B")') -> str:
    """The opening both templates share: the kernel's signature and the problem's sizes."""
    return TILE_COORDS + f"""
{{{{{def_kernel}}}}}
    # inductor_mm_plugin template: {what}
    M = {{{{size("A", 0)}}}}
    N = {{{{size("B", 1)}}}}
    K = {{{{size("A", 1)}}}}
    if M * N == 0:
        return"""


def config_kwargs(cfg) -> dict:
    """A config as template kwargs: the tile constexprs and the launch options."""
    return {
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m,
        "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
    }  # fmt: skip
