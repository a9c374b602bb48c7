"""A training step (forward + loss + backward), compared A/B with gradients:

    python3 examples/train_step.py          # on the CPU (interpreter) without the timing
    python -m inductor_mm_plugin compare examples/train_step.py:make

The model returns the loss, a scalar that requires grad, so ``compare`` also runs backward
and compares every parameter's gradient; the backward graphs' matmuls appear in the site
table as phase "backward".
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _device import CUDA, DEVICE  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from transformer_block import Block  # noqa: E402


class TrainStep(nn.Module):
    """model(x) -> mean squared error against the target."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x, target):
        return torch.nn.functional.mse_loss(self.model(x).float(), target)


def make():
    if CUDA:
        batch, seq, d, heads, ffn, dtype = 4, 1024, 2048, 16, 8192, torch.bfloat16
    else:
        batch, seq, d, heads, ffn, dtype = 2, 8, 32, 2, 64, torch.float32
    torch.manual_seed(0)
    block = Block(d, heads, ffn, dtype)
    x = torch.randn(batch, seq, d, device=DEVICE, dtype=dtype)
    target = torch.randn(batch, seq, d, device=DEVICE, dtype=torch.float32)
    return TrainStep(block), (x, target)


def main():
    import inductor_mm_plugin

    model, inputs = make()
    report = inductor_mm_plugin.compare(model, inputs, timing=CUDA, quiet=False)
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
