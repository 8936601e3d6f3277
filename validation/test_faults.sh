#!/bin/sh
# The checkpoint fault matrix (issue 15, ARCHITECTURE.md §7): a write error on one rank (its files
# may not grow past a limit: RLIMIT_FSIZE turns its writes into EFBIG, as a full disk turns them into
# ENOSPC) and a rank stopped (SIGSTOP) midway through a checkpoint write, at dp2, pp2 and dp2×pp2,
# with collective and independent MPI-IO (four ranks: independent): each ends within its deadline with a non-zero exit and a
# message naming the rank and the phase, the newest checkpoint intact, and --resume auto then
# continues bitwise to the uninterrupted run. Also: a stop signal that cannot reach a step's end
# within train.stop_grace exits 75 promptly with the checkpoints as they were.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
C="--set model.layers=4 --set train.threads=1 --set train.micro_batch=1 --set checkpoint.every=5 --set checkpoint.keep=0"
C="$C --set checkpoint.timeout=15 --set parallel.timeout=15"
# The write-error runs: model.dim = 128 makes a checkpoint (about 10 MB) larger than the size limit,
# itself above the 4.3 MB files of UCX's shared memory; and UCX is kept off POSIX shared memory files
# (which RLIMIT_FSIZE also limits) for every rank of those runs.
B="$C --set model.dim=128 --set checkpoint.timeout=60 --set parallel.timeout=60"
UCX_TLS=^posix
export UCX_TLS

# seconds since the epoch (the deadline checks)
now() { date +%s; }
# a checkpoint verifies (inspect reads every dataset and the file checksum)
verifies() { "$MINDPIPE" inspect "$1" > /dev/null 2>&1; }

# limited N OUT LIMIT_KB [--set ...]: like run, with rank 0's files limited to LIMIT_KB KiB (and
# SIGXFSZ ignored, so a write past it fails with EFBIG instead of killing the rank)
limited() {
    n=$1; out=$2; kb=$3; shift 3
    # shellcheck disable=SC2016
    $MPIEXEC -n 1 sh -c 'trap "" XFSZ; ulimit -f "$0"; exec "$@"' "$kb" \
        "$MINDPIPE" train -c "$layout_deck" --set data.path="$data" --set train.log_every=1 --quiet \
        --out "$SCRATCH/$out" "$@" : \
        -n $((n - 1)) "$MINDPIPE" train -c "$layout_deck" --set data.path="$data" --set train.log_every=1 --quiet \
        --out "$SCRATCH/$out" "$@" > "$SCRATCH/$out.log" 2>&1
}

