"""What the plugin keeps per process, in one list, and ``reset()``, which forgets it.

The plugin learns facts once and keeps them for the process: launch plans per call signature,
each GPU's SM count and capability, the tuning and routing caches read from disk, measured
routing decisions. ``reset()`` forgets all of that, for a process that changes GPUs, versions
or the cache folder (``INDUCTOR_MM_PLUGIN_CACHE_DIR``) and must not reuse what it learned
before. What it keeps, and why, is in ``KEPT``. ``tests/test_state.py`` reads every module
for state it holds and checks each holder is in one list or the other.

Not the plugin's: Inductor's and Dynamo's caches (``torch.compiler.reset()``), and models
already compiled, which run what they were compiled with until they are compiled again.
"""

from __future__ import annotations

import importlib

# Each holder reset() forgets ("module.name" under inductor_mm_plugin), and what it holds.
FORGOTTEN = {
    "runtime.launch._PLANS": "a launch plan (config, grid, compiled kernel) per call signature",
    "runtime.launch._FAST_PLANS": "the plans a repeated CUDA call launches directly",
    "runtime.ahead._BEHIND": "kernels compiling in the background (compile_behind): reset() waits for them",
    "runtime.launch._TUNING_CACHES": "each GPU's tuning cache, as read from the cache folder",
    "inductor.measure._ROUTING_CACHES": "each GPU's routing cache, as read from the cache folder",
    "inductor.measure._MEMORY": "measured routing decisions, by site signature",
    "inductor.shape_table.table": "each GPU's committed shape-class table, as read from its file",
    "configs.selector.table": "the config selector's fitted table, as read from its file",
    "runtime.device._NUM_SMS": "each GPU's SM count",
    "runtime.device._CAPABILITIES": "each GPU's compute capability",
    "runtime.split_k._by_stream": "split-K counters per device and stream",
    "runtime.split_k._reserve": "the reserve captured split-K launches take counters from",
    "runtime.direct.enabled": "whether the direct launch is on (off once a launcher refused a call)",
    "runtime.direct._RUNTIME_KNOBS": "Triton's launch-hook knobs, looked up once",
    "interpreter.interpreter_defect": "whether this Triton interpreter can run the kernels",
    "inductor.records._from_the_pass": "the decisions the routing pass logged itself (the cache replay's count)",
}

# Each holder reset() keeps, and why.
KEPT = {
    "inductor.activation_pattern._pattern_graph": "each activation's pattern, traced from fixed aten calls: nothing learned",
    "runtime.launch._AUTOTUNE": "a setting the user made (set_autotune), not something learned",
    "runtime.split_k._kept": "split-K counters that captured CUDA graphs still use",
    "opt_in._instance_classes": "the marked subclass of each class and marker, which marked instances share",
    "inductor.selection._marked_classes": "the opt_in markers themselves, which the routing pass's cache key reads",
    "inductor.selection._classes_by_name": "module classes by name for a graph being routed, gone with the graph",
    "inductor.records._listeners": "the record_sites() blocks open now",
    "inductor.lowering._PROFILED": "on only inside a profiled_calls() block (compare's profiled step)",
    "inductor.templates._templates": "Inductor's templates: a second one of the same name is an error",
}


def reset() -> None:
    """Forget what the plugin learned in this process (``FORGOTTEN``): the next call plans,
    looks up its GPU and reads the disk caches again. For a process that changes GPUs,
    versions or ``INDUCTOR_MM_PLUGIN_CACHE_DIR``; not while a call or a compile is running.
    Models compiled before keep their routing (``torch.compiler.reset()`` and a new compile
    redo it); settings (``set_autotune``) and ``opt_in`` markers stay.
    """
    from .configs import selector
    from .inductor import measure, records, shape_table
    from .interpreter import interpreter_defect
    from .runtime import device, direct, split_k

    launch = importlib.import_module(".runtime.launch", __package__)  # runtime.launch is also a function
    launch.clear_plans()
    launch._TUNING_CACHES.clear()
    measure.clear()  # measured decisions and the routing caches
    shape_table.clear()
    selector.table.cache_clear()
    device._NUM_SMS.clear()
    device._CAPABILITIES.clear()
    split_k.clear()  # the reserve's counters move to _kept, for the graphs captured with them
    direct.enabled = True
    direct._RUNTIME_KNOBS = None
    interpreter_defect.cache_clear()
    records._from_the_pass.clear()
