/* fs_build.c - the bulk builder (fs_build_image, sublist.h): the image of
 * the set of subscriptions in a column of rows -- byte for byte what
 * inserting them, in any order, then writing the index gives -- written
 * straight from the rows, without that index's tables.
 *
 *   specs, or columns read in place
 *         ──parse (threads)──► rows: class, key, shape, filter, queue
 *         ──choose──► the set's rule (fs_shapes_choose) asked which of the
 *           rows' distinct shapes get tables; those made in `sim`, an
 *           index that holds only the trie and the kept shapes
 *         ──route (threads)──► each row's table: the literal table, a
 *           kept shape's, or the trie; each table's items gathered (the
 *           literal table's already in its sort's parts), the trie's rows
 *           inserted into sim (in row order)
 *         ──sort (threads)──► each table's items in writing order (home
 *           slot, key, bytes; rows in order), equal filters side by side
 *         ──write──► header, sim's trie, the literal table, the shapes'
 *           tables, each entry made once from its rows, the checksum
 *
 * Parse: fs_spec_parse, insert's own parse, on the worker pool's threads
 * and the caller's, in chunks; the first invalid row is the one insert_many
 * reports.  Choose: which shaped filters get tables is one rule of the set
 * (docs/FORMAT.md, "One image for one set"), the one the image writer
 * places by: the rows' distinct shapes (a hash set) are handed to
 * fs_shapes_choose, and each shape it keeps is made in sim by
 * fs_shape_create in the rule's (canonical) order, as the thaw
 * (fs_image_thaw.c) makes a placed index's: sim's shapes are the ones the
 * root block lists, their fields and probe sets what the writer writes.
 * Route: a literal goes to the literal table; a shaped row to its shape's
 * table when its shape is kept -- even where a deeper filter's trie path
 * runs through its node (AMQP "a.#" under "a.#.b"), as an insert's does;
 * every other row (a wildcard filter without a shape, or one of a shape
 * not kept) is inserted into sim (fs_sublist_insert), whose insert puts
 * it in the trie: sim has no table for its shape and the budget refuses
 * one (a shape not kept does not fit beside the kept ones).  The trie is
 * built by the index's own insert path.
 *
 * Sort: a table's capacity is what an index growing from empty has for
 * its count of distinct filters (fs_table_cap); its items are bucketed by
 * the top bits of their home slot (about two a bucket) and each bucket
 * sorted by insertion: the order fs_image_write.c writes.  The literal
 * table's first pass (into parts by those bits) is route's gathering
 * itself, its rows counted as parsed so its plan is known before.  A
 * table whose distinct count moves its capacity off the one its rows
 * gave is sorted again.
 *
 * Write: through the image writer's parts (fs_image_write.h): each entry
 * is a made-up fs_node (its filter, key, sorted ids, groups in name order
 * with sorted members), written and placed as a built index's would be.
 * On threads (every phase's result the same whichever thread did what):
 * rows are parsed and routed in chunks -- a table's items (a literal
 * part's) placed from the counts of the chunks before, so in row order;
 * the other tables' first sorting pass is a unit a table, the second runs
 * of parts; the file's pages are
 * populated by whichever thread takes that unit of the sort's job, beside
 * the sorting; and a large table's entries are laid out first (each one's
 * bytes, so its offset) and written by the threads into parts of the
 * writer's bytes of their own; the caller then places their slots. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_image_write.h"
#include "fs_index.h"
#include "fs_pool.h"
#include "fs_strings.h"
#include "fs_sys.h"
#include "sublist.h"

enum { CLS_LIT, CLS_SHAPED, CLS_TRIE };
#define TAB_TRIE 0xFFFFu        /* a row's table: 0 the literal table, 1 + k the k-th shape made */
#define PARSE_CHUNK 4096u

/* A table of this many entries or more is written on threads, each
 * taking PAR_CHUNK entries at a time; rows are routed in chunks of
 * ROUTE_CHUNK, and a sort's second pass taken in runs of SORT_RUN parts.
 * The fuzzer sets the first two small (so the last two follow), so that
 * its few rows take every threaded path. */
#ifndef FS_BUILD_PAR_ENTRIES
#define FS_BUILD_PAR_ENTRIES 8192u
#endif
#ifndef FS_BUILD_PAR_CHUNK
#define FS_BUILD_PAR_CHUNK 2048u
#endif
#define PAR_ENTRIES FS_BUILD_PAR_ENTRIES
#define PAR_CHUNK FS_BUILD_PAR_CHUNK
#define ROUTE_CHUNK (8u * PAR_CHUNK)                    /* 16,384 rows */
#define SORT_RUN (PAR_CHUNK >= 64u ? PAR_CHUNK / 32u : 1u)  /* 64 parts */

/* A row of a table, all its sort and its entry read (the rows are freed
 * once the tables are gathered). */
typedef struct {
    uint64_t key;               /* in the literal table, or in its shape's */
    const char *f, *q;          /* the filter ("$share/G/" off), the queue (NULL: plain) */
    int64_t id;
    uint32_t qlen;
    uint16_t flen;              /* a filter is at most 65,535 bytes */
} bitem;

/* A row as parsed: its item, as its table will hold it (gathered by one
 * copy), and where it goes. */
typedef struct {
    bitem it;
    uint64_t packed;            /* the shape (CLS_SHAPED), shape_pack's */
    uint8_t cls;
    uint16_t tab;
    uint16_t col;               /* route's: its column (route_job) */
} brow;

/* A (queue, id) pair of an entry's rows. */
typedef struct {
    const char *q;
    uint32_t qlen;
    int64_t id;
} qitem;

typedef struct {
    bitem *items;
    size_t n, cap;              /* items; their table's capacity */
    size_t distinct;
} btable;

/* Room to make one entry in (each writing thread has its own). */
typedef struct {
    fs_node *node;
    size_t cap_node;
    int64_t *ids;
    size_t cap_ids;
    qitem *queued;              /* an entry's (queue, id) pairs, and room to sort them */
    size_t cap_queued;
    fs_groups *groups;
    size_t cap_groups;
} escratch;

/* A table's sort into writing order for capacity cap: its items into
 * buckets by the top bits of their home slot (about two a bucket), each
 * bucket sorted (sort_items).  In two passes, in place (permute), the
 * second in cache: into at most 1,024 parts by the buckets' top bits (the
 * first pass, a table's), then each part into its buckets (parts taken in
 * runs by the threads).  Not stable, and need not
 * be: an entry is made from the set of its rows (its ids sorted, its
 * groups in name order), so the order of a filter's rows is not in the
 * image; the order is a function of the rows all the same, whatever the
 * threads. */
typedef struct {
    uint32_t cap, mask, shift, pshift, parts, per;  /* bucket: (home & mask) >> shift; part: bucket >> pshift */
    uint32_t *pc;               /* after the first pass, part p's end (room for 2 * (parts + 2)) */
    uint32_t maxpart;           /* after the first pass, the largest part's items (a bucket's bound) */
    int parted;                 /* 1: the first pass done (the literal table's, by route) */
} bsort;

/* The sort of a table of n items for capacity cap planned, its room
 * allocated.  FS_OK or FS_ENOMEM. */
static int sort_plan(size_t n, bsort *S, uint32_t cap)
{
    S->cap = cap;
    S->mask = cap - 1;
    S->shift = S->pshift = 0;
    while ((cap >> S->shift) > 1 && (cap >> S->shift) > n / 2)
        S->shift++;
    uint32_t nb = cap >> S->shift;              /* buckets, a power of two (0: no rows) */
    while ((nb >> S->pshift) > 1024)
        S->pshift++;
    S->parts = nb >> S->pshift;
    S->per = 1u << S->pshift;
    S->pc = FS_CALLOC(2 * ((size_t)S->parts + 2), sizeof(uint32_t));    /* and the parts' bounds */
    S->maxpart = 0;
    S->parted = 0;
    return S->pc ? FS_OK : FS_ENOMEM;
}

