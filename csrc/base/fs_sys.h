/* fs_sys.h - the C core's one door to the operating system's threads:
 * a reader/writer lock, a mutex with a condition variable, threads,
 * one-time initialisation, thread-specific data with a destructor,
 * fork handlers, discardable pages and yielding the processor.  POSIX threads everywhere but Windows, Win32
 * there (chosen by _WIN32, so mingw-w64 and MSVC both take the Win32 side
 * and need no pthreads library).  No other csrc/ file names a pthread or
 * Win32 function: porting the core means this header and fs_sys.c.
 *
 * The lock operations sit on every match's path, so they are static
 * inline here and compile to the same calls as before; what runs once per
 * thread or per batch (threads, once, the deadline arithmetic) is in
 * fs_sys.c.
 *
 * Differences the callers must respect, because Win32's locks impose them:
 *   - a read lock is released with fs_rwlock_rdunlock and a write lock
 *     with fs_rwlock_wrunlock (an SRWLOCK has no single unlock);
 *   - no lock is recursive, not even for reading: an SRWLOCK lets a waiting
 *     writer block a second read acquisition by a thread already reading;
 *   - a lock, condition variable or thread object must not move in memory
 *     once initialised (an SRWLOCK is its own address's state, and a thread
 *     reads its start routine from its fs_thread). */
#ifndef FS_SYS_H
#define FS_SYS_H

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#endif
#include <errno.h>

/* ---------------------------------------------------------- rwlock */

#ifndef _WIN32
/* Initialise a pthreads rwlock that prefers writers where the system lets
 * us say so (glibc; its default prefers readers): a writer -- an insert,
 * or fork()'s prepare handler, which takes every index's write lock --
 * then waits for the readers inside, not for a stream of overlapping new
 * ones from a threaded batch.  Safe because no lock is taken recursively.
 * 0, or -1 when the system is out of resources. */
int fs_pthread_rwlock_init(pthread_rwlock_t *l);
#endif

#ifdef _WIN32
typedef SRWLOCK fs_rwlock;
/* 0, or -1 when the system is out of resources (never on Win32). */
static inline int fs_rwlock_init(fs_rwlock *l) { InitializeSRWLock(l); return 0; }
static inline void fs_rwlock_destroy(fs_rwlock *l) { (void)l; }  /* an SRWLOCK holds nothing */
static inline void fs_rwlock_rdlock(fs_rwlock *l) { AcquireSRWLockShared(l); }
static inline void fs_rwlock_rdunlock(fs_rwlock *l) { ReleaseSRWLockShared(l); }
static inline void fs_rwlock_wrlock(fs_rwlock *l) { AcquireSRWLockExclusive(l); }
static inline void fs_rwlock_wrunlock(fs_rwlock *l) { ReleaseSRWLockExclusive(l); }
#elif defined(NDEBUG)
typedef pthread_rwlock_t fs_rwlock;
static inline int fs_rwlock_init(fs_rwlock *l) { return fs_pthread_rwlock_init(l); }
static inline void fs_rwlock_destroy(fs_rwlock *l) { pthread_rwlock_destroy(l); }
static inline void fs_rwlock_rdlock(fs_rwlock *l) { pthread_rwlock_rdlock(l); }
static inline void fs_rwlock_rdunlock(fs_rwlock *l) { pthread_rwlock_unlock(l); }
static inline void fs_rwlock_wrlock(fs_rwlock *l) { pthread_rwlock_wrlock(l); }
static inline void fs_rwlock_wrunlock(fs_rwlock *l) { pthread_rwlock_unlock(l); }
#else
/* Debug builds (the sanitizer and TSan runs among them) remember whether a
 * writer holds the lock and assert that each unlock matches its lock:
 * pthreads has one unlock for both, so a wrong one would pass every test
 * here and corrupt an SRWLOCK on Windows. */
typedef struct {
    pthread_rwlock_t l;
    atomic_int writer;     /* 1 while write-locked; read under the lock */
} fs_rwlock;
static inline int fs_rwlock_init(fs_rwlock *l)
{
    atomic_init(&l->writer, 0);
    return fs_pthread_rwlock_init(&l->l);
}
static inline void fs_rwlock_destroy(fs_rwlock *l) { pthread_rwlock_destroy(&l->l); }
static inline void fs_rwlock_rdlock(fs_rwlock *l) { pthread_rwlock_rdlock(&l->l); }
static inline void fs_rwlock_rdunlock(fs_rwlock *l)
{
    assert(atomic_load_explicit(&l->writer, memory_order_relaxed) == 0 && "read unlock of a write lock");
    pthread_rwlock_unlock(&l->l);
}
static inline void fs_rwlock_wrlock(fs_rwlock *l)
{
    pthread_rwlock_wrlock(&l->l);
    atomic_store_explicit(&l->writer, 1, memory_order_relaxed);
}
static inline void fs_rwlock_wrunlock(fs_rwlock *l)
{
    assert(atomic_load_explicit(&l->writer, memory_order_relaxed) == 1 && "write unlock of a read lock");
    atomic_store_explicit(&l->writer, 0, memory_order_relaxed);
    pthread_rwlock_unlock(&l->l);
}
#endif

