#!/usr/bin/env bash
# tests/mpi/response_format_test.sh NUMLA_BIN — response_format end to end (issue 40 item 2) on
# the tiny synth preset (random weights) with the bpe1k tokenizer. The schema bounds every
# document (an enum, a 15-digit integer, a boolean, a string of at most 5 characters), so
# whatever the model prefers, each output closes: `numla run`'s sampled requests (12 seeds,
# and a greedy one) finish with "stop" and their text parses and passes jq's check of the schema
# (written here, independent of the compiler); json_object requests that finish with "stop" are
# objects; a schema with a lookahead 'pattern' is an error record naming the field. `numla serve`: chat with
# n = 3 and completions return documents that pass the same check, finish_reason "stop"; an
# unsupported schema is a 400 with param response_format naming the keyword; tool_choice (a
# named function, "required" with one tool, streamed or not) gives one call whose arguments pass
# jq's check of the parameters, "none" no call (the Kimi K2 template, which renders tools).
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "$here/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
command -v jq >/dev/null || { echo "response_format_test: needs jq"; exit 1; }
model=$tmp/tiny
"$bin" synth --preset tiny --out "$model" --seed 9 --tokenizer "$here/../golden/tokenizer/bpe1k" \
  >/dev/null 2>&1 || { echo "synth failed"; exit 1; }

S='{"type":"object","properties":{"color":{"enum":["red","green"]},"n":{"type":"integer"},"ok":{"type":"boolean"},"s":{"type":"string","maxLength":5}},"required":["color","n","ok","s"],"additionalProperties":false}'
RF="{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"strict\":true,\"schema\":$S}}"
# the schema, checked by jq on a document's text
valid='(fromjson? // null) as $d | ($d | type) == "object" and ($d | keys) == ["color","n","ok","s"]
  and ($d.color | IN("red","green")) and ($d.n | type == "number" and . == floor)
  and ($d.ok | type == "boolean") and ($d.s | type == "string" and length <= 5)'

for seed in $(seq 1 12); do
  echo "{\"id\":\"s$seed\",\"prompt\":\"give me json $seed\",\"max_tokens\":300,\"temperature\":1,\"seed\":$seed,\"response_format\":$RF}"
done >"$tmp/req.jsonl"
cat >>"$tmp/req.jsonl" <<EOF
{"id":"greedy","prompt":"hello","max_tokens":300,"temperature":0,"response_format":$RF}
{"id":"obj1","prompt":"hello","max_tokens":60,"temperature":1,"seed":1,"response_format":{"type":"json_object"}}
{"id":"obj2","prompt":"hello","max_tokens":60,"temperature":1,"seed":2,"response_format":{"type":"json_object"}}
{"id":"text","prompt":"hello","max_tokens":5,"temperature":0,"response_format":{"type":"text"}}
{"id":"bad","prompt":"hello","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"(?=a)"}}}}
EOF
"$bin" run --model "$model" --threads 1 --input "$tmp/req.jsonl" --output "$tmp/out.jsonl" \
  2>"$tmp/run.err" || { echo "numla run failed: $(tail -3 "$tmp/run.err")"; exit 1; }

rec() { jq -c --arg id "$1" 'select(.id == $id)' "$tmp/out.jsonl"; }
for id in $(seq -f 's%g' 1 12) greedy; do
  r=$(rec "$id")
  [ "$(jq -r .finish_reason <<<"$r")" = stop ] && jq -e ".text | $valid" <<<"$r" >/dev/null
  check "run-schema-$id" $? "$r"
done
for id in obj1 obj2; do
  r=$(rec "$id")
  case "$(jq -r .finish_reason <<<"$r")" in
    stop) jq -e '.text | fromjson | type == "object"' <<<"$r" >/dev/null ;;
    length) jq -e '.text | startswith("{")' <<<"$r" >/dev/null ;;
    *) false ;;
  esac
  check "run-json-object-$id" $? "$r"
done
r=$(rec text)
[ "$(jq -r .finish_reason <<<"$r")" = length ]; check run-text $? "$r"
r=$(rec bad)
jq -e '.error | test("response_format.json_schema.schema.*.pattern.*lookaround is not supported")' <<<"$r" >/dev/null
check run-error-names-the-keyword $? "$r"

