#!/usr/bin/env bash
# tests/mpi/speculative_test.sh NUMLA_BIN MPIEXEC RANKS — `numla run --speculative mtp:K` against
# the same run without it, RANKS ranks through MPIEXEC, on models/kjv-v3 (the trained model and
# its trained MTP layer, docs/speculative.md). Greedy requests from the held-out text, batched,
# with logprobs, stop strings, max_tokens of 1-3 (no room to draft) and larger, greedy ones with
# penalties, and sampled requests mixed in. Batched, a step's rows share it with other
# sequences' rows, whose count differs with and without drafts (GEMM paths past 12 rows, the
# attention's key chunks), so tokens are compared while the reference's top-1/top-2 margin is
# above 0.05 (as prefix_cache_test.sh); a request whose reference has no near tie must give the
# same line (tokens, finish_reason, text) but for usage's speculative details. At batch 1 the
# greedy lines must be equal byte for byte (below). Then: drafts were
# accepted (fewer steps than tokens), a small pool that preempts and a small token budget give
# the same decisive tokens, `--speculative` refuses a bad value and a model without the layer.
set -uo pipefail
bin=$1 mpiexec=$2 ranks=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
model=$src/models/kjv-v3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exact_isa
run() { # run OUT [options...]
  local out=$1
  shift
  "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --model "$model" --threads 1 \
    --input "$tmp/req.jsonl" --output "$out" --no-progress "$@" 2> "$out.err"
}
# line_of FILE: "id <line without usage>" sorted, for requests whose reference line has no near tie
strip() { sed -E 's/,"logprobs":\[.*\](,"text":|\}$)/\1/; s/,"usage":\{[^{}]*(\{[^{}]*\}[^{}]*)*\}//' "$1" | sort; }
# ids of the reference's requests without a near tie (every greedy token decisive)
clean_ids() {
  awk -v tol=0.05 '{ match($0, /^\{"id":"[^"]*"/); id = substr($0, 8, RLENGTH - 8); rest = $0; ok = 1
    while (match(rest, /"top":\[\[-?[0-9]+,[-0-9.e+]+\],\[-?[0-9]+,[-0-9.e+]+\]/)) {
      t = substr(rest, RSTART + 7, RLENGTH - 8); gsub(/\]|\[/, "", t); split(t, a, ",")
      if (a[2] - a[4] < tol) ok = 0
      rest = substr(rest, RSTART + RLENGTH) }
    if (ok && $0 ~ /"top"/) print id }' "$1" | sort
}
same_clean() { # same_clean REF FILE: the clean requests' lines equal
  local ids
  ids=$(clean_ids "$1" | paste -sd'|')
  [ -n "$ids" ] || return 1
  cmp -s <(strip "$1" | grep -E "^\{\"id\":\"($ids)\"") <(strip "$2" | grep -E "^\{\"id\":\"($ids)\"")
}

# requests: 12 greedy prompts of held-out text (16-60 tokens each), max_tokens 48, logprobs 2,
# EOS ignored on half; 2 with stop strings; 3 with max_tokens 1, 2, 3; 2 sampled; 2 greedy with
# penalties (each row's sampler must have seen the drafts accepted before it)
awk 'length($0) > 60 { n++; if (n % 9 == 1 && k < 21) { k++; gsub(/"/, ""); p[k] = substr($0, 1, 40 + 13 * (k % 7)) } }
  END { for (i = 1; i <= 12; i++)
          printf "{\"id\": \"g%d\", \"prompt\": \"%s\", \"max_tokens\": 48, \"temperature\": 0, \"logprobs\": 2%s}\n",
                 i, p[i], i % 2 ? ", \"ignore_eos\": true" : ""
        printf "{\"id\": \"s1\", \"prompt\": \"%s\", \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2, \"stop\": [\" the\"]}\n", p[13]
        printf "{\"id\": \"s2\", \"prompt\": \"%s\", \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2, \"stop\": [\"ord\", \".\"]}\n", p[14]
        for (i = 1; i <= 3; i++)
          printf "{\"id\": \"m%d\", \"prompt\": \"%s\", \"max_tokens\": %d, \"temperature\": 0, \"logprobs\": 2, \"ignore_eos\": true}\n", i, p[14 + i], i
        for (i = 1; i <= 2; i++)
          printf "{\"id\": \"r%d\", \"prompt\": \"%s\", \"max_tokens\": 24, \"temperature\": 0.8, \"seed\": %d, \"ignore_eos\": true}\n", i, p[17 + i], i
        printf "{\"id\": \"p1\", \"prompt\": \"%s\", \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2, \"frequency_penalty\": 1.5, \"ignore_eos\": true}\n", p[20]
        printf "{\"id\": \"p2\", \"prompt\": \"%s\", \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2, \"repetition_penalty\": 1.5, \"ignore_eos\": true}\n", p[21] }' \
  "$model/heldout.txt" > "$tmp/req.jsonl"
