#!/usr/bin/env python3
"""Checks what a training run reports of itself at its end (ARCHITECTURE.md §9).

  check_reports.py energy RUN --steps N --tokens N [--gco2 G] [--gpu]
  check_reports.py kernels RUN_ALL RUN_FROM --ranks R --steps N --from-step K --device D [--timer T]
                   [--need-all NAMES] [--need-each NAMES]
  check_reports.py same RUN_A RUN_B

energy: RUN/energy.json exists, holds exactly its keys, and they agree with one another, with the deck
(steps, tokens) and with the log's "done:" line (total_j = host_j + gpu_j, j_per_token = total_j /
tokens, kwh = total_j / 3.6e6, co2_g = kwh x G); without --gpu the GPU part is null.
kernels: RUN_ALL timed every step (debug.kernel_times = 1), RUN_FROM from step K; every rank's
kernel_times.r<rank>.json in both holds exactly its keys and one row per kernel of be_kernels.h sorted
by seconds; total_s is the rows' sum and at most wall_s; the kernels named by --need-all ran (calls > 0)
on some rank and those of --need-each on every rank; both runs call the same kernels, and the later
start's calls are the whole run's times (N - K + 1) / N, kernel by kernel.
same: the two runs' metrics.jsonl are bitwise identical (every logged value but times and rates).
Prints PASS/FAIL lines; exit 1 on any failure, a missing or malformed file included."""
import argparse
import json
import math
import os
import re
import sys

ENERGY_KEYS = {"seconds", "steps", "tokens", "host_j", "host_source", "gpu_j", "gpu_source", "gpus", "total_j",
               "j_per_token", "kwh", "co2_g", "t_start_unix", "t_end_unix"}
KERNEL_KEYS = {"device", "timer", "rank", "from_step", "steps", "wall_s", "total_s", "kernels"}
# per-step values that depend on the clock, not on the arithmetic
TIMED = {"tokens_per_s", "mfu", "bubble", "elapsed_s", "eta_s", "transfer_wait_s_per_step"}

fails = 0


