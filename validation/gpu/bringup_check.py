#!/usr/bin/env python3
"""The checks and the report of validation/gpu/bringup.sh: each subcommand reads what one part
left (run directories, logs, JSON) and writes that part's JSON: {"part", "status", "what", ...}.
status is "pass", "fail", "skipped" (dry run only: a thing this machine cannot do, said why) or,
written by `finish`, "timeout" / "error". Needs numpy and h5py; runs under the device's python
and Debian's /usr/bin/python3 alike.

  env OUT DIR DRY                 versions, the kit's libraries, MPI with 2 ranks
  selftest OUT DIR DRY            mindpipe selftest's ok/FAIL lines
  compare OUT LABEL REF RUN ...   per-step loss and final tensors against a reference run
  curve OUT S11 S12 F32 LOW PREC  a low-precision curve against fp32 and the noise of two seeds
  layouts OUT BASE CPUREF N=DIR.. layouts against one rank, as closely as on cpu
  merge OUT LABEL JSON..          one part of several checks' results: passed when every one passed
  nccl OUT BASE CPUREF KILLLOG KILLRES PLANTLOG DRY N=DIR..  ranks_nccl: the layouts, a stopped rank, a planted mismatch
  crossing OUT DEV CPU D2C C2D D  checkpoints across devices
  hf OUT CHK DRY [LLAMACHK]       hf_check.py's (and hf_llama_check.py's) lines: forwards and from_pretrained
  peak SMI DRY                    prints the chip's dense bf16 peak in GFLOP/s (0: unknown)
  gpt2 OUT RUN NVML PEAK DRY [ALTDIR ENV]..  throughput, MFU, kernel table, energy against NVML; variants
  torch OUT NAME JSON DRY         the PyTorch peer's result
  finish OUT NAME RC T0 T1 LIMIT  adds time and exit status; a part that wrote nothing is an error
  report OUT SUMMARY PARTS DRY T0 KIT NAMES...   report.json and the summary table"""
import glob
import json
import math
import os
import re
import sys
import time


# The bring-up must end within the device's 10 minutes a call: the parts' limits (8.75 min) leave
# about a minute for unpacking and the report.
TIMEOUTS_MAX_S = 525
# The run's GPU energy and the sampler's read one counter over windows a few ms apart: they agree
# to this fraction or one of them is wrong.
ENERGY_AGREE = 0.10


def save(path, d):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(d, f, indent=1, sort_keys=False, default=float)
    os.replace(tmp, path)


def load(path):
    with open(path) as f:
        return json.load(f)


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def metrics(d):
    """step -> the run's metrics line; {} when the run wrote none."""
    out = {}
    for line in read(os.path.join(d, "metrics.jsonl")).splitlines():
        try:
            # train.c prints a non-finite loss with %.17g ("nan", "-nan", "inf"): not JSON
            r = json.loads(re.sub(r'(?<=:)(-?)(nan|inf)\b', lambda m: m.group(1) + ("NaN" if m.group(2) == "nan" else "Infinity"), line))
        except ValueError:
            continue
        if "step" in r and "loss" in r:
            out[r["step"]] = r
    return out


def run_done(d):
    """'' when the run's exit_status says it finished, else why not."""
    st = read(os.path.join(d, "exit_status")).strip()
    return "" if st.startswith("0 ") else "the run did not finish (exit_status: %s)" % (st or "none")


def last_ckpt(d, step=None):
    if step:
        p = os.path.join(d, "ckpt", "step_%08d.h5" % step)
        return p if os.path.exists(p) else None
    c = sorted(glob.glob(os.path.join(d, "ckpt", "step_*.h5")))
    return c[-1] if c else None


def run_tail(d, n=6):
    return read(d + ".log").splitlines()[-n:]


