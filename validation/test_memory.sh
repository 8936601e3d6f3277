#!/bin/sh
# Memory policies (ARCHITECTURE.md §6): recompute, selective, offload and balance, and mixed per-layer plans,
# give bitwise the weights and losses of keep (same threads per rank) at pp = 1, 2 and 4 under
# 1f1b, interleaved and 2bw, at tp2×pp2 and dp2×pp2 with ZeRO-1, and on emu. The arena's measured
# peak equals the plan made before allocating (emu's fused attention's carving too); recompute keeps only block inputs; offload keeps
# fewer buffers on the device than micro-batches stashed; a deck keep cannot fit under
# memory.device_limit is refused before step 1 naming the policy that fits, which then trains to
# keep's weights; a checkpoint written under one policy resumes bitwise under another. Balance at
# pp = 4, m = 8 cuts stage 0's activations by at least 30%, every evicted byte is accepted, and the
# schedules it cannot run are refused naming why.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
L4="--set model.layers=4 --set train.threads=1"
MIX="--set memory.layers=o,r,s,k"

# shellcheck disable=SC2086
run 1 ref $L4; ok $? "keep, one rank (the reference)"
# shellcheck disable=SC2086
run 1 ref2 $L4 --set train.micro_batch=2; ok $? "keep, one rank, 4 micro-batches"
layouts_cmp --bitwise ref "$L4" "1 rc --set memory.policy=recompute" \
    "1 sel --set memory.policy=selective" \
    "1 off --set memory.policy=offload" \
    "1 off0 --set memory.policy=offload --set memory.prefetch=0" \
    "1 mix $MIX" \
    "2 f1b2 --set parallel.pp=2 --set memory.policy=offload" \
    "2 il2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 $MIX" \
    "1 emu --set train.device=emu --set memory.policy=offload" \
    "2 emu2 --set train.device=emu --set parallel.pp=2 $MIX"
layouts_cmp --bitwise ref2 "$L4 --set train.micro_batch=2" "4 f1b4 --set parallel.pp=4 $MIX" \
    "4 f1b4r --set parallel.pp=4 --set memory.policy=recompute" \
    "4 f1b4k --set parallel.pp=4" \
    "4 il4o --set parallel.pp=4 --set parallel.schedule=interleaved --set memory.policy=offload"

# 2bw keeps two weight versions and no flush: its reference is keep under 2bw.
B="--set parallel.schedule=2bw --set train.micro_batch=2"
# shellcheck disable=SC2086
run 2 bw $L4 $B --set parallel.pp=2; ok $? "2bw pp=2, keep"
# shellcheck disable=SC2086
run 2 bwm $L4 $B --set parallel.pp=2 $MIX; ok $? "2bw pp=2, mixed o,r,s,k"
compare "2bw mixed = 2bw keep" "$SCRATCH/bw" "$SCRATCH/bwm" --bitwise
# shellcheck disable=SC2086
run 4 bw4 $L4 $B --set parallel.pp=4 --set memory.policy=offload; ok $? "2bw pp=4, offload"
compare "2bw pp=4 offload = 2bw pp=2 keep" "$SCRATCH/bw" "$SCRATCH/bw4" --bitwise

# Tensor and data parallelism: each against keep on the same layout.
for lay in "tp --set parallel.tp=2 --set parallel.pp=2" \
           "dpz --set parallel.dp=2 --set parallel.pp=2 --set parallel.zero=1 --set train.micro_batch=2"; do
    # shellcheck disable=SC2086
    set -- $lay
    name=$1; shift
    # shellcheck disable=SC2086
    run 4 "${name}k" $L4 "$@"; ok $? "$name: keep"
    # shellcheck disable=SC2086
    run 4 "${name}m" $L4 "$@" $MIX; ok $? "$name: mixed o,r,s,k"
    compare "$name mixed = keep" "$SCRATCH/${name}k" "$SCRATCH/${name}m" --bitwise
done

# Balance (BPipe) under 1F1B at pp = 4 and m = 8: bitwise keep's weights (one rank, the same eight
# micro-batches), alone, with other policies' letters mixed in, and on emu.
# shellcheck disable=SC2086
run 1 ref8 $L4 --set train.micro_batch=1; ok $? "keep, one rank, 8 micro-batches"
layouts_cmp --bitwise ref8 "$L4 --set train.micro_batch=1" "4 bk4 --set parallel.pp=4" \
    "4 bal4 --set parallel.pp=4 --set memory.policy=balance" \
    "4 balm --set parallel.pp=4 --set memory.layers=b,r,s,b" \
    "4 bale --set parallel.pp=4 --set train.device=emu --set memory.policy=balance"
