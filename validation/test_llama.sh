#!/bin/sh
# The llama family (model.arch = llama, issue 47; ARCHITECTURE.md §3 "Model families"): grouped-query
# attention, rotary positions, RMSNorm and SwiGLU through every pipeline schedule and memory policy
# bitwise the one-rank run, data and tensor parallelism within the layout tolerance, an untied head, a
# shape per block and a supernet of llama candidates,
# resume bitwise at another layout, the loss and every gradient against a PyTorch LlamaForCausalLM
# written from Hugging Face's definition (float32 and float64), ten AdamW steps against it, greedy
# generation against its full recomputation, and the refusals of shapes that do not divide.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
mp_layout_helpers "$MP_SRCDIR/validation/decks/train.ini"
# 4 layers of 4 heads sharing 2 kv heads, SwiGLU of 48, 4 micro-batches of 2 (the V schedules need 2pp)
LL="--set model.arch=llama --set model.mlp_ratio=1 --set model.kv_heads=2 --set model.ffn_dim=48 --set model.rope_theta=500
    --set model.layers=4 --set train.micro_batch=2 --set train.threads=1"

# shellcheck disable=SC2086
run 1 ref $LL; ok $? "llama on one rank"
grep -q '"step":20,' "$SCRATCH/ref/metrics.jsonl" 2>/dev/null
ok $? "llama: 20 steps logged"
layouts_cmp --bitwise ref "$LL" "2 pp2 --set parallel.pp=2" \
    "4 pp4 --set parallel.pp=4" \
    "2 il2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2" \
    "2 zb1p --set parallel.pp=2 --set parallel.schedule=zb1p" \
    "2 zbv --set parallel.pp=2 --set parallel.schedule=zbv" \
    "2 dpv --set parallel.pp=2 --set parallel.schedule=dualpipev" \
    "1 rc --set memory.policy=recompute" \
    "1 sel --set memory.policy=selective" \
    "2 off --set parallel.pp=2 --set memory.policy=offload" \
    "2 mix --set parallel.pp=2 --set memory.layers=o,r,s,k" \
    "2 bal --set parallel.pp=2 --set memory.policy=balance" \
    "1 emu --set train.device=emu"
# PipeDream-2BW's update rule: its pipeline against its one-rank run
# shellcheck disable=SC2086
run 1 ref2bw $LL --set parallel.schedule=2bw; ok $? "2bw on one rank"
layouts_cmp --bitwise ref2bw "$LL --set parallel.schedule=2bw" "2 pp2bw --set parallel.pp=2"
layouts_cmp "" ref "$LL" "2 dp2 --set parallel.dp=2" \
    "2 zero --set parallel.dp=2 --set parallel.zero=1" \
    "2 tp2 --set parallel.tp=2" \
    "8 dtp --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2"

# The untied head: lm_head.w on the last stage, pipelines bitwise, a loss of its own.
# shellcheck disable=SC2086
run 1 un $LL --set model.tie_embeddings=false; ok $? "untied head on one rank"
layouts_cmp --bitwise un "$LL --set model.tie_embeddings=false" "2 unpp2 --set parallel.pp=2" \
    "2 unzbv --set parallel.pp=2 --set parallel.schedule=zbv"
layouts_cmp "" un "$LL --set model.tie_embeddings=false" "4 untp --set parallel.pp=2 --set parallel.tp=2"
"$MINDPIPE" inspect "$SCRATCH/un/ckpt/step_00000020.h5" > "$SCRATCH/un.inspect" 2>&1 &&
    grep -q "/model/lm_head.w (256, 32)" "$SCRATCH/un.inspect" && grep -q "/model/h.0.attn.qkv.w (64, 32)" "$SCRATCH/un.inspect" &&
    grep -q "/model/h.0.mlp.fc.w (96, 32)" "$SCRATCH/un.inspect" && ! grep -q "/model/wpe\|/model/lnf.b\|qkv.b" "$SCRATCH/un.inspect"
ok $? "inspect: lm_head.w (256, 32), qkv (32 + 2·16, 32), gate|up (96, 32), no wpe, lnf.b or biases"

# Resume at another layout, bitwise; another family or shape refused naming the key.
mkdir -p "$SCRATCH/res/ckpt" && cp "$SCRATCH/ref/ckpt/step_00000010.h5" "$SCRATCH/res/ckpt/"
# shellcheck disable=SC2086
run 2 res $LL --set parallel.pp=2 --resume auto; ok $? "step 10 resumed at pp=2"
resumed_from "resumed at pp=2" res 10
compare "resumed = one rank" "$SCRATCH/ref" "$SCRATCH/res" --bitwise --step 20
# shellcheck disable=SC2086
refused "resuming llama as gpt2" "model.arch" 1 --set model.layers=4 --resume "$SCRATCH/ref/ckpt/step_00000020.h5"
# shellcheck disable=SC2086
refused "resuming with other kv heads" "model.kv_heads" 1 $LL --set model.kv_heads=4 \
    --resume "$SCRATCH/ref/ckpt/step_00000020.h5"
# shellcheck disable=SC2086
refused "kv_heads not dividing heads" "model.kv_heads" 1 $LL --set model.kv_heads=3
# shellcheck disable=SC2086
refused "kv heads not divisible by tp" "parallel.tp" 4 $LL --set model.kv_heads=1 --set parallel.tp=4 --set model.heads=4