/* Where the rows come from: an array of specs, or a filter column, its
 * ids and an optional queue column, read in place (the Python layer's
 * Arrow columns: a spec array made of them first was a serial pass over
 * every row and ~40 bytes a row of new memory, the tenth of a
 * one-thread build's wall and a sixth of a two-thread one's). */
typedef struct {
    const fs_spec *specs;               /* NULL: the columns */
    const fs_strings *filters, *queues; /* queues NULL: every row plain */
    const int64_t *ids;
} brows_in;

/* Row i as a spec: in->specs[i], or made from the columns in *tmp
 * (fs_spec_of_row).  A null filter -- which the callers refuse before,
 * with its row -- is the empty one, which the parse refuses. */
FS_ALWAYS_INLINE const fs_spec *row_spec(const brows_in *in, size_t i, fs_spec *tmp)
{
    if (in->specs)
        return &in->specs[i];
    if (!fs_spec_of_row(tmp, in->filters, in->ids, in->queues, i)) {
        tmp->filter = "";
        tmp->filter_len = 0;
    }
    return tmp;
}

typedef struct {
    fs_pool_task task;
    fs_dialect d;
    brows_in in;
    brow *rows;
    size_t n;
    atomic_size_t next;         /* the next chunk to take */
    atomic_size_t bad;          /* the first invalid row found so far (n: none) */
    fs_mutex mu;                /* over err, rc */
    fs_error err;
    int rc;
    atomic_size_t lits;         /* the literal rows */
} parse_job;

/* A distinct shape of the shaped rows (shape_pack's), and its table. */
typedef struct {
    uint64_t packed;            /* 0: an empty slot */
    uint16_t tab;               /* 1 + k: the k-th shape kept; TAB_TRIE: not kept */
} bshape;

typedef struct {
    fs_dialect d;
    brows_in in;
    size_t n;
    brow *rows;
    fs_sublist *sim;            /* the trie, and the kept shapes (their tables empty) */
    fs_shape *made[FS_SHAPE_MAX];
    uint32_t nmade;
    bshape *shapes;             /* the rows' distinct shapes, open-addressed */
    size_t shapes_cap, nshapes;
    btable tab[1 + FS_SHAPE_MAX];
    escratch es;                /* the caller's entry scratch */
    unsigned threads;
    uint64_t room;              /* the tables' rows' room_of, summed as they are gathered */
    size_t nlit;                /* the literal rows, counted as parsed */
    bsort lit;                  /* the literal table's sort, its first pass done by route */
} builder;

/* A shape in one word, never 0: the one-level wildcards' mask (bits
 * below FS_SHAPE_MAX_TOKENS), the token count, the rest wildcard. */
_Static_assert(FS_SHAPE_MAX_TOKENS <= 48, "a shape's mask fits below bit 48");
static uint64_t shape_pack(uint64_t onemask, uint32_t ntoks, uint32_t rest)
{
    return onemask | (uint64_t)ntoks << 48 | (uint64_t)rest << 56 | 1ull << 63;
}

static void parse_row(brow *r, const fs_parsed *ps, int64_t id)
{
    r->it = (bitem){.key = ps->shape.key, .f = ps->filter, .q = ps->queue, .id = id, .qlen = ps->queue_len,
                    .flen = (uint16_t)ps->filter_len};
    r->cls = ps->literal ? CLS_LIT : ps->shaped ? CLS_SHAPED : CLS_TRIE;
    r->packed = ps->shaped ? shape_pack(ps->shape.onemask, ps->shape.ntoks, ps->shape.rest) : 0;
    r->tab = 0;
}

/* Take chunks of rows until none is left, or every row left comes after
 * an invalid one already found. */
static void parse_work(parse_job *J)
{
    fs_tokens t;
    fs_tokens_init(&t);
    fs_parsed ps;
    fs_error e;
    fs_spec tmp;
    size_t lits = 0;
    for (;;) {
        size_t lo = atomic_fetch_add(&J->next, 1) * PARSE_CHUNK;
        if (lo >= J->n || lo >= atomic_load_explicit(&J->bad, memory_order_relaxed))
            break;
        size_t hi = J->n - lo < PARSE_CHUNK ? J->n : lo + PARSE_CHUNK;
        for (size_t i = lo; i < hi; i++) {
            const fs_spec *sp = row_spec(&J->in, i, &tmp);
            int rc = fs_spec_parse(J->d, sp, &t, &ps, &e);
            if (rc == FS_OK) {
                parse_row(&J->rows[i], &ps, sp->id);
                lits += ps.literal != 0;
                continue;
            }
            fs_mutex_lock(&J->mu);
            if (i < atomic_load(&J->bad)) {
                atomic_store(&J->bad, i);
                J->err = e;
                J->rc = rc;
            }
            fs_mutex_unlock(&J->mu);
            break;
        }
    }
    atomic_fetch_add(&J->lits, lits);
    fs_tokens_free(&t);
}

static void parse_run(void *arg, unsigned index)
{
    (void)index;
    parse_work(arg);
}

/* Parse every row, on up to `threads` threads.  FS_OK, or the first
 * invalid row's status (*bad, *err) as insert_many gives it. */
static int parse_all(builder *B, unsigned threads, size_t *bad, fs_error *err)
{
    parse_job J;
    memset(&J, 0, sizeof(J));
    J.d = B->d;
    J.in = B->in;
    J.rows = B->rows;
    J.n = B->n;
    atomic_init(&J.next, 0);
    atomic_init(&J.bad, B->n);
    atomic_init(&J.lits, 0);
    fs_mutex_init(&J.mu);
    J.task.fn = parse_run;
    J.task.arg = &J;
    size_t chunks = (B->n + PARSE_CHUNK - 1) / PARSE_CHUNK;
    if (threads > chunks)
        threads = (unsigned)(chunks ? chunks : 1);
    int posted = threads > 1 && fs_pool_submit(&J.task, threads - 1) == FS_OK;
    parse_work(&J);
    if (posted)
        fs_pool_join(&J.task);
    fs_mutex_destroy(&J.mu);
    B->nlit = atomic_load(&J.lits);
    if (atomic_load(&J.bad) == B->n)
        return FS_OK;
    *bad = atomic_load(&J.bad);
    *err = J.err;
    return J.rc;
}

/* ---- route: each row's table, by the set's rule, in row order */

/* Row i into sim, whose insert puts it in the trie (its status: 0 or 1;
 * FS_ENOMEM). */
static int to_trie(builder *B, size_t i)
{
    fs_error e;
    fs_spec tmp;
    int rc = fs_sublist_insert(B->sim, row_spec(&B->in, i, &tmp), &e);
    return rc == FS_EINVAL ? FS_ENOMEM : rc;       /* parsed once already: cannot be invalid */
}

/* The slot of B->shapes holding packed, or the empty one where it goes. */
static size_t shape_slot(const builder *B, uint64_t packed)
{
    size_t mask = B->shapes_cap - 1, i = (size_t)((packed * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    while (B->shapes[i].packed && B->shapes[i].packed != packed)
        i = (i + 1) & mask;
    return i;
}

/* Note packed among the distinct shapes (the set kept at most half
 * full).  FS_OK or FS_ENOMEM. */
static int shape_note(builder *B, uint64_t packed)
{
    if (2 * (B->nshapes + 1) > B->shapes_cap) {
        size_t oldcap = B->shapes_cap, cap = oldcap ? 2 * oldcap : 64;
        bshape *old = B->shapes;
        B->shapes = FS_CALLOC(cap, sizeof(bshape));
        if (!B->shapes) {
            B->shapes = old;
            return FS_ENOMEM;
        }
        B->shapes_cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].packed)
                B->shapes[shape_slot(B, old[i].packed)] = old[i];
        FS_FREE(old);
    }
    size_t i = shape_slot(B, packed);
    if (!B->shapes[i].packed) {
        B->shapes[i] = (bshape){.packed = packed, .tab = TAB_TRIE};
        B->nshapes++;
    }
    return FS_OK;
}

