/* fuzz_arrow.c - libFuzzer harness: hostile Arrow C Data Interface exports
 * (csrc/arrow/fs_arrow.h) built from the input bytes, read by the Arrow
 * reader.
 *
 * Input (a byte past the end reads as 0): byte 0 picks the kind (bits 0-1:
 * string, large_string, string_view, dictionary; bits 2-3 a dictionary's
 * values, as bits 0-1 without the dictionary; bits 4-6 the index format,
 * c C s S i I l L; bit 7: break the export, byte 4 says how); byte 1 holds
 * flags (bit 0: a validity bitmap; bit 1: null_count -1, else the count of
 * its zero bits or 0; bit 2: rows built sane -- offsets from lengths,
 * views and indices inside what they point at -- else raw bytes; bit 3: a
 * buffer a byte short; bit 4: offsets at an odd address; bit 5: a NULL data
 * buffer when it is empty; bit 6: the dictionary gets a bitmap too; bit 3
 * also puts some sane views, offsets and indices one past their buffer); byte
 * 2 the length (0-63), byte 3 the offset (0-15); then each buffer's
 * contents, as it is built.  Every buffer is its own allocation of exactly
 * its size, so ASan sees a read one byte outside it.
 *
 * Checked: the reader reads nothing outside what it was given (ASan); the
 * kind of the schema is what was built; a refusal is clean (a reason, a
 * row inside the array, a message that fits); fs_arrow_rows accepts an
 * export exactly when every row of it (and of its dictionary) decodes by
 * the plain reading below, which bounds every read by itself, and then
 * gives each row exactly that decoding, inside one of the given buffers; a
 * row fault names the first bad row; fs_arrow_strings (in place) and
 * fs_arrow_indices_of agree with fs_arrow_rows, row by row; a broken export
 * (wrong buffer count, no buffer list, children, released, negative or
 * overflowing length or offset, a size missing or negative, a dictionary
 * missing or extra, a format or an extension type that is not text) is
 * refused or, for a type, reported as not text.  The Python layer's own
 * path (fs_arrow_export.c: the export held with its sizes, read alone, as
 * two chunks of one column, a dictionary's values alone, the refusal's
 * whole message) gives the same verdict and the same rows.  Comparing
 * with pyarrow's own view of the same buffers needs Python:
 * tests/test_arrow_reader.py does it (Hypothesis, pyarrow's to_pylist).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_arrow.h"
#include "fs_status.h"

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz_arrow: check failed at %s:%d: %s\n", __FILE__,     \
                    __LINE__, #cond);                                               \
            abort();                                                                \
        }                                                                           \
    } while (0)

/* ------------------------------------------------------------- the input */

typedef struct {
    const uint8_t *d;
    size_t n, at;
} reader;

static uint8_t u8(reader *r)
{
    return r->at < r->n ? r->d[r->at++] : 0;
}

/* ------------------------------------------------------------- buffers */

#define MAX_ALLOCS 32

/* Every allocation, to free and to find a row's bytes in. */
typedef struct {
    uint8_t *base[MAX_ALLOCS];      /* what malloc returned */
    const uint8_t *p[MAX_ALLOCS];   /* the buffer (base, or base + 1: odd) */
    int64_t size[MAX_ALLOCS];
    int n;
} pool;

static uint8_t *new_buffer(pool *pl, int64_t size, int odd)
{
    CHECK(pl->n < MAX_ALLOCS && size >= 0);
    uint8_t *base = malloc((size_t)size + (odd ? 1 : 0));
    CHECK(base != NULL);
    pl->base[pl->n] = base;
    pl->p[pl->n] = base + (odd ? 1 : 0);
    pl->size[pl->n] = size;
    pl->n++;
    return base + (odd ? 1 : 0);
}

