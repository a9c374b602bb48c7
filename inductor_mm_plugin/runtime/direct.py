"""The direct launch: a planned call goes to the compiled kernel's launcher with its arguments
already bound, skipping Triton's per-call binding and cache-key work.

Triton 3.6's launcher (backends/nvidia/driver.py) has three layers: CudaLauncher.__call__
allocates scratch memory (these kernels need none) and calls ``launch``, a Python closure
that expands every TensorDescriptor argument into an encoded tensormap
(cuTensorMapEncodeTiled) plus shape and strides, then calls the C launcher. On the H200's
host the whole call took 19 us, the C launcher alone 5.3 us and encoding three tensormaps
3.9 us. The raw path calls the C launcher directly with cached encodings: a loop's tensors
mostly come back at the same addresses from the caching allocator, and a weight never
moves. It is taken only where the closure has 3.6's exact shape (triton 3.7 passes the
kernel arguments as one list: there the rebased descriptors go through ``compiled.run``).
Upstream: triton-lang/triton#6463 encodes the tensormap "at the last second in the kernel
launcher" and leaves caching for later; pytorch/pytorch#188823 adds the same data-pointer
cache to Inductor's launcher.
"""

from __future__ import annotations

import warnings

from triton.tools.tensor_descriptor import TensorDescriptor

# Switched off for the process if a launcher ever rejects a call, e.g. after a Triton change
# of its calling convention (``disable``).
enabled = True

_RUNTIME_KNOBS = None


def launch_hooks_active() -> bool:
    """Profilers (proton) register launch hooks, which the direct launch skips: take
    Triton's own path while any is registered."""
    global _RUNTIME_KNOBS
    if _RUNTIME_KNOBS is None:
        from triton import knobs

        _RUNTIME_KNOBS = knobs.runtime
    for hook in (_RUNTIME_KNOBS.launch_enter_hook, _RUNTIME_KNOBS.launch_exit_hook):
        if hook is not None and (getattr(hook, "calls", None) is None or hook.calls):
            return True
    return False


def usable() -> bool:
    return enabled and not launch_hooks_active()


def disable(err: Exception) -> None:
    global enabled
    enabled = False
    warnings.warn(
        f"inductor_mm_plugin: the direct kernel launch failed ({type(err).__name__}: {err}); "
        "using Triton's launch path from now on, which costs more host time per call",
        RuntimeWarning,
        3,
    )


def rebased(desc: TensorDescriptor, base) -> TensorDescriptor:
    """A copy of ``desc`` over ``base``, without TensorDescriptor's constructor checks: the
    plan's key fixes everything but the base, so those checks would pass again (0.4 against
    1.5 us of host time per descriptor on the CI machine's CPU)."""
    copy = object.__new__(TensorDescriptor)
    copy.__dict__.update(desc.__dict__)
    copy.base = base
    return copy


def raw_launcher(compiled, n_descs: int):
    """(C launcher, tensormap metadata, (cooperative, pdl)) of a compiled kernel whose first
    ``n_descs`` arguments are TMA descriptors, if its launcher is triton 3.6's; else None."""
    try:
        run = compiled.run
        code, closure = run.launch.__code__, run.launch.__closure__
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in closure)))
        if (
            "_BASE_ARGS_FORMAT_LEN" in code.co_names
            and sorted(cells["tensordesc_indices"]) == list(range(n_descs))
            and len(cells["tensordesc_meta"]) == n_descs
            and all(isinstance(m, dict) for m in cells["tensordesc_meta"])
            and run.global_scratch_size == 0
            and run.profile_scratch_size == 0
        ):
            return cells["launcher"], tuple(cells["tensordesc_meta"]), (run.launch_cooperative_grid, run.launch_pdl)
    except (AttributeError, KeyError, TypeError, ValueError):
        pass
    return None


def tensormap_args(desc: TensorDescriptor, meta: dict) -> list:
    """What Triton 3.6's launcher passes the C launcher for one descriptor."""
    from triton.backends.nvidia.driver import make_tensordesc_arg

    return make_tensordesc_arg(desc, meta)
