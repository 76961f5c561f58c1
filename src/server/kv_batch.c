/* kv_batch.c - see kv_batch.h.
 *
 * Finished events are packed at once into `events`; the last one stays open
 * in `run` while the next event may still extend it (a chained block, another
 * removal), and is packed when something else comes or the batch is encoded. */
#include "server/kv_batch.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ds_kv_event_type type;      /* 0: no open event */
    int has_parent;
    uint64_t parent;
    int block_tokens;           /* tokens of each block of a stored run (only equal blocks merge) */
    uint64_t *hashes;
    int *n_extra;               /* per block */
    size_t n_blocks, cap_blocks, cap_counts;
    int32_t *tokens;
    size_t n_tokens, cap_tokens;
    uint8_t (*extra)[DS_KV_HASH_BYTES];
    size_t n_extra_all, cap_extra;
} open_event;

struct ds_kv_batch {
    int array_format, block_size;
    int n_added;                /* engine events since the reset */
    double ts;                  /* the first one's time */
    uint32_t n_events;          /* packed into `events` */
    msgpack_sbuffer events, payload;
    msgpack_packer pk;          /* writes to `events` */
    open_event run;
};

ds_kv_batch *ds_kv_batch_new(int array_format, int block_size) {
    ds_kv_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->array_format = array_format;
    b->block_size = block_size;
    msgpack_sbuffer_init(&b->events);
    msgpack_sbuffer_init(&b->payload);
    msgpack_packer_init(&b->pk, &b->events, msgpack_sbuffer_write);
    return b;
}

void ds_kv_batch_free(ds_kv_batch *b) {
    if (!b) return;
    msgpack_sbuffer_destroy(&b->events);
    msgpack_sbuffer_destroy(&b->payload);
    free(b->run.hashes);
    free(b->run.n_extra);
    free(b->run.tokens);
    free(b->run.extra);
    free(b);
}

/* grows *p to hold `need` items of `size` bytes; 0, or -1 when out of memory */
static int reserve(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * size);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

/* a map key, or nothing in the array form (the position names the field) */
static int pack_key(ds_kv_batch *b, const char *key) { return b->array_format ? 0 : pack_str(&b->pk, key); }

static int pack_hashes(ds_kv_batch *b) {
    int r = msgpack_pack_array(&b->pk, b->run.n_blocks);
    for (size_t i = 0; i < b->run.n_blocks; i++) r |= msgpack_pack_uint64(&b->pk, b->run.hashes[i]);
    return r;
}

/* per block: nil, or the hex SHA-256 of each of its images */
static int pack_extra_keys(ds_kv_batch *b) {
    static const char HEX[] = "0123456789abcdef";
    int r = msgpack_pack_array(&b->pk, b->run.n_blocks);
    size_t at = 0;
    for (size_t i = 0; i < b->run.n_blocks; i++) {
        int n = b->run.n_extra[i];
        if (!n) {
            r |= msgpack_pack_nil(&b->pk);
            continue;
        }
        r |= msgpack_pack_array(&b->pk, (size_t)n);
        for (int k = 0; k < n; k++, at++) {
            char hex[2 * DS_KV_HASH_BYTES];
            for (int j = 0; j < DS_KV_HASH_BYTES; j++) {
                hex[2 * j] = HEX[b->run.extra[at][j] >> 4];
                hex[2 * j + 1] = HEX[b->run.extra[at][j] & 15];
            }
            r |= msgpack_pack_str(&b->pk, sizeof hex) | msgpack_pack_str_body(&b->pk, hex, sizeof hex);
        }
    }
    return r;
}

/* Packs the open event into `events` and closes it. 0, or -1 when out of memory. */
static int close_run(ds_kv_batch *b) {
    open_event *o = &b->run;
    msgpack_packer *pk = &b->pk;
    int r = 0;
    switch (o->type) {
    case DS_KV_BLOCK_STORED:
        r |= b->array_format ? msgpack_pack_array(pk, 12) : msgpack_pack_map(pk, 12);
        r |= pack_key(b, "type") | pack_str(pk, "BlockStored");
        r |= pack_key(b, "block_hashes") | pack_hashes(b);
        r |= pack_key(b, "parent_block_hash") | (o->has_parent ? msgpack_pack_uint64(pk, o->parent)
                                                               : msgpack_pack_nil(pk));
        r |= pack_key(b, "token_ids") | msgpack_pack_array(pk, o->n_tokens);
        for (size_t i = 0; i < o->n_tokens; i++) r |= msgpack_pack_int32(pk, o->tokens[i]);
        r |= pack_key(b, "block_size") | msgpack_pack_int(pk, b->block_size);
        r |= pack_key(b, "lora_id") | msgpack_pack_nil(pk);
        r |= pack_key(b, "medium") | msgpack_pack_nil(pk);
        r |= pack_key(b, "lora_name") | msgpack_pack_nil(pk);
        r |= pack_key(b, "extra_keys") | pack_extra_keys(b);
        r |= pack_key(b, "group_idx") | msgpack_pack_int(pk, 0);
        /* every layer's KV page is kept whole (no sliding window); the DeltaNet state is not a KV
         * group a router can index: a block is announced only where its checkpoint exists */
        r |= pack_key(b, "kv_cache_spec_kind") | pack_str(pk, "full_attention");
        r |= pack_key(b, "kv_cache_spec_sliding_window") | msgpack_pack_nil(pk);
        break;
    case DS_KV_BLOCK_REMOVED:
        r |= b->array_format ? msgpack_pack_array(pk, 4) : msgpack_pack_map(pk, 4);
        r |= pack_key(b, "type") | pack_str(pk, "BlockRemoved");
        r |= pack_key(b, "block_hashes") | pack_hashes(b);
        r |= pack_key(b, "medium") | msgpack_pack_nil(pk);
        r |= pack_key(b, "group_idx") | msgpack_pack_int(pk, 0);
        break;
    case DS_KV_ALL_CLEARED:
        r |= b->array_format ? msgpack_pack_array(pk, 1) : msgpack_pack_map(pk, 1);
        r |= pack_key(b, "type") | pack_str(pk, "AllBlocksCleared");
        break;
    default:
        return 0;
    }
    b->n_events++;
    o->type = 0;
    o->n_blocks = o->n_tokens = o->n_extra_all = 0;
    return r ? -1 : 0;
}

