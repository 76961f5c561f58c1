/* test_engine.c - the continuous batching engine:
 *   - cache on vs off: identical greedy outputs over 200 requests with shared
 *     prefixes, branches, staggered arrivals and a cache budget small enough
 *     to force evictions;
 *   - batch invariance: a request alone and among 15 others gives identical
 *     tokens, greedy and seeded;
 *   - preemption under a KV budget too small for all: every request finishes,
 *     with the same tokens as without pressure;
 *   - aborts (waiting, mid-prefill, mid-decode) and leaks: pools back to
 *     their baseline once everything has ended; ds_engine_fail_all ends
 *     every running and waiting request with its message;
 *   - injected faults (the test hook) at prefill, decode and verify: the one
 *     request fails with the phase named, the rest of its batch gives the same
 *     tokens as a run without the fault;
 *   - token filters (what tool_choice required uses): only allowed tokens are
 *     drawn, the filter sees the right history, stops being asked once done,
 *     and speculation changes nothing (test_spec: speculating under a filter);
 *   - 5,000 aborts between two steps (more than any fixed list would hold):
 *     every request ends aborted, none runs on;
 *   - a full queue is DS_EBUSY (the server's 429), not a message to match;
 *   - the model's batch capacity comes from the engine's parameters, and an
 *     engine refuses a model too small for its steps;
 *   - a failed MTP draft call fails no request, and is counted and logged.
 * Every engine here checks its invariants after every step
 * (DS_CHECK_INVARIANTS=1, set by main; test_engine_check.c breaks them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/model_make.h"
#include "testing.h"

#define MAXREQ 256
#define MAXGEN 24

static char tmpdir[256];

typedef struct {
    int32_t out[MAXREQ][MAXGEN];
    int n_out[MAXREQ];
    ds_finish reason[MAXREQ];
    int n_cached[MAXREQ];
    int done;
} results;

typedef struct {
    results *res;
    int index;
} ctx;

static char last_error[256];

static ctx ctxs[MAXREQ];

static void on_event(const ds_event *ev, void *user) {
    ctx *c = user;
    results *r = c->res;
    if (ev->finished) {
        if (ev->error) snprintf(last_error, sizeof last_error, "%s", ev->error);
        r->reason[c->index] = ev->reason;
        r->n_cached[c->index] = ev->n_cached;
        r->done++;
        return;
    }
    if (r->n_out[c->index] < MAXGEN) r->out[c->index][r->n_out[c->index]++] = ev->token;
}

typedef struct {
    ds_model_file *file;
    ds_model *model;
} loaded;

static int load(const char *shape, loaded *l) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, shape);
    if (access(path, R_OK) != 0) {
        ds_make_options o = {.shape = shape, .dtype = "f32", .format = DS_FORMAT_GGUF, .seed = 11, .scale = 3.0f,
                             .out = path};
        ds_err e = {0};
        if (ds_make_model(&o, &e)) { printf("make: %s\n", e.msg); return -1; }
    }
    ds_err e = {0};
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ds_model_params mp = {.max_batch_tokens = ds_engine_required_batch_capacity(&ep)};
    if (ds_model_open(path, &l->file, &e) || ds_model_new(l->file, &mp, &l->model, &e)) {
        printf("open: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static void unload(loaded *l) {
    ds_model_free(l->model);
    ds_model_close(l->file);
}

/* A workload of n requests: 4 system prefixes of 40..150 tokens, each branching into user turns
 * of 5..60 tokens; some requests repeat an earlier prompt exactly, some extend one. */
typedef struct {
    int32_t toks[MAXREQ][400];
    int len[MAXREQ];
} workload;

static void make_workload(workload *w, int n, uint32_t seed) {
    uint32_t x = seed;
#define RND() (x = x * 1664525u + 1013904223u, x >> 8)
    int32_t prefix[4][160];
    int plen[4];
    for (int p = 0; p < 4; p++) {
        plen[p] = 40 + (int)(RND() % 110);
        for (int i = 0; i < plen[p]; i++) prefix[p][i] = (int32_t)(RND() % 1000);
    }
    for (int r = 0; r < n; r++) {
        int kind = (int)(RND() % 10);
        if (r > 0 && kind == 0) { /* an exact repeat */
            int src = (int)(RND() % (uint32_t)r);
            memcpy(w->toks[r], w->toks[src], (size_t)w->len[src] * sizeof(int32_t));
            w->len[r] = w->len[src];
            continue;
        }
        if (r > 0 && kind == 1) { /* a later turn: an earlier prompt extended */
            int src = (int)(RND() % (uint32_t)r);
            memcpy(w->toks[r], w->toks[src], (size_t)w->len[src] * sizeof(int32_t));
            int add = 5 + (int)(RND() % 80);
            if (w->len[src] + add > 380) add = 380 - w->len[src];
            for (int i = 0; i < add; i++) w->toks[r][w->len[src] + i] = (int32_t)(RND() % 1000);
            w->len[r] = w->len[src] + add;
            continue;
        }
        int p = (int)(RND() % 4);
        memcpy(w->toks[r], prefix[p], (size_t)plen[p] * sizeof(int32_t));
        int add = 5 + (int)(RND() % 60);
        for (int i = 0; i < add; i++) w->toks[r][plen[p] + i] = (int32_t)(RND() % 1000);
        w->len[r] = plen[p] + add;
    }
#undef RND
}

