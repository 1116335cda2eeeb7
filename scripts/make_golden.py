#!/usr/bin/env python3
"""scripts/make_golden.py — builds numla's golden reference data (docs/design.md §5, §8).

Makes three tiny random DeepSeek-style models with the Hugging Face reference implementation
(transformers' native DeepseekV2ForCausalLM / DeepseekV3ForCausalLM), saves each as a normal HF
model dir under tests/golden/<name>/ (fp32) plus a bf16 copy in tests/golden/<name>/model_bf16/,
and next to each the reference outputs: logits at every prompt position, greedy continuations
(through the KV-cache path) with their top-1/top-2 margins, per-layer hidden states and router
choices for one prompt. The build and the tests never need Python; only regenerating does.

Regenerate (CPU only, a minute or two):
    pip install torch==2.15.0 transformers==5.23.0 safetensors==0.8.0 numpy==2.4.6
    python3 scripts/make_golden.py            # writes tests/golden/
    python3 scripts/make_golden.py --out DIR  # writes elsewhere (e.g. to diff two runs)
The versions are checked at run time: other releases may differ in exactly the details the
golden data pins down (softmax scale, router normalisation, RoPE layout).
"""

import argparse
import json
import math
import os
import shutil
import sys

PINNED = {"torch": "2.15.0", "transformers": "5.23.0", "safetensors": "0.8.0", "numpy": "2.4.6"}

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
)
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.models.deepseek_v2 import modeling_deepseek_v2 as mv2  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mv3  # noqa: E402


def check_versions():
    got = {
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }
    bad = {k: (got[k], v) for k, v in PINNED.items() if got[k] != v}
    if bad:
        sys.exit("make_golden.py: version mismatch (installed, pinned): %r" % bad)


# Prompt lengths; prompt0 (7 tokens) also gets the per-layer debug dump.
PROMPT_LENS = [7, 1, 33, 100]
SCRIPT_KEYS = ("cls", "seed", "config_style")
N_GREEDY = 16
# Smallest accepted gap between the last chosen and first rejected group/expert (see build()).
ROUTER_GAP = {"v2": 2e-3, "v3": 5e-4}
GREEDY_MARGIN = 1e-2
LM_HEAD_GAIN = 8.0  # decisive logits (docs/design.md §8): logit std ~8 instead of ~1

COMMON = dict(
    hidden_act="silu",
    num_hidden_layers=4,
    first_k_dense_replace=2,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
    kv_lora_rank=64,
    rms_norm_eps=1e-6,  # q_a/kv_a norms in HF always use 1e-6; keep all norms alike
    attention_bias=False,
    attention_dropout=0.0,
    tie_word_embeddings=False,
    initializer_range=0.02,
    use_cache=True,
    pad_token_id=None,
    bos_token_id=0,
    eos_token_id=1,
    pretraining_tp=1,
)

# Every routing/shape field is set explicitly: DeepseekV2Config defaults num_experts_per_tok=None
# and q_lora_rank=1536 (docs/design.md §5 "traps"). max_position_embeddings equals
# factor * original_max_position_embeddings so code that recomputes the factor agrees.
MODELS = {
    "v2lite": dict(
        cls="v2",
        seed=1001,
        config_style="deepseek",
        vocab_size=256,
        hidden_size=96,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_attention_heads=6,
        num_key_value_heads=6,
        q_lora_rank=None,
        n_routed_experts=8,
        n_shared_experts=2,
        num_experts_per_tok=3,
        topk_method="greedy",
        n_group=1,
        topk_group=1,
        norm_topk_prob=False,
        routed_scaling_factor=1.0,
        max_position_embeddings=163840,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0,
                             original_max_position_embeddings=4096, beta_fast=32.0,
                             beta_slow=1.0, mscale=0.707, mscale_all_dim=0.707),
    ),
    "v2": dict(
        cls="v2",
        seed=2002,
        config_style="hf5",
        vocab_size=320,
        hidden_size=96,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_attention_heads=6,
        num_key_value_heads=6,
        q_lora_rank=32,
        n_routed_experts=12,
        n_shared_experts=1,
        num_experts_per_tok=3,
        topk_method="group_limited_greedy",
        n_group=4,
        topk_group=2,
        # HF 5.23 DeepseekV2 ignores norm_topk_prob (see tests/golden/README.md); False is what
        # every real V2 checkpoint uses and what DeepSeek's own code and HF agree on.
        norm_topk_prob=False,
        routed_scaling_factor=2.5,
        max_position_embeddings=4096,
        rope_parameters=dict(rope_type="yarn", rope_theta=50000.0, factor=8.0,
                             original_max_position_embeddings=512, beta_fast=32.0,
                             beta_slow=1.0, mscale=1.0, mscale_all_dim=0.5),
    ),
    "v3": dict(
        cls="v3",
        seed=3003,
        config_style="deepseek",
        vocab_size=288,
        hidden_size=96,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_attention_heads=5,  # uneven split over 2-4 ranks (V2's config rejects hidden % heads != 0)
        num_key_value_heads=5,
        q_lora_rank=48,
        n_routed_experts=12,
        n_shared_experts=1,
        num_experts_per_tok=3,
        topk_method="noaux_tc",
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        scoring_func="sigmoid",
        rope_interleave=True,
        num_nextn_predict_layers=0,
        max_position_embeddings=163840,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0,
                             original_max_position_embeddings=4096, beta_fast=32.0,
                             beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
    ),
}


