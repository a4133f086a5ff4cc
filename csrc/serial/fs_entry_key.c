/* fs_entry_key.c - a stored table entry's filter checked and keyed in one
 * pass over its bytes, where its table says what its tokens must be
 * (fs_entry_key.h).  The image verifier's fast path: it spares an entry
 * the tokenizer's spans, which only its key needed.
 *
 * The pass proves only the common case, from the dialect's rules
 * (fs_rules): at most SHORT_MAX bytes, ASCII, no byte below the rules'
 * scan_below (the bytes the tokenizer looks closer at: NATS's controls
 * and whitespace, MQTT's NUL), no empty token where the dialect has none,
 * a wildcard character of MQTT's only as a whole token.  Anything else --
 * UTF-8, a control byte NATS allows, a long filter -- is "not proven",
 * and the tokenizer decides.  As the tokenizer's vector path, it reads
 * the filter's words once into masks of a bit per byte (separators, the
 * wildcard characters), then cuts the tokens at the separators' bits and
 * hashes each from one word. */
#include "fs_entry_key.h"

#include <string.h>

#include "fs_bits.h"
#include "fs_token.h"

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define LOW7 0x7F7F7F7F7F7F7F7Full
/* What the bytes after a filter's end read as in its last word: a letter,
 * which no rule flags. */
#define PAD (ONES * 'a')
/* The longest filter the pass takes: its end's bit fits in a mask. */
#define SHORT_MAX 63u

/* A filter's bytes copied as filter_masks reads them, zeros after: every
 * token of 1 to 7 bytes is one load from its start, whatever may be read
 * after the filter in its image. */
typedef struct {
    char b[SHORT_MAX + 1 + 16];
} filter_copy;

/* The masks of a filter f[0..len), 1 <= len <= SHORT_MAX, f[0 ..
 * FS_TOK_ALLOC(len)) readable, its bytes into copy (zeroed): bit i of
 * *seps for a separator at i; of
 * *wild, where the dialect's wildcard characters are errors inside a
 * token (MQTT) and the table has wildcards (want), for one of them (else
 * 0: in the literal table there may be none).  0 when a byte needs the
 * tokenizer's look.  On x86-64 16 bytes at a time (SSE2, as the
 * tokenizer's vector path), elsewhere a word at a time (the bytes after
 * len read as PAD); the same masks either way. */
/* FS_ENTRY_KEY_WORDS: the word-at-a-time path on x86-64 too (to test it). */
#if (defined(__x86_64__) || defined(_M_X64) || defined(_M_AMD64)) && !defined(FS_ENTRY_KEY_WORDS)
#include <emmintrin.h>

static inline uint64_t movemask(__m128i v) { return (uint64_t)(unsigned)_mm_movemask_epi8(v); }

FS_ALWAYS_INLINE int filter_masks(fs_dialect d, const char *f, size_t len, int want, filter_copy *copy,
                                  uint64_t *seps, uint64_t *wild)
{
    const fs_dialect_rules *R = fs_rules(d);
    int mark_wild = R->one_not_whole && want, no_wild = R->one_not_whole && !want;
    size_t a = FS_TOK_ALLOC(len);
    uint64_t look = 0, s = 0, w = 0;
    for (size_t base = 0; base < len; base += 16) {
        /* 16 bytes, or the last 8 where only they are readable */
        __m128i v = base + 16 <= a ? _mm_loadu_si128((const __m128i *)(const void *)(f + base))
                                   : _mm_loadl_epi64((const __m128i *)(const void *)(f + base));
        _mm_storeu_si128((__m128i *)(void *)(copy->b + base), v);
        /* signed: non-ASCII bytes are below any scan_below too */
        look |= movemask(_mm_cmplt_epi8(v, _mm_set1_epi8((char)R->scan_below))) << base;
        s |= movemask(_mm_cmpeq_epi8(v, _mm_set1_epi8(R->sep))) << base;
        if (mark_wild || no_wild)
            w |= movemask(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(R->one)),
                                       _mm_cmpeq_epi8(v, _mm_set1_epi8(R->rest)))) << base;
    }
    uint64_t inside = (1ull << len) - 1;
    if ((look | (no_wild ? w : 0)) & inside)
        return 0;
    *seps = s & inside;
    *wild = mark_wild ? w & inside : 0;
    return 1;
}
#else
/* Bit 7 of each byte of x equal to c.  Exact: the cheaper zero-byte test
 * can also flag the byte above a match. */