static int inside_a_buffer(const pool *pl, const char *p, size_t len)
{
    for (int k = 0; k < pl->n; k++) {
        const char *b = (const char *)pl->p[k];
        if (p >= b && (size_t)(p - b) <= (size_t)pl->size[k] && len <= (size_t)pl->size[k] - (size_t)(p - b))
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------- building */

typedef struct {
    struct ArrowArray a;
    const void *bufs[8];
    int64_t sizes[8];
    int64_t var_sizes[4];
} built;

static void release_array(struct ArrowArray *a)
{
    a->release = NULL;
}

static void release_schema(struct ArrowSchema *s)
{
    s->release = NULL;
}

enum { F_BITMAP = 1, F_UNKNOWN_NULLS = 2, F_SANE = 4, F_SHORT = 8, F_ODD = 16, F_NULL_DATA = 32, F_DICT_BITS = 64 };

static const char *const VALUE_FORMATS[4] = {"u", "U", "vu", "vu"};
static const char *const INDEX_FORMATS[8] = {"c", "C", "s", "S", "i", "I", "l", "L"};

/* The validity bitmap (flags & F_BITMAP) of rows [off, off + n), and the
 * null count the array declares. */
static void build_bitmap(reader *r, pool *pl, int flags, built *b)
{
    b->a.null_count = 0;
    b->bufs[0] = NULL;
    b->sizes[0] = 0;
    if (!(flags & F_BITMAP))
        return;
    int64_t bits = b->a.offset + b->a.length, size = (bits + 7) / 8, zeros = 0;
    if ((flags & F_SHORT) && size > 0 && (u8(r) & 3) == 0)
        size--;
    uint8_t *p = new_buffer(pl, size, 0);
    for (int64_t k = 0; k < size; k++)
        p[k] = u8(r);
    for (int64_t j = b->a.offset; j < bits && j / 8 < size; j++)
        zeros += !((p[j / 8] >> (j % 8)) & 1);
    b->bufs[0] = p;
    b->sizes[0] = size;
    b->a.null_count = (flags & F_UNKNOWN_NULLS) ? -1 : zeros;
}

/* "u" / "U": offsets (sane: from row lengths 0-7; raw: signed bytes), then
 * the data (sane: exactly long enough; raw: 0-63 bytes). */
static void build_offsets(reader *r, pool *pl, int flags, int wide, built *b)
{
    int64_t count = b->a.offset + b->a.length + 1, width = wide ? 8 : 4;
    int64_t size = count * width, at = 0;
    if ((flags & F_SHORT) && (u8(r) & 3) == 0)
        size -= 1 + u8(r) % width;
    if (size < 0)
        size = 0;
    uint8_t *p = new_buffer(pl, size, (flags & F_ODD) != 0);
    for (int64_t k = 0; k < count; k++) {
        int64_t v = (flags & F_SANE) ? at : (int8_t)u8(r);
        at += (flags & F_SANE) ? u8(r) % 8 : 0;
        if ((k + 1) * width <= size) {
            int32_t v32 = (int32_t)v;
            memcpy(p + k * width, wide ? (const void *)&v : (const void *)&v32, (size_t)width);
        }
    }
    int64_t data_size = (flags & F_SANE) ? at : u8(r) % 64;
    if ((flags & F_SANE) && (flags & F_SHORT) && data_size > 0 && (u8(r) & 3) == 0)
        data_size--;
    b->bufs[1] = p;
    b->sizes[1] = size;
    if (data_size == 0 && (flags & F_NULL_DATA)) {
        b->bufs[2] = NULL;
        b->sizes[2] = 0;
    } else {
        uint8_t *data = new_buffer(pl, data_size, 0);
        for (int64_t k = 0; k < data_size; k++)
            data[k] = u8(r);
        b->bufs[2] = data;
        b->sizes[2] = data_size;
    }
    b->a.n_buffers = 3;
}

/* One 16-byte view: sane, a length of 0-23 inline or inside a variadic
 * buffer; raw, a signed length and buffer index and offset. */
static void one_view(reader *r, int flags, int nvar, const int64_t *var_sizes, uint8_t *v)
{
    int32_t len, bi = 0, bo = 0;
    memset(v, 0, 16);
    if (flags & F_SANE) {
        len = u8(r) % 24;
        if (len > 12) {
            bi = nvar ? u8(r) % nvar : 0;
            int64_t room = nvar ? var_sizes[bi] - len : -1;
            if (room < 0)
                len = 12;
            else
                bo = (int32_t)(u8(r) % (room + 1));
            if ((flags & F_SHORT) && len > 12 && (u8(r) & 7) == 0)
                bo = (int32_t)(room + 1);        /* a byte past its buffer */
        }
    } else {
        len = (int8_t)u8(r);
        bi = (int8_t)u8(r) % (nvar + 2) - 1;
        bo = (int8_t)u8(r);
    }
    memcpy(v, &len, 4);
    for (int k = 4; k < 8; k++)
        v[k] = u8(r);
    if (len <= 12) {
        for (int k = 8; k < 16; k++)
            v[k] = u8(r);
    } else {
        memcpy(v + 8, &bi, 4);
        memcpy(v + 12, &bo, 4);
    }
}

/* "vu": 0-3 variadic buffers of 0-63 bytes, then the views (and the
 * interface's trailing buffer of the variadic buffers' sizes). */
static void build_views(reader *r, pool *pl, int flags, built *b)
{
    int nvar = u8(r) % 4;
    for (int k = 0; k < nvar; k++) {
        int64_t size = u8(r) % 64;
        uint8_t *p = (size == 0 && (flags & F_NULL_DATA)) ? NULL : new_buffer(pl, size, 0);
        for (int64_t i = 0; p && i < size; i++)
            p[i] = u8(r);
        b->bufs[2 + k] = p;
        b->sizes[2 + k] = p ? size : 0;
        b->var_sizes[k] = b->sizes[2 + k];
    }
    int64_t views = b->a.offset + b->a.length, size = views * 16;
    if ((flags & F_SHORT) && (u8(r) & 3) == 0)
        size -= 1 + u8(r) % 16;
    if (size < 0)
        size = 0;
    uint8_t *p = new_buffer(pl, size, 0);
    for (int64_t j = 0; j < views; j++) {
        uint8_t v[16];
        one_view(r, flags, nvar, b->var_sizes, v);
        if ((j + 1) * 16 <= size)
            memcpy(p + j * 16, v, 16);
        else if (j * 16 < size)
            memcpy(p + j * 16, v, (size_t)(size - j * 16));
    }
    b->bufs[1] = p;
    b->sizes[1] = size;
    b->bufs[2 + nvar] = b->var_sizes;
    b->sizes[2 + nvar] = 8 * nvar;
    b->a.n_buffers = 3 + nvar;
}

static void build_text(reader *r, pool *pl, int flags, int kind, built *b)
{
    memset(b, 0, sizeof *b);
    b->a.length = u8(r) % 64;
    b->a.offset = u8(r) % 16;
    b->a.buffers = b->bufs;
    b->a.release = release_array;
    build_bitmap(r, pl, flags, b);
    if (kind < 2)
        build_offsets(r, pl, flags, kind == 1, b);
    else
        build_views(r, pl, flags, b);
}

/* A dictionary's indices: sane, 0 to the dictionary's length (one past
 * it, rarely); raw, the bytes as they come. */
static void build_indices(reader *r, pool *pl, int flags, int fmt, int64_t values, built *b)
{
    int width = 1 << (fmt >> 1);
    int64_t count = b->a.offset + b->a.length, size = count * width;
    if ((flags & F_SHORT) && (u8(r) & 3) == 0)
        size -= 1 + u8(r) % width;
    if (size < 0)
        size = 0;
    uint8_t *p = new_buffer(pl, size, 0);
    for (int64_t j = 0; j < count; j++) {
        uint8_t raw[8];
        for (int k = 0; k < 8; k++)
            raw[k] = (flags & F_SANE) ? 0 : u8(r);
        if (flags & F_SANE) {
            uint64_t k = values > 0 ? u8(r) % (uint64_t)values : 0;
            if (u8(r) == 0xff)
                k = (uint64_t)values;    /* one past the dictionary */
            memcpy(raw, &k, 8);          /* little-endian: the low bytes */
        }
        for (int k = 0; k < width; k++)
            if (j * width + k < size)
                p[j * width + k] = raw[k];
    }
    b->bufs[1] = p;
    b->sizes[1] = size;
    b->a.n_buffers = 2;
}

/* ------------------------------------------------------------- the plain reading */

static int within(int64_t size, int64_t at, int64_t len)
{
    return at >= 0 && len >= 0 && at <= size && len <= size - at;
}

static int64_t read_int(const uint8_t *p, int width, int is_signed)
{
    uint64_t v = 0;
    memcpy(&v, p, (size_t)width);
    if (is_signed && width < 8 && (v >> (8 * width - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * width);
    return (int64_t)v;
}

/* Slot j's validity bit, read bounded: 1 valid (or no bitmap read: a
 * null count of 0, or no bitmap), 0 null, -1 the bitmap is too short. */
static int plain_valid(const built *b, int64_t j)
{
    const uint8_t *bits = b->bufs[0];
    if (b->a.null_count == 0 || !bits)
        return 1;
    if (!within(b->sizes[0], j / 8, 1))
        return -1;
    return (bits[j / 8] >> (j % 8)) & 1;
}

/* Row i of a text array, each read bounded by the buffer it reads: 0 null,
 * 1 with its bytes (pointer compared only when len > 0), -1 bad. */
static int plain_row(const built *b, int kind, int64_t i, const char **p, int64_t *len)
{
    int64_t j = b->a.offset + i;
    int valid = plain_valid(b, j);
    if (valid <= 0)
        return valid;
    const uint8_t *fixed = b->bufs[1];
    if (kind < 2) {
        int width = kind == 1 ? 8 : 4;
        if (!fixed || !within(b->sizes[1], j * width, 2 * width))
            return -1;
        int64_t a = read_int(fixed + j * width, width, 1), e = read_int(fixed + (j + 1) * width, width, 1);
        int64_t data_size = b->bufs[2] ? b->sizes[2] : 0;
        if (a < 0 || e < a || e > data_size)
            return -1;
        *p = b->bufs[2] ? (const char *)b->bufs[2] + a : NULL;
        *len = e - a;
        return 1;
    }
    if (!fixed || !within(b->sizes[1], j * 16, 16))
        return -1;
    int64_t ln = read_int(fixed + j * 16, 4, 1);
    if (ln < 0)
        return -1;
    *len = ln;
    if (ln <= 12) {
        *p = (const char *)fixed + j * 16 + 4;
        return 1;
    }
    int64_t bi = read_int(fixed + j * 16 + 8, 4, 1), bo = read_int(fixed + j * 16 + 12, 4, 1);
    int64_t nvar = b->a.n_buffers - 3;
    if (bi < 0 || bi >= nvar || !b->bufs[2 + bi] || !within(b->sizes[2 + bi], bo, ln))
        return -1;
    *p = (const char *)b->bufs[2 + bi] + bo;
    return 1;
}

/* Index i of a dictionary's indices: 0 null, 1 with *k in range, -1 bad. */
static int plain_index(const built *b, int fmt, int64_t values, int64_t i, int64_t *k)
{
    int64_t j = b->a.offset + i;
    int width = 1 << (fmt >> 1);
    int valid = plain_valid(b, j);
    if (valid <= 0)
        return valid;
    if (!b->bufs[1] || !within(b->sizes[1], j * width, width))
        return -1;
    *k = read_int((const uint8_t *)b->bufs[1] + j * width, width, (fmt & 1) == 0);
    return *k >= 0 && *k < values ? 1 : -1;
}

/* Whether an array's fixed-width buffer (offsets, views or indices: each
 * row's entry, and the offsets' one more) and its bitmap, when it is read,
 * hold every row: the interface's rule for a whole array, null rows too. */
static int plain_whole(const built *b, int64_t entry, int64_t extra)
{
    int64_t end = b->a.offset + b->a.length;
    if (b->a.length == 0)
        return 1;
    if (b->a.null_count != 0 && b->bufs[0] && !within(b->sizes[0], 0, (end + 7) / 8))
        return 0;
    return b->bufs[1] && within(b->sizes[1], 0, (end + extra) * entry);
}

/* The first bad row of a text array: -1 none, -2 the array as a whole. */
static int64_t first_bad_row(const built *b, int kind)
{
    if (!plain_whole(b, kind == 0 ? 4 : kind == 1 ? 8 : 16, kind < 2))
        return -2;
    for (int64_t i = 0; i < b->a.length; i++) {
        const char *p;
        int64_t len;
        if (plain_row(b, kind, i, &p, &len) < 0)
            return i;
    }
    return -1;
}

static int64_t first_bad_index(const built *b, int fmt, int64_t values)
{
    if (!plain_whole(b, 1 << (fmt >> 1), 0))
        return -2;
    for (int64_t i = 0; i < b->a.length; i++) {
        int64_t k;
        if (plain_index(b, fmt, values, i, &k) < 0)
            return i;
    }
    return -1;
}

/* ------------------------------------------------------------- breaking */

static char extension_metadata[64];

/* An export that breaks the interface, or a type that is not text: how
 * (byte 4) picks one.  Returns 1 when the type is no longer text. */
static int sabotage(int how, built *top, struct ArrowSchema *schema, fs_arrow_column *col, int dictionary)
{
    switch (how % 11) {
    case 0: top->a.n_buffers += 1; break;
    case 1: top->a.n_buffers = top->a.n_buffers > 2 ? top->a.n_buffers - 1 : 0; break;
    case 2: top->a.buffers = NULL; break;
    case 3: top->a.n_children = 1; break;
    case 4: top->a.release = NULL; break;
    case 5: top->a.length = -1 - top->a.length; break;
    case 6: top->a.offset = INT64_MAX - top->a.length / 2; break;
    case 7: col->n_sizes = col->n_sizes > 0 ? col->n_sizes - 1 : 0; break;
    case 8: top->sizes[1] = -8; break;
    case 9:
        if (dictionary)
            top->a.dictionary = NULL;
        else
            schema->format = "z";
        return !dictionary;
    default: {
        /* an extension type over the storage: not text */
        static const char key[] = "ARROW:extension:name", value[] = "x.uuid";
        int32_t one = 1, klen = (int32_t)(sizeof key - 1), vlen = (int32_t)(sizeof value - 1);
        char *m = extension_metadata;
        memcpy(m, &one, 4);
        memcpy(m + 4, &klen, 4);
        memcpy(m + 8, key, sizeof key - 1);
        memcpy(m + 8 + klen, &vlen, 4);
        memcpy(m + 12 + klen, value, sizeof value - 1);
        schema->metadata = m;
        return 1;
    }
    }
    return 0;
}

/* ------------------------------------------------------------- checking */

static void check_message(const fs_arrow_error *err)
{
    char small[17], big[256];
    fs_arrow_message(err, 1000, small, sizeof small);
    fs_arrow_message(err, 1000, big, sizeof big);
    CHECK(strlen(small) < sizeof small && strlen(big) > 0 && strlen(big) < sizeof big - 1);
    CHECK(strncmp(small, big, sizeof small - 1) == 0);
}

static void check_refusal(const fs_arrow_error *err, int64_t length, int64_t dict_length)
{
    CHECK(err->fault > FS_ARROW_OK && err->fault <= FS_ARROW_BAD_INDEX);
    if (err->fault == FS_ARROW_MALFORMED)
        CHECK(err->detail != NULL);
    if (err->fault >= FS_ARROW_BAD_OFFSETS && err->fault != FS_ARROW_SHORT_VIEWS &&
        err->fault != FS_ARROW_SHORT_INDICES)
        CHECK(err->row >= 0 && err->row < (err->in_dictionary ? dict_length : length));
    check_message(err);
}

/* An accepted column's rows against the plain reading, each inside a buffer. */
static void check_rows(const pool *pl, const built *top, const built *dict, int kind, int vkind, int fmt,
                       const char **ptrs, const size_t *lens)
{
    for (int64_t i = 0; i < top->a.length; i++) {
        const char *p = NULL;
        int64_t len = 0, k;
        int got;
        if (kind == FS_ARROW_DICTIONARY) {
            got = plain_index(top, fmt, dict->a.length, i, &k);
            CHECK(got >= 0);
            if (got)
                got = plain_row(dict, vkind, k, &p, &len);
        } else {
            got = plain_row(top, vkind, i, &p, &len);
        }
        CHECK(got >= 0);
        CHECK((ptrs[i] != NULL) == (got == 1));
        if (got) {
            CHECK(lens[i] == (size_t)len);
            if (len > 0) {
                CHECK(ptrs[i] == p);
                CHECK(inside_a_buffer(pl, ptrs[i], lens[i]));
            }
        } else {
            CHECK(lens[i] == 0);
        }
    }
}

/* fs_arrow_strings (u/U) and fs_arrow_indices_of (dictionaries) against
 * fs_arrow_rows' verdict and rows. */
static void check_other_calls(const fs_arrow_column *col, const built *top, int kind, int rows_rc,
                              const char **ptrs, const size_t *lens)
{
    fs_arrow_error err;
    if (kind == FS_ARROW_OFFSETS) {
        fs_strings s;
        int rc = fs_arrow_strings(col, &s, &err);
        CHECK(rows_rc == FS_OK ? (rc == FS_OK || rc == FS_ENOSYS) : rc == FS_EBADDATA);
        if (rc == FS_ENOSYS)
            CHECK(top->a.length > 0 && (uintptr_t)top->bufs[1] % (col->schema->format[0] == 'U' ? 8u : 4u) != 0);
        for (int64_t i = 0; rc == FS_OK && i < top->a.length; i++) {
            const char *p;
            size_t len;
            int got = fs_strings_get(&s, (size_t)i, &p, &len);
            CHECK(got == (ptrs[i] != NULL));
            CHECK(!got || (len == lens[i] && (len == 0 || p == ptrs[i])));
        }
    }
    if (kind == FS_ARROW_DICTIONARY) {
        fs_arrow_indices x;
        int rc = fs_arrow_indices_of(col, &x, &err);
        CHECK(rc == rows_rc);
        for (int64_t i = 0; rc == FS_OK && i < x.length; i++) {
            int64_t k;
            int got = fs_arrow_index_at(&x, i, &k);
            CHECK(!got || (k >= 0 && k < x.values));
            if (!got)
                CHECK(ptrs[i] == NULL);
        }
    }
}

/* A refusal of an export that breaks nothing: the plain reading finds a
 * bad row too, and a row fault names the first. */
static void check_refusal_is_right(const fs_arrow_error *err, const built *top, const built *dict, int kind,
                                   int vkind, int fmt)
{
    int64_t bad_values = kind == FS_ARROW_DICTIONARY ? first_bad_row(dict, vkind) : -1;
    int64_t bad_rows = kind == FS_ARROW_DICTIONARY ? first_bad_index(top, fmt, dict->a.length)
                                                   : first_bad_row(top, vkind);
    /* the values are checked first; a row fault is the first bad row, a
     * buffer too short one of the whole array */
    int64_t bad = err->in_dictionary ? bad_values : bad_rows;
    if (!err->in_dictionary)
        CHECK(bad_values == -1);
    CHECK(bad != -1);
    CHECK(err->row >= 0 ? err->row == bad : bad == -2);
}

/* The Python layer's path (fs_arrow_export.c) over the same export: held
 * in an fs_arrow_export (a copy of the structs, the sizes given as the
 * layer gives them), read alone and as two chunks of one column (and a
 * dictionary's values alone), against fs_arrow_rows' verdict and rows;
 * every refusal's whole message fits. */
static void check_export_path(const fs_arrow_column *col, int rows_rc, const fs_arrow_error *rows_err,
                              const char **ptrs, const size_t *lens)
{
    fs_arrow_export *e = fs_arrow_exports_new(2);
    CHECK(e != NULL);
    for (int k = 0; k < 2; k++) {
        e[k].array = *col->array;
        e[k].schema = *col->schema;
        CHECK(fs_arrow_export_kind(&e[k]) == fs_arrow_kind(col->schema));
        int64_t *at = fs_arrow_export_sizes(&e[k], col->n_sizes, col->n_dict_sizes);
        CHECK(at != NULL);
        if (col->n_sizes)
            memcpy(at, col->sizes, sizeof(int64_t) * (size_t)col->n_sizes);
        if (col->n_dict_sizes)
            memcpy(at + col->n_sizes, col->dict_sizes, sizeof(int64_t) * (size_t)col->n_dict_sizes);
    }
    int64_t n = col->array->length;
    for (size_t chunks = 1; chunks <= 2; chunks++) {
        fs_arrow_text t;
        fs_arrow_error err;
        char msg[512];
        int rc = fs_arrow_text_read(&t, e, chunks, 0, &err);
        CHECK(rc == rows_rc || (rows_rc == FS_EBADDATA && rc == FS_EBADDATA));
        if (rc == FS_OK) {
            CHECK(t.s.n == (size_t)n * chunks);
            for (size_t i = 0; i < t.s.n; i++) {
                const char *p;
                size_t len;
                size_t j = i % (size_t)n;
                int got = fs_strings_get(&t.s, i, &p, &len);
                CHECK(got == (ptrs[j] != NULL));
                CHECK(!got || (len == lens[j] && (len == 0 || p == ptrs[j])));
            }
        } else {
            /* a refusal of the first chunk, as fs_arrow_rows made it */
            CHECK((err.fault == rows_err->fault && err.row == rows_err->row) || err.fault == FS_ARROW_MALFORMED);
            fs_arrow_describe(&err, "subjects", 7, msg, sizeof msg);
            CHECK(strncmp(msg, "subjects", 8) == 0 && strlen(msg) < sizeof msg - 1);
        }
        fs_arrow_text_free(&t);
    }
    if (rows_rc == FS_OK && e[0].kind == FS_ARROW_DICTIONARY) {
        fs_arrow_text t;
        fs_arrow_error err;
        CHECK(fs_arrow_text_read(&t, e, 1, 1, &err) == FS_OK);
        CHECK((int64_t)t.s.n == col->array->dictionary->length);
        fs_arrow_text_free(&t);
    }
    fs_arrow_exports_free(e, 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0};
    pool pl = {{0}, {0}, {0}, 0};
    uint8_t b0 = u8(&r), flags = u8(&r);
    int top_kind = b0 & 3, vkind = top_kind == 3 ? (b0 >> 2) & 3 : top_kind, fmt = (b0 >> 4) & 7;
    int broken = (b0 >> 7) & 1, how = u8(&r);
    int kind = top_kind == 3 ? FS_ARROW_DICTIONARY : top_kind == 2 ? FS_ARROW_VIEWS : FS_ARROW_OFFSETS;
    if (vkind == 3)
        vkind = 2;
    static built top, dict;
    struct ArrowSchema schema, dschema;
    memset(&schema, 0, sizeof schema);
    memset(&dschema, 0, sizeof dschema);
    memset(&dict, 0, sizeof dict);
    if (kind == FS_ARROW_DICTIONARY) {
        build_text(&r, &pl, (flags & F_DICT_BITS) ? flags : (flags & ~F_BITMAP), vkind, &dict);
        memset(&top, 0, sizeof top);
        top.a.length = u8(&r) % 64;
        top.a.offset = u8(&r) % 16;
        top.a.buffers = top.bufs;
        top.a.release = release_array;
        build_bitmap(&r, &pl, flags, &top);
        build_indices(&r, &pl, flags, fmt, dict.a.length, &top);
        top.a.dictionary = &dict.a;
        dschema.format = VALUE_FORMATS[vkind];
        dschema.release = release_schema;
        schema.format = INDEX_FORMATS[fmt];
        schema.dictionary = &dschema;
    } else {
        build_text(&r, &pl, flags, vkind, &top);
        schema.format = VALUE_FORMATS[vkind];
    }
    schema.release = release_schema;
    fs_arrow_column col = {&top.a, &schema, top.sizes, kind == FS_ARROW_VIEWS ? top.a.n_buffers - 1 : top.a.n_buffers,
                           dict.sizes, dict.a.n_buffers ? (vkind == 2 ? dict.a.n_buffers - 1 : dict.a.n_buffers) : 0};
    int not_text = broken ? sabotage(how, &top, &schema, &col, kind == FS_ARROW_DICTIONARY) : 0;

    CHECK(fs_arrow_kind(&schema) == (not_text ? FS_ARROW_NOT_TEXT : kind));
    int64_t n = top.a.length > 0 && top.a.length < 64 ? top.a.length : 0;
    const char *ptrs[64];
    size_t lens[64];
    fs_arrow_error err, err2;
    int rc = fs_arrow_rows(&col, ptrs, lens, &err);
    int rc2 = fs_arrow_rows(&col, NULL, NULL, &err2);
    CHECK(rc == FS_OK || rc == FS_EBADDATA);
    CHECK(rc == rc2 && (rc == FS_OK || (err.fault == err2.fault && err.row == err2.row)));
    if (rc != FS_OK)
        check_refusal(&err, n, dict.a.length);
    if (not_text)
        CHECK(rc == FS_EBADDATA && err.fault == FS_ARROW_TYPE);
    if (!broken) {
        if (rc == FS_OK) {
            CHECK(first_bad_row(kind == FS_ARROW_DICTIONARY ? &dict : &top, vkind) == -1);
            check_rows(&pl, &top, &dict, kind, vkind, fmt, ptrs, lens);
        } else {
            check_refusal_is_right(&err, &top, &dict, kind, vkind, fmt);
        }
        check_other_calls(&col, &top, kind, rc, ptrs, lens);
    } else if (rc == FS_OK) {
        for (int64_t i = 0; i < n; i++)
            CHECK(!ptrs[i] || lens[i] == 0 || inside_a_buffer(&pl, ptrs[i], lens[i]));
    }
    if (n == top.a.length)
        check_export_path(&col, rc, &err, ptrs, lens);
    fs_arrow_release(&top.a, &schema);
    CHECK(top.a.release == NULL && schema.release == NULL);
    for (int k = 0; k < pl.n; k++)
        free(pl.base[k]);
    return 0;
}
