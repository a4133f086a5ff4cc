/* fuzz_image.c - libFuzzer harness: fs_image_open on arbitrary bytes (a
 * version 3 image, matched in place; csrc/serial/fs_image.c).
 *
 * The input is the image.  Its last byte (a checksum byte) picks how it is
 * fed: bit 0 clear -- re-forged: the header's payload length, the root
 * block's objects' end and the checksum recomputed over the mutated bytes,
 * so that mutations get past the envelope and the checksum into the
 * structural checks and the walks; bit 0 set -- as it is.  Bit 1 also opens
 * a copy at an odd address (which must be refused).  The bytes are copied
 * to an 8-aligned buffer and opened twice:
 *
 *   verify=1  must refuse cleanly (FS_EBADDATA with a reason and a position
 *             inside the input) or open an index that is what it claims: no
 *             call ever finds damage in it; it answers every probe exactly
 *             as the index thawed from it (fs_image_thaw) does; writing it
 *             gives back its own bytes; the thawed index written again opens
 *             verified and answers the same.
 *   verify=0  must open whatever verify=1 opens (it checks a subset); on
 *             anything it opens, every call -- match, interest,
 *             has_interest, reverse_match, the batch (fs_match_rows), an
 *             insert and a remove through the live part, thaw -- returns
 *             cleanly: never a crash, a hang or a read outside the buffer
 *             (ASan: the buffer is exactly the input's size).  Where it
 *             found no damage and verify=1 opened the same bytes, its
 *             answers equal the verified index's.
 *
   disorder  (bit 2 of the last byte, on an image verify=1 opened that
             is the one image of its set: its thaw writes its bytes; a
             layout of the fuzzer's may lay a run of ids over a name,
             which verify=1 allows, and reordering it would change the
             name) a copy
             with node ids and queue-group members stored out of order --
             runs reversed, rotated, two swapped -- and the checksum made
             to fit (issue 47, D2): verify=1 must refuse it ("ids not in
             strictly increasing order"), verify=0 and the checksum level
             must open it, and every call on it, a result cache's too,
             must stay inside the buffers (ASan) and give, for each
             subject, the verified image's ids in some order or find the
             damage.
 *
 * Subjects: fixed probes, the filters a verified image lists (wildcards
 * replaced by words), and words taken from the input's printable runs.
 *
 * The library bugs it found are fixed, and the harness screens none: each
 * one's forged image is a seed (regress-*) and a test
 * (tests/test_image_hostile.py).  Seeds: fuzz/seeds/image (made by
 * fuzz/make_image_seeds.py).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_batch.h"
#include "fs_image.h"
#include "fs_index.h"
#include "fs_serial.h"
#include "sublist.h"

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz_image: check failed at %s:%d: %s\n", __FILE__,     \
                    __LINE__, #cond);                                               \
            abort();                                                                \
        }                                                                           \
    } while (0)

#define ROOT_OBJECTS_END (FS_SERIAL_HEADER + 24)   /* img_root.objects_end (fs_image_root.h) */

/* The checksum of b[0..n) as the version in its header sums it (3: one
 * chain; 4: blocks), so that a re-forged image passes its check. */
static uint64_t image_checksum(const unsigned char *b, size_t n)
{
    return fs_checksum_of((unsigned)b[8] | (unsigned)b[9] << 8, b, n);
}

/* ------------------------------------------------------------ invariants */

/* A wildcard trie node's token is its wildcard (verify=1 once accepted
 * another, and the thawed index then held another filter).  For a verified
 * index only: its trie is a tree, walked here without checks. */
static int wildcard_tokens_bad(const fs_sublist *sl)
{
    const fs_dialect_rules *R = fs_rules(sl->dialect);
    const fs_node *stack[4096];
    size_t n = 0;
    int bad = 0;
    stack[n++] = sl->root;
    while (n && !bad) {
        const fs_node *x = stack[--n];
        if (x->kind == FS_TOK_ONE || x->kind == FS_TOK_REST) {
            char want = x->kind == FS_TOK_ONE ? R->one : R->rest;
            bad = x->toklen != 1 || x->tok[0] != want;
        }
        const fs_level *L = fs_down(sl, x);
        if (!L)
            continue;
        const fs_slot *slots = fs_lv_slots(sl, L);
        for (uint32_t i = 0; i < L->cap && n + 3 < sizeof(stack) / sizeof(stack[0]); i++)
            if (slots[i].node)
                stack[n++] = fs_ref_node(sl, slots[i].node);
        if (fs_lv_one(sl, L) && n < sizeof(stack) / sizeof(stack[0]))
            stack[n++] = fs_lv_one(sl, L);
        if (fs_lv_rest(sl, L) && n < sizeof(stack) / sizeof(stack[0]))
            stack[n++] = fs_lv_rest(sl, L);
    }
    return bad;
}

