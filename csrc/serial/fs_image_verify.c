/* fs_image_verify.c - the full check of an opened image (FS_VERIFY_FULL;
 * fs_image_verify.h): every invariant of docs/FORMAT.md, "Invariants of a
 * mapped image", in the order listed there, so that the first broken one
 * is the error; the tables on several threads where the image is large,
 * the checksum beside them.  What opening checks in O(1) (the header, the
 * root block) is the reader's, fs_image.c; the checks that make following
 * one offset safe are the index layer's (fs_layout.c). */
#include "fs_image_verify.h"

#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_checksum.h"
#include "fs_entry.h"
#include "fs_entry_key.h"
#include "fs_header.h"
#include "fs_image.h"
#include "fs_index.h"
#include "fs_tuning.h"
#include "fs_pool.h"

/* Table slots fetched ahead by verify_table. */
#define VERIFY_AHEAD 24

typedef struct {
    fs_sublist *sl;
    fs_error *err;
    fs_tokens t;
    uint64_t nseen;           /* bytes of seen, a power of two */
    _Atomic uint8_t *seen;    /* a bit per 8 bytes of the image: nodes reached */
    int shared;               /* seen is marked by other threads too */
    uint64_t subs, nodes, literals;
} verifier;

static int vbad(verifier *v, const char *why, uint64_t pos)
{
    v->err->reason = why;
    v->err->pos = (size_t)pos;
    v->err->in_queue = 0;
    return FS_EBADDATA;
}

static uint32_t count_literal(const fs_tokens *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        n += t->tok[i].kind == FS_TOK_LITERAL;
    return n;
}


/* Mark the node at offset off (inside the image) in seen; was it marked
 * already? */
FS_ALWAYS_INLINE int seen_before(verifier *v, uint64_t off)
{
    _Atomic uint8_t *w = &v->seen[off >> 6];
    uint8_t bit = (uint8_t)(1u << ((off >> 3) & 7)), was;
    if (v->shared) {                  /* of two threads reaching it, one sees the other's bit */
        was = atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
    } else {
        was = atomic_load_explicit(w, memory_order_relaxed);
        atomic_store_explicit(w, (uint8_t)(was | bit), memory_order_relaxed);
    }
    return (was & bit) != 0;
}

/* The node at offset ref, stored at `from` (a slot, a link), reached once
 * (a second link to it: damaged).  Refusals name the link's position. */
static int reach(verifier *v, const void *from, const fs_node *ref, const fs_node **out)
{
    uint64_t off = (uint64_t)(uintptr_t)ref;
    const fs_node *n = fs_img_node_checked(v->sl, off);
    if (!n)
        return vbad(v, "node outside the image", fs_img_off(v->sl, from));
    if (seen_before(v, off))
        return vbad(v, "node reached twice", fs_img_off(v->sl, from));
    v->nodes++;
    *out = n;
    return FS_OK;
}

/* A node's subscriptions as inserts leave them: plain ids strictly
 * increasing, none on a "$share/" filter (shared: n's filter starts so),
 * some at all (empty_why: the words for none; NULL for a trie node, whose
 * children may be what it holds), queue groups in strictly increasing
 * name order, each a valid name, non-empty, members strictly increasing
 * (fs_subs_why: the rule the version 1-2 loader applies too).  The
 * payload is read through the accessors, each count once with what it
 * bounds: a file rewritten under the check gives a wrong verdict,
 * never a read outside the image (fs_once8, fs_layout.h). */
static int verify_subs(verifier *v, const fs_node *n, int shared, const char *empty_why)
{
    const fs_sublist *sl = v->sl;
    uint64_t at = fs_img_off(sl, n);
    /* Most nodes hold at most one plain id, in the node itself, and no
     * queue group: then there is no order to check and nothing past the
     * node, which fs_img_node_checked proved inside the image when it was
     * reached (the fields read once, as fs_img_subs and fs_img_groups read
     * them: 86 -> 20 instructions a node, bench/cg_image.py --prefixes 3
     * --ops open). */
    uint32_t cap = fs_once32(&n->subcap), cnt = fs_once32(&n->nsubs);
    if (cap <= 1 && cnt <= cap && !fs_oncep(&n->groups)) {
        v->subs += cnt;
        const char *why = fs_subs_why(shared, cnt, 0, empty_why);
        return why ? vbad(v, why, at) : FS_OK;
    }
    const int64_t *ids;
    uint32_t nids = fs_subs_of(sl, n, &ids), ng = fs_ngroups_of(sl, n);
    for (uint32_t i = 1; i < nids; i++)
        if (ids[i] <= ids[i - 1])
            return vbad(v, "ids not in strictly increasing order", at);
    v->subs += nids;
    const char *why = fs_subs_why(shared, nids, ng, empty_why);
    if (why)
        return vbad(v, why, at);
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (uint32_t gi = 0; gi < ng; gi++) {
        const fs_group *g = fs_group_of(sl, n, gi);
        const char *name;
        uint32_t name_len = fs_gname_of(sl, g, &name);
        fs_error qe;
        if (fs_check_queue(sl->dialect, name, name_len, &qe) < 0)
            return vbad(v, qe.reason, at);
        if (g->name_hash != fs_hash(name, name_len))
            return vbad(v, "queue name hash does not match", at);
        if (gi > 0 && !fs_gname_after(prev, prev_len, name, name_len))
            return vbad(v, FS_GROUPS_ORDER_WHY, at);
        prev = name;
        prev_len = name_len;
        const int64_t *m;
        uint32_t gn = fs_gids_of(sl, g, &m);
        for (uint32_t i = 1; i < gn; i++)
            if (m[i] <= m[i - 1])
                return vbad(v, "ids not in strictly increasing order", at);
        v->subs += gn;
    }
    return FS_OK;
}

