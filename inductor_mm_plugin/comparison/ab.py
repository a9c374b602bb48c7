"""A/B comparison of the plugin against stock Inductor on the same captured graphs.

    report = inductor_mm_plugin.compare(model, example_inputs, options={"select": "all"})
    print(report)                 # readable tables
    report.to_json("ab.json")     # machine-readable
    report.to_markdown()          # for pasting into an issue
    report.plot("ab.png")         # when matplotlib is installed

How: Dynamo captures the model's graphs once (it may split the model into several). Each
captured graph is compiled twice from copies of itself (``compile_fx`` mutates its input):
stock Inductor, and Inductor with the plugin's routing pass. Both arms then run on the same
inputs:

* numerics — every graph output, and the model output (and parameter gradients for a
  training step), against a float64 eager reference: an upcast copy of the model on
  upcast inputs, or for one graph the captured graph itself on upcast inputs. NaN/inf
  patterns first (the plugin's must be the reference's or stock's at every element), then
  the error over the elements finite in both;
* speed — the whole model step and every graph, stock against plugin in interleaved
  rounds (the order alternating; the median of the per-round ratios, and a verdict:
  faster, slower or within noise, from their spread), under CUDA graphs by default on CUDA
  (noted where a model cannot be captured); per routed site, the plugin kernel against
  the aten kernel on fresh operands of the same shapes, dtype and layout (the routing
  pass's own measurement where it made one). The two matmuls of a fused SwiGLU product run
  as one kernel, so their rows time that pair instead: ``silu(x @ w_gate) * (x @ w_up)``
  compiled alone on the sites' shapes, by the plugin (the fused kernel) and by stock
  Inductor (two matmuls and a pointwise kernel). On the CPU the kernels run in Triton's
  interpreter: times are reported and marked not meaningful.

``write_plan=FILE`` writes a routing plan from what was measured (the backend obeys it with
``options={"plan": FILE}``; inductor/plan_file.py).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import sys
import time
from typing import Any, Callable

import torch
import torch.nn as nn

from ..version import __version__
from ..inductor import compat, plan_file
from ..inductor.backend import parse_options, patches_for
from ..inductor.measure import wins
from ..inductor.options import PluginOptions
from ..inductor.records import SiteRecord, record_sites
from ..inductor.selection import RootInfo, root_from_dynamo
from ..interpreter import interpreting
from ..ops.reference import UNIT_ROUNDOFF
from .profile import median_profile, profile_rounds, site_key, site_paid, stock_paid
from .report import CompareError, Error, GraphResult, Report, SiteResult
from .timing import ROUNDS, interleaved, time_sites

# A model output passes when the plugin's NaN/inf pattern is the reference's or stock's at every
# element, and its relative error over the elements finite in both (max |out - ref| / max |ref|)
# is within the dtype's tolerance, or within twice stock Inductor's own error on the same graph
# (a deep graph accumulates rounding that no matmul can remove). Tolerances: 8 output
# roundings (three bits) for fp16/bf16; for fp32, TF32's operand rounding (about 1e-3).
# A dropped K slice or a wrong tile is off by whole products, far beyond either.
TOLERANCE = {torch.float32: 1e-3, torch.float16: 8 * UNIT_ROUNDOFF[torch.float16],
             torch.bfloat16: 8 * UNIT_ROUNDOFF[torch.bfloat16], torch.float64: 1e-10}  # fmt: skip


# ---------------------------------------------------------------------- helpers


class _Progress:
    def __init__(self, quiet: bool):
        self.quiet, self.start = quiet, time.perf_counter()

    def __call__(self, stage: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.start:7.1f}s] {stage}", file=sys.stderr, flush=True)


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in compat.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _floating_outputs(*trees) -> list[tuple[torch.Tensor, ...]]:
    """The floating-point output tensors of each tree, side by side (the trees share a structure)."""
    lists = [_tensors(tree) for tree in trees]
    if any(len(ts) != len(lists[-1]) for ts in lists):
        raise CompareError(f"output structure differs: {len(lists[0])} tensors against {len(lists[-1])} in the "
                           "reference")  # fmt: skip
    return [tuple(t.detach().double().to(ts[0].device) for t in ts) for ts in zip(*lists)
            if ts[0].is_floating_point() and ts[0].numel()]  # fmt: skip


def _kind(t: torch.Tensor) -> torch.Tensor:
    """Each element's kind: 0 finite, 1 NaN, 2 +inf, 3 -inf."""
    return t.isnan().to(torch.int8) + 2 * t.isposinf() + 3 * t.isneginf()


