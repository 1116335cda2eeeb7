#!/usr/bin/env bash
# tests/bench_serve_schema_test.sh NUMLA_BIN — `numla bench serve --schema` on the tiny model
# with the synthetic tokenizer (`numla synth --tokenizer synthetic`): both levels are served
# without and with the schema and give one `serve_schema` line each, every constrained output
# having been checked against the schema by the benchmark (it fails otherwise; with the bounded
# schema and room enough, each is a whole document ended by EOS), the scheduler
# masking with the grammar vocabulary the benchmark built (numla_sched_options.grammar_vocab: it
# gets no tokenizer to build its own from); a model without
# a tokenizer and a schema that is not JSON are refused naming the problem. Prints ratios only;
# no time is asserted.
set -uo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # name ok detail
  if [ "$2" != 0 ]; then echo "FAIL $1: $3"; fail=1; else echo "ok $1"; fi
}
"$bin" synth --preset tiny --tokenizer synthetic --out "$tmp/tok" > /dev/null 2>&1
check "synth --tokenizer synthetic" $? "$(ls "$tmp/tok")"
"$bin" synth --preset tiny --out "$tmp/bare" > /dev/null 2>&1

"$bin" bench serve --model "$tmp/tok" --quick --threads 1 --concurrency 1,3 --schema builtin \
  --json > "$tmp/out.json" 2> "$tmp/err"
rc=$?
n=$(grep -c '"bench":"serve_schema"' "$tmp/out.json")
req=$(grep '"bench":"serve_schema"' "$tmp/out.json" | grep -o '"with_requests":[0-9]*' | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$n" = 2 ] && [ "$req" = '"with_requests":1 "with_requests":3 ' ]
check "bench serve --schema builtin" $? "rc=$rc, $n serve_schema lines ($req): $(tail -3 "$tmp/err")"

# bounded: every document is short, so with room for the longest every output is a whole one
"$bin" bench serve --model "$tmp/tok" --threads 1 --min-prompt 16 --max-prompt 32 \
  --output-tokens 450 --rounds 1 --concurrency 2 --schema bounded --json > "$tmp/out.json" 2> "$tmp/err"
rc=$?
line=$(grep '"bench":"serve_schema"' "$tmp/out.json")
echo "$line" | grep -q '"with_requests":2,"with_complete":2,'
check "bench serve --schema bounded: whole documents" $? "rc=$rc: $line $(tail -3 "$tmp/err")"

printf '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}' \
  > "$tmp/schema.json"
"$bin" bench serve --model "$tmp/tok" --quick --threads 1 --concurrency 2 --repeat 2 \
  --schema "$tmp/schema.json" > "$tmp/out.txt" 2> "$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "decode with / without the schema, median of 2" "$tmp/out.txt"
check "bench serve --schema FILE --repeat 2" $? "rc=$rc: $(tail -3 "$tmp/out.txt") $(tail -3 "$tmp/err")"

printf '{"type": ' > "$tmp/bad.json"
"$bin" bench serve --model "$tmp/tok" --quick --threads 1 --concurrency 1 \
  --schema "$tmp/bad.json" > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -qF -- "--schema $tmp/bad.json: not JSON" "$tmp/err"
check "a schema that is not JSON" $? "rc=$rc: $(head -3 "$tmp/err")"

"$bin" bench serve --model "$tmp/bare" --quick --threads 1 --concurrency 1 --schema builtin \
  > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "tokenizer" "$tmp/err"
check "a model without a tokenizer" $? "rc=$rc: $(head -3 "$tmp/err")"
exit $fail
