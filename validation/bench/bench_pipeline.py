#!/usr/bin/env python3
"""Pipeline benchmark on one 2-core node: pp=2 (1 thread per stage) against one rank with 2 threads,
same global batch, for m = 4, 8 and 16 micro-batches of one sequence (small shape); 1f1b, and at
m = 8 also gpipe, interleaved (v = 2) and 2bw. Each point is the median of --runs runs, alternating
the one-rank and the pipeline run.

  /usr/bin/python3 validation/bench/bench_pipeline.py [--mindpipe src/mindpipe] [--data data/kjv.h5] [--runs 3]
                                                      [--arch gpt2|llama] [--isa native|avx2]
                                                      [--points M:SCHEDULE,...]

--isa avx2 runs OpenBLAS's AVX2 code on an AVX-512 machine (as bench.py's --isa; MindPipe's own kernels
follow its build).

--arch llama runs the llama family (model.arch = llama) on bench.py's llama-small shape (the same L, C,
heads, T and V, 2 kv heads, ffn_dim 1024) instead of the GPT-2 small shape.

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

from bench import LLAMA_SHAPES, apply_isa, bench_args, env

SHAPE = dict(layers=6, dim=384, heads=6, seq_len=256, vocab=256)
LLAMA_SHAPE = "llama-small"  # --arch llama: this shape of bench.py's LLAMA_SHAPES


def llama_shape(name):
    """bench.py's llama shape as model keys (model.mlp_ratio = 1: llama's MLP width is model.ffn_dim)."""
    L, C, NH, KVH, F, T, _, V, _ = LLAMA_SHAPES[name]
    return dict(arch="llama", layers=L, dim=C, heads=NH, kv_heads=KVH, ffn_dim=F, mlp_ratio=1, seq_len=T, vocab=V)


def run(a, ranks, threads, m, extra, tmp, steps=4):
    out = os.path.join(tmp, "run")
    shutil.rmtree(out, ignore_errors=True)
    sets = {f"model.{k}": v for k, v in a.shape.items()}
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
    ap = bench_args(__doc__, isa=True)
    ap.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--points", default=None,
                    help="M:SCHEDULE,... of the points below to run (e.g. 8:interleaved,8:2bw); default: all")
    a = ap.parse_args()
    apply_isa(a)
    a.data = os.path.abspath(a.data)
    a.shape = llama_shape(LLAMA_SHAPE) if a.arch == "llama" else SHAPE
    T = a.shape["seq_len"]
    points = [(m, "1f1b", {}) for m in (4, 8, 16)]
    points += [(8, "gpipe", {}), (8, "interleaved", {"parallel.virtual_stages": 2}), (8, "2bw", {})]
    if a.points:
        want = a.points.split(",")
        have = [f"{m}:{sched}" for m, sched, _ in points]
        for w in want:
            if w not in have:
                ap.error(f"--points: {w} is none of {', '.join(have)}")
        points = [p for p, h in zip(points, have) if h in want]
    if a.arch == "llama":
        print("model: " + ", ".join(f"{k} {v}" for k, v in a.shape.items()) + f" (bench.py's {LLAMA_SHAPE})")
    print(f"--isa {a.isa}; median of {a.runs} runs each (range in brackets)\n")
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
