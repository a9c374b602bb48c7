"""Real clients (transformers models, random init) compiled by stock Inductor and by the plugin
backend: step time, compile time, numerics and routed sites per model (issue 21).

    python bench/models.py --out DIR                                  # 6 models, stock and plugin (~8 min)
    python bench/models.py --models llama-prefill qwen2-prefill llama-decode --out DIR   # half (~4 min)
    python bench/models.py --models llama-train vit bert-encoder --out DIR              # other half (~4 min)
    python bench/models.py --models llama-prefill --arms all --out DIR  # + both max-autotune arms (~5 min)
    python bench/models.py --quick --out DIR                          # 3 rounds
    python bench/models.py --device cpu --tiny                        # a dry run: tiny configs, Triton's interpreter

Models (``MODELS``; bf16; configs written below, weights random, nothing downloaded): a
Llama-3-8B-wide prefill (2 layers, 2048 tokens), a Qwen2.5-3B-wide prefill, a Llama decode
step (16 sequences, 1 new token, static KV cache of 512 prompt tokens), a small Llama
training step (forward, cross-entropy, backward, AdamW), a ViT-B/16 (64 images) and a BERT-base
encoder (32 x 512); ``gpt2-prefill`` (GPT-2-medium width: Conv1D, a row-major B) on request.
Depth is cut to 2-4 layers: every layer runs the same shapes, and the budget (one device call,
10 minutes) goes to compiling.

Arms, in one process: ``stock`` (``torch.compile`` default), ``plugin`` (backend
``inductor_mm_plugin``, default options) and, with ``--arms all`` or by name,
``stock_max_autotune`` / ``plugin_max_autotune`` (``mode="max-autotune-no-cudagraphs"``; each
compile takes minutes, so ask for them on one or two models).
``plugin_unfused`` (by name) is the plugin with ``fuse_swiglu=False``: the default before it
timed SwiGLU pairs as one site (``--arms stock plugin plugin_unfused``).
``stock_again`` (by name) is a control: stock's code compiled again under a backend of its own
(``compile_fx``), so its speedup over ``stock`` reads the timing's noise alone.

Method. Per model, ``torch._dynamo.reset()``; then each arm compiles the model it is timed
with (the arms' compile order alternates between models, and a throwaway compile of a small
MLP comes first, so neither arm pays the process's first-compile costs; the plugin's routing
decisions and kernels forgotten), all arms in one fresh Inductor and Triton cache dir
(``torch._inductor.utils.fresh_cache()``). Inductor picks its pointwise and reduction kernels'
configs by timing them at their first call and keeps the pick in that dir by kernel source,
so a kernel both arms generate runs with one pick in both, and the step times differ by what
the plugin changed, not by two picks of the same kernel (each pick is timed at a few
microseconds). Compile time is measured apart from that: after the timing, each arm compiles
cold (a fresh Inductor and Triton cache dir per compile; the plugin's decisions and kernels
forgotten) and then warm (fresh dirs, the plugin's decisions cached and its kernels compiled
anew, as stock compiles Inductor's; ``_compiling.forgotten``) in ``--compile-rounds`` rounds
of alternating order each (default 2): ``compile_s``/``warm_compile_s`` are the medians, and
``compile_ratio``/``warm_compile_ratio`` the medians of per-round ratios to the baseline arm
(one compile's time moves 10-20%; each compile starts from a collected, frozen heap,
``_compiling.own_heap``). ``first_compile_s`` is the wall time of the first call, which
compiled (the training step: forward and backward), in the dir the arms share. Dynamo is not reset
between a model's arms: the rounds call every arm again, and Dynamo keeps one cache entry per
backend (a check fails the model if an arm compiled no frame of its own, or if anything
recompiles while timed). Each arm's output of that first call is compared with an fp32 copy
of the model run eagerly: err = max|out - ref| / max|ref|. Then each arm's step is captured
in a CUDA graph after warm-up (``_timing.GraphTimer``; a training step with
``AdamW(capturable=True)``), or, if any arm's capture fails, every arm of that model is timed
with events around plain calls (``cudagraphs: false`` in its rows). After one round that
warms the GPU and is discarded, the arms are timed in ``--rounds`` rounds (default 5), each
mirrored (A B B A: an arm's time is the mean of its two, so a clock drifting within the round
weighs on both arms alike) and the order reversed each round, and ``speedup`` is the
median over rounds of stock ms / plugin ms (stock_max_autotune / plugin_max_autotune), 1.0
for the stock arms. The routing pass's sites are recorded while the plugin arms compile
(``inductor.records.record_sites()``).

Rows append to ``<out>/models.jsonl``, one per (model, arm), with the fields above and:
routed_sites, sites, cudagraphs, shape, ``routing`` (``_compiling.routing_clock``), and
``cold_phases_s``/``warm_phases_s`` (median seconds per Dynamo/Inductor phase). Compiling
takes about 30 s per arm and model (a minute for the training step); ``--budget-s`` (default
420) starts no model after that many seconds, so one device call ends with its rows written.
Prints a table with ``TARGETS`` beside.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import pathlib
import sys
import time

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the package defines its kernels

import torch
import torch.nn.functional as F
from inductor_mm_plugin.comparison.profile import site_key, site_paid
from _compiling import (
    ARMS, BASELINE, BY_NAME_ONLY, compile_fn, compile_ratio, forgotten, fresh_cache, own_heap, routing_clock,
    timed_compiles, warm_up_compilers,
)  # fmt: skip
from _timing import (
    GraphTimer, add_common_args, append_jsonl, benchmarking, frames_compiled, geomean, header, median, ratios,
    require_cuda, rounds, run_meta, spread,
)  # fmt: skip

# Issue 30's targets (plugin >= 0.995x stock on every model, routing right on >= 95% of routed
# sites, cold compile <= 1.3x and warm <= 1.1x stock's) and issue 32's geomean.
TARGETS = {"speedup_min": 0.995, "speedup_geomean": 1.05, "max_autotune_min": 0.99, "compile_ratio": 1.3,
           "warm_compile_ratio": 1.1, "sites_right": 0.95, "err_ratio": 1.1}  # fmt: skip

# Each model: its workload, the transformers class and config, the batch, and a tiny version
# for --tiny (the CPU dry run). Widths are the named models' (config.json on their cards).
_LLAMA_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8)
_TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=1)
MODELS = {
    "llama-prefill": dict(workload="prefill", cls="LlamaForCausalLM", config="LlamaConfig",
                          cfg=dict(_LLAMA_8B, num_hidden_layers=2, vocab_size=32000), batch=1, seq=2048,
                          tiny=dict(_TINY, num_key_value_heads=2, vocab_size=256), tiny_batch=(2, 16)),
    "qwen2-prefill": dict(workload="prefill", cls="Qwen2ForCausalLM", config="Qwen2Config",
                          cfg=dict(hidden_size=2048, intermediate_size=11008, num_attention_heads=16,
                                   num_key_value_heads=2, num_hidden_layers=4, vocab_size=151936), batch=2, seq=1024,
                          tiny=dict(_TINY, num_key_value_heads=2, vocab_size=256), tiny_batch=(2, 16)),
    "llama-decode": dict(workload="decode", cls="LlamaForCausalLM", config="LlamaConfig",
                         cfg=dict(_LLAMA_8B, num_hidden_layers=2, vocab_size=32000), batch=16, seq=1, prompt=512,
                         tiny=dict(_TINY, num_key_value_heads=2, vocab_size=256), tiny_batch=(2, 1), tiny_prompt=8),
    "llama-train": dict(workload="train", cls="LlamaForCausalLM", config="LlamaConfig",
                        cfg=dict(hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                                 num_key_value_heads=4, num_hidden_layers=4, vocab_size=32000), batch=8, seq=512,
                        tiny=dict(_TINY, num_key_value_heads=2, vocab_size=256), tiny_batch=(2, 16)),
    "vit": dict(workload="vision", cls="ViTModel", config="ViTConfig",
                cfg=dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=4,
                         image_size=224, patch_size=16), batch=64,
                tiny=dict(_TINY, image_size=32, patch_size=16), tiny_batch=(2,)),
    "bert-encoder": dict(workload="encoder", cls="BertModel", config="BertConfig",
                         cfg=dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=4,
                                  vocab_size=30522), batch=32, seq=512,
                         tiny=dict(_TINY, vocab_size=256), tiny_batch=(2, 16)),
    "gpt2-prefill": dict(workload="prefill", cls="GPT2LMHeadModel", config="GPT2Config",
                         cfg=dict(n_embd=1024, n_layer=4, n_head=16, vocab_size=50257), batch=8, seq=512,
                         tiny=dict(n_embd=64, n_layer=1, n_head=4, vocab_size=256), tiny_batch=(2, 16)),
}  # fmt: skip
DEFAULT_MODELS = ("llama-prefill", "qwen2-prefill", "llama-decode", "llama-train", "vit", "bert-encoder")


# ------------------------------------------------------------------------- the clients


class Client:
    """One model and its inputs; ``arm(compile_fn)`` gives the zero-argument step of one arm."""

    def __init__(self, name: str, device: str, tiny: bool):
        import transformers

        spec = MODELS[name]
        self.name, self.workload, self.device = name, spec["workload"], device
        cfg = getattr(transformers, spec["config"])(**(spec["tiny"] if tiny else spec["cfg"]))
        if spec["cls"] == "ViTModel":
            self.model = transformers.ViTModel(cfg, add_pooling_layer=False)
        else:
            self.model = getattr(transformers, spec["cls"])(cfg)
        self.config = cfg
        self.model.to(device=device, dtype=torch.bfloat16)
        self.model.train(self.workload == "train")
        shape = spec["tiny_batch"] if tiny else (spec["batch"],) + ((spec["seq"],) if "seq" in spec else ())
        self.prompt = spec.get("tiny_prompt" if tiny else "prompt", 0)
        gen = torch.Generator(device="cpu").manual_seed(0)
        if self.workload == "vision":
            size = cfg.image_size
            self.inputs = torch.randn(shape[0], 3, size, size, generator=gen).to(device, torch.bfloat16)
            self.shape = dict(batch=shape[0], tokens_per_image=(size // cfg.patch_size) ** 2 + 1)
        else:
            self.inputs = torch.randint(0, cfg.vocab_size, shape, generator=gen).to(device)
            self.labels = torch.randint(0, cfg.vocab_size, shape, generator=gen).to(device)
            self.prompt_ids = torch.randint(0, cfg.vocab_size, (shape[0], self.prompt), generator=gen).to(device)
            self.shape = dict(batch=shape[0], tokens=shape[1])
            if self.prompt:
                self.shape["cached"] = self.prompt
        self.shape["layers"] = getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layer", None))
        self.cache = self._prefilled_cache(self.model) if self.workload == "decode" else None

    def _prefilled_cache(self, model):
        """A static KV cache holding the prompt; each decode step writes the same positions
        after it (``_forward`` rewinds the cache's counter: the same work every call)."""
        from transformers import StaticCache

        cache = StaticCache(config=model.config, max_cache_len=self.prompt + self.inputs.shape[1])
        with torch.no_grad():
            model(input_ids=self.prompt_ids, past_key_values=cache, cache_position=torch.arange(self.prompt,
                  device=self.device), use_cache=True)  # fmt: skip
        return cache

    def _forward(self, fn, cache, dtype=torch.bfloat16):
        if self.workload == "vision":
            return fn(pixel_values=self.inputs.to(dtype)).last_hidden_state
        if self.workload == "decode":
            # transformers' StaticLayer advances a device counter per update: rewind it (one
            # small fill per layer, same in every arm) so that every call decodes the same step.
            for layer in getattr(cache, "layers", ()):
                if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                    layer.cumulative_length.fill_(self.prompt)
            pos = torch.arange(self.prompt, self.prompt + self.inputs.shape[1], device=self.device)
            return fn(input_ids=self.inputs, past_key_values=cache, cache_position=pos, use_cache=True).logits
        out = fn(input_ids=self.inputs)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state

    def arm(self, compile_fn):
        """(step, model): the arm's step, a zero-argument callable returning the output."""
        if self.workload != "train":
            compiled = compile_fn(self.model)

            def infer():
                with torch.no_grad():
                    return self._forward(compiled, self.cache)

            return infer
        model = copy.deepcopy(self.model)  # each arm trains its own copy
        compiled = compile_fn(model)
        cuda = self.device == "cuda"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True, capturable=cuda)

        def train_step():
            opt.zero_grad(set_to_none=True)
            logits = self._forward(compiled, None)
            loss = F.cross_entropy(logits.float().flatten(0, 1), self.labels.flatten())
            loss.backward()
            opt.step()
            return logits.detach()

        return train_step

    def reference(self) -> torch.Tensor:
        """The output of an fp32 copy of the model, eager, full-precision matmuls."""
        # The new API's getter: the legacy one raises once transformers has set the new one.
        old = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        try:
            model = copy.deepcopy(self.model).float()
            cache = self._prefilled_cache(model) if self.workload == "decode" else None
            with torch.no_grad():
                return self._forward(model, cache, torch.float32).float()
        finally:
            torch.backends.cuda.matmul.fp32_precision = old


