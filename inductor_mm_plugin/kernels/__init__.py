"""The bottom layer: the private ``@triton.jit`` kernels, and nothing else.

``matmul.py`` holds the pointer kernel and the jit helpers both kernels share, ``matmul_tma.py``
the persistent TMA kernel. Their configs are chosen in ``configs/``; checks and launches are in
``runtime/``, the torch ops in ``ops/`` (docs/design.md, Layers).
"""
