"""Facts about the device a call runs on, asked once per device: its SM count (the one source
for both the eager kernels and the templates), the launch stream, the device guard."""

from __future__ import annotations

import contextlib

import torch

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
    return torch._C._cuda_getCurrentRawStream(device.index) if device.type == "cuda" else 0
