#!/usr/bin/env bash
# tests/mpi/http_serve_test.sh NUMLA_BIN MODE [MPIEXEC [NUMLA_FAULTY]] — `numla serve` end to end
# with curl on an ephemeral 127.0.0.1 port, on the tiny synth preset with the bpe1k tokenizer.
#   one    one rank: completions (text and token-id prompts) and chat (the golden transformers
#          renders of tests/golden/chat/cases.json, tokenized without special tokens), streamed
#          and not, give the token ids `numla run` gives on the same greedy requests; a stop
#          string cuts the text as `numla run` does; 32 concurrent clients all complete with
#          run's tokens; clients that disconnect mid-stream free their KV blocks (/metrics);
#          400 (unknown field, n > 1, prompt / messages longer than the context), 401, 413,
#          429 with Retry-After; SIGTERM drains the streams in flight, then exit 0; a
#          tiny-kimi model (tiktoken tokenizer, kimi-k2-thinking template) chats with run's
#          tokens on transformers' renders (tools, tool calls and results too) and answers with
#          reasoning_content; tools and thinking on the deepseek-v3 template are 400s
#   ranks  2 ranks under MPIEXEC give run's tokens and drain on SIGTERM; with NUMLA_FAULTY a
#          worker rank that SIGKILLs itself ends the server (no client hangs)
# Needs curl and jq (Debian packages); exits 77 (skipped) without them.
set -uo pipefail
bin=$1 mode=$2 mpiexec=${3:-} faulty=${4:-}
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
golden=$here/../golden
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "$(dirname "$0")/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exact_isa
model=$tmp/tiny
"$bin" synth --preset tiny --out "$model" --seed 9 --tokenizer "$golden/tokenizer/bpe1k" \
  >/dev/null 2>&1 || { echo "synth failed"; exit 1; }

