#!/usr/bin/env python3
"""Copies on a run's timeline (trace.json, the copy-engine row tid 1) and how many pairs of them from
different ranks overlapped in time in the same direction (offload copy / prefetch copy): the node's
host-link coordination (memory.coordinate) must make that count 0.

  copy_overlaps.py RUN_DIR...   prints "RUN_DIR copies overlaps" per run
"""
import json
import sys


def overlaps(run):
    ev = json.load(open("%s/trace.json" % run))["traceEvents"]
    cp = [e for e in ev if e["ph"] == "X" and e.get("tid") == 1]
    n = 0
    for d in ("offload copy", "prefetch copy"):
        xs = sorted((e["ts"], e["ts"] + e["dur"], e["pid"]) for e in cp if e["name"] == d)
        for i in range(len(xs)):
            for j in range(i + 1, len(xs)):
                if xs[j][0] >= xs[i][1]:
                    break
                n += xs[j][2] != xs[i][2]
    return len(cp), n


if __name__ == "__main__":
    for r in sys.argv[1:]:
        print(r, *overlaps(r))
