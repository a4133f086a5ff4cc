/* fs_arrow.c - Arrow's C Data Interface read as a column of strings, every
 * read checked first (see fs_arrow.h). */
#include "fs_arrow.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fs_status.h"

/* One array of strings, opened: its rows [0, n) are at [off, off + n) of
 * its buffers, whose sizes are checked long enough for that; what each row
 * points at is checked row by row (text_row). */
typedef struct {
    int kind;                   /* FS_ARROW_OFFSETS or FS_ARROW_VIEWS */
    int wide;                   /* "U": 64-bit offsets */
    int in_dictionary;
    int64_t n, off;
    const uint8_t *bits;        /* the validity bitmap; NULL: no nulls */
    const uint8_t *fixed;       /* the offsets or the views */
    const char *data;           /* OFFSETS: the characters (never NULL) */
    int64_t data_size;
    const void *const *var;     /* VIEWS: the variadic data buffers */
    const int64_t *var_sizes;
    int64_t nvar;
} text;

/* Where a NULL data buffer points: its rows can only be empty. */
static const char no_data[1];

static int fail(fs_arrow_error *err, int fault, int in_dict, int64_t row, int64_t a, int64_t b, int64_t c)
{
    err->fault = fault;
    err->in_dictionary = in_dict;
    err->row = row;
    err->a = a;
    err->b = b;
    err->c = c;
    return FS_EBADDATA;
}

static int malformed(fs_arrow_error *err, int in_dict, const char *detail)
{
    fail(err, FS_ARROW_MALFORMED, in_dict, -1, 0, 0, 0);
    err->detail = detail;
    return FS_EBADDATA;
}

static int too_short(fs_arrow_error *err, int fault, int in_dict, int64_t n, int64_t off)
{
    fail(err, fault, in_dict, -1, 0, 0, 0);
    err->length = n;
    err->offset = off;
    return FS_EBADDATA;
}

/* A value type's kind from its format: "u", "U" (wide), "vu". */
static int value_kind(const char *f, int *wide)
{
    *wide = 0;
    if (!f)
        return FS_ARROW_NOT_TEXT;
    if (f[0] == 'u' && f[1] == 0)
        return FS_ARROW_OFFSETS;
    if (f[0] == 'U' && f[1] == 0) {
        *wide = 1;
        return FS_ARROW_OFFSETS;
    }
    if (f[0] == 'v' && f[1] == 'u' && f[2] == 0)
        return FS_ARROW_VIEWS;
    return FS_ARROW_NOT_TEXT;
}

/* An index format's width in bytes (0: not an integer), and its sign. */
static int index_width(const char *f, int *is_signed)
{
    static const char formats[] = "cCsSiIlL";
    if (!f || !f[0] || f[1])
        return 0;
    const char *at = strchr(formats, f[0]);
    if (!at)
        return 0;
    int k = (int)(at - formats);
    *is_signed = (k & 1) == 0;
    return 1 << (k >> 1);
}

static int32_t read_i32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Whether metadata (the interface's encoding: an int32 count, then each
 * key and value as an int32 length and its bytes) names an extension type.
 * Keys are compared in the encoding as they stand; a negative count or
 * length ends the scan. */
static int is_extension(const char *metadata)
{
    static const char key[] = "ARROW:extension:name";
    if (!metadata)
        return 0;
    const uint8_t *p = (const uint8_t *)metadata;
    int32_t pairs = read_i32(p);
    p += 4;
    for (int32_t i = 0; i < pairs; i++) {
        int32_t klen = read_i32(p);
        if (klen < 0)
            return 0;
        if ((size_t)klen == sizeof key - 1 && memcmp(p + 4, key, sizeof key - 1) == 0)
            return 1;
        p += 4 + (size_t)klen;
        int32_t vlen = read_i32(p);
        if (vlen < 0)
            return 0;
        p += 4 + (size_t)vlen;
    }
    return 0;
}

int fs_arrow_kind(const struct ArrowSchema *schema)
{
    int wide, is_signed;
    if (!schema || !schema->release || schema->n_children != 0 || is_extension(schema->metadata))
        return FS_ARROW_NOT_TEXT;
    const struct ArrowSchema *d = schema->dictionary;
    if (!d)
        return value_kind(schema->format, &wide);
    if (!index_width(schema->format, &is_signed) || d->dictionary || d->n_children != 0 ||
        is_extension(d->metadata) || value_kind(d->format, &wide) == FS_ARROW_NOT_TEXT)
        return FS_ARROW_NOT_TEXT;
    return FS_ARROW_DICTIONARY;
}

