/* fs_token.h - splitting subjects and filters into tokens, all dialects,
 * by the dialects' rules (fs_dialect.h); one filter against one subject.
 *
 * A token is a span (offset, length) into the caller's bytes; nothing is
 * copied.  The span array starts inline and moves to the heap only for
 * subjects deeper than FS_TOKENS_INLINE tokens.
 */
#ifndef FS_TOKEN_H
#define FS_TOKEN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs_dialect.h"
#include "fs_status.h"

#define FS_TOKENS_INLINE 16

typedef struct {
    uint32_t off;
    uint32_t len;
    uint32_t hash;       /* fs_hash of the token's bytes */
    uint32_t kind;       /* fs_tok_kind */
} fs_span;

typedef struct {
    fs_span *tok;        /* tok == inline_ or a heap array */
    uint32_t n;
    uint32_t cap;
    /* 1: no wildcard in a filter's first level matches this first level
     * (MQTT's '$' rule: a subject's, or a filter's literal, first level
     * starting with '$'); 0 otherwise, and always in NATS and AMQP.  The
     * rule is decided here, by the tokenizer, once per subject or filter:
     * the walks choose their structures by it (the shapes a subject
     * probes, fs_shapes.probe[hidden]; the trie root's wildcard children)
     * and never look at the '$' themselves. */
    uint32_t hidden;
    fs_span inline_[FS_TOKENS_INLINE];
} fs_tokens;

void fs_tokens_init(fs_tokens *t);
void fs_tokens_free(fs_tokens *t);

/* The tokenizer's one decision about a first level (fs_tokens.hidden),
 * the only reader of the dialects' '$' rule (dollar_hidden): does no
 * first-level wildcard match the level tok[0..len)?  MQTT: it starts with
 * '$'.  With a constant d it folds: NATS and AMQP give 0 unread.  The
 * loaders ask it of a stored trie's root levels (fs_trie_hide_root). */
static inline uint32_t fs_first_level_hidden(fs_dialect d, const char *tok, size_t len)
{
    return fs_rules(d)->dollar_hidden && len && tok[0] == '$';
}

/* Split s[0..len) into t, and decide t->hidden.  is_filter admits
 * wildcards.  Returns FS_OK, FS_EINVAL (err filled in) or FS_ENOMEM.
 * Only AMQP accepts len 0 (the key of zero words: t->n == 0); every other
 * valid input has t->n >= 1. */
int fs_tokenize(fs_dialect d, const char *s, size_t len, int is_filter,
                fs_tokens *t, fs_error *err);

/* Does filter f (tokens ft) match the subject s (tokens st)?  1 or 0.
 * AMQP: dynamic programming over (filter token, subject word), at most
 * FS_AMQP_MAX_WORDS squared steps, no backtracking. */
int fs_tokens_match(fs_dialect d, const char *f, const fs_tokens *ft,
                    const char *s, const fs_tokens *st);
/* Does filter (MQTT: "$share/G/f" too) match subject?  1 yes, 0 no,
 * FS_EINVAL (err names which: *which = 0 filter, 1 subject), FS_ENOMEM. */
int fs_subject_matches(fs_dialect d, const char *filter, size_t flen,
                       const char *subject, size_t slen, int *which, fs_error *err);
/* Is there a (valid) subject both filters match?  1 or 0.  AMQP: the
 * cheapest key in the product of the two patterns (positions i, j), row by
 * row, must fit in 255 bytes. */
int fs_filters_intersect(fs_dialect d, const char *a, const fs_tokens *at,
                         const char *b, const fs_tokens *bt);

/* 8 bytes as a little-endian integer, whatever the host's byte order
 * (hashes feed queue picks, which must agree across machines). */
static inline uint64_t fs_load_le64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* Fewer than 8 bytes as the low bytes of a word, one byte at a time: a
 * hash's tail where no whole word around it may be read. */
static inline uint64_t fs_load_bytes(const char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)(unsigned char)p[i] << (8 * i);
    return v;
}

/* fs_hash's starting state for a string of n bytes. */
#define FS_HASH_SEED(n) (0x9E3779B97F4A7C15ull ^ (uint64_t)(n))

