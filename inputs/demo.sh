#!/usr/bin/env bash
# Quick start: install the dependencies, build, turn the King James Bible into a token file and
# train the demo model (inputs/gpt-tiny.ini) on it. Extra arguments go to `mindpipe train`
# (e.g. --set train.steps=100). Works as root or with sudo on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure
make -j"$(nproc)"
mkdir -p data
[ -s data/kjv.txt ] || sh inputs/make_kjv.sh data/kjv.txt
[ -s data/kjv.h5 ] || src/mindpipe prep --text data/kjv.txt --out data/kjv.h5
export OMP_WAIT_POLICY=PASSIVE
# Run again, it starts over: the earlier run's checkpoints move aside to runs/gpt-tiny/ckpt.old-TIME
# (--restart; a run directory with checkpoints is otherwise refused). With --resume it continues.
restart=--restart
for a in "$@"; do case "$a" in --resume*) restart= ;; esac; done
exec mpiexec -n 1 src/mindpipe train -c inputs/gpt-tiny.ini --out runs/gpt-tiny ${restart:+"$restart"} "$@"