for layout in "2 dp2 --set parallel.dp=2" "2 pp2 --set parallel.pp=2" "4 dp2pp2 --set parallel.dp=2 --set parallel.pp=2"; do
    # shellcheck disable=SC2086
    set -- $layout
    n=$1; name=$2; shift 2
    lay="$*"
    # shellcheck disable=SC2086
    run "$n" "ref_$name" $C $lay; ok $? "$name: 20 steps uninterrupted (the reference)"
    # shellcheck disable=SC2086
    run "$n" "refB_$name" $B $lay; ok $? "$name, model.dim=128: 20 steps uninterrupted (the reference)"
    size=$(wc -c < "$SCRATCH/refB_$name/ckpt/step_00000020.h5")
    # both MPI-IO modes on two ranks; on four (two cores) only the one auto picks there (independent:
    # a collective write takes over 10 s there, checkpoint.timeout would have to allow for it)
    trs="collective independent"
    [ "$n" -gt 2 ] && trs=independent
    for tr in $trs; do
        t="${name}_$tr"
        # ---- a write error on rank 0: the first 10 steps, then a resume whose step-15 write fails ----
        # shellcheck disable=SC2086
        run "$n" "full_$t" $B $lay --set checkpoint.transfer=$tr --set debug.fail_at=1:11
        [ -e "$SCRATCH/full_$t/ckpt/step_00000010.h5" ]; ok $? "$t: 10 steps and their checkpoint (then killed)"
        cp "$SCRATCH/full_$t/ckpt/step_00000010.h5" "$SCRATCH/full_$t.keep"
        t0=$(now)
        # shellcheck disable=SC2086
        limited "$n" "full_$t" $((size * 3 / 4 / 1024)) $B $lay --set checkpoint.transfer=$tr --resume auto; rc=$?
        dt=$(($(now) - t0))
        [ $rc -ne 0 ] && [ $dt -lt 40 ]; ok $? "$t: rank 0's write fails (EFBIG): the job ends with exit $rc in $dt s"
        grep -q "File too large" "$SCRATCH/full_$t.log" && grep -q "aborting the job" "$SCRATCH/full_$t.log"
        ok $? "$t: the message names the write error and the abort"
        grep -E "fatal|error" "$SCRATCH/full_$t.log" | head -n 2 | cut -c1-300 | sed 's/^/# /'
        [ ! -e "$SCRATCH/full_$t/ckpt/step_00000015.h5" ] && cmp -s "$SCRATCH/full_$t.keep" "$SCRATCH/full_$t/ckpt/step_00000010.h5" \
            && verifies "$SCRATCH/full_$t/ckpt/step_00000010.h5"
        ok $? "$t: no step-15 checkpoint; step 10's is intact (the same bytes, verifies)"
        b=$(resumed_count "full_$t" 10)
        # shellcheck disable=SC2086
        run "$n" "full_$t" $B $lay --set checkpoint.transfer=$tr --resume auto; ok $? "$t: --resume auto with room again"
        a=$(resumed_count "full_$t" 10) # (a fresh start would be bitwise at step 20 too)
        [ "$a" -gt "$b" ]; ok $? "$t: that run resumed from step_00000010.h5 at step 10 (log.txt: $b such lines before it, $a after)"
        compare "$t: write error + resume = uninterrupted" "$SCRATCH/refB_$name" "$SCRATCH/full_$t" --bitwise --step 20

        # ---- a rank stopped midway through the step-10 write: the others abort at the deadline ----
        last=$((n - 1))
        t0=$(now)
        # shellcheck disable=SC2086
        run "$n" "stall_$t" $C $lay --set checkpoint.transfer=$tr --set checkpoint.timeout=10 --set parallel.timeout=10 \
            --set debug.fail_at=$last:10:stall; rc=$?
        dt=$(($(now) - t0))
        [ $rc -ne 0 ] && [ $dt -lt 50 ]; ok $? "$t: rank $last stopped in the step-10 write: the job ends with exit $rc in $dt s"
        grep -q "rank [0-9]* (dp.*): writing the checkpoint .*step_00000010.h5 did not end within checkpoint.timeout = 10 s\|waited more than parallel.timeout = 10 s for a checkpoint all-reduce" \
            "$SCRATCH/stall_$t.log"
        ok $? "$t: a peer's message names itself, the phase and the deadline"
        grep "fatal" "$SCRATCH/stall_$t.log" | head -n 1 | cut -c1-300 | sed 's/^/# /'
        [ ! -e "$SCRATCH/stall_$t/ckpt/step_00000010.h5" ] && verifies "$SCRATCH/stall_$t/ckpt/step_00000005.h5"
        ok $? "$t: no step-10 checkpoint; step 5's verifies"
        # the stopped rank's lock (on rank 0 only) or temporaries must not stand in the way
        # shellcheck disable=SC2086
        run "$n" "stall_$t" $C $lay --set checkpoint.transfer=$tr --resume auto; ok $? "$t: --resume auto after the stall"
        grep -q "resumed from .*step_00000005.h5" "$SCRATCH/stall_$t/log.txt"; ok $? "$t: resumed from step 5"
        compare "$t: stall + resume = uninterrupted" "$SCRATCH/ref_$name" "$SCRATCH/stall_$t" --bitwise --step 20
    done
done