/* The key of a table entry's filter, tokenized in t, in the table of
 * shape sh (NULL: the literal table), as an insert computes it (*key);
 * 0 when the filter is not of that table's kind.  A literal table's
 * filter is asked only whether it has a wildcard token, in the pass that
 * sums its key: without one, it has no shape (fs_shape_classify's answer
 * for it is known). */
static int entry_key(const fs_tokens *t, const fs_shape *sh, uint64_t *key)
{
    *key = 0;
    if (!sh) {
        for (uint32_t i = 0; i < t->n; i++) {
            if (t->tok[i].kind != FS_TOK_LITERAL)
                return 0;
            *key = fs_tokens_key(t->tok, i, i + 1, *key);
        }
        return 1;
    }
    fs_shape_of of;
    if (!fs_shape_classify(t, &of) || of.ntoks != sh->ntoks || of.rest != sh->rest || of.onemask != sh->onemask)
        return 0;
    *key = of.key;
    return 1;
}

/* Entry e's filter (elen bytes) a valid filter of its table's kind -- the
 * table of shape sh (want: its fields, read once), or the literal table
 * (both NULL) -- and its key (*key).  Most entries are proven so by one
 * pass over their bytes (fs_entry_key: 1,112 -> 801 instructions a
 * subscription, bench/cg_image.py --prefixes 3 --ops open); the others
 * are tokenized, and the tokenizer names what is wrong.  FS_OK,
 * FS_EBADDATA, FS_ENOMEM. */
static int entry_filter_key(verifier *v, const fs_node *e, uint32_t elen, const fs_shape *sh,
                            const fs_shape_of *want, uint64_t *key)
{
    fs_sublist *sl = v->sl;
    size_t room = (size_t)(sl->img.len - fs_img_off(sl, e->tok));      /* the node's token lies in the image */
    if (fs_entry_key(sl->dialect, e->tok, elen, room, want, key))
        return FS_OK;
    uint64_t at = fs_img_off(sl, e);
    fs_error fe;
    int rc = fs_tokenize(sl->dialect, e->tok, elen, 1, &v->t, &fe);
    if (rc < 0)
        return rc == FS_ENOMEM ? rc : vbad(v, "invalid filter in a table", at);
    if (!entry_key(&v->t, sh, key))
        return vbad(v, sh ? "filter in the wrong shape's table" : "wildcard filter in the literal table", at);
    return FS_OK;
}

/* Does the lookup of entry e's filter (elen bytes, its key key) in a
 * table of cap slots find e, which slot i names -- fs_keyed_find(...) ==
 * e, without comparing e's filter with itself at slot i?  The probe from
 * the key's home slot stops at the first empty slot (not found), at the
 * first slot holding the same filter (its bytes compared only where the
 * key is the same: found, if that names e too), or at slot i, whose key
 * was checked against e's already. */
FS_ALWAYS_INLINE int entry_where_key_leads(const fs_sublist *sl, const fs_slot *slots, uint32_t cap, uint32_t i,
                                 uint64_t key, const fs_node *e, uint32_t elen)
{
    fs_tok_probe p = {.sl = sl, .mapped = 1, .a = (uint32_t)key, .b = (uint32_t)(key >> 32), .len = elen,
                      .tok = e->tok, .end = e->tok + elen, .found = NULL};
    uint32_t mask = cap - 1;
    for (uint32_t j = (uint32_t)key & mask; j != i; j = fs_probe_next(j, mask)) {
        if (!slots[j].node)
            return 0;
        if (fs_stop_at_tok(&slots[j], &p))
            return p.found == e;
    }
    return 1;
}

/* The entry at slot i of a table (L: its level, copied out of the image
 * and checked; sh: its shape, NULL for the literal table; want: its
 * fields, read once; ref: the slot's node, read once): reached once, a
 * valid filter of the table's kind, keyed right, where its key leads,
 * with its subscriptions as inserts leave them.  The general check, which
 * names what is wrong (entry_proven proves most entries without it). */
static int verify_entry(verifier *v, const fs_level *L, const fs_shape *sh, const fs_shape_of *want,
                        const fs_slot *slots, uint32_t i, const fs_node *ref)
{
    fs_sublist *sl = v->sl;
    const fs_node *e;
    int rc = reach(v, &slots[i], ref, &e);
    if (rc < 0)
        return rc;
    uint64_t at = fs_img_off(sl, e);
    if (e->linked & FS_LINK_TRIE)
        return vbad(v, "trie node in a table", at);
    uint32_t elen = fs_toklen_of(sl, e);
    uint64_t key;
    if ((rc = entry_filter_key(v, e, elen, sh, want, &key)) < 0)
        return rc;
    if (e->kind != (sh ? FS_NODE_SHAPED : FS_TOK_LITERAL) || e->hash != (uint32_t)key ||
        slots[i].hash != (uint32_t)key || slots[i].len != (uint32_t)(key >> 32))
        return vbad(v, "entry's key does not match its filter", at);
    if (!entry_where_key_leads(sl, slots, L->cap, i, key, e, elen) || !fs_lv_may_hold(sl, L, key))
        return vbad(v, "entry not where its key leads", at);
    const char *empty_why = "table entry without subscriptions";
    return verify_subs(v, e, fs_share_prefixed(sl->dialect, e->tok, elen), empty_why);
}

