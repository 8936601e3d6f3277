#!/bin/sh
# shellcheck disable=SC1091,SC2010,SC2086,SC2116,SC2154  # lib.sh (sourced) sets tap_n/tap_failed
# Bitwise regression check of a new mindpipe build against a reference build (run by hand, not in CI).
#
#   sh validation/bitwise_vs.sh REF_BINARY NEW_BINARY DATA_H5 [SCRATCH_DIR]
#
# Trains validation/decks/train.ini with both binaries in each layout below (the 11 parallel layouts,
# a supernet, offload across a pipeline, mixed blocks; a checkpoint every 5 of the deck's 20 steps,
# so 4 checkpoints) and demands, per layout:
#   - both runs succeed;
#   - NEW wrote the same set of checkpoint files as REF;
#   - validation/compare_runs.py --bitwise passes at EVERY checkpoint step of REF (losses, grad
#     norms and every model / optimizer tensor identical);
#   - metrics.jsonl is identical line by line once the timing fields are dropped (tokens_per_s, mfu,
#     bubble, elapsed_s, eta_s, and any key that names a duration or rate); peak_mem_bytes, stash_peak,
#     bubble_theory, lr, val_loss ... must be equal.
# Then both builds generate (sampled) from the first layout's last checkpoint: the same bytes.
# Prints TAP; exits non-zero if any check fails. SCRATCH_DIR (kept) defaults to a temporary
# directory removed at exit. Environment: MPIEXEC (default mpiexec), PYTHON (default
# /usr/bin/python3, which needs h5py and numpy). Takes about a minute on 2 cores.
# The same binary given twice checks run-to-run determinism.
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: sh $0 REF_BINARY NEW_BINARY DATA_H5 [SCRATCH_DIR]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"    # ok, diag, done_testing; exports OMP_WAIT_POLICY=PASSIVE

REF_BIN=$1
NEW_BIN=$2
DATA=$3
DECK=$here/decks/train.ini
MPIEXEC=${MPIEXEC:-mpiexec}
PY=${PYTHON:-/usr/bin/python3}
CKPT_EVERY=5

for f in "$REF_BIN" "$NEW_BIN"; do
    [ -x "$f" ] || { echo "bitwise_vs.sh: not an executable: $f" >&2; exit 2; }
done
[ -r "$DATA" ] || { echo "bitwise_vs.sh: no data file: $DATA" >&2; exit 2; }
[ -r "$DECK" ] || { echo "bitwise_vs.sh: no deck: $DECK" >&2; exit 2; }
mp_require_h5py "$PY" # compare_runs.py reads the checkpoints

