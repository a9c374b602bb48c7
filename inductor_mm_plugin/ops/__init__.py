"""Layer 2: launchers and the ``torch.library`` ops ``inductor_mm_plugin::mm/addmm/bmm``."""

from .matmul import KernelFallbackWarning, addmm, bmm, kernel_unsupported_reason, mm, set_autotune, warmup

__all__ = ["KernelFallbackWarning", "addmm", "bmm", "kernel_unsupported_reason", "mm", "set_autotune", "warmup"]
