/* sublist.c - the index's front door: it validates, takes the lock and
 * routes every operation to the part that holds the filter -- the literal
 * table, the shape tables (fs_shape.c) or the trie (fs_trie.c) -- and
 * brings their answers together (fs_result.c).  See sublist.h for the
 * layout. */
#include "sublist.h"

#include <stdatomic.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_cache.h"
#include "fs_internal.h"
#include "fs_sys.h"

fs_sublist *fs_sublist_new(fs_dialect d)
{
    fs_sublist *sl = FS_MALLOC(sizeof(fs_sublist));
    if (!sl)
        return NULL;
    memset(sl, 0, sizeof(*sl));
    sl->dialect = d;
    static const fs_span root_span = {0, 0, 0, FS_TOK_LITERAL};
    sl->root = fs_node_new(sl, NULL, "", &root_span);
    if (!sl->root) {
        FS_FREE(sl);
        return NULL;
    }
    sl->nodes = 0;  /* the root is not counted */
    if (fs_rwlock_init(&sl->lock) != 0) {
        FS_FREE(fs_link_of(sl->root));
        FS_FREE(sl);
        return NULL;
    }
    return sl;
}

/* Frees everything: the trie, the literal table, the shapes, the cache. */
void fs_sublist_free(fs_sublist *sl)
{
    if (!sl)
        return;
    fs_trie_free(sl);
    for (uint32_t i = 0; i < sl->literals.cap; i++)
        if (sl->literals.slots[i].node)
            fs_node_free(sl, sl->literals.slots[i].node);
    FS_FREE(sl->literals.slots);
    fs_shapes_free(sl);
    fs_cache_free(sl->cache);
    fs_rwlock_destroy(&sl->lock);
    FS_FREE(sl);
}

fs_dialect fs_sublist_dialect(const fs_sublist *sl) { return sl->dialect; }

uint64_t fs_sublist_count(fs_sublist *sl)
{
    fs_rwlock_rdlock(&sl->lock);
    uint64_t c = sl->count;
    fs_rwlock_rdunlock(&sl->lock);
    return c;
}

uint64_t fs_sublist_generation(fs_sublist *sl)
{
    fs_rwlock_rdlock(&sl->lock);
    uint64_t g = sl->generation;
    fs_rwlock_rdunlock(&sl->lock);
    return g;
}

/* A validated subscription: the filter's tokens plus where the queue is. */
typedef struct {
    const char *filter;
    uint32_t filter_len;
    int literal;          /* no wildcard: lives in the literal table */
    int shaped;           /* has a shape (fs_shape.h): shape describes it */
    fs_shape_of shape;
    const char *queue;    /* NULL: plain */
    uint32_t queue_len;
} parsed_spec;

/* Split "$share/G/f", check the queue, tokenize the filter into t. */
static int parse_spec(fs_dialect d, const fs_spec *spec, fs_tokens *t, parsed_spec *out, fs_error *err)
{
    const char *f = spec->filter, *q = spec->queue;
    size_t flen = spec->filter_len, qlen = spec->queue_len;
    if (d == FS_MQTT) {
        const char *g, *sf;
        size_t glen, sflen;
        int rc = fs_split_share(f, flen, &g, &glen, &sf, &sflen, err);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            if (q) {
                err->reason = "both a '$share/' group and a queue given";
                err->pos = 0;
                err->in_queue = 0;
                return FS_EINVAL;
            }
            q = g;
            qlen = glen;
            size_t shift = (size_t)(sf - f);
            f = sf;
            flen = sflen;
            rc = fs_tokenize(d, f, flen, 1, t, err);
            if (rc == FS_EINVAL)
                err->pos += shift;
            if (rc < 0)
                return rc;
            goto tokenized;
        }
    }
    {
        int rc = fs_tokenize(d, f, flen, 1, t, err);
        if (rc < 0)
            return rc;
    }
tokenized:
    if (q) {
        int rc = fs_check_queue(d, q, qlen, err);
        if (rc < 0)
            return rc;
    }
    out->filter = f;
    out->filter_len = (uint32_t)flen;
    out->shaped = fs_shape_classify(t, &out->shape);
    out->literal = 1;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->tok[i].kind != FS_TOK_LITERAL)
            out->literal = 0;
    out->queue = q;
    out->queue_len = (uint32_t)qlen;
    return FS_OK;
}

