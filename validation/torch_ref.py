#!/usr/bin/env python3
"""PyTorch reference for MindPipe's GPT (ARCHITECTURE.md §3), run by /usr/bin/python3 (Debian's torch).

  torch_ref.py grads FILE [--data DATA.h5]
      FILE is written by `mindpipe debug-grads`: /model/<name> (weights), /grad/<name> (MindPipe's
      gradients of step 0's mean loss), /batch/inputs, /batch/targets, /state (deck, loss).
      Checks the loss and every parameter's gradient against autograd in float32.
  torch_ref.py train FILE --data DATA.h5 --metrics METRICS.jsonl [--final CKPT.h5]
      Trains from FILE's weights exactly as MindPipe does (sampler, warmup + cosine, global-norm
      clipping, AdamW with decay on matrices only) for as many steps as METRICS has lines, and
      compares every step's loss and grad norm, and the final weights.
      --dtype float64: the reference trains in float64 (the exact trajectory), else float32.
      --rule 2bw: PipeDream-2BW's update W(t+1) = W(t) - AdamW(grad f_t(W(t-1))), W(-1) = W(0): each
      step's loss and gradient are those of batch t on the previous weights (ARCHITECTURE.md §4).

  torch_ref.py generate CKPT --prompt TEXT --max-tokens N --got FILE [--gpt2-dir DIR --prompt-ids IDS]
      Greedy decoding of CKPT's model by full recomputation (the whole sequence through the model at
      every step, float64), the prompt's bytes as tokens, stopping at N tokens or a full context;
      checks that FILE (`mindpipe generate`'s stdout) holds the same bytes. A gpt2 checkpoint: the
      prompt's GPT-2 tokens in IDS, draws among GPT-2's 50257 tokens, the completion decoded through
      DIR/encoder.json before the comparison.

Output: one line per check, "PASS what" or "FAIL what"; exit status 1 if any failed.
Error measure for tensors: ||a - b||_2 / ||b||_2 (norm-wise relative).
"""
import argparse
import configparser
import json
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
RNG_STREAM_DATA = 1
failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures += 1


