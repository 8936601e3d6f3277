#!/bin/sh
# The readers of files a user is handed, tried as an attacker would (issue 45 item 4): each damaged,
# hostile or foreign input is refused with exit 1 and a message naming the file and what is wrong,
# never a crash or a hang (a FIFO planted under a file's name once made the open wait forever: every
# such case runs under `timeout 60`, which only turns a hang into a failing line); and the genuine
# input is still taken (so a refusal is the edit's doing).
#   - Hugging Face config.json (train --init-from hf:DIR): negative, huge, fractional and mistyped
#     sizes, keys given twice, JSON that Python's json refuses ("+2", "02", a trailing comma, NUL),
#     not UTF-8, truncated, nested too deep, 2 MiB, a FIFO; model.safetensors whose shape or dtype
#     disagrees with config.json, or a FIFO. (The safetensors layout itself: test_hf.sh, fuzz_safetensors.)
#   - GPT-2's encoder.json and vocab.bpe (prep --tokenizer gpt2): empty, 70 MiB, garbage, ids out of
#     range, negative, with a leading zero, missing, two ids for one token, an extra merge, cut short,
#     a FIFO. SentencePiece .model (prep --sp-model-file): empty, garbage, cut short, 300 MiB, a FIFO,
#     bytes appended after its last field (an unknown field, a second trainer_spec, a piece more).
#   - Not regular files: a FIFO or a directory as prep's --text, the SentencePiece trainer's text and
#     data.path (the first and the last waited forever in open for a writer); as a checkpoint for
#     inspect, train --resume, eval, generate and export, and planted as the newest for --resume auto.
#   - Recovery (recovery.log = 1, pp = 2, rank 1 lost at step 13): the survivor's snapshot is not
#     used, the resume starting from the checkpoint of step 10, when the resume changes train.seed
#     (the snapshot holds the old deck's steps: a replay under the new one made a model no run
#     computed, and said "0 steps lost"), when it is another run's, or cut short; another run's or a
#     cut boundary log is refused and the snapshots set aside. (Damaged, missing, torn logs and
#     another rank's snapshot: test_zero_loss.sh; the log's reader alone: unit/test_bndlog.)
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
base="-c $deck --set data.path=$data --set train.warmup=0 --set train.threads=1 --set train.eval_every=0 --quiet"
S=$SCRATCH

# expect LABEL PATTERN CMD...: CMD (which runs mindpipe under timeout 60) exits 1 and its output holds PATTERN
expect() {
    ex_label=$1 ex_pat=$2; shift 2
    "$@" > "$S/out" 2>&1; ex_rc=$?
    [ $ex_rc -eq 1 ] && grep -q -- "$ex_pat" "$S/out"
    ok $? "$ex_label: refused (exit $ex_rc): $(grep -m1 -o 'error: .*' "$S/out" | sed 's/ (\.\.\/src.*//' | cut -c1-220)"
}

# ---- Hugging Face directories ----
# shellcheck disable=SC2086
"$MINDPIPE" train $base --set train.steps=1 --set checkpoint.every=1 --out "$S/run" > "$S/out" 2>&1 &&
    "$MINDPIPE" export --format hf -c "$deck" --ckpt "$S/run/ckpt/step_00000001.h5" --out "$S/hf" > "$S/out" 2>&1
ok $? "a 1-step checkpoint exported to $S/hf: the genuine directory every case edits"
hf=$S/hf
# init NAME [--set ...]: train --init-from hf:$S/NAME with train.steps=0
init() {
    in_name=$1; shift
    rm -rf "$S/o_$in_name"
    # shellcheck disable=SC2086
    timeout 60 "$MINDPIPE" train $base --set train.steps=0 --init-from "hf:$S/$in_name" --out "$S/o_$in_name" "$@"
}
# cfg NAME SED: $S/NAME, the genuine directory with config.json edited by SED (which must change it)
cfg() {
    mkdir -p "$S/$1" && cp "$hf/model.safetensors" "$S/$1/" && sed "$2" "$hf/config.json" > "$S/$1/config.json" &&
        ! cmp -s "$S/$1/config.json" "$hf/config.json" || echo "# cfg $1: the edit '$2' changed nothing"
}
# cfgtext NAME: $S/NAME with config.json from stdin
cfgtext() { mkdir -p "$S/$1" && cp "$hf/model.safetensors" "$S/$1/" && cat > "$S/$1/config.json"; }
# hfbad LABEL NAME PATTERN [--set ...]: init NAME refused naming NAME/config.json: PATTERN
hfbad() { hb_l=$1 hb_n=$2 hb_p=$3; shift 3; expect "$hb_l" "$hb_n/config.json: $hb_p" init "$hb_n" "$@"; }

