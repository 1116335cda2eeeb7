#!/usr/bin/env python3
"""tests/mpi/openai_e2e.py NUMLA_BIN -- `numla serve` driven by the official `openai` Python
client, as an agent framework or an evaluation harness calls it (issue 40).

Starts `numla serve` on the tiny synth preset (random weights) with the bpe1k tokenizer and the
kimi-k2-thinking chat template (it renders tools, tool calls and their results), then makes the
issue's 22 calls and their streamed variants through the client, asserting the shapes the
client parses: n = 2,
tool_choice auto / none / required / named (the forced call's arguments follow its schema, a
bounded one so the random model closes it), response_format json_object and json_schema,
presence / frequency / repetition penalties, logit_bias, min_p, logprobs with bytes, completions'
echo with prompt logprobs (lm-evaluation-harness's loglikelihood request), /v1/responses
(streamed and not, a forced function call), /tokenize and /detokenize, and the errors OpenAI
gives for what is not served: /v1/embeddings is a 404, an unknown model a 404 with
model_not_found, bad values 400s naming the field.

Exits 77 (skipped) when the python3 running it cannot import `openai`, so the default test run
needs no Python package; `/opt/venv/bin/python tests/mpi/openai_e2e.py build/numla` runs it.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import openai
except ImportError:
    print("SKIP: the openai package is not importable by", sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []
passes = 0


def check(name, cond, detail=""):
    global passes
    if cond:
        passes += 1
    else:
        failures.append(name)
        print(f"FAIL {name}: {detail}"[:2000])


def run_case(name, fn):
    """One call (or a few): an exception is a failure of that case, not of the run."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 -- any error is the case's failure
        check(name, False, f"{type(e).__name__}: {e}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    numla = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="numla-openai-")
    model = os.path.join(tmp, "tiny")
    subprocess.run([numla, "synth", "--preset", "tiny", "--out", model, "--seed", "9",
                    "--tokenizer", os.path.join(HERE, "..", "golden", "tokenizer", "bpe1k")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = open(os.path.join(tmp, "serve.err"), "w+")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    srv = subprocess.Popen([numla, "serve", "--model", model, "--port", "0", "--threads", "1",
                            "--chat-template", "kimi-k2-thinking", "--served-model-name", "tiny,tiny-alias"],
                           stdout=subprocess.DEVNULL, stderr=log, env=env)
    port = None
    for _ in range(600):
        log.seek(0)
        m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            port = int(m.group(1))
            break
        if srv.poll() is not None:
            break
        time.sleep(0.05)
    if port is None:
        log.seek(0)
        print("server did not start:", log.read()[-2000:])
        srv.kill()
        return 1
    try:
        calls(port)
    finally:
        srv.terminate()
        try:
            rc = srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            srv.kill()
            rc = -1
        check("serve-drains", rc == 0, f"exit {rc}")
    print(f"openai_e2e: {passes} passed, {len(failures)} failed")
    return 1 if failures else 0


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]},
                                                    "windy": {"type": "boolean"}},
                   "required": ["unit", "windy"], "additionalProperties": False}}}
FLAG = {"type": "function", "function": {
    "name": "flag", "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}},
                                   "required": ["on"], "additionalProperties": False}}}
SCHEMA = {"type": "object", "properties": {"color": {"enum": ["red", "green"]},
                                           "ok": {"type": "boolean"}},
          "required": ["color", "ok"], "additionalProperties": False}


