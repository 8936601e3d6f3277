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
exec mpiexec -n 1 src/mindpipe train -c inputs/gpt-tiny.ini --out runs/gpt-tiny "$@"
