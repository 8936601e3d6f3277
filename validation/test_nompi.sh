#!/bin/sh
# The commands that need no MPI never initialise it (commands.c: those without CMD_MPI), so they open
# none of UCX's transports, whose TCP one listens on the machine's external interface
# (docs/SERVING.md "What listens", docs/RELIABILITY.md promise 8):
# - every serving process (front end, 2 stages, 2 standbys) holds exactly the TCP listeners it was
#   asked for: the front end the --listen address on loopback, a stage none (ss -ltnp), and none maps
#   a UCX transport module or shared-memory segment (/proc/PID/maps);
# - prep, inspect, generate, export, sim, plan and deck-reference run where MPI_Init cannot:
#   PMI_FD naming a closed descriptor makes MPI_Init fail at once (eval, which needs MPI, shows it).
# A launcher that starts such a command as several processes is refused.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_serve_init
M="--set model.seq_len=64"
# nompi CMD...: CMD where MPI_Init fails (PMI_FD names a descriptor that is closed; sh redirects 0-9 only)
nompi() { PMI_FD=9 "$@" 9>&-; }

# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $M --set data.path="$data" --set train.steps=4 --quiet --out "$SCRATCH/run" \
    > "$SCRATCH/train.log" 2>&1
ok $? "train a 2-layer model 4 steps (with MPI)"
CK="$SCRATCH/run/ckpt/step_00000004.h5"

# the control: under nompi a command that initialises MPI fails in MPI_Init
# shellcheck disable=SC2086
"$MINDPIPE" eval -c "$deck" $M --set data.path="$data" --ckpt "$CK" > "$SCRATCH/ev.out" 2>&1 &&
    grep -q "^val_loss " "$SCRATCH/ev.out" &&
    ! nompi "$MINDPIPE" eval -c "$deck" $M --set data.path="$data" --ckpt "$CK" > "$SCRATCH/ev2.out" 2>&1 &&
    grep -q "PMI" "$SCRATCH/ev2.out" && ! grep -q "^val_loss " "$SCRATCH/ev2.out"
ok $? "the control: eval (MPI) works, and fails in MPI_Init under PMI_FD=closed: $(grep -m1 PMI "$SCRATCH/ev2.out")"

# serving, started as a user would (MPI could start): /proc/PID/maps witnesses that no process did
"$MINDPIPE" serve -c "$deck" $M --ckpt "$CK" --stages 2 --standby 1 --listen 127.0.0.1:0 --out "$SCRATCH/srv" \
    > "$SCRATCH/srv.log" 2>&1 &
fe=$!; pids="$pids $fe"
URL=$(mp_serve_url "$SCRATCH/srv" $fe)
"$TORCH_PYTHON" "$client" load "$URL" --requests 4 --concurrency 2 --out "$SCRATCH/c.jsonl" > "$SCRATCH/c.out" 2>&1 &&
    ! grep -q '"error"' "$SCRATCH/c.jsonl"