# ---- counter-based generator: src/rng.h, bit for bit ----
def rng_mix(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def rng_key(seed, stream, a, b):
    return rng_mix(rng_mix(rng_mix(rng_mix(seed) ^ stream) ^ a) ^ b)


def sample_batch(train_tokens, seed, step, batch, T):
    """Global batch of step `step` (0-based): windows of T+1 tokens at offsets from the key."""
    n = len(train_tokens)
    inp = np.empty((batch, T), dtype=np.int64)
    tgt = np.empty((batch, T), dtype=np.int64)
    for i in range(batch):
        off = rng_key(seed, RNG_STREAM_DATA, step, i) % (n - T)
        w = train_tokens[off:off + T + 1].astype(np.int64)
        inp[i], tgt[i] = w[:-1], w[1:]
    return inp, tgt


# ---- the model ----
def block_shapes(cfg):
    """(heads, mlp_ratio) per layer, heads 0 for skip: [model] blocks, else the model's own."""
    text = cfg.get("blocks", "")
    if not text:
        return [(cfg["heads"], cfg["mlp_ratio"])] * cfg["layers"]
    out = []
    for b in text.split(","):
        b = b.strip()
        if b == "skip":
            out.append((0, 0))
        else:
            h, r = b[1:].split("m")
            out.append((int(h), int(r)))
    return out


def param_names(cfg):
    names = ["wte", "wpe"]
    for l, (nh, _) in enumerate(block_shapes(cfg)):
        if nh == 0:
            continue
        names += [f"h.{l}.{s}" for s in ("ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b", "attn.proj.w",
                                         "attn.proj.b", "ln2.w", "ln2.b", "mlp.fc.w", "mlp.fc.b",
                                         "mlp.proj.w", "mlp.proj.b")]
    return names + ["lnf.w", "lnf.b"]


def llama_loss(P, inp, tgt, cfg, acts=None, sel=None):
    """Hugging Face's LlamaForCausalLM (modeling_llama.py), written from its definition: RMSNorm
    (x · rsqrt(mean(x²) + eps) · w), rotary embeddings by rotate_half with inv_freq = theta^(-2i/hs)
    on q and k, q/k/v projections with num_key_value_heads (repeat_kv: kv head j serves query heads
    j·g .. j·g + g - 1), causal softmax attention, o_proj, and down(silu(gate(x)) · up(x)); no biases,
    no position table; the head tied to wte (tie_word_embeddings) or lm_head.w. MindPipe stacks q|k|v in
    attn.qkv.w and gate|up in mlp.fc.w: split here by rows, as HF's separate tensors."""
    C, NH = cfg["dim"], cfg["heads"]
    KVH, Fd, eps, theta = cfg["kv_heads"], cfg["ffn_dim"], cfg["norm_eps"], cfg["rope_theta"]
    hs, g = C // NH, NH // KVH  # a block of H heads (model.blocks, a candidate) has H / g kv heads
    B, T = inp.shape
    dt = P["wte"].dtype
    keep = (lambda k, v: acts.__setitem__(k, v.detach())) if acts is not None else (lambda k, v: None)

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        return torch.cat((-x[..., hs // 2:], x[..., :hs // 2]), dim=-1)

    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    emb = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((emb, emb), dim=-1)
    cos, sin = emb.cos().to(dt), emb.sin().to(dt)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = P["wte"][inp]
    keep("embed", x)
    for l, (nh, r) in enumerate(block_shapes(cfg)):
        pre = f"h.{l}."
        if sel is not None and sel[l] >= 0:  # a supernet's choice block: the subnet's candidate
            nh, r = cfg["cands"][sel[l]]
            pre = f"h.{l}.c{sel[l]}."
        if nh == 0:  # skip: the identity
            keep(f"h.{l}", x)
            continue
        kvh, ffn = nh // g, r * Fd
        p = lambda s: P[pre + s]
        h = rms(x, p("ln1.w"))
        q, k, v = F.linear(h, p("attn.qkv.w")).split([nh * hs, kvh * hs, kvh * hs], dim=-1)
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, kvh, hs).transpose(1, 2)
        v = v.view(B, T, kvh, hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        x = x + F.linear(y, p("attn.proj.w"))
        gate, up = F.linear(rms(x, p("ln2.w")), p("mlp.fc.w")).split(ffn, dim=-1)
        x = x + F.linear(F.silu(gate) * up, p("mlp.proj.w"))
        keep(f"h.{l}", x)
    x = rms(x, P["lnf.w"])
    keep("lnf", x)
    if tgt is None:
        return None
    logits = x @ P["lm_head.w" if "lm_head.w" in P else "wte"].t()  # untied: its own head
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))


def gpt_loss(P, inp, tgt, cfg, acts=None, sel=None):
    """Mean next-token cross-entropy of the model (model.arch: GPT-2, or llama_loss); P maps names to
    tensors. acts, a dict, gets the residual stream by MindPipe's dump names (embed, h.{l}, lnf)."""
    if cfg.get("arch", "gpt2") == "llama":
        return llama_loss(P, inp, tgt, cfg, acts, sel)
    C = cfg["dim"]
    B, T = inp.shape
    hs = C // cfg["heads"]
    x = P["wte"][inp] + P["wpe"][:T]
    keep = (lambda k, v: acts.__setitem__(k, v.detach())) if acts is not None else (lambda k, v: None)
    keep("embed", x)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l, (NH, _) in enumerate(block_shapes(cfg)):
        pre = f"h.{l}."
        if sel is not None and sel[l] >= 0:  # a supernet's choice block: the subnet's candidate
            NH = cfg["cands"][sel[l]][0]
            pre = f"h.{l}.c{sel[l]}."
        if NH == 0:  # skip: the identity
            keep(f"h.{l}", x)
            continue
        A = NH * hs
        p = lambda s: P[pre + s]
        h = F.layer_norm(x, (C,), p("ln1.w"), p("ln1.b"), eps=1e-5)
        qkv = F.linear(h, p("attn.qkv.w"), p("attn.qkv.b"))
        q, k, v = qkv.split(A, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, A)
        x = x + F.linear(y, p("attn.proj.w"), p("attn.proj.b"))
        h = F.layer_norm(x, (C,), p("ln2.w"), p("ln2.b"), eps=1e-5)
        h = F.gelu(F.linear(h, p("mlp.fc.w"), p("mlp.fc.b")), approximate="tanh")
        x = x + F.linear(h, p("mlp.proj.w"), p("mlp.proj.b"))
        keep(f"h.{l}", x)
    x = F.layer_norm(x, (C,), P["lnf.w"], P["lnf.b"], eps=1e-5)
    keep("lnf", x)
    if tgt is None:
        return None
    logits = x @ P["wte"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))


# ---- files ----
def read_file(path):
    with h5py.File(path, "r") as f:
        st = f["state"].attrs
        cfg = {k: int(st[k]) for k in ("layers", "dim", "heads", "seq_len", "vocab", "mlp_ratio")}
        blocks = st.get("blocks", "")
        cfg["blocks"] = blocks.decode() if isinstance(blocks, bytes) else str(blocks)
        deck_text = st["deck"]
        deck_text = deck_text.decode() if isinstance(deck_text, bytes) else str(deck_text)
        model = {n: np.array(f["model"][n]) for n in f["model"].keys()}
        extra = {}
        if "grad" in f:
            extra["grad"] = {n: np.array(f["grad"][n]) for n in f["grad"].keys()}
            extra["inputs"] = np.array(f["batch/inputs"]).astype(np.int64)
            extra["targets"] = np.array(f["batch/targets"]).astype(np.int64)
            extra["loss"] = float(st["loss"])
    deck = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    deck.read_string(deck_text)
    dm = deck["model"] if deck.has_section("model") else {}
    cfg["arch"] = dm.get("arch", "gpt2").strip('"')
    if cfg["arch"] == "llama":  # the family's keys, as the run resolved them (kv_heads 0: = heads)
        cfg["kv_heads"] = int(dm.get("kv_heads", "0")) or cfg["heads"]
        cfg["ffn_dim"] = int(dm["ffn_dim"])
        cfg["rope_theta"] = float(dm.get("rope_theta", "10000"))
        cfg["norm_eps"] = float(dm.get("norm_eps", "1e-5"))
    sn = deck["supernet"] if deck.has_section("supernet") else {}
    if int(sn.get("enabled", "0")):
        cfg["cands"] = [(0, 0) if c.strip() == "skip" else tuple(int(x) for x in c.strip()[1:].split("m"))
                        for c in sn["candidates"].strip('"').split(",")]
        blocks = sn.get("blocks", "").strip().strip('"')  # deck.ini writes an empty value as ""
        cfg["choice"] = [int(x) for x in blocks.split(",")] if blocks else list(range(cfg["layers"]))
        cfg["window"] = int(sn.get("window", "1"))
    return cfg, deck, model, extra


def nan_inf(e):
    """An error with NaN read as infinite: every comparison with a NaN is false, so max() kept
    whatever it met first and `worst <= tol` of a NaN error that came later passed."""
    return math.inf if math.isnan(e) else e


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return nan_inf(float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)))


