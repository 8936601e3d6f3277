#!/bin/sh
# The V schedules run (ARCHITECTURE.md §5, the V placement): two chunks per stage in a V (stage r
# holds chunks r and 2pp−1−r; the embedding and the loss both on stage 0; the turn, chunk pp−1 to
# chunk pp, a copy on stage pp−1 with no message). MP_V_KIND picks the schedule: zbv (ZB-V's lists,
# every backward split into B and W; the default) or dualpipev (DualPipeV's order: fused backwards
# beside split ones, and overlapped forward-backward pairs between one set of messages:
# test_dualpipev_run.sh). Either trains bitwise identical to one rank at pp = 2 and 4 with m = 4 and
# 8 micro-batches (dualpipev needs m >= 2pp: pp = 4 with m = 4 is refused, naming the rule) (losses,
# grad norms and the checkpoint; at pp = 2 on emu too, and under recompute, selective and offload);
# dp = 2 and tp = 2 × pp = 2 bitwise as 1f1b on the same layout and as the same dp or tp on one stage;
# a checkpoint resumes into the same layout and on one rank, and continues bitwise as the run that
# did not stop; the timeline shows the B's and W's of both chunks (dualpipev: its fused backwards and
# its pairs, each pair's gradient waited for after its forward); what the V does not run with yet is
# refused naming why; measured peak = plan; recovery.log says it logs nothing.
# Up to 4 ranks on 2 cores.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
# 8 layers: 2·pp chunks of equal size at pp = 2 (2 layers each) and pp = 4 (1 each). 8 steps with an
# evaluation at 4 and a checkpoint at 4 and 8 (the resume's start); batch 8: micro_batch 2 is m = 4, 1 is m = 8
S="--set model.layers=8 --set train.threads=1 --set train.steps=8 --set train.eval_every=4 --set checkpoint.every=4"
V=${MP_V_KIND:-zbv}
Z="--set parallel.schedule=$V"

for mb in 2 1; do
    m=$((8 / mb))
    # shellcheck disable=SC2086
    run 1 ref$m $S --set train.micro_batch=$mb; ok $? "one rank, m=$m (the reference)"
    for pp in 2 4; do
        if [ $V = dualpipev ] && [ $m -lt $((2 * pp)) ]; then
            # shellcheck disable=SC2086
            refused "dualpipev pp=$pp with m=$m < 2pp" "needs at least 2 × parallel.pp = $((2 * pp)) micro-batches" $pp \
                $S $Z --set parallel.pp=$pp --set train.micro_batch=$mb
            continue
        fi
        # shellcheck disable=SC2086
        run $pp zbv${pp}m$m $S $Z --set parallel.pp=$pp --set train.micro_batch=$mb; ok $? "$V pp=$pp m=$m: 8 steps"
        compare "$V pp=$pp m=$m = one rank" "$SCRATCH/ref$m" "$SCRATCH/zbv${pp}m$m" --bitwise
    done
done

# emu: a device backend whose memory the host does not see (the turn's copies are device copies)
# shellcheck disable=SC2086
run 2 zbvemu $S $Z --set parallel.pp=2 --set train.micro_batch=2 --set train.device=emu; ok $? "$V pp=2 m=4 on emu"
compare "$V pp=2 m=4 on emu = one rank" "$SCRATCH/ref4" "$SCRATCH/zbvemu" --bitwise

# dp = 2 × pp = 2 and tp = 2 × pp = 2 (4 ranks): bitwise the same layout under 1f1b, and the same
# data or tensor parallelism on one stage (2 ranks); the data-parallel buckets are reduced once the
# last W of their layers has run, the tensor-parallel all-reduces run in F and B of both chunks
for par in dp tp; do
    mb=1; [ $par = tp ] && mb=2
    P="--set parallel.$par=2 --set train.micro_batch=$mb"
    # shellcheck disable=SC2086
    run 2 ${par}one $S $P; ok $? "$par=2 on one stage (the reference)"
    # shellcheck disable=SC2086
    run 4 ${par}1f1b $S $P --set parallel.pp=2 --set parallel.schedule=1f1b; ok $? "1f1b $par=2 × pp=2: 4 ranks"
    # shellcheck disable=SC2086
    run 4 ${par}zbv $S $P --set parallel.pp=2 $Z; ok $? "$V $par=2 × pp=2: 4 ranks"
    compare "$V $par=2 × pp=2 = 1f1b $par=2 × pp=2" "$SCRATCH/${par}1f1b" "$SCRATCH/${par}zbv" --bitwise
    compare "$V $par=2 × pp=2 = $par=2 on one stage" "$SCRATCH/${par}one" "$SCRATCH/${par}zbv" --bitwise
