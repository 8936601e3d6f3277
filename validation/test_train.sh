#!/bin/sh
# Training runs on the bundled corpus: learning happens, the same deck twice gives the same bits,
# a resumed run continues bitwise identical to an uninterrupted one, the run directory is complete.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data (make_kjv.sh / mindpipe prep) failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
run() { "$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet "$@"; }

run --out "$SCRATCH/a" > "$SCRATCH/a.out" 2>&1
ok $? "train 20 steps"
run --out "$SCRATCH/b" > "$SCRATCH/b.out" 2>&1
ok $? "train the same deck again"

for f in log.txt metrics.jsonl deck.ini trace.json profile.json ckpt/step_00000010.h5 ckpt/step_00000020.h5; do
    test -s "$SCRATCH/a/$f"; ok $? "run directory has $f"
done

py() { "$TORCH_PYTHON" -c "$@"; }
py "
import json,sys
rows=[json.loads(l) for l in open('$SCRATCH/a/metrics.jsonl')]
need={'step','loss','lr','grad_norm','tokens_per_s','mfu','peak_mem_bytes','bubble'}
sys.exit(0 if rows and all(need <= set(r) for r in rows) and rows[-1]['step']==20 else 1)"
ok $? "metrics.jsonl: one object per logged step with step, loss, lr, grad_norm, tokens_per_s, mfu, peak_mem_bytes, bubble"

py "
import json,sys
rows=[json.loads(l) for l in open('$SCRATCH/a/metrics.jsonl')]
v=[r['val_loss'] for r in rows if 'val_loss' in r]
print('# val_loss at steps 10, 20:', v, ' train loss first/last:', rows[0]['loss'], rows[-1]['loss'])
sys.exit(0 if len(v)==2 and rows[-1]['loss'] < rows[0]['loss'] - 0.5 and v[1] < v[0] else 1)"
ok $? "it learns: training loss falls by > 0.5 nats and val_loss falls"

"$TORCH_PYTHON" -c "
import json,sys
ev=[e for e in json.load(open('$SCRATCH/a/trace.json'))['traceEvents'] if e['ph']=='X']
f={(e['args']['step'],e['args']['mb']) for e in ev if e['name']=='forward'}
b={(e['args']['step'],e['args']['mb']) for e in ev if e['name']=='backward'}
want={(t,m) for t in range(20) for m in range(2)}
ok=f==want and b==want and all(e['dur']>=0 and e['pid']==0 for e in ev) and sum(e['name']=='optimizer' for e in ev)==20
sys.exit(0 if ok else 1)"
ok $? "trace.json (Chrome trace) holds a forward and a backward span per step and micro-batch, an optimizer span per step"

key() { "$TORCH_PYTHON" -c "
import json
for l in open('$1'):
    r=json.loads(l); print(r['step'], repr(r['loss']), repr(r['grad_norm']), repr(r.get('val_loss')))"; }
# (the keys must exist: two empty files are equal too)
key "$SCRATCH/a/metrics.jsonl" > "$SCRATCH/a.key" && key "$SCRATCH/b/metrics.jsonl" > "$SCRATCH/b.key" &&
    [ -s "$SCRATCH/a.key" ] && cmp -s "$SCRATCH/a.key" "$SCRATCH/b.key"
ok $? "same deck twice: bitwise identical losses, grad norms and val losses"
h5diff -q "$SCRATCH/a/ckpt/step_00000020.h5" "$SCRATCH/b/ckpt/step_00000020.h5" /model /model
ok $? "same deck twice: bitwise identical final weights"

# Resume: start a new run directory from a's step-10 checkpoint and train to 20.
mkdir -p "$SCRATCH/c/ckpt" && cp "$SCRATCH/a/ckpt/step_00000010.h5" "$SCRATCH/c/ckpt/"
run --out "$SCRATCH/c" --resume auto > "$SCRATCH/c.out" 2>&1
ok $? "resume auto from step 10"
grep -q "resumed from .*step_00000010.h5 at step 10" "$SCRATCH/c/log.txt"
ok $? "the log says which checkpoint it resumed from"
for g in /model /optim/m /optim/v; do
    h5diff -q "$SCRATCH/a/ckpt/step_00000020.h5" "$SCRATCH/c/ckpt/step_00000020.h5" $g $g
    ok $? "10 + resume + 10 = 20 straight: $g bitwise identical"
done
key "$SCRATCH/c/metrics.jsonl" > "$SCRATCH/c.all" && tail -n 2 "$SCRATCH/c.all" > "$SCRATCH/c.key" &&
    [ "$(wc -l < "$SCRATCH/c.key")" -eq 2 ] && tail -n 2 "$SCRATCH/a.key" | cmp -s - "$SCRATCH/c.key"
ok $? "resumed run logs the same losses as the uninterrupted one"

# resume auto with an empty run directory starts from step 0
run --out "$SCRATCH/d" --resume auto --set train.steps=2 --set train.warmup=1 > "$SCRATCH/d.out" 2>&1 && grep -q "starting from step 0" "$SCRATCH/d/log.txt"
ok $? "resume auto with no checkpoint starts fresh and says so"

grep -q "^done: 20 steps in .* | energy .* kWh (.*) | CO2 .* g at 400 gCO2/kWh" "$SCRATCH/a/log.txt"
ok $? "the end of the log reports time, energy (and how it was obtained) and CO2 at [cost] grid_gco2_per_kwh"

"$MINDPIPE" inspect "$SCRATCH/a/ckpt/step_00000020.h5" > "$SCRATCH/inspect.txt" 2>&1
ok $? "inspect a checkpoint"
grep -q "h.1.mlp.fc.w" "$SCRATCH/inspect.txt" && grep -q "layers" "$SCRATCH/inspect.txt"
ok $? "inspect lists tensors and the deck"

# The resolved deck reproduces the run.
"$MINDPIPE" train -c "$SCRATCH/a/deck.ini" --quiet --set train.steps=10 --set train.eval_every=10 --out "$SCRATCH/e" > /dev/null 2>&1
ok $? "the run's deck.ini is a valid deck"

# The same run under the MPI launcher (one rank) as without it (singleton init): same bits.
if command -v mpiexec >/dev/null 2>&1; then
    mpiexec -n 1 "$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet --set checkpoint.every=0 --out "$SCRATCH/m" > "$SCRATCH/m.out" 2>&1
    ok $? "train under mpiexec -n 1"
    key "$SCRATCH/m/metrics.jsonl" > "$SCRATCH/m.key" && [ -s "$SCRATCH/m.key" ] && cmp -s "$SCRATCH/a.key" "$SCRATCH/m.key"
    ok $? "mpiexec -n 1 and the singleton run give bitwise identical metrics"
else
    ok 1 "mpiexec not found (install mpich)"
fi

checkpoint_keep=$(find "$SCRATCH/a/ckpt" -maxdepth 1 -name 'step_*' | wc -l)
test "$checkpoint_keep" -eq 2
ok $? "checkpoint.every=10 over 20 steps leaves step 10 and step 20"
done_testing
