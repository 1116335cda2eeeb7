# tests/mpi/test_lib.sh — sourced by the end-to-end test scripts of tests/mpi/: the pass/fail
# tally, the lean sweep, the tokens to compare across runs that round differently, the kernel
# level for exact comparisons, and starting `numla serve`.

fail=0 pass=0
check() { # check NAME RESULT(0=ok) DETAILS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $3"; fi
}

# The sanitizer and clang passes of scripts/test (NUMLA_TEST_SWEEP=lean) look for memory errors,
# undefined behaviour and a second compiler's differences, not for throughput: there a script
# runs each of its paths once, with fewer or shorter requests, where the first pass repeats them.
sweep_lean() { [ "${NUMLA_TEST_SWEEP:-}" = lean ]; }

# decisive_tokens REF FILE: "id tok,tok,..." per record of FILE, cut before the first step where
# REF's top-1/top-2 logprob margin is below 0.05 (records need "logprobs": 2): where another
# step shape, rank count or cache may round a near tie the other way.
decisive_tokens() {
  awk -v tol=0.05 'function idof(l) { match(l, /^\{"id":("[^"]*"|[0-9]+|null)/); return substr(l, 7, RLENGTH - 6) }
    function toks(l) { match(l, /"output_tokens":\[[^]]*\]/); return substr(l, RSTART + 17, RLENGTH - 18) }
    FNR == NR { id = idof($0); k = 0; rest = $0
      while (match(rest, /"top":\[\[-?[0-9]+,[-0-9.e+]+\],\[-?[0-9]+,[-0-9.e+]+\]/)) {
        t = substr(rest, RSTART + 7, RLENGTH - 8); gsub(/\]|\[/, "", t); split(t, a, ",")
        if (a[2] - a[4] < tol) break
        k++; rest = substr(rest, RSTART + RLENGTH) }
      keep[id] = k; next }
    { id = idof($0); n = split(toks($0), tk, ","); out = ""
      for (i = 1; i <= n && i <= keep[id]; i++) out = out (i > 1 ? "," : "") tk[i]
      print id, out }' "$1" "$2" | sort
}

# Exact comparisons need a kernel level that never rounds activations to bf16 (serve_test.sh):
# NUMLA_ISA as given, else the best of avx512, avx2, ref this CPU has.
exact_isa() {
  if [ -z "${NUMLA_ISA:-}" ]; then
    if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export NUMLA_ISA=avx512
    elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then export NUMLA_ISA=avx2
    else export NUMLA_ISA=ref; fi
  fi
}

# start_server LOG CMD...: start a `numla serve` command in the background, wait for its
# "ready on" line; sets $port and $spid and adds the pid to the caller's pids array (which its
# EXIT trap kills). Fails, printing the log's tail, when the server exits or 30 s pass.
start_server() {
  local log=$1; shift
  "$@" 2>"$log" &
  spid=$!
  pids+=("$spid")
  port=
  for _ in $(seq 1 600); do
    [ -f "$log" ] && port=$(sed -nE 's/^numla serve: ready on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$log")
    [ -n "$port" ] && return 0
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  echo "server did not start: $(tail -5 "$log")"
  return 1
}
