#!/bin/sh
# The randomized fault campaign's fixed sample (validation/chaos/chaos.py, issue 45 item 3;
# docs/RELIABILITY.md "Fault campaign"): 10 trials of seed 45, each a layout (2-8 ranks, supernets
# too), a backend (cpu, emu) and a fault (a rank killed or stopped mid-step or mid-checkpoint-write, a
# corrupted log entry) drawn from the seed, launched as the jobs launch a run that must
# outlive a dead rank. Each trial's verdict: the fault ended the run within its deadline naming the
# rank, no good checkpoint lost, the resume bitwise the uninterrupted run at step 24, 0 steps lost
# where the layout replays (else at most checkpoint.every, the reason logged). A failing trial prints
# its seed and the command that replays it; then one trial of the again fault (a second kill in the
# resumed run), and under the one-node Slurm two of write/stall/again, two of relapse (a second
# loss inside the requeued run's recovery) and one corrupted log. The full campaign is a benchmark (chaos.py --trials 300).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # the campaign compares checkpoints and flips bytes in logs (h5py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
# mpiexec's relapse (a second kill during the recovery, after a random delay) and full (the disk
# filled as a step begins) are left to the full campaign: where their fault lands depends on the
# clock, and a check here gives the same verdict every run (Slurm's relapse, below, is at a drawn
# step of the replay: debug.fail_at=R:S:replay)
"$TORCH_PYTHON" "$MP_SRCDIR/validation/chaos/chaos.py" --mindpipe "$MINDPIPE" --data "$data" --seed 45 --trials 10 \
    --faults kill,hang,write,stall,corrupt --keep "$SCRATCH/chaos" > "$SCRATCH/chaos.out" 2>&1
tap_checker "chaos, seed 45" chaos.py $? "$SCRATCH/chaos.out"
grep -q "^10 passed, 0 failed$" "$SCRATCH/chaos.out"
ok $? "chaos, seed 45: the campaign's own count (10 passed, 0 failed)"
# the again fault (a second kill in the resumed run; deterministic: debug.fail_at both times): seed
# 11's trial 0 loses pp = 2's last stage at step 12, then its first at step 14, whose replay reads the
# tied head's inputs that the first replay logged again (the binary of a0cb2ee fell back here)
"$TORCH_PYTHON" "$MP_SRCDIR/validation/chaos/chaos.py" --mindpipe "$MINDPIPE" --data "$data" --seed 11 --only 0 \
    --faults again --keep "$SCRATCH/again" > "$SCRATCH/again.out" 2>&1
tap_checker "chaos again, seed 11 trial 0" chaos.py $? "$SCRATCH/again.out"
grep -q "^PASS trial 0 (seed 11): pp2 on emu, again (then rank 0 at step 14 of the resumed run) of rank 1 at step 12: 0 steps lost$" \
    "$SCRATCH/again.out"
ok $? "chaos again: pp2's last stage, then its first in the resumed run: 0 steps lost"
# under Slurm (jobs/slurm/train.sbatch on the one-node Slurm of slurm_harness.sh; root and the
# Slurm packages of .ci/deps.sh, as test_zero_loss_slurm.sh): seed 2's trials 0 and 1 of the faults
# the job's own requeue meets: zbv loses rank 1 at step 10 and, in the requeued run, rank 0 at
# step 12 (the job requeues twice, each loss named, 0 lost); tp2 (one stage: no log gives its
# gradient norms) has rank 0 stopped midway through the step-16 checkpoint write: the survivor
# saves nothing that replays, the job requeues and resumes from step 8, 7 steps lost, said
"$TORCH_PYTHON" "$MP_SRCDIR/validation/chaos/chaos.py" --mindpipe "$MINDPIPE" --data "$data" --seed 2 --trials 2 \
    --faults write,stall,again --launchers slurm1 --keep "$SCRATCH/slurm" > "$SCRATCH/slurm.out" 2>&1
tap_checker "chaos under slurm1, seed 2" chaos.py $? "$SCRATCH/slurm.out"
grep -q "^PASS trial 0 (seed 2) under slurm1 (LAUNCHER=mpirun, .*): zbv on emu, again (then rank 0 at step 12 of the resumed run) of rank 1 at step 10: 0 steps lost$" \
    "$SCRATCH/slurm.out"
