#!/bin/sh
# inputs/smollm2-135m.ini, SmolLM2-135M's shape (issue 48; its parameter count, 134,515,008, is
# validation/unit/test_deck_model's): cut to 2 of its 30 layers and a window of 32 (every other key
# its own: C 576, 9 heads, 3 key/value heads, ffn 1536, V 49152, tied, rope_theta 1e5, eps 1e-5) it
# trains from scratch on the bundled byte-level corpus, its loss starting at ln(49152); the checkpoint
# exported with `export --format hf` is a LlamaForCausalLM's directory that `train --init-from hf:DIR`
# reads back bitwise with a deck that sets no model key (config.json gives all eleven) on one rank and
# at tp 3, and that the full 30-layer deck refuses naming both layer counts; the deck takes tp 3 and
# refuses tp 2 naming the rule (tp divides the 3 key/value heads); generate decodes from the checkpoint.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py "$TORCH_PYTHON"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/inputs/smollm2-135m.ini"
bare="$SCRATCH/bare.ini" # the deck without its [model] section
sed '/^\[model\]/,/^$/d' "$deck" > "$bare"
run="--set data.path=$data --set train.warmup=0 --set train.threads=1 --set train.batch=2 --set train.micro_batch=2"
small="--set model.layers=2 --set model.seq_len=32"

# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $run $small --set train.steps=3 --out "$SCRATCH/run" > "$SCRATCH/out" 2>&1
ok $? "2 layers of smollm2-135m trained 3 steps from scratch on bytes"
# 49152·576 + 2 blocks of 3,540,096 + 576
grep -q "model llama L2 C576 H9 KV3 T32 V49152 F1536 (35392320 parameters)" "$SCRATCH/run/log.txt"
ok $? "its log: llama L2 C576 H9 KV3 T32 V49152 F1536, 35,392,320 parameters"
awk '/"step": *1[,}]/ { if (match($0, /"loss": *[0-9.]+/)) { x = substr($0, RSTART, RLENGTH); sub(/.*: */, "", x);
    print x; exit !(x > 10.3 && x < 11.3) } }' "$SCRATCH/run/metrics.jsonl" > "$SCRATCH/loss1"
ok $? "step 1's loss $(cat "$SCRATCH/loss1") is about ln(49152) = 10.80 (a random model over the whole vocabulary)"
ck="$SCRATCH/run/ckpt/step_00000003.h5"

# shellcheck disable=SC2086
"$MINDPIPE" export --format hf -c "$deck" $small --ckpt "$ck" --out "$SCRATCH/hf" > "$SCRATCH/out" 2>&1 &&
    grep -q '"num_key_value_heads": 3,' "$SCRATCH/hf/config.json" && grep -q '"vocab_size": 49152,' "$SCRATCH/hf/config.json" &&
    grep -q '"rope_theta": 100000.0,' "$SCRATCH/hf/config.json" && grep -q '"rms_norm_eps": 1e-05,' "$SCRATCH/hf/config.json" &&
    grep -q '"tie_word_embeddings": true,' "$SCRATCH/hf/config.json" && grep -q '"intermediate_size": 1536,' "$SCRATCH/hf/config.json"
ok $? "export --format hf: SmolLM2's config.json keys (kv heads 3, vocab 49152, theta 1e5, eps 1e-05, tied, ffn 1536)"

for lay in "1 one" "3 tp3 --set parallel.tp=3"; do
    # shellcheck disable=SC2086
    set -- $lay
    n=$1; name=$2; shift 2
    # shellcheck disable=SC2086
    ${MPIEXEC:-mpiexec} -n "$n" "$MINDPIPE" train -c "$bare" $run --quiet --set train.steps=0 --init-from "hf:$SCRATCH/hf" \
        --out "$SCRATCH/imp_$name" "$@" > "$SCRATCH/out" 2>&1 &&
        grep -qF "model keys taken from $SCRATCH/hf/config.json: model.arch=llama (model_type), model.layers=2 (num_hidden_layers), model.dim=576 (hidden_size), model.heads=9 (num_attention_heads), model.ffn_dim=1536 (intermediate_size), model.vocab=49152 (vocab_size), model.kv_heads=3 (num_key_value_heads), model.rope_theta=100000.0 (rope_theta), model.norm_eps=1e-05 (rms_norm_eps), model.tie_embeddings=true (tie_word_embeddings), model.seq_len=32 (max_position_embeddings)" \
            "$SCRATCH/imp_$name/log.txt"
    ok $? "$name: --init-from hf:DIR with a deck without model keys: all eleven taken from config.json"
    "$TORCH_PYTHON" - "$ck" "$SCRATCH/imp_$name/ckpt/step_00000000.h5" > "$SCRATCH/cmp.out" 2>&1 <<'PY'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
names = sorted(a["model"].keys())
same = names == sorted(b["model"].keys()) and all(a["model/" + k][...].tobytes() == b["model/" + k][...].tobytes() for k in names)
print(len(names), "tensors", "bitwise equal" if same else "DIFFER")
sys.exit(0 if same else 1)
PY
    ok $? "$name: the imported weights are the checkpoint's ($(cat "$SCRATCH/cmp.out"))"
done
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $run --quiet --set train.steps=0 --init-from "hf:$SCRATCH/hf" --out "$SCRATCH/bad" \
    > "$SCRATCH/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "$SCRATCH/hf/config.json: key num_hidden_layers is 2, the deck's model.layers is 30" "$SCRATCH/out"
ok $? "the 30-layer deck refuses the 2-layer directory (exit $rc): $(grep -m1 -o 'error: .*' "$SCRATCH/out" | cut -c1-150)"

# tensor parallelism: tp divides the 9 heads and the 3 key/value heads
"$MINDPIPE" plan -c "$deck" --set parallel.tp=3 --layout tp=3 > "$SCRATCH/out" 2>&1
ok $? "the deck takes parallel.tp=3"
"$MINDPIPE" plan -c "$deck" --set parallel.tp=2 --layout tp=1 > "$SCRATCH/out" 2>&1
rc=$?
[ $rc -ne 0 ] &&
    grep -qF "model.kv_heads=3 (key/value heads) is not a multiple of parallel.tp=2: each tensor-parallel rank holds whole key/value heads" "$SCRATCH/out" &&
    grep -qF "model.heads=9 is not a multiple of parallel.tp=2" "$SCRATCH/out"
ok $? "the deck refuses parallel.tp=2 naming both rules (exit $rc)"

# shellcheck disable=SC2086
"$MINDPIPE" generate -c "$deck" $small --set data.path=$data --ckpt "$ck" --prompt "And God said" --max-tokens 8 \
    --temperature 0 > "$SCRATCH/gen" 2> "$SCRATCH/out"
rc=$?
[ $rc -eq 0 ] && [ -s "$SCRATCH/gen" ]
ok $? "generate 8 tokens greedily from the 3-step checkpoint (exit $rc): bytes $(head -c 16 "$SCRATCH/gen" | od -An -tx1 | tr -s ' \n' ' ')"
done_testing
