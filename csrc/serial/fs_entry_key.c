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

/* The masks of a filter f[0..len), 1 <= len <= SHORT_MAX, read a word at
 * a time (f[0 .. FS_TOK_ALLOC(len)): the bytes after len read as PAD):
 * bit i of *seps for a separator at i; of *wild, where the dialect's
 * wildcard characters are errors inside a token (MQTT) and the table has
 * wildcards (want), for one of them (else 0: in the literal table there
 * may be none).  0 when a byte needs the tokenizer's look. */
FS_ALWAYS_INLINE int filter_masks(fs_dialect d, const char *f, size_t len, int want, uint64_t *seps,
                                  uint64_t *wild)
{
    const fs_dialect_rules *R = fs_rules(d);
    int mark_wild = R->one_not_whole && want;
    uint64_t s = 0, w = 0;
    for (size_t base = 0; base < len; base += 8) {
        uint64_t x = fs_load_le64(f + base);
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

/* The fs_hash of f[start..start + n), f[0..a) readable (a: a multiple of 8,
 * past the token's end): a token shorter than a word from one load -- the
 * word at start, or the filter's last word when that would pass a. */
static inline uint32_t token_hash(const char *f, size_t start, size_t n, size_t a)
{
    if (n >= 8)
        return fs_hash_between(f, f + start, n, f + a);
    if (n == 0)                  /* an empty last token may start at a itself */
        return fs_hash_short(0, 0);
    uint64_t w = start + 8 <= a ? fs_load_le64(f + start) : fs_load_le64(f + a - 8) >> (8 * (start + 8 - a));
    return fs_hash_short(w & ((1ull << (8 * n)) - 1), n);
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
FS_ALWAYS_INLINE int cut_tokens(fs_dialect d, const char *f, size_t len, const fs_shape_of *want, uint64_t seps,
                                uint64_t wild, uint64_t *key)
{
    const fs_dialect_rules *R = fs_rules(d);
    uint64_t cuts = seps | 1ull << len;          /* every token's end */
    if (!R->empty_tokens && (cuts & (seps << 1 | 1)))
        return 0;                                /* a token that ends where it starts */
    size_t a = FS_TOK_ALLOC(len), start = 0;
    uint64_t sum = 0;
    uint32_t i = 0, wildcards = 0;
    for (uint64_t c = cuts; c; c &= c - 1, i++) {
        size_t end = fs_ctz64(c), n = end - start;
        int literal = 1;
        /* a token of one byte may be a wildcard: only a shape's table has them */
        if ((want || n == 1) && !token_fits(d, want, i, f + start, n, &literal))
            return 0;
        if (literal)
            sum += fs_pos_mix(token_hash(f, start, n, a), i);
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
    /* a shape has a wildcard and at most FS_SHAPE_MAX_TOKENS tokens before its rest (shape_ok checked
     * the image's; one that is not could not classify a filter) */
    int shape_ok = !want || (want->ntoks <= FS_SHAPE_MAX_TOKENS && (want->onemask || want->rest));
    return len <= SHORT_MAX && len <= R->max_len && shape_ok &&
           filter_masks(d, f, len, want != NULL, &seps, &wild) && cut_tokens(d, f, len, want, seps, wild, key);
}

/* Each dialect's own copy, its rules folded to constants (as the
 * tokenizer's). */
static int entry_key_nats(const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    return entry_key_in(FS_NATS, f, len, want, key);
}
static int entry_key_mqtt(const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    return entry_key_in(FS_MQTT, f, len, want, key);
}
static int entry_key_amqp(const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    return entry_key_in(FS_AMQP, f, len, want, key);
}

int fs_entry_key(fs_dialect d, const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key)
{
    return FS_PER_DIALECT(d, entry_key_nats(f, len, want, key), entry_key_mqtt(f, len, want, key),
                          entry_key_amqp(f, len, want, key));
}
