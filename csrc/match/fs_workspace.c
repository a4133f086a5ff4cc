/* fs_workspace.c - per-call working memory: the scratch buffers a match
 * walks with, and each thread's reusable workspace (a scratch and a
 * result), lent to one call at a time (see sublist.h). */
#include "fs_match.h"

#include <stdatomic.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_pairs.h"
#include "fs_sys.h"

void fs_scratch_init(fs_scratch *sc)
{
    memset(sc, 0, sizeof(*sc));
    fs_tokens_init(&sc->toks);
}

void fs_scratch_free(fs_scratch *sc)
{
    fs_tokens_free(&sc->toks);
    FS_FREE(sc->front);
    FS_FREE(sc->next);
    FS_FREE(sc->hits);
    FS_FREE(sc->seen);
    FS_FREE(sc->grefs);
    fs_scratch_init(sc);
}

static fs_tls_key workspace_key;

/* The key's value, also kept in a thread-local where that is a safe copy
 * (FS_TLS_COPY_OK, fs_sys.h: not where the key is fiber-local), so that a
 * match() reads it with one load instead of asking the key (~17
 * instructions a call).  The key stays the owner: its destructor frees
 * the workspace when the thread ends, clearing the thread-local first. */
#if FS_TLS_COPY_OK
#define WORKSPACE_THREAD_LOCAL 1
/* (not static: fs_workspace_acquire, fs_match.h, reads it inline) */
FS_THREAD_LOCAL fs_workspace *fs_workspace_mine;
#endif

static fs_once_flag workspace_once = FS_ONCE_INIT;

static int workspace_key_ok;

/* 1 once the key exists: then a call skips fs_once, which is a call into
 * the threads library every time (it sat on every match()'s path). */
static atomic_int workspace_ready;

static void FS_TLS_DESTRUCTOR workspace_destroy(void *p)
{
    fs_workspace *w = p;
#ifdef WORKSPACE_THREAD_LOCAL
    fs_workspace_mine = NULL;     /* (this thread's: a destructor runs on the thread that ends) */
#endif
    fs_scratch_free(&w->sc);
    fs_result_free(&w->r);
    FS_FREE(w);
    fs_pairs_free_mine();    /* made with it (fs_workspace_get) */
}

static void workspace_key_create(void)
{
    workspace_key_ok = fs_tls_create(&workspace_key, workspace_destroy) == 0;
    atomic_store_explicit(&workspace_ready, workspace_key_ok, memory_order_release);
}

fs_workspace *fs_workspace_get(void)
{
#ifdef WORKSPACE_THREAD_LOCAL
    fs_workspace *mine = fs_workspace_mine;
    if (FS_LIKELY(mine != NULL))
        return mine;
#endif
    if (FS_UNLIKELY(!atomic_load_explicit(&workspace_ready, memory_order_acquire))) {
        fs_once(&workspace_once, workspace_key_create);
        if (!workspace_key_ok)
            return NULL;
    }
    fs_workspace *w = fs_tls_get(workspace_key);
    if (!w) {
        w = FS_MALLOC(sizeof(fs_workspace));
        if (!w)
            return NULL;
        fs_scratch_init(&w->sc);
        fs_result_init(&w->r);
        w->busy = 0;
        /* the thread's pair cache (fs_pairs.h) with it: freed with it */
        if (fs_pairs_make_mine() < 0 || fs_tls_set(workspace_key, w) != 0) {
            fs_pairs_free_mine();
            FS_FREE(w);
            return NULL;
        }
    }
#ifdef WORKSPACE_THREAD_LOCAL
    fs_workspace_mine = w;
#endif
    return w;
}

/* fs_workspace_acquire (fs_match.h) past its inline common case: the key
 * asked, the workspace made, or spare lent. */
fs_workspace *fs_workspace_acquire_slow(fs_workspace *spare)
{
    fs_workspace *w = fs_workspace_get();
    if (w && !w->busy) {
        w->busy = 1;
        return w;
    }
    if (!w)
        return NULL;
    fs_scratch_init(&spare->sc);
    fs_result_init(&spare->r);
    spare->busy = 1;
    return spare;
}

/* fs_workspace_trim's two tests (fs_result.h, fs_scratch.h). */
static inline int result_oversized(const fs_workspace *w) { return fs_result_oversized(&w->r); }
static inline int scratch_oversized(const fs_workspace *w) { return fs_scratch_oversized(&w->sc); }

void fs_workspace_release(fs_workspace *w, fs_workspace *spare)
{
    if (w == spare) {
        fs_scratch_free(&w->sc);
        fs_result_free(&w->r);
        return;
    }
    w->busy = 0;
    if (FS_UNLIKELY(result_oversized(w)))
        fs_result_free(&w->r);
    if (FS_UNLIKELY(scratch_oversized(w)))
        fs_scratch_free(&w->sc);
}

void fs_workspace_trim(fs_workspace *w)
{
    if (result_oversized(w))
        fs_result_free(&w->r);
    if (scratch_oversized(w))
        fs_scratch_free(&w->sc);
}
