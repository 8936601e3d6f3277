#!/bin/sh
# mindpipe plan and mindpipe profile (docs/PLAN.md): their outputs parse and agree with each other
# and with the simulator. A layout that does not fit the device is refused and never proposed; the
# search's plans come in the order of their objective; a plan written with --emit predicts the same
# step when planned again; the 1F1B/GPipe memory ordering the simulator's stash peaks imply holds;
# a measured profile (2 ranks: the MPI probe too) drives the plan; bad input names what is wrong.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
PY=${TORCH_PYTHON:-/usr/bin/python3}
P() { "$MINDPIPE" plan -c "$deck" "$@"; }

# --- one layout, JSON ---
P --layout pp=2,dp=1,tp=1 --json > "$SCRATCH/one.json" 2> "$SCRATCH/err" &&
"$PY" - "$SCRATCH/one.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 1, rows
r = rows[0]
for k in ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_mem_bytes", "bubble", "exposed_comm_s"):
    assert k in r, k
assert r["pp"] == 2 and len(r["peak_mem_bytes"]) == 2 and len(r["stage_time_s"]) == 2
assert r["step_time_s"] > 0 and 0 < r["mfu"] < 1 and 0 <= r["bubble"] < 1
# tokens/s is the batch's tokens over the step (train.ini: batch 8 × 32 tokens)
assert abs(r["tokens_per_s"] * r["step_time_s"] - 8 * 32) < 1e-3 * 256, r
EOF
ok $? "plan --layout pp=2 --json: one object with step_time_s, tokens_per_s, tflops_per_gpu, mfu, peak_mem_bytes per stage"

# --- the simulator's orderings: GPipe stashes all m micro-batches on stage 0, 1F1B only pp; and at
# pp = 2 neither step can be shorter than the busier stage's work plus one micro-batch of the other
# (the last stage waits for micro-batch 0's forward, the first finishes with the last backward) ---
P --layout pp=2,micro_batch=1,schedule=gpipe --json > "$SCRATCH/gpipe.json" 2>/dev/null &&
    P --layout pp=2,micro_batch=1,schedule=1f1b --json > "$SCRATCH/1f1b.json" 2>/dev/null &&
"$PY" - "$SCRATCH/gpipe.json" "$SCRATCH/1f1b.json" <<'EOF'
import json, sys
g = json.loads(open(sys.argv[1]).readline()); f = json.loads(open(sys.argv[2]).readline())
assert g["m"] == 8 and g["peak_mem_bytes"][0] > f["peak_mem_bytes"][0], (g, f)
for r in (g, f):
    st = r["stage_time_s"]
    assert r["bubble"] > 0 and r["step_time_s"] >= max(st) + min(st) / r["m"] - 1e-12, r
EOF
ok $? "gpipe holds more on stage 0 than 1f1b at m=8, pp=2; both steps at least the busier stage + 1/m of the other"
"$MINDPIPE" sim --schedule 1f1b --pp 4 --m 8 > "$SCRATCH/sim.out" 2>&1 && grep -q "bubble 0.2727" "$SCRATCH/sim.out"
ok $? "mindpipe sim 1f1b pp=4 m=8: bubble 0.2727 ((pp - 1) / (m + pp - 1) = 3/11)"
P --layout pp=4,micro_batch=1 --devices "$SCRATCH/none.ini" > /dev/null 2>&1
ok "$([ $? -ne 0 ] && echo 0 || echo 1)" "a missing device file is refused"

# --- the search: sorted, fitting, consistent with --layout and --emit ---
P --ranks 4 --top 5 --json > "$SCRATCH/search.json" 2> "$SCRATCH/err" &&
"$PY" - "$SCRATCH/search.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert 1 <= len(rows) <= 5, len(rows)
t = [r["step_time_s"] for r in rows]
assert t == sorted(t), t
for r in rows:
    assert r["tp"] * r["pp"] * r["dp"] == 4 and r["fits"], r
EOF
ok $? "plan --ranks 4 --top 5: up to 5 plans of 4 ranks, fastest first, all fitting"
P --ranks 4 --emit "$SCRATCH/best.ini" > /dev/null 2>&1 &&
    "$MINDPIPE" plan -c "$SCRATCH/best.ini" --layout tp=1 --json > "$SCRATCH/again.json" 2> "$SCRATCH/err" &&
"$PY" - "$SCRATCH/search.json" "$SCRATCH/again.json" <<'EOF'
import json, sys
a = json.loads(open(sys.argv[1]).readline()); b = json.loads(open(sys.argv[2]).readline())
for k in ("tp", "pp", "dp", "v", "micro_batch", "schedule", "layers", "policy"):
    assert a[k] == b[k], (k, a[k], b[k])
