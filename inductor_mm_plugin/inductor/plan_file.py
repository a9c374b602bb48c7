"""Routing plans: per site, whether the plugin won where it was measured, in the user's model.

``compare(..., write_plan=FILE)`` (CLI: ``--write-plan FILE``) writes one; the backend obeys
one with ``options={"plan": FILE}``: a selected site the plan says the plugin won runs the
plugin's kernel, every other site stays on stock, and nothing is measured at compile time.
A plan belongs to one model and one setup: it records the plugin, torch and triton versions
and the GPU, and a site the plan does not know means it was written for another model (or
other shapes), which is refused with a clear error rather than guessed at.
"""

from __future__ import annotations

import dataclasses
import json
import os

from .selection import not_routed

FORMAT = "inductor_mm_plugin routing plan"
FORMAT_VERSION = 1


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

    def decide(self, site) -> tuple[bool, str]:
        """(routed, reason) for a selected, eligible site."""
        key = site_key(site)
        if key not in self.route:
            raise PlanError(f"inductor_mm_plugin: the routing plan {self.path} was written for another model or other "
                            f"shapes: it has no site {key!r}. Write a new plan for this model "
                            "(compare(..., write_plan=...) or the CLI's --write-plan).")  # fmt: skip
        if self.route[key]:
            return True, ""
        return False, not_routed("plan", plan=self.path)


def setup() -> dict:
    """What a plan is valid for: the versions, and the GPU where there is one."""
    import torch
    import triton

    from ..version import __version__

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"plugin": __version__, "torch": torch.__version__, "triton": triton.__version__, "gpu": gpu}


def write(path, routes: dict[str, bool], model: str = "") -> None:
    text = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "model": model, "setup": setup(),
                       "sites": [{"site": k, "route": bool(v)} for k, v in sorted(routes.items())]}, indent=1)  # fmt: skip
    with open(path, "w") as f:
        f.write(text + "\n")


def load(path) -> Plan:
    """Read and check a plan; PlanError says what is wrong."""
    path = os.fspath(path)
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise PlanError(f"inductor_mm_plugin: cannot read the routing plan {path}: {e.strerror}") from e
    except ValueError as e:
        raise PlanError(f"inductor_mm_plugin: the routing plan {path} is not JSON: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
        raise PlanError(f"inductor_mm_plugin: {path} is not a routing plan of format version {FORMAT_VERSION}")
    here = setup()
    written = data.get("setup") or {}
    differ = [f"{k} {written.get(k)!r} (here {here[k]!r})" for k in here if written.get(k) != here[k]]
    if differ:
        raise PlanError(f"inductor_mm_plugin: the routing plan {path} was measured with another setup: "
                        f"{', '.join(differ)}. Measure it again here.")  # fmt: skip
    try:
        route = {str(s["site"]): bool(s["route"]) for s in data["sites"]}
    except (KeyError, TypeError) as e:
        raise PlanError(f"inductor_mm_plugin: the routing plan {path} has a malformed site list") from e
    model = data.get("model", "")
    return Plan(path, written, route, model if isinstance(model, str) else "")
