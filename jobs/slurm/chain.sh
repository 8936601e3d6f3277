#!/bin/bash
# A run longer than the wall-time limit, on clusters that forbid requeueing: submits N copies of
# train.sbatch, each held until the previous one has ended (whatever its state), all in one run
# directory, so each continues with --resume auto from the newest checkpoint that verifies. A copy
# that finds the run finished exits at once (--resume auto of a completed run trains no steps).
#
#   jobs/slurm/chain.sh N DECK RUNDIR [sbatch options...] [-- mindpipe args...]
#
# Prints the job ids, first to last. Cancel the chain with `scancel` on the ids.
set -eu
if [ $# -lt 3 ] || ! [ "$1" -ge 1 ] 2>/dev/null; then
    echo "usage: $0 N DECK RUNDIR [sbatch options...] [-- mindpipe args...]" >&2
    exit 2
fi
n=$1; deck=$2; rundir=$3; shift 3
sb=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sb+=("$1"); shift; done
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")" && pwd)
prev=""
for i in $(seq 1 "$n"); do
    dep=()
    [ -z "$prev" ] || dep=(--dependency="afterany:$prev")
    # In a chain the next job resumes: MP_CHAIN tells train.sbatch not to requeue this one.
    prev=$(sbatch --parsable --no-requeue --export=ALL,MP_CHAIN=1 "${dep[@]}" "${sb[@]}" "$here/train.sbatch" "$deck" "$rundir" "$@")
    prev=${prev%%;*}
    echo "$prev"
done
