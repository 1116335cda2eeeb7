#!/usr/bin/env python3
"""scripts/make_mtp_golden.py — golden data for the multi-token-prediction (MTP) layer
(docs/speculative.md): its draft logits against a reference written here from DeepSeek-V3's
published description, since transformers does not run the layer.

The layer (DeepSeek-V3 technical report §2.2, depth 1): at position i, with h_i the main model's
final hidden state (after model.norm) and t_{i+1} the next token,

    h'_i = eh_proj([enorm(emb(t_{i+1})) ; hnorm(h_i)])          (2·hidden -> hidden, no bias)
    h''_i = one decoder block (layer index num_hidden_layers, causal over the MTP rows 0..i)
    logits_i = lm_head(shared_head.norm(h''_i))                 (the main model's lm_head)

predicting t_{i+2}. The decoder block is a standard decoder layer of the model's family, run
here as the single layer of a one-layer model of the same transformers class (its final norm set
to shared_head.norm, its lm_head the main one), fed h' as inputs_embeds at positions 0..i. A
draft chained past the known tokens uses the block output h''_i (before shared_head.norm) as the
hidden state of position i + 1: `chain` rows check that.

Writes tests/golden/mtp/<name>/:
  expected.json           prompts (token ids), chain_tokens, the model directory used
  expected.safetensors    mtp_logits_<p> (n_p - 1, V): the MTP logits at positions 0..n_p-2 of
                          prompt p; chain_logits_<p> (1, V): position n_p - 1 with token
                          chain_tokens[p] and hidden h''_{n_p - 2}
  model/                  (tiny random models only) the checkpoint, MTP layer included

Models: "kjv" (models/kjv-v3, the trained model with its trained MTP layer, bf16 weights
computed in fp32), "v3" and "v32" (tiny random DeepSeek-V3 / V3.2 models, fp32, made here with
make_golden.py's and make_dsa_model_golden.py's init rules; the V3.2 prompts stay under
index_topk, so its MTP block's indexer selects every row).

Run: /opt/venv/bin/python scripts/make_mtp_golden.py [--only kjv|v3|v32]
(torch 2.15.0, transformers 5.25.0, safetensors 0.8.0.)
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (  # noqa: E402
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MTP_KEYS = ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight",
            "shared_head.head.weight", "embed_tokens.weight")

TINY_COMMON = dict(
    hidden_act="silu", hidden_size=96, intermediate_size=64, moe_intermediate_size=16,
    kv_lora_rank=64, qk_rope_head_dim=16, rms_norm_eps=1e-6, attention_bias=False,
    attention_dropout=0.0, tie_word_embeddings=False, initializer_range=0.02, use_cache=True,
    pad_token_id=None, bos_token_id=0, eos_token_id=1, n_routed_experts=12, n_shared_experts=1,
    num_experts_per_tok=3, norm_topk_prob=True, routed_scaling_factor=2.5, vocab_size=288,
    num_attention_heads=5, num_key_value_heads=5, q_lora_rank=48, qk_nope_head_dim=32,
    v_head_dim=32, n_group=4, topk_group=2, max_position_embeddings=163840,
    rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0,
                         original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0,
                         mscale=1.0, mscale_all_dim=1.0),
)
TINY = {
    # 3 main layers (the first dense) + the MTP layer
    "v3": dict(cls=DeepseekV3ForCausalLM, config_cls=DeepseekV3Config, seed=4303, layers=3,
               extra=dict(first_k_dense_replace=1, moe_layer_freq=1, topk_method="noaux_tc",
                          scoring_func="sigmoid", rope_interleave=True)),
    "v32": dict(cls=DeepseekV32ForCausalLM, config_cls=DeepseekV32Config, seed=4332, layers=3,
                extra=dict(index_topk=16, index_n_heads=16, index_head_dim=32),
                layer_lists=dict(mlp_layer_types=("dense", "sparse"))),
}
PROMPT_LEN = {"kjv": [14, 9], "v3": [11, 6], "v32": [12, 5]}


def tiny_config(spec, layers, mtp_block):
    kw = dict(TINY_COMMON)
    kw.update(spec["extra"])
    kw["num_hidden_layers"] = layers
    for k, (first, rest) in spec.get("layer_lists", {}).items():
        kw[k] = [rest] * layers if mtp_block else [first] + [rest] * (layers - 1)
    if spec["cls"] is DeepseekV3ForCausalLM:
        kw["first_k_dense_replace"] = 0 if mtp_block else spec["extra"]["first_k_dense_replace"]
    cfg = spec["config_cls"](**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def init_tiny(model, gen):
    """make_golden.py's unit-gain init (norm weights random in [0.5, 1.5), so a swapped or
    missing norm shows; the indexer's k_norm bias random too)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("k_norm.bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=gen) * (8.0 / math.sqrt(p.shape[1])))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[2]))
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            elif p.ndim == 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            else:
                raise RuntimeError("no init rule for %s" % name)
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)


