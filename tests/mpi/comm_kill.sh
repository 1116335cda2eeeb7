#!/usr/bin/env bash
# tests/mpi/comm_kill.sh MPIEXEC TEST_EXE MODE RANKS — a failing rank must stop the whole job.
# Runs numla_comm_test --MODE under mpiexec (rank 1 is killed / aborts / stalls while the others
# sit in an allreduce loop) and asserts that mpiexec exits non-zero within 20 s. `timeout 60`
# turns a hang into a failure instead of a stuck CI job.
set -uo pipefail
mpiexec=$1 exe=$2 mode=$3 ranks=$4
limit=20
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s.%N)
timeout 60 "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$exe" "--$mode" >"$log" 2>&1
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
tail -n 15 "$log"
echo "comm_kill[$mode]: mpiexec exit code $rc after ${elapsed}s (limit ${limit}s)"
if [ "$rc" -eq 124 ]; then
  echo "comm_kill[$mode]: FAIL: the job hung (killed by timeout after 60 s)"; exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "comm_kill[$mode]: FAIL: mpiexec exited 0 although rank 1 failed"; exit 1
fi
if [ "$(echo "$elapsed > $limit" | bc)" -eq 1 ]; then
  echo "comm_kill[$mode]: FAIL: teardown took ${elapsed}s"; exit 1
fi
case "$mode" in
  abort) grep -q "rank 1 aborting the job" "$log" || { echo "comm_kill[$mode]: FAIL: no abort message from rank 1"; exit 1; } ;;
  stall) grep -q "gave up after" "$log" || { echo "comm_kill[$mode]: FAIL: no timeout message"; exit 1; } ;;
esac
echo "comm_kill[$mode]: PASS: the job stopped (exit $rc) in ${elapsed}s"
