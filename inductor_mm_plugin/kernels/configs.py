"""Kernel configurations: what a launch needs besides its operands, and how one is chosen.

A ``MatmulConfig`` names the kernel (``"tma"``: the persistent TMA kernel in
``matmul_tma.py``; ``"ptr"``: the pointer kernel in ``matmul.py``) and its meta-parameters.
``Problem`` holds the facts about a call that a choice depends on (shape, dtype, which
operands are K-major, whether the output takes a TMA store). ``heuristic_config`` picks a
config from those facts at once, with no benchmarking; ``candidate_configs`` lists what the
optional autotuner (``tuning.py``) times for the same problem.

Nothing here touches torch or a GPU: the heuristic is plain arithmetic on the shape, so it
is tested on the CPU.
"""

from __future__ import annotations

import dataclasses

# Shared memory per block on the H200 (sm_90): configs that need more fail with
# "out of resource: Required 262144, Hardware limit 232448".
SMEM_LIMIT_BYTES = 232448

# H200: 132 SMs. Used when no device can be asked (the launcher passes the real count).
DEFAULT_NUM_SMS = 132

# Up to this many rows a product is decode-sized: weight-bandwidth bound (_heuristic_skinny).
SKINNY_MAX_M = 128

# Sustained device bandwidth per SM the skinny cost model assumes (bytes per microsecond):
# ~4.2 TB/s measured copy rate (read + write) over 132 SMs, in bytes/us.
_SM_BYTES_PER_US = 4.2e6 / 132
# Fixed cost of one work item in the skinny cost model (us): pipeline fill, epilogue.
_ITEM_OVERHEAD_US = 0.6


@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    """One launch configuration. ``kernel`` is "tma" or "ptr"."""

    kernel: str
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    split_k: int = 1  # tma only: K is cut into this many slices, reduced in the kernel
    epilogue_subtile: bool = False  # tma only: store the tile as two BLOCK_N / 2 halves
    flatten: bool = False  # tma only: tl.range(flatten=True) over tiles and K steps
    warp_specialize: bool = False  # tma only: tl.range(warp_specialize=True)
    # tma only: persistent programs per SM (at most SMs x this programs); above 1, small tiles
    # of a problem that fills less than a wave run side by side on one SM.
    programs_per_sm: int = 1

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> MatmulConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown MatmulConfig fields {sorted(unknown)}; expected a subset of {sorted(names)}")
        cfg = cls(**d)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.kernel not in ("tma", "ptr"):
            raise ValueError(f"MatmulConfig.kernel must be 'tma' or 'ptr', got {self.kernel!r}")
        if self.programs_per_sm < 1:
            raise ValueError(f"MatmulConfig.programs_per_sm must be at least 1, got {self.programs_per_sm}")
        for name in ("block_m", "block_n", "block_k", "group_m", "num_warps", "split_k"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"MatmulConfig.{name} must be a power of two, got {v}")
        if self.kernel == "ptr" and (self.split_k != 1 or self.epilogue_subtile or self.flatten or self.warp_specialize
                                     or self.programs_per_sm != 1):
            raise ValueError("split_k, epilogue_subtile, flatten, warp_specialize and programs_per_sm apply to the "
                             "'tma' kernel only")

    def short(self) -> str:
        s = f"{self.kernel} {self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.num_stages}"
        if self.group_m != 8:
            s += f" g{self.group_m}"
        if self.split_k > 1:
            s += f" split{self.split_k}"
        if self.epilogue_subtile:
            s += " sub"
        if self.flatten:
            s += " flat"
        if self.warp_specialize:
            s += " ws"
        if self.programs_per_sm != 1:
            s += f" x{self.programs_per_sm}"
        return s


