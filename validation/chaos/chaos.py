#!/usr/bin/env python3
"""A randomized fault campaign (issue 45 item 3; docs/RELIABILITY.md "Fault campaign").

Each trial is drawn from one seed: a layout (dp, tp, pp, sp and their products at 2-8 ranks, with
the schedules 1f1b, interleaved, zb1p, zbv, dualpipev and 2bw, ZeRO-1), a backend (cpu, emu) and a
fault, injected into a 24-step run with recovery.log = 1 and a checkpoint every 8 steps, launched as
the jobs launch it (mpiexec -disable-auto-cleanup, each rank under a shell that outlives it). The
supernet layouts (sp) refuse recovery.log = 1 at start, naming why (checked once per layout), and run
without it: every fault costs them a restart from the newest checkpoint.

  kill      rank R SIGKILLed as step S begins (debug.fail_at R:S), S between the checkpoints of 8 and 16
  hang      rank R stops (SIGSTOP) in step S: its peers must time out naming it (the harness then
            kills the stopped rank, as a batch system would at the job's end)
  write     rank R SIGKILLed midway through writing the checkpoint of step 16
  stall     rank R stopped midway through that write: its peers end at checkpoint.timeout (the
            harness then kills the stopped rank, as for hang)
  corrupt   a kill as above, then one byte flipped in every survivor's boundary log (the first entry
            of step S − 1, the last the survivors completed) before the resume
  relapse   a kill as above, then a second fault during the recovery itself: a random rank of the
            resume SIGKILLed after a random delay (inside the plan, the replay or the steps after)
  full      the disk fills as step S begins: the run directory is on a tmpfs of its own (root), which
            a file of zeros fills to the last byte; every rank's next write fails (a metric, a log
            entry, a checkpoint). The run must end saying "No space left on device"; the filler is
            then removed and the resume must reach the end as after any fault

Verdict of a trial (each part must hold, else the trial fails and prints its seed and the command
that replays it):
  - the faulty run ended within its deadline with a non-zero status, and a survivor's output or
    RUN/exit_status names the lost rank: alone, or among the candidates of a collective's wait, which
    cannot tell which of its peers did not take part ("ranks 1, 2 and 3") (full: says the disk is full);
  - no good checkpoint lost: every checkpoint file of a step the run completed before the fault is
    still there and `mindpipe inspect` verifies it; no file under a checkpoint's final name fails;
  - `--resume auto` (again after a resume that failed by design: corrupt, relapse) reaches step 24,
    and its losses and step-24 checkpoint are bitwise the uninterrupted run's;
  - steps lost: 0 where the layout replays (kill, hang), else at most checkpoint.every, the reason
    logged (write, stall: the job aborted inside the collective write, so no survivor wrote a
    snapshot; full: no rank could write one; corrupt: the replay refused the damaged entry; sp: the
    start's refusal of the log).

  /usr/bin/python3 validation/chaos/chaos.py --mindpipe src/mindpipe --data validation/kjv.h5
      [--seed 1] [--trials 10] [--only N] [--keep DIR | --keep-failed DIR] [--table] [--faults kill,hang,...]

--only N replays trial N of the seed alone. Exit status 0 only when every trial passed. With
--table, a markdown table of trials, passed, hangs, lost checkpoints and steps lost by layout.
"""
import argparse
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DECK = os.path.join(HERE, "..", "decks", "train.ini")
STEPS, EVERY = 24, 8

