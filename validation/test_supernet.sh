#!/bin/sh
# Supernet training, the sequential reference (ARCHITECTURE.md §3, §4): a small supernet (4 choice
# blocks × 3 candidates, window 2) against PyTorch's sequential supernet training (losses, grad
# norms, every candidate's final weights within 1e-4); pp = 2, 4 (windows run causally: NASPipe's
# rule checked on the timeline), offload in the windows, interleaved (a subnet per step) and supernet.schedule=serial bitwise
# equal to one rank, tp = 2 within the layout tolerance; a subset of the layers as choice blocks; resume at a
# window's end bitwise; eval --subnet and export (the exported plain model evaluates to the same
# bits); search (evolutionary and random, a budget, the same file on another layout); the deck rules
# and the layouts not built yet refused naming why.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch # torch_ref.py and causal_trace.py (its sampler) import torch; compare_runs.py h5py
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
ref="$MP_SRCDIR/validation/torch_ref.py"
SN="--set model.layers=4 --set train.threads=1 --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip --set supernet.window=2"

# shellcheck disable=SC2086
run 1 ref $SN; ok $? "supernet on one rank"
# shellcheck disable=SC2086
"$MINDPIPE" debug-grads -c "$layout_deck" --set data.path="$data" $SN --out "$SCRATCH/g.h5" > "$SCRATCH/dg.out" 2>&1
ok $? "debug-grads of subnet 0 (the initial weights of every candidate)"
torch() {  # torch LABEL ARGS...: torch_ref.py's PASS/FAIL lines as TAP (but one per gradient that passed)
    label=$1; shift
    "$TORCH_PYTHON" "$ref" "$@" > "$SCRATCH/ref.out" 2>&1; rc=$?
    grep -v '^PASS grad ' "$SCRATCH/ref.out" > "$SCRATCH/ref.tap"
    tap_checker "$label" torch_ref.py $rc "$SCRATCH/ref.tap"
}
torch "subnet 0's gradients" grads "$SCRATCH/g.h5" --data "$data"
torch "PyTorch's sequential supernet training" supernet "$SCRATCH/g.h5" --data "$data" \
    --metrics "$SCRATCH/ref/metrics.jsonl" --final "$SCRATCH/ref/ckpt/step_00000020.h5"
"$MINDPIPE" inspect "$SCRATCH/ref/ckpt/step_00000020.h5" > "$SCRATCH/inspect.out" 2>&1 &&
    [ "$(grep -c '^  /model/' "$SCRATCH/inspect.out")" -eq 100 ] && grep -q "/model/h.3.c1.attn.qkv.w (48, 32)" "$SCRATCH/inspect.out" &&
    ! grep -q "/model/h.0.c2\." "$SCRATCH/inspect.out" && ! grep -q "/model/h.0.ln1" "$SCRATCH/inspect.out"
ok $? "the checkpoint holds every candidate (h.{l}.c{k}.*; none for skip) and the shared tensors: 100 tensors"

layouts_cmp --bitwise ref "$SN" "2 pp2 --set parallel.pp=2" \
    "4 pp4 --set parallel.pp=4" \
    "2 il2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2" \
    "2 rc --set parallel.pp=2 --set memory.policy=recompute" \
    "1 ser1 --set supernet.schedule=serial" "2 ser2 --set parallel.pp=2 --set supernet.schedule=serial" \
    "2 off2 --set parallel.pp=2 --set memory.policy=offload" \
    "4 off4 --set parallel.pp=4 --set memory.layers=o,k,o,k --set memory.prefetch=2"
# the stash offloaded inside causal windows: the window's list gets the step's OFFLOAD/PREFETCH pass,
# and each subnet's metrics line reports its share of the window's transfers
grep -q "subnets run causally" "$SCRATCH/off2/log.txt" &&
    [ "$(grep -c '"offloaded_bytes_per_step":\[[1-9][0-9]*,[1-9][0-9]*\]' "$SCRATCH/off2/metrics.jsonl")" -eq 20 ]
ok $? "offload at pp=2 runs its windows causally, every subnet's line with its bytes offloaded on both stages"
# NASPipe's rule on the timeline: conflicting subnets never in flight together on a stage, and some
# subnets are (the window ran causally); serial: never two at once.
grep -q "subnets run causally" "$SCRATCH/pp2/log.txt" && grep -q "one executor step each: the interleaved" "$SCRATCH/il2/log.txt"
ok $? "pp=2 runs its windows causally, the interleaved schedule one subnet per step (the log says which and why)"
for tr in pp2 pp4 ser2; do
    flag=; [ $tr = ser2 ] && flag=--serial
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/causal_trace.py" "$SCRATCH/$tr" $flag > "$SCRATCH/tr.out" 2>&1
    ok $? "$tr's trace: $(head -n 1 "$SCRATCH/tr.out")"
