#!/usr/bin/env bash
# tests/mpi/dsa_smoke_test.sh NUMLA MODE [MPIEXEC] — the sparse-attention model types end to end
# (docs/sparse_attention.md): a tiny-v32 (deepseek_v32) and a tiny-glm5 (glm_moe_dsa, with
# "shared" indexer layers) synthetic model with the test tokenizer (bpe1k), index_topk 16, a text
# prompt of 81 tokens so the indexer really drops tokens.
#   one    numla run: text in, text out, every request answered; chunked prefill gives the same
#          tokens; the --weights fp8 model answers too; the same weights with index_topk raised past the context (the dense MLA)
#          give *different* tokens on the long prompt (the selection happens) and the *same*
#          on a short one (fewer tokens than index_topk: nothing to drop); numla serve answers
#          an OpenAI completion (plain and streamed) with run's tokens and text
#   ranks  2 ranks: launch/numla-launch ... run, and numla serve under MPIEXEC, give the tokens
#          one rank gives
# Needs curl and jq for the serve part (exits 77, skipped, without them).
set -uo pipefail
bin=$1 mode=$2 mpiexec=${3:-mpiexec}
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "$(dirname "$0")/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NUMLA_BIN=$bin
# 1 and 2 ranks compared token for token: a kernel level that never rounds activations to bf16
exact_isa

post() { curl -s -m 60 "http://127.0.0.1:$port$1" -H 'Content-Type: application/json' -d "$2"; }
lp_tokens='.choices[0].logprobs.tokens | .[] | sub("token_id:"; "")'
resp_tokens() { jq -r "[$lp_tokens] | join(\",\")"; }
sse_tokens() {
  sed -n 's/^data: //p' | grep -v '^\[DONE\]$' |
    jq -r "select(.choices[0].logprobs != null) | $lp_tokens" | paste -sd, -
}
run_tok() { jq -r --arg id "$2" 'select(.id == $id) | .output_tokens | map(tostring) | join(",")' "$1"; }
run_text() { jq -j --arg id "$2" 'select(.id == $id) | .text' "$1"; }
run_prompt_len() { jq -r --arg id "$2" 'select(.id == $id) | .usage.prompt_tokens' "$1"; }
run_model() { # run_model MODEL IN OUT [extra options...]
  local m=$1 in=$2 out=$3; shift 3
  "$bin" run --model "$m" --threads 1 --input "$in" --output "$out" "$@" 2>"$out.err" ||
    { echo "numla run failed: $(tail -3 "$out.err")"; return 1; }
}

long="The quick brown fox jumps over the lazy dog, then the dog wakes up and chases the fox across the field, over the river and into the woods where they both rest."
reqs=$tmp/reqs.jsonl
{
  jq -nc --arg p "$long" '{id: "long", prompt: $p, max_tokens: 12, temperature: 0, ignore_eos: true}'
  # 5 prompt + 6 output tokens < index_topk 16: the indexer keeps every token
  jq -nc '{id: "short", prompt: "Hello there", max_tokens: 6, temperature: 0, ignore_eos: true}'
  awk 'BEGIN { srand(7); s = ""; for (t = 0; t < 40; t++) s = s (t ? "," : "") 2 + int(rand() * 500);
       print "{\"id\": \"ids\", \"prompt_tokens\": [" s "], \"max_tokens\": 10, \"temperature\": 0, \"ignore_eos\": true}" }'
} >"$reqs"
nreq=3