# name: (ranks, --set pairs, replays: a kill or hang loses 0 steps)
LAYOUTS = {
    "pp2": (2, {"parallel.pp": 2}, True),
    "pp4": (4, {"parallel.pp": 4}, True),
    "interleaved": (2, {"parallel.pp": 2, "parallel.schedule": "interleaved", "train.micro_batch": 2}, True),
    "zb1p": (2, {"parallel.pp": 2, "parallel.schedule": "zb1p", "train.micro_batch": 2}, True),
    "zbv": (2, {"parallel.pp": 2, "parallel.schedule": "zbv", "train.micro_batch": 2}, True),
    "dualpipev": (2, {"parallel.pp": 2, "parallel.schedule": "dualpipev", "train.micro_batch": 2}, True),
    "2bw": (2, {"parallel.pp": 2, "parallel.schedule": "2bw", "train.micro_batch": 2}, True),
    "dp2xpp2": (4, {"parallel.pp": 2, "parallel.dp": 2, "train.micro_batch": 2}, True),
    "zero-dp2xpp2": (4, {"parallel.pp": 2, "parallel.dp": 2, "train.micro_batch": 2, "parallel.zero": 1}, True),
    "tp2xpp2": (4, {"parallel.pp": 2, "parallel.tp": 2}, True),
    "tp2xdp2": (4, {"parallel.tp": 2, "parallel.dp": 2, "train.micro_batch": 2}, True),
    "dp2": (2, {"parallel.dp": 2, "train.micro_batch": 2}, True),
    # one stage: no other stage's log gives the steps' gradient norms, so a lost tp rank falls back
    "tp2": (2, {"parallel.tp": 2}, False),
    # 8 ranks (oversubscribed: 4 per core here)
    "dp2xpp4": (8, {"parallel.pp": 4, "parallel.dp": 2, "train.micro_batch": 2}, True),
    "tp2xdp2xpp2": (8, {"parallel.pp": 2, "parallel.dp": 2, "parallel.tp": 2, "train.micro_batch": 2}, True),
    # supernets (sp = 2 replicas, alone and with pp = 2): recovery.log = 1 is refused at start (a
    # window's sums cross the step boundary), so they run without the log and fall back to the newest
    # checkpoint; the campaign checks the refusal once per layout
    "sp2": (2, {"parallel.sp": 2, "supernet.enabled": 1, "supernet.candidates": "h4m4,h2m1,skip",
                "supernet.window": 2}, None),
    "sp2xpp2": (4, {"parallel.sp": 2, "parallel.pp": 2, "supernet.enabled": 1,
                    "supernet.candidates": "h4m4,h2m1,skip", "supernet.window": 2}, None),
}
BACKENDS = ["cpu", "emu"]
FAULTS = ["kill", "kill", "hang", "write", "stall", "corrupt", "relapse", "full"]
COMMON = {"model.layers": 4, "train.steps": STEPS, "train.threads": 1, "checkpoint.every": EVERY,
          "checkpoint.keep": 0, "parallel.timeout": 10, "checkpoint.timeout": 30, "parallel.wait": "yield",
          "train.log_every": 1, "train.eval_every": 0, "train.peak_gflops": 50}
# The waits' limits leave room for a loaded host: at 8 s a 0.8 MB checkpoint's collective write (its
# fsync behind other processes' I/O) timed out with no fault at a load average of 11 on 2 cores
# (2026-12-06), and 3 s waits at 8 ranks on 2 cores are near a step's own time. The MFU peak is
# given: its start-up measurement is a second of sgemm per run.
DEADLINE_S = 120  # a faulty run must end (or its survivors exit) within this
# a rank lost before MPI_Init completes, or after the run's results are written, leaves its peers in
# MPI_Init or MPI_Finalize (MPICH waits for every process there), which MINDPIPE_INIT_TIMEOUT and
# MINDPIPE_FINALIZE_TIMEOUT bound (defaults 600 s and 300 s; here 20 s and 15 s, under the deadline)
ENV = dict(os.environ, MINDPIPE_INIT_TIMEOUT="20", MINDPIPE_FINALIZE_TIMEOUT="15")


