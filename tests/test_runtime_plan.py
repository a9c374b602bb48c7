"""runtime/plan.py, direct.py and launch.py: a call signature's launch plan (reused, keyed on
alignment, its arguments bound by name against the kernel's signature), the direct launch
that skips Triton's JIT on repeated calls (checked on the CPU with stand-in launchers, on
the GPU for real), and the interface around plans (``clear_plans``, ``chosen_config``,
``warmup``)."""

import dataclasses
import importlib

import pytest
import torch
from cases import bias_of, kernel_args, operand, poisoned, randn

from inductor_mm_plugin import runtime
from inductor_mm_plugin.configs import k_per_split, persistent_programs
from inductor_mm_plugin.configs.hopper import INTERPRETER_PTR, INTERPRETER_TMA
from inductor_mm_plugin.interpreter import interpreting
from inductor_mm_plugin.ops.reference import assert_matmul_close
from inductor_mm_plugin.runtime import direct
from inductor_mm_plugin.runtime.device import num_sms
from inductor_mm_plugin.runtime.layout import load_divisors, pointer_hints
from inductor_mm_plugin.runtime.plan import Plan, _in_signature_order
from triton.tools.tensor_descriptor import TensorDescriptor

# ------------------------------------------------------------------------- plan cache


def test_plan_is_reused_and_keyed_on_alignment():
    dt = torch.float32
    a, b = randn(24, 32, dtype=dt), randn(32, 16, dtype=dt)
    p1 = runtime.launch(a, b, poisoned(24, 16, dtype=dt))
    p2 = runtime.launch(a, b, poisoned(24, 16, dtype=dt))
    assert p1 is p2
    # Same shape and strides, base 4 bytes off 16-byte alignment: another specialization.
    a_off = randn(24 * 32 + 1, dtype=dt)[1:].view(24, 32)
    p3 = runtime.launch(a_off, b, poisoned(24, 16, dtype=dt), copy_unaligned=False)
    assert p3 is not p1 and p3.cfg.kernel == "ptr"
    # Copying A to an aligned buffer lets the TMA kernel take the same call.
    p4 = runtime.launch(a_off, b, poisoned(24, 16, dtype=dt), copy_unaligned=True)
    assert p4 is not p3 and p4.cfg.kernel == "tma" and p4.copies == (True, False)
    assert_matmul_close(runtime.mm_launch(a_off, b, out=poisoned(24, 16, dtype=dt)), a_off, b)
    runtime.clear_plans()
    assert runtime.launch(a, b, poisoned(24, 16, dtype=dt)) is not p1  # planned again


def test_chosen_config_is_the_config_a_call_ran_with():
    dt = torch.float16
    a, b = randn(40, 64, dtype=dt), randn(64, 48, dtype=dt)
    runtime.clear_plans()
    assert runtime.chosen_config(a, b) is None
    runtime.mm_launch(a, b)
    assert runtime.chosen_config(a, b) == runtime.launch(a, b, poisoned(40, 48, dtype=dt)).cfg
    assert runtime.chosen_config(a, b, bias=randn(48, dtype=dt)) is None  # addmm did not run
    runtime.clear_plans()
    assert runtime.chosen_config(a, b) is None


def test_launch_takes_batch_one_as_one_matrix():
    dt = torch.float16
    a, b = randn(1, 32, 48, dtype=dt), randn(1, 48, 16, dtype=dt)
    out = poisoned(1, 32, 16, dtype=dt)
    runtime.launch(a, b, out)
    assert_matmul_close(out, a, b)
    assert runtime.chosen_config(a[0], b[0]).kernel == "tma"


# ------------------------------------------------------- arguments bound by name

# (kernel config, A transposed, output column-major, bias shape): each row is one of the
# argument sets a plan binds.
BIND_CASES = {
    "tma": (INTERPRETER_TMA, False, False, None),
    "tma_bias": (INTERPRETER_TMA, False, False, "N"),
    "tma_split_k": (dataclasses.replace(INTERPRETER_TMA, split_k=2), False, False, "MN"),
    "tma_c_pointers": (INTERPRETER_TMA, True, True, None),
    "ptr": (INTERPRETER_PTR, False, False, None),
    "ptr_bias": (INTERPRETER_PTR, True, True, "M1"),
    "ptr_split_k": (dataclasses.replace(INTERPRETER_PTR, split_k=3), True, False, "N"),
}


