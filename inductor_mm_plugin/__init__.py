"""inductor_mm_plugin: the project's own Triton matmul inside torch.compile.

Importing the package registers the ops ``torch.ops.inductor_mm_plugin.mm``, ``.addmm``,
``.bmm``, ``.mm_swiglu`` and ``.mm_activation`` and does nothing else: no Inductor config changes, no GPU work. The Inductor
integration (``inductor_options``) is imported when first used.
"""

from .ops import KernelFallbackWarning, addmm, bmm, mm, mm_activation, mm_swiglu, set_autotune, warmup  # (registers the ops)
from .opt_in import opt_in, opt_out
from .state import reset
from .version import __version__


def inductor_options(*, select="auto", compete="auto", **inductor_config):
    """``options=`` for the stock ``torch.compile`` backend that route matmuls like the plugin
    backend does: ``torch.compile(model, options=inductor_mm_plugin.inductor_options(select="all"))``.
    """
    from .inductor.backend import inductor_options as impl

    return impl(select=select, compete=compete, **inductor_config)


def compare(model, example_inputs, **kwargs):
    """A/B comparison of the plugin against stock Inductor; see ``inductor_mm_plugin.comparison``."""
    from .comparison import compare as impl

    return impl(model, example_inputs, **kwargs)


__all__ = [
    "KernelFallbackWarning", "__version__", "addmm", "bmm", "compare", "inductor_options", "mm", "mm_activation", "mm_swiglu",
    "opt_in",
    "opt_out", "reset", "set_autotune", "warmup",
]  # fmt: skip