init hf > "$S/out" 2>&1; ok $? "the genuine directory loads"
printf '{"n_layer": 2, "n_embd": 32, "n_head": 4, "vocab_size": 256, "n_positions": 32}' | cfgtext c_min
init c_min > "$S/out" 2>&1; ok $? "a config.json of the five sizes alone loads (the rest take GPT2Config's defaults)"

cfg c_neg 's/"n_layer": 2/"n_layer": -2/'
hfbad "n_layer -2" c_neg "key n_layer is -2, the deck's model.layers is 2"
cfg c_e30 's/"n_layer": 2/"n_layer": 1e30/'
hfbad "n_layer 1e30" c_e30 "key n_layer is 1e30, not an integer"
cfg c_2p63 's/"n_layer": 2/"n_layer": 9223372036854775808/'
hfbad "n_layer 2^63" c_2p63 "key n_layer is 9223372036854775808, beyond any model's size"
cfg c_npos 's/"n_positions": 32/"n_positions": 1000000000000000/'
hfbad "n_positions 1e15 (as digits)" c_npos "key n_positions is 1000000000000000, beyond any model's size"
cfg c_float 's/"n_layer": 2/"n_layer": 2.0/'
hfbad "n_layer 2.0 (Python's float)" c_float "key n_layer is 2.0, not an integer"
cfg c_str 's/"n_layer": 2/"n_layer": "2"/'
hfbad "n_layer a string" c_str "key n_layer is the string \"2\", not an integer"
cfg c_arr 's/"n_embd": 32/"n_embd": [32]/'
hfbad "n_embd an array" c_arr "key n_embd is an array or object, not an integer"
cfg c_obj 's/"n_head": 4/"n_head": {"value": 4}/'
hfbad "n_head an object" c_obj "key n_head is an array or object, not an integer"
cfg c_null 's/"vocab_size": 256/"vocab_size": null/'
hfbad "vocab_size null" c_null "key vocab_size is null, not an integer"
cfg c_bool 's/"n_layer": 2/"n_layer": true/'
hfbad "n_layer true" c_bool "key n_layer is true, not an integer"
cfg c_head3 's/"n_head": 4/"n_head": 3/'
hfbad "n_head 3 (n_embd 32 not divisible by it)" c_head3 "key n_head is 3, the deck's model.heads is 4"
cfg c_eps 's/"layer_norm_epsilon": 1e-05/"layer_norm_epsilon": "1e-05"/'
hfbad "layer_norm_epsilon a string" c_eps "key layer_norm_epsilon is the string \"1e-05\", MindPipe's LayerNorm has 1e-05"
cfg c_scale 's/"scale_attn_weights": true/"scale_attn_weights": null/'
hfbad "scale_attn_weights null (falsy in Python)" c_scale "key scale_attn_weights is null"
cfg c_dup 's/"n_layer": 2/"n_layer": 3, "n_layer": 2/'
hfbad "n_layer given twice (3, then 2)" c_dup "key n_layer is given twice"
cfg c_plus 's/"n_layer": 2/"n_layer": +2/'
hfbad "n_layer +2" c_plus "malformed JSON at byte [0-9]*: expected a value"
cfg c_lead0 's/"n_layer": 2/"n_layer": 02/'
hfbad "n_layer 02" c_lead0 "malformed JSON at byte [0-9]*: expected ',' or '}'"
cfg c_comma 's/"use_cache": true/"use_cache": [1, 2,]/'
hfbad "a trailing comma in an array" c_comma "malformed JSON at byte [0-9]*: expected a value"
cfg c_nul 's/"n_layer": 2/"n_layer": 2\x00/'
hfbad "a NUL byte after a value" c_nul "malformed JSON at byte [0-9]*: expected ',' or '}'"
cfg c_utf8 's/"float32"/"\xc3\x28"/'
hfbad "a string not UTF-8" c_utf8 "byte [0-9]* (0xc3) is not UTF-8"
cfg c_surr 's/"float32"/"\xed\xa0\x80"/'
hfbad "a UTF-16 surrogate encoded as UTF-8" c_surr "byte [0-9]* (0xed) is not UTF-8"
head -c 200 "$hf/config.json" | cfgtext c_cut
hfbad "config.json cut at 200 bytes" c_cut "malformed JSON at byte 200"
: | cfgtext c_empty
hfbad "an empty config.json" c_empty "malformed JSON at byte 0: expected '{'"
{ printf '{"a": '; i=0; while [ $i -lt 100 ]; do printf '['; i=$((i + 1)); done; printf '\n'; } | cfgtext c_deep
hfbad "arrays nested 100 deep" c_deep "malformed JSON at byte [0-9]*: nested more than 64 deep"
{ cat "$hf/config.json"; head -c 2097152 /dev/zero | tr '\0' ' '; } | cfgtext c_2mib
hfbad "a 2 MiB config.json (white space after the object)" c_2mib "2097[0-9]* bytes, longer than 1 MiB"
mkdir -p "$S/c_fifo" && cp "$hf/model.safetensors" "$S/c_fifo/" && mkfifo "$S/c_fifo/config.json"
expect "a FIFO as config.json (no hang)" "c_fifo/config.json: not a regular file" init c_fifo

