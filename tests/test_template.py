"""The plugin's Inductor template: epilogues fuse into it (GPU), the extern path elsewhere (CPU)."""

import dataclasses
import inspect
import logging
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import DEVICE
from integration_utils import TEMPLATE_MARKER as MARKER
from integration_utils import SwiGLU, fresh_inductor_cache, kernels_of
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck

from inductor_mm_plugin.inductor import template
from inductor_mm_plugin.inductor.routing import record_sites
from inductor_mm_plugin.kernels import configs
from inductor_mm_plugin.kernels.configs import MatmulConfig, persistent_programs
from inductor_mm_plugin.kernels.matmul import _matmul_kernel, _tile_coords_int
from inductor_mm_plugin.kernels.matmul_tma import _matmul_kernel_tma, _store_tile
from inductor_mm_plugin.ops.matmul import _Plan


def compile_code(fn, *args, **compile_kwargs):
    torch._dynamo.reset()
    with fresh_inductor_cache(), record_sites() as records:
        out, codes = run_and_get_code(torch.compile(fn, backend="inductor_mm_plugin", **compile_kwargs), *args)
    return out, codes, records


# ------------------------------------------------------------------------- CPU


def test_template_mirrors_the_eager_kernel():
    """The template's tile algorithm is the eager kernel's, line for line (drift fails here;
    the GPU test below checks they agree bit for bit)."""
    kernel = _source(_matmul_kernel) + _source(_tile_coords_int)
    lines = [
        "num_pid_m = tl.cdiv(M, BLOCK_M)",
        "group_size_m = min(num_pid_m - first_m, GROUP_M)",
        "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "mask_m = offs_m[:, None] < M",
        "for k in range(0, tl.cdiv(K, BLOCK_K)):",
        "k_left = K - k * BLOCK_K",
        "a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)",
        "b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)",
        "acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)",
        "a_ptrs += BLOCK_K * stride_ak",
    ]
    for line in lines:
        assert line in kernel, f"eager kernel lost: {line}"
        assert line in template.SOURCE, f"template lost: {line}"


def _source(fn):
    return inspect.getsource(getattr(fn, "fn", fn))  # JIT or interpreter wrapper


def test_tma_template_mirrors_the_tma_kernel():
    """The TMA template's loop is the persistent TMA kernel's (split-K and SWAP_AB aside)."""
    kernel = _source(_matmul_kernel_tma) + _source(_tile_coords_int) + _source(_store_tile)
    for batch_offset in ("bid * M + ", "bid * N + ", "bid * K + "):  # the template has no batch
        kernel = kernel.replace(batch_offset, "")
    # The eager kernel's program count is an argument (it varies with the shape); the
    # template's a constant, NUM_SMS, the name Inductor's persistent_mm_grid reads.
    kernel = kernel.replace("num_programs", "NUM_SMS")
    lines = [
        "num_pid_m = tl.cdiv(M, BLOCK_M)",
        "work_c = start - NUM_SMS",
        "tiles_per_group = GROUP_M * num_pid_n",
        "group_size_m = min(num_pid_m - first_m, GROUP_M)",
        "pid_m = first_m + ((tile % tiles_per_group) % group_size_m)",
        "pid_n = (tile % tiles_per_group) // group_size_m",
        "a = a_desc.load([off_m, off_k])",
        "a = a_desc.load([off_k, off_m]).T",
        "b = b_desc.load([off_n, off_k]).T",
        "b = b_desc.load([off_k, off_n])",
        "acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)",
        "work_c += NUM_SMS",
        "acc3 = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))",  # EPILOGUE_SUBTILE
        "acc0, acc1 = tl.split(acc3)",
        "mask=offs_n < N, other=0.0)[None, :]",  # HAS_BIAS: the bias as a vector
        "bias.to(tl.float32)",
    ]
    for line in lines:
        assert line in kernel, f"TMA kernel lost: {line}"
        # The template inlines _tile_coords with the work counter in place of `tile`.
        assert line.replace("tile %", "work %") in template.TMA_SOURCE, f"TMA template lost: {line}"
        if "(tile %" in line:
            assert line.replace("tile %", "work_c %") in template.TMA_SOURCE
    # The same tiles through the descriptors: made on the host by the eager launcher, on the
    # device by the template.
    launcher = inspect.getsource(_Plan._descriptors)
    blocks = [("[bm, bk])", "[BLOCK_M, BLOCK_K])"), ("[bk, bm])", "[BLOCK_K, BLOCK_M])"),
              ("[bn, bk])", "[BLOCK_N, BLOCK_K])"), ("[bk, bn])", "[BLOCK_K, BLOCK_N])")]  # fmt: skip
    for host, device in blocks:
        device = "block_shape=" + device
        assert host in launcher, f"eager launcher lost the descriptor block {host}"
        assert device in template.TMA_SOURCE, f"TMA template lost {device}"


