"""The ``compete`` option: which routed sites Inductor's autotuner may time against aten
(routing.competition, selection.slower_path_reason), read off the typed RouteDecision the pass
leaves on each plugin node (inductor/decision.py), and what the generated code then runs."""

import logging
from unittest.mock import patch

import pytest
import torch
from conftest import DEVICE
from integration_utils import MLP, TEMPLATE_MARKER, count_calls, kernels_of, run_compiled

from inductor_mm_plugin.inductor.decision import META_KEY, Compete, RouteDecision
from inductor_mm_plugin.inductor.options import PluginOptions
from inductor_mm_plugin.inductor.routing import record_sites, route_graph
from inductor_mm_plugin.inductor.selection import RootInfo, slower_path_reason


@pytest.mark.skipif(DEVICE == "cuda", reason="on the CPU the interpreted plugin kernel always loses: a known winner")
def test_compete_lets_aten_win_where_faster():
    """On the CPU the interpreted plugin kernel is far slower than aten: aten must win."""
    with record_sites() as records:
        out, _, codes = run_compiled(MLP(), torch.randn(64, 16, device=DEVICE), backend="inductor_mm_plugin",
                                     options={"select": "all", "compete": True})  # fmt: skip
    assert sum(r.routed for r in records) == 2
    plugin, stock = count_calls(codes)
    assert (plugin, stock) == (0, 2), codes



# --------------------------------------------------- compete="auto": the slower path competes


def _mm_graph(a_val, b_val, op=torch.ops.aten.mm.default):
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    a.meta["val"], b.meta["val"] = a_val, b_val
    mm = graph.call_function(op, (a, b))
    graph.output(mm)
    return graph, mm


def _fake(*shape, transposed=False, dtype=torch.bfloat16, device="cuda"):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        if transposed:
            return torch.empty(*shape[:-2], shape[-1], shape[-2], dtype=dtype, device=device).transpose(-1, -2)
        return torch.empty(*shape, dtype=dtype, device=device)


@pytest.mark.parametrize("a,b,slower", [
    ((4096, 4096), (4096, 4096), None),  # aligned: the TMA kernel
    ((4096, 4096), (4096, 4096, "t"), None),  # a Linear weight
    ((1000, 100), (100, 512), "not TMA-readable"),  # rows of 200 bytes
    ((1000, 64), (64, 500, "t"), None),  # B^T rows of 128 bytes: fine
    ((8, 300, 64), (8, 64, 300), "not TMA-readable"),  # B rows of 600 bytes
    ((8, 256, 1000), (8, 1000, 128), "stacked along K = 1000"),  # p @ v with seq 1000
    ((8, 256, 1024), (8, 1024, 128), None),  # p @ v with seq 1024
    ((8, 256, 1000), (8, 1000, 128, "t"), None),  # both K-major: K may be anything aligned
], ids=str)  # fmt: skip
def test_slower_path_reason_on_cuda_operands(a, b, slower):
    fa = _fake(*[d for d in a if d != "t"], transposed="t" in a)
    fb = _fake(*[d for d in b if d != "t"], transposed="t" in b)
    op = torch.ops.aten.bmm.default if fa.dim() == 3 else torch.ops.aten.mm.default
    _, node = _mm_graph(fa, fb, op)
    reason = slower_path_reason(node)
    assert (reason is None) == (slower is None), reason
    if slower:
        assert slower in reason


def test_slower_path_reason_is_for_cuda_only():
    _, node = _mm_graph(_fake(100, 100, device="cpu"), _fake(100, 100, device="cpu"))
    assert slower_path_reason(node) is None


def _relu_after(graph, mm):
    """Give ``mm`` a pointwise user (an epilogue the template would fuse)."""
    (out,) = [n for n in graph.nodes if n.op == "output"]
    with graph.inserting_before(out):
        relu = graph.call_function(torch.ops.aten.relu.default, (mm,))
    out.args = (relu,)