# A shape per block of the family (h{H}m{R}: H heads in whole key/value groups, SwiGLU of R × ffn_dim)
# and a supernet of llama candidates: pipelines bitwise, the math against PyTorch below.
LB="--set model.blocks=h4m1,h2m2,skip,h4m1"
# shellcheck disable=SC2086
run 1 bref $LL $LB; ok $? "llama blocks h4m1,h2m2,skip,h4m1 on one rank"
layouts_cmp --bitwise bref "$LL $LB" "2 bpp2 --set parallel.pp=2" "2 bzb --set parallel.pp=2 --set parallel.schedule=zb1p"
"$MINDPIPE" inspect "$SCRATCH/bref/ckpt/step_00000020.h5" > "$SCRATCH/b.inspect" 2>&1 &&
    grep -q "/model/h.1.attn.qkv.w (32, 32)" "$SCRATCH/b.inspect" && grep -q "/model/h.1.mlp.fc.w (192, 32)" "$SCRATCH/b.inspect" &&
    ! grep -q "/model/h.2\." "$SCRATCH/b.inspect"
ok $? "inspect: h.1's 2 heads and 1 kv head (qkv 16 + 2·8 rows), its SwiGLU of 2 × 48 (gate|up 192 rows), no tensor for skip"
SNL="--set supernet.enabled=1 --set supernet.candidates=h4m1,h2m2,skip --set supernet.window=2"
# shellcheck disable=SC2086
run 1 sref $LL $SNL; ok $? "a llama supernet on one rank"
layouts_cmp --bitwise sref "$LL $SNL" "2 spp2 --set parallel.pp=2"

# The math against PyTorch (torch_ref.py's llama_loss, written from Hugging Face's modeling_llama).
ref="$MP_SRCDIR/validation/torch_ref.py"
torch_check() {  # torch_check LABEL ARGS...
    label=$1; shift
    "$TORCH_PYTHON" "$ref" "$@" > "$SCRATCH/ref.out" 2>&1
    tap_checker "$label" torch_ref.py $? "$SCRATCH/ref.out"
}
rdeck="$MP_SRCDIR/validation/decks/ref.ini"
for v in gqa mqa untied blocks; do
    case $v in
        gqa) sets="--set model.kv_heads=2" ;;
        mqa) sets="--set model.kv_heads=1 --set model.seq_len=13" ;;
        untied) sets="--set model.kv_heads=2 --set model.tie_embeddings=false" ;;
        blocks) sets="--set model.kv_heads=2 --set model.layers=4 --set model.blocks=h4m1,h2m2,skip,h2m1" ;;
    esac
    # shellcheck disable=SC2086
    "$MINDPIPE" debug-grads -c "$rdeck" --set data.path="$data" --set model.arch=llama --set model.mlp_ratio=1 --set model.ffn_dim=40 \
        --set model.rope_theta=1000 $sets --out "$SCRATCH/g_$v.h5" > "$SCRATCH/dg.out" 2>&1
    ok $? "$v: mindpipe debug-grads"
    torch_check "$v: the loss and every gradient" grads "$SCRATCH/g_$v.h5" --data "$data"
    # shellcheck disable=SC2086
    "$MINDPIPE" train -c "$rdeck" --set data.path="$data" --set model.arch=llama --set model.mlp_ratio=1 --set model.ffn_dim=40 \
        --set model.rope_theta=1000 $sets --quiet --out "$SCRATCH/tr_$v" > "$SCRATCH/tr.out" 2>&1
    ok $? "$v: mindpipe train 10 steps"
    # against a float64 reference: a float32 one adds rounding of its own that AdamW amplifies where
    # gradients are small (its k rows drift 2e-4 from float64's in 10 steps, MindPipe's 3e-5)
    torch_check "$v: ten AdamW steps" train "$SCRATCH/g_$v.h5" --data "$data" --metrics "$SCRATCH/tr_$v/metrics.jsonl" \
        --final "$SCRATCH/tr_$v/ckpt/step_00000010.h5" --dtype float64
done
# The supernet against PyTorch's sequential supernet training (the subnet's candidates of the family)
SR="--set model.arch=llama --set model.mlp_ratio=1 --set model.ffn_dim=40 --set model.kv_heads=2 --set model.layers=4
    --set train.steps=10 --set supernet.enabled=1 --set supernet.candidates=h4m1,h2m2,skip --set supernet.window=2"
# shellcheck disable=SC2086
"$MINDPIPE" debug-grads -c "$rdeck" --set data.path="$data" $SR --out "$SCRATCH/g_sn.h5" > "$SCRATCH/dg.out" 2>&1
ok $? "supernet: mindpipe debug-grads of subnet 0"
torch_check "supernet: subnet 0's loss and gradients" grads "$SCRATCH/g_sn.h5" --data "$data"
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$rdeck" --set data.path="$data" $SR --quiet --out "$SCRATCH/tr_sn" > "$SCRATCH/tr.out" 2>&1
ok $? "supernet: mindpipe train 10 subnets"
torch_check "supernet: PyTorch's sequential supernet training" supernet "$SCRATCH/g_sn.h5" --data "$data" \
    --metrics "$SCRATCH/tr_sn/metrics.jsonl" --final "$SCRATCH/tr_sn/ckpt/step_00000010.h5"

# Greedy generation with the KV cache (kv heads only) against PyTorch's full recomputation.
# shellcheck disable=SC2086
"$MINDPIPE" generate -c "$layout_deck" $LL --ckpt "$SCRATCH/ref/ckpt/step_00000020.h5" --prompt "And God said" \
    --max-tokens 20 > "$SCRATCH/gen.out" 2> "$SCRATCH/gen.err"
ok $? "generate from the llama checkpoint"
torch_check "generate: greedy tokens" generate "$SCRATCH/ref/ckpt/step_00000020.h5" --prompt "And God said" \
    --max-tokens 20 --got "$SCRATCH/gen.out"
done_testing