/* The checks every array of the interface needs before its buffers are
 * looked at: a live struct, a sane length and offset, the buffer count the
 * kind has, no children, a size for each buffer that is read. */
static int check_struct(const struct ArrowArray *a, int64_t want_buffers, int at_least,
                        int64_t n_sizes, int64_t need_sizes, int in_dict, fs_arrow_error *err)
{
    if (!a || !a->release)
        return malformed(err, in_dict, "the array is released or missing");
    if (a->length < 0 || a->offset < 0 || a->length > INT64_MAX - a->offset)
        return malformed(err, in_dict, "its length or offset is negative or overflows");
    if (at_least ? a->n_buffers < want_buffers : a->n_buffers != want_buffers)
        return malformed(err, in_dict, "it has the wrong number of buffers for its type");
    if (a->n_buffers > 0 && !a->buffers)
        return malformed(err, in_dict, "its buffer list is missing");
    if (a->n_children != 0)
        return malformed(err, in_dict, "a column of strings has no children");
    if (n_sizes < need_sizes)
        return malformed(err, in_dict, "the size of a buffer is missing");
    return FS_OK;
}

static int64_t size_of(const void *buffer, const int64_t *sizes, int64_t k)
{
    return buffer ? sizes[k] : 0;
}

/* The validity bitmap when the array says it may have nulls: long enough
 * for off + n bits, or SHORT_BITMAP. */
static int open_bits(const struct ArrowArray *a, const int64_t *sizes, int in_dict, const uint8_t **bits,
                     fs_arrow_error *err)
{
    *bits = NULL;
    if (a->null_count == 0 || !a->buffers[0])
        return FS_OK;
    int64_t end = a->offset + a->length;
    if (end / 8 + (end % 8 != 0) > sizes[0])
        return too_short(err, FS_ARROW_SHORT_BITMAP, in_dict, a->length, a->offset);
    *bits = (const uint8_t *)a->buffers[0];
    return FS_OK;
}

static int negative_size(const int64_t *sizes, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        if (sizes[k] < 0)
            return 1;
    return 0;
}

/* Open a "u" / "U" array: offsets long enough (checked before the bitmap,
 * as the Python layer always did), the data buffer's size kept for the
 * rows' checks. */
static int open_offsets(const struct ArrowArray *a, const int64_t *sizes, int64_t n_sizes, text *t,
                        fs_arrow_error *err)
{
    int rc = check_struct(a, 3, 0, n_sizes, 3, t->in_dictionary, err);
    if (rc != FS_OK)
        return rc;
    if (negative_size(sizes, 3))
        return malformed(err, t->in_dictionary, "a buffer's size is negative");
    t->n = a->length;
    t->off = a->offset;
    if (t->n == 0)
        return FS_OK;
    int64_t width = t->wide ? 8 : 4;
    if (t->off + t->n >= size_of(a->buffers[1], sizes, 1) / width)
        return too_short(err, FS_ARROW_SHORT_OFFSETS, t->in_dictionary, t->n, t->off);
    rc = open_bits(a, sizes, t->in_dictionary, &t->bits, err);
    if (rc != FS_OK)
        return rc;
    t->fixed = (const uint8_t *)a->buffers[1];
    t->data = a->buffers[2] ? (const char *)a->buffers[2] : no_data;
    t->data_size = size_of(a->buffers[2], sizes, 2);
    return FS_OK;
}

/* Open a "vu" array: the bitmap, then the views (16 bytes each) long
 * enough; its variadic buffers are buffers[2 .. n_buffers - 2] (the last is
 * the interface's list of their sizes, not read: sizes[] has them). */
static int open_views(const struct ArrowArray *a, const int64_t *sizes, int64_t n_sizes, text *t,
                      fs_arrow_error *err)
{
    int rc = check_struct(a, 3, 1, n_sizes, a ? a->n_buffers - 1 : 0, t->in_dictionary, err);
    if (rc != FS_OK)
        return rc;
    if (negative_size(sizes, a->n_buffers - 1))
        return malformed(err, t->in_dictionary, "a buffer's size is negative");
    t->n = a->length;
    t->off = a->offset;
    if (t->n == 0)
        return FS_OK;
    rc = open_bits(a, sizes, t->in_dictionary, &t->bits, err);
    if (rc != FS_OK)
        return rc;
    if (t->off + t->n > size_of(a->buffers[1], sizes, 1) / 16)
        return too_short(err, FS_ARROW_SHORT_VIEWS, t->in_dictionary, t->n, t->off);
    t->fixed = (const uint8_t *)a->buffers[1];
    t->var = a->buffers + 2;
    t->var_sizes = sizes + 2;
    t->nvar = a->n_buffers - 3;
    return FS_OK;
}

