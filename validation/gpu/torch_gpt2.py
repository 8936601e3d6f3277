#!/usr/bin/env python3
"""PyTorch GPT-2 training-throughput peer for MindPipe's GPU bring-up.

The bring-up script runs this in the same device call as MindPipe, on the same GPU and model shape,
so that MindPipe's tokens/s and MFU can be read next to those of GPT-2 written the way a PyTorch
user writes it today: nn.Module, nn.Embedding tokens + positions, pre-LN blocks (fused qkv Linear,
F.scaled_dot_product_attention(is_causal=True), proj; MLP 4C with tanh GELU), final LN, LM head tied
to the token embedding, mean cross-entropy, bf16 autocast over fp32 master weights, fused AdamW,
optional torch.compile. Tokens are uniform random (throughput does not depend on them).

  torch_gpt2.py --device cuda --dtype bf16 --compile 1 --peak-tflops 989 --json OUT.json
  /usr/bin/python3 torch_gpt2.py --device cpu --layers 2 --dim 64 --heads 4 --seq 64 --vocab 512 \
      --batch 4 --steps 5 --warmup 2 --threads 2 --json OUT.json        # the script's dry run

Falls back on old torch (Debian's 1.13, CPU): explicit causal softmax attention when SDPA is missing
("attention": "manual"), AdamW foreach when fused is refused ("optimizer": "AdamW foreach").
--compile 1 without torch.compile: JSON "status": "unavailable" with "reason", exit 0.
Any other failure: "status": "error" with "error", exit 1. Success: "status": "ok", exit 0.
Timing: warm-up steps untimed; then a synchronized timed region, each step (zero_grad, forward,
backward, clip_grad_norm_(1.0), AdamW step) timed with CUDA events (perf_counter on CPU); median
step -> tokens/s and MFU; the mean is wall time / steps. --repeat-batch 1 reuses one batch (the
loss then must fall: a training-correctness check, not a benchmark).
"""
import argparse
import contextlib
import inspect
import json
import math
import platform
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
# Model FLOPs per token, forward + backward, counted exactly as MindPipe (model_flops_per_token):
FLOPS_FORMULA = "6*P + 12*L*T*C, P = 12*L*C*C + V*C (block Linear weights + LM head; no biases/LN/positions)"


class Block(nn.Module):
    def __init__(self, C, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0: explicit causal softmax attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, C, heads, T, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, heads) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():  # GPT-2 init; residual projections scaled by 1/sqrt(2L)
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def make_optimizer(params):
    kw = dict(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    if "fused" in inspect.signature(torch.optim.AdamW.__init__).parameters:
        try:
            return torch.optim.AdamW(params, fused=True, **kw), "AdamW fused"
        except (RuntimeError, ValueError, TypeError):
            pass  # e.g. CPU params where fused AdamW is CUDA-only
    return torch.optim.AdamW(params, foreach=True, **kw), "AdamW foreach"


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def measure_matmul(dev, dtype):
    """n^3 matmul in dtype (n = 8192 on cuda, 1024 on cpu): median of 10 after 3 warm-ups."""
    n = 8192 if dev == "cuda" else 1024
    g = torch.Generator(device=dev).manual_seed(7)
    a, b = (torch.randn(n, n, generator=g, device=dev, dtype=DTYPES[dtype]) for _ in range(2))
    times = []
    for i in range(13):
        if dev == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); c = a @ b; e1.record(); e1.synchronize()
            dt = e0.elapsed_time(e1) / 1e3
        else:
            t0 = time.perf_counter(); c = a @ b; dt = time.perf_counter() - t0
        if i >= 3:
            times.append(dt)
    assert torch.isfinite(c.float().abs().sum()), "matmul produced non-finite values"
    t = statistics.median(times)
    return {"n": n, "dtype": dtype, "ms_median": 1e3 * t, "tflops": 2.0 * n ** 3 / t / 1e12}


def _time_ms(dev, fn, reps=5, warm=2):
    """Median milliseconds of fn() over reps calls after warm ones (CUDA events on cuda)."""
    times = []
    for i in range(warm + reps):
        if dev == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); fn(); e1.record(); e1.synchronize()
            dt = e0.elapsed_time(e1)
        else:
            t0 = time.perf_counter(); fn(); dt = 1e3 * (time.perf_counter() - t0)
        if i >= warm:
            times.append(dt)
    return statistics.median(times)


