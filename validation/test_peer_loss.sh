#!/bin/bash
# A rank that dies must not take its peers with it (issue 33): the launch settings of jobs/ let the
# survivors find the loss themselves (their waits' deadline), then exit 75, and the job scripts rerun
# such a job. Tried with validation/recovery/peer_loss.c (plain MPI, built here with mpicc): 4 ranks
# in a ring exchange every few ms (MPI_Isend/Irecv polled with MPI_Testall and sched_yield) and an
# MPI_Iallreduce per step; rank 1 kills itself (SIGKILL) as step 5 begins; a survivor whose wait
# passes 3 s prints "rank R: peer lost after step S" and _exits 75.
#   mpiexec: -disable-auto-cleanup with each rank under the job scripts' rank shell lets every
#   survivor exit 75 by itself and mpiexec return; without the flag, or without the shell (Hydra's
#   proxy SIGKILLs a node's ranks when one of them dies by a signal: at once, or once the first
#   survivor has exited), the survivors are killed.
#   Slurm (a one-node Slurm, validation/slurm_harness.sh, as test_jobs.sh): jobs/slurm/train.sbatch
#   with LAUNCHER=srun and LAUNCHER=mpirun, whose binary is a stand-in that runs the probe: the job
#   sees the lost rank and the survivors' 75, requeues itself, and its second run completes (a rank
#   lost in every run fails the job after LOST_RANK_RETRIES requeues); and
#   srun --kill-on-bad-exit=1 (a site's KillOnBadExit=1) kills the survivors, so the flag matters;
#   and a run that has ended but whose ranks do not exit (MPI_Finalize's hang over TCP) is ended by
#   the script FINALIZE_GRACE seconds later, the job completing on the run's own status.
# Needs root and the Slurm packages of .ci/deps.sh for the Slurm part (as test_jobs.sh).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
. "$MP_SRCDIR/validation/slurm_harness.sh"
mp_scratch_init
trap 'slurm_stop; rm -rf "$SCRATCH"' EXIT
MPIEXEC=${MPIEXEC:-mpiexec}
T=3 # the survivors' deadline (s)

PROBE="$SCRATCH/peer_loss"
mpicc -std=c11 -O2 -o "$PROBE" "$MP_SRCDIR/validation/recovery/peer_loss.c" > "$SCRATCH/cc.log" 2>&1
ok $? "validation/recovery/peer_loss.c builds with mpicc"
[ -x "$PROBE" ] || { sed 's/^/#   /' "$SCRATCH/cc.log"; done_testing; }
PARGS=(--victim 1 --kill-step 5 --steps 100000 --timeout "$T")
# Plain mpiexec kills the survivors at once (0.2 s, 8 of 8 runs): they get a deadline far past that,
# so a kill delayed by load cannot let one reach it first.
TK=20
KARGS=(--victim 1 --kill-step 5 --steps 100000 --timeout "$TK")

# The rank shell of jobs/slurm/train.sbatch, taken from the script itself (it must match the PBS one).
rank_shell=$(sed -n "/^rank_shell='/,/^exit \$s'\$/p" "$MP_SRCDIR/jobs/slurm/train.sbatch")
pbs_shell=$(sed -n "/^rank_shell='/,/^exit \$s'\$/p" "$MP_SRCDIR/jobs/pbs/train.pbs")
[ -n "$rank_shell" ] && [ "$rank_shell" = "$pbs_shell" ]
ok $? "the rank shell is found in jobs/slurm/train.sbatch, and jobs/pbs/train.pbs has the same"
eval "$rank_shell" # the assignment: rank_shell is now the shell's text

# launch NAME MPIEXEC-ARGS...: runs the probe on 4 ranks (under `timeout 60`) into $SCRATCH/NAME.out;
# lrc is mpiexec's status, secs its time, lines the survivors' "peer lost" lines. Rank statuses
# recorded by the rank shell land in $SCRATCH/NAME.exit/RANK.
launch() {
    name=$1; shift
    mkdir -p "$SCRATCH/$name.exit"
    t0=$(date +%s.%N)
    MP_RANK_EXITS="$SCRATCH/$name.exit" timeout 60 "$MPIEXEC" "$@" > "$SCRATCH/$name.out" 2>&1
    lrc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    lines=$(grep -c "peer lost after step" "$SCRATCH/$name.out")
    grep -h "MPI_Testall returned an error" "$SCRATCH/$name.out" | sed 's/^/# /'
}
# killed_at NAME: the victim's wall-clock second of death (from its line)
killed_at() { sed -n 's/^\[\([0-9.]*\)\] rank 1: killing myself.*/\1/p' "$SCRATCH/$1.out"; }

