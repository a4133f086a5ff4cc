/* fuzz_ops.c - libFuzzer harness: sequences of operations on one index,
 * checked after every step against a plain list of (filter, queue, id)
 * matched one filter at a time by oracle.h.
 *
 * Input: byte 0 picks the dialect (bit 0: MQTT; else bits 6-7 both set:
 * AMQP; else NATS) and the starting cache size; then each
 * operation is an opcode byte followed by its arguments, drawn from the
 * following bytes (0 once the input runs out).  Strings come from a small
 * per-dialect vocabulary of tokens (so filters and subjects collide often),
 * or, for a few opcode values, as raw bytes.
 *
 * Operations: insert, remove, insert_many, remove_many, match, interest,
 * reverse_match, serialize and reload (the loaded index replaces the
 * current one), cache size changes, stats, match_rows (pointer and Arrow
 * layouts, keys or none, the three queue modes, re-matched row by row and
 * compared exactly), the threaded batch (compared exactly with match_rows),
 * and an injected allocation failure for the next operation (which must
 * then leave the index unchanged).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_batch.h"
#include "fs_serial.h"
#include "columns.h"
#include "oracle.h"
#include "sublist.h"

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz_ops: check failed at %s:%d: %s\n", __FILE__,       \
                    __LINE__, #cond);                                               \
            abort();                                                                \
        }                                                                           \
    } while (0)

/* ------------------------------------------------------------ input */

typedef struct {
    const uint8_t *p;
    size_t n, i;
} rd;

static uint8_t u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }

/* Strings made for one operation; freed when it ends. */
static char *made[64];
static size_t nmade;

static char *keep(char *s)
{
    if (nmade == sizeof(made) / sizeof(made[0])) abort();
    made[nmade++] = s;
    return s;
}

static void free_made(void)
{
    while (nmade) free(made[--nmade]);
}

static const char *const NATS_VOCAB[] = {
    "a", "b", "c", "*", ">", "a", "b", "*", "$x", "a*b", "x>", "", " ", "\xc3\xa9", "ab", "\xff", "$share", "a\x01",
};
static const char *const MQTT_VOCAB[] = {
    "a", "b", "c", "+", "#", "a", "b", "+", "$x", "", "$SYS", "a+", "\xc3\xa9", " ", "$share", "\xed\xa0\x80", "sport",
};
static const char *const AMQP_VOCAB[] = {
    "a", "b", "c", "*", "#", "a", "b", "*", "#", "", "", "a*", "##", "\xc3\xa9", " ", "\xff", "x\x00",
};
static const char *const QUEUES[] = {"q", "r", "g", "q r", "", "a/b", "x+", "\xc3\xa9", "q\x01"};
#define NVOCAB(d) ((d) == FS_NATS ? sizeof(NATS_VOCAB) / sizeof(char *) \
                   : (d) == FS_MQTT ? sizeof(MQTT_VOCAB) / sizeof(char *) : sizeof(AMQP_VOCAB) / sizeof(char *))

/* A subject or filter (filter: MQTT may get a "$share/G/" prefix). */
static const char *gen_str(rd *r, fs_dialect d, int is_filter, size_t *len)
{
    uint8_t mode = u8(r);
    char sep = d == FS_MQTT ? '/' : '.';
    if (mode < 16) {                                   /* raw bytes */
        size_t n = u8(r) % 24;
        char *s = keep(malloc(n + 1));
        for (size_t i = 0; i < n; i++) s[i] = (char)u8(r);
        *len = n;
        return s;
    }
    if (mode == 16) {                                  /* around the length limit */
        size_t n = d == FS_AMQP ? 253 + u8(r) % 5 : 65533 + u8(r) % 5;
        char *s = keep(malloc(n + 1));
        for (size_t i = 0; i < n; i++) s[i] = (i & 1) ? sep : 'a';
        if (is_filter && (u8(r) & 1)) s[n - 1] = d == FS_NATS ? '>' : '#';
        *len = n;
        return s;
    }
    size_t ntok = 1 + mode % 6;
    char *s = keep(malloc(16 + 64 + ntok * 8));
    size_t at = 0;
    if (d == FS_MQTT && is_filter && (mode & 0x40) && (mode & 0x80)) {
        const char *g = QUEUES[u8(r) % (sizeof(QUEUES) / sizeof(char *))];
        memcpy(s, "$share/", 7);
        at = 7;
        memcpy(s + at, g, strlen(g));
        at += strlen(g);
        s[at++] = '/';
    }
    for (size_t k = 0; k < ntok; k++) {
        const char *t = d == FS_NATS ? NATS_VOCAB[u8(r) % NVOCAB(d)]
                      : d == FS_MQTT ? MQTT_VOCAB[u8(r) % NVOCAB(d)] : AMQP_VOCAB[u8(r) % NVOCAB(d)];
        if (k) s[at++] = sep;
        memcpy(s + at, t, strlen(t));
        at += strlen(t);
    }
    *len = at;
    return s;
}