def make_config(spec):
    kw = {k: v for k, v in spec.items() if k not in SCRIPT_KEYS}
    kw.update(COMMON)
    if spec["cls"] == "v2":
        kw.pop("scoring_func", None)
        cfg = DeepseekV2Config(**kw)
    else:
        # DeepseekV3Config has no topk_method / scoring_func fields (noaux_tc + sigmoid is the
        # only V3 behaviour); keep them in config.json anyway because real V3 checkpoints carry
        # them and numla's config parser reads them.
        cfg = DeepseekV3Config(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def model_class(spec):
    return DeepseekV2ForCausalLM if spec["cls"] == "v2" else DeepseekV3ForCausalLM


def init_weights(model, spec, gen):
    """Unit-gain random init: every projection keeps activations O(1), so every sublayer
    contributes visibly to the logits (std 0.02 would make the MLPs nearly invisible)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name:
                # not all ones: a missing norm weight must show in the logits
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=gen) * (LM_HEAD_GAIN / math.sqrt(p.shape[1])))
            elif name.endswith("mlp.gate.weight"):
                # router: logits of std ~4 (V2 softmax) / ~2 (V3 sigmoid) so expert choices are
                # rarely near ties
                g = 4.0 if spec["cls"] == "v2" else 2.0
                p.copy_(torch.randn(p.shape, generator=gen) * (g / math.sqrt(p.shape[1])))
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                fan_in = p.shape[2]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError("make_golden: no init rule for %s %s" % (name, tuple(p.shape)))
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                # sigmoid scores are in (0,1): a bias of std 0.1 changes some selections
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)


def expected_scale(cfg):
    rp = cfg.rope_parameters
    m = 0.1 * rp["mscale_all_dim"] * math.log(rp["factor"]) + 1.0
    return (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) ** -0.5 * m * m


def check_model(model, cfg, spec):
    rp = {k: v for k, v in cfg.rope_parameters.items() if k != "type"}
    assert rp == spec["rope_parameters"], ("rope parameters", rp, spec["rope_parameters"])
    want = expected_scale(cfg)
    for layer in model.model.layers:
        got = layer.self_attn.scaling
        assert abs(got - want) <= 1e-12 * want, ("softmax scale lacks YaRN m^2", got, want)
    rp = cfg.rope_parameters
    assert rp["factor"] > 1 and rp["mscale_all_dim"] != 0
    assert cfg.max_position_embeddings == rp["factor"] * rp["original_max_position_embeddings"]
    assert cfg.num_experts_per_tok == spec["num_experts_per_tok"]
    assert cfg.q_lora_rank == spec["q_lora_rank"]
    for j, layer in enumerate(model.model.layers):
        is_moe = hasattr(layer.mlp, "gate")
        assert is_moe == (j >= cfg.first_k_dense_replace), j
    return want


def check_config_json(path, spec):
    with open(path) as f:
        c = json.load(f)
    for k, v in spec.items():
        if k in SCRIPT_KEYS:
            continue
        if k == "rope_parameters" and spec["config_style"] == "deepseek":
            rp = dict(v)
            assert c["rope_theta"] == rp.pop("rope_theta"), path
            rp["type"] = rp.pop("rope_type")
            assert c["rope_scaling"] == rp, ("rope_scaling", path, c["rope_scaling"], rp)
            assert "rope_parameters" not in c
            continue
        if k in ("topk_method", "scoring_func") and spec["cls"] == "v3":
            continue  # put back by restyle_config
        assert k in c and c[k] == v, ("config.json field", path, k, c.get(k), v)
    for k, v in COMMON.items():
        if v is not None:
            assert c.get(k) == v, ("config.json field", path, k, c.get(k), v)
    assert c["model_type"] == ("deepseek_v2" if spec["cls"] == "v2" else "deepseek_v3")


def restyle_config(path, spec):
    """config_style "deepseek": rewrite save_pretrained's config.json the way DeepSeek's own
    checkpoints spell it (rope_scaling with "type" + top-level rope_theta, torch_dtype,
    moe_layer_freq, scoring_func; no HF-derived head_dim/qk_head_dim), which is what numla meets
    in the wild; "hf5": keep save_pretrained's (rope_parameters, dtype, head_dim =
    qk_rope_head_dim). transformers 5.23 loads both to the same model: build() reloads every
    dir and checks the weights, the scale and the RoPE parameters.
    Real DeepSeek-V3 files carry topk_method and scoring_func, which HF 5.23's V3 config class
    drops; they are put back in both styles."""
    with open(path) as f:
        c = json.load(f)
    if spec["cls"] == "v3":
        c["topk_method"] = spec["topk_method"]
        c["scoring_func"] = spec["scoring_func"]
    if spec["config_style"] == "deepseek":
        rp = c.pop("rope_parameters")
        c["rope_theta"] = rp.pop("rope_theta")
        rp["type"] = rp.pop("rope_type")
        c["rope_scaling"] = rp
        c.pop("head_dim", None)
        c.pop("qk_head_dim", None)
        c["torch_dtype"] = c.pop("dtype")
        c["moe_layer_freq"] = 1
        c.setdefault("scoring_func", "softmax")
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def greedy(model, tokens, n):
    """Greedy decoding through the KV cache: prompt in one forward, then one token per step."""
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([tokens])
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    logits = out.logits[0, -1]
    toks, margins, step_logits = [], [], []
    for _ in range(n):
        top2 = torch.topk(logits, 2)
        t = int(top2.indices[0])
        toks.append(t)
        margins.append(float(top2.values[0] - top2.values[1]))
        step_logits.append(logits.clone())
        out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
        logits = out.logits[0, -1]
    return toks, margins, torch.stack(step_logits)


class RouterTap:
    """Records (router_logits, topk_weights, topk_indices) of one router module."""

    def __init__(self, module):
        self.calls = []
        self.h = module.register_forward_hook(lambda m, i, o: self.calls.append(o))

    def close(self):
        self.h.remove()


def router_choices(out):
    """Sorted by expert id per token (HF's topk(sorted=False) order is not meaningful)."""
    _, w, idx = out
    order = torch.argsort(idx, dim=-1)
    return torch.gather(idx, 1, order).to(torch.int32), torch.gather(w, 1, order).float()


def selection_gaps(logits, cfg, spec, bias=None):
    """Per token: min(gap of the group choice, gap of the expert choice) for the reference rule.
    V2: in router-logit units; V3: in biased-sigmoid-score units."""
    E, G, TG, K = cfg.n_routed_experts, spec["n_group"], spec["topk_group"], spec["num_experts_per_tok"]
    if spec["cls"] == "v3":
        s = logits.sigmoid() + bias
        gs = s.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
    else:
        # softmax is monotonic: choices (and the per-group max) follow the fp32 router logits,
        # so the gap is measured in logit units, where rounding errors are relative to O(1)
        s = logits.clone()
        gs = s.view(-1, G, E // G).max(-1).values
    gaps = []
    if G > 1 and TG < G:
        v = gs.sort(-1, descending=True).values
        gaps.append(v[:, TG - 1] - v[:, TG])
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(TG, -1)[1], 1.0)
        mask = keep.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E).bool()
        s = s.masked_fill(~mask, float("-inf"))
    v = s.sort(-1, descending=True).values
    gaps.append(v[:, K - 1] - v[:, K])
    return torch.stack(gaps, -1).min(-1).values