/* whether ev continues the open event */
static int extends(const ds_kv_batch *b, const ds_kv_event *ev) {
    const open_event *o = &b->run;
    if (ev->type != o->type) return 0;
    if (ev->type == DS_KV_BLOCK_REMOVED) return 1;
    return ev->type == DS_KV_BLOCK_STORED && ev->has_parent && ev->parent_hash == o->hashes[o->n_blocks - 1] &&
           ev->n_tokens == o->block_tokens;
}

int ds_kv_batch_add(ds_kv_batch *b, const ds_kv_event *ev) {
    open_event *o = &b->run;
    if (ev->type != DS_KV_BLOCK_STORED && ev->type != DS_KV_BLOCK_REMOVED && ev->type != DS_KV_ALL_CLEARED) return 0;
    int n_tok = ev->type == DS_KV_BLOCK_STORED ? ev->n_tokens : 0;
    int n_ext = ev->type == DS_KV_BLOCK_STORED ? ev->n_extra : 0;
    if (n_tok < 0 || n_ext < 0) return 0;
    if (!extends(b, ev) && close_run(b) != 0) return -1;
    if (reserve((void **)&o->hashes, &o->cap_blocks, o->n_blocks + 1, sizeof *o->hashes) ||
        reserve((void **)&o->n_extra, &o->cap_counts, o->n_blocks + 1, sizeof *o->n_extra))
        return -1;
    if (reserve((void **)&o->tokens, &o->cap_tokens, o->n_tokens + (size_t)n_tok, sizeof *o->tokens) ||
        reserve((void **)&o->extra, &o->cap_extra, o->n_extra_all + (size_t)n_ext, sizeof *o->extra))
        return -1;
    if (!o->type) {
        o->type = ev->type;
        o->has_parent = ev->has_parent;
        o->parent = ev->parent_hash;
        o->block_tokens = n_tok;
    }
    if (ev->type != DS_KV_ALL_CLEARED) {
        o->hashes[o->n_blocks] = ev->hash;
        o->n_extra[o->n_blocks] = n_ext;
        o->n_blocks++;
    }
    if (n_tok) memcpy(o->tokens + o->n_tokens, ev->tokens, (size_t)n_tok * sizeof *o->tokens);
    if (n_ext) memcpy(o->extra + o->n_extra_all, ev->extra, (size_t)n_ext * sizeof *o->extra);
    o->n_tokens += (size_t)n_tok;
    o->n_extra_all += (size_t)n_ext;
    if (!b->n_added++) b->ts = ev->time;
    /* a clear has nothing to merge with */
    if (ev->type == DS_KV_ALL_CLEARED && close_run(b) != 0) return -1;
    return 0;
}

int ds_kv_batch_count(const ds_kv_batch *b) { return b->n_added; }

size_t ds_kv_batch_bytes(const ds_kv_batch *b) {
    /* a token id packs into at most 5 bytes, an image's key into 66 */
    return b->events.size + b->run.n_blocks * 9 + b->run.n_tokens * 5 + b->run.n_extra_all * 66 + 64;
}

int ds_kv_batch_encode(ds_kv_batch *b, int data_parallel_rank, const char **out, size_t *len) {
    if (close_run(b) != 0) return -1;
    msgpack_sbuffer_clear(&b->payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b->payload, msgpack_sbuffer_write);
    int r = msgpack_pack_array(&pk, 3) | msgpack_pack_double(&pk, b->ts) | msgpack_pack_array(&pk, b->n_events);
    if (b->events.size) r |= msgpack_sbuffer_write(&b->payload, b->events.data, b->events.size);
    r |= data_parallel_rank >= 0 ? msgpack_pack_int(&pk, data_parallel_rank) : msgpack_pack_nil(&pk);
    if (r) return -1;
    *out = b->payload.data;
    *len = b->payload.size;
    return 0;
}

void ds_kv_batch_reset(ds_kv_batch *b) {
    msgpack_sbuffer_clear(&b->events);
    b->n_events = 0;
    b->n_added = 0;
    b->ts = 0;
    b->run.type = 0;
    b->run.n_blocks = b->run.n_tokens = b->run.n_extra_all = 0;
}
