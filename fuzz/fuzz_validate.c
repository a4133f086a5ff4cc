/* fuzz_validate.c - libFuzzer harness: validation, tokenizing and
 * fs_subject_matches on arbitrary bytes, against oracle.h and against each
 * other.
 *
 * Input: byte 0 picks the dialect (odd: MQTT; 2 mod 4: AMQP; else NATS); bytes 1-2 where the rest splits into
 * two strings a and b.  Checked: fs_validate (subject and filter),
 * fs_check_queue and fs_split_share agree with the oracle; a valid
 * subject is a valid filter and matches itself; the tokens of a valid
 * string cover it exactly, with the right kinds and hashes equal to
 * hashing a copy of exactly the token's bytes; fs_subject_matches(a, b)
 * reports the right argument as invalid and otherwise agrees with the
 * oracle, and with an index holding a (cache off and on); reverse_match
 * of a on an index holding b agrees with the oracle's intersection.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "oracle.h"
#include "sublist.h"

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz_validate: check failed at %s:%d: %s\n", __FILE__,  \
                    __LINE__, #cond);                                               \
            abort();                                                                \
        }                                                                           \
    } while (0)

static void check_tokens(fs_dialect d, const char *s, size_t n, int is_filter)
{
    fs_tokens t;
    fs_error err;
    fs_tokens_init(&t);
    int rc = fs_tokenize(d, s, n, is_filter, &t, &err);
    /* "$share/G/f" is split before tokenizing; whole, it is a plain string */
    CHECK((rc == FS_OK) == o_valid_plain(d, s, n, is_filter));
    if (rc == FS_EINVAL) CHECK(err.reason != NULL && err.pos <= n);
    if (rc == FS_OK) {
        size_t nt;
        o_str *want = o_words(d, s, n, &nt);
        CHECK(t.n == nt);
        for (size_t i = 0; i < nt; i++) {
            const fs_span *sp = &t.tok[i];
            CHECK(s + sp->off == want[i].p && sp->len == want[i].n);
            uint32_t kind = FS_TOK_LITERAL;
            if (is_filter && o_is(want[i], d == FS_MQTT ? "+" : "*")) kind = FS_TOK_ONE;
            if (is_filter && o_is(want[i], d == FS_NATS ? ">" : "#")) kind = FS_TOK_REST;
            CHECK(sp->kind == kind);
            char *copy = malloc(sp->len ? sp->len : 1);        /* exactly the token: ASan bounds */
            CHECK(copy != NULL);
            memcpy(copy, s + sp->off, sp->len);
            CHECK(sp->hash == fs_hash(copy, sp->len));
            free(copy);
        }
        free(want);
    }
    fs_tokens_free(&t);
}