/* ------------------------------------------------------------ subjects */

#define MAXS 40

typedef struct {
    char *s[MAXS];
    size_t n[MAXS];
    size_t count;
} subjects;

static void add_subject(subjects *S, const char *p, size_t n)
{
    if (S->count == MAXS)
        return;
    char *c = malloc(n + 1);
    CHECK(c != NULL);
    if (n)
        memcpy(c, p, n);
    c[n] = 0;
    S->s[S->count] = c;
    S->n[S->count++] = n;
}

static void free_subjects(subjects *S)
{
    for (size_t i = 0; i < S->count; i++)
        free(S->s[i]);
    S->count = 0;
}

static const char *const PROBES[] = {
    "a", "a.b", "a/b", "orders.eu.created", "x", "$SYS.x", "$SYS/x", "a.b.c", "a/b/c", "", "/", "/x",
    "a.d1.d2.zz.d4", "lit1", "b.b.b", "c.d.zz.e", "c/d/zz/e", "x.zz.y.yy", "x/zz/y/yy",
};

/* A filter as a subject that it matches: wildcards become words. */
static void add_filter_as_subject(subjects *S, fs_dialect d, const char *f, size_t n)
{
    const fs_dialect_rules *R = fs_rules(d);
    char buf[512];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 3 < sizeof(buf); i++) {
        int tok_start = i == 0 || f[i - 1] == R->sep, tok_end = i + 1 == n || f[i + 1] == R->sep;
        if (tok_start && tok_end && (f[i] == R->one || f[i] == R->rest)) {
            buf[k++] = 'w';
            buf[k++] = 'w';
        } else {
            buf[k++] = f[i];
        }
    }
    add_subject(S, buf, k);
}

/* Words from the input's printable runs, joined in ones, twos and threes. */
static void add_input_words(subjects *S, fs_dialect d, const uint8_t *data, size_t size)
{
    const char *w[6];
    size_t wn[6], nw = 0;
    for (size_t i = FS_IMG_OBJECTS < size ? FS_IMG_OBJECTS : 0; i < size && nw < 6;) {
        size_t j = i;
        while (j < size && j - i < 12 &&
               ((data[j] >= 'a' && data[j] <= 'z') || (data[j] >= '0' && data[j] <= '9') || data[j] == '$'))
            j++;
        if (j > i) {
            w[nw] = (const char *)data + i;
            wn[nw++] = j - i;
        }
        i = j + 1;
    }
    char sep = fs_sep(d), buf[64];
    for (size_t a = 0; a < nw; a++) {
        add_subject(S, w[a], wn[a]);
        for (size_t b = 0; b < nw && b < 3; b++) {
            size_t k = 0;
            memcpy(buf + k, w[a], wn[a]);
            k += wn[a];
            buf[k++] = sep;
            memcpy(buf + k, w[b], wn[b]);
            k += wn[b];
            add_subject(S, buf, k);
        }
    }
}

/* ------------------------------------------------------------ calls */

typedef struct {
    int rc;
    size_t nids, nplain, ngroups;
    int64_t ids[64];
    int has;
    uint64_t np, nq;
    size_t nrev;
} answer;

static void sane_result(const fs_result *r)
{
    CHECK(r->nplain <= r->nids);
    for (size_t g = 0; g < r->ngroups; g++)
        CHECK(r->groups[g].members_off + r->groups[g].members_len <= r->nids);
}

