"""Smoke test of every private torch API the plugin touches: inductor_mm_plugin/inductor/compat.py,
and inductor_mm_plugin/torch_c.py for the layers below inductor/."""

import pytest
import torch

from inductor_mm_plugin import torch_c
from inductor_mm_plugin.inductor import compat


def test_private_apis_exist():
    assert callable(compat.compile_fx)
    assert callable(compat.register_lowering) and isinstance(compat.lowerings, dict)
    assert callable(compat.mm_args) and callable(compat.autotune_select_algorithm)
    assert isinstance(compat.aten_mm, compat.ExternKernelChoice)
    assert isinstance(compat.aten_addmm, compat.ExternKernelChoice)
    assert isinstance(compat.aten_bmm, compat.ExternKernelChoice)
    assert hasattr(compat.inductor_config, compat.PASS_SLOT)
    assert {"max_autotune", compat.PASS_SLOT} <= set(compat.inductor_config_types())
    assert compat.list_mode_options("max-autotune-no-cudagraphs")["max_autotune"] is True
    assert compat.TORCH_VERSION >= (2, 11)
    assert {"uuid", "__call__"} <= set(dir(compat.CustomGraphPass))
    assert isinstance(compat.get_hash_for_files((__file__,)), bytes)
    assert callable(compat.can_use_tma) and callable(compat.persistent_mm_grid)


def test_helpers():
    assert compat.passes_in_slot(None) == []
    p = object()
    assert compat.passes_in_slot(p) == [p]
    assert compat.passes_in_slot([p, p]) == [p, p]
    assert compat.dynamo_frame_locals() is None  # not inside a Dynamo trace
    assert compat.current_fx_node() is None  # not inside a lowering


def test_compile_phase_seconds_count_a_compile():
    torch._dynamo.reset()
    assert compat.compile_phase_seconds() == {}
    torch.compile(lambda x: x * 2 + 1, backend="aot_eager")(torch.ones(3))
    phases = compat.compile_phase_seconds()
    assert phases and all(isinstance(v, float) and v >= 0 for v in phases.values())
    torch._dynamo.reset()


def test_select_algorithm_unwraps_both_return_conventions(monkeypatch):
    monkeypatch.setattr(compat, "autotune_select_algorithm", lambda *a: ("node", "choice"))
    assert compat.select_algorithm("n", [], [], None) == "node"
    monkeypatch.setattr(compat, "autotune_select_algorithm", lambda *a: "node")
    assert compat.select_algorithm("n", [], [], None) == "node"


def test_dynamo_frame_locals_inside_a_trace():
    seen = {}

    def backend(gm, example_inputs):
        seen.update(compat.dynamo_frame_locals() or {})
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda marker_arg: marker_arg + 1, backend=backend)(torch.ones(2))
    assert "marker_arg" in seen


def test_private_torch_c_bindings_below_inductor():
    # inductor_mm_plugin/torch_c.py, the runtime and ops layers' shim: the autograd kernels run
    # the op below autograd as torch's own register_autograd does; the direct launch reads
    # the current CUDA stream's handle; the benchmarks keep the GPU busy while calls queue.
    x = torch.ones(2, requires_grad=True)
    with torch_c.below_autograd():
        assert not (x * 2).requires_grad
    with torch_c.below_autograd_and_views():
        assert not (x * 2).requires_grad
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the autocast kernels' guard
        assert torch.mm(x[None], x[:, None]).dtype == torch.bfloat16
        with torch_c.below_key("AutocastCPU")():
            assert torch.mm(x[None], x[:, None]).dtype == torch.float32
    if torch.cuda.is_available():
        assert torch_c.current_raw_stream(0) == torch.cuda.current_stream(0).cuda_stream
        torch_c.gpu_sleep(1000)
        torch.cuda.synchronize()
    else:
        assert callable(torch_c.current_raw_stream) and callable(torch_c.gpu_sleep)


def test_pytree():
    tree = {"a": [torch.ones(1), 2], "b": (torch.zeros(2),)}
    assert len([t for t in compat.tree_leaves(tree) if isinstance(t, torch.Tensor)]) == 2
    assert compat.tree_map(lambda t: 1, tree) == {"a": [1, 1], "b": (1,)}


def test_private_apis_of_export_and_logging():
    import collections
    import inspect

    # The C++ wrapper's fallback kernel (lowering.py).
    assert callable(compat.fallback_handler) and "add_to_fallback_set" in inspect.signature(compat.fallback_handler).parameters
    assert compat.cpp_wrapper() is False  # not inside a lowering
    # Cached routing decisions (records.py, backend.py): Inductor's counters, replayed on a
    # cache hit, and compile_fx's inner compile.
    assert isinstance(compat.counters["inductor"], collections.Counter)
    assert "inner_compile" in inspect.signature(compat.compile_fx).parameters
    assert callable(compat.compile_fx_inner)


def test_calling_modules_and_compile_id_inside_a_trace():
    # The frame resumed after a graph break inside ``child`` is rooted at the child; the
    # stack still shows the model calling it, and nothing outside torch.compile's entry.
    class Child(torch.nn.Module):
        def forward(self, x):
            x = x + 1
            torch._dynamo.graph_break()
            return x * 2

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.child = Child()

        def forward(self, x):
            return self.child(x) - 1

    class EagerParent(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    seen = []

    def backend(gm, example_inputs):
        seen.append(([type(m).__name__ for m in compat.calling_modules()], compat.current_compile_id()))
        return gm.forward

    assert compat.calling_modules() == [] and compat.current_compile_id() is None
    torch._dynamo.reset()
    model = Model()
    EagerParent(torch.compile(model, backend=backend))(torch.ones(2))
    chains = [chain for chain, _ in seen]
    assert ["Model", "Child"] in chains and all(chain[0] == "Model" for chain in chains), chains
    assert all(compile_id is not None for _, compile_id in seen)
    assert len({str(compile_id) for _, compile_id in seen}) == len(seen)


def test_readable_matmul_precision_answers_where_torch_raises():
    """Set through the new per-backend API (as transformers' imports do), TF32 leaves
    ``torch.get_float32_matmul_precision()`` raising (pytorch/pytorch#196728); inside the block
    it answers from the per-backend settings, and the getter is torch's own again after it."""
    from conftest import default_tf32_flags, tf32_flags_restored

    legacy = torch.get_float32_matmul_precision
    with tf32_flags_restored():
        default_tf32_flags()
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        with compat.readable_matmul_precision():
            assert torch.get_float32_matmul_precision() == "cuda=tf32,mkldnn=ieee"
        torch.backends.fp32_precision = "tf32"
        with compat.readable_matmul_precision():
            assert torch.get_float32_matmul_precision() == "high"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        with compat.readable_matmul_precision():
            assert torch.get_float32_matmul_precision() == "medium"
        default_tf32_flags()
        torch.set_float32_matmul_precision("high")  # the legacy API alone: torch's own answer
        with compat.readable_matmul_precision():
            assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision is legacy
    with pytest.raises(ZeroDivisionError), compat.readable_matmul_precision():
        1 / 0
    assert torch.get_float32_matmul_precision is legacy