@pytest.mark.parametrize("case", list(BIND_CASES))
def test_plan_binds_every_kernel_argument_by_name(case):
    """Each argument the plan passes, looked up by the kernel's own parameter name, is what
    that name means for this call; the launch computes the product."""
    cfg, ta, c_col, bias_shape = BIND_CASES[case]
    dt, (M, N, K) = torch.float16, (40, 48, 256)
    a, b = operand(M, K, dt, transposed=ta), operand(K, N, dt, transposed=True)
    out = poisoned(N, M, dtype=dt).t() if c_col else poisoned(M, N, dtype=dt)
    bias = None if bias_shape is None else bias_of(bias_shape, M, N, dt).expand(M, N)
    plan = runtime.launch(a, b, out, bias, 0.5, 2.0, config=cfg)
    assert_matmul_close(out, a, b, bias, beta=0.5, alpha=2.0)
    args = kernel_args(plan, a, b, out, bias, 2.0, 0.5)
    assert plan.kernel.fn.__name__ == ("_matmul_kernel_tma" if cfg.kernel == "tma" else "_matmul_kernel")
    assert plan.problem.divisor == min(load_divisors(a, b, out)[:2])
    bias_arg = out if bias is None else bias
    bsm, bsn = (0, 0) if bias is None else bias.stride()
    common = dict(M=M, N=N, K=K, alpha=2.0, beta=0.5, HAS_BIAS=bias is not None, SCALE_ACC=True,
                  INPUT_PRECISION="ieee", INTERPRETER_BF16=False, ACTIVATION="", BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                  BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m)  # fmt: skip
    tiles = -(-M // cfg.block_m) * -(-N // cfg.block_n)
    if cfg.kernel == "ptr":
        expected = dict(common, a_ptr=a, b_ptr=b, c_ptr=out, bias_ptr=bias_arg, stride_ab=0, stride_am=a.stride(0),
                        stride_ak=a.stride(1), stride_bb=0, stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cb=0,
                        stride_cm=out.stride(0), stride_cn=out.stride(1), stride_biasb=0, stride_biasm=bsm,
                        stride_biasn=bsn, k_per_split=k_per_split(K, cfg.block_k, cfg.split_k), SPLIT_K=cfg.split_k,
                        **pointer_hints(a, b, out))  # fmt: skip
        if interpreting():
            expected.update(A_DIVISOR=1, B_DIVISOR=1, C_DIVISOR=1)
        assert plan.grid == (tiles * cfg.split_k,)
    else:
        expected = dict(common, c_ptr=out, bias_ptr=bias_arg, k_per_split=k_per_split(K, cfg.block_k, cfg.split_k),
                        BATCH=1, num_programs=persistent_programs(tiles * cfg.split_k, num_sms(a.device)), num_whole=0,
                        stride_cb=0, stride_cm=out.stride(0), stride_cn=out.stride(1), stride_biasm=bsm,
                        stride_biasn=bsn, A_KMAJOR=not ta, B_KMAJOR=True, C_TMA=not c_col,
                        BIAS_MODE={None: "mn", "N": "n", "M1": "m", "MN": "mn"}[bias_shape], SWAP_AB=False,
                        SPLIT_K=cfg.split_k, SPLIT_TAIL=False, EPILOGUE_SUBTILE=cfg.epilogue_subtile,
                        FLATTEN=cfg.flatten, PREFETCH=0 if interpreting() else 2 if c_col else 3)  # fmt: skip
        assert plan.grid == (expected["num_programs"],) and plan.c_tma == (not c_col)
        for name, base in (("a_desc", a), ("b_desc", b), ("c_desc", out)):
            if name == "c_desc" and c_col:
                assert args[name] is out  # no TMA store: C itself, unused
            else:
                assert isinstance(args[name], TensorDescriptor) and args[name].base is base
    if cfg.split_k > 1:  # either kernel: fp32 partials per tile and slice, one counter per tile
        assert args["ws_ptr"].numel() == tiles * cfg.split_k * cfg.block_m * cfg.block_n
        assert args["lock_ptr"].shape == (tiles,) and args["lock_ptr"].dtype == torch.int32
    else:
        assert args["ws_ptr"] is out and args["lock_ptr"] is out
    for name, value in expected.items():
        assert args[name] is value if isinstance(value, torch.Tensor) else args[name] == value, name
    assert set(args) - set(expected) <= {"a_desc", "b_desc", "c_desc", "ws_ptr", "lock_ptr"}


@pytest.mark.parametrize("kernel", ["tma", "ptr"])
def test_arguments_that_do_not_match_the_signature_are_a_clear_error(kernel):
    """_in_signature_order checks the plan's names against the kernel's parameters: a renamed,
    missing or extra argument (a constexpr the kernel lost, say) raises, naming both."""
    dt = torch.float16
    a, b = randn(40, 64, dtype=dt), randn(64, 48, dtype=dt)
    out = poisoned(40, 48, dtype=dt)
    plan = runtime.launch(a, b, out, config=INTERPRETER_TMA if kernel == "tma" else INTERPRETER_PTR)
    args = kernel_args(plan, a, b, out)
    names = list(args)
    head, i = tuple(names[: names.index("M")]), names.index("alpha")  # the tensors first, then M
    mid = {n: args[n] for n in names[len(head) : i]}
    consts = {n: args[n] for n in names[i + 2 :]}
    assert _in_signature_order(plan.kernel, head, mid, consts) == (tuple(mid.values()), tuple(consts.values()))
    # The same names in another order come back in the kernel's order.
    assert _in_signature_order(plan.kernel, head, dict(reversed(mid.items())), consts)[0] == tuple(mid.values())
    renamed = {("M_" if n == "M" else n): v for n, v in mid.items()}
    missing = {n: v for n, v in mid.items() if n != "K"}
    mutants = [(head, renamed, consts), (head, missing, consts), (head, mid, {**consts, "PDL": 0}),
               (head[::-1], mid, consts), (head, {**mid, "alpha": 1.0}, consts)]  # fmt: skip
    for h, m, c in mutants:
        with pytest.raises(TypeError, match=rf"do not match {plan.kernel.fn.__name__}'s signature \["):
            _in_signature_order(plan.kernel, h, m, c)


# ------------------------------------------------------------------ direct launch


@pytest.mark.parametrize("ta,tb,c_tma", [(False, True, True), (True, False, True), (False, False, False)])
def test_plan_keeps_descriptors_without_tensors_and_rebases_them(ta, tb, c_tma):
    # The direct launch reuses the first call's host-side TMA descriptors over the next call's
    # tensors; the plan itself must hold no tensor (CUDA-graph trees reject a live one).
    dt = torch.float16
    M, N, K = 40, 48, 64
    a, b = operand(M, K, dt, transposed=ta), operand(K, N, dt, transposed=tb)
    out = poisoned(M, N, dtype=dt) if c_tma else poisoned(N, M, dtype=dt).t()
    plan = runtime.launch(a, b, out)
    assert plan.cfg.kernel == "tma" and plan.c_tma == c_tma
    assert not any(isinstance(v, torch.Tensor) for d in plan.descs if d is not None for v in vars(d).values())
    a2, b2 = operand(M, K, dt, transposed=ta), operand(K, N, dt, transposed=tb)
    out2 = poisoned(M, N, dtype=dt) if c_tma else poisoned(N, M, dtype=dt).t()
    fresh = [kernel_args(plan, a2, b2, out2)[name] for name in ("a_desc", "b_desc", "c_desc")]
    for kept, new, base in zip(plan.descs, fresh, (a2, b2, out2)):
        if kept is None:  # C without a TMA store: the tensor itself
            assert new is base
            continue
        rebased = direct.rebased(kept, base)
        assert rebased.base is base and kept.base is None
        assert (rebased.shape, rebased.strides, rebased.block_shape) == (new.shape, new.strides, new.block_shape)
    cfg = plan.cfg
    assert fresh[0].block_shape == ([cfg.block_k, cfg.block_m] if ta else [cfg.block_m, cfg.block_k])
    assert fresh[1].block_shape == ([cfg.block_n, cfg.block_k] if tb else [cfg.block_k, cfg.block_n])


class _RecordingLauncher:
    """Stands in for a compiled kernel: records what the direct launch passes its launcher."""

    function, packed_metadata = "function", "metadata"

    def __init__(self, error=None):
        self.calls, self.error = [], error

    def run(self, *args):
        if self.error:
            raise self.error
        self.calls.append(args)


def _on_stream_7(monkeypatch):
    """The direct launch asks for the current CUDA stream: stream 7, also without a GPU."""
    monkeypatch.setattr("inductor_mm_plugin.runtime.plan.raw_stream", lambda device: 7)


@pytest.mark.parametrize("split", [1, 2])
def test_direct_launch_passes_what_the_jit_launch_passes(monkeypatch, split):
    # The GPU's repeated calls skip Triton's JIT: same arguments, descriptors rebased onto the
    # new tensors, data pointers as integers (checked here without a GPU).
    dt = torch.float16
    M, N, K = 40, 48, 256
    cfg = dataclasses.replace(INTERPRETER_TMA, split_k=split)
    a, b = operand(M, K, dt), operand(K, N, dt, transposed=True)
    plan = runtime.launch(a, b, poisoned(M, N, dtype=dt), config=cfg)
    launcher = _RecordingLauncher()
    monkeypatch.setattr(plan, "compiled", launcher)  # the plan stays cached: restore it afterwards
    _on_stream_7(monkeypatch)
    a2, b2, out2 = operand(M, K, dt), operand(K, N, dt, transposed=True), poisoned(M, N, dtype=dt)
    assert plan.launch_direct(a2, b2, out2, None, 2.0, 1.0)
    ((grid, gy, gz, stream, function, metadata, *hooks_and_args),) = launcher.calls
    assert (grid, gy, gz, stream, function, metadata) == (plan.grid[0], 1, 1, 7, "function", "metadata")
    assert hooks_and_args[:3] == [None, None, None]  # launch metadata and hooks
    passed = tuple(hooks_and_args[3:])
    expected = plan.args(a2, b2, out2, None, 2.0, 1.0)
    assert [d.base for d in passed[:3]] == [a2, b2, out2]
    assert [(d.shape, d.strides, d.block_shape) for d in passed[:3]] == [
        (d.shape, d.strides, d.block_shape) for d in expected[:3]
    ]
    assert passed[3:5] == (out2.data_ptr(), out2.data_ptr())  # C's pointer; no bias: C again
    if split == 1:
        assert passed[5:7] == (out2.data_ptr(), out2.data_ptr())  # no workspace or counters
    assert passed[7:] == expected[7:]  # sizes, strides, alpha, beta, constexprs


_BASE_ARGS_FORMAT_LEN = 13  # the fake launcher below reads this global, as triton 3.6's does


def _fake_tensormap(desc, meta):
    return [("tensormap", desc.base.data_ptr(), tuple(desc.block_shape), meta["swizzle"]), *desc.shape, *desc.strides]


class _Triton36Launcher:
    """The shape of triton 3.6's CudaLauncher (backends/nvidia/driver.py): ``__call__`` adds
    the scratch arguments and calls ``launch``, a closure that expands each descriptor and
    calls the C launcher (here: a recorder)."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, False

    def __init__(self, n_descs):
        self.calls = []
        tensordesc_indices, tensordesc_meta = set(range(n_descs)), [{"swizzle": 3}] * n_descs

        def launcher(*args):
            self.calls.append(args)

        def launch(*args):
            final_args = list(args[:_BASE_ARGS_FORMAT_LEN])
            tensordesc_idx = 0
            for i, arg in enumerate(args[_BASE_ARGS_FORMAT_LEN:]):
                if i in tensordesc_indices:
                    final_args.extend(_fake_tensormap(arg, tensordesc_meta[tensordesc_idx]))
                    tensordesc_idx += 1
                else:
                    final_args.append(arg)
            return launcher(*final_args)

        self.launch = launch

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.launch(gx, gy, gz, stream, function, False, False, None, None, *args)


def _with_triton36_launcher(monkeypatch, plan, n_descs):
    """``plan`` with a stand-in compiled kernel whose launcher has triton 3.6's shape."""
    compiled = _RecordingLauncher()
    compiled.run = _Triton36Launcher(n_descs)
    for name, value in (("compiled", compiled), ("raw", None), ("encoded", {})):
        monkeypatch.setattr(plan, name, value)  # the plan stays cached: restore it afterwards
    return compiled


@pytest.mark.parametrize("c_tma", [True, False])
def test_raw_launch_passes_what_triton36s_launcher_passes(monkeypatch, c_tma):
    # Triton 3.6's launcher is bypassed down to its C launcher, with each operand's tensormap
    # encoding cached by data pointer: the C launcher must see exactly the arguments the
    # whole launcher would have given it for the JIT path's arguments.
    dt = torch.float16
    M, N, K = 40, 48, 256
    a, b = operand(M, K, dt), operand(K, N, dt, transposed=True)
    out = poisoned(M, N, dtype=dt) if c_tma else poisoned(N, M, dtype=dt).t()
    plan = runtime.launch(a, b, out, config=INTERPRETER_TMA)
    assert plan.cfg.split_k == 1 and plan.c_tma == c_tma
    compiled = _with_triton36_launcher(monkeypatch, plan, 3 if c_tma else 2)
    encodes = []
    monkeypatch.setattr(direct, "tensormap_args", lambda d, m: encodes.append(d) or _fake_tensormap(d, m))
    _on_stream_7(monkeypatch)

    def ptrs(args):  # the JIT path passes tensors where the direct launch passes their pointers
        return tuple(x.data_ptr() if isinstance(x, torch.Tensor) else x for x in args)

    a2, b2 = operand(M, K, dt), operand(K, N, dt, transposed=True)
    out2 = poisoned(M, N, dtype=dt) if c_tma else poisoned(N, M, dtype=dt).t()
    jit_args = plan.args(a2, b2, out2, None, 2.0, 1.0)
    compiled.run(plan.grid[0], 1, 1, 7, "function", "metadata", None, None, None, *jit_args)
    assert plan.launch_direct(a2, b2, out2, None, 2.0, 1.0)
    via_launcher, raw = compiled.run.calls
    assert raw == ptrs(via_launcher)
    assert len(encodes) == (3 if c_tma else 2)
    assert plan.launch_direct(a2, b2, out2, None, 2.0, 1.0)  # same pointers: no new encoding
    assert len(encodes) == (3 if c_tma else 2) and compiled.run.calls[-1] == raw
    a3 = operand(M, K, dt)
    assert plan.launch_direct(a3, b2, out2, None, 2.0, 1.0)  # a new A: its tensormap only
    assert len(encodes) == (4 if c_tma else 3) and encodes[-1].base is a3
    assert compiled.run.calls[-1][13][1] == a3.data_ptr()
    assert not any(isinstance(x, torch.Tensor) for v in plan.encoded.values() for x in v)


def test_raw_launch_that_the_c_launcher_rejects_falls_back(monkeypatch):
    dt = torch.float16
    a, b = operand(40, 64, dt), operand(64, 48, dt)
    plan = runtime.launch(a, b, poisoned(40, 48, dtype=dt), config=INTERPRETER_TMA)
    compiled = _with_triton36_launcher(monkeypatch, plan, 3 if plan.c_tma else 2)
    cells = dict(zip(compiled.run.launch.__code__.co_freevars, compiled.run.launch.__closure__))

    def rejecting(*args):
        raise TypeError("function takes exactly 40 arguments (41 given)")

    cells["launcher"].cell_contents = rejecting
    monkeypatch.setattr(direct, "tensormap_args", _fake_tensormap)
    _assert_direct_launch_falls_back(monkeypatch, plan, a, b, "direct kernel launch failed.*40 arguments")


def test_raw_launch_only_for_triton36s_launcher():
    plan = runtime.launch(operand(40, 64, torch.float16), operand(64, 48, torch.float16),
                          poisoned(40, 48, dtype=torch.float16))  # fmt: skip
    compiled = _RecordingLauncher()
    compiled.run = _Triton36Launcher(3)
    assert direct.raw_launcher(compiled, 3) is not None
    assert direct.raw_launcher(compiled, 2) is None  # descriptors elsewhere than expected
    compiled.run.global_scratch_size = 64
    assert direct.raw_launcher(compiled, 3) is None  # it would need scratch memory
    assert direct.raw_launcher(_RecordingLauncher(), 3) is None  # no closure to look into
    assert plan.raw is None


def test_direct_launch_that_the_launcher_rejects_falls_back(monkeypatch):
    dt = torch.float16
    a, b = operand(40, 64, dt), operand(64, 48, dt)
    plan = runtime.launch(a, b, poisoned(40, 48, dtype=dt))
    monkeypatch.setattr(plan, "compiled", _RecordingLauncher(error=TypeError("launcher changed its calling convention")))
    _assert_direct_launch_falls_back(monkeypatch, plan, a, b, "direct kernel launch failed")


def _assert_direct_launch_falls_back(monkeypatch, plan, a, b, match):
    """A direct launch the launcher rejects launches nothing, warns, and turns direct launch
    off (monkeypatch turns it back on after the test)."""
    _on_stream_7(monkeypatch)
    monkeypatch.setattr(direct, "enabled", True)
    with pytest.warns(RuntimeWarning, match=match):
        assert not plan.launch_direct(a, b, poisoned(a.shape[0], b.shape[1], dtype=a.dtype), None, 1.0, 1.0)
    assert not direct.usable()  # Triton's own launch from now on


# -------------------------------------------------------------------------- GPU only


def _count_direct_launches(monkeypatch) -> list:
    """Every Plan.launch_direct call's result."""
    results = []
    real = Plan.launch_direct

    def spy(self, *args):
        results.append(real(self, *args))
        return results[-1]

    monkeypatch.setattr(Plan, "launch_direct", spy)
    return results


@pytest.mark.gpu
@pytest.mark.parametrize("batch,M,N,K,b_t", [(1, 256, 512, 128, False), (6, 256, 128, 1024, False),
                                             (6, 96, 200, 64, True), (4, 77, 50, 33, False)])  # fmt: skip
def test_repeated_bmm_takes_the_direct_launch(monkeypatch, batch, M, N, K, b_t):
    # The first call plans (a batch of one on 2-D views); the next ones launch that plan
    # directly on new data, into poisoned outputs, and must match a fresh reference.
    dt = torch.bfloat16
    runtime.clear_plans()  # the first call below plans and compiles
    direct_launches = _count_direct_launches(monkeypatch)
    a = randn(batch, M, K, dtype=dt)
    b = randn(batch, N, K, dtype=dt).mT if b_t else randn(batch, K, N, dtype=dt)
    for _ in range(3):
        a.normal_()
        b.normal_()
        out = runtime.bmm_launch(a, b, out=poisoned(batch, M, N, dtype=dt))
        assert_matmul_close(out, a, b)
    assert direct_launches == [True, True], direct_launches  # the second and third calls
    fresh = runtime.bmm_launch(a, b)  # no out: a new tensor per call
    assert fresh.shape == (batch, M, N) and fresh.is_contiguous()
    assert_matmul_close(fresh, a, b)


@pytest.mark.gpu
def test_warmup_then_capture_runs_the_warmed_config():
    shapes = [(8, 2048, 4096)]
    chosen = runtime.warmup(shapes, torch.float16, layout="linear", tune=False)
    cfg = chosen[shapes[0]]
    a = randn(8, 4096, dtype=torch.float16)
    b = randn(2048, 4096, dtype=torch.float16).t()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=stream):
        out = torch.ops.inductor_mm_plugin.mm(a, b)
    graph.replay()
    torch.cuda.synchronize()
    assert_matmul_close(out, a, b)
    assert runtime.chosen_config(a, b) == cfg