[ "$(wc -l < "$tmp/req.jsonl")" -eq 21 ]
check "21 requests made" $? "$(wc -l < "$tmp/req.jsonl")"

run "$tmp/base.jsonl"
check "reference run" $? "$(tail -3 "$tmp/base.jsonl.err")"
[ "$(clean_ids "$tmp/base.jsonl" | wc -l)" -ge 6 ]
check "the reference has at least 6 requests without a near tie" $? "$(clean_ids "$tmp/base.jsonl" | wc -l)"
base_steps=$(sed -nE 's/.*: +([0-9]+) steps,.*/\1/p' "$tmp/base.jsonl.err")
# mtp:1 and mtp:3 (a lean sweep, test_lib.sh: mtp:1 here, mtp:3 in the tight run below)
ks="1 3"
sweep_lean && ks=1
for k in $ks; do
  run "$tmp/k$k.jsonl" --speculative mtp:$k
  check "mtp:$k run" $? "$(tail -3 "$tmp/k$k.jsonl.err")"
  cmp -s <(decisive_tokens "$tmp/base.jsonl" "$tmp/base.jsonl") <(decisive_tokens "$tmp/base.jsonl" "$tmp/k$k.jsonl")
  check "mtp:$k: decisive tokens equal ($ranks ranks)" $? \
    "$(diff <(decisive_tokens "$tmp/base.jsonl" "$tmp/base.jsonl") <(decisive_tokens "$tmp/base.jsonl" "$tmp/k$k.jsonl") | head -4 | cut -c1-300)"
  same_clean "$tmp/base.jsonl" "$tmp/k$k.jsonl"
  check "mtp:$k: requests without near ties give the same lines" $? \
    "$(diff <(strip "$tmp/base.jsonl") <(strip "$tmp/k$k.jsonl") | head -4 | cut -c1-300)"
  steps=$(sed -nE 's/.*: +([0-9]+) steps,.*/\1/p' "$tmp/k$k.jsonl.err")
  [ -n "$steps" ] && [ "$steps" -lt "$base_steps" ]
  check "mtp:$k: drafts accepted ($steps steps, $base_steps without)" $? "$(tail -5 "$tmp/k$k.jsonl.err")"
  # usage.speculative: every line has it, accepted <= drafted, and the sums are the summary's
  sums=$(grep -o '"speculative":{"verify_steps":[0-9]*,"draft_tokens":[0-9]*,"accepted_tokens":[0-9]*' "$tmp/k$k.jsonl" |
    awk -F'[:,]' '{ n++; s += $3; d += $5; a += $7; bad += $7 > $5 } END { print n + 0, d + 0, a + 0, bad + 0 }')
  read -r nl dr ac bad <<< "$sums"
  [ "$nl" -eq 21 ] && [ "$bad" -eq 0 ] && [ "$dr" -gt 0 ] &&
    grep -q "speculative mtp:$k: acceptance [0-9.]* % ($ac of $dr draft tokens)" "$tmp/k$k.jsonl.err"
  check "mtp:$k: usage.speculative on every line, summed in the summary" $? \
    "lines $nl, drafted $dr, accepted $ac, bad $bad: $(grep speculative "$tmp/k$k.jsonl.err")"
  # penalties: raw logprobs do not show the penalised margins, so these are compared whole
  cmp -s <(grep '"id":"p' "$tmp/base.jsonl" | strip /dev/stdin) <(grep '"id":"p' "$tmp/k$k.jsonl" | strip /dev/stdin)
  check "mtp:$k: greedy requests with penalties give the same lines" $? \
    "$(diff <(grep '"id":"p' "$tmp/base.jsonl" | strip /dev/stdin) <(grep '"id":"p' "$tmp/k$k.jsonl" | strip /dev/stdin) | cut -c1-300)"
  # sampled requests draft too (speculative sampling; its distribution: unit.sampler_spec): their
  # draws differ from the reference's, their lengths do not
  [ "$(grep -c '"id":"r[12]","output_tokens":\[[0-9]*\(,[0-9]*\)\{23\}\],"finish_reason":"length"' "$tmp/k$k.jsonl")" -eq 2 ]
  check "mtp:$k: sampled requests give 24 tokens" $? "$(grep '"id":"r' "$tmp/k$k.jsonl" | cut -c1-200)"
