#!/usr/bin/env python3
"""NASPipe's rule on a supernet run's timeline (ARCHITECTURE.md §4), run by /usr/bin/python3.
  causal_trace.py RUN_DIR [--serial] [--most N]
On every stage (a trace process; with supernet replicas, the processes of one stage index: the rule
holds across them), subnet t is in flight from its first forward to the end of its
"subnet step" (its candidates' update there). Two subnets that activate a common candidate with
weights among the stage's layers conflict; the later one's first forward there must start after the
earlier one's step has ended. The stage's layers come from RUN_DIR/log.txt's layout table, the
subnets from the deck stored in RUN_DIR/deck.ini and the sampler (torch_ref.subnet).
--serial: every pair of subnets must be apart (supernet.schedule = serial); without it, at least
one pair of subnets must overlap somewhere (else the run was not causal at all).
--most N: no stage ever has more than N subnets in flight at once (supernet.resident = host with
fewer device slots than candidates caps them at slots - 1).
Output: PASS/FAIL lines as torch_ref.py; exit status 1 if any failed.
"""
import argparse
import configparser
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref  # noqa: E402  (the sampler, bit for bit)


def stage_layers(log_path):
    """rank -> set of layers it holds, from the layout table (`... holds layers a-b, ...`)."""
    held = {}
    for line in open(log_path):
        m = re.match(r"\s+(\d+)\s+\d+\s+\d+\s+\d+\s+\d+\s+.*\blayers? (\d+)(?:-(\d+))?", line)
        if m:
            a = int(m.group(2))
            b = int(m.group(3)) if m.group(3) else a
            held[int(m.group(1))] = set(range(a, b + 1))
    return held


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--serial", action="store_true")
    ap.add_argument("--most", type=int, default=0)
    a = ap.parse_args()
    deck = configparser.ConfigParser()
    deck.read(os.path.join(a.run, "deck.ini"))
    layers = int(deck["model"]["layers"])
    cands = [c.strip() for c in deck["supernet"]["candidates"].strip('"').split(",")]
    blocks = deck["supernet"].get("blocks", "").strip().strip('"')
    cfg = {"layers": layers, "cands": cands,
           "choice": [int(x) for x in blocks.split(",")] if blocks else list(range(layers))}
    seed = int(deck["train"]["seed"])
    held = stage_layers(os.path.join(a.run, "log.txt"))
    events = json.load(open(os.path.join(a.run, "trace.json")))["traceEvents"]
    # supernet replicas (parallel.sp > 1): the rule holds across the replicas of a stage, which run
    # different subnets on one clock (one node), so a stage is its ranks that differ only in sp
    group = {e["pid"]: re.sub(r"^rank \d+: | ?sp\d+", "", e["args"]["name"]) for e in events
             if e.get("ph") == "M" and e["name"] == "process_name"}
    lead = {}
    for pid in sorted(held):
        lead.setdefault(group.get(pid, pid), pid)
    ev = [e for e in events if e.get("ph") == "X"]
    first, done = {}, {}
    for e in ev:
        key = (lead[group.get(e["pid"], e["pid"])], e["args"]["step"])
        if e["name"] == "forward":
            first[key] = min(first.get(key, e["ts"]), e["ts"])
        elif e["name"] == "subnet step":
            done[key] = e["ts"] + e["dur"]
    held = {pid: layers for pid, layers in held.items() if pid in lead.values()}
    bad, pairs, overlaps, conflicts, most = [], 0, 0, 0, 0
    for pid, mine in sorted(held.items()):
        steps = sorted(t for (p, t) in first if p == pid)
        missing = [t for t in steps if (pid, t) not in done]
        if missing:
            bad.append(f"rank {pid}: subnets {missing[:4]} have forwards but no subnet step")
            continue
        # most subnets in flight at once here: at each start, those started and not yet stepped
        for t in steps:
            now = sum(1 for u in steps if first[(pid, u)] <= first[(pid, t)] < done[(pid, u)])
            most = max(most, now)
            if a.most and now > a.most:
                bad.append(f"rank {pid}: {now} subnets in flight when subnet {t} started (at most {a.most})")
        sel = {t: torch_ref.subnet(cfg, seed, t) for t in steps}
        for i, ti in enumerate(steps):
            for tj in steps[i + 1:]:
                pairs += 1
                clash = any(sel[ti][l] >= 0 and sel[ti][l] == sel[tj][l] and cands[sel[ti][l]] != "skip" for l in mine)
                apart = done[(pid, ti)] <= first[(pid, tj)]
                conflicts += clash
                overlaps += not apart
                if (clash or a.serial) and not apart:
                    bad.append(f"rank {pid}: subnet {tj} started at {first[(pid, tj)]:.0f} us before subnet {ti}'s step "
                               f"ended at {done[(pid, ti)]:.0f} us" + (" (they conflict)" if clash else ""))
    ok = not bad and pairs > 0 and len(held) > 0 and (a.serial or a.most == 1 or overlaps > 0)
    what = (f"{len(held)} stage(s), {pairs} pairs of subnets on a stage, {conflicts} conflicting, "
            f"{overlaps} in flight together, at most {most} at once")
    print(("PASS " if ok else "FAIL ") + ("serial: no two subnets in flight on a stage" if a.serial else
                                          "no conflicting subnets in flight together on a stage") + f" ({what})")
    for b in bad[:5]:
        print("FAIL " + b)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
