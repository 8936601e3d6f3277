#!/usr/bin/env bash
# MB/s of `mindpipe prep --tokenizer gpt2` against tiktoken's gpt2 encoding (npm tiktoken 1.0.22:
# the Rust library as WebAssembly, one thread) on the same text, both pinned to the same core, in
# one invocation (docs/PERFORMANCE.md, "GPT-2's tokenizer").
#   bash validation/bench/bench_tokenizer.sh [BUILDDIR] [TEXT] [REPEATS] [CORE]
# Defaults: this tree, BUILDDIR/validation/kjv.txt (inputs/make_kjv.sh), 5, core 0. MB = 10^6 bytes
# of text. Each figure is the best of REPEATS runs (the host is shared). Printed:
#   prep gpt2    the whole command: reading and checking the vocabulary, cutting and merging,
#                writing and fsyncing the HDF5 file; wall time and CPU time (user + system)
#   prep gpt2 on 5 bytes: that command's fixed cost (mostly reading the vocabulary)
#   prep bytes   the default tokenizer, for scale
#   tiktoken     encode_ordinary(text) alone, the file already read (its own clocks, wall and CPU, from
#                the bytes' decoding to a JS string to the ids), and the whole `node` command (start,
#                loading the WebAssembly and its vocabulary)
set -eu
TIMEFORMAT='%3R %3U %3S' # bash's time: wall, user, system, in ms (getrusage)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$SRC}" && pwd)
TEXT=${2:-$B/validation/kjv.txt}
REPEATS=${3:-5}
CORE=${4:-0}
[ -s "$TEXT" ] || sh "$SRC/inputs/make_kjv.sh" "$TEXT"
CHECK=$SRC/validation/tokenizer/tiktoken_check.cjs
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cp "$B/src/mindpipe" "$W/mindpipe" # a rebuild while this runs must not pull the binary from under it
printf 'a b c' > "$W/tiny.txt" # three gpt2 tokens: the least prep takes
bytes=$(wc -c < "$TEXT")

# best NAME COMMAND...: runs COMMAND REPEATS times on CORE; prints NAME, the best wall and the best
# CPU (user + system) seconds, and MB/s of the text for each (with bytes = 0: seconds only)
best() {
    name=$1; shift
    : > "$W/times"
    for _ in $(seq "$REPEATS"); do
        rm -f "$W/out.h5"
        { time taskset -c "$CORE" "$@" > "$W/stdout" 2>> "$W/stderr" || echo "failed: $*" >> "$W/stderr"; } 2>> "$W/times"
    done
    awk -v n="$name" -v b="$bytes" 'BEGIN { w = 1e9; c = 1e9 }
        { if ($1 < w) w = $1; if ($2 + $3 < c) c = $2 + $3 }
        END { if (b) printf "%-30s wall %6.3f s %8.2f MB/s   cpu %6.3f s %8.2f MB/s\n", n, w, b / 1e6 / w, c, b / 1e6 / c;
              else printf "%-30s wall %6.3f s                 cpu %6.3f s\n", n, w, c }' "$W/times"
}

echo "text: $TEXT ($bytes bytes); core $CORE; best of $REPEATS; $(lscpu | sed -n 's/^Model name: *//p')"
best "prep --tokenizer gpt2" "$W/mindpipe" prep --tokenizer gpt2 --text "$TEXT" --out "$W/out.h5"
text_bytes=$bytes; bytes=0
best "prep --tokenizer gpt2, 5 bytes" "$W/mindpipe" prep --tokenizer gpt2 --text "$W/tiny.txt" --out "$W/out.h5"
bytes=$text_bytes
best "prep (bytes)" "$W/mindpipe" prep --text "$TEXT" --out "$W/out.h5"
best "node tiktoken (command)" node "$CHECK" bench "$TEXT"
: > "$W/enc"
for _ in $(seq "$REPEATS"); do taskset -c "$CORE" node "$CHECK" bench "$TEXT" >> "$W/enc"; done
# the checker's line: tiktoken BYTES bytes IDS ids wall SECONDS s MB/s MB/s cpu SECONDS s MB/s MB/s
awk 'BEGIN { w = 1e9; c = 1e9 } { if ($7 < w) w = $7; if ($12 < c) c = $12 }
    END { printf "%-30s wall %6.3f s %8.2f MB/s   cpu %6.3f s %8.2f MB/s\n", "tiktoken encode_ordinary", w, $2 / 1e6 / w, c, $2 / 1e6 / c }' "$W/enc"
