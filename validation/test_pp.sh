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

# compare_runs.py fails where it must, on copies of bw2 (bitwise bw1's) each broken once: a weight
# of 2bw's /model_prev one ulp off (--bitwise read /model and the moments only), a NaN weight and a
# NaN loss after the first of their kind (max() skipped a NaN met after its first argument), and
# metrics that share one step with bw1's (one step was enough); and a run whose last checkpoint is
# of another step than bw1's
"$TORCH_PYTHON" - "$SCRATCH/bw2" "$SCRATCH" <<'PY'
import json, os, shutil, sys
import h5py, numpy as np
src, out = sys.argv[1:3]
def copy(name):
    shutil.copytree(src, f"{out}/{name}")
    return f"{out}/{name}"
def first_elem(d, group, f):
    with h5py.File(f"{d}/ckpt/step_00000020.h5", "r+") as h:
        t = h[group][list(h[group])[-1]]  # the group's last tensor: the first ones were the ones checked
        v = t[...]
        v.flat[0] = f(v.flat[0])
        t[...] = v
first_elem(copy("mx_prev"), "model_prev", lambda x: np.nextafter(x, np.float32(np.inf)))
first_elem(copy("mx_nan"), "model", lambda x: np.float32("nan"))
os.remove(copy("mx_short") + "/ckpt/step_00000020.h5")
for name, keep in (("mx_loss", None), ("mx_one", 20)):
    d = copy(name)
    rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
    if keep is None:
        rows[-2]["loss"] = float("nan")
    else:
        rows = [r for r in rows if r["step"] == keep]
    with open(f"{d}/metrics.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
PY
ok $? "five broken copies of bw2 for compare_runs.py"
cmp_fails() {  # cmp_fails WHAT FAIL-PATTERN RUN [flags]: compare_runs.py bw1 RUN exits 1 with that FAIL line
    cf_what=$1; cf_pat=$2; cf_run=$3; shift 3
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/compare_runs.py" "$SCRATCH/bw1" "$SCRATCH/$cf_run" "$@" > "$SCRATCH/cmp.out" 2>&1
    cf_rc=$?
    [ $cf_rc -eq 1 ] && grep -q "^FAIL $cf_pat" "$SCRATCH/cmp.out"
    ok $? "compare_runs.py fails $cf_what (exit $cf_rc: $(grep '^FAIL' "$SCRATCH/cmp.out" | head -n 1 | cut -c 1-120))"
}
cmp_fails "a /model_prev weight one ulp off, --bitwise" "step_00000020.h5: every tensor bitwise identical (differs: \['model_prev/" mx_prev --bitwise
cmp_fails "a NaN in the last weight tensor" "final weights within" mx_nan
cmp_fails "a NaN loss at the step before last" "per-step loss over 20 steps" mx_loss
cmp_fails "runs that share one logged step" "1 common logged steps" mx_one
cmp_fails "last checkpoints of different steps" "the checkpoints are of different steps" mx_short

# shellcheck disable=SC2086
run 8 dtp $L4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.tp=2 --set train.micro_batch=2
ok $? "dp2×tp2×pp2: 8 ranks, 20 steps"
compare "dp2×tp2×pp2 vs one rank" "$SCRATCH/ref" "$SCRATCH/dtp"

# A pipeline checkpoint resumes on one rank and continues the one-rank trajectory bitwise.
mkdir -p "$SCRATCH/res/ckpt" && cp "$SCRATCH/f1b2/ckpt/step_00000010.h5" "$SCRATCH/res/ckpt/"
# shellcheck disable=SC2086
run 1 res $L4 --resume auto; ok $? "a pp=2 checkpoint resumed on one rank"
resumed_from "pp2 checkpoint -> one rank" res 10
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