/* verify_entry's verdict on an entry whose filter fs_entry_key proves,
 * from one pass over the node's fields, each read once, in dialect d:
 * 1 when it is good (and now reached), FS_EBADDATA (or FS_ENOMEM) for
 * what verify_subs refuses, as verify_entry would, else 0 -- not proven,
 * nothing reached (a node fs_img_node_checked refuses has marked the
 * image damaged, which verify_entry's reach then refuses in its own
 * words) -- and verify_entry decides.  Each of verify_entry's
 * checks is here, in its order, or implied:
 *   - reach (fs_img_node_checked): the node and its token lie in the
 *     image; linked is exactly FS_LINK_IMAGE (an image's node, and no
 *     trie link to check: not a trie node either); the payload -- for
 *     the common node, one id held in the node itself (subcap 1, nsubs 1)
 *     and no queue group, nothing to bound; else fs_img_node_checked's
 *     own check; then the seen bit, last before the subscriptions, so that
 *     a node left to verify_entry is not yet marked by this slot;
 *   - the filter, its key, the slot's and node's copies of it, where the
 *     key leads: the same calls (fs_entry_key proves the filter; what it
 *     leaves is the tokenizer's, in verify_entry);
 *   - verify_subs: the common node's one plain id has no order to check;
 *     it is refused on a "$share/" filter (left to verify_entry here);
 *     any other node is verify_subs's, as in verify_entry. */
FS_ALWAYS_INLINE int entry_proven(verifier *v, fs_dialect d, const fs_level *L, const fs_shape_of *want,
                                  const fs_slot *slots, uint32_t i, const fs_node *ref)
{
    const fs_sublist *sl = v->sl;
    uint64_t off = (uint64_t)(uintptr_t)ref;
    if (!fs_img_holds(sl, off, sizeof(fs_node)))
        return 0;
    const fs_node *e = (const fs_node *)(const void *)(sl->img.base + off);
    uint32_t elen = fs_once16(&e->toklen);
    if (fs_once8(&e->linked) != FS_LINK_IMAGE || !fs_img_holds(sl, off, sizeof(fs_node) + FS_TOK_ALLOC(elen)))
        return 0;
    /* the image goes on past its nodes (its trailer at least): room >= the token's words + 8 */
    size_t room = (size_t)(sl->img.len - off - sizeof(fs_node));
    uint64_t key;
    if (!fs_entry_key_in(d, e->tok, elen, room, want, &key) ||
        fs_once8(&e->kind) != (want ? FS_NODE_SHAPED : FS_TOK_LITERAL) || fs_once32(&e->hash) != (uint32_t)key ||
        slots[i].hash != (uint32_t)key || slots[i].len != (uint32_t)(key >> 32) ||
        !entry_where_key_leads(sl, slots, L->cap, i, key, e, elen) || !fs_lv_may_hold(sl, L, key))
        return 0;
    int shared = fs_rules(d)->shares && fs_share_prefixed(d, e->tok, elen);     /* 0 folded where none */
    int common = fs_once32(&e->subcap) == 1 && fs_once32(&e->nsubs) == 1 && !fs_oncep(&e->groups);
    if ((common ? shared : !fs_img_node_checked(sl, off)) || seen_before(v, off))
        return 0;
    v->nodes++;
    if (common) {
        v->subs++;
        return 1;
    }
    int rc = verify_subs(v, e, shared, "table entry without subscriptions");
    return rc < 0 ? rc : 1;
}

/* Slots [lo, hi) of a table (L: its level, copied out of the image and
 * checked; sh: its shape, NULL for the literal table; shaped: sh != NULL,
 * a constant), in dialect d: each entry as verify_entry checks it.
 * *count: the occupied slots. */
FS_ALWAYS_INLINE int verify_slots_in(verifier *v, fs_dialect d, int shaped, const fs_level *L, const fs_shape *sh,
                                     uint32_t lo, uint32_t hi, uint32_t *count)
{
    fs_sublist *sl = v->sl;
    const fs_slot *slots = fs_lv_slots(sl, L);
    const uint64_t *filter = L->filter ? fs_lv_filter(sl, L) : NULL;
    fs_shape_of want = {.onemask = 0, .ntoks = 0, .rest = 0, .key = 0};
    if (shaped)                /* read once: the mapped shape is what shape_ok checked */
        want = (fs_shape_of){.onemask = sh->onemask, .ntoks = sh->ntoks, .rest = sh->rest, .key = 0};
    const fs_shape_of *w = shaped ? &want : NULL;
    uint32_t n = 0;
    for (uint32_t i = lo; i < hi; i++) {
        /* This writer lays a table's nodes out in slot order, but an
         * image of an older one (nodes in byte order) or of another
         * writer may put them anywhere: each node a cache miss.  Fetch
         * some ahead, so that misses overlap (this pass is memory-bound:
         * 2.6x faster on light's 2M filters, with byte-ordered nodes). */
        if (i + VERIFY_AHEAD < hi) {
            const fs_slot *a = &slots[i + VERIFY_AHEAD];
            uint64_t ahead = (uint64_t)(uintptr_t)a->node;
            if (ahead) {
                FS_PREFETCH(fs_ref_addr(sl, a->node));
                FS_PREFETCH(fs_ref_addr(sl, a->node) + 64);     /* its token's tail */
                FS_PREFETCH((const void *)&v->seen[(ahead >> 6) & (v->nseen - 1)]);
                if (filter)         /* its bitmap word (fs_lv_may_hold), from the slot's key */
                    FS_PREFETCH(&filter[(a->len & L->filter_mask) >> 6]);
            }
        }
        const fs_node *ref = slots[i].node;
        if (!ref)
            continue;
        n++;
        int rc = entry_proven(v, d, L, w, slots, i, ref);
        if (rc == 0)
            rc = verify_entry(v, L, sh, w, slots, i, ref);
        if (rc < 0)
            return rc;
    }
    *count += n;
    return FS_OK;
}

