#!/bin/sh
# A standby started after a failover catches up (src/serve/snapshot.h): the same stage's primary is
# killed twice (SIGKILL), the second time as soon as the replacement standby says it follows its
# primary, while the requests that began before it are still running. Every completion is bitwise
# equal to a run without failures, and the second failover of each stage feeds few durable
# positions again: the new standby got the older sequences from its primary's snapshot. (Before the
# catch-up it held only the sequences begun after it started, and those requests resumed from
# position 0: the check of the second failovers failed in 6 of 6 runs.)
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_serve_init
M="--set model.seq_len=256"

# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $M --set data.path="$data" --set train.steps=100 --set train.batch=8 --set train.micro_batch=8 \
    --set train.warmup=20 --quiet --out "$SCRATCH/run" > "$SCRATCH/train.log" 2>&1
ok $? "train a 2-layer model 100 steps"
CK="$SCRATCH/run/ckpt/step_00000100.h5"

# serve NAME ARGS...: a server in the background ($spid), its address in $URL.
serve() {
    name=$1; shift
    # shellcheck disable=SC2086
    "$MINDPIPE" serve -c "$deck" $M --ckpt "$CK" --listen 127.0.0.1:0 --out "$SCRATCH/$name" "$@" > "$SCRATCH/$name.log" 2>&1 &
    spid=$!; pids="$pids $spid"
    URL=$(mp_serve_url "$SCRATCH/$name" $spid)
    [ -n "$URL" ]
}
# pid_of ROLE STAGE: that process's pid in serve.json.
pid_of() { sed -n "s/.*\"role\": \"$1\", \"stage\": $2, \"layers\": \[[0-9]*, [0-9]*\], \"pid\": \([0-9]*\).*/\1/p" "$SCRATCH/fo/serve.json"; }
# follows PID: the standby PID has said it follows its primary (caught up) (10 s at most).
follows() {
    f_i=0
    while ! grep -q "standby of stage [01] (pid $1) follows its primary" "$SCRATCH/fo.log" && [ $f_i -lt 200 ]; do
        sleep 0.05; f_i=$((f_i + 1))
    done
    grep -q "standby of stage [01] (pid $1) follows its primary" "$SCRATCH/fo.log"
}

# Requests of 200 tokens: each runs several times as long as a standby takes to start.
N=128
serve ref --stages 1 --slots 8
ok $? "a 1-stage reference server starts"
"$TORCH_PYTHON" "$client" load "$URL" --requests $N --concurrency 8 --max-tokens 200 --out "$SCRATCH/ref.jsonl" > "$SCRATCH/c.out" 2>&1
ok $? "the reference: $N requests ($(cat "$SCRATCH/c.out"))"
kill -TERM $spid

