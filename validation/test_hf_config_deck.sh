#!/bin/sh
# config.json onto the deck (src/hf/hf_deck.h, issue 48): `train --init-from hf:DIR` with a deck that
# sets no model key takes the model from DIR/config.json (a llama's arch, layers, dim, heads, kv_heads,
# ffn_dim, vocab, rope_theta, norm_eps, tie; a GPT-2's arch, layers, dim, heads, vocab, mlp_ratio; the
# context as model.seq_len where the deck sets none, a deck's own kept), on
# one rank and on two (tp 2: rank 0 reads the file and every rank loads the same deck), says which keys
# it took, and gives back the exported weights bitwise; a key the deck sets to another value is refused
# naming the key, the deck's value and config.json's; a key it sets to the same value is accepted.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py "$TORCH_PYTHON"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
# the test deck without its [model] section: every model key at its default
bare="$SCRATCH/bare.ini"
sed '/^\[model\]/,/^$/d' "$deck" > "$bare"
run="--set data.path=$data --set train.warmup=0 --set train.threads=1 --quiet"
llama="--set model.arch=llama --set model.mlp_ratio=1 --set model.kv_heads=2 --set model.ffn_dim=48 --set model.rope_theta=20000 --set model.norm_eps=1e-6"

same() {  # same A.h5 B.h5: every tensor of /model bitwise equal, B of step 0
    "$TORCH_PYTHON" - "$1" "$2" > "$SCRATCH/cmp.out" 2>&1 <<'PY'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
names = sorted(a["model"].keys())
same = names == sorted(b["model"].keys()) and all(a["model/" + k][...].tobytes() == b["model/" + k][...].tobytes() for k in names)
print(len(names), "tensors", "bitwise equal" if same else "DIFFER", "; step", int(b["state"].attrs["step"]))
sys.exit(0 if same and int(b["state"].attrs["step"]) == 0 else 1)
PY
}

# a llama (kv_heads 2 of 4, rope_theta 20000, norm_eps 1e-6: none the deck's default) and a GPT-2
# (mlp_ratio 2), each trained 2 steps and exported
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $run $llama --set train.steps=2 --out "$SCRATCH/rl" > "$SCRATCH/out" 2>&1 &&
    "$MINDPIPE" export --format hf -c "$deck" $llama --ckpt "$SCRATCH/rl/ckpt/step_00000002.h5" --out "$SCRATCH/hl" \
        > "$SCRATCH/out" 2>&1
ok $? "a llama trained 2 steps and exported"
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $run --set model.mlp_ratio=2 --set train.steps=2 --out "$SCRATCH/rg" > "$SCRATCH/out" 2>&1 &&
    "$MINDPIPE" export --format hf -c "$deck" --set model.mlp_ratio=2 --ckpt "$SCRATCH/rg/ckpt/step_00000002.h5" \
        --out "$SCRATCH/hg" > "$SCRATCH/out" 2>&1
ok $? "a GPT-2 of mlp_ratio 2 trained 2 steps and exported"

# the deck sets no model key: config.json's model, on 1 rank and at tp 2
for lay in "1 one" "2 tp2 --set parallel.tp=2"; do
    # shellcheck disable=SC2086
    set -- $lay
    n=$1; name=$2; shift 2
    # shellcheck disable=SC2086
    ${MPIEXEC:-mpiexec} -n "$n" "$MINDPIPE" train -c "$bare" $run --set train.steps=0 --init-from "hf:$SCRATCH/hl" \
        --out "$SCRATCH/il_$name" "$@" > "$SCRATCH/out" 2>&1
    ok $? "$name: a deck without model keys, --init-from a llama's directory"
    keys="model.arch=llama (model_type), model.layers=2 (num_hidden_layers), model.dim=32 (hidden_size), model.heads=4 (num_attention_heads), model.ffn_dim=48 (intermediate_size), model.vocab=256 (vocab_size), model.kv_heads=2 (num_key_value_heads), model.rope_theta=20000.0 (rope_theta), model.norm_eps=1e-06 (rms_norm_eps), model.tie_embeddings=true (tie_word_embeddings), model.seq_len=32 (max_position_embeddings)"
    grep -qF "model keys taken from $SCRATCH/hl/config.json: $keys" "$SCRATCH/il_$name/log.txt"
    ok $? "$name: the log names the eleven keys taken: $(grep -o 'model keys taken.*' "$SCRATCH/il_$name/log.txt" | cut -c1-120)..."
    same "$SCRATCH/rl/ckpt/step_00000002.h5" "$SCRATCH/il_$name/ckpt/step_00000000.h5"
    ok $? "$name: the weights are the exported checkpoint's ($(cat "$SCRATCH/cmp.out"))"
