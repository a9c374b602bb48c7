"""What the routing pass decided for a site, handed to the lowering on the plugin node.

The pass (routing.py) puts a ``RouteDecision`` in the node's metadata; the lowering
(lowering.py) reads it back for the node Inductor is lowering. Node metadata is not part of
Inductor's FX graph cache key; the pass's ``uuid()`` covers everything a decision depends on.
"""

from __future__ import annotations

import dataclasses
import enum

import torch

from . import compat

META_KEY = "inductor_mm_plugin"


class Compete(enum.Enum):
    """What a routed site lets Inductor's autotuner choose from."""

    ALL = "all"  # the plugin's template configs, its extern kernel and aten
    KERNELS = "kernels"  # the plugin's extern kernel and aten


@dataclasses.dataclass(frozen=True)
class RouteDecision:
    site: str  # the site as the logs print it
    compete: Compete | None = None  # None: the plugin runs, no autotuning against aten
    epilogue: bool = False  # a pointwise user Inductor can fuse into the plugin's template
    timed: bool = False  # routed because its extern kernel timed faster: that form runs, no template


def record(node: torch.fx.Node, decision: RouteDecision) -> None:
    node.meta[META_KEY] = decision


def current() -> RouteDecision:
    """The decision for the node Inductor is lowering (a plain one for an op the pass did not
    place, e.g. called directly in the model)."""
    node = compat.current_fx_node()
    decision = node.meta.get(META_KEY) if node is not None else None
    return decision if isinstance(decision, RouteDecision) else RouteDecision(site="")
