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
#include "fs_shape.h"

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
/* Call fn(ctx, node, its shape) for every trie node holding subscriptions
 * whose filter has a shape (what fs_shape_classify finds from the
 * filter's tokens: a wildcard, at most FS_SHAPE_MAX_TOKENS tokens before
 * a trailing rest wildcard, no AMQP '#' before its end; the shape's key
 * is left 0) -- a filter that a shape table could hold but the trie
 * does.  The shape follows from the kinds of the nodes on its path: no
 * filter is built or tokenized.  A built index's or a mapped image's trie
 * (masked nodes included).  FS_OK, FS_ENOMEM, FS_EBADDATA (a mapped
 * image's loop: marked damaged), or the first status of fn that is not
 * FS_OK (the walk stops there). */
int fs_trie_each_shaped(const fs_sublist *sl, int (*fn)(void *, const fs_node *, const fs_shape_of *),
                        void *ctx);
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
