#!/bin/sh
# `mindpipe prep --tokenizer hf:DIR` (a Hugging Face tokenizer.json, src/tok/tok_hf.h) against
# @huggingface/tokenizers (npm, .ci/deps.sh), id for id, 0 differences allowed, with tokenizer.json
# files the test builds itself from GPT-2's encoder.json and vocab.bpe (validation/tokenizer/
# hf_build.cjs; nothing is downloaded): GPT-2-style (ByteLevel's own pattern, merges "a b"),
# Llama-3-style (Split with Llama-3's pattern, merges as pairs, ignore_merges, special and plain
# added tokens), Qwen2-style (its pattern: one number a piece), SmolLM2-style (Digits then
# ByteLevel) and one without ByteLevel whose characters
# outside printable ASCII take byte_fallback's <0xXX>, each on (a) the King James Bible, (b) the
# committed adversarial corpus, (c) corpora fuzzed from a fixed seed (tiktoken_check.cjs corpus) and
# (d) a text thick with added tokens and pieces of them. The fuzzed corpora lose the few thousand
# code points whose class differs between node's RegExp and the Rust libraries' (hf_check.cjs). Invalid UTF-8 cannot reach the JS library
# unchanged (hf_check.cjs): it is not compared. The checker is checked (one planted id must fail
# it). Also: the token file's attributes and stored tokenizer.json, hf:DIR with a tokenizer.model
# (the sp path), and malformed tokenizer.json files refused with exit 1 naming the file and the key.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
npm_dir=${MINDPIPE_NPM_DIR:-$HOME/.cache/mindpipe/npm}
gpt2_dir=${MINDPIPE_GPT2_DIR:-$HOME/.cache/mindpipe/gpt2}
if ! command -v node >/dev/null 2>&1 || [ ! -d "$npm_dir/node_modules/@huggingface/tokenizers" ] || [ ! -s "$gpt2_dir/vocab.bpe" ]; then
    echo "not ok 1 - node, @huggingface/tokenizers ($npm_dir) or GPT-2's vocabulary ($gpt2_dir) missing: bash .ci/deps.sh installs them"
    echo "1..1"; exit 1
fi
mp_test_data > /dev/null || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
kjv="$MP_BUILDDIR/validation/kjv.txt"
adv="$MP_SRCDIR/validation/tokenizer/adversarial.txt"
mp_scratch_init
checker="$MP_SRCDIR/validation/tokenizer/hf_check.cjs"

check() {
    node "$checker" ids "$@" > "$SCRATCH/check.out" 2>&1
    tap_checker hf hf_check.cjs $? "$SCRATCH/check.out"
}
attr() { h5dump -a "/$2" "$1" 2>/dev/null | sed -n 's/^ *(0): //p' | tr -d '"'; }

# ---- the tokenizers and the texts ----
for style in gpt2 llama3 qwen2 digits fallback; do
    node "$MP_SRCDIR/validation/tokenizer/hf_build.cjs" "$style" "$gpt2_dir" "$SCRATCH/$style" > "$SCRATCH/build.out" 2>&1
    ok $? "hf_build.cjs $style: a tokenizer.json built from GPT-2's files"
    sed 's/^/#   /' "$SCRATCH/build.out"
done
node "$MP_SRCDIR/validation/tokenizer/tiktoken_check.cjs" corpus "$SCRATCH/fuzz" 20261207 > "$SCRATCH/corpus.out" 2>&1
tap_checker corpus tiktoken_check.cjs $? "$SCRATCH/corpus.out"
# the fuzzed corpora less the characters the two sides class differently (hf_check.cjs says why)
for f in mix every bytes; do
    node "$checker" filter "$MP_SRCDIR/src/tok/unicode_gpt2.c" "$SCRATCH/fuzz/$f.txt" "$SCRATCH/fuzz/$f.f.txt" > "$SCRATCH/check.out" 2>&1
    tap_checker hf hf_check.cjs $? "$SCRATCH/check.out"