def _error(out, ref) -> Error:
    """How far ``out`` is from ``ref``: where its NaN/inf pattern differs (an element count),
    then over the elements finite in both, the largest error, absolute and relative to the
    reference's largest finite magnitude. A NaN no longer makes the error inf, where an inf
    on either side passed any comparison."""
    max_abs, max_ref, differ = 0.0, 0.0, 0
    for o, r in _floating_outputs(out, ref):
        differ += int((_kind(o) != _kind(r)).sum())
        both = o.isfinite() & r.isfinite()
        if both.any():
            max_abs = max(max_abs, float((o - r)[both].abs().max()))
        if r.isfinite().any():
            max_ref = max(max_ref, float(r[r.isfinite()].abs().max()))
    return Error(max_abs, max_abs / max_ref if max_ref > 0 else max_abs, differ)


def _unexplained_nonfinite(stock, plugin, ref) -> int:
    """Elements where the plugin's NaN/inf pattern is neither the reference's nor stock's (a
    low-precision overflow that stock shares is the dtype's, not the kernel's)."""
    count = 0
    for s, p, r in _floating_outputs(stock, plugin, ref):
        kind = _kind(p)
        count += int(((kind != _kind(r)) & (kind != _kind(s))).sum())
    return count


def _upcast(tree, dtype=torch.float64):
    def up(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().to(dtype).requires_grad_(x.requires_grad)
        return x

    return compat.tree_map(up, tree)


def _float_dtype(tree) -> torch.dtype:
    for t in _tensors(tree):
        if t.is_floating_point():
            return t.dtype
    return torch.float32



# ------------------------------------------------------------------------ compare


@dataclasses.dataclass
class _Graph:
    index: int
    gm: torch.fx.GraphModule
    stock: Callable
    plugin: Callable
    inputs: list = dataclasses.field(default_factory=list)  # the args of its first call


class _Arms:
    """Dynamo's capture of the model, each graph compiled by both arms: ``backend`` is the
    torch.compile backend that does it; ``arm`` says which arm the compiled model runs."""

    def __init__(self, plugin: PluginOptions, inductor: dict, progress):
        self.plugin, self.inductor, self.progress = plugin, inductor, progress
        self.graphs: list[_Graph] = []
        self.arm, self.record_inputs = "stock", False

    def backend(self, gm, graph_inputs):
        index = len(self.graphs)
        self.progress(f"graph {index}: compiling the stock and plugin arms ({len(gm.graph.nodes)} nodes)")
        root = root_from_dynamo() or RootInfo()
        stock = compat.compile_fx(copy.deepcopy(gm), graph_inputs, config_patches=dict(self.inductor))
        patches = patches_for(self.plugin, self.inductor, root=root, label=index)
        entry = _Graph(index, copy.deepcopy(gm), stock, compat.compile_fx(copy.deepcopy(gm), graph_inputs,
                                                                         config_patches=patches))  # fmt: skip
        self.graphs.append(entry)

        def run(*args):
            if self.record_inputs and not entry.inputs:
                entry.inputs = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
            return (entry.stock if self.arm == "stock" else entry.plugin)(*args)

        return run


def compare(
    model: nn.Module | Callable,
    example_inputs,
    *,
    options: dict[str, Any] | None = None,
    train: bool | None = None,
    timing: bool = True,
    cudagraphs: bool | None = None,
    rounds: int = ROUNDS,
    warmup: int = 5,
    reps: int = 20,
    quiet: bool = True,
    write_plan=None,
) -> Report:
    """Compare the plugin against stock Inductor on ``model(*example_inputs)``.

    options:    the plugin backend's options (``select``, ``compete`` and Inductor config keys).
    train:      also run backward on the (scalar) output and compare parameter gradients;
                None means: when the output is a scalar that requires grad.
    cudagraphs: time under CUDA graphs (default: on CUDA, for inference; a training step is
                timed without); ``rounds`` interleaved rounds of ``reps`` calls per arm
                (ints of at least 1, ``warmup`` at least 0: a ValueError before anything compiles).
    write_plan: a path: write a routing plan of where the plugin's kernels won in the model
                (plan_file.py).
    """
    progress = _Progress(quiet)
    plugin_options, inductor = parse_options(options)  # the one parse: the typed pair goes down
    for name, value in (("rounds", rounds), ("reps", reps), ("warmup", warmup)):
        if not isinstance(value, int) or value < (0 if name == "warmup" else 1):
            raise ValueError(f"inductor_mm_plugin.compare: {name} must be an int >= {0 if name == 'warmup' else 1}, "
                             f"got {value!r}")  # fmt: skip
    _check_unwrapped(model)
    if not torch.cuda.is_available():  # interpreter times mean nothing: keep them short
        warmup, reps, rounds = min(warmup, 1), min(reps, 3), min(rounds, 3)
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    params = [p for p in model.parameters()] if isinstance(model, nn.Module) else []
    device = str(next((t.device for t in _tensors(example_inputs) + params), torch.device("cpu")))
    cuda = device.startswith("cuda")
    dtype = _float_dtype(list(example_inputs) + params)

    progress("float64 eager reference")
    ref_out, ref_grads, train, reference = _reference(model, example_inputs, train)

    arms = _Arms(plugin_options, inductor, progress)
    # Caches off for this compare: a cache hit would skip the routing pass, and the site
    # table is what the pass decided.
    with compat.fresh_inductor_cache(), record_sites() as records:
        torch.compiler.reset()
        compiled = torch.compile(model, backend=arms.backend)
        outs, grads = {}, {}
        for arm in ("stock", "plugin"):
            progress(f"running the {arm} arm" + (" (forward + backward)" if train else ""))
            arms.arm, arms.record_inputs = arm, arm == "stock"
            try:
                outs[arm], grads[arm], _ = _run(compiled, example_inputs, train)
            except CompareError:
                raise
            except Exception as e:
                raise CompareError(f"the model does not compile or run under torch.compile: {type(e).__name__}: {e}") from e
        if not records:
            raise CompareError("the model has no matmul (aten.mm, aten.addmm or aten.bmm) in its compiled graphs")
        arms.record_inputs = False
        steps = {arm: _step(compiled, arms, arm, example_inputs, train) for arm in ("stock", "plugin")}
        # Timing and profiling the model step before Dynamo forgets the compiled frames.
        graphs_on = cuda and (cudagraphs if cudagraphs is not None else not train)
        model_timing, profiles = None, {}
        if timing:
            progress(f"timing the model step in {rounds} interleaved rounds")
            model_timing = _time_model(steps, device, rounds, warmup, reps, graphs_on)
            progress("profiling each arm's step in interleaved rounds: the GPU time of every matmul")
            profiles = profile_rounds(steps) if cuda else {}
        torch.compiler.reset()

    tolerance = TOLERANCE.get(dtype, 1e-3)
    model_result = _judge(outs["stock"], outs["plugin"], ref_out, tolerance)
    if train:
        model_result["grads"] = {
            name: _judge(grads["stock"][name], grads["plugin"][name], ref_grads[name], tolerance)
            for name in ref_grads if ref_grads[name] is not None and grads["stock"].get(name) is not None
        }  # fmt: skip
        model_result["ok"] = model_result["ok"] and all(g["ok"] for g in model_result["grads"].values())

    progress("per-graph numerics" + (" and timing" if timing else ""))
    graph_results = [_graph_result(g, records, tolerance, device, timing, rounds, warmup, reps, graphs_on)
                     for g in arms.graphs]  # fmt: skip
    sites = [_site_result(r) for r in records]
    if timing:
        _from_profiles(sites, profiles)
        progress(f"timing {sum(s.routed and not s.timed for s in sites)} routed sites the profile could not see")
        time_sites(sites, plugin_options, inductor, device, warmup, reps, graphs_on)
        model_result["timing"] = model_timing
        if profiles.get("stock") and profiles.get("plugin"):
            model_result["profile"] = _profile_summary({arm: median_profile(p) for arm, p in profiles.items()},
                                                       model_timing)  # fmt: skip
        if plugin_options.plan is not None:
            model_result["plan_check"] = _plan_check(plugin_options.plan, model, model_timing)
    if write_plan is not None:
        _write_plan(write_plan, records, sites, model)

    note = "" if cuda or not timing else (
        "times on the CPU are not meaningful: the plugin's kernels run in Triton's interpreter"
        if interpreting() else "times on the CPU are not meaningful")  # fmt: skip
    import triton

    progress("done")
    return Report(
        versions={"torch": torch.__version__, "triton": triton.__version__, "plugin": __version__},
        device=torch.cuda.get_device_name(torch.device(device)) if cuda else "cpu",
        timing_meaningful=cuda,
        timing_note=note,
        reference=reference,
        graphs=graph_results,
        sites=sites,
        model=model_result,
        options={k: (v if isinstance(v, (str, bool, int, float)) else repr(v)) for k, v in (options or {}).items()},
    )


def _reference(model, inputs, train):
    """(output, grads, whether backward ran, what the reference is): an upcast copy of the
    model on upcast inputs, float64, else float32 where float64 does not run."""
    try:
        ref_model = copy.deepcopy(model)
        if isinstance(ref_model, nn.Module):
            ref_model = ref_model.to(torch.float64)
        return (*_run(ref_model, _upcast(inputs), train), "float64 eager (upcast copy of the model and its inputs)")
    except Exception as e:  # noqa: BLE001  (an op without float64 support, for example)
        reference = f"float32 eager (float64 failed: {type(e).__name__}: {str(e).splitlines()[0][:100]})"
    ref_model = copy.deepcopy(model)
    if isinstance(ref_model, nn.Module):
        ref_model = ref_model.float()
    try:
        return (*_run(ref_model, _upcast(inputs, torch.float32), train), reference)
    except Exception as e2:  # noqa: BLE001
        raise CompareError(f"the model does not run eagerly: {type(e2).__name__}: {e2}") from e2


def _step(compiled, arms: _Arms, arm: str, inputs, train) -> Callable:
    def step():
        arms.arm = arm
        _run(compiled, inputs, train)

    return step


def _run(fn, inputs, train):
    """Run forward, and backward when train (None: when the output is a scalar that
    requires grad); return (output, {param name: grad}, whether backward ran)."""
    module = getattr(fn, "_orig_mod", fn)  # a torch.compile'd module names its parameters "_orig_mod.*"
    named = list(module.named_parameters()) if isinstance(module, nn.Module) else []
    for _, p in named:
        p.grad = None
    grad_ctx = contextlib.nullcontext() if train is not False else torch.no_grad()
    with grad_ctx:
        out = fn(*inputs)
    do_backward = train if train is not None else (
        isinstance(out, torch.Tensor) and out.dim() == 0 and out.requires_grad)  # fmt: skip
    grads = {}
    if do_backward:
        out.backward()
        grads = {n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in named}
    out = compat.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, out)
    return out, grads, do_backward


