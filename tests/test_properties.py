"""Property-based tests: the ops against the float64 reference on inputs hypothesis draws.

Each example draws shapes (0-48 per dimension, zero-size included), a dtype, a memory
layout per operand (contiguous, transposed, sliced, offset, stride-0 broadcast, overlapping
strides; for batches also broadcast, sliced, permuted and overlapping batches), a bias
shape, beta and alpha (0, 1, negative, non-integer), and NaN/+-inf written into the
operands. Every output element must be NaN exactly where the reference is, +-inf exactly
where the reference rounded to the output dtype is, and otherwise within the dtype's bound
(ops/reference.py). The NaN mask is compared with torch's own op as well, where torch
gets it right (``_torch_op_comparable``). Gradients, and mm_swiglu lightly, on finite
inputs.

Budget: 1730 examples a run (at least 1000 asked), about 45 s of the 120 s this file may
take on CI's 2-core CPU through Triton's interpreter. Each run draws new examples
(derandomize=False); a failure prints the falsifying example and a ``@reproduce_failure``
blob, and ``pytest --hypothesis-seed=N`` replays a whole run. No example database is
written (database=None).
"""

import math

import pytest
import torch
from conftest import DEVICE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inductor_mm_plugin  # noqa: F401  (registers the ops)
from inductor_mm_plugin.ops.reference import (
    UNDERFLOW,
    UNIT_ROUNDOFF,
    assert_matmul_close,
    assert_mm_swiglu_close,
    error_bound,
    matmul_reference,
)
from inductor_mm_plugin.runtime import tf32_enabled

ops = torch.ops.inductor_mm_plugin

pytestmark = [
    # NaN and inf in the operands: numpy, under Triton's interpreter, says so for every kernel.
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    # These are properties of the kernel: an aten fallback (with its own NaN rules, e.g. MKL's
    # alpha == 0) is an error here, not a pass.
    pytest.mark.filterwarnings("error::inductor_mm_plugin.KernelFallbackWarning"),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
MAX_DIM = 48  # the interpreter runs a 48^3 matmul in tens of milliseconds


def _settings(max_examples: int):
    return settings(
        max_examples=max_examples,
        deadline=None,  # the interpreter's first call of a shape plans it; times vary
        derandomize=False,
        print_blob=True,
        database=None,
        # The examples are slow by nature (a kernel run each); conftest's autouse seed
        # fixture is not used by the draws, which seed their own generators.
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def _tf32(dtype) -> bool:
    return DEVICE == "cuda" and dtype == torch.float32 and tf32_enabled()


# ------------------------------------------------------------------------- operands

MATRIX_LAYOUTS = ["contiguous", "transposed", "sliced", "offset", "broadcast_rows", "broadcast_cols", "overlapping"]
BATCH_LAYOUTS = ["contiguous", "transposed", "batch_broadcast", "batch_sliced", "permuted", "overlapping_batches"]


def _matrix_view(layout: str, rows: int, cols: int):
    """(storage shape, view of it that is a (rows, cols) matrix laid out as ``layout``)."""
    return {
        "contiguous": ((rows, cols), lambda t: t),
        "transposed": ((cols, rows), lambda t: t.t()),
        "sliced": ((2 * rows + 1, 3 * cols + 2), lambda t: t[1::2, 2::3]),
        # Storage offset 1: the base is not 16-byte aligned, so TMA cannot read it.
        "offset": ((rows * cols + 1,), lambda t: t[1:].view(rows, cols)),
        "broadcast_rows": ((1, cols), lambda t: t.expand(rows, cols)),  # stride 0 along rows
        "broadcast_cols": ((rows, 1), lambda t: t.expand(rows, cols)),
        # Element (i, j) at i + j: rows overlap, as torch allows for inputs.
        "overlapping": ((rows + cols,), lambda t: t.as_strided((rows, cols), (1, 1))),
    }[layout]


def _batch_view(layout: str, batch: int, rows: int, cols: int):
    """(storage shape, view of it that is a (batch, rows, cols) batch laid out as ``layout``)."""
    return {
        "contiguous": ((batch, rows, cols), lambda t: t),
        "transposed": ((batch, cols, rows), lambda t: t.mT),
        "batch_broadcast": ((1, rows, cols), lambda t: t.expand(batch, rows, cols)),  # stride 0 batch
        "batch_sliced": ((2 * batch, rows, cols), lambda t: t[::2]),
        "permuted": ((rows, batch, cols), lambda t: t.permute(1, 0, 2)),
        # Batch i starts at row i of the storage: consecutive batches share rows.
        "overlapping_batches": (
            (rows + batch, cols),
            lambda t: t.as_strided((batch, rows, cols), (cols, cols, 1)),
        ),
    }[layout]


SPECIAL_VALUES = [math.nan, math.inf, -math.inf]


@st.composite
def specials(draw, allowed: bool):
    """Where (as fractions of the storage) NaN and +-inf go: mostly none."""
    if not allowed or draw(st.integers(0, 3)) != 0:  # one operand in four gets some
        return []
    return draw(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(SPECIAL_VALUES)),
                         min_size=1, max_size=3))  # fmt: skip