post() { curl -s -m 60 "http://127.0.0.1:$port$1" -H 'Content-Type: application/json' -d "$2"; }
# tokens of a non-streamed response / of an SSE stream (logprobs "token_id:N" entries: the
# requests ask for return_tokens_as_token_ids)
# (completions: logprobs.tokens; chat: logprobs.content[].token)
lp_tokens='.choices[0].logprobs | (.tokens // [.content[]?.token]) | .[] | sub("token_id:"; "")'
resp_tokens() { jq -r "[$lp_tokens] | join(\",\")"; }
sse_tokens() {
  sed -n 's/^data: //p' | grep -v '^\[DONE\]$' |
    jq -r "select(.choices[0].logprobs != null) | $lp_tokens" | paste -sd, -
}
sse_text() { sed -n 's/^data: //p' | grep -v '^\[DONE\]$' | jq -j '.choices[0].text // .choices[0].delta.content // ""'; }
metric() { curl -s -m 10 "http://127.0.0.1:$port/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
# run_tokens FILE.jsonl: "id tokens" of numla run's results
run_ref() { # run_ref IN OUT [numla run prefix...]
  local in=$1 out=$2; shift 2
  "$@" "$bin" run --model "$model" --threads 1 --input "$in" --output "$out" 2>"$out.err" ||
    { echo "numla run failed: $(tail -3 "$out.err")"; return 1; }
}
run_tok() { jq -r --arg id "$2" 'select(.id == $id) | .output_tokens | map(tostring) | join(",")' "$1"; }
run_text() { jq -j --arg id "$2" 'select(.id == $id) | .text' "$1"; }

# the golden chat renders (transformers' apply_chat_template) of conversations 1 and 2, as ids
chat_ids() { # chat_ids CONVERSATION -> ids of the deepseek-v3 render with the generation prompt
  local text
  text=$(jq -j --argjson c "$1" '.renders[] | select(.template == "deepseek-v3" and
         .conversation == $c and .add_generation_prompt) | .text' "$golden/chat/cases.json")
  "$bin" tokenize --model "$model" --no-special --text "$text" | tr -d '[] '
}
chat_msgs() { jq -c --argjson c "$1" '.conversations[$c]' "$golden/chat/cases.json"; }

# The shared reference requests: text prompts, token prompts, chats. Each "id" is run by numla run.
make_refs() {
  : >"$tmp/ref.jsonl"
  for i in 0 1 2; do
    echo "{\"id\": \"t$i\", \"prompt\": \"Hello number $i, tell me\", \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}"
  done >>"$tmp/ref.jsonl"
  for i in $(seq 0 31); do
    awk -v i="$i" 'BEGIN { srand(100 + i); n = 1 + int(rand() * 40); s = "";
      for (t = 0; t < n; t++) s = s (t ? "," : "") 1 + int(rand() * 500);
      print "{\"id\": \"k" i "\", \"prompt_tokens\": [" s "], \"max_tokens\": " 1 + i % 8 ", \"temperature\": 0, \"ignore_eos\": true}" }'
  done >>"$tmp/ref.jsonl"
  for c in 1 2; do
    echo "{\"id\": \"c$c\", \"prompt_tokens\": [$(chat_ids $c)], \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}"
  done >>"$tmp/ref.jsonl"  # n = 2 over two prompts with a seed: choice j of prompt p is numla run's request with seed + j
  # (temperature 30: the tiny model is so sure of its tokens that other seeds agree below it)
  for p in 0 1; do
    for j in 0 1; do
      echo "{\"id\": \"n$p$j\", \"prompt_tokens\": $([ $p = 0 ] && echo '[5, 6, 7]' || echo '[8, 9]'), \"max_tokens\": 6, \"temperature\": 30, \"seed\": $((11 + j)), \"ignore_eos\": true}"
    done
  done >>"$tmp/ref.jsonl"
}
# completions body of reference request ID (from ref.jsonl), with extra fields
body_of() { # body_of ID EXTRA_JSON
  jq -c --arg id "$1" --argjson x "$2" 'select(.id == $id) |
    {prompt: (.prompt // .prompt_tokens), max_tokens, temperature, ignore_eos,
     return_tokens_as_token_ids: true} + $x' "$tmp/ref.jsonl"
}

# same_tokens TAG: every reference request through the server (non-streamed and streamed)
same_tokens() {
  local tag=$1 id want got
  for id in t0 t1 k3 k7; do
    want=$(run_tok "$tmp/ref.out" "$id")
    got=$(post /v1/completions "$(body_of "$id" '{"logprobs": 0}')" | resp_tokens)
    [ -n "$want" ] && [ "$got" = "$want" ]; check "$tag-completion-$id" $? "got '$got' want '$want'"
    got=$(post /v1/completions "$(body_of "$id" '{"logprobs": 0, "stream": true}')" | sse_tokens)
    [ "$got" = "$want" ]; check "$tag-completion-stream-$id" $? "got '$got' want '$want'"
  done
  want=$(run_text "$tmp/ref.out" t0)
  got=$(post /v1/completions "$(body_of t0 '{}')" | jq -j '.choices[0].text')
  [ "$got" = "$want" ]; check "$tag-completion-text" $? "got '$got' want '$want'"
  # n choices per prompt: prompt index x n + j, each with the seed + j of numla run's request
  want=$(for id in n00 n01 n10 n11; do run_tok "$tmp/ref.out" "$id"; done | paste -sd' ' -)
  got=$(post /v1/completions '{"prompt": [[5, 6, 7], [8, 9]], "n": 2, "max_tokens": 6, "temperature": 30,
        "seed": 11, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true}' |
        jq -r '[.choices | sort_by(.index)[] | [.logprobs.tokens[] | sub("token_id:"; "")] | join(",")] | join(" ")')
  [ -n "$want" ] && [ "$got" = "$want" ] && [ "$(cut -d' ' -f1 <<<"$want")" != "$(cut -d' ' -f2 <<<"$want")" ]
  check "$tag-completion-n" $? "got '$got' want '$want'"
  # without return_tokens_as_token_ids logprobs name tokens by their text and bytes, as OpenAI does
  got=$(post /v1/chat/completions "$(jq -nc --argjson m "$(chat_msgs 1)" '{messages: $m, max_tokens: 4,
        temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2}')" |
        jq -c '[.choices[0].logprobs.content[] | (.token | startswith("token_id:") | not) and
                (.bytes | type == "array" and length > 0) and (.top_logprobs | length == 2)] | all')
  [ "$got" = true ]; check "$tag-chat-logprob-text" $? "got '$got'"
  for c in 1 2; do
    want=$(run_tok "$tmp/ref.out" "c$c")
    local b
    b=$(jq -nc --argjson m "$(chat_msgs $c)" '{messages: $m, max_tokens: 8, temperature: 0,
        ignore_eos: true, logprobs: true, return_tokens_as_token_ids: true}')
    got=$(post /v1/chat/completions "$b" | resp_tokens)
    [ -n "$want" ] && [ "$got" = "$want" ]; check "$tag-chat-$c" $? "got '$got' want '$want'"
    got=$(post /v1/chat/completions "$(jq -c '. + {stream: true}' <<<"$b")" | sse_tokens)
    [ "$got" = "$want" ]; check "$tag-chat-stream-$c" $? "got '$got' want '$want'"
  done
}