def _judge(stock, plugin, ref, tolerance) -> dict:
    """The plugin passes when its NaN/inf pattern is the reference's or stock's at every
    element, and its error over the finite elements is within the tolerance or twice stock's."""
    stock_err, plugin_err = _error(stock, ref), _error(plugin, ref)
    patterns_match = _unexplained_nonfinite(stock, plugin, ref) == 0
    ok = patterns_match and plugin_err.max_rel <= max(tolerance, 2 * stock_err.max_rel)
    return {"stock_err": stock_err, "plugin_err": plugin_err, "tolerance": tolerance, "ok": ok}


def _graph_result(g: _Graph, records, tolerance, device, timing, rounds, warmup, reps, cudagraphs) -> GraphResult:
    mine = [r for r in records if r.graph == g.index]
    result = GraphResult(g.index, len(mine), sum(r.routed for r in mine), None, None, tolerance, True)
    if not g.inputs:
        return result
    args = g.inputs
    with torch.no_grad():
        stock_out, plugin_out = g.stock(*args), g.plugin(*args)
        try:
            ref_out = g.gm(*_upcast(args))
        except Exception:  # noqa: BLE001  (the captured graph may not run in float64)
            ref_out = g.gm(*_upcast(args, torch.float32))
        judged = _judge(stock_out, plugin_out, ref_out, tolerance)
        result.stock_err, result.plugin_err, result.ok = judged["stock_err"], judged["plugin_err"], judged["ok"]
        if timing:
            ab = interleaved(lambda: g.stock(*args), lambda: g.plugin(*args), device, rounds=rounds, reps=reps,
                             warmup=warmup, cudagraphs=cudagraphs)  # fmt: skip
            result.stock, result.plugin, result.ratios = ab.stock, ab.plugin, ab.ratios
    return result