def compare_runs(ref, run, step=None):
    """Per-step loss and final-checkpoint differences of run against ref (both run directories)."""
    import h5py
    import numpy as np
    mr, mx = metrics(ref), metrics(run)
    steps = sorted(set(mr) & set(mx))
    res = {"steps": len(steps), "ref": ref, "run": run}
    if run_done(run):
        res["error"] = "%s: %s; %s" % (os.path.basename(run), run_done(run), " / ".join(run_tail(run, 3)))
        return res
    if not steps:
        res["error"] = "no common logged step (run: %s)" % " / ".join(run_tail(run, 3))
        return res
    rels = [abs(mx[s]["loss"] - mr[s]["loss"]) / abs(mr[s]["loss"]) for s in steps]
    res["loss_rel"] = max(rels) if all(map(math.isfinite, rels)) else float("inf")  # max() skips a NaN
    res["losses_bitwise"] = all(mx[s]["loss"] == mr[s]["loss"] and mx[s].get("grad_norm") == mr[s].get("grad_norm")
                                for s in steps)
    res["last_step"] = steps[-1]
    res["last_loss"] = [mr[steps[-1]]["loss"], mx[steps[-1]]["loss"]]
    cr, cx = last_ckpt(ref, step), last_ckpt(run, step)
    if not cr or not cx or os.path.basename(cr) != os.path.basename(cx):
        res["error"] = "checkpoints differ or are missing: %s, %s" % (cr, cx)
        return res
    worst = {}
    bitwise = True
    with h5py.File(cr, "r") as fr, h5py.File(cx, "r") as fx:
        for g in ("model", "optim/m", "optim/v"):
            if g not in fr or g not in fx:
                continue
            w, wn = 0.0, ""
            for n in fr[g]:
                a, b = fr[g][n][()].astype(np.float64), fx[g][n][()].astype(np.float64)
                if a.shape != b.shape:
                    res["error"] = "%s/%s: shape %s against %s" % (g, n, a.shape, b.shape)
                    return res
                bitwise = bitwise and np.array_equal(fr[g][n][()], fx[g][n][()])
                den = np.linalg.norm(a)
                e = np.linalg.norm(a - b) / den if den > 0 else float(np.linalg.norm(b) > 0)
                if not np.isfinite(e):
                    e = float("inf")
                if e >= w:
                    w, wn = e, n
            worst[g] = {"rel": w, "tensor": wn}
    res["ckpt"] = os.path.basename(cx)
    res["tensors"] = worst
    res["weights_rel"] = worst.get("model", {}).get("rel", float("inf"))
    res["bitwise"] = bool(res["losses_bitwise"] and bitwise)
    return res


def part(name, status, what, **kw):
    d = {"part": name, "status": status, "what": what}
    d.update(kw)
    return d


# ---- the parts ----

def cmd_env(out, d, dry):
    dry = dry == "1"
    smi = read(os.path.join(d, "nvidia-smi.txt")).strip()
    gpu = {}
    if smi and "," in smi and "fail" not in smi.lower() and "not found" not in smi.lower():
        f = [x.strip() for x in smi.splitlines()[0].split(",")]
        keys = ["name", "driver", "memory", "power_limit", "max_sm_clock", "pci_bus"]
        gpu = dict(zip(keys, f))
    m = re.search(r"CUDA Version: *([0-9.]+)", read(os.path.join(d, "nvidia-smi-full.txt")))
    if m:
        gpu["driver_cuda"] = m.group(1)
    nvcc = re.search(r"release ([0-9.]+), V([0-9.]+)", read(os.path.join(d, "nvcc.txt")))
    libs = {}
    for line in read(os.path.join(d, "cuda-libs.txt")).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            libs[k] = v
    missing = [k for k, v in libs.items() if v == "missing"]
    kc = read(os.path.join(d, "kit_check.txt"))
    kit_ok = "rc=0" in kc
    tls = read(os.path.join(d, "ucx_tls.txt")).strip() or "none"
    res = part("env", "pass", "the device, its driver and libraries; the kit's libraries; MPI with 2 ranks",
               gpu=gpu, nvcc=nvcc.group(1) if nvcc else None, cuda_libs=libs,
               torch=read(os.path.join(d, "torch.txt")).strip(), host=read(os.path.join(d, "host.txt")).strip().splitlines(),
               kit_check=kc.strip().splitlines()[-4:], mpi_2_ranks_ucx_tls=tls)
    why = []
    if not kit_ok:
        why.append("a library of the kit does not resolve (kit_check)")
    if tls == "none":
        why.append("2 MPI ranks did not run with any UCX transport choice")
    if not dry:
        if not gpu:
            why.append("nvidia-smi named no GPU")
        if missing:
            why.append("CUDA libraries not found: " + ", ".join(missing))
    if why:
        res["status"] = "fail"
        res["why"] = why
    return res


def cmd_selftest(out, d, dry):
    log = read(os.path.join(d, "selftest.log"))
    rc = int((read(os.path.join(d, "rc")) or "-1").strip() or -1)
    lines = [l for l in log.splitlines() if re.match(r"^(ok|FAIL) ", l)]
    fails = [l for l in lines if l.startswith("FAIL")]
    kernels = {}
    for l in lines:
        m = re.match(r"^(ok|FAIL) +(\S+)(.*)$", l)
        if m:
            kernels[m.group(2)] = (m.group(1) + m.group(3)).strip()
    versions = {}
    m = re.search(r"^mindpipe: versions: (.*)$", log, re.M)
    if m:
        versions = dict(kv.split(" ", 1) for kv in re.findall(r"(\S+ \S+)", m.group(1)))
    dev = re.search(r"^mindpipe: selftest on CUDA device \d+: (.*)$", log, re.M)
    res = part("selftest", "pass", "mindpipe selftest --device cuda: every GPU kernel against its CPU twin",
               rc=rc, device=dev.group(1) if dev else None, versions=versions, kernels=kernels, failed=fails)
    if dry == "1":
        res["what"] += " (dry run: no GPU, so it must stop at once, naming the driver, with exit 1)"
        if not (rc == 1 and ("no usable CUDA device" in log or "no CUDA device" in log)):
            res["status"] = "fail"
            res["why"] = "expected exit 1 and 'no usable CUDA device'; got exit %d: %s" % (rc, log.strip()[-300:])
    elif rc != 0 or fails or not lines:
        res["status"] = "fail"
        res["why"] = "exit %d, %d of %d kernels failed%s" % (rc, len(fails), len(lines), "" if lines else ": " + log.strip()[-300:])
    return res


