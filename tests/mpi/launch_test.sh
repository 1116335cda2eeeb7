#!/usr/bin/env bash
# tests/mpi/launch_test.sh NUMLA_BIN MODE — checks launch/numla-launch end to end.
#   dry   plans for synthetic machines (HWLOC_SYNTHETIC) print the expected mpirun line;
#         impossible requests fail with a message; arguments with spaces survive quoting
#   run   really launches `numla topo --bind-check` through mpirun on this machine and
#         requires every rank to report its binding as correct
set -uo pipefail
bin=$1 mode=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
launch=$src/launch/numla-launch
fail=0 pass=0
check() { # check NAME CONDITION-RESULT(0=ok) DETAILS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $3"; fi
}
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
else
  out=$(timeout 60 "$launch" -- topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [[ "$out" == *"rank 0: node "*"pinned ok"* ]]; check bind-check $? "rc=$rc out: $out"
  out=$(timeout 60 "$launch" --ranks 2 --oversubscribe -- topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c 'pinned ok' <<<"$out")" -eq 2 ]; check bind-check-2 $? "rc=$rc out: $out"
fi
echo "launch_test[$mode]: $pass passed, $fail failed"
[ $fail -eq 0 ]
