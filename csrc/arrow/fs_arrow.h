/* fs_arrow.h - a column of strings read from Arrow's C Data Interface
 * (https://arrow.apache.org/docs/format/CDataInterface.html), every read
 * through it checked first.
 *
 * The Python layer exports each pyarrow array it is given (string, large_
 * string, string_view, or dictionary-encoded with one of those as values)
 * through the interface and hands the two structs here, with the size of
 * each buffer, which the interface leaves out and pyarrow knows.  pyarrow
 * validates an array only when asked (Array.from_buffers does not), and a
 * buffer may be changed in place after it did: so nothing an export says is
 * trusted before it is checked against those sizes -- buffer counts, null
 * buffers, offsets (monotonic per row, inside the data), views (length,
 * buffer index, offset inside that buffer), the validity bitmap's size,
 * dictionary indices (inside the dictionary, negatives included).  A
 * refusal names the row and the reason (fs_arrow_error), for the Python
 * layer's ValueError.  Null rows are never read, so their offsets, views
 * and indices may be anything.
 *
 * The reader sits on the rules layer (it fills an fs_strings) and nothing
 * in the core calls it: it is the Python layer's door for Arrow columns,
 * and fuzz/fuzz_arrow.c's target.
 */
#ifndef FS_ARROW_H
#define FS_ARROW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "fs_strings.h"

/* The C Data Interface's two structs, as its specification defines them
 * (an ABI: any producer's structs are these; the guard lets another
 * definition of the same ABI come first). */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

/* What a type is, as a column of strings (its schema's format). */
enum {
    FS_ARROW_NOT_TEXT = 0,      /* anything else: a TypeError in Python */
    FS_ARROW_OFFSETS = 1,       /* "u" string, "U" large_string: read in place */
    FS_ARROW_VIEWS = 2,         /* "vu" string_view */
    FS_ARROW_DICTIONARY = 3     /* integer indices ("cCsSiIlL") into one of those */
};

/* One array to read: the export, and the size in bytes of each of its
 * buffers (sizes[k] for array->buffers[k], k < n_sizes; a string_view's
 * last buffer, the variadic sizes the interface adds, need not be given:
 * it is not read), and of its dictionary's.  A NULL buffer has 0 bytes,
 * whatever its size says. */
typedef struct {
    const struct ArrowArray *array;
    const struct ArrowSchema *schema;
    const int64_t *sizes;
    int64_t n_sizes;
    const int64_t *dict_sizes;
    int64_t n_dict_sizes;
} fs_arrow_column;

/* Why a column was refused.  The too-short faults name the array's (or the
 * dictionary's) length and offset, the row faults the row, counted from the
 * array's first (its offset not included). */
enum {
    FS_ARROW_OK = 0,
    FS_ARROW_TYPE,            /* not a column of strings (fs_arrow_kind 0) */
    FS_ARROW_MALFORMED,       /* the export breaks the interface: detail says how */
    FS_ARROW_SHORT_BITMAP,    /* the validity bitmap is shorter than offset + length bits */
    FS_ARROW_SHORT_OFFSETS,   /* the offsets buffer is shorter than offset + length + 1 */
    FS_ARROW_BAD_OFFSETS,     /* row's offsets [a, b) are not within the data's c bytes */
    FS_ARROW_SHORT_VIEWS,     /* the views buffer is shorter than offset + length views */
    FS_ARROW_VIEW_LENGTH,     /* row's view has the negative length a */
    FS_ARROW_VIEW_OUTSIDE,    /* row's view of a bytes at [buffer b, offset c] is outside them */
    FS_ARROW_SHORT_INDICES,   /* the indices buffer is shorter than offset + length indices */
    FS_ARROW_BAD_INDEX        /* row's index a is outside the dictionary's b values */
};

typedef struct {
    int fault;                /* FS_ARROW_* above */
    int in_dictionary;        /* the fault is in the dictionary's values */
    int64_t row;
    int64_t length, offset;   /* of the array whose buffer is too short */
    int64_t a, b, c;
    const char *detail;       /* FS_ARROW_MALFORMED: a static phrase */
} fs_arrow_error;

/* err as the Python layer's message, NUL-terminated in buf (cut to size):
 * e.g. "row 7 has Arrow offsets [3, 2), not within the data buffer's 9
 * bytes", the row counted from row_base (the array's first row in a longer
 * column; a fault in a dictionary's values counts from its first value).
 * The argument's name and " (dictionary)" are the caller's. */
void fs_arrow_message(const fs_arrow_error *err, int64_t row_base, char *buf, size_t size);

/* The kind of column a schema is (FS_ARROW_NOT_TEXT .. FS_ARROW_DICTIONARY).
 * An extension type (metadata "ARROW:extension:name") is not text, whatever
 * its storage. */
int fs_arrow_kind(const struct ArrowSchema *schema);

/* An FS_ARROW_OFFSETS column, checked, as out's FS_STR_ARROW view of its
 * buffers in place.  FS_OK; FS_EBADDATA with err filled; FS_ENOSYS when
 * its offsets are not aligned for their width (the interface asks for
 * aligned buffers, but a buffer sliced from bytes is not), which only
 * fs_arrow_rows reads (byte by byte). */
int fs_arrow_strings(const fs_arrow_column *col, fs_strings *out, fs_arrow_error *err);

/* Any kind of column, checked, its rows written to ptrs/lens[0, length):
 * a pointer into the array's (or its dictionary's) buffers and a length;
 * ptrs[i] NULL for a null row (a null index, or an index of a null value).
 * ptrs NULL: check only.  FS_OK, or FS_EBADDATA with err filled. */
