#!/usr/bin/env python3
"""The Llama kernels (kernels.h: rmsnorm, rope, swiglu, attention_gqa) recomputed with PyTorch in
Hugging Face's formulas (LlamaRMSNorm, rotate_half/apply_rotary_pos_emb, silu(gate) * up,
repeat_kv + causal softmax attention), in float64 from the kernels' own float32 inputs, gradients by
autograd. Reads the folder validation/unit/llama_dump wrote; prints one PASS/FAIL line per
comparison (max |ours - torch| / max |torch|); exits 0 when all pass, 1 otherwise."""
import os
import sys

import numpy as np
import torch

TOL = 1e-5


def main(d):
    dims = dict(line.split() for line in open(os.path.join(d, "dims.txt")))
    B, T, NH, KVH, HS, F, POS0 = (int(dims[k]) for k in ("B", "T", "NH", "KVH", "HS", "F", "POS0"))
    eps, theta = float(dims["EPS"]), float(dims["THETA"])
    C, W = NH * HS, (NH + 2 * KVH) * HS

    def load(name, *shape):
        a = np.fromfile(os.path.join(d, name + ".f32"), dtype="<f4")
        if a.size != int(np.prod(shape)):
            raise SystemExit(f"{name}.f32 holds {a.size} floats, not {int(np.prod(shape))}")
        return torch.from_numpy(a.astype(np.float64)).reshape(*shape)

    failed = 0

    def check(what, ours, ref):
        nonlocal failed
        err = (ours - ref.detach()).abs().max().item() / max(ref.detach().abs().max().item(), 1e-300)
        good = err < TOL  # a NaN fails here
        failed += not good
        print(f"{'PASS' if good else 'FAIL'} {what} ({err:.1e} relative)")

    def grads(out, dout, *leaves):
        out.backward(dout)
        return [leaf.grad for leaf in leaves]

    # LlamaRMSNorm
    x = load("rms_x", B * T, C).requires_grad_()
    w = load("rms_w", C).requires_grad_()
    y = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    check("rmsnorm forward = LlamaRMSNorm", load("rms_y", B * T, C), y)
    gx, gw = grads(y, load("rms_dy", B * T, C), x, w)
    check("rmsnorm dinp = autograd", load("rms_dx", B * T, C), gx)
    check("rmsnorm dw = autograd", load("rms_dw", C), gw)

    # rotate_half / apply_rotary_pos_emb on q (B,NH,T,HS) and k (B,KVH,T,HS)
    def rotate_half(t):
        return torch.cat((-t[..., HS // 2:], t[..., :HS // 2]), dim=-1)

    inv_freq = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    freqs = torch.outer(torch.arange(POS0, POS0 + T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    qkv = load("rope_x", B, T, W).requires_grad_()
    q = qkv[..., :C].reshape(B, T, NH, HS).transpose(1, 2)
    k = qkv[..., C:C + KVH * HS].reshape(B, T, KVH, HS).transpose(1, 2)
    q_rot = q * cos + rotate_half(q) * sin
    k_rot = k * cos + rotate_half(k) * sin
    out = torch.cat((q_rot.transpose(1, 2).reshape(B, T, C), k_rot.transpose(1, 2).reshape(B, T, KVH * HS),
                     qkv[..., C + KVH * HS:]), dim=-1)
    check(f"rope forward (pos {POS0}..{POS0 + T - 1}) = apply_rotary_pos_emb", load("rope_y", B, T, W), out)
    (gq,) = grads(out, load("rope_dy", B, T, W), qkv)
    check("rope backward = autograd", load("rope_dx", B, T, W), gq)

    # SwiGLU on [gate | up]
    gu = load("swiglu_x", B * T, 2 * F).requires_grad_()
    h = torch.nn.functional.silu(gu[:, :F]) * gu[:, F:]
    check("swiglu forward = silu(gate) * up", load("swiglu_h", B * T, F), h)
    (gg,) = grads(h, load("swiglu_dh", B * T, F), gu)
    check("swiglu backward = autograd", load("swiglu_dx", B * T, 2 * F), gg)

    # grouped-query attention: repeat_kv, then causal softmax attention
    qkv = load("gqa_qkv", B, T, W).requires_grad_()
    q = qkv[..., :C].reshape(B, T, NH, HS).transpose(1, 2)
    k = qkv[..., C:C + KVH * HS].reshape(B, T, KVH, HS).transpose(1, 2)
    v = qkv[..., C + KVH * HS:].reshape(B, T, KVH, HS).transpose(1, 2)

    def repeat_kv(t):
        n_rep = NH // KVH
        return t[:, :, None, :, :].expand(B, KVH, n_rep, T, HS).reshape(B, NH, T, HS)

    s = q @ repeat_kv(k).transpose(-1, -2) / HS ** 0.5
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = (p @ repeat_kv(v)).transpose(1, 2).reshape(B, T, C)
    check(f"gqa NH={NH} KVH={KVH} forward = repeat_kv + causal softmax", load("gqa_out", B, T, C), o)
    check("gqa probabilities", load("gqa_att", B, NH, T, T), p)
    (gd,) = grads(o, load("gqa_dout", B, T, C), qkv)
    check("gqa backward = autograd (dk, dv summed over each group)", load("gqa_dqkv", B, T, W), gd)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: llama_kernels_torch.py DIR")
    sys.exit(main(sys.argv[1]))
