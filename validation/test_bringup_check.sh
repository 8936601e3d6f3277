#!/bin/sh
# The GPU bring-up's checker (validation/gpu/bringup_check.py) fails when it should and passes when
# it should, so that a bring-up can never report a pass by accident. Three real 20-step cpu runs of
# the bring-up's small deck (the third with debug.kernel_times, for `gpt2`) and doctored copies of
# them (one loss, one weight element) for `compare` and `layouts`; synthetic loss curves for
# `curve`; logs for `selftest`; part results for `finish` and `report`; for every subcommand,
# missing inputs give a failed part and exit 1, never a traceback. Each check asserts the JSON's
# status and the exit code (0 pass, 1 fail). The NaN, diverged, short and unfinished cases were
# holes of the first checker (it read them as passes), found by this test.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_require_h5py # the checker and doctor() read and edit checkpoints
mp_scratch_init
CHECK="$MP_SRCDIR/validation/gpu/bringup_check.py"
deck="$MP_SRCDIR/validation/gpu/decks/tiny.ini"
A="$SCRATCH/a"; B="$SCRATCH/b"; NO="$SCRATCH/nonexistent"

# C TAG SUB [args]: the checker's SUB writing $SCRATCH/TAG.json; its output in TAG.out, its exit in rc
C() { c_t=$1; c_s=$2; shift 2; "$TORCH_PYTHON" "$CHECK" "$c_s" "$SCRATCH/$c_t.json" "$@" > "$SCRATCH/$c_t.out" 2>&1; rc=$?; }
# J FILE EXPR: EXPR (Python, the JSON as d) holds; else the JSON as diagnostics
J() {
    "$TORCH_PYTHON" - "$1" "$2" <<'EOF'
import json, math, sys
try:
    d = json.load(open(sys.argv[1]))
    r = eval(sys.argv[2], {"math": math}, {"d": d})
except Exception as ex:
    d, r = None, False
    print("#   %s: %s: %s" % (sys.argv[1], type(ex).__name__, ex))
if not r and d is not None:
    print("\n".join("#   " + l for l in json.dumps(d, indent=1, default=str).splitlines()[:30]))
sys.exit(0 if r else 1)
EOF
}
# verdict TAG STATUS [EXPR]: TAG.json says STATUS (and EXPR holds), the exit agrees (0 for pass, 1
# otherwise) and the checker printed no traceback
verdict() {
    v_want=1; [ "$2" = pass ] && v_want=0
    J "$SCRATCH/$1.json" "d['status'] == '$2' and (${3:-True})" && [ "$rc" -eq $v_want ] &&
        ! grep -q Traceback "$SCRATCH/$1.out" && return 0
    diag "$1: exit $rc (want $v_want); output:"; sed 's/^/#   /' "$SCRATCH/$1.out"; return 1
}
# doctor loss RUN STEP REL|nan|NaN: that step's loss times 1+REL, or the word as metrics.jsonl's text
# doctor weight CKPT TENSOR REL: the tensor's first element moved by REL times its norm
doctor() {
    "$TORCH_PYTHON" - "$@" <<'EOF'
import re, sys
what, path, key, x = sys.argv[1:5]
if what == "loss":
    p = path + "/metrics.jsonl"
    rx = re.compile(r'^(\{"step":%s,"loss":)([^,]+)' % key, re.M)
    text = open(p).read()
    m = rx.search(text)
    v = x if x in ("nan", "NaN") else "%.17g" % (float(m.group(2)) * (1 + float(x)))
    open(p, "w").write(rx.sub(lambda m: m.group(1) + v, text, count=1))
else:
    import h5py, numpy as np
    with h5py.File(path, "r+") as f:
        t = f["model/" + key]
        a = t[()]
        a.flat[0] += np.float32(float(x) * np.linalg.norm(a.astype(np.float64)))
        t[...] = a
EOF
}