def min_margin(meta):
    return min(m for p in meta for m in p["greedy_margins"])


def run_reference(model, cfg, spec, prompts, with_debug):
    """Logits at every prompt position, greedy continuation, margins, debug tensors."""
    tensors, debug, meta = {}, {}, []
    moe_layers = [j for j, l in enumerate(model.model.layers) if hasattr(l.mlp, "gate")]
    taps = {j: RouterTap(model.model.layers[j].mlp.gate) for j in moe_layers}
    min_router_gap = float("inf")
    with torch.no_grad():
        for i, toks in enumerate(prompts):
            for t in taps.values():
                t.calls.clear()
            layer_out, attn_out, mlp_out = [], [], []
            mods = [model.model.embed_tokens] + list(model.model.layers)
            hooks = [m_.register_forward_hook(lambda m, a, o: layer_out.append(o)) for m_ in mods]
            for l_ in model.model.layers:
                hooks.append(l_.self_attn.register_forward_hook(lambda m, a, o: attn_out.append(o[0])))
                hooks.append(l_.mlp.register_forward_hook(lambda m, a, o: mlp_out.append(o)))
            cache = DynamicCache(config=model.config)
            out = model(input_ids=torch.tensor([toks]), past_key_values=cache, use_cache=True)
            for h in hooks:
                h.remove()
            logits = out.logits[0].float().contiguous()
            tensors["prompt%d.logits" % i] = logits
            if with_debug and i == 0:
                # embedding output, then each decoder layer's output (residual stream, before
                # the final norm)
                outs = [o[0] if isinstance(o, tuple) else o for o in layer_out]
                assert len(outs) == len(model.model.layers) + 1
                debug["prompt0.embed"] = outs[0][0].float().contiguous()
                for j in range(len(model.model.layers)):
                    debug["prompt0.layer%d.out" % j] = outs[j + 1][0].float().contiguous()
                    debug["prompt0.layer%d.attn_out" % j] = attn_out[j][0].float().contiguous()
                    debug["prompt0.layer%d.mlp_out" % j] = mlp_out[j][0].float().contiguous()
                    # what the MLA cache holds: c' = RMSNorm_kva(c) and the rotated k_pe
                    lay = cache.layers[j]
                    debug["prompt0.layer%d.kv_c" % j] = lay.keys[0, 0].float().contiguous()
                    kpe = lay.values[0, 0].float()
                    if spec["cls"] == "v3" and cfg.rope_interleave:
                        # HF V3 stores rotated k_pe de-interleaved [x0,x2,..|x1,x3,..]; saved
                        # here in DeepSeek's adjacent-pair order (x0,x1),(x2,x3),...
                        hd = kpe.shape[-1] // 2
                        kpe = torch.stack([kpe[:, :hd], kpe[:, hd:]], -1).reshape(kpe.shape)
                    debug["prompt0.layer%d.k_pe" % j] = kpe.contiguous()
                j0 = moe_layers[0]
                rl, ids, w = taps[j0].calls[0][0], *router_choices(taps[j0].calls[0])
                debug["prompt0.layer%d.router_logits" % j0] = rl.float().contiguous()
                debug["prompt0.layer%d.topk_ids" % j0] = ids.contiguous()
                debug["prompt0.layer%d.topk_weights" % j0] = w.contiguous()
            g_toks, g_margins, g_logits = greedy(model, toks, N_GREEDY)
            # the cache path must agree with a full forward over prompt + continuation; the
            # router gaps are measured on that forward (prompt and generated tokens alike)
            for t in taps.values():
                t.calls.clear()
            full = model(input_ids=torch.tensor([toks + g_toks[:-1]]), use_cache=False).logits[0]
            diff = float((full[len(toks) - 1:] - g_logits).abs().max())
            assert diff < 1e-3, ("cache path disagrees with full forward", diff)
            for j in moe_layers:
                bias = getattr(model.model.layers[j].mlp.gate, "e_score_correction_bias", None)
                gaps = selection_gaps(taps[j].calls[0][0], cfg, spec, bias)
                min_router_gap = min(min_router_gap, float(gaps.min()))
            top2 = torch.topk(logits, 2, dim=-1).values
            meta.append({
                "tokens": toks,
                "greedy": g_toks,
                "greedy_margins": g_margins,
                "min_prompt_margin": float((top2[:, 0] - top2[:, 1]).min()),
                "cache_vs_full_max_abs_diff": diff,
            })
    for t in taps.values():
        t.close()
    return tensors, debug, meta, min_router_gap


def rope_info(model):
    rot = model.model.rotary_emb
    return rot.inv_freq.float().contiguous(), float(rot.attention_scaling)


def fp64_calibration(model_cls, fp32_dir, prompts, ref_tensors):
    """Run the reference in fp64 (norms too: HF's RMSNorm upcasts only to fp32, so it is patched
    for this run; RoPE angles stay fp32 as in HF) and report max |logit(fp64) - logit(fp32)|."""
    m = model_cls.from_pretrained(fp32_dir, dtype=torch.float64, attn_implementation="eager",
                                  experts_implementation="eager")
    m.eval()

    def norm64(self, x):
        v = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(v + self.variance_epsilon))

    saved = (mv2.DeepseekV2RMSNorm.forward, mv3.DeepseekV3RMSNorm.forward)
    mv2.DeepseekV2RMSNorm.forward = norm64
    mv3.DeepseekV3RMSNorm.forward = norm64
    worst, worst_rel = 0.0, 0.0
    try:
        with torch.no_grad():
            for i, toks in enumerate(prompts):
                l64 = m(input_ids=torch.tensor([toks]), use_cache=False).logits[0]
                l32 = ref_tensors["prompt%d.logits" % i].double()
                d = float((l64 - l32).abs().max())
                worst = max(worst, d)
                worst_rel = max(worst_rel, d / float(l64.abs().max()))
    finally:
        mv2.DeepseekV2RMSNorm.forward, mv3.DeepseekV3RMSNorm.forward = saved
    return worst, worst_rel


def load_fp32(model_cls, d):
    m = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                  experts_implementation="eager")
    m.eval()
    return m


