#!/usr/bin/env python3
"""scripts/make_kimi_model_golden.py — golden reference data for a tiny Kimi-K2-shaped model
(tests/golden/kimi/, fp32 and model_bf16/), made exactly as scripts/make_golden.py makes the
DeepSeek ones (its build(): random unit-gain weights, decisive prompts, logits, greedy
continuations, per-layer dumps), with the Kimi K2 routing: one expert group (n_group 1,
topk_group 1) of 16 experts with 4 per token, routed_scaling_factor 2.827, one dense layer, YaRN with
beta_fast = beta_slow = 1 and rope_theta 50000. transformers has no Kimi class: Kimi K2 is
DeepseekV3ForCausalLM (its config.json says so), so the reference runs that class and the saved
config.json then gets Kimi's model_type "kimi_k2".

Pinned (checked at run time; transformers is newer than make_golden.py's 5.23.0):
    torch==2.15.0 transformers==5.25.0 safetensors==0.8.0 numpy==2.4.6
    /opt/pyref/bin/python3 scripts/make_kimi_model_golden.py [--out DIR]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402

mg.PINNED = dict(mg.PINNED, transformers="5.25.0")
# Kimi K2 has one dense layer (first_k_dense_replace 1); the rest of COMMON as the DeepSeek ones.
# Three layers (one dense, two MoE) instead of four keep the search for decisive prompts short.
mg.COMMON = dict(mg.COMMON, first_k_dense_replace=1, num_hidden_layers=3)
# Shorter prompts than the DeepSeek goldens' [7, 1, 33, 100]: with one expert group, every token's k-th and (k+1)-th expert scores must be ROUTER_GAP apart for the
# choice to be decisive, and 100-token prompts make such a prompt set too rare to find.
mg.PROMPT_LENS = [7, 1, 33, 40]

KIMI = dict(
    cls="v3",
    seed=2727,
    config_style="deepseek",
    vocab_size=288,
    hidden_size=96,
    intermediate_size=64,
    moe_intermediate_size=16,
    num_attention_heads=5,  # uneven over 2-3 ranks, as the v3 golden
    num_key_value_heads=5,
    q_lora_rank=48,
    n_routed_experts=16,
    n_shared_experts=1,
    num_experts_per_tok=4,
    topk_method="noaux_tc",
    n_group=1,
    topk_group=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.827,
    scoring_func="sigmoid",
    rope_interleave=True,
    num_nextn_predict_layers=0,
    max_position_embeddings=131072,
    rope_parameters=dict(rope_type="yarn", rope_theta=50000.0, factor=32.0,
                         original_max_position_embeddings=4096, beta_fast=1.0, beta_slow=1.0,
                         mscale=1.0, mscale_all_dim=1.0),
)


def kimi_config(path):
    with open(path) as f:
        c = json.load(f)
    c["model_type"] = "kimi_k2"
    c["architectures"] = ["DeepseekV3ForCausalLM"]
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    mg.check_versions()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden"))
    args = ap.parse_args()
    mg.torch.set_num_threads(1)
    mg.torch.use_deterministic_algorithms(True)
    mg.transformers.logging.set_verbosity_error()
    mg.build("kimi", KIMI, args.out)
    d = os.path.join(args.out, "kimi")
    kimi_config(os.path.join(d, "config.json"))
    kimi_config(os.path.join(d, "model_bf16", "config.json"))


if __name__ == "__main__":
    main()
