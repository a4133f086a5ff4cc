/* fs_cache.c - sharded LRU of match results (see fs_cache.h). */
#include "fs_cache.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_result.h"

typedef struct fs_centry {
    struct fs_centry *hnext;          /* bucket chain */
    struct fs_centry *prev, *next;    /* LRU list, head = most recent */
    uint32_t hash, len;
    uint32_t slot;                    /* index in the shard's summary array */
    size_t bytes;                     /* size of this allocation */
    const char *subject;              /* inside this allocation */
    fs_result r;                      /* its buffers are inside this allocation */
} fs_centry;

/* What invalidation needs to rule an entry out without touching it: the
 * hashes of its first and last tokens and its token count, in one dense
 * array per shard that a wildcard insert scans sequentially. */
typedef struct {
    uint32_t first, last, ntoks;
    fs_centry *entry;
} fs_summary;

struct fs_cache_shard {
    atomic_flag lock;
    fs_centry **buckets;
    uint32_t nbuckets;
    fs_summary *summ;                 /* capacity + 1 slots, count used */
    fs_centry *head, *tail;
    size_t count, capacity;
    uint64_t hits, misses, bytes;
    char pad[64];                     /* keep shards on separate cache lines */
};

struct fs_cache {
    uint32_t nshards, shard_bits;
    size_t capacity;
    fs_cache_shard shards[];
};

static void shard_lock(fs_cache_shard *sh)
{
    unsigned spins = 0;
    while (atomic_flag_test_and_set_explicit(&sh->lock, memory_order_acquire))
        if (++spins % 64 == 0)
            sched_yield();
}

static void shard_unlock(fs_cache_shard *sh)
{
    atomic_flag_clear_explicit(&sh->lock, memory_order_release);
}

static fs_cache_shard *shard_of(fs_cache *c, uint32_t hash)
{
    return &c->shards[c->shard_bits ? hash >> (32 - c->shard_bits) : 0];
}

fs_cache *fs_cache_new(size_t capacity)
{
    /* Shards of at least 64 entries, at most 16 shards: small caches stay
     * one exact LRU, big ones spread over locks. */
    uint32_t bits = 0;
    while (bits < 4 && (capacity >> (bits + 1)) >= 64)
        bits++;
    uint32_t nshards = 1u << bits;
    fs_cache *c = FS_MALLOC(sizeof(fs_cache) + nshards * sizeof(fs_cache_shard));
    if (!c)
        return NULL;
    memset(c, 0, sizeof(fs_cache) + nshards * sizeof(fs_cache_shard));
    c->nshards = nshards;
    c->shard_bits = bits;
    c->capacity = capacity;
    for (uint32_t i = 0; i < nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
        atomic_flag_clear(&sh->lock);
        sh->capacity = capacity / nshards + (i < capacity % nshards);
        uint32_t nb = 1;
        while (nb < sh->capacity && nb < (1u << 30))
            nb *= 2;
        sh->buckets = FS_MALLOC(sizeof(fs_centry *) * nb);
        if (!sh->buckets) {
            fs_cache_free(c);
            return NULL;
        }
        memset(sh->buckets, 0, sizeof(fs_centry *) * nb);
        sh->nbuckets = nb;
        sh->summ = FS_MALLOC(sizeof(fs_summary) * (sh->capacity + 1));
        if (!sh->summ) {
            fs_cache_free(c);
            return NULL;
        }
    }
    return c;
}

void fs_cache_free(fs_cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
        for (fs_centry *e = sh->head, *nx; e; e = nx) {
            nx = e->next;
            FS_FREE(e);
        }
        FS_FREE(sh->buckets);
        FS_FREE(sh->summ);
    }
    FS_FREE(c);
}

