/* fs_shape.c - the shape tables (see fs_shape.h): classify filters, keep
 * one table per shape, and probe them for a subject. */
#include "fs_shape.h"

#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_index.h"

int fs_shape_classify(const fs_tokens *t, fs_shape_of *out)
{
    uint32_t n = t->n;
    uint32_t rest = n && t->tok[n - 1].kind == FS_TOK_REST;
    uint32_t ntoks = n - rest;
    if (ntoks > FS_SHAPE_MAX_TOKENS)
        return 0;
    uint64_t mask = 0, key = 0;
    for (uint32_t i = 0; i < ntoks; i++) {
        if (t->tok[i].kind == FS_TOK_ONE)
            mask |= 1ull << i;
        else if (t->tok[i].kind == FS_TOK_REST)
            return 0;            /* AMQP '#' before the end: no fixed shape (the trie) */
    }
    if (!mask && !rest)
        return 0;                /* a literal: most filters, so no key for them */
    for (uint32_t i = 0; i < ntoks; i++)
        if (!((mask >> i) & 1))
            key += fs_pos_mix(t->tok[i].hash, i);
    out->onemask = mask;
    out->ntoks = ntoks;
    out->rest = rest;
    out->key = key;
    return 1;
}

/* Canonical order of shapes: token count, then rest, then mask.  Probing
 * in this order makes a subject's hits -- and so NATS group merging and
 * queue picks -- independent of the order shapes were created in. */
int fs_shape_before(const fs_shape *a, const fs_shape_of *b)
{
    if (a->ntoks != b->ntoks) return a->ntoks < b->ntoks;
    if (a->rest != b->rest) return a->rest < b->rest;
    return a->onemask < b->onemask;
}

static int shape_is(const fs_shape *a, const fs_shape_of *b)
{
    return a->ntoks == b->ntoks && a->rest == b->rest && a->onemask == b->onemask;
}

/* Does a subject of k tokens probe shape sh?  zero_plus: the rest
 * wildcard matches 0+ tokens (MQTT and AMQP '#'), not 1+ (NATS '>'). */
static int applies(const fs_shape *sh, uint32_t k, int zero_plus)
{
    if (!sh->rest)
        return sh->ntoks == k;
    return zero_plus ? sh->ntoks <= k : sh->ntoks < k;
}

void fs_shapes_probes(const fs_sublist *sl, uint64_t *probe)
{
    const fs_shapes *S = &sl->shapes;
    int zero_plus = fs_rules(sl->dialect)->rest_min == 0;
    /* k == 0 is the AMQP key of zero words, which only '#' matches. */
    uint32_t k0 = fs_rules(sl->dialect)->empty_ok ? 0 : 1;
    for (uint32_t k = 0; k <= FS_SHAPE_MAX_TOKENS + 1; k++) {
        uint64_t bits = 0;
        for (uint32_t j = 0; j < S->n; j++)
            if (k >= k0 && applies(S->shape[j], k, zero_plus))
                bits |= 1ull << j;
        probe[k] = bits;
    }
}

/* Does a filter of shape sh start with a wildcard?  (Its first level a
 * '+', or a '#' with no literal before it.) */
static uint32_t starts_wild(const fs_shape *sh)
{
    return (sh->onemask & 1) || (sh->rest && sh->ntoks == 0);
}

/* fs_shapes.key_ntoks and key_wild hold a token position, or the count */
_Static_assert(FS_SHAPE_MAX_TOKENS <= UINT8_MAX, "a shape's key recipe holds positions in bytes");

void fs_shapes_hide_probes(fs_shapes *S)
{
    uint64_t wild = 0;
    S->key_more = 0;
    for (uint32_t j = 0; j < S->n; j++) {
        const fs_shape *sh = S->shape[j];
        wild |= (uint64_t)starts_wild(sh) << j;
        /* ntoks <= FS_SHAPE_MAX_TOKENS and no wildcard past it: checked
         * where the shape was made or an image's read */
        S->key_ntoks[j] = (uint8_t)sh->ntoks;
        S->key_wild[j] = (uint8_t)(sh->onemask ? fs_ctz64(sh->onemask) : FS_SHAPE_MAX_TOKENS);
        S->key_more |= (uint64_t)((sh->onemask & (sh->onemask - 1)) != 0) << j;
    }
    for (uint32_t k = 0; k <= FS_SHAPE_MAX_TOKENS + 1; k++)
        S->probe[1][k] = S->probe[0][k] & ~wild;
}

static void rebuild_probes(fs_sublist *sl)
{
    fs_shapes_probes(sl, sl->shapes.probe[0]);
    fs_shapes_hide_probes(&sl->shapes);
}

fs_shape *fs_shape_find(const fs_sublist *sl, const fs_shape_of *of)
{
    const fs_shapes *S = &sl->shapes;
    for (uint32_t j = 0; j < S->n; j++)
        if (shape_is(S->shape[j], of))
            return S->shape[j];
    return NULL;
}