# ---- three real runs of the bring-up's small deck on cpu: a and b alike, g with kernel times ----
for r in a b "g --set debug.kernel_times=2"; do
    # shellcheck disable=SC2086
    set -- $r
    name=$1; shift
    "$MINDPIPE" train -c "$deck" --set data.path="$data" --set train.device=cpu --quiet --out "$SCRATCH/$name" "$@" \
        > "$SCRATCH/$name.log" 2>&1
    ok $? "train tiny.ini 20 steps on cpu into $r"
done
[ -s "$A/metrics.jsonl" ] && [ -s "$B/ckpt/step_00000010.h5" ] && [ -s "$B/ckpt/step_00000020.h5" ]
ok $? "the runs wrote metrics.jsonl and checkpoints at steps 10 and 20"
[ -s "$SCRATCH/g/kernel_times.r0.json" ] && [ -s "$SCRATCH/g/energy.json" ]
ok $? "the run with debug.kernel_times=2 wrote kernel_times.r0.json and energy.json"

# ---- compare OUT LABEL REF RUN [--loss-rel X --weights-rel Y] ----
C same compare fp32 "$A" "$B"
verdict same pass "d['result']['steps'] == 20 and d['result']['loss_rel'] == 0 and d['result']['bitwise'] is True"
ok $? "compare: two identical runs pass: 20 steps, loss_rel 0, bitwise (exit $rc)"

cp -r "$B" "$SCRATCH/loss" && doctor loss "$SCRATCH/loss" 10 1e-3
C loss compare fp32 "$A" "$SCRATCH/loss"
verdict loss fail "abs(d['result']['loss_rel'] - 1e-3) < 1e-6 and 'loss rel' in d['why']"
ok $? "compare: step 10's loss changed by a relative 1e-3 fails (exit $rc)"

cp -r "$B" "$SCRATCH/w" && doctor weight "$SCRATCH/w/ckpt/step_00000020.h5" h.1.mlp.fc.w 2e-4
C w compare fp32 "$A" "$SCRATCH/w"
verdict w fail "d['result']['loss_rel'] == 0 and 1e-4 < d['result']['weights_rel'] < 3e-4 and d['result']['tensors']['model']['tensor'] == 'h.1.mlp.fc.w'"
ok $? "compare: one element of h.1.mlp.fc.w moved by 2e-4 of its norm fails, naming the tensor (exit $rc)"

cp -r "$B" "$SCRATCH/near" && doctor weight "$SCRATCH/near/ckpt/step_00000020.h5" wte 1e-7
C near compare fp32 "$A" "$SCRATCH/near"
verdict near pass "d['result']['bitwise'] is False and 0 < d['result']['weights_rel'] < 1e-6"
ok $? "compare: the same moved by 1e-7 of its norm passes, not bitwise (exit $rc)"

cp -r "$B" "$SCRATCH/nometrics" && rm "$SCRATCH/nometrics/metrics.jsonl"
C nometrics compare fp32 "$A" "$SCRATCH/nometrics"
verdict nometrics fail "'no common logged step' in d['result']['error'] and d['why'] == d['result']['error']"
ok $? "compare: a run directory without metrics.jsonl fails with an error, not a crash (exit $rc)"

cp -r "$B" "$SCRATCH/nan" && doctor loss "$SCRATCH/nan" 20 nan
C nan compare fp32 "$A" "$SCRATCH/nan"
verdict nan fail > /dev/null
ok $? "compare: a NaN loss at step 20, written as train.c prints it ('\"loss\":nan'), fails (exit $rc)"
cp -r "$B" "$SCRATCH/nanj" && doctor loss "$SCRATCH/nanj" 20 NaN
C nanj compare fp32 "$A" "$SCRATCH/nanj"
verdict nanj fail > /dev/null
ok $? "compare: a NaN loss at step 20 written as JSON's NaN fails (exit $rc)"
cp -r "$B" "$SCRATCH/unfinished" && echo "1 failed (the log says why) at step 20" > "$SCRATCH/unfinished/exit_status"
C unfinished compare fp32 "$A" "$SCRATCH/unfinished"
verdict unfinished fail "'did not finish' in d['why']"
ok $? "compare: a run whose exit_status says it failed fails, however close its losses (exit $rc)"

