/* oracle.h - the fuzz harnesses' own, deliberately plain model of the rules
 * of the README's Semantics section (the C twin of src/topicmatch/_reference.py): byte
 * splitting, no trie, no hashing, no word-at-a-time scanning.  The
 * harnesses compare the engine's answers with these.
 *
 *   o_valid(d, s, n, is_filter)        1 valid, 0 not
 *   o_split_share(s, n, &g, &f)        MQTT "$share/G/f": 1 share, 0 not, -1 malformed
 *   o_queue_ok(d, q, n)                a valid queue / share-group name
 *   o_match(d, f, subject)             does the (inner) filter match the subject
 *   o_intersect(d, f1, f2)             does some valid subject match both filters
 *
 * AMQP (RabbitMQ topic exchanges): '.' words, "" is zero words, '*' one
 * word and '#' zero or more anywhere; at most 255 bytes of UTF-8.
 */
#ifndef FUZZ_ORACLE_H
#define FUZZ_ORACLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs_token.h"

#define O_MAX 65535u

typedef struct {
    const char *p;
    size_t n;
} o_str;

/* Tokens of s split on sep; empty tokens kept.  Returns a malloc'd array
 * (count in *nt). */
static o_str *o_split(const char *s, size_t n, char sep, size_t *nt)
{
    size_t k = 1;
    for (size_t i = 0; i < n; i++) k += s[i] == sep;
    o_str *t = malloc(sizeof(o_str) * k);
    if (!t) abort();
    size_t start = 0, j = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || s[i] == sep) {
            t[j].p = s + start;
            t[j].n = i - start;
            j++;
            start = i + 1;
        }
    *nt = k;
    return t;
}

/* The tokens of a subject or filter: o_split, except that AMQP's "" has
 * none (the returned array is then still malloc'd, for free()). */
static o_str *o_words(fs_dialect d, const char *s, size_t n, size_t *nt)
{
    o_str *t = o_split(s, n, d == FS_MQTT ? '/' : '.', nt);
    if (d == FS_AMQP && n == 0) *nt = 0;
    return t;
}

static int o_is(o_str t, const char *lit) { return t.n == strlen(lit) && memcmp(t.p, lit, t.n) == 0; }

/* Valid UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static int o_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

static int o_nats_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

/* "$share/G/f" -> 1 with the group and the filter; 0: not a share;
 * -1: a malformed one.  The group's rules are those of o_queue_ok. */
static int o_split_share(const char *s, size_t n, o_str *group, o_str *filter)
{
    if (n < 7 || memcmp(s, "$share/", 7) != 0) return 0;
    const char *g = s + 7;
    const char *slash = memchr(g, '/', n - 7);
    if (!slash) return -1;
    group->p = g;
    group->n = (size_t)(slash - g);
    filter->p = slash + 1;
    filter->n = n - (size_t)(slash + 1 - s);
    return 1;
}

static int o_queue_ok(fs_dialect d, const char *q, size_t n)
{
    if (n == 0 || n > O_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        if (q[i] == 0) return 0;
        if (d == FS_NATS && o_nats_space(q[i])) return 0;
        if (d == FS_MQTT && (q[i] == '/' || q[i] == '+' || q[i] == '#')) return 0;
    }
    return d != FS_AMQP || o_utf8((const unsigned char *)q, n);
}

/* A subject (is_filter 0) or a filter without "$share/" (is_filter 1). */
static int o_valid_plain(fs_dialect d, const char *s, size_t n, int is_filter)
{
    if (d == FS_AMQP)       /* any bytes (NUL too), any words: length and UTF-8 only */
        return n <= 255 && o_utf8((const unsigned char *)s, n);
    if (n == 0 || n > O_MAX) return 0;
    if (memchr(s, 0, n) || !o_utf8((const unsigned char *)s, n)) return 0;
    size_t nt;
    o_str *t = o_split(s, n, d == FS_NATS ? '.' : '/', &nt);
    int ok = 1;
    for (size_t i = 0; i < nt && ok; i++) {
        if (d == FS_NATS) {
            if (t[i].n == 0) ok = 0;
            for (size_t k = 0; k < t[i].n && ok; k++)
                if (o_nats_space(t[i].p[k])) ok = 0;
            if (o_is(t[i], "*") || o_is(t[i], ">")) {
                if (!is_filter) ok = 0;
                if (o_is(t[i], ">") && i != nt - 1) ok = 0;
            }
        } else {
            int plus = memchr(t[i].p, '+', t[i].n) != NULL, hash = memchr(t[i].p, '#', t[i].n) != NULL;
            if ((plus || hash) && (!is_filter || t[i].n != 1)) ok = 0;
            if (o_is(t[i], "#") && i != nt - 1) ok = 0;
        }
    }
    free(t);
    return ok;
}

