"""Routing inside torch.compile: which sites go to the plugin, proven from the generated code."""

import logging
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE
from integration_utils import (
    MLP,
    Attention,
    Block,
    count_calls,
    fresh_inductor_cache,
    run_compiled,
)

import inductor_mm_plugin
from inductor_mm_plugin import opt_in, opt_out
from inductor_mm_plugin.inductor.decision import META_KEY
from inductor_mm_plugin.inductor.records import record_sites
from inductor_mm_plugin.inductor.selection import Site


def x_of(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def routed(records):
    return sorted((r.site.phase, r.site.op, r.site.module) for r in records if r.routed)


def not_routed(records):
    return sorted((r.site.phase, r.site.op, r.site.module) for r in records if not r.routed)


def check_code_matches(records, codes):
    """The generated code calls the plugin exactly for the routed sites, aten for the rest."""
    plugin, stock = count_calls(codes)
    assert plugin == sum(r.routed for r in records), (plugin, records)
    assert stock == sum(not r.routed for r in records), (stock, records)


# ----------------------------------------------------------------- select modes


def test_select_all_routes_every_site_forward_and_backward():
    model, x = Block(), x_of(2, 8, 16)
    with record_sites() as records:
        out, grads, codes = run_compiled(model, x, train=True, backend="inductor_mm_plugin", options={"select": "all"})
    assert not not_routed(records), not_routed(records)
    phases = {r.site.phase for r in records}
    assert phases == {"forward", "backward"}
    ops = {r.site.op for r in records}
    assert ops == {"addmm", "bmm", "mm"}  # Linear, attention, Linear backward
    check_code_matches(records, codes)
    # numerics against eager, forward and gradients
    for p in model.parameters():
        p.grad = None
    ref = model(x)
    ref.float().square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4)


def test_opted_in_class_routes_only_its_instances():
    @opt_in
    class OptedMLP(MLP):
        pass

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = OptedMLP()
            self.b = MLP()

        def forward(self, x):
            return self.b(self.a(x))

    with record_sites() as records:
        _, _, codes = run_compiled(Model(), x_of(4, 16), train=True, backend="inductor_mm_plugin")
    assert {r.site.module.split(".")[0] for r in records if r.routed} == {"a"}
    assert {r.site.module.split(".")[0] for r in records if not r.routed} == {"b"}
    assert all("select='auto'" in r.reason for r in records if not r.routed)
    assert {r.site.phase for r in records if r.routed} == {"forward", "backward"}
    check_code_matches(records, codes)


def test_opted_in_instance_nested_inheritance_and_opt_out():
    model = Block()
    opt_in(model.attn)  # qkv and proj inherit; the bmms in attn.forward are attn's own
    opt_out(model.attn.proj)
    assert isinstance(model.attn, Attention)
    with record_sites() as records:
        _, _, codes = run_compiled(model, x_of(2, 8, 16), backend="inductor_mm_plugin", options={"select": "opted_in"})
    assert routed(records) == [("forward", "addmm", "attn.qkv"), ("forward", "bmm", "attn"), ("forward", "bmm", "attn")]
    reasons = {r.site.module: r.reason for r in records if not r.routed}
    assert reasons["attn.proj"] == "inside an opted-out module (opt_out)"
    assert "not inside an opted-in module" in reasons["mlp.up"]
    check_code_matches(records, codes)


def test_opt_out_wins_over_select_all():
    model = MLP()
    opt_out(model.down)
    with record_sites() as records:
        _, _, codes = run_compiled(model, x_of(4, 16), backend="inductor_mm_plugin", options={"select": "all"})
    assert routed(records) == [("forward", "addmm", "up")]
    check_code_matches(records, codes)


def test_auto_without_opt_in_routes_all():
    with record_sites() as records:
        run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin")
    assert len(routed(records)) == 2 and not not_routed(records)


def test_opted_in_root_routes_its_own_matmuls():
    """The root never appears in Dynamo's module metadata; the plugin reads its marker from the frame."""

    @opt_in
    class Top(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 8, device=DEVICE))
            self.inner = nn.Linear(8, 8, device=DEVICE)

        def forward(self, x):
            return self.inner(x @ self.w)

    with record_sites() as records:
        _, _, codes = run_compiled(Top(), x_of(4, 16), train=True, backend="inductor_mm_plugin", options={"select": "opted_in"})
    assert not not_routed(records), not_routed(records)
    assert ("forward", "mm", "") in routed(records)
    check_code_matches(records, codes)


