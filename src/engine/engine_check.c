/* engine_check.c - ds_engine_check_invariants: the engine's bookkeeping
 * checked against itself, the way a database checks its pager after each
 * transaction in its test builds. It walks every holder of pool ids (running
 * requests, the prefix trie) and compares with the pools' reference counts
 * and free lists, so that a leaked or doubly freed page is caught at the step
 * that broke it instead of as a wrong answer much later. It costs a pass over
 * the pools and the requests per step: on in the sanitizer suite and the soak
 * test (DS_CHECK_INVARIANTS=1), off in production. Engine thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

/* Compares each id's reference count with its holders (holds[id - first]),
 * then the free list with the ids no one holds. Leaves holds scribbled. */
static ds_status check_pool(const ds_id_pool *p, int32_t *holds, const char *what, const char *holders, ds_err *e) {
    for (int i = 0; i < p->n; i++)
        if (p->refs[i] != holds[i])
            return ds_fail(e, DS_ECORRUPT, "reference counts equal holders: %s %d has %d references and %d holders (%s)",
                           what, p->first + i, p->refs[i], holds[i], holders);
    if (p->n_free < 0 || p->n_free > p->n)
        return ds_fail(e, DS_ECORRUPT, "free lists hold no id in use: %d %ss on the free list of %d", p->n_free, what,
                       p->n);
    int unused = 0;
    for (int i = 0; i < p->n; i++) unused += p->refs[i] == 0;
    for (int k = 0; k < p->n_free; k++) {
        int id = p->free[k];
        if (id < p->first || id >= p->first + p->n)
            return ds_fail(e, DS_ECORRUPT, "free lists hold no id in use: %s %d on the free list is outside the pool",
                           what, id);
        if (p->refs[id - p->first] != 0)
            return ds_fail(e, DS_ECORRUPT, "free lists hold no id in use: %s %d is free and has %d references", what,
                           id, p->refs[id - p->first]);
        if (holds[id - p->first] == -1)
            return ds_fail(e, DS_ECORRUPT, "free lists hold no id in use: %s %d is on the free list twice", what, id);
        holds[id - p->first] = -1;
    }
    if (unused != p->n_free)
        return ds_fail(e, DS_ECORRUPT, "free lists hold every unused id: %d %ss have no reference, %d are free", unused,
                       what, p->n_free);
    return DS_OK;
}

/* Counts an exclusive id (a state slot or a verify record) in holds: a second holder is an error. */
static ds_status hold_once(const ds_id_pool *p, int32_t *holds, int id, const req *r, const char *what, ds_err *e) {
    if (id < p->first || id >= p->first + p->n)
        return ds_fail(e, DS_ECORRUPT, "request %llu holds %s %d, outside the pool", (unsigned long long)r->id, what, id);
    if (++holds[id - p->first] > 1)
        return ds_fail(e, DS_ECORRUPT, "no sequence holds a slot twice: %s %d is held twice (request %llu and another)",
                       what, id, (unsigned long long)r->id);
    return DS_OK;
}

/* Jobs of images being encoded: one at most per request, only while it runs,
 * only for an image without rows, and their bytes are the vision budget's
 * use, within it. */
static ds_status check_images(ds_engine *g, ds_err *e) {
    size_t held = 0;
    for (int i = 0; i < g->n_running; i++) {
        const req *r = g->running[i];
        int jobs = 0;
        for (int k = 0; k < r->n_images; k++) {
            const req_image *ri = &r->images[k];
            if (!ri->job) continue;
            if (ri->rows)
                return ds_fail(e, DS_ECORRUPT, "a vision job encodes an image without rows: request %llu image %d "
                                               "has both", (unsigned long long)r->id, k);
            jobs++;
            held += ri->job_bytes;
        }
        if (jobs > 1)
            return ds_fail(e, DS_ECORRUPT, "a request encodes one image at a time: request %llu has %d jobs",
                           (unsigned long long)r->id, jobs);
    }
    for (const req *r = g->waiting_head; r; r = r->next)
        for (int k = 0; k < r->n_images; k++)
            if (r->images[k].job)
                return ds_fail(e, DS_ECORRUPT, "a waiting request holds nothing: request %llu holds a vision job",
                               (unsigned long long)r->id);
    if (held != g->vision_used || g->vision_used > g->vision_budget)
        return ds_fail(e, DS_ECORRUPT, "vision jobs hold %zu bytes, the budget counts %zu used of %zu", held,
                       g->vision_used, g->vision_budget);
    return DS_OK;
}