def _site_result(r: SiteRecord) -> SiteResult:
    s = r.site

    def concrete(dims):  # symbolic sizes (dynamic=True) are reported by name, e.g. "s77"
        return [d if isinstance(d, int) else str(d) for d in dims]

    measured = r.measured
    return SiteResult(
        graph=r.graph, module=s.module, op=s.op, phase=s.phase,
        shapes=[concrete(x) for x in s.shapes], dtype=s.dtypes[-1], strides=[concrete(x) for x in s.strides],
        routed=r.routed, reason=r.reason, compete=r.compete.value if r.compete else None, fused=r.fused,
        plugin_ms=measured.plugin_us / 1e3 if measured else None, aten_ms=measured.aten_us / 1e3 if measured else None,
        timed="kernel" if measured else None, offsets=list(s.offsets),
    )  # fmt: skip


def _check_unwrapped(model) -> None:
    """DDP and FSDP wrappers run collectives in their forward and backward, and a sharded
    model (FSDP, DTensor parameters) holds only this rank's shard: compare runs the model
    several times in one process and deep-copies it, so it takes the plain module inside.
    Looks through torch.compile's wrapper, and at every submodule (FSDP2 shards blocks)."""
    inner = getattr(model, "_orig_mod", model)  # torch.compile(ddp_model)
    if not isinstance(inner, nn.Module) or not torch.distributed.is_available():
        return
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(inner, DistributedDataParallel):
        compiled = " (compiled)" if inner is not model else ""
        raise CompareError(f"compare needs the unwrapped module, not a DistributedDataParallel{compiled}: pass its "
                           ".module (model.module; model._orig_mod.module when compiled) on one rank, compiled and "
                           "compared on its own")  # fmt: skip
    sharded = next((n for n, m in inner.named_modules() if isinstance(m, (FSDPModule, FullyShardedDataParallel))), None)
    dtensor = next((n for n, p in inner.named_parameters() if isinstance(p, DTensor)), None)
    if sharded is not None or dtensor is not None:
        what = (f"module {sharded or '<root>'!r} is sharded with FSDP (fully_shard or FullyShardedDataParallel)"
                if sharded is not None else f"parameter {dtensor!r} is a DTensor")  # fmt: skip
        raise CompareError(f"compare needs the unwrapped module, but its {what}: each rank holds only its shard. "
                           "Compare the model before sharding it, on one rank")  # fmt: skip


