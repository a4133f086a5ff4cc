/* fs_serial_dump.c - an index written in the format's version 2
 * (docs/FORMAT.md; sublist.h, fs_sublist_dump): the literal table, the
 * shape section and the trie, every list in one sorted order, so that
 * equal indexes give equal bytes.  The loader is fs_serial.c. */
#include "fs_serial.h"

#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_dialect.h"
#include "fs_header.h"
#include "fs_image.h"
#include "fs_index.h"
#include "fs_mem.h"
#include "fs_node.h"

typedef struct {
    unsigned char *buf;
    size_t len, cap;
} wbuf;

/* Make room for n more bytes.  FS_OK or FS_ENOMEM. */
static int wb_room(wbuf *w, size_t n)
{
    if (w->cap - w->len >= n)
        return FS_OK;
    if (n > SIZE_MAX / 2 - w->len)
        return FS_ENOMEM;
    size_t need = w->len + n, ncap = w->cap ? w->cap : 4096;
    while (ncap < need)
        ncap *= 2;
    unsigned char *nb = FS_REALLOC(w->buf, ncap);
    if (!nb)
        return FS_ENOMEM;
    w->buf = nb;
    w->cap = ncap;
    return FS_OK;
}

/* The caller has made room (at most 10 bytes). */
static inline void wb_uv(wbuf *w, uint64_t v)
{
    while (v >= 0x80) {
        w->buf[w->len++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    w->buf[w->len++] = (unsigned char)v;
}

static int wb_ids(wbuf *w, const int64_t *ids, uint32_t n)
{
    if (wb_room(w, 10 * (size_t)n) < 0)
        return FS_ENOMEM;
    uint64_t first = (uint64_t)ids[0];
    wb_uv(w, (first << 1) ^ (0 - (first >> 63)));   /* zigzag */
    for (uint32_t i = 1; i < n; i++)
        wb_uv(w, (uint64_t)ids[i] - (uint64_t)ids[i - 1] - 1);
    return FS_OK;
}

static int wb_bytes(wbuf *w, const char *p, size_t n)
{
    if (wb_room(w, 10 + n) < 0)
        return FS_ENOMEM;
    wb_uv(w, n);
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return FS_OK;
}

static int group_cmp(const void *a, const void *b)
{
    const fs_group *x = *(const fs_group *const *)a, *y = *(const fs_group *const *)b;
    uint32_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* Nodes and entries in the byte order of their token (a table entry's
 * token is its whole filter): the image lists them so, not in the order of
 * hash-table slots, which depends on the order of insertion. */
static int node_cmp(const void *a, const void *b)
{
    const fs_node *x = *(const fs_node *const *)a, *y = *(const fs_node *const *)b;
    uint32_t n = x->toklen < y->toklen ? x->toklen : y->toklen;
    int c = n ? memcmp(x->tok, y->tok, n) : 0;
    if (c)
        return c;
    return (x->toklen > y->toklen) - (x->toklen < y->toklen);
}

typedef struct {
    wbuf w;
    const fs_group **gs;     /* scratch for sorting one node's groups */
    size_t cap_gs;
    const fs_node **kids;    /* sorted entries or children: a stack of runs */
    size_t nkids, cap_kids;
    uint64_t subs;
} dumper;

/* Append the entries of table L to d->kids, sorted.  FS_OK or FS_ENOMEM. */
static int collect_sorted(dumper *d, const fs_level *L)
{
    size_t start = d->nkids;
    if (fs_grow(&d->kids, &d->cap_kids, start + L->count, sizeof(*d->kids)) < 0)
        return FS_ENOMEM;
    for (uint32_t i = 0; i < L->cap; i++)
        if (L->slots[i].node)
            d->kids[d->nkids++] = L->slots[i].node;
    if (d->nkids - start > 1)
        qsort(d->kids + start, d->nkids - start, sizeof(*d->kids), node_cmp);
    return FS_OK;
}

/* A node's subscriptions: plain ids, then its groups sorted by name. */
static int dump_subs(dumper *d, const fs_node *n)
{
    if (wb_room(&d->w, 10) < 0)
        return FS_ENOMEM;
    wb_uv(&d->w, (uint64_t)n->nsubs << 1 | (fs_ngroups(n) > 0));
    if (n->nsubs && wb_ids(&d->w, fs_node_ids(n), n->nsubs) < 0)
        return FS_ENOMEM;
    d->subs += n->nsubs;
    if (!fs_ngroups(n))
        return FS_OK;
    if (fs_grow(&d->gs, &d->cap_gs, fs_ngroups(n), sizeof(*d->gs)) < 0 || wb_room(&d->w, 10) < 0)
        return FS_ENOMEM;
    wb_uv(&d->w, fs_ngroups(n));
    for (uint32_t i = 0; i < fs_ngroups(n); i++)
        d->gs[i] = fs_node_group(n, i);
    if (fs_ngroups(n) > 1)
        qsort(d->gs, fs_ngroups(n), sizeof(*d->gs), group_cmp);
    for (uint32_t i = 0; i < fs_ngroups(n); i++) {
        const fs_group *g = d->gs[i];
        if (wb_bytes(&d->w, g->name, g->name_len) < 0 || wb_room(&d->w, 10) < 0)
            return FS_ENOMEM;
        wb_uv(&d->w, g->n);
        if (wb_ids(&d->w, g->ids, g->n) < 0)
            return FS_ENOMEM;
        d->subs += g->n;
    }
    return FS_OK;
}

static int has_children(const fs_node *n)
{
    return fs_next(n) && (fs_next(n)->count || fs_next(n)->one || fs_next(n)->rest);
}

/* A trie node's record: subscriptions, then its children word. */
static int dump_record(dumper *d, const fs_node *n)
{
    if (dump_subs(d, n) < 0 || wb_room(&d->w, 10) < 0)
        return FS_ENOMEM;
    const fs_level *L = fs_next(n);
    uint64_t ch = 0;
    if (L)
        ch = (uint64_t)L->count << 2 | (L->one ? 1u : 0u) | (L->rest ? 2u : 0u);
    wb_uv(&d->w, ch);
    return FS_OK;
}

typedef struct {
    const fs_node *n;
    size_t kids_start;     /* n's literal children, sorted: d->kids[kids_start..kids_end), */
    size_t kid, kids_end;  /* the next to write at kid */
    int stage;             /* 0 literal children, 1 the one child, 2 the rest child */
} wframe;

/* Push node c (which has children) onto the walk: its literal children are
 * sorted onto d->kids.  FS_OK or FS_ENOMEM. */
static int push_frame(dumper *d, wframe **stack, size_t *depth, size_t *cap, const fs_node *c)
{
    if (fs_grow(stack, cap, *depth + 1, sizeof(wframe)) < 0)
        return FS_ENOMEM;
    size_t start = d->nkids;
    if (collect_sorted(d, fs_next(c)) < 0)
        return FS_ENOMEM;
    (*stack)[(*depth)++] = (wframe){.n = c, .kids_start = start, .kid = start, .kids_end = d->nkids, .stage = 0};
    return FS_OK;
}

/* The image is canonical: every list in it is sorted by bytes (literal
 * entries, shaped entries, each level's literal children; groups by name,
 * ids ascending), so it depends on the subscriptions and on which part of
 * the index holds each filter, never on the order of insertion. */
static int dump_locked(fs_sublist *sl, dumper *d, uint64_t *nlit, uint64_t *ntrie)
{
    if (wb_room(&d->w, FS_SERIAL_HEADER) < 0)
        return FS_ENOMEM;
    d->w.len = FS_SERIAL_HEADER;     /* filled in at the end */

    d->nkids = 0;
    if (collect_sorted(d, &sl->literals) < 0)
        return FS_ENOMEM;
    for (size_t i = 0; i < d->nkids; i++) {
        const fs_node *e = d->kids[i];
        if (wb_bytes(&d->w, e->tok, e->toklen) < 0 || dump_subs(d, e) < 0)
            return FS_ENOMEM;
        (*nlit)++;
    }

    /* Version 2: the shape-table entries, each a whole filter and its
     * subscriptions, after a count; sorted across all shapes. */
    d->nkids = 0;
    for (uint32_t j = 0; j < sl->shapes.n; j++)
        if (collect_sorted(d, &sl->shapes.shape[j]->table) < 0)
            return FS_ENOMEM;
    if (d->nkids > 1)         /* one order across the shapes */
        qsort(d->kids, d->nkids, sizeof(*d->kids), node_cmp);
    if (wb_room(&d->w, 10) < 0)
        return FS_ENOMEM;
    wb_uv(&d->w, d->nkids);
    for (size_t i = 0; i < d->nkids; i++) {
        const fs_node *e = d->kids[i];
        if (wb_bytes(&d->w, e->tok, e->toklen) < 0 || dump_subs(d, e) < 0)
            return FS_ENOMEM;
    }
    d->nkids = 0;

    /* The trie, preorder, with an explicit stack. */
    wframe *stack = NULL;
    size_t depth = 0, cap = 0;
    int rc = dump_record(d, sl->root);
    if (rc == FS_OK && has_children(sl->root))
        rc = push_frame(d, &stack, &depth, &cap, sl->root);
    while (rc == FS_OK && depth) {
        wframe *f = &stack[depth - 1];
        const fs_level *L = fs_next(f->n);
        const fs_node *c = NULL;
        if (f->stage == 0) {
            if (f->kid < f->kids_end) {
                c = d->kids[f->kid++];
                rc = wb_bytes(&d->w, c->tok, c->toklen);
            } else {
                f->stage = 1;
            }
        } else if (f->stage == 1) {
            c = L->one;
            f->stage = 2;
        } else if (f->stage == 2) {
            c = L->rest;
            f->stage = 3;
        } else {
            d->nkids = f->kids_start;     /* its run is the top of d->kids: drop it */
            depth--;
        }
        if (!c || rc < 0)
            continue;
        (*ntrie)++;
        rc = dump_record(d, c);
        if (rc == FS_OK && has_children(c))
            rc = push_frame(d, &stack, &depth, &cap, c);
    }
    FS_FREE(stack);
    return rc;
}

int fs_sublist_dump(fs_sublist *sl, char **out, size_t *len)
{
    int placed = 1;
    *out = NULL;
    *len = 0;
    if (!sl->img.base) {      /* where the set's rule puts each filter (fs_shapes_choose)? */
        fs_brlock_rdlock_long(&sl->lock);
        placed = fs_shapes_placed_canonically(sl);
        fs_brlock_rdunlock_long(&sl->lock);
        if (placed < 0)
            return placed;
    }
    if (sl->img.base || !placed) {       /* a mapped image, or placed otherwise: the set, built */
        fs_sublist *built;
        int rc = fs_image_thaw(sl, &built);
        if (rc == FS_OK) {
            rc = fs_sublist_dump(built, out, len);
            fs_sublist_free(built);
        }
        return rc;
    }
    dumper d;
    memset(&d, 0, sizeof(d));
    uint64_t nlit = 0, ntrie = 0;
    *out = NULL;
    *len = 0;
    fs_brlock_rdlock_long(&sl->lock);
    fs_dialect dialect = sl->dialect;
    int rc = dump_locked(sl, &d, &nlit, &ntrie);
    fs_brlock_rdunlock_long(&sl->lock);
    FS_FREE(d.gs);
    FS_FREE(d.kids);
    if (rc == FS_OK)
        rc = wb_room(&d.w, FS_SERIAL_TRAILER);
    if (rc < 0) {
        FS_FREE(d.w.buf);
        return FS_ENOMEM;
    }
    unsigned char *h = d.w.buf;
    fs_header_put(h, &(fs_file_header){.version = FS_SERIAL_VERSION,
                                       .flags = (uint16_t)fs_dialect_code(dialect),
                                       .payload = d.w.len - FS_SERIAL_HEADER,
                                       .subs = d.subs,
                                       .literals = nlit,
                                       .nodes = ntrie});
    fs_le_put(h + d.w.len, fs_serial_checksum(h, d.w.len), FS_SERIAL_TRAILER);
    d.w.len += FS_SERIAL_TRAILER;
    *out = (char *)d.w.buf;
    *len = d.w.len;
    return FS_OK;
}
