#!/usr/bin/env python3
"""Failover benchmark (docs/SERVING.md): `mindpipe serve --stages 2` on a gpt-tiny-shaped checkpoint
under a load of concurrent clients while the primaries of stages 1, 0, 1, 0, ... are killed with
SIGKILL; per failover, from the front end's trace (DIR/trace.json, wall-clock microseconds) and the
time of each kill taken here:

  detect       kill -> the front end notices the death (it reaps its children every 50 ms)
  recovered    kill -> the standby signalled (or a new process started and loaded)
  report       kill -> the promoted standby's report of its durable state arrived
  resume       kill -> an empty step went round the ring again: requests resume
  first token  kill -> the first token sampled after the failover (the failover time reported)

  /usr/bin/python3 validation/bench/bench_failover.py [--mindpipe src/mindpipe] [--data data/kjv.h5]
      [--kills 8] [--standby 1] [--trace merged.json]

--standby 0 measures the path without a standby (a new process loads the weights; running
requests replay). --trace writes the server's trace with the kills added, for chrome://tracing.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
from bench import bench_args, machine  # noqa: E402
from bench_serve import checkpoint, front_end_url, DECK, CLIENT  # noqa: E402


def trace_events(path):
    """The server's trace: one JSON object a line after "[" (the closing "]" is optional)."""
    ev = []
    for line in open(path):
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            ev.append(json.loads(line))
    return ev


def primary_pid(out, stage):
    js = json.load(open(os.path.join(out, "serve.json")))
    return next(s["pid"] for s in js["stages"] if s["role"] == "primary" and s["stage"] == stage)


def run(a, tmp, ck):
    out = os.path.join(tmp, "fo")
    p = subprocess.Popen([a.mindpipe, "serve", "-c", DECK, "--ckpt", ck, "--stages", "2", "--standby", str(a.standby),
                          "--slots", "8", "--listen", "127.0.0.1:0", "--out", out],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "fo.log"), "w"))
    kills = []
    try:
        url = front_end_url(p, out)
        load = subprocess.Popen([sys.executable, CLIENT, "load", url, "--requests", str(a.requests), "--concurrency", "8",
                                 "--summary", "--out", os.path.join(tmp, "load.jsonl")], stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        for k in range(a.kills):
            stage = 1 - k % 2
            pid = primary_pid(out, stage)
            t = time.time()
            os.kill(pid, signal.SIGKILL)
            kills.append({"name": "kill", "cat": "failover", "ph": "i", "s": "g", "ts": t * 1e6, "pid": 0, "tid": 0,
                          "args": {"stage": stage, "pid": pid}})
            for _ in range(100):  # until serve.json names the replacement, then let the load run on
                time.sleep(0.05)
                if primary_pid(out, stage) != pid:
                    break
            time.sleep(a.gap)
        res = json.loads(load.communicate()[0])
        res["errors"] = sum('"error"' in line for line in open(os.path.join(tmp, "load.jsonl")))
    finally:
        p.terminate()
        p.wait()
    return kills, trace_events(os.path.join(out, "trace.json")), res


def main():
    ap = bench_args(__doc__, runs=False)
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--standby", type=int, default=1)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--gap", type=float, default=0.4, help="seconds of load between a failover and the next kill")
    ap.add_argument("--trace", help="write the merged Chrome trace here")
    a = ap.parse_args()
    print("# " + machine())
    with tempfile.TemporaryDirectory() as tmp:
        ck = checkpoint(a, tmp)
        kills, ev, res = run(a, tmp, ck)
    names = ("detect", "recovered", "report", "resume", "first_token")
    print("| kill | stage | resumed | running | positions fed again / replay | " +
          " | ".join(n.replace("_", " ") + " ms" for n in names) + " |")
    print("|---|---|---|---|---|" + "---|" * len(names))
    total = []
    for i, k in enumerate(kills):
        end = kills[i + 1]["ts"] if i + 1 < len(kills) else float("inf")
        mine = [e for e in ev if k["ts"] <= e["ts"] < end]
        at = {n: next((e for e in mine if e["name"] == n), None) for n in names}
        cell = lambda n: "%.1f" % ((at[n]["ts"] - k["ts"]) / 1e3) if at[n] else "-"  # noqa: E731
        r = at["resume"]["args"] if at["resume"] else {}
        print("| %d | %d | %s | %s | %s / %s | %s |" % (i + 1, k["args"]["stage"], r.get("resume", "-"), r.get("running", "-"),
              r.get("refed", "-"), r.get("replay", "-"), " | ".join(cell(n) for n in names)))
        if at["first_token"]:
            total.append((at["first_token"]["ts"] - k["ts"]) / 1e3)
    if total:
        q = sorted(total)
        print("\nkill -> first token after resume: min %.1f, median %.1f, max %.1f ms over %d failovers" % (
            q[0], statistics.median(q), q[-1], len(q)))
    print("load: %d requests, %.0f tokens/s, answered with an error: %d" % (a.requests, res["tokens_per_s"], res["errors"]))
    if a.trace:
        with open(a.trace, "w") as f:
            json.dump({"traceEvents": sorted(ev + kills, key=lambda e: e["ts"])}, f, indent=0)


if __name__ == "__main__":
    main()
