#!/usr/bin/env bash
# tests/mpi/v4_speculative_test.sh NUMLA_BIN MPIEXEC RANKS — DeepSeek-V4 drafting with its own MTP
# layer (`numla run --speculative mtp:K`, docs/design.md §5.9) on RANKS ranks. The model is
# tests/golden/v4/mtp_fp32 (the main model of tests/golden/v4/model_fp32 plus a random MTP
# layer), so the golden prompts (7, 1, 140 and 250 tokens) must give transformers' greedy tokens
# (model_fp32/greedy.txt) whatever the drafts: the random layer's drafts are nearly always
# rejected, so nearly every verify step undoes K rows of the window rings, the compressors'
# carry-over and entries, and the MTP layer's chained rows.
#   k1 / k3 / k7   mtp:1, mtp:3 (prefill chunks of 5), mtp:7 (the most a CSA rate of 4 allows)
#   mixed          mtp:2, 3 sequences and 7 tokens a step in chunks of 3
#   preempt        mtp:2 with a pool that preempts (--kv-memory 0.0018: 70 blocks of 16, each
#                  sequence holding 16 for its own cache, the MTP layer's and draft snapshots
#                  included)
#   prefix         the prefix cache with drafts: sampled first turns, then second turns from
#                  their prefix states (the MTP layer's cache included), one token a step: the
#                  result lines of --no-prefix-cache byte for byte, with the model's sliding MTP
#                  layer and (1 rank) on tiny-v4 models whose MTP layer is CSA or HCA; a block
#                  whose MTP rows were not run (its sequence ended in that step) not taken
#   refusals       mtp:8 (9 verify rows, a CSA compressor keeps 8), a model without the layer
#   gguf           llama.cpp's form: tests/golden/v4/model_fp8.gguf with its MTP layer's own file
#                  (mtp_fp8_mtp.gguf, convert_hf_to_gguf.py --mtp) through --mtp-model gives
#                  model_fp8's greedy tokens and the drafts of the safetensors directory
#                  tests/golden/v4/mtp_fp8 (the same counts of accepted tokens); refused: the GGUF
#                  model without --mtp-model, --mtp-model without --speculative, a model file
#                  given as the MTP file
#   bench          (1 rank) `bench model --speculative 2`: the verify steps and the MTP step;
#                  on the GGUF pair with --mtp-model, `--speculative 1` and its MTP step (the
#                  config's MTP line printed once), --mtp-model without --speculative refused,
#                  and the GGUF model without --mtp-model refused naming it; `bench serve
#                  --speculative mtp:2 --prefix-cache both` with a 200-token shared prefix
#   serve          (1 rank) the prompts through `numla serve --speculative mtp:2`, then p3's second
#                  turn (+ 8 greedy tokens) from the prefix cache: 256 tokens cached, the next 8
set -uo pipefail
bin=$1 mpiexec=$2 ranks=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exact_isa
src=$(cd "$(dirname "$0")/../.." && pwd)
tokens() { # "id tok,..." per result line, sorted by id
  sed -E 's/^\{"id":"([^"]*)","output_tokens":\[([^]]*)\].*/\1 \2/' "$1" | sort
}
# run and serve with an fp32 cache where transformers' greedy tokens are compared exactly (a bf16
# cache moves logits by up to ~0.3, past the smallest greedy margins: test_model_golden_v4.c)
numla() {
  case $1 in run | serve) set -- "$1" --kv-dtype f32 "${@:2}" ;; esac
  "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" "$@"
}
dir=$src/tests/golden/v4/mtp_fp32
want=$(sort "$src/tests/golden/v4/model_fp32/greedy.txt")
cp "$src/tests/golden/v4/model_fp32/requests.jsonl" "$tmp/req.jsonl"
run() { # run NAME [options...]
  local name=$1
  shift
  numla run --model "$dir" --threads 1 --input "$tmp/req.jsonl" --output "$tmp/$name.jsonl" "$@" \
    2> "$tmp/$name.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    check "$name" 1 "exit $rc: $(tail -3 "$tmp/$name.err")"
    return
  fi
  local got
  got=$(tokens "$tmp/$name.jsonl")
  [ "$got" = "$want" ] && grep -q "speculative mtp:" "$tmp/$name.err" &&
    [ "$(grep -c '"speculative":{"verify_steps":[1-9]' "$tmp/$name.jsonl")" = 4 ]
  check "$name ($ranks ranks)" $? "tokens differ from transformers' greedy or no drafts:
$(diff <(echo "$want") <(echo "$got") | head -6) $(grep 'speculative' "$tmp/$name.err")"
}
run k1 --speculative mtp:1
run k3 --speculative mtp:3 --prefill-chunk 5
run k7 --speculative mtp:7
run mixed --speculative mtp:2 --max-seqs 3 --max-batch-tokens 7 --prefill-chunk 3
run preempt --speculative mtp:2 --kv-memory 0.0018 --prefill-chunk 16
grep -q "preemptions (0 tokens" "$tmp/preempt.err" &&
  check "preempt" 1 "the small pool preempted nothing: $(grep preempt "$tmp/preempt.err")"
