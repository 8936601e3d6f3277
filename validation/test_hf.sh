#!/bin/sh
# Hugging Face's GPT-2 out and in (src/hf/hf_gpt2.h): a checkpoint of validation/decks/train.ini
# exported with `export --format hf` runs, as HF's GPT2LMHeadModel defines it (validation/hf_check.py,
# its own safetensors parser and forward), to MindPipe's activations and logits within 1e-5, and a
# planted difference fails that check; `train --init-from hf:DIR` with train.steps=0 writes weights
# bitwise equal to the exported checkpoint's on 1 rank, at pp=2 and at tp=2; malformed files and
# senseless combinations are refused naming the file and the key, or the options. The tokenizer beside the
# weights: this byte-tokenized run's export has no tokenizer files and says so; a tiny gpt2 run's has
# vocab.json and merges.txt byte-equal to GPT-2's encoder.json and vocab.bpe and a tokenizer_config.json,
# another vocabulary refused before anything is written (sp: validation/test_tokenizer_sp.sh). config.json
# must describe the deck's model: each disagreement, and a missing file, refused naming the key or file;
# a larger n_positions loads wpe's first model.seq_len rows.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
chk="$MP_SRCDIR/validation/hf_check.py"
base="-c $deck --set data.path=$data --set train.warmup=0 --set train.threads=1 --quiet"

# shellcheck disable=SC2086
"$MINDPIPE" train $base --set train.steps=4 --set checkpoint.every=2 --set debug.dump_activations=2 \
    --out "$SCRATCH/run" > "$SCRATCH/out" 2>&1
ok $? "train 4 steps: the checkpoint and activations of step 2"
ck="$SCRATCH/run/ckpt/step_00000002.h5"
"$MINDPIPE" export --format hf -c "$deck" --ckpt "$ck" --out "$SCRATCH/hf/sub" > "$SCRATCH/out" 2>&1
[ $? -eq 0 ] && [ -s "$SCRATCH/hf/sub/model.safetensors" ] && [ -s "$SCRATCH/hf/sub/config.json" ]
ok $? "export --format hf: model.safetensors and config.json in a directory it made"
# (a loop's status is its last command's: `|| break` on a file found would end it with 0, so name them)
found=""
for n in vocab.json merges.txt tokenizer_config.json tokenizer.model; do [ ! -e "$SCRATCH/hf/sub/$n" ] || found="$found $n"; done
[ -z "$found" ] && grep -q "no tokenizer files (the checkpoint's tokenizer is byte)" "$SCRATCH/out"
ok $? "a byte checkpoint's export has no tokenizer files${found:+ (but it has$found)}, and says so: $(sed 's/.*; //' "$SCRATCH/out")"
"$TORCH_PYTHON" "$chk" "$SCRATCH/hf/sub" --dump "$SCRATCH/run/activations_step_00000002.h5" --ckpt "$ck" \
    > "$SCRATCH/chk.out" 2>&1
tap_checker "HF forward" hf_check.py $? "$SCRATCH/chk.out"
"$TORCH_PYTHON" "$chk" mutate "$SCRATCH/hf/sub" "$SCRATCH/m_perturb" perturb &&
    ! "$TORCH_PYTHON" "$chk" "$SCRATCH/m_perturb" --dump "$SCRATCH/run/activations_step_00000002.h5" --ckpt "$ck" \
        > "$SCRATCH/chk.out" 2>&1 && grep -q '^FAIL logits' "$SCRATCH/chk.out"
ok $? "the checker fails on one weight perturbed by 1e-2"

# import(export(x)) is x, bitwise, whatever the layout
for lay in "1 one" "2 pp2 --set parallel.pp=2" "2 tp2 --set parallel.tp=2"; do
    # shellcheck disable=SC2086
    set -- $lay
    n=$1; name=$2; shift 2
    # shellcheck disable=SC2086
    ${MPIEXEC:-mpiexec} -n "$n" "$MINDPIPE" train $base --set train.steps=0 --init-from "hf:$SCRATCH/hf/sub" \
        --out "$SCRATCH/imp_$name" "$@" > "$SCRATCH/out" 2>&1
    ok $? "$name: train --init-from hf:DIR with train.steps=0"
    "$TORCH_PYTHON" - "$ck" "$SCRATCH/imp_$name/ckpt/step_00000000.h5" > "$SCRATCH/cmp.out" 2>&1 <<'PY'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
names = sorted(a["model"].keys())
same = names == sorted(b["model"].keys()) and all(a["model/" + k][...].tobytes() == b["model/" + k][...].tobytes() for k in names)
print(len(names), "tensors", "bitwise equal" if same else "DIFFER", "; step", int(b["state"].attrs["step"]))
sys.exit(0 if same and int(b["state"].attrs["step"]) == 0 else 1)
PY
    ok $? "$name: the step-0 checkpoint's weights are the exported checkpoint's, bitwise ($(cat "$SCRATCH/cmp.out"))"
