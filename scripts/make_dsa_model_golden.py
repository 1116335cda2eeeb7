#!/usr/bin/env python3
"""scripts/make_dsa_model_golden.py — whole-model golden data for the sparse-attention (DSA)
model types: DeepSeek-V3.2 (deepseek_v32) and GLM-5 (glm_moe_dsa), docs/sparse_attention.md.

Tiny random models made and run by transformers' own DeepseekV32ForCausalLM and
GlmMoeDsaForCausalLM (eager attention and experts), written in the layout of
tests/golden/README.md so tests/golden/test_model_golden.c reads them like the V2/V3 dirs:

  tests/golden/<name>/model_fp32/   fp32 weights, config.json, expected.{json,safetensors}
  tests/golden/<name>/model_bf16/   the same weights rounded to bf16, reference in fp32 math
  tests/golden/v32/model_fp8/       DeepSeek FP8 (128x128 block scales, like the published
                                    V3.2: the projections and the indexer's wq_b / wk), reference
                                    on the dequantized weights

index_topk is 16, so the prompts of 33 and 60 tokens (and the greedy continuations of the short
ones) really select: every query past position 16 attends to 16 of its keys. Prompts are kept
only when, in every indexer call (prefill and each greedy step, every full layer), the 16th and
17th best causal scores of every query differ by more than INDEX_GAP of the row's largest
|score|: torch's topk leaves the order of exact ties unspecified and any engine sums in its own
order, so a near-tie at the boundary would make the selection a coin toss. The same prompts must
also have decisive expert choices and greedy margins (as make_golden.py asks).

Run: /opt/pyref/bin/python3 scripts/make_dsa_model_golden.py [--out DIR] [--only v32|glm5]
(torch 2.15.0, transformers 5.25.0, safetensors 0.8.0, numpy 2.4.6; checked at run time.)
"""

import argparse
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    GlmMoeDsaConfig,
    GlmMoeDsaForCausalLM,
)
from transformers.cache_utils import DynamicCache  # noqa: E402

import make_golden as mg  # noqa: E402

PINNED = {"torch": "2.15.0", "transformers": "5.25.0", "safetensors": "0.8.0", "numpy": "2.4.6"}
PROMPT_LENS = [7, 1, 33, 60]
N_GREEDY = 16
INDEX_GAP = 1e-5        # relative to the row's max |score|; fp32 sums differ by ~1e-7
ROUTER_GAP = 1e-4       # biased sigmoid scores; fp32 router sums differ by ~1e-7
GREEDY_MARGIN = 1e-2
LM_HEAD_GAIN = 8.0

COMMON = dict(
    hidden_act="silu",
    num_hidden_layers=4,
    hidden_size=96,
    intermediate_size=64,
    moe_intermediate_size=16,
    kv_lora_rank=64,
    qk_rope_head_dim=16,
    rms_norm_eps=1e-6,
    attention_bias=False,
    attention_dropout=0.0,
    tie_word_embeddings=False,
    initializer_range=0.02,
    use_cache=True,
    pad_token_id=None,
    bos_token_id=0,
    eos_token_id=1,
    n_routed_experts=12,
    n_shared_experts=1,
    num_experts_per_tok=3,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    index_topk=16,
    index_n_heads=16,   # a multiple of 16: the AVX-512 indexer variants run
    index_head_dim=32,
)

MODELS = {
    # V3.2: V3's YaRN, grouped routing, half-split indexer RoPE; 5 heads split unevenly
    "v32": dict(
        cls=DeepseekV32ForCausalLM, config_cls=DeepseekV32Config, seed=3203,
        vocab_size=288, num_attention_heads=5, num_key_value_heads=5, q_lora_rank=48,
        qk_nope_head_dim=32, v_head_dim=32, n_group=4, topk_group=2,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        max_position_embeddings=163840,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0,
                             original_max_position_embeddings=4096, beta_fast=32.0,
                             beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
    ),
    # GLM-5: nope 48 < v 64 (192 / 256 in the real model), one expert group, plain RoPE,
    # interleaved indexer RoPE, "shared" indexer layers reusing the last full one's selection
    "glm5": dict(
        cls=GlmMoeDsaForCausalLM, config_cls=GlmMoeDsaConfig, seed=5005,
        vocab_size=320, num_attention_heads=6, num_key_value_heads=6, q_lora_rank=40,
        qk_nope_head_dim=48, v_head_dim=64, n_group=1, topk_group=1,
        mlp_layer_types=["dense", "sparse", "dense", "sparse"],
        indexer_types=["full", "shared", "full", "shared"],
        max_position_embeddings=8192,
        rope_parameters=dict(rope_type="default", rope_theta=100000.0),
    ),
}
SCRIPT_KEYS = ("cls", "config_cls", "seed")


