#!/usr/bin/env python3
"""Writes llm.c-layout .bin token shards for the tests: a header of 256 little-endian int32
(magic, version, token count, zeros), then the tokens, little-endian (uint16: magic 20240520 version 1;
uint32: magic 20240801 version 7). Token j of the whole stream (shards in order) is
(j * 7919 + 13) % vocab, so a reader can check every value without a copy.

usage: write_bin_shards.py PREFIX NSHARDS TOKENS_PER_SHARD VOCAB {u16|u32} [--bad-magic|--truncate|--big-token]
  writes PREFIX_000000.bin ... ; --bad-magic: shard 0's magic is 20240521; --truncate: shard 0 loses its
  last token's bytes; --big-token: token 5 of shard 0 is VOCAB (one past the largest allowed).
Only the standard library: the writer runs wherever python3 does."""
import array
import sys

MAGIC = {"u16": (20240520, 1, "H"), "u32": (20240801, 7, "I")}


def token(j, vocab):
    return (j * 7919 + 13) % vocab


def main(argv):
    prefix, nshards, per, vocab, kind = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
    flaw = argv[6] if len(argv) > 6 else ""
    magic, version, code = MAGIC[kind]
    for s in range(nshards):
        toks = array.array(code, (token(s * per + i, vocab) for i in range(per)))
        if flaw == "--big-token" and s == 0:
            toks[5] = vocab
        head = array.array("i", [0] * 256)
        head[0] = magic + (1 if flaw == "--bad-magic" and s == 0 else 0)
        head[1], head[2] = version, per
        if sys.byteorder != "little":
            head.byteswap()
            toks.byteswap()
        body = toks.tobytes()
        if flaw == "--truncate" and s == 0:
            body = body[: -toks.itemsize]
        with open("%s_%06d.bin" % (prefix, s), "wb") as f:
            f.write(head.tobytes())
            f.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