done

# malformed files: refused naming the file and the key
refused() {  # refused LABEL PATTERN [ARGS...]: train --init-from fails (exit 1) with PATTERN in its message
    label=$1 pat=$2; shift 2
    rm -rf "$SCRATCH/bad"
    # shellcheck disable=SC2086
    "$MINDPIPE" train $base --set train.steps=0 --out "$SCRATCH/bad" "$@" > "$SCRATCH/out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && grep -q -- "$pat" "$SCRATCH/out"
    ok $? "$label refused (exit $rc): $(grep -m1 -o 'error: .*' "$SCRATCH/out" | cut -c1-150)"
}
for k in truncate hdrlen dtype missing overlap shorthdr nan; do
    "$TORCH_PYTHON" "$chk" mutate "$SCRATCH/hf/sub" "$SCRATCH/m_$k" "$k" || echo "# mutate $k failed"
done
f="model.safetensors"
refused "truncated file" "m_truncate/$f: key transformer.ln_f.bias: .*past the file" --init-from "hf:$SCRATCH/m_truncate"
refused "header length beyond the file" "m_hdrlen/$f: header length" --init-from "hf:$SCRATCH/m_hdrlen"
refused "wrong dtype" "m_dtype/$f: key transformer.wpe.weight: dtype F64" --init-from "hf:$SCRATCH/m_dtype"
refused "missing tensor" "m_missing/$f: key transformer.h.1.ln_2.bias is missing" --init-from "hf:$SCRATCH/m_missing"
refused "overlapping offsets" "m_overlap/$f: keys transformer.h.0.ln_1.weight and transformer.h.0.ln_1.bias overlap" \
    --init-from "hf:$SCRATCH/m_overlap"
# the header length 3 short (its padding cut, the JSON parsing still): every tensor would load 3 bytes
# shifted (values like 9e26) unless the data's coverage is checked (issue 45 item 4)
refused "a header length 3 short" "m_shorthdr/$f: the tensors cover [0-9]* bytes of data and the file holds" \
    --init-from "hf:$SCRATCH/m_shorthdr"
refused "a NaN weight" "m_nan/$f: key transformer.h.1.mlp.c_fc.weight: element 5 is NaN" --init-from "hf:$SCRATCH/m_nan"
mkdir -p "$SCRATCH/m_dim" && cp "$SCRATCH/hf/sub/$f" "$SCRATCH/m_dim/" &&
    sed 's/"n_embd": 32/"n_embd": 64/' "$SCRATCH/hf/sub/config.json" > "$SCRATCH/m_dim/config.json"
refused "wrong shape (config and deck with dim 64)" \
    "m_dim/$f: key transformer.wte.weight: shape (256, 32).*needs (256, 64)" \
    --init-from "hf:$SCRATCH/m_dim" --set model.dim=64

# config.json: the model it describes must be the deck's
c="sub/config.json"
refused "n_embd against a deck with dim 64" "$c: key n_embd is 32, the deck's model.dim is 64" \
    --init-from "hf:$SCRATCH/hf/sub" --set model.dim=64
refused "vocab_size against a deck with vocab 300" "$c: key vocab_size is 256, the deck's model.vocab" \
    --init-from "hf:$SCRATCH/hf/sub" --set model.vocab=300
refused "n_inner null against mlp_ratio 2" "$c: key n_inner is null (4 \* n_embd), the deck's model.mlp_ratio is 2" \
    --init-from "hf:$SCRATCH/hf/sub" --set model.mlp_ratio=2
refused "n_positions below model.seq_len 64" "$c: key n_positions is 32, below the deck's model.seq_len 64" \
    --init-from "hf:$SCRATCH/hf/sub" --set model.seq_len=64
cfgbad() {  # cfgbad NAME SED: the export with config.json edited by SED, in $SCRATCH/NAME
    mkdir -p "$SCRATCH/$1" && cp "$SCRATCH/hf/sub/$f" "$SCRATCH/$1/" &&
        sed "$2" "$SCRATCH/hf/sub/config.json" > "$SCRATCH/$1/config.json" &&
        ! cmp -s "$SCRATCH/$1/config.json" "$SCRATCH/hf/sub/config.json"
}
cfgbad c_head 's/"n_head": 4/"n_head": 2/'
refused "n_head changed to 2" "c_head/config.json: key n_head is 2, the deck's model.heads is 4" \
    --init-from "hf:$SCRATCH/c_head"