# model.safetensors against config.json (and the deck)
cfg s_npos 's/"n_positions": 32/"n_positions": 64/'
expect "config.json's n_positions 64, wpe of 32 rows" "s_npos/model.safetensors: key transformer.wpe.weight: shape (32, 32).*needs (64, 32)" init s_npos
cfg s_layers 's/"n_layer": 2/"n_layer": 3/'
expect "config.json's n_layer 3 (deck layers 3), tensors of 2 layers" "s_layers/model.safetensors: key transformer.h.2.ln_1.weight is missing" \
    init s_layers --set model.layers=3
mkdir -p "$S/s_dtype" && cp "$hf/config.json" "$hf/model.safetensors" "$S/s_dtype/" &&
    at=$(grep -abo '"F32"' "$S/s_dtype/model.safetensors" | head -n 1 | cut -d: -f1) && [ -n "$at" ] &&
    printf 'I' | dd of="$S/s_dtype/model.safetensors" bs=1 seek=$((at + 1)) conv=notrunc 2> /dev/null
expect "a tensor's dtype F32 changed to I32 (same size)" "s_dtype/model.safetensors: key .*: dtype I32, MindPipe loads F32 only" init s_dtype
mkdir -p "$S/s_fifo" && cp "$hf/config.json" "$S/s_fifo/" && mkfifo "$S/s_fifo/model.safetensors"
expect "a FIFO as model.safetensors (no hang)" "s_fifo/model.safetensors: not a regular file" init s_fifo

