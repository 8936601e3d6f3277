#!/bin/sh
# A wait past parallel.timeout (ARCHITECTURE.md §2, docs/RELIABILITY.md "No endless wait"): the rank
# that waited names the peer it waited for and what it awaited, and RUN/exit_status says
# "1 aborted: ..." as the checkpoint watchdog's abort does (not "- running"). A rank is stopped
# (SIGSTOP, debug.fail_at=RANK:STEP:hang) in a collective (dp), a point-to-point receive (pp) and a
# collective of four ranks.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
H="--set parallel.timeout=3 --set train.threads=1"

# hang NAME RANKS PATTERN_LOG PATTERN_STATUS LABEL [--set ...]
hang() {
    h_name=$1; h_n=$2; h_log=$3; h_status=$4; h_label=$5; shift 5
    # shellcheck disable=SC2086
    run "$h_n" "$h_name" $H "$@"; h_rc=$?
    [ $h_rc -ne 0 ] && grep -q -- "$h_log" "$SCRATCH/$h_name.log"
    ok $? "$h_label: the message names the peer and what was awaited (exit $h_rc)"
    grep "parallel.timeout" "$SCRATCH/$h_name.log" | head -n 1 | sed 's/^/# /'
    grep -q -- "^1 aborted: $h_status" "$SCRATCH/$h_name/exit_status"
    ok $? "$h_label: RUN/exit_status says the abort, naming the rank, the peer and what was awaited"
    sed 's/^/# exit_status: /' "$SCRATCH/$h_name/exit_status"
}

hang dp 2 "for the data-parallel gradient all-reduce: its peer rank 1 did not take part" \
    "rank 0 (dp 0, tp 0, pp 0, sp 0): waited more than parallel.timeout = 3 s for the data-parallel gradient all-reduce: its peer rank 1 did not take part" \
    "dp=2, rank 1 stopped in a collective" --set parallel.dp=2 --set debug.fail_at=1:4:hang
hang dpz 2 "for the ZeRO-1 gradient reduce-scatter: its peer rank 1 did not take part" \
    "rank 0 (dp 0, tp 0, pp 0, sp 0): waited more than parallel.timeout = 3 s for the ZeRO-1 gradient reduce-scatter: its peer rank 1 did not take part" \
    "dp=2 ZeRO-1, rank 1 stopped: the reduce-scatter buckets" --set parallel.dp=2 --set parallel.zero=1 --set debug.fail_at=1:4:hang
hang pp 2 "for receive .* from rank 1 (stage 1)" "rank 0 (dp 0, tp 0, pp 0, sp 0): waited more than parallel.timeout = 3 s for receive .* from rank 1 (stage 1)" \
    "pp=2, rank 1 stopped: a receive" --set parallel.pp=2 --set debug.fail_at=1:4:hang
# four ranks: whichever waiting rank writes RUN/exit_status last stands there
hang dp4 4 "one or more of its peers (ranks [0-3], [0-3] and [0-3]) did not take part" \
    "rank [013] (dp [013], .*): waited more than parallel.timeout = 3 s for .*: one or more of its peers (ranks [0-3], [0-3] and [0-3])" \
    "dp=4, rank 2 stopped in a collective" --set parallel.dp=4 --set train.micro_batch=2 --set debug.fail_at=2:4:hang
# A rank that never reaches the run's first agreement (its deck is a FIFO no one writes: it waits in
# the open) after MPI_Init: before the fix its peer waited in that MPI_Allreduce forever, since no deck
# deadline exists yet; MPI_Init's deadline (MINDPIPE_INIT_TIMEOUT) now lasts until the run's watchdog
# is armed, so both end with the message (found by validation/chaos: a second kill just after MPI_Init)
mkfifo "$SCRATCH/deck.fifo"
t0=$(date +%s)
MINDPIPE_INIT_TIMEOUT=4 timeout 60 $MPIEXEC -n 2 sh -c 'if [ "${PMI_RANK:-0}" = 1 ]; then d=$1; else d=$2; fi; shift 2;
    exec "$@" -c "$d"' x "$SCRATCH/deck.fifo" "$MP_SRCDIR/validation/decks/train.ini" "$MINDPIPE" train \
    --set data.path="$data" --quiet --out "$SCRATCH/fifo" > "$SCRATCH/fifo.log" 2>&1
rc=$?
el=$(( $(date +%s) - t0 ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $el -lt 40 ] &&
    grep -q "the run's first agreements after it (the deck, the grid), did not complete within MINDPIPE_INIT_TIMEOUT" \
        "$SCRATCH/fifo.log"
ok $? "a rank stuck before the run's first agreement: the job ends at MINDPIPE_INIT_TIMEOUT naming it (exit $rc, ${el} s)"
# A rank lost as the start-up ends (debug.fail_at = 1:0), its peer in the layout table's gather, a
# blocking MPI_Gather outside every watchdog phase before the fix (the campaign found it: a second
# kill during a resume left rank 0 there for good); launched as the jobs launch a run that must
# outlive a dead rank (-disable-auto-cleanup, each rank under a shell that ignores Hydra's signals),
# the survivor must end at parallel.timeout naming rank 1 and what it waited for
t0=$(date +%s)
timeout 60 $MPIEXEC -disable-auto-cleanup -n 2 sh -c 'trap : USR1 TERM; "$@"' rank \
    "$MINDPIPE" train -c "$MP_SRCDIR/validation/decks/train.ini" \
    --set data.path="$data" --set parallel.pp=2 --set parallel.timeout=3 --set parallel.wait=yield \
    --set debug.fail_at=1:0 --quiet --out "$SCRATCH/startend" > "$SCRATCH/startend.log" 2>&1
rc=$?
el=$(( $(date +%s) - t0 ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $el -lt 40 ] &&
    grep -q "rank 1 kills itself as its start-up ends" "$SCRATCH/startend.log" &&
    grep -q "waited more than parallel.timeout = 3 s for the layout table's gather: its peer rank 1 did not take part" \
        "$SCRATCH/startend.log"
ok $? "a rank lost as the start-up ends: its peer ends at parallel.timeout naming it and the layout table's gather (exit $rc, ${el} s)"
done_testing
