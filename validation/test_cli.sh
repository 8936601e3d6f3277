#!/bin/sh
# Bad input is refused with a message that names the file, key or rule, and a non-zero exit;
# nothing good is overwritten.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it edits checkpoints with h5py
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"

# expect_fail DESCRIPTION PATTERN COMMAND... : non-zero exit and PATTERN in stderr
expect_fail() {
    what=$1; pat=$2; shift 2
    "$@" > "$SCRATCH/out" 2> "$SCRATCH/err"; rc=$?
    if [ $rc -ne 0 ] && grep -q -- "$pat" "$SCRATCH/err"; then ok 0 "$what"
    else ok 1 "$what"; diag "exit $rc; stderr:"; sed 's/^/#   /' "$SCRATCH/err"; fi
}
T() { "$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet --out "$SCRATCH/run" "$@"; }

expect_fail "unknown key names the key" "model.layer" T --set model.layer=3
expect_fail "unparsable value names the key" "train.lr" T --set train.lr=fast
expect_fail "an absurd weight decay is refused naming the key" "train.weight_decay" T --set train.weight_decay=5
expect_fail "dim not divisible by heads is refused" "heads" T --set model.heads=5
expect_fail "batch not divisible by micro_batch is refused" "micro_batch" T --set train.micro_batch=3
expect_fail "a layout that does not match the job's ranks names the rule" "ranks" T --set parallel.dp=2
expect_fail "missing data file names the file" "nope.h5" T --set data.path="$SCRATCH/nope.h5"
printf 'not hdf5\n' > "$SCRATCH/bad.h5"
expect_fail "a data file that is not HDF5 names the file" "bad.h5" T --set data.path="$SCRATCH/bad.h5"
expect_fail "missing deck file names it" "missing.ini" "$MINDPIPE" train -c "$SCRATCH/missing.ini"
printf '[model]\nlayers = 2\n[bogus]\nx = 1\n' > "$SCRATCH/bogus.ini"
expect_fail "unknown section names it" "bogus" "$MINDPIPE" train -c "$SCRATCH/bogus.ini" --set data.path="$data"
expect_fail "vocab larger than the model's is refused" "vocab" T --set model.vocab=100
expect_fail "unknown command" "unknown command" "$MINDPIPE" frobnicate
expect_fail "prep of a missing text file names it" "absent.txt" "$MINDPIPE" prep --text "$SCRATCH/absent.txt" --out "$SCRATCH/x.h5"
expect_fail "inspect of a missing file names it" "absent.h5" "$MINDPIPE" inspect "$SCRATCH/absent.h5"
expect_fail "generate of a missing checkpoint names it" "absent.h5" "$MINDPIPE" generate -c "$deck" --ckpt "$SCRATCH/absent.h5" --prompt x
expect_fail "generate without --prompt names it" "prompt" "$MINDPIPE" generate -c "$deck" --ckpt "$SCRATCH/absent.h5"
expect_fail "serve beyond loopback is refused" "loopback only" "$MINDPIPE" serve -c "$deck" --ckpt "$SCRATCH/absent.h5" --listen 0.0.0.0:8080
expect_fail "device_limit too small is refused naming the limit" "device_limit" T --set memory.device_limit=64K

"$MINDPIPE" sim --schedule 1f1b --pp 4 --m 8 > "$SCRATCH/sim.out" 2>&1 && grep -q "valid" "$SCRATCH/sim.out" \
    && grep -q "bubble 0.2727" "$SCRATCH/sim.out" && grep -q "stage 0: peak stashed micro-batches 4" "$SCRATCH/sim.out"
ok $? "mindpipe sim: 1f1b pp=4 m=8 is valid, bubble 3/11, stage 0 stashes 4 micro-batches"
"$MINDPIPE" sim --schedule interleaved --pp 4 --m 6 --v 2 > "$SCRATCH/sim.out" 2>&1
[ $? -ne 0 ] && grep -q "multiple of parallel.pp" "$SCRATCH/sim.out"
ok $? "mindpipe sim refuses interleaved with m not a multiple of pp, naming the rule"
"$MINDPIPE" sim --schedule zb1p --pp 4 --m 8 > "$SCRATCH/sim.out" 2>&1 && grep -q "NCCL's order" "$SCRATCH/sim.out" \
    && grep -q "bubble 0.1111" "$SCRATCH/sim.out" && grep -q "1f1b, same pp, m and times: bubble 0.2727" "$SCRATCH/sim.out"
ok $? "mindpipe sim: zb1p pp=4 m=8 valid under both rules, bubble 1/9 beside 1f1b's 3/11"
"$MINDPIPE" sim --schedule zbv --pp 4 --m 8 --costs 1,1,1 > "$SCRATCH/sim.out" 2>&1 \
    && grep -q "peak stash 4.00 stage units; zbv: bubble 0.0588, peak stash 4.00" "$SCRATCH/sim.out"
ok $? "mindpipe sim: zbv pp=4 m=8 --costs 1,1,1: bubble 1.5/25.5, 1f1b's peak stash"
"$MINDPIPE" sim --schedule dualpipev --pp 4 --m 6 > "$SCRATCH/sim.out" 2>&1
[ $? -ne 0 ] && grep -q "at least 2 × parallel.pp = 8 micro-batches" "$SCRATCH/sim.out"
ok $? "mindpipe sim refuses dualpipev with fewer than 2 pp micro-batches, naming the rule"
expect_fail "sim --costs refuses what is not three positive times" "not three positive times" \
    "$MINDPIPE" sim --schedule zb1p --pp 2 --m 4 --costs 1,2
expect_fail "a dualpipev run with fewer than 2pp micro-batches is refused naming the rule" \
    "parallel.schedule=dualpipev needs at least 2 × parallel.pp = 4 micro-batches per step" \
    T --set parallel.schedule=dualpipev --set parallel.pp=2 --set train.micro_batch=8
"$MINDPIPE" sim --swap > "$SCRATCH/swap.out" 2>&1 &&
    awk -F'|' '/^\| [248] \|/ { n++; if ($5 + 0 < 1) bad++ } END { exit !(n == 6 && !bad) }' "$SCRATCH/swap.out"
ok $? "mindpipe sim --swap: both layouts at 2, 4, 8 ranks, coordinated never slower"

# Files: a temporary is never written through a link left under its name (the run directory's
# deck.ini.tmp and a checkpoint's .tmp), and a target that is not a regular file is refused, never
# replaced (a pipe, a symbolic link).
mkdir -p "$SCRATCH/lnk/ckpt" && echo keep > "$SCRATCH/victim1" && echo keep > "$SCRATCH/victim2"
ln -s "$SCRATCH/victim1" "$SCRATCH/lnk/deck.ini.tmp" && ln -s "$SCRATCH/victim2" "$SCRATCH/lnk/ckpt/step_00000010.h5.tmp"
"$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet --out "$SCRATCH/lnk" > "$SCRATCH/lnk.out" 2>&1 &&
    [ "$(cat "$SCRATCH/victim1")" = keep ] && [ "$(cat "$SCRATCH/victim2")" = keep ] &&
    [ -f "$SCRATCH/lnk/deck.ini" ] && [ ! -L "$SCRATCH/lnk/deck.ini" ] &&
    "$MINDPIPE" inspect "$SCRATCH/lnk/ckpt/step_00000010.h5" > /dev/null 2>&1
ok $? "links named deck.ini.tmp and step_00000010.h5.tmp: the run writes its own files, the links' targets untouched"
printf 'In the beginning\n%.0s' $(seq 1 200) > "$SCRATCH/small.txt"
mkfifo "$SCRATCH/pipe.h5"
expect_fail "prep onto a pipe is refused, naming it" "refusing to replace $SCRATCH/pipe.h5: it is a device, pipe or socket" \
    "$MINDPIPE" prep --text "$SCRATCH/small.txt" --out "$SCRATCH/pipe.h5"
[ -p "$SCRATCH/pipe.h5" ] && [ -z "$(find "$SCRATCH" -maxdepth 1 -name '*pipe.h5.tmp*')" ]
ok $? "the pipe is still a pipe and no temporary is left"
echo keep > "$SCRATCH/victim3" && ln -s "$SCRATCH/victim3" "$SCRATCH/link.h5"
expect_fail "prep onto a symbolic link is refused" "symbolic link" "$MINDPIPE" prep --text "$SCRATCH/small.txt" --out "$SCRATCH/link.h5"
[ -L "$SCRATCH/link.h5" ] && [ "$(cat "$SCRATCH/victim3")" = keep ]
ok $? "the link and its target are as they were"

# Corrupt checkpoints: refused, never half-loaded; resume auto falls back to the good one.
T --set train.steps=4 --set train.warmup=1 --set checkpoint.every=2 > /dev/null 2>&1
ok $? "a short run with checkpoints at steps 2 and 4"
cp "$SCRATCH/run/ckpt/step_00000004.h5" "$SCRATCH/good4.h5"
size=$(stat -c %s "$SCRATCH/run/ckpt/step_00000004.h5")
head -c $((size / 2)) "$SCRATCH/good4.h5" > "$SCRATCH/run/ckpt/step_00000004.h5"
expect_fail "a truncated checkpoint is refused naming the file" "step_00000004.h5" T --set train.steps=6 --resume "$SCRATCH/run/ckpt/step_00000004.h5"
T --set train.steps=6 --resume auto > "$SCRATCH/auto.out" 2> "$SCRATCH/auto.err"
ok $? "resume auto skips the truncated newest checkpoint"
grep -q "step_00000004.h5" "$SCRATCH/auto.err" && grep -q "resumed from .*step_00000002.h5" "$SCRATCH/run/log.txt"
ok $? "and says which it skipped and which it used"
"$TORCH_PYTHON" - "$SCRATCH/good4.h5" "$SCRATCH/flip.h5" <<'PY'
import shutil, sys, h5py
src, dst = sys.argv[1], sys.argv[2]
shutil.copy(src, dst)
with h5py.File(dst, 'r') as f:
    off = f['/model/h.0.attn.qkv.w'].id.get_offset()
with open(dst, 'r+b') as f:
    f.seek(off + 100); b = f.read(1); f.seek(off + 100); f.write(bytes([b[0] ^ 0x40]))
PY
expect_fail "a flipped byte in a tensor is refused naming the tensor" "h.0.attn.qkv.w" T --set train.steps=6 --resume "$SCRATCH/flip.h5"
expect_fail "a checkpoint of another model shape is refused naming the field" "dim" T --set model.dim=64 --set model.heads=4 --resume "$SCRATCH/good4.h5"
# /state that cannot be: a negative step, adam_t above step; and a step past train.steps.
for case in "neg step -1" "adam adam_t 9" "past step 30"; do
    # shellcheck disable=SC2086
    set -- $case
    "$TORCH_PYTHON" -c "
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], 'r+') as f:
    a = f['state'].attrs
    batch = a['data_cursor'] // a['step']
    a.modify(sys.argv[3], np.int64(int(sys.argv[4])))
    if sys.argv[3] == 'step' and int(sys.argv[4]) > 0:  # a consistent /state (adam_t = step, cursor = step x batch)
        a.modify('adam_t', np.int64(int(sys.argv[4])))
        a.modify('data_cursor', np.int64(int(sys.argv[4]) * batch))
