"""Every private ``torch._C`` binding the layers below ``inductor/`` call, in one place.

``inductor/compat.py`` holds the private ``torch._inductor`` / ``torch._dynamo`` APIs, but
``runtime/`` and ``ops/`` sit below ``inductor/`` and cannot import it: they import this leaf
module instead. ``tests/test_compat.py`` checks every name here, as it checks compat's, so a
binding that moves fails one smoke test rather than an op call.
"""

from __future__ import annotations

import torch

# How torch's own register_autograd kernels (torch/_library/autograd.py) run an op below
# autograd (ops/: the autograd kernels); no public spelling exists.
below_autograd = torch._C._AutoDispatchBelowAutograd
# Below ADInplaceOrView as well, as inference mode runs an op (ops/matmul.py: aten's sparse matmuls).
below_autograd_and_views = torch._C._AutoDispatchBelowADInplaceOrView


def below_key(name: str):
    """A guard factory: ``with below_key("AutocastCUDA")():`` runs the block below that dispatch
    key, as torch.library.register_autocast's kernels run an op below Autocast (ops/: the
    autocast kernels). The key set is made once, here."""
    keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, name))
    return lambda: torch._C._ExcludeDispatchKeyGuard(keys)


def current_raw_stream(device_index: int) -> int:
    """The handle of the device's current CUDA stream, as Inductor's generated code reads it
    (what a launch goes on). Looked up at each call: CPU builds of torch have no CUDA bindings."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def gpu_sleep(cycles: int) -> None:
    """Keep the current CUDA stream busy for about ``cycles`` GPU clock cycles
    (``torch.cuda._sleep``'s binding; runtime/benchmarking.py queues timed calls behind it)."""
    torch._C._cuda_sleep(cycles)
