/* fs_token.c - the tokenizer of every dialect, which validates as it cuts
 * by the dialects' rules (fs_dialect.h), and one filter against one
 * subject (see fs_token.h). */
#include "fs_token.h"

#include <stddef.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"

void fs_tokens_init(fs_tokens *t)
{
    t->tok = t->inline_;
    t->n = 0;
    t->cap = FS_TOKENS_INLINE;
    t->hidden = 0;
}

void fs_tokens_free(fs_tokens *t)
{
    if (t->tok != t->inline_)
        FS_FREE(t->tok);
    fs_tokens_init(t);
}

/* Room for one more span.  FS_OK or FS_ENOMEM. */
static int grow_tokens(fs_tokens *t)
{
    uint32_t ncap = t->cap * 2;
    fs_span *nt;
    if (t->tok == t->inline_) {
        nt = FS_MALLOC(sizeof(fs_span) * ncap);
        if (nt) memcpy(nt, t->inline_, sizeof(fs_span) * t->n);
    } else {
        nt = FS_REALLOC(t->tok, sizeof(fs_span) * ncap);
    }
    if (!nt)
        return FS_ENOMEM;
    t->tok = nt;
    t->cap = ncap;
    return FS_OK;
}

FS_ALWAYS_INLINE int push(fs_tokens *t, uint32_t off, uint32_t len, const char *s, size_t total)
{
    if (t->n == t->cap && grow_tokens(t) < 0)
        return FS_ENOMEM;
    fs_span *sp = &t->tok[t->n++];
    sp->off = off;
    sp->len = len;
    sp->hash = fs_hash_between(s, s + off, len, s + total);
    sp->kind = FS_TOK_LITERAL;
    return FS_OK;
}

static int fail(fs_error *err, const char *reason, size_t pos)
{
    err->reason = reason;
    err->pos = pos;
    err->in_queue = 0;
    return FS_EINVAL;
}

/* Word-at-a-time scanning: the index of the first byte at or after i that
 * the tokenizer must look at (a candidate; the caller decides), or len.
 * In each mask the lowest flagged byte is exact, which is all we use. */
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

static inline uint64_t zero_bytes(uint64_t v) { return (v - ONES) & ~v & HIGHS; }

static inline size_t first_flagged(uint64_t m) { return (size_t)fs_ctz64(m) >> 3; }

/* The bytes u[i..len) as a word, zeros above them (i < len, fewer than 8
 * bytes left): one load that ends at len, or a copy for a string shorter
 * than a word -- never a byte loop, never a read outside u[0..len). */
static inline uint64_t last_word(const unsigned char *u, size_t i, size_t len)
{
    if (len >= 8)
        return fs_load_le64((const char *)u + len - 8) >> (8 * (i + 8 - len));
    char b[8] = {0};
    memcpy(b, u + i, len - i);
    return fs_load_le64(b);
}

/* The flag bits of last_word's real bytes (the zeros above may be
 * flagged; a flag above the lowest real one never matters). */
static inline uint64_t tail_bytes(size_t i, size_t len) { return HIGHS >> (8 * (i + 8 - len)); }

/* NATS: non-ASCII | below '!' (NUL, whitespace, controls) | '.' */
static inline uint64_t nats_flags(uint64_t x)
{
    return (x & HIGHS) | ((x - 0x21 * ONES) & ~x & HIGHS) | zero_bytes(x ^ (0x2E * ONES));
}

/* MQTT: non-ASCII | NUL | '/' | '+' | '#' */
static inline uint64_t mqtt_flags(uint64_t x)
{
    return (x & HIGHS) | zero_bytes(x) | zero_bytes(x ^ (0x2F * ONES)) |
           zero_bytes(x ^ (0x2B * ONES)) | zero_bytes(x ^ (0x23 * ONES));
}

/* AMQP: non-ASCII | '.' */
static inline uint64_t amqp_flags(uint64_t x) { return (x & HIGHS) | zero_bytes(x ^ (0x2E * ONES)); }

/* One scanner for the three dialects: flags is a constant at every call,
 * so the compiler inlines it. */