done

# recompute and selective: B re-runs the forward's products into the weight-gradient stash (model.h),
# in both chunks of the V; bitwise one rank
# offload: each stash to the host after its forward, back before its B, on the device until its W;
# the turn reads chunk pp−1's output from the resident part of its slot (the residual stream)
for pol in recompute selective offload; do
    # shellcheck disable=SC2086
    run 2 ${pol}zbv $S $Z --set parallel.pp=2 --set train.micro_batch=2 --set memory.policy=$pol
    ok $? "$V pp=2 m=4 under memory.policy=$pol"
    compare "$V under $pol = one rank" "$SCRATCH/ref4" "$SCRATCH/${pol}zbv" --bitwise
done
# shellcheck disable=SC2086
run 4 offload4emu $S $Z --set parallel.pp=4 --set train.micro_batch=1 --set memory.policy=offload --set memory.prefetch=2 \
    --set train.device=emu
ok $? "$V pp=4 m=8 under offload, prefetch 2, on emu"
compare "$V pp=4 offload on emu = one rank" "$SCRATCH/ref8" "$SCRATCH/offload4emu" --bitwise

# resume: a new run directory starts from zbv pp=2 m=4's step-4 checkpoint and trains to 8, in the
# same layout and on one rank; both end as the run that did not stop, bitwise
for n in 2 1; do
    mkdir -p "$SCRATCH/zbvres$n/ckpt" && cp "$SCRATCH/zbv2m4/ckpt/step_00000004.h5" "$SCRATCH/zbvres$n/ckpt/"
    P=""; [ "$n" -eq 2 ] && P="$Z --set parallel.pp=2"
    # shellcheck disable=SC2086
    run $n zbvres$n $S $P --set train.micro_batch=2 --resume auto
    ok $? "$V pp=2's step-4 checkpoint resumed on $n rank(s) ($( [ "$n" -eq 2 ] && echo $V pp=2 || echo one rank ))"
    grep -q "resumed from .*step_00000004.h5 at step 4" "$SCRATCH/zbvres$n/log.txt"
    ok $? "the resume on $n rank(s) says it resumed from step_00000004.h5 at step 4"
    compare "$V pp=2 checkpoint resumed on $n rank(s) = the unbroken run" "$SCRATCH/zbv2m4" "$SCRATCH/zbvres$n" \
        --bitwise --step 8
done

# the timeline of pp = 4, m = 8, each stage's spans in time order. zbv: 16 B's and 16 W's per step,
# no fused backward. dualpipev: as many B's as W's, with the fused backwards 16 per step, and its
# overlapped pairs, a forward followed by a fused backward of the other arm with no other
# computation between: 2(m − 2pp + r + 1) + (pp − r − 1) per step on stage r (zerobubble.h), each
# pair's gradient waited for after its forward (the receive posted before it: exec_posted_t)
"$TORCH_PYTHON" -c "
import json,sys
ev=[e for e in json.load(open('$SCRATCH/zbv4m8/trace.json'))['traceEvents'] if e['ph']=='X']
bad=[]
for p in range(4):
    names=[e['name'] for e in sorted((e for e in ev if e['pid']==p), key=lambda e: e['ts'])]
    work=[x for x in names if x in ('forward','backward','backward B','backward W','receive gradient')]
    nb,nw,nf=work.count('backward B'),work.count('backward W'),work.count('backward')
    g=[x for x in work if x!='receive gradient']
    pairs=sum(1 for a,b in zip(g,g[1:]) if a=='forward' and b=='backward')
    # a pair's gradient is waited for after its forward (posted before it), never before
    late=sum(1 for a,b,c in zip(work,work[1:],work[2:]) if (a,b,c)==('forward','receive gradient','backward'))
    early=sum(1 for a,b,c in zip(work,work[1:],work[2:]) if (a,b,c)==('receive gradient','forward','backward'))
    if '$V'=='zbv': good = nb==nw==8*2*8 and nf==0
    else: good = nb==nw and nb+nf==8*2*8 and nf>0 and pairs==8*(2*(8-8+p+1)+(4-p-1)) and late>0 and early==0
    print('# stage %d: %d B, %d W, %d fused, %d forward-backward pairs (%d waiting for their gradient after the forward, %d before)' % (p,nb,nw,nf,pairs,late,early))
    if not good: bad.append(p)
