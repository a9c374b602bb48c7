"""What ``compare`` returns: the per-model, per-graph and per-site results, as text, markdown,
JSON and a plot."""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics

class CompareError(RuntimeError):
    """A comparison that cannot be made (no matmul, a model that does not compile, ...)."""


# ------------------------------------------------------------------------ results


@dataclasses.dataclass
class Error:
    """An output's error against the reference (comparison._error)."""

    max_abs: float  # over the elements finite in both
    max_rel: float  # max |out - ref| / max |ref|, the reference's finite elements
    nonfinite: int = 0  # elements whose NaN/+inf/-inf pattern differs from the reference's

    def __str__(self) -> str:
        differ = f", {self.nonfinite} NaN/inf differ" if self.nonfinite else ""
        return f"{self.max_abs:.2e} ({self.max_rel:.1e} rel{differ})"


@dataclasses.dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float


@dataclasses.dataclass
class GraphResult:
    index: int
    sites: int
    routed: int
    stock_err: Error | None
    plugin_err: Error | None
    tolerance: float
    ok: bool
    stock: Timing | None = None
    plugin: Timing | None = None
    ratios: list[float] = dataclasses.field(default_factory=list)  # stock / plugin per round

    @property
    def speedup(self) -> float | None:
        """The median of the per-round ratios stock / plugin (interleaved rounds)."""
        if self.ratios:
            return statistics.median(self.ratios)
        return self.stock.median_ms / self.plugin.median_ms if self.stock and self.plugin else None


@dataclasses.dataclass
class SiteResult:
    graph: int | None
    module: str
    op: str
    phase: str
    shapes: list
    dtype: str
    strides: list
    routed: bool
    reason: str
    plugin_ms: float | None = None
    compete: str | None = None  # routed, but Inductor's autotuner may have kept aten (SiteRecord.compete)
    fused: str | None = None  # "swiglu": one of the two matmuls of an inductor_mm_plugin::mm_swiglu; an
    # activation's name ("gelu"): the matmul of an inductor_mm_plugin::mm_activation
    aten_ms: float | None = None
    # What plugin_ms and aten_ms are: "profile", the site's kernels' GPU time inside each arm's
    # model step (profile.py); "kernel", the site's matmul timed alone on its exact layout
    # (plugin kernel against aten, GPU time); "swiglu pair", the fused pair the site belongs
    # to (_time_swiglu_pair); None: not timed.
    timed: str | None = None
    offsets: list = dataclasses.field(default_factory=list)  # storage offset of each operand

    @property
    def speedup(self) -> float | None:
        return self.aten_ms / self.plugin_ms if self.plugin_ms and self.aten_ms else None


