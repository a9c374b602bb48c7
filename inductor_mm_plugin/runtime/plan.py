"""A launch plan: one call signature's kernel, config, grid and arguments, bound once.

Everything about a call except its data pointers and alpha/beta is fixed by the plan's key
(shapes, strides, dtypes, device, alignment, flags), so the kernel's other arguments are
computed once, by name, and put in the kernel's parameter order by ``_in_signature_order``,
which checks the names against the kernel's signature. After the first launch through
Triton's JIT, a repeated call goes straight to the compiled kernel's launcher (direct.py).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from ..configs import MatmulConfig, Problem, k_per_split, tma_programs, whole_tiles
from ..interpreter import interpreting
from ..kernels.matmul import _matmul_kernel
from ..kernels.matmul_tma import _matmul_kernel_tma
from . import direct, split_k
from .device import device_guard, raw_stream
from .layout import TmaLayout, aligned, pointer_hints, settled


def load(compiled) -> None:
    """Load a kernel that ``warmup`` compiled: its binary into the CUDA context and its launcher
    built, which Triton otherwise does at the first launch (``_init_handles``, triton 3.6
    compiler/compiler.py; a TMA kernel's launcher takes about 0.1 s)."""
    init = getattr(compiled, "_init_handles", None)
    if init is not None and not interpreting():
        init()


class Flags(NamedTuple):
    """What a call asks of the epilogue and the dot, besides its config."""

    has_bias: bool
    bias_mode: str  # "n", "m" or "mn" (layout.bias_mode)
    scale_acc: bool  # alpha != 1
    input_precision: str  # "ieee" or "tf32"
    interpreter_bf16: bool  # the interpreter's bf16 workaround (kernels/matmul.py)
    activation: str = ""  # applied after the bias (kernels/activation.py); "" for none


# The tensors (or their pointers) each kernel takes first, then the per-plan arguments, then
# alpha and beta, then the constexprs.
_TMA_HEAD = ("a_desc", "b_desc", "c_desc", "c_ptr", "bias_ptr", "ws_ptr", "lock_ptr")
_PTR_HEAD = ("a_ptr", "b_ptr", "c_ptr", "bias_ptr", "ws_ptr", "lock_ptr")
_SCALARS = ("alpha", "beta")


def _in_signature_order(kernel, head: tuple, mid: dict, consts: dict) -> tuple[tuple, tuple]:
    """(mid, consts) as tuples in ``kernel``'s parameter order, after checking that its
    signature is ``head``, then exactly ``mid``'s names, alpha, beta, exactly ``consts``'."""
    names = list(kernel.arg_names)
    i = names.index("alpha") if "alpha" in names else len(names)
    ok = (tuple(names[: len(head)]) == head and set(names[len(head) : i]) == set(mid)
          and tuple(names[i : i + 2]) == _SCALARS and set(names[i + 2 :]) == set(consts))  # fmt: skip
    if not ok:
        raise TypeError(f"inductor_mm_plugin: the launch plan's arguments do not match {kernel.fn.__name__}'s "
                        f"signature {names}: head {head}, {sorted(mid)}, alpha, beta, {sorted(consts)}")  # fmt: skip
    return tuple(mid[n] for n in names[len(head) : i]), tuple(consts[n] for n in names[i + 2 :])


class Plan:
    """One call signature's kernel, config, grid and (after the first launch) compiled kernel."""

    __slots__ = ("cfg", "problem", "layout", "flags", "grid", "num_tiles", "compiled", "device", "consts", "mid",
                 "c_tma", "descs", "raw", "encoded", "copies")  # fmt: skip

    def __init__(self, problem: Problem, cfg: MatmulConfig, layout: TmaLayout | None, flags: Flags,
                 device: torch.device, copies: tuple[bool, bool] = (False, False)):  # fmt: skip
        self.problem, self.cfg, self.layout, self.flags, self.device = problem, cfg, layout, flags, device
        # (A, B): operands TMA cannot read in place, copied with aligned rows at every call
        # (layout.aligned) before the TMA kernel runs; the layout is the copies'.
        self.copies = copies
        self.compiled = None
        self.mid = None  # the per-plan arguments, once the first call's tensors are seen
        self.descs = None
        self.raw = None  # (C launcher, tensormap metadata, flags) once looked up; False: not available
        self.encoded = {}  # (operand slot, data pointer) -> its expanded tensormap arguments
        self.c_tma = False
        p = problem
        self.num_tiles = triton.cdiv(p.M, cfg.block_m) * triton.cdiv(p.N, cfg.block_n) * p.batch
        tile = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m)
        common = dict(HAS_BIAS=flags.has_bias, SCALE_ACC=flags.scale_acc, INPUT_PRECISION=flags.input_precision,
                      INTERPRETER_BF16=flags.interpreter_bf16, ACTIVATION=flags.activation, **tile)  # fmt: skip
        if cfg.kernel == "tma":
            tf32 = flags.input_precision == "tf32" and not interpreting()
            self.grid = (tma_programs(p, cfg),)
            # A stacked batch's TMA store would spill a partial tile into the next matrix.
            self.c_tma = layout.c_tma and (p.batch == 1 or p.M % cfg.block_m == 0)
            # Descriptors prefetched as the kernel starts (kernels/matmul_tma.py): A, B, and C
            # when it is stored through one; none in the interpreter.
            prefetch = 0 if interpreting() else 3 if self.c_tma else 2
            # TF32 wgmma reads only K-major operands from shared memory; an N-major B goes
            # through registers instead, as the first operand (see the kernel).
            self.consts = dict(
                common, A_KMAJOR=layout.a_kmajor, B_KMAJOR=layout.b_kmajor, C_TMA=self.c_tma,
                BIAS_MODE=flags.bias_mode, SWAP_AB=tf32 and layout.a_kmajor and not layout.b_kmajor,
                SPLIT_K=cfg.split_k, SPLIT_TAIL=cfg.split_tail, EPILOGUE_SUBTILE=cfg.epilogue_subtile, FLATTEN=cfg.flatten, PREFETCH=prefetch,
            )  # fmt: skip
        else:
            self.grid = (self.num_tiles * cfg.split_k,)
            self.consts = dict(common, SPLIT_K=cfg.split_k)  # and the alignment hints, in _bind

    @property
    def kernel(self):
        return _matmul_kernel_tma if self.cfg.kernel == "tma" else _matmul_kernel

    def _bind(self, a, b, out, bias) -> None:
        """The per-plan arguments and constexprs, in signature order (first call only)."""
        a, b, out = settled(a), settled(b), settled(out)  # as launch planned them
        p, cfg = self.problem, self.cfg
        bsm, bsn = bias.stride()[-2:] if self.flags.has_bias else (0, 0)
        if cfg.kernel == "tma":
            mid = dict(M=p.M, N=p.N, K=p.K, k_per_split=k_per_split(p.K, cfg.block_k, cfg.split_k), BATCH=p.batch,
                       num_programs=self.grid[0], num_whole=whole_tiles(p, cfg), stride_cb=out.stride(0) if out.dim() == 3 else 0,
                       stride_cm=self.layout.ldc, stride_cn=out.stride()[-1], stride_biasm=bsm, stride_biasn=bsn)  # fmt: skip
            head = _TMA_HEAD
        else:
            # (batch, row, column) strides of each operand; a matrix's batch stride is 0.
            strides = lambda t: t.stride() if t.dim() == 3 else (0, *t.stride())  # noqa: E731
            mid = dict(M=p.M, N=p.N, K=p.K, k_per_split=k_per_split(p.K, cfg.block_k, cfg.split_k))
            for name, dims, t in (("a", "bmk", a), ("b", "bkn", b), ("c", "bmn", out), ("bias", "bmn", bias)):
                values = strides(t) if name != "bias" or self.flags.has_bias else (0, 0, 0)
                mid.update({f"stride_{name}{d}": s for d, s in zip(dims, values)})
            head = _PTR_HEAD
            # The interpreter does not make strides of 1 constants, so it gets no hint.
            hints = pointer_hints(a, b, out)
            if interpreting():
                hints.update(A_DIVISOR=1, B_DIVISOR=1, C_DIVISOR=1)
            self.consts = dict(self.consts, **hints)
        self.mid, self.consts = _in_signature_order(self.kernel, head, mid, self.consts)

    def args(self, a, b, out, bias, alpha, beta) -> tuple:
        """The kernel's arguments in signature order, constexprs included (tensors as tensors)."""
        if self.mid is None:
            self._bind(a, b, out, bias)
        bias_arg = bias if self.flags.has_bias else out
        scalars = (float(alpha), float(beta))
        ws, locks = self._split_k_buffers(raw_stream(out.device)) if self.cfg.split_k > 1 else (out, out)
        if self.cfg.kernel == "tma":
            descs = self._descriptors(a, b, out)
            if self.descs is None:
                # Kept without their tensors: a plan must not keep a call's tensors alive (CUDA-graph
                # trees reject a live allocation in their pool that is not a graph output).
                self.descs = [direct.rebased(d, None) if isinstance(d, TensorDescriptor) else None for d in descs]
            return (*descs, out, bias_arg, ws, locks, *self.mid, *scalars, *self.consts)
        return (a, b, out, bias_arg, ws, locks, *self.mid, *scalars, *self.consts)

    def _descriptors(self, a, b, out):
        """Host-side TMA descriptors of A, B and C (C's only with a TMA store, else C itself):
        each over its operand's storage order, a batch stacked along the outer dimension,
        blocks the size of the tiles (see kernels/matmul_tma.py)."""
        p, cfg, lay = self.problem, self.cfg, self.layout
        bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
        if lay.a_kmajor:
            a_desc = TensorDescriptor(a, [p.batch * p.M, p.K], [lay.lda, 1], [bm, bk])
        else:
            a_desc = TensorDescriptor(a, [p.batch * p.K, p.M], [lay.lda, 1], [bk, bm])
        if lay.b_kmajor:
            b_desc = TensorDescriptor(b, [p.batch * p.N, p.K], [lay.ldb, 1], [bn, bk])
        else:
            b_desc = TensorDescriptor(b, [p.batch * p.K, p.N], [lay.ldb, 1], [bk, bn])
        if not self.c_tma:
            return a_desc, b_desc, out
        sub_n = bn // 2 if cfg.epilogue_subtile else bn
        return a_desc, b_desc, TensorDescriptor(out, [p.batch * p.M, p.N], [lay.ldc, 1], [bm, sub_n])

    def _split_k_buffers(self, stream: int):
        """Split-K's fp32 partials (uninitialized: every slice writes its own before any is
        read) and its zeroed per-tile counters (split_k.py: reused, no memset), for the tiles
        that are split: all of them, or with ``split_tail`` those past the whole ones."""
        cfg = self.cfg
        split = self.num_tiles - whole_tiles(self.problem, cfg)
        ws = torch.empty(split * cfg.split_k * cfg.block_m * cfg.block_n, dtype=torch.float32, device=self.device)
        return ws, split_k.counters(self.device, split, stream)

    def operands(self, a, b, copy: bool = True):
        """The operands the kernel reads: ``a`` and ``b``, or their aligned copies (``copies``)."""
        if self.copies[0]:
            a = aligned(a, copy)
        if self.copies[1]:
            b = aligned(b, copy)
        return a, b

    def launch(self, a, b, out, bias, alpha, beta) -> None:
        """Launch on tensors: the first time through Triton's JIT, then directly."""
        a, b = self.operands(a, b)
        if self.compiled is not None and direct.usable() and self._launch_direct(a, b, out, bias, alpha, beta):
            return
        args = self.args(a, b, out, bias, alpha, beta)
        compiled = self.kernel[self.grid](*args, num_warps=self.cfg.num_warps, num_stages=self.cfg.num_stages)
        if not interpreting() and hasattr(compiled, "packed_metadata") and hasattr(compiled, "function"):
            self.compiled = compiled

    def compile(self, a, b, out, bias) -> None:
        """Compile without launching, and ``load`` the kernel."""
        args = self.args(*self.operands(a, b, copy=False), out, bias, 1.0, 1.0)
        load(self.kernel.warmup(*args, grid=self.grid, num_warps=self.cfg.num_warps, num_stages=self.cfg.num_stages))

    def kernel_key(self, a, b, out, bias) -> tuple:
        """What Triton compiles this plan's kernel for, as far as the plan can tell: the kernel,
        its constexprs, warps and stages, the dtypes, and how Triton specializes the other
        arguments (an int on being 1 or a multiple of 16, a pointer on 16-byte alignment;
        triton 3.6 runtime/jit.py), less those the kernel does not specialize (num_programs).
        Plans with one key share a compiled kernel (``ahead.compile_calls`` compiles it once);
        were two that Triton tells apart ever to share a key, the second would compile at its
        own first call."""
        a, b = self.operands(a, b, copy=False)
        if self.mid is None:
            self._bind(a, b, out, bias)
        head = len(_TMA_HEAD if self.cfg.kernel == "tma" else _PTR_HEAD)
        names = self.kernel.arg_names[head : head + len(self.mid)]
        loose = {p.name for p in getattr(self.kernel, "params", ()) if getattr(p, "do_not_specialize", False)}
        ints = tuple((v == 1, v % 16 == 0) for name, v in zip(names, self.mid) if name not in loose)
        tensors = [t for t in (a, b, out, bias if self.flags.has_bias else None) if t is not None]
        return (self.cfg.kernel, self.consts, self.cfg.num_warps, self.cfg.num_stages, ints,
                tuple((t.dtype, t.data_ptr() % 16) for t in tensors))  # fmt: skip

    def launch_direct(self, a, b, out, bias, alpha, beta) -> bool:
        """``_launch_direct`` on the operands the kernel reads (their copies, where it copies)."""
        return self._launch_direct(*self.operands(a, b), out, bias, alpha, beta)

    def _launch_direct(self, a, b, out, bias, alpha, beta) -> bool:
        """Launch through the compiled kernel's launcher, pointers as integers.

        Triton's own launch (JITFunction.run, triton 3.6 runtime/jit.py) ends in this same
        call after binding and specializing the arguments, which the plan has done once:
        same kernel, same arguments, no launch metadata. Integer pointers also skip the
        launcher's per-argument ``data_ptr()`` call and pointer-attribute query. The TMA
        kernel goes one level further down where the launcher is triton 3.6's: straight to
        the C launcher, with each operand's encoded tensormap cached by data pointer
        (direct.py); elsewhere it passes the first call's descriptors, rebased. Returns False
        (nothing launched) if the launcher rejects the call.
        """
        compiled = self.compiled
        stream = raw_stream(self.device)
        pout = out.data_ptr()
        pbias = bias.data_ptr() if self.flags.has_bias else pout
        scalars = (float(alpha), float(beta))
        pws = plocks = pout
        if self.cfg.split_k > 1:
            ws, locks = self._split_k_buffers(stream)  # alive until the launch returns
            pws, plocks = ws.data_ptr(), locks.data_ptr()
        try:
            if self.cfg.kernel == "tma":
                tail = (pout, pbias, pws, plocks, *self.mid, *scalars, *self.consts)
                if self.raw is None:
                    self.raw = direct.raw_launcher(compiled, 3 if self.c_tma else 2) or False
                if self.raw:
                    launcher, _, (cooperative, pdl) = self.raw
                    c_args = self._tensormap(2, out) if self.c_tma else (pout,)
                    launcher(self.grid[0], 1, 1, stream, compiled.function, cooperative, pdl, None, None,
                             compiled.packed_metadata, None, None, None,
                             *self._tensormap(0, a), *self._tensormap(1, b), *c_args, *tail)  # fmt: skip
                    return True
                bases = (a, b, out)
                args = (*(t if d is None else direct.rebased(d, t) for d, t in zip(self.descs, bases)), *tail)
            else:
                args = (a.data_ptr(), b.data_ptr(), pout, pbias, pws, plocks, *self.mid, *scalars, *self.consts)
            compiled.run(self.grid[0], 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                         *args)  # fmt: skip
        # Rebasing (a TensorDescriptor that is no longer a plain dataclass) or the launcher's
        # argument parsing: both fail before anything is launched.
        except (TypeError, SystemError, AttributeError) as e:
            direct.disable(e)
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
            desc = direct.rebased(self.descs[slot], t)
            args = self.encoded[key] = tuple(direct.tensormap_args(desc, self.raw[1][slot]))
        return args


def ready_for_threads(device: torch.device) -> None:
    """Make Triton's per-device state of both kernels now, in this thread, before threads
    compile them side by side: Triton makes it on first use (``JITFunction.device_caches``, a
    defaultdict; triton 3.6 runtime/jit.py), and two threads making it at once would each keep
    a compiled kernel where the other's state never finds it. Nothing for the interpreter."""
    if device.type != "cuda":
        return
    with device_guard(device):
        index = torch.cuda.current_device()
        for kernel in (_matmul_kernel, _matmul_kernel_tma):
            caches = getattr(kernel, "device_caches", None)
            if caches is not None:
                caches[index]
