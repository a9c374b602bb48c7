"""Shared by the examples: the device, and Triton's interpreter on machines without CUDA."""

import os

import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    # Before the plugin's kernels are defined (i.e. before importing inductor_mm_plugin).
    os.environ.setdefault("TRITON_INTERPRET", "1")
DEVICE = "cuda" if CUDA else "cpu"
