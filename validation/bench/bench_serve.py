#!/usr/bin/env python3
"""Serving benchmark (docs/SERVING.md): `mindpipe serve` on a gpt-tiny-shaped checkpoint, tokens/s
and request latency percentiles against concurrent clients, stages and standbys, and PyTorch
generating the same requests with a key/value cache on the same cores, one request at a time and in
static batches of each concurrency (its "slots" and "clients" column: the batch).

  /usr/bin/python3 validation/bench/bench_serve.py [--mindpipe src/mindpipe] [--data data/kjv.h5]
      [--requests 64] [--max-tokens 32] [--concurrency 1,4,8] [--runs 1] [--overhead PAIRS]
      [--deck inputs/gpt-tiny.ini] [--train-steps 20] [--standby-cpu N] [--stages 1,2] [--slots 8]

--overhead PAIRS measures only what standbys cost: for each concurrency, PAIRS alternating runs of
the 2-stage server without and with a standby per stage (a fresh server each), the median of each,
and the difference in percent (tokens/s lower, latency higher: positive is a cost), with each
server's processes' CPU time per token step (from /proc: front end, primaries, standbys).

--standby-cpu N (with --overhead) gives the standbys CPU N of their own, as HAMS gives each standby
a GPU of its own: the server, its primaries and the clients run on the other CPUs in both runs of a
pair, and once a server is up its standbys (every thread) move to CPU N. What is left is the cost a
standby puts on the primaries' side (packing and sending deltas, the watermark), not the contention
of standbys and primaries for the same cores.

--stages and --slots: the servers of the table (default 1 and 2 stages, the 2-stage one also with a
standby per stage; 8 slots, the most requests a step batches); every stage count with more than one
stage runs without and with standbys.

--deck another model (e.g. inputs/gpt-small.ini, where a step is dominated by arithmetic); its
checkpoint is trained for --train-steps steps of one sequence (the timing does not depend on the
weights).

Every request is validation/serve_client.py's request i with max_tokens fixed (prompts of 1-23
bytes; greedy or temperature 0.9, top-k 20 or all). tokens/s = generated tokens / wall time of the
whole load; latency = one request's HTTP round trip, quantiles over the load. Each stage process
runs its kernels on 1 thread; the front end computes nothing. The PyTorch peer uses 1 thread.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
from bench import bench_args, machine  # noqa: E402
from serve_client import request_of  # noqa: E402

CLIENT = os.path.join(HERE, "..", "serve_client.py")
DECK = os.path.join(HERE, "..", "..", "inputs", "gpt-tiny.ini")


def front_end_url(p, out):
    """The front end's address once OUT/serve.json exists (60 s at most, sooner if the server p exits)."""
    js = os.path.join(out, "serve.json")
    for _ in range(600):
        if os.path.exists(js) or p.poll() is not None:
            break
        time.sleep(0.1)
    return json.load(open(js))["front_end"]["address"]


