#!/bin/sh
# Regenerates the seed corpus of fuzz_ckpt.c: small valid checkpoints written by the real binary
# on a tiny model (layers=1 dim=8 heads=2 seq_len=8 vocab=256 mlp_ratio=4: the model fuzz_ckpt.c
# reads them into), each under 100 KB: a 1f1b run's checkpoints at steps 1 and 2 (weights and both
# moments) and a 2bw run's at step 2 (with /model_prev).
#   usage: make_corpus.sh MINDPIPE DATA.h5     (DATA.h5: any prepared dataset, e.g. validation/kjv.h5)
set -eu
MINDPIPE=$1
DATA=$2
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../../.." && pwd)
WORK=$(mktemp -d /tmp/corpus_ckpt.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
tiny="--set model.layers=1 --set model.dim=8 --set model.heads=2 --set model.seq_len=8 --set model.vocab=256
      --set model.mlp_ratio=4 --set train.batch=2 --set train.micro_batch=1 --set train.steps=2 --set train.warmup=1
      --set checkpoint.every=1 --set checkpoint.keep=0 --set train.threads=1 --set train.eval_every=0"
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$SRC/validation/decks/train.ini" --set data.path="$DATA" $tiny --quiet --out "$WORK/a"
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$SRC/validation/decks/train.ini" --set data.path="$DATA" $tiny --set parallel.schedule=2bw \
    --quiet --out "$WORK/b"
cp "$WORK/a/ckpt/step_00000001.h5" "$HERE/1f1b_step1.h5"
cp "$WORK/a/ckpt/step_00000002.h5" "$HERE/1f1b_step2.h5"
cp "$WORK/b/ckpt/step_00000002.h5" "$HERE/2bw_step2.h5"
ls -l "$HERE"/*.h5
