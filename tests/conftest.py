"""Test setup: on a machine without CUDA, run the Triton kernels through the interpreter.

TRITON_INTERPRET must be set before ``@triton.jit`` runs, i.e. before the package is
imported, so it is set here, at collection, and never by the package itself.
"""

import contextlib
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The device every kernel test runs on: the GPU when there is one, else the CPU through
# Triton's interpreter.
DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _fresh_seed():
    # Fresh random inputs every run, but reproducible when a failure prints the seed.
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    yield seed


@pytest.fixture
def fresh_state():
    """The plugin's process state forgotten (``inductor_mm_plugin.reset()``) before the test,
    and what the test taught it forgotten after."""
    import inductor_mm_plugin

    inductor_mm_plugin.reset()
    yield
    inductor_mm_plugin.reset()


@contextlib.contextmanager
def tf32_flags_restored():
    """Torch's TF32 flags, legacy and new API alike, as they were before the block.

    The new API's getters return the resolved value ("none" inherits from the parent:
    generic -> cuda/mkldnn -> matmul), so what is restored is the same behaviour, not
    always the same raw setting. The legacy setter goes first: it rewrites the backends'
    matmul values. Not ``monkeypatch.setattr``: torch serves the flags through
    ``cuBLASModule.__getattr__``, so pytest 9 (which restores what the instance
    ``__dict__`` held) finds nothing to restore and deletes the attribute at teardown."""
    backends, legacy = torch.backends, None
    with contextlib.suppress(RuntimeError):  # a mix of the two APIs has no legacy value
        legacy = torch.get_float32_matmul_precision()
    saved = [(backends, backends.fp32_precision), (backends.cuda.matmul, backends.cuda.matmul.fp32_precision),
             (backends.mkldnn.matmul, backends.mkldnn.matmul.fp32_precision)]  # fmt: skip
    try:
        yield
    finally:
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy)
        for holder, value in saved:
            holder.fp32_precision = value


def default_tf32_flags() -> None:
    """Torch's TF32 flags as a fresh process has them: legacy "highest", every new-API value
    "none" (so cuda.matmul inherits torch.backends.fp32_precision). The legacy setters leave
    explicit values behind ("ieee" after ``allow_tf32 = False``), which a test of the
    inheritance must not start from."""
    torch.set_float32_matmul_precision("highest")
    for holder in (torch.backends, torch.backends.cuda.matmul, torch.backends.mkldnn.matmul):
        holder.fp32_precision = "none"


@contextlib.contextmanager
def allow_tf32(enabled: bool):
    """``torch.backends.cuda.matmul.allow_tf32`` (the legacy API) set to ``enabled`` inside
    the block, the flags restored after."""
    with tf32_flags_restored():
        torch.backends.cuda.matmul.allow_tf32 = enabled
        yield


@pytest.fixture
def tf32():
    """TF32 on for the test (``allow_tf32(True)``)."""
    with allow_tf32(True):
        yield
