#!/bin/sh
# jobs/slurm/serve.sbatch as a dry run without Slurm: the front end and one process per stage
# primary and standby linked over TCP on 127.0.0.1 (--links tcp:PORT:HOSTS, the layout the script
# gives a multi-node allocation); completions bitwise equal to a one-machine server's; a primary
# killed with SIGKILL is found by its missed heartbeats, its standby promoted by message, the
# running requests resumed from its deltas, and no completion changes; SIGTERM (scancel) stops the
# whole job. Not run here: a real Slurm allocation of several nodes.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_serve_init
sbatch="$MP_SRCDIR/jobs/slurm/serve.sbatch"

bash -n "$sbatch"
ok $? "serve.sbatch parses (bash -n)"
mp_serve_reference 300

# a block of 19 free ports (links.h) below the ephemeral range
port=$(mp_port_block 19)
MINDPIPE="$MINDPIPE" STAGES=2 STANDBY=1 PORT=$port LISTEN=127.0.0.1:0 \
    bash "$sbatch" "$deck" "$CK" "$SCRATCH/job" --set model.seq_len=64 > "$SCRATCH/job.log" 2>&1 &
job=$!; pids="$pids $job"
U=$(mp_serve_url "$SCRATCH/job" $job)
[ -n "$U" ] && [ "$(wc -l < "$SCRATCH/job/processes.txt")" -eq 4 ] && grep -q "links tcp:$port:127.0.0.1,127.0.0.1" "$SCRATCH/job.log"
ok $? "the job starts: the front end and 4 stage processes (2 primaries, 2 standbys) on tcp ports from $port"
for p in $(cut -d' ' -f2 "$SCRATCH/job/processes.txt"); do pids="$pids $p"; done
"$TORCH_PYTHON" "$client" load "$U" --requests 300 --concurrency 8 --out "$SCRATCH/a.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    cmp -s "$SCRATCH/ref.jsonl" "$SCRATCH/a.jsonl"
ok $? "300 requests over TCP: every completion bitwise equal to the one-process server's ($(cat "$SCRATCH/c.out"))"

# stage 1's primary dies once its standby holds durable state; the load goes on
p1=$(sed -n 's/^stage-1-primary.log //p' "$SCRATCH/job/processes.txt")
i=0; while ! grep -q "follows its primary" "$SCRATCH/job/stage-1-standby.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
# The load goes round its 300 requests until b.stop exists, so it cannot end before the kill on any
# machine's speed (a fixed sleep did: on a fast host 300 requests from 2 clients took 0.65 s, the
# kill came after them); b.mark: 50 answered, requests run and their positions are durable.
"$TORCH_PYTHON" "$client" load "$U" --requests 300 --concurrency 2 --out "$SCRATCH/b.jsonl" \
    --until "$SCRATCH/b.stop" --mark "$SCRATCH/b.mark" --mark-after 50 > "$SCRATCH/c.out" 2>&1 &
