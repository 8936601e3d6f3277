#!/bin/sh
# Hugging Face's Llama out and in (src/hf/hf_llama.h, issue 48): a tiny llama (train.ini with
# model.arch=llama, kv_heads 2, ffn_dim 48) exported with `export --format hf` is a LlamaForCausalLM
# that validation/hf_llama_check.py (its own safetensors parser and a float64 forward written from
# modeling_llama.py) runs to MindPipe's block outputs and logits within 1e-5 and to `generate`'s greedy
# continuation byte for byte (a perturbed weight and another step's continuation fail those checks);
# every exported tensor is the checkpoint's split by rows, bitwise; `train --init-from hf:DIR` with
# train.steps=0 gives back the checkpoint's weights bitwise (on 1 rank, at tp=2 and at pp=2), a bf16
# export the weights rounded to bfloat16, an F16 file the weights rounded to half; an untied head
# (lm_head.weight) goes out and back the same way; structural faults and a config.json that disagrees
# with the deck are refused naming the file and the key (and both values).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py "$TORCH_PYTHON" # the checker reads checkpoints and dumps with h5py and numpy
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
chk="$MP_SRCDIR/validation/hf_llama_check.py"
py=$TORCH_PYTHON
llama="--set model.arch=llama --set model.mlp_ratio=1 --set model.kv_heads=2 --set model.ffn_dim=48"
base="-c $deck --set data.path=$data --set train.warmup=0 --set train.threads=1 $llama"

# 200 steps at a larger rate: greedy decoding then says more than spaces. The dump of step 200 is the
# forward of the 201st step, on the weights of step 200's checkpoint: the run goes on to 300
# shellcheck disable=SC2086
"$MINDPIPE" train $base --quiet --set train.steps=300 --set checkpoint.every=100 --set train.lr=1e-2 \
    --set train.min_lr=1e-3 --set train.eval_every=0 --set debug.dump_activations=200 --out "$SCRATCH/run" \
    > "$SCRATCH/out" 2>&1
ok $? "train a llama 300 steps: checkpoints of steps 100 and 200, activations of step 200"
ck="$SCRATCH/run/ckpt/step_00000200.h5"
hf="$SCRATCH/hf32"
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $base --ckpt "$ck" --out "$hf" > "$SCRATCH/out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '"architectures": \["LlamaForCausalLM"\]' "$hf/config.json" &&
    grep -q '"num_key_value_heads": 2,' "$hf/config.json" && grep -q '"intermediate_size": 48,' "$hf/config.json" &&
    grep -q '"tie_word_embeddings": true,' "$hf/config.json" && grep -q '"torch_dtype": "float32"' "$hf/config.json" &&
    grep -q '"rope_theta": 10000.0,' "$hf/config.json" && grep -q "(LlamaForCausalLM)" "$SCRATCH/out"
ok $? "export --format hf of a llama: config.json of a LlamaForCausalLM, 2 kv heads, tied (exit $rc)"

"$py" "$chk" forward "$hf" --dump "$SCRATCH/run/activations_step_00000200.h5" --ckpt "$ck" > "$SCRATCH/chk.out" 2>&1
tap_checker "HF Llama forward" hf_llama_check.py $? "$SCRATCH/chk.out"
# --transformers (the GPU bring-up's hf part, where transformers is installed): Debian's python here
# has none, so the check must fail saying so, never pass without having compared
if ! "$py" -c "import transformers" 2>/dev/null; then
    ! "$py" "$chk" forward "$hf" --dump "$SCRATCH/run/activations_step_00000200.h5" --ckpt "$ck" --transformers \
        > "$SCRATCH/chk.out" 2>&1 && grep -q "^FAIL transformers: LlamaForCausalLM cannot be imported" "$SCRATCH/chk.out"
    ok $? "forward --transformers without transformers fails, naming the import"