def make_tiny(name, spec, out_dir):
    """A random model of layers + 1 decoder layers saved as a `layers`-layer checkpoint whose
    layer `layers` is the MTP block, plus the MTP tensors (norms random, eh_proj unit gain)."""
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    n = spec["layers"]
    full_cfg = tiny_config(spec, n + 1, False)
    if "layer_lists" in spec:  # the MTP block is an MoE ("sparse") layer
        for k, (first, rest) in spec["layer_lists"].items():
            setattr(full_cfg, k, [first] + [rest] * n)
    model = spec["cls"](full_cfg)
    init_tiny(model, gen)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        sd = load_file(os.path.join(tmp, "model.safetensors"))
    h = full_cfg.hidden_size
    p = "model.layers.%d." % n
    sd[p + "enorm.weight"] = torch.rand(h, generator=gen) + 0.5
    sd[p + "hnorm.weight"] = torch.rand(h, generator=gen) + 0.5
    sd[p + "eh_proj.weight"] = torch.randn(h, 2 * h, generator=gen) / math.sqrt(2 * h)
    sd[p + "shared_head.norm.weight"] = torch.rand(h, generator=gen) + 0.5
    sd[p + "shared_head.head.weight"] = sd["lm_head.weight"].clone()
    sd[p + "embed_tokens.weight"] = sd["model.embed_tokens.weight"].clone()
    os.makedirs(out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sorted(sd.items())},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = tiny_config(spec, n, False)
    c = cfg.to_dict()
    c["num_nextn_predict_layers"] = 1
    c["architectures"] = [spec["cls"].__name__]
    c.pop("_attn_implementation", None)
    c.pop("_experts_implementation", None)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    return out_dir


def load_main(cls, d):
    m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                            experts_implementation="eager")
    m.eval()
    return m


class MTPRef:
    """The MTP layer of the checkpoint in d: the three norms and eh_proj by hand, the block as
    a one-layer model of the main model's class (its model.norm = shared_head.norm)."""

    def __init__(self, cls, d, main_cfg):
        n = main_cfg.num_hidden_layers
        p = "model.layers.%d." % n
        sd = load_file(os.path.join(d, "model.safetensors"))
        f32 = {k: v.float() for k, v in sd.items()}
        self.enorm = f32[p + "enorm.weight"]
        self.hnorm = f32[p + "hnorm.weight"]
        self.eh = f32[p + "eh_proj.weight"]
        self.eps = main_cfg.rms_norm_eps
        one = {}
        for k, v in f32.items():
            if k.startswith(p) and not any(k == p + s for s in MTP_KEYS):
                one["model.layers.0." + k[len(p):]] = v
        one["model.norm.weight"] = f32[p + "shared_head.norm.weight"]
        one["model.embed_tokens.weight"] = f32["model.embed_tokens.weight"]
        one["lm_head.weight"] = f32["lm_head.weight"]
        c = main_cfg.to_dict()
        c["num_hidden_layers"] = 1
        c["num_nextn_predict_layers"] = 0
        for k in ("mlp_layer_types",):
            if k in c and c[k] is not None:
                c[k] = ["sparse"]
        for k in ("layer_types", "indexer_types"):
            if k in c and c[k] is not None:
                c[k] = c[k][:1]
        if c.get("model_type") == "deepseek_v3":
            c["first_k_dense_replace"] = 0
        with tempfile.TemporaryDirectory() as tmp:
            save_file(one, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(c, f)
            self.block = load_main(cls, tmp)
        self.main_lm_head = f32["lm_head.weight"]
        self.emb = f32["model.embed_tokens.weight"]

    def rms(self, x, w):
        x64 = x.double()
        return (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + self.eps)).float() * w

    @torch.no_grad()
    def run(self, hidden, next_ids):
        """hidden (T, H) normed main states (or chained block outputs), next_ids (T): logits
        (T, V) and the block outputs h'' (T, H)."""
        x = torch.cat([self.rms(self.emb[next_ids], self.enorm), self.rms(hidden, self.hnorm)], -1)
        x = x @ self.eh.T
        got = {}
        hk = self.block.model.layers[0].register_forward_hook(
            lambda mod, inp, out: got.__setitem__("h", out[0] if isinstance(out, tuple) else out))
        T = x.shape[0]
        out = self.block(inputs_embeds=x[None], position_ids=torch.arange(T)[None])
        hk.remove()
        # the one-layer model's logits: lm_head(shared_head.norm(h''))
        return out.logits[0].float(), got["h"][0].float()


