/* test_kv_publisher.c - the KV events' wire format (kv_batch.h) decoded back
 * with msgpack-c's unpacker, field by field, in both forms; and the publisher
 * (kv_publisher.h) over real sockets: sequence numbers, replay and its end
 * marker, drops counted, a busy or bad endpoint refused. */
#include <msgpack.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "server/kv_batch.h"
#include "server/kv_publisher.h"
#include "testing.h"

#define BS 4   /* tokens per block in these tests */

static const char *const STORED_KEYS[12] = {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size",
                                            "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
                                            "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
static const char *const REMOVED_KEYS[4] = {"type", "block_hashes", "medium", "group_idx"};

static int32_t toks[8][BS];
static uint8_t img_a[DS_KV_HASH_BYTES], img_b[DS_KV_HASH_BYTES];
static uint8_t extra_ab[2][DS_KV_HASH_BYTES];

static ds_kv_event stored(uint64_t hash, int has_parent, uint64_t parent, int i, int n_extra,
                          const uint8_t (*extra)[DS_KV_HASH_BYTES]) {
    for (int k = 0; k < BS; k++) toks[i][k] = 1000 * (i + 1) + k;
    return (ds_kv_event){.type = DS_KV_BLOCK_STORED, .time = 1700000000.25 + i, .hash = hash,
                         .has_parent = has_parent, .parent_hash = parent, .n_tokens = BS, .tokens = toks[i],
                         .n_extra = n_extra, .extra = extra};
}

static ds_kv_event removed(uint64_t hash) { return (ds_kv_event){.type = DS_KV_BLOCK_REMOVED, .time = 5, .hash = hash}; }
static ds_kv_event cleared(void) { return (ds_kv_event){.type = DS_KV_ALL_CLEARED, .time = 1700000000.25}; }

/* The events of the encoding tests: a clear, a chain of three blocks from the prompt's start (the
 * second with two images), a block whose parent is elsewhere, a block of the wrong size, two removals. */
static int fill(ds_kv_batch *b) {
    memset(img_a, 0xab, sizeof img_a);
    for (int i = 0; i < DS_KV_HASH_BYTES; i++) img_b[i] = (uint8_t)i;
    memcpy(extra_ab[0], img_a, sizeof img_a);
    memcpy(extra_ab[1], img_b, sizeof img_b);
    ds_kv_event ev[8];
    int n = 0;
    ev[n++] = cleared();
    ev[n++] = stored(0x1111, 0, 0, 0, 0, NULL);
    ev[n++] = stored(0xfedcba9876543210ull, 1, 0x1111, 1, 2, (const uint8_t (*)[DS_KV_HASH_BYTES])extra_ab);
    ev[n++] = stored(0x3333, 1, 0xfedcba9876543210ull, 2, 1, (const uint8_t (*)[DS_KV_HASH_BYTES])extra_ab + 1);
    ev[n++] = stored(0x4444, 1, 0x9999, 3, 0, NULL);
    ds_kv_event odd = stored(0x5555, 1, 0x4444, 4, 0, NULL);
    odd.n_tokens = BS - 1;   /* a short block does not join the chain */
    ev[n++] = odd;
    ev[n++] = removed(0x3333);
    ev[n++] = removed(0xfedcba9876543210ull);
    for (int i = 0; i < n; i++)
        if (ds_kv_batch_add(b, &ev[i]) != 0) return -1;
    return n;
}

static int is_str(const msgpack_object *o, const char *s) {
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static int is_uint(const msgpack_object *o, uint64_t v) {
    return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 == v;
}

/* field i of an event: by position in the array form; in the map form the key must stand at position i */
static const msgpack_object *field(const msgpack_object *ev, int array_format, int i, const char *const *keys) {
    if (array_format) return ev->type == MSGPACK_OBJECT_ARRAY && (uint32_t)i < ev->via.array.size ? &ev->via.array.ptr[i] : NULL;
    if (ev->type != MSGPACK_OBJECT_MAP || (uint32_t)i >= ev->via.map.size) return NULL;
    return is_str(&ev->via.map.ptr[i].key, keys[i]) ? &ev->via.map.ptr[i].val : NULL;
}

static int n_fields(const msgpack_object *ev) {
    if (ev->type == MSGPACK_OBJECT_ARRAY) return (int)ev->via.array.size;
    return ev->type == MSGPACK_OBJECT_MAP ? (int)ev->via.map.size : -1;
}

static void hex_of(const uint8_t *h, char *out) {
    for (int i = 0; i < DS_KV_HASH_BYTES; i++) sprintf(out + 2 * i, "%02x", h[i]);
}

static int uints_are(const msgpack_object *o, const uint64_t *v, uint32_t n) {
    if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n) return 0;
    for (uint32_t i = 0; i < n; i++)
        if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.array.ptr[i].via.u64 != v[i]) return 0;
    return 1;
}

