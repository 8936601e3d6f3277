#!/usr/bin/env python3
"""A `mindpipe export --format hf` directory of a llama model (LlamaForCausalLM) against MindPipe.

DIR/model.safetensors is parsed here by hand (8-byte little-endian header length, JSON header, raw
little-endian data; F32, BF16 and F16; no `safetensors` package) and DIR/config.json read; the model
runs as Hugging Face's modeling_llama.py defines it, in float64 with numpy: RMSNorm
x / sqrt(mean(x^2) + rms_norm_eps) * w; q_proj, k_proj, v_proj into num_attention_heads and
num_key_value_heads heads of head_dim; rotary embeddings with inv_freq = rope_theta^(-2i/head_dim),
cos/sin of cat(freqs, freqs) and rotate_half(x) = cat(-x[d/2:], x[:d/2]); repeat_kv (kv head j serves
query heads j*g .. j*g+g-1); causal softmax of q k^T / sqrt(head_dim); o_proj; down(silu(gate) * up);
model.norm; lm_head.weight, or the embedding when tie_word_embeddings. Nothing is shared with
MindPipe's code or with torch_ref.py.

  hf_llama_check.py forward DIR --dump ACTS.h5 --ckpt CKPT.h5 [--tol 1e-5] [--transformers]
      ACTS.h5 is a debug.dump_activations file (/tokens, MindPipe's block outputs /h.{l}, its final
      norm /lnf) of the step CKPT.h5 holds the weights of; MindPipe's logits are /lnf times CKPT's
      head (/model/lm_head.w when untied, else /model/wte). Each block's output and the logits
      within --tol: max |a - b| / max(1, max |b|), b the checker's. --transformers: Hugging Face's own
      LlamaForCausalLM.from_pretrained(DIR) in float64 (eager attention) too, its logits against
      MindPipe's within --tol (the GPU bring-up's hf part; a python without `transformers` fails it).
  hf_llama_check.py greedy DIR --prompt TEXT --got FILE [--max-tokens N]
      The greedy continuation of TEXT's bytes (byte tokens) by full recomputation, against FILE
      (`mindpipe generate --temperature 0`'s stdout), byte for byte.
  hf_llama_check.py weights DIR --ckpt CKPT.h5 [--bf16]
      DIR's tensors, split from CKPT's stacked ones by the name table, equal CKPT's bitwise
      (--bf16: CKPT's rounded to the nearest bfloat16, ties to even, computed here; and dtype BF16).
  hf_llama_check.py same A.h5 B.h5 [--round bf16|f16]
      Checkpoint B's weights equal A's bitwise (--round: A's rounded to bfloat16 as above, or to half
      by numpy's astype); B is at step 0.
  hf_llama_check.py imported DIR CKPT.h5
      CKPT's weights (an --init-from hf:DIR at step 0) are DIR's tensors, each decoded here to float32
      (numpy's own float16; bfloat16 as a float's upper half) and stacked by the name table, bitwise.
  hf_llama_check.py shards SHARDED SINGLE --max BYTES
      SHARDED (model.safetensors.index.json and its shards, each read by hand) holds the tensors of
      SINGLE/model.safetensors, the same bytes of the same dtype and shape; no shard beyond BYTES of
      tensors unless it holds one tensor alone; the index's total_size is the tensors' bytes; the
      shards named model-0000i-of-0000N.safetensors, numbered 1..N.
  hf_llama_check.py mutate-index SRC DST KIND
      The sharded SRC copied into DST with one fault: noshard (the second shard removed), twice (the
      embedding in the second shard as well as in the first, where the index maps it), misplaced
      (the index maps a tensor of the first shard to the second), both (a model.safetensors beside
      the index).
  hf_llama_check.py mutate SRC DST KIND
      SRC's files copied into DST with one fault: perturb (one weight of layer 1's up_proj + 1e-2),
      truncate (the last 100 bytes cut), missing (no model.layers.1.mlp.up_proj.weight, the file
      rewritten whole), shape (k_proj of layer 0 with one row less), f16 (every tensor as F16: no
      fault, a dtype HF writes), overlap (v_proj of layer 0's offsets those of k_proj), hdrlen (a
      header length past the file), dtype (model.norm.weight said to be I32: its bytes still fit),
      dup (model.norm.weight twice in the header), headsame (a tied model's lm_head.weight equal to
      the embedding: no fault), headdiff (the same with one element changed), special (no fault:
      model.norm.weight as F16 of subnormals, -0, the largest half, and layer 0's input_layernorm as
      BF16 of a float subnormal, -0, the largest finite bfloat16), ties (no fault: the embedding's
      first 8 floats made halfway between two bfloat16s, and either side of halfway), huge (no fault
      in F32: the embedding's element 3 made 3.4e38, which rounds to bfloat16's infinity).

Output: "PASS what" / "FAIL what" lines; exit 1 if any failed.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures += 1


def read_raw(path):
    """(header dict without __metadata__, data bytes) of a safetensors file, by hand."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    return header, raw[8 + n:]