# ---- curve OUT S11 S12 F32 LOW PREC: synthetic curves of 30 steps ----
"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, os, sys
def write(name, losses, tail=""):
    os.makedirs(os.path.join(sys.argv[1], name))
    with open(os.path.join(sys.argv[1], name, "metrics.jsonl"), "w") as f:
        for i, l in enumerate(losses):
            f.write(json.dumps({"step": i + 1, "loss": l, "lr": 1e-3}) + "\n")
        f.write(tail)
    with open(os.path.join(sys.argv[1], name, "exit_status"), "w") as f:
        f.write("0 done at step %d\n" % len(losses))
base = [5.5 - 0.1 * i for i in range(30)]
alt = lambda i: 1 if i % 2 else -1
write("s11", base)
write("s12", [x + 0.02 * alt(i) for i, x in enumerate(base)])         # seed noise: 0.02 a step
write("f32", [x + 0.005 * alt(i) for i, x in enumerate(base)])
f32 = [x + 0.005 * alt(i) for i, x in enumerate(base)]
write("low_near", [x + 0.01 for x in f32])                             # 0.01 a step: within the noise
write("low_far", [x + 0.05 for x in f32])                              # 0.05 a step: beyond it
write("low_nan", f32[:15] + [float("nan")] + f32[16:])
write("low_diverged", f32[:19], '{"step":20,"loss":nan,"lr":0.001}\n')  # as train.c ends a diverged run
write("low_short", f32[:15])                                           # a run that died at step 16
write("f32_nan", f32[:15] + [float("nan")] + f32[16:])
EOF
ok $? "the synthetic curves are written (without them the 'fail' verdicts below would pass on missing files)"
S=$SCRATCH
C c_near curve "$S/s11" "$S/s12" "$S/f32" "$S/low_near" bf16
verdict c_near pass "d['steps'] == 30 and abs(d['low_vs_fp32'] - 0.01) < 1e-9 and abs(d['seed_noise'] - 0.02) < 1e-9"
ok $? "curve: bf16 0.01 a step from fp32, seeds 0.02 apart, passes (exit $rc)"
C c_far curve "$S/s11" "$S/s12" "$S/f32" "$S/low_far" bf16
verdict c_far fail "abs(d['low_vs_fp32'] - 0.05) < 1e-9 and 'more than two seeds' in d['why']"
ok $? "curve: bf16 0.05 a step from fp32 fails (exit $rc)"
C c_nan curve "$S/s11" "$S/s12" "$S/f32" "$S/low_nan" bf16
verdict c_nan fail "d['why'] == 'a non-finite loss'"
ok $? "curve: a NaN loss at step 16 of the bf16 curve fails (exit $rc)"
C c_div curve "$S/s11" "$S/s12" "$S/f32" "$S/low_diverged" bf16
verdict c_div fail > /dev/null
ok $? "curve: a bf16 run that diverged at step 20 (its last line '\"loss\":nan') fails (exit $rc)"
C c_short curve "$S/s11" "$S/s12" "$S/f32" "$S/low_short" bf16
verdict c_short fail > /dev/null
ok $? "curve: a bf16 run that stopped at step 15 of fp32's 30 fails (exit $rc)"
C c_f32nan curve "$S/s11" "$S/s12" "$S/f32_nan" "$S/low_near" bf16
verdict c_f32nan fail > /dev/null
ok $? "curve: a NaN in the fp32 curve fails (exit $rc)"

# ---- merge OUT LABEL JSON...: the llama part, one result of its compare and its curve ----
mkdir -p "$S/mg_ok" "$S/mg_bad" && cp "$S/same.json" "$S/mg_ok/llama-fp32.json" && cp "$S/c_near.json" "$S/mg_ok/llama-curve.json" &&
    cp "$S/same.json" "$S/mg_bad/llama-fp32.json" && cp "$S/c_far.json" "$S/mg_bad/llama-curve.json"
