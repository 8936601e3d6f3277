#!/usr/bin/env python3
"""PyTorch peer for the single-rank benchmark, llama family: the same Llama as MindPipe's model.arch =
llama (validation/torch_ref.py's llama_loss, Hugging Face's definition) written as a PyTorch user tunes
it, trained with torch.optim.AdamW exactly as torch_gpt.py trains GPT-2 and timed the same way, run
tuned the same way (OMP_WAIT_POLICY=PASSIVE set by the caller before torch loads,
torch.set_num_threads). Prints one JSON line: per-step seconds after the warm-up, and which attention
ran.

  torch_llama.py --layers L --dim C --heads NH --kv_heads KVH --ffn_dim F --seq_len T --vocab V
                 --batch B --steps N --warmup W --threads P [--rope_theta 10000] [--norm_eps 1e-5]
                 [--check 1]

The model: RMSNorm, rotary embeddings (rotate_half, cos/sin tables built once), grouped-query
attention, SwiGLU, no biases, the head tied to wte. Weights in torch_ref's names and stacking
(attn.qkv.w = q|k|v rows, mlp.fc.w = gate|up rows: one product each, as MindPipe does them).
Attention, the best this torch has:
  sdpa-gqa     F.scaled_dot_product_attention(is_causal, enable_gqa) (torch >= 2.5)
  sdpa-repeat  k and v repeated per group (repeat_interleave), then F.scaled_dot_product_attention
  grouped      torch < 2.0, which has no SDPA: the g = NH/KVH query heads of one kv head stacked as
               (B, KVH, g*T, hs) against that head's k and v, so no repeat is materialised; 1/sqrt(hs)
               folded into q's rotary tables; an additive causal mask; softmax.
--check 1 first compares this model's loss and gradients with torch_ref.llama_loss on the same
weights and batch (norm-wise relative error, exit 1 above 1e-4).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_ref import llama_loss  # noqa: E402  (the definition --check compares against)


def attention_kind():
    """The fastest correct attention this torch offers (see the module's docstring)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return "grouped"
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return "sdpa-gqa" if (major, minor) >= (2, 5) else "sdpa-repeat"


class Llama:
    """The model's constant tables (rotary cos/sin, causal mask) built once, and its loss."""

    def __init__(self, cfg, attn):
        C, NH, T = cfg["dim"], cfg["heads"], cfg["seq_len"]
        self.cfg, self.attn, self.hs = cfg, attn, C // NH
        hs = self.hs
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        emb = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((emb, emb), dim=-1)  # (T, hs): HF's rotate_half layout
        self.cos, self.sin = emb.cos().float(), emb.sin().float()
        qs = 1.0 / math.sqrt(hs) if attn == "grouped" else 1.0  # SDPA scales by itself
        self.cos_q, self.sin_q = self.cos * qs, self.sin * qs
        self.mask = torch.full((T, T), float("-inf")).triu(1)  # (T, T) additive causal mask

    def rope(self, x, cos, sin):  # x (B, H, T, hs)
        h = self.hs // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def attend(self, q, k, v):
        """q (B, NH, T, hs), k and v (B, KVH, T, hs) -> (B, NH, T, hs)."""
        B, NH, T, hs = q.shape
        KVH = k.shape[1]
        g = NH // KVH
        if self.attn == "sdpa-gqa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if self.attn == "sdpa-repeat":
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        att = q.reshape(B, KVH, g * T, hs) @ k.transpose(-2, -1)  # query head j*g + i serves kv head j
        att = (att.view(B, KVH, g, T, T) + self.mask).softmax(dim=-1)
        return (att.view(B, KVH, g * T, T) @ v).view(B, NH, T, hs)

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["norm_eps"]))

    def loss(self, P, inp, tgt):
        c = self.cfg
        NH, KVH, Fd, hs = c["heads"], c["kv_heads"], c["ffn_dim"], self.hs
        B, T = inp.shape
        x = F.embedding(inp, P["wte"])
        for l in range(c["layers"]):
            p = lambda s: P[f"h.{l}.{s}"]
            q, k, v = F.linear(self.rms(x, p("ln1.w")), p("attn.qkv.w")).split([NH * hs, KVH * hs, KVH * hs], dim=-1)
            q = self.rope(q.view(B, T, NH, hs).transpose(1, 2), self.cos_q, self.sin_q)
            k = self.rope(k.view(B, T, KVH, hs).transpose(1, 2), self.cos, self.sin)
            v = v.view(B, T, KVH, hs).transpose(1, 2)
            y = self.attend(q, k, v).transpose(1, 2).reshape(B, T, NH * hs)
            x = x + F.linear(y, p("attn.proj.w"))
            gate, up = F.linear(self.rms(x, p("ln2.w")), p("mlp.fc.w")).split(Fd, dim=-1)
            x = x + F.linear(F.silu(gate) * up, p("mlp.proj.w"))
        logits = F.linear(self.rms(x, P["lnf.w"]), P["wte"])  # tied head
        return F.cross_entropy(logits.view(B * T, -1), tgt.reshape(-1))