def write_expected(d, tensors, meta, softmax_scale, rope, extra):
    inv_freq, att = rope
    save_file({k: tensors[k] for k in sorted(tensors)}, os.path.join(d, "expected.safetensors"),
              metadata={"format": "pt"})
    doc = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "softmax_scale": softmax_scale,
        "rope_attention_scaling": att,
        "rope_inv_freq": [float(x) for x in inv_freq],
        "n_greedy": N_GREEDY,
        "prompts": meta,
    }
    doc.update(extra)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def save_dir(model, d, spec):
    model.save_pretrained(d)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)  # not part of what numla reads; its eos defaults only confuse
    restyle_config(os.path.join(d, "config.json"), spec)
    check_config_json(os.path.join(d, "config.json"), spec)
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        return {k: f.get_slice(k).get_dtype() for k in f.keys()}


def build(name, spec, out_root):
    cfg = make_config(spec)
    cls = model_class(spec)
    torch.manual_seed(spec["seed"])
    model = cls(cfg)
    model.eval()
    gen = torch.Generator().manual_seed(spec["seed"])
    init_weights(model, spec, gen)
    scale = check_model(model, cfg, spec)

    d = os.path.join(out_root, name)
    bd = os.path.join(d, "model_bf16")
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    dtypes = save_dir(model, d, spec)
    assert all(v == "F32" for v in dtypes.values()), dtypes

    # Everything below runs on the models as loaded back from disk: the saved files are the truth.
    ref = load_fp32(cls, d)
    sd_a, sd_b = model.state_dict(), ref.state_dict()
    assert sorted(sd_a) == sorted(sd_b)
    for k in sd_a:
        assert torch.equal(sd_a[k], sd_b[k]), ("reload changed", k)
    check_model(ref, ref.config, spec)

    # bf16 copy: the stored bf16 weights, upcast, run in fp32 math.
    # The V3 correction bias stays fp32 (HF keeps it fp32 in memory; it decides expert choices).
    bmodel = load_fp32(cls, d).to(torch.bfloat16)
    for n_, b_ in bmodel.named_buffers():
        if n_.endswith("e_score_correction_bias"):
            b_.data = sd_b[n_].clone()
    save_dir(bmodel, bd, spec)
    with safe_open(os.path.join(bd, "model.safetensors"), "pt") as f:
        bdtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    fp32_kept = sorted(k for k, v in bdtypes.items() if v != "BF16")
    bref = load_fp32(cls, bd)
    for k, v in bref.state_dict().items():
        want = sd_b[k]
        if not k.endswith("e_score_correction_bias"):
            want = want.to(torch.bfloat16).float()
        assert torch.equal(v, want), ("bf16 copy is not the rounded fp32 weights", k)

    # Random prompts; the first prompt seed whose expert choices are decisive (every top-k and
    # group choice separated by >= ROUTER_GAP) and whose greedy steps all have a top-1/top-2
    # margin >= GREEDY_MARGIN, in both the fp32 and the bf16 model, is used, so a different
    # summation order cannot flip an expert choice or a greedy token (docs/design.md §8).
    thr = ROUTER_GAP[spec["cls"]]
    for attempt in range(2000):
        pg = torch.Generator().manual_seed(spec["seed"] * 1000 + attempt)
        prompts = [torch.randint(2, cfg.vocab_size, (n,), generator=pg).tolist()
                   for n in PROMPT_LENS]
        tensors, debug, meta, rgap = run_reference(ref, ref.config, spec, prompts, True)
        if rgap < thr or min_margin(meta) < GREEDY_MARGIN:
            continue
        btensors, _, bmeta, brgap = run_reference(bref, bref.config, spec, prompts, False)
        if brgap >= thr and min_margin(bmeta) >= GREEDY_MARGIN:
            break
    else:
        sys.exit("make_golden.py: %s: no decisive prompt set found" % name)

    rope = rope_info(ref)
    err64, rel64 = fp64_calibration(cls, d, prompts, tensors)
    all_margins = [m for p in meta for m in p["greedy_margins"]]
    extra = {
        "model": name,
        "weights": "model.safetensors (fp32)",
        "prompt_seed_attempt": attempt,
        "fp64_vs_fp32_max_abs_logit_diff": err64,
        "fp64_vs_fp32_max_rel_logit_diff": rel64,
        "min_router_selection_gap": rgap,
        "router_gap_units": "router logits" if spec["cls"] == "v2" else "sigmoid score + bias",
        "min_greedy_margin": min(all_margins),
        "min_prompt_margin": min(p["min_prompt_margin"] for p in meta),
    }
    write_expected(d, tensors, meta, scale, rope, extra)
    save_file({k: debug[k] for k in sorted(debug)}, os.path.join(d, "debug.safetensors"),
              metadata={"format": "pt"})

    ball = [m for p in bmeta for m in p["greedy_margins"]]
    bextra = {
        "model": name + "/model_bf16",
        "weights": "model.safetensors (bf16; expected outputs computed in fp32 math on the "
                   "upcast bf16 weights)",
        "tensors_not_bf16": fp32_kept,
        "prompt_seed_attempt": attempt,
        "min_router_selection_gap": brgap,
        "router_gap_units": extra["router_gap_units"],
        "min_greedy_margin": min(ball),
        "min_prompt_margin": min(p["min_prompt_margin"] for p in bmeta),
        "bf16_vs_fp32_weights_max_abs_logit_diff": max(
            float((btensors[k] - tensors[k]).abs().max()) for k in tensors if k.endswith(".logits")),
        "bf16_vs_fp32_weights_same_greedy": [a["greedy"] == b["greedy"] for a, b in zip(meta, bmeta)],
    }
    write_expected(bd, btensors, bmeta, scale, rope, bextra)
    print("%s: attempt=%d scale=%.6f att=%.6f fp64err=%.3g min_greedy_margin=%.3g/%.3g "
          "min_prompt_margin=%.3g router_gap=%.3g/%.3g bf16diff=%.3g kept_fp32=%s"
          % (name, attempt, scale, rope[1], err64, min(all_margins), min(ball),
             extra["min_prompt_margin"], rgap, brgap,
             bextra["bf16_vs_fp32_weights_max_abs_logit_diff"], fp32_kept))


