#!/usr/bin/env bash
# tests/mpi/openai_api_test.sh NUMLA_BIN — `numla serve` on the tiny synth preset with the bpe1k
# tokenizer (one rank, curl + jq): completions' echo with prompt logprobs (issue 40 item 3).
#   echo      a token-id prompt with echo, logprobs 2, max_tokens 0: the tokens are the prompt's,
#             the first logprob null, the others numla run's prompt_logprobs for the same prompt
#             (within 1e-4: JSON's digits); after a plain request of the same prompt has cached
#             its blocks, all the entries still come (cached_tokens 0); a text prompt's text is
#             the prompt followed by numla run's completion; n = 2 and the stream give the same
#             entries; a bad echo is a 400 naming it
# Needs curl and jq (Debian packages); exits 77 (skipped) without them.
set -uo pipefail
bin=$1
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "$here/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exact_isa
model=$tmp/tiny
"$bin" synth --preset tiny --out "$model" --seed 9 --tokenizer "$here/../golden/tokenizer/bpe1k" \
  >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
post() { curl -s -m 60 "http://127.0.0.1:$port$1" -H 'Content-Type: application/json' -d "$2"; }
sse() { sed -n 's/^data: //p' | grep -v '^\[DONE\]$'; }

P='[17, 250, 3, 99, 400, 12, 7, 7, 301, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 200, 201]'
cat >"$tmp/ref.jsonl" <<JSONL
{"id": "plp", "prompt_tokens": $P, "max_tokens": 0, "prompt_logprobs": 2}
{"id": "txt", "prompt": "Echo me, please", "max_tokens": 4, "temperature": 0, "ignore_eos": true}
JSONL
"$bin" run --model "$model" --threads 1 --input "$tmp/ref.jsonl" --output "$tmp/ref.out" \
  2>"$tmp/run.err" || { echo "numla run failed: $(tail -3 "$tmp/run.err")"; exit 1; }
ref_lp=$(jq -c 'select(.id == "plp") | [.prompt_logprobs[] | if . == null then null else .logprob end]' "$tmp/ref.out")
ref_text=$(jq -j 'select(.id == "txt") | .text' "$tmp/ref.out")

start_server "$tmp/serve.err" "$bin" serve --model "$model" --port 0 --threads 1 || exit 1

# the prompt once without echo, so its blocks are in the prefix cache
resp=$(post /v1/completions "{\"prompt\": $P, \"max_tokens\": 1, \"temperature\": 0}")
resp=$(post /v1/completions "{\"prompt\": $P, \"max_tokens\": 0, \"echo\": true, \"logprobs\": 2,
  \"return_tokens_as_token_ids\": true}")
same_lp='def close($a; $b): ($a | length) == ($b | length) and
  ([range($a | length)] | all(. as $i | if $a[$i] == null then $b[$i] == null
   else ($b[$i] != null and (($a[$i] - $b[$i]) | fabs) < 1e-4) end));'
jq -e --argjson ref "$ref_lp" --argjson p "$P" "$same_lp
  .choices[0].logprobs as \$l | close(\$l.token_logprobs; \$ref) and
  ([\$l.tokens[] | sub(\"token_id:\"; \"\") | tonumber] == \$p) and
  (\$l.top_logprobs[0] == null) and ([\$l.top_logprobs[1:][] | length] | all(. >= 1 and . <= 2)) and
  .choices[0].finish_reason == \"length\" and .usage.completion_tokens == 0 and
  .usage.prompt_tokens_details.cached_tokens == 0" <<<"$resp" >/dev/null
check echo-prompt-logprobs $? "$resp (run: $ref_lp)"

resp=$(post /v1/completions '{"prompt": "Echo me, please", "max_tokens": 4, "temperature": 0,
  "ignore_eos": true, "echo": true}')
[ "$(jq -j '.choices[0].text' <<<"$resp")" = "Echo me, please$ref_text" ]
check echo-text $? "$resp (run: $ref_text)"

resp=$(post /v1/completions "{\"prompt\": $P, \"max_tokens\": 2, \"temperature\": 0, \"echo\": true,
  \"logprobs\": 1, \"n\": 2, \"return_tokens_as_token_ids\": true}")
jq -e --argjson ref "$ref_lp" "$same_lp (.choices | length) == 2 and
  all(.choices[]; .logprobs as \$l | (\$l.tokens | length) == ($(jq length <<<"$P") + 2) and
      close(\$l.token_logprobs[: (\$ref | length)]; \$ref))" <<<"$resp" >/dev/null
check echo-n2 $? "$resp"

resp=$(post /v1/completions "{\"prompt\": $P, \"max_tokens\": 2, \"temperature\": 0, \"echo\": true,
  \"logprobs\": 1, \"stream\": true, \"return_tokens_as_token_ids\": true}")
first=$(sse <<<"$resp" | head -1)
jq -e --argjson ref "$ref_lp" "$same_lp close(.choices[0].logprobs.token_logprobs; \$ref)" \
  <<<"$first" >/dev/null
check echo-stream $? "$resp"

resp=$(post /v1/completions '{"prompt": "a", "echo": "yes"}')
[ "$(jq -r .error.param <<<"$resp")" = echo ]; check echo-400 $? "$resp"

kill -TERM "$spid"
wait "$spid"
check serve-drains $? "$(tail -2 "$tmp/serve.err")"
echo "openai_api_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
