#!/usr/bin/env bash
# tests/mpi/sampling_fields_test.sh NUMLA_BIN MODE [MPIEXEC] — presence_penalty,
# frequency_penalty, repetition_penalty, logit_bias and min_p end to end (issue 40), on the tiny
# synth preset with the bpe1k tokenizer.
#   one    one rank, `numla run`: a greedy request whose logit_bias lifts token 77 by 100 gives
#          77 at every step, and so does a sampled one; a frequency penalty of 2 makes that
#          repeating greedy output leave 77 (each repeat costs 2 more), a presence penalty of 2
#          (a fixed cost) does not; a repetition penalty changes the plain greedy output and
#          counts the prompt's tokens (lifted by a bias, they lose the first step to it); bad
#          values are error records naming the line and the field. `numla serve` (needs curl
#          and jq, else that part is skipped): completions and chat accept the fields and give
#          run's tokens; a bad value is a 400 naming the field.
#   ranks  2 ranks under MPIEXEC give one rank's tokens (sampling stays on rank 0)
set -uo pipefail
bin=$1 mode=$2 mpiexec=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "$here/test_lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exact_isa
model=$tmp/tiny
"$bin" synth --preset tiny --out "$model" --seed 9 --tokenizer "$here/../golden/tokenizer/bpe1k" \
  >/dev/null 2>&1 || { echo "synth failed"; exit 1; }

# tokens of record ID in a numla run output: "a,b,c"
tok() { sed -nE "s/^\\{\"id\":\"$2\",\"output_tokens\":\\[([0-9,]*)\\].*/\\1/p" "$1"; }
# the error of record ID
err_of() { sed -nE "s/^\\{\"id\":\"$2\",.*\"error\":\"(.*)\",\"usage\".*/\\1/p" "$1"; }
all77() { [ -n "$1" ] && [ -z "$(echo "$1" | tr ',' '\n' | grep -vx 77)" ]; }

P='"prompt_tokens": [5, 9, 13], "ignore_eos": true'
cat >"$tmp/req.jsonl" <<EOF
{"id": "plain", $P, "max_tokens": 12, "temperature": 0}
{"id": "bias", $P, "max_tokens": 40, "temperature": 0, "logit_bias": {"77": 100}}
{"id": "bias-sampled", $P, "max_tokens": 12, "temperature": 1, "seed": 3, "logit_bias": {"77": 100}, "min_p": 0.1}
{"id": "bias-freq", $P, "max_tokens": 40, "temperature": 0, "logit_bias": {"77": 100}, "frequency_penalty": 2}
{"id": "bias-pres", $P, "max_tokens": 40, "temperature": 0, "logit_bias": {"77": 100}, "presence_penalty": 2}
{"id": "rep", $P, "max_tokens": 12, "temperature": 0, "repetition_penalty": 3}
{"id": "bias-prompt", $P, "max_tokens": 3, "temperature": 0, "logit_bias": {"5": 100, "9": 100, "13": 100}}
{"id": "rep-prompt", $P, "max_tokens": 3, "temperature": 0, "logit_bias": {"5": 100, "9": 100, "13": 100}, "repetition_penalty": 1000}
{"id": "bad-pres", $P, "presence_penalty": 2.5}
{"id": "bad-bias", $P, "logit_bias": {"1024": 1}}
{"id": "bad-minp", $P, "min_p": "0.1"}
{"id": "bad-rep", $P, "repetition_penalty": 0}
EOF

run() { # run OUT [launcher...]
  local out=$1; shift
  "$@" "$bin" run --model "$model" --threads 1 --input "$tmp/req.jsonl" --output "$out" \
    2>"$out.err" || { echo "numla run failed: $(tail -3 "$out.err")"; return 1; }
}

run "$tmp/one.jsonl" || exit 1

