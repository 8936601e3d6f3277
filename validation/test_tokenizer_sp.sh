#!/bin/sh
# `mindpipe prep --tokenizer sp` (SentencePiece, src/tok/tok_sp.c) on the first 400 kB of the King
# James Bible, unigram and bpe at --vocab-size 1000: the token file's attributes (tokenizer sp, vocab
# 1000), the model stored in it (/tokenizer/sp_model) whose sha256sum is tokenizer_sha256, the same
# model bytes from a second prep (training is deterministic), the stored model applied again with
# --sp-model-file giving the same ids (so the file alone rebuilds its tokenizer), a text that could
# not decode back exactly refused (prep checks every encoding; validation/unit/test_tok_sp checks
# the round trip byte for byte), --vocab-size out of range and a corrupt --sp-model-file refused
# naming what is wrong, 2 training steps on the sp token file, and `generate` decoding with the
# checkpoint's model (from the token file it trained on, or --tokenizer-dir), another model refused;
# export --format hf writes that model as tokenizer.model (its sha256sum the checkpoint's digest).
# A build without SentencePiece fails here: CI installs it (.ci/deps.sh).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_test_data > /dev/null || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
head -c 400000 "$MP_BUILDDIR/validation/kjv.txt" > "$SCRATCH/kjv.txt"

# attr FILE NAME: a root attribute's value, as h5dump prints it
attr() { h5dump -a "/$2" "$1" 2>/dev/null | sed -n 's/^ *(0): //p' | tr -d '"'; }
# ids FILE: its /train then /val as uint16 LE into FILE.ids
ids() {
    h5dump -d /train -b LE -o "$1.train" "$1" > /dev/null && h5dump -d /val -b LE -o "$1.val" "$1" > /dev/null &&
        cat "$1.train" "$1.val" > "$1.ids"
}

for t in unigram bpe; do
    f=$SCRATCH/$t.h5
    "$MINDPIPE" prep --tokenizer sp --vocab-size 1000 --sp-model $t --text "$SCRATCH/kjv.txt" --out "$f" \
        > "$SCRATCH/prep.out" 2>&1
    ok $? "prep --tokenizer sp --vocab-size 1000 --sp-model $t"
    sed 's/^/#   /' "$SCRATCH/prep.out"
    [ "$(attr "$f" tokenizer)" = sp ] && [ "$(attr "$f" vocab)" = 1000 ]
    ok $? "$t: attributes tokenizer sp, vocab 1000"
    h5dump -d /tokenizer/sp_model -b LE -o "$SCRATCH/$t.model" "$f" > /dev/null &&
        [ "$(sha256sum < "$SCRATCH/$t.model" | cut -c1-64)" = "$(attr "$f" tokenizer_sha256)" ]
    ok $? "$t: sha256sum of /tokenizer/sp_model ($(wc -c < "$SCRATCH/$t.model") bytes) is tokenizer_sha256"
    "$MINDPIPE" prep --tokenizer sp --vocab-size 1000 --sp-model $t --text "$SCRATCH/kjv.txt" --out "$SCRATCH/again.h5" \
        > /dev/null 2>&1 && [ "$(attr "$SCRATCH/again.h5" tokenizer_sha256)" = "$(attr "$f" tokenizer_sha256)" ]
    ok $? "$t: a second training gives the same model bytes"
    "$MINDPIPE" prep --tokenizer sp --sp-model-file "$SCRATCH/$t.model" --text "$SCRATCH/kjv.txt" \
        --out "$SCRATCH/applied.h5" > "$SCRATCH/prep.out" 2>&1 && ids "$f" && ids "$SCRATCH/applied.h5" &&
        cmp -s "$f.ids" "$SCRATCH/applied.h5.ids" && [ -s "$f.ids" ]
    ok $? "$t: the stored model, applied with --sp-model-file, gives the same $(($(wc -c < "$f.ids") / 2)) ids"
    sed 's/^/#   /' "$SCRATCH/prep.out"
done

# a text SentencePiece would give back changed (U+2581 decodes as a space) is refused, naming the byte
printf 'in the beginning \342\226\201 God\n' > "$SCRATCH/mark.txt"
"$MINDPIPE" prep --tokenizer sp --sp-model-file "$SCRATCH/unigram.model" --text "$SCRATCH/mark.txt" \
    --out "$SCRATCH/x.h5" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "at byte 17 does not decode back" "$SCRATCH/err" && grep -q "mark.txt" "$SCRATCH/err" &&
    [ ! -e "$SCRATCH/x.h5" ]
ok $? "a text that would not decode back exactly is refused, naming the file and byte (exit $rc)"
sed 's/^/#   /' "$SCRATCH/err"

for n in 70000 100; do
    "$MINDPIPE" prep --tokenizer sp --vocab-size $n --text "$SCRATCH/kjv.txt" --out "$SCRATCH/x.h5" > "$SCRATCH/err" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--vocab-size $n: must be in \[260, 65536\]" "$SCRATCH/err" && [ ! -e "$SCRATCH/x.h5" ]
    ok $? "--vocab-size $n refused naming the range (exit $rc)"
    sed 's/^/#   /' "$SCRATCH/err"
done
printf 'not a model' > "$SCRATCH/corrupt.model"
"$MINDPIPE" prep --tokenizer sp --sp-model-file "$SCRATCH/corrupt.model" --text "$SCRATCH/kjv.txt" \
    --out "$SCRATCH/x.h5" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "corrupt.model: not a SentencePiece model" "$SCRATCH/err" && [ ! -e "$SCRATCH/x.h5" ]