# ------------------------------------------------------------------------------ arms


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.float()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)) if torch.isfinite(out).all() else math.inf


def site_check(records, plugin_profiles, stock_profiles) -> dict:
    """Was each routed site's decision right in the model? Its kernels' GPU time per call in the
    plugin arm's profiled steps against stock's for the same calls (comparison/profile.py), the
    median over interleaved rounds of the per-round ratio (``profile_rounds``, ``site_paid``).
    ``sites_right``: the fraction right of the routed sites the profiles can see (None: none
    routed or none seen); ``sites_wrong``: the sites whose kernels were slower than stock's;
    ``sites_unseen``: routed sites with no attributable kernel (templates, fused SwiGLU);
    ``site_ratios``: each seen site's compile-time timing (median and rounds, where it was
    timed) beside its ratio in the model, to calibrate the routing rule against."""
    routed = [r for r in records if r.routed]
    if not plugin_profiles or not stock_profiles:
        return dict(sites_right=None, sites_wrong=[], sites_unseen=len(routed), site_ratios=[])
    right, wrong, unseen, ratios = 0, [], 0, []
    for r in routed:
        key = site_key(r.site.op, r.site.shapes)
        paid = site_paid(stock_profiles, plugin_profiles, key) if key else None
        if paid is None:
            unseen += 1
            continue
        name = (f"{r.site.phase} {r.site.module or '<root>'} {r.site.op} "
                f"{'x'.join(map(str, key[1]))}@{'x'.join(map(str, key[2]))}")  # fmt: skip
        timed = r.measured
        ratios.append(dict(site=name, timed=round(timed.ratio, 3) if timed else None,
                           timed_rounds=[round(x, 3) for x in timed.ratios] if timed else None,
                           in_model=round(paid.ratio, 3)))  # fmt: skip
        if paid.ratio >= 1.0:
            right += 1
        else:
            wrong.append(f"{name} ({paid.plugin_median_us:.1f} us against {paid.stock_median_us:.1f}, "
                         f"{paid.ratio:.3f}x over {len(paid.plugin_us)} rounds"
                         + (f"; timed at compile {timed.ratio:.3f}x, {min(timed.ratios):.3f}-{max(timed.ratios):.3f}"
                            if timed else "") + ")")  # fmt: skip
    seen = right + len(wrong)
    return dict(sites_right=right / seen if seen else None, sites_wrong=wrong, sites_unseen=unseen,
                site_ratios=ratios)  # fmt: skip


