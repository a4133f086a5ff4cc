/* fs_entry_key.h - a stored table entry's filter checked and keyed without
 * the tokenizer, for the image verifier (fs_image_verify.c).
 *
 * An entry's table already says what its filter's tokens must be: the
 * literal table's, literal tokens only; a shape's table, a one-level
 * wildcard at each bit of its mask, a rest wildcard last where it has one,
 * literal tokens elsewhere.  So the filter needs no spans: one pass cuts
 * it at its separators, holds its bytes and each token to what the
 * dialect's rules (fs_rules) and the token's place allow, and sums the key
 * as an insert would (fs_tokens_key, fs_shape_classify: fs_pos_mix of each
 * literal token's fs_hash at its position).
 *
 * The scan only proves: 1 means the tokenizer would accept the filter and
 * classify it as the table's, with this key.  0 means "not proven", never
 * "bad": the caller then asks the tokenizer, which names what is wrong
 * (or, for a filter this scan is stricter about, finds nothing).
 *
 * It proves the common case, from the dialect's rules: at most
 * FS_EK_SHORT_MAX bytes, ASCII, no byte below the rules' scan_below (the
 * bytes the tokenizer looks closer at: NATS's controls and whitespace,
 * MQTT's NUL), no empty token where the dialect has none, a wildcard
 * character of MQTT's only as a whole token.  Anything else -- UTF-8, a
 * control byte NATS allows, a long filter -- is "not proven", and the
 * tokenizer decides.  As the tokenizer's vector path, it reads the
 * filter's words once into masks of a bit per byte (separators, the
 * wildcard characters); every rule on the tokens' bytes and kinds is then
 * a few operations on the masks, and the loop over the tokens only hashes
 * each from one load and adds its mix to the key.
 *
 * The pass is here, inline (fs_entry_key_in), for the verifier's loop over
 * a table's slots, which has the dialect as a constant: called there once
 * an entry, its constants stay in registers across entries.
 * fs_entry_key (fs_entry_key.c) is the same pass out of line. */
#ifndef FS_ENTRY_KEY_H
#define FS_ENTRY_KEY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs_bits.h"
#include "fs_dialect.h"
#include "fs_shape.h"
#include "fs_token.h"

/* The filter f[0..len) of an entry of a table in dialect d, whose shape
 * is want's (its onemask, ntoks, rest; NULL: the literal table): 1 with
 * *key its key when it is a valid filter of that shape, else 0 (*key
 * undefined).  f[0 .. room) may be read, room >= FS_TOK_ALLOC(len) (a
 * node's token is padded so); the pass reads up to FS_EK_READ_PAST bytes
 * past that in place where room allows it (a mapped image's trailer
 * always follows its nodes), else a copy. */
int fs_entry_key(fs_dialect d, const char *f, uint32_t len, size_t room, const fs_shape_of *want, uint64_t *key);

/* ---- the pass */

#define FS_EK_ONES 0x0101010101010101ull
/* The longest filter the pass takes: its end's bit fits in a mask. */
#define FS_EK_SHORT_MAX 63u
/* Bytes past a filter's word-padded end (FS_TOK_ALLOC) that the pass
 * reads: its last 16-byte load starts before the end, and so does a
 * token's 8-byte load.  Where fewer may be read, it reads a zero-padded
 * copy. */
#define FS_EK_READ_PAST 16u

/* A filter's masks: bit i set where byte i is a separator (seps), the
 * one-level wildcard's character (ones), the rest wildcard's (rests) --
 * or, where the pass need not tell them apart (split 0: the literal
 * table, which has neither), either in ones and rests 0. */
typedef struct {
    uint64_t seps, ones, rests;
} fs_ek_bits;

/* The masks of a filter f[0..len), 1 <= len <= FS_EK_SHORT_MAX, f[0 ..
 * FS_TOK_ALLOC(len) + FS_EK_READ_PAST) readable; 0 when a byte needs the
 * tokenizer's look (non-ASCII, below the rules' scan_below).  On x86-64
 * 16 bytes at a time (SSE2, as the tokenizer's vector path), elsewhere a
 * word at a time (the bytes after len read as a letter, which no rule
 * flags); the same masks either way.  FS_ENTRY_KEY_WORDS: the word path
 * on x86-64 too (to test it). */
#if (defined(__x86_64__) || defined(_M_X64) || defined(_M_AMD64)) && !defined(FS_ENTRY_KEY_WORDS)
#include <emmintrin.h>

