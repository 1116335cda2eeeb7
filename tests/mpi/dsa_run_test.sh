#!/usr/bin/env bash
# tests/mpi/dsa_run_test.sh NUMLA_BIN MPIEXEC RANKS — the sparse-attention goldens
# (tests/golden/{v32,glm5}/model_fp32, index_topk 16) through `numla run` on RANKS ranks: the
# golden prompts (7, 1, 33 and 60 tokens; requests.jsonl) give transformers' greedy tokens
# (greedy.txt) under every scheduling the engine may pick:
#   default   batched, chunked prefill of 512
#   chunks    prefill chunks of 5 tokens (selecting chunks over a cached prefix)
#   preempt   a pool of 12 blocks of 8: sequences are preempted and recomputed
#   prefix    the prompts again after a first pass, found in the prefix cache
# and with int8 index keys (--index-keys i8: runs, and agrees where nothing is selected).
# fp32 KV cache and index keys, linear layers at avx512 (fp32 activations), so every run is
# held to the reference's tokens exactly (their top-1/top-2 margins are >= 1e-2).
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
for model in v32 glm5; do
  dir=$src/tests/golden/$model/model_fp32
  want=$(sort "$dir/greedy.txt")
  run() { # run NAME [options...]
    local name=$1
    shift
    "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --model "$dir" --threads 1 \
      --kv-dtype f32 --input "$tmp/req.jsonl" --output "$tmp/$model.$name.jsonl" "$@" \
      2> "$tmp/$model.$name.err"
    local rc=$?
    if [ $rc -ne 0 ]; then
      check "$model $name" 1 "exit $rc: $(tail -3 "$tmp/$model.$name.err")"
      return
    fi
    local got
    got=$(tokens "$tmp/$model.$name.jsonl")
    [ "$got" = "$want" ]
    check "$model $name ($ranks ranks)" $? "tokens differ from transformers' greedy:
$(diff <(echo "$want") <(echo "$got") | head -6)"
  }
  cp "$dir/requests.jsonl" "$tmp/req.jsonl"
  run default --kv-blocks 256
  run chunks --kv-blocks 256 --prefill-chunk 5
  run preempt --kv-blocks 12 --block-size 8 --prefill-chunk 16
  grep -q "preemptions (0 tokens" "$tmp/$model.preempt.err" &&
    check "$model preempt" 1 "the small pool preempted nothing: $(grep preempt "$tmp/$model.preempt.err")"
  # the quantized index keys (--index-keys i8) score in int8, which may swap near-tied keys:
  # every request still finishes, and the 1-token prompt, which selects only at its 16th
  # token, gives the reference's first 15
  "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --model "$dir" --threads 1 \
    --kv-dtype f32 --index-keys i8 --input "$tmp/req.jsonl" --output "$tmp/$model.i8.jsonl" \
    2> "$tmp/$model.i8.err"
  check "$model index keys i8" $? "$(tail -3 "$tmp/$model.i8.err")"
  [ "$(grep -c '"finish_reason":"length"' "$tmp/$model.i8.jsonl")" = 4 ]
  check "$model index keys i8 finish" $? "$(head -c 300 "$tmp/$model.i8.jsonl")"
  got=$(tokens "$tmp/$model.i8.jsonl" | awk '$1 == "p1" { split($2, t, ","); s = t[1]
    for (i = 2; i <= 15; i++) s = s "," t[i]; print s }')
  ref=$(awk '$1 == "p1" { split($2, t, ","); s = t[1]; for (i = 2; i <= 15; i++) s = s "," t[i]
    print s }' "$dir/greedy.txt")
  [ -n "$got" ] && [ "$got" = "$ref" ]
  check "$model index keys i8 dense part" $? "p1: $got, want $ref"
  # the same prompts twice, the second pass after the first finished (one sequence at a time)
  sed 's/"id": "p/"id": "q/' "$dir/requests.jsonl" > "$tmp/again.jsonl"
  cat "$dir/requests.jsonl" "$tmp/again.jsonl" > "$tmp/req.jsonl"
  want=$( (cat "$dir/greedy.txt"; sed 's/^p/q/' "$dir/greedy.txt") | sort)
  run prefix --kv-blocks 256 --max-seqs 1
  grep -q "prompt tokens 0 cached" "$tmp/$model.prefix.err" &&
    check "$model prefix" 1 "no prompt token came from the prefix cache"
done
echo "dsa_run_test: $pass passed, $fail failed ($ranks ranks)"
[ $fail -eq 0 ]