def cmd_compare(out, label, ref, run, *opts):
    o = _opts(opts, {"--loss-rel": 1e-5, "--weights-rel": 1e-4, "--floor": "", "--what": ""})
    r = compare_runs(ref, run)
    res = part(label, "pass", o["--what"], tolerance={"loss_rel": float(o["--loss-rel"]), "weights_rel": float(o["--weights-rel"])},
               result=r)
    if o["--floor"]:
        f = compare_runs(ref, o["--floor"])
        res["floor"] = {"what": "the same deck on cpu with parallel.tp=2 against one rank: what a reordering of "
                                "float32 sums costs in these steps", "loss_rel": f.get("loss_rel"),
                        "weights_rel": f.get("weights_rel"), "error": f.get("error")}
    if "error" in r:
        res["status"], res["why"] = "fail", r["error"]
    elif r["loss_rel"] > float(o["--loss-rel"]) or r["weights_rel"] > float(o["--weights-rel"]):
        res["status"] = "fail"
        res["why"] = "loss rel %.3g (limit %s), weights rel %.3g (limit %s)" % (
            r["loss_rel"], o["--loss-rel"], r["weights_rel"], o["--weights-rel"])
    return res


def cmd_merge(out, label, *subs):
    """One part's result made of several checks' (the llama part: compare and curve): each sub-result
    kept under its own label; the part passes only when every one passed, and a missing or unreadable
    one fails it."""
    res = part(label, "pass", "; ".join(filter(None, (read_json_what(j) for j in subs))), checks={})
    why = []
    if not subs:
        why.append("no checks to merge")
    for j in subs:
        name = os.path.splitext(os.path.basename(j))[0]
        try:
            d = load(j)
        except (OSError, ValueError) as ex:
            d = part(name, "error", "", why="no result (%s)" % ex)
        res["checks"][name] = d
        if d.get("status") != "pass":
            w = d.get("why")
            why.append("%s: %s%s" % (name, d.get("status"), (", " + ("; ".join(w) if isinstance(w, list) else str(w))) if w else ""))
    if why:
        res.update(status="fail", why=why)
    return res


def read_json_what(path):
    try:
        return load(path).get("what", "")
    except (OSError, ValueError, AttributeError):
        return ""


def _opts(opts, defaults):
    o = dict(defaults)
    i = 0
    while i < len(opts):
        o[opts[i]] = opts[i + 1]
        i += 2
    return o


def _losses(d):
    m = metrics(d)
    return [m[s]["loss"] for s in sorted(m)]