done
# (d): the added tokens, whole, back to back, cut short, inside words and among white space
{
    for i in 1 2 3 4 5 6 7 8; do
        printf '<|begin_of_text|>Hello<|eot_id|> <|eot_id|>\n\n<|start_header_id|>user<|end_header_id|>\n\n'
        printf 'aMindPipeb MindPipe  MindPipes<|eot_id<|endoftext|><|endoftext|>|> <|<|end_of_text|>%s\n' "$i"
        printf "it's IT'S We'LL 1234567 \r\n\r\n  \t<|eot_id|>\t x\n"
    done
} > "$SCRATCH/added_ascii.txt"
{ cat "$SCRATCH/added_ascii.txt"; head -c 3000 "$adv"; } > "$SCRATCH/added.txt"
# one piece of 300000 bytes ('=' then ' x'): merged through the heap (tok_hf_encode.c)
{ head -c 300000 /dev/zero | tr '\0' '='; printf ' x\n'; } > "$SCRATCH/long.txt"

# ---- (a) to (d): id for id against @huggingface/tokenizers ----
# The digits style only on text whose numbers are ASCII digits: its Digits step isolates every
# character of \p{N} as the Rust library does (char::is_numeric), where the JS reference's \d is
# [0-9]; a fullwidth digit's isolation is checked below, against the tokens of its parts.
texts="$kjv $adv $SCRATCH/fuzz/mix.f.txt $SCRATCH/fuzz/every.f.txt $SCRATCH/fuzz/bytes.f.txt $SCRATCH/added.txt $SCRATCH/long.txt"
for style in gpt2 llama3 qwen2 digits fallback; do
    [ $style = qwen2 ] && texts="$kjv $adv $SCRATCH/fuzz/mix.f.txt $SCRATCH/added.txt"
    [ $style = digits ] && texts="$kjv $SCRATCH/added_ascii.txt"
    [ $style = fallback ] && texts="$adv $SCRATCH/added.txt $SCRATCH/fuzz/mix.f.txt"
    for t in $texts; do
        name="$style-$(basename "$t" .txt)"
        mp_hf_prep_ids "$name" "$t" "$SCRATCH/$style"
        check "$SCRATCH/$style" "$t" "$SCRATCH/$name.ids" "$name"
    done
done
# "a １２" (U+FF11, U+FF12) under Digits(individual_digits) then ByteLevel: the pieces "a", " ", "１",
# "２", each encoded by the reference on its own with the gpt2-style tokenizer (the same vocabulary)
node -e 'const { Tokenizer } = require(process.argv[1]); const fs = require("fs");
         const t = new Tokenizer(JSON.parse(fs.readFileSync(process.argv[2], "utf8")), {});
         const ids = ["a", " ", "１", "２"].flatMap((p) => t.encode(p, { add_special_tokens: false }).ids);
         const b = Buffer.alloc(2 * ids.length); ids.forEach((id, i) => b.writeUInt16LE(id, 2 * i));
         fs.writeFileSync(process.argv[3], b);' \
    "$npm_dir/node_modules/@huggingface/tokenizers/dist/tokenizers.cjs" "$SCRATCH/gpt2/tokenizer.json" "$SCRATCH/parts.ids"
printf 'a １２' > "$SCRATCH/wide.txt"
mp_hf_prep_ids wide "$SCRATCH/wide.txt" "$SCRATCH/digits"
cmp -s "$SCRATCH/wide.ids" "$SCRATCH/parts.ids"
ok $? "Digits(individual_digits) isolates the fullwidth digits of 'a １２' as \\p{N} (Rust's char::is_numeric)"

# ---- the checker fails when it should: one id changed at index 1000 ----
cp "$SCRATCH/llama3-kjv.ids" "$SCRATCH/planted.ids"
printf '\120\304' | dd of="$SCRATCH/planted.ids" bs=1 seek=2000 conv=notrunc 2> /dev/null
node "$checker" ids "$SCRATCH/llama3" "$kjv" "$SCRATCH/planted.ids" planted > "$SCRATCH/planted.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL planted: 1 ids differ .* first at index 1000" "$SCRATCH/planted.out"
ok $? "the checker fails on one planted difference, naming index 1000 (exit $rc)"
sed 's/^/#   /' "$SCRATCH/planted.out" | cut -c1-300

# ---- the token file's attributes and its stored tokenizer.json ----
want_sha=$(sha256sum < "$SCRATCH/llama3/tokenizer.json" | cut -c1-64)
[ "$(attr "$SCRATCH/llama3-kjv.h5" tokenizer)" = hf ] && [ "$(attr "$SCRATCH/llama3-kjv.h5" vocab)" = 50263 ] &&
    [ "$(attr "$SCRATCH/llama3-kjv.h5" tokenizer_sha256)" = "$want_sha" ]
