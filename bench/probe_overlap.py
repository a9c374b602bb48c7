"""Probe for issue 32's floor: can a fused activation's epilogue hide behind the tensor cores?

    python bench/probe_overlap.py                 # H100/H200, ~2-3 min
    python bench/probe_overlap.py --device cpu    # the kernels' results only (interpreter)

At 8192 x 4096 -> 14336 the template's fused GELU costs 1.127x the bare matmul (SiLU 1.081x;
the bar is 1.05x, docs/performance.md "Issue 32's floors"): the persistent kernel runs one tile
per SM at a time, so a tile's epilogue (an erf per output element) runs while the tensor
cores wait. Two ways to overlap it, each measured here on a minimal copy of the TMA template's
loop (persistent, grouped tiles, TMA loads, bias and activation on the fp32 tile, pointer
stores) rather than on the package's kernels, so that the probe changes nothing in them:

* two (or more) programs per SM, each with half the shared memory: one program's epilogue
  runs while the other's MMAs do;
* Triton's warp specialization (``tl.range(..., warp_specialize=True)``): loads in their own
  warps.

Neither hid it on the H100 (docs/performance.md, "Device runs (2026-12-07, eighth session)"):
the cost is the activation's own MUFU and FMA work. So ``--acts`` also times cheaper forms:
an exact GELU with one ex2 (``_gelu_poly``: the package's ``kernels/activation._gelu_erf``), GELU
and SiLU with one ``tanh.approx``, and ReLU.

Per shape and config: the bare tile (bias only) and the tile with each activation, in GPU time
(CUDA graphs), against cuBLAS's Linear, cuBLASLt's bias+GELU (``torch._addmm_activation``) and
aten's Linear then GELU, in interleaved rounds. Each output is checked against float64 first
(NaN-poisoned). One JSONL row per shape to ``probe_overlap.jsonl``: ``us`` and ``vs_cublas``
per arm, ``over_bare`` per config and activation, ``err``, and each kernel's registers, spills and
shared memory (``resources``).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1 :][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from _timing import add_common_args, append_jsonl, header, median, ratios, require_cuda, run_meta
from triton.tools.tensor_descriptor import TensorDescriptor

from inductor_mm_plugin.kernels.activation import _gelu_erf as _gelu_poly  # the kernels' fused GELU
from inductor_mm_plugin.kernels.matmul import _tile_coords  # the kernels' grouped tile order
from inductor_mm_plugin.runtime import benchmarking


@triton.jit
def _tanh(x, ASM: tl.constexpr):
    if ASM:  # one MUFU op, relative error 2^-11 (what cuBLASLt's tanh GELU can use)
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)  # fmt: skip
    else:  # the interpreter runs no PTX
        return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def _bias_act_store(acc, c_ptr, bias_ptr, off_m, off_n, M, N, stride_cm, ACT: tl.constexpr, ASM: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    offs_m = off_m + tl.arange(0, BM)
    offs_n = off_n + tl.arange(0, BN)
    x = acc + tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :].to(tl.float32)
    if ACT == "gelu":  # as Inductor writes nn.GELU()
        x = 0.5 * x * (1 + tl.math.erf(x * 0.7071067811865476))
    elif ACT == "gelu_poly":
        x = _gelu_poly(x)
    elif ACT == "gelu_tanh":  # nn.GELU(approximate="tanh")
        x = 0.5 * x * (1 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x), ASM))
    elif ACT == "relu":
        x = tl.maximum(x, 0.0)
    elif ACT == "silu":
        x = x * tl.sigmoid(x)
    elif ACT == "silu_tanh":
        x = 0.5 * x * (1 + _tanh(0.5 * x, ASM))
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], x.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _linear_act_kernel(a_desc, b_desc, c_ptr, bias_ptr, M, N, K, stride_cm, NUM_PROGRAMS: tl.constexpr,
                       ACT: tl.constexpr, ASM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, FLATTEN: tl.constexpr, WS: tl.constexpr,
                       SUBTILE: tl.constexpr):  # fmt: skip
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, 8)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([off_m, ki * BLOCK_K])
            b = b_desc.load([off_n, ki * BLOCK_K]).T
            acc = tl.dot(a, b, acc)
        if SUBTILE:  # two BLOCK_N / 2 halves, as the template stores 128 x 256 tiles
            acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            _bias_act_store(acc0, c_ptr, bias_ptr, off_m, off_n, M, N, stride_cm, ACT, ASM, BLOCK_M, BLOCK_N // 2)
            _bias_act_store(acc1, c_ptr, bias_ptr, off_m, off_n + BLOCK_N // 2, M, N, stride_cm, ACT, ASM, BLOCK_M,
                            BLOCK_N // 2)  # fmt: skip
        else:
            _bias_act_store(acc, c_ptr, bias_ptr, off_m, off_n, M, N, stride_cm, ACT, ASM, BLOCK_M, BLOCK_N)


# name: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, programs per SM, flatten, warp-specialized, subtiled store).
# The first is the template's pick at 8192 x 4096 -> 14336; the 128 x 128 tiles with three
# stages take 96 KB of shared memory, so that two programs fit on an SM.
CONFIGS = {
    "128x256 w8 s3 1/SM flat sub": (128, 256, 64, 8, 3, 1, True, False, True),
    "128x256 w8 s3 1/SM ws sub": (128, 256, 64, 8, 3, 1, False, True, True),
    "128x128 w4 s4 1/SM flat": (128, 128, 64, 4, 4, 1, True, False, False),
    "128x128 w4 s3 2/SM flat": (128, 128, 64, 4, 3, 2, True, False, False),
    "128x128 w8 s3 2/SM flat": (128, 128, 64, 8, 3, 2, True, False, False),
    "128x128 w8 s3 2/SM ws": (128, 128, 64, 8, 3, 2, False, True, False),
}
# Activations: Inductor's own formulas (gelu: erf, silu: sigmoid), and cheaper ones in MUFU ops (the SM's
# 16 special-function results per clock, against 128 FMAs): the erf GELU with one ex2, the tanh GELU and
# SiLU with one tanh.approx, and ReLU (no MUFU op).
ACTS = ("none", "relu", "gelu", "gelu_poly", "gelu_tanh", "silu", "silu_tanh")
SHAPES = [(8192, 14336, 4096), (12608, 3072, 768)]  # Llama-3-8B's up-projection; ViT-B's fc1 at batch 64


def linear_act(x, w, bias, out, cfg, act, num_sms):
    """A call of the probe's kernel: ``act(x @ w.T + bias)`` into ``out``."""
    bm, bn, bk, warps, stages, per_sm, flatten, ws, subtile = cfg
    (M, K), N = x.shape, w.shape[0]
    a_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    programs = min(triton.cdiv(M, bm) * triton.cdiv(N, bn), num_sms * per_sm)

    def call():
        # ASM (tanh.approx through PTX) where the kernel runs on the GPU, not in the interpreter.
        call.kernel = _linear_act_kernel[(programs,)](a_desc, b_desc, out, bias, M, N, K, out.stride(0), programs, act,
                                                      x.is_cuda, bm, bn, bk, flatten, ws, subtile, num_warps=warps,
                                                      num_stages=stages)  # fmt: skip
        return out

    return call


