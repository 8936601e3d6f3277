#!/bin/sh
# One checkpoint file, writers on nodes that differ (ARCHITECTURE.md §7): checkpoint.transfer = auto
# takes independent MPI-IO where a node holds more ranks than cores, and every writer of the file must
# take the same. Hydra's fork launcher with two host names makes two "nodes" on this machine, the
# first holding one rank more than the cores, the second one rank: before the choice was agreed, the
# first node's ranks wrote independently and the second's collectively, and the fault-free job waited
# in the step-8 write until checkpoint.timeout (as a dp2 x pp2 job at 2 ranks a node did under the
# namespaced two-node Slurm, 2026-12-06).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
cores=$(getconf _NPROCESSORS_ONLN)
a=$((cores + 1)) # node A: oversubscribed by one
n=$((a + 1))     # node B: one rank
if [ $((n % 2)) -eq 0 ]; then lay="--set parallel.pp=2 --set parallel.dp=$((n / 2))"; else lay="--set parallel.dp=$n"; fi
C="--set model.layers=4 --set train.threads=1 --set train.steps=10 --set train.micro_batch=1 --set train.batch=$((2 * n))"
C="$C --set checkpoint.every=8 --set checkpoint.keep=0 --set checkpoint.timeout=60 --set parallel.timeout=60 $lay"

# the reference: the same layout on one node (oversubscribed: independent transfers everywhere)
# shellcheck disable=SC2086
run "$n" ref $C; ok $? "$n ranks on one node ($lay): 10 steps (the reference)"

t0=$(date +%s)
# shellcheck disable=SC2086
$MPIEXEC -launcher fork -hosts "localhost:$a,127.0.0.1:1" -n "$n" "$MINDPIPE" train -c "$layout_deck" \
    --set data.path="$data" --set train.log_every=1 --quiet --out "$SCRATCH/two" $C > "$SCRATCH/two.log" 2>&1
rc=$?
dt=$(($(date +%s) - t0))
# the layout table's local ranks: the last rank is the first of its node
last=$((n - 1))
grep -Eq "^ +$last( +[0-9]+){4} +[^ ]+ \(0\)" "$SCRATCH/two/log.txt" && grep -Eq "^ +$((a - 1))( +[0-9]+){4} +[^ ]+ \($((a - 1))\)" "$SCRATCH/two/log.txt"
ok $? "the launch made two nodes of $a ranks and 1 (the layout table's local ranks)"
[ $rc -eq 0 ] && [ -e "$SCRATCH/two/ckpt/step_00000008.h5" ] && [ -e "$SCRATCH/two/ckpt/step_00000010.h5" ]
ok $? "nodes of $a ranks ($cores cores) and 1: the job writes its step-8 and step-10 checkpoints and ends (exit $rc in $dt s)"
[ $rc -eq 0 ] || { grep -E "fatal|error" "$SCRATCH/two.log" | head -n 3 | cut -c1-300 | sed 's/^/# /'; }
"$MINDPIPE" inspect "$SCRATCH/two/ckpt/step_00000010.h5" > /dev/null 2>&1; ok $? "its step-10 checkpoint verifies"
compare "two nodes = one node" "$SCRATCH/ref" "$SCRATCH/two" --bitwise --step 10
done_testing