def test_predicate_receives_a_readable_site():
    seen = []

    def only_up(site: Site) -> bool:
        seen.append(site)
        return site.module == "up"

    with record_sites() as records:
        _, _, codes = run_compiled(MLP(), x_of(4, 16), train=True, backend="inductor_mm_plugin", options={"select": only_up})
    # x needs no grad, so up's backward is one mm (the weight gradient)
    assert routed(records) == [("backward", "mm", "up"), ("forward", "addmm", "up")]
    assert {r.reason for r in records if not r.routed} == {"the select predicate returned False"}
    site = next(s for s in seen if s.phase == "forward" and s.module == "up")
    assert (site.op, site.module_type, site.shapes, site.dtypes) == ("addmm", "Linear", ((32,), (4, 16), (16, 32)), ("float32",) * 3)
    assert site.strides[2] == (1, 16)  # the Linear weight, transposed view
    assert "forward addmm up (Linear) [32 4x16 16x32] float32" == str(site)
    check_code_matches(records, codes)


# ------------------------------------------------------------- eligibility


def test_float64_site_stays_on_stock_with_reason(caplog):
    caplog.set_level(logging.INFO, logger="inductor_mm_plugin.inductor.routing")
    with record_sites() as records:
        out, _, codes = run_compiled(MLP(dtype=torch.float64), x_of(4, 16, dtype=torch.float64), backend="inductor_mm_plugin")
    assert routed(records) == []
    assert all("dtype torch.float64" in r.reason for r in records)
    assert "not routed forward addmm up (Linear)" in caplog.text and "torch.float64" in caplog.text
    check_code_matches(records, codes)


def test_operand_without_unit_stride_stays_on_stock():
    w = torch.randn(8, 6, device=DEVICE)

    def f(x):
        return x[::2, ::2] @ w

    x = x_of(8, 16)
    with record_sites() as records:
        out, _, codes = run_compiled(f, x, backend="inductor_mm_plugin")
    assert len(records) == 1 and not records[0].routed
    assert "no unit-stride dimension" in records[0].reason
    check_code_matches(records, codes)
    torch.testing.assert_close(out, f(x))


def test_cpu_without_interpreter_stays_on_stock():
    code = textwrap.dedent(
        """
        import torch
        from inductor_mm_plugin.inductor.records import record_sites
        with record_sites() as records:
            f = torch.compile(lambda a, b: a @ b, backend="inductor_mm_plugin")
            a, b = torch.randn(4, 8), torch.randn(8, 3)
            torch.testing.assert_close(f(a, b), a @ b)
        print([r.reason for r in records])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # a cache hit would skip the routing pass
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "CPU tensors need Triton's interpreter" in res.stdout


# --------------------------------------------------------------- backend surface


def test_backend_found_by_entry_point_in_fresh_process():
    code = textwrap.dedent(
        """
        import sys, torch
        assert "inductor_mm_plugin" not in sys.modules
        f = torch.compile(lambda a, b: a @ b, backend="inductor_mm_plugin", fullgraph=True)
        a, b = torch.randn(5, 7), torch.randn(7, 3)
        torch.testing.assert_close(f(a, b), a @ b)
        assert "inductor_mm_plugin" in sys.modules
        print("ok")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})  # fmt: skip
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]


def test_unknown_option_lists_valid_keys():
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: a @ b, backend="inductor_mm_plugin", options={"selct": "all"})
    with pytest.raises(Exception, match=r"unknown option 'selct'. Did you mean 'select'.*'select', 'compete'"):
        f(x_of(2, 3), x_of(3, 2))


