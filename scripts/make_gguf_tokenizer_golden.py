#!/usr/bin/env python3
"""scripts/make_gguf_tokenizer_golden.py — GGUF tokenizers with the pre-tokenizers `deepseek-llm`
and `kimi-k2`, for engine/cli/model_text.c (tests/unit/engine/cli/test_model_text.c).

Writes under tests/golden/tokenizer/:

  deepseek_llm_gguf/tokenizer.gguf  a byte-level BPE vocabulary (~3k) trained here by the
                                    `tokenizers` package with DeepSeek-V2's pre-tokenizer (six
                                    Splits, then ByteLevel without its regex), as llama.cpp's
                                    converter writes it: tokens by id, merges "a b", control
                                    tokens type 3, pre "deepseek-llm", bos / eos ids
  deepseek_llm_gguf/tokenizer.json  the same tokenizer as `tokenizers` saves it (reference only)
  deepseek_llm_gguf/cases.json      the strings of cases_bpe8k.json with that tokenizer's ids
                                    (no special-token handling) and decodes
  kimi_k2_gguf/tokenizer.gguf       tests/golden/kimi_tok's tiktoken vocabulary as llama.cpp's
                                    converter writes a Kimi-K2 vocabulary: ranks as byte-level
                                    strings, merges rebuilt from the ranks, the special tokens by
                                    id (type 3), missing ids "[PADn]" (type 5), pre "kimi-k2";
                                    its expected ids are kimi_tok/cases.json (tiktoken's), and this
                                    script checks a sample of them with tiktoken again
  bad_pre_gguf/tokenizer.gguf       a small gpt2 vocabulary with pre "qwen2" (refused by numla)
  bad_pre_gguf/kimi_late_special.gguf  kimi-k2 with a special token past the 256 special ids

Pinned: tokenizers 0.23.3, tiktoken 0.14.0, gguf 0.19.0 (/opt/pyref has them).
Run: /opt/pyref/bin/python3 scripts/make_gguf_tokenizer_golden.py
"""
import base64
import json
import os
import sys

import gguf
import tiktoken
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

for mod, want in ((tokenizers, "0.23.3"), (tiktoken, "0.14.0")):
    if mod.__version__ != want:
        sys.exit("need %s==%s, found %s" % (mod.__name__, want, mod.__version__))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLD = os.path.join(ROOT, "tests", "golden")
OUT = os.path.join(GOLD, "tokenizer")

# DeepSeek-V2's (and DeepSeek-LLM's) pre-tokenizer: its tokenizer.json's Split regexes, the same
# as llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM list. The letter class as code point ranges
# (written as characters, six of them would be changed by an editor's NFC normalisation).
DS_LLM_LETTERS = [
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA),
    (0x1BC, 0x1BF), (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x376), (0x377, 0x377),
    (0x37B, 0x37D), (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1),
    (0x3A3, 0x3F5), (0x3F7, 0x481), (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5),
    (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115),
    (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D),
    (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149), (0x214E, 0x214E),
    (0x2183, 0x2183), (0x2184, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF2), (0x2CF3, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F),
    (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943),
]
DS_LLM_SPLITS = [
    "[\r\n]",
    "\\s?[" + "".join(chr(a) if a == b else chr(a) + "-" + chr(b) for a, b in DS_LLM_LETTERS) + "]+",
    "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
    "\\s+$",
    "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
    "\\p{N}+",
]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"