/* Which of the rows' shapes get tables: the set's rule, fs_shapes_choose,
 * asked about their distinct shapes.  Each kept shape is made in sim in
 * the rule's (canonical) order, as the thaw makes an index's (sim's
 * shapes are what the root block lists, their fields what it writes),
 * and B->made[k] is the k-th.  FS_OK or FS_ENOMEM. */
static int choose_shapes(builder *B)
{
    uint64_t last = 0;
    for (size_t i = 0; i < B->n; i++) {
        const brow *r = &B->rows[i];
        if (r->cls != CLS_SHAPED)
            continue;
        if (r->packed != last && shape_note(B, r->packed) < 0)
            return FS_ENOMEM;
        last = r->packed;
    }
    if (!B->nshapes)
        return FS_OK;
    fs_shape_of *of = FS_MALLOC(sizeof(fs_shape_of) * B->nshapes);
    unsigned char *keep = FS_MALLOC(B->nshapes);
    int rc = of && keep ? FS_OK : FS_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < B->shapes_cap && rc == FS_OK; i++) {
        uint64_t p = B->shapes[i].packed;
        if (p)
            of[n++] = (fs_shape_of){.onemask = p & ((1ull << 48) - 1), .ntoks = (uint32_t)(p >> 48) & 0xFF,
                                    .rest = (uint32_t)(p >> 56) & 1, .key = 0};
    }
    if (rc == FS_OK)
        fs_shapes_choose(B->d, of, n, keep);
    for (size_t i = 0; i < n && rc == FS_OK; i++) {
        if (!keep[i])
            continue;
        fs_shape *sh;
        if (B->nmade == FS_SHAPE_MAX || fs_shape_create(B->sim, &of[i], &sh) < 0 || !sh) {
            rc = FS_ENOMEM;                 /* (only the allocation can fail: the kept shapes fit the budget) */
            break;
        }
        uint64_t packed = shape_pack(of[i].onemask, of[i].ntoks, of[i].rest);
        B->shapes[shape_slot(B, packed)].tab = (uint16_t)(1 + B->nmade);
        B->made[B->nmade++] = sh;
    }
    FS_FREE(of);
    FS_FREE(keep);
    return rc;
}

/* ---- threads: a job's units, taken in turn by the caller and the pool */

/* fn(arg, 0) on the calling thread and on up to threads - 1 of the pool's
 * workers.  Each call takes the job's units from a counter until none is
 * left, so the job is done whoever comes (the pool may lend fewer
 * workers, or none), and its result does not depend on who did what. */
static void on_threads(unsigned threads, void (*fn)(void *, unsigned), void *arg)
{
    fs_pool_task t;
    memset(&t, 0, sizeof(t));
    t.fn = fn;
    t.arg = arg;
    int posted = threads > 1 && fs_pool_submit(&t, threads - 1) == FS_OK;
    fn(arg, 0);
    if (posted)
        fs_pool_join(&t);
}

/* ---- route and gather: each row's table, then each table's items --
 * in chunks of rows on threads, in two passes: each chunk counts its rows
 * of each column; then, from each chunk's first place in each column (the
 * counts summed in column order, then chunk order), puts them there.  A
 * column is a table, the trie's rows, or a part of the literal table's
 * sort (B->lit): the literal table, most rows, so comes already in its
 * parts, its first sorting pass done here, on the way.  Each column's
 * items come in row order whatever the threads. */

typedef struct {
    builder *B;
    size_t chunks;
    uint32_t cols;              /* the literal table's parts, the other tables, then the trie's rows */
    uint32_t parts;             /* the literal table's columns: its sort's parts (one when it has none) */
    size_t *at;                 /* [chunk * cols + col]: the chunk's count, then its next place */
    uint32_t *trie;             /* the rows the trie takes, in row order */
    uint64_t *room;             /* [chunk]: its placed rows' room_of */
    int placing;                /* 0: count, 1: place */
    atomic_size_t next;
} route_job;

/* The room a row of a table takes in the image, as if its filter were
 * its own and its id in a list: its entry and payload (size_about's
 * part of it). */
static uint64_t room_of(const bitem *r)
{
    return sizeof(fs_node) + FS_TOK_ALLOC(r->flen) + 8 +
           (r->q ? sizeof(fs_groups) + sizeof(fs_group) + FS_TOK_ALLOC(r->qlen ? r->qlen : 1) : 0);
}

/* Row r's table: a literal's the literal table, a shaped row's its
 * shape's when the rule keeps the shape (the last shape seen remembered:
 * rows of one shape tend to come together); every other row -- a wildcard
 * filter without a shape, or of a shape not kept -- the trie's. */
static uint16_t row_table(const builder *B, const brow *r, uint64_t *last, uint16_t *last_tab)
{
    if (r->cls == CLS_LIT)
        return 0;
    if (r->cls != CLS_SHAPED)
        return TAB_TRIE;
    if (r->packed != *last) {
        *last = r->packed;
        *last_tab = B->shapes[shape_slot(B, r->packed)].tab;
    }
    return *last_tab;
}

static void route_chunk(route_job *J, size_t c)
{
    builder *B = J->B;
    size_t lo = c * ROUTE_CHUNK, hi = B->n - lo < ROUTE_CHUNK ? B->n : lo + ROUTE_CHUNK;
    size_t *at = &J->at[c * J->cols];
    uint32_t trie = J->cols - 1, parts = J->parts, pshift = B->lit.shift + B->lit.pshift;
    uint64_t last = 0, room = 0;
    uint16_t last_tab = TAB_TRIE;
    for (size_t i = lo; i < hi; i++) {
        brow *r = &B->rows[i];
        if (!J->placing) {
            r->tab = row_table(B, r, &last, &last_tab);
            r->col = (uint16_t)(r->tab == 0          ? ((uint32_t)r->it.key >> pshift) & (parts - 1)
                                : r->tab == TAB_TRIE ? trie
                                                     : parts + r->tab - 1);
            at[r->col]++;
        } else if (r->tab == TAB_TRIE) {
            J->trie[at[trie]++] = (uint32_t)i;
        } else {
            B->tab[r->tab].items[at[r->col]++] = r->it;
            room += room_of(&r->it);
        }
    }
    if (J->placing)
        J->room[c] = room;
}

static void route_run(void *arg, unsigned index)
{
    route_job *J = arg;
    (void)index;
    for (size_t c; (c = atomic_fetch_add(&J->next, 1)) < J->chunks;)
        route_chunk(J, c);
}

/* Each chunk's counts into its first places (the literal table's parts
 * one after another, each's end in B->lit); each table's items and the
 * trie's rows allocated (*ntrie: how many).  FS_OK or FS_ENOMEM. */