@pytest.mark.parametrize("m,n,k", [(2048, 4096, 4096), (8192, 14336, 4096), (64, 4096, 4096), (1, 4096, 14336),
                                   (2048, 2048, 2048), (2048, 2048, 32768), (32768, 128, 4096)])  # fmt: skip
@pytest.mark.parametrize("a_kmajor,b_kmajor", [(True, True), (True, False), (False, True)])
def test_tma_template_takes_the_eager_heuristic_without_split_k(m, n, k, a_kmajor, b_kmajor):
    cfgs = template.tma_configs(m, n, k, torch.bfloat16, a_kmajor, b_kmajor, 132)
    assert len(cfgs) == 1
    (cfg,) = cfgs
    eager = configs.heuristic_config(configs.Problem(m, n, k, 1, 2, "bfloat16", tma=True, a_kmajor=a_kmajor,
                                                     b_kmajor=b_kmajor, c_tma=False))  # fmt: skip
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps) == (eager.block_m, eager.block_n, eager.block_k,
                                                                      eager.num_warps)  # fmt: skip
    assert cfg.split_k == 1 and configs.fits(cfg, 2)
    assert cfg.epilogue_subtile == (cfg.block_m * cfg.block_n >= 128 * 256)
    assert configs.smem_bytes(cfg, 2) <= template._TEMPLATE_SMEM_BUDGET
    competing = template.tma_configs(m, n, k, torch.bfloat16, a_kmajor, b_kmajor, 132, compete=True)
    assert competing[0] == cfg and len(competing) > 1
    assert all(c.split_k == 1 and configs.fits(c, 2) for c in competing)


@pytest.mark.parametrize("m,n,k", [(2048, 1024, 1024), (2048, 1024, 4096), (768, 768, 768), (1024, 2048, 2048),
                                   (16384, 128, 4096), (129, 64, 8)])  # fmt: skip
def test_one_wave_of_tiles_takes_the_pointer_template_unless_competing(m, n, k):
    """Every 128 x 128 tile in one wave, one per program, K <= 4096: the pointer template (no
    device-side descriptors to build); the TMA template still competes when asked."""
    assert template.tma_configs(m, n, k, torch.bfloat16, True, True, 132) == []
    assert template.tma_configs(m, n, k, torch.bfloat16, True, True, 132, compete=True)


@pytest.mark.parametrize("m,n,k", [(2048, 2048, 2048), (2048, 2048, 1024), (4096, 1024, 1024), (2048, 1024, 8192),
                                   (300, 4096, 1024), (128, 4096, 1024)])  # fmt: skip
def test_wide_tiles_two_waves_long_k_or_decode_sized_m_keep_the_tma_template(m, n, k):
    (cfg,) = template.tma_configs(m, n, k, torch.bfloat16, True, True, 132)
    assert cfg.kernel == "tma"


def test_tma_template_leaves_fp32_to_the_pointer_template():
    assert template.tma_configs(4096, 4096, 4096, torch.float32, True, True, 132) == []