def byte_chars():
    """GPT-2's byte -> printable character table (ByteLevel)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHARS = byte_chars()


def as_chars(bs):
    return "".join(BYTE_CHARS[b] for b in bs)


def texts():
    with open(os.path.join(OUT, "cases_bpe8k.json"), encoding="utf-8") as f:
        return [c["text"] for c in json.load(f)["cases"]]


def write_gguf(path, pre, toks, types, merges, bos, eos, add_bos):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if add_bos is not None:  # the converter writes the flags only when the config has them
        w.add_add_bos_token(add_bos)
        w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def deepseek_llm():
    d = os.path.join(OUT, "deepseek_llm_gguf")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in DS_LLM_SPLITS] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    corpus = texts()
    with open(os.path.join(OUT, "mixed_1mb.txt"), encoding="utf-8") as f:
        corpus += f.read()[:300000].split("\n")
    tr = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=[],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(corpus, tr)
    tok.add_special_tokens([AddedToken(BOS, normalized=False, special=True),
                            AddedToken(EOS, normalized=False, special=True)])
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    tj = json.loads(tok.to_str())
    vocab = dict(tj["model"]["vocab"])
    types = {}
    for a in tj["added_tokens"]:
        vocab[a["content"]] = a["id"]
        types[a["id"]] = 3
    n = max(vocab.values()) + 1
    toks = [""] * n
    for t, i in vocab.items():
        toks[i] = t
    assert all(toks)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    write_gguf(os.path.join(d, "tokenizer.gguf"), "deepseek-llm", toks,
               [types.get(i, 1) for i in range(n)], merges, vocab[BOS], vocab[EOS], True)
    cases = []
    for t in texts():
        e = tok.encode(t, add_special_tokens=False)
        cases.append({"text": t, "ids": e.ids, "decoded": tok.decode(e.ids, skip_special_tokens=False)})
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:  # a case a line
        f.write('{"tokenizers": %s, "bos_id": %d, "cases": [\n' % (json.dumps(tokenizers.__version__),
                                                                    vocab[BOS]))
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print("deepseek_llm_gguf: %d tokens, %d merges, %d cases" % (n, len(merges), len(cases)))


def bpe_split(ranks, token, max_rank):
    """The two parts tiktoken's byte-pair merge joins last to make `token` (merges below its rank)."""
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[1]):
                best = (i, r)
        if best is None:
            return parts
        i = best[0]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def kimi_k2():
    src = os.path.join(GOLD, "kimi_tok")
    ranks = {}
    with open(os.path.join(src, "tiktoken.model")) as f:
        for line in f:
            if line.strip():
                b64, r = line.split()
                ranks[base64.b64decode(b64)] = int(r)
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    nb = len(ranks)
    specials = {v["content"]: int(k) for k, v in cfg["added_tokens_decoder"].items()}
    for i in range(nb, nb + 256):  # Kimi names the rest <|reserved_token_ID|>
        if i not in specials.values():
            specials["<|reserved_token_%d|>" % i] = i
    # leave a few ids unnamed as the converter does for ids outside vocab and specials
    for name in [s for s, i in specials.items() if i >= nb + 250]:
        del specials[name]
    vocab = {as_chars(t): r for t, r in ranks.items()}
    merges = []
    for t, r in ranks.items():
        if len(t) > 1:
            m = bpe_split(ranks, t, r)
            if len(m) == 2:
                merges.append(" ".join(as_chars(p) for p in m))
    rev = {i: t for t, i in {**vocab, **specials}.items()}
    toks, types = [], []
    for i in range(nb + 256):
        if i not in rev:
            toks.append("[PAD%d]" % i)
            types.append(5)
        else:
            toks.append(rev[i])
            types.append(3 if i in specials.values() else 1)
    bos = specials[cfg["bos_token"]] if isinstance(cfg.get("bos_token"), str) else None
    eos = specials[cfg["eos_token"]] if isinstance(cfg.get("eos_token"), str) else None
    write_gguf(os.path.join(OUT, "kimi_k2_gguf", "tokenizer.gguf"), "kimi-k2", toks, types, merges,
               bos, eos, None)  # kimi_tok's tokenizer_config.json has no add_bos_token
    # the expected ids are tiktoken's (kimi_tok/cases.json): check a sample again here
    with open(os.path.join(src, "cases.json"), encoding="utf-8") as f:
        doc = json.load(f)
    cases = doc["cases"]
    enc = tiktoken.Encoding("kimi", pat_str=doc["pattern"], mergeable_ranks=ranks,
                            special_tokens={s: i for s, i in specials.items()})
    for c in cases[::50]:
        assert enc.encode(c["text"], allowed_special="all") == c["ids"], c["text"]
    print("kimi_k2_gguf: %d tokens, %d merges (checked %d cases)" % (len(toks), len(merges),
                                                                   len(cases[::50])))


def bad():
    """Two refused files: pre "qwen2", and a kimi-k2 vocabulary whose one special token lies past
    the 256 ids after its ranks (id 256 + 300)."""
    toks = [BYTE_CHARS[b] for b in range(256)]
    write_gguf(os.path.join(OUT, "bad_pre_gguf", "tokenizer.gguf"), "qwen2", toks, [1] * 256, [],
               None, None, False)
    toks += ["[PAD%d]" % i for i in range(256, 556)] + ["<|im_end|>"]
    write_gguf(os.path.join(OUT, "bad_pre_gguf", "kimi_late_special.gguf"), "kimi-k2", toks,
               [1] * 256 + [5] * 300 + [3], [], None, None, False)


if __name__ == "__main__":
    deepseek_llm()
    kimi_k2()
    bad()
