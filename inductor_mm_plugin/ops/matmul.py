"""The plugin's matmul ops: ``inductor_mm_plugin::mm``, ``::addmm`` and ``::bmm``.

Same semantics as ``torch.mm`` / ``torch.addmm`` / ``torch.bmm``:

    mm(a, b)                            a: (M, K), b: (K, N)          -> (M, N)
    addmm(bias, a, b, *, beta, alpha)   bias broadcastable to (M, N)  -> beta * bias + alpha * (a @ b)
    bmm(a, b)                           a: (B, M, K), b: (B, K, N)    -> (B, M, N)

The output is always a new contiguous tensor in the inputs' dtype. ``beta == 0`` ignores
the bias entirely (NaN in it does not propagate), like torch.

Where the Triton kernel runs: fp16, bf16 and fp32 tensors on CUDA, or on the CPU when
Triton's interpreter is on (TRITON_INTERPRET=1 before import). fp32 uses TF32 exactly when
``torch.backends.cuda.matmul.allow_tf32`` is set. Anything else that torch itself accepts
(float64, integer dtypes, sparse or nested tensors, CPU tensors without the interpreter,
matrices whose element offsets pass 2**31) runs the matching aten op instead, with a ``KernelFallbackWarning``
that says why. Input torch would reject raises a ``RuntimeError`` naming the shapes,
dtypes or devices, before anything runs.

Order in this file: checks -> launcher -> ops -> fake -> autograd.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import threading
import warnings
from collections.abc import Sequence

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from ..kernels import tuning
from ..kernels.configs import (
    MatmulConfig,
    Problem,
    batch_fits,
    candidate_configs,
    heuristic_config,
    k_per_split,
    persistent_programs,
)
from ..kernels.matmul import _matmul_kernel, interpreter_defect, interpreting
from ..kernels.matmul_tma import _matmul_kernel_tma
from . import split_k

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Element offsets inside one matrix are 32-bit in the kernel.
_MAX_OFFSET = 2**31 - 1


class KernelFallbackWarning(UserWarning):
    """An op ran the aten kernel instead of the plugin's Triton kernel."""


# ----------------------------------------------------------------------------- checks


def _fmt_shape(t: torch.Tensor) -> str:
    return "x".join(str(s) for s in t.shape) if t.dim() else "[]"


def _check_same(op: str, tensors: Sequence[tuple[str, torch.Tensor]]) -> None:
    (name0, t0), rest = tensors[0], tensors[1:]
    for name, t in rest:
        if t.device != t0.device:
            raise RuntimeError(
                f"{op}: expected all tensors to be on the same device, but found "
                f"{name0} on {t0.device} and {name} on {t.device}"
            )
    for name, t in rest:
        if t.dtype != t0.dtype:
            raise RuntimeError(
                f"{op}: expected {name0} and {name} to have the same dtype, but got "
                f"{name0}: {t0.dtype} and {name}: {t.dtype}"
            )


def _check_shapes(op: str, a: torch.Tensor, b: torch.Tensor, rank: int, what: str) -> None:
    """Ranks and the inner dimension (the last of a against the second-to-last of b)."""
    if a.dim() != rank or b.dim() != rank:
        raise RuntimeError(
            f"{op}: expected {what}, but got a with shape ({_fmt_shape(a)}) and b with shape ({_fmt_shape(b)})"
        )
    if rank == 3 and a.shape[0] != b.shape[0]:
        raise RuntimeError(
            f"{op}: expected a and b to have the same batch size, but got "
            f"a with shape ({_fmt_shape(a)}) and b with shape ({_fmt_shape(b)})"
        )
    ka, kb = rank - 1, rank - 2
    if a.shape[ka] != b.shape[kb]:
        raise RuntimeError(
            f"{op}: a and b shapes cannot be multiplied ({_fmt_shape(a)} and {_fmt_shape(b)}): "
            f"a.shape[{ka}] = {a.shape[ka]} must equal b.shape[{kb}] = {b.shape[kb]}"
        )
    _check_same(op, [("a", a), ("b", b)])


