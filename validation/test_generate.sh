#!/bin/sh
# `mindpipe generate` (src/serve/): greedy completions equal PyTorch's greedy decoding by full
# recomputation (validation/torch_ref.py generate) for a checkpoint written on a tp=2 x pp=2 layout
# and for a supernet's exported subnet (model.blocks with a skip block); sampling is a function of
# the seed; bad input is refused with a message naming the cause and a non-zero exit.
# (KV-cached decoding against the training forward's full recomputation: validation/unit/test_decode.)
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
MPIEXEC=${MPIEXEC:-mpiexec}
deck="$MP_SRCDIR/validation/decks/ref.ini"
ref="$MP_SRCDIR/validation/torch_ref.py"
M="--set model.seq_len=64"
TR="--set data.path=$data --set train.batch=8 --set train.micro_batch=4 --set train.warmup=20 --set train.min_lr=1e-3
    --set train.threads=1 --set train.log_every=100"

# expect_fail DESCRIPTION PATTERN COMMAND... : non-zero exit and PATTERN in stderr
expect_fail() {
    what=$1; pat=$2; shift 2
    "$@" > "$SCRATCH/out" 2> "$SCRATCH/err"; rc=$?
    if [ $rc -ne 0 ] && grep -q -- "$pat" "$SCRATCH/err"; then ok 0 "$what"
    else ok 1 "$what"; diag "exit $rc; stderr:"; sed 's/^/#   /' "$SCRATCH/err"; fi
}
# torch_greedy LABEL CKPT PROMPT N [--set ...]: mindpipe generate's greedy bytes against PyTorch's
torch_greedy() {
    label=$1; ck=$2; prompt=$3; n=$4; shift 4
    "$MINDPIPE" generate -c "$deck" $M "$@" --ckpt "$ck" --prompt "$prompt" --max-tokens "$n" \
        > "$SCRATCH/gen.out" 2> "$SCRATCH/gen.err"
    ok $? "$label: mindpipe generate ($(cat "$SCRATCH/gen.err"))"
    "$TORCH_PYTHON" "$ref" generate "$ck" --prompt "$prompt" --max-tokens "$n" --got "$SCRATCH/gen.out" \
        > "$SCRATCH/ref.out" 2>&1
    tap_checker "$label" "torch_ref.py generate" $? "$SCRATCH/ref.out"
}

# A plain model trained on 4 ranks (tp=2 x pp=2): the checkpoint holds global shapes, any layout reads it.
# shellcheck disable=SC2086
$MPIEXEC -n 4 "$MINDPIPE" train -c "$deck" $M $TR --set train.steps=300 --set parallel.tp=2 --set parallel.pp=2 \
    --quiet --out "$SCRATCH/plain" > "$SCRATCH/train.log" 2>&1
rc=$?
ok $rc "train 300 steps on tp=2 x pp=2 (4 ranks)"
[ $rc -eq 0 ] || sed 's/^/#   /' "$SCRATCH/train.log" | tail -n 20 # why (the scratch goes at exit)
CK="$SCRATCH/plain/ckpt/step_00000300.h5"
torch_greedy "tp2 x pp2 checkpoint" "$CK" "And God said" 48
cp "$SCRATCH/gen.out" "$SCRATCH/greedy.out"
[ "$(wc -c < "$SCRATCH/greedy.out")" -eq 48 ] && [ "$(tr -d ' ' < "$SCRATCH/greedy.out" | wc -c)" -gt 0 ]
ok $? "the greedy completion has 48 bytes, not all spaces: $(cat "$SCRATCH/greedy.out")"

# The check can fail: one byte changed is a difference PyTorch reports.
printf 'X' | dd of="$SCRATCH/gen.out" bs=1 seek=20 conv=notrunc 2>/dev/null
"$TORCH_PYTHON" "$ref" generate "$CK" --prompt "And God said" --max-tokens 48 --got "$SCRATCH/gen.out" > "$SCRATCH/ref.out" 2>&1
[ $? -eq 1 ] && grep -q "^FAIL .*first difference at byte 20" "$SCRATCH/ref.out"
ok $? "a completion with byte 20 changed fails the PyTorch check, naming byte 20"

# A supernet's subnet exported to a plain model (choice blocks 1 and 2; subnet 1,2: h4m4,h2m1,skip,h4m4;
# trained at a higher rate: 2 choice blocks of 3 candidates learn more slowly than a plain model).
SN="--set model.layers=4 --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip --set supernet.blocks=1,2
    --set supernet.window=2"
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $M $TR $SN --set train.steps=600 --set train.lr=2e-2 --quiet --out "$SCRATCH/sn" \
    > "$SCRATCH/train.log" 2>&1