static inline size_t scan(const unsigned char *u, size_t i, size_t len, uint64_t (*flags)(uint64_t))
{
    for (; i + 8 <= len; i += 8) {
        uint64_t m = flags(fs_load_le64((const char *)u + i));
        if (m)
            return i + first_flagged(m);
    }
    if (i >= len)
        return len;
    uint64_t m = flags(last_word(u, i, len)) & tail_bytes(i, len);
    return m ? i + first_flagged(m) : len;
}

/* The span array as the tokenizer loop keeps it, in registers: stores
 * into the spans could alias the fs_tokens, which would make the compiler
 * reload t->n and t->tok after each one.  t->n is stored, never read. */
typedef struct {
    fs_span *tok;
    uint32_t n, cap;
} spans;

static inline spans spans_of(const fs_tokens *t) { return (spans){t->tok, t->n, t->cap}; }

/* The common token, found and pushed in one step: it ends -- at the
 * separator sep, or at the end of the string -- within the 8 bytes from
 * its start, and no byte before its end needs a closer look.  Then the
 * word already loaded is its bytes and its hash is one mix.  Returns the
 * token's end, or NOT_QUICK (nothing pushed) for the careful path: a
 * long token, a byte the dialect flags, an empty token where empty_ok is
 * 0 (NATS), or no room left in the span array. */
#define NOT_QUICK ((size_t)-1)

FS_ALWAYS_INLINE size_t quick_token(const unsigned char *u, size_t start, size_t len, spans *t,
                                     uint64_t (*flags)(uint64_t), unsigned char sep, int empty_ok)
{
    size_t avail = len - start, j;
    uint64_t w;
    if (avail == 0 || t->n == t->cap)
        return NOT_QUICK;
    if (avail >= 8) {
        w = fs_load_le64((const char *)u + start);
        uint64_t m = flags(w);
        if (!m)
            return NOT_QUICK;
        j = first_flagged(m);
        if (u[start + j] != sep)
            return NOT_QUICK;
    } else {
        w = last_word(u, start, len);
        uint64_t m = flags(w) & tail_bytes(start, len);
        j = m ? first_flagged(m) : avail;
        if (j < avail && u[start + j] != sep)
            return NOT_QUICK;
    }
    if (j == 0 && !empty_ok)
        return NOT_QUICK;
    fs_span *sp = &t->tok[t->n++];
    sp->off = (uint32_t)start;
    sp->len = (uint32_t)j;
    sp->hash = fs_hash_short(w & ((1ull << (8 * j)) - 1), j);    /* j < 8 */
    sp->kind = FS_TOK_LITERAL;
    return start + j;
}

/* A dialect's rules for whole-token wildcards, applied to each token cut
 * (sp, the bytes s[start..end) of s[0..len)): a wildcard's kind in a
 * filter, an error in a subject (AMQP: a literal word there), the rest
 * wildcard last where the dialect says so. */
FS_ALWAYS_INLINE int token_kind(fs_dialect d, fs_span *sp, const char *s, size_t start, size_t end, size_t len,
                                int is_filter, fs_error *err)
{
    const fs_dialect_rules *R = fs_rules(d);
    if (sp->len != 1 || (s[start] != R->one && s[start] != R->rest))
        return FS_OK;
    fs_tok_kind k = s[start] == R->one ? FS_TOK_ONE : FS_TOK_REST;
    if (R->one_not_whole) {          /* MQTT: careful_scan has held its wildcard bytes to the rules */
        sp->kind = k;
        return FS_OK;
    }
    if (!is_filter)
        return R->wild_in_subject ? fail(err, R->wild_in_subject, start) : FS_OK;
    if (k == FS_TOK_REST && R->rest_not_last && end != len)
        return fail(err, R->rest_not_last, start);
    sp->kind = k;
    return FS_OK;
}

