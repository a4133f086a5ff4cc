/* fs_route.c - route keys of the sharded fan-out (see fs_route.h). */
#include "fs_route.h"

/* One token into a running 64-bit key: its fs_hash and its length (so
 * "ab" + "c" and "a" + "bc" differ even when the 32-bit hashes collide). */
static uint64_t mix_token(uint64_t k, const fs_span *t)
{
    k ^= (uint64_t)t->hash | ((uint64_t)t->len << 32);
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 29);
}

/* The last avalanche step, so that `key mod N` uses every bit. */
static int64_t finish(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (int64_t)(k >> 1);     /* non-negative: `mod N` is the same in every language */
}

static int route_one(fs_dialect d, const char *s, size_t len, int is_filter, unsigned depth,
                     fs_tokens *t, int64_t *key, uint8_t *kind)
{
    fs_error err;
    *key = 0;
    if (is_filter && fs_rules(d)->shares && fs_share_inner(d, &s, &len, &err) != FS_OK) {
        *kind = FS_ROUTE_INVALID;
        return FS_OK;
    }
    int rc = fs_tokenize(d, s, len, is_filter, t, &err);
    if (rc == FS_ENOMEM)
        return rc;
    if (rc != FS_OK) {
        *kind = FS_ROUTE_INVALID;
        return FS_OK;
    }
    uint64_t k = 0x243F6A8885A308D3ull;
    uint32_t i = 0;
    for (; i < t->n && i < depth; i++) {
        if (t->tok[i].kind != FS_TOK_LITERAL)
            break;
        k = mix_token(k, &t->tok[i]);
    }
    if (i == depth) {
        *kind = FS_ROUTE_KEYED;
        *key = finish(k);
        return FS_OK;
    }
    *kind = FS_ROUTE_ANY;
    if (!is_filter) {           /* spread short subjects: every token in the key */
        for (; i < t->n; i++)
            k = mix_token(k, &t->tok[i]);
        *key = finish(k ^ t->n);
    }
    return FS_OK;
}

int fs_route_rows(fs_dialect d, const fs_strings *rows, int is_filter, unsigned depth,
                  int64_t *key, uint8_t *kind)
{
    fs_tokens t;
    int rc = FS_OK;
    fs_tokens_init(&t);
    for (size_t i = 0; i < rows->n; i++) {
        const char *p;
        size_t len;
        if (!fs_strings_get(rows, i, &p, &len)) {
            key[i] = 0;
            kind[i] = FS_ROUTE_NULL;
            continue;
        }
        rc = route_one(d, p, len, is_filter, depth, &t, &key[i], &kind[i]);
        if (rc != FS_OK)
            break;
    }
    fs_tokens_free(&t);
    return rc;
}
