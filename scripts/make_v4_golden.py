#!/usr/bin/env python3
"""scripts/make_v4_golden.py — whole-model golden data for DeepSeek-V4 (model_type deepseek_v4).

A tiny random model made and run by transformers' own DeepseekV4ForCausalLM (eager attention and
experts) that holds every V4 piece: a sliding-window layer, two CSA layers (compress rate 4, the
overlapping two-series compressor and the lightning indexer with index_topk 8, far below the ~60
compressed entries of the long prompts), an HCA layer (rate 128), two hash-routed MoE layers
(tid2eid) and two routed ones (sqrtsoftplus, noaux_tc correction bias), mHC with hc_mult 4 and
20 Sinkhorn iterations, the attention sinks, the grouped output projection and swiglu_limit.
Written in the layout of tests/golden/README.md ("Sparse-attention models"), one level down:

  tests/golden/v4/model_fp32/   fp32 weights, config.json, expected.{json,safetensors},
                                requests.jsonl, greedy.txt
  tests/golden/v4/model_bf16/   the projections rounded to bf16 (what transformers keeps in fp32
                                stays fp32), reference in fp32 math
  tests/golden/v4/model_fp8/    the published FP8 + FP4 form of model_bf16 (write_fp8fp4),
                                requests.jsonl, greedy.txt,
                                reference in fp32 math on its dequantized weights; transformers'
                                own FP8 loader must read it to those weights (with accelerate)

The checkpoint uses DeepSeek's own tensor names and config.json spelling, as the published
V4-Flash/Pro files do (embed.weight, layers.N.attn.wq_a.weight, layers.N.ffn.experts.E.w1.weight,
hc_head_fn, compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling); the script reloads
every directory with transformers and checks it gives back exactly the model that made the data.

Prompts: 7, 1, 140 and 250 tokens, so the sliding window (128) really slides, the HCA layer has
one (140) and one-then-two (250 + 16 greedy steps crossing position 256) compressed entries, and
the CSA layers select 8 of up to 66 compressed entries. Every prompt set is kept only if it is
decisive in both models: in every indexer call the 8th and 9th best causal scores of a query
differ by more than INDEX_GAP of the row's largest |score|, every routed layer's k-th and
(k+1)-th biased scores by ROUTER_GAP, and every greedy step's top-1/top-2 logits by GREEDY_MARGIN.
The cache path (prefill, then one token per step) is checked against a full forward without cache.

Run: /opt/venv/bin/python scripts/make_v4_golden.py [--out DIR]
(torch 2.15.0, transformers 5.25.0, safetensors 0.8.0, numpy 2.4.6; checked at run time.)
Two runs give identical bytes.
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402

import make_golden as mg  # noqa: E402

PINNED = {"torch": "2.15.0", "transformers": "5.25.0", "safetensors": "0.8.0", "numpy": "2.4.6"}
PROMPT_LENS = [7, 1, 140, 250]
N_GREEDY = 16
INDEX_GAP = 1e-5        # relative to the row's max |score|; fp32 sums differ by ~1e-7
ROUTER_GAP = 1e-4       # biased sqrtsoftplus scores
GREEDY_MARGIN = 1e-2
LM_HEAD_GAIN = 8.0
EXPERT_GAIN = 2.0       # expert / shared-expert projections: pre-activations of std ~2, so
                        # swiglu_limit 3 clips a visible fraction of them
SEED = 4004

# DeepSeek's published config.json spelling (V4-Flash-Base / V4-Pro on the Hugging Face hub):
# per-layer compress_ratios (0 sliding, 4 CSA, 128 HCA), num_hash_layers, qk_rope_head_dim,
# rope_scaling (YaRN, used by the compressed layers only) with top-level rope_theta and
# compress_rope_theta. transformers 5.25 folds these into layer_types / mlp_layer_types /
# rope_parameters {main, compress}.
CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "vocab_size": 96,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "qk_rope_head_dim": 16,
    "q_lora_rank": 32,
    "o_groups": 4,
    "o_lora_rank": 16,
    "sliding_window": 128,
    "compress_ratios": [0, 4, 128, 4],
    "compress_rope_theta": 160000.0,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 1048576,
    "index_n_heads": 16,   # a multiple of 16, as for the V3.2 golden (AVX-512 indexer variants)
    "index_head_dim": 32,
    "index_topk": 8,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "num_hash_layers": 2,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 3.0,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    "use_cache": True,
}


def check_versions():
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
           "safetensors": safetensors.__version__, "numpy": np.__version__}
    bad = {k: (got[k], v) for k, v in PINNED.items() if got[k] != v}
    if bad:
        sys.exit("make_v4_golden.py: version mismatch (installed, pinned): %r" % bad)


def make_config():
    # a deep copy: DeepseekV4Config writes rope_type / rope_theta into the rope_scaling it is given
    kw = {k: copy.deepcopy(v) for k, v in CONFIG.items()
          if k not in ("architectures", "model_type", "topk_method")}
    cfg = DeepseekV4Config(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    assert cfg.layer_types == ["sliding_attention", "compressed_sparse_attention",
                               "heavily_compressed_attention", "compressed_sparse_attention"]
    assert cfg.mlp_layer_types == ["hash_moe", "hash_moe", "moe", "moe"]
    assert cfg.qk_rope_head_dim == CONFIG["qk_rope_head_dim"]
    return cfg


def init_weights(model, gen):
    """make_golden.py's unit-gain init extended to V4's parameters: every sublayer visible in the
    logits, gates and mixing weights away from their trivial values."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=gen) * (LM_HEAD_GAIN / math.sqrt(p.shape[1])))
            elif name.endswith("self_attn.sinks"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("position_bias"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))
            elif name.endswith("weights_proj.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (4.0 / math.sqrt(p.shape[1])))
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                p.copy_(torch.randn(p.shape, generator=gen) * (EXPERT_GAIN / math.sqrt(p.shape[2])))
            elif ".shared_experts." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * (EXPERT_GAIN / math.sqrt(p.shape[1])))
            elif name.endswith("_hc.fn") or name.endswith("hc_head.hc_fn"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            elif name.endswith("_hc.base") or name.endswith("hc_head.hc_base"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("_hc.scale") or name.endswith("hc_head.hc_scale"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError("no init rule for %s %s" % (name, tuple(p.shape)))
        E, K = CONFIG["n_routed_experts"], CONFIG["num_experts_per_tok"]
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)
            elif name.endswith("tid2eid"):
                # K distinct experts per token id, in no particular order
                rows = [torch.randperm(E, generator=gen)[:K] for _ in range(b.shape[0])]
                b.copy_(torch.stack(rows))


# transformers' state-dict names -> DeepSeek's checkpoint names (the inverse of transformers'
# conversion_mapping "deepseek_v4"; the experts are split per expert into w1 / w3 / w2).
RENAMES = [
    (".self_attn.compressor.indexer.scorer.weights_proj.", ".attn.indexer.weights_proj."),
    (".self_attn.compressor.indexer.q_b_proj.", ".attn.indexer.wq_b."),
    (".self_attn.compressor.indexer.", ".attn.indexer.compressor."),
    (".self_attn.", ".attn."),
    (".mlp.", ".ffn."),
    (".input_layernorm.", ".attn_norm."),
    (".post_attention_layernorm.", ".ffn_norm."),
    (".attn_hc.fn", ".hc_attn_fn"), (".attn_hc.base", ".hc_attn_base"),
    (".attn_hc.scale", ".hc_attn_scale"),
    (".ffn_hc.fn", ".hc_ffn_fn"), (".ffn_hc.base", ".hc_ffn_base"),
    (".ffn_hc.scale", ".hc_ffn_scale"),
    (".sinks", ".attn_sink"),
    (".kv_norm.", ".norm."),
    (".position_bias", ".ape"),
    (".q_a_proj.", ".wq_a."), (".q_b_proj.", ".wq_b."), (".kv_proj.", ".wkv."),
    (".gate_proj.", ".wgate."), (".o_a_proj.", ".wo_a."), (".o_b_proj.", ".wo_b."),
    (".q_a_norm.", ".q_norm."),
    (".gate.e_score_correction_bias", ".gate.bias"),
]
TOP = {"model.embed_tokens.weight": "embed.weight", "lm_head.weight": "head.weight",
       "model.norm.weight": "norm.weight", "model.hc_head.hc_fn": "hc_head_fn",
       "model.hc_head.hc_base": "hc_head_base", "model.hc_head.hc_scale": "hc_head_scale"}
SHARED = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}


def deepseek_names(sd):
    """DeepSeek-named checkpoint tensors from a DeepseekV4ForCausalLM state dict."""
    out = {}
    inter = CONFIG["moe_intermediate_size"]
    for k, v in sd.items():
        if "rotary_emb" in k:
            continue
        if k in TOP:
            out[TOP[k]] = v
            continue
        assert k.startswith("model.layers."), k
        n = k[len("model."):]
        if n.endswith("mlp.experts.gate_up_proj"):
            pre = n[: -len("mlp.experts.gate_up_proj")] + "ffn.experts."
            for e in range(v.shape[0]):
                out[pre + "%d.w1.weight" % e] = v[e, :inter]
                out[pre + "%d.w3.weight" % e] = v[e, inter:]
            continue
        if n.endswith("mlp.experts.down_proj"):
            pre = n[: -len("mlp.experts.down_proj")] + "ffn.experts."
            for e in range(v.shape[0]):
                out[pre + "%d.w2.weight" % e] = v[e]
            continue
        if ".mlp.shared_experts." in n:
            a, b = n.split(".mlp.shared_experts.")
            proj = b.split(".")[0]
            out["%s.ffn.shared_experts.%s.weight" % (a, SHARED[proj])] = v
            continue
        n = "." + n
        for a, b in RENAMES:
            n = n.replace(a, b)
        out[n[1:]] = v
    return {k: v.contiguous() for k, v in out.items()}


def write_dir(model, d, keep32):
    """config.json (DeepSeek's spelling) and model.safetensors (DeepSeek's names); `keep32`:
    which tensors stay fp32 in a bf16 directory (None: all fp32)."""
    os.makedirs(d)
    cfg = dict(CONFIG)
    cfg["torch_dtype"] = "float32" if keep32 is None else "bfloat16"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    t = deepseek_names(model.state_dict())
    if keep32 is not None:
        t = {k: (v if v.dtype != torch.float32 or keep32(k) else v.to(torch.bfloat16))
             for k, v in t.items()}
    save_file({k: t[k] for k in sorted(t)}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})


