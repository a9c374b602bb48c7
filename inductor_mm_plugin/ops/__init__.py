"""The ``torch.library`` ops ``inductor_mm_plugin::mm/addmm/bmm/mm_swiglu/mm_activation`` (registration, fake,
autograd) and the float64 references the tests check them against: the layer above
``runtime/``, below ``inductor/`` (docs/design.md, Layers)."""

from ..runtime import KernelFallbackWarning, kernel_unsupported_reason, set_autotune, warmup
from .activation import mm_activation
from .matmul import addmm, bmm, mm
from .swiglu import mm_swiglu

__all__ = ["KernelFallbackWarning", "addmm", "bmm", "kernel_unsupported_reason", "mm", "mm_activation", "mm_swiglu",
           "set_autotune", "warmup"]  # fmt: skip
