#!/usr/bin/env bash
# tests/mpi/response_format_test.sh NUMLA_BIN — response_format end to end (issue 40 item 2) on
# the tiny synth preset (random weights) with the bpe1k tokenizer. The schema bounds every
# document (an enum, a 15-digit integer, a boolean, a string of at most 5 characters), so
# whatever the model prefers, each output closes: `numla run`'s sampled requests (12 seeds,
# and a greedy one) finish with "stop" and their text parses and passes jq's check of the schema
# (written here, independent of the compiler); json_object requests that finish with "stop" are
# objects; a schema with 'pattern' is an error record naming the field. `numla serve`: chat with
# n = 3 and completions return documents that pass the same check, finish_reason "stop"; an
# unsupported schema is a 400 with param response_format naming the keyword.
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
valid='(fromjson? // null) as $d | ($d | type) == "object" and ($d | keys_unsorted) == ["color","n","ok","s"]
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
{"id":"bad","prompt":"hello","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a+"}}}}
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
jq -e '.error | test("response_format.json_schema.schema.*.pattern. is not supported")' <<<"$r" >/dev/null
check run-error-names-the-keyword $? "$r"

if command -v curl >/dev/null; then
  log=$tmp/serve.err
  "$bin" serve --model "$model" --port 0 --threads 1 --chat-template deepseek-v3 2>"$log" &
  spid=$!
  pids+=("$spid")
  port=
  for _ in $(seq 1 400); do
    [ -f "$log" ] && port=$(sed -nE 's/^numla serve: ready on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ]; check serve-ready $? "$(tail -3 "$log")"
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
    "response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","minimum":1}}}}')
  [ "$(jq -r .error.param <<<"$resp")" = response_format ] &&
    jq -e '.error.message | test("minimum")' <<<"$resp" >/dev/null
  check serve-400-names-the-keyword $? "$resp"
  resp=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}')
  [ "$(jq -r .error.param <<<"$resp")" = response_format ]; check serve-400-type $? "$resp"
  kill -TERM "$spid"
  wait "$spid"
  check serve-drains $? "$(tail -2 "$log")"
else
  echo "numla serve part skipped: needs curl"
fi
echo "response_format_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