else
    "$py" "$chk" forward "$hf" --dump "$SCRATCH/run/activations_step_00000200.h5" --ckpt "$ck" --transformers \
        > "$SCRATCH/chk.out" 2>&1 && grep -q "^PASS transformers: LlamaForCausalLM.from_pretrained's logits" "$SCRATCH/chk.out"
    tap_checker "transformers' LlamaForCausalLM.from_pretrained" hf_llama_check.py $? "$SCRATCH/chk.out"
fi
"$py" "$chk" mutate "$hf" "$SCRATCH/m_perturb" perturb &&
    ! "$py" "$chk" forward "$SCRATCH/m_perturb" --dump "$SCRATCH/run/activations_step_00000200.h5" --ckpt "$ck" \
        > "$SCRATCH/chk.out" 2>&1 && grep -q '^FAIL logits' "$SCRATCH/chk.out"
ok $? "the forward check fails on one weight perturbed by 1e-2"
"$py" "$chk" weights "$hf" --ckpt "$ck" > "$SCRATCH/chk.out" 2>&1
tap_checker "fp32 export" hf_llama_check.py $? "$SCRATCH/chk.out"

prompt="And God said"
# shellcheck disable=SC2086
"$MINDPIPE" generate $base --ckpt "$ck" --prompt "$prompt" --max-tokens 16 --temperature 0 > "$SCRATCH/gen200" \
    2> "$SCRATCH/out"
ok $? "generate greedily 16 bytes from step 200: '$(cat "$SCRATCH/gen200")'"
"$py" "$chk" greedy "$hf" --prompt "$prompt" --max-tokens 16 --got "$SCRATCH/gen200" > "$SCRATCH/chk.out" 2>&1
tap_checker "greedy" hf_llama_check.py $? "$SCRATCH/chk.out"
# shellcheck disable=SC2086
"$MINDPIPE" generate $base --ckpt "$SCRATCH/run/ckpt/step_00000100.h5" --prompt "$prompt" --max-tokens 16 \
    --temperature 0 > "$SCRATCH/gen100" 2> "$SCRATCH/out" &&
    ! "$py" "$chk" greedy "$hf" --prompt "$prompt" --max-tokens 16 --got "$SCRATCH/gen100" > "$SCRATCH/chk.out" 2>&1
ok $? "the greedy check fails on step 100's continuation ('$(cat "$SCRATCH/gen100")')"

# import(export(x)) is x, bitwise, whatever the layout
for lay in "1 one" "2 tp2 --set parallel.tp=2" "2 pp2 --set parallel.pp=2"; do
    # shellcheck disable=SC2086
    set -- $lay
    n=$1; name=$2; shift 2
    # shellcheck disable=SC2086
    ${MPIEXEC:-mpiexec} -n "$n" "$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$hf" \
        --out "$SCRATCH/imp_$name" "$@" > "$SCRATCH/out" 2>&1
    ok $? "$name: train --init-from hf:DIR (fp32) with train.steps=0"
    "$py" "$chk" same "$ck" "$SCRATCH/imp_$name/ckpt/step_00000000.h5" > "$SCRATCH/chk.out" 2>&1
    tap_checker "$name import" hf_llama_check.py $? "$SCRATCH/chk.out"
done

# bf16 out and in: the weights rounded to bfloat16 (the rounding computed by the checker)
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $base --dtype bf16 --ckpt "$ck" --out "$SCRATCH/hf16" > "$SCRATCH/out" 2>&1 &&
    grep -q '"torch_dtype": "bfloat16"' "$SCRATCH/hf16/config.json"
ok $? "export --format hf --dtype bf16: torch_dtype bfloat16"
"$py" "$chk" weights "$SCRATCH/hf16" --ckpt "$ck" --bf16 > "$SCRATCH/chk.out" 2>&1
tap_checker "bf16 export" hf_llama_check.py $? "$SCRATCH/chk.out"
! "$py" "$chk" weights "$SCRATCH/hf16" --ckpt "$ck" > "$SCRATCH/chk.out" 2>&1
ok $? "the export check fails on the bf16 export taken for fp32"
# shellcheck disable=SC2086
"$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$SCRATCH/hf16" --out "$SCRATCH/imp16" \
    > "$SCRATCH/out" 2>&1 && "$py" "$chk" same "$ck" "$SCRATCH/imp16/ckpt/step_00000000.h5" --round bf16 \
    > "$SCRATCH/chk.out" 2>&1
