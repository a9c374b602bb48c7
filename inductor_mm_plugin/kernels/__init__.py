"""The bottom layer: the private ``@triton.jit`` kernels, and nothing else.

``matmul.py`` holds the pointer kernel and the jit helpers the kernels share, ``matmul_tma.py``
the persistent TMA kernel, ``swiglu_tma.py`` SwiGLU's two matmuls and product in one kernel,
``silu_mul.py`` stock's SwiGLU product, which the routing pass times the fused kernel against.
Their configs are chosen in ``configs/``; checks and launches are in ``runtime/``, the torch
ops in ``ops/`` (docs/design.md, Layers).
"""
