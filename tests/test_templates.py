"""inductor/templates/: the plugin's tile algorithms as Inductor templates.

CPU: the Jinja sources (``inductor/templates/*.py.jinja``, shipped as package data) rendered
as Inductor renders them (StrictUndefined, stand-ins for the kernel's
``def_kernel``/``size``/``stride``/``store_output``) for every flag combination are Python; their K loops are the eager kernels' loops statement for statement, the statements
they share with the eager kernels are the kernels' own, their tile order is the eager
``_tile_coords``'s on every tile, their TMA descriptors read the eager plan's tiles, and
SwiGLU's source is the TMA source with a twin for every line that reads B. On the CPU an
epilogue site runs the extern kernel. GPU: epilogues fuse into the templates, and each
template computes what its eager kernel computes, bit for bit.
"""

import ast
import copy
import inspect
import itertools
import logging
import pathlib
import re
import textwrap
import types

import jinja2
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cases import kernel_args, operand, poisoned
from conftest import DEVICE
from integration_utils import SWIGLU_MARKER, SwiGLU, fresh_inductor_cache, kernels_of
from integration_utils import TEMPLATE_MARKER as MARKER
from test_kernel_pointer import TILE_GRIDS, eager_tile_coords
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import MatmulConfig
from inductor_mm_plugin.configs.hopper import INTERPRETER_TMA
from inductor_mm_plugin.configs.templates import pointer_template_configs, tma_template_configs
from inductor_mm_plugin.inductor.records import record_sites
from inductor_mm_plugin.inductor import templates
from inductor_mm_plugin.inductor.templates import config_kwargs, pointer, tma
from inductor_mm_plugin.kernels.matmul import _divmod, _matmul_kernel, _tile_coords
from inductor_mm_plugin.kernels.matmul_tma import _accumulate, _finish_tile, _matmul_kernel_tma, _store_tile

# ------------------------------------------------------------------------- rendering

FLAGS = [dict(HAS_BIAS=h, EPILOGUE_SUBTILE=e, SWIGLU=s) for h, e, s in itertools.product((False, True), repeat=3)]
SOURCES = {"pointer": pointer.SOURCE, "tma": tma.SOURCE}


def flag_id(flags):
    return "-".join(k.lower() for k, v in flags.items() if v) or "plain"


