/* A Python list's rows read as C, on the extension's two bulk paths:
 * match_many's subjects copied into a column's own chunks (tm_copies),
 * insert_many's rows made fs_specs (tm_specs_fill).  Each takes the usual
 * row -- a compact ASCII str; an exact int that fits in 64 bits -- on
 * borrowed pointers, running no Python code, and stops at the first other
 * row: the Cython layer converts that one (it may raise, or run Python
 * code, which may change the list) and calls again from the row after.
 * Here, not in csrc/, because the core has no Python.h; included by
 * _core.pyx alone, after Python.h. */
#ifndef TOPICMATCH_PYROWS_H
#define TOPICMATCH_PYROWS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "sublist.h"             /* fs_spec, FS_PREFETCH */

/* x is a str whose characters are its UTF-8 bytes: `type(x) is str and
 * PyUnicode_IS_COMPACT_ASCII(x)`, on a borrowed pointer. */
#define TM_IS_ASCII_STR(o) (Py_IS_TYPE((o), &PyUnicode_Type) && PyUnicode_IS_COMPACT_ASCII(o))

/* The characters of x, a compact ASCII str (TM_IS_ASCII_STR): right after
 * its header, in every CPython since 3.3.  (PyUnicode_DATA tests
 * compactness and ASCII again to choose between two places: three
 * instructions a row of match_many, callgrind, light.) */
static inline const char *tm_ascii_chars(PyObject *x)
{
    return (const char *)((PyASCIIObject *)x + 1);
}

/* An exact int's value when it is compact (one digit: below 2**30 in
 * magnitude), read from the object as Cython's own conversions do:
 * the usual sub_id, where PyLong_AsLongLongAndOverflow's call was ~25
 * instructions a row of insert_many (callgrind, light).  0 for any
 * other int (*v unset): the caller takes the general path. */
static inline int tm_compact_int(PyObject *o, long long *v)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)o))
        return 0;
    *v = (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
#else
    Py_ssize_t size = Py_SIZE(o);
    if (size < -1 || size > 1)
        return 0;
    *v = size == 0 ? 0 : size * (long long)((PyLongObject *)o)->ob_digit[0];
#endif
    return 1;
}

/* ------------------------------------------------ match_many's subjects
 *
 * A column's copies of its rows' UTF-8 bytes:
 *
 *   ptrs[i], lens[i]  row i: its copy (never NULL), or NULL and 0 for a
 *                     null row
 *   chunks            the copies, one after another, in chunks of
 *                     TM_CHUNK_BYTES (or of one longer row)
 *   cur, room         where the next copy goes, and the bytes left there
 *
 * Copied, the rows need no reference to their str objects (the tuple copy
 * and the decref pass that holding references cost took a third of a
 * cached batch's time), the matcher reads them one after another, and a
 * list another thread mutates later changes nothing here. */
#define TM_CHUNK_BYTES ((size_t)1 << 20)

typedef struct {
    const char **ptrs;
    size_t *lens;
    char **chunks;
    size_t nchunks;
    char *cur;
    size_t room;
} tm_copies;

/* c, all zeros, made ready for n rows (none set yet): 0; -1 with
 * MemoryError set (tm_copies_free frees what was allocated). */
