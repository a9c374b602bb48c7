"""The shape suites of bench/shapes.py and bench/sweep_selector.py: shapes drawn at random
(a fresh seed per run) and every ``nn.Linear`` of popular model configurations. Nothing here
needs a GPU."""

from __future__ import annotations

import math
import random

FLOP_CAP = 2**41
BYTE_CAP = 2**30
RANDOM_M, RANDOM_NK = (1, 16384), (64, 32768)
# B row-major or an nn.Linear weight, A as is or transposed (a weight gradient); rows before
# 2026-12-02 drew the first two only.
LAYOUTS = ("row", "linear", "t_row", "t_linear")

# ------------------------------------------------------------------------ the models
# Public configs (each model card's config.json): hidden, intermediate (FFN), attention heads,
# KV heads, head dim, vocabulary; ``arch`` picks the list of linears below.
MODELS = {
    "llama3-8b": dict(hidden=4096, ffn=14336, heads=32, kv=8, head_dim=128, vocab=128256, arch="llama"),
    "llama3-70b": dict(hidden=8192, ffn=28672, heads=64, kv=8, head_dim=128, vocab=128256, arch="llama"),
    "mistral-7b": dict(hidden=4096, ffn=14336, heads=32, kv=8, head_dim=128, vocab=32000, arch="llama"),
    "qwen2.5-7b": dict(hidden=3584, ffn=18944, heads=28, kv=4, head_dim=128, vocab=152064, arch="llama"),
    "qwen2.5-14b": dict(hidden=5120, ffn=13824, heads=40, kv=8, head_dim=128, vocab=152064, arch="llama"),
    "qwen2.5-32b": dict(hidden=5120, ffn=27648, heads=40, kv=8, head_dim=128, vocab=152064, arch="llama"),
    "phi3-mini": dict(hidden=3072, ffn=8192, heads=32, kv=32, head_dim=96, vocab=32064, arch="phi3"),
    "gemma2-9b": dict(hidden=3584, ffn=14336, heads=16, kv=8, head_dim=256, vocab=256000, arch="llama"),
    "vit-b16": dict(hidden=768, ffn=3072, heads=12, kv=12, head_dim=64, vocab=1000, arch="vit"),
    "vit-l16": dict(hidden=1024, ffn=4096, heads=16, kv=16, head_dim=64, vocab=1000, arch="vit"),
    "vit-h16": dict(hidden=1280, ffn=5120, heads=16, kv=16, head_dim=80, vocab=1000, arch="vit"),
    "bert-base": dict(hidden=768, ffn=3072, heads=12, kv=12, head_dim=64, vocab=30522, arch="bert"),
    "bert-large": dict(hidden=1024, ffn=4096, heads=16, kv=16, head_dim=64, vocab=30522, arch="bert"),
    "gpt2-xl": dict(hidden=1600, ffn=6400, heads=25, kv=25, head_dim=64, vocab=50257, arch="gpt2"),
}
TOKENS = (1, 8, 32, 128, 512, 2048, 8192)
VIT_IMAGES, VIT_TOKENS_PER_IMAGE = (1, 8, 32, 64), 197  # 16x16 patches of a 224 image + CLS
TP = (1, 2, 4, 8)


