"""What the routing pass and the SwiGLU pattern need to know about post-grad graph nodes."""

from __future__ import annotations

import torch

# Metadata carried from the aten node to the plugin node. ``val`` is the same fake tensor:
# the plugin ops return exactly what aten's do (a new contiguous tensor, same dtype).
COPIED_META = ("val", "tensor_meta", "nn_module_stack", "fwd_nn_module_stack", "custom", "stack_trace",
               "seq_nr", "partitioner_tag", "source_fn_stack", "original_aten", "from_node")  # fmt: skip

# Ops that only reinterpret a result's shape: an epilogue after them still fuses.
VIEWS = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default,
         torch.ops.aten.unsqueeze.default, torch.ops.aten.squeeze.dim}  # fmt: skip


def pointwise(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and torch.Tag.pointwise in getattr(node.target, "tags", ())


def elementwise(node: torch.fx.Node) -> bool:
    """A view or a pointwise op: what an epilogue is made of."""
    return node.target in VIEWS or pointwise(node)


def copy_meta(src: torch.fx.Node, dst: torch.fx.Node) -> None:
    for key in COPIED_META:
        if key in src.meta:
            dst.meta[key] = src.meta[key]
