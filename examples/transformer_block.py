"""A transformer block — attention with explicit bmm and a SwiGLU MLP — compared A/B.

    python examples/transformer_block.py            # the README's main job
    python -m inductor_mm_plugin compare examples/transformer_block.py:make --json ab.json

On CUDA: bf16, batch x seq = 8 x 2048, d = 4096 (32 heads), ffn 14336. Without CUDA: a small
fp32 block on the CPU, the plugin's kernels running in Triton's interpreter.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _device import CUDA, DEVICE  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, d, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d, device=DEVICE, dtype=dtype))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, d, heads, dtype):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False, device=DEVICE, dtype=dtype)
        self.out = nn.Linear(d, d, bias=False, device=DEVICE, dtype=dtype)

    def forward(self, x):
        b, s, d = x.shape
        h, hd = self.heads, d // self.heads
        q, k, v = self.qkv(x).view(b, s, 3, h, hd).permute(2, 0, 3, 1, 4).reshape(3, b * h, s, hd)
        scores = torch.bmm(q, k.transpose(1, 2)) * hd**-0.5
        causal = torch.ones(s, s, device=x.device, dtype=torch.bool).tril()
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        y = torch.bmm(probs, v).view(b, h, s, hd).transpose(1, 2).reshape(b, s, d)
        return self.out(y)


class SwiGLU(nn.Module):
    def __init__(self, d, ffn, dtype):
        super().__init__()
        self.gate = nn.Linear(d, ffn, bias=False, device=DEVICE, dtype=dtype)
        self.up = nn.Linear(d, ffn, bias=False, device=DEVICE, dtype=dtype)
        self.down = nn.Linear(ffn, d, bias=False, device=DEVICE, dtype=dtype)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, d, heads, ffn, dtype):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d, dtype), RMSNorm(d, dtype)
        self.attn = Attention(d, heads, dtype)
        self.mlp = SwiGLU(d, ffn, dtype)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def make():
    if CUDA:
        batch, seq, d, heads, ffn, dtype = 8, 2048, 4096, 32, 14336, torch.bfloat16
    else:
        batch, seq, d, heads, ffn, dtype = 2, 16, 64, 4, 128, torch.float32
    torch.manual_seed(0)
    model = Block(d, heads, ffn, dtype)
    for p in model.parameters():  # scaled like a trained model: activations stay O(1)
        if p.dim() == 2:
            nn.init.normal_(p, std=p.shape[1] ** -0.5)
    return model, (torch.randn(batch, seq, d, device=DEVICE, dtype=dtype),)


def main():
    import inductor_mm_plugin

    model, inputs = make()
    with torch.no_grad():
        report = inductor_mm_plugin.compare(model, inputs, options={"select": "all"}, quiet=False)
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