for preset in tiny-v32 tiny-glm5; do
  m=$tmp/$preset
  "$bin" synth --preset "$preset" --out "$m" --seed 9 --tokenizer "$root/tests/golden/tokenizer/bpe1k" \
    >/dev/null 2>&1 || { echo "synth $preset failed"; exit 1; }
  grep -q '"index_topk": 16' "$m/config.json"; check "$preset-config" $? "no index_topk 16"
  run_model "$m" "$reqs" "$tmp/$preset.ref" || exit 1
  n=$(grep -c '"finish_reason":"length"' "$tmp/$preset.ref")
  [ "$n" -eq $nreq ]; check "$preset-run-answered" $? "$n of $nreq: $(head -c 300 "$tmp/$preset.ref")"
  plen=$(run_prompt_len "$tmp/$preset.ref" long)
  [ "${plen:-0}" -gt 16 ]; check "$preset-long-prompt" $? "prompt_tokens $plen (must pass index_topk 16)"
  text=$(run_text "$tmp/$preset.ref" long)
  [ -n "$text" ]; check "$preset-run-text" $? "no text"
  want=$(run_tok "$tmp/$preset.ref" long)

  if [ "$mode" = one ]; then
    # chunked prefill: the indexer of a later chunk sees the cached earlier ones
    run_model "$m" "$reqs" "$tmp/$preset.chunk" --prefill-chunk 24 || exit 1
    for id in long short ids; do
      got=$(run_tok "$tmp/$preset.chunk" $id) ref=$(run_tok "$tmp/$preset.ref" $id)
      [ -n "$ref" ] && [ "$got" = "$ref" ]; check "$preset-chunked-$id" $? "got '$got' want '$ref'"
    done
    # --weights fp8 (the indexer's wq_b and wk in F8_E4M3 + scales) loads and answers
    "$bin" synth --preset "$preset" --out "$m-fp8" --seed 9 --weights fp8 \
      --tokenizer "$root/tests/golden/tokenizer/bpe1k" >/dev/null 2>&1 || { echo "synth $preset fp8 failed"; exit 1; }
    run_model "$m-fp8" "$reqs" "$tmp/$preset.fp8" || exit 1
    n=$(grep -c '"finish_reason":"length"' "$tmp/$preset.fp8")
    [ "$n" -eq $nreq ]; check "$preset-fp8-answered" $? "$n of $nreq: $(head -c 300 "$tmp/$preset.fp8")"
    # the dense MLA on the same weights: index_topk past the context keeps every token
    cp -r "$m" "$m-dense"
    jq '.index_topk = 100000' "$m/config.json" >"$m-dense/config.json"
    run_model "$m-dense" "$reqs" "$tmp/$preset.dense" || exit 1
    got=$(run_tok "$tmp/$preset.dense" long)
    [ -n "$got" ] && [ "$got" != "$want" ]
    check "$preset-selection-matters" $? "dense and sparse both give '$got' on $plen tokens"
    got=$(run_tok "$tmp/$preset.dense" short) ref=$(run_tok "$tmp/$preset.ref" short)
    [ -n "$ref" ] && [ "$got" = "$ref" ]; check "$preset-short-is-dense" $? "dense '$got' sparse '$ref'"

    start_server "$tmp/$preset.serve.err" "$bin" serve --model "$m" --port 0 --threads 1 || exit 1
    body=$(jq -nc --arg p "$long" '{prompt: $p, max_tokens: 12, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true}')
    post /v1/completions "$body" >"$tmp/$preset.resp"
    got=$(resp_tokens <"$tmp/$preset.resp")
    [ "$got" = "$want" ]; check "$preset-serve-tokens" $? "got '$got' want '$want': $(head -c 300 "$tmp/$preset.resp")"
    got=$(jq -j '.choices[0].text' "$tmp/$preset.resp")
    [ "$got" = "$text" ]; check "$preset-serve-text" $? "got '$got' want '$text'"
    got=$(post /v1/completions "$(jq -c '. + {stream: true}' <<<"$body")" | sse_tokens)
    [ "$got" = "$want" ]; check "$preset-serve-stream" $? "got '$got' want '$want'"
    kill -TERM "$spid"; wait "$spid"
    rc=$?
    [ $rc -eq 0 ]; check "$preset-serve-exit" $rc "rc=$rc $(tail -3 "$tmp/$preset.serve.err")"
  elif [ "$mode" = ranks ]; then
    out=$tmp/$preset.r2
    timeout 180 "$root/launch/numla-launch" --ranks 2 --oversubscribe -- run --model "$m" \
      --input "$reqs" --output "$out" 2>"$out.err"
    rc=$?
    [ $rc -eq 0 ]; check "$preset-launch-r2" $rc "rc=$rc $(tail -3 "$out.err")"
    for id in long short ids; do
      got=$(run_tok "$out" $id) ref=$(run_tok "$tmp/$preset.ref" $id)
      [ -n "$ref" ] && [ "$got" = "$ref" ]; check "$preset-launch-r2-$id" $? "got '$got' want '$ref'"
    done
    start_server "$tmp/$preset.serve.err" timeout 180 "$mpiexec" -n 2 --oversubscribe --bind-to none \
      "$bin" serve --model "$m" --port 0 --threads 1 || exit 1
    body=$(jq -nc --arg p "$long" '{prompt: $p, max_tokens: 12, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true}')
    post /v1/completions "$body" >"$tmp/$preset.resp"
    got=$(resp_tokens <"$tmp/$preset.resp")
    [ "$got" = "$want" ]; check "$preset-serve-r2-tokens" $? "got '$got' want '$want': $(head -c 300 "$tmp/$preset.resp")"
    got=$(jq -j '.choices[0].text' "$tmp/$preset.resp")
    [ "$got" = "$text" ]; check "$preset-serve-r2-text" $? "got '$got' want '$text'"
    # SIGTERM to rank 0 (mpirun turns its own SIGTERM into killing the job; http_serve_test.sh)
    r0=
    for p in $(pgrep -P "$(pgrep -P "$spid" | head -1)"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && r0=$p
    done
    if [ -n "$r0" ]; then kill -TERM "$r0"; else kill -TERM "$spid"; fi
    wait "$spid"
  else
    echo "unknown mode $mode"; exit 2
  fi
done
echo "dsa smoke ($mode): $pass passed, $fail failed"
[ $fail -eq 0 ]
