"""Triton's interpreter: whether the kernels run on the CPU through it, and whether this one can.

A leaf module (nothing of the package below it), so that every layer asks the same question
the same way: ``runtime/`` (the launch path, the checks), ``inductor/`` (eligibility, the
routing pass's cache key) and ``comparison/``.
"""

from __future__ import annotations

import functools
import os


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU through its interpreter.

    Read once, when the package is imported: ``@triton.jit`` reads TRITON_INTERPRET when the
    kernels are defined, so it must be set before the package is imported for the CPU path
    to exist.
    """
    return _INTERPRETING


_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# What ``interpreter_defect_of`` says (the routing pass lists it among its reasons).
INTERPRETER_DEFECT = ("Triton {triton}'s interpreter cannot run the kernel's loops with numpy {numpy} "
                      "(triton-lang/triton#9171, fixed in triton 3.7): use triton >= 3.7 or numpy < 2.4")  # fmt: skip


def interpreter_defect_of(triton_version: str, numpy_version: str) -> str | None:
    """Why this Triton interpreter cannot run the kernels with this numpy, or None.

    Triton 3.6's interpreter turns a loop bound into a Python int with ``int()`` on a
    one-element array, which numpy >= 2.4 rejects ("only 0-dimensional arrays can be
    converted to Python scalars"): every kernel here loops over K. Upstream issue
    triton-lang/triton#9171, fixed in triton 3.7.
    """
    major_minor = lambda v: tuple(int(x) for x in v.split("+")[0].split(".")[:2])  # noqa: E731
    if major_minor(triton_version) < (3, 7) and major_minor(numpy_version) >= (2, 4):
        return INTERPRETER_DEFECT.format(triton=triton_version, numpy=numpy_version)
    return None


@functools.cache
def interpreter_defect() -> str | None:
    """``interpreter_defect_of`` for the installed versions, when the interpreter is on."""
    if not _INTERPRETING:
        return None
    import numpy
    import triton

    return interpreter_defect_of(triton.__version__, numpy.__version__)