static int route_places(builder *B, route_job *J, size_t *ntrie)
{
    uint32_t parts = J->parts;
    size_t sum = 0;
    for (uint32_t k = 0; k < J->cols; k++) {
        size_t from = sum = k < parts ? sum : 0;
        for (size_t c = 0; c < J->chunks; c++) {
            size_t m = J->at[c * J->cols + k];
            J->at[c * J->cols + k] = sum;
            sum += m;
        }
        if (k < parts) {
            B->lit.pc[k] = (uint32_t)sum;
            B->lit.maxpart = sum - from > B->lit.maxpart ? (uint32_t)(sum - from) : B->lit.maxpart;
            if (k + 1 < parts)
                continue;
        }
        if (k + 1 == J->cols) {
            *ntrie = sum;
            J->trie = FS_MALLOC(sizeof(uint32_t) * (sum ? sum : 1));
            if (!J->trie)
                return FS_ENOMEM;
        } else {
            btable *T = &B->tab[k < parts ? 0 : k - parts + 1];
            T->n = sum;
            T->items = FS_MALLOC(sizeof(bitem) * (sum ? sum : 1));
            if (!T->items)
                return FS_ENOMEM;
        }
    }
    B->lit.parted = B->tab[0].n == B->nlit;      /* (cannot be otherwise: both count the literal rows) */
    return FS_OK;
}

/* Every row routed, each table's items gathered in row order (on up to
 * `threads` threads), and the trie's rows inserted into sim, in row order,
 * on this one.  FS_OK or FS_ENOMEM. */
static int route_all(builder *B, unsigned threads)
{
    if (choose_shapes(B) < 0)
        return FS_ENOMEM;
    route_job J;
    memset(&J, 0, sizeof(J));
    J.B = B;
    J.chunks = (B->n + ROUTE_CHUNK - 1) / ROUTE_CHUNK;
    if (sort_plan(B->nlit, &B->lit, fs_table_cap((uint32_t)B->nlit, 0)) < 0)
        return FS_ENOMEM;
    J.parts = B->lit.parts ? B->lit.parts : 1;     /* no literal rows: a capacity of 0, no parts */
    J.cols = J.parts + B->nmade + 1;
    J.at = FS_CALLOC(J.chunks ? J.chunks * J.cols : 1, sizeof(size_t));
    J.room = FS_MALLOC(sizeof(uint64_t) * (J.chunks ? J.chunks : 1));
    size_t ntrie = 0;
    int rc = J.at && J.room ? FS_OK : FS_ENOMEM;
    if (rc == FS_OK) {
        on_threads(threads, route_run, &J);
        rc = route_places(B, &J, &ntrie);
    }
    if (rc == FS_OK) {
        J.placing = 1;
        atomic_store(&J.next, 0);
        on_threads(threads, route_run, &J);
        for (size_t c = 0; c < J.chunks; c++)
            B->room += J.room[c];
    }
    for (size_t i = 0; i < ntrie && rc == FS_OK; i++)
        rc = to_trie(B, J.trie[i]) < 0 ? FS_ENOMEM : FS_OK;
    FS_FREE(J.at);
    FS_FREE(J.room);
    FS_FREE(J.trie);
    return rc;
}

/* ---- sort: a table's items in writing order */

static int item_before(const bitem *a, const bitem *b, uint32_t mask)
{
    uint32_t la = (uint32_t)a->key, lb = (uint32_t)b->key;
    if ((la & mask) != (lb & mask))
        return (la & mask) < (lb & mask);
    if (a->key != b->key)
        return la != lb ? la < lb : (a->key >> 32) < (b->key >> 32);
    uint32_t m = a->flen < b->flen ? a->flen : b->flen;
    int c = m ? memcmp(a->f, b->f, m) : 0;
    return c ? c < 0 : a->flen < b->flen;
}

static int item_same(const bitem *a, const bitem *b)
{
    return a->key == b->key && a->flen == b->flen && (a->flen == 0 || memcmp(a->f, b->f, a->flen) == 0);
}

/* Sort a[0..n) by item_before, stably: by insertion while short (a
 * bucket holds about two), by merging when long (keys made to collide). */
static void sort_items(bitem *a, bitem *tmp, size_t n, uint32_t mask)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            bitem x = a[i];
            size_t j = i;
            for (; j > 0 && item_before(&x, &a[j - 1], mask); j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    size_t h = n / 2, i = 0, j = h, k = 0;
    sort_items(a, tmp, h, mask);
    sort_items(a + h, tmp, n - h, mask);
    while (i < h && j < n)
        tmp[k++] = item_before(&a[j], &a[i], mask) ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    memcpy(a, tmp, k * sizeof(*a));
}

/* a[0..n), in place, by bucket -- an item's: ((key & mask) >> shift) &
 * bmask, its home slot's top bits -- each item taken to its bucket's next
 * free place, the one there taken on in its turn, until one lands in the
 * bucket being filled.  room: 2 * (bmask + 2) counts; after, room[b] is
 * bucket b's end.  Returns the largest bucket's items. */
static uint32_t permute(bitem *a, uint32_t n, uint32_t mask, uint32_t shift, uint32_t bmask, uint32_t *room)
{
    uint32_t *next = room, *bound = room + bmask + 2, most = 0;
    uint32_t bm = (mask >> shift) & bmask;      /* ((key & mask) >> shift) & bmask, in one mask */
    memset(bound, 0, ((size_t)bmask + 2) * sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++)
        bound[(((uint32_t)a[i].key >> shift) & bm) + 1]++;
    for (uint32_t b = 0; b <= bmask; b++)
        bound[b + 1] += bound[b];       /* bound[b]: bucket b's start, bound[b + 1] its end */
    memcpy(next, bound, ((size_t)bmask + 1) * sizeof(uint32_t));
    for (uint32_t b = 0; b <= bmask; b++) {
        while (next[b] < bound[b + 1]) {
            bitem x = a[next[b]];
            uint32_t q = ((uint32_t)x.key >> shift) & bm;
            while (q != b) {
                bitem y = a[next[q]];
                a[next[q]++] = x;
                x = y;
                q = ((uint32_t)x.key >> shift) & bm;
            }
            a[next[b]++] = x;
        }
        most = bound[b + 1] - bound[b] > most ? bound[b + 1] - bound[b] : most;
    }
    return most;
}

/* The first pass: T's items, in place, by part. */
static void sort_first(btable *T, bsort *S)
{
    if (T->n && !S->parted)
        S->maxpart = permute(T->items, (uint32_t)T->n, S->mask, S->shift + S->pshift, S->parts - 1, S->pc);
}

/* The distinct filters of a[0..n) (sorted: a filter's side by side). */
static size_t distinct_in(const bitem *a, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += !i || !item_same(&a[i - 1], &a[i]);
    return d;
}

/* Parts [plo, phi) of the first pass into their buckets, each sorted (tmp:
 * room for the largest part's items, a merge's; bc: for 2 * (S->per + 2)
 * counts).  Their distinct filters, counted a bucket at a time (a
 * filter's rows share a key, so a bucket). */
static size_t sort_parts(btable *T, const bsort *S, uint32_t plo, uint32_t phi, bitem *tmp, uint32_t *bc)
{
    size_t d = 0;
    for (uint32_t p = plo; p < phi && T->n; p++) {
        uint32_t lo = p ? S->pc[p - 1] : 0, m = S->pc[p] - lo;
        bitem *a = T->items + lo;
        if (m <= 1) {
            d += m;
            continue;
        }
        permute(a, m, S->mask, S->shift, S->per - 1, bc);
        for (uint32_t b = 0, blo = 0; b < S->per; blo = bc[b++]) {
            uint32_t k = bc[b] - blo;
            bitem *x = a + blo;
            if (k <= 1) {                   /* most buckets: nothing to sort, one filter or none */
                d += k;
                continue;
            }
            if (k > 2) {
                sort_items(x, tmp, k, S->mask);
            } else if (item_before(&x[1], &x[0], S->mask)) {
                bitem y = x[0];
                x[0] = x[1];
                x[1] = y;
            }
            d += distinct_in(x, k);
        }
    }
    return d;
}

/* ---- write: each entry made once from its rows */

/* An entry's room: the longest filter, one id, one group.  FS_OK or
 * FS_ENOMEM. */