def decode(t, data):
    """One tensor's elements as float64 (F32, BF16: a float's upper half, F16)."""
    b, e = t["data_offsets"]
    buf = data[b:e]
    if t["dtype"] == "F32":
        x = np.frombuffer(buf, dtype="<f4")
    elif t["dtype"] == "BF16":
        x = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif t["dtype"] == "F16":
        x = np.frombuffer(buf, dtype="<f2")
    else:
        raise ValueError("dtype %s" % t["dtype"])
    return x.astype(np.float64).reshape(t["shape"])


def read_dir(d):
    header, data = read_raw(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return {k: decode(t, data) for k, t in header.items()}, header, cfg


def forward(W, cfg, tokens):
    """LlamaForCausalLM's forward on tokens (B, T): (block outputs, logits), float64."""
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    KVH = cfg.get("num_key_value_heads") or NH
    hd = cfg.get("head_dim") or C // NH
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    B, T = tokens.shape
    g = NH // KVH

    def rms(x, w):
        return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))

    def rotate_half(x):
        return np.concatenate((-x[..., hd // 2:], x[..., :hd // 2]), axis=-1)

    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    freqs = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    emb = np.concatenate((freqs, freqs), axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)  # (T, hd)
    mask = np.tril(np.ones((T, T), dtype=bool))
    x = W["model.embed_tokens.weight"][tokens]
    outs = []
    for l in range(cfg["num_hidden_layers"]):
        p = lambda s: W["model.layers.%d.%s" % (l, s)]
        h = rms(x, p("input_layernorm.weight"))
        q = (h @ p("self_attn.q_proj.weight").T).reshape(B, T, NH, hd).transpose(0, 2, 1, 3)
        k = (h @ p("self_attn.k_proj.weight").T).reshape(B, T, KVH, hd).transpose(0, 2, 1, 3)
        v = (h @ p("self_attn.v_proj.weight").T).reshape(B, T, KVH, hd).transpose(0, 2, 1, 3)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        s = np.where(mask, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = s / s.sum(-1, keepdims=True)
        y = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, NH * hd)
        x = x + y @ p("self_attn.o_proj.weight").T
        h = rms(x, p("post_attention_layernorm.weight"))
        gate, up = h @ p("mlp.gate_proj.weight").T, h @ p("mlp.up_proj.weight").T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ p("mlp.down_proj.weight").T
        outs.append(x)
    x = rms(x, W["model.norm.weight"])
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return outs, x @ head.T


def rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(1.0, float(np.abs(b).max())))


def cmd_forward(a):
    import h5py
    W, _, cfg = read_dir(a.dir)
    check(cfg.get("architectures") == ["LlamaForCausalLM"] and cfg.get("model_type") == "llama",
          "config.json: LlamaForCausalLM, model_type llama")
    with h5py.File(a.dump, "r") as f:
        tokens = np.array(f["tokens"]).astype(np.int64)
        dumped = {k: np.array(f[k]) for k in f.keys() if k != "tokens"}
    with h5py.File(a.ckpt, "r") as f:
        head = np.array(f["model/lm_head.w" if "lm_head.w" in f["model"] else "model/wte"], np.float64)
    outs, logits = forward(W, cfg, tokens)
    for l, x in enumerate(outs):
        e = rel(dumped["h.%d" % l], x)
        check(e < a.tol, "block %d's output: MindPipe's against HF Llama's, error %.2e (tol %g)" % (l, e, a.tol))
    mine = dumped["lnf"].astype(np.float64) @ head[:logits.shape[-1]].T
    e = rel(mine, logits)
    check(mine.shape == logits.shape and e < a.tol, "logits %s: MindPipe's against HF Llama's, error %.2e (tol %g)"
          % ("x".join(map(str, logits.shape)), e, a.tol))
    if a.transformers:
        transformers_logits(a, tokens, mine)


def transformers_logits(a, tokens, mine):
    """transformers' LlamaForCausalLM.from_pretrained(DIR) in float64 against MindPipe's logits: the
    user's own loader reading our export, not a forward written here."""
    try:
        import torch
        from transformers import LlamaForCausalLM
    except Exception as ex:  # noqa: BLE001 (any import failure is the finding)
        check(False, "transformers: LlamaForCausalLM cannot be imported (%s: %s)" % (type(ex).__name__, ex))
        return
    try:  # eager attention: SDPA's kernels differ by device and version; the math is the same
        m = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float64, attn_implementation="eager")
    except TypeError:  # a transformers from before attn_implementation (4.36)
        m = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float64)
    with torch.no_grad():
        theirs = m.eval()(torch.from_numpy(tokens)).logits.numpy()
    e = rel(mine, theirs)
    check(theirs.shape == mine.shape and e < a.tol, "transformers: LlamaForCausalLM.from_pretrained's logits %s "
          "against MindPipe's, error %.2e (tol %g)" % ("x".join(map(str, theirs.shape)), e, a.tol))


