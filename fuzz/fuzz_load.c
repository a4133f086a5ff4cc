/* fuzz_load.c - libFuzzer harness: fs_sublist_load on arbitrary bytes.
 *
 * Each input is loaded twice (or three times, below): as it is (the envelope checks: magic,
 * version, lengths, checksum), and with its payload length and checksum
 * recomputed, so that mutations get past the checksum into the parser.
 * Whatever loads must round-trip: dump, load again, dump again (the second
 * and third images equal), give the same answers as the first index, and
 * still take inserts and removes.  And it must be a state that inserts
 * produce (docs/FORMAT.md, "Invariants a reader checks"): inserting every
 * subscription it lists into a new index adds each one once (a
 * subscription stored twice, say in the shape section and in the trie,
 * would be refused as present the second time) and gives an index with
 * the same count, listing and answers.  The structural checks are reached
 * through the second load, whose checksum is re-forged over the mutated
 * bytes, and a third (when the input's last byte is odd) that re-forges
 * the header's subscription and trie node counts as well.  Seeds: the golden files of tests/golden, and forged images with
 * a shape section and a trie side by side (valid ones, and issue 35's
 * duplicates, which must be refused), so that mutations explore the
 * invariants between the two.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_serial.h"
#include "sublist.h"

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz_load: check failed at %s:%d: %s\n", __FILE__,      \
                    __LINE__, #cond);                                               \
            abort();                                                                \
        }                                                                           \
    } while (0)

static const char *const PROBES[] = {
    "a", "a.b", "orders.eu.created", "orders.us", "$SYS.x", "x", "a*b.x>", "\xc3\xa9t\xc3\xa9.juin",
    "sport/tennis/player1", "sport", "a//b", "/x", "a/", "$share/x/y", "$SYS/x", "q", "b.a", "a/b",
};

static void dump_ok(fs_sublist *sl, char **buf, size_t *len)
{
    CHECK(fs_sublist_dump(sl, buf, len) == FS_OK);
    CHECK(*len >= FS_SERIAL_HEADER + FS_SERIAL_TRAILER);
}

static void same_answers(fs_sublist *a, fs_sublist *b)
{
    fs_scratch sc;
    fs_result ra, rb;
    fs_error err;
    fs_scratch_init(&sc);
    fs_result_init(&ra);
    fs_result_init(&rb);
    for (size_t i = 0; i < sizeof(PROBES) / sizeof(PROBES[0]); i++) {
        size_t n = strlen(PROBES[i]);
        int rca = fs_sublist_match(a, PROBES[i], n, &sc, &ra, &err);
        int rcb = fs_sublist_match(b, PROBES[i], n, &sc, &rb, &err);
        CHECK(rca == rcb);
        if (rca != FS_OK) continue;
        CHECK(ra.nids == rb.nids && ra.nplain == rb.nplain && ra.ngroups == rb.ngroups);
        uint64_t np, nq;
        CHECK(fs_sublist_interest(a, PROBES[i], n, &sc, &np, &nq, &err) == FS_OK);
        CHECK(np == ra.nplain && np + nq == ra.nids);
    }
    fs_result_free(&ra);
    fs_result_free(&rb);
    fs_scratch_free(&sc);
}

typedef struct {
    char *key;          /* filter \0 queue-or-empty \0 has_queue id, as bytes */
    size_t len;
} entry;

