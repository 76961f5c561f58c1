/* cli_image.c - see cli_image.h. */
#include "cli/cli_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/image_prompt.h"
#include "image/image.h"
#include "image/image_prep.h"
#include "model/mrope.h"

#define MAX_IMAGES 16

void ds_cli_image_prompt_free(ds_cli_image_prompt *p) {
    free(p->tokens);
    free(p->rope);
    free(p->embd);
    free(p->rows);
    memset(p, 0, sizeof *p);
}

/* Decodes, preprocesses and encodes one image into rows (allocated here);
 * its merged grid into g (first left for the caller). */
static ds_status encode_one(ds_cli_model *cm, const char *path, float **rows, ds_mrope_image *g, ds_err *e) {
    const ds_vision_config *vc = ds_vision_cfg(cm->vision);
    ds_image_limits lim;
    ds_image_default_limits(&lim);
    ds_image im = {0};
    ds_image_patches p = {0};
    ds_status s = ds_image_load(path, &lim, &im, e);
    if (!s) s = ds_image_preprocess(&im, vc, &p, e);
    if (!s) {
        *g = (ds_mrope_image){.grid_t = p.grid_t, .grid_h = p.grid_h / vc->merge, .grid_w = p.grid_w / vc->merge};
        size_t n = (size_t)g->grid_t * (size_t)g->grid_h * (size_t)g->grid_w;
        *rows = malloc(n * (size_t)vc->out_embd * (size_t)(1 + vc->n_deepstack) * sizeof(float));
        if (!*rows) s = ds_fail(e, DS_ENOMEM, "out of memory");
    }
    if (!s) s = ds_vision_encode(cm->vision, &p, *rows, e);
    ds_image_patches_free(&p);
    ds_image_free(&im);
    return s;
}

int ds_cli_image_prompt_build(ds_cli_model *cm, const char *cmd, const char *const *paths, int n_paths,
                              const char *text, ds_cli_image_prompt *out) {
    memset(out, 0, sizeof *out);
    if (!cm->vision_file) {
        fprintf(stderr, "deltaserve %s: --image needs the model's vision tower: %s has none (give --mmproj PATH)\n", cmd,
                ds_model_path(cm->file));
        return 2;
    }
    ds_err e = {0};
    if (!cm->vision && ds_vision_new(cm->model, cm->vision_file, &cm->vision, &e) != DS_OK) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        return 1;
    }
    if (n_paths > MAX_IMAGES) {
        fprintf(stderr, "deltaserve %s: %d images (at most %d)\n", cmd, n_paths, MAX_IMAGES);
        return 2;
    }
    const char *marks[3] = {"<|vision_start|>", "<|image_pad|>", "<|vision_end|>"};
    for (int k = 0; k < 3; k++)
        if (ds_tokenizer_find(cm->tok, marks[k]) < 0) {
            fprintf(stderr, "deltaserve %s: the tokenizer has no %s token\n", cmd, marks[k]);
            return 1;
        }
    int32_t pad = ds_tokenizer_find(cm->tok, marks[1]);
    const ds_vision_config *vc = ds_vision_cfg(cm->vision);
    size_t ld = (size_t)vc->out_embd * (size_t)(1 + vc->n_deepstack);
    float *img_rows[MAX_IMAGES] = {0};
    ds_mrope_image spans[MAX_IMAGES];
    int n_tok[MAX_IMAGES] = {0}, firsts[MAX_IMAGES], total = 0, rc = 1;
    ds_tokens toks = {0};
    for (int k = 0; k < n_paths; k++) {
        ds_status s = encode_one(cm, paths[k], &img_rows[k], &spans[k], &e);
        if (s) {
            fprintf(stderr, "deltaserve %s: image %s: %s\n", cmd, paths[k], e.msg);
            rc = s == DS_EINVAL ? 2 : 1;
            goto out;
        }
        n_tok[k] = spans[k].grid_t * spans[k].grid_h * spans[k].grid_w;
        total += n_tok[k];
    }
    size_t len = strlen(text) + (size_t)n_paths * 48 + 1;
    char *full = malloc(len);
    if (!full) goto out;
    full[0] = 0;
    for (int k = 0; k < n_paths; k++) strcat(strcat(strcat(full, marks[0]), marks[1]), marks[2]);
    strcat(full, text);
    ds_status s = ds_tokenizer_encode(cm->tok, full, strlen(full), 1, &toks, &e);
    free(full);
    if (s) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        goto out;
    }
    int cap = (int)toks.n + total;
    out->tokens = malloc((size_t)cap * sizeof *out->tokens);
    out->rope = malloc((size_t)cap * 3 * sizeof *out->rope);
    out->embd = calloc((size_t)cap, sizeof *out->embd);
    out->rows = malloc((size_t)total * ld * sizeof(float) + 1);
    if (!out->tokens || !out->rope || !out->embd || !out->rows) goto out;
    if (ds_image_prompt_expand(toks.ids, (int)toks.n, pad, n_tok, n_paths, out->tokens, cap, &out->n, firsts, &e) !=
        DS_OK) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        goto out;
    }
    size_t row = 0;
    for (int k = 0; k < n_paths; k++) {
        memcpy(out->rows + row * ld, img_rows[k], (size_t)n_tok[k] * ld * sizeof(float));
        for (int j = 0; j < n_tok[k]; j++) out->embd[firsts[k] + j] = out->rows + (row + (size_t)j) * ld;
        row += (size_t)n_tok[k];
        spans[k].first = firsts[k];
    }
    out->n_deepstack = vc->n_deepstack;
    if (ds_mrope_positions(out->n, spans, n_paths, out->rope, &out->delta, &e) != DS_OK) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        goto out;
    }
    rc = 0;
out:
    for (int k = 0; k < n_paths; k++) free(img_rows[k]);
    free(toks.ids);
    if (rc) ds_cli_image_prompt_free(out);
    return rc;
}
