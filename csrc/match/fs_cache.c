/* fs_cache.c - sharded CLOCK cache of match results (see fs_cache.h). */
#include "fs_cache.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_result.h"
#include "fs_sys.h"

/* What invalidation needs to rule an entry out without touching it: the
 * hashes of its first and last tokens and its token count, in one dense
 * array per shard.  The same array is the CLOCK ring the hand sweeps. */
typedef struct {
    uint32_t first, last, ntoks;
    fs_centry *entry;
} fs_summary;

struct fs_cache_shard {
    atomic_flag lock;                 /* fills, evictions, stats */
    _Atomic(fs_centry *) *buckets;    /* replaced only under the write lock */
    uint32_t nbuckets, max_nbuckets;  /* now; at most (capacity's power of two) */
    fs_summary *summ;                 /* summ_cap slots, count used */
    size_t count, capacity, hand;     /* capacity: the most entries */
    size_t summ_cap;
    fs_centry *retired;
    uint64_t bytes;                   /* live and retired entries */
    char pad[64];                     /* keep shards on separate cache lines */
};
typedef struct fs_cache_shard fs_cache_shard;

/* Hit and miss counts, one stripe per thread stripe (fs_sys.h): a call
 * flushes its tally into its own thread's line, never into one that
 * other threads write; stats sums them.  128 bytes: the two counters lie
 * in one line, never a neighbour's, whatever the allocation's alignment. */
typedef struct {
    _Atomic uint64_t hits, misses;
    char pad[128 - 2 * sizeof(uint64_t)];
} fs_tally_stripe;

struct fs_cache {
    uint32_t nshards;                 /* 1 << bits */
    /* 32 - bits: a 64-bit shift of the hash by it is its shard's index
     * (its top bits), 0 with one shard, without a test for that case (a
     * 32-bit shift by 32 is undefined). */
    uint32_t shard_shift;
    size_t capacity;
    char pad0[64];
    atomic_size_t nretired;
    /* fs_cache_should_reclaim's threshold of nretired: RECLAIM_AT(c), or 0
     * when a shard's buckets should grow (that needs the write lock too). */
    atomic_size_t reclaim_at;
    char pad1[64];
    fs_tally_stripe tally[FS_STRIPES];
    fs_cache_shard shards[];
};

static void shard_lock(fs_cache_shard *sh)
{
    unsigned spins = 0;
    while (atomic_flag_test_and_set_explicit(&sh->lock, memory_order_acquire))
        if (++spins % 64 == 0)
            fs_yield();
}

static void shard_unlock(fs_cache_shard *sh)
{
    atomic_flag_clear_explicit(&sh->lock, memory_order_release);
}

static uint32_t shard_index(const fs_cache *c, uint32_t hash)
{
    return (uint32_t)((uint64_t)hash >> c->shard_shift);
}

static fs_cache_shard *shard_of(fs_cache *c, uint32_t hash)
{
    return &c->shards[shard_index(c, hash)];
}

static _Atomic(fs_centry *) *bucket_of(const fs_cache *c, uint32_t hash)
{
    const fs_cache_shard *sh = &c->shards[shard_index(c, hash)];
    return &sh->buckets[hash & (sh->nbuckets - 1)];
}

/* A quarter of the capacity (plus slack for small caches) waiting: the
 * write lock is taken once per that many evicting fills. */
#define RECLAIM_AT(c) ((c)->capacity / 4 + 65)

/* A shard starts with this many buckets and no summaries, and doubles them
 * with use (buckets: to keep at most one entry per two; summaries: when
 * full), up to its capacity: a cache costs what it holds, not what it may
 * hold (a cache_size=4096 index of one subscription is ~13 KB, not 143). */
#define FIRST_BUCKETS 4u
#define FIRST_SUMMARIES 4u

static _Atomic(fs_centry *) *new_buckets(uint32_t nb)
{
    _Atomic(fs_centry *) *b = FS_MALLOC(sizeof(*b) * nb);
    if (b)
        for (uint32_t k = 0; k < nb; k++)
            atomic_init(&b[k], NULL);
    return b;
}