static const char *gen_queue(rd *r, size_t *len)
{
    uint8_t b = u8(r);
    if (b < 140) return NULL;
    if (b < 250) {
        const char *q = QUEUES[b % (sizeof(QUEUES) / sizeof(char *))];
        *len = strlen(q);
        return q;
    }
    size_t n = b == 255 ? 65535 + (u8(r) & 1) : u8(r) % 8;
    char *s = keep(malloc(n + 1));
    for (size_t i = 0; i < n; i++) s[i] = b == 255 ? 'q' : (char)u8(r);
    *len = n;
    return s;
}

static int64_t gen_id(rd *r)
{
    uint8_t b = u8(r);
    static const int64_t odd[] = {INT64_MIN, INT64_MAX, -1, (int64_t)1 << 40, INT64_MIN + 1, INT64_MAX - 1};
    return b < 240 ? (int64_t)(b % 6) : odd[b % 6];
}

static void gen_spec(rd *r, fs_dialect d, fs_spec *sp)
{
    sp->filter = gen_str(r, d, 1, &sp->filter_len);
    sp->queue = gen_queue(r, &sp->queue_len);
    sp->id = gen_id(r);
}

/* ------------------------------------------------------------ model */

typedef struct {
    char *f, *q;               /* f: the inner filter; q NULL: plain */
    size_t fn, qn;
    int64_t id;
} o_sub;

static o_sub *subs;
static size_t nsubs, capsubs;
static fs_dialect dialect;

/* The identity a spec names, as the engine stores it; 0 if invalid. */
static int o_key(const fs_spec *sp, o_sub *k)
{
    k->f = (char *)sp->filter;
    k->fn = sp->filter_len;
    k->q = (char *)sp->queue;
    k->qn = sp->queue_len;
    k->id = sp->id;
    if (!o_valid(dialect, sp->filter, sp->filter_len, 1)) return 0;
    if (dialect == FS_MQTT) {
        o_str g, f;
        if (o_split_share(sp->filter, sp->filter_len, &g, &f) == 1) {
            if (sp->queue) return 0;
            k->f = (char *)f.p;
            k->fn = f.n;
            k->q = (char *)g.p;
            k->qn = g.n;
        }
    }
    if (k->q && !o_queue_ok(dialect, k->q, k->qn)) return 0;
    return 1;
}

static int same(const o_sub *a, const o_sub *b)
{
    return a->id == b->id && a->fn == b->fn && memcmp(a->f, b->f, a->fn) == 0 && !a->q == !b->q &&
           (!a->q || (a->qn == b->qn && memcmp(a->q, b->q, a->qn) == 0));
}

static long o_find(const o_sub *k)
{
    for (size_t i = 0; i < nsubs; i++)
        if (same(&subs[i], k)) return (long)i;
    return -1;
}

static char *dup_bytes(const char *p, size_t n)
{
    char *s = malloc(n ? n : 1);
    if (!s) abort();
    if (n) memcpy(s, p, n);
    return s;
}

static void o_add(const o_sub *k)
{
    if (nsubs == capsubs) {
        capsubs = capsubs ? capsubs * 2 : 64;
        subs = realloc(subs, sizeof(o_sub) * capsubs);
        if (!subs) abort();
    }
    o_sub *s = &subs[nsubs++];
    s->f = dup_bytes(k->f, k->fn);
    s->fn = k->fn;
    s->q = k->q ? dup_bytes(k->q, k->qn) : NULL;
    s->qn = k->qn;
    s->id = k->id;
}

static void o_del(size_t i)
{
    free(subs[i].f);
    free(subs[i].q);
    subs[i] = subs[--nsubs];
}

static void o_clear(void)
{
    while (nsubs) o_del(nsubs - 1);
}

/* What a valid subject matches: plain ids and groups (NATS, AMQP: by
 * name; MQTT: by name and filter) with their members.  AMQP: each id once
 * among the plain ids and once in each group. */
typedef struct {
    const o_sub *key;           /* the first subscription of the group */
    int64_t *ids;
    size_t n;
} o_group;

typedef struct {
    int64_t *plain;
    size_t nplain;
    o_group *groups;
    size_t ngroups;
} o_result;

static int group_is(const o_sub *a, const char *q, size_t qn, const char *f, size_t fn)
{
    if (a->qn != qn || memcmp(a->q, q, qn) != 0) return 0;
    return dialect != FS_MQTT || (a->fn == fn && memcmp(a->f, f, fn) == 0);
}

