/* fs_result.c - turning matched nodes into results: the ids, the queue
 * groups (NATS and AMQP merge them by name across nodes, MQTT keeps (name,
 * filter) pairs), their filters' text and the keys queue picks hash; the
 * one order of a row's ids (fs_result.h: plain ids ascending, then groups
 * by (name, filter) with members ascending), which the batch's direct
 * emit (fs_batch.c) takes from here too; the order of reverse matches.
 * AMQP delivers once per sub_id: its results are deduplicated here. */
#include <stddef.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_groups.h"
#include "fs_index.h"
#include "fs_pairs.h"
#include "fs_result.h"

void fs_result_init(fs_result *r) { memset(r, 0, sizeof(*r)); }

void fs_result_pick_for_subject(fs_result *r, uint32_t subject_hash)
{
    for (size_t gi = 0; gi < r->ngroups; gi++) {
        fs_group_out *g = &r->groups[gi];
        g->subject_pick = fs_pick(fs_pick_seed(subject_hash, g->key_hash), r->ids + g->members_off,
                                  g->members_len);
    }
}

void fs_result_free(fs_result *r)
{
    FS_FREE(r->ids);
    FS_FREE(r->groups);
    FS_FREE(r->arena);
    fs_result_init(r);
}

int fs_arena_put(char **arena, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (n == 0)
        return FS_OK;
    if (fs_grow(arena, cap, *len + n, 1) < 0)
        return FS_ENOMEM;
    memcpy(*arena + *len, p, n);
    *len += n;
    return FS_OK;
}

/* Write the filter of node n (its path from the root) into an arena. */
int fs_put_path(const fs_sublist *sl, const fs_node *n, char **arena, size_t *len, size_t *cap)
{
    size_t total = fs_path_bytes(sl, n);
    if (total == 0)
        return FS_OK;
    if (fs_grow(arena, cap, *len + total, 1) < 0)
        return FS_ENOMEM;
    fs_path_write(sl, n, *arena + *len, *arena + *len + total);
    *len += total;
    return FS_OK;
}

/* ------------------------------------------------------- the order */

void fs_ids_sort(int64_t *ids, size_t n)
{
    if (n < 2)
        return;
    /* heapsort: build a max-heap, then move its top to the end */
    for (size_t start = n / 2; start-- > 0;) {
        size_t root = start;
        for (size_t child; (child = 2 * root + 1) < n; root = child) {
            if (child + 1 < n && ids[child] < ids[child + 1])
                child++;
            if (ids[root] >= ids[child])
                break;
            int64_t t = ids[root]; ids[root] = ids[child]; ids[child] = t;
        }
    }
    for (size_t end = n - 1; end > 0; end--) {
        int64_t t = ids[0]; ids[0] = ids[end]; ids[end] = t;
        size_t root = 0;
        for (size_t child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && ids[child] < ids[child + 1])
                child++;
            if (ids[root] >= ids[child])
                break;
            t = ids[root]; ids[root] = ids[child]; ids[child] = t;
        }
    }
}

/* Heapsort of n items of size bytes (at most 64) by cmp: for the rare long
 * lists of groups, and reverse matches.  No memory. */
typedef int (*cmp_fn)(const void *a, const void *b, const void *ctx);

static void sift_down(char *base, size_t root, size_t end, size_t size, cmp_fn cmp, const void *ctx)
{
    char t[64];
    for (size_t child; (child = 2 * root + 1) < end; root = child) {
        if (child + 1 < end && cmp(base + child * size, base + (child + 1) * size, ctx) < 0)
            child++;
        if (cmp(base + root * size, base + child * size, ctx) >= 0)
            break;
        memcpy(t, base + root * size, size);
        memcpy(base + root * size, base + child * size, size);
        memcpy(base + child * size, t, size);
    }
}

static void sort_items(void *items, size_t n, size_t size, cmp_fn cmp, const void *ctx)
{
    char *base = items, t[64];
    assert(size <= sizeof(t));
    if (n < 2)
        return;
    for (size_t start = n / 2; start-- > 0;)
        sift_down(base, start, n, size, cmp, ctx);
    for (size_t end = n - 1; end > 0; end--) {
        memcpy(t, base, size);
        memcpy(base, base + end * size, size);
        memcpy(base + end * size, t, size);
        sift_down(base, 0, end, size, cmp, ctx);
    }
}

/* An arena's bytes at off (NULL when there are none: the arena may be). */
static const char *arena_at(const char *arena, size_t off, size_t len) { return len ? arena + off : NULL; }

static int bytes_cmp(const char *a, size_t na, const char *b, size_t nb)
{
    size_t k = na < nb ? na : nb;
    int c = k ? memcmp(a, b, k) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    return na < nb ? -1 : na > nb;
}

/* A node's filter read front to back, a token or a separator at a time,
 * without writing it out: a table entry is one token (its whole filter),
 * a trie node's tokens are its path's from the root.  Paths up to
 * READER_DEPTH deep are held; deeper ones are climbed again per token. */
#define READER_DEPTH 32

typedef struct {
    const fs_sublist *sl;
    const fs_node *n;
    const fs_node *path[READER_DEPTH];
    uint32_t depth, next;     /* tokens; the next chunk: 2i token i, 2i+1 the separator after it */
    char sep;
    const char *p;            /* the current chunk's bytes not yet compared */
    size_t left;
} filter_reader;

static void reader_init(filter_reader *f, const fs_sublist *sl, const fs_node *n)
{
    f->sl = sl;
    f->n = n;
    f->sep = fs_sep(sl->dialect);
    f->next = 0;
    f->left = 0;
    f->depth = 0;
    if (!fs_is_trie(sl, n)) {
        f->depth = 1;
        f->path[0] = n;
        return;
    }
    f->depth = fs_path_depth(sl, n);     /* 0 for a damaged image's path */
    if (f->depth <= READER_DEPTH) {
        uint32_t i = f->depth;
        /* NULL where a mapped image's path is shorter now (read as empty) */
        for (const fs_node *x = n; i; x = x ? fs_up(sl, x) : NULL)
            f->path[--i] = x;
    }
}