# ---- -disable-auto-cleanup with the rank shell: every survivor exits 75 by itself ----
launch dac -disable-auto-cleanup -n 4 sh -c "$rank_shell" mindpipe-rank "$PROBE" "${PARGS[@]}"
k=$(killed_at dac)
all=0
for r in 0 2 3; do
    line=$(grep "rank $r: peer lost after step 4 " "$SCRATCH/dac.out")
    at=$(echo "$line" | sed -n 's/^\[\([0-9.]*\)\].*/\1/p')
    st=$(cut -d' ' -f1 "$SCRATCH/dac.exit/$r" 2>/dev/null)
    late=$(awk -v a="${k:-0}" -v b="${at:-0}" 'BEGIN { printf "%.2f", b - a }')
    [ -n "$k" ] && [ -n "$at" ] && [ "$st" = 75 ] && awk -v d="$late" -v t=$T 'BEGIN { exit !(d >= t - 0.5 && d < t + 10) }'
    ok $? "-disable-auto-cleanup: survivor rank $r saw the loss after step 4 and exited 75 by itself, ${late} s after the kill (status ${st:-none})"
    [ "$st" = 75 ] || all=1
done
[ "$(cut -d' ' -f1 "$SCRATCH/dac.exit/1" 2>/dev/null)" = 137 ]
ok $? "-disable-auto-cleanup: the rank shell turned rank 1's SIGKILL into status 137"
[ $lrc -ne 124 ] && [ $lrc -ne 0 ]
ok $? "-disable-auto-cleanup: mpiexec returned once every rank had ended (status $lrc, ${secs} s; no hang)"
grep -q "got .* SIGUSR1" "$SCRATCH/dac.out" && diag "(Hydra sent SIGUSR1 to the survivors: $(grep -c 'got .* SIGUSR1' "$SCRATCH/dac.out") of 3 saw it)"
[ $all -eq 0 ] || sed 's/^/#   /' "$SCRATCH/dac.out"

# ---- without the flag: the survivors are killed at once ----
launch plain -n 4 sh -c "$rank_shell" mindpipe-rank "$PROBE" "${KARGS[@]}"
[ "$lines" -eq 0 ] && [ $lrc -ne 0 ] && [ $lrc -ne 124 ] && awk -v s="$secs" -v t=$TK 'BEGIN { exit !(s < t) }'
ok $? "plain mpiexec: the survivors were killed at once, none reached its deadline of $TK s ($lines lines; status $lrc, ${secs} s)"
# ---- the flag without the rank shell: Hydra's proxy SIGKILLs the node's ranks (rank 1 died by a signal) ----
# The proxy kills them either at once (0.2 s) or, in 6 of 17 runs here (and once in CI), only when the
# first survivor has exited 75 at its deadline (T + 0.2 s, 1 or 2 "peer lost" lines): either way not
# every survivor gets to exit by itself, which is what the rank shell changes.
launch noshell -disable-auto-cleanup -n 4 "$PROBE" "${PARGS[@]}"
[ "$lines" -lt 3 ] && [ $lrc -ne 0 ] && [ $lrc -ne 124 ] && awk -v s="$secs" -v t=$T 'BEGIN { exit !(s < t + 20) }'
ok $? "-disable-auto-cleanup without the rank shell: the survivors were killed all the same, $lines of 3 exited by themselves first (status $lrc, ${secs} s)"

# ---- Slurm: jobs/slurm/train.sbatch sees the lost rank and requeues; the rerun completes ----
slurm_start "$SCRATCH/slurm"; rc=$?
ok $rc "a one-node Slurm started (slurmctld, slurmd, munge)"
[ $rc -eq 0 ] || done_testing

# The stand-in for the binary: the probe with a victim on the first run, without one once the job
# log tells of a lost rank (the run resumed).
# With FAKE_ALWAYS set, the victim dies in every run. With FAKE_HANG set, a run that ends (rank 0 writes RUN/exit_status) but whose ranks never exit, as
# in MPI_Finalize's hang over TCP.
cat > "$SCRATCH/mindpipe" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do [ "\$1" = --out ] && out=\$2; shift; done
if [ -n "\$FAKE_HANG" ]; then
    [ "\${PMI_RANK:-\$SLURM_PROCID}" != 0 ] || echo "0 done at step 20" > "\$out/exit_status"
    exec sleep 600
fi
[ -z "\$FAKE_ALWAYS" ] && grep -q "lost rank" "\$out/job.log" 2>/dev/null && exec "$PROBE" --victim -1 --steps 20
exec "$PROBE" ${PARGS[*]}
EOF
chmod +x "$SCRATCH/mindpipe"
: > "$SCRATCH/deck.ini"


