#!/bin/sh
# `mindpipe prep --tokenizer hf:DIR` with SentencePiece-style BPE tokenizer.json files (U+2581 for
# ' ', byte_fallback: Llama 2, TinyLlama, Mistral) against @huggingface/tokenizers (npm), id for id,
# 0 differences allowed. The files are built here from a vocabulary of <unk> <s> </s>, the 256
# <0xXX> pieces, U+2581, printable ASCII and 400 merges learnt from the Bible's start
# (validation/tokenizer/hf_sp_build.py; nothing is downloaded), in both published forms:
#   norm    tokenizers < 0.14: normalizer Sequence[Prepend U+2581, Replace ' ' -> U+2581],
#           pre_tokenizer null, fuse_unk, decoder Sequence[Replace, ByteFallback, Fuse, Strip 1 0];
#   unk     norm's without byte_fallback (a run of unknown characters is one <unk>: fuse_unk);
#   meta    newer: pre_tokenizer Metaspace (prepend_scheme first, split false), norm's decoder;
#   always  Metaspace with prepend_scheme always, decoder Metaspace; never: prepend_scheme never.
# Checked: (a) the ids of the King James Bible, the adversarial corpus and a text of added tokens
# (the U+2581 before each stretch between them: Prepend's always, Metaspace first's only at the
# text's start; the Bible whole for norm and meta, its first 400000 bytes for the others) equal the
# reference's; (b) the reference decodes those ids back to the text where its decoder gives the text
# back (norm: not after an added token, where Prepend put a U+2581 the text lacks; unk: lossy;
# always: its Metaspace decoder leaves <0xXX> as text; a leading ' ' or a U+2581 of the text's own
# comes back otherwise); (c) the fuse_unk
# check can fail (the reference without fuse_unk differs); (d) each variant not read is refused
# with exit 1 naming the file and the key; (e) generate on a model trained 2 steps on norm's tokens
# prints no U+2581 and no <0xXX> as text; (f) normalized added tokens beside the normalizer, found
# after it by their normalized contents, id for id. tok_decode itself: validation/unit/test_tok_hf.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
npm_dir=${MINDPIPE_NPM_DIR:-$HOME/.cache/mindpipe/npm}
if ! command -v node >/dev/null 2>&1 || [ ! -d "$npm_dir/node_modules/@huggingface/tokenizers" ]; then
    echo "not ok 1 - node or @huggingface/tokenizers ($npm_dir) missing: bash .ci/deps.sh installs them"
    echo "1..1"; exit 1
fi
mp_test_data > /dev/null || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
kjv="$MP_BUILDDIR/validation/kjv.txt"
adv="$MP_SRCDIR/validation/tokenizer/adversarial.txt"
mp_scratch_init
checker="$MP_SRCDIR/validation/tokenizer/hf_check.cjs"

check() {  # check MODE ARGS...: hf_check.cjs MODE as TAP
    node "$checker" "$@" > "$SCRATCH/check.out" 2>&1
    tap_checker hf hf_check.cjs $? "$SCRATCH/check.out"
}
# variant NAME FROM NODE_EXPR: $SCRATCH/NAME/tokenizer.json = FROM's, changed by the expression on `j`
variant() {
    mkdir -p "$SCRATCH/$1"
    node -e 'const fs = require("fs"); let j = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
             eval(process.argv[2]); fs.writeFileSync(process.argv[3], JSON.stringify(j));' \
        "$SCRATCH/$2/tokenizer.json" "$3" "$SCRATCH/$1/tokenizer.json"
}

# ---- the tokenizers and the texts ----
for style in norm unk meta always; do
    python3 "$MP_SRCDIR/validation/tokenizer/hf_sp_build.py" $style "$kjv" "$SCRATCH/$style" > "$SCRATCH/build.out" 2>&1
    ok $? "hf_sp_build.py $style: $(cat "$SCRATCH/build.out")"
