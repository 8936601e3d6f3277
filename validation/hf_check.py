#!/usr/bin/env python3
"""A `mindpipe export --format hf` directory against MindPipe's own forward, by /usr/bin/python3.

  hf_check.py DIR --dump ACTS.h5 --ckpt CKPT.h5 [--tol 1e-5] [--transformers]

DIR/model.safetensors is parsed here (8-byte little-endian header length, JSON header, raw tensors;
no `safetensors` package) and DIR/config.json read; the model is run as Hugging Face's GPT-2
defines it (modeling_gpt2.py: GPT2LMHeadModel in eval mode): Conv1D y = x @ W + b, c_attn split
into q, k, v of n_embd each and those into n_head heads, scores / sqrt(head_dim), the causal mask,
gelu_new, LayerNorm with layer_norm_epsilon, lm_head tied to wte (or lm_head.weight if present),
in float64. It gets the tokens ACTS.h5 holds (a debug.dump_activations file: /tokens, and the
residual stream /h.{l} and /lnf MindPipe computed) and compares, per block and at the end, with
MindPipe's; MindPipe's logits are its final LayerNorm's output (/lnf) times its tied head (CKPT's
/model/wte), CKPT being the checkpoint of the dumped step that DIR was exported from.
With --transformers, Hugging Face's own GPT2LMHeadModel.from_pretrained(DIR) (the `transformers`
package: the GPU kit's machine has it, Debian's does not) runs the same tokens in float64 and its
logits are compared with MindPipe's too; a missing package is a FAIL, never a skip.

  hf_check.py mutate SRC DST KIND
      Copies directory SRC's model.safetensors and config.json into DST with one fault planted, for
      the tests: perturb (one weight of transformer.h.1.mlp.c_fc.weight + 1e-2), truncate (the last
      100 bytes cut), hdrlen (a header length past the file), dtype (transformer.wpe.weight as F64),
      missing (no transformer.h.1.ln_2.bias), overlap (two tensors' data_offsets the same).

Output: "PASS what" / "FAIL what" lines; exit 1 if any failed. Measure: max |a - b| over
max(1, max |b|) (b: HF's).
"""
import argparse
import json
import math
import struct
import sys

import h5py
import numpy as np
import torch

failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures += 1


def read_safetensors(path):
    """{name: float64 tensor} of an F32 safetensors file, parsed by hand."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{path}: {name}: dtype {t['dtype']}"
        b, e = t["data_offsets"]
        a = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"])
        out[name] = torch.from_numpy(a.astype(np.float64))
    return out


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def hf_gpt2(W, cfg, tokens):
    """GPT2LMHeadModel's forward (eval): the residual after each block, and the logits."""
    g = lambda k: W["transformer." + k] if "transformer." + k in W else W[k]
    eps, C, NH = cfg["layer_norm_epsilon"], cfg["n_embd"], cfg["n_head"]
    hd = C // NH
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), g(p + ".weight"), g(p + ".bias"), eps=eps)
    conv1d = lambda x, p: x @ g(p + ".weight") + g(p + ".bias")
    B, T = tokens.shape
    x = g("wte.weight")[tokens] + g("wpe.weight")[torch.arange(T)]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    hidden = []
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, p + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
        hidden.append(x)
    x = ln(x, "ln_f")
    head = W["lm_head.weight"] if "lm_head.weight" in W else g("wte.weight")
    return hidden, x @ head.t()


def err(a, b):
    return float((a - b).abs().max()) / max(1.0, float(b.abs().max()))