/* Runs the workload through an engine: requests arrive `per_step` at a time between steps. */
static int run(ds_model *m, const ds_engine_params *ep, const workload *w, int n, int per_step, int n_gen,
               const ds_sampling_params *sp, results *res, ds_engine_stats *st) {
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, ep, &eng, &e)) { printf("engine: %s\n", e.msg); return -1; }
    memset(res, 0, sizeof *res);
    int submitted = 0, active = 1;
    while (submitted < n || active) {
        for (int k = 0; k < per_step && submitted < n; k++, submitted++) {
            ctxs[submitted] = (ctx){res, submitted};
            ds_request_params rp = {.prompt = w->toks[submitted], .n_prompt = w->len[submitted], .max_tokens = n_gen,
                                    .ignore_eos = 1, .on_event = on_event, .user = &ctxs[submitted]};
            rp.sampling = *sp;
            if (!ds_engine_submit(eng, &rp, &e)) { printf("submit: %s\n", e.msg); ds_engine_free(eng); return -1; }
        }
        active = ds_engine_step(eng);
    }
    ds_engine_stats_get(eng, st);
    ds_engine_free(eng);
    return 0;
}

static workload W;
static results A, B;

static void greedy(ds_sampling_params *sp) {
    ds_sampling_defaults(sp);
    sp->temperature = 0;
}

static void cache_on_off(const char *shape, int n, size_t kv_bytes) {
    loaded l;
    REQUIRE(load(shape, &l) == 0, "load");
    make_workload(&W, n, 7);
    ds_sampling_params sp;
    greedy(&sp);
    ds_engine_params off, on;
    ds_engine_defaults(&off);
    off.prefix_cache = 0;
    off.max_running = 16;
    /* a few hundred pages: the cache must evict to make room (budgets shrink with the workload) */
    off.kv_bytes = kv_bytes * (size_t)ds_test_scaled(100) / 100;
    if (off.kv_bytes < ((size_t)1 << 20)) off.kv_bytes = (size_t)1 << 20; /* the longest prompt must fit */
    on = off;
    on.prefix_cache = 1;
    on.checkpoint_interval = 64;
    on.cache_state_bytes = ((size_t)1 << 20) * (size_t)ds_test_scaled(100) / 100; /* a few dozen checkpoints */
    ds_engine_stats so, sn;
    REQUIRE(run(l.model, &off, &W, n, 6, 8, &sp, &A, &so) == 0, "cache off");
    REQUIRE(run(l.model, &on, &W, n, 6, 8, &sp, &B, &sn) == 0, "cache on");
    int same = 0;
    for (int r = 0; r < n; r++)
        same += A.n_out[r] == 8 && B.n_out[r] == 8 && memcmp(A.out[r], B.out[r], sizeof A.out[r]) == 0;
    printf("     %s: %d/%d identical; cache hits %lld of %lld prompt tokens, %lld checkpoint restores, "
           "%lld evicted pages, %lld evicted checkpoints\n", shape, same, n, (long long)sn.prefix_hit_tokens,
           (long long)sn.prefix_query_tokens, (long long)sn.checkpoint_restores, (long long)sn.evicted_pages,
           (long long)sn.evicted_checkpoints);
    CHECK(same == n, "%s: %d of %d requests differ with the cache on", shape, n - same, n);
    CHECK(sn.prefix_hit_tokens > sn.prefix_query_tokens / 5, "%s: the cache barely hits", shape);
    CHECK(sn.evicted_pages > 0 && (sn.evicted_checkpoints > 0 || sn.checkpoint_restores == 0),
          "%s: the budgets were meant to force evictions", shape);
    CHECK(sn.prompt_tokens < so.prompt_tokens, "%s: prefill did not shrink (%lld vs %lld)", shape,
          (long long)sn.prompt_tokens, (long long)so.prompt_tokens);
    CHECK(sn.kv_pages_used >= 0 && sn.state_slots_used == 0 && so.kv_pages_used == 0, "%s: pools not back to baseline",
          shape);
    unload(&l);
}


static void test_cache_on_off_identical(void) {
    cache_on_off("tiny", ds_test_scaled(200), (size_t)6 << 20);
    cache_on_off("tiny-qwen3", ds_test_scaled(80), (size_t)3 << 20);
}

static void test_batch_invariance(void) {
    loaded l;
    REQUIRE(load("tiny-moe", &l) == 0, "load");
    make_workload(&W, 16, 99);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.prefix_cache = 0;
    for (int mode = 0; mode < 2; mode++) {
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        if (mode == 0) sp.temperature = 0;
        else { sp.temperature = 0.9f; sp.top_p = 0.95f; sp.seed = 1234; }
        ds_engine_stats st;
        /* request 0 alone, then with 15 others arriving at once */
        REQUIRE(run(l.model, &ep, &W, 1, 1, 16, &sp, &A, &st) == 0, "alone");
        REQUIRE(run(l.model, &ep, &W, 16, 16, 16, &sp, &B, &st) == 0, "among 15");
        CHECK(A.n_out[0] == 16 && memcmp(A.out[0], B.out[0], sizeof A.out[0]) == 0,
              "%s: request 0 differs alone and among 15 others", mode ? "seeded" : "greedy");
    }
    unload(&l);
}