cfgbad c_layer '/"n_layer"/d'
refused "n_layer missing" "c_layer/config.json: key n_layer is missing" --init-from "hf:$SCRATCH/c_layer"
cfgbad c_act 's/"gelu_new"/"gelu"/'
refused "activation_function gelu" "c_act/config.json: key activation_function is gelu: " \
    --init-from "hf:$SCRATCH/c_act"
cfgbad c_eps 's/1e-05/1e-06/'
refused "layer_norm_epsilon 1e-6" "c_eps/config.json: key layer_norm_epsilon is 1e-06" --init-from "hf:$SCRATCH/c_eps"
cfgbad c_json 's/"n_layer": 2,/"n_layer": 2/'
refused "malformed JSON" "c_json/config.json: malformed JSON at byte" --init-from "hf:$SCRATCH/c_json"
mkdir -p "$SCRATCH/c_none" && cp "$SCRATCH/hf/sub/$f" "$SCRATCH/c_none/"
refused "a missing config.json" "c_none/config.json: No such file or directory (a Hugging Face model directory has one" --init-from "hf:$SCRATCH/c_none"
# shellcheck disable=SC2086
cfgbad c_tanh 's/"gelu_new"/"gelu_pytorch_tanh"/' &&
    "$MINDPIPE" train $base --set train.steps=0 --init-from "hf:$SCRATCH/c_tanh" --out "$SCRATCH/imp_tanh" \
        > "$SCRATCH/out" 2>&1
ok $? "activation_function gelu_pytorch_tanh (the same tanh GELU) is taken"

# n_positions 32 with model.seq_len 16: wpe's first 16 rows, every other tensor as exported
# shellcheck disable=SC2086
"$MINDPIPE" train $base --set train.steps=0 --set model.seq_len=16 --init-from "hf:$SCRATCH/hf/sub" \
    --out "$SCRATCH/imp_t16" > "$SCRATCH/out" 2>&1 &&
    "$TORCH_PYTHON" - "$ck" "$SCRATCH/imp_t16/ckpt/step_00000000.h5" > "$SCRATCH/cmp.out" 2>&1 <<'PY'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
w = b["model/wpe"].shape == (16, 32) and a["model/wpe"][:16].tobytes() == b["model/wpe"][...].tobytes()
rest = all(a["model/" + k][...].tobytes() == b["model/" + k][...].tobytes() for k in a["model"] if k != "wpe")
print("wpe", b["model/wpe"].shape, "first rows" if w else "DIFFER", "; the rest", "equal" if rest else "DIFFER")
sys.exit(0 if w and rest else 1)
PY
ok $? "n_positions 32 into model.seq_len 16: $(cat "$SCRATCH/cmp.out")"
refused "--init-from with --resume" "--init-from and --resume exclude" --init-from "hf:$SCRATCH/hf/sub" --resume "$ck"
refused "--init-from of another kind" "the only source is hf:DIR" --init-from "$SCRATCH/hf/sub"
refused "a deck with a per-block shape" "block 1 is h2m4" --init-from "hf:$SCRATCH/hf/sub" --set model.blocks=h4m4,h2m4

# export: the combinations that make no sense
"$MINDPIPE" export --format hf -c "$deck" --ckpt "$ck" --subnet 0 --out "$SCRATCH/x" > "$SCRATCH/out" 2>&1
[ $? -eq 2 ] && grep -q "subnet with --format hf" "$SCRATCH/out"
ok $? "export --format hf --subnet refused (exit 2)"
"$MINDPIPE" export --format onnx -c "$deck" --ckpt "$ck" --out "$SCRATCH/x" > "$SCRATCH/out" 2>&1
[ $? -eq 2 ] && grep -q "format 'onnx'" "$SCRATCH/out"
ok $? "export --format onnx refused (exit 2)"
"$MINDPIPE" export -c "$deck" --ckpt "$ck" --out "$SCRATCH/x" > "$SCRATCH/out" 2>&1
[ $? -eq 2 ] && grep -q "needs --subnet" "$SCRATCH/out"
ok $? "export without --format needs --subnet, as before (exit 2)"
"$MINDPIPE" export --format hf -c "$deck" --set model.layers=3 --set model.blocks=h4m4,skip,h4m4 --ckpt "$ck" \
    --out "$SCRATCH/x" > "$SCRATCH/out" 2>&1
[ $? -eq 1 ] && grep -q "block 1 is skip" "$SCRATCH/out" && [ ! -e "$SCRATCH/x" ]
ok $? "export --format hf of a model with a skip block refused, nothing written"