static int escratch_init(escratch *E)
{
    if (fs_grow(&E->node, &E->cap_node, sizeof(fs_node) + FS_TOK_ALLOC(UINT16_MAX), 1) < 0 ||
        fs_grow(&E->ids, &E->cap_ids, 1, sizeof(int64_t)) < 0 ||
        fs_grow(&E->groups, &E->cap_groups, fs_groups_bytes(1), 1) < 0)
        return FS_ENOMEM;
    return FS_OK;
}

static void escratch_free(escratch *E)
{
    FS_FREE(E->node);
    FS_FREE(E->ids);
    FS_FREE(E->queued);
    FS_FREE(E->groups);
}

static int qitem_before(const qitem *a, const qitem *b)
{
    uint32_t m = a->qlen < b->qlen ? a->qlen : b->qlen;
    int c = m ? memcmp(a->q, b->q, m) : 0;
    if (c || a->qlen != b->qlen)
        return c ? c < 0 : a->qlen < b->qlen;
    return a->id < b->id;
}

static int qitem_same(const qitem *a, const qitem *b)
{
    return a->id == b->id && a->qlen == b->qlen && (!a->qlen || memcmp(a->q, b->q, a->qlen) == 0);
}

/* Sort a[0..n) by (name, id): by insertion while short, by merging. */
static void sort_queued(qitem *a, qitem *tmp, size_t n)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            qitem x = a[i];
            size_t j = i;
            for (; j > 0 && qitem_before(&x, &a[j - 1]); j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    size_t h = n / 2, i = 0, j = h, k = 0;
    sort_queued(a, tmp, h);
    sort_queued(a + h, tmp, n - h);
    while (i < h && j < n)
        tmp[k++] = qitem_before(&a[j], &a[i]) ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    memcpy(a, tmp, k * sizeof(*a));
}

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sort and deduplicate ids[0..n): how many are left. */
static size_t ids_set(int64_t *ids, size_t n)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            int64_t x = ids[i];
            size_t j = i;
            for (; j > 0 && x < ids[j - 1]; j--)
                ids[j] = ids[j - 1];
            ids[j] = x;
        }
    } else {
        qsort(ids, n, sizeof(int64_t), id_cmp);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!k || ids[k - 1] != ids[i])
            ids[k++] = ids[i];
    return k;
}

/* The rows it[0..n) of one filter: its plain ids (E->ids[0..*np)) and its
 * (queue, id) pairs in order, each once (E->queued[0..*nq), as qitems in
 * E->queued).  FS_OK or FS_ENOMEM. */
static int entry_rows(escratch *E, const bitem *it, size_t n, size_t *np, size_t *nq)
{
    if (fs_grow(&E->ids, &E->cap_ids, n, sizeof(int64_t)) < 0 ||
        fs_grow(&E->queued, &E->cap_queued, 2 * n, sizeof(qitem)) < 0)
        return FS_ENOMEM;
    qitem *qs = E->queued;
    size_t p = 0, q = 0;
    for (size_t i = 0; i < n; i++) {
        const bitem *r = &it[i];
        if (r->q)
            qs[q++] = (qitem){.q = r->q, .qlen = r->qlen, .id = r->id};
        else
            E->ids[p++] = r->id;
    }
    *np = ids_set(E->ids, p);
    sort_queued(qs, qs + n, q);
    size_t k = 0;
    for (size_t i = 0; i < q; i++)
        if (!k || !qitem_same(&qs[k - 1], &qs[i]))
            qs[k++] = qs[i];
    *nq = k;
    return FS_OK;
}

/* The groups of the pairs qs[0..nq) into E->groups, their members after
 * the plain ids in E->ids (from np).  FS_OK or FS_ENOMEM. */
static int entry_groups(escratch *E, const qitem *qs, size_t np, size_t nq, uint32_t *ng)
{
    size_t g = 0;
    for (size_t i = 0; i < nq; i++)
        g += !i || qs[i].qlen != qs[i - 1].qlen || memcmp(qs[i].q, qs[i - 1].q, qs[i].qlen) != 0;
    *ng = (uint32_t)g;
    if (!g)
        return FS_OK;
    if (fs_grow(&E->ids, &E->cap_ids, np + nq, sizeof(int64_t)) < 0 ||
        fs_grow(&E->groups, &E->cap_groups, fs_groups_bytes((uint32_t)g), 1) < 0)
        return FS_ENOMEM;
    E->groups->n = E->groups->cap = (uint32_t)g;
    size_t k = (size_t)-1;
    for (size_t i = 0; i < nq; i++) {
        E->ids[np + i] = qs[i].id;
        if (i && qs[i].qlen == qs[i - 1].qlen && memcmp(qs[i].q, qs[i - 1].q, qs[i].qlen) == 0) {
            E->groups->g[k].n++;
            E->groups->g[k].cap++;
            continue;
        }
        fs_group *x = &E->groups->g[++k];
        x->name = (char *)(uintptr_t)qs[i].q;
        x->ids = &E->ids[np + i];
        x->name_len = qs[i].qlen;
        x->name_hash = fs_hash(qs[i].q, qs[i].qlen);
        x->n = x->cap = 1;
    }
    return FS_OK;
}

/* entry_rows and entry_groups for a filter of one row (most filters). */
static void entry_one(escratch *E, const bitem *it, size_t *np, size_t *nq, uint32_t *ng)
{
    const bitem *r = it;
    E->ids[0] = r->id;
    *np = !r->q;
    *nq = *ng = !!r->q;
    if (r->q) {
        E->groups->n = E->groups->cap = 1;
        E->groups->g[0] = (fs_group){.name = (char *)(uintptr_t)r->q, .ids = E->ids, .name_len = r->qlen,
                                     .name_hash = fs_hash(r->q, r->qlen), .n = 1, .cap = 1};
    }
}

/* The entry of one filter (rows it[0..n)) as a built index would hold it,
 * in E->node; *subs: its subscriptions.  FS_OK or FS_ENOMEM.  Inline in
 * its writing loops: most filters have one row, whose entry is a few
 * stores, less than the call's own cost. */
FS_ALWAYS_INLINE int make_entry(escratch *E, const bitem *it, size_t n, int shaped, uint64_t *subs)
{
    size_t np, nq;
    uint32_t ng;
    const bitem *r = &it[0];
    if (n == 1)
        entry_one(E, it, &np, &nq, &ng);
    else if (entry_rows(E, it, n, &np, &nq) < 0 || entry_groups(E, E->queued, np, nq, &ng) < 0)
        return FS_ENOMEM;
    fs_node *x = E->node;
    *x = (fs_node){.nsubs = (uint32_t)np, .subcap = (uint32_t)np, .groups = ng ? E->groups : NULL,
                   .hash = (uint32_t)r->key, .toklen = (uint16_t)r->flen,
                   .kind = (uint8_t)(shaped ? FS_NODE_SHAPED : FS_TOK_LITERAL)};
    if (np == 1)
        x->subs.one = E->ids[0];
    else if (np > 1)
        x->subs.many = E->ids;
    if (r->flen) {              /* the padding: the last word zeroed, then the bytes over it */
        static const char zero[8];
        memcpy(x->tok + FS_TOK_ALLOC(r->flen) - 8, zero, 8);
        memcpy(x->tok, r->f, r->flen);
    }
    *subs = np + nq;
    return FS_OK;
}

/* One table's entries written on threads: entry e is T->items[start[e] ..
 * start[e + 1]), written at off[e] (off[d]: the end). */
typedef struct {
    fs_pool_task task;
    const btable *T;
    const size_t *start;
    const uint64_t *off;
    size_t d;
    int shaped;
    const fs_imgw *X;
    atomic_size_t next;
    atomic_int failed;
    atomic_uint_fast64_t subs;
} wjob;

