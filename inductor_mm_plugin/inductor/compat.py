"""Every private ``torch._inductor`` / ``torch._dynamo`` API the plugin touches, in one place
(with ``torch.utils._pytree``). The layers below ``inductor/`` (``runtime/``, ``ops/``) cannot
import this module; their few private ``torch._C`` calls are in ``inductor_mm_plugin/torch_c.py``.

Supported: torch 2.11 (the GPU machine, triton 3.6) and torch 2.13 (CI, triton 3.7.1).
``tests/test_compat.py`` imports each name here, so an API that moves fails one smoke test
instead of a compile deep inside Inductor. Differences papered over:

* ``autotune_select_algorithm`` returns a node on 2.11 and ``(node, choice)`` on 2.13.
* ``config.post_grad_custom_pre_pass`` holds one pass on 2.11; 2.13 also takes a list.
* ``ExternKernelChoice`` / ``TritonTemplate`` assert on duplicate names on both, and only
  2.13 has a registry to look them up: the plugin keeps its own singletons.
* Inductor's autotuning keys read ``torch.get_float32_matmul_precision()``, which raises on
  both once TF32 was set through the per-backend API (``readable_matmul_precision``).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
import torch._dynamo.eval_frame as _eval_frame
import torch.nn.modules.module as _nn_module
from torch._dynamo.utils import counters  # noqa: F401
from torch._inductor import config as inductor_config  # noqa: F401
from torch._inductor import list_mode_options  # noqa: F401
from torch._inductor.compile_fx import compile_fx, compile_fx_inner  # noqa: F401
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files  # noqa: F401
from torch._inductor.kernel.bmm import aten_bmm  # noqa: F401
from torch._inductor.kernel.mm import aten_addmm, aten_mm  # noqa: F401
from torch._inductor.kernel.mm_common import addmm_epilogue, mm_args, mm_grid, persistent_mm_grid  # noqa: F401
from torch._inductor.lowering import fallback_handler, lowerings, register_lowering  # noqa: F401
from torch._inductor.select_algorithm import (  # noqa: F401
    ExternKernelChoice,
    TritonTemplate,
    autotune_select_algorithm,
    extern_kernels,
)
from torch._inductor.utils import can_use_tma  # noqa: F401
from torch._inductor.virtualized import V
from torch.utils._pytree import tree_leaves, tree_map  # noqa: F401  (no public pytree in torch 2.13)

TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])

# The post-grad slot the routing pass lives in. The pre pass runs before Inductor's own
# patterns, so it sees aten.addmm before they split it into mm + add on GPU
# (unfuse_bias_add_to_pointwise) and routes the fused form.
PASS_SLOT = "post_grad_custom_pre_pass"


def select_algorithm(name: str, choices: list, input_nodes: list, layout) -> Any:
    """``autotune_select_algorithm`` returning the node on every supported torch."""
    with readable_matmul_precision():
        result = autotune_select_algorithm(name, choices, input_nodes, layout)
    return result[0] if isinstance(result, tuple) else result


@contextlib.contextmanager
def readable_matmul_precision():
    """Within the block, ``torch.get_float32_matmul_precision()`` answers where torch's raises.

    Inductor keys its autotuning on that getter (``select_algorithm.create_precompile_key``,
    ``codecache.PersistentCache.lookup``), and it raises "mix of the legacy and new APIs" once
    a matmul precision was set through ``torch.backends.*.fp32_precision``, as transformers'
    imports do (pytorch/pytorch#196728; torch 2.11 and 2.13). Stock picks one choice there and
    never asks; the plugin's competing choices would crash the compile. The answer comes
    from the per-backend settings (``_matmul_precision_from_backends``).
    """
    legacy = torch.get_float32_matmul_precision

    def answering():
        try:
            return legacy()
        except RuntimeError:
            return _matmul_precision_from_backends()

    torch.get_float32_matmul_precision = answering
    try:
        yield
    finally:
        torch.get_float32_matmul_precision = legacy


def _matmul_precision_from_backends() -> str:
    """The legacy name of the per-backend matmul precisions, as torch maps them ("highest":
    ieee on CUDA and oneDNN, "high": tf32, "medium": tf32 on CUDA and bf16 on oneDNN), or
    ``cuda=...,mkldnn=...`` for a pair with no legacy name; "none" reads the generic setting,
    and an unset generic one is torch's default, ieee."""
    generic = torch.backends.fp32_precision if torch.backends.fp32_precision != "none" else "ieee"
    cuda, mkldnn = (p if p != "none" else generic for p in (torch.backends.cuda.matmul.fp32_precision,
                                                           torch.backends.mkldnn.matmul.fp32_precision))  # fmt: skip
    legacy = {("ieee", "ieee"): "highest", ("tf32", "tf32"): "high", ("tf32", "bf16"): "medium"}
    return legacy.get((cuda, mkldnn), f"cuda={cuda},mkldnn={mkldnn}")


def current_fx_node() -> torch.fx.Node | None:
    """The FX node Inductor is lowering right now (its metadata carries the routing decision)."""
    graph = V.graph if V.graph is not None else None
    return getattr(graph, "current_node", None)


def cpp_wrapper() -> bool:
    """Whether the graph being lowered gets a C++ wrapper: ``cpp_wrapper=True``, and always
    under AOTInductor (its AOT mode implies it)."""
    return bool(V.graph is not None and getattr(V.graph, "cpp_wrapper", False))


def fallback_lowering(op, *args, **kwargs):
    """``op`` lowered as Inductor lowers a custom op it has no lowering for: a
    ``FallbackKernel`` that calls the op itself (through the dispatcher from the Python or
    C++ wrapper; through the proxy executor in an AOTInductor package)."""
    return fallback_handler(op, add_to_fallback_set=False)(*args, **kwargs)


def passes_in_slot(value: Any) -> list:
    """The passes a post-grad pass slot holds: None, one pass, or (2.13) a list of passes."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def inductor_config_types() -> dict[str, Any]:
    """Each Inductor config key with the type torch.compile checks a value for it against:
    ``config.get_type`` (the key's annotation, else its default's type), which is what
    torch/__init__.py's ``_TorchCompileInductorWrapper.apply_options`` uses."""
    get_type = getattr(inductor_config, "get_type", None)
    return {k: get_type(k) if get_type else type(v) for k, v in inductor_config.get_config_copy().items()}


def compile_phase_seconds() -> dict[str, float]:
    """Seconds in each phase Dynamo and Inductor time (``dynamo_timed``: "compile_fx_inner",
    "GraphLowering.run", ...) since ``torch._dynamo.reset()``, which clears them; phases nest."""
    from torch._dynamo.utils import compilation_time_metrics

    return {name: float(sum(times)) for name, times in compilation_time_metrics.items()}


def dynamo_frame_locals() -> dict[str, Any] | None:
    """The local variables of the frame Dynamo is compiling, or None outside a trace.

    The plugin finds the compiled root module here (``self``): Dynamo's node metadata
    (``nn_module_stack``) lists every submodule but never the root itself.
    """
    with contextlib.suppress(Exception):
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        if tx is not None:
            return dict(tx.f_locals)
    return None


def calling_modules() -> list[torch.nn.Module]:
    """The modules whose call is under way around the frame Dynamo is compiling, outermost
    first, counted from the innermost ``torch.compile`` entry point inward; [] when none.

    A graph break inside a child module makes Dynamo compile the rest of the child as frames
    of their own, rooted at the child: Dynamo's metadata then never names the modules around
    it. They are still calling it: each has ``nn.Module._call_impl`` on the Python stack.
    The walk stops at Dynamo's entry wrapper (``compile_wrapper`` in eval_frame.py, which
    closes over the compiled ``fn``; ``OptimizedModule.__call__`` does not), so an eager
    parent of a compiled child is not counted.
    """
    found = []
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename == _eval_frame.__file__ and "fn" in code.co_freevars:
            break
        if code.co_name == "_call_impl" and code.co_filename == _nn_module.__file__:
            module = frame.f_locals.get("self")
            if isinstance(module, _eval_frame.OptimizedModule):
                break
            if isinstance(module, torch.nn.Module):
                found.append(module)
        frame = frame.f_back
    return found[::-1]


def current_compile_id() -> Any:
    """Dynamo's id of the frame compile under way, or None. AOT autograd restores it when it
    compiles a backward graph lazily, so it ties a backward graph to its forward graph."""
    return torch._guards.CompileContext.current_compile_id()


@contextlib.contextmanager
def fresh_inductor_cache():
    """Inductor's ``fresh_cache``: a temporary cache folder for the block, removed after it.

    On an exception torch keeps the folder and logs "on error, temporary cache dir kept at
    ...". Here the exception leaves torch's block as if the block had ended (so the folder
    goes) and is raised again outside it: a failed ``compare`` leaves nothing behind and
    prints its own error alone.
    """
    from torch._inductor.utils import fresh_cache

    error = None
    with fresh_cache():
        try:
            yield
        except Exception as e:  # noqa: BLE001  (raised again below)
            error = e
    if error is not None:
        raise error



def unset_fake_temporarily():
    """Leave fake-tensor mode inside a compile, to make and time real tensors (as Inductor's
    own autotuner does)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily as unset

    return unset()
