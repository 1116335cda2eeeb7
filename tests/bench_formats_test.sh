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
rows() { # rows NAME MODEL NAMES COUNT: the default run prints COUNT rows of NAMES (a regex)
  "$bin" bench formats --model "$2" --threads 1 --tokens 4 --prompt 6 > "$tmp/$1.out" 2> "$tmp/$1.err"
  local rc=$? n
  n=$(grep -cE "^  ($3) +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ " "$tmp/$1.out")
  if [ $rc -ne 0 ] || [ "$n" -ne "$4" ]; then
    echo "FAIL bench formats ($1): rc=$rc, $n format rows"; cat "$tmp/$1.out" "$tmp/$1.err"; fail=1
  fi
}
refused() { # refused NAME MODEL WEIGHTS MESSAGE: --weights WEIGHTS exits 2 naming MESSAGE
  "$bin" bench formats --model "$2" --weights "$3" > /dev/null 2> "$tmp/$1.bad"
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -q "$4" "$tmp/$1.bad"; then
    echo "FAIL bench formats ($1) --weights $3: rc=$rc: $(cat "$tmp/$1.bad")"; fail=1
  fi
}
v4=$(cd "$(dirname "$0")" && pwd)/golden/v4/model_fp8
rows tiny "$tmp/tiny" 'bf16|fp8|int8' 3
refused tiny "$tmp/tiny" bf16,q4 "'q4' is not bf16, fp8 or int8"
rows v4 "$v4" 'stored|stored-q8' 2
refused v4 "$v4" stored,bf16 "'bf16': deepseek_v4 runs its weights as stored"
exit $fail
