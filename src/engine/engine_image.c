/* engine_image.c - requests with images: their validation, the encoding of
 * their images inside the engine's steps, and what a batch row of theirs
 * carries (M-RoPE position, image row).
 *
 * DESIGN NOTES
 * Encoding is scheduled like a prefill. Each step, after the decodes are in
 * the batch, ds_vision_run advances the jobs of running requests by at most
 * vision_step_flops multiply-adds: step_tokens times what one prefill token
 * costs through the decoder layers (token_macs: the layers' weight matrices,
 * experts counted as the used ones; attention's quadratic part and the
 * output head, which prefill runs once per chunk, left out). So the step in
 * which an image is encoded carries about one step's prefill work on top of
 * its decodes, never a whole image: a 1024x1024 image (4096 patches through
 * 27 blocks) is spread over many steps while the other sequences decode.
 * The tower always advances each job it is given by one piece (about a
 * block), so a step takes jobs, oldest first, only while their average
 * pieces fit that budget (always one): a step overshoots by about one piece
 * at most, however many images are in flight. The work done is taken out of that step's
 * prefill tokens, but never more than half of them, so text prefill goes on
 * while images encode.
 *
 * A job holds its image's activations (ds_vision_job_bytes) from the
 * engine's vision budget: jobs start oldest request first while the budget
 * lasts and queue behind the first one that does not fit (submit refused
 * any image that does not fit alone, so the queue always moves). A request
 * encodes one image at a time, the next one its prefill needs, from
 * admission on; a preempted request drops its job. A finished job's rows
 * are copied into the request (kept to its end: a recompute after a
 * preemption needs them) and its patches freed.
 *
 * Prefill stops before an image whose rows are not ready, at a multiple of
 * DS_DELTANET_CHUNK (so the cut changes none of the request's arithmetic)
 * that leaves the image's first token out of the chunk and of the MTP head's
 * catch-up, which reads the token after each position.
 *
 * Prefix cache keys: an image token's key is -1 - 31 bits of a hash of the
 * image's SHA-256, its grid and the token's index in the image: negative,
 * so never a vocabulary id, and the same for the same picture only. The
 * cached KV and DeltaNet state of a page then stand for that image. A
 * different picture with the same text matches a page only if every image
 * token in it agrees in 31 bits (one token: 2^-31, a full page of 16:
 * 2^-496). An image entirely inside a reused prefix is not encoded at all.
 * Runs on the engine thread except ds_image_req_init (submit). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "model/mrope.h"

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t image_seed(const uint8_t hash[32], const ds_image_patches *p) {
    uint64_t h = mix64(((uint64_t)(uint32_t)p->grid_t << 42) ^ ((uint64_t)(uint32_t)p->grid_h << 21) ^
                       (uint64_t)(uint32_t)p->grid_w);
    for (int w = 0; w < 4; w++) {
        uint64_t v;
        memcpy(&v, hash + 8 * w, sizeof v);
        h = mix64(h ^ v);
    }
    return h;
}

static int32_t image_key(uint64_t seed, int i) { return -1 - (int32_t)(mix64(seed ^ (uint64_t)(uint32_t)i) >> 33); }

ds_status ds_image_req_init(ds_engine *g, req *r, const ds_request_params *rp, ds_err *e) {
    if (rp->n_images == 0) return DS_OK;
    if (rp->n_images < 0 || !rp->images)
        return ds_fail(e, DS_EINVAL, "the request says %d images but gives none", rp->n_images);
    if (!g->vision)
        return ds_fail(e, DS_EINVAL, "image 0: this model takes no images (no vision tower is loaded)");
    const ds_vision_config *vc = ds_vision_cfg(g->vision);
    int merge = vc->merge, patch_dim = 3 * vc->temporal_patch * vc->patch_size * vc->patch_size;
    int n_prompt = rp->n_prompt, prev_end = 0;
    int32_t pad = -1;
    for (int k = 0; k < rp->n_images; k++) {
        const ds_request_image *im = &rp->images[k];
        const ds_image_patches *p = &im->patches;
        if (!p->patches || p->grid_t < 1 || p->grid_h < merge || p->grid_w < merge || p->grid_h % merge ||
            p->grid_w % merge || (int64_t)p->grid_t * p->grid_h * p->grid_w / (merge * merge) > n_prompt)
            return ds_fail(e, DS_EINVAL, "image %d: a grid of %d x %d x %d patches (%s) is not %d x %d merge groups "
                                         "that fit the prompt of %d tokens", k, p->grid_t, p->grid_h, p->grid_w,
                           p->patches ? "with pixels" : "without pixels", merge, merge, n_prompt);
        if (p->patch_dim != patch_dim)
            return ds_fail(e, DS_EINVAL, "image %d: patches of %d values, the tower takes %d (3 x %d x %d x %d)", k,
                           p->patch_dim, patch_dim, vc->temporal_patch, vc->patch_size, vc->patch_size);
        int n = p->grid_t * p->grid_h * p->grid_w / (merge * merge);
        if (im->first < prev_end)
            return ds_fail(e, DS_EINVAL, "image %d starts at prompt token %d, before %s ends (token %d): images go in "
                                         "prompt order without overlapping", k, im->first,
                           k ? "the previous image" : "the prompt's start", prev_end);
        if (im->first > n_prompt - n)
            return ds_fail(e, DS_EINVAL, "image %d: its %d tokens from prompt token %d run past the prompt's %d", k, n,
                           im->first, n_prompt);
        int32_t t0 = rp->prompt[im->first];
        if (k > 0 && t0 != pad)
            return ds_fail(e, DS_EINVAL, "image %d: its first token is %d, but image 0's (the image pad token) is %d",
                           k, t0, pad);
        pad = t0;
        for (int i = im->first; i < im->first + n; i++)
            if (rp->prompt[i] != pad)
                return ds_fail(e, DS_EINVAL, "image %d: prompt token %d is %d, not the image pad token %d (an image "
                                             "of %d x %d merge groups takes %d pads from token %d)", k, i,
                               rp->prompt[i], pad, p->grid_h / merge, p->grid_w / merge, n, im->first);
        size_t bytes = ds_vision_job_bytes(g->vision, p);
        if (bytes > g->vision_budget)
            return ds_fail(e, DS_EINVAL, "image %d: encoding it takes %zu bytes, more than the vision budget of %zu "
                                         "(a smaller image, or a larger budget)", k, bytes, g->vision_budget);
        prev_end = im->first + n;
    }
    /* a pad outside every image would silently be a text token: the prompt and the images disagree */
    for (int i = 0, k = 0; i < n_prompt; i++) {
        while (k < rp->n_images && i >= rp->images[k].first + rp->images[k].patches.grid_t *
                                             rp->images[k].patches.grid_h * rp->images[k].patches.grid_w /
                                             (merge * merge))
            k++;
        if (rp->prompt[i] == pad && (k == rp->n_images || i < rp->images[k].first))
            return ds_fail(e, DS_EINVAL, "prompt token %d is the image pad token %d but belongs to none of the %d "
                                         "images", i, pad, rp->n_images);
    }
    r->images = calloc((size_t)rp->n_images, sizeof *r->images);
    r->rope_pos = malloc((size_t)n_prompt * 3 * sizeof *r->rope_pos);
    r->keys = malloc((size_t)n_prompt * sizeof *r->keys);
    r->spans = malloc((size_t)rp->n_images * sizeof *r->spans);
    ds_mrope_image *mi = malloc((size_t)rp->n_images * sizeof *mi);
    if (!r->images || !r->rope_pos || !r->keys || !r->spans || !mi) {
        free(mi);
        return ds_fail(e, DS_ENOMEM, "out of memory for the request's images");
    }
    r->n_images = rp->n_images;
    memcpy(r->keys, rp->prompt, (size_t)n_prompt * sizeof *r->keys);
    for (int k = 0; k < rp->n_images; k++) {
        const ds_request_image *im = &rp->images[k];
        req_image *ri = &r->images[k];
        ri->first = im->first;
        ri->n = im->patches.grid_t * im->patches.grid_h * im->patches.grid_w / (merge * merge);
        ri->patches = im->patches; /* owned once submit succeeds (r->owns_patches) */
        memcpy(ri->hash, im->hash, sizeof ri->hash);
        uint64_t seed = image_seed(im->hash, &im->patches);
        for (int i = 0; i < ri->n; i++) r->keys[ri->first + i] = image_key(seed, i);
        r->spans[k] = (ds_prefix_image){.first = ri->first, .n = ri->n, .hash = ri->hash};
        mi[k] = (ds_mrope_image){.first = ri->first, .grid_t = im->patches.grid_t,
                                 .grid_h = im->patches.grid_h / merge, .grid_w = im->patches.grid_w / merge};
    }
    ds_status s = ds_mrope_positions(n_prompt, mi, rp->n_images, r->rope_pos, &r->rope_delta, e);
    free(mi);
    return s;
}

