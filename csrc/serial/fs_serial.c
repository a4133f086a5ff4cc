/* fs_serial.c - load an index from the format's versions 1 and 2
 * (docs/FORMAT.md; sublist.h, fs_sublist_load), validating everything:
 * every invariant of "Invariants a reader checks".  The writer is
 * fs_serial_dump.c. */
#include "fs_serial.h"

#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_dialect.h"
#include "fs_entry.h"
#include "fs_header.h"
#include "fs_index.h"
#include "fs_mem.h"
#include "fs_node.h"
#include "fs_table.h"

/* Cheap lower bounds on the encoded size of one item, used to reject a
 * count before anything is allocated from it. */
#define MIN_ID 1u          /* one varint byte */
#define MIN_GROUP 4u       /* name length, 1 name byte, member count, one id */
#define MIN_LITERAL 4u     /* length, 1 byte, subscriptions varint, one id */
#define MIN_CHILD 3u       /* token length (MQTT tokens may be empty), subs, children */
#define MIN_NODE 2u        /* a wildcard child: subs, children (no token) */
#define MAX_TABLE (1u << 30)  /* entries of one hash table or group list: keeps capacities in uint32 */

/* Little-endian fields: fs_le_get (fs_header.h); the checksum:
 * fs_checksum.h. */

/* --------------------------------------------------------------- sizing */

/* The capacities a freshly built index ends up with (see sublist.c), so a
 * loaded index has the same layout and memory_bytes. */
static uint32_t table_cap(uint32_t count)
{
    if (count == 0)
        return 0;
    uint32_t cap = 1;
    while ((cap <= 4 ? cap : cap / 4 * 3) < count)
        cap *= 2;
    return cap;
}

static uint32_t ids_cap(uint32_t n, uint32_t first)
{
    uint64_t cap = first;
    while (cap < n)
        cap *= 2;
    return cap > UINT32_MAX ? n : (uint32_t)cap;
}

typedef struct {
    const unsigned char *p;   /* the whole blob */
    size_t pos, end;          /* end: the end of the payload */
    fs_error *err;
    fs_dialect d;
    fs_sublist *sl;
    uint64_t subs;            /* subscriptions read so far */
    unsigned version;         /* of the blob: 1 has no shape section */
} reader;

static int bad(reader *r, const char *why, size_t pos)
{
    r->err->reason = why;
    r->err->in_queue = 0;
    r->err->pos = pos;
    return FS_EBADDATA;
}

static inline size_t left(const reader *r) { return r->end - r->pos; }

static int rd_uv_slow(reader *r, uint64_t *v)
{
    size_t start = r->pos;
    uint64_t x = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (r->pos >= r->end)
            return bad(r, "record runs past the end of the payload", r->end);
        unsigned b = r->p[r->pos++];
        if (shift == 63 && b > 1)
            return bad(r, "varint overflows 64 bits", start);
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (b == 0 && shift)
                return bad(r, "non-canonical varint", start);
            *v = x;
            return FS_OK;
        }
    }
}

static inline int rd_uv(reader *r, uint64_t *v)
{
    if (r->pos < r->end && r->p[r->pos] < 0x80) {
        *v = r->p[r->pos++];
        return FS_OK;
    }
    return rd_uv_slow(r, v);
}

/* n >= 1 strictly increasing ids (the encoding cannot express anything
 * else; only running past INT64_MAX is possible). */
static int rd_ids(reader *r, int64_t *out, uint32_t n)
{
    uint64_t u;
    if (rd_uv(r, &u) < 0)
        return FS_EBADDATA;
    uint64_t prev = (u >> 1) ^ (0 - (u & 1));
    out[0] = (int64_t)prev;
    for (uint32_t i = 1; i < n; i++) {
        size_t at = r->pos;
        if (rd_uv(r, &u) < 0)
            return FS_EBADDATA;
        /* room: how far prev is below INT64_MAX (exact in unsigned math) */
        if (u >= (uint64_t)INT64_MAX - prev)
            return bad(r, "id beyond the signed 64-bit range", at);
        prev += u + 1;
        out[i] = (int64_t)prev;
    }
    return FS_OK;
}

/* A length-prefixed string: checks the length against max and the bytes
 * left; *s points at its bytes in the blob (r->pos - *len after). */