def cmd_curve(out, s11, s12, f32, low, prec):
    a, b, x, y = _losses(s11), _losses(s12), _losses(f32), _losses(low)
    n = min(len(a), len(b), len(x), len(y))
    res = part("bf16", "pass", "train.precision=%s against fp32 on the same device and seed, over %d steps, against "
               "the noise of two fp32 seeds (11 and 12, carried cpu runs)" % (prec, n), steps=n)
    if n < 10:
        res.update(status="fail", why="too few logged steps: %d (%s)" % (n, " / ".join(run_tail(low, 2))))
        return res

    def mad(u, v):
        return sum(abs(p - q) for p, q in zip(u[:n], v[:n])) / n

    def tail(u):
        k = max(1, n // 6)
        return sum(u[n - k:n]) / k

    res.update(seed_noise=mad(a, b), low_vs_fp32=mad(y, x), fp32_dev_vs_cpu=mad(x, a),
               final={"fp32_s11_cpu": tail(a), "fp32_s12_cpu": tail(b), "fp32_dev": tail(x), prec + "_dev": tail(y)},
               measure="mean over steps of |loss difference|; final: mean of the last sixth of the steps")
    unfinished = [os.path.basename(d) + ": " + run_done(d) for d in (f32, low) if run_done(d)]
    if unfinished:
        res.update(status="fail", why="; ".join(unfinished))
    elif not all(math.isfinite(v) for u in (a, b, x, y) for v in u):
        res.update(status="fail", why="a non-finite loss")
    elif len(y) != len(x):
        res.update(status="fail", why="%s logged %d steps, fp32 %d" % (prec, len(y), len(x)))
    elif res["low_vs_fp32"] > res["seed_noise"]:
        res.update(status="fail", why="%s departs from fp32 by %.4g per step, more than two seeds do (%.4g)" % (
            prec, res["low_vs_fp32"], res["seed_noise"]))
    if prec != "bf16":
        res["note"] = "dry run: emu computes in fp32 only, so fp32 stands for bf16 here"
    return res


def layouts_of(base, cpuref, pairs):
    """Each NAME=DIR run against the one-rank run base, and against how the same layout followed one
    rank on cpu (cpuref's entry NAME): (per-layout results, reasons to fail)."""
    ref = load(cpuref)["layouts"] if cpuref else None
    lay = {}
    why = []
    for p in pairs:
        name, d = p.split("=", 1)
        r = compare_runs(base, d)
        e = {"bitwise": r.get("bitwise", False), "loss_rel": r.get("loss_rel"), "weights_rel": r.get("weights_rel"),
             "error": r.get("error")}
        if ref is not None:
            c = ref.get(name)
            e["on_cpu"] = c
            if c is None:
                why.append("%s: no cpu reference for this layout in the kit" % name)
            elif e["error"]:
                why.append("%s: %s" % (name, e["error"]))
            elif c.get("bitwise") and not e["bitwise"]:
                why.append("%s: bitwise on cpu, not here (loss rel %.3g, weights rel %.3g)" % (name, e["loss_rel"], e["weights_rel"]))
            elif not c.get("bitwise") and (e["loss_rel"] > max(1e-5, 10 * (c.get("loss_rel") or 0))
                                           or e["weights_rel"] > max(1e-4, 10 * (c.get("weights_rel") or 0))):
                why.append("%s: further from one rank than on cpu" % name)
        elif e["error"]:
            why.append("%s: %s" % (name, e["error"]))
        lay[name] = e
    return lay, why


def cmd_layouts(out, base, cpuref, *pairs):
    lay, why = layouts_of(base, cpuref, pairs)
    res = part("ranks2", "fail" if why else "pass",
               "two ranks on one device (pp=2 with p2p=mpi; balance) and offload, each against one rank, as closely "
               "as the same layouts follow one rank on cpu", layouts=lay)
    if why:
        res["why"] = why
    return res


# What the cuda backend prints when a kernel's scratch request exceeds the bound sized before step 0
# (kernels/ctx_cuda.cu): a failure of the gpt2 and ranks_nccl parts.
SCRATCH_SHORT = "cu_scratch_bound is short"

# A rank stopped mid-run ends the others within this many seconds (the deadlines the part sets are
# a few seconds; start-up and the abort's teardown take the rest).
KILL_LIMIT_S = 60


def cmd_nccl(out, base, cpuref, kill_log, kill_result, plant_log, dry, *pairs):
    """ranks_nccl: the NCCL paths of several ranks on one GPU through the stand-in (a dry run: the same
    layouts on emu, whose collectives are host-staged, and the stand-in's core for the planted
    mismatch). Every layout against one rank as closely as on cpu; a stopped rank named by the
    others' abort within KILL_LIMIT_S; the planted mismatch refused naming both sides."""
    lay, why = layouts_of(base, cpuref, pairs)
    for p in pairs:
        if SCRATCH_SHORT in read(p.split("=", 1)[1] + ".log"):
            why.append("%s: the kernels' scratch grew in the first step (%s)" % (p.split("=", 1)[0], SCRATCH_SHORT))
    res = part("ranks_nccl", "pass",
               "several ranks on one device through %s: %s against one rank, as closely as on cpu; a rank stopped "
               "mid-run named by the others within %d s; a planted mismatch refused" % (
                   "emu's host-staged collectives (dry run)" if dry == "1" else "the NCCL stand-in",
                   ", ".join(p.split("=", 1)[0] for p in pairs), KILL_LIMIT_S), layouts=lay)
    # the stopped rank: "RC SECONDS" and the run's log
    try:
        rc, secs = read(kill_result).split()[:2]
        rc, secs = int(rc), float(secs)
    except ValueError:
        rc, secs = None, None
    text = read(kill_log)
    named = re.search(r"no matching call from rank\(s\) 1\b|its peer rank 1\b|peer rank 1 did not", text)
    res["stopped_rank"] = {"exit": rc, "seconds": secs, "named": bool(named),
                           "line": named and text[max(0, text.rfind("\n", 0, named.start()) + 1):][:300]}
    if rc is None:
        why.append("the stopped-rank run left no result")
    elif rc == 0 or rc == 124:
        why.append("the stopped-rank run ended %s" % ("well (exit 0): nothing stopped" if rc == 0 else "at the part's timeout (a hang)"))
    elif secs > KILL_LIMIT_S:
        why.append("the stopped-rank run took %.0f s to end, more than %d s" % (secs, KILL_LIMIT_S))
    elif not named:
        why.append("the stopped-rank run's abort does not name rank 1")
    # the planted mismatch: the stand-in's message naming rank, communicator, call and both sides
    pl = read(plant_log)
    m = re.search(r"^nccl-standin: rank \d+ \(world rank \d+\), communicator [0-9a-f]+ \(\d+ ranks\), call #\d+: "
                  r"(collectives|point-to-point calls) do not match: .*meets rank \d+'s #\d+ nccl\w+\(count=", pl, re.M)
    res["planted"] = {"refused": bool(m), "line": m.group(0)[:300] if m else None}
    if not m:
        why.append("the planted mismatch was not refused naming both sides")
    if why:
        res.update(status="fail", why=why)
    return res


def cmd_crossing(out, dev_run, cpu_ref, d2c, c2d, dev):
    a, b = compare_runs(dev_run, d2c, 20), compare_runs(cpu_ref, c2d, 20)
    res = part("ckpt", "pass", "a checkpoint of step 10 written on %s resumed on cpu to step 20, against the %s run; "
               "one written on cpu resumed on %s, against the cpu run (limits: loss rel 1e-5, weights rel 1e-4)"
               % (dev, dev, dev), dev_to_cpu=a, cpu_to_dev=b)
    why = []
    for k, r in (("dev_to_cpu", a), ("cpu_to_dev", b)):
        if "error" in r:
            why.append("%s: %s" % (k, r["error"]))
        elif r["loss_rel"] > 1e-5 or r["weights_rel"] > 1e-4:
            why.append("%s: loss rel %.3g, weights rel %.3g" % (k, r["loss_rel"], r["weights_rel"]))
    if why:
        res.update(status="fail", why=why)
    return res


def cmd_hf(out, chk_out, dry, llama_out=None):
    """hf_check.py's lines on an export of a GPT-2 run on the device and, with llama_out,
    hf_llama_check.py's on a llama run's: each checker's own forward and, but in a dry run,
    transformers' GPT2LMHeadModel / LlamaForCausalLM.from_pretrained, against MindPipe's logits
    (issues 34 and 48)."""
    res = part("hf", "pass", "export --format hf of runs on the device: HF GPT-2's forward (hf_check.py)%s and %s "
               "against MindPipe's logits (tol 1e-5)" % (
                   ", HF Llama's (hf_llama_check.py)" if llama_out else "",
                   "no transformers (dry run)" if dry == "1" else
                   "GPT2LMHeadModel%s.from_pretrained" % (" and LlamaForCausalLM" if llama_out else "")),
               passed=0, transformers=None)
    why = []
    tf = []
    for name, f in (("gpt2", chk_out), ("llama", llama_out)):
        if f is None:
            continue
        lines = read(f).splitlines()
        passed = [x[5:] for x in lines if x.startswith("PASS ")]
        failed = [x[5:] for x in lines if x.startswith("FAIL ")]
        hf = [x for x in passed if x.startswith("transformers:")]
        res["passed"] += len(passed)
        tf += hf
        why += ["%s: %s" % (name, x) for x in failed[:3]]
        if len(passed) < 2:
            why.append("%s: %d checks passed in %s (the export or the check did not run)" % (name, len(passed), f))
        if dry != "1" and not hf:
            why.append("%s: transformers' from_pretrained was not checked" % name)
    res["transformers"] = "; ".join(tf) if tf else None
    if why:
        res.update(status="fail", why=why)
    return res


# Dense bf16 peaks (TFLOP/s) by the vendor's datasheets, for MFU.
PEAKS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("GH200", 989.4), ("H200", 989.4), ("H100", 989.4),
         ("A100", 312.0), ("L40S", 362.0)]


