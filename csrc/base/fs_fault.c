/* fs_fault.c - the SIGBUS guard of mapped images (fs_fault.h says why):
 * a fixed table of guarded ranges, claimed and released without a lock, and
 * the process-wide handler that reads it.  Everything the handler calls is
 * async-signal-safe: atomic loads and stores, mmap, sigaction, raise. */
#if !defined(_WIN32) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE          /* MAP_ANONYMOUS, SA_SIGINFO under -std=c11 */
#endif
#include "fs_fault.h"

#include "fs_status.h"

#include <stdatomic.h>

#ifndef _WIN32
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#if defined(SA_SIGINFO) && (defined(MAP_ANONYMOUS) || defined(MAP_ANON))
#define FS_FAULT_HANDLER 1
#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS MAP_ANON
#endif
#endif
#endif

/* A slot's state word: SLOT_* in the low 2 bits, above them a count of
 * claims, so that the handler can tell that the range it read belongs to
 * the claim it saw LIVE (a seqlock: a claim changes the word before it
 * writes the range). */
enum { SLOT_FREE = 0, SLOT_CLAIMED = 1, SLOT_LIVE = 2, SLOT_MASK = 3 };

typedef struct {
    atomic_uint state;          /* SLOT_* | claims << 2; LIVE published with release */
    atomic_int revoked;         /* set by the handler */
    atomic_uintptr_t base;      /* written while CLAIMED, read once LIVE */
    atomic_size_t len;
} fs_guard;

static fs_guard guards[FS_FAULT_SLOTS];
static atomic_ullong revocations;

int fs_fault_revoked(int slot)
{
    if (slot < 0 || slot >= FS_FAULT_SLOTS)
        return 0;
    return atomic_load_explicit(&guards[slot].revoked, memory_order_acquire);
}

uint64_t fs_fault_revocations(void)
{
    return (uint64_t)atomic_load_explicit(&revocations, memory_order_relaxed);
}

void fs_fault_unguard(int slot)
{
    if (slot < 0 || slot >= FS_FAULT_SLOTS)
        return;
    fs_guard *g = &guards[slot];
    unsigned st = atomic_load_explicit(&g->state, memory_order_relaxed);
    atomic_store_explicit(&g->state, (st & ~(unsigned)SLOT_MASK) | SLOT_FREE, memory_order_release);
}

#ifndef FS_FAULT_HANDLER

int fs_fault_guard(const void *base, size_t len)
{
    (void)base;
    (void)len;
    return FS_ENOSYS;
}

#else

static atomic_uint used;                  /* guards[0, used) were ever claimed */
/* The handler that was there before ours: written once, before ours is
 * installed, and only read after. */
static struct sigaction prev_action;
/* 0: not tried; 1: installed; -1: sigaction refused. */
static atomic_int install_state;
static atomic_flag installing = ATOMIC_FLAG_INIT;

/* Put zeros over the guarded mapping holding address a, if any: 1 when
 * done (the faulting read may run again), 0 when a is no guarded address. */