static int rd_str(reader *r, size_t max, const char *too_long, const unsigned char **s,
                  uint32_t *len)
{
    size_t at = r->pos;
    uint64_t n;
    if (rd_uv(r, &n) < 0)
        return FS_EBADDATA;
    if (n > max)
        return bad(r, too_long, at);
    if (n > left(r))
        return bad(r, "record runs past the end of the payload", r->end);
    *s = r->p + r->pos;
    *len = (uint32_t)n;
    r->pos += n;
    return FS_OK;
}

/* ------------------------------------------------- token validation */

/* A literal token (whole_filter 0) or a whole literal filter (1) of the
 * dialect, exactly as the tokenizer accepts it (fs_check_literal, the
 * dialects' rules); at is its blob offset. */
static int check_literal(reader *r, const unsigned char *t, size_t n, int whole_filter, size_t at)
{
    fs_error e;
    if (fs_check_literal(r->d, t, n, whole_filter, &e) < 0)
        return bad(r, e.reason, at + e.pos);
    return FS_OK;
}

/* ---------------------------------------------------------- records */

/* A node's plain subscriptions: ns ids (ns of the subscriptions word, its
 * bound already checked) into n -- one inline, more in an array. */
static int rd_plain(reader *r, fs_node *n, uint64_t ns)
{
    if (ns == 1) {
        n->subcap = 1;
        if (rd_ids(r, &n->subs.one, 1) < 0)
            return FS_EBADDATA;
    } else if (ns > 1) {
        uint32_t cap = ids_cap((uint32_t)ns, 4);
        int64_t *ids = fs_sl_alloc(r->sl, sizeof(int64_t) * cap);
        if (!ids)
            return FS_ENOMEM;
        n->subs.many = ids;
        n->subcap = cap;
        if (rd_ids(r, ids, (uint32_t)ns) < 0)
            return FS_EBADDATA;
    }
    n->nsubs = (uint32_t)ns;
    r->subs += ns;
    return FS_OK;
}

/* Queue group i of gs: its name (valid for the dialect, after group
 * i - 1's in strictly increasing order, the order fs_group_find relies
 * on) and its members.  The caller counts the group in before the read,
 * so that fs_sublist_free releases what this attached when it fails. */
static int rd_group(reader *r, fs_group *gs, uint32_t i)
{
    fs_sublist *sl = r->sl;
    fs_group *g = &gs[i];
    const unsigned char *name;
    uint32_t qlen;
    size_t at = r->pos;
    if (rd_str(r, FS_MAX_SUBJECT, "queue name longer than 65,535 bytes", &name, &qlen) < 0)
        return FS_EBADDATA;
    size_t name_at = r->pos - qlen;
    fs_error qe;
    if (fs_check_queue(r->d, (const char *)name, qlen, &qe) < 0)
        return bad(r, qe.reason, name_at + qe.pos);
    if (i > 0 && !fs_gname_after(gs[i - 1].name, gs[i - 1].name_len, (const char *)name, qlen))
        return bad(r, FS_GROUPS_ORDER_WHY, at);
    g->name = fs_sl_alloc(sl, qlen);
    if (!g->name)
        return FS_ENOMEM;
    memcpy(g->name, name, qlen);
    g->name_len = qlen;
    g->name_hash = fs_hash((const char *)name, qlen);

    at = r->pos;
    uint64_t m;
    if (rd_uv(r, &m) < 0)
        return FS_EBADDATA;
    if (m == 0)
        return bad(r, "empty queue group", at);
    if (m > left(r) / MIN_ID || m > UINT32_MAX)
        return bad(r, "member count exceeds the data", at);
    uint32_t cap = ids_cap((uint32_t)m, 2);
    g->ids = fs_sl_alloc(sl, sizeof(int64_t) * cap);
    if (!g->ids)
        return FS_ENOMEM;
    g->cap = cap;
    if (rd_ids(r, g->ids, (uint32_t)m) < 0)
        return FS_EBADDATA;
    g->n = (uint32_t)m;
    r->subs += m;
    return FS_OK;
}

/* A node's queue groups (the groups flag was set): their count, then each
 * group, into a table attached to n before the first is read. */