static const fs_node *reader_token(const filter_reader *f, uint32_t i)
{
    if (f->depth <= READER_DEPTH)
        return f->path[i];
    const fs_node *x = f->n;
    for (uint32_t up = f->depth - 1 - i; up && x; up--)
        x = fs_up(f->sl, x);
    return x;
}

/* The next non-empty chunk into p, left: 1; 0 at the end. */
static int reader_next(filter_reader *f)
{
    while (f->next + 1 < 2 * f->depth) {
        uint32_t c = f->next++;
        if (c & 1) {
            f->p = &f->sep;
            f->left = 1;
            return 1;
        }
        const fs_node *t = reader_token(f, c / 2);
        uint32_t len = t ? fs_toklen_of(f->sl, t) : 0;     /* once: it bounds the reads */
        if (len) {
            f->p = t->tok;
            f->left = len;
            return 1;
        }
    }
    return 0;
}

/* Compare the filters of nodes a and b as bytes (<0, 0, >0). */
static int filter_cmp(const fs_sublist *sl, const fs_node *a, const fs_node *b)
{
    filter_reader x, y;
    reader_init(&x, sl, a);
    reader_init(&y, sl, b);
    int hx = reader_next(&x), hy = reader_next(&y);
    for (;;) {
        if (!hx || !hy)
            return hx - hy;          /* a prefix comes first */
        size_t k = x.left < y.left ? x.left : y.left;
        int c = memcmp(x.p, y.p, k);
        if (c)
            return c < 0 ? -1 : 1;
        x.p += k;
        x.left -= k;
        y.p += k;
        y.left -= k;
        if (!x.left)
            hx = reader_next(&x);
        if (!y.left)
            hy = reader_next(&y);
    }
}

typedef struct {
    const fs_sublist *sl;
    const fs_node *const *hits;
} gref_ctx;

/* mapped: fs_img_mapped(ctx->sl), a constant in each copy (gref_cmp_built,
 * gref_cmp_mapped). */
FS_ALWAYS_INLINE int gref_cmp_if(const void *pa, const void *pb, const gref_ctx *ctx, int mapped)
{
    const fs_gref *a = pa, *b = pb;
    const fs_group *ga = fs_group_of_if(ctx->sl, mapped, ctx->hits[a->hit], a->group);
    const fs_group *gb = fs_group_of_if(ctx->sl, mapped, ctx->hits[b->hit], b->group);
    /* The groups' order: name bytes, then (MQTT, where a group is (name,
     * filter)) filter bytes.  0: the same group -- NATS and AMQP merge
     * same-named groups across filters. */
    int c = fs_group_name_cmp_if(ctx->sl, mapped, ga, gb);
    if (c || fs_groups_merge(ctx->sl->dialect))
        return c;
    return filter_cmp(ctx->sl, ctx->hits[a->hit], ctx->hits[b->hit]);
}
static int gref_cmp_built(const void *pa, const void *pb, const void *pctx)
{
    return gref_cmp_if(pa, pb, pctx, 0);
}
static int gref_cmp_mapped(const void *pa, const void *pb, const void *pctx)
{
    return gref_cmp_if(pa, pb, pctx, 1);
}

/* Mark each of refs[0..n) (in order) that is the same group as the one
 * before it: a name equal to its name (the groups of NATS and AMQP, which
 * merge by name).  Once per row, here, where fs_row_group_end's readers
 * would compare each group with the next again. */
FS_ALWAYS_INLINE void mark_parts_if(const fs_sublist *sl, int mapped, const fs_node *const *hits, fs_gref *refs,
                                    size_t n)
{
    const char *prev = NULL;
    uint32_t nprev = 0;
    for (size_t i = 0; i < n; i++) {
        const fs_group *g = fs_group_of_if(sl, mapped, hits[refs[i].hit], refs[i].group);
        const char *name;
        uint32_t len = fs_gname_of_if(sl, mapped, g, &name);
        uint32_t same = i > 0 && len == nprev;
        for (uint32_t c = 0; same && c < len; c++)         /* names are short: no call */
            same = name[c] == prev[c];
        refs[i].part = same;
        prev = name;
        nprev = len;
    }
}

/* The refs of a row where two nodes, hits[first] and hits[second], hold
 * groups, in a dialect that merges same-named groups: their merge by name
 * (fs_group_pair), a name both hold two refs side by side, the second
 * marked a part.  Returns how many refs: at most total, the caller's
 * count (a mapped image that changed since is cut to it, and marked, as
 * row_groups_if's loop does). */
FS_ALWAYS_INLINE size_t two_node_refs_if(const fs_sublist *sl, int mapped, const fs_node *const *hits,
                                         size_t first, size_t second, size_t total, fs_gref *refs)
{
    size_t n = 0;
    fs_group_pair pr = fs_group_pair_start(sl, mapped, hits[first], hits[second]);
    if (mapped && (size_t)pr.na + pr.nb > total) {
        fs_img_bad(sl);
        pr.na = pr.na < total ? pr.na : (uint32_t)total;
        pr.nb = pr.nb < total - pr.na ? pr.nb : (uint32_t)(total - pr.na);
    }
    while (fs_group_pair_next(sl, mapped, &pr)) {
        if (pr.ga)
            refs[n++] = (fs_gref){.hit = (uint32_t)first, .group = pr.ia, .part = 0};
        if (pr.gb)
            refs[n++] = (fs_gref){.hit = (uint32_t)second, .group = pr.ib, .part = (uint32_t)(pr.ga != NULL)};
    }
    return n;
}