/* ---------------------------------------------------- mutex, cond */

/* Win32: an exclusive SRWLOCK is the lightest mutex, and condition
 * variables sleep on it (SleepConditionVariableSRW); a CRITICAL_SECTION
 * would need a destructor and is heavier. */
#ifdef _WIN32
typedef SRWLOCK fs_mutex;
typedef CONDITION_VARIABLE fs_cond;
static inline void fs_mutex_init(fs_mutex *m) { InitializeSRWLock(m); }
static inline void fs_mutex_destroy(fs_mutex *m) { (void)m; }
static inline void fs_mutex_lock(fs_mutex *m) { AcquireSRWLockExclusive(m); }
static inline void fs_mutex_unlock(fs_mutex *m) { ReleaseSRWLockExclusive(m); }
static inline void fs_cond_init(fs_cond *c) { InitializeConditionVariable(c); }
static inline void fs_cond_destroy(fs_cond *c) { (void)c; }
static inline void fs_cond_broadcast(fs_cond *c) { WakeAllConditionVariable(c); }
static inline void fs_cond_signal(fs_cond *c) { WakeConditionVariable(c); }
static inline void fs_cond_wait(fs_cond *c, fs_mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
#else
typedef pthread_mutex_t fs_mutex;
typedef pthread_cond_t fs_cond;
/* The default attributes cannot fail to initialise on the systems we
 * build for (no allocation: glibc, musl and macOS keep them inline). */
static inline void fs_mutex_init(fs_mutex *m) { pthread_mutex_init(m, NULL); }
static inline void fs_mutex_destroy(fs_mutex *m) { pthread_mutex_destroy(m); }
static inline void fs_mutex_lock(fs_mutex *m) { pthread_mutex_lock(m); }
static inline void fs_mutex_unlock(fs_mutex *m) { pthread_mutex_unlock(m); }
static inline void fs_cond_init(fs_cond *c) { pthread_cond_init(c, NULL); }
static inline void fs_cond_destroy(fs_cond *c) { pthread_cond_destroy(c); }
static inline void fs_cond_broadcast(fs_cond *c) { pthread_cond_broadcast(c); }
static inline void fs_cond_signal(fs_cond *c) { pthread_cond_signal(c); }
static inline void fs_cond_wait(fs_cond *c, fs_mutex *m) { pthread_cond_wait(c, m); }
#endif

/* A point in time for waits with a timeout: an absolute deadline, so that
 * a wait loop woken early (or spuriously) does not restart its timeout. */
#ifdef _WIN32
typedef ULONGLONG fs_deadline;             /* GetTickCount64() milliseconds */
#else
typedef struct timespec fs_deadline;       /* CLOCK_REALTIME, as pthread_cond_timedwait wants */
#endif
fs_deadline fs_deadline_in(unsigned ms);
/* Sleep on c (m held) until woken or the deadline: 1 when woken (perhaps
 * spuriously: re-check the condition), 0 when the deadline has passed. */
int fs_cond_wait_until(fs_cond *c, fs_mutex *m, const fs_deadline *until);

/* ---------------------------------------------------------- threads */

typedef struct {
#ifdef _WIN32
    HANDLE handle;
#else
    pthread_t handle;
#endif
    void (*fn)(void *);
    void *arg;
} fs_thread;

/* Run fn(arg) on a new thread.  0, or -1 when no thread could be created.
 * *t must stay where it is until fs_thread_join. */
int fs_thread_start(fs_thread *t, void (*fn)(void *), void *arg);
/* Wait for the thread to return and release it. */
void fs_thread_join(fs_thread *t);

/* ------------------------------------------------------------- once */

#ifdef _WIN32
typedef INIT_ONCE fs_once_flag;
#define FS_ONCE_INIT INIT_ONCE_STATIC_INIT
#else
typedef pthread_once_t fs_once_flag;
#define FS_ONCE_INIT PTHREAD_ONCE_INIT
#endif
/* Call fn exactly once per flag, whichever thread comes first; the others
 * wait for it to return. */
void fs_once(fs_once_flag *flag, void (*fn)(void));

/* ----------------------------------------- thread-specific data */

/* A per-thread slot whose destructor runs on a thread's non-NULL value
 * when that thread ends.  Win32: a fiber-local slot (FlsAlloc), the only
 * Win32 slot with a destructor -- _Thread_local / __declspec(thread) have
 * none.  The destructor must be declared FS_TLS_DESTRUCTOR: Win32 calls it
 * with its own calling convention (they differ on 32-bit x86). */
#ifdef _WIN32
typedef DWORD fs_tls_key;
#define FS_TLS_DESTRUCTOR WINAPI
static inline void *fs_tls_get(fs_tls_key k) { return FlsGetValue(k); }
static inline int fs_tls_set(fs_tls_key k, void *v) { return FlsSetValue(k, v) ? 0 : -1; }
#else
typedef pthread_key_t fs_tls_key;
#define FS_TLS_DESTRUCTOR
static inline void *fs_tls_get(fs_tls_key k) { return pthread_getspecific(k); }
static inline int fs_tls_set(fs_tls_key k, void *v) { return pthread_setspecific(k, v) == 0 ? 0 : -1; }
#endif
/* 1 where a thread-local (FS_THREAD_LOCAL) may keep a copy of a slot's
 * value: the slot is the thread's, and the copy costs one load.  Not on
 * Win32, where the slot is fiber-local: a thread-local copy would hand one
 * fiber's value to the other fibers of its thread. */
#if defined(__GNUC__) && !defined(_WIN32)
#define FS_TLS_COPY_OK 1
#else
#define FS_TLS_COPY_OK 0
#endif
/* 0, or -1 when the system has no slot left.  Never deleted: the slot
 * lives as long as the process (the extension module is never unloaded). */
int fs_tls_create(fs_tls_key *k, void (FS_TLS_DESTRUCTOR *destructor)(void *));

/* ------------------------------------------------------------- fork */

/* Run prepare before a fork() and parent / child after it, in the process
 * named (pthread_atfork): a process-wide lock must not be copied into a
 * child while another thread holds it, or the child waits for it forever.
 * 0, or -1 when the handlers cannot be registered.  Windows has no fork:
 * nothing to do. */
int fs_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));

