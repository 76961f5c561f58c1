/* cache.h - storage the forward pass reads and writes, owned by the caller.
 *
 * KV pages: attention keys and values live in fixed-size pages from one pool
 * allocated up front. A sequence names its pages in a page table; position p
 * of a sequence is slot p % page_size of page pages[p / page_size]. One page
 * holds that block of positions for every attention layer.
 *
 * DeltaNet state slots: one slot holds, for every Gated DeltaNet layer, the
 * conv window (the last K-1 pre-conv inputs) and the recurrent state S
 * [Hv][Dk][Dv], all F32. A slot is the whole recurrent memory of a sequence
 * at one token boundary, so copying a slot is a checkpoint.
 *
 * Both pools are plain storage: which page or slot belongs to whom is the
 * engine's business, not the model's. */
#ifndef DS_CACHE_H
#define DS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct {
    int page_size;      /* positions per page */
    int n_pages;
    int n_layers;       /* attention layers stored per page */
    int n_kv_heads, head_dim;
    size_t page_floats; /* floats per page: n_layers * page_size * n_kv_heads * head_dim * 2 */
    float *data;
} ds_kv_pool;

/* Allocates as many pages as fit in byte_budget (at least one, or fails). */
ds_status ds_kv_pool_init(ds_kv_pool *p, int n_layers, int n_kv_heads, int head_dim, int page_size,
                          size_t byte_budget, ds_err *e);
void ds_kv_pool_free(ds_kv_pool *p);
/* K (or V) row of one kv head group at (page, layer, slot): n_kv_heads * head_dim floats */
float *ds_kv_k(const ds_kv_pool *p, int page, int layer, int slot);
float *ds_kv_v(const ds_kv_pool *p, int page, int layer, int slot);

typedef struct {
    int n_slots;
    int n_layers;            /* Gated DeltaNet layers */
    int conv_rows, conv_dim; /* K-1 rows of conv_dim */
    int n_v_heads, k_dim, v_dim;
    size_t layer_floats, slot_floats;
    float *data;
} ds_state_pool;

ds_status ds_state_pool_init(ds_state_pool *p, int n_layers, int conv_kernel, int conv_dim, int n_v_heads, int k_dim,
                             int v_dim, int n_slots, ds_err *e);
void ds_state_pool_free(ds_state_pool *p);
/* The conv window [conv_rows][conv_dim] and the state [Hv][Dk][Dv] of GDN layer `layer` in a slot. */
float *ds_state_conv(const ds_state_pool *p, int slot, int layer);
float *ds_state_rec(const ds_state_pool *p, int slot, int layer);
void ds_state_clear(ds_state_pool *p, int slot);
void ds_state_copy(ds_state_pool *p, int dst, int src);

/* A pool of verify records (see model.h, VERIFY): slots of n_layers regions
 * of record_floats each (ds_model_verify_record_floats), reached with
 * ds_state_conv. A record is an eleventh of a state for Qwen3.5's shapes, so
 * records in a pool of their own let many more sequences speculate per byte. */
ds_status ds_record_pool_init(ds_state_pool *p, int n_layers, size_t record_floats, int n_slots, ds_err *e);

#endif
