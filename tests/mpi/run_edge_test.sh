#!/usr/bin/env bash
# tests/mpi/run_edge_test.sh NUMLA_BIN MODE [MPIEXEC] — `numla run` given unlucky inputs and
# options (issue 19), on the tiny synth preset.
#   files  one rank: pipe-like inputs (a FIFO, a pipe through /dev/stdin, <(...)) are read
#          whole, a trickling writer's requests are answered while it is silent, a line that
#          arrives in two pieces is one request; a directory input is an error; --resume tells apart ids sharing a 600-byte
#          prefix; an output that is the input (by any name) is refused, the file untouched;
#          output paths that cannot be written are reported before the model loads, a failed
#          write with its cause and path; duplicate ids get an error record, and --resume
#          leaves the output exactly as an uninterrupted run; --threads 100000 is refused
#   kv     3 oversubscribed ranks on this node: their KV pools together fit in the node's free
#          memory; --max-context changes the pool; --kv-memory beyond what exists is an error
#          naming the figure and what is available
#   exits  (slow) NUMLA_EXIT_TRIALS (2000) one-rank runs that fail at once (an output that cannot
#          be written), with three busy loops loading the cores: every one exits 1, none dies of a
#          signal on its way out (Open MPI's singleton finalize, engine/cli/cli.c). A stress
#          test: without the fix about one run in 500 died, so it fails with high probability,
#          not with certainty
set -uo pipefail
bin=$(realpath "$1") mode=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

"$bin" synth --preset tiny --out "$tmp/tiny" --seed 9 >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
gen() { # gen N: N short greedy requests q0..q(N-1)
  awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++)
    printf "{\"id\": \"q%d\", \"prompt_tokens\": [%d, %d, %d], \"max_tokens\": 3, \"temperature\": 0, \"ignore_eos\": true}\n", i, i + 2, i + 7, i + 11 }'
}
ids() { sed -E 's/^\{"id":("[^"]*"|[0-9]+|null),.*/\1/' "$1" | sort; }
# the loaded line's KV pool: "blocks GiB"
kv_of() { sed -nE 's/.*KV ([0-9]+) blocks of [0-9]+ \(([0-9.]+) GiB per rank.*/\1 \2/p' "$1"; }
mem_available_kib() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }

