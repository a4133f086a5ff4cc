/* fs_trie.h - the trie (fs_trie.c): the filters no table holds.  Above
 * the tables (fs_table.h) and the nodes (fs_node.h), which it calls.  The
 * subject walk, fs_trie_walk_locked, is declared with the walks in
 * fs_layout.h.
 */
#ifndef FS_TRIE_H
#define FS_TRIE_H

#include "fs_status.h"
#include "fs_table.h"
#include "fs_token.h"
#include "fs_scratch.h"

/* Create the trie path of filter (tokens t).  FS_OK (*out its last node)
 * or FS_ENOMEM (*out the deepest node reached, for fs_trie_prune); g
 * records the first pre-existing level that gained a child. */
int fs_trie_path(fs_sublist *sl, const fs_tokens *t, const char *filter, fs_growth *g, fs_node **out);
/* The trie node of filter (tokens t), or NULL (a built index's or a
 * mapped image's: only a built one's may be changed). */
const fs_node *fs_trie_find(const fs_sublist *sl, const fs_tokens *t, const char *filter);
/* Remove empty trie nodes from n upwards (never the root), then the level
 * of the node it stops at if that level is left empty.  Never allocates. */
void fs_trie_prune(fs_sublist *sl, fs_node *n);
/* Push onto sc->hits the trie nodes whose filters intersect the query
 * filter q (tokenized in sc->toks); clears sc->hits first.  FS_OK or
 * FS_ENOMEM. */
int fs_trie_rwalk_locked(const fs_sublist *sl, const char *q, fs_scratch *sc);
/* Push x's children (a built index's or a mapped image's) onto the stack
 * v: its literal children, then its one and rest children.  FS_OK or
 * FS_ENOMEM. */
int fs_trie_push_children(const fs_sublist *sl, const fs_node *x, const fs_node ***v, size_t *n, size_t *cap);
/* sl->hidden_roots (fs_layout.h): c, a child of the root just read from a
 * stored trie, joins them if no first-level wildcard matches its level
 * (fs_first_level_hidden, the tokenizer's decision); fs_trie_hide_roots
 * does it for each of the root's literal children (a mapped image's, at
 * open).  fs_trie_path and fs_trie_prune keep them for inserts and
 * removals.  FS_OK or FS_ENOMEM. */
int fs_trie_hide_root(fs_sublist *sl, const fs_node *c);
int fs_trie_hide_roots(fs_sublist *sl);
/* Free sl->hidden_roots (a built index's or a mapped image's). */
void fs_trie_hidden_free(fs_sublist *sl);
/* The trie's part of the walk (fs_walk.h; appends to sc->hits). */
int fs_trie_walk_locked(const fs_sublist *sl, const char *s, const fs_tokens *t, fs_scratch *sc);
/* Free the trie, root included (never allocates). */
void fs_trie_free(fs_sublist *sl);

#endif
