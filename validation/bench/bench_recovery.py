#!/usr/bin/env python3
"""recovery.log's cost and gain (docs/RELIABILITY.md "Zero lost steps"), pp = 2 on two ranks, one
thread each, in one invocation:

  overhead   the step time with recovery.log = 0 and 1, alternating runs (each run's mean step from
             profile.json, the first step excluded), at the small shape and at GPT-2 124M's
             (seq_len 256); the bytes each rank logged per step (its log file, never pruned here:
             no checkpoint), against the formula m·B·T·C·4 per boundary direction; and the CPU
             seconds the log took per step on each rank (its writer thread's CPU time plus the
             training thread's time in the puts, which the log file records at close): on a
             machine whose cores are all busy with ranks that is the step time the log costs,
             and unlike the wall-clock difference it holds when other work shares the machine
  recovery   rank --victim (1) killed as step K begins (checkpoint.every = 10, K = 19 by default): the time
             from the relaunch until the job is back at step K − 1, (a) with the survivors'
             snapshot and the lost stage's replay, (b) restarting from the checkpoint (the same
             directory with the snapshots moved away: every rank recomputes steps 11..K−1); and
             the survivor's time from the kill to its exit (parallel.timeout bounds it)

  /usr/bin/python3 validation/bench/bench_recovery.py [--mindpipe src/mindpipe] [--data data/kjv.h5]
      [--runs 3] [--shapes small,124m] [--kill-step 19] [--timeout 3] [--launch "mpiexec ..."]
      [--device cpu|emu] [--schedule 1f1b|2bw|...]

Prints markdown tables; docs/PERFORMANCE.md has the figures with the command and the CPU.
"""
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import bench_args, machine  # noqa: E402

SHAPES = {  # name: (L, C, NH, T, V, batch, micro_batch, steps)
    "small": (6, 384, 6, 256, 256, 8, 2, 8),
    "124m": (12, 768, 12, 256, 50304, 4, 2, 3),
}
DECK = os.path.join(HERE, "..", "decks", "train.ini")


def sets(a, shape, out_steps):
    L, C, NH, T, V, B, MB, _ = SHAPES[shape]
    s = {"model.layers": L, "model.dim": C, "model.heads": NH, "model.seq_len": T, "model.vocab": V,
         "train.batch": B, "train.micro_batch": MB, "train.steps": out_steps, "train.warmup": 1,
         "train.eval_every": 0, "train.log_every": 1, "train.threads": 1, "parallel.pp": 2,
         "checkpoint.every": 0, "checkpoint.final": 0, "data.path": a.data, "parallel.timeout": 600,
         "train.device": a.device, "parallel.schedule": a.schedule}
    out = []
    for k, v in s.items():
        out += ["--set", "%s=%s" % (k, v)]
    return out


def env():
    return dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")


def overhead_run(a, shape, log, tmp):
    out = os.path.join(tmp, "o%d" % log)
    shutil.rmtree(out, ignore_errors=True)
    steps = SHAPES[shape][7]
    cmd = ["mpiexec", "-n", "2", a.mindpipe, "train", "-c", DECK, "--quiet", "--out", out] + sets(a, shape, steps + 1) + \
        ["--set", "recovery.log=%d" % log]
    subprocess.run(cmd, check=True, env=env(), stdout=subprocess.DEVNULL)
    prof = open(os.path.join(out, "profile.json")).read()
    step_s = float(re.search(r'"step_seconds":([0-9.eE+-]+)', prof).group(1))
    files = sorted(glob.glob(os.path.join(out, "bndlog", "bnd-r*.h5")))
    logged = [os.path.getsize(f) for f in files]
    cpu = []
    if files:
        import h5py
        for f in files:
            with h5py.File(f, "r") as h:
                cpu.append(float(h.attrs["stats_writer_cpu_s"][()]) + float(h.attrs["stats_put_s"][()]))
    return step_s, logged, steps + 1, cpu


