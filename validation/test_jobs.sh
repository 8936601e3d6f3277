#!/bin/bash
# The batch scripts of jobs/ under a real one-node Slurm (validation/slurm_harness.sh starts it in a
# temporary directory and stops it by PID; issue #6): jobs/slurm/train.sbatch through sbatch and
# jobs/pbs/train.pbs through Slurm's qsub wrapper each run into their time limit, are signalled
# (SIGUSR1), checkpoint, requeue themselves, resume with --resume auto and finish with final weights
# bitwise equal to an uninterrupted run; the log is appended to, not overwritten. Needs root (slurmd
# runs jobs as their owner) and the Slurm packages of .ci/deps.sh. Two ranks (pp = 2) per job.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
. "$MP_SRCDIR/validation/slurm_harness.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
trap 'slurm_stop; rm -rf "$SCRATCH"' EXIT

# About 20 s of training (4 layers of width 64 on two busy cores): a job is submitted when
# slurmctld's next time-limit check (every 30 s) is 6 s away, so that check signals it a few seconds
# in; the requeued run then usually finishes before it is signalled again (if not, it takes one
# more round). Checkpoints only at the signal and at the end.
STEPS=${MP_JOB_STEPS:-4000}
ARGS="--set data.path=$data --set model.dim=64 --set model.layers=4 --set parallel.pp=2 --set train.threads=1
      --set train.steps=$STEPS --set train.log_every=500 --set train.eval_every=0 --set checkpoint.every=0 --quiet"
cp "$MP_SRCDIR/validation/decks/train.ini" "$SCRATCH/job.ini"

# shellcheck disable=SC2086
$MPIEXEC -n 2 "$MINDPIPE" train -c "$SCRATCH/job.ini" --out "$SCRATCH/straight" $ARGS > "$SCRATCH/straight.log" 2>&1
ok $? "the uninterrupted run: $STEPS steps on 2 ranks"
final=$(printf 'step_%08d.h5' "$STEPS")

slurm_start "$SCRATCH/slurm"; ok $? "a one-node Slurm started (slurmctld, slurmd, munge)"
# Each job's time limit (1 minute, warned 59 s before: slurmctld signals it at its first check) is
# shorter than the run; slurm_follow releases each requeue until it completes or 6 minutes pass.

check_job() {  # check_job LABEL RUNDIR STATE
    label=$1; dir=$2; state=$3
    [ "$state" = COMPLETED ]; ok $? "$label: the job completed (state $state)"
    n_req=$(grep -c "requeueing job" "$dir/job.log" 2>/dev/null)
    [ "${n_req:-0}" -ge 1 ] && grep -q "received SIGUSR1" "$dir/job.log"
    ok $? "$label: signalled before its time limit, checkpointed and requeued (${n_req:-0} times)"
    n_res=$(grep -c "resumed from " "$dir/log.txt" 2>/dev/null)
    [ "${n_res:-0}" -ge 1 ] && [ "$(grep -c 'stop requested by signal' "$dir/log.txt")" -ge 1 ]
    ok $? "$label: log.txt holds every run, appended (${n_res:-0} resumes)"
    compare "$label: final weights" "$SCRATCH/straight" "$dir" --bitwise --step "$STEPS"
    if [ "$state" != COMPLETED ] || [ "${n_req:-0}" -lt 1 ]; then
        sed 's/^/#   /' "$dir/job.log" 2>/dev/null | tail -n 20
        slurm_logs
    fi
}

# ---- sbatch: 2 tasks; the script derives the rank count from the allocation ----
slurm_align_tick 6
jid=$(cd "$SCRATCH" && MINDPIPE="$MINDPIPE" MPIRUN="$MPIEXEC" sbatch --parsable -n 2 --time=1 \
    --signal=B:USR1@59 -o "$SCRATCH/sbatch-%j.out" "$MP_SRCDIR/jobs/slurm/train.sbatch" "$SCRATCH/job.ini" \
    "$SCRATCH/sb" $ARGS)
ok $? "sbatch accepted jobs/slurm/train.sbatch (job ${jid:-none})"
state=$(slurm_follow "$jid" 360)
check_job "sbatch" "$SCRATCH/sb" "$state"
grep -q "(2 ranks)" "$SCRATCH/sb/job.log"; ok $? "sbatch: 2 ranks from the allocation"
[ -s "$SCRATCH/sb/ckpt/$final" ] && [ "$(grep -c 'train.sbatch: .*start:' "$SCRATCH/sbatch-$jid.out" 2>/dev/null)" -ge 2 ]
ok $? "sbatch: one Slurm output file, appended by every run"