def cmd_greedy(a):
    W, _, cfg = read_dir(a.dir)
    seq, out, margins = list(a.prompt.encode()), [], []
    T = cfg["max_position_embeddings"]
    while len(out) < a.max_tokens and len(seq) < T:
        _, logits = forward(W, cfg, np.array([seq], dtype=np.int64))
        last = logits[0, -1]
        top = np.sort(last)[-2:]
        margins.append(float(top[1] - top[0]))
        tok = int(np.argmax(last))  # the first of equal maxima
        out.append(tok)
        seq.append(tok)
    with open(a.got, "rb") as f:
        got = list(f.read())
    print("checker:  %r" % bytes(out))
    print("MindPipe: %r" % bytes(got))
    check(got == out and len(out) > 0, "greedy continuation of %d bytes equals HF Llama's argmax, byte for byte "
          "(smallest top-2 logit margin %.2e)" % (len(out), min(margins) if margins else 0.0))


def bf16_round(x):
    """float32 array rounded to the nearest bfloat16, ties to even, back as float32."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def canonical_parts(cfg, name):
    """The HF tensors (name, rows) that MindPipe's canonical tensor `name` is stacked from."""
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or C // NH
    A, KA, F = NH * hd, (cfg.get("num_key_value_heads") or NH) * hd, cfg["intermediate_size"]
    if name == "wte":
        return [("model.embed_tokens.weight", None)]
    if name == "lnf.w":
        return [("model.norm.weight", None)]
    if name == "lm_head.w":
        return [("lm_head.weight", None)]
    _, l, rest = name.split(".", 2)
    m = "model.layers.%s." % l
    table = {"ln1.w": [("input_layernorm.weight", None)], "ln2.w": [("post_attention_layernorm.weight", None)],
             "attn.proj.w": [("self_attn.o_proj.weight", None)], "mlp.proj.w": [("mlp.down_proj.weight", None)],
             "attn.qkv.w": [("self_attn.q_proj.weight", A), ("self_attn.k_proj.weight", KA),
                            ("self_attn.v_proj.weight", KA)],
             "mlp.fc.w": [("mlp.gate_proj.weight", F), ("mlp.up_proj.weight", F)]}
    return [(m + s, r) for s, r in table[rest]]