def _time_model(steps: dict, device, rounds, warmup, reps, cudagraphs) -> dict:
    """The whole model step, stock against plugin, in interleaved rounds."""
    ab = interleaved(steps["stock"], steps["plugin"], device, rounds=rounds, reps=reps, warmup=warmup,
                     cudagraphs=cudagraphs)  # fmt: skip
    return {"stock_ms": ab.stock.median_ms, "plugin_ms": ab.plugin.median_ms, "speedup": ab.speedup,
            "spread": list(ab.spread), "rounds": rounds, "cudagraphs": ab.cudagraphs, "note": ab.note,
            # On the CPU the plugin's kernels run in Triton's interpreter: no verdict.
            "verdict": ab.verdict if device.startswith("cuda") else "not meaningful on the CPU"}  # fmt: skip


def _from_profiles(sites: list[SiteResult], profiles: dict) -> None:
    """Each routed site's times from the arms' profiles (``profile_rounds``): the plugin's
    kernels for its shapes in the plugin arm, aten's for the same calls in the stock arm, per
    call, the median over rounds (profile.py says how sites are met, ``stock_paid`` which of
    stock's calls count)."""
    stock, plugin = profiles.get("stock"), profiles.get("plugin")
    if not stock or not plugin:
        return
    for s in sites:
        key = site_key(s.op, s.shapes)
        if not s.routed or key is None:
            continue
        paid = site_paid(stock, plugin, key)
        if paid is not None:  # kernels seen in both arms
            s.plugin_ms, s.aten_ms, s.timed = paid.plugin_median_us / 1e3, paid.stock_median_us / 1e3, "profile"