FS_ALWAYS_INLINE int row_groups_if(const fs_sublist *sl, int mapped, fs_scratch *sc, size_t *nrefs)
{
    const fs_node *const *hits = sc->hits;
    size_t total = 0, n = 0, grouped = 0, first = 0, second = 0;
    for (size_t k = 0; k < sc->nhits; k++) {
        uint32_t ng = fs_ngroups_of_if(sl, mapped, hits[k]);
        total += ng;
        if (ng) {
            second = grouped == 1 ? k : second;
            first = grouped++ ? first : k;
        }
    }
    *nrefs = total;
    sc->grefs_merge = 0;
    if (total == 0)
        return FS_OK;
    if (total > sc->cap_grefs && fs_grow(&sc->grefs, &sc->cap_grefs, total, sizeof(fs_gref)) < 0)
        return FS_ENOMEM;
    fs_gref *refs = sc->grefs;
    if (grouped == 2 && fs_groups_merge(sl->dialect)) {
        /* the order of two nodes' groups is their merge, written once */
        sc->grefs_merge = 1;
        *nrefs = two_node_refs_if(sl, mapped, hits, first, second, total, refs);
        return FS_OK;
    }
    gref_ctx ctx = {sl, hits};
    unsigned runs = 0;
    for (size_t k = 0; k < sc->nhits; k++) {
        uint32_t ng = fs_ngroups_of_if(sl, mapped, hits[k]);
        if (mapped && ng > total - n) {      /* a mapped image changed since the count */
            fs_img_bad(sl);
            ng = (uint32_t)(total - n);
        }
        if (!ng)
            continue;
        /* A node's groups are in name order already (fs_node.c): a row
         * with one node holding groups needs no comparison. */
        size_t start = n;
        for (uint32_t gi = 0; gi < ng; gi++, n++) {
            refs[n].hit = (uint32_t)k;
            refs[n].group = gi;
            refs[n].part = 0;
        }
        if (runs++ == 0 || total > 32)
            continue;
        for (size_t i = start; i < n; i++) {         /* a few: insertion */
            fs_gref x = refs[i];
            size_t j = i;
            for (; j > 0 && gref_cmp_if(&refs[j - 1], &x, &ctx, mapped) > 0; j--)
                refs[j] = refs[j - 1];
            refs[j] = x;
        }
    }
    *nrefs = total = n;              /* fewer when a mapped image changed */
    if (runs > 1 && total > 32)
        sort_items(refs, total, sizeof(fs_gref), mapped ? gref_cmp_mapped : gref_cmp_built, &ctx);
    /* A node's groups have distinct names: only groups of two nodes can
     * be parts of one (NATS, AMQP). */
    sc->grefs_merge = runs > 1 && fs_groups_merge(sl->dialect);
    if (sc->grefs_merge)
        mark_parts_if(sl, mapped, hits, refs, total);
    return FS_OK;
}

int fs_row_groups(const fs_sublist *sl, fs_scratch *sc, size_t *nrefs)
{
    return fs_img_mapped(sl) ? row_groups_if(sl, 1, sc, nrefs) : row_groups_if(sl, 0, sc, nrefs);
}


/* ---- a row's plain ids from several nodes: the biggest node's run b,
 * and the others' ids s (sorted, merged on the stack where there are
 * several), put between b's stretches (merge_gaps): b is most of a row
 * (heavy: ~68 of ~76 ids), so the work is in copying its stretches eight
 * at a time, one comparison for eight ids, and in finding where each id
 * of s goes among the next eight.  Safe on runs out of order (a mapped
 * image opened with verify=False): every step takes a prefix of what is
 * left of b, within what is left, so each id of b and s is written once,
 * in its run's order, and nothing is read or written outside either run
 * or out.  Runs out of order give out out of order: the caller checks. */

/* n >= 1 ids of b copied to out: four at a time, the last four (or two)
 * written where they end, over ids this copy wrote already -- the same
 * ids -- so that a tail of up to seven costs two stores, not a loop. */
FS_ALWAYS_INLINE void copy_tail(int64_t *out, const int64_t *b, size_t n)
{
    if (n >= 4) {
        for (size_t k = 0; k + 4 < n; k += 4)
            memcpy(out + k, b + k, 4 * sizeof(int64_t));
        memcpy(out + n - 4, b + n - 4, 4 * sizeof(int64_t));
    } else if (n >= 2) {
        memcpy(out, b, 2 * sizeof(int64_t));
        memcpy(out + n - 2, b + n - 2, 2 * sizeof(int64_t));
    } else {
        out[0] = b[0];
    }
}

/* The end of a merge_gaps: s[j..ns) between b[i..nb) where fewer than
 * eight of b are left (a store per id of b), then what is left of b. */
FS_ALWAYS_INLINE void gaps_tail(int64_t *out, const int64_t *b, size_t i, size_t nb, const int64_t *s, size_t j,
                                size_t ns)
{
    for (; j < ns; j++) {
        int64_t x = s[j];
        while (i < nb && b[i] <= x)
            *out++ = b[i++];
        *out++ = x;
    }
    if (i < nb)
        copy_tail(out, b + i, nb - i);
}

/* Merge the sorted s[0..ns) into the sorted b[0..nb) at out[0..nb + ns),
 * scalar: while b[i + 7] is below s's next id x, the eight are copied;
 * else the eight are copied anyway, how many of them are below x found by
 * a search of three steps without branches (the ones not taken are written
 * again after: x is written over the first), and x put after them.  The
 * eight written: at least eight of b and one of s are still to come.  The
 * count is at most seven on any bytes (b[i + 7] >= x). */
