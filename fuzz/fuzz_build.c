/* fuzz_build.c - libFuzzer harness: the bulk builder (fs_build_image,
 * csrc/serial/fs_build.c) against the insert path.
 *
 * Input: byte 0 picks the dialect (bits 0-1: NATS, MQTT, AMQP, AMQP), the
 * threads (bits 2-3: 1 to 4) and the entry (bit 4: fs_build_rows -- or,
 * with bit 5, fs_build_columns of the same rows as columns (columns.h;
 * bits 6-7: pointers, or Arrow with int32 or int64 offsets; a plain row's
 * queue null) -- then fs_build_write twice, as
 * after FS_ENOSYS, both writes the same bytes; else fs_build_image); then
 * rows until the input runs out,
 * each a control byte and its arguments: a filter of up to 12 tokens from
 * a small per-dialect vocabulary (literals, the one-level and rest
 * wildcards anywhere, an empty token, '$' and non-ASCII words, a byte
 * that breaks the filter) or now and then 50-70 tokens (too deep for a
 * shape: the trie), so that filters collide, shapes run past the budget
 * (64), paths overlap in the trie, and rows are invalid; a queue (none,
 * one of a few, MQTT's "$share/G/" instead, or a bad one); an id from a
 * small set (duplicates).
 *
 * Tables of 8 entries and more are written on the threads (the Makefile's
 * FS_BUILD_PAR_ENTRIES for the fuzzers).
 *
 * Checks: fs_sublist_insert_many into a new index then fs_image_write, and
 * fs_build_image of the same rows, give the same status; on success the
 * same bytes; on an invalid row the same row, reason, byte and argument.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "columns.h"
#include "fs_image.h"
#include "sublist.h"

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "fuzz_build: check failed at %s:%d: %s\n", __FILE__,     \
                    __LINE__, #cond);                                                \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#define MAX_ROWS 512
#define MAX_BYTES 1024

typedef struct {
    const uint8_t *p;
    size_t n, i;
} rd;

static uint8_t u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static const char *const WORDS[3][10] = {
    {"a", "b", "c", "$x", "\xc3\xa9", "*", "*", ">", "a b", "d"},
    {"a", "b", "", "$x", "\xc3\xa9", "+", "+", "#", "a+", "$share"},
    {"a", "b", "", "$x", "\xc3\xa9", "*", "*", "#", "#", "c"},
};
static const char SEP[3] = {'.', '/', '.'};
static const char *const QUEUES[8] = {NULL, NULL, NULL, "q", "r", "q", "bad q", ""};
static const int64_t IDS[8] = {0, 1, 2, 3, -1, INT64_MAX, INT64_MIN, 7};

/* One filter into buf (at most MAX_BYTES): its length. */
static size_t make_filter(rd *r, int d, char *buf)
{
    uint8_t c = u8(r);
    size_t len = 0, ntok = c & 15;
    if (ntok > 12)
        ntok = 50 + (size_t)(ntok - 12) * 6;         /* deep: the trie */
    if ((c & 0x30) == 0x30 && d == 1) {             /* an MQTT share */
        memcpy(buf, "$share/g/", 9);
        len = 9;
    }
    for (size_t i = 0; i < ntok && len + 8 < MAX_BYTES; i++) {
        uint8_t w = u8(r);
        const char *t = i >= 12 ? "e" : WORDS[d][w % 10];
        if (i)
            buf[len++] = SEP[d];
        size_t tl = strlen(t);
        memcpy(buf + len, t, tl);
        len += tl;
        if (i >= 12 && w % 13 == 0)
            buf[len - 1] = (char)(d == 0 ? '*' : d == 1 ? '+' : '#');
    }
    if ((c & 0xc0) == 0xc0 && len)
        buf[u8(r) % len] = (char)u8(r);             /* a byte that may break it */
    return len;
}