static int o_valid(fs_dialect d, const char *s, size_t n, int is_filter)
{
    if (is_filter && d == FS_MQTT) {
        o_str g, f;
        int share = o_split_share(s, n, &g, &f);
        if (share < 0) return 0;
        if (share == 1) {
            if (n > O_MAX || g.n == 0 || memchr(g.p, '+', g.n) || memchr(g.p, '#', g.n) || memchr(g.p, 0, g.n))
                return 0;
            return o_valid_plain(d, f.p, f.n, 1) && o_queue_ok(d, g.p, g.n);
        }
    }
    return o_valid_plain(d, s, n, is_filter);
}

static int o_eq(const o_str *a, const o_str *b) { return a->n == b->n && memcmp(a->p, b->p, a->n) == 0; }

/* AMQP: can binding words f[i..] produce routing words s[j..]?  Plain
 * recursion, each (i, j) answered once (memo: 0 unknown, 1 no, 2 yes). */
static int o_amqp_rec(const o_str *f, size_t nf, const o_str *s, size_t ns, size_t i, size_t j,
                      unsigned char *memo)
{
    unsigned char *m = &memo[i * (ns + 1) + j];
    if (*m) return *m == 2;
    int r;
    if (i == nf) r = j == ns;
    else if (o_is(f[i], "#")) r = o_amqp_rec(f, nf, s, ns, i + 1, j, memo) ||
                                  (j < ns && o_amqp_rec(f, nf, s, ns, i, j + 1, memo));
    else r = j < ns && (o_is(f[i], "*") || o_eq(&f[i], &s[j])) && o_amqp_rec(f, nf, s, ns, i + 1, j + 1, memo);
    *m = (unsigned char)(r ? 2 : 1);
    return r;
}

static int o_amqp_match(const o_str *f, size_t nf, const o_str *s, size_t ns)
{
    unsigned char *memo = calloc((nf + 1) * (ns + 1), 1);
    if (!memo) abort();
    int r = o_amqp_rec(f, nf, s, ns, 0, 0, memo);
    free(memo);
    return r;
}

/* AMQP: the fewest bytes (plus one) of a routing-key suffix that binding
 * words a[i..] and b[j..] both match, O_NO_KEY if none.  Either side's '#'
 * may take no word; otherwise both take the next word, which must suit
 * both ('#' takes it and stays); a free word is the empty word. */
#define O_NO_KEY 100000
static int o_amqp_meet(const o_str *a, size_t na, const o_str *b, size_t nb, size_t i, size_t j, int *memo)
{
    int *m = &memo[i * (nb + 1) + j];
    if (*m >= 0) return *m;
    *m = O_NO_KEY;                   /* the one cycle, '#' against '#' taking a word, adds nothing */
    int best = i == na && j == nb ? 0 : O_NO_KEY;
    int ha = i < na && o_is(a[i], "#"), hb = j < nb && o_is(b[j], "#");
    int c;
    if (ha && (c = o_amqp_meet(a, na, b, nb, i + 1, j, memo)) < best) best = c;
    if (hb && (c = o_amqp_meet(a, na, b, nb, i, j + 1, memo)) < best) best = c;
    if (i < na && j < nb && !(ha && hb)) {
        int wa = ha || o_is(a[i], "*"), wb = hb || o_is(b[j], "*");
        if (wa || wb || o_eq(&a[i], &b[j])) {
            int word = (int)(!wa ? a[i].n : !wb ? b[j].n : 0) + 1;
            c = o_amqp_meet(a, na, b, nb, ha ? i : i + 1, hb ? j : j + 1, memo);
            if (c < O_NO_KEY && c + word < best) best = c + word;
        }
    }
    *m = best;
    return best;
}