# ---------------------------------------------------------------------------------------------
# 8-bit variants: tests/golden/<name>/model_fp8/ and model_int8/ (README "8-bit variants").
#
# Both are quantized from model_bf16/ (the bf16 weights upcast to fp32: what `numla quantize`
# reads there, and how DeepSeek's FP8 / the Channel-INT8 checkpoints were made from bf16), use
# the same prompts, and are written in the published formats. What is quantized follows
# engine/synth/quantized_checkpoint.c; the math follows kernels/quant.h; the W8A8 activation rule follows
# kernels/qlinear.h.

QUANT_PROJ = ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
              "gate_proj", "up_proj", "down_proj")
FP8_BLOCK = 128
FP8_MAX = 448.0
INT8_MAX = 127.0
W8A8_EPS = 1e-7
W8A8_PERTURB = {"gen": None}
# W8A8 golden prompts must be robust: the reference run in fp64, and in fp32 with every
# quantized activation perturbed by up to 8 ulp (two seeds), stays within this of the fp32
# reference at every prompt position and greedy step (see README "8-bit variants").
W8A8_ROBUST = 5e-4
# Robust W8A8 prompts are rare beyond ~40 tokens on these unit-gain models (README), so the
# int8 variant's 100-token slot holds a 40-token prompt.
W8A8_PROMPT_LENS = [7, 1, 33, 40]
# v3's fp8 copy is sharded the way DeepSeek publishes V3 (model-0000i-of-0000n + index), with
# the cut placed between one weight and its scale_inv so a loader must look scales up by name.
SHARDED = {("v3", "fp8"): 2}
QUANT_CONFIG = {
    "fp8": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
            "activation_scheme": "dynamic"},
    "int8": {"quant_method": "w8a8_int8", "activation_scheme": "dynamic"},
}


def is_quantized(name, ndim):
    """engine/synth/quantized_checkpoint.c numla_qckpt_quantizes with keep_lm_head: the 2-D .weight of the
    attention and MLP projections (dense, routed and shared experts). Never embed_tokens, norms,
    the router (mlp.gate.weight, e_score_correction_bias) or lm_head: DeepSeek's FP8 files keep
    lm_head bf16, and so do the Channel-INT8 files (made from the FP8 file's index)."""
    if ndim != 2 or not name.endswith(".weight"):
        return False
    return name[:-len(".weight")].rsplit(".", 1)[-1] in QUANT_PROJ


def fp8_quantize(w):
    """kernels/quant.h FP8: per 128x128 block scale_inv = amax / 448 (fp32; 1 when 0), codes
    (w / scale_inv).to(float8_e4m3fn) (fp32 division, torch's RNE)."""
    n, k = w.shape
    nb, kb = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
    s = torch.empty(nb, kb, dtype=torch.float32)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    for i in range(nb):
        for j in range(kb):
            rs, cs = slice(i * FP8_BLOCK, (i + 1) * FP8_BLOCK), slice(j * FP8_BLOCK, (j + 1) * FP8_BLOCK)
            blk = w[rs, cs]
            si = blk.abs().max() / torch.tensor(FP8_MAX, dtype=torch.float32)
            if not float(si) > 0.0:
                si = torch.tensor(1.0, dtype=torch.float32)
            s[i, j] = si
            q[rs, cs] = (blk / si).to(torch.float8_e4m3fn)
    assert not torch.isnan(q.float()).any()
    return q, s


def fp8_dequantize(q, s):
    """DeepSeek's weight_dequant: float(code) * scale_inv of its block, in fp32."""
    n, k = q.shape
    full = s.repeat_interleave(FP8_BLOCK, 0)[:n].repeat_interleave(FP8_BLOCK, 1)[:, :k]
    return q.float() * full


def int8_quantize(w):
    """kernels/quant.h INT8: per row scale = amax / 127 (fp32; 1 when 0), codes
    clamp(round_half_even(w / scale), -127, 127)."""
    amax = w.abs().amax(dim=1, keepdim=True)
    s = amax / torch.tensor(INT8_MAX, dtype=torch.float32)
    s = torch.where(s > 0, s, torch.ones_like(s))
    q = torch.round(w / s).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, s.contiguous()


def int8_dequantize(q, s):
    return q.float() * s