make_refs
run_ref "$tmp/ref.jsonl" "$tmp/ref.out" || exit 1

if [ "$mode" = one ]; then
  start_server "$tmp/s1.err" "$bin" serve --model "$model" --port 0 --threads 1 \
    --chat-template deepseek-v3 --max-seqs 32 --max-batch-tokens 512 || exit 1
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]
  check health $? "not 200 when ready"
  grep -q "listening on 127.0.0.1 port $port; loading" "$tmp/s1.err"
  check listening-before-load $? "$(head -2 "$tmp/s1.err")"
  same_tokens one

  # a stop string: the text ends before it, as numla run cuts it
  full=$(run_text "$tmp/ref.out" t1)
  stop=${full:3:2}
  if [ ${#stop} -eq 2 ]; then
    jq -c --arg s "$stop" 'select(.id == "t1") | . + {id: "s1", stop: [$s]}' "$tmp/ref.jsonl" >"$tmp/stop.jsonl"
    run_ref "$tmp/stop.jsonl" "$tmp/stop.out"
    want=$(run_text "$tmp/stop.out" s1)
    r=$(post /v1/completions "$(body_of t1 "$(jq -nc --arg s "$stop" '{stop: [$s]}')")")
    got=$(jq -j '.choices[0].text' <<<"$r")
    [ "$got" = "$want" ] && [ "$(jq -r '.choices[0].finish_reason' <<<"$r")" = stop ]
    check stop-string $? "got '$got' want '$want' ($r)"
  fi

  # 32 concurrent clients, each a reference request
  for i in $(seq 0 31); do
    post /v1/completions "$(body_of "k$i" '{"logprobs": 0}')" >"$tmp/c$i.json" &
  done
  wait $(jobs -p | grep -v "^$spid$") 2>/dev/null
  bad=0
  for i in $(seq 0 31); do
    [ "$(resp_tokens <"$tmp/c$i.json")" = "$(run_tok "$tmp/ref.out" "k$i")" ] || bad=$((bad + 1))
  done
  [ $bad -eq 0 ]; check concurrent-32 $? "$bad of 32 differ: $(head -c 300 "$tmp/c0.json")"

  # errors end to end
  code() { curl -s -o "$tmp/e.json" -w '%{http_code}' -m 30 "$@"; }
  c=$(code "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "x", "bogus": 1}')
  [ "$c" = 400 ] && grep -q '"param":"bogus"' "$tmp/e.json"; check err-unknown-field $? "$c $(cat "$tmp/e.json")"
  c=$(code "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "x", "n": 0}')
  [ "$c" = 400 ] && grep -q '"param":"n"' "$tmp/e.json"; check err-n $? "$c $(cat "$tmp/e.json")"
  long=$(awk 'BEGIN { for (i = 0; i < 3000; i++) printf "word%d ", i }')
  c=$(code "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\": \"$long\", \"max_tokens\": 1}")
  [ "$c" = 400 ] && grep -q '"param":"prompt"' "$tmp/e.json" && grep -q 'context' "$tmp/e.json"
  check err-prompt-too-long $? "$c $(head -c 300 "$tmp/e.json")"
  c=$(code "http://127.0.0.1:$port/v1/chat/completions" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"$long\"}]}")
  [ "$c" = 400 ] && grep -q '"param":"messages"' "$tmp/e.json"
  check err-messages-too-long $? "$c $(head -c 300 "$tmp/e.json")"
  # what the deepseek-v3 template cannot render: 400 naming the field and the template
  c=$(code "http://127.0.0.1:$port/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}')
  [ "$c" = 400 ] && grep -q '"param":"tools"' "$tmp/e.json" && grep -q 'deepseek-v3 chat template' "$tmp/e.json"
  check err-tools-template $? "$c $(head -c 300 "$tmp/e.json")"
  c=$(code "http://127.0.0.1:$port/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"thinking": true}}')
  [ "$c" = 400 ] && grep -q '"param":"chat_template_kwargs.thinking"' "$tmp/e.json"
  check err-thinking-template $? "$c $(head -c 300 "$tmp/e.json")"

  # clients that leave mid-stream: their requests are cancelled and their KV blocks freed
  for i in 1 2 3 4; do
    curl -sN -m 60 "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\": [$i, 5, 9], \"max_tokens\": 4000, \"temperature\": 0, \"ignore_eos\": true, \"stream\": true}" |
      head -c 400 >/dev/null &
  done
  wait $(jobs -p | grep -v "^$spid$") 2>/dev/null
  ok=1
  for _ in $(seq 1 200); do
    [ "$(metric numla_kv_blocks_used)" = 0 ] && [ "$(metric numla_requests_running)" = 0 ] &&
      [ "$(metric 'numla_requests_total{outcome="cancelled"}')" = 4 ] && { ok=0; break; }
    sleep 0.05
  done
  [ $ok -eq 0 ] && [ "$(metric numla_generation_tokens_total)" -lt 10000 ]
  check disconnect-frees-blocks $? "kv used $(metric numla_kv_blocks_used), cancelled $(metric 'numla_requests_total{outcome="cancelled"}'), generated $(metric numla_generation_tokens_total)"

  # SIGTERM: the streams in flight finish ([DONE], every token), then exit 0 (1000 tokens each,
  # a generous client timeout: an ASan build on a loaded machine needs over a minute for them)
  for i in 1 2 3 4; do
    curl -sN -m 200 "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\": [$i, 7], \"max_tokens\": 1000, \"temperature\": 0, \"ignore_eos\": true, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" >"$tmp/term$i.sse" &
  done
  # every stream has its first bytes (so the server took all four) before the signal: waiting
  # for the last one launched alone let a loaded machine's first curl connect after it
  for _ in $(seq 1 500); do
    [ -s "$tmp/term1.sse" ] && [ -s "$tmp/term2.sse" ] && [ -s "$tmp/term3.sse" ] && [ -s "$tmp/term4.sse" ] && break
    sleep 0.02
  done
  kill -TERM "$spid"
  wait "$spid"
  rc=$?
  wait
  [ $rc -eq 0 ]; check sigterm-exit $rc "rc=$rc $(tail -3 "$tmp/s1.err")"
  grep -q "signal 15: no new requests; finishing the [1-9]" "$tmp/s1.err"
  check sigterm-in-flight $? "$(grep signal "$tmp/s1.err")"
  # the serving loop itself cancelled the 4 abandoned requests (not merely the server's count);
  # a request its stop string ended is cancelled there too when the match comes before its
  # last token, so more than 4 is fine
  ncancel=$(sed -n 's/.*summary: .* \([0-9][0-9]*\) cancelled).*/\1/p' "$tmp/s1.err")
  [ "${ncancel:-0}" -ge 4 ]; check disconnect-cancelled-in-loop $? "$(grep summary "$tmp/s1.err")"
  for i in 1 2 3 4; do
    [ "$(tail -n 2 "$tmp/term$i.sse" | head -n 1)" = "data: [DONE]" ] &&
      grep -q '"usage":{"prompt_tokens":2,"completion_tokens":1000' "$tmp/term$i.sse"
    check "sigterm-drained-$i" $? "$(tail -c 300 "$tmp/term$i.sse")"
  done

  # guards: 401 without the key, 413 over the body limit, 429 when the queue is full
  start_server "$tmp/s2.err" "$bin" serve --model "$model" --port 0 --threads 1 --api-key sekret \
    --max-queue 1 --max-seqs 1 --max-batch-tokens 64 --max-body 4096 || exit 1
  c=$(code "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "x", "max_tokens": 1}')
  [ "$c" = 401 ]; check err-401 $? "$c"
  c=$(code "http://127.0.0.1:$port/v1/completions" -H 'Authorization: Bearer sekreT' -d '{"prompt": "x", "max_tokens": 1}')
  [ "$c" = 401 ]; check err-401-wrong-key $? "$c"
  c=$(code "http://127.0.0.1:$port/v1/completions" -H 'Authorization: Bearer sekret' -d '{"prompt": "x", "max_tokens": 1}')
  [ "$c" = 200 ]; check auth-ok $? "$c $(cat "$tmp/e.json")"
  c=$(code "http://127.0.0.1:$port/v1/completions" -H 'Authorization: Bearer sekret' -d "{\"prompt\": \"${long:0:6000}\"}")
  [ "$c" = 413 ]; check err-413 $? "$c"
  # one long stream holds the only sequence (its first bytes are out before the others are
  # sent); of 7 short requests at most two are taken (one waiting in the scheduler, one in the
  # queue) and the rest are refused; the stream's client then goes away (its request is
  # cancelled) and the waiting ones are served
  curl -sN -m 200 -H 'Authorization: Bearer sekret' "http://127.0.0.1:$port/v1/completions" \
    -d '{"prompt": [9], "max_tokens": 4000, "temperature": 0, "ignore_eos": true, "stream": true}' >"$tmp/q0.sse" &
  q0=$!
  for _ in $(seq 1 1500); do [ -s "$tmp/q0.sse" ] && break; sleep 0.02; done
  for i in $(seq 1 7); do
    curl -s -D "$tmp/h$i" -o /dev/null -w '%{http_code}\n' -m 60 -H 'Authorization: Bearer sekret' \
      "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\": [$i], \"max_tokens\": 2, \"temperature\": 0, \"ignore_eos\": true}" >"$tmp/q$i" &
  done
  for _ in $(seq 1 1500); do [ "$(cat "$tmp"/q[1-7] | grep -c .)" -ge 5 ] && break; sleep 0.02; done
  kill "$q0" 2>/dev/null
  wait $(jobs -p | grep -v "^$spid$") 2>/dev/null
  n429=$(cat "$tmp"/q[1-7] | grep -c 429)
  n200=$(cat "$tmp"/q[1-7] | grep -c 200)
  [ "$n429" -ge 1 ] && [ "$n200" -ge 1 ] && [ $((n429 + n200)) -eq 7 ] && grep -qi '^retry-after:' $(grep -l 429 "$tmp"/q[1-7] | head -1 | sed 's/q\([0-9]\)$/h\1/')
  check err-429 $? "$(cat "$tmp"/q[1-7] | tr '\n' ' ')"
  kill -TERM "$spid"; wait "$spid"

  # Kimi (docs/kimi.md): tiny-kimi with the tiktoken golden tokenizer and the kimi-k2-thinking
  # template; chat gives the tokens `numla run` gives on transformers' render of the same
  # conversation (tests/golden/chat_kimi: plain messages, and 4 and 5 with tools, tool calls,
  # tool results and reasoning_content), tokenized by the tiktoken path; a thinking template
  # answers with reasoning_content (null: the random model writes no <think>)
  kmodel=$tmp/kimi
  "$bin" synth --preset tiny-kimi --out "$kmodel" --seed 9 --tokenizer "$golden/kimi_tok" \
    >/dev/null 2>&1 || { echo "synth tiny-kimi failed"; exit 1; }
  for c in 1 4 5 8 9 14; do
    text=$(jq -j --argjson c "$c" '.renders[] | select(.template == "kimi-k2-thinking" and
           .conversation == $c and .add_generation_prompt and (.thinking | not)) | .text' \
           "$golden/chat_kimi/cases.json")
    ids=$("$bin" tokenize --model "$kmodel" --no-special --text "$text" | tr -d ' ')
    echo "{\"id\": \"kc$c\", \"prompt_tokens\": $ids, \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}"
  done >"$tmp/kref.jsonl"
  "$bin" run --model "$kmodel" --threads 1 --input "$tmp/kref.jsonl" --output "$tmp/kref.out" \
    2>"$tmp/kref.err" || { echo "numla run (kimi) failed: $(tail -3 "$tmp/kref.err")"; exit 1; }
  start_server "$tmp/s4.err" "$bin" serve --model "$kmodel" --port 0 --threads 1 \
    --chat-template kimi-k2-thinking || exit 1
  for c in 1 4 5 8 9 14; do
    want=$(run_tok "$tmp/kref.out" "kc$c")
    conv=$(jq -c --argjson c "$c" '.conversations[$c]' "$golden/chat_kimi/cases.json")
    b=$(jq -nc --argjson v "$conv" '{messages: $v.messages, max_tokens: 8, temperature: 0,
        ignore_eos: true, logprobs: true, return_tokens_as_token_ids: true} + (if $v.tools then {tools: $v.tools} else {} end)')
    post /v1/chat/completions "$b" >"$tmp/k$c.json"
    got=$(resp_tokens <"$tmp/k$c.json")
    [ -n "$want" ] && [ "$got" = "$want" ]; check "kimi-chat-$c" $? "got '$got' want '$want'"
    jq -e '.choices[0].message | has("reasoning_content") and .reasoning_content == null' \
      "$tmp/k$c.json" >/dev/null
    check "kimi-reasoning-field-$c" $? "$(head -c 300 "$tmp/k$c.json")"
    got=$(post /v1/chat/completions "$(jq -c '. + {stream: true}' <<<"$b")" | sse_tokens)
    [ "$got" = "$want" ]; check "kimi-chat-stream-$c" $? "got '$got' want '$want'"
  done
  kill -TERM "$spid"; wait "$spid"
elif [ "$mode" = ranks ]; then
  start_server "$tmp/s1.err" timeout 120 "$mpiexec" -n 2 --oversubscribe --bind-to none "$bin" serve \
    --model "$model" --port 0 --threads 1 --chat-template deepseek-v3 || exit 1
  same_tokens r2
  curl -sN -m 60 "http://127.0.0.1:$port/v1/completions" -d '{"prompt": [3, 7], "max_tokens": 600, "temperature": 0, "ignore_eos": true, "stream": true}' >"$tmp/term.sse" &
  cpid=$!
  for _ in $(seq 1 200); do [ -s "$tmp/term.sse" ] && break; sleep 0.02; done
  # SIGTERM to rank 0 (Open MPI's mpirun turns a SIGTERM of its own into killing the job)
  r0=
  for p in $(pgrep -P "$(pgrep -P "$spid" | head -1)"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && r0=$p
  done
  [ -n "$r0" ]; check r2-rank0-found $? "no rank 0 under $spid"
  kill -TERM "$r0"
  wait "$spid"
  rc=$?
  wait "$cpid"
  [ $rc -eq 0 ]; check r2-sigterm-exit $rc "rc=$rc $(tail -3 "$tmp/s1.err")"
  [ "$(tail -n 2 "$tmp/term.sse" | head -n 1)" = "data: [DONE]" ]; check r2-sigterm-drained $? "$(tail -c 200 "$tmp/term.sse")"
  grep -q "signal 15: no new requests; finishing the 1 in flight" "$tmp/s1.err"
  check r2-sigterm-in-flight $? "$(grep signal "$tmp/s1.err")"
  if [ -n "$faulty" ]; then
    # rank 1 SIGKILLs itself at step 20: the job ends, the client gets an answer or a closed
    # connection, never a hang
    export NUMLA_TEST_DIE_AT_STEP=20 NUMLA_COMM_TIMEOUT=5
    start_server "$tmp/s3.err" timeout 60 "$mpiexec" -n 2 --oversubscribe --bind-to none \
      -x NUMLA_TEST_DIE_AT_STEP -x NUMLA_COMM_TIMEOUT "$faulty" serve --model "$model" --port 0 --threads 1 || exit 1
    t0=$(date +%s)
    curl -s -m 50 "http://127.0.0.1:$port/v1/completions" -d '{"prompt": [3], "max_tokens": 200, "temperature": 0, "ignore_eos": true}' >"$tmp/f.json"
    crc=$?
    wait "$spid"
    rc=$?
    el=$(( $(date +%s) - t0 ))
    [ $crc -ne 28 ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $el -le 30 ]
    check r2-rank-dies $? "curl rc $crc, mpiexec rc $rc after ${el}s: $(tail -5 "$tmp/s3.err")"
    grep -q "rank 1" "$tmp/s3.err"; check r2-rank-dies-message $? "$(tail -5 "$tmp/s3.err")"
  fi
fi
[ -f "$tmp/s3.err" ] && tail -n 4 "$tmp/s3.err"
echo "http_serve_test[$mode]: $pass passed, $fail failed"
[ $fail -eq 0 ]
