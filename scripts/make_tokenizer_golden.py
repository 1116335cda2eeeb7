#!/usr/bin/env python3
"""scripts/make_tokenizer_golden.py — reference data for engine/tokenizer*.c.

Trains small byte-level BPE tokenizers with the Hugging Face `tokenizers` package (pinned below)
on a corpus this script writes itself, and saves under tests/golden/tokenizer/:

  <name>/tokenizer.json, <name>/tokenizer_config.json   the tokenizers
  cases_<name>.json      expected ids (with and without special-token handling) and decoded text
  mixed_1mb.txt          ~1 MB mixed text (the benchmark input)
  mixed_1mb_<name>.ids   its ids (int32 little-endian, no special tokens) for the main tokenizer
  README.md              what is here and the reference tokenizer's MB/s

Tokenizers:
  bpe8k      DeepSeek-style pre-tokenizer (digit runs 1-3, CJK split, word/punct/space split
             with look-ahead, ByteLevel without regex), TemplateProcessing BOS, ~8k vocab
  bpe1k      the same pre-tokenizer, ~1k vocab, no post-processor (BOS from tokenizer_config)
  bpe1k_nfc  like bpe1k with an NFC normalizer
  bpe1k_gpt2 Split(Removed, invert) + Digits(individual) + ByteLevel(add_prefix_space, GPT-2 regex)

Run: python3 scripts/make_tokenizer_golden.py   (pip install tokenizers==VERSION first)
"""
import json
import os
import random
import struct
import sys
import time

TOKENIZERS_VERSION = "0.23.3"
# The reference speed is single-threaded: set before tokenizers starts its thread pool.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

try:
    import tokenizers
except ImportError:
    sys.exit(f"pip install tokenizers=={TOKENIZERS_VERSION}")
if tokenizers.__version__ != TOKENIZERS_VERSION:
    sys.exit(f"need tokenizers=={TOKENIZERS_VERSION}, found {tokenizers.__version__}")

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "tokenizer")

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"
SPECIALS = [BOS, EOS, PAD, "<｜User｜>", "<｜Assistant｜>"]

# DeepSeek-V3's pre-tokenizer regexes.
RE_DIGITS = r"\p{N}{1,3}"
RE_CJK = "[一-龥\u3040-ゟ゠-ヿ]+"
RE_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
            r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is you that it he was for on are as with his they I at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could people "
         "my than first water been call who oil its now find long down day did get come made may "
         "part tokenizer model inference server memory bandwidth latency expert attention "
         "DeepSeek Transformer NUMA socket thread kernel matrix vector don't won't it's we're "
         "they've I'm you'll she'd O'Neil naïve café résumé coöperate Zürich São Paulo").split()
CODE = [
    "def f(x):\n    return x * 2 + 1\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "if __name__ == '__main__':\n    main()\n",
    "const x = arr.map((v) => v ** 2).filter(Boolean);\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n",
    "    if (p == NULL) {\n        return -ENOMEM;\n    }\n",
    "x = {'a': [1, 2, 3], \"b\": None}  # comment\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }\n",
    "<div class=\"box\"><span>hi</span></div>\n",
]
CJK = ["我们今天讨论深度学习模型的推理速度。", "机器学习", "東京は日本の首都です。", "ひらがなとカタカナ",
       "한국어 문장도 있습니다.", "中文，标点！还有？", "深度求索", "カタカナ・テスト", "龥龜龍", "漢字かな交じり文"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "🔥🔥", "🤖", "✨", "🧑‍💻", "☃", "🏳️‍🌈"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "A\u030a", "\u1100\u1161\u11a8",
             "Cafe\u0301", "re\u0301sume\u0301", "\u0915\u094d\u0937", "ﬁ", "Å", "Ω"]