fs_cache *fs_cache_new(size_t capacity)
{
    /* Shards of at least 64 entries, at most 16 shards: small caches stay
     * one exact CLOCK, big ones spread fills over locks. */
    uint32_t bits = 0;
    while (bits < 4 && (capacity >> (bits + 1)) >= 64)
        bits++;
    uint32_t nshards = 1u << bits;
    size_t size = sizeof(fs_cache) + nshards * sizeof(fs_cache_shard);
    fs_cache *c = FS_MALLOC(size);
    if (!c)
        return NULL;
    memset(c, 0, size);
    c->nshards = nshards;
    c->shard_shift = 32 - bits;
    c->capacity = capacity;
    atomic_init(&c->reclaim_at, RECLAIM_AT(c));
    for (uint32_t i = 0; i < nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
        atomic_flag_clear(&sh->lock);
        sh->capacity = capacity / nshards + (i < capacity % nshards);
        uint32_t nb = 1;
        while (nb < sh->capacity && nb < (1u << 30))
            nb *= 2;
        sh->max_nbuckets = nb;
        sh->nbuckets = nb < FIRST_BUCKETS ? nb : FIRST_BUCKETS;
        /* (summ stays NULL until the first fill: summ_cap 0) */
        if (!(sh->buckets = new_buckets(sh->nbuckets))) {
            fs_cache_free(c);
            return NULL;
        }
    }
    return c;
}

static void free_retired(fs_cache *c, fs_cache_shard *sh)
{
    size_t n = 0;
    for (fs_centry *e = sh->retired, *nx; e; e = nx, n++) {
        nx = e->retired_next;
        sh->bytes -= e->bytes;
        FS_FREE(e);
    }
    sh->retired = NULL;
    atomic_fetch_sub_explicit(&c->nretired, n, memory_order_relaxed);
}

void fs_cache_free(fs_cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
        for (size_t k = 0; sh->summ && k < sh->count; k++)
            FS_FREE(sh->summ[k].entry);
        free_retired(c, sh);
        FS_FREE(sh->buckets);
        FS_FREE(sh->summ);
    }
    FS_FREE(c);
}

/* Take e out of its bucket chain and the ring (shard lock held).  A reader
 * standing on e still sees a valid e->hnext: e is not freed here. */
static void unlink_entry(fs_cache_shard *sh, fs_centry *e)
{
    _Atomic(fs_centry *) *pp = &sh->buckets[e->hash & (sh->nbuckets - 1)];
    fs_centry *cur;
    while ((cur = atomic_load_explicit(pp, memory_order_relaxed)) != e)
        pp = &cur->hnext;
    atomic_store_explicit(pp, atomic_load_explicit(&e->hnext, memory_order_relaxed),
                          memory_order_release);
    sh->count--;
    sh->summ[e->slot] = sh->summ[sh->count];      /* swap-remove its summary */
    sh->summ[e->slot].entry->slot = e->slot;
}

/* CLOCK: sweep from the hand, clearing reference bits, and evict the first
 * entry found clear.  The victim is retired, not freed: readers holding
 * the index's read lock may be on it. */
static void evict_one(fs_cache *c, fs_cache_shard *sh)
{
    for (;;) {
        if (sh->hand >= sh->count)
            sh->hand = 0;
        fs_centry *e = sh->summ[sh->hand].entry;
        if (atomic_load_explicit(&e->ref, memory_order_relaxed)) {
            atomic_store_explicit(&e->ref, 0, memory_order_relaxed);
            sh->hand++;
            continue;
        }
        unlink_entry(sh, e);
        sh->hand++;          /* past the entry moved into the victim's slot */
        e->retired_next = sh->retired;
        sh->retired = e;
        atomic_fetch_add_explicit(&c->nretired, 1, memory_order_relaxed);
        return;
    }
}

/* Inline: fs_cache_get_one's lookup is match()'s hot path, where a call
 * would cost its frame. */
static inline fs_centry *find(const fs_cache *c, const char *s, size_t len, uint32_t hash)
{
    return fs_cache_find_from(atomic_load_explicit(bucket_of(c, hash), memory_order_acquire), s, len, hash);
}