ok $? "a corrupt --sp-model-file is refused naming the file (exit $rc)"
sed 's/^/#   /' "$SCRATCH/err"

"$MINDPIPE" train -c "$MP_SRCDIR/validation/decks/train.ini" --set data.path="$SCRATCH/unigram.h5" --set model.vocab=1000 \
    --set train.steps=2 --set train.warmup=1 --set train.eval_every=2 --quiet --out "$SCRATCH/run" > "$SCRATCH/train.out" 2>&1
ok $? "an sp token file trains (model.vocab = 1000, 2 steps)"
sed 's/^/#   /' "$SCRATCH/train.out" | tail -n 5

# generate decodes with the model the checkpoint's run trained on: by default from the deck's
# data.path, else from --tokenizer-dir naming a token file or .model file; another model is refused
ck=$(ls "$SCRATCH"/run/ckpt/step_*.h5 | tail -n 1)
"$MINDPIPE" inspect "$ck" > "$SCRATCH/inspect.out" 2>&1 &&
    grep -qx "tokenizer sp (tokenizer_sha256 $(attr "$SCRATCH/unigram.h5" tokenizer_sha256))" "$SCRATCH/inspect.out"
ok $? "inspect names the checkpoint's tokenizer: $(grep '^tokenizer' "$SCRATCH/inspect.out")"
gen() { "$MINDPIPE" generate -c "$MP_SRCDIR/validation/decks/train.ini" --set model.vocab=1000 --ckpt "$ck" \
            --prompt "And God said" --max-tokens 12 "$@"; }
gen > "$SCRATCH/gen.out" 2> "$SCRATCH/gen.err"; rc=$?
n_prompt=$(sed -n 's/.*after a prompt of \([0-9]*\) .*/\1/p' "$SCRATCH/gen.err")
[ $rc -eq 0 ] && [ -s "$SCRATCH/gen.out" ] && [ -n "$n_prompt" ] && [ "$n_prompt" -lt 12 ]
ok $? "generate on the sp checkpoint encodes with the token file's model (12 bytes, $n_prompt tokens) and decodes (exit $rc): '$(head -c 60 "$SCRATCH/gen.out" | tr '\n' ' ')'"
sed 's/^/#   /' "$SCRATCH/gen.err" | tail -n 3
gen --tokenizer-dir "$SCRATCH/unigram.model" > "$SCRATCH/gen2.out" 2> /dev/null && cmp -s "$SCRATCH/gen.out" "$SCRATCH/gen2.out"
ok $? "--tokenizer-dir the .model file gives the same text"
gen --tokenizer-dir "$SCRATCH/bpe.h5" > "$SCRATCH/gen3.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "tokenizer_sha256 $(attr "$SCRATCH/unigram.h5" tokenizer_sha256)" "$SCRATCH/gen3.out" &&
    grep -q "bpe.h5 has $(attr "$SCRATCH/bpe.h5" tokenizer_sha256)" "$SCRATCH/gen3.out"
ok $? "another sp model (the bpe token file) is refused naming both digests (exit $rc)"
sed 's/^/#   /' "$SCRATCH/gen3.out"

# export --format hf writes the checkpoint's SentencePiece model as tokenizer.model: by default from the
# deck's data.path, refused (nothing written) when --tokenizer-dir names another model
hfx() { "$MINDPIPE" export --format hf -c "$MP_SRCDIR/validation/decks/train.ini" --set model.vocab=1000 \
            --set data.path="$SCRATCH/unigram.h5" --ckpt "$ck" "$@"; }
hfx --out "$SCRATCH/hf" > "$SCRATCH/hf.out" 2>&1; rc=$?
[ $rc -eq 0 ] && [ -n "$(attr "$ck" state/tokenizer_sha256)" ] &&
    [ "$(sha256sum < "$SCRATCH/hf/tokenizer.model" | cut -c1-64)" = "$(attr "$ck" state/tokenizer_sha256)" ] &&
    cmp -s "$SCRATCH/hf/tokenizer.model" "$SCRATCH/unigram.model" && [ ! -e "$SCRATCH/hf/vocab.json" ] &&
    grep -q "tokenizer.model (SentencePiece)" "$SCRATCH/hf.out"
ok $? "export --format hf: tokenizer.model, whose sha256sum is the checkpoint's tokenizer_sha256 (exit $rc)"
sed 's/^/#   /' "$SCRATCH/hf.out"
hfx --tokenizer-dir "$SCRATCH/bpe.h5" --out "$SCRATCH/hf2" > "$SCRATCH/hf.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "bpe.h5 has $(attr "$SCRATCH/bpe.h5" tokenizer_sha256)" "$SCRATCH/hf.out" &&
    [ ! -e "$SCRATCH/hf2" ]
ok $? "export --format hf with another sp model refused, nothing written (exit $rc)"
mv "$SCRATCH/unigram.h5" "$SCRATCH/moved.h5"
gen > "$SCRATCH/gen4.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "unigram.h5" "$SCRATCH/gen4.out" && grep -q -- "--tokenizer-dir" "$SCRATCH/gen4.out"
ok $? "with the token file gone, generate names it and asks for --tokenizer-dir (exit $rc)"
sed 's/^/#   /' "$SCRATCH/gen4.out"
done_testing
