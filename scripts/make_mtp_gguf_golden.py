#!/usr/bin/env python3
"""scripts/make_mtp_gguf_golden.py — the tiny random DeepSeek-V3 model with its
multi-token-prediction (MTP) layer (tests/golden/mtp/v3/model, made by make_mtp_golden.py) as a
GGUF file laid out the way llama.cpp's converter writes a deepseek2 model that keeps its MTP
layer (conversion/deepseek.py, conversion/glm.py's Glm4MoeLite; src/models/deepseek2.cpp reads
it):

  deepseek2.block_count            num_hidden_layers + num_nextn_predict_layers (4)
  deepseek2.nextn_predict_layers   num_nextn_predict_layers (1)
  blk.3.*                          the MTP layer's decoder layer under the usual block names
                                   (attn_k_b / attn_v_b split, experts stacked, exp_probs_b)
  blk.3.nextn.eh_proj / enorm / hnorm / shared_head_norm / shared_head_head / embed_tokens
                                   model.layers.3.eh_proj / enorm / hnorm / shared_head.norm /
                                   shared_head.head / embed_tokens (gguf-py's tensor_mapping)

Every tensor F32, the same values as the safetensors file, so numla's MTP logits on the GGUF
file must match the same reference (tests/golden/mtp/v3/expected.safetensors, copied) as on
the directory. Writes tests/golden/mtp/v3_gguf/{model.gguf, expected.json,
expected.safetensors}, and a small file of the same layout as a seed of the GGUF fuzz target
(tests/fuzz/corpus/gguf/deepseek2-nextn.gguf).

Run: /opt/venv/bin/python scripts/make_mtp_gguf_golden.py   (gguf 0.19.0, numpy 2.4.6,
safetensors 0.8.0; no torch)
"""

import json
import os
import shutil

import gguf
import numpy as np
from safetensors import safe_open

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "golden", "mtp", "v3")
OUT = os.path.join(ROOT, "tests", "golden", "mtp", "v3_gguf")

LAYER = {"input_layernorm.weight": "attn_norm.weight",
         "post_attention_layernorm.weight": "ffn_norm.weight",
         "self_attn.q_a_proj.weight": "attn_q_a.weight",
         "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
         "self_attn.q_b_proj.weight": "attn_q_b.weight",
         "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
         "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
         "self_attn.o_proj.weight": "attn_output.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
         "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
         "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
         "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
         "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
         # the MTP layer's own tensors
         "eh_proj.weight": "nextn.eh_proj.weight", "enorm.weight": "nextn.enorm.weight",
         "hnorm.weight": "nextn.hnorm.weight",
         "shared_head.norm.weight": "nextn.shared_head_norm.weight",
         "shared_head.head.weight": "nextn.shared_head_head.weight",
         "embed_tokens.weight": "nextn.embed_tokens.weight"}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}


