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
            resume SIGKILLed after a random delay (inside the plan, the replay or the steps after);
            under Slurm at a drawn step of the requeued run's replay (debug.fail_at=R2:S2:replay: a
            replaying rank as it begins replaying S2, another as it waits for the replay) or, one
            trial in three, once the recovery is done (R2:S:recovered), so the others exit 75 and the
            job requeues a second time
  again     a kill as above, then a second kill in the run resumed from it, before the next
            checkpoint: rank R2 as step S2 begins (S <= S2 <= 15, drawn apart); the resume after that
            must replay again from the same checkpoint (0 lost where the layout replays)
  full      the disk fills as step S begins: the run directory is on a tmpfs of its own (root), which
            a file of zeros fills to the last byte; every rank's next write fails (a metric, a log
            entry, a checkpoint). The run must end saying "No space left on device"; the filler is
            then removed and the resume must reach the end as after any fault
  node      (slurm2 only) rank R of node2 stops in step S, then every process of node2 is SIGKILLed,
            slurmd too: Slurm declares the node down, the job requeues, node2 comes back for the rerun

Launchers (--launchers, drawn per trial; default mpiexec alone, which draws every trial as before):
  mpiexec   as above
  slurm1    jobs/slurm/train.sbatch on the one-node Slurm of validation/slurm_harness.sh, LAUNCHER=srun
            or mpirun; faults kill, hang, write, stall, again and relapse, 2-rank layouts (the cores, not
            oversubscribed)
  slurm2    train.sbatch on its Slurm of two namespaced nodes (root, ip netns, unshare), -N 2
            --no-kill, LAUNCHER=srun; faults kill, hang, node, write, stall, again and relapse, 2-, 4- and
            8-rank layouts split evenly (8: 4 a node, --overcommit)
Under Slurm the fault is on the job's first run only (again and relapse: their second loss on the
second run);
the job names the lost rank in job.log, requeues itself, and its rerun (--resume auto) is judged as
any resume. Each Slurm is started once
per campaign, at its launcher's first trial, and stopped at the end (or when this process dies).