# An odd pipeline (its middle stage keeps its stashes) on emu, against one rank with its 6 layers;
# tp2×pp4 and dp2×pp4 with ZeRO-1, against keep on the same layout.
# shellcheck disable=SC2086
run 1 ref86 $L4 --set train.micro_batch=1 --set model.layers=6; ok $? "keep, one rank, 6 layers, 8 micro-batches"
# shellcheck disable=SC2086
run 3 bal3 $L4 --set train.micro_batch=1 --set model.layers=6 --set parallel.pp=3 --set train.device=emu --set memory.policy=balance
ok $? "balance at pp=3 on emu"
compare "balance pp=3 emu = keep" "$SCRATCH/ref86" "$SCRATCH/bal3" --bitwise
for lay in "tp4 --set parallel.tp=2" "dp4 --set parallel.dp=2 --set parallel.zero=1"; do
    # shellcheck disable=SC2086
    set -- $lay
    name=$1; shift
    # shellcheck disable=SC2086
    run 8 "${name}k" $L4 --set train.micro_batch=1 --set parallel.pp=4 "$@"; ok $? "$name: keep, pp=4"
    # shellcheck disable=SC2086
    run 8 "${name}b" $L4 --set train.micro_batch=1 --set parallel.pp=4 "$@" --set memory.policy=balance; ok $? "$name: balance, pp=4"
    compare "$name balance = keep" "$SCRATCH/${name}k" "$SCRATCH/${name}b" --bitwise
done
# Activations: the peak above weights, gradients and optimizer state. Stage 0 keeps 2 of its 4
# stashes; the largest stage's cut is smaller in bytes than in stashes (4 to 3), as every stage
# also holds a block's workspace and its gradient send buffers whatever it stashes.
"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, sys
S = sys.argv[1]
last = lambda run: json.loads(open('%s/%s/metrics.jsonl' % (S, run)).readlines()[-1])
k, b = last('bk4'), last('bal4')
ka, ba = k['activation_peak_bytes'], b['activation_peak_bytes']
cut0, cutmax = 1 - ba[0] / ka[0], 1 - max(ba) / max(ka)
print('# pp=4 m=8 activation peak per stage: keep %s, balance %s' % (ka, ba))
print('# stage 0 cut by %.1f%%, the largest stage by %.1f%%; evicted/step %s, accepted/step %s, wait/step %s' % (
    100 * cut0, 100 * cutmax, b['evicted_bytes_per_step'], b['accepted_bytes_per_step'], b['transfer_wait_s_per_step']))
ev, ac = b['evicted_bytes_per_step'], b['accepted_bytes_per_step']
ok = cut0 >= 0.30 and cutmax >= 0.15 and ev[0] > 0 and ev[0] == ac[3] and ev[1] == ac[2] and ac[0] == ac[1] == ev[2] == ev[3] == 0
for run in ('bal3', 'tp4b', 'dp4b'):  # every evictor evicts something, and its acceptor takes it all
    e, a = last(run)['evicted_bytes_per_step'], last(run)['accepted_bytes_per_step']
    print('# %s: evicted/step %s, accepted/step %s' % (run, e, a))
    ok = ok and e[0] > 0 and all(e[s] == a[len(e) - 1 - s] for s in range(len(e)))
sys.exit(0 if ok else 1)
EOF
ok $? "balance: stage 0's activations cut by at least 30%, the largest stage's by at least 15%; every evicted byte accepted by stage p-1-s (pp=3, tp2, dp2 too)"
refused "balance under gpipe" "no stage has room to accept" 2 $L4 --set parallel.pp=2 --set parallel.schedule=gpipe --set memory.policy=balance
refused "balance under 2bw" "under 2bw stashes outlive the step" 2 $L4 --set parallel.pp=2 --set parallel.schedule=2bw --set memory.policy=balance
refused "balance under interleaved" "under interleaved a stage holds several chunks" 2 $L4 --set parallel.pp=2 --set parallel.schedule=interleaved --set memory.policy=balance
refused "balance on one stage" "one stage has no partner" 1 $L4 --set memory.policy=balance
refused "offload and balance mixed" "memory.policy=offload (memory.policy or memory.layers) with memory.policy=balance" 2 $L4 --set parallel.pp=2 --set memory.layers=o,b,k,k