static void check_stored(const msgpack_object *ev, int af, const uint64_t *hashes, uint32_t n_blocks, int has_parent,
                         uint64_t parent, int first_tok, int n_tok) {
    CHECK(n_fields(ev) == 12, "BlockStored has %d fields", n_fields(ev));
    const msgpack_object *f[12];
    for (int i = 0; i < 12; i++) {
        f[i] = field(ev, af, i, STORED_KEYS);
        REQUIRE(f[i], "field %d (%s) missing or out of place", i, STORED_KEYS[i]);
    }
    CHECK(is_str(f[0], "BlockStored"), "type");
    CHECK(uints_are(f[1], hashes, n_blocks), "block_hashes");
    CHECK(has_parent ? f[2]->type == MSGPACK_OBJECT_POSITIVE_INTEGER && f[2]->via.u64 == parent
                     : f[2]->type == MSGPACK_OBJECT_NIL, "parent_block_hash");
    REQUIRE(f[3]->type == MSGPACK_OBJECT_ARRAY && f[3]->via.array.size == (uint32_t)n_tok, "token_ids: %u",
            f[3]->via.array.size);
    for (int i = 0; i < n_tok; i++) {
        int blk = first_tok + i / BS, k = i % BS;
        CHECK(is_uint(&f[3]->via.array.ptr[i], (uint64_t)(1000 * (blk + 1) + k)), "token %d", i);
    }
    CHECK(is_uint(f[4], BS), "block_size");
    CHECK(f[5]->type == MSGPACK_OBJECT_NIL && f[6]->type == MSGPACK_OBJECT_NIL && f[7]->type == MSGPACK_OBJECT_NIL,
          "lora_id, medium, lora_name are nil");
    REQUIRE(f[8]->type == MSGPACK_OBJECT_ARRAY && f[8]->via.array.size == n_blocks, "extra_keys: one per block");
    CHECK(f[9]->type == MSGPACK_OBJECT_POSITIVE_INTEGER && f[9]->via.u64 == 0, "group_idx 0");
    CHECK(is_str(f[10], "full_attention"), "kv_cache_spec_kind");
    CHECK(f[11]->type == MSGPACK_OBJECT_NIL, "kv_cache_spec_sliding_window nil");
}