def draw(seed, i, faults=None):
    """Trial i of seed: (layout, backend, fault, victim, step, relapse delay); faults: the kinds drawn
    from (default FAULTS)."""
    rng = random.Random("%d:%d" % (seed, i))
    name = rng.choice(sorted(LAYOUTS))
    backend = rng.choice(BACKENDS)
    fault = rng.choice(faults or FAULTS)
    if fault == "corrupt" and LAYOUTS[name][2] is None:  # no log to corrupt: the kill alone
        fault = "kill"
    victim = rng.randrange(LAYOUTS[name][0])
    step = 2 * EVERY if fault in ("write", "stall") else rng.randint(EVERY + 2, 2 * EVERY - 1)
    return name, backend, fault, victim, step, rng.uniform(0.05, 1.0)


def sets(d):
    out = []
    for k, v in d.items():
        out += ["--set", "%s=%s" % (k, v)]
    return out


def train_cmd(a, n, out, extra, launcher=True, quiet=True):
    base = ["mpiexec", "-disable-auto-cleanup", "-n", str(n), "sh", "-c", 'trap : USR1 TERM; "$@"', "rank"] \
        if launcher else ["mpiexec", "-n", str(n)]
    return base + [a.mindpipe, "train", "-c", DECK] + (["--quiet"] if quiet else []) + \
        ["--out", out, "--set", "data.path=%s" % a.data] + extra


SPAWNED = []  # every job started, so that a campaign cut short ends the one in flight


def spawn(cmd, f):
    """cmd started in a process group of its own, its output to file f."""
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=ENV)
    SPAWNED.append(p)
    return p


def end_spawned():
    for p in SPAWNED:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def run(cmd, log, timeout):
    """Runs cmd (its output to log); returns (status, seconds); status 124 past timeout (the job's
    processes killed)."""
    t0 = time.time()
    with open(log, "ab") as f:
        p = spawn(cmd, f)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = 124
    return rc, time.time() - t0


MINDPIPE = None  # the binary's absolute path (main): pids_of matches its processes, not their shells


def pids_of(out):
    """The mindpipe processes of run directory out (their command line names it)."""
    r = subprocess.run(["pgrep", "-f", "--", "^%s train -c .* --out %s " % (re.escape(MINDPIPE), re.escape(out))],
                       stdout=subprocess.PIPE, text=True)
    return [int(x) for x in r.stdout.split()]


def run_hang(cmd, log, out, n):
    """A run in which one rank stops: once the n − 1 survivors are gone (or the deadline passed), the
    stopped rank is killed, as a batch system ends a job. Returns (status, seconds until the survivors
    were gone)."""
    t0 = time.time()
    with open(log, "ab") as f:
        p = spawn(cmd, f)
        gone = None
        while p.poll() is None and time.time() - t0 < DEADLINE_S:
            time.sleep(0.2)
            live = [q for q in pids_of(out) if not stopped(q)]
            if pids_of(out) and not live and gone is None:
                gone = time.time() - t0
                for q in pids_of(out):
                    os.kill(q, signal.SIGKILL)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return 124, time.time() - t0
    return p.returncode, gone if gone is not None else time.time() - t0


