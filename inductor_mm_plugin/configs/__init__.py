"""Configuration: one home for what the kernels and templates run with.

* ``space.py``: what a config and a problem are, shared-memory and split-K arithmetic, the
  persistent kernel's program count;
* ``hopper.py``: the tables, each entry with the measurement that put it there;
* ``selector.py``: the config selector fitted to a sweep (its table in ``tables/``);
* ``eager.py``: which config the eager kernels run (``heuristic_config``: the selector, else
  the hand rules, ``rule_config``), whether unaligned operands are copied, and what the
  autotuner times (``candidate_configs``);
* ``templates.py``: which configs Inductor's templates are offered.

Pure arithmetic on shapes: nothing here touches torch or a GPU, so it is tested on the CPU.
Where a matmul runs at all (plugin or stock) is the routing pass's decision, in inductor/.
"""

from .eager import (
    candidate_configs,
    copies_pay,
    heuristic_config,
    rule_config,
    skinny_config,
    skinny_cost_us,
    swiglu_config,
)
from .hopper import INTERPRETER_NUM_SMS, SKINNY_MAX_M
from .space import (
    DEFAULT_NUM_SMS,
    SMEM_LIMIT_BYTES,
    MatmulConfig,
    Problem,
    batch_fits,
    fits,
    k_per_split,
    persistent_programs,
    smem_bytes,
    tail_fits,
    tma_programs,
    whole_tiles,
    work_items,
)

__all__ = [
    "DEFAULT_NUM_SMS", "INTERPRETER_NUM_SMS", "SKINNY_MAX_M", "SMEM_LIMIT_BYTES", "MatmulConfig", "Problem",
    "batch_fits", "candidate_configs", "copies_pay", "fits", "heuristic_config", "k_per_split", "persistent_programs", "rule_config",
    "skinny_config", "skinny_cost_us", "smem_bytes", "swiglu_config", "tail_fits", "tma_programs", "whole_tiles",
    "work_items",
]  # fmt: skip