FS_ALWAYS_INLINE void merge_gaps(int64_t *out, const int64_t *b, size_t nb, const int64_t *s, size_t ns)
{
    size_t i = 0, j = 0;
    if (nb >= 8) {
        size_t lim = nb - 7;                 /* i < lim: b[i..i + 8) are there */
        for (; j < ns; j++) {
            int64_t x = s[j];
            while (b[i + 7] < x) {
                memcpy(out, b + i, 8 * sizeof(int64_t));
                out += 8;
                i += 8;
                if (i >= lim)
                    goto tail;
            }
            size_t c = (size_t)(b[i + 3] < x) * 4;
            c += (size_t)(b[i + c + 1] < x) * 2;
            c += (size_t)(b[i + c] < x);
            memcpy(out, b + i, 8 * sizeof(int64_t));
            out[c] = x;
            out += c + 1;
            i += c;
            if (i >= lim) {
                j++;
                goto tail;
            }
        }
    }
tail:
    gaps_tail(out, b, i, nb, s, j, ns);
}

/* merge_gaps with AVX2, where the compiler can build it (GCC, clang) and
 * the processor has it (merge_ask_cpu, once; merge_gaps_best tests it):
 * the same steps, the eight of b moved as two 32-byte registers, and how
 * many of them are below x counted by one compare of the eight against it
 * (the two masks packed into one, their bits counted: the same count as
 * the search's on sorted runs, and at most seven on any, b[i + 7] being
 * >= x).  Each id of s costs ~22 instructions, not ~34 (scalar).  Ids equal
 * to x go before or after it alike: equal ids are the same value. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

__attribute__((target("avx2,popcnt"))) static void merge_gaps_avx2(int64_t *out, const int64_t *b, size_t nb,
                                                                   const int64_t *s, size_t ns)
{
    size_t i = 0, j = 0;
    if (nb >= 8) {
        size_t lim = nb - 7;                 /* i < lim: b[i..i + 8) are there */
        for (; j < ns; j++) {
            int64_t x = s[j];
            while (b[i + 7] < x) {
                __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)(b + i));
                __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(b + i + 4));
                _mm256_storeu_si256((__m256i *)(void *)out, lo);
                _mm256_storeu_si256((__m256i *)(void *)(out + 4), hi);
                out += 8;
                i += 8;
                if (i >= lim)
                    goto tail;
            }
            __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)(b + i));
            __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(b + i + 4));
            __m256i v = _mm256_set1_epi64x(x);
            __m256i below = _mm256_packs_epi32(_mm256_cmpgt_epi64(v, lo), _mm256_cmpgt_epi64(v, hi));
            size_t c = (size_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(below)));
            _mm256_storeu_si256((__m256i *)(void *)out, lo);
            _mm256_storeu_si256((__m256i *)(void *)(out + 4), hi);
            out[c] = x;
            out += c + 1;
            i += c;
            if (i >= lim) {
                j++;
                goto tail;
            }
        }
    }
tail:
    gaps_tail(out, b, i, nb, s, j, ns);
}

#define FS_MERGE_AVX2 1

/* Whether the processor has AVX2 and POPCNT, asked once when the library
 * is loaded: two __builtin_cpu_supports per merged row were a load and a
 * test each, on every heavy row.  A constructor may run before libgcc's
 * own, hence __builtin_cpu_init first. */
static int merge_cpu_avx2;

__attribute__((constructor)) static void merge_ask_cpu(void)
{
    __builtin_cpu_init();
    merge_cpu_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
}
#endif

int fs_merge_simd = 1;

/* merge_gaps, or merge_gaps_avx2 where the processor has AVX2 (and a test
 * has not asked for the scalar form, fs_merge_simd). */
FS_ALWAYS_INLINE void merge_gaps_best(int64_t *out, const int64_t *b, size_t nb, const int64_t *s, size_t ns)
{
#ifdef FS_MERGE_AVX2
    if (fs_merge_simd & merge_cpu_avx2) {
        merge_gaps_avx2(out, b, nb, s, ns);
        return;
    }
#endif
    merge_gaps(out, b, nb, s, ns);
}

/* Whether ids[0..n) ascend (equal ids side by side are in order). */
static int ids_ascend(const int64_t *ids, size_t n)
{
    size_t down = 0;
    for (size_t i = 1; i < n; i++)
        down |= (size_t)(ids[i] < ids[i - 1]);
    return !down;
}

/* The other runs' ids gathered on the stack up to this many (2 KiB); past
 * it (rare), every run is merged in turn in place (fs_runs). */
#define FEW_SMALL 256

/* The runs of a row other than its biggest, hits[big]: the biggest of
 * them (sec, at hits[second]), another (one: the only other where there
 * are two) and how many hold ids, read in one pass; a mapped image's
 * runs cut to the room ns left for them all. */
typedef struct {
    const int64_t *sec, *one;
    size_t nsec, none, second, seen;
} other_runs;

FS_ALWAYS_INLINE other_runs others_if(const fs_sublist *sl, int mapped, const fs_node *const *hits, size_t nhits,
                                      size_t big, size_t ns)
{
    other_runs o = {NULL, NULL, 0, 0, big, 0};
    size_t left = ns;
    for (size_t k = 0; k < nhits; k++) {
        const int64_t *run;
        size_t m = k != big ? fs_subs_of_if(sl, mapped, hits[k], &run) : 0;
        if (mapped) {
            m = m < left ? m : left;
            left -= m;
        }
        if (!m)
            continue;
        o.seen++;
        if (m > o.nsec) {
            o.one = o.sec;
            o.none = o.nsec;
            o.sec = run;
            o.nsec = m;
            o.second = k;
        } else {
            o.one = run;
            o.none = m;
        }
    }
    return o;
}

/* The ids of the hits other than hits[big] and hits[o->second], merged
 * into few (room: left ids; fs_runs: merged in turn).  Returns how many. */