def _build(storage_shape, view, dtype, seed: int, special) -> torch.Tensor:
    """Random values from ``seed`` in the storage, ``special`` values written into it, then
    the view (written before: a stride-0 or overlapping view cannot be written through)."""
    gen = torch.Generator().manual_seed(seed)
    storage = torch.randn(storage_shape, generator=gen).to(dtype)
    flat = storage.view(-1)
    for where, value in special:
        if flat.numel():
            flat[int(where * flat.numel())] = value
    return view(storage.to(DEVICE))


@st.composite
def matrix(draw, rows: int, cols: int, dtype, nonfinite: bool = False):
    layout = draw(st.sampled_from(MATRIX_LAYOUTS))
    storage_shape, view = _matrix_view(layout, rows, cols)
    t = _build(storage_shape, view, dtype, draw(st.integers(0, 2**32 - 1)), draw(specials(nonfinite)))
    assert t.shape == (rows, cols)
    return t


@st.composite
def batch_of_matrices(draw, batch: int, rows: int, cols: int, dtype, nonfinite: bool = False):
    layout = draw(st.sampled_from(BATCH_LAYOUTS))
    storage_shape, view = _batch_view(layout, batch, rows, cols)
    t = _build(storage_shape, view, dtype, draw(st.integers(0, 2**32 - 1)), draw(specials(nonfinite)))
    assert t.shape == (batch, rows, cols)
    return t


BIAS_SHAPES = {"N": lambda M, N: (N,), "1N": lambda M, N: (1, N), "M1": lambda M, N: (M, 1),
               "MN": lambda M, N: (M, N), "scalar": lambda M, N: ()}  # fmt: skip


@st.composite
def bias_for(draw, M: int, N: int, dtype, nonfinite: bool = False):
    shape = BIAS_SHAPES[draw(st.sampled_from(sorted(BIAS_SHAPES)))](M, N)
    if len(shape) == 2 and draw(st.booleans()):
        return draw(matrix(*shape, dtype, nonfinite))  # a strided bias: any matrix layout
    return _build(shape, lambda t: t, dtype, draw(st.integers(0, 2**32 - 1)), draw(specials(nonfinite)))


# beta and alpha: the special values, negative and non-integer ones, ints and floats (tiny
# ones too: they round to float32's subnormals or to 0, as torch converts them).
SCALARS = st.one_of(
    st.sampled_from([0, 1, -1, 2, 0.0, 1.0, 0.5, -0.75]),
    st.floats(-3, 3, allow_nan=False, allow_infinity=False),
)


def as_float32(x) -> float:
    """A scalar as the kernel takes it for fp16, bf16 and fp32: rounded to float32, their
    opmath type in torch (so 6e-176 is 0: its product with inf is NaN, and a beta of 1e-50
    ignores the bias; runtime/checks.py, check_scalar)."""
    return torch.tensor(x, dtype=torch.float32).item()
dims = st.integers(0, MAX_DIM)


# ---------------------------------------------------------------------- comparisons


def assert_like_reference(out, a, b, bias=None, *, beta=1, alpha=1, torch_out=None):
    """NaN exactly where the float64 reference is NaN, +-inf exactly where it is after rounding
    to the output dtype, every other element within the dtype's bound; and, given
    ``torch_out`` (torch's own op on the same operands), NaN exactly where torch has NaN."""
    assert out.shape == a.shape[:-1] + b.shape[-1:] and out.dtype == a.dtype and out.is_contiguous()
    ref = matmul_reference(a, b, bias, beta=beta, alpha=alpha)
    rounded = ref.to(out.dtype)
    _assert_same_mask("NaN", out.isnan(), rounded.isnan(), out, rounded)
    if torch_out is not None:
        _assert_same_mask("NaN (against torch)", out.isnan(), torch_out.isnan(), out, torch_out)
    inf = rounded.isinf()
    _assert_same_mask("inf", out.isinf(), inf, out, rounded)
    assert torch.equal(out[inf], rounded[inf]), "an inf of the wrong sign"
    finite = rounded.isfinite()
    if finite.any():
        bound = error_bound(a, b, bias, beta=beta, alpha=alpha, out_dtype=out.dtype, tf32=_tf32(a.dtype),
                            reference=ref)  # fmt: skip
        err = (out.double() - ref).abs()
        bad = finite & ~(err <= bound)
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise AssertionError(f"{int(bad.sum())} elements outside the {out.dtype} bound; first at {idx}: "
                                 f"got {out[idx].item()}, expected {ref[idx].item()}, "
                                 f"bound {bound[idx].item():.3g}")  # fmt: skip


