"""What a launch configuration is, what a problem is, and the arithmetic both kernels share.

A ``MatmulConfig`` names the kernel (``"tma"``: the persistent TMA kernel in
``kernels/matmul_tma.py``; ``"ptr"``: the pointer kernel in ``kernels/matmul.py``) and its
meta-parameters. ``Problem`` holds the facts about a call that a choice depends on (shape,
dtype, which operands are K-major, whether the output takes a TMA store). The rest is plain
arithmetic on those two: shared memory, split-K slices, work items and the persistent
kernel's program count. Nothing here touches torch or a GPU.
"""

from __future__ import annotations

import dataclasses

# Shared memory per block on Hopper (sm_90): configs that need more fail with
# "out of resource: Required 262144, Hardware limit 232448".
SMEM_LIMIT_BYTES = 232448

# The SM count when no device can be asked (the H200's; the runtime passes the device's
# own count, runtime/device.py, and so do the templates).
DEFAULT_NUM_SMS = 132


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
    split_k: int = 1  # K is cut into this many slices, reduced in the kernel (ptr: single matrices)
    # tma only: split only the tiles of the last, partial round over the SMs (past ``whole_tiles``);
    # the full rounds before it run whole tiles.
    split_tail: bool = False
    epilogue_subtile: bool = False  # tma only: store the tile as two BLOCK_N / 2 halves
    flatten: bool = False  # tma only: tl.range(flatten=True) over tiles and K steps

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> MatmulConfig:
        """A config read back from JSON (the tuning cache). ValueError for anything else: not
        an object, unknown or missing fields, a value of another type (a bool is no int, as
        JSON's true is not 1), or out of range (``validate``)."""
        if not isinstance(d, dict):
            raise ValueError(f"a MatmulConfig is a JSON object, got {type(d).__name__}")
        kinds = {f.name: {"str": str, "int": int, "bool": bool}[f.type] for f in dataclasses.fields(cls)}
        unknown = set(d) - set(kinds)
        if unknown:
            raise ValueError(f"unknown MatmulConfig fields {sorted(unknown)}; expected a subset of {sorted(kinds)}")
        for name, value in d.items():
            if type(value) is not kinds[name]:
                raise ValueError(f"MatmulConfig.{name} must be {kinds[name].__name__}, got {value!r}")
        try:
            cfg = cls(**d)
        except TypeError as e:  # a required field missing
            raise ValueError(f"MatmulConfig: {e}") from None
        cfg.validate()
        return cfg

    # Bounds past anything the tables, the heuristic or the autotuner make: a config beyond
    # them comes from a corrupt file, and would fail to compile or exhaust the device.
    _POW2_MAX = {"block_m": 1024, "block_n": 1024, "block_k": 1024, "group_m": 1024, "num_warps": 32}
    _RANGE = {"num_stages": (1, 16), "split_k": (1, 64)}  # the skinny heuristic splits K in 3

    def validate(self) -> None:
        if self.kernel not in ("tma", "ptr"):
            raise ValueError(f"MatmulConfig.kernel must be 'tma' or 'ptr', got {self.kernel!r}")
        for name, most in self._POW2_MAX.items():
            v = getattr(self, name)
            if v < 1 or v & (v - 1) or v > most:
                raise ValueError(f"MatmulConfig.{name} must be a power of two up to {most}, got {v}")
        for name, (least, most) in self._RANGE.items():
            v = getattr(self, name)
            if not least <= v <= most:
                raise ValueError(f"MatmulConfig.{name} must be in [{least}, {most}], got {v}")
        if self.kernel == "ptr" and (self.epilogue_subtile or self.flatten or self.split_tail):
            raise ValueError("epilogue_subtile, flatten and split_tail apply to the 'tma' kernel only")
        if self.split_tail and self.split_k == 1:
            raise ValueError("split_tail needs split_k > 1 (the slices of the last round's tiles)")

    def short(self) -> str:
        s = f"{self.kernel} {self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.num_stages}"
        if self.group_m != 8:
            s += f" g{self.group_m}"
        if self.split_k > 1:
            s += f" split{self.split_k}" + (" tail" if self.split_tail else "")
        if self.epilogue_subtile:
            s += " sub"
        if self.flatten:
            s += " flat"
        return s


@dataclasses.dataclass(frozen=True)
class Problem:
    """What the config choice depends on, read off one call by the runtime."""

    M: int
    N: int
    K: int
    batch: int
    elem_bytes: int  # 2 (fp16, bf16) or 4 (fp32)
    dtype: str  # "float16", "bfloat16", "float32"
    tma: bool  # operands qualify for TMA descriptors (runtime/layout.py)
    a_kmajor: bool = True  # A's unit stride is along K (row-major A)
    b_kmajor: bool = False  # B's unit stride is along K (a transposed (N, K) weight)
    c_tma: bool = True  # the output takes a TMA store
    has_bias: bool = False
    num_sms: int = DEFAULT_NUM_SMS
    precision: str = "ieee"  # the dot's input precision: "ieee", or "tf32" for fp32 with TF32 allowed
    # How wide the pointer kernel's narrower operand load can be: the largest power of two up
    # to 16 dividing that operand's strides and its size along its unit stride
    # (runtime.layout.load_divisors).
    divisor: int = 16

    def bucket(self) -> str:
        """The autotuning cache key: layout facts plus each dimension rounded up to a power of two."""
        kind = "tma" if self.tma else "ptr"
        layout = ("k" if self.a_kmajor else "m") + ("k" if self.b_kmajor else "n")
        dims = "x".join(str(pow2_ceil(d)) for d in (self.M, self.N, self.K))
        dtype = "tf32" if self.precision == "tf32" else self.dtype
        if not self.tma:
            kind += f"{self.divisor}"
        return f"{kind}|{dtype}|{layout}|c{int(self.c_tma)}|bias{int(self.has_bias)}|b{min(self.batch, 2)}|{dims}"