static int rd_groups(reader *r, fs_node *n)
{
    size_t at = r->pos;
    uint64_t ng;
    if (rd_uv(r, &ng) < 0)
        return FS_EBADDATA;
    if (ng == 0)
        return bad(r, "zero queue groups after the groups flag", at);
    if (ng > left(r) / MIN_GROUP || ng > MAX_TABLE)
        return bad(r, "queue group count exceeds the data", at);
    uint32_t gcap = ids_cap((uint32_t)ng, 1);
    fs_groups *G = fs_sl_alloc(r->sl, fs_groups_bytes(gcap));
    if (!G)
        return FS_ENOMEM;
    memset(G, 0, fs_groups_bytes(gcap));
    G->cap = gcap;
    n->groups = G;
    for (uint32_t i = 0; i < ng; i++) {
        G->n = i + 1;
        int rc = rd_group(r, G->g, i);
        if (rc < 0)
            return rc;
    }
    return FS_OK;
}

/* Read a node's subscriptions into n (already linked into the index, so
 * fs_sublist_free releases whatever was attached when a read fails): the
 * subscriptions word (the plain ids' count, and bit 0: queue groups
 * follow), the plain ids, then the groups. */
static int rd_subs(reader *r, fs_node *n)
{
    size_t at = r->pos;
    uint64_t v;
    if (rd_uv(r, &v) < 0)
        return FS_EBADDATA;
    uint64_t ns = v >> 1;
    if (ns > left(r) / MIN_ID || ns > UINT32_MAX)
        return bad(r, "id count exceeds the data", at);
    int rc = rd_plain(r, n, ns);
    if (rc < 0 || !(v & 1))
        return rc;
    return rd_groups(r, n);
}

/* Table entry e's subscriptions, just read from body on, as inserts leave
 * them (fs_entry_subs_why; empty_why: this table's words for none). */
static int entry_subs_ok(reader *r, const fs_node *e, const unsigned char *f, uint32_t flen,
                         const char *empty_why, size_t body)
{
    const char *why = fs_entry_subs_why(r->d, (const char *)f, flen, e->nsubs, e->groups ? e->groups->n : 0,
                                        empty_why);
    return why ? bad(r, why, body) : FS_OK;
}

static int rd_literals(reader *r, uint64_t count)
{
    const fs_dialect_rules *R = fs_rules(r->d);
    fs_sublist *sl = r->sl;
    fs_level *L = &sl->literals;
    uint32_t cap = table_cap((uint32_t)count);
    if (cap && fs_level_resize(&sl->mem, L, cap) < 0)
        return FS_ENOMEM;
    fs_tokens t;
    fs_tokens_init(&t);
    int rc = FS_OK;
    for (uint64_t i = 0; i < count && rc == FS_OK; i++) {
        size_t at = r->pos;
        const unsigned char *f;
        uint32_t flen;
        fs_error fe;
        if (rd_str(r, FS_MAX_SUBJECT, "filter longer than 65,535 bytes", &f, &flen) < 0) {
            rc = FS_EBADDATA;
            break;
        }
        if (flen == 0 && !R->empty_ok) {        /* AMQP: "" is the key of zero words */
            rc = bad(r, "empty literal filter", at);
            break;
        }
        if (flen > R->max_len) {                /* AMQP: 255 bytes (rd_str checked 65,535) */
            rc = bad(r, R->filter_too_long, at);
            break;
        }
        if (check_literal(r, f, flen, 1, r->pos - flen) < 0) {
            rc = FS_EBADDATA;
            break;
        }
        /* The key is of the tokens, as an insert computes it. */
        if ((rc = fs_tokenize(r->d, (const char *)f, flen, 1, &t, &fe)) < 0) {
            if (rc == FS_EINVAL)
                rc = bad(r, fe.reason, r->pos - flen + fe.pos);
            break;
        }
        uint64_t key = fs_tokens_key(t.tok, 0, t.n, 0);
        if (fs_keyed_find(sl, L, key, (const char *)f, flen, (const char *)f + flen)) {
            rc = bad(r, "duplicate literal filter", at);
            break;
        }
        fs_span sp = {.off = 0, .len = flen, .hash = (uint32_t)key, .kind = FS_TOK_LITERAL};
        fs_node *e = fs_entry_new(sl, (const char *)f, &sp);
        if (!e) {
            rc = FS_ENOMEM;
            break;
        }
        if (fs_level_add_checked(&sl->mem, L, e, (uint32_t)(key >> 32), 0) < 0) {
            fs_node_free(sl, e);
            rc = FS_ENOMEM;
            break;
        }
        size_t body = r->pos;
        if ((rc = rd_subs(r, e)) < 0)
            break;
        rc = entry_subs_ok(r, e, f, flen, "literal filter without subscriptions", body);
    }
    fs_tokens_free(&t);
    return rc;
}

