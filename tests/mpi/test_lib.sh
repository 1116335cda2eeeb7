# tests/mpi/test_lib.sh — sourced by the end-to-end test scripts of tests/mpi/: the pass/fail
# tally and the kernel level for exact comparisons.

fail=0 pass=0
check() { # check NAME RESULT(0=ok) DETAILS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $3"; fi
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
