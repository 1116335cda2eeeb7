#!/usr/bin/env python3
"""scripts/make_dsa_golden.py — golden data for numla's DSA lightning indexer (issue #26,
docs/sparse_attention.md), from transformers' own DeepseekV32Indexer (deepseek_v32: half-split
RoPE) and GlmMoeDsaIndexer (glm_moe_dsa: interleaved RoPE) on tiny random configs.

For each type it runs the indexer module's forward over one causal prompt of S = 40 tokens with
index_topk 16 (so queries past position 15 really drop tokens) and writes
tests/golden/dsa/<name>.safetensors (all F32; numla's reader takes no I32):
  q_proj (S, Hi*Di) = wq_b(q_resid), k_proj (S, Di) = wk(x), w_proj (S, Hi) = weights_proj(x):
      the projected inputs numla's indexer preparation starts from;
  k_norm_w, k_norm_b (Di): the LayerNorm (random, so the bias matters);
  cos_sin (S, Dr): the model's rotary table, cos of the Dr/2 frequencies then sin;
  q_ref (S, Hi, Di), k_ref (S, Di): q and k after the module's own RoPE / LayerNorm functions;
  topk (S, 16): the module's returned indices as float, future (masked) positions set to -1.
The seed is advanced until every query that drops tokens has a clear gap (> 1e-3 relative)
between its 16th and 17th score, so torch's unspecified tie order cannot matter.

Regenerate (CPU only, seconds):
    pip install torch==2.15.0 transformers==5.25.0 safetensors==0.8.0 numpy==2.4.6
    python3 scripts/make_dsa_golden.py [--out DIR]
"""

import argparse
import os
import sys

PINNED = {"torch": "2.15.0", "transformers": "5.25.0", "safetensors": "0.8.0", "numpy": "2.4.6"}

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as mv32  # noqa: E402
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as mglm  # noqa: E402

S, TOPK, HI, DI, DR, HIDDEN, QLORA = 40, 16, 16, 32, 16, 64, 32


def check_versions():
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
           "safetensors": safetensors.__version__, "numpy": np.__version__}
    bad = {k: (got[k], v) for k, v in PINNED.items() if got[k] != v}
    if bad:
        sys.exit("make_dsa_golden.py: version mismatch (got, pinned): %s" % bad)


def make(name, cfg_cls, indexer_cls, rotary_cls, rope_fn, out_dir):
    cfg = cfg_cls(hidden_size=HIDDEN, q_lora_rank=QLORA, qk_rope_head_dim=DR, qk_nope_head_dim=16,
                  v_head_dim=16, kv_lora_rank=32, num_attention_heads=2, num_hidden_layers=1,
                  index_n_heads=HI, index_head_dim=DI, index_topk=TOPK,
                  max_position_embeddings=256, n_routed_experts=4, num_experts_per_tok=2)
    for seed in range(1000, 2000):
        torch.manual_seed(seed)
        idx = indexer_cls(cfg, 0).float().eval()
        with torch.no_grad():
            for p in idx.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
        x = torch.randn(1, S, HIDDEN)
        q_resid = torch.randn(1, S, QLORA)
        pos = torch.arange(S)[None]
        rot = rotary_cls(cfg)
        cos, sin = rot(x, pos)
        mask = torch.ones(S, S, dtype=torch.bool).tril()[None]
        with torch.no_grad():
            top = idx(x, q_resid, (cos, sin), mask, pos, cache=None)[0]  # (S, topk)
            qp = idx.wq_b(q_resid)[0]
            kp = idx.wk(x)[0]
            wp = idx.weights_proj(x)[0]
            # the module's own pieces, for a per-stage diagnosis
            q = qp.view(1, S, HI, DI)
            q_rot, q_pass = q[..., :DR], q[..., DR:]
            k = idx.k_norm(kp)[None, :, None, :]
            k_rot, k_pass = k[..., :DR], k[..., DR:]
            q_rot, k_rot = rope_fn(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
            q_ref = torch.cat([q_rot, q_pass], -1)[0]
            k_ref = torch.cat([k_rot, k_pass], -1)[0, :, 0]
            sc = torch.relu(torch.einsum("shd,td->sht", q_ref.double(), k_ref.double()))
            sc = (sc * (wp.double() * HI ** -0.5)[:, :, None]).sum(1) * DI ** -0.5
        ok = True
        for s in range(TOPK, S):
            v = torch.sort(sc[s, : s + 1], descending=True).values
            if (v[TOPK - 1] - v[TOPK]) <= 1e-3 * v.abs().max():
                ok = False
                break
        if ok:
            break
    else:
        sys.exit("no seed without near ties")
    topf = top.float().clone()
    for s in range(S):
        topf[s][top[s] > s] = -1.0
    h = DR // 2
    cos_sin = torch.cat([cos[0, :, :h], sin[0, :, :h]], -1)
    tensors = {"q_proj": qp, "k_proj": kp, "w_proj": wp, "k_norm_w": idx.k_norm.weight.data,
               "k_norm_b": idx.k_norm.bias.data, "cos_sin": cos_sin, "q_ref": q_ref,
               "k_ref": k_ref, "topk": topf}
    tensors = {k: v.detach().float().contiguous() for k, v in tensors.items()}
    # no metadata: its key order in the header is not stable between runs
    safetensors.torch.save_file(tensors, os.path.join(out_dir, name + ".safetensors"))
    print("%s: seed %d" % (name, seed))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "golden", "dsa"))
    a = ap.parse_args()
    check_versions()
    os.makedirs(a.out, exist_ok=True)
    torch.set_grad_enabled(False)
    make("v32_indexer", transformers.DeepseekV32Config, mv32.DeepseekV32Indexer,
         mv32.DeepseekV32RotaryEmbedding, mv32.apply_rotary_pos_emb, a.out)
    make("glm5_indexer", transformers.GlmMoeDsaConfig, mglm.GlmMoeDsaIndexer,
         mglm.GlmMoeDsaRotaryEmbedding, mglm.apply_rotary_pos_emb_interleave, a.out)


if __name__ == "__main__":
    main()
