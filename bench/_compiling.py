"""bench/models.py's arms and its compile clock: each arm's ``torch.compile``, cold and warm
compiles in interleaved rounds with the plugin's state forgotten or kept, and where each
compile's time went (Dynamo's and Inductor's phase timers, the routing pass's clock).

Issue 30's compile targets (cold <= 1.3x, warm <= 1.1x stock's) are read off these rows.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import threading
import time

import torch
from _timing import median, plugin_backend

ARMS = ("stock", "plugin", "stock_max_autotune", "plugin_max_autotune", "stock_again", "plugin_unfused")
# stock_again is a control with no target: stock compiled a second time, under a backend of
# its own, so its ratio to stock is what two compiles of the same code differ by.
# plugin_unfused is the default with fuse_swiglu=False: what it was before SwiGLU pairs were timed.
BASELINE = {"plugin": "stock", "plugin_max_autotune": "stock_max_autotune", "stock_again": "stock",
            "plugin_unfused": "stock"}  # fmt: skip
BY_NAME_ONLY = ("stock_again", "plugin_unfused")  # not in --arms all


def stock_again(gm, example_inputs):
    """Stock Inductor (``compile_fx``, as the plugin backend calls it) under a backend of its
    own: Dynamo keeps one cache entry per backend, so this arm compiles its own frames."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


def compile_fn(arm: str):
    """``model -> torch.compile(model, ...)`` for an arm."""
    kwargs = {"mode": "max-autotune-no-cudagraphs"} if arm.endswith("max_autotune") else {}
    if arm.startswith("plugin"):
        kwargs["backend"] = plugin_backend()
    if arm == "plugin_unfused":
        kwargs["options"] = {"fuse_swiglu": False}
    elif arm == "stock_again":
        kwargs["backend"] = stock_again
    return lambda model: torch.compile(model, **kwargs)


def fresh_cache():
    import torch._inductor.utils as utils

    return (getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache)()


def warm_up_compilers(device: str) -> None:
    """A throwaway compile with each backend: imports, compile workers, CUDA context; so the
    first arm of the first model does not pay them."""
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    mlp = mlp.to(device=device, dtype=torch.bfloat16)
    x = torch.randn(64, 256, device=device, dtype=torch.bfloat16)
    for arm in ("stock", "plugin"):
        torch._dynamo.reset()
        with torch.no_grad():
            compile_fn(arm)(mlp)(x)
    torch._dynamo.reset()


def _described(hook_kwargs: dict) -> str:
    """One compiled kernel as Triton specialized it: name, warps, stages, the arguments it took as
    constants (constexprs, integers == 1) and each argument's attributes (divisible by 16).
    Triton 3.6's own ``repr`` argument pairs parameters with characters of the cache key."""
    c = hook_kwargs.get("compile") or {}
    jit = getattr(hook_kwargs.get("fn"), "jit_function", None)
    names = list(getattr(jit, "arg_names", []))

    def named(path) -> str:
        return names[path[0]] if path and path[0] < len(names) else str(path)

    consts = {named(k): v for k, v in (c.get("constants") or {}).items() if not callable(v)}
    attrs = {named(k): v for k, v in ((c.get("configs") or [{}])[0] or {}).items()}
    name = getattr(hook_kwargs.get("fn"), "name", "?")
    return f"{name}[warps={c.get('num_warps')}, stages={c.get('num_stages')}] constants={consts} attrs={attrs}"


