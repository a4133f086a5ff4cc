/* fs_image.c - opening a mapped image (sublist.h; docs/FORMAT.md,
 * version 3): an index pointed at the image's bytes, after the header and
 * the root block are checked (O(1)) and, as asked, the checksum or every
 * invariant (fs_image_verify.c); the literal table's and the shapes'
 * fields then copied out of the mapping.  The checks that make following
 * an offset safe while matching (fs_img_node_checked,
 * fs_img_level_checked) are the index layer's, below this one
 * (fs_layout.c), as is the set of masked nodes of the live part; the walk
 * over the live part is fs_walk.c's.  The writer is fs_image_write.c, the
 * thaw fs_image_thaw.c. */
#include "fs_image.h"

#include <stdlib.h>
#include <string.h>

#include "fs_header.h"
#include "fs_image_root.h"
#include "fs_image_verify.h"
#include "fs_index.h"
#include "fs_tuning.h"

static int host_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

int fs_image_damaged(const fs_sublist *sl) { return atomic_load(&((fs_sublist *)(uintptr_t)sl)->damaged); }

int fs_image_is(const char *data, size_t len)
{
    for (unsigned v = FS_IMAGE_VERSION_MIN; v <= FS_IMAGE_VERSION; v++)
        if (fs_header_is((const unsigned char *)data, len, v))
            return 1;
    return 0;
}

uint64_t fs_image_bytes(const fs_sublist *sl) { return sl->img.base ? sl->img.len : 0; }

/* Copy the literal table's level and the shapes out of the mapping into
 * sl (check_and_copy says why), checking the copies as the open checked the
 * mapping, and the probe sets against the copies.  FS_OK, FS_ENOMEM, or
 * FS_EBADDATA with *why: the copy differs from what was checked (the file
 * changed meanwhile), or the probe sets are not the shapes'. */
static int copy_tables(fs_sublist *sl, const char **why)
{
    *why = "root block's offsets outside the image";
    memcpy(&sl->literals, sl->lit, sizeof(fs_level));
    if (!fs_img_level_ok(sl, &sl->literals) || !(sl->literals.filter || !sl->literals.cap))
        return FS_EBADDATA;
    sl->lit = &sl->literals;
    for (uint32_t j = 0; j < sl->shapes.n; j++) {
        fs_shape *sh = fs_slab_alloc(&sl->slab, sizeof(fs_shape));
        if (!sh)
            return FS_ENOMEM;
        memcpy(sh, sl->shapes.shape[j], sizeof(fs_shape));
        sl->shapes.shape[j] = sh;
        if (sh->ntoks > FS_SHAPE_MAX_TOKENS || sh->rest > 1 || (sh->onemask >> sh->ntoks) ||
            (!sh->table.filter && sh->table.cap) || !fs_img_level_ok(sl, &sh->table))
            return FS_EBADDATA;
    }
    /* A subject probes the shapes its length's set names, reading its own
     * tokens at each shape's positions: a set naming a longer shape would
     * send those reads past them.  So the sets must be the ones the shapes
     * imply at every level of the check, not only the full one: a function
     * of at most 64 shapes' fields, a few microseconds. */
    uint64_t want[FS_SHAPE_MAX_TOKENS + 2];
    _Static_assert(sizeof(want) == sizeof(sl->shapes.probe[0]), "a probe set a subject length");
    fs_shapes_probes(sl, want);
    if (memcmp(want, sl->shapes.probe[0], sizeof(want)) != 0) {
        *why = "probe sets do not match the shapes";
        return FS_EBADDATA;
    }
    fs_shapes_hide_probes(&sl->shapes);      /* from the copies, as checked */
    return FS_OK;
}

/* Refuse the image for `why` at byte at -- or for its checksum, when the
 * check of the checksum was put off (sum_pending) and it does not match:
 * a checksum checked first would have been the error. */
static int refuse(const char *data, size_t len, int sum_pending, const char *why, size_t at, fs_error *err)
{
    if (sum_pending && fs_image_checksum_check(data, len, NULL, 1, err) < 0)
        return FS_EBADDATA;
    err->reason = why;
    err->pos = at;
    err->in_queue = 0;
    return FS_EBADDATA;
}

