#!/usr/bin/env python3
"""Draws a run's trace.json (one row per rank) as a PNG, with only Python's standard library.

  python3 validation/bench/trace_png.py RUN/trace.json OUT.png [--step S] [--width 1400]

Colours: forward blue, backward green, optimizer orange, pipeline flush grey, gradient waits red,
evaluation and checkpoints purple. --step draws only that step (0-based), else the whole trace."""
import argparse
import json
import struct
import zlib

COLOURS = {"forward": (66, 133, 244), "backward": (52, 168, 83), "optimizer": (251, 140, 0),
           "pipeline flush": (150, 150, 150), "gradient all-reduce wait": (219, 68, 55),
           "evaluation": (142, 36, 170), "checkpoint": (142, 36, 170)}


def write_png(path, w, h, pixels):
    raw = b"".join(b"\x00" + bytes(pixels[y * w * 3:(y + 1) * w * 3]) for y in range(h))

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--step", type=int)
    ap.add_argument("--width", type=int, default=1400)
    a = ap.parse_args()
    ev = [e for e in json.load(open(a.trace))["traceEvents"] if e["ph"] == "X"]
    if a.step is not None:
        ev = [e for e in ev if e["args"].get("step") == a.step]
    ranks = sorted({e["pid"] for e in ev})
    t0, t1 = min(e["ts"] for e in ev), max(e["ts"] + e["dur"] for e in ev)
    row, gap, w = 28, 6, a.width
    h = len(ranks) * (row + gap) + gap
    px = [255] * (w * h * 3)
    for e in ev:
        y0 = gap + ranks.index(e["pid"]) * (row + gap)
        x0 = int((e["ts"] - t0) / (t1 - t0) * (w - 1))
        x1 = max(x0 + 1, int((e["ts"] + e["dur"] - t0) / (t1 - t0) * (w - 1)))
        c = COLOURS.get(e["name"], (0, 0, 0))
        for y in range(y0, y0 + row):
            for x in range(x0, min(x1, w)):
                edge = x == x0 or y in (y0, y0 + row - 1)  # a dark outline separates neighbouring spans
                px[(y * w + x) * 3:(y * w + x) * 3 + 3] = (c[0] // 2, c[1] // 2, c[2] // 2) if edge else c
    write_png(a.out, w, h, px)
    print(f"{a.out}: {len(ranks)} ranks, {len(ev)} spans, {(t1 - t0) / 1e3:.1f} ms")


if __name__ == "__main__":
    main()