/* Strings of at most 63 bytes on x86-64: the whole string's bytes are
 * classified by 16-byte compares into a 64-bit mask of its separators and
 * a flag for any other byte the dialect flags, before any token is cut.
 * A string with no such other byte -- nearly every subject -- is then cut
 * at the separator bits, each token hashed from one word, with no
 * per-byte and no per-token scanning; any other string takes the
 * word-at-a-time loop below from its start, which finds the same tokens
 * and reports the same errors.
 *
 * What is decided once per string is not asked again per token: the
 * empty tokens (one test of the cut mask), the room in the span array
 * (from the length, or the count of cuts only where that may not fit),
 * and the word of the string's last 8 bytes, from which a token that
 * starts there is cut.  A token of up to 7 bytes is then one load, one
 * and and one xor (tables of masks and seeds) and the hash's mix.
 * Measured on light (5 tokens in ~26 bytes a subject), callgrind,
 * fs_tokenize alone: 322 -> 238 instructions a subject; a C loop over
 * 20,000 of light's subjects, 14.1 -> 9.7 ns a subject.  (A copy of the
 * string on the stack with zeros after it saved 12 instructions more,
 * the near-end test, but cost 2.9 ns: a token's load that spans two of
 * the copy's stores waits for them.)
 *
 * Every load from the caller's bytes stays inside the string: whole
 * blocks from its start, the last partial block as the 16 (or 8) bytes
 * that end at its end -- so nothing is read past the caller's bytes. */
#if defined(__x86_64__) || defined(_M_X64) || defined(_M_AMD64)
#include <emmintrin.h>
#define FS_VECTOR_TOKENIZER 1
#define VECTOR_MAX 63u    /* the end's bit fits in the 64-bit mask */
#define NOT_VECTOR 1      /* not an fs status (those are 0 or negative): take the general loop */

/* A block's masks: bit i of the result for a separator, bit i of *other
 * for any other byte the dialect flags.  The two sets are disjoint. */
typedef unsigned (*vector_flags)(__m128i v, unsigned *other);

static inline unsigned movemask(__m128i v) { return (unsigned)_mm_movemask_epi8(v); }

/* NATS: '.'; other: non-ASCII or below '!', signed bytes below 0x21,
 * which '.' is above: the sign of v - 0x21, saturated (one instruction,
 * where gcc made v < 0x21 two) */
static inline unsigned nats_vflags(__m128i v, unsigned *other)
{
    *other = movemask(_mm_subs_epi8(v, _mm_set1_epi8(0x21)));
    return movemask(_mm_cmpeq_epi8(v, _mm_set1_epi8('.')));
}

/* MQTT: '/'; other: non-ASCII | NUL | '+' | '#' (the sign bit of v or of
 * a compare: one movemask of both) */
static inline unsigned mqtt_vflags(__m128i v, unsigned *other)
{
    __m128i wild = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_setzero_si128()),
                                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('+')),
                                             _mm_cmpeq_epi8(v, _mm_set1_epi8('#'))));
    *other = movemask(_mm_or_si128(v, wild));
    return movemask(_mm_cmpeq_epi8(v, _mm_set1_epi8('/')));
}

/* AMQP: '.'; other: non-ASCII */
static inline unsigned amqp_vflags(__m128i v, unsigned *other)
{
    *other = movemask(v);
    return movemask(_mm_cmpeq_epi8(v, _mm_set1_epi8('.')));
}

/* The masks of u[0..len), 0 < len <= VECTOR_MAX: *seps, bit i for a
 * separator at i; *other, nonzero if any other byte is flagged.  *tail:
 * the 8 bytes that end at len (zeros before the string's start, for a
 * shorter string).  A block that overlaps one seen before (the last,
 * which ends at len) sees the same bytes again and sets the same bits. */
FS_ALWAYS_INLINE void classify(const unsigned char *u, size_t len, vector_flags vf, unsigned *other,
                               uint64_t *seps, uint64_t *tail)
{
    uint64_t sp = 0;
    unsigned o = 0, bo, bs;
    if (len >= 16) {
        size_t i = 0;
        for (; i + 16 <= len; i += 16) {
            bs = vf(_mm_loadu_si128((const __m128i *)(u + i)), &bo);
            o |= bo;
            sp |= (uint64_t)bs << i;
        }
        if (len % 16) {               /* i < len, tested without i */
            bs = vf(_mm_loadu_si128((const __m128i *)(u + len - 16)), &bo);
            o |= bo;
            sp |= (uint64_t)bs << (len - 16);
        }
        *tail = fs_load_le64((const char *)u + len - 8);
    } else if (len >= 8) {
        /* u[0..8) and u[len-8..len): bits 8..15 are the second word's */
        uint64_t lo = fs_load_le64((const char *)u), hi = fs_load_le64((const char *)u + len - 8);
        bs = vf(_mm_set_epi64x((long long)hi, (long long)lo), &bo);
        o = bo;
        sp = (bs & 0xFF) | (uint64_t)(bs >> 8) << (len - 8);
        *tail = hi;
    } else {
        /* the zeros above last_word's bytes are not the string's: cut off */
        uint64_t w = last_word(u, 0, len);
        bs = vf(_mm_cvtsi64_si128((long long)w), &bo);
        unsigned real = (1u << len) - 1;
        o = bo & real;
        sp = bs & real;
        *tail = w << (8 * (8 - len));
    }
    *other = o;
    *seps = sp;
}

