# shellcheck shell=sh
# Shared helpers for the script tests (sourced). Tests print TAP and exit non-zero on failure.
# Environment from `make check`: MINDPIPE (the binary), MP_SRCDIR, MP_BUILDDIR, TORCH_PYTHON.
: "${MP_SRCDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${MP_BUILDDIR:=$MP_SRCDIR}"
: "${MINDPIPE:=$MP_BUILDDIR/src/mindpipe}"
: "${TORCH_PYTHON:=/usr/bin/python3}"
export OMP_WAIT_POLICY=PASSIVE

tap_n=0
tap_failed=0
ok() {   # ok CONDITION_EXIT_CODE "description"
    tap_n=$((tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"; else echo "not ok $tap_n - $2"; tap_failed=$((tap_failed + 1)); fi
}
diag() { echo "# $*"; }
done_testing() { echo "1..$tap_n"; [ "$tap_failed" -eq 0 ]; exit $?; }

# The bundled corpus as text and as a token file, made once per build tree: $MP_BUILDDIR/validation/
# kjv.txt (tests that tokenize it read it) and kjv.h5 (printed)
mp_test_data() {
    d="$MP_BUILDDIR/validation"
    mkdir -p "$d"
    [ -s "$d/kjv.txt" ] || sh "$MP_SRCDIR/inputs/make_kjv.sh" "$d/kjv.txt" || return 1
    if [ ! -s "$d/kjv.h5" ]; then
        "$MINDPIPE" prep --text "$d/kjv.txt" --out "$d/kjv.h5" >/dev/null || return 1
    fi
    echo "$d/kjv.h5"
}

# tap_lines LABEL FILE: FILE's "PASS what" and "FAIL what" lines (the checkers' output: compare_runs.py,
# torch_ref.py, serve_client.py) as TAP lines "LABEL: what", the others as diagnostics; tl_found
# is how many checks it found, tl_failed how many of them failed. A checker's output goes through
# tap_checker, never tap_lines alone: a checker that crashed has no FAIL line for what it never checked.
tap_lines() {
    tl_label=$1; tl_found=0; tl_failed=0
    while IFS= read -r line || [ -n "$line" ]; do
        case "$line" in
            "PASS "*) ok 0 "$tl_label: ${line#PASS }"; tl_found=$((tl_found + 1)) ;;
            "FAIL "*) ok 1 "$tl_label: ${line#FAIL }"; tl_found=$((tl_found + 1)); tl_failed=$((tl_failed + 1)) ;;
            *) diag "$line" ;;
        esac
    done < "$2"
}

# tap_checker LABEL CHECKER RC FILE: tap_lines LABEL FILE for CHECKER's output (FILE) and exit status
# (RC), then one failing line naming CHECKER, RC and the last line of its output when its verdict
# is missing: no PASS or FAIL line at all (an import error before the first check: h5py absent), an
# exit above 1 (a usage error, a signal, `timeout`'s 124), or a non-zero exit without a FAIL line (a
# traceback after some checks passed). Checkers exit 0 when every check passed, 1 when one failed.
tap_checker() {
    tc_label=$1; tc_name=$2; tc_rc=$3
    tap_lines "$tc_label" "$4"
    if [ "$tl_found" -eq 0 ] || [ "$tc_rc" -gt 1 ] || { [ "$tc_rc" -ne 0 ] && [ "$tl_failed" -eq 0 ]; }; then
        tc_tail=$(sed '/^[[:space:]]*$/d' "$4" 2>/dev/null | tail -n 1 | cut -c1-200)
        ok 1 "$tc_label: $tc_name exited $tc_rc after $tl_found check(s), $tl_failed failed: ${tc_tail:-no output}"
    fi
}

# The PyTorch reference's interpreter must import torch, h5py and numpy (CI installs them): else one
# failing check and the test ends. Call it before the test's first check.
mp_require_torch() {
    if ! mrt_err=$("$TORCH_PYTHON" -c "import torch, h5py, numpy" 2>&1); then
        echo "not ok 1 - $TORCH_PYTHON cannot import torch/h5py/numpy ($(echo "$mrt_err" | tail -n 1)): apt-get install python3-torch python3-h5py python3-numpy"
        echo "1..1"; exit 1
    fi
}

