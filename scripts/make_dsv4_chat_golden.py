#!/usr/bin/env python3
"""Golden renderings of DeepSeek-V4's chat encoding for engine/text/chat_template_dsv4.c
(tests/golden/chat_dsv4/).

DeepSeek-V4 (Flash and Pro) ships no Jinja chat template but Python code:
encoding/encoding_dsv4.py in the deepseek-ai/DeepSeek-V4-Flash and deepseek-ai/DeepSeek-V4-Pro
repositories on Hugging Face (the same file in both: sha256
bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0 at DeepSeek-V4-Pro revision
b5968e9190ef611bbf34a7229255be88a0e937c1 and DeepSeek-V4-Flash revision
60d8d70770c6776ff598c94bb586a859a38244f1). This script imports that file from a path you give
(it is not part of numla and is not committed; tests/golden/chat_dsv4/README.md says where the
copy that made the goldens came from) and renders the conversations of DeepSeek-V3.2's golden
set (scripts/make_dsv32_chat_golden.py) and a few that exercise what V4 does differently, with
encode_messages(messages, thinking_mode="chat" | "thinking"); the request's tools are put where
vLLM's DeepSeek-V4 tokenizer puts them: on the first message when it is a system or developer
message, else on a system message without content put in front. A few conversations (EFFORT_CASES)
are also rendered with each reasoning_effort the encoding knows ("high", "max") and one it
refuses ("low"). Writes:

  tests/golden/chat_dsv4/cases.json  {"encoding_sha256", "conversations": [{"messages",
                                      "tools"}], "renders": [{"conversation", "thinking",
                                      "reasoning_effort"?, "text"}], "errors": [{"conversation",
                                      "thinking", "reasoning_effort"?}]}

    /opt/venv/bin/python scripts/make_dsv4_chat_golden.py --encoding PATH/encoding_dsv4.py \
        [--out DIR]
"""
import argparse
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from make_dsv32_chat_golden import CONVERSATIONS as DSV32_CONVERSATIONS  # noqa: E402
from make_dsv32_chat_golden import SEARCH, WEATHER, call, load_encoding, m  # noqa: E402
from make_dsv32_chat_golden import write_renders  # noqa: E402

PUBLISHED_SHA256 = "bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0"

# What V4 renders differently from V3.2: tool results merged into user turns and sorted by
# the calls' order, runs of user messages, turns that no assistant follows, tools on a
# developer message, arguments that are not JSON, roles left out in thinking mode.
V4_CONVERSATIONS = [
    {"messages": [m("user", "Three cities"),
                  m("assistant", "", reasoning_content="Three calls.", tool_calls=[
                      call("get_weather", "{\"city\": \"Oslo\"}", "a"),
                      call("get_weather", "{\"city\": \"Rome\"}", "b"),
                      call("search", "{}", "c")]),
                  m("tool", "res c", tool_call_id="c"), m("tool", "res a", tool_call_id="a"),
                  m("tool", "res ?", tool_call_id="zzz"), m("tool", "res b", tool_call_id="b")],
     "tools": [WEATHER, SEARCH]},
    {"messages": [m("user", "one"), m("user", "two"),
                  m("assistant", "ok", reasoning_content="r"), m("user", "three")]},
    {"messages": [m("user", "q"), m("assistant", "", tool_calls=[
                      call("search", "{\"q\": 1}", "x"), call("search", "{\"q\": 2}", "y")]),
                  m("tool", "r2", tool_call_id="y"), m("tool", "r1", tool_call_id="x"),
                  m("user", "and?")]},
    {"messages": [m("user", "q"), m("system", "a late system message")]},
    {"messages": [m("system", "s"), m("user", "q"), m("system", "mid"),
                  m("assistant", "a", reasoning_content="r"), m("user", "q2")]},
    {"messages": [m("developer", "Use the tools."), m("user", "q")], "tools": [SEARCH]},
    {"messages": [m("user", "q"), m("assistant", "", tool_calls=[
                      call("search", "not json at all", "k")]),
                  m("tool", "r", tool_call_id="k")], "tools": [SEARCH]},
    {"messages": [m("narrator", "before"), m("user", "q")]},
    {"messages": [m("developer", "dev"), m("user", "q"), m("assistant", "a"),
                  m("user", "q2")]},
    {"messages": [m("user", "q"), m("assistant", "", tool_calls=[call("search", "{}", "1")]),
                  m("tool", "r", tool_call_id="1"), m("user", "follow-up text"),
                  m("assistant", "done", reasoning_content="r2")], "tools": [SEARCH]},
    {"messages": [m("user", "q"), m("assistant", "", tool_calls=[call("search", "[1, 2]")])],
     "tools": [SEARCH]},
]

CONVERSATIONS = DSV32_CONVERSATIONS + V4_CONVERSATIONS

# reasoning_effort: rendered (in thinking mode "max" puts a paragraph before the first message
# rendered) on one user message, a system message first, tools on the system message and on
# one put in front, no messages at all (nothing rendered, no paragraph), and a first message
# that thinking mode leaves out (an unknown role, a developer message before the last user
# turn); "low" is refused (an assertion in render_message), except with no messages to render.
EFFORT_CASES = [0, 1, 5, 12, 19, 26, 27]
EFFORTS = ["high", "max", "low"]


def attach_tools(messages, tools):
    messages = copy.deepcopy(messages)
    if tools:
        if messages and messages[0]["role"] in ("system", "developer"):
            messages[0]["tools"] = tools
        else:
            messages.insert(0, {"role": "system", "tools": tools})
    return messages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoding", required=True, help="DeepSeek-V4's encoding_dsv4.py")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "chat_dsv4"))
    args = ap.parse_args()
    enc, sha = load_encoding(args.encoding, "encoding_dsv4")
    if sha != PUBLISHED_SHA256:
        print(f"warning: {args.encoding} is not the published encoding_dsv4.py (sha256 {sha})",
              file=sys.stderr)
    runs = [(ci, None) for ci in range(len(CONVERSATIONS))]
    runs += [(ci, e) for ci in EFFORT_CASES for e in EFFORTS if (e, ci) != ("low", 12)]
    write_renders(enc, sha, CONVERSATIONS, attach_tools, runs, args.out)


if __name__ == "__main__":
    main()
