"""Layer 2: launchers and the ``torch.library`` ops ``inductor_mm_plugin::mm/addmm/bmm/mm_swiglu``."""

from .matmul import KernelFallbackWarning, addmm, bmm, kernel_unsupported_reason, mm, set_autotune, warmup
from .swiglu import mm_swiglu

__all__ = ["KernelFallbackWarning", "addmm", "bmm", "kernel_unsupported_reason", "mm", "mm_swiglu", "set_autotune",
           "warmup"]  # fmt: skip