static void test_preemption_keeps_outputs(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    int n = 24;
    make_workload(&W, n, 3);
    ds_sampling_params sp;
    greedy(&sp);
    ds_engine_params roomy, tight;
    ds_engine_defaults(&roomy);
    roomy.prefix_cache = 0;
    tight = roomy;
    /* tiny: one page is 16 positions x 1 layer x 2 heads x 64 x K,V floats = 16 KiB; 64 pages hold
     * two or three requests, not 16 */
    tight.kv_bytes = (size_t)64 * 16 * 2 * 64 * 2 * 4;
    ds_engine_stats s1, s2;
    REQUIRE(run(l.model, &roomy, &W, n, n, 20, &sp, &A, &s1) == 0, "roomy");
    REQUIRE(run(l.model, &tight, &W, n, n, 20, &sp, &B, &s2) == 0, "tight");
    int same = 0;
    for (int r = 0; r < n; r++) same += B.n_out[r] == 20 && memcmp(A.out[r], B.out[r], sizeof A.out[r]) == 0;
    printf("     %lld preemptions; %d/%d identical\n", (long long)s2.preemptions, same, n);
    CHECK(s2.preemptions > 0, "the budget was meant to force preemption");
    CHECK(same == n, "%d requests changed under preemption", n - same);
    CHECK(s2.kv_pages_used == 0 && s2.state_slots_used == 0, "pools not back to baseline");
    unload(&l);
}

static void test_aborts_free_everything(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 40, 5);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.prefill_chunk = 64;
    ep.step_tokens = 128;
    ds_engine *eng;
    ds_err e = {0};
    REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
    ds_engine_stats base;
    ds_engine_stats_get(eng, &base);
    memset(&A, 0, sizeof A);
    uint64_t ids[40];
    ds_sampling_params sp;
    greedy(&sp);
    for (int i = 0; i < 40; i++) {
        ctxs[i] = (ctx){&A, i};
        ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = 20, .ignore_eos = 1,
                                .sampling = sp, .on_event = on_event, .user = &ctxs[i]};
        ids[i] = ds_engine_submit(eng, &rp, &e);
        REQUIRE(ids[i], "%s", e.msg);
    }
    ds_engine_abort(eng, ids[39]); /* still waiting */
    ds_engine_step(eng);
    ds_engine_abort(eng, ids[0]); /* mid-prefill or early decode */
    ds_engine_abort(eng, ids[1]);
    for (int s = 0; s < 5; s++) ds_engine_step(eng);
    ds_engine_abort(eng, ids[2]); /* mid-decode */
    ds_engine_abort(eng, 999999); /* unknown: ignored */
    while (ds_engine_step(eng)) {}
    ds_engine_stats st;
    ds_engine_stats_get(eng, &st);
    int aborted = 0;
    for (int i = 0; i < 40; i++) aborted += A.reason[i] == DS_FINISH_ABORT;
    CHECK(A.done == 40, "every request ended: %d", A.done);
    CHECK(aborted == 4 && st.aborted == 4, "4 aborted (%d, stats %lld)", aborted, (long long)st.aborted);
    CHECK(st.state_slots_used == base.state_slots_used, "state slots: %d in use, baseline %d", st.state_slots_used,
          base.state_slots_used);
    /* pages still in use are the prefix cache's own */
    CHECK(st.running == 0 && st.waiting == 0, "nothing left running or waiting");
    CHECK(st.started == st.finished + st.aborted + st.failed, "started %lld = finished %lld + aborted %lld + failed %lld",
          (long long)st.started, (long long)st.finished, (long long)st.aborted, (long long)st.failed);
    /* a shutdown that cannot wait: every request, running or waiting, ends with the error */
    memset(&A, 0, sizeof A);
    last_error[0] = '\0';
    for (int i = 0; i < 40; i++) {
        ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = 20, .ignore_eos = 1,
                                .sampling = sp, .on_event = on_event, .user = &ctxs[i]};
        REQUIRE(ds_engine_submit(eng, &rp, &e), "%s", e.msg);
    }
    for (int s = 0; s < 3; s++) ds_engine_step(eng);
    ds_engine_fail_all(eng, "shutting down now");
    ds_engine_step(eng);
    int failed = 0;
    for (int i = 0; i < 40; i++) failed += A.reason[i] == DS_FINISH_ERROR;
    ds_engine_stats_get(eng, &st);
    CHECK(A.done == 40 && failed == 40 && !strcmp(last_error, "shutting down now"),
          "fail_all: %d ended, %d with the error ('%s')", A.done, failed, last_error);
    CHECK(st.running == 0 && st.waiting == 0 && st.state_slots_used == base.state_slots_used,
          "fail_all: %d running, %d waiting, %d state slots", st.running, st.waiting, st.state_slots_used);
    CHECK(ds_engine_step(eng) == 0, "fail_all: work left");
    ds_engine_free(eng);
    unload(&l);
}

