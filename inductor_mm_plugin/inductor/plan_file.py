"""Routing plans: per site, whether the plugin won where it was measured, in the user's model.

``compare(..., write_plan=FILE)`` (CLI: ``--write-plan FILE``) writes one; the backend obeys
one with ``options={"plan": FILE}``: a selected site the plan says the plugin won runs the
plugin's kernel, every other site stays on stock, and nothing is measured at compile time. A
SwiGLU pair that won as one fused kernel (``fuse_swiglu="auto"``) is listed as its two sites,
each marked ``"fused": "swiglu"``, and runs fused again where both are marked; a Linear that
won fused with its activation (``mm_activation``) is marked with the activation's name
(``"fused": "gelu"``) and runs fused again where its graph computes that activation.
A plan belongs to one model and one setup: it records the plugin, torch and triton versions
and the GPU, and a site the plan does not know means it was written for another model (or
other shapes), which is refused with a clear error rather than guessed at.
"""

from __future__ import annotations

import dataclasses
import json
import os

from ..ops.activation import ACTIVATIONS
from .selection import not_routed

FORMAT = "inductor_mm_plugin routing plan"
FORMAT_VERSION = 2  # 2: a site may be marked "fused": "swiglu" (or an activation, below)
FUSED = ("swiglu", *ACTIVATIONS)  # the pair; the activations a Linear fuses with


class PlanError(ValueError):
    """A plan that cannot be used here: unreadable, another version or GPU, another model."""


def site_key(site) -> str:
    """How a plan names a site: phase, module path, op, shapes, strides and dtype."""
    shapes = " ".join("x".join(map(str, s)) or "[]" for s in site.shapes)
    strides = " ".join(",".join(map(str, s)) for s in site.strides)
    return f"{site.phase}|{site.module or '<root>'}|{site.op}|{shapes}|{strides}|{site.dtypes[-1]}"


@dataclasses.dataclass(frozen=True)
class Plan:
    path: str
    setup: dict  # plugin, torch, triton, gpu
    route: dict  # site key -> whether the plugin runs there
    model: str = ""  # the class of the model it was written from
    fused: dict = dataclasses.field(default_factory=dict)  # site key -> what it won fused as (FUSED)

    def decide(self, site) -> tuple[bool, str]:
        """(routed, reason) for a selected, eligible site that is not fused."""
        key = self._key(site)
        if key in self.fused:  # what won there was the fused pair, not this site's own kernel
            return False, not_routed("plan_unfused", plan=self.path)
        if self.route[key]:
            return True, ""
        return False, not_routed("plan", plan=self.path)

    def fused_swiglu(self, site) -> bool:
        """Whether ``site`` won as one of a fused SwiGLU pair's two matmuls."""
        return self.fused.get(self._key(site)) == "swiglu"

    def fused_activation(self, site) -> str | None:
        """The activation ``site`` won fused with (``mm_activation``), or None."""
        kind = self.fused.get(self._key(site))
        return kind if kind != "swiglu" else None

    def _key(self, site) -> str:
        key = site_key(site)
        if key not in self.route:
            raise PlanError(f"inductor_mm_plugin: the routing plan {self.path} was written for another model or other "
                            f"shapes: it has no site {key!r}. Write a new plan for this model "
                            "(compare(..., write_plan=...) or the CLI's --write-plan).")  # fmt: skip
        return key


def setup() -> dict:
    """What a plan is valid for: the versions, and the GPU where there is one."""
    import torch
    import triton

    from ..version import __version__

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"plugin": __version__, "torch": torch.__version__, "triton": triton.__version__, "gpu": gpu}


def write(path, routes: dict[str, bool], model: str = "", fused: dict[str, str] | None = None) -> None:
    """``routes``: site key -> routed; ``fused``: site key -> "swiglu" for a fused pair's sites, or
    the activation a site won fused with."""
    fused = fused or {}
    sites = [{"site": k, "route": bool(v), **({"fused": fused[k]} if k in fused else {})}
             for k, v in sorted(routes.items())]  # fmt: skip
    text = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "model": model, "setup": setup(),
                       "sites": sites}, indent=1)  # fmt: skip
    with open(path, "w") as f:
        f.write(text + "\n")


def load(path) -> Plan:
    """Read and check a plan; PlanError says what is wrong. Every field is checked with its
    type before anything is read from it (a "route" of "false" is refused, not taken as true)."""
    path = os.fspath(path)
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise PlanError(f"inductor_mm_plugin: cannot read the routing plan {path}: {e.strerror}") from e
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deep for json
        why = str(e) if isinstance(e, ValueError) else "nested too deep"
        raise PlanError(f"inductor_mm_plugin: the routing plan {path} is not JSON: {why}") from None
    # type(...) is int: in Python, JSON's true equals 1.
    if (not isinstance(data, dict) or data.get("format") != FORMAT or type(data.get("version")) is not int
            or data["version"] != FORMAT_VERSION):  # fmt: skip
        raise PlanError(f"inductor_mm_plugin: {path} is not a routing plan of format version {FORMAT_VERSION}")

    def malformed(what: str) -> PlanError:
        return PlanError(f"inductor_mm_plugin: the routing plan {path} is malformed: {what}")

    if not isinstance(data.get("model", ""), str):
        raise malformed("'model' must be a string")
    written = data.get("setup")
    if not isinstance(written, dict):
        raise malformed(f"'setup' must be an object, got {type(written).__name__}")
    here = setup()
    for key in here:
        if key in written and not isinstance(written[key], str):
            raise malformed(f"'setup' field {key!r} must be a string, got {type(written[key]).__name__}")
    differ = [f"{k} {written.get(k)!r} (here {here[k]!r})" for k in here if written.get(k) != here[k]]
    if differ:
        raise PlanError(f"inductor_mm_plugin: the routing plan {path} was measured with another setup: "
                        f"{', '.join(differ)}. Measure it again here.")  # fmt: skip
    sites = data.get("sites")
    if not isinstance(sites, list):
        raise malformed(f"'sites' must be a list (the plan has a malformed site list), got {type(sites).__name__}")
    route, fused = {}, {}
    for i, entry in enumerate(sites):
        if not isinstance(entry, dict) or not {"site", "route"} <= set(entry) <= {"site", "route", "fused"}:
            raise malformed(f"site {i}: expected an object with 'site', 'route' and optionally 'fused' "
                            "(a malformed site list)")  # fmt: skip
        key, routed = entry["site"], entry["route"]
        if not isinstance(key, str):
            raise malformed(f"site {i}: 'site' must be a string, got {type(key).__name__}")
        if type(routed) is not bool:
            shown = repr(routed) if isinstance(routed, (str, int, float)) else type(routed).__name__
            raise malformed(f"site {i}: 'route' must be true or false, got {shown[:80]}")
        if key in route:
            raise malformed(f"site {i}: {key[:200]!r} is listed twice")
        if "fused" in entry:
            kind = entry["fused"]
            if type(kind) is not str or kind not in FUSED:
                shown = repr(kind) if isinstance(kind, (str, int, float)) else type(kind).__name__
                raise malformed(f"site {i}: 'fused' must be one of {list(FUSED)}, got {shown[:80]}")
            if not routed:
                raise malformed(f"site {i}: a site marked fused must have 'route' true")
            fused[key] = kind
        route[key] = routed
    return Plan(path, written, route, data.get("model", ""), fused)  # model: a str, checked above