FS_ALWAYS_INLINE size_t rest_merged_if(const fs_sublist *sl, int mapped, const fs_node *const *hits, size_t nhits,
                                       size_t big, const other_runs *o, size_t left, int64_t *few)
{
    fs_runs r = {0, 0};
    for (size_t k = 0; k < nhits; k++)
        if (k != big && k != o->second) {
            const int64_t *run;
            size_t m = fs_subs_of_if(sl, mapped, hits[k], &run);
            fs_runs_add(&r, few, run, !mapped || m < left - r.n ? m : left - r.n);
        }
    fs_runs_end(&r, few);
    return r.n;
}

/* The runs other than the two biggest, as one run for merge_gaps: o->one
 * where it is the only one (seen == 2), else all of them merged into few
 * (room for FEW_SMALL).  Returns its count; *rest: where it is. */
FS_ALWAYS_INLINE size_t rest_of_if(const fs_sublist *sl, int mapped, const fs_node *const *hits, size_t nhits,
                                   size_t big, const other_runs *o, size_t ns, int64_t *few, const int64_t **rest)
{
    if (o->seen <= 2) {
        *rest = o->one;
        return o->none;
    }
    *rest = few;
    return rest_merged_if(sl, mapped, hits, nhits, big, o, ns - o->nsec, few);
}

/* A second biggest run of this many ids or more is merged with the
 * biggest once per thread and kept (fs_pairs.h): heavy's 1,213 rows of such
 * runs (of 2,551 merged rows in 3,000) hit 51 distinct pairs of nodes;
 * fewer than four ids hit many more pairs, for little each (heavy's
 * match_many: 8 -> 4 and 32 -> 64 slots, 2,334.4 -> 2,330.1 a row). */
#define PAIR_MIN 4

/* The row of a built index's hits whose biggest run b and second biggest
 * o->sec (at least PAIR_MIN ids) are merged in this thread's pair cache:
 * their merge copied from there (merged into it first where it is new),
 * the rest (room: ns ids in all) merged between its stretches.  Returns
 * how many ids, or 0 where the cache has no room (the caller merges). */
FS_ALWAYS_INLINE size_t merge_cached_pair(const fs_sublist *sl, const fs_node *const *hits, size_t nhits, size_t big,
                                          const int64_t *b, size_t nb, const other_runs *o, size_t ns, int64_t *ids)
{
    /* Both runs hold PAIR_MIN ids at least (the caller's test on the
     * second; the biggest holds no fewer), so b[0] and o->sec[0] exist. */
    uint64_t place = ((uint64_t)b[0] * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t)o->sec[0] ^ ((uint64_t)nb << 40) ^
                     ((uint64_t)o->nsec << 20);
    fs_pair_key key = {sl, sl->generation, hits[big], hits[o->second], nb, o->nsec, place};
    int fresh;
    int64_t *pair = fs_pairs_find(&key, &fresh);
    size_t npair = nb + o->nsec;
    if (!pair)
        return 0;
    if (fresh)
        merge_gaps_best(pair, b, nb, o->sec, o->nsec);
    if (o->seen == 1) {
        memcpy(ids, pair, sizeof(int64_t) * npair);
        return npair;
    }
    int64_t few[FEW_SMALL];
    const int64_t *rest;
    size_t nrest = rest_of_if(sl, 0, hits, nhits, big, o, ns, few, &rest);
    merge_gaps_best(ids, pair, npair, rest, nrest);
    return npair + nrest;
}

/* The rows of two nodes or more (fs_hits_plain takes one node inline):
 * the biggest node's ids stay whole and the others' go between its
 * stretches (merge_gaps), read where they are when one other node holds
 * them; else the second biggest run and the rest's merge (read in place
 * where it is one run; merged on the stack where there are more) are
 * merged on the stack first, by merge_gaps too (a second run of fewer
 * than eight takes its scalar end: heavy 2,459.6 -> 2,457.9 a row against a
 * copy and fs_ids_merge), and that merge goes between the biggest's
 * stretches.  Written
 * for sorted runs, and safe on any: a mapped image opened with
 * verify=False may hold a node's ids out of order, and nothing checks them
 * before this (a check where a node is reached would read all its ids on
 * every match).  So every read and write here is bounded by the counts
 * alone, each id is put in the row once (fs_runs_add's merge of any two
 * runs holds both's values, and so does merge_gaps), and a mapped image's
 * row is checked: merges keep each run's order, so a run out of order
 * leaves the row out of order, and the image is marked damaged (the call
 * then fails).  Only past FEW_SMALL, where more than FS_MERGE_RUNS runs
 * are sorted whole, no check meets it: the row is sorted, verify=False's
 * wrong answer. */
FS_ALWAYS_INLINE size_t merge_tallied_if(const fs_sublist *sl, int mapped, const fs_node *const *hits, size_t nhits,
                                         const fs_hits_tally *t, int64_t *ids)
{
    /* A mapped image's counts are read again below, and its file may have
     * been rewritten in place since t counted them (fs_once8 in
     * fs_layout.h): each run is cut to what t counted, and the whole to
     * t->total, the room, so that no write leaves ids, few or two.  A
     * built index's (mapped 0) cannot change under the read lock: its
     * counts are t's, read again as they are. */
    size_t big = t->big, total = t->total;
    uint32_t nbig = t->nbig;
    const int64_t *b;
    size_t nb = fs_subs_of_if(sl, mapped, hits[big], &b), ns = total - nbig;
    if (mapped && nb > nbig)
        nb = nbig;
    if (t->runs == 1) {              /* one node holds ids: they are in order */
        memcpy(ids, b, sizeof(int64_t) * nb);
        return nb;
    }
    other_runs o = others_if(sl, mapped, hits, nhits, big, ns);
    const int64_t *s = o.sec;
    size_t got = o.nsec;
    int64_t few[FEW_SMALL], two[FEW_SMALL];
    if (o.seen > 1 && ns > FEW_SMALL) {          /* rare: every run merged in place */
        fs_runs r = {0, 0};
        for (size_t k = 0; k < nhits; k++) {
            const int64_t *run;
            size_t m = fs_subs_of_if(sl, mapped, hits[k], &run);
            fs_runs_add(&r, ids, run, !mapped || m < total - r.n ? m : total - r.n);
        }
        fs_runs_end(&r, ids);
        return r.n;
    }
    if (!mapped && o.nsec >= PAIR_MIN) {         /* the two biggest merged before? */
        size_t n = merge_cached_pair(sl, hits, nhits, big, b, nb, &o, ns, ids);
        if (n)
            return n;
    }
    if (o.seen > 1) {
        const int64_t *rest;
        size_t nrest = rest_of_if(sl, mapped, hits, nhits, big, &o, ns, few, &rest);
        merge_gaps_best(two, o.sec, o.nsec, rest, nrest);
        s = two;
        got = o.nsec + nrest;
    }
    if (mapped && (got != ns || nb != nbig)) {   /* changed under the call: what is there */
        fs_img_bad(sl);
        ns = got;
        total = nb + ns;
    }
    merge_gaps_best(ids, b, nb, s, ns);
    if (mapped && !ids_ascend(ids, total))
        fs_img_bad(sl);
    return total;
}