# Kept fp32 in the bf16 directory: what transformers 5.25 keeps in fp32 in memory
# (_keep_in_fp32_modules_strict: mHC, sinks, compressor position biases, correction bias, norms).
def bf16_keeps_fp32(name):
    return (name.startswith("hc_head_") or ".hc_attn_" in name or ".hc_ffn_" in name or
            name.endswith("attn_sink") or name.endswith(".ape") or name.endswith("gate.bias") or
            name.endswith("norm.weight"))


# ---- the published FP8 + FP4 form (docs/quantization.md "DeepSeek-V4's FP4 experts") -----------
# FP8 (e4m3, one E8M0 scale per 128 x 128 block, `P.scale`): the attention projections, the
# indexer's wq_b and the shared expert; FP4 (e2m1 pairs in I8, one E8M0 scale per 32 of a row):
# the routed experts; the rest as in model_bf16 (embeddings, head, router, norms, the compressors'
# and the indexer's own projections, mHC, sinks, ape).
FP8_SUFFIXES = (".attn.wq_a.weight", ".attn.wq_b.weight", ".attn.wkv.weight", ".attn.wo_a.weight",
                ".attn.wo_b.weight", ".attn.indexer.wq_b.weight", ".shared_experts.w1.weight",
                ".shared_experts.w2.weight", ".shared_experts.w3.weight")
