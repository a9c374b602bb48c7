"""Running a matmul on the plugin's kernels: the checked path, the planned fast path, and the
config choice (heuristic, or timed and cached on disk).

Which kernel: the persistent TMA kernel where TMA can read the operands (layout.tma_layout;
for batches also configs.batch_fits), the pointer kernel for everything else. Which config:
the shape heuristic by default (instant, no tuning storm on the first call); timed
candidates, cached on disk per shape bucket, when INDUCTOR_MM_PLUGIN_AUTOTUNE=1 or after
``set_autotune(True)``; ``warmup`` does either ahead of time.

Host cost: small matmuls take a few microseconds on the GPU, so the Python around them is
most of their cost. A call's config, grid and compiled kernel are planned once per call
signature (plan.py); a repeated call whose signature has been checked and planned before
goes straight to the plan's direct launch (``_FAST_PLANS``): checks only ever pass or fail
on that signature, so they would give the same answer again. 12 us of host time per mm call
at 768^3 on the H200's host, against 11-16 us for torch.mm (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

import torch
import triton

from ..configs import MatmulConfig, batch_fits, candidate_configs, copies_pay, heuristic_config
from ..interpreter import interpreting
from . import ahead, direct, tuning
from .checks import (
    check_addmm_args,
    check_bmm_args,
    check_mm_args,
    check_scalar,
    check_tensor_args,
    check_warmup_device,
    kernel_unsupported_reason,
    warn_fallback,
)
from .device import device_guard
from .layout import (
    aligned,
    bias_mode,
    input_precision,
    problem,
    settled,
    tf32_a_from_registers,
    tf32_enabled,
    tma_layout,
    unaligned_operands,
)
from .plan import Flags, Plan

log = logging.getLogger(__name__)
_AUTOTUNE = os.environ.get("INDUCTOR_MM_PLUGIN_AUTOTUNE", "0") not in ("", "0")


def set_autotune(enabled: bool) -> bool:
    """Choose between the shape heuristic (False) and autotuning (True); returns the old value."""
    global _AUTOTUNE
    old, _AUTOTUNE = _AUTOTUNE, bool(enabled)
    return old


_PLANS: dict[tuple, Plan] = {}
_FAST_PLANS: dict[tuple, Plan] = {}
_MAX_PLANS = 8192


def clear_plans() -> None:
    """Drop every launch plan: the next call of each signature plans again (after the
    kernels compiling in the background, which would plan, are done)."""
    ahead.join_behind()
    _PLANS.clear()
    _FAST_PLANS.clear()


# ------------------------------------------------------------------------ config choice

_TUNING_CACHES: dict[str, tuning.TuningCache] = {}


def _tuning_cache(device: torch.device) -> tuning.TuningCache:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu-interpreter"
    cache = _TUNING_CACHES.get(gpu)
    if cache is None:
        cache = _TUNING_CACHES[gpu] = tuning.TuningCache(gpu, triton.__version__, tuning.kernel_source_hash())
    return cache


def _time_config(prob, cfg, layout, flags, a, b, out, bias, alpha, beta, copies=(False, False)) -> float:
    import triton.testing

    plan = Plan(prob, cfg, layout, flags, a.device, copies)
    run = lambda: plan.launch(a, b, out, bias, alpha, beta)  # noqa: E731
    run()  # compile outside the timed region
    return triton.testing.do_bench(run, warmup=5, rep=25, return_mode="median")


def _choose(prob, layout, flags, a, b, out, bias, alpha, beta, autotune: bool, copies=(False, False)) -> MatmulConfig:
    """The config: the heuristic's, or the autotuner's (timed with the copies a plan makes;
    with copies, TMA configs only)."""
    kernels = ("tma",) if any(copies) else ("tma", "ptr")
    heuristic = heuristic_config(prob, interpreting(), kernels)
    if not autotune or interpreting():
        return heuristic
    cache = _tuning_cache(a.device)
    bucket = prob.bucket() + ("|copies" if any(copies) else "")
    if torch.cuda.is_current_stream_capturing():
        # No timing inside a graph capture: a bucket tuned before (warmup) or the heuristic.
        return cache.get(bucket) or heuristic
    time_fn = lambda cfg: _time_config(prob, cfg, layout, flags, a, b, out, bias, alpha, beta, copies)  # noqa: E731
    return tuning.autotune(bucket, candidate_configs(prob, kernels=kernels), time_fn, cache)


# ------------------------------------------------------------------------------ launch


def launch(a, b, out, bias=None, beta=1.0, alpha=1.0, *, autotune=None, config=None, compile_only=False,
           copy_unaligned=None, plan_only=False, activation="") -> Plan:  # fmt: skip
    """out = alpha * a @ b (+ beta * bias), then ``activation`` (kernels/activation.py), on 2-D or 3-D
    (batched) views; returns the plan used.

    ``bias``, when given, is already expanded to ``out``'s shape (stride 0 where broadcast).
    ``config`` forces a config (benchmarks, tests); ``compile_only`` compiles without
    launching (parallel precompilation); ``plan_only`` plans without compiling; ``copy_unaligned`` forces (True) or forbids (False)
    running a matrix whose operands TMA cannot read on aligned copies of them, which the
    selector otherwise decides (``configs.copies_pay``). No checks here: callers validate first.
    """
    if a.dim() == 3 and a.shape[0] == 1:
        # One matrix: 2-D views, which the TMA kernel can take.
        a, b, out = a[0], b[0], out[0]
        bias = None if bias is None else bias[0]
    a, b, out = settled(a), settled(b), settled(out)
    has_bias = bias is not None and beta != 0
    autotune = _AUTOTUNE if autotune is None else autotune
    key = (
        a.dtype, a.device, a.shape, b.shape, a.stride(), b.stride(), out.stride(),
        bias.stride() if has_bias else None, alpha != 1, a.dtype == torch.float32 and tf32_enabled(), autotune,
        config,
        # Triton specializes pointer arguments on 16-byte alignment.
        a.data_ptr() % 16, b.data_ptr() % 16, out.data_ptr() % 16, bias.data_ptr() % 16 if has_bias else 0,
        copy_unaligned, activation,
    )  # fmt: skip
    plan = _PLANS.get(key)
    interpreter_bf16 = interpreting() and a.dtype == torch.bfloat16
    # Interpreter only: its fp32 -> bf16 cast truncates instead of rounding to nearest even
    # (cast_impl passes no rounding mode; triton 3.7.1 runtime/interpreter.py), so the kernel
    # stores fp32 and torch rounds. The GPU path stores bf16 directly.
    kernel_out = out.new_empty(out.shape, dtype=torch.float32) if interpreter_bf16 else out
    with device_guard(a.device), _interpreter_lock():
        if plan is None:
            plan = _plan(a, b, kernel_out, bias if has_bias else None, alpha, beta, autotune, config,
                         interpreter_bf16, copy_unaligned, activation)  # fmt: skip
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = plan
        if plan_only:
            return plan
        if plan.compiled is None and ahead.pending():
            ahead.wait_for(plan.kernel_key(a, b, kernel_out, bias))  # compiling in the background?
        if compile_only:
            plan.compile(a, b, kernel_out, bias)
            return plan
        plan.launch(a, b, kernel_out, bias, alpha, beta)
    if interpreter_bf16:
        out.copy_(kernel_out)
    return plan


def _plan(a, b, out, bias, alpha, beta, autotune, config, interpreter_bf16, copy_unaligned=None, activation="") -> Plan:
    has_bias = bias is not None
    flags = Flags(has_bias=has_bias, bias_mode=bias_mode(bias) if has_bias else "mn", scale_acc=alpha != 1,
                  input_precision=input_precision(a.dtype), interpreter_bf16=interpreter_bf16,
                  activation=activation)  # fmt: skip
    # The TMA kernel's bias has no batch stride: a batched bias takes the pointer kernel.
    layout = None if has_bias and a.dim() == 3 else tma_layout(a, b, out)
    if layout is not None and tf32_a_from_registers(layout.a_kmajor, layout.b_kmajor, flags.input_precision):
        layout = None
    prob = problem(a, b, out, layout, has_bias, flags.input_precision)
    if config is not None:
        # A forced TMA config copies only when asked to (copy_unaligned=True); else the error below.
        plan = _copies(a, b, out, bias, flags, prob, config, copy_unaligned) if copy_unaligned and layout is None else None
        if plan is not None:
            return plan
        cfg = config
        if cfg.kernel == "ptr" and not batch_fits(prob, cfg):
            raise ValueError(f"config {cfg.short()}: the pointer kernel splits K only for a single matrix, "
                             f"got a batch of {prob.batch}")  # fmt: skip
        if cfg.kernel == "tma" and (layout is None or not batch_fits(prob, cfg)):
            raise ValueError(f"config {cfg.short()} needs TMA-compatible operands (16-byte aligned rows, "
                             "batches stacked; not TF32 with an M-major A and a K-major B)")
        return Plan(prob, cfg, layout if cfg.kernel == "tma" else None, flags, a.device)
    if layout is None and copy_unaligned is not False:
        plan = _copies(a, b, out, bias, flags, prob, None, copy_unaligned, autotune, alpha, beta)
        if plan is not None:
            return plan
    cfg = _choose(prob, layout, flags, a, b, out, bias, alpha, beta, autotune)
    return Plan(prob, cfg, layout if cfg.kernel == "tma" else None, flags, a.device)


def _copies(a, b, out, bias, flags, in_place, config, copy_unaligned, autotune=False, alpha=1.0, beta=1.0):
    """The plan that runs the TMA kernel on aligned copies of the operands TMA cannot read in
    place (layout.aligned), where that is allowed and chosen: forced (``copy_unaligned``, with
    a TMA ``config`` or the heuristic's), or paying by the selector's estimate; else None."""
    if copy_unaligned is False or (config is not None and config.kernel != "tma"):
        return None
    need = unaligned_operands(a, b)
    if need is None:
        return None
    a2 = aligned(a, copy=False) if need[0] else a
    b2 = aligned(b, copy=False) if need[1] else b
    layout = tma_layout(a2, b2, out)
    if layout is None or tf32_a_from_registers(layout.a_kmajor, layout.b_kmajor, flags.input_precision):
        return None
    packed = problem(a2, b2, out, layout, bias is not None, flags.input_precision)
    b_bytes = b.numel() * b.element_size() if need[1] else 0
    if config is None and not (copy_unaligned or copies_pay(in_place, packed, b_bytes)):
        return None
    # With copies, _choose picks among TMA configs only: a pointer pick would drop the copies
    # and read in place by the unaligned rules (4160x64x1949 ran 0.26x cuBLAS so at d794989).
    cfg = config if config is not None else _choose(packed, layout, flags, a, b, out, bias, alpha, beta, autotune,
                                                    copies=need)  # fmt: skip
    if cfg.kernel != "tma":
        return None
    return Plan(packed, cfg, layout, flags, a.device, copies=need)


# Triton's interpreter is not thread-safe: while a kernel runs it patches triton.language's
# functions (triton/runtime/interpreter.py, _patch_lang), so kernels in two threads break each
# other (InterpreterError, and once a wrong result, with 8 threads). Its launches take turns;
# GPU launches never take the lock.
_INTERPRETER_LOCK = threading.RLock()


def _interpreter_lock():
    return _INTERPRETER_LOCK if interpreting() else contextlib.nullcontext()


def candidates_for(a: torch.Tensor, b: torch.Tensor) -> list[MatmulConfig]:
    """What autotuning would time for ``mm(a, b)`` (benchmarks precompile these in parallel)."""
    out = a.new_empty((a.shape[0], b.shape[1]))
    prob = problem(a, b, out, tma_layout(a, b, out), False, input_precision(a.dtype))
    return candidate_configs(prob, interpreting())


def chosen_config(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> MatmulConfig | None:
    """The config a call ``mm(a, b)`` (``addmm`` with ``bias``) ran with, if it ran already."""
    for key, plan in _PLANS.items():
        if key[:6] == (a.dtype, a.device, a.shape, b.shape, a.stride(), b.stride()) and key[10] == _AUTOTUNE:
            if (key[7] is not None) == (bias is not None):
                return plan.cfg
    return None


# ------------------------------------------------------------------------ entry points
# What the custom ops run. ``out`` exists for the Inductor extern kernels (a planned buffer)
# and for tests, which pass a NaN-poisoned buffer to prove that every element is written.

_CHECKS = {"mm": check_mm_args, "bmm": check_bmm_args}
_ATEN = {"mm": torch.mm, "bmm": torch.bmm}


def mm_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check_tensor_args("inductor_mm_plugin.mm", ("a", "b"), a, b)
    return _matmul("mm", a, b, out)


def bmm_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check_tensor_args("inductor_mm_plugin.bmm", ("a", "b"), a, b)
    return _matmul("bmm", a, b, out)


def addmm_launch(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta=1, alpha=1,
                 out: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    if not (isinstance(bias, torch.Tensor) and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check_tensor_args("inductor_mm_plugin.addmm", ("bias", "a", "b"), bias, a, b)
    if type(beta) is not int or type(alpha) is not int:  # an int always converts (int64 < float32's max)
        beta = check_scalar("inductor_mm_plugin.addmm", "beta", beta, a.dtype)
        alpha = check_scalar("inductor_mm_plugin.addmm", "alpha", alpha, a.dtype)
    return _matmul("addmm", a, b, out, bias, beta, alpha)


def mm_activation_launch(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
                         out: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``activation(a @ b + bias)`` for operands ``ops/activation.py`` has checked and the kernel
    takes (``kernel_unsupported_reason`` None): no checks and no fallback here."""
    key, res = _fast_path("mm_activation", a, b, out, bias, 1, 1, activation)
    return res if res is not None else _run(key, a, b, out, bias, 1, 1, activation)


def _signature(a, b, out, extra) -> tuple:
    """What decides a call's checks and plan, bar the data (pointer alignment included)."""
    tf32 = a.dtype == torch.float32 and tf32_enabled()
    out_sig = None if out is None else (out.shape, out.stride(), out.dtype, out.device, out.data_ptr() % 16)
    return (
        a.dtype, b.dtype, a.device, b.device, a.shape, b.shape, a.stride(), b.stride(),
        a.data_ptr() % 16, b.data_ptr() % 16, out_sig, tf32, _AUTOTUNE, extra,
    )  # fmt: skip


def _matmul(op: str, a, b, out, bias=None, beta=1, alpha=1) -> torch.Tensor:
    key, res = _fast_path(op, a, b, out, bias, beta, alpha, "")
    if res is not None:
        return res
    name = f"inductor_mm_plugin.{op}"
    if bias is None:
        _CHECKS[op](name, a, b)
        reason = kernel_unsupported_reason(a, b)
    else:
        check_addmm_args(name, bias, a, b)
        reason = kernel_unsupported_reason(a, b, bias)
    if reason is not None:
        warn_fallback(name, reason)
        if bias is None:
            return _ATEN[op](a, b).contiguous()
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha).contiguous()
    return _run(key, a, b, out, bias, beta, alpha, "")