def cmd_weights(a):
    import h5py
    header, data = read_raw(os.path.join(a.dir, "model.safetensors"))
    with open(os.path.join(a.dir, "config.json")) as f:
        cfg = json.load(f)
    want_dt = "BF16" if a.bf16 else "F32"
    seen, bad = set(), []
    with h5py.File(a.ckpt, "r") as f:
        for name in f["model"].keys():
            w = np.array(f["model/" + name], np.float32)
            if a.bf16:
                w = bf16_round(w)
            row = 0
            for hf, rows in canonical_parts(cfg, name):
                seen.add(hf)
                t = header.get(hf)
                if t is None or t["dtype"] != want_dt:
                    bad.append("%s: %s" % (hf, "missing" if t is None else t["dtype"]))
                    continue
                part = w if rows is None else w[row:row + rows]
                row += rows or 0
                got = decode(t, data).astype(np.float32)
                if got.shape != part.shape or got.tobytes() != part.tobytes():
                    bad.append("%s differs from %s" % (hf, name))
    extra = sorted(set(header) - seen)
    print("# %d tensors of %s, %d of the checkpoint's; %s" % (len(header), want_dt, len(seen), bad[:3] or "none differ"))
    check(not bad and not extra, "every exported tensor is the checkpoint's %sbitwise (%d tensors%s%s)"
          % ("rounded to bfloat16, " if a.bf16 else "", len(seen), "; differing: %s" % bad[:3] if bad else "",
             "; unexpected: %s" % extra if extra else ""))


def cmd_same(a):
    import h5py
    with h5py.File(a.a, "r") as fa, h5py.File(a.b, "r") as fb:
        names = sorted(fa["model"].keys())
        step = int(fb["state"].attrs["step"])
        rnd = {None: lambda x: x, "bf16": bf16_round, "f16": lambda x: x.astype("<f2").astype(np.float32)}[a.round]
        bad = [k for k in names if k not in fb["model"] or
               rnd(np.array(fa["model/" + k][...], np.float32)).tobytes() != np.array(fb["model/" + k][...]).tobytes()]
        extra = sorted(set(fb["model"].keys()) - set(names))
    check(not bad and not extra and step == 0, "%d tensors of the imported step-%d checkpoint equal the original's%s "
          "bitwise%s" % (len(names), step, " rounded to " + a.round if a.round else "",
                         "; differing: %s" % bad[:4] if bad else "" + ("; extra: %s" % extra if extra else "")))


def tensors_of(d):
    """{name: (dtype, shape, bytes)} of a directory: model.safetensors, or the index's shards."""
    idx = os.path.join(d, "model.safetensors.index.json")
    files = {}
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        for name, shard in wm.items():
            files.setdefault(shard, []).append(name)
    else:
        files["model.safetensors"] = None
    out = {}
    for shard, names in files.items():
        header, data = read_raw(os.path.join(d, shard))
        assert names is None or sorted(names) == sorted(header), "%s: the index and the shard disagree" % shard
        for k, t in header.items():
            assert k not in out, "%s twice" % k
            out[k] = (t["dtype"], t["shape"], data[t["data_offsets"][0]:t["data_offsets"][1]])
    return out


def cmd_imported(a):
    import h5py
    with open(os.path.join(a.dir, "config.json")) as f:
        cfg = json.load(f)
    T = tensors_of(a.dir)
    bad, n = [], 0
    with h5py.File(a.ckpt, "r") as f:
        step = int(f["state"].attrs["step"])
        for name in f["model"].keys():
            parts = []
            for hf, _ in canonical_parts(cfg, name):
                dt, shape, b = T[hf]
                parts.append(decode({"dtype": dt, "shape": shape, "data_offsets": [0, len(b)]}, b).astype(np.float32))
            want = np.concatenate(parts) if len(parts) > 1 else parts[0]
            n += 1
            if want.tobytes() != np.array(f["model/" + name], np.float32).tobytes():
                bad.append(name)
    dts = sorted(set(t[0] for t in T.values()))
    check(not bad and step == 0, "the step-%d checkpoint's %d tensors are the files' (%s) decoded here, bitwise%s"
          % (step, n, "/".join(dts), "; differing: %s" % bad[:4] if bad else ""))


