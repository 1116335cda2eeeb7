#!/usr/bin/env bash
# tests/faults/fault_test.sh NUMLA_BIN MODE MPIEXEC — `numla run` stopped from outside, then
# `--resume`, on the tiny synth preset. After every trial a checker requires: every request id
# exactly once, no torn line, and the same greedy tokens as an uninterrupted one-rank run.
#   drain   one signal after the first records, for each way a job is stopped: SIGTERM to
#           launch/numla-launch (2 ranks), SIGUSR1 to a plain mpirun (2 ranks), SIGTERM to every
#           rank of a 2-rank job (what scancel does to a Slurm step), SIGTERM to one rank alone.
#           Each must drain (the requests in flight written) and exit 143.
#   random  NUMLA_FAULT_TRIALS (8) trials, each a signal at a random moment of a run (start-up
#           included): SIGTERM or SIGKILL, one rank or 2 ranks under mpirun (SIGTERM through
#           numla-launch, SIGKILL to a random rank). Seeded: the seed is printed, and
#           NUMLA_FAULT_SEED=<seed> replays the same trials.
set -uo pipefail
bin=$1 mode=$2 mpiexec=${3:-mpirun}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
launch=$src/launch/numla-launch
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
check() { # check NAME RESULT(0=ok) DETAILS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $3"; fi
}
export OMP_NUM_THREADS=1 NUMLA_BIN=$bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Exact comparisons across rank counts need a kernel level whose linear layers never round
# activations to bf16 (as tests/mpi/serve_test.sh explains).
if [ -z "${NUMLA_ISA:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export NUMLA_ISA=avx512
  elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then export NUMLA_ISA=avx2
  else export NUMLA_ISA=ref; fi
fi
"$bin" synth --preset tiny --out "$tmp/tiny" --seed 9 >/dev/null 2>&1 || { echo "synth failed"; exit 1; }

# N greedy requests, mixed prompt lengths, short outputs (no near-ties on the synth model)
awk -v n=300 'BEGIN { srand(5);
  for (i = 0; i < n; i++) {
    p = (i % 7 == 0) ? 100 + int(rand() * 150) : 1 + int(rand() * 60);
    s = "{\"id\": \"f" i "\", \"prompt_tokens\": [";
    for (t = 0; t < p; t++) s = s (t ? "," : "") int(rand() * 512);
    print s "], \"max_tokens\": " 1 + int(rand() * 8) ", \"temperature\": 0, \"ignore_eos\": true}";
  } }' > "$tmp/req.jsonl"
nreq=300
opts=(--model "$tmp/tiny" --threads 1 --max-seqs 8 --max-batch-tokens 64 --prefill-chunk 32
      --input "$tmp/req.jsonl")
"$bin" run "${opts[@]}" --output "$tmp/ref.jsonl" 2> "$tmp/ref.err" ||
  { echo "reference run failed: $(tail -3 "$tmp/ref.err")"; exit 1; }

