#!/usr/bin/env python3
"""Golden renderings of DeepSeek-V3.2's chat encoding for engine/text/chat_template_dsv32.c
(tests/golden/chat_dsv32/).

DeepSeek-V3.2 ships no Jinja chat template but Python code: encoding/encoding_dsv32.py in the
deepseek-ai/DeepSeek-V3.2 repository on Hugging Face. This script imports that file from a path
you give (it is not part of numla and is not committed) and renders conversations with
encode_messages(messages, thinking_mode="chat" | "thinking"), the request's tools put where
DeepSeek's own test puts them: on the first message when it is a system message, else on an
empty system message put in front. Writes:

  tests/golden/chat_dsv32/cases.json  {"encoding_sha256", "conversations": [{"messages",
                                       "tools"}], "renders": [{"conversation", "thinking",
                                       "text"}], "errors": [{"conversation", "thinking"}]}

    /opt/pyref/bin/python3 scripts/make_dsv32_chat_golden.py --encoding PATH/encoding_dsv32.py \
        [--out DIR]
"""
import argparse
import copy
import hashlib
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def m(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


def call(name, args, cid="call_0"):
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
    {"messages": [m("user", "2+2?"), m("assistant", "4")]},
    {"messages": [m("system", "sys"), m("user", "Weather in Oslo and Rome?"),
                  m("assistant", "", reasoning_content="Two calls.", tool_calls=[
                      call("get_weather", "{\"city\": \"Oslo\"}", "c1"),
                      call("get_weather", "{\"city\": \"Rome\", \"days\": 3}", "c2")]),
                  m("tool", "cold", tool_call_id="c1"), m("tool", "warm", tool_call_id="c2"),
                  m("assistant", "Oslo is cold, Rome warm.", reasoning_content="Summarise."),
                  m("user", "thanks")], "tools": [WEATHER, SEARCH]},
    {"messages": [m("user", "Search it"),
                  m("assistant", None, tool_calls=[call("search", json.dumps(
                      {"q": "naïve \"café\"\n", "n": 10, "f": 1.5, "tiny": 1e-07, "ok": True,
                       "none": None, "list": [1, "é", {"k": []}], "obj": {"a": {"b": 2.0}}},
                      ensure_ascii=False))]),
                  m("tool", "result {with braces}")], "tools": [SEARCH]},
    {"messages": [m("developer", "Be precise."), m("user", "q")]},
    {"messages": [m("user", "q"), m("developer", "last is a developer")]},
    {"messages": [m("user", "q"), m("narrator", "unknown role")]},
    {"messages": [m("tool", "tool first"), m("user", "q")]},
    {"messages": [m("user", "q"), m("assistant", "", tool_calls=[call("search", "{}")]),
                  m("tool", "r1"), m("tool", "one too many")]},
    {"messages": []},
    {"messages": [m("user", "q"), m("assistant", None, reasoning_content="Only a call.",
                                    tool_calls=[call("search", "{}")]),
                  m("tool", "r")]},
    {"messages": [m("system", None), m("user", "q")], "tools": [WEATHER]},
    {"messages": [m("system", "a"), m("system", "b"), m("user", "q")], "tools": []},
    {"messages": [m("user", "Grüße, 世界! 🙂 {x} {{ y }} <｜User｜> <think>")]},
    {"messages": [m("user", "q"), m("assistant", "a", reasoning_content="r1"),
                  m("assistant", "b", reasoning_content="r2"), m("user", "r"),
                  m("assistant", "<think>x</think>c", reasoning_content="")]},
    {"messages": [m("user", "first"), m("assistant", "calling", reasoning_content="r",
                                        tool_calls=[call("search", "{\"q\": \"x\"}")]),
                  m("tool", "found"), m("user", "next")], "tools": [SEARCH]},
]


def attach_tools(messages, tools):
    messages = copy.deepcopy(messages)
    if tools:
        if not (messages and messages[0]["role"] == "system"):
            messages.insert(0, {"role": "system", "content": None})
        messages[0]["tools"] = tools
    return messages


def load_encoding(path, name):
    """The encoding module at path (imported as name) and the sha256 of its file."""
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    spec = importlib.util.spec_from_file_location(name, path)
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)
    return enc, sha


def write_renders(enc, sha, conversations, attach, runs, out):
    """Renders each (conversation index, reasoning_effort or None) of runs in chat and thinking
    mode with enc.encode_messages, the conversation's tools put in by attach(messages, tools);
    an exception is recorded as an expected error. Writes out/cases.json."""
    renders, errors = [], []
    for ci, effort in runs:
        conv = conversations[ci]
        for thinking in (False, True):
            key = {"conversation": ci, "thinking": thinking}
            kw = {}
            if effort:
                key["reasoning_effort"] = effort
                kw["reasoning_effort"] = effort
            msgs = attach(conv["messages"], conv.get("tools"))
            try:
                text = enc.encode_messages(msgs, thinking_mode="thinking" if thinking else "chat",
                                           **kw)
            except Exception as e:  # noqa: BLE001 - recorded as an expected error
                print(f"conversation {ci} thinking={thinking}"
                      f"{f' effort={effort}' if effort else ''}: {type(e).__name__}: {e}",
                      file=sys.stderr)
                errors.append(key)
                continue
            renders.append(dict(key, text=text))
    os.makedirs(out, exist_ok=True)
    cases = {"encoding_sha256": sha, "conversations": conversations, "renders": renders,
             "errors": errors}
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(renders)} renders, {len(errors)} errors -> {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoding", required=True, help="DeepSeek-V3.2's encoding_dsv32.py")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "chat_dsv32"))
    args = ap.parse_args()
    enc, sha = load_encoding(args.encoding, "encoding_dsv32")
    write_renders(enc, sha, CONVERSATIONS, attach_tools,
                  [(ci, None) for ci in range(len(CONVERSATIONS))], args.out)


if __name__ == "__main__":
    main()