ok $? "train a supernet (choice blocks 1, 2) 600 steps"
# shellcheck disable=SC2086
"$MINDPIPE" export -c "$deck" $M --set data.path="$data" $SN --ckpt "$SCRATCH/sn/ckpt/step_00000600.h5" \
    --subnet 1,2 --out "$SCRATCH/sub.h5" > "$SCRATCH/ex.out" 2>&1 && grep -q "^blocks = h4m4,h2m1,skip,h4m4$" "$SCRATCH/ex.out"
ok $? "export subnet 1,2: a plain model of blocks h4m4,h2m1,skip,h4m4"
BL="--set model.layers=4 --set model.blocks=h4m4,h2m1,skip,h4m4"
# shellcheck disable=SC2086
torch_greedy "exported subnet" "$SCRATCH/sub.h5" "In the beginning" 40 $BL

# Sampling: the same seed gives the same bytes, another seed others; the context stops a completion.
S() { "$MINDPIPE" generate -c "$deck" $M --ckpt "$CK" --prompt "And God said" "$@" 2> "$SCRATCH/s.err"; }
S --max-tokens 40 --temperature 1 --seed 5 > "$SCRATCH/s5a" && S --max-tokens 40 --temperature 1 --seed 5 > "$SCRATCH/s5b" &&
    S --max-tokens 40 --temperature 1 --seed 6 > "$SCRATCH/s6" && cmp -s "$SCRATCH/s5a" "$SCRATCH/s5b" &&
    ! cmp -s "$SCRATCH/s5a" "$SCRATCH/s6" && ! cmp -s "$SCRATCH/s5a" "$SCRATCH/greedy.out"
ok $? "temperature 1: seed 5 twice gives the same bytes, seed 6 and greedy others ($(cat "$SCRATCH/s5a") | $(cat "$SCRATCH/s6"))"
head -c 40 "$SCRATCH/greedy.out" > "$SCRATCH/g40"
S --max-tokens 40 --temperature 0.8 --top-k 1 --seed 9 > "$SCRATCH/k1" && cmp -s "$SCRATCH/k1" "$SCRATCH/g40"
ok $? "top-k 1 at temperature 0.8 is greedy"
S --max-tokens 1000 > "$SCRATCH/long" && [ "$(wc -c < "$SCRATCH/long")" -eq 52 ] && grep -q "context is full" "$SCRATCH/s.err"
ok $? "--max-tokens 1000 stops when the context (64) is full: 12 + 52 bytes, and says so"

# Bad input.
G() { "$MINDPIPE" generate -c "$deck" $M "$@"; }
expect_fail "a missing checkpoint names the file" "absent.h5" G --ckpt "$SCRATCH/absent.h5" --prompt "x"
expect_fail "a checkpoint of another model (dim 64) names the mismatch" "dim" G --set model.dim=64 --ckpt "$CK" --prompt "x"
expect_fail "a checkpoint of another model (3 layers) names the mismatch" "layers" G --set model.layers=3 --ckpt "$CK" --prompt "x"
expect_fail "an exported subnet's checkpoint without its model.blocks is refused naming blocks" "blocks" \
    G --set model.layers=4 --ckpt "$SCRATCH/sub.h5" --prompt "x"
printf 'not hdf5\n' > "$SCRATCH/bad.h5"
expect_fail "a file that is not a checkpoint names the file" "bad.h5" G --ckpt "$SCRATCH/bad.h5" --prompt "x"
long=$(printf '%064d' 0)
expect_fail "a prompt of 64 bytes on a context of 64 is refused" "longer than the context" G --ckpt "$CK" --prompt "$long"
expect_fail "an empty prompt is refused" "empty" G --ckpt "$CK" --prompt ""
expect_fail "a supernet deck is refused: export a subnet first" "export" G $SN --ckpt "$CK" --prompt "x"
expect_fail "temperature -1 is refused" "temperature" G --ckpt "$CK" --prompt "x" --temperature -1
expect_fail "top-k beyond the vocabulary is refused" "top_k" G --ckpt "$CK" --prompt "x" --top-k 300
expect_fail "negative --max-tokens is refused" "max-tokens" G --ckpt "$CK" --prompt "x" --max-tokens -3
expect_fail "generate without --prompt is a usage error" "prompt" G --ckpt "$CK"
"$MINDPIPE" generate -c "$deck" $M --ckpt "$CK" > /dev/null 2>&1
[ $? -eq 2 ]
ok $? "a usage error exits 2"
done_testing
