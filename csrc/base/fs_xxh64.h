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

/* The four lanes over the 32-byte stripes of p[0..n) (n a multiple of 32). */
static inline void fs_xxh_stripes(uint64_t v[4], const unsigned char *p, size_t n)
{
    uint64_t v1 = v[0], v2 = v[1], v3 = v[2], v4 = v[3];
    for (const unsigned char *end = p + n; p < end; p += 32) {
        v1 = fs_xxh_round(v1, fs_xxh_le64(p));
        v2 = fs_xxh_round(v2, fs_xxh_le64(p + 8));
        v3 = fs_xxh_round(v3, fs_xxh_le64(p + 16));
        v4 = fs_xxh_round(v4, fs_xxh_le64(p + 24));
    }
    v[0] = v1, v[1] = v2, v[2] = v3, v[3] = v4;
}

static inline void fs_xxh_lanes_init(uint64_t v[4], uint64_t seed)
{
    v[0] = seed + FS_XXH_P1 + FS_XXH_P2, v[1] = seed + FS_XXH_P2, v[2] = seed, v[3] = seed - FS_XXH_P1;
}

/* The hash of len bytes in all: the lanes (when len >= 32), then the tail
 * p[0..n) (n < 32: what the stripes left), then the avalanche. */
static inline uint64_t fs_xxh_finish(const uint64_t v[4], uint64_t seed, uint64_t len, const unsigned char *p,
                                     size_t n)
{
    const unsigned char *end = p + n;
    uint64_t h;
    if (len >= 32) {
        h = fs_xxh_rotl(v[0], 1) + fs_xxh_rotl(v[1], 7) + fs_xxh_rotl(v[2], 12) + fs_xxh_rotl(v[3], 18);
        h = fs_xxh_merge(h, v[0]);
        h = fs_xxh_merge(h, v[1]);
        h = fs_xxh_merge(h, v[2]);
        h = fs_xxh_merge(h, v[3]);
    } else {
        h = seed + FS_XXH_P5;
    }
    h += len;
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

/* XXH64 of data[0..len) with the given seed (never fails). */
static inline uint64_t fs_xxh64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t v[4];
    size_t whole = len & ~(size_t)31;
    fs_xxh_lanes_init(v, seed);
    fs_xxh_stripes(v, p, whole);
    return fs_xxh_finish(v, seed, len, p + whole, len - whole);
}

/* XXH64 of bytes that arrive in pieces: fs_xxh64_begin, fs_xxh64_feed
 * for each piece in order, fs_xxh64_end -- the value fs_xxh64 gives for
 * all of them at once.  A stripe cut between two pieces waits in buf. */
typedef struct {
    uint64_t v[4];
    uint64_t len, seed;
    unsigned char buf[32];
    size_t nbuf;
} fs_xxh64_state;

static inline void fs_xxh64_begin(fs_xxh64_state *s, uint64_t seed)
{
    fs_xxh_lanes_init(s->v, seed);
    s->len = 0;
    s->seed = seed;
    s->nbuf = 0;
}

static inline void fs_xxh64_feed(fs_xxh64_state *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->len += n;
    if (s->nbuf) {                       /* complete the stripe waiting */
        size_t take = 32 - s->nbuf < n ? 32 - s->nbuf : n;
        for (size_t i = 0; i < take; i++)
            s->buf[s->nbuf + i] = p[i];
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf < 32)
            return;
        fs_xxh_stripes(s->v, s->buf, 32);
        s->nbuf = 0;
    }
    size_t whole = n & ~(size_t)31;
    fs_xxh_stripes(s->v, p, whole);
    for (size_t i = whole; i < n; i++)
        s->buf[s->nbuf++] = p[i];
}

static inline uint64_t fs_xxh64_end(const fs_xxh64_state *s)
{
    return fs_xxh_finish(s->v, s->seed, s->len, s->buf, s->nbuf);
}

#endif