@pytest.mark.parametrize(
    "key,value,expected",
    [("max_autotune", "x", "bool"), ("max_autotune", 1, "bool"), ("triton.cudagraphs", None, "bool"),
     ("max_autotune_gemm_backends", ["ATEN"], "str"), ("unroll_reductions_threshold", 2.5, "int")],
)  # fmt: skip
def test_inductor_option_of_the_wrong_type_is_an_error(key, value, expected):
    # The stock backend rejects these too (torch.compile's apply_options: isinstance against
    # torch._inductor.config.get_type); the message names key, expected type and value.
    message = f"option {key!r} must be {expected}, got {value!r} ({type(value).__name__})"
    with pytest.raises(TypeError, match=re.escape(message)):
        inductor_mm_plugin.inductor_options(**{key: value})
    with pytest.raises(Exception, match="Unexpected type of attr"):
        torch.compile(lambda a: a, options={key: value})


def test_plugin_backend_rejects_an_inductor_option_of_the_wrong_type():
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: a @ b, backend="inductor_mm_plugin", options={"max_autotune": "x"})
    with pytest.raises(Exception, match=re.escape("option 'max_autotune' must be bool, got 'x' (str)")):
        f(x_of(2, 3), x_of(3, 2))


def test_inductor_option_types_torch_accepts_are_accepted():
    # bool for an int key (a bool is an int, as torch's isinstance check has it), an
    # Optional key set or unset, a callable pass, and a key whose default is None (its
    # type, NoneType, says nothing about what it takes, so it is not checked).
    inductor_mm_plugin.inductor_options(unroll_reductions_threshold=True, max_autotune=False,
                                        post_grad_custom_pre_pass=lambda graph: None,
                                        **{"cuda.cutlass_max_profiling_configs": 4})  # fmt: skip


def test_bad_select_value_is_an_error():
    with pytest.raises(ValueError, match="select must be one of 'auto', 'all', 'opted_in'"):
        inductor_mm_plugin.inductor_options(select="some")


def test_mode_and_inductor_options_are_applied():
    # An Inductor key beside the plugin keys reaches the compile (here: a no-op patch).
    with record_sites() as records:
        run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin",
                     options={"select": "all", "max_autotune_gemm_backends": "ATEN"})  # fmt: skip
    assert len(routed(records)) == 2
    with record_sites() as records:
        run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin", mode="max-autotune-no-cudagraphs")
    assert len(routed(records)) == 2


def test_stock_backend_with_inductor_options():
    model = Block()
    opt_in(model.mlp)
    with record_sites() as records:
        # compete=False: the counts below are of routed sites (see run_compiled).
        _, _, codes = run_compiled(model, x_of(2, 8, 16), train=True,
                                   options=inductor_mm_plugin.inductor_options(select="opted_in", compete=False))  # fmt: skip
    assert {r.site.module for r in records if r.routed} == {"mlp.up", "mlp.down"}
    assert {r.site.phase for r in records if r.routed} == {"forward", "backward"}
    check_code_matches(records, codes)


def test_chains_with_the_users_own_pass():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class CountMatmuls(CustomGraphPass):
        calls = []

        def __call__(self, graph):
            self.calls.append(sum(n.target is torch.ops.aten.mm.default for n in graph.nodes))

        def uuid(self):
            return "count-matmuls-v1"

    user_pass = CountMatmuls()
    with record_sites() as records:
        run_compiled(MLP(), x_of(4, 16), train=True, backend="inductor_mm_plugin",
                     options={"select": "all", "post_grad_custom_pre_pass": user_pass})  # fmt: skip
    assert len(user_pass.calls) == 2  # forward and backward graphs, before the routing
    assert user_pass.calls[1] == 3  # it saw the backward graph's aten mms (down: dX, dW; up: dW)
    assert len(routed(records)) == 5
    # The same through the global config slot (torch 2.11 holds one pass object there).
    user_pass.calls.clear()
    with torch._inductor.config.patch(post_grad_custom_pre_pass=user_pass):
        run_compiled(MLP(), x_of(4, 16), backend="inductor_mm_plugin")
    assert len(user_pass.calls) == 1


