#!/bin/bash
# Zero lost steps under a real Slurm (validation/slurm_harness.sh; issue 33): the real binary
# through jobs/slurm/train.sbatch with recovery.log = 1. On one node, rank 1 SIGKILLed as step 15
# begins on the job's first run, under LAUNCHER=srun and LAUNCHER=mpirun; on two namespaced nodes
# (one rank each, srun, --no-kill), every process of node2 killed in step 15, slurmd too. Each time
# the survivors write their state and exit 75, the script names the lost rank and requeues, and the
# rerun (--resume auto) starts at step 14 with 0 steps lost and ends bitwise equal to an
# uninterrupted run. Needs root and the Slurm packages of .ci/deps.sh, as test_jobs.sh.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
. "$MP_SRCDIR/validation/slurm_harness.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
# a failed run keeps its logs (not its checkpoints) in $MP_BUILDDIR/validation/kept/, and says where
keep_logs() {
    [ "$tap_failed" -gt 0 ] || return 0
    k="$MP_BUILDDIR/validation/kept/test_zero_loss_slurm.$(date +%Y%m%d-%H%M%S).$$"
    mkdir -p "$k" && (cd "$SCRATCH" && find . \( -name '*.log' -o -name '*.out' -o -name 'log.txt' -o -name '*.txt' \
        -o -name 'metrics.jsonl' -o -name 'exit_status' \) -size -4M -exec cp --parents {} "$k" \; ) 2>/dev/null
    echo "# the failed run's logs: $k"
}
trap 'keep_logs; slurm_stop; slurm_stop_nodes; rm -rf "$SCRATCH"' EXIT
# why_not_resumed DIR: the recovery lines of the run's log (a fallback says why), as diagnostics
why_not_resumed() { grep -h "recovery" "$1/log.txt" "$1/job.log" 2>/dev/null | tail -n 8 | sed 's/^/#   /'; }

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
exec "$MINDPIPE" "\$@" --set debug.fail_at=\${ZL_FAIL:-1:15}
SH
chmod +x "$SCRATCH/mindpipe"

slurm_start "$SCRATCH/slurm"; rc=$?
ok $rc "a one-node Slurm started (slurmctld, slurmd, munge)"
[ $rc -eq 0 ] || done_testing


for L in srun mpirun; do
    dir="$SCRATCH/sb-$L"
    # shellcheck disable=SC2086
    jid=$(cd "$SCRATCH" && MINDPIPE="$SCRATCH/mindpipe" LAUNCHER=$L MPIRUN="$MPIEXEC" sbatch --parsable -n 2 \
        --time=5 -o "$SCRATCH/sb-$L-%j.out" "$MP_SRCDIR/jobs/slurm/train.sbatch" "$SCRATCH/job.ini" "$dir" $ARGS)
    ok $? "LAUNCHER=$L: sbatch accepted jobs/slurm/train.sbatch (job ${jid:-none})"
    state=$(slurm_follow "$jid" 180)
    grep -q "lost rank(s) 1(signal 9" "$dir/job.log" && grep -q "requeueing job $jid" "$dir/job.log" &&
        [ "$state" = COMPLETED ]
    ok $? "LAUNCHER=$L: rank 1 lost, named in the job log, requeued, the job completed (state $state)"
    grep -q "recovery: resumed at step 14, the step the survivors had reached: 0 steps lost" "$dir/log.txt"; rc=$?
    ok $rc "LAUNCHER=$L: the rerun resumed at step 14, 0 steps lost"
    [ $rc -eq 0 ] || why_not_resumed "$dir"
    compare "LAUNCHER=$L: final weights and losses" "$SCRATCH/straight" "$dir" --bitwise --step 40
    if [ "$state" != COMPLETED ]; then sed 's/^/#   /' "$dir/job.log" "$SCRATCH"/sb-$L-*.out | tail -n 30; slurm_logs; fi
done