def cmd_shards(a):
    with open(os.path.join(a.sharded, "model.safetensors.index.json")) as f:
        idx = json.load(f)
    shards = sorted(set(idx["weight_map"].values()))
    n = len(shards)
    check(n > 1 and shards == ["model-%05d-of-%05d.safetensors" % (i + 1, n) for i in range(n)] and
          not os.path.exists(os.path.join(a.sharded, "model.safetensors")),
          "%d shards named model-0000i-of-%05d.safetensors, no model.safetensors beside them" % (n, n))
    sizes = []
    for s in shards:
        header, _ = read_raw(os.path.join(a.sharded, s))
        b = sum(t["data_offsets"][1] - t["data_offsets"][0] for t in header.values())
        sizes.append(b)
        check(b <= a.max or len(header) == 1, "%s: %d bytes of %d tensors, within %d (or one tensor alone)"
              % (s, b, len(header), a.max))
    x, y = tensors_of(a.sharded), tensors_of(a.single)
    check(idx["metadata"]["total_size"] == sum(sizes), "the index's total_size %d is the shards' tensors' bytes"
          % idx["metadata"]["total_size"])
    diff = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
    check(not diff, "the shards hold the single file's %d tensors, dtype, shape and bytes equal%s"
          % (len(y), "; differing: %s" % diff[:4] if diff else ""))


def cmd_mutate_index(a):
    shutil.copytree(a.src, a.dst)
    idx_path = os.path.join(a.dst, "model.safetensors.index.json")
    with open(idx_path) as f:
        idx = json.load(f)
    shards = sorted(set(idx["weight_map"].values()))
    if a.kind == "noshard":
        os.remove(os.path.join(a.dst, shards[1]))
    elif a.kind == "twice":  # the embedding in the second shard too (the index names the first)
        h1, d1 = read_raw(os.path.join(a.dst, shards[0]))
        h2, d2 = read_raw(os.path.join(a.dst, shards[1]))
        e = h1["model.embed_tokens.weight"]
        ts = [(k, t["dtype"], t["shape"], d2[t["data_offsets"][0]:t["data_offsets"][1]]) for k, t in h2.items()]
        ts.append(("model.embed_tokens.weight", e["dtype"], e["shape"], d1[e["data_offsets"][0]:e["data_offsets"][1]]))
        write_st(os.path.join(a.dst, shards[1]), ts)
    elif a.kind == "misplaced":
        name = next(k for k, v in idx["weight_map"].items() if v == shards[0])
        idx["weight_map"][name] = shards[1]
        with open(idx_path, "w") as f:
            json.dump(idx, f, indent=2)
        print(name)
    elif a.kind == "both":
        write_st(os.path.join(a.dst, "model.safetensors"), [])
    else:
        sys.exit("unknown mutation " + a.kind)


