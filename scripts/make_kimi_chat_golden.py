#!/usr/bin/env python3
"""Golden chat-template renderings for the Kimi K2 / K2-Thinking and DeepSeek-V3.1 templates of
engine/text/chat_template.c (tests/golden/chat_kimi/).

Renders conversations with tool declarations, tool calls, tool results, names, reasoning_content
and V3.1's `thinking` switch through Hugging Face transformers' apply_chat_template
(tokenize=False, with and without add_generation_prompt), as scripts/make_chat_golden.py does for
the DeepSeek ones. Writes:

  tests/golden/chat_kimi/templates.json  {name: {"source", "bos_token", "eos_token", "template"}}
  tests/golden/chat_kimi/cases.json      {"transformers_version", "conversations": [{"messages",
                                          "tools"}], "renders": [{"template", "conversation",
                                          "add_generation_prompt", "thinking", "text"}],
                                          "errors": [same keys without "text"]}

The template texts are in engine/text/templates/*.jinja (where they come from:
tests/golden/chat_kimi/README.md). Python is never needed by the build or the tests.

    /opt/pyref/bin/python3 scripts/make_kimi_chat_golden.py [--out DIR]
"""
import argparse
import json
import os
import sys

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TEMPLATES = {
    "kimi-k2": ("kimi-k2.jinja", "moonshotai/Kimi-K2-Instruct chat template (first release)",
                "[BOS]", "[EOS]"),
    "kimi-k2-thinking": ("kimi-k2-thinking.jinja", "moonshotai/Kimi-K2-Thinking chat template",
                         "[BOS]", "[EOS]"),
    "deepseek-v3.1": ("deepseek-v3.1.jinja", "deepseek-ai/DeepSeek-V3.1 chat template", BOS, EOS),
}


def m(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


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
    {"messages": [m("user", "2+2?"), m("assistant", "4", reasoning_content="Add them.")]},
    {"messages": [m("user", "Weather in Paris?"),
                  m("assistant", "Let me check.", tool_calls=[
                      call("functions.get_weather:0", "get_weather", "{\"city\": \"Paris\"}")]),
                  m("tool", "{\"temp\": 21}", tool_call_id="functions.get_weather:0",
                    name="get_weather"),
                  m("assistant", "It is 21 °C.", reasoning_content="The tool said 21."),
                  m("user", "thanks")], "tools": [WEATHER]},
    {"messages": [m("system", "sys"), m("user", "Two cities"),
                  m("assistant", "", reasoning_content="Need two calls.", tool_calls=[
                      call("functions.get_weather:0", "get_weather", "{\"city\": \"Oslo\"}"),
                      call("functions.get_weather:1", "get_weather", "{\"city\": \"Rome\"}")]),
                  m("tool", "cold", tool_call_id="functions.get_weather:0"),
                  m("tool", "warm", tool_call_id="functions.get_weather:1")],
     "tools": [WEATHER, SEARCH]},
    {"messages": [m("user", "call"), m("assistant", None, tool_calls=[
        call("functions.search:0", "search", "{}")])], "tools": [SEARCH]},
    {"messages": [m("user", "hi", name="alice"), m("assistant", "hello", name="kimi"),
                  m("user", "bye")]},
    {"messages": [m("user", "x"), m("assistant", "<think>r</think>a</think>b"), m("user", "y")]},
    {"messages": [m("user", "Grüße, 世界! 🙂 \t tabs\nnewline {{ x }} {% y %} <|im_end|>")]},
    {"messages": []},
    {"messages": [m("assistant", "assistant first"), m("tool", "result")]},
    {"messages": [m("user", "unknown role next"), m("developer", "ignored?"), m("user", "ok")]},
    {"messages": [m("system", "a"), m("system", "b"), m("user", "q")], "tools": [WEATHER]},
    {"messages": [m("user", "q"), m("assistant", "a"), m("assistant", "b"), m("user", "r")]},
    {"messages": [m("user", "q"), m("assistant", None)]},
    # conversation 6 with "" for its null content: transformers 5 drops null-valued keys, so
    # DeepSeek-V3.1's `message['content'] is none` meets an undefined value and fails; numla
    # renders null as the template means it (nothing), which is this conversation's text
    {"messages": [m("user", "call"), m("assistant", "", tool_calls=[
        call("functions.search:0", "search", "{}")])], "tools": [SEARCH]},
]
CONVERSATIONS[6]["null_content_twin"] = 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "chat_kimi"))
    args = ap.parse_args()
    import transformers
    from transformers import PreTrainedTokenizerFast

    tok_file = os.path.join(ROOT, "tests", "golden", "tokenizer", "bpe1k", "tokenizer.json")
    os.makedirs(args.out, exist_ok=True)
    renders, errors, templates = [], [], {}
    for name, (file, source, bos, eos) in TEMPLATES.items():
        with open(os.path.join(HERE, "..", "engine", "text", "templates", file), encoding="utf-8", newline="") as f:
            tmpl = f.read()
        templates[name] = {"source": source, "bos_token": bos, "eos_token": eos,
                           "template": tmpl}
        tok = PreTrainedTokenizerFast(tokenizer_file=tok_file, bos_token=bos, eos_token=eos)
        tok.chat_template = tmpl
        for ci, conv in enumerate(CONVERSATIONS):
            for agp in (False, True):
                for thinking in (False, True):
                    key = {"template": name, "conversation": ci, "add_generation_prompt": agp,
                           "thinking": thinking}
                    try:
                        text = tok.apply_chat_template(conv["messages"], tools=conv.get("tools"),
                                                       tokenize=False, add_generation_prompt=agp,
                                                       thinking=thinking)
                    except Exception as e:  # noqa: BLE001 - recorded as an expected error
                        print(f"{name} conversation {ci}: {type(e).__name__}: {e}",
                              file=sys.stderr)
                        errors.append(key)
                        continue
                    renders.append(dict(key, text=text))
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
