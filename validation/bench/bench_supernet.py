#!/usr/bin/env python3
"""Supernet benchmark (issue 14, docs/SUPERNET.md): subnets per second of the causal pipeline
(supernet.schedule = causal, NASPipe's rule: several subnets in flight) against the same subnets one
at a time through the same pipeline and executor (supernet.schedule = serial: every subnet waits for
the one before it to finish on each stage), at pp = 2 with one thread per stage, on the bundled data.
Both run the same instruction-list machinery and give bitwise the same weights (test_supernet.sh);
only the order of the work differs. Each point is the median of --runs runs, alternating the two.

  /usr/bin/python3 validation/bench/bench_supernet.py [--mindpipe src/mindpipe] [--data data/kjv.h5]
      [--runs 3] [--timeline docs/supernet_timeline.png]

Per point: subnets/s of both (1 / the profile's mean step time, the first window excluded as
warm-up), the ratio, each run's pipeline idle share (metrics.jsonl's bubble: stage 0 blocked on a
receive) and, from the causal run's trace.json, the conflicts that held a subnet back on a stage: the
number of subnets per window whose first forward there waited for the step of an earlier conflicting
subnet (it started less than 1 ms after that step ended).
--timeline draws one window of both runs of the last point, one row per stage, coloured by subnet.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench import bench_args, env, machine

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_ref  # noqa: E402  (the sampler, bit for bit)
from causal_trace import stage_layers  # noqa: E402

SHAPE = dict(layers=4, dim=256, heads=4, seq_len=128, vocab=256)
CANDS = "h4m4,h4m2,h2m1,skip"


def run(a, sched, per, window, cands, tmp, windows=4):
    out = os.path.join(tmp, sched)
    shutil.rmtree(out, ignore_errors=True)
    sets = {f"model.{k}": v for k, v in SHAPE.items()}
    sets.update({"supernet.enabled": 1, "supernet.candidates": cands, "supernet.window": window,
                 "supernet.schedule": sched, "parallel.pp": 2, "train.batch": per, "train.micro_batch": 1,
                 "train.steps": window * windows, "train.warmup": 1, "train.eval_every": 0, "train.log_every": window,
                 "train.threads": 1, "train.peak_gflops": 1, "checkpoint.final": 0, "data.path": a.data,
                 "train.lr": 1e-4, "train.min_lr": 1e-5})
    cmd = ["mpiexec", "-n", "2", a.mindpipe, "train", "--quiet", "--out", out]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, env=env(1), stdout=subprocess.DEVNULL)
    prof = json.load(open(os.path.join(out, "profile.json")))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))][1:]
    return 1.0 / prof["step_seconds"], statistics.mean(r["bubble"] for r in rows), out


def spans(out):
    ev = [e for e in json.load(open(os.path.join(out, "trace.json")))["traceEvents"] if e.get("ph") == "X"]
    return [e for e in ev if e["name"] in ("forward", "backward", "subnet step")]


def stalls(out, window, cands):
    """Subnets whose first forward on a stage followed within 1 ms the step of an earlier conflicting
    subnet of the window there: the ones the rule held back."""
    seed = int(next(l for l in open(os.path.join(out, "deck.ini")) if l.startswith("seed")).split("=")[1])
    names = cands.split(",")
    cfg = {"layers": SHAPE["layers"], "cands": names, "choice": list(range(SHAPE["layers"]))}
    held = stage_layers(os.path.join(out, "log.txt"))
    first, done = {}, {}
    for e in spans(out):
        key = (e["pid"], e["args"]["step"])
        if e["name"] == "forward":
            first[key] = min(first.get(key, e["ts"]), e["ts"])
        if e["name"] == "subnet step":
            done[key] = e["ts"] + e["dur"]
    n = 0
    for (pid, tj), fj in first.items():
        sj = torch_ref.subnet(cfg, seed, tj)
        for (p, ti), di in done.items():
            if p != pid or ti >= tj or ti // window != tj // window:
                continue
            si = torch_ref.subnet(cfg, seed, ti)
            if any(si[l] == sj[l] and names[si[l]] != "skip" for l in held[pid]) and 0 <= fj - di < 1000:
                n += 1
                break
    return n


def timeline(paths, window, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(paths), 1, figsize=(11, 1.4 + 1.1 * len(paths)), sharex=True)
    cmap = plt.get_cmap("tab10")
    for ax, (label, out) in zip(axes, paths):
        ev = spans(out)
        w = max(e["args"]["step"] for e in ev) // window  # the last window: warm
        ev = [e for e in ev if e["args"]["step"] // window == w]
        t0 = min(e["ts"] for e in ev)
        for e in ev:
            j = e["args"]["step"] - w * window
            hatch = "//" if e["name"] == "backward" else None
            color = "black" if e["name"] == "subnet step" else cmap(j % 10)
            ax.barh(e["pid"], e["dur"] / 1000.0, left=(e["ts"] - t0) / 1000.0, color=color, hatch=hatch,
                    edgecolor="white", linewidth=0.3)
        ax.set_yticks([0, 1])
        ax.set_yticklabels(["stage 0", "stage 1"])
        ax.invert_yaxis()
        ax.set_title(label, fontsize=9, loc="left")
    axes[-1].set_xlabel("ms (colour: subnet of the window; hatched: backward; black: the subnet's candidate step)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = bench_args(__doc__)
    ap.add_argument("--timeline")
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    print(f"{machine()}; pp = 2 x 1 thread; shape {SHAPE}; median of {a.runs} runs each (range in brackets)\n")
    print("| candidates | micro-batches per subnet | window | serial subnets/s | causal subnets/s | causal / serial |"
          " idle serial | idle causal | conflict stalls per window |")
    print("|---|---|---|---|---|---|---|---|---|")
    points = [(CANDS, 1, 8), (CANDS, 2, 8), ("h4m4,h4m2,h2m4,h2m2,h4m1,h2m1,h1m4,skip", 1, 8)]
    with tempfile.TemporaryDirectory() as tmp:
        for cands, per, window in points:
            ser, cau = [], []
            for _ in range(a.runs):
                ser.append(run(a, "serial", per, window, cands, tmp))
                cau.append(run(a, "causal", per, window, cands, tmp))
            s = statistics.median(r[0] for r in ser)
            c = statistics.median(r[0] for r in cau)
            n = stalls(cau[-1][2], window, cands)
            rng = lambda rs: f"{min(r[0] for r in rs):.1f}-{max(r[0] for r in rs):.1f}"
            print(f"| {cands} | {per} | {window} | {s:.1f} ({rng(ser)}) | {c:.1f} ({rng(cau)}) | {c / s:.2f}x | "
                  f"{statistics.median(r[1] for r in ser):.2f} | {statistics.median(r[1] for r in cau):.2f} | "
                  f"{n / 4:.1f} |", flush=True)
        if a.timeline:
            timeline([("serial (one subnet at a time)", ser[-1][2]), ("causal (NASPipe's rule)", cau[-1][2])],
                     points[-1][2], a.timeline)
            print(f"\ntimeline of the last window of the last point: {a.timeline}")


if __name__ == "__main__":
    main()
