#!/usr/bin/env python3
"""Pipeline benchmark on one 2-core node: pp=2 (1 thread per stage) against one rank with 2 threads,
same global batch, for m = 4, 8 and 16 micro-batches of one sequence (small shape); 1f1b, and at
m = 8 also gpipe, interleaved (v = 2) and 2bw. Each point is the median of --runs runs, alternating
the one-rank and the pipeline run.

  /usr/bin/python3 validation/bench/bench_pipeline.py [--mindpipe src/mindpipe] [--data data/kjv.h5] [--runs 3]

Reported per m: tokens/s of both, the ratio, the schedule's theoretical bubble (p-1)/(m+p-1), the
measured bubble (share of a step stage 0 spent blocked on pipeline receives, from metrics.jsonl),
and the overhead beyond theory = t_pp / (t_1 / (1 - theory)) - 1, where t_1 is one rank's step time
with the same total threads (what an ideal pipeline with that bubble would take).
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile

from bench import bench_args, env

SHAPE = dict(layers=6, dim=384, heads=6, seq_len=256, vocab=256)


def run(a, ranks, threads, m, extra, tmp, steps=4):
    out = os.path.join(tmp, "run")
    shutil.rmtree(out, ignore_errors=True)
    sets = {f"model.{k}": v for k, v in SHAPE.items()}
    sets.update({"train.batch": m, "train.micro_batch": 1, "train.steps": steps + 1, "train.warmup": 1,
                 "train.eval_every": 0, "train.log_every": 1, "train.threads": threads, "train.peak_gflops": 1,
                 "checkpoint.final": 0, "data.path": a.data, "train.lr": 1e-4, "train.min_lr": 1e-5, **extra})
    cmd = ["mpiexec", "-n", str(ranks), a.mindpipe, "train", "--quiet", "--out", out]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, env=env(threads), stdout=subprocess.DEVNULL)
    prof = json.load(open(os.path.join(out, "profile.json")))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))][1:]
    return prof["step_seconds"], statistics.mean(r["bubble"] for r in rows), rows[-1]["bubble_theory"]


def main():
    ap = bench_args(__doc__)
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    T = SHAPE["seq_len"]
    points = [(m, "1f1b", {}) for m in (4, 8, 16)]
    points += [(8, "gpipe", {}), (8, "interleaved", {"parallel.virtual_stages": 2}), (8, "2bw", {})]
    print(f"median of {a.runs} runs each (range in brackets)\n")
    print("| m | schedule | 1 rank x 2 threads tok/s | pp=2 x 1 thread tok/s | ratio | bubble theory | bubble measured | overhead beyond theory |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for m, sched, extra in points:
            one, pipe = [], []
            for _ in range(a.runs):
                one.append(run(a, 1, 2, m, {}, tmp))
                pipe.append(run(a, 2, 1, m, {"parallel.pp": 2, "parallel.schedule": sched, **extra}, tmp))
            t1 = statistics.median(r[0] for r in one)
            tp = statistics.median(r[0] for r in pipe)
            measured = statistics.median(r[1] for r in pipe)
            theory = pipe[0][2]
            over = tp / (t1 / (1 - theory)) - 1
            rng = lambda rs: f"{min(m * T / r[0] for r in rs):.0f}-{max(m * T / r[0] for r in rs):.0f}"
            print(f"| {m} | {sched} | {m * T / t1:.0f} ({rng(one)}) | {m * T / tp:.0f} ({rng(pipe)}) | {t1 / tp:.2f}x | "
                  f"{theory:.3f} | {measured:.3f} | {100 * over:+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