static void check_payload(const char *data, size_t len, int af, int rank) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    REQUIRE(msgpack_unpack_next(&u, data, len, &off) == MSGPACK_UNPACK_SUCCESS, "payload does not unpack");
    CHECK(off == len, "payload has %zu trailing bytes", len - off);
    const msgpack_object *top = &u.data;
    if (top->type != MSGPACK_OBJECT_ARRAY || top->via.array.size != 3) {
        CHECK(0, "payload is not [ts, events, rank]");
        msgpack_unpacked_destroy(&u);
        return;
    }
    const msgpack_object *ts = &top->via.array.ptr[0], *evs = &top->via.array.ptr[1], *rk = &top->via.array.ptr[2];
    CHECK(ts->type == MSGPACK_OBJECT_FLOAT64 && ts->via.f64 == 1700000000.25, "ts: the first event's time");
    CHECK(rank < 0 ? rk->type == MSGPACK_OBJECT_NIL : is_uint(rk, (uint64_t)rank), "data_parallel_rank");
    if (evs->type != MSGPACK_OBJECT_ARRAY || evs->via.array.size != 5) {
        CHECK(0, "events: want 5 (clear, a chain of 3, a lone block, a short block, the removals), got %u",
              evs->type == MSGPACK_OBJECT_ARRAY ? evs->via.array.size : 0);
        msgpack_unpacked_destroy(&u);
        return;
    }
    const msgpack_object *e = evs->via.array.ptr;
    CHECK(n_fields(&e[0]) == 1 && field(&e[0], af, 0, STORED_KEYS) && is_str(field(&e[0], af, 0, STORED_KEYS),
                                                                             "AllBlocksCleared"),
          "AllBlocksCleared");
    /* the chain: three hashes, the first block's (nil) parent, twelve tokens, extra keys per block */
    uint64_t chain[3] = {0x1111, 0xfedcba9876543210ull, 0x3333};
    check_stored(&e[1], af, chain, 3, 0, 0, 0, 3 * BS);
    const msgpack_object *ek = field(&e[1], af, 8, STORED_KEYS);
    if (ek && ek->type == MSGPACK_OBJECT_ARRAY && ek->via.array.size == 3) {
        char ha[65], hb[65];
        hex_of(img_a, ha);
        hex_of(img_b, hb);
        const msgpack_object *k = ek->via.array.ptr;
        CHECK(k[0].type == MSGPACK_OBJECT_NIL, "a block without images: nil");
        CHECK(k[1].type == MSGPACK_OBJECT_ARRAY && k[1].via.array.size == 2 && is_str(&k[1].via.array.ptr[0], ha) &&
                  is_str(&k[1].via.array.ptr[1], hb), "two images' SHA-256 in lowercase hex, in order");
        CHECK(k[2].type == MSGPACK_OBJECT_ARRAY && k[2].via.array.size == 1 && is_str(&k[2].via.array.ptr[0], hb),
              "one image");
    }
    uint64_t lone = 0x4444, shortb = 0x5555;
    check_stored(&e[2], af, &lone, 1, 1, 0x9999, 3, BS);
    /* the short block keeps its own event (its tokens are its own: 3) */
    const msgpack_object *sh = field(&e[3], af, 1, STORED_KEYS), *st = field(&e[3], af, 3, STORED_KEYS);
    CHECK(uints_are(sh, &shortb, 1) && st && st->type == MSGPACK_OBJECT_ARRAY && st->via.array.size == BS - 1,
          "a block of another size is not merged");
    CHECK(n_fields(&e[4]) == 4, "BlockRemoved has %d fields", n_fields(&e[4]));
    const msgpack_object *r[4];
    for (int i = 0; i < 4; i++) r[i] = field(&e[4], af, i, REMOVED_KEYS);
    uint64_t gone[2] = {0x3333, 0xfedcba9876543210ull};
    CHECK(r[0] && is_str(r[0], "BlockRemoved"), "type");
    CHECK(r[1] && uints_are(r[1], gone, 2), "both removals in one event, in order");
    CHECK(r[2] && r[2]->type == MSGPACK_OBJECT_NIL, "medium nil");
    CHECK(r[3] && r[3]->type == MSGPACK_OBJECT_POSITIVE_INTEGER && r[3]->via.u64 == 0, "group_idx 0");
    msgpack_unpacked_destroy(&u);
}

static void encode_map(void) {
    ds_kv_batch *b = ds_kv_batch_new(0, BS);
    REQUIRE(b, "new");
    CHECK(fill(b) == 8 && ds_kv_batch_count(b) == 8, "eight events added");
    const char *data;
    size_t len;
    REQUIRE(ds_kv_batch_encode(b, 3, &data, &len) == 0, "encode");
    CHECK(ds_kv_batch_bytes(b) >= len / 2, "the size estimate is of the right order");
    check_payload(data, len, 0, 3);
    /* a reset batch starts over: the same events give the same bytes */
    char *first = malloc(len);
    memcpy(first, data, len);
    size_t first_len = len;
    ds_kv_batch_reset(b);
    CHECK(ds_kv_batch_count(b) == 0, "reset");
    fill(b);
    REQUIRE(ds_kv_batch_encode(b, 3, &data, &len) == 0, "encode again");
    CHECK(len == first_len && !memcmp(first, data, len), "the same events, the same payload");
    free(first);
    ds_kv_batch_free(b);
}

static void encode_array(void) {
    ds_kv_batch *b = ds_kv_batch_new(1, BS);
    REQUIRE(b, "new");
    CHECK(fill(b) == 8, "eight events added");
    const char *data;
    size_t len;
    REQUIRE(ds_kv_batch_encode(b, -1, &data, &len) == 0, "encode");
    check_payload(data, len, 1, -1);
    ds_kv_batch_free(b);
}

static void encode_empty(void) {
    ds_kv_batch *b = ds_kv_batch_new(0, BS);
    const char *data;
    size_t len;
    REQUIRE(ds_kv_batch_encode(b, -1, &data, &len) == 0, "encode");
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&u, data, len, &off) == MSGPACK_UNPACK_SUCCESS && u.data.type == MSGPACK_OBJECT_ARRAY &&
              u.data.via.array.size == 3 && u.data.via.array.ptr[1].type == MSGPACK_OBJECT_ARRAY &&
              u.data.via.array.ptr[1].via.array.size == 0, "no events: [ts, [], nil]");
    msgpack_unpacked_destroy(&u);
    ds_kv_batch_free(b);
}

