#!/usr/bin/env bash
# tests/mpi/hosts_test.sh NUMLA [dry|run] — numla on several machines (issue 38).
#
# dry: launch/numla-launch --hosts / --hostfile / --ranks-per-host / --mpirun-args --dry-run
#      on a synthetic machine: the mpirun line, and the errors (no MPI job, no root needed).
# run (default): numla on two machines for real: three network
# namespaces on this machine stand for a launcher host (h0, which holds a bridge) and two
# compute hosts (h1, h2), each with its own veth link to the bridge, a private address
# (10.231.0.0/24) and, for every process Open MPI starts there, its own UTS namespace with its
# own hostname. Open MPI's rsh agent is a small script (nsrsh, written below) that enters a
# host's namespaces instead of ssh-ing to it; mpirun is given the hosts' addresses as names.
#
#   1. launch/numla-launch --hosts h1,h2 --ranks-per-host 2 -- run ... (4 ranks over 2 hosts)
#      answers every request with the tokens of a 1-rank run, and the log says the allreduce
#      ran shared memory inside each host and MPI between them (shm+mpi on 2 machines); the
#      launcher's check that every host plans as this machine does passes, and refuses a host
#      given another topology.
#   2. bench engine over the two hosts (unpinned: the hosts share this machine's cores) prints
#      the allreduce path and its per-step cost.
#   3. a longer job: once answers appear, every process of h2 is SIGKILLed (its orted and
#      ranks: the host "dies"); the job must stop within seconds with a message saying a host
#      was lost, and `numla run --resume` on the two hosts finishes it: every request answered
#      exactly once, the tokens of the 1-rank run.
#
# Exit 77 (ctest SKIP_RETURN_CODE) when namespaces cannot be made here (not root, no ip /
# nsenter / unshare, no CAP_NET_ADMIN). Namespaces are named per run (nlh<pid>-*) and removed
# on exit, failure or not.
set -uo pipefail
numla=$(realpath "$1")
mode=${2:-run}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=test_lib.sh
. "$here/test_lib.sh"
skip() { echo "SKIP: $*"; exit 77; }

