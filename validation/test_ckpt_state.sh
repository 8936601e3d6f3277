#!/bin/sh
# What the checkpoint readers say of a checkpoint (docs/RELIABILITY.md "No silent corruption", issue 31
# item 5): `inspect FILE | head -1` is not a corrupt file: a closed output is said as such.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_require_torch
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
T() { "$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.warmup=1 --set train.threads=1 --quiet "$@"; }
# refused LABEL PATTERN COMMAND...: a non-zero exit naming PATTERN, without "crashed"
expect_refused() {
    er_label=$1; er_pat=$2; shift 2
    "$@" > "$SCRATCH/er.out" 2>&1; er_rc=$?
    [ $er_rc -ne 0 ] && grep -q -- "$er_pat" "$SCRATCH/er.out" && ! grep -q "crashed" "$SCRATCH/er.out"
    ok $? "$er_label (exit $er_rc)"
    [ $er_rc -ne 0 ] && grep -q -- "$er_pat" "$SCRATCH/er.out" || sed 's/^/#   /' "$SCRATCH/er.out" | head -n 8
}
# doctor SRC DST PYTHON: DST is SRC with /state's attributes `a` changed by PYTHON, then resealed
doctor() {
    "$TORCH_PYTHON" - "$1" "$2" "$3" <<'PY'
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], 'r+') as f:
    a = f['state'].attrs
    def text(name, s):  # a fixed-length string, as MindPipe writes them
        del a[name]; a.create(name, np.bytes_(s.encode()), dtype=h5py.string_dtype('ascii', max(len(s), 1)))
    exec(sys.argv[3])
PY
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/filesum_reseal.py" "$2"
}

T --set train.steps=4 --set checkpoint.every=2 --set train.seed=1 --out "$SCRATCH/run" > "$SCRATCH/run.out" 2>&1
ok $? "a 4-step run under train.seed=1, checkpoints at 2 and 4"
good="$SCRATCH/run/ckpt/step_00000004.h5"
"$MINDPIPE" inspect "$good" > "$SCRATCH/good.out" 2>&1; ok $? "inspect verifies the good checkpoint"

# ---- a. a closed output is not a corrupt file ----
# the reader gone before inspect writes: SIGPIPE (the default), then with SIGPIPE ignored (EPIPE)
for restore in True False; do
    "$TORCH_PYTHON" - "$MINDPIPE" "$good" "$restore" > "$SCRATCH/pipe.out" 2>&1 <<'PY'
import os, subprocess, sys
r, w = os.pipe()
os.close(r)  # nobody reads: the first write fails
p = subprocess.run([sys.argv[1], 'inspect', sys.argv[2]], stdout=w, stderr=subprocess.PIPE,
                   restore_signals=sys.argv[3] == 'True')
print("exit", p.returncode)
sys.stdout.write(p.stderr.decode())
PY
    grep -q "output closed" "$SCRATCH/pipe.out" && ! grep -q "corrupt" "$SCRATCH/pipe.out"
    ok $? "inspect into a closed pipe (SIGPIPE $([ $restore = True ] && echo default || echo ignored)): 'output closed', no corruption claimed"
    sed 's/^/# /' "$SCRATCH/pipe.out"
done
"$MINDPIPE" inspect "$good" 2> "$SCRATCH/head.err" | head -n 1 > "$SCRATCH/head.out"
grep -q "^checkpoint $good" "$SCRATCH/head.out" && ! grep -q "corrupt" "$SCRATCH/head.err"
ok $? "inspect GOOD.h5 | head -1: the first line, no corruption claimed"

done_testing
