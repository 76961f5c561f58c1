/* test_engine_kv_events.c - the engine's KV events, judged as a router
 * judges them: a router keeps its own index built from the popped events
 * alone (its key of a block = a chain hash over the parent's key, the
 * block's token ids and its extra keys, recomputed as llm-d does; a block
 * whose parent it does not know is dropped) and predicts, before each
 * request runs, how many prompt tokens it will find cached. Over a few
 * hundred requests one after another, with small pools, that prediction
 * must equal the engine's n_cached every time:
 *   - the tiny hybrid model (event block = checkpoint interval 64, page 16):
 *     shared prefixes, branches at and off block boundaries, exact repeats,
 *     evictions of pages and of checkpoints, requests with images (the same
 *     picture hits past itself, another picture with the same text does
 *     not), and a publisher that stalls while the ring is full, so that the
 *     queue drops a withdrawal (then AllBlocksCleared and the blocks again);
 *   - the attention-only tiny model (event block = page);
 *   - the first event is AllBlocksCleared; stored blocks carry real token
 *     ids (image pads, never the cache's image keys) and block_size tokens;
 *   - an engine with KV events on a hybrid model refuses a checkpoint
 *     interval of 0, naming it.
 * Every engine checks its invariants after every step. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/kv_events.h"
#include "model/model_make.h"
#include "testing.h"

#define PAD 999 /* the image pad: any id of the tiny vocabulary */
#define MAXPROMPT 512
#define MAXIMG 2

static char tmpdir[256];

/* --- the router: its own index, from the events alone --- */

typedef struct {
    uint64_t engine_hash, key;
} entry;

typedef struct {
    entry e[4096];
    int n;
    int block;                  /* tokens per block, as the engine says */
    int64_t stored, removed, cleared, orphans, events;
    int first_type;             /* the first event's type */
    int bad;                    /* events a router would reject */
    char why[200];
} router;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The router's key of a block: its own chain, independent of our hashes. */
static uint64_t chain_key(int has_parent, uint64_t parent, const int32_t *tokens, int n,
                          const uint8_t (*extra)[DS_KV_HASH_BYTES], int n_extra) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &has_parent, sizeof has_parent);
    if (has_parent) h = fnv(h, &parent, sizeof parent);
    h = fnv(h, tokens, (size_t)n * sizeof *tokens);
    h = fnv(h, &n_extra, sizeof n_extra);
    for (int k = 0; k < n_extra; k++) h = fnv(h, extra[k], DS_KV_HASH_BYTES);
    return h;
}

static entry *find_engine_hash(router *r, uint64_t h) {
    for (int i = 0; i < r->n; i++)
        if (r->e[i].engine_hash == h) return &r->e[i];
    return NULL;
}

static int has_key(const router *r, uint64_t key) {
    for (int i = 0; i < r->n; i++)
        if (r->e[i].key == key) return 1;
    return 0;
}

static void apply(router *r, const ds_kv_event *ev, int n_vocab) {
    if (r->events++ == 0) r->first_type = ev->type;
    if (ev->type == DS_KV_ALL_CLEARED) {
        r->n = 0;
        r->cleared++;
    } else if (ev->type == DS_KV_BLOCK_REMOVED) {
        entry *x = find_engine_hash(r, ev->hash);
        if (x) *x = r->e[--r->n];
        r->removed++;
    } else if (ev->type == DS_KV_BLOCK_STORED) {
        r->stored++;
        if (ev->n_tokens != r->block && !r->bad++)
            snprintf(r->why, sizeof r->why, "a block of %d tokens, not %d", ev->n_tokens, r->block);
        for (int i = 0; i < ev->n_tokens; i++)
            if ((ev->tokens[i] < 0 || ev->tokens[i] >= n_vocab) && !r->bad++)
                snprintf(r->why, sizeof r->why, "token %d of a block is %d, not a vocabulary id", i, ev->tokens[i]);
        uint64_t parent = 0;
        if (ev->has_parent) {
            entry *p = find_engine_hash(r, ev->parent_hash);
            if (!p) { /* as llm-d: a block whose parent is unknown is not indexed */
                r->orphans++;
                return;
            }
            parent = p->key;
        }
        uint64_t key = chain_key(ev->has_parent, parent, ev->tokens, ev->n_tokens, ev->extra, ev->n_extra);
        entry *x = find_engine_hash(r, ev->hash);
        if (!x && r->n < (int)(sizeof r->e / sizeof r->e[0])) x = &r->e[r->n++];
        if (x) *x = (entry){ev->hash, key};
    }
}