@dataclasses.dataclass(frozen=True)
class Problem:
    """What the config choice depends on, read off one call by the launcher."""

    M: int
    N: int
    K: int
    batch: int
    elem_bytes: int  # 2 (fp16, bf16) or 4 (fp32)
    dtype: str  # "float16", "bfloat16", "float32"
    tma: bool  # operands qualify for TMA descriptors (see ops.matmul._tma_layout)
    a_kmajor: bool = True  # A's unit stride is along K (row-major A)
    b_kmajor: bool = False  # B's unit stride is along K (a transposed (N, K) weight)
    c_tma: bool = True  # the output takes a TMA store
    has_bias: bool = False
    num_sms: int = DEFAULT_NUM_SMS
    precision: str = "ieee"  # the dot's input precision: "ieee", or "tf32" for fp32 with TF32 allowed
    # The largest power of two up to 16 dividing every size and stride other than 0 and 1
    # (ops.matmul.pow2_divisor): how wide the pointer kernel's loads can be.
    divisor: int = 16

    def bucket(self) -> str:
        """The autotuning cache key: layout facts plus each dimension rounded up to a power of two."""
        kind = "tma" if self.tma else "ptr"
        layout = ("k" if self.a_kmajor else "m") + ("k" if self.b_kmajor else "n")
        dims = "x".join(str(_pow2_ceil(d)) for d in (self.M, self.N, self.K))
        dtype = "tf32" if self.precision == "tf32" else self.dtype
        if not self.tma:
            kind += f"{self.divisor}"
        return f"{kind}|{dtype}|{layout}|c{int(self.c_tma)}|bias{int(self.has_bias)}|b{min(self.batch, 2)}|{dims}"


