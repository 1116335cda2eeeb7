#!/usr/bin/env bash
# tests/mpi/prefix_cache_test.sh NUMLA_BIN MPIEXEC RANKS — `numla run` with the prefix cache on
# (the default) against --no-prefix-cache, RANKS ranks through MPIEXEC, on the tiny synth preset
# with bf16 and int8 weights. Requests: a shared-prefix mix (three prefixes of 40-130 tokens,
# each request adding its own 1-40) and the next turn of each (its prompt + the answer a
# reference run gave + a few new tokens), in one input so that the second turns find the first
# turns' blocks, decode-filled ones included.
#   exact    one token per step (--max-seqs 1 --prefill-chunk 1): every row, cached or not, comes
#            from a step of the same shape, so the result lines (tokens, logprobs) must be equal
#            byte for byte, apart from usage.prompt_tokens_details.cached_tokens
#   batched  batches with chunked prefill and a pool small enough to preempt and evict: the
#            engine's rows depend on the step's shape by rounding (cache or not), so tokens are
#            compared while the reference's top-1/top-2 margin is above 0.05
# With one rank, `bench serve --quick`'s prefix mixes must run and find their prefixes.
set -uo pipefail
bin=$1 mpiexec=$2 ranks=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exact_isa
run() { # run MODEL OUT [options...]
  local model=$1 out=$2
  shift 2
  "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --model "$model" --threads 1 \
    --output "$out" "$@" 2> "$out.err"
}
strip_usage() { sed -E 's/,"prompt_tokens_details":\{"cached_tokens":[0-9]+\}//' "$1"; }
cached_sum() { grep -o '"cached_tokens":[0-9]*' "$1" | awk -F: '{ s += $2 } END { print s + 0 }'; }

# a lean sweep (test_lib.sh) runs bf16 only: int8 weights change the linears, not the cache
weights="bf16 int8"
sweep_lean && weights=bf16
"$bin" synth --preset tiny --out "$tmp/bf16" --seed 4 >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
if [ "$weights" != bf16 ]; then
  "$bin" synth --preset tiny --out "$tmp/int8" --seed 4 --weights int8 >/dev/null 2>&1 ||
    { echo "synth int8 failed"; exit 1; }
fi

# turn 1: "id" "prompt" per line, prompts as comma lists
awk 'BEGIN { srand(11); split("40 77 130", L, " ")
  for (k = 1; k <= 3; k++) { p[k] = ""; for (t = 0; t < L[k]; t++) p[k] = p[k] (t ? "," : "") int(rand() * 512) }
  for (i = 0; i < 15; i++) { k = i % 3 + 1; s = p[k]; n = 1 + int(rand() * 40)
    for (t = 0; t < n; t++) s = s "," int(rand() * 512)
    print "a" i, s } }' > "$tmp/turn1.txt"
mkreq() { # mkreq FILE MAXTOK: requests from "id prompt" lines
  awk -v mt="$2" '{ print "{\"id\": \"" $1 "\", \"prompt_tokens\": [" $2 "], \"max_tokens\": " mt \
    ", \"temperature\": 0, \"ignore_eos\": true, \"logprobs\": 2}" }' "$1"
}

