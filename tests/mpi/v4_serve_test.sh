#!/usr/bin/env bash
# tests/mpi/v4_serve_test.sh NUMLA_BIN MPIEXEC RANKS — `numla serve` with DeepSeek-V4 on RANKS
# ranks, end to end with curl:
#   golden   tests/golden/v4/model_fp32 (no tokenizer: token-id prompts): the four golden
#            prompts sent at once to /v1/completions (batched in the server) give transformers'
#            greedy tokens (greedy.txt), streamed and not; a second turn of p3 gives the next
#            greedy tokens with 256 prompt tokens from the prefix cache
#   chat     the tiny-v4 synth preset with the bpe1k tokenizer and the deepseek-v3 template: an
#            OpenAI chat/completions request gives the tokens `numla run` gives on the
#            transformers render of the same conversation (tests/golden/chat/cases.json), and
#            a well-formed chat.completion answer
# Needs curl and jq (Debian packages); exits 77 (skipped) without them.
set -uo pipefail
bin=$1 mpiexec=$2 ranks=$3
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
launch=()
[ "$ranks" -gt 1 ] && launch=(timeout 200 "$mpiexec" -n "$ranks" --oversubscribe --bind-to none)
post() { curl -s -m 60 "http://127.0.0.1:$port$1" -H 'Content-Type: application/json' -d "$2"; }
lp_tokens='.choices[0].logprobs | (.tokens // [.content[]?.token]) | .[] | sub("token_id:"; "")'
resp_tokens() { jq -r "[$lp_tokens] | join(\",\")"; }
sse_tokens() {
  sed -n 's/^data: //p' | grep -v '^\[DONE\]$' |
    jq -r "select(.choices[0].logprobs != null) | $lp_tokens" | paste -sd, -
}
stop_server() { # SIGTERM to rank 0 (mpirun turns a SIGTERM of its own into killing the job)
  local r0=$spid p
  if [ "$ranks" -gt 1 ]; then
    r0=
    for p in $(pgrep -P "$(pgrep -P "$spid" | head -1)"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && r0=$p
    done
    [ -n "$r0" ] || r0=$spid
  fi
  kill -TERM "$r0"
  wait "$spid"
  local rc=$?
  [ $rc -eq 0 ]; check "$1 exit ($ranks ranks)" $? "rc=$rc $(tail -3 "$2")"
}

# golden: transformers' greedy tokens through the server, the prompts in flight together
dir=$golden/v4/model_fp32
start_server "$tmp/g.err" "${launch[@]}" "$bin" serve --kv-dtype f32 --model "$dir" --port 0 \
  --threads 1 || exit 1
i=0
while read -r line; do
  jq -c '{prompt: .prompt_tokens, max_tokens, temperature, ignore_eos, logprobs: 0,
          return_tokens_as_token_ids: true}' <<<"$line" > "$tmp/b$i.json"
  curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d @"$tmp/b$i.json" > "$tmp/r$i.json" &
  i=$((i + 1))
done < "$dir/requests.jsonl"
wait $(jobs -p | grep -vx "$spid")
for i in 0 1 2 3; do
  want=$(awk -v id="p$i" '$1 == id { print $2 }' "$dir/greedy.txt")
  got=$(resp_tokens < "$tmp/r$i.json")
  [ -n "$want" ] && [ "$got" = "$want" ]
  check "golden p$i ($ranks ranks)" $? "got '$got' want '$want' $(head -c 300 "$tmp/r$i.json")"
done
want=$(awk '$1 == "p2" { print $2 }' "$dir/greedy.txt")
got=$(post /v1/completions "$(jq -c '. + {stream: true}' "$tmp/b2.json")" | sse_tokens)
[ "$got" = "$want" ]; check "golden p2 streamed ($ranks ranks)" $? "got '$got' want '$want'"
# a second turn: p3 and its first 8 greedy tokens continue with the next 8 from p3's prefix
# states (256 tokens cached)
g3=$(awk '$1 == "p3" { print $2 }' "$dir/greedy.txt")
body=$(jq -c --argjson g "[$(cut -d, -f1-8 <<<"$g3")]" '.prompt += $g | .max_tokens = 8' "$tmp/b3.json")
post /v1/completions "$body" > "$tmp/t1.json"
got=$(resp_tokens < "$tmp/t1.json")
cached=$(jq -r '.usage.prompt_tokens_details.cached_tokens' "$tmp/t1.json")
[ "$got" = "$(cut -d, -f9- <<<"$g3")" ] && [ "$cached" = 256 ]
check "golden second turn from the prefix cache ($ranks ranks)" $? "got '$got' cached $cached"
stop_server golden "$tmp/g.err"

# chat: an OpenAI chat/completions request on a V4 model with a tokenizer
model=$tmp/tiny-v4
"$bin" synth --preset tiny-v4 --out "$model" --seed 9 --tokenizer "$golden/tokenizer/bpe1k" \
  >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
text=$(jq -j '.renders[] | select(.template == "deepseek-v3" and .conversation == 1 and
       .add_generation_prompt) | .text' "$golden/chat/cases.json")
ids=$("$bin" tokenize --model "$model" --no-special --text "$text" | tr -d '[] ')
echo "{\"id\": \"c1\", \"prompt_tokens\": [$ids], \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}" > "$tmp/c.jsonl"
"$bin" run --model "$model" --threads 1 --input "$tmp/c.jsonl" --output "$tmp/c.out" 2> "$tmp/c.err"
check "chat reference run" $? "$(tail -3 "$tmp/c.err")"
want=$(jq -r '.output_tokens | map(tostring) | join(",")' "$tmp/c.out")
start_server "$tmp/s.err" "${launch[@]}" "$bin" serve --model "$model" --port 0 --threads 1 \
  --chat-template deepseek-v3 || exit 1
msgs=$(jq -c '.conversations[1]' "$golden/chat/cases.json")
post /v1/chat/completions "$(jq -nc --argjson m "$msgs" '{messages: $m, max_tokens: 8,
  temperature: 0, ignore_eos: true, logprobs: true, return_tokens_as_token_ids: true}')" > "$tmp/chat.json"
got=$(resp_tokens < "$tmp/chat.json")
[ -n "$want" ] && [ "$got" = "$want" ]
check "chat tokens ($ranks ranks)" $? "got '$got' want '$want' $(head -c 300 "$tmp/chat.json")"
jq -e '.object == "chat.completion" and .choices[0].message.role == "assistant" and
       (.choices[0].message.content | type) == "string" and .choices[0].finish_reason == "length"
       and .usage.completion_tokens == 8' "$tmp/chat.json" >/dev/null
check "chat answer ($ranks ranks)" $? "$(head -c 400 "$tmp/chat.json")"
stop_server chat "$tmp/s.err"
echo "v4_serve_test: $pass passed, $fail failed ($ranks ranks)"
[ $fail -eq 0 ]
