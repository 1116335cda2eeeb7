#!/usr/bin/env bash
# tests/mpi/v4_run_test.sh NUMLA_BIN MPIEXEC RANKS — DeepSeek-V4 (tests/golden/v4: sliding, CSA
# with the indexer selecting, HCA, hash and routed MoE, mHC) through `numla run` on RANKS ranks:
# the golden prompts (7, 1, 140 and 250 tokens; requests.jsonl) give transformers' greedy tokens
# (greedy.txt) under every scheduling the engine may pick (blocks of 128 tokens, V4's default:
# every compressed entry in the pool's blocks, HCA's one a block, unless a case says otherwise):
#   default   the four prompts batched, chunked prefill of 512
#   chunks    prefill chunks of 5 tokens
#   mixed     3 sequences and 7 tokens a step in chunks of 3 (prefill chunks beside decodes)
#   preempt   --kv-memory 0.0009 --block-size 16 (GiB: 47 blocks of 16, each holding its tokens' CSA entries and
#             index keys, standing for their HCA entries and its share of the prefix states; a
#             sequence holds 15 more for its window rings and compressors' rows, docs/design.md
#             §3.1): the four need 91, so sequences are preempted, their blocks (entries
#             included) freed, and recomputed from scratch
#   blocks16  blocks of 16 tokens: the HCA entries (one per 128 tokens) the sequences' own
#   toosmall  --kv-memory 0.0006 --block-size 16 (31 blocks): p3 (250 + 16 tokens: 17 + 15 blocks) is answered
#             with an error naming its cache bytes and the pool's, the others run; a pool that
#             cannot hold one sequence's own blocks (0.0002) is refused at start, naming both
#   again     the prompts twice, one sequence at a time: the second time from the prefix cache
#             (128 tokens each: V4 reuses prefixes at multiples of 128, its HCA rate)
#   prefix    second turns: p3 and p2 again with 8, 10 and 4 of their greedy tokens appended
#             continue with transformers' next greedy tokens from the first turns' prefix
#             states (256, 256, 128 tokens cached: the window, 64 CSA entries and index keys,
#             the CSA carry, 2 HCA entries), one at a time, in chunks of 5 and batched; one
#             token a step (every row the same step shape) the result lines, logprobs
#             included, are those of --no-prefix-cache byte for byte (a bf16 cache)
#   bf16      a bf16 cache (the default; the other runs ask for f32), whole and in chunks of 5:
#             transformers' greedy tokens for p1-p3
#   launch    (2 ranks) through launch/numla-launch
#   bench     `bench model` refused on 2-3 ranks; (3 ranks) its one-rank figures come out;
#             (1 rank) `bench serve` with the prefix cache asked on serves every request
# for the fp32 weights and the published FP8 + FP4 form (model_fp8), model_fp8.gguf (llama.cpp's
# converter's GGUF of model_fp8: default and chunks), and the clear refusals (--weights, a prompt
# over the context). A lean sweep (test_lib.sh) runs model_fp8 and the GGUF file the default way
# only.
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
for model in model_fp32 model_fp8; do
  dir=$src/tests/golden/v4/$model
  want=$(sort "$dir/greedy.txt")
  run() { # run NAME [options...]
    local name=$1
    shift
    numla run --model "$dir" --threads 1 --input "$tmp/req.jsonl" \
      --output "$tmp/$model.$name.jsonl" "$@" 2> "$tmp/$model.$name.err"
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
  run default
  # a lean sweep (test_lib.sh) schedules model_fp8 the default way only: its FP8 and FP4
  # linears do not change how the steps are cut
  sweep_lean && [ $model = model_fp8 ] && continue
  run chunks --prefill-chunk 5
  run mixed --max-seqs 3 --max-batch-tokens 7 --prefill-chunk 3
  run preempt --kv-memory 0.0009 --block-size 16 --prefill-chunk 16
  run blocks16 --block-size 16 --prefill-chunk 37
  # the bf16 cache (--kv-dtype's default; the runs here ask for f32): p1-p3 give transformers'
  # greedy tokens (p0's first margin, 0.12, is within what bf16 rows move its logits)
  for how in bf16 bf16-chunks; do
    opt=()
    [ $how = bf16-chunks ] && opt=(--prefill-chunk 5)
    numla run --model "$dir" --threads 1 --input "$tmp/req.jsonl" --kv-dtype bf16 "${opt[@]}" \
      --output "$tmp/$model.$how.jsonl" 2> "$tmp/$model.$how.err"
    got=$(tokens "$tmp/$model.$how.jsonl" | grep -v '^p0 ')
    [ -n "$got" ] && [ "$got" = "$(grep -v '^p0 ' <<<"$want")" ]
    check "$model $how ($ranks ranks)" $? "$(diff <(grep -v '^p0 ' <<<"$want") <(echo "$got") | head -6) $(tail -2 "$tmp/$model.$how.err")"
  done
  grep -q "preemptions (0 tokens" "$tmp/$model.preempt.err" &&
    check "$model preempt" 1 "the small pool preempted nothing: $(grep preempt "$tmp/$model.preempt.err")"
  # a prompt whose cache can never fit the pool: a clear error, the others' tokens unchanged
  # (under a timeout: a request admission can never fit waits forever)
  timeout 120 "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --kv-dtype f32 \
    --model "$dir" --threads 1 --input "$tmp/req.jsonl" --kv-memory 0.0006 --block-size 16 \
    --output "$tmp/$model.small.jsonl" 2> "$tmp/$model.small.err"
  rc=$?
  [ $rc -eq 0 ] &&
    grep -q '"id":"p3".*the request.s cache needs 0.62 MiB (250 prompt + 16 max_tokens tokens: 17 blocks of 16 tokens, and 15 blocks for the sequence.s window and compressors. rows, at [0-9]* bytes a block) but the whole KV pool is 0.60 MiB (31 blocks)' "$tmp/$model.small.jsonl" &&
    [ "$(tokens "$tmp/$model.small.jsonl" | grep -v '^p3 ')" = "$(grep -v '^p3 ' <<<"$want")" ]
  check "$model toosmall: p3 refused naming its cache bytes ($ranks ranks)" $? \
    "rc=$rc $(head -c 900 "$tmp/$model.small.jsonl") $(tail -2 "$tmp/$model.small.err")"
  numla run --model "$dir" --threads 1 --input "$tmp/req.jsonl" --kv-memory 0.0002 --block-size 16 \
    --output "$tmp/$model.tiny.jsonl" > "$tmp/$model.tiny.err" 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q "a KV pool of 10 blocks (0.19 MiB at [0-9]* bytes a block of 16 tokens) cannot hold one sequence: its window rings and compressors' rows take 0.28 MiB (15 blocks)" "$tmp/$model.tiny.err"
  check "$model toosmall: a pool below one sequence refused ($ranks ranks)" $? "rc=$rc $(tail -3 "$tmp/$model.tiny.err")"
  sed 's/"id": "p/"id": "q/' "$dir/requests.jsonl" > "$tmp/again.jsonl"
  cat "$dir/requests.jsonl" "$tmp/again.jsonl" > "$tmp/req.jsonl"
  want=$( (cat "$dir/greedy.txt"; sed 's/^p/q/' "$dir/greedy.txt") | sort)
  run again --max-seqs 1
  grep -q "prompt tokens 256 cached" "$tmp/$model.again.err"
  check "$model again: 2 x 128 tokens cached" $? "$(grep -i prefix "$tmp/$model.again.err")"
  # second turns (prefix, above): prompt + the first n greedy tokens, max_tokens the rest
  turn() { # turn ID PROMPT_ID N
    local p g
    p=$(sed -nE "s/.*\"id\": \"$2\", \"prompt_tokens\": \[([^]]*)\].*/\1/p" "$dir/requests.jsonl")
    g=$(awk -v id="$2" '$1 == id { print $2 }' "$dir/greedy.txt" | cut -d, -f1-"$3" | sed 's/,/, /g')
    echo "{\"id\": \"$1\", \"prompt_tokens\": [$p, $g], \"max_tokens\": $((16 - $3)), \"temperature\": 0, \"ignore_eos\": true}"
  }
  { grep -E '"id": "p[23]"' "$dir/requests.jsonl"; turn t1 p3 8; turn t2 p3 10; turn u1 p2 4; } > "$tmp/req.jsonl"
  want=$( (grep -E '^p[23] ' "$dir/greedy.txt"
           for t in "t1 p3 8" "t2 p3 10" "u1 p2 4"; do
             set -- $t
             echo "$1 $(awk -v id="$2" '$1 == id { print $2 }' "$dir/greedy.txt" | cut -d, -f$(($3 + 1))-)"
           done) | sort)
  cached() { sed -nE 's/^\{"id":"([tu][12])".*"cached_tokens":([0-9]+).*/\1 \2/p' "$1" | sort | paste -sd' '; }
  run prefix --max-seqs 1
  [ "$(cached "$tmp/$model.prefix.jsonl")" = "t1 256 t2 256 u1 128" ]
  check "$model prefix: cached tokens" $? "$(cached "$tmp/$model.prefix.jsonl")"
  run prefix-chunks --max-seqs 1 --prefill-chunk 5
  [ "$(cached "$tmp/$model.prefix-chunks.jsonl")" = "t1 256 t2 256 u1 128" ]
  check "$model prefix chunks: cached tokens" $? "$(cached "$tmp/$model.prefix-chunks.jsonl")"
  run prefix-batched --prefill-chunk 48
  grep -qE "prompt tokens [1-9][0-9]* cached" "$tmp/$model.prefix-batched.err"
  check "$model prefix batched: cached" $? "$(grep -i prefix "$tmp/$model.prefix-batched.err")"
  sed -i 's/"ignore_eos": true}/"ignore_eos": true, "logprobs": 2}/' "$tmp/req.jsonl"
  for c in on off; do
    opt=()
    [ $c = off ] && opt=(--no-prefix-cache)
    numla run --model "$dir" --threads 1 --max-seqs 1 --prefill-chunk 1 --kv-dtype bf16 "${opt[@]}" \
      --input "$tmp/req.jsonl" --output "$tmp/$model.one.$c.jsonl" 2> "$tmp/$model.one.$c.err" ||
      check "$model one token a step ($c)" 1 "$(tail -3 "$tmp/$model.one.$c.err")"
    sed -E 's/"cached_tokens":[0-9]+//' "$tmp/$model.one.$c.jsonl" | sort > "$tmp/$model.one.$c.cmp"
  done
  grep -q "prompt tokens 640 cached" "$tmp/$model.one.on.err" &&
    cmp -s "$tmp/$model.one.on.cmp" "$tmp/$model.one.off.cmp"
  check "$model prefix one token a step = no prefix cache ($ranks ranks)" $? \
    "$(diff "$tmp/$model.one.on.cmp" "$tmp/$model.one.off.cmp" | head -c 600)"
done
# the GGUF deepseek4 file llama.cpp's converter wrote of model_fp8 (its values exactly):
# transformers' greedy tokens through the same runs
gguf=$src/tests/golden/v4/model_fp8.gguf
want=$(sort "$src/tests/golden/v4/model_fp8/greedy.txt")
hows="default chunks"
sweep_lean && hows=default
for how in $hows; do
  opt=()
  [ $how = chunks ] && opt=(--prefill-chunk 5)
  numla run --model "$gguf" --threads 1 --input "$src/tests/golden/v4/model_fp8/requests.jsonl" \
    --output "$tmp/gguf.$how.jsonl" "${opt[@]}" 2> "$tmp/gguf.$how.err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(tokens "$tmp/gguf.$how.jsonl")" = "$want" ]
  check "gguf $how ($ranks ranks)" $? "rc=$rc $(tail -3 "$tmp/gguf.$how.err")"
