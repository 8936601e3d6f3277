#!/bin/sh
# What every checkpoint reader checks of /state (docs/RELIABILITY.md "No silent corruption", issue 31
# item 5): files edited after the write with h5py and resealed (validation/filesum_reseal.py), so
# they pass the file checksum and carry bad content. A step of 10^12 or a negative dimension is
# refused by inspect and eval as by resume; a step and AdamW counter that disagree, a /state deck
# that is garbage, empty or contradicts /state's seed (the file's is 1, train.ini's 11) are refused;
# a supernet's legitimately different counters are not. Resume's guard compares the seed with
# /state's own attribute and takes `--set "train.seed = 7"` (spaces) as the deliberate change it is.
# `inspect FILE | head -1` is not a corrupt file: a closed output is said as such.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_require_h5py # it edits checkpoints with h5py; nothing here needs torch
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

# ---- b. ranges and counters, in every reader ----
doctor "$good" "$SCRATCH/huge.h5" "a.modify('step', np.int64(10**12)); a.modify('adam_t', np.int64(10**12)); a.modify('data_cursor', np.int64(8 * 10**12))"
doctor "$good" "$SCRATCH/negdim.h5" "a.modify('dim', np.int32(-32))"
doctor "$good" "$SCRATCH/adam.h5" "a.modify('step', np.int64(7)); a.modify('adam_t', np.int64(5)); a.modify('data_cursor', np.int64(56))"
expect_refused "inspect: step 10^12" "/state is impossible (step 1000000000000: train.steps is at most 1000000000)" \
    "$MINDPIPE" inspect "$SCRATCH/huge.h5"
expect_refused "inspect: a negative model.dim" "/state has dim -32, outside model.dim's range 1 to 65536" \
    "$MINDPIPE" inspect "$SCRATCH/negdim.h5"
expect_refused "eval: a negative model.dim" "/state has dim -32, outside model.dim's range" \
    "$MINDPIPE" eval -c "$deck" --set data.path="$data" --ckpt "$SCRATCH/negdim.h5"
expect_refused "eval: step 10^12" "/state is impossible (step 1000000000000" \
    "$MINDPIPE" eval -c "$deck" --set data.path="$data" --ckpt "$SCRATCH/huge.h5"
expect_refused "resume: step 7 with adam_t 5" "/state has step 7 but AdamW's counter adam_t 5" \
    T --set train.steps=10 --set train.seed=1 --out "$SCRATCH/r_adam" --resume "$SCRATCH/adam.h5"
expect_refused "inspect: step 7 with adam_t 5" "/state has step 7 but AdamW's counter adam_t 5" \
    "$MINDPIPE" inspect "$SCRATCH/adam.h5"
mkdir -p "$SCRATCH/r_auto/ckpt" && cp "$SCRATCH/adam.h5" "$SCRATCH/r_auto/ckpt/step_00000007.h5" &&
    cp "$SCRATCH/run/ckpt/step_00000002.h5" "$SCRATCH/r_auto/ckpt/"
T --set train.steps=6 --set train.seed=1 --out "$SCRATCH/r_auto" --resume auto > "$SCRATCH/r_auto.out" 2>&1
grep -q "skipping .*step_00000007.h5: /state has step 7 but AdamW's counter adam_t 5" "$SCRATCH/r_auto.out" &&
    grep -q "resumed from .*step_00000002.h5" "$SCRATCH/r_auto/log.txt"
ok $? "--resume auto skips it, saying why, and takes step 2"
# a supernet's shared parameters step once per window: step 4, adam_t 2 is right there
SN="--set model.layers=4 --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip --set supernet.window=2"
# shellcheck disable=SC2086
T $SN --set train.steps=4 --set checkpoint.every=2 --out "$SCRATCH/sn" > "$SCRATCH/sn.out" 2>&1 &&
    "$MINDPIPE" inspect "$SCRATCH/sn/ckpt/step_00000004.h5" > "$SCRATCH/sn_inspect.out" 2>&1 &&
    grep -q "^step 4  adam_t 2 " "$SCRATCH/sn_inspect.out"
ok $? "a supernet (window 2) checkpoint at step 4 has adam_t 2, and inspect takes it"
# shellcheck disable=SC2086
T $SN --set train.steps=6 --set checkpoint.every=2 --out "$SCRATCH/sn" --resume auto > "$SCRATCH/sn2.out" 2>&1 &&
    grep -q "resumed from .*step_00000004.h5 at step 4" "$SCRATCH/sn/log.txt"
ok $? "and it resumes"

# ---- c. the deck in /state, and resume's guard ----
doctor "$good" "$SCRATCH/garbage.h5" "text('deck', 'garbage')"
doctor "$good" "$SCRATCH/empty.h5" "text('deck', '')"
doctor "$good" "$SCRATCH/lying.h5" "text('deck', a['deck'].decode().replace('seed = 1\n', 'seed = 11\n'))"
for f in garbage empty lying; do
    case $f in lying) pat="/state has seed 1, but its deck says train.seed = 11" ;; *) pat="/state has no readable deck" ;; esac
    expect_refused "resume under the deck's seed (11) of a checkpoint of seed 1 whose /state deck is $f" "$pat" \
        T --set train.steps=6 --out "$SCRATCH/r_$f" --resume "$SCRATCH/$f.h5"
done
expect_refused "inspect: a garbage deck in /state" "/state has no readable deck" "$MINDPIPE" inspect "$SCRATCH/garbage.h5"
expect_refused "resume under the deck's seed (11) of the good checkpoint (seed 1), without --set" \
    "written with train.seed = 1; this run's deck says train.seed = 11" T --set train.steps=6 --out "$SCRATCH/r_seed" --resume "$good"
mkdir -p "$SCRATCH/r_set/ckpt" && cp "$good" "$SCRATCH/r_set/ckpt/"
T --set train.steps=6 --set "train.seed = 7" --out "$SCRATCH/r_set" --resume auto > "$SCRATCH/r_set.out" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "train.seed changed from 1 (the checkpoint's run) to 7" "$SCRATCH/r_set.out" &&
    grep -q "resumed from .*step_00000004.h5 at step 4" "$SCRATCH/r_set/log.txt"
ok $? "--set \"train.seed = 7\" (spaces) is a deliberate change: warned, resumed (exit $rc)"
[ $rc -eq 0 ] || sed 's/^/#   /' "$SCRATCH/r_set.out" | head -n 6
done_testing