def _profile_summary(profiles: dict, timing: dict) -> dict:
    """Per step, in the profiles: the plugin's kernels against stock's for the same matmul
    calls, and every other kernel; and why, when the site table and the step disagree."""
    stock, plugin = profiles["stock"], profiles["plugin"]
    ours = plugin.matmul_us("plugin")
    paid = {key: stock_paid(stock, plugin, key) for (who, key) in plugin.matmuls if who == "plugin"}
    theirs = sum(paid[key].per_call_us * plugin.matmuls["plugin", key].calls for key in paid if paid[key])
    summary = {"routed_plugin_us": ours, "routed_stock_us": theirs, "stock_kernels_us": stock.total_us,
               "plugin_kernels_us": plugin.total_us, "why": ""}  # fmt: skip
    other_stock, other_plugin = stock.total_us - theirs, plugin.total_us - ours
    sites_faster = ours < theirs
    step = timing["verdict"] if timing else ""
    if (sites_faster and step == "slower") or (not sites_faster and ours and step == "faster"):
        if (plugin.total_us <= stock.total_us) == (step == "slower"):
            summary["why"] = ("the kernels' GPU time disagrees with the step's wall time: the difference is launch "
                              "and host time between kernels" + ("" if timing["cudagraphs"] else
                              " (the step ran without CUDA graphs)"))  # fmt: skip
        else:
            summary["why"] = (f"the rest of the step's kernels took {other_plugin:.1f} us per step in the plugin arm "
                              f"against {other_stock:.1f} us in stock's: the fusions around the routed sites differ")
    return summary


def _plan_check(plan, model, timing: dict) -> str:
    """A plan applied to the model it was written from must not make the step slower."""
    if plan.model and plan.model != type(model).__name__:
        return f"the plan {plan.path} was written for {plan.model}, not {type(model).__name__}: not checked"
    if timing["verdict"] == "slower":
        return (f"the plan {plan.path} made the step SLOWER ({timing['speedup']:.3f}x stock): write it again, "
                "from this setup")
    return f"the plan {plan.path} did not make the step slower ({timing['speedup']:.3f}x stock, {timing['verdict']})"


def _write_plan(path, records: list[SiteRecord], sites: list[SiteResult], model) -> None:
    """Per selected site, whether the plugin's kernels won in the model: its profiled GPU time
    against stock's for the same calls, by the routing margin; where the profile could not
    see it, the site's measurement (the routing pass's, or compare's own). A site never
    timed (a sure loser of the shape table, a symbolic one) is written unrouted: a plan
    must know every site the backend will ask it about."""
    routes, fused = {}, {}
    for record, result in zip(records, sites):
        if not (record.routed or record.measured is not None):
            won = False
        elif result.timed in ("profile", "kernel", "swiglu pair"):
            won = bool(result.plugin_ms and result.aten_ms) and wins(result.plugin_ms * 1e3, result.aten_ms * 1e3)
        else:
            won = record.measured.faster if record.measured else False
        key = plan_file.site_key(record.site)
        routes[key] = won
        if won and record.fused:  # a pair's site that won fused: the plan fuses the pair again
            fused[key] = record.fused
    plan_file.write(path, routes, model=type(model).__name__, fused=fused)
