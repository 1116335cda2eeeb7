#!/usr/bin/env python3
"""scripts/make_kjv_golden.py — reference data for the trained model models/kjv-v3
(scripts/train_small_model.py): transformers' logits at every position of three real-text
prompts and its greedy continuation of each, written to tests/golden/kjv/model_bf16/ in the layout of
tests/golden/README.md (expected.json + expected.safetensors, with config.json and
model.safetensors as links to the committed model's), which tests/golden/test_kjv_golden.c checks
numla against at 1-3 ranks.

The reference runs transformers' DeepseekV3ForCausalLM (eager attention, eager experts) on the
committed bf16 weights upcast to fp32, in fp32 math; the same in fp64 gives the spread the test's
2e-3 tolerance is measured against. The prompts are token ids of the model's tokenizer (BOS
first); each is checked to route decisively (every chosen group and expert ahead of the first
rejected one by >= ROUTER_GAP in sigmoid score + bias) so a different summation order cannot
change an expert choice.

Run: /opt/venv/bin/python scripts/make_kjv_golden.py [--model DIR --out DIR]
(torch 2.15.0, transformers 5.25.0; a few seconds)
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import DeepseekV3ForCausalLM
from transformers.cache_utils import DynamicCache
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mv3

PINNED = {"torch": "2.15.0", "transformers": "5.25.0"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "kjv-v3")
OUT = os.path.join(ROOT, "tests", "golden", "kjv", "model_bf16")
N_GREEDY = 16
ROUTER_GAP = 1e-4
BOS, USER, ASSISTANT = 0, 3, 4

PROMPTS = [
    ("text", "In the beginning God created"),
    ("chat", "And the LORD said unto Moses,"),
    ("text", "Revelation 21\nAnd I saw a new heaven and a new earth: for the first heaven and the "
             "first earth were passed away; and there was no more sea.\nAnd I John saw the holy "
             "city, new Jerusalem, coming down from God out of heaven, prepared as a bride adorned "
             "for her husband.\nAnd I heard a great voice out of heaven saying,"),
]


def check_versions():
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__}
    bad = {k: (got[k], v) for k, v in PINNED.items() if got[k] != v}
    if bad:
        sys.exit("make_kjv_golden.py: version mismatch (installed, pinned): %r" % bad)


def load(dtype):
    m = DeepseekV3ForCausalLM.from_pretrained(MODEL, dtype=torch.float32,
                                              attn_implementation="eager",
                                              experts_implementation="eager")
    m = m.to(dtype)
    m.eval()
    return m


def router_gap(model, ids):
    """Smallest margin, over tokens and MoE layers, between the last chosen and the first
    rejected group and expert (noaux_tc: sigmoid score + correction bias)."""
    gaps = []

    def hook(mod, inp, out):
        rl = out[0].double()
        sc = rl.sigmoid() + mod.e_score_correction_bias.double()
        ng, kg, k = mod.num_group, mod.topk_group, mod.top_k
        gs = sc.view(-1, ng, mod.num_experts // ng).topk(2, dim=-1)[0].sum(-1)
        gsorted = gs.sort(-1, descending=True)[0]
        if kg < ng:
            gaps.append(float((gsorted[:, kg - 1] - gsorted[:, kg]).min()))
        gidx = gs.topk(kg, dim=-1)[1]
        mask = torch.zeros_like(gs).scatter_(1, gidx, 1).bool()
        mask = mask[:, :, None].expand(-1, ng, mod.num_experts // ng).reshape(-1, mod.num_experts)
        s2 = sc.masked_fill(~mask, float("-inf")).sort(-1, descending=True)[0]
        gaps.append(float((s2[:, k - 1] - s2[:, k]).min()))
    hs = [m.register_forward_hook(hook) for m in model.modules()
          if isinstance(m, mv3.DeepseekV3TopkRouter)]
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in hs:
        h.remove()
    return min(gaps)


@torch.no_grad()
def greedy(model, ids):
    cache = DynamicCache(config=model.config)
    out = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True)
    logits = out.logits[0, -1]
    toks, margins = [], []
    for _ in range(N_GREEDY):
        top2 = torch.topk(logits, 2)
        t = int(top2.indices[0])
        toks.append(t)
        margins.append(float(top2.values[0] - top2.values[1]))
        out = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
        logits = out.logits[0, -1]
    return toks, margins


def main():
    global MODEL, OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    MODEL, OUT = args.model, args.out
    check_versions()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    m32 = load(torch.float32)
    m64 = load(torch.float64)
    os.makedirs(OUT, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        link = os.path.join(OUT, f)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.relpath(os.path.join(MODEL, f), OUT), link)
    tensors, prompts = {}, []
    max_abs = 0.0
    for i, (kind, text) in enumerate(PROMPTS):
        ids = tok.encode(text, add_special_tokens=False).ids
        ids = [BOS] + ([USER] + ids + [ASSISTANT] if kind == "chat" else ids)
        gap = router_gap(m32, ids)
        if gap < ROUTER_GAP:
            sys.exit("make_kjv_golden.py: prompt %d routes within %g of a tie" % (i, gap))
        with torch.no_grad():
            lg = m32(input_ids=torch.tensor([ids])).logits[0].float()
            lg64 = m64(input_ids=torch.tensor([ids])).logits[0]
        max_abs = max(max_abs, float((lg.double() - lg64).abs().max()))
        toks, margins = greedy(m32, ids)
        assert toks[0] == int(lg[-1].argmax())
        tensors["prompt%d.logits" % i] = lg.contiguous()
        prompts.append({"kind": kind, "text": text, "tokens": ids, "greedy": toks,
                        "greedy_margins": margins, "greedy_text": tok.decode(toks, skip_special_tokens=False),
                        "min_router_gap": gap})
        print("prompt %d (%s, %d tokens): %r -> %r (min margin %.3f, router gap %.2g)"
              % (i, kind, len(ids), text[-40:], tok.decode(toks, skip_special_tokens=False), min(margins), gap))
    attn = m32.model.layers[0].self_attn
    inv = m32.model.rotary_emb.inv_freq
    meta = {"model": "models/kjv-v3", "weights": "model.safetensors (bf16, upcast; fp32 math)",
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__.split("+")[0],
            "softmax_scale": float(attn.scaling), "rope_attention_scaling":
            float(m32.model.rotary_emb.attention_scaling),
            "rope_inv_freq": [float(x) for x in inv], "n_greedy": N_GREEDY,
            "fp64_vs_fp32_max_abs_logit_diff": max_abs, "router_gap_floor": ROUTER_GAP,
            "prompts": prompts}
    save_file(tensors, os.path.join(OUT, "expected.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("fp64 vs fp32 max abs logit diff %.3g; wrote %s" % (max_abs, OUT))


if __name__ == "__main__":
    main()