OTHER = ["Привет, мир!", "Γειά σου κόσμε", "مرحبا بالعالم", "שלום עולם", "สวัสดีครับ", "नमस्ते दुनिया",
         "\u00a0nbsp\u00a0", "ideographic\u3000space", "tab\tsep", "zero\u200bwidth", "€100 £5 ¥300",
         "x²+y³=z⁴", "½ ⅓ ¼", "Ⅻ ⅻ", "١٢٣ ٤٥٦", "１２３４５", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𐍈𐌰𐌻"]
SPACES = ["  ", "   ", "\n", "\n\n", "\n\n\n", " \n", "\t", "\t\t", "\r\n", "    \n    ", "      ", " \t \n"]


def number(r):
    k = r.choice([1, 2, 3, 4, 5, 7, 10, 16])
    s = "".join(r.choice("0123456789") for _ in range(k))
    return r.choice([s, s, "-" + s, s + ".5", "3.14159", "1,000,000", "0x" + s, s + "%", "v" + s])


def piece(r):
    c = r.random()
    if c < 0.40:
        n = r.randint(1, 12)
        ws = [r.choice(WORDS) for _ in range(n)]
        if r.random() < 0.3:
            ws[0] = ws[0].capitalize()
        return " ".join(ws) + r.choice(["", ".", ",", "!", "?", ":", ";", " -", "..."])
    if c < 0.52:
        return r.choice(CODE)
    if c < 0.62:
        return number(r)
    if c < 0.72:
        return r.choice(CJK)
    if c < 0.78:
        return r.choice(EMOJI) * r.randint(1, 2)
    if c < 0.84:
        return r.choice(COMBINING)
    if c < 0.90:
        return r.choice(OTHER)
    return r.choice(SPACES)


def text(r, n):
    out = []
    for _ in range(n):
        out.append(piece(r))
        out.append(r.choice([" ", " ", "", "\n", "  "]))
    return "".join(out)


def corpus(seed, n_docs):
    r = random.Random(seed)
    return [text(r, r.randint(5, 40)) for _ in range(n_docs)]


def deepseek_pre():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(RE_DIGITS), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(RE_CJK), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(RE_WORDS), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def gpt2_pre():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("[^\x0c]+"), behavior="removed", invert=True),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])


