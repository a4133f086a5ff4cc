/* columns.h - the harnesses' columns of rows as fs_strings (the batch's
 * and the bulk builder's input), in every layout the core reads:
 * pointers, or Arrow with int32 or int64 offsets, a validity bitmap and a
 * nonzero array offset (a row "-1" before it, which no read may touch).
 * Row i is null when s[i] is NULL.  fuzz_ops matches them (fs_match_rows),
 * fuzz_build builds from them (fs_build_columns). */
#ifndef FUZZ_COLUMNS_H
#define FUZZ_COLUMNS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs_strings.h"

enum { FZ_PTRS = 0, FZ_ARROW32 = 1, FZ_ARROW64 = 2 };

typedef struct {
    fs_strings col;
    const char **ptrs;
    size_t *lens;
    char *data;
    int32_t *off32;
    int64_t *off64;
    uint8_t *bits;
} fz_column;

static void fz_column_free(fz_column *c)
{
    free(c->ptrs);
    free(c->lens);
    free(c->data);
    free(c->off32);
    free(c->off64);
    free(c->bits);
    memset(c, 0, sizeof(*c));
}

/* rows rows of s[i] (n[i] bytes; NULL: a null row) in layout; aborts when
 * out of memory (a harness's own allocation, not the engine's). */
static void fz_column_make(fz_column *c, const char *const *s, const size_t *n, size_t rows, int layout)
{
    memset(c, 0, sizeof(*c));
    c->col.n = rows;
    if (layout == FZ_PTRS) {
        c->ptrs = calloc(rows + 1, sizeof(*c->ptrs));
        c->lens = calloc(rows + 1, sizeof(*c->lens));
        if (!c->ptrs || !c->lens) abort();
        for (size_t i = 0; i < rows; i++) {
            c->ptrs[i] = s[i];
            c->lens[i] = s[i] ? n[i] : 0;
        }
        c->col.layout = FS_STR_PTRS;
        c->col.ptrs = c->ptrs;
        c->col.lens = c->lens;
        return;
    }
    size_t total = 1;
    for (size_t i = 0; i < rows; i++) total += s[i] ? n[i] : 0;
    c->data = malloc(total);
    c->off32 = calloc(rows + 2, sizeof(*c->off32));
    c->off64 = calloc(rows + 2, sizeof(*c->off64));
    c->bits = calloc((rows + 1) / 8 + 1, 1);
    if (!c->data || !c->off32 || !c->off64 || !c->bits) abort();
    size_t at = 1;                                  /* row "-1", before the array's offset */
    c->data[0] = 'z';
    c->off32[1] = c->off64[1] = 1;
    c->bits[0] = 1;
    for (size_t i = 0; i < rows; i++) {
        if (s[i]) {
            if (n[i]) memcpy(c->data + at, s[i], n[i]);
            at += n[i];
            c->bits[(i + 1) >> 3] |= (uint8_t)(1u << ((i + 1) & 7));
        }
        c->off32[i + 2] = (int32_t)at;
        c->off64[i + 2] = (int64_t)at;
    }
    c->col.layout = FS_STR_ARROW;
    c->col.data = c->data;
    c->col.off32 = layout == FZ_ARROW32 ? c->off32 : NULL;
    c->col.off64 = layout == FZ_ARROW32 ? NULL : c->off64;
    c->col.validity = c->bits;
    c->col.offset = 1;
}

#endif