def resources(call) -> dict:
    """Registers per thread, spills and shared memory of the kernel a call launched: whether
    two programs fit on an SM (65,536 registers, 227 KB) is the probe's premise."""
    kernel = getattr(call, "kernel", None)
    if kernel is None or not hasattr(kernel, "n_regs"):
        return {}
    return {"regs": kernel.n_regs, "spills": kernel.n_spills, "smem": kernel.metadata.shared}


def _checked(x, w, bias, cfg, act, num_sms, reference) -> tuple:
    """(the call, its normwise error against float64), or (None, the error's text)."""
    out = torch.full((x.shape[0], w.shape[0]), float("nan"), device=x.device, dtype=x.dtype)
    call = linear_act(x, w, bias, out, cfg, act, num_sms)
    try:
        call()
    except Exception as e:  # noqa: BLE001  (a config that does not compile is a row, not the end)
        return None, f"{type(e).__name__}: {str(e)[:200]}"
    err = ((out.double() - reference).norm() / reference.norm()).item()
    return (call, err) if err < 1e-2 else (None, f"wrong: error {err:.2e}")


def probe_shape(M, N, K, dtype, rounds, device, configs=CONFIGS, acts=ACTS) -> dict:
    x = torch.randn(M, K, device=device, dtype=dtype)
    w = torch.randn(N, K, device=device, dtype=dtype) / K**0.5
    bias = torch.randn(N, device=device, dtype=dtype)
    z = x.double() @ w.double().T + bias.double()
    references = {"none": z, "relu": F.relu(z), "gelu": F.gelu(z), "gelu_poly": F.gelu(z),
                  "gelu_tanh": F.gelu(z, approximate="tanh"), "silu": F.silu(z), "silu_tanh": F.silu(z)}
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 4
    arms, errors = {}, {}
    for name, cfg in configs.items():
        for act in acts:
            call, err = _checked(x, w, bias, cfg, act, num_sms, references[act])
            errors[f"{name} {act}"] = err
            if call is not None:
                arms[f"{name} {act}"] = call
    row = dict(M=M, N=N, K=K, dtype=str(dtype).removeprefix("torch."), err=errors,
               resources={name: resources(call) for name, call in arms.items()})
    if device != "cuda":
        return row
    arms = {"cublas": lambda: F.linear(x, w, bias),
            "cublaslt gelu (tanh)": lambda: torch._addmm_activation(bias, x, w.T, use_gelu=True),
            "aten linear, gelu": lambda: F.gelu(F.linear(x, w, bias)), **arms}  # fmt: skip
    times = benchmarking.interleaved({name: benchmarking.Timer([call]) for name, call in arms.items()}, rounds)
    row["us"] = {name: median(t) for name, t in times.items()}
    row["vs_cublas"] = {name: median(ratios(times, "cublas", name)) for name in times}
    row["over_bare"] = {f"{name} {act}": median(ratios(times, f"{name} {act}", f"{name} none"))
                        for name in configs for act in acts if act != "none"
                        if f"{name} {act}" in times and f"{name} none" in times}  # fmt: skip
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: each config's results checked on small shapes through Triton's interpreter, no timing")
    p.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), metavar="NAME",
                   help="the kernel configs to time (default: all)")
    p.add_argument("--acts", nargs="+", choices=ACTS, default=list(ACTS), help="the activations (default: all)")
    add_common_args(p, "probe_overlap.jsonl", rounds=5)
    args = p.parse_args(argv)
    cpu = args.device == "cpu"
    if not cpu:
        require_cuda("probe_overlap.py")
    meta = run_meta(args.commit)
    print(header(meta), flush=True)
    # The interpreter's bf16 dot multiplies raw bit patterns (triton-lang/triton#11584): fp16 there.
    dtype = torch.float16 if cpu else torch.bfloat16
    shapes = [(70, 200, 96)] if cpu else SHAPES
    configs = {k: CONFIGS[k] for k in args.configs}
    configs = {k: (32, 64 if v[1] == 256 else 32, 32, *v[3:]) for k, v in configs.items()} if cpu else configs
    acts = ["none", *(a for a in args.acts if a != "none")]
    for M, N, K in shapes:
        torch.manual_seed(0)
        row = probe_shape(M, N, K, dtype, args.rounds, args.device, configs, acts)
        append_jsonl(pathlib.Path(args.out) / "probe_overlap.jsonl", [row], meta)
        print(f"\n{M} x {K} -> {N} {row['dtype']}, bias + activation", flush=True)
        for name, err in row["err"].items():
            us = row.get("us", {}).get(name)
            line = f"  {name:34s} error {err:.1e}" if isinstance(err, float) else f"  {name:34s} {err}"
            if us is not None:
                line += f"  {us:8.1f} us  cuBLAS / this {row['vs_cublas'][name]:.3f}"
                line += f"  over bare {row['over_bare'][name]:.3f}" if name in row["over_bare"] else ""
                line += "  {regs} regs, {spills} spills, {smem} B shared".format(**row["resources"][name]) \
                    if row["resources"].get(name) else ""
            print(line, flush=True)
        for name in ("cublas", "cublaslt gelu (tanh)", "aten linear, gelu"):
            if name in row.get("us", {}):
                print(f"  {name:34s} {row['us'][name]:8.1f} us  cuBLAS / this {row['vs_cublas'][name]:.3f}", flush=True)


if __name__ == "__main__":
    main()
