"""Run the plugin's three ops once and print each one's error against torch and float64.

    python examples/ops_demo.py

On CUDA the ops run the Triton kernel on the GPU; without CUDA, on the CPU through
Triton's interpreter (small sizes: the interpreter is slow).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined

import inductor_mm_plugin  # noqa: E402
from inductor_mm_plugin.ops.reference import matmul_reference  # noqa: E402


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    M, N, K, B = (1024, 768, 512, 8) if device == "cuda" else (96, 80, 64, 2)
    ops = torch.ops.inductor_mm_plugin
    print(f"inductor_mm_plugin {inductor_mm_plugin.__version__} on {device}; torch {torch.__version__}")
    print(f"{'op':6s} {'dtype':15s} {'max|plugin-fp64|':>17s} {'max|torch-fp64|':>16s}")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a = torch.randn(M, K, device=device, dtype=dtype)
        w = torch.randn(N, K, device=device, dtype=dtype)  # nn.Linear weight, used as w.t()
        bias = torch.randn(N, device=device, dtype=dtype)
        x = torch.randn(B, M, K, device=device, dtype=dtype)
        y = torch.randn(B, K, N, device=device, dtype=dtype)
        cases = [
            ("mm", ops.mm(a, w.t()), torch.mm(a, w.t()), matmul_reference(a, w.t())),
            ("addmm", ops.addmm(bias, a, w.t()), torch.addmm(bias, a, w.t()), matmul_reference(a, w.t(), bias)),
            ("bmm", ops.bmm(x, y), torch.bmm(x, y), matmul_reference(x, y)),
        ]
        for name, got, aten, ref in cases:
            plugin_err = (got.double() - ref).abs().max().item()
            torch_err = (aten.double() - ref).abs().max().item()
            print(f"{name:6s} {str(dtype):15s} {plugin_err:17.3e} {torch_err:16.3e}")


if __name__ == "__main__":
    main()
