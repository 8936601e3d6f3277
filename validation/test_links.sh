#!/bin/sh
# Writes never go through a planted link (docs/RELIABILITY.md "What is promised", issue 31): a
# symbolic link (or a pipe) under a name MindPipe writes in a run directory (lock, log.txt,
# metrics.jsonl, profile.json, trace.json, exit_status, deck.ini, run_id, energy.json,
# kernel_times.r0.json), in serve's --out directory (trace.json, serve.json, sock/) or in a llama's
# `export --format hf` directory (config.json, model.safetensors, the shards' index) is refused: a non-zero
# exit, a message naming the file, and the link's target untouched (a dangling link's target is not
# created). One rank, a 2-step run of the tiny deck: each refusal takes well under a second.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
data=$(mp_test_data) || { echo "not ok 1 - test data failed"; echo "1..1"; exit 1; }
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
S="--set train.threads=1 --set train.steps=2 --set train.warmup=1 --set train.eval_every=0 --set checkpoint.every=2"
# T OUT [args]: one rank, output in $SCRATCH/OUT.out (stdout and stderr); a 20 s limit (a pipe or a server that keeps running must not hang it)
T() { o=$1; shift; timeout 20 "$MINDPIPE" train -c "$deck" --set data.path="$data" --quiet $S --out "$SCRATCH/$o" "$@" \
    > "$SCRATCH/$o.out" 2>&1; }
has() { grep -q -- "$2" "$SCRATCH/$1.out" || { diag "$1.out:"; sed 's/^/#   /' "$SCRATCH/$1.out"; return 1; }; }
victim() { printf 'VICTIM %s\n' "$1" > "$SCRATCH/victim.$1"; }
intact() { [ "$(cat "$SCRATCH/victim.$1")" = "VICTIM $1" ]; }

# ---- train: a link under each name the run writes, in a fresh directory ----
n=0
for name in lock log.txt metrics.jsonl profile.json trace.json exit_status deck.ini run_id energy.json \
        kernel_times.r0.json; do
    n=$((n + 1))
    mkdir -p "$SCRATCH/l$n" && victim "$n" && ln -s "$SCRATCH/victim.$n" "$SCRATCH/l$n/$name"
    T "l$n" --set debug.kernel_times=1; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && has "l$n" "$SCRATCH/l$n/$name.*symbolic link" && intact "$n" &&
        [ -L "$SCRATCH/l$n/$name" ]
    ok $? "a link at RUN/$name is refused naming it (exit $rc), its target unchanged, the link left as it was"
done
[ ! -e "$SCRATCH/l1/log.txt" ] && [ ! -e "$SCRATCH/l1/ckpt" ]
ok $? "a refused lock touches nothing else in the directory (no log.txt, no ckpt/)"

# a dangling link: its target must not be created
mkdir -p "$SCRATCH/d" && ln -s "$SCRATCH/nowhere.txt" "$SCRATCH/d/metrics.jsonl"
T d; rc=$?
[ $rc -ne 0 ] && has d "metrics.jsonl.*symbolic link" && [ ! -e "$SCRATCH/nowhere.txt" ]
ok $? "a dangling link at RUN/metrics.jsonl is refused and its target is not created (exit $rc)"

# a pipe: refused, not waited on
mkdir -p "$SCRATCH/p" && mkfifo "$SCRATCH/p/log.txt"
T p; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && has p "log.txt is a device, pipe or socket"
ok $? "a pipe at RUN/log.txt is refused naming it, without blocking (exit $rc)"

# a link planted in a finished run's directory before it resumes
T r; rc=$?
victim r && rm -f "$SCRATCH/r/profile.json" && ln -s "$SCRATCH/victim.r" "$SCRATCH/r/profile.json"
T r --set train.steps=4 --resume auto; rc2=$?
[ $rc -eq 0 ] && [ $rc2 -ne 0 ] && has r "profile.json.*symbolic link" && intact r &&
    [ ! -e "$SCRATCH/r/ckpt/step_00000004.h5" ]
ok $? "a resume into a directory with a link at profile.json is refused before training (exit $rc then $rc2)"

# ---- export --format hf of a llama: its config.json, its weights, and a sharded export's index ----
L="--set model.arch=llama --set model.mlp_ratio=1 --set model.ffn_dim=32 --set model.kv_heads=1"
# shellcheck disable=SC2086
T ll $L; rc=$?
ok $? "a llama run for the export's cases (exit $rc)"
# E NAME [args]: export the llama's step 2 into $SCRATCH/e_NAME, where a link at NAME was planted
E() { n=$1; shift; mkdir -p "$SCRATCH/e_$n" && victim "e_$n" && ln -s "$SCRATCH/victim.e_$n" "$SCRATCH/e_$n/$n"
    # shellcheck disable=SC2086
    timeout 20 "$MINDPIPE" export --format hf -c "$deck" --set data.path="$data" $L \
        --ckpt "$SCRATCH/ll/ckpt/step_00000002.h5" --out "$SCRATCH/e_$n" "$@" > "$SCRATCH/e_$n.out" 2>&1; }
for name in config.json model.safetensors; do
    E $name; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && has "e_$name" "e_$name/$name.*symbolic link" && intact "e_$name" &&
        [ -L "$SCRATCH/e_$name/$name" ]
    ok $? "export --format hf (llama): a link at DIR/$name is refused naming it (exit $rc), its target unchanged"
done
E model.safetensors.index.json --max-shard-size 20KB; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && has e_model.safetensors.index.json "index.json.*symbolic link" &&
    intact e_model.safetensors.index.json
ok $? "export --format hf (llama, shards): a link at DIR/model.safetensors.index.json is refused naming it (exit $rc), its target unchanged"

# ---- serve: trace.json and serve.json in its --out directory ----
CK="$SCRATCH/r/ckpt/step_00000002.h5"
for name in trace.json serve.json; do
    mkdir -p "$SCRATCH/s_$name" && victim "s_$name" && ln -s "$SCRATCH/victim.s_$name" "$SCRATCH/s_$name/$name"
    timeout 20 "$MINDPIPE" serve -c "$deck" --ckpt "$CK" --stages 1 --slots 2 --listen 127.0.0.1:0 \
        --out "$SCRATCH/s_$name" > "$SCRATCH/s_$name.out" 2>&1; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && has "s_$name" "$SCRATCH/s_$name/$name.*symbolic link" && intact "s_$name"
    ok $? "serve: a link at DIR/$name is refused naming it (exit $rc), its target unchanged"
done
mkdir -p "$SCRATCH/s_sock" "$SCRATCH/victim_dir" && chmod 755 "$SCRATCH/victim_dir" && echo keep > "$SCRATCH/victim_dir/link0" &&
    ln -s "$SCRATCH/victim_dir" "$SCRATCH/s_sock/sock"
timeout 20 "$MINDPIPE" serve -c "$deck" --ckpt "$CK" --stages 1 --slots 2 --listen 127.0.0.1:0 \
    --out "$SCRATCH/s_sock" > "$SCRATCH/s_sock.out" 2>&1; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && has s_sock "$SCRATCH/s_sock/sock: it is not a directory (a symbolic link)" &&
    [ "$(stat -c %a "$SCRATCH/victim_dir")" = 755 ] && [ "$(cat "$SCRATCH/victim_dir/link0")" = keep ]
ok $? "serve: a link at DIR/sock is refused naming it (exit $rc), the directory it names neither chmod'ed nor emptied"
done_testing