def render(source: str, **flags) -> str:
    """``source`` as Inductor renders it (its Jinja environment is StrictUndefined), with
    stand-ins for what Inductor's template kernel provides: the signature, ``A_size0``-like
    names for sizes and strides, and ``store_output(...)`` as one call."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)

    def store_output(indices, val, mask, indent_width=4, val_shape=None):
        return f"store_output(({', '.join(indices)}), {val}, {mask})"

    return env.from_string(source).render(
        def_kernel=lambda *names: f"def kernel({', '.join(names)}):", size=lambda name, dim: f"{name}_size{dim}",
        stride=lambda name, dim: f"{name}_stride{dim}", store_output=store_output, **flags,
    )  # fmt: skip


def test_jinja_sources_are_the_template_files():
    """Each template's source is its module's ``.py.jinja`` file after the shared tile-order
    macro (tests/test_packaging.py checks that a wheel ships those files)."""
    folder = pathlib.Path(templates.__file__).parent
    for name, source in SOURCES.items():
        assert source.endswith((folder / f"{name}.py.jinja").read_text())
        assert source.startswith((folder / "tile_coords.py.jinja").read_text())


def kernel_def(source: str) -> ast.FunctionDef:
    (fn,) = ast.parse(source).body
    assert isinstance(fn, ast.FunctionDef)
    return fn


def constexprs(template: str) -> set[str]:
    """The constexpr names each template's choices are given (what Inductor's def_kernel defines)."""
    cfg = MatmulConfig("tma", 128, 128, 64)
    if template == "pointer":
        return {*config_kwargs(cfg), "INPUT_PRECISION"}
    return set(tma._kwargs(cfg, True, True, 132, torch.bfloat16))


@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("template", list(SOURCES))
def test_template_sources_render_to_python(template, flags):
    """Every flag combination renders (StrictUndefined: no missing variable) to one kernel
    function that compiles, with the inputs its def_kernel names; where the combination is
    one the lowering uses, every name it reads is a parameter, a constexpr the choice is
    given, or one it assigns."""
    src = render(SOURCES[template], **flags)
    compile(src, f"<{template} template>", "exec")
    fn = kernel_def(src)
    assert "{{" not in src and "{%" not in src and MARKER in src
    args = [a.arg for a in fn.args.args]
    if template == "tma" and flags["SWIGLU"]:
        assert args == ["A", "B", "B2"] and SWIGLU_MARKER in src
    else:
        assert args == (["BIAS", "A", "B"] if template == "tma" and flags["HAS_BIAS"] else ["A", "B"])
        assert SWIGLU_MARKER not in src
    # SwiGLU's choices have no bias and no subtiled store (templates/tma.py); the pointer
    # template has no flags.
    used = not flags["SWIGLU"] or not (flags["HAS_BIAS"] or flags["EPILOGUE_SUBTILE"])
    if used and (template == "tma" or not any(flags.values())):
        names = list(ast.walk(fn))
        read = {n.id for n in names if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        written = {n.id for n in names if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        stand_ins = {n for n in read if re.fullmatch(r"[A-Z0-9]+_(size|stride)\d", n)}
        assert read - written - set(args) - constexprs(template) - stand_ins == {"tl", "min", "range", "store_output"}


class _AsTheTemplate(ast.NodeTransformer):
    """An eager kernel's code as the templates write it: no interpreter workaround, no SWAP_AB
    (TF32 only: the TMA template is for fp16/bf16), no batch offset (no template is batched),
    no split-K slice offset, beta = 1 (an nn.Linear bias), and the templates' names for the
    kernel arguments they take under another name."""

    def __init__(self, names: dict):
        self.names = names

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_If(self, node):
        self.generic_visit(node)
        flag = node.test.id if isinstance(node.test, ast.Name) else None
        if flag == "INTERPRETER_BF16":
            return None
        return node.orelse if flag == "SWAP_AB" else node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            if _batch_term(node.left) or (isinstance(node.left, ast.Name) and node.left.id == "k_start"):
                return node.right
            if _batch_term(node.right):
                return node.left
        if isinstance(node.op, ast.Mult) and isinstance(node.left, ast.Name) and node.left.id == "beta":
            return node.right
        return node


def _batch_term(node) -> bool:
    """``bid * X`` (the TMA kernel's stacked batch) or ``pid_b.to(tl.int64) * X`` (the pointer kernel's)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return False
    left = node.left
    if isinstance(left, ast.Call):
        left = left.func.value if isinstance(left.func, ast.Attribute) else left
    return isinstance(left, ast.Name) and left.id in ("bid", "pid_b")


def eager_tree(template: str) -> ast.Module:
    """The eager kernel the template mirrors (with the TMA kernel's store helper), as the
    template would write it."""
    fns = [_matmul_kernel] if template == "pointer" else [_matmul_kernel_tma, _accumulate, _finish_tile, _store_tile]
    names = {"a_ptr": "A", "b_ptr": "B"} if template == "pointer" else {
        "num_programs": "NUM_SMS", "bias_ptr": "BIAS", "stride_biasn": "BIAS_stride1"}  # fmt: skip
    body = [ast.parse(textwrap.dedent(inspect.getsource(getattr(f, "fn", f)))).body[0] for f in fns]
    return ast.fix_missing_locations(_AsTheTemplate(names).visit(ast.Module(body=body, type_ignores=[])))


def loop_over(tree, var: str) -> ast.For:
    (loop,) = [n for n in ast.walk(tree) if isinstance(n, ast.For) and getattr(n.target, "id", None) == var]
    return loop