/* Every call on one subject; the answer, for comparing indexes. */
static void ask(fs_sublist *sl, const char *s, size_t n, int verified, int reverse, answer *a)
{
    fs_scratch sc;
    fs_result r;
    fs_rresult rr;
    fs_error err;
    fs_scratch_init(&sc);
    fs_result_init(&r);
    fs_rresult_init(&rr);
    memset(a, 0, sizeof(*a));
    a->rc = fs_sublist_match(sl, s, n, &sc, &r, &err);
    CHECK(a->rc == FS_OK || a->rc == FS_EINVAL || a->rc == FS_ENOMEM);
    if (a->rc == FS_OK) {
        sane_result(&r);
        a->nids = r.nids;
        a->nplain = r.nplain;
        a->ngroups = r.ngroups;
        if (r.nids)
            memcpy(a->ids, r.ids, sizeof(int64_t) * (r.nids < 64 ? r.nids : 64));
    }
    int rc = fs_sublist_interest(sl, s, n, &sc, &a->np, &a->nq, &err);
    CHECK(rc == a->rc || rc == FS_ENOMEM || a->rc == FS_ENOMEM);
    a->has = fs_sublist_has_interest(sl, s, n, &sc, &err);
    CHECK(a->has == 0 || a->has == 1 || a->has == a->rc || a->has == FS_ENOMEM);
    /* only a verified image promises consistent answers: verify=0 trusts
     * what is in bounds (an entry without ids: has_interest yes, match
     * nothing) */
    if (verified && a->rc == FS_OK && rc == FS_OK) {
        CHECK(a->np == a->nplain && a->np + a->nq == a->nids);
        if (a->has >= 0)
            CHECK(a->has == (a->nids > 0));
    }
    /* the subject as a reverse query (a literal filter); reverse matching
     * is slow (AMQP: a polynomial intersection per trie node), so for a
     * few subjects only */
    a->nrev = (size_t)-1;
    if (!reverse)
        goto done;
    rc = fs_sublist_reverse_match(sl, s, n, &sc, &rr, &err);
    int valid = fs_validate(fs_sublist_dialect(sl), s, n, 1, &err) == FS_OK;
    if (valid)
        CHECK(rc != FS_EINVAL);
    CHECK(rc == FS_OK || rc == FS_EINVAL || rc == FS_ENOMEM);
    a->nrev = rc == FS_OK ? rr.nhits : (size_t)-1;
done:
    fs_rresult_free(&rr);
    fs_result_free(&r);
    fs_scratch_free(&sc);
}

static void reverse_all(fs_sublist *sl, size_t *nrows)
{
    static const char *const Q[] = {">", "#", "*", "+", "a.*", "a/+", "*.*", "a.#", "#.b", "a.>"};
    fs_scratch sc;
    fs_rresult rr;
    fs_error err;
    fs_scratch_init(&sc);
    fs_rresult_init(&rr);
    for (size_t i = 0; i < sizeof(Q) / sizeof(Q[0]); i++) {
        int rc = fs_sublist_reverse_match(sl, Q[i], strlen(Q[i]), &sc, &rr, &err);
        CHECK(rc == FS_OK || rc == FS_EINVAL || rc == FS_ENOMEM);
        if (rc == FS_EINVAL)
            CHECK(fs_validate(fs_sublist_dialect(sl), Q[i], strlen(Q[i]), 1, &err) != FS_OK);
        nrows[i] = rc == FS_OK ? rr.nhits : (size_t)-1;
    }
    fs_rresult_free(&rr);
    fs_scratch_free(&sc);
}

static void batch(fs_sublist *sl, const subjects *S)
{
    fs_strings col;
    memset(&col, 0, sizeof(col));
    col.layout = FS_STR_PTRS;
    col.n = S->count;
    col.ptrs = (const char *const *)S->s;
    col.lens = S->n;
    int64_t row_end[MAXS];
    uint8_t invalid[MAXS];
    fs_idbuf out;
    memset(&out, 0, sizeof(out));
    int rc = fs_match_rows(sl, NULL, &col, NULL, 0, S->count, FS_QUEUES_ALL, 0, row_end, invalid, &out, NULL);
    CHECK(rc == FS_OK || rc == FS_ENOMEM);
    if (rc == FS_OK) {
        int64_t prev = 0;
        for (size_t i = 0; i < S->count; i++) {
            CHECK(row_end[i] >= prev && (size_t)row_end[i] <= out.n);
            prev = row_end[i];
        }
    }
    fs_idbuf_free(&out);
}

/* Every call over every subject; answers into A (may be NULL). */
static void exercise(fs_sublist *sl, const subjects *S, int verified, answer *A, size_t *nrev)
{
    answer scratch;
    for (size_t i = 0; i < S->count; i++)
        ask(sl, S->s[i], S->n[i], verified, i % 8 == 0, A ? &A[i] : &scratch);
    size_t rows[16];
    reverse_all(sl, nrev ? nrev : rows);
    batch(sl, S);
}

