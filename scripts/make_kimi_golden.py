#!/usr/bin/env python3
"""scripts/make_kimi_golden.py — reference data for Kimi's tiktoken tokenizer
(engine/text/tokenizer_tiktoken.c) in tests/golden/kimi_tok/.

No real Kimi vocabulary is reachable, so a small one is trained with the tiktoken package's own
educational trainer (tiktoken._educational.bpe_train) using Kimi's pre-tokenizer pattern, and
numla is checked against tiktoken.Encoding built with that pattern, those ranks and 256 special
tokens laid out as Kimi's tokenization code lays them out. Writes:

  tiktoken.model          "<base64 token> <rank>" lines (the trained ranks)
  tokenizer_config.json   added_tokens_decoder naming some of the 256 special ids, bos/eos
  cases.json             {"tiktoken_version", "pattern", "cases": [{"text", "ids", "decoded",
                          "decoded_skip"}]}: the existing tokenizer golden strings, mixed CJK /
                          emoji / digits / whitespace runs, and every general category and the
                          Han / Hiragana / Katakana ranges in several contexts
  classes.json           the code points tiktoken's regex engine puts in each class the pattern
                          uses (\\p{Han}, \\p{L}, \\p{Lu}, ..., \\s), as ranges: numla's classifier is
                          checked against them on every code point
  README.md's speed line the tiktoken package's MB/s on tests/golden/tokenizer/mixed_1mb.txt

--han-header PATH also writes engine/text/unicode_han.h from the probed \\p{Han}.

Run: /opt/pyref/bin/python3 scripts/make_kimi_golden.py  (tiktoken==TIKTOKEN_VERSION, regex)
"""
import argparse
import base64
import json
import os
import random
import sys
import time

TIKTOKEN_VERSION = "0.14.0"
try:
    import tiktoken
    from tiktoken import _educational
except ImportError:
    sys.exit(f"pip install tiktoken=={TIKTOKEN_VERSION} regex")
if tiktoken.__version__ != TIKTOKEN_VERSION:
    sys.exit(f"need tiktoken=={TIKTOKEN_VERSION}, found {tiktoken.__version__}")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "kimi_tok")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

# Kimi's pre-tokenizer pattern (moonshotai/Kimi-K2-Instruct tokenization_kimi.py, pat_str).
KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

VOCAB_SIZE = 1200
N_RESERVED = 256
# Offsets in the 256 special ids, and names, as Kimi K2's tokenizer_config.json has them.
SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
            6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
            11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>",
            13: "<|tool_call_begin|>", 14: "<|tool_call_argument_begin|>",
            15: "<|tool_call_end|>", 16: "<|im_middle|>", 22: "<think>", 23: "</think>",
            254: "[UNK]", 255: "[PAD]"}

CLASS_PATTERNS = [("Han", r"[\p{Han}]"), ("L", r"\p{L}"), ("N", r"\p{N}"), ("M", r"\p{M}"),
                  ("Lu", r"\p{Lu}"), ("Ll", r"\p{Ll}"), ("Lt", r"\p{Lt}"), ("Lm", r"\p{Lm}"),
                  ("Lo", r"\p{Lo}"), ("s", r"\s")]