# round: one server with the four kills; its results in r_* (printed as TAP after the last round).
round() {
    rm -rf "$SCRATCH/fo" # a fresh serve.json, so the address is this round's server's
    serve fo --stages 2 --standby 1 --slots 8; r_start=$?
    FE=$spid
    # round the N requests until fo.stop exists: no kill can come after the load on a fast host
    rm -f "$SCRATCH/fo.stop"
    "$TORCH_PYTHON" "$client" load "$URL" --requests $N --concurrency 8 --max-tokens 200 --out "$SCRATCH/fo.jsonl" \
        --until "$SCRATCH/fo.stop" > "$SCRATCH/c.out" 2>&1 &
    lpid=$!
    killed=""; bad=""
    for st in 1 0; do
        # the first kill once the stage's standby follows; the second as soon as its replacement does
        for n in 1 2; do
            sb=$(pid_of standby $st)
            follows "$sb" || bad="$bad stage-$st-kill-$n:standby-$sb-never-followed"
            [ $n = 1 ] && sleep 0.2
            p=$(pid_of primary $st)
            kill -0 $lpid 2>/dev/null || bad="$bad load-ended-before-kill-$st-$n"
            kill -9 "$p" && killed="$killed $st:$p"
            # serve.json lists the promoted standby as the primary and a new standby (5 s at most)
            i=0; while { [ "$(pid_of primary $st)" != "$sb" ] || [ -z "$(pid_of standby $st)" ]; } && [ $i -lt 100 ]; do
                sleep 0.05; i=$((i + 1))
            done
        done
    done
    i=0; while [ "$(grep -c 'failed over in' "$SCRATCH/fo.log")" -lt 4 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -0 $lpid 2>/dev/null || bad="$bad load-ended-before-the-last-failover"
    touch "$SCRATCH/fo.stop"
    wait $lpid; r_load=$?
    "$TORCH_PYTHON" "$client" same "$SCRATCH/ref.jsonl" "$SCRATCH/fo.jsonl" > "$SCRATCH/same.out" 2>&1; r_same=$?
    # Each failover's line: "... N running requests feed P durable positions again (a replay would feed R)".
    grep -o 'resumed from delta at step [0-9]*: [0-9]* running requests feed [0-9]* durable positions again (a replay would feed [0-9]*)' \
        "$SCRATCH/fo.log" | sed 's/.*: \([0-9]*\) running requests feed \([0-9]*\) .* feed \([0-9]*\))/\1 \2 \3/' > "$SCRATCH/fo.txt"
    diag "failovers (running, fed again, replay): $(tr '\n' ';' < "$SCRATCH/fo.txt")"
    [ "$(wc -l < "$SCRATCH/fo.txt")" -eq 4 ] && ! grep -q "replay their tokens" "$SCRATCH/fo.log"; r_four=$?
    # the second failover of each stage (lines 2 and 4): the standby that took over had started after
    # the first; it must hold the older sequences too: at most a quarter of a replay fed again
    few=$(awk 'NR == 2 || NR == 4 { if ($3 < 40 || 4 * $2 > $3) bad++; n++ } END { print n == 2 && !bad }' "$SCRATCH/fo.txt")
    [ "$few" = 1 ]; r_few=$?
}
# Once a known fault (2026-11-27, found 2026-11-28): in about one round in three a second failover fed
# 40-80% of a replay again. Steps the front end had sent to the dead primary were queued by ZeroMQ for
# its endpoint and run by the promoted one, at positions past what it held; its snapshot and its new
# standby took those slots for sequences whose start they had missed and dropped them. A process now
# runs no step with rows before the ring's first empty step (wire_step_current), and one round must pass.
round
ok $r_start "serve --stages 2 --standby 1 starts"
ok $r_load "requests from 8 clients (round $N until told to stop) while the primaries of stage 1, 1, 0, 0 were killed ($killed): $(cat "$SCRATCH/c.out")"
[ -z "$bad" ]
ok $? "each kill came while the load ran, its standby following first${bad:+ (not:$bad)}"
ok $r_same "no request lost or changed: $(cat "$SCRATCH/same.out") (the run without failures)"
ok $r_four "4 failovers, each resumed from a promoted standby's state"
ok $r_few "the second failover of each stage fed few positions again (at most a quarter of a replay of at least 40)"
grep -q "standby of stage 1 (pid [0-9]*) follows its primary from step [0-9]* (caught up: it holds [1-9][0-9]* positions of [1-9][0-9]* sequences, [1-9][0-9]* from its snapshot)" "$SCRATCH/fo.log" &&
    grep -q "stage 1's primary (pid [0-9]*) sends its standby a snapshot: [1-9][0-9]* positions" "$SCRATCH/fo.log"
ok $? "a replacement standby of stage 1 caught up from its primary's snapshot: $(grep -o 'standby of stage 1 (pid [0-9]*) follows its primary from step [0-9]* (caught up: it holds [1-9][^)]*)' "$SCRATCH/fo.log" | tail -1)"
kill -TERM $FE
wait $FE
ok $? "the server stops on SIGTERM, exit 0"
done_testing