@dataclasses.dataclass
class Report:
    versions: dict
    device: str
    timing_meaningful: bool
    timing_note: str
    reference: str
    graphs: list[GraphResult]
    sites: list[SiteResult]
    model: dict  # stock_err, plugin_err, tolerance, ok, grads (training step)
    options: dict
    date: str = dataclasses.field(default_factory=lambda: datetime.date.today().isoformat())

    @property
    def ok(self) -> bool:
        return self.model["ok"] and all(g.ok for g in self.graphs)

    # -- text

    def site_table(self) -> str:
        """The per-site table: deterministic for a given model and options (no times)."""
        rows = [("graph", "phase", "module", "op", "shapes", "dtype", "layout", "routed", "reason")]
        for s in self.sites:
            rows.append((
                "-" if s.graph is None else str(s.graph), s.phase, s.module or "<root>", s.op,
                " ".join("x".join(map(str, shape)) or "[]" for shape in s.shapes), s.dtype,
                " ".join(_layout(st) for st in s.strides[-2:]), _routed(s), s.reason,
            ))  # fmt: skip
        return _table(rows)

    def __str__(self) -> str:
        lines = [
            f"inductor_mm_plugin {self.versions['plugin']} A/B on {self.device} "
            f"(torch {self.versions['torch']}, triton {self.versions['triton']})",
            f"reference: {self.reference}",
            f"verdict: {'PASS' if self.ok else 'FAIL'}",
            "",
            "model output: stock {}  plugin {}  tolerance {:.1e}  {}".format(
                self.model["stock_err"], self.model["plugin_err"], self.model["tolerance"],
                "ok" if self.model["ok"] else "FAIL"),
        ]  # fmt: skip
        for name, g in self.model.get("grads", {}).items():
            lines.append(f"  grad {name}: stock {g['stock_err']}  plugin {g['plugin_err']}  {'ok' if g['ok'] else 'FAIL'}")
        if self.model.get("timing"):
            lines += ["", f"model step: {_model_timing(self.model['timing'])}"]
        if self.model.get("profile"):
            lines += [f"in the profile: {_profile(self.model['profile'])}"]
        if self.model.get("plan_check"):
            lines += [f"plan check: {self.model['plan_check']}"]
        rows = [("graph", "sites", "routed", "stock err", "plugin err", "stock ms", "plugin ms", "speedup", "numerics")]
        for g in self.graphs:
            rows.append((
                str(g.index), str(g.sites), str(g.routed), str(g.stock_err), str(g.plugin_err),
                _ms(g.stock), _ms(g.plugin), _x(g.speedup), "ok" if g.ok else "FAIL",
            ))  # fmt: skip
        lines += ["", "graphs:", _table(rows), "", "sites:", self.site_table()]
        timed = [s for s in self.sites if s.speedup is not None]
        if timed:
            rows = [("graph", "phase", "module", "op", "shapes", "plugin ms", "aten ms", "speedup", "timed")]
            for s in timed:
                rows.append((str(s.graph), s.phase, s.module or "<root>", s.op,
                             " ".join("x".join(map(str, x)) for x in s.shapes),
                             f"{s.plugin_ms:.4f}", f"{s.aten_ms:.4f}", _x(s.speedup), s.timed or "-"))  # fmt: skip
            lines += ["", "routed sites, plugin against aten, GPU time per call (timed: \"profile\", in each arm's "
                      "model step; \"kernel\", alone on the site's layout):", _table(rows)]
            lines += [line for note in _notes(timed) for line in ("", f"note: {note}")]
        if self.timing_note:
            lines += ["", f"note: {self.timing_note}"]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        out = [
            f"### inductor_mm_plugin A/B — {self.device}, {self.date}",
            "",
            f"plugin {self.versions['plugin']}, torch {self.versions['torch']}, triton {self.versions['triton']}; "
            f"options `{self.options}`; reference: {self.reference}. Verdict: **{'PASS' if self.ok else 'FAIL'}**.",
            "",
            f"Model output error: stock {self.model['stock_err']}, plugin {self.model['plugin_err']} "
            f"(tolerance {self.model['tolerance']:.1e}).",
            *([""] + [f"Model step: {_model_timing(self.model['timing'])}."] if self.model.get("timing") else []),
            *([""] + [f"In the profile: {_profile(self.model['profile'])}."] if self.model.get("profile") else []),
            *([""] + [f"Plan check: {self.model['plan_check']}."] if self.model.get("plan_check") else []),
            "",
            "| graph | sites | routed | stock err | plugin err | stock ms | plugin ms | speedup |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for g in self.graphs:
            out.append(f"| {g.index} | {g.sites} | {g.routed} | {g.stock_err} | {g.plugin_err} | {_ms(g.stock)} | "
                       f"{_ms(g.plugin)} | {_x(g.speedup)} |")  # fmt: skip
        out += ["", "| graph | phase | module | op | shapes | dtype | routed | reason | plugin ms | aten ms | speedup |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for s in self.sites:
            shapes = " ".join("x".join(map(str, x)) for x in s.shapes)
            out.append(f"| {s.graph} | {s.phase} | {s.module or '&lt;root&gt;'} | {s.op} | {shapes} | {s.dtype} | "
                       f"{_routed(s)} | {s.reason} | {_f(s.plugin_ms)} | {_f(s.aten_ms)} | "
                       f"{_x(s.speedup)} |")  # fmt: skip
        out += [line for note in _notes(self.sites) for line in ("", f"_{note}_")]
        if self.timing_note:
            out += ["", f"_{self.timing_note}_"]
        return "\n".join(out) + "\n"

    # -- machine-readable

    def to_dict(self) -> dict:
        def err(e):
            return dataclasses.asdict(e) if e else None

        graphs = [{
            "index": g.index, "sites": g.sites, "routed": g.routed, "ok": g.ok, "tolerance": g.tolerance,
            "stock_err": err(g.stock_err), "plugin_err": err(g.plugin_err),
            "stock_ms": g.stock.median_ms if g.stock else None, "plugin_ms": g.plugin.median_ms if g.plugin else None,
            "stock_spread_ms": [g.stock.p20_ms, g.stock.p80_ms] if g.stock else None,
            "plugin_spread_ms": [g.plugin.p20_ms, g.plugin.p80_ms] if g.plugin else None,
            "speedup": g.speedup,
        } for g in self.graphs]  # fmt: skip
        sites = [{**dataclasses.asdict(s), "speedup": s.speedup} for s in self.sites]
        model = {k: (err(v) if isinstance(v, Error) else v) for k, v in self.model.items() if k != "grads"}
        model["grads"] = {n: {k: err(v) if isinstance(v, Error) else v for k, v in g.items()}
                          for n, g in self.model.get("grads", {}).items()}  # fmt: skip
        return {
            "versions": self.versions, "device": self.device, "timing_meaningful": self.timing_meaningful,
            "timing_note": self.timing_note, "reference": self.reference, "options": self.options, "date": self.date,
            "ok": self.ok, "model": model, "graphs": graphs, "sites": sites,
        }  # fmt: skip

    def to_json(self, path=None) -> str:
        text = json.dumps(self.to_dict(), indent=1, default=str)
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    def plot(self, path) -> None:
        """Bar charts of the speedup per graph and per routed site (needs matplotlib)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise CompareError("report.plot needs matplotlib: pip install matplotlib") from e
        sites = [s for s in self.sites if s.speedup is not None]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 3]})
        for ax, labels, values, title in (
            (axes[0], [f"graph {g.index}" for g in self.graphs], [g.speedup or 0 for g in self.graphs], "per graph"),
            (axes[1], [f"{s.graph}:{s.phase[0]}:{s.module or 'root'}:{s.op}" for s in sites],
             [s.speedup for s in sites], "per routed site (plugin vs aten)"),
        ):  # fmt: skip
            ax.bar(range(len(values)), values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(values)), labels, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel("speedup (stock time / plugin time)")
            ax.set_title(title)
        note = "" if self.timing_meaningful else " — CPU interpreter: times not meaningful"
        fig.suptitle(f"inductor_mm_plugin A/B on {self.device}{note}")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


# What a fused site's times measure: the pair it runs as (normally), or, where that pair did
# not fuse when compiled alone, what the site would run by itself.
_PAIR_NOTE = ("\"yes, SwiGLU\" sites: each row times the pair it belongs to, silu(x @ w_gate) * (x @ w_up) "
              "compiled alone on its shapes: the plugin's fused kernel (inductor_mm_plugin::mm_swiglu) against "
              "stock Inductor's two matmuls and its pointwise kernel; both rows of a pair show the same times")
_FUSED_NOTE = ("\"yes, SwiGLU\" sites marked *: their times are the plugin's plain matmul kernel on each site's "
               "shapes (the pair did not fuse when compiled alone); in the compiled graph the pair runs as one "
               "fused kernel (inductor_mm_plugin::mm_swiglu), timed only as part of the graph")


_ACTIVATION_NOTE = ("\"yes, fused with ...\" sites: each row times the site's matmul and activation as one kernel "
                    "(inductor_mm_plugin::mm_activation) against stock's cuBLAS matmul and Inductor's pointwise pass "
                    "for the activation, on the site's operands (the routing pass's measurement)")


def _notes(sites) -> list[str]:
    """The notes a report's timed fused sites need."""
    timed = [s for s in sites if s.fused and s.speedup is not None]
    pairs = [s for s in timed if s.fused == "swiglu"]
    return ([_PAIR_NOTE] if any(s.timed == "swiglu pair" for s in pairs) else []) + (
        [_FUSED_NOTE] if any(s.timed != "swiglu pair" for s in pairs) else []) + (
        [_ACTIVATION_NOTE] if len(pairs) < len(timed) else [])


def _model_timing(t: dict) -> str:
    """The model-level A/B in words: times, the median ratio, its spread, and the verdict."""
    how = "under CUDA graphs" if t["cudagraphs"] else "without CUDA graphs"
    text = (f"stock {t['stock_ms']:.4f} ms, plugin {t['plugin_ms']:.4f} ms: {t['speedup']:.3f}x "
            f"[{t['spread'][0]:.3f}-{t['spread'][1]:.3f}] over {t['rounds']} interleaved rounds {how}: "
            f"{'plugin ' + t['verdict'] if t['verdict'] in ('faster', 'slower') else t['verdict']}")  # fmt: skip
    return text + (f" ({t['note']})" if t.get("note") else "")


def _profile(p: dict) -> str:
    """The profiles' per-step kernel times in words, and why they disagree with the step."""
    text = (f"the routed sites' kernels {p['routed_plugin_us']:.1f} us per step against stock's "
            f"{p['routed_stock_us']:.1f} us for the same calls; all kernels {p['plugin_kernels_us']:.1f} "
            f"against {p['stock_kernels_us']:.1f} us")  # fmt: skip
    return text + (f" ({p['why']})" if p.get("why") else "")


def _routed(s: SiteResult) -> str:
    """"yes", "no", "yes, competes": routed, then timed against aten by Inductor's
    autotuner, which keeps the faster (the per-site times below say which that is), or
    "yes, SwiGLU": fused with the other matmul of a SwiGLU product (swiglu_pattern.swiglu_pairs),
    or "yes, fused with gelu": with the activation its result feeds (activation_pattern.py)."""
    if not s.routed:
        return "no"
    if s.fused and s.fused != "swiglu":
        return f"yes, fused with {s.fused}"
    if s.fused == "swiglu":
        star = "*" if s.timed == "kernel" else ""
        return "yes, SwiGLU" + star + (", competes" if s.compete else "")
    return "yes, competes" if s.compete else "yes"


def _layout(stride) -> str:
    if len(stride) < 2:
        return "vec"
    if stride[-1] == 1:
        return "row"
    if stride[-2] == 1:
        return "col"
    return "strided"


def _table(rows) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _ms(t: Timing | None) -> str:
    return "-" if t is None else f"{t.median_ms:.4f} [{t.p20_ms:.4f}, {t.p80_ms:.4f}]"


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _f(v) -> str:
    return "-" if v is None else f"{v:.4f}"