def linears(cfg: dict, tp: int) -> list[tuple[str, int, int, str, str]]:
    """(name, N, K, layout, rows) of one tensor-parallel rank's linears; ``rows`` is
    ``"tokens"`` or ``"sequences"`` (a pooler or classifier sees one row per sequence/image).
    Column-parallel layers slice N by ``tp``, row-parallel ones K; KV heads are replicated
    where ``tp`` exceeds them (as vLLM does); a layer whose heads do not split is skipped."""
    H, F, nh, nkv, hd, V = (cfg[k] for k in ("hidden", "ffn", "heads", "kv", "head_dim", "vocab"))
    if nh % tp or F % tp:
        return []
    q, kv = nh // tp * hd, max(1, nkv // tp) * hd
    arch = cfg["arch"]
    if arch == "llama":  # separate q/k/v, gate/up (Llama, Mistral, Qwen2, Gemma-2)
        out = [("q_proj", q, H), ("k_proj", kv, H), ("v_proj", kv, H), ("o_proj", H, q), ("gate_proj", F // tp, H),
               ("up_proj", F // tp, H), ("down_proj", H, F // tp), ("lm_head", -(-V // tp), H)]  # fmt: skip
        return [(n, N, K, "linear", "tokens") for n, N, K in out]
    if arch == "phi3":  # fused qkv_proj and gate_up_proj (transformers' Phi3)
        out = [("qkv_proj", q + 2 * kv, H), ("o_proj", H, q), ("gate_up_proj", 2 * F // tp, H),
               ("down_proj", H, F // tp), ("lm_head", -(-V // tp), H)]  # fmt: skip
        return [(n, N, K, "linear", "tokens") for n, N, K in out]
    if arch in ("vit", "bert"):
        out = [("query", q, H, "tokens"), ("key", q, H, "tokens"), ("value", q, H, "tokens"),
               ("attention.output", H, q, "tokens"), ("intermediate", F // tp, H, "tokens"),
               ("output", H, F // tp, "tokens")]  # fmt: skip
        if arch == "vit":
            out.append(("classifier", V, H, "sequences"))  # ImageNet head, replicated
        else:
            out += [("pooler", H, H, "sequences"), ("mlm.transform", H, H, "tokens"),
                    ("mlm.decoder", -(-V // tp), H, "tokens")]  # fmt: skip
        return [(n, N, K, "linear", rows) for n, N, K, rows in out]
    if arch == "gpt2":  # Conv1D: x @ W with W of shape (in, out), a row-major B
        out = [("c_attn", 3 * q, H, "row"), ("attn.c_proj", H, q, "row"), ("c_fc", F // tp, H, "row"),
               ("mlp.c_proj", H, F // tp, "row"), ("lm_head", -(-V // tp), H, "linear")]  # fmt: skip
        return [(n, N, K, layout, "tokens") for n, N, K, layout in out]
    raise ValueError(f"unknown arch {arch!r}")


def model_shapes() -> list[dict]:
    """Every distinct (M, N, K, layout) of ``MODELS`` x ``TP`` x M, bf16, with the first
    model layer that has it (``source``) and how many have it (``sources``)."""
    seen: dict[tuple, dict] = {}
    for model, cfg in MODELS.items():
        vit = cfg["arch"] == "vit"
        for tp in TP:
            for name, N, K, layout, rows in linears(cfg, tp):
                if vit:
                    ms = VIT_IMAGES if rows == "sequences" else tuple(i * VIT_TOKENS_PER_IMAGE for i in VIT_IMAGES)
                else:
                    ms = TOKENS
                for M in ms:
                    key = (M, N, K, layout)
                    if key in seen:
                        seen[key]["sources"] += 1
                    else:
                        seen[key] = dict(M=M, N=N, K=K, dtype="bf16", layout=layout, source=f"{model} {name} tp{tp}",
                                         sources=1)  # fmt: skip
    return list(seen.values())


# ------------------------------------------------------------------- random shapes


def _size(rng: random.Random, lo: int, hi: int) -> int:
    """Log-uniform in [lo, hi]; from 8 up a multiple of 8 three times in four, else not."""
    x = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    x = min(max(x, lo), hi)
    if x < 8:
        return x
    if rng.random() < 0.75:
        return min(max(8, 8 * round(x / 8)), hi - hi % 8)
    if x % 8 == 0:
        x = x + rng.randint(1, 7) if x + 7 <= hi else x - rng.randint(1, 7)
    return x


def flops_bytes(M, N, K, elem=2) -> tuple[float, float]:
    return 2.0 * M * N * K, float((M * K + K * N + M * N) * elem)


def random_shapes(n: int, seed: int, flop_cap=FLOP_CAP, byte_cap=BYTE_CAP, m_range=RANDOM_M, nk_range=RANDOM_NK):
    """``n`` distinct shapes from ``seed`` (module docstring); over a cap: drawn again."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        M, N, K = _size(rng, *m_range), _size(rng, *nk_range), _size(rng, *nk_range)
        dtype, layout = rng.choice(("bf16", "fp16")), rng.choice(LAYOUTS)
        flops, nbytes = flops_bytes(M, N, K)
        if flops > flop_cap or nbytes > byte_cap or (M, N, K, dtype, layout) in seen:
            continue
        seen.add((M, N, K, dtype, layout))
        out.append(dict(M=M, N=N, K=K, dtype=dtype, layout=layout))
    return out


def shape_aligned(shape: dict) -> bool:
    """Every operand's rows 16 bytes apart (A's rows are M long where it is transposed)."""
    from inductor_mm_plugin.inductor.shape_table import is_aligned

    M = shape["M"] if shape["layout"].startswith("t_") else None
    return is_aligned(shape["N"], shape["K"], shape["dtype"], M)