/* fs_hits_merge, for mapped = fs_img_mapped(sl): the counts of this
 * pass, cut to room. */
FS_ALWAYS_INLINE size_t hits_merge_if(const fs_sublist *sl, int mapped, const fs_node *const *hits, size_t nhits,
                                      int64_t *ids, size_t room)
{
    fs_hits_tally t = {0, 0, 0, 0};
    for (size_t k = 0; k < nhits; k++)
        fs_hits_tally_add(&t, k, fs_nsubs_of_if(sl, mapped, hits[k]));
    if (t.runs == 0)
        return 0;
    if (mapped && t.total > room) {      /* grown since the caller counted */
        fs_img_bad(sl);
        return 0;
    }
    return merge_tallied_if(sl, mapped, hits, nhits, &t, ids);
}

size_t fs_hits_merge(const fs_sublist *sl, const fs_node *const *hits, size_t nhits, int64_t *ids, size_t room)
{
    return fs_img_mapped(sl) ? hits_merge_if(sl, 1, hits, nhits, ids, room)
                             : hits_merge_if(sl, 0, hits, nhits, ids, room);
}

size_t fs_hits_merge_tallied(const fs_sublist *sl, const fs_node *const *hits, size_t nhits, const fs_hits_tally *t,
                             int64_t *ids)
{
    return fs_img_mapped(sl) ? merge_tallied_if(sl, 1, hits, nhits, t, ids)
                             : merge_tallied_if(sl, 0, hits, nhits, t, ids);
}

uint32_t fs_group_key(const fs_sublist *sl, const fs_node *n, const fs_group *g)
{
    uint64_t h = g->name_hash;
    if (!fs_groups_merge(sl->dialect)) {
        /* The group is (name, filter): fold in the filter's token hashes,
         * last to first -- the same whether the filter lives in the trie
         * (one token per node) or in a table entry (the whole filter). */
        if (fs_is_trie(sl, n)) {
            for (uint32_t d = fs_path_depth(sl, n), i = 0; i < d && n; i++, n = fs_up(sl, n))
                h = (h ^ n->hash) * 0x9E3779B97F4A7C15ull;
        } else {
            const char *f = n->tok;
            size_t end = fs_toklen_of(sl, n);
            for (;;) {
                size_t start = end;
                while (start > 0 && f[start - 1] != '/')
                    start--;
                h = (h ^ fs_hash(f + start, end - start)) * 0x9E3779B97F4A7C15ull;
                if (start == 0)
                    break;
                end = start - 1;
            }
        }
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* Keep the first occurrence of each id by pairwise comparison. */
static size_t dedupe_pairwise(int64_t *ids, size_t n)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < kept && ids[j] != ids[i])
            j++;
        if (j == kept)
            ids[kept++] = ids[i];
    }
    return kept;
}