/* Version 2's shape-table entries: whole filters with wildcards, each
 * placed in its shape's table (the shapes of a valid image always fit
 * the budget, whatever order they are created in). */
static int rd_shaped(reader *r)
{
    fs_sublist *sl = r->sl;
    size_t at = r->pos;
    uint64_t count;
    if (rd_uv(r, &count) < 0)
        return FS_EBADDATA;
    if (count > left(r) / MIN_LITERAL || count > MAX_TABLE)
        return bad(r, "shaped filter count exceeds the data", at);
    fs_tokens t;
    fs_tokens_init(&t);
    int rc = FS_OK;
    for (uint64_t i = 0; i < count && rc == FS_OK; i++) {
        at = r->pos;
        const unsigned char *f;
        uint32_t flen;
        fs_error fe;
        fs_shape_of of;
        fs_shape *sh;
        if (rd_str(r, FS_MAX_SUBJECT, "filter longer than 65,535 bytes", &f, &flen) < 0) {
            rc = FS_EBADDATA;
            break;
        }
        rc = fs_tokenize(r->d, (const char *)f, flen, 1, &t, &fe);
        if (rc == FS_EINVAL) {
            rc = bad(r, fe.reason, r->pos - flen + fe.pos);
            break;
        }
        if (rc < 0)
            break;
        if (!fs_shape_classify(&t, &of)) {
            rc = bad(r, "shaped filter without a shape", at);
            break;
        }
        sh = fs_shape_find(sl, &of);
        if (!sh && (rc = fs_shape_create(sl, &of, &sh)) < 0)
            break;
        if (!sh) {
            rc = bad(r, "more filter shapes than an index holds", at);
            break;
        }
        if (fs_shape_lookup(sl, sh, (const char *)f, flen, of.key)) {
            rc = bad(r, "duplicate shaped filter", at);
            break;
        }
        fs_span sp = {.off = 0, .len = flen, .hash = (uint32_t)of.key, .kind = FS_NODE_SHAPED};
        fs_node *e = fs_entry_new(sl, (const char *)f, &sp);
        if (!e) {
            fs_shape_drop_if_empty(sl, sh);
            rc = FS_ENOMEM;
            break;
        }
        if (fs_shape_add(sl, sh, e, of.key) < 0) {
            fs_node_free(sl, e);
            fs_shape_drop_if_empty(sl, sh);
            rc = FS_ENOMEM;
            break;
        }
        size_t body = r->pos;
        if ((rc = rd_subs(r, e)) < 0)
            break;
        rc = entry_subs_ok(r, e, f, flen, "shaped filter without subscriptions", body);
    }
    fs_tokens_free(&t);
    return rc;
}

typedef struct {
    fs_node *n;
    uint64_t lit_left;       /* literal children still to read */
    uint64_t key;            /* the shape key of n's filter: fs_pos_mix of its literal tokens */
    uint64_t onemask;        /* bit i: token i of n's filter is a one-level wildcard (i < 64) */
    uint32_t pathlen;        /* bytes of n's filter */
    uint32_t ntok;           /* tokens of n's filter */
    uint8_t wild;            /* bit 0: a one child to read, bit 1: a rest child */
    uint8_t haswild;         /* n's path has a wildcard token */
    uint8_t share;           /* MQTT: the filters below n start "$share/" */
    uint8_t restpath;        /* n's path has a rest wildcard token (n's own included) */
} rframe;

/* A filter stored in the trie must not also be an entry of the shape
 * section: an insert finds the shape entry first (find_locked in
 * sublist.c) and never creates the trie node then, nor the entry while the
 * trie node holds subscriptions.  c is a trie node with subscriptions, its
 * filter the pathlen bytes at path, its shape computed on the way down
 * (exactly what fs_shape_classify computes from the filter's tokens:
 * tokens before a trailing rest wildcard, no rest wildcard before it,
 * at most FS_SHAPE_MAX_TOKENS); 1 when the shape section holds it. */