ok $? "the merge cases' inputs are copied (compare's pass; curve's pass and fail)"
C mg_pass merge llama "$S/mg_ok/llama-fp32.json" "$S/mg_ok/llama-curve.json"
verdict mg_pass pass "d['part'] == 'llama' and set(d['checks']) == {'llama-fp32', 'llama-curve'}"
ok $? "merge: compare and curve both passed: the part passes, each kept (exit $rc)"
C mg_fail merge llama "$S/mg_bad/llama-fp32.json" "$S/mg_bad/llama-curve.json"
verdict mg_fail fail "len(d['why']) == 1 and d['why'][0].startswith('llama-curve: fail, ') and 'more than two seeds' in d['why'][0]"
ok $? "merge: the curve failed: the part fails naming it and why (exit $rc)"
C mg_missing merge llama "$S/mg_ok/llama-fp32.json" "$NO/llama-curve.json"
verdict mg_missing fail "d['why'][0].startswith('llama-curve: error')"
ok $? "merge: a check that wrote nothing fails the part (exit $rc)"
C mg_none merge llama
verdict mg_none fail "d['why'] == ['no checks to merge']"
ok $? "merge: nothing to merge fails (exit $rc)"

# ---- hf OUT CHK DRY [LLAMACHK]: the checkers' PASS/FAIL lines ----
printf 'PASS block 0\nPASS logits\n' > "$S/in_hf_g.txt"
printf 'PASS block 0\nPASS logits\nPASS transformers: GPT2LMHeadModel.from_pretrained ok\n' > "$S/in_hf_gt.txt"
printf 'PASS block 0\nPASS logits\nPASS transformers: LlamaForCausalLM.from_pretrained ok\n' > "$S/in_hf_lt.txt"
printf 'PASS block 0\nFAIL logits: MindPipe against HF Llama, error 3e-2\n' > "$S/in_hf_lbad.txt"
C hf_dry hf "$S/in_hf_g.txt" 1 "$S/in_hf_g.txt"
verdict hf_dry pass "d['passed'] == 4"
ok $? "hf: a dry run's two forwards without transformers pass (exit $rc)"
C hf_gpu hf "$S/in_hf_gt.txt" 0 "$S/in_hf_lt.txt"
verdict hf_gpu pass "d['transformers'].count('from_pretrained') == 2"
ok $? "hf: on a GPU, both forwards and both from_pretrained pass (exit $rc)"
C hf_notf hf "$S/in_hf_gt.txt" 0 "$S/in_hf_g.txt"
verdict hf_notf fail "d['why'] == [\"llama: transformers' from_pretrained was not checked\"]"
ok $? "hf: on a GPU, a llama check without from_pretrained fails naming it (exit $rc)"
C hf_lbad hf "$S/in_hf_g.txt" 1 "$S/in_hf_lbad.txt"
verdict hf_lbad fail "d['why'][0].startswith('llama: logits: MindPipe against HF Llama')"
ok $? "hf: a llama logits failure fails the part naming it (exit $rc)"
C hf_lnone hf "$S/in_hf_g.txt" 1 "$NO/hf-llama-check.out"
verdict hf_lnone fail "'llama: 0 checks passed' in d['why'][0]"
ok $? "hf: a llama check that wrote nothing fails the part (exit $rc)"

# ---- layouts OUT BASE CPUREF NAME=DIR...: the cpu reference made as bringup.sh --make-refs does ----
C cpuref layouts "$A" "" offload="$B" pp2-mpi="$SCRATCH/near"
verdict cpuref pass "d['layouts']['offload']['bitwise'] is True and d['layouts']['pp2-mpi']['bitwise'] is False"
ok $? "layouts: the cpu reference records offload bitwise, pp2-mpi not (exit $rc)"
C l_same layouts "$A" "$SCRATCH/cpuref.json" offload="$B"
verdict l_same pass "d['layouts']['offload']['bitwise'] is True"
ok $? "layouts: a layout identical to one rank, bitwise on cpu, passes (exit $rc)"
C l_near layouts "$A" "$SCRATCH/cpuref.json" pp2-mpi="$SCRATCH/near"
verdict l_near pass
ok $? "layouts: a layout as far from one rank as on cpu (not bitwise there) passes (exit $rc)"
C l_doc layouts "$A" "$SCRATCH/cpuref.json" offload="$SCRATCH/near"
verdict l_doc fail "any(w.startswith('offload: bitwise on cpu, not here') for w in d['why'])"
ok $? "layouts: a doctored layout (weights rel 1e-7) where cpu says bitwise fails (exit $rc)"
C l_noref layouts "$A" "$SCRATCH/cpuref.json" balance="$B"
verdict l_noref fail "any('no cpu reference' in w for w in d['why'])"
ok $? "layouts: a layout the kit has no cpu reference for fails (exit $rc)"