static int has_id(const int64_t *ids, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

static void o_matches(const char *s, size_t n, o_result *out)
{
    memset(out, 0, sizeof(*out));
    out->plain = malloc(sizeof(int64_t) * (nsubs + 1));
    out->groups = calloc(nsubs + 1, sizeof(o_group));
    if (!out->plain || !out->groups) abort();
    for (size_t i = 0; i < nsubs; i++) {
        const o_sub *e = &subs[i];
        if (!o_match(dialect, e->f, e->fn, s, n)) continue;
        if (!e->q) {
            if (!(dialect == FS_AMQP && has_id(out->plain, out->nplain, e->id)))
                out->plain[out->nplain++] = e->id;
            continue;
        }
        size_t g = 0;
        while (g < out->ngroups && !group_is(out->groups[g].key, e->q, e->qn, e->f, e->fn)) g++;
        if (g == out->ngroups) {
            out->groups[g].key = e;
            out->groups[g].ids = malloc(sizeof(int64_t) * nsubs);
            if (!out->groups[g].ids) abort();
            out->ngroups++;
        }
        if (!(dialect == FS_AMQP && has_id(out->groups[g].ids, out->groups[g].n, e->id)))
            out->groups[g].ids[out->groups[g].n++] = e->id;
    }
}

static void o_result_free(o_result *r)
{
    for (size_t g = 0; g < r->ngroups; g++) free(r->groups[g].ids);
    free(r->plain);
    free(r->groups);
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Equal as multisets (sorts both). */
static void copy_ids(int64_t *dst, const int64_t *src, size_t n)
{
    if (n) memcpy(dst, src, sizeof(int64_t) * n);
}

static int same_ids(int64_t *a, size_t na, int64_t *b, size_t nb)
{
    if (na != nb) return 0;
    qsort(a, na, sizeof(int64_t), cmp_id);
    qsort(b, nb, sizeof(int64_t), cmp_id);
    return na == 0 || memcmp(a, b, sizeof(int64_t) * na) == 0;
}

static void check_match_result(const fs_result *r, const o_result *want)
{
    CHECK(r->nplain <= r->nids);
    int64_t *got = malloc(sizeof(int64_t) * (r->nids + 1));
    if (!got) abort();
    copy_ids(got, r->ids, r->nplain);
    CHECK(same_ids(got, r->nplain, want->plain, want->nplain));
    CHECK(r->ngroups == want->ngroups);
    size_t members = 0;
    for (size_t g = 0; g < r->ngroups; g++) {
        const fs_group_out *go = &r->groups[g];
        const char *name = r->arena + go->name_off, *filt = r->arena + go->filter_off;
        if (dialect != FS_MQTT) CHECK(go->filter_len == 0);
        size_t k = 0;
        while (k < want->ngroups && !group_is(want->groups[k].key, name, go->name_len, filt, go->filter_len)) k++;
        CHECK(k < want->ngroups);
        for (size_t g2 = 0; g2 < g; g2++)           /* each group once */
            CHECK(!(r->groups[g2].name_len == go->name_len &&
                    memcmp(r->arena + r->groups[g2].name_off, name, go->name_len) == 0 &&
                    r->groups[g2].filter_len == go->filter_len &&
                    memcmp(r->arena + r->groups[g2].filter_off, filt, go->filter_len) == 0));
        CHECK(go->members_off + go->members_len <= r->nids);
        copy_ids(got, r->ids + go->members_off, go->members_len);
        CHECK(same_ids(got, go->members_len, want->groups[k].ids, want->groups[k].n));
        members += go->members_len;
    }
    CHECK(r->nplain + members == r->nids);
    free(got);
}

/* ------------------------------------------------------------ the index */

static fs_sublist *sl;
static size_t cache_cap;
static uint64_t last_generation;

static void check_count(void)
{
    CHECK(fs_sublist_count(sl) == nsubs);
    fs_stats st;
    fs_sublist_stats(sl, &st);
    CHECK(st.subscriptions == nsubs);
    CHECK(st.generation >= last_generation);
    last_generation = st.generation;
    CHECK(st.cache.capacity == cache_cap);
    CHECK(st.cache.entries <= cache_cap);
}

static void show_bytes(const char *what, const char *p, size_t n)
{
    fprintf(stderr, "  %s (%zu bytes): \"", what, n);
    for (size_t i = 0; i < n && i < 200; i++)
        fprintf(stderr, (unsigned char)p[i] < 0x20 || (unsigned char)p[i] >= 0x7f || p[i] == '"' ? "\\x%02x" : "%c",
                (unsigned char)p[i]);
    fprintf(stderr, "\"%s\n", n > 200 ? "..." : "");
}

static void show_spec(const char *what, const fs_spec *sp, int rc)
{
    fprintf(stderr, "fuzz_ops: the engine %s subscription (rc %d, %s):\n", what, rc,
            dialect == FS_NATS ? "nats" : dialect == FS_MQTT ? "mqtt" : "amqp");
    show_bytes("filter", sp->filter, sp->filter_len);
    if (sp->queue) show_bytes("queue", sp->queue, sp->queue_len);
}

static void op_insert(rd *r, int removing)
{
    fs_spec sp;
    gen_spec(r, dialect, &sp);
    o_sub k;
    int valid = o_key(&sp, &k);
    fs_error err;
    uint64_t gen = fs_sublist_generation(sl);
    int rc = removing ? fs_sublist_remove(sl, &sp, &err) : fs_sublist_insert(sl, &sp, &err);
    if (rc == FS_ENOMEM) return;                   /* nothing changed */
    if (!valid) {
        if (rc != FS_EINVAL) show_spec("accepted an invalid", &sp, rc);
        CHECK(rc == FS_EINVAL);
        CHECK(err.reason != NULL);
        return;
    }
    if (rc == FS_EINVAL) show_spec("refused a valid", &sp, rc);
    long at = o_find(&k);
    if (removing) {
        CHECK(rc == (at >= 0));
        if (at >= 0) o_del((size_t)at);
    } else {
        CHECK(rc == (at < 0));
        if (at < 0) o_add(&k);
    }
    if (rc == 1) CHECK(fs_sublist_generation(sl) > gen);
}

static void op_bulk(rd *r, int removing)
{
    fs_spec sp[6];
    o_sub k[6];
    size_t n = u8(r) % 7, first_bad = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        gen_spec(r, dialect, &sp[i]);
        if (!o_key(&sp[i], &k[i]) && first_bad == SIZE_MAX) first_bad = i;
    }
    size_t changed = 99, bad = 99;
    fs_error err;
    int rc = removing ? fs_sublist_remove_many(sl, sp, n, &changed, &bad, &err)
                      : fs_sublist_insert_many(sl, sp, n, &changed, &bad, &err);
    if (rc == FS_ENOMEM) return;                   /* all or nothing: nothing */
    if (first_bad != SIZE_MAX) {
        CHECK(rc == FS_EINVAL);
        CHECK(bad == first_bad);
        return;
    }
    CHECK(rc == FS_OK);
    size_t want = 0;
    for (size_t i = 0; i < n; i++) {
        long at = o_find(&k[i]);
        if (removing && at >= 0) { o_del((size_t)at); want++; }
        if (!removing && at < 0) { o_add(&k[i]); want++; }
    }
    CHECK(changed == want);
}

static void op_match(rd *r)
{
    size_t n;
    const char *s = gen_str(r, dialect, 0, &n);
    int valid = o_valid(dialect, s, n, 0);
    fs_scratch sc;
    fs_result res;
    fs_error err;
    fs_scratch_init(&sc);
    fs_result_init(&res);
    int rc = fs_sublist_match(sl, s, n, &sc, &res, &err);
    if (rc == FS_ENOMEM) {
        /* an injected failure: nothing to compare */
    } else if (!valid) {
        CHECK(rc == FS_EINVAL);
    } else {
        CHECK(rc == FS_OK);
        o_result want;
        o_matches(s, n, &want);
        check_match_result(&res, &want);
        /* interest counts the same */
        uint64_t np = 99, nq = 99;
        rc = fs_sublist_interest(sl, s, n, &sc, &np, &nq, &err);
        if (rc != FS_ENOMEM) {
            CHECK(rc == FS_OK);
            CHECK(np == want.nplain);
            size_t members = 0;
            for (size_t g = 0; g < want.ngroups; g++) members += want.groups[g].n;
            CHECK(nq == members);
        }
        o_result_free(&want);
    }
    fs_result_free(&res);
    fs_scratch_free(&sc);
}

/* A place in a result arena, which stays NULL while empty (AMQP's "" filter). */
static char *arena_at(char *arena, size_t off) { return arena ? arena + off : (char *)""; }

static void op_reverse(rd *r)
{
    size_t n;
    const char *f = gen_str(r, dialect, 1, &n);
    int valid = o_valid(dialect, f, n, 1);
    fs_scratch sc;
    fs_rresult res;
    fs_error err;
    fs_scratch_init(&sc);
    fs_rresult_init(&res);
    int rc = fs_sublist_reverse_match(sl, f, n, &sc, &res, &err);
    if (rc == FS_ENOMEM) {
        /* an injected failure: nothing to compare */
    } else if (!valid) {
        CHECK(rc == FS_EINVAL);
    } else {
        CHECK(rc == FS_OK);
        o_str g, inner = {f, n};
        if (dialect == FS_MQTT && o_split_share(f, n, &g, &inner) != 1) inner = (o_str){f, n};
        size_t want = 0;
        for (size_t i = 0; i < nsubs; i++) want += o_intersect(dialect, inner.p, inner.n, subs[i].f, subs[i].fn);
        CHECK(res.nhits == want);
        for (size_t h = 0; h < res.nhits; h++) {
            const fs_rhit *x = &res.hits[h];
            o_sub k = {arena_at(res.arena, x->filter_off), x->has_queue ? res.arena + x->queue_off : NULL,
                       x->filter_len, x->queue_len, x->id};
            long at = o_find(&k);
            CHECK(at >= 0);
            CHECK(o_intersect(dialect, inner.p, inner.n, subs[at].f, subs[at].fn));
            for (size_t h2 = 0; h2 < h; h2++) {      /* each subscription once */
                const fs_rhit *y = &res.hits[h2];
                o_sub k2 = {arena_at(res.arena, y->filter_off), y->has_queue ? res.arena + y->queue_off : NULL,
                            y->filter_len, y->queue_len, y->id};
                CHECK(!same(&k, &k2));
            }
        }
    }
    fs_rresult_free(&res);
    fs_scratch_free(&sc);
}

static void op_serialize(void)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = fs_sublist_dump(sl, &buf, &len);
    if (rc == FS_ENOMEM) {
        CHECK(buf == NULL);
        return;
    }
    CHECK(rc == FS_OK);
    fs_sublist *loaded = NULL;
    fs_error err;
    rc = fs_sublist_load(buf, len, &loaded, &err);
    if (rc == FS_OK) {
        CHECK(fs_sublist_dialect(loaded) == dialect);
        CHECK(fs_sublist_count(loaded) == nsubs);
        if (cache_cap && fs_sublist_set_cache(loaded, cache_cap) != FS_OK) {
            fs_sublist_free(loaded);           /* out of memory: keep the old one */
        } else {
            fs_sublist_free(sl);
            sl = loaded;
            last_generation = 0;
        }
    } else {
        CHECK(rc == FS_ENOMEM);
        CHECK(loaded == NULL);
    }
    FS_FREE(buf);
}

