/* test_kv_events.c - the engine-to-publisher KV event ring (kv_events.h):
 *   - events come out in the order they went in, every field intact (tokens
 *     and image hashes too), and an empty ring pops nothing;
 *   - records of varied sizes wrap around the end of the ring many times;
 *   - a push that does not fit (the ring full, or a record over half the
 *     ring) is dropped and counted, and ds_kv_event_fits says so beforehand;
 *     popping makes room again;
 *   - two threads, one pushing 200,000 events of varied sizes (every other
 *     one retried until it fits) and one popping: every event that was not
 *     dropped arrives once, in order, with its contents (run under ASan/TSan to check the atomics). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "engine/kv_events.h"
#include "testing.h"

static int32_t toks[1024];
static uint8_t extra[8][DS_KV_HASH_BYTES];

/* Event i: its fields and contents all derived from i. */
static ds_kv_event make_event(uint64_t i, int n_tokens, int n_extra) {
    for (int k = 0; k < n_tokens; k++) toks[k] = (int32_t)(i * 31 + (uint64_t)k);
    for (int k = 0; k < n_extra; k++)
        for (int b = 0; b < DS_KV_HASH_BYTES; b++) extra[k][b] = (uint8_t)(i + (uint64_t)k * 7 + (uint64_t)b);
    return (ds_kv_event){.type = (ds_kv_event_type)(1 + i % 3), .time = (double)i * 0.5, .hash = i * 0x9e3779b97f4a7c15ull,
                         .has_parent = (int)(i & 1), .parent_hash = i + 1, .n_tokens = n_tokens,
                         .tokens = n_tokens ? toks : NULL, .n_extra = n_extra,
                         .extra = n_extra ? (const uint8_t (*)[DS_KV_HASH_BYTES])extra : NULL};
}

/* Whether ev is event i with these sizes. */
static int is_event(const ds_kv_event *ev, uint64_t i, int n_tokens, int n_extra) {
    if (ev->type != (ds_kv_event_type)(1 + i % 3) || ev->time != (double)i * 0.5 ||
        ev->hash != i * 0x9e3779b97f4a7c15ull || ev->has_parent != (int)(i & 1) || ev->parent_hash != i + 1 ||
        ev->n_tokens != n_tokens || ev->n_extra != n_extra)
        return 0;
    for (int k = 0; k < n_tokens; k++)
        if (ev->tokens[k] != (int32_t)(i * 31 + (uint64_t)k)) return 0;
    for (int k = 0; k < n_extra; k++)
        for (int b = 0; b < DS_KV_HASH_BYTES; b++)
            if (ev->extra[k][b] != (uint8_t)(i + (uint64_t)k * 7 + (uint64_t)b)) return 0;
    return 1;
}

static int sizes_tokens(uint64_t i) { return (int)(i * 37 % 97); }
static int sizes_extra(uint64_t i) { return (int)(i % 4 == 0 ? i / 4 % 3 : 0); }

static void test_order_and_contents(void) {
    ds_kv_event_queue *q = ds_kv_event_queue_new(1 << 16);
    REQUIRE(q, "queue");
    ds_kv_event ev;
    CHECK(!ds_kv_event_pop(q, &ev), "an empty ring pops an event");
    for (uint64_t i = 0; i < 20; i++) {
        ds_kv_event in = make_event(i, sizes_tokens(i), sizes_extra(i));
        CHECK(ds_kv_event_push(q, &in) == 1, "push %llu", (unsigned long long)i);
    }
    for (uint64_t i = 0; i < 20; i++) {
        REQUIRE(ds_kv_event_pop(q, &ev) == 1, "pop %llu", (unsigned long long)i);
        CHECK(is_event(&ev, i, sizes_tokens(i), sizes_extra(i)), "event %llu came out changed or out of order",
              (unsigned long long)i);
    }
    CHECK(!ds_kv_event_pop(q, &ev), "more events came out than went in");
    ds_kv_event_counts c;
    ds_kv_event_counts_get(q, &c);
    CHECK(c.pushed == 20 && c.popped == 20 && c.dropped == 0, "counts %llu %llu %llu", (unsigned long long)c.pushed,
          (unsigned long long)c.popped, (unsigned long long)c.dropped);
    ds_kv_event_queue_free(q);
}