ok $? "hf's attributes: tokenizer hf, vocab 50263, tokenizer_sha256 = sha256sum of tokenizer.json ($want_sha)"
h5dump -d /tokenizer/hf_json -b LE -o "$SCRATCH/stored.json" "$SCRATCH/llama3-kjv.h5" > /dev/null 2>&1 &&
    cmp -s "$SCRATCH/stored.json" "$SCRATCH/llama3/tokenizer.json"
ok $? "the token file stores tokenizer.json's bytes as /tokenizer/hf_json"

# ---- a checkpoint of hf tokens: generate decodes with its tokenizer and stops at its eos_token ----
"$MINDPIPE" train -c "$MP_SRCDIR/validation/decks/train.ini" --set data.path="$SCRATCH/llama3-kjv.h5" --set model.vocab=50263 \
    --set train.steps=2 --set train.warmup=1 --set train.eval_every=2 --quiet --out "$SCRATCH/run" > "$SCRATCH/train.out" 2>&1
ok $? "an hf token file trains (model.vocab = 50263, 2 steps)"
sed 's/^/#   /' "$SCRATCH/train.out" | tail -n 5
ck=$(ls "$SCRATCH"/run/ckpt/step_*.h5 | tail -n 1)
gen() { "$MINDPIPE" generate -c "$MP_SRCDIR/validation/decks/train.ini" --set model.vocab=50263 --ckpt "$ck" \
            --prompt "And God said" "$@"; }
gen --max-tokens 1 > "$SCRATCH/gen1.out" 2> "$SCRATCH/gen.err" && gen --max-tokens 6 > "$SCRATCH/gen6.out" 2>> "$SCRATCH/gen.err" &&
    grep -q "generated 6 tokens after a prompt of 3 " "$SCRATCH/gen.err" && [ -s "$SCRATCH/gen1.out" ]
ok $? "generate on the hf checkpoint (tokenizer from the deck's data.path): 'And God said' is 3 tokens, 6 generated: '$(tr '\n' ' ' < "$SCRATCH/gen6.out" | head -c 60)'"
sed 's/^/#   /' "$SCRATCH/gen.err"
# the greedy first token made the eos_token of a tokenizer_config.json beside the same tokenizer.json
mkdir -p "$SCRATCH/eosdir" && cp "$SCRATCH/llama3/tokenizer.json" "$SCRATCH/eosdir/"
node -e 'const fs = require("fs"); const bytes = fs.readFileSync(process.argv[1]); let next = 256, map = {};
         for (let b = 0; b < 256; b++) {
             const self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
             map[b] = String.fromCodePoint(self ? b : next++);
         }
         const name = Array.from(bytes).map((b) => map[b]).join("");
         fs.writeFileSync(process.argv[2], JSON.stringify({ eos_token: { content: name } }));' \
    "$SCRATCH/gen1.out" "$SCRATCH/eosdir/tokenizer_config.json"
gen --max-tokens 6 --tokenizer-dir "$SCRATCH/eosdir" > "$SCRATCH/gen0.out" 2> "$SCRATCH/gen.err"; rc=$?
[ $rc -eq 0 ] && [ ! -s "$SCRATCH/gen0.out" ] && grep -q "generated 0 tokens (the end-of-sequence token)" "$SCRATCH/gen.err"
ok $? "with that token as eos_token (--tokenizer-dir a directory), generate stops before it: nothing written (exit $rc)"
sed 's/^/#   /' "$SCRATCH/gen.err"
# serve: with that eos_token a completion ends before it (finish_reason "stop", nothing returned);
# without one it is generate's 6 tokens (finish_reason "length")
srv() {  # srv NAME [serve args]: one greedy completion of 'And God said', 6 tokens at most, as JSON in NAME.json
    srv_n=$1; shift
    "$MINDPIPE" serve -c "$MP_SRCDIR/validation/decks/train.ini" --set model.vocab=50263 --ckpt "$ck" --stages 1 \
        --slots 2 --listen 127.0.0.1:0 --out "$SCRATCH/$srv_n" "$@" > "$SCRATCH/$srv_n.log" 2>&1 &
    srv_pid=$!
    srv_url=$(mp_serve_url "$SCRATCH/$srv_n" $srv_pid)
    [ -n "$srv_url" ] && timeout 60 "$TORCH_PYTHON" - "$srv_url" > "$SCRATCH/$srv_n.json" 2>> "$SCRATCH/$srv_n.log" <<'PY'
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=50)
c.request("POST", "/v1/completions", body=json.dumps({"prompt": "And God said", "max_tokens": 6, "temperature": 0}),
          headers={"Content-Type": "application/json"})