static void op_cache(rd *r)
{
    static const size_t caps[] = {0, 1, 2, 3, 8, 64};
    size_t cap = caps[u8(r) % 6];
    int rc = fs_sublist_set_cache(sl, cap);
    if (rc == FS_OK) cache_cap = cap;
    else CHECK(rc == FS_ENOMEM);
}

/* AMQP rows: each id once; every plain id there, and (queues "all")
 * every member, (queues "pick") at least one member of each group, nothing
 * else. */
static void check_row_amqp(const int64_t *ids, size_t n, int queues, const o_result *want)
{
    for (size_t i = 0; i < n; i++) {
        CHECK(!has_id(ids, i, ids[i]));
        int known = has_id(want->plain, want->nplain, ids[i]);
        for (size_t g = 0; g < want->ngroups && !known && queues != FS_QUEUES_NONE; g++)
            known = has_id(want->groups[g].ids, want->groups[g].n, ids[i]);
        CHECK(known);
    }
    for (size_t i = 0; i < want->nplain; i++) CHECK(has_id(ids, n, want->plain[i]));
    for (size_t g = 0; g < want->ngroups && queues != FS_QUEUES_NONE; g++) {
        size_t present = 0;
        for (size_t m = 0; m < want->groups[g].n; m++) present += has_id(ids, n, want->groups[g].ids[m]);
        CHECK(queues == FS_QUEUES_ALL ? present == want->groups[g].n : present >= 1);
    }
}