int fs_arrow_rows(const fs_arrow_column *col, const char **ptrs, size_t *lens, fs_arrow_error *err);

/* A dictionary column checked whole, its indices first (the order the
 * Python layer always reported them in), and its indices viewed for
 * fs_arrow_index_at: for a caller that reads the dictionary's values as a
 * column of their own (match_many matches each value once). */
typedef struct {
    const uint8_t *data;
    const uint8_t *validity;  /* NULL: no null index */
    int64_t offset, length;
    int64_t values;           /* the dictionary's length */
    int width;                /* bytes per index: 1, 2, 4, 8 */
    int is_signed;
} fs_arrow_indices;

int fs_arrow_indices_of(const fs_arrow_column *col, fs_arrow_indices *out, fs_arrow_error *err);

/* Release an export: each struct whose release callback is set (the
 * interface's rule: a released struct has none). */
void fs_arrow_release(struct ArrowArray *array, struct ArrowSchema *schema);

/* The index of row i (0 <= i < x->length): 0 for a null row, else 1 with
 * *k in [0, x->values). */
static inline int fs_arrow_index_at(const fs_arrow_indices *x, int64_t i, int64_t *k)
{
    int64_t j = x->offset + i;
    if (x->validity && !((x->validity[j >> 3] >> (j & 7)) & 1))
        return 0;
    const uint8_t *p = x->data + (size_t)j * (size_t)x->width;
    switch (x->width) {
    case 1:
        *k = x->is_signed ? (int64_t)(int8_t)p[0] : (int64_t)p[0];
        return 1;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        *k = x->is_signed ? (int64_t)(int16_t)v : (int64_t)v;
        return 1;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        *k = x->is_signed ? (int64_t)(int32_t)v : (int64_t)v;
        return 1;
    }
    default: {
        /* an unsigned index past INT64_MAX reads as negative: out of range */
        uint64_t v;
        memcpy(&v, p, 8);
        *k = (int64_t)v;
        return 1;
    }
    }
}

/* ---- Exports held, and columns of their rows (fs_arrow_export.c) --------
 *
 * The Python layer's whole use of the reader: it hands the producer
 * (pyarrow's _export_to_c) the two structs of an fs_arrow_export, asks
 * its kind, writes its buffers' sizes (and its dictionary's) where
 * fs_arrow_export_sizes says, and reads one or more exports as one column
 * (fs_arrow_text_read); a refusal is its whole message (fs_arrow_describe).
 * fuzz/fuzz_arrow.c goes through these too. */

/* A string array has 3 buffers, a dictionary of them 5: their sizes fit
 * inline; only string_view's variadic buffers can take more. */
#define FS_ARROW_INLINE_SIZES 8

typedef struct {
    struct ArrowArray array;      /* the producer's (zeroed: released) */
    struct ArrowSchema schema;
    fs_arrow_column col;          /* the two and the sizes, for the reader */
    int kind;                     /* fs_arrow_export_kind's answer */
    int64_t *sizes;               /* inline_sizes, or allocated past them */
    int64_t inline_sizes[FS_ARROW_INLINE_SIZES];
} fs_arrow_export;

/* n exports, zeroed, for producers to fill; NULL out of memory.  Freed
 * (each released) by fs_arrow_exports_free. */
fs_arrow_export *fs_arrow_exports_new(size_t n);
void fs_arrow_exports_free(fs_arrow_export *e, size_t n);

/* The kind of e's schema once its producer filled it (FS_ARROW_NOT_TEXT ..
 * FS_ARROW_DICTIONARY), kept in e->kind; e->col then views both structs. */
int fs_arrow_export_kind(fs_arrow_export *e);

/* Where the sizes in bytes of e's n buffers go, its dictionary's nd
 * after them (in pyarrow's order: Array.buffers(), then the dictionary's);
 * the caller writes them there.  NULL out of memory. */
int64_t *fs_arrow_export_sizes(fs_arrow_export *e, int64_t n, int64_t nd);

/* Release e's structs and free its sizes (e zeroed: freeing it again does
 * nothing). */
void fs_arrow_export_free(fs_arrow_export *e);

/* A column of strings read from exports: its rows in place (an offsets
 * array), or a pointer and a length per row (held here). */
typedef struct {
    fs_strings s;
    const char **ptrs;            /* NULL: in place */
    size_t *lens;
} fs_arrow_text;

/* The rows of chunks[0..n) (exports of a text kind), one after another,
 * into *t: in place when they are one aligned string or large_string
 * array, else a pointer and a length per row into the chunks' buffers (no
 * string copied).  values: read the dictionary's values of chunks[0]
 * instead (n 1; after fs_arrow_indices_of checked them).  FS_OK;
 * FS_EBADDATA with err filled, a row counted from chunks[0]'s first;
 * FS_ENOMEM.  *t is freed by fs_arrow_text_free, whatever came back. */
int fs_arrow_text_read(fs_arrow_text *t, const fs_arrow_export *chunks, size_t n, int values,
                       fs_arrow_error *err);
void fs_arrow_text_free(fs_arrow_text *t);

/* err as the whole message of the Python layer's ValueError, NUL-terminated
 * in buf: "<what>: <fs_arrow_message>", " (dictionary)" after what for a
 * fault in a dictionary's values; rows counted from row_base. */
void fs_arrow_describe(const fs_arrow_error *err, const char *what, int64_t row_base, char *buf, size_t size);

#endif
