/* fs_route.h - the shard of a sharded fan-out that holds a filter or
 * serves a subject (docs/design.md, "Why the sharded fan-out is exact").
 *
 * The route key of a string is a hash of its first `depth` tokens, split
 * by the index's own tokenizer (fs_tokenize), so the router and the index
 * can never disagree about where a token ends.  A filter whose first depth
 * tokens are all literal can match only subjects with those same first
 * tokens, so both get the same key; any other filter is needed by every
 * shard (FS_ROUTE_ANY).  A subject with fewer than depth tokens can match
 * only such replicated filters, so any shard serves it (FS_ROUTE_ANY, with
 * a hash of the whole subject to spread them).
 */
#ifndef FS_ROUTE_H
#define FS_ROUTE_H

#include <stdint.h>
#include "fs_strings.h"
#include "fs_token.h"

enum {
    FS_ROUTE_KEYED = 0,    /* key: hash of the first depth tokens */
    FS_ROUTE_ANY = 1,      /* filter: every shard; subject: any shard (key spreads) */
    FS_ROUTE_INVALID = 2,  /* refused by the tokenizer: the rejects path */
    FS_ROUTE_NULL = 3      /* a null row */
};

#define FS_ROUTE_MAX_DEPTH 16u

/* Route rows [0, rows->n) at depth (1..FS_ROUTE_MAX_DEPTH): kind[i] one of
 * the FS_ROUTE_* above, key[i] its key (0 for invalid and null rows).  MQTT
 * filters "$share/G/f" route as f.  FS_OK or FS_ENOMEM (a subject deeper
 * than the inline token array needs the heap). */
int fs_route_rows(fs_dialect d, const fs_strings *rows, int is_filter, unsigned depth,
                  int64_t *key, uint8_t *kind);

/* What a router outside C (Spark SQL expressions: topicmatch.spark.route's
 * route_column and filter_route_column) needs to split a value as
 * fs_tokenize does, for a value the tokenizer accepts: the separator, the
 * two wildcards (whole tokens of a filter), whether the empty string is
 * zero tokens (AMQP's empty key) rather than invalid, and the prefix of a
 * shared subscription's filter, routed as what follows its group (MQTT's
 * "$share/"; NULL in the other dialects). */
typedef struct {
    char sep, one, rest;
    uint8_t empty_is_no_tokens;
    const char *share_prefix;
} fs_route_split;

fs_route_split fs_route_rules(fs_dialect d);

#endif