/* A token of j = 0..7 bytes, as fs_hash_short takes it: short_word[0][j]
 * keeps the low j bytes of a word, short_word[1][j] is the hash's seed
 * for j bytes.  One table (one base register) and two instructions a
 * token, where the shifts that cleared the bytes above and the seed's
 * two xors took six. */
static const uint64_t short_word[2][8] = {
    {0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFFull, 0xFFFFFFFFFFull, 0xFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFull},
    {FS_HASH_SEED(0), FS_HASH_SEED(1), FS_HASH_SEED(2), FS_HASH_SEED(3), FS_HASH_SEED(4), FS_HASH_SEED(5),
     FS_HASH_SEED(6), FS_HASH_SEED(7)},
};

/* A literal token's hash and kind in one 8-byte store: the two fields are
 * adjacent, kind above hash, and a literal's kind is 0 (little-endian,
 * as every x86-64 is). */
_Static_assert(offsetof(fs_span, kind) == offsetof(fs_span, hash) + 4 && FS_TOK_LITERAL == 0,
               "fs_span: hash then kind, and a literal is 0");
static inline void set_literal(fs_span *sp, uint32_t hash)
{
    uint64_t v = hash;
    memcpy((char *)sp + offsetof(fs_span, hash), &v, 8);
}

/* Cut u[0..len) at the separator bits, every byte between them already
 * known to need no closer look.  FS_OK, the error of a whole-token rule
 * (token_kind), or NOT_VECTOR: a byte that needs a closer look, an empty
 * token where the dialect has none, or more tokens than the span array
 * holds -- the general loop says which. */
FS_ALWAYS_INLINE int tokenize_vector(fs_dialect d, const char *s, size_t len, int is_filter, fs_tokens *t,
                                     fs_error *err, vector_flags vf)
{
    const fs_dialect_rules *R = fs_rules(d);
    uint64_t seps, tail;
    unsigned other;
    classify((const unsigned char *)s, len, vf, &other, &seps, &tail);
    if (other)
        return NOT_VECTOR;
    uint64_t cuts = seps | (uint64_t)1 << len;     /* every token's end */
    /* an empty token: two cuts in a row, or one at 0 (cuts << 1 | 1: a
     * cut just before the string) */
    if (!R->empty_tokens && (cuts & (cuts << 1 | 1)))
        return NOT_VECTOR;
    /* t->n is 0.  Without empty tokens a string holds at most (len + 1) / 2
     * of them; the count of cuts is taken only where that may not fit. */
    size_t most = R->empty_tokens ? len + 1 : (len + 1) / 2;
    if (most > t->cap && fs_popcount64(cuts) > t->cap)
        return NOT_VECTOR;
    /* a token that starts after near_end has fewer than 8 bytes of the
     * string from its start: its word is cut from the tail */
    ptrdiff_t near_end = (ptrdiff_t)len - 8;
    fs_span *sp = t->tok;
    size_t start = 0;
    do {
        size_t end = fs_ctz64(cuts), j = end - start;
        sp->off = (uint32_t)start;
        sp->len = (uint32_t)j;
        if (FS_LIKELY(j < 8)) {          /* 0..7 bytes: one word */
            /* (an empty last token, at len: a shift of 64 taken as 0 --
             * the & 63, which x86's shift does anyway -- and no byte used) */
            uint64_t w = (ptrdiff_t)start <= near_end ? fs_load_le64(s + start)
                                                     : tail >> ((8 * (size_t)((ptrdiff_t)start - near_end)) & 63);
            set_literal(sp, fs_hash_last(short_word[1][j], w & short_word[0][j]));
        }
        else {
            set_literal(sp, fs_hash_between(s, s + start, j, s + len));
        }
        int rc = token_kind(d, sp, s, start, end, len, is_filter, err);
        sp++;
        if (rc != FS_OK) {
            t->n = (uint32_t)(sp - t->tok);
            return rc;
        }
        start = end + 1;
        cuts &= cuts - 1;             /* the last cut is at len: none left is the end */
    } while (cuts);
    t->n = (uint32_t)(sp - t->tok);
    return FS_OK;
}
#endif

