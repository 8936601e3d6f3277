#!/bin/sh
# `mindpipe serve` (src/serve/, src/infer/serve.c): a checkpoint split into 2 stage processes over
# ZeroMQ; completions from concurrent clients (continuous batching) bitwise equal to the same
# requests sent one at a time, to a 1-stage server and to `mindpipe generate` (greedy and sampled);
# bad input answered 4xx while the server keeps serving; /health and /metrics; stage processes
# killed with SIGKILL during a load of 400 requests (standbys promoted, or restarts): none lost, every
# completion bitwise equal to the run without failures; a failover that cannot start a replacement
# makes the server say so (503) instead of hanging; SIGTERM stops everything; refusals at start.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_serve_init
M="--set model.seq_len=64"

# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $M --set data.path="$data" --set train.steps=300 --set train.batch=8 --set train.micro_batch=8 \
    --set train.warmup=20 --set train.min_lr=1e-3 --quiet --out "$SCRATCH/run" > "$SCRATCH/train.log" 2>&1
ok $? "train a 2-layer model 300 steps"
CK="$SCRATCH/run/ckpt/step_00000300.h5"

# start NAME ARGS...: a server in the background; URL once serve.json exists (60 s at most).
start() {
    name=$1; shift
    "$MINDPIPE" serve -c "$deck" $M --ckpt "$CK" --listen 127.0.0.1:0 --out "$SCRATCH/$name" "$@" \
        > "$SCRATCH/$name.log" 2>&1 &
    spid=$!
    pids="$pids $spid"
    i=0
    while [ ! -s "$SCRATCH/$name/serve.json" ] && kill -0 $spid 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    URL=$(sed -n 's/.*"address": "\(http[^"]*\)".*/\1/p' "$SCRATCH/$name/serve.json" 2>/dev/null)
    [ -n "$URL" ]
}
stage_pid() { sed -n "s/.*\"stage\": $2, \"layers\": \[[0-9]*, [0-9]*\], \"pid\": \([0-9]*\).*/\1/p" "$SCRATCH/$1/serve.json"; }

start two --stages 2 --slots 4
ok $? "serve --stages 2 --slots 4 starts: $(head -1 "$SCRATCH/two.log")"
URL2=$URL; FE2=$spid
S0=$(stage_pid two 0); S1=$(stage_pid two 1)
grep -q '"stage": 0, "layers": \[0, 1\]' "$SCRATCH/two/serve.json" && grep -q '"stage": 1, "layers": \[1, 2\]' "$SCRATCH/two/serve.json" &&
    kill -0 "$S0" && kill -0 "$S1" && [ "$(stat -c %a "$SCRATCH/two/sock")" = 700 ]
ok $? "serve.json: stage 0 holds layers [0, 1), stage 1 [1, 2), both running (pids $S0, $S1); the sockets' directory is mode 700"

"$TORCH_PYTHON" "$client" load "$URL2" --requests 24 --concurrency 1 --out "$SCRATCH/seq.jsonl" > "$SCRATCH/c.out" 2>&1
ok $? "24 requests one at a time: $(cat "$SCRATCH/c.out")"
"$TORCH_PYTHON" "$client" load "$URL2" --requests 24 --concurrency 8 --out "$SCRATCH/conc.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    ! grep -q '"error"' "$SCRATCH/conc.jsonl" && cmp -s "$SCRATCH/seq.jsonl" "$SCRATCH/conc.jsonl"
ok $? "the same 24 from 8 concurrent clients (batched together, joining and leaving): every completion bitwise equal ($(cat "$SCRATCH/c.out"))"

# one event per token step whatever the client's pace (a reader slower than the batcher got one event
# of several tokens: 94 events, below this check's old "more than 100", beside a busy host): every
# event holds one token but for at most one empty closing event per request (finish_reason after the
# last token's event)
"$TORCH_PYTHON" "$client" stream "$URL2" --requests 12 --out "$SCRATCH/stream.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    head -12 "$SCRATCH/seq.jsonl" | cmp -s - "$SCRATCH/stream.jsonl" &&
    awk '{ if (match($0, /12 streamed requests, [0-9]+ events of [0-9]+ tokens, at most 1 an event/)) { split(substr($0, RSTART, RLENGTH), w, " "); e = w[4]; t = w[7]; ok = t > 100 && e >= t && e <= t + 12 } } END { exit !ok }' "$SCRATCH/c.out"
