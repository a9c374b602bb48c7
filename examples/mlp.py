"""An MLP, compared A/B: ``python3 examples/mlp.py``, or as a ``compare`` target,
``python -m inductor_mm_plugin compare examples/mlp.py:make``. On the CPU (Triton's
interpreter) the script skips the timing, which means nothing there."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _device import CUDA, DEVICE  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


class MLP(nn.Module):
    def __init__(self, d: int, hidden: int, dtype: torch.dtype):
        super().__init__()
        self.up = nn.Linear(d, hidden, device=DEVICE, dtype=dtype)
        self.down = nn.Linear(hidden, d, device=DEVICE, dtype=dtype)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def make():
    """(model, example_inputs): bf16 LLM-sized on CUDA, small fp32 on the CPU interpreter."""
    if CUDA:
        d, hidden, tokens, dtype = 4096, 14336, 4096, torch.bfloat16
    else:
        d, hidden, tokens, dtype = 64, 128, 32, torch.float32
    model = MLP(d, hidden, dtype)
    return model, (torch.randn(tokens, d, device=DEVICE, dtype=dtype),)


def main():
    import inductor_mm_plugin

    model, inputs = make()
    with torch.no_grad():
        report = inductor_mm_plugin.compare(model, inputs, timing=CUDA, quiet=False)
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
