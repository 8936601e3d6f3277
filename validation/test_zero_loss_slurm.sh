#!/bin/bash
# Zero lost steps under a real one-node Slurm (validation/slurm_harness.sh; issue 33): the real
# binary through jobs/slurm/train.sbatch with recovery.log = 1, rank 1 SIGKILLed as step 15 begins
# on the job's first run; under LAUNCHER=srun and LAUNCHER=mpirun the survivors write their state and
# exit 75, the script names the lost rank and requeues, and the rerun (--resume auto) starts at step
# 14 with 0 steps lost and ends bitwise equal to an uninterrupted run. Needs root and the Slurm
# packages of .ci/deps.sh, as test_jobs.sh.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
. "$MP_SRCDIR/validation/slurm_harness.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
trap 'slurm_stop; rm -rf "$SCRATCH"' EXIT

ARGS="--set data.path=$data --set model.layers=4 --set parallel.pp=2 --set train.threads=1 --set train.steps=40
      --set checkpoint.every=10 --set checkpoint.keep=0 --set parallel.timeout=3 --set parallel.wait=yield
      --set recovery.log=1 --quiet"
cp "$MP_SRCDIR/validation/decks/train.ini" "$SCRATCH/job.ini"
# shellcheck disable=SC2086
$MPIEXEC -n 2 "$MINDPIPE" train -c "$SCRATCH/job.ini" --out "$SCRATCH/straight" $ARGS > "$SCRATCH/straight.log" 2>&1
ok $? "the uninterrupted run: 40 steps on 2 ranks (pp = 2)"

# The binary the job runs: the real one, losing rank 1 at step 15 until the job log tells of it.
cat > "$SCRATCH/mindpipe" <<SH
#!/bin/sh
prev=; for a in "\$@"; do [ "\$prev" = --out ] && out=\$a; prev=\$a; done
grep -q "lost rank" "\$out/job.log" 2>/dev/null && exec "$MINDPIPE" "\$@"
exec "$MINDPIPE" "\$@" --set debug.fail_at=1:15
SH
chmod +x "$SCRATCH/mindpipe"

slurm_start "$SCRATCH/slurm"; rc=$?
ok $rc "a one-node Slurm started (slurmctld, slurmd, munge)"
[ $rc -eq 0 ] || done_testing

# follow JOBID: releases each requeue (Slurm holds a requeued job 120 s) until the job ends or 180 s
# pass; prints the final state.
follow() {
    start=$(date +%s); pending=0
    while [ $(($(date +%s) - start)) -lt 180 ]; do
        st=$(slurm_job_state "$1")
        case "$st" in
            COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) echo "$st"; return ;;
            PENDING)
                pending=$((pending + 1))
                [ $pending -lt 3 ] || scontrol update JobId="$1" StartTime=now > /dev/null 2>&1 ;;
            *) pending=0 ;;
        esac
        sleep 1
    done
    echo "still $(slurm_job_state "$1") after 180 s"
}

for L in srun mpirun; do
    dir="$SCRATCH/sb-$L"
    # shellcheck disable=SC2086
    jid=$(cd "$SCRATCH" && MINDPIPE="$SCRATCH/mindpipe" LAUNCHER=$L MPIRUN="$MPIEXEC" sbatch --parsable -n 2 \
        --time=5 -o "$SCRATCH/sb-$L-%j.out" "$MP_SRCDIR/jobs/slurm/train.sbatch" "$SCRATCH/job.ini" "$dir" $ARGS)
    ok $? "LAUNCHER=$L: sbatch accepted jobs/slurm/train.sbatch (job ${jid:-none})"
    state=$(follow "$jid")
    grep -q "lost rank(s) 1(signal 9" "$dir/job.log" && grep -q "requeueing job $jid" "$dir/job.log" &&
        [ "$state" = COMPLETED ]
    ok $? "LAUNCHER=$L: rank 1 lost, named in the job log, requeued, the job completed (state $state)"
    grep -q "recovery: resumed at step 14, the step the survivors had reached: 0 steps lost" "$dir/log.txt"
    ok $? "LAUNCHER=$L: the rerun resumed at step 14, 0 steps lost"
    compare "LAUNCHER=$L: final weights and losses" "$SCRATCH/straight" "$dir" --bitwise --step 40
    if [ "$state" != COMPLETED ]; then sed 's/^/#   /' "$dir/job.log" "$SCRATCH"/sb-$L-*.out | tail -n 30; slurm_logs; fi
done

done_testing
