#!/bin/sh
# Supernet parallelism (parallel.sp > 1, docs/SUPERNET.md "SP replicas"): sp replicas of the pipeline
# run each window's subnets under NASPipe's causal rule, each rank its list of the sp × pp ranks'
# (causal_sp.h): candidates' states (CAND, SYNC) and the shared gradients' running sum (SUM, FINAL)
# travel between replicas. Every layout must give one rank's losses, gradient norms and final weights
# bit for bit: sp = 2 and 4 at pp = 1 and 2, windows of 2 and 4, and sp = 2 × pp = 4; resumes between
# sp and one rank;
# tp = 2 × sp = 2 bitwise equal to tp = 2; NASPipe's rule holds on the timeline
# across the replicas (validation/causal_trace.py); dp inside the replicas bitwise equal to the same
# dp without them; what the replicas do not run is refused.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch # causal_trace.py imports torch_ref.py (its sampler), which imports torch; compare_runs.py h5py
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
SN="--set model.layers=4 --set train.threads=1 --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip"

for w in 2 4; do # a checkpoint ends a window: window 4 writes only the last one's (step 20)
    W="--set supernet.window=$w"; [ $w = 4 ] && W="$W --set checkpoint.every=20"
    # shellcheck disable=SC2086
    run 1 ref$w $SN $W; ok $? "window $w on one rank"
    layouts_cmp --bitwise "ref$w" "$SN $W" "2 sp2w$w --set parallel.sp=2" \
        "4 sp2pp2w$w --set parallel.sp=2 --set parallel.pp=2" \
        "4 sp4w$w --set parallel.sp=4" \
        "8 sp4pp2w$w --set parallel.sp=4 --set parallel.pp=2"
done
# the deepest pipeline the issue's 8 ranks allow: sp=2 × pp=4, one stage per layer
layouts_cmp --bitwise ref2 "$SN --set supernet.window=2" "8 sp2pp4w2 --set parallel.sp=2 --set parallel.pp=4"
# Checkpoints written by replica 0 hold everything: step 10 of sp=2 × pp=2 resumed on one rank, and
# one rank's step 10 resumed at sp=2 × pp=2, both end on one rank's bits.
mkdir -p "$SCRATCH/res1/ckpt" "$SCRATCH/res4/ckpt" && cp "$SCRATCH/sp2pp2w2/ckpt/step_00000010.h5" "$SCRATCH/res1/ckpt/" &&
    cp "$SCRATCH/ref2/ckpt/step_00000010.h5" "$SCRATCH/res4/ckpt/"
# shellcheck disable=SC2086
run 1 res1 $SN --set supernet.window=2 --resume auto; ok $? "sp=2 × pp=2's step 10 resumed on one rank"
resumed_from "sp=2 × pp=2 -> one rank" res1 10
compare "resumed from sp=2 × pp=2 = one rank" "$SCRATCH/ref2" "$SCRATCH/res1" --bitwise --step 20
# shellcheck disable=SC2086
run 4 res4 $SN --set supernet.window=2 --set parallel.sp=2 --set parallel.pp=2 --resume auto
ok $? "one rank's step 10 resumed at sp=2 × pp=2"
resumed_from "one rank -> sp=2 × pp=2" res4 10
compare "resumed at sp=2 × pp=2 = one rank" "$SCRATCH/ref2" "$SCRATCH/res4" --bitwise --step 20

# Tensor parallelism inside each replica: the replicas pair equal shards; bitwise equal to tp = 2 alone.
TPC="--set supernet.candidates=h4m4,h2m2,skip --set supernet.window=2"
# shellcheck disable=SC2086
run 2 tp2 $SN $TPC --set parallel.tp=2; ok $? "tp=2"
# shellcheck disable=SC2086
run 4 tp2sp2 $SN $TPC --set parallel.tp=2 --set parallel.sp=2; ok $? "tp=2 × sp=2"
compare "tp=2 × sp=2 vs tp=2" "$SCRATCH/tp2" "$SCRATCH/tp2sp2" --bitwise

# Data parallelism inside each replica: a replica's dp ranks split each of its subnets' batch and
# sum the subnet's gradients before its candidates step; the replicas pair equal dp ranks. Bitwise
# equal to the same dp (and pp) without replicas, within the layout tolerance of one rank.
# shellcheck disable=SC2086
run 2 dp2 $SN --set supernet.window=2 --set parallel.dp=2; ok $? "dp=2"
# shellcheck disable=SC2086
run 4 dp2sp2 $SN --set supernet.window=2 --set parallel.dp=2 --set parallel.sp=2; ok $? "dp=2 × sp=2"
compare "dp=2 × sp=2 vs dp=2" "$SCRATCH/dp2" "$SCRATCH/dp2sp2" --bitwise
compare "dp=2 × sp=2 vs one rank, within the layout tolerance" "$SCRATCH/ref2" "$SCRATCH/dp2sp2"
# shellcheck disable=SC2086
run 4 dp2pp2 $SN --set supernet.window=2 --set parallel.dp=2 --set parallel.pp=2; ok $? "dp=2 × pp=2"
# shellcheck disable=SC2086
run 8 dp2sp2pp2 $SN --set supernet.window=2 --set parallel.dp=2 --set parallel.sp=2 --set parallel.pp=2
ok $? "dp=2 × sp=2 × pp=2 (8 ranks)"
compare "dp=2 × sp=2 × pp=2 vs dp=2 × pp=2" "$SCRATCH/dp2pp2" "$SCRATCH/dp2sp2pp2" --bitwise
"$TORCH_PYTHON" "$MP_SRCDIR/validation/causal_trace.py" "$SCRATCH/dp2sp2pp2" > "$SCRATCH/tr.out" 2>&1
ok $? "dp2sp2pp2's trace: $(head -n 1 "$SCRATCH/tr.out")"

# NASPipe's rule on the timeline, across the replicas of each stage (one node: one clock); some
# subnets in flight together there
for tr in sp2pp2w4 sp4w4 sp4pp2w2; do
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/causal_trace.py" "$SCRATCH/$tr" > "$SCRATCH/tr.out" 2>&1
    ok $? "$tr's trace: $(head -n 1 "$SCRATCH/tr.out")"
done
grep -q "subnets run causally (several in flight, NASPipe's rule) on 2 supernet replicas" "$SCRATCH/sp2pp2w2/log.txt"
ok $? "the log says the subnets run on 2 supernet replicas"

refused "sp without a supernet" "it needs supernet.enabled=1" 2 --set parallel.sp=2
# shellcheck disable=SC2086
refused "sp with ZeRO-1" "with ZeRO-1 (parallel.zero=1 over more than one replica: parallel.dp > 1 or parallel.sp > 1)" 4 $SN --set parallel.sp=2 --set parallel.dp=2 --set parallel.zero=1
# shellcheck disable=SC2086
refused "sp with ZeRO-1 at dp=1" "with ZeRO-1 (parallel.zero=1 over more than one replica: parallel.dp > 1 or parallel.sp > 1)" 2 $SN \
    --set parallel.sp=2 --set parallel.zero=1
# shellcheck disable=SC2086
refused "sp with supernet.schedule=serial" "supernet.schedule=serial" 2 $SN --set parallel.sp=2 --set supernet.schedule=serial
# shellcheck disable=SC2086
refused "sp with the interleaved schedule" "supernet replicas (parallel.sp > 1) with more than one chunk per stage" 4 $SN --set parallel.sp=2 --set parallel.pp=2 \
    --set parallel.schedule=interleaved --set parallel.virtual_stages=2
done_testing