# ---- tokenizer files ----
gdir=${MINDPIPE_GPT2_DIR:-$HOME/.cache/mindpipe/gpt2}
printf 'In the beginning God created the heaven and the earth.\n' > "$S/text.txt"
if [ -s "$gdir/encoder.json" ] && [ -s "$gdir/vocab.bpe" ]; then
    # tok NAME FILE SED: $S/NAME, GPT-2's files with FILE edited by SED (which must change it)
    tok() {
        mkdir -p "$S/$1" && cp "$gdir/encoder.json" "$gdir/vocab.bpe" "$S/$1/" && sed "$3" "$gdir/$2" > "$S/$1/$2" &&
            ! cmp -s "$S/$1/$2" "$gdir/$2" || echo "# tok $1: the edit '$3' changed nothing"
    }
    prep_gpt2() { rm -f "$S/x.h5"; timeout 60 "$MINDPIPE" prep --tokenizer gpt2 --tokenizer-dir "$S/$1" --text "$S/text.txt" --out "$S/x.h5"; }
    tokbad() { tb_l=$1 tb_n=$2 tb_p=$3; expect "$tb_l" "$tb_n/$tb_p" prep_gpt2 "$tb_n"; }
    mkdir -p "$S/t_ok" && cp "$gdir/encoder.json" "$gdir/vocab.bpe" "$S/t_ok/"
    prep_gpt2 t_ok > "$S/out" 2>&1; ok $? "GPT-2's own files are taken"
    tok t_empty encoder.json 'd'
    tokbad "an empty encoder.json" t_empty "encoder.json: 0 bytes: empty"
    mkdir -p "$S/t_huge" && cp "$gdir/vocab.bpe" "$S/t_huge/" && truncate -s 70M "$S/t_huge/encoder.json"
    tokbad "a 70 MiB encoder.json" t_huge "encoder.json: 73400320 bytes: more than 64 MiB"
    mkdir -p "$S/t_garbage" && cp "$gdir/vocab.bpe" "$S/t_garbage/" && head -c 4096 "$MINDPIPE" > "$S/t_garbage/encoder.json"
    tokbad "binary garbage as encoder.json" t_garbage "encoder.json: byte 0: expected '{'"
    tok t_id65536 encoder.json 's/"!": 0,/"!": 65536,/'
    tokbad "an id of 65536" t_id65536 "encoder.json: byte [0-9]*: an id of 65536 or more"
    tok t_idhuge encoder.json 's/"!": 0,/"!": 99999999999999999999,/'
    tokbad "an id of 1e20 (as digits)" t_idhuge "encoder.json: byte [0-9]*: an id of 65536 or more"
    tok t_idneg encoder.json 's/"!": 0,/"!": -1,/'
    tokbad "an id of -1" t_idneg "encoder.json: byte [0-9]*: expected an id"
    tok t_lead0 encoder.json 's/"#": 2,/"#": 02,/'
    tokbad "an id written 02" t_lead0 "encoder.json: byte [0-9]*: an id with a leading zero"
    tok t_gap encoder.json 's/"<|endoftext|>": 50256/"<|endoftext|>": 50256, "<|x|>": 60000/'
    tokbad "an id past the others (60000)" t_gap "encoder.json: 50258 tokens, but none has id 50257"
    tok t_twin encoder.json 's/"!": 0,/"!": 0, "!": 50257,/'
    tokbad "one token under two ids" t_twin "encoder.json: ids 0 and 50257 are the same token"
    tok t_twice encoder.json 's/"#": 2,/"#": 2, "\\u0120zz": 2,/'
    tokbad "one id given twice" t_twice "encoder.json: byte [0-9]*: an id given twice"
    tok t_merge vocab.bpe '$a\
\xc4\xa0t he'
    tokbad "a merge past the vocabulary" t_merge "vocab.bpe: line 50002: merge 50000 makes token"
    mkdir -p "$S/t_cut" && cp "$gdir/encoder.json" "$S/t_cut/" && head -c 100001 "$gdir/vocab.bpe" > "$S/t_cut/vocab.bpe"
    tokbad "vocab.bpe cut inside a line" t_cut "vocab.bpe: "
    mkdir -p "$S/t_bgarbage" && cp "$gdir/encoder.json" "$S/t_bgarbage/" && head -c 4096 "$MINDPIPE" > "$S/t_bgarbage/vocab.bpe"
    tokbad "binary garbage as vocab.bpe" t_bgarbage "vocab.bpe: byte 0: expected the line \"#version: ...\" first"
    tok t_nomerge vocab.bpe '2,$d'
    tokbad "vocab.bpe of its header alone" t_nomerge "vocab.bpe: byte [0-9]*: no merges"
    mkdir -p "$S/t_fifo" && cp "$gdir/encoder.json" "$S/t_fifo/" && mkfifo "$S/t_fifo/vocab.bpe"
    tokbad "a FIFO as vocab.bpe (no hang)" t_fifo "vocab.bpe: not a regular file"
