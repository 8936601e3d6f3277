#!/bin/sh
# Files a run did not write are moved aside, never replaced (docs/RELIABILITY.md "What is promised",
# issue 31): another run's checkpoint copied into RUN/ckpt under the name of a step this run then
# writes is moved to RUN/ckpt/foreign-TIME/, byte for byte, with a log line; --restart moves the
# earlier run's log.txt and metrics.jsonl aside with its checkpoints (ckpt.old-TIME/), so the new
# run's logs hold its own steps once. One rank, runs of 2 to 4 steps of the tiny deck.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
S="--set train.threads=1 --set train.warmup=1 --set train.eval_every=0 --set train.log_every=1 --set checkpoint.every=2"
# T OUT [args]: one rank, output in $SCRATCH/OUT.out (stdout and stderr)
T() { o=$1; shift; "$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet $S --out "$SCRATCH/$o" "$@" > "$SCRATCH/$o.out" 2>&1; }
has() { grep -q -- "$2" "$SCRATCH/$1" || { diag "$1:"; sed 's/^/#   /' "$SCRATCH/$1"; return 1; }; }
ck() { echo "$SCRATCH/$1/ckpt/step_$(printf %08d "$2").h5"; }

# ---- another run's step 4 in this run's ckpt/, then this run writes its own step 4 ----
T a --set train.steps=2; ra=$?
T b --set train.steps=4 --set train.seed=99; rb=$?
cp "$(ck b 4)" "$(ck a 4)"
T a --set train.steps=4 --resume auto; rc=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] && [ $rc -eq 0 ] && has a.out "skipping .*step_00000004.h5: it belongs to another run" &&
    grep -q "resumed from .*step_00000002.h5" "$SCRATCH/a/log.txt"
ok $? "the resume skips the foreign step 4 and resumes this run's step 2 (exits $ra $rb $rc)"
aside=$(ls "$SCRATCH/a/ckpt/"foreign-*/step_00000004.h5 2>/dev/null | head -n 1)
[ -n "$aside" ] && cmp -s "$aside" "$(ck b 4)"
ok $? "the foreign step 4 is not replaced: moved to ckpt/foreign-TIME/, byte for byte (${aside:-none})"
has a/log.txt "step_00000004.h5 is not a checkpoint of this run (it belongs to another run .*): moved to .*foreign-.*/step_00000004.h5"
ok $? "the log says which file was moved where, and why"
[ -e "$(ck a 4)" ] && ! cmp -s "$(ck a 4)" "$(ck b 4)"
ok $? "this run's own step 4 is written in its place"
T a --set train.steps=4 --resume auto; rc=$?
[ $rc -eq 0 ] && grep -q "resumed from .*step_00000004.h5" "$SCRATCH/a.out" "$SCRATCH/a/log.txt" && ! grep -q skipping "$SCRATCH/a.out"
ok $? "and it is this run's: a resume takes it without skipping anything (exit $rc)"

# ---- --restart: the logs go aside with the checkpoints ----
T c --set train.steps=3; r1=$?
T c --set train.steps=3 --restart; r2=$?
old=$(ls -d "$SCRATCH/c/ckpt.old-"* 2>/dev/null | head -n 1)
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ "$(grep -c '"step":' "$SCRATCH/c/metrics.jsonl")" -eq 3 ] &&
    [ "$(grep -c '"step":1,' "$SCRATCH/c/metrics.jsonl")" -eq 1 ]
ok $? "after --restart, metrics.jsonl holds the new run's steps 1-3 once each (exits $r1 $r2)"
[ -n "$old" ] && [ "$(grep -c '"step":' "$old/metrics.jsonl")" -eq 3 ] && [ -e "$old/step_00000002.h5" ] &&
    [ "$(grep -c '^mindpipe train:' "$old/log.txt")" -eq 1 ]
ok $? "the earlier run's metrics.jsonl and log.txt are in ${old:-ckpt.old-TIME} with its checkpoints"
[ "$(grep -c '^mindpipe train:' "$SCRATCH/c/log.txt")" -eq 1 ] && has c/log.txt "--restart: .*log.txt, metrics.jsonl moved to $old"
ok $? "the new log.txt holds one run and says what was moved where"
done_testing