static void check_row(const int64_t *ids, size_t n, int queues, const o_result *want)
{
    if (dialect == FS_AMQP) {
        check_row_amqp(ids, n, queues, want);
        return;
    }
    int64_t *got = malloc(sizeof(int64_t) * (n + 1));
    int64_t *exp = malloc(sizeof(int64_t) * (nsubs + 1));
    if (!got || !exp) abort();
    copy_ids(got, ids, n);
    size_t ne = want->nplain;
    copy_ids(exp, want->plain, ne);
    if (queues == FS_QUEUES_ALL)
        for (size_t g = 0; g < want->ngroups; g++) {
            copy_ids(exp + ne, want->groups[g].ids, want->groups[g].n);
            ne += want->groups[g].n;
        }
    if (queues != FS_QUEUES_PICK) {
        CHECK(same_ids(got, n, exp, ne));
    } else {
        /* plain ids, then one member of each group: the ids left after
         * taking out the plain ones are as many as the groups, each a member */
        CHECK(n == want->nplain + want->ngroups);
        qsort(got, n, sizeof(int64_t), cmp_id);
        qsort(exp, ne, sizeof(int64_t), cmp_id);
        size_t i = 0, j = 0, nleft = 0;
        while (i < n) {
            if (j < ne && exp[j] == got[i]) { i++; j++; continue; }
            if (j < ne && exp[j] < got[i]) { CHECK(0); }
            got[nleft++] = got[i++];
        }
        CHECK(j == ne && nleft == want->ngroups);
        for (size_t x = 0; x < nleft; x++) {
            int member = 0;
            for (size_t g = 0; g < want->ngroups && !member; g++)
                for (size_t m = 0; m < want->groups[g].n; m++) member |= want->groups[g].ids[m] == got[x];
            CHECK(member);
        }
    }
    free(got);
    free(exp);
}