tap_checker "bf16 import" hf_llama_check.py $? "$SCRATCH/chk.out"
! "$py" "$chk" same "$ck" "$SCRATCH/imp16/ckpt/step_00000000.h5" > "$SCRATCH/chk.out" 2>&1
ok $? "the import check fails on the bf16 import compared without rounding"
# shellcheck disable=SC2086
"$py" "$chk" mutate "$hf" "$SCRATCH/m_f16" f16 &&
    "$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$SCRATCH/m_f16" --out "$SCRATCH/imp_f16" \
        > "$SCRATCH/out" 2>&1 && "$py" "$chk" same "$ck" "$SCRATCH/imp_f16/ckpt/step_00000000.h5" --round f16 \
        > "$SCRATCH/chk.out" 2>&1
tap_checker "F16 import" hf_llama_check.py $? "$SCRATCH/chk.out"
# the element types' corners: F16 and BF16 subnormals, -0 and largest values in one file with F32
# tensors, decoded by numpy; F32 weights halfway between two bfloat16s (and either side) exported as
# bf16 against the checker's rounding to nearest even
# shellcheck disable=SC2086
"$py" "$chk" mutate "$hf" "$SCRATCH/m_special" special &&
    "$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$SCRATCH/m_special" \
        --out "$SCRATCH/imp_special" > "$SCRATCH/out" 2>&1 &&
    "$py" "$chk" imported "$SCRATCH/m_special" "$SCRATCH/imp_special/ckpt/step_00000000.h5" > "$SCRATCH/chk.out" 2>&1
tap_checker "F16/BF16 corners" hf_llama_check.py $? "$SCRATCH/chk.out"
! "$py" "$chk" imported "$hf" "$SCRATCH/imp_special/ckpt/step_00000000.h5" > "$SCRATCH/chk.out" 2>&1
ok $? "the decoding check fails against the unchanged export"
# shellcheck disable=SC2086
"$py" "$chk" mutate "$hf" "$SCRATCH/m_ties" ties &&
    "$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$SCRATCH/m_ties" --out "$SCRATCH/imp_ties" \
        > "$SCRATCH/out" 2>&1 &&
    "$MINDPIPE" export --format hf $base --dtype bf16 --ckpt "$SCRATCH/imp_ties/ckpt/step_00000000.h5" \
        --out "$SCRATCH/hf_ties" > "$SCRATCH/out" 2>&1 &&
    "$py" "$chk" weights "$SCRATCH/hf_ties" --ckpt "$SCRATCH/imp_ties/ckpt/step_00000000.h5" --bf16 \
        > "$SCRATCH/chk.out" 2>&1
tap_checker "bf16 ties" hf_llama_check.py $? "$SCRATCH/chk.out"
# shellcheck disable=SC2086
"$py" "$chk" mutate "$hf" "$SCRATCH/m_huge" huge &&
    "$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$SCRATCH/m_huge" --out "$SCRATCH/imp_huge" \
        > "$SCRATCH/out" 2>&1 &&
    ! "$MINDPIPE" export --format hf $base --dtype bf16 --ckpt "$SCRATCH/imp_huge/ckpt/step_00000000.h5" \
        --out "$SCRATCH/hf_huge" > "$SCRATCH/out" 2>&1 &&
    grep -q "tensor model.embed_tokens.weight: element 3 is 3.4e+38, which bfloat16 cannot hold" "$SCRATCH/out" &&
    [ ! -e "$SCRATCH/hf_huge/model.safetensors" ]