done
variant never meta 'j.pre_tokenizer.prepend_scheme = "never"'
ok $? "the never variant: meta's with prepend_scheme never"
# added tokens at the start, back to back, inside words, among spaces, and text starting with spaces
{
    for i in 1 2 3; do
        printf '<s>In the beginning</s> MindPipe  x<s>\n<unk>y<s> z </s>aMindPipeb lead <0x41>\n'
        printf "it's  IT'S caf\303\251 \344\270\255\346\226\207 \360\237\230\200 %s\n" "$i"
    done
    printf '  two spaces first<s> and</s>  '
} > "$SCRATCH/added_body.txt"
{ printf '  '; cat "$SCRATCH/added_body.txt"; printf '\342\226\201lead \342\226\201 x'; } > "$SCRATCH/added.txt"
{ printf 'MindPipe first\n'; cat "$SCRATCH/added_body.txt"; } > "$SCRATCH/added2.txt"

head -c 400000 "$kjv" > "$SCRATCH/kjv_head.txt" # the styles but norm and meta: the Bible's start (time)

# ---- (a) id for id; (b) the reference's decoding of our ids ----
for style in norm unk meta always never; do
    case $style in norm|meta) bible=$kjv ;; *) bible="$SCRATCH/kjv_head.txt" ;; esac
    for t in "$bible" "$adv" "$SCRATCH/added.txt" "$SCRATCH/added2.txt"; do
        name="$style-$(basename "$t" .txt)"
        mp_hf_prep_ids "$name" "$t" "$SCRATCH/$style"
        check ids "$SCRATCH/$style" "$t" "$SCRATCH/$name.ids" "$name"
    done
done
# Not the adversarial corpus: the reference's ByteFallback decodes each run of <0xXX> with a
# TextDecoder, which drops a U+FEFF that starts one; nor added.txt: its leading ' ' goes by Strip.
for name in norm-kjv meta-kjv meta-added2 never-kjv_head; do
    case $name in *kjv) t=$kjv ;; *) t="$SCRATCH/${name#*-}.txt" ;; esac
    check decode "$SCRATCH/${name%%-*}" "$SCRATCH/$name.ids" "$t" "$name decoded"
done

# ---- normalized added tokens beside a normalizer: found in each stretch after Prepend and Replace,
# by their contents normalized too ("MindPipe" only where "\u2581MindPipe" stands: after a ' ' or at a
# stretch's start, not inside "aMindPipeb"; "the LORD" as "\u2581the\u2581LORD"), after the text's own
# added tokens; the library's order (tokenizers' AddedVocabulary) ----
variant normtok norm 'j.added_tokens[3].normalized = true;
    j.added_tokens.push({id: Math.max(...Object.values(j.model.vocab)) + 1, content: "the LORD", single_word: false,
                         lstrip: false, rstrip: false, normalized: true, special: false})'
ok $? "the normtok variant: norm's with MindPipe normalized and a normalized 'the LORD' (a space inside)"
printf 'the LORD said  the LORD<s>the LORD\nof the LORDS, MindPipe,MindPipe the  LORD</s> MindPipe' > "$SCRATCH/normtok.txt"
for t in "$SCRATCH/kjv_head.txt" "$SCRATCH/added.txt" "$SCRATCH/added2.txt" "$SCRATCH/normtok.txt"; do
    name="normtok-$(basename "$t" .txt)"
    mp_hf_prep_ids "$name" "$t" "$SCRATCH/normtok"
    check ids "$SCRATCH/normtok" "$t" "$SCRATCH/$name.ids" "$name"
done
# the check can fail: the same tokens found in the text as it is (normalized false) give other ids
variant rawtok normtok 'j.added_tokens[3].normalized = false; j.added_tokens[4].normalized = false'
node "$checker" ids "$SCRATCH/rawtok" "$SCRATCH/normtok.txt" "$SCRATCH/normtok-normtok.ids" rawtok > "$SCRATCH/rawtok.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL rawtok" "$SCRATCH/rawtok.out"
ok $? "the normalized tokens' ids differ from the reference's with the same tokens not normalized (exit $rc)"
sed 's/^/#   /' "$SCRATCH/rawtok.out" | cut -c1-300

# ---- generate on a checkpoint of norm's tokens: the completion decoded as the decoder does ----
vocab=$(h5dump -a /vocab "$SCRATCH/norm-kjv.h5" 2>/dev/null | sed -n 's/^ *(0): //p')
"$MINDPIPE" train -c "$MP_SRCDIR/validation/decks/train.ini" --set data.path="$SCRATCH/norm-kjv.h5" --set model.vocab="$vocab" \
    --set train.steps=2 --set train.warmup=1 --set train.eval_every=2 --quiet --out "$SCRATCH/run" > "$SCRATCH/train.out" 2>&1