def _fast_path(op, a, b, out, bias, beta, alpha, activation):
    """The call's plan key (None off CUDA) and its result where a plan made for the same
    signature launched it directly, else None."""
    if not a.is_cuda:
        return None, None
    extra = op if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device, bias.data_ptr() % 16,
                                     beta == 0, alpha == 1)  # fmt: skip
    extra = (extra, activation) if activation else extra
    key = _signature(a, b, out, extra)
    plan = _FAST_PLANS.get(key)
    if plan is not None:
        res = a.new_empty((*a.shape[:-1], b.shape[-1])) if out is None else out
        # The plan of a batch of one was made on 2-D views (see launch).
        views = (a[0], b[0], res[0]) if a.dim() == 3 and a.shape[0] == 1 else (a, b, res)
        if _launch_direct(plan, *views, bias if beta != 0 else None, alpha, beta):
            return key, res
    return key, None


def _run(key, a, b, out, bias, beta, alpha, activation) -> torch.Tensor:
    """Launch the kernel for checked operands, and keep its plan for the next call's fast path."""
    res = a.new_empty((*a.shape[:-1], b.shape[-1])) if out is None else out
    if res.numel():
        expanded = None if bias is None else bias.expand(res.shape)
        plan = launch(a, b, res, expanded, beta, alpha, activation=activation)
        if key is not None and plan.compiled is not None:
            if len(_FAST_PLANS) >= _MAX_PLANS:
                _FAST_PLANS.clear()
            _FAST_PLANS[key] = plan
    return res