# the prefix cache with drafts (docs/serving.md "DeepSeek-V4's cache": a block's state carries the
# MTP layer's cache too). First turns p2 and p3 sampled at temperature 8, where the random MTP
# layer's drafts are often accepted (so blocks are filled by accepted drafts and the sampled
# tokens depend on the draft distributions), then second turns: p3 + 8 and + 10 of its tokens, p2
# + 4, sampled. One token a step, the result lines (tokens, logprobs, usage.speculative) equal
# --no-prefix-cache's byte for byte, with 256, 256 and 128 tokens cached. On mtp_fp32 (a sliding
# MTP layer, as V4-Flash's) and on tiny-v4 models whose MTP layer is CSA or HCA (numla synth
# --mtp csa|hca: the state carries its compressed entries, index keys and CSA carry too).
m0=$src/tests/golden/v4/model_fp32
grep -E '"id": "p[23]"' "$m0/requests.jsonl" |
  sed -E 's/"temperature": 0/"temperature": 8.0, "seed": 5/' > "$tmp/first.jsonl"
turn() { # turn ID PROMPT_ID N: the prompt and the first N tokens the first turn gave
  local p g
  p=$(sed -nE "s/.*\"id\": \"$2\", \"prompt_tokens\": \[([^]]*)\].*/\1/p" "$m0/requests.jsonl")
  g=$(sed -nE "s/^\{\"id\":\"$2\",\"output_tokens\":\[([^]]*)\].*/\1/p" "$tmp/first.out" |
      cut -d, -f1-"$3" | sed 's/,/, /g')
  echo "{\"id\": \"$1\", \"prompt_tokens\": [$p, $g], \"max_tokens\": $((16 - $3)), \"temperature\": 8.0, \"seed\": 7, \"ignore_eos\": true, \"logprobs\": 2}"
}
cached() { sed -nE 's/^\{"id":"([tu][12])".*"cached_tokens":([0-9]+).*/\1 \2/p' "$1" | sort | paste -sd' '; }
prefix_case() { # prefix_case NAME MODEL_DIR
  local name=$1 model=$2 c opt
  numla run --model "$model" --threads 1 --max-seqs 1 --prefill-chunk 1 --kv-dtype bf16 \
    --speculative mtp:2 --no-prefix-cache --input "$tmp/first.jsonl" --output "$tmp/first.out" \
    2> "$tmp/first.err" || check "prefix $name: first turns" 1 "$(tail -3 "$tmp/first.err")"
  { cat "$tmp/first.jsonl"; turn t1 p3 8; turn t2 p3 10; turn u1 p2 4; } > "$tmp/turns.jsonl"
  for c in on off; do
    opt=()
    [ $c = off ] && opt=(--no-prefix-cache)
    numla run --model "$model" --threads 1 --max-seqs 1 --prefill-chunk 1 --kv-dtype bf16 \
      --speculative mtp:2 "${opt[@]}" --input "$tmp/turns.jsonl" --output "$tmp/pc.$c.jsonl" \
      2> "$tmp/pc.$c.err" || check "prefix $name one token a step ($c)" 1 "$(tail -3 "$tmp/pc.$c.err")"
    sed -E 's/"cached_tokens":[0-9]+//' "$tmp/pc.$c.jsonl" | sort > "$tmp/pc.$c.cmp"
  done
  [ "$(cached "$tmp/pc.on.jsonl")" = "t1 256 t2 256 u1 128" ] &&
    grep -qE '"accepted_tokens":[1-9]' "$tmp/pc.on.jsonl" &&
    [ "$(grep -c '"speculative":{"verify_steps":[1-9]' "$tmp/pc.on.jsonl")" = 5 ] &&
    cmp -s "$tmp/pc.on.cmp" "$tmp/pc.off.cmp"
  check "prefix cache with drafts ($name), one token a step = --no-prefix-cache ($ranks ranks)" $? \
    "cached: $(cached "$tmp/pc.on.jsonl") $(grep prefix "$tmp/pc.on.err")
$(diff "$tmp/pc.on.cmp" "$tmp/pc.off.cmp" | head -c 600)"
}
prefix_case "sliding MTP layer" "$dir"
# the compressing MTP layers on one rank (the MTP layer's cache is the same on every rank) and not
# in a lean sweep (test_lib.sh)
hows="csa hca"
{ [ "$ranks" != 1 ] || sweep_lean; } && hows=
for how in $hows; do
  "$bin" synth --preset tiny-v4 --mtp $how --out "$tmp/syn-$how" > "$tmp/syn-$how.log" 2>&1 ||
    check "synth --mtp $how" 1 "$(tail -2 "$tmp/syn-$how.log")"
  prefix_case "$how MTP layer" "$tmp/syn-$how"