for L in srun mpirun; do
    jid=$(cd "$SCRATCH" && MINDPIPE="$SCRATCH/mindpipe" LAUNCHER=$L MPIRUN="$MPIEXEC" sbatch --parsable -n 4 \
        --overcommit --time=3 -o "$SCRATCH/sb-$L-%j.out" "$MP_SRCDIR/jobs/slurm/train.sbatch" "$SCRATCH/deck.ini" \
        "$SCRATCH/sb-$L")
    ok $? "LAUNCHER=$L: sbatch accepted jobs/slurm/train.sbatch (job ${jid:-none})"
    state=$(slurm_follow "$jid" 120)
    log="$SCRATCH/sb-$L/job.log"
    grep -q "lost rank(s) 1(signal 9 on .*); the other 3 stopped with status 75" "$log" &&
        grep -q "requeueing job $jid" "$log" && grep -q "finished (status 0)" "$log" && [ "$state" = COMPLETED ]
    ok $? "LAUNCHER=$L: rank 1 lost, the other 3 stopped with 75: requeued, and the rerun completed (state $state)"
    n_lost=$(grep -c "peer lost after step 4" "$SCRATCH"/sb-$L-*.out 2>/dev/null)
    [ "${n_lost:-0}" -eq 3 ]
    ok $? "LAUNCHER=$L: each of the 3 survivors saw the loss by itself (${n_lost:-0} lines in the Slurm output)"
    if [ "$state" != COMPLETED ]; then sed 's/^/#   /' "$log" "$SCRATCH"/sb-$L-*.out | tail -n 30; slurm_logs; fi
done

# ---- a rank lost in every run: requeued LOST_RANK_RETRIES times, then the job fails ----
jid=$(cd "$SCRATCH" && MINDPIPE="$SCRATCH/mindpipe" FAKE_ALWAYS=1 LOST_RANK_RETRIES=1 LAUNCHER=srun sbatch --parsable \
    -n 4 --overcommit --time=3 -o "$SCRATCH/always-%j.out" "$MP_SRCDIR/jobs/slurm/train.sbatch" "$SCRATCH/deck.ini" \
    "$SCRATCH/always")
state=$(slurm_follow "$jid" 120)
[ "$state" = FAILED ] && [ "$(grep -c "requeueing job $jid" "$SCRATCH/always/job.log")" -eq 1 ] &&
    grep -q "failed: lost rank(s) 1(signal 9 on .*) again, after 1 requeue(s) for lost ranks" "$SCRATCH/always/job.log"
ok $? "a rank lost in every run, LOST_RANK_RETRIES=1: requeued once, then the job fails (state $state)"
[ "$state" = FAILED ] || sed 's/^/#   /' "$SCRATCH/always/job.log"

# ---- a run that has ended but whose ranks do not exit: ended after FINALIZE_GRACE, the run's word stands ----
t0=$(date +%s)
jid=$(cd "$SCRATCH" && MINDPIPE="$SCRATCH/mindpipe" FAKE_HANG=1 FINALIZE_GRACE=3 LAUNCHER=srun sbatch --parsable -n 2 \
    --time=3 -o "$SCRATCH/hang-%j.out" "$MP_SRCDIR/jobs/slurm/train.sbatch" "$SCRATCH/deck.ini" "$SCRATCH/hang")
slurm_wait_state "$jid" 90 COMPLETED FAILED CANCELLED TIMEOUT
dt=$(($(date +%s) - t0))
grep -q "the run ended (exit_status 0) but its ranks still run 3 s later" "$SCRATCH/hang/job.log" &&
    grep -q "finished (status 0)" "$SCRATCH/hang/job.log" && [ "$(slurm_job_state "$jid")" = COMPLETED ]
ok $? "ranks that outlive the run's end by FINALIZE_GRACE = 3 s are ended; the job completes on the run's status 0 ($(slurm_job_state "$jid") in $dt s)"
[ "$(slurm_job_state "$jid")" = COMPLETED ] || sed 's/^/#   /' "$SCRATCH/hang/job.log" "$SCRATCH"/hang-*.out

# ---- srun --kill-on-bad-exit=1 (what a site's KillOnBadExit=1 makes the default) kills the survivors ----
jid=$(cd "$SCRATCH" && sbatch --parsable -n 4 --overcommit --time=2 -o "$SCRATCH/kobe1.out" \
    --wrap "srun --kill-on-bad-exit=1 $PROBE ${PARGS[*]}; echo srun status \$?")
slurm_wait_state "$jid" 60 COMPLETED FAILED CANCELLED TIMEOUT
n_lost=$(grep -c "peer lost after step" "$SCRATCH/kobe1.out")
[ "$n_lost" -eq 0 ] && grep -q "srun status" "$SCRATCH/kobe1.out"
ok $? "srun --kill-on-bad-exit=1: the survivors were ended at once ($n_lost reached the deadline; $(grep -o 'srun status [0-9]*' "$SCRATCH/kobe1.out"))"
done_testing