static int in_shape_section(const fs_sublist *sl, const fs_node *c, const rframe *parent,
                            uint64_t key, uint64_t onemask, const char *path, uint32_t pathlen)
{
    fs_shape_of of;
    if (parent->restpath)
        return 0;                      /* AMQP '#' before the end: no shape */
    of.rest = c->kind == FS_TOK_REST;
    of.ntoks = parent->ntok + 1 - of.rest;
    if (of.ntoks > FS_SHAPE_MAX_TOKENS)
        return 0;
    of.onemask = onemask;
    of.key = key;
    const fs_shape *sh = fs_shape_find(sl, &of);
    return sh && fs_shape_lookup(sl, sh, path, pathlen, key) != NULL;
}

/* Read the children word of node n (just read) and give n its level,
 * pre-sized.  *ch is the word. */
static int rd_children(reader *r, fs_node *n, uint64_t *ch)
{
    size_t at = r->pos;
    if (rd_uv(r, ch) < 0)
        return FS_EBADDATA;
    if (*ch == 0)
        return FS_OK;
    if (n->kind == FS_TOK_REST && fs_rules(r->d)->rest_children)     /* AMQP's '#' may be anywhere */
        return bad(r, fs_rules(r->d)->rest_children, at);
    uint64_t nlit = *ch >> 2;
    if (nlit > left(r) / MIN_CHILD || nlit > MAX_TABLE)
        return bad(r, "child count exceeds the data", at);
    fs_sublist *sl = r->sl;
    fs_level *L = fs_sl_alloc(sl, sizeof(fs_level));
    if (!L)
        return FS_ENOMEM;
    memset(L, 0, sizeof(*L));
    fs_link_of(n)->next = L;
    uint32_t cap = table_cap((uint32_t)nlit);
    if (cap) {
        L->slots = fs_sl_alloc(sl, sizeof(fs_slot) * cap);
        if (!L->slots)
            return FS_ENOMEM;
        memset(L->slots, 0, sizeof(fs_slot) * cap);
        L->cap = cap;
    }
    return FS_OK;
}

/* Put the token of f's child c after f's filter in path (when path is
 * kept: see rd_trie); pathlen, the child's filter's length, has been
 * checked against the dialect's longest filter. */
static void path_append(const reader *r, char *path, const rframe *f, const char *tok, uint32_t len)
{
    uint32_t sep = f->n == r->sl->root ? 0 : 1;
    if (!path)
        return;
    if (sep)
        path[f->pathlen] = fs_rules(r->d)->sep;
    memcpy(path + f->pathlen + sep, tok, len);
}

/* Read f's next literal child: its token (valid for the dialect, unique
 * in f's level, its filter no longer than the dialect allows), linked
 * into f's level; *k its frame, but for its children word (not read
 * yet). */
static int rd_literal_child(reader *r, rframe *f, char *path, rframe *k)
{
    fs_sublist *sl = r->sl;
    const fs_dialect_rules *R = fs_rules(r->d);
    fs_node *parent = f->n;
    fs_level *L = fs_next(parent);
    uint32_t sep = parent == sl->root ? 0 : 1;
    size_t at = r->pos;
    const unsigned char *t;
    uint32_t tlen;
    int rc;
    f->lit_left--;
    if ((rc = rd_str(r, FS_MAX_SUBJECT, "token longer than 65,535 bytes", &t, &tlen)) < 0)
        return rc;
    if ((rc = check_literal(r, t, tlen, 0, r->pos - tlen)) < 0)
        return rc;
    uint32_t pathlen = f->pathlen + sep + tlen;
    if (pathlen > R->max_len)
        return bad(r, R->filter_too_long, at);
    fs_span sp = {.off = 0, .len = tlen, .hash = fs_hash((const char *)t, tlen), .kind = FS_TOK_LITERAL};
    if (fs_level_find(sl, L, (const char *)t, tlen, sp.hash))
        return bad(r, "duplicate child token", at);
    fs_node *c = fs_node_new(sl, parent, (const char *)t, &sp);
    if (!c)
        return FS_ENOMEM;
    if (fs_level_add(&sl->mem, L, c) < 0) {
        fs_node_free(sl, c);
        return FS_ENOMEM;
    }
    if (!sep && fs_trie_hide_root(sl, c) < 0)      /* a root child: MQTT's '$' levels apart */
        return FS_ENOMEM;
    /* "$share/" at the root: every filter below is a shared one */
    uint8_t share = f->share;
    if (!sep && fs_share_level(r->d, (const char *)t, tlen))
        share = 1;
    *k = (rframe){.n = c, .key = f->key + fs_pos_mix(sp.hash, f->ntok), .onemask = f->onemask,
                  .pathlen = pathlen, .ntok = f->ntok + 1, .haswild = f->haswild, .share = share,
                  .restpath = f->restpath};
    path_append(r, path, f, (const char *)t, tlen);
    return FS_OK;
}

