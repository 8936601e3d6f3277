#!/usr/bin/env bash
# The GPU bring-up: one command on a machine with an NVIDIA GPU, run from the repository root with
# the kit that validation/gpu/kit.sh made (docs/GPU.md):
#
#   bash validation/gpu/bringup.sh [--dry-run] [--kit gpukit/kit.tar.xz] [--only P1,P2,..] [OUTDIR]
#
# OUTDIR (default $OUT, else ./bringup-out) receives report.json, summary.txt, bringup.log and
# runs.tar.gz (every run's log, metrics, kernel times, energy). The parts, each under its own
# timeout so that one hang cannot eat the rest, each reported even when an earlier one failed:
#
#   env        the device, driver, CUDA, cuBLAS and NCCL; the kit's libraries; MPI with 2 ranks
#   selftest   mindpipe selftest --device cuda: every GPU kernel against its CPU twin
#   fp32       the small deck on cuda against the same run on cpu (carried reference)
#   bf16       a 300-step curve in bf16 against fp32, against the noise of two fp32 seeds
#   llama      fp32 and bf16 again for a llama model (RMSNorm, rotary, SwiGLU, 2 kv heads of 4): the
#              small deck against its carried cpu run, the curve against its carried seeds; the
#              first GPU run of those kernels (debug.unproven_cuda=1)
#   ranks2     two ranks on the one GPU: pp=2 (p2p=mpi), offload, balance, each against one rank
#   ranks_nccl 2 and 4 ranks on the one GPU through the NCCL stand-in (the kit's lib/standin):
#              dp=2, dp=2 with ZeRO-1, tp=2, pp=2 (p2p=nccl) under 1f1b and zb1p, dp=2 x pp=2,
#              tp=2 x pp=2, each against one rank; a rank stopped mid-run named by the others within
#              the deadline; a planted mismatch refused (the dry run: the layouts on emu, the
#              stand-in's core for the mismatch)
#   ckpt       a checkpoint written on cuda resumed on cpu, and one written on cpu resumed on cuda
#   hf         a GPT-2 and a llama run exported to Hugging Face's format: their logits against HF's
#              forwards (hf_check.py, hf_llama_check.py) and transformers' own from_pretrained
#   gpt2       GPT-2 124M in bf16: tokens/s, MFU, the top kernels, GPU energy (NVML) per token
#   torch      the same model in PyTorch on the same GPU, eager (and the bf16 matmul peak)
#   compile    the same with torch.compile
#
# --dry-run runs every part here, without a GPU: train.device=emu stands for cuda (the device code
# path on the CPU kernels), fp32 for bf16 (emu computes in fp32), GPT-2's shapes shrunk, PyTorch
# on the CPU; the selftest must then say that there is no GPU. The kit's CPU references are made
# by `bringup.sh --make-refs DIR` (kit.sh calls it). --only runs the named parts alone, in their
# usual order (a second device call that need not repeat torch.compile's minute); the report then
# names only those. Exit status: 0 when every part run passed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

# ---- the parts and their timeouts (seconds; the sum stays under 8.75 minutes: docs/GPU.md) ----
PART_NAMES=(env selftest fp32 bf16 llama ranks2 ranks_nccl ckpt hf gpt2 torch compile)
declare -A PART_TIMEOUT=([env]=30 [selftest]=25 [fp32]=20 [bf16]=45 [llama]=35 [ranks2]=40 [ranks_nccl]=75 [ckpt]=25
                         [hf]=35 [gpt2]=80 [torch]=40 [compile]=75)

# The llama model of the llama part: the small decks' widths with 2 key/value heads of 4 and a SwiGLU
# of 2 × model.dim (LLAMA_TINY on tiny.ini, LLAMA_CURVE on curve.ini). debug.unproven_cuda: the deck
# refuses a family on cuda whose kernels never ran on a GPU; this part is that first run.
LLAMA=(--set model.arch=llama --set model.mlp_ratio=1 --set model.kv_heads=2 --set debug.unproven_cuda=1)
LLAMA_TINY=("${LLAMA[@]}" --set model.ffn_dim=64)
LLAMA_CURVE=("${LLAMA[@]}" --set model.ffn_dim=128)
LLAMA_CURVE_STEPS=150  # half of GPT-2's curve: the kit's references take half the time, and 150 steps judge a curve

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# ---- the environment of every mindpipe process (never of python: the kit's libraries would
# shadow PyTorch's) ----