@contextlib.contextmanager
def routing_clock():
    """Where a plugin arm's compile time goes: compiling the kernels of the sites to be timed,
    side by side (``precompile_s``, ``measure.precompile``), ``measure.decide`` in all
    (``decide_s``), and within it the first call of each plugin kernel (``first_calls_s``:
    what was not compiled ahead, and the launch plan), for ``routing``: decide_s,
    first_calls_s, precompile_s, sites, timed (sites measured), precompiled (kernels compiled ahead),
    behind (routed sites whose kernels compile in the background, ``measure.compile_routed``),
    predicted (sites predicted at the backend's entry and compiled behind, ``measure.compile_predicted``);
    and each kernel compiled ahead, a SwiGLU pair's included, in whichever thread
    (``kernel_compiles``, the longest ``kernel_compile_max_s`` and their sum
    ``kernel_compile_sum_s``: a precompile_s near the sum says the threads took turns, near
    the longest that they ran side by side); and what the model's own calls of the plugin's
    ops paid (``op_calls_s``, main thread, outside the timing) and how many of its kernels
    Triton compiled there rather than ahead (``call_compiles``: a kernel compiled ahead under
    another specialization compiles again at its first call; a SwiGLU pair's timing,
    ``decide_swiglu``, counts as a site's). Warm, llama-decode's plugin compile spent 0.8-1.2 s
    more than stock's after Dynamo's compile (de14967): these two say whether the ops' first
    calls took it."""
    from inductor_mm_plugin.inductor import measure

    spent = {"decide_s": 0.0, "first_calls_s": 0.0, "precompile_s": 0.0, "sites": 0, "timed": 0, "precompiled": 0,
             "behind": 0, "predicted": 0, "kernel_compiles": 0, "kernel_compile_max_s": 0.0,
             "kernel_compile_sum_s": 0.0, "op_calls_s": 0.0, "call_compiles": 0}  # fmt: skip
    decide, measure_fn, call, precompile = measure.decide, measure.measure, measure._call, measure.precompile
    decide_swiglu = measure.decide_swiglu
    compile_routed, compile_predicted = measure.compile_routed, measure.compile_predicted
    from inductor_mm_plugin.runtime import ahead

    # (the package re-exports the function runtime.launch under the module's name)
    launch_module = importlib.import_module("inductor_mm_plugin.runtime.launch")

    compile_call, compile_swiglu, compiles = ahead._compile_call, ahead.compile_swiglu, []
    # Each plugin kernel compiled, as Triton specialized it (``_described``): at the model's
    # calls, and ahead or while timing. A kernel compiled ahead under one specialization
    # compiles again at its first call under another; the two lists side by side say which
    # argument differed. The one entry of ``spent`` that is no number: its readers skip it.
    specializations = spent["specializations"] = {"at_calls": [], "ahead": []}
    matmul = launch_module._matmul
    inside = threading.local()  # .ahead / .deciding: this thread compiles ahead / times sites

    def compiled_ahead(fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            inside.ahead = True
            try:
                return fn(*args, **kwargs)
            finally:
                inside.ahead = False
                compiles.append(time.perf_counter() - t0)  # list.append: one at a time, in any thread

        return run

    def op_call(*args, **kwargs):
        if getattr(inside, "deciding", False) or threading.current_thread() is not threading.main_thread():
            return matmul(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            return matmul(*args, **kwargs)
        finally:
            spent["op_calls_s"] += time.perf_counter() - t0

    import triton

    previous_hook = triton.knobs.runtime.jit_post_compile_hook  # triton 3.6 and 3.7.1 both have it

    def compiled(**kwargs):
        # triton's jit_post_compile_hook: one call per kernel compiled (or read from disk) by the JIT.
        info = kwargs.get("fn")
        ours = str(getattr(info, "module", "")).startswith("inductor_mm_plugin")
        if ours and not getattr(inside, "ahead", False) and not getattr(inside, "deciding", False):
            spent["call_compiles"] += 1
            specializations["at_calls"].append(_described(kwargs))
        elif ours:
            specializations["ahead"].append(_described(kwargs))
        return previous_hook(**kwargs) if previous_hook else None

    def clocked(fn, field, count=None):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[field] += time.perf_counter() - t0
                if count:
                    spent[count] += 1

        return run

    def deciding(fn):
        # A SwiGLU pair's timing compiles and runs both arms' kernels as a site's does.
        def run(*args, **kwargs):
            inside.deciding = True
            try:
                return fn(*args, **kwargs)
            finally:
                inside.deciding = False

        return run

    timed_decide, timed_decide_swiglu = deciding(clocked(decide, "decide_s", "sites")), deciding(decide_swiglu)

    def counted_precompile(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            n = precompile(*args, **kwargs)
            spent["precompiled"] += n
            return n
        finally:
            spent["precompile_s"] += time.perf_counter() - t0

    def counted_behind(sites):
        n = compile_routed(sites)
        spent["behind"] += n
        return n

    def counted_predicted(sites):
        n = compile_predicted(sites)
        spent["predicted"] += n
        return n

    def counted_measure(*args, **kwargs):
        spent["timed"] += 1
        return measure_fn(*args, **kwargs)

    def first_call_timed(*args, **kwargs):
        fn, first = call(*args, **kwargs), [kwargs.get("plugin", args[-1] if args else False)]

        def run():
            if not first[0]:
                return fn()
            first[0] = False
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            spent["first_calls_s"] += time.perf_counter() - t0

        return run

    measure.decide, measure.measure, measure._call = timed_decide, counted_measure, first_call_timed
    measure.precompile, measure.compile_routed = counted_precompile, counted_behind
    measure.compile_predicted, measure.decide_swiglu = counted_predicted, timed_decide_swiglu
    ahead._compile_call, ahead.compile_swiglu = compiled_ahead(compile_call), compiled_ahead(compile_swiglu)
    launch_module._matmul = op_call
    triton.knobs.runtime.jit_post_compile_hook = compiled
    try:
        yield spent
    finally:
        measure.decide, measure.measure, measure._call, measure.precompile = decide, measure_fn, call, precompile
        measure.compile_routed, ahead._compile_call = compile_routed, compile_call
        measure.compile_predicted, launch_module._matmul = compile_predicted, matmul
        measure.decide_swiglu, ahead.compile_swiglu = decide_swiglu, compile_swiglu
        triton.knobs.runtime.jit_post_compile_hook = previous_hook
        ahead.wait_all()  # (the backend returned with none running already)
        spent.update(kernel_compiles=len(compiles), kernel_compile_max_s=max(compiles, default=0.0),
                     kernel_compile_sum_s=sum(compiles))  # fmt: skip




def forget_kernels() -> None:
    """Drop the plugin's launch plans and the in-memory caches of its Triton kernels (their
    disk cache is new per compile already, ``fresh_cache``): its next call compiles its
    kernels anew, as stock's compile compiles Inductor's."""
    from inductor_mm_plugin import runtime

    runtime.clear_plans()
    _forget_compiled_kernels()


def _forget_compiled_kernels() -> None:
    from triton.runtime.jit import JITFunction

    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("inductor_mm_plugin") and mod is not None:
            for obj in list(vars(mod).values()):
                caches = getattr(obj, "device_caches", None) if isinstance(obj, JITFunction) else None
                if caches is not None:
                    caches.clear()


@contextlib.contextmanager
def cold_plugin():
    """Forget what the plugin learned in this process (``inductor_mm_plugin.reset()``: launch
    plans, routing decisions) and its compiled kernels (``forget_kernels``), and give the block
    a routing cache folder of its own: a cold compile compiles and measures every site anew.
    The folder stays after the block, and so do the decisions made in it, for the warm
    compiles that follow."""
    import tempfile

    import inductor_mm_plugin

    inductor_mm_plugin.reset()  # the launch plans too
    _forget_compiled_kernels()
    old = os.environ.get("INDUCTOR_MM_PLUGIN_CACHE_DIR")
    os.environ["INDUCTOR_MM_PLUGIN_CACHE_DIR"] = tempfile.mkdtemp(prefix="models-routing-")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("INDUCTOR_MM_PLUGIN_CACHE_DIR", None)
        else:
            os.environ["INDUCTOR_MM_PLUGIN_CACHE_DIR"] = old


@contextlib.contextmanager
def forgotten(arm: str, cold: bool):
    """What a plugin arm's compile starts without: everything (``cold_plugin``) or, warm, its
    compiled kernels only (``forget_kernels``), the decisions kept. A stock arm's compile
    leaves the plugin alone: a stock compile that reset it once made the plugin's next warm
    compile measure every site again (llama-decode's first warm round, at 9f920f7)."""
    if arm.startswith("plugin") and cold:
        with cold_plugin():
            yield
        return
    if arm.startswith("plugin"):
        forget_kernels()
    yield




@contextlib.contextmanager
def own_heap():
    """A compile that pays for its own garbage only: what earlier compiles left is collected and
    frozen (``gc.freeze``) first, so no full collection of the process's heap (about 0.8 M
    objects, 0.5-0.8 s a pass) lands in whichever arm happens to trigger it. On the H200 that
    collection put 0.06-0.85 s into single compiles of 3-7 s, in either arm."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def compile_once(client, arm: str, device: str, cold: bool) -> tuple[float, dict, dict]:
    """One more compile of the arm, with fresh Inductor and Triton caches. A plugin arm
    compiles its kernels anew either way; ``cold``: its decisions are forgotten too
    (``cold_plugin``), as in the first compile; else they are cached (measure.py keeps them
    in memory and on disk), which is what a user pays once the sites were measured
    (``forgotten``). Returns the seconds, where they went
    (Dynamo's and Inductor's timed phases, which nest, and the routing pass's seconds), and the
    routing clock with its counts (``routing_clock``: did this compile time or compile any site?)."""
    from inductor_mm_plugin.inductor import compat

    torch._dynamo.reset()  # also clears the phase timers
    with fresh_cache(), forgotten(arm, cold), routing_clock() as spent, own_heap():
        t0 = time.perf_counter()
        step = client.arm(compile_fn(arm))
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    phases = compat.compile_phase_seconds()
    # What the compile's first call paid beyond Dynamo's compiling: the graph's first run (and
    # the eager code between graphs).
    phases["after_compile_s"] = max(0.0, seconds - phases.get("_compile.compile_inner", 0.0))
    phases.update({f"routing.{k}": v for k, v in spent.items() if k.endswith("_s")})
    return seconds, phases, dict(spent)


def compile_rounds(client, arms: list[str], device: str, n: int, cold: bool, flip: bool) -> tuple[dict, dict, dict]:
    """arm -> compile times over ``n`` rounds, the arms' order alternating round by round (one
    compile's time moves by 10-20% from run to run: single compiles of the same code on the
    H200 read 0.89-1.24x of each other); arm -> each round's phases, and each round's routing
    clock (``compile_once``)."""
    times, phases, routing = ({arm: [] for arm in arms} for _ in range(3))
    for i in range(n):
        for arm in arms[::-1] if (i + flip) % 2 else arms:
            seconds, where, clock = compile_once(client, arm, device, cold)
            times[arm].append(seconds)
            phases[arm].append(where)
            routing[arm].append({k: round(v, 2) for k, v in clock.items() if k != "specializations"})
    return times, phases, routing


def median_phases(rounds: list[dict], top: int = 16) -> dict:
    """Per phase, the median seconds over the rounds (0 where a round lacks it): the ``top``
    largest, and always the routing clock's and ``after_compile_s``."""
    names = {name for r in rounds for name in r}
    med = {name: median([r.get(name, 0.0) for r in rounds]) for name in names}
    kept = dict(sorted(med.items(), key=lambda kv: -kv[1])[:top])
    kept.update({k: v for k, v in med.items() if k.startswith("routing.") or k == "after_compile_s"})
    return {k: round(v, 3) for k, v in sorted(kept.items(), key=lambda kv: -kv[1])}


def phase_gaps(ours: dict, theirs: dict, n: int = 5) -> str:
    """The phases where ``ours`` spent the most seconds beyond ``theirs``, as text."""
    gaps = sorted(((v - theirs.get(k, 0.0), k) for k, v in ours.items()), reverse=True)[:n]
    return ", ".join(f"{k} {gap:+.2f}s" for gap, k in gaps if gap > 0.05) or "none over 0.05 s"




def add_compile_rounds(rows: list[dict], cold: dict, warm: dict) -> None:
    """Each row gets its compile times by round (``compile_s_rounds``, ``cold``'s, and their
    median ``compile_s``; ``warm_compile_s_rounds`` and their median ``warm_compile_s``), and a
    row with a baseline the medians of its per-round ratios to it (``compile_ratio``,
    ``warm_compile_ratio``)."""
    by_arm = {row["arm"]: row for row in rows}
    for row in rows:
        if row["arm"] not in cold:
            continue  # an arm without compile rounds (the stock_again control)
        row["compile_s_rounds"] = [round(t, 2) for t in cold[row["arm"]]]
        row["compile_s"] = median(cold[row["arm"]])
        if warm:
            row["warm_compile_s_rounds"] = [round(t, 2) for t in warm[row["arm"]]]
            row["warm_compile_s"] = median(warm[row["arm"]])
    for row in rows:  # per round, against the baseline's compile of the same round
        base = by_arm.get(BASELINE.get(row["arm"], ""))
        if base is not None and "compile_s_rounds" in row:
            for field in ("compile_s_rounds", "warm_compile_s_rounds"):
                if field in row:
                    ratio = median([ours / theirs for ours, theirs in zip(row[field], base[field])])
                    row[field.replace("_s_rounds", "_ratio")] = round(ratio, 3)




def compile_ratio(row: dict, base: dict, kind: str = "") -> float:
    """The arm's compile time against its baseline's: the median of per-round ratios where
    the rows have rounds (``compile_ratio``, ``warm_compile_ratio``), else their medians'."""
    ratio = row.get(f"{kind}compile_ratio")
    return ratio if ratio is not None else row[f"{kind}compile_s"] / base[f"{kind}compile_s"]


def timed_compiles(rows: list[dict], client, arms: list[str], device: str, n: int, flip: bool, warm: bool,
                   name: str) -> None:  # fmt: skip
    """The compile rounds after a model's timing, ``n`` cold and ``n`` warm (the first compiles
    shared one cache dir, so they are not cold), added to its ``rows`` (``add_compile_rounds``, ``cold_phases_s``/``warm_phases_s``, and the
    plugin arms' ``cold_routing_rounds``/``warm_routing_rounds``), and
    the plugin arm's largest gaps over its baseline's printed. Each compile resets Dynamo,
    which drops the arms' compiled code. The control ``stock_again`` has no compile rounds:
    its first compile was a cache hit on stock's, and its compile time no target."""
    arms = [arm for arm in arms if arm != "stock_again"]
    cold, cold_phases, cold_routing = compile_rounds(client, arms, device, n, cold=True, flip=not flip)
    warm_times, warm_phases, warm_routing = (compile_rounds(client, arms, device, n, cold=False, flip=flip)
                                             if warm else ({}, {}, {}))  # fmt: skip
    add_compile_rounds(rows, cold, warm_times)
    by_arm = {row["arm"]: row for row in rows}
    for kind, routing in (("cold", cold_routing), ("warm", warm_routing)):
        for arm, rounds_of in routing.items():
            if arm.startswith("plugin") and rounds_of:
                by_arm[arm][f"{kind}_routing_rounds"] = rounds_of
    for kind, phases in (("cold", cold_phases), ("warm", warm_phases)):
        for arm, rounds_of in phases.items():
            if rounds_of:
                by_arm[arm][f"{kind}_phases_s"] = median_phases(rounds_of)
    for row in rows:
        base = by_arm.get(BASELINE.get(row["arm"], ""))
        for kind in ("cold", "warm"):
            if base is not None and f"{kind}_phases_s" in row:
                print(f"  {name}/{row['arm']}: {kind} compile beyond {base['arm']}'s: "
                      f"{phase_gaps(row[f'{kind}_phases_s'], base[f'{kind}_phases_s'])}", flush=True)  # fmt: skip
