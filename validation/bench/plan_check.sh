#!/bin/sh
# Predicted against measured step time on this machine (docs/PLAN.md "Proof on this machine").
#   sh validation/bench/plan_check.sh BUILDDIR [DECK] [STEPS] [ROUNDS] > table.md
# Each round: `mindpipe profile` of the deck (1 rank; then 2 ranks for the MPI probe), then for every
# layout below a short `mpiexec -n N mindpipe train` (the measured step: the fastest of steps
# 2..STEPS, as the profile keeps its fastest pass; the median is printed too) and `mindpipe plan --layout ... --profile` (the predicted step), in
# that order, so both see the same host (it is shared and its speed drifts: ENVIRONMENT.md).
# The host's speed drifts by up to 10× while others use it, so around the profile and around each
# run `mindpipe peak --threads 2` is measured (the mean of before and after): the "corrected"
# prediction scales the predicted step by peak(profile) / peak(run), the host's speed change in
# between. Prints one markdown row per layout and round.
set -eu
B=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DECK=${2:-$SRC/inputs/gpt-small.ini}
STEPS=${3:-6}
ROUNDS=${4:-1}
DATA=$B/validation/kjv.h5
[ -s "$DATA" ] || { echo "make the corpus first (make check TESTS=validation/test_cli.sh)" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# a copy: a rebuild while the benchmark runs must not pull the binary from under it
cp "$B/src/mindpipe" "$W/mindpipe"
MP=$W/mindpipe
export OMP_WAIT_POLICY=PASSIVE
MB=${MB:-2}
# THREADS=1: one thread per rank everywhere (profile and runs): two-threaded BLAS calls suffer most
# from a busy host (a thread waits for its partner on a core someone else holds)
THREADS=${THREADS:-0}
COMMON="--set train.threads=$THREADS --set data.path=$DATA --set train.steps=$STEPS --set train.warmup=1 --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0 --set checkpoint.final=0 --set train.micro_batch=$MB"

# ranks:pp:dp:policy (LAYOUTS="2:1:2:keep" for a subset)
LAYOUTS=${LAYOUTS:-"1:1:1:keep 1:1:1:recompute 2:2:1:keep 2:2:1:recompute 2:2:1:offload 4:4:1:keep 4:4:1:balance 2:1:2:keep"}

peak2() { a=$("$MP" peak --threads 2); echo "$a"; }
mean() { python3 -c "import sys; print((float(sys.argv[1]) + float(sys.argv[2])) / 2)" "$1" "$2"; }
echo "| round | ranks | layout | policy | predicted s/step | measured s/step (fastest of steps 2-$STEPS) | error | measured median | host sgemm GFLOP/s profile/run | corrected prediction | corrected error |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    pa=$(peak2)
    # shellcheck disable=SC2086
    "$MP" profile -c "$DECK" $COMMON --out "$W/prof.json" > "$W/prof.out"
    p_prof=$(mean "$pa" "$(peak2)")
    # shellcheck disable=SC2086
    mpiexec -n 2 "$MP" profile -c "$DECK" $COMMON --out "$W/prof2.json" > /dev/null
    # the per-layer costs of the 1-rank profile, the links of the 2-rank probe
    python3 - "$W/prof.json" "$W/prof2.json" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
for k in ("p2p_lat_s", "p2p_bw_bytes_per_s", "allreduce_lat_s", "allreduce_bw_bytes_per_s", "ranks"):
    a[k] = b[k]
json.dump(a, open(sys.argv[1], "w"))
EOF
    echo "<!-- round $r profile: $(cat "$W/prof.out") -->"
    for l in $LAYOUTS; do
        n=${l%%:*}; rest=${l#*:}; pp=${rest%%:*}; rest=${rest#*:}; dp=${rest%%:*}; pol=${rest#*:}
        pa=$(peak2)
        # shellcheck disable=SC2086
        mpiexec -n "$n" "$MP" train -c "$DECK" $COMMON --set parallel.pp="$pp" --set parallel.dp="$dp" \
            --set memory.policy="$pol" --quiet --out "$W/run" > "$W/train.out" 2>&1 || { cat "$W/train.out" >&2; exit 1; }
        p_run=$(mean "$pa" "$(peak2)")
        meas=$(python3 -c '
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
toks = [r["tokens_per_s"] for r in rows if r["step"] >= 2]
print("%.4f %.4f" % (float(sys.argv[2]) / max(toks), float(sys.argv[2]) / statistics.median(toks)))' "$W/run/metrics.jsonl" \
            "$(python3 -c "import configparser,sys; c=configparser.ConfigParser(inline_comment_prefixes=(';',)); c.read(sys.argv[1]); print(int(c['train']['batch'])*int(c['model']['seq_len']))" "$DECK")")
        med=${meas#* }; meas=${meas%% *}
        # shellcheck disable=SC2086
        pred=$("$MP" plan -c "$DECK" $COMMON --layout "pp=$pp,dp=$dp,tp=1,policy=$pol" --profile "$W/prof.json" --json |
            python3 -c 'import json,sys; print("%.4f" % json.loads(sys.stdin.readline())["step_time_s"])')
        err=$(python3 -c "print('%+.0f%%' % (100 * ($pred - $meas) / $meas))")
        corr=$(python3 -c "print('%.4f' % ($pred * $p_prof / $p_run))")
        cerr=$(python3 -c "print('%+.0f%%' % (100 * ($corr - $meas) / $meas))")
        echo "| $r | $n | pp=$pp dp=$dp | $pol | $pred | $meas | $err | $med | $(printf %.0f "$p_prof")/$(printf %.0f "$p_run") | $corr | $cerr |"
        rm -rf "$W/run"
    done
    r=$((r + 1))
done