assert abs(a["step_time_s"] - b["step_time_s"]) <= 1e-9 * a["step_time_s"], (a, b)
EOF
ok $? "--emit's deck, planned again with --layout, predicts the search's first plan exactly"
P --ranks 4 --objective energy --top 5 --json > "$SCRATCH/energy.json" 2>/dev/null &&
"$PY" -c '
import json, sys
e = [json.loads(l)["energy_j_per_token"] for l in open(sys.argv[1])]
assert e and e == sorted(e), e' "$SCRATCH/energy.json"
ok $? "--objective energy ranks by energy per token"
P --layout pp=1 --tokens 1e9 --json > "$SCRATCH/tokens.json" 2>/dev/null && grep -q '"run_kwh"' "$SCRATCH/tokens.json"
ok $? "--tokens adds the run's hours, kWh and CO2"

# --- a deadline: a constraint the objective ranks within ---
# between the least-energy plan's hours and a faster plan's, so the deadline must reorder them (on
# one CPU node energy follows time; 64 A100s trade them: fewer tp all-reduces, a longer bubble)
PS() { "$MINDPIPE" plan -c "$MP_SRCDIR/inputs/scale/megatron-175b.ini" --devices "$MP_SRCDIR/inputs/devices.ini" \
    --device a100-80g --ranks 64 --tokens 3e11 "$@"; }
PS --objective energy --top 20 --json > "$SCRATCH/dl0.json" 2>/dev/null
rc0=$?
dl=$("$PY" -c '
import json, sys
p = [json.loads(l) for l in open(sys.argv[1])]
h0 = p[0]["run_hours"]; faster = [q["run_hours"] for q in p if q["run_hours"] < h0]
print((h0 + max(faster)) / 2 if faster else "none")' "$SCRATCH/dl0.json")
PS --objective energy --top 20 --deadline "$dl" --json > "$SCRATCH/dl1.json" 2>/dev/null
rc=$?
"$PY" - "$SCRATCH/dl1.json" "$dl" <<'EOF'
import json, sys
p = [json.loads(l) for l in open(sys.argv[1])]; dl = float(sys.argv[2])
meets = [q["meets_deadline"] for q in p]
assert meets[0] and meets == sorted(meets, reverse=True), meets   # every plan that meets it first
assert all((q["run_hours"] <= dl) == q["meets_deadline"] for q in p), p
e = [q["energy_j_per_token"] for q in p if q["meets_deadline"]]
assert e == sorted(e), e                                          # by energy among those
assert any(not m for m in meets), "the deadline excluded nothing"
EOF
pyrc=$?
ok "$([ $rc0 -eq 0 ] && [ $rc -eq 0 ] && [ $pyrc -eq 0 ] && [ "$dl" != none ] && echo 0 || echo 1)" \
    "--deadline: plans that finish in time first, by energy among them; the least-energy plan, too slow, after them"
fast=$("$PY" -c 'import json,sys; print(min(json.loads(l)["run_hours"] for l in open(sys.argv[1])))' "$SCRATCH/dl0.json")
tight=$("$PY" -c "print($fast / 100)")
PS --deadline "$tight" > "$SCRATCH/dl2.out" 2>&1
ok "$([ $? -eq 1 ] && grep -q "no plan finishes 3e+11 tokens within" "$SCRATCH/dl2.out" && grep -q "MISSES" "$SCRATCH/dl2.out" \
    && echo 0 || echo 1)" "a deadline no plan meets: exit 1, says so and how long the fastest needs"
P --ranks 4 --deadline 5 > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q -- "--deadline HOURS needs --tokens" "$SCRATCH/err" && echo 0 || echo 1)" "--deadline without --tokens is refused"

# --- memory: a device too small for keep ---
sed -n '/^\[cpu\]/,$p' "$MP_SRCDIR/inputs/devices.ini" | sed 's/^\[cpu\]/[small]/; s/^memory = .*/memory = 1.2e6/' \
    > "$SCRATCH/dev.ini"
P --devices "$SCRATCH/dev.ini" --device small --layout pp=1,policy=keep --json > "$SCRATCH/keep.json" 2>/dev/null
rc=$?
"$PY" -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert not r["fits"] and max(r["peak_mem_bytes"]) > 1.2e6, r' "$SCRATCH/keep.json"
pyrc=$?
ok "$([ $rc -eq 1 ] && [ $pyrc -eq 0 ] && echo 0 || echo 1)" "keep on a 1.2 MB device: predicted over the limit, exit 1"
P --devices "$SCRATCH/dev.ini" --device small --ranks 1 --top 5 --json > "$SCRATCH/small.json" 2> "$SCRATCH/err"
"$PY" - "$SCRATCH/small.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows, "no plan"
for r in rows:
    assert r["fits"] and max(r["peak_mem_bytes"]) <= 1.2e6, r