const fs_result *fs_cache_get_one(fs_cache *c, const char *s, size_t len, uint32_t *hash, unsigned stripe)
{
    uint32_t h = fs_cache_hash(s, len);
    *hash = h;
    fs_centry *e = find(c, s, len, h);
    if (!e)
        return NULL;
    atomic_fetch_add_explicit(&c->tally[stripe].hits, 1, memory_order_relaxed);
    return fs_cache_hit(e);
}

void fs_cache_buckets(const fs_cache *c, const uint32_t *hash, size_t n, const fs_cache_bucket **buckets)
{
    for (size_t k = 0; k < n; k++) {
        const fs_cache_bucket *b = bucket_of(c, hash[k]);
        const fs_centry *e = atomic_load_explicit(b, memory_order_acquire);
        buckets[k] = b;
        if (e) {
            /* A hit reads the header (two lines), then the subject and
             * the ids that follow it in the same allocation (a prefetch
             * past a small entry's end is harmless: prefetches never fault). */
            FS_PREFETCH(e);
            FS_PREFETCH((const char *)e + 64);
            FS_PREFETCH((const char *)e + 128);
        }
    }
}

void fs_cache_tally_flush(fs_cache *c, const fs_cache_tally *tally)
{
    fs_tally_stripe *t = &c->tally[fs_thread_stripe()];
    if (tally->hits)
        atomic_fetch_add_explicit(&t->hits, tally->hits, memory_order_relaxed);
    if (tally->misses)
        atomic_fetch_add_explicit(&t->misses, tally->misses, memory_order_relaxed);
}

#define ALIGN8(x) (((x) + 7u) & ~(size_t)7u)

void fs_cache_put(fs_cache *c, const char *s, size_t len, uint32_t hash,
                  const fs_tokens *t, const fs_result *r)
{
    /* The subject first, where a lookup reads it right after the header,
     * word-padded for comparisons; then the result's buffers. */
    if (len > UINT32_MAX)                  /* (its length would not fit the entry's) */
        return;
    size_t subj_off = offsetof(fs_centry, subject);
    size_t ids_off = ALIGN8(subj_off + FS_TOK_ALLOC(len));
    size_t groups_off = ids_off + sizeof(int64_t) * r->nids;
    size_t arena_off = groups_off + sizeof(fs_group_out) * r->ngroups;
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

    fs_cache_shard *sh = shard_of(c, hash);
    shard_lock(sh);
    if (find(c, s, len, hash)) {           /* another thread filled it first */
        shard_unlock(sh);
        FS_FREE(mem);
        return;
    }
    if (sh->count == sh->capacity) {
        evict_one(c, sh);
    } else if (sh->count == sh->summ_cap) {
        /* Room for more summaries, as many again (the ring keeps its order:
         * only the shard's lock and the write lock read it). */
        size_t cap = sh->summ_cap ? 2 * sh->summ_cap : FIRST_SUMMARIES;
        if (cap > sh->capacity)
            cap = sh->capacity;
        fs_summary *grown = FS_REALLOC(sh->summ, sizeof(fs_summary) * cap);
        if (!grown) {                       /* out of memory: left uncached */
            shard_unlock(sh);
            FS_FREE(mem);
            return;
        }
        sh->summ = grown;
        sh->summ_cap = cap;
    }
    /* A new entry starts referenced: it gets one lap of the hand, so a
     * working set that fits is never evicted while it is being filled. */
    atomic_init(&e->ref, 1);
    e->slot = (uint32_t)sh->count;
    /* (An AMQP key may have zero words: no first or last to summarise.) */
    sh->summ[sh->count] = t->n ? (fs_summary){t->tok[0].hash, t->tok[t->n - 1].hash, t->n, e}
                               : (fs_summary){0, 0, 0, e};
    sh->count++;
    sh->bytes += bytes;
    _Atomic(fs_centry *) *b = &sh->buckets[hash & (sh->nbuckets - 1)];
    atomic_store_explicit(&e->hnext, atomic_load_explicit(b, memory_order_relaxed), memory_order_relaxed);
    atomic_store_explicit(b, e, memory_order_release);     /* publish: e is complete */
    /* More than one entry per two buckets, and room to grow: readers walk
     * the buckets without a lock, so new ones are made under the write
     * lock, which fs_read_done takes when fs_cache_should_reclaim says. */
    if (sh->count > sh->nbuckets / 2 && sh->nbuckets < sh->max_nbuckets)
        atomic_store_explicit(&c->reclaim_at, 0, memory_order_relaxed);
    shard_unlock(sh);
}

