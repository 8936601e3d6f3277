#!/bin/sh
# Pipeline parallelism (ARCHITECTURE.md §4, §5): gpipe, 1f1b and interleaved at pp = 2 and 4, and an uneven
# split, are bitwise identical to one rank (same threads per rank); 2bw at pp = 2 and 4 is bitwise
# identical to 2bw on one rank (its update rule is checked against PyTorch in test_torch_ref.sh);
# dp2×tp2×pp2 on 8 ranks is within the layout-invariance tolerance; a pipeline checkpoint resumes
# on one rank; the timeline shows every stage; the stash holds what the schedule table predicts;
# wrong splits are refused. Up to 8 ranks on 2 cores.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
L4="--set model.layers=4 --set train.threads=1"

# shellcheck disable=SC2086
run 1 ref $L4; ok $? "one rank, 4 layers, 1 thread (the reference)"
# shellcheck disable=SC2086
run 1 ref2 $L4 --set train.micro_batch=2; ok $? "one rank, 4 micro-batches of 2"
for layout in "2 gpipe2 ref --set parallel.pp=2 --set parallel.schedule=gpipe" \
              "2 f1b2 ref --set parallel.pp=2 --set parallel.schedule=1f1b" \
              "4 f1b4 ref2 --set parallel.pp=4 --set parallel.schedule=1f1b --set train.micro_batch=2" \
              "4 gpipe4 ref2 --set parallel.pp=4 --set parallel.schedule=gpipe --set train.micro_batch=2" \
              "2 uneven ref --set parallel.pp=2 --set pipeline.layers=3,1" \
              "2 il2 ref --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2" \
              "4 il4 ref2 --set parallel.pp=4 --set parallel.schedule=interleaved --set parallel.virtual_stages=1 --set train.micro_batch=2"; do
    # shellcheck disable=SC2086
    set -- $layout
    n=$1; name=$2; base=$3; shift 3
    # shellcheck disable=SC2086
    run "$n" "$name" $L4 "$@"; ok $? "$name: $n stages, 20 steps"
    compare "$name = one rank" "$SCRATCH/$base" "$SCRATCH/$name" --bitwise
done

# Interleaved with 8 layers: 4 stages × 2 chunks, and 2 × 2 uneven chunks (3,1,2,2 layers).
L8="--set model.layers=8 --set train.threads=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
# shellcheck disable=SC2086
run 1 ref8 --set model.layers=8 --set train.threads=1 --set train.micro_batch=2; ok $? "one rank, 8 layers"
# shellcheck disable=SC2086
run 4 il8 $L8 --set parallel.pp=4 --set train.micro_batch=2; ok $? "interleaved pp=4 v=2: 4 ranks, 20 steps"
compare "interleaved pp=4 v=2 = one rank" "$SCRATCH/ref8" "$SCRATCH/il8" --bitwise
# shellcheck disable=SC2086
run 2 il8u $L8 --set parallel.pp=2 --set train.micro_batch=2 --set pipeline.layers=3,1,2,2
ok $? "interleaved pp=2 v=2, chunks of 3,1,2,2 layers"
compare "interleaved uneven chunks = one rank" "$SCRATCH/ref8" "$SCRATCH/il8u" --bitwise

# 2bw: no flush, two weight versions; the pipelines equal 2bw on one rank bitwise (with the pipeline
# drained before evaluations and checkpoints at steps 10 and 20, and running through elsewhere).
B="--set parallel.schedule=2bw --set train.micro_batch=2"
# shellcheck disable=SC2086
run 1 bw1 $L4 $B; ok $? "2bw on one rank (the reference of its semantics)"
for n in 2 4; do
    # shellcheck disable=SC2086
    run $n bw$n $L4 $B --set parallel.pp=$n; ok $? "2bw pp=$n, 20 steps"
    compare "2bw pp=$n = 2bw one rank" "$SCRATCH/bw1" "$SCRATCH/bw$n" --bitwise