def params_from(model, dtype):
    return {n: torch.tensor(v, dtype=dtype, requires_grad=True) for n, v in model.items()}


# ---- grads ----
def cmd_grads(args):
    cfg, deck, model, ex = read_file(args.file)
    if args.data:
        with h5py.File(args.data, "r") as f:
            train = np.array(f["train"])
        d = deck["train"]
        inp, tgt = sample_batch(train, int(d["seed"]), 0, int(d["batch"]), cfg["seq_len"])
        check(np.array_equal(inp, ex["inputs"]) and np.array_equal(tgt, ex["targets"]),
              "the step-0 batch re-derived from the data file and the sampler equals MindPipe's")
    inp, tgt = torch.tensor(ex["inputs"]), torch.tensor(ex["targets"])
    results = {}
    for dtype in (torch.float32, torch.float64):
        P = params_from(model, dtype)
        sel = subnet(cfg, int(deck["train"]["seed"]), 0) if "cands" in cfg else None  # a supernet: subnet 0
        loss = gpt_loss(P, inp, tgt, cfg, sel=sel)
        loss.backward()
        results[dtype] = (loss.item(), {n: (P[n].grad if P[n].grad is not None else torch.zeros_like(P[n])).numpy()
                                        for n in P})
    loss32, g32 = results[torch.float32]
    loss64, g64 = results[torch.float64]
    lr = abs(ex["loss"] - loss32) / abs(loss32)
    check(lr <= 1e-4, f"loss {ex['loss']:.7f} vs torch {loss32:.7f} (rel {lr:.1e}; torch float64 {loss64:.7f})")
    for n in sorted(model):
        e32, e64 = rel(ex["grad"][n], g32[n]), rel(ex["grad"][n], g64[n])
        check(e32 <= 1e-4, f"grad {n} rel {e32:.1e} (vs torch float64 {e64:.1e})")


