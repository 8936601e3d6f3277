#!/bin/sh
# The NCCL stand-in's core (validation/nccl_standin/standin.h) under MPI with host buffers, no CUDA:
# correct sequences of every call kind at 1-4 ranks, every result exact; then each strictness rule
# with one planted fault, which must end the run non-zero within its deadline with a message naming
# the rank, the communicator, the call number and both sides' calls (never a hang).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_scratch_init
T=$MP_BUILDDIR/validation/nccl_standin/standin_test
MPIEXEC=${MPIEXEC:-mpiexec}
[ -x "$T" ] || { echo "not ok 1 - $T was not built"; echo "1..1"; exit 1; }

for n in 1 2 3 4; do
    timeout 120 "$MPIEXEC" -n $n "$T" ok > "$SCRATCH/ok$n.log" 2>&1; rc=$?
    passed=$(grep -c '^ok ' "$SCRATCH/ok$n.log"); failed=$(grep -c '^not ok' "$SCRATCH/ok$n.log")
    [ $rc -eq 0 ] && [ "$passed" -eq 13 ] && [ "$failed" -eq 0 ] && grep -q '^1\.\.13$' "$SCRATCH/ok$n.log"
    ok $? "$n rank(s): allreduce (float32 sum, max, int32 in place, bfloat16), reduce_scatter, allgather, broadcast, reduce, a grouped ring, pipeline boundaries on two streams, two communicators at once: $passed/13 exact (exit $rc)"
    [ $rc -eq 0 ] || sed 's/^/# /' "$SCRATCH/ok$n.log" | tail -n 15
done

# fault NAME RANKS LABEL TEXT...: the run ends non-zero, within 60 s, and the first of the stand-in's
# messages in its report file ("nccl-standin: rank R (world rank W), communicator K (N ranks), call #C: ...") holds every
# TEXT. Whichever rank sees the fault first reports it (the other's view may not print before the
# abort), so TEXT is what both views hold: both sides' calls, in either order.
fault() {
    f_name=$1; f_n=$2; f_label=$3; shift 3
    t0=$(date +%s)
    # the report file, not the launcher's output: Hydra kills every rank at the first abort and may
    # drop what another had written to stderr (an empty log once in CI)
    for f_try in 1 2; do
        rm -f "$SCRATCH/$f_name.report"
        NCCL_STANDIN_REPORT="$SCRATCH/$f_name.report" NCCL_STANDIN_GRACE=0 NCCL_STANDIN_TIMEOUT=3 \
            timeout 60 "$MPIEXEC" -n "$f_n" "$T" "$f_name" > "$SCRATCH/$f_name.log" 2>&1; rc=$?
        # a run that left neither a report nor a line of output never ran our code (the launcher's
        # failure): tried once more, saying so
        [ -s "$SCRATCH/$f_name.report" ] || [ -s "$SCRATCH/$f_name.log" ] || [ $f_try -eq 2 ] || {
            diag "$f_name: the launcher ended with $rc and no output: run once more"; continue; }
        break
    done
    secs=$(( $(date +%s) - t0 ))
    line=$(grep -m 1 '^nccl-standin: rank [0-9]* (world rank [0-9]*), communicator [0-9a-f]* ([0-9]* ranks), call #[0-9]*: ' "$SCRATCH/$f_name.report" 2>/dev/null)
    f_ok=0
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$line" ] || f_ok=1
    for want in "$@"; do echo "$line" | grep -qF -- "$want" || { f_ok=1; diag "missing: $want"; }; done
    ok $f_ok "$f_label: refused in ${secs} s (exit $rc), naming rank, communicator, call and both sides"
    if [ -n "$line" ]; then echo "# $line" | cut -c 1-400; else sed 's/^/# /' "$SCRATCH/$f_name.log" | head -n 8; fi
}

fault kind 3 "another collective on one rank (allgather for allreduce)" "collectives do not match" \
    "#2 ncclAllReduce(count=8, float32, sum)" "#2 ncclAllGather(count=8, float32)"
fault count 3 "another count" "collectives do not match" "ncclAllReduce(count=8, float32, sum)" "ncclAllReduce(count=9, float32, sum)"
fault dtype 2 "another datatype" "collectives do not match" "ncclAllReduce(count=8, float32, sum)" "ncclAllReduce(count=8, bfloat16, sum)"
fault op 2 "another reduction" "collectives do not match" "ncclAllReduce(count=8, float32, sum)" "ncclAllReduce(count=8, float32, max)"
fault root 3 "another broadcast root" "collectives do not match" "ncclBroadcast(count=8, float32, root 0)" \
    "ncclBroadcast(count=8, float32, root 1)"
fault p2p_count 2 "a send of 10 meets a receive of 12" "point-to-point calls do not match" \
    "#1 ncclSend(count=10, float32, to rank 1)" "#1 ncclRecv(count=12, float32, from rank 0)"
fault p2p_both_send 2 "a send meets a send" "point-to-point calls do not match" "#1 ncclSend(count=10, float32, to rank 1)" \
    "#1 ncclSend(count=10, float32, to rank 0)"
fault group 2 "a group (send + receive) meets a lone receive" "point-to-point calls do not match" \
    "ncclSend(count=10, float32, to rank 1, call 1 of a group of 2)" "ncclRecv(count=10, float32, from rank 0)"
fault streams 3 "one communicator used from two streams at once" "ncclAllReduce handed off on stream" \
    "while call #1 of this communicator is in flight on stream"
fault order 3 "two communicators in flight, started in different orders on two ranks" \
    "two communicators in flight in different orders" "was in flight on this rank when it started #1 ncclAllReduce"
fault missing 3 "a call one rank never makes: the deadline names the missing rank and the last call seen from each" \
    "#2 ncclAllReduce(count=8, float32, sum) waited more than NCCL_STANDIN_TIMEOUT = 3 s for the peers' matching calls" \
    "no matching call from rank(s) 2;" "rank 2's last call seen: #1 ncclAllReduce(count=8, float32, sum)"
# the report is never written through a planted link: the link's target stays as it was, and the
# fault still ends the run
echo "precious" > "$SCRATCH/target"
ln -s "$SCRATCH/target" "$SCRATCH/link.report"
NCCL_STANDIN_REPORT="$SCRATCH/link.report" NCCL_STANDIN_GRACE=0 timeout 60 "$MPIEXEC" -n 2 "$T" count \
    > "$SCRATCH/link.log" 2>&1; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(cat "$SCRATCH/target")" = precious ] && [ -L "$SCRATCH/link.report" ]
ok $? "NCCL_STANDIN_REPORT naming a planted link: not written through (target intact), the fault still refused (exit $rc)"
done_testing