assert any(p != "keep" for r in rows for p in r["policy"]), rows
EOF
ok $? "the search on that device proposes only plans under 1.2 MB, with a policy other than keep"
sed -i 's/^memory = .*/memory = 1e4/' "$SCRATCH/dev.ini"
P --devices "$SCRATCH/dev.ini" --device small --ranks 2 > "$SCRATCH/out" 2> "$SCRATCH/err"
ok "$([ $? -eq 1 ] && grep -q "no layout" "$SCRATCH/err" && echo 0 || echo 1)" "nothing fits 10 KB: no plan, exit 1, says so"

# --- profile: measured here, then planned with ---
MPIEXEC=${MPIEXEC:-mpiexec}
# 4 layers of width 64: big enough that a block's time stands out of a shared host's noise
PSET="--set model.layers=4 --set model.dim=64"
# On one thread the profile times by that thread's CPU clock, which a preemption does not advance:
# the deeper model measures slower however busy the host (the wall clock's fastest of 7 passes did
# not, at these sizes, beside a make check -j2; "the deeper model was not slower")
# shellcheck disable=SC2086
$MPIEXEC -n 2 "$MINDPIPE" profile -c "$deck" $PSET --set train.threads=1 --out "$SCRATCH/prof.json" > "$SCRATCH/prof.out" 2>&1 &&
grep -q "1 thread (its CPU clock)" "$SCRATCH/prof.out" &&
"$PY" - "$SCRATCH/prof.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["ranks"] == 2 and p["p2p_bw_bytes_per_s"] > 0 and p["p2p_lat_s"] > 0 and p["allreduce_lat_s"] > 0, p
assert p["block_fwd_s"] > 0 and p["block_bwd_s"] > 0 and p["stash_keep_bytes"] > p["stash_recompute_bytes"] > 0, p
# a block of width 64: 12·64² + 13·64 parameters (weights, biases, two LayerNorms)
assert p["block_params"] == 12 * 64 * 64 + 13 * 64, p["block_params"]
EOF
prc=$?
[ $prc -eq 0 ] || sed 's/^/#   /' "$SCRATCH/prof.out"
ok $prc "profile under 2 ranks: positive block times, p2p and all-reduce figures, stash keep > recompute, exact block parameters"
# the split backward: B and W timed apart (positive and finite; their ratio to the fused backward is
# printed, not asserted: timed apart on a shared host they can have any ratio, and one CI saw
# B + W = 0.45 of a fused backward slowed by load; the ratio idle is a benchmark's, docs/PLAN.md);
# W's stash per block is model_wstash_bytes' (N = micro_batch · 32, C = 64, R = 4):
# 4·(2NC + NRC + 3NC) douts, + 4·(2NC + NC + NRC) inputs under recompute
"$PY" - "$SCRATCH/prof.json" <<'EOF'
import json, math, sys
p = json.load(open(sys.argv[1]))
b, w, f = p["block_bwd_b_s"], p["block_bwd_w_s"], p["block_bwd_s"]
print("# B %.3g s, W %.3g s, fused %.3g s: (B + W) / fused = %.2f" % (b, w, f, (b + w) / f if f > 0 else float("nan")))
assert all(math.isfinite(x) and x > 0 for x in (b, w, f)), (b, w, f)
assert math.isfinite(p["head_bwd_w_s"]) and p["head_bwd_w_s"] >= 0, p
N, C = p["micro_batch"] * 32, 64
assert p["wstash_keep_bytes"] == 4 * (2 * N * C + N * 4 * C + 3 * N * C), p["wstash_keep_bytes"]
assert p["wstash_recompute_bytes"] == p["wstash_keep_bytes"] + 4 * (2 * N * C + N * C + N * 4 * C), p
EOF
ok $? "profile times the backward's B and W per block (positive, finite) and W's stash bytes exactly"
# shellcheck disable=SC2086
P $PSET --layout pp=2 --profile "$SCRATCH/prof.json" --json > "$SCRATCH/pp.json" 2> "$SCRATCH/err" &&
    grep -q '"step_time_s"' "$SCRATCH/pp.json"