def e4m3_decode_np(raw):
    """Independent e4m3fn decode (bias 7, 3 mantissa bits, S.1111.111 NaN, no inf)."""
    b = np.asarray(raw, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 0x7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return sign * v


def w8a8_linear(x, q, s_w):
    """kernels/qlinear.h NUMLA_QLINEAR_INT8_W8A8 (SGLang's CPU per-token rule), in x's dtype:
    amax = max(max|x|, 1e-7), sx = amax / 127, inv = 127 / amax, qx = round_half_even(x * inv),
    acc = qx . q (exact: |acc| < 2^24 here and summed in float64), y = acc * sx * s_w."""
    dt = x.dtype
    if W8A8_PERTURB["gen"] is not None:
        # robustness check only: x off by up to 8 ulp, as an engine's summation order (rank
        # count, ISA, decode after prefill) can leave it after a few layers
        u = torch.rand(x.shape, generator=W8A8_PERTURB["gen"], dtype=torch.float64) * 2 - 1
        x = (x.double() * (1 + u * 2.0 ** -20)).to(dt)
    amax = x.abs().amax(dim=-1, keepdim=True).clamp_min(torch.tensor(W8A8_EPS, dtype=dt))
    sx = amax / torch.tensor(INT8_MAX, dtype=dt)
    inv = torch.tensor(INT8_MAX, dtype=dt) / amax
    qx = torch.round(x * inv)
    acc = torch.matmul(qx.double(), q.double().t())
    assert acc.numel() == 0 or float(acc.abs().max()) < 2 ** 24
    return acc.to(dt) * sx * s_w.to(dt).reshape(-1)


# Quantized linears that keep fp32 activations in numla's int8 (engine/model/weights.c): kv_b_proj
# (the absorbed MLA uses it dequantized as W_UK / W_UV, so c' is never quantized), and the
# row-parallel ones whose input each rank holds only a slice of (o_proj, the dense MLP's and the
# shared experts' down_proj): a per-token scale over a slice would make the result depend on the
# rank count.
W8A8_FP32_INPUT = ("kv_b_proj", "o_proj", "mlp.down_proj", "shared_experts.down_proj")


def install_w8a8(model, codes):
    """Every quantized linear but those of W8A8_FP32_INPUT quantizes its input per token
    (w8a8_linear); those run as plain fp32 linears on their dequantized weights."""
    n_patched = 0
    for mname, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            key = mname + ".weight"
            if key in codes and not mname.endswith(W8A8_FP32_INPUT):
                q, s = codes[key]

                def fwd(x, q=q, s=s):
                    return w8a8_linear(x, q, s)
                mod.forward = fwd
                n_patched += 1
        elif type(mod).__name__.endswith("Experts"):
            E = mod.num_experts
            gu = [(torch.cat([codes["%s.%d.gate_proj.weight" % (mname, e)][0],
                              codes["%s.%d.up_proj.weight" % (mname, e)][0]]),
                   torch.cat([codes["%s.%d.gate_proj.weight" % (mname, e)][1],
                              codes["%s.%d.up_proj.weight" % (mname, e)][1]])) for e in range(E)]
            dn = [codes["%s.%d.down_proj.weight" % (mname, e)] for e in range(E)]

            def efwd(hidden_states, top_k_index, top_k_weights, mod=mod, gu=gu, dn=dn):
                # transformers' eager experts loop with the two linears made W8A8
                out = torch.zeros_like(hidden_states)
                mask = torch.nn.functional.one_hot(top_k_index, num_classes=mod.num_experts + 1)
                mask = mask.permute(2, 1, 0)
                for e in range(mod.num_experts):
                    pos, tok = torch.where(mask[e])
                    if tok.numel() == 0:
                        continue
                    gate, up = w8a8_linear(hidden_states[tok], *gu[e]).chunk(2, dim=-1)
                    h = w8a8_linear(mod.act_fn(gate) * up, *dn[e])
                    out.index_add_(0, tok, (h * top_k_weights[tok, pos, None]).to(out.dtype))
                return out
            mod.forward = efwd
            n_patched += 3 * E
    return n_patched


def quantize_state(fmt, src):
    """src: name -> bf16/fp32 tensor (model_bf16). Returns (tensors to write, name -> fp32
    dequantized weight, name -> (codes, scales) for the quantized ones)."""
    out, deq, codes = {}, {}, {}
    for name in sorted(src):
        t = src[name]
        if not is_quantized(name, t.ndim):
            out[name] = t
            deq[name] = t.float()
            continue
        w = t.float()
        if fmt == "fp8":
            q, s = fp8_quantize(w)
            out[name], out[name + "_scale_inv"] = q, s
            d = fp8_dequantize(q, s)
            # independent decode of the stored bytes; the fp32 product is the exact one rounded once
            d_np = e4m3_decode_np(q.view(torch.uint8).numpy()) * np.kron(
                s.double().numpy(), np.ones((FP8_BLOCK, FP8_BLOCK)))[:w.shape[0], :w.shape[1]]
            assert np.array_equal(d.numpy(), d_np.astype(np.float32)), name
            # e4m3 keeps 3 mantissa bits: |w' - w| <= 2^-4 |w| for normals, 2^-10 s below 2^-6 s
            full_s = s.repeat_interleave(FP8_BLOCK, 0)[:w.shape[0]].repeat_interleave(FP8_BLOCK, 1)[:, :w.shape[1]]
            bound = torch.maximum(w.abs() * 2.0 ** -4, full_s * 2.0 ** -10) * (1 + 1e-6)
            assert bool(((d - w).abs() <= bound).all()), name
        else:
            q, s = int8_quantize(w)
            out[name], out[name + "_scale"] = q, s
            d = int8_dequantize(q, s)
            assert bool(((d - w).abs() <= s * (0.5 + 1e-5)).all()), name
            codes[name] = (q, s.reshape(-1))
        deq[name] = d
    return out, deq, codes


def write_quant_checkpoint(d, tensors, config, shards):
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    names = sorted(tensors)
    if shards <= 1:
        save_file({k: tensors[k].contiguous() for k in names}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})
        return [names]
    # cut after the first quantized weight past the middle, before its scale
    mid = len(names) // 2
    cut = next(i for i in range(mid, len(names)) if names[i].endswith(".weight")
               and i + 1 < len(names) and names[i + 1].startswith(names[i] + "_scale")) + 1
    parts = [names[:cut], names[cut:]]
    assert shards == 2
    wmap, total = {}, 0
    for i, part in enumerate(parts):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(parts))
        save_file({k: tensors[k].contiguous() for k in part}, os.path.join(d, fn),
                  metadata={"format": "pt"})
        for k in part:
            wmap[k] = fn
            total += tensors[k].numel() * tensors[k].element_size()
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2, sort_keys=True)
        f.write("\n")
    return parts


def read_checkpoint(d):
    """name -> tensor from model.safetensors or the shards of model.safetensors.index.json."""
    idx = os.path.join(d, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx)
             else ["model.safetensors"])
    out = {}
    for fn in files:
        with safe_open(os.path.join(d, fn), "pt") as f:
            for k in f.keys():
                assert k not in out, k
                out[k] = f.get_tensor(k)
    return out


def logit_diffs(a, b):
    keys = sorted(k for k in a if k.endswith(".logits"))
    mx = max(float((a[k] - b[k]).abs().max()) for k in keys)
    tot = sum(float((a[k] - b[k]).abs().sum()) for k in keys)
    cnt = sum(a[k].numel() for k in keys)
    flips = sum(int((a[k].argmax(-1) != b[k].argmax(-1)).sum()) for k in keys)
    rows = sum(a[k].shape[0] for k in keys)
    return {"max_abs": mx, "mean_abs": tot / cnt, "argmax_differs": flips, "positions": rows}


def load_fp64(model_cls, fp32_dir, codes):
    """The same reference in fp64 (W8A8 rule evaluated in fp64 when codes are given)."""
    m = model_cls.from_pretrained(fp32_dir, dtype=torch.float64, attn_implementation="eager",
                                  experts_implementation="eager")
    m.eval()
    if codes:
        install_w8a8(m, codes)
    return m