def overhead(a, tmp):
    print("\n### Logging overhead (pp = 2, two ranks, one thread each; mean step of steps 2.., median of %d runs)\n"
          % a.runs)
    print("| shape | step, log off (s) | step, log on (s) | overhead | log's CPU per step, rank 0 / rank 1 (s) | "
          "as a share of the step | bytes logged per step, rank 0 / rank 1 | formula m·B·T·C·4 per direction |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in a.shapes.split(","):
        L, C, NH, T, V, B, MB, steps = SHAPES[shape]
        off, on, per, cpus = [], [], None, []
        for _ in range(a.runs):
            off.append(overhead_run(a, shape, 0, tmp)[0])
            s, logged, n, cpu = overhead_run(a, shape, 1, tmp)
            on.append(s)
            per = [b / n for b in logged]
            cpus.append([c / n for c in cpu])
        mo, mn = statistics.median(off), statistics.median(on)
        cpu = [statistics.median(c[r] for c in cpus) for r in range(len(cpus[0]))]
        formula = (B // MB) * MB * T * C * 4
        print("| %s | %.4f (%.4f-%.4f) | %.4f (%.4f-%.4f) | %+.1f%% | %s | %s | %s | %.0f |" % (
            shape, mo, min(off), max(off), mn, min(on), max(on), 100 * (mn / mo - 1),
            " / ".join("%.4f" % c for c in cpu), " / ".join("%.2f%%" % (100 * c / mo) for c in cpu),
            " / ".join("%.0f" % p for p in per), formula))


def wait_for(proc, pattern, deadline):
    """Seconds until a line of proc's stdout matches pattern (None: it ended first or past deadline)."""
    t0 = time.time()
    rx = re.compile(pattern)
    for line in proc.stdout:
        if rx.search(line):
            return time.time() - t0
        if time.time() - t0 > deadline:
            break
    return None


def recovery(a, tmp):
    K = a.kill_step
    print("\n### Recovery after rank %d is killed as step %d begins (small shape, checkpoint.every = 10, "
          "parallel.timeout = %g s)\n" % (a.victim, K, a.timeout))
    print("| run | survivor: kill to exit 75 (s) | relaunch to step %d: replay (s) | relaunch to step %d: from the "
          "checkpoint (s) | steps recomputed by the replay / the restart |" % (K - 1, K - 1))
    print("|---|---|---|---|---|")
    base = sets(a, "small", 40) + ["--set", "checkpoint.every=10", "--set", "parallel.timeout=%g" % a.timeout,
                                   "--set", "recovery.log=1"]
    launch = a.launch.split()
    for run in range(a.runs):
        out = os.path.join(tmp, "k%d" % run)
        shutil.rmtree(out, ignore_errors=True)
        # each rank under a shell that outlives it: Hydra's proxy kills a dead rank's node mates otherwise
        # (docs/RELIABILITY.md, "Launchers")
        first = subprocess.Popen(launch + ["-n", "2", "sh", "-c", 'trap : USR1 TERM; "$@"', "rank", a.mindpipe, "train",
                                           "-c", DECK, "--out", out] + base +
                                 ["--set", "debug.fail_at=%d:%d" % (a.victim, K)], env=env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        t_kill = t_exit = None
        for line in first.stdout:
            if "kills itself" in line:
                t_kill = time.time()
        first.wait()
        t_exit = time.time()
        snaps = glob.glob(os.path.join(out, "recovery", "snap-r*.h5"))
        if not snaps:
            print("| %d | no snapshot written (the launcher killed the survivor?) | | | |" % run)
            continue
        aside = out + ".fallback"
        shutil.copytree(out, aside)
        shutil.rmtree(os.path.join(aside, "recovery"))
        times = []
        for d in (out, aside):
            p = subprocess.Popen(["mpiexec", "-n", "2", a.mindpipe, "train", "-c", DECK, "--out", d, "--resume", "auto"] +
                                 base, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            pat = r"recovery: resumed at step %d|^step +%d/" % (K - 1, K - 1)
            times.append(wait_for(p, pat, 600))
            p.kill()
            p.wait()
        fmt = lambda x: "%.2f" % x if x is not None else "not reached"  # noqa: E731
        print("| %d | %s | %s | %s | %d / %d (on 1 / 2 ranks) |" % (
            run, fmt(t_exit - t_kill if t_kill else None), fmt(times[0]), fmt(times[1]), K - 11, K - 11))


def main():
    ap = bench_args(__doc__)
    ap.add_argument("--shapes", default="small,124m")
    ap.add_argument("--kill-step", type=int, default=19)
    ap.add_argument("--victim", type=int, default=1, help="the rank killed: 1 the last stage, 0 the first (whose "
                    "replay recomputes the tied head's gradient)")
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--launch", default="mpiexec -disable-auto-cleanup")
    ap.add_argument("--skip", default="", help="overhead or recovery: leave that part out")
    ap.add_argument("--schedule", default="1f1b", help="parallel.schedule (2bw: with the log every step drains, "
                    "so the overhead includes the flush)")
    ap.add_argument("--device", default="cpu", help="train.device: cpu, or emu (the device path: the tied part and "
                    "the head inputs logged through host copies of device memory)")
    a = ap.parse_args()
    a.mindpipe = os.path.abspath(a.mindpipe)
    a.data = os.path.abspath(a.data)
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        if a.skip != "overhead":
            overhead(a, tmp)
        if a.skip != "recovery":
            recovery(a, tmp)


if __name__ == "__main__":
    main()