def chip_peak(smi):
    name = smi.split(",")[0] if smi else ""
    for k, v in PEAKS:
        if k in name:
            return v, name
    return 0.0, name


def cmd_peak(smi, dry):
    if dry == "1":
        print(0)
        return None
    p, _ = chip_peak(read(smi).strip())
    print(int(round(p * 1000)))
    return None


def _throughput(run, first):
    """Median tokens/s and MFU of a run's steps from `first` on, and its first and last loss."""
    m = metrics(run)
    steps = [s for s in sorted(m) if s >= first]
    if not steps:
        return None
    med = lambda v: v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
    tps = sorted(m[s]["tokens_per_s"] for s in steps)
    return {"steps_timed": len(steps), "tokens_per_s": med(tps), "tokens_per_s_range": [tps[0], tps[-1]],
            "mfu": med(sorted(m[s]["mfu"] for s in steps)), "loss_first": m[min(m)]["loss"],
            "loss_last": m[max(m)]["loss"], "finite": all(math.isfinite(m[s]["loss"]) for s in m)}


def cmd_gpt2(out, run, nvml, peak, dry, *alts):
    peak = float(peak)
    m = metrics(run)
    res = part("gpt2", "pass", "GPT-2 124M (L12 C768 H12 T1024 V50304), bf16, 16 sequences a step, one GPU" if dry != "1"
               else "dry run: GPT-2's vocabulary with L2 C64 T64, fp32 on emu", peak_gflops=peak)
    kt = sorted(glob.glob(os.path.join(run, "kernel_times.r*.json")))
    k = load(kt[0]) if kt else None
    first = k["from_step"] if k else 2
    t = _throughput(run, first)
    if t is None:
        res.update(status="fail", why="no step logged from %d on: %s" % (first, " / ".join(run_tail(run, 4))))
        return res
    res.update(steps_timed=t["steps_timed"], from_step=first, tokens_per_s=t["tokens_per_s"], mfu=t["mfu"],
               tokens_per_s_range=t["tokens_per_s_range"], loss_first=t["loss_first"], loss_last=t["loss_last"],
               peak_mem_bytes=m[max(m)].get("peak_mem_bytes"))
    if k:
        wall = k.get("wall_s") or 0
        res["kernels"] = {"timer": k.get("timer"), "steps": k.get("steps"), "wall_s": wall, "total_s": k.get("total_s"),
                          "top": [dict(x, share=(x["seconds"] / wall if wall else None)) for x in k["kernels"][:10]]}
    else:
        res["kernels"] = None
        res.setdefault("notes", []).append("no kernel_times file")
    res["energy"] = _energy(run, nvml)
    why = []
    if SCRATCH_SHORT in read(run + ".log"):
        why.append("the kernels' scratch grew in the first step (%s): no device allocation may follow the plan"
                   % SCRATCH_SHORT)
    if not all(math.isfinite(m[s]["loss"]) for s in m):
        why.append("a non-finite loss")
    # GPT-2 124M on the bundled text falls from about 10.9 to 2.5 in 30 steps (the H200 runs of
    # 2026-11-27): a kernel that trains wrongly (the fused attention's first run) shows here first
    elif dry != "1" and max(m) >= 20 and m[max(m)]["loss"] > 0.5 * m[min(m)]["loss"]:
        why.append("the loss fell only from %.3f to %.3f in %d steps (at least half expected)"
                   % (m[min(m)]["loss"], m[max(m)]["loss"], max(m)))
    if not k:
        why.append("the run wrote no kernel times")
    if res["energy"].get("run") is None:
        why.append("the run wrote no energy.json")
    if dry != "1" and not res["energy"].get("nvml_sampled"):
        why.append("no NVML samples")
    e = res["energy"]
    if e.get("run_gpu_j_per_token") and (e.get("nvml_sampled") or {}).get("j_per_token_counter"):
        off = e["run_gpu_j_per_token"] / e["nvml_sampled"]["j_per_token_counter"] - 1
        e["run_over_sampled"] = off
        if abs(off) > ENERGY_AGREE:
            why.append("the run's GPU energy is %+.1f%% off NVML's own samples over its window" % (100 * off))
    # the same run under environment switches of kernels/ctx_cuda.cu: pairs (run directory, VAR=VALUE);
    # a directory without its switch is the default variant's (MP_BF16_GEMM=cublas)
    pairs = [(alts[i], alts[i + 1] if i + 1 < len(alts) else "MP_BF16_GEMM=cublas") for i in range(0, len(alts), 2)]
    variants = []
    for alt, alt_env in pairs:
        a = _throughput(alt, first)
        if a is not None:
            a["env"] = alt_env
        variants.append(a)
        if a is None:
            why.append("the %s run logged no step from %d on: %s" % (alt_env, first, " / ".join(run_tail(alt, 4))))
        elif not a["finite"]:
            why.append("the %s run had a non-finite loss" % alt_env)
    if pairs:
        res["variant"] = variants[0]
        res["variants"] = variants
    if why:
        res.update(status="fail", why=why)
    return res