/* Add f's next wildcard child (the one-level wildcard first, then the
 * rest wildcard, as the children word's bits say), linked into f's
 * level; *k its frame, but for its children word (not read yet). */
static int add_wild_child(reader *r, rframe *f, char *path, rframe *k)
{
    fs_sublist *sl = r->sl;
    const fs_dialect_rules *R = fs_rules(r->d);
    fs_node *parent = f->n;
    fs_level *L = fs_next(parent);
    uint32_t sep = parent == sl->root ? 0 : 1;
    int is_one = f->wild & 1;
    f->wild = (uint8_t)(f->wild & (is_one ? 2 : 1));
    uint32_t pathlen = f->pathlen + sep + 1;
    if (pathlen > R->max_len)
        return bad(r, R->filter_too_long, r->pos);
    const char *tok = is_one ? &R->one : &R->rest;
    const fs_span one_sp = {.off = 0, .len = 1, .hash = fs_hash(&R->one, 1), .kind = FS_TOK_ONE};
    const fs_span rest_sp = {.off = 0, .len = 1, .hash = fs_hash(&R->rest, 1), .kind = FS_TOK_REST};
    fs_node *c = fs_node_new(sl, parent, tok, is_one ? &one_sp : &rest_sp);
    if (!c)
        return FS_ENOMEM;
    if (is_one) L->one = c;
    else L->rest = c;
    uint64_t onemask = f->onemask;
    if (is_one && f->ntok < 64)
        onemask |= 1ull << f->ntok;
    *k = (rframe){.n = c, .key = f->key, .onemask = onemask, .pathlen = pathlen, .ntok = f->ntok + 1,
                  .haswild = 1, .share = f->share, .restpath = (uint8_t)(f->restpath | !is_one)};
    path_append(r, path, f, tok, 1);
    return FS_OK;
}

/* Read the body of f's child k (just read or added): its subscriptions,
 * allowed only where an insert could have put them, then its children
 * word (*ch); a node with neither is refused (inserts prune it). */
static int rd_child_body(reader *r, const rframe *f, const rframe *k, const char *path, uint64_t *ch)
{
    fs_node *c = k->n;
    size_t body = r->pos;
    int rc;
    if ((rc = rd_subs(r, c)) < 0)
        return rc;
    if (fs_has_subs(c) && !k->haswild)
        return bad(r, "subscriptions on a trie path without a wildcard", body);
    const char *why = fs_subs_why(f->share, c->nsubs, c->groups ? c->groups->n : 0, NULL);
    if (why)
        return bad(r, why, body);
    if (path && fs_has_subs(c) && in_shape_section(r->sl, c, f, k->key, k->onemask, path, k->pathlen))
        return bad(r, "filter both in the shape section and the trie", body);
    if ((rc = rd_children(r, c, ch)) < 0)
        return rc;
    if (!*ch && !fs_has_subs(c))
        return bad(r, "empty trie node", body);
    return FS_OK;
}

/* The trie, depth first over an explicit stack of frames: each frame's
 * literal children first, then its wildcard children, each child's body
 * read right after it (the format's order). */
