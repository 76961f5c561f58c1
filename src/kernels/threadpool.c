/* threadpool.c - see threadpool.h.
 *
 * DESIGN NOTES
 *   1. `gen` counts jobs. The caller publishes fn/ctx, then increments gen;
 *      a worker that sees gen change runs the job and increments n_done. The
 *      caller returns once n_done == nth - 1.
 *   2. Every wait (a worker for the next job, the caller for the workers, a
 *      thread at a barrier) first spins with PAUSE, then yields the core a
 *      few times, then sleeps on a futex. Spinning keeps the hand-over at a
 *      fraction of a microsecond on an idle machine (a decode step runs a few
 *      hundred jobs); yielding and sleeping keep a loaded machine (more
 *      runnable threads than cores) from burning whole time slices on a
 *      thread that is not even running.
 *   3. A sleeper announces itself in the word's waiter count before it
 *      re-checks the word and sleeps; whoever changes the word wakes the futex
 *      if the count is non-zero (both sides seq_cst), so no wake-up is lost.
 *   4. The barrier is sense-reversing: the last thread to arrive resets the
 *      count and flips `phase`; the others wait on phase.
 *   5. Shared counters sit on their own cache lines. */
#include "kernels/threadpool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu.h"

#define SPIN_PAUSES 4000  /* ~ tens of microseconds */
#define SPIN_YIELDS 50
#define CACHE_LINE 64

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#else
static inline void cpu_relax(void) {}
#endif

typedef struct {
    _Alignas(CACHE_LINE) atomic_int word;
    atomic_int waiters;
} waitword;

struct ds_pool {
    waitword gen;
    waitword n_done;
    waitword phase;
    _Alignas(CACHE_LINE) atomic_int barrier_count;
    _Alignas(CACHE_LINE) atomic_int stop;
    ds_pool_fn fn;
    void *ctx;
    int n_threads;
    pthread_t *threads;
    int n_started;
};

typedef struct {
    ds_pool *p;
    int ith;
} worker_arg;

static void futex_wait(atomic_int *addr, int val) {
    syscall(SYS_futex, (int *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake_all(atomic_int *addr) { syscall(SYS_futex, (int *)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0); }

/* Waits while w->word == val (design note 2); returns the new value. */
static int wait_change(waitword *w, int val) {
    int v;
    for (int i = 0; i < SPIN_PAUSES; i++) {
        if ((v = atomic_load_explicit(&w->word, memory_order_acquire)) != val) return v;
        cpu_relax();
    }
    for (int i = 0; i < SPIN_YIELDS; i++) {
        if ((v = atomic_load_explicit(&w->word, memory_order_acquire)) != val) return v;
        sched_yield();
    }
    for (;;) {
        atomic_fetch_add(&w->waiters, 1);
        if ((v = atomic_load(&w->word)) == val) futex_wait(&w->word, val);
        atomic_fetch_sub(&w->waiters, 1);
        if ((v = atomic_load_explicit(&w->word, memory_order_acquire)) != val) return v;
    }
}

static void wake(waitword *w) {
    if (atomic_load(&w->waiters) > 0) futex_wake_all(&w->word);
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    ds_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    int seen = 0;
    for (;;) {
        seen = wait_change(&p->gen, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        p->fn(p->ctx, ith, p->n_threads);
        atomic_fetch_add(&p->n_done.word, 1); /* seq_cst: pairs with the caller's waiter count */
        wake(&p->n_done);
    }
    return NULL;
}

ds_status ds_pool_new(int n_threads, ds_pool **out, ds_err *e) {
    *out = NULL;
    if (n_threads <= 0) n_threads = ds_cpu()->n_cores;
    if (n_threads > 256) n_threads = 256;
    ds_pool *p = aligned_alloc(CACHE_LINE, (sizeof *p + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
    if (!p) return ds_fail(e, DS_ENOMEM, "thread pool: out of memory");
    waitword *ws[] = {&p->gen, &p->n_done, &p->phase};
    for (int i = 0; i < 3; i++) {
        atomic_init(&ws[i]->word, 0);
        atomic_init(&ws[i]->waiters, 0);
    }
    atomic_init(&p->barrier_count, 0);
    atomic_init(&p->stop, 0);
    p->fn = NULL;
    p->ctx = NULL;
    p->n_threads = n_threads;
    p->n_started = 0;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return ds_fail(e, DS_ENOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->ith = i;
        }
        if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i; /* run with the threads we have */
            break;
        }
        p->n_started++;
    }
    *out = p;
    return DS_OK;
}

void ds_pool_free(ds_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen.word, 1);
    futex_wake_all(&p->gen.word);
    for (int i = 1; i <= p->n_started; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
}

int ds_pool_threads(const ds_pool *p) { return p ? p->n_threads : 1; }

void ds_pool_run(ds_pool *p, ds_pool_fn fn, void *ctx) {
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done.word, 0, memory_order_relaxed);
    atomic_fetch_add(&p->gen.word, 1); /* seq_cst: publishes fn/ctx, pairs with the waiter count */
    wake(&p->gen);
    fn(ctx, 0, p->n_threads);
    int done;
    while ((done = atomic_load_explicit(&p->n_done.word, memory_order_acquire)) != p->n_threads - 1)
        wait_change(&p->n_done, done);
}

void ds_pool_barrier(ds_pool *p) {
    if (!p || p->n_threads == 1) return;
    int phase = atomic_load_explicit(&p->phase.word, memory_order_acquire);
    if (atomic_fetch_add(&p->barrier_count, 1) == p->n_threads - 1) {
        atomic_store_explicit(&p->barrier_count, 0, memory_order_relaxed);
        atomic_store(&p->phase.word, phase ^ 1);
        wake(&p->phase);
    } else {
        wait_change(&p->phase, phase);
    }
}
