#!/usr/bin/env python3
"""Zero-bubble benchmark (issue 35) on one 2-core node: pp = 2 with one thread per rank, the small
shape of bench_pipeline.py with 8 layers (zbv cuts each stage into two chunks), m = 4 and 8
micro-batches of one sequence; zb1p and zbv against 1f1b and interleaved (v = 2) in the same
invocation, the schedules alternating run by run so that a drift of the machine falls on all of them
alike; dualpipev (DeepSeek's DualPipeV: the V with overlapped forward-backward pairs, m >= 2pp) beside
them.

  /usr/bin/python3 validation/bench/bench_zb.py [--mindpipe src/mindpipe] [--data data/kjv.h5] [--runs 5]
      [--timelines DIR] [--profile] [--schedules 1f1b,zbv,dualpipev] [--pp 4]

Per point: the median over runs of the mean step time (profile.json's step_seconds) and its range,
tokens/s, the measured bubble (from trace.json: the share of stage 0's step outside its compute
spans, the same spans plot_run.py draws), and the simulator's bubble for unit costs (`mindpipe sim`).
The verdict lines compare each zero-bubble schedule's gain over 1f1b with the simulator's predicted
gain (the issue's goal, for zb1p and zbv: at least half of it). --timelines DIR keeps the last run of each schedule at m = 8 and draws its
timeline there with validation/plot_run.py (timeline_pp<pp>_<schedule>.png). --profile first measures the
model with `mindpipe profile` and adds zb1p and zbv with their lists played from it
(parallel.schedule_profile: rows "zb1p/prof", "zbv/prof"), judged against the simulator's gain at
the times they played (read from the run's log), 1f1b's makespan taken at the same times. --pp 4
runs four single-threaded ranks on the two cores (the issue: report it, do not judge by it; dualpipev
needs m >= 2pp, so it runs at m = 8 only there)."""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench import bench_args, env

SHAPE = dict(layers=8, dim=384, heads=6, seq_len=256, vocab=256)
SCHEDULES = [("1f1b", {}), ("interleaved", {"parallel.virtual_stages": 2}), ("zb1p", {}), ("zbv", {}),
             ("dualpipev", {})]
ZERO_BUBBLE = ("zb1p", "zbv", "dualpipev")  # judged against the simulator's gain over 1f1b
PLAYED = ("zb1p", "zbv")  # with --profile also run with lists played from the profile (as "zb1p/prof")
COMPUTE = ("forward", "backward", "recompute", "optimizer")  # trace span names (lower case) that compute
OUTSIDE = ("evaluation", "checkpoint")  # spans of a step that are no part of the pipeline's step


def shape_sets(a):
    return {**{f"model.{k}": v for k, v in SHAPE.items()}, "train.micro_batch": 1, "train.threads": 1,
            "data.path": a.data}


def profile(a, path):
    """`mindpipe profile` of the benchmark's model (one rank, one thread, micro-batches of one)."""
    deck = path + ".ini"  # the defaults, as the runs take them (train needs no deck; profile does)
    with open(deck, "w") as f:
        f.write("; bench_zb.py: every key at its default, the shape from --set\n")
    cmd = [a.mindpipe, "profile", "-c", deck, "--out", path]
    for k, v in shape_sets(a).items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, env=env(1), stdout=subprocess.DEVNULL)


def played(out):
    """The times a run's lists were played with, from its log (None: unit)."""
    m = re.search(r"TF ([0-9.e+-]+) s, TB ([0-9.e+-]+) s, TW ([0-9.e+-]+) s", open(os.path.join(out, "log.txt")).read())
    return ",".join(m.groups()) if m else None


def run(a, m, sched, extra, out, steps=5):
    shutil.rmtree(out, ignore_errors=True)
    sets = shape_sets(a)
    sets.update({"train.batch": m, "train.steps": steps + 1, "train.warmup": 1,
                 "train.eval_every": 0, "train.log_every": 1, "train.peak_gflops": 1,
                 "checkpoint.final": 0, "train.lr": 1e-4, "train.min_lr": 1e-5,
                 "parallel.pp": a.pp, "parallel.schedule": sched, **extra})
    cmd = ["mpiexec", "-n", str(a.pp), a.mindpipe, "train", "--quiet", "--out", out]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, env=env(1), stdout=subprocess.DEVNULL)
    prof = json.load(open(os.path.join(out, "profile.json")))
    return prof["step_seconds"], trace_bubble(os.path.join(out, "trace.json")), played(out)


def fits(a, m, sched):
    """dualpipev's order needs m >= 2pp micro-batches (the runtime refuses fewer)."""
    return not sched.startswith("dualpipev") or m >= 2 * a.pp


def trace_bubble(path):
    """Stage 0's idle share per step from the Chrome trace: 1 - (compute spans) / (step span), the
    median over the steps after the first (warm-up)."""
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    spans = [e for e in ev if e.get("ph") == "X" and e.get("pid") == 0 and "step" in e.get("args", {})
             and not any(k in e["name"].lower() for k in OUTSIDE)]
    by = {}
    for e in spans:
        by.setdefault(e["args"]["step"], []).append(e)
    shares = []
    for step in sorted(by)[1:]:
        es = by[step]
        t0, t1 = min(e["ts"] for e in es), max(e["ts"] + e["dur"] for e in es)
        busy = sum(e["dur"] for e in es if any(k in e["name"].lower() for k in COMPUTE))
        if t1 > t0:
            shares.append(1 - busy / (t1 - t0))
    return statistics.median(shares) if shares else float("nan")


