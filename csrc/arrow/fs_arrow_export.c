/* fs_arrow_export.c - exports held for the Python layer, and columns read
 * from one or more of them (see fs_arrow.h): what the extension once did
 * itself, here where fuzz/fuzz_arrow.c reaches it. */
#include "fs_arrow.h"

#include <stdio.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_status.h"

fs_arrow_export *fs_arrow_exports_new(size_t n)
{
    return FS_CALLOC(n ? n : 1, sizeof(fs_arrow_export));
}

void fs_arrow_exports_free(fs_arrow_export *e, size_t n)
{
    if (!e)
        return;
    for (size_t k = 0; k < n; k++)
        fs_arrow_export_free(&e[k]);
    FS_FREE(e);
}

int fs_arrow_export_kind(fs_arrow_export *e)
{
    e->col.array = &e->array;
    e->col.schema = &e->schema;
    e->kind = fs_arrow_kind(&e->schema);
    return e->kind;
}

int64_t *fs_arrow_export_sizes(fs_arrow_export *e, int64_t n, int64_t nd)
{
    if (n < 0 || nd < 0 || n > INT64_MAX / 2 / (int64_t)sizeof(int64_t) - nd)
        return NULL;
    if (e->sizes && e->sizes != e->inline_sizes)
        FS_FREE(e->sizes);
    e->sizes = n + nd <= FS_ARROW_INLINE_SIZES ? e->inline_sizes
                                               : FS_MALLOC(sizeof(int64_t) * (size_t)(n + nd));
    if (!e->sizes)
        return NULL;
    e->col.sizes = e->sizes;
    e->col.n_sizes = n;
    e->col.dict_sizes = e->sizes + n;
    e->col.n_dict_sizes = nd;
    return e->sizes;
}

void fs_arrow_export_free(fs_arrow_export *e)
{
    fs_arrow_release(&e->array, &e->schema);
    if (e->sizes && e->sizes != e->inline_sizes)
        FS_FREE(e->sizes);
    memset(e, 0, sizeof *e);
}

/* What chunk e is read as: itself, or (values) its dictionary's values,
 * a column of their own. */
static fs_arrow_column chunk_column(const fs_arrow_export *e, int values)
{
    if (!values)
        return e->col;
    fs_arrow_column v = {e->array.dictionary, e->schema.dictionary, e->col.dict_sizes, e->col.n_dict_sizes,
                         NULL, 0};
    return v;
}

/* The largest of a column's own buffer sizes: no array of strings (nor of
 * indices) has more rows than its largest buffer has bytes, so a length
 * past it is refused before anything is allocated for its rows. */
static int64_t largest_size(const fs_arrow_column *col)
{
    int64_t most = 0;
    for (int64_t k = 0; k < col->n_sizes; k++)
        if (col->sizes[k] > most)
            most = col->sizes[k];
    return most;
}

/* The rows of n columns one after another, a pointer and a length each.
 * Each column's length is checked against its buffers before the rows
 * are allocated; a refusal names the row in the whole column. */
static int read_rows(fs_arrow_text *t, const fs_arrow_column *cols, size_t n, fs_arrow_error *err)
{
    int64_t total = 0;
    for (size_t k = 0; k < n; k++) {
        const struct ArrowArray *a = cols[k].array;
        if (!a || a->length < 0 || a->length > largest_size(&cols[k]) || a->length > INT64_MAX / 16 - total) {
            int rc = fs_arrow_rows(&cols[k], NULL, NULL, err);      /* says what is wrong */
            if (rc == FS_OK) {
                memset(err, 0, sizeof *err);
                err->fault = FS_ARROW_MALFORMED;
                err->row = -1;
                err->detail = "its length is past its buffers";
            }
            return FS_EBADDATA;
        }
        total += a->length;
    }
    size_t rows = (size_t)total;
    t->ptrs = FS_MALLOC(sizeof(char *) * (rows ? rows : 1));
    t->lens = FS_MALLOC(sizeof(size_t) * (rows ? rows : 1));
    if (!t->ptrs || !t->lens)
        return FS_ENOMEM;
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        if (fs_arrow_rows(&cols[k], t->ptrs + at, t->lens + at, err) != FS_OK) {
            if (!err->in_dictionary && err->row >= 0)
                err->row += (int64_t)at;
            return FS_EBADDATA;
        }
        at += (size_t)cols[k].array->length;
    }
    t->s.layout = FS_STR_PTRS;
    t->s.n = rows;
    t->s.ptrs = t->ptrs;
    t->s.lens = t->lens;
    return FS_OK;
}

int fs_arrow_text_read(fs_arrow_text *t, const fs_arrow_export *chunks, size_t n, int values,
                       fs_arrow_error *err)
{
    fs_arrow_column one;
    fs_arrow_column *cols = &one;
    int rc;
    memset(t, 0, sizeof *t);
    memset(err, 0, sizeof *err);
    if (values && n != 1)
        return FS_EINVAL;
    if (n > 1 && !(cols = FS_MALLOC(sizeof(fs_arrow_column) * n)))
        return FS_ENOMEM;
    for (size_t k = 0; k < n; k++)
        cols[k] = chunk_column(&chunks[k], values);
    rc = FS_ENOSYS;
    if (n == 1 && fs_arrow_kind(cols[0].schema) == FS_ARROW_OFFSETS)
        rc = fs_arrow_strings(&cols[0], &t->s, err);       /* in place; ENOSYS: misaligned offsets */
    if (rc == FS_ENOSYS)
        rc = read_rows(t, cols, n, err);
    if (rc == FS_EBADDATA && values)
        err->in_dictionary = 1;
    if (cols != &one)
        FS_FREE(cols);
    return rc;
}

void fs_arrow_text_free(fs_arrow_text *t)
{
    FS_FREE(t->ptrs);
    FS_FREE(t->lens);
    memset(t, 0, sizeof *t);
}

void fs_arrow_describe(const fs_arrow_error *err, const char *what, int64_t row_base, char *buf, size_t size)
{
    char reason[256];
    fs_arrow_message(err, row_base, reason, sizeof reason);
    snprintf(buf, size, "%s%s: %s", what, err->in_dictionary ? " (dictionary)" : "", reason);
}