int fs_validate(fs_dialect d, const char *s, size_t len, int is_filter, fs_error *err)
{
    fs_tokens t;
    fs_tokens_init(&t);
    int rc;
    if (is_filter) {
        fs_spec spec = {s, len, NULL, 0, 0};
        parsed_spec ps;
        rc = parse_spec(d, &spec, &t, &ps, err);
    } else {
        rc = fs_tokenize(d, s, len, 0, &t, err);
    }
    fs_tokens_free(&t);
    return rc;
}

/* The one pre-existing level an insert added a child to (every level below
 * it is new), and its capacity before, so that undoing the insert can
 * shrink it back and leave not even memory_bytes changed. */


static void undo_growth(fs_sublist *sl, const fs_growth *g)
{
    if (g->level)
        fs_level_restore(sl, g->level, g->cap);
}

/* Find the node holding t's subscriptions -- in the literal table, the
 * filter's shape table (then *shp is that shape) or the trie -- or NULL.
 * A shaped filter may still sit in the trie: it went there while the
 * shape budget was spent, or it came from a version 1 image. */
static fs_node *find_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, fs_shape **shp)
{
    *shp = NULL;
    if (ps->literal)
        return fs_level_find(&sl->literals, ps->filter, ps->filter_len, fs_hash(ps->filter, ps->filter_len));
    if (ps->shaped) {
        fs_shape *sh = fs_shape_find(sl, &ps->shape);
        fs_node *e = sh ? fs_shape_lookup(sh, ps->filter, ps->filter_len, ps->shape.key) : NULL;
        if (e) {
            *shp = sh;
            return e;
        }
    }
    return fs_trie_find(sl, t, ps->filter);
}

/* Drop n if it holds nothing any more: from its shape table (sh), the
 * literal table or the trie. */
static void prune_node(fs_sublist *sl, fs_node *n, fs_shape *sh)
{
    if (!sh) {
        fs_prune(sl, n);
    } else if (!fs_has_subs(n)) {
        fs_shape_del(sl, sh, n);
        fs_node_free(sl, n);
    }
}

/* A new entry for a whole filter in the literal table or a shape table.
 * Records in g the pre-existing table it grew.  FS_OK or FS_ENOMEM. */
static int new_entry(fs_sublist *sl, const parsed_spec *ps, fs_shape *sh, int fresh_shape,
                     fs_growth *g, fs_node **out)
{
    fs_level *L = sh ? &sh->table : &sl->literals;
    uint64_t key = sh ? ps->shape.key : fs_hash(ps->filter, ps->filter_len);
    fs_span whole = {0, ps->filter_len, (uint32_t)key, sh ? FS_NODE_SHAPED : FS_TOK_LITERAL};
    fs_node *n = fs_entry_new(sl, ps->filter, &whole);
    if (!n)
        return FS_ENOMEM;
    if (!fresh_shape) {
        g->level = L;
        g->cap = L->cap;
    }
    if ((sh ? fs_shape_add(sl, sh, n, key) : fs_level_add(sl, L, n)) < 0) {
        fs_node_free(sl, n);
        return FS_ENOMEM;
    }
    *out = n;
    return FS_OK;
}

/* Add the subscription, creating its node where it belongs: the literal
 * table, its shape's table (creating the shape while the budget lasts),
 * or the trie.  Caller holds the write lock.  1 new, 0 present,
 * FS_ENOMEM (index unchanged). */
