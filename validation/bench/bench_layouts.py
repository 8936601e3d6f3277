#!/usr/bin/env python3
"""Multi-rank CPU benchmark on one 2-core node: data parallelism (dp=2, 1 thread per rank) and
tensor parallelism (tp=2, 1 thread per rank) against one rank with 2 threads, same global batch.

  /usr/bin/python3 validation/bench/bench_layouts.py [--mindpipe src/mindpipe] [--data data/kjv.h5]
                                                     [--shapes small,124m] [--runs 2]

tokens/s = batch x seq_len / mean step time (rank 0's executor timers, after a warm-up step).
Overlap: dp=2 runs twice, with the gradient buckets started during the backward (parallel.overlap=1)
and after it (overlap=0); hidden share = 1 - exposed wait (overlap=1) / exposed wait (overlap=0),
where the exposed wait is the time rank 0 spends waiting for buckets after its backward ended.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench import SHAPES, env

LAYOUTS = {  # name: (ranks, threads per rank, extra --set)
    "1 rank x 2 threads": (1, 2, {}),
    "dp=2 x 1 thread": (2, 1, {"parallel.dp": 2}),
    "dp=2 x 1 thread, overlap off": (2, 1, {"parallel.dp": 2, "parallel.overlap": 0}),
    "tp=2 x 1 thread": (2, 1, {"parallel.tp": 2}),
}


def run(a, shape, layout, tmp):
    L, C, NH, T, B, V, steps = SHAPES[shape]
    ranks, threads, extra = LAYOUTS[layout]
    out = os.path.join(tmp, "run")
    shutil.rmtree(out, ignore_errors=True)
    mb = B // extra.get("parallel.dp", 1)
    sets = {"model.layers": L, "model.dim": C, "model.heads": NH, "model.seq_len": T, "model.vocab": V,
            "train.batch": B, "train.micro_batch": mb, "train.steps": steps + 1, "train.warmup": 1,
            "train.eval_every": 0, "train.log_every": 1000000, "train.threads": threads, "train.peak_gflops": 1,
            "checkpoint.final": 0, "data.path": a.data, "train.lr": 1e-4, "train.min_lr": 1e-5, **extra}
    cmd = ["mpiexec", "-n", str(ranks), a.mindpipe, "train", "--quiet", "--out", out]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, env=env(threads), stdout=subprocess.DEVNULL)
    prof = json.load(open(os.path.join(out, "profile.json")))
    return B * T / prof["step_seconds"], prof


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mindpipe", default="src/mindpipe")
    ap.add_argument("--data", default="data/kjv.h5")
    ap.add_argument("--shapes", default="small,124m")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    shapes = a.shapes.split(",")
    res = {(s, l): [] for s in shapes for l in LAYOUTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.runs):
            for s in shapes:
                for l in (LAYOUTS if r % 2 == 0 else reversed(list(LAYOUTS))):
                    res[(s, l)].append(run(a, s, l, tmp))
                    print(f"# run {r + 1} {s} {l}: {res[(s, l)][-1][0]:.0f} tok/s", file=sys.stderr)
    print("| shape | layout | tokens/s (median, min-max) | vs 1 rank | exposed bucket wait ms/step |")
    print("|---|---|---|---|---|")
    for s in shapes:
        base = statistics.median(t for t, _ in res[(s, "1 rank x 2 threads")])
        for l in LAYOUTS:
            toks = [t for t, _ in res[(s, l)]]
            waits = [p.get("dp_wait", 0.0) for _, p in res[(s, l)]]
            wait = f"{1e3 * statistics.median(waits):.1f}" if "dp" in l else "-"
            print(f"| {s} | {l} | {statistics.median(toks):.0f} ({min(toks):.0f}-{max(toks):.0f}) | "
                  f"{statistics.median(toks) / base:.2f}x | {wait} |")
        on = statistics.median(p["dp_wait"] for _, p in res[(s, "dp=2 x 1 thread")])
        off = statistics.median(p["dp_wait"] for _, p in res[(s, "dp=2 x 1 thread, overlap off")])
        print(f"| {s} | hidden share of the gradient all-reduce | {100 * (1 - on / off):.0f}% "
              f"(exposed {1e3 * on:.1f} vs {1e3 * off:.1f} ms/step) | | |")


if __name__ == "__main__":
    main()
