/* fs_sys.c - the parts of the thread layer (fs_sys.h) that run once per
 * thread, batch or process, so they need not be inline: starting and
 * joining threads, one-time initialisation, thread-specific slots,
 * deadline waits, fork handlers and discardable pages. */
#if !defined(_WIN32) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE          /* glibc's pthread_rwlockattr_setkind_np */
#endif
#include "fs_sys.h"

#include "fs_status.h"

#include <stdatomic.h>

#ifdef _WIN32
#include <process.h>
#else
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

FS_THREAD_LOCAL unsigned fs_stripe_plus1;

/* Threads given a stripe so far.  64 bits: a server that starts a thread
 * per request never wraps it back below FS_STRIPES (fs_stripes_used would
 * then hide stripes in use from a writer). */
static atomic_ullong stripes_next;

unsigned fs_thread_stripe_assign(void)
{
    unsigned long long n = atomic_fetch_add_explicit(&stripes_next, 1, memory_order_seq_cst);
    unsigned s = (unsigned)(n % FS_STRIPES);
    fs_stripe_plus1 = s + 1;
    return s;
}

unsigned fs_stripes_used(void)
{
    unsigned long long n = atomic_load_explicit(&stripes_next, memory_order_seq_cst);
    return n < FS_STRIPES ? (unsigned)n : FS_STRIPES;
}

/* A thread starts in a trampoline that calls the caller's void fn(void *):
 * the two systems want different start-routine signatures, and the
 * callers should not have to know either.  fn and arg are read from the
 * fs_thread itself (written before the thread exists), so starting a
 * thread allocates nothing. */
#ifdef _WIN32
static unsigned __stdcall thread_trampoline(void *p)
{
    fs_thread *t = p;
    t->fn(t->arg);
    return 0;
}

int fs_thread_start(fs_thread *t, void (*fn)(void *), void *arg)
{
    t->fn = fn;
    t->arg = arg;
    /* _beginthreadex rather than CreateThread: the C runtime sets up its
     * per-thread state (errno, ...) for threads it starts itself. */
    uintptr_t h = _beginthreadex(NULL, 0, thread_trampoline, t, 0, NULL);
    if (h == 0)
        return -1;
    t->handle = (HANDLE)h;
    return 0;
}

void fs_thread_join(fs_thread *t)
{
    WaitForSingleObject(t->handle, INFINITE);
    CloseHandle(t->handle);
}
#else
static void *thread_trampoline(void *p)
{
    fs_thread *t = p;
    t->fn(t->arg);
    return NULL;
}

int fs_thread_start(fs_thread *t, void (*fn)(void *), void *arg)
{
    t->fn = fn;
    t->arg = arg;
    return pthread_create(&t->handle, NULL, thread_trampoline, t) == 0 ? 0 : -1;
}

void fs_thread_join(fs_thread *t) { pthread_join(t->handle, NULL); }
#endif

#ifdef _WIN32
/* InitOnceExecuteOnce passes one pointer through to its callback: the
 * caller's function, boxed, since a function pointer is not a void *. */
typedef struct {
    void (*fn)(void);
} once_box;

static BOOL CALLBACK once_trampoline(PINIT_ONCE flag, PVOID box, PVOID *context)
{
    (void)flag;
    (void)context;
    ((once_box *)box)->fn();
    return TRUE;
}

void fs_once(fs_once_flag *flag, void (*fn)(void))
{
    once_box box = {fn};
    InitOnceExecuteOnce(flag, once_trampoline, &box, NULL);
}

int fs_tls_create(fs_tls_key *k, void (FS_TLS_DESTRUCTOR *destructor)(void *))
{
    DWORD slot = FlsAlloc(destructor);
    if (slot == FLS_OUT_OF_INDEXES)
        return -1;
    *k = slot;
    return 0;
}

fs_deadline fs_deadline_in(unsigned ms) { return GetTickCount64() + ms; }

int fs_cond_wait_until(fs_cond *c, fs_mutex *m, const fs_deadline *until)
{
    ULONGLONG now = GetTickCount64();
    if (now >= *until)
        return 0;
    ULONGLONG left = *until - now;
    /* INFINITE is 0xFFFFFFFF: a longer wait is cut below it and the
     * caller's loop comes back for the rest. */
    DWORD ms = left >= INFINITE ? INFINITE - 1 : (DWORD)left;
    if (!SleepConditionVariableSRW(c, m, ms, 0))
        return GetLastError() == ERROR_TIMEOUT ? GetTickCount64() < *until : 1;
    return 1;
}
#else
void fs_once(fs_once_flag *flag, void (*fn)(void)) { pthread_once(flag, fn); }