ok $? "plan --profile predicts a layout from the measured costs"
# zb1p from a profile's B and W beside 1f1b on the same layout: a smaller bubble (W fills the
# cool-down) and more memory (W's stashes). The times are fixed (the measured profile's bytes, its
# times set to a block's F = B = W = 1 ms, the head 0.4 ms each way, W 0.2 of it, and the links' and
# the optimizer's measured costs too): what a host measures under load can have any ratio (seen here:
# one profile's blocks 300 times slower than the next's, a head backward of 0, a p2p latency of
# milliseconds), and at some (a block's backward a thirtieth of its forward; a message costing a
# block's forward, which the V, sending twice per micro-batch at pp = 2, pays twice) the zero-bubble
# lists have no smaller bubble than the checks below expect; they failed in CI so.
"$PY" - "$SCRATCH/prof.json" "$SCRATCH/prof_fixed.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p.update(block_fwd_s=1e-3, block_bwd_b_s=1e-3, block_bwd_w_s=1e-3, block_bwd_s=2e-3, embed_fwd_s=1e-5, embed_bwd_s=1e-5,
         head_fwd_s=4e-4, head_bwd_s=4e-4, head_bwd_w_s=2e-4, recompute_extra_s=1e-3, selective_extra_s=2e-4,
         optimizer_s_per_param=1e-9, p2p_lat_s=1e-5, p2p_bw_bytes_per_s=1e10, allreduce_lat_s=1e-5,
         allreduce_bw_bytes_per_s=1e10)
json.dump(p, open(sys.argv[2], "w"), indent=1)
EOF
# shellcheck disable=SC2086
P $PSET --layout pp=2,micro_batch=1,schedule=zb1p --profile "$SCRATCH/prof_fixed.json" --json > "$SCRATCH/zb.json" 2> "$SCRATCH/err" &&
    P $PSET --layout pp=2,micro_batch=1,schedule=1f1b --profile "$SCRATCH/prof_fixed.json" --json > "$SCRATCH/fb.json" \
    2>> "$SCRATCH/err" &&
"$PY" - "$SCRATCH/zb.json" "$SCRATCH/fb.json" <<'EOF'
import json, sys
z = json.loads(open(sys.argv[1]).readline()); f = json.loads(open(sys.argv[2]).readline())
assert z["schedule"] == "zb1p" and f["schedule"] == "1f1b" and z["m"] == f["m"] == 8, (z, f)
assert max(z["peak_mem_bytes"]) > max(f["peak_mem_bytes"]), (z, f)
assert z["bubble"] < f["bubble"], (z["bubble"], f["bubble"])
EOF
ok $? "plan --profile (fixed times): zb1p at pp=2, m=8 with a smaller bubble than 1f1b's and more memory (W's stashes)"
# zbv from the same fixed times: the V (stage 0 holds the embedding and the head), a smaller bubble
# than zb1p's, its turn gradients on stage 1; a V whose stage has unequal chunks is refused naming them
# shellcheck disable=SC2086
P $PSET --layout pp=2,micro_batch=1,schedule=zbv --profile "$SCRATCH/prof_fixed.json" --json > "$SCRATCH/zv.json" 2> "$SCRATCH/err" &&
    P $PSET --layout pp=2,micro_batch=1,schedule=zbv --profile "$SCRATCH/prof_fixed.json" > "$SCRATCH/zv.out" 2>> "$SCRATCH/err" &&
    grep -q "stage 0: 2 layers + embedding + head" "$SCRATCH/zv.out" && grep -q "stage 1: 2 layers," "$SCRATCH/zv.out" &&
"$PY" - "$SCRATCH/zv.json" "$SCRATCH/zb.json" <<'EOF'
import json, sys
v = json.loads(open(sys.argv[1]).readline()); z = json.loads(open(sys.argv[2]).readline())
assert v["schedule"] == "zbv" and v["v"] == 2 and v["m"] == 8, v
assert v["bubble"] < z["bubble"], (v["bubble"], z["bubble"])
EOF
ok $? "plan --layout schedule=zbv (fixed times): the V with the embedding and head on stage 0, a smaller bubble than zb1p's"
# dualpipev from the same fixed times: the V too, a smaller bubble than 1f1b's, and more stash than
# zbv's on every stage (2pp + 1 chunk stashes against zbv's 2pp: the DualPipe paper's PP + 1)
# shellcheck disable=SC2086
P $PSET --layout pp=2,micro_batch=1,schedule=dualpipev --profile "$SCRATCH/prof_fixed.json" --json > "$SCRATCH/dv.json" \
    2> "$SCRATCH/err" &&