# ---- a whole node lost: a Slurm of 2 namespaced nodes, one rank each (LAUNCHER=srun, --no-kill) ----
# Rank 1 stops in step 15 (debug.fail_at ...:hang); then every process of node2 (the rank, its shell,
# slurmstepd, slurmd) is SIGKILLed, as a node that dies takes them. Slurm declares node2 down
# (SlurmdTimeout 12 s), srun returns, the job (--no-kill) requeues itself; node2 comes back (its
# slurmd started again, the node resumed) and the rerun runs on both nodes.
slurm_stop
SLURM_NODES_SLURMD_TIMEOUT=12 slurm_start_nodes "$SCRATCH/slurmn" 2; rc=$?
ok $rc "a Slurm of 2 nodes started (namespaces node1, node2 on a bridge, a slurmd each)"
# ZL_NODE_REPEAT=N repeats the node loss N times on the same Slurm (issue 45: 20 of 20 beside busy
# loops); each repetition's checks are tagged with its number
reps=${ZL_NODE_REPEAT:-1}
if [ $rc -eq 0 ]; then
    for rep in $(seq 1 "$reps"); do
        tag=""; [ "$reps" -gt 1 ] && tag="[$rep/$reps] "
        dir="$SCRATCH/nodes$rep"
        # shellcheck disable=SC2086
        jid=$(cd "$SCRATCH" && ZL_FAIL=1:15:hang MINDPIPE="$SCRATCH/mindpipe" LAUNCHER=srun sbatch --parsable -N 2 \
            --ntasks-per-node=1 --no-kill --time=5 -o "$SCRATCH/nodes$rep-%j.out" "$MP_SRCDIR/jobs/slurm/train.sbatch" \
            "$SCRATCH/job.ini" "$dir" $ARGS)
        ok $? "${tag}sbatch -N 2 --no-kill accepted train.sbatch (job ${jid:-none})"
        t0=$(date +%s)
        until grep -qs "stops answering" "$SCRATCH"/nodes$rep-*.out || [ $(($(date +%s) - t0)) -gt 60 ]; do sleep 0.5; done
        all=$(ip netns pids "$(slurm_node_ns 2)")
        # shellcheck disable=SC2086
        [ -n "$all" ] && kill -KILL $all
        ok $? "${tag}rank 1 stopped in step 15 on node2; every process of node2 SIGKILLed, slurmd too ($(echo $all | wc -w) of them)"
        t0=$(date +%s)
        until grep -qs "lost rank" "$dir/job.log" || [ $(($(date +%s) - t0)) -gt 120 ]; do sleep 1; done
        grep -qs "lost rank(s) 1" "$dir/job.log"
        ok $? "${tag}node2 lost: Slurm declared it down, srun returned, rank 1 named lost in $(($(date +%s) - t0)) s"
        nsenter --net="/run/netns/$(slurm_node_ns 2)" unshare --mount --uts sh -c \
            "mount --bind /etc/netns/$(slurm_node_ns 2)/hosts /etc/hosts && hostname node2 && exec slurmd -f '$SLURM_CONF' -N node2"
        t0=$(date +%s)
        # a node Slurm declared down stays down until resumed (scontrol refuses that while it is not down)
        until st=$(sinfo -h -n node2 -o %T 2>/dev/null); [ -n "$st" ] && ! echo "$st" | grep -qi down ||
            [ $(($(date +%s) - t0)) -gt 60 ]; do
            scontrol update NodeName=node2 State=RESUME > /dev/null 2>&1
            sleep 1
        done
        [ -n "$st" ] && ! echo "$st" | grep -qi down
        ok $? "${tag}node2 back: its slurmd started again, the node resumed (state $st)"
        state=$(slurm_follow "$jid" 180)
        grep -q "requeueing job $jid" "$dir/job.log" && [ "$state" = COMPLETED ]
        ok $? "${tag}node2 lost: the job requeued and completed on both nodes (state $state)"
        grep -q "recovery: resumed at step 14, the step the survivors had reached: 0 steps lost" "$dir/log.txt"; rc=$?
        ok $rc "${tag}node2 lost: the rerun resumed at step 14, 0 steps lost"
        [ $rc -eq 0 ] || why_not_resumed "$dir"
        compare "${tag}node2 lost: final weights and losses" "$SCRATCH/straight" "$dir" --bitwise --step 40
        if [ "$state" != COMPLETED ]; then sed 's/^/#   /' "$dir/job.log" "$SCRATCH"/nodes$rep-*.out | tail -n 30; slurm_logs; fi
    done
fi

done_testing