static int tm_copies_init(tm_copies *c, size_t n)
{
    c->ptrs = (const char **)PyMem_Malloc(sizeof(char *) * (n ? n : 1));
    c->lens = (size_t *)PyMem_Malloc(sizeof(size_t) * (n ? n : 1));
    if (c->ptrs == NULL || c->lens == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void tm_copies_free(tm_copies *c)
{
    for (size_t k = 0; k < c->nchunks; k++)
        PyMem_Free(c->chunks[k]);
    PyMem_Free(c->chunks);
    PyMem_Free((void *)c->ptrs);
    PyMem_Free(c->lens);
    memset(c, 0, sizeof(*c));
}

/* Whether a copy of n bytes fits at cur, with room bytes left there.  (A
 * copy is never NULL, which is a null row: hence a chunk even for an empty
 * first row.) */
static inline int tm_copies_fit(const char *cur, size_t room, size_t n)
{
    return cur != NULL && n <= room;
}

/* Start a chunk of room for n bytes at least (c->cur, c->room): 0; -1
 * with MemoryError set. */
static int tm_copies_chunk(tm_copies *c, size_t n)
{
    size_t size = n > TM_CHUNK_BYTES ? n : TM_CHUNK_BYTES;
    char **grown = (char **)PyMem_Realloc(c->chunks, sizeof(char *) * (c->nchunks + 1));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->chunks = grown;
    c->cur = (char *)PyMem_Malloc(size);
    if (c->cur == NULL) {
        c->room = 0;
        PyErr_NoMemory();
        return -1;
    }
    c->chunks[c->nchunks++] = c->cur;
    c->room = size;
    return 0;
}

/* memcpy(dst, src, n) for tm_copies_fill.  The usual subject (16 to 32
 * bytes: every row of light's and heavy's publishes) is copied as two
 * 16-byte blocks that may overlap, each a fixed-size copy the compiler
 * writes in place: no call into libc, whose dispatch on n, with the
 * registers the call makes the loop save and reload, cost ~11
 * instructions a row of match_many (callgrind, light).  Nothing outside
 * src[0, n) is read. */
static inline void tm_copy_row(char *dst, const char *src, size_t n)
{
    if (n - 16 <= 16) {              /* 16 <= n <= 32 (n < 16 wraps: above) */
        memcpy(dst, src, 16);
        memcpy(dst + n - 16, src + n - 16, 16);
    } else {
        memcpy(dst, src, n);
    }
}

/* Copy rows [i, end) of rows into c while each is a compact ASCII str
 * (whose characters are its UTF-8 bytes: the usual row).  Returns the
 * first row that is not one, for the caller to convert and tm_copies_put,
 * or end; -1 with MemoryError set.
 *
 * The rows are read as borrowed pointers (no reference taken and dropped
 * per row: nothing here runs Python code), and the copies' cursor kept in
 * locals, written back before the chunk call that reads and moves it (~25
 * instructions a row of match_many hot1k, callgrind).  The arrays of
 * pointers and lengths in locals too, which nothing here reallocates:
 * read from c, they were read again after every copy (a char store may
 * alias them), and an ASCII row's length goes straight to n (~3
 * instructions a row of match_many, callgrind, light). */
static inline Py_ssize_t tm_copies_fill(tm_copies *c, PyObject *const *rows, Py_ssize_t i,
                                        Py_ssize_t end)
{
    const char **ptrs = c->ptrs;
    size_t *lens = c->lens;
    char *cur = c->cur;
    size_t room = c->room;
    for (; i < end; i++) {
        if (i + 8 < end) {
            /* the str 8 rows on: its header and characters (one or two
             * lines) are the loop's misses */
            FS_PREFETCH(rows[i + 8]);
            FS_PREFETCH((const char *)rows[i + 8] + 64);
        }
        PyObject *x = rows[i];
        if (!TM_IS_ASCII_STR(x))
            break;
        size_t n = (size_t)PyUnicode_GET_LENGTH(x);
        if (!tm_copies_fit(cur, room, n)) {
            c->cur = cur;
            c->room = room;
            if (tm_copies_chunk(c, n) < 0)
                return -1;
            cur = c->cur;
            room = c->room;
        }
        tm_copy_row(cur, tm_ascii_chars(x), n);
        ptrs[i] = cur;
        lens[i] = n;
        cur += n;
        room -= n;
    }
    c->cur = cur;
    c->room = room;
    return i;
}

/* Row i: a copy of p[0, n), or a null row when p is NULL (the row that
 * stopped tm_copies_fill, as the caller converted it).  0; -1 with
 * MemoryError set. */
static int tm_copies_put(tm_copies *c, Py_ssize_t i, const char *p, size_t n)
{
    if (p == NULL) {
        c->ptrs[i] = NULL;
        c->lens[i] = 0;
        return 0;
    }
    if (!tm_copies_fit(c->cur, c->room, n) && tm_copies_chunk(c, n) < 0)
        return -1;
    memcpy(c->cur, p, n);
    c->ptrs[i] = c->cur;
    c->lens[i] = n;
    c->cur += n;
    c->room -= n;
    return 0;
}

/* ------------------------------------------------ insert_many's rows */

/* Row (f, sub_id, q) as *sp when it is the common row -- an ASCII str
 * filter, an exact int sub_id that fits, no queue (q NULL or None) or an
 * ASCII str one -- without a call or an exception check.  0 (sp untouched
 * or partly set) for any other row: the caller's general path converts
 * it, and raises what it must. */
static inline int tm_spec_fast(fs_spec *sp, PyObject *f, PyObject *sub_id, PyObject *q)
{
    int overflow = 0;
    long long v;
    if (!TM_IS_ASCII_STR(f) || !PyLong_CheckExact(sub_id))
        return 0;
    if (q == Py_None)
        q = NULL;
    if (q != NULL && !TM_IS_ASCII_STR(q))
        return 0;
    if (!tm_compact_int(sub_id, &v)) {
        v = PyLong_AsLongLongAndOverflow(sub_id, &overflow);   /* an exact int: cannot fail but overflow */
        if (overflow)
            return 0;
    }
    sp->filter = tm_ascii_chars(f);
    sp->filter_len = (size_t)PyUnicode_GET_LENGTH(f);
    sp->id = (int64_t)v;
    if (q == NULL) {
        sp->queue = NULL;
        sp->queue_len = 0;
    } else {
        sp->queue = tm_ascii_chars(q);
        sp->queue_len = (size_t)PyUnicode_GET_LENGTH(q);
    }
    return 1;
}

/* specs[i, n) from rows [i, n) of the lists filters, ids and queues (NULL:
 * none), each of n rows at least, while each row is the common one
 * (tm_spec_fast).  Returns the first row that is not, for the caller to
 * convert, or n.  The lists' item arrays are read once a call: the
 * caller's conversion may run Python code, and calls again after it. */
static inline Py_ssize_t tm_specs_fill(fs_spec *specs, PyObject *filters, PyObject *ids,
                                       PyObject *queues, Py_ssize_t i, Py_ssize_t n)
{
    PyObject *const *f = PySequence_Fast_ITEMS(filters);
    PyObject *const *id = PySequence_Fast_ITEMS(ids);
    if (queues == NULL) {
        for (; i < n; i++)
            if (!tm_spec_fast(&specs[i], f[i], id[i], NULL))
                break;
    } else {
        PyObject *const *q = PySequence_Fast_ITEMS(queues);
        for (; i < n; i++)
            if (!tm_spec_fast(&specs[i], f[i], id[i], q[i]))
                break;
    }
    return i;
}

#endif
