#!/bin/sh
# MindPipe's math against PyTorch (Debian's python3-torch through /usr/bin/python3), for three model
# shapes (one with a shape per block): the loss and every parameter's gradient of one step, and 10
# AdamW steps' losses, grad norms and final weights, under the plain update rule and under
# PipeDream-2BW's; each layer's output activations
# (debug.dump_activations) on one rank and on 8.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/ref.ini"
ref="$MP_SRCDIR/validation/torch_ref.py"

# Runs torch_ref.py and turns its PASS/FAIL lines into this test's TAP lines.
torch_check() {  # torch_check LABEL ARGS...
    label=$1; shift
    "$TORCH_PYTHON" "$ref" "$@" > "$SCRATCH/ref.out" 2>&1
    tap_checker "$label" torch_ref.py $? "$SCRATCH/ref.out"
}

# Three shapes: the reference deck; one with 1 head, mlp_ratio 2, an odd length and clipping on;
# one with a shape per block (model.blocks: 4, 2 and 1 heads, MLPs of 4, 1 and 2, a skip block).
for variant in base odd blocks; do
    case $variant in
        base) sets="" ;;
        odd) sets="--set model.heads=1 --set model.mlp_ratio=2 --set model.seq_len=13 --set train.grad_clip=0.05 --set train.batch=6 --set train.micro_batch=3" ;;
        blocks) sets="--set model.layers=4 --set model.blocks=h4m4,h2m1,skip,h1m2" ;;
    esac
    # shellcheck disable=SC2086
    "$MINDPIPE" debug-grads -c "$deck" --set data.path="$data" $sets --out "$SCRATCH/g_$variant.h5" > "$SCRATCH/dg.out" 2>&1
    ok $? "$variant: mindpipe debug-grads"
    torch_check "$variant" grads "$SCRATCH/g_$variant.h5" --data "$data"
    # shellcheck disable=SC2086
    "$MINDPIPE" train -c "$deck" --set data.path="$data" $sets --quiet --out "$SCRATCH/run_$variant" > "$SCRATCH/tr.out" 2>&1
    ok $? "$variant: mindpipe train 10 steps"
    torch_check "$variant" train "$SCRATCH/g_$variant.h5" --data "$data" --metrics "$SCRATCH/run_$variant/metrics.jsonl" \
        --final "$SCRATCH/run_$variant/ckpt/step_00000010.h5"
done
# PipeDream-2BW's update rule (ARCHITECTURE.md §4), on one rank (the pipelines match it bitwise: test_pp.sh):
# the run follows W(t+1) = W(t) - AdamW(grad f_t(W(t-1))) and does not follow the plain rule.
"$MINDPIPE" train -c "$deck" --set data.path="$data" --set parallel.schedule=2bw --quiet --out "$SCRATCH/run_2bw" \
    > "$SCRATCH/tr.out" 2>&1
ok $? "2bw: mindpipe train 10 steps"
torch_check "2bw" train "$SCRATCH/g_base.h5" --data "$data" --metrics "$SCRATCH/run_2bw/metrics.jsonl" \
    --final "$SCRATCH/run_2bw/ckpt/step_00000010.h5" --rule 2bw
"$TORCH_PYTHON" "$ref" train "$SCRATCH/g_base.h5" --data "$data" --metrics "$SCRATCH/run_2bw/metrics.jsonl" \
    --final "$SCRATCH/run_2bw/ckpt/step_00000010.h5" > "$SCRATCH/plain.out" 2>&1
[ $? -eq 1 ] && [ "$(grep -c '^FAIL' "$SCRATCH/plain.out")" -eq 3 ]
ok $? "2bw: the plain AdamW rule misses the 2bw run (losses, grad norms and final weights all off)"
sed 's/^/# plain rule: /' "$SCRATCH/plain.out"
grep -q '"grad_norm"' "$SCRATCH/run_odd/metrics.jsonl" && "$TORCH_PYTHON" -c "
import json,sys
r=[json.loads(l) for l in open('$SCRATCH/run_odd/metrics.jsonl')]
sys.exit(0 if any(x['grad_norm'] > 0.05 for x in r) else 1)"
ok $? "odd: the clipping threshold is below the gradient norm, so clipping is exercised"
# torch_ref.py fails a NaN met after the first of its kind (max() kept whatever it met first, so
# only a NaN in the first tensor or the first step failed): the base run with a NaN in its last
# weight tensor and a NaN loss at step 9 misses exactly those two checks
"$TORCH_PYTHON" - "$SCRATCH/run_base" "$SCRATCH/nan" <<'PY'
import json, shutil, sys
import h5py, numpy as np
src, out = sys.argv[1:3]
shutil.copytree(src, out)
with h5py.File(f"{out}/ckpt/step_00000010.h5", "r+") as h:
    t = h["model"][list(h["model"])[-1]]
    v = t[...]
    v.flat[0] = np.nan
    t[...] = v
rows = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
rows[-2]["loss"] = float("nan")
open(f"{out}/metrics.jsonl", "w").writelines(json.dumps(r) + "\n" for r in rows)
PY
"$TORCH_PYTHON" "$ref" train "$SCRATCH/g_base.h5" --data "$data" --metrics "$SCRATCH/nan/metrics.jsonl" \
    --final "$SCRATCH/nan/ckpt/step_00000010.h5" > "$SCRATCH/nan.out" 2>&1
[ $? -eq 1 ] && [ "$(grep -c '^FAIL' "$SCRATCH/nan.out")" -eq 2 ] && grep -q '^FAIL .*every logged loss' "$SCRATCH/nan.out" &&
    grep -q '^FAIL final weights' "$SCRATCH/nan.out"
ok $? "a NaN in the last weight tensor and in step 9's loss fail those two checks: $(grep '^FAIL' "$SCRATCH/nan.out" | cut -c 1-70 | tr '\n' ';')"

# debug.dump_activations: every layer's output of step 5 against PyTorch on the step-5 checkpoint's
# weights, on one rank and on dp2×tp2×pp2 (each stage writes its own layers into one file).
for lay in "1 one" "8 dp2tp2pp2 --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2 --set train.micro_batch=2"; do
    # shellcheck disable=SC2086
    set -- $lay
    n=$1; name=$2; shift 2
    ${MPIEXEC:-mpiexec} -n "$n" "$MINDPIPE" train -c "$deck" --set data.path="$data" --set debug.dump_activations=5 \
        --set checkpoint.every=5 --set train.steps=6 --set train.threads=1 --quiet --out "$SCRATCH/act_$name" "$@" \
        > "$SCRATCH/act.out" 2>&1
    [ $? -eq 0 ] && [ -s "$SCRATCH/act_$name/activations_step_00000005.h5" ]
    ok $? "dump_activations=5 on $n rank(s): activations_step_00000005.h5 written"
    torch_check "activations, $name" acts "$SCRATCH/act_$name/ckpt/step_00000005.h5" \
        --dump "$SCRATCH/act_$name/activations_step_00000005.h5"
done
done_testing
