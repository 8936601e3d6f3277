#!/bin/sh
# docs/PERFORMANCE.md's table of the zero-bubble schedules: `mindpipe sim`'s bubble and peak stash
# (stage units, the most of any stage) for p in {2, 4}, m in {4, 8}, unit times T_F = T_B = T_W = 1
# (1F1B's fused backward 2). Usage: MINDPIPE=BUILD/src/mindpipe sh validation/bench/zb_table.sh
M=${MINDPIPE:-mindpipe}
echo "| p | m | 1f1b | interleaved (v = 2) | zb1p | zbv | dualpipev |"
echo "|---|---|---|---|---|---|---|"
for p in 2 4; do
    for m in 4 8; do
        row="| $p | $m |"
        for s in 1f1b interleaved zb1p zbv dualpipev; do
            v=
            [ $s = interleaved ] && v="--v 2"
            if ! out=$("$M" sim --schedule $s --pp $p --m $m $v); then
                row="$row refused (m < 2p) |"
                continue
            fi
            if [ $s = 1f1b ]; then # its own peak: stage 0's stashes (one stage unit each)
                b=$(echo "$out" | sed -n 's/.*bubble \([0-9.]*\)$/\1/p')
                k=$(echo "$out" | sed -n 's/.*stage 0: peak stashed micro-batches \([0-9]*\)$/\1/p')
                row="$row $b / $k.00 |"
            else # the line that sets it beside 1f1b's
                row="$row $(echo "$out" | sed -n "s/.*; $s: bubble \([0-9.]*\), peak stash \([0-9.]*\)$/\1 \/ \2/p") |"
            fi
        done
        echo "$row"
    done
done
