#!/bin/sh
# A model trained on GPT-2 tokens (issue 34): the checkpoint records the data's tokenizer (kind and
# vocabulary digest); `generate` encodes the prompt and decodes the completion with it (greedy tokens
# equal PyTorch's full recomputation from tiktoken's prompt tokens, decoded through encoder.json by
# the checker); `serve` answers with the same tokens and their text (whole, and streamed); resume and
# eval on a byte-tokenized file are refused naming both tokenizers; a vocabulary whose SHA-256 is not
# the checkpoint's is refused naming both digests; a byte run's checkpoints say "byte".
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
echo "1..16"
npm_dir=${MINDPIPE_NPM_DIR:-$HOME/.cache/mindpipe/npm}
gpt2_dir=${MINDPIPE_GPT2_DIR:-$HOME/.cache/mindpipe/gpt2}
if ! command -v node >/dev/null 2>&1 || [ ! -d "$npm_dir/node_modules/tiktoken" ] || [ ! -s "$gpt2_dir/vocab.bpe" ]; then
    echo "not ok 1 - node, tiktoken ($npm_dir) or GPT-2's vocabulary ($gpt2_dir) missing: bash .ci/deps.sh installs them"
    exit 1
fi
mp_require_torch
mp_test_data > /dev/null || { echo "not ok 1 - test data failed"; exit 1; }
mp_scratch_init
pids=""
# shellcheck disable=SC2086
trap 'mp_kill_ours 9 $pids; rm -rf "$SCRATCH"' EXIT
deck="$MP_SRCDIR/validation/decks/ref.ini"
ref="$MP_SRCDIR/validation/torch_ref.py"
M="--set model.vocab=50304 --set model.layers=1 --set model.dim=32 --set model.heads=2 --set model.seq_len=32"
TR="--set train.batch=8 --set train.micro_batch=8 --set train.lr=1e-2 --set train.threads=1 --set train.log_every=100"
PROMPT="And God said unto Moses"

# expect_fail DESCRIPTION COMMAND... : non-zero exit, and every line of $SCRATCH/want in stderr
expect_fail() {
    what=$1; shift
    "$@" > "$SCRATCH/out" 2> "$SCRATCH/err"; rc=$?
    miss=0
    while IFS= read -r pat; do grep -qF -- "$pat" "$SCRATCH/err" || miss=1; done < "$SCRATCH/want"
    if [ $rc -ne 0 ] && [ $miss -eq 0 ]; then ok 0 "$what"
    else ok 1 "$what"; diag "exit $rc; stderr:"; sed 's/^/#   /' "$SCRATCH/err"; fi
}
# attr FILE OBJECT NAME: a string attribute's value, as h5dump prints it
attr() { h5dump -a "$2/$3" "$1" 2>/dev/null | sed -n 's/^ *(0): "\(.*\)"$/\1/p'; }

head -c 200000 "$MP_BUILDDIR/validation/kjv.txt" > "$SCRATCH/kjv.txt"
"$MINDPIPE" prep --tokenizer gpt2 --text "$SCRATCH/kjv.txt" --out "$SCRATCH/g.h5" > /dev/null 2>&1 &&
    "$MINDPIPE" prep --text "$SCRATCH/kjv.txt" --out "$SCRATCH/b.h5" > /dev/null 2>&1
ok $? "prep 200 kB of the KJV with gpt2 and with bytes"
SHA=$(attr "$SCRATCH/g.h5" "" tokenizer_sha256)

# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $M $TR --set data.path="$SCRATCH/g.h5" --set train.steps=300 --set checkpoint.every=100 \
    --quiet --out "$SCRATCH/run" > "$SCRATCH/train.log" 2>&1
