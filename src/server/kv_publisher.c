/* kv_publisher.c - see kv_publisher.h.
 *
 * One thread owns both sockets (a ZeroMQ socket belongs to one thread). Each
 * turn it waits on the replay socket for at most POLL_MS, answers a replay
 * request if one came, then pops everything the engine queued (up to a batch's
 * cap) and sends it as one payload. The engine never waits: it only pushes to
 * the ring (kv_events.h), and a PUB socket drops, rather than blocks, for a
 * subscriber that falls past its high-water mark.
 *
 * Replay keeps the last replay_batches payloads, at most REPLAY_BYTES in all,
 * in a fixed ring; a request [id, "", start] is answered as vLLM's publisher
 * answers it today (and llm-d's subscriber requires): every kept batch from
 * `start` on as [id, "", topic, seq, payload], then the end marker
 * [id, "", "", seq -1, ""]. (Older vLLM sent [id, "", seq, payload].) */
#include "server/kv_publisher.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "server/kv_batch.h"

#define POLL_MS 5                       /* how long the thread waits before it looks at the queue again */
#define SEND_HWM 100000                 /* messages a slow subscriber may fall behind (vLLM's default) */
#define BATCH_BYTES ((size_t)1 << 20)   /* a batch is sent once it grows past this */
#define REPLAY_BYTES ((size_t)64 << 20) /* payloads kept for replay, at most */
#define STOP_LINGER_MS 1000             /* at the stop, how long the last batches may take to leave */

typedef struct {
    uint64_t seq;
    char *data;
    size_t len;
} kept_batch;

struct ds_kv_publisher {
    ds_kv_event_queue *q;
    char *topic;
    int rank;
    void *ctx, *pub, *replay;
    ds_kv_batch *batch;
    kept_batch *kept;           /* ring of replay_batches */
    int n_kept_max, kept_first, n_kept;
    size_t kept_bytes;
    char pub_endpoint[256], replay_endpoint[256];   /* as bound: a "*" port resolved */
    pthread_t thread;
    atomic_int stop;
    _Atomic uint64_t batches_sent, events_sent, events_lost;
};

static void put_be64(unsigned char out[8], uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) out[i] = (unsigned char)(v & 0xff);
}

static uint64_t get_be64(const unsigned char in[8]) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | in[i];
    return v;
}

static void keep_for_replay(ds_kv_publisher *p, uint64_t seq, const char *data, size_t len) {
    if (!p->replay || !p->n_kept_max || len > REPLAY_BYTES) return;
    while (p->n_kept && (p->n_kept == p->n_kept_max || p->kept_bytes + len > REPLAY_BYTES)) {
        kept_batch *old = &p->kept[p->kept_first];
        p->kept_bytes -= old->len;
        free(old->data);
        old->data = NULL;
        p->kept_first = (p->kept_first + 1) % p->n_kept_max;
        p->n_kept--;
    }
    char *copy = malloc(len ? len : 1);
    if (!copy) return;   /* the batch was sent; only its replay is lost */
    memcpy(copy, data, len);
    kept_batch *k = &p->kept[(p->kept_first + p->n_kept) % p->n_kept_max];
    *k = (kept_batch){.seq = seq, .data = copy, .len = len};
    p->n_kept++;
    p->kept_bytes += len;
}

/* Sends the batch (if it holds anything) with the next sequence number. */
static void send_batch(ds_kv_publisher *p) {
    int n = ds_kv_batch_count(p->batch);
    if (!n) return;
    const char *payload;
    size_t len;
    if (ds_kv_batch_encode(p->batch, p->rank, &payload, &len) != 0) {
        atomic_fetch_add(&p->events_lost, (uint64_t)n);
        ds_kv_batch_reset(p->batch);
        return;
    }
    uint64_t seq = atomic_load(&p->batches_sent);
    unsigned char seq_be[8];
    put_be64(seq_be, seq);
    /* a PUB socket never blocks: past the high-water mark it drops the message for that subscriber */
    zmq_send(p->pub, p->topic, strlen(p->topic), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, seq_be, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, payload, len, ZMQ_DONTWAIT);
    keep_for_replay(p, seq, payload, len);
    /* the sequence first: whoever sees every queued event sent (stats) sees the last sequence too */
    atomic_store(&p->batches_sent, seq + 1);
    atomic_fetch_add(&p->events_sent, (uint64_t)n);
    ds_kv_batch_reset(p->batch);
}

/* Pops what is queued into batches and sends them. */
static void drain(ds_kv_publisher *p) {
    ds_kv_event ev;
    while (ds_kv_event_pop(p->q, &ev)) {
        if (ds_kv_batch_add(p->batch, &ev) != 0) {
            /* out of memory: send what the batch holds, then try this event alone */
            send_batch(p);
            if (ds_kv_batch_add(p->batch, &ev) != 0) atomic_fetch_add(&p->events_lost, 1);
        }
        if (ds_kv_batch_bytes(p->batch) >= BATCH_BYTES) send_batch(p);
    }
    send_batch(p);
}

