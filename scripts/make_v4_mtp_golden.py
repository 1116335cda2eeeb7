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
and tests/golden/v4/mtp_fp8/: the same files in the published form (v4/model_fp8's main
tensors; the MTP layer's e_proj, h_proj, attention and shared-expert projections FP8 e4m3 with
E8M0 128 x 128 scales, its experts FP4, the rest bf16 or fp32 as transformers keeps it), the
reference run on the dequantized weights in fp32 with the same prompts.
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
import tempfile

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
    write_out(OUT, "tests/golden/v4/model_fp32", {}, read_all(os.path.join(MAIN, "model.safetensors")),
              mtp_tensors(blk, extra), prompts, chain, res, min(gaps))
    make_fp8(blk, extra, prompts, chain)


def read_all(path):
    t = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            t[k] = f.get_tensor(k)
    return t


def write_out(out, main_name, cfg_extra, main_t, mtp_t, prompts, chain, res, gap):
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    cfg = dict(mv.CONFIG)
    cfg["torch_dtype"] = "float32"
    cfg.update(cfg_extra)
    cfg["num_nextn_predict_layers"] = 1
    cfg["compress_ratios"] = list(mv.CONFIG["compress_ratios"]) + [MTP_RATIO]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    t = dict(main_t)
    t.update(mtp_t)
    save_file({k: t[k].contiguous() for k in sorted(t)}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"prompts": [{"tokens": [int(x) for x in ids]} for ids in prompts],
                   "chain_tokens": chain, "main_model": main_name, "router_gap": gap}, f, indent=1)
        f.write("\n")
    save_file({k: res[k] for k in sorted(res)}, os.path.join(out, "expected.safetensors"),
              metadata={"format": "pt"})
    print("wrote", out)


# The published form of the MTP layer (as make_v4_golden.py's model_fp8 holds the main layers):
# e_proj, h_proj and the FP8_SUFFIXES projections FP8 e4m3 with E8M0 128 x 128 scales, the
# experts FP4, the rest bf16 but what transformers keeps fp32 (norms, mHC, sinks, gate bias).
def quantize_mtp(mtp_t):
    out, deq = {}, {}
    for name, w in sorted(mtp_t.items()):
        if name.endswith(mv.FP8_SUFFIXES) or name.endswith((".e_proj.weight", ".h_proj.weight")) or \
                mv.is_fp4(name):
            q, e = mv.fp4_ue8m0(w.float()) if mv.is_fp4(name) else mv.fp8_ue8m0(w.float())
            sname = name[: -len(".weight")] + ".scale"
            out[name], out[sname] = q, e.view(torch.float8_e8m0fnu)
            deq[name] = mv.published_dequant(name, q, out[sname])
        elif mv.bf16_keeps_fp32(name) or name.startswith("mtp.0.hc_head_") or \
                name.endswith(("enorm.weight", "hnorm.weight")):
            out[name] = w
            deq[name] = w.float()
        else:
            out[name] = w.to(torch.bfloat16)
            deq[name] = out[name].float()
    return out, deq


def make_fp8(blk, extra, prompts, chain):
    """tests/golden/v4/mtp_fp8: v4/model_fp8's main model plus the MTP layer in the published form;
    the reference runs both dequantized (fp32 math), on the fp32 set's prompts."""
    qmain = read_all(os.path.join(os.path.dirname(MAIN), "model_fp8", "model.safetensors"))
    dmain = {}
    for k, v in qmain.items():
        if k.endswith(".scale"):
            continue
        sk = k[: -len(".weight")] + ".scale"
        dmain[k] = mv.published_dequant(k, v, qmain[sk]) if sk in qmain else \
            (v.float() if v.is_floating_point() else v)
    qmtp, dmtp = quantize_mtp(mtp_tensors(blk, extra))
    tmp = tempfile.mkdtemp()
    try:
        d1 = os.path.join(tmp, "main")
        os.makedirs(d1)
        with open(os.path.join(d1, "config.json"), "w") as f:
            json.dump(dict(mv.CONFIG, torch_dtype="float32"), f)
        save_file({k: v.contiguous() for k, v in dmain.items()}, os.path.join(d1, "model.safetensors"),
                  metadata={"format": "pt"})
        main_model = mv.load_fp32(d1)
        # the block as a one-layer model in DeepSeek's names, loaded by transformers
        d2 = os.path.join(tmp, "block")
        os.makedirs(d2)
        bc = dict(mv.CONFIG, torch_dtype="float32", num_hidden_layers=1, compress_ratios=[MTP_RATIO],
                  num_hash_layers=0)
        with open(os.path.join(d2, "config.json"), "w") as f:
            json.dump(bc, f)
        bt = {"embed.weight": dmain["embed.weight"], "head.weight": dmain["head.weight"]}
        ex = {}
        for k, v in dmtp.items():
            n = k[len("mtp.0."):]
            if n in ("e_proj.weight", "h_proj.weight", "enorm.weight", "hnorm.weight"):
                ex[n] = v
            elif n == "norm.weight" or n.startswith("hc_head_"):
                bt[n] = v
            else:
                bt["layers.0." + n] = v
        save_file({k: v.contiguous() for k, v in bt.items()}, os.path.join(d2, "model.safetensors"),
                  metadata={"format": "pt"})
        blk2 = mv.load_fp32(d2)
    finally:
        shutil.rmtree(tmp)
    last = Streams(main_model.model.layers[-1])
    gaps, res = [], {}
    with torch.no_grad():
        for p, ids in enumerate(prompts):
            main_model(input_ids=ids[None], use_cache=False)
            X = last.out[0]
            n = ids.shape[0]
            lg, blk_out = run_mtp(blk2, ex, X[: n - 1], ids[1:], gaps)
            X2 = torch.cat([X[: n - 1], torch.zeros_like(X[:1])])
            nxt = torch.cat([ids[1:], torch.tensor([chain[p]])])
            e_only = run_mtp_chained(blk2, ex, X2, nxt, blk_out[n - 2], gaps)
            res["mtp_logits_%d" % p] = lg.contiguous()
            res["chain_logits_%d" % p] = e_only[n - 1:].contiguous()
    last.close()
    if min(gaps) <= ROUTER_GAP:
        sys.exit("make_v4_mtp_golden.py: the FP8 + FP4 MTP layer's routing is not decisive")
    print("fp8: router gap %.3g" % min(gaps))
    qcfg = {"torch_dtype": "bfloat16", "quantization_config": dict(mv.QUANT_CONFIG),
            "expert_dtype": "fp4"}
    write_out(os.path.join(os.path.dirname(OUT), "mtp_fp8"), "tests/golden/v4/model_fp8", qcfg,
              qmain, qmtp, prompts, chain, res, min(gaps))


def run_mtp_chained(blk, extra, X, next_ids, chained, gaps):
    """As run_mtp, with the last row's input streams the block output `chained` (hc, D) of the
    previous row instead of a main-model row: h' = e + h_proj(hnorm(chained))."""
    X = X.clone()
    X[-1] = chained
    lg, _ = run_mtp(blk, extra, X, next_ids, gaps)
    return lg


if __name__ == "__main__":
    main()
