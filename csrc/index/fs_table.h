/* fs_table.h - the open-addressing hash table of the index (fs_table.c):
 * a trie level's literal children, the literal table, each shape's table.
 * The layout (fs_level, fs_slot) is in fs_layout.h; lookups are inline
 * there (fs_level_find, fs_keyed_find).  Calls only fs_mem.h: nothing
 * here knows nodes beyond their hash and length, nor the index: the
 * functions that allocate take the memory account they count into (an
 * index's is &sl->mem).
 */
#ifndef FS_TABLE_H
#define FS_TABLE_H

#include <stdint.h>

#include "fs_status.h"

typedef struct fs_level fs_level;
typedef struct fs_node fs_node;

/* The one pre-existing table an insert added an entry or a child to
 * (every level below it is new), and its capacity before, so that undoing
 * the insert can shrink it back and leave not even memory_bytes changed. */
typedef struct {
    fs_level *level;
    uint32_t cap;
} fs_growth;

typedef struct fs_slot fs_slot;

/* Put slot e in the first free slot of its probe sequence in slots[0..cap). */
void fs_slot_place(fs_slot *slots, uint32_t cap, fs_slot e);
/* Set the bitmap bits of a key whose high half is hi (a keyed table's
 * slot.len) in the bitmap bits (mask: its bits - 1). */
void fs_filter_mark(uint64_t *bits, uint64_t mask, uint32_t hi);
/* The capacity a table of count entries has when grown one insert at a
 * time from empty, as an insert grows it (half_full: a shape table). */
uint32_t fs_table_cap(uint32_t count, int half_full);

/* Add the literal child n (slot.len = its token length).  FS_OK or
 * FS_ENOMEM (table unchanged). */
int fs_level_add(uint64_t *mem, fs_level *L, fs_node *n);
/* Make L a filtered table (a keyed table: a bitmap of its keys). */
void fs_level_filter_init(fs_level *L);
/* Rehash L into ncap slots (which must hold its entries).  FS_OK or
 * FS_ENOMEM (L unchanged). */
int fs_level_resize(uint64_t *mem, fs_level *L, uint32_t ncap);
/* Back to capacity cap if the entries fit (undoing a growth; best effort). */
void fs_level_restore(uint64_t *mem, fs_level *L, uint32_t cap);
/* Add n to a keyed table with slot.len = check (the key's high bits).
 * Shape tables are kept at most half full, the literal table 3/4.  FS_OK
 * or FS_ENOMEM (table unchanged). */
int fs_level_add_checked(uint64_t *mem, fs_level *L, fs_node *n, uint32_t check, int half_full);
/* fs_level_add_checked into slot `at`: the slot fs_keyed_seek gave for
 * n's key, L unchanged since (a table that grows first, or an `at` of
 * L->cap or more, probes for its slot).  FS_OK or FS_ENOMEM. */
int fs_level_add_at(uint64_t *mem, fs_level *L, fs_node *n, uint32_t check, int half_full, uint32_t at);
/* Shrink L when it has fallen well below its capacity (best effort: a
 * failed allocation keeps the bigger table). */
void fs_level_shrink(uint64_t *mem, fs_level *L);
/* Remove n (which must be in L).  Never allocates. */
void fs_level_del(fs_level *L, const fs_node *n);

#endif
