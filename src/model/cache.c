/* cache.c - the KV page pool and the DeltaNet state pool (see cache.h). */
#include "model/cache.h"

#include <stdlib.h>
#include <string.h>

ds_status ds_kv_pool_init(ds_kv_pool *p, int n_layers, int n_kv_heads, int head_dim, int page_size,
                          size_t byte_budget, ds_err *e) {
    memset(p, 0, sizeof *p);
    p->page_size = page_size;
    p->n_layers = n_layers;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->page_floats = (size_t)n_layers * (size_t)page_size * (size_t)n_kv_heads * (size_t)head_dim * 2;
    size_t page_bytes = p->page_floats * sizeof(float);
    if (page_size <= 0 || page_bytes == 0) return ds_fail(e, DS_EINVAL, "KV pool: page size %d is not positive", page_size);
    size_t n = byte_budget / page_bytes;
    if (n < 1)
        return ds_fail(e, DS_ENOMEM, "KV pool: a budget of %zu bytes does not hold one page of %zu bytes", byte_budget,
                       page_bytes);
    if (n > INT32_MAX) n = INT32_MAX;
    p->data = calloc(n, page_bytes);
    if (!p->data) return ds_fail(e, DS_ENOMEM, "KV pool: cannot allocate %zu pages of %zu bytes", n, page_bytes);
    p->n_pages = (int)n;
    return DS_OK;
}

void ds_kv_pool_free(ds_kv_pool *p) {
    free(p->data);
    memset(p, 0, sizeof *p);
}

/* page layout: [layer][K|V][slot][kv_head][head_dim] */
static float *kv_at(const ds_kv_pool *p, int page, int layer, int which, int slot) {
    size_t row = (size_t)p->n_kv_heads * (size_t)p->head_dim;
    return p->data + (size_t)page * p->page_floats + (((size_t)layer * 2 + (size_t)which) * (size_t)p->page_size +
                                                       (size_t)slot) * row;
}
float *ds_kv_k(const ds_kv_pool *p, int page, int layer, int slot) { return kv_at(p, page, layer, 0, slot); }
float *ds_kv_v(const ds_kv_pool *p, int page, int layer, int slot) { return kv_at(p, page, layer, 1, slot); }

ds_status ds_state_pool_init(ds_state_pool *p, int n_layers, int conv_kernel, int conv_dim, int n_v_heads, int k_dim,
                             int v_dim, int n_slots, ds_err *e) {
    memset(p, 0, sizeof *p);
    p->n_slots = n_slots;
    p->n_layers = n_layers;
    p->conv_rows = conv_kernel - 1;
    p->conv_dim = conv_dim;
    p->n_v_heads = n_v_heads;
    p->k_dim = k_dim;
    p->v_dim = v_dim;
    p->layer_floats = (size_t)p->conv_rows * (size_t)conv_dim + (size_t)n_v_heads * (size_t)k_dim * (size_t)v_dim;
    p->slot_floats = p->layer_floats * (size_t)n_layers;
    if (n_slots <= 0) return ds_fail(e, DS_EINVAL, "state pool: %d slots", n_slots);
    if (p->slot_floats == 0) return DS_OK; /* a model without DeltaNet layers */
    p->data = calloc((size_t)n_slots, p->slot_floats * sizeof(float));
    if (!p->data)
        return ds_fail(e, DS_ENOMEM, "state pool: cannot allocate %d slots of %zu bytes", n_slots,
                       p->slot_floats * sizeof(float));
    return DS_OK;
}

ds_status ds_record_pool_init(ds_state_pool *p, int n_layers, size_t record_floats, int n_slots, ds_err *e) {
    memset(p, 0, sizeof *p);
    p->n_slots = n_slots;
    p->n_layers = n_layers;
    p->layer_floats = record_floats;
    p->slot_floats = record_floats * (size_t)n_layers;
    if (n_slots <= 0) return ds_fail(e, DS_EINVAL, "record pool: %d slots", n_slots);
    if (p->slot_floats == 0) return DS_OK;
    p->data = calloc((size_t)n_slots, p->slot_floats * sizeof(float));
    if (!p->data)
        return ds_fail(e, DS_ENOMEM, "record pool: cannot allocate %d slots of %zu bytes", n_slots,
                       p->slot_floats * sizeof(float));
    return DS_OK;
}

void ds_state_pool_free(ds_state_pool *p) {
    free(p->data);
    memset(p, 0, sizeof *p);
}

float *ds_state_conv(const ds_state_pool *p, int slot, int layer) {
    return p->data + (size_t)slot * p->slot_floats + (size_t)layer * p->layer_floats;
}

float *ds_state_rec(const ds_state_pool *p, int slot, int layer) {
    return ds_state_conv(p, slot, layer) + (size_t)p->conv_rows * (size_t)p->conv_dim;
}

void ds_state_clear(ds_state_pool *p, int slot) {
    if (p->slot_floats) memset(p->data + (size_t)slot * p->slot_floats, 0, p->slot_floats * sizeof(float));
}

void ds_state_copy(ds_state_pool *p, int dst, int src) {
    if (dst != src && p->slot_floats)
        memcpy(p->data + (size_t)dst * p->slot_floats, p->data + (size_t)src * p->slot_floats,
               p->slot_floats * sizeof(float));
}