# ---- qsub (Slurm's PBS wrapper): the PBS script with PBS directives, falling back to SLURM_*; its
# own #SBATCH line asks for the signal 60 s before the wall time ----
slurm_align_tick 6
# (qsub's own status, not a pipe's: `qsub | tr` reported tr's, so a refused submission passed)
(cd "$SCRATCH" && MINDPIPE="$MINDPIPE" MPIRUN="$MPIEXEC" MINDPIPE_ARGS="$(echo $ARGS)" qsub -V \
    -l nodes=1:ppn=2 -l walltime=00:01:00 -v "DECK=$SCRATCH/job.ini,RUNDIR=$SCRATCH/pbs" \
    "$MP_SRCDIR/jobs/pbs/train.pbs" > "$SCRATCH/qsub.out" 2> "$SCRATCH/qsub.err"); rc=$?
# (its refusals go to stdout, whose digits made a job id: "job 159659621" for a missing script)
jid=$([ $rc -ne 0 ] || tr -dc '0-9' < "$SCRATCH/qsub.out")
[ $rc -eq 0 ] && [ -n "$jid" ]
ok $? "qsub accepted jobs/pbs/train.pbs (job ${jid:-none}, exit $rc$([ $rc -eq 0 ] || echo ": $(cat "$SCRATCH/qsub.out" "$SCRATCH/qsub.err" | grep error | head -n 1)"))"
# no job to follow: its checks fail at once instead of after slurm_follow's 6 minutes
state=$([ -n "$jid" ] && slurm_follow "$jid" 360 || echo "not submitted")
check_job "qsub" "$SCRATCH/pbs" "$state"

# ---- serving: jobs/slurm/serve.sbatch on the one node (every host the same), its stage processes
# started by srun as job steps and linked over TCP; completions bitwise equal to a one-process
# server's on the same checkpoint; scancel ends every process ----
SRV="--set model.dim=64 --set model.layers=4"
CK="$SCRATCH/straight/ckpt/$final"
client="$MP_SRCDIR/validation/serve_client.py"
# shellcheck disable=SC2086
"$MINDPIPE" serve -c "$SCRATCH/job.ini" $SRV --ckpt "$CK" --stages 1 --slots 8 --listen 127.0.0.1:0 \
    --out "$SCRATCH/sref" > "$SCRATCH/sref.log" 2>&1 &
ref=$!
U=$(mp_serve_url "$SCRATCH/sref" $ref)
"$TORCH_PYTHON" "$client" load "$U" --requests 40 --concurrency 4 --out "$SCRATCH/sref.jsonl" > "$SCRATCH/c.out" 2>&1
ok $? "the reference: 40 requests on a one-process server ($(cat "$SCRATCH/c.out"))"
kill -TERM $ref; wait $ref
port=$(mp_port_block 19)
# shellcheck disable=SC2086
jid=$(cd "$SCRATCH" && MINDPIPE="$MINDPIPE" STAGES=2 STANDBY=1 PORT=$port LISTEN=127.0.0.1:0 sbatch --parsable -N 1 \
    --time=3 -o "$SCRATCH/serve-%j.out" "$MP_SRCDIR/jobs/slurm/serve.sbatch" "$SCRATCH/job.ini" "$CK" "$SCRATCH/srv" $SRV)
ok $? "sbatch accepted jobs/slurm/serve.sbatch (job ${jid:-none})"
U=$(mp_serve_url "$SCRATCH/srv")
steps=$(squeue -h -s -j "$jid" 2>/dev/null | grep -c "$jid\.[0-9]")
[ -n "$U" ] && [ "$steps" -eq 4 ]
ok $? "the job serves at ${U:-nothing}, its 4 stage processes (2 primaries, 2 standbys) running as job steps ($steps)"
"$TORCH_PYTHON" "$client" load "$U" --requests 40 --concurrency 4 --out "$SCRATCH/srv.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    cmp -s "$SCRATCH/sref.jsonl" "$SCRATCH/srv.jsonl"
ok $? "40 requests through the Slurm job: every completion bitwise equal to the one-process server's ($(cat "$SCRATCH/c.out"))"
scancel "$jid"
slurm_wait_state "$jid" 60 CANCELLED COMPLETED; wrc=$?
i=0; while pgrep -f "serve-stage -c $SCRATCH/job.ini" > /dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ $wrc -eq 0 ] && ! pgrep -f "serve-stage -c $SCRATCH/job.ini" > /dev/null && ! pgrep -f "serve -c $SCRATCH/job.ini" > /dev/null
ok $? "scancel: the job ends within 60 s ($(slurm_job_state "$jid")) and no stage or front-end process is left"
if [ -z "$U" ] || [ "$steps" -ne 4 ]; then
    sed 's/^/#   /' "$SCRATCH"/serve-*.out "$SCRATCH"/srv/*.log 2>/dev/null | tail -n 30
    slurm_logs
fi
done_testing