def add_keys(w, c, vocab):
    """The deepseek2 keys of a V3 model (sigmoid routing, YaRN), as the converter writes them."""
    w.add_block_count(c["num_hidden_layers"] + c["num_nextn_predict_layers"])
    w.add_nextn_predict_layers(c["num_nextn_predict_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(1)
    rp = c["rope_parameters"]
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(c["n_routed_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_group_count(c["n_group"])
    w.add_expert_group_used_count(c["topk_group"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_norm(bool(c["norm_topk_prob"]))
    w.add_leading_dense_block_count(c["first_k_dense_replace"])
    w.add_vocab_size(vocab)
    nope, rope, v, kv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    w.add_q_lora_rank(c["q_lora_rank"])
    w.add_kv_lora_rank(kv)
    w.add_key_length(kv + rope)
    w.add_value_length(kv)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v)
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_shared_count(c["n_shared_experts"])
    w.add_expert_weights_scale(c["routed_scaling_factor"])
    w.add_rope_dimension_count(rope)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])
    w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    # no tokenizer (tokenizer.ggml.model): the model has none, its prompts are token ids
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])


def write_fuzz_seed(path):
    """A small deepseek2 file of the same layout for the GGUF fuzz target's corpus: hidden 16,
    one dense decoder layer and one MTP block (MoE: 4 experts, 2 per token), random F32."""
    c = dict(num_hidden_layers=1, num_nextn_predict_layers=1, max_position_embeddings=256,
             hidden_size=16, intermediate_size=16, num_attention_heads=2, rms_norm_eps=1e-6,
             n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
             norm_topk_prob=True, first_k_dense_replace=1, qk_nope_head_dim=4,
             qk_rope_head_dim=4, v_head_dim=4, kv_lora_rank=8, q_lora_rank=8,
             moe_intermediate_size=8, n_shared_experts=1, routed_scaling_factor=2.5,
             bos_token_id=0, eos_token_id=1,
             rope_parameters=dict(rope_theta=10000.0, factor=4.0, beta_fast=32.0, beta_slow=1.0,
                                  original_max_position_embeddings=64, mscale_all_dim=1.0))
    rng = np.random.default_rng(7)
    d, V, H, ql, kv, nope, rope, v = 16, 32, 2, 8, 8, 4, 4, 4
    E, fe = 4, 8

    def t(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    w = gguf.GGUFWriter(path, "deepseek2")
    add_keys(w, c, V)
    w.add_tensor("token_embd.weight", t(V, d))
    w.add_tensor("output_norm.weight", t(d))
    w.add_tensor("output.weight", t(V, d))
    for L in (0, 1):
        w.add_tensor("blk.%d.attn_norm.weight" % L, t(d))
        w.add_tensor("blk.%d.attn_q_a.weight" % L, t(ql, d))
        w.add_tensor("blk.%d.attn_q_a_norm.weight" % L, t(ql))
        w.add_tensor("blk.%d.attn_q_b.weight" % L, t(H * (nope + rope), ql))
        w.add_tensor("blk.%d.attn_kv_a_mqa.weight" % L, t(kv + rope, d))
        w.add_tensor("blk.%d.attn_kv_a_norm.weight" % L, t(kv))
        w.add_tensor("blk.%d.attn_k_b.weight" % L, t(H, kv, nope))
        w.add_tensor("blk.%d.attn_v_b.weight" % L, t(H, v, kv))
        w.add_tensor("blk.%d.attn_output.weight" % L, t(d, H * v))
        w.add_tensor("blk.%d.ffn_norm.weight" % L, t(d))
    for name in ("gate", "up"):
        w.add_tensor("blk.0.ffn_%s.weight" % name, t(16, d))
    w.add_tensor("blk.0.ffn_down.weight", t(d, 16))
    w.add_tensor("blk.1.ffn_gate_inp.weight", t(E, d))
    w.add_tensor("blk.1.exp_probs_b.bias", t(E))
    w.add_tensor("blk.1.ffn_gate_exps.weight", t(E, fe, d))
    w.add_tensor("blk.1.ffn_up_exps.weight", t(E, fe, d))
    w.add_tensor("blk.1.ffn_down_exps.weight", t(E, d, fe))
    w.add_tensor("blk.1.ffn_gate_shexp.weight", t(fe, d))
    w.add_tensor("blk.1.ffn_up_shexp.weight", t(fe, d))
    w.add_tensor("blk.1.ffn_down_shexp.weight", t(d, fe))
    w.add_tensor("blk.1.nextn.eh_proj.weight", t(d, 2 * d))
    w.add_tensor("blk.1.nextn.enorm.weight", t(d))
    w.add_tensor("blk.1.nextn.hnorm.weight", t(d))
    w.add_tensor("blk.1.nextn.shared_head_norm.weight", t(d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    with open(os.path.join(SRC, "model", "config.json")) as f:
        c = json.load(f)
    assert c["num_nextn_predict_layers"] == 1 and c["model_type"] == "deepseek_v3"
    with safe_open(os.path.join(SRC, "model", "model.safetensors"), "np") as f:
        sd = {k: f.get_tensor(k).astype(np.float32) for k in f.keys()}
    os.makedirs(OUT, exist_ok=True)
    w = gguf.GGUFWriter(os.path.join(OUT, "model.gguf"), "deepseek2")
    w.add_name("numla-golden-mtp")
    add_keys(w, c, sd["model.embed_tokens.weight"].shape[0])
    H, nope, v, dc = (c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"],
                      c["kv_lora_rank"])
    stacks = {}
    for hf in sorted(sd):
        x = sd[hf]
        if hf in TOP:
            w.add_tensor(TOP[hf], x)
            continue
        p = hf.split(".")
        L, rest = p[2], ".".join(p[3:])
        if rest == "self_attn.kv_b_proj.weight":
            # the converter's MLA split: k_b per head transposed (H, dc, nope), v_b (H, v, dc)
            kvb = x.reshape(H, nope + v, dc)
            w.add_tensor("blk.%s.attn_k_b.weight" % L,
                         np.ascontiguousarray(kvb[:, :nope, :].transpose(0, 2, 1)))
            w.add_tensor("blk.%s.attn_v_b.weight" % L, np.ascontiguousarray(kvb[:, nope:, :]))
        elif rest.startswith("mlp.experts."):
            stacks.setdefault("blk.%s.ffn_%s_exps.weight" % (L, p[6].split("_")[0]), {})[int(p[5])] = x
        else:
            w.add_tensor("blk.%s.%s" % (L, LAYER[rest]), x)
    for gn in sorted(stacks):
        w.add_tensor(gn, np.stack([stacks[gn][e] for e in range(len(stacks[gn]))]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(SRC, "expected.json")) as f:
        exp = json.load(f)
    exp["model"] = "tests/golden/mtp/v3_gguf/model.gguf"
    exp["source"] = "tests/golden/mtp/v3/model as a deepseek2 GGUF with nextn (F32); " \
                    "expected.safetensors copied from tests/golden/mtp/v3"
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
        f.write("\n")
    shutil.copy(os.path.join(SRC, "expected.safetensors"), os.path.join(OUT, "expected.safetensors"))
    print("wrote %s (%d bytes)" % (os.path.join(OUT, "model.gguf"),
                                     os.path.getsize(os.path.join(OUT, "model.gguf"))))
    seed = os.path.join(ROOT, "tests", "fuzz", "corpus", "gguf", "deepseek2-nextn.gguf")
    write_fuzz_seed(seed)
    print("wrote %s (%d bytes)" % (seed, os.path.getsize(seed)))


if __name__ == "__main__":
    main()