static void test_fault_hits_one_request(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 8, 17);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ds_engine *eng;
    ds_err e = {0};
    REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
    memset(&A, 0, sizeof A);
    ds_sampling_params sp;
    greedy(&sp);
    uint64_t ids[8];
    for (int i = 0; i < 8; i++) {
        ctxs[i] = (ctx){&A, i};
        ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = 10, .ignore_eos = 1,
                                .sampling = sp, .on_event = on_event, .user = &ctxs[i]};
        ids[i] = ds_engine_submit(eng, &rp, &e);
    }
    ds_engine_step(eng);
    ds_engine_inject_fault(eng, ids[3]);
    while (ds_engine_step(eng)) {}
    for (int i = 0; i < 8; i++)
        CHECK(A.reason[i] == (i == 3 ? DS_FINISH_ERROR : DS_FINISH_LENGTH), "request %d ended with %d", i, A.reason[i]);
    ds_engine_free(eng);
    unload(&l);
}

/* One request of eight gets a fault for a phase; all run together, greedy (so
 * they draft with the MTP head and verify; once the random head has been
 * rejected a few times drafting pauses and plain decodes follow). */
static void test_fault_phases(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 8, 23);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.spec_policy = DS_SPEC_POLICY_REQUEST; /* all eight draft, so that verify steps happen */
    ds_sampling_params sp;
    greedy(&sp);
    static const ds_fault_phase PHASES[] = {DS_FAULT_NONE, DS_FAULT_PREFILL, DS_FAULT_DECODE, DS_FAULT_VERIFY, DS_FAULT_ANY};
    static const char *const WORDS[] = {"", "prefill step", "decode step", "verify step", "injected fault"};
    ds_engine_stats st;
    for (int p = 0; p < 5; p++) {
        results *res = p == 0 ? &B : &A;
        ds_engine *eng;
        ds_err e = {0};
        REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
        memset(res, 0, sizeof *res);
        last_error[0] = 0;
        for (int i = 0; i < 8; i++) {
            ctxs[i] = (ctx){res, i};
            ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = 20, .ignore_eos = 1,
                                    .sampling = sp, .on_event = on_event, .user = &ctxs[i]};
            if (i == 3) rp.fault = PHASES[p];
            REQUIRE(ds_engine_submit(eng, &rp, &e), "%s", e.msg);
        }
        while (ds_engine_step(eng)) {}
        ds_engine_stats_get(eng, &st);
        ds_engine_free(eng);
        if (p == 0) {
            CHECK(st.spec_verify_steps > 0, "no verify steps: the test needs speculation");
            continue;
        }
        for (int i = 0; i < 8; i++) {
            if (i == 3) {
                CHECK(res->reason[i] == DS_FINISH_ERROR, "phase %d: the faulty request ended with %d", p, res->reason[i]);
                CHECK(strstr(last_error, WORDS[p]) != NULL, "phase %d: error '%s'", p, last_error);
                continue;
            }
            CHECK(res->reason[i] == DS_FINISH_LENGTH && res->n_out[i] == 20, "phase %d: request %d ended with %d after %d",
                  p, i, res->reason[i], res->n_out[i]);
            CHECK(!memcmp(res->out[i], B.out[i], sizeof B.out[i]), "phase %d: request %d gave other tokens", p, i);
        }
        CHECK(st.running == 0 && st.waiting == 0 && st.failed == 1 && st.finished == 7, "phase %d: failed %lld finished %lld",
              p, (long long)st.failed, (long long)st.finished);
        CHECK(st.state_slots_used == 0, "phase %d: %d state slots left", p, st.state_slots_used);
    }
    unload(&l);
}

static void test_refuses_what_cannot_run(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.max_queue = 2;
    ds_engine *eng;
    ds_err e = {0};
    REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
    int32_t t[4] = {1, 2, 3, 4};
    ds_request_params rp = {.prompt = t, .n_prompt = 4, .max_tokens = 1 << 20};
    CHECK(!ds_engine_submit(eng, &rp, &e) && strstr(e.msg, "exceeds the context"), "%s", e.msg);
    rp.max_tokens = 4;
    rp.n_prompt = 0;
    CHECK(!ds_engine_submit(eng, &rp, &e) && strstr(e.msg, "empty"), "%s", e.msg);
    rp.n_prompt = 4;
    t[2] = 1 << 30;
    CHECK(!ds_engine_submit(eng, &rp, &e) && strstr(e.msg, "vocabulary"), "%s", e.msg);
    t[2] = 3;
    CHECK(ds_engine_submit(eng, &rp, &e) && ds_engine_submit(eng, &rp, &e), "two fit in the queue");
    e.code = DS_OK;
    CHECK(!ds_engine_submit(eng, &rp, &e) && e.code == DS_EBUSY, "a full queue: status %d (%s): %s", e.code,
          ds_status_name(e.code), e.msg);
    while (ds_engine_step(eng)) {}
    ds_engine_free(eng);
    unload(&l);
}

/* Requests with one long shared prefix, all arriving in the same step: the
 * first is prefilled alone up to the shared point, the others wait and resume
 * there, so the prefix is computed once; outputs equal the cache-off run. */