int fs_cache_should_reclaim(fs_cache *c)
{
    return atomic_load_explicit(&c->nretired, memory_order_relaxed) >=
           atomic_load_explicit(&c->reclaim_at, memory_order_relaxed);
}

/* Enough buckets for the shard's entries (at most one per two), up to its
 * most; under the write lock (no reader walks the chains).  Out of memory
 * keeps the buckets it has: longer chains, the same answers. */
static void grow_buckets(fs_cache_shard *sh)
{
    uint32_t nb = sh->nbuckets;
    while (sh->count > nb / 2 && nb < sh->max_nbuckets)
        nb *= 2;
    if (nb == sh->nbuckets)
        return;
    _Atomic(fs_centry *) *b = new_buckets(nb);
    if (!b)
        return;
    for (size_t k = 0; k < sh->count; k++) {      /* every live entry is in the ring */
        fs_centry *e = sh->summ[k].entry;
        _Atomic(fs_centry *) *head = &b[e->hash & (nb - 1)];
        atomic_store_explicit(&e->hnext, atomic_load_explicit(head, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(head, e, memory_order_relaxed);
    }
    FS_FREE(sh->buckets);
    sh->buckets = b;
    sh->nbuckets = nb;
}

void fs_cache_reclaim(fs_cache *c)
{
    for (uint32_t i = 0; i < c->nshards; i++)
        free_retired(c, &c->shards[i]);
    if (atomic_load_explicit(&c->reclaim_at, memory_order_relaxed) == 0) {
        for (uint32_t i = 0; i < c->nshards; i++)
            grow_buckets(&c->shards[i]);
        atomic_store_explicit(&c->reclaim_at, RECLAIM_AT(c), memory_order_relaxed);
    }
}

void fs_cache_invalidate(fs_cache *c, fs_dialect d, const char *filter, size_t flen,
                         const fs_tokens *ft, int literal)
{
    /* Under the write lock: no reader is inside, so evicted entries are
     * freed at once, and the retired ones with them. */
    fs_cache_reclaim(c);
    if (literal) {
        uint32_t hash = fs_cache_hash(filter, flen);
        fs_cache_shard *sh = shard_of(c, hash);
        fs_centry *e = find(c, filter, flen, hash);
        if (e) {
            unlink_entry(sh, e);
            sh->bytes -= e->bytes;
            FS_FREE(e);
        }
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
    uint32_t min_toks = ft->n - nrest + nrest * fs_rules(d)->rest_min;   /* NATS '>' takes 1+ */
    int check_first = f0->kind == FS_TOK_LITERAL;
    int check_last = fl->kind == FS_TOK_LITERAL;
    fs_tokens st;
    fs_tokens_init(&st);
    fs_error ignored;
    for (uint32_t i = 0; i < c->nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
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
                fs_tokens_match(d, filter, ft, e->subject, &st)) {
                unlink_entry(sh, e);
                sh->bytes -= e->bytes;
                FS_FREE(e);
            } else {
                k++;
            }
        }
    }
    fs_tokens_free(&st);
}

void fs_cache_stats_get(fs_cache *c, fs_cache_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->capacity = c->capacity;
    st->bytes = sizeof(fs_cache) + c->nshards * sizeof(fs_cache_shard);
    for (unsigned i = 0, used = fs_stripes_used(); i < used; i++) {
        st->hits += atomic_load_explicit(&c->tally[i].hits, memory_order_relaxed);
        st->misses += atomic_load_explicit(&c->tally[i].misses, memory_order_relaxed);
    }
    for (uint32_t i = 0; i < c->nshards; i++) {
        fs_cache_shard *sh = &c->shards[i];
        shard_lock(sh);
        st->entries += sh->count;
        st->bytes += sh->bytes + sizeof(*sh->buckets) * sh->nbuckets
                   + sizeof(fs_summary) * sh->summ_cap;
        shard_unlock(sh);
    }
}