"$PY" - "$SCRATCH/dv.json" "$SCRATCH/zv.json" "$SCRATCH/fb.json" <<'EOF'
import json, sys
d, v, f = (json.loads(open(a).readline()) for a in sys.argv[1:4])
assert d["schedule"] == "dualpipev" and d["v"] == 2 and d["m"] == 8 and d["fits"], d
assert d["bubble"] < f["bubble"], (d["bubble"], f["bubble"])
assert all(a > b for a, b in zip(d["peak_mem_bytes"], v["peak_mem_bytes"])), (d["peak_mem_bytes"], v["peak_mem_bytes"])
EOF
ok $? "plan --layout schedule=dualpipev (fixed times): the V, a smaller bubble than 1f1b's, more stash than zbv's on each stage"
"$MINDPIPE" plan -c "$deck" --set model.layers=6 --set model.dim=64 --layout pp=2,schedule=zbv > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -ne 0 ] && grep -q "holds half a stage's layers in each chunk of its V: stage 0 has chunks of 2 and 1" "$SCRATCH/err" \
    && echo 0 || echo 1)" "plan zbv with 3 layers a stage: refused naming the chunks"
# the search ranks zb1p and zbv beside 1f1b by their predicted steps, and names what it did not search
# shellcheck disable=SC2086
P $PSET --ranks 2 --top 63 --profile "$SCRATCH/prof.json" --json > "$SCRATCH/zbs.json" 2> "$SCRATCH/err" &&
    P $PSET --ranks 2 --profile "$SCRATCH/prof.json" > "$SCRATCH/zbs.out" 2>&1 &&
    ! grep -q "not searched" "$SCRATCH/zbs.out" &&
"$PY" - "$SCRATCH/zbs.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["step_time_s"] for r in rows]
assert t == sorted(t), t
zb = [r for r in rows if r["schedule"] == "zb1p"]
assert zb and all(r["pp"] >= 2 and r["v"] == 1 for r in zb), rows
zv = [r for r in rows if r["schedule"] == "zbv"]
assert zv and all(r["pp"] == 2 and r["v"] == 2 for r in zv), rows
# dualpipev: the V at pp = 2 where m >= 2pp (batch 8: micro_batch 1 and 2), never below
dv = [r for r in rows if r["schedule"] == "dualpipev"]
assert dv and all(r["pp"] == 2 and r["v"] == 2 and r["m"] >= 4 for r in dv), rows
EOF
ok $? "plan --ranks 2 --profile: zb1p (pp >= 2, v = 1), zbv and dualpipev (pp = 2, v = 2; dualpipev m >= 2pp) among the ranked plans, nothing left unsearched"
"$MINDPIPE" plan -c "$deck" --set model.layers=6 --set model.dim=64 --layout pp=2 --profile "$SCRATCH/prof.json" \
    > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -ne 0 ] && grep -q "profiles a model of 4 layers" "$SCRATCH/err" && echo 0 || echo 1)" \
    "a profile of another model is refused naming both shapes"

# --- memory.policy = auto at run time: keep plans 1628160 bytes for train.ini, recompute 1331200 and
# selective more than 1400K, so under 1400K auto must choose recompute, train bitwise like keep
# without a limit, say so in the log and measure the peak it planned ---
data=$(mp_test_data) || { ok 1 "test data"; done_testing; }
TR() { "$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.steps=6 --set train.log_every=1 \
    --set checkpoint.every=0 --quiet "$@"; }
TR --out "$SCRATCH/keep" > /dev/null 2>&1 &&
    TR --set memory.policy=auto --set memory.device_limit=1400K --out "$SCRATCH/auto" > /dev/null 2> "$SCRATCH/err"
ok $? "memory.policy=auto trains under a limit keep cannot fit"
grep -q "memory.policy=auto: stage 0 chose recompute: keep would plan 1628160 bytes" "$SCRATCH/auto/log.txt"
ok $? "the log names the choice and why (keep's planned bytes over the limit)"
compare "auto vs keep" "$SCRATCH/keep" "$SCRATCH/auto" --bitwise
"$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows and all(r["peak_mem_bytes"] == [1331200] for r in rows), rows[0]["peak_mem_bytes"]' "$SCRATCH/auto/metrics.jsonl"
ok $? "its measured peak is recompute's planned 1331200 bytes"
TR --set memory.policy=auto --set memory.device_limit=1200K --out "$SCRATCH/none" > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -ne 0 ] && grep -q "No memory policy fits" "$SCRATCH/err" && echo 0 || echo 1)" \
    "auto under a limit nothing fits is refused, saying so"

