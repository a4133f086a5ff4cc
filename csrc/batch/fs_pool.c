/* fs_pool.c - the persistent pool of worker threads (see fs_pool.h). */
#include "fs_pool.h"

#include "fs_alloc.h"
#include "fs_fork.h"
#include "fs_status.h"

typedef struct pool_thread pool_thread;
struct pool_thread {
    fs_thread t;               /* must not move: the thread reads it */
    pool_thread *next;
};

static fs_mutex mu;
static fs_cond work;           /* a task was posted */
static fs_cond ended;          /* a task's fn returned */
static fs_pool_task *queue_head, *queue_tail;
static pool_thread *threads;   /* every started thread, newest first */
static unsigned nthreads, nidle, nbusy;   /* nbusy: between taking an index and coming back */

static void fork_prepare(void *arg);
static void fork_parent(void *arg);
static void fork_child(void *arg);
/* order 2: taken last (the output pool's is 1); this mutex is never held
 * while another lock is taken (fs_fork.c). */
static fs_fork_entry pool_fork = {.prepare = fork_prepare, .parent = fork_parent, .child = fork_child, .order = 2};

static void pool_init(void)
{
    fs_mutex_init(&mu);
    fs_cond_init(&work);
    fs_cond_init(&ended);
}

static void unlink_head(void)
{
    queue_head = queue_head->next;
    if (!queue_head)
        queue_tail = NULL;
}

/* A worker: take the oldest task's next index, run it, repeat; park when
 * there is none.  Never returns (the threads live as long as the process). */
static void worker_main(void *arg)
{
    (void)arg;
    fs_mutex_lock(&mu);
    for (;;) {
        while (!queue_head) {
            nidle++;
            fs_cond_wait(&work, &mu);
            nidle--;
        }
        fs_pool_task *t = queue_head;
        unsigned index = t->given++;
        if (t->given == t->want)
            unlink_head();
        nbusy++;
        fs_mutex_unlock(&mu);
        t->fn(t->arg, index);
        fs_mutex_lock(&mu);
        /* Counted back as free before the owner can see its task done:
         * the next batch then finds this worker, not a reason to start a
         * thread.  t is not touched after this (fs_pool_join may free it
         * as soon as mu is let go). */
        nbusy--;
        if (++t->done == t->given)
            fs_cond_broadcast(&ended);
    }
}

/* Start one more thread; mu held.  FS_OK; FS_ENOMEM when its record
 * could not be allocated; -1 when the system would not start it (nothing
 * changed either way). */
static int start_thread_locked(void)
{
    pool_thread *p = FS_MALLOC(sizeof(pool_thread));
    if (!p)
        return FS_ENOMEM;
    if (fs_thread_start(&p->t, worker_main, NULL) != 0) {
        FS_FREE(p);
        return -1;
    }
    p->next = threads;
    threads = p;
    nthreads++;
    return 0;
}

int fs_pool_submit(fs_pool_task *t, unsigned want)
{
    (void)fs_fork_register_once(&pool_fork, pool_init);   /* not registered: no fork handlers at all */
    if (want == 0)
        want = 1;
    t->want = want;
    t->given = t->done = 0;
    t->next = NULL;
    fs_mutex_lock(&mu);
    /* Every index the queue still hands out, this task's included, should
     * find a free worker: start threads for the difference (a new thread
     * finds the queue without a wake-up). */
    unsigned asked = want;
    for (fs_pool_task *q = queue_head; q; q = q->next)
        asked += q->want - q->given;
    unsigned free_workers = nthreads - nbusy;
    while (free_workers < asked && nthreads < FS_POOL_MAX_THREADS) {
        int rc = start_thread_locked();
        if (rc == FS_ENOMEM) {
            /* Out of memory is the caller's error (fault injection
             * expects one), not fewer threads. */
            fs_mutex_unlock(&mu);
            return FS_ENOMEM;
        }
        if (rc != FS_OK)
            break;          /* the system's limit: run on what there is */
        free_workers++;
    }
    if (nthreads == 0) {
        fs_mutex_unlock(&mu);
        return FS_ENOMEM;
    }
    if (queue_tail)
        queue_tail->next = t;
    else
        queue_head = t;
    queue_tail = t;
    /* Wake as many parked workers as the task wants, no more: a worker
     * woken for nothing is a wasted context switch. */
    unsigned wake = want < nidle ? want : nidle;
    for (unsigned i = 0; i < wake; i++)
        fs_cond_signal(&work);
    fs_mutex_unlock(&mu);
    return FS_OK;
}

unsigned fs_pool_join(fs_pool_task *t)
{
    fs_mutex_lock(&mu);
    if (t->given < t->want) {          /* still queued: unlink it */
        fs_pool_task *prev = NULL;
        for (fs_pool_task *q = queue_head; q; prev = q, q = q->next)
            if (q == t) {
                if (prev)
                    prev->next = q->next;
                else
                    queue_head = q->next;
                if (queue_tail == q)
                    queue_tail = prev;
                break;
            }
        t->want = t->given;
    }
    while (t->done < t->given)
        fs_cond_wait(&ended, &mu);
    unsigned given = t->given;
    fs_mutex_unlock(&mu);
    return given;
}

void fs_pool_status(unsigned *n, unsigned *idle)
{
    (void)fs_fork_register_once(&pool_fork, pool_init);   /* not registered: no fork handlers at all */
    fs_mutex_lock(&mu);
    *n = nthreads;
    *idle = nidle;
    fs_mutex_unlock(&mu);
}

/* Around fork(), the fork registry's callbacks (registered with pool_init):
 * the mutex is held across fork() and released in the parent. */
static void fork_prepare(void *arg)
{
    (void)arg;
    fs_mutex_lock(&mu);
}

static void fork_parent(void *arg)
{
    (void)arg;
    fs_mutex_unlock(&mu);
}

/* The child has none of the parent's workers: forget them (their records
 * are freed; their stacks were the parent's threads' and are not mapped
 * into anything the child uses), and the tasks queued for them, whose
 * owners are threads of the parent too.  Fresh mutex and condition
 * variable: the parent's parked workers are counted inside the copy. */
static void fork_child(void *arg)
{
    (void)arg;
    pool_thread *p = threads;
    while (p) {
        pool_thread *next = p->next;
        FS_FREE(p);
        p = next;
    }
    threads = NULL;
    nthreads = nidle = nbusy = 0;
    queue_head = queue_tail = NULL;
    fs_mutex_init(&mu);
    fs_cond_init(&work);
    fs_cond_init(&ended);
}