done
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$bare" $run --set train.steps=0 --init-from "hf:$SCRATCH/hg" --out "$SCRATCH/ig" > "$SCRATCH/out" 2>&1 &&
    grep -qF "model keys taken from $SCRATCH/hg/config.json: model.arch=gpt2 (model_type), model.layers=2 (n_layer), model.dim=32 (n_embd), model.heads=4 (n_head), model.vocab=256 (vocab_size), model.mlp_ratio=2 (n_inner), model.seq_len=32 (n_positions)" \
        "$SCRATCH/ig/log.txt" && same "$SCRATCH/rg/ckpt/step_00000002.h5" "$SCRATCH/ig/ckpt/step_00000000.h5"
ok $? "a deck without model keys, --init-from a GPT-2's directory: seven keys taken, the weights bitwise ($(cat "$SCRATCH/cmp.out"))"
# model.seq_len is the training window: config.json's context fills it only where the deck sets none
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$bare" $run --set train.steps=0 --set model.seq_len=16 --init-from "hf:$SCRATCH/hg" \
    --out "$SCRATCH/ig16" > "$SCRATCH/out" 2>&1 && grep -q "model keys taken.*(n_inner)$" "$SCRATCH/ig16/log.txt" &&
    grep -q "^seq_len = 16$" "$SCRATCH/ig16/deck.ini"
ok $? "a deck's own model.seq_len 16 below n_positions 32 is kept, not taken"
# the deck's own values, where they agree, are kept and not listed
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $run $llama --set train.steps=0 --init-from "hf:$SCRATCH/hl" --out "$SCRATCH/iall" \
    > "$SCRATCH/out" 2>&1 &&
    grep -qF "model keys taken from $SCRATCH/hl/config.json: model.tie_embeddings=true (tie_word_embeddings)" "$SCRATCH/iall/log.txt"
ok $? "a deck that sets every model key but one alike: only tie_embeddings is taken"

refused() {  # refused LABEL PATTERN DIR [ARGS...]: train --init-from hf:DIR fails (exit 1) with PATTERN in its message
    label=$1 pat=$2 dir=$3; shift 3
    rm -rf "$SCRATCH/bad"
    # shellcheck disable=SC2086
    "$MINDPIPE" train -c "$bare" $run --set train.steps=0 --init-from "hf:$dir" --out "$SCRATCH/bad" "$@" > "$SCRATCH/out" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -qF -- "$pat" "$SCRATCH/out" && [ ! -e "$SCRATCH/bad/ckpt/step_00000000.h5" ]
    ok $? "$label refused (exit $rc): $(grep -m1 -o 'error: .*' "$SCRATCH/out" | cut -c1-170)"
}
c="$SCRATCH/hl/config.json"
refused "hidden_size 32 against --set model.dim=64" "$c: key hidden_size is 32, the deck's model.dim is 64" \
    "$SCRATCH/hl" --set model.dim=64
refused "model_type llama against --set model.arch=gpt2" "$c: key model_type is the string \"llama\", the deck's model.arch is gpt2" \
    "$SCRATCH/hl" --set model.arch=gpt2
refused "rope_theta 20000 against the deck's 10000" "$c: key rope_theta is 20000, the deck's model.rope_theta is 10000" \
    "$SCRATCH/hl" --set model.rope_theta=10000
refused "tie_word_embeddings true against false" "$c: key tie_word_embeddings is true, the deck's model.tie_embeddings is false" \
    "$SCRATCH/hl" --set model.tie_embeddings=false
refused "GPT-2's n_inner 64 against mlp_ratio 4" "$SCRATCH/hg/config.json: key n_inner is 64 (2 * n_embd), the deck's model.mlp_ratio is 4" \
    "$SCRATCH/hg" --set model.mlp_ratio=4
# a key taken is checked by the deck's rules as one the deck sets: tp 3 does not divide 4 heads
refused "config.json's 4 heads at tp 3" "model.heads=4 is not a multiple of parallel.tp=3" "$SCRATCH/hl" --set parallel.tp=3
done_testing
