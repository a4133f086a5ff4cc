/* fs_dialect.h - the dialects' rules, in one place.
 *
 *   NATS  "orders.*.created"   separator '.', '*' one token, '>' the rest (1+)
 *   MQTT  "sport/+/score/#"    separator '/', '+' one level,  '#' the rest (0+)
 *   AMQP  "a.#.b.*"            separator '.', '*' one word,   '#' 0+ words
 *                              anywhere, any number of times; "" is the key
 *                              of zero words; at most 255 bytes
 *
 * What a subject, a filter and a queue name may hold in each dialect: the
 * class of every byte (fs_byte_class), the wildcards and where they may
 * stand, empty tokens, lengths, UTF-8 (fs_utf8.h), MQTT's shares -- and the
 * words of each error.  Two readers apply them:
 *   - the tokenizer (fs_token.c), to every subject and filter of an insert
 *     or a match, specialized per dialect: fs_rules(d) with a constant d
 *     folds to constants, so the rules cost nothing on the hot path;
 *   - the loader (fs_serial.c), to a stored index's tokens, filters and
 *     queue names (fs_check_literal, fs_check_queue, fs_rules), with its
 *     own wording (it says where in the blob).
 * Matching (fs_token.c: fs_tokens_match, fs_filters_intersect) is not
 * validation and stays with the tokens.
 */
#ifndef FS_DIALECT_H
#define FS_DIALECT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs_status.h"
#include "fs_utf8.h"

/* The values are the dialect's number in the file format (fs_serial.h's
 * flags field) and in the Python layer: never renumber. */
typedef enum { FS_NATS = 0, FS_MQTT = 1, FS_AMQP = 2 } fs_dialect;
#define FS_NDIALECTS 3

#define FS_MAX_SUBJECT 65535u
/* AMQP (RabbitMQ topic exchanges): keys are AMQP short strings. */
#define FS_AMQP_MAX_KEY 255u
#define FS_AMQP_MAX_WORDS (FS_AMQP_MAX_KEY + 1)

/* A token's kind: a literal, or one of the wildcards. */
typedef enum { FS_TOK_LITERAL = 0, FS_TOK_ONE = 1, FS_TOK_REST = 2 } fs_tok_kind;

typedef struct {
    char sep;                    /* the token separator */
    char one, rest;              /* the wildcards, each a whole token: one
                                  * token; the rest (NATS 1+, MQTT 0+, AMQP
                                  * 0+ words anywhere) */
    uint8_t empty_tokens;        /* "a..b", "/a", "a/" are valid */
    uint8_t empty_ok;            /* "" is valid (AMQP: the key of zero words) */
    uint8_t shares;              /* MQTT "$share/GROUP/filter" */
    uint8_t groups_merge;        /* queue groups merge by name across filters
                                  * (NATS, AMQP), or a group is the pair
                                  * (name, filter) (MQTT) */
    uint8_t queue_utf8;          /* queue names must be valid UTF-8 (AMQP) */
    /* How a filter matches -- every semantic difference of the dialects is
     * a field here; code reads the fields and never compares the dialect
     * (tests/test_layout.py checks that): */
    uint8_t rest_min;            /* tokens the rest wildcard takes at least:
                                  * NATS '>' 1, MQTT '#' 0 ("a/#" matches
                                  * "a"), AMQP '#' 0 */
    uint8_t rest_anywhere;       /* the rest wildcard may stand anywhere, any
                                  * number of times (AMQP): matched by the
                                  * word automaton and the trie's own walk */
    uint8_t dollar_hidden;       /* a wildcard in the first level does not
                                  * match a subject starting with '$' (MQTT
                                  * §4.7.2).  Read by the tokenizer alone
                                  * (fs_first_level_hidden), which decides
                                  * it once per subject or filter
                                  * (fs_tokens.hidden): the walks choose
                                  * their structures by that */
    uint8_t once_per_id;         /* a match delivers each sub_id once,
                                  * whatever dedupe says (AMQP: a queue bound
                                  * twice gets one copy) */
    uint8_t scan_below;          /* word-at-a-time scans look closer at every
                                  * byte below this one: the classed ASCII
                                  * bytes but the separator and wildcards
                                  * lie there (NATS: controls too) */
    uint32_t max_len;            /* bytes of a subject or filter */
    /* Why an input breaks a rule (NULL: the dialect has no such rule).
     * The tokenizer's words: */
    const char *too_long;        /* at max_len bytes */
    const char *nul;             /* a NUL byte (AMQP: any byte may be in a word) */
    const char *wild_in_subject; /* a wildcard in a subject (AMQP: a literal word there) */
    const char *rest_not_last;   /* the rest wildcard before the end (AMQP: anywhere) */
    const char *one_not_whole;   /* a wildcard character inside a token (MQTT; */
    const char *rest_not_whole;  /* in NATS and AMQP they are plain bytes there) */
    /* The loader's (fs_serial.c): */
    const char *filter_too_long; /* a stored filter */
    const char *nul_in_token;
    const char *rest_children;   /* a rest wildcard node with children */
    const char *name;            /* what the Python API calls it (fs_dialect_name) */
} fs_dialect_rules;

