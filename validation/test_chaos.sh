#!/bin/sh
# The randomized fault campaign's fixed sample (validation/chaos/chaos.py, issue 45 item 3;
# docs/RELIABILITY.md "Fault campaign"): 10 trials of seed 45, each a layout (2-8 ranks, supernets
# too), a backend (cpu, emu) and a fault (a rank killed or stopped mid-step or mid-checkpoint-write, a
# corrupted log entry) drawn from the seed, launched as the jobs launch a run that must
# outlive a dead rank. Each trial's verdict: the fault ended the run within its deadline naming the
# rank, no good checkpoint lost, the resume bitwise the uninterrupted run at step 24, 0 steps lost
# where the layout replays (else at most checkpoint.every, the reason logged). A failing trial prints
# its seed and the command that replays it. The full campaign is a benchmark (chaos.py --trials 300).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # the campaign compares checkpoints and flips bytes in logs (h5py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
# relapse (a second kill during the recovery, after a random delay) and full (the disk filled as a
# step begins) are left to the full campaign: where their fault lands depends on the clock, and a
# check here gives the same verdict every run
"$TORCH_PYTHON" "$MP_SRCDIR/validation/chaos/chaos.py" --mindpipe "$MINDPIPE" --data "$data" --seed 45 --trials 10 \
    --faults kill,hang,write,stall,corrupt --keep "$SCRATCH/chaos" > "$SCRATCH/chaos.out" 2>&1
tap_checker "chaos, seed 45" chaos.py $? "$SCRATCH/chaos.out"
grep -q "^10 passed, 0 failed$" "$SCRATCH/chaos.out"
ok $? "chaos, seed 45: the campaign's own count (10 passed, 0 failed)"
done_testing