if command -v curl >/dev/null; then
  start_server "$tmp/serve.err" "$bin" serve --model "$model" --port 0 --threads 1 --chat-template kimi-k2
  check serve-ready $? "$(tail -3 "$tmp/serve.err")"
  post() { curl -s -m 120 "http://127.0.0.1:$port$1" -H 'Content-Type: application/json' -d "$2"; }
  resp=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"json please\"}],
    \"max_tokens\":300,\"temperature\":1,\"seed\":5,\"n\":3,\"response_format\":$RF}")
  [ "$(jq '.choices | length' <<<"$resp")" = 3 ] &&
    jq -e "[.choices[] | .finish_reason == \"stop\" and (.message.content | $valid)] | all" \
      <<<"$resp" >/dev/null
  check serve-chat-schema-n3 $? "$resp"
  resp=$(post /v1/completions "{\"prompt\":\"json\",\"max_tokens\":300,\"temperature\":0,
    \"response_format\":$RF}")
  jq -e ".choices[0].finish_reason == \"stop\" and (.choices[0].text | $valid)" <<<"$resp" >/dev/null
  check serve-completion-schema $? "$resp"
  resp=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],
    "response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","uniqueItems":true}}}}')
  [ "$(jq -r .error.param <<<"$resp")" = response_format ] &&
    jq -e '.error.message | test("uniqueItems")' <<<"$resp" >/dev/null
  check serve-400-names-the-keyword $? "$resp"
  resp=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}')
  [ "$(jq -r .error.param <<<"$resp")" = response_format ]; check serve-400-type $? "$resp"
  # tool_choice: a named function or "required" (one tool): the call comes back as
  # message.tool_calls (streamed: delta.tool_calls), its arguments valid for the parameters;
  # "none": the tools are rendered, no call is read out
  T='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer"}},"required":["city","days"],"additionalProperties":false}}}]'
  args='(fromjson? // null) as $a | ($a | keys) == ["city","days"] and ($a.city | type == "string" and length <= 8) and ($a.days | type == "number" and . == floor)'
  for seed in 1 2 3; do
    for tc in '"required"' '{"type":"function","function":{"name":"get_weather"}}'; do
      resp=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"weather $seed\"}],$T,
        \"tool_choice\":$tc,\"temperature\":1,\"seed\":$seed,\"max_tokens\":200}")
      jq -e ".choices[0].finish_reason == \"tool_calls\" and .choices[0].message.content == null and
        (.choices[0].message.tool_calls | length) == 1 and
        .choices[0].message.tool_calls[0].function.name == \"get_weather\" and
        (.choices[0].message.tool_calls[0].function.arguments | $args)" <<<"$resp" >/dev/null
      check "serve-tool-choice-$seed-${tc:0:6}" $? "$resp"
    done
  done
  # "required" over two tools: one call of either, its arguments valid for that tool
  T2="${T%]},{\"type\":\"function\",\"function\":{\"name\":\"flag\",\"parameters\":{\"type\":\"object\",\"properties\":{\"on\":{\"type\":\"boolean\"}},\"required\":[\"on\"],\"additionalProperties\":false}}}]"
  for seed in 1 2 3 4; do
    resp=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"any $seed\"}],$T2,
      \"tool_choice\":\"required\",\"temperature\":1,\"seed\":$seed,\"max_tokens\":200}")
    jq -e ".choices[0].finish_reason == \"tool_calls\" and (.choices[0].message.tool_calls | length) == 1 and
      (.choices[0].message.tool_calls[0].function as \$f | if \$f.name == \"flag\" then
        (\$f.arguments | fromjson | keys_unsorted == [\"on\"] and (.on | type == \"boolean\"))
       else \$f.name == \"get_weather\" and (\$f.arguments | $args) end)" <<<"$resp" >/dev/null
    check "serve-tool-choice-required-any-$seed" $? "$resp"
  done
  resp=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],$T,
    \"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"seed\":7,
    \"max_tokens\":200,\"stream\":true}")
  calls=$(sed -n 's/^data: //p' <<<"$resp" | grep -v '^\[DONE\]' | jq -c '.choices[0].delta.tool_calls // empty')
  fin=$(sed -n 's/^data: //p' <<<"$resp" | grep -v '^\[DONE\]' | jq -r '.choices[0].finish_reason // empty')
  [ "$fin" = tool_calls ] && [ "$(jq -s -r '.[0][0].function.name' <<<"$calls")" = get_weather ] &&
    jq -s -e "[.[][].function.arguments] | join(\"\") | $args" <<<"$calls" >/dev/null
  check serve-tool-choice-stream $? "$resp"
  resp=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],$T,
    \"tool_choice\":\"none\",\"max_tokens\":5,\"temperature\":0}")
  jq -e '.choices[0].finish_reason == "length" and (.choices[0].message.tool_calls == null) and
    (.choices[0].message.content | type == "string")' <<<"$resp" >/dev/null
  check serve-tool-choice-none $? "$resp"
  resp=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],$T,
    \"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}")
  [ "$(jq -r .error.param <<<"$resp")" = tool_choice ]; check serve-400-tool-choice $? "$resp"
  kill -TERM "$spid"
  wait "$spid"
  check serve-drains $? "$(tail -2 "$tmp/serve.err")"
else
  echo "numla serve part skipped: needs curl"
fi
echo "response_format_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