void ds_image_req_free(req *r) {
    for (int k = 0; k < r->n_images; k++) {
        req_image *ri = &r->images[k];
        ds_vision_job_free(ri->job);
        if (r->owns_patches) ds_image_patches_free(&ri->patches);
        free(ri->rows);
    }
    free(r->images);
    free(r->rope_pos);
    free(r->keys);
    free(r->spans);
    r->spans = NULL;
    r->images = NULL;
    r->rope_pos = r->keys = NULL;
    r->n_images = 0;
}

void ds_image_release_job(ds_engine *g, req *r) {
    for (int k = 0; k < r->n_images; k++) {
        req_image *ri = &r->images[k];
        if (!ri->job) continue;
        ds_vision_job_free(ri->job);
        ri->job = NULL;
        g->vision_used -= ri->job_bytes;
        ri->job_bytes = 0;
    }
}

const int32_t *ds_image_keys(const req *r) { return r->keys ? r->keys : r->tokens; }

int ds_image_prefill_end(const ds_engine *g, const req *r, int from, int end) {
    (void)g;
    for (int k = 0; k < r->n_images; k++) {
        const req_image *ri = &r->images[k];
        if (ri->rows || ri->first + ri->n <= from) continue; /* ready, or behind */
        if (ri->first > end) break;                          /* past this chunk (the MTP head reads token end) */
        int before = ri->first > 0 ? ri->first - 1 : 0;     /* the MTP head reads first from position first - 1 */
        int cut = before / DS_DELTANET_CHUNK * DS_DELTANET_CHUNK;
        return cut > from ? cut : from;
    }
    return end;
}