# ---- train ----
def lr_at(d, t):
    lr, min_lr, warmup, steps = float(d["lr"]), float(d["min_lr"]), int(d["warmup"]), int(d["steps"])
    if warmup > 0 and t < warmup:
        return lr * (t + 1) / warmup
    if steps <= warmup:
        return lr
    p = min((t - warmup) / (steps - warmup), 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def comparable(name, a, b, cfg):
    """The parts of a weight whose trajectory is determined by the math. The key bias is not: adding
    a constant to every key shifts each query's scores by one constant, which softmax ignores, so its
    true gradient is exactly 0 and both implementations see rounding noise there; AdamW's m/sqrt(v)
    turns that noise into steps of size lr with either sign. So compare q and v biases only."""
    if name.endswith("attn.qkv.b"):
        C = len(a) // 3  # the block's attention width
        keep = np.r_[0:C, 2 * C:3 * C]
        return a[keep], b[keep]
    return a, b


def check_final(path, P, cfg, what):
    """The checkpoint's weights against P's, every tensor within 1e-4."""
    with h5py.File(path, "r") as f:
        worst, name = max((rel(*comparable(n, np.array(f["model"][n]), P[n].detach().numpy(), cfg)), n) for n in P)
    check(worst <= 1e-4, f"{what} within 1e-4 (worst {name} rel {worst:.1e}; key bias excluded: its gradient is "
                         "exactly zero)")


def cmd_train(args):
    cfg, deck, model, _ = read_file(args.file)
    d = deck["train"]
    with h5py.File(args.data, "r") as f:
        train = np.array(f["train"])
    rows = [json.loads(line) for line in open(args.metrics)]
    P = params_from(model, torch.float64 if args.dtype == "float64" else torch.float32)
    m = {n: torch.zeros_like(p) for n, p in P.items()}
    v = {n: torch.zeros_like(p) for n, p in P.items()}
    b1, b2, eps, wd = float(d["beta1"]), float(d["beta2"]), float(d["eps"]), float(d["weight_decay"])
    clip, seed, batch = float(d["grad_clip"]), int(d["seed"]), int(d["batch"])
    worst_loss = worst_norm = 0.0
    by_step = {r["step"]: r for r in rows}
    steps = max(by_step)
    two_bw = args.rule == "2bw"
    W = {n: p.detach().clone().requires_grad_() for n, p in P.items()} if two_bw else P  # W(t-1)
    for t in range(steps):
        inp, tgt = sample_batch(train, seed, t, batch, cfg["seq_len"])
        for p in W.values():
            p.grad = None
        loss = gpt_loss(W, torch.tensor(inp), torch.tensor(tgt), cfg)
        loss.backward()
        grads = {n: p.grad for n, p in W.items()}
        if two_bw:  # the next batch runs on this step's W(t)
            W = {n: p.detach().clone().requires_grad_() for n, p in P.items()}
        with torch.no_grad():
            norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
            scale = clip / norm if clip > 0 and norm > clip else 1.0
            lr = lr_at(d, t)
            for n, p in P.items():
                g = grads[n] * scale
                m[n].mul_(b1).add_((1 - b1) * g)
                v[n].mul_(b2).add_((1 - b2) * g * g)
                mhat, vhat = m[n] / (1 - b1 ** (t + 1)), v[n] / (1 - b2 ** (t + 1))
                decay = wd if p.dim() == 2 else 0.0
                p.sub_(lr * (mhat / (vhat.sqrt() + eps) + decay * p))
        r = by_step.get(t + 1)
        if r is not None:
            worst_loss = max(worst_loss, nan_inf(abs(r["loss"] - loss.item()) / abs(loss.item())))
            worst_norm = max(worst_norm, nan_inf(abs(r["grad_norm"] - norm) / norm))
    rule = f"{args.rule} rule"
    check(worst_loss <= 1e-4, f"{steps} AdamW steps ({rule}): every logged loss within 1e-4 (worst rel {worst_loss:.1e})")
    check(worst_norm <= 1e-3, f"{steps} AdamW steps ({rule}): every grad norm within 1e-3 (worst rel {worst_norm:.1e})")
    if args.final:
        check_final(args.final, P, cfg, f"final weights after {steps} steps")


# ---- supernet training (the sequential reference: ARCHITECTURE.md §4) ----
RNG_STREAM_SUBNET = 4


def subnet(cfg, seed, t):
    """Candidate per layer of subnet t (-1 off the choice blocks): rng_key(seed, SUBNET, t, l) % K."""
    K = len(cfg["cands"])
    return [rng_key(seed, RNG_STREAM_SUBNET, t, l) % K if l in cfg["choice"] else -1 for l in range(cfg["layers"])]


def cmd_supernet(args):
    """Subnet t trains on batch t; the candidates it activated take an AdamW step right after, each
    with its own counter and clipped by its own norm; the shared tensors sum their gradients over the
    window and step once per window, clipped by the sum's norm. The logged grad_norm of a subnet is
    the norm of its candidates' gradients."""
    cfg, deck, model, _ = read_file(args.file)
    d = deck["train"]
    with h5py.File(args.data, "r") as f:
        train = np.array(f["train"])
    by_step = {r["step"]: r for r in (json.loads(line) for line in open(args.metrics))}
    P = params_from(model, torch.float32)
    m = {n: torch.zeros_like(p) for n, p in P.items()}
    v = {n: torch.zeros_like(p) for n, p in P.items()}
    b1, b2, eps, wd = float(d["beta1"]), float(d["beta2"]), float(d["eps"]), float(d["weight_decay"])
    clip, seed, batch, W = float(d["grad_clip"]), int(d["seed"]), int(d["batch"]), cfg["window"]
    is_cand = lambda n: n.startswith("h.") and n.split(".")[2].startswith("c")
    shared = [n for n in P if not is_cand(n)]
    acc = {n: torch.zeros_like(P[n]) for n in shared}
    counts, shared_t = {}, 0
    worst_loss = worst_norm = 0.0

    def adamw(names, grads, scale, t_of, lr):
        with torch.no_grad():
            for n in names:
                g, c = grads[n] * scale, t_of(n)
                m[n].mul_(b1).add_((1 - b1) * g)
                v[n].mul_(b2).add_((1 - b2) * g * g)
                mhat, vhat = m[n] / (1 - b1 ** c), v[n] / (1 - b2 ** c)
                P[n].sub_(lr * (mhat / (vhat.sqrt() + eps) + (wd if P[n].dim() == 2 else 0.0) * P[n]))

    def norm(names, grads):
        return math.sqrt(sum(float((grads[n].double() ** 2).sum()) for n in names))

    steps = max(by_step)
    for t in range(steps):
        sel = subnet(cfg, seed, t)
        inp, tgt = sample_batch(train, seed, t, batch, cfg["seq_len"])
        for p in P.values():
            p.grad = None
        loss = gpt_loss(P, torch.tensor(inp), torch.tensor(tgt), cfg, sel=sel)
        loss.backward()
        grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in P.items()}
        active = [n for n in P if is_cand(n) and sel[int(n.split(".")[1])] == int(n.split(".")[2][1:])]
        gnorm = norm(active, grads)  # a subnet's logged norm: its candidates' gradients'
        lr = lr_at(d, t)
        for l in range(cfg["layers"]):
            if sel[l] >= 0 and cfg["cands"][sel[l]][0] > 0:
                counts[(l, sel[l])] = counts.get((l, sel[l]), 0) + 1
        for l in range(cfg["layers"]):  # each candidate clipped by its own norm
            mine = [n for n in active if int(n.split(".")[1]) == l]
            if mine:
                cn = norm(mine, grads)
                adamw(mine, grads, clip / cn if clip > 0 and cn > clip else 1.0, lambda n: counts[(l, sel[l])], lr)
        for n in shared:
            acc[n] += grads[n]
        if (t + 1) % W == 0:
            shared_t += 1
            sn = norm(shared, acc)
            adamw(shared, acc, clip / sn if clip > 0 and sn > clip else 1.0, lambda n: shared_t, lr)
            for n in shared:
                acc[n].zero_()
        r = by_step.get(t + 1)
        if r is not None:
            worst_loss = max(worst_loss, nan_inf(abs(r["loss"] - loss.item()) / abs(loss.item())))
            worst_norm = max(worst_norm, nan_inf(abs(r["grad_norm"] - gnorm) / max(gnorm, 1e-30)))
    check(worst_loss <= 1e-4, f"{steps} subnets (window {W}): every logged loss within 1e-4 (worst rel {worst_loss:.1e})")
    check(worst_norm <= 1e-3, f"{steps} subnets: every grad norm within 1e-3 (worst rel {worst_norm:.1e})")
    if args.final:
        check_final(args.final, P, cfg, f"final weights of every candidate after {steps} subnets")


