"""Builds the SentencePiece-style ("\u2581" for ' ') BPE tokenizer.json files that
validation/test_tokenizer_hf_sp.sh checks `mindpipe`'s hf tokenizer with, from a vocabulary made
here (nothing is downloaded): <unk> 0, <s> 1, </s> 2, the byte pieces <0x00>..<0xFF> (3..258),
"\u2581", the printable ASCII characters but ' ', then MERGES merges learnt from TEXT's first 200000
bytes (BPE over its words, each with its leading "\u2581"; ties to the pair first seen), each a token.

    python3 hf_sp_build.py STYLE TEXT OUT_DIR

STYLE:
  norm      tokenizers < 0.14 (Llama-2-7b-hf, TinyLlama): normalizer Sequence[Prepend "\u2581",
            Replace " " -> "\u2581"], pre_tokenizer null, byte_fallback, fuse_unk, decoder
            Sequence[Replace "\u2581" -> " ", ByteFallback, Fuse, Strip " " 1 0];
  unk       norm's, without byte_fallback: a character that is no token is <unk>, a run of them one;
  meta      newer (Mistral, re-saved Llama 2): normalizer null, pre_tokenizer Metaspace
            (prepend_scheme "first", split false), norm's decoder;
  always    meta's with prepend_scheme "always" and decoder Metaspace.
Added tokens: <unk>, <s>, </s> (special) and "MindPipe" (not special; normalized only where there is
no normalizer). OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json (eos_token </s>).
"""
import collections
import json
import os
import sys

MARK = "\u2581"
MERGES = 400


def added(i, content, special, normalized=False):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": special}


def learn(text, n):
    """n merges of BPE over text's words ("\u2581" + word), most frequent pair first, ties to the
    pair seen first; returns the merges as pairs."""
    words = collections.Counter(MARK + w for w in text.split())
    seqs = {w: list(w) for w in words}
    merges = []
    while len(merges) < n:
        pairs, first = collections.Counter(), {}
        for w, c in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
                first.setdefault((a, b), len(first))
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], -first[p]))
        merges.append(best)
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def build(style, text):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    vocab[MARK] = len(vocab)
    for c in range(33, 127):
        vocab[chr(c)] = len(vocab)
    kept = []
    for a, b in learn(text, MERGES):
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
        kept.append([a, b])
    vocab["MindPipe"] = len(vocab)
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": style != "unk", "vocab": vocab,
             "merges": kept}
    decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": MARK}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": MARK}, {"type": "Replace", "pattern": {"String": " "}, "content": MARK}]}
    pre = None
    if style in ("meta", "always"):
        normalizer = None
        pre = {"type": "Metaspace", "replacement": MARK, "prepend_scheme": "first" if style == "meta" else "always",
               "split": False}
        if style == "always":
            decoder = {"type": "Metaspace", "replacement": MARK, "prepend_scheme": "always", "split": False}
    elif style not in ("norm", "unk"):
        raise SystemExit("style '%s': norm, unk, meta or always" % style)
    toks = [added(0, "<unk>", True), added(1, "<s>", True), added(2, "</s>", True),
            added(vocab["MindPipe"], "MindPipe", False, normalizer is None)]
    json_ = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": toks, "normalizer": normalizer,
             "pre_tokenizer": pre, "post_processor": None, "decoder": decoder, "model": model}
    return json_, {"eos_token": "</s>", "bos_token": "<s>", "model_max_length": 4096}


def main(style, text_file, out_dir):
    with open(text_file, encoding="utf-8", errors="replace") as f:
        text = f.read(200000)
    tok, cfg = build(style, text)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    print("%s: %d ids, %d merges" % (style, len(tok["model"]["vocab"]), len(tok["model"]["merges"])))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: python3 hf_sp_build.py norm|unk|meta|always TEXT OUT_DIR")
    main(*sys.argv[1:])