def assignments(tree) -> dict[str, set[str]]:
    """{target: {value, ...}} of every assignment, targets and values as source text."""
    found = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            found.setdefault(ast.unparse(n.targets[0]), set()).add(ast.unparse(n.value))
    return found


# What only the templates assign: their sizes and strides (Inductor's), the pieces of the
# tile order (checked on every tile below), the indices of Inductor's store_output, and for
# the TMA template its device-side descriptors (checked against the eager plan's below), its
# work count and K steps (the eager kernel's count batches and K slices too).
TEMPLATE_ONLY = {"M", "N", "K", "m_a", "k_a", "k_b", "n_b", "stride_am", "stride_ak", "stride_bk", "stride_bn", "tiles_per_group", "group_id",
                 "first_m", "group_size_m", "pid_m", "pid_n", "idx_m", "idx_n", "mask"}  # fmt: skip
TMA_TEMPLATE_ONLY = TEMPLATE_ONLY | {"a_desc", "b_desc", "num_work", "k_tiles", "offs_n", "sub"}


@pytest.mark.parametrize("flags", [f for f in FLAGS if not f["SWIGLU"]], ids=flag_id)
@pytest.mark.parametrize("template", list(SOURCES))
def test_templates_run_the_eager_kernels_loops(template, flags):
    """The K loop is the eager kernel's, statement for statement (after _AsTheTemplate), and
    every other statement the template shares with its eager kernel is one of the kernel's."""
    src = render(SOURCES[template], **flags)
    eager = eager_tree(template)
    var = "k" if template == "pointer" else "ki"
    assert ast.dump(loop_over(kernel_def(src), var)) == ast.dump(loop_over(eager, var)), ast.unparse(
        loop_over(eager, var))  # fmt: skip
    ours, theirs = assignments(kernel_def(src)), assignments(eager)
    only = TEMPLATE_ONLY if template == "pointer" else TMA_TEMPLATE_ONLY
    for target, values in ours.items():
        if target not in only:
            assert values <= theirs.get(target, set()), (target, values, theirs.get(target))
    if template == "tma":
        assert ("(acc0, acc1)" in ours) == flags["EPILOGUE_SUBTILE"] and ("bias" in ours) == flags["HAS_BIAS"]
        assert "tl.range(start, num_work, NUM_SMS, flatten=FLATTEN)" in src  # the eager persistent loop
        assert ast.unparse(loop_over(eager, "work").iter) == "tl.range(start, num_work, NUM_SMS, flatten=FLATTEN)"


class _SecondWeight(ast.NodeTransformer):
    """A first-weight statement as its second-weight twin: B (and its strides) as B2, b_desc,
    b and acc as b2_desc, b2 and acc2."""

    NAMES = {"b_desc": "b2_desc", "b": "b2", "acc": "acc2"}

    def visit_Name(self, node):
        node.id = "B2" + node.id[1:] if re.fullmatch(r"B(_stride\d)?", node.id) else self.NAMES.get(node.id, node.id)
        return node


def _without_twins(stmts: list, twins: list) -> list:
    """``stmts`` (and every nested block) without the second-weight twins, each of which must
    follow the statement it is the twin of; the twins removed are appended to ``twins``."""
    out = []
    for s in stmts:
        for field in ("body", "orelse"):
            if isinstance(getattr(s, field, None), list):
                setattr(s, field, _without_twins(getattr(s, field), twins))
        if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) in ("B2", "b2_desc", "b2", "acc2"):
            assert out, ast.unparse(s)
            assert ast.unparse(s) == ast.unparse(_SecondWeight().visit(copy.deepcopy(out[-1]))), ast.unparse(out[-1])
            twins.append(ast.unparse(s))
            continue
        out.append(s)
    return out