" "$SCRATCH/good4.h5" "$SCRATCH/state_$1.h5" "$2" "$3"
    [ "$1" = neg ] && cp "$SCRATCH/state_neg.h5" "$SCRATCH/state_unsealed.h5"
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/filesum_reseal.py" "$SCRATCH/state_$1.h5"
done
expect_fail "a /state edited after the write (not resealed) is refused by the file checksum" "checksum" \
    "$MINDPIPE" inspect "$SCRATCH/state_unsealed.h5"
expect_fail "a negative step is refused as a corrupt /state (no crash)" "/state is impossible (step -1" \
    T --set train.steps=6 --resume "$SCRATCH/state_neg.h5"
expect_fail "adam_t above step is refused" "/state is impossible (step 4, adam_t 9" T --set train.steps=6 --resume "$SCRATCH/state_adam.h5"
expect_fail "inspect reports an impossible /state" "/state is impossible" "$MINDPIPE" inspect "$SCRATCH/state_neg.h5"
expect_fail "a checkpoint past train.steps is refused, naming both" "is at step 30, past train.steps=6" \
    T --set train.steps=6 --resume "$SCRATCH/state_past.h5"
# every command of the table (mindpipe --help lists them): --help prints its usage on stdout, exit 0
cmds=$("$MINDPIPE" --help | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p; s/^  \([a-z][a-z-]*\)$/\1/p')
[ "$(echo "$cmds" | wc -w)" -ge 17 ]
ok $? "mindpipe --help lists every command ($(echo $cmds))"
for cmd in $cmds; do
    "$MINDPIPE" "$cmd" --help > "$SCRATCH/help" 2>&1; rc=$?
    [ $rc -eq 0 ] && head -n 1 "$SCRATCH/help" | grep -q "^usage: mindpipe $cmd"
    ok $? "mindpipe $cmd --help prints its usage (exit $rc)"
done
# the command table's reference is docs/CLI.md, word for word
"$MINDPIPE" cli-reference > "$SCRATCH/cli.md" 2>&1 && cmp -s "$SCRATCH/cli.md" "$MP_SRCDIR/docs/CLI.md"
ok $? "docs/CLI.md is the output of mindpipe cli-reference (regenerate it when the table changes)"
# every value checked by its type and range, naming the command and the option, exit 2
expect_fail "an integer with trailing garbage is refused naming the option" "sim --pp: '3x' is not an integer" \
    "$MINDPIPE" sim --schedule 1f1b --pp 3x --m 4
expect_fail "a number with a leading space is refused, as in the deck (numparse.h)" "sim --pp: ' 3' is not an integer" \
    "$MINDPIPE" sim --schedule 1f1b --pp " 3" --m 4
expect_fail "an integer too large for any type is refused" "sim --m: '99999999999999999999' is not an integer" \
    "$MINDPIPE" sim --schedule 1f1b --pp 2 --m 99999999999999999999
expect_fail "an integer out of its range is refused with the range" "sim --m: 0 is outside \[1, 1048576\]" \
    "$MINDPIPE" sim --schedule 1f1b --pp 2 --m 0
expect_fail "a number that is not one is refused" "search --mutation: 'often' is not a number" \
    "$MINDPIPE" search -c "$deck" --ckpt x.h5 --out "$SCRATCH/s" --mutation often
expect_fail "a number out of its range is refused" "generate --temperature: 500 is outside \[0, 100\]" \
    "$MINDPIPE" generate -c "$deck" --ckpt x.h5 --prompt hi --temperature 500
expect_fail "a negative seed is refused" "generate --seed: '-3' is not an integer in \[0, 2^64)" \
    "$MINDPIPE" generate -c "$deck" --ckpt x.h5 --prompt hi --seed -3
expect_fail "infinity is not a number here" "plan --tokens: 'inf' is not a number" \
    "$MINDPIPE" plan -c "$deck" --ranks 2 --tokens inf
expect_fail "an option without its value names it" "option --top K needs a value" "$MINDPIPE" plan -c "$deck" --top
# plan --layout's six numbers read whole, as every option's and deck value's are (numparse.h): atoi
# took "pp=2x" as 2 and planned a layout nobody asked for
for kv in pp=2x tp= "dp= 2" v=1.5 micro_batch=99999999999 zero=yes; do
    expect_fail "plan --layout $kv is refused naming the key and the value" "--layout ${kv%%=*}: '${kv#*=}' is not an integer" \
        "$MINDPIPE" plan -c "$deck" --layout "tp=1,$kv"
done
expect_fail "a required option missing is named with its placeholder" "prep needs --out DATA.h5" \
    "$MINDPIPE" prep --text "$SCRATCH/small.txt"
expect_fail "an option no command has is refused" "unknown option '--frobnicate' for 'train'" T --frobnicate 1
expect_fail "an out-of-range value in MINDPIPE_INIT_TIMEOUT is refused naming it" "MINDPIPE_INIT_TIMEOUT='soon'" \
    env MINDPIPE_INIT_TIMEOUT=soon "$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet --out "$SCRATCH/it"
"$MINDPIPE" train --help | grep -q -- "--restart .*ckpt.old-TIME"
ok $? "train --help explains its options"
expect_fail "an option that does not apply to the command is refused naming both" "option '--pp' does not apply to 'train'" \
    T --pp 2
# the progress line: elapsed time and ETA; the metrics: elapsed_s and eta_s
"$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.steps=4 --set train.warmup=1 --set train.log_every=2 --out "$SCRATCH/eta" \
    > "$SCRATCH/eta.out" 2>&1
grep -q "^step      4/4 | .* | elapsed [0-9]*s | eta 0s$" "$SCRATCH/eta.out" &&
    grep -q '"elapsed_s":[0-9.]*,"eta_s":0.0}' "$SCRATCH/eta/metrics.jsonl"
ok $? "the progress line shows elapsed time and ETA, the metrics elapsed_s and eta_s"
# a /val shorter than one window: a warning naming the file and the numbers, training goes on, no val_loss
"$TORCH_PYTHON" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r') as src, h5py.File(sys.argv[2], 'w') as f:
    for k, v in src.attrs.items(): f.attrs[k] = v
    f.create_dataset('train', data=src['train'][:20000]); f.create_dataset('val', data=src['val'][:10])
" "$data" "$SCRATCH/shortval.h5"
"$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/shortval.h5" --set train.steps=6 --set train.eval_every=2 \
    --quiet --out "$SCRATCH/shortval" > "$SCRATCH/out" 2> "$SCRATCH/err"; rc=$?
# (the metrics must reach step 6: a missing or cut-short file has no val_loss either)
[ $rc -eq 0 ] && grep -q "shortval.h5: /val has 10 tokens, fewer than model.seq_len+1 = 33" "$SCRATCH/err" &&
    grep -q '^{"step":6,"loss":' "$SCRATCH/shortval/metrics.jsonl" && ! grep -q val_loss "$SCRATCH/shortval/metrics.jsonl"
ok $? "a /val shorter than a window: warned naming the file and the counts, trained without val_loss (exit $rc)"
done_testing