/* Each dialect's own copies, its rules and the table's kind folded to
 * constants. */
static int verify_slots_nats(verifier *v, const fs_level *L, const fs_shape *sh, uint32_t lo, uint32_t hi,
                             uint32_t *count)
{
    return sh ? verify_slots_in(v, FS_NATS, 1, L, sh, lo, hi, count) : verify_slots_in(v, FS_NATS, 0, L, sh, lo, hi, count);
}
static int verify_slots_mqtt(verifier *v, const fs_level *L, const fs_shape *sh, uint32_t lo, uint32_t hi,
                             uint32_t *count)
{
    return sh ? verify_slots_in(v, FS_MQTT, 1, L, sh, lo, hi, count) : verify_slots_in(v, FS_MQTT, 0, L, sh, lo, hi, count);
}
static int verify_slots_amqp(verifier *v, const fs_level *L, const fs_shape *sh, uint32_t lo, uint32_t hi,
                             uint32_t *count)
{
    return sh ? verify_slots_in(v, FS_AMQP, 1, L, sh, lo, hi, count) : verify_slots_in(v, FS_AMQP, 0, L, sh, lo, hi, count);
}

static int verify_slots(verifier *v, const fs_level *L, const fs_shape *sh, uint32_t lo, uint32_t hi, uint32_t *count)
{
    return FS_PER_DIALECT(v->sl->dialect, verify_slots_nats(v, L, sh, lo, hi, count),
                          verify_slots_mqtt(v, L, sh, lo, hi, count), verify_slots_amqp(v, L, sh, lo, hi, count));
}

/* The level at Lm copied once and the copy checked (the file may be
 * rewritten under the check: fs_once8, fs_layout.h); the copy is read
 * from then on, the mapped level only names positions. */
static int level_copy(verifier *v, const fs_level *Lm, fs_level *out)
{
    memcpy(out, Lm, sizeof(*out));
    return fs_img_level_ok(v->sl, out) ? FS_OK : vbad(v, "level outside the image", fs_img_off(v->sl, Lm));
}

static int verify_table(verifier *v, const fs_level *Lm, const fs_shape *sh)
{
    fs_level lv;
    uint32_t count = 0;
    int rc = level_copy(v, Lm, &lv);
    if (rc == FS_OK)
        rc = verify_slots(v, &lv, sh, 0, lv.cap, &count);
    if (rc == FS_OK && count != lv.count)
        rc = vbad(v, "table count does not match its slots", fs_img_off(v->sl, Lm));
    return rc;
}

/* Is the trie filter of node n also kept by a shape table?  (Then it is
 * stored twice.)  Rebuilds the filter into buf. */
static int trie_filter_in_shape(verifier *v, const fs_node *n, char *buf)
{
    fs_sublist *sl = v->sl;
    size_t len = fs_path_bytes(sl, n);
    if (len > FS_MAX_SUBJECT)           /* buf's room: longer only if the file changed under the check */
        return vbad(v, "trie path too long or not reaching the root", fs_img_off(sl, n));
    fs_path_write(sl, n, buf, buf + len);
    fs_error fe;
    int rc = fs_tokenize(sl->dialect, buf, len, 1, &v->t, &fe);
    if (rc < 0)
        return rc == FS_ENOMEM ? rc : vbad(v, "invalid filter in the trie", fs_img_off(sl, n));
    if (count_literal(&v->t) == v->t.n)
        return vbad(v, "literal filter in the trie", fs_img_off(sl, n));
    fs_shape_of of;
    if (!fs_shape_classify(&v->t, &of))
        return FS_OK;
    const fs_shape *sh = fs_shape_find(sl, &of);
    if (sh && fs_keyed_find(sl, &sh->table, of.key, buf, (uint32_t)len, buf + len))
        return vbad(v, "filter both in a shape table and in the trie", fs_img_off(sl, n));
    return FS_OK;
}

/* A trie node to check, with the length of its filter and whether it
 * starts "$share/" (carried down: a path rebuilt per node would cost
 * O(depth^2) on a 30,000-level chain). */
typedef struct {
    const fs_node *n;
    size_t len;
    uint8_t shared;           /* n's filter starts "$share/": below the root's "$share" level */
    uint8_t shared_below;     /* its children's do: shared, or n is that level */
} vframe;

/* The nodes still to check (verify_trie's explicit stack). */
typedef struct {
    vframe *f;
    size_t n, cap;
} vstack;

static int vpush(vstack *s, const fs_node *x, size_t len, int shared, int shared_below)
{
    if (s->n == s->cap && fs_grow(&s->f, &s->cap, s->n + 1, sizeof(vframe)) < 0)
        return FS_ENOMEM;
    s->f[s->n++] = (vframe){.n = x, .len = len, .shared = (uint8_t)shared, .shared_below = (uint8_t)shared_below};
    return FS_OK;
}

/* The literal children of x, in its level L (the checked copy of the
 * mapped Lm): each linked to x, a valid token found by its own lookup,
 * pushed with its filter's length (below: x's filter and a separator)
 * and whether it starts "$share/" (shared: x's shared_below; below them
 * too when the child is the root's "$share" level); then the level's
 * count against its slots. */