@pytest.mark.parametrize("flags", [f for f in FLAGS if not f["SWIGLU"]], ids=flag_id)
def test_swiglu_template_is_the_tma_template_with_a_second_weight(flags):
    """SWIGLU=True gives every line that reads B or updates the accumulator a twin for the
    second weight right after it (B2, acc2), and takes silu(acc) * acc2 after the K loop,
    before the store: without the twins and that product, the rest is the TMA template."""
    plain = kernel_def(render(tma.SOURCE, **flags))
    swiglu = kernel_def(render(tma.SOURCE, **{**flags, "SWIGLU": True}))
    product = "acc = acc * tl.sigmoid(acc) * acc2"  # silu(x @ w_gate) * (x @ w_up)
    work = loop_over(swiglu, "work").body
    at = [ast.unparse(s) for s in work].index(product)
    k_loop = next(i for i, s in enumerate(work) if isinstance(s, ast.For))
    assert k_loop < at and ast.unparse(work[at + 1]).startswith("idx_m = ")  # after the K loop, before the store
    del work[at]
    twins = []
    body = _without_twins(swiglu.body, twins)
    # B's descriptor in both storage orders, the accumulator, B's load in both orders, the dot.
    assert [t.split(" = ")[0] for t in twins] == ["b2_desc", "b2_desc", "acc2", "b2", "b2", "acc2"], twins
    assert ast.dump(ast.Module(body=body, type_ignores=[])) == ast.dump(ast.Module(body=plain.body, type_ignores=[]))


# ---------------------------------------------------------------------- tile order


def python_tile_coords():
    """The eager ``_tile_coords`` (and ``_divmod``, which it calls) run as plain Python on int
    arguments: ``_divmod``'s integer branch, which test_kernel_pointer.py checks its fp32
    branch against."""
    namespace = {"triton": types.SimpleNamespace(jit=lambda fn: fn),
                 "tl": types.SimpleNamespace(constexpr=int, tensor=type("NoTensor", (), {}))}  # fmt: skip
    for fn in (_divmod, _tile_coords):
        exec(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))), namespace)
    return namespace["_tile_coords"]


def rendered_tile_orders():
    """[(template, tile variable, code)]: each expansion of the tile_coords macro in the
    rendered templates, with the tiles_per_group line before it."""
    found = []
    for name, source in SOURCES.items():
        lines = [line.strip() for line in render(source, **FLAGS[0]).splitlines()]
        (per_group,) = [line for line in lines if line.startswith("tiles_per_group = ")]
        for i, line in enumerate(lines):
            if line.startswith("group_id = "):
                end = next(j for j in range(i, len(lines)) if lines[j].startswith("pid_n = "))
                var = re.fullmatch(r"group_id = (\w+) // tiles_per_group", line)[1]
                found.append((name, var, compile("\n".join([per_group, *lines[i : end + 1]]), name, "exec")))
    assert [(name, var) for name, var, _ in found] == [("pointer", "pid"), ("tma", "work"), ("tma", "work_c")]
    return found


def template_tile_coords(code, var, tile, num_pid_m, num_pid_n, group_m) -> tuple[int, int]:
    # Plain integer arithmetic: no builtins but min, no Triton.
    scope = {"__builtins__": {"min": min}, var: tile, "num_pid_m": num_pid_m, "num_pid_n": num_pid_n, "GROUP_M": group_m}
    exec(code, scope)
    return scope["pid_m"], scope["pid_n"]


def test_tile_order_matches_the_eager_kernels_everywhere():
    """The rendered tile_coords (integer divisions) against the eager _tile_coords run as
    Python, on every tile of every grid up to 12 x 12 tiles, GROUP_M from 1 to 16."""
    eager = python_tile_coords()
    for name, var, code in rendered_tile_orders():
        for m, n, g in itertools.product(range(1, 13), range(1, 13), (1, 2, 3, 4, 8, 16)):
            got = [template_tile_coords(code, var, t, m, n, g) for t in range(m * n)]
            assert got == [eager(t, m, n, g) for t in range(m * n)], (name, var, m, n, g)