# ---- activations ----
def cmd_acts(args):
    """debug.dump_activations against PyTorch: the checkpoint holds the weights the dumped step ran
    its forward on; each layer's output in float64 from the dump's tokens, within --tol relative."""
    cfg, deck, model, ex = read_file(args.file)
    with h5py.File(args.dump, "r") as f:
        tokens = np.array(f["tokens"]).astype(np.int64)
        dumped = {k: np.array(f[k]) for k in f.keys() if k != "tokens"}
    want = ["embed"] + [f"h.{l}" for l in range(cfg["layers"])] + ["lnf"]
    check(sorted(dumped) == sorted(want), "the dump holds %d tensors: embed, h.0 .. h.%d, lnf" %
          (len(want), cfg["layers"] - 1))
    acts = {}
    with torch.no_grad():
        gpt_loss({n: torch.tensor(v, dtype=torch.float64) for n, v in model.items()}, torch.tensor(tokens), None, cfg,
                 acts)
    worst = max(want, key=lambda k: rel(dumped.get(k, 0 * acts[k].numpy()), acts[k].numpy()))
    for k in want:
        if k in dumped and dumped[k].shape == tuple(acts[k].shape):
            e = rel(dumped[k], acts[k].numpy())
            if e >= args.tol or k == worst:
                check(e < args.tol, "%s (%s) within %g of PyTorch (%.1e)%s" % (k, "x".join(map(str, dumped[k].shape)),
                                                                               args.tol, e, " (the worst)" if k == worst else ""))
    check(all(k in dumped and rel(dumped[k], acts[k].numpy()) < args.tol for k in want),
          "every layer's output within %g of PyTorch" % args.tol)