ok $? "train a 1-layer model (model.vocab 50304) 300 steps on GPT-2 tokens"
CK="$SCRATCH/run/ckpt/step_00000300.h5"
[ "$(attr "$CK" /state tokenizer)" = gpt2 ] && [ -n "$SHA" ] && [ "$(attr "$CK" /state tokenizer_sha256)" = "$SHA" ]
ok $? "the checkpoint's /state says tokenizer gpt2 and the data file's tokenizer_sha256 ($SHA)"

printf '%s\n' "model.vocab=256" "$SCRATCH/g.h5" "50257" > "$SCRATCH/want"
# shellcheck disable=SC2086
expect_fail "model.vocab below the tokenizer's 50257 is refused naming the key and the file" \
    "$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/g.h5" --quiet --out "$SCRATCH/small"

# Greedy: tiktoken's tokens of the prompt, PyTorch's full recomputation, decoded by the checker.
ids=$(node -e "const t = require(process.argv[1]); console.log(Array.from(t.get_encoding('gpt2').encode_ordinary(process.argv[2])).join(','))" \
    "$npm_dir/node_modules/tiktoken" "$PROMPT")
G() { "$MINDPIPE" generate -c "$deck" $M --ckpt "$CK" "$@"; }
G --prompt "$PROMPT" --max-tokens 24 > "$SCRATCH/greedy.out" 2> "$SCRATCH/gen.err" &&
    grep -q "generated 24 tokens after a prompt of $(echo "$ids" | tr ',' '\n' | wc -l)" "$SCRATCH/gen.err"
ok $? "generate 24 gpt2 tokens after the prompt's $(echo "$ids" | tr ',' '\n' | wc -l) ($ids): $(cat "$SCRATCH/gen.err")"
"$TORCH_PYTHON" "$ref" generate "$CK" --prompt "$PROMPT" --prompt-ids "$ids" --gpt2-dir "$gpt2_dir" --max-tokens 24 \
    --got "$SCRATCH/greedy.out" > "$SCRATCH/ref.out" 2>&1
tap_checker "gpt2 greedy" "torch_ref.py generate" $? "$SCRATCH/ref.out"

# serve: the same draws (seed, request id) as generate, the tokens decoded by the checker.
"$MINDPIPE" serve -c "$deck" $M --ckpt "$CK" --listen 127.0.0.1:0 --out "$SCRATCH/srv" > "$SCRATCH/srv.log" 2>&1 &
spid=$!; pids="$pids $spid"
URL=$(mp_serve_url "$SCRATCH/srv" $spid)
G --prompt "$PROMPT" --max-tokens 24 --temperature 1 --seed 5 > "$SCRATCH/s5.out" 2> /dev/null
"$TORCH_PYTHON" - "$URL" "$PROMPT" "$gpt2_dir" "$SCRATCH/s5.out" > "$SCRATCH/srv.out" 2>&1 <<'EOF'
import http.client, json, sys, urllib.parse
url, prompt, vocab_dir, got = sys.argv[1:5]
enc = json.load(open(vocab_dir + "/encoder.json", encoding="utf-8"))
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:] + [256 + n for n in range(256 - len(bs))]
bs = bs + [b for b in range(256) if b not in bs]
byte_of = {chr(c): b for b, c in zip(bs, cs)}
token = {i: bytes(byte_of[ch] for ch in t) for t, i in enc.items()}
u = urllib.parse.urlparse(url)
def post(stream):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 24, "temperature": 1, "seed": 5,
                                                     "stream": stream}))
    return c.getresponse().read().decode()