def build(vocab, pre, nfc, template, docs):
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False,
                             special_tokens=[AddedToken(s, special=True, normalized=False)
                                             for s in SPECIALS],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=tr)
    # DeepSeek-R1-style non-special added tokens, and flags DeepSeek's FIM tokens exercise.
    tok.add_tokens([AddedToken("<think>", special=False, normalized=True),
                    AddedToken("</think>", special=False, normalized=True),
                    AddedToken("<｜fim▁hole｜>", special=False, normalized=False, lstrip=True,
                               rstrip=True),
                    AddedToken("<｜tool▁sep｜>", special=True, normalized=False, single_word=True)])
    if template:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def test_strings():
    r = random.Random(12345)  # a different seed from the training corpus
    s = ["", " ", "  ", "\n", "\n\n\n", "\t", " \n ", "a", "Hello", "Hello world", " Hello world",
         "Hello  world", "Hello world  ", "hello\nworld\n", "1", "12", "123", "1234", "1234567",
         "3.14159", "2024-06-01", "x=1+2", "it's", "IT'S", "don't stop", "naïve café",
         "e\u0301", "\u00e9", "Cafe\u0301 vs Caf\u00e9", "ﬁne", "Å Å", "😀", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵",
         "中文", "我们今天讨论深度学习模型", "日本語のテキスト", "한국어", "漢字かな交じり文123",
         "𐍈", "\U0010ffff", "\u0000", "a\u0000b", "\x7f", "\u200b", "\ufeffBOM",
         "form\x0cfeed", "\x0c\x0c", "    indented", "trailing   ", "mixed \t\n\r\n tabs",
         "unseen word: floccinaucinihilipilification", "Ψυχή", "ԱԲԳ", "ᚠᛇᚻ", "ꙮ",
         BOS, EOS, BOS + "Hello", "Hello" + EOS, "a" + BOS + "b", BOS + BOS, BOS + " " + EOS,
         "<｜User｜>What is 2+2?<｜Assistant｜>4" + EOS, "<think>\nreasoning\n</think>\n\nanswer",
         "<think></think>", "x <｜fim▁hole｜> y", "x<｜fim▁hole｜>y", "  <｜fim▁hole｜>  ",
         "a <｜tool▁sep｜> b", "a<｜tool▁sep｜>b", "<｜tool▁sep｜>", "<｜begin▁of▁sentence", "<think",
         "<｜▁pad▁｜><｜▁pad▁｜>", "<<think>>"]
    while len(s) < 400:
        s.append(text(r, r.randint(1, 12)))
    # Random strings over a wide pool (odd whitespace, numerals of many scripts, marks, astral
    # code points, pieces of special tokens): where PCRE2 and Oniguruma could disagree.
    pool = ([chr(c) for c in range(0x20, 0x7f)] * 3 +
            list("\t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f"
                 "\u3000\u180e\u200b\ufeff") +
            [chr(c) for c in range(0x300, 0x370)] + list("０１２３٠١٢߀०১๑¹²³½⅓ⅠⅫ〇𝟘") +
            list("中文日本語かなカナ한글龥一ゟ゠ヿ぀😀👍🏽\u200d\ufe0f🇫🇷<｜▁>/") +
            [BOS, "<think>", "</think>", "<｜fim▁hole｜>", "<｜tool▁sep｜>"] +
            [chr(r.randrange(0x80, 0xd800)) for _ in range(300)] +
            [chr(r.randrange(0x10000, 0x110000)) for _ in range(50)])
    while len(s) < 500:
        s.append("".join(r.choice(pool) for _ in range(r.randint(1, 30))))
    # Characters added in Unicode 15 (emoji, CJK Extension H, Kawi letters and digits, Devanagari
    # Extended-A punctuation): where an older PCRE2's property tables differ from the
    # reference's. After the others so the first 500 cases stay as they were.
    new = ["\U0001fa77", "\U0001fae8", "\U0001fabf", "\U0001f6dc", "\U00031350", "\U000323af",
           "\U00011f50\U00011f51", "\U00011f04", "\U00011b00"]
    for c in new:
        s += [c, " " + c, "a " + c, "a" + c, c + c + " x", "1 " + c + "2", "\n" + c, "!" + c]
    s += ["I \U0001fa77 you \U0001fae8\U0001fabf \U0001f6dc wifi",
          "\u4e2d\U00031350\U00031351 \U00031352\u6587", "x \U00011f50\U00011f51\U00011f52 y"]
    # Characters added in Unicode 15.1 (CJK Extension I, ideographic description characters)
    # and 16.0 (Garay letters and digits, Todhri, Egyptian hieroglyphs Ext-A, legacy computing
    # symbols and outlined digits, an emoji, Cyrillic TJE), the reference's Unicode version, and
    # two 17.0 ones it treats as unassigned (CJK Extension J, an emoji). After the others so the
    # earlier cases stay as they were.
    newer = ["\U0002ebf0", "\U0002ee5d", "\u2ffc", "\u31ef", "\U00010d50", "\U00010d40",
             "\U000105c0", "\U00013460", "\U0001cc00", "\U0001ccf0", "\U0001fae9", "\u1c89",
             "\U000323b0", "\U0001faea"]
    for c in newer:
        s += [c, " " + c, "a " + c, "a" + c, c + c + " x", "1 " + c + "2", "\n" + c, "!" + c]
    s += ["\u4e2d \U0002ebf0\U0002ebf1 \U0002ee5d\u6587", "x \U00010d50\U00010d51 \U00010d41\U00010d42 y",
          "I \U0001fae9 you \U0001cc00 \U0001ccf1\U0001ccf2\U0001ccf3\U0001ccf4",
          "\u2ff0\u4e00 \u2ffc\u4e00 \u31ef\u4e00", "a \U000323b0 \U0001faea b"]
    return s


def mixed_1mb():
    r = random.Random(777)
    parts, n = [], 0
    while n < 1_000_000:
        t = text(r, 50)
        parts.append(t)
        n += len(t.encode())
    return "".join(parts)