def init_params(cfg):
    """torch_ref's names and shapes; matrices N(0, 0.02), norm weights 1 (as torch_gpt.py)."""
    C, NH, KVH, Fd, V = cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["ffn_dim"], cfg["vocab"]
    KA = KVH * (C // NH)
    shapes = {"wte": (V, C), "lnf.w": (C,)}
    for l in range(cfg["layers"]):
        shapes.update({f"h.{l}.ln1.w": (C,), f"h.{l}.attn.qkv.w": (C + 2 * KA, C), f"h.{l}.attn.proj.w": (C, C),
                       f"h.{l}.ln2.w": (C,), f"h.{l}.mlp.fc.w": (2 * Fd, C), f"h.{l}.mlp.proj.w": (C, Fd)})
    return {n: (torch.randn(s) * 0.02 if len(s) == 2 else torch.ones(s)).requires_grad_() for n, s in shapes.items()}


def check(model, P, inp, tgt):
    """Loss and every gradient against torch_ref.llama_loss; returns the worst relative error."""
    ref = {n: t.detach().clone().requires_grad_() for n, t in P.items()}
    a, b = model.loss(P, inp, tgt), llama_loss(ref, inp, tgt, model.cfg)
    a.backward()
    b.backward()
    worst = abs(a.item() - b.item()) / abs(b.item())
    for n in P:
        worst = max(worst, ((P[n].grad - ref[n].grad).norm() / ref[n].grad.norm()).item())
        P[n].grad = None
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k in ("layers", "dim", "heads", "kv_heads", "ffn_dim", "seq_len", "vocab", "batch", "steps", "warmup",
              "threads"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--rope_theta", type=float, default=10000.0)
    ap.add_argument("--norm_eps", type=float, default=1e-5)
    ap.add_argument("--check", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = {k: getattr(a, k) for k in ("layers", "dim", "heads", "kv_heads", "ffn_dim", "seq_len", "vocab",
                                       "rope_theta", "norm_eps")}
    model = Llama(cfg, attention_kind())
    P = init_params(cfg)
    decay = [p for p in P.values() if p.dim() == 2]
    no_decay = [p for p in P.values() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    inp = torch.randint(0, min(a.vocab, 256), (a.batch, a.seq_len))
    tgt = torch.randint(0, min(a.vocab, 256), (a.batch, a.seq_len))
    worst = check(model, P, inp, tgt) if a.check else None
    if worst is not None and not worst <= 1e-4:
        print(f"torch_llama.py: {model.attn} differs from torch_ref.llama_loss by {worst:.2e} (> 1e-4)", file=sys.stderr)
        sys.exit(1)
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model.loss(P, inp, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(P.values(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    out = {"step_seconds": times, "loss": loss.item(), "threads": torch.get_num_threads(), "attention": model.attn}
    if worst is not None:
        out["check_rel_err"] = worst
    print(json.dumps(out))


if __name__ == "__main__":
    main()