/* How versions 3 and 4 refuse a header (docs/FORMAT.md, "Invariants of
 * an image", 1): a flag outside the dialect's bits is an unknown dialect. */
static const fs_header_rules IMAGE_HEADER = {
    .min_len = FS_IMG_OBJECTS + FS_SERIAL_TRAILER,
    .vmin = FS_IMAGE_VERSION_MIN,
    .vmax = FS_IMAGE_VERSION,
    .short_why = "image shorter than its header and root block",
    .magic_why = "bad magic",
    .version_why = "not a version 3 or 4 image",
    .flags_why = "unknown dialect",
    .dialect_why = "unknown dialect",
    .reserved_why = "reserved field not zero",
};

/* The refusals of fs_image_open's steps: each step's data, len, err and
 * sum_pending (0 until the header says whether the checksum is put off). */
#define FAIL(why, at) return refuse(data, len, sum_pending, (why), (at), err)

/* The header and the root block, before anything is mapped: this host and
 * this buffer can map the image, the header's fields are known and agree
 * with the image's size, the root block's counts are bounded.  The
 * checksum is checked here, or put off (*sum_pending_out) when a full
 * check on threads will run it beside the tables'. */
static int check_header(const char *data, size_t len, int verify, unsigned threads, fs_file_header *hd,
                        fs_dialect *d, img_root *R, int *sum_pending_out, fs_error *err)
{
    const unsigned char *h = (const unsigned char *)data;
    int sum_pending = 0;
    if (!host_little_endian())
        FAIL("an image maps only on little-endian hosts", FS_HDR_VERSION);
    if (((uintptr_t)data & 7) != 0)
        FAIL("image not 8-byte aligned in memory", 0);
    if (fs_header_get(h, len, &IMAGE_HEADER, hd, d, err) < 0)
        return FS_EBADDATA;
    uint64_t P = hd->payload;
    if (P != len - FS_SERIAL_HEADER - FS_SERIAL_TRAILER)
        FAIL("payload length does not match the image's size", FS_HDR_PAYLOAD);
    /* A full check on threads puts the checksum off, to run beside the
     * tables' check (fs_image_verify); every refusal from here checks it
     * first (refuse). */
    sum_pending = verify == FS_VERIFY_FULL && threads > 1 && len >= fs_image_parallel_min;
    *sum_pending_out = sum_pending;
    if (verify != FS_VERIFY_NONE && !sum_pending && fs_image_checksum_check(data, len, NULL, threads, err) < 0)
        return FS_EBADDATA;
    memcpy(R, h + FS_SERIAL_HEADER, sizeof(*R));
    if (R->objects_end != FS_SERIAL_HEADER + P)
        FAIL("objects' end does not match the payload", FS_SERIAL_HEADER);
    if (R->nshapes > FS_SHAPE_MAX)
        FAIL("more filter shapes than an index holds", FS_SERIAL_HEADER);
    uint64_t known = R->nshapes == 64 ? ~0ull : (1ull << R->nshapes) - 1;
    for (uint32_t k = 0; k < FS_SHAPE_MAX_TOKENS + 2; k++)
        if ((R->probe[k] & ~known) || fs_popcount64(R->probe[k]) > FS_SHAPE_MAX_PROBES)
            FAIL("probe set names a shape the image lacks", FS_SERIAL_HEADER);
    if (hd->nodes != R->nodes)
        FAIL("node count does not match the header", FS_HDR_NODES);
    /* Walks bound their work by the node count (a loop in a damaged image
     * stops there): it cannot exceed what the image could hold. */
    if (R->nodes > len / sizeof(fs_node))
        FAIL("node count exceeds what the image could hold", FS_HDR_NODES);
    return FS_OK;
}

/* Map sl (new, without a root) onto the image: the root block's offsets
 * (root node, literal table, shapes) inside the image and the shapes'
 * fields in range, then sl's root, tables, counts.  NULL, or why the
 * root block is refused (at FS_SERIAL_HEADER); sl is unchanged then but
 * for img and the shapes checked so far (the caller frees it). */