def checkpoint(a, tmp):
    """A checkpoint of the deck (its weights after a few steps: what is timed does not depend on them;
    decks other than gpt-tiny train on one sequence per step, so that this takes seconds)."""
    deck, steps = getattr(a, "deck", DECK), getattr(a, "train_steps", 20)  # bench_failover: gpt-tiny, 20
    small = [] if deck == DECK else ["--set", "train.batch=1", "--set", "train.micro_batch=1"]
    subprocess.run([a.mindpipe, "train", "-c", deck, "--set", "data.path=" + os.path.abspath(a.data), "--set",
                    "train.steps=%d" % steps, "--set", "train.warmup=%d" % max(1, min(5, steps // 4)), "--set", "train.eval_every=0"] + small +
                   ["--quiet", "--out", os.path.join(tmp, "run")], check=True)
    return os.path.join(tmp, "run", "ckpt", "step_%08d.h5" % steps)


def cpu_s(pid):
    """A process's user + system CPU seconds so far (/proc/PID/stat)."""
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def roles(out):
    """{role: [pid]} of a server from OUT/serve.json: front, primary, standby."""
    j = json.load(open(os.path.join(out, "serve.json")))
    r = {"front": [j["front_end"]["pid"]], "primary": [], "standby": []}
    for s in j["stages"]:
        r[s["role"]].append(s["pid"])
    return r


def steps_total(url):
    import urllib.request
    m = urllib.request.urlopen(url + "/metrics").read().decode()
    return int(next(l.split()[1] for l in m.splitlines() if l.startswith("mindpipe_steps_total")))


def pin(pid, cpus):
    """Every thread of process pid onto cpus (threads it makes later inherit it from their maker)."""
    for t in os.listdir("/proc/%d/task" % pid):
        os.sched_setaffinity(int(t), cpus)


def serve_point(a, tmp, ck, stages, standby, concurrency, slots=8):
    # a directory of its own: a stopped server's serve.json must not be read as this one's
    out = tempfile.mkdtemp(prefix="srv_%d_%d_%d_" % (stages, standby, concurrency), dir=tmp)
    p = subprocess.Popen([a.mindpipe, "serve", "-c", a.deck, "--ckpt", ck, "--stages", str(stages), "--standby",
                          str(standby), "--slots", str(slots), "--listen", "127.0.0.1:0", "--out", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=None if a.standby_cpu is None else lambda: os.sched_setaffinity(0, a.rest_cpus))
    try:
        url = front_end_url(p, out)
        pids = roles(out)
        if a.standby_cpu is not None:
            for x in pids["standby"]:
                pin(x, {a.standby_cpu})
        cpu0 = {k: sum(cpu_s(x) for x in v) for k, v in pids.items()}
        steps0 = steps_total(url)
        res = []
        for _ in range(a.runs):
            r = subprocess.run([sys.executable, CLIENT, "load", url, "--requests", str(a.requests), "--concurrency",
                                str(concurrency), "--max-tokens", str(a.max_tokens), "--summary", "--out",
                                os.path.join(out, "load.jsonl")], check=True, capture_output=True, text=True,
                               preexec_fn=None if a.standby_cpu is None else lambda: os.sched_setaffinity(0, a.rest_cpus))
            res.append(json.loads(r.stdout))
        steps = max(1, steps_total(url) - steps0)
        best = max(res, key=lambda x: x["tokens_per_s"])
        best["cpu_us_per_step"] = {k: 1e6 * (sum(cpu_s(x) for x in v) - cpu0[k]) / steps for k, v in pids.items()}
        return best
    finally:
        p.terminate()
        p.wait()


def torch_point(a, ck, batch=1):
    """The same requests in PyTorch (validation/torch_ref.py's weights) with a key/value cache, in static
    batches of `batch` requests: each step feeds every unfinished request of the batch one token (a
    prompt's next byte, or the last one sampled); the products run over the batch's rows at once,
    attention per request over its own cache; a batch ends when its last request does. batch = 1 is
    one request at a time. Tokens/s and latency quantiles (a request's latency: its batch's start to
    its own last token)."""
    import h5py
    import torch
    torch.set_num_threads(1)
    with h5py.File(ck, "r") as f:
        P = {n: torch.tensor(f["model"][n][()]) for n in f["model"].keys()}
        st = f["state"].attrs
        L, C, NH = int(st["layers"]), int(st["dim"]), int(st["heads"])
    hs = C // NH
    F = torch.nn.functional

    def step(toks, poss, caches):
        """One position of each request (toks, poss: lists), its logits (B, V)."""
        x = P["wte"][toks] + P["wpe"][poss]
        for l in range(L):
            p = lambda s: P[f"h.{l}.{s}"]  # noqa: E731
            h = F.layer_norm(x, (C,), p("ln1.w"), p("ln1.b"), eps=1e-5)
            q, k, v = F.linear(h, p("attn.qkv.w"), p("attn.qkv.b")).split(C, -1)
            y = []
            for b, cache in enumerate(caches):
                cache[l][0].append(k[b].view(NH, hs))
                cache[l][1].append(v[b].view(NH, hs))
                K, V = torch.stack(cache[l][0], 1), torch.stack(cache[l][1], 1)  # (NH, t, hs)
                att = torch.softmax((K @ q[b].view(NH, hs, 1)).squeeze(-1) / hs ** 0.5, -1)
                y.append((att.unsqueeze(1) @ V).reshape(C))
            x = x + F.linear(torch.stack(y), p("attn.proj.w"), p("attn.proj.b"))
            h = F.layer_norm(x, (C,), p("ln2.w"), p("ln2.b"), eps=1e-5)
            x = x + F.linear(F.gelu(F.linear(h, p("mlp.fc.w"), p("mlp.fc.b")), approximate="tanh"), p("mlp.proj.w"),
                             p("mlp.proj.b"))
        return F.layer_norm(x, (C,), P["lnf.w"], P["lnf.b"], eps=1e-5) @ P["wte"].t()

    def sample(r, logits):
        if r["temperature"] == 0:
            return int(torch.argmax(logits))
        z = logits / r["temperature"]
        if r["top_k"]:
            z = torch.where(z < torch.topk(z, r["top_k"]).values[-1], torch.tensor(-float("inf")), z)
        return int(torch.multinomial(torch.softmax(z, -1), 1))

    lat, toks, texts = [], 0, {}
    t0 = time.time()
    with torch.no_grad():
        for g in range(0, a.requests, batch):
            t1 = time.time()
            reqs = [request_of(i, a.max_tokens) for i in range(g, min(g + batch, a.requests))]
            seqs = [list(r["prompt"].encode()) for r in reqs]
            fed = [0] * len(reqs)                       # positions fed so far
            made = [0] * len(reqs)                      # tokens sampled so far
            caches = [[([], []) for _ in range(L)] for _ in reqs]
            while True:
                live = [b for b in range(len(reqs)) if made[b] < reqs[b]["max_tokens"]]
                if not live:
                    break
                logits = step([seqs[b][fed[b]] for b in live], [fed[b] for b in live], [caches[b] for b in live])
                for j, b in enumerate(live):
                    fed[b] += 1
                    if fed[b] == len(seqs[b]):          # the prompt is in, or the last token sampled was fed
                        seqs[b].append(sample(reqs[b], logits[j]))
                        made[b] += 1
                        toks += 1
                        if made[b] == reqs[b]["max_tokens"]:
                            lat.append(time.time() - t1)
                            texts[g + b] = bytes(seqs[b][len(reqs[b]["prompt"].encode()):])
    dt = time.time() - t0
    q = sorted(lat)
    return {"tokens_per_s": toks / dt, "p50": q[len(q) // 2], "p90": q[int(0.9 * (len(q) - 1))],
            "p99": q[int(0.99 * (len(q) - 1))], "texts": texts}


def overhead(a, tmp, ck):
    print("| clients | tokens/s none | tokens/s standby | p50 ms none | p50 ms standby | p99 ms none | p99 ms standby | "
          "tokens/s cost | p50 cost | CPU µs/step none (front+primaries) | standby (front+primaries+standbys) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")
    for c in (int(x) for x in a.concurrency.split(",")):
        runs = {0: [], 1: []}
        for _ in range(a.overhead):
            for sb in (0, 1):
                runs[sb].append(serve_point(a, tmp, ck, 2, sb, c))
        med = {sb: {k: statistics.median(r[k] for r in runs[sb]) for k in ("tokens_per_s", "p50", "p99")} for sb in runs}
        cpu = {sb: {k: statistics.median(r["cpu_us_per_step"][k] for r in runs[sb]) for k in ("front", "primary", "standby")}
               for sb in runs}
        n, w = med[0], med[1]
        print("| %d | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %+.1f%% | %+.1f%% | %.0f+%.0f | %.0f+%.0f+%.0f |" % (
            c, n["tokens_per_s"], w["tokens_per_s"], 1e3 * n["p50"], 1e3 * w["p50"], 1e3 * n["p99"], 1e3 * w["p99"],
            100 * (1 - w["tokens_per_s"] / n["tokens_per_s"]), 100 * (w["p50"] / n["p50"] - 1), cpu[0]["front"],
            cpu[0]["primary"], cpu[1]["front"], cpu[1]["primary"], cpu[1]["standby"]), flush=True)


def main():
    ap = bench_args(__doc__, runs=True)
    ap.set_defaults(runs=1)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--overhead", type=int, default=0, help="only the cost of standbys, over this many pairs of runs")
    ap.add_argument("--deck", default=DECK, help="the model (default inputs/gpt-tiny.ini)")
    ap.add_argument("--train-steps", type=int, default=20, help="steps of training for its checkpoint")
    ap.add_argument("--stages", default="1,2", help="stage counts of the table's servers")
    ap.add_argument("--slots", default="8", help="slots (requests batched per step) of the table's servers")
    ap.add_argument("--standby-cpu", type=int, help="with --overhead: this CPU for the standbys alone, the others for the rest")
    a = ap.parse_args()
    print("# " + machine())
    if a.standby_cpu is not None:
        a.rest_cpus = os.sched_getaffinity(0) - {a.standby_cpu}
        if a.standby_cpu not in os.sched_getaffinity(0) or not a.rest_cpus or not a.overhead:
            ap.error("--standby-cpu %d: needs --overhead, a CPU of this process's and at least one other" % a.standby_cpu)
        print("# standbys on CPU %d; front end, primaries and clients on CPUs %s" % (
            a.standby_cpu, ",".join(map(str, sorted(a.rest_cpus)))))
    if a.overhead:
        with tempfile.TemporaryDirectory() as tmp:
            overhead(a, tmp, checkpoint(a, tmp))
        return
    print("| server | slots | clients | tokens/s | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        ck = checkpoint(a, tmp)
        for stages in (int(x) for x in a.stages.split(",")):
            for standby in ((0, 1) if stages > 1 else (0,)):
                for slots in (int(x) for x in a.slots.split(",")):
                    for c in (int(x) for x in a.concurrency.split(",")):
                        r = serve_point(a, tmp, ck, stages, standby, c, slots)
                        print("| mindpipe serve, %d stage%s%s | %d | %d | %.0f | %.1f | %.1f | %.1f |" % (
                            stages, "s" if stages > 1 else "", ", standby" if standby else "", slots, c,
                            r["tokens_per_s"], 1e3 * r["p50"], 1e3 * r["p90"], 1e3 * r["p99"]), flush=True)
        for c in (int(x) for x in a.concurrency.split(",")):
            r = torch_point(a, ck, c)
            print("| PyTorch %s, KV cache, %s | %d | %d | %.0f | %.1f | %.1f | %.1f |" % (
                __import__("torch").__version__, "static batches of %d" % c if c > 1 else "one request at a time", c, c,
                r["tokens_per_s"], 1e3 * r["p50"], 1e3 * r["p90"], 1e3 * r["p99"]), flush=True)


if __name__ == "__main__":
    main()
