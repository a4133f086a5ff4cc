/* fs_dialect.c - the dialects' rules that are not inline (see
 * fs_dialect.h): queue names, MQTT shares, and the loader's check of a
 * stored literal. */
#include "fs_dialect.h"

#include <string.h>

static int fail(fs_error *err, const char *reason, size_t pos)
{
    err->reason = reason;
    err->pos = pos;
    err->in_queue = 0;
    return FS_EINVAL;
}

/* ---------------------------------------------------------- queue names */

/* Any bytes but NUL, at most 65,535 of them; and per dialect: NATS no
 * whitespace, MQTT no separator or wildcard character, AMQP valid UTF-8. */
static int check_queue(fs_dialect d, const char *q, size_t len, fs_error *err)
{
    if (len == 0) return fail(err, "empty queue name", 0);
    if (len > FS_MAX_SUBJECT) return fail(err, "queue name longer than 65,535 bytes", FS_MAX_SUBJECT);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)q[i];
        unsigned k = fs_byte_class(d, c);
        if (c == 0) return fail(err, "NUL in queue name", i);
        if (k == FS_BYTE_SPACE) return fail(err, "whitespace in queue name", i);
        if (fs_rules(d)->queue_utf8 && k == FS_BYTE_HIGH) {
            size_t n = fs_utf8_seq((const unsigned char *)q, i, len);
            if (!n) return fail(err, "invalid UTF-8 in queue name", i);
            i += n - 1;
        }
        if (fs_rules(d)->shares && (k == FS_BYTE_SEP || k == FS_BYTE_WILD))
            return fail(err, "'/', '+' or '#' in share group name", i);
    }
    return FS_OK;
}

int fs_check_queue(fs_dialect d, const char *q, size_t len, fs_error *err)
{
    int rc = check_queue(d, q, len, err);
    if (rc == FS_EINVAL)
        err->in_queue = 1;
    return rc;
}

/* --------------------------------------------------------- MQTT shares */

int fs_split_share(const char *s, size_t len, const char **group, size_t *glen,
                   const char **filter, size_t *flen, fs_error *err)
{
    if (!fs_share_prefixed(FS_MQTT, s, len))
        return 0;
    if (len > FS_MAX_SUBJECT) return fail(err, "longer than 65,535 bytes", FS_MAX_SUBJECT);
    const char *g = s + FS_SHARE_PREFIX_LEN;
    const char *slash = memchr(g, '/', len - FS_SHARE_PREFIX_LEN);
    if (!slash) return fail(err, "'$share/GROUP' without a filter", len);
    *group = g;
    *glen = (size_t)(slash - g);
    *filter = slash + 1;
    *flen = len - (size_t)(slash + 1 - s);
    if (*glen == 0) return fail(err, "empty share group name", FS_SHARE_PREFIX_LEN);
    for (size_t i = 0; i < *glen; i++)
        if (g[i] == '+' || g[i] == '#' || g[i] == 0)
            return fail(err, "wildcard or NUL in share group name", FS_SHARE_PREFIX_LEN + i);
    if (*flen == 0) return fail(err, "empty filter after '$share/GROUP/'", len);
    return 1;
}

int fs_share_inner(fs_dialect d, const char **f, size_t *len, fs_error *err)
{
    if (!fs_rules(d)->shares)
        return FS_OK;
    const char *group, *inner;
    size_t glen, ilen;
    int rc = fs_split_share(*f, *len, &group, &glen, &inner, &ilen, err);
    if (rc == 1) {
        *f = inner;
        *len = ilen;
    }
    return rc < 0 ? rc : FS_OK;
}

/* ------------------------------------------------------ stored literals */

/* Word-at-a-time helpers: bit 7 of each byte of the result is set where
 * the byte of x equals c (exact, no carries between bytes). */
#define ONES 0x0101010101010101ull
#define LOW7 0x7F7F7F7F7F7F7F7Full

