#!/bin/sh
# Host-resident candidates (supernet.resident = host, ARCHITECTURE.md §4): every candidate's weights
# and AdamW moments live at home in host memory, the device holds the shared tensors and a few
# slots per choice block for the subnets in flight, and the next subnets' candidates come in
# through the offload path. The trajectory is bitwise that of resident = device on one rank, at
# pp = 2 and 4 (the auto slot count and 2 or 3 slots, which cap the subnets in flight on a stage:
# checked on the timeline), with dp = 2 and tp = 2 (against the same layout on the device), the
# stash offloaded, one subnet per executor step (interleaved), evaluations between windows, and resumes from one residency to
# the other; the device holds less (the log's report, the measured peak memory); bad decks refused.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch # causal_trace.py imports torch_ref.py (its sampler), which imports torch; compare_runs.py h5py
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
# 4 choice blocks × 5 candidates (4 with weights), window 2
SN="--set model.layers=4 --set train.threads=1 --set supernet.enabled=1 --set supernet.candidates=h4m4,h4m2,h2m2,h2m1,skip --set supernet.window=2 --set train.eval_every=4"
H="--set supernet.resident=host"

# shellcheck disable=SC2086
run 1 ref $SN; ok $? "every candidate on the device, one rank"
layouts_cmp --bitwise ref "$SN" "1 h1 $H" "1 h1s2 $H --set supernet.device_slots=2" \
    "2 h2 $H --set parallel.pp=2" "2 h2s2 $H --set parallel.pp=2 --set supernet.device_slots=2" \
    "1 hoff $H --set supernet.device_slots=2 --set memory.policy=offload" \
    "2 hil $H --set supernet.device_slots=2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
# window 4 at pp = 4: up to 3 subnets in flight on a stage on the device, 2 with 3 slots
W4="--set supernet.window=4 --set train.steps=16 --set checkpoint.every=8"
# shellcheck disable=SC2086
run 1 ref4 $SN $W4; ok $? "window 4, one rank"
layouts_cmp --bitwise ref4 "$SN $W4" "4 h4s3 $H --set parallel.pp=4 --set supernet.device_slots=3"
grep -q "one executor step each: the interleaved" "$SCRATCH/hil/log.txt" && grep -q "subnets run causally" "$SCRATCH/hoff/log.txt"
ok $? "interleaved runs a subnet per executor step (that path brings the candidates in too); offload runs causally"
# the cap on the timeline: slots − 1 subnets in flight on a stage at most (2 slots: one at a time)
for c in "h2s2 1" "h4s3 2"; do
    # shellcheck disable=SC2086
    set -- $c
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/causal_trace.py" "$SCRATCH/$1" --most "$2" > "$SCRATCH/tr.out" 2>&1
    ok $? "$1's trace: $(head -n 1 "$SCRATCH/tr.out")"
done
# shellcheck disable=SC2086
run 4 d4 $SN $W4 --set parallel.pp=4; ok $? "window 4 at pp=4, every candidate on the device"
"$TORCH_PYTHON" "$MP_SRCDIR/validation/causal_trace.py" "$SCRATCH/d4" --most 2 > "$SCRATCH/tr.out" 2>&1
[ $? -ne 0 ] && grep -q "at most 3 at once" "$SCRATCH/tr.out"
ok $? "the cap is the slots': on the device pp=4 has 3 subnets in flight at once on a stage ($(head -n 1 "$SCRATCH/tr.out"))"

# the candidates' copies take the node's host-link locks (memory.coordinate, on by default): on the
# timeline the two stages of h2s2 never copy in the same direction at once
copy_overlaps_known
"$TORCH_PYTHON" "$MP_SRCDIR/validation/copy_overlaps.py" "$SCRATCH/h2s2" > "$SCRATCH/ovl.out"
ovl_rc=$?
read -r _ nc no < "$SCRATCH/ovl.out"
[ $ovl_rc -eq 0 ] && [ "${nc:-0}" -gt 0 ] && [ "$no" = 0 ]
ok $? "candidate copies share the node's host link: ${nc:-?} copies, ${no:-?} same-direction overlaps between ranks (copy_overlaps.py exit $ovl_rc)"

# dp and tp: against the same layout with every candidate on the device
for l in "dp --set parallel.dp=2" "tp --set parallel.tp=2"; do
    # shellcheck disable=SC2086
    set -- $l
    name=$1; shift
    # shellcheck disable=SC2086
    run 2 "${name}d" $SN "$@"; ok $? "$name=2 on the device"
    # shellcheck disable=SC2086
    run 2 "${name}h" $SN $H --set supernet.device_slots=2 "$@"; ok $? "$name=2 from host memory, 2 slots"
    compare "$name=2: host-resident vs on the device" "$SCRATCH/${name}d" "$SCRATCH/${name}h" --bitwise
done

# what the device holds: the log's report and the measured peak
r=$(sed -n 's/.*device slots per choice block of 5 candidates: the devices hold [0-9.]* MB of the candidates. [0-9.]* MB (\([0-9]*\)%).*/\1/p' "$SCRATCH/h1s2/log.txt")
[ -n "$r" ] && [ "$r" -lt 100 ]
ok $? "2 slots: the device holds ${r:-?}% of the candidates' bytes (the log says so)"
peak() { tail -n 1 "$SCRATCH/$1/metrics.jsonl" | sed 's/.*"peak_mem_bytes":\[\([0-9]*\).*/\1/'; }
pd=$(peak ref); ph=$(peak h1s2)
[ -n "$pd" ] && [ -n "$ph" ] && [ "$ph" -lt "$pd" ]
ok $? "measured peak device memory: $ph bytes with 2 slots < $pd with every candidate"
grep -q "supernet candidates from host memory (rank 0): [1-9][0-9]* brought in" "$SCRATCH/h1s2/log.txt"
ok $? "the end of the run reports the candidates brought in and written home"

# resume from one residency into the other, at a window's end: bitwise
# shellcheck disable=SC2086
run 1 rh $SN $H --set supernet.device_slots=2 --set checkpoint.every=10 --set debug.fail_at=0:11
[ -s "$SCRATCH/rh/ckpt/step_00000010.h5" ]; ok $? "host-resident run killed after its step-10 checkpoint"
# shellcheck disable=SC2086
run 1 rh $SN --resume auto; ok $? "resumed with every candidate on the device"
resumed_from "host-resident checkpoint on the device" rh 10
compare "host-resident checkpoint resumed on the device" "$SCRATCH/ref" "$SCRATCH/rh" --bitwise
# shellcheck disable=SC2086
run 1 rd $SN --set checkpoint.every=10 --set debug.fail_at=0:11
# without it the resume below would start afresh, and a fresh host-resident run is bitwise the reference too
[ -s "$SCRATCH/rd/ckpt/step_00000010.h5" ]; ok $? "on-device run killed after its step-10 checkpoint"
# shellcheck disable=SC2086
run 1 rd $SN $H --set supernet.device_slots=2 --set parallel.pp=1 --resume auto; ok $? "resumed from host memory, 2 slots"
resumed_from "device checkpoint host-resident" rd 10
compare "device checkpoint resumed host-resident" "$SCRATCH/ref" "$SCRATCH/rd" --bitwise

# shellcheck disable=SC2086
refused "one slot" "supernet.device_slots=1: a stage needs a slot for the subnet in flight" 1 $SN $H \
    --set supernet.device_slots=1
# shellcheck disable=SC2086
refused "supernet replicas" "supernet.resident=host with parallel.sp=2" 2 $SN $H --set parallel.sp=2
done_testing
