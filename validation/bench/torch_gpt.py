#!/usr/bin/env python3
"""PyTorch peer for the single-rank benchmark: the same GPT as MindPipe (validation/torch_ref.py's
model), trained with torch.optim.AdamW, run tuned (OMP_WAIT_POLICY=PASSIVE set by the caller before
torch loads, torch.set_num_threads). Prints one JSON line: per-step seconds after the warm-up."""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_ref import gpt_loss, param_names  # noqa: E402  (one model definition for tests and bench)


def main():
    ap = argparse.ArgumentParser()
    for k in ("layers", "dim", "heads", "seq_len", "vocab", "batch", "steps", "warmup", "threads"):
        ap.add_argument("--" + k, type=int, required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    C, V, T, R = a.dim, a.vocab, a.seq_len, 4
    shapes = {"wte": (V, C), "wpe": (T, C), "lnf.w": (C,), "lnf.b": (C,)}
    for l in range(a.layers):
        shapes.update({f"h.{l}.ln1.w": (C,), f"h.{l}.ln1.b": (C,), f"h.{l}.attn.qkv.w": (3 * C, C),
                       f"h.{l}.attn.qkv.b": (3 * C,), f"h.{l}.attn.proj.w": (C, C), f"h.{l}.attn.proj.b": (C,),
                       f"h.{l}.ln2.w": (C,), f"h.{l}.ln2.b": (C,), f"h.{l}.mlp.fc.w": (R * C, C),
                       f"h.{l}.mlp.fc.b": (R * C,), f"h.{l}.mlp.proj.w": (C, R * C), f"h.{l}.mlp.proj.b": (C,)})
    cfg = {"layers": a.layers, "dim": C, "heads": a.heads, "seq_len": T, "vocab": V, "mlp_ratio": R}
    P = {}
    for n in param_names(cfg):
        s = shapes[n]
        t = torch.randn(s) * 0.02 if len(s) == 2 else (torch.ones(s) if n.endswith("ln1.w") or n.endswith("ln2.w")
                                                        or n == "lnf.w" else torch.zeros(s))
        P[n] = t.requires_grad_()
    decay = [p for p in P.values() if p.dim() == 2]
    no_decay = [p for p in P.values() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    inp = torch.randint(0, min(V, 256), (a.batch, T))
    tgt = torch.randint(0, min(V, 256), (a.batch, T))
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = gpt_loss(P, inp, tgt, cfg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(P.values(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"step_seconds": times, "loss": loss.item(), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