def bench_model(name: str, arms: list[str], device: str, tiny: bool, n_rounds: int, order_flip: bool,
                warm: bool = True, compile_n: int = 2) -> list[dict]:  # fmt: skip
    """The rows of one model: compile each arm, check it, time all arms in rounds; then the
    compile rounds (``_compiling.timed_compiles``)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    client = Client(name, device, tiny)
    with fresh_cache():  # one dir for the arms' first compiles: one pick per kernel they share
        rows = timed_steps(name, client, arms, device, n_rounds, order_flip)
    timed_compiles(rows, client, arms, device, compile_n, order_flip, warm, name)
    del client
    return rows


def timed_steps(name: str, client, arms: list[str], device: str, n_rounds: int, order_flip: bool) -> list[dict]:
    """Each arm compiled and checked against the model in fp32, then the arms' steps timed in
    rounds: the model's rows."""
    from inductor_mm_plugin.comparison.profile import median_profile, profile_rounds
    from inductor_mm_plugin.inductor.records import record_sites

    ref = client.reference()
    steps, info = {}, {}
    for arm in arms[::-1] if order_flip else arms:
        frames = frames_compiled()
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        with forgotten(arm, cold=True), record_sites() as sites, routing_clock() as spent, own_heap():
            t0 = time.perf_counter()
            step = client.arm(compile_fn(arm))
            out = step()  # compiles
            sync()
            compile_s = time.perf_counter() - t0
        if frames_compiled() == frames:
            raise RuntimeError(f"{name}/{arm}: the first call compiled no frame; it reused another arm's code")
        steps[arm] = step
        info[arm] = dict(first_compile_s=compile_s, err=relative_error(out, ref), sites=len(sites),
                         routed_sites=sum(s.routed for s in sites), records=list(sites))  # fmt: skip
        if arm.startswith("plugin"):
            info[arm]["routing"] = {k: round(v, 2) for k, v in spent.items() if k != "specializations"}
            for where, reprs in spent["specializations"].items() if spent["call_compiles"] else ():
                print(f"  {name}/{arm}: compiled {where}: " + "; ".join(map(str, reprs)), flush=True)
        del out
        print(f"  {name}/{arm}: compiled in {compile_s:.1f}s, err {info[arm]['err']:.2e}, "
              f"{info[arm]['routed_sites']}/{info[arm]['sites']} sites routed"
              + (f"; routing {info[arm]['routing']}" if "routing" in info[arm] else ""), flush=True)  # fmt: skip

    profiles = profile_rounds(steps) if device == "cuda" else {}
    for arm in arms:
        if profiles.get(arm):  # every kernel's GPU time per step, and the matmuls' part
            typical = median_profile(profiles[arm])
            info[arm].update(kernels_us=round(typical.total_us, 1), matmul_us=round(typical.matmul_us(), 1))
        if arm in BASELINE and arm in info:
            info[arm].update(site_check(info[arm].pop("records"), profiles.get(arm), profiles.get(BASELINE[arm])))
            if info[arm]["sites_wrong"]:
                print(f"  {name}/{arm}: routed sites slower in the model than stock's: "
                      f"{', '.join(info[arm]['sites_wrong'])}", flush=True)  # fmt: skip
        info[arm].pop("records", None)
    timers, cudagraphs = steps, False
    if device == "cuda":
        try:
            timers = {arm: GraphTimer(step, target_ms=5.0, most=20) for arm, step in steps.items()}
            cudagraphs = True
        except Exception as e:  # noqa: BLE001 (a capture failure: every arm is timed without graphs)
            print(f"  {name}: CUDA graph capture failed ({type(e).__name__}: {str(e)[:200]}); timing with events",
                  flush=True)  # fmt: skip
            torch.cuda.synchronize()
            timers = steps
    frames = frames_compiled()
    # Mirrored rounds (A B B A), after one discarded: a prefill step's time rose 4-12% from the
    # first round to the second as the GPU warmed, and drifts by percents within a round.
    time_one = (lambda timer: timer(replays=5)) if cudagraphs else (lambda step: _events_ms(step, device))
    rounds(timers, time_one, 1, mirrored=True)
    times = rounds(timers, time_one, n_rounds, mirrored=True)
    if frames_compiled() != frames:
        raise RuntimeError(f"{name}: an arm recompiled while timed; its rounds would time compiles")
    rows = []
    for arm in arms:
        base = BASELINE.get(arm)
        rs = ratios(times, base, arm) if base in times else None
        rows.append(dict(model=name, workload=client.workload, arm=arm, ms=median(times[arm]),
                         ms_rounds=[round(t, 4) for t in times[arm]], rounds=n_rounds,
                         speedup=median(rs) if rs else (1.0 if arm not in BASELINE else None),
                         ratio_spread=spread(rs, ".3f") if rs else "", cudagraphs=cudagraphs, shape=client.shape,
                         **info[arm]))  # fmt: skip
    del timers, steps
    return rows