def check(ok, what):
    global fails
    print(("PASS " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def close(a, b, rel=1e-12):
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def load(path):
    """The JSON object in path, or None after a FAIL line naming what is wrong."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"{path}: missing or not JSON ({e})")
        return None
    if not isinstance(obj, dict):
        check(False, f"{path}: not a JSON object")
        return None
    return obj


def kernel_names():
    """The kernels of src/device/be_kernels.h, in its order."""
    src = os.environ.get("MP_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
    text = open(os.path.join(src, "src", "device", "be_kernels.h")).read()
    body = text[text.index("#define BE_KERNELS(X, XR)"):]  # the list, not the comments above it
    return re.findall(r"\bXR?\(\s*\w+\s*,\s*(\w+)\s*,", body)


def energy(a):
    path = os.path.join(a.run, "energy.json")
    e = load(path)
    if e is None:
        return
    if not check(set(e) == ENERGY_KEYS, f"energy.json: exactly the keys {sorted(ENERGY_KEYS)} (has {sorted(e)})"):
        return
    check(e["steps"] == a.steps and e["tokens"] == a.tokens,
          f"energy.json: steps {e['steps']} and tokens {e['tokens']} are the deck's {a.steps} and {a.tokens}")
    check(e["seconds"] > 0 and e["host_j"] > 0 and e["host_source"] in ("rapl", "estimate"),
          f"energy.json: {e['seconds']} s, host part {e['host_j']} J from {e['host_source']}")
    if a.gpu:
        check(e["gpu_source"] == "nvml" and e["gpus"] >= 1 and e["gpu_j"] > 0,
              f"energy.json: GPU part {e['gpu_j']} J from {e['gpu_source']} on {e['gpus']} GPU(s)")
    else:
        check(e["gpu_j"] is None and e["gpu_source"] is None and e["gpus"] == 0,
              "energy.json: no GPU part (gpu_j and gpu_source null, gpus 0)")
    check(0 < e["t_end_unix"] - e["t_start_unix"] < e["seconds"] + 60 and e["t_start_unix"] > 1.7e9,
          f"energy.json: the readings' wall-clock window {e['t_start_unix']}..{e['t_end_unix']} covers the run's seconds")
    total = e["host_j"] + (e["gpu_j"] or 0.0)
    check(close(e["total_j"], total), f"energy.json: total_j {e['total_j']} = host_j + gpu_j")
    tok = e["tokens"]
    check(tok > 0 and e["j_per_token"] is not None and close(e["j_per_token"], e["total_j"] / tok),
          f"energy.json: j_per_token {e['j_per_token']} = total_j / tokens")
    check(close(e["kwh"], e["total_j"] / 3.6e6) and close(e["co2_g"], e["kwh"] * a.gco2),
          f"energy.json: kwh = total_j / 3.6e6, co2_g = kwh x {a.gco2}")
    done = [l for l in open(os.path.join(a.run, "log.txt")) if l.startswith("done: ")]
    m = re.match(r"done: (\d+) steps in [0-9.]+ s \| energy ([0-9.e+-]+) kWh \(", done[-1]) if done else None
    check(bool(m) and int(m.group(1)) == e["steps"] and close(float(m.group(2)), e["kwh"], 5e-3),
          f"the log's done line agrees: {done[-1].strip() if done else 'no done line'}")


def kernels_of(run, rank, from_step, a, names):
    path = os.path.join(run, f"kernel_times.r{rank}.json")
    k = load(path)
    if k is None:
        return None
    what = f"{os.path.basename(run)}/kernel_times.r{rank}.json"
    if not check(set(k) == KERNEL_KEYS, f"{what}: exactly the keys {sorted(KERNEL_KEYS)} (has {sorted(k)})"):
        return None
    rows = k["kernels"]
    want_steps = a.steps - from_step + 1
    check(k["device"] == a.device and k["timer"] == a.timer and k["rank"] == rank and k["from_step"] == from_step
          and k["steps"] == want_steps,
          f"{what}: {k['device']}, {k['timer']}, rank {k['rank']}, from step {k['from_step']}: {k['steps']} steps "
          f"(want {a.device}, {a.timer}, {rank}, {from_step}: {want_steps})")
    check(sorted(r["name"] for r in rows) == sorted(names) and len(rows) == len(names),
          f"{what}: one row per kernel of be_kernels.h ({len(rows)} rows, {len(names)} kernels)")
    secs = [r["seconds"] for r in rows]
    check(secs == sorted(secs, reverse=True) and all(r["calls"] >= 0 and r["seconds"] >= 0 for r in rows),
          f"{what}: rows sorted by seconds, largest first")
    check(abs(k["total_s"] - sum(secs)) <= 1e-8 * (1 + len(rows)) and 0 < k["total_s"] <= k["wall_s"],
          f"{what}: total_s {k['total_s']} is the rows' sum and at most wall_s {k['wall_s']}")
    return {r["name"]: r["calls"] for r in rows}


def kernels(a):
    names = kernel_names()
    check(len(names) >= 20 and len(set(names)) == len(names), f"be_kernels.h lists {len(names)} kernels")
    need_all = set(a.need_all.split(",")) if a.need_all else set()
    need_each = set(a.need_each.split(",")) if a.need_each else set()
    used_all = set()
    for rank in range(a.ranks):
        c1 = kernels_of(a.run_all, rank, 1, a, names)
        ck = kernels_of(a.run_from, rank, a.from_step, a, names)
        if c1 is None or ck is None:
            continue
        used1 = {n for n, c in c1.items() if c > 0}
        usedk = {n for n, c in ck.items() if c > 0}
        used_all |= used1
        check(need_each <= used1, f"rank {rank}: every kernel each rank runs has calls > 0"
              + (f" (missing: {sorted(need_each - used1)})" if not need_each <= used1 else ""))
        check(used1 == usedk, f"rank {rank}: both runs call the same {len(used1)} kernels")
        t_all, t_from = a.steps, a.steps - a.from_step + 1
        bad = [n for n in names if ck.get(n, -1) * t_all != c1.get(n, -1) * t_from]
        check(not bad, f"rank {rank}: calls from step {a.from_step} = calls from step 1 x {t_from}/{t_all}, every kernel"
              + (f" (differs: {[(n, ck.get(n), c1.get(n)) for n in bad[:3]]})" if bad else ""))
    check(need_all <= used_all, f"every kernel the model uses ran on some rank: {sorted(used_all)}"
          + (f" (missing: {sorted(need_all - used_all)})" if not need_all <= used_all else ""))


def same(a):
    def rows(d):
        try:
            return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        except (OSError, ValueError) as e:
            check(False, f"{d}/metrics.jsonl: missing or malformed ({e})")
            return None
    ra, rb = rows(a.run_a), rows(a.run_b)
    if ra is None or rb is None:
        return
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMED} for r in rs]
    sa, sb = strip(ra), strip(rb)
    diff = [(x["step"], y["step"]) for x, y in zip(sa, sb) if x != y]
    check(len(sa) == len(sb) and len(sa) > 0 and not diff and all(math.isfinite(r["loss"]) for r in sa),
          f"{len(sa)} logged steps bitwise identical (loss, grad_norm, val_loss, lr, memory)"
          + (f" (differ at {diff[:3]})" if diff else ""))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("energy")
    e.add_argument("run")
    e.add_argument("--steps", type=int, required=True)
    e.add_argument("--tokens", type=int, required=True)
    e.add_argument("--gco2", type=float, default=400.0)
    e.add_argument("--gpu", action="store_true")
    k = sub.add_parser("kernels")
    k.add_argument("run_all")
    k.add_argument("run_from")
    k.add_argument("--ranks", type=int, required=True)
    k.add_argument("--steps", type=int, required=True)
    k.add_argument("--from-step", type=int, required=True)
    k.add_argument("--device", required=True)
    k.add_argument("--timer", default="host clock")
    k.add_argument("--need-all", default="")
    k.add_argument("--need-each", default="")
    s = sub.add_parser("same")
    s.add_argument("run_a")
    s.add_argument("run_b")
    a = ap.parse_args()
    {"energy": energy, "kernels": kernels, "same": same}[a.cmd](a)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