Verdict of a trial (each part must hold, else the trial fails and prints its seed and the command
that replays it):
  - the faulty run ended within its deadline with a non-zero status, and a survivor's output or
    RUN/exit_status names the lost rank: alone, or among the candidates of a collective's wait, which
    cannot tell which of its peers did not take part ("ranks 1, 2 and 3") (full: says the disk is full);
  - no good checkpoint lost: every checkpoint file of a step the run completed before the fault is
    still there and `mindpipe inspect` verifies it; no file under a checkpoint's final name fails;
  - `--resume auto` (again after a resume that failed by design: corrupt, relapse) reaches step 24,
    and its losses and step-24 checkpoint are bitwise the uninterrupted run's;
  - steps lost: 0 where the layout replays (kill, hang, relapse, again, node), else at most
    checkpoint.every, the reason logged (write, stall: the job aborted inside the collective write,
    so no survivor wrote a snapshot; full: no rank could write one; corrupt: the replay refused the
    damaged entry; sp: the start's refusal of the log).

  /usr/bin/python3 validation/chaos/chaos.py --mindpipe src/mindpipe --data validation/kjv.h5
      [--seed 1] [--trials 10] [--only N] [--keep DIR | --keep-failed DIR] [--table] [--faults kill,hang,...]
      [--launchers mpiexec,slurm1,slurm2]

--only N replays trial N of the seed alone (each trial prints the command). Exit status 0 only when
every trial passed. With --table, a markdown table of trials, passed, hangs, lost checkpoints and
steps lost by layout.
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
FAULTS = ["kill", "kill", "hang", "write", "stall", "corrupt", "relapse", "full", "again"]
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


# debug.fail_at's mode for each fault (none: a kill as the step begins); node: the rank stops in its
# step, then the harness kills its whole node
FAIL_MODE = {"hang": ":hang", "node": ":hang", "write": ":write", "stall": ":stall"}


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


def again_of(seed, i, n, step):
    """The again fault's second kill: (rank, step), from a generator of its own (the trial's draw
    takes nothing more, so a --faults list without again, as make check's, draws as before; the
    default list's draws changed when again joined it); the step from the first kill's to the last
    before the checkpoint of 2 * EVERY."""
    rng = random.Random("%d:%d:again" % (seed, i))
    return rng.randrange(n), rng.randint(step, 2 * EVERY - 1)


def relapse_of(seed, i, n, step):
    """The Slurm relapse's second loss: (rank, step, mode), a rank of the requeued run killed in its
    recovery. Mode replay (two draws in three): as the replay reaches step (debug.fail_at=R:S:replay),
    a step the replay covers: after the checkpoint of EVERY, before the survivors' step − 1. Mode
    recovered: once the recovery to the survivors' step (step − 1) is done, before the run's first
    step (debug.fail_at=R:S:recovered). The mode has its own draw, so (rank, step) of a replay are
    those drawn before it existed."""
    rng = random.Random("%d:%d:relapse" % (seed, i))
    rank, at = rng.randrange(n), rng.randint(EVERY + 1, step - 1)
    if random.Random("%d:%d:relapse-mode" % (seed, i)).randrange(3) == 2:
        return rank, step - 1, "recovered"
    return rank, at, "replay"


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


def crashed(text):
    """The first line of text that tells of a rank's crash (a fault the trial did not send: UCX's and
    glibc's words for SIGSEGV, SIGBUS, SIGABRT and SIGFPE, train.sbatch's "signal 11 on"), or None."""
    m = re.search(r"^.*(?:Caught signal (?:11|7|6|8)\b|Segmentation fault|Bus error|signal (?:11|7|6|8) on ).*$",
                  text, re.M)
    return m.group(0).strip()[:200] if m else None


def ckpts(out):
    return sorted(glob.glob(os.path.join(out, "ckpt", "step_*.h5")))


def ckpt_step(path):
    return int(re.search(r"step_(\d+)\.h5$", path).group(1))


def verifies(a, path):
    return subprocess.run([a.mindpipe, "inspect", path], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def lost_checkpoints(a, res, out, step):
    """No good checkpoint lost: every checkpoint of a step completed before the fault (step) is there
    and verifies, and any under a final name verifies; a failure goes into res."""
    have = {ckpt_step(p): p for p in ckpts(out)}
    for s in range(EVERY, step, EVERY):
        if s not in have or not verifies(a, have[s]):
            res["lost_ckpt"] = True
            res["why"].append("the checkpoint of step %d (completed before the fault) is %s" % (
                s, "missing" if s not in have else "damaged"))
    for s, p in have.items():
        if s >= step and not verifies(a, p):
            res["lost_ckpt"] = True
            res["why"].append("%s, under a checkpoint's final name, does not verify" % os.path.basename(p))


def resumed_at(runlog):
    """The step the last resume of a run log started from: a recovery's, else a checkpoint's; 0."""
    m = re.findall(r"recovery: resumed at step (\d+)", runlog)
    f = re.findall(r"resumed from .*step_(\d+)\.h5 at step (\d+)", runlog)
    return int(m[-1]) if m else (int(f[-1][1]) if f else 0)


# Where a log's entry for a step lies: (offset, size) of the first tensor the replay reads (at pp = 1,
# no pipeline messages: the step's scalars), or nothing. Run in a child process: libhdf5 can crash on
# a damaged file (RELIABILITY.md, Limits), and the campaign must outlive it and say so.
LOG_ENTRY_AT = r"""
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    g = f.get("step_%08d" % int(sys.argv[2]))
    names = sorted(g.keys(), key=lambda k: k == "scalars") if g is not None else []
    if names and g[names[0]].id.get_offset() is not None:
        print(g[names[0]].id.get_offset(), g[names[0]].id.get_storage_size())
"""


def flip_logs(out, step, victim):
    """One byte of step's first entry flipped in every survivor's boundary log (the lost rank's own
    log, cut wherever its kill left it, is not a survivor's: libhdf5 in chaos.py crashed reading
    one in a CI rehearsal of 6795bb8, and took the campaign with it). Returns (logs hit, problems)."""
    hit, problems = 0, []
    for path in sorted(glob.glob(os.path.join(out, "bndlog", "bnd-r*.h5"))):
        if os.path.basename(path) == "bnd-r%d.h5" % victim:
            continue
        r = subprocess.run([sys.executable, "-c", LOG_ENTRY_AT, path, str(step)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode < 0:  # killed by a signal: a survivor's log is whole, so this is a finding
            problems.append("h5py died by signal %d reading the survivor's log %s" % (-r.returncode, path))
            continue
        if r.returncode != 0 or not r.stdout.split():
            continue  # no such entry in this log (or not readable by h5py: the replay will say)
        off, size = (int(x) for x in r.stdout.split())
        if size == 0:
            continue
        at = off + min(16, size - 1)
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x40]))
        hit += 1
    return hit, problems


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


def fill_run(fs, out, pids):
    """File system fs filled under run out with its ranks held (SIGSTOP, then SIGCONT: a pause far
    below parallel.timeout), so the fill lands at the step the metrics showed: a cpu step of the
    campaign's model takes milliseconds, and 256 MB allocated on a loaded host let runs finish
    their last write before it (seed 4000: 3 of 18 full disks; seed 9000's first 59 trials: 2 of 4).
    Returns the last step the metrics show once the ranks are held. pids: the ranks, found before
    (a pgrep at the moment costs a few of those steps)."""
    held = []
    try:
        for q in pids or pids_of(out):
            try:
                os.kill(q, signal.SIGSTOP)
                held.append(q)
            except ProcessLookupError:
                pass
        at = metrics_step(out)
        fill(fs)
        return at
    finally:
        for q in held:
            try:
                os.kill(q, signal.SIGCONT)
            except ProcessLookupError:
                pass


def run_full(cmd, log, out, fs, step, n):
    """A run of n ranks whose disk fills as step `step` begins (its metrics show step − 1): returns
    (status, seconds, the step after which the disk was filled or None: not before the run ended)."""
    t0, filled, pids, k = time.time(), None, [], 0
    with open(log, "ab") as f:
        p = spawn(cmd, f)
        while p.poll() is None and time.time() - t0 < DEADLINE_S:
            if len(pids) < n and k % 10 == 0:  # a pgrep every 100 ms until every rank is up
                pids = pids_of(out)
            k += 1
            if filled is None and metrics_step(out) >= step - 1:
                filled = fill_run(fs, out, pids)
            time.sleep(0.01)
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
    mode = FAIL_MODE.get(fault, "")
    fail = [] if fault == "full" else ["--set", "debug.fail_at=%d:%d%s" % (victim, step, mode)]
    # a full disk's run prints its progress to the trial's log (on another disk): the steps it
    # completed, which its own files may not have recorded
    first = train_cmd(a, n, out, extra + rlog + fail, quiet=fault != "full")
    if fault in ("hang", "stall"):  # the stopped rank outlives its peers under -disable-auto-cleanup
        rc, secs = run_hang(first, log, out, n)
    elif fault == "full":
        rc, secs, filled_after = run_full(first, log, out, fs, step, n)
        filled = filled_after is not None
        if filled:
            res["filled_after"] = filled_after
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
    if crashed(text):  # a rank that died of its own (a kill is SIGKILL, a stop SIGSTOP)
        res["why"].append("a rank crashed: %s" % crashed(text))
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
    lost_checkpoints(a, res, out, step)  # a full disk's later writes may fail
    if fault == "corrupt":  # the last step the survivors completed: step − 1 counted from 1, group step − 2
        hit, problems = flip_logs(out, step - 2, victim)
        res["why"] += problems
        if hit == 0:
            res["why"].append("no survivor's boundary log held step %d to corrupt" % (step - 1))
    resume = train_cmd(a, n, out, extra + rlog + ["--resume", "auto"])
    attempts = 0
    if fault == "again":  # a second kill in the run resumed from the first, before the next checkpoint
        v2, s2 = again_of(a.seed, i, n, step)
        res["again"] = (v2, s2)
        with open(log, "ab") as f:
            f.write(b"\n== resume 1: rank %d killed as step %d begins\n" % (v2, s2))
        rc2, _ = run(train_cmd(a, n, out, extra + rlog + ["--resume", "auto", "--set", "debug.fail_at=%d:%d" % (v2, s2)]),
                     log, DEADLINE_S)
        if rc2 == 124:
            res["hang"] = True
            res["why"].append("the resumed run that lost rank %d did not end within %d s" % (v2, DEADLINE_S))
        elif rc2 == 0:
            res["why"].append("the resumed run exited 0: its second kill (rank %d, step %d) did not happen" % (v2, s2))
        for q in pids_of(out):  # a rank the abort left waiting
            os.kill(q, signal.SIGKILL)
        done_before = s2 - 1
        attempts += 1
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
    res["lost"] = max(0, done_before - resumed_at(runlog))
    alltext = open(log, errors="replace").read() + runlog
    # a fallback says why; after write and stall a survivor held inside an HDF5 collective write is
    # ended by the watchdog's abort with no snapshot, so the resume may be an ordinary one (the
    # campaigns so far saw 0 lost: the survivors met the loss at the write's all-reduce)
    # a full disk: no rank could write its snapshot either; no log: the start refused it, said above
    if res["lost"] and fault not in ("write", "stall", "full") and logs and \
            not re.search(r"snapshots are not used|replay of steps .* failed|nothing is logged", alltext):
        res["why"].append("lost %d steps without a logged reason" % res["lost"])
    # relapse too: a second loss, in the plan, the replay or the steps after, replays again from the
    # same checkpoint (until f905968 a replayed last stage did not log its tied head's inputs again,
    # and the accepted "replay ... failed" hid it)
    if fault in ("kill", "hang", "relapse", "again") and replays and res["lost"] != 0:
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


# ---- Launchers: mpiexec (above), slurm1 and slurm2 (--launchers) ----
#
# slurm1: the trial submitted through jobs/slurm/train.sbatch to the one-node Slurm of
# validation/slurm_harness.sh (slurm_start), with LAUNCHER=srun or mpirun (drawn); slurm2: to its
# Slurm of two namespaced nodes (slurm_start_nodes), LAUNCHER=srun and --no-kill, with the fault
# "node" besides: a rank of node2 stops in step S, then every process of node2 is SIGKILLed, slurmd
# too, as a node that dies takes them; node2 comes back (slurm_node_restart) for the rerun. In both
# the job itself requeues after the loss, and its rerun (--resume auto) must end as after any fault.
# The harness's functions run in one bash that lives as long as the campaign (munge's user and the
# namespaces' owner are that shell's PID), started once per campaign and torn down at its end, or
# when this process dies (its stdin closes: the shell's EXIT trap stops the daemons).
SBATCH = os.path.join(HERE, "..", "..", "jobs", "slurm", "train.sbatch")
HARNESS = os.path.join(HERE, "..", "slurm_harness.sh")
LAUNCHERS = ["mpiexec", "slurm1", "slurm2"]
# Faults the Slurm launchers draw: the job requeues itself after a rank lost (all others exit 75),
# in a step, inside a checkpoint write (write, stall: the survivors find the loss at the write's
# agreement and save their snapshots) and again in the requeued run (again: the job requeues twice).
# relapse: a random rank of the requeued run dies inside its recovery (debug.fail_at=R2:S2:replay, a
# replaying rank as its replay begins step S2, another as it waits for the replay; or R2:S:recovered,
# once the recovery reached the survivors' step S, before the run's first step), the others exit
# 75 and the job requeues a second time. corrupt: the requeued run's rank 0, before it starts,
# flips the byte in the survivors' logs (the wrapper runs chaos.py --flip-logs once; the other ranks
# wait in MPI_Init for it), the replay meets it, every rank exits 75 with the snapshots aside, and the
# job requeues a second time and restarts from the checkpoint. full (slurm1): the run directory on a
# tmpfs of its own, filled as step S begins; a full disk is not requeued (a rerun would meet it
# again): the job must end FAILED saying so, its good checkpoints whole, and a job submitted again
# once there is room (as a person would) resumes from the last checkpoint and ends bitwise. slurm2
# leaves it out: its nodes' slurmd run under unshare --mount (a private copy of the mount table taken
# at the node's start), so a tmpfs mounted for a trial is not seen there.
SLURM_FAULTS = {"slurm1": ["kill", "kill", "hang", "write", "stall", "again", "relapse", "corrupt", "full"],
               "slurm2": ["kill", "hang", "node", "node", "write", "stall", "again", "relapse", "corrupt"]}


class Harness:
    """One Slurm of validation/slurm_harness.sh for the campaign, its functions called through a
    bash that sourced it (a line in, its output up to a "__rc N" line out)."""

    def __init__(self, kind, root):
        self.kind, self.dir = kind, os.path.join(root, "slurm-" + kind)
        stop = "slurm_stop" if kind == "slurm1" else "slurm_stop_nodes"
        start = 'slurm_start "$D"' if kind == "slurm1" else 'SLURM_NODES_SLURMD_TIMEOUT=12 slurm_start_nodes "$D" 2'
        # the loop reads a command a line, runs it, and says its status; EOF ends it, and the trap
        # stops the daemons however the shell ends. A job still in flight (a campaign cut short) is
        # cancelled and waited out first: daemons stopped under it leave its slurmstepd behind.
        script = ('. "$H"; end() { scancel --user="$(id -un)"; for w in $(seq 60); do '
                  '[ -z "$(squeue -h)" ] && break; sleep 0.5; done; %s; }; trap "end > /dev/null 2>&1" EXIT; '
                  '%s; echo "__rc $? $SLURM_CONF"; while IFS= read -r l; do eval "$l"; echo "__rc $?"; done'
                  % (stop, start))
        self.p = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=dict(ENV, H=HARNESS, D=self.dir),
                                  # a Ctrl-C is this process's to handle: it closes the harness (finally)
                                  start_new_session=True)
        rc, out = self.read()
        self.ok, self.said = rc == 0, out
        self.conf = self.last.split(" ", 2)[2] if self.ok else None

    def read(self):
        out = []
        for line in self.p.stdout:
            if line.startswith("__rc "):
                self.last = line.strip()
                return int(line.split()[1]), "".join(out)
            out.append(line)
        self.last = "__rc 1"
        return 1, "".join(out)

    def call(self, line):
        """Runs a line of bash in the harness's shell: (status, output)."""
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()  # EOF: the loop ends, the trap stops the Slurm
            try:
                self.p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def draw_launcher(seed, i, launchers):
    """Trial i's launcher, from a generator of its own: a campaign of mpiexec alone draws its trials
    exactly as before the launchers were added."""
    if launchers == ["mpiexec"]:
        return "mpiexec"
    return random.Random("%d:%d:launcher" % (seed, i)).choice(launchers)


