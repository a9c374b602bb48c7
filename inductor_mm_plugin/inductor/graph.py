"""What the routing pass and the SwiGLU pattern need to know about post-grad graph nodes:
views, pointwise ops, and whether a matmul's result feeds an epilogue Inductor can fuse."""

from __future__ import annotations

import torch

from .selection import MATMULS

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


# The matmuls an epilogue must not join (aten's, and the plugin's once routed).
_MATMUL_TARGETS = {*MATMULS, *(getattr(torch.ops.inductor_mm_plugin, op).default for op in MATMULS.values())}
_EPILOGUE_DEPTH = 8  # how far along views and pointwise ops an epilogue is followed


def _from_other_matmul(node: torch.fx.Node, origin: torch.fx.Node, depth: int = 4) -> bool:
    """Whether ``node`` is computed from a matmul other than ``origin`` through views and
    pointwise ops (a few levels deep)."""
    if node is origin or node.op != "call_function" or depth == 0:
        return False
    if node.target in _MATMUL_TARGETS:
        return True
    if elementwise(node):
        return any(_from_other_matmul(arg, origin, depth - 1) for arg in node.all_input_nodes)
    return False


def _computed_from(node: torch.fx.Node, origin: torch.fx.Node, depth: int = 4) -> bool:
    """Whether ``node`` is ``origin`` or computed from it alone by views and pointwise ops."""
    if node is origin:
        return True
    if node.op != "call_function" or depth == 0 or not elementwise(node):
        return False
    return bool(node.all_input_nodes) and all(_computed_from(arg, origin, depth - 1) for arg in node.all_input_nodes)


def feeds_pointwise(node: torch.fx.Node) -> bool:
    """Whether the matmul's result goes into a pointwise op (an epilogue Inductor can fuse),
    directly or through views (a Linear on a 3-D input is view -> mm -> view), and that
    epilogue does not combine it with another matmul's result.

    The exception is SwiGLU's ``silu(gate(x)) * up(x)``: Inductor fuses the product into
    one of the two templates, whose epilogue then loads the other matmul's whole output
    tile with its latency exposed, and the other template runs with no epilogue at all. On
    the H200 that lost to the extern kernels plus Inductor's separate pointwise kernel
    (M = 8192, d = 4096, f = 14336: 1620 + 1425 us against 1382 + 1382 + 163;
    bench/results/archive/2026-11-29-NVIDIA_H200-epilogue-breakdown.md)."""
    found = False
    frontier = [(node, 0)]  # the result and what is computed from it by views and pointwise ops
    while frontier:
        current, depth = frontier.pop()
        for user in current.users:
            if user.op != "call_function" or depth == _EPILOGUE_DEPTH:
                continue
            if user.target in VIEWS:
                frontier.append((user, depth + 1))
            elif pointwise(user):
                others = [arg for arg in user.all_input_nodes if arg is not current]
                if any(_from_other_matmul(arg, node) for arg in others):
                    return False
                found = True
                # Follow ops that only compute on this result (an activation, GELU's pieces);
                # stop at one that brings in another tensor (a residual add).
                if all(_computed_from(arg, node) for arg in others):
                    frontier.append((user, depth + 1))
    return found