static int open_text(const struct ArrowArray *a, const char *format, const int64_t *sizes, int64_t n_sizes,
                     int in_dict, text *t, fs_arrow_error *err)
{
    memset(t, 0, sizeof *t);
    t->in_dictionary = in_dict;
    t->kind = value_kind(format, &t->wide);
    if (t->kind == FS_ARROW_OFFSETS)
        return open_offsets(a, sizes, n_sizes, t, err);
    if (t->kind == FS_ARROW_VIEWS)
        return open_views(a, sizes, n_sizes, t, err);
    return fail(err, FS_ARROW_TYPE, in_dict, -1, 0, 0, 0);
}

/* Row i of an opened array (0 <= i < t->n): 1 with its bytes, 0 for a null
 * row, -1 (err filled) when it points outside its buffers. */
static inline int text_row(const text *t, int64_t i, const char **p, size_t *len, fs_arrow_error *err)
{
    int64_t j = t->off + i;
    if (t->bits && !((t->bits[j >> 3] >> (j & 7)) & 1))
        return 0;
    if (t->kind == FS_ARROW_OFFSETS) {
        int64_t a, b;
        if (t->wide) {
            memcpy(&a, t->fixed + 8 * j, 8);
            memcpy(&b, t->fixed + 8 * j + 8, 8);
        } else {
            a = read_i32(t->fixed + 4 * j);
            b = read_i32(t->fixed + 4 * j + 4);
        }
        if (a < 0 || b < a || b > t->data_size) {
            fail(err, FS_ARROW_BAD_OFFSETS, t->in_dictionary, i, a, b, t->data_size);
            return -1;
        }
        *p = t->data + a;
        *len = (size_t)(b - a);
        return 1;
    }
    const uint8_t *view = t->fixed + 16 * j;
    int32_t ln = read_i32(view);
    if (ln < 0) {
        fail(err, FS_ARROW_VIEW_LENGTH, t->in_dictionary, i, ln, 0, 0);
        return -1;
    }
    *len = (size_t)ln;
    if (ln <= 12) {
        *p = (const char *)view + 4;
        return 1;
    }
    int32_t bi = read_i32(view + 8), bo = read_i32(view + 12);
    if (bi < 0 || bi >= t->nvar || bo < 0 || (int64_t)bo + ln > size_of(t->var[bi], t->var_sizes, bi)) {
        fail(err, FS_ARROW_VIEW_OUTSIDE, t->in_dictionary, i, ln, bi, bo);
        return -1;
    }
    *p = (const char *)t->var[bi] + bo;
    return 1;
}

/* Whether every row of an offsets array is within its data, null rows'
 * too: offsets in order, the first >= 0, the last within the data.  One
 * branch-free pass (~3 instructions a row, where text_row's checks cost
 * ~21 a row on every match_many over Arrow); a column it refuses is
 * checked row by row, which finds the row to name, or lets a null row's
 * offsets be what they are. */
static int offsets_in_order(const text *t)
{
    int64_t first, last;
    int bad = 0;
    if (t->wide) {
        const uint8_t *o = t->fixed + 8 * t->off;
        for (int64_t i = 0; i < t->n; i++) {
            int64_t a, b;
            memcpy(&a, o + 8 * i, 8);
            memcpy(&b, o + 8 * i + 8, 8);
            bad |= b < a;
        }
        memcpy(&first, o, 8);
        memcpy(&last, o + 8 * t->n, 8);
    } else {
        const uint8_t *o = t->fixed + 4 * t->off;
        for (int64_t i = 0; i < t->n; i++)
            bad |= read_i32(o + 4 * i + 4) < read_i32(o + 4 * i);
        first = read_i32(o);
        last = read_i32(o + 4 * t->n);
    }
    return !bad && first >= 0 && last <= t->data_size;
}

/* Every row of t checked, and written to ptrs/lens when ptrs is set. */
static int text_rows(const text *t, const char **ptrs, size_t *lens, fs_arrow_error *err)
{
    if (!ptrs && t->kind == FS_ARROW_OFFSETS && t->n > 0 && offsets_in_order(t))
        return FS_OK;
    const char *p = NULL;
    size_t len = 0;
    for (int64_t i = 0; i < t->n; i++) {
        int got = text_row(t, i, &p, &len, err);
        if (got < 0)
            return FS_EBADDATA;
        if (ptrs) {
            ptrs[i] = got ? p : NULL;
            lens[i] = got ? len : 0;
        }
    }
    return FS_OK;
}

