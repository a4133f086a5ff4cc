"""XXH64, Yann Collet's xxHash (64-bit), written from its specification in
plain Python: the checksum of both index formats (docs/FORMAT.md), which the
tests' own codecs (test_serial.py for version 2, image_codec.py for the
image) compute to forge images with a valid checksum.  test_serial.py
checks it against the reference vectors."""
import struct

M64 = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def xxh64(data, seed=0):
    """XXH64 (the formats' checksum uses seed 0), its 32-byte stripes
    unpacked in bulk: the hostile-image sweeps reseal thousands of images."""
    data = bytes(data)
    n, i = len(data), 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & M64, (seed + _P2) & M64, seed, (seed - _P1) & M64
        i = n - n % 32
        for a, b, c, d in struct.iter_unpack("<4Q", data[:i]):
            v1 = (v1 + a * _P2) & M64
            v1 = (((v1 << 31) | (v1 >> 33)) & M64) * _P1 & M64
            v2 = (v2 + b * _P2) & M64
            v2 = (((v2 << 31) | (v2 >> 33)) & M64) * _P1 & M64
            v3 = (v3 + c * _P2) & M64
            v3 = (((v3 << 31) | (v3 >> 33)) & M64) * _P1 & M64
            v4 = (v4 + d * _P2) & M64
            v4 = (((v4 << 31) | (v4 >> 33)) & M64) * _P1 & M64
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & M64
        for x in (v1, v2, v3, v4):
            h = ((h ^ (_rotl(x * _P2 & M64, 31) * _P1 & M64)) * _P1 + _P4) & M64
    else:
        h = (seed + _P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        k = struct.unpack_from("<Q", data, i)[0]
        h ^= _rotl(k * _P2 & M64, 31) * _P1 & M64
        h = (_rotl(h, 27) * _P1 + _P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & M64
        h = (_rotl(h, 23) * _P2 + _P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & M64
        h = (_rotl(h, 11) * _P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & M64
    h ^= h >> 29
    h = (h * _P3) & M64
    h ^= h >> 32
    return h
