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
exit $fail