def _pow2_ceil(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def fills_a_wave(tiles: int, num_sms: int) -> bool:
    """Whether ``tiles`` programs occupy at least 90% of the SMs: then one wave of these
    (wider) tiles beats two of narrower ones (see _heuristic_tma for the measurements)."""
    return 10 * tiles >= 9 * num_sms


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def smem_bytes(cfg: MatmulConfig, elem_bytes: int, out_bytes: int | None = None) -> int:
    """Shared memory the config needs: its pipelined A and B stages plus the TMA store buffer."""
    out_bytes = out_bytes or elem_bytes
    per_stage = (cfg.block_m + cfg.block_n) * cfg.block_k * elem_bytes
    if cfg.kernel == "ptr":
        # cp.async pipelining keeps num_stages - 1 tiles in flight plus the one in use.
        return per_stage * max(cfg.num_stages, 1)
    sub_n = cfg.block_n // 2 if cfg.epilogue_subtile else cfg.block_n
    epilogue = cfg.block_m * sub_n * out_bytes
    return per_stage * cfg.num_stages + epilogue + 1024  # + mbarriers and alignment slack


def fits(cfg: MatmulConfig, elem_bytes: int) -> bool:
    return smem_bytes(cfg, elem_bytes) <= SMEM_LIMIT_BYTES


def deepest(cfg: MatmulConfig, elem_bytes: int, most: int) -> MatmulConfig:
    """The config with the most stages (at most ``most``, at least 2) that fits shared memory."""
    for s in range(most, 1, -1):
        c = dataclasses.replace(cfg, num_stages=s)
        if fits(c, elem_bytes):
            return c
    return dataclasses.replace(cfg, num_stages=2)


# ------------------------------------------------------------------------------ split-K


def k_per_split(K: int, block_k: int, split_k: int) -> int:
    """K columns per slice: a whole number of BLOCK_K steps, so slices never overlap."""
    return _cdiv(_cdiv(K, block_k), split_k) * block_k


def useful_split(K: int, block_k: int, split_k: int) -> bool:
    """Every slice gets at least one BLOCK_K step of real K."""
    return split_k == 1 or k_per_split(K, block_k, split_k) * (split_k - 1) < K


def batch_fits(p: Problem, cfg: MatmulConfig) -> bool:
    """Whether the TMA kernel can run this config on a batch (see kernels/matmul_tma.py):
    no split-K, and K a whole number of BLOCK_K steps when an operand is stacked along K
    (an M-major A or an N-major B), so the last K step never reads the next matrix."""
    if p.batch == 1 or cfg.kernel != "tma":
        return True
    k_outer = not p.a_kmajor or not p.b_kmajor
    return cfg.split_k == 1 and (not k_outer or p.K % cfg.block_k == 0)


# ---------------------------------------------------------------------------- heuristic

INTERPRETER_PTR = MatmulConfig("ptr", 32, 32, 16, group_m=4, num_warps=4, num_stages=1)
INTERPRETER_TMA = MatmulConfig("tma", 32, 32, 16, group_m=4, num_warps=4, num_stages=1, epilogue_subtile=True)


def heuristic_config(p: Problem, interpreting: bool = False) -> MatmulConfig:
    """A config for this problem, chosen instantly (no benchmarking)."""
    cfg = _one_item_unflattened(p, _heuristic(p, interpreting))
    if batch_fits(p, cfg):
        return cfg
    narrower = dataclasses.replace(cfg, split_k=1, block_k=min(cfg.block_k, 64))
    if batch_fits(p, narrower):
        return narrower
    return INTERPRETER_PTR if interpreting else _heuristic_ptr(p)


def work_items(p: Problem, cfg: MatmulConfig) -> int:
    """The TMA kernel's work items: output tiles times K slices."""
    return _cdiv(p.M, cfg.block_m) * _cdiv(p.N, cfg.block_n) * p.batch * cfg.split_k


def persistent_programs(items: int, programs: int) -> int:
    """How many programs the persistent TMA kernel runs for ``items`` work items, given at
    most ``programs`` (SMs x programs per SM): the fewest that still finish in as few rounds,
    so every program gets the same number of items, give or take one.

    Every prefill shape of issue 5's table has a multiple of 128 tiles of 128 x 256, and on the
    H200's 132 SMs 132 programs gave 4 of them one tile fewer than the rest: no earlier finish
    (the others set the time), only four more tiles in flight at once against the 700 W power
    limit and the L2. The same config on 128 programs ran 1-4% faster at 4096 x 4096 x 4096
    (3.88 rounds of 132), 8192 x 4096 x 4096 (7.76), 4096 x 14336 x 4096 (13.58) and 4096 x
    28672 x 4096 (27.15), both layouts; where the tiles fill whole rounds of 132 (M = 4224,
    8448), 132 programs ran 0.7-15% faster than 128 (bench/wave_quantization.py,
    bench/results/2026-12-01-NVIDIA_H200-wave-quantization.txt). Over the whole llm table
    this rule against one program per SM: 1.017x (row-major B) and 1.008x (nn.Linear) in
    geomean, 0.986-1.043 per shape (*-wave-quantization-llm.txt).
    """
    if items <= programs:
        return max(1, items)
    return _cdiv(items, _cdiv(items, programs))


def _one_item_unflattened(p: Problem, cfg: MatmulConfig) -> MatmulConfig:
    """The loop unflattened where every program has at most one work item. Flattening lets a
    program load its next tile during this one's epilogue; with no next tile it only costs
    (H200, bench/probe_ab.py under CUDA graphs: 768^3 with 128x64 tiles 4.85 against 4.77 us,
    16x4096x4096 with 16x32 tiles and a row-major B 10.04 against 9.52 us)."""
    if cfg.kernel == "tma" and cfg.flatten and work_items(p, cfg) <= p.num_sms * cfg.programs_per_sm:
        return dataclasses.replace(cfg, flatten=False)
    return cfg


def _heuristic(p: Problem, interpreting: bool) -> MatmulConfig:
    if interpreting:
        # Small tiles keep the interpreter fast while odd shapes still get partial tiles.
        if not p.tma:
            return INTERPRETER_PTR
        # Exercise split-K on the CPU as well when K is long next to the output.
        split = 2 if p.K >= 4 * max(p.M, p.N) and p.K >= 64 and p.batch == 1 else 1
        return dataclasses.replace(INTERPRETER_TMA, split_k=split)
    if not p.tma or (p.elem_bytes == 4 and p.precision != "tf32"):
        # fp32 without TF32 runs on CUDA cores; in the TMA kernel the transposed-operand
        # layouts spill thousands of bytes (ptxas, triton 3.6, sm_90), the pointer kernel none.
        return _heuristic_ptr(p)
    if p.elem_bytes == 4:
        return _heuristic_tma_fp32(p)
    if p.M <= SKINNY_MAX_M:
        return _heuristic_skinny(p)
    return _heuristic_tma(p)


# The rules below come from timing candidate configs against cuBLAS on an H200 (triton 3.6,
# bench/sweep_configs.py; numbers are time ratios cuBLAS / plugin, bf16, both layouts).


def _heuristic_ptr(p: Problem) -> MatmulConfig:
    # Operands without 16-byte aligned rows. Measured (bench/results/*-sweep-odd-*.json):
    # 4097x4095x4096 128x64x64 s3 1.31 (64x128x32 s4 1.14); 2000x3000x500, loads 4 elements
    # wide, 64x128x32 s4 1.23 (128x128x64 w8 s3 1.33). 1531^3, where no load is wider than
    # one element, depends on B's layout: an N-major B 64x128x16 w4 s6 0.98 (64x128x32 s4
    # 0.87, w8 0.65), a K-major B 64x128x32 w8 s4 0.93 (w4 0.86, 64x128x16 s6 0.71).
    if p.elem_bytes == 4:
        return MatmulConfig("ptr", 64, 64, 32, 8, 4, 3)
    if p.M <= 64:
        return MatmulConfig("ptr", max(16, _pow2_ceil(p.M)), 64, 128, 1, 4, 3)
    if p.M * p.N * p.batch >= 2048 * 4096:
        return MatmulConfig("ptr", 128, 64, 64, 8, 4, 3)
    if p.divisor == 1:
        return MatmulConfig("ptr", 64, 128, 32, 8, 8, 4) if p.b_kmajor else MatmulConfig("ptr", 64, 128, 16, 8, 4, 6)
    return MatmulConfig("ptr", 64, 128, 32, 8, 4, 4)


def _heuristic_tma_fp32(p: Problem) -> MatmulConfig:
    # TF32, 4096^3 and 8192x4096x4096, two interleaved A/B runs of 3 rounds each
    # (bench/ab_configs.py --set fp32; bench/results/*-ab-configs-fp32*.json):
    # * both operands K-major (nn.Linear's weight): 128x256x32 s3 0.92-1.02 of cuBLAS,
    #   128x128x32 s4 0.78-0.80;
    # * an N-major B, which goes through registers (SWAP_AB in the kernel): the flattened
    #   loop cost 15-30% there. Unflattened, 128x256x32 s3 0.77-0.95, 128x128x32 s4
    #   0.71-0.87, flattened 128x128x32 s4 0.54-0.67. Unflattened 256x128x32 s3 computed
    #   wrong results there (relative error 1.1e-2, TF32's is 9e-4), so it is not a candidate;
    #   not isolated, possibly the register-operand wgmma hazard of triton-lang/triton#5003
    #   (see ops/matmul.py, _tf32_a_from_registers).
    # Fewer than a wave of 128 x 256 tiles, or an M-major A and N-major B: 128 x 128 as
    # before (not measured).
    swap = p.a_kmajor and not p.b_kmajor
    wide = fills_a_wave(_cdiv(p.M, 128) * _cdiv(p.N, 256) * p.batch, p.num_sms) and p.a_kmajor
    cfg = MatmulConfig("tma", 128, 256 if wide else 128, 32, 8, 8, 3, epilogue_subtile=True, flatten=not swap)
    return deepest(cfg, 4, 3 if wide else 4)


def _heuristic_tma(p: Problem) -> MatmulConfig:
    tiles = lambda bm, bn: _cdiv(p.M, bm) * _cdiv(p.N, bn) * p.batch  # noqa: E731
    sms = p.num_sms
    if fills_a_wave(tiles(128, 256), sms) and p.N > 128:
        # LLM prefill shapes: 0.84-1.01; without subtiling 1% better on average than with
        # (3 stages fit either way), 4 stages and 256x128 no better. Not for N <= 128 (the
        # attention batch p @ v, N = head dim 128: half of every 256-wide tile is empty,
        # 0.61 of cuBLAS on the H200). From 90% of the SMs, not all: 2048x2048x32768 has
        # 128 such tiles on 132 SMs, and one wave of them beat two of 128 x 128 (0.97 vs
        # 0.86 of cuBLAS, median of 5 interleaved rounds, bench/ab_configs.py).
        return MatmulConfig("tma", 128, 256, 64, 8, 8, 3, flatten=True)
    if p.N <= 128 and tiles(128, 128) >= sms and p.K >= 1024:
        # Narrow N with a long K (the attention batch p @ v: 256 x 2048 x 128 x 2048, bf16):
        # 128-deep K steps, 1.00 of cuBLAS; 128x128x64 s4 with subtiling 0.94, 256x128 0.96.
        return MatmulConfig("tma", 128, 128, 128, 8, 8, 3, epilogue_subtile=True, flatten=True)
    if fills_a_wave(tiles(128, 128), sms) or p.batch > 1:
        # From 90% of the SMs, as above: 2048x1024x1024 has 128 tiles of 128 x 128, and one
        # wave of them beat two of 128 x 64 (the pointer template under CUDA graphs on the
        # H200: 8.3 us vs 9.1 us; the TMA kernel with 128 x 64 tiles took 11.3 us, cuBLAS 7.8).
        return deepest(MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True), 2, 4)
    # Fewer output tiles than SMs: cut K into slices when each stays long, up to one work
    # item per SM (1024x1024x65536: split 2 0.95, split 4 0.80, none 0.56).
    n = tiles(128, 128)
    split = 1
    while n * split * 2 <= sms and _cdiv(p.K, split * 2) >= 2048:
        split *= 2
    if split > 1:
        return MatmulConfig("tma", 128, 128, 64, 8, 8, 4, split_k=split, epilogue_subtile=True)
    if p.K >= 2048:
        # Too many tiles to split, too few for two waves, K long: one wave of 128 x 128, as
        # cuBLAS runs it (SwiGLU's down projection at 2048 tokens, 2048x1024x4096, 128 tiles:
        # cuBLAS 25.6 us, 128x64 tiles 45.4 us).
        return deepest(MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True), 2, 4)
    # Short K and few tiles (768^3: 128x64 0.73, 128x128 0.67, 64x128 0.62; 1000^3: 0.78,
    # 0.71, 0.74): latency-bound, more programs.
    return MatmulConfig("tma", 128, 64, 64, 8, 4, 4, flatten=True)