static void test_wrap_around(void) {
    ds_kv_event_queue *q = ds_kv_event_queue_new(4096); /* the smallest ring */
    REQUIRE(q, "queue");
    uint64_t next_in = 0, next_out = 0;
    ds_kv_event ev;
    /* about 20 rings' worth, three records in flight at most, sizes that never divide the ring */
    while (next_out < 300) {
        while (next_in - next_out < 3) {
            ds_kv_event in = make_event(next_in, sizes_tokens(next_in) * 2, sizes_extra(next_in));
            REQUIRE(ds_kv_event_push(q, &in) == 1, "push %llu with %llu in flight", (unsigned long long)next_in,
                    (unsigned long long)(next_in - next_out));
            next_in++;
        }
        REQUIRE(ds_kv_event_pop(q, &ev) == 1, "pop %llu", (unsigned long long)next_out);
        CHECK(is_event(&ev, next_out, sizes_tokens(next_out) * 2, sizes_extra(next_out)), "event %llu changed",
              (unsigned long long)next_out);
        next_out++;
    }
    ds_kv_event_counts c;
    ds_kv_event_counts_get(q, &c);
    CHECK(c.dropped == 0 && c.pushed == next_in, "dropped %llu", (unsigned long long)c.dropped);
    ds_kv_event_queue_free(q);
}

static void test_drops_counted(void) {
    ds_kv_event_queue *q = ds_kv_event_queue_new(4096);
    REQUIRE(q, "queue");
    /* over half the ring: never fits, dropped however empty */
    CHECK(!ds_kv_event_fits(q, 600, 0), "a record over half the ring said to fit");
    ds_kv_event big = make_event(1, 600, 0);
    CHECK(ds_kv_event_push(q, &big) == 0, "a record over half the ring went in");
    /* fill it: 256-token records (1 KiB and a header) */
    int n = 0;
    for (;;) {
        int fits = ds_kv_event_fits(q, 256, 1);
        ds_kv_event in = make_event((uint64_t)n, 256, 1);
        int pushed = ds_kv_event_push(q, &in);
        CHECK(fits == pushed, "fits said %d, push did %d (record %d)", fits, pushed, n);
        if (!pushed) break;
        n++;
        REQUIRE(n < 100, "the ring never filled");
    }
    CHECK(n == 3, "a 4 KiB ring held %d records of 1 KiB and a header", n);
    ds_kv_event_counts c;
    ds_kv_event_counts_get(q, &c);
    CHECK(c.dropped == 2 && c.pushed == (uint64_t)n, "dropped %llu pushed %llu", (unsigned long long)c.dropped,
          (unsigned long long)c.pushed);
    /* a pop frees its record at the next pop: two pops make room for one more */
    ds_kv_event ev;
    REQUIRE(ds_kv_event_pop(q, &ev) && is_event(&ev, 0, 256, 1), "first out");
    REQUIRE(ds_kv_event_pop(q, &ev) && is_event(&ev, 1, 256, 1), "second out");
    CHECK(ds_kv_event_fits(q, 256, 1), "no room after two pops");
    ds_kv_event in = make_event(50, 256, 1);
    CHECK(ds_kv_event_push(q, &in) == 1, "no room after two pops");
    REQUIRE(ds_kv_event_pop(q, &ev) && is_event(&ev, 2, 256, 1), "third out");
    REQUIRE(ds_kv_event_pop(q, &ev) && is_event(&ev, 50, 256, 1), "the late one out");
    CHECK(!ds_kv_event_pop(q, &ev), "a dropped event came out");
    CHECK(!ds_kv_event_fits(q, -1, 0), "a negative size said to fit");
    ds_kv_event_queue_free(q);
}