/* In tokenize_<dialect>: the vector path first, when it can decide. */
#ifdef FS_VECTOR_TOKENIZER
#define TRY_VECTOR(d, vflags)                                                    \
    do {                                                                         \
        if (len <= VECTOR_MAX) {                                                 \
            int rc_ = tokenize_vector(d, s, len, is_filter, t, err, vflags);     \
            if (rc_ != NOT_VECTOR)                                               \
                return rc_;                                                      \
            t->n = 0;                                                            \
        }                                                                        \
    } while (0)
#else
#define TRY_VECTOR(d, vflags) ((void)0)
#endif

/* A token the quick path left: scan from start to its end (*end) byte
 * by byte class (fs_byte_class), holding each flagged byte to the
 * dialect's rules.  FS_OK or FS_EINVAL. */
FS_ALWAYS_INLINE int careful_scan(fs_dialect d, const unsigned char *u, size_t start, size_t len, int is_filter,
                                  size_t *end, fs_error *err, uint64_t (*flags)(uint64_t))
{
    const fs_dialect_rules *R = fs_rules(d);
    size_t i = start;
    while ((i = scan(u, i, len, flags)) < len) {
        unsigned char c = u[i];
        if (c == (unsigned char)R->sep) break;        /* the one FS_BYTE_SEP */
        unsigned k = fs_byte_class(d, c);
        if (R->one_not_whole && k == FS_BYTE_WILD) {      /* MQTT's '+' and '#' */
            if (!is_filter) return fail(err, R->wild_in_subject, i);
            int whole = i == start && (i + 1 == len || u[i + 1] == (unsigned char)R->sep);
            if (!whole) return fail(err, c == (unsigned char)R->one ? R->one_not_whole : R->rest_not_whole, i);
            if (c == (unsigned char)R->rest && i + 1 != len) return fail(err, R->rest_not_last, i);
            i++;
            continue;
        }
        if (k == FS_BYTE_OK) { i++; continue; }      /* a control byte NATS allows */
        if (k == FS_BYTE_NUL) return fail(err, R->nul, i);
        if (k == FS_BYTE_SPACE) return fail(err, "whitespace", i);
        /* FS_BYTE_HIGH.  Bytes from Arrow may be anything; a Python str
         * is always UTF-8, so both inputs agree only if this is checked. */
        size_t n = fs_utf8_seq(u, i, len);
        if (!n) return fail(err, "invalid UTF-8", i);
        i += n;
    }
    if (i == start && !R->empty_tokens) return fail(err, "empty token", i);
    *end = i;
    return FS_OK;
}

/* One loop for the three dialects: each token takes the quick path or
 * the careful scan, then the rules for whole-token wildcards.  d and
 * flags are constants at every call, so the compiler specializes it, as
 * for scan(). */
FS_ALWAYS_INLINE int tokenize_with(fs_dialect d, const char *s, size_t len, int is_filter, fs_tokens *t,
                                   fs_error *err, uint64_t (*flags)(uint64_t))
{
    const fs_dialect_rules *R = fs_rules(d);
    const unsigned char *u = (const unsigned char *)s;
    size_t start = 0, i;
    spans sa = spans_of(t);
    for (;;) {
        int rc;
        if ((i = quick_token(u, start, len, &sa, flags, (unsigned char)R->sep, R->empty_tokens)) == NOT_QUICK) {
            if ((rc = careful_scan(d, u, start, len, is_filter, &i, err, flags)) != FS_OK) return rc;
            if (push(t, (uint32_t)start, (uint32_t)(i - start), s, len)) return FS_ENOMEM;
            sa = spans_of(t);
        }
        t->n = sa.n;
        if ((rc = token_kind(d, &sa.tok[sa.n - 1], s, start, i, len, is_filter, err)) != FS_OK) return rc;
        if (i == len) return FS_OK;
        start = i + 1;
    }
}