def _heuristic_skinny(p: Problem) -> MatmulConfig:
    """M <= 128: reading B is the cost; what matters is spreading it evenly over the SMs
    with enough bytes in flight, in one wave of about one work item per SM. Measured under
    CUDA graphs with host-side descriptors (bench/sweep_configs.py groups skinny and
    skinny_more, 2026-11-29, bf16; ratios cuBLAS / plugin, the runner-up in brackets):

    * the widest BLOCK_N, unsplit, whose tiles fill at least 55% of the SMs in one wave:
      N = 14336 and 11008 take BLOCK_N 128 (112 and 86 tiles): 0.91-1.08 (BLOCK_N 32 at
      11008: 0.80-0.85); N = 6144 takes BLOCK_N 64 (96 tiles): 0.88-1.02 (BLOCK_N 32, 192
      tiles: 0.59-0.75);
    * N too narrow for that even with BLOCK_N 32 (N = 1024): split K up to 4 ways to fill
      the SMs: 0.83-0.85 (unsplit: 0.69-0.78);
    * N = 4096 (BLOCK_N 32, 128 tiles) with K = 11008 or 14336: unsplit for 1 < M <= 16 and
      M = 64: 1.01-1.06 (BLOCK_N 64 split 2: 0.96-1.02); for M = 1 BLOCK_N 64 split 2: 0.96
      (32 unsplit: 0.90); BLOCK_N 64 split 2 for M = 32 and 128: 0.92-0.99;
    * N = K = 4096 (about 10 us): BLOCK_N 128 split 4 for M <= 8: 0.85-0.98 (64 split 2:
      0.81-0.89); BLOCK_N 64 split 2 for M = 16, 32: 0.91-0.95 (32 unsplit: 0.81-0.90);
      BLOCK_N 32 unsplit for M = 64, 128: 0.81-1.03 (64 unsplit: 0.77-0.90). With split-K's
      counters reused (2026-12-01, no memset per launch; group skinny_lows) the split configs
      gained ~1 us but no pick changed; 64 x 32 tiles now take 256-wide K steps (below).

    Four warps throughout (eight: 1-3% slower on 128-wide tiles). The cost model below
    (``skinny_cost_us``) ranks these wrongly; it only orders the autotuner's candidates.
    """
    bm = max(16, _pow2_ceil(p.M))
    m_tiles = _cdiv(p.M, bm) * p.batch
    fill = p.num_sms * 11 // 20  # 55% of the SMs

    def items(bn: int, split: int = 1) -> int:
        return _cdiv(p.N, bn) * m_tiles * split

    def one_wave(bn: int, split: int) -> bool:  # at most ~one work item per SM, every slice real
        return items(bn, split) <= p.num_sms * 11 // 10 and useful_split(p.K, 256, split)

    if items(128) >= fill:
        bn, split = 128, 1
    elif items(64) >= fill:
        bn, split = 64, 1
    elif items(32) < fill:
        bn = 32
        split = next((s for s in (4, 3, 2) if one_wave(32, s)), 1)
    elif p.K >= 8192:
        if bm == 16 and p.M > 1 or bm == 64:
            bn, split = 32, 1
        else:
            bn, split = 64, 2 if one_wave(64, 2) else 1
    elif p.M <= 8 and one_wave(128, 4):
        bn, split = 128, 4
    elif bm <= 32 and one_wave(64, 2):
        bn, split = 64, 2
    else:
        bn, split = 32, 1
    return _skinny_config(p, bm, bn, split)


