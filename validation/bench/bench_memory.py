#!/usr/bin/env python3
"""Memory-policy benchmark (docs/MEMORY.md): the step time of each memory.policy against keep at the
small shape, pipelines of 2 and 4 stages under 1f1b with 8 micro-batches of one sequence (1 thread
per stage), in one invocation, runs alternating; with each policy's peak device memory per stage,
its activations' share of that peak (above weights, gradients and optimizer state), its exposed
transfer wait (seconds a backward waited for its prefetch or its balanced stash, or a forward for a
buffer's offload, per step), and recompute's cost against the forward it repeats (the forwards' time of the
same run, from its trace).

  /usr/bin/python3 validation/bench/bench_memory.py [--mindpipe src/mindpipe] [--data data/kjv.h5]
                                                    [--runs 3] [--pp 2,4] [--plot docs/memory_pp4.png]

--plot draws, from the traces of the last pp's runs, the stash bytes each stage holds over one step
under every policy (matplotlib).
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile

from bench import bench_args, env

SHAPE = dict(layers=6, dim=384, heads=6, seq_len=256, vocab=256)
POLICIES = ["keep", "selective", "recompute", "offload", "balance"]


def run(a, pp, policy, tmp, steps=4):
    out = os.path.join(tmp, f"pp{pp}-{policy}")
    shutil.rmtree(out, ignore_errors=True)
    sets = {f"model.{k}": v for k, v in SHAPE.items()}
    sets.update({"train.batch": 8, "train.micro_batch": 1, "train.steps": steps + 1, "train.warmup": 1,
                 "train.eval_every": 0, "train.log_every": 1, "train.threads": 1, "train.peak_gflops": 1,
                 "checkpoint.final": 0, "data.path": a.data, "train.lr": 1e-4, "train.min_lr": 1e-5,
                 "parallel.pp": pp, "memory.policy": policy})
    cmd = ["mpiexec", "-n", str(pp), a.mindpipe, "train", "--quiet", "--out", out]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    r = subprocess.run(cmd, env=env(1), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
    prof = json.load(open(os.path.join(out, "profile.json")))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))][1:]
    ev = json.load(open(os.path.join(out, "trace.json")))["traceEvents"]
    fwd = sum(e["dur"] for e in ev if e["ph"] == "X" and e["name"] == "forward" and e["pid"] == 0 and e["args"]["step"] > 0)
    return dict(step=prof["step_seconds"], recompute=prof.get("recompute", 0.0), fwd=fwd * 1e-6 / steps,
                peak=rows[-1]["peak_mem_bytes"], act=rows[-1]["activation_peak_bytes"], wait=max(statistics.mean(r["transfer_wait_s_per_step"][s] for r in rows)
                                                     for s in range(pp)), out=out), None


def plot(path, pp, outs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(outs), figsize=(4 * len(outs), 3.2), sharey=True)
    for ax, (policy, out) in zip(axes, outs):
        ev = json.load(open(os.path.join(out, "trace.json")))["traceEvents"]
        steps = [e for e in ev if e["ph"] == "X" and e["name"] == "optimizer" and e["pid"] == 0]
        t0, t1 = steps[1]["ts"] + steps[1]["dur"], steps[2]["ts"] + steps[2]["dur"]  # the third step
        for s in range(pp):
            pts = sorted((e["ts"], e["args"]["bytes"]) for e in ev if e["ph"] == "C" and e["pid"] == s and t0 <= e["ts"] <= t1)
            if pts:
                ax.step([(t - t0) * 1e-3 for t, _ in pts], [b / 2**20 for _, b in pts], where="post", label=f"stage {s}")
        ax.set_title(policy)
        ax.set_xlabel("time in step (ms)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("stash bytes on device (MiB)\n(balance: own and guests)")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"Per-stage stash memory over one step: small shape, pp={pp}, 1f1b, m=8")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = bench_args(__doc__)
    ap.add_argument("--pp", default="2,4")
    ap.add_argument("--plot", default="")
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    print(f"median of {a.runs} runs each; small shape (L6 C384 H6 T256), m = 8, 1f1b, 1 thread per stage\n")
    print("| pp | policy | step s | vs keep | peak MiB per stage | activations MiB per stage | exposed wait (% of step) | recompute s/step | forwards s/step (stage 0) |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        last = []
        for pp in [int(x) for x in a.pp.split(",")]:
            res = {p: [] for p in POLICIES}
            why = {}
            for _ in range(a.runs):
                for p in POLICIES:
                    r, err = run(a, pp, p, tmp)
                    if r: res[p].append(r)
                    else: why[p] = err
            keep = statistics.median(r["step"] for r in res["keep"])
            last = []
            for p in POLICIES:
                if not res[p]:
                    print(f"| {pp} | {p} | refused: {why.get(p, '?')} | | | | | | |")
                    continue
                st = statistics.median(r["step"] for r in res[p])
                r0 = res[p][-1]
                peaks = ", ".join(f"{b / 2**20:.1f}" for b in r0["peak"])
                acts = ", ".join(f"{b / 2**20:.1f}" for b in r0["act"])
                wait = statistics.median(r["wait"] for r in res[p])
                print(f"| {pp} | {p} | {st:.3f} | {st / keep:.3f}x | {peaks} | {acts} | {100 * wait / st:.2f}% | "
                      f"{statistics.median(r['recompute'] for r in res[p]):.3f} | {statistics.median(r['fwd'] for r in res[p]):.3f} |")
                last.append((p, r0["out"]))
            if a.plot:
                plot(a.plot, pp, last)


if __name__ == "__main__":
    main()
