"""The plugin's tile algorithms as Inductor ``TritonTemplate``s, so epilogues fuse into them.

A routed matmul lowered to an extern kernel is opaque: Inductor writes its output to memory
and runs the bias, activation, residual or cast in a separate kernel. Lowered to a template
instead, the scheduler inlines those pointwise epilogues into the kernel's store
(``store_output``), and Inductor's autotuner can compare the template's configs, with their
epilogue, against the extern plugin kernel and aten. One template per file:

* ``pointer.py``: the pointer kernel's algorithm (kernels/matmul.py), any strides;
* ``tma.py``: the persistent TMA kernel's (kernels/matmul_tma.py), and SwiGLU's two matmuls
  in one kernel from the same source.

Each template's Jinja source is a file beside its module (``pointer.py.jinja``,
``tma.py.jinja``), read by ``jinja_source``.

Which configs each is offered comes from ``configs/templates.py``. CUDA only: on the CPU
(Triton's interpreter) and wherever a template cannot be built, the lowering uses the
extern kernel.
"""

from __future__ import annotations

import importlib.resources

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


def jinja_source(name: str) -> str:
    """The Jinja source of template ``name``: ``tile_coords.py.jinja`` (the grouped tile order,
    a macro every template calls), then ``<name>.py.jinja``. The files sit beside this module,
    as Inductor keeps its own templates (``load_kernel_template``), and ship as package data."""
    files = importlib.resources.files(__package__)
    macros = files.joinpath("tile_coords.py.jinja").read_text()
    return macros.rstrip("\n") + "\n" + files.joinpath(f"{name}.py.jinja").read_text()


def config_kwargs(cfg) -> dict:
    """A config as template kwargs: the tile constexprs and the launch options."""
    return {
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m,
        "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
    }  # fmt: skip
