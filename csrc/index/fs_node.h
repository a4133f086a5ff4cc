/* fs_node.h - a node and what it holds (fs_node.c): a trie node (one
 * token, with links) or a table entry (a whole filter, without); its plain
 * subscription ids and queue groups.  The layout is in fs_layout.h.
 * Calls only fs_mem.h and fs_slab.h: freeing a node never touches the
 * table that held it (its owner removes it first: fs_trie_prune, the
 * literal table in sublist.c, fs_shape_del).
 */
#ifndef FS_NODE_H
#define FS_NODE_H

#include <stdint.h>

#include "fs_status.h"
#include "fs_token.h"

typedef struct fs_node fs_node;
typedef struct fs_sublist fs_sublist;
typedef struct fs_level fs_level;

/* A trie node (with links; parent NULL for the root) / a table entry for a
 * whole filter (without), from the index's slab.  NULL when out of memory. */
fs_node *fs_node_new(fs_sublist *sl, fs_node *parent, const char *tok, const fs_span *sp);
fs_node *fs_entry_new(fs_sublist *sl, const char *tok, const fs_span *sp);
/* Free a node's own contents, its (empty) next level and the node; its
 * children must be gone.  Never allocates. */
void fs_node_free(fs_sublist *sl, fs_node *n);
/* Give back n's own block only (freeing a whole index: nothing counted). */
void fs_node_block_free(fs_sublist *sl, fs_node *n);
/* Freeing a whole index: fs_node_free for every entry of table L (a
 * table of entries, not a trie level), leaving L empty.  In slot order,
 * the nodes ahead fetched, since they lie anywhere in memory: freeing a
 * large index entry by entry waited on a cache miss for each. */
void fs_table_teardown(fs_sublist *sl, fs_level *L);
/* Add id to the node's plain set / to its group q (created if needed):
 * 1 new, 0 present, FS_ENOMEM (node unchanged). */
int fs_node_add_sub(fs_sublist *sl, fs_node *n, int64_t id);
int fs_node_add_queued(fs_sublist *sl, fs_node *n, const char *q, uint32_t qlen, int64_t id);
/* Remove id from the node's plain set / group q: 1 removed, 0 absent.
 * Never allocates. */
int fs_node_del_sub(fs_sublist *sl, fs_node *n, int64_t id);
int fs_node_del_queued(fs_sublist *sl, fs_node *n, const char *q, uint32_t qlen, int64_t id);

#endif
