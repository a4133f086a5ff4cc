/* fs_shape.h - tuple-space search: one hash table per filter shape.
 *
 * A filter's shape is (token count, positions of its one-level wildcards,
 * whether it ends in a rest wildcard).  "orders.*.created" has shape
 * (3, {1}, no rest); "orders.eu.>" has (2, {}, rest) -- for a rest shape
 * the count is of the tokens before the wildcard.
 *
 *   shapes ─► shape[0..n) (canonical order: count, rest, mask)
 *               │   table: open addressing, key -> entry node
 *               │   (the entry holds the whole filter, its plain ids and
 *               │    its queue groups, exactly like a literal-table entry)
 *   probe[k] ─► bitmap of the shapes a subject of k tokens must probe
 *
 * The key of a filter is the sum, over its literal tokens i, of
 * fs_pos_mix(hash of token i, i).  A subject computes the mix of every
 * token once; the key of any shape is then a prefix sum minus the mixes
 * at the shape's wildcard positions, so each probe costs O(wildcards)
 * arithmetic and one independent memory access -- a batch prefetches
 * all of them before it looks at any (fs_batch.c).
 *
 * Which filters get a shape: every filter with a wildcard and at most
 * FS_SHAPE_MAX_TOKENS tokens before its rest wildcard, while the shape
 * budget lasts (FS_SHAPE_MAX shapes; FS_SHAPE_MAX_PROBES shapes probed
 * by any one subject length).  The others stay in the trie (sublist.c).
 * Why these numbers: one probe costs 12-25 ns prefetched against a trie
 * that costs ~150 ns per dependent miss; light has 9 shapes, heavy 10.
 * Past ~24 probes per subject the probes cost more than a trie walk over
 * the same filters would, and filter sets with many distinct shapes
 * (deep MQTT topics with wildcards anywhere) are exactly the ones whose
 * shapes explode combinatorially -- the trie shares their prefixes.
 */
#ifndef FS_SHAPE_H
#define FS_SHAPE_H

#include <stdint.h>

#include "fs_token.h"

#define FS_SHAPE_MAX_TOKENS 48
#define FS_SHAPE_MAX 64
#define FS_SHAPE_MAX_PROBES 24

struct fs_sublist;
struct fs_node;

/* Node kind of a shape-table entry (beyond fs_tok_kind's values). */
#define FS_NODE_SHAPED 3

/* The mix of token hash h at position i; keys are sums of these. */
static inline uint64_t fs_pos_mix(uint32_t h, uint32_t i)
{
    uint64_t x = (uint64_t)h * 0x9E3779B97F4A7C15ull + ((uint64_t)i + 1) * 0xC2B2AE3D27D4EB4Full;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return x;
}

/* The key of every token of tok[from..n) -- a whole literal filter's key
 * in the literal table, or a subject's there -- added to sum (the key of
 * tok[0..from), when the caller has it already). */
static inline uint64_t fs_tokens_key(const fs_span *tok, uint32_t from, uint32_t n, uint64_t sum)
{
    for (uint32_t i = from; i < n; i++)
        sum += fs_pos_mix(tok[i].hash, i);
    return sum;
}

/* A shape as classified from a filter's tokens. */
typedef struct {
    uint64_t onemask;    /* bit i: token i is a one-level wildcard */
    uint32_t ntoks;      /* tokens, not counting a trailing rest wildcard */
    uint32_t rest;       /* 1: ends in a rest wildcard */
    uint64_t key;        /* the filter's key */
} fs_shape_of;

/* Classify the filter tokens t.  1: it has a shape (t has a wildcard and
 * few enough tokens), 0: it does not (a literal, or too deep). */
int fs_shape_classify(const fs_tokens *t, fs_shape_of *out);

#endif