/* The image of the rows through the insert path: status, bytes, *bad. */
static int by_inserts(fs_dialect d, const fs_spec *specs, size_t n, char **out, size_t *len, size_t *bad,
                      fs_error *err)
{
    fs_sublist *sl = fs_sublist_new(d);
    if (!sl)
        return FS_ENOMEM;
    size_t changed;
    int rc = fs_sublist_insert_many(sl, specs, n, &changed, bad, err);
    if (rc == FS_OK)
        rc = fs_image_write(sl, out, len);
    fs_sublist_free(sl);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size, 0};
    uint8_t head = u8(&r);
    int d = head & 3;
    d = d == 3 ? 2 : d;
    unsigned threads = 1u + ((head >> 2) & 3u);
    static char bufs[MAX_ROWS][MAX_BYTES];
    static fs_spec specs[MAX_ROWS];
    size_t n = 0;
    while (r.i < r.n && n < MAX_ROWS) {
        size_t len = make_filter(&r, d, bufs[n]);
        uint8_t q = u8(&r);
        specs[n] = (fs_spec){.filter = bufs[n], .filter_len = len, .queue = QUEUES[q & 7],
                             .queue_len = QUEUES[q & 7] ? strlen(QUEUES[q & 7]) : 0, .id = IDS[(q >> 3) & 7]};
        n++;
    }
    char *want = NULL, *got = NULL;
    size_t wlen = 0, glen = 0, wbad = 0, gbad = 0;
    fs_error werr, gerr;
    memset(&werr, 0, sizeof(werr));
    memset(&gerr, 0, sizeof(gerr));
    int wrc = by_inserts((fs_dialect)d, specs, n, &want, &wlen, &wbad, &werr);
    int grc;
    if (head & 16) {            /* in two steps, the image written twice (as after FS_ENOSYS): the same bytes */
        fs_build *b = NULL;
        fz_column fc, qc;
        if (head & 32) {            /* the same rows as columns, read in place */
            static const char *f[MAX_ROWS], *q[MAX_ROWS];
            static size_t fl[MAX_ROWS], ql[MAX_ROWS];
            static int64_t ids[MAX_ROWS];
            for (size_t i = 0; i < n; i++) {
                f[i] = specs[i].filter;
                fl[i] = specs[i].filter_len;
                q[i] = specs[i].queue;
                ql[i] = specs[i].queue_len;
                ids[i] = specs[i].id;
            }
            int layout = (head >> 6) % 3;
            fz_column_make(&fc, f, fl, n, layout);
            fz_column_make(&qc, q, ql, n, layout);
            grc = fs_build_columns((fs_dialect)d, &fc.col, ids, &qc.col, threads, &b, &gbad, &gerr);
        } else {
            grc = fs_build_rows((fs_dialect)d, specs, n, threads, &b, &gbad, &gerr);
        }
        CHECK((grc == FS_OK) == (b != NULL));
        if (grc == FS_OK) {
            char *first = NULL;
            size_t flen = 0;
            CHECK(fs_build_write(b, NULL, 0, &first, &flen) == FS_OK);
            grc = fs_build_write(b, NULL, 0, &got, &glen);
            CHECK(grc != FS_OK || (flen == glen && memcmp(first, got, flen) == 0));
            FS_FREE(first);
        }
        fs_build_free(b);
        if (head & 32) {
            fz_column_free(&fc);
            fz_column_free(&qc);
        }
    } else {
        grc = fs_build_image((fs_dialect)d, specs, n, threads, NULL, 0, &got, &glen, &gbad, &gerr);
    }
    CHECK(wrc == grc);
    if (wrc == FS_OK) {
        CHECK(wlen == glen);
        CHECK(memcmp(want, got, wlen) == 0);
    } else if (wrc == FS_EINVAL) {
        CHECK(wbad == gbad);
        CHECK(strcmp(werr.reason, gerr.reason) == 0);
        CHECK(werr.pos == gerr.pos && werr.in_queue == gerr.in_queue);
        CHECK(!got && glen == 0);
    }
    FS_FREE(want);
    FS_FREE(got);
    return 0;
}
