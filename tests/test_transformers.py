"""transformers users: the Trainer with a model compiled by the backend (``TrainingArguments``
cannot name it: accelerate rejects the name) and ``torch.compile`` of a transformers model.
GPU only (transformers is installed on the GPU machine); tiny random-init Llama models,
nothing downloaded.

    python3 -m pytest -q -p no:cacheprovider tests/test_transformers.py -m gpu
"""

import math

import pytest
import torch
from integration_utils import count_calls, run_and_get_code
from torch._inductor.utils import fresh_cache

from inductor_mm_plugin.inductor.records import record_sites

pytestmark = pytest.mark.gpu


def tiny_llama(**overrides):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                                      **overrides)  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def test_gpu_trainer_with_the_plugin_backend(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny_llama().cuda()
    ids = torch.randint(0, 256, (16, 32))
    data = [{"input_ids": row, "labels": row} for row in ids]
    # The Trainer cannot take the backend by name (see the next test): the model is compiled
    # in place instead, and the Trainer trains it as it is.
    model.compile(backend="inductor_mm_plugin", options={"compete": False})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, logging_steps=1, save_strategy="no",
        report_to=[], disable_tqdm=True, bf16=True,
    )  # fmt: skip
    with fresh_cache(), record_sites() as records:  # a fresh cache: the routing pass runs
        result = transformers.Trainer(model=model, args=args, train_dataset=data).train()
    assert result.global_step == 2 and math.isfinite(result.training_loss)
    routed = [r for r in records if r.routed]
    phases = {r.site.phase for r in routed}
    assert len(routed) >= 15 and phases == {"forward", "backward"}, [str(r.site) for r in records]


def test_gpu_trainer_rejects_the_backend_by_name(tmp_path):
    """Why the README's recipe compiles the model itself: the Trainer hands the name to
    accelerate's TorchDynamoPlugin, which accepts only its own DynamoBackend names (accelerate
    >= 1.2, utils/dataclasses.py). Should this start to pass, the recipe can be the argument."""
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), torch_compile_backend="inductor_mm_plugin",
                                          max_steps=1, report_to=[], save_strategy="no")  # fmt: skip
    assert args.torch_compile  # a backend name turns it on
    with pytest.raises(ValueError, match="is not a valid DynamoBackend"):
        transformers.Trainer(model=tiny_llama().cuda(), args=args, train_dataset=[])


def test_gpu_torch_compile_of_a_transformers_model():
    model = tiny_llama().cuda().to(torch.bfloat16).eval()
    ids = torch.randint(0, 256, (2, 64), device="cuda")
    with torch.no_grad():
        want = model(ids).logits
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="inductor_mm_plugin", options={"compete": False})
        with fresh_cache(), record_sites() as records:
            out, codes = run_and_get_code(lambda: compiled(ids).logits)
    # 7 Linear layers a decoder layer (q, k, v, o, gate, up, down) and the LM head (the
    # attention runs in SDPA; the rotary embedding's small fp32 matmul may be a site too).
    # gate and up may run as one mm_swiglu (fuse_swiglu="auto"): one call for two sites.
    routed = [r for r in records if r.routed]
    assert len(routed) >= 2 * 7 + 1, [str(r.site) for r in records]
    plugin, _ = count_calls(codes)
    assert plugin >= 2 * 6 + 1, count_calls(codes)
    torch.testing.assert_close(out.float(), want.float(), rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("train", [False, True], ids=["prefill", "training"])
def test_gpu_predicted_sites_are_a_llamas_routing_pass_sites(monkeypatch, train):
    """The sites predicted from Dynamo's graph of a transformers Llama (bf16, CUDA), forward
    and backward, are the routing pass's sites: each predicted signature is one of them, and
    each of theirs is predicted but products over K = 1 (the rotary frequencies, which torch
    2.13's Inductor makes pointwise and 2.11's leaves to cuBLAS)."""
    from inductor_mm_plugin.inductor import measure

    seen = {"predicted": [], "routing pass": []}
    monkeypatch.setattr(measure, "compile_predicted", lambda sites: seen["predicted"].extend(sites) or 0)
    monkeypatch.setattr(measure, "precompile", lambda sites: seen["routing pass"].extend(sites) or 0)
    monkeypatch.setattr(measure, "decide", lambda *site: (False, "not measured in this test", None))
    monkeypatch.setattr(measure, "decide_activation", lambda *site: (False, "not measured in this test", None))
    monkeypatch.setattr(measure, "_sure", lambda *site: None)
    model = tiny_llama().cuda().to(torch.bfloat16)
    ids = torch.randint(0, 256, (4, 32), device="cuda")
    torch._dynamo.reset()
    with fresh_cache(), torch.set_grad_enabled(train):
        out = torch.compile(model, backend="inductor_mm_plugin")(input_ids=ids, labels=ids if train else None)
        if train:
            out.loss.backward()
    predicted = {measure.signature(*site) for site in seen["predicted"]}
    # (a SwiGLU pair the routing pass would time is compiled with them, as op "swiglu", and a
    # gate's form fused with its SiLU, as "mm_activation:silu": not sites)
    k_of = {measure.signature(*site): site[1][-2].shape[-1] for site in seen["routing pass"]
            if site[0] != "swiglu" and not site[0].startswith(measure.ACTIVATION_OP)}  # fmt: skip
    assert predicted <= k_of.keys() and len(predicted) >= 4, predicted - k_of.keys()
    assert all(k_of[s] == 1 for s in k_of.keys() - predicted), k_of.keys() - predicted