def _triton_specialization(plan, a, b, out, bias):
    """What Triton's JIT keys this plan's kernel by for sm_90 (triton 3.6-3.7 runtime/jit.py:
    the binder's specialization of each argument, and the options): computed on the CPU, the
    kernel's source compiled by nothing."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    fn = plan.kernel.fn
    jit = JITFunction(fn, do_not_specialize=["num_programs"] if "num_programs" in plan.kernel.arg_names else None)
    binder = create_function_from_signature(jit.signature, jit.params, make_backend(GPUTarget("cuda", 90, 32)))
    args = plan.args(*plan.operands(a, b, copy=False), out, bias, 1.0, 1.0)
    _, specialization, options = binder(*args, num_warps=plan.cfg.num_warps, num_stages=plan.cfg.num_stages)
    return fn.__name__, repr(specialization), repr(sorted(options.items()))


def test_kernel_key_is_tritons_own_key_for_the_plan():
    """Plan.kernel_key (which the compile-ahead paths group calls by) agrees with Triton's
    binder on every pair of these calls: equal keys, one compiled kernel; different keys,
    two. Sizes on and off multiples of 16 and 1, both dtypes, transposed operands, a bias,
    and an A off 16-byte alignment."""
    import itertools

    launch_module = importlib.import_module("inductor_mm_plugin.runtime.launch")
    gen = torch.Generator().manual_seed(0)
    calls = []
    for (M, N, K), dtype, b_t, a_t, bias, offset in itertools.product(
        [(40, 64, 48), (44, 64, 48), (48, 64, 48), (1, 64, 48), (40, 72, 56), (33, 65, 47), (16, 128, 256)],
        [torch.float16, torch.float32], [False, True], [False, True], [False, True], [0, 1],
    ):  # fmt: skip
        if offset and (a_t or bias):
            continue
        storage = torch.randn(M * K + offset, generator=gen).to(dtype)
        a = storage[offset:].view(K, M).t() if a_t else storage[offset:].view(M, K)
        b = torch.randn(N, K, generator=gen).to(dtype).t() if b_t else torch.randn(K, N, generator=gen).to(dtype)
        out = torch.empty(M, N, dtype=dtype)
        bias_t = torch.randn(N, generator=gen).to(dtype).expand(M, N) if bias else None
        plan = launch_module.launch(a, b, out, bias_t, 1, 1, plan_only=True)
        calls.append((plan.kernel_key(a, b, out, bias_t), _triton_specialization(plan, a, b, out, bias_t)))
    assert len({key for key, _ in calls}) > 10  # many kernels among them
    for (key1, triton1), (key2, triton2) in itertools.combinations(calls, 2):
        assert (key1 == key2) == (triton1 == triton2), (triton1, triton2)


@pytest.mark.parametrize("M,N,K,batch", [(64, 48, 1, None), (1, 48, 32, None), (40, 1, 32, None), (1, 1, 16, None),
                                         (64, 16, 1, 4), (1, 24, 32, 3)])  # fmt: skip
def test_size_one_dims_plan_alike_whatever_their_strides(M, N, K, batch):
    """A size-1 dimension's stride addresses nothing, and Dynamo's fake tensors and Inductor's
    buffers disagree on it (decode's rotary product): calls that differ only there plan one
    kernel (its key, Triton's specialization), and give the same bits."""
    dt = torch.float32
    lead = () if batch is None else (batch,)

    def laid_out(t, odd):
        # The same values, each size-1 dimension's stride replaced by an odd number.
        strides = [37 if odd and size == 1 else s for size, s in zip(t.shape, t.stride())]
        return t.clone().as_strided(t.shape, strides) if odd else t

    a, b = randn(*lead, M, K, dtype=dt), randn(*lead, K, N, dtype=dt)
    results, keys = [], []
    for odd in (False, True):
        a_, b_ = laid_out(a, odd), laid_out(b, odd)
        assert torch.equal(a_, a) and torch.equal(b_, b)
        out = poisoned(*lead, M, N, dtype=dt)
        out_ = laid_out(out, odd)
        plan = runtime.launch(a_, b_, out_)
        keys.append(plan.kernel_key(a_, b_, out_, None))
        results.append(out_.clone())
    assert keys[0] == keys[1]
    assert torch.equal(results[0], results[1])
    assert_matmul_close(results[0], a, b)