# --- balance (BPipe): the simulated lists are the executor's own (sched_add_balance). On a 600 KB
# device pp=4 keep overfills stage 0, balance fits by moving its stashes to stage 3; the training
# runs measure the same direction on both ends ---
sed -n '/^\[cpu\]/,$p' "$MP_SRCDIR/inputs/devices.ini" | sed 's/^\[cpu\]/[small6]/; s/^memory = .*/memory = 6e5/' \
    > "$SCRATCH/dev6.ini"
PB() { "$MINDPIPE" plan -c "$deck" --set model.layers=4 --devices "$SCRATCH/dev6.ini" --device small6 "$@"; }
PB --layout pp=4,micro_batch=1,policy=keep --json > "$SCRATCH/bk.json" 2>/dev/null
krc=$?
PB --layout pp=4,micro_batch=1,policy=balance --json > "$SCRATCH/bb.json" 2>/dev/null
brc=$?
PB --ranks 4 --top 60 --json > "$SCRATCH/bs.json" 2>/dev/null
src=$?
trc=0
for pol in keep balance; do
    ${MPIEXEC:-mpiexec} -n 4 "$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.steps=6 \
        --set checkpoint.every=0 --set model.layers=4 --set parallel.pp=4 --set train.micro_batch=1 \
        --set train.threads=1 --set memory.policy=$pol --quiet --out "$SCRATCH/m_$pol" > /dev/null 2>&1 || trc=1
done
"$PY" - "$SCRATCH" <<'EOF'
import json, sys
d = sys.argv[1]
k = json.loads(open(d + "/bk.json").readline()); b = json.loads(open(d + "/bb.json").readline())
assert not k["fits"] and b["fits"] and b["policy"] == ["balance"] * 4, (k, b)
pk, pb = k["peak_mem_bytes"], b["peak_mem_bytes"]
assert pb[0] < pk[0] and pb[3] > pk[3] and max(pb) < max(pk), (pk, pb)
assert abs(b["step_time_s"] - k["step_time_s"]) <= 0.1 * k["step_time_s"], (k, b)
plans = [json.loads(l) for l in open(d + "/bs.json")]
assert any(p["policy"] == ["balance"] * 4 and p["fits"] for p in plans), "the search proposes no balance plan"
mk = json.loads(open(d + "/m_keep/metrics.jsonl").readlines()[-1])["peak_mem_bytes"]
mb = json.loads(open(d + "/m_balance/metrics.jsonl").readlines()[-1])["peak_mem_bytes"]
print("# pp=4 peaks, keep: predicted %s measured %s; balance: predicted %s measured %s" % (pk, mk, pb, mb))
assert mb[0] < mk[0] and mb[3] > mk[3], (mk, mb)
EOF
pyrc=$?
ok "$([ $krc -eq 1 ] && [ $brc -eq 0 ] && [ $src -eq 0 ] && [ $trc -eq 0 ] && [ $pyrc -eq 0 ] && echo 0 || echo 1)" \
    "balance predicted: pp=4 keep overfills 600 KB, balance fits (stage 0 down, stage 3 up, as measured in two pp=4 runs), the search proposes it"

# --- pipeline.layers = auto at run time: the planner's split, logged, bitwise like one rank; wide
# enough (C 256, T 128) that a 2-layer pass is over the 20 ms autosplit.c times, not the model's ratios ---
W6="--set model.layers=6 --set model.dim=256 --set model.seq_len=128 --set train.threads=1"
# shellcheck disable=SC2086
TR $W6 --out "$SCRATCH/one6" > /dev/null 2>&1 &&
    ${MPIEXEC:-mpiexec} -n 2 "$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.steps=6 \
        --set train.log_every=1 --set checkpoint.every=0 $W6 \
        --set parallel.pp=2 --set pipeline.layers=auto --set train.peak_gflops=50 --quiet --out "$SCRATCH/auto6" > /dev/null 2>&1