/* Each dialect's tokenizer: the length rules, then the vector path when
 * it can decide, else the loop. */
/* The length rules of dialect d.  FS_OK, or FS_EINVAL. */
static int check_length(fs_dialect d, size_t len, fs_error *err)
{
    const fs_dialect_rules *R = fs_rules(d);
    if (len == 0 && !R->empty_ok) return fail(err, "empty", 0);
    if (len > R->max_len) return fail(err, R->too_long, R->max_len);
    return FS_OK;
}

/* fs_first_level_hidden of s's first level, for a constant d (NATS and
 * AMQP store a 0; MQTT's s has a byte: it refuses ""). */
FS_ALWAYS_INLINE uint32_t first_level_hidden(fs_dialect d, const char *s)
{
    return fs_first_level_hidden(d, s, 1);
}

/* Each dialect's tokenizer: the first level's decision, then the vector
 * path when it can decide, else the loop. */
static int tokenize_nats(const char *s, size_t len, int is_filter, fs_tokens *t, fs_error *err)
{
    t->hidden = first_level_hidden(FS_NATS, s);
    TRY_VECTOR(FS_NATS, nats_vflags);
    return tokenize_with(FS_NATS, s, len, is_filter, t, err, nats_flags);
}

static int tokenize_mqtt(const char *s, size_t len, int is_filter, fs_tokens *t, fs_error *err)
{
    t->hidden = first_level_hidden(FS_MQTT, s);
    TRY_VECTOR(FS_MQTT, mqtt_vflags);
    return tokenize_with(FS_MQTT, s, len, is_filter, t, err, mqtt_flags);
}

/* AMQP: words separated by '.', empty words real; in a binding key a
 * whole word '*' is one word and a whole word '#' zero or more, anywhere.
 * Any byte but '.' may be in a word (NUL too: an AMQP short string is
 * bytes), as long as the key is valid UTF-8. */
static int tokenize_amqp(const char *s, size_t len, int is_filter, fs_tokens *t, fs_error *err)
{
    t->hidden = first_level_hidden(FS_AMQP, s);
    TRY_VECTOR(FS_AMQP, amqp_vflags);
    return tokenize_with(FS_AMQP, s, len, is_filter, t, err, amqp_flags);
}

/* Every dialect accepts every length from 1 to FS_AMQP_MAX_KEY bytes, so
 * one test lets nearly every input past the length rules; the others get
 * their dialect's (and "", AMQP's key of zero words, stops there). */
int fs_tokenize(fs_dialect d, const char *s, size_t len, int is_filter,
                fs_tokens *t, fs_error *err)
{
    t->n = 0;
    if (FS_UNLIKELY(len - 1 >= FS_AMQP_MAX_KEY)) {
        t->hidden = 0;                     /* "": AMQP's key of zero words */
        int rc = check_length(d, len, err);
        if (rc != FS_OK || len == 0)
            return rc;
    }
    return FS_PER_DIALECT(d, tokenize_nats(s, len, is_filter, t, err), tokenize_mqtt(s, len, is_filter, t, err),
                          tokenize_amqp(s, len, is_filter, t, err));
}

/* Does filter f (tokens ft) match the literal subject s (tokens st)? */
static inline int tok_eq(const char *a, const fs_span *x, const char *b, const fs_span *y)
{
    return x->len == y->len && memcmp(a + x->off, b + y->off, x->len) == 0;
}

/* AMQP: ok[j] says whether the filter's first i tokens match the
 * subject's first j words; one pass per filter token updates it in place
 * ('#': ok[j] |= ok[j-1], left to right; '*' and literals shift right by
 * one word, right to left).  O(filter tokens x words), no backtracking:
 * RabbitMQ 3.x's backtracking took seconds for "#.#.#.#" against 128
 * words. */