static int verify_literal_children(verifier *v, const fs_node *x, const fs_level *Lm, const fs_level *L,
                                   size_t below, int shared, vstack *stack)
{
    fs_sublist *sl = v->sl;
    const fs_slot *slots = fs_lv_slots(sl, L);
    uint32_t count = 0;
    for (uint32_t i = 0; i < L->cap; i++) {
        if (!slots[i].node)
            continue;
        count++;
        const fs_node *c;
        int rc = reach(v, &slots[i], slots[i].node, &c);
        if (rc < 0)
            return rc;
        uint32_t clen = fs_toklen_of(sl, c), chash = c->hash;
        fs_error fe;
        if (!(c->linked & FS_LINK_TRIE) || fs_up(sl, c) != x || c->kind != FS_TOK_LITERAL ||
            fs_check_literal(sl->dialect, (const unsigned char *)c->tok, clen, 0, &fe) < 0 ||
            chash != fs_hash(c->tok, clen) || slots[i].hash != chash || slots[i].len != clen ||
            fs_level_find(sl, L, c->tok, clen, chash) != c)
            return vbad(v, "trie node not where its parent and token lead", fs_img_off(sl, c));
        int level = x == sl->root && fs_share_level(sl->dialect, c->tok, clen);
        if ((rc = vpush(stack, c, below + clen, shared, shared || level)) < 0)
            return rc;
    }
    if (count != L->count)
        return vbad(v, "table count does not match its slots", fs_img_off(sl, Lm));
    return FS_OK;
}

/* The wildcard children of x (the one-level wildcard, then the rest
 * wildcard), as verify_literal_children's, reached through the mapped
 * level's fields. */
static int verify_wild_children(verifier *v, const fs_node *x, const fs_level *Lm, const fs_level *L,
                                size_t below, int shared, vstack *stack)
{
    fs_sublist *sl = v->sl;
    int rc = FS_OK;
    for (int w = 0; w < 2 && rc == FS_OK; w++) {
        const fs_node *ref = w ? L->rest : L->one, *c;
        if (!ref)
            continue;
        if ((rc = reach(v, w ? (const void *)&Lm->rest : (const void *)&Lm->one, ref, &c)) < 0)
            break;
        fs_tok_kind want = w ? FS_TOK_REST : FS_TOK_ONE;
        uint32_t clen = fs_toklen_of(sl, c);
        if (!(c->linked & FS_LINK_TRIE) || fs_up(sl, c) != x || c->kind != want ||
            fs_token_kind(sl->dialect, c->tok, clen) != want || c->hash != fs_hash(c->tok, clen))
            rc = vbad(v, "wildcard node not where its parent leads", fs_img_off(sl, c));
        else
            rc = vpush(stack, c, below + clen, shared, shared);
    }
    return rc;
}

/* The trie, depth first over an explicit stack: every node reached once,
 * linked to its parent, of the kind its place says, found by its own
 * lookup, holding subscriptions or children (inserts prune the rest). */
static int verify_trie(verifier *v)
{
    fs_sublist *sl = v->sl;
    const fs_dialect_rules *R = fs_rules(sl->dialect);
    vstack stack = {.f = NULL, .n = 0, .cap = 0};
    char *buf = FS_MALLOC(FS_MAX_SUBJECT + 1);
    int rc = buf ? vpush(&stack, sl->root, 0, 0, 0) : FS_ENOMEM;
    while (rc == FS_OK && stack.n) {
        vframe f = stack.f[--stack.n];
        const fs_node *x = f.n;
        uint64_t at = fs_img_off(sl, x);
        if (x != sl->root) {
            if (atomic_load(&sl->damaged) || f.len > R->max_len) {
                rc = vbad(v, "trie path too long or not reaching the root", at);
                break;
            }
            if (fs_has_subs(x) &&
                ((rc = verify_subs(v, x, f.shared, NULL)) < 0 || (rc = trie_filter_in_shape(v, x, buf)) < 0))
                break;
        }
        /* a child's filter: this one's, a separator (not below the root), its token */
        size_t below = x == sl->root ? 0 : f.len + 1;
        const fs_level *Lm = fs_down(sl, x);
        if (!Lm) {
            if (atomic_load(&sl->damaged))
                rc = vbad(v, "level outside the image", at);
            else if (x != sl->root && !fs_has_subs(x))
                rc = vbad(v, "empty trie node", at);
            continue;
        }
        fs_level lv;                    /* a checked copy, as verify_table's */
        memcpy(&lv, Lm, sizeof(lv));
        if (!fs_img_level_ok(sl, &lv)) {
            rc = vbad(v, "level outside the image", at);
            break;
        }
        const fs_level *L = &lv;
        if (x != sl->root && !fs_has_subs(x) && !L->count && !L->one && !L->rest) {
            rc = vbad(v, "empty trie node", at);
            break;
        }
        if (x->kind == FS_TOK_REST && !R->rest_anywhere && (L->count || L->one || L->rest)) {
            rc = vbad(v, "rest wildcard with children", at);
            break;
        }
        if ((rc = verify_literal_children(v, x, Lm, L, below, f.shared_below, &stack)) == FS_OK)
            rc = verify_wild_children(v, x, Lm, L, below, f.shared_below, &stack);
    }
    FS_FREE(stack.f);
    FS_FREE(buf);
    return rc;
}

/* Every invariant of docs/FORMAT.md, "Invariants of a mapped image". */
/* seen for sl's image, zeroed, with the root marked (it was reached at
 * open); FS_ENOMEM. */