static void lru_unlink(fs_cache_shard *sh, fs_centry *e)
{
    if (e->prev) e->prev->next = e->next;
    else sh->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else sh->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_head(fs_cache_shard *sh, fs_centry *e)
{
    e->prev = NULL;
    e->next = sh->head;
    if (sh->head) sh->head->prev = e;
    sh->head = e;
    if (!sh->tail) sh->tail = e;
}

/* Unlink e from its bucket and the LRU list and free it. */
static void evict(fs_cache_shard *sh, fs_centry *e)
{
    fs_centry **pp = &sh->buckets[e->hash & (sh->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(sh, e);
    sh->count--;
    sh->summ[e->slot] = sh->summ[sh->count];      /* swap-remove its summary */
    sh->summ[e->slot].entry->slot = e->slot;
    sh->bytes -= e->bytes;
    FS_FREE(e);
}

static fs_centry *find(fs_cache_shard *sh, const char *s, size_t len, uint32_t hash)
{
    for (fs_centry *e = sh->buckets[hash & (sh->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == hash && e->len == len && fs_tok_eq_within(e->subject, s, (uint32_t)len, s + len))
            return e;
    return NULL;
}

const fs_result *fs_cache_get(fs_cache *c, const char *s, size_t len, uint32_t hash,
                              int count, fs_cache_shard **held)
{
    fs_cache_shard *sh = shard_of(c, hash);
    shard_lock(sh);
    fs_centry *e = find(sh, s, len, hash);
    if (!e) {
        if (count)
            sh->misses++;
        shard_unlock(sh);
        return NULL;
    }
    if (count)
        sh->hits++;
    if (sh->head != e) {
        lru_unlink(sh, e);
        lru_push_head(sh, e);
    }
    *held = sh;
    return &e->r;
}

void fs_cache_release(fs_cache_shard *held) { shard_unlock(held); }

#define ALIGN8(x) (((x) + 7u) & ~(size_t)7u)

void fs_cache_put(fs_cache *c, const char *s, size_t len, uint32_t hash,
                  const fs_tokens *t, const fs_result *r)
{
    size_t ids_off = ALIGN8(sizeof(fs_centry));
    size_t groups_off = ids_off + sizeof(int64_t) * r->nids;
    size_t subj_off = groups_off + sizeof(fs_group_out) * r->ngroups;
    size_t arena_off = subj_off + FS_TOK_ALLOC(len);   /* word-padded for comparisons */
    size_t bytes = arena_off + r->narena;
    char *mem = FS_MALLOC(bytes);
    if (!mem)
        return;
    fs_centry *e = (fs_centry *)mem;
    memset(e, 0, sizeof(*e));
    e->hash = hash;
    e->len = (uint32_t)len;
    e->bytes = bytes;
    e->r.ids = (int64_t *)(mem + ids_off);
    e->r.nids = e->r.cap_ids = r->nids;
    e->r.nplain = r->nplain;
    e->r.groups = (fs_group_out *)(mem + groups_off);
    e->r.ngroups = e->r.cap_groups = r->ngroups;
    e->r.arena = mem + arena_off;
    e->r.narena = e->r.cap_arena = r->narena;
    if (r->nids) memcpy(e->r.ids, r->ids, sizeof(int64_t) * r->nids);
    if (r->ngroups) memcpy(e->r.groups, r->groups, sizeof(fs_group_out) * r->ngroups);
    if (r->narena) memcpy(e->r.arena, r->arena, r->narena);
    memcpy(mem + subj_off, s, len);
    memset(mem + subj_off + len, 0, FS_TOK_ALLOC(len) - len);
    e->subject = mem + subj_off;

    fs_cache_shard *sh = shard_of(c, hash);
    shard_lock(sh);
    if (find(sh, s, len, hash)) {          /* another thread filled it first */
        shard_unlock(sh);
        FS_FREE(mem);
        return;
    }
    fs_centry **b = &sh->buckets[hash & (sh->nbuckets - 1)];
    e->hnext = *b;
    *b = e;
    lru_push_head(sh, e);
    e->slot = (uint32_t)sh->count;
    /* (An AMQP key may have zero words: no first or last to summarise.) */
    sh->summ[sh->count] = t->n ? (fs_summary){t->tok[0].hash, t->tok[t->n - 1].hash, t->n, e}
                               : (fs_summary){0, 0, 0, e};
    sh->count++;
    sh->bytes += bytes;
    while (sh->count > sh->capacity)
        evict(sh, sh->tail);
    shard_unlock(sh);
}

void fs_cache_invalidate(fs_cache *c, fs_dialect d, const char *filter, size_t flen,
                         const fs_tokens *ft, int literal)
{
    if (literal) {
        uint32_t hash = fs_hash(filter, flen);
        fs_cache_shard *sh = shard_of(c, hash);
        shard_lock(sh);
        fs_centry *e = find(sh, filter, flen, hash);
        if (e)
            evict(sh, e);
        shard_unlock(sh);
        return;
    }
    /* What every matching subject must have: the filter's literal first
     * token, its literal last token, a token count (exact without a rest
     * wildcard; AMQP's '#' may be anywhere and several, each 0+ words). */
    const fs_span *f0 = &ft->tok[0], *fl = &ft->tok[ft->n - 1];
    uint32_t nrest = 0;
    for (uint32_t i = 0; i < ft->n; i++)
        nrest += ft->tok[i].kind == FS_TOK_REST;
    int rest = nrest > 0;
    uint32_t min_toks = d == FS_NATS ? ft->n : ft->n - nrest;   /* NATS '>' takes 1+ */
    int check_first = f0->kind == FS_TOK_LITERAL;
    int check_last = fl->kind == FS_TOK_LITERAL;
    fs_tokens st;
    fs_tokens_init(&st);
    fs_error ignored;
    for (uint32_t i = 0; i < c->nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
        shard_lock(sh);
        for (size_t k = 0; k < sh->count;) {
            const fs_summary *m = &sh->summ[k];
            if (m->ntoks < min_toks || (!rest && m->ntoks != ft->n) ||
                (check_first && m->first != f0->hash) || (check_last && m->last != fl->hash)) {
                k++;
                continue;
            }
            fs_centry *e = m->entry;
            /* A subject that cannot be re-tokenized (out of memory) is
             * evicted: dropping an entry is always safe.  Evicting moves
             * the last summary into slot k, which is examined next. */
            if (fs_tokenize(d, e->subject, e->len, 0, &st, &ignored) != FS_OK ||
                fs_tokens_match(d, filter, ft, e->subject, &st))
                evict(sh, e);
            else
                k++;
        }
        shard_unlock(sh);
    }
    fs_tokens_free(&st);
}

void fs_cache_stats_get(fs_cache *c, fs_cache_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->capacity = c->capacity;
    st->bytes = sizeof(fs_cache) + c->nshards * sizeof(fs_cache_shard);
    for (uint32_t i = 0; i < c->nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
        shard_lock(sh);
        st->entries += sh->count;
        st->hits += sh->hits;
        st->misses += sh->misses;
        st->bytes += sh->bytes + sizeof(fs_centry *) * sh->nbuckets;
        shard_unlock(sh);
    }
}