ok $? "a weight of 3.4e38 (an F32 import) refused by the bf16 export naming tensor and element, no file written"
# shellcheck disable=SC2086
"$py" "$chk" mutate "$hf" "$SCRATCH/m_headsame" headsame &&
    "$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$SCRATCH/m_headsame" \
        --out "$SCRATCH/imp_headsame" > "$SCRATCH/out" 2>&1 &&
    "$py" "$chk" same "$ck" "$SCRATCH/imp_headsame/ckpt/step_00000000.h5" > "$SCRATCH/chk.out" 2>&1
tap_checker "a tied file with lm_head.weight equal to the embedding" hf_llama_check.py $? "$SCRATCH/chk.out"

# shards: 30 kB each at most (the 32 kB embedding alone in its own), as save_pretrained's max_shard_size
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $base --max-shard-size 30KB --ckpt "$ck" --out "$SCRATCH/hfsh" > "$SCRATCH/out" 2>&1 &&
    grep -q "model.safetensors.index.json and its shards" "$SCRATCH/out"
ok $? "export --format hf --max-shard-size 30KB: an index and its shards"
"$py" "$chk" shards "$SCRATCH/hfsh" "$hf" --max 30000 > "$SCRATCH/chk.out" 2>&1
tap_checker "shards" hf_llama_check.py $? "$SCRATCH/chk.out"
# shellcheck disable=SC2086
"$MINDPIPE" train $base --quiet --set train.steps=0 --init-from "hf:$SCRATCH/hfsh" --out "$SCRATCH/impsh" \
    > "$SCRATCH/out" 2>&1 && "$py" "$chk" same "$ck" "$SCRATCH/impsh/ckpt/step_00000000.h5" > "$SCRATCH/chk.out" 2>&1
tap_checker "sharded import" hf_llama_check.py $? "$SCRATCH/chk.out"
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $base --ckpt "$ck" --out "$SCRATCH/hfsh" > "$SCRATCH/out" 2>&1 &&
    [ -s "$SCRATCH/hfsh/model.safetensors" ] && [ ! -e "$SCRATCH/hfsh/model.safetensors.index.json" ] &&
    cmp -s "$SCRATCH/hfsh/model.safetensors" "$hf/model.safetensors"
ok $? "a single-file export into the sharded export's directory removes its index"

# an untied head: lm_head.weight out and back
ubase="$base --set model.tie_embeddings=false"
# shellcheck disable=SC2086
"$MINDPIPE" train $ubase --quiet --set train.steps=6 --set checkpoint.every=2 --set debug.dump_activations=4 \
    --out "$SCRATCH/urun" > "$SCRATCH/out" 2>&1 &&
    "$MINDPIPE" export --format hf $ubase --ckpt "$SCRATCH/urun/ckpt/step_00000004.h5" --out "$SCRATCH/hfu" \
        > "$SCRATCH/out" 2>&1 && grep -q '"tie_word_embeddings": false,' "$SCRATCH/hfu/config.json"
ok $? "untied: train 6 steps, export step 4, tie_word_embeddings false"
uck="$SCRATCH/urun/ckpt/step_00000004.h5"
"$py" "$chk" forward "$SCRATCH/hfu" --dump "$SCRATCH/urun/activations_step_00000004.h5" --ckpt "$uck" \
    > "$SCRATCH/chk.out" 2>&1
tap_checker "untied forward" hf_llama_check.py $? "$SCRATCH/chk.out"
"$py" "$chk" weights "$SCRATCH/hfu" --ckpt "$uck" > "$SCRATCH/chk.out" 2>&1 && grep -q "lm_head.weight" "$SCRATCH/hfu/model.safetensors"
tap_checker "untied export (with lm_head.weight)" hf_llama_check.py $? "$SCRATCH/chk.out"
# shellcheck disable=SC2086
"$MINDPIPE" train $ubase --quiet --set train.steps=0 --init-from "hf:$SCRATCH/hfu" --out "$SCRATCH/impu" \
    > "$SCRATCH/out" 2>&1 && "$py" "$chk" same "$uck" "$SCRATCH/impu/ckpt/step_00000000.h5" > "$SCRATCH/chk.out" 2>&1