/* Entries lo..hi into a part of X's bytes of their own.  FS_OK or FS_ENOMEM. */
static int wjob_chunk(wjob *J, escratch *E, size_t lo, size_t hi, uint64_t *subs)
{
    fs_imgw *P = fs_imgw_part(J->X, J->off[lo], J->off[hi]);
    int rc = P ? FS_OK : FS_ENOMEM;
    for (size_t e = lo; e < hi && rc == FS_OK; e++) {
        uint64_t s = 0;
        if (e + 8 < hi) {
            FS_PREFETCH(J->T->items[J->start[e + 8]].f);
            if (J->T->items[J->start[e + 8]].q)
                FS_PREFETCH(J->T->items[J->start[e + 8]].q);
        }
        if (make_entry(E, &J->T->items[J->start[e]], J->start[e + 1] - J->start[e], J->shaped, &s) < 0 ||
            fs_imgw_node(P, E->node) != J->off[e])
            rc = FS_ENOMEM;                     /* (a size not as laid out cannot be) */
        *subs += s;
    }
    if (P)
        fs_imgw_part_free(P);
    return rc;
}

static void wjob_run(void *arg, unsigned index)
{
    wjob *J = arg;
    escratch E;
    uint64_t subs = 0;
    (void)index;
    memset(&E, 0, sizeof(E));
    int rc = escratch_init(&E);
    for (;;) {
        size_t lo = atomic_fetch_add(&J->next, 1) * PAR_CHUNK;
        if (rc < 0 || lo >= J->d || atomic_load_explicit(&J->failed, memory_order_relaxed))
            break;
        rc = wjob_chunk(J, &E, lo, J->d - lo < PAR_CHUNK ? J->d : lo + PAR_CHUNK, &subs);
    }
    if (rc < 0)
        atomic_store(&J->failed, 1);
    atomic_fetch_add(&J->subs, subs);
    escratch_free(&E);
}

/* Where each entry of T goes, laid out from the writer's next 8-byte
 * boundary (allocated in X here): start, off as wjob's.  FS_OK or
 * FS_ENOMEM. */
static int entry_places(builder *B, fs_imgw *X, const btable *T, int shaped, size_t *start, uint64_t *off)
{
    size_t e = 0;
    off[0] = 0;
    for (size_t i = 0, j; i < T->n; i = j, e++) {
        for (j = i + 1; j < T->n && item_same(&T->items[i], &T->items[j]); j++)
            ;
        const bitem *r = &T->items[i];
        uint64_t b, s;
        if (j - i == 1)
            b = sizeof(fs_node) + FS_TOK_ALLOC(r->flen) +
                (r->q ? fs_groups_bytes(1) + FS_TOK_ALLOC(r->qlen ? r->qlen : 1) + sizeof(int64_t) : 0);
        else if (make_entry(&B->es, r, j - i, shaped, &s) < 0)
            return FS_ENOMEM;
        else
            b = fs_imgw_node_bytes(B->es.node);
        start[e] = i;
        off[e + 1] = off[e] + b;
    }
    start[e] = T->n;
    uint64_t base = fs_imgw_alloc(X, (size_t)off[e]);
    for (size_t k = 0; base && k <= e; k++)
        off[k] += base;
    return base ? FS_OK : FS_ENOMEM;
}

/* T's entries on B->threads threads, the caller's among them once it has
 * placed their slots in writing order (a slot needs only its entry's key
 * and offset, laid out first; slots and entries are bytes apart).  FS_OK
 * or FS_ENOMEM. */
static int write_keyed_threads(builder *B, fs_imgw *X, uint64_t lv, const btable *T, int shaped, uint64_t *subs)
{
    size_t d = T->distinct;
    size_t *start = FS_MALLOC(sizeof(size_t) * (d + 1));
    uint64_t *off = FS_MALLOC(sizeof(uint64_t) * (d + 1));
    int rc = start && off ? entry_places(B, X, T, shaped, start, off) : FS_ENOMEM;
    if (rc == FS_OK) {
        wjob J = {.task = {.fn = wjob_run}, .T = T, .start = start, .off = off, .d = d, .shaped = shaped, .X = X};
        J.task.arg = &J;
        atomic_init(&J.next, 0);
        atomic_init(&J.failed, 0);
        atomic_init(&J.subs, 0);
        int posted = fs_pool_submit(&J.task, B->threads - 1) == FS_OK;
        uint32_t next = 0;
        for (size_t e = 0; e < d; e++) {        /* the slots, beside the workers' entries */
            uint64_t key = T->items[start[e]].key;
            fs_imgw_place(X, lv, (fs_slot){.hash = (uint32_t)key, .len = (uint32_t)(key >> 32),
                                           .node = (fs_node *)(uintptr_t)off[e]}, &next);
        }
        wjob_run(&J, 0);                        /* then the entries left */
        if (posted)
            fs_pool_join(&J.task);
        rc = atomic_load(&J.failed) ? FS_ENOMEM : FS_OK;
        *subs += atomic_load(&J.subs);
    }
    FS_FREE(start);
    FS_FREE(off);
    return rc;
}

/* Table T into the level at lv: each filter's entry, then its slot, in
 * writing order.  *subs grows by its subscriptions.  FS_OK or FS_ENOMEM. */
static int write_keyed(builder *B, fs_imgw *X, uint64_t lv, const btable *T, int shaped, uint64_t *subs)
{
    uint64_t slots = fs_imgw_level(X, lv, (uint32_t)T->distinct, shaped);
    if (T->distinct && !slots)
        return FS_ENOMEM;
    if (B->threads > 1 && T->distinct >= PAR_ENTRIES)
        return write_keyed_threads(B, X, lv, T, shaped, subs);
    uint32_t next = 0;
    enum { AHEAD = 8 };
    for (size_t i = 0, j; i < T->n; i = j) {
        if (i + AHEAD < T->n) {               /* the filters and queues ahead lie anywhere */
            FS_PREFETCH(T->items[i + AHEAD].f);
            if (T->items[i + AHEAD].q)
                FS_PREFETCH(T->items[i + AHEAD].q);
        }
        for (j = i + 1; j < T->n && item_same(&T->items[i], &T->items[j]); j++)
            ;
        uint64_t s;
        if (make_entry(&B->es, &T->items[i], j - i, shaped, &s) < 0)
            return FS_ENOMEM;
        uint64_t off = fs_imgw_node(X, B->es.node);
        if (!off)
            return FS_ENOMEM;
        *subs += s;
        uint64_t key = T->items[i].key;
        fs_imgw_place(X, lv, (fs_slot){.hash = (uint32_t)key, .len = (uint32_t)(key >> 32),
                                       .node = (fs_node *)(uintptr_t)off}, &next);
    }
    return FS_OK;
}

/* About the image's size, for the writer's first room: the trie as sim
 * holds it, every table's slots and bitmap, and each row's entry and
 * payload, as if no two rows shared a filter (B->room, summed as the
 * tables were gathered, on threads).
 * *likely: that less the room for ids beside a first (a row's 8 bytes),
 * which only a filter of several rows takes: the pages made ready first. */
static size_t size_about(const builder *B, size_t *likely)
{
    uint64_t rows = 0;
    uint64_t size = FS_IMG_OBJECTS + B->sim->mem + 4096 + B->room;
    for (uint32_t k = 0; k <= B->nmade; k++) {
        const btable *T = &B->tab[k];
        uint64_t cap = fs_table_cap((uint32_t)T->n, k > 0);     /* its rows all distinct */
        size += sizeof(fs_shape) + cap * sizeof(fs_slot) + (cap ? FS_FILTER_BITS(cap) / 8 : 0);
        rows += T->n;
    }
    *likely = size - 8 * rows < SIZE_MAX ? (size_t)(size - 8 * rows) : SIZE_MAX;
    return size < SIZE_MAX ? (size_t)size : SIZE_MAX;
}

