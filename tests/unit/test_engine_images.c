/* test_engine_images.c - the engine running requests with images, on the
 * tiny model and a tiny random vision tower (make-model's):
 *   - submit refuses what cannot run, naming the image (no tower, an image
 *     out of the prompt, out of order, a token that is not the pad, a pad
 *     outside every image, a job larger than the vision budget) and leaves
 *     the patches with the caller; a successful submit takes them;
 *   - determinism: the engine's greedy tokens equal a direct ds_model_forward
 *     of the same prompt with the tower's rows and ds_mrope_positions, for a
 *     tower without and with DeepStack;
 *   - text requests in flight with an image request produce the tokens they
 *     produce alone, keep decoding in every step that encodes, and no step
 *     gives the tower more than one step's prefill work (the budget the
 *     engine passes, and the work done: at most one piece over it);
 *   - the vision budget: jobs queue when it is full and it is never passed;
 *   - prefix cache: the same image twice hits past the image and is not
 *     encoded again; another image with the same text never hits past the
 *     image's first token;
 *   - preemption under a small KV budget recomputes identically;
 *   - aborts mid-encoding give everything back.
 * Every engine checks its invariants after every step (DS_CHECK_INVARIANTS). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/model_make.h"
#include "model/mrope.h"
#include "testing.h"

#define MAXREQ 16
#define MAXGEN 16
#define MAXPROMPT 512
#define PAD 999 /* the image pad: any id of the tiny vocabulary */

static char tmpdir[256];

typedef struct {
    ds_model_file *file;
    ds_model *model;
    ds_vision_file *vfile;
    ds_vision *vision;
} rig;

/* The tiny model and its tiny tower (2 blocks of 64), without or with a
 * DeepStack merger after block 0; the text model is the same in both. */
