/* fs_image_root.h - the image's root block (docs/FORMAT.md, version 3):
 * the index's own fields, after the 48-byte header, as the writer
 * (fs_image_write.c) lays them out and the reader (fs_image.c) checks
 * them.  Internal to the serial layer: one layout for both. */
#ifndef FS_IMAGE_ROOT_H
#define FS_IMAGE_ROOT_H

#include <stdint.h>

#include "fs_header.h"
#include "fs_index.h"

/* The root block, after the 48-byte header: the index's own fields. */
typedef struct {
    uint64_t nodes;           /* trie nodes and table entries (fs_sublist.nodes) */
    uint64_t root;            /* the trie's root node */
    uint64_t literals;        /* the literal table's level */
    uint64_t objects_end;     /* objects lie in [FS_IMG_OBJECTS, objects_end) = 48 + P */
    uint64_t nshapes;
    uint64_t shape[FS_SHAPE_MAX];                  /* fs_shape structs, canonical order */
    uint64_t probe[FS_SHAPE_MAX_TOKENS + 2];       /* as fs_shapes.probe[0] */
} img_root;

_Static_assert(FS_SERIAL_HEADER + sizeof(img_root) <= FS_IMG_OBJECTS, "root block fits before the objects");
_Static_assert(sizeof(void *) == 8, "the image's structs are a 64-bit host's");
_Static_assert(sizeof(fs_node) == 32 && sizeof(fs_link) == 16 && sizeof(fs_slot) == 16, "image layout");

#endif