/* ------------------------------------------------------------ pages */

/* Tell the system that the bytes of [p, p + size) need not be kept: the
 * whole pages inside the range stay mapped and are taken back only when
 * memory runs short, so writing them again soon costs no page fault (the
 * point: fs_idbuf.c keeps released output buffers this way).  Their
 * contents become undefined.  0, or -1 where the system cannot (Windows
 * here: the caller then frees the memory instead). */
int fs_pages_discard(void *p, size_t size);
/* Ask for huge pages under the 2 MiB-aligned stretches of [p, p + size)
 * (Linux's transparent huge pages, where they are "madvise"): a buffer of
 * hundreds of megabytes written once then faults a few hundred times, not
 * a hundred thousand.  Best effort; nothing elsewhere. */
void fs_pages_huge(void *p, size_t size);

/* ------------------------------------------------------------ yield */

/* Let another ready thread run (a spin lock's back-off).  On Linux a
 * yield that switches counts as an involuntary context switch (the thread
 * stays runnable), never a voluntary one: it is not a sleep. */
#ifdef _WIN32
static inline void fs_yield(void) { SwitchToThread(); }
#else
static inline void fs_yield(void) { sched_yield(); }
#endif

/* One turn of a spin-wait: tell the processor (x86 PAUSE, Arm YIELD), so a
 * sibling hyper-thread gets the core and the loop does not flood the
 * memory system; a plain compiler barrier elsewhere. */
#if defined(_WIN32)
static inline void fs_cpu_relax(void) { YieldProcessor(); }
#elif defined(__x86_64__) || defined(__i386__)
static inline void fs_cpu_relax(void) { __builtin_ia32_pause(); }
#elif defined(__aarch64__) || defined(__arm__)
static inline void fs_cpu_relax(void) { __asm__ __volatile__("yield" ::: "memory"); }
#else
static inline void fs_cpu_relax(void) { atomic_signal_fence(memory_order_seq_cst); }
#endif

/* ------------------------------------------------- a thread's stripe */

/* Counters that every match() updates -- the index lock's reader count,
 * the match and cache tallies -- are kept in FS_STRIPES stripes, one cache
 * line each, and a thread writes only its own stripe's line: a read that
 * wrote a line other threads write too would make threads take turns with
 * that line and stop scaling.  A thread's stripe is the order in which it
 * first asked, modulo FS_STRIPES (more threads than that share stripes:
 * every stripe field is atomic, so sharing costs only speed).  The readers
 * of a sum (stats(), a writer waiting for readers to leave) look at the
 * first fs_stripes_used() stripes only, so a program with one thread scans
 * one line. */
#define FS_STRIPES 32u
#if defined(_MSC_VER) && !defined(__clang__)
#define FS_THREAD_LOCAL __declspec(thread)
#elif defined(__GNUC__) && !defined(_WIN32)
/* initial-exec: one load from the thread pointer (the default model in a
 * shared object calls __tls_get_addr on every access) */