done
# a sequence that ends in the step that passes a multiple of 128 has not run its MTP rows there:
# that block is not cached (its state lacks the MTP layer's part) and the next prompt that starts
# the same way takes the 128 tokens before it. f1: 256 tokens, max_tokens 1, in chunks of 100
g6=$(awk '$1 == "p3" { print $2 }' "$m0/greedy.txt" | cut -d, -f1-6 | sed 's/,/, /g')
p3=$(sed -nE 's/.*"id": "p3", "prompt_tokens": \[([^]]*)\].*/\1/p' "$m0/requests.jsonl")
{ echo "{\"id\": \"f1\", \"prompt_tokens\": [$p3, $g6], \"max_tokens\": 1, \"temperature\": 0}"
  echo "{\"id\": \"f2\", \"prompt_tokens\": [$p3, $g6, 5, 6, 7], \"max_tokens\": 4, \"temperature\": 0}"
} > "$tmp/ends.jsonl"
numla run --model "$dir" --threads 1 --max-seqs 1 --prefill-chunk 100 --speculative mtp:2 \
  --input "$tmp/ends.jsonl" --output "$tmp/ends.out" 2> "$tmp/ends.err"
rc=$?
[ $rc -eq 0 ] && grep -q '"id":"f2".*"cached_tokens":128' "$tmp/ends.out" &&
  ! grep -q '"error"' "$tmp/ends.out"
check "prefix: a block whose MTP rows were not run is not taken ($ranks ranks)" $? \
  "rc=$rc $(cut -c1-200 "$tmp/ends.out") $(tail -2 "$tmp/ends.err")"
numla run --model "$dir" --threads 1 --input "$tmp/req.jsonl" --output "$tmp/k8.jsonl" \
  --speculative mtp:8 > "$tmp/k8.err" 2>&1
[ $? -ne 0 ] && grep -q "use mtp:7 or less" "$tmp/k8.err"
check "mtp:8 refused" $? "$(tail -3 "$tmp/k8.err")"
numla run --model "$src/tests/golden/v4/model_fp32" --threads 1 --input "$tmp/req.jsonl" \
  --output "$tmp/none.jsonl" --speculative mtp:2 > "$tmp/none.err" 2>&1
[ $? -ne 0 ] && grep -q "no multi-token-prediction layer" "$tmp/none.err"
check "a model without the layer refused" $? "$(tail -3 "$tmp/none.err")"
# llama.cpp's GGUF form: the model's file and its MTP layer's file
g4=$src/tests/golden/v4
gwant=$(sort "$g4/model_fp8/greedy.txt")
cp "$g4/model_fp8/requests.jsonl" "$tmp/req8.jsonl"
numla run --model "$g4/model_fp8.gguf" --mtp-model "$g4/mtp_fp8_mtp.gguf" --threads 1 \
  --input "$tmp/req8.jsonl" --output "$tmp/gguf.jsonl" --speculative mtp:2 2> "$tmp/gguf.err"
rc=$?
numla run --model "$g4/mtp_fp8" --threads 1 --input "$tmp/req8.jsonl" --output "$tmp/st8.jsonl" \
  --speculative mtp:2 2> "$tmp/st8.err"