# a gpt2 checkpoint (a tiny model over GPT-2's 50257 tokens) exports its vocabulary beside the weights
gdir=${MINDPIPE_GPT2_DIR:-$HOME/.cache/mindpipe/gpt2}
head -c 20000 "$MP_BUILDDIR/validation/kjv.txt" > "$SCRATCH/g.txt"
gbase="-c $deck --set data.path=$SCRATCH/g.h5 --set model.vocab=50257 --set model.layers=1 --set model.dim=16"
gbase="$gbase --set model.seq_len=16 --set train.warmup=0 --set train.threads=1 --set train.eval_every=0"
# shellcheck disable=SC2086
"$MINDPIPE" prep --tokenizer gpt2 --tokenizer-dir "$gdir" --text "$SCRATCH/g.txt" --out "$SCRATCH/g.h5" \
    > "$SCRATCH/out" 2>&1 &&
    "$MINDPIPE" train $gbase --quiet --set train.steps=2 --set checkpoint.every=2 --out "$SCRATCH/grun" \
        > "$SCRATCH/out" 2>&1
ok $? "a gpt2 token file trains 2 steps (layers 1, dim 16, seq_len 16, vocab 50257)"
gck="$SCRATCH/grun/ckpt/step_00000002.h5"
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $gbase --ckpt "$gck" --tokenizer-dir "$gdir" --out "$SCRATCH/hf/g" > "$SCRATCH/out" 2>&1
rc=$?
[ $rc -eq 0 ] && cmp "$gdir/encoder.json" "$SCRATCH/hf/g/vocab.json" &&
    cmp "$gdir/vocab.bpe" "$SCRATCH/hf/g/merges.txt" &&
    grep -q '"tokenizer_class": "GPT2Tokenizer"' "$SCRATCH/hf/g/tokenizer_config.json" &&
    grep -q '"model_max_length": 16,' "$SCRATCH/hf/g/tokenizer_config.json" &&
    grep -q '"vocab_size": 50257,' "$SCRATCH/hf/g/config.json" && [ ! -e "$SCRATCH/hf/g/tokenizer.model" ] &&
    grep -q "vocab.json, merges.txt and tokenizer_config.json" "$SCRATCH/out"
ok $? "gpt2 export: vocab.json, merges.txt byte-equal to encoder.json, vocab.bpe; tokenizer_config.json (exit $rc)"
# shellcheck disable=SC2086
"$MINDPIPE" train $gbase --quiet --set train.steps=0 --init-from "hf:$SCRATCH/hf/g" --out "$SCRATCH/gimp" \
    > "$SCRATCH/out" 2>&1
ok $? "the gpt2 export loads back (config.json's vocab_size 50257 is the deck's model.vocab)"
mkdir -p "$SCRATCH/voc" && cp "$gdir/encoder.json" "$SCRATCH/voc/" &&
    sed '1s/.*/#version: 0.3/' "$gdir/vocab.bpe" > "$SCRATCH/voc/vocab.bpe"
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $gbase --ckpt "$gck" --tokenizer-dir "$SCRATCH/voc" --out "$SCRATCH/hf/g2" \
    > "$SCRATCH/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "tokenizer_sha256 $(cat "$gdir/encoder.json" "$gdir/vocab.bpe" | sha256sum | cut -c1-64)" \
    "$SCRATCH/out" && grep -q "$SCRATCH/voc" "$SCRATCH/out" && [ ! -e "$SCRATCH/hf/g2" ]
ok $? "another vocabulary (vocab.bpe's first line changed) is refused naming the directory, nothing written (exit $rc)"
sed 's/^/#   /' "$SCRATCH/out"
# shellcheck disable=SC2086
"$MINDPIPE" export --format hf $gbase --ckpt "$gck" --tokenizer-dir "$SCRATCH/nowhere" --out "$SCRATCH/hf/g3" \
    > "$SCRATCH/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "nowhere/encoder.json" "$SCRATCH/out" && [ ! -e "$SCRATCH/hf/g3" ]
ok $? "a missing vocabulary is refused naming the file, nothing written (exit $rc)"
"$MINDPIPE" export --format hf -c "$deck" --ckpt "$ck" --out "$SCRATCH/hf/g" > "$SCRATCH/out" 2>&1 &&
    [ ! -e "$SCRATCH/hf/g/vocab.json" ] && [ ! -e "$SCRATCH/hf/g/merges.txt" ] &&
    [ ! -e "$SCRATCH/hf/g/tokenizer_config.json" ]
ok $? "a byte export into the gpt2 export's directory removes its stale tokenizer files"
"$MINDPIPE" export -c "$deck" --ckpt "$ck" --subnet 0 --tokenizer-dir "$gdir" --out "$SCRATCH/x" > "$SCRATCH/out" 2>&1
[ $? -eq 2 ] && grep -q "tokenizer-dir is for --format hf" "$SCRATCH/out"
ok $? "export --format mindpipe --tokenizer-dir refused (exit 2)"
done_testing
