/* fs_route.c - route keys of the sharded fan-out (see fs_route.h). */
#include "fs_route.h"
#include "fs_xxh64.h"

/* The key is Spark SQL's xxhash64 of the string's first `depth` tokens as
 * they stand in it, separators included (XXH64 of those UTF-8 bytes with
 * Spark's seed 42: `xxhash64(substring_index(s, sep, depth))`), kept
 * non-negative.  So a JVM expression routes a subject exactly as this does
 * with two cheap string functions (topicmatch.spark.route.route_column, tested
 * equal to this on random rows of every dialect), and `key mod N` is the
 * same everywhere.  A subject with fewer tokens hashes whole: the same
 * expression. */
#define SPARK_HASH_SEED 42u

static int64_t prefix_key(const char *s, size_t len)
{
    return (int64_t)(fs_xxh64(s, len, SPARK_HASH_SEED) & (uint64_t)INT64_MAX);
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
    uint32_t i = 0;
    while (i < t->n && i < depth && t->tok[i].kind == FS_TOK_LITERAL)
        i++;
    if (i == depth) {
        const fs_span *last = &t->tok[depth - 1];
        *kind = FS_ROUTE_KEYED;
        *key = prefix_key(s, last->off + last->len);
        return FS_OK;
    }
    *kind = FS_ROUTE_ANY;
    if (!is_filter)             /* spread short subjects: the whole subject is the key */
        *key = prefix_key(s, len);
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
    fs_route_split out = {r->sep, r->one, r->rest, r->empty_ok, r->shares ? FS_SHARE_PREFIX : NULL};
    return out;
}
