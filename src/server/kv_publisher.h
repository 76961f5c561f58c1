/* kv_publisher.h - the thread that sends the engine's KV events to routers
 * over ZeroMQ, in vLLM's wire format.
 *
 * DESIGN NOTES
 * Frames on the PUB socket: [topic, sequence (8 bytes, big-endian),
 * msgpack payload]; the payload is [timestamp, [events...], data parallel
 * rank or nil]. Each event is a map with "type" (vLLM's form since 2026), or
 * a tagged positional array (the older form, array_format). A replay ROUTER
 * socket answers [id, "", start sequence] with the batches it still holds
 * from that sequence on, each [id, "", topic, sequence, payload], then the
 * end marker [id, "", "", -1, ""]. The thread pops the engine's queue (kv_events.h);
 * it never makes the engine wait. */
#ifndef DS_KV_PUBLISHER_H
#define DS_KV_PUBLISHER_H

#include <stdint.h>

#include "common/status.h"
#include "engine/kv_events.h"

typedef struct {
    const char *endpoint;         /* PUB socket to bind, e.g. "tcp://0.0.0.0:5557" (always bound, as vLLM
                                   * does now: subscribers connect to the worker) */
    const char *replay_endpoint;  /* ROUTER socket to bind; NULL: no replay */
    const char *topic;            /* "kv@<host>:<port>@<model>" */
    int array_format;             /* 1: the older positional arrays */
    int data_parallel_rank;       /* < 0: nil */
    int block_size;               /* ds_engine_kv_block_size, in every BlockStored */
    int replay_batches;           /* batches kept for replay */
} ds_kv_publisher_params;

typedef struct ds_kv_publisher ds_kv_publisher;

typedef struct {
    uint64_t events_queued;       /* pushed into the queue by the engine (ds_kv_event_counts.pushed) */
    uint64_t batches_sent;        /* payloads sent; the last one's sequence number is batches_sent - 1 */
    uint64_t events_sent;         /* the engine's events (before chained blocks are merged) */
    uint64_t events_dropped;      /* pushed to a full queue (ds_kv_event_counts.dropped), or lost to
                                   * the publisher running out of memory */
} ds_kv_publisher_stats;

/* Binds the sockets and starts the thread; a bad or busy endpoint fails here,
 * naming it and zmq's reason. */
ds_status ds_kv_publisher_start(ds_kv_event_queue *q, const ds_kv_publisher_params *p, ds_kv_publisher **out,
                                ds_err *e);
/* Sends what is still queued, then stops the thread and closes the sockets. */
void ds_kv_publisher_stop(ds_kv_publisher *pub);
/* Any thread. Once events_sent == events_queued, every event the engine queued has gone out,
 * the last one in batch batches_sent - 1 (the sequence is counted first). */
void ds_kv_publisher_stats_get(ds_kv_publisher *pub, ds_kv_publisher_stats *s);
/* The PUB socket's endpoint (replay 0) or the replay socket's (1, "" without one) as bound, a "*"
 * port resolved (zmq's "tcp://127.0.0.1:*" binds any free port). */
const char *ds_kv_publisher_endpoint(const ds_kv_publisher *pub, int replay);

#endif
