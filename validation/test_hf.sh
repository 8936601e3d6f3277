#!/bin/sh
# Hugging Face's GPT-2 out and in (src/io/hf_gpt2.h): a checkpoint of validation/decks/train.ini
# exported with `export --format hf` runs, as HF's GPT2LMHeadModel defines it (validation/hf_check.py,
# its own safetensors parser and forward), to MindPipe's activations and logits within 1e-5, and a
# planted difference fails that check; `train --init-from hf:DIR` with train.steps=0 writes weights
# bitwise equal to the exported checkpoint's on 1 rank, at pp=2 and at tp=2; malformed files and
# senseless combinations are refused naming the file and the key, or the options.
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
for k in truncate hdrlen dtype missing overlap; do
    "$TORCH_PYTHON" "$chk" mutate "$SCRATCH/hf/sub" "$SCRATCH/m_$k" "$k" || echo "# mutate $k failed"
done
f="model.safetensors"
refused "truncated file" "m_truncate/$f: key transformer.ln_f.bias: .*past the file" --init-from "hf:$SCRATCH/m_truncate"
refused "header length beyond the file" "m_hdrlen/$f: header length" --init-from "hf:$SCRATCH/m_hdrlen"
refused "wrong dtype" "m_dtype/$f: key transformer.wpe.weight: dtype F64" --init-from "hf:$SCRATCH/m_dtype"
refused "missing tensor" "m_missing/$f: key transformer.h.1.ln_2.bias is missing" --init-from "hf:$SCRATCH/m_missing"
refused "overlapping offsets" "m_overlap/$f: keys transformer.h.0.ln_1.weight and transformer.h.0.ln_1.bias overlap" \
    --init-from "hf:$SCRATCH/m_overlap"
refused "wrong shape (deck with dim 64)" "sub/$f: key transformer.wte.weight: shape (256, 32).*needs (256, 64)" \
    --init-from "hf:$SCRATCH/hf/sub" --set model.dim=64
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
done_testing