/* Bytes [at, at + 16) of f into the masks, at bit at. */
FS_ALWAYS_INLINE void fs_ek_chunk(fs_dialect d, const char *f, unsigned at, int split, uint64_t *look, fs_ek_bits *m)
{
    const fs_dialect_rules *R = fs_rules(d);
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(f + at));
    __m128i one = _mm_cmpeq_epi8(v, _mm_set1_epi8(R->one)), rest = _mm_cmpeq_epi8(v, _mm_set1_epi8(R->rest));
    /* signed: non-ASCII bytes are below any scan_below too */
    *look |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmplt_epi8(v, _mm_set1_epi8((char)R->scan_below))) << at;
    m->seps |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(R->sep))) << at;
    if (split) {
        m->ones |= (uint64_t)(unsigned)_mm_movemask_epi8(one) << at;
        m->rests |= (uint64_t)(unsigned)_mm_movemask_epi8(rest) << at;
    } else {
        m->ones |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_or_si128(one, rest)) << at;
    }
}

FS_ALWAYS_INLINE int fs_ek_masks(fs_dialect d, const char *f, size_t len, int split, fs_ek_bits *m)
{
    uint64_t look = 0;
    *m = (fs_ek_bits){.seps = 0, .ones = 0, .rests = 0};
    fs_ek_chunk(d, f, 0, split, &look, m);        /* unrolled: shifts by constants */
    if (len > 16) {
        fs_ek_chunk(d, f, 16, split, &look, m);
        if (len > 32) {
            fs_ek_chunk(d, f, 32, split, &look, m);
            if (len > 48)
                fs_ek_chunk(d, f, 48, split, &look, m);
        }
    }
    uint64_t inside = (1ull << len) - 1;
    m->seps &= inside;
    m->ones &= inside;
    m->rests &= inside;
    return (look & inside) == 0;
}
#else
/* Bit 7 of each byte of x equal to c.  Exact: the cheaper zero-byte test
 * can also flag the byte above a match. */
static inline uint64_t fs_ek_equal(uint64_t x, unsigned char c)
{
    const uint64_t low7 = FS_EK_ONES * 0x7F;
    uint64_t y = x ^ (FS_EK_ONES * c);
    return ~(((y & low7) + low7) | y | low7);
}

/* Bit 7 of each byte of m (the others zero) packed into the low 8 bits:
 * byte k's into bit k. */
static inline uint64_t fs_ek_pack(uint64_t m) { return ((m >> 7) * 0x0102040810204080ull) >> 56; }

FS_ALWAYS_INLINE int fs_ek_masks(fs_dialect d, const char *f, size_t len, int split, fs_ek_bits *m)
{
    const fs_dialect_rules *R = fs_rules(d);
    const uint64_t highs = FS_EK_ONES * 0x80;
    *m = (fs_ek_bits){.seps = 0, .ones = 0, .rests = 0};
    for (size_t base = 0; base < len; base += 8) {
        uint64_t x = fs_load_le64(f + base);
        if (len - base < 8) {
            uint64_t inside = (1ull << (8 * (len - base))) - 1;
            x = (x & inside) | (FS_EK_ONES * 'a' & ~inside);
        }
        /* non-ASCII, or below scan_below (exact for whether any byte is) */
        if ((x & highs) | ((x - FS_EK_ONES * (unsigned char)R->scan_below) & ~x & highs))
            return 0;
        uint64_t one = fs_ek_equal(x, (unsigned char)R->one), rest = fs_ek_equal(x, (unsigned char)R->rest);
        m->seps |= fs_ek_pack(fs_ek_equal(x, (unsigned char)R->sep)) << base;
        m->ones |= fs_ek_pack(split ? one : one | rest) << base;
        if (split)
            m->rests |= fs_ek_pack(rest) << base;
    }
    return 1;
}
#endif

/* The low n bytes of a word, n < 8: a load, where a shift by n would be
 * a shift by a variable count. */
static const uint64_t FS_EK_LOW_BYTES[8] = {0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFFull, 0xFFFFFFFFFFull,
                                            0xFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFull};

/* The fs_hash of the token t[0..n), t[0 .. 8) readable when n < 8, and
 * everything up to end. */
static inline uint32_t fs_ek_token_hash(const char *t, size_t n, const char *end)
{
    if (FS_UNLIKELY(n >= 8))
        return fs_hash_between(t, t, n, end);
    return fs_hash_short(fs_load_le64(t) & FS_EK_LOW_BYTES[n], n);
}