ok $? "\"stream\": true: server-sent events, one per token step, end in [DONE]; requests 0-11 gather the same tokens and finish_reason ($(cat "$SCRATCH/c.out"))"

start one --stages 1 --slots 8
ok $? "serve --stages 1 starts"
URL1=$URL; FE1=$spid
"$TORCH_PYTHON" "$client" load "$URL1" --requests 24 --concurrency 6 --out "$SCRATCH/one.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    cmp -s "$SCRATCH/seq.jsonl" "$SCRATCH/one.jsonl"
ok $? "a 1-stage server gives the same 24 completions bitwise ($(cat "$SCRATCH/c.out"))"
kill -TERM "$FE1"

# The same requests through `mindpipe generate` (one process, no server): the same bytes.
same=0
for i in 0 1 2 3 4 5; do
    # every step must work: a generate and a tokens that both failed would leave two equal empty files
    if "$TORCH_PYTHON" "$client" request $i > "$SCRATCH/req" &&
        IFS=$(printf '\t') read -r prompt n temp topk seed rid < "$SCRATCH/req" &&
        "$MINDPIPE" generate -c "$deck" $M --ckpt "$CK" --prompt "$prompt" --max-tokens "$n" --temperature "$temp" \
            --top-k "$topk" --seed "$seed" --request-id "$rid" > "$SCRATCH/gen$i" 2> "$SCRATCH/gen$i.err" &&
        "$TORCH_PYTHON" "$client" tokens "$SCRATCH/seq.jsonl" $i "$SCRATCH/srv$i" &&
        cmp -s "$SCRATCH/gen$i" "$SCRATCH/srv$i"; then
        same=$((same + 1))
    else
        diag "request $i: generate '$(cat "$SCRATCH/gen$i" 2>/dev/null)' ($(head -c 200 "$SCRATCH/gen$i.err" 2>/dev/null)) serve '$(cat "$SCRATCH/srv$i" 2>/dev/null)'"
    fi
done
[ $same -eq 6 ]
ok $? "requests 0-5 (greedy and sampled, top-k 20 or all) equal mindpipe generate's bytes with the same seed and request id ($same of 6)"

"$TORCH_PYTHON" "$client" bad "$URL2" --context 64 > "$SCRATCH/bad.out" 2>&1
tap_checker "bad input" "serve_client.py bad" $? "$SCRATCH/bad.out"
grep -q "^PASS the server closes" "$SCRATCH/bad.out"
ok $? "the bad-input client ran to its end"

"$TORCH_PYTHON" "$client" get "$URL2" /health > "$SCRATCH/h.out" && grep -q '^200' "$SCRATCH/h.out" && grep -q '"ok"' "$SCRATCH/h.out"
ok $? "GET /health: 200 ok"
"$TORCH_PYTHON" "$client" get "$URL2" /metrics > "$SCRATCH/m.out"
grep -q '^mindpipe_requests_total{result="ok"} 79$' "$SCRATCH/m.out" &&
    grep -q '^mindpipe_requests_total{result="bad_request"} 19$' "$SCRATCH/m.out" &&
    grep -q '^mindpipe_request_latency_seconds{quantile="0.99"} [0-9.]*$' "$SCRATCH/m.out" &&
    grep -q '^mindpipe_tokens_per_second [1-9]' "$SCRATCH/m.out" && grep -q '^mindpipe_up 1$' "$SCRATCH/m.out"
ok $? "GET /metrics: 79 requests ok (48, 12 streamed, 19 between and after bad ones), 19 bad requests, latency quantiles, tokens/s, up"
diag "$(grep -E '^mindpipe_(tokens_per|request_latency)' "$SCRATCH/m.out" | tr '\n' ' ')"

