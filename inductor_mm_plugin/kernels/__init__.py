"""Layer 1: private ``@triton.jit`` kernels and their configurations.

Nothing here validates input or touches torch.library; the launchers in
``inductor_mm_plugin.ops`` do that.
"""