else
    ok 1 "GPT-2's vocabulary ($gdir) missing: bash .ci/deps.sh fetches it"
fi
prep_sp() { rm -f "$S/x.h5"; timeout 60 "$MINDPIPE" prep --tokenizer sp --sp-model-file "$S/$1" --text "$S/text.txt" --out "$S/x.h5"; }
head -c 200000 "$MP_BUILDDIR/validation/kjv.txt" > "$S/kjv.txt"
"$MINDPIPE" prep --tokenizer sp --vocab-size 400 --text "$S/kjv.txt" --out "$S/sp.h5" > "$S/out" 2>&1 &&
    h5dump -d /tokenizer/sp_model -b LE -o "$S/good.model" "$S/sp.h5" > /dev/null && prep_sp good.model > "$S/out" 2>&1
ok $? "a SentencePiece model of 400 pieces trained, its .model taken by --sp-model-file"
: > "$S/empty.model"
expect "an empty .model" "SentencePiece model $S/empty.model: an empty file" prep_sp empty.model
head -c 4096 "$MINDPIPE" > "$S/garbage.model"
expect "binary garbage as .model" "SentencePiece model $S/garbage.model: not a SentencePiece model" prep_sp garbage.model
head -c 3000 "$S/good.model" > "$S/cut.model"
expect "a .model cut at 3000 bytes" "SentencePiece model $S/cut.model: not a SentencePiece model" prep_sp cut.model
truncate -s 300M "$S/huge.model"
expect "a 300 MiB .model (not read)" "SentencePiece model $S/huge.model: 314572800 bytes, more than 64 MiB" prep_sp huge.model
mkfifo "$S/fifo.model"
expect "a FIFO as .model (no hang)" "SentencePiece model $S/fifo.model: not a regular file" prep_sp fifo.model
# bytes appended after the model's last field: protobuf takes well-formed ones as unknown fields, merges
# a second trainer_spec into the first, adds a piece; refused naming the offset where they begin
sz=$(wc -c < "$S/good.model")
# appended NAME BYTES: $S/NAME, good.model with BYTES (printf's escapes) after it
# shellcheck disable=SC2059  # BYTES is the format: its octal escapes are the point
appended() { { cat "$S/good.model"; printf "$2"; } > "$S/$1"; }
appended app_varint.model '\010\001'
expect "a .model with 2 bytes appended (field 1 as a varint)" \
    "SentencePiece model $S/app_varint.model: offset $sz of $((sz + 2)): field 1 of wire type 0" prep_sp app_varint.model
appended app_unknown.model '\240\006\001'
expect "a .model with an unknown field 100 appended" \
    "SentencePiece model $S/app_unknown.model: offset $sz of $((sz + 3)): field 100 of wire type 0" prep_sp app_unknown.model
appended app_spec.model '\022\000'
expect "a .model with a second, empty trainer_spec appended (merged by protobuf)" \
    "SentencePiece model $S/app_spec.model: offset $sz of $((sz + 2)): field 2 of wire type 2" prep_sp app_spec.model
appended app_piece.model '\012\006\012\004ZQXJ'
expect "a .model with a piece appended after its specs (a piece more)" \
    "SentencePiece model $S/app_piece.model: offset $sz of $((sz + 8)): field 1 of wire type 2" prep_sp app_piece.model

# ---- text and token inputs that are not regular files ----
mkfifo "$S/text.fifo"
expect "a FIFO as prep's --text (no hang)" "text file $S/text.fifo: not a regular file" \
    timeout 60 "$MINDPIPE" prep --text "$S/text.fifo" --out "$S/x.h5"
mkdir -p "$S/text.dir"
expect "a directory as prep's --text" "text file $S/text.dir: not a regular file" \
    timeout 60 "$MINDPIPE" prep --text "$S/text.dir" --out "$S/x.h5"
