#!/bin/sh
# zb1p's and zbv's lists played out from measured times (issue 35; ARCHITECTURE.md §5): with
# parallel.schedule_profile (a `mindpipe profile` of the deck's model) or parallel.schedule_costs
# (TF,TB,TW) each stage's list is the greedy play of those times (zerobubble.h), the same list
# `mindpipe sim --costs` prints and the planner plays (cm_play_costs); the run executes that order
# (its timeline), which differs from the unit-time list, and trains bitwise as one rank does. What
# makes no sense is refused naming the key or the file. Up to 4 ranks on 2 cores.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
# 4 layers (zbv at pp = 2 and zb1p at pp = 4: chunks of 1), batch 8 of micro-batches of 1: m = 8
S="--set model.layers=4 --set train.threads=1 --set train.steps=6 --set train.batch=8 --set train.micro_batch=1"

# --- a profile of this model, and one with times chosen so the play is exact in binary ---
# shellcheck disable=SC2086
"$MINDPIPE" profile -c "$layout_deck" --set data.path="$data" $S --out "$SCRATCH/prof.json" > "$SCRATCH/prof.out" 2>&1
ok $? "mindpipe profile of the 4-layer model (one rank)"
# F = 2^-9 s and B = W = 2^-10 s a block, nothing for the embedding and the head: every chunk's
# (F, B, W) is 2 : 1 : 1 and every sum of the play is exact, so the run's list is sim --costs 2,1,1's.
# (zb1p's list changes with the times only at pp >= 3 and W cheaper than F: at pp = 2 1F1B's warm-up
# bound leaves one order, whatever the times.)
"$TORCH_PYTHON" - "$SCRATCH/prof.json" "$SCRATCH/profw.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
f, b, w = 2.0**-9, 2.0**-10, 2.0**-10
p.update(block_fwd_s=f, block_bwd_b_s=b, block_bwd_w_s=w, block_bwd_s=b + w, embed_fwd_s=0.0, embed_bwd_s=0.0,
         head_fwd_s=0.0, head_bwd_s=0.0, head_bwd_w_s=0.0)
json.dump(p, open(sys.argv[2], "w"), indent=1)
EOF
ok $? "a copy of the profile with F twice B and W (profw.json)"

# order RUN: per stage, step 2's compute as "F0 B0 W0 F1 ..." from the trace (a micro-batch's number)
order() {
    "$TORCH_PYTHON" - "$SCRATCH/$1/trace.json" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["args"].get("step") == 2]
short = {"forward": "F", "backward B": "B", "backward W": "W"}
for pid in sorted({e["pid"] for e in ev}):
    xs = sorted((e for e in ev if e["pid"] == pid and e["name"] in short), key=lambda e: e["ts"])
    print(pid, " ".join("%s%d" % (short[e["name"]], e["args"]["mb"]) for e in xs))
EOF
}
# sim_order SCHED PP COSTS: the same from mindpipe sim --list
sim_order() {
    "$MINDPIPE" sim --schedule "$1" --pp "$2" --m 8 ${3:+--costs "$3"} --list | "$TORCH_PYTHON" -c "
import re, sys
short = {'FORWARD': 'F', 'BACKWARD_B': 'B', 'BACKWARD_W': 'W'}
for line in sys.stdin:
    m = re.match(r'\s*stage (\d+):.*\|(.*)', line)
    if m:
        ops = re.findall(r'(FORWARD|BACKWARD_B|BACKWARD_W)\((\d+)\.\d+\)', m.group(2))
        print(m.group(1), ' '.join('%s%s' % (short[o], mb) for o, mb in ops))"
}

# shellcheck disable=SC2086
run 1 ref $S; ok $? "one rank, m=8 (the reference)"

# --- zb1p from the profile ---
# shellcheck disable=SC2086
run 4 zb1pw $S --set parallel.pp=4 --set parallel.schedule=zb1p --set parallel.schedule_profile="$SCRATCH/profw.json"
ok $? "zb1p pp=4 m=8 with parallel.schedule_profile=profw.json"
grep -q "parallel.schedule=zb1p: lists played out with the times of parallel.schedule_profile=$SCRATCH/profw.json for this run's chunks: TF 0.001953125 s, TB 0.0009765625 s, TW 0.0009765625 s" \
    "$SCRATCH/zb1pw/log.txt"
