#!/bin/sh
# The run directory belongs to one run (ARCHITECTURE.md §7, issue 15): pruning deletes only this
# run's checkpoints that verify (never corrupt or foreign files, never the newest good one); a fresh
# run into a directory with checkpoints is refused unless --restart moves them aside; a second run on
# the same --out is refused naming the holder, a stale lock is taken over; --resume auto falls back
# past files that verify but do not fit the deck or belong to another run; a resume that changes
# train.seed is refused naming it; a stray argument is refused; stale temporaries are removed.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints with h5py
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
S="--set train.threads=1 --set train.warmup=1 --set train.eval_every=0 --set checkpoint.every=2"
# T OUT [args]: one rank, output in $SCRATCH/OUT.out (stdout and stderr)
T() { o=$1; shift; "$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet $S --out "$SCRATCH/$o" "$@" > "$SCRATCH/$o.out" 2>&1; }
has() { grep -q -- "$2" "$SCRATCH/$1.out" || { diag "$1.out:"; sed 's/^/#   /' "$SCRATCH/$1.out"; return 1; }; }
ck() { echo "$SCRATCH/$1/ckpt/step_$(printf %08d "$2").h5"; }

# ---- pruning: one good checkpoint, three truncated ones with higher steps, another run's newer one ----
T a --set train.steps=2; ok $? "run a: 2 steps, checkpoint at step 2"
T b --set train.steps=2 --set train.seed=99; ok $? "run b (another run): checkpoint at step 2"
for s in 20 30 40; do head -c 30000 "$(ck a 2)" > "$(ck a $s)"; cp "$(ck a $s)" "$SCRATCH/trunc$s.h5"; done
cp "$(ck b 2)" "$(ck a 50)" && cp "$(ck a 50)" "$SCRATCH/foreign50.h5"
T a --set train.steps=6 --set checkpoint.keep=2 --resume auto; rc=$?
[ $rc -eq 0 ] && grep -q "resumed from .*step_00000002.h5 at step 2" "$SCRATCH/a/log.txt"
ok $? "--resume auto skips the foreign step 50 and the truncated 40, 30, 20 and resumes the good step 2 (exit $rc)"
has a "skipping .*step_00000050.h5: it belongs to another run" && has a "skipping .*step_00000040.h5"
ok $? "and names each file it skipped and why"
[ -e "$(ck a 4)" ] && [ -e "$(ck a 6)" ] && [ ! -e "$(ck a 2)" ]
ok $? "checkpoint.keep=2 keeps this run's two newest good checkpoints (4, 6) and prunes step 2"
cmp -s "$(ck a 20)" "$SCRATCH/trunc20.h5" && cmp -s "$(ck a 30)" "$SCRATCH/trunc30.h5" &&
    cmp -s "$(ck a 40)" "$SCRATCH/trunc40.h5"
ok $? "the three truncated checkpoints are left untouched"
cmp -s "$(ck a 50)" "$SCRATCH/foreign50.h5"; ok $? "the other run's checkpoint is left untouched"
has a "leaving .*step_00000040.h5 alone" && has a "leaving .*step_00000050.h5 alone: it belongs to another run"
ok $? "pruning says which files it leaves alone and why"
[ "$(grep -c "leaving .*step_00000030.h5 alone" "$SCRATCH/a.out")" -eq 1 ]; ok $? "once per file, not at every checkpoint"
"$TORCH_PYTHON" -c "
import h5py,sys
ids={h5py.File(p,'r')['state'].attrs['run_id'] for p in sys.argv[1:3]}
want=open(sys.argv[3]).read().strip().encode()
sys.exit(0 if ids=={want} else 1)" "$(ck a 4)" "$(ck a 6)" "$SCRATCH/a/run_id"
ok $? "the resumed run's checkpoints carry the directory's run_id (RUN/run_id)"

# ---- a fresh run into a directory with checkpoints; --restart ----
ls "$SCRATCH/a/ckpt" > "$SCRATCH/before.ls"
T a --set train.steps=2; rc=$?
[ $rc -ne 0 ] && has a "$SCRATCH/a already holds .*step_00000050.h5" && has a "--resume auto" && has a "--restart"
ok $? "a fresh run into a directory with checkpoints is refused naming it, the newest file and the ways out"
ls "$SCRATCH/a/ckpt" | cmp -s - "$SCRATCH/before.ls" && [ ! -e "$SCRATCH/a/lock" ]
ok $? "and leaves the checkpoints and no lock behind"
old_id=$(cat "$SCRATCH/a/run_id")
T a --set train.steps=2 --restart; rc=$?
moved=$(ls -d "$SCRATCH/a/ckpt.old-"* 2>/dev/null | head -n 1)
# shellcheck disable=SC2010  # ls's listing against ls's listing: the names are step_*.h5, log.txt, metrics.jsonl
[ $rc -eq 0 ] && [ -n "$moved" ] && ls "$moved" | grep -v -x -e log.txt -e metrics.jsonl | cmp -s - "$SCRATCH/before.ls" &&
    [ -e "$(ck a 2)" ] &&
    [ "$(ls "$SCRATCH/a/ckpt")" = step_00000002.h5 ] && [ "$(cat "$SCRATCH/a/run_id")" != "$old_id" ]
ok $? "--restart moves every old checkpoint to ckpt.old-TIME/, starts over with a new run id (exit $rc)"

# ---- the lock ----
"$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet $S --out "$SCRATCH/lk" --set train.steps=1000000 \
    --set checkpoint.every=0 > "$SCRATCH/lk.out" 2>&1 &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q '"step":' "$SCRATCH/lk/metrics.jsonl" 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
T lk2 --resume auto --out "$SCRATCH/lk"; rc=$?
[ $rc -ne 0 ] && has lk2 "run directory $SCRATCH/lk is in use: locked by host $(hostname) pid $pid since"
ok $? "a second run on the same --out is refused naming the directory and the holder (exit $rc)"
kill -USR1 $pid; wait $pid; rc=$?
[ $rc -eq 75 ] && ls "$SCRATCH/lk/ckpt/"step_*.h5 > /dev/null 2>&1 && [ ! -e "$SCRATCH/lk/lock" ]
ok $? "the first run went on undisturbed: SIGUSR1 -> checkpoint, exit 75, lock released (exit $rc)"
mkdir -p "$SCRATCH/st" && echo "host=$(hostname) pid=999999999 started=2020-01-01T00:00:00+0000" > "$SCRATCH/st/lock"
T st --set train.steps=2; rc=$?
[ $rc -eq 0 ] && has st "taking over the stale lock .*pid 999999999" && [ ! -e "$SCRATCH/st/lock" ]
ok $? "a stale lock (its pid gone on this host) is taken over with a warning, released at the end (exit $rc)"
echo "host=elsewhere.example pid=1 started=2020-01-01T00:00:00+0000" > "$SCRATCH/st/lock"
T st --set train.steps=4 --resume auto; rc=$?
[ $rc -ne 0 ] && has st "locked by host elsewhere.example pid 1" && grep -q elsewhere "$SCRATCH/st/lock"
ok $? "a lock held from another host is not taken over: refused naming it (exit $rc)"
echo "host=elsewhere.example pid=1 started=2020-01-01T00:00:00+0000 job=4242" > "$SCRATCH/st/lock"
(SLURM_JOB_ID=4242; export SLURM_JOB_ID; T st --set train.steps=4 --resume auto); rc=$?
[ $rc -eq 0 ] && has st "an earlier attempt of this batch job (4242)" && [ ! -e "$SCRATCH/st/lock" ]
ok $? "a lock of another host but of this batch job (a requeued attempt) is taken over (exit $rc)"

# ---- --resume auto: past a newest file that verifies but does not fit the deck ----
T wide --set train.steps=4 --set model.dim=64; ok $? "run wide: model.dim=64, 4 steps"
mkdir -p "$SCRATCH/fit/ckpt" && cp "$(ck a 2)" "$(ck fit 2)" && cp "$(ck wide 4)" "$(ck fit 4)"
T fit --set train.steps=4 --resume auto; rc=$?
[ $rc -eq 0 ] && has fit "skipping .*step_00000004.h5: it has model.dim=64, the deck says 32" &&
    grep -q "resumed from .*step_00000002.h5 at step 2" "$SCRATCH/fit/log.txt"
ok $? "--resume auto falls back past a newest checkpoint of another model.dim, naming why (exit $rc)"
mkdir -p "$SCRATCH/none/ckpt" && cp "$(ck wide 4)" "$(ck none 4)"
T none --set train.steps=4 --resume auto; rc=$?
[ $rc -ne 0 ] && has none "none of the 1 checkpoint(s) in .* can be resumed" && has none "step_00000004.h5: it has model.dim=64"
ok $? "when none fits: an error listing each candidate and why (exit $rc)"

# ---- changed training semantics ----
sed 's/^seed = 11$/seed = 12/' "$deck" > "$SCRATCH/seed12.ini"
"$MINDPIPE" train -c "$SCRATCH/seed12.ini" --set data.path="$data" --quiet $S --out "$SCRATCH/a" \
    --set train.steps=4 --resume auto > "$SCRATCH/seed.out" 2>&1; rc=$?
[ $rc -ne 0 ] && has seed "train.seed = 11; this run's deck says train.seed = 12" && has seed "resume refused: train.seed"
ok $? "a resume whose deck changes train.seed is refused naming the key and both values (exit $rc)"
T a --set train.steps=4 --resume auto --set train.seed=12; rc=$?
[ $rc -eq 0 ] && has a "train.seed changed from 11 .* to 12"
ok $? "--set train.seed on the command line changes it on purpose: a warning naming it (exit $rc)"

# ---- arguments, temporaries ----
"$MINDPIPE" train -c "$deck" "$SCRATCH/stray" > "$SCRATCH/stray.out" 2>&1; rc=$?
[ $rc -ne 0 ] && has stray "unexpected argument '$SCRATCH/stray' for 'train'" && [ ! -e "$SCRATCH/stray" ]
ok $? "train -c DECK DIR: the stray argument is refused, naming it (exit $rc)"
: > "$SCRATCH/a/ckpt/step_00000008.h5.tmp" && : > "$SCRATCH/a/trace.json.tmp.4242" && : > "$SCRATCH/a/notes.tmp.txt"
T a --set train.steps=4 --set train.seed=12 --resume auto; rc=$?
[ $rc -eq 0 ] && [ ! -e "$SCRATCH/a/ckpt/step_00000008.h5.tmp" ] && [ ! -e "$SCRATCH/a/trace.json.tmp.4242" ] &&
    [ -e "$SCRATCH/a/notes.tmp.txt" ] && grep -q "removed .*step_00000008.h5.tmp" "$SCRATCH/a/log.txt"
ok $? "stale temporaries (NAME.tmp, NAME.tmp.PID) are removed at start and logged; other files stay; the run ends well (exit $rc)"
# ---- a torn last line (a run that ended on a failed write, a full disk): the resume mends it ----
# metrics.jsonl's half record is cut off (the resume's first record would otherwise share its line,
# and the line parse as neither); log.txt's half line is kept and ended with a newline
T torn --set train.steps=2 --set train.log_every=1; ok $? "run torn: 2 steps, checkpoint at step 2"
printf '{"step":3,"loss":3.1' >> "$SCRATCH/torn/metrics.jsonl"
printf 'step      3/4 | los' >> "$SCRATCH/torn/log.txt"
T torn --set train.steps=4 --set train.log_every=1 --resume auto; rc=$?
[ $rc -eq 0 ] && has torn "metrics.jsonl ended in a torn line of 20 bytes (a write that failed, e.g. a full disk): cut off" &&
    has torn "log.txt ended in a torn line" && grep -q "^step      3/4 | los$" "$SCRATCH/torn/log.txt" &&
    "$TORCH_PYTHON" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2, 3, 4], [r["step"] for r in rows]' "$SCRATCH/torn/metrics.jsonl"
ok $? "a torn metrics.jsonl line is cut off and a torn log.txt line ended, each said; every record parses (steps 1-4)"
done_testing