/* The trie, the literal table and the shapes' tables (sim's canonical
 * order), then the root block, the header and the checksum, into X made
 * ready (writer_ready). */
static int write_all(builder *B, fs_imgw *X)
{
    const fs_shapes *S = &B->sim->shapes;
    fs_img_totals T = {.dialect = B->d, .subs = B->sim->count, .literals = B->tab[0].distinct,
                       .nodes = B->sim->nodes};
    T.root = fs_imgw_trie(X, B->sim->root);
    T.lit = T.root ? fs_imgw_alloc(X, sizeof(fs_level)) : 0;
    if (!T.lit || write_keyed(B, X, T.lit, &B->tab[0], 0, &T.subs) < 0)
        return FS_ENOMEM;
    T.nodes += B->tab[0].distinct;
    for (uint32_t j = 0; j < S->n; j++) {
        uint32_t k = 0;
        while (k < B->nmade && B->made[k] != S->shape[j])
            k++;
        if (k == B->nmade)
            return FS_ENOMEM;                   /* cannot be: every shape sim has was made here */
        T.shapes[j] = fs_imgw_alloc(X, sizeof(fs_shape));
        if (!T.shapes[j] ||
            write_keyed(B, X, T.shapes[j] + offsetof(fs_shape, table), &B->tab[1 + k], 1, &T.subs) < 0)
            return FS_ENOMEM;
        fs_imgw_shape(X, T.shapes[j], S->shape[j]);
        T.nodes += B->tab[1 + k].distinct;
    }
    return fs_imgw_end(X, &T, S, B->threads);
}

static void builder_free(builder *B)
{
    for (uint32_t k = 0; k <= FS_SHAPE_MAX; k++)
        FS_FREE(B->tab[k].items);
    fs_sublist_free(B->sim);
    FS_FREE(B->lit.pc);
    FS_FREE(B->shapes);
    FS_FREE(B->rows);
    escratch_free(&B->es);
}

/* The writer made ready: its file (path non-NULL) opened, and room for
 * about size bytes, its first `now` made ready at once -- for a file, its
 * pages populated (the kernel's work, as much as the rest of a large
 * build).  FS_OK, FS_ENOMEM, FS_EIO, FS_ENOSYS. */
static int writer_ready(fs_imgw *X, const char *path, size_t size, size_t now)
{
    int rc = path ? fs_imgw_file(X, path) : FS_OK;
    return rc < 0 ? rc : fs_imgw_begin(X, size, now);
}

/* The writer made ready, as units of the sort's job: the file opened and
 * its room made, then its pages in runs of TOUCH_RUN bytes up to
 * `likely`, shared by the threads beside the sorting (each run waits for
 * the room: taken before them, it is running). */
#define TOUCH_RUN ((size_t)4 << 20)
typedef struct {
    fs_imgw *X;
    const char *path;
    size_t size, likely, runs;
    int rc, ran;                /* ran: under the sort job's mu */
    int err;                    /* errno where unit 0 failed: it may run on a worker, and
                                 * errno is the thread's own, so the caller sets it again */
} ready_job;

/* A run of parts of the second pass, and the distinct filters it found. */
typedef struct {
    uint32_t t, plo, phi;
    size_t distinct;
} sort_unit;

/* The sort of some tables on threads.  Units, taken in this order: the
 * writer made ready (when it is one of the job's); each table's first
 * pass; runs of SORT_RUN parts of the second pass, which wait for every
 * first pass to end (those are taken first, so are running: a wait never
 * waits for a unit not started). */
typedef struct {
    builder *B;
    const uint32_t *which;      /* the tables sorted */
    bsort *S;                   /* their plans */
    uint32_t nwhich, maxper;
    sort_unit *units;           /* the second pass's */
    size_t nunits;
    ready_job *ready;
    atomic_size_t next;
    atomic_int failed;
    uint32_t firsts_done;       /* under mu */
    fs_mutex mu;
    fs_cond done;               /* broadcast: every first pass done, or the writer's room made */
} sort_job;

/* The ready job's unit u: 0 the file and its room; after, a run of pages. */
static void ready_unit(sort_job *J, size_t u)
{
    ready_job *R = J->ready;
    if (u == 0) {
        int rc = writer_ready(R->X, R->path, R->size, 0);
        int err = fs_sys_error();
        fs_mutex_lock(&J->mu);
        R->rc = rc;
        R->err = err;
        R->ran = 1;
        fs_cond_broadcast(&J->done);
        fs_mutex_unlock(&J->mu);
        return;
    }
    fs_mutex_lock(&J->mu);
    while (!R->ran)
        fs_cond_wait(&J->done, &J->mu);
    int rc = R->rc;
    fs_mutex_unlock(&J->mu);
    size_t lo = (u - 1) * TOUCH_RUN;
    if (rc == FS_OK)
        fs_imgw_touch(R->X, lo, R->likely - lo < TOUCH_RUN ? R->likely : lo + TOUCH_RUN);
}

static void sort_first_unit(sort_job *J, uint32_t t)
{
    sort_first(&J->B->tab[J->which[t]], &J->S[t]);
    fs_mutex_lock(&J->mu);
    if (++J->firsts_done == J->nwhich)
        fs_cond_broadcast(&J->done);
    fs_mutex_unlock(&J->mu);
}

/* The first passes ended: room for a part of the largest and its counts
 * (the caller's to free).  FS_OK or FS_ENOMEM. */
static int sort_room(sort_job *J, bitem **tmp, uint32_t **bc)
{
    fs_mutex_lock(&J->mu);
    while (J->firsts_done < J->nwhich)
        fs_cond_wait(&J->done, &J->mu);
    fs_mutex_unlock(&J->mu);
    uint32_t most = 1;
    for (uint32_t t = 0; t < J->nwhich; t++)
        most = J->S[t].maxpart > most ? J->S[t].maxpart : most;
    *tmp = FS_MALLOC(sizeof(bitem) * most);
    *bc = FS_MALLOC(2 * ((size_t)J->maxper + 2) * sizeof(uint32_t));
    return *tmp && *bc ? FS_OK : FS_ENOMEM;
}

static void sort_run(void *arg, unsigned index)
{
    sort_job *J = arg;
    uint32_t *bc = NULL;
    bitem *tmp = NULL;
    size_t nready = J->ready ? 1 + J->ready->runs : 0;
    (void)index;
    for (size_t u; !atomic_load_explicit(&J->failed, memory_order_relaxed) &&
                   (u = atomic_fetch_add(&J->next, 1)) < nready + J->nwhich + J->nunits;) {
        if (u < nready) {
            ready_unit(J, u);
            continue;
        }
        if (u - nready < J->nwhich) {
            sort_first_unit(J, (uint32_t)(u - nready));
            continue;
        }
        sort_unit *x = &J->units[u - nready - J->nwhich];
        if (!tmp && sort_room(J, &tmp, &bc) < 0) {
            atomic_store(&J->failed, 1);
            break;
        }
        x->distinct = sort_parts(&J->B->tab[J->which[x->t]], &J->S[x->t], x->plo, x->phi, tmp, bc);
    }
    FS_FREE(tmp);
    FS_FREE(bc);
}