static const char *map_sections(fs_sublist *sl, const char *data, size_t len, const fs_file_header *hd,
                                const img_root *R)
{
    sl->img.base = data;
    sl->img.len = len;
    sl->img.nodes_end = R->objects_end;
    const fs_node *root = fs_img_node_checked(sl, R->root);
    const fs_level *lit = fs_img_level_checked(sl, R->literals);
    if (!(root && (root->linked & FS_LINK_TRIE) && lit && (lit->filter || !lit->cap)))
        return "root block's offsets outside the image";
    for (uint32_t j = 0; j < R->nshapes; j++) {
        if (!fs_img_holds(sl, R->shape[j], sizeof(fs_shape)) ||
            !fs_img_level_checked(sl, R->shape[j] + offsetof(fs_shape, table)))
            return "root block's offsets outside the image";
        const fs_shape *sh = (const fs_shape *)(const void *)(data + R->shape[j]);
        /* the walk derives keys from these without looking further: they
         * index arrays of FS_SHAPE_MAX_TOKENS + 1 */
        if (sh->ntoks > FS_SHAPE_MAX_TOKENS || sh->rest > 1 || (sh->onemask >> sh->ntoks) ||
            (!sh->table.filter && sh->table.cap))
            return "invalid shape";
        sl->shapes.shape[j] = (fs_shape *)(uintptr_t)sh;
    }
    sl->root = (fs_node *)(uintptr_t)root;
    sl->lit = lit;
    sl->shapes.n = (uint32_t)R->nshapes;
    memcpy(sl->shapes.probe[0], R->probe, sizeof(R->probe));
    fs_shapes_hide_probes(&sl->shapes);      /* in memory only: the '$' topics' sets */
    sl->count = hd->subs;
    sl->nodes = R->nodes;
    return NULL;
}

/* The mapped sl's full check (verify FS_VERIFY_FULL), then its tables
 * copied out of the mapping.  FS_OK, or the error (err set); the caller
 * frees sl then. */
static int check_and_copy(fs_sublist *sl, int verify, unsigned threads, int sum_pending, fs_error *err)
{
    if (verify == FS_VERIFY_FULL) {
        int rc = fs_image_verify(sl, threads, sum_pending, err);
        if (rc < 0)
            return rc;
    }
    /* Every walk reads the literal table's and the shapes' fields (their
     * caps, masks, offsets, token counts) again and again: they are
     * copied out of the mapping here, once, and the copies checked, so a
     * file rewritten in place under the mapping cannot change them between
     * a check and a use (fs_once8 in fs_layout.h says why).  The copies
     * live in the index's slab, freed with it. */
    const char *why;
    int rc = copy_tables(sl, &why);
    if (rc == FS_EBADDATA) {
        err->reason = why;
        err->pos = FS_SERIAL_HEADER;
    }
    return rc;
}

int fs_image_open(const char *data, size_t len, int verify, unsigned threads, fs_sublist **out, fs_error *err)
{
    *out = NULL;
    err->in_queue = 0;
    fs_dialect d = FS_NATS;       /* check_header's when it succeeds (gcc -O1 cannot tell) */
    fs_file_header hd;
    img_root R;
    int sum_pending = 0;
    int rc = check_header(data, len, verify, threads, &hd, &d, &R, &sum_pending, err);
    if (rc < 0)
        return rc;
    fs_sublist *sl = fs_sublist_new(d);
    if (!sl)
        return FS_ENOMEM;
    fs_node_free(sl, sl->root);           /* the image has its own */
    sl->root = NULL;
    const char *why = map_sections(sl, data, len, &hd, &R);
    if (why) {
        fs_sublist_free(sl);
        FAIL(why, FS_SERIAL_HEADER);
    }
    /* The root's '$' levels (MQTT), apart in memory, as inserts keep them */
    if ((rc = check_and_copy(sl, verify, threads, sum_pending, err)) < 0 || (rc = fs_trie_hide_roots(sl)) < 0) {
        fs_sublist_free(sl);
        return rc;
    }
    *out = sl;
    return FS_OK;
}
#undef FAIL