static int insert_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                         fs_growth *g, int invalidate)
{
    fs_shape *sh;
    int rc = FS_OK;
    g->level = NULL;
    g->cap = 0;
    fs_node *n = find_locked(sl, t, ps, &sh);
    if (!n) {
        int fresh_shape = 0;
        if (ps->shaped && !(sh = fs_shape_find(sl, &ps->shape))) {
            if (fs_shape_create(sl, &ps->shape, &sh) < 0)
                return FS_ENOMEM;
            fresh_shape = sh != NULL;
        }
        if (ps->literal || sh) {
            rc = new_entry(sl, ps, sh, fresh_shape, g, &n);
            if (rc < 0) {
                if (fresh_shape)
                    fs_shape_drop_if_empty(sl, sh);
                return rc;
            }
        } else if ((rc = fs_trie_path(sl, t, ps->filter, g, &n)) < 0) {
            goto fail;
        }
    }
    rc = ps->queue ? fs_node_add_queued(sl, n, ps->queue, ps->queue_len, id)
                   : fs_node_add_sub(sl, n, id);
    if (rc < 0)
        goto fail;
    if (rc == 1) {
        sl->count++;
        sl->generation++;
        sl->inserts++;
        if (sl->cache && invalidate)
            fs_cache_invalidate(sl->cache, sl->dialect, ps->filter, ps->filter_len, t, ps->literal);
    }
    return rc;
fail:
    prune_node(sl, n, sh);
    undo_growth(sl, g);
    return rc;
}

static int remove_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                         int invalidate)
{
    fs_shape *sh;
    fs_node *n = find_locked(sl, t, ps, &sh);
    if (!n)
        return 0;
    int rc = ps->queue ? fs_node_del_queued(sl, n, ps->queue, ps->queue_len, id)
                       : fs_node_del_sub(sl, n, id);
    if (rc == 1) {
        sl->count--;
        sl->generation++;
        sl->removes++;
        prune_node(sl, n, sh);
        if (sl->cache && invalidate)
            fs_cache_invalidate(sl->cache, sl->dialect, ps->filter, ps->filter_len, t, ps->literal);
    }
    return rc;
}

