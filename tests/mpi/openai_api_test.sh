#!/usr/bin/env bash
# tests/mpi/openai_api_test.sh NUMLA_BIN — `numla serve` on the tiny synth preset with the bpe1k
# tokenizer and the deepseek-v3 chat template (one rank, curl + jq; issue 40):
#   echo      a token-id prompt with echo, logprobs 2, max_tokens 0: the tokens are the prompt's,
#             the first logprob null, the others numla run's prompt_logprobs for the same prompt
#             (within 1e-4: JSON's digits); after a plain request of the same prompt has cached
#             its blocks, all the entries still come (cached_tokens 0); a text prompt's text is
#             the prompt followed by numla run's completion; n = 2 and the stream give the same
#             entries; a bad echo is a 400 naming it
#   tokenize  /tokenize gives `numla tokenize`'s ids for a text (with and without special
#             tokens) and for messages the ids of transformers' render (tests/golden/chat), as
#             many as a chat completion's usage.prompt_tokens; /detokenize gives the text back;
#             24 concurrent /tokenize clients next to a streamed generation each get their own
#             text's ids (the tokenizer's scratch is the serving loop's alone); the 400s, 404
#             and 405
#   responses /v1/responses gives the text and usage the chat completion of the same
#             conversation gives (greedy; instructions as the system message, developer as
#             system), streamed (the deltas add up to it, response.completed last, no [DONE])
#             and not; text.format json_schema constrains it like response_format; the 400s
#             name the Responses field; /v1/embeddings is OpenAI's 404
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

start_server "$tmp/serve.err" "$bin" serve --model "$model" --port 0 --threads 1 \
  --chat-template deepseek-v3 || exit 1

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

# ---- /tokenize and /detokenize ----
ids() { "$bin" tokenize --model "$model" "$@" | tr -d ' '; }
resp=$(post /tokenize '{"prompt": "Hello world, tokenize me"}')
jq -e --argjson want "$(ids --text 'Hello world, tokenize me')" \
  '.tokens == $want and .count == ($want | length) and .max_model_len == 4096 and .token_strs == null' \
  <<<"$resp" >/dev/null
check tokenize-prompt $? "$resp"
resp=$(post /tokenize '{"model": "tiny", "prompt": "Hello world", "add_special_tokens": false,
  "return_token_strs": true}')
jq -e --argjson want "$(ids --no-special --text 'Hello world')" \
  '.tokens == $want and (.token_strs | join("")) == "Hello world"' <<<"$resp" >/dev/null
check tokenize-no-special $? "$resp"
conv=$(jq -c '.conversations[1]' "$here/../golden/chat/cases.json")
render=$(jq -j '.renders[] | select(.template == "deepseek-v3" and .conversation == 1 and
  .add_generation_prompt) | .text' "$here/../golden/chat/cases.json")
resp=$(post /tokenize "{\"messages\": $conv}")
chat=$(post /v1/chat/completions "{\"messages\": $conv, \"max_tokens\": 1}")
jq -e --argjson want "$(ids --no-special --text "$render")" --argjson chat "$chat" \
  '.tokens == $want and .count == $chat.usage.prompt_tokens' <<<"$resp" >/dev/null
check tokenize-messages $? "$resp / $chat"
render0=$(jq -j '.renders[] | select(.template == "deepseek-v3" and .conversation == 1 and
  (.add_generation_prompt | not)) | .text' "$here/../golden/chat/cases.json")
resp=$(post /tokenize "{\"messages\": $conv, \"add_generation_prompt\": false}")
jq -e --argjson want "$(ids --no-special --text "$render0")" '.tokens == $want' <<<"$resp" >/dev/null
check tokenize-messages-no-generation-prompt $? "$resp"
text='Round trip: 12 words, some ünïcödé and <｜User｜> markers.'
toks=$(post /tokenize "$(jq -nc --arg t "$text" '{prompt: $t, add_special_tokens: false}')" | jq -c .tokens)
resp=$(post /detokenize "{\"tokens\": $toks}")
[ "$(jq -j .prompt <<<"$resp")" = "$text" ]; check detokenize $? "$resp"

# concurrent clients: each text its own ids, while a stream generates
post /v1/completions '{"prompt": "busy", "max_tokens": 64, "ignore_eos": true, "stream": true}' \
  >"$tmp/busy.out" &
busy=$!
cpids=()
for i in $(seq 1 24); do
  t="client $i says $(printf 'x%.0s' $(seq 1 $i)) and $((i * 7919)) things"
  printf '%s' "$t" >"$tmp/c$i.txt"
  post /tokenize "$(jq -nc --arg t "$t" '{prompt: $t}')" >"$tmp/c$i.json" &
  cpids+=($!)
