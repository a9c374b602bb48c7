"""inductor_mm_plugin: the project's own Triton matmul inside torch.compile.

Importing the package registers the ops ``torch.ops.inductor_mm_plugin.mm``, ``.addmm``
and ``.bmm`` and does nothing else: no Inductor config changes, no GPU work.
"""

__version__ = "0.1.0"

from .ops import KernelFallbackWarning, addmm, bmm, mm  # noqa: E402  (registers the ops)

__all__ = ["KernelFallbackWarning", "__version__", "addmm", "bmm", "mm"]