static void test_shared_arrivals(const char *shape) {
    loaded l;
    REQUIRE(load(shape, &l) == 0, "load");
    enum { N = 16, PREFIX = 320, OWN = 20 };
    uint32_t x = 5;
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < PREFIX + OWN; i++) {
            x = x * 1664525u + 1013904223u;
            W.toks[r][i] = r == 0 || i >= PREFIX ? (int32_t)((x >> 8) % 1000) : W.toks[0][i];
        }
        W.toks[r][PREFIX] = (int32_t)(r * 7 + 1); /* the turns differ from their first token */
        W.len[r] = PREFIX + OWN;
    }
    ds_sampling_params sp;
    greedy(&sp);
    ds_engine_params off, on;
    ds_engine_defaults(&off);
    off.prefix_cache = 0;
    off.max_running = N;
    on = off;
    on.prefix_cache = 1;
    ds_engine_stats so, sn;
    REQUIRE(run(l.model, &off, &W, N, N, 8, &sp, &A, &so) == 0, "cache off");
    REQUIRE(run(l.model, &on, &W, N, N, 8, &sp, &B, &sn) == 0, "cache on");
    int same = 0;
    for (int r = 0; r < N; r++)
        same += A.n_out[r] == 8 && B.n_out[r] == 8 && memcmp(A.out[r], B.out[r], sizeof A.out[r]) == 0;
    printf("     %s: %d/%d identical; prefill %lld tokens with the cache, %lld without; %lld hit\n", shape, same, N,
           (long long)sn.prompt_tokens, (long long)so.prompt_tokens, (long long)sn.prefix_hit_tokens);
    CHECK(same == N, "%s: %d of %d requests differ with the cache on", shape, N - same, N);
    CHECK(sn.prefix_hit_tokens >= (int64_t)(N - 1) * PREFIX, "%s: %lld tokens hit, expected %d", shape,
          (long long)sn.prefix_hit_tokens, (N - 1) * PREFIX);
    CHECK(sn.prompt_tokens <= PREFIX + (int64_t)N * OWN, "%s: prefilled %lld tokens", shape,
          (long long)sn.prompt_tokens);
    CHECK(sn.state_slots_used == 0, "%s: state slots not back to baseline", shape);
    unload(&l);
}

/* A token filter (tool_choice required uses one): the first n_force tokens may
 * only be the forced ones (greedy) or one of three per position (sampling);
 * then it lets go. It checks the history it is shown. */
typedef struct {
    int32_t force[12];
    int n_force, calls, calls_after_done, done, bad_history, sampling;
} forcer;

static int32_t subset_token(int n, int j) { return (int32_t)((n * 37 + j * 101 + 5) % 1000); }

static ds_filter_result force_filter(void *u, const int32_t *gen, int n, uint32_t *allowed, int n_vocab) {
    forcer *f = u;
    f->calls++;
    if (f->done) f->calls_after_done++;
    for (int i = 0; i < n && i < f->n_force; i++) {
        int ok = gen[i] == f->force[i];
        for (int j = 0; f->sampling && j < 3; j++) ok |= gen[i] == subset_token(i, j);
        f->bad_history += !ok;
    }
    if (n >= f->n_force) {
        f->done = 1;
        return DS_FILTER_DONE;
    }
    if (f->sampling)
        for (int j = 0; j < 3; j++) DS_MASK_SET(allowed, subset_token(n, j) % n_vocab);
    else
        DS_MASK_SET(allowed, f->force[n]);
    return DS_FILTER_MASK;
}

static forcer forcers[16];

static void run_filtered(ds_model *m, int spec_tokens, int sampling, results *res, ds_engine_stats *st) {
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.spec_tokens = spec_tokens;
    /* each request by its own acceptance (not the measured costs of the batch policy, so that drafts
     * surely happen) and a cap of 4: no drafts while the 16 are forced (a filter shown drafts is called
     * more than once per token), drafts once few are left */
    ep.spec_policy = DS_SPEC_POLICY_REQUEST;
    ep.spec_max_batch = 4;
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, &ep, &eng, &e)) { printf("engine: %s\n", e.msg); return; }
    memset(res, 0, sizeof *res);
    uint32_t x = 99;
    for (int i = 0; i < 16; i++) {
        forcer *f = &forcers[i];
        memset(f, 0, sizeof *f);
        f->sampling = sampling;
        f->n_force = i % 4 == 3 ? 0 : 2 + i % 9; /* some requests carry a filter that lets go at once */
        for (int k = 0; k < f->n_force; k++) f->force[k] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % 1000;
        ctxs[i] = (ctx){res, i};
        ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = f->n_force + 12,
                                .ignore_eos = 1, .on_event = on_event, .user = &ctxs[i], .filter = force_filter,
                                .filter_user = f};
        if (sampling) ds_sampling_defaults(&rp.sampling), rp.sampling.seed = 7 + (uint64_t)i;
        else greedy(&rp.sampling);
        if (!ds_engine_submit(eng, &rp, &e)) printf("submit: %s\n", e.msg);
    }
    while (ds_engine_step(eng)) {}
    ds_engine_stats_get(eng, st);
    ds_engine_free(eng);
}

/* Allows token 5 + n at step n, and cannot go on from step 3 (DS_FILTER_ERROR). */
static ds_filter_result failing_filter(void *u, const int32_t *gen, int n, uint32_t *allowed, int n_vocab) {
    (void)u, (void)gen, (void)n_vocab;
    if (n >= 3) return DS_FILTER_ERROR;
    DS_MASK_SET(allowed, 5 + n);
    return DS_FILTER_MASK;
}