ok $? "pipeline.layers=auto trains at pp=2"
# MFU divides the job's tokens/s by the job's peak: 2 ranks x train.peak_gflops (per rank)
"$PY" - "$SCRATCH/auto6" <<'EOF'
import configparser, json, sys
c = configparser.ConfigParser(inline_comment_prefixes=(";", "#")); c.read(sys.argv[1] + "/deck.ini")
m = c["model"]; L, C, T, V, R = (int(m[k]) for k in ("layers", "dim", "seq_len", "vocab", "mlp_ratio"))
flops = 6 * ((4 + 2 * R) * L * C * C + V * C) + 12 * L * C * T
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
bad = [r for r in rows if abs(r["mfu"] - r["tokens_per_s"] * flops / (2 * 50e9)) > 1e-3 * r["mfu"] + 1e-6]
sys.exit(1 if bad or not rows else 0)
EOF
ok $? "mfu = tokens/s x model FLOPs per token / (2 ranks x train.peak_gflops)"
split=$(sed -n 's/.*pipeline.layers=auto: \([0-9,]*\) (the planner.s split.*/\1/p' "$SCRATCH/auto6/log.txt")
echo "$split" | awk -F, '{ exit !(NF == 2 && $1 + $2 == 6 && $1 > 0 && $2 > 0) }'
ok $? "the log gives the split: '$split', two stages, 6 layers"
# the split comes from this run's timings; where a 2-layer pass takes under 20 ms (a fast or idle
# host: it failed so in CI on 2026-11-28) the start-up does not time it against the host's noise and
# the planner splits by the nominal device, saying so with the pass's time, which must then be < 20 ms
if grep -q "pipeline.layers=auto: $split (the planner's split by this run's timings, taken in [0-9.]* s: a block [0-9.]* ms" \
    "$SCRATCH/auto6/log.txt"; then
    ok 0 "the split comes from this run's timings of a block and of the embedding and head"
else
    pass=$(sed -n "s/.*pipeline.layers=auto: $split (the planner's split by the nominal device's modelled times (a 2-layer pass took \([0-9.]*\) ms, too short.*/\1/p" \
        "$SCRATCH/auto6/log.txt")
    # or a pass that timed no longer than one layer's (a busy host: it failed so in CI on 2026-12-01)
    noisy=$(sed -n "s/.*pipeline.layers=auto: $split (the planner's split by the nominal device's modelled times (a 2-layer pass took \([0-9.]*\) ms, no longer than a 1-layer pass.*/\1/p" \
        "$SCRATCH/auto6/log.txt")
    { [ -n "$pass" ] && awk -v p="$pass" 'BEGIN { exit !(p < 20) }'; } || [ -n "$noisy" ]
    ok $? "the split comes from this run's timings, or (a 2-layer pass of ${pass:-${noisy:-?}} ms: under 20, or no longer than one layer's) from the nominal device, said so"
fi
# the same start-up with its passes fixed (debug.autosplit_passes = P1,P2 ms: a block is P2 - P1, the
# embedding and head the rest), so each branch is taken on any host: the split follows the timings
# (the nominal model gives the head about 92% of the rest at V = C = 256: a block of 10 ms and a rest
# of 20 ms balance 4+1.6 | 2+18.4 blocks' worth as 4,2; a rest of 190 ms leaves the last stage one
# layer), and a 2-layer pass under 20 ms or no longer than a 1-layer one falls back to the nominal
# device, saying so
for c in "11,20 3,3 by debug.autosplit_passes's timings: a block 9.00 ms, embedding and head 2.00 ms" \
    "30,40 4,2 by debug.autosplit_passes's timings: a block 10.00 ms, embedding and head 20.00 ms" \
    "200,210 5,1 by debug.autosplit_passes's timings: a block 10.00 ms, embedding and head 190.00 ms" \
    "5,10 3,3 by the nominal device's modelled times (a 2-layer pass took 10.00 ms, too short" \
    "30,25 3,3 by the nominal device's modelled times (a 2-layer pass took 25.00 ms, no longer than a 1-layer"; do
    set -- $c
    pass=$1 want=$2
    shift 2
    rm -rf "$SCRATCH/fixed"
    # shellcheck disable=SC2086
    ${MPIEXEC:-mpiexec} -n 2 "$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.steps=1 \
        --set train.warmup=0 --set checkpoint.every=0 $W6 --set parallel.pp=2 --set pipeline.layers=auto \
        --set debug.autosplit_passes="$pass" --quiet --out "$SCRATCH/fixed" > /dev/null 2>&1 &&
        grep -qF "pipeline.layers=auto: $want (the planner's split $*" "$SCRATCH/fixed/log.txt"
    ok $? "debug.autosplit_passes=$pass: split $want, $*"
done
TR --set debug.autosplit_passes=5 --out "$SCRATCH/bad" > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -ne 0 ] && grep -q "debug.autosplit_passes" "$SCRATCH/err" && echo 0 || echo 1)" \
    "debug.autosplit_passes=5 (one time) is refused, naming the key"
grep -q "^layers = auto" "$SCRATCH/auto6/deck.ini"
ok $? "deck.ini keeps pipeline.layers = auto (a resume measures again)"
compare "auto split vs one rank" "$SCRATCH/one6" "$SCRATCH/auto6" --bitwise
TR --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set model.layers=4 \
    --set pipeline.layers=auto --out "$SCRATCH/bad" > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -ne 0 ] && grep -q "pipeline.layers=auto: the planner splits one chunk per stage" "$SCRATCH/err" && echo 0 || echo 1)" \
    "pipeline.layers=auto with interleaving is refused, naming what to give"