def write_raw(path, header, blobs):
    """A safetensors file of header (dict) and the blobs in its data_offsets' order."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def mutate(src, dst, kind):
    import os
    import shutil
    os.makedirs(dst, exist_ok=True)
    shutil.copy(src + "/config.json", dst + "/config.json")
    raw = open(src + "/model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out = dst + "/model.safetensors"
    if kind in ("truncate", "hdrlen"):
        open(out, "wb").write(raw[:-100] if kind == "truncate" else struct.pack("<Q", len(raw)) + raw[8:])
        return
    if kind == "shorthdr":  # the header length 3 short, only its padding lost: the JSON still parses
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8 + 8)
        open(out, "wb").write(struct.pack("<Q", len(text) - 3) + text + data)
        return
    names = [k for k in header if k != "__metadata__"]
    tensors = {k: np.frombuffer(data[header[k]["data_offsets"][0]:header[k]["data_offsets"][1]], dtype="<f4")
               for k in names}
    if kind == "perturb":
        t = tensors["transformer.h.1.mlp.c_fc.weight"].copy()
        t[7] += 1e-2
        tensors["transformer.h.1.mlp.c_fc.weight"] = t
    if kind == "missing":
        names.remove("transformer.h.1.ln_2.bias")
    if kind == "nan":
        t = tensors["transformer.h.1.mlp.c_fc.weight"].copy()
        t[5] = np.nan
        tensors["transformer.h.1.mlp.c_fc.weight"] = t
    blobs, off = [], 0
    for k in names:
        b = tensors[k].astype("<f8" if kind == "dtype" and k == "transformer.wpe.weight" else "<f4").tobytes()
        header[k]["dtype"] = "F64" if kind == "dtype" and k == "transformer.wpe.weight" else "F32"
        header[k]["data_offsets"] = [off, off + len(b)]
        blobs.append(b)
        off += len(b)
    if kind == "missing":
        del header["transformer.h.1.ln_2.bias"]
    if kind == "overlap":  # ln_1.weight and ln_1.bias of block 0 (same size) share their bytes
        header["transformer.h.0.ln_1.bias"]["data_offsets"] = header["transformer.h.0.ln_1.weight"]["data_offsets"]
    write_raw(out, header, blobs)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "mutate":
        mutate(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dump", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--transformers", action="store_true")
    a = ap.parse_args()
    with open(a.dir + "/config.json") as f:
        cfg = json.load(f)
    check(cfg.get("model_type") == "gpt2" and cfg.get("architectures") == ["GPT2LMHeadModel"]
          and cfg.get("activation_function") == "gelu_new" and cfg.get("layer_norm_epsilon") == 1e-5,
          "config.json: GPT2LMHeadModel, gelu_new, layer_norm_epsilon 1e-5")
    W = read_safetensors(a.dir + "/model.safetensors")
    with h5py.File(a.dump, "r") as f:
        tokens = torch.from_numpy(f["tokens"][...].astype(np.int64))
        dumped = {k: torch.from_numpy(f[k][...].astype(np.float64)) for k in f.keys() if k != "tokens"}
    with h5py.File(a.ckpt, "r") as f:
        wte = torch.from_numpy(f["model/wte"][...].astype(np.float64))
    hidden, logits = hf_gpt2(W, cfg, tokens)
    for l, h in enumerate(hidden):
        e = err(dumped[f"h.{l}"], h)
        check(e <= a.tol, f"block {l}'s output: MindPipe's against HF GPT-2's, error {e:.2e} (tol {a.tol:g})")
    mine = dumped["lnf"] @ wte.t()
    e = err(mine, logits)
    check(mine.shape == logits.shape and e <= a.tol,
          f"logits {tuple(logits.shape)}: MindPipe's against HF GPT-2's, error {e:.2e} (tol {a.tol:g})")
    if a.transformers:
        try:
            from transformers import GPT2LMHeadModel
        except Exception as ex:  # noqa: BLE001 (any import failure is the finding)
            check(False, "transformers: GPT2LMHeadModel cannot be imported (%s: %s)" % (type(ex).__name__, ex))
        else:
            m = GPT2LMHeadModel.from_pretrained(a.dir).to(torch.float64).eval()
            with torch.no_grad():
                theirs = m(tokens).logits
            e = err(mine, theirs)
            check(theirs.shape == mine.shape and e <= a.tol,
                  f"transformers: GPT2LMHeadModel.from_pretrained's logits {tuple(theirs.shape)} against MindPipe's, "
                  f"error {e:.2e} (tol {a.tol:g})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