if [ "$mode" = files ]; then
  opts=(--model "$tmp/tiny" --threads 1 --kv-blocks 64 --max-seqs 8 --max-batch-tokens 64)
  gen 5 > "$tmp/req.jsonl"
  "$bin" run "${opts[@]}" --input "$tmp/req.jsonl" --output "$tmp/ref.jsonl" 2> "$tmp/ref.err"
  check reference $? "$(tail -3 "$tmp/ref.err")"

  # 1. pipe-like inputs: every request is served, once
  mkfifo "$tmp/fifo"
  cat "$tmp/req.jsonl" > "$tmp/fifo" &
  "$bin" run "${opts[@]}" --input "$tmp/fifo" --output "$tmp/fifo.jsonl" 2> "$tmp/fifo.err"
  rc=$?
  wait
  [ $rc -eq 0 ] && cmp -s <(ids "$tmp/ref.jsonl") <(ids "$tmp/fifo.jsonl")
  check input-fifo $? "rc=$rc $(grep summary "$tmp/fifo.err")"
  cat "$tmp/req.jsonl" | "$bin" run "${opts[@]}" --input /dev/stdin --output "$tmp/stdin.jsonl" 2> "$tmp/stdin.err"
  rc=$?
  [ $rc -eq 0 ] && cmp -s <(ids "$tmp/ref.jsonl") <(ids "$tmp/stdin.jsonl")
  check input-dev-stdin-pipe $? "rc=$rc $(grep summary "$tmp/stdin.err")"
  "$bin" run "${opts[@]}" --input <(cat "$tmp/req.jsonl") --output "$tmp/procsub.jsonl" 2> "$tmp/procsub.err"
  rc=$?
  [ $rc -eq 0 ] && cmp -s <(ids "$tmp/ref.jsonl") <(ids "$tmp/procsub.jsonl")
  check input-process-substitution $? "rc=$rc $(grep summary "$tmp/procsub.err")"
  # a stop while the input is open but silent (a writer still holding the pipe): the requests
  # already read are answered and the run ends as a drain (143), not as a failed read
  mkfifo "$tmp/slow"
  { head -n 2 "$tmp/req.jsonl"; exec sleep 20; } > "$tmp/slow" &
  writer=$!
  "$bin" run "${opts[@]}" --input "$tmp/slow" --output "$tmp/slow.jsonl" 2> "$tmp/slow.err" &
  runner=$!
  for _ in $(seq 100); do [ "$(wc -l < "$tmp/slow.jsonl" 2>/dev/null)" = 2 ] && break; sleep 0.1; done
  kill -TERM $runner
  wait $runner
  rc=$?
  kill $writer 2>/dev/null; wait $writer 2>/dev/null
  [ $rc -eq 143 ] && [ "$(wc -l < "$tmp/slow.jsonl")" = 2 ] && ! grep -q 'read error' "$tmp/slow.err"
  check input-silent-pipe-stop $? "rc=$rc $(wc -l < "$tmp/slow.jsonl") records; $(grep -E 'error|summary' "$tmp/slow.err" | head -2)"
  # a writer that trickles: the first request is answered while the pipe is silent (the
  # reader does not wait for the next line with requests in flight), and a line that arrives
  # in two pieces is still one request (each writer ends in `exec sleep`, so killing it closes
  # the pipe: the runners see end of input then, not when a leftover sleep exits)
  mkfifo "$tmp/trickle"
  { head -n 1 "$tmp/req.jsonl"; exec sleep 30; } > "$tmp/trickle" &
  writer=$!
  { tail -n +2 "$tmp/req.jsonl" | head -n 1 | cut -c1-20 | tr -d '\n'; } > "$tmp/half1"
  { tail -n +2 "$tmp/req.jsonl" | head -n 1 | cut -c21-; } > "$tmp/half2"
  mkfifo "$tmp/trickle2"
  { cat "$tmp/half1"; sleep 1; cat "$tmp/half2"; exec sleep 30; } > "$tmp/trickle2" &
  writer2=$!
  "$bin" run "${opts[@]}" --input "$tmp/trickle" --output "$tmp/trickle.jsonl" 2> "$tmp/trickle.err" &
  runner=$!
  "$bin" run "${opts[@]}" --input "$tmp/trickle2" --output "$tmp/trickle2.jsonl" 2> "$tmp/trickle2.err" &
  runner2=$!
  got=0 got2=0
  for _ in $(seq 200); do
    [ "$(wc -l < "$tmp/trickle.jsonl" 2>/dev/null)" = 1 ] && got=1
    [ "$(wc -l < "$tmp/trickle2.jsonl" 2>/dev/null)" = 1 ] && got2=1
    [ $got = 1 ] && [ $got2 = 1 ] && break
    sleep 0.1
  done
  kill $writer $writer2 2>/dev/null; wait $writer $writer2 2>/dev/null
  wait $runner; rc=$?
  wait $runner2; rc2=$?
  [ $got = 1 ] && [ $rc -eq 0 ] && grep -q '"id":"q0"' "$tmp/trickle.jsonl"
  check input-trickle-answers-while-silent $? "rc=$rc answered-before-eof=$got $(grep -E 'error|summary' "$tmp/trickle.err" | head -2)"
  [ $got2 = 1 ] && [ $rc2 -eq 0 ] && grep -q '"id":"q1"' "$tmp/trickle2.jsonl" && ! grep -q '"error"' "$tmp/trickle2.jsonl"
  check input-line-in-two-pieces $? "rc=$rc2 answered=$got2 $(head -c 300 "$tmp/trickle2.jsonl")"
  mkdir "$tmp/adir"
  "$bin" run "${opts[@]}" --input "$tmp/adir" --output "$tmp/dir.jsonl" 2> "$tmp/dir.err"
  rc=$?
  [ $rc -ne 0 ] && grep -q "$tmp/adir is a directory" "$tmp/dir.err"
  check input-directory $? "rc=$rc $(cat "$tmp/dir.err")"

  # 2. --resume compares whole ids: two ids sharing a 600-byte prefix, only the first answered
  long=$(printf 'x%.0s' $(seq 1 600))
  {
    echo "{\"id\": \"${long}A\", \"prompt_tokens\": [5, 6], \"max_tokens\": 2, \"temperature\": 0}"
    echo "{\"id\": \"${long}B\", \"prompt_tokens\": [7, 8], \"max_tokens\": 2, \"temperature\": 0}"
  } > "$tmp/long.jsonl"
  "$bin" run "${opts[@]}" --input "$tmp/long.jsonl" --output "$tmp/long_full.jsonl" 2>/dev/null
  grep "${long}A\"" "$tmp/long_full.jsonl" > "$tmp/long_part.jsonl"
  "$bin" run "${opts[@]}" --input "$tmp/long.jsonl" --output "$tmp/long_part.jsonl" --resume 2> "$tmp/long.err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/long_part.jsonl")" -eq 2 ] && grep -q "${long}B\"" "$tmp/long_part.jsonl" &&
    cmp -s <(sort "$tmp/long_full.jsonl") <(sort "$tmp/long_part.jsonl")
  check resume-long-ids $? "rc=$rc $(wc -l < "$tmp/long_part.jsonl") records; $(grep summary "$tmp/long.err")"

  # 4. the output is the input: refused with exit 2 before anything is written, by any name
  cp "$tmp/req.jsonl" "$tmp/same.jsonl"
  ln -s "$tmp/same.jsonl" "$tmp/link.jsonl"
  for out in "$tmp/same.jsonl" "$tmp/link.jsonl" "$tmp/./same.jsonl"; do
    for r in "" --resume; do
      (cd "$tmp" && "$bin" run "${opts[@]}" --input same.jsonl --output "$out" $r 2> "$tmp/same.err")
      rc=$?
      [ $rc -eq 2 ] && grep -q "is the input file" "$tmp/same.err" && cmp -s "$tmp/req.jsonl" "$tmp/same.jsonl"
      check "output-is-input ${out#"$tmp"/} $r" $? "rc=$rc $(cat "$tmp/same.err") $(wc -c < "$tmp/same.jsonl") bytes"
    done
  done
  "$bin" run "${opts[@]}" --input - --output "$tmp/same.jsonl" < "$tmp/same.jsonl" 2> "$tmp/same.err"
  rc=$?
  [ $rc -eq 2 ] && cmp -s "$tmp/req.jsonl" "$tmp/same.jsonl"
  check "output-is-stdin" $? "rc=$rc $(cat "$tmp/same.err")"

  # 9. output paths that cannot be written fail before the model loads (for root too: a file
  # used as a directory, a missing directory, /proc), naming the path and the cause
  for out in /dev/null/x.jsonl "$tmp/missing/x.jsonl" /proc/numla-run-test.jsonl; do
    "$bin" run "${opts[@]}" --input "$tmp/req.jsonl" --output "$out" 2> "$tmp/out.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q -- "--output $out: " "$tmp/out.err" && ! grep -q "loaded in" "$tmp/out.err"
    check "output-unwritable $out" $? "rc=$rc $(cat "$tmp/out.err")"
  done
  # an existing output survives a start that fails (the model cannot load)
  echo kept > "$tmp/kept.jsonl"
  "$bin" run --model "$tmp/no-model" --input "$tmp/req.jsonl" --output "$tmp/kept.jsonl" 2>/dev/null
  [ "$(cat "$tmp/kept.jsonl")" = kept ]; check output-kept-on-failed-start $? "$(head -c 100 "$tmp/kept.jsonl")"
  # a write that fails: the cause (errno) and the path
  "$bin" run "${opts[@]}" --input "$tmp/req.jsonl" --output /dev/full 2> "$tmp/full.err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "/dev/full: No space left on device" "$tmp/full.err"
  check write-error-errno $? "rc=$rc $(grep -v '^numla run:  ' "$tmp/full.err")"

  # 10. a duplicate id is an error record naming the first line; --resume after any cut gives
  # the same records as the uninterrupted run
  {
    gen 3
    echo '{"id": "q1", "prompt_tokens": [9, 9], "max_tokens": 2, "temperature": 0}'
    echo '{"id": 7, "prompt_tokens": [4], "max_tokens": 2, "temperature": 0}'
    echo '{"id": 7, "prompt_tokens": [4], "max_tokens": 2, "temperature": 0}'
    echo '{"id": "q1", "prompt_tokens": [8], "max_tokens": 2, "temperature": 0}'
  } > "$tmp/dup.jsonl"
  "$bin" run "${opts[@]}" --input "$tmp/dup.jsonl" --output "$tmp/dup_full.jsonl" 2> "$tmp/dup.err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/dup_full.jsonl")" -eq 7 ] &&
    grep -q '^{"id":"q1","output_tokens":\[\],"finish_reason":"error","error":"line 4: id \\"q1\\" already used on line 2"' "$tmp/dup_full.jsonl" &&
    grep -q '^{"id":7,.*"error":"line 6: id 7 already used on line 5"' "$tmp/dup_full.jsonl" &&
    grep -q '^{"id":"q1",.*"error":"line 7: id \\"q1\\" already used on line 2"' "$tmp/dup_full.jsonl" &&
    [ "$(grep -c '"finish_reason":"length"' "$tmp/dup_full.jsonl")" -eq 4 ]
  check duplicate-id-error $? "rc=$rc $(cat "$tmp/dup_full.jsonl")"
  # every prefix of the output (in its completion order), resumed, gives the whole set
  n=$(wc -l < "$tmp/dup_full.jsonl")
  bad=""
  for k in $(seq 0 "$n"); do
    head -n "$k" "$tmp/dup_full.jsonl" > "$tmp/dup_part.jsonl"
    "$bin" run "${opts[@]}" --input "$tmp/dup.jsonl" --output "$tmp/dup_part.jsonl" --resume 2>/dev/null ||
      bad="$bad rc@$k"
    cmp -s <(sort "$tmp/dup_full.jsonl") <(sort "$tmp/dup_part.jsonl") || bad="$bad diff@$k"
  done
  [ -z "$bad" ]; check duplicate-id-resume-exact $? "$bad"
  # the records without the first use of q1 (the duplicates' errors kept): only q1 is redone
  grep -v '^{"id":"q1","output_tokens":\[[0-9]' "$tmp/dup_full.jsonl" > "$tmp/dup_part.jsonl"
  "$bin" run "${opts[@]}" --input "$tmp/dup.jsonl" --output "$tmp/dup_part.jsonl" --resume 2> "$tmp/dup2.err"
  cmp -s <(sort "$tmp/dup_full.jsonl") <(sort "$tmp/dup_part.jsonl") && grep -q "summary: 1 requests" "$tmp/dup2.err"
  check duplicate-id-resume-first-only $? "$(grep summary "$tmp/dup2.err") $(diff <(sort "$tmp/dup_full.jsonl") <(sort "$tmp/dup_part.jsonl") | head -3)"

  # 8. an absurd thread count is refused with a message (it crashed)
  "$bin" run "${opts[@]}" --threads 100000 --input "$tmp/req.jsonl" --output "$tmp/t.jsonl" 2> "$tmp/t.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--threads 100000 is more than" "$tmp/t.err"
  check threads-100000 $? "rc=$rc $(cat "$tmp/t.err")"