def _assert_same_mask(what, got, want, out, ref):
    if not torch.equal(got, want):
        idx = tuple(int(i) for i in (got ^ want).nonzero()[0])
        raise AssertionError(f"{what} mask differs at {idx} ({int((got ^ want).sum())} elements): got "
                             f"{out[idx].item()}, expected {ref[idx].item()}")  # fmt: skip


def _torch_op_comparable(dtype, alpha=1, beta=1, operands=()) -> bool:
    """Whether torch's own op is a fair second opinion on the NaN mask here."""
    # torch's bf16 matmuls on the CPU (oneDNN's AMX brgemm) leak NaN into rows that have
    # none when K has a tail (measured here with K from 3 to 41; uxlfoundation/oneDNN#5717,
    # fixed upstream by #5723, not yet in torch 2.13's oneDNN 3.12).
    if dtype == torch.bfloat16 and DEVICE == "cpu":
        return False
    # With alpha == 0, BLAS skips the product: torch's fp32 addmm on the CPU (MKL) gives
    # beta * bias even where a @ b holds inf or NaN, while its fp16/bf16 addmm gives NaN, as
    # IEEE arithmetic (and this kernel, and the reference) has 0 * inf.
    if alpha == 0:
        return False
    # BLAS may scale an operand by alpha before the product: where that underflows a nonzero
    # element to 0, torch has 0 * inf = NaN where the exact product, and this kernel, have
    # +-inf (MKL's fp32 addmm here with alpha 1.4e-45; torch's fp16 addmm on the CI machine).
    # A beta the dtype cannot hold may likewise be taken as 0, dropping a NaN bias.
    if _scalar_vanishes(beta, dtype):
        return False
    return not any(((x != 0) & (x * alpha == 0)).any() for x in operands)


def _scalar_vanishes(x, dtype) -> bool:
    return x != 0 and torch.tensor(x, dtype=dtype).item() == 0


# --------------------------------------------------------------------------- forward


@_settings(max_examples=500)
@given(data=st.data(), M=dims, N=dims, K=dims, dtype=st.sampled_from(DTYPES))
def test_mm(data, M, N, K, dtype):
    a = data.draw(matrix(M, K, dtype, nonfinite=True), label="a")
    b = data.draw(matrix(K, N, dtype, nonfinite=True), label="b")
    assert_like_reference(ops.mm(a, b), a, b, torch_out=torch.mm(a, b) if _torch_op_comparable(dtype) else None)


@_settings(max_examples=600)
@given(data=st.data(), M=dims, N=dims, K=dims, dtype=st.sampled_from(DTYPES), beta=SCALARS, alpha=SCALARS)
def test_addmm(data, M, N, K, dtype, beta, alpha):
    a = data.draw(matrix(M, K, dtype, nonfinite=True), label="a")
    b = data.draw(matrix(K, N, dtype, nonfinite=True), label="b")
    bias = data.draw(bias_for(M, N, dtype, nonfinite=True), label="bias")
    out = ops.addmm(bias, a, b, beta=beta, alpha=alpha)
    beta32, alpha32 = as_float32(beta), as_float32(alpha)
    # torch takes a scalar that float32 cannot hold one way for K == 0 (elementwise, in
    # double: beta = 1e-50 times a NaN bias is NaN) and another through BLAS (in float32:
    # beta = 0, the bias ignored); the kernel and the reference take the float32 value.
    exact = (beta32, alpha32) == (beta, alpha)
    comparable = exact and _torch_op_comparable(dtype, alpha, beta, (a, b))
    torch_out = torch.addmm(bias, a, b, beta=beta, alpha=alpha) if comparable else None
    assert_like_reference(out, a, b, bias, beta=beta32, alpha=alpha32, torch_out=torch_out)


@_settings(max_examples=350)
@given(data=st.data(), batch=st.integers(0, 3), M=dims, N=dims, K=dims, dtype=st.sampled_from(DTYPES))
def test_bmm(data, batch, M, N, K, dtype):
    a = data.draw(batch_of_matrices(batch, M, K, dtype, nonfinite=True), label="a")
    b = data.draw(batch_of_matrices(batch, K, N, dtype, nonfinite=True), label="b")
    assert_like_reference(ops.bmm(a, b), a, b, torch_out=torch.bmm(a, b) if _torch_op_comparable(dtype) else None)