for w in $weights; do
  model=$tmp/$w
  mkreq "$tmp/turn1.txt" 10 > "$tmp/t1.jsonl"
  run "$model" "$tmp/t1.out" --input "$tmp/t1.jsonl" --no-prefix-cache --max-seqs 1 \
    --prefill-chunk 1 --max-batch-tokens 1
  check "$w turn-1 reference" $? "$(tail -3 "$tmp/t1.out.err")"
  # turn 2: the turn-1 prompt + its answer + 1..8 new tokens
  sed -E 's/^\{"id":"([^"]*)","output_tokens":\[([^]]*)\].*/\1 \2/' "$tmp/t1.out" | sort > "$tmp/ans.txt"
  sort "$tmp/turn1.txt" | join - "$tmp/ans.txt" | awk 'BEGIN { srand(12) } {
    s = $2 "," $3; n = 1 + int(rand() * 8); for (t = 0; t < n; t++) s = s "," int(rand() * 512)
    sub(/^a/, "b", $1); print $1, s }' > "$tmp/turn2.txt"
  { mkreq "$tmp/turn1.txt" 10; mkreq "$tmp/turn2.txt" 6; } > "$tmp/req.jsonl"

  exact=(--max-seqs 1 --prefill-chunk 1 --max-batch-tokens 1)
  run "$model" "$tmp/off.jsonl" --input "$tmp/req.jsonl" --no-prefix-cache "${exact[@]}"
  check "$w exact off" $? "$(tail -3 "$tmp/off.jsonl.err")"
  run "$model" "$tmp/on.jsonl" --input "$tmp/req.jsonl" "${exact[@]}"
  check "$w exact on" $? "$(tail -3 "$tmp/on.jsonl.err")"
  cmp -s <(strip_usage "$tmp/off.jsonl") <(strip_usage "$tmp/on.jsonl")
  check "$w exact: same result lines with and without the cache ($ranks ranks)" $? \
    "$(diff <(strip_usage "$tmp/off.jsonl") <(strip_usage "$tmp/on.jsonl") | head -4 | cut -c1-300)"
  c=$(cached_sum "$tmp/on.jsonl")
  [ "$c" -ge 1000 ] && [ "$(cached_sum "$tmp/off.jsonl")" -eq 0 ]
  check "$w exact: cached tokens reported" $? "on $c, off $(cached_sum "$tmp/off.jsonl")"
  # every second turn reuses at least its first turn's full prompt blocks
  bad=$(grep '"id":"b' "$tmp/on.jsonl" | sed -E 's/.*"prompt_tokens":([0-9]+).*"cached_tokens":([0-9]+).*/\1 \2/' |
    awk '$2 < 48 || $2 % 16 != 0 || $2 >= $1' | wc -l)
  check "$w exact: second turns hit" "$bad" "$bad second turns with too few cached tokens"
  grep -q 'prefix cache: hit rate [1-9]' "$tmp/on.jsonl.err"
  check "$w exact: summary hit rate" $? "$(grep 'prefix cache' "$tmp/on.jsonl.err")"

  batched=(--max-seqs 8 --prefill-chunk 32 --max-batch-tokens 96 --kv-blocks 24)
  run "$model" "$tmp/boff.jsonl" --input "$tmp/req.jsonl" --no-prefix-cache "${batched[@]}"
  check "$w batched off" $? "$(tail -3 "$tmp/boff.jsonl.err")"
  run "$model" "$tmp/bon.jsonl" --input "$tmp/req.jsonl" "${batched[@]}"
  check "$w batched on" $? "$(tail -3 "$tmp/bon.jsonl.err")"
  cmp -s <(decisive_tokens "$tmp/off.jsonl" "$tmp/off.jsonl") <(decisive_tokens "$tmp/off.jsonl" "$tmp/bon.jsonl")
  check "$w batched: decisive tokens equal ($ranks ranks)" $? \
    "$(diff <(decisive_tokens "$tmp/off.jsonl" "$tmp/off.jsonl") <(decisive_tokens "$tmp/off.jsonl" "$tmp/bon.jsonl") | head -4)"
  grep -Eq 'summary.*|preemptions' "$tmp/bon.jsonl.err" &&
    ! grep -q ' 0 preemptions' "$tmp/bon.jsonl.err" && [ "$(cached_sum "$tmp/bon.jsonl")" -gt 0 ]
  check "$w batched: preempted and hit" $? "$(grep -E 'preemptions|prefix cache' "$tmp/bon.jsonl.err")"
done
# bench serve's prefix mixes stay runnable and find their prefixes (one rank only)
if [ "$ranks" -eq 1 ]; then
  for mix in "--shared-prefix 64" "--shared-prefix 64 --warm-prefix" "--multi-turn 2"; do
    # shellcheck disable=SC2086
    "$bin" bench serve --model "$tmp/bf16" --quick --threads 1 --concurrency 4 $mix \
      --prefix-cache both > "$tmp/bench.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -Eq 'prefix cache, concurrency 4: hit rate [1-9]' "$tmp/bench.txt"
    check "bench serve $mix" $? "rc $rc: $(grep -E 'prefix cache|error' "$tmp/bench.txt" | head -3)"
  done
fi
echo "prefix_cache ($ranks ranks): $pass passed, $fail failed"
[ "$fail" -eq 0 ]