# Sites: (a, b, device, with a pointwise user). Marks: what each competes with.
COMPETE_SITES = [
    ((1000, 100), (100, 512), "cuda", False),  # rows of 200 bytes: the slower pointer kernel
    ((1024, 128), (128, 512), "cuda", False),  # aligned, nothing to fuse
    ((1024, 128), (128, 512), "cuda", True),  # aligned, an epilogue: the template
    ((1000, 100), (100, 512), "cuda", True),  # the slower kernel even with an epilogue
    ((1024, 128), (128, 512), "cpu", False),  # the CPU (the interpreter): never under "auto"
]


@pytest.mark.parametrize("compete,expect", [
    ("auto", ["all", "kernels", None, "all", None]),
    (True, ["all"] * 5),
    (False, [None] * 5),
], ids=str)  # fmt: skip
def test_compete_marks(compete, expect):
    marks = []
    for a, b, device, epilogue in COMPETE_SITES:
        graph, mm = _mm_graph(_fake(*a, device=device), _fake(*b, device=device))
        if epilogue:
            _relu_after(graph, mm)
        with patch("inductor_mm_plugin.inductor.selection.interpreting", return_value=True):
            records = route_graph(graph, PluginOptions(select="all", compete=compete), RootInfo())
        assert [r.routed for r in records] == [True], records
        (node,) = [n for n in graph.nodes if n.target == torch.ops.inductor_mm_plugin.mm.default]
        decision = node.meta[META_KEY]  # what the lowering reads
        assert isinstance(decision, RouteDecision) and decision.epilogue == epilogue
        assert records[0].compete is decision.compete  # what compare reports
        marks.append(decision.compete)
    assert marks == [None if e is None else Compete(e) for e in expect]


def test_compete_auto_lets_every_cuda_bmm_compete():
    # No bmm template exists, so nothing fuses into a bmm even with a pointwise user (softmax's scale).
    graph, bmm = _mm_graph(_fake(8, 256, 128), _fake(8, 128, 256), torch.ops.aten.bmm.default)
    _relu_after(graph, bmm)
    route_graph(graph, PluginOptions(select="all"), RootInfo())
    (node,) = [n for n in graph.nodes if n.target == torch.ops.inductor_mm_plugin.bmm.default]
    assert node.meta[META_KEY].compete is Compete.KERNELS


def test_compete_auto_logs_why_a_site_competes(caplog):
    with caplog.at_level(logging.INFO, logger="inductor_mm_plugin.routing"):
        for a, b in [((1024, 128), (128, 512)), ((1000, 100), (100, 512))]:
            graph, _ = _mm_graph(_fake(*a), _fake(*b))
            route_graph(graph, PluginOptions(select="all"), RootInfo())
    text = caplog.text
    assert "competes with aten (compete='auto'): nothing fuses into it" in text
    assert "competes with aten (compete='auto'): its operands are not TMA-readable" in text


def test_compete_option_values():
    assert PluginOptions().compete == "auto"  # the default: only slower-path sites compete
    assert PluginOptions(compete="auto").compete == "auto"
    with pytest.raises(TypeError, match="compete must be True, False or 'auto', got 'sometimes'"):
        PluginOptions(compete="sometimes")


def test_compete_auto_through_the_backend():
    # MLP's operands are aligned (fp32 rows of 64/128 bytes). On the CPU nothing competes
    # ("auto" competes on CUDA only). On CUDA, up feeds relu and takes the plugin's template;
    # down has nothing to fuse and runs the plugin's kernel or aten's, as the autotuner timed.
    with record_sites() as records:
        out, _, codes = run_compiled(MLP(), torch.randn(4, 16, device=DEVICE), backend="inductor_mm_plugin",
                                     options={"select": "all", "compete": "auto"})  # fmt: skip
    assert sum(r.routed for r in records) == 2
    plugin, stock = count_calls(codes)
    if DEVICE == "cpu":
        assert (plugin, stock) == (2, 0)
    else:
        assert plugin >= 1 and plugin + stock == 2, (plugin, stock)
        assert any(TEMPLATE_MARKER in src for src in kernels_of(codes).values())