static int amqp_match(const char *f, const fs_tokens *ft, const char *s, const fs_tokens *st)
{
    uint32_t ns = st->n;
    int wild = 0;
    for (uint32_t i = 0; i < ft->n; i++)
        wild |= ft->tok[i].kind == FS_TOK_REST;
    if (!wild) {
        if (ft->n != ns)
            return 0;
        for (uint32_t i = 0; i < ns; i++)
            if (ft->tok[i].kind == FS_TOK_LITERAL && !tok_eq(f, &ft->tok[i], s, &st->tok[i]))
                return 0;
        return 1;
    }
    if (ns > FS_AMQP_MAX_WORDS)
        return 0;                     /* never tokenized: keys are <= 255 bytes */
    unsigned char ok[FS_AMQP_MAX_WORDS + 1];
    memset(ok, 0, ns + 1);
    ok[0] = 1;
    for (uint32_t i = 0; i < ft->n; i++) {
        const fs_span *a = &ft->tok[i];
        int any = 0;
        if (a->kind == FS_TOK_REST) {
            for (uint32_t j = 1; j <= ns; j++)
                ok[j] |= ok[j - 1];
            any = 1;
        } else {
            for (uint32_t j = ns; j >= 1; j--) {
                ok[j] = ok[j - 1] && (a->kind == FS_TOK_ONE || tok_eq(f, a, s, &st->tok[j - 1]));
                any |= ok[j];
            }
            ok[0] = 0;
        }
        if (!any)
            return 0;
    }
    return ok[ns];
}

int fs_tokens_match(fs_dialect d, const char *f, const fs_tokens *ft,
                    const char *s, const fs_tokens *st)
{
    const fs_dialect_rules *R = fs_rules(d);
    if (R->rest_anywhere)
        return amqp_match(f, ft, s, st);
    if (st->hidden && ft->tok[0].kind != FS_TOK_LITERAL)   /* MQTT's '$' rule (fs_tokens.hidden) */
        return 0;
    uint32_t i = 0;
    for (; i < ft->n; i++) {
        const fs_span *a = &ft->tok[i];
        if (a->kind == FS_TOK_REST)      /* NATS '>' needs 1+ more tokens; MQTT '#' 0+ */
            return i + R->rest_min <= st->n;
        if (i >= st->n)
            return 0;
        const fs_span *b = &st->tok[i];
        if (a->kind == FS_TOK_LITERAL &&
            (a->len != b->len || memcmp(f + a->off, s + b->off, a->len) != 0))
            return 0;
    }
    return i == st->n;
}


/* The lengths (in tokens) of the subjects a filter can match: lo..hi. */
static void length_range(fs_dialect d, const fs_tokens *t, uint32_t *fixed, uint32_t *lo, uint32_t *hi)
{
    int rest = t->n && t->tok[t->n - 1].kind == FS_TOK_REST;
    *fixed = t->n - (uint32_t)rest;
    *lo = rest ? *fixed + fs_rules(d)->rest_min : *fixed;   /* '>' needs 1+ more, '#' 0+ */
    *hi = rest ? UINT32_MAX : *fixed;
}

/* AMQP: is there a routing key of at most 255 bytes that both binding
 * keys match?  A state (i, j) is a position in each; a '#' may be skipped
 * (i + 1 or j + 1, no word), and one word may be consumed by both sides at
 * once unless both offer different literals ('#' consumes and stays).  The
 * cheapest key reaching (na, nb) is found by dynamic programming: a word
 * costs its bytes plus a separator, a free word (under '*' / '#' on both
 * sides) is the empty word.  Every move goes to a later row or further
 * along the same row, so two rows of costs suffice: O(na x nb).  (Without
 * the byte count, "x{200}.#" and "#.y{200}" would meet only in keys of
 * 401 bytes, which no broker routes.) */