if [ "$mode" = dry ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  export HWLOC_SYNTHETIC="numa:2 core:4 pu:2"
  dry() { NUMLA_BIN=$numla "$root/launch/numla-launch" --dry-run "$@" 2>"$tmp/err" | tr -d '\\'; }
  want="-n 4 --host a:2,b:2 --map-by ppr:1:numa:PE=4 --bind-to core"
  line=$(dry --hosts a,b -- run --model m)
  [[ "$line" == *"mpirun $want "*"-x NUMLA_PLAN=hosts=2 -x OMP_NUM_THREADS=4 "*" run --model m" ]]
  check hosts-line $? "$line"
  printf '# two hosts\na slots=8 max_slots=8\n\n  b   # the second\n' >"$tmp/hostfile"
  line2=$(dry --hostfile "$tmp/hostfile" -- run --model m)
  [ "$line2" = "$line" ]
  check hostfile-same-line $? "$line2"
  line=$(dry --hosts a,b --ranks 2 -- run)
  [[ "$line" == *"-n 2 --host a:1,b:1 --map-by ppr:1:numa:PE=4 "* ]]
  check hosts-total-ranks $? "$line"
  line=$(dry --hosts a,b,c --ranks-per-host 1 --ranks 3 --threads-per-rank 2 -- run)
  [[ "$line" == *"-n 3 --host a:1,b:1,c:1 "*"NUMLA_PLAN=threads=2,hosts=3 "* ]]
  check hosts-ranks-per-host $? "$line"
  line=$(dry --hosts a,b --mpirun-args '--mca btl self,tcp' --mpirun-args '--mca x y' -- run)
  [[ "$line" == "mpirun --mca btl self,tcp --mca x y -n 4 --host a:2,b:2 "* ]]
  check mpirun-args-first $? "$line"
  bad() { # bad NAME MESSAGE ARGS...: numla-launch refuses, saying MESSAGE
    local name=$1 msg=$2
    shift 2
    if NUMLA_BIN=$numla "$root/launch/numla-launch" --dry-run "$@" -- run >"$tmp/out" 2>"$tmp/err"; then
      check "$name" 1 "accepted: $(cat "$tmp/out")"
    else
      grep -q -- "$msg" "$tmp/err"
      check "$name" $? "$(cat "$tmp/err")"
    fi
  }
  bad refuse-ranks-not-multiple "multiple of the host count" --hosts a,b --ranks 3
  bad refuse-ranks-disagree "disagree" --hosts a,b --ranks 4 --ranks-per-host 1
  bad refuse-too-many-per-host "per host requested" --hosts a,b --ranks-per-host 3
  bad refuse-slots-suffix "without ':slots'" --hosts a:2,b
  bad refuse-host-twice "named twice" --hosts a,b,a
  bad refuse-both-lists "give one of them" --hosts a,b --hostfile "$tmp/hostfile"
  bad refuse-missing-hostfile "cannot open" --hostfile "$tmp/none"
  printf 'a\nb:2\n' >"$tmp/badfile"
  bad refuse-hostfile-line "line 2" --hostfile "$tmp/badfile"
  NUMLA_BIN=$numla "$root/launch/numla-launch" --dry-run --verbose --hosts a,b -- run >/dev/null 2>"$tmp/err"
  grep -q 'plan: 4 ranks over 2 hosts, 2 per host' "$tmp/err" && grep -q 'rank 3 -> host 1, node 1' "$tmp/err"
  check verbose-plan $? "$(cat "$tmp/err")"
  echo "hosts_test[dry]: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit
fi

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
for tool in ip nsenter unshare mpirun; do
  command -v "$tool" >/dev/null || skip "needs $tool"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset OMPI_MCA_plm_rsh_agent

# Namespaces left by a run that was killed outright (SIGKILL skips the trap): their pid is gone.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(nlh[0-9]*-h[0-2]\).*/\1/p'); do
  pid=${ns#nlh}
  pid=${pid%%-*}
  kill -0 "$pid" 2>/dev/null && continue
  for q in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$q" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
done
P=nlh$$
nets=() tmp=$(mktemp -d)
cleanup() {
  for ns in "${nets[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  for ns in "${nets[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the three hosts -------------------------------------------------------------------------
ip netns add "$P-h0" 2>"$tmp/ns.err" || skip "cannot create a network namespace: $(cat "$tmp/ns.err")"
nets+=("$P-h0")
in0() { ip -n "$P-h0" "$@"; }
in0 link set lo up && in0 link add br0 type bridge && in0 addr add 10.231.0.1/24 dev br0 &&
  in0 link set br0 up || skip "cannot set up a bridge in a namespace"
declare -A addr=([1]=10.231.0.2 [2]=10.231.0.3)
for h in 1 2; do
  ns=$P-h$h
  ip netns add "$ns" || skip "cannot create namespace $ns"
  nets+=("$ns")
  in0 link add "v$h" type veth peer name eth0 netns "$ns" &&
    in0 link set "v$h" master br0 && in0 link set "v$h" up &&
    ip -n "$ns" addr add "${addr[$h]}/24" dev eth0 && ip -n "$ns" link set eth0 up &&
    ip -n "$ns" link set lo up || skip "cannot link namespace $ns to the bridge"
done

# The rsh agent: `nsrsh HOST COMMAND...` as Open MPI calls ssh. It runs the command (a shell
# line, as ssh would pass it on) in HOST's network namespace and in a new UTS namespace named
# after the host, so each host's Open MPI session files and shared-memory segments (named by
# hostname) stay apart. NSRSH_H2_TOPO, when set, is host 2's HWLOC_SYNTHETIC (another machine).
cat >"$tmp/nsrsh" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  ${addr[1]}) ns=$P-h1 name=numla-h1-$$ ;;
  ${addr[2]}) ns=$P-h2 name=numla-h2-$$
    [ -z "\${NSRSH_H2_TOPO:-}" ] || export HWLOC_SYNTHETIC="\$NSRSH_H2_TOPO" ;;
  *) echo "nsrsh: unknown host '\$host'" >&2; exit 255 ;;
esac
exec nsenter --net=/run/netns/\$ns unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$*"' "\$name" "\$@"
EOF
chmod +x "$tmp/nsrsh"

# Open MPI over the veth subnet only; the agent launches each host's daemon itself (no tree
# spawn); ranks waiting in MPI yield the CPU (this machine's cores are shared by both "hosts",
# so busy polling would starve the rank being waited for: measured 1.4-7 ms per allreduce
# instead of 0.09 ms).
mca=(--mca plm_rsh_agent "$tmp/nsrsh" --mca plm_rsh_no_tree_spawn 1
     --mca oob_tcp_if_include 10.231.0.0/24 --mca btl_tcp_if_include 10.231.0.0/24
     --mca btl self,vader,tcp --mca mpi_yield_when_idle 1)
# Two hosts x PER (2) ranks, one thread each (this machine may have 2 cores: oversubscribed).
launch2() {
  NUMLA_BIN=$numla timeout 60 ip netns exec "$P-h0" "$root/launch/numla-launch" \
    --hosts "${addr[1]},${addr[2]}" --ranks-per-host "${PER:-2}" --oversubscribe --threads-per-rank 1 \
    --mpirun-args "${mca[*]}" -- "$@"
}

# --- a model and requests --------------------------------------------------------------------
exact_isa
model=$tmp/model
"$numla" synth --preset tiny --out "$model" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
requests() { # requests N MAX_TOKENS
  for i in $(seq 1 "$1"); do
    p=$(( (i * 37) % 400 + 2 ))
    echo "{\"id\": \"r$i\", \"prompt_tokens\": [$p, $((p + 3)), $((p + 11)), $((p % 7 + 2))], \"temperature\": 0, \"max_tokens\": $(( $2 - i % 5 ))}"
  done
}
tokens() { sed -e 's/.*"id":\("[^"]*"\).*"output_tokens":\(\[[^]]*\]\).*"finish_reason":\("[a-z]*"\).*/\1 \2 \3/' "$1" | sort; }

# --- 1. same tokens as one rank; the hierarchical allreduce ran --------------------------------
requests 10 12 >"$tmp/req.jsonl"
"$numla" run --model "$model" --input "$tmp/req.jsonl" --output "$tmp/one.jsonl" --threads 1 \
  2>"$tmp/one.err" || { cat "$tmp/one.err"; echo "FAIL: the 1-rank run failed"; exit 1; }
start=$(date +%s.%N)
NUMLA_LOG=info launch2 run --model "$model" --input "$tmp/req.jsonl" --output "$tmp/two.jsonl" \
  --threads 1 >"$tmp/two.log" 2>&1
rc=$?
echo "hosts_test: 2 hosts x 2 ranks: exit $rc in $(echo "$(date +%s.%N) - $start" | bc) s"
grep -E 'numla-launch: mpirun|comm: |summary' "$tmp/two.log" | cut -c1-400
[ $rc -eq 0 ] && [ "$(wc -l <"$tmp/two.jsonl")" -eq 10 ] && diff <(tokens "$tmp/one.jsonl") <(tokens "$tmp/two.jsonl")
check two-hosts-same-tokens $? "exit $rc; $(tail -n 5 "$tmp/two.log")"
grep '^numla-launch: mpirun' "$tmp/two.log" | tr -d '\\' | grep -q -- "--host ${addr[1]}:2,${addr[2]}:2 "
check two-hosts-mpirun-line $? "no --host ${addr[1]}:2,${addr[2]}:2 in the launcher's line"
grep -q 'comm: 4 ranks on 2 machines (2 to 2 per machine), allreduce path shm+mpi' "$tmp/two.log"
check two-hosts-hierarchical-allreduce $? "$(grep 'comm: ' "$tmp/two.log")"

# A host with another topology is refused before the job starts, naming it.
NSRSH_H2_TOPO="numa:1 core:3 pu:1" launch2 run --model "$model" --input "$tmp/req.jsonl" \
  --output "$tmp/never.jsonl" --threads 1 >"$tmp/other.log" 2>&1
rc=$?
grep -A3 'would place' "$tmp/other.log"
[ $rc -ne 0 ] && [ ! -e "$tmp/never.jsonl" ] &&
  grep -q "host ${addr[2]} would place its 2 ranks differently" "$tmp/other.log"
check other-topology-refused $? "exit $rc; $(tail -n 4 "$tmp/other.log")"
grep -q 'the 2 hosts plan as this machine does' "$tmp/two.log"
check same-topology-checked $? "$(grep 'numla-launch' "$tmp/two.log" | tail -n 2)"

# --- 2. what the allreduce over the two hosts costs ------------------------------------------
# The two "hosts" share this machine's cores, and each applies the same plan (rank 0 of each on
# core 0, ...): pinned, they would take turns on one core, so every message would wait for the
# scheduler's tick (4 ms measured). The benchmark runs unpinned: an MPIRUN wrapper turns the
# plan's --bind-to into none and OMP_PROC_BIND into false, and bench engine --no-bind.
cat >"$tmp/mpirun-unpinned" <<'EOF'
#!/bin/sh
for a; do
  shift
  case "$a" in
    core|core:overload-allowed) set -- "$@" none ;;
    OMP_PROC_BIND=*) set -- "$@" OMP_PROC_BIND=false ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec mpirun "$@"