@_settings(max_examples=60)
@given(data=st.data(), M=dims, N=dims, K=dims, dtype=st.sampled_from(DTYPES))
def test_mm_swiglu(data, M, N, K, dtype):
    x = data.draw(matrix(M, K, dtype), label="x")
    w_gate = data.draw(matrix(K, N, dtype), label="w_gate")
    w_up = data.draw(matrix(K, N, dtype), label="w_up")
    assert_mm_swiglu_close(ops.mm_swiglu(x, w_gate, w_up), x, w_gate, w_up)


# ------------------------------------------------------------------------- gradients


def _grad_of(t: torch.Tensor) -> torch.Tensor:
    """A leaf with ``t``'s values and strides (the layout is what the backward must read)."""
    return t.detach().requires_grad_()


def _assert_bias_grad_close(got, grad, beta, shape):
    """``beta * grad`` summed to the bias' shape: a sum of up to MAX_DIM products with fp32
    accumulation, then the output rounding (underflow included: a tiny beta), times 2
    (ops/reference.py's bound, for a sum)."""
    want = (grad.double().sum_to_size(shape) * beta).reshape(shape)
    count = max(grad.numel() // max(math.prod(shape), 1), 1)
    magnitude = abs(beta) * grad.double().abs().sum_to_size(shape).reshape(shape)
    underflow = (count + 2) * UNDERFLOW[torch.float32] + UNDERFLOW[got.dtype]
    bound = 2 * ((count + 2) * UNIT_ROUNDOFF[torch.float32] * magnitude + UNIT_ROUNDOFF[got.dtype] * want.abs()
                 + underflow) + 1e-30  # fmt: skip
    err = (got.double() - want).abs()
    assert got.shape == want.shape and bool((err <= bound).all()), f"bias grad: |err| {err.max().item():.3g}"


@_settings(max_examples=100)
@given(data=st.data(), M=dims, N=dims, K=dims, dtype=st.sampled_from(DTYPES), beta=SCALARS, alpha=SCALARS)
def test_addmm_gradients(data, M, N, K, dtype, beta, alpha):
    a = _grad_of(data.draw(matrix(M, K, dtype), label="a"))
    b = _grad_of(data.draw(matrix(K, N, dtype), label="b"))
    bias = _grad_of(data.draw(bias_for(M, N, dtype), label="bias"))
    grad = data.draw(matrix(M, N, dtype), label="grad")  # any layout: pytorch#194719
    ops.addmm(bias, a, b, beta=beta, alpha=alpha).backward(grad)
    # d/da = alpha * grad @ b^T and d/db = alpha * a^T @ grad: each a matmul of its own.
    assert_matmul_close(a.grad, grad, b.detach().mT, alpha=alpha, tf32=_tf32(dtype))
    assert_matmul_close(b.grad, a.detach().mT, grad, alpha=alpha, tf32=_tf32(dtype))
    _assert_bias_grad_close(bias.grad, grad, beta, bias.shape)


@_settings(max_examples=60)
@given(data=st.data(), M=dims, N=dims, K=dims, dtype=st.sampled_from(DTYPES))
def test_mm_gradients(data, M, N, K, dtype):
    a = _grad_of(data.draw(matrix(M, K, dtype), label="a"))
    b = _grad_of(data.draw(matrix(K, N, dtype), label="b"))
    grad = data.draw(matrix(M, N, dtype), label="grad")
    ops.mm(a, b).backward(grad)
    assert_matmul_close(a.grad, grad, b.detach().mT, tf32=_tf32(dtype))
    assert_matmul_close(b.grad, a.detach().mT, grad, tf32=_tf32(dtype))


@_settings(max_examples=60)
@given(data=st.data(), batch=st.integers(0, 3), M=dims, N=dims, K=dims, dtype=st.sampled_from(DTYPES))
def test_bmm_gradients(data, batch, M, N, K, dtype):
    a = _grad_of(data.draw(batch_of_matrices(batch, M, K, dtype), label="a"))
    b = _grad_of(data.draw(batch_of_matrices(batch, K, N, dtype), label="b"))
    grad = data.draw(batch_of_matrices(batch, M, N, dtype), label="grad")
    ops.bmm(a, b).backward(grad)
    # A stride-0 (broadcast) operand's gradient is still per element of the view.
    assert_matmul_close(a.grad, grad, b.detach().mT, tf32=_tf32(dtype))
    assert_matmul_close(b.grad, a.detach().mT, grad, tf32=_tf32(dtype))