/* The image r's prefill needs next that has no rows (NULL: none). */
static req_image *next_image(req *r) {
    for (int k = 0; k < r->n_images; k++) {
        req_image *ri = &r->images[k];
        if (!ri->rows && ri->first + ri->n > r->n_computed) return ri;
    }
    return NULL;
}

static req_image *job_image(req *r) {
    for (int k = 0; k < r->n_images; k++)
        if (r->images[k].job) return &r->images[k];
    return NULL;
}

/* A finished job's rows go into the request; its activations and patches go. */
static ds_status take_rows(ds_engine *g, req *r, req_image *ri, ds_err *e) {
    int n = 0;
    const float *out = ds_vision_job_output(ri->job, &n);
    if (!out || n != ri->n)
        return ds_fail(e, DS_ECORRUPT, "the vision tower gave %d rows for an image of %d tokens", n, ri->n);
    size_t floats = (size_t)n * (size_t)g->vision_row_floats;
    ri->rows = malloc(floats * sizeof *ri->rows);
    if (!ri->rows) return ds_fail(e, DS_ENOMEM, "out of memory for an image's %d rows", n);
    memcpy(ri->rows, out, floats * sizeof *ri->rows);
    ds_image_release_job(g, r);
    ds_image_patches_free(&ri->patches);
    return DS_OK;
}

