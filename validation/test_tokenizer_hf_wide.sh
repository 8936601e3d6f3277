#!/bin/sh
# `mindpipe prep --tokenizer hf:DIR` with vocabularies above 65536 ids (Llama-3's 128256, Qwen2's
# 151936): the ids are uint32 from the tokenizer to the data file. The tokenizer.json files are
# built here (validation/tokenizer/hf_wide.py, from GPT-2's encoder.json and vocab.bpe: nothing is
# downloaded): GPT-2's vocabulary and merges in Llama-3's style (Split with Llama-3's pattern, then
# ByteLevel, ignore_merges), its ids past the 256 bytes moved up by SHIFT unused filler tokens and
# reversed, so that the common tokens take the highest ids, and one added token <|wide|> at the
# last id. Checked: (a) a vocabulary of 70258 writes uint32 /train and /val (h5py), the boundary
# 65536 still uint16 and 65537 uint32, and a small one (50258) uint16 as before; (b) the ids equal
# @huggingface/tokenizers' (validation/tokenizer/hf_check.cjs, as test_tokenizer_hf.sh), ids above
# 65535 among them; (c) a tiny model with model.vocab = 70258 trains 3 steps on that file with
# finite losses, and generate encodes a prompt of such ids and decodes its completion; (d) an id of
# 1048576, beyond what a deck's model.vocab holds, is refused naming the key, and a file of 70258
# ids is refused by a deck of model.vocab 65536.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
npm_dir=${MINDPIPE_NPM_DIR:-$HOME/.cache/mindpipe/npm}
gpt2_dir=${MINDPIPE_GPT2_DIR:-$HOME/.cache/mindpipe/gpt2}
if ! command -v node >/dev/null 2>&1 || [ ! -d "$npm_dir/node_modules/@huggingface/tokenizers" ] || [ ! -s "$gpt2_dir/vocab.bpe" ]; then
    echo "not ok 1 - node, @huggingface/tokenizers ($npm_dir) or GPT-2's vocabulary ($gpt2_dir) missing: bash .ci/deps.sh installs them"
    echo "1..1"; exit 1
fi
mp_require_h5py
mp_test_data > /dev/null || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
kjv="$MP_BUILDDIR/validation/kjv.txt"
adv="$MP_SRCDIR/validation/tokenizer/adversarial.txt"
mp_scratch_init
checker="$MP_SRCDIR/validation/tokenizer/hf_check.cjs"
py() { "$TORCH_PYTHON" "$@"; }