QUANT_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def is_fp4(name):
    return ".ffn.experts." in name and name.endswith(".weight")


def e8m0_exponent(amax, top):
    """The smallest power-of-two scale 2^s with amax / 2^s <= top, as its E8M0 byte s + 127
    (a zero block: s = 0)."""
    s = torch.where(amax > 0, torch.ceil(torch.log2(amax / top)), torch.zeros_like(amax))
    return (s + 127).to(torch.uint8)


def fp8_ue8m0(w):
    """(codes F8_E4M3, scale bytes) of an (n, k) weight: 128 x 128 blocks."""
    n, k = w.shape
    bn, bk = -(-n // 128), -(-k // 128)
    pad = torch.zeros(bn * 128, bk * 128)
    pad[:n, :k] = w.abs()
    e = e8m0_exponent(pad.view(bn, 128, bk, 128).amax(dim=(1, 3)), 448.0)
    scale = torch.exp2(e.float() - 127).repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return (w / scale).to(torch.float8_e4m3fn), e


def fp4_ue8m0(w):
    """(packed I8 (n, k/2), scale bytes (n, k/32)) of an (n, k) weight: e2m1 codes, the nearest
    value of w / 2^s (the first code on a tie), element 2j in byte j's low nibble."""
    n, k = w.shape
    g = w.view(n, k // 32, 32)
    e = e8m0_exponent(g.abs().amax(dim=2), 6.0)
    x = g / torch.exp2(e.float() - 127).unsqueeze(-1)
    codes = (x.unsqueeze(-1) - E2M1).abs().argmin(dim=-1).to(torch.uint8).view(n, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.view(torch.int8), e


def published_dequant(name, t, scale):
    """The published formula, apart from the quantizer above: FP8 code x 2^(s - 127) of its
    128 x 128 block; FP4 e2m1[nibble] x 2^(s - 127) of its 32 (low nibble first)."""
    sc = torch.exp2(scale.view(torch.uint8).float() - 127)
    if t.dtype == torch.int8:
        u = t.view(torch.uint8).long()
        v = torch.stack([E2M1[u & 15], E2M1[u >> 4]], dim=-1).reshape(t.shape[0], -1)
        return v * sc.repeat_interleave(32, 1)
    n, k = t.shape
    return t.float() * sc.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]


def write_fp8fp4(bd, base, tmp):
    """model_fp8/ from model_bf16/'s weights, and a dequantized fp32 copy for the reference."""
    src = {}
    with safe_open(os.path.join(bd, "model.safetensors"), "pt") as f:
        for k in f.keys():
            src[k] = f.get_tensor(k)
    out, deq = {}, {}
    for name, t in sorted(src.items()):
        if name.endswith(FP8_SUFFIXES) or is_fp4(name):
            w = t.float()
            q, e = fp4_ue8m0(w) if is_fp4(name) else fp8_ue8m0(w)
            sname = name[: -len(".weight")] + ".scale"
            out[name], out[sname] = q, e.view(torch.float8_e8m0fnu)
            deq[name] = published_dequant(name, q, out[sname])
            # every weight within half a step of its code's grid (a wrong packing is not)
            step = torch.exp2(e.float() - 127)
            step = (step.repeat_interleave(32, 1) if is_fp4(name) else
                    step.repeat_interleave(128, 0)[: w.shape[0]].repeat_interleave(128, 1)[:, : w.shape[1]])
            assert float(((deq[name] - w).abs() / step).max()) <= (1.0 if is_fp4(name) else 16.0), name
        else:
            out[name] = t
            deq[name] = t.float() if t.is_floating_point() else t
    qd = os.path.join(base, "model_fp8")
    os.makedirs(qd)
    cfg = dict(CONFIG)
    cfg["torch_dtype"] = "bfloat16"
    cfg["quantization_config"] = dict(QUANT_CONFIG)
    cfg["expert_dtype"] = "fp4"
    with open(os.path.join(qd, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file({k: out[k].contiguous() for k in sorted(out)}, os.path.join(qd, "model.safetensors"),
              metadata={"format": "pt"})
    dd = os.path.join(tmp, "v4_fp8_deq")
    if os.path.exists(dd):
        shutil.rmtree(dd)
    os.makedirs(dd)
    dcfg = dict(CONFIG)
    dcfg["torch_dtype"] = "float32"
    with open(os.path.join(dd, "config.json"), "w") as f:
        json.dump(dcfg, f, indent=2, sort_keys=True)
    save_file({k: v.contiguous() for k, v in sorted(deq.items())}, os.path.join(dd, "model.safetensors"),
              metadata={"format": "pt"})
    n8 = sum(1 for k in out if k.endswith(".scale") and not is_fp4(k[: -len(".scale")] + ".weight"))
    n4 = sum(1 for k in out if k.endswith(".scale")) - n8
    return qd, dd, n8, n4


def check_fp8_load(qd, qref):
    """transformers' own FP8/FP4 loader (FineGrainedFP8Config, dequantize=True: the CPU path;
    it needs the accelerate package) must read model_fp8/ to exactly the weights of the
    reference. None when accelerate is missing (the check is skipped, and said so)."""
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("make_v4_golden.py: accelerate not installed: model_fp8/ not loaded by transformers")
        return None
    from transformers import FineGrainedFP8Config
    m = DeepseekV4ForCausalLM.from_pretrained(
        qd, quantization_config=FineGrainedFP8Config(dequantize=True, scale_fmt="ue8m0", expert_dtype="fp4"),
        dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    same_model(qref, m)
    return True


def load_fp32(d):
    m = DeepseekV4ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                              experts_implementation="eager")
    m.eval()
    return m


def same_model(a, b, want=None):
    """b's state equals a's (or want(name, tensor) of a's)."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb), set(sa) ^ set(sb)
    for k, v in sa.items():
        w = v if want is None else want(k, v)
        assert torch.equal(sb[k], w), ("reloaded model differs", k)


class IndexTap:
    """Score rows of every lightning-indexer call: while a DeepseekV4Indexer runs, its one
    Tensor.topk call is the selection over the causal scores (future entries -inf)."""

    def __init__(self, model):
        self.rows = []
        self.active = False
        self.hooks = []
        for layer in model.model.layers:
            comp = layer.self_attn.compressor
            ix = getattr(comp, "indexer", None) if comp is not None else None
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

    def stats(self, topk):
        """(smallest (k-th - (k+1)-th) / max|score| over every query choosing among more than k
        causal entries, number of such queries)."""
        worst, n = float("inf"), 0
        for s in self.rows:
            if s.numel() == 0:
                continue
            for row in s.reshape(-1, s.shape[-1]):
                v = row[row > -1e30]
                if v.numel() <= topk:
                    continue
                n += 1
                srt = v.sort(descending=True).values
                scale = float(v.abs().max())
                worst = min(worst, float(srt[topk - 1] - srt[topk]) / max(scale, 1e-30))
        return worst, n


class ClampTap:
    """Fraction of routed-expert gate pre-activations above swiglu_limit (the clamp is used)."""

    def __init__(self, model):
        self.hit = self.total = 0
        self.saved = {}
        for layer in model.model.layers:
            ex = layer.mlp.experts
            orig = ex._apply_gate
            self.saved[ex] = orig

            def wrapped(gate_up, _orig=orig, _ex=ex):
                g = gate_up.chunk(2, dim=-1)[0]
                self.hit += int((g > _ex.limit).sum())
                self.total += g.numel()
                return _orig(gate_up)

            ex._apply_gate = wrapped

    def close(self):
        for ex, orig in self.saved.items():
            ex._apply_gate = orig


def router_gap(model, logits_by_layer):
    """Smallest k-th minus (k+1)-th biased sqrtsoftplus score over the routed (non-hash) layers."""
    K = CONFIG["num_experts_per_tok"]
    gap = float("inf")
    for j, calls in logits_by_layer.items():
        bias = model.model.layers[j].mlp.gate.e_score_correction_bias
        for lg in calls:
            s = F.softplus(lg.float()).sqrt() + bias
            v = s.sort(-1, descending=True).values
            gap = min(gap, float((v[:, K - 1] - v[:, K]).min()))
    return gap


def run_reference(model, prompts):
    """Logits at every prompt position and greedy continuations (through the cache), checked
    against a full forward without cache; the smallest router and indexer gaps seen."""
    cfg = model.config
    routed = [j for j, t in enumerate(cfg.mlp_layer_types) if t == "moe"]
    taps = {j: mg.RouterTap(model.model.layers[j].mlp.gate) for j in routed}
    itap = IndexTap(model)
    ctap = ClampTap(model)
    tensors, meta = {}, []
    try:
        with torch.no_grad():
            for i, toks in enumerate(prompts):
                cache = DynamicCache(config=cfg)
                out = model(input_ids=torch.tensor([toks]), cache=cache, use_cache=True)
                logits = out.logits[0].float().contiguous()
                tensors["prompt%d.logits" % i] = logits
                g_toks, g_margins, g_logits = mg.greedy(model, toks, N_GREEDY)
                full = model(input_ids=torch.tensor([toks + g_toks[:-1]]), use_cache=False).logits[0]
                diff = float((full[len(toks) - 1:] - g_logits).abs().max())
                assert diff < 1e-3, ("cache path disagrees with full forward", diff)
                diff_p = float((full[: len(toks)] - logits).abs().max())
                assert diff_p < 1e-3, ("prefill with cache disagrees with full forward", diff_p)
                top2 = torch.topk(logits, 2, dim=-1).values
                meta.append({"tokens": toks, "greedy": g_toks, "greedy_margins": g_margins,
                             "min_prompt_margin": float((top2[:, 0] - top2[:, 1]).min()),
                             "cache_vs_full_max_abs_diff": max(diff, diff_p)})
        rgap = router_gap(model, {j: [c[0] for c in t.calls] for j, t in taps.items()})
        igap, nsel = itap.stats(cfg.index_topk)
        clamp = ctap.hit / max(ctap.total, 1)
    finally:
        ctap.close()
        itap.close()
        for t in taps.values():
            t.close()
    return tensors, meta, rgap, igap, nsel, clamp


def decisive(run):
    _, meta, rgap, igap, _, _ = run
    return (rgap >= ROUTER_GAP and igap >= INDEX_GAP and
            min(m for p in meta for m in p["greedy_margins"]) >= GREEDY_MARGIN)


def find_prompts(models):
    vocab = CONFIG["vocab_size"]
    for attempt in range(400):
        pg = torch.Generator().manual_seed(SEED * 1000 + attempt)
        prompts = [torch.randint(2, vocab, (n,), generator=pg).tolist() for n in PROMPT_LENS]
        runs = {}
        for k, m in models.items():
            runs[k] = run_reference(m, prompts)
            if not decisive(runs[k]):
                break
        else:
            return prompts, runs, attempt
    sys.exit("make_v4_golden.py: no decisive prompt set found")


def write_expected(d, model, run, attempt):
    tensors, meta, rgap, igap, nsel, clamp = run
    save_file({k: tensors[k] for k in sorted(tensors)}, os.path.join(d, "expected.safetensors"),
              metadata={"format": "pt"})
    rot = model.model.rotary_emb
    doc = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "softmax_scale": float(model.model.layers[0].self_attn.scaling),
        # sliding layers' RoPE (theta rope_theta, no scaling) ...
        "rope_attention_scaling": float(rot.main_attention_scaling),
        "rope_inv_freq": [float(x) for x in rot.main_inv_freq],
        # ... and the compressed layers' (compress_rope_theta, YaRN, attention factor 1)
        "compress_rope_attention_scaling": float(rot.compress_attention_scaling),
        "compress_rope_inv_freq": [float(x) for x in rot.compress_inv_freq],
        "n_greedy": N_GREEDY,
        "prompts": meta,
        "min_router_gap": rgap,
        "min_index_gap_rel": igap,
        "index_selecting_queries": nsel,
        "swiglu_clamped_fraction": clamp,
        "prompt_attempt": attempt,
        "index_topk": CONFIG["index_topk"],
    }
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def ablations(d, toks):
    """How far each V4 piece moves the logits of `toks` (max |change| over positions and vocab):
    each must be far above the harness's 2e-3, or the golden would not notice it missing."""

    def logits(m):
        with torch.no_grad():
            return m(input_ids=torch.tensor([toks]), use_cache=False).logits[0]

    base = logits(load_fp32(d))

    def sinks(m):
        for l in m.model.layers:
            l.self_attn.sinks.data.fill_(-1e9)

    def clamp(m):
        for l in m.model.layers:
            l.mlp.experts.limit = l.mlp.shared_experts.limit = 1e9

    def dense_csa(m):
        for l in m.model.layers:
            ix = getattr(l.self_attn.compressor, "indexer", None)
            if ix is not None:
                ix.index_topk = 1 << 20

    def no_hca(m):
        for l in m.model.layers:
            if l.self_attn.layer_type == "heavily_compressed_attention":
                l.self_attn.compressor = None

    def sinkhorn1(m):
        for l in m.model.layers:
            l.attn_hc.hc_sinkhorn_iters = l.ffn_hc.hc_sinkhorn_iters = 1

    def hash_flip(m):
        for l in m.model.layers:
            if l.mlp.is_hash:
                l.mlp.gate.tid2eid.data = l.mlp.gate.tid2eid.data.flip(0)

    out = {}
    for name, f in (("no_sinks", sinks), ("no_swiglu_clamp", clamp), ("csa_dense", dense_csa),
                    ("hca_without_compressed", no_hca), ("sinkhorn_one_iteration", sinkhorn1),
                    ("hash_table_flipped", hash_flip)):
        m = load_fp32(d)
        f(m)
        out[name] = float((logits(m) - base).abs().max())
        assert out[name] > 0.05, ("golden blind to", name, out[name])
    return out


def write_requests(d):
    """requests.jsonl: each prompt as a `numla run` request (greedy, N_GREEDY tokens, ignore_eos);
    greedy.txt: "id tok,tok,..." the reference's greedy tokens."""
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    with open(os.path.join(d, "requests.jsonl"), "w") as f, \
            open(os.path.join(d, "greedy.txt"), "w") as g:
        for i, p in enumerate(exp["prompts"]):
            f.write(json.dumps({"id": "p%d" % i, "prompt_tokens": p["tokens"],
                                "max_tokens": N_GREEDY, "temperature": 0,
                                "ignore_eos": True}) + "\n")
            g.write("p%d %s\n" % (i, ",".join(str(t) for t in p["greedy"])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden"))
    ap.add_argument("--tmp", default="/tmp/numla_v4_golden")
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    check_versions()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg = make_config()
    torch.manual_seed(SEED)
    model = DeepseekV4ForCausalLM(cfg)
    model.eval()
    init_weights(model, torch.Generator().manual_seed(SEED))

    base = os.path.join(os.path.abspath(a.out), "v4")
    if os.path.exists(base):
        shutil.rmtree(base)
    fd, bd = os.path.join(base, "model_fp32"), os.path.join(base, "model_bf16")
    write_dir(model, fd, None)
    ref = load_fp32(fd)
    same_model(model, ref)
    write_dir(ref, bd, bf16_keeps_fp32)
    bref = load_fp32(bd)
    bnames = deepseek_names(ref.state_dict())

    def rounded(k, v):
        if v.dtype != torch.float32 or "rotary_emb" in k:
            return v
        # which DeepSeek tensor(s) hold this parameter decides whether it was rounded
        probe = deepseek_names({k: v})
        keep = all(bf16_keeps_fp32(n) for n in probe)
        return v if keep else v.to(torch.bfloat16).float()

    same_model(ref, bref, rounded)
    assert bnames.keys() == deepseek_names(bref.state_dict()).keys()

    prompts, runs, attempt = find_prompts({"fp32": ref, "bf16": bref})
    for k, d, m in (("fp32", fd, ref), ("bf16", bd, bref)):
        write_expected(d, m, runs[k], attempt)

    # model_fp8/: the same prompts if decisive there too, else its own
    qd, dd, n8, n4 = write_fp8fp4(bd, base, a.tmp)
    qref = load_fp32(dd)
    loaded_by_transformers = check_fp8_load(qd, qref)
    qrun = run_reference(qref, prompts)
    qattempt = attempt
    if not decisive(qrun):
        qprompts, qruns, qattempt = find_prompts({"fp8": qref})
        qrun = qruns["fp8"]
    write_expected(qd, qref, qrun, qattempt)
    with open(os.path.join(qd, "expected.json")) as f:
        doc = json.load(f)
    doc["fp8_tensors"], doc["fp4_tensors"] = n8, n4
    doc["transformers_dequantize_load_equal"] = loaded_by_transformers
    doc["vs_bf16_max_abs_logit_diff_same_prompts"] = (
        max(float((qrun[0]["prompt%d.logits" % i] - runs["bf16"][0]["prompt%d.logits" % i]).abs().max())
            for i in range(len(prompts))) if qattempt == attempt else None)
    with open(os.path.join(qd, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    write_requests(fd)
    write_requests(qd)
    abl = ablations(fd, prompts[-1])
    with open(os.path.join(fd, "expected.json")) as f:
        doc = json.load(f)
    doc["ablation_max_abs_logit_change_last_prompt"] = abl
    with open(os.path.join(fd, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for root, _, files in os.walk(base):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)
    print("v4 fp32 ablations (max |logit change|, last prompt): %s" % (
        ", ".join("%s %.3g" % kv for kv in abl.items())))
    runs["fp8"] = qrun
    print("v4 fp8: %d fp8 tensors, %d fp4 tensors, prompt attempt %d" % (n8, n4, qattempt))
    for k, r in runs.items():
        print("v4 %s: prompt attempt %d, index gap %.2e over %d selecting queries, router gap "
              "%.2e, min greedy margin %.3g, swiglu clamped %.1f%%" % (
                  k, attempt, r[3], r[4], r[2], mg.min_margin(r[1]), 100 * r[5]))


if __name__ == "__main__":
    main()
