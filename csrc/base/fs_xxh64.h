/* fs_xxh64.h - XXH64, the 64-bit xxHash of Yann Collet.
 *
 * Origin: written for topicmatch from the algorithm's specification
 * (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md,
 * "XXH64 Algorithm Description"), not copied from xxhash.h: four lanes over
 * 32-byte stripes, then the 8-, 4- and 1-byte tails and the avalanche.  It
 * is the checksum of the serialized format (fs_serial.h, docs/FORMAT.md:
 * seed 0), so its output is fixed: XXH64("", 0) = 0xEF46DB3751D8E999,
 * XXH64("abc", 0) = 0x44BC2CF5AD770999.  Reads bytes one by one into
 * little-endian words: any alignment, any host byte order.
 */
#ifndef FS_XXH64_H
#define FS_XXH64_H

#include <stddef.h>
#include <stdint.h>

#define FS_XXH_P1 0x9E3779B185EBCA87ull
#define FS_XXH_P2 0xC2B2AE3D27D4EB4Full
#define FS_XXH_P3 0x165667B19E3779F9ull
#define FS_XXH_P4 0x85EBCA77C2B2AE63ull
#define FS_XXH_P5 0x27D4EB2F165667C5ull

static inline uint64_t fs_xxh_rotl(uint64_t x, unsigned r) { return (x << r) | (x >> (64 - r)); }

/* Spelled out so the compiler turns it into one load. */
static inline uint64_t fs_xxh_le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static inline uint64_t fs_xxh_le32(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

static inline uint64_t fs_xxh_round(uint64_t acc, uint64_t in)
{
    acc += in * FS_XXH_P2;
    return fs_xxh_rotl(acc, 31) * FS_XXH_P1;
}

static inline uint64_t fs_xxh_merge(uint64_t acc, uint64_t v)
{
    acc ^= fs_xxh_round(0, v);
    return acc * FS_XXH_P1 + FS_XXH_P4;
}

/* XXH64 of data[0..len) with the given seed (never fails). */
static inline uint64_t fs_xxh64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + FS_XXH_P1 + FS_XXH_P2, v2 = seed + FS_XXH_P2, v3 = seed, v4 = seed - FS_XXH_P1;
        const unsigned char *limit = end - 32;
        do {
            v1 = fs_xxh_round(v1, fs_xxh_le64(p));
            v2 = fs_xxh_round(v2, fs_xxh_le64(p + 8));
            v3 = fs_xxh_round(v3, fs_xxh_le64(p + 16));
            v4 = fs_xxh_round(v4, fs_xxh_le64(p + 24));
            p += 32;
        } while (p <= limit);
        h = fs_xxh_rotl(v1, 1) + fs_xxh_rotl(v2, 7) + fs_xxh_rotl(v3, 12) + fs_xxh_rotl(v4, 18);
        h = fs_xxh_merge(h, v1);
        h = fs_xxh_merge(h, v2);
        h = fs_xxh_merge(h, v3);
        h = fs_xxh_merge(h, v4);
    } else {
        h = seed + FS_XXH_P5;
    }
    h += (uint64_t)len;
    while (end - p >= 8) {
        h ^= fs_xxh_round(0, fs_xxh_le64(p));
        h = fs_xxh_rotl(h, 27) * FS_XXH_P1 + FS_XXH_P4;
        p += 8;
    }
    if (end - p >= 4) {
        h ^= fs_xxh_le32(p) * FS_XXH_P1;
        h = fs_xxh_rotl(h, 23) * FS_XXH_P2 + FS_XXH_P3;
        p += 4;
    }
    while (p < end) {
        h ^= *p++ * FS_XXH_P5;
        h = fs_xxh_rotl(h, 11) * FS_XXH_P1;
    }
    h ^= h >> 33;
    h *= FS_XXH_P2;
    h ^= h >> 29;
    h *= FS_XXH_P3;
    h ^= h >> 32;
    return h;
}

#endif
