#!/bin/sh
# The device code path (train.device, ARCHITECTURE.md §8) on a machine without a GPU. train.device=emu runs
# what the CUDA backend runs — model memory in a separate device region, every crossing between
# host and device an explicit copy (tokens in, losses out, pipeline messages through host buffers,
# checkpoints staged) — with the CPU kernels, and the region unreadable outside backend calls, so a
# host access the GPU would fault on faults here. Each layout must match the cpu backend bitwise:
# the copies change where bytes live, never their values. Up to 4 ranks on 2 cores.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # it reads checkpoints (compare_runs.py)
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"

# cpu_vs_emu RANKS NAME [--set ...]: the layout on both backends, bitwise.
cpu_vs_emu() {
    n=$1; name=$2; shift 2
    run "$n" "c_$name" --set train.threads=1 "$@"; ok $? "$name on cpu ($n ranks)"
    run "$n" "e_$name" --set train.threads=1 --set train.device=emu "$@"; ok $? "$name on emu ($n ranks)"
    compare "$name: emu vs cpu" "$SCRATCH/c_$name" "$SCRATCH/e_$name" --bitwise
}

cpu_vs_emu 1 one
cpu_vs_emu 2 tp2 --set parallel.tp=2
cpu_vs_emu 2 dp2 --set parallel.dp=2
cpu_vs_emu 2 dp2z --set parallel.dp=2 --set parallel.zero=1
cpu_vs_emu 2 pp2 --set parallel.pp=2
cpu_vs_emu 2 pp2_2bw --set parallel.pp=2 --set parallel.schedule=2bw
cpu_vs_emu 2 pp2_il --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 \
    --set model.layers=4
cpu_vs_emu 4 tp2pp2 --set parallel.tp=2 --set parallel.pp=2

# Checkpoints cross backends: a cpu checkpoint resumed on emu (staged into the device region), an
# emu checkpoint (staged out of it) resumed on cpu, with ZeRO-1's sharded moments; both continue
# the uninterrupted run bitwise.
mkdir -p "$SCRATCH/r_emu/ckpt" "$SCRATCH/r_cpu/ckpt"
cp "$SCRATCH/c_dp2z/ckpt/step_00000010.h5" "$SCRATCH/r_emu/ckpt/"
cp "$SCRATCH/e_dp2z/ckpt/step_00000010.h5" "$SCRATCH/r_cpu/ckpt/"
run 2 r_emu --set train.threads=1 --set parallel.dp=2 --set parallel.zero=1 --set train.device=emu --resume auto
ok $? "a cpu checkpoint resumed on emu (dp2, zero=1)"
resumed_from "cpu ckpt -> emu" r_emu 10
compare "cpu ckpt -> emu" "$SCRATCH/c_dp2z" "$SCRATCH/r_emu" --bitwise --step 20
run 2 r_cpu --set train.threads=1 --set parallel.dp=2 --set parallel.zero=1 --resume auto
ok $? "an emu checkpoint resumed on cpu (dp2, zero=1)"
resumed_from "emu ckpt -> cpu" r_cpu 10
compare "emu ckpt -> cpu" "$SCRATCH/c_dp2z" "$SCRATCH/r_cpu" --bitwise --step 20

# Activations dumped from the device region equal the cpu ones.
run 2 c_dump --set train.threads=1 --set parallel.pp=2 --set debug.dump_activations=3
ok $? "debug.dump_activations=3 on cpu (pp2)"
run 2 e_dump --set train.threads=1 --set parallel.pp=2 --set debug.dump_activations=3 --set train.device=emu
ok $? "debug.dump_activations=3 on emu (pp2)"
h5diff "$SCRATCH/c_dump/activations_step_00000003.h5" "$SCRATCH/e_dump/activations_step_00000003.h5" > "$SCRATCH/dump.diff" 2>&1
ok $? "debug.dump_activations on emu (pp2) equals cpu's, every layer"

# Refusals: what the emulated device cannot do, and a region too small for the model.
refused "bf16 on emu" "train.precision=bf16: train.device=emu computes in fp32 only" 1 \
    --set train.device=emu --set train.precision=bf16
refused "nccl messages without cuda" "parallel.p2p=nccl: NCCL moves device memory and needs train.device=cuda" 2 \
    --set train.device=emu --set parallel.pp=2 --set parallel.p2p=nccl
refused "emu region below the model" "memory.device_limit exceeded allocating" 1 \
    --set train.device=emu --set memory.device_limit=64K
done_testing