/* One replay request: [id, "", start (8 bytes, big-endian)]; anything else is read and ignored. */
static void serve_replay(ds_kv_publisher *p) {
    zmq_msg_t part[3];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->replay, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 3) part[n++] = m;
        else {
            zmq_msg_close(&m);
            n = 4;   /* too many parts */
        }
    }
    int ok = n == 3 && zmq_msg_size(&part[1]) == 0 && zmq_msg_size(&part[2]) == 8;
    if (ok) {
        uint64_t start = get_be64(zmq_msg_data(&part[2]));
        const void *id = zmq_msg_data(&part[0]);
        size_t id_len = zmq_msg_size(&part[0]);
        unsigned char seq_be[8];
        size_t topic_len = strlen(p->topic);
        for (int i = 0; i < p->n_kept; i++) {
            const kept_batch *k = &p->kept[(p->kept_first + i) % p->n_kept_max];
            if (k->seq < start) continue;
            put_be64(seq_be, k->seq);
            zmq_send(p->replay, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(p->replay, p->topic, topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(p->replay, seq_be, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(p->replay, k->data, k->len, ZMQ_DONTWAIT);
        }
        put_be64(seq_be, UINT64_MAX);   /* -1 as a signed 64-bit number: the end */
        zmq_send(p->replay, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->replay, seq_be, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->replay, "", 0, ZMQ_DONTWAIT);
    }
    for (int i = 0; i < n && i < 3; i++) zmq_msg_close(&part[i]);
}

static void *publisher_main(void *arg) {
    ds_kv_publisher *p = arg;
    for (;;) {
        int stopping = atomic_load(&p->stop);
        zmq_pollitem_t item = {.socket = p->replay, .events = ZMQ_POLLIN};
        if (p->replay) {
            while (zmq_poll(&item, 1, stopping ? 0 : POLL_MS) > 0 && (item.revents & ZMQ_POLLIN)) {
                serve_replay(p);
                item.revents = 0;
            }
        } else if (!stopping) {
            struct timespec t = {.tv_nsec = POLL_MS * 1000000L};
            nanosleep(&t, NULL);
        }
        drain(p);
        if (stopping) break;   /* the stop came before this drain: everything pushed was sent */
    }
    return NULL;
}

static void close_all(ds_kv_publisher *p) {
    int zero = 0, linger = STOP_LINGER_MS;
    if (p->pub) {
        zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(p->pub);
    }
    if (p->replay) {
        zmq_setsockopt(p->replay, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(p->replay);
    }
    if (p->ctx) zmq_ctx_term(p->ctx);
    if (p->kept)
        for (int i = 0; i < p->n_kept; i++) free(p->kept[(p->kept_first + i) % p->n_kept_max].data);
    free(p->kept);
    ds_kv_batch_free(p->batch);
    free(p->topic);
    free(p);
}

ds_status ds_kv_publisher_start(ds_kv_event_queue *q, const ds_kv_publisher_params *prm, ds_kv_publisher **out,
                                ds_err *e) {
    *out = NULL;
    ds_kv_publisher *p = calloc(1, sizeof *p);
    if (!p) return ds_fail(e, DS_ENOMEM, "KV events: out of memory");
    p->q = q;
    p->rank = prm->data_parallel_rank;
    p->topic = strdup(prm->topic ? prm->topic : "");
    p->batch = ds_kv_batch_new(prm->array_format, prm->block_size);
    p->n_kept_max = prm->replay_endpoint && prm->replay_batches > 0 ? prm->replay_batches : 0;
    if (p->n_kept_max) p->kept = calloc((size_t)p->n_kept_max, sizeof *p->kept);
    if (!p->topic || !p->batch || (p->n_kept_max && !p->kept) || !(p->ctx = zmq_ctx_new())) {
        close_all(p);
        return ds_fail(e, DS_ENOMEM, "KV events: out of memory");
    }
    int hwm = SEND_HWM;
    p->pub = zmq_socket(p->ctx, ZMQ_PUB);
    if (!p->pub || zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
        zmq_bind(p->pub, prm->endpoint) != 0) {
        ds_status st = ds_fail(e, DS_EINVAL, "--kv-events-endpoint %s: %s%s", prm->endpoint, zmq_strerror(zmq_errno()),
                               zmq_errno() == EADDRINUSE ? " (another process has this port)" : "");
        close_all(p);
        return st;
    }
    if (prm->replay_endpoint) {
        p->replay = zmq_socket(p->ctx, ZMQ_ROUTER);
        if (!p->replay || zmq_setsockopt(p->replay, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
            zmq_bind(p->replay, prm->replay_endpoint) != 0) {
            ds_status st = ds_fail(e, DS_EINVAL, "--kv-events-replay-endpoint %s: %s%s", prm->replay_endpoint,
                                   zmq_strerror(zmq_errno()),
                                   zmq_errno() == EADDRINUSE ? " (another process has this port)" : "");
            close_all(p);
            return st;
        }
    }
    size_t n = sizeof p->pub_endpoint;
    if (zmq_getsockopt(p->pub, ZMQ_LAST_ENDPOINT, p->pub_endpoint, &n) != 0 || !p->pub_endpoint[0])
        snprintf(p->pub_endpoint, sizeof p->pub_endpoint, "%s", prm->endpoint);
    n = sizeof p->replay_endpoint;
    if (p->replay && zmq_getsockopt(p->replay, ZMQ_LAST_ENDPOINT, p->replay_endpoint, &n) != 0)
        p->replay_endpoint[0] = '\0';
    if (pthread_create(&p->thread, NULL, publisher_main, p) != 0) {
        close_all(p);
        return ds_fail(e, DS_EIO, "KV events: cannot start the publisher thread");
    }
    *out = p;
    return DS_OK;
}

void ds_kv_publisher_stop(ds_kv_publisher *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_join(p->thread, NULL);
    close_all(p);
}

void ds_kv_publisher_stats_get(ds_kv_publisher *p, ds_kv_publisher_stats *s) {
    ds_kv_event_counts c;
    ds_kv_event_counts_get(p->q, &c);
    s->events_sent = atomic_load(&p->events_sent);
    s->batches_sent = atomic_load(&p->batches_sent);
    s->events_queued = c.pushed;
    s->events_dropped = c.dropped + atomic_load(&p->events_lost);
}

const char *ds_kv_publisher_endpoint(const ds_kv_publisher *p, int replay) {
    return replay ? p->replay_endpoint : p->pub_endpoint;
}