ok $? "the log names the profile and the chunks' times it played (F = 2^-9 s, B = W = 2^-10 s: one block a chunk)"
order zb1pw > "$SCRATCH/run.ord"; sim_order zb1p 4 2,1,1 > "$SCRATCH/sim.ord"; sim_order zb1p 4 "" > "$SCRATCH/unit.ord"
[ -s "$SCRATCH/run.ord" ] && cmp -s "$SCRATCH/run.ord" "$SCRATCH/sim.ord"
ok $? "zb1p: each stage ran sim --costs 2,1,1's list (stage 3: $(sed -n 4p "$SCRATCH/run.ord" | cut -c1-60)...)"
[ -s "$SCRATCH/unit.ord" ] && ! cmp -s "$SCRATCH/sim.ord" "$SCRATCH/unit.ord"
ok $? "zb1p: that list is not the unit-time one ($(diff "$SCRATCH/sim.ord" "$SCRATCH/unit.ord" | grep -c '^<') of 4 stages differ)"
compare "zb1p played from the profile = one rank" "$SCRATCH/ref" "$SCRATCH/zb1pw" --bitwise

# --- zbv from given times ---
# shellcheck disable=SC2086
run 2 zbvc $S --set parallel.pp=2 --set parallel.schedule=zbv --set parallel.schedule_costs=1,1,4
ok $? "zbv pp=2 m=8 with parallel.schedule_costs=1,1,4"
grep -q "parallel.schedule=zbv: lists played out with parallel.schedule_costs TF 1, TB 1, TW 4" "$SCRATCH/zbvc/log.txt"
ok $? "the log says which times zbv played"
order zbvc > "$SCRATCH/run.ord"; sim_order zbv 2 1,1,4 > "$SCRATCH/sim.ord"; sim_order zbv 2 "" > "$SCRATCH/unit.ord"
[ -s "$SCRATCH/run.ord" ] && cmp -s "$SCRATCH/run.ord" "$SCRATCH/sim.ord" && ! cmp -s "$SCRATCH/sim.ord" "$SCRATCH/unit.ord"
ok $? "zbv: each stage ran sim --costs 1,1,4's list (both chunks), not the unit-time one"
compare "zbv played from 1,1,4 = one rank" "$SCRATCH/ref" "$SCRATCH/zbvc" --bitwise

# --- zb1p from the measured profile itself: whatever its times, the same bits ---
# shellcheck disable=SC2086
run 2 zb1pm $S --set parallel.pp=2 --set parallel.schedule=zb1p --set parallel.schedule_profile="$SCRATCH/prof.json"
ok $? "zb1p pp=2 with the measured profile"
grep -q "times of parallel.schedule_profile=$SCRATCH/prof.json for this run's chunks: TF [0-9.e-]* s, TB [0-9.e-]* s, TW [0-9.e-]* s" \
    "$SCRATCH/zb1pm/log.txt"
ok $? "its log: $(grep -o 'TF [0-9.e-]* s, TB [0-9.e-]* s, TW [0-9.e-]* s' "$SCRATCH/zb1pm/log.txt")"
compare "zb1p played from the measured profile = one rank" "$SCRATCH/ref" "$SCRATCH/zb1pm" --bitwise

# --- the planner plays the same times and writes the profile into the deck it emits ---
# shellcheck disable=SC2086
"$MINDPIPE" plan -c "$layout_deck" $S --layout pp=4,schedule=zb1p --profile "$SCRATCH/profw.json" \
    --emit "$SCRATCH/em.ini" > "$SCRATCH/plan.out" 2>&1 &&
    grep -q "^schedule_profile *= *$SCRATCH/profw.json" "$SCRATCH/em.ini" && grep -q "^schedule *= *zb1p" "$SCRATCH/em.ini"
ok $? "plan --profile --emit for zb1p: the deck plays its lists from that profile ($(grep '^schedule_profile' "$SCRATCH/em.ini"))"
# shellcheck disable=SC2086
"$MINDPIPE" plan -c "$layout_deck" $S --set parallel.schedule=zb1p --set parallel.schedule_costs=1,1,2 \
    --layout pp=2,schedule=1f1b --emit "$SCRATCH/em2.ini" > "$SCRATCH/plan2.out" 2>&1 &&
    grep -q "^schedule_costs *= *unit" "$SCRATCH/em2.ini" && grep -q "^schedule *= *1f1b" "$SCRATCH/em2.ini"
ok $? "plan --emit of a 1f1b plan from a zb1p deck with times: the emitted deck drops them (it loads)"

# zbv planned from the profile (the cost model's V) and emitted: the deck trains, playing its lists
# from that profile, bitwise one rank
# shellcheck disable=SC2086
"$MINDPIPE" plan -c "$layout_deck" $S --layout pp=2,schedule=zbv --profile "$SCRATCH/profw.json" \
    --emit "$SCRATCH/emv.ini" > "$SCRATCH/planv.out" 2>&1 &&
    mpiexec -n 2 "$MINDPIPE" train -c "$SCRATCH/emv.ini" --set data.path="$data" --set train.log_every=1 --quiet \
        --out "$SCRATCH/emv" > "$SCRATCH/emv.log" 2>&1 &&
    grep -q "parallel.schedule=zbv: lists played out with the times of parallel.schedule_profile=$SCRATCH/profw.json" \
        "$SCRATCH/emv/log.txt"