ok $? "serve --stages 2 --standby 1 starts and serves ($(cat "$SCRATCH/c.out"))"
all=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$SCRATCH/srv/serve.json")
[ "$(echo "$all" | wc -w)" -eq 5 ]
ok $? "serve.json names 5 processes: $(echo $all)"
# shellcheck disable=SC2154
addr=${URL#http://}
ss -ltnpH > "$SCRATCH/ss.out" 2>&1
grep -q "pid=$fe," "$SCRATCH/ss.out"
ok $? "ss -ltnp names the listening processes (the front end's pid $fe among them)"
for p in $all; do
    grep "pid=$p," "$SCRATCH/ss.out" | awk '{print $4}' | sort > "$SCRATCH/l.$p"
    if [ "$p" = "$fe" ]; then want="$addr"; role="the front end"; else want=""; role="stage process"; fi
    [ "$(cat "$SCRATCH/l.$p")" = "$want" ]
    ok $? "$role $p listens on TCP at exactly '${want:-nothing}': $(tr '\n' ' ' < "$SCRATCH/l.$p")"
    ! grep -q "ucx/libuct_\|ucx_shm" "/proc/$p/maps"
    ok $? "$role $p maps no UCX transport and no UCX shared memory: $(grep -o '[^/ ]*ucx[^ ]*' "/proc/$p/maps" | sort -u | tr '\n' ' ')"
done
kill -TERM $fe; wait $fe
ok $? "SIGTERM stops the server (exit 0)"

# the tools where MPI_Init cannot run
head -c 20000 "$MP_BUILDDIR/validation/kjv.txt" > "$SCRATCH/t.txt"
nompi "$MINDPIPE" prep --text "$SCRATCH/t.txt" --out "$SCRATCH/t.h5" > "$SCRATCH/o" 2>&1 && [ -s "$SCRATCH/t.h5" ]
ok $? "prep without MPI: $(tail -1 "$SCRATCH/o")"
nompi "$MINDPIPE" inspect "$CK" > "$SCRATCH/o" 2>&1 && grep -q "^step 4 " "$SCRATCH/o"
ok $? "inspect without MPI: $(grep -m1 "file checksum" "$SCRATCH/o")"
# shellcheck disable=SC2086
"$MINDPIPE" generate -c "$deck" $M --ckpt "$CK" --prompt "And God" --max-tokens 16 > "$SCRATCH/g1" 2>/dev/null &&
    nompi "$MINDPIPE" generate -c "$deck" $M --ckpt "$CK" --prompt "And God" --max-tokens 16 > "$SCRATCH/g2" 2>"$SCRATCH/o" &&
    [ -s "$SCRATCH/g2" ] && cmp -s "$SCRATCH/g1" "$SCRATCH/g2"
ok $? "generate without MPI: the same bytes ($(wc -c < "$SCRATCH/g2") of them)"
SN="--set model.layers=4 --set supernet.enabled=1 --set supernet.candidates=h4m4,h2m1,skip --set supernet.window=2"
# shellcheck disable=SC2086
"$MINDPIPE" train -c "$deck" $M $SN --set data.path="$data" --set train.steps=2 --set train.warmup=1 --quiet --out "$SCRATCH/sn" \
    > "$SCRATCH/o" 2>&1 &&
    nompi "$MINDPIPE" export -c "$deck" $M $SN --ckpt "$SCRATCH/sn/ckpt/step_00000002.h5" --subnet 0,1,2,1 \
        --out "$SCRATCH/sub.h5" > "$SCRATCH/o" 2>&1 && grep -q "^blocks = h4m4,h2m1,skip,h2m1$" "$SCRATCH/o" &&
    nompi "$MINDPIPE" inspect "$SCRATCH/sub.h5" > "$SCRATCH/o" 2>&1 && grep -q "blocks=h4m4,h2m1,skip,h2m1" "$SCRATCH/o"
ok $? "export of a supernet's subnet without MPI: a plain model that inspect verifies"
nompi "$MINDPIPE" sim --schedule 1f1b --pp 4 --m 8 > "$SCRATCH/o" 2>&1 && grep -q "valid" "$SCRATCH/o"
ok $? "sim without MPI"
# shellcheck disable=SC2086
MINDPIPE_DEVICES="$MP_SRCDIR/inputs/devices.ini" nompi "$MINDPIPE" plan -c "$deck" $M --ranks 4 --top 1 > "$SCRATCH/o" 2>&1 &&
    [ -s "$SCRATCH/o" ]
ok $? "plan --ranks 4 without MPI: $(head -1 "$SCRATCH/o")"
nompi "$MINDPIPE" deck-reference > "$SCRATCH/o" 2>&1 && grep -q "model.dim" "$SCRATCH/o"
ok $? "deck-reference without MPI"
# the deck's reference is docs/DECK.md, word for word (as CLI.md is cli-reference's: test_cli.sh)
cmp -s "$SCRATCH/o" "$MP_SRCDIR/docs/DECK.md"
ok $? "docs/DECK.md is the output of mindpipe deck-reference (regenerate it when a key changes)"
PMI_SIZE=2 "$MINDPIPE" inspect "$CK" > "$SCRATCH/o" 2>&1
[ $? -eq 2 ] && grep -q "runs in one process and without MPI" "$SCRATCH/o"
ok $? "started as 2 processes by a launcher (PMI_SIZE=2), a command without MPI is refused: $(head -1 "$SCRATCH/o")"
done_testing
