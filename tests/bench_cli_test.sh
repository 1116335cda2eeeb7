#!/usr/bin/env bash
# tests/bench_cli_test.sh NUMLA_BIN — the benchmarks read their numbers as `numla run` does: a
# bad --threads (or a benchmark's own count) is refused with exit 2 and a message naming the
# command, the option and the value, before any model is opened.
set -uo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect_refused() { # expected-message args...
  local want=$1
  shift
  "$bin" "$@" > /dev/null 2> "$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL numla $*: rc=$rc (want 2), stderr: $(cat "$tmp/err") (want: $want)"; fail=1
  fi
}
for b in model engine serve formats; do
  expect_refused "numla bench $b: option --threads: 'x' is not a number" \
    bench $b --model "$tmp/none" --threads x
done
expect_refused "numla bench model: option --prompt: '5x' is not a number" \
  bench model --model "$tmp/none" --prompt 5x
expect_refused "numla bench serve: option --max-batch-tokens: 'lots' is not a number" \
  bench serve --model "$tmp/none" --max-batch-tokens lots
expect_refused "numla bench serve: bad --concurrency 1,8x" \
  bench serve --model "$tmp/none" --concurrency 1,8x
expect_refused "numla bench sampler: option --reps: 'x' is not a number" \
  bench sampler --vocab 3000 --reps x
# the same words as numla run
expect_refused "numla run: option --threads: 'x' is not a number" \
  run --model "$tmp/none" --input "$tmp/in" --output "$tmp/out" --threads x
# a long context the model cannot hold is refused before any work, naming the context; the
# default one is cut to fit (models/kjv-v3 holds 2048 tokens, --quick's default is 2048)
kjv=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/models/kjv-v3
"$bin" bench model --model "$kjv" --threads 1 --quick --long-context 4096 > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -eq 0 ] || ! grep -qF "bench model: --long-context 4096 and its 16 decode tokens do not fit the model's context (2048)" "$tmp/err"; then
  echo "FAIL bench model --long-context 4096 on kjv-v3: rc=$rc, stderr: $(cat "$tmp/err")"; fail=1
fi
"$bin" bench model --model "$kjv" --threads 1 --quick --json > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ] || ! grep -qF "the long context is 2031 tokens" "$tmp/err" || ! grep -q '"long_context": 2031' "$tmp/out"; then
  echo "FAIL bench model --quick on kjv-v3 (context 2048): rc=$rc, stderr: $(tail -3 "$tmp/err")"; fail=1
fi
exit $fail