done
dir=$src/tests/golden/v4/model_fp32
# the weights run as stored: --weights is refused, naming the model type
numla run --model "$dir" --threads 1 --weights int8 --input "$dir/requests.jsonl" \
  --output "$tmp/w.jsonl" 2> "$tmp/w.err"
[ $? -ne 0 ] && grep -q -- "--weights is not supported with model_type deepseek_v4" "$tmp/w.err"
check "--weights refused" $? "$(tail -3 "$tmp/w.err")"
# prompts over the context are answered with an error each; the others run
numla run --model "$dir" --threads 1 --max-context 100 --input "$dir/requests.jsonl" \
  --output "$tmp/ctx.jsonl" 2> "$tmp/ctx.err"
[ $? -eq 0 ] && [ "$(grep -c 'exceeds the context of 100 tokens' "$tmp/ctx.jsonl")" = 2 ] &&
  [ "$(tokens "$tmp/ctx.jsonl" | grep -E '^p[01] ')" = "$(sort "$dir/greedy.txt" | grep -E '^p[01] ')" ]
check "over the context" $? "$(head -c 600 "$tmp/ctx.jsonl")"
# the launcher (launch/numla-launch builds the mpirun line and binds the ranks) at 2 ranks
if [ "$ranks" = 2 ]; then
  [ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  NUMLA_BIN=$bin timeout 120 "$src/launch/numla-launch" --ranks 2 --oversubscribe -- run \
    --kv-dtype f32 --model "$dir" --input "$dir/requests.jsonl" --output "$tmp/launch.jsonl" > "$tmp/launch.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && [ "$(tokens "$tmp/launch.jsonl")" = "$(sort "$dir/greedy.txt")" ]
  check "numla-launch 2 ranks" $? "rc=$rc $(tail -3 "$tmp/launch.log")"
fi
# bench model: one rank only for V4 (refused on more, with the reason); at 3 ranks the
# one-rank run is smoke-tested (its machine probes take ~20 s)
if [ "$ranks" -gt 1 ]; then
  numla bench model --model "$dir" --quick --prompt 32 --long-context 64 > "$tmp/bm.out" 2>&1
  [ $? -ne 0 ] && grep -q "deepseek_v4 is measured on one rank ($ranks given)" "$tmp/bm.out"
  check "bench model refused on $ranks ranks" $? "$(tail -3 "$tmp/bm.out")"
fi
# bench serve with the prefix cache off and on: every request served
if [ "$ranks" = 1 ]; then
  "$bin" bench serve --model "$dir" --quick --threads 1 --concurrency 1,4 --output-tokens 8 \
    --min-prompt 16 --max-prompt 200 --rounds 1 --prefix-cache both --shared-prefix 64 --json \
    > "$tmp/bs.json" 2> "$tmp/bs.err"
  rc=$?
  lines=$(grep -c '^{"bench":"serve",' "$tmp/bs.json")
  bad=$(sed -nE 's/^\{"bench":"serve",.*"requests":([0-9]+),"prompt_tokens":[0-9]+,"output_tokens":([0-9]+),.*/\1 \2/p' \
    "$tmp/bs.json" | awk '$2 != 16 * $1' | wc -l)
  [ $rc -eq 0 ] && [ "$lines" -ge 2 ] && [ "$bad" -eq 0 ]
  check "bench serve" $? "rc=$rc $lines lines, $bad short: $(head -c 400 "$tmp/bs.json") $(tail -3 "$tmp/bs.err")"
fi
if [ "$ranks" = 3 ]; then
  "$bin" bench model --model "$dir" --quick --threads 1 --prompt 32 --long-context 64 --json \
    > "$tmp/bm.json" 2> "$tmp/bm.err"
  rc=$?
  last=$(tail -1 "$tmp/bm.json")
  [ $rc -eq 0 ] && grep -q '"prefill_form": "deepseek_v4"' <<<"$last" &&
    ! grep -qE '"(prefill_tok_s|decode_tok_s|decode_16k_tok_s|active_weight_bytes)": 0(\.0*)?,' <<<"$last"
  check "bench model on one rank" $? "rc=$rc $last $(tail -3 "$tmp/bm.err")"
fi
echo "v4_run_test: $pass passed, $fail failed ($ranks ranks)"
[ $fail -eq 0 ]
