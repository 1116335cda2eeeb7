#!/usr/bin/env bash
# tests/mpi/perplexity_test.sh NUMLA_BIN MPIEXEC RANKS SOURCE_DIR — `numla perplexity` through
# MPIEXEC on RANKS ranks, on the golden model and text of tests/golden/ppl/ (--ctx 64, f32 KV):
#   ppl    "Final estimate: PPL = X" within 1e-3 of expected.json's (transformers' logits)
#   self   --kl-base against the same run saved on one rank: mean KLD below 1e-4, top-1 100 %
set -uo pipefail
bin=$1 mpiexec=$2 ranks=$3 src=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/test_lib.sh"
model=$src/tests/golden/ppl/model text=$src/tests/golden/ppl/text.txt
opts=(--model "$model" --file "$text" --ctx 64 --threads 1 --kv-dtype f32 --kv-blocks 64)
# expected.json: the "ppl" of the run whose "ctx" is 64 (one key per line)
want=$(awk '/"ctx": 64,/ { on = 1 } on && /"ppl":/ { gsub(/[",]/, "", $2); print $2; exit }' \
  "$src/tests/golden/ppl/expected.json")

"$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" perplexity "${opts[@]}" \
  > "$tmp/ppl.out" 2> "$tmp/ppl.err"
rc=$?
got=$(sed -nE 's/^Final estimate: PPL = ([0-9.]+).*/\1/p' "$tmp/ppl.out")
ok=$(awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; print (a != "" && b > 0 && d <= 1e-3 * b) ? 0 : 1 }')
check ppl $((rc != 0 || ok)) "rc $rc, PPL '$got' vs transformers $want: $(tail -3 "$tmp/ppl.err")"

"$bin" perplexity "${opts[@]}" --save-logits "$tmp/base.kld" > /dev/null 2> "$tmp/save.err"
check save $? "$(tail -3 "$tmp/save.err")"
"$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin" perplexity "${opts[@]}" \
  --kl-base "$tmp/base.kld" > "$tmp/kl.out" 2> "$tmp/kl.err"
rc=$?
kld=$(sed -nE 's/^Mean    KLD +: +(-?[0-9.]+).*/\1/p' "$tmp/kl.out")
top=$(sed -nE 's/^Same top p +: +([0-9.]+).*/\1/p' "$tmp/kl.out")
ok=$(awk -v k="$kld" -v t="$top" 'BEGIN { if (k < 0) k = -k; print (k != "" && k < 1e-4 && t == 100) ? 0 : 1 }')
check self $((rc != 0 || ok)) "rc $rc, KLD '$kld', same top '$top': $(tail -3 "$tmp/kl.err")"

echo "perplexity on $ranks ranks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