def pow2_ceil(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tiles(p: Problem, block_m: int, block_n: int) -> int:
    """Output tiles of ``block_m`` x ``block_n`` over the whole batch."""
    return cdiv(p.M, block_m) * cdiv(p.N, block_n) * p.batch


def fills_a_wave(n_tiles: int, num_sms: int) -> bool:
    """Whether ``n_tiles`` programs occupy at least 90% of the SMs: then one wave of these
    (wider) tiles beats two of narrower ones (see configs/hopper.py for the measurements)."""
    return 10 * n_tiles >= 9 * num_sms


# ------------------------------------------------------------------------ shared memory


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


# ------------------------------------------------------------------ split-K, work items


def k_per_split(K: int, block_k: int, split_k: int) -> int:
    """K columns per slice: a whole number of BLOCK_K steps, so slices never overlap."""
    return cdiv(cdiv(K, block_k), split_k) * block_k


def useful_split(K: int, block_k: int, split_k: int) -> bool:
    """Every slice gets at least one BLOCK_K step of real K."""
    return split_k == 1 or k_per_split(K, block_k, split_k) * (split_k - 1) < K


def batch_fits(p: Problem, cfg: MatmulConfig) -> bool:
    """Whether the kernels can run this config on a batch (see kernels/matmul_tma.py): no
    split-K (in either kernel), and K a whole number of BLOCK_K steps when an operand is
    stacked along K (an M-major A or an N-major B), so the last K step never reads the next
    matrix."""
    if p.batch == 1:
        return True
    if cfg.kernel != "tma":
        return cfg.split_k == 1  # the pointer kernel's split-K is for single matrices
    k_outer = not p.a_kmajor or not p.b_kmajor
    return cfg.split_k == 1 and (not k_outer or p.K % cfg.block_k == 0)


def whole_tiles(p: Problem, cfg: MatmulConfig) -> int:
    """With ``split_tail``: the output tiles of the full rounds over the SMs, each one work
    item over all of K (the tiles past them are split in ``split_k``); else 0."""
    if not cfg.split_tail:
        return 0
    return tiles(p, cfg.block_m, cfg.block_n) // p.num_sms * p.num_sms


def tail_fits(p: Problem, cfg: MatmulConfig) -> bool:
    """Whether a ``split_tail`` config applies: its tiles fill at least one whole round of the
    SMs and part of one more (under a round it is plain split-K), and the split tiles' slices
    make one round at most, so every program runs the same whole tiles and one slice at most."""
    whole = whole_tiles(p, cfg)
    tail = tiles(p, cfg.block_m, cfg.block_n) - whole
    return cfg.split_tail and p.batch == 1 and whole > 0 and 0 < tail * cfg.split_k <= p.num_sms


def work_items(p: Problem, cfg: MatmulConfig) -> int:
    """The TMA kernel's work items: output tiles times K slices (the split tiles' slices only,
    with ``split_tail``)."""
    n = tiles(p, cfg.block_m, cfg.block_n)
    whole = whole_tiles(p, cfg)
    return whole + (n - whole) * cfg.split_k


def tma_programs(p: Problem, cfg: MatmulConfig) -> int:
    """The TMA kernel's program count. With ``split_tail``, one per SM when there are whole
    tiles, so that each program runs the same number of them before its slice; else
    ``persistent_programs``."""
    items = work_items(p, cfg)
    if cfg.split_tail and whole_tiles(p, cfg):
        return p.num_sms
    return persistent_programs(items, p.num_sms)


def persistent_programs(items: int, programs: int) -> int:
    """How many programs the persistent TMA kernel runs for ``items`` work items, given at
    most ``programs`` (one per SM): the fewest that still finish in as few rounds, so every
    program gets the same number of items, give or take one.

    On the H200's 132 SMs, prefill shapes with a multiple of 128 tiles of 128 x 256 ran 1-4%
    faster on 128 programs than on 132 (the four extra programs finish no sooner, they only
    put more tiles in flight against the power limit and the L2); where the tiles fill whole
    rounds of 132, 132 programs ran 0.7-15% faster. Over the llm table: 1.017x (row-major B)
    and 1.008x (nn.Linear) against one program per SM (docs/performance.md, "Program count").
    """
    if items <= programs:
        return max(1, items)
    return cdiv(items, cdiv(items, programs))
