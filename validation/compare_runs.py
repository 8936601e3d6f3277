#!/usr/bin/env python3
"""Compares a run directory with a reference one (layout invariance, ARCHITECTURE.md §4).

  compare_runs.py REF RUN [--loss-rel 1e-5] [--weights-rel 1e-4] [--bitwise] [--step N]

Per-step loss: |loss - ref| / |ref| over every step both logged (at least two: one shared step says
little of a trajectory). Final weights: for every tensor of the checkpoint at the last (or given) step,
||w - ref||_2 / ||ref||_2; both checkpoints must be of the same step. A NaN anywhere is the worst
error, never skipped. --bitwise demands identical losses, grad norms and checkpoint tensors instead:
every tensor of /model, /model_prev (2bw's second weight version), /optim/m and /optim/v, the same
groups and names on both sides. Prints PASS/FAIL lines; exit 1 on any failure."""
import argparse
import glob
import json
import math
import os
import sys

import h5py
import numpy as np


def metrics(d):
    return {r["step"]: r for r in (json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")))}


def last_ckpt(d, step):
    if step:
        return os.path.join(d, "ckpt", f"step_{step:08d}.h5")
    return sorted(glob.glob(os.path.join(d, "ckpt", "step_*.h5")))[-1]


def worst_of(errors):
    """The largest error, a NaN counted as infinite: max() keeps its first argument when comparing it
    with a NaN is false, so a NaN after the first element used to pass."""
    return max((e if e == e else math.inf, *rest) for e, *rest in errors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("run")
    ap.add_argument("--loss-rel", type=float, default=1e-5)
    ap.add_argument("--weights-rel", type=float, default=1e-4)
    ap.add_argument("--bitwise", action="store_true")
    ap.add_argument("--step", type=int, default=0)
    a = ap.parse_args()
    fails = 0

    def check(ok, what):
        nonlocal fails
        print(("PASS " if ok else "FAIL ") + what)
        fails += 0 if ok else 1

    mr, mx = metrics(a.ref), metrics(a.run)
    steps = sorted(set(mr) & set(mx))
    check(len(steps) >= 2, f"{len(steps)} common logged steps (at least 2)")
    if not steps:
        sys.exit(1)
    cr, cx = last_ckpt(a.ref, a.step), last_ckpt(a.run, a.step)
    with h5py.File(cr, "r") as fr, h5py.File(cx, "r") as fx:
        sr, sx = int(fr["state"].attrs["step"]), int(fx["state"].attrs["step"])
        check(sr == sx, f"both checkpoints are of step {sr}" if sr == sx else
              f"the checkpoints are of different steps: {os.path.basename(cr)} step {sr}, {os.path.basename(cx)} step {sx}")
        if a.bitwise:
            same = all(mr[s]["loss"] == mx[s]["loss"] and mr[s]["grad_norm"] == mx[s]["grad_norm"] for s in steps)
            check(same, f"losses and grad norms of {len(steps)} steps bitwise identical")
            groups = [g for g in ("model", "model_prev", "optim/m", "optim/v") if g in fr or g in fx]
            lone = [f"{g} ({'ref' if g in fr else 'run'} only)" for g in groups if (g in fr) != (g in fx)]
            lone += [f"{g}/{n} ({'ref' if n in fr[g] else 'run'} only)" for g in groups if g in fr and g in fx
                     for n in sorted(set(fr[g]) ^ set(fx[g]))]
            check(not lone, f"the same tensors in both ({', '.join(groups)})" + (f": not {lone[:3]}" if lone else ""))
            names = [(g, n) for g in groups if g in fr and g in fx for n in fr[g] if n in fx[g]]
            diff = [f"{g}/{n}" for g, n in names if not np.array_equal(fr[g][n][:], fx[g][n][:])]
            check(not diff, f"{os.path.basename(cx)}: every tensor bitwise identical" + (f" (differs: {diff[:3]})" if diff else ""))
        else:
            worst = worst_of((abs(mx[s]["loss"] - mr[s]["loss"]) / abs(mr[s]["loss"]),) for s in steps)[0]
            check(worst <= a.loss_rel, f"per-step loss over {len(steps)} steps within {a.loss_rel:g} (worst {worst:.1e})")
            errs = []
            for n in fr["model"]:
                r, x = fr["model"][n][:].astype(np.float64), fx["model"][n][:].astype(np.float64)
                errs.append((np.linalg.norm(x - r) / max(np.linalg.norm(r), 1e-30), n))
            w, n = worst_of(errs)
            check(w <= a.weights_rel, f"final weights within {a.weights_rel:g} (worst {n} {w:.1e})")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