# mp_require_h5py [PYTHON]: a test that reads checkpoints through Python (compare_runs.py, h5py and
# numpy in the test) needs PYTHON (default $TORCH_PYTHON) to import h5py and numpy: else one failing
# check and the test ends, instead of comparisons silently absent. Call it before the first check.
mp_require_h5py() {
    mrh_py=${1:-$TORCH_PYTHON}
    if ! mrh_err=$("$mrh_py" -c "import h5py, numpy" 2>&1); then
        echo "not ok 1 - $mrh_py cannot import h5py/numpy ($(echo "$mrh_err" | tail -n 1)): apt-get install python3-h5py python3-numpy"
        echo "1..1"; exit 1
    fi
}

# Sets SCRATCH to a fresh directory under the build tree, removed at exit (call it directly,
# not in $(...): the trap must belong to the test's own shell).
mp_scratch_init() {
    mkdir -p "$MP_BUILDDIR/validation"
    SCRATCH=$(mktemp -d "$MP_BUILDDIR/validation/tmp.XXXXXX")
    trap 'rm -rf "$SCRATCH"' EXIT
}

# Layout tests (after mp_layout_helpers DECK): run RANKS OUT [--set ...] trains DECK into
# $SCRATCH/OUT under mpiexec;
# compare LABEL REF RUN [args] turns validation/compare_runs.py's lines into TAP lines (a crash or
# no verdict is a failing line too: call mp_require_h5py first);
# refused LABEL PATTERN RANKS [--set ...] expects a non-zero exit naming PATTERN.
mp_layout_helpers() {
    layout_deck=$1
    MPIEXEC=${MPIEXEC:-mpiexec}
}
run() {
    n=$1; out=$2; shift 2
    $MPIEXEC -n "$n" "$MINDPIPE" train -c "$layout_deck" --set data.path="$data" --set train.log_every=1 --quiet \
        --out "$SCRATCH/$out" "$@" > "$SCRATCH/$out.log" 2>&1
}
compare() {
    label=$1; shift
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/compare_runs.py" "$@" > "$SCRATCH/cmp.out" 2>&1
    tap_checker "$label" compare_runs.py $? "$SCRATCH/cmp.out"
}
# resumed_from LABEL OUT STEP: $SCRATCH/OUT/log.txt says that run resumed from a step-STEP checkpoint.
# A run given --resume auto that finds no checkpoint starts afresh, and a fresh run is bitwise its
# reference at the last step too: a comparison alone never shows that a resume happened.
resumed_from() {
    rsf_ck=$(printf 'step_%08d.h5' "$3")
    grep -q "resumed from .*$rsf_ck at step $3 (" "$SCRATCH/$2/log.txt" 2>/dev/null
    ok $? "$1: $2/log.txt says it resumed from $rsf_ck at step $3"
}
# resumed_count OUT STEP: how many runs in $SCRATCH/OUT/log.txt (which each run appends to) resumed
# from the step-STEP checkpoint; a test whose earlier run resumed there too counts before and after.
resumed_count() {
    rc_n=$(grep -c "resumed from .*$(printf 'step_%08d.h5' "$2") at step $2 (" "$SCRATCH/$1/log.txt" 2>/dev/null)
    echo "${rc_n:-0}"
}
# copy_overlaps_known: validation/copy_overlaps.py on a made-up trace.json counts its 8 copies and the
# 3 same-direction overlaps between ranks (three ranks' offloads at once), and none of its near misses
# (the other direction, one rank's own copies, copies that only touch, an "offload copy" off the
# copy-engine row; each would change the count): a "0 overlaps" from a real run means something only
# from a detector shown able to find one.
copy_overlaps_known() {
    mkdir -p "$SCRATCH/ovl_known"
    cat > "$SCRATCH/ovl_known/trace.json" <<'EOF'
{"traceEvents": [
 {"ph": "X", "tid": 1, "pid": 0, "name": "offload copy", "ts": 0, "dur": 10},
 {"ph": "X", "tid": 1, "pid": 1, "name": "offload copy", "ts": 5, "dur": 10},
 {"ph": "X", "tid": 1, "pid": 3, "name": "offload copy", "ts": 6, "dur": 2},
 {"ph": "X", "tid": 1, "pid": 0, "name": "offload copy", "ts": 15, "dur": 3},
 {"ph": "X", "tid": 1, "pid": 1, "name": "offload copy", "ts": 20, "dur": 10},
 {"ph": "X", "tid": 1, "pid": 0, "name": "prefetch copy", "ts": 22, "dur": 6},
 {"ph": "X", "tid": 1, "pid": 2, "name": "offload copy", "ts": 40, "dur": 10},
 {"ph": "X", "tid": 1, "pid": 2, "name": "offload copy", "ts": 45, "dur": 10},
 {"ph": "X", "tid": 0, "pid": 3, "name": "offload copy", "ts": 46, "dur": 10}
]}
EOF
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/copy_overlaps.py" "$SCRATCH/ovl_known" > "$SCRATCH/ovl_known.out" 2>&1
    [ "$(cut -d' ' -f2- "$SCRATCH/ovl_known.out")" = "8 3" ]
    ok $? "copy_overlaps.py finds the 3 overlaps of a made-up trace's 8 copies, none of its 4 near misses ($(cut -d' ' -f2- "$SCRATCH/ovl_known.out" | tail -n 1))"
}
# layouts_vs REF "RANKS NAME [--set ...]"...: trains each layout and compares it
# with $SCRATCH/REF within the layout-invariance tolerance.
layouts_vs() { lc_ref=$1; shift; layouts_cmp "" "$lc_ref" "" "$@"; }
# layouts_cmp FLAGS REF COMMON "RANKS NAME [--set ...]"...: the same with COMMON's options (split
# on spaces) before each layout's, compared under compare_runs.py's FLAGS ("" or --bitwise). Its
# variables are lc_*: a caller's names are left alone.
layouts_cmp() {
    lc_flags=$1; lc_ref=$2; lc_common=$3; shift 3
    for lc_layout in "$@"; do
        # shellcheck disable=SC2086
        set -- $lc_layout
        lc_n=$1; lc_name=$2; shift 2
        # shellcheck disable=SC2086
        run "$lc_n" "$lc_name" $lc_common "$@"; ok $? "$lc_name: $lc_n rank(s) $*"
        # shellcheck disable=SC2086
        compare "$lc_name vs $lc_ref" "$SCRATCH/$lc_ref" "$SCRATCH/$lc_name" $lc_flags
    done
}
# A run in which no rank printed a line of ours (the launcher's own failure) is tried once more,
# saying so; a failing check names the exit status and the output's first line, so that CI's list of
# failing tests shows why (seen once: ZeRO-1's 4-rank refusal failed in CI and nowhere else).
refused() {
    label=$1; pat=$2; n=$3; shift 3
    for rf_try in 1 2; do
        $MPIEXEC -n "$n" "$MINDPIPE" train -c "$layout_deck" --set data.path="$data" --quiet --out "$SCRATCH/bad" "$@" \
            > "$SCRATCH/bad.out" 2>&1; rc=$?
        grep -q "^mindpipe" "$SCRATCH/bad.out" && break
        echo "# refused: $label: try $rf_try: exit $rc and no line from mindpipe (the launcher's?):"
        sed 's/^/#   /' "$SCRATCH/bad.out"
    done
    if [ $rc -ne 0 ] && grep -q -- "$pat" "$SCRATCH/bad.out"; then
        ok 0 "refused: $label"
    else
        ok 1 "refused: $label (exit $rc: $(head -n 1 "$SCRATCH/bad.out" | cut -c 1-160))"
        sed 's/^/#   /' "$SCRATCH/bad.out"
    fi
}