ok $? "chaos under slurm1: zbv loses a rank, then another in the requeued run: requeued twice, 0 steps lost"
grep -q "^PASS trial 1 (seed 2) under slurm1 (LAUNCHER=srun, .*): tp2 on cpu, stall of rank 0 at step 16: 7 steps lost$" \
    "$SCRATCH/slurm.out"
ok $? "chaos under slurm1: tp2 stopped inside a checkpoint write: requeued, back to step 8's checkpoint"
# relapse under Slurm: seed 5's trials 0 and 1 lose a rank, then another inside the requeued run's
# recovery: 2bw's rank 0 again as its replay begins step 9, zbv's survivor rank 1 once the recovery
# reached step 10, before the run's first step. The others exit 75, the job requeues a second time
# and recovers again from the same checkpoint: 0 lost (before afb18e9 they aborted with 1 and the
# job ended FAILED; before this session the second one left rank 0 waiting forever, its snapshot gone)
"$TORCH_PYTHON" "$MP_SRCDIR/validation/chaos/chaos.py" --mindpipe "$MINDPIPE" --data "$data" --seed 5 --trials 2 \
    --faults relapse --launchers slurm1 --keep "$SCRATCH/relapse" > "$SCRATCH/relapse.out" 2>&1
tap_checker "chaos relapse under slurm1, seed 5" chaos.py $? "$SCRATCH/relapse.out"
grep -q "^PASS trial 0 (seed 5) under slurm1 (LAUNCHER=srun, .*): 2bw on cpu, relapse (then rank 0 in the recovery, at step 9 of the replay: landed) of rank 0 at step 10: 0 steps lost$" \
    "$SCRATCH/relapse.out"
ok $? "chaos relapse under slurm1: 2bw's replaying rank lost again inside its replay: requeued twice, 0 steps lost"
grep -q "^PASS trial 1 (seed 5) under slurm1 (LAUNCHER=srun, .*): zbv on cpu, relapse (then rank 1 in the recovery, once it reached step 10: landed) of rank 0 at step 11: 0 steps lost$" \
    "$SCRATCH/relapse.out"
ok $? "chaos relapse under slurm1: zbv's survivor lost once the recovery was done: requeued twice, 0 steps lost"
# a corrupted log under Slurm: seed 9's trial 0 (zbv on emu) loses rank 1 at step 13; the requeued
# run's rank 0 flips a byte of the survivor's log before it starts, the replay meets it and every
# rank exits 75 with the snapshots aside (before, 1: the job ended FAILED), the job requeues a second
# time and restarts from the checkpoint of step 8: 4 steps lost, said, bitwise the uninterrupted run
"$TORCH_PYTHON" "$MP_SRCDIR/validation/chaos/chaos.py" --mindpipe "$MINDPIPE" --data "$data" --seed 9 --only 0 \
    --faults corrupt --launchers slurm1 --keep "$SCRATCH/corrupt" > "$SCRATCH/corrupt.out" 2>&1
tap_checker "chaos corrupt under slurm1, seed 9 trial 0" chaos.py $? "$SCRATCH/corrupt.out"
grep -q "^PASS trial 0 (seed 9) under slurm1 (LAUNCHER=srun, .*): zbv on emu, corrupt of rank 1 at step 13: 4 steps lost$" \
    "$SCRATCH/corrupt.out" && grep -q "^1 log(s) flipped$" "$SCRATCH/corrupt/t0.flip" &&
    [ "$(grep -c "requeueing job" "$SCRATCH/corrupt/t0/job.log")" -eq 2 ]
ok $? "chaos corrupt under slurm1: the replay refused the flipped entry, the job requeued twice and restarted from step 8"
# A full disk under Slurm (chaos.py --faults full --launchers slurm1) is left to the full campaign:
# which write fails first is a race with the boundary log's writer (the checkpoint of step 16, 8
# steps lost; or only the logs, whose failure frees room, every checkpoint written, 0 lost). It
# found a crash at the end of such runs (docs/RELIABILITY.md, Limits; fixed in bndlog.c's
# file_close, test_bndlog "a flush that failed"); a check of both outcomes was not tried under load.
done_testing