fi

if [ "$mode" = kv ]; then
  mpiexec=$3
  echo '{"id": "a", "prompt_tokens": [5, 6], "max_tokens": 2, "temperature": 0}' > "$tmp/req.jsonl"
  mpi=("$mpiexec" -n 3 --oversubscribe --bind-to none)
  # a pool sized from memory, uncapped by sequences: three ranks share the node
  before=$(mem_available_kib)
  "${mpi[@]}" "$bin" run --model "$tmp/tiny" --max-seqs 100000 --max-batch-tokens 100000 \
    --input "$tmp/req.jsonl" --output "$tmp/o.jsonl" 2> "$tmp/mem.err"
  rc=$?
  after=$(mem_available_kib)
  read -r _ gib < <(kv_of "$tmp/mem.err")
  avail=$(( before > after ? before : after ))
  awk -v g="${gib:-0}" -v a="$avail" 'BEGIN { exit !(g > 0 && 3 * g * 1048576 <= a) }'
  check kv-three-ranks-fit $? "rc=$rc 3 x ${gib:-?} GiB vs $((avail / 1048576)) GiB available; $(grep -E 'loaded|rank' "$tmp/mem.err" | head -3)"
  # the cap by --max-seqs x --max-context: blocks = seqs x ceil(context / block size)
  for ctx in 256 1000; do
    "${mpi[@]}" "$bin" run --model "$tmp/tiny" --max-seqs 8 --max-batch-tokens 64 --max-context $ctx \
      --input "$tmp/req.jsonl" --output "$tmp/o.jsonl" 2> "$tmp/cap.err"
    read -r blocks _ < <(kv_of "$tmp/cap.err")
    [ "${blocks:-0}" -eq $(( 8 * ((ctx + 15) / 16) )) ]
    check "kv-cap-context-$ctx" $? "${blocks:-?} blocks; $(grep -E 'loaded|rank' "$tmp/cap.err" | head -3)"
  done
  # more than exists: an error naming the figure and what there is (not a silent default)
  "${mpi[@]}" "$bin" run --model "$tmp/tiny" --kv-memory 1e12 \
    --input "$tmp/req.jsonl" --output "$tmp/o.jsonl" 2> "$tmp/big.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--kv-memory 1e12 GiB is more than the [0-9.]* GiB of memory" "$tmp/big.err"
  check kv-memory-1e12 $? "rc=$rc $(head -3 "$tmp/big.err")"
  # each rank's share fits the machine, the three together do not fit the node's free memory
  total_gib=$(awk '/^MemTotal:/ { printf "%.2f", $2 / 1048576 * 0.6 }' /proc/meminfo)
  "${mpi[@]}" "$bin" run --model "$tmp/tiny" --kv-memory "$total_gib" \
    --input "$tmp/req.jsonl" --output "$tmp/o.jsonl" 2> "$tmp/share.err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "KV pool of $total_gib GiB per rank is more than there is: .* GiB free for its 3 ranks" "$tmp/share.err"
  check kv-memory-shared $? "rc=$rc $(head -3 "$tmp/share.err")"
fi

if [ "$mode" = exits ]; then
  gen 1 > "$tmp/req.jsonl"
  for _ in 1 2 3; do (while :; do :; done) & done
  busy=$(jobs -p)
  bad=0 last=""
  for t in $(seq 1 "${NUMLA_EXIT_TRIALS:-2000}"); do
    "$bin" run --model "$tmp/tiny" --threads 1 --kv-blocks 64 --max-seqs 8 --input "$tmp/req.jsonl" \
      --output "$tmp/missing/x.jsonl" 2> "$tmp/exit.err"
    rc=$?
    [ $rc -eq 1 ] || { bad=$((bad + 1)); last="trial $t: rc=$rc $(tail -4 "$tmp/exit.err")"; }
  done
  kill $busy 2>/dev/null; wait $busy 2>/dev/null
  [ $bad -eq 0 ]; check "exits-clean" $? "$bad runs did not exit 1; the last: $last"
fi

echo "run_edge_test $mode: $pass passed, $fail failed"
[ $fail -eq 0 ]