# mp_serve_url DIR [PID]: a server's front-end address once DIR/serve.json exists (60 s at most; with
# PID, sooner if that process is gone). Empty when it never appears.
mp_serve_url() {
    msu_i=0
    while [ ! -s "$1/serve.json" ] && { [ -z "${2:-}" ] || kill -0 "$2" 2>/dev/null; } && [ $msu_i -lt 600 ]; do
        sleep 0.1; msu_i=$((msu_i + 1))
    done
    sed -n 's/.*"address": "\(http[^"]*\)".*/\1/p' "$1/serve.json" 2>/dev/null
}

# mp_port_block N: the first of N free consecutive TCP ports on 127.0.0.1 below the kernel's
# ephemeral range (serve --links: an outgoing connection's local port taken from inside the block
# would make a standby's later bind fail).
mp_port_block() {
    "$TORCH_PYTHON" - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    base = random.randrange(20000, lo - n - 1)
    socks = []
    try:
        for i in range(n):
            socks.append(socket.socket())
            socks[-1].bind(("127.0.0.1", base + i))
        print(base)
        break
    except OSError:
        pass
    finally:
        for x in socks:
            x.close()
EOF
}

# mp_serve_init: the serving tests' set-up: a Python that can run the client, the test data ($data),
# a scratch directory, $deck and $client, and an exit trap that kills every pid in $pids.
# After mp_serve_init: the several-host tests' model (2 layers, context 64, 100 steps; $CK) and
# reference, N requests from 8 clients on a one-process server into $SCRATCH/ref.jsonl (stopped
# after). Two TAP lines.
mp_serve_reference() {
    "$MINDPIPE" train -c "$deck" --set model.seq_len=64 --set data.path="$data" --set train.steps=100 \
        --set train.batch=8 --set train.micro_batch=8 --set train.warmup=20 --quiet --out "$SCRATCH/run" \
        > "$SCRATCH/train.log" 2>&1
    ok $? "train a 2-layer model 100 steps"
    CK="$SCRATCH/run/ckpt/step_00000100.h5"
    "$MINDPIPE" serve -c "$deck" --set model.seq_len=64 --ckpt "$CK" --stages 1 --slots 8 --listen 127.0.0.1:0 \
        --out "$SCRATCH/ref" > "$SCRATCH/ref.log" 2>&1 &
    mp_ref=$!; pids="$pids $mp_ref"
    "$TORCH_PYTHON" "$client" load "$(mp_serve_url "$SCRATCH/ref" $mp_ref)" --requests "$1" --concurrency 8 \
        --out "$SCRATCH/ref.jsonl" > "$SCRATCH/c.out" 2>&1
    ok $? "the reference: $1 requests on a one-process server ($(cat "$SCRATCH/c.out"))"
    kill -TERM $mp_ref; wait $mp_ref
}

