#!/usr/bin/env python3
"""Reseal a MindPipe checkpoint edited after it was written (src/ckpt/filesum.h; the tests edit /state
with h5py to check its range checks, and this is a second implementation of the file checksum): keeps the header's
user block size and extents, recomputes length and XXH64 hash. Usage: filesum_reseal.py FILE..."""
import struct, sys

M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)

def rotl(x, r): return ((x << r) | (x >> (64 - r))) & M
def rnd(acc, v): return rotl((acc + v * P2) & M, 31) * P1 & M
def merge(h, v): return ((h ^ rnd(0, v)) * P1 + P4) & M

def xxh64(b, seed=0):
    n, p = len(b), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while n - p >= 32:
            for i in range(4):
                v[i] = rnd(v[i], struct.unpack_from('<Q', b, p + 8 * i)[0])
            p += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for x in v: h = merge(h, x)
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while n - p >= 8:
        h = (rotl(h ^ rnd(0, struct.unpack_from('<Q', b, p)[0]), 27) * P1 + P4) & M; p += 8
    if n - p >= 4:
        h = (rotl(h ^ (struct.unpack_from('<I', b, p)[0] * P1 & M), 23) * P2 + P3) & M; p += 4
    while p < n:
        h = rotl(h ^ (b[p] * P5 & M), 11) * P1 & M; p += 1
    h ^= h >> 33; h = h * P2 & M; h ^= h >> 29; h = h * P3 & M; h ^= h >> 32
    return h

def reseal(path):
    data = bytearray(open(path, 'rb').read())
    assert data[:16] == b'MINDPIPE-FILESUM', path + ': no file checksum header'
    ub, = struct.unpack_from('<I', data, 20)
    chunk, n = struct.unpack_from('<QQ', data, 32)
    ext = [struct.unpack_from('<QQ', data, 56 + 16 * i) for i in range(n)]
    struct.pack_into('<Q', data, 24, len(data))  # new length
    struct.pack_into('<Q', data, 48, 0)
    keep = bytearray(len(data))                  # 1 where hashed
    keep[ub:] = b'\x01' * (len(data) - ub)
    for off, ln in ext: keep[off:off + ln] = b'\x00' * ln
    hashes = b''
    for j, start in enumerate(range(ub, len(data), chunk)):
        end = min(start + chunk, len(data))
        part = bytes(data[i] for i in range(start, end) if keep[i])
        hashes += struct.pack('<Q', xxh64(part, j))
    struct.pack_into('<Q', data, 48, xxh64(bytes(data[:ub]) + hashes, 0))
    open(path, 'r+b').write(data)

if __name__ == '__main__':
    for f in sys.argv[1:]: reseal(f)
