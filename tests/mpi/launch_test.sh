#!/usr/bin/env bash
# tests/mpi/launch_test.sh NUMLA_BIN MODE — checks launch/numla-launch end to end.
#   dry   plans for synthetic machines (HWLOC_SYNTHETIC) print the expected mpirun line;
#         impossible requests fail with a message; arguments with spaces survive quoting
#   run   really launches `numla topo --bind-check` through mpirun on this machine and
#         requires every rank to report its binding as correct
#   mask  under `taskset -c N` (the last CPU this process may use) the binding stays on CPU N:
#         `numla topo --bind-check` with and without OpenMP places, and every thread of a
#         running `numla run` sampled from /proc while it serves
set -uo pipefail
bin=$1 mode=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
launch=$src/launch/numla-launch
. "$(dirname "$0")/test_lib.sh"
export NUMLA_BIN=$bin
root_flag=""
[ "$(id -u)" -eq 0 ] && root_flag=" --allow-run-as-root"

if [ "$mode" = dry ]; then
  out=$(HWLOC_SYNTHETIC="pack:2 numa:2 core:16 pu:2" "$launch" --dry-run -- run --model 'my model' 2>&1)
  want="mpirun -n 4 --map-by ppr:1:numa:PE=16 --bind-to core$root_flag -x OMP_NUM_THREADS=16 -x OMP_PLACES=cores -x OMP_PROC_BIND=close $bin run --model my\\ model"
  [ "$out" = "$want" ]; check snc4 $? "got: $out | want: $want"

  out=$(HWLOC_SYNTHETIC="numa:8 core:8 pu:1" "$launch" --dry-run --ranks 3 --threads-per-rank 4 -- run 2>&1)
  want="mpirun -n 3 --map-by ppr:1:numa:PE=8 --bind-to core$root_flag -x NUMLA_PLAN=threads=4 -x OMP_NUM_THREADS=4 -x OMP_PLACES=cores -x OMP_PROC_BIND=close $bin run"
  [ "$out" = "$want" ]; check ranks3 $? "got: $out | want: $want"

  out=$(HWLOC_SYNTHETIC="numa:8 core:8 pu:1" OMP_PLACES=threads "$launch" --dry-run -- run 2>&1)
  [[ "$out" == *"-x OMP_PLACES -x OMP_PROC_BIND "* ]]; check keep-places $? "got: $out"

  out=$(HWLOC_SYNTHETIC="numa:8 core:8 pu:1" "$launch" --dry-run --ranks 9 -- run 2>&1); rc=$?
  [ $rc -ne 0 ] && [[ "$out" == *"only 8 NUMA nodes"* ]]; check too-many-ranks $? "rc=$rc out: $out"

  out=$(HWLOC_SYNTHETIC="numa:8 core:8 pu:1" "$launch" --dry-run --ranks 9 --oversubscribe -- run 2>&1)
  [[ "$out" == *"-n 9 --map-by ppr:2:numa:PE=4 --bind-to core:overload-allowed --oversubscribe"* ]]
  check oversubscribe $? "got: $out"

  out=$(HWLOC_XMLFILE="$src/tests/data/topo/cxl_memonly.xml" "$launch" --dry-run -- run 2>&1)
  [[ "$out" == "mpirun -n 2 --map-by ppr:1:numa:PE=4 "* ]]; check memory-only $? "got: $out"

  out=$("$launch" --dry-run -- 2>&1); rc=$?
  [ $rc -ne 0 ]; check no-args $? "rc=$rc"
  out=$("$launch" --bogus -- run 2>&1); rc=$?
  [ $rc -ne 0 ] && [[ "$out" == *"unknown option"* ]]; check bad-option $? "rc=$rc out: $out"
elif [ "$mode" = mask ]; then
  cpus=$(taskset -pc $$ | sed 's/.*: //')
  last=$(awk -v l="$cpus" 'BEGIN { n = split(l, a, ","); split(a[n], r, "-"); print (r[2] != "" ? r[2] : r[1]) }')
  first=$(awk -v l="$cpus" 'BEGIN { split(l, a, ","); split(a[1], r, "-"); print r[1] }')
  if [ "$first" = "$last" ]; then
    echo "launch_test[mask]: this process may use only CPU $last: nothing to restrict"; exit 0
  fi
  out=$(taskset -c "$last" "$bin" topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [[ "$out" == *"rank 0: node "*" cpus $last (1) "*"threads 1 pinned ok"* ]] &&
    [[ "$out" == *"binding to CPUs $last "*"inside the CPUs this process may use"* ]]
  check taskset-bind-check $? "rc=$rc out: $out"
  out=$(OMP_PLACES=cores OMP_PROC_BIND=close taskset -c "$last" "$bin" topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [[ "$out" == *" cpus $last (1) "*"pinned ok"* ]]
  check taskset-omp-places $? "rc=$rc out: $out"

  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$bin" synth --preset tiny --out "$tmp/tiny" --seed 9 >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
  awk 'BEGIN { for (i = 0; i < 300; i++) { s = "{\"id\": \"m" i "\", \"prompt_tokens\": [";
    for (t = 0; t < 40; t++) s = s (t ? "," : "") (i * 7 + t) % 500; print s "], \"max_tokens\": 64}" } }' \
    > "$tmp/req.jsonl"
  NUMLA_LOG=debug taskset -c "$last" "$bin" run --model "$tmp/tiny" --input "$tmp/req.jsonl" --output "$tmp/out.jsonl" \
    2> "$tmp/run.err" &
  pid=$!
  seen="" samples=0
  # Sampled only once the rank has bound itself: hwloc's topology discovery (in MPI_Init and
  # numla's own) briefly moves each thread to every CPU to read CPUID, and puts it back.
  while kill -0 "$pid" 2>/dev/null; do
    grep -q "binding to CPUs" "$tmp/run.err" 2>/dev/null || { sleep 0.01; continue; }
    for f in /proc/"$pid"/task/*/status; do
      l=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$f" 2>/dev/null) || continue
      [ -n "$l" ] || continue
      samples=$((samples + 1))
      [ "$l" = "$last" ] || seen="$seen $l"
    done
    sleep 0.02
  done
  wait "$pid"; rc=$?
  [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/out.jsonl")" -eq 300 ]; check taskset-run $? "rc=$rc $(tail -3 "$tmp/run.err")"
  [ -z "$seen" ] && [ $samples -gt 0 ]; check taskset-run-threads $? "threads allowed on CPUs$seen, only $last was given ($samples samples)"
  grep -q "binding to CPUs $last " "$tmp/run.err"; check taskset-run-log $? "$(cat "$tmp/run.err")"
else
  out=$(timeout 60 "$launch" -- topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [[ "$out" == *"rank 0: node "*"pinned ok"* ]]; check bind-check $? "rc=$rc out: $out"
  out=$(timeout 60 "$launch" --ranks 2 --oversubscribe -- topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c 'pinned ok' <<<"$out")" -eq 2 ]; check bind-check-2 $? "rc=$rc out: $out"
fi
echo "launch_test[$mode]: $pass passed, $fail failed"
[ $fail -eq 0 ]
