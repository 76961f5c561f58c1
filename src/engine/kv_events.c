/* kv_events.c - the single-producer single-consumer event ring (see the
 * design notes in kv_events.h).
 *
 * A record is a header, then its tokens, then its image hashes, padded to 8
 * bytes. A record never wraps: when it does not fit before the end of the
 * ring, the producer writes a skip mark there and starts again at 0. head and
 * tail count bytes from the start and only grow; the producer publishes a
 * record by a release store of head, the consumer frees it by a release
 * store of tail. */
#include "engine/kv_events.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t bytes;             /* the whole record, padded; 0 marks a skip to the ring's start */
    uint32_t type;
    double time;
    uint64_t hash, parent_hash;
    int32_t has_parent, n_tokens, n_extra, pad;
} record;

struct ds_kv_event_queue {
    unsigned char *ring;
    size_t size;                /* a power of two */
    _Atomic uint64_t head;      /* written by the producer */
    _Atomic uint64_t tail;      /* written by the consumer */
    _Atomic uint64_t pushed, dropped, popped;
    uint64_t pending_free;      /* consumer: bytes of the last popped record, freed at the next pop */
    unsigned char *scratch;     /* consumer: a copy of the last popped record */
    size_t scratch_size;
};

ds_kv_event_queue *ds_kv_event_queue_new(size_t bytes) {
    size_t size = 4096;
    while (size < bytes) size *= 2;
    ds_kv_event_queue *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->ring = malloc(size);
    q->scratch = malloc(size);
    if (!q->ring || !q->scratch) {
        ds_kv_event_queue_free(q);
        return NULL;
    }
    q->size = q->scratch_size = size;
    return q;
}

void ds_kv_event_queue_free(ds_kv_event_queue *q) {
    if (!q) return;
    free(q->ring);
    free(q->scratch);
    free(q);
}

static size_t record_bytes(const ds_kv_event *ev) {
    size_t n = sizeof(record) + (size_t)ev->n_tokens * sizeof(int32_t) + (size_t)ev->n_extra * DS_KV_HASH_BYTES;
    return (n + 7) & ~(size_t)7;
}

/* Bytes a record of `need` bytes takes from head on: a record that does not
 * fit before the end starts again at 0, and the bytes skipped count as used.
 * 0 when it does not fit now. */
static size_t room_for(const ds_kv_event_queue *q, size_t need, uint64_t head) {
    uint64_t tail = atomic_load_explicit(&((ds_kv_event_queue *)q)->tail, memory_order_acquire);
    size_t at = (size_t)(head & (q->size - 1)), to_end = q->size - at;
    size_t used = need <= to_end ? need : to_end + need;
    return need > q->size / 2 || head - tail + used > q->size ? 0 : used;
}

int ds_kv_event_fits(const ds_kv_event_queue *q, int n_tokens, int n_extra) {
    if (n_tokens < 0 || n_extra < 0) return 0;
    ds_kv_event ev = {.n_tokens = n_tokens, .n_extra = n_extra};
    return room_for(q, record_bytes(&ev), atomic_load_explicit(&((ds_kv_event_queue *)q)->head,
                                                               memory_order_relaxed)) > 0;
}

int ds_kv_event_push(ds_kv_event_queue *q, const ds_kv_event *ev) {
    size_t need = record_bytes(ev);
    uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
    size_t at = (size_t)(head & (q->size - 1)), to_end = q->size - at;
    size_t used = ev->n_tokens < 0 || ev->n_extra < 0 ? 0 : room_for(q, need, head);
    if (used == 0) {
        atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
        return 0;
    }
    if (need > to_end) {
        if (to_end >= sizeof(uint32_t)) memset(q->ring + at, 0, sizeof(uint32_t));
        at = 0;
    }
    record h = {.bytes = (uint32_t)need, .type = (uint32_t)ev->type, .time = ev->time, .hash = ev->hash,
                .parent_hash = ev->parent_hash, .has_parent = ev->has_parent, .n_tokens = ev->n_tokens,
                .n_extra = ev->n_extra};
    unsigned char *p = q->ring + at;
    memcpy(p, &h, sizeof h);
    if (ev->n_tokens) memcpy(p + sizeof h, ev->tokens, (size_t)ev->n_tokens * sizeof(int32_t));
    if (ev->n_extra)
        memcpy(p + sizeof h + (size_t)ev->n_tokens * sizeof(int32_t), ev->extra, (size_t)ev->n_extra * DS_KV_HASH_BYTES);
    atomic_store_explicit(&q->head, head + used, memory_order_release);
    atomic_fetch_add_explicit(&q->pushed, 1, memory_order_relaxed);
    return 1;
}

int ds_kv_event_pop(ds_kv_event_queue *q, ds_kv_event *ev) {
    uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed) + q->pending_free;
    if (q->pending_free) atomic_store_explicit(&q->tail, tail, memory_order_release);
    q->pending_free = 0;
    uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
    if (tail == head) return 0;
    size_t at = (size_t)(tail & (q->size - 1)), to_end = q->size - at;
    uint32_t bytes = 0;
    if (to_end >= sizeof bytes) memcpy(&bytes, q->ring + at, sizeof bytes);
    size_t skipped = 0;
    if (bytes == 0) { /* the skip mark, or an end too short to hold one */
        skipped = to_end;
        at = 0;
        memcpy(&bytes, q->ring, sizeof bytes);
    }
    memcpy(q->scratch, q->ring + at, bytes);
    q->pending_free = skipped + bytes;
    record h;
    memcpy(&h, q->scratch, sizeof h);
    *ev = (ds_kv_event){.type = (ds_kv_event_type)h.type, .time = h.time, .hash = h.hash,
                        .has_parent = h.has_parent, .parent_hash = h.parent_hash, .n_tokens = h.n_tokens,
                        .n_extra = h.n_extra};
    ev->tokens = h.n_tokens ? (const int32_t *)(q->scratch + sizeof h) : NULL;
    ev->extra = h.n_extra ? (const uint8_t (*)[DS_KV_HASH_BYTES])(q->scratch + sizeof h +
                                                                 (size_t)h.n_tokens * sizeof(int32_t))
                          : NULL;
    atomic_fetch_add_explicit(&q->popped, 1, memory_order_relaxed);
    return 1;
}

void ds_kv_event_counts_get(const ds_kv_event_queue *q, ds_kv_event_counts *c) {
    c->pushed = atomic_load_explicit(&((ds_kv_event_queue *)q)->pushed, memory_order_relaxed);
    c->dropped = atomic_load_explicit(&((ds_kv_event_queue *)q)->dropped, memory_order_relaxed);
    c->popped = atomic_load_explicit(&((ds_kv_event_queue *)q)->popped, memory_order_relaxed);
}
