#!/usr/bin/env python3
"""scripts/make_v4_mtp_golden.py — golden data for DeepSeek-V4's multi-token-prediction layer
(`mtp.0.*`, docs/design.md §5.9): its draft logits against a reference written here from
DeepSeek's published inference code (`MTPBlock` in the V4 repository's inference/model.py),
since transformers 5.25 does not run the layer (DeepseekV4ForCausalLM drops `mtp.*` on load).

The layer, at position i, with X_i (hc_mult, D) the main model's streams after its last layer
(what its hyper-head reads) and t_{i+1} the next token:

    e      = e_proj(enorm(embed(t_{i+1})))                      (D)
    X'_ij  = e + h_proj(hnorm(X_ij))                             every stream j
    X''_i  = one V4 decoder layer (mHC around attention and MoE), causal over MTP rows 0..i
    logits = head(norm(hyper_head(X''_i)))                       its own hyper-head and norm,
                                                                 the main model's head

The decoder layer is run as the single layer of a one-layer transformers DeepseekV4 model (its
`norm` and `hc_head` are the MTP layer's, its lm_head the main one's), with its input streams
replaced by X' (a forward pre-hook on the layer), at positions 0..i. Attention type: sliding
(compress_ratios' MTP entry 0, as V4-Flash publishes); MoE routed with a correction bias.

Main model: tests/golden/v4/model_fp32 (scripts/make_v4_golden.py). Writes tests/golden/v4/mtp_fp32/:
  config.json, model.safetensors  the main model's tensors plus mtp.0.* (num_nextn_predict_layers
                                  1, compress_ratios one entry longer)
  expected.json                   prompts (tokens), chain_tokens
  expected.safetensors            mtp_logits_<p> (n_p - 1, V): MTP rows at positions 0..n_p-2
                                  (token t_{i+1}, the main streams of row i); chain_logits_<p>
                                  (1, V): position n_p - 1 with token chain_tokens[p] and the
                                  block output X''_{n_p-2} as its streams
Prompts: 140 tokens (past the 128-row window, so the MTP layer's window slides) and 9; each
routed choice of the MTP layer decisive (k-th and (k+1)-th biased scores apart by ROUTER_GAP).

Run: /opt/venv/bin/python scripts/make_v4_mtp_golden.py
(torch 2.15.0, transformers 5.25.0, safetensors 0.8.0, numpy 2.4.6.) Two runs give identical bytes.
"""

import copy
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402

import make_v4_golden as mv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, "tests", "golden", "v4", "model_fp32")
OUT = os.path.join(ROOT, "tests", "golden", "v4", "mtp_fp32")
PROMPT_LENS = [140, 9]
SEED = 4343
ROUTER_GAP = 1e-4
MTP_RATIO = 0