static void same_answers(const answer *a, const answer *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        CHECK(a[i].rc == b[i].rc || a[i].rc == FS_ENOMEM || b[i].rc == FS_ENOMEM);
        if (a[i].rc != FS_OK || b[i].rc != FS_OK)
            continue;
        CHECK(a[i].nids == b[i].nids && a[i].nplain == b[i].nplain && a[i].ngroups == b[i].ngroups);
        CHECK(memcmp(a[i].ids, b[i].ids, sizeof(int64_t) * (a[i].nids < 64 ? a[i].nids : 64)) == 0);
        CHECK(a[i].nrev == b[i].nrev || a[i].nrev == (size_t)-1 || b[i].nrev == (size_t)-1);
    }
}

/* The filters a verified index lists, as subjects. */
static void add_listed(subjects *S, fs_sublist *sl)
{
    fs_scratch sc;
    fs_rresult rr;
    fs_error err;
    fs_scratch_init(&sc);
    fs_rresult_init(&rr);
    fs_dialect d = fs_sublist_dialect(sl);
    if (fs_sublist_reverse_match(sl, d == FS_NATS ? ">" : "#", 1, &sc, &rr, &err) == FS_OK)
        for (size_t i = 0; i < rr.nhits; i += 1 + rr.nhits / 8)
            if (rr.hits[i].filter_len)
                add_filter_as_subject(S, d, rr.arena + rr.hits[i].filter_off, rr.hits[i].filter_len);
    fs_rresult_free(&rr);
    fs_scratch_free(&sc);
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* ------------------------------------------------------------ disorder
 * Ids and members out of order (issue 47, D2): the merges that put a row
 * together were written for sorted runs, and a mapped image read with
 * verify=0 is not checked for order.  From an image verify=1 opened, a
 * copy with runs reordered in place (same bytes, other order), resealed. */

typedef struct {
    uint64_t s;
} lcg;

static uint64_t lcg_next(lcg *r)
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return r->s >> 33;
}

/* Reorder the run of n >= 2 ids at dst (unaligned-safe): reversed,
 * rotated or two swapped; never left as it was (ids are distinct). */
static void reorder_run(unsigned char *dst, size_t n, lcg *r)
{
    int64_t *a = malloc(sizeof(int64_t) * n), *b = malloc(sizeof(int64_t) * n);
    CHECK(a != NULL && b != NULL);
    memcpy(a, dst, sizeof(int64_t) * n);
    switch (lcg_next(r) % 3) {
    case 0:                                   /* descending */
        for (size_t i = 0; i < n; i++)
            b[i] = a[n - 1 - i];
        break;
    case 1: {                                 /* rotated by 1..n-1 */
        size_t k = 1 + (size_t)(lcg_next(r) % (n - 1));
        for (size_t i = 0; i < n; i++)
            b[i] = a[(i + k) % n];
        break;
    }
    default: {                                /* two swapped */
        size_t i = (size_t)(lcg_next(r) % n), j = (size_t)(lcg_next(r) % (n - 1));
        j += j >= i;
        memcpy(b, a, sizeof(int64_t) * n);
        b[i] = a[j];
        b[j] = a[i];
    }
    }
    memcpy(dst, b, sizeof(int64_t) * n);
    free(a);
    free(b);
}

/* Reorder some of the runs of the verified index sl (over buf) in dis, a
 * copy of buf: a node's ids, a group's members.  How many. */