static inline uint64_t bytes_equal(uint64_t x, unsigned char c)
{
    uint64_t y = x ^ (ONES * c);
    return ~(((y & LOW7) + LOW7) | y | LOW7);
}

/* Bit 7 of each byte of m (the others zero) packed into the low 8 bits:
 * byte k's into bit k. */
static inline uint64_t pack_bytes(uint64_t m) { return ((m >> 7) * 0x0102040810204080ull) >> 56; }

/* Whether some byte of x is c (exact for existence, the zero-byte test). */
static inline uint64_t has_byte(uint64_t x, unsigned char c)
{
    uint64_t y = x ^ (ONES * c);
    return (y - ONES) & ~y & HIGHS;
}

/* Nonzero when some byte of x needs the tokenizer's closer look: non-ASCII,
 * below scan_below (whether any byte is, exactly, for c <= 0x80), or --
 * where the dialect's wildcard characters are errors inside a token
 * (one_not_whole) and no_wild asks -- a wildcard character. */
FS_ALWAYS_INLINE uint64_t needs_look(fs_dialect d, uint64_t x, int no_wild)
{
    const fs_dialect_rules *R = fs_rules(d);
    uint64_t look = (x & HIGHS) | ((x - ONES * (unsigned char)R->scan_below) & ~x & HIGHS);
    if (R->one_not_whole && no_wild)
        look |= has_byte(x, (unsigned char)R->one) | has_byte(x, (unsigned char)R->rest);
    return look;
}

FS_ALWAYS_INLINE int filter_masks(fs_dialect d, const char *f, size_t len, int want, filter_copy *copy,
                                  uint64_t *seps, uint64_t *wild)
{
    const fs_dialect_rules *R = fs_rules(d);
    int mark_wild = R->one_not_whole && want;
    uint64_t s = 0, w = 0;
    for (size_t base = 0; base < len; base += 8) {
        uint64_t x = fs_load_le64(f + base);
        memcpy(copy->b + base, f + base, 8);
        if (len - base < 8) {
            uint64_t inside = (1ull << (8 * (len - base))) - 1;
            x = (x & inside) | (PAD & ~inside);
        }
        if (needs_look(d, x, !want))
            return 0;
        s |= pack_bytes(bytes_equal(x, (unsigned char)R->sep)) << base;
        if (mark_wild)
            w |= pack_bytes(bytes_equal(x, (unsigned char)R->one) | bytes_equal(x, (unsigned char)R->rest)) << base;
    }
    *seps = s;
    *wild = w;
    return 1;
}

#endif

/* The fs_hash of the n bytes at start of a filter's copy. */
static inline uint32_t token_hash(const filter_copy *copy, size_t start, size_t n)
{
    if (FS_UNLIKELY(n - 1 >= 7))    /* empty, or a word or longer */
        return fs_hash_between(copy->b, copy->b + start, n, copy->b + sizeof(copy->b));
    return fs_hash_short(fs_load_le64(copy->b + start) & ((1ull << (8 * n)) - 1), n);
}

/* Is the token of n bytes at t what position i of the table allows -- in
 * the literal table (want NULL) a literal, in a shape's table a one-level
 * wildcard at the mask's bits, the rest wildcard at ntoks, a literal
 * elsewhere -- and *literal whether it is one (its mix goes into the key)?
 * A token after the rest wildcard is a literal here: the count of tokens
 * refuses it. */
FS_ALWAYS_INLINE int token_fits(fs_dialect d, const fs_shape_of *want, uint32_t i, const char *t, size_t n,
                                int *literal)
{
    fs_tok_kind kind = fs_token_kind(d, t, n), need = FS_TOK_LITERAL;
    if (want && i < want->ntoks && ((want->onemask >> i) & 1))
        need = FS_TOK_ONE;
    else if (want && i == want->ntoks)
        need = FS_TOK_REST;
    *literal = kind == FS_TOK_LITERAL;
    return kind == need;
}