# mp_kill_ours SIGNAL PID...: signals each PID whose command line still names $SCRATCH. A test's
# list of its processes outlives them: under make -j the PIDs wrap (pid_max 32768) and one may
# belong to another test's process by the time an EXIT trap runs (seen once: a CI's test_generate
# rank killed at another test's exit). A process of ours names our scratch directory.
mp_kill_ours() {
    mko_sig=$1; shift
    for mko_p in "$@"; do
        tr '\0' ' ' 2>/dev/null < "/proc/$mko_p/cmdline" | grep -qF -- "$SCRATCH" && kill "-$mko_sig" "$mko_p" 2>/dev/null
    done
    return 0
}

mp_serve_init() {
    if ! "$TORCH_PYTHON" -c "import http.client, json" 2>/dev/null; then
        echo "not ok 1 - $TORCH_PYTHON cannot run the test client"; echo "1..1"; exit 1
    fi
    data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
    mp_scratch_init
    deck="$MP_SRCDIR/validation/decks/ref.ini"
    client="$MP_SRCDIR/validation/serve_client.py"
    pids=""
    # shellcheck disable=SC2086
    trap 'mp_kill_ours 9 $pids; rm -rf "$SCRATCH"' EXIT
}

# mp_hf_prep_ids NAME TEXT DIR: prep TEXT with hf:DIR into $SCRATCH/NAME.h5, its ids (little-endian,
# the file's width) into $SCRATCH/NAME.ids, as one TAP line (the tokenizer.json tests)
mp_hf_prep_ids() {
    "$MINDPIPE" prep --tokenizer "hf:$3" --text "$2" --out "$SCRATCH/$1.h5" > "$SCRATCH/prep.out" 2>&1 &&
        h5dump -d /train -b LE -o "$SCRATCH/$1.train" "$SCRATCH/$1.h5" > /dev/null &&
        h5dump -d /val -b LE -o "$SCRATCH/$1.val" "$SCRATCH/$1.h5" > /dev/null &&
        cat "$SCRATCH/$1.train" "$SCRATCH/$1.val" > "$SCRATCH/$1.ids"
    ok $? "prep --tokenizer hf:$(basename "$3") of $(basename "$2") and its ids read back"
    sed 's/^/#   /' "$SCRATCH/prep.out"
}