done
! "$TORCH_PYTHON" "$MP_SRCDIR/validation/causal_trace.py" "$SCRATCH/pp2" --serial > "$SCRATCH/tr.out" 2>&1 &&
    grep -q "^FAIL rank" "$SCRATCH/tr.out"
ok $? "the trace check sees subnets in flight together on pp2's causal timeline when told it was serial"
TPC="--set supernet.candidates=h4m4,h2m2,skip"
# shellcheck disable=SC2086
run 1 tref $SN $TPC; ok $? "candidates h4m4,h2m2,skip on one rank"
# shellcheck disable=SC2086
run 4 tp2 $SN $TPC --set parallel.tp=2 --set parallel.pp=2; ok $? "tp=2 × pp=2"
compare "tp=2 × pp=2 within the layout tolerance" "$SCRATCH/tref" "$SCRATCH/tp2"

# Choice blocks on layers 1 and 3 only: the others are plain blocks, shared by every subnet.
# shellcheck disable=SC2086
run 1 sub $SN --set supernet.blocks=1,3 --set supernet.window=1; ok $? "choice blocks 1 and 3, window 1"
"$MINDPIPE" inspect "$SCRATCH/sub/ckpt/step_00000020.h5" > "$SCRATCH/inspect2.out" 2>&1 &&
    grep -q "/model/h.0.ln1.w" "$SCRATCH/inspect2.out" && grep -q "/model/h.1.c1.ln1.w" "$SCRATCH/inspect2.out" &&
    ! grep -q "/model/h.0.c0" "$SCRATCH/inspect2.out"
ok $? "layers 0 and 2 are plain blocks, 1 and 3 hold candidates"
# shellcheck disable=SC2086
"$MINDPIPE" debug-grads -c "$layout_deck" --set data.path="$data" $SN --set supernet.blocks=1,3 --set supernet.window=1 \
    --out "$SCRATCH/g2.h5" > "$SCRATCH/dg.out" 2>&1
ok $? "debug-grads with choice blocks 1 and 3, window 1"
torch "choice blocks 1 and 3" supernet "$SCRATCH/g2.h5" --data "$data" --metrics "$SCRATCH/sub/metrics.jsonl" \
    --final "$SCRATCH/sub/ckpt/step_00000020.h5"

# Resume at step 10 (a window's end) on another layout.
mkdir -p "$SCRATCH/res/ckpt" && cp "$SCRATCH/ref/ckpt/step_00000010.h5" "$SCRATCH/res/ckpt/"
# shellcheck disable=SC2086
run 2 res $SN --set parallel.pp=2 --resume auto; ok $? "step 10 resumed at pp=2"
resumed_from "resumed at pp=2" res 10
compare "resumed = one rank" "$SCRATCH/ref" "$SCRATCH/res" --bitwise --step 20

refused "no candidates" "needs supernet.candidates" 1 --set supernet.enabled=1
refused "a window that does not divide train.steps" "not a multiple of supernet.window=3" 1 $SN --set supernet.window=3
refused "a choice layer that does not exist" "layer 7 does not exist" 1 $SN --set supernet.blocks=1,7
refused "a candidate that does not divide over tp" "candidate 1 (h2m1)" 4 $SN --set parallel.tp=4
refused "model.blocks with a supernet" "give the shapes as supernet.candidates" 1 $SN --set model.blocks=h4m4,h4m4,h4m4,h4m4
refused "2bw" "2bw's delayed weights" 2 $SN --set parallel.pp=2 --set parallel.schedule=2bw
# eval --subnet and export: the exported plain model's val_loss is the supernet's for that subnet.
CK="$SCRATCH/ref/ckpt/step_00000020.h5"
val() { sed -n 's/^val_loss \([^ ]*\) .*/\1/p' "$1"; }
# shellcheck disable=SC2086
$MPIEXEC -n 1 "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" $SN --ckpt "$CK" --subnet 0,1,2,1 > "$SCRATCH/ev1.out" 2>&1
ok $? "eval --subnet 0,1,2,1 on one rank: $(val "$SCRATCH/ev1.out")"
# shellcheck disable=SC2086
$MPIEXEC -n 2 "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" $SN --set parallel.pp=2 --ckpt "$CK" \
    --subnet 0,1,2,1 > "$SCRATCH/ev2.out" 2>&1 && [ "$(val "$SCRATCH/ev2.out")" = "$(val "$SCRATCH/ev1.out")" ]
ok $? "eval --subnet at pp=2: the same bits"
# shellcheck disable=SC2086
$MPIEXEC -n 1 "$MINDPIPE" export -c "$layout_deck" --set data.path="$data" $SN --ckpt "$CK" --subnet 0,1,2,1 \
    --out "$SCRATCH/sub.h5" > "$SCRATCH/ex.out" 2>&1 && grep -q "^blocks = h4m4,h2m1,skip,h2m1$" "$SCRATCH/ex.out"