def measure_shapes(dev, dtype, L, C, NH, T, V, B):
    """The floors MindPipe's kernels are measured against (docs/GPU.md's plan): cuBLAS products in
    dtype (bf16 on the device) at the model's exact shapes (each Linear's forward, input gradient
    and weight gradient, N = B*T rows; the LM head once), and SDPA's causal attention forward and
    backward, per training step."""
    N, dt = B * T, DTYPES[dtype]
    g = torch.Generator(device=dev).manual_seed(3)
    rnd = lambda *s: torch.randn(*s, generator=g, device=dev, dtype=dt)  # noqa: E731
    linears = [("qkv", C, 3 * C, L), ("attn_proj", C, C, L), ("fc", C, 4 * C, L), ("fc_proj", 4 * C, C, L),
               ("lm_head", C, V, 1)]
    prods, total = {}, 0.0
    for name, k, m, times in linears:
        x, w, dy = rnd(N, k), rnd(m, k), rnd(N, m)
        f = _time_ms(dev, lambda: x @ w.t())
        di = _time_ms(dev, lambda: dy @ w)
        dw = _time_ms(dev, lambda: dy.t() @ x)
        flop = 3 * 2.0 * N * k * m
        prods[name] = {"fwd_ms": f, "dinp_ms": di, "dw_ms": dw, "tflops": flop / ((f + di + dw) * 1e-3) / 1e12,
                       "per_step": times}
        total += times * (f + di + dw)
        del x, w, dy
    out = {"products_ms_per_step": total, "products": prods}
    if HAVE_SDPA:
        hd = C // NH
        q, k, v = (rnd(B, NH, T, hd).requires_grad_(True) for _ in range(3))
        do = rnd(B, NH, T, hd)
        fwd = _time_ms(dev, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        bwd = _time_ms(dev, lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
        out.update(sdpa_fwd_ms_per_step=L * fwd, sdpa_bwd_ms_per_step=L * bwd)
    return out


def run(a, res):
    dev = a.device
    if dev == "cpu" and a.threads:
        torch.set_num_threads(a.threads)
    res["threads"] = torch.get_num_threads() if dev == "cpu" else None
    res["device_name"] = torch.cuda.get_device_name() if dev == "cuda" else cpu_name()
    res["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    if a.compile and not hasattr(torch, "compile"):
        res.update(status="unavailable", reason="torch %s has no torch.compile" % torch.__version__)
        return 0
    if a.dim % a.heads:
        raise ValueError("--dim %d is not a multiple of --heads %d" % (a.dim, a.heads))
    L, C, T, V, B = a.layers, a.dim, a.seq, a.vocab, a.batch
    if a.measure_matmul:
        res["matmul"] = measure_matmul(dev, a.dtype)
    if a.measure_shapes:
        res["shapes"] = measure_shapes(dev, a.dtype, a.layers, a.dim, a.heads, a.seq, a.vocab, a.batch)

    torch.manual_seed(a.seed)
    raw = GPT2(L, C, a.heads, T, V).to(dev)
    model = torch.compile(raw) if a.compile else raw
    opt, res["optimizer"] = make_optimizer(list(raw.parameters()))
    amp = (lambda: torch.autocast(dev, dtype=DTYPES["bf16"])) if a.dtype == "bf16" else contextlib.nullcontext
    P = 12 * L * C * C + V * C
    fpt = 6 * P + 12 * L * T * C  # MindPipe's count: see FLOPS_FORMULA
    res.update(params=sum(p.numel() for p in raw.parameters()), params_matmul=P, flops_per_token=fpt)

    # Uniform random tokens from a seeded generator, one fresh batch per step, on the device up front.
    total = a.warmup + a.steps
    g = torch.Generator().manual_seed(a.seed)
    data = torch.randint(0, V, (1 if a.repeat_batch else total, B, T + 1), generator=g).to(dev)
    xs, ys = data[:, :, :-1].contiguous(), data[:, :, 1:].contiguous()

    def step(i):
        j = 0 if a.repeat_batch else i
        opt.zero_grad(set_to_none=True)
        with amp():
            loss = model(xs[j], ys[j])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(raw.parameters(), 1.0)
        opt.step()
        return loss.detach()

    losses, warm_s = [], []
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(a.warmup):  # untimed; includes torch.compile's compilation
        sync(dev); t0 = time.perf_counter()
        losses.append(step(i))
        sync(dev); warm_s.append(time.perf_counter() - t0)

    times, events = [], []
    sync(dev)
    t_start = time.perf_counter()
    for i in range(a.warmup, total):
        if dev == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); losses.append(step(i)); e1.record(); events.append((e0, e1))
        else:
            t0 = time.perf_counter(); losses.append(step(i)); times.append(time.perf_counter() - t0)
        if time.perf_counter() - t_start > a.time_limit and i + 1 < total:
            res["time_limit_hit"] = True
            break
    sync(dev)
    wall = time.perf_counter() - t_start
    if dev == "cuda":
        times = [e0.elapsed_time(e1) / 1e3 for e0, e1 in events]
    if not times:
        raise RuntimeError("no timed steps ran (--steps %d)" % a.steps)

    med, mean = statistics.median(times), wall / len(times)
    tok_s = B * T / med
    losses = [x.item() for x in losses]
    res.update(status="ok", steps_run=len(times), step_ms_median=1e3 * med, step_ms_mean=1e3 * mean,
               step_ms_min=1e3 * min(times), tokens_per_s=tok_s, tokens_per_s_mean=B * T / mean,
               model_tflops=tok_s * fpt / 1e12, warmup_ms=[1e3 * t for t in warm_s],
               loss_first=losses[0], loss_last=losses[-1], ln_vocab=math.log(V), losses=losses)
    res["mfu"] = tok_s * fpt / (a.peak_tflops * 1e12) if a.peak_tflops else None
    # compile time: the first steps' time above the median (the first timed step if no warm-up)
    res["compile_s"] = sum(max(0.0, t - med) for t in (warm_s or times[:1])) if a.compile else None
    res["max_memory_allocated"] = torch.cuda.max_memory_allocated() if dev == "cuda" else None
    if not all(math.isfinite(x) for x in losses):
        raise FloatingPointError("non-finite loss: %s" % losses)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = p.add_argument
    add("--layers", type=int, default=12); add("--dim", type=int, default=768)
    add("--heads", type=int, default=12); add("--seq", type=int, default=1024)
    add("--vocab", type=int, default=50304); add("--batch", type=int, default=16, help="micro-batch B")
    add("--steps", type=int, default=20, help="timed steps"); add("--warmup", type=int, default=5)
    add("--device", choices=("cuda", "cpu"), default="cuda")
    add("--dtype", choices=("bf16", "fp32"), default="bf16")
    add("--compile", type=int, choices=(0, 1), default=0)
    add("--peak-tflops", type=float, default=None, help="the chip's dense peak TFLOP/s, for MFU")
    add("--json", default=None, help="write the results here")
    add("--threads", type=int, default=None, help="cpu only: torch.set_num_threads")
    add("--measure-matmul", type=int, choices=(0, 1), default=0)
    add("--measure-shapes", type=int, choices=(0, 1), default=0,
        help="time cuBLAS products (in --dtype) and SDPA at the model's shapes (per step floors)")
    add("--time-limit", type=float, default=120.0, help="seconds; stop timed steps early past it")
    add("--repeat-batch", type=int, choices=(0, 1), default=0, help="reuse one batch (loss must fall)")
    add("--seed", type=int, default=1234)
    a = p.parse_args()
    res = {"status": "error", "script": "torch_gpt2.py", "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "device": a.device, "dtype": a.dtype, "compile": a.compile,
           "mode": "%s %s %s" % (a.device, a.dtype, "compile" if a.compile else "eager"),
           "attention": "sdpa" if HAVE_SDPA else "manual",
           "config": {k: getattr(a, k) for k in ("layers", "dim", "heads", "seq", "vocab", "batch")},
           "warmup": a.warmup, "steps_requested": a.steps, "time_limit_s": a.time_limit, "time_limit_hit": False,
           "repeat_batch": a.repeat_batch, "peak_tflops": a.peak_tflops, "flops_formula": FLOPS_FORMULA}
    try:
        rc = run(a, res)
    except Exception as e:  # noqa: BLE001 - every failure is reported in the JSON
        traceback.print_exc()
        res.update(status="error", error="%s: %s" % (type(e).__name__, e))
        rc = 1
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    if res["status"] == "ok":
        mfu = "%.1f%%" % (100 * res["mfu"]) if res["mfu"] is not None else "n/a"
        print("torch_gpt2 %s: %.0f tok/s  MFU %s  step %.2f ms (mean %.2f)  loss %.4f -> %.4f  [%s, %s, %d steps]"
              % (res["mode"], res["tokens_per_s"], mfu, res["step_ms_median"], res["step_ms_mean"],
                 res["loss_first"], res["loss_last"], res["attention"], res["optimizer"], res["steps_run"]))
    else:
        print("torch_gpt2 %s: %s: %s" % (res["mode"], res["status"], res.get("reason") or res.get("error")))
    return rc


if __name__ == "__main__":
    sys.exit(main())