static int seen_init(verifier *v)
{
    size_t seen_bytes = 64;
    while (seen_bytes < (size_t)(v->sl->img.len >> 6) + 1)
        seen_bytes *= 2;
    v->nseen = seen_bytes;
    v->seen = FS_MALLOC(seen_bytes);
    if (!v->seen)
        return FS_ENOMEM;
    memset((void *)v->seen, 0, seen_bytes);
    uint64_t ro = fs_img_off(v->sl, v->sl->root);
    v->seen[ro >> 6] = (uint8_t)(1u << ((ro >> 3) & 7));
    return FS_OK;
}

/* The root as fs_sublist_new makes it: a literal node with no token (so
 * hash 0), no subscriptions and no parent.  No walk reads its kind or
 * hash; they are checked so that a verified trie holds no node marked a
 * wildcard that is not one (fuzz_image's invariant), the root included. */
static int root_ok(verifier *v)
{
    const fs_sublist *sl = v->sl;
    const fs_node *r = sl->root;
    if (!(r->linked & FS_LINK_TRIE) || fs_up(sl, r) || fs_has_subs(r) || r->toklen || r->kind != FS_TOK_LITERAL ||
        r->hash)
        return vbad(v, "the trie's root is not a bare root node", fs_img_off(sl, r));
    return FS_OK;
}

/* Shape j's own fields, as fs_shape_create leaves them, in canonical order
 * after shape j - 1, and not empty. */
static int shape_ok(verifier *v, uint32_t j)
{
    const fs_sublist *sl = v->sl;
    const fs_shape *sh = sl->shapes.shape[j];
    uint64_t at = fs_img_off(sl, sh);
    fs_shape_of of = {.onemask = sh->onemask, .ntoks = sh->ntoks, .rest = sh->rest, .key = 0};
    if (sh->ntoks > FS_SHAPE_MAX_TOKENS || sh->rest > 1 || (sh->ntoks < 64 && sh->onemask >> sh->ntoks) ||
        (!sh->onemask && !sh->rest) || sh->first_wild != ((sh->onemask & 1) || (sh->rest && sh->ntoks == 0)))
        return vbad(v, "invalid shape", at);
    if (j && !fs_shape_before(sl->shapes.shape[j - 1], &of))
        return vbad(v, "shapes not in canonical order", at);
    if (!sh->table.count)
        return vbad(v, "empty shape", at);
    return FS_OK;
}

/* What follows the tables: the trie, the counts.  (The probe sets are
 * open's, at every level: fs_image.c.) */
static int verify_rest(verifier *v)
{
    fs_sublist *sl = v->sl;
    fs_file_header hd;
    fs_header_read((const unsigned char *)sl->img.base, &hd);
    int rc = verify_trie(v);
    if (rc == FS_OK && v->subs != hd.subs)
        rc = vbad(v, "subscription count does not match the header", FS_HDR_SUBS);
    if (rc == FS_OK && v->literals != hd.literals)
        rc = vbad(v, "literal count does not match the header", FS_HDR_LITERALS);
    if (rc == FS_OK && v->nodes != sl->nodes)
        rc = vbad(v, "node count does not match the header", FS_HDR_NODES);
    if (rc == FS_OK && atomic_load(&sl->damaged))
        rc = vbad(v, "offset outside the image", 0);
    return rc;
}

/* Every invariant, in one thread, in the order docs/FORMAT.md lists them:
 * the first broken one is the error. */
static int verify_in_order(fs_sublist *sl, fs_error *err)
{
    verifier v;
    memset(&v, 0, sizeof(v));
    v.sl = sl;
    v.err = err;
    fs_tokens_init(&v.t);
    int rc = seen_init(&v);
    if (rc == FS_OK)
        rc = root_ok(&v);
    if (rc == FS_OK)
        rc = verify_table(&v, sl->lit, NULL);
    v.literals = v.nodes;
    for (uint32_t j = 0; j < sl->shapes.n && rc == FS_OK; j++)
        if ((rc = shape_ok(&v, j)) == FS_OK)
            rc = verify_table(&v, &sl->shapes.shape[j]->table, sl->shapes.shape[j]);
    if (rc == FS_OK)
        rc = verify_rest(&v);
    fs_tokens_free(&v.t);
    FS_FREE((void *)v.seen);
    return rc;
}

/* ---- the tables on several threads
 *
 * The tables hold almost every node, and their entries are independent:
 * their slots are cut into units that threads take one by one (the
 * process's worker pool, fs_pool.h, and the opening thread), each with a
 * verifier of its own and the one shared seen bitmap, marked atomically.
 * The checksum (a pending one) runs beside them.  It is one chain over
 * the image's bytes (XXH64 cannot be cut into sums of parts), so it is
 * fed in pieces, in order, by whichever thread holds it: before each unit
 * a thread takes the next piece if no other thread holds the chain.  So
 * the checksum is spread over the threads as the units are, and no thread
 * is left summing the whole image while the others wait for it (as when
 * it ran whole on one thread, first).
 * This pass proves an image good; it does not name what is wrong with a
 * bad one.  Where any unit fails, whatever the reason, the whole check
 * runs again in one thread (verify_in_order), so that the error is the
 * one the order of the checks gives, whatever the threads' timing. */

/* Slots of a unit (below fs_image_parallel_min bytes, fs_tuning.h, an
 * image is checked in one thread). */