def stacks(out, f):
    """Where each process of run out waits (gdb's backtrace, when gdb is there), into file f: a hang's
    trial says where it hung."""
    if not shutil.which("gdb"):
        return
    for q in pids_of(out):
        r = subprocess.run(["gdb", "-p", str(q), "-batch", "-ex", "bt"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=60)
        f.write(("== pid %d\n" % q).encode() + "".join(l + "\n" for l in r.stdout.splitlines()
                                                     if l.startswith("#")).encode())
        f.flush()


def stopped(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return True


def names(victim, text):
    """Whether text names rank victim: alone ("rank 3"), or among the candidates a collective's wait
    gives, which cannot tell which of its peers did not take part ("ranks 1, 2 and 3")."""
    if re.search(r"\brank %d\b" % victim, text):
        return True
    for m in re.finditer(r"\branks ((?:\d+, )*\d+ and \d+)", text):
        if victim in [int(x) for x in re.findall(r"\d+", m.group(1))]:
            return True
    return False


def ckpts(out):
    return sorted(glob.glob(os.path.join(out, "ckpt", "step_*.h5")))


def ckpt_step(path):
    return int(re.search(r"step_(\d+)\.h5$", path).group(1))


def verifies(a, path):
    return subprocess.run([a.mindpipe, "inspect", path], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def flip_logs(out, step):
    """One byte of step's first entry in every boundary log flipped (h5py); the count of logs hit."""
    import h5py
    hit = 0
    for path in glob.glob(os.path.join(out, "bndlog", "bnd-r*.h5")):
        try:
            with h5py.File(path, "r") as f:
                g = f.get("step_%08d" % step)
                # a tensor the replay reads; at pp = 1 (no pipeline messages) the step's scalars
                names = sorted(g.keys(), key=lambda k: k == "scalars") if g is not None else []
                off = g[names[0]].id.get_offset() if names else None
                size = g[names[0]].id.get_storage_size() if names else 0
        except (OSError, KeyError):
            off = None
        if off is None or size == 0:
            continue
        at = off + min(16, size - 1)
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x40]))
        hit += 1
    return hit


def metrics_step(out):
    """The last step metrics.jsonl records (0 before the first)."""
    try:
        with open(os.path.join(out, "metrics.jsonl"), errors="replace") as f:
            steps = re.findall(r'"step": ?(\d+)', f.read())
        return int(steps[-1]) if steps else 0
    except OSError:
        return 0


def fill(fs):
    """Fills file system fs to the last byte (a file of zeros written until ENOSPC); returns its path."""
    path = os.path.join(fs, "filler")
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        st = os.statvfs(fs)
        try:  # the bulk at once (a written 256 MiB took seconds on a loaded host: the run could end first)
            os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize)
        except OSError:
            pass
        f.seek(0, os.SEEK_END)
        try:
            while True:
                f.write(block)
        except OSError:
            pass
        try:  # the tail smaller than a block
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return path


def run_full(cmd, log, out, fs, step):
    """A run whose disk fills as step `step` begins (its metrics show step − 1): returns (status,
    seconds, whether the disk was filled before the run ended)."""
    t0, filled = time.time(), False
    with open(log, "ab") as f:
        p = spawn(cmd, f)
        while p.poll() is None and time.time() - t0 < DEADLINE_S:
            if not filled and metrics_step(out) >= step - 1:
                fill(fs)
                filled = True
            time.sleep(0.05)
        if p.poll() is None:
            stacks(out, f)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return 124, time.time() - t0, filled
    return p.returncode, time.time() - t0, filled


def compare(ref, out):
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "compare_runs.py"), ref, out, "--bitwise", "--step",
                        str(STEPS)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout.strip().splitlines()[-1:] if r.stdout else ["compare_runs.py said nothing"]