expect "a FIFO as the SentencePiece trainer's text (no hang)" "text file $S/text.fifo: not a regular file" \
    timeout 60 "$MINDPIPE" prep --tokenizer sp --vocab-size 400 --text "$S/text.fifo" --out "$S/x.h5"
mkfifo "$S/data.fifo"
# shellcheck disable=SC2086
expect "a FIFO as data.path (no hang)" "data file $S/data.fifo: not a regular file" \
    timeout 60 "$MINDPIPE" train $base --set data.path="$S/data.fifo" --set train.steps=1 --out "$S/o_data"

# ---- checkpoints that are not regular files ----
mkfifo "$S/ck.fifo"
mkdir -p "$S/ck.dir"
for ck in ck.fifo ck.dir; do
    expect "inspect $ck" "checkpoint $S/$ck: not a regular file" timeout 60 "$MINDPIPE" inspect "$S/$ck"
    # shellcheck disable=SC2086
    expect "train --resume $ck" "checkpoint $S/$ck: not a regular file" \
        timeout 60 "$MINDPIPE" train $base --set train.steps=2 --resume "$S/$ck" --out "$S/o_$ck"
done
expect "eval --ckpt ck.fifo" "checkpoint $S/ck.fifo: not a regular file" \
    timeout 60 "$MINDPIPE" eval -c "$deck" --set data.path="$data" --ckpt "$S/ck.fifo"
expect "generate --ckpt ck.fifo" "$S/ck.fifo: not a regular file" \
    timeout 60 "$MINDPIPE" generate -c "$deck" --ckpt "$S/ck.fifo" --prompt In --max-tokens 2
expect "export --ckpt ck.fifo" "$S/ck.fifo: not a regular file" \
    timeout 60 "$MINDPIPE" export -c "$deck" --ckpt "$S/ck.fifo" --format hf --out "$S/o_export"
# --resume auto with a FIFO as the newest checkpoint: skipped naming it, the step-1 checkpoint taken
cp -r "$S/run" "$S/r_fifo" && mkfifo "$S/r_fifo/ckpt/step_00000005.h5"
# shellcheck disable=SC2086
timeout 60 "$MINDPIPE" train $base --set train.steps=2 --resume auto --out "$S/r_fifo" > "$S/out" 2>&1 &&
    grep -q "skipping $S/r_fifo/ckpt/step_00000005.h5: not a regular file" "$S/out" &&
    grep -q "resumed from $S/r_fifo/ckpt/step_00000001.h5 at step 1" "$S/r_fifo/log.txt"
ok $? "train --resume auto with a FIFO as the newest checkpoint: skipped naming it, resumed from step 1"

