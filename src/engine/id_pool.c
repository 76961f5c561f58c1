/* id_pool.c - see id_pool.h. */
#include "engine/id_pool.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int ds_id_pool_init(ds_id_pool *p, int first, int n) {
    memset(p, 0, sizeof *p);
    p->first = first;
    p->n = n;
    p->free = malloc((size_t)(n ? n : 1) * sizeof *p->free);
    p->refs = calloc((size_t)(n ? n : 1), sizeof *p->refs);
    if (!p->free || !p->refs) {
        ds_id_pool_free(p);
        return -1;
    }
    /* lowest ids on top, so allocation order is predictable in tests */
    for (int i = 0; i < n; i++) p->free[i] = first + n - 1 - i;
    p->n_free = n;
    return 0;
}

void ds_id_pool_free(ds_id_pool *p) {
    free(p->free);
    free(p->refs);
    memset(p, 0, sizeof *p);
}

int ds_id_get(ds_id_pool *p) {
    if (p->n_free == 0) return -1;
    int id = p->free[--p->n_free];
    assert(p->refs[id - p->first] == 0);
    p->refs[id - p->first] = 1;
    return id;
}

void ds_id_ref(ds_id_pool *p, int id) {
    assert(id >= p->first && id < p->first + p->n && p->refs[id - p->first] > 0);
    p->refs[id - p->first]++;
}

int ds_id_unref(ds_id_pool *p, int id) {
    assert(id >= p->first && id < p->first + p->n && p->refs[id - p->first] > 0);
    int left = --p->refs[id - p->first];
    if (left == 0) p->free[p->n_free++] = id;
    return left;
}

int ds_id_refs(const ds_id_pool *p, int id) { return p->refs[id - p->first]; }
int ds_id_used(const ds_id_pool *p) { return p->n - p->n_free; }