README = """# Golden data: Kimi's tiktoken tokenizer (engine/text/tokenizer_tiktoken.c)

Made by `scripts/make_kimi_golden.py` with tiktoken {version}; checked by
`tests/golden/test_kimi_tokenizer_golden.c` (`ctest -R golden.kimi_tokenizer_golden`). The build
and the tests never need Python; only regenerating does.

No real Kimi vocabulary is reachable from the machine that made this, so `tiktoken.model` is a
small vocabulary ({n_base} ranks) trained by the tiktoken package's own educational trainer
(`tiktoken._educational.bpe_train`) with Kimi's pre-tokenizer pattern, on the corpus of the
byte-level goldens plus mixed CJK / emoji / digit / whitespace text and English contractions (so
that merges cross where the pattern's `(?i:'s|...)` decides). The 256 ids after the ranks are
special tokens, named in `tokenizer_config.json` as Kimi K2's names them, the others
`<|reserved_token_ID|>`, as Kimi's tokenization code does.

* `cases.json`: {n_cases} strings (the byte-level goldens' strings, mixed CJK / emoji / digits /
  whitespace runs, contractions, and samples of every Unicode general category plus the Han /
  Hiragana / Katakana ranges in ten contexts each) with tiktoken's ids
  (`encode(allowed_special="all")`) and decodes.
* `classes.json`: the code points tiktoken's regex engine puts in `\\p{{Han}}`, `\\p{{L}}`,
  `\\p{{Lu}}`, `\\p{{Ll}}`, `\\p{{Lt}}`, `\\p{{Lm}}`, `\\p{{Lo}}`, `\\p{{M}}`, `\\p{{N}}` and `\\s`
  (probed through tiktoken itself), checked against numla's classifier on every code point.
* `every_code_point.json`: every code point (no surrogates) in the context `x{{c}}{{c}}'s {{c}}1\\n`,
  4096 code points to a chunk, and the FNV-1a 64 hash of tiktoken's ids of each chunk, with
  the trained vocabulary and with a vocabulary of all byte pairs (which shows every piece
  boundary; the test builds it the same way).
* `mixed_1mb.ids`: tiktoken's {n_ids} ids (int32 little-endian) of
  `tests/golden/tokenizer/mixed_1mb.txt`.

Reference speed (`numla bench tokenizer --model tests/golden/kimi_tok` reads it): tiktoken
{version}, one thread, encode of `mixed_1mb.txt` (best of 3, measured by the generator on a
shared machine): **{mbps:.2f} MB/s**
"""


def ranges(cps):
    r = []
    for c in cps:
        if r and r[-1][1] + 1 == c:
            r[-1][1] = c
        else:
            r.append([c, c])
    return r


