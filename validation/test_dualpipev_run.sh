#!/bin/sh
# dualpipev runs (ARCHITECTURE.md §5): DualPipeV's lists, the V placement with fused backwards beside
# split ones and overlapped forward-backward pairs, through every check of the V schedules'
# test (test_zbv_run.sh: bitwise one rank at pp = 2, 4 with m = 4, 8 where m >= 2pp, emu, dp, tp,
# recompute, selective, offload, resume, the timeline and its pairs, peak = plan, the refusals).
MP_V_KIND=dualpipev exec sh "${MP_SRCDIR:-$(dirname "$0")/..}/validation/test_zbv_run.sh"
