#!/usr/bin/env python3
"""Reference data for `numla perplexity` (tests/golden/ppl/).

Writes into tests/golden/ppl/:
  tokenizer.json, tokenizer_config.json  a byte-level BPE of 288 ids (<bos> 0, <eos> 1, the 256
                                         bytes, 30 merges) trained with `tokenizers` on KJV text
                                         (Debian's bible-kjv-text, public domain), so that its ids
                                         fit the golden V3 model's vocabulary of 288
  text.txt                               the scored text (other KJV verses)
  model/model.safetensors                the golden V3 bf16 weights (tests/golden/v3/model_bf16)
                                         with lm_head scaled by 1/8 (exact in bf16): random
                                         weights give logits spread over hundreds of nats, far
                                         beyond llama.cpp's 16-nat cut of stored log-probs; scaled,
                                         every row's log-probs are within it, so a KL divergence
                                         computed from two saved files is exact up to rounding
  model/config.json, tokenizer*.json     links to the V3 bf16 config and the tokenizer above
  expected.json                          the tokens, and for each --ctx the perplexity llama.cpp's
                                         llama-perplexity computes: chunks of ctx tokens, the
                                         first of each replaced by BOS, the negative
                                         log-likelihood of the tokens after position ctx/2 from
                                         transformers' logits of model/ (the bf16 weights in fp32
                                         math, eager attention), summed in float64; its +/- as
                                         llama.cpp's; the largest logit range of a scored row

And tests/fuzz/corpus/ppl_base/small.kld: a base file of vocabulary 8, ctx 8, 2 chunks written
from the layout in engine/serving/perplexity.h (the seed of its fuzz target; the ppl_base_fuzz
suite writes the same rows through numla's writer and compares the bytes).

Run: /opt/venv/bin/python scripts/make_ppl_golden.py  (torch, transformers 5.25, tokenizers;
needs the `bible` program of Debian's bible-kjv). Deterministic: one thread, fixed data.
"""
import json
import math
import os
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "ppl")
SRC_MODEL = os.path.join(ROOT, "tests", "golden", "v3", "model_bf16")
MODEL = os.path.join(OUT, "model")
LM_HEAD_SCALE = 1.0 / 8
CTXS = [16, 64]


def kjv(ref):
    out = subprocess.run(["bible", "-f", ref], check=True, capture_output=True, text=True).stdout
    verses = []
    for line in out.splitlines():
        line = line.strip()
        if not line:
            continue
        # "Psa23:1 The LORD ..." -> the verse text
        verses.append(line.split(" ", 1)[1] if " " in line else line)
    return verses


def make_tokenizer(train_text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=288, special_tokens=["<bos>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(train_text, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    assert tok.get_vocab_size() == 288, tok.get_vocab_size()
    assert tok.token_to_id("<bos>") == 0 and tok.token_to_id("<eos>") == 1
    return tok


def llama_perplexity(model, tokens, ctx, bos):
    """llama.cpp's perplexity(): non-overlapping chunks, BOS first, score the second half."""
    n_chunk = len(tokens) // ctx
    first = ctx // 2
    nll = nll2 = 0.0
    count = 0
    per_chunk = []
    max_range = 0.0
    for i in range(n_chunk):
        chunk = list(tokens[i * ctx:(i + 1) * ctx])
        chunk[0] = bos
        with torch.no_grad():
            logits = model(torch.tensor([chunk])).logits[0].float().double()
        lp = torch.log_softmax(logits, dim=-1)
        rng = (logits.max(dim=-1).values - logits.min(dim=-1).values)[first:ctx - 1]
        max_range = max(max_range, float(rng.max()))
        for j in range(first, ctx - 1):
            v = -float(lp[j, tokens[i * ctx + j + 1]])
            nll += v
            nll2 += v * v
            count += 1
        per_chunk.append(math.exp(nll / count))
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    return {"ctx": ctx, "chunks": n_chunk, "scored": count, "ppl": ppl,
            "ppl_err": math.sqrt(var / (count - 1)) * ppl, "ppl_after_chunk": per_chunk,
            "max_logit_range": max_range}


def fnv(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def small_base():
    """Vocabulary 8, ctx 8 (first 4, 3 rows a chunk), 2 chunks over 17 tokens 0..16: row r of
    chunk c has scale (1 + c) / 65535, minimum log-prob -(2 + r) and codes
    (v * 7919 + c * 131 + r * 31) % 65536."""
    import struct
    V, ctx, first, ntok, C = 8, 8, 4, 17, 2
    toks = fnv(b"".join(struct.pack("<i", t) for t in range(ntok)))
    head = b"NUMLAKLB" + struct.pack("<IIqiiqqQ", 1, 64, V, ctx, first, ntok, C, toks)
    head += struct.pack("<Q", fnv(head))
    chunks = []
    for c in range(C):
        rows = b""
        for r in range(ctx - 1 - first):
            rows += struct.pack("<ff", (1 + c) / 65535.0, -(2.0 + r))
            rows += b"".join(struct.pack("<H", (v * 7919 + c * 131 + r * 31) % 65536)
                             for v in range(V))
        chunks.append(rows)
    data = head + b"".join(chunks) + b"".join(struct.pack("<Q", fnv(x)) for x in chunks)
    d = os.path.join(ROOT, "tests", "fuzz", "corpus", "ppl_base")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "small.kld"), "wb") as f:
        f.write(data)


def main():
    if transformers.__version__ != "5.25.0":
        sys.exit("transformers 5.25.0 expected, have %s" % transformers.__version__)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    small_base()
    os.makedirs(OUT, exist_ok=True)
    train = kjv("Genesis 1:1-31") + kjv("Genesis 2:1-25")
    text = "\n".join(kjv("Psalms 23:1-6") + kjv("Ecclesiastes 1:1-11")) + "\n"
    tok = make_tokenizer(train)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True,
                   "add_eos_token": False, "model_max_length": 4096,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(OUT, "text.txt"), "w") as f:
        f.write(text)
    tokens = tok.encode(text).ids
    assert tokens[0] == 0

    md = MODEL
    os.makedirs(md, exist_ok=True)
    w = load_file(os.path.join(SRC_MODEL, "model.safetensors"))
    w["lm_head.weight"] = (w["lm_head.weight"].float() * LM_HEAD_SCALE).to(torch.bfloat16)
    p = os.path.join(md, "model.safetensors")
    if os.path.lexists(p):
        os.remove(p)
    save_file({k: w[k].contiguous() for k in sorted(w)}, p, metadata={"format": "pt"})
    for name, target in [("config.json", "../../v3/model_bf16/config.json"),
                         ("tokenizer.json", "../tokenizer.json"),
                         ("tokenizer_config.json", "../tokenizer_config.json")]:
        p = os.path.join(md, name)
        if os.path.lexists(p):
            os.remove(p)
        os.symlink(target, p)

    model = transformers.DeepseekV3ForCausalLM.from_pretrained(
        MODEL, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    model.eval()
    runs = [llama_perplexity(model, tokens, c, 0) for c in CTXS]
    doc = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "model": "tests/golden/v3/model_bf16 with lm_head * %g" % LM_HEAD_SCALE,
           "num_tokens": len(tokens), "tokens": tokens, "runs": runs}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for r in runs:
        print("ctx %d: %d chunks, %d scored, PPL = %.6f +/- %.6f, logit range <= %.2f" %
              (r["ctx"], r["chunks"], r["scored"], r["ppl"], r["ppl_err"], r["max_logit_range"]))


if __name__ == "__main__":
    main()