def _skinny_config(p: Problem, bm: int, bn: int, split: int) -> MatmulConfig:
    """A skinny tile: four warps, no grouping, as many stages (up to 6) as fit, and 256-wide
    K steps while 3 stages of them fit (measured with M <= 32), else 128. Unsplit 64 x 32 tiles
    take 256-wide steps too, 4 stages deep: at 64x4096x4096 under CUDA graphs on the H200 8.82
    against 9.24 us (row-major B) and 8.59 against 9.13 (K-major), cuBLAS 8.1 and 7.9
    (bench/results/2026-12-01-NVIDIA_H200-sweep-skinny-lows.json)."""
    if bm < 64:
        wide_k = fits(MatmulConfig("tma", bm, bn, 256, 1, 4, 3), p.elem_bytes)
    else:
        wide_k = (bm, bn, split) == (64, 32, 1) and fits(MatmulConfig("tma", bm, bn, 256, 1, 4, 4), p.elem_bytes)
    bk = 256 if wide_k else 128
    cfg = MatmulConfig("tma", bm, bn, bk, 1, 4, 6, split_k=split, flatten=split == 1)
    return deepest(cfg, p.elem_bytes, 6)


def skinny_candidates(p: Problem) -> list[MatmulConfig]:
    bm = max(16, _pow2_ceil(p.M))
    cands = (_skinny_config(p, bm, bn, split) for bn in (32, 64, 128) for split in (1, 2, 4))
    return [c for c in cands if useful_split(p.K, c.block_k, c.split_k)]


