"""``inductor_mm_plugin::mm_activation`` (a Linear and its activation in one kernel) and where the
routing pass puts it: the op against float64, its errors and fallback, its gradients; the
fused GELU's accuracy; the post-grad pattern on real compiled graphs; the routing decision
(timed against stock's form, under compete="auto", or from a plan) with the timing stubbed on
graphs of fake CUDA tensors; a whole compile that runs the fused kernel. GPU: the timed
decision on real operands, and a default compile of Linear + GELU.
"""

import re
import warnings
from unittest.mock import patch

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cases import DTYPES, operand, poisoned, randn
from conftest import DEVICE, HAS_CUDA
from integration_utils import count_calls, fresh_inductor_cache, no_graph_caches
from torch._inductor.utils import run_and_get_code

from inductor_mm_plugin import KernelFallbackWarning, mm_activation
from inductor_mm_plugin.inductor import measure
from inductor_mm_plugin.inductor.activation_pattern import match_activation
from inductor_mm_plugin.inductor.measure import Measurement
from inductor_mm_plugin.inductor.options import PluginOptions
from inductor_mm_plugin.inductor.routing import route_graph
from inductor_mm_plugin.inductor.selection import RootInfo
from inductor_mm_plugin.ops.activation import ACTIVATIONS, mm_activation_launch_checked
from inductor_mm_plugin.ops.reference import assert_mm_activation_close

aten = torch.ops.aten
MM_ACTIVATION = torch.ops.inductor_mm_plugin.mm_activation.default
FUSED_CALL = "extern_kernels.inductor_mm_plugin_mm_activation("
NAMES = list(ACTIVATIONS)


# ---------------------------------------------------------------------------------- the op


@pytest.mark.parametrize("activation", NAMES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [None, "N", "MN"])
@pytest.mark.parametrize("m,n,k,a_t,b_t,sliced", [(37, 53, 70, False, True, False), (64, 48, 32, True, False, False),
                                                  (33, 17, 21, False, False, True), (1, 1, 1, False, True, False)])
def test_op_matches_float64(activation, dtype, bias, m, n, k, a_t, b_t, sliced):
    a = operand(m, k, dtype, transposed=a_t, sliced=sliced)
    b = operand(k, n, dtype, transposed=b_t, sliced=sliced)
    bias_t = None if bias is None else randn(*((n,) if bias == "N" else (m, n)), dtype=dtype)
    out = poisoned(m, n, dtype=dtype)
    assert mm_activation_launch_checked(a, b, bias_t, activation, out=out) is out
    assert_mm_activation_close(out, a, b, bias_t, activation)
    assert_mm_activation_close(mm_activation(a, b, bias_t, activation), a, b, bias_t, activation)


@pytest.mark.parametrize("m,n,k", [(0, 16, 8), (16, 0, 8), (16, 24, 0)])
def test_op_with_an_empty_dimension(m, n, k):
    a, b, bias = randn(m, k, dtype=torch.float16), randn(k, n, dtype=torch.float16), randn(n, dtype=torch.float16)
    out = mm_activation(a, b, bias, "gelu")
    assert out.shape == (m, n)
    assert_mm_activation_close(out, a, b, bias, "gelu")  # K = 0: gelu(bias)


def test_op_is_deterministic():
    a, b, bias = randn(200, 96, dtype=torch.bfloat16), randn(96, 136, dtype=torch.bfloat16), randn(136, dtype=torch.bfloat16)
    first = mm_activation(a, b, bias, "gelu")
    assert torch.equal(first, mm_activation(a, b, bias, "gelu"))


def test_op_errors_name_the_problem():
    a, b = randn(4, 8, dtype=torch.float32), randn(8, 5, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"activation must be one of 'relu', 'gelu', 'gelu_tanh', 'silu', got 'tanh'"):
        mm_activation(a, b, None, "tanh")
    with pytest.raises(RuntimeError, match=r"mm_activation: a and b shapes cannot be multiplied \(4x8 and 5x8\)"):
        mm_activation(a, b.t(), None, "gelu")
    with pytest.raises(RuntimeError, match=r"bias with shape \(4\) cannot be broadcast"):
        mm_activation(a, b, randn(4, dtype=torch.float32), "gelu")