def probe_classes():
    """Which code points tiktoken's regex engine puts in each class: with a pattern matching one
    character of the class, text between matches is dropped, so encoding every code point and
    decoding gives back exactly the class."""
    ranks = {bytes([i]): i for i in range(256)}
    chars = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    out = {}
    for name, pat in CLASS_PATTERNS:
        enc = tiktoken.Encoding("probe", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
        got = enc.decode_bytes(enc.encode_ordinary(chars)).decode("utf-8")
        out[name] = ranges(sorted(set(map(ord, got))))
    return out


def write_han_header(path, han):
    lines = ["/* engine/text/unicode_han.h — the code points of Unicode script Han (Unicode 16.0), as the",
             " * reference tiktoken package's regex engine sees \\p{Han}. Generated by",
             " * scripts/make_kimi_golden.py (probing tiktoken); do not edit. */",
             "#ifndef NUMLA_ENGINE_UNICODE_HAN_H", "#define NUMLA_ENGINE_UNICODE_HAN_H", "",
             "#include <stdint.h>", "", "static const uint32_t numla_unicode_han[][2] = {"]
    lines += ["    {0x%05X, 0x%05X}," % (a, b) for a, b in han]
    lines += ["};", "", "#endif", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def category_strings(classes, r):
    """Code points of every general category (as utf8proc/Python name them), the Han,
    Hiragana and Katakana ranges, in contexts that exercise each alternative's edges."""
    import unicodedata
    by_cat = {}
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000:
            continue
        by_cat.setdefault(unicodedata.category(chr(c)), []).append(c)
    picks = []
    for cat in sorted(by_cat):
        cps = by_cat[cat]
        picks += r.sample(cps, min(24, len(cps)))
    for a, b in classes["Han"]:
        picks += [a, b, r.randint(a, b)]
    picks += list(range(0x3040, 0x30A0, 3)) + list(range(0x30A0, 0x3100, 3))  # kana
    picks += [0x16FF0, 0x16FF1, 0x3021, 0x3005, 0x3007, 0x303B, 0x017F, 0x212A]
    out = []
    for c in picks:
        ch = chr(c)
        out += [ch, "a" + ch + "b", ch + ch + " x", " " + ch + "'s", "A" + ch + "'LL",
                "1" + ch + "23", "\n" + ch + "\n", "!" + ch + "a", ch + "中", "中" + ch]
    return out


def mixed_strings(r):
    pieces = ["我们", "今天", "中文", "かな", "カタカナ", "ひらがな", "漢字", "한국어", "😀", "👍🏽",
              "👨‍👩‍👧‍👦", "🇫🇷", "123", "4567890", "3.14", " ", "  ", "\t", "\n", "\r\n",
              "\n\n", "   \n", "Hello", "WORLD", "it's", "DON'T", "we'll", "x'Re", "naïve",
              "e\u0301", "Ψυχή", "Привет", "مرحبا", "!!", "...", "?\n", "(", ")", "——", "。",
              "，", "ー", "々", "〇", "ſ", "'S", "'ſ", "[BOS]", "<|im_end|>", "<think>",
              "</think>", "<|reserved_token_1205|>", "<|im_", "\u3000", "\u00a0", "\u2028"]
    out = []
    for _ in range(1500):
        out.append("".join(r.choice(pieces) for _ in range(r.randint(1, 14))))
    for w in ("it", "IT", "don", "we", "they", "I", "he", "x\u0301", "\u00e9t"):
        for c in ("'s", "'S", "'\u017f", "'t", "'T", "'re", "'RE", "'rE", "'ve", "'m", "'M", "'ll",
                  "'LL", "'lL", "'d", "'D", "'l", "'r", "'v", "'x", "''s", "'"):
            out += [w + c, w + c + " x", " " + w + c + "s", w.upper() + c]
    for n in (1, 2, 3, 4, 7, 30, 200):
        out += [" " * n, "\n" * n, " " * n + "x", "x" + " " * n, "\t" * n + "\n", "1" * n,
                "a" + " " * n + "b", "\n " * n]
    return out


# Every code point through the whole encoder: each code point c, in order (no surrogates), as
# EVERY_CP_CONTEXT with c filled in, concatenated in chunks of EVERY_CP_CHUNK code points; the
# FNV-1a 64 hash of each chunk's ids (int32 little-endian bytes) is kept.
EVERY_CP_CONTEXT = "x{c}{c}'s {c}1\n"
EVERY_CP_CHUNK = 4096


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def pair_ranks():
    """A vocabulary that shows every piece boundary: the 256 bytes, then every pair of bytes
    (a, b) with rank 256 + ((256 a + b) * 40503) mod 65536, so tokens are one or two bytes and
    where a piece ends changes which bytes pair up. The C test builds the same one."""
    ranks = {bytes([i]): i for i in range(256)}
    for i in range(65536):
        ranks[bytes([i >> 8, i & 255])] = 256 + (i * 40503) % 65536
    return ranks


def every_code_point(enc):
    import struct
    pairs = tiktoken.Encoding("pairs", pat_str=KIMI_PAT, mergeable_ranks=pair_ranks(),
                              special_tokens={})
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    hashes, pair_hashes = [], []
    for i in range(0, len(cps), EVERY_CP_CHUNK):
        text = "".join(EVERY_CP_CONTEXT.format(c=chr(c)) for c in cps[i:i + EVERY_CP_CHUNK])
        for e, out in ((enc, hashes), (pairs, pair_hashes)):
            ids = e.encode(text, allowed_special="all")
            out.append("%016x" % fnv1a64(struct.pack(f"<{len(ids)}i", *ids)))
    return {"context": EVERY_CP_CONTEXT, "chunk": EVERY_CP_CHUNK, "fnv1a64": hashes,
            "fnv1a64_pairs": pair_hashes}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--han-header", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import make_tokenizer_golden as mtg  # the existing tokenizer goldens' strings and corpus

    classes = probe_classes()
    with open(os.path.join(args.out, "classes.json"), "w") as f:
        json.dump({"tiktoken_version": tiktoken.__version__, "classes": classes}, f)
    if args.han_header:
        write_han_header(args.han_header, classes["Han"])

    # Training: the corpus of the existing tokenizer goldens plus mixed text, with the pattern
    # in the regex module's V1 syntax (the trainer splits with `regex`, which needs V1 for &&).
    r = random.Random(2727)
    # contractions, so that merges cross where the pattern's (?i:'s|...) decides a piece's end
    contractions = " it's don't we'll they're I've I'm he'd IT'S DON'T" * 40
    train = ("".join(mtg.corpus(3, 60)) + "".join(mixed_strings(random.Random(5))[:300]) +
             contractions)
    t0 = time.time()
    ranks = _educational.bpe_train(train, VOCAB_SIZE, "(?V1)" + KIMI_PAT, visualise=None)
    print(f"trained {len(ranks)} ranks on {len(train)} chars in {time.time() - t0:.0f} s",
          file=sys.stderr)
    n_base = len(ranks)
    special = {}
    for k in range(N_RESERVED):
        special[SPECIALS.get(k, f"<|reserved_token_{n_base + k}|>")] = n_base + k
    enc = tiktoken.Encoding("kimi_golden", pat_str=KIMI_PAT, mergeable_ranks=ranks,
                            special_tokens=special)
    with open(os.path.join(args.out, "tiktoken.model"), "w") as f:
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")
    cfg = {"added_tokens_decoder": {str(n_base + k): {"content": v, "lstrip": False,
                                                       "normalized": False, "rstrip": False,
                                                       "single_word": False, "special": True}
                                    for k, v in SPECIALS.items()},
           "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]",
           "unk_token": "[UNK]", "tokenizer_class": "TikTokenTokenizer"}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)

    strings = mtg.test_strings() + mixed_strings(r) + category_strings(classes, r)
    special_ids = set(special.values())
    cases = []
    for s in strings:
        ids = enc.encode(s, allowed_special="all")
        dec = enc.decode_bytes(ids).decode("utf-8", errors="replace")
        dec_skip = enc.decode_bytes([i for i in ids if i not in special_ids]).decode(
            "utf-8", errors="replace")
        cases.append({"text": s, "ids": ids, "decoded": dec, "decoded_skip": dec_skip})
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"tiktoken_version": tiktoken.__version__, "pattern": KIMI_PAT,
                   "cases": cases}, f, ensure_ascii=False)
    print(f"{len(cases)} cases", file=sys.stderr)
    t0 = time.time()
    with open(os.path.join(args.out, "every_code_point.json"), "w") as f:
        json.dump(every_code_point(enc), f, indent=0)
    print(f"every code point: {time.time() - t0:.0f} s", file=sys.stderr)

    # The reference's speed on the 1 MB mixed text (one thread), for docs/kimi.md.
    with open(os.path.join(ROOT, "tests", "golden", "tokenizer", "mixed_1mb.txt"), "rb") as f:
        mixed = f.read().decode("utf-8")  # bytes: text mode would turn its "\r\n" into "\n"
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        ids = enc.encode(mixed, allowed_special="all")
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    mb = len(mixed.encode()) / 1e6
    print(f"tiktoken {tiktoken.__version__}: {mb / best:.2f} MB/s on mixed_1mb.txt "
          f"({len(ids)} ids)", file=sys.stderr)
    with open(os.path.join(args.out, "mixed_1mb.ids"), "wb") as f:
        import struct
        f.write(struct.pack(f"<{len(ids)}i", *ids))
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8") as f:
        f.write(README.format(version=tiktoken.__version__, n_cases=len(cases), n_base=n_base,
                              mbps=mb / best, n_ids=len(ids)))


if __name__ == "__main__":
    main()