sys.exit(1 if bad else 0)"
rc=$?
if [ $V = zbv ]; then
    ok $rc "trace.json: every stage of zbv pp=4 m=8 shows 16 B's and 16 W's per step (two chunks), no fused backward"
else
    ok $rc "trace.json: every stage of dualpipev pp=4 m=8 shows its fused and split backwards (16 per step, a W per B) and its overlapped pairs, their gradients waited for after the forward"
fi

# the plan: every stage's measured peak equals it (the arena counts the bytes requested: the stashes
# of both chunks, the weight-gradient stashes and, on stage pp−1, the turn's gradient buffers)
"$TORCH_PYTHON" -c "
import json,sys
bad=[]
for r in ('zbv2m4','zbv2m8','zbv4m8','zbvemu','dpzbv','tpzbv','recomputezbv','selectivezbv','offloadzbv','offload4emu') + (('zbv4m4',) if '$V'=='zbv' else ()):
    x=json.loads(open('$SCRATCH/%s/metrics.jsonl' % r).readlines()[-1])
    if x['peak_mem_bytes'] != x['planned_mem_bytes']: bad.append((r, x['peak_mem_bytes'], x['planned_mem_bytes']))
for b in bad: print('#', b)
sys.exit(1 if bad else 0)"
ok $? "$V: every stage's measured peak equals its plan (m = 4 and 8, emu, dp, tp, recompute, selective, offload)"

# recovery.log: the V placement is logged like the loop (a lost rank replayed: test_zero_loss.sh)
# shellcheck disable=SC2086
run 2 zbvrec $S $Z --set parallel.pp=2 --set train.micro_batch=2 --set train.steps=2 --set train.warmup=1 \
    --set train.eval_every=2 --set checkpoint.every=2 --set recovery.log=1
rc=$?
[ $rc -eq 0 ] && ! grep -q "nothing is logged" "$SCRATCH/zbvrec/log.txt" && [ -s "$SCRATCH/zbvrec/bndlog/bnd-r0.h5" ] &&
    [ -s "$SCRATCH/zbvrec/bndlog/bnd-r1.h5" ] && grep -q "recovery.log: rank 0 logged" "$SCRATCH/zbvrec/log.txt"
ok $? "$V with recovery.log=1 trains and both stages log (the V placement)"

# what the V does not run yet is refused at deck validation, naming why
# shellcheck disable=SC2086
refused "$V with memory.policy=balance" "parallel.schedule=$V with memory.policy=balance (memory.policy or memory.layers)" 2 \
    $S $Z --set parallel.pp=2 --set memory.policy=balance
# shellcheck disable=SC2086
run 2 zbvauto $S $Z --set parallel.pp=2 --set train.micro_batch=2 --set memory.policy=auto --set memory.device_limit=100M
ok $? "$V with memory.policy=auto under a device limit trains (auto picks keep, selective or recompute, never balance)"
# shellcheck disable=SC2086
refused "$V with a supernet" "parallel.schedule=$V with a supernet (supernet.enabled=1" 2 $S $Z --set parallel.pp=2 \
    --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip --set supernet.window=2
# shellcheck disable=SC2086
refused "$V with live migration" "live migration (pipeline.replan_every > 0) with more than one chunk per stage" 2 $S $Z --set parallel.pp=2 \
    --set pipeline.replan_every=2
# shellcheck disable=SC2086
refused "$V at pp = 1" "parallel.schedule=$V places two chunks on each of parallel.pp >= 2 stages" 1 $S $Z
# shellcheck disable=SC2086
refused "$V with an odd count of layers per stage" "is not a multiple of 2 × parallel.pp = 4" 2 $S $Z \
    --set parallel.pp=2 --set model.layers=6
done_testing
