/* image_input.c - see image_input.h. */
#include "server/image_input.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/image_prompt.h"
#include "image/image.h"
#include "image/image_prep.h"
#include "server/media_fetch.h"

static int fail(ds_http_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ds_http_error *err, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ds_http_vfail(err, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    return -1;
}

int ds_image_input_check(ds_server *s, const ds_oai_request *r, ds_http_error *err) {
    if (!r->n_images) return 0;
    if (!s->vision)
        return fail(err, r->images[0].param, "'%s': this server has no vision tower, so it takes no images (start it "
                    "with the model's mmproj file: --mmproj PATH)", r->images[0].param);
    if (r->n_images > s->cfg.max_images)
        return fail(err, r->images[s->cfg.max_images].param, "the request has %d images; at most %d are allowed "
                    "(--limit-mm-per-prompt)", r->n_images, s->cfg.max_images);
    return 0;
}

/* Fetches and decodes image k: its pixels in *im. */
static int decode_one(ds_server *s, const ds_oai_image *oi, ds_image *im, ds_http_error *err) {
    ds_media_policy pol = {.local_dir = s->media_dir[0] ? s->media_dir : NULL, .domains = s->cfg.allowed_media_domains,
                           .max_bytes = s->cfg.max_image_bytes, .timeout_s = s->cfg.media_timeout_s};
    uint8_t *data = NULL;
    size_t n = 0;
    ds_err e = {0};
    if (ds_media_fetch(&pol, oi->url, oi->url_len, &data, &n, &e) != DS_OK)
        return fail(err, oi->param, "'%s': %s", oi->param, e.msg);
    ds_image_limits lim = {.max_pixels = s->cfg.max_image_pixels, .max_bytes = s->cfg.max_image_bytes};
    ds_status st = ds_image_decode(data, n, &lim, im, &e);
    free(data);
    if (st != DS_OK) {
        if (st == DS_ENOMEM)
            return fail(err, oi->param, "'%s': %s (--max-image-pixels %lld, --max-image-mb %g)", oi->param, e.msg,
                        (long long)s->cfg.max_image_pixels, (double)s->cfg.max_image_bytes / (1 << 20));
        return fail(err, oi->param, "'%s': the image cannot be decoded: %s", oi->param, e.msg);
    }
    if (im->width <= 0 || im->height <= 0) {
        ds_image_free(im);
        return fail(err, oi->param, "'%s': the image has zero size", oi->param);
    }
    return 0;
}

static int count_pads(const ds_tokens *t, int32_t pad) {
    int k = 0;
    for (size_t i = 0; i < t->n; i++) k += t->ids[i] == pad;
    return k;
}

int ds_image_input_expand(ds_server *s, const ds_oai_request *r, ds_tokens *toks, ds_prompt_images *out, int patches,
                          ds_http_error *err) {
    if (out) *out = (ds_prompt_images){0};
    int pads = s->image_pad_id >= 0 ? count_pads(toks, s->image_pad_id) : 0;
    if (!r->n_images && !pads) return 0;
    if (ds_image_input_check(s, r, err)) return -1;
    if (pads != r->n_images)
        return fail(err, "messages", "the rendered prompt has %d <|image_pad|> token%s for %d image%s: the chat template "
                    "must write one per image part (and the text none)", pads, pads == 1 ? "" : "s", r->n_images,
                    r->n_images == 1 ? "" : "s");
    const ds_vision_config *vc = ds_vision_cfg(s->vision);
    int n = r->n_images, rc = -1;
    int *counts = calloc((size_t)n, sizeof *counts), *firsts = calloc((size_t)n, sizeof *firsts);
    ds_prompt_images got = {0};
    int32_t *ids = NULL;
    if (!counts || !firsts || (out && !(got.items = calloc((size_t)n, sizeof *got.items)))) {
        fail(err, NULL, "out of memory");
        err->status = 500, err->type = "server_error";
        goto out;
    }
    got.n = out ? n : 0;
    int64_t total = (int64_t)toks->n;
    for (int k = 0; k < n; k++) {
        const ds_oai_image *oi = &r->images[k];
        ds_image im = {0};
        ds_err e = {0};
        if (decode_one(s, oi, &im, err)) goto out;
        ds_status st = ds_image_token_count(vc, im.width, im.height, &counts[k], &e);
        if (st == DS_OK && out && patches) st = ds_image_preprocess(&im, vc, &got.items[k].patches, &e);
        if (st == DS_OK && out) ds_image_hash(&im, got.items[k].hash);
        ds_image_free(&im);
        if (st != DS_OK) {
            fail(err, oi->param, "'%s': %s", oi->param, e.msg);
            goto out;
        }
        total += counts[k] - 1;
    }
    if (total > (int64_t)1 << 30) {
        fail(err, "messages", "the images make the prompt too long (%lld tokens)", (long long)total);
        goto out;
    }
    ids = malloc((size_t)total * sizeof *ids + 1);
    ds_err e = {0};
    int n_out = 0;
    if (!ids) {
        fail(err, NULL, "out of memory");
        err->status = 500, err->type = "server_error";
        goto out;
    }
    if (ds_image_prompt_expand(toks->ids, (int)toks->n, s->image_pad_id, counts, n, ids, (int)total, &n_out, firsts,
                               &e) != DS_OK) {
        fail(err, "messages", "the images could not be placed in the prompt: %s", e.msg);
        goto out;
    }
    free(toks->ids);
    toks->ids = ids;
    toks->n = (size_t)n_out;
    toks->cap = (size_t)total;
    ids = NULL;
    for (int k = 0; k < got.n; k++) got.items[k].first = firsts[k];
    if (out) {
        *out = got;
        got = (ds_prompt_images){0};
    }
    rc = 0;
out:
    free(ids);
    free(counts);
    free(firsts);
    ds_prompt_images_free(&got);
    return rc;
}

int ds_prompt_images_copy(const ds_prompt_images *from, ds_prompt_images *to) {
    *to = (ds_prompt_images){0};
    if (!from->n) return 0;
    if (!(to->items = calloc((size_t)from->n, sizeof *to->items))) return -1;
    to->n = from->n;
    for (int k = 0; k < from->n; k++) {
        const ds_request_image *a = &from->items[k];
        ds_request_image *b = &to->items[k];
        *b = *a;
        size_t nf = (size_t)a->patches.grid_t * (size_t)a->patches.grid_h * (size_t)a->patches.grid_w *
                    (size_t)a->patches.patch_dim;
        b->patches.patches = malloc(nf * sizeof(float) + 1);
        if (!b->patches.patches) {
            ds_prompt_images_free(to);
            return -1;
        }
        if (nf) memcpy(b->patches.patches, a->patches.patches, nf * sizeof(float));
    }
    return 0;
}

void ds_prompt_images_free(ds_prompt_images *p) {
    for (int k = 0; k < p->n; k++) ds_image_patches_free(&p->items[k].patches);
    free(p->items);
    *p = (ds_prompt_images){0};
}