def skinny_cost_us(p: Problem, cfg: MatmulConfig) -> float:
    """Estimated time: the busiest SM's share of bytes over its bandwidth, plus per-item costs."""
    items = work_items(p, cfg)
    rounds = _cdiv(items, p.num_sms)
    k_slice = min(p.K, k_per_split(p.K, cfg.block_k, cfg.split_k))
    item_bytes = (cfg.block_n + min(cfg.block_m, p.M)) * k_slice * p.elem_bytes
    # Items of one program run back to back (persistent loop): the fill cost is paid once
    # when flattened, per item otherwise; a split adds the partial-sum round trip.
    fixed = _ITEM_OVERHEAD_US * (1 if cfg.flatten else rounds)
    if cfg.split_k > 1:
        fixed += 1.0
    return rounds * item_bytes / _SM_BYTES_PER_US + fixed


# --------------------------------------------------------------------------- candidates


def candidate_configs(p: Problem, interpreting: bool = False) -> list[MatmulConfig]:
    """What the autotuner times for this problem: the heuristic's pick first, then its
    neighbours; every one fits shared memory."""
    first = heuristic_config(p, interpreting)
    if interpreting:
        return [first]
    if first.kernel == "ptr":
        rows = [
            (128, 128, 64, 8, 8, 3), (64, 128, 64, 8, 4, 3), (128, 64, 64, 8, 4, 3), (64, 64, 64, 8, 4, 3),
            (64, 64, 32, 8, 4, 2), (128, 128, 32, 8, 8, 2), (32, 64, 128, 1, 4, 3), (16, 64, 128, 1, 4, 3),
        ]  # fmt: skip
        cands = [MatmulConfig("ptr", *r) for r in rows]
    elif p.elem_bytes == 4:
        cands = [
            MatmulConfig("tma", 128, 128, 32, 8, 8, 3, epilogue_subtile=True, flatten=True),
            MatmulConfig("tma", 128, 128, 32, 8, 8, 4, epilogue_subtile=True, flatten=True),
            MatmulConfig("tma", 128, 256, 32, 8, 8, 3, epilogue_subtile=True, flatten=True),
            MatmulConfig("tma", 128, 128, 32, 8, 8, 4, epilogue_subtile=True),
            MatmulConfig("tma", 128, 256, 32, 8, 8, 3, epilogue_subtile=True),
            MatmulConfig("tma", 128, 64, 32, 8, 4, 4, flatten=True),
            MatmulConfig("tma", 64, 128, 32, 8, 4, 4, flatten=True),
        ]
    elif p.M <= SKINNY_MAX_M:
        cands = sorted(skinny_candidates(p), key=lambda c: skinny_cost_us(p, c))[:8]
    else:
        cands = [
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
        tiles = _cdiv(p.M, 128) * _cdiv(p.N, 128) * p.batch
        if tiles < 2 * p.num_sms and p.batch == 1:
            for split in (2, 4):
                for bn in (128, 256):
                    c = MatmulConfig("tma", 128, bn, 64, 8, 8, 3, split_k=split, epilogue_subtile=True)
                    if useful_split(p.K, 64, split) and _cdiv(p.K, split) >= 512:
                        cands.append(c)
    out = [first]
    for c in cands:
        if c not in out and fits(c, p.elem_bytes) and batch_fits(p, c):
            out.append(c)
    return out