# The fused attention's carving (train.attention=fused on emu: log-sum-exps instead of the (T,T)
# probabilities; head size 16) under a mixed plan at pp = 2, for the peak = plan check below
# (test_attention_fused.sh checks its bytes and its training).
# shellcheck disable=SC2086
run 2 fusedmix $L4 --set model.heads=2 --set train.device=emu --set train.attention=fused --set parallel.pp=2 $MIX
ok $? "emu, attention=fused, pp=2, mixed o,r,s,k"

# The plan is the measured peak (the arena counts the bytes requested: tolerance 0), per stage.
"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, sys, os
bad, n = [], 0
for run in sorted(os.listdir(sys.argv[1])):
    f = os.path.join(sys.argv[1], run, 'metrics.jsonl')
    if not os.path.exists(f): continue
    for line in open(f):
        r = json.loads(line)
        n += 1
        if r['peak_mem_bytes'] != r['planned_mem_bytes']: bad.append((run, r['step'], r['peak_mem_bytes'], r['planned_mem_bytes']))
print('# %d metrics lines checked: %d differ' % (n, len(bad)))
for b in bad[:5]: print('# %s step %d measured %s planned %s' % b)
sys.exit(1 if bad or n < 100 else 0)
EOF
ok $? "every run's measured peak per stage equals its plan"

# What stays on the device. Sizes in floats: B·T·C per activation (B = 4, T = 32, C = 32).
"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, sys
S = sys.argv[1]
last = lambda run: json.loads(open('%s/%s/metrics.jsonl' % (S, run)).readlines()[-1])
k, r, s, o = last('ref'), last('rc'), last('sel'), last('off')
B, T, C, H, R, L = 4, 32, 32, 4, 4, 4
act = B * T * C * 4
rest = (C + 2 + 3 * C + C + C + C + 2 + R * C + R * C) * B * T * 4   # per block, without res3 and att
att = B * H * T * T * 4
# recompute: the slot keeps the embedding and L block outputs (the next blocks' inputs), not the
# rest; the workspace adds one whole block once
d_rc = k['peak_mem_bytes'][0] - r['peak_mem_bytes'][0]
d_sel = k['peak_mem_bytes'][0] - s['peak_mem_bytes'][0]
print('# keep %d, recompute %d (-%d), selective %d (-%d), offload %d; host %s' % (
    k['peak_mem_bytes'][0], r['peak_mem_bytes'][0], d_rc, s['peak_mem_bytes'][0], d_sel, o['peak_mem_bytes'][0], o['host_bytes']))
# exact: recompute saves (L - 1) blocks' rest+att minus one res3 (the workspace holds a whole block)
want_rc = (L - 1) * (rest + att) - act
# selective saves L·att minus the workspace's att and attention output (B·T·C floats)
want_sel = (L - 1) * att - B * T * C * 4
print('# recompute saved %d (want %d), selective saved %d (want %d)' % (d_rc, want_rc, d_sel, want_sel))
sys.exit(0 if d_rc == want_rc and d_sel == want_sel else 1)
EOF
ok $? "recompute keeps only block inputs, selective drops the T² probabilities"
"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, sys
S = sys.argv[1]
last = lambda run: json.loads(open('%s/%s/metrics.jsonl' % (S, run)).readlines()[-1])
o, k = last('il4o'), last('f1b4k')
print('# pp=4 keep: peak bytes %s; offload: %s' % (k['peak_mem_bytes'], o['peak_mem_bytes']))
print('# pp=4 interleaved offload: stash %s, offload buffers %s, offloaded/step %s, prefetched/step %s, wait/step %s' % (
    o['stash_peak'], o['offload_buffers_peak'], o['offloaded_bytes_per_step'], o['prefetched_bytes_per_step'], o['transfer_wait_s_per_step']))
ok = o['offload_buffers_peak'][0] < o['stash_peak'][0] and o['peak_mem_bytes'][0] < k['peak_mem_bytes'][0] and o['host_bytes'][0] > 0 and o['offloaded_bytes_per_step'] == o['prefetched_bytes_per_step'] and min(o['offloaded_bytes_per_step']) > 0
sys.exit(0 if ok else 1)
EOF
ok $? "offload: stage 0 holds fewer device buffers than stashed micro-batches and less memory than keep; every offloaded byte comes back"