static void pump(router *r, ds_kv_event_queue *q, int n_vocab) {
    ds_kv_event ev;
    while (ds_kv_event_pop(q, &ev)) apply(r, &ev, n_vocab);
}

typedef struct {
    int first, n;
    uint8_t hash[DS_KV_HASH_BYTES];
} img_ref;

/* The longest chain of the prompt's blocks in the index, leaving one token to compute. */
static int predict(const router *r, const int32_t *prompt, int n, const img_ref *im, int n_im) {
    int E = r->block, hit = 0;
    uint64_t parent = 0;
    for (int b = 0; (b + 1) * E < n; b++) {
        uint8_t extra[MAXIMG][DS_KV_HASH_BYTES];
        int n_extra = 0;
        for (int k = 0; k < n_im; k++)
            if (im[k].first < (b + 1) * E && im[k].first + im[k].n > b * E)
                memcpy(extra[n_extra++], im[k].hash, DS_KV_HASH_BYTES);
        uint64_t key = chain_key(b > 0, parent, prompt + (size_t)b * E, E, (const uint8_t (*)[DS_KV_HASH_BYTES])extra,
                                 n_extra);
        if (!has_key(r, key)) break;
        parent = key;
        hit = (b + 1) * E;
    }
    return hit;
}

/* --- the model, with a tiny vision tower for the hybrid one --- */

typedef struct {
    ds_model_file *file;
    ds_model *model;
    ds_vision_file *vfile;
    ds_vision *vision;
} rig;

