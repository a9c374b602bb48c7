"""The plugin's options, validated once: ``select``, ``compete`` and ``fuse_swiglu``, beside Inductor's own keys."""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from collections.abc import Mapping
from typing import Any

from . import plan_file
from .selection import SelectSpec, validate_select


@dataclasses.dataclass(frozen=True)
class PluginOptions:
    """Options of the plugin itself.

    select:  which eligible matmuls are routed: "auto" (default), "all", "opted_in", or a
             predicate ``select(site) -> bool`` (see ``inductor_mm_plugin.inductor.selection``).
    compete: how the plugin earns a site ("route only where faster").
             "auto" (default): on CUDA, a selected site is routed only where the plugin's kernel
             measured faster than aten's on the site's own operands (measure.py: interleaved
             rounds, under CUDA graphs when the compile uses them; cached on disk), and runs
             that extern kernel, its epilogue in Inductor's pointwise kernel as stock; every
             other site, and any with symbolic sizes, stays on stock. On the CPU (Triton's
             interpreter, for testing) selected sites are routed.
             True: every selected site is routed and Inductor's autotuner chooses among the
             plugin's templates (with the fused epilogue), its kernel and aten.
             False: every selected site runs the plugin, a site with a pointwise epilogue
             in its template with the epilogue fused.
    fuse_swiglu: whether ``silu(x @ w_gate) * (x @ w_up)`` from two routed matmuls whose
             results nothing else reads becomes one ``inductor_mm_plugin::mm_swiglu``, both
             matmuls in one kernel that writes only the product. "auto" (default): where
             the fused kernel runs (CUDA, fp16/bf16, static shapes, TMA-readable operands);
             under compete="auto" only where it also timed faster than stock's form (cuBLAS's
             two matmuls, then one pointwise kernel for the product; measure.py), and that
             kernel runs; under a plan, where the plan fused the pair. True: wherever the
             pattern appears. False: never.
    plan:    a routing plan file written by ``compare(..., write_plan=FILE)`` (plan_file.py):
             selected sites run the plugin's kernel exactly where the plan says it won in
             the measured model, nothing is measured at compile time; read and checked here.
    """

    select: SelectSpec = "auto"
    compete: bool | str = "auto"
    fuse_swiglu: bool | str = "auto"
    plan: Any = None  # a path, read into a plan_file.Plan

    def __post_init__(self):
        validate_select(self.select)
        if not isinstance(self.compete, bool) and self.compete != "auto":
            raise TypeError(f"inductor_mm_plugin: compete must be True, False or 'auto', got {self.compete!r}")
        if not isinstance(self.fuse_swiglu, bool) and self.fuse_swiglu != "auto":
            raise TypeError(f"inductor_mm_plugin: fuse_swiglu must be True, False or 'auto', got {self.fuse_swiglu!r}")
        if self.plan is not None and not isinstance(self.plan, plan_file.Plan):
            if not isinstance(self.plan, (str, os.PathLike)):
                raise TypeError(f"inductor_mm_plugin: plan must be the path of a routing plan, got {self.plan!r}")
            object.__setattr__(self, "plan", plan_file.load(self.plan))


PLUGIN_KEYS = tuple(f.name for f in dataclasses.fields(PluginOptions))


def split_options(
    options: dict[str, Any] | None, inductor_types: Mapping[str, Any]
) -> tuple[PluginOptions, dict[str, Any]]:
    """Separate plugin keys from Inductor config keys (``inductor_types``: each key's type,
    ``compat.inductor_config_types()``); an unknown key, or an Inductor value of the wrong
    type, is an error."""
    options = dict(options or {})
    plugin = {k: options.pop(k) for k in PLUGIN_KEYS if k in options}
    unknown = sorted(k for k in options if k not in inductor_types)
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, [*PLUGIN_KEYS, *inductor_types], n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"inductor_mm_plugin: unknown option {key!r}.{hint} Valid keys: the plugin's "
            f"{', '.join(map(repr, PLUGIN_KEYS))}, and any torch._inductor.config key "
            "(e.g. 'max_autotune', 'triton.cudagraphs'; see torch._inductor.list_options())."
        )
    for key, value in options.items():
        check_inductor_option(key, value, inductor_types[key])
    return PluginOptions(**plugin), options


def check_inductor_option(key: str, value: Any, expected: Any) -> None:
    """Reject what the stock backend rejects: a value that is not an instance of the key's
    type (torch.compile's ``apply_options``, an isinstance check; so a bool passes for an
    int key, an int does not for a float key). Like torch, generic annotations (``int |
    None``, ``list[str]``, ``Literal``) are not checked. Unlike torch, neither are a string
    annotation (``cudagraph_policy``'s forward reference, on which torch's isinstance
    itself raises) nor NoneType, the type of a key whose default is None without an
    annotation, which would reject every value but None."""
    if typing.get_origin(expected) is not None or not isinstance(expected, type) or expected is type(None):
        return
    if not isinstance(value, expected):
        raise TypeError(
            f"inductor_mm_plugin: option {key!r} must be {expected.__name__}, got {value!r} "
            f"({type(value).__name__}); it sets torch._inductor.config.{key}"
        )