/* A filter that cannot go on ends its request with an error after the tokens it allowed, with
 * or without speculation; the others in the batch are untouched. */
static void test_filter_error(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 4, 29);
    for (int spec = 0; spec < 2; spec++) {
        ds_engine_params ep;
        ds_engine_defaults(&ep);
        ep.spec_tokens = spec ? 3 : 0;
        ds_engine *eng;
        ds_err e = {0};
        REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
        memset(&A, 0, sizeof A);
        last_error[0] = '\0';
        for (int i = 0; i < 4; i++) {
            ctxs[i] = (ctx){&A, i};
            ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = 10, .ignore_eos = 1,
                                    .on_event = on_event, .user = &ctxs[i]};
            if (i % 2 == 0) rp.filter = failing_filter;
            greedy(&rp.sampling);
            CHECK(ds_engine_submit(eng, &rp, &e), "submit: %s", e.msg);
        }
        while (ds_engine_step(eng)) {}
        ds_engine_free(eng);
        for (int i = 0; i < 4; i++) {
            if (i % 2) {
                CHECK(A.reason[i] == DS_FINISH_LENGTH && A.n_out[i] == 10, "spec %d request %d: %d %d", spec, i,
                      A.reason[i], A.n_out[i]);
                continue;
            }
            CHECK(A.reason[i] == DS_FINISH_ERROR && A.n_out[i] == 3 && A.out[i][0] == 5 && A.out[i][2] == 7,
                  "spec %d request %d: reason %d after %d tokens", spec, i, A.reason[i], A.n_out[i]);
        }
        CHECK(strstr(last_error, "output constraint cannot go on"), "message: %s", last_error);
    }
    unload(&l);
}

static void test_token_filter(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 16, 23);
    for (int sampling = 0; sampling < 2; sampling++) {
        ds_engine_stats s_on, s_off;
        run_filtered(l.model, 3, sampling, &A, &s_on);
        for (int i = 0; i < 16; i++) {
            forcer *f = &forcers[i];
            CHECK(A.reason[i] == DS_FINISH_LENGTH && A.n_out[i] == f->n_force + 12, "%d: %d tokens", i, A.n_out[i]);
            for (int k = 0; k < f->n_force && k < A.n_out[i]; k++) {
                int ok = A.out[i][k] == f->force[k];
                for (int j = 0; sampling && j < 3; j++) ok |= A.out[i][k] == subset_token(k, j);
                CHECK(ok, "%s request %d token %d: %d is not allowed", sampling ? "sampled" : "greedy", i, k,
                      A.out[i][k]);
            }
            CHECK(f->bad_history == 0, "request %d: the filter was shown a wrong history", i);
            CHECK(f->calls == f->n_force + 1 && f->calls_after_done == 0,
                  "request %d: %d filter calls for %d forced tokens (it must stop once done)", i, f->calls, f->n_force);
        }
        /* speculation resumes once the filter let go and changes nothing, greedy or seeded */
        CHECK(s_on.spec_drafted > 0, "no drafts after the filters let go");
        run_filtered(l.model, 0, sampling, &B, &s_off);
        for (int i = 0; i < 16; i++) {
            CHECK(B.n_out[i] == A.n_out[i] && !memcmp(A.out[i], B.out[i], (size_t)A.n_out[i] * sizeof(int32_t)),
                  "%s request %d: outputs differ with and without speculation", sampling ? "sampled" : "greedy", i);
        }
    }
    unload(&l);
}

/* Logprobs: asked for, each event carries the token's logprob and the top k
 * (sorted, distinct, the greedy token first, a top 5 the head of the top 20);
 * not asked for, none is computed. */
typedef struct {
    ds_event ev[8];
    int n;
} lp_log;

static void on_lp(const ds_event *ev, void *user) {
    lp_log *l = user;
    if (!ev->finished && l->n < 8) l->ev[l->n++] = *ev;
}