static size_t disorder(const fs_sublist *sl, const unsigned char *buf, unsigned char *dis, lcg *r)
{
    size_t cap = 1024, n = 0, done = 0;
    const fs_node **stack = malloc(sizeof(fs_node *) * cap);
    CHECK(stack != NULL);
    stack[n++] = sl->root;
    for (uint32_t j = 0; j <= sl->shapes.n; j++) {
        const fs_level *L = j < sl->shapes.n ? &sl->shapes.shape[j]->table : sl->lit;
        const fs_slot *slots = fs_lv_slots(sl, L);
        for (uint32_t i = 0; i < L->cap; i++) {
            const fs_node *e = fs_ref_node(sl, slots[i].node);
            if (!e)
                continue;
            if (n == cap)
                CHECK((stack = realloc(stack, sizeof(fs_node *) * (cap *= 2))) != NULL);
            stack[n++] = e;
        }
    }
    while (n) {                               /* verified: a tree, each node once */
        const fs_node *x = stack[--n];
        if (x->nsubs >= 2 && lcg_next(r) % 2)
            reorder_run(dis + ((const unsigned char *)fs_node_ids(x) - buf), x->nsubs, r), done++;
        for (uint32_t gi = 0; gi < fs_ngroups(x); gi++) {
            const fs_group *g = fs_node_group(x, gi);
            if (g->n >= 2 && lcg_next(r) % 2)
                reorder_run(dis + ((const unsigned char *)fs_group_ids(g) - buf), g->n, r), done++;
        }
        const fs_level *L = fs_down(sl, x);
        if (!L)
            continue;
        const fs_slot *slots = fs_lv_slots(sl, L);
        const fs_node *kids[2] = {fs_lv_one(sl, L), fs_lv_rest(sl, L)};
        for (uint32_t i = 0; i < L->cap + 2; i++) {
            const fs_node *c = i < L->cap ? fs_ref_node(sl, slots[i].node) : kids[i - L->cap];
            if (!c)
                continue;
            if (n == cap)
                CHECK((stack = realloc(stack, sizeof(fs_node *) * (cap *= 2))) != NULL);
            stack[n++] = c;
        }
    }
    free(stack);
    return done;
}