def test_op_falls_back_to_torch_with_a_warning_where_the_kernel_cannot_run():
    a, b, bias = (randn(*s, dtype=torch.float64) for s in ((5, 7), (7, 3), (3,)))
    with pytest.warns(KernelFallbackWarning, match=r"mm_activation: .*float64"):
        out = mm_activation(a, b, bias, "silu")
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, F.silu(torch.addmm(bias, a, b)), rtol=1e-12, atol=1e-12)
    ints = torch.ones(3, 3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(RuntimeError), warnings.catch_warnings():  # F.gelu's own error for integers
        warnings.simplefilter("ignore", KernelFallbackWarning)
        mm_activation(ints, ints, None, "gelu")


def test_sparse_operands_run_torchs_composition_with_a_warning():
    a, b, bias = randn(5, 7, dtype=torch.float32).to_sparse(), randn(7, 3, dtype=torch.float32), \
        randn(3, dtype=torch.float32)  # fmt: skip
    with pytest.warns(KernelFallbackWarning, match=r"mm_activation: .*sparse"):
        out = mm_activation(a, b, bias, "gelu")
    assert out.layout == torch.strided and out.is_contiguous()
    torch.testing.assert_close(out, F.gelu(torch.addmm(bias, a.to_dense(), b)), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match=r"mm_activation: a and b shapes cannot be multiplied"):
        mm_activation(a, b.t(), None, "gelu")


def test_fake_tensors_give_the_result_shape_and_dtype():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = torch.empty(300, 64, dtype=torch.bfloat16), torch.empty(96, 64, dtype=torch.bfloat16).t()
        out = MM_ACTIVATION(a, b, torch.empty(96, dtype=torch.bfloat16), "gelu")
    assert out.shape == (300, 96) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(requires_grad):
    a = randn(9, 7, dtype=torch.float32).requires_grad_(requires_grad)
    b = randn(5, 7, dtype=torch.float32).t().detach().requires_grad_(requires_grad)
    bias = randn(5, dtype=torch.float32).requires_grad_(requires_grad)
    for activation in NAMES:
        torch.library.opcheck(MM_ACTIVATION, (a, b, bias, activation))
        torch.library.opcheck(MM_ACTIVATION, (a, b, None, activation))


@pytest.mark.parametrize("activation", NAMES)
def test_gradients_match_float64(activation):
    M, N, K = 23, 19, 31
    a = randn(M, K, dtype=torch.float32).requires_grad_()
    b = randn(N, K, dtype=torch.float32).t().detach().requires_grad_()  # nn.Linear layout
    bias = randn(N, dtype=torch.float32).requires_grad_()
    grad_out = randn(N, M, dtype=torch.float32).t()  # non-contiguous (pytorch#194719)
    got = torch.autograd.grad(mm_activation(a, b, bias, activation), (a, b, bias), grad_out)
    ref_in = [t.detach().double().requires_grad_() for t in (a, b, bias)]
    want = torch.autograd.grad(ACTIVATIONS[activation](torch.addmm(ref_in[2], ref_in[0], ref_in[1])), ref_in,
                               grad_out.double())  # fmt: skip
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)


def test_the_fused_gelu_is_the_exact_gelu_to_float32_accuracy():
    """kernels/activation.py's one-exp2 GELU (``_gelu_erf``) elementwise in Triton on float32
    inputs across [-12, 12] and its tails, against float64's erf GELU: relative error at most
    4e-6 where |GELU(x)| > 1e-3 (the docstring says 1.7e-6; float32's own 0.5 x (1 + erf) is
    5e-5 there), absolute at most 1e-6 elsewhere. One coefficient off by 3e-5 fails it."""
    import triton

    from inductor_mm_plugin.kernels.activation import _stock_activation_kernel
    from inductor_mm_plugin.runtime.launch import mm_activation_launch

    torch.manual_seed(0)
    x = torch.cat([torch.linspace(-12, 12, 48001), torch.randn(8000) * 3, torch.tensor([0.0, -0.0, 1e-30, -1e-30])])
    x = x.to(DEVICE)
    # The matmul kernel's epilogue on x itself: x (n x 1) @ [1] (1 x 1), then GELU.
    out = poisoned(x.numel(), 1, dtype=torch.float32)
    mm_activation_launch(x[:, None], torch.ones(1, 1, device=DEVICE), None, "gelu", out)
    ref = F.gelu(x.double())
    err = (out[:, 0].double() - ref).abs()
    big = ref.abs() > 1e-3
    assert not out.isnan().any()
    assert (err[big] / ref[big].abs()).max() <= 4e-6
    assert err[~big].max() <= 1e-6
    # Stock's pass (libdevice's erf) for the timing: the same function.
    stock = poisoned(x.numel(), dtype=torch.float32)
    _stock_activation_kernel[(triton.cdiv(x.numel(), 1024),)](x, stock, x.numel(), ACTIVATION="gelu", BLOCK=1024)
    torch.testing.assert_close(stock.double(), ref, rtol=1e-5, atol=1e-6)