# find_lib SONAME: the first directory holding it among the CUDA toolkit and the NVIDIA wheels.
find_lib() {
    local so=$1 d
    for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/lib" \
             "${CUDA_HOME:-/usr/local/cuda}/targets/x86_64-linux/lib" \
             /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/$so" ] && { echo "$d"; return 0; }
    done
    local sp
    for sp in $("$PY" -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
        [ -d "$sp/nvidia" ] || continue
        d=$(find "$sp/nvidia" -name "$so" -print -quit 2>/dev/null)
        [ -n "$d" ] && { dirname "$d"; return 0; }
    done
    return 1
}

# setup_env: unpacks the kit, chooses python, finds the CUDA libraries, writes $WORK/env.sh.
setup_env() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/mpgpu.XXXXXX")
    KIT=$WORK/kit
    mkdir -p "$KIT"
    if ! tar -xJf "$KIT_TAR" -C "$KIT"; then echo "bringup: cannot unpack $KIT_TAR" >&2; return 1; fi
    # a python with numpy and h5py (for the checks) and, where there is one, torch
    PY=""
    for p in python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import numpy, h5py, torch' 2>/dev/null; then PY=$(command -v "$p"); break; fi
    done
    [ -n "$PY" ] || for p in python3 /usr/bin/python3; do
        command -v "$p" >/dev/null && "$p" -c 'import numpy, h5py' 2>/dev/null && { PY=$(command -v "$p"); break; }
    done
    [ -n "$PY" ] || { echo "bringup: no python3 with numpy and h5py" >&2; return 1; }
    # CUDA's libraries come from this machine, never from the kit
    local ld="$KIT/lib" so dir
    CUDA_LIBS=""
    for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
        if dir=$(find_lib "$so"); then
            CUDA_LIBS="$CUDA_LIBS $so=$(readlink -f "$dir/$so")"
            case ":$ld:" in *":$dir:"*) ;; *) ld="$ld:$dir" ;; esac
        else
            CUDA_LIBS="$CUDA_LIBS $so=missing"
        fi
    done
    # the kit's libstdc++ only where this machine has none new enough for the kit's programs
    if LD_LIBRARY_PATH="$ld" ldd "$KIT/bin/mindpipe" 2>&1 | grep -q -E "libstdc\+\+|libgcc_s" &&
       LD_LIBRARY_PATH="$ld" ldd "$KIT/bin/mindpipe" 2>&1 | grep -E "libstdc\+\+|libgcc_s" | grep -q -E "not found|version"; then
        ld="$ld:$KIT/lib/compat"
    fi
    KIT_LD=$ld
    cat > "$WORK/env.sh" <<EOF
export KIT='$KIT' WORK='$WORK' PY='$PY' KIT_LD='$KIT_LD' CUDA_LIBS='$CUDA_LIBS'
EOF
}

# kit_env: the environment prefix of every mindpipe and mpiexec of the kit.
kit_env() {
    local ld=$KIT_LD
    # MP_STANDIN=1: the NCCL stand-in in NCCL's place (ranks_nccl)
    [ -n "${MP_STANDIN:-}" ] && ld="$KIT/lib/standin:$ld"
    KENV=(env LD_LIBRARY_PATH="$ld" UCX_MODULE_DIR="$KIT/lib/ucx" OMP_WAIT_POLICY=PASSIVE)
    [ -n "${MP_UCX_TLS:-}" ] && KENV+=(UCX_TLS="$MP_UCX_TLS")
    return 0
}
# mp ARGS: the kit's mindpipe.
mp() { kit_env; "${KENV[@]}" "$KIT/bin/mindpipe" "$@"; }