static int cmp_i64(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

/* b holds a's ids in some order: the same counts, the same plain ids and
 * the same members (each side sorted), where all of them were kept. */
static void same_ids_any_order(const answer *a, const answer *b)
{
    CHECK(a->rc == b->rc || a->rc == FS_ENOMEM || b->rc == FS_ENOMEM);
    if (a->rc != FS_OK || b->rc != FS_OK)
        return;
    CHECK(a->nids == b->nids && a->nplain == b->nplain && a->ngroups == b->ngroups);
    if (a->nids > 64)
        return;
    int64_t x[64], y[64];
    memcpy(x, a->ids, sizeof(int64_t) * a->nids);
    memcpy(y, b->ids, sizeof(int64_t) * b->nids);
    qsort(x, a->nplain, sizeof(int64_t), cmp_i64);
    qsort(y, b->nplain, sizeof(int64_t), cmp_i64);
    qsort(x + a->nplain, a->nids - a->nplain, sizeof(int64_t), cmp_i64);
    qsort(y + b->nplain, b->nids - b->nplain, sizeof(int64_t), cmp_i64);
    CHECK(memcmp(x, y, sizeof(int64_t) * a->nids) == 0);
}

/* The disorder run: see the header.  A1: the verified image's answers. */
static void run_disorder(const fs_sublist *sl1, const unsigned char *buf, size_t size, const subjects *S,
                         const answer *A1)
{
    unsigned char *dis = malloc(size);
    CHECK(dis != NULL);
    memcpy(dis, buf, size);
    lcg r = {fs_serial_checksum(buf, size)};
    size_t done = disorder(sl1, buf, dis, &r);
    uint64_t P = size - FS_SERIAL_HEADER - 8;
    put64(dis + FS_SERIAL_HEADER + P, image_checksum(dis, FS_SERIAL_HEADER + P));
    fs_error err = {NULL, 0, 0};
    fs_sublist *full = NULL;
    int rc = fs_image_open((const char *)dis, size, FS_VERIFY_FULL, 1, &full, &err);
    if (done) {
        CHECK(rc == FS_EBADDATA || rc == FS_ENOMEM);
        if (rc == FS_EBADDATA)
            CHECK(strcmp(err.reason, "ids not in strictly increasing order") == 0);
    } else {
        CHECK(rc == FS_OK || rc == FS_ENOMEM);
    }
    fs_sublist_free(full);
    for (int level = 0; level < 2; level++) {
        fs_sublist *sl = NULL;
        rc = fs_image_open((const char *)dis, size, level ? FS_VERIFY_CHECKSUM : FS_VERIFY_NONE, 1, &sl, &err);
        CHECK(rc == FS_OK || rc == FS_ENOMEM);
        if (rc != FS_OK)
            continue;
        if (level)        /* the cache's path: a miss, then a hit (FS_ENOMEM: no cache, fine) */
            (void)fs_sublist_set_cache(sl, 16);
        static answer AD[MAXS];
        for (size_t i = 0; i < S->count; i++) {
            for (int again = 0; again <= level; again++) {
                ask(sl, S->s[i], S->n[i], 0, i % 8 == 0, &AD[i]);
                if (!fs_image_damaged(sl))    /* the damage stays reported once found */
                    same_ids_any_order(&A1[i], &AD[i]);
            }
        }
        size_t rows[16];
        reverse_all(sl, rows);
        batch(sl, S);
        fs_sublist_free(sl);
    }
    free(dis);
}

/* ------------------------------------------------------------ the input */

static void check_refusal(int rc, fs_sublist *sl, const fs_error *err, size_t size)
{
    CHECK(rc == FS_EBADDATA || rc == FS_ENOMEM);
    CHECK(sl == NULL);
    if (rc == FS_EBADDATA) {
        CHECK(err->reason != NULL);
        if (err->pos > size)
            fprintf(stderr, "fuzz_image: refused (%s) at byte %zu of %zu\n", err->reason, err->pos, size);
        CHECK(err->pos <= size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t ctl = size ? data[size - 1] : 0;
    /* exactly the input's size, so that ASan sees any read past it */
    unsigned char *buf = malloc(size ? size : 1);
    CHECK(buf != NULL && ((uintptr_t)buf & 7) == 0);
    if (size)
        memcpy(buf, data, size);
    if (!(ctl & 1) && size >= FS_IMG_OBJECTS + 8) {
        uint64_t P = size - FS_SERIAL_HEADER - 8;
        put64(buf + 16, P);
        put64(buf + ROOT_OBJECTS_END, FS_SERIAL_HEADER + P);
        put64(buf + FS_SERIAL_HEADER + P, image_checksum(buf, FS_SERIAL_HEADER + P));
    }
    fs_error err = {NULL, 0, 0};
    fs_sublist *sl1 = NULL, *sl0 = NULL;

    if ((ctl & 2) && size) {               /* at an odd address: refused */
        unsigned char *odd = malloc(size + 1);
        CHECK(odd != NULL);
        memcpy(odd + 1, buf, size);
        int rc = fs_image_open((const char *)odd + 1, size, 0, 1, &sl0, &err);
        CHECK(rc == FS_EBADDATA && sl0 == NULL);
        free(odd);
    }

    int rc1 = fs_image_open((const char *)buf, size, 1, 1, &sl1, &err);
    if (rc1 != FS_OK)
        check_refusal(rc1, sl1, &err, size);
    {   /* the full check on threads (forced for any size) gives the same verdict and error */
        fs_error errt = {NULL, 0, 0};
        fs_sublist *slt = NULL;
        size_t keep = fs_image_parallel_min;
        fs_image_parallel_min = 0;
        int rct = fs_image_open((const char *)buf, size, 1, 3, &slt, &errt);
        fs_image_parallel_min = keep;
        if (rct != FS_ENOMEM && rc1 != FS_ENOMEM) {
            CHECK(rct == rc1);
            if (rc1 == FS_EBADDATA)
                CHECK(strcmp(errt.reason, err.reason) == 0 && errt.pos == err.pos);
        }
        fs_sublist_free(slt);
    }
    int rc0 = fs_image_open((const char *)buf, size, 0, 1, &sl0, &err);
    if (rc0 != FS_OK)
        check_refusal(rc0, sl0, &err, size);
    if (rc1 == FS_OK)
        CHECK(rc0 == FS_OK);                /* verify=0 checks a subset */
    CHECK(fs_image_is((const char *)buf, size) || (rc1 != FS_OK && rc0 != FS_OK));

    subjects S = {{0}, {0}, 0};
    fs_dialect d = sl1 ? fs_sublist_dialect(sl1) : sl0 ? fs_sublist_dialect(sl0) : FS_NATS;
    for (size_t i = 0; i < sizeof(PROBES) / sizeof(PROBES[0]); i++)
        add_subject(&S, PROBES[i], strlen(PROBES[i]));
    if (sl1)
        add_listed(&S, sl1);
    add_input_words(&S, d, data, size);

    static answer A1[MAXS], A0[MAXS], AT[MAXS];
    size_t rev1[16], rev0[16];
    if (sl1) {
        int canonical = 0;       /* the thaw writes these bytes (the disorder run's condition) */
        /* a verified index: nothing in it is damaged, whatever is asked */
        exercise(sl1, &S, 1, A1, rev1);
        CHECK(!fs_image_damaged(sl1));
        /* it writes its own bytes (a version 3 image: as version 4, its
         * header's version and checksum changed) */
        char *w = NULL;
        size_t wn = 0;
        int rc = fs_image_write(sl1, &w, &wn);
        CHECK(rc == FS_OK || rc == FS_ENOMEM);
        if (rc == FS_OK) {
            CHECK(wn == size && memcmp(w + 10, buf + 10, size - 18) == 0 && memcmp(w, buf, 8) == 0);
            CHECK(w[8] == FS_IMAGE_VERSION && w[9] == 0);
            CHECK(fs_le_get((const unsigned char *)w + size - 8, 8) ==
                  fs_checksum_of(FS_IMAGE_VERSION, (const unsigned char *)w, size - 8));
        }
        FS_FREE(w);
        /* it answers as the index thawed from it, and that index's image
         * opens verified and answers the same again */
        fs_sublist *t = NULL;
        rc = fs_image_thaw(sl1, &t);
        CHECK(rc == FS_OK || rc == FS_ENOMEM);
        if (rc == FS_OK) {
            CHECK(fs_sublist_count(t) == fs_sublist_count(sl1));
            CHECK(!wildcard_tokens_bad(sl1));
            {
                size_t revt[16];
                exercise(t, &S, 1, AT, revt);
                same_answers(A1, AT, S.count);
                for (int i = 0; i < 10; i++)
                    CHECK(rev1[i] == revt[i] || rev1[i] == (size_t)-1 || revt[i] == (size_t)-1);
                char *w2 = NULL;
                size_t wn2 = 0;
                if (fs_image_write(t, &w2, &wn2) == FS_OK) {
                    canonical = wn2 == size && memcmp(w2, buf, size) == 0;
                    fs_sublist *again = NULL;
                    rc = fs_image_open(w2, wn2, 1, 1, &again, &err);
                    CHECK(rc == FS_OK || rc == FS_ENOMEM);
                    if (rc == FS_OK) {
                        CHECK(fs_sublist_count(again) == fs_sublist_count(sl1));
                        for (size_t i = 0; i < S.count && i < 8; i++)
                            ask(again, S.s[i], S.n[i], 1, 0, &AT[i]);
                        same_answers(A1, AT, S.count < 8 ? S.count : 8);
                        fs_sublist_free(again);
                    }
                    FS_FREE(w2);
                }
            }
            fs_sublist_free(t);
        }
        if ((ctl & 4) && canonical)
            run_disorder(sl1, buf, size, &S, A1);
    }
    if (sl0) {
        exercise(sl0, &S, sl1 != NULL, A0, rev0);
        if (sl1 && !fs_image_damaged(sl0))
            same_answers(A1, A0, S.count);
        int was_damaged = fs_image_damaged(sl0);
        /* a change: an insert and a remove through the live part, then the
         * walks that merge the live part with the image */
        const char *f = d == FS_MQTT ? "a/+" : "a.*";
        fs_spec sp = {f, 3, NULL, 0, INT64_MIN};
        int rc = fs_sublist_insert(sl0, &sp, &err);
        CHECK(rc == 0 || rc == 1 || rc == FS_ENOMEM);
        sp.filter = S.count > 1 ? S.s[1] : "a";
        sp.filter_len = S.count > 1 ? S.n[1] : 1;
        rc = fs_sublist_remove(sl0, &sp, &err);
        CHECK(rc == 0 || rc == 1 || rc == FS_EINVAL || rc == FS_ENOMEM);
        exercise(sl0, &S, sl1 != NULL, NULL, NULL);
        if (was_damaged)
            CHECK(fs_image_damaged(sl0));          /* damage stays reported */
        {
            fs_sublist *t = NULL;
            rc = fs_image_thaw(sl0, &t);
            CHECK(rc == FS_OK || rc == FS_ENOMEM || rc == FS_EBADDATA);
            CHECK((rc == FS_OK) == (t != NULL));
            fs_sublist_free(t);
        }
    }
    free_subjects(&S);
    fs_sublist_free(sl1);
    fs_sublist_free(sl0);
    free(buf);
    return 0;
}