#define AMQP_NO_KEY 0xFFFFu
static int amqp_intersect(const char *a, const fs_tokens *at, const char *b, const fs_tokens *bt)
{
    uint32_t na = at->n, nb = bt->n;
    if (na > FS_AMQP_MAX_WORDS || nb > FS_AMQP_MAX_WORDS)
        return 0;
    /* cost: bytes of the key so far plus one (one separator per word, less
     * the first one's); AMQP_NO_KEY: unreachable */
    uint16_t rows[2][FS_AMQP_MAX_WORDS + 1];
    uint16_t *cur = rows[0], *nxt = rows[1];
    for (uint32_t j = 0; j <= nb; j++)
        cur[j] = AMQP_NO_KEY;
    cur[0] = 0;
    for (uint32_t i = 0;; i++) {
        for (uint32_t j = 0; j <= nb; j++)
            nxt[j] = AMQP_NO_KEY;
        const fs_span *x = i < na ? &at->tok[i] : NULL;
        int any = 0;
        for (uint32_t j = 0; j <= nb; j++) {
            uint32_t c = cur[j];
            if (c > FS_AMQP_MAX_KEY + 1)
                continue;
            any = 1;
            const fs_span *y = j < nb ? &bt->tok[j] : NULL;
            if (x && x->kind == FS_TOK_REST && c < nxt[j])
                nxt[j] = (uint16_t)c;
            if (y && y->kind == FS_TOK_REST && c < cur[j + 1])
                cur[j + 1] = (uint16_t)c;
            if (!x || !y)
                continue;
            if (x->kind == FS_TOK_LITERAL && y->kind == FS_TOK_LITERAL && !tok_eq(a, x, b, y))
                continue;
            int stay_i = x->kind == FS_TOK_REST, stay_j = y->kind == FS_TOK_REST;
            if (stay_i && stay_j)
                continue;
            uint32_t word = x->kind == FS_TOK_LITERAL ? x->len : y->kind == FS_TOK_LITERAL ? y->len : 0;
            uint32_t nc = c + word + 1;
            if (nc > FS_AMQP_MAX_KEY + 1)
                continue;
            uint16_t *to = stay_i ? &cur[j + 1] : &nxt[j + !stay_j];
            if (nc < *to)
                *to = (uint16_t)nc;
        }
        if (i == na)
            return cur[nb] <= FS_AMQP_MAX_KEY + 1;
        if (!any)
            return 0;
        uint16_t *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
}

int fs_filters_intersect(fs_dialect d, const char *a, const fs_tokens *at,
                         const char *b, const fs_tokens *bt)
{
    if (fs_rules(d)->rest_anywhere)
        return amqp_intersect(a, at, b, bt);
    uint32_t la, lo_a, hi_a, lb, lo_b, hi_b;
    length_range(d, at, &la, &lo_a, &hi_a);
    length_range(d, bt, &lb, &lo_b, &hi_b);
    uint32_t lo = lo_a > lo_b ? lo_a : lo_b, hi = hi_a < hi_b ? hi_a : hi_b;
    if (lo < 1)
        lo = 1;                       /* every subject has a token */
    if (lo > hi)
        return 0;
    uint32_t common = la < lb ? la : lb;
    for (uint32_t i = 0; i < common; i++) {
        const fs_span *x = &at->tok[i], *y = &bt->tok[i];
        if (x->kind == FS_TOK_LITERAL && y->kind == FS_TOK_LITERAL &&
            (x->len != y->len || memcmp(a + x->off, b + y->off, x->len) != 0))
            return 0;
    }
    /* The subject's first level is a literal one of them fixes, or free.
     * MQTT: a '$' level (the tokenizer's decision, fs_tokens.hidden)
     * cannot meet a filter starting with a wildcard -- two literals were
     * compared above -- and a lone empty level is the topic "", which is
     * invalid (NATS has no empty tokens, AMQP was answered above). */
    int lit_a = la > 0 && at->tok[0].kind == FS_TOK_LITERAL;
    int lit_b = lb > 0 && bt->tok[0].kind == FS_TOK_LITERAL;
    if ((at->hidden && !lit_b) || (bt->hidden && !lit_a))
        return 0;
    const fs_span *first = lit_a ? &at->tok[0] : lit_b ? &bt->tok[0] : NULL;
    return !(first && first->len == 0 && hi == 1);
}

int fs_subject_matches(fs_dialect d, const char *filter, size_t flen,
                       const char *subject, size_t slen, int *which, fs_error *err)
{
    fs_tokens ft, st;
    fs_tokens_init(&ft);
    fs_tokens_init(&st);
    int rc;
    *which = 0;
    rc = fs_share_inner(d, &filter, &flen, err);
    if (rc < 0)
        goto done;
    rc = fs_tokenize(d, filter, flen, 1, &ft, err);
    if (rc < 0)
        goto done;
    *which = 1;
    rc = fs_tokenize(d, subject, slen, 0, &st, err);
    if (rc < 0)
        goto done;
    rc = fs_tokens_match(d, filter, &ft, subject, &st);
done:
    fs_tokens_free(&ft);
    fs_tokens_free(&st);
    return rc;
}