int fs_ids_dedupe(int64_t *ids, size_t *n, int64_t **set, size_t *cap_set)
{
    size_t len = *n;
    if (len <= 48) {
        *n = dedupe_pairwise(ids, len);
        return FS_OK;
    }
    size_t cap = 64;
    while (cap < 2 * len)
        cap *= 2;
    if (fs_grow(set, cap_set, 2 * cap, sizeof(int64_t)) < 0)
        return FS_ENOMEM;
    int64_t *slots = *set;
    memset(slots, 0, sizeof(int64_t) * 2 * cap);
    size_t kept = 0;
    for (size_t i = 0; i < len; i++) {
        size_t h = (size_t)(((uint64_t)ids[i] * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
        for (;; h = (h + 1) & (cap - 1)) {
            if (!slots[2 * h]) {
                slots[2 * h] = 1;
                slots[2 * h + 1] = ids[i];
                ids[kept++] = ids[i];
                break;
            }
            if (slots[2 * h + 1] == ids[i])
                break;
        }
    }
    *n = kept;
    return FS_OK;
}

/* Each sub_id once among the plain ids and once in each group (the first
 * occurrence kept, in the row's order): AMQP's every row, and match()'s
 * with dedupe.  The hash set is sized for the longest run up front: FS_OK
 * or FS_ENOMEM (r is then left as built, and the caller fails the whole
 * call). */
int fs_result_dedupe(fs_result *r)
{
    int64_t *set = NULL;
    size_t cap_set = 0, longest = r->nplain;
    for (size_t gi = 0; gi < r->ngroups; gi++)
        if (r->groups[gi].members_len > longest)
            longest = r->groups[gi].members_len;
    if (longest > 48) {
        size_t cap = 64;
        while (cap < 2 * longest)
            cap *= 2;
        if (fs_grow(&set, &cap_set, 2 * cap, sizeof(int64_t)) < 0)
            return FS_ENOMEM;
    }
    size_t nplain = r->nplain;
    fs_ids_dedupe(r->ids, &nplain, &set, &cap_set);        /* cannot fail: the set has room */
    size_t at = nplain;
    for (size_t gi = 0; gi < r->ngroups; gi++) {
        fs_group_out *o = &r->groups[gi];
        size_t m = o->members_len;
        fs_ids_dedupe(r->ids + o->members_off, &m, &set, &cap_set);
        memmove(r->ids + at, r->ids + o->members_off, sizeof(int64_t) * m);
        o->members_off = at;
        o->members_len = m;
        at += m;
    }
    r->nplain = nplain;
    r->nids = at;
    FS_FREE(set);
    return FS_OK;
}

/* Does a row of nhits hits need fs_result_dedupe?  AMQP delivers once per
 * sub_id, and the ids of one node are unique already, so one hit needs
 * nothing. */
static inline int once_per_id(const fs_sublist *sl, size_t nhits)
{
    return nhits >= 2 && fs_rules(sl->dialect)->once_per_id;
}

/* Build r from sc->hits, in the row's order (fs_result.h): the plain ids,
 * then each group (fs_walk.h: NATS and AMQP merge by name across nodes,
 * MQTT groups are (name, filter) pairs, one per node); picked: with each
 * group's key for queue picks (a constant in each copy). */
static inline int build_result(const fs_sublist *sl, fs_scratch *sc, fs_result *r, int picked)
{
    const fs_node *const *hits = sc->hits;
    size_t nhits = sc->nhits;
    r->nids = r->nplain = r->ngroups = r->narena = 0;
    size_t nplain = 0;
    int grouped = 0;
    for (size_t k = 0; k < nhits; k++) {
        nplain += fs_nsubs_of(sl, hits[k]);
        grouped |= hits[k]->groups != NULL;
    }
    if (nplain) {
        if (fs_grow(&r->ids, &r->cap_ids, nplain, sizeof(int64_t)) < 0)
            return FS_ENOMEM;
        r->nids = fs_hits_plain(sl, hits, nhits, r->ids, nplain);
    }
    r->nplain = r->nids;
    if (!grouped) {                  /* most rows: no groups to order */
        sc->grefs_merge = 0;
        return once_per_id(sl, nhits) ? fs_result_dedupe(r) : FS_OK;
    }
    size_t nrefs;
    if (fs_row_groups(sl, sc, &nrefs) < 0)
        return FS_ENOMEM;
    if (nrefs && fs_grow(&r->groups, &r->cap_groups, nrefs, sizeof(fs_group_out)) < 0)
        return FS_ENOMEM;
    int nats = fs_groups_merge(sl->dialect);
    for (size_t j = 0, end; j < nrefs; j = end) {
        end = fs_row_group_end(sc, j, nrefs);
        const fs_node *n = hits[sc->grefs[j].hit];
        const fs_group *g = fs_group_of(sl, n, sc->grefs[j].group);
        fs_group_out *o = &r->groups[r->ngroups];
        memset(o, 0, sizeof(*o));
        const char *gname;
        uint32_t gname_len = fs_gname_of(sl, g, &gname);
        o->name_off = r->narena;
        o->name_len = gname_len;
        if (picked)
            o->key_hash = fs_group_key(sl, n, g);      /* (else 0, from the memset) */
        if (fs_arena_put(&r->arena, &r->narena, &r->cap_arena, gname, gname_len) < 0)
            return FS_ENOMEM;
        if (!nats) {
            o->filter_off = r->narena;
            if (fs_put_path(sl, n, &r->arena, &r->narena, &r->cap_arena) < 0)
                return FS_ENOMEM;
            o->filter_len = r->narena - o->filter_off;
        }
        o->members_off = r->nids;
        fs_runs runs = {0, 0};
        for (size_t p = j; p < end; p++) {           /* its parts, one per filter */
            const fs_group *part = fs_group_of(sl, hits[sc->grefs[p].hit], sc->grefs[p].group);
            const int64_t *gids;
            uint32_t gn = fs_gids_of(sl, part, &gids);      /* once: it sizes the room */
            if (fs_grow(&r->ids, &r->cap_ids, o->members_off + runs.n + gn, sizeof(int64_t)) < 0)
                return FS_ENOMEM;
            fs_runs_add(&runs, r->ids + o->members_off, gids, gn);
        }
        fs_runs_end(&runs, r->ids + o->members_off);
        o->members_len = runs.n;
        r->nids += runs.n;
        r->ngroups++;
    }
    return once_per_id(sl, nhits) ? fs_result_dedupe(r) : FS_OK;
}

int fs_build_result(const fs_sublist *sl, fs_scratch *sc, fs_result *r) { return build_result(sl, sc, r, 1); }

int fs_build_result_unpicked(const fs_sublist *sl, fs_scratch *sc, fs_result *r)
{
    return build_result(sl, sc, r, 0);
}

int fs_result_copy(fs_result *dst, const fs_result *src)
{
    if (fs_grow(&dst->ids, &dst->cap_ids, src->nids, sizeof(int64_t)) < 0 ||
        fs_grow(&dst->groups, &dst->cap_groups, src->ngroups, sizeof(fs_group_out)) < 0 ||
        fs_grow(&dst->arena, &dst->cap_arena, src->narena, 1) < 0)
        return FS_ENOMEM;
    if (src->nids) memcpy(dst->ids, src->ids, sizeof(int64_t) * src->nids);
    if (src->ngroups) memcpy(dst->groups, src->groups, sizeof(fs_group_out) * src->ngroups);
    if (src->narena) memcpy(dst->arena, src->arena, src->narena);
    dst->nids = src->nids;
    dst->nplain = src->nplain;
    dst->ngroups = src->ngroups;
    dst->narena = src->narena;
    return FS_OK;
}

/* ------------------------------------------- two indexes' answers as one */

/* The sorted a[0..na) and b[0..nb) merged into out; once: each id once. */
static size_t merge_sorted(int64_t *out, const int64_t *a, size_t na, const int64_t *b, size_t nb, int once)
{
    size_t i = 0, j = 0, n = 0;
    while (i < na || j < nb) {
        int64_t x = j == nb || (i < na && a[i] <= b[j]) ? a[i++] : b[j++];
        if (!once || n == 0 || out[n - 1] != x)
            out[n++] = x;
    }
    return n;
}

/* The groups' order of fs_result.h (name bytes, then, where a group is
 * (name, filter), filter bytes) across two results; 0: one group. */
static int group_out_cmp(const fs_result *a, const fs_group_out *ga, const fs_result *b,
                         const fs_group_out *gb, int by_name)
{
    int c = bytes_cmp(arena_at(a->arena, ga->name_off, ga->name_len), ga->name_len,
                      arena_at(b->arena, gb->name_off, gb->name_len), gb->name_len);
    if (c || by_name)
        return c;
    return bytes_cmp(arena_at(a->arena, ga->filter_off, ga->filter_len), ga->filter_len,
                     arena_at(b->arena, gb->filter_off, gb->filter_len), gb->filter_len);
}

int fs_result_merge(fs_result *r, const fs_result *a, const fs_result *b, int by_name, int once)
{
    r->nids = r->nplain = r->ngroups = r->narena = 0;
    size_t nids = a->nids + b->nids, ngroups = a->ngroups + b->ngroups;
    if ((nids && fs_grow(&r->ids, &r->cap_ids, nids, sizeof(int64_t)) < 0) ||
        (ngroups && fs_grow(&r->groups, &r->cap_groups, ngroups, sizeof(fs_group_out)) < 0))
        return FS_ENOMEM;
    if (a->nplain + b->nplain)
        r->nids = r->nplain = merge_sorted(r->ids, a->ids, a->nplain, b->ids, b->nplain, once);
    size_t i = 0, j = 0;
    while (i < a->ngroups || j < b->ngroups) {
        const fs_group_out *ga = i < a->ngroups ? &a->groups[i] : NULL;
        const fs_group_out *gb = j < b->ngroups ? &b->groups[j] : NULL;
        int c = !ga ? 1 : !gb ? -1 : group_out_cmp(a, ga, b, gb, by_name);
        const fs_result *from = c <= 0 ? a : b;
        const fs_group_out *g = c <= 0 ? ga : gb;
        fs_group_out *o = &r->groups[r->ngroups++];
        *o = *g;
        o->subject_pick = 0;          /* not filled: emit picks from the key */
        o->name_off = r->narena;
        if (fs_arena_put(&r->arena, &r->narena, &r->cap_arena, arena_at(from->arena, g->name_off, g->name_len),
                         g->name_len) < 0)
            return FS_ENOMEM;
        o->filter_off = r->narena;
        if (fs_arena_put(&r->arena, &r->narena, &r->cap_arena, arena_at(from->arena, g->filter_off, g->filter_len),
                         g->filter_len) < 0)
            return FS_ENOMEM;
        size_t na = c <= 0 ? ga->members_len : 0, nb = c >= 0 ? gb->members_len : 0;
        o->members_off = r->nids;
        o->members_len = merge_sorted(r->ids + r->nids, na ? a->ids + ga->members_off : NULL, na,
                                      nb ? b->ids + gb->members_off : NULL, nb, once);
        r->nids += o->members_len;
        i += c <= 0;
        j += c >= 0;
    }
    return FS_OK;
}

void fs_rresult_init(fs_rresult *r) { memset(r, 0, sizeof(*r)); }

void fs_rresult_free(fs_rresult *r)
{
    FS_FREE(r->hits);
    FS_FREE(r->arena);
    fs_rresult_init(r);
}

int fs_rhit_add(const fs_sublist *sl, const fs_node *n, const fs_group *g, int64_t id, fs_rresult *r)
{
    if (fs_grow(&r->hits, &r->cap_hits, r->nhits + 1, sizeof(fs_rhit)) < 0)
        return FS_ENOMEM;
    fs_rhit *h = &r->hits[r->nhits];
    memset(h, 0, sizeof(*h));
    h->id = id;
    h->filter_off = r->narena;
    if (fs_put_path(sl, n, &r->arena, &r->narena, &r->cap_arena) < 0)
        return FS_ENOMEM;
    h->filter_len = r->narena - h->filter_off;
    if (g) {
        const char *gname;
        uint32_t gname_len = fs_gname_of(sl, g, &gname);
        h->has_queue = 1;
        h->queue_off = r->narena;
        h->queue_len = gname_len;
        if (fs_arena_put(&r->arena, &r->narena, &r->cap_arena, gname, gname_len) < 0)
            return FS_ENOMEM;
    }
    r->nhits++;
    return FS_OK;
}

/* Reverse matches' order: filter bytes, then plain before queued, queue
 * name bytes, sub_id ascending. */

static int rhit_cmp(const void *pa, const void *pb, const void *ctx)
{
    const fs_rhit *a = pa, *b = pb;
    const char *arena = ctx;
    int c = bytes_cmp(arena_at(arena, a->filter_off, a->filter_len), a->filter_len,
                      arena_at(arena, b->filter_off, b->filter_len), b->filter_len);
    if (c)
        return c;
    if (a->has_queue != b->has_queue)
        return a->has_queue ? 1 : -1;
    if (a->has_queue && (c = bytes_cmp(arena_at(arena, a->queue_off, a->queue_len), a->queue_len,
                                       arena_at(arena, b->queue_off, b->queue_len), b->queue_len)))
        return c;
    return a->id < b->id ? -1 : a->id > b->id;
}

void fs_rresult_sort(fs_rresult *r)
{
    sort_items(r->hits, r->nhits, sizeof(fs_rhit), rhit_cmp, r->arena);
}