def spread(model, other, seqs, perturb):
    """max |logits(other) - logits(model)| over full forwards of seqs; other in fp64 runs its
    norms in fp64 too (HF's RMSNorm upcasts only to fp32); perturb: a generator for
    w8a8_linear's input perturbation in the `other` run."""
    def norm64(self, x):
        v = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(v + self.variance_epsilon))

    worst = 0.0
    with torch.no_grad():
        for toks in seqs:
            ids = torch.tensor([toks])
            a = model(input_ids=ids, use_cache=False).logits[0].double()
            saved = (mv2.DeepseekV2RMSNorm.forward, mv3.DeepseekV3RMSNorm.forward)
            if other.dtype == torch.float64:
                mv2.DeepseekV2RMSNorm.forward = norm64
                mv3.DeepseekV3RMSNorm.forward = norm64
            W8A8_PERTURB["gen"] = perturb
            try:
                b = other(input_ids=ids, use_cache=False).logits[0].double()
            finally:
                W8A8_PERTURB["gen"] = None
                mv2.DeepseekV2RMSNorm.forward, mv3.DeepseekV3RMSNorm.forward = saved
            worst = max(worst, float((a - b).abs().max()))
    return worst


def build_quant(name, spec, out_root, fmt, tmp_root):
    cls = model_class(spec)
    base = os.path.join(out_root, name)
    bd = os.path.join(base, "model_bf16")
    qd = os.path.join(base, "model_" + fmt)
    with open(os.path.join(bd, "expected.json")) as f:
        bexp = json.load(f)
    prompts = [p["tokens"] for p in bexp["prompts"]]
    with safe_open(os.path.join(bd, "expected.safetensors"), "pt") as f:
        btensors = {k: f.get_tensor(k) for k in f.keys()}
    with open(os.path.join(bd, "config.json")) as f:
        config = json.load(f)
    assert "quantization_config" not in config

    src = read_checkpoint(bd)
    tensors, deq, codes = quantize_state(fmt, src)
    if os.path.exists(qd):
        shutil.rmtree(qd)
    qconfig = dict(config)
    qconfig["quantization_config"] = QUANT_CONFIG[fmt]
    shards = write_quant_checkpoint(qd, tensors, qconfig, SHARDED.get((name, fmt), 1))

    # The written files are the truth: read them back and dequantize what they hold.
    back = read_checkpoint(qd)
    assert sorted(back) == sorted(tensors)
    qnames = sorted(k for k in src if is_quantized(k, src[k].ndim))
    want_dtype = torch.float8_e4m3fn if fmt == "fp8" else torch.int8
    sfx = "_scale_inv" if fmt == "fp8" else "_scale"
    for k, v in back.items():
        if k in qnames:
            assert v.dtype == want_dtype, (k, v.dtype)
            s = back[k + sfx]
            assert s.dtype == torch.float32 and bool(torch.isfinite(s).all()) and bool((s > 0).all())
            if fmt == "fp8":
                assert tuple(s.shape) == (-(-v.shape[0] // FP8_BLOCK), -(-v.shape[1] // FP8_BLOCK))
                assert torch.equal(fp8_dequantize(v, s), deq[k]), k
            else:
                assert tuple(s.shape) == (v.shape[0], 1)
                assert torch.equal(int8_dequantize(v, s), deq[k]), k
        elif not k.endswith(sfx):
            assert v.dtype == src[k].dtype and torch.equal(v, src[k]), k
    n_kept = sorted(k for k in src if k not in qnames)

    # Reference model: the dequantized weights in fp32, loaded by transformers from a plain
    # fp32 checkpoint (it fuses the per-expert tensors itself).
    fd = os.path.join(tmp_root, "%s_%s_deq" % (name, fmt))
    if os.path.exists(fd):
        shutil.rmtree(fd)
    os.makedirs(fd)
    with open(os.path.join(fd, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    save_file({k: deq[k].contiguous() for k in sorted(deq)}, os.path.join(fd, "model.safetensors"),
              metadata={"format": "pt"})
    ref = load_fp32(cls, fd)
    for mname, mod in ref.named_modules():
        if isinstance(mod, torch.nn.Linear) and mname + ".weight" in deq:
            assert torch.equal(mod.weight, deq[mname + ".weight"]), mname
        elif type(mod).__name__.endswith("Experts"):
            for e in range(mod.num_experts):
                g = deq["%s.%d.gate_proj.weight" % (mname, e)]
                u = deq["%s.%d.up_proj.weight" % (mname, e)]
                assert torch.equal(mod.gate_up_proj[e], torch.cat([g, u])), (mname, e)
                assert torch.equal(mod.down_proj[e], deq["%s.%d.down_proj.weight" % (mname, e)])
    check_model(ref, ref.config, spec)

    # int8: the W8A8 reference; `plain` keeps the weight-only (fp32 activations) model.
    plain = ref
    if fmt == "int8":
        plain = load_fp32(cls, fd)
        n_patched = install_w8a8(ref, codes)
        # every quantized tensor but kv_b_proj is patched
        assert n_patched == len([k for k in qnames
                                 if not k[:-len(".weight")].endswith(W8A8_FP32_INPUT)]), n_patched
    m64 = load_fp64(cls, fd, codes if fmt == "int8" else None)

    # The golden prompts (model_bf16's) where they are decisive here too; a prompt that is not
    # (or, for W8A8, not robust) is replaced by a fresh random prompt of the same length, for
    # this variant only, one prompt at a time (robustness of a whole set at once is too rare).
    thr = ROUTER_GAP[spec["cls"]]
    cfg = ref.config
    replaced = []
    for i in range(len(prompts)):
        if fmt == "int8" and len(prompts[i]) != W8A8_PROMPT_LENS[i]:
            prompts[i] = prompts[i][:W8A8_PROMPT_LENS[i]]
            replaced.append(i)
        for t in range(500):
            if t:
                pg = torch.Generator().manual_seed(spec["seed"] * 100000 + i * 1000 + t)
                prompts[i] = torch.randint(2, cfg.vocab_size, (len(prompts[i]),), generator=pg).tolist()
            try:
                _, _, pm, pgap = run_reference(ref, cfg, spec, [prompts[i]], False)
            except AssertionError:
                continue  # W8A8: the cache path flipped a rounding against the full forward
            if pgap < thr or min_margin(pm) < GREEDY_MARGIN:
                continue
            if fmt == "int8":
                seq = [pm[0]["tokens"] + pm[0]["greedy"][:-1]]
                e = max([spread(ref, m64, seq, None)] +
                        [spread(ref, ref, seq, torch.Generator().manual_seed(77 + r)) for r in range(2)])
                if e > W8A8_ROBUST:
                    continue
            break
        else:
            sys.exit("make_golden.py: %s/%s: no decisive prompt %d found" % (name, fmt, i))
        if t and i not in replaced:
            replaced.append(i)
    tensors_q, _, meta, rgap = run_reference(ref, cfg, spec, prompts, False)
    assert rgap >= thr and min_margin(meta) >= GREEDY_MARGIN
    seqs = [p["tokens"] + p["greedy"][:-1] for p in meta]
    err64 = spread(ref, m64, seqs, None)
    errp = None
    if fmt == "int8":
        errp = max(spread(ref, ref, [q], torch.Generator().manual_seed(77 + r))
                   for q in seqs for r in range(2))
        assert max(err64, errp) <= W8A8_ROBUST, (err64, errp)
    shutil.rmtree(fd)
    if replaced:
        # accuracy against the bf16 model on this variant's own prompts
        bref = load_fp32(cls, bd)
        btensors, _, bmeta, _ = run_reference(bref, bref.config, spec, prompts, False)
        bexp = dict(bexp, prompts=bmeta)
    w8a32 = None
    if fmt == "int8":
        a32t, _, a32m, a32gap = run_reference(plain, plain.config, spec, prompts, False)
        w8a32 = (a32t, a32m, a32gap)

    rope = rope_info(ref)
    scale = expected_scale(ref.config)
    all_margins = [m for p in meta for m in p["greedy_margins"]]
    vs_bf16 = logit_diffs(tensors_q, btensors)
    extra = {
        "model": "%s/model_%s" % (name, fmt),
        "weights": ("model.safetensors" if len(shards) == 1 else
                    "model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json")
                   + " (%s, published format; quantized from model_bf16)" % fmt,
        "quantization_config": QUANT_CONFIG[fmt],
        "quantized_tensors": len(qnames),
        "tensors_not_quantized": n_kept,
        "reference": ("transformers on the dequantized weights (fp32), fp32 activations" if fmt == "fp8"
                      else "transformers on the dequantized weights (fp32) with every quantized linear "
                           "but kv_b_proj run W8A8 (per-token int8 activations, kernels/qlinear.h)"),
        "prompt_seed_attempt": bexp["prompt_seed_attempt"],
        "prompts_replaced": replaced,
        "w8a8_robust_max_spread": W8A8_ROBUST if fmt == "int8" else None,
        "min_router_selection_gap": rgap,
        "router_gap_units": bexp["router_gap_units"],
        "min_greedy_margin": min(all_margins),
        "min_prompt_margin": min(p["min_prompt_margin"] for p in meta),
        "fp64_vs_fp32_max_abs_logit_diff": err64,
        "perturbed_vs_fp32_max_abs_logit_diff": errp,
        "vs_bf16_logits": vs_bf16,
        "vs_bf16_same_greedy": [a["greedy"] == b["greedy"] for a, b in zip(meta, bexp["prompts"])],
        "vs_bf16_greedy_tokens_matching": sum(
            sum(x == y for x, y in zip(a["greedy"], b["greedy"])) for a, b in zip(meta, bexp["prompts"])),
    }
    if w8a32 is not None:
        a32t, a32m, a32gap = w8a32
        save_file({k: a32t[k] for k in sorted(a32t)}, os.path.join(qd, "expected_w8a32.safetensors"),
                  metadata={"format": "pt"})
        extra["w8a32"] = {
            "what": "expected_w8a32.safetensors: the same int8 weights with fp32 activations "
                    "(dequantized weights, no activation quantization)",
            "greedy": [p["greedy"] for p in a32m],
            "greedy_margins": [p["greedy_margins"] for p in a32m],
            "min_greedy_margin": min(m for p in a32m for m in p["greedy_margins"]),
            "min_router_selection_gap": a32gap,
            "vs_bf16_logits": logit_diffs(a32t, btensors),
            "vs_bf16_greedy_tokens_matching": sum(
                sum(x == y for x, y in zip(a["greedy"], b["greedy"])) for a, b in zip(a32m, bexp["prompts"])),
            "vs_w8a8_max_abs_logit_diff": max(float((a32t[k] - tensors_q[k]).abs().max()) for k in a32t),
        }
    write_expected(qd, tensors_q, meta, scale, rope, extra)
    print("%s/%s: replaced=%s min_greedy_margin=%.3g router_gap=%.3g fp64err=%.3g vs_bf16 max=%.3g "
          "mean=%.3g argmax_differs=%d/%d greedy_match=%d/64%s"
          % (name, fmt, replaced, min(all_margins), rgap, err64, vs_bf16["max_abs"],
             vs_bf16["mean_abs"], vs_bf16["argmax_differs"], vs_bf16["positions"],
             extra["vs_bf16_greedy_tokens_matching"],
             "" if w8a32 is None else " | w8a32 vs_bf16 max=%.3g mean=%.3g greedy_match=%d/64 vs_w8a8=%.3g" % (
                 extra["w8a32"]["vs_bf16_logits"]["max_abs"], extra["w8a32"]["vs_bf16_logits"]["mean_abs"],
                 extra["w8a32"]["vs_bf16_greedy_tokens_matching"], extra["w8a32"]["vs_w8a8_max_abs_logit_diff"])))


def main():
    check_versions()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden"))
    ap.add_argument("--only", nargs="*", default=sorted(MODELS))
    ap.add_argument("--quant", nargs="*", default=sorted(QUANT_CONFIG), choices=sorted(QUANT_CONFIG),
                    help="8-bit variants to write (model_fp8/, model_int8/)")
    ap.add_argument("--quant-only", action="store_true",
                    help="keep <out>/<model>/ and model_bf16/ as they are; (re)write only the 8-bit "
                         "variants from them")
    args = ap.parse_args()
    torch.set_num_threads(1)  # same bytes on every run
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    os.makedirs(args.out, exist_ok=True)
    tmp_root = os.path.join(args.out, ".tmp_make_golden")
    for name in args.only:
        if not args.quant_only:
            build(name, MODELS[name], args.out)
        for fmt in args.quant:
            build_quant(name, MODELS[name], args.out, fmt, tmp_root)
    if os.path.exists(tmp_root):
        shutil.rmtree(tmp_root)


if __name__ == "__main__":
    main()
