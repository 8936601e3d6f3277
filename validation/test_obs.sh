#!/bin/sh
# What a training run reports of itself at its end (ARCHITECTURE.md §9), on cpu and emu:
# RUN/energy.json, consistent with itself, the deck and the log's done line; debug.kernel_times'
# RUN/kernel_times.r<rank>.json on every rank (every kernel the model uses, calls proportional to the
# timed steps, the kernels' sum within the steps' wall time), none by default, and bitwise the same
# training with it as without; the GPU energy's counting across ranks against a fake NVML
# (test_energy under mpiexec: the cuda path itself needs a GPU). validation/check_reports.py checks.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data (make_kjv.sh / mindpipe prep) failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
MPIEXEC=${MPIEXEC:-mpiexec}
steps=6
tokens=$((steps * 8 * 32)) # train.batch x model.seq_len of the deck
# run RANKS OUT [--set ...]: six steps, evaluated and logged at the end only, no checkpoint
run() {
    n=$1; out=$2; shift 2
    $MPIEXEC -n "$n" "$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.steps=$steps \
        --set train.warmup=2 --set train.eval_every=0 --set checkpoint.final=0 --set checkpoint.every=0 \
        --quiet --out "$SCRATCH/$out" "$@" > "$SCRATCH/$out.out" 2>&1
    ok $? "train $out ($n rank(s) $*)"
}
check() { # check LABEL SUBCOMMAND ARGS...: check_reports.py's PASS/FAIL lines as TAP lines
    label=$1; shift
    # a crash (a traceback and no FAIL line), or no check at all, fails too
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/check_reports.py" "$@" > "$SCRATCH/check.out" 2>&1
    tap_checker "$label" "check_reports.py $1" $? "$SCRATCH/check.out"
}
# the kernels a tp = 1 model calls: all of them on some rank, and the blocks' and the optimizer's on each
model_kernels=encoder_forward,encoder_backward,layernorm_forward,layernorm_backward,matmul_forward,matmul_residual_forward,mlp_proj_forward,matmul_backward,mlp_fc_backward,attention_forward,attention_backward,matmul_gelu_forward,matmul_backward_gelu,head_forward,head_backward,adamw_each,sumsq_each
block_kernels=layernorm_forward,layernorm_backward,matmul_residual_forward,mlp_proj_forward,matmul_backward,mlp_fc_backward,attention_forward,attention_backward,matmul_gelu_forward,matmul_backward_gelu,adamw_each,sumsq_each

# energy.json, and kernel times off by default
run 1 cpu
check "energy.json (cpu)" energy "$SCRATCH/cpu" --steps $steps --tokens $tokens
[ -s "$SCRATCH/cpu/log.txt" ] && [ -z "$(find "$SCRATCH/cpu" -name 'kernel_times*')" ]
ok $? "debug.kernel_times off by default: the run wrote its log.txt and no kernel_times file"

# one rank: every step timed, and from step 3 (4 of the 6 steps); the timed run trains bitwise alike
run 1 cpu_k1 --set debug.kernel_times=1
run 1 cpu_k3 --set debug.kernel_times=3
check "cpu, 1 rank" kernels "$SCRATCH/cpu_k1" "$SCRATCH/cpu_k3" --ranks 1 --steps $steps --from-step 3 --device cpu \
    --need-all $model_kernels --need-each $model_kernels
check "timed against untimed (cpu)" same "$SCRATCH/cpu" "$SCRATCH/cpu_k1"
check "timed from step 3 against untimed (cpu)" same "$SCRATCH/cpu" "$SCRATCH/cpu_k3"
grep -q "^kernel times (debug.kernel_times=3, rank 0, host clock): 4 steps" "$SCRATCH/cpu_k3/log.txt" &&
    test "$(grep -A8 '^kernel times' "$SCRATCH/cpu_k3/log.txt" | grep -c ' calls .* s .*%$')" -eq 8
ok $? "the log has rank 0's top 8 kernels with their share of the timed steps' wall time"
check "energy.json (cpu, timed)" energy "$SCRATCH/cpu_k3" --steps $steps --tokens $tokens

# two pipeline stages on cpu: a file per rank, each stage's kernels
run 2 pp_k1 --set parallel.pp=2 --set debug.kernel_times=1
run 2 pp_k3 --set parallel.pp=2 --set debug.kernel_times=3
check "cpu, pp=2" kernels "$SCRATCH/pp_k1" "$SCRATCH/pp_k3" --ranks 2 --steps $steps --from-step 3 --device cpu \
    --need-all $model_kernels --need-each $block_kernels
check "energy.json (cpu, 2 ranks)" energy "$SCRATCH/pp_k1" --steps $steps --tokens $tokens

# emu, two data-parallel replicas
run 2 emu_k1 --set train.device=emu --set parallel.dp=2 --set debug.kernel_times=1
run 2 emu_k3 --set train.device=emu --set parallel.dp=2 --set debug.kernel_times=3
check "emu, dp=2" kernels "$SCRATCH/emu_k1" "$SCRATCH/emu_k3" --ranks 2 --steps $steps --from-step 3 --device emu \
    --need-all $model_kernels --need-each $model_kernels
check "energy.json (emu)" energy "$SCRATCH/emu_k1" --steps $steps --tokens $tokens

# NVML's counting across ranks: 3 ranks, 2 GPUs (a fake libnvidia-ml; validation/unit/test_energy.c)
$MPIEXEC -n 3 "$MP_BUILDDIR/validation/unit/test_energy" > "$SCRATCH/nvml.out" 2>&1
rc=$?
tap_checker "GPU energy" "test_energy (mpiexec -n 3)" $rc "$SCRATCH/nvml.out"
[ "$tl_found" -eq 1 ] && [ $rc -eq 0 ]
ok $? "test_energy under mpiexec -n 3 passed (exit $rc)"
done_testing
