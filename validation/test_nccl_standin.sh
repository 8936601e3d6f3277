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

# fault NAME RANKS PATTERN LABEL: the run ends non-zero, within 60 s, with PATTERN in its output,
# from the stand-in's own message ("nccl-standin: rank R (world rank W), communicator K (N ranks),
# call #C: ...")
fault() {
    f_name=$1; f_n=$2; f_pat=$3; f_label=$4
    t0=$(date +%s)
    NCCL_STANDIN_GRACE=0 NCCL_STANDIN_TIMEOUT=3 timeout 60 "$MPIEXEC" -n "$f_n" "$T" "$f_name" > "$SCRATCH/$f_name.log" 2>&1; rc=$?
    secs=$(( $(date +%s) - t0 ))
    line=$(grep -m 1 -- "$f_pat" "$SCRATCH/$f_name.log")
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$line" ] &&
        echo "$line" | grep -q '^nccl-standin: rank [0-9]* (world rank [0-9]*), communicator [0-9a-f]* ([0-9]* ranks), call #[0-9]*: '
    ok $? "$f_label: refused in ${secs} s (exit $rc), naming rank, communicator and call"
    if [ -n "$line" ]; then echo "# $line" | cut -c 1-400; else sed 's/^/# /' "$SCRATCH/$f_name.log" | head -n 8; fi
}

fault kind 3 "collectives do not match: this rank's #2 ncclAllReduce(count=8, float32, sum) meets rank 2's #2 ncclAllGather(count=8, float32)" \
    "another collective on one rank (allgather for allreduce)"
fault count 3 "collectives do not match: .*ncclAllReduce(count=8, float32, sum) meets rank 2's #1 ncclAllReduce(count=9, float32, sum)" \
    "another count"
fault dtype 2 "collectives do not match: .*float32, sum) meets rank 1's #1 ncclAllReduce(count=8, bfloat16, sum)" "another datatype"
fault op 2 "collectives do not match: .*float32, sum) meets rank 1's #1 ncclAllReduce(count=8, float32, max)" "another reduction"
fault root 3 "collectives do not match: .*ncclBroadcast(count=8, float32, root 0) meets rank 2's #1 ncclBroadcast(count=8, float32, root 1)" \
    "another broadcast root"
fault p2p_count 2 "point-to-point calls do not match: this rank's #1 ncclSend(count=10, float32, to rank 1) .* meets rank 1's #1 ncclRecv(count=12, float32, from rank 0)" \
    "a send of 10 meets a receive of 12"
fault p2p_both_send 2 "point-to-point calls do not match: .*ncclSend.* meets rank [01]'s #1 ncclSend" "a send meets a send"
fault group 2 "point-to-point calls do not match: .*call 1 of a group of 2" \
    "a group (send + receive) meets a lone receive"
fault streams 3 "handed off on stream .* while call #1 of this communicator is in flight on stream" \
    "one communicator used from two streams at once"
fault order 3 "two communicators in flight in different orders" \
    "two communicators in flight, started in different orders on two ranks"
fault missing 3 "waited more than NCCL_STANDIN_TIMEOUT = 3 s for the peers' matching calls; no matching call from rank(s) 2;" \
    "a call one rank never makes: the deadline names the missing rank and the last call seen from each"
done_testing