def check_versions():
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
           "safetensors": safetensors.__version__, "numpy": np.__version__}
    bad = {k: (got[k], v) for k, v in PINNED.items() if got[k] != v}
    if bad:
        sys.exit("make_dsa_model_golden.py: version mismatch (installed, pinned): %r" % bad)


def make_config(spec):
    kw = {k: v for k, v in spec.items() if k not in SCRIPT_KEYS}
    kw.update(COMMON)
    cfg = spec["config_cls"](**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def init_weights(model, gen):
    """make_golden.py's unit-gain init, plus the indexer: k_norm weight and bias random (a
    dropped bias must show), weights_proj of gain 4 so the head weights spread the scores."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("k_norm.weight"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name.endswith("k_norm.bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=gen) * (LM_HEAD_GAIN / math.sqrt(p.shape[1])))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))
            elif name.endswith("weights_proj.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (4.0 / math.sqrt(p.shape[1])))
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[2]))
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError("no init rule for %s %s" % (name, tuple(p.shape)))
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)


class IndexTap:
    """Records the score matrix of every indexer call: while an indexer module runs, its one
    Tensor.topk call is the selection over index_scores (causal entries finite, others -inf)."""

    def __init__(self, model):
        self.rows = []
        self.active = False
        self.hooks = []
        for layer in model.model.layers:
            ix = getattr(layer.self_attn, "indexer", None)
            if ix is None:
                continue
            self.hooks.append(ix.register_forward_pre_hook(lambda m, a: setattr(self, "active", True)))
            self.hooks.append(ix.register_forward_hook(lambda m, a, o: setattr(self, "active", False)))
        self.saved = torch.Tensor.topk
        tap = self

        def topk(t, *a, **k):
            if tap.active:
                tap.rows.append(t.detach().float().clone())
            return tap.saved(t, *a, **k)

        torch.Tensor.topk = topk

    def close(self):
        torch.Tensor.topk = self.saved
        for h in self.hooks:
            h.remove()

    def min_gap(self, topk):
        """Smallest (16th - 17th best) / max |score| over every query that selects."""
        worst = float("inf")
        for s in self.rows:
            s = s.reshape(-1, s.shape[-1])
            for row in s:
                v = row[row > -1e30]  # masked: -inf or finfo.min
                if v.numel() <= topk:
                    continue
                srt = v.sort(descending=True).values
                scale = float(v.abs().max())
                worst = min(worst, float(srt[topk - 1] - srt[topk]) / max(scale, 1e-30))
        return worst


def run_reference(model, spec, prompts):
    """Logits at every prompt position, greedy continuations with margins; the smallest router
    and indexer gaps seen (prefill, greedy steps and the full forward over prompt + greedy)."""
    cfg = model.config
    gspec = dict(cls="v3", n_group=spec["n_group"], topk_group=spec["topk_group"],
                 num_experts_per_tok=COMMON["num_experts_per_tok"])
    moe = [j for j, l in enumerate(model.model.layers) if hasattr(l.mlp, "gate")]
    taps = {j: mg.RouterTap(model.model.layers[j].mlp.gate) for j in moe}
    itap = IndexTap(model)
    tensors, meta = {}, []
    rgap = float("inf")
    try:
        with torch.no_grad():
            for i, toks in enumerate(prompts):
                cache = DynamicCache(config=cfg)
                out = model(input_ids=torch.tensor([toks]), past_key_values=cache, use_cache=True)
                logits = out.logits[0].float().contiguous()
                tensors["prompt%d.logits" % i] = logits
                g_toks, g_margins, g_logits = mg.greedy(model, toks, N_GREEDY)
                for t in taps.values():
                    t.calls.clear()
                full = model(input_ids=torch.tensor([toks + g_toks[:-1]]), use_cache=False).logits[0]
                diff = float((full[len(toks) - 1:] - g_logits).abs().max())
                assert diff < 1e-3, ("cache path disagrees with full forward", diff)
                for j in moe:
                    bias = model.model.layers[j].mlp.gate.e_score_correction_bias
                    gaps = mg.selection_gaps(taps[j].calls[0][0], cfg, gspec, bias)
                    rgap = min(rgap, float(gaps.min()))
                top2 = torch.topk(logits, 2, dim=-1).values
                meta.append({"tokens": toks, "greedy": g_toks, "greedy_margins": g_margins,
                             "min_prompt_margin": float((top2[:, 0] - top2[:, 1]).min()),
                             "cache_vs_full_max_abs_diff": diff})
        igap = itap.min_gap(cfg.index_topk)
    finally:
        itap.close()
        for t in taps.values():
            t.close()
    return tensors, meta, rgap, igap


def decisive(meta, rgap, igap):
    return (rgap >= ROUTER_GAP and igap >= INDEX_GAP and
            min(m for p in meta for m in p["greedy_margins"]) >= GREEDY_MARGIN)


def load_fp32(cls, d):
    m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                            experts_implementation="eager")
    m.eval()
    return m


def save_dir(model, d):
    model.save_pretrained(d)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        return {k: f.get_slice(k).get_dtype() for k in f.keys()}


def rope_info(model):
    rot = model.model.rotary_emb
    return rot.inv_freq.float().contiguous(), float(rot.attention_scaling)


def find_prompts(name, spec, models):
    """The first prompt set decisive in every model of `models` (name -> model)."""
    vocab = spec["vocab_size"]
    for attempt in range(400):
        pg = torch.Generator().manual_seed(spec["seed"] * 1000 + attempt)
        prompts = [torch.randint(2, vocab, (n,), generator=pg).tolist() for n in PROMPT_LENS]
        runs = {}
        for k, m in models.items():
            runs[k] = run_reference(m, spec, prompts)
            if not decisive(*runs[k][1:]):
                break
        else:
            return prompts, runs, attempt
    sys.exit("make_dsa_model_golden.py: %s: no decisive prompt set found" % name)


def extra_fields(run, attempt):
    return {"min_router_gap": run[2], "min_index_gap_rel": run[3], "prompt_attempt": attempt,
            "index_topk": COMMON["index_topk"]}


def build(name, spec, out_root, tmp_root):
    cfg = make_config(spec)
    torch.manual_seed(spec["seed"])
    model = spec["cls"](cfg)
    model.eval()
    init_weights(model, torch.Generator().manual_seed(spec["seed"]))
    base = os.path.join(out_root, name)
    if os.path.exists(base):
        shutil.rmtree(base)
    fd, bd = os.path.join(base, "model_fp32"), os.path.join(base, "model_bf16")
    dtypes = save_dir(model, fd)
    assert all(v == "F32" for v in dtypes.values()), dtypes
    ref = load_fp32(spec["cls"], fd)
    for k, v in model.state_dict().items():
        assert torch.equal(v, ref.state_dict()[k]), ("reload changed", k)
    bmodel = load_fp32(spec["cls"], fd).to(torch.bfloat16)
    keep32 = {}
    for n_, b_ in bmodel.named_buffers():
        if n_.endswith("e_score_correction_bias"):
            b_.data = ref.state_dict()[n_].clone()
            keep32[n_] = True
    save_dir(bmodel, bd)
    bref = load_fp32(spec["cls"], bd)
    for k, v in bref.state_dict().items():
        want = ref.state_dict()[k]
        if k not in keep32 and not k.endswith("gate.weight") and "weights_proj" not in k:
            want = want.to(torch.bfloat16).float()
        assert torch.equal(v, want) or torch.equal(v, want.to(torch.bfloat16).float()), k

    models = {"fp32": ref, "bf16": bref}
    fp8 = name == "v32"
    if fp8:
        qd, deq_dir, deq = write_fp8(bd, base, tmp_root, name)
        models["fp8"] = load_fp32(spec["cls"], deq_dir)
        for mname, mod in models["fp8"].named_modules():
            if isinstance(mod, torch.nn.Linear) and mname + ".weight" in deq:
                assert torch.equal(mod.weight, deq[mname + ".weight"]), mname
    prompts, runs, attempt = find_prompts(name, spec, models)
    inv, att = rope_info(ref)
    scale = float(ref.model.layers[0].self_attn.scaling)
    dirs = {"fp32": fd, "bf16": bd}
    if fp8:
        dirs["fp8"] = qd
    for k, d in dirs.items():
        tensors, meta, rgap, igap = runs[k]
        mg.N_GREEDY = N_GREEDY
        mg.write_expected(d, tensors, meta, scale, (inv, att), extra_fields(runs[k], attempt))
    write_requests(fd)
    print("%s: prompt attempt %d, index gaps %s, router gaps %s" % (
        name, attempt, {k: "%.2e" % r[3] for k, r in runs.items()},
        {k: "%.2e" % r[2] for k, r in runs.items()}))


def write_requests(d):
    """requests.jsonl: each golden prompt as a `numla run` request (greedy, N_GREEDY tokens,
    ignore_eos); greedy.txt: "id tok,tok,..." the reference's greedy
    tokens of the prompts (tests/mpi/dsa_run_test.sh)."""
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    with open(os.path.join(d, "requests.jsonl"), "w") as f, \
            open(os.path.join(d, "greedy.txt"), "w") as g:
        for i, p in enumerate(exp["prompts"]):
            f.write(json.dumps({"id": "p%d" % i, "prompt_tokens": p["tokens"],
                                "max_tokens": N_GREEDY, "temperature": 0,
                                "ignore_eos": True}) + "\n")
            g.write("p%d %s\n" % (i, ",".join(str(t) for t in p["greedy"])))


def write_fp8(bd, base, tmp_root, name):
    """model_fp8/ from model_bf16/: the projections as make_golden.py quantizes them, plus the
    indexer's wq_b and wk (DeepSeek's V3.2 FP8 files hold those in e4m3 too; weights_proj and
    k_norm stay bf16)."""
    with open(os.path.join(bd, "config.json")) as f:
        config = json.load(f)
    src = mg.read_checkpoint(bd)
    saved = mg.QUANT_PROJ
    mg.QUANT_PROJ = saved + ("wq_b", "wk")
    try:
        tensors, deq, _ = mg.quantize_state("fp8", src)
    finally:
        mg.QUANT_PROJ = saved
    assert any(k.endswith("indexer.wq_b.weight_scale_inv") for k in tensors)
    qd = os.path.join(base, "model_fp8")
    qconfig = dict(config)
    qconfig["quantization_config"] = mg.QUANT_CONFIG["fp8"]
    mg.write_quant_checkpoint(qd, tensors, qconfig, 1)
    back = mg.read_checkpoint(qd)
    for k, v in back.items():
        if v.dtype == torch.float8_e4m3fn:
            assert torch.equal(mg.fp8_dequantize(v, back[k + "_scale_inv"]), deq[k]), k
    dd = os.path.join(tmp_root, "%s_fp8_deq" % name)
    if os.path.exists(dd):
        shutil.rmtree(dd)
    os.makedirs(dd)
    with open(os.path.join(dd, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    save_file({k: deq[k].contiguous() for k in sorted(deq)}, os.path.join(dd, "model.safetensors"),
              metadata={"format": "pt"})
    return qd, dd, deq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden"))
    ap.add_argument("--only", choices=sorted(MODELS))
    ap.add_argument("--tmp", default="/tmp/numla_dsa_golden")
    a = ap.parse_args()
    check_versions()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(a.tmp, exist_ok=True)
    for name, spec in MODELS.items():
        if a.only and name != a.only:
            continue
        build(name, spec, os.path.abspath(a.out), a.tmp)


if __name__ == "__main__":
    main()