# ---- recovery: snapshots and boundary logs of another run ----
rb="$base --set model.layers=2 --set train.steps=14 --set checkpoint.every=10 --set checkpoint.keep=0"
rb="$rb --set parallel.timeout=3 --set parallel.wait=yield --set parallel.pp=2 --set recovery.log=1"
# lost NAME: a run that loses rank 1 as step 13 begins; rank 0 writes its snapshot of step 12
lost() {
    rm -rf "${S:?}/$1"
    # shellcheck disable=SC2086
    timeout 120 mpiexec -disable-auto-cleanup -n 2 sh -c 'trap : USR1 TERM; "$@"' rank "$MINDPIPE" train $rb \
        --set debug.fail_at=1:13 --out "$S/$1" > "$S/$1.1.log" 2>&1
    [ -s "$S/$1/recovery/snap-r00000.h5" ] && [ -s "$S/$1/ckpt/step_00000010.h5" ]
    ok $? "$1: rank 1 lost at step 13; rank 0's snapshot and the checkpoint of step 10 written"
}
# resumed NAME [--set ...]: --resume auto at pp = 2 (exit 0); its output in $S/NAME.2.log
resumed() {
    rs_n=$1; shift
    # shellcheck disable=SC2086
    timeout 120 mpiexec -n 2 "$MINDPIPE" train $rb --resume auto --out "$S/$rs_n" "$@" > "$S/$rs_n.2.log" 2>&1
}
# from_ckpt NAME LABEL PATTERN: the resume exited 0, said PATTERN, restarted from the checkpoint of
# step 10 (no "0 steps lost") and trained to step 14
from_ckpt() {
    grep -q -- "$3" "$S/$1.2.log" "$S/$1/log.txt" && grep -q "resumed from .*step_00000010.h5 at step 10" "$S/$1/log.txt" &&
        ! grep -q "0 steps lost" "$S/$1/log.txt" && [ -s "$S/$1/ckpt/step_00000014.h5" ]
    ok $? "$2: refused, the resume restarted from the checkpoint of step 10 ($(grep -h -m1 -o -- "$3.*" "$S/$1.2.log" "$S/$1/log.txt" | head -n 1 | sed 's/ (\.\.\/src.*//' | cut -c1-200))"
}
lost ra
lost rb
for c in seed other cutsnap otherlog cutlog; do cp -r "$S/ra" "$S/$c"; done
resumed ra; ok $? "ra: resumed (the control: the snapshot taken, rank 1 replayed)"
grep -q "recovery: resumed at step 12, the step the survivors had reached: 0 steps lost" "$S/ra/log.txt"
ok $? "ra: 0 steps lost"
resumed seed --set train.seed=12; ok $? "a resume with --set train.seed=12 runs"
from_ckpt seed "the snapshot of seed 11's steps under seed 12" \
    "RUN/recovery/snap-r00000.h5 was taken with train.seed = 11, this run's deck says 12"
cp "$S/rb/recovery/snap-r00000.h5" "$S/other/recovery/snap-r00000.h5"
resumed other; ok $? "a resume with another run's snapshot runs"
from_ckpt other "another run's snapshot" "RUN/recovery/snap-r00000.h5 is of run $(cat "$S/rb/run_id"), not $(cat "$S/ra/run_id")"
f="$S/cutsnap/recovery/snap-r00000.h5"; head -c $(( $(wc -c < "$f") / 2 )) "$f" > "$f.cut" && mv "$f.cut" "$f"
resumed cutsnap; ok $? "a resume with the snapshot cut to half runs"
from_ckpt cutsnap "a snapshot cut to half" "RUN/recovery/snap-r00000.h5 does not read back"
# another run's log of rank 0: rank 1's replay refuses to read it, naming both run ids; the snapshots
# are set aside and every rank restarts from the checkpoint, where rank 0 no longer needs its log:
# the foreign file goes to bnd-r0.h5.old unopened and byte for byte (never overwritten)
cp "$S/rb/bndlog/bnd-r0.h5" "$S/otherlog/bndlog/bnd-r0.h5"
resumed otherlog; rc=$?; ok $rc "a resume with another run's log of rank 0 runs (exit $rc)"
grep -q "the log of rank 0 (stage 0) does not open" "$S/otherlog/log.txt" &&
    grep -q "boundary log $S/otherlog/bndlog/bnd-r0.h5 belongs to another run: run_id is $(cat "$S/rb/run_id")" \
        "$S/otherlog.2.log" && [ -e "$S/otherlog/recovery/snap-r00000.h5.unused" ] &&
    cmp -s "$S/rb/bndlog/bnd-r0.h5" "$S/otherlog/bndlog/bnd-r0.h5.old"
ok $? "another run's boundary log: refused naming it and both run ids, the snapshot set aside, the file kept as bnd-r0.h5.old"
from_ckpt otherlog "another run's boundary log" "the log of rank 0 (stage 0) does not open"
f="$S/cutlog/bndlog/bnd-r0.h5"; head -c $(( $(wc -c < "$f") / 2 )) "$f" > "$f.cut" && mv "$f.cut" "$f"
resumed cutlog; ok $? "a resume with rank 0's log cut to half runs"
from_ckpt cutlog "a boundary log cut to half" "bnd-r0.h5 cannot be read: truncated or damaged"
done_testing