int fs_sublist_insert(fs_sublist *sl, const fs_spec *spec, fs_error *err)
{
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = parse_spec(sl->dialect, spec, &t, &ps, err);
    if (rc == FS_OK) {
        fs_growth g;
        fs_rwlock_wrlock(&sl->lock);
        rc = insert_locked(sl, &t, &ps, spec->id, &g, 1);
        fs_rwlock_wrunlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

int fs_sublist_remove(fs_sublist *sl, const fs_spec *spec, fs_error *err)
{
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = parse_spec(sl->dialect, spec, &t, &ps, err);
    if (rc == FS_OK) {
        fs_rwlock_wrlock(&sl->lock);
        rc = remove_locked(sl, &t, &ps, spec->id, 1);
        fs_rwlock_wrunlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

int fs_sublist_insert_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                           size_t *changed, size_t *bad, fs_error *err)
{
    *changed = 0;
    *bad = 0;
    /* Remember which ones were new and what they grew, to undo them if a
     * later one fails. */
    unsigned char *fresh = FS_MALLOC(n ? n : 1);
    fs_growth *grew = FS_MALLOC(sizeof(fs_growth) * (n ? n : 1));
    if (!fresh || !grew) {
        FS_FREE(fresh);
        FS_FREE(grew);
        return FS_ENOMEM;
    }
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = FS_OK;
    size_t i;
    fs_rwlock_wrlock(&sl->lock);
    uint64_t generation = sl->generation;
    for (i = 0; i < n; i++) {
        rc = parse_spec(sl->dialect, &specs[i], &t, &ps, err);
        if (rc == FS_OK)
            rc = insert_locked(sl, &t, &ps, specs[i].id, &grew[i], 0);
        if (rc < 0)
            break;
        fresh[i] = (unsigned char)rc;
        *changed += (size_t)rc;
        rc = FS_OK;
    }
    if (rc < 0) {
        *bad = i;
        /* Undo.  Tokens already have room for every filter before i, so
         * parse_spec cannot fail here, and removal never allocates. */
        fs_error ignored;
        while (i-- > 0) {
            if (fresh[i] && parse_spec(sl->dialect, &specs[i], &t, &ps, &ignored) == FS_OK)
                remove_locked(sl, &t, &ps, specs[i].id, 0);   /* the cache never saw it */
            undo_growth(sl, &grew[i]);
        }
        sl->inserts -= *changed;
        sl->removes -= *changed;
        sl->generation = generation;
        *changed = 0;
    } else if (sl->cache) {
        /* Only a batch that went in whole touches the cache: evict what
         * the new subscriptions match (re-parsing cannot fail now). */
        fs_error ignored;
        for (i = 0; i < n; i++)
            if (fresh[i] && parse_spec(sl->dialect, &specs[i], &t, &ps, &ignored) == FS_OK)
                fs_cache_invalidate(sl->cache, sl->dialect, ps.filter, ps.filter_len, &t, ps.literal);
    }
    fs_rwlock_wrunlock(&sl->lock);
    fs_tokens_free(&t);
    FS_FREE(fresh);
    FS_FREE(grew);
    return rc;
}

int fs_sublist_remove_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                           size_t *changed, size_t *bad, fs_error *err)
{
    *changed = 0;
    *bad = 0;
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = FS_OK;
    for (size_t i = 0; i < n && rc == FS_OK; i++) {
        rc = parse_spec(sl->dialect, &specs[i], &t, &ps, err);
        if (rc < 0)
            *bad = i;
    }
    if (rc == FS_OK) {
        fs_rwlock_wrlock(&sl->lock);
        for (size_t i = 0; i < n; i++) {
            parse_spec(sl->dialect, &specs[i], &t, &ps, err);
            *changed += (size_t)remove_locked(sl, &t, &ps, specs[i].id, 1);
        }
        fs_rwlock_wrunlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

void fs_scratch_init(fs_scratch *sc)
{
    memset(sc, 0, sizeof(*sc));
    fs_tokens_init(&sc->toks);
}

void fs_scratch_free(fs_scratch *sc)
{
    fs_tokens_free(&sc->toks);
    FS_FREE(sc->front);
    FS_FREE(sc->next);
    FS_FREE(sc->hits);
    FS_FREE(sc->seen);
    fs_scratch_init(sc);
}

/* Collect into sc->hits every node whose subscriptions match the tokenized
 * subject s.  Caller holds the read lock. */
int fs_walk_locked(const fs_sublist *sl, const char *s, size_t len, uint32_t hash, fs_scratch *sc)
{
    const fs_tokens *t = &sc->toks;
    sc->nhits = 0;
    if (sl->literals.count) {
        const fs_node *e = fs_level_find_within(&sl->literals, s, (uint32_t)len, hash, s + len);
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
    }
    if (sl->shapes.n && fs_shapes_collect(sl, s, len, t, sc) < 0)
        return FS_ENOMEM;
    return fs_trie_walk_locked(sl, s, t, sc);
}

void fs_count_matches(fs_sublist *sl, uint64_t matches, uint64_t fanout, uint64_t fanout_max)
{
    atomic_fetch_add_explicit(&sl->matches, matches, memory_order_relaxed);
    atomic_fetch_add_explicit(&sl->fanout_total, fanout, memory_order_relaxed);
    uint64_t cur = atomic_load_explicit(&sl->fanout_max, memory_order_relaxed);
    while (fanout_max > cur &&
           !atomic_compare_exchange_weak_explicit(&sl->fanout_max, &cur, fanout_max,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

static void count_match(fs_sublist *sl, uint64_t fanout) { fs_count_matches(sl, 1, fanout, fanout); }

int fs_compute_locked(fs_sublist *sl, const char *s, size_t len, uint32_t hash,
                      fs_scratch *sc, fs_result *r, fs_error *err)
{
    int rc = fs_tokenize(sl->dialect, s, len, 0, &sc->toks, err);
    if (rc == FS_OK)
        rc = fs_walk_locked(sl, s, len, hash, sc);
    if (rc == FS_OK)
        rc = fs_build_result(sl, sc, r);
    if (rc == FS_OK && sl->cache)
        fs_cache_put(sl->cache, s, len, hash, &sc->toks, r);
    return rc;
}

void fs_reclaim_cache(fs_sublist *sl)
{
    fs_rwlock_wrlock(&sl->lock);
    if (sl->cache)
        fs_cache_reclaim(sl->cache);
    fs_rwlock_wrunlock(&sl->lock);
}

/* End of a read-locked call that may have filled the cache: flush its
 * tally, then release the read lock, then free evicted entries if enough
 * wait (that needs the write lock: no reader may still be on them). */
void fs_read_done(fs_sublist *sl, const fs_cache_tally *tally)
{
    int reclaim = 0;
    if (sl->cache) {
        fs_cache_tally_flush(sl->cache, tally);
        reclaim = fs_cache_should_reclaim(sl->cache);
    }
    fs_rwlock_rdunlock(&sl->lock);
    if (reclaim)
        fs_reclaim_cache(sl);
}

int fs_sublist_match(fs_sublist *sl, const char *subject, size_t len,
                     fs_scratch *sc, fs_result *r, fs_error *err)
{
    uint32_t hash = fs_hash(subject, len);
    int rc;
    fs_cache_tally tally = {0, 0};
    fs_rwlock_rdlock(&sl->lock);
    const fs_result *cached = sl->cache ? fs_cache_get(sl->cache, subject, len, hash, &tally) : NULL;
    if (cached)
        rc = fs_result_copy(r, cached);
    else
        rc = fs_compute_locked(sl, subject, len, hash, sc, r, err);
    fs_read_done(sl, &tally);
    if (rc == FS_OK)
        count_match(sl, r->nids);
    return rc;
}

int fs_sublist_interest(fs_sublist *sl, const char *subject, size_t len,
                        fs_scratch *sc, uint64_t *nplain, uint64_t *nqueue,
                        fs_error *err)
{
    *nplain = *nqueue = 0;
    uint32_t hash = fs_hash(subject, len);
    int rc = FS_OK;
    fs_cache_tally tally = {0, 0};
    fs_rwlock_rdlock(&sl->lock);
    const fs_result *cached = sl->cache ? fs_cache_get(sl->cache, subject, len, hash, &tally) : NULL;
    if (cached) {
        *nplain = cached->nplain;
        *nqueue = cached->nids - cached->nplain;
    } else if (sl->cache || sl->dialect == FS_AMQP) {
        /* Fill the cache: the next question about this subject is cheap.
         * (AMQP counts each sub_id once: the built result is deduplicated.) */
        fs_result r;
        fs_result_init(&r);
        rc = fs_compute_locked(sl, subject, len, hash, sc, &r, err);
        *nplain = r.nplain;
        *nqueue = r.nids - r.nplain;
        fs_result_free(&r);
    } else {
        rc = fs_tokenize(sl->dialect, subject, len, 0, &sc->toks, err);
        if (rc == FS_OK)
            rc = fs_walk_locked(sl, subject, len, hash, sc);
        for (size_t k = 0; rc == FS_OK && k < sc->nhits; k++) {
            const fs_node *n = sc->hits[k];
            *nplain += n->nsubs;
            for (uint32_t gi = 0; gi < n->ngroups; gi++)
                *nqueue += n->groups[gi].n;
        }
    }
    fs_read_done(sl, &tally);
    if (rc == FS_OK)
        count_match(sl, *nplain + *nqueue);
    return rc;
}

int fs_sublist_has_interest(fs_sublist *sl, const char *subject, size_t len,
                            fs_scratch *sc, fs_error *err)
{
    fs_rwlock_rdlock(&sl->lock);
    int cached = sl->cache != NULL;
    fs_rwlock_rdunlock(&sl->lock);
    if (cached) {
        /* With a cache the whole answer is worth computing: it is kept,
         * and the next question about this subject is one lookup. */
        uint64_t nplain, nqueue;
        int rc = fs_sublist_interest(sl, subject, len, sc, &nplain, &nqueue, err);
        return rc < 0 ? rc : nplain + nqueue > 0;
    }
    uint32_t hash = fs_hash(subject, len);
    int rc = fs_tokenize(sl->dialect, subject, len, 0, &sc->toks, err);
    if (rc < 0)
        return rc;
    fs_rwlock_rdlock(&sl->lock);
    if (sl->literals.count &&
        fs_level_find_within(&sl->literals, subject, (uint32_t)len, hash, subject + len)) {
        rc = 1;
    } else {
        /* The shapes one by one, stopping at the first entry (entries
         * always hold subscriptions), then the trie. */
        const fs_tokens *t = &sc->toks;
        const fs_shapes *S = &sl->shapes;
        uint32_t k = t->n, need = k < FS_SHAPE_MAX_TOKENS ? k : FS_SHAPE_MAX_TOKENS;
        uint64_t bits = S->probe[k > FS_SHAPE_MAX_TOKENS ? FS_SHAPE_MAX_TOKENS + 1 : k];
        uint64_t m[FS_SHAPE_MAX_TOKENS], P[FS_SHAPE_MAX_TOKENS + 1];
        int dollar = sl->dialect == FS_MQTT && subject[0] == '$';
        char sep = fs_sep(sl->dialect);
        rc = 0;
        if (bits)
            fs_shape_mixes(t->tok, need, m, P);
        for (; bits && !rc; bits &= bits - 1) {
            const fs_shape *sh = S->shape[fs_ctz64(bits)];
            rc = !(dollar && sh->first_wild) &&
                 fs_shape_probe(sh, fs_shape_subject_key(sh, m, P), sep, subject, t->tok, subject + len);
        }
        if (!rc) {
            sc->nhits = 0;
            rc = fs_trie_walk_locked(sl, subject, t, sc);
            if (rc == FS_OK)
                rc = sc->nhits > 0;
        }
    }
    fs_rwlock_rdunlock(&sl->lock);
    if (rc >= 0)
        count_match(sl, 0);
    return rc;
}

int fs_sublist_set_cache(fs_sublist *sl, size_t capacity)
{
    fs_cache *c = NULL;
    if (capacity && !(c = fs_cache_new(capacity)))
        return FS_ENOMEM;
    fs_rwlock_wrlock(&sl->lock);
    fs_cache *old = sl->cache;
    sl->cache = c;
    fs_rwlock_wrunlock(&sl->lock);
    fs_cache_free(old);
    return FS_OK;
}

/* Add to sc->hits the literal-table and shape-table entries that the
 * query filter q (tokens in sc->toks) intersects. */
static int rentries_locked(const fs_sublist *sl, const char *q, size_t len, fs_scratch *sc)
{
    const fs_level *L = &sl->literals;
    const fs_tokens *qt = &sc->toks;
    int literal = 1;
    for (uint32_t i = 0; i < qt->n; i++)
        literal &= qt->tok[i].kind == FS_TOK_LITERAL;
    if (literal) {
        /* A literal query is a subject: the entries are what it matches. */
        const fs_node *e = fs_level_find(L, q, (uint32_t)len, fs_hash(q, len));
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
        return fs_shapes_collect(sl, q, len, qt, sc);
    }
    fs_tokens et;
    fs_tokens_init(&et);
    fs_error ignored;
    int rc = FS_OK;
    for (uint32_t j = 0; j <= sl->shapes.n && rc == FS_OK; j++) {
        const fs_level *T = j < sl->shapes.n ? &sl->shapes.shape[j]->table : L;
        for (uint32_t i = 0; i < T->cap && rc == FS_OK; i++) {
            const fs_node *e = T->slots[i].node;
            if (!e)
                continue;
            rc = fs_tokenize(sl->dialect, e->tok, e->toklen, 1, &et, &ignored);
            if (rc == FS_OK && fs_filters_intersect(sl->dialect, q, qt, e->tok, &et))
                rc = fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e);
        }
    }
    fs_tokens_free(&et);
    return rc;
}

int fs_sublist_reverse_match(fs_sublist *sl, const char *filter, size_t len,
                             fs_scratch *sc, fs_rresult *r, fs_error *err)
{
    r->nhits = r->narena = 0;
    if (sl->dialect == FS_MQTT) {
        const char *g, *f;
        size_t glen, flen;
        int rc = fs_split_share(filter, len, &g, &glen, &f, &flen, err);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            filter = f;
            len = flen;
        }
    }
    int rc = fs_tokenize(sl->dialect, filter, len, 1, &sc->toks, err);
    if (rc < 0)
        return rc;
    fs_rwlock_rdlock(&sl->lock);
    rc = fs_trie_rwalk_locked(sl, filter, sc);
    if (rc == FS_OK)
        rc = rentries_locked(sl, filter, len, sc);
    for (size_t k = 0; rc == FS_OK && k < sc->nhits; k++) {
        const fs_node *n = sc->hits[k];
        const int64_t *ids = fs_node_ids(n);
        for (uint32_t i = 0; rc == FS_OK && i < n->nsubs; i++)
            rc = fs_rhit_add(sl, n, NULL, ids[i], r);
        for (uint32_t gi = 0; rc == FS_OK && gi < n->ngroups; gi++)
            for (uint32_t i = 0; rc == FS_OK && i < n->groups[gi].n; i++)
                rc = fs_rhit_add(sl, n, &n->groups[gi], n->groups[gi].ids[i], r);
    }
    fs_rwlock_rdunlock(&sl->lock);
    return rc;
}

void fs_sublist_stats(fs_sublist *sl, fs_stats *st)
{
    fs_rwlock_rdlock(&sl->lock);
    st->subscriptions = sl->count;
    st->nodes = sl->nodes;
    st->memory_bytes = sl->mem + sizeof(fs_sublist);
    st->inserts = sl->inserts;
    st->removes = sl->removes;
    st->generation = sl->generation;
    memset(&st->cache, 0, sizeof(st->cache));
    if (sl->cache) {
        fs_cache_stats_get(sl->cache, &st->cache);
        st->memory_bytes += st->cache.bytes;
    }
    fs_rwlock_rdunlock(&sl->lock);
    st->matches = atomic_load_explicit(&sl->matches, memory_order_relaxed);
    st->fanout_total = atomic_load_explicit(&sl->fanout_total, memory_order_relaxed);
    st->fanout_max = atomic_load_explicit(&sl->fanout_max, memory_order_relaxed);
}

int fs_subject_matches(fs_dialect d, const char *filter, size_t flen,
                       const char *subject, size_t slen, int *which, fs_error *err)
{
    fs_tokens ft, st;
    fs_tokens_init(&ft);
    fs_tokens_init(&st);
    int rc;
    *which = 0;
    if (d == FS_MQTT) {
        const char *g, *f;
        size_t glen, l;
        rc = fs_split_share(filter, flen, &g, &glen, &f, &l, err);
        if (rc < 0)
            goto done;
        if (rc == 1) {
            filter = f;
            flen = l;
        }
    }
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

static fs_tls_key workspace_key;

static fs_once_flag workspace_once = FS_ONCE_INIT;

static int workspace_key_ok;

static void FS_TLS_DESTRUCTOR workspace_destroy(void *p)
{
    fs_workspace *w = p;
    fs_scratch_free(&w->sc);
    fs_result_free(&w->r);
    FS_FREE(w);
}

static void workspace_key_create(void)
{
    workspace_key_ok = fs_tls_create(&workspace_key, workspace_destroy) == 0;
}

fs_workspace *fs_workspace_get(void)
{
    fs_once(&workspace_once, workspace_key_create);
    if (!workspace_key_ok)
        return NULL;
    fs_workspace *w = fs_tls_get(workspace_key);
    if (!w) {
        w = FS_MALLOC(sizeof(fs_workspace));
        if (!w)
            return NULL;
        fs_scratch_init(&w->sc);
        fs_result_init(&w->r);
        w->busy = 0;
        if (fs_tls_set(workspace_key, w) != 0) {
            FS_FREE(w);
            return NULL;
        }
    }
    return w;
}

fs_workspace *fs_workspace_acquire(fs_workspace *spare)
{
    fs_workspace *w = fs_workspace_get();
    if (w && !w->busy) {
        w->busy = 1;
        return w;
    }
    if (!w)
        return NULL;
    fs_scratch_init(&spare->sc);
    fs_result_init(&spare->r);
    spare->busy = 1;
    return spare;
}

void fs_workspace_release(fs_workspace *w, fs_workspace *spare)
{
    if (w == spare) {
        fs_scratch_free(&w->sc);
        fs_result_free(&w->r);
        return;
    }
    w->busy = 0;
    fs_workspace_trim(w);
}

void fs_workspace_trim(fs_workspace *w)
{
    if (w->r.cap_ids > 65536 || w->r.cap_arena > 1u << 20 || w->r.cap_groups > 4096)
        fs_result_free(&w->r);
    if (w->sc.cap_front > 65536 || w->sc.cap_next > 65536 || w->sc.cap_hits > 65536 ||
        w->sc.cap_seen > 131072 ||
        w->sc.toks.cap > 4096)
        fs_scratch_free(&w->sc);
}
