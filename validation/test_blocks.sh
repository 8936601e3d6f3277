#!/bin/sh
# [model] blocks (ARCHITECTURE.md §3): a block shape per layer, h{heads}m{mlp_ratio} or skip, as an
# exported subnet has. Pipelines (1f1b, interleaved) give bitwise the one-rank run, tensor and data
# parallelism within the layout tolerance, memory policies bitwise; a uniform list is the plain
# model bitwise; checkpoints carry the shapes, resume bitwise and refuse another deck's shapes
# naming model.blocks; bad lists are refused before anything runs; `mindpipe eval` of a checkpoint
# gives the val_loss its run logged, on any layout. (The math against PyTorch: test_torch_ref.sh.)
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
L4="--set model.layers=4 --set train.threads=1"
BLK="--set model.blocks=h4m4,h2m1,skip,h1m2"
TPB="--set model.blocks=h4m4,h2m1,skip,h2m2"

# shellcheck disable=SC2086
run 1 ref $L4 $BLK; ok $? "blocks h4m4,h2m1,skip,h1m2 on one rank"
layouts_cmp --bitwise ref "$L4 $BLK" "2 pp2 --set parallel.pp=2" \
    "4 pp4 --set parallel.pp=4" \
    "2 il2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2" \
    "1 rc --set memory.policy=recompute" \
    "2 mix --set parallel.pp=2 --set memory.layers=o,r,s,k"
# shellcheck disable=SC2086
run 2 dp2 $L4 $BLK --set parallel.dp=2; ok $? "dp=2"
compare "dp=2 within the layout tolerance" "$SCRATCH/ref" "$SCRATCH/dp2"
# shellcheck disable=SC2086
run 1 tref $L4 $TPB; ok $? "blocks h4m4,h2m1,skip,h2m2 on one rank"
# shellcheck disable=SC2086
run 4 tp2 $L4 $TPB --set parallel.tp=2 --set parallel.pp=2; ok $? "tp=2 × pp=2"
compare "tp=2 × pp=2 within the layout tolerance" "$SCRATCH/tref" "$SCRATCH/tp2"

# A uniform list is the plain model, bitwise.
# shellcheck disable=SC2086
run 1 plain $L4; ok $? "the plain model"
# shellcheck disable=SC2086
run 1 uni $L4 --set model.blocks=h4m4,h4m4,h4m4,h4m4; ok $? "blocks h4m4 × 4"
compare "h4m4 × 4 = the plain model" "$SCRATCH/plain" "$SCRATCH/uni" --bitwise

# Checkpoints: the shapes, inspect, resume, and refusal of another deck's shapes.
"$MINDPIPE" inspect "$SCRATCH/ref/ckpt/step_00000020.h5" > "$SCRATCH/inspect.out" 2>&1 &&
    grep -q "blocks=h4m4,h2m1,skip,h1m2" "$SCRATCH/inspect.out" &&
    grep -q "/model/h.1.attn.qkv.w (48, 32)" "$SCRATCH/inspect.out" &&
    grep -q "/model/h.1.mlp.fc.w (32, 32)" "$SCRATCH/inspect.out" && ! grep -q "/model/h.2\." "$SCRATCH/inspect.out"
ok $? "inspect: the shapes, h.1's 2 heads (qkv 3·2·8 rows) and 1× MLP, no tensor for the skip block"
mkdir -p "$SCRATCH/res/ckpt" && cp "$SCRATCH/ref/ckpt/step_00000010.h5" "$SCRATCH/res/ckpt/"
# shellcheck disable=SC2086
run 2 res $L4 $BLK --set parallel.pp=2 --resume auto; ok $? "step 10 resumed at pp=2"
resumed_from "resumed at pp=2" res 10
compare "resumed = one rank" "$SCRATCH/ref" "$SCRATCH/res" --bitwise --step 20
refused "another deck's shapes" "model.blocks='h4m4,h2m1,skip,h1m2', the deck says 'h4m4,h2m1,h1m2,skip'" 1 $L4 \
    --set model.blocks=h4m4,h2m1,h1m2,skip --resume "$SCRATCH/ref/ckpt/step_00000020.h5"
refused "the plain deck on a blocks checkpoint" "the deck says ''" 1 $L4 --resume "$SCRATCH/ref/ckpt/step_00000020.h5"

# mindpipe eval: a checkpoint's val_loss on any layout is the one its run logged at that step.
ev() {  # ev NAME RANKS CKPT ARGS...: "val_loss" of the checkpoint into $SCRATCH/NAME.eval
    name=$1; n=$2; ck=$3; shift 3
    $MPIEXEC -n "$n" "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" --ckpt "$ck" "$@" \
        > "$SCRATCH/$name.eval" 2>&1
}
logged() { "$TORCH_PYTHON" -c "import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1]['val_loss']))" "$1"; }
same() {  # same EVAL_OUTPUT VALUE: eval printed exactly VALUE
    "$TORCH_PYTHON" -c "import sys; sys.exit(float(sys.argv[1]) != float(sys.argv[2]))" \
        "$(sed -n 's/^val_loss \([^ ]*\) .*/\1/p' "$1")" "$2"
}
want=$(logged "$SCRATCH/ref/metrics.jsonl")
# shellcheck disable=SC2086
ev e1 1 "$SCRATCH/ref/ckpt/step_00000020.h5" $L4 $BLK && same "$SCRATCH/e1.eval" "$want"
ok $? "eval of step 20 on one rank = the run's logged val_loss $want"
# shellcheck disable=SC2086
ev e2 2 "$SCRATCH/ref/ckpt/step_00000020.h5" $L4 $BLK --set parallel.pp=2 && same "$SCRATCH/e2.eval" "$want"
ok $? "eval at pp=2 = the same bits"
# shellcheck disable=SC2086
ev e3 2 "$SCRATCH/plain/ckpt/step_00000020.h5" $L4 --set parallel.tp=2 &&
    "$TORCH_PYTHON" -c "import sys; a=float(sys.argv[1]); b=float(sys.argv[2]); sys.exit(abs(a-b) > 1e-5*abs(b))" \
        "$(sed -n 's/^val_loss \([^ ]*\) .*/\1/p' "$SCRATCH/e3.eval")" "$(logged "$SCRATCH/plain/metrics.jsonl")"
ok $? "eval of the plain model at tp=2 within 1e-5 of its logged val_loss"
# shellcheck disable=SC2086
ev e4 1 "$SCRATCH/absent.h5" $L4; [ $? -ne 0 ] && grep -q "absent.h5" "$SCRATCH/e4.eval"
ok $? "eval of a missing checkpoint fails naming it"
# shellcheck disable=SC2086
ev e5 1 "$SCRATCH/ref/ckpt/step_00000020.h5" $L4; [ $? -ne 0 ] && grep -q "model.blocks" "$SCRATCH/e5.eval"
ok $? "eval of a blocks checkpoint under the plain deck is refused naming model.blocks"

refused "model.blocks of the wrong length" "has 3 entries, but model.layers=4" 1 $L4 --set model.blocks=h4m4,skip,h1m1
refused "a shape that is not h{H}m{R} or skip" "model.blocks" 1 $L4 --set model.blocks=h4m4,h2,skip,h1m1
refused "heads not a multiple of parallel.tp" "block 3 (h1m2) has 1 heads, not a multiple of parallel.tp=2" 2 $L4 $BLK \
    --set parallel.tp=2
done_testing