#define STRESS_N 200000

typedef struct {
    ds_kv_event_queue *q;
    int bad;
    uint64_t received, last;
} consumer;

static void *consume(void *arg) {
    consumer *k = arg;
    ds_kv_event ev;
    uint64_t expect_min = 0;
    for (;;) {
        if (!ds_kv_event_pop(k->q, &ev)) continue;
        if (ev.type == DS_KV_ALL_CLEARED && ev.hash == UINT64_MAX) break; /* the end mark */
        /* the producer's event i has i in parent_hash - 1; drops leave gaps, never reorderings */
        uint64_t i = ev.parent_hash - 1;
        int nt = ev.n_tokens, ne = ev.n_extra;
        if (i < expect_min || nt != sizes_tokens(i) || ne != sizes_extra(i)) k->bad++;
        for (int t = 0; t < nt; t++)
            if (ev.tokens[t] != (int32_t)(i * 31 + (uint64_t)t)) { k->bad++; break; }
        for (int x = 0; x < ne; x++)
            if (ev.extra[x][0] != (uint8_t)(i + (uint64_t)x * 7)) { k->bad++; break; }
        expect_min = i + 1;
        k->received++;
        k->last = i;
    }
    return NULL;
}

static void test_two_threads(void) {
    ds_kv_event_queue *q = ds_kv_event_queue_new(1 << 14);
    REQUIRE(q, "queue");
    consumer k = {.q = q};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, consume, &k) == 0, "thread");
    int32_t tk[128];
    uint8_t ex[4][DS_KV_HASH_BYTES];
    uint64_t pushed = 0;
    for (uint64_t i = 0; i < STRESS_N; i++) {
        int nt = sizes_tokens(i), ne = sizes_extra(i);
        for (int t = 0; t < nt; t++) tk[t] = (int32_t)(i * 31 + (uint64_t)t);
        for (int x = 0; x < ne; x++) memset(ex[x], (int)(uint8_t)(i + (uint64_t)x * 7), DS_KV_HASH_BYTES);
        ds_kv_event ev = {.type = DS_KV_BLOCK_STORED, .hash = i, .parent_hash = i + 1, .has_parent = 1,
                          .n_tokens = nt, .tokens = tk, .n_extra = ne,
                          .extra = (const uint8_t (*)[DS_KV_HASH_BYTES])ex};
        /* odd events wait for room, even ones are dropped when there is none */
        int ok;
        do ok = ds_kv_event_push(q, &ev);
        while (!ok && (i & 1));
        pushed += (uint64_t)ok;
    }
    ds_kv_event end = {.type = DS_KV_ALL_CLEARED, .hash = UINT64_MAX};
    while (!ds_kv_event_push(q, &end)) {}
    pthread_join(th, NULL);
    ds_kv_event_counts c;
    ds_kv_event_counts_get(q, &c);
    printf("     %llu of %d pushed, %llu dropped, %llu received\n", (unsigned long long)pushed, STRESS_N,
           (unsigned long long)c.dropped, (unsigned long long)k.received);
    CHECK(k.bad == 0, "%d events arrived changed or out of order", k.bad);
    CHECK(k.received == pushed, "%llu pushed, %llu received", (unsigned long long)pushed,
          (unsigned long long)k.received);
    CHECK(c.pushed == pushed + 1 && c.popped == pushed + 1, "counts pushed %llu popped %llu",
          (unsigned long long)c.pushed, (unsigned long long)c.popped);
    CHECK(c.dropped >= (uint64_t)STRESS_N - pushed, "dropped %llu, but %llu did not go in",
          (unsigned long long)c.dropped, (unsigned long long)(STRESS_N - pushed));
    ds_kv_event_queue_free(q);
}

int main(void) {
    RUN(test_order_and_contents);
    RUN(test_wrap_around);
    RUN(test_drops_counted);
    RUN(test_two_threads);
    return ds_test_finish();
}