# ---- nccl (ranks_nccl): the layouts as above, a stopped rank, a planted mismatch ----
N="$SCRATCH/nccl"; mkdir -p "$N"
echo "mindpipe: fatal: [rank 0] waited more than parallel.timeout = 8 s for the data-parallel gradient all-reduce: its peer rank 1 did not take part (dead or hung)" > "$N/stop.log"
echo "nccl-standin: rank 0 (world rank 0), communicator 8d07e3e6a1c22f51 (2 ranks), call #4: #4 ncclAllReduce(count=8, float32, sum) waited more than NCCL_STANDIN_TIMEOUT = 4 s for the peers' matching calls; no matching call from rank(s) 1; rank 1's last call seen: #3 ncclAllReduce(count=8, float32, sum);" > "$N/stop_standin.log"
echo "mindpipe: fatal: [rank 0] waited more than parallel.timeout = 8 s for the device's work: a peer rank is dead or hung" > "$N/stop_unnamed.log"
echo "1 9.2" > "$N/stop.res"; echo "0 21.0" > "$N/stop_ok.res"; echo "1 75.0" > "$N/stop_slow.res"; echo "124 75.0" > "$N/stop_hang.res"
echo "nccl-standin: rank 0 (world rank 0), communicator fda900224106e7d5 (2 ranks), call #3: collectives do not match: this rank's #3 ncclAllReduce(count=1000, float32, sum) meets rank 1's #3 ncclAllReduce(count=1001, float32, sum)" > "$N/plant.log"
echo "[nccl-plant: exit 0]" > "$N/plant_missed.log"
C n_ok nccl "$A" "$SCRATCH/cpuref.json" "$N/stop.log" "$N/stop.res" "$N/plant.log" 1 offload="$B" pp2-mpi="$SCRATCH/near"
verdict n_ok pass "d['stopped_rank']['named'] and d['planted']['refused']"
ok $? "nccl: layouts as on cpu, the stopped rank named by MPI's watchdog, the mismatch refused: passes (exit $rc)"
C n_si nccl "$A" "$SCRATCH/cpuref.json" "$N/stop_standin.log" "$N/stop.res" "$N/plant.log" 0 offload="$B"
verdict n_si pass "d['stopped_rank']['named']"
ok $? "nccl: the stopped rank named by the stand-in's deadline (no matching call from rank(s) 1) passes (exit $rc)"
# nfail TAG STOPLOG STOPRES PLANTLOG PAIR LABEL: the nccl check on one doctored input fails
nfail() {
    C "$1" nccl "$A" "$SCRATCH/cpuref.json" "$N/$2" "$N/$3" "$N/$4" 0 "$5"
    verdict "$1" fail; ok $? "nccl: $6 fails (exit $rc)"
}
nfail n_doc stop.log stop.res plant.log offload="$SCRATCH/near" "a layout further from one rank than on cpu"
nfail n_unnamed stop_unnamed.log stop.res plant.log offload="$B" "an abort that does not name the stopped rank"
nfail n_exit0 stop.log stop_ok.res plant.log offload="$B" "a stopped-rank run that ended well (nothing stopped)"
nfail n_slow stop.log stop_slow.res plant.log offload="$B" "a stopped rank named only after 75 s"
nfail n_hang stop.log stop_hang.res plant.log offload="$B" "a stopped-rank run ended by the part's timeout (a hang)"
nfail n_plant stop.log stop.res plant_missed.log offload="$B" "a planted mismatch that was not refused"
C n_missing nccl "$NO/base" "$NO/ref.json" "$NO/a" "$NO/b" "$NO/c" 0 x="$NO/x"
verdict n_missing fail; ok $? "nccl: missing inputs fail (exit $rc)"

