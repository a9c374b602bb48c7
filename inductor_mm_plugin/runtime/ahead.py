"""Compiling the plugin's kernels before their first call: side by side in threads and waited
for (``compile_calls``: the routing pass's sites to be timed), or in the background
(``compile_behind``: the sites the backend predicts before AOTAutograd traces the graph, and
those the routing pass routed, while Inductor compiles on; a call that needs one of them
waits for it, ``wait_for``). Either way one call per
distinct kernel (``kernel_groups``): the others find it compiled, and a kernel compiling in
the background is waited for, not compiled again.

``launch`` (the module) imports this one; this one calls ``launch.launch`` inside functions.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import logging
import threading

import torch

from .checks import kernel_unsupported_reason
from .plan import ready_for_threads
from .swiglu import compile_swiglu

log = logging.getLogger(__name__)


def _compile_call(a, b, out, bias=None, beta=1, alpha=1, activation="") -> bool:
    """Compile the kernel that ``mm``/``bmm`` (``bias`` None) or ``addmm`` on these operands
    would launch (``mm_activation`` with ``activation``), without launching: the plan the call
    will find, its kernel in Triton's cache. False where the call would not run the kernel
    (aten's fallback, nothing to compute)."""
    if kernel_unsupported_reason(*(t for t in (a, b, bias) if t is not None)) is not None or out.numel() == 0:
        return False
    from .launch import launch

    launch(a, b, out, None if bias is None else bias.expand(out.shape), beta, alpha, compile_only=True,
           activation=activation)  # fmt: skip
    return True


def compile_calls(calls: list[tuple], workers: int, swiglu_calls: list[tuple] = ()) -> int:
    """``_compile_call(*call)`` for one call of each kernel among ``calls`` (``kernel_groups``),
    and ``swiglu.compile_swiglu(*call)`` for each of ``swiglu_calls`` (x, w_gate, w_up, out),
    ``workers`` threads side by side: Triton spends most of a compile outside the GIL (MLIR
    passes, ptxas), as Inductor's max-autotune precompilation relies on (select_algorithm.py,
    a ThreadPoolExecutor). A kernel already compiling in the background (``compile_behind``)
    is waited for, not compiled again. A call that fails is left to its first real call,
    which compiles again and raises there. Returns how many calls will find their kernels
    compiled."""
    for device in {call[0].device for call in (*calls, *swiglu_calls)}:
        ready_for_threads(device)
    groups = kernel_groups(calls)
    with _BEHIND_LOCK:
        behind = {key: _BEHIND[key] for key in groups if key in _BEHIND}
    todo = [key for key in groups if key not in behind]
    with concurrent.futures.ThreadPoolExecutor(max(1, workers), thread_name_prefix="inductor_mm_plugin") as pool:
        fused = [pool.submit(_compile_quietly, call, swiglu=True) for call in swiglu_calls]
        done = dict(zip(todo, pool.map(_compile_quietly, [groups[key][0] for key in todo])))
    done.update({key: future.result() for key, future in behind.items()})
    return sum(len(calls) for key, calls in groups.items() if done[key]) + sum(f.result() for f in fused)


def kernel_groups(calls: list[tuple]) -> dict:
    """``calls`` grouped by the kernel each would compile (``Plan.kernel_key``; the plans are
    made here, which takes no compile), in order: sites of one config and specialization share
    a kernel (llama-decode's q, k/v, gate/up and lm_head products at 16 rows take one), and two
    threads compiling it at once would each compile it whole. A call that cannot be planned
    keeps a group of its own, and so does every call while autotuning is on (its planning
    times configs, which the threads do side by side)."""
    launch_module = importlib.import_module(".launch", __package__)  # the package's runtime.launch is the function

    groups: dict = {}
    for call in calls:
        key = ("unplanned", object())  # a group of its own
        try:
            a, b, out, bias, beta, alpha, activation = _call_args(*call)
            if (not launch_module._AUTOTUNE and out.numel()
                    and kernel_unsupported_reason(*(t for t in (a, b, bias) if t is not None)) is None):  # fmt: skip
                expanded = None if bias is None else bias.expand(out.shape)
                with torch.no_grad():
                    plan = launch_module.launch(a, b, out, expanded, beta, alpha, plan_only=True,
                                                activation=activation)  # fmt: skip
                key = plan.kernel_key(a, b, out, expanded)
        except Exception:  # noqa: BLE001 (left to compile on its own, which reports)
            log.debug("planning %s ahead failed", _describe(call), exc_info=True)
        groups.setdefault(key, []).append(call)
    return groups


# Kernels compiled or compiling in background threads (compile_behind), by kernel key, until
# the plans are cleared (reset()): compile_calls and the ops' first call of a kernel wait for
# the one they need (wait_for), and a kernel done there is not compiled again.
_BEHIND: dict[tuple, concurrent.futures.Future] = {}
_BEHIND_LOCK = threading.Lock()


def pending() -> bool:
    """Whether a background compile is still running."""
    if not _BEHIND:
        return False
    with _BEHIND_LOCK:
        return not all(future.done() for future in _BEHIND.values())


def compile_behind(calls: list[tuple], workers: int) -> int:
    """Start compiling the kernels of ``calls`` (``_compile_call``'s arguments) in up to
    ``workers`` background threads, and return at once, one call per kernel (``kernel_groups``;
    a kernel compiling already is not started again): so that they compile while Dynamo's and
    Inductor's compile goes on, not one after another later. Returns how many calls' kernels
    are compiling."""
    if not calls:
        return 0
    for device in {call[0].device for call in calls}:
        ready_for_threads(device)
    groups = kernel_groups(calls)
    with _BEHIND_LOCK:
        todo = [key for key in groups if key not in _BEHIND]
        if todo:
            pool = concurrent.futures.ThreadPoolExecutor(max(1, min(workers, len(todo))),
                                                         thread_name_prefix="inductor_mm_plugin-behind")  # fmt: skip
            _BEHIND.update({key: pool.submit(_in_background, groups[key][0]) for key in todo})
            pool.shutdown(wait=False)  # the threads end when their calls are compiled
    return len(calls)


def wait_all() -> None:
    """Wait for every background compile, and keep them (a kernel done there is not compiled
    again): the plugin backend's compile returns with none running, so none can meet a CUDA
    graph the caller captures next (in global capture mode a module load or an allocation in
    another thread fails, and can fail the capture)."""
    with _BEHIND_LOCK:
        futures = list(_BEHIND.values())
    concurrent.futures.wait(futures)


def join_behind() -> None:
    """``wait_all``, then forget them (the plans they made are being dropped)."""
    wait_all()
    with _BEHIND_LOCK:
        _BEHIND.clear()


def wait_for(key: tuple) -> None:
    """Wait for the kernel of this key if it is compiling in the background: a call about to
    compile it would compile it a second time. Nothing in the background threads themselves."""
    if getattr(_THREAD, "behind", False):
        return
    with _BEHIND_LOCK:
        future = _BEHIND.get(key)
    if future is not None:
        future.result()


_THREAD = threading.local()  # .behind: this thread compiles in the background


def _call_args(a, b, out, bias=None, beta=1, alpha=1, activation="") -> tuple:
    return a, b, out, bias, beta, alpha, activation


def _in_background(call) -> bool:
    _THREAD.behind = True
    return _compile_quietly(call)


def _compile_quietly(call, swiglu: bool = False) -> bool:
    """``_compile_call(*call)``, or for a SwiGLU pair's call (x, w_gate, w_up, out)
    ``swiglu.compile_swiglu(*call)``; False where it fails."""
    try:
        with torch.no_grad():
            return compile_swiglu(*call) if swiglu else _compile_call(*call)
    except Exception:  # noqa: BLE001 (compiling ahead only saves time: the first real call compiles and raises)
        log.debug("compiling %s ahead failed; its first call will compile it", _describe(call), exc_info=True)
        return False


def _describe(call) -> str:
    return " ".join(f"{tuple(t.shape)}:{t.stride()}" for t in call[:4] if isinstance(t, torch.Tensor))
