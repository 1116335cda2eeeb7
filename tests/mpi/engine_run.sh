#!/usr/bin/env bash
# tests/mpi/engine_run.sh MPIEXEC NUMLA MODEL MODE — `numla run` under mpiexec (NUMLA is
# build/numla, or build/numla_faulty for kill and fail: the same with fault injection).
#   run-N  N ranks must produce the single-rank run's output tokens for every request, and the
#          same error record for the bad line.
#   kill   3 ranks, rank 1 SIGKILLs itself at step 5 (NUMLA_TEST_DIE_AT_STEP): mpiexec must
#          exit non-zero within 20 s, and every line already written must be a whole record.
#   fail   the same with an error on rank 1 at step 5 (NUMLA_TEST_FAIL_AT_STEP): rank 1 must
#          abort the job (numla_comm_abort) with a message naming the failure.
set -uo pipefail
mpiexec=$1 numla=$2 model=$3 mode=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
req=$tmp/req.jsonl
for i in $(seq 1 12); do
  p=$(( (i * 37) % 400 + 2 ))
  echo "{\"id\": \"r$i\", \"prompt_tokens\": [$p, $((p + 3)), $((p + 11)), $((p % 7 + 2))], \"temperature\": 0, \"max_tokens\": $i}"
  [ "$i" -eq 3 ] && echo '{"id": "bad", "prompt_tokens": [999999], "max_tokens": 2}'
done >"$req"
tokens() { sed -e 's/.*"id":\("[^"]*"\).*"output_tokens":\(\[[^]]*\]\).*"finish_reason":\("[a-z]*"\).*/\1 \2 \3/' "$1"; }

case "$mode" in
run-*)
  n=${mode#run-}
  "$numla" run --model "$model" --input "$req" --output "$tmp/o1.jsonl" --threads 1 2>"$tmp/e1" ||
    { cat "$tmp/e1"; echo "engine_run: FAIL: single-rank run failed"; exit 1; }
  timeout 100 "$mpiexec" -n "$n" --oversubscribe --bind-to none "$numla" run --model "$model" \
    --input "$req" --output "$tmp/on.jsonl" --threads 1 2>"$tmp/en" ||
    { cat "$tmp/en"; echo "engine_run: FAIL: $n-rank run failed"; exit 1; }
  tail -n 2 "$tmp/en"
  [ "$(wc -l <"$tmp/o1.jsonl")" -eq 13 ] || { echo "engine_run: FAIL: expected 13 records"; exit 1; }
  if ! diff <(tokens "$tmp/o1.jsonl") <(tokens "$tmp/on.jsonl"); then
    echo "engine_run: FAIL: $n ranks gave other tokens than 1 rank"; exit 1
  fi
  echo "engine_run[$mode]: PASS: 13 records, tokens identical to the single-rank run" ;;
kill|fail)
  var=NUMLA_TEST_DIE_AT_STEP
  [ "$mode" = fail ] && var=NUMLA_TEST_FAIL_AT_STEP
  start=$(date +%s.%N)
  env "$var=5" timeout 60 "$mpiexec" -n 3 --oversubscribe --bind-to none \
    -x "$var" "$numla" run --model "$model" --input "$req" \
    --output "$tmp/o.jsonl" --threads 1 >"$tmp/log" 2>&1
  rc=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  tail -n 12 "$tmp/log"
  echo "engine_run[$mode]: mpiexec exit code $rc after ${elapsed}s"
  [ "$rc" -ne 124 ] || { echo "engine_run: FAIL: the job hung"; exit 1; }
  [ "$rc" -ne 0 ] || { echo "engine_run: FAIL: exit 0 although rank 1 died"; exit 1; }
  [ "$(echo "$elapsed > 20" | bc)" -eq 0 ] || { echo "engine_run: FAIL: teardown took ${elapsed}s"; exit 1; }
  grep -q "rank 1: test fault\|test fault: injected failure at step 5 on rank 1" "$tmp/log" ||
    { echo "engine_run: FAIL: rank 1 did not fail as asked"; exit 1; }
  if [ "$mode" = fail ]; then
    grep -q "rank 1 aborting" "$tmp/log" || { echo "engine_run: FAIL: no abort message from rank 1"; exit 1; }
  fi
  lines=$(wc -l <"$tmp/o.jsonl")
  [ "$lines" -ge 1 ] && [ "$lines" -lt 13 ] ||
    { echo "engine_run: FAIL: $lines records before the kill (want 1..12)"; exit 1; }
  # every line is a whole record: one JSON object, newline-terminated
  [ -z "$(tail -c 1 "$tmp/o.jsonl")" ] || { echo "engine_run: FAIL: torn last line"; exit 1; }
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/o.jsonl" ||
      { echo "engine_run: FAIL: a record is not valid JSON"; exit 1; }
  fi
  bad=$(grep -cv '^{"id":.*"usage":{.*}}$' "$tmp/o.jsonl")
  [ "$bad" -eq 0 ] || { echo "engine_run: FAIL: $bad malformed records"; exit 1; }
  echo "engine_run[$mode]: PASS: job stopped (exit $rc) in ${elapsed}s; $lines records intact" ;;
esac
