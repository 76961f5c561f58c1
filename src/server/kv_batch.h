/* kv_batch.h - one payload of KV events in vLLM's wire format (msgpack),
 * built from the engine's events (kv_events.h) as the publisher pops them.
 *
 * DESIGN NOTES
 * The payload is [timestamp, [events...], data parallel rank or nil]. Each
 * event is a map with "type" (vLLM's form since 2026) or, with array_format,
 * a positional array tagged by its first element (the older form); both
 * carry the fields in vLLM's order:
 *   BlockStored: block_hashes, parent_block_hash, token_ids, block_size,
 *     lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
 *     kv_cache_spec_sliding_window
 *   BlockRemoved: block_hashes, medium, group_idx
 *   AllBlocksCleared: nothing
 * Stored blocks that chain (each one's parent is the block before) become one
 * BlockStored with several hashes and all their tokens, as vLLM sends a
 * request's new blocks; consecutive removals become one BlockRemoved.
 * extra_keys holds, per block, the lowercase hex SHA-256 of each image with
 * tokens in it, or nil for a block without images (vLLM's per-block extra
 * keys, whose multimodal part is each image's hash).
 * A batch copies what it is given (a popped event's pointers live until the
 * next pop); its buffers grow to the largest batch and are reused. */
#ifndef DS_KV_BATCH_H
#define DS_KV_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kv_events.h"

typedef struct ds_kv_batch ds_kv_batch;

/* block_size: ds_engine_kv_block_size, stated in every BlockStored. NULL when out of memory. */
ds_kv_batch *ds_kv_batch_new(int array_format, int block_size);
void ds_kv_batch_free(ds_kv_batch *b);

/* Adds one event. Returns 0, or -1 when out of memory (the event is not in the batch). */
int ds_kv_batch_add(ds_kv_batch *b, const ds_kv_event *ev);
/* Engine events added since the last reset. */
int ds_kv_batch_count(const ds_kv_batch *b);
/* Bytes the payload will about take: the publisher sends a batch before it grows past its cap. */
size_t ds_kv_batch_bytes(const ds_kv_batch *b);

/* The payload: [ts, [events...], rank or nil] (rank < 0: nil); ts is the time of the first event
 * added. *out stays valid until the next call on b. Returns 0, or -1 when out of memory. */
int ds_kv_batch_encode(ds_kv_batch *b, int data_parallel_rank, const char **out, size_t *len);
/* Empties the batch for the next one. */
void ds_kv_batch_reset(ds_kv_batch *b);

#endif
