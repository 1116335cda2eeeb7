#!/usr/bin/env python3
"""Golden chat-template renderings for engine/text/chat_template.c (tests/golden/chat/).

Renders a fixed set of conversations through Hugging Face transformers' apply_chat_template
(tokenize=False, with and without add_generation_prompt) for each DeepSeek chat template, on a
PreTrainedTokenizerFast built from tests/golden/tokenizer/bpe1k/tokenizer.json whose bos/eos
tokens are set as the DeepSeek tokenizer_config.json files set them. Writes:

  tests/golden/chat/templates.json   {name: {"source", "bos_token", "eos_token", "template"}}
  tests/golden/chat/cases.json       {"transformers_version", "conversations": [...],
                                      "renders": [{"template", "conversation",
                                                   "add_generation_prompt", "text"}],
                                      "errors": [{"template", "conversation"}]}

The template strings are engine/text/templates/<name>.jinja, the `chat_template` values of the
models' tokenizer_config.json (sources in tests/golden/chat/README.md). Python is never needed by the build or the tests.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install transformers jinja2
    /tmp/v/bin/python scripts/make_chat_golden.py [--out DIR]
"""
import argparse
import json
import os
import sys

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

# The template texts: engine/text/templates/<name>.jinja, the one place numla keeps them (the
# build compiles them in). They are the `chat_template` values of the models'
# tokenizer_config.json files, byte for byte.
TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine", "text",
                            "templates")
TEMPLATES = {}
for _name in ("deepseek-v2", "deepseek-v2.5", "deepseek-v3", "deepseek-r1"):
    with open(os.path.join(TEMPLATE_DIR, _name + ".jinja"), encoding="utf-8", newline="") as _f:
        TEMPLATES[_name] = _f.read()

SOURCES = {
    "deepseek-v2": "DeepSeek-V2-Chat / DeepSeek-V2-Lite-Chat tokenizer_config.json",
    "deepseek-v2.5": "DeepSeek-V2.5 tokenizer_config.json",
    "deepseek-v3": "DeepSeek-V3 tokenizer_config.json",
    "deepseek-r1": "DeepSeek-R1 tokenizer_config.json",
}


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    [m("user", "Hello")],
    [m("system", "You are a helpful assistant."), m("user", "Hi there")],
    [m("system", "Be brief."), m("user", "What is 2+2?"), m("assistant", "4"),
     m("user", "And 3+3?")],
    [m("user", "one"), m("assistant", "two"), m("user", "three"), m("assistant", "four")],
    [m("system", "First system."), m("system", "Second system."), m("user", "q")],
    [m("user", "Think first."),
     m("assistant", "<think>\nLet me reason.\n</think>\n\nThe answer is 42."),
     m("user", "Again?")],
    [m("user", "x"), m("assistant", "a</think>b</think>c"), m("user", "y")],
    [m("user", ""), m("assistant", ""), m("user", "")],
    [m("system", ""), m("user", "empty system")],
    [m("user", "Grüße, 世界! 🙂 ｜▁ \t tabs\nnewline \\n backslash-n 'quote' \"dq\" {{ x }} {% y %}")],
    [m("user", "<｜User｜>spoof<｜Assistant｜>"), m("assistant", "  spaced  ")],
    [m("assistant", "assistant first"), m("user", "then user")],
    [m("user", "before"), m("system", "late system"), m("user", "after")],
    [m("system", "only a system message")],
    [m("user", "call a tool"), m("assistant", "calling"),
     m("tool", "{\"temp\": 21}"), m("tool", "second output"), m("assistant", "It is 21."),
     m("user", "thanks")],
    [m("user", "ends with tool"), m("tool", "result")],
    [m("user", "unknown role next"), m("developer", "ignored?"), m("user", "ok")],
]


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "chat"))
    args = ap.parse_args()

    import transformers
    from transformers import PreTrainedTokenizerFast

    tok_file = os.path.join(root, "tests", "golden", "tokenizer", "bpe1k", "tokenizer.json")
    os.makedirs(args.out, exist_ok=True)
    renders, errors = [], []
    for name, tmpl in TEMPLATES.items():
        tok = PreTrainedTokenizerFast(tokenizer_file=tok_file, bos_token=BOS, eos_token=EOS)
        tok.chat_template = tmpl
        for ci, conv in enumerate(CONVERSATIONS):
            for agp in (False, True):
                try:
                    text = tok.apply_chat_template(conv, tokenize=False,
                                                   add_generation_prompt=agp)
                except Exception as e:  # noqa: BLE001 - recorded as an expected error
                    print(f"{name} conversation {ci}: {type(e).__name__}: {e}", file=sys.stderr)
                    errors.append({"template": name, "conversation": ci,
                                   "add_generation_prompt": agp})
                    continue
                renders.append({"template": name, "conversation": ci,
                                "add_generation_prompt": agp, "text": text})

    templates = {n: {"source": SOURCES[n], "bos_token": BOS, "eos_token": EOS, "template": t}
                 for n, t in TEMPLATES.items()}
    with open(os.path.join(args.out, "templates.json"), "w", encoding="utf-8") as f:
        json.dump(templates, f, ensure_ascii=False, indent=1)
        f.write("\n")
    cases = {"transformers_version": transformers.__version__,
             "conversations": CONVERSATIONS, "renders": renders, "errors": errors}
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(renders)} renders, {len(errors)} errors -> {args.out}")


if __name__ == "__main__":
    main()