def trial(a, i, tmp, refs):
    name, backend, fault, victim, step, delay = draw(a.seed, i, a.faults)
    n, lay, replays = LAYOUTS[name]
    cfg = dict(COMMON, **lay)
    cfg["train.device"] = backend
    extra = sets(cfg)
    res = {"i": i, "layout": name, "backend": backend, "fault": fault, "victim": victim, "step": step, "delay": delay, "why": [],
           "hang": False, "lost_ckpt": False, "lost": None, "landed": False}
    logs = replays is not None
    key = (name, backend)
    if not logs and name not in refs:  # the log refused at start, once per layout, naming why
        bad = os.path.join(tmp, "refused-%s" % name)
        rc, _ = run(train_cmd(a, n, bad, extra + ["--set", "recovery.log=1"], launcher=False), bad + ".log", 120)
        said = open(bad + ".log", errors="replace").read()
        refs[name] = rc != 0 and "recovery.log=1 with a supernet" in said
    if not logs and not refs[name]:
        res["why"].append("recovery.log=1 was not refused at start naming the supernet")
    if key not in refs:  # the uninterrupted run, once per layout and backend
        ref = os.path.join(tmp, "ref-%s-%s" % key)
        rc, _ = run(train_cmd(a, n, ref, extra, launcher=False), ref + ".log", 600)
        refs[key] = ref if rc == 0 else None
    if not refs[key]:
        res["why"].append("the uninterrupted run failed")
        return res
    out = os.path.join(tmp, "t%d" % i)
    shutil.rmtree(out, ignore_errors=True)
    log = out + ".log"
    fs = None
    if fault == "full":  # the run directory on a file system of its own, filled mid-run
        fs = out + "-fs"
        os.makedirs(fs, exist_ok=True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % FULL_MB, "tmpfs", fs]).returncode != 0:
            res["why"].append("a full disk needs a tmpfs of its own: mount failed (root?)")
            return res
        out = os.path.join(fs, "run")
    try:
        return trial_run(a, i, tmp, refs, res, out, log, fs, n, extra, logs, replays, key)
    finally:
        if fs:
            if (a.keep or a.keep_failed) and os.path.isdir(out):  # a failure's (or every) directory, kept
                shutil.copytree(out, os.path.join(tmp, "t%d" % i), dirs_exist_ok=True)
            subprocess.run(["umount", "-l", fs])
            os.rmdir(fs)