whole = json.loads(post(False))["choices"][0]
events = [json.loads(l[6:]) for l in post(True).split("\n") if l.startswith("data: {")]
want = b"".join(token[t] for t in whole["tokens"])
mp = open(got, "rb").read()
def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
check(len(whole["tokens"]) == 24 and want == mp, "serve's 24 tokens decode to generate's bytes (%r)" % want)
check(whole["text"] == want.decode("utf-8", "replace"), "serve's text is those bytes (%r)" % whole["text"])
st = [t for e in events for t in e["choices"][0]["tokens"]]
sx = "".join(e["choices"][0]["text"] for e in events)
check(st == whole["tokens"] and sx == whole["text"], "streamed: %d events gather the same tokens and text" % len(events))
EOF
tap_checker "serve gpt2" "the client" $? "$SCRATCH/srv.out"
printf '%s\n' "gpt2 tokens" > "$SCRATCH/want"
"$TORCH_PYTHON" -c "
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
c.request('POST', '/v1/completions', json.dumps({'prompt': 'word' + ' word' * 39})); r = c.getresponse()
print(r.status, r.read().decode())" "$URL" > "$SCRATCH/long.out" 2>&1
grep -q '^400 .*the prompt has 40 gpt2 tokens; the context allows at most 31' "$SCRATCH/long.out"
ok $? "serve: a prompt of 199 bytes but 40 gpt2 tokens is refused by its tokens ($(cat "$SCRATCH/long.out"))"
kill -TERM $spid; wait $spid

printf '%s\n' "tokenizer gpt2 (tokenizer_sha256 $SHA)" "tokenizer byte" "$SCRATCH/b.h5" "step_00000300.h5" > "$SCRATCH/want"
# shellcheck disable=SC2086
expect_fail "resume auto on a byte-tokenized file is refused naming both tokenizers" \
    "$MINDPIPE" train -c "$deck" $M $TR --set data.path="$SCRATCH/b.h5" --set train.steps=400 --quiet --out "$SCRATCH/run" --resume auto
sed -i 's/step_00000300/step_00000100/' "$SCRATCH/want"
# shellcheck disable=SC2086
expect_fail "resume of a named checkpoint on a byte-tokenized file is refused naming both tokenizers" \
    "$MINDPIPE" train -c "$deck" $M $TR --set data.path="$SCRATCH/b.h5" --set train.steps=400 --quiet \
    --out "$SCRATCH/run2" --resume "$SCRATCH/run/ckpt/step_00000100.h5"
sed -i 's/step_00000100/step_00000300/' "$SCRATCH/want"
# shellcheck disable=SC2086
expect_fail "eval on a byte-tokenized file is refused naming both tokenizers" \
    "$MINDPIPE" eval -c "$deck" $M --set data.path="$SCRATCH/b.h5" --ckpt "$CK"
# shellcheck disable=SC2086
"$MINDPIPE" eval -c "$deck" $M --set data.path="$SCRATCH/g.h5" --ckpt "$CK" > "$SCRATCH/eval.out" 2>&1 &&
    grep -q "^val_loss " "$SCRATCH/eval.out"
ok $? "eval on the gpt2 file: $(cat "$SCRATCH/eval.out")"

mkdir "$SCRATCH/voc" && cp "$gpt2_dir/encoder.json" "$gpt2_dir/vocab.bpe" "$SCRATCH/voc/" &&
    sed -i '1s/.*/#version: 0.3/' "$SCRATCH/voc/vocab.bpe"
printf '%s\n' "tokenizer_sha256 $SHA" "$SCRATCH/voc" "$CK" > "$SCRATCH/want"
expect_fail "generate with another vocabulary (vocab.bpe's first line changed) is refused naming both digests" \
    G --prompt "$PROMPT" --tokenizer-dir "$SCRATCH/voc"

# A byte run's checkpoint says "byte" and has no digest.
"$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/b.h5" --set train.steps=4 --quiet --out "$SCRATCH/brun" \
    > /dev/null 2>&1 && [ "$(attr "$SCRATCH/brun/ckpt/step_00000004.h5" /state tokenizer)" = byte ] &&
    ! h5dump -a /state/tokenizer_sha256 "$SCRATCH/brun/ckpt/step_00000004.h5" > /dev/null 2>&1
ok $? "a byte run's checkpoint: /state tokenizer byte, no tokenizer_sha256"
[ "$tap_failed" -eq 0 ]