static int rig_open(rig *r, const char *shape, int with_vision) {
    memset(r, 0, sizeof *r);
    char path[512], vpath[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, shape);
    snprintf(vpath, sizeof vpath, "%s/mmproj-%s.gguf", tmpdir, shape);
    ds_err e = {0};
    ds_make_options o = {.shape = shape, .dtype = "f32", .format = DS_FORMAT_GGUF, .seed = 11, .scale = 3.0f,
                         .out = path, .mmproj_out = with_vision ? vpath : NULL};
    if (ds_make_model(&o, &e)) { printf("make: %s\n", e.msg); return -1; }
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ds_model_params mp = {.max_batch_tokens = ds_engine_required_batch_capacity(&ep)};
    if (ds_model_open(path, &r->file, &e) || ds_model_new(r->file, &mp, &r->model, &e)) {
        printf("open: %s\n", e.msg);
        return -1;
    }
    if (with_vision && (ds_vision_open(vpath, &r->vfile, &e) || ds_vision_new(r->model, r->vfile, &r->vision, &e))) {
        printf("vision: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static void rig_close(rig *r) {
    ds_vision_free(r->vision);
    ds_vision_close(r->vfile);
    ds_model_free(r->model);
    ds_model_close(r->file);
}

/* Random patches of a gh x gw grid, seeded, and a hash naming them. */
static void make_image(const ds_vision *v, int gh, int gw, uint32_t seed, ds_request_image *im, int first) {
    const ds_vision_config *vc = ds_vision_cfg(v);
    memset(im, 0, sizeof *im);
    im->first = first;
    ds_image_patches *p = &im->patches;
    p->grid_t = 1, p->grid_h = gh, p->grid_w = gw;
    p->patch_dim = 3 * vc->temporal_patch * vc->patch_size * vc->patch_size;
    size_t n = (size_t)gh * (size_t)gw * (size_t)p->patch_dim;
    p->patches = malloc(n * sizeof *p->patches);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p->patches[i] = (float)(x >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    for (int i = 0; i < 32; i++) im->hash[i] = (uint8_t)(seed * 31u + (uint32_t)i * 7u);
}

/* --- the traffic --- */

typedef struct {
    int n_cached, done;
    ds_finish reason;
} outcome;

static void on_event(const ds_event *ev, void *user) {
    outcome *o = user;
    if (!ev->finished) return;
    o->n_cached = ev->n_cached;
    o->reason = ev->reason;
    o->done = 1;
}

static uint32_t rng;
static uint32_t rnd(uint32_t n) {
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % n;
}

#define N_DOCS 4
#define DOC_LEN 400
static int32_t docs[N_DOCS][DOC_LEN];

typedef struct {
    int32_t prompt[MAXPROMPT];
    int n;
    img_ref im[MAXIMG];
    uint32_t im_seed[MAXIMG];
    int n_im;
} request;

/* A prompt: a prefix of one of the documents (cut on a block boundary, or
 * off it), then a tail of its own; now and then an earlier prompt again. */
static void next_request(request *q, request *history, int n_history, int E, int images, int i) {
    if (n_history > 0 && rnd(6) == 0) {
        *q = history[rnd((uint32_t)n_history)];
        return;
    }
    memset(q, 0, sizeof *q);
    int d = (int)rnd(N_DOCS);
    int cut = rnd(2) ? (int)(1 + rnd(5)) * E : (int)(10 + rnd(300));
    if (cut > DOC_LEN) cut = DOC_LEN;
    memcpy(q->prompt, docs[d], (size_t)cut * sizeof *q->prompt);
    int n = cut, tail = (int)rnd(40);
    for (int k = 0; k < tail; k++) q->prompt[n++] = (int32_t)(500 + rnd(400));
    q->n = n;
    if (images && i % 10 == 3) {
        /* text of document 0, an image straddling pages, more text, a second image: one of four pictures */
        int first0 = 70, n0 = 24, first1 = 100, n1 = 16;
        memcpy(q->prompt, docs[0], 130 * sizeof *q->prompt);
        for (int k = 0; k < n0; k++) q->prompt[first0 + k] = PAD;
        for (int k = 0; k < n1; k++) q->prompt[first1 + k] = PAD;
        q->n = 130 + (int)rnd(60);
        for (int k = 130; k < q->n; k++) q->prompt[k] = (int32_t)(500 + rnd(400));
        q->n_im = 2;
        q->im_seed[0] = 1;
        q->im_seed[1] = 2 + rnd(2) * (uint32_t)(1 + rnd(2)); /* 2, 3 or 4: the same second picture or another */
        q->im[0].first = first0, q->im[0].n = n0;
        q->im[1].first = first1, q->im[1].n = n1;
    }
}

typedef struct {
    int requests, unjudged, mismatches, image_hits, image_requests;
    uint64_t filler_drops;
    int64_t predicted_tokens, prompt_tokens;
    ds_engine_stats st;
    ds_kv_event_counts qc;
    router r;
} run_result;

static request history[512];

/* Runs n requests one after another, each predicted from the events first. */
static int run_traffic(rig *rg, const ds_engine_params *ep, int n, int images, uint32_t seed, int stall_at,
                       run_result *res) {
    memset(res, 0, sizeof *res);
    rng = seed;
    for (int d = 0; d < N_DOCS; d++)
        for (int k = 0; k < DOC_LEN; k++) docs[d][k] = (int32_t)(1 + rnd(480));
    ds_engine *g = NULL;
    ds_err e = {0};
    if (ds_engine_new(rg->model, ep, &g, &e)) { printf("engine: %s\n", e.msg); return -1; }
    if (images && ds_engine_set_vision(g, rg->vision, (size_t)64 << 20, &e)) {
        printf("vision: %s\n", e.msg);
        ds_engine_free(g);
        return -1;
    }
    int n_vocab = 1000;
    router *r = &res->r;
    r->block = ds_engine_kv_block_size(g);
    int stalled = 0;
    for (int i = 0; i < n; i++) {
        /* the publisher has sent everything; an idle engine flushes what waited for room */
        for (int k = 0; k < 3 && !stalled; k++) {
            pump(r, ep->kv_events, n_vocab);
            ds_engine_step(g);
        }
        if (!stalled) pump(r, ep->kv_events, n_vocab);
        request *q = &history[i];
        next_request(q, history, i, r->block, images, i);
        ds_request_image ims[MAXIMG];
        for (int k = 0; k < q->n_im; k++) {
            make_image(rg->vision, k == 0 ? 8 : 8, k == 0 ? 12 : 8, q->im_seed[k], &ims[k], q->im[k].first);
            memcpy(q->im[k].hash, ims[k].hash, DS_KV_HASH_BYTES);
        }
        /* a router that stopped reading cannot predict: requests sent meanwhile are not judged */
        int judged = !stalled, predicted = predict(r, q->prompt, q->n, q->im, q->n_im);
        outcome o = {0};
        ds_request_params rp = {.prompt = q->prompt, .n_prompt = q->n, .images = q->n_im ? ims : NULL,
                                .n_images = q->n_im, .max_tokens = 2, .ignore_eos = 1, .on_event = on_event,
                                .user = &o};
        ds_sampling_defaults(&rp.sampling);
        rp.sampling.temperature = 0;
        if (!ds_engine_submit(g, &rp, &e)) {
            printf("submit %d: %s\n", i, e.msg);
            for (int k = 0; k < q->n_im; k++) free(ims[k].patches.patches);
            ds_engine_free(g);
            return -1;
        }
        if (i == stall_at) {
            /* the publisher stops reading, and the ring is full to the last byte (filled here, on the engine's
             * thread, with removals of blocks nobody knows): the engine's next withdrawal is dropped */
            stalled = 1;
            ds_kv_event filler = {.type = DS_KV_BLOCK_REMOVED, .hash = UINT64_MAX};
            while (ds_kv_event_push(ep->kv_events, &filler)) {}
            ds_kv_event_counts c;
            ds_kv_event_counts_get(ep->kv_events, &c);
            res->filler_drops = c.dropped; /* the filler's last push */
        }
        for (int s = 0; s < 100000 && !o.done; s++) {
            ds_engine_step(g);
            if (!stalled) pump(r, ep->kv_events, n_vocab);
        }
        if (stalled) {
            ds_kv_event_counts c;
            ds_kv_event_counts_get(ep->kv_events, &c);
            if (c.dropped > res->filler_drops || i > stall_at + 30) stalled = 0;
        }
        if (!judged) {
            res->unjudged++;
            continue;
        }
        res->requests++;
        res->prompt_tokens += q->n;
        res->predicted_tokens += predicted;
        if (q->n_im) {
            res->image_requests++;
            res->image_hits += o.n_cached > q->im[0].first;
        }
        if (!o.done || o.reason != DS_FINISH_LENGTH || predicted != o.n_cached) {
            if (res->mismatches++ < 5)
                printf("     request %d (%d tokens, %d images): predicted %d, cached %d (done %d, reason %d)\n", i, q->n,
                       q->n_im, predicted, o.n_cached, o.done, (int)o.reason);
        }
    }
    pump(r, ep->kv_events, n_vocab);
    ds_engine_stats_get(g, &res->st);
    ds_kv_event_counts_get(ep->kv_events, &res->qc);
    ds_engine_free(g);
    return 0;
}

static void report(const char *what, const run_result *x) {
    printf("     %s: %d requests (%d more sent while the router stalled), %d mispredicted; %lld of %lld prompt tokens predicted cached; events: %lld stored, "
           "%lld removed, %lld cleared, %llu dropped; %lld evicted pages, %lld evicted checkpoints (pools: %d pages, %d "
           "checkpoints); %d/%d image requests hit past their first image\n",
           what, x->requests, x->unjudged, x->mismatches, (long long)x->predicted_tokens, (long long)x->prompt_tokens,
           (long long)x->r.stored, (long long)x->r.removed, (long long)x->r.cleared,
           (unsigned long long)(x->qc.dropped - x->filler_drops), (long long)x->st.evicted_pages, (long long)x->st.evicted_checkpoints,
           x->st.kv_pages_total, x->st.checkpoint_slots_total, x->image_hits, x->image_requests);
}

static void base_params(ds_engine_params *ep, ds_kv_event_queue *q) {
    ds_engine_defaults(ep);
    ep->page_size = 16;
    ep->checkpoint_interval = 64;
    ep->spec_tokens = 0;
    ep->max_running = 2;
    ep->kv_events = q;
    ep->check_invariants = 1;
}

static void test_hybrid_predicted(void) {
    rig rg;
    REQUIRE(rig_open(&rg, "tiny", 1) == 0, "rig");
    ds_kv_event_queue *q = ds_kv_event_queue_new(4096); /* about a dozen blocks: small enough to drop */
    REQUIRE(q, "queue");
    ds_engine_params ep;
    base_params(&ep, q);
    /* tiny: a page is 16 KiB; 64 pages hold about three prompts */
    ep.kv_bytes = (size_t)64 * 16 * 2 * 64 * 2 * 4;
    ep.state_bytes = (size_t)4 << 20;
    ep.cache_state_bytes = (size_t)800 << 10; /* ten checkpoints of about 80 KiB */
    int n = ds_test_scaled(300);
    run_result *x = calloc(1, sizeof *x);
    REQUIRE(x, "memory");
    if (run_traffic(&rg, &ep, n, 1, 17, n / 2, x) == 0) {
        report("hybrid", x);
        CHECK(x->r.bad == 0, "a stored block a router would reject: %s", x->r.why);
        CHECK(x->r.first_type == DS_KV_ALL_CLEARED, "the first event is type %d, not AllBlocksCleared",
              x->r.first_type);
        CHECK(x->requests + x->unjudged == n && x->unjudged <= 31 && x->mismatches == 0, "%d of %d requests found a cache other than predicted",
              x->mismatches, x->requests);
        CHECK(x->predicted_tokens > x->prompt_tokens / 5, "the traffic barely hits the cache");
        CHECK(x->st.evicted_pages > 0 && x->st.evicted_checkpoints > 0, "the pools were meant to force evictions");
        CHECK(x->r.removed > 0, "no block was withdrawn");
        CHECK(x->qc.dropped > x->filler_drops && x->r.cleared >= 2, "the stalled publisher was meant to drop an event and the "
                                                       "engine to clear and announce again");
        CHECK(x->image_requests > 0 && x->image_hits > 0 && x->image_hits < x->image_requests,
              "image requests: %d of %d hit past their first image", x->image_hits, x->image_requests);
    } else {
        CHECK(0, "the traffic did not run");
    }
    free(x);
    ds_kv_event_queue_free(q);
    rig_close(&rg);
}

static void test_attention_only_predicted(void) {
    rig rg;
    REQUIRE(rig_open(&rg, "tiny-qwen3", 0) == 0, "rig");
    ds_kv_event_queue *q = ds_kv_event_queue_new(1 << 14);
    REQUIRE(q, "queue");
    ds_engine_params ep;
    base_params(&ep, q);
    ep.kv_bytes = (size_t)3 << 19; /* 48 pages of 32 KiB: about two prompts */
    int n = ds_test_scaled(150);
    run_result *x = calloc(1, sizeof *x);
    REQUIRE(x, "memory");
    if (run_traffic(&rg, &ep, n, 0, 29, -1, x) == 0) {
        report("attention only", x);
        CHECK(x->r.block == 16, "the event block of a model without DeltaNet layers is %d, not the page", x->r.block);
        CHECK(x->r.bad == 0, "a stored block a router would reject: %s", x->r.why);
        CHECK(x->r.first_type == DS_KV_ALL_CLEARED, "the first event is type %d", x->r.first_type);
        CHECK(x->requests + x->unjudged == n && x->unjudged <= 31 && x->mismatches == 0, "%d of %d requests found a cache other than predicted",
              x->mismatches, x->requests);
        CHECK(x->predicted_tokens > x->prompt_tokens / 5, "the traffic barely hits the cache");
        CHECK(x->st.evicted_pages > 0 && x->r.removed > 0, "the pool was meant to force evictions");
    } else {
        CHECK(0, "the traffic did not run");
    }
    free(x);
    ds_kv_event_queue_free(q);
    rig_close(&rg);
}

static void test_refuses_interval_zero(void) {
    rig rg;
    REQUIRE(rig_open(&rg, "tiny", 0) == 0, "rig");
    ds_kv_event_queue *q = ds_kv_event_queue_new(4096);
    REQUIRE(q, "queue");
    ds_engine_params ep;
    base_params(&ep, q);
    ep.checkpoint_interval = 0;
    ds_engine *g = NULL;
    ds_err e = {0};
    ds_status s = ds_engine_new(rg.model, &ep, &g, &e);
    CHECK(s == DS_EINVAL && !g && strstr(e.msg, "checkpoint interval"), "status %d: %s", (int)s, e.msg);
    ds_engine_free(g);
    ep.kv_events = NULL; /* without events an interval of 0 stays valid */
    s = ds_engine_new(rg.model, &ep, &g, &e);
    CHECK(s == DS_OK, "%s", e.msg);
    ds_engine_free(g);
    ds_kv_event_queue_free(q);
    rig_close(&rg);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-kvev-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_refuses_interval_zero);
    RUN(test_hybrid_predicted);
    RUN(test_attention_only_predicted);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