/* One step of fs_hash: a whole word w into h.  Every hash of a string
 * (fs_hash_between, fs_hash) takes its words through this step, so that
 * they give the same value for the same bytes (the cache's keys depend on
 * it). */
static inline uint64_t fs_hash_word(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

/* The last step of fs_hash: the final (partial) word v into h. */
static inline uint32_t fs_hash_last(uint64_t h, uint64_t v)
{
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 32;
    h *= 0xbf58476d1ce4e5b9ull;
    return (uint32_t)(h >> 32);
}

/* Fast hash of a short token (not cryptographic; the same on every
 * machine).  Bytes from begin to end may be read (begin <= p, p + n <=
 * end): a tail shorter than a word is read as one word, forwards when
 * that stays before end, else backwards when it stays after begin. */
static inline uint32_t fs_hash_between(const char *begin, const char *p, size_t n, const char *end)
{
    uint64_t h = FS_HASH_SEED(n);
    while (n >= 8) {
        h = fs_hash_word(h, fs_load_le64(p));
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    if (n && end - p >= 8)
        v = fs_load_le64(p) & ((1ull << (8 * n)) - 1);
    else if (n && p + n - begin >= 8)
        v = fs_load_le64(p + n - 8) >> (8 * (8 - n));
    else
        v = fs_load_bytes(p, n);
    return fs_hash_last(h, v);
}

/* fs_hash of fewer than 8 bytes already in a word (v: the bytes, zeros
 * above them): the tokenizer's common case, without reloading them. */
static inline uint32_t fs_hash_short(uint64_t v, size_t n)
{
    return fs_hash_last(FS_HASH_SEED(n), v);
}

static inline uint32_t fs_hash_within(const char *p, size_t n, const char *end)
{
    return fs_hash_between(p, p, n, end);
}

/* Stored token bytes (a node's token, a cache key) are allocated rounded
 * up to whole 8-byte words (FS_TOK_ALLOC), so comparisons can read the
 * stored side a word at a time. */
#define FS_TOK_ALLOC(len) (((size_t)(len) + 7u) & ~(size_t)7u)

/* Equality of n bytes: a is word-padded (a node token, a cache key); b may
 * be read up to b_end.  A tail shorter than a word is compared as the last
 * 8 bytes of both, overlapping words already equal, when n allows it. */
static inline int fs_tok_eq_within(const char *a, const char *b, uint32_t n, const char *b_end)
{
    if (n >= 8) {
        uint32_t k = 0;
        for (; k + 8 <= n; k += 8)
            if (fs_load_le64(a + k) != fs_load_le64(b + k))
                return 0;
        return k == n || fs_load_le64(a + n - 8) == fs_load_le64(b + n - 8);
    }
    if (n == 0)
        return 1;
    if (b_end - b >= 8)
        return ((fs_load_le64(a) ^ fs_load_le64(b)) & ((1ull << (8 * n)) - 1)) == 0;
    while (n--)
        if (*a++ != *b++)
            return 0;
    return 1;
}

/* fs_hash_within(p, n, p + n), written for a whole string: two words a
 * step, and the tail (after at least one word) as the word that ends at
 * its end -- the same value with fewer steps (a subject of ~28 bytes:
 * ~8 instructions fewer; the cache hashes every subject it looks up). */
static inline uint32_t fs_hash(const char *p, size_t n)
{
    uint64_t h = FS_HASH_SEED(n);
    const char *q = p;
    size_t k = n;
    for (; k >= 16; k -= 16, q += 16)
        h = fs_hash_word(fs_hash_word(h, fs_load_le64(q)), fs_load_le64(q + 8));
    if (k >= 8) {
        h = fs_hash_word(h, fs_load_le64(q));
        q += 8;
        k -= 8;
    }
    uint64_t v = 0;
    if (k && n >= 8)
        v = fs_load_le64(q + k - 8) >> (8 * (8 - k));
    else
        v = fs_load_bytes(q, k);
    return fs_hash_last(h, v);
}

#endif