/* The dictionary's values of a dictionary column, opened and checked. */
static int open_values(const fs_arrow_column *col, text *values, fs_arrow_error *err)
{
    const struct ArrowArray *d = col->array->dictionary;
    if (!d)
        return malformed(err, 1, "a dictionary column's dictionary is missing, released or of negative length");
    if (d->dictionary)
        return malformed(err, 1, "its dictionary is itself dictionary-encoded");
    int rc = open_text(d, col->schema->dictionary->format, col->dict_sizes, col->n_dict_sizes, 1, values, err);
    if (rc != FS_OK)
        return rc;
    return text_rows(values, NULL, NULL, err);
}

/* Open a dictionary column's indices: the bitmap, then the indices long
 * enough; each index is checked by check_index. */
static int open_indices(const fs_arrow_column *col, fs_arrow_indices *x, fs_arrow_error *err)
{
    const struct ArrowArray *a = col->array;
    memset(x, 0, sizeof *x);
    x->width = index_width(col->schema->format, &x->is_signed);
    int rc = check_struct(a, 2, 0, col->n_sizes, 2, 0, err);
    if (rc != FS_OK)
        return rc;
    if (negative_size(col->sizes, 2))
        return malformed(err, 0, "a buffer's size is negative");
    if (!a->dictionary || !a->dictionary->release || a->dictionary->length < 0)
        return malformed(err, 1, "a dictionary column's dictionary is missing, released or of negative length");
    x->values = a->dictionary->length;
    x->length = a->length;
    x->offset = a->offset;
    if (x->length == 0)
        return FS_OK;
    rc = open_bits(a, col->sizes, 0, &x->validity, err);
    if (rc != FS_OK)
        return rc;
    if (x->offset + x->length > size_of(a->buffers[1], col->sizes, 1) / x->width)
        return too_short(err, FS_ARROW_SHORT_INDICES, 0, x->length, x->offset);
    x->data = (const uint8_t *)a->buffers[1];
    return FS_OK;
}

static int check_index(const fs_arrow_indices *x, int64_t i, int64_t *k, fs_arrow_error *err)
{
    if (!fs_arrow_index_at(x, i, k))
        return 0;
    if (*k < 0 || *k >= x->values) {
        fail(err, FS_ARROW_BAD_INDEX, 0, i, *k, x->values, 0);
        return -1;
    }
    return 1;
}

/* The column's kind, or FS_ARROW_TYPE in err; MALFORMED when the array and
 * its schema disagree about a dictionary. */
static int column_kind(const fs_arrow_column *col, int *kind, fs_arrow_error *err)
{
    memset(err, 0, sizeof *err);
    err->row = -1;
    *kind = fs_arrow_kind(col->schema);
    if (*kind == FS_ARROW_NOT_TEXT)
        return fail(err, FS_ARROW_TYPE, 0, -1, 0, 0, 0);
    if (!col->array)
        return malformed(err, 0, "the array is released or missing");
    if ((*kind == FS_ARROW_DICTIONARY) != (col->array->dictionary != NULL))
        return malformed(err, 0, "the array and its type disagree about a dictionary");
    return FS_OK;
}

int fs_arrow_indices_of(const fs_arrow_column *col, fs_arrow_indices *out, fs_arrow_error *err)
{
    int kind;
    int64_t k;
    int rc = column_kind(col, &kind, err);
    if (rc != FS_OK)
        return rc;
    if (kind != FS_ARROW_DICTIONARY)
        return fail(err, FS_ARROW_TYPE, 0, -1, 0, 0, 0);
    rc = open_indices(col, out, err);
    if (rc != FS_OK)
        return rc;
    for (int64_t i = 0; i < out->length; i++)
        if (check_index(out, i, &k, err) < 0)
            return FS_EBADDATA;
    text values;
    return open_values(col, &values, err);
}

/* A dictionary column's rows: the values checked first, then the indices,
 * each row pointed at its value (a null value is a null row). */
static int dictionary_rows(const fs_arrow_column *col, const char **ptrs, size_t *lens, fs_arrow_error *err)
{
    text values;
    fs_arrow_indices x;
    int rc = open_values(col, &values, err);
    if (rc != FS_OK)
        return rc;
    rc = open_indices(col, &x, err);
    if (rc != FS_OK)
        return rc;
    for (int64_t i = 0; i < x.length; i++) {
        int64_t k;
        const char *p = NULL;
        size_t len = 0;
        int got = check_index(&x, i, &k, err);
        if (got < 0)
            return FS_EBADDATA;
        if (got)
            got = text_row(&values, k, &p, &len, err);     /* checked: never -1 */
        if (ptrs) {
            ptrs[i] = got > 0 ? p : NULL;
            lens[i] = got > 0 ? len : 0;
        }
    }
    return FS_OK;
}

