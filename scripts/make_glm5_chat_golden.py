#!/usr/bin/env python3
"""Golden chat-template renderings for the GLM-5 template of engine/text/chat_template_glm.c
(tests/golden/chat_glm5/).

Renders conversations (system prompts, multi-turn, reasoning_content and <think> inside content,
tool declarations, tool calls with object arguments, runs of tool results, null contents,
non-ASCII and Unicode whitespace) through Hugging Face transformers' apply_chat_template
(tokenize=False) with add_generation_prompt off and on, enable_thinking absent / true / false
and clear_thinking absent / false. Writes:

  tests/golden/chat_glm5/templates.json  {"glm-5": {"source", "bos_token", "eos_token",
                                          "template"}}
  tests/golden/chat_glm5/cases.json      {"transformers_version", "conversations": [{"messages",
                                          "tools"}], "renders": [{"conversation",
                                          "add_generation_prompt", "enable_thinking",
                                          "clear_thinking", "text"}], "errors": [same keys
                                          without "text"]}

enable_thinking / clear_thinking are null when not passed. The template text is
engine/text/templates/glm-5.jinja (where it comes from: tests/golden/chat_glm5/README.md). Python
is never needed by the build or the tests.

    /opt/pyref/bin/python3 scripts/make_glm5_chat_golden.py [--out DIR]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EOS = "<|endoftext|>"


def m(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


def call(name, args, cid=None):
    c = {"type": "function", "function": {"name": name, "arguments": args}}
    if cid:
        c["id"] = cid
    return c


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather — für eine Stadt, 天气",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search \"quoted\"\n",
                                           "parameters": {"type": "object", "properties": {}}}}

CONVERSATIONS = [
    {"messages": [m("user", "Hello")]},
    {"messages": [m("system", "You are terse."), m("user", "Hi there")]},
    {"messages": [m("user", "2+2?"), m("assistant", "4", reasoning_content="Add them."),
                  m("user", "3+3?")]},
    {"messages": [m("user", "2+2?"), m("assistant", " 4 \n", reasoning_content="\n Add them. \n")]},
    {"messages": [m("user", "x"), m("assistant", "<think>\nr1\n</think>\n\nanswer"),
                  m("user", "y"), m("assistant", "a<think>\n\nr2\n\n</think>b</think>\n\nc")]},
    {"messages": [m("user", "Weather in Paris?"),
                  m("assistant", "Let me check.", reasoning_content="Need the tool.", tool_calls=[
                      call("get_weather", {"city": "Paris", "days": 2}, "call_1")]),
                  m("tool", "{\"temp\": 21}", tool_call_id="call_1"),
                  m("assistant", "It is 21 °C.", reasoning_content="The tool said 21."),
                  m("user", "thanks")], "tools": [WEATHER]},
    {"messages": [m("system", "sys"), m("user", "Two cities"),
                  m("assistant", "", reasoning_content="Two calls.", tool_calls=[
                      call("get_weather", {"city": "Oslo"}),
                      call("get_weather", {"city": "Rome", "days": 3, "opts": [1.5, True, None,
                                                                                "é\n\"q\""]})]),
                  m("tool", "cold"), m("tool", "warm")], "tools": [WEATHER, SEARCH]},
    {"messages": [m("user", "call"), m("assistant", None, tool_calls=[call("search", {})])],
     "tools": [SEARCH]},
    {"messages": [m("user", "Grüße, 世界! 🙂 \t tabs\nnewline {{ x }} {% y %} <|user|>")]},
    {"messages": []},
    {"messages": [m("assistant", "assistant first"), m("tool", "result")]},
    {"messages": [m("user", "unknown role next"), m("developer", "ignored?"), m("user", "ok")]},
    {"messages": [m("system", "a"), m("system", "b"), m("user", "q")], "tools": []},
    {"messages": [m("user", "q"), m("assistant", "a"), m("assistant", "b"), m("user", "r")]},
    {"messages": [m("user", None), m("system", None), m("assistant", None), m("tool", None),
                  m("tool", "after null")]},
    {"messages": [m("user", "q"), m("assistant", "\u3000\u00a0answer\u2003\n",
                                    reasoning_content="\u2009why\u3000")]},
    {"messages": [m("user", "q"), m("assistant", "kept</think>as is", reasoning_content=""),
                  m("assistant", "", reasoning_content="   ")]},
    {"messages": [m("user", "q"), m("tool", "r1"), m("user", "again"), m("tool", "r2"),
                  m("tool", "r3")]},
    {"messages": [m("user", "q"), m("tool", "r1"), m("tool", None), m("tool", "r3")]},
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "chat_glm5"))
    args = ap.parse_args()
    import transformers
    from transformers import PreTrainedTokenizerFast

    tok_file = os.path.join(ROOT, "tests", "golden", "tokenizer", "bpe1k", "tokenizer.json")
    with open(os.path.join(ROOT, "engine", "text", "templates", "glm-5.jinja"), encoding="utf-8", newline="") as f:
        tmpl = f.read()
    tok = PreTrainedTokenizerFast(tokenizer_file=tok_file, eos_token=EOS)
    tok.chat_template = tmpl
    os.makedirs(args.out, exist_ok=True)
    renders, errors = [], []
    for ci, conv in enumerate(CONVERSATIONS):
        for agp in (False, True):
            for think in (None, True, False):
                for clear in (None, False):
                    key = {"conversation": ci, "add_generation_prompt": agp,
                           "enable_thinking": think, "clear_thinking": clear}
                    kw = {}
                    if think is not None:
                        kw["enable_thinking"] = think
                    if clear is not None:
                        kw["clear_thinking"] = clear
                    try:
                        text = tok.apply_chat_template(conv["messages"], tools=conv.get("tools"),
                                                       tokenize=False, add_generation_prompt=agp,
                                                       **kw)
                    except Exception as e:  # noqa: BLE001 - recorded as an expected error
                        print(f"conversation {ci}: {type(e).__name__}: {e}", file=sys.stderr)
                        errors.append(key)
                        continue
                    renders.append(dict(key, text=text))
    templates = {"glm-5": {"source": "zai-org/GLM-5 chat_template.jinja", "bos_token": None,
                           "eos_token": EOS, "template": tmpl}}
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