# ---- selftest OUT DIR DRY ----
st() {  # st NAME RC LINE...: a selftest directory
    mkdir -p "$SCRATCH/$1"; echo "$2" > "$SCRATCH/$1/rc"; n=$1; shift 2
    printf '%s\n' "$@" > "$SCRATCH/$n/selftest.log"
}
st st_ok 0 "mindpipe: selftest on CUDA device 0: NVIDIA H100 (sm_90)" \
    "ok   encoder_forward                rel=0.00e+00 (tolerance 1e-06)" \
    "ok   matmul_forward[bf16]           rel=2.10e-03 (tolerance 1e-02)" "mindpipe: selftest: 2 passed, 0 failed"
st st_fail 0 "ok   encoder_forward                rel=0.00e+00 (tolerance 1e-06)" \
    "FAIL attention_forward              rel=3.00e-01 (tolerance 1e-05)" "mindpipe: selftest: 1 passed, 1 failed"
st st_nogpu 1 "mindpipe: error: [rank 0] train.device=cuda: no usable CUDA device on host (cudaGetDeviceCount: no CUDA-capable device is detected); set train.device=cpu for the CPU backend"
st st_dry0 0 "mindpipe: selftest: 0 passed, 0 failed"
st st_empty 0
C st_ok selftest "$SCRATCH/st_ok" 0
verdict st_ok pass "len(d['kernels']) == 2 and d['failed'] == []"
ok $? "selftest: all 'ok' lines and exit 0 pass (exit $rc)"
C st_fail selftest "$SCRATCH/st_fail" 0
verdict st_fail fail "d['failed'] == ['FAIL attention_forward              rel=3.00e-01 (tolerance 1e-05)']"
ok $? "selftest: one 'FAIL' line fails even with exit 0 (exit $rc)"
C st_empty selftest "$SCRATCH/st_empty" 0
verdict st_empty fail
ok $? "selftest: an empty log with exit 0 fails (exit $rc)"
C st_dry selftest "$SCRATCH/st_nogpu" 1
verdict st_dry pass
ok $? "selftest: dry run, exit 1 naming 'no usable CUDA device', passes (exit $rc)"
C st_dry0 selftest "$SCRATCH/st_dry0" 1
verdict st_dry0 fail "'expected exit 1' in d['why']"
ok $? "selftest: dry run with exit 0 fails (exit $rc)"

# ---- finish OUT NAME RC T0 T1 LIMIT (always exits 0: bringup.sh goes on) ----
mkdir -p "$SCRATCH/parts"
cp "$SCRATCH/same.json" "$SCRATCH/parts/fp32.json"; cp "$SCRATCH/c_near.json" "$SCRATCH/parts/bf16.json"
cp "$SCRATCH/st_ok.json" "$SCRATCH/parts/selftest.json"; cp "$SCRATCH/same.json" "$SCRATCH/f_timeout.json"
"$TORCH_PYTHON" "$CHECK" finish "$SCRATCH/f_timeout.json" fp32 124 100 130.5 30 > "$SCRATCH/f_timeout.out" 2>&1; rc=$?
J "$SCRATCH/f_timeout.json" "d['status'] == 'timeout' and d['rc'] == 124 and d['seconds'] == 30.5 and d['timeout_s'] == 30 and 'limit of 30 s' in d['why']" &&
    [ $rc -eq 0 ] && grep -q "part fp32: timeout" "$SCRATCH/f_timeout.out"
ok $? "finish: a pass killed at its limit (rc 124) becomes status timeout (exit $rc)"
"$TORCH_PYTHON" "$CHECK" finish "$SCRATCH/parts/ranks2.json" ranks2 1 100 101 60 > "$SCRATCH/f_none.out" 2>&1; rc=$?
J "$SCRATCH/parts/ranks2.json" "d['status'] == 'error' and d['part'] == 'ranks2' and 'wrote no result (exit 1)' in d['why']" && [ $rc -eq 0 ]
ok $? "finish: a part that wrote no JSON becomes status error (exit $rc)"
cp "$SCRATCH/same.json" "$SCRATCH/f_rc2.json"
"$TORCH_PYTHON" "$CHECK" finish "$SCRATCH/f_rc2.json" fp32 2 100 101 30 > "$SCRATCH/f_rc2.out" 2>&1; rc=$?
J "$SCRATCH/f_rc2.json" "d['status'] == 'error' and 'exited 2' in d['why']" && [ $rc -eq 0 ]
ok $? "finish: a pass whose part exited 2 becomes status error (exit $rc)"