def test_metadata_is_carried_to_plugin_nodes():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    seen = []

    class Inspect(CustomGraphPass):
        def __call__(self, graph):
            for n in graph.nodes:
                if str(n.target).startswith("inductor_mm_plugin."):
                    seen.append((str(n.target), set(n.meta)))

        def uuid(self):
            return "inspect-v1"

    run_compiled(MLP(), x_of(4, 16), train=True, backend="inductor_mm_plugin",
                 options={"select": "all", "post_grad_custom_post_pass": Inspect()})  # fmt: skip
    fwd = [keys for target, keys in seen if "addmm" in target]
    bwd = [keys for target, keys in seen if target.endswith("mm.default") and "addmm" not in target]
    assert fwd and bwd
    assert all({"val", "nn_module_stack", "stack_trace", "inductor_mm_plugin"} <= k for k in fwd), fwd
    assert all({"val", "fwd_nn_module_stack", "inductor_mm_plugin"} <= k for k in bwd), bwd


def test_graph_break_inside_opted_in_module():
    class Breaking(MLP):
        def forward(self, x):
            h = torch.relu(self.up(x))
            torch._dynamo.graph_break()
            return self.down(h)

    model = opt_in(Breaking())
    x = x_of(4, 16)
    with record_sites() as records:
        out, _, codes = run_compiled(model, x, train=True, backend="inductor_mm_plugin")
    assert {r.site.module for r in records if r.routed} == {"up", "down"}
    assert not not_routed(records)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