def _energy(run, nvml):
    e = {}
    en = os.path.join(run, "energy.json")
    e["run"] = load(en) if os.path.exists(en) else None
    try:
        s = load(nvml)
    except (OSError, ValueError):
        s = {"status": "missing"}
    e["sampler_status"] = s.get("status")
    if s.get("status") != "ok" or not e["run"]:
        e["sampler_why"] = s.get("why")
        return e
    r = e["run"]
    t0, t1 = r.get("t_start_unix"), r.get("t_end_unix")
    smp = s["samples"]  # [unix time, watts, total energy mJ]
    if t0 is None or t1 is None:
        # the run gave no window: the samples of its last `seconds` before the sampler stopped
        t1 = s.get("stopped_unix", smp[-1][0])
        t0 = t1 - r["seconds"]
        e["window"] = "the run's seconds before the sampler stopped (the run reports no window)"
    win = [x for x in smp if t0 <= x[0] <= t1]
    if len(win) < 2:
        e["nvml_sampled"] = None
        return e
    counter_j = (win[-1][2] - win[0][2]) / 1000.0
    power_j = sum(0.5 * (p[1] + q[1]) * (q[0] - p[0]) for p, q in zip(win, win[1:]))
    span = win[-1][0] - win[0][0]
    tokens = r.get("tokens") or 0
    e["nvml_sampled"] = {"samples": len(win), "span_s": span, "mean_w": power_j / span if span > 0 else None,
                         "counter_j": counter_j, "power_integral_j": power_j,
                         "j_per_token_counter": counter_j / tokens * (r["seconds"] / span) if tokens and span else None}
    if r.get("gpu_j") and r.get("seconds"):
        e["run_gpu_mean_w"] = r["gpu_j"] / r["seconds"]
        e["run_gpu_j_per_token"] = r["gpu_j"] / tokens if tokens else None
    return e


