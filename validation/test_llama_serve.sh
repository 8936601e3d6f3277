#!/bin/sh
# `mindpipe serve` and `generate` of a llama model (issue 47; the decoder's llama block: rotary at each
# row's position, a KV cache of the kv heads only): a 2-stage server with a standby per stage gives the
# completions of a 1-stage server and of `mindpipe generate`, bitwise, and loses none when a stage's
# primary is killed (SIGKILL) under load.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_serve_init
M="--set model.seq_len=64 --set model.arch=llama --set model.mlp_ratio=1 --set model.kv_heads=2 --set model.ffn_dim=48"

# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $M --set data.path="$data" --set train.steps=300 --set train.batch=8 --set train.micro_batch=8 \
    --set train.warmup=20 --set train.min_lr=1e-3 --quiet --out "$SCRATCH/run" > "$SCRATCH/train.log" 2>&1
ok $? "train a 2-layer llama model 300 steps"
CK="$SCRATCH/run/ckpt/step_00000300.h5"

start() {  # start NAME ARGS...: a server in the background; URL once serve.json exists
    name=$1; shift
    # shellcheck disable=SC2086
    "$MINDPIPE" serve -c "$deck" $M --ckpt "$CK" --listen 127.0.0.1:0 --out "$SCRATCH/$name" "$@" \
        > "$SCRATCH/$name.log" 2>&1 &
    spid=$!
    pids="$pids $spid"
    URL=$(mp_serve_url "$SCRATCH/$name" $spid)
    [ -n "$URL" ]
}

start one --stages 1 --slots 8
ok $? "serve --stages 1 starts: $(head -1 "$SCRATCH/one.log")"
"$TORCH_PYTHON" "$client" load "$URL" --requests 24 --concurrency 1 --out "$SCRATCH/seq.jsonl" > "$SCRATCH/c.out" 2>&1
ok $? "24 requests one at a time: $(cat "$SCRATCH/c.out")"
kill -TERM $spid

start fo --stages 2 --standby 1 --slots 4
ok $? "serve --stages 2 --standby 1 starts"
FE=$spid
"$TORCH_PYTHON" "$client" load "$URL" --requests 24 --concurrency 6 --out "$SCRATCH/two.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    cmp -s "$SCRATCH/seq.jsonl" "$SCRATCH/two.jsonl"
ok $? "2 stages, 6 concurrent clients: the 24 completions bitwise the 1-stage server's ($(cat "$SCRATCH/c.out"))"

# generate (one process, no server): the same tokens for greedy and sampled requests
same=0
for i in 0 1 2 3; do
    if "$TORCH_PYTHON" "$client" request $i > "$SCRATCH/req" &&
        IFS=$(printf '\t') read -r prompt n temp topk seed rid < "$SCRATCH/req" &&
        # shellcheck disable=SC2086
        "$MINDPIPE" generate -c "$deck" $M --ckpt "$CK" --prompt "$prompt" --max-tokens "$n" --temperature "$temp" \
            --top-k "$topk" --seed "$seed" --request-id "$rid" > "$SCRATCH/gen$i" 2> "$SCRATCH/gen$i.err" &&
        "$TORCH_PYTHON" "$client" tokens "$SCRATCH/seq.jsonl" $i "$SCRATCH/srv$i" && [ -s "$SCRATCH/gen$i" ] &&
        cmp -s "$SCRATCH/gen$i" "$SCRATCH/srv$i"; then
        same=$((same + 1))
    else
        diag "request $i: generate '$(cat "$SCRATCH/gen$i" 2>/dev/null)' ($(head -c 200 "$SCRATCH/gen$i.err" 2>/dev/null))"
    fi
done
[ $same -eq 4 ]
ok $? "mindpipe generate gives the server's tokens for 4 requests ($same of 4)"

# stage 1's primary killed under load: its standby takes over, no completion lost or changed
# (the load goes round its 24 requests until fo.stop exists: it cannot end before the kill)
"$TORCH_PYTHON" "$client" load "$URL" --requests 24 --concurrency 6 --out "$SCRATCH/fo.jsonl" --until "$SCRATCH/fo.stop" \
    > "$SCRATCH/c.out" 2>&1 &
lpid=$!
sb=$(sed -n 's/.*"role": "standby", "stage": 1, "layers": \[[0-9]*, [0-9]*\], "pid": \([0-9]*\).*/\1/p' "$SCRATCH/fo/serve.json")
i=0; while ! grep -q "standby of stage 1 (pid $sb) follows its primary" "$SCRATCH/fo.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
p=$(sed -n 's/.*"role": "primary", "stage": 1, "layers": \[[0-9]*, [0-9]*\], "pid": \([0-9]*\).*/\1/p' "$SCRATCH/fo/serve.json")
kill -9 "$p"
i=0; while ! grep -q "failed over in" "$SCRATCH/fo.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
grep -q "failed over in" "$SCRATCH/fo.log" && kill -0 $lpid 2>/dev/null
ok $? "stage 1's primary (pid $p) killed under load: its standby took over ($(grep -o 'failed over in [^;]*' "$SCRATCH/fo.log" | head -n 1))"
sleep 0.5 # requests after the failover
touch "$SCRATCH/fo.stop"
wait $lpid; rc=$?
[ $rc -eq 0 ] && "$TORCH_PYTHON" "$client" same "$SCRATCH/seq.jsonl" "$SCRATCH/fo.jsonl" > "$SCRATCH/same.out" 2>&1
ok $? "no request lost or changed through the failover: $(cat "$SCRATCH/same.out" 2>/dev/null)"
kill -TERM "$FE"
wait "$FE"
done_testing