/* --- the publisher over sockets --- */

static void nap(void) {
    struct timespec t = {.tv_nsec = 10 * 1000000L};
    nanosleep(&t, NULL);
}

/* waits (at most ~20 s) until the publisher has sent n events */
static int wait_sent(ds_kv_publisher *p, uint64_t n) {
    for (int i = 0; i < 2000; i++) {
        ds_kv_publisher_stats s;
        ds_kv_publisher_stats_get(p, &s);
        if (s.events_sent >= n) return 1;
        nap();
    }
    return 0;
}

static uint64_t be64(const void *d) {
    const unsigned char *b = d;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | b[i];
    return v;
}

/* receives one multipart message of at most max parts (ms: poll limit); returns the parts */
static int recv_parts(void *sock, zmq_msg_t *parts, int max, int ms) {
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, ms) <= 0) return 0;
    int n = 0, more = 1;
    while (more && n < max) {
        zmq_msg_init(&parts[n]);
        if (zmq_msg_recv(&parts[n], sock, 0) < 0) return n;
        more = zmq_msg_more(&parts[n]);
        n++;
    }
    return n;
}

static void close_parts(zmq_msg_t *parts, int n) {
    for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
}

/* sends a replay request from `start` and collects the answer, each [topic, seq, payload] after the
 * empty frame; returns the batches before the end marker ["", -1, ""], or -1 for anything else */
static int replay(void *dealer, const char *topic, uint64_t start, uint64_t *seqs, int max) {
    unsigned char s8[8];
    for (int i = 0; i < 8; i++) s8[i] = (unsigned char)(start >> (56 - 8 * i));
    zmq_send(dealer, "", 0, ZMQ_SNDMORE);
    zmq_send(dealer, s8, 8, 0);
    int n = 0;
    for (;;) {
        zmq_msg_t m[5];
        int k = recv_parts(dealer, m, 5, 20000);
        if (k != 4 || zmq_msg_size(&m[0]) != 0 || zmq_msg_size(&m[2]) != 8) {
            close_parts(m, k);
            return -1;
        }
        uint64_t seq = be64(zmq_msg_data(&m[2]));
        size_t topic_len = zmq_msg_size(&m[1]), len = zmq_msg_size(&m[3]);
        int topic_ok = topic_len == strlen(topic) && !memcmp(zmq_msg_data(&m[1]), topic, topic_len);
        close_parts(m, k);
        if (seq == UINT64_MAX) return len == 0 && topic_len == 0 ? n : -1;   /* the end: "", seq -1, "" */
        if (!topic_ok) return -1;
        if (n < max) seqs[n] = seq;
        n++;
    }
}