if [ "$mode" = one ]; then
  got=$(tok "$tmp/one.jsonl" bias)
  all77 "$got"; check logit-bias-greedy $? "got '$got'"
  got=$(tok "$tmp/one.jsonl" bias-sampled)
  all77 "$got"; check logit-bias-sampled $? "got '$got'"
  got=$(tok "$tmp/one.jsonl" bias-freq)
  [ "${got%%,*}" = 77 ] && ! all77 "$got"
  check frequency-penalty-leaves-the-loop $? "got '$got'"
  got=$(tok "$tmp/one.jsonl" bias-pres)
  all77 "$got"; check presence-penalty-fixed-cost $? "got '$got'"
  plain=$(tok "$tmp/one.jsonl" plain) got=$(tok "$tmp/one.jsonl" rep)
  [ -n "$plain" ] && [ -n "$got" ] && [ "$got" != "$plain" ]
  check repetition-penalty-changes-greedy $? "plain '$plain' rep '$got'"
  # the prompt counts for the repetition penalty: the prompt's tokens lifted by 100 win the
  # first step without it, and lose it with it
  got=$(tok "$tmp/one.jsonl" bias-prompt) got2=$(tok "$tmp/one.jsonl" rep-prompt)
  case ",5,9,13," in *",${got%%,*},"*) r=0 ;; *) r=1 ;; esac
  case ",5,9,13," in *",${got2%%,*},"*) r=1 ;; esac
  [ -n "$got2" ]; r=$((r | $?))
  check repetition-penalty-counts-the-prompt $r "bias only '$got', with the penalty '$got2'"
  for c in "bad-pres 9 presence_penalty" "bad-bias 10 logit_bias[" "bad-minp 11 min_p" \
           "bad-rep 12 repetition_penalty"; do
    set -- $c
    e=$(err_of "$tmp/one.jsonl" "$1")
    case "$e" in "line $2: field \\\"$3"*) r=0 ;; *) r=1 ;; esac
    check "error-record-$1" $r "error '$e'"
  done
  err_of "$tmp/one.jsonl" bad-bias | grep -q '1024.*is not a token id in 0\.\.1023'
  check error-record-logit-bias-vocab $? "$(err_of "$tmp/one.jsonl" bad-bias)"

  if command -v curl >/dev/null && command -v jq >/dev/null; then
    start_server "$tmp/serve.err" "$bin" serve --model "$model" --port 0 --threads 1 --chat-template deepseek-v3
    check serve-ready $? "$(tail -3 "$tmp/serve.err")"
    post() { curl -s -m 60 "http://127.0.0.1:$port$1" -H 'Content-Type: application/json' -d "$2"; }
    ids='[.choices[0].logprobs | (.tokens // [.content[]?.token]) | .[] | sub("token_id:"; "")] | join(",")'
    B='"prompt": [5, 9, 13], "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true'
    for id in bias bias-freq bias-pres rep; do
      x=$(jq -c --arg id "$id" 'select(.id == $id) | {max_tokens, temperature, logit_bias,
            frequency_penalty, presence_penalty, repetition_penalty} | with_entries(select(.value != null))' \
          "$tmp/req.jsonl")
      got=$(post /v1/completions "$(jq -c --argjson x "$x" ". + \$x" <<<"{$B}")" | jq -r "$ids")
      want=$(tok "$tmp/one.jsonl" "$id")
      [ -n "$want" ] && [ "$got" = "$want" ]; check "serve-completion-$id" $? "got '$got' want '$want'"
    done
    got=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
          "temperature": 0.7, "seed": 1, "min_p": 0.05, "logit_bias": {"77": 100}, "presence_penalty": 0.5,
          "ignore_eos": true, "logprobs": true, "return_tokens_as_token_ids": true}' | jq -r "$ids")
    [ "$got" = 77,77,77,77,77,77 ]; check serve-chat-logit-bias $? "got '$got'"
    resp=$(post /v1/completions '{"prompt": [5], "frequency_penalty": -3}')
    [ "$(jq -r .error.param <<<"$resp")" = frequency_penalty ]
    check serve-400-names-the-field $? "$resp"
    resp=$(post /v1/completions '{"prompt": [5], "logit_bias": {"1024": 1}}')
    [ "$(jq -r .error.param <<<"$resp")" = logit_bias ] && grep -q '0\.\.1023' <<<"$resp"
    check serve-400-logit-bias-vocab $? "$resp"
    kill -TERM "$spid"
    wait "$spid"
    check serve-drains $? "$(tail -2 "$tmp/serve.err")"
  else
    echo "numla serve part skipped: needs curl and jq"
  fi
else
  [ -n "$mpiexec" ] || { echo "usage: $0 NUMLA_BIN ranks MPIEXEC"; exit 2; }
  run "$tmp/two.jsonl" "$mpiexec" -n 2 --oversubscribe --bind-to none || exit 1
  for id in plain bias bias-sampled bias-freq bias-pres rep bias-prompt rep-prompt; do
    want=$(tok "$tmp/one.jsonl" "$id") got=$(tok "$tmp/two.jsonl" "$id")
    [ -n "$want" ] && [ "$got" = "$want" ]; check "ranks-$id" $? "got '$got' want '$want'"
  done
fi
echo "sampling_fields_test[$mode]: $pass passed, $fail failed"
[ $fail -eq 0 ]