@pytest.mark.parametrize("num_pid_m,num_pid_n,group_m", TILE_GRIDS)
def test_tile_order_matches_the_eager_kernels_on_the_device(num_pid_m, num_pid_n, group_m):
    """The same against _tile_coords as the kernels run it (the fp32 _divmod), on the GPU or
    through Triton's interpreter."""
    eager = eager_tile_coords(num_pid_m, num_pid_n, group_m)
    for name, var, code in rendered_tile_orders():
        got = tuple(template_tile_coords(code, var, t, num_pid_m, num_pid_n, group_m) for t in range(len(eager)))
        assert got == eager, name


@pytest.mark.parametrize("ta,tb", list(itertools.product((False, True), repeat=2)))
def test_tma_template_descriptors_read_the_eager_tiles(ta, tb):
    """The template's device-side descriptors, evaluated for a call's sizes and strides, are
    the eager plan's host-side ones: same shape, strides and block for each storage order."""
    dt, (M, N, K) = torch.float16, (40, 48, 64)
    a, b, out = operand(M, K, dt, transposed=ta), operand(K, N, dt, transposed=tb), poisoned(M, N, dtype=dt)
    cfg = INTERPRETER_TMA
    eager = kernel_args(runtime.launch(a, b, out, config=cfg), a, b, out)
    scope = dict(M=M, N=N, K=K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                 A_stride0=a.stride(0), A_stride1=a.stride(1), B_stride0=b.stride(0), B_stride1=b.stride(1))  # fmt: skip
    fn = kernel_def(render(tma.SOURCE, **FLAGS[0]))
    for flag, kmajor, desc in (("A_KMAJOR", not ta, "a_desc"), ("B_KMAJOR", tb, "b_desc")):
        (branch,) = [s for s in fn.body if isinstance(s, ast.If) and getattr(s.test, "id", None) == flag]
        (assign,) = branch.body if kmajor else branch.orelse
        call = assign.value
        assert ast.unparse(assign.targets[0]) == desc and ast.unparse(call.func) == "tl.make_tensor_descriptor"
        got = {kw.arg: eval(compile(ast.Expression(kw.value), desc, "eval"), {}, scope) for kw in call.keywords}
        host = eager[desc]
        assert [got["shape"], got["strides"], got["block_shape"]] == [list(host.shape), list(host.strides),
                                                                     list(host.block_shape)], desc  # fmt: skip


# --------------------------------------------------------------------------- CPU path


def compile_code(fn, *args, **compile_kwargs):
    torch._dynamo.reset()
    with fresh_inductor_cache(), record_sites() as records:
        out, codes = run_and_get_code(torch.compile(fn, backend="inductor_mm_plugin", **compile_kwargs), *args)
    return out, codes, records


@pytest.mark.skipif(DEVICE == "cuda", reason="the CPU fallback path")
def test_cpu_epilogue_site_uses_the_extern_kernel():
    lin = nn.Linear(16, 32, device=DEVICE)
    x = torch.randn(8, 16, device=DEVICE)
    with torch.no_grad():
        out, codes, records = compile_code(lambda x: F.gelu(lin(x)), x)
        torch.testing.assert_close(out, F.gelu(lin(x)), rtol=1e-5, atol=1e-5)
    text = "\n".join(codes)
    assert "extern_kernels.inductor_mm_plugin_addmm(" in text
    assert MARKER not in text


# -------------------------------------------------------------------------------- GPU

D, F_ = 512, 1024


def _linear(bias=True):
    return nn.Linear(D, F_, bias=bias, device=DEVICE, dtype=torch.bfloat16)