/* Two batch outputs of the same rows are the same: ends, flags and ids. */
static void same_batch(const fs_idbuf *got, const int64_t *got_end, const uint8_t *got_invalid,
                       const fs_idbuf *want, const int64_t *want_end, const uint8_t *want_invalid, size_t rows)
{
    CHECK(got->n == want->n);
    CHECK(memcmp(got_end, want_end, sizeof(int64_t) * rows) == 0);
    CHECK(memcmp(got_invalid, want_invalid, rows) == 0);
    CHECK(want->n == 0 || memcmp(got->ids, want->ids, sizeof(int64_t) * want->n) == 0);
}

/* The batch's rows matched again in index (with also, if not NULL), on one
 * thread or on 2-4 (blocks of 1-4 rows: a few rows already take the
 * threads' turns; the rows fed in steps of 1-4, as a Python list's are
 * while it is converted): the same output as want. */
static void batch_again(rd *r, fs_sublist *index, fs_sublist *also, const fs_strings *col, const fs_strings *keys,
                        int queues, size_t rows, int threaded, const fs_idbuf *want, const int64_t *want_end,
                        const uint8_t *want_invalid)
{
    int64_t end[64];
    uint8_t invalid[64];
    fs_idbuf got;
    memset(&got, 0, sizeof(got));
    int rc = FS_ENOMEM;
    if (!threaded) {
        rc = fs_match_rows(index, also, col, keys, 0, rows, queues, 0, end, invalid, &got, NULL);
    } else {
        size_t step = 1 + u8(r) % 4;
        fs_batch_job *job = fs_batch_start_blocks(index, also, col, keys, queues, 0, 2 + u8(r) % 3, end, invalid,
                                                  1 + u8(r) % 4, step);
        if (job) {
            for (size_t fed = step; fed < rows; fed += step)
                fs_batch_feed(job, fed);
            fs_batch_feed(job, rows);
            while (!fs_batch_wait(job, 1000)) {}
            rc = fs_batch_finish(job, &got);
        }
    }
    if (rc == FS_OK)
        same_batch(&got, end, invalid, want, want_end, want_invalid, rows);
    else        /* (the threads' output is all or nothing; one thread's may be partial) */
        CHECK(rc == FS_ENOMEM && (!threaded || got.n == 0));
    fs_idbuf_free(&got);
}

/* fs_match_column's hooks here: a part's rows are all there, so fill
 * only says so; poll stops the call at its stop-th turn (0: never). */
typedef struct {
    unsigned polls, stop;
} column_turns;

static int column_fill(void *ctx, size_t k, size_t end, size_t *filled)
{
    (void)ctx;
    (void)k;
    *filled = end;
    return 0;
}

static int column_poll(void *ctx)
{
    column_turns *t = ctx;
    return t->stop && ++t->polls == t->stop;
}

/* The batch's rows matched again through fs_match_column (match_many's
 * driver): cut into 1-3 parts at drawn rows, each with a drawn number of
 * rows filled in at the start (the rest asked for as the threads match),
 * on 1-4 threads, a thread for every row, blocks of 1-4 rows, fed 1-4
 * rows at a time; now and then stopped by its poll.  The same output as
 * want; or FS_ENOMEM, or FS_ECANCELLED when stopped, with nothing out. */
