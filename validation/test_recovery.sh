#!/bin/sh
# Recovery (ARCHITECTURE.md §7, issue #6): collective parallel-HDF5 checkpoints resume exactly on the same
# layout (1f1b and 2bw, pp = 2) and within the layout-invariance tolerance on others; a rank killed
# at a step, or midway through a checkpoint write, loses nothing that --resume auto cannot redo
# bitwise; SIGUSR1 checkpoints and exits 75; corrupt, truncated and foreign checkpoints are refused
# and --resume auto falls back to the previous good one. Up to 8 ranks on 2 cores.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py, h5py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
L4="--set model.layers=4 --set train.threads=1 --set train.micro_batch=2 --set checkpoint.every=5 --set checkpoint.keep=0"

# ---- same layout: 20 straight = 10 + resume + 10, bitwise (the whole checkpoint files) ----
# The interrupted half runs the same 20-step deck (its learning-rate schedule spans 20 steps) and
# is killed as step 10 begins, after the step-10 checkpoint.
for sched in 1f1b 2bw; do
    # shellcheck disable=SC2086
    run 2 s_$sched $L4 --set parallel.pp=2 --set parallel.schedule=$sched; ok $? "$sched pp=2: 20 steps straight"
    # shellcheck disable=SC2086
    run 2 h_$sched $L4 --set parallel.pp=2 --set parallel.schedule=$sched --set debug.fail_at=1:11
    [ $? -ne 0 ] && [ -e "$SCRATCH/h_$sched/ckpt/step_00000010.h5" ]; ok $? "$sched pp=2: the first 10 steps, then killed"
    # shellcheck disable=SC2086
    run 2 h_$sched $L4 --set parallel.pp=2 --set parallel.schedule=$sched --resume auto; ok $? "$sched pp=2: resumed to 20"
    grep -q "resumed from .*step_00000010.h5 at step 10" "$SCRATCH/h_$sched/log.txt"; ok $? "$sched: resumed at step 10"
    compare "$sched pp=2: 10 + resume + 10 = 20 straight" "$SCRATCH/s_$sched" "$SCRATCH/h_$sched" --bitwise --step 20
done
"$TORCH_PYTHON" -c "
import h5py,sys
f=h5py.File('$SCRATCH/s_2bw/ckpt/step_00000020.h5','r'); s=f['state'].attrs
sys.exit(0 if 'model_prev' in f and s['weight_versions'] == 2 and s['data_cursor'] == 20*8 and s['schedule'] == b'2bw' else 1)"
ok $? "a 2bw checkpoint holds both weight versions (/model_prev), the data cursor and the schedule"

# ---- other layouts: a dp2×tp2×pp2 checkpoint resumes at pp4×dp2, tp4 and on one rank, and back ----
# shellcheck disable=SC2086
run 1 ref $L4; ok $? "one rank, 20 steps (the reference trajectory)"
# shellcheck disable=SC2086
run 8 big $L4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2 --set debug.fail_at=0:11
[ -e "$SCRATCH/big/ckpt/step_00000010.h5" ]; ok $? "dp2×tp2×pp2: 10 steps, checkpoint at 10 (then stopped)"
for layout in "8 to_pp4dp2 --set parallel.pp=4 --set parallel.dp=2 --set train.micro_batch=1" \
              "4 to_tp4 --set parallel.tp=4" "1 to_one"; do
    # shellcheck disable=SC2086
    set -- $layout
    n=$1; name=$2; shift 2
    mkdir -p "$SCRATCH/$name/ckpt" && cp "$SCRATCH/big/ckpt/step_00000010.h5" "$SCRATCH/$name/ckpt/"
    # shellcheck disable=SC2086
    run "$n" "$name" $L4 --resume auto "$@"; ok $? "$name: resumed the dp2×tp2×pp2 checkpoint on $n rank(s)"
    compare "$name continues the one-rank trajectory" "$SCRATCH/ref" "$SCRATCH/$name" --step 20
done
mkdir -p "$SCRATCH/back/ckpt" && cp "$SCRATCH/to_one/ckpt/step_00000015.h5" "$SCRATCH/back/ckpt/"
# shellcheck disable=SC2086
run 8 back $L4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2 --resume auto
ok $? "and back: the one-rank checkpoint of step 15 resumed at dp2×tp2×pp2"
compare "back at dp2×tp2×pp2: continues the one-rank trajectory" "$SCRATCH/ref" "$SCRATCH/back" --step 20

# ---- faults ----
# a rank killed as step 14 begins in a 4-rank run: resume from step 10, bitwise the uninterrupted run
P4="$L4 --set parallel.pp=2 --set parallel.dp=2 --set train.micro_batch=1"
# shellcheck disable=SC2086
run 4 u4 $P4; ok $? "dp2×pp2: 20 steps uninterrupted"
# shellcheck disable=SC2086
run 4 k4 $P4 --set debug.fail_at=3:14; rc=$?
[ $rc -ne 0 ] && grep -q "rank 3 kills itself as it begins step 14" "$SCRATCH/k4.log"; ok $? "fail_at=3:14: rank 3 dies as step 14 begins (exit $rc)"
# shellcheck disable=SC2086
run 4 k4 $P4 --resume auto; ok $? "--resume auto after the kill"
grep -q "resumed from .*step_00000010.h5" "$SCRATCH/k4/log.txt"; ok $? "resumed from the step-10 checkpoint"
compare "killed + resumed = uninterrupted" "$SCRATCH/u4" "$SCRATCH/k4" --bitwise --step 20