tap_checker "untied import" hf_llama_check.py $? "$SCRATCH/chk.out"

# refusals, naming the file and the key
refused() {  # refused LABEL PATTERN [ARGS...]: train --init-from fails (exit 1) with PATTERN in its message
    label=$1 pat=$2; shift 2
    rm -rf "$SCRATCH/bad"
    # shellcheck disable=SC2086
    "$MINDPIPE" train $base --quiet --set train.steps=0 --out "$SCRATCH/bad" "$@" > "$SCRATCH/out" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q -- "$pat" "$SCRATCH/out" && [ ! -e "$SCRATCH/bad/ckpt/step_00000000.h5" ]
    ok $? "$label refused (exit $rc): $(grep -m1 -o 'error: .*' "$SCRATCH/out" | cut -c1-160)"
}
for k in truncate missing shape overlap hdrlen dtype dup headdiff; do
    "$py" "$chk" mutate "$hf" "$SCRATCH/m_$k" "$k" || echo "# mutate $k failed"
done
f="model.safetensors"
refused "a truncated file" "m_truncate/$f: key model.norm.weight: .*past the file" --init-from "hf:$SCRATCH/m_truncate"
refused "a missing tensor" "m_missing/$f: key model.layers.1.mlp.up_proj.weight is missing (MindPipe's h.1.mlp.fc.w)" \
    --init-from "hf:$SCRATCH/m_missing"
refused "a shape the config disagrees with" "m_shape/$f: key model.layers.0.self_attn.k_proj.weight: shape (15, 32).*needs (16, 32)" \
    --init-from "hf:$SCRATCH/m_shape"
refused "overlapping offsets" "m_overlap/$f: keys model.layers.0.self_attn.k_proj.weight and model.layers.0.self_attn.v_proj.weight overlap" \
    --init-from "hf:$SCRATCH/m_overlap"
refused "a header length past the file" "m_hdrlen/$f: header length" --init-from "hf:$SCRATCH/m_hdrlen"
refused "a dtype not F32, BF16 or F16" "m_dtype/$f: key model.norm.weight: dtype I32" --init-from "hf:$SCRATCH/m_dtype"
refused "a tensor twice in the header" "m_dup/$f: key model.norm.weight appears twice" --init-from "hf:$SCRATCH/m_dup"
refused "a tied model's lm_head.weight unlike the embedding" \
    "m_headdiff/$f: key lm_head.weight differs from model.embed_tokens.weight" --init-from "hf:$SCRATCH/m_headdiff"
c="hf32/config.json"
refused "num_key_value_heads against a deck with kv_heads 4" \
    "$c: key num_key_value_heads is 2, the deck's model.kv_heads is 4" --init-from "hf:$hf" --set model.kv_heads=4
refused "intermediate_size against a deck with ffn_dim 64" "$c: key intermediate_size is 48, the deck's model.ffn_dim is 64" \
    --init-from "hf:$hf" --set model.ffn_dim=64
refused "rope_theta against a deck with 500000" "$c: key rope_theta is 10000, the deck's model.rope_theta is 500000" \
    --init-from "hf:$hf" --set model.rope_theta=500000
refused "rms_norm_eps against a deck with 1e-6" "$c: key rms_norm_eps is 1e-05, the deck's model.norm_eps is 1e-06" \
    --init-from "hf:$hf" --set model.norm_eps=1e-6
refused "a tied export into an untied deck" "$c: key tie_word_embeddings is true, the deck's model.tie_embeddings is false" \
    --init-from "hf:$hf" --set model.tie_embeddings=false
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $base --max-shard-size 30KB --ckpt "$ck" --out "$SCRATCH/hfsh2" > "$SCRATCH/out" 2>&1
for k in noshard twice misplaced both; do
    "$py" "$chk" mutate-index "$SCRATCH/hfsh2" "$SCRATCH/x_$k" "$k" > "$SCRATCH/chk.out" 2>&1 || echo "# mutate-index $k failed"