static void column_again(rd *r, fs_sublist *sl, const fs_strings *col, const fs_strings *keys, int queues,
                         size_t rows, const fs_idbuf *want, const int64_t *want_end, const uint8_t *want_invalid)
{
    fs_column_part parts[3];
    size_t nparts = 1 + u8(r) % 3, base = 0;
    for (size_t k = 0; k < nparts; k++) {
        size_t left = rows - base, n = k + 1 == nparts ? left : u8(r) % (left + 1);
        parts[k] = (fs_column_part){fs_strings_slice(col, base, n), u8(r) % (n + 1), NULL, NULL};
        base += n;
    }
    fs_column_options opt = {.queues = queues, .dedupe = 0, .threads = 1 + u8(r) % 4};
    /* the thread policy shrunk so that a few rows take every turn of it */
    fs_column_policy policy = fs_column_tuned;
    fs_column_tuned.min_rows_per_thread = 1;
    fs_column_tuned.block_rows = 1 + u8(r) % 4;
    fs_column_tuned.cpus = 4;
    fs_column_tuned.feed_rows = 1 + u8(r) % 4;
    column_turns turns = {0, u8(r) % 4 == 0 ? 1 + u8(r) % 3 : 0};
    fs_column_hooks hooks = {&turns, column_fill, column_poll, NULL, NULL};
    int64_t end[64];
    uint8_t invalid[64];
    fs_idbuf got;
    memset(&got, 0, sizeof(got));
    int rc = fs_match_column(sl, NULL, parts, nparts, keys, &opt, &hooks, end, invalid, &got);
    fs_column_tuned = policy;
    if (rc == FS_OK)
        same_batch(&got, end, invalid, want, want_end, want_invalid, rows);
    else
        CHECK((rc == FS_ENOMEM || (rc == FS_ECANCELLED && turns.stop)) && got.n == 0 && got.ids == NULL);
    fs_idbuf_free(&got);
}

/* The model's subscriptions split between two new indexes, each one's
 * side drawn from the input: matched as one (fs_match_rows' also), they
 * must answer every row exactly as sl does -- the plain ids merged, a
 * queue group split between them picked as one.  0: out of memory. */
static int split_index(rd *r, fs_sublist **a, fs_sublist **b)
{
    *a = fs_sublist_new(dialect);
    *b = fs_sublist_new(dialect);
    int ok = *a && *b;
    for (size_t i = 0; ok && i < nsubs; i++) {
        const o_sub *x = &subs[i];
        fs_spec sp = {x->f, x->fn, x->q, x->qn, x->id};
        fs_sublist *to = u8(r) & 1 ? *a : *b;
        fs_error err;
        int rc = fs_sublist_insert(to, &sp, &err);
        if (rc == FS_EINVAL && dialect == FS_MQTT && x->q) {
            /* a filter starting with "$share/" takes no queue argument: as
             * the client wrote it, "$share/q/f" (unless that passes the
             * length limit: then this input skips the check) */
            size_t n = 7 + x->qn + 1 + x->fn;
            char *shared = malloc(n);
            CHECK(shared != NULL);
            memcpy(shared, "$share/", 7);
            memcpy(shared + 7, x->q, x->qn);
            shared[7 + x->qn] = '/';
            memcpy(shared + 8 + x->qn, x->f, x->fn);
            sp = (fs_spec){shared, n, NULL, 0, x->id};
            rc = fs_sublist_insert(to, &sp, &err);
            free(shared);
            if (rc == FS_EINVAL)
                rc = FS_ENOMEM;                     /* (not representable: skip) */
        }
        CHECK(rc == 1 || rc == FS_ENOMEM);          /* 1: new (the model's are distinct) */
        ok = rc == 1;
    }
    if (!ok) {
        if (*a) fs_sublist_free(*a);
        if (*b) fs_sublist_free(*b);
    }
    return ok;
}