/* The tokens of the filter f[0..len) whose masks are m (fs_ek_masks,
 * split where want is not NULL), its bytes readable up to end: each where
 * the rules and its place allow it -- in the literal table (want NULL) a
 * literal; in a shape's table a one-level wildcard at the mask's bits,
 * the rest wildcard at ntoks and last, a literal elsewhere -- and their
 * key into *key (fs_pos_mix of each literal token's fs_hash at its
 * position, as fs_tokens_key and fs_shape_classify sum it).  1, or 0: not
 * proven.
 *
 * A wildcard is a token of one byte, its character (fs_token_kind): from
 * the masks, starts & (ends >> 1) marks the tokens of one byte, and each
 * rule on kinds is a test of a mask -- none in the literal table, MQTT's
 * characters nowhere else (one_not_whole: an error inside a token) --
 * but a shape's places: the loop gathers the positions of its wildcard
 * tokens (got_one, got_rest, a bit per token), to be the shape's. */
FS_ALWAYS_INLINE int fs_ek_tokens(fs_dialect d, const char *f, size_t len, const char *end, const fs_shape_of *want,
                                  const fs_ek_bits *m, uint64_t *key)
{
    const fs_dialect_rules *R = fs_rules(d);
    uint64_t ends = m->seps | 1ull << len, starts = m->seps << 1 | 1, wild = m->ones | m->rests;
    if (!R->empty_tokens && (ends & starts))
        return 0;                                /* a token that ends where it starts */
    uint64_t single = starts & (ends >> 1);
    if (R->one_not_whole && (wild & ~single))
        return 0;
    if (!want && (wild & single))
        return 0;
    uint64_t one = m->ones & single, rest = m->rests & single;
    size_t start = 0;
    /* bit: 1 << i, the token's in a shape's masks; at: 1 << start, its
     * first byte's in the filter's (shifts by one: no variable counts) */
    uint64_t sum = 0, got_one = 0, got_rest = 0, bit = 1, at = 1;
    uint32_t i = 0;
    /* ends has at most 64 bits: i < 64, and bit never shifts out */
    for (uint64_t c = ends; c; c &= c - 1, i++, bit <<= 1) {
        size_t stop = fs_ctz64(c);
        uint64_t mix = fs_pos_mix(fs_ek_token_hash(f + start, stop - start, end), i);
        if (want) {
            uint64_t is_one = (one & at) ? bit : 0, is_rest = (rest & at) ? bit : 0;
            got_one |= is_one;
            got_rest |= is_rest;
            sum += (is_one | is_rest) ? 0 : mix;       /* a wildcard's position adds nothing */
            at = (c & (0 - c)) << 1;
        } else {
            sum += mix;
        }
        start = stop + 1;
    }
    /* want->ntoks <= FS_SHAPE_MAX_TOKENS (fs_entry_key_in): the shift is defined */
    if (want && (got_one != want->onemask || got_rest != (uint64_t)want->rest << want->ntoks ||
                 i != want->ntoks + want->rest))
        return 0;
    *key = sum;
    return 1;
}

/* fs_entry_key, inline: d a constant where the caller has one. */
FS_ALWAYS_INLINE int fs_entry_key_in(fs_dialect d, const char *f, uint32_t len, size_t room, const fs_shape_of *want,
                                     uint64_t *key)
{
    const fs_dialect_rules *R = fs_rules(d);
    if (len == 0) {              /* AMQP's key of zero words: no token, key 0 */
        *key = 0;
        return !want && R->empty_ok;
    }
    /* a shape has a wildcard and at most FS_SHAPE_MAX_TOKENS tokens before its rest (the verifier's
     * shape_ok checked the image's; one that is not could not classify a filter) */
    if (len > FS_EK_SHORT_MAX || len > R->max_len ||
        (want && (want->ntoks > FS_SHAPE_MAX_TOKENS || (!want->onemask && !want->rest))))
        return 0;
    struct {
        char b[FS_EK_SHORT_MAX + 1 + FS_EK_READ_PAST];
    } copy;
    if (FS_UNLIKELY(room < FS_TOK_ALLOC(len) + FS_EK_READ_PAST)) {      /* near the end of what may be read */
        memset(&copy, 0, sizeof(copy));
        memcpy(copy.b, f, FS_TOK_ALLOC(len));
        f = copy.b;
        room = sizeof(copy.b);
    }
    fs_ek_bits m;
    return fs_ek_masks(d, f, len, want != NULL, &m) && fs_ek_tokens(d, f, len, f + room, want, &m, key);
}

#endif