# ---- gpt2 OUT RUN NVML PEAK DRY (dry: no NVML samples asked for) ----
C g2 gpt2 "$SCRATCH/g" "$NO/nvml.json" 0 1
verdict g2 pass "d['steps_timed'] == 19 and d['kernels']['top'] != [] and d['energy']['run']['tokens'] == 5120"
ok $? "gpt2: the run with kernel times and energy.json passes a dry run (exit $rc)"
cp -r "$SCRATCH/g" "$SCRATCH/g1" && rm "$SCRATCH/g1/kernel_times.r0.json" "$SCRATCH/g1/energy.json"
C g gpt2 "$SCRATCH/g1" "$NO/nvml.json" 0 1
verdict g fail "'the run wrote no kernel times' in d['why'] and 'the run wrote no energy.json' in d['why']"
ok $? "gpt2: the same without kernel_times.r0.json and energy.json fails, saying both (exit $rc)"
cp -r "$SCRATCH/g" "$SCRATCH/g_short"
echo "mindpipe: error: [rank 0] CUDA scratch grew in the first step from 67108864 to 80000000 bytes for cu_head_forward: cu_scratch_bound is short of this kernel's request" > "$SCRATCH/g_short.log"
C g_short gpt2 "$SCRATCH/g_short" "$NO/nvml.json" 0 1
verdict g_short fail "any('scratch grew in the first step' in w for w in d['why'])"
ok $? "gpt2: a run whose kernels' scratch grew after the plan (cu_scratch_bound short) fails (exit $rc)"
C g_none gpt2 "$NO" "$NO/nvml.json" 0 1
verdict g_none fail "d['why'].startswith('no step logged')"
ok $? "gpt2: a nonexistent run directory fails (exit $rc)"
cp -r "$SCRATCH/g" "$SCRATCH/g3" && echo '{"from_step": ' > "$SCRATCH/g3/kernel_times.r0.json"
C g3 gpt2 "$SCRATCH/g3" "$NO/nvml.json" 0 1
verdict g3 fail "d['why'].startswith('checker error: JSONDecodeError')"
ok $? "gpt2: a truncated kernel_times.r0.json is a failed part (the catch-all), not a crash (exit $rc)"

C g_var gpt2 "$SCRATCH/g" "$NO/nvml.json" 0 1 "$SCRATCH/g" A=1 "$NO" B=2
verdict g_var fail "[v and v['env'] for v in d['variants']] == ['A=1', None] and d['variant']['env'] == 'A=1' and any('the B=2 run logged no step' in w for w in d['why'])"
ok $? "gpt2: variants (run, switch) pairs: each measured, one that logged no step fails the part naming its switch (exit $rc)"

# ---- every subcommand on inputs that do not exist: a failed part and exit 1, never a traceback ----
C m_env env "$NO" 0; verdict m_env fail; ok $? "env: missing inputs fail (exit $rc)"
C m_selftest selftest "$NO" 0; verdict m_selftest fail; ok $? "selftest: missing inputs fail (exit $rc)"
C m_compare compare fp32 "$NO/a" "$NO/b"; verdict m_compare fail; ok $? "compare: missing inputs fail (exit $rc)"
C m_curve curve "$NO/1" "$NO/2" "$NO/3" "$NO/4" bf16; verdict m_curve fail; ok $? "curve: missing inputs fail (exit $rc)"
C m_layouts layouts "$NO/base" "$NO/ref.json" x="$NO/x"; verdict m_layouts fail; ok $? "layouts: missing inputs fail (exit $rc)"
C m_crossing crossing "$NO/1" "$NO/2" "$NO/3" "$NO/4" cuda; verdict m_crossing fail; ok $? "crossing: missing inputs fail (exit $rc)"
C m_torch torch torch "$NO/t.json" 0; verdict m_torch fail; ok $? "torch: missing inputs fail (exit $rc)"