static int rig_open(rig *r, int deepstack) {
    memset(r, 0, sizeof *r);
    char path[512], vpath[512];
    snprintf(path, sizeof path, "%s/tiny-%d.gguf", tmpdir, deepstack);
    snprintf(vpath, sizeof vpath, "%s/mmproj-tiny-%d.gguf", tmpdir, deepstack);
    ds_err e = {0};
    if (access(path, R_OK) != 0 || access(vpath, R_OK) != 0) {
        ds_make_options o = {.shape = "tiny", .dtype = "f32", .format = DS_FORMAT_GGUF, .seed = 11, .scale = 3.0f,
                             .out = path, .mmproj_out = vpath, .deepstack_set = deepstack,
                             .n_deepstack = deepstack, .deepstack = {0}};
        if (ds_make_model(&o, &e)) { printf("make: %s\n", e.msg); return -1; }
    }
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ds_model_params mp = {.max_batch_tokens = ds_engine_required_batch_capacity(&ep)};
    if (ds_model_open(path, &r->file, &e) || ds_model_new(r->file, &mp, &r->model, &e) ||
        ds_vision_open(vpath, &r->vfile, &e) || ds_vision_new(r->model, r->vfile, &r->vision, &e)) {
        printf("open: %s\n", e.msg);
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

/* Random patches of a grid of gh x gw patches (one frame pair), and a hash naming them. */
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

static int image_tokens(const ds_vision *v, const ds_request_image *im) {
    int m = ds_vision_cfg(v)->merge;
    return im->patches.grid_t * im->patches.grid_h * im->patches.grid_w / (m * m);
}

/* A prompt: n_text0 text tokens, the image's pads, n_text1 text tokens (seeded text). */
static int make_prompt(int32_t *out, int n_text0, int n_img, int n_text1, uint32_t seed) {
    int n = 0;
    uint32_t x = seed;
    for (int i = 0; i < n_text0; i++) out[n++] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % 900;
    for (int i = 0; i < n_img; i++) out[n++] = PAD;
    for (int i = 0; i < n_text1; i++) out[n++] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % 900;
    return n;
}

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

static ctx ctxs[MAXREQ];
static char last_error[640];

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

static ds_request_params req_params(const int32_t *prompt, int n, ds_request_image *ims, int n_ims, results *res,
                                    int index, int max_tokens) {
    ctxs[index] = (ctx){res, index};
    ds_request_params rp = {.prompt = prompt, .n_prompt = n, .images = ims, .n_images = n_ims,
                            .max_tokens = max_tokens, .ignore_eos = 1, .on_event = on_event, .user = &ctxs[index]};
    ds_sampling_defaults(&rp.sampling);
    rp.sampling.temperature = 0;
    return rp;
}

static ds_engine *engine(rig *r, const ds_engine_params *ep, size_t vision_budget) {
    ds_engine *g = NULL;
    ds_err e = {0};
    if (ds_engine_new(r->model, ep, &g, &e)) { printf("engine: %s\n", e.msg); return NULL; }
    if (ds_engine_set_vision(g, r->vision, vision_budget, &e)) {
        printf("set vision: %s\n", e.msg);
        ds_engine_free(g);
        return NULL;
    }
    return g;
}

static void drain(ds_engine *g) {
    for (int i = 0; i < 100000 && ds_engine_step(g); i++) {}
}

/* --- submit --- */

static void test_submit_refuses(void) {
    rig r;
    REQUIRE(rig_open(&r, 0) == 0, "rig");
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    int32_t prompt[MAXPROMPT];
    ds_request_image im;
    make_image(r.vision, 4, 4, 1, &im, 10);
    int n_img = image_tokens(r.vision, &im);
    int n = make_prompt(prompt, 10, n_img, 10, 5);
    results res = {0};
    ds_err e = {0};
    float *pixels = im.patches.patches;

    ds_engine *plain;
    REQUIRE(ds_engine_new(r.model, &ep, &plain, &e) == DS_OK, "engine");
    ds_request_params rp = req_params(prompt, n, &im, 1, &res, 0, 4);
    CHECK(ds_engine_submit(plain, &rp, &e) == 0 && e.code == DS_EINVAL && strstr(e.msg, "image 0"),
          "an engine without a tower took an image: %s", e.msg);
    ds_engine_free(plain);

    ds_engine *g = engine(&r, &ep, (size_t)1 << 30);
    REQUIRE(g, "engine");
    struct {
        int first, pad_at, second_first;
        const char *what, *needle;
    } bad[] = {
        {n - n_img + 1, -1, -1, "past the prompt", "image 0"},
        {9, -1, -1, "not on its pads", "image 0"},
        {10, 12, -1, "a text token among its pads", "image 0"},
        {10, -1, 10, "two images overlapping", "image 1"},
        {10, 3, -1, "a pad outside every image", "token 3"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int32_t p2[MAXPROMPT];
        memcpy(p2, prompt, (size_t)n * sizeof *p2);
        if (bad[k].pad_at >= 0) p2[bad[k].pad_at] = bad[k].pad_at == 3 ? PAD : 7;
        ds_request_image ims[2] = {im, im};
        ims[0].first = bad[k].first;
        ims[1].first = bad[k].second_first;
        rp = req_params(p2, n, ims, bad[k].second_first >= 0 ? 2 : 1, &res, 0, 4);
        e = (ds_err){0};
        CHECK(ds_engine_submit(g, &rp, &e) == 0 && e.code == DS_EINVAL && strstr(e.msg, bad[k].needle),
              "%s: submitted, or not naming %s: %s", bad[k].what, bad[k].needle, e.msg);
        CHECK(ims[0].patches.patches == pixels, "%s: a refused submit took the patches", bad[k].what);
    }
    ds_engine_free(g);

    /* a job larger than the budget alone can never run */
    size_t bytes = ds_vision_job_bytes(r.vision, &im.patches);
    g = engine(&r, &ep, bytes - 1);
    REQUIRE(g, "engine");
    rp = req_params(prompt, n, &im, 1, &res, 0, 4);
    e = (ds_err){0};
    CHECK(ds_engine_submit(g, &rp, &e) == 0 && e.code == DS_EINVAL && strstr(e.msg, "image 0") &&
          strstr(e.msg, "budget"), "an image over the vision budget: %s", e.msg);
    CHECK(im.patches.patches == pixels, "a refused submit took the patches");
    ds_engine_free(g);

    /* a successful submit takes them (the caller's copy is emptied; ASan sees them freed once) */
    g = engine(&r, &ep, bytes);
    REQUIRE(g, "engine");
    rp = req_params(prompt, n, &im, 1, &res, 0, 2);
    CHECK(ds_engine_submit(g, &rp, &e) != 0, "submit: %s", e.msg);
    CHECK(im.patches.patches == NULL, "the caller still holds the patches a submit took");
    drain(g);
    CHECK(res.done == 1 && res.reason[0] == DS_FINISH_LENGTH && res.n_out[0] == 2, "the request did not run: %s",
          last_error);
    ds_engine_free(g);
    ds_image_patches_free(&im.patches);
    rig_close(&r);
}

/* --- determinism against a direct forward --- */

/* Greedy tokens of prompt + image by direct model calls: the whole prompt in
 * one call with the tower's rows and M-RoPE positions, then decodes at
 * pos + delta. */
static int direct_greedy(rig *r, const int32_t *prompt, int n, const ds_request_image *im, int n_gen, int32_t *out) {
    const ds_model_config *c = ds_model_cfg(r->model);
    const ds_vision_config *vc = ds_vision_cfg(r->vision);
    int m = vc->merge, n_img = image_tokens(r->vision, im), row = vc->out_embd * (1 + vc->n_deepstack);
    ds_err e = {0};
    float *rows = malloc((size_t)n_img * (size_t)row * sizeof *rows);
    int32_t *pos = malloc((size_t)n * 3 * sizeof *pos);
    const float **embd = calloc((size_t)n, sizeof *embd);
    ds_batch_token *toks = calloc((size_t)n, sizeof *toks);
    float *logits = malloc((size_t)c->n_vocab * sizeof *logits);
    int delta = 0, rc = -1;
    ds_mrope_image mi = {.first = im->first, .grid_t = im->patches.grid_t, .grid_h = im->patches.grid_h / m,
                         .grid_w = im->patches.grid_w / m};
    ds_kv_pool kv = {0};
    ds_state_pool st = {0};
    int n_attn = ds_model_n_attn_layers(r->model);
    int pages[64];
    for (int i = 0; i < 64; i++) pages[i] = i;
    size_t page_bytes = (size_t)n_attn * 16 * (size_t)c->n_head_kv * (size_t)c->head_dim * 2 * sizeof(float);
    if (ds_vision_encode(r->vision, &im->patches, rows, &e) || ds_mrope_positions(n, &mi, 1, pos, &delta, &e) ||
        ds_kv_pool_init(&kv, n_attn, c->n_head_kv, c->head_dim, 16, page_bytes * 64, &e) ||
        ds_state_pool_init(&st, ds_model_n_gdn_layers(r->model), c->conv_kernel, ds_model_conv_dim(r->model),
                           c->lin_v_heads, c->lin_k_dim, c->lin_v_dim, 1, &e)) {
        printf("direct: %s\n", e.msg);
        goto done;
    }
    ds_state_clear(&st, 0);
    for (int i = 0; i < n; i++) {
        toks[i] = (ds_batch_token){.token = prompt[i], .seq = 0, .pos = i, .want_logits = i == n - 1};
        if (i >= im->first && i < im->first + n_img) embd[i] = rows + (size_t)(i - im->first) * (size_t)row;
    }
    ds_batch_seq seq = {.mode = DS_SEQ_PREFILL, .pages = pages, .n_pages = 64, .state_slot = 0};
    ds_batch b = {.tokens = toks, .n_tokens = n, .seqs = &seq, .n_seqs = 1, .logits = logits, .rope_pos = pos,
                  .embd = embd, .n_deepstack = vc->n_deepstack};
    for (int g = 0; g < n_gen; g++) {
        if (ds_model_forward(r->model, &kv, &st, &b, &e)) { printf("direct forward: %s\n", e.msg); goto done; }
        int best = 0;
        for (int v = 1; v < c->n_vocab; v++) best = logits[v] > logits[best] ? v : best;
        out[g] = best;
        int p = n + g;
        toks[0] = (ds_batch_token){.token = best, .seq = 0, .pos = p, .want_logits = 1};
        pos[0] = pos[1] = pos[2] = p + delta;
        seq.mode = DS_SEQ_DECODE;
        b = (ds_batch){.tokens = toks, .n_tokens = 1, .seqs = &seq, .n_seqs = 1, .logits = logits, .rope_pos = pos};
    }
    rc = 0;
done:
    ds_kv_pool_free(&kv);
    ds_state_pool_free(&st);
    free(rows), free(pos), free(embd), free(toks), free(logits);
    return rc;
}

static void determinism(int deepstack) {
    rig r;
    REQUIRE(rig_open(&r, deepstack) == 0, "rig");
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    int32_t prompt[MAXPROMPT];
    ds_request_image im, copy;
    make_image(r.vision, 8, 12, 3, &im, 37);
    int n = make_prompt(prompt, 37, image_tokens(r.vision, &im), 45, 9);
    make_image(r.vision, 8, 12, 3, &copy, 37); /* the engine takes im's patches */
    int32_t want[MAXGEN];
    REQUIRE(direct_greedy(&r, prompt, n, &copy, 10, want) == 0, "direct");
    ds_image_patches_free(&copy.patches);
    for (int spec = 0; spec < 2; spec++) {
        ep.spec_tokens = spec ? 3 : 0;
        ds_engine *g = engine(&r, &ep, (size_t)1 << 30);
        REQUIRE(g, "engine");
        results res = {0};
        ds_request_image mine;
        make_image(r.vision, 8, 12, 3, &mine, 37);
        ds_request_params rp = req_params(prompt, n, &mine, 1, &res, 0, 10);
        ds_err e = {0};
        REQUIRE(ds_engine_submit(g, &rp, &e) != 0, "submit: %s", e.msg);
        drain(g);
        CHECK(res.n_out[0] == 10 && memcmp(res.out[0], want, 10 * sizeof *want) == 0,
              "deepstack %d, speculation %d: the engine's tokens differ from a direct forward (%s)", deepstack, spec,
              last_error);
        ds_engine_free(g);
    }
    ds_image_patches_free(&im.patches);
    rig_close(&r);
}

static void test_same_as_direct_forward(void) { determinism(0); }
static void test_same_as_direct_forward_deepstack(void) { determinism(1); }

/* The largest piece of work the tower does at once on this image: a job advanced one piece at a time. */
static int64_t largest_piece(rig *r, const ds_image_patches *p, int64_t *total) {
    ds_vision_job *j;
    ds_err e = {0};
    int64_t piece = 0;
    if (ds_vision_job_new(r->vision, p, &j, &e) != DS_OK) { printf("job: %s\n", e.msg); return -1; }
    *total = ds_vision_job_remaining_flops(j);
    while (!ds_vision_job_done(j)) {
        int64_t before = ds_vision_job_remaining_flops(j);
        if (ds_vision_run(r->vision, &j, 1, 1, &e) != DS_OK) { printf("run: %s\n", e.msg); piece = -1; break; }
        int64_t d = before - ds_vision_job_remaining_flops(j);
        if (d > piece) piece = d;
    }
    ds_vision_job_free(j);
    return piece;
}

/* --- text alongside an image --- */

static void test_text_unchanged_and_never_stalled(void) {
    rig r;
    REQUIRE(rig_open(&r, 0) == 0, "rig");
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.step_tokens = ep.prefill_chunk = 64; /* a small step, so that the image takes several */
    enum { N_TEXT = 3 };
    int32_t text[N_TEXT][MAXPROMPT], img_prompt[MAXPROMPT];
    int n_text[N_TEXT];
    for (int t = 0; t < N_TEXT; t++) n_text[t] = make_prompt(text[t], 20 + 13 * t, 0, 0, 100 + (uint32_t)t);
    results alone = {0}, mixed = {0};
    ds_err e = {0};
    ds_engine *g = engine(&r, &ep, (size_t)1 << 30);
    REQUIRE(g, "engine");
    for (int t = 0; t < N_TEXT; t++) {
        ds_request_params rp = req_params(text[t], n_text[t], NULL, 0, &alone, t, MAXGEN);
        REQUIRE(ds_engine_submit(g, &rp, &e) != 0, "submit: %s", e.msg);
    }
    drain(g);
    ds_engine_free(g);

    /* the same text requests; once they decode, a large image arrives */
    ds_request_image im;
    make_image(r.vision, 32, 32, 4, &im, 5);
    int n_img = image_tokens(r.vision, &im);
    int n = make_prompt(img_prompt, 5, n_img, 7, 77);
    int64_t total = 0, piece = largest_piece(&r, &im.patches, &total);
    REQUIRE(piece > 0, "piece");
    g = engine(&r, &ep, (size_t)1 << 30);
    REQUIRE(g, "engine");
    for (int t = 0; t < N_TEXT; t++) {
        ds_request_params rp = req_params(text[t], n_text[t], NULL, 0, &mixed, t, MAXGEN);
        REQUIRE(ds_engine_submit(g, &rp, &e) != 0, "submit: %s", e.msg);
    }
    while (mixed.n_out[0] == 0 || mixed.n_out[N_TEXT - 1] == 0) ds_engine_step(g);
    ds_request_params rp = req_params(img_prompt, n, &im, 1, &mixed, N_TEXT, 4);
    REQUIRE(ds_engine_submit(g, &rp, &e) != 0, "submit: %s", e.msg);
    int stalled = 0, encode_steps = 0;
    for (int i = 0; i < 100000; i++) {
        ds_engine_stats s0, s1;
        ds_engine_stats_get(g, &s0);
        int before[N_TEXT];
        for (int t = 0; t < N_TEXT; t++) before[t] = mixed.n_out[t];
        if (!ds_engine_step(g)) break;
        ds_engine_stats_get(g, &s1);
        if (s1.vision_steps == s0.vision_steps) continue;
        encode_steps++;
        for (int t = 0; t < N_TEXT; t++) stalled += mixed.n_out[t] == before[t] && mixed.reason[t] == DS_FINISH_NONE;
    }
    ds_engine_stats st;
    ds_engine_stats_get(g, &st);
    ds_engine_free(g);
    /* one step's prefill: step_tokens tokens through the decoder layers' matrices */
    ds_model_stats ms;
    ds_model_compute_stats(r.file, &ms);
    const ds_model_config *c = ds_model_cfg(r.model);
    double layers = (double)ms.n_params_active - (double)c->n_vocab * c->n_embd * (c->tied_embeddings ? 1 : 2);
    double step_work = layers * ep.step_tokens;
    printf("     image: %lld multiply-adds, largest piece %lld; per step %lld given (one step's prefill %.0f), "
           "%lld at most done, %d steps encoding\n", (long long)total, (long long)piece,
           (long long)st.vision_step_flops, step_work, (long long)st.vision_flops_step_max, encode_steps);
    for (int t = 0; t < N_TEXT; t++)
        CHECK(mixed.n_out[t] == MAXGEN && memcmp(mixed.out[t], alone.out[t], sizeof alone.out[t]) == 0,
              "text request %d changed beside an image", t);
    CHECK(mixed.reason[N_TEXT] == DS_FINISH_LENGTH, "the image request did not finish: %s", last_error);
    CHECK(st.images_encoded == 1 && st.vision_flops == total, "%lld images, %lld of %lld multiply-adds",
          (long long)st.images_encoded, (long long)st.vision_flops, (long long)total);
    CHECK(st.vision_step_flops > 0.8 * step_work && st.vision_step_flops <= 1.2 * step_work,
          "the tower is given %lld multiply-adds per step, one step's prefill is %.0f", (long long)st.vision_step_flops,
          step_work);
    CHECK(st.vision_flops_step_max <= st.vision_step_flops + piece,
          "a step did %lld multiply-adds of encoding, more than its %lld and one piece (%lld)",
          (long long)st.vision_flops_step_max, (long long)st.vision_step_flops, (long long)piece);
    CHECK(encode_steps >= 2 && total > st.vision_step_flops, "the image was meant to take several steps (%d)",
          encode_steps);
    CHECK(stalled == 0, "text decodes were skipped %d times in steps that encoded", stalled);
    rig_close(&r);
}

/* --- the vision budget --- */

/* Three images of several steps' work each: with room for one job, one at a
 * time; with room for all, the step still gives the tower one step's work
 * (and one piece), however many are in flight. */
static void test_budget_queues_jobs(void) {
    rig r;
    REQUIRE(rig_open(&r, 0) == 0, "rig");
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.step_tokens = ep.prefill_chunk = 64;
    enum { N = 3 };
    int32_t prompts[N][MAXPROMPT];
    int n[N];
    ds_request_image ims[N];
    size_t one = 0;
    int64_t total = 0, piece = 0;
    for (int roomy = 0; roomy < 2; roomy++) {
        for (int k = 0; k < N; k++) {
            make_image(r.vision, 32, 32, 20 + (uint32_t)k, &ims[k], 3);
            n[k] = make_prompt(prompts[k], 3, image_tokens(r.vision, &ims[k]), 9, 50 + (uint32_t)k);
        }
        if (!one) {
            one = ds_vision_job_bytes(r.vision, &ims[0].patches);
            piece = largest_piece(&r, &ims[0].patches, &total);
            REQUIRE(piece > 0, "piece");
        }
        ds_engine *g = engine(&r, &ep, roomy ? one * N : one + one / 2);
        REQUIRE(g, "engine");
        results res = {0};
        ds_err e = {0};
        for (int k = 0; k < N; k++) {
            ds_request_params rp = req_params(prompts[k], n[k], &ims[k], 1, &res, k, 3);
            REQUIRE(ds_engine_submit(g, &rp, &e) != 0, "submit: %s", e.msg);
        }
        size_t most = 0;
        while (ds_engine_step(g)) {
            ds_engine_stats st;
            ds_engine_stats_get(g, &st);
            if (st.vision_bytes_used > most) most = st.vision_bytes_used;
        }
        ds_engine_stats st;
        ds_engine_stats_get(g, &st);
        ds_engine_free(g);
        printf("     room for %s: jobs held %zu bytes at most (one: %zu); %lld multiply-adds at most in a step "
               "(%lld given, a piece %lld)\n", roomy ? "all" : "one", most, one, (long long)st.vision_flops_step_max,
               (long long)st.vision_step_flops, (long long)piece);
        CHECK(res.done == N && st.finished == N && st.images_encoded == N, "%d of %d finished (%s), %lld encoded",
              res.done, N, last_error, (long long)st.images_encoded);
        CHECK(roomy ? most > one : most == one, "jobs held %zu bytes at most, one is %zu", most, one);
        CHECK(st.vision_bytes_used == 0, "%zu bytes held at the end", st.vision_bytes_used);
        CHECK(st.vision_flops_step_max <= st.vision_step_flops + piece,
              "room for %s: a step did %lld multiply-adds of encoding, more than its %lld and one piece (%lld)",
              roomy ? "all" : "one", (long long)st.vision_flops_step_max, (long long)st.vision_step_flops,
              (long long)piece);
    }
    rig_close(&r);
}

/* --- prefix cache --- */

static void test_cache_keys_images(void) {
    rig r;
    REQUIRE(rig_open(&r, 0) == 0, "rig");
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.checkpoint_interval = 64;
    int32_t prompt[MAXPROMPT];
    ds_request_image a1, a2, b;
    make_image(r.vision, 16, 16, 7, &a1, 70); /* 64 tokens: [70, 134) */
    make_image(r.vision, 16, 16, 7, &a2, 70); /* the same picture */
    make_image(r.vision, 16, 16, 8, &b, 70);  /* another, same size */
    int n_img = image_tokens(r.vision, &a1);
    int n = make_prompt(prompt, 70, n_img, 60, 3); /* checkpoints at 64, 128 and 192 */
    results res = {0};
    ds_err e = {0};
    ds_engine *g = engine(&r, &ep, (size_t)1 << 30);
    REQUIRE(g, "engine");
    ds_request_image *order[3] = {&a1, &a2, &b};
    ds_engine_stats st[3];
    for (int k = 0; k < 3; k++) {
        ds_request_params rp = req_params(prompt, n, order[k], 1, &res, k, 6);
        REQUIRE(ds_engine_submit(g, &rp, &e) != 0, "submit: %s", e.msg);
        drain(g);
        ds_engine_stats_get(g, &st[k]);
    }
    ds_engine_free(g);
    printf("     cached tokens: %d, %d (same image), %d (another image); image tokens cached %lld\n", res.n_cached[0],
           res.n_cached[1], res.n_cached[2], (long long)st[2].image_tokens_cached);
    CHECK(res.n_cached[1] >= 70 + n_img, "the same image hit only %d tokens (the image ends at %d)", res.n_cached[1],
          70 + n_img);
    CHECK(st[1].images_encoded == 1 && st[1].image_tokens_cached == n_img,
          "the same image was encoded again (%lld encodings, %lld image tokens cached)",
          (long long)st[1].images_encoded, (long long)st[1].image_tokens_cached);
    CHECK(res.n_out[1] == 6 && memcmp(res.out[0], res.out[1], sizeof res.out[0]) == 0,
          "a cache hit over the image changed the answer");
    CHECK(res.n_cached[2] == 64, "another image with the same text hit %d tokens: the text before the image is 64 "
          "(to its last checkpoint), the image starts at 70", res.n_cached[2]);
    CHECK(st[2].images_encoded == 2 && st[2].image_tokens_cached == n_img, "another image was not encoded");
    rig_close(&r);
}

/* --- preemption and aborts --- */

static void run_mix(rig *r, const ds_engine_params *ep, results *res, ds_engine_stats *st) {
    enum { N = 6 };
    static int32_t prompts[N][MAXPROMPT];
    int n[N];
    ds_request_image ims[N];
    memset(res, 0, sizeof *res);
    ds_engine *g = engine(r, ep, (size_t)1 << 30);
    if (!g) return;
    ds_err e = {0};
    for (int k = 0; k < N; k++) {
        int with = k % 3 != 2;
        if (with) make_image(r->vision, 8, 8 + 4 * (k % 3), 30 + (uint32_t)k, &ims[k], 17 + k);
        n[k] = make_prompt(prompts[k], 17 + k, with ? image_tokens(r->vision, &ims[k]) : 0, 30 + 11 * k,
                           60 + (uint32_t)k);
        ds_request_params rp = req_params(prompts[k], n[k], with ? &ims[k] : NULL, with, res, k, 12);
        if (!ds_engine_submit(g, &rp, &e)) printf("submit: %s\n", e.msg);
    }
    drain(g);
    ds_engine_stats_get(g, st);
    ds_engine_free(g);
}

static void test_preemption_recomputes_images(void) {
    rig r;
    REQUIRE(rig_open(&r, 0) == 0, "rig");
    ds_engine_params roomy, tight;
    ds_engine_defaults(&roomy);
    roomy.prefix_cache = 0;
    tight = roomy;
    /* tiny: a page is 16 positions x 1 layer x 2 heads x 64 x K,V floats = 16 KiB; 24 pages hold two requests */
    tight.kv_bytes = (size_t)24 * 16 * 2 * 64 * 2 * 4;
    static results a, b;
    ds_engine_stats sa, sb;
    run_mix(&r, &roomy, &a, &sa);
    CHECK(sa.images_encoded == 4 && sa.finished == 6, "%lld images encoded, %lld requests finished",
          (long long)sa.images_encoded, (long long)sa.finished);
    for (int cache = 0; cache < 2; cache++) { /* with the cache, a recompute may reuse pages over an image */
        tight.prefix_cache = cache;
        tight.checkpoint_interval = 64;
        run_mix(&r, &tight, &b, &sb);
        int same = 0;
        for (int k = 0; k < 6; k++) same += b.n_out[k] == 12 && memcmp(a.out[k], b.out[k], sizeof a.out[k]) == 0;
        printf("     cache %d: %lld preemptions, %d/6 identical\n", cache, (long long)sb.preemptions, same);
        CHECK(sb.preemptions > 0, "cache %d: the KV budget was meant to force preemptions", cache);
        CHECK(same == 6, "cache %d: %d requests changed under preemption (%s)", cache, 6 - same, last_error);
        CHECK(sb.vision_bytes_used == 0, "cache %d: %zu vision bytes held at the end", cache, sb.vision_bytes_used);
    }
    rig_close(&r);
}

static void test_abort_mid_encoding(void) {
    rig r;
    REQUIRE(rig_open(&r, 0) == 0, "rig");
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.step_tokens = ep.prefill_chunk = 64;
    int32_t prompt[MAXPROMPT];
    ds_request_image im;
    make_image(r.vision, 32, 32, 9, &im, 4);
    int n = make_prompt(prompt, 4, image_tokens(r.vision, &im), 4, 1);
    ds_engine *g = engine(&r, &ep, (size_t)1 << 30);
    REQUIRE(g, "engine");
    results res = {0};
    ds_err e = {0};
    ds_request_params rp = req_params(prompt, n, &im, 1, &res, 0, 4);
    uint64_t id = ds_engine_submit(g, &rp, &e);
    REQUIRE(id, "submit: %s", e.msg);
    ds_engine_step(g);
    ds_engine_stats st;
    ds_engine_stats_get(g, &st);
    CHECK(st.vision_bytes_used > 0 && st.images_encoded == 0, "the image was meant to be mid-encoding");
    ds_engine_abort(g, id);
    drain(g);
    ds_engine_stats_get(g, &st);
    CHECK(res.reason[0] == DS_FINISH_ABORT && st.vision_bytes_used == 0 && st.kv_pages_used == 0,
          "after the abort: reason %d, %zu vision bytes, %d pages held", res.reason[0], st.vision_bytes_used,
          st.kv_pages_used);
    ds_engine_free(g);
    rig_close(&r);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-engine-images-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    setenv("DS_CHECK_INVARIANTS", "1", 1);
    RUN(test_submit_refuses);
    RUN(test_same_as_direct_forward);
    RUN(test_same_as_direct_forward_deepstack);
    RUN(test_text_unchanged_and_never_stalled);
    RUN(test_budget_queues_jobs);
    RUN(test_cache_keys_images);
    RUN(test_preemption_recomputes_images);
    RUN(test_abort_mid_encoding);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