static inline uint64_t get64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static inline uint64_t bytes_eq(uint64_t x, unsigned char c)
{
    uint64_t y = x ^ (ONES * c);
    return ~(((y & LOW7) + LOW7) | y | LOW7);
}

/* Nonzero if some byte of x is below c (c <= 0x80). */
static inline uint64_t any_below(uint64_t x, unsigned char c)
{
    return (x - ONES * c) & ~x & (ONES << 7);
}

/* The common case, eight bytes at a time: accept the literal token or
 * filter t[0..n) (n >= 1) when it obviously is one -- ASCII, nothing
 * below the dialect's scan_below, no wildcard character, no separator
 * inside a token, no empty token where the dialect has none.
 * 0 means "look closer" (check_literal decides). */
static int literal_fast(fs_dialect d, const unsigned char *t, size_t n, int whole_filter)
{
    const fs_dialect_rules *R = fs_rules(d);
    uint64_t prev_sep = 1;   /* the start acts as a separator */
    size_t i = 0;
    for (;; i += 8) {
        uint64_t x;
        if (i + 8 <= n) {
            x = get64(t + i);
        } else if (i == n) {
            break;
        } else if (n >= 8) {
            /* the last, overlapping window: its earlier bytes passed already */
            x = get64(t + n - 8);
            prev_sep = 0;
            i = n - 8;
        } else {
            x = 0x6161616161616161ull;     /* pad with 'a' */
            for (size_t k = 0; k < n; k++)
                x = (x & ~(0xffull << (8 * k))) | (uint64_t)t[k] << (8 * k);
        }
        if (any_below(x, R->scan_below) || (x & (ONES << 7)) || bytes_eq(x, (unsigned char)R->one) ||
            bytes_eq(x, (unsigned char)R->rest))
            return 0;
        uint64_t seps = bytes_eq(x, (unsigned char)R->sep);
        if (seps && (!whole_filter || (!R->empty_tokens && (seps & ((seps << 8) | (prev_sep << 7))))))
            return 0;
        prev_sep = seps >> 63;
        if (i + 8 >= n)
            break;
    }
    return R->empty_tokens || t[n - 1] != (unsigned char)R->sep;
}

/* Byte by byte, in order, so the first offending byte is the one named:
 * the byte classes (fs_byte_class), UTF-8, then at each token's end its
 * emptiness and whether it is a whole-token wildcard. */
static int check_literal(fs_dialect d, const unsigned char *t, size_t n, int whole_filter, fs_error *err)
{
    const fs_dialect_rules *R = fs_rules(d);
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        unsigned k = i == n ? FS_BYTE_SEP : fs_byte_class(d, t[i]);
        switch (k) {
        case FS_BYTE_OK:
            continue;
        case FS_BYTE_NUL:
            return fail(err, R->nul_in_token, i);
        case FS_BYTE_SPACE:
            return fail(err, "whitespace in a token", i);
        case FS_BYTE_WILD:
            return fail(err, whole_filter ? "wildcard in a literal filter" : "wildcard character in a literal token", i);
        case FS_BYTE_HIGH: {
            size_t m = fs_utf8_seq(t, i, n);
            if (!m)
                return fail(err, "invalid UTF-8", i);
            i += m - 1;
            continue;
        }
        default:      /* FS_BYTE_SEP, or the end: a token ends at i */
            if (i < n && !whole_filter)
                return fail(err, "separator inside a token", i);
            if (i == start && !R->empty_tokens)
                return fail(err, "empty token", i);
            if (fs_token_kind(d, (const char *)t + start, i - start) != FS_TOK_LITERAL)
                return fail(err, whole_filter ? "wildcard in a literal filter" : "wildcard token stored as a literal",
                            start);
            start = i + 1;
        }
    }
    return FS_OK;
}

int fs_check_literal(fs_dialect d, const unsigned char *t, size_t n, int whole_filter, fs_error *err)
{
    if (n && literal_fast(d, t, n, whole_filter))
        return FS_OK;
    return check_literal(d, t, n, whole_filter, err);
}