rc2=$?
spec() { grep -o '"id":"[^"]*"\|"accepted_tokens":[0-9]*\|"draft_tokens":[0-9]*' "$1" | paste -sd' '; }
[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(tokens "$tmp/gguf.jsonl")" = "$gwant" ] &&
  [ "$(grep -c '"speculative":{"verify_steps":[1-9]' "$tmp/gguf.jsonl")" = 4 ] &&
  [ "$(spec "$tmp/gguf.jsonl")" = "$(spec "$tmp/st8.jsonl")" ]
check "gguf + --mtp-model ($ranks ranks)" $? "rc=$rc/$rc2 $(tail -2 "$tmp/gguf.err")
$(diff <(echo "$gwant") <(tokens "$tmp/gguf.jsonl") | head -4)
gguf: $(spec "$tmp/gguf.jsonl")
safetensors: $(spec "$tmp/st8.jsonl")"
numla run --model "$g4/model_fp8.gguf" --threads 1 --input "$tmp/req8.jsonl" \
  --output "$tmp/g1.jsonl" --speculative mtp:2 > "$tmp/g1.err" 2>&1
[ $? -ne 0 ] && grep -q "give that file with --mtp-model" "$tmp/g1.err"
check "gguf without --mtp-model refused" $? "$(tail -2 "$tmp/g1.err")"
numla run --model "$g4/model_fp8.gguf" --mtp-model "$g4/mtp_fp8_mtp.gguf" --threads 1 \
  --input "$tmp/req8.jsonl" --output "$tmp/g2.jsonl" > "$tmp/g2.err" 2>&1
[ $? -ne 0 ] && grep -q "speculative mtp\[:K\], which is not given" "$tmp/g2.err"
check "--mtp-model without --speculative refused" $? "$(tail -2 "$tmp/g2.err")"
numla run --model "$g4/model_fp8.gguf" --mtp-model "$g4/model_fp8.gguf" --threads 1 \
  --input "$tmp/req8.jsonl" --output "$tmp/g3.jsonl" --speculative mtp:2 > "$tmp/g3.err" 2>&1
[ $? -ne 0 ] && grep -q "nextn_predict_layers" "$tmp/g3.err"
check "a model file as the MTP file refused" $? "$(tail -2 "$tmp/g3.err")"
# bench model --speculative (one rank: V4 is measured on one): the MTP step's cost comes out
if [ "$ranks" = 1 ]; then
  "$bin" bench model --model "$dir" --threads 1 --quick --prompt 32 --speculative 2 \
    > "$tmp/bm.out" 2> "$tmp/bm.err"
  rc=$?
  [ $rc -eq 0 ] && grep -q "MTP step of 1 row" "$tmp/bm.out" && grep -q "2 drafts" "$tmp/bm.out"
  check "bench model --speculative 2" $? "rc=$rc $(tail -3 "$tmp/bm.out") $(tail -3 "$tmp/bm.err")"
  # the GGUF form: the MTP step comes from the layer's own file (--mtp-model)
  "$bin" bench model --model "$g4/model_fp8.gguf" --mtp-model "$g4/mtp_fp8_mtp.gguf" --threads 1 \
    --quick --prompt 32 --speculative 1 > "$tmp/bmg.out" 2> "$tmp/bmg.err"
  rc=$?
  [ $rc -eq 0 ] && grep -q "MTP step of 1 row" "$tmp/bmg.out" && grep -q "1 draft" "$tmp/bmg.out" &&
    [ "$(grep -c "multi-token-prediction layer" "$tmp/bmg.err")" = 1 ]
  check "bench model --speculative 1 --mtp-model (gguf; the config's MTP line once)" $? \
    "rc=$rc $(tail -3 "$tmp/bmg.out") $(tail -3 "$tmp/bmg.err")"
  "$bin" bench model --model "$g4/model_fp8.gguf" --threads 1 --quick --prompt 32 --speculative 1 \
    > "$tmp/bmg3.out" 2>&1
  [ $? -ne 0 ] && grep -q "mtp-\*.gguf): give that file with --mtp-model" "$tmp/bmg3.out"
  check "bench model --speculative on the GGUF model without --mtp-model refused" $? \
    "$(grep -m2 error "$tmp/bmg3.out")"
  "$bin" bench model --model "$g4/model_fp8.gguf" --mtp-model "$g4/mtp_fp8_mtp.gguf" --threads 1 \
    --quick --prompt 32 > "$tmp/bmg2.out" 2>&1
  [ $? -ne 0 ] && grep -q "for --speculative K, which is not given" "$tmp/bmg2.out"
  check "bench model --mtp-model without --speculative refused" $? "$(tail -2 "$tmp/bmg2.out")"
  # bench serve with drafts and the prefix cache: a shared prefix of 200 tokens (a hit of 128
  # per request at concurrency 4), each level on a scheduler of its own over one engine
  "$bin" bench serve --model "$dir" --quick --threads 1 --concurrency 1,4 --output-tokens 8 \
    --min-prompt 16 --max-prompt 300 --rounds 1 --prefix-cache both --shared-prefix 200 \
    --speculative mtp:2 --json > "$tmp/bs.json" 2> "$tmp/bs.err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c '^{"bench":"serve",' "$tmp/bs.json")" -ge 2 ] &&
    grep -qE '"bench":"serve_prefix_cache","concurrency":4,"hit_rate":0\.[1-9]' "$tmp/bs.json"
  check "bench serve --speculative --prefix-cache both" $? \
    "rc=$rc $(grep prefix_cache "$tmp/bs.json" | head -c 300) $(grep -m2 -E 'error|failed' "$tmp/bs.err")"