static int entry_cmp(const void *x, const void *y)
{
    const entry *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->key, b->key, n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* Every subscription whose filter intersects the universal filter ('>':
 * every NATS filter; '#': every AMQP filter, and every MQTT filter not
 * starting with a '$' level), sorted. */
static entry *listing(fs_sublist *sl, size_t *n)
{
    fs_scratch sc;
    fs_rresult r;
    fs_error err;
    fs_scratch_init(&sc);
    fs_rresult_init(&r);
    const char *all = fs_sublist_dialect(sl) == FS_NATS ? ">" : "#";
    int rc = fs_sublist_reverse_match(sl, all, 1, &sc, &r, &err);
    if (rc != FS_OK) fprintf(stderr, "reverse_match: %d\n", rc);
    CHECK(rc == FS_OK);
    entry *e = malloc(sizeof(entry) * (r.nhits + 1));
    CHECK(e != NULL);
    for (size_t i = 0; i < r.nhits; i++) {
        const fs_rhit *h = &r.hits[i];
        e[i].len = h->filter_len + h->queue_len + 2 + 1 + sizeof(int64_t);
        e[i].key = malloc(e[i].len);
        CHECK(e[i].key != NULL);
        char *p = e[i].key;
        if (h->filter_len) memcpy(p, r.arena + h->filter_off, h->filter_len);   /* arena NULL if all empty */
        p += h->filter_len;
        *p++ = 0;
        if (h->queue_len) memcpy(p, r.arena + h->queue_off, h->queue_len);
        p += h->queue_len;
        *p++ = 0;
        *p++ = (char)h->has_queue;
        memcpy(p, &h->id, sizeof(int64_t));
    }
    qsort(e, r.nhits, sizeof(entry), entry_cmp);
    *n = r.nhits;
    fs_rresult_free(&r);
    fs_scratch_free(&sc);
    return e;
}

static void same_listing(fs_sublist *a, fs_sublist *b)
{
    size_t na, nb;
    entry *ea = listing(a, &na), *eb = listing(b, &nb);
    CHECK(na == nb);
    if (fs_sublist_dialect(a) != FS_MQTT) CHECK(na == fs_sublist_count(a));
    for (size_t i = 0; i < na; i++) {
        CHECK(entry_cmp(&ea[i], &eb[i]) == 0);
        if (i) CHECK(entry_cmp(&ea[i - 1], &ea[i]) < 0);   /* each subscription once */
    }
    for (size_t i = 0; i < na; i++) free(ea[i].key);
    for (size_t i = 0; i < nb; i++) free(eb[i].key);
    free(ea);
    free(eb);
}

/* The loaded index sl is one that inserts build: its subscriptions,
 * inserted one by one into a new index, are each new, and the new index
 * counts, lists and answers the same.  MQTT's universal '#' does not list
 * the filters that start with '$', so there only the listing is compared. */
static void same_as_rebuilt(fs_sublist *sl)
{
    fs_scratch sc;
    fs_rresult r;
    fs_error err;
    fs_scratch_init(&sc);
    fs_rresult_init(&r);
    fs_dialect d = fs_sublist_dialect(sl);
    CHECK(fs_sublist_reverse_match(sl, d == FS_NATS ? ">" : "#", 1, &sc, &r, &err) == FS_OK);
    fs_sublist *fresh = fs_sublist_new(d);
    CHECK(fresh != NULL);
    for (size_t i = 0; i < r.nhits; i++) {
        const fs_rhit *h = &r.hits[i];
        /* The arena is NULL when every string in it is empty (AMQP's key
         * of zero words): no offset may be applied to it then. */
        const char *arena = r.arena ? r.arena : "";
        fs_spec sp = {r.arena ? arena + h->filter_off : arena, h->filter_len,
                      h->has_queue ? (r.arena ? arena + h->queue_off : arena) : NULL, h->queue_len, h->id};
        int rc = fs_sublist_insert(fresh, &sp, &err);
        if (rc != 1)
            fprintf(stderr, "fuzz_load: subscription %zu of %zu re-inserted: %d (%s)\n", i, r.nhits, rc,
                    rc < 0 && err.reason ? err.reason : "already there");
        CHECK(rc == 1);
    }
    if (d != FS_MQTT) {
        CHECK(fs_sublist_count(fresh) == fs_sublist_count(sl));
        same_answers(sl, fresh);
    }
    same_listing(sl, fresh);
    fs_sublist_free(fresh);
    fs_rresult_free(&r);
    fs_scratch_free(&sc);
}

static void try_load(const char *data, size_t size)
{
    fs_sublist *sl = NULL;
    fs_error err = {NULL, 0, 0};
    int rc = fs_sublist_load(data, size, &sl, &err);
    if (rc != FS_OK) {
        CHECK(rc == FS_EBADDATA || rc == FS_ENOMEM);
        CHECK(sl == NULL);
        if (rc == FS_EBADDATA) CHECK(err.reason != NULL && err.pos <= size);
        return;
    }
    CHECK(sl != NULL);
    uint64_t count = fs_sublist_count(sl);
    char *b1, *b2, *b3;
    size_t n1, n2, n3;
    dump_ok(sl, &b1, &n1);
    fs_sublist *sl2 = NULL, *sl3 = NULL;
    CHECK(fs_sublist_load(b1, n1, &sl2, &err) == FS_OK);
    CHECK(fs_sublist_count(sl2) == count && fs_sublist_dialect(sl2) == fs_sublist_dialect(sl));
    dump_ok(sl2, &b2, &n2);
    CHECK(fs_sublist_load(b2, n2, &sl3, &err) == FS_OK);
    dump_ok(sl3, &b3, &n3);
    /* The images hold the same records, but not necessarily in the same
     * order: a reloaded hash table may place colliding entries in other
     * slots.  So compare sizes, answers and what every index lists. */
    CHECK(n1 == n2 && n2 == n3);
    same_as_rebuilt(sl);
    same_answers(sl, sl2);
    same_listing(sl, sl3);
    fs_stats st;
    fs_sublist_stats(sl, &st);
    CHECK(st.subscriptions == count);

    /* the loaded index is a working index: a subscription goes in (unless
     * the image held it already) and comes out again */
    const char *f = fs_sublist_dialect(sl) == FS_MQTT ? "fuzz/+/new" : "fuzz.*.new";
    fs_spec sp = {f, strlen(f), NULL, 0, INT64_MIN};
    rc = fs_sublist_insert(sl, &sp, &err);
    CHECK(rc == 1 || rc == 0);
    CHECK(fs_sublist_remove(sl, &sp, &err) == 1);
    CHECK(fs_sublist_count(sl) == count - (rc == 0));
    CHECK(fs_sublist_set_cache(sl, 4) == FS_OK);
    same_answers(sl, sl3);

    fs_sublist_free(sl);
    fs_sublist_free(sl2);
    fs_sublist_free(sl3);
    FS_FREE(b1);
    FS_FREE(b2);
    FS_FREE(b3);
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A plain scan of the payload (docs/FORMAT.md's grammar, nothing checked
 * but the bounds) that counts subscriptions and trie nodes, so that the
 * third load can carry the header counts of the mutated structure: a
 * mutation that adds a node or an id (say, a copy of a shaped filter in
 * the trie) then reaches the structural checks instead of stopping at
 * "... count does not match the header". 0, or -1 where the scan runs out. */
typedef struct {
    const unsigned char *p;
    size_t pos, end;
    uint64_t subs, nodes;
} scan;

static int sc_uv(scan *s, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (s->pos >= s->end) return -1;
        unsigned char b = s->p[s->pos++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

static int sc_skip(scan *s)
{
    uint64_t n;
    if (sc_uv(s, &n) < 0 || n > s->end - s->pos) return -1;
    s->pos += n;
    return 0;
}

static int sc_ids(scan *s, uint64_t n)
{
    uint64_t v;
    for (uint64_t i = 0; i < n; i++)
        if (sc_uv(s, &v) < 0) return -1;
    s->subs += n;
    return 0;
}

static int sc_subs(scan *s)
{
    uint64_t v, ng, m;
    if (sc_uv(s, &v) < 0 || sc_ids(s, v >> 1) < 0) return -1;
    if (!(v & 1)) return 0;
    if (sc_uv(s, &ng) < 0) return -1;
    for (uint64_t i = 0; i < ng; i++)
        if (sc_skip(s) < 0 || sc_uv(s, &m) < 0 || sc_ids(s, m) < 0) return -1;
    return 0;
}

static int sc_record(scan *s, unsigned depth)
{
    uint64_t ch;
    if (depth > 4096 || sc_subs(s) < 0 || sc_uv(s, &ch) < 0) return -1;
    for (uint64_t i = 0; i < ch >> 2; i++) {
        s->nodes++;
        if (sc_skip(s) < 0 || sc_record(s, depth + 1) < 0) return -1;
    }
    for (unsigned w = 1; w <= 2; w++)
        if (ch & w) {
            s->nodes++;
            if (sc_record(s, depth + 1) < 0) return -1;
        }
    return 0;
}

static int scan_counts(const unsigned char *b, size_t payload, uint64_t *subs, uint64_t *nodes)
{
    scan s = {b, FS_SERIAL_HEADER, FS_SERIAL_HEADER + payload, 0, 0};
    unsigned version = (unsigned)(b[8] | b[9] << 8);
    uint64_t nlit = 0, nshaped = 0;
    for (int i = 0; i < 8; i++) nlit |= (uint64_t)b[32 + i] << (8 * i);
    for (uint64_t i = 0; i < nlit; i++)
        if (sc_skip(&s) < 0 || sc_subs(&s) < 0) return -1;
    if (version >= 2 && sc_uv(&s, &nshaped) < 0) return -1;
    for (uint64_t i = 0; i < nshaped; i++)
        if (sc_skip(&s) < 0 || sc_subs(&s) < 0) return -1;
    if (sc_record(&s, 0) < 0) return -1;
    *subs = s.subs;
    *nodes = s.nodes;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    try_load((const char *)data, size);
    if (size >= FS_SERIAL_HEADER + FS_SERIAL_TRAILER) {
        unsigned char *fixed = malloc(size);
        CHECK(fixed != NULL);
        memcpy(fixed, data, size);
        size_t payload = size - FS_SERIAL_HEADER - FS_SERIAL_TRAILER;
        put64(fixed + 16, payload);
        put64(fixed + FS_SERIAL_HEADER + payload, fs_serial_checksum(fixed, FS_SERIAL_HEADER + payload));
        try_load((const char *)fixed, size);
        /* The input's last byte (a checksum byte, re-forged anyway) selects
         * a third load: the header's subscription and trie node counts
         * re-forged too, from a scan of the mutated payload. */
        uint64_t subs, nodes;
        if ((data[size - 1] & 1) && scan_counts(fixed, payload, &subs, &nodes) == 0) {
            put64(fixed + 24, subs);
            put64(fixed + 40, nodes);
            put64(fixed + FS_SERIAL_HEADER + payload, fs_serial_checksum(fixed, FS_SERIAL_HEADER + payload));
            try_load((const char *)fixed, size);
        }
        free(fixed);
    }
    return 0;
}