static void test_logprobs(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 4, 29);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ds_engine *eng;
    ds_err e = {0};
    REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
    static lp_log logs[12];
    memset(logs, 0, sizeof logs);
    static const int ks[3] = {0, 5, 20};
    for (int i = 0; i < 12; i++) {
        ds_request_params rp = {.prompt = W.toks[i % 4], .n_prompt = W.len[i % 4], .max_tokens = 8, .ignore_eos = 1,
                                .on_event = on_lp, .user = &logs[i], .n_top_logprobs = ks[i / 4],
                                .want_logprob = i / 4 > 0 || i % 2};
        greedy(&rp.sampling);
        REQUIRE(ds_engine_submit(eng, &rp, &e), "%s", e.msg);
    }
    while (ds_engine_step(eng)) {}
    ds_engine_free(eng);
    for (int i = 0; i < 12; i++) {
        lp_log *g = &logs[i];
        int k = ks[i / 4], want = i / 4 > 0 || i % 2;
        CHECK(g->n == 8, "request %d: %d events", i, g->n);
        for (int t = 0; t < g->n; t++) {
            const ds_event *ev = &g->ev[t];
            CHECK(ev->n_top == k, "request %d: %d alternatives, %d asked", i, ev->n_top, k);
            CHECK(want ? ev->logprob <= 0.0f && ev->logprob > -100.0f : ev->logprob == 0.0f,
                  "request %d token %d: logprob %g (asked: %d)", i, t, (double)ev->logprob, want);
            double mass = 0.0;
            for (int j = 0; j < ev->n_top; j++) {
                mass += exp((double)ev->top_logprobs[j]);
                CHECK(j == 0 || ev->top_logprobs[j] <= ev->top_logprobs[j - 1], "request %d: top not sorted", i);
                for (int q = 0; q < j; q++) CHECK(ev->top_ids[q] != ev->top_ids[j], "request %d: top repeats", i);
            }
            CHECK(mass <= 1.0 + 1e-5, "request %d: top mass %g", i, mass);
            if (k) CHECK(ev->top_ids[0] == ev->token && ev->top_logprobs[0] == ev->logprob,
                         "request %d token %d: greedy token %d is not the top one (%d)", i, t, ev->token, ev->top_ids[0]);
        }
    }
    for (int i = 0; i < 4; i++) /* same prompts, greedy: the top 5 is the head of the top 20 */
        for (int t = 0; t < 8; t++)
            CHECK(logs[4 + i].ev[t].token == logs[8 + i].ev[t].token &&
                  !memcmp(logs[4 + i].ev[t].top_ids, logs[8 + i].ev[t].top_ids, 5 * sizeof(int32_t)),
                  "prompt %d token %d: the top 5 differs from the head of the top 20", i, t);
    unload(&l);
}

/* 5,000 requests, all aborted before they could finish: half while waiting in
 * the inbox, half after a step admitted some. Every one ends aborted, having
 * generated less than max_tokens; the pools are back to their baseline. */
typedef struct {
    int done, aborted, generated, longest;
} flood_count;

static void on_flood(const ds_event *ev, void *user) {
    flood_count *c = user;
    if (!ev->finished) return;
    c->done++;
    c->aborted += ev->reason == DS_FINISH_ABORT;
    c->generated += ev->n_generated;
    if (ev->n_generated > c->longest) c->longest = ev->n_generated;
}

static void test_abort_flood(void) {
    enum { N = 5000, MAX_TOKENS = 16 };
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 8, 41);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ds_engine *eng;
    ds_err e = {0};
    REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
    ds_engine_stats base, st;
    ds_engine_stats_get(eng, &base);
    static uint64_t ids[N];
    flood_count c = {0};
    int32_t prompt[8];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 8; k++) prompt[k] = (int32_t)((i * 31 + k * 7) % 1000);
        ds_request_params rp = {.prompt = prompt, .n_prompt = 8, .max_tokens = MAX_TOKENS, .ignore_eos = 1,
                                .on_event = on_flood, .user = &c};
        greedy(&rp.sampling);
        ids[i] = ds_engine_submit(eng, &rp, &e);
        REQUIRE(ids[i], "submit %d: %s", i, e.msg);
        if (i == N / 2) ds_engine_step(eng); /* some are running now, the rest still in the inbox */
    }
    for (int i = 0; i < N; i++) ds_engine_abort(eng, ids[i]);
    int steps = 0;
    while (ds_engine_step(eng) && steps < 4 * N) steps++;
    ds_engine_stats_get(eng, &st);
    printf("     %d ended (%d aborted) in %d steps; %d tokens generated, at most %d by one request\n", c.done, c.aborted,
           steps, c.generated, c.longest);
    CHECK(c.done == N && c.aborted == N && st.aborted == N, "%d of %d ended aborted (stats %lld)", c.aborted, N,
          (long long)st.aborted);
    CHECK(c.longest < MAX_TOKENS, "a request ran to max_tokens (%d) after its abort", c.longest);
    CHECK(steps <= 2, "%d steps after the aborts: aborted requests kept running", steps);
    CHECK(st.running == 0 && st.waiting == 0 && st.state_slots_used == base.state_slots_used,
          "%d running, %d waiting, %d state slots", st.running, st.waiting, st.state_slots_used);
    ds_engine_free(eng);
    unload(&l);
}

/* The model's batch capacity: what ds_engine_required_batch_capacity says is
 * enough for full steps (long prompts fill every step's budget), and one token
 * less is refused when the engine is created, naming both numbers. */
