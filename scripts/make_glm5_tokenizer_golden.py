#!/usr/bin/env python3
"""scripts/make_glm5_tokenizer_golden.py — a GLM-5-style tokenizer and its expected ids for
engine/text/tokenizer*.c (tests/golden/tokenizer/bpe2k_glm5/, cases_bpe2k_glm5.json).

GLM-4.5 / GLM-4.7 / GLM-5 ship a Hugging Face tokenizer.json (byte-level BPE, ~155k ids) that
this machine cannot download. As scripts/make_kimi_golden.py does for Kimi, this trains a small
vocabulary with the `tokenizers` package on scripts/make_tokenizer_golden.py's corpus using
GLM's configuration, and records what `tokenizers` makes of make_tokenizer_golden.py's test
strings plus chat-formatted GLM text:

  normalizer     none
  pre_tokenizer  Sequence[Split(GLM_SPLIT, Isolated), ByteLevel(add_prefix_space=false,
                 use_regex=false)]
  decoder        ByteLevel; post_processor ByteLevel (no BOS: the chat template writes
                 "[gMASK]<sop>" itself)
  added tokens   GLM's control tokens (special) and its reasoning / tool-call markup
                 (not special: they survive skip_special_tokens)

GLM_SPLIT is the pre-tokenizer regex of the GLM-4 family (ChatGLM4's tiktoken pattern, which
GLM-4.5+'s tokenizer.json keeps; llama.cpp's LLAMA_VOCAB_PRE_TYPE_CHATGLM4 / "glm4" pre-type and
transformers' TikTokenConverter default carry the same text): contractions case-insensitively,
letters with one leading non-letter, digits in runs of 1-3, punctuation runs with trailing
newlines, newline runs, spaces not before a non-space.

Run: /opt/pyref/bin/python3 scripts/make_glm5_tokenizer_golden.py
"""
import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("make_tokenizer_golden",
                                              os.path.join(HERE, "make_tokenizer_golden.py"))
base = importlib.util.module_from_spec(spec)
spec.loader.exec_module(base)  # checks the pinned tokenizers version

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,  # noqa: E402
                        pre_tokenizers, processors, trainers)

NAME = "bpe2k_glm5"
GLM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EOT = "<|endoftext|>"
SPECIAL = [EOT, "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
           "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>"]
MARKUP = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
          "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]


def glm_strings():
    return [
        "[gMASK]<sop><|system|>You are helpful.<|user|>Hi<|assistant|><think>",
        "[gMASK]<sop><|user|>2+2?<|assistant|></think>4<|user|>3+3?<|assistant|><think>",
        "<|assistant|><think>reasoning\nmore</think>answer<|user|>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
        "<|observation|><tool_response>{\"temp\": 21}</tool_response><|assistant|>",
        "[gMASK][sMASK][MASK]<sop><eop>" + EOT, "<|begin_of_image|><|end_of_image|>",
        "<|user", "[gMASK", "<think", "</tool_call", "x<think>y", " <think> ",
        "IT'S it's It'Ll we'VE I'M you'D they'RE don'T", "it'ſ", "'s's's", "''s",
        "12345678901", "1 22 333 4444 55555", "3.14159e-10", "١٢٣٤٥", "１２３４５", "Ⅻ",
        "a\n\nb", "a \n b", "a\r\n\r\nb", "!!!\n\n", "   x", "x   ", "\t\tx", "\u3000x\u3000",
        "中文ABC123", "ｆｕｌｌｗｉｄｔｈ", "naïve café e\u0301", "😀😀 🙂", "a—b…c",
        "def f(x):\n    return x*2\n\n\n", "    \n\n    ", "\u00a0\u00a0x", "\u2028\u2029",
    ]


def main():
    docs = base.corpus(1, 3000)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, show_progress=False,
                             special_tokens=[AddedToken(s, special=True, normalized=False)
                                             for s in SPECIAL],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=tr)
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in MARKUP])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    d = os.path.join(base.OUT, NAME)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": EOT, "pad_token": EOT, "clean_up_tokenization_spaces": False,
                   "do_lower_case": False, "model_max_length": 202752,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, ensure_ascii=False,
                  indent=1)
    strings = base.test_strings() + glm_strings()
    cases = []
    for s in strings:
        plain = tok.encode(s, add_special_tokens=False).ids
        spec_ids = tok.encode(s, add_special_tokens=True).ids
        cases.append({"text": s, "ids": plain, "ids_special": spec_ids,
                      "decoded": tok.decode(plain, skip_special_tokens=False),
                      "decoded_skip": tok.decode(spec_ids, skip_special_tokens=True)})
    with open(os.path.join(base.OUT, f"cases_{NAME}.json"), "w", encoding="utf-8") as f:
        f.write('{"tokenizer": %s, "tokenizers_version": %s, "cases": [\n' %
                (json.dumps(NAME), json.dumps(base.TOKENIZERS_VERSION)))
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"{NAME}: {tok.get_vocab_size()} ids, {len(cases)} cases")


if __name__ == "__main__":
    main()
