"""What a fused activation costs in instructions: SASS of an epilogue, with and without it.

    python bench/epilogue_sass.py          # no GPU needed: compiled for sm_90 with Triton's ptxas

The fused-epilogue suite's GELU rows (bench_epilogue.py) lose most of what fusion saves to
the activation's own math, which runs after each tile's main loop with the tensor cores idle
(bench/results/*-epilogue-breakdown*.md: about 8.6 us of a 37.4 us Linear+GELU at 2048 x 1024
-> 4096, 4.3 us per 128 x 256 tile). This counts the instructions behind that: the epilogue
Inductor fuses into the template (the fp32 accumulator plus a bias, rounded to the output's
bf16 and back, then the activation, then a bf16 store), as straight-line code over a 128 x 128
tile with 8 warps (64 elements per thread), compiled offline for sm_90 and disassembled with
Triton's nvdisasm. GELU is written as Inductor writes ``F.gelu``: ``0.5 * x * (1 + erf(x /
sqrt(2)))`` with libdevice's erf; SiLU as ``x * sigmoid(x)``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.language.extra import libdevice

ACTIVATIONS = {0: "none", 1: "gelu (erf)", 2: "silu"}
BM, BN, WARPS = 128, 128, 8


@triton.jit
def _epilogue(acc_ptr, bias_ptr, out_ptr, ACT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    offs_m = tl.arange(0, BM)[:, None]
    offs_n = tl.arange(0, BN)[None, :]
    acc = tl.load(acc_ptr + offs_m * BN + offs_n) + tl.load(bias_ptr + offs_n).to(tl.float32)
    x = acc.to(tl.bfloat16).to(tl.float32)  # the template's output dtype, upcast for the pointwise math
    if ACT == 1:
        x = 0.5 * x * (1.0 + libdevice.erf(x * 0.7071067811865476))
    if ACT == 2:
        x = x * tl.sigmoid(x)
    tl.store(out_ptr + offs_m * BN + offs_n, x.to(tl.bfloat16))


def sass_lines(act: int) -> list[str]:
    sig = {"acc_ptr": "*fp32", "bias_ptr": "*bf16", "out_ptr": "*bf16", "ACT": "constexpr", "BM": "constexpr",
           "BN": "constexpr"}  # fmt: skip
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(3)}
    src = triton.compiler.ASTSource(_epilogue, sig, {"ACT": act, "BM": BM, "BN": BN}, aligned)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=WARPS))
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    return [line for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]


def main():
    per_thread = BM * BN // (WARPS * 32)
    print(f"triton {triton.__version__}, sm_90, {BM}x{BN} tile, {WARPS} warps ({per_thread} elements per thread)")
    base = None
    for act, name in ACTIVATIONS.items():
        lines = sass_lines(act)
        per_element = len(lines) / per_thread
        base = per_element if base is None else base
        mufu = sum("MUFU" in line for line in lines) / per_thread
        print(f"  {name:11s} {len(lines):5d} SASS instructions, {per_element:5.1f} per element "
              f"({per_element - base:+5.1f} over none), MUFU {mufu:.0f} per element")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