int fs_arrow_rows(const fs_arrow_column *col, const char **ptrs, size_t *lens, fs_arrow_error *err)
{
    int kind;
    text t;
    int rc = column_kind(col, &kind, err);
    if (rc != FS_OK)
        return rc;
    if (kind == FS_ARROW_DICTIONARY)
        return dictionary_rows(col, ptrs, lens, err);
    rc = open_text(col->array, col->schema->format, col->sizes, col->n_sizes, 0, &t, err);
    if (rc != FS_OK)
        return rc;
    return text_rows(&t, ptrs, lens, err);
}

int fs_arrow_strings(const fs_arrow_column *col, fs_strings *out, fs_arrow_error *err)
{
    int kind;
    text t;
    int rc = column_kind(col, &kind, err);
    if (rc != FS_OK)
        return rc;
    if (kind != FS_ARROW_OFFSETS)
        return fail(err, FS_ARROW_TYPE, 0, -1, 0, 0, 0);
    rc = open_text(col->array, col->schema->format, col->sizes, col->n_sizes, 0, &t, err);
    if (rc == FS_OK)
        rc = text_rows(&t, NULL, NULL, err);
    if (rc != FS_OK)
        return rc;
    memset(out, 0, sizeof *out);
    out->layout = FS_STR_ARROW;
    out->n = (size_t)t.n;
    out->offset = t.off;
    out->validity = t.bits;
    out->data = t.data ? t.data : no_data;
    if (t.n == 0) {
        /* nothing is read: any aligned offsets will do */
        static const int64_t none[1];
        out->off64 = t.wide ? none : NULL;
        out->off32 = t.wide ? NULL : (const int32_t *)(const void *)none;
        return FS_OK;
    }
    if ((uintptr_t)t.fixed % (t.wide ? 8u : 4u) != 0)
        return FS_ENOSYS;
    out->off32 = t.wide ? NULL : (const int32_t *)(const void *)t.fixed;
    out->off64 = t.wide ? (const int64_t *)(const void *)t.fixed : NULL;
    return FS_OK;
}

void fs_arrow_message(const fs_arrow_error *err, int64_t row_base, char *buf, size_t size)
{
    int64_t row = (err->in_dictionary ? 0 : row_base) + err->row;
    int64_t n = err->length, off = err->offset;
    switch (err->fault) {
    case FS_ARROW_SHORT_BITMAP:
        snprintf(buf, size, "the Arrow validity bitmap is too short for %" PRId64 " rows at offset %" PRId64, n, off);
        break;
    case FS_ARROW_SHORT_OFFSETS:
        snprintf(buf, size, "the Arrow offsets buffer is too short for %" PRId64 " rows at offset %" PRId64, n, off);
        break;
    case FS_ARROW_SHORT_VIEWS:
        snprintf(buf, size, "the Arrow views buffer is too short for %" PRId64 " rows at offset %" PRId64, n, off);
        break;
    case FS_ARROW_SHORT_INDICES:
        snprintf(buf, size, "the Arrow dictionary indices buffer is too short for %" PRId64 " rows at offset %" PRId64,
                 n, off);
        break;
    case FS_ARROW_BAD_OFFSETS:
        snprintf(buf, size, "row %" PRId64 " has Arrow offsets [%" PRId64 ", %" PRId64 "), not within the data "
                 "buffer's %" PRId64 " bytes", row, err->a, err->b, err->c);
        break;
    case FS_ARROW_VIEW_LENGTH:
        snprintf(buf, size, "row %" PRId64 " has an Arrow view of length %" PRId64, row, err->a);
        break;
    case FS_ARROW_VIEW_OUTSIDE:
        snprintf(buf, size, "row %" PRId64 " has an Arrow view of %" PRId64 " bytes at [buffer %" PRId64 ", offset %"
                 PRId64 "], not within the array's data buffers", row, err->a, err->b, err->c);
        break;
    case FS_ARROW_BAD_INDEX:
        snprintf(buf, size, "row %" PRId64 " has dictionary index %" PRId64 ", outside the dictionary's %" PRId64
                 " values", row, err->a, err->b);
        break;
    case FS_ARROW_TYPE:
        snprintf(buf, size, "not a column of strings");
        break;
    default:
        snprintf(buf, size, "the Arrow array's export is malformed: %s", err->detail ? err->detail : "?");
    }
}

void fs_arrow_release(struct ArrowArray *array, struct ArrowSchema *schema)
{
    if (array && array->release)
        array->release(array);
    if (schema && schema->release)
        schema->release(schema);
}