done
# shellcheck disable=SC2086
run 4 bw4e $L4 $B --set parallel.pp=4 --set train.eval_every=3 --set checkpoint.every=7; ok $? "2bw pp=4, other drain points"
# shellcheck disable=SC2086
run 1 bw1e $L4 $B --set train.eval_every=3 --set checkpoint.every=7; ok $? "2bw one rank, other drain points"
compare "2bw pp=4 = one rank, drained at other steps" "$SCRATCH/bw1e" "$SCRATCH/bw4e" --bitwise
"$TORCH_PYTHON" -c "
import json,sys
a=[json.loads(l)['loss'] for l in open('$SCRATCH/bw1/metrics.jsonl')]
b=[json.loads(l)['loss'] for l in open('$SCRATCH/ref2/metrics.jsonl')]
sys.exit(0 if a[0] == b[0] and all(x != y for x, y in zip(a[1:], b[1:])) else 1)"
ok $? "2bw and 1f1b share step 0 (W(-1) = W(0)) and differ from step 1 on (batch t runs on W(t-1))"

# shellcheck disable=SC2086
run 8 dtp $L4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.tp=2 --set train.micro_batch=2
ok $? "dp2×tp2×pp2: 8 ranks, 20 steps"
compare "dp2×tp2×pp2 vs one rank" "$SCRATCH/ref" "$SCRATCH/dtp"

# A pipeline checkpoint resumes on one rank and continues the one-rank trajectory bitwise.
mkdir -p "$SCRATCH/res/ckpt" && cp "$SCRATCH/f1b2/ckpt/step_00000010.h5" "$SCRATCH/res/ckpt/"
# shellcheck disable=SC2086
run 1 res $L4 --resume auto; ok $? "a pp=2 checkpoint resumed on one rank"
compare "pp2 checkpoint -> one rank" "$SCRATCH/ref" "$SCRATCH/res" --bitwise --step 20

"$TORCH_PYTHON" -c "
import json,sys
ev=json.load(open('$SCRATCH/f1b4/trace.json'))['traceEvents']
st={(e['pid'],e['name']) for e in ev if e['ph']=='X'}
want={(p,n) for p in range(4) for n in ('forward','backward','pipeline flush')}
want|={(p,n) for p in range(3) for n in ('send activation','receive gradient')}
want|={(p,n) for p in range(1,4) for n in ('receive activation','send gradient')}
sys.exit(0 if want <= st and (0,'send gradient') not in st and (3,'send activation') not in st else 1)"
ok $? "trace.json shows every stage's forwards, backwards, sends, receives and flush"
"$TORCH_PYTHON" -c "
import json,sys
r=json.loads(open('$SCRATCH/f1b4/metrics.jsonl').readlines()[-1])
print('# bubble measured %.3f, theory %.4f; peak bytes per stage %s; stash %s' % (r['bubble'], r['bubble_theory'], r['peak_mem_bytes'], r['stash_peak']))
g=json.loads(open('$SCRATCH/gpipe4/metrics.jsonl').readlines()[-1])
sys.exit(0 if abs(r['bubble_theory'] - 3/7) < 1e-4 and len(r['peak_mem_bytes']) == 4 and 0 <= r['bubble'] < 1 and r['stash_peak'] == [4,3,2,1] and g['stash_peak'] == [4,4,4,4] else 1)"
ok $? "metrics.jsonl: 1f1b pp=4 m=4 reports the bubble (theory 3/7 and measured), peak memory of all 4 stages, and stashes p - s = 4,3,2,1 (gpipe: m = 4 everywhere)"

# shellcheck disable=SC2086
refused "interleaved with micro-batches not a multiple of pp" "multiple of parallel.pp" 4 $L4 --set parallel.pp=4 \
    --set parallel.schedule=interleaved --set train.micro_batch=4
refused "virtual_stages without the interleaved schedule" "needs parallel.schedule=interleaved" 2 $L4 --set parallel.pp=2 \
    --set parallel.virtual_stages=2
refused "more chunks than layers" "every chunk needs a layer" 2 $L4 --set parallel.pp=2 \
    --set parallel.schedule=interleaved --set parallel.virtual_stages=4
refused "pipeline.layers that do not sum to model.layers" "pipeline.layers" 2 $L4 --set parallel.pp=2 \
    --set pipeline.layers=2,1
refused "more stages than layers" "parallel.pp" 4 --set parallel.pp=4 --set train.micro_batch=2
done_testing
