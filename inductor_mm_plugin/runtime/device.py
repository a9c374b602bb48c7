"""Facts about the device a call runs on, asked once per device: its SM count (the one source
for both the eager kernels and the templates), whether it has TMA, the launch stream, the
device guard."""

from __future__ import annotations

import contextlib

import torch

from .. import torch_c
from ..configs import INTERPRETER_NUM_SMS

_NUM_SMS: dict[int, int] = {}


def num_sms(device: torch.device) -> int:
    """The device's SM count; a few pretend SMs in Triton's interpreter (CPU)."""
    if device.type != "cuda":
        return INTERPRETER_NUM_SMS
    index = device.index if device.index is not None else torch.cuda.current_device()
    n = _NUM_SMS.get(index)
    if n is None:
        n = _NUM_SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return n


def device_guard(device: torch.device):
    """Launch on the tensors' device, not on whatever device happens to be current."""
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def raw_stream(device: torch.device) -> int:
    """The current stream's handle (what a launch goes on); 0 on the CPU (the interpreter)."""
    return torch_c.current_raw_stream(device.index) if device.type == "cuda" else 0


# TMA (the tensor-memory accelerator the TMA kernel and templates read operands through) is
# sm_90 and later: an Ampere GPU (sm_80/sm_86) takes the pointer kernel.
_TMA_MIN_CAPABILITY = (9, 0)
_CAPABILITIES: dict[int, tuple[int, int]] = {}


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """The CUDA compute capability of ``device``, looked up once per device; None off CUDA
    (the interpreter, which runs the TMA kernel too) and where no GPU can be asked (fake CUDA
    tensors on a machine without one: the routing pass's CPU tests)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device() if device.index is None else device.index
    capability = _CAPABILITIES.get(index)
    if capability is None:
        capability = _CAPABILITIES[index] = tuple(torch.cuda.get_device_capability(index))
    return capability


def no_tma_reason(device: torch.device) -> str | None:
    """Why ``device`` cannot run the TMA kernel (a GPU before sm_90), or None."""
    capability = device_capability(device)
    if capability is None or capability >= _TMA_MIN_CAPABILITY:
        return None
    return f"the GPU (sm_{capability[0]}{capability[1]}) has no TMA (sm_90 and later): the pointer kernel"