static void test_batch_capacity_contract(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny.gguf", tmpdir);
    loaded l0;
    REQUIRE(load("tiny", &l0) == 0, "load");
    unload(&l0);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.step_tokens = 320;
    ep.prefill_chunk = 128;
    ep.max_running = 8;
    int need = ds_engine_required_batch_capacity(&ep);
    CHECK(need >= ep.step_tokens && need >= ep.prefill_chunk, "capacity %d for steps of %d", need, ep.step_tokens);
    for (int undersized = 0; undersized < 2; undersized++) {
        ds_model_file *f = NULL;
        ds_model *m = NULL;
        ds_err e = {0};
        ds_model_params mp = {.max_batch_tokens = need - undersized};
        REQUIRE(ds_model_open(path, &f, &e) == DS_OK && ds_model_new(f, &mp, &m, &e) == DS_OK, "%s", e.msg);
        ds_engine *eng = NULL;
        ds_status s = ds_engine_new(m, &ep, &eng, &e);
        if (undersized) {
            char a[16], b[16];
            snprintf(a, sizeof a, "%d", need - 1);
            snprintf(b, sizeof b, "%d", need);
            CHECK(s == DS_EINVAL && strstr(e.msg, a) && strstr(e.msg, b), "undersized model: status %d, '%s'", s, e.msg);
        } else if (s != DS_OK) {
            CHECK(0, "a model of the required capacity is refused: %s", e.msg);
        } else {
            make_workload(&W, 16, 43);
            memset(&A, 0, sizeof A);
            for (int i = 0; i < 16; i++) {
                ctxs[i] = (ctx){&A, i};
                ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = 6, .ignore_eos = 1,
                                        .on_event = on_event, .user = &ctxs[i]};
                greedy(&rp.sampling);
                REQUIRE(ds_engine_submit(eng, &rp, &e), "%s", e.msg);
            }
            while (ds_engine_step(eng)) {}
            int ok = 0;
            for (int i = 0; i < 16; i++) ok += A.reason[i] == DS_FINISH_LENGTH && A.n_out[i] == 6;
            CHECK(ok == 16, "%d of 16 requests finished (last error '%s')", ok, last_error);
        }
        ds_engine_free(eng);
        ds_model_free(m);
        ds_model_close(f);
    }
}

/* A failed MTP call (the test hook fails the first one drafting for request
 * 3) fails no request: greedy outputs are those of a run without it, and the
 * failure is counted and logged. */
static void test_draft_failure_reported(void) {
    loaded l;
    REQUIRE(load("tiny", &l) == 0, "load");
    make_workload(&W, 8, 23);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.spec_policy = DS_SPEC_POLICY_REQUEST; /* every request drafts, whatever the batch */
    char log_path[600];
    snprintf(log_path, sizeof log_path, "%s/draft-failure.log", tmpdir);
    ds_engine_stats st[2];
    for (int faulty = 0; faulty < 2; faulty++) {
        results *res = faulty ? &A : &B;
        memset(res, 0, sizeof *res);
        ds_engine *eng;
        ds_err e = {0};
        REQUIRE(ds_engine_new(l.model, &ep, &eng, &e) == DS_OK, "%s", e.msg);
        for (int i = 0; i < 8; i++) {
            ctxs[i] = (ctx){res, i};
            ds_request_params rp = {.prompt = W.toks[i], .n_prompt = W.len[i], .max_tokens = 20, .ignore_eos = 1,
                                    .on_event = on_event, .user = &ctxs[i]};
            greedy(&rp.sampling);
            if (faulty && i == 3) rp.fault = DS_FAULT_DRAFT;
            REQUIRE(ds_engine_submit(eng, &rp, &e), "%s", e.msg);
        }
        /* the engine logs to stderr: catch it in a file for this run */
        fflush(stderr);
        int saved = dup(2);
        FILE *log = fopen(log_path, "w");
        REQUIRE(saved >= 0 && log, "redirect stderr");
        dup2(fileno(log), 2);
        while (ds_engine_step(eng)) {}
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        fclose(log);
        ds_engine_stats_get(eng, &st[faulty]);
        ds_engine_free(eng);
    }
    char text[2048] = "";
    FILE *f = fopen(log_path, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    CHECK(st[0].spec_draft_failures == 0 && st[0].spec_drafted > 0, "the run without the fault: %lld failures, %lld drafts",
          (long long)st[0].spec_draft_failures, (long long)st[0].spec_drafted);
    CHECK(st[1].spec_draft_failures == 1, "%lld draft failures counted, 1 injected", (long long)st[1].spec_draft_failures);
    CHECK(strstr(text, "MTP draft call failed") && strstr(text, "draft step"), "the failure is not logged: '%s'", text);
    for (int i = 0; i < 8; i++)
        CHECK(A.reason[i] == DS_FINISH_LENGTH && A.n_out[i] == 20 && !memcmp(A.out[i], B.out[i], sizeof A.out[i]),
              "request %d: ended with %d after %d tokens, or other tokens than without the failure", i, A.reason[i],
              A.n_out[i]);
    CHECK(st[1].failed == 0 && st[1].finished == 8, "%lld failed, %lld finished", (long long)st[1].failed,
          (long long)st[1].finished);
    unload(&l);
}

static void test_shared_prefix_computed_once(void) {
    test_shared_arrivals("tiny");
    test_shared_arrivals("tiny-qwen3");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-engine-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    setenv("DS_CHECK_INVARIANTS", "1", 1); /* every engine below checks itself after every step */
    RUN(test_refuses_what_cannot_run);
    RUN(test_abort_flood);
    RUN(test_batch_capacity_contract);
    RUN(test_draft_failure_reported);
    RUN(test_fault_hits_one_request);
    RUN(test_fault_phases);
    RUN(test_aborts_free_everything);
    RUN(test_batch_invariance);
    RUN(test_preemption_keeps_outputs);
    RUN(test_cache_on_off_identical);
    RUN(test_shared_prefix_computed_once);
    RUN(test_token_filter);
    RUN(test_filter_error);
    RUN(test_logprobs);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