tokens_by_id() { sed -E 's/^\{"id":("[^"]*"|[0-9]+|null),"output_tokens":\[([^]]*)\].*/\1 \2/' "$1" | sort; }
ids() { sed -E 's/^\{"id":("[^"]*"|[0-9]+|null),.*/\1/' "$1" | sort; }
# checker NAME OUT: complete lines only, every id once, the reference's tokens
checker() {
  local bad
  bad=$(grep -cvE '^\{"id":.*\}$' "$2")
  [ "$bad" -eq 0 ] && [ -z "$(tail -c 1 "$2")" ]; check "$1-no-torn-line" $? "$bad bad lines"
  [ -z "$(ids "$2" | uniq -d)" ]; check "$1-no-duplicate" $? "duplicated: $(ids "$2" | uniq -d | head -3 | tr '\n' ' ')"
  [ "$(wc -l < "$2")" -eq $nreq ]; check "$1-none-lost" $? "$(wc -l < "$2") of $nreq records"
  diff <(tokens_by_id "$tmp/ref.jsonl") <(tokens_by_id "$2") > "$tmp/d" 2>&1
  check "$1-same-tokens" $? "$(head -4 "$tmp/d")"
}
# start HOW OUT [--resume]: run in the background; sets pid (the process to signal)
start() {
  local how=$1 out=$2
  shift 2
  case "$how" in
    one)    "$bin" run "${opts[@]}" --output "$out" "$@" 2>> "$out.err" & ;;
    launch) "$launch" --ranks 2 --oversubscribe -- run "${opts[@]}" --output "$out" "$@" 2>> "$out.err" & ;;
    mpirun) "$mpiexec" -n 2 "$bin" run "${opts[@]}" --output "$out" "$@" 2>> "$out.err" & ;;
  esac
  pid=$!
}
wait_records() { # wait_records OUT N: until OUT has N lines or the job ended
  for _ in $(seq 1 1200); do
    [ -s "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}
# rank_pids: the numla processes of the job started as $pid (mpirun's children)
rank_pids() { pgrep -P "$pid" -x numla; pgrep -P "$(pgrep -P "$pid" -x mpirun | head -1)" -x numla 2>/dev/null; }
resume_and_check() { # resume_and_check NAME HOW OUT
  start "$2" "$3" --resume
  wait "$pid"
  local rc=$?
  check "$1-resume-exit" $rc "rc=$rc $(tail -3 "$3.err")"
  checker "$1" "$3"
}

if [ "$mode" = drain ]; then
  for how in launch-term mpirun-usr1 step-term one-term; do
    out=$tmp/$how.jsonl
    case "$how" in
      launch-term) start launch "$out" ;;
      mpirun-usr1) start mpirun "$out" ;;
      *-term)      [ "$how" = one-term ] && start one "$out" || start mpirun "$out" ;;
    esac
    wait_records "$out" 3
    case "$how" in
      launch-term) kill -TERM "$pid" ;;
      mpirun-usr1) kill -USR1 "$pid" ;;
      step-term)   for r in $(rank_pids); do kill -TERM "$r"; done ;;
      one-term)    kill -TERM "$pid" ;;
    esac
    wait "$pid"
    rc=$?
    n=$(wc -l < "$out")
    [ $rc -eq 143 ]; check "$how-exit-143" $? "rc=$rc $(grep -v '^numla run:  ' "$out.err" | tail -4)"
    grep -q "finishing the requests in flight" "$out.err"; check "$how-drained" $? "$(tail -3 "$out.err")"
    # every request the drained run counted as done is on disk
    done_n=$(sed -nE 's/.*summary: ([0-9]+) requests.*/\1/p' "$out.err" | tail -1)
    [ "${done_n:-x}" = "$n" ] && [ "$n" -lt $nreq ]
    check "$how-in-flight-written" $? "summary says ${done_n:-?} requests, $n records on disk (now $(wc -l < "$out")): $(grep -v "^numla run:  " "$out.err")"
    resume_and_check "$how" "$( [ "$how" = one-term ] && echo one || echo mpirun)" "$out"
  done
else
  seed=${NUMLA_FAULT_SEED:-$(( $(date +%s%N) % 1000000 ))}
  trials=${NUMLA_FAULT_TRIALS:-8}
  echo "fault_test: seed $seed ($trials trials; replay with NUMLA_FAULT_SEED=$seed)"
  RANDOM=$seed
  # how long the reference run's serving took, to place the signals over a whole run
  # (twice the serving time, plus start-up)
  span=$(awk '/summary:/ { for (i = 1; i <= NF; i++) if ($i == "in") { print int($(i + 1) * 2000) + 500 } }' "$tmp/ref.err")
  for t in $(seq 1 "$trials"); do
    sig=$([ $((RANDOM % 2)) -eq 0 ] && echo TERM || echo KILL)
    how=$([ $((t % 2)) -eq 0 ] && echo mpi || echo one) # alternate, so both always run
    delay=$((RANDOM % span))
    name="trial$t-$how-$sig-${delay}ms"
    out=$tmp/t$t.jsonl
    case "$how-$sig" in
      one-*)    start one "$out" ;;
      mpi-TERM) start launch "$out" ;;
      mpi-KILL) start mpirun "$out" ;;
    esac
    sleep "$(awk -v d="$delay" 'BEGIN { printf "%.3f", d / 1000 }')"
    case "$how-$sig" in
      mpi-KILL) victims=($(rank_pids)); [ ${#victims[@]} -gt 0 ] && kill -KILL "${victims[RANDOM % ${#victims[@]}]}" 2>/dev/null ;;
      *)        kill -"$sig" "$pid" 2>/dev/null ;;
    esac
    wait "$pid" 2>/dev/null
    rc=$?
    [ -e "$out" ] || : > "$out"
    echo "$name: exit $rc, $(wc -l < "$out") records before --resume"
    resume_and_check "$name" "$([ "$how" = one ] && echo one || echo mpirun)" "$out"
  done
fi
echo "fault_test[$mode]: $pass passed, $fail failed"
[ $fail -eq 0 ]
