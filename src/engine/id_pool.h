/* id_pool.h - a fixed set of integer ids (KV pages, state slots) with
 * reference counts: get one, share it, put it back. Sized once; never grows. */
#ifndef DS_ID_POOL_H
#define DS_ID_POOL_H

#include <stdint.h>

typedef struct {
    int first, n;      /* ids first .. first+n-1 */
    int32_t *free;     /* stack of free ids */
    int n_free;
    int32_t *refs;     /* [n] reference count per id */
} ds_id_pool;

int ds_id_pool_init(ds_id_pool *p, int first, int n);
void ds_id_pool_free(ds_id_pool *p);
/* A free id with one reference, or -1 when none is left. */
int ds_id_get(ds_id_pool *p);
void ds_id_ref(ds_id_pool *p, int id);
/* Drops a reference; the id is free again when none is left. Returns the references left. */
int ds_id_unref(ds_id_pool *p, int id);
int ds_id_refs(const ds_id_pool *p, int id);
int ds_id_used(const ds_id_pool *p);

#endif