def trial_run(a, i, tmp, refs, res, out, log, fs, n, extra, logs, replays, key):
    fault, victim, step, delay = res["fault"], res["victim"], res["step"], res["delay"]
    rlog = ["--set", "recovery.log=%d" % logs]
    mode = {"hang": ":hang", "write": ":write", "stall": ":stall"}.get(fault, "")
    fail = [] if fault == "full" else ["--set", "debug.fail_at=%d:%d%s" % (victim, step, mode)]
    # a full disk's run prints its progress to the trial's log (on another disk): the steps it
    # completed, which its own files may not have recorded
    first = train_cmd(a, n, out, extra + rlog + fail, quiet=fault != "full")
    if fault in ("hang", "stall"):  # the stopped rank outlives its peers under -disable-auto-cleanup
        rc, secs = run_hang(first, log, out, n)
    elif fault == "full":
        rc, secs, filled = run_full(first, log, out, fs, step)
        # a run that ends well although its disk filled wrote its last checkpoint first (a log's
        # failed write is said and the run goes on): the fault came too late to test anything
        res["landed"] = filled and rc != 0
        if not filled:
            res["why"].append("the run ended (exit %d) before step %d: its disk was not filled" % (rc, step))
        if not res["landed"]:  # no fault: the run must equal the uninterrupted one, as it is
            os.unlink(os.path.join(fs, "filler"))
            same, line = compare(refs[key], out)
            if not same:
                res["why"].append("step %d is not the uninterrupted run's: %s" % (STEPS, " ".join(line)))
            res["lost"] = 0
            if not res["why"] and not a.keep:
                os.unlink(log)
            return res
    else:
        rc, secs = run(first, log, DEADLINE_S)
    text = open(log, errors="replace").read() + "".join(
        open(p, errors="replace").read() for p in glob.glob(os.path.join(out, "exit_status")))
    if rc == 124:
        res["hang"] = True
        res["why"].append("the faulty run did not end within %d s" % DEADLINE_S)
    elif rc == 0:
        res["why"].append("the faulty run exited 0: nothing failed")
    if fault == "full":
        if "No space left on device" not in text:
            res["why"].append("no message says the disk is full (No space left on device)")
        os.unlink(os.path.join(fs, "filler"))  # room again for the resume
    elif not names(victim, "\n".join(l for l in text.splitlines() if not l.startswith("mindpipe: rank %d:" % victim))):
        res["why"].append("no survivor's message names rank %d" % victim)
    # no good checkpoint lost: those of the steps completed before the fault, and any under a final name
    done_before = step - 1
    if fault == "full":  # the writes fail where buffers first reach the full disk: steps may follow
        done_before = max([done_before] + [int(x) for x in re.findall(r"^step +(\d+)/%d \|" % STEPS, text, re.M)])
    have = {ckpt_step(p): p for p in ckpts(out)}
    for s in range(EVERY, step, EVERY):  # written before the fault (a full disk's later ones may fail)
        if s not in have or not verifies(a, have[s]):
            res["lost_ckpt"] = True
            res["why"].append("the checkpoint of step %d (completed before the fault) is %s" % (
                s, "missing" if s not in have else "damaged"))
    for s, p in have.items():
        if s >= step and not verifies(a, p):
            res["lost_ckpt"] = True
            res["why"].append("%s, under a checkpoint's final name, does not verify" % os.path.basename(p))
    if fault == "corrupt":  # the last step the survivors completed: step − 1 counted from 1, group step − 2
        if flip_logs(out, step - 2) == 0:
            res["why"].append("no boundary log held step %d to corrupt" % (step - 1))
    resume = train_cmd(a, n, out, extra + rlog + ["--resume", "auto"])
    attempts = 0
    if fault == "relapse":  # a second fault during the recovery: a random rank killed after `delay`
        with open(log, "ab") as f:
            p = spawn(resume, f)
            time.sleep(delay)
            live = pids_of(out)
            if live and p.poll() is None:
                os.kill(random.Random(i).choice(live), signal.SIGKILL)
                res["landed"] = True
            try:
                p.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                stacks(out, f)
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                res["hang"] = True
                res["why"].append("the resume killed during recovery did not end within %d s" % DEADLINE_S)
        for q in pids_of(out):  # a rank the abort left stopped or waiting
            os.kill(q, signal.SIGKILL)
        attempts += 1
    # a resume that fails by design (the replay meets the flipped byte; the state the killed resume
    # left) is followed by one more, which must reach the end
    rc, tries = 1, 0
    while rc != 0 and tries < (2 if fault in ("corrupt", "relapse") else 1):
        with open(log, "ab") as f:
            f.write(b"\n== resume %d\n" % (attempts + tries + 1))
        rc, _ = run(resume, log, 600)
        tries += 1
    if rc != 0:
        res["why"].append("--resume auto did not reach step %d (exit %d)" % (STEPS, rc))
        return res
    runlog = open(os.path.join(out, "log.txt"), errors="replace").read()
    m = re.findall(r"recovery: resumed at step (\d+)", runlog)
    f = re.findall(r"resumed from .*step_(\d+)\.h5 at step (\d+)", runlog)
    resumed_at = int(m[-1]) if m else (int(f[-1][1]) if f else 0)
    res["lost"] = max(0, done_before - resumed_at)
    alltext = open(log, errors="replace").read() + runlog
    # a fallback says why; after write and stall no survivor wrote a snapshot (the job aborted inside
    # the collective write), so the resume is an ordinary one
    # a full disk: no rank could write its snapshot either; no log: the start refused it, said above
    if res["lost"] and fault not in ("write", "stall", "full") and logs and \
            not re.search(r"snapshots are not used|replay of steps .* failed|nothing is logged", alltext):
        res["why"].append("lost %d steps without a logged reason" % res["lost"])
    if fault in ("kill", "hang") and replays and res["lost"] != 0:
        res["why"].append("lost %d steps where the layout replays" % res["lost"])
    if res["lost"] > EVERY:
        res["why"].append("lost %d steps, more than checkpoint.every = %d" % (res["lost"], EVERY))
    same, line = compare(refs[key], out)
    if not same:
        res["why"].append("step %d is not the uninterrupted run's: %s" % (STEPS, " ".join(line)))
    if not res["why"] and not a.keep:
        shutil.rmtree(out, ignore_errors=True)
        os.unlink(log)
    return res


