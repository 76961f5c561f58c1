/* threadpool.h - a persistent pool of worker threads for the kernels.
 *
 * One pool runs one job at a time: ds_pool_run(p, fn, ctx) calls fn(ctx, ith,
 * nth) on every thread of the pool, the caller being thread 0, and returns
 * when all have finished. Workers live as long as the pool; between jobs
 * they spin for a short while (a decode step issues hundreds of jobs a few
 * microseconds apart) and then sleep on a futex, so an idle pool costs no CPU.
 *
 * Work is split by the job itself from (ith, nth), or dynamically through an
 * atomic counter the job keeps in its ctx. Results must never depend on nth:
 * every kernel reduces in an order fixed by the data's shape alone.
 *
 * Threads: a pool is driven by one thread at a time (the model's caller). */
#ifndef DS_THREADPOOL_H
#define DS_THREADPOOL_H

#include "common/status.h"

typedef struct ds_pool ds_pool;
typedef void (*ds_pool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0: one per online core. */
ds_status ds_pool_new(int n_threads, ds_pool **out, ds_err *e);
void ds_pool_free(ds_pool *p);
int ds_pool_threads(const ds_pool *p);
/* Runs fn on every thread; returns when all are done. */
void ds_pool_run(ds_pool *p, ds_pool_fn fn, void *ctx);
/* Inside a job: waits until every thread of the pool has reached it. */
void ds_pool_barrier(ds_pool *p);

#endif