l=$!
i=0; while [ ! -e "$SCRATCH/b.mark" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$SCRATCH/b.mark" ] && kill -0 $l && kill -9 "$p1"
ok $? "stage 1's primary (pid $p1) killed while the load ran"
i=0; while ! grep -q "failed over in" "$SCRATCH/job.log" && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
grep -q "failed over in" "$SCRATCH/job.log" && kill -0 $l
ok $? "the load still ran when the failover was done"
sleep 0.3; touch "$SCRATCH/b.stop" # requests after the failover too
wait $l
ok $? "the load while stage 1's primary (pid $p1) was killed: $(cat "$SCRATCH/c.out")"
"$TORCH_PYTHON" "$client" same "$SCRATCH/ref.jsonl" "$SCRATCH/b.jsonl" > "$SCRATCH/same.out" 2>&1
ok $? "none lost or changed: $(cat "$SCRATCH/same.out")"
grep -q "stage 1's primary missed its heartbeats" "$SCRATCH/job/serve.log" 2>/dev/null ||
    grep -q "stage 1's primary missed its heartbeats" "$SCRATCH/job.log"
ok $? "the front end found the death by missed heartbeats"
grep -q "the standby of stage 1 takes over (promoted by message)" "$SCRATCH/job.log" &&
    grep -q "failed over in [0-9.]* s; resumed from delta at step [1-9][0-9]*" "$SCRATCH/job.log"
ok $? "its standby was promoted by message and resumed from its deltas: $(grep -o 'failed over in .*again ([^)]*)' "$SCRATCH/job.log")"
"$TORCH_PYTHON" "$client" get "$U" /metrics > "$SCRATCH/m.out"
grep -q '^mindpipe_failovers_resumed_total{from="delta"} 1$' "$SCRATCH/m.out" &&
    grep -q '^mindpipe_requests_total{result="failed"} 0$' "$SCRATCH/m.out"
ok $? "/metrics: 1 failover resumed from deltas, 0 requests failed"
# --- restandby: a new standby after the promotion, and a second failover of the same stage ---
# serve.sbatch starts the dead primary again, as a standby in its host slot (0); it joins the promoted
# primary (slot 1: a snapshot, then deltas), and when that one dies too the front end promotes it.
i=0; while ! grep -q "^stage-1-slot0-restart1.log [0-9]" "$SCRATCH/job/processes.txt" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
n1=$(sed -n 's/^stage-1-slot0-restart1.log \([0-9]*\) restart 1 of stage 1 host slot 0 .*/\1/p' "$SCRATCH/job/processes.txt")
p2=$(sed -n 's/^stage-1-standby.log //p' "$SCRATCH/job/processes.txt")
pids="$pids $n1"
[ -n "$n1" ] && kill -0 "$n1" && grep -q "stage 1's process in host slot 0 .* restarted as a standby (pid $n1" "$SCRATCH/job.log"
ok $? "serve.sbatch restarted the dead primary as a standby in its host slot 0 (pid ${n1:-none}; processes.txt: $(grep restart "$SCRATCH/job/processes.txt"))"
"$TORCH_PYTHON" "$client" load "$U" --requests 300 --concurrency 2 --out "$SCRATCH/c.jsonl" \
    --until "$SCRATCH/c.stop" > "$SCRATCH/c.out" 2>&1 &
l=$!
i=0; while ! grep -q "standby of stage 1 (pid $n1) follows its primary" "$SCRATCH/job/stage-1-slot0-restart1.log" && [ $i -lt 100 ]; do
    sleep 0.1; i=$((i + 1))
done
grep -q "stage 1's primary (pid $p2) sends its standby a snapshot" "$SCRATCH/job/stage-1-standby.log" &&
    grep -q "standby of stage 1 (pid $n1) follows its primary" "$SCRATCH/job/stage-1-slot0-restart1.log"
ok $? "it caught up with the promoted primary (pid $p2) from its snapshot: $(grep -o 'follows its primary .*' "$SCRATCH/job/stage-1-slot0-restart1.log" | head -1)"
sleep 0.5 # requests running, their positions durable on the new standby (the load runs until c.stop)
kill -0 $l && kill -9 "$p2"
ok $? "the promoted primary (pid $p2) killed while the load ran"
i=0; while [ "$(grep -c "failed over in" "$SCRATCH/job.log")" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.3; touch "$SCRATCH/c.stop" # requests after the second failover too
wait $l; lrc=$?
"$TORCH_PYTHON" "$client" same "$SCRATCH/ref.jsonl" "$SCRATCH/c.jsonl" > "$SCRATCH/same.out" 2>&1
[ $? -eq 0 ] && [ $lrc -eq 0 ]
ok $? "the load across the second failover of stage 1 (client exit $lrc): none lost or changed ($(cat "$SCRATCH/same.out"); $(cat "$SCRATCH/c.out"))"
i=0; while ! grep -q "the standby of stage 1 takes over (promoted by message), host slot 0" "$SCRATCH/job.log" &&
    [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
"$TORCH_PYTHON" "$client" get "$U" /metrics > "$SCRATCH/m.out"
grep -q "the standby of stage 1 takes over (promoted by message), host slot 0" "$SCRATCH/job.log" &&
    grep -q '^mindpipe_failovers_resumed_total{from="delta"} 2$' "$SCRATCH/m.out" &&
    grep -q '^mindpipe_requests_total{result="failed"} 0$' "$SCRATCH/m.out" &&
    grep -q '"stage": 1, "primary": {"slot": 0' "$SCRATCH/job/serve.json"
ok $? "the front end promoted the new standby (host slot 0) by message and resumed from its state: $(grep -o 'failed over in .*again ([^)]*)' "$SCRATCH/job.log" | tail -1)"
i=0; while ! grep -q "^stage-1-slot1-restart1.log [0-9]" "$SCRATCH/job/processes.txt" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
for p in $(sed -n 's/^stage-[0-9]*-slot[01]-restart[0-9]*.log \([0-9]*\) .*/\1/p' "$SCRATCH/job/processes.txt"); do pids="$pids $p"; done
grep -q "^stage-1-slot1-restart1.log [0-9]* restart 1 of stage 1 host slot 1 (status 137 after [0-9]* s)" "$SCRATCH/job/processes.txt"
ok $? "and restarted the killed one as a standby in slot 1 (processes.txt records it with the status it ended with)"
# --- end of restandby ---
kill -TERM $job
i=0; while kill -0 $job 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
wait $job; rc=$?
left=0
for p in $(cut -d' ' -f2 "$SCRATCH/job/processes.txt"); do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
[ $rc -eq 0 ] && [ $left -eq 0 ]
ok $? "SIGTERM to the job: the front end exits 0 (got $rc), no stage process left ($left)"

# --- restandby: a crash loop is not restarted for ever ---
# serve.sbatch's supervision alone, with a stand-in program: its front end waits for SIGTERM, every
# stage process fails at once. With RESTART_MAX=2 each host slot is started again once, then not.
fake="$SCRATCH/fake-mindpipe"
printf '#!/bin/sh\ncase $1 in\nserve) trap "exit 0" TERM; while :; do sleep 0.1; done ;;\n*) exit 3 ;;\nesac\n' > "$fake"
chmod +x "$fake"
MINDPIPE="$fake" STAGES=2 STANDBY=1 PORT=$port RESTART_MAX=2 bash "$sbatch" "$deck" "$CK" "$SCRATCH/loop" > "$SCRATCH/loop.log" 2>&1 &
job2=$!; pids="$pids $job2"
i=0; while [ "$(grep -c 'not restarted' "$SCRATCH/loop/processes.txt" 2>/dev/null)" != 4 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.5 # no further start may follow
[ "$(grep -c ' restart 1 of stage [01] host slot [01] (status 3 after' "$SCRATCH/loop/processes.txt")" -eq 4 ] &&
    [ "$(grep -c 'not restarted: ended 2 times in a row, the last with status 3' "$SCRATCH/loop/processes.txt")" -eq 4 ] &&
    [ "$(wc -l < "$SCRATCH/loop/processes.txt")" -eq 12 ] &&
    [ "$(grep -c 'ended (status 3) 2 times in a row within 60 s of starting: not starting it again' "$SCRATCH/loop.log")" -eq 4 ]
ok $? "a crash loop: each of the 4 host slots started again once, then not, the log naming it ($(grep -m1 'not starting it again' "$SCRATCH/loop.log" | cut -c1-150))"
kill -TERM $job2
wait $job2
ok $? "the crash-looping job stops on SIGTERM, exit 0"
# --- end of restandby ---
done_testing
