"""Inductor integration — selection, routing pass, lowering, backend: the layer above ``ops/``,
below the user surface (``opt_in``, ``comparison/``, the CLI; docs/design.md, Layers).

Importing this package imports nothing from ``torch._inductor``; ``compat``, ``lowering``,
``routing`` and ``backend`` do, and are imported when a compile asks for them.
"""
