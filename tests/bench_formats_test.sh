#!/usr/bin/env bash
# tests/bench_formats_test.sh NUMLA_BIN — `numla bench formats` stays runnable: on the tiny synth
# model it loads bf16, fp8 and int8 side by side, decodes them in turn and prints one row per
# format (exit 0); a format it does not know is refused naming it (exit 2). On the tiny
# DeepSeek-V4 model (tests/golden/v4/model_fp8: FP8 projections, FP4 experts) its default rows
# are the stored weights' two activation modes, stored and stored-q8, each with its bandwidth
# against the read probe; a conversion format is refused there. Prints ratios; no time is
# asserted.
set -uo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$bin" synth --preset tiny --out "$tmp/tiny" --seed 5 >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
"$bin" bench formats --model "$tmp/tiny" --threads 1 --tokens 4 --prompt 6 > "$tmp/out" 2> "$tmp/err"
rc=$?
rows=$(grep -cE '^  (bf16|fp8|int8) +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$tmp/out")
if [ $rc -ne 0 ] || [ "$rows" -ne 3 ]; then
  echo "FAIL bench formats: rc=$rc, $rows format rows"; cat "$tmp/out" "$tmp/err"; fail=1
fi
"$bin" bench formats --model "$tmp/tiny" --weights bf16,q4 > /dev/null 2> "$tmp/bad"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "'q4' is not bf16, fp8 or int8" "$tmp/bad"; then
  echo "FAIL bench formats --weights bf16,q4: rc=$rc: $(cat "$tmp/bad")"; fail=1
fi
v4=$(cd "$(dirname "$0")" && pwd)/golden/v4/model_fp8
"$bin" bench formats --model "$v4" --threads 1 --tokens 4 --prompt 6 > "$tmp/v4out" 2> "$tmp/v4err"
rc=$?
rows=$(grep -cE '^  (stored|stored-q8) +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$tmp/v4out")
if [ $rc -ne 0 ] || [ "$rows" -ne 2 ]; then
  echo "FAIL bench formats on DeepSeek-V4: rc=$rc, $rows rows"; cat "$tmp/v4out" "$tmp/v4err"; fail=1
fi
"$bin" bench formats --model "$v4" --weights stored,bf16 > /dev/null 2> "$tmp/v4bad"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "'bf16': deepseek_v4 runs its weights as stored" "$tmp/v4bad"; then
  echo "FAIL bench formats --weights stored,bf16 on DeepSeek-V4: rc=$rc: $(cat "$tmp/v4bad")"; fail=1
fi
exit $fail