# train NAME RANKS DECK [--set ...]: a run into $RUNS/NAME on the kit's data, log in $RUNS/NAME.log.
train() {
    local name=$1 n=$2 deck=$3; shift 3
    rm -rf "${RUNS:?}/$name"
    local args=(train -c "$KIT/decks/$deck" --set "data.path=$KIT/data/kjv.h5" --out "$RUNS/$name" "$@")
    local stop=()
    [ -n "${MP_STOP_AFTER:-}" ] && stop=(timeout -s TERM -k 15 "$MP_STOP_AFTER")
    kit_env
    if [ "$n" -eq 1 ]; then "${stop[@]}" "${KENV[@]}" "$KIT/bin/mindpipe" "${args[@]}"
    else "${stop[@]}" "${KENV[@]}" "$KIT/bin/mpiexec" -n "$n" "$KIT/bin/mindpipe" "${args[@]}"; fi > "$RUNS/$name.log" 2>&1
    local rc=$?
    echo "[$name: exit $rc]" >> "$RUNS/$name.log"
    return $rc
}

check() { "$PY" "$here/bringup_check.py" "$@"; }

# ---- the parts (each runs as `bringup.sh --part NAME` under its timeout; env.sh is loaded) ----

part_env() {
    local f=$RUNS/env
    mkdir -p "$f"
    { nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,pci.bus_id --format=csv,noheader 2>&1 || true; } > "$f/nvidia-smi.txt"
    { nvidia-smi 2>&1 | head -n 20 || true; } > "$f/nvidia-smi-full.txt"
    { "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>&1 || echo "nvcc: not found"; } > "$f/nvcc.txt"
    { ldd --version 2>&1 | head -n 1; uname -a; nproc; } > "$f/host.txt"
    echo "$CUDA_LIBS" | tr ' ' '\n' | sed '/^$/d' > "$f/cuda-libs.txt"
    "$PY" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' > "$f/torch.txt" 2>&1 || echo "torch: unavailable" > "$f/torch.txt"
    # every library of the kit's programs resolves, and none but CUDA's and the C library's from outside the kit
    bash "$here/kit_check.sh" "$KIT" "$KIT_LD" > "$f/kit_check.txt" 2>&1; echo "rc=$?" >> "$f/kit_check.txt"
    mp --version > "$f/mindpipe-version.txt" 2>&1 || true
    # MPI with 2 ranks: default UCX transports first, then shared memory only, then TCP; the first
    # that works is kept for the later parts
    local tls ok=""
    for tls in "" "self,sm" "self,tcp"; do
        if MP_UCX_TLS=$tls timeout -k 5 15 bash "$0" --part mpi2 > "$f/mpi2-${tls:-default}.log" 2>&1; then
            ok=${tls:-default}; break
        fi
    done
    echo "${ok:-none}" > "$f/ucx_tls.txt"
    [ -n "$ok" ] && [ "$ok" != default ] && echo "export MP_UCX_TLS='$ok'" >> "$WORK/env.sh"
    check env "$PARTS/env.json" "$f" "$DRY"
}

part_mpi2() {  # not a part of its own: env's check that 2 ranks start and talk
    train mpi2 2 tiny.ini --set train.device=cpu --set train.steps=2 --set train.warmup=1 --set parallel.dp=2 \
        --set checkpoint.every=0
}

part_selftest() {
    local dev=cuda
    mkdir -p "$RUNS/selftest"
    mp selftest --device "$dev" --verbose > "$RUNS/selftest/selftest.log" 2>&1
    echo $? > "$RUNS/selftest/rc"
    check selftest "$PARTS/selftest.json" "$RUNS/selftest" "$DRY"
}

part_fp32() {
    train fp32-dev 1 tiny.ini --set "train.device=$DEV"
    check compare "$PARTS/fp32.json" fp32 "$KIT/ref/tiny-cpu" "$RUNS/fp32-dev" \
        --loss-rel 1e-5 --weights-rel 1e-4 --floor "$KIT/ref/tiny-cpu-tp2" \
        --what "train.device=$DEV against the carried cpu run, fp32, 20 steps"
}

part_bf16() {
    local s=(--set "train.device=$DEV")
    # the dry run's emu is slow at 300 steps on 2 cores: the first 60 are compared there (120 took 45 s,
    # the part's limit, on a host loaded by builds: the dry run compares fp32 with fp32 anyway)
    [ "$DRY" = 1 ] && s+=(--set train.steps=60)
    train curve-f32 1 curve.ini "${s[@]}"
    train curve-bf16 1 curve.ini "${s[@]}" --set "train.precision=$BF16"
    check curve "$PARTS/bf16.json" "$KIT/ref/curve-cpu-s11" "$KIT/ref/curve-cpu-s12" "$RUNS/curve-f32" "$RUNS/curve-bf16" "$BF16"
}

# The llama family on the device: fp32 against the carried cpu run, then its curve in bf16 against
# fp32 and the carried seeds; one result of both (bringup_check.py's `merge`).
part_llama() {
    local s=(--set "train.device=$DEV") c=(--set "train.steps=$LLAMA_CURVE_STEPS")
    # the dry run's emu is slow on 2 cores: the curve's first 60 steps there
    [ "$DRY" = 1 ] && c=(--set train.steps=60)
    train llama-dev 1 tiny.ini "${s[@]}" "${LLAMA_TINY[@]}"
    check compare "$PARTS/llama-fp32.json" llama-fp32 "$KIT/ref/llama-cpu" "$RUNS/llama-dev" \
        --loss-rel 1e-5 --weights-rel 1e-4 --floor "$KIT/ref/llama-cpu-tp2" \
        --what "a llama deck on train.device=$DEV against the carried cpu run, fp32, 20 steps"
    train llama-curve-f32 1 curve.ini "${s[@]}" "${LLAMA_CURVE[@]}" "${c[@]}"
    train llama-curve-bf16 1 curve.ini "${s[@]}" "${LLAMA_CURVE[@]}" "${c[@]}" --set "train.precision=$BF16"
    check curve "$PARTS/llama-curve.json" "$KIT/ref/llama-curve-s11" "$KIT/ref/llama-curve-s12" \
        "$RUNS/llama-curve-f32" "$RUNS/llama-curve-bf16" "$BF16"
    check merge "$PARTS/llama.json" llama "$PARTS/llama-fp32.json" "$PARTS/llama-curve.json"
}

part_ranks2() {
    local s=(--set "train.device=$DEV")
    [ -d "$RUNS/fp32-dev" ] || train fp32-dev 1 tiny.ini "${s[@]}"
    train pp2-mpi 2 tiny.ini "${s[@]}" --set parallel.pp=2 --set parallel.p2p=mpi
    train offload 1 tiny.ini "${s[@]}" --set memory.policy=offload
    train balance 2 tiny.ini "${s[@]}" --set parallel.pp=2 --set parallel.p2p=mpi --set memory.policy=balance
    check layouts "$PARTS/ranks2.json" "$RUNS/fp32-dev" "$KIT/ref/layouts-cpu.json" \
        pp2-mpi="$RUNS/pp2-mpi" offload="$RUNS/offload" balance="$RUNS/balance"
}

# The layouts of ranks_nccl, as NAME and its --set arguments (the kit's cpu references run them too).
NCCL_LAYOUTS=(
    "dp2|--set parallel.dp=2"
    "dp2-zero|--set parallel.dp=2 --set parallel.zero=1"
    "dp2-bf16grad|--set parallel.dp=2 --set parallel.grad_reduce_dtype=bf16"
    "tp2|--set parallel.tp=2"
    "pp2-1f1b|--set parallel.pp=2"
    "pp2-zb1p|--set parallel.pp=2 --set parallel.schedule=zb1p"
    "dp2xpp2|--set parallel.dp=2 --set parallel.pp=2"
    "tp2xpp2|--set parallel.tp=2 --set parallel.pp=2"
)
# nccl_layouts PREFIX DEVICE-SETS...: every layout into $RUNS/PREFIX-NAME; prints NAME=DIR pairs.
nccl_layouts() {
    local prefix=$1 l name sets n; shift
    for l in "${NCCL_LAYOUTS[@]}"; do
        name=${l%%|*}; sets=${l#*|}
        n=2; case $name in *x*) n=4 ;; esac
        # shellcheck disable=SC2086
        train "$prefix-$name" $n tiny.ini "$@" $sets >&2
        echo "$name=$RUNS/$prefix-$name"
    done
}

part_ranks_nccl() {
    local s=(--set "train.device=$DEV") pairs p2p=() t0 rc
    [ -d "$RUNS/fp32-dev" ] || train fp32-dev 1 tiny.ini "${s[@]}"
    # NCCL's own deadlines below MindPipe's, so the stand-in names the rank that never called
    export NCCL_STANDIN_TIMEOUT=4 NCCL_STANDIN_GRACE=5
    if [ "$DRY" = 1 ]; then p2p=(--set parallel.p2p=mpi); else export MP_STANDIN=1; p2p=(--set parallel.p2p=nccl); fi
    # pp's messages through NCCL (ignored where pp = 1)
    mapfile -t pairs < <(nccl_layouts nccl "${s[@]}" "${p2p[@]}")
    # a rank stopped (SIGSTOP) as step 5 begins: the other must end, naming it, within the deadline
    t0=$(date +%s.%N)
    NCCL_STANDIN_REPORT=$RUNS/nccl-stop.report train nccl-stop 2 tiny.ini "${s[@]}" --set parallel.dp=2 \
        --set debug.fail_at=1:5:hang --set parallel.timeout=8
    rc=$?
    echo "$rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')" > "$RUNS/nccl-stop.result"
    # what names the stopped rank: the survivor's RUN/exit_status (written before its abort), the
    # stand-in's report, the launcher's output (which may miss a killed rank's last lines)
    cat "$RUNS/nccl-stop/exit_status" "$RUNS/nccl-stop.report" "$RUNS/nccl-stop.log" > "$RUNS/nccl-stop.text" 2>/dev/null
    # one planted mismatch: on the GPU in MindPipe's own calls (world rank 1's 3rd NCCL call announces
    # one element more), in the dry run in the stand-in's core
    # (the stand-in's messages read from its report file: the launcher may drop a killed rank's stderr)
    export NCCL_STANDIN_REPORT=$RUNS/nccl-plant.report
    rm -f "$NCCL_STANDIN_REPORT"
    if [ "$DRY" = 1 ]; then
        kit_env
        NCCL_STANDIN_GRACE=0 "${KENV[@]}" "$KIT/bin/mpiexec" -n 2 "$KIT/bin/standin_test" count > "$RUNS/nccl-plant.log" 2>&1
    else
        NCCL_STANDIN_PLANT=1:3 train nccl-plant 2 tiny.ini "${s[@]}" --set parallel.dp=2
    fi
    unset NCCL_STANDIN_REPORT
    check nccl "$PARTS/ranks_nccl.json" "$RUNS/fp32-dev" "$KIT/ref/layouts-cpu.json" "$RUNS/nccl-stop.text" \
        "$RUNS/nccl-stop.result" "$RUNS/nccl-plant.report" "$DRY" "${pairs[@]}"
}

part_ckpt() {
    local s=(--set "train.device=$DEV")
    [ -s "$RUNS/fp32-dev/ckpt/step_00000010.h5" ] || train fp32-dev 1 tiny.ini "${s[@]}"
    train dev-to-cpu 1 tiny.ini --set train.device=cpu --resume "$RUNS/fp32-dev/ckpt/step_00000010.h5"
    train cpu-to-dev 1 tiny.ini "${s[@]}" --resume "$KIT/ref/tiny-cpu/ckpt/step_00000010.h5"
    check crossing "$PARTS/ckpt.json" "$RUNS/fp32-dev" "$KIT/ref/tiny-cpu" "$RUNS/dev-to-cpu" "$RUNS/cpu-to-dev" "$DEV"
}

part_gpt2() {
    local peak sets=()
    peak=$(check peak "$RUNS/env/nvidia-smi.txt" "$DRY")
    if [ "$DRY" = 1 ]; then
        sets=(--set model.layers=2 --set model.dim=64 --set model.heads=4 --set model.seq_len=64 --set train.batch=4
              --set train.micro_batch=4 --set train.steps=8 --set train.warmup=2 --set train.device=emu --set train.precision=fp32
              --set debug.kernel_times=3)
    else
        sets=(--set debug.kernel_times=5)
    fi
    # the GPU's own power readings over the run, beside the run's own energy report
    "$PY" "$here/nvml_sample.py" --out "$RUNS/nvml.json" --stop "$RUNS/nvml.stop" > "$RUNS/nvml.log" 2>&1 &
    local sampler=$!
    # stopped by SIGTERM before the part's own limit if slow: it then ends its step, reports its
    # energy and kernel times, and the check reads the steps it ran
    MP_STOP_AFTER=50 train gpt2 1 gpt2-124m.ini --set "train.peak_gflops=$peak" "${sets[@]}"
    touch "$RUNS/nvml.stop"
    wait $sampler
    # variants of the kernels (environment switches of kernels/ctx_cuda.cu, BRINGUP_GPT2_ALT: up to
    # three VAR=VALUE separated by ';', by default the products fed by cuBLAS converting the fp32
    # operands itself), 20 steps each, for the throughput beside the default's
    local alts=() alt i=0 args=()
    IFS=';' read -r -a alts <<< "${BRINGUP_GPT2_ALT:-MP_BF16_GEMM=cublas}"
    for alt in "${alts[@]}"; do
        [ -n "$alt" ] || continue
        if [ $i -eq 3 ]; then echo "bringup: BRINGUP_GPT2_ALT: more than three variants; '$alt' not run" >&2; continue; fi
        i=$((i + 1))
        local dir=gpt2-alt; [ $i -gt 1 ] && dir=gpt2-alt$i
        (export "$alt"; MP_STOP_AFTER=25 train "$dir" 1 gpt2-124m.ini --set "train.peak_gflops=$peak" \
            "${sets[@]}" --set train.steps=20)
        args+=("$RUNS/$dir" "$alt")
    done
    check gpt2 "$PARTS/gpt2.json" "$RUNS/gpt2" "$RUNS/nvml.json" "$peak" "$DRY" "${args[@]}"
}

# A run on the device exported to Hugging Face's format; its logits against HF GPT-2's forward and,
# but in a dry run, transformers' own GPT2LMHeadModel.from_pretrained (issue 34).
part_hf() {
    train hf-src 1 tiny.ini --set "train.device=$DEV" --set train.steps=4 --set train.warmup=1 \
        --set checkpoint.every=2 --set debug.dump_activations=2
    local ck=$RUNS/hf-src/ckpt/step_00000002.h5 tf=(--transformers)
    [ "$DRY" = 1 ] && tf=()
    mp export --format hf -c "$KIT/decks/tiny.ini" --ckpt "$ck" --out "$RUNS/hf-out" > "$RUNS/hf-export.log" 2>&1
    "$PY" "$top/validation/hf_check.py" "$RUNS/hf-out" --dump "$RUNS/hf-src/activations_step_00000002.h5" \
        --ckpt "$ck" "${tf[@]}" > "$RUNS/hf-check.out" 2>&1
    # the same for a llama run (issue 48): LlamaForCausalLM out, and transformers' own loader reading it
    train hf-llama-src 1 tiny.ini --set "train.device=$DEV" --set train.steps=4 --set train.warmup=1 \
        --set checkpoint.every=2 --set debug.dump_activations=2 "${LLAMA_TINY[@]}"
    ck=$RUNS/hf-llama-src/ckpt/step_00000002.h5
    mp export --format hf -c "$KIT/decks/tiny.ini" "${LLAMA_TINY[@]}" --ckpt "$ck" --out "$RUNS/hf-llama-out" \
        > "$RUNS/hf-llama-export.log" 2>&1
    "$PY" "$top/validation/hf_llama_check.py" forward "$RUNS/hf-llama-out" \
        --dump "$RUNS/hf-llama-src/activations_step_00000002.h5" --ckpt "$ck" "${tf[@]}" > "$RUNS/hf-llama-check.out" 2>&1
    check hf "$PARTS/hf.json" "$RUNS/hf-check.out" "$DRY" "$RUNS/hf-llama-check.out"
}

torch_peer() {  # torch_peer NAME --compile 0|1 [more]
    local name=$1; shift
    local peak shape
    peak=$(check peak "$RUNS/env/nvidia-smi.txt" "$DRY")
    if [ "$DRY" = 1 ]; then
        shape=(--device cpu --threads 2 --layers 2 --dim 64 --heads 4 --seq 64 --vocab 50304 --batch 4 --dtype fp32)
    else
        shape=(--device cuda --layers 12 --dim 768 --heads 12 --seq 1024 --vocab 50304 --batch 16 --dtype bf16)
    fi
    OMP_WAIT_POLICY=PASSIVE "$PY" "$here/torch_gpt2.py" "${shape[@]}" --peak-tflops "$(awk -v p="$peak" 'BEGIN{print p/1000}')" \
        --json "$RUNS/$name.json" "$@" > "$RUNS/$name.log" 2>&1
    check torch "$PARTS/$name.json" "$name" "$RUNS/$name.json" "$DRY"
}
part_torch() { torch_peer torch --compile 0 --steps "$([ "$DRY" = 1 ] && echo 4 || echo 20)" --warmup 3 --measure-matmul 1 --measure-shapes 1 --time-limit 30; }
part_compile() { torch_peer compile --compile 1 --steps "$([ "$DRY" = 1 ] && echo 4 || echo 15)" --warmup 3 --time-limit 60; }

# ---- the kit's CPU references (kit.sh): what the parts compare against ----
make_refs() {
    local dest=$1
    RUNS=$dest
    mkdir -p "$dest"
    train tiny-cpu 1 tiny.ini --set train.device=cpu || return 1
    train tiny-cpu-tp2 2 tiny.ini --set train.device=cpu --set parallel.tp=2 || return 1
    train curve-cpu-s11 1 curve.ini --set train.device=cpu || return 1
    train curve-cpu-s12 1 curve.ini --set train.device=cpu --set train.seed=12 || return 1
    # the llama part's
    train llama-cpu 1 tiny.ini --set train.device=cpu "${LLAMA_TINY[@]}" || return 1
    train llama-cpu-tp2 2 tiny.ini --set train.device=cpu --set parallel.tp=2 "${LLAMA_TINY[@]}" || return 1
    train llama-curve-s11 1 curve.ini --set train.device=cpu "${LLAMA_CURVE[@]}" --set "train.steps=$LLAMA_CURVE_STEPS" || return 1
    train llama-curve-s12 1 curve.ini --set train.device=cpu --set train.seed=12 "${LLAMA_CURVE[@]}" \
        --set "train.steps=$LLAMA_CURVE_STEPS" || return 1
    # the same layouts as ranks2, on cpu: how closely they follow one rank there
    train pp2-mpi 2 tiny.ini --set train.device=cpu --set parallel.pp=2 --set parallel.p2p=mpi || return 1
    train offload 1 tiny.ini --set train.device=cpu --set memory.policy=offload || return 1
    train balance 2 tiny.ini --set train.device=cpu --set parallel.pp=2 --set parallel.p2p=mpi --set memory.policy=balance || return 1
    # ranks_nccl's layouts on cpu
    local pairs
    mapfile -t pairs < <(nccl_layouts nccl --set train.device=cpu --set parallel.p2p=mpi)
    [ "${#pairs[@]}" -eq "${#NCCL_LAYOUTS[@]}" ] || return 1
    for p in "${pairs[@]}"; do grep -q '^\[.*: exit 0\]$' "${p#*=}.log" || { echo "kit: ${p%%=*} failed on cpu" >&2; return 1; }; done
    check layouts "$dest/layouts-cpu.json" "$dest/tiny-cpu" "" pp2-mpi="$dest/pp2-mpi" offload="$dest/offload" balance="$dest/balance" \
        "${pairs[@]}" || return 1
    # keep what the parts read: metrics, the checkpoints of the small run, the logs
    rm -rf "$dest/pp2-mpi" "$dest/offload" "$dest/balance" "$dest"/nccl-*/
    local d
    for d in "$dest"/*/; do rm -f "$d/trace.json" "$d"/profile.json; done
    rm -rf "$dest"/curve-cpu-*/ckpt "$dest"/tiny-cpu-tp2/ckpt/step_00000010.h5 "$dest"/llama-curve-*/ckpt \
        "$dest"/llama-cpu/ckpt/step_00000010.h5 "$dest"/llama-cpu-tp2/ckpt/step_00000010.h5
    return 0
}

# ---- main ----
dry=0; KIT_TAR=$top/gpukit/kit.tar.xz; OUTDIR=""; PART=""; REFS=""; ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --kit) KIT_TAR=$2; shift ;;
        --part) PART=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --make-refs) REFS=$2; shift ;;
        --lib) return 0 2>/dev/null || exit 0 ;;
        -h|--help) usage ;;
        -*) echo "bringup: unknown option $1" >&2; usage ;;
        *) OUTDIR=$1 ;;
    esac
    shift