ok $? "plan --layout schedule=zbv --profile --emit: the deck trains zbv with the profile's lists ($(grep -o 'step [0-9.e-]* s' "$SCRATCH/planv.out" | head -n 1) predicted)"
compare "the emitted zbv deck = one rank" "$SCRATCH/ref" "$SCRATCH/emv" --bitwise
# dualpipev planned from the same profile: its list is one fixed order, so the deck it emits names no
# times (a played-out key there is refused), and it trains bitwise one rank
# shellcheck disable=SC2086
"$MINDPIPE" plan -c "$layout_deck" $S --layout pp=2,schedule=dualpipev --profile "$SCRATCH/profw.json" \
    --emit "$SCRATCH/emd.ini" > "$SCRATCH/pland.out" 2>&1 &&
    grep -q "^schedule *= *dualpipev" "$SCRATCH/emd.ini" && grep -q "^schedule_profile *= *\(\"\"\)\?$" "$SCRATCH/emd.ini" &&
    mpiexec -n 2 "$MINDPIPE" train -c "$SCRATCH/emd.ini" --set data.path="$data" --set train.log_every=1 --quiet \
        --out "$SCRATCH/emd" > "$SCRATCH/emd.log" 2>&1
ok $? "plan --layout schedule=dualpipev --profile --emit: the deck (no times: a fixed list) trains dualpipev ($(grep -o 'step [0-9.e-]* s' "$SCRATCH/pland.out" | head -n 1) predicted)"
compare "the emitted dualpipev deck = one rank" "$SCRATCH/ref" "$SCRATCH/emd" --bitwise

# --- refusals ---
# refused N NAME PATTERN LABEL ARGS...: the run exits non-zero and its output matches PATTERN
refused() {
    rf_n=$1 rf_name=$2 rf_pat=$3 rf_label=$4; shift 4
    # shellcheck disable=SC2086
    run "$rf_n" "$rf_name" $S "$@"; rf_rc=$?
    [ $rf_rc -ne 0 ] && grep -q "$rf_pat" "$SCRATCH/$rf_name.log"
    ok $? "$rf_label (exit $rf_rc: $(grep -m1 -o 'error: .*' "$SCRATCH/$rf_name.log" | cut -c1-150))"
}
refused 2 no1f1b "parallel.schedule_costs is read by the schedules whose lists are played out from times" \
    "1f1b with parallel.schedule_costs: refused naming the key" --set parallel.pp=2 --set parallel.schedule_costs=1,1,2
refused 2 both "both give the lists' times" "both keys: refused" --set parallel.pp=2 --set parallel.schedule=zb1p \
    --set parallel.schedule_costs=1,1,2 --set parallel.schedule_profile="$SCRATCH/prof.json"
refused 2 badtext "schedule_costs = '1,2' is not three positive times TF,TB,TW, nor unit" "schedule_costs=1,2: refused naming the rule" \
    --set parallel.pp=2 --set parallel.schedule=zb1p --set parallel.schedule_costs=1,2
refused 2 negative "schedule_costs = '1,-1,2' is not three positive times" "a negative time: refused" \
    --set parallel.pp=2 --set parallel.schedule=zb1p --set parallel.schedule_costs=1,-1,2
refused 2 missing "cannot read the profile $SCRATCH/none.json" "a missing profile: refused naming the file" \
    --set parallel.pp=2 --set parallel.schedule=zb1p --set parallel.schedule_profile="$SCRATCH/none.json"
refused 2 foreign "parallel.schedule_profile=$SCRATCH/prof.json profiles a model of 4 layers" \
    "another model's profile: refused naming the file and both shapes" \
    --set parallel.pp=2 --set parallel.schedule=zb1p --set parallel.schedule_profile="$SCRATCH/prof.json" --set model.layers=6
"$TORCH_PYTHON" - "$SCRATCH/prof.json" "$SCRATCH/old.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
for k in ("block_bwd_b_s", "block_bwd_w_s", "head_bwd_w_s", "wstash_keep_bytes", "wstash_recompute_bytes"):
    del p[k]
json.dump(p, open(sys.argv[2], "w"), indent=1)
EOF
refused 2 old "has no split of the backward into B and W" "a profile without the B/W split: refused naming it" \
    --set parallel.pp=2 --set parallel.schedule=zb1p --set parallel.schedule_profile="$SCRATCH/old.json"

done_testing