/* The rules of dialect d (a valid fs_dialect). */
static inline const fs_dialect_rules *fs_rules(fs_dialect d)
{
    static const fs_dialect_rules rules[FS_NDIALECTS] = {
        [FS_NATS] = {.sep = '.', .one = '*', .rest = '>', .groups_merge = 1, .scan_below = 0x21, .rest_min = 1,
                     .max_len = FS_MAX_SUBJECT,
                     .too_long = "longer than 65,535 bytes", .nul = "NUL byte",
                     .wild_in_subject = "wildcard in subject", .rest_not_last = "'>' must be the last token",
                     .filter_too_long = "filter longer than 65,535 bytes",
                     .nul_in_token = "NUL byte in a token", .rest_children = "children under a '>' node",
                     .name = "nats"},
        [FS_MQTT] = {.sep = '/', .one = '+', .rest = '#', .empty_tokens = 1, .shares = 1, .scan_below = 1,
                     .dollar_hidden = 1,
                     .max_len = FS_MAX_SUBJECT, .too_long = "longer than 65,535 bytes",
                     .nul = "NUL character", .wild_in_subject = "wildcard character in topic",
                     .rest_not_last = "'#' must be the last level", .one_not_whole = "'+' must be a whole level",
                     .rest_not_whole = "'#' must be a whole level",
                     .filter_too_long = "filter longer than 65,535 bytes",
                     .nul_in_token = "NUL character in a token", .rest_children = "children under a '#' node",
                     .name = "mqtt"},
        [FS_AMQP] = {.sep = '.', .one = '*', .rest = '#', .empty_tokens = 1, .empty_ok = 1, .groups_merge = 1,
                     .queue_utf8 = 1, .rest_anywhere = 1, .once_per_id = 1,
                     .max_len = FS_AMQP_MAX_KEY, .too_long = "longer than 255 bytes",
                     .filter_too_long = "filter longer than 255 bytes", .name = "amqp"},
    };
    return &rules[d];
}

/* The one expression for d's own specialization of some code (the
 * tokenizer: each dialect's copy folds its rules to constants): direct
 * calls the compiler can inline, where a table of function pointers cost
 * match() 1.4% more instructions (callgrind, light).  Elsewhere code reads
 * the rules' fields and never names a dialect. */
#define FS_PER_DIALECT(d, nats, mqtt, amqp) \
    ((d) == FS_AMQP ? (amqp) : (d) == FS_NATS ? (nats) : (mqtt))

/* The separator of a dialect. */
static inline char fs_sep(fs_dialect d) { return fs_rules(d)->sep; }
/* Do queue groups merge by name across filters (NATS, AMQP), or is a
 * group the pair (name, filter) (MQTT)? */
static inline int fs_groups_merge(fs_dialect d) { return fs_rules(d)->groups_merge; }

/* The file format's number of a dialect, and back: 1 with *d set, or 0
 * for a number no dialect has. */
static inline unsigned fs_dialect_code(fs_dialect d) { return (unsigned)d; }
static inline int fs_dialect_of_code(uint64_t code, fs_dialect *d)
{
    if (code >= FS_NDIALECTS)
        return 0;
    *d = (fs_dialect)code;
    return 1;
}

/* The class of a byte in a dialect's subjects and filters:
 *   NATS  '.' SEP, NUL, ' ' '\t' '\n' '\r' '\f' SPACE, 0x80-0xFF HIGH
 *   MQTT  '/' SEP, NUL, '+' '#' WILD, 0x80-0xFF HIGH
 *   AMQP  '.' SEP, 0x80-0xFF HIGH (NUL is a byte like any other)
 * HIGH bytes must form valid UTF-8 (fs_utf8_seq); every other byte is OK
 * (NATS '*' and '>' are wildcards only as whole tokens).  The tokenizer's
 * word-at-a-time and vector scans flag the same bytes (and may flag more,
 * which then get a look here). */