static void publisher_flow(void) {
    ds_kv_event_queue *q = ds_kv_event_queue_new(1 << 16);
    ds_kv_publisher_params p = {.endpoint = "tcp://127.0.0.1:*", .replay_endpoint = "tcp://127.0.0.1:*",
                                .topic = "kv@10.0.0.7:8080@tiny", .data_parallel_rank = -1, .block_size = BS,
                                .replay_batches = 3};
    ds_kv_publisher *pub = NULL;
    ds_err e = {0};
    REQUIRE(ds_kv_publisher_start(q, &p, &pub, &e) == DS_OK, "start: %s", e.msg);
    CHECK(!strncmp(ds_kv_publisher_endpoint(pub, 0), "tcp://127.0.0.1:", 16) &&
              strcmp(ds_kv_publisher_endpoint(pub, 0), "tcp://127.0.0.1:*"), "the bound port is known: %s",
          ds_kv_publisher_endpoint(pub, 0));
    void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB), *dealer = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3);
    zmq_connect(sub, ds_kv_publisher_endpoint(pub, 0));
    zmq_connect(dealer, ds_kv_publisher_endpoint(pub, 1));
    /* a subscription reaches the PUB socket some time after the connect: clears go out one at a time
     * until the subscriber has one (each its own batch), and the rest of them are read off */
    uint64_t pushed = 0, last = 0;
    int got = 0;
    while (!got && pushed < 2000) {
        ds_kv_event c = cleared();
        ds_kv_event_push(q, &c);
        pushed++;
        wait_sent(pub, pushed);
        zmq_msg_t m[4];
        int k = recv_parts(sub, m, 4, 10);
        if (k == 3) {
            got = 1;
            last = be64(zmq_msg_data(&m[1]));
            CHECK(zmq_msg_size(&m[0]) == strlen(p.topic) && !memcmp(zmq_msg_data(&m[0]), p.topic, strlen(p.topic)),
                  "topic frame");
            CHECK(zmq_msg_size(&m[1]) == 8, "an 8-byte sequence number");
        }
        close_parts(m, k);
    }
    REQUIRE(got, "the subscriber got nothing from %llu batches", (unsigned long long)pushed);
    ds_kv_publisher_stats s;
    ds_kv_publisher_stats_get(pub, &s);
    while (last + 1 < s.batches_sent) {
        zmq_msg_t m[4];
        int k = recv_parts(sub, m, 4, 20000);
        REQUIRE(k == 3, "a frame missing");
        uint64_t seq = be64(zmq_msg_data(&m[1]));
        CHECK(seq == last + 1, "sequence %llu after %llu", (unsigned long long)seq, (unsigned long long)last);
        last = seq;
        close_parts(m, k);
    }
    CHECK(s.batches_sent == pushed, "one clear per batch: %llu batches for %llu", (unsigned long long)s.batches_sent,
          (unsigned long long)pushed);
    /* the encoding tests' events, pushed at once: however the thread cuts them into batches, every
     * one arrives, in order, with consecutive sequence numbers */
    ds_kv_batch *scratch = ds_kv_batch_new(0, BS);
    fill(scratch);   /* sets the images */
    ds_kv_batch_free(scratch);
    ds_kv_event evs[3] = {stored(0x1111, 0, 0, 0, 0, NULL), stored(0x2222, 1, 0x1111, 1, 0, NULL), removed(0x2222)};
    for (int i = 0; i < 3; i++) CHECK(ds_kv_event_push(q, &evs[i]), "push");
    REQUIRE(wait_sent(pub, pushed + 3), "sent");
    ds_kv_publisher_stats_get(pub, &s);
    int n_hashes = 0;
    while (last + 1 < s.batches_sent) {
        zmq_msg_t m[4];
        int k = recv_parts(sub, m, 4, 20000);
        REQUIRE(k == 3, "a frame missing");
        uint64_t seq = be64(zmq_msg_data(&m[1]));
        CHECK(seq == last + 1, "sequence %llu after %llu", (unsigned long long)seq, (unsigned long long)last);
        last = seq;
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        if (msgpack_unpack_next(&u, zmq_msg_data(&m[2]), zmq_msg_size(&m[2]), &off) == MSGPACK_UNPACK_SUCCESS &&
            u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 3 &&
            u.data.via.array.ptr[1].type == MSGPACK_OBJECT_ARRAY) {
            const msgpack_object *ev = &u.data.via.array.ptr[1];
            for (uint32_t i = 0; i < ev->via.array.size; i++) {
                const msgpack_object *h = field(&ev->via.array.ptr[i], 0, 1, STORED_KEYS);
                if (h && h->type == MSGPACK_OBJECT_ARRAY) n_hashes += (int)h->via.array.size;
            }
        } else CHECK(0, "payload of batch %llu", (unsigned long long)seq);
        msgpack_unpacked_destroy(&u);
        close_parts(m, k);
    }
    CHECK(n_hashes == 3, "three block hashes arrived, got %d", n_hashes);
    /* four more batches, one clear each: more than replay keeps */
    for (int i = 0; i < 4; i++) {
        ds_kv_event c = cleared();
        ds_kv_event_push(q, &c);
        REQUIRE(wait_sent(pub, pushed + 4 + (uint64_t)i), "sent");
    }
    ds_kv_publisher_stats_get(pub, &s);
    CHECK(s.batches_sent >= 6, "batches %llu", (unsigned long long)s.batches_sent);
    /* replay keeps the last 3 batches: from 0 it answers those, then the end marker */
    uint64_t seqs[8];
    int n = replay(dealer, p.topic, 0, seqs, 8);
    CHECK(n == 3 && seqs[0] == s.batches_sent - 3 && seqs[2] == s.batches_sent - 1,
          "replay from 0: the last three batches (%d)", n);
    n = replay(dealer, p.topic, s.batches_sent - 1, seqs, 8);
    CHECK(n == 1 && seqs[0] == s.batches_sent - 1, "replay from the last: one batch (%d)", n);
    n = replay(dealer, p.topic, s.batches_sent + 5, seqs, 8);
    CHECK(n == 0, "replay from the future: only the end marker (%d)", n);
    /* a malformed request gets nothing; the next good one is still answered */
    zmq_send(dealer, "", 0, ZMQ_SNDMORE);
    zmq_send(dealer, "abc", 3, 0);
    n = replay(dealer, p.topic, s.batches_sent - 1, seqs, 8);
    CHECK(n == 1, "after a malformed request (%d)", n);
    while (last + 1 < s.batches_sent) {   /* the subscriber reads the clears off */
        zmq_msg_t m[4];
        int k = recv_parts(sub, m, 4, 20000);
        REQUIRE(k == 3, "a frame missing");
        last = be64(zmq_msg_data(&m[1]));
        close_parts(m, k);
    }
    /* events queued at the stop still go out */
    for (int i = 0; i < 3; i++) ds_kv_event_push(q, &evs[i]);
    ds_kv_publisher_stop(pub);
    zmq_msg_t m[4];
    int k = recv_parts(sub, m, 4, 20000);
    CHECK(k == 3 && be64(zmq_msg_data(&m[1])) == s.batches_sent, "the events queued at the stop were sent");
    close_parts(m, k);
    int zero = 0;
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(sub);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
    ds_kv_event_queue_free(q);
}