done
wait "${cpids[@]}" "$busy"
bad=0
for i in $(seq 1 24); do
  # a lean sweep (test_lib.sh) holds every sixth client to `numla tokenize` (a process each)
  sweep_lean && [ $((i % 6)) -ne 1 ] && continue
  jq -e --argjson want "$(ids --text "$(cat "$tmp/c$i.txt")")" '.tokens == $want' "$tmp/c$i.json" \
    >/dev/null || { bad=$((bad + 1)); echo "client $i: $(cat "$tmp/c$i.json")"; }
done
[ $bad -eq 0 ] && grep -q '\[DONE\]' "$tmp/busy.out"; check tokenize-concurrent $? "$bad wrong"

resp=$(post /detokenize '{"tokens": [1, 5000]}')
[ "$(jq -r .error.param <<<"$resp")" = tokens ]; check detokenize-400 $? "$resp"
resp=$(post /tokenize '{"prompt": "a", "max_tokens": 2}')
[ "$(jq -r .error.code <<<"$resp")" = unknown_field ]; check tokenize-400 $? "$resp"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 "http://127.0.0.1:$port/tokenize" -d '{"model": "other", "prompt": "a"}')
[ "$code" = 404 ]; check tokenize-404 $? "$code"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 "http://127.0.0.1:$port/tokenize")
[ "$code" = 405 ]; check tokenize-get-405 $? "$code"

# ---- /v1/responses ----
chat=$(post /v1/chat/completions '{"messages": [{"role": "system", "content": "Be brief."},
  {"role": "system", "content": "dev"}, {"role": "user", "content": "Say hi"}], "max_tokens": 6,
  "temperature": 0, "ignore_eos": true}')
want=$(jq -r '.choices[0].message.content' <<<"$chat")
resp=$(post /v1/responses '{"instructions": "Be brief.", "input": [{"role": "developer",
  "content": "dev"}, {"role": "user", "content": [{"type": "input_text", "text": "Say hi"}]}],
  "max_output_tokens": 6, "temperature": 0}')
jq -e --arg want "$want" --argjson chat "$chat" '.object == "response" and .status == "incomplete"
  and .output[0].type == "message" and .output[0].content[0].text == $want and
  .usage.input_tokens == $chat.usage.prompt_tokens and .usage.output_tokens == 6 and
  .instructions == "Be brief."' <<<"$resp" >/dev/null
check responses-as-chat $? "$resp / $chat"
resp=$(post /v1/responses '{"instructions": "Be brief.", "input": [{"role": "developer",
  "content": "dev"}, {"role": "user", "content": "Say hi"}], "max_output_tokens": 6,
  "temperature": 0, "stream": true}')
got=$(sse <<<"$resp" | jq -j 'select(.type == "response.output_text.delta") | .delta')
last=$(sse <<<"$resp" | tail -1 | jq -r .type)
[ "$got" = "$want" ] && [ "$last" = response.incomplete ] && ! grep -q '\[DONE\]' <<<"$resp" &&
  [ "$(sse <<<"$resp" | head -1 | jq -r .type)" = response.created ]
check responses-stream $? "$resp"
resp=$(post /v1/responses '{"input": "json please", "max_output_tokens": 50, "text": {"format":
  {"type": "json_schema", "name": "b", "strict": true, "schema": {"type": "object", "properties":
  {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}}},
  "temperature": 1, "top_p": 0.9}')
jq -e '(.output[0].content[0].text | fromjson | keys == ["ok"] and (.ok | type == "boolean")) and
  .status == "completed" and .top_p == 0.9 and .text.format.type == "json_schema"' <<<"$resp" >/dev/null
check responses-json-schema $? "$resp"
resp=$(post /v1/responses '{"input": "x", "max_output_tokens": 100000}')
[ "$(jq -r .error.param <<<"$resp")" = max_output_tokens ]; check responses-400-context $? "$resp"
resp=$(post /v1/responses '{"input": "x", "background": true}')
[ "$(jq -r .error.code <<<"$resp")" = unsupported_field ]; check responses-400-background $? "$resp"
code=$(curl -s -o "$tmp/emb.json" -w '%{http_code}' -m 10 "http://127.0.0.1:$port/v1/embeddings" \
  -d '{"input": "x", "model": "tiny"}')
[ "$code" = 404 ] && jq -e '.error.type == "invalid_request_error"' "$tmp/emb.json" >/dev/null
check embeddings-404 $? "$code $(cat "$tmp/emb.json")"

kill -TERM "$spid"
wait "$spid"
check serve-drains $? "$(tail -2 "$tmp/serve.err")"
echo "openai_api_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
