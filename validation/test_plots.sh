#!/bin/sh
# validation/plot_run.py draws a real run directory (ARCHITECTURE.md §9, issue 18): a 2-rank pp = 2
# run gives loss, throughput, memory and timeline PNGs (valid files of a real size), the timeline
# has a row per rank and picks the step asked for; a missing metrics.jsonl is an error naming it, a
# missing trace.json skips only the timeline and says why, a step the trace lacks is an error.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
MPIEXEC=${MPIEXEC:-mpiexec}
PLOT="$MP_SRCDIR/validation/plot_run.py"
R="$SCRATCH/run"
# P OUT [args]: plot_run.py's stdout and stderr in $SCRATCH/OUT.out, its exit in rc
P() { o=$1; shift; "$TORCH_PYTHON" "$PLOT" "$@" > "$SCRATCH/$o.out" 2>&1; rc=$?; }
has() { grep -q -- "$2" "$SCRATCH/$1.out" || { diag "$1.out:"; sed 's/^/#   /' "$SCRATCH/$1.out"; return 1; }; }

# train.ini: 20 steps, evaluation and a checkpoint at steps 10 and 20 (trace steps 9 and 19)
$MPIEXEC -n 2 "$MINDPIPE" train -c "$MP_SRCDIR/validation/decks/train.ini" --set data.path="$data" \
    --set parallel.pp=2 --set train.threads=1 --quiet --out "$R" > "$SCRATCH/train.out" 2>&1
ok $? "a 2-rank pp=2 run"
[ -s "$R/metrics.jsonl" ] && [ -s "$R/trace.json" ]; ok $? "the run wrote metrics.jsonl and trace.json"

P all "$R" --out "$SCRATCH/plots"
[ $rc -eq 0 ]; ok $? "plot_run.py draws the run (exit $rc)"
[ $rc -eq 0 ] || sed 's/^/#   /' "$SCRATCH/all.out"
for f in loss throughput memory timeline; do
    png="$SCRATCH/plots/$f.png"
    magic=$(head -c 8 "$png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
    size=$(wc -c 2>/dev/null < "$png" || echo 0)
    [ "$magic" = 89504e470d0a1a0a ] && [ "$size" -gt 10000 ] && [ "$size" -lt 200000 ]
    ok $? "$f.png is a PNG of 10-200 kB (magic $magic, $size bytes)"
    grep -qx -- "$png" "$SCRATCH/all.out"; ok $? "and its path is printed"
done
# the default step: the last one every rank finished without an evaluation or a checkpoint
has all "timeline.png: step 18, 2 rows"; ok $? "the timeline draws trace step 18 with one row per rank"

P step0 "$R" --out "$SCRATCH/plots0" --step 0
[ $rc -eq 0 ] && has step0 "timeline.png: step 0, 2 rows"; ok $? "--step 0 draws the first step (exit $rc)"

P nostep "$R" --out "$SCRATCH/plots1" --step 999
[ $rc -ne 0 ] && has nostep "$R/trace.json: no spans of step 999"
ok $? "--step 999 is an error naming trace.json (exit $rc)"

mkdir -p "$SCRATCH/nometrics" && cp "$R/deck.ini" "$R/trace.json" "$SCRATCH/nometrics/"
P nometrics "$SCRATCH/nometrics" --out "$SCRATCH/plots2"
[ $rc -ne 0 ] && has nometrics "$SCRATCH/nometrics/metrics.jsonl: no such file"
ok $? "a run directory without metrics.jsonl is an error naming it (exit $rc)"
[ ! -e "$SCRATCH/plots2/loss.png" ]; ok $? "and draws nothing"

mkdir -p "$SCRATCH/notrace" && cp "$R/deck.ini" "$R/metrics.jsonl" "$SCRATCH/notrace/"
P notrace "$SCRATCH/notrace"
[ $rc -eq 0 ] && has notrace "skipping timeline.png: .*trace.json is absent" && has notrace "no deck key"
ok $? "without trace.json the timeline is skipped, saying why and how to get one (exit $rc)"
[ -s "$SCRATCH/notrace/plots/loss.png" ] && [ ! -e "$SCRATCH/notrace/plots/timeline.png" ]
ok $? "and the other plots go to RUN_DIR/plots by default"

done_testing