int fs_tls_create(fs_tls_key *k, void (*destructor)(void *))
{
    return pthread_key_create(k, destructor) == 0 ? 0 : -1;
}

fs_deadline fs_deadline_in(unsigned ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

int fs_cond_wait_until(fs_cond *c, fs_mutex *m, const fs_deadline *until)
{
    return pthread_cond_timedwait(c, m, until) != ETIMEDOUT;
}
#endif

#ifdef _WIN32
unsigned long long fs_now_ns(void)
{
    static LARGE_INTEGER freq;       /* fixed at boot: a benign race to fill it */
    LARGE_INTEGER c;
    if (freq.QuadPart == 0)
        QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&c);
    unsigned long long q = (unsigned long long)c.QuadPart, f = (unsigned long long)freq.QuadPart;
    return q / f * 1000000000ULL + q % f * 1000000000ULL / f;
}

unsigned long long fs_thread_cpu_ns(void)
{
    return 0;
}
#else
unsigned long long fs_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}

unsigned long long fs_thread_cpu_ns(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return 0;
    return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}
#endif

#ifdef _WIN32
unsigned fs_cpus(void)
{
    DWORD_PTR mine, all;
    if (GetProcessAffinityMask(GetCurrentProcess(), &mine, &all) && mine) {
        unsigned n = 0;
        for (; mine; mine &= mine - 1)
            n++;
        return n;
    }
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors ? (unsigned)si.dwNumberOfProcessors : 1;
}
#else
unsigned fs_cpus(void)
{
#ifdef __linux__
    cpu_set_t set;                   /* past its 1,024 processors: those online */
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}
#endif

#ifndef _WIN32
int fs_pthread_rwlock_init(pthread_rwlock_t *l)
{
    pthread_rwlockattr_t a;
    if (pthread_rwlockattr_init(&a) != 0)
        return -1;
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    int rc = pthread_rwlock_init(l, &a);
    pthread_rwlockattr_destroy(&a);
    return rc == 0 ? 0 : -1;
}
#endif

#ifdef _WIN32
int fs_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    (void)prepare;
    (void)parent;
    (void)child;
    return 0;
}
#else
int fs_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    return pthread_atfork(prepare, parent, child) == 0 ? 0 : -1;
}
#endif

#if defined(_WIN32) || !defined(MADV_FREE)
int fs_pages_discard(void *p, size_t size)
{
    (void)p;
    (void)size;
    return -1;
}
#else
static size_t page_size;
static fs_once_flag page_size_once = FS_ONCE_INIT;
static void read_page_size(void) { page_size = (size_t)sysconf(_SC_PAGESIZE); }

int fs_pages_discard(void *p, size_t size)
{
    fs_once(&page_size_once, read_page_size);
    if (page_size == 0 || (page_size & (page_size - 1)) != 0)
        return -1;
    uintptr_t mask = (uintptr_t)page_size - 1;
    uintptr_t first = ((uintptr_t)p + mask) & ~mask, end = ((uintptr_t)p + size) & ~mask;
    if (end <= first)                  /* no whole page inside */
        return 0;
    return madvise((void *)first, end - first, MADV_FREE) == 0 ? 0 : -1;
}
#endif

#if defined(MADV_HUGEPAGE)
void fs_pages_huge(void *p, size_t size)
{
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t first = ((uintptr_t)p + huge - 1) & ~(huge - 1), end = ((uintptr_t)p + size) & ~(huge - 1);
    if (end > first)
        (void)madvise((void *)first, end - first, MADV_HUGEPAGE);
}
#else
void fs_pages_huge(void *p, size_t size)
{
    (void)p;
    (void)size;
}
#endif

/* ------------------------------------------------------------ a file as a buffer */
#ifdef _WIN32
int fs_filebuf_open(fs_filebuf *b, const char *path)
{
    (void)path;
    b->p = NULL;
    b->cap = 0;
    b->fd = -1;
    return FS_ENOSYS;
}
int fs_filebuf_grow(fs_filebuf *b, size_t size) { (void)b; (void)size; return -1; }
void fs_filebuf_populate(const fs_filebuf *b, size_t from, size_t to) { (void)b; (void)from; (void)to; }
int fs_filebuf_grow_populating(fs_filebuf *b, size_t size, size_t populate)
{
    (void)b;
    (void)size;
    (void)populate;
    return -1;
}
void fs_filebuf_start_writeback(fs_filebuf *b, size_t from, size_t to) { (void)b; (void)from; (void)to; }
int fs_filebuf_close(fs_filebuf *b, size_t len, int durable) { (void)b; (void)len; (void)durable; return -1; }
#else
int fs_filebuf_open(fs_filebuf *b, const char *path)
{
    b->p = NULL;
    b->cap = 0;
    b->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return b->fd < 0 ? -1 : FS_OK;
}