static void one_string(fs_dialect d, const char *s, size_t n)
{
    fs_error err;
    int subj = fs_validate(d, s, n, 0, &err);
    int filt = fs_validate(d, s, n, 1, &err);
    CHECK(subj == FS_OK || subj == FS_EINVAL);
    CHECK(filt == FS_OK || filt == FS_EINVAL);
    CHECK((subj == FS_OK) == o_valid(d, s, n, 0));
    CHECK((filt == FS_OK) == o_valid(d, s, n, 1));
    if (subj == FS_OK) {
        CHECK(o_valid_plain(d, s, n, 1));
        /* a subject matches itself as a filter; in MQTT a subject that
         * reads "$share/G/f" is, as a filter, f shared by G (or invalid) */
        o_str g, in = {s, n};
        if (d == FS_MQTT && o_split_share(s, n, &g, &in) != 1) in = (o_str){s, n};
        int which, rc = fs_subject_matches(d, s, n, s, n, &which, &err);
        if (filt != FS_OK) CHECK(rc == FS_EINVAL && which == 0);
        else CHECK(rc == (in.p == s ? 1 : o_match(d, in.p, in.n, s, n)));
    }
    int q = fs_check_queue(d, s, n, &err);
    CHECK((q == FS_OK) == o_queue_ok(d, s, n));
    if (q == FS_EINVAL) CHECK(err.in_queue == 1);
    const char *g, *f;
    size_t gl, fl;
    o_str og, of;
    int share = fs_split_share(s, n, &g, &gl, &f, &fl, &err);
    int oshare = o_split_share(s, n, &og, &of);
    if (oshare == 1 && (n > O_MAX || og.n == 0 || of.n == 0 || memchr(og.p, '+', og.n) || memchr(og.p, '#', og.n) ||
                        memchr(og.p, 0, og.n)))
        oshare = -1;
    CHECK(share == (oshare < 0 ? FS_EINVAL : oshare));
    if (share == 1) CHECK(g == og.p && gl == og.n && f == of.p && fl == of.n);
    check_tokens(d, s, n, 0);
    check_tokens(d, s, n, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    fs_dialect d = (data[0] & 1) ? FS_MQTT : (data[0] & 3) == 2 ? FS_AMQP : FS_NATS;
    size_t rest = size - 3, cut = ((size_t)data[1] | (size_t)data[2] << 8) % (rest + 1);
    /* copies of exactly their length, so ASan sees any read past the end */
    char *a = malloc(cut ? cut : 1), *b = malloc(rest - cut ? rest - cut : 1);
    CHECK(a && b);
    memcpy(a, data + 3, cut);
    memcpy(b, data + 3 + cut, rest - cut);
    size_t na = cut, nb = rest - cut;
    one_string(d, a, na);
    one_string(d, b, nb);

    int which = -1;
    fs_error err;
    int rc = fs_subject_matches(d, a, na, b, nb, &which, &err);
    int fa = o_valid(d, a, na, 1), sb = o_valid(d, b, nb, 0);
    o_str g, inner = {a, na};
    if (d == FS_MQTT && o_split_share(a, na, &g, &inner) != 1) inner = (o_str){a, na};
    if (!fa) CHECK(rc == FS_EINVAL && which == 0);
    else if (!sb) CHECK(rc == FS_EINVAL && which == 1);
    else CHECK(rc == o_match(d, inner.p, inner.n, b, nb));

    if (fa) {
        /* an index holding a answers the same for b, with the cache off and on */
        fs_sublist *sl = fs_sublist_new(d);
        CHECK(sl != NULL);
        fs_spec sp = {a, na, NULL, 0, 7};
        CHECK(fs_sublist_insert(sl, &sp, &err) == 1);
        fs_scratch sc;
        fs_result r;
        fs_scratch_init(&sc);
        fs_result_init(&r);
        for (int pass = 0; pass < 3; pass++) {
            if (pass == 1) CHECK(fs_sublist_set_cache(sl, 2) == FS_OK);
            int mrc = fs_sublist_match(sl, b, nb, &sc, &r, &err);
            if (!sb) {
                CHECK(mrc == FS_EINVAL);
                continue;
            }
            CHECK(mrc == FS_OK);
            CHECK(r.nids == (size_t)(rc == 1));
            CHECK(r.nids == 0 || r.ids[0] == 7);
        }
        /* reverse_match of a on an index holding b as a filter */
        fs_sublist *rl = fs_sublist_new(d);
        CHECK(rl != NULL);
        fs_spec bs = {b, nb, NULL, 0, 8};
        int brc = fs_sublist_insert(rl, &bs, &err);
        CHECK((brc == 1) == o_valid(d, b, nb, 1));
        if (brc == 1) {
            o_str gb, binner = {b, nb};
            if (d == FS_MQTT && o_split_share(b, nb, &gb, &binner) != 1) binner = (o_str){b, nb};
            fs_rresult rr;
            fs_rresult_init(&rr);
            CHECK(fs_sublist_reverse_match(rl, a, na, &sc, &rr, &err) == FS_OK);
            CHECK(rr.nhits == (size_t)o_intersect(d, inner.p, inner.n, binner.p, binner.n));
            CHECK(rr.nhits == (size_t)o_intersect(d, binner.p, binner.n, inner.p, inner.n));
            /* (AMQP's empty binding key: an empty arena may be NULL, so no NULL + 0) */
            if (rr.nhits) CHECK(rr.hits[0].id == 8 && rr.hits[0].filter_len == binner.n &&
                                (binner.n == 0 || memcmp(rr.arena + rr.hits[0].filter_off, binner.p, binner.n) == 0) &&
                                rr.hits[0].has_queue == (binner.p != b));
            fs_rresult_free(&rr);
        }
        fs_sublist_free(rl);
        fs_result_free(&r);
        fs_scratch_free(&sc);
        fs_sublist_free(sl);
    }
    free(a);
    free(b);
    return 0;
}