def block_config():
    """The one-layer config whose layer is the MTP block."""
    kw = {k: copy.deepcopy(v) for k, v in mv.CONFIG.items()
          if k not in ("architectures", "model_type", "topk_method")}
    kw.update(num_hidden_layers=1, compress_ratios=[MTP_RATIO], num_hash_layers=0)
    cfg = DeepseekV4Config(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    assert cfg.layer_types == ["sliding_attention"] and cfg.mlp_layer_types == ["moe"]
    return cfg


def make_mtp(main, gen):
    """The one-layer model (random, make_v4_golden's init rules) and the extra MTP tensors."""
    blk = DeepseekV4ForCausalLM(block_config())
    blk.eval()
    mv.init_weights(blk, gen)
    with torch.no_grad():
        blk.lm_head.weight.copy_(main.lm_head.weight)
        blk.model.embed_tokens.weight.copy_(main.model.embed_tokens.weight)
    D = mv.CONFIG["hidden_size"]
    extra = {
        "e_proj.weight": torch.randn(D, D, generator=gen) / math.sqrt(D),
        "h_proj.weight": torch.randn(D, D, generator=gen) / math.sqrt(D),
        "enorm.weight": torch.rand(D, generator=gen) + 0.5,
        "hnorm.weight": torch.rand(D, generator=gen) + 0.5,
    }
    return blk, extra


def mtp_tensors(blk, extra):
    """mtp.0.* in DeepSeek's names."""
    out = {}
    for k, v in mv.deepseek_names(blk.state_dict()).items():
        if k in ("embed.weight", "head.weight"):
            continue
        if k.startswith("layers.0."):
            out["mtp.0." + k[len("layers.0."):]] = v
        elif k == "norm.weight" or k.startswith("hc_head_"):
            out["mtp.0." + k] = v
        else:
            raise RuntimeError("unexpected tensor " + k)
    for k, v in extra.items():
        out["mtp.0." + k] = v.contiguous()
    return out


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Streams:
    """The output of a decoder layer (B, S, hc, D), kept at each call."""

    def __init__(self, layer):
        self.out = None
        self.h = layer.register_forward_hook(lambda m, a, o: setattr(self, "out", o.detach().clone()))

    def close(self):
        self.h.remove()


def run_mtp(blk, extra, X, next_ids, gaps):
    """MTP logits and block outputs of rows 0..S-1 (one prompt): X (S, hc, D) streams, next_ids (S)."""
    eps = mv.CONFIG["rms_norm_eps"]
    emb = blk.model.embed_tokens.weight[next_ids]
    e = F.linear(rms(emb, extra["enorm.weight"], eps), extra["e_proj.weight"])
    h = F.linear(rms(X, extra["hnorm.weight"], eps), extra["h_proj.weight"])
    xin = (e.unsqueeze(1) + h).unsqueeze(0)  # (1, S, hc, D)
    layer = blk.model.layers[0]
    pre = layer.register_forward_pre_hook(lambda m, a, k: ((xin,) + a[1:], k), with_kwargs=True)
    tap = Streams(layer)
    glog = []
    gh = layer.mlp.gate.register_forward_hook(lambda m, a, o: glog.append(o[0].detach().clone()))
    S = X.shape[0]
    out = blk(inputs_embeds=torch.zeros(1, S, X.shape[-1]), position_ids=torch.arange(S)[None],
              use_cache=False)
    pre.remove()
    gh.remove()
    tap.close()
    K = mv.CONFIG["num_experts_per_tok"]
    bias = layer.mlp.gate.e_score_correction_bias
    for lg in glog:
        v = (F.softplus(lg.float()).sqrt() + bias).sort(-1, descending=True).values
        gaps.append(float((v[:, K - 1] - v[:, K]).min()))
    return out.logits[0].float(), tap.out[0]


def main():
    mv.check_versions()
    torch.manual_seed(0)
    main_model = mv.load_fp32(MAIN)
    gen = torch.Generator().manual_seed(SEED)
    blk, extra = make_mtp(main_model, gen)
    V = mv.CONFIG["vocab_size"]
    last = Streams(main_model.model.layers[-1])
    for attempt in range(50):
        prompts = [torch.randint(2, V, (n,), generator=gen) for n in PROMPT_LENS]
        chain = [int(torch.randint(2, V, (1,), generator=gen)) for _ in PROMPT_LENS]
        gaps, res = [], {}
        with torch.no_grad():
            for p, ids in enumerate(prompts):
                main_model(input_ids=ids[None], use_cache=False)
                X = last.out[0]  # (n, hc, D)
                n = ids.shape[0]
                lg, blk_out = run_mtp(blk, extra, X[: n - 1], ids[1:], gaps)
                # the chained row: position n - 1, token chain[p], streams X''_{n-2}
                X2 = torch.cat([X[: n - 1], torch.zeros_like(X[:1])])
                nxt = torch.cat([ids[1:], torch.tensor([chain[p]])])
                e_only = run_mtp_chained(blk, extra, X2, nxt, blk_out[n - 2], gaps)
                assert torch.allclose(e_only[: n - 1], lg, atol=1e-4, rtol=0), "causality"
                res["mtp_logits_%d" % p] = lg.contiguous()
                res["chain_logits_%d" % p] = e_only[n - 1:].contiguous()
        if min(gaps) > ROUTER_GAP:
            break
    else:
        sys.exit("make_v4_mtp_golden.py: no decisive prompt set")
    last.close()
    print("attempt %d: router gap %.3g" % (attempt, min(gaps)))
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    cfg = dict(mv.CONFIG)
    cfg["torch_dtype"] = "float32"
    cfg["num_nextn_predict_layers"] = 1
    cfg["compress_ratios"] = list(mv.CONFIG["compress_ratios"]) + [MTP_RATIO]
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    t = {}
    with safe_open(os.path.join(MAIN, "model.safetensors"), "pt") as f:
        for k in f.keys():
            t[k] = f.get_tensor(k)
    t.update(mtp_tensors(blk, extra))
    save_file({k: t[k].contiguous() for k in sorted(t)}, os.path.join(OUT, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"prompts": [{"tokens": [int(x) for x in ids]} for ids in prompts],
                   "chain_tokens": chain, "main_model": "tests/golden/v4/model_fp32",
                   "router_gap": min(gaps)}, f, indent=1)
        f.write("\n")
    save_file({k: res[k] for k in sorted(res)}, os.path.join(OUT, "expected.safetensors"),
              metadata={"format": "pt"})
    print("wrote", OUT)


def run_mtp_chained(blk, extra, X, next_ids, chained, gaps):
    """As run_mtp, with the last row's input streams the block output `chained` (hc, D) of the
    previous row instead of a main-model row: h' = e + h_proj(hnorm(chained))."""
    X = X.clone()
    X[-1] = chained
    lg, _ = run_mtp(blk, extra, X, next_ids, gaps)
    return lg


if __name__ == "__main__":
    main()