def test_dynamic_batch_sizes_do_not_recompile():
    from torch._dynamo.utils import counters

    model = MLP()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="inductor_mm_plugin", dynamic=True)
    with fresh_inductor_cache(), record_sites() as records:
        for batch in (3, 5, 7, 11):
            x = x_of(batch, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert counters["stats"]["unique_graphs"] == 1
    forward = [r for r in records if r.site.phase == "forward"]
    assert len(forward) == 2 and all(r.routed for r in forward)  # compiled once, batch symbolic
    assert all(not isinstance(r.site.shapes[1][0], int) for r in forward), forward


def test_fullgraph_inference_under_no_grad():
    model, x = Block(), x_of(2, 8, 16)
    with torch.no_grad(), record_sites() as records:
        out, _, codes = run_compiled(model, x, backend="inductor_mm_plugin", fullgraph=True)
        ref = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert {r.site.phase for r in records} == {"forward"}
    check_code_matches(records, codes)


def test_lowering_not_registered_by_importing_the_ops():
    code = textwrap.dedent(
        """
        import sys, torch, inductor_mm_plugin
        assert "inductor_mm_plugin.inductor.lowering" not in sys.modules
        from torch._inductor.lowering import lowerings
        assert torch.ops.inductor_mm_plugin.mm.default not in lowerings
        from inductor_mm_plugin.inductor.lowering import register_lowerings, lower_mm
        register_lowerings(); first = lowerings[torch.ops.inductor_mm_plugin.mm.default]
        register_lowerings(); assert lowerings[torch.ops.inductor_mm_plugin.mm.default] is first
        assert first.__wrapped__ is lower_mm
        print("ok")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]


# ------------------------------------------------------------------------- GPU


def _bf16_block():
    return Block(d=256, dtype=torch.bfloat16), x_of(4, 128, 256, dtype=torch.bfloat16)


@pytest.mark.gpu
def test_gpu_reduce_overhead_cuda_graphs():
    from torch._inductor.utils import run_and_get_code

    model, x = _bf16_block()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="inductor_mm_plugin", mode="reduce-overhead")
    with torch.no_grad(), fresh_inductor_cache(), record_sites() as records:
        _, codes = run_and_get_code(compiled, x)
        for _ in range(3):  # warm-up, then CUDA-graph replays
            out = compiled(x).clone()
        ref = model(x)
    # 4 Linear addmm + 2 attention bmm, each measured under CUDA graphs (the form this
    # compile runs in) and routed where the plugin's kernel was faster (compete="auto").
    assert len(records) == 6 and all(r.measured is not None and r.measured.graphs for r in records), records
    plugin, stock = count_calls(codes)
    assert (plugin, stock) == (len(routed(records)), 6 - len(routed(records))), (plugin, stock)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("tf32_api", ["legacy", "new"])
def test_gpu_max_autotune_with_compete(tf32_api):
    """With TF32 set through the new per-backend API too (as transformers' imports leave it),
    the getter Inductor keys its timings on raises (pytorch/pytorch#196728); under
    max_autotune those timings run in the scheduler, after the lowering returned."""
    from conftest import default_tf32_flags, tf32_flags_restored

    model, x = _bf16_block()
    with tf32_flags_restored(), torch.no_grad(), record_sites() as records:
        default_tf32_flags()
        if tf32_api == "new":
            torch.backends.cuda.matmul.fp32_precision = "tf32"
        out, _, codes = run_compiled(model, x, backend="inductor_mm_plugin",
                                     options={"select": "all", "compete": True, "max_autotune": True})  # fmt: skip
        ref = model(x)
    plugin, stock = count_calls(codes)
    # Each routed site ends as the extern plugin kernel, a plugin template kernel, or aten.
    assert plugin + stock == len(records) == len(routed(records)), (plugin, stock, records)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_profiler_shows_the_plugin_kernel_for_routed_sites():
    model, x = _bf16_block()
    opt_in(model.mlp)
    with torch.no_grad():
        torch._dynamo.reset()
        # compete=False: both mlp sites run the plugin whatever the autotuner would time.
        compiled = torch.compile(model, backend="inductor_mm_plugin", options={"compete": False})
        compiled(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            compiled(x)
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    # The extern plugin kernel is _matmul_kernel*; a site with a fused epilogue runs the
    # plugin's template (triton_tem_*: stock Inductor uses no template without max-autotune).
    plugin_kernels = [n for n in names if "_matmul" in n or n.startswith("triton_tem")]
    assert len(plugin_kernels) == 2, names  # mlp.up and mlp.down; attention stays on cuBLAS


def test_epilogue_detection_sees_through_views():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    seen = {}

    class Inspect(CustomGraphPass):
        def __call__(self, graph):
            for n in graph.nodes:
                if str(n.target).startswith("inductor_mm_plugin."):
                    seen[n.meta["nn_module_stack"].popitem()[1][0] if n.meta.get("nn_module_stack") else n.name] = (
                        n.meta[META_KEY].epilogue
                    )

        def uuid(self):
            return "inspect-epilogue-v1"

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.Linear(16, 16, bias=False, device=DEVICE)
            self.plain = nn.Linear(16, 16, bias=False, device=DEVICE)

        def forward(self, x):  # x is 3-D: each Linear is view -> mm -> view
            return self.plain(torch.nn.functional.silu(self.act(x)))

    with torch.no_grad():
        run_compiled(Model(), x_of(2, 4, 16), backend="inductor_mm_plugin",
                     options={"select": "all", "post_grad_custom_post_pass": Inspect()})  # fmt: skip
    assert seen == {"L['self'].act": True, "L['self'].plain": False}, seen

    class SwiGLUResidual(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate, self.up, self.down, self.res = (nn.Linear(16, 16, device=DEVICE) for _ in range(4))

        def forward(self, x):
            h = x + self.res(x)  # a residual of the input: an epilogue of res
            return h + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))

    seen.clear()
    with torch.no_grad():
        run_compiled(SwiGLUResidual(), x_of(2, 4, 16), backend="inductor_mm_plugin",
                     options={"select": "all", "post_grad_custom_post_pass": Inspect()})  # fmt: skip
    # silu(gate) * up joins two matmuls: neither takes the template; down's residual add
    # reads h, itself res's result: not an epilogue either.
    assert seen == {"L['self'].res": True, "L['self'].gate": False, "L['self'].up": False,
                    "L['self'].down": False}, seen  # fmt: skip


def test_opt_in_rejects_non_modules():
    with pytest.raises(TypeError, match="opt_in: expected an nn.Module class or instance, got int"):
        opt_in(3)
    with pytest.raises(TypeError, match="opt_out: expected an nn.Module class or instance, got class dict"):
        opt_out(dict)


def test_marking_an_instance_twice_reuses_one_subclass():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    opt_in(a)
    opt_in(b)
    assert type(a) is type(b) and type(a).__mro__[1] is nn.Linear
    opt_out(a)  # re-marking derives from the original class, not from the opted-in one
    assert type(a).__mro__[1] is nn.Linear and isinstance(a, nn.Linear)


def test_mode_and_options_together_is_an_error():
    from inductor_mm_plugin.inductor.backend import config_patches

    with pytest.raises(ValueError, match="either mode or options, not both"):
        config_patches({"select": "all"}, mode="max-autotune")