/* The tokens of a filter whose masks are seps and wild (filter_masks),
 * each held to its place (token_fits), their key into *key; in a shape's
 * table, MQTT's wildcard characters all whole tokens (as many as the
 * shape's wildcards, all at their places) and the count of tokens the
 * shape's.  1, or 0: not proven. */
FS_ALWAYS_INLINE int cut_tokens(fs_dialect d, const filter_copy *copy, size_t len, const fs_shape_of *want,
                                uint64_t seps, uint64_t wild, uint64_t *key)
{
    const fs_dialect_rules *R = fs_rules(d);
    uint64_t cuts = seps | 1ull << len;          /* every token's end */
    if (!R->empty_tokens && (cuts & (seps << 1 | 1)))
        return 0;                                /* a token that ends where it starts */
    size_t start = 0;
    uint64_t sum = 0;
    uint32_t i = 0, wildcards = 0;
    for (uint64_t c = cuts; c; c &= c - 1, i++) {
        size_t end = fs_ctz64(c), n = end - start;
        int literal = 1;
        /* a token of one byte may be a wildcard: only a shape's table has them */
        if ((want || n == 1) && !token_fits(d, want, i, copy->b + start, n, &literal))
            return 0;
        if (literal)
            sum += fs_pos_mix(token_hash(copy, start, n), i);
        else
            wildcards++;
        start = end + 1;
    }
    if (want && (i != want->ntoks + want->rest || (R->one_not_whole && fs_popcount64(wild) != wildcards)))
        return 0;
    *key = sum;
    return 1;
}

FS_ALWAYS_INLINE int entry_key_in(fs_dialect d, const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    const fs_dialect_rules *R = fs_rules(d);
    if (len == 0) {              /* AMQP's key of zero words: no token, key 0 */
        *key = 0;
        return !want && R->empty_ok;
    }
    uint64_t seps, wild;
    filter_copy copy = {.b = {0}};
    /* a shape has a wildcard and at most FS_SHAPE_MAX_TOKENS tokens before its rest (shape_ok checked
     * the image's; one that is not could not classify a filter) */
    int shape_ok = !want || (want->ntoks <= FS_SHAPE_MAX_TOKENS && (want->onemask || want->rest));
    return len <= SHORT_MAX && len <= R->max_len && shape_ok &&
           filter_masks(d, f, len, want != NULL, &copy, &seps, &wild) &&
           cut_tokens(d, &copy, len, want, seps, wild, key);
}

/* Each dialect's own copies, for the literal table and for a shape's, the
 * rules and want's absence folded to constants (as the tokenizer's). */
static int literal_key_nats(const char *f, uint32_t len, uint64_t *key)
{
    return entry_key_in(FS_NATS, f, len, NULL, key);
}
static int literal_key_mqtt(const char *f, uint32_t len, uint64_t *key)
{
    return entry_key_in(FS_MQTT, f, len, NULL, key);
}
static int literal_key_amqp(const char *f, uint32_t len, uint64_t *key)
{
    return entry_key_in(FS_AMQP, f, len, NULL, key);
}
static int shaped_key_nats(const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    return entry_key_in(FS_NATS, f, len, want, key);
}
static int shaped_key_mqtt(const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    return entry_key_in(FS_MQTT, f, len, want, key);
}
static int shaped_key_amqp(const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    return entry_key_in(FS_AMQP, f, len, want, key);
}

int fs_entry_key(fs_dialect d, const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    if (!want)
        return FS_PER_DIALECT(d, literal_key_nats(f, len, key), literal_key_mqtt(f, len, key),
                              literal_key_amqp(f, len, key));
    return FS_PER_DIALECT(d, shaped_key_nats(f, len, want, key), shaped_key_mqtt(f, len, want, key),
                          shaped_key_amqp(f, len, want, key));
}
