"""Running a matmul on the plugin's kernels, behind one small interface: the layer above
``kernels/`` and ``configs/``, below ``ops/`` (docs/design.md, Layers).

* ``checks.py``: what torch would reject, and why the kernel cannot take valid operands;
* ``layout.py``: which kernel the operands allow (TMA or pointer) and the problem's facts;
* ``plan.py``: a call signature's launch plan, arguments bound by name; ``direct.py``: the
  direct launch through the compiled kernel's launcher;
* ``launch.py``: the checked and fast paths the ops run, config choice, ``warmup``;
* ``ahead.py``: kernels compiled before their first call, side by side or in the background;
* ``swiglu.py``: the fused SwiGLU kernel's launch (``ops/swiglu.py`` imports it);
* ``activation.py``: stock's Linear + activation, which the routing pass times the fused one against;
* ``tuning.py``: optional autotuning with a disk cache; ``split_k.py``: split-K's counters;
* ``device.py``: the device's SM count (one source), stream and guard.

The ops (``ops/``) call ``mm_launch``/``addmm_launch``/``bmm_launch``; benchmarks and tests
use ``launch`` (a forced ``config``, ``compile_only``), ``candidates_for``, ``chosen_config``
and ``clear_plans``; the routing pass compiles the sites it will time with ``compile_calls``,
and those it routed with ``compile_behind`` (in the background, while Inductor compiles on).
"""

from .checks import SUPPORTED_DTYPES, KernelFallbackWarning, kernel_unsupported_reason
from .ahead import compile_behind, compile_calls, wait_all
from .launch import (
    addmm_launch,
    bmm_launch,
    candidates_for,
    chosen_config,
    clear_plans,
    launch,
    mm_launch,
    set_autotune,
    warmup,
)
from .layout import input_precision, pointer_kernel_reason, tf32_enabled

__all__ = [
    "SUPPORTED_DTYPES", "KernelFallbackWarning", "addmm_launch", "bmm_launch", "candidates_for", "chosen_config",
    "clear_plans", "compile_behind", "compile_calls", "input_precision", "kernel_unsupported_reason", "launch",
    "mm_launch", "pointer_kernel_reason", "set_autotune", "tf32_enabled", "wait_all", "warmup",
]  # fmt: skip
