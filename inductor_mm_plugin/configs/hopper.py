"""The configuration tables for Hopper (sm_90; measured on the H200, triton 3.6).

Each entry is a config the selectors (``eager.py``, ``templates.py``) pick by name, with the
measurement that put it there (ratios are cuBLAS time / plugin time, bf16, both layouts,
from bench/sweep_configs.py runs and A/B runs of configs against cuBLAS, whose results are in
bench/results/archive/*-ab-configs*.json; docs/performance.md has the history). Configs whose stage count depends on the dtype are passed through
``space.deepest`` by the selector.
"""

from __future__ import annotations

from .space import MatmulConfig

# ------------------------------------------------------------------ Triton's interpreter
# Small tiles keep the CPU interpreter fast while odd shapes still get partial tiles.
INTERPRETER_PTR = MatmulConfig("ptr", 32, 32, 16, group_m=4, num_warps=4, num_stages=1)
INTERPRETER_TMA = MatmulConfig("tma", 32, 32, 16, group_m=4, num_warps=4, num_stages=1, epilogue_subtile=True)
INTERPRETER_NUM_SMS = 4  # a few programs, so the persistent loop runs several tiles each

# ------------------------------------------------------- eager TMA kernel, fp16 and bf16

# LLM prefill shapes, from one wave of 128 x 256 tiles with N > 128: 0.84-1.01; without
# subtiling 1% better on average than with, 4 stages and 256 x 128 no better. Not for N <= 128
# (the attention batch p @ v: half of each tile empty, 0.61). From 90% of the SMs, not all:
# 2048x2048x32768 has 128 such tiles on 132 SMs, and one wave beat two of 128 x 128 (0.97
# against 0.86, 5 interleaved rounds).
PREFILL = MatmulConfig("tma", 128, 256, 64, 8, 8, 3, flatten=True)

# Narrow N with a long K (the attention batch p @ v: 256 x 2048 x 128 x 2048): 128-deep K
# steps, 1.00; 128x128x64 s4 with subtiling 0.94, 256 x 128 0.96.
NARROW_N_LONG_K = MatmulConfig("tma", 128, 128, 128, 8, 8, 3, epilogue_subtile=True, flatten=True)

# A wave or more of 128 x 128 tiles, batches, and one wave with K >= 2048: 2048x1024x1024 has
# 128 tiles, and one wave of them beat two of 128 x 64 (8.3 against 9.1 us under CUDA
# graphs); SwiGLU's down projection at 2048 tokens (2048x1024x4096): cuBLAS 25.6 us, 128 x 64
# tiles 45.4. Up to 4 stages, as many as fit.
WAVE_128 = MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True)

# Fewer output tiles than SMs and a long K: cut K into slices of at least 2048, up to one
# work item per SM (1024x1024x65536: split 2 0.95, split 4 0.80, unsplit 0.56).
SPLIT_K_BASE = MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True)
SPLIT_K_MIN_SLICE = 2048

# Less than a quarter wave of 128 x 128 tiles (M above the skinny range): the tile and K split
# that put the most work items in one wave, each K slice at least FEW_TILES_MIN_SLICE long,
# fewer splits first, then larger tiles. One wave of 16 128 x 128 tiles ran 512x512x3584 at
# 0.40 of cuBLAS and 2032x128x2072 at 0.45 (bench/results/shapes.jsonl, models and random
# suites at 196ec44: M 257-1024 with under 33 such tiles, geomean 0.60).
FEW_TILES = [(128, 128), (128, 64), (64, 64)]
FEW_TILES_SPLITS = (1, 2, 4, 8, 16)
FEW_TILES_MIN_SLICE = 512

# Short K and few tiles (768^3: 128x64 0.73, 128x128 0.67, 64x128 0.62; 1000^3: 0.78, 0.71,
# 0.74): latency-bound, more programs.
SHORT_K = MatmulConfig("tma", 128, 64, 64, 8, 4, 4, flatten=True)