ok $? "export --subnet 0,1,2,1: a plain model of blocks h4m4,h2m1,skip,h2m1"
"$MINDPIPE" inspect "$SCRATCH/sub.h5" > "$SCRATCH/inspect3.out" 2>&1 && grep -q "blocks=h4m4,h2m1,skip,h2m1" "$SCRATCH/inspect3.out" &&
    grep -q "/model/h.3.attn.qkv.w (48, 32)" "$SCRATCH/inspect3.out" && ! grep -q "\.c[0-9]\." "$SCRATCH/inspect3.out" &&
    ! grep -q "/model/h.2\." "$SCRATCH/inspect3.out" && ! grep -q "/optim" "$SCRATCH/inspect3.out"
ok $? "the exported file: plain names, h.3 with 2 heads, nothing for the skip block, no optimizer state"
$MPIEXEC -n 2 "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" --set model.layers=4 --set train.threads=1 \
    --set model.blocks=h4m4,h2m1,skip,h2m1 --set parallel.pp=2 --ckpt "$SCRATCH/sub.h5" > "$SCRATCH/ev3.out" 2>&1 &&
    [ "$(val "$SCRATCH/ev3.out")" = "$(val "$SCRATCH/ev1.out")" ]
ok $? "eval of the exported model (model.blocks deck, pp=2) = the supernet's eval of the subnet, bitwise"
# search: every subnet once in search.jsonl, the same file on another layout, the best's val_loss
# what eval says of it, a parameter budget kept.
# shellcheck disable=SC2086
$MPIEXEC -n 1 "$MINDPIPE" search -c "$layout_deck" --set data.path="$data" $SN --ckpt "$CK" --out "$SCRATCH/s1" \
    --population 4 --generations 3 > "$SCRATCH/s1.out" 2>&1
ok $? "evolutionary search: $(tail -n 1 "$SCRATCH/s1.out")"
# shellcheck disable=SC2086
$MPIEXEC -n 2 "$MINDPIPE" search -c "$layout_deck" --set data.path="$data" $SN --set parallel.pp=2 --ckpt "$CK" \
    --out "$SCRATCH/s2" --population 4 --generations 3 > "$SCRATCH/s2.out" 2>&1 && cmp -s "$SCRATCH/s1/search.jsonl" "$SCRATCH/s2/search.jsonl"
ok $? "the same search at pp=2 writes the same search.jsonl, byte for byte"
best=$("$TORCH_PYTHON" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
subnets = [r['subnet'] for r in rows]
assert len(rows) >= 4 and len(set(subnets)) == len(subnets), 'each subnet once'
b = min(rows, key=lambda r: r['val_loss'])
print(b['subnet'], repr(b['val_loss']))" "$SCRATCH/s1/search.jsonl")
ok $? "search.jsonl: every subnet evaluated once (best: $best)"
# shellcheck disable=SC2086
$MPIEXEC -n 1 "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" $SN --ckpt "$CK" --subnet "${best% *}" \
    > "$SCRATCH/ev4.out" 2>&1 && "$TORCH_PYTHON" -c "import sys; sys.exit(float(sys.argv[1]) != float(sys.argv[2]))" \
    "$(val "$SCRATCH/ev4.out")" "${best#* }"
ok $? "eval --subnet of the best = its val_loss in search.jsonl"
# shellcheck disable=SC2086
$MPIEXEC -n 1 "$MINDPIPE" search -c "$layout_deck" --set data.path="$data" $SN --ckpt "$CK" --out "$SCRATCH/s3" \
    --method random --population 4 --generations 2 --max-params 30000 > "$SCRATCH/s3.out" 2>&1 &&
    "$TORCH_PYTHON" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(not (rows and all(r['params'] <= 30000 for r in rows)))" "$SCRATCH/s3/search.jsonl"
ok $? "random search under --max-params 30000: every subnet within it"
# shellcheck disable=SC2086
$MPIEXEC -n 1 "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" $SN --ckpt "$CK" > "$SCRATCH/ev.out" 2>&1
[ $? -ne 0 ] && grep -q "give --subnet" "$SCRATCH/ev.out"
ok $? "eval of a supernet without --subnet is refused"
# shellcheck disable=SC2086
$MPIEXEC -n 1 "$MINDPIPE" eval -c "$layout_deck" --set data.path="$data" $SN --ckpt "$CK" --subnet 0,1,3,0 > "$SCRATCH/ev.out" 2>&1
[ $? -ne 0 ] && grep -q "layer 2 needs a candidate index from 0 to 2" "$SCRATCH/ev.out"
ok $? "a subnet naming a candidate that does not exist is refused naming the layer"
done_testing
