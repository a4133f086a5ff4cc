/* fs_route.c - route keys of the sharded fan-out (see fs_route.h). */
#include "fs_route.h"
#include "fs_xxh64.h"

/* The key is Spark SQL's xxhash64 of the tokens (XXH64 of each token's
 * UTF-8 bytes, seeded with the hash so far, starting from Spark's seed 42),
 * kept non-negative: so a JVM expression can route a subject exactly as
 * this does (fastsub.spark.shard.route_column, tested equal to this on
 * random rows of every dialect), and `key mod N` is the same everywhere. */
#define SPARK_HASH_SEED 42u

static uint64_t mix_token(uint64_t k, const char *s, const fs_span *t)
{
    return fs_xxh64(s + t->off, t->len, k);
}

static int64_t finish(uint64_t k)
{
    return (int64_t)(k & (uint64_t)INT64_MAX);
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
    uint64_t k = SPARK_HASH_SEED;
    uint32_t i = 0;
    for (; i < t->n && i < depth; i++) {
        if (t->tok[i].kind != FS_TOK_LITERAL)
            break;
        k = mix_token(k, s, &t->tok[i]);
    }
    if (i == depth) {
        *kind = FS_ROUTE_KEYED;
        *key = finish(k);
        return FS_OK;
    }
    *kind = FS_ROUTE_ANY;
    if (!is_filter) {           /* spread short subjects: every token in the key */
        for (; i < t->n; i++)
            k = mix_token(k, s, &t->tok[i]);
        *key = finish(k);
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

fs_route_split fs_route_rules(fs_dialect d)
{
    const fs_dialect_rules *r = fs_rules(d);
    fs_route_split out = {r->sep, r->one, r->rest, r->empty_ok, r->shares};
    return out;
}