/* The shape budget, one rule for the index's first-come shapes
 * (within_budget) and the canonical choice (fs_shapes_choose): with
 * nshapes shapes held already, and nprobed[k] of them probed by a subject
 * of k tokens, may one more like `of` have a table?  Fewer than
 * FS_SHAPE_MAX shapes, and fewer than FS_SHAPE_MAX_PROBES probed at every
 * subject length it applies to. */
static int shape_fits(const uint32_t *nprobed, uint32_t nshapes, const fs_shape_of *of, int zero_plus)
{
    if (nshapes >= FS_SHAPE_MAX)
        return 0;
    fs_shape probe_of = {0};
    probe_of.ntoks = of->ntoks;
    probe_of.rest = of->rest;
    for (uint32_t k = 0; k <= FS_SHAPE_MAX_TOKENS + 1; k++)
        if (applies(&probe_of, k, zero_plus) && nprobed[k] >= FS_SHAPE_MAX_PROBES)
            return 0;
    return 1;
}

/* Would one more shape like `of` stay within the budget? */
static int within_budget(const fs_sublist *sl, const fs_shape_of *of)
{
    const fs_shapes *S = &sl->shapes;
    uint32_t nprobed[FS_SHAPE_MAX_TOKENS + 2];
    for (uint32_t k = 0; k <= FS_SHAPE_MAX_TOKENS + 1; k++)
        nprobed[k] = (uint32_t)fs_popcount64(S->probe[0][k]);
    return shape_fits(nprobed, S->n, of, fs_rules(sl->dialect)->rest_min == 0);
}

static int shape_of_cmp(const void *pa, const void *pb)
{
    const fs_shape_of *a = pa, *b = pb;
    if (a->ntoks != b->ntoks) return a->ntoks < b->ntoks ? -1 : 1;
    if (a->rest != b->rest) return a->rest < b->rest ? -1 : 1;
    if (a->onemask != b->onemask) return a->onemask < b->onemask ? -1 : 1;
    return 0;
}

static int shape_of_same(const fs_shape_of *a, const fs_shape_of *b)
{
    return a->ntoks == b->ntoks && a->rest == b->rest && a->onemask == b->onemask;
}

uint32_t fs_shapes_choose(fs_dialect d, fs_shape_of *of, size_t n, unsigned char *keep)
{
    int zero_plus = fs_rules(d)->rest_min == 0;
    uint32_t k0 = fs_rules(d)->empty_ok ? 0 : 1;
    uint32_t nprobed[FS_SHAPE_MAX_TOKENS + 2] = {0}, kept = 0;
    if (n > 1)
        qsort(of, n, sizeof(*of), shape_of_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i && shape_of_same(&of[i], &of[i - 1])) {
            keep[i] = keep[i - 1];           /* the same shape, the same answer */
            continue;
        }
        keep[i] = (unsigned char)shape_fits(nprobed, kept, &of[i], zero_plus);
        if (!keep[i])
            continue;
        kept++;
        fs_shape counted = {0};
        counted.ntoks = of[i].ntoks;
        counted.rest = of[i].rest;
        for (uint32_t k = k0; k <= FS_SHAPE_MAX_TOKENS + 1; k++)    /* as fs_shapes_probes counts */
            nprobed[k] += (uint32_t)applies(&counted, k, zero_plus);
    }
    return kept;
}

/* The shapes of the trie's shaped filters (fs_shapes_placed_canonically). */
typedef struct {
    const fs_sublist *sl;
    fs_shape_of *v;
    size_t n, cap;
} trie_shapes;

static int note_trie_shape(void *p, const fs_node *x, const fs_shape_of *of)
{
    trie_shapes *c = p;
    (void)x;
    if (fs_shape_find(c->sl, of))
        return 1;                    /* its shape has a table: misplaced, stop */
    if (c->n == c->cap && fs_grow(&c->v, &c->cap, c->n + 1, sizeof(fs_shape_of)) < 0)
        return FS_ENOMEM;
    c->v[c->n++] = *of;
    return FS_OK;
}

int fs_shapes_placed_canonically(const fs_sublist *sl)
{
    const fs_shapes *S = &sl->shapes;
    trie_shapes c = {.sl = sl};
    unsigned char *keep = NULL;
    int rc = fs_trie_each_shaped(sl, note_trie_shape, &c);
    if (rc == FS_OK && c.n) {
        /* the index's tables fit the budget; with the trie's shapes too,
         * the choice must keep exactly the shapes with tables */
        size_t n = c.n + S->n;
        if (fs_grow(&c.v, &c.cap, n, sizeof(fs_shape_of)) < 0 || !(keep = FS_MALLOC(n))) {
            rc = FS_ENOMEM;
        } else {
            for (uint32_t j = 0; j < S->n; j++)
                c.v[c.n + j] = (fs_shape_of){.onemask = S->shape[j]->onemask, .ntoks = S->shape[j]->ntoks,
                                             .rest = S->shape[j]->rest};
            fs_shapes_choose(sl->dialect, c.v, n, keep);
            for (size_t i = 0; i < n && rc == FS_OK; i++)
                if (keep[i] != (fs_shape_find(sl, &c.v[i]) != NULL))
                    rc = 1;
        }
    }
    FS_FREE(keep);
    FS_FREE(c.v);
    return rc == 1 ? 0 : rc == FS_OK ? 1 : rc;
}

