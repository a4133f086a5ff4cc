/* fs_entry_key.h - a stored table entry's filter checked and keyed without
 * the tokenizer, for the image verifier (fs_image_verify.c).
 *
 * An entry's table already says what its filter's tokens must be: the
 * literal table's, literal tokens only; a shape's table, a one-level
 * wildcard at each bit of its mask, a rest wildcard last where it has one,
 * literal tokens elsewhere.  So the filter needs no spans: one pass cuts
 * it at its separators, holds its bytes and each token to what the
 * dialect's rules (fs_rules) and the token's place allow, and sums the key
 * as an insert would (fs_tokens_key, fs_shape_classify: fs_pos_mix of each
 * literal token's fs_hash at its position).
 *
 * The scan only proves: 1 means the tokenizer would accept the filter and
 * classify it as the table's, with this key.  0 means "not proven", never
 * "bad": the caller then asks the tokenizer, which names what is wrong
 * (or, for a filter this scan is stricter about, finds nothing). */
#ifndef FS_ENTRY_KEY_H
#define FS_ENTRY_KEY_H

#include <stdint.h>

#include "fs_dialect.h"
#include "fs_shape.h"

/* The filter f[0..len) of an entry of a table in dialect d, whose shape
 * is want's (its onemask, ntoks, rest; NULL: the literal table): 1 with
 * *key its key when it is a valid filter of that shape, else 0 (*key
 * undefined).  f[0 .. FS_TOK_ALLOC(len)) must be readable (a node's token
 * is padded so). */
int fs_entry_key(fs_dialect d, const char *f, uint32_t len, const fs_shape_of *want, uint64_t *key);

#endif