int ds_image_encode_step(ds_engine *g) {
    if (!g->vision) return 0;
    /* requests with an image to encode, oldest first */
    int n_req = 0;
    for (int i = 0; i < g->n_running; i++) {
        req *r = g->running[i];
        if (!r->n_images || !next_image(r)) continue;
        int j = n_req++;
        for (; j > 0 && g->job_req[j - 1]->id > r->id; j--) g->job_req[j] = g->job_req[j - 1];
        g->job_req[j] = r;
    }
    int n_jobs = 0, queued = 0;
    int64_t pieces = 0; /* the least work the jobs taken so far will do */
    for (int i = 0; i < n_req; i++) {
        req *r = g->job_req[i];
        req_image *ri = job_image(r);
        if (!ri && !queued) {
            ri = next_image(r);
            size_t bytes = ds_vision_job_bytes(g->vision, &ri->patches);
            if (g->vision_used + bytes > g->vision_budget) {
                queued = 1; /* first come, first encoded: a large image is not overtaken forever */
                ri = NULL;
            } else {
                ds_err e = {0};
                if (ds_vision_job_new(g->vision, &ri->patches, &ri->job, &e) != DS_OK) {
                    ri->job = NULL;
                    ds_engine_fail_request(g, r, e.msg);
                    continue;
                }
                ri->job_bytes = bytes;
                ri->job_piece = ds_vision_job_remaining_flops(ri->job) / (ds_vision_cfg(g->vision)->n_layer + 2);
                g->vision_used += bytes;
            }
        }
        if (ri && (n_jobs == 0 || pieces + ri->job_piece <= g->vision_step_flops)) {
            pieces += ri->job_piece;
            g->job_req[n_jobs] = r;
            g->jobs[n_jobs++] = ri->job;
        }
    }
    if (n_jobs == 0) return 0;
    int64_t before = 0, after = 0;
    for (int i = 0; i < n_jobs; i++) before += ds_vision_job_remaining_flops(g->jobs[i]);
    ds_err e = {0};
    ds_status s = ds_vision_run(g->vision, g->jobs, n_jobs, g->vision_step_flops, &e);
    if (s) after = before;
    else
        for (int i = 0; i < n_jobs; i++) after += ds_vision_job_remaining_flops(g->jobs[i]);
    /* the jobs' owners, in order; a failed call (or a job's rows that do not fit) ends its requests */
    int encoded = 0;
    for (int i = 0; i < n_jobs; i++) {
        req *r = g->job_req[i];
        if (s) {
            ds_engine_fail_request(g, r, e.msg);
            continue;
        }
        if (!ds_vision_job_done(g->jobs[i])) continue;
        ds_err te = {0};
        if (take_rows(g, r, job_image(r), &te) != DS_OK) {
            ds_engine_fail_request(g, r, te.msg);
            continue;
        }
        encoded++;
    }
    int64_t done = before - after;
    pthread_mutex_lock(&g->mu);
    g->stats.vision_steps++;
    g->stats.vision_flops += done;
    if (done > g->stats.vision_flops_step_max) g->stats.vision_flops_step_max = done;
    g->stats.images_encoded += encoded;
    pthread_mutex_unlock(&g->mu);
    int64_t tokens = (done + g->token_macs - 1) / g->token_macs;
    return tokens > g->p.step_tokens ? g->p.step_tokens : (int)tokens;
}

void ds_image_row(const ds_engine *g, const req *r, int pos, int token_pos, int32_t rope[3], const float **embd) {
    *embd = NULL;
    if (!r->n_images) {
        rope[0] = rope[1] = rope[2] = pos;
        return;
    }
    if (pos < r->n_prompt) memcpy(rope, r->rope_pos + (size_t)pos * 3, 3 * sizeof *rope);
    else rope[0] = rope[1] = rope[2] = pos + r->rope_delta;
    if (token_pos >= r->n_prompt) return;
    for (int k = 0; k < r->n_images; k++) {
        const req_image *ri = &r->images[k];
        if (token_pos < ri->first) break;
        if (token_pos < ri->first + ri->n) {
            if (ri->rows) *embd = ri->rows + (size_t)(token_pos - ri->first) * (size_t)g->vision_row_floats;
            break;
        }
    }
}

void ds_image_batch(const ds_engine *g, ds_batch *b, int any_image, const int32_t *rope, const float *const *embd) {
    if (!any_image) return;
    b->rope_pos = rope;
    for (int i = 0; i < b->n_tokens; i++)
        if (embd[i]) {
            b->embd = embd;
            b->n_deepstack = ds_vision_cfg(g->vision)->n_deepstack;
            break;
        }
}