done
# a small token budget (drafts yield to the running sequences' own tokens) and a pool small
# enough to preempt
run "$tmp/tight.jsonl" --speculative mtp:3 --max-seqs 6 --max-batch-tokens 8 --prefill-chunk 8 --kv-blocks 14 --block-size 8
check "mtp:3 tight run" $? "$(tail -3 "$tmp/tight.jsonl.err")"
cmp -s <(decisive_tokens "$tmp/base.jsonl" "$tmp/base.jsonl") <(decisive_tokens "$tmp/base.jsonl" "$tmp/tight.jsonl")
check "mtp:3 tight budget, preempting: decisive tokens equal ($ranks ranks)" $? \
  "$(diff <(decisive_tokens "$tmp/base.jsonl" "$tmp/base.jsonl") <(decisive_tokens "$tmp/base.jsonl" "$tmp/tight.jsonl") | head -4 | cut -c1-300)"
! grep -q ' 0 preemptions' "$tmp/tight.jsonl.err"
check "mtp:3 tight: preempted" $? "$(grep preemptions "$tmp/tight.jsonl.err")"
# prefix cache: blocks filled by accepted drafts are cached under their tokens, so the second
# turn of a conversation (prompt + answer + 1 token) finds every full block of the first
for i in 1 2 3 4; do
  sed -nE "s/^\{\"id\":\"g$i\",\"output_tokens\":\[([0-9]+(,[0-9]+){19}).*/\1/p" "$tmp/base.jsonl"
done | awk '{ printf "{\"id\": \"a%d\", \"prompt_tokens\": [0,%s], \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true}\n", NR, $0 }' > "$tmp/turn1.jsonl"
"$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --model "$model" --threads 1 \
  --input "$tmp/turn1.jsonl" --output "$tmp/turn1.out" --no-progress --speculative mtp:3 2> "$tmp/turn1.err"
check "prefix: turn 1" $? "$(tail -2 "$tmp/turn1.err")"
sort "$tmp/turn1.out" | sed -nE 's/^\{"id":"a([0-9]+)","output_tokens":\[([^]]*)\].*/\1 \2/p' |
  while read -r n out; do
    p=$(sed -nE "s/.*\"id\": \"a$n\", \"prompt_tokens\": \[([^]]*)\].*/\1/p" "$tmp/turn1.jsonl")
    printf '{"id": "b%s", "prompt_tokens": [%s,%s,5], "max_tokens": 4, "temperature": 0}\n' "$n" "$p" "$out"
  done > "$tmp/turn2.jsonl"
cat "$tmp/turn1.jsonl" "$tmp/turn2.jsonl" > "$tmp/turns.jsonl"
"$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --model "$model" --threads 1 \
  --input "$tmp/turns.jsonl" --output "$tmp/turns.out" --no-progress --speculative mtp:3 --max-seqs 1 2> "$tmp/turns.err"
check "prefix: turns 1 and 2" $? "$(tail -2 "$tmp/turns.err")"
# turn 1 computed 21 + 39 rows: 3 full blocks of 16 (48 tokens) for turn 2 to find
bad=$(grep '"id":"b' "$tmp/turns.out" | sed -E 's/.*"cached_tokens":([0-9]+).*/\1/' | awk '$1 < 48' | wc -l)
[ "$(grep -c '"id":"b' "$tmp/turns.out")" -eq 4 ] && [ "$bad" -eq 0 ]
check "prefix: second turns find the first turns' blocks, draft-filled ones included" $? \
  "$(grep -o '"id":"b[0-9]*"\|"cached_tokens":[0-9]*' "$tmp/turns.out" | paste -sd' ')"
! grep -q '"speculative"' "$tmp/base.jsonl"
check "no usage.speculative without --speculative" $? ""
# Batch 1 (--max-seqs 1): every step holds one sequence, and a verify step gives each of its
# rows the bits a one-row step gives it (docs/speculative.md), so greedy requests give the run
# without drafts' whole lines, tokens and logprobs, byte for byte (usage.speculative added).
# On models/kjv-v3 (bf16) and the tiny V3 model of tests/golden/mtp/v3 (fp32), at the exact
# level the script runs and at the CPU's best one (NUMLA_ISA unset: with AMX, bf16 linears of
# 13 rows or more run on the tiles, fewer on the few-row path), the allreduce summing in rank
# order at 2 ranks.
grep -v '"id": "r' "$tmp/req.jsonl" > "$tmp/b1req.jsonl"
awk 'BEGIN { srand(7); for (r = 0; r < 6; r++) { s = ""; for (t = 0; t < 5 + 9 * r; t++) s = s (t ? "," : "") 2 + int(rand() * 280)
  printf "{\"id\": \"v%d\", \"prompt_tokens\": [%s], \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2, \"ignore_eos\": true}\n", r, s } }' > "$tmp/b1v3.jsonl"