# build NAME SHIFT: $SCRATCH/NAME/tokenizer.json of 50258 + SHIFT ids
build() {
    py "$MP_SRCDIR/validation/tokenizer/hf_wide.py" "$gpt2_dir" "$2" "$SCRATCH/$1" > "$SCRATCH/build.out" 2>&1
    ok $? "hf_wide.py: a tokenizer.json of $((50258 + $2)) ids ($1)"
    sed 's/^/#   /' "$SCRATCH/build.out"
}
# prep NAME TEXT DIR: prep TEXT with hf:DIR into $SCRATCH/NAME.h5 (its output in $SCRATCH/prep.out)
prep() { "$MINDPIPE" prep --tokenizer "hf:$3" --text "$2" --out "$SCRATCH/$1.h5" > "$SCRATCH/prep.out" 2>&1; }
# dtype NAME: the numpy dtypes of NAME.h5's /train and /val and its vocab attribute
dtype() { py -c 'import h5py, sys
f = h5py.File(sys.argv[1], "r"); print(f["train"].dtype.str, f["val"].dtype.str, int(f.attrs["vocab"]))' "$SCRATCH/$1.h5"; }
# ids NAME: /train then /val of NAME.h5 as little-endian ids of their own width into NAME.ids
ids() { h5dump -d /train -b LE -o "$SCRATCH/$1.train" "$SCRATCH/$1.h5" > /dev/null &&
        h5dump -d /val -b LE -o "$SCRATCH/$1.val" "$SCRATCH/$1.h5" > /dev/null &&
        cat "$SCRATCH/$1.train" "$SCRATCH/$1.val" > "$SCRATCH/$1.ids"; }

build wide 20000
build small 0
build edge16 15278
build edge32 15279

# ---- the texts: the King James Bible's first 300 kB, the adversarial corpus, the added token ----
head -c 300000 "$kjv" > "$SCRATCH/kjv.txt"
{
    for i in 1 2 3 4; do
        printf 'And God said<|wide|>Let there be light<|endoftext|><|wide|> <|wide<|wide|>|>%s\n' "$i"
    done
    head -c 3000 "$adv"
} > "$SCRATCH/added.txt"

# ---- (a) the width of the data file follows the vocabulary ----
prep wide-kjv "$SCRATCH/kjv.txt" "$SCRATCH/wide"
ok $? "prep --tokenizer hf: of 70258 ids succeeds"
sed 's/^/#   /' "$SCRATCH/prep.out"
got=$(dtype wide-kjv)
[ "$got" = "<u4 <u4 70258" ]
ok $? "a vocabulary of 70258: /train and /val are uint32 little-endian, vocab 70258 (got '$got')"
got=; prep small-kjv "$SCRATCH/kjv.txt" "$SCRATCH/small" && got=$(dtype small-kjv) && [ "$got" = "<u2 <u2 50258" ]
ok $? "a vocabulary of 50258: /train and /val are uint16 as before (got '$got')"
got=; prep edge16 "$SCRATCH/added.txt" "$SCRATCH/edge16" && got=$(dtype edge16) && [ "$got" = "<u2 <u2 65536" ]
ok $? "a vocabulary of exactly 65536 ids: uint16 (got '$got')"
got=; prep edge32 "$SCRATCH/added.txt" "$SCRATCH/edge32" && got=$(dtype edge32) && [ "$got" = "<u4 <u4 65537" ]
ok $? "a vocabulary of 65537 ids: uint32 (got '$got')"
got=; "$MINDPIPE" prep --text "$SCRATCH/added.txt" --out "$SCRATCH/bytes.h5" > /dev/null 2>&1 && got=$(dtype bytes) &&
    [ "$got" = "<u2 <u2 256" ]
ok $? "the bytes tokenizer: uint16, vocab 256, as before (got '$got')"

# ---- (b) id for id against @huggingface/tokenizers, uint32 and uint16 ----
# check NAME TEXT DIR WIDTH: prep NAME, its ids against the reference's
check() {
    prep "$1" "$2" "$3" && ids "$1"
    ok $? "prep and read back $1"
    node "$checker" ids "$3" "$2" "$SCRATCH/$1.ids" "$1" "$4" > "$SCRATCH/check.out" 2>&1
    tap_checker hf hf_check.cjs $? "$SCRATCH/check.out"
}
ids wide-kjv
node "$checker" ids "$SCRATCH/wide" "$SCRATCH/kjv.txt" "$SCRATCH/wide-kjv.ids" wide-kjv 4 > "$SCRATCH/check.out" 2>&1
tap_checker hf hf_check.cjs $? "$SCRATCH/check.out"
check wide-adv "$adv" "$SCRATCH/wide" 4
check wide-added "$SCRATCH/added.txt" "$SCRATCH/wide" 4
check small-added "$SCRATCH/added.txt" "$SCRATCH/small" 2
ids small-kjv
node "$checker" ids "$SCRATCH/small" "$SCRATCH/kjv.txt" "$SCRATCH/small-kjv.ids" small-kjv 2 > "$SCRATCH/check.out" 2>&1
tap_checker hf hf_check.cjs $? "$SCRATCH/check.out"
# the ids above uint16 are really there: most of the Bible's tokens, and <|wide|> (70257)
got=$(py -c 'import numpy, sys
a = numpy.fromfile(sys.argv[1], "<u4"); b = numpy.fromfile(sys.argv[2], "<u4")
print(int((a > 65535).sum()), len(a), int(a.max()), int((b == 70257).sum()))' "$SCRATCH/wide-kjv.ids" "$SCRATCH/wide-added.ids")
set -- $got
[ "${1:-0}" -gt $((${2:-0} / 2)) ] && [ "${3:-0}" -le 70257 ] && [ "${4:-0}" -eq 12 ]
ok $? "ids above 65535: $1 of the Bible's $2 (largest $3), <|wide|> (70257) 12 times in the added text"

# ---- (c) a tiny model of model.vocab 70258 trains on the uint32 file; generate encodes and decodes ----
deck="$MP_SRCDIR/validation/decks/train.ini"
"$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/wide-kjv.h5" --set model.vocab=70258 --set train.steps=3 \
    --set train.warmup=1 --set train.log_every=1 --set train.eval_every=3 --set checkpoint.every=3 --quiet \
    --out "$SCRATCH/run" > "$SCRATCH/train.out" 2>&1
ok $? "a tiny model (model.vocab = 70258) trains 3 steps on the uint32 token file"
sed 's/^/#   /' "$SCRATCH/train.out" | tail -n 5
py -c 'import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
loss = [r["loss"] for r in rows]
print("#   losses", loss, "val_loss", [r["val_loss"] for r in rows if "val_loss" in r], "ln V", math.log(70258))
sys.exit(0 if len(loss) == 3 and all(math.isfinite(x) and 0 < x < 2 * math.log(70258) for x in loss) else 1)' \
    "$SCRATCH/run/metrics.jsonl"
ok $? "its 3 losses are finite (near ln 70258 = 11.16)"
ck=$(ls "$SCRATCH"/run/ckpt/step_*.h5 2>/dev/null | tail -n 1)
"$MINDPIPE" generate -c "$deck" --set model.vocab=70258 --ckpt "$ck" --prompt "And God said" --max-tokens 4 \
    > "$SCRATCH/gen.out" 2> "$SCRATCH/gen.err"
rc=$?
[ $rc -eq 0 ] && grep -q "generated 4 tokens after a prompt of 3 " "$SCRATCH/gen.err" && [ -s "$SCRATCH/gen.out" ]
ok $? "generate on it: 'And God said' is 3 tokens (' God' is 68719), 4 decoded: '$(tr '\n' ' ' < "$SCRATCH/gen.out" | head -c 60)' (exit $rc)"
sed 's/^/#   /' "$SCRATCH/gen.err"

# ---- (d) refusals ----
"$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/wide-kjv.h5" --set model.vocab=65536 --set train.steps=1 --set train.warmup=1 \
    --quiet --out "$SCRATCH/run2" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "70258" "$SCRATCH/err" && grep -q "model.vocab" "$SCRATCH/err"
ok $? "a deck of model.vocab 65536 refuses the file of 70258 ids naming model.vocab (exit $rc)"
sed 's/^/#   /' "$SCRATCH/err" | head -n 3 | cut -c1-300
mkdir -p "$SCRATCH/huge"
py -c 'import json, sys
j = json.load(open(sys.argv[1])); j["model"]["vocab"]["zz"] = 1048576
json.dump(j, open(sys.argv[2], "w"))' "$SCRATCH/small/tokenizer.json" "$SCRATCH/huge/tokenizer.json"
"$MINDPIPE" prep --tokenizer "hf:$SCRATCH/huge" --text "$adv" --out "$SCRATCH/huge.h5" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q 'huge/tokenizer.json: model.vocab\["zz"\] is not an id in 0..1048575' "$SCRATCH/err" &&
    grep -q "model.vocab is at most 1048576" "$SCRATCH/err" && ! grep -q "uint16" "$SCRATCH/err" && [ ! -e "$SCRATCH/huge.h5" ]
ok $? "an id of 1048576 is refused naming model.vocab[\"zz\"] and the deck's limit, not uint16 (exit $rc)"
sed 's/^/#   /' "$SCRATCH/err" | cut -c1-300
done_testing