done

if [ -n "$PART" ]; then  # one part, in the environment the main run prepared
    . "$WORK/env.sh"
    "part_$PART"
    exit $?
fi

if [ -n "$REFS" ]; then  # kit.sh: KIT is the unpacked stage, python is this machine's
    KIT=${KIT:?--make-refs needs KIT (the kit stage)}; KIT_LD=${KIT_LD:-$KIT/lib}
    PY=${PY:-/usr/bin/python3}
    make_refs "$REFS"
    exit $?
fi

if [ -n "$ONLY" ]; then
    chosen=()
    for p in "${PART_NAMES[@]}"; do [[ ",$ONLY," == *",$p,"* ]] && chosen+=("$p"); done
    for p in ${ONLY//,/ }; do
        [ -n "${PART_TIMEOUT[$p]:-}" ] || { echo "bringup: --only: no part '$p' (${PART_NAMES[*]})" >&2; exit 2; }
    done
    PART_NAMES=("${chosen[@]}")
fi

DRY=$dry
DRY_LIMIT_SCALE=4
OUTDIR=${OUTDIR:-${OUT:-$PWD/bringup-out}}
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
log=$OUTDIR/bringup.log
t_start=$(date +%s.%N)
{
    echo "bringup: $(date -u +%FT%TZ) on $(hostname), mode $([ $DRY = 1 ] && echo dry-run || echo gpu), kit $KIT_TAR"
    [ -s "$KIT_TAR" ] || { echo "bringup: no kit at $KIT_TAR (make it with validation/gpu/kit.sh)"; exit 2; }
    setup_env || { rm -rf "${WORK:-/nonexistent}"; exit 2; }
    . "$WORK/env.sh"
    export RUNS=$WORK/runs PARTS=$WORK/parts DRY
    export DEV BF16
    if [ "$DRY" = 1 ]; then DEV=emu BF16=fp32; else DEV=cuda BF16=bf16; fi
    mkdir -p "$RUNS" "$PARTS"
    echo "bringup: python $PY; libraries for mindpipe: $KIT_LD"
    echo "bringup: CUDA libraries:$CUDA_LIBS"
    for p in "${PART_NAMES[@]}"; do
        t=${PART_TIMEOUT[$p]}
        # The limits are sized for a GPU's minutes. On the dry run they only guard against a hang:
        # the parts run on a 2-core CPU, where a loaded host stretched the llama part from 4.5 s to
        # past its 35 s (a CI rehearsal beside two busy loops), so a verdict there would be the
        # host's load, not the script's. Four times the limit still ends a hung part in minutes.
        [ "$DRY" = 1 ] && t=$((t * DRY_LIMIT_SCALE))
        echo "=== part $p (timeout ${t} s) $(date -u +%T)"
        t0=$(date +%s.%N)
        timeout -k 5 "$t" bash "$0" --part "$p" </dev/null
        rc=$?
        t1=$(date +%s.%N)
        check finish "$PARTS/$p.json" "$p" "$rc" "$t0" "$t1" "$t" "${PART_TIMEOUT[$p]}"
    done
    check report "$OUTDIR/report.json" "$OUTDIR/summary.txt" "$PARTS" "$DRY" "$t_start" "$KIT_TAR" "${PART_NAMES[@]}"
    rc=$?
    tar -czf "$OUTDIR/runs.tar.gz" -C "$WORK" --exclude='*.h5' --exclude='trace.json' runs parts env.sh 2>/dev/null
    cat "$OUTDIR/summary.txt"
    rm -rf "$WORK"
    exit $rc
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