EOF
chmod +x "$tmp/mpirun-unpinned"
for per in 1 2; do
  PER=$per MPIRUN=$tmp/mpirun-unpinned launch2 bench engine --model "$model" --steps 32 --context 16 \
    --threads 1 --no-bind >"$tmp/bench$per.log" 2>&1
  rc=$?
  echo "hosts_test: bench engine, 2 hosts x $per rank(s), unpinned:"
  grep -E 'median step|allreduce (path|per step)' "$tmp/bench$per.log"
done
[ $rc -eq 0 ] && grep -q 'allreduce path: shm+mpi' "$tmp/bench2.log" &&
  grep -q 'allreduce per step' "$tmp/bench2.log"
check two-hosts-bench-allreduce $? "exit $rc; $(tail -n 5 "$tmp/bench2.log")"

# --- 3. a host dies mid-job; --resume finishes -----------------------------------------------
# The requests trickle in through a FIFO (one every 0.4 s), so the job is still running when
# host 2 is killed however fast or slow this machine is today, and --resume has little left.
n_long=12
requests $n_long 16 >"$tmp/long.jsonl"
"$numla" run --model "$model" --input "$tmp/long.jsonl" --output "$tmp/long_one.jsonl" \
  --threads 1 2>"$tmp/long_one.err" || { cat "$tmp/long_one.err"; echo "FAIL: 1-rank long run"; exit 1; }
