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

The template strings are the `chat_template` values of the models' tokenizer_config.json
(sources in tests/golden/chat/README.md). Python is never needed by the build or the tests.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install transformers jinja2
    /tmp/v/bin/python scripts/make_chat_golden.py [--out DIR]
"""
import argparse
import json
import os
import sys

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

# DeepSeek-V2-Chat / DeepSeek-V2-Lite-Chat: the '\n\n' literals hold real newlines (the JSON
# file writes them as \n escapes of the JSON string).
V2 = ("{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
      "{% endif %}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
      "{{ 'User: ' + message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}"
      "{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
      "{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
      "{{ 'Assistant:' }}{% endif %}")

# DeepSeek-V2.5 (and DeepSeek-Coder-V2-Instruct): Jinja '\n' escapes (backslash, n) inside the
# literals, and runs of spaces between the tags.
V2_5 = (r"{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
        r"{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, "
        r"system_prompt='') %}{%- for message in messages %}    {%- if message['role'] == "
        r"'system' %}        {% set ns.system_prompt = message['content'] %}    {%- endif %}"
        r"{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}    "
        r"{%- if message['role'] == 'user' %}    {%- set ns.is_tool = false -%}{{'<｜User｜>' + "
        r"message['content']}}    {%- endif %}    {%- if message['role'] == 'assistant' and "
        r"message['content'] is none %}        {%- set ns.is_tool = false -%}        {%- for "
        r"tool in message['tool_calls']%}            {%- if not ns.is_first %}{{'<｜Assistant｜>"
        r"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
        r"tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + "
        r"'\n' + '```' + '<｜tool▁call▁end｜>'}}            {%- set ns.is_first = true -%}      "
        r"      {%- else %}{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
        r"tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + "
        r"'\n' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}  "
        r"                 {%- endif %}        {%- endfor %}    {%- endif %}    {%- if "
        r"message['role'] == 'assistant' and message['content'] is not none %}        {%- if "
        r"ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
        r"        {%- set ns.is_tool = false -%}        {%- else %}{{'<｜Assistant｜>' + "
        r"message['content'] + '<｜end▁of▁sentence｜>'}}        {%- endif %}    {%- endif %}    "
        r"{%- if message['role'] == 'tool' %}        {%- set ns.is_tool = true -%}        {%- if "
        r"ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + "
        r"message['content'] + '<｜tool▁output▁end｜>'}}        {%- set ns.is_output_first = "
        r"false %}        {%- else %}{{'\n<｜tool▁output▁begin｜>' + message['content'] + "
        r"'<｜tool▁output▁end｜>'}}        {%- endif %}    {%- endif %}{%- endfor -%}{% if "
        r"ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not "
        r"ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}")

# DeepSeek-V3 (December 2024 release).
V3 = (r"{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
      r"{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, "
      r"system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if "
      r"message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = "
      r"ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}"
      r"{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{%- endif %}"
      r"{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}"
      r"{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + "
      r"message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and "
      r"message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in "
      r"message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜>"
      r"<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + "
      r"'\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + "
      r"'<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n' + "
      r"'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + "
      r"'\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + "
      r"'<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}"
      r"{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] "
      r"is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + "
      r"'<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{{'<｜Assistant｜>' + "
      r"message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if "
      r"message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
      r"{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + "
      r"'<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}"
      r"{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"
      r"{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}"
      r"{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}"
      r"{% endif %}")

# DeepSeek-R1 (the revision whose generation prompt opens "<think>\n").
R1 = (r"{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
      r"{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, "
      r"system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if "
      r"message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = "
      r"ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}"
      r"{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{%- endif %}"
      r"{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in "
      r"messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}"
      r"{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' "
      r"and 'tool_calls' in message %}{%- set ns.is_tool = false -%}{%- for tool in "
      r"message['tool_calls'] %}{%- if not ns.is_first %}{%- if message['content'] is none %}"
      r"{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
      r"'<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + "
      r"tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- else %}"
      r"{{'<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + "
      r"tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + "
      r"tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- endif %}"
      r"{%- set ns.is_first = true -%}{%- else %}{{'\n' + '<｜tool▁call▁begin｜>' + "
      r"tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + "
      r"tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- endif %}"
      r"{%- endfor %}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- if "
      r"message['role'] == 'assistant' and 'tool_calls' not in message %}{%- if ns.is_tool %}"
      r"{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set "
      r"ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}{% if '</think>' "
      r"in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
      r"{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if "
      r"message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
      r"{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + "
      r"'<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}"
      r"{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}"
      r"{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
      r"{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}"
      r"{% endif %}")

TEMPLATES = {
    "deepseek-v2": V2,
    "deepseek-v2.5": V2_5,
    "deepseek-v3": V3,
    "deepseek-r1": R1,
}

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