nospec() { sed -E 's/,"speculative":\{[^{}]*\}//' "$1" | sort; }
b1_run() { # b1_run MODEL INPUT OUT LEVEL [options...]: batch 1 at LEVEL ("best": NUMLA_ISA unset)
  local model=$1 in=$2 out=$3 isa=(env NUMLA_ISA="$4")
  [ "$4" = best ] && isa=(env -u NUMLA_ISA)
  shift 4
  "${isa[@]}" "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" run --model "$model" \
    --threads 1 --input "$in" --output "$out" --no-progress --max-seqs 1 "$@" 2> "$out.err"
}
# one rank: kjv-v3 at both levels with mtp:1 and mtp:3, the fp32 model (no AMX linears) at the
# best level; two ranks (and a lean sweep): the best level, mtp:3, 8 of the kjv-v3 requests
levels="$NUMLA_ISA best" b1ks="1 3"
if [ "$ranks" -gt 1 ] || sweep_lean; then
  levels=best b1ks=3
  head -8 "$tmp/b1req.jsonl" > "$tmp/b1req8.jsonl" && mv "$tmp/b1req8.jsonl" "$tmp/b1req.jsonl"
fi
for mdl in kjv v3; do
  if [ "$mdl" = kjv ]; then mdir=$model in=$tmp/b1req.jsonl lv=$levels; else mdir=$src/tests/golden/mtp/v3/model in=$tmp/b1v3.jsonl lv=best; fi
  for level in $lv; do
    b1_run "$mdir" "$in" "$tmp/b1-$mdl-$level-base.jsonl" "$level"
    check "batch 1, $mdl at $level: run without drafts" $? "$(tail -3 "$tmp/b1-$mdl-$level-base.jsonl.err")"
    for k in $b1ks; do
      out=$tmp/b1-$mdl-$level-k$k.jsonl
      b1_run "$mdir" "$in" "$out" "$level" --speculative mtp:$k
      rc=$?
      [ $rc -eq 0 ] && [ "$(grep -c '"speculative":{"verify_steps":[1-9]' "$out")" -ge 3 ] &&
        cmp -s <(nospec "$tmp/b1-$mdl-$level-base.jsonl") <(nospec "$out")
      check "batch 1, $mdl at $level, mtp:$k: whole lines equal the run without drafts ($ranks ranks)" $? \
        "rc $rc: $(diff <(nospec "$tmp/b1-$mdl-$level-base.jsonl") <(nospec "$out") | head -4 | cut -c1-400)"
    done
  done
