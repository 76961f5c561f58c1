/* prefix_cache.h - reuse of computed prompt prefixes for attention KV and
 * DeltaNet state, which cannot be truncated.
 *
 * DESIGN NOTES
 * The cache is a trie of KV pages: every node is one full page of page_size
 * tokens under its parent, and holds a reference to the page whose KV it
 * names. A node may also hold a DeltaNet checkpoint: a state slot with the
 * recurrent state after the node's last token. A request can resume at the
 * deepest node of its prompt that has a checkpoint (or at any node when the
 * model has no DeltaNet layers), sharing the pages on the path and copying
 * the checkpoint into its own slot.
 *   1. A node is inserted only after its page's KV was written; pages in the
 *      trie are never written again (requests resume at page boundaries).
 *   2. The trie holds one reference to each node's page; requests hold their
 *      own. A page returns to the free pool when both are gone.
 *   3. Only leaves whose page no request holds can be evicted; checkpoints
 *      can be dropped from any node. Both go least recently used first.
 *   4. Node storage is allocated once (one node per KV page at most).
 * KV events (ds_prefix_events_on): a block of block_size tokens (a whole
 * number of pages) ends at every node whose depth is a multiple of it. The
 * block is announced to the router exactly while a request could resume
 * after it: its node holds a checkpoint (or the model needs none), the block
 * before it is announced, and its BlockStored went into the queue. Lookups
 * then resume only at announced blocks, so that the router's picture (the
 * events) predicts every hit.
 *   5. A BlockStored that does not fit in the queue is not pushed: the block
 *      stays unannounced (so unused) and is tried again at the next flush.
 *   6. A withdrawal (BlockRemoved) goes out the moment a block's checkpoint
 *      or page goes, with every announced block below it. One that the
 *      queue drops leaves the router wrong: nothing counts as announced until
 *      a flush has sent AllBlocksCleared and announced the blocks again.
 *   7. Eviction prefers what withdraws least: checkpoints no announced block
 *      uses, then announced blocks with no announced block below them; pages
 *      of unannounced leaves, then of announced ones. Least recently used
 *      first within each.
 *   8. Per node the real token ids and up to DS_PREFIX_PAGE_IMAGES image
 *      hashes are kept, allocated with the nodes; a block with a page
 *      touching more images is never announced (nor resumed from).
 * Runs on the engine thread only. */
#ifndef DS_PREFIX_CACHE_H
#define DS_PREFIX_CACHE_H

#include <stdint.h>

#include "common/status.h"
#include "engine/id_pool.h"
#include "engine/kv_events.h"

#define DS_PREFIX_PAGE_IMAGES 4 /* image hashes kept per page (KV events) */

typedef struct ds_prefix_cache ds_prefix_cache;

typedef struct {
    int64_t query_tokens, hit_tokens;  /* prompt tokens looked up, and reused */
    int64_t queries, hits;             /* lookups, and lookups that reused something */
    int64_t checkpoint_restores;
    int64_t evicted_pages, evicted_checkpoints;
    int nodes, checkpoints;
    int announced;                     /* blocks announced to the router (KV events) */
} ds_prefix_stats;

/* An image of an inserted prompt: tokens [first, first + n), its SHA-256. */
typedef struct {
    int first, n;
    const uint8_t *hash;
} ds_prefix_image;

/* What KV events need of an inserted prompt besides its cache keys. */
typedef struct {
    const int32_t *tokens;             /* the real token ids (an image's pads where the keys name the image) */
    const ds_prefix_image *images;     /* in prompt order */
    int n_images;
} ds_prefix_origin;

/* pages and ckpts are the engine's pools; the cache takes and drops references. */
ds_prefix_cache *ds_prefix_cache_new(int page_size, int max_nodes, ds_id_pool *pages, ds_id_pool *ckpts,
                                     int need_checkpoint);
void ds_prefix_cache_free(ds_prefix_cache *c);

/* Turns KV events on (before any insert): blocks of block_size tokens (a
 * multiple of page_size) are announced into q, AllBlocksCleared first.
 * Returns 0, or -1 when out of memory. */
int ds_prefix_events_on(ds_prefix_cache *c, ds_kv_event_queue *q, int block_size);
/* Sends what waits for room in the queue: AllBlocksCleared and every
 * announced block again after a dropped event, blocks deferred for room.
 * The engine calls it after each step. */
void ds_prefix_events_flush(ds_prefix_cache *c);
/* 1 while something waits for a flush. */
int ds_prefix_events_pending(const ds_prefix_cache *c);

/* Finds the longest reusable prefix of tokens[0..n) that leaves at least one
 * token to compute. Writes the page ids of that prefix to pages_out (each
 * with a new reference for the caller) and returns its length in tokens (a
 * multiple of page_size); *ckpt receives the checkpoint slot to copy from
 * (-1 when the model needs none or nothing is reused). */
int ds_prefix_lookup(ds_prefix_cache *c, const int32_t *tokens, int n, int32_t *pages_out, int *ckpt);

/* Records the full pages of tokens[0..n_pages*page_size) as computed into
 * pages[]. ckpt, if >= 0, is a checkpoint slot holding the state after
 * ckpt_pos tokens (a page multiple <= that length); the cache takes the
 * caller's reference to it, or drops it when the node already has one.
 * origin (needed with KV events, else may be NULL) gives the prompt's real
 * tokens and images. */
void ds_prefix_insert(ds_prefix_cache *c, const int32_t *tokens, int n_pages, const int32_t *pages, int ckpt,
                      int ckpt_pos, const ds_prefix_origin *origin);

/* Frees one page by evicting the least recently used evictable leaf;
 * returns 0 when nothing could be evicted. */
int ds_prefix_evict_page(ds_prefix_cache *c);
/* Drops the least recently used checkpoint; returns 0 when there is none. */
int ds_prefix_evict_checkpoint(ds_prefix_cache *c);

void ds_prefix_stats_get(const ds_prefix_cache *c, ds_prefix_stats *s);

/* Checks the trie's invariants (listed in prefix_cache.c) and adds one to
 * page_holds[page - pages->first] and ckpt_holds[slot - ckpts->first] for
 * each reference the trie holds, so that the engine can compare reference
 * counts with holders. DS_ECORRUPT names the first broken invariant. */
ds_status ds_prefix_check(ds_prefix_cache *c, int32_t *page_holds, int32_t *ckpt_holds, ds_err *e);

#endif
