#!/bin/sh
# Supernet training with data parallelism (ARCHITECTURE.md §4): subnet t's global batch is split over
# the dp replicas and its gradient summed over them on each stage before its candidates step, so
# dp = 2 (causal windows, serial windows, offload in causal windows, a subnet per executor step when
# interleaved) and dp = 2 ×
# pp = 2 give the one-rank trajectory within the layout tolerance; ZeRO-1 with a supernet refused
# naming why.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
SN="--set model.layers=4 --set train.threads=1 --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip --set supernet.window=2"

# shellcheck disable=SC2086
run 1 ref $SN; ok $? "supernet on one rank"
# shellcheck disable=SC2086
run 2 dp2 $SN --set parallel.dp=2; ok $? "dp=2, causal windows"
compare "dp=2 (causal) within the layout tolerance" "$SCRATCH/ref" "$SCRATCH/dp2"
# shellcheck disable=SC2086
run 4 dp2pp2 $SN --set parallel.dp=2 --set parallel.pp=2; ok $? "dp=2 × pp=2, causal windows"
compare "dp=2 × pp=2 (causal) within the layout tolerance" "$SCRATCH/ref" "$SCRATCH/dp2pp2"
# shellcheck disable=SC2086
run 2 dp2s $SN --set parallel.dp=2 --set supernet.schedule=serial; ok $? "dp=2, serial windows"
compare "dp=2 (serial) within the layout tolerance" "$SCRATCH/ref" "$SCRATCH/dp2s"
# the interleaved schedule runs one executor step per subnet (train_step_grads, no window lists):
# the replicas' sum is the supernet update's, not the data-parallel buckets' (they would miss the LM
# head's part of d wte, which a supernet keeps apart)
# shellcheck disable=SC2086
run 4 dp2i $SN --set parallel.dp=2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 \
    --set train.micro_batch=1
ok $? "dp=2 × pp=2 interleaved: a subnet per executor step"
compare "dp=2 × pp=2 interleaved (a subnet per executor step) within the layout tolerance" "$SCRATCH/ref" "$SCRATCH/dp2i"
# shellcheck disable=SC2086
run 2 dp2o $SN --set parallel.dp=2 --set memory.policy=offload; ok $? "dp=2, offload in causal windows"
compare "dp=2, offload within the layout tolerance" "$SCRATCH/ref" "$SCRATCH/dp2o"
grep -q "subnets run causally" "$SCRATCH/dp2/log.txt" &&
    grep -q "one at a time through the window's lists (supernet.schedule=serial)" "$SCRATCH/dp2s/log.txt" &&
    grep -q "one executor step each: the interleaved" "$SCRATCH/dp2i/log.txt" && grep -q "subnets run causally" "$SCRATCH/dp2o/log.txt"
ok $? "dp=2 ran its windows causally (offload too), serially through the lists, and a subnet per executor step when interleaved"

# eval and search of a supernet's checkpoint at dp=2: the subnet's val_loss, the same bits as one rank
val() { sed -n 's/^val_loss \([^ ]*\) .*/\1/p' "$1"; }
ev_rc=""
for n in 1 2; do
    # shellcheck disable=SC2086
    $MPIEXEC -n $n "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" $SN --set parallel.dp=$n \
        --ckpt "$SCRATCH/ref/ckpt/step_00000020.h5" --subnet 0,1,2,1 > "$SCRATCH/ev$n.out" 2>&1
    ev_rc="$ev_rc $?"
done
[ "$ev_rc" = " 0 0" ] && [ -n "$(val "$SCRATCH/ev1.out")" ] && [ "$(val "$SCRATCH/ev1.out")" = "$(val "$SCRATCH/ev2.out")" ]
ok $? "eval --subnet 0,1,2,1 at dp=2 = one rank's, bitwise: $(val "$SCRATCH/ev2.out") (exits$ev_rc)"

# shellcheck disable=SC2086
refused "ZeRO-1" "with ZeRO-1 (parallel.zero=1 over more than one replica: parallel.dp > 1 or parallel.sp > 1): ZeRO-1 shards the AdamW moments" 2 $SN --set parallel.dp=2 \
    --set parallel.zero=1
done_testing