#define FS_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))
#else
#define FS_THREAD_LOCAL _Thread_local
#endif
/* This thread's stripe plus one; 0 until fs_thread_stripe_assign. */
extern FS_THREAD_LOCAL unsigned fs_stripe_plus1;
/* Give the calling thread its stripe (and count it in fs_stripes_used). */
unsigned fs_thread_stripe_assign(void);
/* The calling thread's stripe, in [0, FS_STRIPES). */
static inline unsigned fs_thread_stripe(void)
{
    unsigned s = fs_stripe_plus1;
    return s ? s - 1 : fs_thread_stripe_assign();
}
/* How many stripes any thread has been given (1..FS_STRIPES; 0 before the
 * first): stripes at or past it have never been written.  A sequentially
 * consistent load: a thread's stripe is counted here before its first
 * write to it (see fs_brlock.c for why a writer relies on that). */
unsigned fs_stripes_used(void);

/* ------------------------------------------------------------ clock */

/* A monotonic clock in nanoseconds, for measuring short spans (a batch
 * block's cost, a spin's budget); its origin means nothing.  A vDSO call
 * on Linux (~20 ns), QueryPerformanceCounter on Windows. */
unsigned long long fs_now_ns(void);

/* The processor time the calling thread has used, in nanoseconds, set
 * against fs_now_ns to tell a thread that runs from one that waits for a
 * processor (a batch's workers, with more threads than processors).  0
 * where the system cannot say finely: Windows counts it in clock ticks
 * (~15.6 ms), too coarse for spans of a few milliseconds. */
unsigned long long fs_thread_cpu_ns(void);

/* ------------------------------------------------------------ processors */

/* The processors this process may run on (its affinity mask, where the
 * system has one; else those online), at least 1: the batch's thread
 * policy plans for no more threads than these (fs_column.c). */
unsigned fs_cpus(void);

/* ------------------------------------------------------------ a file as a buffer */

/* A buffer that is a file's pages (the image writer's, so that saving an
 * index of billions of bytes does not hold its image twice in memory: the
 * kernel writes the pages back and may drop them).  POSIX: a shared
 * mapping of the file, grown with ftruncate and mremap (Linux) or a new
 * mapping.  Elsewhere fs_filebuf_open fails with FS_ENOSYS and the writer
 * uses memory. */
typedef struct {
    char *p;             /* the mapping (NULL: none yet) */
    size_t cap;          /* bytes mapped, the file's size */
    int fd;
} fs_filebuf;

/* Why the calling thread's last system call failed (errno), and setting
 * it: a failure met on a worker thread is handed back to the thread that
 * reports it (errno is each thread's own). */
static inline int fs_sys_error(void) { return errno; }
static inline void fs_sys_set_error(int e) { errno = e; }

/* Create (truncate) the file at path as an empty buffer.  FS_OK, FS_ENOSYS
 * (no file mappings here), or -1 (errno says why). */
int fs_filebuf_open(fs_filebuf *b, const char *path);
/* Make the buffer at least size bytes (new bytes read as zeros; p may
 * move); the first call makes it size bytes (at least 1 MiB), each later
 * one grows it by half at least.  FS_OK or -1. */
int fs_filebuf_grow(fs_filebuf *b, size_t size);
/* fs_filebuf_grow, the new pages made ready in one call only below byte
 * `populate` (the size expected; those past it, room in case, are made
 * when first written, if ever: a page made for nothing is zeroed for
 * nothing).  FS_OK or -1. */
int fs_filebuf_grow_populating(fs_filebuf *b, size_t size, size_t populate);
/* Make the pages of bytes [from, to) ready (Linux: populated in one call,
 * as fs_filebuf_grow_populating's; elsewhere nothing: they are made as
 * they are written), so that a thread can do it beside other work before
 * they are written.  Never fails (a page it could not make is made when
 * written). */
void fs_filebuf_populate(const fs_filebuf *b, size_t from, size_t to);
/* Start writing the whole pages of bytes [from, to) to disk, without
 * waiting (Linux: sync_file_range; elsewhere nothing): for bytes that are
 * final, so that the disk works while the rest is written and a durable
 * close has less to wait for.  Never fails (a failure shows at close). */
void fs_filebuf_start_writeback(fs_filebuf *b, size_t from, size_t to);
/* Cut the file to len bytes, write it to disk (fsync, after an msync
 * where the system needs one: when durable) and close it.  Not durable, the bytes are in the page cache,
 * where every reader sees them, and reach the disk when the kernel writes
 * them back.  FS_OK or -1; the buffer is closed either way. */
int fs_filebuf_close(fs_filebuf *b, size_t len, int durable);

#endif