def weather_args_ok(args):
    a = json.loads(args)
    return sorted(a) == ["unit", "windy"] and a["unit"] in ("c", "f") and isinstance(a["windy"], bool)


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def calls(port):
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
                      timeout=120)
    msgs = [{"role": "user", "content": "Hello there"}]

    def models():  # 1
        ids = [m.id for m in c.models.list().data]
        check("models.list", ids == ["tiny", "tiny-alias"], ids)
    run_case("models.list", models)

    def chat_plain():  # 2, and its stream
        r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=5, temperature=0)
        ch = r.choices[0]
        check("chat", r.object == "chat.completion" and ch.message.role == "assistant"
              and isinstance(ch.message.content, str) and ch.finish_reason in ("stop", "length")
              and r.usage.completion_tokens <= 5 and r.usage.total_tokens ==
              r.usage.prompt_tokens + r.usage.completion_tokens, r)
        s = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=5, temperature=0,
                                      stream=True, stream_options={"include_usage": True})
        chunks = list(s)
        text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
        check("chat-stream", text == ch.message.content and chunks[-1].usage is not None
              and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
              f"{text!r} vs {ch.message.content!r}")
    run_case("chat", chat_plain)

    def completions_plain():  # 3, and its stream
        r = c.completions.create(model="tiny-alias", prompt="Once upon", max_tokens=6,
                                 temperature=0)
        check("completions", r.object == "text_completion" and r.model == "tiny-alias"
              and isinstance(r.choices[0].text, str) and r.usage.completion_tokens <= 6, r)
        s = c.completions.create(model="tiny", prompt="Once upon", max_tokens=6, temperature=0,
                                 stream=True)
        text = "".join(k.choices[0].text for k in s if k.choices)
        check("completions-stream", text == r.choices[0].text, f"{text!r} vs {r.choices[0].text!r}")
    run_case("completions", completions_plain)

    def n2():  # 4, 5
        r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, n=2, seed=3)
        check("chat-n2", [ch.index for ch in r.choices] == [0, 1], r)
        r = c.completions.create(model="tiny", prompt=["a", "b"], max_tokens=3, n=2)
        check("completions-n2", [ch.index for ch in r.choices] == [0, 1, 2, 3], r)
        s = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, n=2, stream=True)
        seen = {k.choices[0].index for k in s if k.choices}
        check("chat-n2-stream", seen == {0, 1}, seen)
    run_case("n2", n2)

    def tools_auto():  # 6
        r = c.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER], max_tokens=5)
        ch = r.choices[0]
        check("tool-choice-auto", ch.finish_reason in ("stop", "length", "tool_calls"), r)
        # a tool-call turn and its result in the history
        hist = msgs + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"unit": "c", "windy": true}'}}]},
            {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "12 C"}]
        r = c.chat.completions.create(model="tiny", messages=hist, tools=[WEATHER], max_tokens=3)
        check("tool-history", r.choices[0].finish_reason in ("stop", "length", "tool_calls"), r)
    run_case("tool-choice-auto", tools_auto)

    def tools_forced():  # 7, 8, 9 and streamed
        for choice, name in (("required", "get_weather"),
                             ({"type": "function", "function": {"name": "get_weather"}},
                              "get_weather")):
            r = c.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER],
                                          tool_choice=choice, max_tokens=200, seed=1)
            ch = r.choices[0]
            tc = ch.message.tool_calls
            check(f"tool-choice-{'required' if choice == 'required' else 'named'}",
                  ch.finish_reason == "tool_calls" and len(tc) == 1 and tc[0].type == "function"
                  and tc[0].function.name == name and weather_args_ok(tc[0].function.arguments)
                  and ch.message.content is None, r)
        r = c.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER, FLAG],
                                      tool_choice="required", max_tokens=200, seed=2)
        tc = r.choices[0].message.tool_calls
        check("tool-choice-required-two-tools", len(tc) == 1 and tc[0].function.name in
              ("get_weather", "flag"), r)
        s = c.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER],
                                      tool_choice={"type": "function",
                                                   "function": {"name": "get_weather"}},
                                      max_tokens=200, stream=True)
        args, names, fin = "", [], None
        for k in s:
            if not k.choices:
                continue
            d = k.choices[0].delta
            for t in d.tool_calls or []:
                if t.function.name:
                    names.append(t.function.name)
                args += t.function.arguments or ""
            fin = k.choices[0].finish_reason or fin
        check("tool-choice-named-stream", names == ["get_weather"] and weather_args_ok(args)
              and fin == "tool_calls", (names, args, fin))
        r = c.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER],
                                      tool_choice="none", max_tokens=4)
        check("tool-choice-none", not r.choices[0].message.tool_calls, r)
    run_case("tool-choice-forced", tools_forced)

    def formats():  # 10, 11 and streamed
        r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=60, seed=4,
                                      response_format={"type": "json_object"})
        t = r.choices[0].message.content
        check("response-format-json-object", t.startswith("{") and
              (r.choices[0].finish_reason == "length" or isinstance(json.loads(t), dict)), t)
        rf = {"type": "json_schema", "json_schema": {"name": "c", "strict": True,
                                                      "schema": SCHEMA}}
        r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=60, seed=5,
                                      response_format=rf)
        d = json.loads(r.choices[0].message.content)
        check("response-format-json-schema", r.choices[0].finish_reason == "stop" and
              sorted(d) == ["color", "ok"] and d["color"] in ("red", "green"), r)
        s = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=60, seed=5,
                                      response_format=rf, stream=True)
        text = "".join(k.choices[0].delta.content or "" for k in s if k.choices)
        check("response-format-json-schema-stream", json.loads(text) == d, text)
        # the client's own structured-output helper parses it into a model of the schema
        r = c.chat.completions.parse(model="tiny", messages=msgs, max_tokens=60, seed=5,
                                     response_format=rf)
        check("response-format-parse", r.choices[0].message.content is not None, r)
    run_case("response-format", formats)

    def sampling():  # 12, 13, 14
        r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=4,
                                      presence_penalty=1.5, frequency_penalty=1.0, seed=1,
                                      extra_body={"repetition_penalty": 1.2, "min_p": 0.05})
        check("penalties", r.usage.completion_tokens <= 4, r)
        r = c.completions.create(model="tiny", prompt="x", max_tokens=3, temperature=0,
                                 logit_bias={"5": 100}, logprobs=1,
                                 extra_body={"return_tokens_as_token_ids": True})
        check("logit-bias", r.choices[0].logprobs.tokens == ["token_id:5"] * 3, r)
        r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, logprobs=True,
                                      top_logprobs=2)
        lp = r.choices[0].logprobs.content
        check("chat-logprobs", len(lp) == r.usage.completion_tokens and all(
            isinstance(e.token, str) and isinstance(e.bytes, list) and e.logprob <= 0 and
            len(e.top_logprobs) == 2 for e in lp), r)
        r = c.completions.create(model="tiny", prompt="x", max_tokens=3, logprobs=2, seed=7,
                                 stop=["zz"])
        l = r.choices[0].logprobs
        check("completions-logprobs", len(l.tokens) == len(l.token_logprobs) ==
              len(l.top_logprobs) == len(l.text_offset) == r.usage.completion_tokens, r)
    run_case("sampling", sampling)

    def echo():  # 15: lm-evaluation-harness's loglikelihood request
        ids = [17, 250, 3, 99, 400, 12]
        r = c.completions.create(model="tiny", prompt=[ids], echo=True, max_tokens=0,
                                 logprobs=1, temperature=0)
        l = r.choices[0].logprobs
        check("echo-logprobs", len(l.tokens) == len(ids) and l.token_logprobs[0] is None and
              all(v <= 0 for v in l.token_logprobs[1:]) and l.top_logprobs[0] is None and
              all(len(t) == 1 for t in l.top_logprobs[1:]), r)
        r2 = c.completions.create(model="tiny", prompt="The cat", echo=True, max_tokens=2,
                                  temperature=0)
        check("echo-text", r2.choices[0].text.startswith("The cat"), r2)
        s = c.completions.create(model="tiny", prompt=[ids], echo=True, max_tokens=1, logprobs=1,
                                 stream=True)
        first = next(iter(s))
        check("echo-stream", first.choices[0].logprobs.token_logprobs[0] is None, first)
    run_case("echo", echo)

    def responses():  # 16 and streamed
        r = c.responses.create(model="tiny", input="Say hi", instructions="Be brief.",
                               max_output_tokens=5, temperature=0)
        check("responses", r.object == "response" and r.status in ("completed", "incomplete")
              and isinstance(r.output_text, str) and r.usage.output_tokens <= 5, r)
        types, text, final = [], "", None
        for ev in c.responses.create(model="tiny", input="Say hi", instructions="Be brief.",
                                     max_output_tokens=5, temperature=0, stream=True):
            types.append(ev.type)
            if ev.type == "response.output_text.delta":
                text += ev.delta
            if ev.type in ("response.completed", "response.incomplete"):
                final = ev.response
        check("responses-stream", types[0] == "response.created" and final is not None and
              text == r.output_text == final.output_text, (types, text))
        r = c.responses.create(model="tiny", input=[{"role": "user", "content": "weather?"}],
                               tools=[{"type": "function", "name": "get_weather",
                                       "parameters": WEATHER["function"]["parameters"]}],
                               tool_choice={"type": "function", "name": "get_weather"},
                               max_output_tokens=200)
        fc = [o for o in r.output if o.type == "function_call"]
        check("responses-function-call", len(fc) == 1 and fc[0].name == "get_weather" and
              weather_args_ok(fc[0].arguments), r)
        r = c.responses.create(model="tiny", max_output_tokens=60, input="json", text={
            "format": {"type": "json_schema", "name": "c", "schema": SCHEMA, "strict": True}})
        check("responses-json-schema", sorted(json.loads(r.output_text)) == ["color", "ok"], r)
    run_case("responses", responses)

    def tokenize():
        st, t = post(port, "/tokenize", {"model": "tiny", "prompt": "Hello world"})
        st2, d = post(port, "/detokenize", {"model": "tiny", "tokens": t["tokens"][1:]})
        check("tokenize", st == 200 and t["count"] == len(t["tokens"]) and st2 == 200 and
              d["prompt"] == "Hello world", (t, d))
    run_case("tokenize", tokenize)

    def errors():  # 17..22: what OpenAI also refuses, with its error shape
        try:
            c.embeddings.create(model="tiny", input="x")
            check("embeddings-404", False, "no error")
        except openai.NotFoundError as e:
            check("embeddings-404", e.status_code == 404 and "message" in e.body, e.body)
        try:
            c.chat.completions.create(model="gpt-4o", messages=msgs, max_tokens=1)
            check("unknown-model-404", False, "no error")
        except openai.NotFoundError as e:
            check("unknown-model-404", e.code == "model_not_found" and e.param == "model", e.body)
        for name, kw, param in (
                ("n-0", dict(n=0), "n"),
                ("bad-temperature", dict(temperature=-1), "temperature"),
                ("tool-choice-undeclared", dict(tools=[WEATHER], tool_choice={
                    "type": "function", "function": {"name": "nope"}}), "tool_choice"),
                ("schema-unsupported", dict(response_format={"type": "json_schema", "json_schema": {
                    "name": "x", "schema": {"type": "object", "not": {}}}}), "response_format")):
            try:
                c.chat.completions.create(model="tiny", messages=msgs, max_tokens=1, **kw)
                check(f"400-{name}", False, "no error")
            except openai.BadRequestError as e:
                check(f"400-{name}", e.status_code == 400 and e.param == param, e.body)
        try:
            c.responses.create(model="tiny", input="x", previous_response_id="resp_1")
            check("400-previous-response-id", False, "no error")
        except openai.BadRequestError as e:
            check("400-previous-response-id", e.param == "previous_response_id", e.body)
    run_case("errors", errors)


if __name__ == "__main__":
    sys.exit(main())