enum { FS_BYTE_OK = 0, FS_BYTE_SEP, FS_BYTE_NUL, FS_BYTE_SPACE, FS_BYTE_WILD, FS_BYTE_HIGH };
#define FS_HIGH16_ FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, \
    FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH,   \
    FS_BYTE_HIGH, FS_BYTE_HIGH, FS_BYTE_HIGH
#define FS_HIGH128_ FS_HIGH16_, FS_HIGH16_, FS_HIGH16_, FS_HIGH16_, FS_HIGH16_, FS_HIGH16_, FS_HIGH16_, FS_HIGH16_
static inline unsigned fs_byte_class(fs_dialect d, unsigned char c)
{
    static const unsigned char classes[FS_NDIALECTS][256] = {
        [FS_NATS] = {[0] = FS_BYTE_NUL, ['.'] = FS_BYTE_SEP, [' '] = FS_BYTE_SPACE, ['\t'] = FS_BYTE_SPACE,
                     ['\n'] = FS_BYTE_SPACE, ['\r'] = FS_BYTE_SPACE, ['\f'] = FS_BYTE_SPACE, [0x80] = FS_HIGH128_},
        [FS_MQTT] = {[0] = FS_BYTE_NUL, ['/'] = FS_BYTE_SEP, ['+'] = FS_BYTE_WILD, ['#'] = FS_BYTE_WILD,
                     [0x80] = FS_HIGH128_},
        [FS_AMQP] = {['.'] = FS_BYTE_SEP, [0x80] = FS_HIGH128_},
    };
    return classes[d][c];
}
#undef FS_HIGH128_
#undef FS_HIGH16_

/* The kind of the token t[0..n) in a filter of the dialect (in a subject
 * a wildcard is an error, or, in AMQP, a literal word). */
static inline fs_tok_kind fs_token_kind(fs_dialect d, const char *t, size_t n)
{
    if (n != 1)
        return FS_TOK_LITERAL;
    return t[0] == fs_rules(d)->one ? FS_TOK_ONE : t[0] == fs_rules(d)->rest ? FS_TOK_REST : FS_TOK_LITERAL;
}

#define FS_SHARE_PREFIX "$share/"
#define FS_SHARE_PREFIX_LEN (sizeof(FS_SHARE_PREFIX) - 1)

/* Does filter f[0..len), as stored, start with MQTT's "$share/" (always
 * a shared subscription's, never a plain one's)?  0 in other dialects. */
static inline int fs_share_prefixed(fs_dialect d, const char *f, size_t len)
{
    return fs_rules(d)->shares && len >= FS_SHARE_PREFIX_LEN && memcmp(f, FS_SHARE_PREFIX, FS_SHARE_PREFIX_LEN) == 0;
}
/* Is t[0..len) the first level "$share" of such a filter? */
static inline int fs_share_level(fs_dialect d, const char *t, size_t len)
{
    return fs_rules(d)->shares && len == FS_SHARE_PREFIX_LEN - 1 && memcmp(t, FS_SHARE_PREFIX, len) == 0;
}

/* Validate a queue / share-group name.  FS_OK or FS_EINVAL (err filled
 * in, err->in_queue 1). */
int fs_check_queue(fs_dialect d, const char *q, size_t len, fs_error *err);

/* MQTT "$share/GROUP/filter": if s starts with "$share/", store the group
 * and the filter part and return 1; return 0 when it is not a share; return
 * FS_EINVAL (err filled in) when it is a malformed one. */
int fs_split_share(const char *s, size_t len, const char **group, size_t *glen,
                   const char **filter, size_t *flen, fs_error *err);
/* The filter part of a filter argument: for MQTT "$share/G/f", f (*f and
 * *len are moved onto it); for anything else, the argument itself.  FS_OK,
 * or FS_EINVAL for a malformed share (err filled in). */
int fs_share_inner(fs_dialect d, const char **f, size_t *len, fs_error *err);

/* The loader's check of a stored literal: a literal token of a trie level
 * (whole_filter 0) or a whole literal filter (1), held to exactly what the
 * tokenizer accepts, with the loader's words.  FS_OK, or FS_EINVAL with
 * err->pos the offset in t of the first offending byte. */
int fs_check_literal(fs_dialect d, const unsigned char *t, size_t n, int whole_filter, fs_error *err);

#endif