def _events_ms(step, device: str, reps: int = 3) -> float:
    """ms per step over ``reps`` back-to-back calls (events on CUDA, a host clock elsewhere)."""
    if device != "cuda":
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        return (time.perf_counter() - t0) * 1e3 / reps
    step()
    return benchmarking.elapsed_us(benchmarking.cycle([step], reps)) / 1e3 / reps


# ---------------------------------------------------------------------------- report


def table(rows: list[dict]) -> str:
    by = {(r["model"], r["arm"]): r for r in rows}
    lines = ["| model | workload | arm | ms | speedup | range | compile s | compile / base | warm / base | err | "
             "err / base | routed | sites right | graphs |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        base = by.get((r["model"], BASELINE.get(r["arm"], "")))
        c_ratio = f"{compile_ratio(r, base):.2f}" if base and "compile_s" in r else ""
        w_ratio = f"{compile_ratio(r, base, 'warm_'):.2f}" if base and base.get("warm_compile_s") and r.get("warm_compile_s") else ""
        compile_s = f"{r['compile_s']:.1f}" if "compile_s" in r else "-"
        right = "" if r.get("sites_right") is None else f"{r['sites_right']:.2f}"
        e_ratio = f"{r['err'] / base['err']:.2f}" if base and base["err"] else ""
        speed = f"{r['speedup']:.3f}" if r["speedup"] is not None else "-"
        lines.append(f"| {r['model']} | {r['workload']} | {r['arm']} | {r['ms']:.3f} | {speed} | {r['ratio_spread']} | "
                     f"{compile_s} | {c_ratio} | {w_ratio} | {r['err']:.2e} | {e_ratio} | "
                     f"{r['routed_sites']}/{r['sites']} | {right} | {'yes' if r['cudagraphs'] else 'no'} |")  # fmt: skip
    lines.append("")
    for arm, base in BASELINE.items():
        rs = [r for r in rows if r["arm"] == arm and r["speedup"] is not None]
        if not rs:
            continue
        sp = [r["speedup"] for r in rs]
        if arm == "stock_again":  # a control: what a second compile of the same code reads
            lines.append(f"stock_again vs stock (stock's code again, the timing's noise; no target): {min(sp):.3f} to "
                         f"{max(sp):.3f}, geomean {geomean(sp):.3f}")  # fmt: skip
            continue
        lo = min(rs, key=lambda r: r["speedup"])
        target_min = TARGETS["max_autotune_min"] if arm == "plugin_max_autotune" else TARGETS["speedup_min"]
        line = (f"{arm} vs {base}: lowest {lo['speedup']:.3f} ({lo['model']}; target >= {target_min:g} "
                f"{'ok' if lo['speedup'] >= target_min else 'MISSED'})")
        if arm in ("plugin", "plugin_unfused"):
            g = geomean(sp)
            line += f", geomean {g:.3f} (target >= {TARGETS['speedup_geomean']:.2f} " \
                    f"{'ok' if g >= TARGETS['speedup_geomean'] else 'MISSED'})"
        pairs = [(r, by[(r["model"], base)]) for r in rs if (r["model"], base) in by]
        worst_c = max(pairs, key=lambda p: compile_ratio(*p))
        c = compile_ratio(*worst_c)
        line += (f"; compile time at most {c:.2f}x {base}'s ({worst_c[0]['model']}; target <= "
                 f"{TARGETS['compile_ratio']:.1f} {'ok' if c <= TARGETS['compile_ratio'] else 'MISSED'})")
        warm = [(compile_ratio(*p, "warm_"), p[0]["model"]) for p in pairs
                if p[0].get("warm_compile_s") and p[1].get("warm_compile_s")]  # fmt: skip
        if warm:
            w, w_model = max(warm)
            line += (f"; warm compile at most {w:.2f}x ({w_model}; target <= {TARGETS['warm_compile_ratio']:.1f} "
                     f"{'ok' if w <= TARGETS['warm_compile_ratio'] else 'MISSED'})")
        checked = [r for r in rs if r.get("sites_right") is not None]
        n_wrong = sum(len(r["sites_wrong"]) for r in checked)
        if checked:
            frac = min(r["sites_right"] for r in checked)
            line += (f"; routing right on at least {frac:.0%} of routed sites per model ({n_wrong} wrong; target >= "
                     f"{TARGETS['sites_right']:.0%} {'ok' if frac >= TARGETS['sites_right'] else 'MISSED'})")
        else:
            line += "; no routed site to check in the profiles"
        bad_err = [p[0]["model"] for p in pairs if p[0]["err"] > TARGETS["err_ratio"] * p[1]["err"]]
        line += f"; error within {TARGETS['err_ratio']}x of {base}'s: " + ("all ok" if not bad_err else
                                                                            "MISSED on " + ", ".join(bad_err))
        lines.append(line)
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=list(MODELS) + ["all"])
    p.add_argument("--arms", nargs="+", default=["stock", "plugin"], choices=list(ARMS) + ["all"],
                   help="'all': the four compiled arms; a plugin arm needs its stock baseline arm to get a "
                        "speedup; by name only: stock_again, stock compiled twice (the compile-to-compile control), and "
                        "plugin_unfused, the plugin with fuse_swiglu=False")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="3 rounds (and no max-autotune arms unless named)")
    p.add_argument("--budget-s", type=float, default=420,
                   help="start no new model after this many seconds (the device call's limit is 600)")  # fmt: skip
    p.add_argument("--no-warm", action="store_true", help="skip the warm compiles (decisions cached) after timing")
    p.add_argument("--compile-rounds", type=int, default=2,
                   help="cold and warm compiles per arm, in interleaved rounds, after the timing")  # fmt: skip
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="tiny configs (with --device cpu: the script's logic, in ~2 min)")
    add_common_args(p, "models.jsonl", rounds=5)
    args = p.parse_args(argv)
    models = list(MODELS) if "all" in args.models else args.models
    arms = [a for a in ARMS if a not in BY_NAME_ONLY or a in args.arms] if "all" in args.arms else \
        [a for a in ARMS if a in args.arms]
    n_rounds = 3 if args.quick else args.rounds
    if args.device == "cuda":
        require_cuda("models.py")
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("models.py builds its models with transformers: pip install transformers")

    import inductor_mm_plugin  # noqa: F401

    meta = run_meta(args.commit)
    print(header(meta), f"transformers {transformers.__version__}", flush=True)
    t_start = time.perf_counter()
    warm_up_compilers(args.device)
    print(f"warm-up compiles: {time.perf_counter() - t_start:.0f}s", flush=True)
    rows = []
    for i, name in enumerate(models):
        elapsed = time.perf_counter() - t_start
        if elapsed > args.budget_s:
            print(f"budget: {elapsed:.0f}s > {args.budget_s:.0f}s; not starting {', '.join(models[i:])}", flush=True)
            break
        print(f"{name} ({MODELS[name]['workload']}):", flush=True)
        try:
            model_rows = bench_model(name, arms, args.device, args.tiny, n_rounds, order_flip=i % 2 == 1,
                                     warm=not args.no_warm, compile_n=max(1, args.compile_rounds))
        except Exception as e:  # noqa: BLE001 (one model's failure is reported, the others still run)
            print(f"  {name} FAILED: {type(e).__name__}: {str(e)[:500]}", flush=True)
            model_rows = [dict(model=name, workload=MODELS[name]["workload"], arm=arm, error=f"{type(e).__name__}: "
                               f"{str(e)[:500]}") for arm in arms]  # fmt: skip
        append_jsonl(pathlib.Path(args.out) / "models.jsonl", model_rows, meta)
        rows += [r for r in model_rows if "ms" in r]
        for r in model_rows:
            if "ms" in r:
                print(f"  {r['arm']:20s} {r['ms']:9.3f} ms  speedup {r['speedup'] or 0:.3f} {r['ratio_spread']}",
                      flush=True)  # fmt: skip
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print(f"\n{header(meta)}; {time.perf_counter() - t_start:.0f}s in all; rows appended to "
          f"{pathlib.Path(args.out) / 'models.jsonl'}\n")  # fmt: skip
    if rows:
        print(table(rows))


if __name__ == "__main__":
    main()