static int zero_over(uintptr_t a)
{
    unsigned n = atomic_load_explicit(&used, memory_order_acquire);
    for (unsigned i = 0; i < n && i < FS_FAULT_SLOTS; i++) {
        fs_guard *g = &guards[i];
        unsigned st = atomic_load_explicit(&g->state, memory_order_acquire);
        if ((st & SLOT_MASK) != SLOT_LIVE)
            continue;
        /* Acquire loads, not relaxed ones and a fence (which TSan cannot
         * build): the state's second load below stays after them. */
        uintptr_t b = atomic_load_explicit(&g->base, memory_order_acquire);
        size_t len = atomic_load_explicit(&g->len, memory_order_acquire);
        if (atomic_load_explicit(&g->state, memory_order_relaxed) != st)
            continue;       /* released and claimed again meanwhile: not the range it was */
        if (a < b || a - b >= len)
            continue;
        /* Revoked before the zeros are there: a thread that reads them
         * (without a fault of its own) finds the guard revoked. */
        atomic_store_explicit(&g->revoked, 1, memory_order_seq_cst);
        /* The same addresses, whole pages (mmap rounds len up, inside the
         * original mapping), now private zeros.  Two threads faulting at
         * once both do this: the second replaces zeros with zeros.  Should
         * mmap fail, the fault goes on to the old handler: the process
         * dies as it would have without the guard. */
        if (mmap((void *)b, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            return 0;
        atomic_fetch_add_explicit(&revocations, 1, memory_order_relaxed);
        return 1;
    }
    return 0;
}

/* Not ours: what would have happened without the guard. */
static void chain(int sig, siginfo_t *si, void *uc)
{
    int sent = si == NULL || si->si_code <= 0;      /* kill(), raise(): no fault address */
    if (prev_action.sa_flags & SA_SIGINFO) {
        if (prev_action.sa_sigaction != NULL) {
            prev_action.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (prev_action.sa_handler == SIG_IGN) {
        if (sent)
            return;
        /* a real fault is not ignored: the kernel kills the process */
    } else if (prev_action.sa_handler != SIG_DFL) {
        prev_action.sa_handler(sig);
        return;
    }
    /* The default action: die of the signal.  A fault runs its
     * instruction again on return and dies of it then; a sent signal is
     * raised again (blocked in this handler: pending until it returns). */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (sent)
        raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    if (si != NULL && si->si_code > 0 && zero_over((uintptr_t)si->si_addr)) {
        errno = saved;
        return;
    }
    errno = saved;
    chain(sig, si, uc);
}

static void install(void)
{
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_sigbus;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&act.sa_mask);
    /* Read the old handler first, so that ours never runs with prev_action
     * unset. */
    if (sigaction(SIGBUS, NULL, &prev_action) != 0 || sigaction(SIGBUS, &act, NULL) != 0) {
        atomic_store_explicit(&install_state, -1, memory_order_release);
        return;
    }
    atomic_store_explicit(&install_state, 1, memory_order_release);
}

/* Install the handler once (whichever thread comes first; the others
 * wait): 1 when it is installed. */
static int installed(void)
{
    int st = atomic_load_explicit(&install_state, memory_order_acquire);
    while (st == 0) {
        if (!atomic_flag_test_and_set_explicit(&installing, memory_order_acq_rel)) {
            if (atomic_load_explicit(&install_state, memory_order_acquire) == 0)
                install();
            atomic_flag_clear_explicit(&installing, memory_order_release);
        }
        st = atomic_load_explicit(&install_state, memory_order_acquire);
    }
    return st == 1;
}

int fs_fault_guard(const void *base, size_t len)
{
    if (base == NULL || len == 0 || !installed())
        return FS_ENOMEM;
    for (unsigned i = 0; i < FS_FAULT_SLOTS; i++) {
        fs_guard *g = &guards[i];
        unsigned st = atomic_load_explicit(&g->state, memory_order_relaxed);
        unsigned claim = (st & ~(unsigned)SLOT_MASK) + (SLOT_MASK + 1);      /* one more claim */
        if ((st & SLOT_MASK) != SLOT_FREE ||
            !atomic_compare_exchange_strong_explicit(&g->state, &st, claim | SLOT_CLAIMED,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        /* Release stores: the new state word before the new range (a
         * fence would do it too, but TSan cannot build one). */
        atomic_store_explicit(&g->base, (uintptr_t)base, memory_order_release);
        atomic_store_explicit(&g->len, len, memory_order_release);
        atomic_store_explicit(&g->revoked, 0, memory_order_relaxed);
        unsigned u = atomic_load_explicit(&used, memory_order_relaxed);
        while (u < i + 1 && !atomic_compare_exchange_weak_explicit(&used, &u, i + 1, memory_order_release,
                                                                   memory_order_relaxed))
            ;
        atomic_store_explicit(&g->state, claim | SLOT_LIVE, memory_order_release);
        return (int)i;
    }
    return FS_ENOMEM;
}

#endif
