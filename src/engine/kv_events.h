/* kv_events.h - what the prefix cache tells a router about the prefixes a
 * request can resume from, queued for a publisher thread.
 *
 * DESIGN NOTES
 * A router (llm-d's endpoint picker, Dynamo's KV router) keeps an index of
 * which prefixes each replica holds, fed by BlockStored / BlockRemoved /
 * AllBlocksCleared events. For a hybrid model a KV page alone cannot be
 * resumed: the DeltaNet state after it is needed too. So an event block is
 * the unit at which this engine keeps checkpoints (ds_engine_kv_block_size),
 * and a block is announced only while a request could resume right after it.
 *   1. The engine thread pushes; one publisher thread pops. The queue is a
 *      single-producer single-consumer ring of bytes with atomic head and
 *      tail: neither side ever waits for the other.
 *   2. The ring's size is fixed when it is made. A push that does not fit is
 *      dropped and counted: the engine step never waits on the network.
 *   3. A popped event's pointers stay valid until the next pop. */
#ifndef DS_KV_EVENTS_H
#define DS_KV_EVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DS_KV_BLOCK_STORED = 1,
    DS_KV_BLOCK_REMOVED = 2,
    DS_KV_ALL_CLEARED = 3,
} ds_kv_event_type;

#define DS_KV_HASH_BYTES 32 /* an image's key in extra_keys: ds_image_hash, SHA-256 */

typedef struct {
    ds_kv_event_type type;
    double time;                /* unix seconds when the engine made the event */
    uint64_t hash;              /* stored, removed: the block's hash */
    int has_parent;             /* stored: 0 for a block at the start of a prompt */
    uint64_t parent_hash;       /* stored, with has_parent */
    int n_tokens;               /* stored: the block's tokens (ds_engine_kv_block_size of them) */
    const int32_t *tokens;      /* stored: token ids as the tokenizer gives them (an image's pads included) */
    int n_extra;                /* stored: the images having tokens in this block, in prompt order */
    const uint8_t (*extra)[DS_KV_HASH_BYTES];
} ds_kv_event;

typedef struct ds_kv_event_queue ds_kv_event_queue;

/* A ring of `bytes` bytes (rounded up to a power of two); NULL when out of memory. */
ds_kv_event_queue *ds_kv_event_queue_new(size_t bytes);
void ds_kv_event_queue_free(ds_kv_event_queue *q);

/* Producer side (one thread). Returns 1, or 0 when the event did not fit
 * and was dropped (counted). */
int ds_kv_event_push(ds_kv_event_queue *q, const ds_kv_event *ev);

/* Producer side: 1 when an event of n_tokens tokens and n_extra image
 * hashes would be pushed now (the consumer only makes more room). */
int ds_kv_event_fits(const ds_kv_event_queue *q, int n_tokens, int n_extra);

/* Consumer side (one thread). Returns 1 and fills *ev, or 0 when empty. */
int ds_kv_event_pop(ds_kv_event_queue *q, ds_kv_event *ev);

typedef struct {
    uint64_t pushed, dropped, popped;
} ds_kv_event_counts;

/* Any thread. */
void ds_kv_event_counts_get(const ds_kv_event_queue *q, ds_kv_event_counts *c);

#endif