r = c.getresponse()
print(json.dumps({"status": r.status, "body": json.loads(r.read())}))
PY
    srv_rc=$?
    mp_kill_ours TERM $srv_pid; wait $srv_pid 2>/dev/null
    [ $srv_rc -eq 0 ] || sed 's/^/#   /' "$SCRATCH/$srv_n.log"
    return $srv_rc
}
# jq_like NAME STATUS FINISH TEXTFILE: the response says STATUS, FINISH and TEXTFILE's text
jq_like() { "$TORCH_PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1])); c = d["body"]["choices"][0]
ok = d["status"] == int(sys.argv[2]) and c["finish_reason"] == sys.argv[3] and c["text"] == open(sys.argv[4], encoding="utf-8").read()
print("#   status %s, finish_reason %s, %d tokens, text %r" % (d["status"], c["finish_reason"], len(c["tokens"]), c["text"]))
sys.exit(0 if ok else 1)' "$SCRATCH/$1.json" "$2" "$3" "$4"; }
srv s6 && jq_like s6 200 length "$SCRATCH/gen6.out"
ok $? "serve on the hf checkpoint: 6 greedy tokens, finish_reason length, the text generate wrote"
srv s0 --tokenizer-dir "$SCRATCH/eosdir" && jq_like s0 200 stop "$SCRATCH/gen0.out"
ok $? "serve with that eos_token: the completion ends before it, finish_reason stop, no text"

gen --max-tokens 6 --tokenizer-dir "$SCRATCH/gpt2" > "$SCRATCH/gen.err" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "tokenizer_sha256 $want_sha" "$SCRATCH/gen.err"
ok $? "another tokenizer.json (the gpt2 style's) is refused naming the checkpoint's digest (exit $rc)"
sed 's/^/#   /' "$SCRATCH/gen.err"

# export --format hf writes the checkpoint's tokenizer.json and tokenizer_config.json beside the weights
"$MINDPIPE" export --format hf -c "$MP_SRCDIR/validation/decks/train.ini" --set model.vocab=50263 \
    --set data.path="$SCRATCH/llama3-kjv.h5" --ckpt "$ck" --out "$SCRATCH/hfx" > "$SCRATCH/hfx.out" 2>&1 &&
    cmp -s "$SCRATCH/hfx/tokenizer.json" "$SCRATCH/llama3/tokenizer.json" &&
    cmp -s "$SCRATCH/hfx/tokenizer_config.json" "$SCRATCH/llama3/tokenizer_config.json" && [ ! -e "$SCRATCH/hfx/vocab.json" ]
ok $? "export --format hf of the hf checkpoint: tokenizer.json and tokenizer_config.json, byte for byte"
sed 's/^/#   /' "$SCRATCH/hfx.out"

# ---- hf:DIR with tokenizer.model only: SentencePiece, as --tokenizer sp ----
head -c 300000 "$kjv" > "$SCRATCH/kjv_head.txt"
if "$MINDPIPE" prep --tokenizer sp --vocab-size 400 --text "$SCRATCH/kjv_head.txt" --out "$SCRATCH/sp.h5" > "$SCRATCH/sp.out" 2>&1; then
    mkdir -p "$SCRATCH/spdir"
    h5dump -d /tokenizer/sp_model -b LE -o "$SCRATCH/spdir/tokenizer.model" "$SCRATCH/sp.h5" > /dev/null &&
        "$MINDPIPE" prep --tokenizer "hf:$SCRATCH/spdir" --text "$SCRATCH/kjv_head.txt" --out "$SCRATCH/sp2.h5" > "$SCRATCH/sp.out" 2>&1 &&
        [ "$(attr "$SCRATCH/sp2.h5" tokenizer)" = sp ] &&
        [ "$(attr "$SCRATCH/sp2.h5" tokenizer_sha256)" = "$(attr "$SCRATCH/sp.h5" tokenizer_sha256)" ] &&
        h5dump -d /train -b LE -o "$SCRATCH/a.bin" "$SCRATCH/sp.h5" > /dev/null &&
        h5dump -d /train -b LE -o "$SCRATCH/b.bin" "$SCRATCH/sp2.h5" > /dev/null && cmp -s "$SCRATCH/a.bin" "$SCRATCH/b.bin"
    ok $? "hf:DIR with only tokenizer.model: tokenizer sp, the same model and tokens as --tokenizer sp"
else
    sed 's/^/#   /' "$SCRATCH/sp.out"
    grep -q "without SentencePiece" "$SCRATCH/sp.out"
    ok $? "hf:DIR with tokenizer.model: skipped, this mindpipe has no SentencePiece # SKIP"
fi

# ---- refusals: exit 1 naming the file and what is wrong, nothing written ----
# refuse NAME NODE_EXPR WANT: tokenizer.json = gpt2's, changed by the node expression on `j`
refuse() {
    mkdir -p "$SCRATCH/bad-$1"
    node -e 'const fs = require("fs"); let j = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
             eval(process.argv[2]); fs.writeFileSync(process.argv[3], typeof j === "string" ? j : JSON.stringify(j));' \
        "$SCRATCH/gpt2/tokenizer.json" "$2" "$SCRATCH/bad-$1/tokenizer.json" || { ok 1 "refusal $1: the file could not be made"; return; }
    "$MINDPIPE" prep --tokenizer "hf:$SCRATCH/bad-$1" --text "$adv" --out "$SCRATCH/bad.h5" > "$SCRATCH/err" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q "bad-$1/tokenizer.json" "$SCRATCH/err" && grep -q -- "$3" "$SCRATCH/err" && [ ! -e "$SCRATCH/bad.h5" ]
    ok $? "refusal $1: exit 1 naming the file and '$3' (exit $rc)"
    sed 's/^/#   /' "$SCRATCH/err" | cut -c1-300
}
refuse truncated 'j = JSON.stringify(j).slice(0, 100000)' "not JSON"
refuse pattern 'j.pre_tokenizer = {type: "Split", pattern: {Regex: "\\w+"}, behavior: "Isolated", invert: false}' 'pattern.Regex "\\w+" is not one this reader knows'
refuse behavior 'j.pre_tokenizer = {type: "Split", pattern: {Regex: "'"'"'s|'"'"'t|'"'"'re|'"'"'ve|'"'"'m|'"'"'ll|'"'"'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}, behavior: "MergedWithPrevious"}' "behavior"
refuse normalizer 'j.normalizer = {type: "NFC"}' 'normalizer type "NFC" is not supported'
refuse model 'j.model.type = "WordPiece"' 'model.type is "WordPiece"'
refuse merge 'j.model.merges[7] = "Ġt hzz"' 'model.merges\[7\]: "hzz" is not in model.vocab'
refuse merge3 'j.model.merges[9] = "a b c"' 'model.merges\[9\] "a b c" is not two tokens and one space'
refuse gap 'delete j.model.vocab["Ġthe"]' 'id 262 has no token'
refuse bigid 'j.model.vocab["zz"] = 1048576' 'model.vocab\["zz"\] is not an id in 0..1048575'
refuse lstrip 'j.added_tokens[0].lstrip = true' 'added_tokens\[0\].lstrip true is not supported'
refuse prefix 'j.pre_tokenizer.add_prefix_space = true' 'add_prefix_space true is not supported'
refuse dropout 'j.model.dropout = 0.1' 'model.dropout is set'
refuse fallback 'j.model.byte_fallback = true' 'byte_fallback is true but <0x00> is not in model.vocab'
refuse dupkey 'j = JSON.stringify(j).replace("\"!\":0,", "\"!\":0,\"!\":1,")' "duplicate object key"
mkdir -p "$SCRATCH/empty"
"$MINDPIPE" prep --tokenizer "hf:$SCRATCH/empty" --text "$adv" --out "$SCRATCH/bad.h5" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "empty: neither tokenizer.json nor tokenizer.model" "$SCRATCH/err"
ok $? "hf:DIR without a tokenizer: exit 1 naming the directory (exit $rc)"
"$MINDPIPE" prep --tokenizer "hf:" --text "$adv" --out "$SCRATCH/bad.h5" > "$SCRATCH/err" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "bytes, gpt2, sp or hf:DIR" "$SCRATCH/err"
ok $? "--tokenizer hf: without a directory: a usage error naming the choices (exit $rc)"
done_testing