done
if [ "$ranks" -eq 1 ]; then
  # numla serve: usage.speculative in a completion, the figures in /metrics
  pids=()
  trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
  if start_server "$tmp/serve.err" "$bin" serve --model "$model" --port 0 --threads 1 --speculative mtp:2; then
    body=$(curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "And the Lord said unto Moses,", "max_tokens": 24, "temperature": 0, "ignore_eos": true}')
    echo "$body" | grep -Eq '"speculative": ?\{[^}]*"accepted_tokens": ?[1-9]'
    check "serve: usage.speculative in a completion" $? "$(echo "$body" | cut -c1-400)"
    # the Responses API's usage carries it too, in the object and in response.completed
    body=$(curl -s -m 60 "http://127.0.0.1:$port/v1/responses" -H 'Content-Type: application/json' \
      -d '{"input": "And the Lord said unto Moses,", "max_output_tokens": 24, "temperature": 0}')
    echo "$body" | grep -Eq '"usage": ?\{[^{}]*(\{[^{}]*\}[^{}]*)*"speculative": ?\{[^}]*"accepted_tokens": ?[1-9]'
    check "serve: usage.speculative in a response (/v1/responses)" $? "$(echo "$body" | cut -c1-600)"
    body=$(curl -s -N -m 60 "http://127.0.0.1:$port/v1/responses" -H 'Content-Type: application/json' \
      -d '{"input": "And the Lord said unto Moses,", "max_output_tokens": 24, "temperature": 0, "stream": true}')
    echo "$body" | grep -A1 -E '^event: response\.(completed|incomplete)$' |
      grep -Eq '^data: .*"speculative": ?\{[^}]*"accepted_tokens": ?[1-9]'
    check "serve: usage.speculative in a streamed response's last event" $? "$(echo "$body" | tail -2 | cut -c1-600)"
    # the gauges are refreshed at most 10 times a second: wait for the request's figures
    for _ in $(seq 1 50); do
      m=$(curl -s -m 10 "http://127.0.0.1:$port/metrics")
      echo "$m" | grep -Eq '^numla_spec_accepted_tokens_total [1-9]' && break
      sleep 0.1
    done
    echo "$m" | grep -Eq '^numla_spec_draft_tokens_total [1-9]' &&
      echo "$m" | grep -Eq '^numla_spec_accepted_tokens_total [1-9]' &&
      echo "$m" | grep -Eq '^numla_spec_acceptance_rate (0\.[0-9]*[1-9]|1\.0*$)'
    check "serve: /metrics has the speculative figures" $? "$(echo "$m" | grep spec)"
    kill "$spid"; wait "$spid" 2>/dev/null
    grep -q 'numla serve:   speculative mtp:2: acceptance' "$tmp/serve.err"
    check "serve: the summary has the speculative line" $? "$(tail -3 "$tmp/serve.err")"
  else
    check "serve --speculative starts" 1 "$(tail -3 "$tmp/serve.err")"
  fi
  # bench model --speculative runs its verify and MTP steps (figures only, never judged)
  "$bin" bench model --model "$model" --threads 1 --quick --prompt 64 --long-context 64 \
    --speculative 2 --text "$model/heldout.txt" > "$tmp/bench.txt" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q 'step of 3 rows: ' "$tmp/bench.txt" &&
    grep -q 'MTP step of 1 row: ' "$tmp/bench.txt" && grep -q '2 drafts:  acceptance 0.6' "$tmp/bench.txt"
  check "bench model --speculative 2" $? "rc $rc: $(tail -4 "$tmp/bench.txt")"
  # bench serve --speculative: each level serves with drafts and prints its acceptance
  "$bin" bench serve --model "$model" --threads 1 --quick --concurrency 1,2 --speculative mtp:2 \
    > "$tmp/bserve.txt" 2>&1
  rc=$?
  [ $rc -eq 0 ] && [ "$(grep -cE 'speculative mtp:2: acceptance [0-9.]+ % \([0-9]+ of [1-9][0-9]* draft tokens\)' "$tmp/bserve.txt")" -eq 2 ]
  check "bench serve --speculative mtp:2" $? "rc $rc: $(tail -4 "$tmp/bserve.txt")"
  # the routed-expert union of 1..3 consecutive held-out tokens, for each of the 3 MoE layers:
  # one row's is its 2 experts, 3 rows' at most 6
  [ "$(grep -cE '^    layer +[1-3]:  1 row 2\.00 \(1\.00x\)  2 rows [23]\.[0-9]+ .*3 rows [2-6]\.[0-9]+' "$tmp/bench.txt")" -eq 3 ] &&
    grep -q 'of models/kjv-v3/heldout.txt\|heldout.txt; 2 of 8 experts per token' "$tmp/bench.txt"
  check "bench model --speculative 2: the routed-expert union per layer" $? "$(grep -A5 'routed experts' "$tmp/bench.txt")"
  "$bin" run --model "$model" --input "$tmp/req.jsonl" --output "$tmp/bad.jsonl" --speculative mtp:9 2> "$tmp/bad.err"
  [ $? -eq 2 ] && grep -q 'speculative mtp:9 is not' "$tmp/bad.err"
  check "--speculative mtp:9 refused" $? "$(cat "$tmp/bad.err")"
  "$bin" synth --preset tiny --out "$tmp/tiny" --seed 4 >/dev/null 2>&1
  "$bin" run --model "$tmp/tiny" --input "$tmp/req.jsonl" --output "$tmp/none.jsonl" --speculative mtp 2> "$tmp/none.err"
  [ $? -ne 0 ] && grep -q 'no multi-token-prediction layer' "$tmp/none.err"
  check "a model without the MTP layer refused" $? "$(tail -2 "$tmp/none.err")"
  # a synthetic model with the MTP layer (numla synth --mtp on: V3's layer 61 tensors) of each
  # family that ships one (V3; V3.2 and GLM-5, whose layer has its own indexer, the prompts and
  # tokens past their index_topk) loads, drafts and gives the tokens of decoding without
  # drafts; bench model times its MTP step
  awk 'BEGIN { srand(3); for (r = 0; r < 4; r++) { s = ""; for (t = 0; t < 6 + 5 * r; t++) s = s (t ? "," : "") 2 + int(rand() * 500)
    printf "{\"id\": \"t%d\", \"prompt_tokens\": [%s], \"max_tokens\": 24, \"temperature\": 0, \"logprobs\": 2, \"ignore_eos\": true}\n", r, s } }' > "$tmp/treq.jsonl"
  for preset in tiny-v3 tiny-v32 tiny-glm5; do
    "$bin" synth --preset $preset --mtp on --out "$tmp/$preset" --seed 4 >/dev/null 2>&1
    check "synth --preset $preset --mtp on" $? ""
    "$bin" run --model "$tmp/$preset" --threads 1 --input "$tmp/treq.jsonl" --output "$tmp/tbase.jsonl" --no-progress 2> "$tmp/tbase.err" &&
      "$bin" run --model "$tmp/$preset" --threads 1 --input "$tmp/treq.jsonl" --output "$tmp/tk2.jsonl" --no-progress \
        --speculative mtp:2 2> "$tmp/tk2.err"
    rc=$?
    [ $rc -eq 0 ] && [ "$(decisive_tokens "$tmp/tbase.jsonl" "$tmp/tbase.jsonl" | grep -c ',')" -ge 3 ] &&
      cmp -s <(decisive_tokens "$tmp/tbase.jsonl" "$tmp/tbase.jsonl") <(decisive_tokens "$tmp/tbase.jsonl" "$tmp/tk2.jsonl") &&
      grep -q 'speculative mtp:2: acceptance' "$tmp/tk2.err"
    check "$preset synthetic MTP layer: --speculative mtp:2 runs, decisive tokens equal" $? "rc $rc: $(tail -2 "$tmp/tk2.err")"
    "$bin" bench model --model "$tmp/$preset" --threads 1 --quick --prompt 32 --long-context 32 \
      --speculative 1 > "$tmp/tbench.txt" 2>&1
    grep -q 'MTP step of 1 row: ' "$tmp/tbench.txt"
    check "bench model --speculative on the $preset synthetic MTP layer" $? "$(tail -3 "$tmp/tbench.txt")"
  done
  # a GGUF file with the nextn tensors (tests/golden/mtp/v3_gguf, the v3 directory's tensors)
  # drafts with them: its tokens are those of the directory decoded without drafts
  g=$src/tests/golden/mtp
  awk 'BEGIN { srand(5); for (r = 0; r < 4; r++) { s = ""; for (t = 0; t < 6 + 5 * r; t++) s = s (t ? "," : "") 2 + int(rand() * 280)
    printf "{\"id\": \"t%d\", \"prompt_tokens\": [%s], \"max_tokens\": 20, \"temperature\": 0, \"logprobs\": 2, \"ignore_eos\": true}\n", r, s } }' > "$tmp/greq.jsonl"
  "$bin" run --model "$g/v3/model" --threads 1 --input "$tmp/greq.jsonl" --output "$tmp/gbase.jsonl" --no-progress 2> "$tmp/gbase.err" &&
    "$bin" run --model "$g/v3_gguf/model.gguf" --threads 1 --input "$tmp/greq.jsonl" --output "$tmp/gk2.jsonl" \
      --no-progress --speculative mtp:2 2> "$tmp/gk2.err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(decisive_tokens "$tmp/gbase.jsonl" "$tmp/gbase.jsonl" | grep -c ',')" -ge 3 ] &&
    cmp -s <(decisive_tokens "$tmp/gbase.jsonl" "$tmp/gbase.jsonl") <(decisive_tokens "$tmp/gbase.jsonl" "$tmp/gk2.jsonl") &&
    grep -q 'speculative mtp:2: acceptance' "$tmp/gk2.err"
  check "GGUF with nextn tensors: --speculative mtp:2 runs, decisive tokens equal" $? "rc $rc: $(tail -2 "$tmp/gk2.err")"
fi
echo "speculative ($ranks ranks): $pass passed, $fail failed"
[ "$fail" -eq 0 ]