# ---- generation ----
def gpt2_token_bytes(vocab_dir):
    """Each GPT-2 token's bytes, from encoder.json and GPT-2's published byte-to-character map
    (bytes_to_unicode in openai/gpt-2's encoder.py), inverted; nothing shared with MindPipe's code."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    with open(vocab_dir + "/encoder.json", encoding="utf-8") as f:
        enc = json.load(f)
    return {i: bytes(byte_of[ch] for ch in tok) for tok, i in enc.items()}


def cmd_generate(args):
    """Greedy decode by full recomputation: no cache, nothing shared with MindPipe's decoder. With
    --gpt2-dir the prompt is --prompt-ids (GPT-2 tokens, e.g. tiktoken's), the draws are among
    GPT-2's tokens only (the model's vocabulary is padded past them) and the completion's tokens are
    decoded to bytes before the comparison."""
    cfg, deck, model, _ = read_file(args.file)
    P = {n: torch.tensor(v, dtype=torch.float64) for n, v in model.items()}
    table = gpt2_token_bytes(args.gpt2_dir) if args.gpt2_dir else None
    seq = [int(x) for x in args.prompt_ids.split(",")] if table else list(args.prompt.encode())
    live = len(table) if table else cfg["vocab"]
    out, margins = [], []
    with torch.no_grad():
        while len(out) < args.max_tokens and len(seq) < cfg["seq_len"] + 1:
            acts = {}
            gpt_loss(P, torch.tensor([seq[-cfg["seq_len"]:]]), None, cfg, acts)
            logits = (acts["lnf"][0, -1] @ P["lm_head.w" if "lm_head.w" in P else "wte"].t())[:live]
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            tok = int(torch.argmax(logits))  # the first of equal maxima, as MindPipe's sampler
            out.append(tok)
            seq.append(tok)
            if len(seq) == cfg["seq_len"]:
                break
    with open(args.got, "rb") as f:
        got = list(f.read())
    want = list(b"".join(table[t] for t in out)) if table else out
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if table:
        print("PyTorch tokens: %s" % ",".join(map(str, out)))
    print("PyTorch:  %r" % bytes(want))
    print("MindPipe: %r" % bytes(got))
    what = "%d gpt2 tokens (%d bytes)" % (len(out), len(want)) if table else "%d bytes" % len(out)
    check(got == want, "greedy completion of %s equals PyTorch's full recomputation%s (smallest top-2 logit "
          "margin %.2e)" % (what, "" if first is None else " (first difference at byte %d)" % first,
                            min(margins) if margins else 0.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grads")
    g.add_argument("file")
    g.add_argument("--data")
    t = sub.add_parser("train")
    t.add_argument("file")
    t.add_argument("--data", required=True)
    t.add_argument("--metrics", required=True)
    t.add_argument("--final")
    t.add_argument("--rule", choices=["plain", "2bw"], default="plain")
    t.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="the reference's precision: float64 is the exact trajectory MindPipe's float32 should "
                        "stay near (a float32 reference adds its own rounding, which AdamW amplifies where "
                        "gradients are small)")
    sn = sub.add_parser("supernet")
    sn.add_argument("file", help="the initial weights (mindpipe debug-grads)")
    sn.add_argument("--data", required=True)
    sn.add_argument("--metrics", required=True)
    sn.add_argument("--final")
    a = sub.add_parser("acts")
    a.add_argument("file", help="the checkpoint of the dumped step (its weights)")
    a.add_argument("--dump", required=True, help="activations_step_*.h5")
    a.add_argument("--tol", type=float, default=1e-5)
    gen = sub.add_parser("generate")
    gen.add_argument("file", help="a checkpoint (any layout, or an exported subnet)")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--max-tokens", type=int, required=True)
    gen.add_argument("--got", required=True, help="mindpipe generate's stdout")
    gen.add_argument("--gpt2-dir", help="a gpt2 checkpoint: GPT-2's encoder.json (decodes the completion)")
    gen.add_argument("--prompt-ids", help="with --gpt2-dir: the prompt's GPT-2 tokens, comma-separated")
    args = ap.parse_args()
    torch.set_num_threads(1)
    {"grads": cmd_grads, "train": cmd_train, "supernet": cmd_supernet, "acts": cmd_acts, "generate": cmd_generate}[args.cmd](args)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
