#!/bin/sh
# Writes the King James Bible (public domain; Debian packages bible-kjv, bible-kjv-text) as plain
# text to $1: one verse per line, the "Ge1:1 " reference prefixes stripped.
set -eu
out=${1:?usage: make_kjv.sh OUT.txt}
if ! command -v bible >/dev/null 2>&1; then
    echo "make_kjv.sh: the 'bible' program is missing: apt-get install bible-kjv bible-kjv-text" >&2
    exit 1
fi
tmp="$out.tmp.$$"
bible -f 'gen1:1-rev22:21' | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$tmp"
lines=$(wc -l < "$tmp")
if [ "$lines" -lt 30000 ]; then
    echo "make_kjv.sh: expected about 31102 verses, got $lines" >&2
    rm -f "$tmp"
    exit 1
fi
mv "$tmp" "$out"