# A stage dies without a standby: it is restarted and the server serves on.
kill -9 "$S1"
i=0; while [ "$(stage_pid two 1)" = "$S1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
N1=$(stage_pid two 1)
"$TORCH_PYTHON" "$client" load "$URL2" --requests 24 --concurrency 8 --out "$SCRATCH/after.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    cmp -s "$SCRATCH/seq.jsonl" "$SCRATCH/after.jsonl" && [ -n "$N1" ] && [ "$N1" != "$S1" ] && kill -0 "$N1" &&
    grep -q "stage 1 restarted (pid $N1)" "$SCRATCH/two.log"
ok $? "stage 1 killed (SIGKILL) without a standby: restarted (pid $S1 -> $N1), the same 24 completions after it"

# A failover that cannot start a replacement (the checkpoint gone): 503 naming why, no hang.
mv "$CK" "$CK.away"
kill -9 "$N1"
i=0; while ! "$TORCH_PYTHON" "$client" get "$URL2" /health > "$SCRATCH/h.out" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
i=0; while ! grep -q '^503' "$SCRATCH/h.out" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); "$TORCH_PYTHON" "$client" get "$URL2" /health > "$SCRATCH/h.out"; done
grep -q '^503' "$SCRATCH/h.out" && grep -q "stage 1 (pid [0-9]*) exited with status 1" "$SCRATCH/h.out"
ok $? "stage 1 killed while its checkpoint is gone: 3 replacements fail, /health answers 503 naming stage 1 ($(tail -1 "$SCRATCH/h.out"))"
st=$("$TORCH_PYTHON" -c "
import sys; sys.path.insert(0, '$MP_SRCDIR/validation'); import serve_client as c, json
print(c.post('$URL2', json.dumps({'prompt': 'And', 'max_tokens': 3}))[0])")
[ "$st" = 503 ]
ok $? "a completion while the pipeline is down: 503 at once (got $st)"
mv "$CK.away" "$CK"
S0=$(stage_pid two 0)
kill -TERM "$FE2"
i=0; while kill -0 "$FE2" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
wait "$FE2"; rc=$?
[ $rc -eq 0 ] && ! kill -0 "$S0" 2>/dev/null
ok $? "SIGTERM: the front end exits 0 (got $rc) and stage 0 is gone"
wait "$FE1"; rc=$?
[ $rc -eq 0 ] && grep -q "stopped by signal 15" "$SCRATCH/one.log"
ok $? "the 1-stage server stopped by SIGTERM, exit 0"

# Failover with standbys: requests from 8 clients (round 400 until told to stop) while the primaries of
# stage 1, 0, 1, 0 are killed (SIGKILL), each 0.2 s after the previous failover. Reference: the same 400 on a 1-stage server without failures.
start ref1 --stages 1 --slots 8
ok $? "a 1-stage reference server starts"
"$TORCH_PYTHON" "$client" load "$URL" --requests 400 --concurrency 8 --out "$SCRATCH/ref400.jsonl" > "$SCRATCH/c.out" 2>&1
ok $? "the reference: 400 requests ($(cat "$SCRATCH/c.out"))"
# The checks' tools: an --until load goes round its 5 requests until told to stop; `same` takes its
# rows and refuses one that differs in a token, naming it
"$TORCH_PYTHON" "$client" load "$URL" --requests 5 --concurrency 2 --out "$SCRATCH/u.jsonl" --until "$SCRATCH/u.stop" \
    --mark "$SCRATCH/u.mark" --mark-after 12 > "$SCRATCH/u.out" 2>&1 &
l=$!
i=0; while [ ! -e "$SCRATCH/u.mark" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
touch "$SCRATCH/u.stop"; wait $l; rc=$?
head -n 5 "$SCRATCH/ref400.jsonl" > "$SCRATCH/ref5.jsonl"
"$TORCH_PYTHON" "$client" same "$SCRATCH/ref5.jsonl" "$SCRATCH/u.jsonl" > "$SCRATCH/same.out" 2>&1; same=$?
sed '7s/\[\([0-9]*\)/[1\1/' "$SCRATCH/u.jsonl" > "$SCRATCH/u7.jsonl"
"$TORCH_PYTHON" "$client" same "$SCRATCH/ref5.jsonl" "$SCRATCH/u7.jsonl" > "$SCRATCH/same7.out" 2>&1; same7=$?
[ $rc -eq 0 ] && [ $same -eq 0 ] && [ "$(wc -l < "$SCRATCH/u.jsonl")" -ge 12 ] && [ $same7 -eq 1 ] &&
    grep -q "u7.jsonl row 7 (i 1) is not the reference's" "$SCRATCH/same7.out"
ok $? "an --until load goes round its requests ($(cat "$SCRATCH/u.out"); $(cat "$SCRATCH/same.out")); a changed row refused ($(cut -c1-60 "$SCRATCH/same7.out"))"
kill -TERM $spid
start fo --stages 2 --standby 1 --slots 8
ok $? "serve --stages 2 --standby 1 starts"
URLF=$URL; FEF=$spid
[ "$(grep -c '"role": "primary"' "$SCRATCH/fo/serve.json")" -eq 2 ] && [ "$(grep -c '"role": "standby"' "$SCRATCH/fo/serve.json")" -eq 2 ]
ok $? "serve.json: 2 primaries and 2 standbys"
# The load goes round the 400 until fo.stop exists: it cannot end before a kill however fast the host
"$TORCH_PYTHON" "$client" load "$URLF" --requests 400 --concurrency 8 --out "$SCRATCH/fo400.jsonl" \
    --until "$SCRATCH/fo.stop" > "$SCRATCH/c.out" 2>&1 &
lpid=$!
killed=""; ended=""
for st in 1 0 1 0; do
    # the stage's standby holds durable state (it applied a confirmed delta) before its primary dies
    sb=$(sed -n "s/.*\"role\": \"standby\", \"stage\": $st, \"layers\": \[[0-9]*, [0-9]*\], \"pid\": \([0-9]*\).*/\1/p" "$SCRATCH/fo/serve.json")
    i=0; while ! grep -q "standby of stage $st (pid $sb) follows its primary" "$SCRATCH/fo.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    sleep 0.2
    p=$(sed -n "s/.*\"role\": \"primary\", \"stage\": $st, \"layers\": \[[0-9]*, [0-9]*\], \"pid\": \([0-9]*\).*/\1/p" "$SCRATCH/fo/serve.json")
    kill -0 $lpid 2>/dev/null || ended="$ended $st"
    kill -9 "$p" && killed="$killed $st:$p"
    i=0; while grep -q "\"pid\": $p," "$SCRATCH/fo/serve.json" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
done
i=0; while [ "$(grep -c 'failed over in' "$SCRATCH/fo.log")" -lt 4 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 $lpid 2>/dev/null || ended="$ended after"
touch "$SCRATCH/fo.stop"
wait $lpid; rc=$?
[ $rc -eq 0 ] && [ -z "$ended" ]
ok $? "the load from 8 clients ran through the kills of primaries ($killed; ended before:${ended:- none}): $(cat "$SCRATCH/c.out")"
"$TORCH_PYTHON" "$client" same "$SCRATCH/ref400.jsonl" "$SCRATCH/fo400.jsonl" > "$SCRATCH/same.out" 2>&1
ok $? "no request lost or changed: $(cat "$SCRATCH/same.out") without failures"
rows=$(wc -l < "$SCRATCH/fo400.jsonl")
"$TORCH_PYTHON" "$client" get "$URLF" /metrics > "$SCRATCH/m.out"
grep -q '^mindpipe_failovers_total 4$' "$SCRATCH/m.out" && grep -q '^mindpipe_requests_total{result="failed"} 0$' "$SCRATCH/m.out" &&
    grep -q "^mindpipe_requests_total{result=\"ok\"} $rows\$" "$SCRATCH/m.out"
ok $? "/metrics: 4 failovers, $rows requests ok (the load's rows), 0 failed"
diag "$(grep -E '^mindpipe_failover_seconds' "$SCRATCH/m.out" | tr '\n' ' ') $(grep -o 'failed over in [0-9.]* s; resumed from delta at step [0-9]*: [0-9]* running requests feed [0-9]*' "$SCRATCH/fo.log" | tr '\n' ' ')"
grep -q "failed over in [0-9.]* s; resumed from delta at step [0-9]*: [1-9][0-9]* running requests" "$SCRATCH/fo.log" &&
    [ "$(grep -c 'the standby of stage [01] (pid [0-9]*) takes over' "$SCRATCH/fo.log")" -eq 4 ] &&
    [ "$(grep -c 'failed over in [0-9.]* s; resumed from delta at step [1-9][0-9]*' "$SCRATCH/fo.log")" -eq 4 ] &&
    ! grep -q "replay their tokens" "$SCRATCH/fo.log"
ok $? "every failover promoted a standby that resumed from its deltas at a durable step (none replayed), at least one with running requests"
# HAMS's saving: the durable positions fed again after the failovers (the promoted standbys' lag, and
# the sequences a standby started after a failover had not seen begin) against a replay of them all.
refed=$(sed -n 's/^mindpipe_failover_positions_total{which="refed"} //p' "$SCRATCH/m.out")
replay=$(sed -n 's/^mindpipe_failover_positions_total{which="replay"} //p' "$SCRATCH/m.out")
grep -q '^mindpipe_failovers_resumed_total{from="delta"} 4$' "$SCRATCH/m.out" &&
    grep -q '^mindpipe_failovers_resumed_total{from="replay"} 0$' "$SCRATCH/m.out" &&
    [ -n "$replay" ] && [ "$replay" -gt 0 ] && [ "$refed" -lt "$replay" ]
ok $? "/metrics: 4 failovers resumed from deltas, 0 replayed; $refed durable positions fed again where replays would feed $replay"
grep -q '"name": "first_token"' "$SCRATCH/fo/trace.json" && [ "$(grep -c '"name": "resume"' "$SCRATCH/fo/trace.json")" -eq 4 ]
ok $? "the failover timeline (DIR/trace.json): 4 resumes, and a first token after one"
i=0; while [ "$(grep -c '"role": "standby"' "$SCRATCH/fo/serve.json")" -ne 2 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(grep -c '"role": "standby"' "$SCRATCH/fo/serve.json")" -eq 2 ] && [ "$(grep -c '"role": "primary"' "$SCRATCH/fo/serve.json")" -eq 2 ]
ok $? "new standbys replace the promoted ones: serve.json lists 2 primaries and 2 standbys again"
kill -TERM "$FEF"
wait "$FEF"
ok $? "the failover server stops on SIGTERM, exit 0"

# Beyond loopback: --public with an access token in the environment; every request must send it.
TOKEN=0123456789abcdef-test-token
export MINDPIPE_SERVE_TOKEN=$TOKEN
start pub --stages 1 --listen 0.0.0.0:0 --public
ok $? "serve --listen 0.0.0.0:0 --public with MINDPIPE_SERVE_TOKEN starts: $(head -1 "$SCRATCH/pub.log" | cut -c1-160)"
codes=$("$TORCH_PYTHON" -c "
import sys, json; sys.path.insert(0, '$MP_SRCDIR/validation'); import serve_client as c
b = json.dumps({'prompt': 'And', 'max_tokens': 3, 'temperature': 0})
h = lambda t: {'Content-Type': 'application/json', 'Authorization': t}
print(c.post('$URL', b)[0], c.post('$URL', b, h('Bearer wrong-token-0123456789'))[0], c.post('$URL', b, h('Bearer $TOKEN'))[0],
      c.post('$URL', b, h('$TOKEN'))[0])")
[ "$codes" = "401 401 200 401" ]
ok $? "with a token: no header 401, a wrong token 401, the token 200, the token without Bearer 401 (got $codes)"
grep -q "access token required" "$SCRATCH/pub.log"
ok $? "the start line says an access token is required"
unset MINDPIPE_SERVE_TOKEN
kill -TERM $spid
wait $spid
ok $? "the public server stops on SIGTERM, exit 0"

# Refused at start, with the cause named and exit 1.
expect_fail() {
    what=$1; pat=$2; shift 2
    "$@" > "$SCRATCH/out" 2> "$SCRATCH/err"; rc=$?
    if [ $rc -ne 0 ] && grep -q -- "$pat" "$SCRATCH/err"; then ok 0 "$what"
    else ok 1 "$what"; diag "exit $rc; stderr:"; sed 's/^/#   /' "$SCRATCH/err"; fi
}
SV() { "$MINDPIPE" serve -c "$deck" $M --listen 127.0.0.1:0 --out "$SCRATCH/refused" "$@"; }
expect_fail "listening beyond loopback is refused" "loopback only" SV --ckpt "$CK" --listen 0.0.0.0:0
expect_fail "--public without an access token is refused" "MINDPIPE_SERVE_TOKEN" SV --ckpt "$CK" --listen 0.0.0.0:0 --public
export MINDPIPE_SERVE_TOKEN=short
expect_fail "a token under 16 characters is refused" "16 characters" SV --ckpt "$CK"
unset MINDPIPE_SERVE_TOKEN
expect_fail "two standbys per stage are refused" "0 or 1 standby" SV --ckpt "$CK" --standby 2
expect_fail "3 stages of a 2-layer model are refused by the deck's rule" "parallel.pp=3" SV --ckpt "$CK" --stages 3
expect_fail "a checkpoint of another model is refused at start, naming the stage and the mismatch" "dim" \
    SV --ckpt "$CK" --set model.dim=64
printf 'not hdf5\n' > "$SCRATCH/bad.h5"
expect_fail "a file that is not a checkpoint is refused at start" "stage 0 (pid [0-9]*) exited" SV --ckpt "$SCRATCH/bad.h5"
expect_fail "serve without --ckpt is a usage error" "ckpt" "$MINDPIPE" serve -c "$deck"
done_testing