def cmd_torch(out, name, js, dry):
    try:
        r = load(js)
    except (OSError, ValueError) as ex:
        return part(name, "fail", "the PyTorch peer", why="no result: %s" % ex)
    what = "PyTorch %s: the same GPT-2 with scaled_dot_product_attention, %s, fused AdamW" % (
        "torch.compile" if name == "compile" else "eager",
        "bf16 autocast" if r.get("dtype", "bf16") == "bf16" else r.get("dtype"))
    st = r.get("status")
    res = part(name, "pass" if st == "ok" else "fail", what, result=r)
    if st == "unavailable" and dry == "1":
        res.update(status="skipped", why=r.get("reason"))
    elif st != "ok":
        res["why"] = r.get("reason") or r.get("error") or "status %s" % st
    return res


def cmd_finish(out, name, rc, t0, t1, limit, gpu_limit=None):
    # limit: the one the part ran under; gpu_limit: the GPU-sized one it stands for (a dry run
    # scales the limits up, as hang guards only), which the sum check reads.
    rc = int(rc)
    try:
        d = load(out)
    except (OSError, ValueError):
        d = part(name, "error", "", why="the part wrote no result (exit %d)" % rc)
    if rc in (124, 137):
        d["status"] = "timeout"
        d["why"] = "stopped at its limit of %s s" % limit
    elif rc != 0 and d.get("status") == "pass":
        d["status"] = "error"
        d["why"] = "the part exited %d" % rc
    d["seconds"] = round(float(t1) - float(t0), 2)
    d["timeout_s"] = int(limit)
    d["gpu_timeout_s"] = int(gpu_limit if gpu_limit is not None else limit)
    d["rc"] = rc
    save(out, d)
    print("bringup: part %s: %s in %.1f s%s" % (name, d["status"], d["seconds"], (": %s" % d["why"]) if d.get("why") else ""))
    return 0