FULL_MB = 256  # the tmpfs a full-disk trial runs on: room for the run, filled by the fault


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mindpipe", default="src/mindpipe")
    ap.add_argument("--data", default="data/kjv.h5")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--only", type=int, default=-1, help="replay trial N of the seed alone")
    ap.add_argument("--keep", default="", help="keep every trial's directory under this folder")
    ap.add_argument("--keep-failed", default="", help="keep the failed trials' directories (and the references) "
                    "under this folder")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--faults", default="", help="the fault kinds to draw from, joined by ',' (default: all; "
                    "make check leaves out relapse, whose second kill lands where the clock puts it)")
    a = ap.parse_args()
    a.faults = [f for f in a.faults.split(",") if f] or None
    bad = [f for f in a.faults or [] if f not in FAULTS]
    if bad:
        ap.error("unknown fault kind(s) %s (known: %s)" % (", ".join(bad), ", ".join(sorted(set(FAULTS)))))
    global MINDPIPE
    a.mindpipe, a.data = os.path.abspath(a.mindpipe), os.path.abspath(a.data)
    MINDPIPE = a.mindpipe
    root = a.keep or a.keep_failed or tempfile.mkdtemp(prefix="chaos.")
    os.makedirs(root, exist_ok=True)
    refs, results = {}, []
    todo = [a.only] if a.only >= 0 else range(a.trials)
    t0 = time.time()
    # SIGTERM too (a batch system's end, or `kill` of a campaign started in the background, whose
    # SIGINT the shell ignores): the trials run so far are reported
    signal.signal(signal.SIGTERM, interrupted)
    try:
        for i in todo:
            run_one(a, i, root, refs, results)
    except KeyboardInterrupt:  # a campaign cut short (Ctrl-C, SIGTERM) still reports the trials it ran
        end_spawned()
        print("interrupted after %d trials" % len(results), flush=True)
    return report(a, root, results, t0)


def interrupted(signum, frame):
    raise KeyboardInterrupt


def run_one(a, i, root, refs, results):
    """Trial i, its line (and a failure's replay command) printed, its result added to results."""
    r = trial(a, i, root, refs)
    results.append(r)
    status = "PASS" if not r["why"] else "FAIL"
    fault = r["fault"] + (" (the second kill %s)" % ("landed" if r["landed"] else "came after the resume ended")
                          if r["fault"] == "relapse" else
                          "" if r["fault"] != "full" or r["landed"] else " (the run's writes were done before its disk filled)")
    print("%s trial %d: %s on %s, %s of rank %d at step %d: %s%s" % (
        status, i, r["layout"], r["backend"], fault, r["victim"], r["step"],
        "%s steps lost" % r["lost"] if r["lost"] is not None else "no resume",
        "" if not r["why"] else "; " + "; ".join(r["why"])), flush=True)
    if r["why"]:
        print("  replay: /usr/bin/python3 validation/chaos/chaos.py --mindpipe %s --data %s --seed %d --only %d "
              "--keep /tmp/chaos-%d-%d%s" % (a.mindpipe, a.data, a.seed, i, a.seed, i,
                                             " --faults " + ",".join(a.faults) if a.faults else ""), flush=True)


def report(a, root, results, t0):
    failed = sum(1 for r in results if r["why"])
    if a.table:
        print("\n| layout | trials | passed | hangs | lost checkpoints | steps lost (each trial) |")
        print("|---|---|---|---|---|---|")
        for name in sorted({r["layout"] for r in results}):
            rs = [r for r in results if r["layout"] == name]
            print("| %s | %d | %d | %d | %d | %s |" % (
                name, len(rs), sum(1 for r in rs if not r["why"]), sum(r["hang"] for r in rs),
                sum(r["lost_ckpt"] for r in rs),
                ", ".join("%s %s" % (r["fault"], "-" if r["lost"] is None else r["lost"]) for r in rs)))
        print("\n%d trials in %.0f s (seed %d)" % (len(results), time.time() - t0, a.seed))
    if not a.keep and not (a.keep_failed and failed):
        shutil.rmtree(root, ignore_errors=True)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
