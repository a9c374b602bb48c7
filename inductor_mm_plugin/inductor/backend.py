"""The ``inductor_mm_plugin`` torch.compile backend, and the same routing for the stock backend.

    torch.compile(model, backend="inductor_mm_plugin")                       # by name
    torch.compile(model, backend="inductor_mm_plugin", options={"select": "opted_in", "compete": True})
    torch.compile(model, backend="inductor_mm_plugin", mode="max-autotune")
    torch.compile(model, options=inductor_mm_plugin.inductor_options(select="all"))   # stock backend

The name is found through the ``torch_dynamo_backends`` entry point (pyproject.toml), which
torch registers itself on the first lookup of an unknown backend name; the package never
registers it at import (torch asserts on duplicate names).

Options reach Inductor as ``compile_fx(..., config_patches=...)``: patches given that way
also apply to the lazily compiled backward graph, which a ``config.patch`` context around
the call would miss. Nothing changes Inductor's global config.
"""

from __future__ import annotations

import logging
from typing import Any

from ..runtime import wait_all
from . import compat, measure, predict
from .lowering import register_lowerings
from .options import PLUGIN_KEYS, PluginOptions, split_options
from .records import reporting_cached_decisions
from .routing import RoutePass
from .selection import RootInfo, resolved_mode, root_from_dynamo

log = logging.getLogger(__name__)


def _route_pass(plugin: PluginOptions, inductor: dict[str, Any], root: RootInfo | None, label) -> RoutePass:
    # Chain with a pass the user already placed in the slot: in the options, else globally.
    existing = inductor.get(compat.PASS_SLOT, getattr(compat.inductor_config, compat.PASS_SLOT))
    return RoutePass(plugin, root=root, chained=existing, label=label)


def config_patches(
    options: dict[str, Any] | None = None, mode: str | None = None, root: RootInfo | None = None, label=None
) -> dict[str, Any]:
    """Inductor config patches that route matmuls as ``options``/``mode`` ask."""
    if options and mode:
        raise ValueError("inductor_mm_plugin: pass either mode or options, not both (as torch.compile)")
    plugin, inductor = parse_options(options)
    if mode:
        inductor = dict(compat.list_mode_options(mode))
    return patches_for(plugin, inductor, root, label)


def parse_options(options: dict[str, Any] | None) -> tuple[PluginOptions, dict[str, Any]]:
    """``options`` validated once, as the typed pair the rest of the package passes down."""
    return split_options(options, compat.inductor_config_types())


def patches_for(plugin: PluginOptions, inductor: dict[str, Any], root: RootInfo | None = None, label=None) -> dict:
    """The config patches of already parsed options (``parse_options``)."""
    register_lowerings()
    return {**inductor, compat.PASS_SLOT: _route_pass(plugin, inductor, root, label)}


def _inner_compile(*args, **kwargs):
    # Inductor's compile of one graph (a forward, or a backward compiled lazily at its first
    # call), where a graph loaded from the FX graph cache reports its routing decisions.
    # Under max_autotune the plugin's choices are timed in the scheduler, after the lowering's
    # select_algorithm returned, and read the matmul precision there too (pytorch/pytorch#196728).
    with reporting_cached_decisions(), compat.readable_matmul_precision():
        return compat.compile_fx_inner(*args, **kwargs)


def backend(gm, example_inputs, *, mode: str | None = None, options: dict[str, Any] | None = None):
    """The ``inductor_mm_plugin`` backend: stock Inductor plus the routing pass. Graphs
    loaded from Inductor's caches report the routing decisions they were compiled with
    (``records.reporting_cached_decisions``)."""
    root = root_from_dynamo() or RootInfo()
    patches = config_patches(options, mode, root=root)
    compile_predicted(gm, patches[compat.PASS_SLOT].options, root, patches)
    try:
        with reporting_cached_decisions():  # AOTAutograd's cache loads forward and backward here
            return compat.compile_fx(gm, example_inputs, inner_compile=_inner_compile, config_patches=patches)
    finally:
        wait_all()  # no kernel still compiling once the caller has the compiled graph


def compile_predicted(gm, plugin: PluginOptions, root: RootInfo, patches: dict) -> None:
    """Start compiling the kernels of the sites the graph will likely route, before AOTAutograd
    traces it (``predict.py``), where the routing pass would compile them itself: measured
    routing (``compete="auto"``, no plan) of every site (``select`` "all", or "auto" without
    opted-in modules); CUDA sites only (``measure.compile_predicted``)."""
    if plugin.compete != "auto" or plugin.plan is not None or resolved_mode(plugin.select, root) != "all":
        return
    graphs = bool(patches.get("triton.cudagraphs", compat.inductor_config.triton.cudagraphs))
    try:
        measure.compile_predicted(predict.predicted_sites(gm, graphs))
    except Exception:  # noqa: BLE001 (compiling ahead only saves time; the compile goes on without it)
        log.debug("predicting the graph's sites failed", exc_info=True)


def inductor_options(*, select="auto", compete: bool | str = "auto", **inductor_config: Any) -> dict[str, Any]:
    """``options=`` for the stock backend that routes matmuls like the plugin backend.

        torch.compile(model, options=inductor_mm_plugin.inductor_options(select="all"))

    Extra keyword arguments are Inductor config keys (``max_autotune=True``, ...).
    """
    return config_patches({"select": select, "compete": compete, **inductor_config})


__all__ = ["PLUGIN_KEYS", "backend", "config_patches", "inductor_options", "parse_options", "patches_for"]