def sim_bubble(a, sched, m, costs=None):
    v = ["--v", "2"] if sched == "interleaved" else []
    c = ["--costs", costs] if costs else []
    out = subprocess.run([a.mindpipe, "sim", "--schedule", sched, "--pp", str(a.pp), "--m", str(m)] + v + c, check=True,
                         capture_output=True, text=True).stdout
    b = re.search(r"makespan ([0-9.]+) tf, busy ([0-9.]+) tf per stage, bubble ([0-9.]+)", out)
    return float(b.group(1)), float(b.group(3))


def main():
    ap = bench_args(__doc__)
    ap.add_argument("--timelines", default=None, help="draw each schedule's m = 8 timeline into this folder")
    ap.add_argument("--profile", action="store_true",
                    help="also run zb1p and zbv with lists played from a mindpipe profile of the model "
                         "(parallel.schedule_profile), judged against the simulator's gain for those times")
    ap.add_argument("--schedules", default=None,
                    help="run only these of the schedules, comma-separated (1f1b always: the gains are against it)")
    ap.add_argument("--pp", type=int, default=2, choices=(2, 4),
                    help="pipeline stages, one single-threaded rank each (4: oversubscribes the two cores)")
    a = ap.parse_args()
    if "--runs" not in sys.argv:
        a.runs = 5
    a.data = os.path.abspath(a.data)
    T = SHAPE["seq_len"]
    print(f"pp = {a.pp}, 1 thread per rank, {SHAPE}; median of {a.runs} runs each (range in brackets)\n")
    print("| m | schedule | step ms | tokens/s | bubble measured (trace, stage 0) | bubble simulated (unit costs) |")
    print("|---|---|---|---|---|---|")
    res, costs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        keep = set(a.schedules.split(",")) | {"1f1b"} if a.schedules else None
        runs = [r for r in SCHEDULES if keep is None or r[0] in keep]
        if a.profile:
            prof = os.path.join(tmp, "prof.json")
            profile(a, prof)
            runs += [(z + "/prof", {"parallel.schedule_profile": prof}) for z in PLAYED if keep is None or z in keep]
        for m in (4, 8):
            here = [r for r in runs if fits(a, m, r[0])]
            got = {s: [] for s, _ in here}
            for _ in range(a.runs):
                for s, extra in here:
                    got[s].append(run(a, m, s.split("/")[0], extra, os.path.join(tmp, s.replace("/", "-"))))
            for s, _ in runs:
                if not fits(a, m, s):
                    print(f"| {m} | {s} | not run: m < 2pp = {2 * a.pp} | | | |", flush=True)
                    continue
                ts = [r[0] for r in got[s]]
                t = statistics.median(ts)
                res[(m, s)] = t
                meas = statistics.median(r[1] for r in got[s])
                costs[s] = got[s][0][2]
                _, sb = sim_bubble(a, s.split("/")[0], m, costs[s])
                print(f"| {m} | {s} | {1e3 * t:.1f} ({1e3 * min(ts):.1f}-{1e3 * max(ts):.1f}) | {m * T / t:.0f} | "
                      f"{meas:.3f} | {sb:.3f}{' (played times ' + costs[s] + ')' if costs[s] else ''} |", flush=True)
                if a.timelines and m == 8:
                    os.makedirs(a.timelines, exist_ok=True)
                    n = s.replace("/", "-")
                    pd = os.path.join(tmp, "plot-" + n)
                    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "plot_run.py"),
                                    os.path.join(tmp, n), "--out", pd], check=True, stdout=subprocess.DEVNULL)
                    shutil.copy(os.path.join(pd, "timeline.png"), os.path.join(a.timelines, f"timeline_pp{a.pp}_{n}.png"))
    print()
    if a.pp > 2:
        print(f"pp = {a.pp}: {a.pp} ranks share the two cores; the gains below are reported, not judged by\n")
    for z in [s for s, _ in runs if s.split("/")[0] in ZERO_BUBBLE]:
        for m in [m for m in (4, 8) if fits(a, m, z)]:
            # the prediction for the times the lists were played with: 1f1b's makespan at the same
            # times (its fused backward = B + W)
            mk1, _ = sim_bubble(a, "1f1b", m, costs[z])
            mkz, _ = sim_bubble(a, z.split("/")[0], m, costs[z])
            pred = 1 - mkz / mk1
            got = 1 - res[(m, z)] / res[(m, "1f1b")]
            verdict = "meets" if got >= pred / 2 else "misses"
            if a.pp > 2:
                verdict = "not judged (oversubscribed) by"
            print(f"m = {m}: {z}'s step is {100 * got:+.1f}% shorter than 1f1b's; the simulator predicts "
                  f"{100 * pred:.1f}% ({'the profile' + chr(39) + 's times' if costs[z] else 'unit costs'}): "
                  f"{verdict} the goal of at least half ({100 * pred / 2:.1f}%)")


if __name__ == "__main__":
    main()