def _launch_direct(plan, a, b, out, bias, alpha, beta) -> bool:
    if not direct.usable():
        return False
    if plan.device.index != torch.cuda.current_device():
        with torch.cuda.device(plan.device):
            return plan.launch_direct(a, b, out, bias, alpha, beta)
    return plan.launch_direct(a, b, out, bias, alpha, beta)


# ------------------------------------------------------------------------------ warmup


def warmup(
    shapes,
    dtype: torch.dtype = torch.bfloat16,
    *,
    layout: str = "row",
    bias: bool = False,
    device: str | torch.device = "cuda",
    tune: bool | None = None,
) -> dict[tuple, MatmulConfig]:
    """Compile, and with ``tune`` autotune, the kernels for these shapes now.

    Call it before capturing a CUDA graph: inside a capture nothing is timed, so a shape
    that was not tuned before runs the heuristic's config. ``shapes`` holds ``(M, N, K)``
    for ``mm``/``addmm`` or ``(B, M, N, K)`` for ``bmm``; ``layout`` is ``"row"`` (B is a
    row-major (K, N) matrix) or ``"linear"`` (B is a transposed (N, K) weight, as
    ``nn.Linear`` passes it); ``tune`` defaults to the current autotuning setting. Tuned
    choices land in the on-disk cache, so later processes reuse them. Returns the config
    chosen per shape.
    """
    if layout not in ("row", "linear"):
        raise ValueError(f"warmup: layout must be 'row' or 'linear', got {layout!r}")
    device = torch.device(device)
    check_warmup_device(device)
    chosen = {}
    for shape in shapes:
        shape = tuple(int(s) for s in shape)
        if len(shape) == 3:
            (M, N, K), batch = shape, None
        elif len(shape) == 4:
            batch, M, N, K = shape
        else:
            raise ValueError(f"warmup: expected (M, N, K) or (B, M, N, K), got {shape}")
        lead = () if batch is None else (batch,)
        a = torch.randn(*lead, M, K, dtype=dtype, device=device)
        if layout == "linear":
            b = torch.randn(*lead, N, K, dtype=dtype, device=device).transpose(-1, -2)
        else:
            b = torch.randn(*lead, K, N, dtype=dtype, device=device)
        out = torch.empty(*lead, M, N, dtype=dtype, device=device)
        reason = kernel_unsupported_reason(a, b)
        if reason is not None:
            raise RuntimeError(f"warmup: the kernel cannot run {shape} {dtype} on {device}: {reason}")
        if out.numel() == 0:
            continue
        bias_t = torch.randn(N, dtype=dtype, device=device).expand(*lead, M, N) if bias else None
        chosen[shape] = launch(a, b, out, bias_t, 1.0, 1.0, autotune=tune).cfg
    return chosen
