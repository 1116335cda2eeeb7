#!/usr/bin/env bash
# tests/mpi/v3_fp8_test.sh NUMLA DIR — a DeepSeek-V3-shaped checkpoint in the published FP8
# format (F8_E4M3 weights + 128x128 weight_scale_inv, 4 layers: 3 dense + 1 MoE of 16 experts,
# hidden 7168, sharded files + index, ~6.4 GB) is written by numla synth, then served through
# launch/numla-launch on 2 ranks and on 1 rank: every request answered, the greedy ones with the
# same tokens on both. Label slow (a minute and ~10 GB of memory on 2 cores).
set -u
bin=$1 dir=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -f "$dir/model.safetensors.index.json" ]; then
  "$bin" synth --preset v3 --layers 4 --experts 16 --weights fp8 --mtp off --out "$dir" \
    --tokenizer "$root/tests/golden/tokenizer/bpe1k" || exit 1
fi
grep -q '"quant_method": *"fp8"' "$dir/config.json" || { echo "FAIL: no fp8 quantization_config"; exit 1; }
reqs="$dir/requests.jsonl"
grep -E '"temperature": 0[,}]' "$root/scripts/demo_requests.jsonl" | head -4 > "$reqs"
n=$(wc -l < "$reqs")
fail=0
for ranks in 2 1; do
  out="$dir/out$ranks.jsonl"
  rm -f "$out"
  "$root/launch/numla-launch" --ranks $ranks --oversubscribe -- run --model "$dir" --input "$reqs" \
    --output "$out" --kv-memory 0.25 --max-context 512 2> "$dir/err$ranks.txt"
  rc=$?
  got=$(grep -c '"finish_reason":"length"' "$out" 2>/dev/null)
  if [ $rc -ne 0 ] || [ "${got:-0}" -ne "$n" ]; then
    echo "FAIL: $ranks rank(s): exit $rc, $got of $n requests answered"; tail -5 "$dir/err$ranks.txt"; fail=1
  fi
done
toks() { sed -E 's/^\{"id":"([^"]*)","output_tokens":(\[[^]]*\]).*/\1 \2/' "$1" | sort; }
if ! cmp -s <(toks "$dir/out2.jsonl") <(toks "$dir/out1.jsonl"); then
  echo "FAIL: 2 ranks and 1 rank give different greedy tokens"; diff <(toks "$dir/out2.jsonl") <(toks "$dir/out1.jsonl") | head; fail=1
fi
[ $fail -eq 0 ] && echo "v3 fp8: $n greedy requests, the same tokens on 1 and 2 ranks"
exit $fail