# ---- report OUT SUMMARY PARTS DRY T0 KIT NAMES... ----
cp "$SCRATCH/g.json" "$SCRATCH/parts/gpt2.json"
rep() {  # rep TAG NAMES...: report.json in TAG.json, the summary in TAG.txt
    r_t=$1; shift
    "$TORCH_PYTHON" "$CHECK" report "$SCRATCH/$r_t.json" "$SCRATCH/$r_t.txt" "$SCRATCH/parts" 1 "$(date +%s)" \
        "$NO/kit.tar.xz" "$@" > "$SCRATCH/$r_t.out" 2>&1; rc=$?
}
rep r_pass selftest fp32 bf16
J "$SCRATCH/r_pass.json" "d['passed'] is True and len(d['parts']) == 3" && [ $rc -eq 0 ] &&
    grep -q "3 parts, 3 passed, 0 skipped, 0 not passed" "$SCRATCH/r_pass.txt"
ok $? "report: all parts passed: exit 0, passed true (exit $rc)"
rep r_fail selftest fp32 bf16 gpt2
J "$SCRATCH/r_fail.json" "d['passed'] is False" && [ $rc -eq 1 ] && grep -q "gpt2 *fail" "$SCRATCH/r_fail.txt"
ok $? "report: one part failed: exit 1, passed false (exit $rc)"
cp "$S/mg_pass.json" "$SCRATCH/parts/llama.json"
rep r_llama selftest fp32 bf16 llama
J "$SCRATCH/r_llama.json" "d['passed'] is True" && [ $rc -eq 0 ] &&
    grep -q "llama *pass .*fp32 loss rel 0, weights rel 0; |low - fp32| 0.0100 per step, seed noise 0.0200" "$SCRATCH/r_llama.txt"
ok $? "report: the llama part's line gives its fp32 and its curve figures (exit $rc)"
rep r_missing selftest fp32 bf16 compile
J "$SCRATCH/r_missing.json" "d['passed'] is False and d['parts'][3]['status'] == 'error'" && [ $rc -eq 1 ]
ok $? "report: a part with no result is an error: exit 1 (exit $rc)"

# ---- the limits' sum is of the GPU-sized limits: a dry run runs its parts under four times them,
# as hang guards only (a loaded CI host), and must not fail the sum for that ----
mkdir -p "$SCRATCH/lim"
lim() {  # lim TAG GPU_LIMIT: two passing parts run under 400 s, standing for GPU_LIMIT each
    for n in a b; do
        cp "$SCRATCH/same.json" "$SCRATCH/lim/$n.json"
        "$TORCH_PYTHON" "$CHECK" finish "$SCRATCH/lim/$n.json" "$n" 0 100 101 400 "$2" > /dev/null 2>&1
    done
    "$TORCH_PYTHON" "$CHECK" report "$SCRATCH/$1.json" "$SCRATCH/$1.txt" "$SCRATCH/lim" 1 "$(date +%s)" \
        "$NO/kit.tar.xz" a b > "$SCRATCH/$1.out" 2>&1; rc=$?
}
lim lim_ok 100
J "$SCRATCH/lim_ok.json" "d['passed'] is True and d['timeouts_sum_s'] == 200 and d['parts'][0]['timeout_s'] == 400" && [ $rc -eq 0 ]
ok $? "report: parts run under scaled limits (2 x 400 s) standing for 2 x 100 s pass the sum check (exit $rc)"
lim lim_over 300
J "$SCRATCH/lim_over.json" "d['passed'] is False and d['timeouts_sum_s'] == 600" && [ $rc -eq 1 ] &&
    grep -q "timeouts sum to 600 s" "$SCRATCH/lim_over.txt"
ok $? "report: GPU-sized limits summing to 600 s (> 525) fail, whatever the dry run ran under (exit $rc)"

done_testing
