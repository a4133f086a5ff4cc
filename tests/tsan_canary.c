/* tsan_canary.c - a deliberate data race, for `make test-tsan` to check
 * that its set-up (a TSan runtime preloaded into an uninstrumented python,
 * native code called from Python threads) does report races.  Not part of
 * topicmatch. */
#include <pthread.h>

static long counter;

static void *bump(void *arg)
{
    for (int i = 0; i < 100000; i++)
        counter++;
    return arg;
}

long tsan_canary(void)
{
    pthread_t a, b;
    pthread_create(&a, 0, bump, 0);
    pthread_create(&b, 0, bump, 0);
    pthread_join(a, 0);
    pthread_join(b, 0);
    return counter;
}