fi
# numla serve --speculative mtp:2 (1 rank; needs curl and jq): the golden prompts in flight
# together through /v1/completions give the same tokens, with usage.speculative
if [ "$ranks" = 1 ] && command -v curl >/dev/null && command -v jq >/dev/null; then
  pids=()
  trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
  if start_server "$tmp/serve.err" "$bin" serve --kv-dtype f32 --model "$dir" --port 0 --threads 1 \
      --speculative mtp:2; then
    i=0
    while read -r line; do
      jq -c '{prompt: .prompt_tokens, max_tokens, temperature, ignore_eos, logprobs: 0,
              return_tokens_as_token_ids: true}' <<<"$line" > "$tmp/b$i.json"
      curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d @"$tmp/b$i.json" > "$tmp/r$i.json" &
      i=$((i + 1))
    done < "$tmp/req.jsonl"
    wait $(jobs -p | grep -vx "$spid")
    for i in 0 1 2 3; do
      want=$(awk -v id="p$i" '$1 == id { print $2 }' "$src/tests/golden/v4/model_fp32/greedy.txt")
      got=$(jq -r '[.choices[0].logprobs | (.tokens // [.content[]?.token]) | .[] |
                   sub("token_id:"; "")] | join(",")' < "$tmp/r$i.json")
      [ -n "$want" ] && [ "$got" = "$want" ] &&
        jq -e '.usage.speculative.verify_steps > 0' < "$tmp/r$i.json" > /dev/null
      check "serve p$i" $? "got '$got' want '$want' $(head -c 300 "$tmp/r$i.json")"
    done
    # a second turn: p3 and its first 8 greedy tokens continue with the next 8 from p3's prefix
    # states, the MTP layer's cache included (256 tokens cached)
    g3=$(awk '$1 == "p3" { print $2 }' "$src/tests/golden/v4/model_fp32/greedy.txt")
    jq -c --argjson g "[$(cut -d, -f1-8 <<<"$g3")]" '.prompt += $g | .max_tokens = 8' \
      "$tmp/b3.json" > "$tmp/t1.json"
    curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d @"$tmp/t1.json" > "$tmp/rt1.json"
    got=$(jq -r '[.choices[0].logprobs | (.tokens // [.content[]?.token]) | .[] |
                 sub("token_id:"; "")] | join(",")' < "$tmp/rt1.json")
    cached=$(jq -r '.usage.prompt_tokens_details.cached_tokens' < "$tmp/rt1.json")
    [ "$got" = "$(cut -d, -f9- <<<"$g3")" ] && [ "$cached" = 256 ] &&
      jq -e '.usage.speculative.verify_steps > 0' < "$tmp/rt1.json" > /dev/null
    check "serve: a second turn from the prefix cache with drafts" $? \
      "got '$got' cached $cached $(head -c 300 "$tmp/rt1.json")"
    kill "$spid"; wait "$spid" 2>/dev/null
  else
    check "serve --speculative starts" 1 "$(tail -3 "$tmp/serve.err")"
  fi
fi
echo "v4_speculative_test: $pass passed, $fail failed ($ranks ranks)"
[ $fail -eq 0 ]