# ---- a stop that cannot reach the step's end: train.stop_grace ----
# Rank 1 stops answering in step 4 (SIGSTOP), so rank 0 can neither finish the step nor agree to
# stop; SIGUSR1 to rank 0 must end it within the grace with status 75, the checkpoints untouched.
# Each rank's own exit status is recorded by a shell around it: mpiexec's is Hydra's, and Hydra
# (MPICH 4.0.2, pmip.c) pre-sets 0 for the stopped rank it then SIGKILLs but overwrites that with
# the kill's status when its event loop happens to reap the rank before both its output pipes close,
# so mpiexec returns 75 or 9 by timing (a CI on 2026-12-06 got 9). jobs/ reads RUN/exit_status.
# shellcheck disable=SC2086,SC2016
$MPIEXEC -n 2 sh -c '"$@"; s=$?; echo "$s" > "$0.$PMI_RANK"; exit "$s"' "$SCRATCH/grace.status" \
    "$MINDPIPE" train -c "$layout_deck" --set data.path="$data" --quiet --out "$SCRATCH/grace" $C \
    --set parallel.pp=2 --set parallel.timeout=600 --set checkpoint.every=2 --set train.stop_grace=3 \
    --set debug.fail_at=1:4:hang > "$SCRATCH/grace.log" 2>&1 &
mpid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "stops answering" "$SCRATCH/grace.log"; do sleep 0.1; i=$((i + 1)); done
cp "$SCRATCH/grace/ckpt/step_00000002.h5" "$SCRATCH/grace.keep" 2>/dev/null
r0=$(pgrep -f "train -c $layout_deck --set data.path=$data --quiet --out $SCRATCH/grace" | while read -r p; do
         [ "$(ps -o comm= -p "$p")" = mindpipe ] && grep -q "^State:.*S\|^State:.*R" "/proc/$p/status" && echo "$p"; done | head -n 1)
t0=$(now)
kill -USR1 "$r0"
wait $mpid; rc=$?
dt=$(($(now) - t0))
grep "stop_grace" "$SCRATCH/grace.log" | head -n 1 | cut -c1-300 | sed 's/^/# /'
st0=$(cat "$SCRATCH/grace.status.0" 2>/dev/null)
[ "$st0" = 75 ] && [ $rc -ne 0 ] && [ $dt -lt 20 ]
ok $? "a stop that cannot reach the step's end: rank 0 exits 75 in $dt s (stop_grace = 3 s; got ${st0:-none}, mpiexec $rc)"
grep -q "did not reach its step's end and write its checkpoint within train.stop_grace = 3 s" "$SCRATCH/grace.log"
ok $? "the message names train.stop_grace"
[ ! -e "$SCRATCH/grace/ckpt/step_00000004.h5" ] && cmp -s "$SCRATCH/grace.keep" "$SCRATCH/grace/ckpt/step_00000002.h5"
ok $? "the newest checkpoint (step 2) is as it was, and no other was written"
pkill -KILL -f "out $SCRATCH/grace" 2>/dev/null
grep -q "^75 stopped: signal 10; no checkpoint" "$SCRATCH/grace/exit_status"; ok $? "RUN/exit_status says so"

# ---- the exit status of a stop: from mpiexec when the ranks are signalled, and in RUN/exit_status ----
# (Hydra's mpiexec, itself signalled, reports 0 for ranks it reaps after its forced cleanup: the
# run's own word is RUN/exit_status; ARCHITECTURE.md §7)
for who in ranks mpiexec; do
    # shellcheck disable=SC2086
    $MPIEXEC -n 2 "$MINDPIPE" train -c "$layout_deck" --set data.path="$data" --quiet --out "$SCRATCH/sig_$who" $C \
        --set parallel.pp=2 --set train.steps=100000 --set checkpoint.every=0 > "$SCRATCH/sig_$who.log" 2>&1 &
    mpid=$!
    i=0
    while [ $i -lt 300 ] && ! grep -q "^- running" "$SCRATCH/sig_$who/exit_status" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    sleep 1
    if [ $who = ranks ]; then
        pkill -USR1 -f "^$MINDPIPE train -c $layout_deck --set data.path=$data --quiet --out $SCRATCH/sig_$who "
    else
        kill -USR1 $mpid
    fi
    wait $mpid; rc=$?
    st=$(cat "$SCRATCH/sig_$who/exit_status" 2>/dev/null)
    diag "SIGUSR1 to the $who: mpiexec returned $rc; exit_status: $st"
    case "$st" in "75 stopped: by signal at step "*) true ;; *) false ;; esac
    ok $? "SIGUSR1 to the $who: RUN/exit_status says 75 stopped, its checkpoint written"
    if [ $who = ranks ]; then
        [ $rc -eq 75 ]; ok $? "SIGUSR1 to the ranks: mpiexec returns 75 (got $rc)"
    fi
done

done_testing