/* The second pass's units of J's tables (planned).  FS_OK or FS_ENOMEM. */
static int sort_units(sort_job *J)
{
    size_t n = 0;
    for (uint32_t t = 0; t < J->nwhich; t++) {
        n += (J->S[t].parts + SORT_RUN - 1) / SORT_RUN;
        J->maxper = J->S[t].per > J->maxper ? J->S[t].per : J->maxper;
    }
    J->units = FS_MALLOC(sizeof(sort_unit) * (n ? n : 1));
    if (!J->units)
        return FS_ENOMEM;
    for (uint32_t t = 0; t < J->nwhich; t++)
        for (uint32_t p = 0; p < J->S[t].parts; p += SORT_RUN)
            J->units[J->nunits++] = (sort_unit){.t = t, .plo = p,
                                                .phi = J->S[t].parts - p < SORT_RUN ? J->S[t].parts : p + SORT_RUN};
    return FS_OK;
}

/* Tables which[0..n) sorted for capacities caps[], their distinct counts
 * known, on up to `threads` threads; ready (non-NULL) made ready among
 * them.  FS_OK or FS_ENOMEM. */
static int sort_tables(builder *B, unsigned threads, const uint32_t *which, const uint32_t *caps, uint32_t n,
                       ready_job *ready)
{
    sort_job J;
    memset(&J, 0, sizeof(J));
    J.B = B;
    J.which = which;
    J.nwhich = n;
    J.ready = ready;
    atomic_init(&J.next, 0);
    atomic_init(&J.failed, 0);
    J.S = FS_CALLOC(n ? n : 1, sizeof(bsort));
    int rc = J.S ? FS_OK : FS_ENOMEM;
    for (uint32_t t = 0; t < n && rc == FS_OK; t++)
        if (which[t] == 0 && B->lit.parted && caps[t] == B->lit.cap) {
            J.S[t] = B->lit;                    /* its first pass done by route */
            B->lit.pc = NULL;
            B->lit.parted = 0;
        } else {
            rc = sort_plan(B->tab[which[t]].n, &J.S[t], caps[t]);
        }
    if (rc == FS_OK)
        rc = sort_units(&J);
    if (rc == FS_OK) {
        fs_mutex_init(&J.mu);
        fs_cond_init(&J.done);
        on_threads(threads, sort_run, &J);
        fs_cond_destroy(&J.done);
        fs_mutex_destroy(&J.mu);
        rc = atomic_load(&J.failed) ? FS_ENOMEM : FS_OK;
    }
    for (uint32_t t = 0; t < n && rc == FS_OK; t++) {
        B->tab[which[t]].cap = caps[t];
        B->tab[which[t]].distinct = 0;
    }
    for (size_t u = 0; u < J.nunits && rc == FS_OK; u++)
        B->tab[which[J.units[u].t]].distinct += J.units[u].distinct;
    for (uint32_t t = 0; J.S && t < n; t++)
        FS_FREE(J.S[t].pc);
    FS_FREE(J.S);
    FS_FREE(J.units);
    return rc;
}

/* Every table's items in writing order, its distinct count known: sorted
 * for the capacity its rows give, then, where its distinct filters give
 * another, again.  On threads, the writer is made ready meanwhile (a unit
 * of the job: nothing it touches is the sort's); on one, after (the
 * sort's room freed first).  FS_OK, or the first failure. */
static int sort_and_ready(builder *B, unsigned threads, fs_imgw *X, const char *path)
{
    ready_job R = {.X = X, .path = path};
    R.size = size_about(B, &R.likely);
    R.runs = (R.likely + TOUCH_RUN - 1) / TOUCH_RUN;
    uint32_t which[1 + FS_SHAPE_MAX], caps[1 + FS_SHAPE_MAX], n = 0;
    for (uint32_t k = 0; k <= B->nmade; k++, n++) {
        which[n] = k;
        caps[n] = fs_table_cap((uint32_t)B->tab[k].n, k > 0);
    }
    int rc = sort_tables(B, threads, which, caps, n, threads > 1 ? &R : NULL);
    n = 0;
    for (uint32_t k = 0; k <= B->nmade && rc == FS_OK; k++) {
        uint32_t cap = fs_table_cap((uint32_t)B->tab[k].distinct, k > 0);
        if (cap != B->tab[k].cap) {
            which[n] = k;
            caps[n++] = cap;
        }
    }
    if (rc == FS_OK && n)
        rc = sort_tables(B, threads, which, caps, n, NULL);
    if (!R.ran)                                     /* one thread, or a failure before */
        R.rc = writer_ready(X, path, R.size, R.likely);
    else if (R.rc == FS_EIO)
        fs_sys_set_error(R.err);                    /* the reason, on the caller's thread */
    return rc < 0 ? rc : R.rc;
}

struct fs_build {
    builder B;
};

/* Parse and route (the specs or columns read no more after). */
static int rows_step(builder *B, size_t *bad, fs_error *err)
{
    int rc = parse_all(B, B->threads, bad, err);
    if (rc < 0)
        return rc;
    if (route_all(B, B->threads) < 0)
        return FS_ENOMEM;
    FS_FREE(B->rows);                       /* the items carry what is left to read */
    B->rows = NULL;
    memset(&B->in, 0, sizeof(B->in));
    return FS_OK;
}

static int build_rows(fs_dialect d, const brows_in *in, size_t n, unsigned threads, fs_build **out, size_t *bad,
                      fs_error *err)
{
    *bad = 0;
    *out = NULL;
    if (n > UINT32_MAX)                     /* rows are numbered in 32 bits */
        return FS_ENOMEM;
    fs_build *b = FS_MALLOC(sizeof(fs_build));
    if (!b)
        return FS_ENOMEM;
    builder *B = &b->B;
    memset(B, 0, sizeof(*B));
    B->d = d;
    B->in = *in;
    B->n = n;
    B->threads = threads ? threads : 1;
    B->rows = FS_MALLOC(sizeof(brow) * (n ? n : 1));
    B->sim = fs_sublist_new(d);
    int rc = B->rows && B->sim ? rows_step(B, bad, err) : FS_ENOMEM;
    if (rc < 0)
        fs_build_free(b);
    else
        *out = b;
    return rc;
}

int fs_build_rows(fs_dialect d, const fs_spec *specs, size_t n, unsigned threads, fs_build **out, size_t *bad,
                  fs_error *err)
{
    brows_in in = {.specs = specs, .filters = NULL, .queues = NULL, .ids = NULL};
    return build_rows(d, &in, n, threads, out, bad, err);
}

int fs_build_columns(fs_dialect d, const fs_strings *filters, const int64_t *ids, const fs_strings *queues,
                     unsigned threads, fs_build **out, size_t *bad, fs_error *err)
{
    brows_in in = {.specs = NULL, .filters = filters, .queues = queues, .ids = ids};
    return build_rows(d, &in, filters->n, threads, out, bad, err);
}

int fs_build_write(fs_build *b, const char *path, int durable, char **out, size_t *len)
{
    builder *B = &b->B;
    if (out) {
        *out = NULL;
        *len = 0;
    }
    if (escratch_init(&B->es) < 0)
        return FS_ENOMEM;
    fs_imgw *X = fs_imgw_new();
    if (!X)
        return FS_ENOMEM;
    int rc = sort_and_ready(B, B->threads, X, path);
    if (rc == FS_OK)
        rc = write_all(B, X);
    int closed = fs_imgw_close(X, rc == FS_OK, durable, out, len);
    return rc < 0 ? rc : closed;
}

void fs_build_free(fs_build *b)
{
    if (b) {
        builder_free(&b->B);
        FS_FREE(b);
    }
}

int fs_build_image(fs_dialect d, const fs_spec *specs, size_t n, unsigned threads, const char *path,
                   int durable, char **out, size_t *len, size_t *bad, fs_error *err)
{
    fs_build *b;
    if (out) {
        *out = NULL;
        *len = 0;
    }
    int rc = fs_build_rows(d, specs, n, threads, &b, bad, err);
    if (rc == FS_OK)
        rc = fs_build_write(b, path, durable, out, len);
    fs_build_free(b);
    return rc;
}
