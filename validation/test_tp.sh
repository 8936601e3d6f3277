#!/bin/sh
# Tensor parallelism (Megatron split, vocab-parallel embedding and cross-entropy) against one rank
# (ARCHITECTURE.md §4): per-step loss within 1e-5 over 20 steps, final weights within 1e-4, for tp=2, tp=4,
# dp2×tp2 (also with ZeRO-1) and a vocabulary that tp does not divide; the same layout twice
# bitwise; checkpoints resumed across layouts. Up to 4 ranks on 2 cores.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"

run 1 ref; ok $? "one rank, 20 steps (the reference)"
layouts_vs ref "2 tp2 --set parallel.tp=2" "4 tp4 --set parallel.tp=4" \
    "4 dp2tp2 --set parallel.tp=2 --set parallel.dp=2" \
    "4 dp2tp2z --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero=1" \
    "4 tp2dp2 --set parallel.tp=2 --set parallel.dp=2 --set parallel.order=dp-tp-sp-pp"

# A vocabulary tp does not divide: padded inside, the checkpoint holds the real rows.
run 1 v1 --set model.vocab=259; ok $? "vocab 259, one rank"
run 4 v4 --set model.vocab=259 --set parallel.tp=4; ok $? "vocab 259, tp=4 (padded to 260 inside)"
compare "vocab 259 tp4 vs one rank" "$SCRATCH/v1" "$SCRATCH/v4"
"$MINDPIPE" inspect "$SCRATCH/v4/ckpt/step_00000020.h5" > "$SCRATCH/v4_inspect.out" 2>&1 &&
    grep -q "/model/wte (259, 32) checksum ok" "$SCRATCH/v4_inspect.out"
ok $? "the tp=4 checkpoint holds wte at its real shape (259, 32)"

run 2 tp2b --set parallel.tp=2; ok $? "tp2 again"
compare "tp2 twice" "$SCRATCH/tp2" "$SCRATCH/tp2b" --bitwise

# Checkpoints are layout-free: tp=4 -> one rank, one rank -> dp2×tp2 with ZeRO-1.
mkdir -p "$SCRATCH/r1/ckpt" "$SCRATCH/r4/ckpt"
cp "$SCRATCH/tp4/ckpt/step_00000010.h5" "$SCRATCH/r1/ckpt/"
cp "$SCRATCH/ref/ckpt/step_00000010.h5" "$SCRATCH/r4/ckpt/"
run 1 r1 --resume auto; ok $? "a tp=4 checkpoint resumed on one rank"
resumed_from "tp4 -> one rank" r1 10
compare "tp4 -> one rank" "$SCRATCH/ref" "$SCRATCH/r1" --step 20
run 4 r4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero=1 --resume auto
ok $? "a one-rank checkpoint resumed on dp2×tp2 zero=1"
resumed_from "one rank -> dp2tp2 zero=1" r4 10
compare "one rank -> dp2tp2 zero=1" "$SCRATCH/ref" "$SCRATCH/r4" --step 20
grep -q "order dp-tp-sp-pp" "$SCRATCH/tp2dp2/log.txt" && grep -q "^ *1 *1 *0 *0 *0 .*heads 0-1, vocab rows 0-127, samples 4-7" "$SCRATCH/tp2dp2/log.txt" \
    && grep -q "^ *2 *0 *1 *0 *0 .*heads 2-3, vocab rows 128-255, samples 0-3" "$SCRATCH/tp2dp2/log.txt"
ok $? "parallel.order=dp-tp-sp-pp: rank 1 is dp1 tp0, rank 2 is dp0 tp1; the table says what each holds"
run 4 dp2tp2b --set parallel.tp=2 --set parallel.dp=2; ok $? "dp2×tp2 again"
compare "dp2×tp2 twice" "$SCRATCH/dp2tp2" "$SCRATCH/dp2tp2b" --bitwise
done_testing