out=$tmp/long_two.jsonl
mkfifo "$tmp/feed"
(while IFS= read -r line; do echo "$line"; sleep 0.4; done <"$tmp/long.jsonl") >"$tmp/feed" 2>/dev/null &
feeder=$!
NUMLA_COMM_TIMEOUT=10 launch2 run --model "$model" --input "$tmp/feed" --output "$out" \
  --threads 1 >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 300); do
  [ "$(wc -l 2>/dev/null <"$out" || echo 0)" -ge 3 ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
before=$(wc -l 2>/dev/null <"$out" || echo 0)
victims=$(ip netns pids "$P-h2" | tr '\n' ' ')
start=$(date +%s.%N)
[ -n "$victims" ] && kill -9 $victims
wait $job
rc=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
kill $feeder 2>/dev/null; wait $feeder 2>/dev/null
after=$(wc -l <"$out")
echo "hosts_test: killed host 2 (pids $victims) after $before answers: the job exited $rc after ${took} s with $after answers"
grep -iE 'lost|host|daemon|abort|failed' "$tmp/kill.log" | grep -v '^numla-launch: [/a-z]*mpirun ' | head -n 8
[ -n "$victims" ] && [ "$before" -ge 1 ] && [ "$after" -lt $n_long ]
check kill-happened-mid-job $? "victims '$victims', $before answers before, $after after"
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(echo "$took < 15" | bc)" -eq 1 ]
check kill-stops-job-in-seconds $? "exit $rc after ${took} s"
grep -q 'numla-launch: the job failed' "$tmp/kill.log" && grep -qi 'lost communication\|daemon' "$tmp/kill.log"
check kill-message $? "$(tail -n 8 "$tmp/kill.log")"
ip netns pids "$P-h1" | grep -q . && sleep 2
left=$(ip netns pids "$P-h1" | wc -l)
[ "$left" -eq 0 ]
check kill-leaves-no-rank $? "$left processes left on host 1"

launch2 run --model "$model" --input "$tmp/long.jsonl" --output "$out" --threads 1 --resume >"$tmp/resume.log" 2>&1
rc=$?
grep summary "$tmp/resume.log"
dups=$(grep -o '"id":"[^"]*"' "$out" | sort | uniq -d | wc -l)
[ $rc -eq 0 ] && [ "$(wc -l <"$out")" -eq $n_long ] && [ "$dups" -eq 0 ] &&
  diff <(tokens "$tmp/long_one.jsonl") <(tokens "$out")
check resume-finishes-once-same-tokens $? "exit $rc, $(wc -l <"$out") records, $dups duplicated ids; $(tail -n 3 "$tmp/resume.log")"

echo "hosts_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