def main():
    os.makedirs(OUT, exist_ok=True)
    docs = corpus(1, 3000)
    cfgs = {
        "bpe8k": (8000, deepseek_pre(), False, True),
        "bpe1k": (1000, deepseek_pre(), False, False),
        "bpe1k_nfc": (1000, deepseek_pre(), True, False),
        "bpe1k_gpt2": (1000, gpt2_pre(), False, False),
    }
    strings = test_strings()
    big = mixed_1mb()
    with open(os.path.join(OUT, "mixed_1mb.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(big)
    speed = {}
    for name, (vocab, pre, nfc, template) in cfgs.items():
        tok = build(vocab, pre, nfc, template, docs)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"add_bos_token": True, "add_eos_token": False,
                       "bos_token": {"__type": "AddedToken", "content": BOS, "lstrip": False,
                                     "normalized": True, "rstrip": False, "single_word": False},
                       "eos_token": EOS, "pad_token": PAD, "model_max_length": 16384,
                       "tokenizer_class": "LlamaTokenizerFast"}, f, ensure_ascii=False, indent=1)
        bos = tok.token_to_id(BOS)
        cases = []
        for s in strings:
            plain = tok.encode(s, add_special_tokens=False).ids
            spec = tok.encode(s, add_special_tokens=True).ids
            if not template:  # transformers adds BOS per tokenizer_config's add_bos_token
                spec = [bos] + spec
            cases.append({"text": s, "ids": plain, "ids_special": spec,
                          "decoded": tok.decode(plain, skip_special_tokens=False),
                          "decoded_skip": tok.decode(spec, skip_special_tokens=True)})
        with open(os.path.join(OUT, f"cases_{name}.json"), "w", encoding="utf-8") as f:
            # One case a line: small, and a diff shows which strings changed.
            f.write('{"tokenizer": %s, "tokenizers_version": %s, "cases": [\n' %
                    (json.dumps(name), json.dumps(TOKENIZERS_VERSION)))
            f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
            f.write("\n]}\n")
        if name == "bpe8k":
            ids = tok.encode(big, add_special_tokens=False).ids
            with open(os.path.join(OUT, f"mixed_1mb_{name}.ids"), "wb") as f:
                f.write(struct.pack(f"<{len(ids)}i", *ids))
            nbytes = len(big.encode())
            best = 1e9
            for _ in range(5):
                t0 = time.perf_counter()
                tok.encode(big, add_special_tokens=False)
                best = min(best, time.perf_counter() - t0)
            speed[name] = nbytes / best / 1e6
            print(f"{name}: {len(ids)} ids for {nbytes} bytes; reference {speed[name]:.2f} MB/s")
    with open(os.path.join(OUT, "README.md"), "w", encoding="utf-8") as f:
        f.write(f"""# Tokenizer golden data

Made by `scripts/make_tokenizer_golden.py` with `tokenizers=={TOKENIZERS_VERSION}` (PyPI); do not
edit by hand. Read by `tests/golden/test_tokenizer_golden.c` and `numla bench tokenizer`.

* `bpe8k/`, `bpe1k/`, `bpe1k_nfc/`, `bpe1k_gpt2/`: trained byte-level BPE tokenizers
  (`tokenizer.json` + `tokenizer_config.json`); see the script's docstring for what each exercises.
* `cases_<name>.json`: {len(strings)} strings each with `ids` (no special-token handling),
  `ids_special` (BOS added: TemplateProcessing for bpe8k, `add_bos_token` otherwise),
  `decoded` (decode of `ids`, special tokens kept) and `decoded_skip` (decode of `ids_special`,
  special tokens skipped).
* `bpe2k_glm5/`, `cases_bpe2k_glm5.json`: a GLM-5-style tokenizer (GLM-4's pre-tokenizer
  regex, GLM's control and tool-call tokens) and its cases (these strings plus GLM chat text),
  made by `scripts/make_glm5_tokenizer_golden.py`, not by this script.
* `mixed_1mb.txt`: the ~1 MB mixed benchmark text; `mixed_1mb_bpe8k.ids`: its ids (int32 LE).

Reference speed (`Tokenizer.encode` of `mixed_1mb.txt` with bpe8k, one thread, best of 5,
on the machine that made the data): **{speed['bpe8k']:.2f} MB/s**.
""")


if __name__ == "__main__":
    main()