int fs_filebuf_grow(fs_filebuf *b, size_t size)
{
    return fs_filebuf_grow_populating(b, size, SIZE_MAX);
}

int fs_filebuf_grow_populating(fs_filebuf *b, size_t size, size_t populate)
{
    if (size <= b->cap)
        return FS_OK;
    /* The first size asked for is the writer's estimate of the whole file
     * (at least 1 MiB), then by half: the file is the memory, and what is
     * grown past the end is populated for nothing. */
    size_t ncap = b->cap ? b->cap : size > (size_t)1 << 20 ? size : (size_t)1 << 20;
    while (ncap < size)
        ncap = ncap / 2 * 3;
    ncap = (ncap + 4095) & ~(size_t)4095;
    if (ftruncate(b->fd, (off_t)ncap) != 0)
        return -1;
    void *np;
#ifdef __linux__
    np = b->p ? mremap(b->p, b->cap, ncap, MREMAP_MAYMOVE)
              : mmap(NULL, ncap, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
#else
    if (b->p)
        munmap(b->p, b->cap);
    np = mmap(NULL, ncap, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
#endif
    if (np == MAP_FAILED) {
#ifndef __linux__
        b->p = NULL;           /* the old mapping is gone: the file keeps the bytes */
        b->cap = 0;
#endif
        return -1;
    }
    size_t from = b->cap;
    b->p = np;
    b->cap = ncap;
    fs_filebuf_populate(b, from, populate);
    return FS_OK;
}

void fs_filebuf_populate(const fs_filebuf *b, size_t from, size_t to)
{
#ifdef MADV_POPULATE_WRITE
    /* The pages in one call, not a fault each as they are written (best
     * effort: older kernels refuse the advice, and fault them). */
    from &= ~(size_t)4095;
    to = to < b->cap ? (to + 4095) & ~(size_t)4095 : b->cap;
    if (to > b->cap)
        to = b->cap;
    if (b->p && to > from)
        (void)madvise(b->p + from, to - from, MADV_POPULATE_WRITE);
#else
    (void)b;
    (void)from;
    (void)to;
#endif
}

void fs_filebuf_start_writeback(fs_filebuf *b, size_t from, size_t to)
{
#ifdef __linux__
    /* whole pages only: a page written again while it is on its way to the
     * disk would be written twice (or wait for the first write) */
    from = (from + 4095) & ~(size_t)4095;
    to &= ~(size_t)4095;
    if (to > b->cap)
        to = b->cap & ~(size_t)4095;
    if (b->fd >= 0 && to > from)
        (void)sync_file_range(b->fd, (off_t)from, (off_t)(to - from), SYNC_FILE_RANGE_WRITE);
#else
    (void)b;
    (void)from;
    (void)to;
#endif
}

int fs_filebuf_close(fs_filebuf *b, size_t len, int durable)
{
    int rc = 0;
#ifndef __linux__
    /* POSIX says a shared mapping's writes reach the file by msync: the
     * fsync below may not see them otherwise.  Only the bytes kept: the
     * rest of the mapping (growth's slack, its pages written by the
     * populate) is cut off below, unwritten.  Linux needs no msync: its
     * page cache tracks the pages written through a shared mapping as
     * dirty (since 2.6.19: mm/msync.c, "dirty pages are properly
     * tracked"; msync(2), NOTES), so fsync writes them, and an
     * msync(MS_SYNC) first is an fdatasync of the same range
     * (vfs_fsync_range): a second wait and a second journal commit, the
     * file's size having changed since it was made (grown, then cut). */
    if (durable && b->p && msync(b->p, len < b->cap ? len : b->cap, MS_SYNC) != 0)
        rc = -1;
#endif
    if (b->p)
        munmap(b->p, b->cap);
    if (rc == 0 && ftruncate(b->fd, (off_t)len) != 0)
        rc = -1;
    if (durable && rc == 0 && fsync(b->fd) != 0)
        rc = -1;
    if (close(b->fd) != 0)
        rc = -1;
    b->p = NULL;
    b->cap = 0;
    b->fd = -1;
    return rc;
}
#endif