def check_mm_args(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise what torch.mm would reject: ranks, inner dimensions, dtypes, devices."""
    _check_shapes(op, a, b, 2, "2-D matrices")


def check_bmm_args(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise what torch.bmm would reject: ranks, batch sizes, inner dimensions, dtypes, devices."""
    _check_shapes(op, a, b, 3, "3-D batches of matrices")


def check_addmm_args(op: str, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    check_mm_args(op, a, b)
    _check_same(op, [("a", a), ("bias", bias)])
    M, N = a.shape[0], b.shape[1]
    ok = bias.dim() <= 2 and all(
        s == 1 or s == want for s, want in zip(reversed(bias.shape), (N, M))
    )
    if not ok:
        raise RuntimeError(
            f"{op}: bias with shape ({_fmt_shape(bias)}) cannot be broadcast to the "
            f"output shape ({M}x{N}); expected (N,), (1, N), (M, 1), (M, N) or a scalar"
        )


def kernel_unsupported_reason(*tensors: torch.Tensor) -> str | None:
    """Why the Triton kernel cannot take these (valid) operands, or None when it can."""
    t0 = tensors[0]
    if t0.dtype not in SUPPORTED_DTYPES:
        return f"dtype {t0.dtype} is not supported by the kernel (float16, bfloat16, float32)"
    if t0.device.type == "cpu":
        if not interpreting():
            return "CPU tensors need Triton's interpreter (TRITON_INTERPRET=1 before import)"
    elif t0.device.type != "cuda":
        return f"device {t0.device} is not supported by the kernel (cuda, or cpu when interpreting)"
    defect = interpreter_defect()
    if defect is not None:
        return defect
    for t in tensors:
        # The last two dims are one matrix; the batch offset is computed in 64 bits.
        if t.dim() >= 2 and t.numel():
            last = sum((s - 1) * abs(st) for s, st in zip(t.shape[-2:], t.stride()[-2:]))
            if last > _MAX_OFFSET:
                return "a matrix spans more than 2**31 elements (the kernel uses 32-bit offsets)"
    return None


def _warn_fallback(op: str, reason: str) -> None:
    # Deduplicated by Python's warning filter (same text, same place): once per reason.
    warnings.warn(f"{op}: running the aten op instead of the Triton kernel: {reason}", KernelFallbackWarning, 3)


def check_tensor_args(op: str, names: Sequence[str], *args) -> None:
    """Raise torch's TypeError for an argument that is not a tensor. The only such value
    that reaches a kernel is None: the dispatcher passes None for a ``Tensor`` argument
    given None (an undefined tensor), where torch.mm's own binding rejects it."""
    for position, (name, value) in enumerate(zip(names, args), 1):
        if not isinstance(value, torch.Tensor):
            given = type(value).__name__
            raise TypeError(f"{op}(): argument '{name}' (position {position}) must be Tensor, not {given}")


_FLOAT32_MAX = torch.finfo(torch.float32).max


def check_scalar(op: str, name: str, value, dtype: torch.dtype):
    """``beta`` or ``alpha`` as the kernel takes it, or torch.addmm's error for it.

    torch converts both to the dtype's opmath type, float32 for fp16, bf16 and fp32 alike
    (c10::checked_convert), and raises for a finite value beyond float32's range or a
    complex one with an imaginary part; inf, nan, bools and ints convert. The kernel
    computes in float32 too, so it takes the same values (a complex one as its real part),
    rounded to float32 here, so that "beta == 0 ignores the bias" holds for a beta that
    rounds to 0 (1e-50), as in torch's BLAS path. Other dtypes run the aten op, which checks
    for itself (float64 takes any double).
    """
    if dtype not in SUPPORTED_DTYPES:
        return value
    real = value.real if isinstance(value, complex) and value.imag == 0 else value
    if isinstance(real, complex) or (isinstance(real, float) and math.isfinite(real) and abs(real) > _FLOAT32_MAX):
        raise RuntimeError(f"{op}: value cannot be converted to type float without overflow: {name} = {value!r} "
                           f"(torch computes {dtype} in float32)")  # fmt: skip
    return struct.unpack("f", struct.pack("f", real))[0] if isinstance(real, float) else real


def layout_unsupported_reason(*tensors: torch.Tensor) -> str | None:
    """Why the kernel cannot read these tensors' memory (sparse or nested), or None."""
    for t in tensors:
        if t.is_nested:
            return "nested tensors are not supported by the kernel (strided tensors only)"
        if t.layout != torch.strided:
            return f"sparse layout {t.layout} is not supported by the kernel (strided tensors only)"
    return None


def check_warmup_device(device: torch.device) -> None:
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"warmup: device {device} was asked for, but CUDA is not available (torch.cuda.is_available() is "
            "False); device='cpu' warms up the CPU path, which runs under Triton's interpreter (TRITON_INTERPRET=1)"
        )


# --------------------------------------------------------------------------- launcher
#
# Which kernel: the persistent TMA kernel (kernels/matmul_tma.py) where TMA can read the
# operands (``_tma_layout``; for batches also ``configs.batch_fits``), the pointer kernel
# (kernels/matmul.py) for everything else (unaligned or oddly strided operands, K == 0).
#
# Which config: the shape heuristic by default (instant, no tuning storm on first call);
# timed candidates, cached on disk per shape bucket, when INDUCTOR_MM_PLUGIN_AUTOTUNE=1 or
# after ``set_autotune(True)``; ``warmup`` does either ahead of time.
#
# Host cost: a call's config, grid and compiled kernel are cached per call signature
# (shapes, strides, dtype, device, pointer alignment, flags) in a ``_Plan``; a repeated
# call builds its argument tuple and calls the compiled kernel's launcher directly,
# skipping Triton's per-call binding and cache-key work, and for the TMA kernel on triton
# 3.6 goes on to the C launcher with cached tensormap encodings (``_raw_launcher``). Small
# matmuls take a few microseconds on the GPU, so the Python around them is most of their
# cost: 12 us of host time per mm call at 768^3 on the H200's host, against 11-16 us for
# torch.mm (bench/host_overhead.py).

_AUTOTUNE = os.environ.get("INDUCTOR_MM_PLUGIN_AUTOTUNE", "0") not in ("", "0")


def set_autotune(enabled: bool) -> bool:
    """Choose between the shape heuristic (False) and autotuning (True); returns the old value."""
    global _AUTOTUNE
    old, _AUTOTUNE = _AUTOTUNE, bool(enabled)
    return old


# Triton's interpreter is not thread-safe: while a kernel runs it patches triton.language's
# functions (triton/runtime/interpreter.py, _patch_lang), so kernels in two threads break each
# other (InterpreterError, and once a wrong result, with 8 threads). Its launches take turns;
# GPU launches never take the lock.
_INTERPRETER_LOCK = threading.RLock()


def interpreter_lock():
    """The lock around a kernel launch: held under the interpreter, a no-op on the GPU."""
    return _INTERPRETER_LOCK if interpreting() else contextlib.nullcontext()


def _device_guard(device: torch.device):
    # Launch on the tensors' device, not on whatever device happens to be current.
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def input_precision(dtype: torch.dtype) -> str:
    """The dot's precision: TF32 for fp32 exactly when torch allows it (the eager kernels and
    the Inductor templates alike); the interpreter has only IEEE."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 and not interpreting():
        return "tf32"
    return "ieee"


_TMA_ALIGN = 16  # bytes: TMA descriptors need 16-byte aligned bases and leading strides


def _tma_operand(rows: int, cols: int, s_rows: int, s_cols: int, elem: int, ptr: int, cols_is_k: bool):
    """How a TMA descriptor reads a (rows, cols) operand: (k_major, leading stride), or None.

    The descriptor is made over the storage order: unit stride along cols -> shape
    (rows, cols); along rows -> shape (cols, rows), the kernel transposing in shared memory.
    A dimension of size 1 has an unused stride, which torch may report as anything; it gets
    an aligned stand-in.
    """
    if ptr % _TMA_ALIGN:
        return None
    stand_in = lambda n: -(-n * elem // _TMA_ALIGN) * _TMA_ALIGN // elem  # noqa: E731
    if s_cols == 1 or cols == 1:
        lead = s_rows if rows > 1 else stand_in(cols)
        if (lead * elem) % _TMA_ALIGN == 0 and lead > 0:
            return cols_is_k, lead
    if s_rows == 1 or rows == 1:
        lead = s_cols if cols > 1 else stand_in(rows)
        if (lead * elem) % _TMA_ALIGN == 0 and lead > 0:
            return not cols_is_k, lead
    return None


def _stacked(t: torch.Tensor, major_is_cols: bool, lead: int) -> bool:
    """A batch of matrices is one stacked matrix along its outer dimension: the batch stride
    is (outer extent) x (leading stride), as the TMA kernel's descriptors assume."""
    if t.dim() == 2 or t.shape[0] == 1:
        return True
    outer = t.shape[-2] if major_is_cols else t.shape[-1]
    return t.stride(0) == outer * lead


def _tma_operands(a, b, ptr_a: int, ptr_b: int):
    """((a_kmajor, lda), (b_kmajor, ldb)) when TMA descriptors can read both operands, else None."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if K == 0:
        return None
    elem = a.element_size()
    ta = _tma_operand(M, K, a.stride(-2), a.stride(-1), elem, ptr_a, cols_is_k=True)
    tb = _tma_operand(K, N, b.stride(-2), b.stride(-1), elem, ptr_b, cols_is_k=False)
    if ta is None or tb is None:
        return None
    # Stacked batches: the (unit-stride) columns of a K-major A are K, so its outer dim is M.
    if not (_stacked(a, ta[0], ta[1]) and _stacked(b, not tb[0], tb[1])):
        return None
    return ta, tb


def pointer_kernel_reason(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Why operands laid out like ``a`` and ``b`` would take the pointer kernel rather than
    the TMA kernel, or None. Judged from shapes, strides and storage offsets alone, so it
    works on fake tensors too (allocations themselves are assumed 16-byte aligned, as
    torch's allocators make them); the same rules as ``_tma_layout`` and ``batch_fits``.
    """
    offset = lambda t: t.storage_offset() * t.element_size()  # noqa: E731
    operands = _tma_operands(a, b, offset(a), offset(b))
    if operands is None:
        return "its operands are not TMA-readable (rows not 16-byte aligned or batches not stacked): the pointer kernel"
    (a_kmajor, _), (b_kmajor, _) = operands
    if _tf32_a_from_registers((a_kmajor, None, b_kmajor), input_precision(a.dtype)):
        return "TF32 with an M-major A and a K-major B: the pointer kernel"
    M, K = a.shape[-2:]
    batch = a.shape[0] if a.dim() == 3 else 1
    problem = Problem(M, b.shape[-1], K, batch, a.element_size(), str(a.dtype).removeprefix("torch."), tma=True,
                      a_kmajor=a_kmajor, b_kmajor=b_kmajor)  # fmt: skip
    # 64-deep K steps: the narrowest the heuristic falls back to before the pointer kernel.
    if not batch_fits(problem, MatmulConfig("tma", 128, 128, 64)):
        return f"a batch stacked along K = {K}, not a multiple of 64: the pointer kernel"
    return None


def _tf32_a_from_registers(layout, precision: str) -> bool:
    """TF32 with an M-major A and a K-major B: the TMA kernel would have to take A from
    registers, which computed wrong results with a bias epilogue on the H200 (triton 3.6:
    every time with split-K, one run in three without; kernels/matmul_tma.py). Such calls
    take the pointer kernel. Root cause not isolated; the likeliest is the ordering hazard of
    a register-operand wgmma, whose registers must not change before the wgmma completes
    (discussed in triton-lang/triton#5003), with no minimal repro filed yet."""
    return precision == "tf32" and not layout[0] and layout[2]


def _tma_layout(a, b, out):
    """(a_kmajor, lda, b_kmajor, ldb, c_tma, ldc) when the TMA kernel can take this call, else None."""
    operands = _tma_operands(a, b, a.data_ptr(), b.data_ptr())
    if operands is None:
        return None
    ta, tb = operands
    M, N = a.shape[-2], b.shape[-1]
    oelem = out.element_size()
    tc = _tma_operand(M, N, out.stride(-2), out.stride(-1), oelem, out.data_ptr(), cols_is_k=True)
    c_tma = tc is not None and tc[0] and _stacked(out, True, tc[1])  # row-major output only
    return ta[0], ta[1], tb[0], tb[1], c_tma, tc[1] if c_tma else out.stride(-2)


_NUM_SMS: dict[int, int] = {}
_INTERPRETER_NUM_SMS = 4  # a few programs, so the persistent loop runs several tiles each


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return _INTERPRETER_NUM_SMS
    n = _NUM_SMS.get(device.index)
    if n is None:
        n = _NUM_SMS[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return n


# Programmatic dependent launch of the eager kernels (kernels/matmul.py, _dependent_launch):
# the mode, 0 off, 1 wait, 2 wait and let the next kernel launch at once; on Hopper and later
# only (griddepcontrol is sm_90 PTX), never in the interpreter. Off: on the H200 (bench/ab_pdl.py,
# bench/results/2026-12-01-NVIDIA_H200-ab-pdl.txt, CUDA graphs) mode 1 ran back-to-back decode
# matmuls 1-8% faster, but a matmul followed by one of torch's kernels (launched without PDL),
# as in a model, 1-3.5% slower on every shape; mode 2 ran row-major K = 14336 rows 16% slower
# even back to back. A switch for that A/B (``pdl_mode``); plans keep the mode they were made with.
PDL = 0
_PDL_DEVICES: dict[int, bool] = {}


def _pdl(device: torch.device) -> int:
    if not PDL or device.type != "cuda" or interpreting():
        return 0
    ok = _PDL_DEVICES.get(device.index)
    if ok is None:
        ok = _PDL_DEVICES[device.index] = torch.cuda.get_device_capability(device) >= (9, 0)
    return PDL if ok else 0


def clear_plans() -> None:
    """Drop every launch plan: the next call of each signature plans again."""
    _PLANS.clear()
    _FAST_PLANS.clear()


# What launcher_setting may switch (benchmarks, tests): the PDL mode, the descriptor
# prefetch, and the persistent kernel's program count (configs.persistent_programs).
_LAUNCHER_SETTINGS = ("PDL", "PREFETCH_DESCRIPTORS", "persistent_programs")


@contextlib.contextmanager
def launcher_setting(name: str, value):
    """Launch with the module setting ``name`` set to ``value`` inside the block; plans made
    inside or before it are dropped at both ends, so each side plans with its own setting."""
    if name not in _LAUNCHER_SETTINGS:
        raise ValueError(f"launcher_setting: expected one of {', '.join(_LAUNCHER_SETTINGS)}, got {name!r}")
    settings = globals()
    before = settings[name]
    settings[name] = value
    clear_plans()
    try:
        yield
    finally:
        settings[name] = before
        clear_plans()


def pdl_mode(mode: int):
    """Launch with PDL ``mode`` inside the block (``launcher_setting("PDL", mode)``)."""
    return launcher_setting("PDL", mode)


# The TMA kernel prefetches its descriptors into the tensormap cache as it starts
# (kernels/matmul_tma.py, _prefetch_descriptors). Switched off in bench/ab_prefetch.py
# (launcher_setting); plans keep the setting they were made with.
PREFETCH_DESCRIPTORS = True


def _raw_stream(device: torch.device) -> int:
    """The current stream's handle (what a launch goes on); 0 on the CPU (the interpreter)."""
    return torch._C._cuda_getCurrentRawStream(device.index) if device.type == "cuda" else 0


# Direct launches through the compiled kernel's launcher (see _Plan.launch); switched off for
# the process if that launcher ever rejects the call, e.g. after a Triton change of its
# calling convention.
_DIRECT_LAUNCH = True


_RUNTIME_KNOBS = None


def _launch_hooks_active() -> bool:
    # Profilers (proton) register launch hooks; the direct launch skips them, so take
    # Triton's own path while any is registered.
    global _RUNTIME_KNOBS
    if _RUNTIME_KNOBS is None:
        from triton import knobs

        _RUNTIME_KNOBS = knobs.runtime
    for hook in (_RUNTIME_KNOBS.launch_enter_hook, _RUNTIME_KNOBS.launch_exit_hook):
        if hook is not None and (getattr(hook, "calls", None) is None or hook.calls):
            return True
    return False


class _Plan:
    """One call signature's kernel, config, grid and (after the first launch) compiled kernel.

    Everything about a call except its data pointers and alpha/beta is fixed by the plan's
    key (shapes, strides, dtypes, device, alignment, flags), so the arguments between the
    pointers and the constexprs are computed once (``mid``).
    """

    __slots__ = ("cfg", "problem", "layout", "grid", "num_tiles", "compiled", "consts", "device", "mid", "has_bias",
                 "c_tma", "descs", "raw", "encoded", "pdl")  # fmt: skip

    def __init__(self, problem: Problem, cfg: MatmulConfig, layout, flags: dict, device: torch.device):
        self.problem, self.cfg, self.layout, self.device = problem, cfg, layout, device
        self.compiled = None
        self.mid = None
        self.descs = None
        self.raw = None  # (C launcher, tensormap metadata, flags) once looked up; False: not available
        self.encoded = {}  # (operand slot, data pointer) -> its expanded tensormap arguments
        self.c_tma = False
        self.has_bias = flags["HAS_BIAS"]
        self.pdl = _pdl(device)
        p = problem
        self.num_tiles = triton.cdiv(p.M, cfg.block_m) * triton.cdiv(p.N, cfg.block_n) * p.batch
        if cfg.kernel == "tma":
            a_kmajor, _, b_kmajor, _, c_tma, _ = layout
            tf32 = flags["INPUT_PRECISION"] == "tf32" and not interpreting()
            # TF32 wgmma reads only K-major operands from shared memory; an N-major B goes
            # through registers instead, as the first operand (see the kernel).
            swap_ab = tf32 and a_kmajor and not b_kmajor
            self.grid = (persistent_programs(self.num_tiles * cfg.split_k, p.num_sms * cfg.programs_per_sm),)
            # A stacked batch's TMA store would spill a partial tile into the next matrix.
            c_tma = self.c_tma = c_tma and (p.batch == 1 or p.M % cfg.block_m == 0)
            prefetch = 0 if interpreting() or not PREFETCH_DESCRIPTORS else 3 if c_tma else 2
            self.consts = (
                a_kmajor, b_kmajor, c_tma, flags["HAS_BIAS"], flags["BIAS_MODE"], flags["SCALE_ACC"],
                flags["INPUT_PRECISION"], swap_ab, flags["INTERPRETER_BF16"],
                cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m, cfg.split_k,
                cfg.epilogue_subtile, cfg.flatten, cfg.warp_specialize, self.pdl, prefetch,
            )  # fmt: skip
        else:
            self.grid = (self.num_tiles,)
            self.consts = (
                flags["HAS_BIAS"], flags["SCALE_ACC"], flags["INPUT_PRECISION"], flags["INTERPRETER_BF16"],
                cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m,
                # The interpreter does not make strides of 1 constants, so it gets no hint.
                1 if interpreting() else pointer_kernel_divisor(p.divisor), self.pdl,
            )  # fmt: skip

    @property
    def kernel(self):
        return _matmul_kernel_tma if self.cfg.kernel == "tma" else _matmul_kernel

    def _mid(self, a, b, out, bias):
        """The arguments between the pointers and alpha/beta, in signature order."""
        p, cfg = self.problem, self.cfg
        if cfg.kernel == "tma":
            ldc = self.layout[5]
            ocn = out.stride()[-1]
            ocb = out.stride(0) if out.dim() == 3 else 0
            bsm, bsn = bias.stride()[-2:] if self.has_bias else (0, 0)
            kps = k_per_split(p.K, cfg.block_k, cfg.split_k)
            return (p.M, p.N, p.K, kps, p.batch, self.grid[0], ocb, ldc, ocn, bsm, bsn)
        sa = a.stride() if a.dim() == 3 else (0, *a.stride())
        sb = b.stride() if b.dim() == 3 else (0, *b.stride())
        so = out.stride() if out.dim() == 3 else (0, *out.stride())
        if self.has_bias:
            sbias = bias.stride() if bias.dim() == 3 else (0, *bias.stride())
        else:
            sbias = (0, 0, 0)
        return (p.M, p.N, p.K, *sa, *sb, *so, *sbias)

    def _descriptors(self, a, b, out):
        """Host-side TMA descriptors of A, B and C (C's only with a TMA store, else C itself):
        each over its operand's storage order, a batch stacked along the outer dimension,
        blocks the size of the tiles (see kernels/matmul_tma.py)."""
        p, cfg = self.problem, self.cfg
        a_kmajor, lda, b_kmajor, ldb, _, ldc = self.layout
        bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
        if a_kmajor:
            a_desc = TensorDescriptor(a, [p.batch * p.M, p.K], [lda, 1], [bm, bk])
        else:
            a_desc = TensorDescriptor(a, [p.batch * p.K, p.M], [lda, 1], [bk, bm])
        if b_kmajor:
            b_desc = TensorDescriptor(b, [p.batch * p.N, p.K], [ldb, 1], [bn, bk])
        else:
            b_desc = TensorDescriptor(b, [p.batch * p.K, p.N], [ldb, 1], [bk, bn])
        if not self.c_tma:
            return a_desc, b_desc, out
        sub_n = bn // 2 if cfg.epilogue_subtile else bn
        return a_desc, b_desc, TensorDescriptor(out, [p.batch * p.M, p.N], [ldc, 1], [bm, sub_n])

    def _rebased_descriptors(self, a, b, out):
        """The plan's descriptors over new tensors of the same signature. Everything but the
        base is fixed by the plan's key, and so are the checks TensorDescriptor's constructor
        makes, so the first call's descriptors are copied rather than rebuilt (0.4 against
        1.5 us of host time each, measured on the CI machine's CPU)."""
        return [base if desc is None else _rebased(desc, base) for desc, base in zip(self.descs, (a, b, out))]

    def args(self, a, b, out, bias, alpha, beta):
        """The kernel's arguments in signature order, constexprs included (tensors as tensors)."""
        if self.mid is None:
            self.mid = self._mid(a, b, out, bias)
        bias_arg = bias if self.has_bias else out
        if self.cfg.kernel == "tma":
            ws, locks = self._split_k_buffers(_raw_stream(out.device)) if self.cfg.split_k > 1 else (out, out)
            descs = self._descriptors(a, b, out)
            if self.descs is None:
                # Kept without their tensors: a plan must not keep a call's tensors alive (CUDA-graph
                # trees reject a live allocation in their pool that is not a graph output).
                self.descs = [_rebased(d, None) if isinstance(d, TensorDescriptor) else None for d in descs]
            return (*descs, out, bias_arg, ws, locks, *self.mid, float(alpha), float(beta), *self.consts)
        return (a, b, out, bias_arg, *self.mid, float(alpha), float(beta), *self.consts)

    def _split_k_buffers(self, stream: int):
        """Split-K's fp32 partials (uninitialized: every slice writes its own before any is
        read) and its zeroed per-tile counters (ops/split_k.py: reused, no memset)."""
        cfg = self.cfg
        ws = torch.empty(self.num_tiles * cfg.split_k * cfg.block_m * cfg.block_n, dtype=torch.float32,
                         device=self.device)  # fmt: skip
        return ws, split_k.counters(self.device, self.num_tiles, stream)

    def launch(self, a, b, out, bias, alpha, beta):
        """Launch on tensors: the first time through Triton's JIT, then directly."""
        compiled = self.compiled
        if compiled is not None and _DIRECT_LAUNCH and not _launch_hooks_active():
            if self.launch_direct(a, b, out, bias, alpha, beta):
                return
        args = self.args(a, b, out, bias, alpha, beta)
        with interpreter_lock():
            compiled = self.kernel[self.grid](*args, **self._launch_options())
        if not interpreting() and hasattr(compiled, "packed_metadata") and hasattr(compiled, "function"):
            self.compiled = compiled

    def launch_direct(self, a, b, out, bias, alpha, beta) -> bool:
        """Launch through the compiled kernel's launcher, pointers as integers.

        Triton's own launch (JITFunction.run, triton 3.6 runtime/jit.py) ends in this same
        call after binding and specializing the arguments, which the plan has done once:
        same kernel, same arguments, no launch metadata. Integer pointers also skip the
        launcher's per-argument ``data_ptr()`` call and pointer-attribute query. The TMA
        kernel goes one level further down where the launcher is triton 3.6's (``_raw_launcher``):
        straight to the C launcher, with each operand's encoded tensormap cached by data
        pointer; elsewhere it passes the first call's descriptors, rebased. Returns False
        (nothing launched) if the launcher rejects the call.
        """
        compiled = self.compiled
        stream = torch._C._cuda_getCurrentRawStream(self.device.index)
        pout = out.data_ptr()
        pbias = bias.data_ptr() if self.has_bias else pout
        try:
            if self.cfg.kernel == "tma":
                pws = plocks = pout
                if self.cfg.split_k > 1:
                    ws, locks = self._split_k_buffers(stream)  # alive until the launch returns
                    pws, plocks = ws.data_ptr(), locks.data_ptr()
                tail = (pout, pbias, pws, plocks, *self.mid, float(alpha), float(beta), *self.consts)
                if self.raw is None:
                    self.raw = _raw_launcher(compiled, 3 if self.c_tma else 2) or False
                if self.raw:
                    launcher, _, (cooperative, pdl) = self.raw
                    c_args = self._tensormap(2, out) if self.c_tma else (pout,)
                    launcher(self.grid[0], 1, 1, stream, compiled.function, cooperative, pdl, None, None,
                             compiled.packed_metadata, None, None, None,
                             *self._tensormap(0, a), *self._tensormap(1, b), *c_args, *tail)  # fmt: skip
                    return True
                args = (*self._rebased_descriptors(a, b, out), *tail)
            else:
                args = (a.data_ptr(), b.data_ptr(), pout, pbias, *self.mid, float(alpha), float(beta), *self.consts)
            compiled.run(self.grid[0], 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                         *args)  # fmt: skip
        # Rebasing (a TensorDescriptor that is no longer a plain dataclass) or the launcher's
        # argument parsing: both fail before anything is launched.
        except (TypeError, SystemError, AttributeError) as e:
            _disable_direct_launch(e)
            return False
        return True

    def _tensormap(self, slot: int, t: torch.Tensor) -> tuple:
        """Operand ``slot``'s descriptor over ``t`` as the C launcher takes it: the encoded
        tensormap, shape and strides. Everything but the base is fixed by the plan, so the
        encoding is cached by data pointer (no tensor is kept)."""
        key = (slot, t.data_ptr())
        args = self.encoded.get(key)
        if args is None:
            if len(self.encoded) >= 32:
                self.encoded.clear()
            desc = _rebased(self.descs[slot], t)
            args = self.encoded[key] = tuple(_tensormap_args(desc, self.raw[1][slot]))
        return args

    def compile(self, a, b, out, bias):
        """Compile without launching (fills Triton's disk cache)."""
        args = self.args(a, b, out, bias, 1.0, 1.0)
        self.kernel.warmup(*args, grid=self.grid, **self._launch_options())

    def _launch_options(self) -> dict:
        cfg = self.cfg
        options = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        if self.pdl:
            options["launch_pdl"] = True  # the interpreter takes no such option
        return options


def _rebased(desc: TensorDescriptor, base) -> TensorDescriptor:
    """A copy of ``desc`` over ``base``, without TensorDescriptor's constructor checks."""
    copy = object.__new__(TensorDescriptor)
    copy.__dict__.update(desc.__dict__)
    copy.base = base
    return copy


# Triton 3.6's launcher (backends/nvidia/driver.py) has three layers: CudaLauncher.__call__
# allocates scratch memory (this kernel needs none) and calls ``launch``, a Python closure
# that expands every TensorDescriptor argument into an encoded tensormap
# (cuTensorMapEncodeTiled) plus shape and strides, then calls the C launcher. On the H200's
# host (bench/host_overhead.py) the whole call took 19 us, the C launcher alone 5.3 us and
# encoding three tensormaps 3.9 us. The raw path calls the C launcher directly with cached
# encodings: a loop's tensors mostly come back at the same addresses from the caching
# allocator, and a weight never moves. It is taken only where the closure has 3.6's exact
# shape (triton 3.7 passes the kernel arguments as one list: there the rebased
# descriptors go through ``compiled.run`` as before). Upstream: triton-lang/triton#6463
# encodes the tensormap "at the last second in the kernel launcher" and leaves caching for
# later; pytorch/pytorch#188823 adds the same data-pointer cache to Inductor's launcher.


def _raw_launcher(compiled, n_descs: int):
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


def _tensormap_args(desc: TensorDescriptor, meta: dict) -> list:
    """What Triton 3.6's launcher passes the C launcher for one descriptor."""
    from triton.backends.nvidia.driver import make_tensordesc_arg

    return make_tensordesc_arg(desc, meta)


def _disable_direct_launch(err: Exception) -> None:
    global _DIRECT_LAUNCH
    _DIRECT_LAUNCH = False
    warnings.warn(
        f"inductor_mm_plugin: the direct kernel launch failed ({type(err).__name__}: {err}); "
        "using Triton's launch path from now on, which costs more host time per call",
        RuntimeWarning,
        2,
    )


def pow2_divisor(values) -> int:
    """The largest power of two up to 16 dividing every value other than 0 and 1."""
    d = 16
    while d > 1 and any(v % d for v in values if v not in (0, 1)):
        d //= 2
    return d


def pointer_kernel_divisor(divisor: int) -> int:
    """The pointer kernel's DIVISOR for a problem's ``pow2_divisor`` of its sizes and strides:
    1 where that is 16, since Triton specializes on 16 already (the kernel stays the one it
    compiled before), else the divisor itself."""
    return 1 if divisor >= 16 else divisor


def _bias_mode(bias: torch.Tensor) -> str:
    sm, sn = bias.stride()[-2:]
    return "n" if sm == 0 else "m" if sn == 0 else "mn"


_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 8192


def _problem(a, b, out, layout, has_bias, precision="ieee") -> Problem:
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = a.shape[0] if a.dim() == 3 else 1
    tma = layout is not None
    return Problem(
        M=M, N=N, K=K, batch=batch, elem_bytes=a.element_size(), dtype=str(a.dtype).removeprefix("torch."),
        tma=tma, a_kmajor=layout[0] if tma else a.stride(-1) == 1, b_kmajor=layout[2] if tma else b.stride(-2) == 1,
        c_tma=layout[4] if tma else False, has_bias=has_bias, num_sms=_num_sms(a.device), precision=precision,
        divisor=pow2_divisor((M, N, K, *a.stride(), *b.stride(), *out.stride())),
    )  # fmt: skip


_TUNING_CACHES: dict[str, tuning.TuningCache] = {}


def _tuning_cache(device: torch.device) -> tuning.TuningCache:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu-interpreter"
    cache = _TUNING_CACHES.get(gpu)
    if cache is None:
        cache = _TUNING_CACHES[gpu] = tuning.TuningCache(gpu, triton.__version__, tuning.kernel_source_hash())
    return cache


def _time_config(problem, cfg, layout, flags, a, b, out, bias, alpha, beta) -> float:
    import triton.testing

    plan = _Plan(problem, cfg, layout, flags, a.device)
    run = lambda: plan.launch(a, b, out, bias, alpha, beta)  # noqa: E731
    run()  # compile outside the timed region
    return triton.testing.do_bench(run, warmup=5, rep=25, return_mode="median")


def _choose(problem, layout, flags, a, b, out, bias, alpha, beta, autotune: bool) -> MatmulConfig:
    heuristic = heuristic_config(problem, interpreting())
    if not autotune or interpreting():
        return heuristic
    cache = _tuning_cache(a.device)
    if torch.cuda.is_current_stream_capturing():
        # No timing inside a graph capture: a bucket tuned before (warmup) or the heuristic.
        return cache.get(problem.bucket()) or heuristic
    time_fn = lambda cfg: _time_config(problem, cfg, layout, flags, a, b, out, bias, alpha, beta)  # noqa: E731
    return tuning.autotune(problem.bucket(), candidate_configs(problem), time_fn, cache)


def _launch(a, b, out, bias=None, beta=1.0, alpha=1.0, *, autotune=None, config=None, compile_only=False) -> _Plan:
    """out = alpha * a @ b (+ beta * bias) on 2-D or 3-D (batched) views; returns the plan used.

    ``bias``, when given, is already expanded to ``out``'s shape (stride 0 where broadcast).
    ``config`` forces a config (benchmarks, tests); ``compile_only`` compiles without
    launching (parallel precompilation). No checks here: callers validate first.
    """
    if a.dim() == 3 and a.shape[0] == 1:
        # One matrix: 2-D views, which the TMA kernel can take.
        a, b, out = a[0], b[0], out[0]
        bias = None if bias is None else bias[0]
    has_bias = bias is not None and beta != 0
    autotune = _AUTOTUNE if autotune is None else autotune
    key = (
        a.dtype, a.device, a.shape, b.shape, a.stride(), b.stride(), out.stride(),
        bias.stride() if has_bias else None, alpha != 1, torch.backends.cuda.matmul.allow_tf32, autotune, config,
        # Triton specializes pointer arguments on 16-byte alignment.
        a.data_ptr() % 16, b.data_ptr() % 16, out.data_ptr() % 16, bias.data_ptr() % 16 if has_bias else 0,
    )  # fmt: skip
    plan = _PLANS.get(key)
    interpreter_bf16 = interpreting() and a.dtype == torch.bfloat16
    # Interpreter only: its fp32 -> bf16 cast truncates instead of rounding to nearest
    # even (cast_impl passes no rounding mode; triton 3.7.1 runtime/interpreter.py), so
    # the kernel stores fp32 and torch rounds. The GPU path stores bf16 directly.
    kernel_out = out.new_empty(out.shape, dtype=torch.float32) if interpreter_bf16 else out
    with _device_guard(a.device):
        if plan is None:
            flags = dict(
                HAS_BIAS=has_bias,
                BIAS_MODE=_bias_mode(bias) if has_bias else "mn",
                SCALE_ACC=alpha != 1,
                INPUT_PRECISION=input_precision(a.dtype),
                INTERPRETER_BF16=interpreter_bf16,
            )
            # The TMA kernel's bias has no batch stride: a batched bias takes the pointer kernel.
            layout = None if has_bias and a.dim() == 3 else _tma_layout(a, b, kernel_out)
            if layout is not None and _tf32_a_from_registers(layout, flags["INPUT_PRECISION"]):
                layout = None
            problem = _problem(a, b, kernel_out, layout, has_bias, flags["INPUT_PRECISION"])
            if config is not None:
                cfg = config
                if cfg.kernel == "tma" and (layout is None or not batch_fits(problem, cfg)):
                    raise ValueError(f"config {cfg.short()} needs TMA-compatible operands (16-byte aligned rows, "
                                     "batches stacked; not TF32 with an M-major A and a K-major B)")
            else:
                cfg = _choose(problem, layout, flags, a, b, kernel_out, bias, alpha, beta, autotune)
            plan = _Plan(problem, cfg, layout if cfg.kernel == "tma" else None, flags, a.device)
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = plan
        if compile_only:
            plan.compile(a, b, kernel_out, bias)
            return plan
        plan.launch(a, b, kernel_out, bias, alpha, beta)
    if interpreter_bf16:
        out.copy_(kernel_out)
    return plan


def _candidates_for(a: torch.Tensor, b: torch.Tensor) -> list[MatmulConfig]:
    """What autotuning would time for ``mm(a, b)`` (benchmarks precompile these in parallel)."""
    out = a.new_empty((a.shape[0], b.shape[1]))
    problem = _problem(a, b, out, _tma_layout(a, b, out), False, input_precision(a.dtype))
    return candidate_configs(problem, interpreting())


def chosen_config(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> MatmulConfig | None:
    """The config a call ``mm(a, b)`` (``addmm`` with ``bias``) ran with, if it ran already."""
    for key, plan in _PLANS.items():
        if key[:6] == (a.dtype, a.device, a.shape, b.shape, a.stride(), b.stride()) and key[10] == _AUTOTUNE:
            if (key[7] is not None) == (bias is not None):
                return plan.cfg
    return None


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
        plan = _launch(a, b, out, bias_t, 1.0, 1.0, autotune=tune)
        chosen[shape] = plan.cfg
    return chosen


# The three entry points below are what the custom ops run. ``out`` exists for tests,
# which pass a NaN-poisoned buffer to prove that every element is written.


# Repeated calls: a call whose signature (dtypes, devices, shapes, strides, pointer
# alignment, output layout, flags) has been validated and planned before skips straight to
# the plan's direct launch. Checks only ever pass or fail on that signature, so they would
# give the same answer again. GPU only: the interpreter path needs its fp32 staging output.
_FAST_PLANS: dict[tuple, _Plan] = {}


def _signature(a, b, out, extra):
    tf32 = a.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    out_sig = None if out is None else (out.shape, out.stride(), out.dtype, out.device, out.data_ptr() % 16)
    return (
        a.dtype, b.dtype, a.device, b.device, a.shape, b.shape, a.stride(), b.stride(),
        a.data_ptr() % 16, b.data_ptr() % 16, out_sig, tf32, _AUTOTUNE, extra,
    )  # fmt: skip


def _launch_and_remember(key, a, b, res, bias=None, beta=1.0, alpha=1.0) -> torch.Tensor:
    """The checked path: plan and launch (nothing to launch for an empty output), then
    remember the plan for the call signature ``key`` (None: no fast path, e.g. on the CPU)."""
    if res.numel():
        plan = _launch(a, b, res, bias, beta, alpha)
        if key is not None and plan.compiled is not None:
            if len(_FAST_PLANS) >= _MAX_PLANS:
                _FAST_PLANS.clear()
            _FAST_PLANS[key] = plan
    return res


def _run_direct(plan, a, b, out, bias, alpha, beta) -> bool:
    if not _DIRECT_LAUNCH or _launch_hooks_active():
        return False
    if plan.device.index != torch.cuda.current_device():
        with torch.cuda.device(plan.device):
            return plan.launch_direct(a, b, out, bias, alpha, beta)
    return plan.launch_direct(a, b, out, bias, alpha, beta)


def mm_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check_tensor_args("inductor_mm_plugin.mm", ("a", "b"), a, b)
    key = None
    if a.is_cuda:
        key = _signature(a, b, out, None)
        plan = _FAST_PLANS.get(key)
        if plan is not None:
            res = a.new_empty((a.shape[0], b.shape[1])) if out is None else out
            if _run_direct(plan, a, b, res, None, 1.0, 1.0):
                return res
    check_mm_args("inductor_mm_plugin.mm", a, b)
    reason = kernel_unsupported_reason(a, b)
    if reason is not None:
        _warn_fallback("inductor_mm_plugin.mm", reason)
        return torch.mm(a, b).contiguous()
    res = a.new_empty((a.shape[0], b.shape[1])) if out is None else out
    return _launch_and_remember(key, a, b, res)


def addmm_launch(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta=1, alpha=1, out: torch.Tensor | None = None
) -> torch.Tensor:
    if not (isinstance(bias, torch.Tensor) and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check_tensor_args("inductor_mm_plugin.addmm", ("bias", "a", "b"), bias, a, b)
    if type(beta) is not int or type(alpha) is not int:  # an int always converts (int64 < float32's max)
        beta = check_scalar("inductor_mm_plugin.addmm", "beta", beta, a.dtype)
        alpha = check_scalar("inductor_mm_plugin.addmm", "alpha", alpha, a.dtype)
    key = None
    if a.is_cuda:
        key = _signature(a, b, out, (bias.shape, bias.stride(), bias.dtype, bias.device, bias.data_ptr() % 16,
                                     beta == 0, alpha == 1))  # fmt: skip
        plan = _FAST_PLANS.get(key)
        if plan is not None:
            res = a.new_empty((a.shape[0], b.shape[1])) if out is None else out
            if _run_direct(plan, a, b, res, bias if beta != 0 else None, alpha, beta):
                return res
    check_addmm_args("inductor_mm_plugin.addmm", bias, a, b)
    reason = kernel_unsupported_reason(a, b, bias)
    if reason is not None:
        _warn_fallback("inductor_mm_plugin.addmm", reason)
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha).contiguous()
    M, N = a.shape[0], b.shape[1]
    res = a.new_empty((M, N)) if out is None else out
    return _launch_and_remember(key, a, b, res, bias.expand(M, N), beta, alpha)


def bmm_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check_tensor_args("inductor_mm_plugin.bmm", ("a", "b"), a, b)
    key = None
    if a.is_cuda:
        key = _signature(a, b, out, "bmm")
        plan = _FAST_PLANS.get(key)
        if plan is not None:
            res = a.new_empty((a.shape[0], a.shape[1], b.shape[2])) if out is None else out
            # The plan of a batch of one was made on 2-D views (see _launch).
            views = (a[0], b[0], res[0]) if a.shape[0] == 1 else (a, b, res)
            if _run_direct(plan, *views, None, 1.0, 1.0):
                return res
    check_bmm_args("inductor_mm_plugin.bmm", a, b)
    reason = kernel_unsupported_reason(a, b)
    if reason is not None:
        _warn_fallback("inductor_mm_plugin.bmm", reason)
        return torch.bmm(a, b).contiguous()
    res = a.new_empty((a.shape[0], a.shape[1], b.shape[2])) if out is None else out
    return _launch_and_remember(key, a, b, res)


# -------------------------------------------------------------------------------- ops
# Defined with ``torch.library.Library`` rather than ``torch.library.custom_op``, for host
# time: custom_op wraps the backend kernel and the autograd kernel in Python layers
# (argument flattening, an output-aliasing check, a Dynamo-disable frame) that cost about
# 9 us per call on CI's CPU (a no-op body: 15 us against 6 us here) and 16-21 us on the
# H200's host, more than the whole kernel of a 768^3 matmul (upstream: pytorch/pytorch#139500,
# #177109; when custom_op's fast path lands in the supported torch versions, this can go
# back to custom_op). The registrations are the
# ones custom_op makes: schema with the pt2_compliant tag, one kernel for every backend
# (CompositeExplicitAutograd), a fake kernel, and an autograd kernel that leaves the
# graph below autograd when no input needs a gradient.

_LIB = torch.library.Library("inductor_mm_plugin", "DEF")
_PT2 = (torch.Tag.pt2_compliant_tag,)
_LIB.define("mm(Tensor a, Tensor b) -> Tensor", tags=_PT2)
_LIB.define("addmm(Tensor bias, Tensor a, Tensor b, *, Scalar beta=1, Scalar alpha=1) -> Tensor", tags=_PT2)
_LIB.define("bmm(Tensor a, Tensor b) -> Tensor", tags=_PT2)
_LIB.impl("mm", mm_launch, "CompositeExplicitAutograd")
_LIB.impl("addmm", addmm_launch, "CompositeExplicitAutograd")
_LIB.impl("bmm", bmm_launch, "CompositeExplicitAutograd")


def _aten_for_sparse(name: str, check, arg_names: tuple[str, ...]):
    """The kernel of op ``name`` for sparse tensors, which the Triton kernel cannot read:
    torch's own op, so its result (with a KernelFallbackWarning) or its error. A sparse
    result comes back dense and contiguous, the op's output as its fake has it."""
    op, aten = f"inductor_mm_plugin.{name}", getattr(torch, name)

    def kernel(*args, **kwargs):
        check_tensor_args(op, arg_names, *args)
        check(op, *args)  # shapes, dtypes, devices: the same messages as the dense path's
        # Below ADInplaceOrView too, as in inference mode: below autograd alone, torch 2.13's
        # sparse @ sparse (aten::_sparse_sparse_matmul) returned an empty result on the CPU
        # (no upstream issue found).
        with torch._C._AutoDispatchBelowADInplaceOrView():
            result = aten(*args, **kwargs)
        _warn_fallback(op, layout_unsupported_reason(*args))
        return (result.to_dense() if result.layout != torch.strided else result).contiguous()

    return kernel


def _aten_for_nested(name: str, arg_names: tuple[str, ...]):
    """The kernel of op ``name`` for nested tensors: torch's own op, above autograd (a
    composite kernel), so torch's op records its own gradients; the result stays nested."""
    op, aten = f"inductor_mm_plugin.{name}", getattr(torch, name)

    def kernel(*args, **kwargs):
        check_tensor_args(op, arg_names, *args)
        result = aten(*args, **kwargs)
        _warn_fallback(op, layout_unsupported_reason(*args))
        return result

    return kernel


# The dispatch keys of sparse tensors (COO; CSR, CSC, BSR, BSC), and the alias key of the
# composite kernel nested tensors run (strided and jagged layouts, with or without autograd,
# in inference mode too). Dense calls never reach these kernels, so they pay nothing for them.
SPARSE_KEYS = ("SparseCPU", "SparseCUDA", "SparseCsrCPU", "SparseCsrCUDA")
NESTED_KEY = "CompositeImplicitAutogradNestedTensor"
for _name, _check, _names in (("mm", check_mm_args, ("a", "b")), ("addmm", check_addmm_args, ("bias", "a", "b")),
                              ("bmm", check_bmm_args, ("a", "b"))):  # fmt: skip
    for _key in SPARSE_KEYS:
        _LIB.impl(_name, _aten_for_sparse(_name, _check, _names), _key)
    _LIB.impl(_name, _aten_for_nested(_name, _names), NESTED_KEY)

_MM = torch.ops.inductor_mm_plugin.mm.default
_ADDMM = torch.ops.inductor_mm_plugin.addmm.default
_BMM = torch.ops.inductor_mm_plugin.bmm.default


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.mm`` on the plugin's Triton kernel (the op ``torch.ops.inductor_mm_plugin.mm``)."""
    return _MM(a, b)


def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1) -> torch.Tensor:
    """``torch.addmm`` on the plugin's Triton kernel, the epilogue fused into it."""
    return _ADDMM(bias, a, b, beta=beta, alpha=alpha)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm`` on the plugin's Triton kernel."""
    return _BMM(a, b)


# ------------------------------------------------------------------------------- fake
# Output metadata is a pure function of the input shapes and dtypes, exactly what the
# real implementations return: a new contiguous tensor in the inputs' dtype.


@torch.library.register_fake("inductor_mm_plugin::mm", lib=_LIB)
def _mm_fake(a, b):
    check_mm_args("inductor_mm_plugin.mm", a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("inductor_mm_plugin::addmm", lib=_LIB)
def _addmm_fake(bias, a, b, *, beta=1, alpha=1):
    check_addmm_args("inductor_mm_plugin.addmm", bias, a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("inductor_mm_plugin::bmm", lib=_LIB)
def _bmm_fake(a, b):
    check_bmm_args("inductor_mm_plugin.bmm", a, b)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


# --------------------------------------------------------------------------- autograd
# Backward runs on the plugin's own ops. Incoming gradients may be non-contiguous
# (pytorch#194719); the kernel reads any strides, so they are passed as they come.


def _scaled(t: torch.Tensor, s) -> torch.Tensor:
    return t if s == 1 else t * s


def _addmm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_bias = grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        # Sum over the dims the bias was broadcast along, like torch's addmm backward.
        grad_bias = _scaled(grad.sum_to_size(ctx.bias_shape), ctx.beta)
    if ctx.needs_input_grad[1]:
        grad_a = _scaled(mm(grad, b.mT), ctx.alpha)
    if ctx.needs_input_grad[2]:
        grad_b = _scaled(mm(a.mT, grad), ctx.alpha)
    return grad_bias, grad_a, grad_b, None, None  # beta and alpha get none


class _MatmulFunction(torch.autograd.Function):
    """mm and bmm (``op``): the gradients are the same products with one operand transposed.
    Inside ``forward`` grad mode is off, so ``op`` passes its autograd kernel straight through."""

    @staticmethod
    def forward(ctx, op, a, b):
        ctx.op = op
        ctx.save_for_backward(a, b)
        return op(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        _, needs_a, needs_b = ctx.needs_input_grad
        grad_a = ctx.op(grad, b.mT) if needs_a else None
        grad_b = ctx.op(a.mT, grad) if needs_b else None
        return None, grad_a, grad_b


class _AddmmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, bias, a, b, beta, alpha):
        ctx.save_for_backward(a, b)
        ctx.bias_shape, ctx.beta, ctx.alpha = bias.shape, beta, alpha
        return _ADDMM(bias, a, b, beta=beta, alpha=alpha)

    backward = staticmethod(_addmm_backward)


def _needs_grad(*tensors: torch.Tensor) -> bool:
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t is None:
            return False  # below autograd, where the op's kernel raises torch's TypeError (check_tensor_args)
    return any(t.requires_grad for t in tensors)


# The autograd kernels. ``_AutoDispatchBelowAutograd`` is how torch's own register_autograd
# kernels (torch/_library/autograd.py) run an op below autograd; no public spelling exists.


def _matmul_autograd(op):
    def kernel(a, b):
        if _needs_grad(a, b):
            return _MatmulFunction.apply(op, a, b)
        with torch._C._AutoDispatchBelowAutograd():
            return op(a, b)

    return kernel


def _addmm_autograd(bias, a, b, *, beta=1, alpha=1):
    if _needs_grad(bias, a, b):
        return _AddmmFunction.apply(bias, a, b, beta, alpha)
    with torch._C._AutoDispatchBelowAutograd():
        return _ADDMM(bias, a, b, beta=beta, alpha=alpha)


_LIB.impl("mm", _matmul_autograd(_MM), "Autograd")
_LIB.impl("addmm", _addmm_autograd, "Autograd")
_LIB.impl("bmm", _matmul_autograd(_BMM), "Autograd")