#define VERIFY_UNIT_SLOTS 16384
/* Bytes of the checksum's chain fed at a time: about a unit's time (a
 * unit's entries read about as many bytes), whole XXH64 stripes. */
#define VERIFY_SUM_PIECE ((size_t)2 << 20)

typedef struct {
    uint32_t table, lo, hi;
} vunit;

typedef struct {
    fs_pool_task task;
    fs_sublist *sl;
    _Atomic uint8_t *seen;
    uint64_t nseen;
    const fs_level *levels;           /* the tables' checked copies: 0 the literal table, 1 + j shape j */
    const vunit *units;
    uint32_t *counts;                 /* each unit's occupied slots */
    size_t nunits;
    atomic_size_t next;               /* the next unit to take */
    atomic_int failed;
    atomic_uint_fast64_t subs, nodes;
    /* The checksum's chain: its state and the bytes fed (sum_at of
     * sum_len), read and written only by the thread holding sum_busy;
     * sum_done (all fed, sum its value) read after the join. */
    int sum_pending, sum_done;
    atomic_int sum_busy;
    fs_checksum_state sum_state;
    size_t sum_at, sum_len;
    uint64_t sum;
    /* A version 4 image's checksum instead (fs_checksum.h): its blocks
     * taken in turn, each block's sum into its own place (NULL: the chain). */
    uint64_t *block_sums;
    size_t nblocks;
    atomic_size_t next_block;
} vjob;

/* Feed the checksum's next piece, unless another thread holds the chain
 * (or it is done).  1 when this thread fed one; 0 otherwise. */
static int vjob_sum_piece(vjob *J)
{
    if (!J->sum_pending || atomic_load_explicit(&J->sum_busy, memory_order_relaxed) ||
        atomic_exchange_explicit(&J->sum_busy, 1, memory_order_acquire))
        return 0;
    int fed = !J->sum_done;
    if (fed) {
        size_t n = J->sum_len - J->sum_at < VERIFY_SUM_PIECE ? J->sum_len - J->sum_at : VERIFY_SUM_PIECE;
        fs_checksum_feed(&J->sum_state, J->sl->img.base + J->sum_at, n);
        J->sum_at += n;
        if (J->sum_at == J->sum_len) {
            J->sum = fs_checksum_end(&J->sum_state);
            J->sum_done = 1;
        }
    }
    atomic_store_explicit(&J->sum_busy, 0, memory_order_release);   /* the state, to the next holder */
    return fed;
}

/* Sum a version 4 image's next block, if one is left.  1 when this thread
 * summed one; 0 otherwise. */
static int vjob_sum_block(vjob *J)
{
    size_t k = atomic_fetch_add_explicit(&J->next_block, 1, memory_order_relaxed);
    if (k >= J->nblocks)
        return 0;
    J->block_sums[k] = fs_checksum_block(J->sl->img.base, J->sum_len, k);
    return 1;
}

/* One step of the checksum beside the tables: a block, or the chain's
 * next piece. */
static int vjob_sum_step(vjob *J)
{
    return J->block_sums ? vjob_sum_block(J) : vjob_sum_piece(J);
}

/* A version 4 image's checksum in blocks (when memory for their sums is
 * there; the chain otherwise). */
static void vjob_blocks_begin(vjob *J)
{
    if (J->sum_pending && fs_header_version((const unsigned char *)J->sl->img.base) >= FS_CHECKSUM_BLOCKED_FROM) {
        J->nblocks = fs_checksum_nblocks(J->sum_len);
        J->block_sums = FS_MALLOC(sizeof(uint64_t) * (J->nblocks ? J->nblocks : 1));
    }
}

/* After the join: the blocks' sums summed, when every block was (a failed
 * table stops the threads early: then the check sums it again itself). */
static void vjob_blocks_end(vjob *J)
{
    if (J->block_sums && atomic_load(&J->next_block) >= J->nblocks) {
        J->sum = fs_checksum_of_sums(J->block_sums, J->nblocks);
        J->sum_done = 1;
    }
    FS_FREE(J->block_sums);
    J->block_sums = NULL;
}

static void vjob_work(vjob *J)
{
    fs_error e;
    verifier v;
    memset(&v, 0, sizeof(v));
    v.sl = J->sl;
    v.err = &e;
    v.seen = J->seen;
    v.nseen = J->nseen;
    v.shared = 1;
    fs_tokens_init(&v.t);
    for (;;) {
        vjob_sum_step(J);
        size_t u = atomic_fetch_add(&J->next, 1);
        if (u >= J->nunits || atomic_load_explicit(&J->failed, memory_order_relaxed)) {
            /* No unit left: the checksum's rest.  A thread that finds the
             * chain held leaves it to its holder, which comes back for the
             * next piece whenever it has fed one: the last holder feeds
             * the last piece. */
            while (!atomic_load_explicit(&J->failed, memory_order_relaxed) && vjob_sum_step(J))
                ;
            break;
        }
        const vunit *U = &J->units[u];
        uint32_t c = 0;
        const fs_shape *sh = U->table ? J->sl->shapes.shape[U->table - 1] : NULL;
        if (verify_slots(&v, &J->levels[U->table], sh, U->lo, U->hi, &c) < 0) {
            atomic_store(&J->failed, 1);
            break;
        }
        J->counts[u] = c;
    }
    atomic_fetch_add(&J->subs, v.subs);
    atomic_fetch_add(&J->nodes, v.nodes);
    fs_tokens_free(&v.t);
}

static void vjob_run(void *arg, unsigned index)
{
    (void)index;
    vjob_work(arg);
}

