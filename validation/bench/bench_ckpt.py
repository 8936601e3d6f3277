#!/usr/bin/env python3
"""Checkpoint write and read bandwidth of the GPT-2 124M shape at 1, 4 and 8 ranks, against the
file system's own (dd with the same bytes, fsynced), in one invocation on one machine (issue #6).

Each point trains one step (sequence length 64 keeps the step short; the checkpoint's size does not
depend on it beyond wpe) and writes the final checkpoint: weights, AdamW m and v, /state. Then a
second run resumes from it (--resume auto at train.steps = 1 trains nothing) and reads it back.
MindPipe logs both ("checkpoint ... (X MB written in Y s ...)", "resumed from ... (X MB read in Y
s ...)"); the write time covers the whole collective write: create, every rank's hyperslabs,
checksums, flush, fsync and rename; the read time covers reading every rank's hyperslabs into fresh
buffers, verifying every checksum and only then copying into the model. Before each read (MindPipe's
and dd's) the page cache is dropped when this process may (root: /proc/sys/vm/drop_caches); the
table says whether reads were cold or warm.

    python3 bench_ckpt.py --mindpipe BUILD/src/mindpipe --data BUILD/validation/kjv.h5 [--dir DIR]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

LAYOUTS = {  # ranks -> deck overrides; 12 layers, 12 heads and vocab 50304 divide all of them
    1: [],
    4: ["parallel.tp=2", "parallel.pp=2"],
    8: ["parallel.tp=2", "parallel.pp=4"],
}


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stdout[-3000:]))
    return p.stdout


def drop_caches():
    """Cold reads where permitted; returns whether the cache was dropped."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def point(a, n, transfer, root):
    out = os.path.join(root, "r%d_%s" % (n, transfer))
    shutil.rmtree(out, ignore_errors=True)
    base = ["mpiexec", "-n", str(n), a.mindpipe, "train", "-c", a.deck, "--out", out, "--quiet",
            "--set", "data.path=" + a.data, "--set", "train.steps=1", "--set", "train.warmup=0", "--set", "model.seq_len=64",
            "--set", "train.batch=%d" % max(n, 4), "--set", "train.micro_batch=1", "--set", "train.eval_every=0",
            "--set", "train.threads=1", "--set", "checkpoint.transfer=" + transfer]
    for kv in LAYOUTS[n]:
        base += ["--set", kv]
    run(base)
    drop_caches()
    run(base + ["--resume", "auto"])
    log = open(os.path.join(out, "log.txt")).read()
    w = re.search(r"checkpoint \S+ \(([\d.]+) MB written in ([\d.]+) s", log)
    r = re.search(r"resumed from \S+ at step \d+ \(([\d.]+) MB read in ([\d.]+) s", log)
    if not w or not r:
        sys.exit("no checkpoint timing in %s/log.txt" % out)
    shutil.rmtree(out, ignore_errors=True)
    return float(w.group(1)), float(w.group(2)), float(r.group(2))


def dd(mb, root):
    f = os.path.join(root, "dd.bin")
    count = max(1, int(mb / 4 + 0.5))
    t0 = time.perf_counter()
    run(["dd", "if=/dev/zero", "of=" + f, "bs=4M", "count=%d" % count, "conv=fsync"])
    tw = time.perf_counter() - t0
    drop_caches()
    t0 = time.perf_counter()
    run(["dd", "if=" + f, "of=/dev/null", "bs=4M"])
    tr = time.perf_counter() - t0
    os.unlink(f)
    return count * 4.194304 / tw, count * 4.194304 / tr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mindpipe", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--deck", default=os.path.join(os.path.dirname(__file__), "..", "..", "inputs", "gpt2-124m.ini"))
    ap.add_argument("--dir", default=None, help="where the checkpoints go (default: a temp dir under /tmp)")
    ap.add_argument("--ranks", default="1,4,8")
    ap.add_argument("--collective-up-to", type=int, default=4,
                    help="also measure checkpoint.transfer=collective up to this many ranks")
    a = ap.parse_args()
    a.mindpipe, a.data, a.deck = map(os.path.abspath, (a.mindpipe, a.data, a.deck))
    root = tempfile.mkdtemp(prefix="mp-bench-ckpt.", dir=a.dir)
    rows = []
    try:
        for n in [int(x) for x in a.ranks.split(",")]:
            for transfer in ["auto", "collective"] if 1 < n <= a.collective_up_to else ["auto"]:
                mb, tw, tr = point(a, n, transfer, root)
                rows.append((n, transfer, mb, tw, tr))
                print("ranks %d %-10s %.0f MB: write %.2f s (%.0f MB/s), read %.2f s (%.0f MB/s)" %
                      (n, transfer, mb, tw, mb / tw, tr, mb / tr), flush=True)
        ddw, ddr = dd(rows[0][2], root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\nreads: %s" % ("cold (page cache dropped before each)" if drop_caches() else "warm (page cache not droppable)"))
    print("\n| ranks | layout | transfer | size (MB) | write MB/s | read MB/s | write / dd | read / dd |")
    print("|---|---|---|---|---|---|---|---|")
    for n, transfer, mb, tw, tr in rows:
        lay = " x ".join(kv.split(".")[1].replace("=", "") for kv in LAYOUTS[n]) or "one rank"
        print("| %d | %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f |" %
              (n, lay, transfer, mb, mb / tw, mb / tr, mb / tw / ddw, mb / tr / ddr))
    print("| dd | | | %.0f | %.0f | %.0f | 1 | 1 |" % (rows[0][2], ddw, ddr))


if __name__ == "__main__":
    main()
