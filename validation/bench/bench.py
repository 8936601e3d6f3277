#!/usr/bin/env python3
"""Single-rank CPU benchmark: MindPipe against a tuned PyTorch peer on the same GPT shapes, in one
invocation, runs alternating, several timed steps after a warm-up.

  /usr/bin/python3 validation/bench/bench.py [--mindpipe src/mindpipe] [--data data/kjv.h5]
                                             [--arch gpt2|llama] [--shapes tiny,small,124m] [--runs 3]
                                             [--threads 2] [--isa native|avx2]

--shapes defaults to every shape of --arch's table: gpt2 tiny,small,124m (SHAPES); llama
llama-tiny,llama-small,llama-124m (LLAMA_SHAPES).

--arch llama benchmarks the llama family (model.arch = llama: RMSNorm, rotary positions, grouped-query
attention, SwiGLU, no biases, tied head) on its own shapes (the gpt2 shapes' L, C, heads, T, B and V,
with kv_heads and ffn_dim ~ 8C/3) against torch_llama.py, the same model in PyTorch; gpt2 (the
default) against torch_gpt.py.

--isa avx2 makes both peers' libraries run their AVX2 code on an AVX-512 machine
(OPENBLAS_CORETYPE=Haswell, ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2); MindPipe's own loops
follow its build (configure --disable-native CFLAGS="-O2 -march=x86-64-v3" for AVX2). The output
says what each ran: the BLAS core OpenBLAS chose, PyTorch's CPU capability, and whether the MindPipe
binary holds AVX-512 instructions.

Reported per shape: tokens/s (median over runs, and min-max), MFU = tokens/s x FLOPs per token /
peak, with FLOPs per token = 6*N_matmul + 12*L*C*T, N_matmul = 12*L*C^2 + V*C (llama:
N_matmul = L*(C*(C + 2*KA) + C*C + 3*C*F) + V*C, KA = kv_heads*C/heads: the count of MindPipe's
model_flops_per_token, which the llama output prints per shape beside MindPipe's own), and peak = the best
cblas_sgemm rate measured by `mindpipe peak` in this invocation (before and after the runs); the
ratio MindPipe / PyTorch; and MindPipe's kernel profile (its executor's own timers, profile.json).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

SHAPES = {  # name: (L, C, NH, T, B, V, timed steps)
    "tiny": (4, 256, 4, 128, 8, 256, 10),
    "small": (6, 384, 6, 256, 4, 256, 6),
    "124m": (12, 768, 12, 256, 4, 50304, 3),
}
LLAMA_SHAPES = {  # name: (L, C, NH, KVH, F, T, B, V, timed steps); F = 8C/3 rounded up to 16
    "llama-tiny": (4, 256, 4, 2, 688, 128, 8, 256, 10),
    "llama-small": (6, 384, 6, 2, 1024, 256, 4, 256, 6),
    "llama-124m": (12, 768, 12, 4, 2048, 256, 4, 50304, 3),
}
LLAMA_ROPE_THETA, LLAMA_NORM_EPS = 10000.0, 1e-5  # both engines get these (MindPipe's defaults)
HERE = os.path.dirname(os.path.abspath(__file__))


def machine():
    """The CPU model, its count and the SIMD extensions that matter to the kernels (figures differ
    between AVX-512 and AVX2 machines: every figure carries this line)."""
    model, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo"):
            k, _, v = line.partition(":")
            if k.strip() == "model name" and model == "unknown CPU":
                model = v.strip()
            elif k.strip() == "flags" and not flags:
                flags = set(v.split())
    except OSError:
        pass
    simd = [f for f in ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx2", "fma", "f16c") if f in flags]
    return f"{model}, {os.cpu_count()} CPUs; SIMD: {' '.join(simd) or 'none of avx2/avx512'}"


def code_paths(mindpipe, python):
    """What code ran: OpenBLAS's chosen core (its kernels' instruction set), PyTorch's CPU capability,
    and whether the MindPipe binary contains AVX-512 (zmm) instructions. On Zen 4 OpenBLAS 0.3.21
    picks its Haswell (AVX2) kernels by itself, so only MindPipe's own loops differ there between a
    native and an x86-64-v3 build."""
    out = []
    try:
        r = subprocess.run([mindpipe, "peak"], env=dict(os.environ, OPENBLAS_VERBOSE="2"), capture_output=True,
                           text=True, timeout=120)
        core = [ln.split(":", 1)[1].strip() for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("Core:")]
        out.append(f"OpenBLAS core {core[0] if core else 'not reported'}")
    except (OSError, subprocess.SubprocessError):
        out.append("OpenBLAS core unknown")
    try:
        r = subprocess.run([python, "-c", "import torch; print(torch.__config__.show())"], capture_output=True,
                           text=True, timeout=120)
        cap = [ln.split(":", 1)[1].strip() for ln in r.stdout.splitlines() if "CPU capability usage" in ln]
        out.append(f"PyTorch CPU capability {cap[0] if cap else 'not reported'}")
    except (OSError, subprocess.SubprocessError):
        out.append("PyTorch CPU capability unknown")
    try:
        r = subprocess.run(["objdump", "-d", "--no-show-raw-insn", mindpipe], capture_output=True, text=True,
                           timeout=120)
        n = r.stdout.count("%zmm")
        out.append(f"MindPipe binary: {'AVX-512 (%d zmm operands)' % n if n else 'no AVX-512 instructions'}")
    except (OSError, subprocess.SubprocessError):
        out.append("MindPipe binary: not inspected (no objdump)")
    return "; ".join(out)


def bench_args(doc, runs=True, isa=False):
    """The argument parser every bench script starts from: the binary, the data file, the runs per
    point and, where the script times kernels, --isa (each script adds its own options)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mindpipe", default="src/mindpipe")
    ap.add_argument("--data", default="data/kjv.h5")
    if runs:
        ap.add_argument("--runs", type=int, default=3)
    if isa:
        ap.add_argument("--isa", choices=("native", "avx2"), default="native")
    return ap


