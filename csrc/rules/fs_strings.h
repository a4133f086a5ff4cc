/* fs_strings.h - a column of strings, read in place: an array of
 * pointers and lengths (the Python layer's list of str/bytes), or an Arrow
 * StringArray / LargeStringArray (offsets, data, validity bitmap).  The
 * batch pipeline (fs_batch.h) matches one, the router (fs_route.h) keys
 * one; it sits in the rules layer, below both. */
#ifndef FS_STRINGS_H
#define FS_STRINGS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs_utf8.h"

enum { FS_STR_PTRS = 0, FS_STR_ARROW = 1 };

typedef struct {
    int layout;
    size_t n;
    const char *const *ptrs;      /* FS_STR_PTRS */
    const size_t *lens;
    const char *data;             /* FS_STR_ARROW */
    const int32_t *off32;         /* exactly one of off32 / off64 */
    const int64_t *off64;
    const uint8_t *validity;      /* NULL: no nulls */
    int64_t offset;               /* the Arrow array's offset */
} fs_strings;

/* Is the Arrow column's row at position j (its array offset added) valid
 * by its bitmap (none: every row)? */
static inline int fs_strings_valid_at(const fs_strings *s, int64_t j)
{
    return !s->validity || ((s->validity[j >> 3] >> (j & 7)) & 1);
}

/* Row i of a column: 1 with its bytes, 0 for a null (or a corrupt Arrow
 * offset pair, which is treated the same). */
static inline int fs_strings_get(const fs_strings *s, size_t i, const char **p, size_t *len)
{
    if (s->layout == FS_STR_PTRS) {
        if (!s->ptrs[i])
            return 0;
        *p = s->ptrs[i];
        *len = s->lens[i];
        return 1;
    }
    int64_t j = s->offset + (int64_t)i;
    if (!fs_strings_valid_at(s, j))
        return 0;
    int64_t a = s->off32 ? s->off32[j] : s->off64[j];
    int64_t b = s->off32 ? s->off32[j + 1] : s->off64[j + 1];
    if (b < a)
        return 0;
    *p = s->data + a;
    *len = (size_t)(b - a);
    return 1;
}

/* The first null row of a column (s->n: none): a NULL pointer, or a
 * cleared validity bit.  The bulk builder's caller names it before any
 * row is parsed, as insert_many's spec pass does.  (fs_strings_get also
 * takes an Arrow row whose offsets run backwards for a null; the Arrow
 * reader refuses such a column before.) */
static inline size_t fs_strings_first_null(const fs_strings *s)
{
    if (s->layout == FS_STR_PTRS) {
        for (size_t i = 0; i < s->n; i++)
            if (!s->ptrs[i])
                return i;
        return s->n;
    }
    if (!s->validity)
        return s->n;
    for (size_t i = 0; i < s->n;) {
        int64_t j = s->offset + (int64_t)i;
        if ((j & 7) == 0 && s->n - i >= 8 && s->validity[j >> 3] == 0xFF) {
            i += 8;                 /* eight valid rows at once */
            continue;
        }
        if (!fs_strings_valid_at(s, j))
            return i;
        i++;
    }
    return s->n;
}

/* The first row of a column whose bytes are not well-formed UTF-8
 * (fs_utf8.h), with *at its first bad byte; s->n where every row is (a
 * null row is).  A Python str's bytes always are; an Arrow string
 * column's must be by Arrow's rule, which pyarrow checks only when asked,
 * so the binding asks here of the column whose bytes no other check
 * reads: queue names (the tokenizer checks a filter's, on the builder's
 * threads).  ASCII is passed eight bytes at a time. */
static inline size_t fs_strings_first_not_utf8(const fs_strings *s, size_t *at)
{
    for (size_t i = 0; i < s->n; i++) {
        const char *p;
        size_t len, k = 0;
        if (!fs_strings_get(s, i, &p, &len))
            continue;
        const unsigned char *u = (const unsigned char *)p;
        while (k < len) {
            uint64_t w;
            if (len - k >= 8 && (memcpy(&w, u + k, 8), (w & 0x8080808080808080ull) == 0)) {
                k += 8;
                continue;
            }
            size_t n = fs_utf8_seq(u, k, len);
            if (!n) {
                *at = k;
                return i;
            }
            k += n;
        }
    }
    return s->n;
}

/* Rows [base, base + n) of src (base + n <= src->n), as a column of their
 * own: no copy. */
static inline fs_strings fs_strings_slice(const fs_strings *src, size_t base, size_t n)
{
    fs_strings out = *src;
    out.n = n;
    if (src->layout == FS_STR_PTRS) {
        out.ptrs = src->ptrs + base;
        out.lens = src->lens + base;
    } else {
        out.offset = src->offset + (int64_t)base;
    }
    return out;
}

#endif