static void drops_counted(void) {
    ds_kv_event_queue *q = ds_kv_event_queue_new(4096);
    ds_kv_publisher_params p = {.endpoint = "tcp://127.0.0.1:*", .topic = "t", .data_parallel_rank = 0,
                                .block_size = BS};
    ds_kv_publisher *pub = NULL;
    ds_err e = {0};
    REQUIRE(ds_kv_publisher_start(q, &p, &pub, &e) == DS_OK, "start: %s", e.msg);
    static int32_t big[2048];
    ds_kv_event ev = {.type = DS_KV_BLOCK_STORED, .hash = 1, .n_tokens = 2048, .tokens = big};
    CHECK(!ds_kv_event_push(q, &ev), "an event larger than half the ring does not fit");
    ds_kv_event c = cleared();
    ds_kv_event_push(q, &c);
    CHECK(wait_sent(pub, 1), "the clear was sent");
    ds_kv_publisher_stats s;
    ds_kv_publisher_stats_get(pub, &s);
    CHECK(s.events_dropped == 1 && s.events_sent == 1 && s.batches_sent == 1, "dropped %llu sent %llu batches %llu",
          (unsigned long long)s.events_dropped, (unsigned long long)s.events_sent, (unsigned long long)s.batches_sent);
    ds_kv_publisher_stop(pub);
    ds_kv_event_queue_free(q);
}

static void refused_endpoints(void) {
    ds_kv_event_queue *q = ds_kv_event_queue_new(4096);
    ds_kv_publisher_params p = {.endpoint = "tcp://*:*", .topic = "t", .data_parallel_rank = -1, .block_size = BS};
    ds_kv_publisher *a = NULL, *b = NULL;
    ds_err e = {0};
    REQUIRE(ds_kv_publisher_start(q, &p, &a, &e) == DS_OK, "start: %s", e.msg);
    const char *bound = ds_kv_publisher_endpoint(a, 0);
    char busy[128];
    snprintf(busy, sizeof busy, "tcp://*:%s", strrchr(bound, ':') + 1);
    p.endpoint = busy;
    CHECK(ds_kv_publisher_start(q, &p, &b, &e) != DS_OK && !b, "a busy port is refused");
    CHECK(strstr(e.msg, busy) && strstr(e.msg, "in use"), "the message names the endpoint and the reason: %s", e.msg);
    p.endpoint = "tcp://*:not-a-port";
    CHECK(ds_kv_publisher_start(q, &p, &b, &e) != DS_OK && strstr(e.msg, "tcp://*:not-a-port"), "bad port: %s", e.msg);
    p.endpoint = "nonsense";
    CHECK(ds_kv_publisher_start(q, &p, &b, &e) != DS_OK && strstr(e.msg, "nonsense"), "no transport: %s", e.msg);
    p.endpoint = "tcp://127.0.0.1:*";
    p.replay_endpoint = busy;
    CHECK(ds_kv_publisher_start(q, &p, &b, &e) != DS_OK && strstr(e.msg, "--kv-events-replay-endpoint") &&
              strstr(e.msg, busy), "a busy replay port: %s", e.msg);
    ds_kv_publisher_stop(a);
    ds_kv_event_queue_free(q);
}

int main(void) {
    RUN(encode_map);
    RUN(encode_array);
    RUN(encode_empty);
    RUN(publisher_flow);
    RUN(drops_counted);
    RUN(refused_endpoints);
    return ds_test_finish();
}