def cmd_report(out, summary, parts, dry, t0, kit, *names):
    ps = []
    for n in names:
        try:
            ps.append(load(os.path.join(parts, n + ".json")))
        except (OSError, ValueError):
            ps.append(part(n, "error", "", why="no result"))
    by = {p["part"]: p for p in ps}
    rep = {"mode": "dry-run" if dry == "1" else "gpu", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "kit": kit, "kit_bytes": os.path.getsize(kit) if os.path.exists(kit) else None,
           "seconds": round(time.time() - float(t0), 1), "timeouts_sum_s": sum(p.get("gpu_timeout_s", p.get("timeout_s", 0)) for p in ps),
           "device": by.get("env", {}).get("gpu"), "parts": ps}
    g, te, tc = by.get("gpt2", {}), by.get("torch", {}), by.get("compile", {})
    mp_tps = g.get("tokens_per_s")
    cmpr = {"mindpipe_tokens_per_s": mp_tps, "mindpipe_mfu": g.get("mfu"),
            "llm_c_tokens_per_s_per_h100": 470000,
            "llm_c_derivation": "8xH100 record: 524,288 tokens a step in 139 ms, per GPU"}
    for key, p in (("torch_eager", te), ("torch_compile", tc)):
        r = p.get("result", {})
        cmpr[key + "_tokens_per_s"] = r.get("tokens_per_s")
        if mp_tps and r.get("tokens_per_s"):
            cmpr["mindpipe_over_" + key] = mp_tps / r["tokens_per_s"]
    rep["throughput"] = cmpr
    bad = [p for p in ps if p["status"] not in ("pass", "skipped") or (p["status"] == "skipped" and dry != "1")]
    if rep["timeouts_sum_s"] > TIMEOUTS_MAX_S:
        bad.append(part("timeouts", "fail", "", why="the parts' timeouts sum to %d s, more than %d s" % (
            rep["timeouts_sum_s"], TIMEOUTS_MAX_S)))
    rep["passed"] = not bad
    save(out, rep)
    lines = ["bringup %s: %d parts, %d passed, %d skipped, %d not passed; %.0f s (timeouts sum to %d s)" % (
        rep["mode"], len(ps), sum(p["status"] == "pass" for p in ps), sum(p["status"] == "skipped" for p in ps),
        len(bad), rep["seconds"], rep["timeouts_sum_s"])]
    for p in ps:
        lines.append("  %-9s %-8s %6.1f s / %3d s  %s" % (p["part"], p["status"], p.get("seconds", 0), p.get("timeout_s", 0),
                                                        _brief(p)))
    with open(summary, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0 if not bad else 1


def _brief(p):
    n, s = p["part"], p
    if s.get("why"):
        w = s["why"]
        return ("; ".join(w) if isinstance(w, list) else str(w))[:160]
    try:
        if n == "env":
            g = s.get("gpu") or {}
            return "%s, driver %s (CUDA %s), nvcc %s, MPI UCX_TLS=%s" % (g.get("name", "no GPU"), g.get("driver", "-"),
                                                                      g.get("driver_cuda", "-"), s.get("nvcc"),
                                                                      s.get("mpi_2_ranks_ucx_tls"))
        if n == "selftest":
            if not s.get("kernels"):
                return "no GPU (as expected)"
            v = s.get("versions", {})
            return "%d kernels ok; CUDA runtime %s, cuBLAS %s, NCCL %s" % (len(s["kernels"]), v.get("cuda_runtime"),
                                                                       v.get("cublas"), v.get("nccl"))
        if n in ("fp32",):
            r = s["result"]
            return "loss rel %.2g, weights rel %.2g (floor %.2g / %.2g)" % (r["loss_rel"], r["weights_rel"],
                                                                          s["floor"]["loss_rel"] or 0, s["floor"]["weights_rel"] or 0)
        if n == "bf16":
            return "|low - fp32| %.4f per step, seed noise %.4f" % (s["low_vs_fp32"], s["seed_noise"])
        if n == "llama":
            f, c = s["checks"]["llama-fp32"], s["checks"]["llama-curve"]
            return "fp32 loss rel %.2g, weights rel %.2g; |low - fp32| %.4f per step, seed noise %.4f" % (
                f["result"]["loss_rel"], f["result"]["weights_rel"], c["low_vs_fp32"], c["seed_noise"])
        if n == "ranks_nccl":
            return ", ".join("%s %s" % (k, "bitwise" if v["bitwise"] else "rel %.2g" % (v["weights_rel"] or 0))
                             for k, v in s["layouts"].items()) + "; stopped rank named in %.0f s; planted mismatch refused" % (
                                 s["stopped_rank"]["seconds"] or 0)
        if n == "ranks2":
            return ", ".join("%s %s" % (k, "bitwise" if v["bitwise"] else "rel %.2g" % (v["weights_rel"] or 0))
                             for k, v in s["layouts"].items())
        if n == "ckpt":
            return "dev->cpu loss rel %.2g, cpu->dev loss rel %.2g" % (s["dev_to_cpu"]["loss_rel"], s["cpu_to_dev"]["loss_rel"])
        if n == "gpt2":
            en = s.get("energy", {})
            e = en.get("run") or {}
            smp = (en.get("nvml_sampled") or {}).get("j_per_token_counter")
            vs = [a for a in (s.get("variants") or ([s["variant"]] if s.get("variant") else [])) if a]
            return "%.0f tok/s, MFU %.1f%%, %s J/token (GPU %s, NVML sampled %s)%s" % (
                s["tokens_per_s"], 100 * s["mfu"], "%.3g" % e["j_per_token"] if e.get("j_per_token") else "-",
                "%.3g" % en["run_gpu_j_per_token"] if en.get("run_gpu_j_per_token") else "-",
                "%.3g" % smp if smp else "-", "".join("; %s: %.0f tok/s" % (a["env"], a["tokens_per_s"]) for a in vs))
        if n == "hf":
            return s.get("transformers") or "%d checks passed" % s.get("passed", 0)
        if n in ("torch", "compile"):
            r = s["result"]
            sh = r.get("shapes") or {}
            fl = ""
            if sh:
                fl = "; floors a step: cuBLAS products %.1f ms" % sh["products_ms_per_step"]
                if "sdpa_fwd_ms_per_step" in sh:
                    fl += ", SDPA %.1f + %.1f ms" % (sh["sdpa_fwd_ms_per_step"], sh["sdpa_bwd_ms_per_step"])
            return "%.0f tok/s, MFU %.1f%%%s" % (r.get("tokens_per_s", 0), 100 * (r.get("mfu") or 0), fl)
    except (KeyError, TypeError):
        pass
    return ""


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "peak":
        cmd_peak(*args)
        return 0
    if cmd in ("finish", "report"):
        return globals()["cmd_" + cmd](*args)
    fn = globals().get("cmd_" + cmd)
    if not fn:
        print("bringup_check: unknown command %s" % cmd, file=sys.stderr)
        return 2
    out = args[0]
    try:
        res = fn(*args)
    except Exception as ex:  # a checker that crashes is a failed part, never a silent pass
        res = part(cmd, "fail", "", why="checker error: %s: %s" % (type(ex).__name__, ex))
    if cmd == "layouts" and not args[2]:
        res = {"layouts": res.get("layouts", {}), "status": res["status"], "why": res.get("why")}
    save(out, res)
    return 0 if res["status"] in ("pass", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