# a rank that stops answering (SIGSTOP): its peer's wait times out with a message naming it
# shellcheck disable=SC2086
run 2 hang $L4 --set parallel.pp=2 --set parallel.timeout=3 --set debug.fail_at=1:4:hang; rc=$?
[ $rc -ne 0 ] && grep -q "parallel.timeout = 3 s for receive .* from rank 1 (stage 1)" "$SCRATCH/hang.log"
ok $? "a hung rank: the wait times out naming rank 1 and what was awaited (exit $rc)"
grep "parallel.timeout" "$SCRATCH/hang.log" | head -n 1 | sed 's/^/# /'

# killed midway through writing the step-15 checkpoint: that file never appears, step 10 loads
# shellcheck disable=SC2086
run 4 w4 $P4 --set debug.fail_at=1:15:write; rc=$?
[ $rc -ne 0 ] && [ ! -e "$SCRATCH/w4/ckpt/step_00000015.h5" ] && [ -e "$SCRATCH/w4/ckpt/step_00000010.h5" ]
ok $? "killed midway through a checkpoint write: no step-15 file, step 10 intact (exit $rc)"
# shellcheck disable=SC2086
run 4 w4 $P4 --resume auto; ok $? "--resume auto after the interrupted write"
compare "interrupted write + resume = uninterrupted" "$SCRATCH/u4" "$SCRATCH/w4" --bitwise --step 20

# SIGUSR1 (Slurm's --signal): checkpoint at the next step, exit 75, resume bitwise
# shellcheck disable=SC2086
$MPIEXEC -n 2 "$MINDPIPE" train -c "$layout_deck" --set data.path="$data" --set train.log_every=1 --quiet \
    --out "$SCRATCH/sig" $L4 --set parallel.pp=2 --set train.steps=100000 --set checkpoint.every=0 \
    > "$SCRATCH/sig.out" 2>&1 &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q '"step":3,' "$SCRATCH/sig/metrics.jsonl" 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
# the ranks, not mpiexec (Hydra forwards the signal but may then exit 0 instead of the ranks' 75)
pkill -USR1 -f "^$MINDPIPE train .*--out $SCRATCH/sig"
wait $pid; rc=$?
[ $rc -eq 75 ] && grep -q "stop requested by signal" "$SCRATCH/sig/log.txt" && ls "$SCRATCH/sig/ckpt/"step_*.h5 > /dev/null 2>&1
ok $? "SIGUSR1: checkpoint at the next step boundary, exit status 75 (got $rc)"

# ---- corrupt files ----
# shellcheck disable=SC2086
run 1 c $L4 --set train.steps=10; ok $? "one rank, 10 steps: checkpoints at 5 and 10"
cp "$SCRATCH/c/ckpt/step_00000010.h5" "$SCRATCH/good10.h5"
"$TORCH_PYTHON" -c "
import h5py,numpy as np
with h5py.File('$SCRATCH/c/ckpt/step_00000010.h5','r') as f: off=f['model/h.1.mlp.fc.w'].id.get_offset()
with open('$SCRATCH/c/ckpt/step_00000010.h5','r+b') as g: g.seek(off+40); b=g.read(1); g.seek(off+40); g.write(bytes([b[0]^0x5a]))"
mkdir -p "$SCRATCH/cr"
cp -r "$SCRATCH/c/ckpt" "$SCRATCH/cr/"
# shellcheck disable=SC2086
run 1 cr $L4 --set train.steps=12 --resume auto; ok $? "--resume auto with a flipped byte in the newest checkpoint"
grep -q "skipping .*step_00000010.h5.*h.1.mlp.fc.w" "$SCRATCH/cr.log" "$SCRATCH/cr/log.txt" 2>/dev/null
ok $? "it says it skipped step 10 and why (the corrupt dataset)"
grep -q "resumed from .*step_00000005.h5 at step 5" "$SCRATCH/cr/log.txt"; ok $? "and fell back to step 5"
refused "--resume of a file with a flipped byte" "checksum mismatch" 1 $L4 --resume "$SCRATCH/c/ckpt/step_00000010.h5"
head -c 20000 "$SCRATCH/good10.h5" > "$SCRATCH/trunc.h5"
refused "--resume of a truncated file" "trunc.h5" 1 $L4 --resume "$SCRATCH/trunc.h5"
refused "another model's checkpoint (6 layers)" "model.layers=4, the deck says 6" 1 --set model.layers=6 \
    --set train.threads=1 --resume "$SCRATCH/good10.h5"
refused "a 1f1b checkpoint resumed by a 2bw run" "no /model_prev" 1 $L4 --set parallel.schedule=2bw \
    --resume "$SCRATCH/good10.h5"
"$MINDPIPE" inspect "$SCRATCH/s_2bw/ckpt/step_00000020.h5" > "$SCRATCH/inspect.out" 2>&1 &&
    grep -q "model_prev/h.3.mlp.proj.w" "$SCRATCH/inspect.out" && grep -q "dp=1 tp=1 pp=2" "$SCRATCH/inspect.out"
ok $? "mindpipe inspect lists the layout and every tensor, /model_prev included"
done_testing