EPILOGUES = {
    # name: (module factory, forward, text the epilogue leaves inside the template kernel)
    "gelu": (_linear, lambda m, x: F.gelu(m(x)), "erf"),
    "silu": (_linear, lambda m, x: F.silu(m(x)), "libdevice.exp"),  # x / (1 + exp(-x))
    "residual": (lambda: nn.Linear(D, D, device=DEVICE, dtype=torch.bfloat16), lambda m, x: m(x) + x, "tmp"),
    "cast": (_linear, lambda m, x: m(x).float(), "tl.float32"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(EPILOGUES))
def test_gpu_epilogue_fuses_into_the_template(name):
    make, forward, marker = EPILOGUES[name]
    module = make()
    x = torch.randn(2048, D, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        # compete=False: the template whatever the site's measurement says (compete="auto"
        # routes a site only where the extern kernel wins, and never fuses).
        out, codes, records = compile_code(lambda x: forward(module, x), x, options={"compete": False})
        ref = forward(module, x)
    assert records and all(r.routed for r in records)
    fused = [src for src in kernels_of(codes).values() if MARKER in src]
    assert fused, "no plugin template kernel in the generated code"
    # The epilogue sits in a template kernel, after the K loop, before its store.
    with_epilogue = [src for src in fused if re.search(re.escape(marker), src.split("tl.dot", 1)[-1])]
    assert with_epilogue, fused
    FileCheck().check(MARKER).check("tl.dot").check(marker).check("tl.store").run(with_epilogue[0])
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_swiglu_product_stays_out_of_the_template():
    """Unless fused into one mm_swiglu (off here), silu(gate(x)) * up(x) joins two matmuls:
    both run the extern plugin kernel and the product runs in Inductor's own pointwise
    kernel (fused into one of the two templates, it lost on the H200; see
    graph.feeds_pointwise)."""
    module = SwiGLU(D, F_, torch.bfloat16)
    x = torch.randn(2048, D, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        # compete=False: the plugin's kernels whatever the autotuner would time (see below);
        # fuse_swiglu=False: the two matmuls as two sites (test_swiglu.py tests the fusion).
        out, codes, records = compile_code(module, x, options={"compete": False, "fuse_swiglu": False})
        ref = module(x)
    assert len(records) == 3 and all(r.routed for r in records)
    text = "\n".join(codes)
    assert MARKER not in text
    assert text.count("extern_kernels.inductor_mm_plugin_mm(") == 3, text
    pointwise = [name for name in kernels_of(codes) if name.startswith("triton_poi") and "silu" in name]
    assert pointwise, kernels_of(codes).keys()  # e.g. triton_poi_fused_mul_silu_0
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_sites_are_measured_by_default(caplog):
    """Under the default compete="auto" each of SwiGLU's three matmuls is measured in GPU time,
    plugin kernel against aten's, or answered untimed by the shipped shape table where its
    class is a sure loser, and runs the plugin's extern kernel (never a template) only where
    that measured faster; the log says which and why. The gate may instead run fused with its
    SiLU (``mm_activation``), where that timed faster than cuBLAS plus Inductor's pass."""
    module = SwiGLU(D, F_, torch.bfloat16)
    x = torch.randn(2048, D, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="inductor_mm_plugin.inductor.routing"):
        # fuse_swiglu=False: three sites (a SwiGLU pair timed as one: test_swiglu_measured.py).
        out, codes, records = compile_code(module, x, options={"fuse_swiglu": False})
        ref = module(x)
    kinds = [r.fused for r in records]
    assert len(records) == 3 and set(kinds) <= {None, "silu"} and kinds.count("silu") <= 1, records
    assert all(r.routed and r.measured.faster for r in records if r.fused), records
    untimed = [r for r in records if r.measured is None]
    assert all("(shape table): a sure loser" in r.reason and not r.routed for r in untimed), untimed
    assert caplog.text.count("GPU time ") + caplog.text.count("(shape table)") >= 3, caplog.text
    text = "\n".join(codes)
    assert MARKER not in text  # the measured form: the extern kernel
    plugin = text.count("extern_kernels.inductor_mm_plugin_mm(") + text.count("extern_kernels.inductor_mm_plugin_mm_activation(")
    assert plugin == sum(r.routed for r in records) and plugin + text.count("extern_kernels.mm(") == 3, text
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "m,n,k,a_t,with_bias", [(512, 384, 256, False, False), (512, 384, 256, True, False), (1000, 520, 333, False, False),
                            (4096, 4096, 4096, False, False), (64, 4096, 4096, False, False),
                            (300, 4096, 1024, False, False), (512, 384, 256, False, True),
                            (1000, 520, 336, True, True), (8192, 4096, 1024, False, True),
                            (1000, 520, 333, False, True)])  # fmt: skip
def test_gpu_template_and_eager_kernel_agree_bitwise(m, n, k, a_t, with_bias):
    """Each template computes what its eager kernel computes on the same config, bit for bit:
    the TMA template where the operands are 16-byte aligned and the problem takes more than
    one wave of tiles (an nn.Linear bias added in the kernel), the pointer template otherwise
    (the bias through Inductor's epilogue)."""
    a = operand(m, k, torch.bfloat16, transposed=a_t)
    b = operand(k, n, torch.bfloat16, transposed=True)
    bias = torch.randn(n, device=DEVICE, dtype=torch.bfloat16) if with_bias else None
    # compete=False: the template whatever autotuning would say (with the default
    # compete="auto" an unaligned site may time the pointer template against aten and keep aten).
    opts = {"options": {"compete": False}}
    # Inductor's pad_mm pass (shape_padding) pads some mms' M by a timing of its own: on the H100
    # 300 rows became 304, so the site's user was a slice, not the relu, and the site ran the
    # extern kernel. This test is about the template, so that pass stays off here.
    with torch._inductor.config.patch(shape_padding=False):
        if with_bias:
            out, codes, _ = compile_code(lambda a, b, bias: torch.relu(torch.addmm(bias, a, b)), a, b, bias, **opts)
        else:
            out, codes, _ = compile_code(lambda a, b: torch.relu(a @ b), a, b, **opts)
    kernels = [src for src in kernels_of(codes).values() if MARKER in src]
    calls = [line.strip() for code in codes for line in code.splitlines() if ".run(" in line or "extern_kernels." in line]
    assert len(kernels) == 1, calls
    aligned = k * 2 % 16 == 0 and (not a_t or m * 2 % 16 == 0)  # TMA: 16-byte aligned row strides
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    tma_cfgs = aligned and tma_template_configs(m, n, k, 2, "bfloat16", not a_t, True, sms)  # [] for one wave
    assert ("make_tensor_descriptor" in kernels[0]) == bool(tma_cfgs)
    assert ("tl.load(BIAS + offs_n" in kernels[0]) == (with_bias and bool(tma_cfgs))
    (cfg,) = tma_cfgs if tma_cfgs else pointer_template_configs(m, n, 2, sms)
    eager = poisoned(m, n, dtype=torch.bfloat16)
    runtime.launch(a, b, eager, None if bias is None else bias.expand(m, n), config=cfg)
    assert torch.equal(out, torch.relu(eager)), (out - torch.relu(eager)).abs().max()


@pytest.mark.gpu
def test_gpu_training_with_routed_sites():
    module = SwiGLU(D, F_, torch.bfloat16)
    x = torch.randn(1024, D, device=DEVICE, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="inductor_mm_plugin")
    compiled(x).float().square().mean().backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    module(x).float().square().mean().backward()
    for g, p in zip(grads, module.parameters()):
        torch.testing.assert_close(g.float(), p.grad.float(), rtol=5e-2, atol=5e-2 * p.grad.abs().max().item())


@pytest.mark.gpu
def test_gpu_compete_picks_among_template_extern_and_aten():
    module = _linear()
    x = torch.randn(2048, D, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        out, codes, records = compile_code(lambda x: F.gelu(module(x)), x,
                                           options={"compete": True, "max_autotune": True})  # fmt: skip
        ref = F.gelu(module(x))
    assert all(r.routed for r in records)
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
