#!/bin/sh
# Memory by need (issue 44, item 5) without a GPU: train.attention=fused on emu runs the fused
# attention's CPU emulation (kernels/attention_flash_cpu.c) and carves only what it reads — per layer
# the log-sum-exps and the output's copy instead of the (B,NH,T,T) probabilities, and D_i instead of
# their gradient — as cuda's bf16 path does. Checked: the plan drops exactly those bytes; every
# run's measured peak equals its plan; training stays within the layout tolerance of cpu's (the
# probabilities are recomputed from the log-sum-exps, so not bitwise); selective and recompute
# (which re-run the fused forward) and offload at pp = 2 give keep-fused's bits; emu without it is
# still cpu's bit for bit; Llama's multi-head block takes it too, its grouped-query block does not;
# cpu refuses it. Head size 16 (heads = 2, dim = 32): one the fused kernels take.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py # compare_runs.py reads checkpoints
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
H="--set model.heads=2 --set train.threads=1"
F="--set train.device=emu --set train.attention=fused"

# shellcheck disable=SC2086
run 1 cpu $H; ok $? "cpu, heads=2 (the reference)"
# shellcheck disable=SC2086
run 1 emu $H --set train.device=emu; ok $? "emu, attention=auto"
compare "emu auto = cpu" "$SCRATCH/cpu" "$SCRATCH/emu" --bitwise
# shellcheck disable=SC2086
run 1 fused $H $F; ok $? "emu, attention=fused"
compare "emu fused ~ cpu (layout tolerance)" "$SCRATCH/cpu" "$SCRATCH/fused"
layouts_cmp --bitwise fused "$H $F" "1 fsel --set memory.policy=selective" "1 frc --set memory.policy=recompute" \
    "2 fpp2 --set parallel.pp=2 --set memory.policy=offload"

# Llama's block: multi-head (kv_heads = heads) takes the fused path as GPT-2's does; grouped-query
# (kv_heads < heads) keeps the probabilities' path (be_attention_fused), so there fused is auto's
# bits and bytes.
LL="--set model.arch=llama --set model.mlp_ratio=1 --set model.ffn_dim=48 --set model.rope_theta=500 $H"
# shellcheck disable=SC2086
run 1 lcpu $LL --set model.kv_heads=2; ok $? "llama, kv_heads = heads = 2, cpu"
# shellcheck disable=SC2086
run 1 lfused $LL --set model.kv_heads=2 $F; ok $? "llama, kv_heads = heads = 2, emu fused"
compare "llama emu fused ~ cpu (layout tolerance)" "$SCRATCH/lcpu" "$SCRATCH/lfused"
# shellcheck disable=SC2086
run 1 gauto $LL --set model.kv_heads=1 --set train.device=emu; ok $? "llama grouped-query (kv_heads 1 of 2), emu auto"
# shellcheck disable=SC2086
run 1 gfused $LL --set model.kv_heads=1 $F; ok $? "llama grouped-query, emu fused"
compare "grouped-query: fused = auto" "$SCRATCH/gauto" "$SCRATCH/gfused" --bitwise
"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, sys
S = sys.argv[1]
plan = lambda run: json.loads(open('%s/%s/metrics.jsonl' % (S, run)).readline())['planned_mem_bytes'][0]
print('# planned bytes: llama cpu %d, emu fused %d; grouped-query emu auto %d, fused %d' % (
    plan('lcpu'), plan('lfused'), plan('gauto'), plan('gfused')))
sys.exit(0 if plan('lfused') < plan('lcpu') and plan('gfused') == plan('gauto') else 1)
EOF
ok $? "plan: llama multi-head fused carves less; grouped-query fused carves what auto does"

# The plan's bytes: emu auto minus emu fused, one rank (one micro-batch's stash at a time), B = 4,
# T = 32, C = 32, NH = 2, L = 2, in floats rounded up to 16 as the model carves them.
"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, sys
S = sys.argv[1]
first = lambda run: json.loads(open('%s/%s/metrics.jsonl' % (S, run)).readline())
a, f = first('emu')['planned_mem_bytes'][0], first('fused')['planned_mem_bytes'][0]
B, T, C, NH, L = 4, 32, 32, 2, 2
r16 = lambda n: (n + 15) // 16 * 16
probs = B * NH * T * T
lse = (B * NH * T + 63) // 64 * 64                     # mp_att_fused_o_offset
fused = r16(lse + B * T * C)                           # no bf16 planes at this shape (too little room)
want = 4 * (L * (probs - fused) + (probs - r16(B * NH * T)))
print('# planned bytes, stage 0: emu auto %d, emu fused %d: %d less (want %d: %d layers of (B,NH,T,T) att -> %d floats, datt -> %d)' % (
    a, f, a - f, want, L, fused, r16(B * NH * T)))
sys.exit(0 if a - f == want else 1)
EOF
ok $? "plan: emu fused carves the log-sum-exps and the output's copy instead of each (B,NH,T,T)"

"$TORCH_PYTHON" - "$SCRATCH" <<'EOF'
import json, sys, os
bad, n = [], 0
for run in ('cpu', 'emu', 'fused', 'fsel', 'frc', 'fpp2', 'lcpu', 'lfused', 'gauto', 'gfused'):
    for line in open(os.path.join(sys.argv[1], run, 'metrics.jsonl')):
        r = json.loads(line)
        n += 1
        if r['peak_mem_bytes'] != r['planned_mem_bytes']: bad.append((run, r['step'], r['peak_mem_bytes'], r['planned_mem_bytes']))
print('# %d metrics lines checked: %d differ' % (n, len(bad)))
for b in bad[:5]: print('# %s step %d measured %s planned %s' % b)
sys.exit(1 if bad or n < 100 else 0)
EOF
ok $? "every run's measured peak per stage equals its plan (fused ones included)"

# shellcheck disable=SC2086
refused "fused on cpu" "train.device=cpu runs the probabilities' path" 1 $H --set train.attention=fused
done_testing