def apply_isa(a):
    """--isa avx2: every child (both peers, mindpipe peak) inherits these, so OpenBLAS and PyTorch run
    their AVX2 code on an AVX-512 machine (MindPipe's own kernels follow its build)."""
    if a.isa == "avx2":
        os.environ.update(OPENBLAS_CORETYPE="Haswell", ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2",
                          DNNL_MAX_CPU_ISA="AVX2")


def flops_per_token(L, C, T, V):
    return 6 * (12 * L * C * C + V * C) + 12 * L * C * T


def llama_flops_per_token(L, C, NH, KVH, F, T, V):
    """(6*N_matmul, 12*L*C*T): MindPipe's model_flops_per_token for llama's block kind (model.c,
    block_kind.c): q|k|v (C + 2*KA rows), o, gate|up (2*F rows) and down per layer, the tied head."""
    KA = KVH * (C // NH)
    return 6 * (L * (C * (C + 2 * KA) + C * C + 3 * C * F) + V * C), 12 * L * C * T


def mindpipe_flops_per_token(out):
    """MindPipe's own count, from its first metrics line: mfu x peak / tokens_per_s, the run's peak
    being 1 GFLOP/s (train.peak_gflops = 1); tokens_per_s has one decimal, so this is within 1e-3."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        m = json.loads(f.readline())
    return m["mfu"] * 1e9 / m["tokens_per_s"]


def env(threads):
    e = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    return e


def run_mindpipe(a, shape, tmp):
    if a.arch == "llama":
        L, C, NH, KVH, F, T, B, V, steps = LLAMA_SHAPES[shape]
    else:
        L, C, NH, T, B, V, steps = SHAPES[shape]
    out = os.path.join(tmp, "mp")
    shutil.rmtree(out, ignore_errors=True)
    sets = {"model.layers": L, "model.dim": C, "model.heads": NH, "model.seq_len": T, "model.vocab": V,
            "model.mlp_ratio": 4, "train.batch": B, "train.micro_batch": B, "train.steps": steps + 1,
            "train.warmup": 1, "train.eval_every": 0, "train.log_every": 1000000, "train.threads": a.threads,
            "train.peak_gflops": 1, "checkpoint.final": 0, "data.path": a.data, "train.lr": 1e-4,
            "train.min_lr": 1e-5}
    if a.arch == "llama":  # model.mlp_ratio = 1: llama's MLP width is model.ffn_dim
        sets.update({"model.arch": "llama", "model.mlp_ratio": 1, "model.kv_heads": KVH, "model.ffn_dim": F,
                     "model.rope_theta": LLAMA_ROPE_THETA, "model.norm_eps": LLAMA_NORM_EPS,
                     "model.tie_embeddings": 1})
    cmd = [a.mindpipe, "train", "--quiet", "--out", out]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, env=env(a.threads), stdout=subprocess.DEVNULL)
    prof = json.load(open(os.path.join(out, "profile.json")))
    if a.arch == "llama":
        prof["flops_per_token"] = mindpipe_flops_per_token(out)
    return B * T / prof["step_seconds"], prof


def run_torch_llama(a, shape):
    """torch_llama.py's tokens/s and the attention it ran (sdpa-gqa, sdpa-repeat or grouped)."""
    L, C, NH, KVH, F, T, B, V, steps = LLAMA_SHAPES[shape]
    cmd = [a.python, os.path.join(HERE, "torch_llama.py")]
    for k, v in (("layers", L), ("dim", C), ("heads", NH), ("kv_heads", KVH), ("ffn_dim", F), ("seq_len", T),
                 ("vocab", V), ("batch", B), ("steps", steps), ("warmup", 1), ("threads", a.threads),
                 ("rope_theta", LLAMA_ROPE_THETA), ("norm_eps", LLAMA_NORM_EPS)):
        cmd += ["--" + k, str(v)]
    r = json.loads(subprocess.run(cmd, check=True, env=env(a.threads), capture_output=True, text=True).stdout)
    a.torch_attention = r["attention"]
    return B * T / statistics.mean(r["step_seconds"])


def run_torch(a, shape):
    if a.arch == "llama":
        return run_torch_llama(a, shape)
    L, C, NH, T, B, V, steps = SHAPES[shape]
    cmd = [a.python, os.path.join(HERE, "torch_gpt.py"), "--layers", str(L), "--dim", str(C), "--heads", str(NH),
           "--seq_len", str(T), "--vocab", str(V), "--batch", str(B), "--steps", str(steps), "--warmup", "1",
           "--threads", str(a.threads)]
    r = json.loads(subprocess.run(cmd, check=True, env=env(a.threads), capture_output=True, text=True).stdout)
    return B * T / statistics.mean(r["step_seconds"])


def peak(a):
    r = subprocess.run([a.mindpipe, "peak", "--threads", str(a.threads)], check=True, env=env(a.threads),
                       capture_output=True, text=True)
    return float(r.stdout.split()[-1])


PROFILE_CATS = ["matmul", "attention", "layernorm_gelu_embedding", "cross_entropy", "optimizer", "framework_overhead"]


def print_profile(shapes, res, labels):
    """MindPipe's kernel profile (profile.json, PROFILE_CATS), each column headed by labels."""
    print("\nMindPipe profile (ms per step, share), last run of each shape:\n")
    print("| shape | step ms | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for s in shapes:
        p = res[s]["prof"]
        tot = p["step_seconds"]
        print(f"| {s} | {1e3 * tot:.1f} | " + " | ".join(f"{1e3 * p[c]:.1f} ({100 * p[c] / tot:.0f}%)"
                                                         for c in PROFILE_CATS) + " |")


def report_gpt2(shapes, res, pk):
    print("| shape | MindPipe tok/s (median, min-max) | MFU | PyTorch tok/s (median, min-max) | MFU | ratio |")
    print("|---|---|---|---|---|---|")
    for s in shapes:
        L, C, NH, T, B, V, _ = SHAPES[s]
        f = flops_per_token(L, C, T, V)
        mp, pt = statistics.median(res[s]["mp"]), statistics.median(res[s]["pt"])
        print(f"| {s} (L{L} C{C} T{T} B{B} V{V}) | {mp:.0f} ({min(res[s]['mp']):.0f}-{max(res[s]['mp']):.0f}) | "
              f"{100 * mp * f / (pk * 1e9):.0f}% | {pt:.0f} ({min(res[s]['pt']):.0f}-{max(res[s]['pt']):.0f}) | "
              f"{100 * pt * f / (pk * 1e9):.0f}% | {mp / pt:.2f}x |")
    print_profile(shapes, res, PROFILE_CATS)


def report_llama(a, shapes, res, pk):
    """gpt2's table for LLAMA_SHAPES, after the FLOPs per token of each shape (ours and MindPipe's)."""
    print(f"PyTorch peer: torch_llama.py, attention {a.torch_attention} "
          f"(rope_theta {LLAMA_ROPE_THETA:g}, norm_eps {LLAMA_NORM_EPS:g}, tied head)\n")
    fpt = {}
    for s in shapes:
        L, C, NH, KVH, F, T, B, V, _ = LLAMA_SHAPES[s]
        mm, att = llama_flops_per_token(L, C, NH, KVH, F, T, V)
        fpt[s], theirs = mm + att, res[s]["prof"]["flops_per_token"]
        agree = "agrees" if abs(theirs / fpt[s] - 1) < 1e-3 else "DIFFERS"
        print(f"FLOPs per token {s}: {fpt[s]} = 6*N_matmul {mm} + 12*L*C*T {att} "
              f"(MindPipe's model_flops_per_token from its metrics: {theirs:.6g}, {agree})")
    print("\n| shape | MindPipe tok/s (median, min-max) | MFU | PyTorch tok/s (median, min-max) | MFU | ratio |")
    print("|---|---|---|---|---|---|")
    for s in shapes:
        L, C, NH, KVH, F, T, B, V, _ = LLAMA_SHAPES[s]
        mp, pt = statistics.median(res[s]["mp"]), statistics.median(res[s]["pt"])
        print(f"| {s} (L{L} C{C} H{NH} KV{KVH} F{F} T{T} B{B} V{V}) | {mp:.0f} "
              f"({min(res[s]['mp']):.0f}-{max(res[s]['mp']):.0f}) | {100 * mp * fpt[s] / (pk * 1e9):.0f}% | "
              f"{pt:.0f} ({min(res[s]['pt']):.0f}-{max(res[s]['pt']):.0f}) | {100 * pt * fpt[s] / (pk * 1e9):.0f}% | "
              f"{mp / pt:.2f}x |")
    # llama's element-wise timer holds RMSNorm, SwiGLU, the rotary embeddings and the embedding
    print_profile(shapes, res, [c if c != "layernorm_gelu_embedding" else "rmsnorm_swiglu_rope_embedding"
                                for c in PROFILE_CATS])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mindpipe", default="src/mindpipe")
    ap.add_argument("--data", default="data/kjv.h5")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--shapes", default=None, help="default: every shape of --arch's table")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isa", choices=("native", "avx2"), default="native")
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    table = LLAMA_SHAPES if a.arch == "llama" else SHAPES
    shapes = a.shapes.split(",") if a.shapes else list(table)
    for s in shapes:
        if s not in table:
            ap.error(f"--shapes: {s} is no {a.arch} shape (those: {', '.join(table)})")
    apply_isa(a)
    pk = peak(a)
    res = {s: {"mp": [], "pt": [], "prof": None} for s in shapes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.runs):
            for s in shapes:  # alternate the engines so a slow spell of the host hits both
                order = ("mp", "pt") if r % 2 == 0 else ("pt", "mp")
                for eng in order:
                    if eng == "mp":
                        tok, prof = run_mindpipe(a, s, tmp)
                        res[s]["mp"].append(tok)
                        res[s]["prof"] = prof
                    else:
                        res[s]["pt"].append(run_torch(a, s))
                    print(f"# run {r + 1}/{a.runs} {s:5s} {eng}: {res[s][eng][-1]:.0f} tok/s", file=sys.stderr)
    pk = max(pk, peak(a))
    print(f"machine: {machine()}")
    print(f"code paths (--isa {a.isa}): {code_paths(a.mindpipe, a.python)}")
    print(f"sgemm peak (mindpipe peak, {a.threads} threads, best of before/after): {pk:.1f} GFLOP/s\n")
    if a.arch == "llama":
        report_llama(a, shapes, res, pk)
    else:
        report_gpt2(shapes, res, pk)


if __name__ == "__main__":
    main()