def test_the_fused_gelus_coefficients_are_gelu_q():
    """``_gelu_erf`` writes its Horner chain as literals; ``GELU_Q`` (which the benchmark's
    torch-op GELU uses) must be the same polynomial: the chain's lines, run as Python on a few
    points, give what GELU_Q gives there."""
    import inspect

    from inductor_mm_plugin.kernels.activation import GELU_Q, _gelu_erf

    source = inspect.getsource(_gelu_erf.fn)  # a JITFunction, or the interpreter's wrapper
    lines = [line.strip() for line in source.splitlines() if line.strip().startswith("q = ")]
    assert len(lines) == len(GELU_Q) - 1
    for point in (-2.0, -0.7, 0.0, 0.3, 1.9):
        scope = {"s": point}
        for line in lines:
            exec(line, {}, scope)
        want = 0.0
        for c in reversed(GELU_Q):
            want = want * point + c
        assert scope["q"] == pytest.approx(want, rel=1e-12, abs=1e-15), point


@pytest.mark.parametrize("activation", NAMES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_both_timed_arms_compute_the_activation(activation, with_bias):
    """What ``measure`` times as the plugin and as stock both write activation(a @ b + bias)
    into the buffer it is given (poisoned first): a timing of two different computations
    would decide nothing."""
    m, n, k = 40, 24, 32
    a, w = randn(m, k, dtype=torch.bfloat16), randn(n, k, dtype=torch.bfloat16).t()
    args = [randn(n, dtype=torch.bfloat16), a, w] if with_bias else [a, w]
    for plugin in (True, False):
        out = poisoned(m, n, dtype=torch.bfloat16)
        measure._call(measure.ACTIVATION_OP + activation, args, out, 1, 1, plugin=plugin)()
        # stock rounds a @ b + bias to bf16 before the activation: one more rounding, within the bound
        assert_mm_activation_close(out, a, w, args[0] if with_bias else None, activation)
    assert measure._out_shape(measure.ACTIVATION_OP + activation, measure.layouts(args)) == (m, n)


# ------------------------------------------------------------- the pattern in real graphs


class LinearAct(nn.Module):
    def __init__(self, act, bias=True, dtype=torch.bfloat16, reuse=None):
        super().__init__()
        self.lin, self.act, self.reuse = nn.Linear(64, 96, bias=bias, dtype=dtype, device=DEVICE), act, reuse

    def forward(self, x):
        z = self.lin(x)
        y = self.act(z)
        return y + z if self.reuse == "residual" else y


ACTS = {"gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu, "relu": F.relu}


def _matched(model, x) -> list:
    """The activation ``match_activation`` finds at each matmul of the compiled forward graph."""
    found = []

    def grab(graph):
        found.extend(match_activation(n) for n in graph.nodes if n.target in (aten.mm.default, aten.addmm.default))

    with no_graph_caches(), torch._inductor.config.patch(post_grad_custom_pre_pass=grab), torch.no_grad():
        torch._dynamo.reset()
        torch.compile(model)(x)
    return [s.activation if s else None for s in found]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("bias,rows", [(True, (2, 8)), (False, (16,))])
def test_the_pattern_finds_each_activation_as_inductor_decomposes_it(name, dtype, bias, rows):
    model = LinearAct(ACTS[name], bias=bias, dtype=dtype)
    assert _matched(model, randn(*rows, 64, dtype=dtype)) == [name]


@pytest.mark.parametrize("act,reuse", [(lambda z: z, None), (lambda z: z * 2.0 + 1.0, None), (F.gelu, "residual"),
                                       (torch.tanh, None), (lambda z: F.gelu(z) * z, None)])  # fmt: skip
def test_the_pattern_leaves_other_epilogues_alone(act, reuse):
    """Not an activation, or the matmul's result read again (a residual): no match."""
    model = LinearAct(act, reuse=reuse)
    assert _matched(model, randn(16, 64, dtype=torch.bfloat16)) == [None]


# --------------------------------------------------------------------- the routing decision


@pytest.fixture
def timed(monkeypatch):
    """Timing answers ``ratios[op]`` (stock time / plugin time) in every round (an
    activation's op by its prefix); ``calls`` lists each timed op."""
    state = {"ratios": {measure.ACTIVATION_OP: 1.2, "addmm": 0.9, "mm": 0.9}, "calls": [], "precompiled": []}

    def fake(key, op, vals, alpha, beta, graphs):
        state["calls"].append(op)
        ratio = state["ratios"][measure.ACTIVATION_OP if op.startswith(measure.ACTIVATION_OP) else op]
        return Measurement(10.0, 10.0 * ratio, (ratio,) * 5, graphs)

    monkeypatch.setattr(measure, "cached_or_measure", fake)
    monkeypatch.setattr(measure, "precompile", lambda sites: state["precompiled"].extend(s[0] for s in sites) or 0)
    monkeypatch.setattr(measure, "compile_routed", lambda sites: len(sites))
    return state


def _linear_gelu_graph(m=1024, k=256, n=512, reuse=False):
    """addmm(bias, x, w) -> the bf16 GELU as Inductor decomposes it, on fake CUDA tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        vals = {"bias": torch.empty(n, dtype=torch.bfloat16, device="cuda"),
                "x": torch.empty(m, k, dtype=torch.bfloat16, device="cuda"),
                "w": torch.empty(n, k, dtype=torch.bfloat16, device="cuda").t()}  # fmt: skip
        z = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        z32 = z.float()
    graph = torch.fx.Graph()
    args = [graph.placeholder(name) for name in vals]
    for node in args:
        node.meta["val"] = vals[node.name]
    addmm = graph.call_function(aten.addmm.default, tuple(args))
    up = graph.call_function(torch.ops.prims.convert_element_type.default, (addmm, torch.float32))
    half = graph.call_function(aten.mul.Tensor, (up, 0.5))
    scaled = graph.call_function(aten.mul.Tensor, (up, 0.7071067811865476))
    erf = graph.call_function(aten.erf.default, (scaled,))
    one = graph.call_function(aten.add.Tensor, (erf, 1))
    gelu = graph.call_function(aten.mul.Tensor, (half, one))
    down = graph.call_function(torch.ops.prims.convert_element_type.default, (gelu, torch.bfloat16))
    for node in (addmm, down):
        node.meta["val"] = z
    for node in (up, half, scaled, erf, one, gelu):
        node.meta["val"] = z32
    graph.output((down, addmm) if reuse else down)
    return graph


def _route(graph, **options):
    return route_graph(graph, PluginOptions(select="all", compete="auto", **options), RootInfo())


def test_a_linear_gelu_that_times_faster_fused_runs_mm_activation(timed):
    graph = _linear_gelu_graph()
    (record,) = _route(graph)
    assert timed["calls"] == [measure.ACTIVATION_OP + "gelu"]  # the fused form, not the site alone
    # Both forms' kernels compiled side by side before the timing (either may run).
    assert timed["precompiled"] == ["addmm", measure.ACTIVATION_OP + "gelu"]
    (node,) = [n for n in graph.nodes if n.target == MM_ACTIVATION]
    assert node.args[3] == "gelu" and [a.name for a in node.args[:3]] == ["x", "w", "bias"]
    assert record.routed and record.fused == "gelu" and record.measured.ratio == 1.2
    assert not [n for n in graph.nodes if n.target in (aten.addmm.default, aten.erf.default)]
    assert [n.op for n in graph.nodes] == ["placeholder"] * 3 + ["call_function", "output"]


def test_a_linear_gelu_that_times_slower_fused_is_timed_alone(timed, caplog):
    timed["ratios"][measure.ACTIVATION_OP] = 0.95
    graph = _linear_gelu_graph()
    with caplog.at_level("INFO", logger="inductor_mm_plugin.inductor.routing"):
        (record,) = _route(graph)
    assert timed["calls"] == [measure.ACTIVATION_OP + "gelu", "addmm"]
    assert not [n for n in graph.nodes if n.target == MM_ACTIVATION]
    assert record.fused is None and not record.routed and "not fused" in caplog.text


def test_the_fused_forms_precompile_call_names_its_activation():
    x, w, bias = randn(64, 32, dtype=torch.bfloat16), randn(48, 32, dtype=torch.bfloat16).t(), \
        randn(48, dtype=torch.bfloat16)  # fmt: skip
    todo = {"k1": (measure.ACTIVATION_OP + "silu", measure.layouts([bias, x, w]), torch.bfloat16, x.device, 1, 1),
            "k2": ("addmm", measure.layouts([bias, x, w]), torch.bfloat16, x.device, 1, 1)}  # fmt: skip
    calls, swiglu_calls = measure._compile_args(todo)
    assert [len(c) for c in calls] == [7, 6] and calls[0][6] == "silu" and not swiglu_calls
    assert [tuple(t.shape) for t in calls[0][:4]] == [(64, 32), (32, 48), (64, 48), (48,)]


def test_a_result_read_elsewhere_is_not_timed_fused(timed):
    graph = _linear_gelu_graph(reuse=True)
    _route(graph)
    assert timed["calls"] == ["addmm"]


def test_a_plan_fuses_the_site_it_won_fused_without_timing(timed, tmp_path):
    from inductor_mm_plugin.inductor import plan_file

    (record,) = _route(_linear_gelu_graph())
    key = plan_file.site_key(record.site)
    path = tmp_path / "plan.json"
    plan_file.write(path, {key: True}, model="LinearAct", fused={key: "gelu"})
    timed["calls"].clear()
    graph = _linear_gelu_graph()
    (again,) = _route(graph, plan=str(path))
    assert timed["calls"] == [] and again.fused == "gelu" and again.routed
    assert [n for n in graph.nodes if n.target == MM_ACTIVATION]
    plan_file.write(path, {key: True}, model="LinearAct", fused={key: "silu"})  # another activation won there
    graph = _linear_gelu_graph()
    (other,) = _route(graph, plan=str(path))
    assert other.fused is None and not other.routed and "routing plan" in other.reason


def test_a_compiled_linear_gelu_runs_the_fused_kernel(timed):
    """A whole compile with the fused form timed faster: the generated code calls the fused
    extern kernel once and nothing else computes the GELU or the matmul; the result is within
    the float64 bound. (On the CPU the sites are not timed: ``_on_cuda`` is patched.)"""
    model = LinearAct(F.gelu)
    x = randn(2, 40, 64, dtype=torch.bfloat16)
    with fresh_inductor_cache(), patch("inductor_mm_plugin.inductor.routing._on_cuda", return_value=True), \
            torch.no_grad():  # fmt: skip
        torch._dynamo.reset()
        out, codes = run_and_get_code(torch.compile(model, backend="inductor_mm_plugin"), x)
    text = "\n".join(codes)
    assert text.count(FUSED_CALL) == 1 and count_calls(codes) == (1, 0)
    assert not re.search(r"\berf\(", text)  # no kernel of Inductor's computes the GELU
    lin = model.lin
    assert_mm_activation_close(out.reshape(80, 96), x.reshape(80, 64), lin.weight.t(), lin.bias, "gelu")


# ----------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("name", ["gelu", "silu"])
def test_gpu_the_fused_form_is_timed_against_stocks(name):
    """On real operands: a measurement with positive times for both arms, its verdict by the rule."""
    x, w, bias = randn(2048, 1024, dtype=torch.bfloat16), randn(4096, 1024, dtype=torch.bfloat16).t(), \
        randn(4096, dtype=torch.bfloat16)  # fmt: skip
    take, reason, measured = measure.decide_activation(name, [bias, x, w], True)
    assert measured.plugin_us > 0 and measured.aten_us > 0 and len(measured.ratios) >= 1
    assert take == measured.faster and (take or reason)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_gpu_a_default_compile_of_linear_gelu_runs_what_was_decided(fresh_state):
    model = nn.Sequential(nn.Linear(1024, 4096, device="cuda", dtype=torch.bfloat16), nn.GELU())
    x = randn(4096, 1024, dtype=torch.bfloat16)
    from inductor_mm_plugin.inductor.records import record_sites

    with fresh_inductor_cache(), record_sites() as records, torch.no_grad():
        torch._dynamo.reset()
        out, codes = run_and_get_code(torch.compile(model, backend="inductor_mm_plugin"), x)
    (record,) = records
    text = "\n".join(codes)
    assert text.count(FUSED_CALL) == (record.fused == "gelu")
    assert record.fused is None or (record.routed and record.measured.faster)  # fused only where it won
    lin = model[0]
    assert_mm_activation_close(out, x, lin.weight.t(), lin.bias, "gelu")
