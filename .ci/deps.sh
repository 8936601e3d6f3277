#!/usr/bin/env bash
# Installs every build, test and demo dependency from Debian's packages (a one-node Slurm with its
# PBS wrapper included, for the job-script test; its daemons are not started here; iproute2 and
# util-linux (ip netns, unshare, nsenter) for the several-node Slurm of validation/test_serve_nodes.sh;
# ZeroMQ, libmicrohttpd and jansson for `mindpipe serve`; clang with libFuzzer, in libclang-rt-14-dev
# on Debian 12, and its OpenMP runtime, for validation/fuzz). Idempotent: installs only what is
# missing; runs apt-get through sudo when not root.
set -euo pipefail
pkgs=(build-essential autoconf automake libtool pkg-config make
      mpich libmpich-dev libhdf5-mpich-dev hdf5-tools
      libopenblas-openmp-dev libinih-dev
      libzmq3-dev libmicrohttpd-dev libjansson-dev
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