done
i="model.safetensors.index.json"
refused "an index naming a missing shard" \
    "x_noshard/$i: tensor model.layers.0.input_layernorm.weight is in shard model-00002-of-00004.safetensors, and .*does not exist" \
    --init-from "hf:$SCRATCH/x_noshard"
refused "a tensor in two shards" \
    "x_twice/model-00002-of-00004.safetensors: key model.embed_tokens.weight is here, and .*x_twice/$i maps it to model-00001-of-00004" \
    --init-from "hf:$SCRATCH/x_twice"
refused "an index mapping a tensor to the wrong shard" \
    "x_misplaced/model-00002-of-00004.safetensors: key model.embed_tokens.weight is missing (.*x_misplaced/$i maps it" \
    --init-from "hf:$SCRATCH/x_misplaced"
refused "both model.safetensors and an index" "x_both holds both model.safetensors and $i" \
    --init-from "hf:$SCRATCH/x_both"
cfgbad() {  # cfgbad NAME SED: the fp32 export with config.json edited by SED, in $SCRATCH/NAME
    mkdir -p "$SCRATCH/$1" && cp "$hf/$f" "$SCRATCH/$1/" && sed "$2" "$hf/config.json" > "$SCRATCH/$1/config.json" &&
        ! cmp -s "$SCRATCH/$1/config.json" "$hf/config.json"
}
cfgbad c_scaling 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3"}/'
refused "rope_scaling set" "c_scaling/config.json: key rope_scaling is an array or object: MindPipe's llama has null" \
    --init-from "hf:$SCRATCH/c_scaling"
cfgbad c_type 's/"model_type": "llama"/"model_type": "mistral"/'
refused "model_type mistral" "c_type/config.json: key model_type is the string \"mistral\"" --init-from "hf:$SCRATCH/c_type"
cfgbad c_kv '/"num_key_value_heads"/d'
refused "num_key_value_heads absent (num_attention_heads)" \
    "c_kv/config.json: key num_key_value_heads is absent (num_attention_heads, 4), the deck's model.kv_heads is 2" \
    --init-from "hf:$SCRATCH/c_kv"
mkdir -p "$SCRATCH/c_none" && cp "$hf/$f" "$SCRATCH/c_none/"
refused "a missing config.json" "c_none/config.json: No such file or directory" --init-from "hf:$SCRATCH/c_none"
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $base --dtype fp16 --ckpt "$ck" --out "$SCRATCH/x" > "$SCRATCH/out" 2>&1
[ $? -eq 2 ] && grep -q "dtype 'fp16': fp32 or bf16" "$SCRATCH/out" && [ ! -e "$SCRATCH/x" ]
ok $? "export --dtype fp16 refused (exit 2), nothing written"
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $base --max-shard-size 5x --ckpt "$ck" --out "$SCRATCH/x" > "$SCRATCH/out" 2>&1
[ $? -eq 2 ] && grep -q "max-shard-size '5x'" "$SCRATCH/out" && [ ! -e "$SCRATCH/x" ]
ok $? "export --max-shard-size 5x refused (exit 2), nothing written"
# GPT-2's export stays one F32 file: its import reads no other
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet --set train.steps=1 --set train.warmup=0 \
    --set checkpoint.every=1 --set train.eval_every=0 --out "$SCRATCH/grun" > "$SCRATCH/out" 2>&1
ok $? "a gpt2 model trains 1 step"
for o in "--dtype bf16" "--max-shard-size 1KB"; do
    # shellcheck disable=SC2086
    "$MINDPIPE" export --format hf -c "$deck" $o --ckpt "$SCRATCH/grun/ckpt/step_00000001.h5" --out "$SCRATCH/gx" \
        > "$SCRATCH/out" 2>&1
    [ $? -eq 1 ] && grep -q "GPT-2's export is one fp32 file" "$SCRATCH/out" && [ ! -e "$SCRATCH/gx" ] &&
        [ -s "$SCRATCH/grun/ckpt/step_00000001.h5" ]
    ok $? "gpt2 export $o refused (exit 1), nothing written"
done
done_testing