# Autotuning candidates beside the heuristic's pick (M above the skinny range).
TMA_CANDIDATES = [
    MatmulConfig("tma", 128, 256, 64, 8, 8, 3, flatten=True),
    MatmulConfig("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 256, 64, 8, 8, 4, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 256, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 128, 64, 8, 4, 4, flatten=True),
    MatmulConfig("tma", 128, 128, 128, 8, 8, 3, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 64, 64, 8, 4, 4, flatten=True),
    MatmulConfig("tma", 64, 128, 64, 8, 4, 4, flatten=True),
]
# Split-K candidates for fewer than two waves of 128 x 128 tiles: these block_n and splits,
# each slice at least this long.
TMA_SPLIT_CANDIDATES = [(split, bn) for split in (2, 4) for bn in (128, 256)]
TMA_SPLIT_CANDIDATE_MIN_SLICE = 512
# The autotuner's split_tail candidates (eager._tail_candidates) cut the last round's tiles in
# at most this many slices: on the H100 (2026-12-07, 55 drawn shapes and 9 chosen ones) 8
# slices never beat the best whole tile (at most 0.96 of it), 4 did by up to 6%.
TAIL_MAX_SPLIT = 4

# --------------------------------------------------------- eager TMA kernel, skinny (decode)
# Up to this many rows a product is decode-sized: weight-bandwidth bound (eager._skinny).
SKINNY_MAX_M = 128
# Four warps throughout (eight: 1-3% slower on 128-wide tiles), no grouping, up to 6 stages.
SKINNY_WARPS = 4
SKINNY_MAX_STAGES = 6
# One wave: the widest BLOCK_N whose tiles fill at least this share of the SMs (11/20).
SKINNY_FILL = (11, 20)
# Split-K candidates: at most this many work items per SM (11/10).
SKINNY_ONE_WAVE = (11, 10)
# The skinny cost model that orders the autotuner's candidates (it ranks the heuristic's
# picks wrongly, so it only orders candidates): ~4.2 TB/s copy rate over 132 SMs in bytes
# per microsecond, and a fixed cost per work item (pipeline fill, epilogue) in us.
SKINNY_SM_BYTES_PER_US = 4.2e6 / 132
SKINNY_ITEM_OVERHEAD_US = 0.6

# ------------------------------------------------------------ eager TMA kernel, fp32 (TF32)
# 4096^3 and 8192x4096x4096, two interleaved A/B runs of 3 rounds: both operands K-major,
# 128x256x32 s3 0.92-1.02 (128x128x32 s4 0.78-0.80); an N-major B, taken from registers
# (SWAP_AB), unflattened 128x256x32 s3 0.77-0.95, flattened 128 x 128 0.54-0.67. Unflattened
# 256x128x32 s3 computed wrong results there (relative error 1.1e-2; TF32's is 9e-4), so it
# is no candidate (possibly the register-operand wgmma hazard of triton-lang/triton#5003).
TF32_WIDE = MatmulConfig("tma", 128, 256, 32, 8, 8, 3, epilogue_subtile=True, flatten=True)
TF32 = MatmulConfig("tma", 128, 128, 32, 8, 8, 4, epilogue_subtile=True, flatten=True)
TF32_CANDIDATES = [
    MatmulConfig("tma", 128, 128, 32, 8, 8, 3, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 128, 32, 8, 8, 4, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 256, 32, 8, 8, 3, epilogue_subtile=True, flatten=True),
    MatmulConfig("tma", 128, 128, 32, 8, 8, 4, epilogue_subtile=True),
    MatmulConfig("tma", 128, 256, 32, 8, 8, 3, epilogue_subtile=True),
    MatmulConfig("tma", 128, 64, 32, 8, 4, 4, flatten=True),
    MatmulConfig("tma", 64, 128, 32, 8, 4, 4, flatten=True),
]

# ------------------------------------------------------------------- eager pointer kernel
# Operands without 16-byte aligned rows (bench/results/archive/*-sweep-odd-*.json):
# 4097x4095x4096 128x64x64 s3 1.31 (64x128x32 s4 1.14); 2000x3000x500, loads 4 elements
# wide, 64x128x32 s4 1.23. 1531^3, where no load is wider than one element, depends on B's
# layout: an N-major B 64x128x16 w4 s6 0.98 (64x128x32 s4 0.87), a K-major B 64x128x32 w8 s4
# 0.93 (w4 0.86, 64x128x16 s6 0.71). fp32 without TF32 runs on CUDA cores: in the TMA kernel
# the transposed layouts spill thousands of bytes (ptxas, triton 3.6), the pointer kernel none.
PTR_FP32 = MatmulConfig("ptr", 64, 64, 32, 8, 4, 3)
PTR_LARGE = MatmulConfig("ptr", 128, 64, 64, 8, 4, 3)  # from 2048 x 4096 outputs
PTR_LARGE_FROM = 2048 * 4096
PTR_UNALIGNED_KMAJOR_B = MatmulConfig("ptr", 64, 128, 32, 8, 8, 4)
PTR_UNALIGNED = MatmulConfig("ptr", 64, 128, 16, 8, 4, 6)
PTR = MatmulConfig("ptr", 64, 128, 32, 8, 4, 4)
PTR_SKINNY_MAX_M = 64  # below this, eager._pointer_skinny: (M rounded up, at least 16) x 32 or 64 x 128 tiles
# Skinny products read in place split K while the tiles are under PTR_SPLIT_K_BELOW_WAVES waves:
# in powers of two up to PTR_SPLIT_K_MAX, each slice at least PTR_SPLIT_K_MIN_SLICE columns,
# at most PTR_SPLIT_K_MAX_WAVES waves of items. `bench/sweep_configs.py --groups ptr_skinny
# --seed 7` at 7c43b6a (16 drawn shapes, M <= 64, an unaligned operand; BLOCK_N 32/64/128 x
# BLOCK_K 64/128 x split 1-16 under CUDA graphs; bench/results/archive/2026-12-02-NVIDIA_H200-sweep-ptr-skinny.jsonl): the rule's pick
# 0.92 of the per-shape best in geomean (slices of 256: 0.90, of 1024: 0.90; 8 waves: 0.91),
# 5x144x18100 1.83 of cuBLAS at split 16 (unsplit 0.20), 4x304x14696 1.39 (0.28),
# 2x5088x31387 1.25 (0.55), 3x5440x3040 3.54 at split 4 (2.24); unsplit where the tiles fill
# two waves (7x24288x4740 1.83, split 2 1.46) or K is short (4x312x624 1.52, split 4 1.30).
# BLOCK_N 32 under half a wave of 64-wide tiles: 5x144x18100 1.83 against 1.37, 4x312x624 1.52
# against 1.14; 64 above: 3x5440x3040 3.54 against 2.34, 3x11680x21928 2.23 against 1.84.
PTR_SPLIT_K_MIN_SLICE = 512
PTR_SPLIT_K_MAX = 16
PTR_SPLIT_K_BELOW_WAVES = 2
PTR_SPLIT_K_MAX_WAVES = 12
PTR_CANDIDATES = [
    MatmulConfig("ptr", *r) for r in (
        (128, 128, 64, 8, 8, 3), (64, 128, 64, 8, 4, 3), (128, 64, 64, 8, 4, 3), (64, 64, 64, 8, 4, 3),
        (64, 64, 32, 8, 4, 2), (128, 128, 32, 8, 8, 2), (32, 64, 128, 1, 4, 3), (16, 64, 128, 1, 4, 3),
    )
]  # fmt: skip

# ------------------------------------------------ unaligned operands: aligned copies or not
# An operand whose rows are not 16 bytes apart keeps the TMA kernel out; a copy of it with
# padded rows (runtime/layout.aligned) lets it back in, at one more kernel and one read and one
# write of that operand. The pointer kernel reads in place, each operand as wide as its own
# divisor allows (layout.load_divisors). `bench/shapes.py --suite random --copy-arms` at
# 7c43b6a (seed 2041075981, bench/results/shapes.jsonl; 106 unaligned shapes, 87 where the
# two arms differ): cuBLAS / plugin geomean 0.94 reading in place, 1.11 always copying, 1.36
# taking the better per shape (the default then: 1.16).
# * Up to 64 rows the copy's own launch is most of the time and in place wins where K is
#   short (4x856x69 1.04 in place against 0.48 copied, 3x13088x64 1.72 against 0.84) or the
#   weight too large for its copy to be read back from the L2 (8x32351x7200 2.59 against
#   0.83, 16x1148x27576 1.77 against 0.42). It loses where an operand loads one element at a
#   time over a long K (56x224x2989, both divisors 1: 0.06 against 0.86; 46x685x5904 0.15
#   against 0.62; 1x1449x3515 0.18 against 0.42): there the copy stays, unless B is that large.
# * Past 64 rows the TMA kernel's speed wins (1552x13672x855 2.99 copied against 0.36 in place)
#   except on a short K and a small output (192x2282x80 1.07 against 0.71, 464x130x72 0.92
#   against 0.62, 864x150x120 1.23 against 0.80; 1565x768x120, 1.2M outputs, 1.25 against 1.61).
COPY_SKINNY_B_MAX_BYTES = 30 * 10**6  # half the H200's 60 MB L2
COPY_NARROW_MIN_K = 1024
COPY_SHORT_K_MAX = 256
COPY_SHORT_K_MAX_OUTPUT = 2**20

# ------------------------------------------------------------------ Inductor's templates
# The pointer template's configs (its own heuristic; templates.pointer_template_configs).
TEMPLATE_PTR_FP32 = MatmulConfig("ptr", 128, 128, 32, 8, 8, 3)
TEMPLATE_PTR_WIDE = MatmulConfig("ptr", 128, 256, 64, 8, 8, 3)
TEMPLATE_PTR_WAVE = MatmulConfig("ptr", 128, 128, 64, 8, 8, 4)
TEMPLATE_PTR = MatmulConfig("ptr", 64, 128, 64, 8, 4, 4)
TEMPLATE_PTR_SKINNY_MAX_M = 64  # (M rounded up, at least 16) x 128 x 128 tiles below this
# What the pointer template offers when its site competes (Inductor times them with the epilogue).
TEMPLATE_PTR_COMPETE = [
    MatmulConfig("ptr", 128, 256, 64, 8, 8, 3),
    MatmulConfig("ptr", 256, 128, 64, 8, 8, 3),
    MatmulConfig("ptr", 128, 128, 64, 8, 8, 4),
    MatmulConfig("ptr", 128, 128, 64, 8, 4, 4),
    MatmulConfig("ptr", 64, 128, 64, 8, 4, 4),
]

# The fused epilogue's layout conversion takes scratch that Triton sizes: 16 KiB of headroom
# below the hardware limit (128x256x64 with 3 stages, 209 KiB by smem_bytes, runs on the H200).
TEMPLATE_SMEM_HEADROOM = 16 * 1024

# Tiles from this many elements run the fused epilogue in two halves: a GELU epilogue over a
# whole 128 x 256 tile (8 warps) needs 255 registers and spills.
TEMPLATE_SUBTILE_FROM = 128 * 256

# A problem whose 128 x 128 (or smaller) tiles all run in one wave, with K up to this, takes
# the pointer template rather than the TMA template: the persistent loop has nothing to spread
# its device-side descriptors over. Under CUDA graphs with a pointwise user: 2048x1024x1024
# 9.1 against 10.1 us, 2048x1024x4096 27.3 against 28.5. Not for one wave of 128 x 256 tiles
# (2048^3: 27.5, the pointer template 30.3) nor two waves or more (8192x1024x1024: 30.8 vs 32.9).
TEMPLATE_ONE_WAVE_MAX_K = 4096

# SwiGLU's template: two 128 x 128 accumulators (the registers of one 128 x 256 tile), an x tile
# and two weight tiles per K step, 3 stages of 48 KiB, tile and K loops unflattened (flattened:
# 0.99 and 0.88 of stock at (M, d, f) = (2048, 1024, 4096) and (2048, 4096, 14336), against 1.16
# and 1.03). Groups of 16 row tiles: 1.019 and 1.049 of stock against 1.005 and 1.020 with 8 at
# (8192, 4096, 14336) and (2048, 4096, 14336).
SWIGLU = MatmulConfig("tma", 128, 128, 64, 16, 8, 3)
SWIGLU_COMPETE = [SWIGLU, MatmulConfig("tma", 128, 128, 64, 8, 8, 3)]