static ds_status check_requests(ds_engine *g, ds_err *e) {
    if (g->n_running < 0 || g->n_running > g->p.max_running)
        return ds_fail(e, DS_ECORRUPT, "%d requests running, at most %d", g->n_running, g->p.max_running);
    for (int i = 0; i < g->n_running; i++) {
        const req *r = g->running[i];
        unsigned long long id = (unsigned long long)r->id;
        if (r->running_index != i)
            return ds_fail(e, DS_ECORRUPT, "running request %llu sits at %d but says %d", id, i, r->running_index);
        if (r->n_computed < 0 || r->n_computed > r->n_tokens || r->n_tokens > r->cap_tokens)
            return ds_fail(e, DS_ECORRUPT, "request %llu: %d positions computed of %d tokens (room for %d)", id,
                           r->n_computed, r->n_tokens, r->cap_tokens);
        /* engine invariant 1: the pages cover the computed positions */
        if (r->n_pages > r->cap_pages || (int64_t)r->n_pages * g->p.page_size < r->n_computed)
            return ds_fail(e, DS_ECORRUPT, "a running request holds the pages of its computed positions: request %llu "
                                           "has %d pages of %d tokens for %d positions",
                           id, r->n_pages, g->p.page_size, r->n_computed);
        if (g->hybrid ? r->slot < 0 : r->slot != -1)
            return ds_fail(e, DS_ECORRUPT, "a running request holds one state slot: request %llu holds slot %d", id,
                           r->slot);
    }
    int n = 0;
    const req *last = NULL;
    for (const req *r = g->waiting_head; r; r = r->next) {
        if (++n > g->n_waiting)
            return ds_fail(e, DS_ECORRUPT, "the waiting list is longer than the %d it counts", g->n_waiting);
        if (r->n_pages || r->slot != -1 || r->n_vslots)
            return ds_fail(e, DS_ECORRUPT, "a waiting request holds nothing: request %llu holds %d pages, state slot "
                                           "%d, %d verify slots",
                           (unsigned long long)r->id, r->n_pages, r->slot, r->n_vslots);
        last = r;
    }
    if (n != g->n_waiting || g->waiting_tail != last)
        return ds_fail(e, DS_ECORRUPT, "the waiting list holds %d requests, counts %d, or its tail is wrong", n,
                       g->n_waiting);
    pthread_mutex_lock(&g->mu);
    int live = 0, bad_pending = 0;
    for (const req *r = g->live_head; r; r = r->live_next)
        if (++live > g->n_inbox + g->n_waiting + g->n_running) break;
    for (const req *r = g->pending_head; r; r = r->pending_next) bad_pending |= r->pending == 0;
    int expect = g->n_inbox + g->n_waiting + g->n_running;
    pthread_mutex_unlock(&g->mu);
    if (live != expect)
        return ds_fail(e, DS_ECORRUPT, "every request not yet ended is live: %d%s on the live list, %d in the inbox, "
                                       "waiting or running",
                       live, live > expect ? " or more" : "", expect);
    if (bad_pending) return ds_fail(e, DS_ECORRUPT, "a request on the pending list has no pending flag");
    return DS_OK;
}

ds_status ds_engine_check_invariants(ds_engine *g, ds_err *e) {
    ds_status s = check_requests(g, e);
    if (!s) s = check_images(g, e);
    if (s) return s;
    /* KV pages: the prefix trie's references, then the running requests' page tables */
    memset(g->check_pages, 0, (size_t)g->pages.n * sizeof *g->check_pages);
    memset(g->check_ckpts, 0, (size_t)g->ckpts.n * sizeof *g->check_ckpts);
    if (g->cache && (s = ds_prefix_check(g->cache, g->check_pages, g->check_ckpts, e))) return s;
    int32_t *seen = g->check_scratch; /* which request last named a page: one request holds a page once */
    memset(seen, 0, (size_t)g->pages.n * sizeof *seen);
    for (int i = 0; i < g->n_running; i++) {
        const req *r = g->running[i];
        for (int k = 0; k < r->n_pages; k++) {
            int id = r->pages[k];
            if (id < g->pages.first || id >= g->pages.first + g->pages.n)
                return ds_fail(e, DS_ECORRUPT, "request %llu holds page %d, outside the pool", (unsigned long long)r->id,
                               id);
            if (seen[id - g->pages.first] == i + 1)
                return ds_fail(e, DS_ECORRUPT, "no sequence holds a slot twice: request %llu names page %d twice",
                               (unsigned long long)r->id, id);
            seen[id - g->pages.first] = i + 1;
            g->check_pages[id - g->pages.first]++;
        }
    }
    if ((s = check_pool(&g->pages, g->check_pages, "page", "running requests' page tables and prefix-cache nodes", e)))
        return s;
    if ((s = check_pool(&g->ckpts, g->check_ckpts, "checkpoint slot", "prefix-cache nodes: every cached checkpoint "
                                                                       "belongs to a trie node", e)))
        return s;
    /* exclusive slots: DeltaNet state, verify records */
    memset(seen, 0, (size_t)g->slots.n * sizeof *seen);
    for (int i = 0; i < g->n_running && g->hybrid; i++)
        if ((s = hold_once(&g->slots, seen, g->running[i]->slot, g->running[i], "state slot", e))) return s;
    if ((s = check_pool(&g->slots, seen, "state slot", "running requests", e))) return s;
    memset(seen, 0, (size_t)g->vslots.n * sizeof *seen);
    for (int i = 0; i < g->n_running; i++)
        for (int k = 0; k < g->running[i]->n_vslots; k++)
            if ((s = hold_once(&g->vslots, seen, g->running[i]->vslots[k], g->running[i], "verify slot", e))) return s;
    return check_pool(&g->vslots, seen, "verify slot", "running requests", e);
}

void ds_engine_check_or_die(ds_engine *g) {
    ds_err e = {0};
    if (ds_engine_check_invariants(g, &e) == DS_OK) return;
    fprintf(stderr, "deltaserve engine: an invariant is broken after step %lld: %s\n", (long long)g->step_no, e.msg);
    abort();
}