def write_st(path, tensors):
    """tensors: [(name, dtype, shape, bytes)] as one safetensors file, the header padded to 8."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors))


def cmd_mutate(a):
    os.makedirs(a.dst, exist_ok=True)
    shutil.copy(os.path.join(a.src, "config.json"), a.dst)
    src, dst = os.path.join(a.src, "model.safetensors"), os.path.join(a.dst, "model.safetensors")
    header, data = read_raw(src)
    ts = [(k, t["dtype"], t["shape"], data[t["data_offsets"][0]:t["data_offsets"][1]])
          for k, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])]
    up = "model.layers.1.mlp.up_proj.weight"
    if a.kind == "truncate":
        with open(src, "rb") as f:
            raw = f.read()
        with open(dst, "wb") as f:
            f.write(raw[:-100])
        return
    if a.kind == "hdrlen":
        with open(src, "rb") as f:
            raw = f.read()
        with open(dst, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw[8:])
        return
    if a.kind == "dup":  # json.dumps cannot write a key twice: the header's text is made by hand
        norm = header["model.norm.weight"]
        hdr = dict(header, __metadata__={"format": "pt"})
        h = json.dumps(hdr)[:-1] + ', "model.norm.weight": ' + json.dumps(norm) + "}"
        h = h.encode() + b" " * (-len(h) % 8)
        with open(dst, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)
        return
    if a.kind == "overlap":
        hdr = dict(header, __metadata__={"format": "pt"})
        hdr["model.layers.0.self_attn.v_proj.weight"] = dict(header["model.layers.0.self_attn.k_proj.weight"])
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        with open(dst, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)
        return
    if a.kind == "perturb":
        ts = [(k, dt, s, (np.frombuffer(b, "<f4") + np.where(np.arange(len(b) // 4) == 5, 1e-2, 0)).astype("<f4")
               .tobytes() if k == up else b) for k, dt, s, b in ts]
    elif a.kind == "missing":
        ts = [t for t in ts if t[0] != up]
    elif a.kind == "shape":
        k0 = "model.layers.0.self_attn.k_proj.weight"
        ts = [(k, dt, [s[0] - 1] + s[1:], b[:len(b) - 4 * s[1]]) if k == k0 else (k, dt, s, b) for k, dt, s, b in ts]
    elif a.kind == "dtype":
        ts = [(k, "I32" if k == "model.norm.weight" else dt, s, b) for k, dt, s, b in ts]
    elif a.kind in ("headsame", "headdiff"):
        emb = next(b for k, dt, s, b in ts if k == "model.embed_tokens.weight")
        e = np.frombuffer(emb, "<f4").copy()
        if a.kind == "headdiff":
            e[7] += 1e-3
        ts.append(("lm_head.weight", "F32", next(s for k, dt, s, b in ts if k == "model.embed_tokens.weight"),
                   e.astype("<f4").tobytes()))
    elif a.kind == "special":
        f16 = [0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0x8000, 0x3C00, 0xFBFF]
        b16 = [0x0001, 0x8000, 0x7F7F, 0x3F80, 0x0080, 0xFF7F, 0x007F, 0xBF80]
        out = []
        for k, dt, s, b in ts:
            if k == "model.norm.weight":
                v = np.array([f16[i % len(f16)] for i in range(s[0])], "<u2")
                out.append((k, "F16", s, v.tobytes()))
            elif k == "model.layers.0.input_layernorm.weight":
                v = np.array([b16[i % len(b16)] for i in range(s[0])], "<u2")
                out.append((k, "BF16", s, v.tobytes()))
            else:
                out.append((k, dt, s, b))
        ts = out
    elif a.kind == "huge":
        out = []
        for k, dt, s, b in ts:
            if k == "model.embed_tokens.weight":
                e = np.frombuffer(b, "<f4").copy()
                e[3] = 3.4e38
                b = e.astype("<f4").tobytes()
            out.append((k, dt, s, b))
        ts = out
    elif a.kind == "ties":
        lows = [0x8000, 0x8000, 0x7FFF, 0x8001, 0x8000, 0x8000, 0x7FFF, 0x8001]
        his = [0x3C00, 0x3C01, 0x3C01, 0x3C00, 0xBC00, 0xBC01, 0xBC01, 0xBC00]
        out = []
        for k, dt, s, b in ts:
            if k == "model.embed_tokens.weight":
                e = np.frombuffer(b, "<u4").copy()
                e[:8] = [(h << 16) | lo for h, lo in zip(his, lows)]
                b = e.astype("<u4").tobytes()
            out.append((k, dt, s, b))
        ts = out
    elif a.kind == "f16":
        ts = [(k, "F16", s, np.frombuffer(b, "<f4").astype("<f2").tobytes()) for k, dt, s, b in ts]
    else:
        sys.exit("unknown mutation " + a.kind)
    write_st(dst, ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("forward")
    p.add_argument("dir")
    p.add_argument("--dump", required=True)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--transformers", action="store_true")
    p = sub.add_parser("greedy")
    p.add_argument("dir")
    p.add_argument("--prompt", required=True)
    p.add_argument("--got", required=True)
    p.add_argument("--max-tokens", type=int, default=12)
    p = sub.add_parser("weights")
    p.add_argument("dir")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--bf16", action="store_true")
    p = sub.add_parser("same")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--round", choices=["bf16", "f16"])
    p = sub.add_parser("imported")
    p.add_argument("dir")
    p.add_argument("ckpt")
    p = sub.add_parser("shards")
    p.add_argument("sharded")
    p.add_argument("single")
    p.add_argument("--max", type=int, required=True)
    p = sub.add_parser("mutate-index")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("kind")
    p = sub.add_parser("mutate")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("kind")
    a = ap.parse_args()
    {"forward": cmd_forward, "greedy": cmd_greedy, "weights": cmd_weights, "same": cmd_same,
     "mutate": cmd_mutate, "shards": cmd_shards, "mutate-index": cmd_mutate_index,
     "imported": cmd_imported}[a.cmd](a)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