static int rd_trie(reader *r, uint64_t *ntrie)
{
    fs_sublist *sl = r->sl;
    rframe *stack = NULL;
    size_t depth = 0, cap = 0;
    uint64_t ch;
    /* The current node's filter, kept only when there are shape tables to
     * check trie filters against: each token is copied once, over its
     * previous sibling's, so keeping it is linear in the trie's bytes. */
    char *path = NULL;

    size_t at = r->pos;
    int rc = rd_subs(r, sl->root);
    if (rc == FS_OK && fs_has_subs(sl->root))
        rc = bad(r, "subscriptions on the trie root", at);
    if (rc == FS_OK)
        rc = rd_children(r, sl->root, &ch);
    if (rc == FS_OK && ch && sl->shapes.n && !(path = FS_MALLOC(fs_rules(r->d)->max_len)))
        rc = FS_ENOMEM;
    if (rc == FS_OK && ch) {
        if ((rc = fs_grow(&stack, &cap, 1, sizeof(rframe))) == FS_OK)
            stack[depth++] = (rframe){.n = sl->root, .lit_left = ch >> 2, .wild = (uint8_t)(ch & 3)};
    }
    while (rc == FS_OK && depth) {
        rframe *f = &stack[depth - 1];
        rframe k;                       /* the child read now */
        if (f->lit_left)
            rc = rd_literal_child(r, f, path, &k);
        else if (f->wild)
            rc = add_wild_child(r, f, path, &k);
        else {
            depth--;
            continue;
        }
        if (rc < 0)
            break;
        (*ntrie)++;
        if ((rc = rd_child_body(r, f, &k, path, &ch)) < 0)
            break;
        if (ch && (rc = fs_grow(&stack, &cap, depth + 1, sizeof(rframe))) == FS_OK) {
            k.lit_left = ch >> 2;
            k.wild = (uint8_t)(ch & 3);
            stack[depth++] = k;
        }
    }
    FS_FREE(path);
    FS_FREE(stack);
    return rc;
}

/* How versions 1 and 2 refuse a header (docs/FORMAT.md, "Envelope"). */
static const fs_header_rules V2_HEADER = {
    .min_len = FS_SERIAL_HEADER,
    .vmin = 1,
    .vmax = FS_SERIAL_VERSION,
    .short_why = "truncated header",
    .magic_why = "bad magic (not a topicmatch index)",
    .version_why = "unsupported format version",
    .flags_why = "unknown flags",
    .dialect_why = "unknown dialect",
    .reserved_why = "nonzero reserved field",
};

/* The fixed header and the checksum: everything before the structure. */
static int check_envelope(reader *r, size_t len, fs_file_header *hd)
{
    const unsigned char *p = r->p;
    if (fs_header_get(p, len, &V2_HEADER, hd, &r->d, r->err) < 0)
        return FS_EBADDATA;
    r->version = hd->version;
    size_t room = len - FS_SERIAL_HEADER;
    if (room < FS_SERIAL_TRAILER || hd->payload > room - FS_SERIAL_TRAILER)
        return bad(r, "truncated data", len);
    size_t end = FS_SERIAL_HEADER + (size_t)hd->payload;
    if (room - FS_SERIAL_TRAILER > hd->payload)
        return bad(r, "trailing bytes after the checksum", end + FS_SERIAL_TRAILER);
    if (fs_serial_checksum(p, end) != fs_le_get(p + end, FS_SERIAL_TRAILER))
        return bad(r, "checksum mismatch", end);
    r->pos = FS_SERIAL_HEADER;
    r->end = end;
    return FS_OK;
}

int fs_sublist_load(const char *data, size_t len, fs_sublist **out, fs_error *err)
{
    reader r;
    memset(&r, 0, sizeof(r));
    r.p = (const unsigned char *)data;
    r.err = err;
    *out = NULL;
    fs_file_header hd;
    int rc = check_envelope(&r, len, &hd);
    if (rc < 0)
        return rc;
    uint64_t nsubs = hd.subs, nlit = hd.literals, ntrie = hd.nodes;
    if (nlit > hd.payload / MIN_LITERAL || nlit > MAX_TABLE)
        return bad(&r, "literal filter count exceeds the data", FS_HDR_LITERALS);
    if (ntrie > hd.payload / MIN_NODE)
        return bad(&r, "trie node count exceeds the data", FS_HDR_NODES);

    fs_sublist *sl = fs_sublist_new(r.d);
    if (!sl)
        return FS_ENOMEM;
    r.sl = sl;
    uint64_t seen = 0;
    rc = rd_literals(&r, nlit);
    if (rc == FS_OK && r.version >= 2)
        rc = rd_shaped(&r);
    if (rc == FS_OK)
        rc = rd_trie(&r, &seen);
    if (rc == FS_OK && r.pos != r.end)
        rc = bad(&r, "trailing bytes after the trie", r.pos);
    if (rc == FS_OK && r.subs != nsubs)
        rc = bad(&r, "subscription count does not match the header", FS_HDR_SUBS);
    if (rc == FS_OK && seen != ntrie)
        rc = bad(&r, "trie node count does not match the header", FS_HDR_NODES);
    if (rc < 0) {
        fs_sublist_free(sl);
        return rc;
    }
    sl->count = nsubs;
    *out = sl;
    return FS_OK;
}
