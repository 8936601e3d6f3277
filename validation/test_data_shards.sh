#!/bin/sh
# Sharded token data (issue 34, ARCHITECTURE.md §3): llm.c .bin shards by glob in data.order =
# sequential, resumed bitwise across a shard boundary and an epoch boundary at 1 rank and at dp=2;
# uint32 tokens beyond 65535 end to end; a token >= model.vocab refused naming its file; and the
# memory proof: a 4 GiB shard (sparse: no disk) trains at dp=2 with each rank's peak resident memory
# within 1 GiB of the same run on a 1 MiB shard (tokens are mapped, never copied whole).
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_h5py
mp_scratch_init
deck="$MP_SRCDIR/validation/decks/train.ini"
MPIEXEC=${MPIEXEC:-mpiexec}
write() { "$TORCH_PYTHON" "$MP_SRCDIR/validation/write_bin_shards.py" "$@"; }

# 3 shards of 700 tokens: seq_len 32 makes 65 windows, an epoch of 8.1 steps of batch 8; windows
# cross the shards' boundaries at tokens 700 and 1400.
write "$SCRATCH/tr" 3 700 256 u16 && write "$SCRATCH/va" 1 400 256 u16
ok $? "write .bin shards with validation/write_bin_shards.py"
train() {  # train RANKS OUT [--set ...]
    n=$1; out=$2; shift 2
    $MPIEXEC -n "$n" "$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/tr_*.bin" \
        --set data.val_path="$SCRATCH/va_*.bin" --set data.order=sequential --set train.steps=12 \
        --set checkpoint.every=6 --set train.eval_every=6 --set train.log_every=1 --quiet --out "$SCRATCH/$out" "$@" \
        > "$SCRATCH/$out.log" 2>&1
}
compare() {
    label=$1; shift
    "$TORCH_PYTHON" "$MP_SRCDIR/validation/compare_runs.py" "$@" > "$SCRATCH/cmp.out" 2>&1
    tap_checker "$label" compare_runs.py $? "$SCRATCH/cmp.out"
}
for layout in "1 s1" "2 s2 --set parallel.dp=2"; do
    # shellcheck disable=SC2086
    set -- $layout
    n=$1; name=$2; shift 2
    train "$n" "$name" "$@"; ok $? "$name: 12 steps, sequential order, $n rank(s) $*"
    mkdir -p "$SCRATCH/$name.r/ckpt" && cp "$SCRATCH/$name/ckpt/step_00000006.h5" "$SCRATCH/$name.r/ckpt/"
    train "$n" "$name.r" "$@" --resume auto; ok $? "$name: resumed from step 6 (the epoch ends in step 9)"
    resumed_from "$name" "$name.r" 6
    compare "$name: 6 + resume + 6 = 12 straight" "$SCRATCH/$name" "$SCRATCH/$name.r" --bitwise --step 12
done

# uint32 tokens >= 65536 reach the model: vocab 70000.
write "$SCRATCH/w" 2 600 70000 u32
"$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/w_*.bin" --set data.val_path="$SCRATCH/w_000001.bin" \
    --set model.vocab=70000 --set train.steps=2 --set train.warmup=1 --set train.eval_every=2 --quiet --out "$SCRATCH/w" > "$SCRATCH/w.log" 2>&1 &&
    "$TORCH_PYTHON" -c "
import json, math, sys
r = [json.loads(l) for l in open('$SCRATCH/w/metrics.jsonl')]
sys.exit(0 if r and all(math.isfinite(x['loss']) for x in r) and 'val_loss' in r[-1] else 1)"
ok $? "uint32 shards with tokens up to 69999 train at model.vocab=70000 (finite loss and val_loss)"

write "$SCRATCH/bt" 1 600 256 u16 --big-token
"$MINDPIPE" train -c "$deck" --set data.path="$SCRATCH/bt_*.bin" --quiet --out "$SCRATCH/bt" > "$SCRATCH/bt.log" 2>&1
[ $? -ne 0 ] && grep -q "bt_000000.bin: token 256 at index 5 is >= model.vocab=256" "$SCRATCH/bt.log"
ok $? "a token >= model.vocab is refused, naming the shard, the token and its index"

# The memory proof. Both shards are holes after a valid header (zeros: token 0).
sparse() {  # sparse FILE TOKENS
    "$TORCH_PYTHON" -c "
import struct, sys
h = struct.pack('<256i', *([20240520, 1, $2] + [0] * 253))
with open('$1', 'wb') as f:
    f.write(h); f.truncate(1024 + 2 * $2)"
}
sparse "$SCRATCH/big.bin" 2147483647 && sparse "$SCRATCH/small.bin" 524288
ok $? "a 4 GiB and a 1 MiB .bin shard, sparse ($(du -k "$SCRATCH/big.bin" | cut -f1) KiB on disk)"
peak() {  # peak FILE OUT: each rank's peak RSS in KiB (ru_maxrss of the rank, its VmHWM) into OUT.rss.RANK
    # (a file, not stdout: once the rank has finalized, the launcher may stop forwarding its output)
    rm -f "$SCRATCH/$2".rss.*
    $MPIEXEC -n 2 "$TORCH_PYTHON" -c "
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], close_fds=False)  # the MPI launcher's PMI descriptor
with open('%s.rss.%s' % (sys.argv[1], os.environ.get('PMI_RANK', os.getpid())), 'w') as f:
    f.write('maxrss_kib %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)" "$SCRATCH/$2" "$MINDPIPE" train -c "$deck" --set data.path="$1" --set parallel.dp=2 --set train.steps=3 \
        --set train.warmup=1 --set checkpoint.every=0 --set train.eval_every=0 --quiet --out "$SCRATCH/$2" \
        > "$SCRATCH/$2.log" 2>&1
}
peak "$SCRATCH/small.bin" small; rs=$?
peak "$SCRATCH/big.bin" big; rb=$?
[ $rs -eq 0 ] && [ $rb -eq 0 ]
ok $? "3 steps at dp=2 on each"
small=$(cat "$SCRATCH"/small.rss.* 2>/dev/null | sed -n 's/^maxrss_kib //p' | sort -n | tail -n 1)
big=$(cat "$SCRATCH"/big.rss.* 2>/dev/null | sed -n 's/^maxrss_kib //p' | sort -n | tail -n 1)
[ "$(cat "$SCRATCH"/small.rss.* "$SCRATCH"/big.rss.* 2>/dev/null | grep -c maxrss_kib)" -eq 4 ]
ok $? "each of the 2 ranks of both runs reported its peak"
diag "largest rank peak RSS: ${small:-?} KiB with the 1 MiB shard, ${big:-?} KiB with the 4 GiB shard"
[ -n "$small" ] && [ -n "$big" ] && [ $((big - small)) -lt 1048576 ]
ok $? "the 4 GiB shard costs each rank less than 1 GiB more resident memory than the 1 MiB one"
done_testing