def prompts_for(name, vocab, lens, gen):
    if name == "kjv":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(ROOT, "models/kjv-v3/tokenizer.json"))
        text = open(os.path.join(ROOT, "models/kjv-v3/heldout.txt")).read()
        ids = tok.encode(text, add_special_tokens=False).ids
        return [[0] + ids[1000 * (i + 1):1000 * (i + 1) + n - 1] for i, n in enumerate(lens)]
    return [[0] + torch.randint(3, vocab, (n - 1,), generator=gen).tolist() for n in lens]


def build(name, out_root):
    out = os.path.join(out_root, name)
    if name == "kjv":
        cls, mdir, rel = DeepseekV3ForCausalLM, os.path.join(ROOT, "models/kjv-v3"), "models/kjv-v3"
    else:
        spec = TINY[name]
        cls = spec["cls"]
        mdir = make_tiny(name, spec, os.path.join(out, "model"))
        rel = "tests/golden/mtp/%s/model" % name
    main = load_main(cls, mdir)
    ref = MTPRef(cls, mdir, main.config)
    gen = torch.Generator().manual_seed(77)
    prompts = prompts_for(name, main.config.vocab_size, PROMPT_LEN[name], gen)
    tensors, chain_tokens, stats = {}, [], []
    for i, p in enumerate(prompts):
        ids = torch.tensor([p])
        with torch.no_grad():
            h = main.model(input_ids=ids).last_hidden_state[0].float()  # after model.norm
        n = len(p)
        lg, hb = ref.run(h[:n - 1], ids[0, 1:])
        tensors["mtp_logits_%d" % i] = lg.contiguous()
        # chain: position n-1 takes the block output of n-2 and the draft token of row n-2
        ct = int(lg[-1].argmax())
        lg2, _ = ref.run(torch.cat([h[:n - 1], hb[n - 2:n - 1]]),
                         torch.cat([ids[0, 1:], torch.tensor([ct])]))
        # the rows before the chained one do not see it (causal)
        assert torch.allclose(lg2[:n - 1], lg, atol=1e-4), "chain changed earlier rows"
        tensors["chain_logits_%d" % i] = lg2[n - 1:].contiguous()
        chain_tokens.append(ct)
        if name == "kjv":
            hit = int((lg.argmax(-1)[:n - 2] == ids[0, 2:]).sum())
            stats.append("prompt %d: draft top-1 = token after next at %d of %d positions"
                         % (i, hit, n - 2))
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "expected.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"model": rel, "prompts": prompts, "chain_tokens": chain_tokens,
                   "vocab_size": main.config.vocab_size}, f, indent=1)
        f.write("\n")
    print("%s: %d prompts -> %s %s" % (name, len(prompts), out, "; ".join(stats)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/golden/mtp"))
    ap.add_argument("--only", choices=["kjv", "v3", "v32"])
    a = ap.parse_args()
    torch.set_num_threads(2)
    for name in ("kjv", "v3", "v32"):
        if a.only in (None, name):
            if name != "kjv" and os.path.isdir(os.path.join(a.out, name, "model")):
                shutil.rmtree(os.path.join(a.out, name, "model"))
            build(name, a.out)


if __name__ == "__main__":
    main()
