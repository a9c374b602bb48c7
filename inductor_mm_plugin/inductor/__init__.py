"""Layer 3: Inductor integration — selection, routing pass, lowering, backend.

Importing this package imports nothing from ``torch._inductor``; ``compat``, ``lowering``,
``routing`` and ``backend`` do, and are imported when a compile asks for them.
"""