ok $? "a token file of norm's trains (model.vocab = $vocab, 2 steps)"
sed 's/^/#   /' "$SCRATCH/train.out" | tail -n 3
ck=$(ls "$SCRATCH"/run/ckpt/step_*.h5 2>/dev/null | tail -n 1)
"$MINDPIPE" generate -c "$MP_SRCDIR/validation/decks/train.ini" --set model.vocab="$vocab" --ckpt "$ck" --prompt "And God said" \
    --max-tokens 60 > "$SCRATCH/gen.out" 2> "$SCRATCH/gen.err"; rc=$?
[ $rc -eq 0 ] && [ -s "$SCRATCH/gen.out" ] && ! grep -q "$(printf '\342\226\201')" "$SCRATCH/gen.out" && ! grep -q '<0x' "$SCRATCH/gen.out"
ok $? "generate: the completion decoded, no U+2581 and no '<0x' in them: '$(tr '\n' ' ' < "$SCRATCH/gen.out" | head -c 60)' (exit $rc)"
sed 's/^/#   /' "$SCRATCH/gen.err"

# ---- (c) fuse_unk matters: the reference without it differs from our (fused) ids ----
variant nofuse unk 'j.model.fuse_unk = false'
node "$checker" ids "$SCRATCH/nofuse" "$adv" "$SCRATCH/unk-adversarial.ids" nofuse > "$SCRATCH/nofuse.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL nofuse" "$SCRATCH/nofuse.out"
ok $? "the adversarial corpus's ids under unk (fuse_unk) differ from the reference's without fuse_unk (exit $rc)"
sed 's/^/#   /' "$SCRATCH/nofuse.out" | cut -c1-300

# ---- (d) refusals: exit 1 naming the file and the key, nothing written ----
# refuse NAME FROM NODE_EXPR WANT
refuse() {
    variant "bad-$1" "$2" "$3" || { ok 1 "refusal $1: the file could not be made"; return; }
    "$MINDPIPE" prep --tokenizer "hf:$SCRATCH/bad-$1" --text "$adv" --out "$SCRATCH/bad.h5" > "$SCRATCH/err" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q "bad-$1/tokenizer.json" "$SCRATCH/err" && grep -q -- "$4" "$SCRATCH/err" && [ ! -e "$SCRATCH/bad.h5" ]
    ok $? "refusal $1: exit 1 naming the file and '$4' (exit $rc)"
    sed 's/^/#   /' "$SCRATCH/err" | cut -c1-300
}
refuse nfc norm 'j.normalizer = {type: "NFC"}' 'normalizer type "NFC" is not supported'
refuse nfkc norm 'j.normalizer.normalizers.unshift({type: "NFKC"})' 'normalizer type "NFKC" is not supported'
refuse lowercase norm 'j.normalizer.normalizers.push({type: "Lowercase"})' 'normalizer type "Lowercase" is not supported'
refuse prepend norm 'j.normalizer.normalizers[0].prepend = " "' 'normalizer Prepend: prepend is not'
refuse replace norm 'j.normalizer.normalizers[1].pattern = {Regex: " +"}' 'normalizer Replace: only pattern'
refuse split meta 'j.pre_tokenizer.split = true' 'pre_tokenizer Metaspace: split is not false'
refuse legacy meta 'delete j.pre_tokenizer.prepend_scheme; delete j.pre_tokenizer.split; j.pre_tokenizer.add_prefix_space = true' \
    'pre_tokenizer Metaspace: split is not false'
refuse scheme meta 'j.pre_tokenizer.prepend_scheme = "sometimes"' 'prepend_scheme is not "first", "always" or "never"'
refuse metaseq meta 'j.pre_tokenizer = {type: "Sequence", pretokenizers: [j.pre_tokenizer]}' 'Metaspace is supported only alone'
refuse metanorm norm 'j.pre_tokenizer = {type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false}' \
    'Metaspace is supported only alone, with normalizer null'
refuse strip norm 'j.decoder.decoders[3].stop = 1' 'decoders\[3\] Strip: only content'
refuse decoder norm 'j.decoder.decoders.splice(1, 0, {type: "WordPiece"})' 'decoders\[1\] "WordPiece" is not supported'
refuse bytelevel meta 'j.decoder = {type: "ByteLevel"}' 'decoder type "ByteLevel" is not supported'
done_testing