def draw_slurm(seed, i, launcher, faults=None):
    """Trial i under a Slurm launcher: (layout, backend, fault, victim, step, srun or mpirun). The
    layouts that fit its cores (one node: its CPUs; two nodes: twice that, split evenly) and log
    (the supernets, with no log, are left to mpiexec); a node fault's victim is a rank of node2."""
    rng = random.Random("%d:%d" % (seed, i))
    cpus = os.cpu_count() or 2
    fit = [k for k, v in sorted(LAYOUTS.items()) if v[2] is not None and
           (v[0] <= cpus if launcher == "slurm1" else v[0] <= 4 * cpus and v[0] % 2 == 0)]
    name = rng.choice(fit)
    backend = rng.choice(BACKENDS)
    kinds = [f for f in SLURM_FAULTS[launcher] if not faults or f in faults] or SLURM_FAULTS[launcher][:1]
    fault = rng.choice(kinds)
    n = LAYOUTS[name][0]
    # srun's block distribution: node2 holds ranks n/2 .. n-1
    victim = rng.randrange(n // 2, n) if fault == "node" else rng.randrange(n)
    step = 2 * EVERY if fault in ("write", "stall") else rng.randint(EVERY + 2, 2 * EVERY - 1)
    via = rng.choice(["srun", "mpirun"]) if launcher == "slurm1" else "srun"
    return name, backend, fault, victim, step, via


def job_state(jid, conf):
    r = subprocess.run(["scontrol", "-o", "show", "job", jid], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, env=dict(ENV, SLURM_CONF=conf))
    m = re.search(r"JobState=([A-Z_]+)", r.stdout)
    return m.group(1) if m else ""


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(cond, secs, every=0.5):
    t0 = time.time()
    while time.time() - t0 < secs:
        if cond():
            return True
        time.sleep(every)
    return cond()


def names_lost(rank, text):
    """Whether train.sbatch's line "lost rank(s) 1(signal 9 on vm) 3(...)" in text names rank."""
    return re.search(r"lost rank\(s\)(?: \d+\([^)]*\))* %d\(" % rank, text) is not None


def trial_slurm(a, i, tmp, refs, launcher, harness):
    t_start = time.time()
    r = trial_slurm_run(a, i, tmp, refs, launcher, harness)
    r["total"] = time.time() - t_start
    return r


def trial_slurm_run(a, i, tmp, refs, launcher, harness):
    name, backend, fault, victim, step, via = draw_slurm(a.seed, i, launcher, a.faults)
    n, lay, replays = LAYOUTS[name]
    cfg = dict(COMMON, **lay)
    cfg["train.device"] = backend
    if launcher == "slurm2":
        # The two namespaced nodes share this host's cores, which checkpoint.transfer = auto cannot
        # see from a node (2 ranks on a "2-core node" are not oversubscribed): it takes collective
        # MPI-IO, whose HDF5 collectives spin 4 ranks on 2 cores: a 0.8 MB write took 15 s idle
        # (0.3 s independent, 2026-12-07) and passed checkpoint.timeout beside a make check.
        cfg["checkpoint.transfer"] = "independent"
    extra = sets(cfg)
    res = {"i": i, "layout": name, "backend": backend, "fault": fault, "victim": victim, "step": step, "delay": 0,
           "why": [], "hang": False, "lost_ckpt": False, "lost": None, "landed": False, "launcher": launcher,
           "via": via}
    if harness is None or not harness.ok:
        res["why"].append("the %s harness did not start: %s" % (
            launcher, (harness.said.strip().splitlines() or ["?"])[-1] if harness else "not started"))
        return res
    key = (name, backend)
    if key not in refs:  # the uninterrupted run (mpiexec, as for the other launchers)
        ref = os.path.join(tmp, "ref-%s-%s" % key)
        rc, _ = run(train_cmd(a, n, ref, extra, launcher=False), ref + ".log", 600)
        refs[key] = ref if rc == 0 else None
    if not refs[key]:
        res["why"].append("the uninterrupted run failed")
        return res
    out = os.path.join(tmp, "t%d" % i)
    shutil.rmtree(out, ignore_errors=True)
    log = out + ".log"
    if fault == "full":
        return slurm_full(a, i, tmp, res, harness, out, log, n, extra, key, refs)
    # The binary the job runs: the real one, with the fault on the job's first run only (until the
    # job log tells of a lost rank, after which the requeued run must run clean)
    wrapper = out + ".mindpipe"
    mode = FAIL_MODE.get(fault, "")
    # again: a second kill in the requeued run (rank R2 as step S2 begins), the third run clean
    # relapse: a second loss inside the requeued run's recovery, the third run clean
    second = ""
    if fault == "again":
        res["again"] = again_of(a.seed, i, n, step)
        second = '[ "$k" = 1 ] && exec %s "$@" --set debug.fail_at=%d:%d\n' % ((a.mindpipe,) + res["again"])
    if fault == "relapse":
        res["relapse"] = relapse_of(a.seed, i, n, step)
        second = '[ "$k" = 1 ] && exec %s "$@" --set debug.fail_at=%d:%d:%s\n' % ((a.mindpipe,) + res["relapse"])
    if fault == "corrupt":  # once, by the requeued run's rank 0 before its start (the marker: once)
        flipped = out + ".flipped"
        second = ('[ "$k" = 1 ] && [ "${PMI_RANK:-${SLURM_PROCID:-x}}" = 0 ] && [ ! -e %s ] && : > %s && '
                  '%s %s --flip-logs "$out" %d %d >> %s.flip 2>&1\n' % (
                      flipped, flipped, sys.executable, os.path.abspath(__file__), step - 2, victim, out))
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\n'
                '# the run directory: the word after --out\n'
                'prev=; for w in "$@"; do [ "$prev" = --out ] && out=$w; prev=$w; done\n'
                '# the runs of the job so far that lost a rank\n'
                'k=$(grep -cs "lost rank" "$out/job.log")\n'
                '[ "${k:-0}" = 0 ] && exec %s "$@" --set debug.fail_at=%d:%d%s\n'
                '%sexec %s "$@"\n' % (a.mindpipe, victim, step, mode, second, a.mindpipe))
    os.chmod(wrapper, 0o755)
    env = dict(ENV, SLURM_CONF=harness.conf, MINDPIPE=wrapper, LAUNCHER=via, MPIRUN="mpiexec")
    shape = ["-n", str(n)] if launcher == "slurm1" else ["-N", "2", "--ntasks-per-node", str(n // 2), "--no-kill"]
    if launcher == "slurm2" and n // 2 > (os.cpu_count() or 2):
        # 8 ranks, 4 a node on 2 cores: oversubscribed, as mpiexec's 8-rank trials are. Slurm gives
        # a task a CPU unless told to overcommit, and refuses --ntasks-per-node above the node's
        # CPUs even then; -n 8 over -N 2 places ranks 0-3 on node1 and 4-7 on node2 (block)
        shape = ["-N", "2", "-n", str(n), "--overcommit", "--no-kill"]
    cmd = ["sbatch", "--parsable"] + shape + ["--time=10", "-o", log, SBATCH, DECK, out] + \
        ["--set", "data.path=%s" % a.data, "--quiet"] + extra + ["--set", "recovery.log=1"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
    jid = r.stdout.strip().split(";")[0]
    if r.returncode != 0 or not jid.isdigit():
        res["why"].append("sbatch refused the job: %s" % r.stdout.strip())
        return res
    res["job"] = jid
    joblog = os.path.join(out, "job.log")
    t0 = time.time()
    if fault in ("hang", "stall"):  # the stopped rank outlives its peers: killed once they are gone, as for mpiexec
        def survivors_gone():
            q = pids_of(out)
            return bool(q) and all(stopped(x) for x in q)
        if wait_for(survivors_gone, DEADLINE_S, 0.2):
            for q in pids_of(out):
                os.kill(q, signal.SIGKILL)
    elif fault == "node":  # the rank stops in step S; then node2 dies, every process of it
        if not wait_for(lambda: "stops answering" in read(log), DEADLINE_S):
            res["why"].append("rank %d did not stop in step %d" % (victim, step))
        else:
            rc, said = harness.call('all=$(ip netns pids "$(slurm_node_ns 2)"); [ -n "$all" ] && kill -KILL $all; '
                                    'echo $all | wc -w')
            res["landed"] = rc == 0
            # Slurm declares the node down at SlurmdTimeout (12 s) after its last word, and only
            # then does srun return: the deadline counts from the node's loss
            t0 = time.time()
            if rc != 0:
                res["why"].append("node2's processes could not be killed: %s" % said.strip())
    named = wait_for(lambda: "lost rank" in read(joblog) or
                     job_state(jid, harness.conf) in ("COMPLETED", "FAILED", "CANCELLED"), DEADLINE_S)
    secs = time.time() - t0
    if not named or "lost rank" not in read(joblog):
        res["hang"] = not named
        res["why"].append("the job log names no lost rank within %d s (job state %s)" % (
            DEADLINE_S, job_state(jid, harness.conf)))
    elif not names_lost(victim, read(joblog)):
        res["why"].append("the job log does not name rank %d: %s" % (
            victim, [l for l in read(joblog).splitlines() if "lost rank" in l][:1]))
    if fault == "node" and res["landed"]:  # node2 back for the rerun: its slurmd again, the node resumed
        rc, said = harness.call("slurm_node_restart 2 60")
        if rc != 0:
            res["why"].append("node2 did not come back: %s" % said.strip())
    rc, state = harness.call("slurm_follow %s 300" % jid)
    state = state.strip()
    if state != "COMPLETED":
        res["why"].append("the job ended %s, not COMPLETED" % state)
    if "requeueing job %s" % jid not in read(joblog):
        res["why"].append("the job did not requeue itself")
    lost_checkpoints(a, res, out, step)
    runlog = read(os.path.join(out, "log.txt"))
    if fault == "again":  # the second loss named and requeued too
        lost_lines = [l for l in read(joblog).splitlines() if "lost rank" in l]
        if len(re.findall(r"requeueing job %s" % jid, read(joblog))) < 2:
            res["why"].append("the job did not requeue itself after the second loss (rank %d at step %d)" % res["again"])
        elif len(lost_lines) < 2 or not names_lost(res["again"][0], lost_lines[1]):
            res["why"].append("the job log does not name rank %d, lost in the requeued run: %s" % (
                res["again"][0], lost_lines[1:2]))
    if fault == "relapse":  # where the requeued run recovered (a layout whose plan falls back has no
        # recovery to die in: the second run then runs clean), its loss there named and requeued too
        said = "debug.fail_at=%d:%d:%s: rank %d kills itself" % (res["relapse"] + res["relapse"][:1])
        res["landed"] = said in read(log)
        lost_lines = [l for l in read(joblog).splitlines() if "lost rank" in l]
        if res["landed"] and len(re.findall(r"requeueing job %s" % jid, read(joblog))) < 2:
            res["why"].append("the job did not requeue itself after rank %d was lost in the recovery" % res["relapse"][0])
        elif res["landed"] and (len(lost_lines) < 2 or not names_lost(res["relapse"][0], lost_lines[1])):
            res["why"].append("the job log does not name rank %d, lost in the requeued run's recovery: %s" % (
                res["relapse"][0], lost_lines[1:2]))
        elif not res["landed"] and replays:
            res["why"].append("rank %d did not die in the recovery of a layout that replays" % res["relapse"][0])
    if state == "COMPLETED":
        res["lost"] = max(0, (res["again"][1] if fault == "again" else step) - 1 - resumed_at(runlog))
        # a node that held neighbouring stages (pp4's stages 2 and 3 on node2) replays them together,
        # exchanging their own messages live: 0 lost like any other replaying layout (seed 3000's
        # trials 75 and 119 fell back before)
        # corrupt: the replay that meets the flipped byte fails by design, back to the checkpoint
        if replays and res["lost"] != 0 and fault not in ("write", "stall", "corrupt"):
            res["why"].append("lost %d steps where the layout replays" % res["lost"])
        if fault == "corrupt":
            hits = re.findall(r"^(\d+) log", read(out + ".flip"), re.M)
            res["landed"] = bool(hits) and int(hits[-1]) > 0
            if not hits:
                res["why"].append("the requeued run's rank 0 did not flip the logs: %s" % read(out + ".flip")[-300:])
        # write and stall may fall back: a survivor held inside an HDF5 collective can only be ended
        # by the watchdog's abort, with no snapshot. So far each met the loss at the write's
        # all-reduce instead and lost 0 (every replaying layout, seeds 5000 and 6000)
        if res["lost"] and fault not in ("write", "stall") and not re.search(
                r"snapshots are not used|replay of steps .* failed|nothing is logged", runlog + read(log)):
            res["why"].append("lost %d steps without a logged reason" % res["lost"])
        if res["lost"] > EVERY:
            res["why"].append("lost %d steps, more than checkpoint.every = %d" % (res["lost"], EVERY))
        same, line = compare(refs[key], out)
        if not same:
            res["why"].append("step %d is not the uninterrupted run's: %s" % (STEPS, " ".join(line)))
    res["secs"] = secs
    if res["why"]:
        subprocess.run(["scancel", jid], env=env, stderr=subprocess.DEVNULL)
        for q in pids_of(out):  # a rank the job left behind
            os.kill(q, signal.SIGKILL)
        if a.keep_failed or a.keep:
            with open(log, "a") as g:
                g.write("\n== job.log\n" + read(joblog) + "\n== harness logs\n" + harness.call("slurm_logs")[1])
    elif not a.keep:
        shutil.rmtree(out, ignore_errors=True)
        for p in (log, wrapper):
            os.unlink(p)
    return res


def slurm_full(a, i, tmp, res, harness, out, log, n, extra, key, refs):
    """The full fault under slurm1: the job's run directory on a tmpfs of its own, filled as step S
    begins; the job must end (not requeue: the disk would still be full) saying so, with its good
    checkpoints whole; then, with room again, the same job script submitted again resumes and ends
    bitwise the uninterrupted run, at most checkpoint.every steps lost."""
    step = res["step"]
    fs = out + "-fs"
    os.makedirs(fs, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % FULL_MB, "tmpfs", fs]).returncode != 0:
        res["why"].append("a full disk needs a tmpfs of its own: mount failed (root?)")
        return res
    run_dir = os.path.join(fs, "run")
    env = dict(ENV, SLURM_CONF=harness.conf, MINDPIPE=a.mindpipe, LAUNCHER=res["via"], MPIRUN="mpiexec")
    # not --quiet: the progress lines go to the job's output file (another disk), so the steps done
    # are known though the run's own files could not record them
    cmd = ["sbatch", "--parsable", "-n", str(n), "--time=10", "-o", log, SBATCH, DECK, run_dir,
           "--set", "data.path=%s" % a.data] + extra + ["--set", "recovery.log=1"]

    jobs = []

    def submit():
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
        jid = r.stdout.strip().split(";")[0]
        if r.returncode != 0 or not jid.isdigit():
            res["why"].append("sbatch refused the job: %s" % r.stdout.strip())
            return None
        jobs.append(jid)
        return jid

    try:
        jid = submit()
        if jid is None:
            return res
        res["job"] = jid
        t0, filled, k, pids = time.time(), False, 0, []
        ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
        # the metrics every 10 ms, the job's state (a scontrol) every 0.5 s; the ranks held while
        # the disk fills (fill_run)
        while time.time() - t0 < DEADLINE_S and not filled:
            if len(pids) < n and k % 10 == 0:  # a pgrep every 100 ms until every rank is up
                pids = pids_of(run_dir)
            if metrics_step(run_dir) >= step - 1:
                res["filled_after"] = fill_run(fs, run_dir, pids)
                filled = True
            elif k % 50 == 0 and job_state(jid, harness.conf) in ended:
                break
            k += 1
            time.sleep(0.01)
        # a job that requeued itself would meet the full disk again: it must end instead
        rc, state = harness.call("slurm_follow %s %d" % (jid, DEADLINE_S))
        state = state.strip()
        res["secs"] = time.time() - t0
        text = read(log)
        res["landed"] = filled and state != "COMPLETED"
        if not filled:
            res["why"].append("the job ended (%s) before step %d: its disk was not filled" % (state, step))
        elif state == "COMPLETED":  # its writes done before the disk filled: nothing failed
            pass
        elif state != "FAILED":
            res["hang"] = state.startswith("still")
            res["why"].append("the job with a full disk ended %s, not FAILED" % state)
        if crashed(text + read(os.path.join(run_dir, "job.log"))):
            res["why"].append("a rank crashed: %s" % crashed(text + read(os.path.join(run_dir, "job.log"))))
        if res["landed"]:
            if "No space left on device" not in text:
                res["why"].append("the job's output says nothing of the full disk (No space left on device)")
            if "requeueing job %s" % jid in text:
                res["why"].append("the job requeued itself onto a full disk")
        for q in pids_of(run_dir):  # a rank left behind
            res["why"].append("rank process %d outlived the failed job" % q)
            os.kill(q, signal.SIGKILL)
        # no good checkpoint lost: those of the steps done before the fault (the progress lines say
        # how far the run got: the writes fail where buffers first reach the full disk)
        done_before = max([step - 1] + [int(x) for x in re.findall(r"^step +(\d+)/%d \|" % STEPS, text, re.M)])
        lost_checkpoints(a, res, run_dir, step)
        if filled:
            os.unlink(os.path.join(fs, "filler"))  # room again, as a person would make it
        if res["landed"] and not res["why"]:  # the job submitted again resumes
            with open(log, "a") as f:
                f.write("\n== submitted again, with room on the disk\n")
            jid2 = submit()
            if jid2 is None:
                return res
            res["job"] = "%s, then %s" % (jid, jid2)
            rc, state2 = harness.call("slurm_follow %s 300" % jid2)
            if state2.strip() != "COMPLETED":
                res["why"].append("the job submitted again ended %s, not COMPLETED" % state2.strip())
                return res
        elif res["landed"]:
            return res
        runlog = read(os.path.join(run_dir, "log.txt"))
        res["lost"] = max(0, done_before - resumed_at(runlog)) if res["landed"] else 0
        if res["lost"] > EVERY:
            res["why"].append("lost %d steps, more than checkpoint.every = %d" % (res["lost"], EVERY))
        same, line = compare(refs[key], run_dir)
        if not same:
            res["why"].append("step %d is not the uninterrupted run's: %s" % (STEPS, " ".join(line)))
        return res
    finally:
        if res["why"]:
            for jid in jobs:
                subprocess.run(["scancel", jid], env=env, stderr=subprocess.DEVNULL)
            for q in pids_of(run_dir):
                os.kill(q, signal.SIGKILL)
        if (a.keep or (a.keep_failed and res["why"])) and os.path.isdir(run_dir):
            shutil.copytree(run_dir, out, dirs_exist_ok=True)
            if res["why"]:
                with open(log, "a") as g:
                    g.write("\n== harness logs\n" + harness.call("slurm_logs")[1])
        elif not res["why"] and os.path.exists(log):
            os.unlink(log)
        subprocess.run(["umount", "-l", fs])
        os.rmdir(fs)


FULL_MB = 256  # the tmpfs a full-disk trial runs on: room for the run, filled by the fault


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mindpipe", default="src/mindpipe")
    ap.add_argument("--data", default="data/kjv.h5")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--only", type=int, default=-1, help="replay trial N of the seed alone")
    ap.add_argument("--first", type=int, default=0, help="the first trial: trials FIRST .. FIRST+TRIALS-1 of the "
                    "seed (a campaign run in parts draws the same trials as in one)")
    ap.add_argument("--keep", default="", help="keep every trial's directory under this folder")
    ap.add_argument("--keep-failed", default="", help="keep the failed trials' directories (and the references) "
                    "under this folder")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--faults", default="", help="the fault kinds to draw from, joined by ',' (default: all; "
                    "make check leaves out relapse, whose second kill lands where the clock puts it)")
    ap.add_argument("--launchers", default="mpiexec", help="the launchers to draw from, joined by ',': mpiexec, "
                    "slurm1 (jobs/slurm/train.sbatch on a one-node Slurm), slurm2 (on two namespaced nodes, "
                    "with the node fault); default mpiexec")
    ap.add_argument("--flip-logs", nargs=3, metavar=("OUT", "STEP", "VICTIM"),
                    help="(for a Slurm trial's job) flip one byte of group step STEP's first entry in every "
                    "boundary log of run directory OUT but rank VICTIM's, say how many, and exit")
    a = ap.parse_args()
    if a.flip_logs:
        hit, problems = flip_logs(a.flip_logs[0], int(a.flip_logs[1]), int(a.flip_logs[2]))
        print("%d log(s) flipped%s" % (hit, "; " + "; ".join(problems) if problems else ""))
        sys.exit(1 if problems else 0)
    a.faults = [f for f in a.faults.split(",") if f] or None
    a.launchers = [x for x in a.launchers.split(",") if x] or ["mpiexec"]
    known = set(FAULTS) | {f for v in SLURM_FAULTS.values() for f in v}
    bad = [f for f in a.faults or [] if f not in known]
    if bad:
        ap.error("unknown fault kind(s) %s (known: %s)" % (", ".join(bad), ", ".join(sorted(known))))
    bad = [x for x in a.launchers if x not in LAUNCHERS]
    if bad:
        ap.error("unknown launcher(s) %s (known: %s)" % (", ".join(bad), ", ".join(LAUNCHERS)))
    # every launcher drawn must have a fault to draw
    for x in a.launchers:
        if a.faults and not [f for f in a.faults if f in (FAULTS if x == "mpiexec" else SLURM_FAULTS[x])]:
            ap.error("no fault of %s can run under %s" % (",".join(a.faults), x))
    global MINDPIPE
    a.mindpipe, a.data = os.path.abspath(a.mindpipe), os.path.abspath(a.data)
    # the Slurm harnesses run their daemons from their own directory: a relative folder would be theirs
    a.keep, a.keep_failed = (os.path.abspath(x) if x else x for x in (a.keep, a.keep_failed))
    MINDPIPE = a.mindpipe
    root = a.keep or a.keep_failed or tempfile.mkdtemp(prefix="chaos.")
    os.makedirs(root, exist_ok=True)
    refs, results = {}, []
    todo = [a.only] if a.only >= 0 else range(a.first, a.first + a.trials)
    t0 = time.time()
    # SIGTERM too (a batch system's end, or `kill` of a campaign started in the background, whose
    # SIGINT the shell ignores): the trials run so far are reported
    signal.signal(signal.SIGTERM, interrupted)
    harnesses = {}  # launcher: its Slurm, started at its first trial, stopped at the campaign's end
    try:
        for i in todo:
            run_one(a, i, root, refs, results, harnesses)
    except KeyboardInterrupt:  # a campaign cut short (Ctrl-C, SIGTERM) still reports the trials it ran
        end_spawned()
        print("interrupted after %d trials" % len(results), flush=True)
    finally:
        # the last started first: the first may have started munged, which it stops only when no
        # other harness shell (registered as munge's user) still lives
        for h in reversed(list(harnesses.values())):
            h.close()
    return report(a, root, results, t0)


def interrupted(signum, frame):
    raise KeyboardInterrupt


def run_one(a, i, root, refs, results, harnesses):
    """Trial i, its line and the command that replays it printed, its result added to results."""
    launcher = draw_launcher(a.seed, i, a.launchers)
    if launcher == "mpiexec":
        r = trial(a, i, root, refs)
        r["launcher"], r["via"] = "mpiexec", ""
    else:
        if launcher not in harnesses:
            t = time.time()
            harnesses[launcher] = Harness(launcher, root)
            print("# %s: %s in %.0f s" % (launcher, "a Slurm started" if harnesses[launcher].ok else
                                          "the Slurm did not start:\n" + harnesses[launcher].said, time.time() - t),
                  flush=True)
        r = trial_slurm(a, i, root, refs, launcher, harnesses[launcher])
    results.append(r)
    status = "PASS" if not r["why"] else "FAIL"
    fault = r["fault"] + (" (the second kill %s)" % ("landed" if r["landed"] else "came after the resume ended")
                          if r["fault"] == "relapse" else
                          "" if r["fault"] != "full" or r["landed"] else " (the run's writes were done before its disk filled)")
    if r["fault"] == "relapse" and r.get("relapse"):  # under Slurm: a drawn rank and step of the replay
        rank, at, mode = r["relapse"]
        fault = "relapse (then rank %d in the recovery, %s: %s)" % (
            rank, ("at step %d of the replay" if mode == "replay" else "once it reached step %d") % at,
            "landed" if r["landed"] else "no recovery to die in")
    if r["fault"] == "again" and r.get("again"):
        fault = "again (then rank %d at step %d of the resumed run)" % r["again"]
    if r["fault"] == "full" and "filled_after" in r:  # where the fill landed, the ranks held (the
        # next checkpoint, whose write fails, is the one after that step)
        fault += " (filled after step %d)" % r["filled_after"]
    if r["fault"] == "node":  # the rank it names first stops, then its node dies
        fault = "node2 lost (every process killed, slurmd too)"
    launched = "" if r["launcher"] == "mpiexec" else " under %s (LAUNCHER=%s%s%s)" % (
        r["launcher"], r["via"], ", job %s" % r["job"] if "job" in r else "",
        ", the %s in %.0f s, trial %.0f s" % ("job ended" if r["fault"] == "full" else "loss named", r["secs"],
                                               r["total"]) if "secs" in r else "")
    print("%s trial %d (seed %d)%s: %s on %s, %s of rank %d at step %d: %s%s" % (
        status, i, a.seed, launched, r["layout"], r["backend"], fault, r["victim"], r["step"],
        "%s steps lost" % r["lost"] if r["lost"] is not None else "no resume",
        "" if not r["why"] else "; " + "; ".join(r["why"])), flush=True)
    print("  replay: /usr/bin/python3 validation/chaos/chaos.py --mindpipe %s --data %s --seed %d --only %d "
          "--keep /tmp/chaos-%d-%d%s%s" % (
              a.mindpipe, a.data, a.seed, i, a.seed, i, " --faults " + ",".join(a.faults) if a.faults else "",
              " --launchers " + ",".join(a.launchers) if a.launchers != ["mpiexec"] else ""),
          flush=True)


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
