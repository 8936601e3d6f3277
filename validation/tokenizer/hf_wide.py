"""Builds the tokenizer.json of validation/test_tokenizer_hf_wide.sh: a vocabulary of 50258 + SHIFT
ids from GPT-2's encoder.json and vocab.bpe (.ci/deps.sh fetches them; nothing is downloaded here),
in Llama-3's style (Split with Llama-3's pattern, Isolated, then ByteLevel without its own pattern;
merges as pairs; ignore_merges).

    python3 hf_wide.py GPT2_DIR SHIFT OUT_DIR

Ids: GPT-2's 256 byte tokens keep theirs (0..255); SHIFT filler tokens ("\\tfill<id>" through the
byte-level map: no merge makes them, no piece is one) take 256..255+SHIFT; GPT-2's other tokens
follow in reverse order (GPT-2's id k, k >= 256, becomes 50512 + SHIFT - k), so its commonest
tokens take the highest ids (SHIFT 20000: " the", GPT-2's 262, is 70250); the added token <|wide|>
is the last id, 50257 + SHIFT, and <|endoftext|> (special) is 256 + SHIFT. OUT_DIR/tokenizer.json
is written (no tokenizer_config.json: no eos_token).
"""
import json
import os
import sys

LLAMA3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def added(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def main(gpt2_dir, shift, out_dir):
    with open(os.path.join(gpt2_dir, "encoder.json"), encoding="utf-8") as f:
        gpt2 = json.load(f)
    with open(os.path.join(gpt2_dir, "vocab.bpe"), encoding="utf-8") as f:
        merges = [line.split(" ") for line in f.read().split("\n")[1:] if line]
    n = len(gpt2)  # 50257
    vocab = {}
    for tok, k in gpt2.items():
        vocab[tok] = k if k < 256 else (n - 1) + 256 + shift - k
    for i in range(256, 256 + shift):
        vocab["ĉfill%d" % i] = i  # 'ĉ' is the byte-level map's tab
    vocab["<|wide|>"] = n + shift
    assert len(vocab) == n + shift + 1 and sorted(vocab.values()) == list(range(n + shift + 1))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [added(vocab["<|endoftext|>"], "<|endoftext|>"), added(n + shift, "<|wide|>")],
         "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False}, byte_level]},
         "post_processor": None,
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                   "vocab": vocab, "merges": merges}}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    print("%d ids: ' the' is %d, ' God' %d, <|endoftext|> %d, <|wide|> %d" %
          (len(vocab), vocab["Ġthe"], vocab["ĠGod"], vocab["<|endoftext|>"], vocab["<|wide|>"]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("usage: python3 hf_wide.py GPT2_DIR SHIFT OUT_DIR")
        sys.exit(2)
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