/* The image's checksum: FS_OK, or FS_EBADDATA naming it.  sum: of the
 * bytes before it (computed here, on `threads` threads, when NULL), as
 * the header's version sums them (its header read already). */
int fs_image_checksum_check(const char *data, size_t len, const uint64_t *sum, unsigned threads, fs_error *err)
{
    unsigned version = fs_header_version((const unsigned char *)data);
    uint64_t got = sum ? *sum : fs_checksum_blocks(version, data, len - FS_SERIAL_TRAILER, threads);
    if (fs_le_get((const unsigned char *)data + len - FS_SERIAL_TRAILER, FS_SERIAL_TRAILER) == got)
        return FS_OK;
    err->reason = "checksum mismatch";      /* of [0, len - 8): what it sums ends here */
    err->pos = len - FS_SERIAL_TRAILER;
    err->in_queue = 0;
    return FS_EBADDATA;
}

/* 1: not proven good (verify_in_order says why), else as verify_in_order.
 * *sum_pending: the checksum is to be checked too (here, beside the
 * tables); cleared once it has been. */
static int verify_threads(fs_sublist *sl, unsigned threads, int *sum_pending, fs_error *err)
{
    vjob J;
    memset(&J, 0, sizeof(J));
    fs_level levels[1 + FS_SHAPE_MAX];
    verifier v;
    memset(&v, 0, sizeof(v));
    v.sl = sl;
    v.err = err;
    fs_tokens_init(&v.t);
    vunit *units = NULL;
    uint32_t *counts = NULL;
    int rc = seen_init(&v) == FS_OK && root_ok(&v) == FS_OK && level_copy(&v, sl->lit, &levels[0]) == FS_OK ? FS_OK : 1;
    size_t nunits = rc == FS_OK ? (levels[0].cap + VERIFY_UNIT_SLOTS - 1) / VERIFY_UNIT_SLOTS : 0;
    for (uint32_t j = 0; j < sl->shapes.n && rc == FS_OK; j++) {
        if (shape_ok(&v, j) != FS_OK || level_copy(&v, &sl->shapes.shape[j]->table, &levels[1 + j]) != FS_OK)
            rc = 1;
        else
            nunits += (levels[1 + j].cap + VERIFY_UNIT_SLOTS - 1) / VERIFY_UNIT_SLOTS;
    }
    if (rc == FS_OK) {
        units = FS_MALLOC(sizeof(vunit) * (nunits ? nunits : 1));
        counts = FS_MALLOC(sizeof(uint32_t) * (nunits ? nunits : 1));
        rc = units && counts ? FS_OK : 1;
    }
    if (rc == FS_OK) {
        size_t k = 0;
        for (uint32_t t = 0; t <= sl->shapes.n; t++)
            for (uint32_t lo = 0; lo < levels[t].cap; lo += VERIFY_UNIT_SLOTS)
                units[k++] = (vunit){.table = t, .lo = lo,
                                 .hi = levels[t].cap - lo < VERIFY_UNIT_SLOTS ? levels[t].cap : lo + VERIFY_UNIT_SLOTS};
        J.task.fn = vjob_run;
        J.task.arg = &J;
        J.sl = sl;
        J.seen = v.seen;
        J.nseen = v.nseen;
        J.levels = levels;
        J.units = units;
        J.counts = counts;
        J.nunits = nunits;
        J.sum_pending = *sum_pending;
        fs_checksum_begin(&J.sum_state);
        J.sum_len = sl->img.len - FS_SERIAL_TRAILER;
        vjob_blocks_begin(&J);
        int posted = fs_pool_submit(&J.task, threads - 1) == FS_OK;
        vjob_work(&J);                          /* the opening thread takes units too */
        if (posted)
            fs_pool_join(&J.task);
        vjob_blocks_end(&J);
        if (*sum_pending) {
            rc = fs_image_checksum_check(sl->img.base, sl->img.len, J.sum_done ? &J.sum : NULL, threads, err);
            *sum_pending = 0;
        }
        if (rc == FS_OK && atomic_load(&J.failed))
            rc = 1;
        if (rc == FS_OK) {
            uint32_t got[1 + FS_SHAPE_MAX] = {0};
            for (size_t u = 0; u < nunits; u++)
                got[units[u].table] += counts[u];
            for (uint32_t t = 0; t <= sl->shapes.n && rc == FS_OK; t++)
                if (got[t] != levels[t].count)
                    rc = 1;
            v.subs = atomic_load(&J.subs);
            v.nodes = atomic_load(&J.nodes);
            v.literals = got[0];
        }
    }
    if (rc == FS_OK)
        rc = verify_rest(&v);
    fs_tokens_free(&v.t);
    FS_FREE((void *)v.seen);
    FS_FREE(units);
    FS_FREE(counts);
    return rc;
}

/* Every invariant (FS_VERIFY_FULL), on up to `threads` threads where the
 * image is big enough; sum_pending: the checksum too (the caller deferred
 * it, to run beside the tables).  A mismatched checksum is the error
 * whatever else is wrong, as when it is checked first. */
int fs_image_verify(fs_sublist *sl, unsigned threads, int sum_pending, fs_error *err)
{
    int rc = 1;
    if (threads > 1 && sl->img.len >= fs_image_parallel_min)
        rc = verify_threads(sl, threads, &sum_pending, err);
    if (rc != 1)
        return rc;
    if (sum_pending && (rc = fs_image_checksum_check(sl->img.base, sl->img.len, NULL, threads, err)) < 0)
        return rc;
    return verify_in_order(sl, err);
}