# Node-coordinated swapping: the 4 ranks of this node never copy the same way at once (the trace's
# copy-engine rows), while without coordination they do; the weights are the same either way.
for c in 1 0; do
    # shellcheck disable=SC2086
    run 4 "co$c" $L4 --set parallel.pp=4 --set train.micro_batch=2 --set memory.policy=offload --set memory.coordinate=$c
    ok $? "offload at pp=4 with memory.coordinate=$c"
done
compare "coordinated = uncoordinated" "$SCRATCH/co0" "$SCRATCH/co1" --bitwise
copy_overlaps_known
"$TORCH_PYTHON" "$MP_SRCDIR/validation/copy_overlaps.py" "$SCRATCH/co1" "$SCRATCH/co0" > "$SCRATCH/ovl.out"
ovl_rc=$?
read -r _ c1 o1 < "$SCRATCH/ovl.out"
c0=$(sed -n 2p "$SCRATCH/ovl.out" | cut -d' ' -f2); o0=$(sed -n 2p "$SCRATCH/ovl.out" | cut -d' ' -f3)
echo "# coordinated: $c1 copies, $o1 same-direction overlaps between ranks; uncoordinated: $c0 copies, $o0 overlaps"
[ $ovl_rc -eq 0 ] && [ "$c1" = 640 ] && [ "$c0" = 640 ] && [ "$o1" = 0 ]
ok $? "coordinated: no two ranks of the node copy in the same direction at once (every copy on the trace; copy_overlaps.py exit $ovl_rc)"

# memory.device_limit: keep does not fit, the refusal names the stage and a policy that does.
limit=$("$TORCH_PYTHON" -c "import json; print(json.loads(open('$SCRATCH/ref/metrics.jsonl').readline())['planned_mem_bytes'][0] - 1)")
# shellcheck disable=SC2086
run 1 lim $L4 --set memory.device_limit="$limit"
st=$?
grep -q "stage 0 (rank 0) plans a peak of $((limit + 1)) bytes" "$SCRATCH/lim.log" &&
    grep -q "memory.policy=selective would fit" "$SCRATCH/lim.log" && [ ! -e "$SCRATCH/lim/metrics.jsonl" ] &&
    [ "$st" -ne 0 ]
ok $? "keep over memory.device_limit=$limit is refused before step 1, naming the stage, its plan and selective"
diag "$(grep -m1 'device_limit' "$SCRATCH/lim.log")"
# shellcheck disable=SC2086
run 1 limr $L4 --set memory.device_limit="$limit" --set memory.policy=recompute; ok $? "the same limit with recompute trains"
compare "recompute under the limit = keep without it" "$SCRATCH/ref" "$SCRATCH/limr" --bitwise

# Checkpoints carry no stash: keep's step-10 checkpoint resumes under offload and under recompute.
for pol in offload recompute; do
    mkdir -p "$SCRATCH/res$pol/ckpt" && cp "$SCRATCH/ref/ckpt/step_00000010.h5" "$SCRATCH/res$pol/ckpt/"
    # shellcheck disable=SC2086
    run 1 "res$pol" $L4 --set memory.policy=$pol --resume auto; ok $? "keep's checkpoint resumed under $pol"
    resumed_from "resumed under $pol" "res$pol" 10
    compare "resumed under $pol = keep" "$SCRATCH/ref" "$SCRATCH/res$pol" --bitwise --step 20
done

# ... and keep's step-10 checkpoint of 8 micro-batches on one rank resumes under balance at pp = 4.
mkdir -p "$SCRATCH/resbal/ckpt" && cp "$SCRATCH/ref8/ckpt/step_00000010.h5" "$SCRATCH/resbal/ckpt/"
# shellcheck disable=SC2086
run 4 resbal $L4 --set train.micro_batch=1 --set parallel.pp=4 --set memory.policy=balance --resume auto
ok $? "keep's checkpoint resumed under balance at pp=4"
resumed_from "resumed under balance" resbal 10
compare "resumed under balance = keep" "$SCRATCH/ref8" "$SCRATCH/resbal" --bitwise --step 20

refused "memory.layers of the wrong length" "memory.layers" 1 $L4 --set memory.layers=k,r
refused "an unknown letter in memory.layers" "memory.layers" 1 $L4 --set memory.layers=k,r,x,k
# memory.policy=auto itself is checked in validation/test_plan.sh; here: refused when nothing can fit
refused "memory.policy=auto under a limit nothing fits" "device_limit" 1 $L4 --set memory.policy=auto --set memory.device_limit=64K
done_testing
