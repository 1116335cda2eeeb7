#!/usr/bin/env bash
# tests/mpi/launch_test.sh NUMLA_BIN MODE — checks launch/numla-launch end to end.
#   dry   plans for synthetic machines (HWLOC_SYNTHETIC) print the expected mpirun line;
#         impossible requests fail with a message; arguments with spaces survive quoting
#   run   really launches `numla topo --bind-check` through mpirun on this machine and
#         requires every rank to report its binding as correct
#   mask  under `taskset -c N` (the last CPU this process may use) the binding stays on CPU N:
#         `numla topo --bind-check` with and without OpenMP places; every thread of `numla run`
#         (and of the processes it starts) sampled from /proc from its start to its exit, and
#         every sched_setaffinity it makes (strace, where it can trace), inside CPU N; and the
#         same for each rank of a 2-rank numla-launch job inside the core mpirun gave it
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

  # The reported case (issue 38): `taskset -c LAST numla run` of the tiny model with 8 long
  # requests, a 1-rank MPI singleton. Every thread of numla and of the processes it starts (the
  # singleton's orted) is sampled from the moment it starts until it exits, with no window
  # exempted: a library that moves a thread outside the mask for a moment (hwloc's x86 CPUID
  # probe, libpsm2's clock timing in MPI_Init) widens the set numla was given. Sampling sees
  # what lasts a few milliseconds; strace, where it can trace, sees every sched_setaffinity.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$bin" synth --preset tiny --out "$tmp/tiny" --seed 9 >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
  awk 'BEGIN { for (i = 0; i < 8; i++) { s = "{\"id\": \"m" i "\", \"prompt_tokens\": [";
    for (t = 0; t < 40; t++) s = s (t ? "," : "") (i * 7 + t) % 500; print s "], \"max_tokens\": 200}" } }' \
    > "$tmp/req.jsonl"

  # tree ROOT...: add to files the status files of every thread of each ROOT and of every
  # process below it (children files; no fork, so sampling stays fast).
  tree() {
    local r c kids
    for r; do
      files+=(/proc/"$r"/task/*/status)
      for c in /proc/"$r"/task/*/children; do
        kids=()
        read -r -a kids 2>/dev/null < "$c" # no newline at the end: status 1, kids read
        [ ${#kids[@]} -eq 0 ] || tree "${kids[@]}"
      done
    done
  }
  # sample OUT ROOT=ALLOWED...: until every ROOT is gone, read Cpus_allowed_list of every thread
  # of ROOT and below, again and again (one awk a round); append to OUT "pid tid cpus (allowed
  # ALLOWED)" for each one with a CPU outside ALLOWED (a cpulist), and write to OUT.n the
  # thread samples taken. @FILE as ROOT or ALLOWED: read from FILE once it exists, which the
  # process writes once its mask is in place (before that it is taskset or mpirun's child).
  sample() {
    local out=$1; shift
    local live spec root ok files end=$((SECONDS + 60))
    : > "$out"; : > "$out.c"
    while [ $SECONDS -lt $end ]; do
      live=0 files=()
      local args=()
      for spec in "$@"; do
        root=${spec%%=*} ok=${spec#*=}
        if [ "${root:0:1}" = @ ]; then
          [ -s "${root:1}" ] || { live=1; continue; }
          read -r root < "${root:1}"
        fi
        if [ "${ok:0:1}" = @ ]; then
          [ -s "${ok:1}" ] || { live=1; continue; }
          read -r ok < "${ok:1}"
        fi
        [ -d /proc/"$root" ] || continue
        live=1 files=()
        tree "$root"
        args+=("ok=$ok" "${files[@]}")
      done
      [ $live -eq 1 ] || break
      [ ${#args[@]} -gt 0 ] || continue
      awk -v out="$out" '
        function set(l, s,   a, k, i, r, c) {
          k = split(l, a, ","); for (i = 1; i <= k; i++) { split(a[i], r, "-");
            for (c = r[1] + 0; c <= (r[2] != "" ? r[2] : r[1]) + 0; c++) s[c] = 1 } }
        FNR == 1 { delete allowed; set(ok, allowed) }
        /^Cpus_allowed_list:/ { n++; delete mine; set($2, mine)
          for (c in mine) if (!(c in allowed)) {
            split(FILENAME, f, "/"); print f[3], f[5], $2, "(allowed " ok ")" >> out; break } }
        END { print n + 0 >> (out ".c") }' "${args[@]}" 2>/dev/null
    done
    awk '{ n += $1 } END { print n + 0 }' "$out.c" > "$out.n"
  }
  # strace_outside FILE ALLOWED: the sched_setaffinity calls in FILE (failed ones aside) that
  # name a CPU outside ALLOWED.
  strace_outside() {
    awk -v ok="$2" 'BEGIN { k = split(ok, a, ","); for (i = 1; i <= k; i++) { split(a[i], r, "-");
        for (c = r[1] + 0; c <= (r[2] != "" ? r[2] : r[1]) + 0; c++) allowed[c] = 1 } }
      /sched_setaffinity\(/ && !/= -1/ && match($0, /\[[0-9 ]*\]/) {
        k = split(substr($0, RSTART + 1, RLENGTH - 2), m, " ")
        for (i = 1; i <= k; i++) if (!(m[i] in allowed)) { print; break } }' "$1"
  }
  use_strace=0
  strace -f -o /dev/null true >/dev/null 2>&1 && use_strace=1

  # (the pid file is written under taskset's mask, then numla replaces the shell that wrote it)
  NUMLA_LOG=debug taskset -c "$last" bash -c 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' \
    "$tmp/pid1" "$bin" run --model "$tmp/tiny" --input "$tmp/req.jsonl" \
    --output "$tmp/out.jsonl" 2> "$tmp/run.err" &
  pid=$!
  sample "$tmp/seen1" "@$tmp/pid1=$last"
  wait "$pid"; rc=$?
  [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/out.jsonl")" -eq 8 ]; check taskset-run $? "rc=$rc $(tail -3 "$tmp/run.err")"
  [ ! -s "$tmp/seen1" ] && [ "$(cat "$tmp/seen1.n")" -gt 0 ]
  check taskset-run-threads $? "only CPU $last was given; threads seen outside (pid tid cpus): $(sort -u "$tmp/seen1" | head -5 | tr '\n' ';') ($(cat "$tmp/seen1.n") samples)"
  grep -q "binding to CPUs $last " "$tmp/run.err"; check taskset-run-log $? "$(cat "$tmp/run.err")"

  if [ $use_strace -eq 1 ]; then
    taskset -c "$last" strace -f -e trace=sched_setaffinity -o "$tmp/strace1" "$bin" run \
      --model "$tmp/tiny" --input "$tmp/req.jsonl" --output "$tmp/out_s.jsonl" 2> "$tmp/run_s.err"
    rc=$? moved=$(strace_outside "$tmp/strace1" "$last")
    [ $rc -eq 0 ] && [ -z "$moved" ]
    check taskset-run-setaffinity $? "rc=$rc; only CPU $last was given; calls: $(head -3 <<<"$moved" | tr '\n' ';')"
  else
    echo "launch_test[mask]: strace cannot trace here: sched_setaffinity calls not checked"
  fi

  # Two ranks under mpirun (numla-launch; each rank bound to a core of its own): each rank's
  # threads stay inside what mpirun gave it. The wrapper records that mask and its pid, then
  # runs numla (under strace where it can trace).
  {
    echo '#!/usr/bin/env bash'
    echo 'r=${OMPI_COMM_WORLD_RANK:-}'
    echo 'if [ -n "$r" ]; then'
    echo "  taskset -pc \$\$ | sed 's/.*: //' > \"$tmp/mask.\$r.tmp\" && mv \"$tmp/mask.\$r.tmp\" \"$tmp/mask.\$r\""
    echo "  echo \$\$ > \"$tmp/pid.\$r.tmp\" && mv \"$tmp/pid.\$r.tmp\" \"$tmp/pid.\$r\""
    [ $use_strace -eq 1 ] &&
      echo "  exec strace -f -e trace=sched_setaffinity -o \"$tmp/strace.r\$r\" \"$bin\" \"\$@\""
    echo 'fi'
    echo "exec \"$bin\" \"\$@\""
  } > "$tmp/rank.sh"
  chmod +x "$tmp/rank.sh"
  NUMLA_BIN="$tmp/rank.sh" timeout 60 "$launch" --ranks 2 --oversubscribe -- run --model "$tmp/tiny" \
    --input "$tmp/req.jsonl" --output "$tmp/out2.jsonl" > "$tmp/run2.log" 2>&1 &
  lpid=$!
  sample "$tmp/seen2" "@$tmp/pid.0=@$tmp/mask.0" "@$tmp/pid.1=@$tmp/mask.1" &
  spid=$!
  wait "$lpid"; rc=$?
  # the sampler ends with the ranks; stop it when they never started
  for _ in $(seq 50); do
    kill -0 "$spid" 2>/dev/null || break
    [ -s "$tmp/pid.0" ] && [ -s "$tmp/pid.1" ] || kill "$spid" 2>/dev/null
    sleep 0.1
  done
  wait "$spid" 2>/dev/null
  [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/out2.jsonl")" -eq 8 ]; check ranks2-run $? "rc=$rc $(tail -5 "$tmp/run2.log")"
  [ -s "$tmp/mask.0" ] && [ -s "$tmp/mask.1" ] && [ ! -s "$tmp/seen2" ] &&
    [ "$(cat "$tmp/seen2.n" 2>/dev/null || echo 0)" -gt 0 ]
  check ranks2-threads $? "masks given: $(cat "$tmp"/mask.[01] 2>/dev/null | tr '\n' ' '); threads seen outside (pid tid cpus): $(sort -u "$tmp/seen2" 2>/dev/null | head -5 | tr '\n' ';') ($(cat "$tmp/seen2.n" 2>/dev/null) samples)"
  if [ $use_strace -eq 1 ]; then
    moved=""
    for r in 0 1; do
      [ -s "$tmp/strace.r$r" ] && [ -s "$tmp/mask.$r" ] || { moved="$moved rank $r: no trace;"; continue; }
      m=$(strace_outside "$tmp/strace.r$r" "$(cat "$tmp/mask.$r")")
      [ -z "$m" ] || moved="$moved rank $r (given $(cat "$tmp/mask.$r")): $(head -3 <<<"$m" | tr '\n' ';')"
    done
    [ -z "$moved" ]; check ranks2-setaffinity $? "$moved"
  fi
  echo "launch_test[mask]: $(cat "$tmp/seen1.n") thread samples (1 rank), $(cat "$tmp/seen2.n" 2>/dev/null) (2 ranks); strace: $([ $use_strace -eq 1 ] && echo yes || echo no)"
else
  out=$(timeout 60 "$launch" -- topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [[ "$out" == *"rank 0: node "*"pinned ok"* ]]; check bind-check $? "rc=$rc out: $out"
  out=$(timeout 60 "$launch" --ranks 2 --oversubscribe -- topo --bind-check 2>&1); rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c 'pinned ok' <<<"$out")" -eq 2 ]; check bind-check-2 $? "rc=$rc out: $out"
fi
echo "launch_test[$mode]: $pass passed, $fail failed"
[ $fail -eq 0 ]