static void op_batch(rd *r, int threaded)
{
    const char *s[64], *k[64];
    size_t n[64], kn[64];
    size_t rows = 1 + u8(r) % 8;
    int layout = u8(r) % 3, queues = u8(r) % 3, with_keys = u8(r) & 1;
    for (size_t i = 0; i < rows; i++) {
        s[i] = (u8(r) % 8) == 0 ? NULL : gen_str(r, dialect, 0, &n[i]);
        k[i] = with_keys && (u8(r) & 1) ? gen_str(r, dialect, 0, &kn[i]) : NULL;
    }
    if (threaded)                                   /* enough rows for every thread */
        for (size_t i = rows; i < 64; i++) {
            /* Copies of a row near the 64 KB limit are left null: 64 of them
             * (32k tokens each, checked against the oracle) made one input
             * take over a minute under ASan on a loaded machine, which
             * libFuzzer reports as a timeout; the row itself stays. */
            s[i] = n[i % rows] > 4096 ? NULL : s[i % rows];
            n[i] = n[i % rows];
            k[i] = k[i % rows];
            kn[i] = kn[i % rows];
        }
    if (threaded) {
        rows = 64;
        fs_fault_inject(0);                         /* the countdown is not for threads */
    }
    fz_column sc, kc;
    fz_column_make(&sc, s, n, rows, layout);
    fz_column_make(&kc, k, kn, rows, FZ_PTRS);
    const fs_strings *keys = with_keys ? &kc.col : NULL;
    int64_t row_end[64];
    uint8_t invalid[64];
    fs_idbuf out;
    memset(&out, 0, sizeof(out));
    int rc = fs_match_rows(sl, NULL, &sc.col, keys, 0, rows, queues, 0, row_end, invalid, &out, NULL);
    if (rc == FS_ENOMEM) {
        fs_idbuf_free(&out);
        fz_column_free(&sc);
        fz_column_free(&kc);
        return;
    }
    CHECK(rc == FS_OK);
    size_t prev = 0;
    for (size_t i = 0; i < rows; i++) {
        CHECK(row_end[i] >= (int64_t)prev && (size_t)row_end[i] <= out.n);
        int valid = s[i] && o_valid(dialect, s[i], n[i], 0);
        CHECK(invalid[i] == !valid);
        if (!valid) CHECK((size_t)row_end[i] == prev);
        else if (!threaded) {
            o_result want;
            o_matches(s[i], n[i], &want);
            check_row(out.n ? out.ids + prev : NULL, (size_t)row_end[i] - prev, queues, &want);
            o_result_free(&want);
        }
        prev = (size_t)row_end[i];
    }
    CHECK(prev == out.n);
    fs_sublist *a, *b;
    if (split_index(r, &a, &b)) {
        batch_again(r, a, b, &sc.col, keys, queues, rows, threaded, &out, row_end, invalid);
        fs_sublist_free(a);
        fs_sublist_free(b);
    }
    if (!threaded) {
        /* each row again on its own (the cache, if any, now holds it): the
         * same ids in the same order, queue picks included */
        prev = 0;
        for (size_t i = 0; i < rows; i++) {
            fs_idbuf one;
            memset(&one, 0, sizeof(one));
            int64_t end1;
            uint8_t inv1;
            rc = fs_match_rows(sl, NULL, &sc.col, keys, i, i + 1, queues, 0, &end1, &inv1, &one, NULL);
            if (rc == FS_OK) {
                CHECK(inv1 == invalid[i]);
                CHECK((size_t)end1 == (size_t)row_end[i] - prev && one.n == (size_t)end1);
                CHECK(one.n == 0 || memcmp(one.ids, out.ids + prev, sizeof(int64_t) * one.n) == 0);
            } else {
                CHECK(rc == FS_ENOMEM);
            }
            fs_idbuf_free(&one);
            prev = (size_t)row_end[i];
        }
    } else {
        batch_again(r, sl, NULL, &sc.col, keys, queues, rows, 1, &out, row_end, invalid);
    }
    column_again(r, sl, &sc.col, keys, queues, rows, &out, row_end, invalid);
    fs_idbuf_free(&out);
    fz_column_free(&sc);
    fz_column_free(&kc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size, 0};
    uint8_t head = u8(&r);
    dialect = (head & 1) ? FS_MQTT : (head >> 6) == 3 ? FS_AMQP : FS_NATS;
    sl = fs_sublist_new(dialect);
    CHECK(sl != NULL);
    cache_cap = 0;
    last_generation = 0;
    if (head & 2) {
        cache_cap = (head >> 2) % 16;
        CHECK(fs_sublist_set_cache(sl, cache_cap) == FS_OK);
    }
    int ops = 0;
    uint64_t fault = 0;
    while (r.i < r.n && ops++ < 300) {
        uint8_t op = u8(&r);
        fs_fault_inject(fault);
        switch (op % 16) {
        case 0: case 1: case 2: op_insert(&r, 0); break;
        case 3: case 4: op_insert(&r, 1); break;
        case 5: op_bulk(&r, 0); break;
        case 6: op_bulk(&r, 1); break;
        case 7: case 8: op_match(&r); break;
        case 9: op_reverse(&r); break;
        case 10: op_serialize(); break;
        case 11: op_cache(&r); break;
        case 12: case 13: op_batch(&r, 0); break;
        case 14: op_batch(&r, (op & 0xF0) == 0xF0); break;
        case 15: fault = 1 + u8(&r) % 16; break;     /* for the next operation */
        }
        if (op % 16 != 15) {
            fs_fault_inject(0);
            fault = 0;
        }
        free_made();
        check_count();
    }
    fs_fault_inject(0);
    free_made();
    fs_sublist_free(sl);
    sl = NULL;
    o_clear();
    return 0;
}