int fs_shape_create(fs_sublist *sl, const fs_shape_of *of, fs_shape **out)
{
    *out = NULL;
    if (!within_budget(sl, of))
        return FS_OK;
    fs_shape *sh = fs_sl_alloc(sl, sizeof(fs_shape));
    if (!sh)
        return FS_ENOMEM;
    memset(sh, 0, sizeof(*sh));
    sh->onemask = of->onemask;
    sh->ntoks = of->ntoks;
    sh->rest = of->rest;
    sh->first_wild = starts_wild(sh);
    fs_level_filter_init(&sh->table);
    fs_shapes *S = &sl->shapes;
    uint32_t at = 0;
    while (at < S->n && fs_shape_before(S->shape[at], of))
        at++;
    memmove(&S->shape[at + 1], &S->shape[at], sizeof(fs_shape *) * (S->n - at));
    S->shape[at] = sh;
    S->n++;
    rebuild_probes(sl);
    *out = sh;
    return FS_OK;
}

/* Drop an emptied shape. */
static void shape_destroy(fs_sublist *sl, fs_shape *sh)
{
    fs_shapes *S = &sl->shapes;
    uint32_t at = 0;
    while (S->shape[at] != sh)
        at++;
    memmove(&S->shape[at], &S->shape[at + 1], sizeof(fs_shape *) * (S->n - at - 1));
    S->n--;
    rebuild_probes(sl);
    fs_sl_free(sl, sh->table.slots, fs_level_bytes(&sh->table, sh->table.cap));
    fs_sl_free(sl, sh, sizeof(fs_shape));
}

void fs_shape_drop_if_empty(fs_sublist *sl, fs_shape *sh)
{
    if (sh->table.count == 0)
        shape_destroy(sl, sh);
}

/* Equality of n bytes at a (readable up to a_end) and b (up to b_end),
 * a word at a time where both sides allow it. */
static inline int bytes_eq(const char *a, const char *a_end, const char *b, const char *b_end, uint32_t n)
{
    while (n >= 8) {
        if (fs_load_le64(a) != fs_load_le64(b))
            return 0;
        a += 8;
        b += 8;
        n -= 8;
    }
    if (n == 0)
        return 1;
    if (a_end - a >= 8 && b_end - b >= 8)
        return ((fs_load_le64(a) ^ fs_load_le64(b)) & ((1ull << (8 * n)) - 1)) == 0;
    while (n--)
        if (*a++ != *b++)
            return 0;
    return 1;
}

fs_node *fs_shape_lookup(const fs_sublist *sl, const fs_shape *sh, const char *f, uint32_t flen, uint64_t key)
{
    return (fs_node *)(uintptr_t)fs_keyed_find(sl, &sh->table, key, f, flen, f + flen);
}

int fs_shape_add(fs_sublist *sl, fs_shape *sh, fs_node *n, uint64_t key)
{
    return fs_level_add_checked(&sl->mem, &sh->table, n, (uint32_t)(key >> 32), 1);
}

void fs_shape_del(fs_sublist *sl, fs_shape *sh, fs_node *n)
{
    fs_level_del(&sh->table, n);
    fs_level_shrink(&sl->mem, &sh->table);
    fs_shape_drop_if_empty(sl, sh);
}

int fs_shape_entry_matches(const fs_shape *sh, const fs_node *e, uint32_t flen, char sep, const char *s,
                           const fs_span *t, const char *s_end)
{
    const char *f = e->tok, *f_end = e->tok + FS_TOK_ALLOC(flen);
    uint32_t fp = 0, i = 0, n = sh->ntoks;
    uint64_t mask = sh->onemask;
    while (i < n) {
        if ((mask >> i) & 1) {
            fp += 2;                 /* the wildcard and its separator: the shape says so */
            i++;
            continue;
        }
        uint32_t j = i + 1;
        while (j < n && !((mask >> j) & 1))
            j++;
        /* Literal tokens i..j-1 with their separators: one byte range in both. */
        uint32_t a = t[i].off, len = t[j - 1].off + t[j - 1].len - a;
        if (fp > flen || len > flen - fp || !bytes_eq(f + fp, f_end, s + a, s_end, len))
            return 0;
        fp += len;
        if (j < n || sh->rest) {     /* the run must end where the filter's token ends */
            if (fp >= flen || f[fp] != sep)
                return 0;
            fp++;
        }
        i = j;
    }
    /* Past the last token: exact shapes end here (a wildcard last token
     * counted a separator that is not there), rest shapes have one byte. */
    if (sh->rest)
        return fp + 1 == flen;
    return (n && ((mask >> (n - 1)) & 1)) ? fp - 1 == flen : fp == flen;
}

void fs_shapes_free(fs_sublist *sl)
{
    fs_shapes *S = &sl->shapes;
    while (S->n) {
        fs_shape *sh = S->shape[S->n - 1];
        fs_table_teardown(sl, &sh->table);
        shape_destroy(sl, sh);
    }
}