# --- at scale: Korthikanti et al. 2022's Table 5, full recompute (docs/PLAN.md "At scale"): the
# 175B row calibrated the A100 curve and must stay exact; the others are held out, within 10% ---
for row in "175b v=3,schedule=interleaved 18.13 0.01" "22b pp=1 1.42 0.10" "530b v=3,schedule=interleaved 49.05 0.10" \
    "1t v=1 94.42 0.10"; do
    set -- $row
    "$MINDPIPE" plan -c "$MP_SRCDIR/inputs/scale/megatron-$1.ini" --device a100-80g --layout "$2,policy=recompute" \
        --json 2>/dev/null | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.readline()); ref, tol = float(sys.argv[1]), float(sys.argv[2])
print("# predicted %.2f s, published %.2f s" % (r["step_time_s"], ref))
assert r["fits"] and abs(r["step_time_s"] - ref) <= tol * ref' "$3" "$4"
    ok $? "Megatron $1 (full recompute, a100-80g): within $(echo "$4" | awk '{print $1 * 100}')% of the published $3 s"
done

# --- bad input ---
P --layout pp=1 --device tpu-v9 > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -ne 0 ] && grep -q "a100-80g" "$SCRATCH/err" && echo 0 || echo 1)" "an unknown device kind is refused listing the kinds"
P --layout pq=2 > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q "unknown key 'pq'" "$SCRATCH/err" && echo 0 || echo 1)" "an unknown --layout key is refused"
P --layout pp=1,policy=balance > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q "balance needs parallel.pp >= 2" "$SCRATCH/err" && echo 0 || echo 1)" "balance at pp=1 is refused: no partner"
P --layout pp=2,policy=balance --device a100-80g > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q "balance on a GPU kind" "$SCRATCH/err" && echo 0 || echo 1)" "balance on a GPU kind is refused (host MPI moves only)"
P > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q "ranks" "$SCRATCH/err" && echo 0 || echo 1)" "plan without --ranks or --layout is refused"

# --- tensor parallelism that does not divide the model, as train refuses it (cm_tp_indivisible) ---
# SmolLM2-135M's 9 heads (3 key/value heads): tp = 3 divides them, tp = 2 does not
"$MINDPIPE" plan -c "$MP_SRCDIR/inputs/smollm2-135m.ini" --layout tp=2 > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q "tp=2: the heads are not a multiple of tp (9 heads, 3 key/value heads" "$SCRATCH/err" && echo 0 || echo 1)" \
    "plan --layout tp=2 of SmolLM2-135M (9 heads) is refused naming the heads"
"$MINDPIPE" plan -c "$MP_SRCDIR/inputs/smollm2-135m.ini" --layout tp=3 > "$SCRATCH/out" 2> "$SCRATCH/err"
ok "$([ $? -le 1 ] && grep -q "^plan 1: tp=3" "$SCRATCH/out" && echo 0 || echo 1)" "plan --layout tp=3 of SmolLM2-135M is predicted"
# llama-tiny with 4 heads, 2 key/value heads: tp = 4 divides the heads but not the kv heads; the
# search (4 H100 ranks) proposed 5 tp = 4 plans before, which train refuses
"$MINDPIPE" plan -c "$MP_SRCDIR/inputs/llama-tiny.ini" --layout tp=4 > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q "tp=4: the key/value heads are not a multiple of tp" "$SCRATCH/err" && echo 0 || echo 1)" \
    "plan --layout tp=4 of llama-tiny (2 key/value heads) is refused naming the key/value heads"
"$MINDPIPE" plan -c "$MP_SRCDIR/inputs/llama-tiny.ini" --ranks 4 --device h100-80g --top 63 --json > "$SCRATCH/kv.json" 2> "$SCRATCH/err"
ok "$(grep -q '"tp": 2' "$SCRATCH/kv.json" && ! grep -q '"tp": 4' "$SCRATCH/kv.json" && echo 0 || echo 1)" \
    "plan --ranks 4 of llama-tiny: tp = 2 plans, none of tp = 4"
"$MINDPIPE" plan -c "$MP_SRCDIR/inputs/llama-tiny.ini" --set model.ffn_dim=386 --layout tp=4 --set model.kv_heads=4 > /dev/null 2> "$SCRATCH/err"
ok "$([ $? -eq 2 ] && grep -q "MLP's hidden width is not a multiple of tp" "$SCRATCH/err" && echo 0 || echo 1)" \
    "plan --layout tp=4 with model.ffn_dim=386 is refused naming the MLP's width"
done_testing