if [ $# -eq 4 ]; then
    SCR=$4
    mkdir -p "$SCR" || exit 2
else
    SCR=$(mktemp -d "${TMPDIR:-/tmp}/bitwise_vs.XXXXXX") || exit 2
    trap 'rm -rf "$SCR"' EXIT
    trap 'exit 130' INT TERM
fi

diag "ref: $REF_BIN"
diag "new: $NEW_BIN"
diag "data: $DATA   deck: $DECK   scratch: $SCR"

# train BINARY RANKS OUTDIR [--set ...]: one run into OUTDIR, its output in OUTDIR.log.
train() {
    bin=$1; n=$2; out=$3; shift 3
    rm -rf "$out" "$out.log"
    $MPIEXEC -n "$n" "$bin" train -c "$DECK" --set data.path="$DATA" --set train.log_every=1 \
        --set train.threads=1 --set checkpoint.every=$CKPT_EVERY --quiet --out "$out" "$@" > "$out.log" 2>&1
}

# log_tail FILE: the end of a log as TAP diagnostics.
log_tail() {
    diag "tail of $1:"
    tail -n 25 "$1" 2>/dev/null | sed 's/^/#   /'
}

# ckpts DIR: the checkpoint file names of a run, one a line, sorted.
ckpts() {
    ls "$1/ckpt" 2>/dev/null | grep -E '^step_[0-9]{8}\.h5$' | LC_ALL=C sort
}

# same_metrics REF RUN: metrics.jsonl line by line without the timing fields.
same_metrics() {
    "$PY" - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'EOF'
import json, re, sys
TIMING = {"tokens_per_s", "mfu", "bubble", "elapsed_s", "eta_s"}  # wall-clock fields
TIMING_RE = re.compile(r"(^|_)(seconds|secs|sec|time|ms|per_s|wait|s_per_step)$")  # any other duration or rate
def rows(path):
    out, dropped = [], set()
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        for k in [k for k in r if k in TIMING or TIMING_RE.search(k)]:
            dropped.add(k)
            del r[k]
        out.append(json.dumps(r, sort_keys=True))   # float repr round-trips: equal text = equal bits
    return out, dropped
a, da = rows(sys.argv[1])
b, db = rows(sys.argv[2])
bad = 0
if len(a) != len(b):
    print(f"line counts differ: ref {len(a)}, new {len(b)}")
    bad = 1
for i, (x, y) in enumerate(zip(a, b), 1):
    if x != y:
        print(f"first difference at line {i}:\n  ref {x}\n  new {y}")
        bad = 1
        break
if not a:
    print("ref metrics.jsonl is empty")
    bad = 1
print(f"{len(a)} lines compared; dropped: {', '.join(sorted(da | db))}")
sys.exit(bad)
EOF
}

# layout NAME RANKS [--set ...]: train with both binaries and compare.
layout() {
    name=$1; n=$2; shift 2
    ref=$SCR/ref/$name
    new=$SCR/new/$name
    mkdir -p "$SCR/ref" "$SCR/new"

    train "$REF_BIN" "$n" "$ref" "$@"; rc_ref=$?
    ok $rc_ref "$name: ref run ($n ranks)${*:+ $*}"
    [ $rc_ref -eq 0 ] || log_tail "$ref.log"
    train "$NEW_BIN" "$n" "$new" "$@"; rc_new=$?
    ok $rc_new "$name: new run ($n ranks)${*:+ $*}"
    [ $rc_new -eq 0 ] || log_tail "$new.log"
    if [ $rc_ref -ne 0 ] || [ $rc_new -ne 0 ]; then
        ok 1 "$name: comparison skipped, a run failed"
        return
    fi

    steps=$(ckpts "$ref" | sed 's/^step_0*\([0-9][0-9]*\)\.h5$/\1/')
    nck=$(echo $steps | wc -w)
    [ "$(ckpts "$ref")" = "$(ckpts "$new")" ] && [ "$nck" -ge 2 ]
    rc=$?
    ok $rc "$name: same $nck checkpoint files (steps $(echo $steps))"
    if [ $rc -ne 0 ]; then
        diag "ref ckpt/: $(ckpts "$ref" | tr '\n' ' ')"
        diag "new ckpt/: $(ckpts "$new" | tr '\n' ' ')"
    fi
    for s in $steps; do
        [ -f "$new/ckpt/$(printf 'step_%08d.h5' "$s")" ] || { ok 1 "$name: step $s: no checkpoint in new run"; continue; }
        "$PY" "$here/compare_runs.py" "$ref" "$new" --bitwise --step "$s" > "$SCR/cmp.out" 2>&1
        rc=$?
        npass=$(grep -c '^PASS ' "$SCR/cmp.out")
        ok $rc "$name: step $s bitwise (compare_runs: $npass PASS)"
        [ $rc -eq 0 ] || sed 's/^/#   /' "$SCR/cmp.out"
    done
    same_metrics "$ref" "$new" > "$SCR/met.out" 2>&1
    rc=$?
    ok $rc "$name: metrics.jsonl identical without timing fields ($(tail -n 1 "$SCR/met.out"))"
    [ $rc -eq 0 ] || sed 's/^/#   /' "$SCR/met.out"
}

t0=$(date +%s)
layout one       1
layout dp2z      2 --set parallel.dp=2 --set parallel.zero=1
layout tp2       2 --set parallel.tp=2
layout pp2_1f1b  2 --set parallel.pp=2 --set parallel.schedule=1f1b
layout pp2_2bw   2 --set parallel.pp=2 --set parallel.schedule=2bw
layout pp2_il    2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 \
    --set model.layers=4
layout dp2tp2pp2 8 --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2
layout emu       1 --set train.device=emu
layout emu_pp2   2 --set train.device=emu --set parallel.pp=2
layout dp2       2 --set parallel.dp=2
layout one_2bw   1 --set parallel.schedule=2bw
# a supernet (a skip candidate among them), a memory policy across a pipeline, and blocks of mixed shape
layout supernet  1 --set model.layers=4 --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip \
    --set supernet.window=1
layout pp2_offl  2 --set parallel.pp=2 --set memory.policy=offload
layout blocks    1 --set model.layers=4 --set model.blocks=h4m4,h2m1,skip,h2m2
# a completion from the last checkpoint of the first layout: the decoder both builds serve with (no
# checkpoint, or a generate that fails, is a failed check, not an absent one)
s=$(ckpts "$SCR/ref/one" | tail -n 1)
gen_rc=""
for side in ref new; do
    bin=$REF_BIN; [ $side = new ] && bin=$NEW_BIN
    "$bin" generate -c "$DECK" --set data.path="$DATA" --ckpt "$SCR/ref/one/ckpt/$s" --prompt "And God said" \
        --max-tokens 48 --temperature 0.8 --top-k 20 --seed 3 > "$SCR/gen.$side" 2> "$SCR/gen.$side.err"
    gen_rc="$gen_rc $?"
done
[ -n "$s" ] && [ "$gen_rc" = " 0 0" ] && [ -s "$SCR/gen.ref" ] && cmp -s "$SCR/gen.ref" "$SCR/gen.new"
ok $? "generate from one/${s:-(no checkpoint)} (48 tokens, sampled): the same bytes from both builds (exits$gen_rc)"
diag "$tap_failed of $tap_n checks failed; $(( $(date +%s) - t0 )) s"
done_testing