@pytest.mark.parametrize("m,n", [(8192, 8192), (4096, 4096), (4224, 4096), (2048, 14336), (100, 300)])
@pytest.mark.parametrize("per_sm", [1, 2])
def test_tma_template_runs_as_many_programs_as_the_eager_kernel(m, n, per_sm):
    """NUM_SMS of the template is the eager kernel's program count for the same tiles: at
    most SMs x programs_per_sm, fewer where that spreads the tiles more evenly."""
    cfg = MatmulConfig("tma", 64, 64, 64, programs_per_sm=per_sm)
    tiles = -(-m // 64) * -(-n // 64)
    assert template._tma_kwargs(cfg, True, False, 132, m, n)["NUM_SMS"] == persistent_programs(tiles, 132 * per_sm)
    big = MatmulConfig("tma", 128, 256, 64, 8, 8, 3, epilogue_subtile=True, flatten=True)
    kwargs = template._tma_kwargs(big, True, False, 132, 4096, 4096)  # 512 tiles: 128 programs of 4
    assert kwargs["NUM_SMS"] == 128


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 14336, 4096), (128, 4096, 4096), (8192, 14336, 4096), (1000, 1000, 1000)])
@pytest.mark.parametrize("elem", [2, 4])
def test_configs_fit_shared_memory(m, n, k, elem):
    assert template.fits(template.heuristic_config(m, n, k, elem), elem)
    assert all(template.fits(c, 2) for c in template.COMPETE_CONFIGS)


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


# ------------------------------------------------------------------------- GPU

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
        out, codes, records = compile_code(lambda x: forward(module, x), x)
        ref = forward(module, x)
    assert all(r.routed for r in records)
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
    routing._feeds_pointwise)."""
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
def test_gpu_sites_with_nothing_to_fuse_compete_by_default(caplog):
    """Under the default compete="auto" SwiGLU's three matmuls (nothing fuses into them)
    each run the plugin's kernel or aten's, whichever Inductor's autotuner timed faster
    (fuse_swiglu=False: by default gate and up become one fused site, test_swiglu.py)."""
    module = SwiGLU(D, F_, torch.bfloat16)
    x = torch.randn(2048, D, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="inductor_mm_plugin.inductor.routing"):
        out, codes, records = compile_code(module, x, options={"fuse_swiglu": False})
        ref = module(x)
    assert len(records) == 3 and all(r.routed for r in records)
    assert caplog.text.count("competes with aten (compete='auto'): nothing fuses into it") == 3, caplog.text
    text = "\n".join(codes)
    assert MARKER not in text  # no template configs compete where nothing fuses
    plugin = text.count("extern_kernels.inductor_mm_plugin_mm(")
    assert plugin + text.count("extern_kernels.mm(") == 3, text
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
    from inductor_mm_plugin.ops.matmul import _launch

    a = torch.randn(k, m, device=DEVICE, dtype=torch.bfloat16).t() if a_t else torch.randn(m, k, device=DEVICE,
                                                                                             dtype=torch.bfloat16)
    b = torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16).t()
    bias = torch.randn(n, device=DEVICE, dtype=torch.bfloat16) if with_bias else None
    # compete=False: the template whatever autotuning would say (with the default
    # compete="auto" an unaligned site may time the pointer template against aten and keep aten).
    opts = {"options": {"compete": False}}
    if with_bias:
        out, codes, _ = compile_code(lambda a, b, bias: torch.relu(torch.addmm(bias, a, b)), a, b, bias, **opts)
    else:
        out, codes, _ = compile_code(lambda a, b: torch.relu(a @ b), a, b, **opts)
    kernels = [src for src in kernels_of(codes).values() if MARKER in src]
    assert len(kernels) == 1, kernels
    aligned = k * 2 % 16 == 0 and (not a_t or m * 2 % 16 == 0)  # TMA: 16-byte aligned row strides
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    tma = aligned and template.tma_configs(m, n, k, torch.bfloat16, not a_t, True, sms)  # [] for one wave
    assert ("make_tensor_descriptor" in kernels[0]) == bool(tma)
    assert ("tl.load(BIAS + offs_n" in kernels[0]) == (with_bias and bool(tma))
    if tma:
        (cfg,) = tma
    else:
        c = template.heuristic_config(m, n, k, 2)
        cfg = configs.MatmulConfig("ptr", c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages)
    eager = torch.full((m, n), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    _launch(a, b, eager, None if bias is None else bias.expand(m, n), config=cfg)
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