/* Token lists: does filter f match subject s (both valid; f without "$share/")? */
static int o_match_tokens(fs_dialect d, const o_str *f, size_t nf, const o_str *s, size_t ns)
{
    if (d == FS_AMQP) return o_amqp_match(f, nf, s, ns);
    const char *one = d == FS_NATS ? "*" : "+", *rest = d == FS_NATS ? ">" : "#";
    if (d == FS_MQTT && s[0].n > 0 && s[0].p[0] == '$' && (o_is(f[0], one) || o_is(f[0], rest)))
        return 0;
    for (size_t i = 0; i < nf; i++) {
        if (o_is(f[i], rest))
            return d == FS_NATS ? ns > i : ns >= i;
        if (i >= ns) return 0;
        if (!o_is(f[i], one) && !(f[i].n == s[i].n && memcmp(f[i].p, s[i].p, f[i].n) == 0)) return 0;
    }
    return nf == ns;
}

static int o_match(fs_dialect d, const char *f, size_t fn, const char *s, size_t sn)
{
    size_t nf, ns;
    o_str *ft = o_words(d, f, fn, &nf), *st = o_words(d, s, sn, &ns);
    int m = o_match_tokens(d, ft, nf, st, ns);
    free(ft);
    free(st);
    return m;
}

/* Does some valid subject match both (valid, inner) filters?  Build the one
 * candidate subject that would (free levels become "a", never a '$' topic)
 * and check it, as _reference._witness does. */
static int o_intersect(fs_dialect d, const char *f1, size_t n1, const char *f2, size_t n2)
{
    if (d == FS_AMQP) {
        size_t na, nb;
        o_str *a = o_words(d, f1, n1, &na), *b = o_words(d, f2, n2, &nb);
        int *memo = malloc(sizeof(int) * (na + 1) * (nb + 1));
        if (!memo) abort();
        for (size_t k = 0; k < (na + 1) * (nb + 1); k++) memo[k] = -1;
        int c = o_amqp_meet(a, na, b, nb, 0, 0, memo);
        int r = c <= 256;            /* bytes = c - 1 (no separator before the first word) */
        free(memo);
        free(a);
        free(b);
        return r;
    }
    char sep = d == FS_NATS ? '.' : '/';
    const char *one = d == FS_NATS ? "*" : "+", *rest = d == FS_NATS ? ">" : "#";
    size_t na, nb;
    o_str *a = o_split(f1, n1, sep, &na), *b = o_split(f2, n2, sep, &nb);
    o_str *w = malloc(sizeof(o_str) * (na + nb + 1));
    if (!w) abort();
    size_t nw = 0;
    int possible = 1;
    for (size_t i = 0;; i++) {
        const o_str *x = i < na ? &a[i] : NULL, *y = i < nb ? &b[i] : NULL;
        if (!x && !y) break;
        if ((x && o_is(*x, rest)) || (y && o_is(*y, rest))) {
            const o_str *other = x && o_is(*x, rest) ? b : a;
            size_t nother = x && o_is(*x, rest) ? nb : na;
            if (i < nother) {
                for (size_t k = i; k < nother; k++) {
                    int wild = o_is(other[k], one) || o_is(other[k], rest);
                    w[nw].p = wild ? "a" : other[k].p;
                    w[nw++].n = wild ? 1 : other[k].n;
                }
            } else if (d == FS_NATS) {
                possible = 0;
            }
            break;
        }
        if (!x || !y) { possible = 0; break; }
        if (o_is(*x, one)) {
            w[nw] = o_is(*y, one) ? (o_str){"a", 1} : *y;
            nw++;
        } else if (o_is(*y, one) || (x->n == y->n && memcmp(x->p, y->p, x->n) == 0)) {
            w[nw++] = *x;
        } else {
            possible = 0;
            break;
        }
    }
    int ok = 0;
    if (possible) {
        size_t len = nw ? nw - 1 : 0;
        for (size_t i = 0; i < nw; i++) len += w[i].n;
        char *s = malloc(len + 1);
        if (!s) abort();
        size_t at = 0;
        for (size_t i = 0; i < nw; i++) {
            if (i) s[at++] = sep;
            memcpy(s + at, w[i].p, w[i].n);
            at += w[i].n;
        }
        ok = o_valid_plain(d, s, len, 0) && o_match_tokens(d, a, na, w, nw) && o_match_tokens(d, b, nb, w, nw);
        free(s);
    }
    free(a);
    free(b);
    free(w);
    return ok;
}

#endif
