/* cli_model.c - see cli_model.h. */
#include "cli/cli_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE_SIZE 64

double ds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ds_cli_load_arg(const char *cmd, const char *a, const char *v, ds_load_options *lo) {
    if (!strcmp(a, "--mtp-model")) {
        lo->mtp_path = v;
        return 1;
    }
    if (!strcmp(a, "--mmproj")) {
        lo->mmproj_path = v;
        return 1;
    }
    if (!strcmp(a, "--fp8-as")) {
        if (!strcmp(v, "q8_0")) lo->fp8_as = DS_FP8_AS_Q8_0;
        else if (!strcmp(v, "bf16")) lo->fp8_as = DS_FP8_AS_BF16;
        else {
            fprintf(stderr, "deltaserve %s: --fp8-as must be q8_0 or bf16, got '%s'\n", cmd, v);
            return -1;
        }
        return 1;
    }
    return 0;
}

int ds_cli_load_flag(const char *a, ds_load_options *lo) {
    if (!strcmp(a, "--no-mmproj")) {
        lo->no_mmproj = 1;
        return 1;
    }
    return 0;
}

int ds_cli_open_vision(const char *cmd, const char *model_path, const ds_model_file *text, const ds_load_options *lo,
                       ds_vision_file **out) {
    *out = NULL;
    char found[4096];
    const char *path = lo ? lo->mmproj_path : NULL;
    if (lo && lo->no_mmproj) {
        if (path) {
            fprintf(stderr, "deltaserve %s: --mmproj and --no-mmproj contradict each other\n", cmd);
            return 1;
        }
        return 0;
    }
    if (!path) {
        if (!ds_vision_find(model_path, found, sizeof found)) return 0;
        path = found;
    }
    ds_err e = {0};
    ds_status s = ds_vision_open(path, out, &e);
    if (s) {
        fprintf(stderr, "deltaserve %s: %s%s\n", cmd, e.msg,
                path == found ? " (the vision tower found beside the model; --no-mmproj loads none)" : "");
        return 1;
    }
    const ds_vision_config *vc = ds_vision_config_of(*out);
    if (text && vc->out_embd != ds_model_config_of(text)->n_embd) {
        fprintf(stderr, "deltaserve %s: the vision tower %s writes %d-wide embeddings, but the model %s is %d wide: "
                "they do not belong together\n", cmd, path, vc->out_embd, ds_model_path(text),
                ds_model_config_of(text)->n_embd);
        ds_vision_close(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}

int ds_cli_model_open(ds_cli_model *cm, const char *cmd, const char *path, int batch) {
    return ds_cli_model_open_ex(cm, cmd, path, batch, NULL);
}

int ds_cli_model_open_ex(ds_cli_model *cm, const char *cmd, const char *path, int batch, const ds_load_options *lo) {
    memset(cm, 0, sizeof *cm);
    ds_err e = {0};
    ds_status s = ds_model_open_ex(path, lo, &cm->file, &e);
    if (!s) s = ds_tokenizer_from_model(cm->file, &cm->tok, &e);
    if (!s) {
        cm->batch = batch;
        ds_model_params p = {.max_batch_tokens = batch};
        s = ds_model_new(cm->file, &p, &cm->model, &e);
    }
    if (s) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        ds_cli_model_close(cm);
        return 1;
    }
    /* the encoder (cm->vision) is made from the file by those who run images */
    if (ds_cli_open_vision(cmd, path, cm->file, lo, &cm->vision_file)) {
        ds_cli_model_close(cm);
        return 1;
    }
    return 0;
}

int ds_cli_model_reserve(ds_cli_model *cm, const char *cmd, int max_tokens) {
    ds_err e = {0};
    const ds_model_config *c = ds_model_config_of(cm->file);
    if (max_tokens > c->n_ctx_train) max_tokens = c->n_ctx_train;
    cm->max_tokens = max_tokens;
    cm->n_pages = (cm->max_tokens + PAGE_SIZE - 1) / PAGE_SIZE;
    size_t page_bytes = (size_t)ds_model_n_attn_layers(cm->model) * PAGE_SIZE * (size_t)c->n_head_kv *
                        (size_t)c->head_dim * 2 * sizeof(float);
    ds_status s = ds_kv_pool_init(&cm->kv, ds_model_n_attn_layers(cm->model), c->n_head_kv, c->head_dim, PAGE_SIZE,
                                  page_bytes * (size_t)cm->n_pages, &e);
    if (!s)
        s = ds_state_pool_init(&cm->st, ds_model_n_gdn_layers(cm->model), c->conv_kernel, ds_model_conv_dim(cm->model),
                               c->lin_v_heads, c->lin_k_dim, c->lin_v_dim, 1, &e);
    cm->pages = calloc((size_t)cm->n_pages, sizeof *cm->pages);
    if (!s && !cm->pages) s = ds_fail(&e, DS_ENOMEM, "out of memory");
    for (int i = 0; cm->pages && i < cm->n_pages; i++) cm->pages[i] = i;
    if (s) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        return 1;
    }
    return 0;
}

void ds_cli_model_close(ds_cli_model *cm) {
    ds_kv_pool_free(&cm->kv);
    ds_state_pool_free(&cm->st);
    free(cm->pages);
    ds_vision_free(cm->vision);
    ds_vision_close(cm->vision_file);
    ds_model_free(cm->model);
    ds_tokenizer_free(cm->tok);
    ds_model_close(cm->file);
    memset(cm, 0, sizeof *cm);
}

void ds_cli_model_reset(ds_cli_model *cm) {
    if (cm->st.n_slots) ds_state_clear(&cm->st, 0);
}

ds_status ds_cli_model_run(ds_cli_model *cm, const int32_t *tokens, int n, int pos, int all_logits, float *logits,
                           ds_err *e) {
    return ds_cli_model_run_ex(cm, tokens, n, pos, NULL, all_logits, logits, e);
}

ds_status ds_cli_model_run_ex(ds_cli_model *cm, const int32_t *tokens, int n, int pos, const ds_cli_image_inputs *im,
                              int all_logits, float *logits, ds_err *e) {
    if (pos + n > cm->max_tokens)
        return ds_fail(e, DS_EINVAL, "%d tokens do not fit in a context of %d", pos + n, cm->max_tokens);
    int V = ds_model_cfg(cm->model)->n_vocab;
    ds_batch_token *bt = malloc((size_t)cm->batch * sizeof *bt);
    if (!bt) return ds_fail(e, DS_ENOMEM, "out of memory");
    ds_batch_seq seq = {.mode = n == 1 ? DS_SEQ_DECODE : DS_SEQ_PREFILL, .pages = cm->pages, .n_pages = cm->n_pages,
                        .state_slot = 0};
    ds_status s = DS_OK;
    for (int i0 = 0; i0 < n && !s; i0 += cm->batch) {
        int m = n - i0 < cm->batch ? n - i0 : cm->batch;
        for (int i = 0; i < m; i++)
            bt[i] = (ds_batch_token){.token = tokens[i0 + i], .seq = 0, .pos = pos + i0 + i,
                                     .want_logits = (uint8_t)(all_logits || i0 + i == n - 1)};
        ds_batch b = {.tokens = bt, .n_tokens = m, .seqs = &seq, .n_seqs = 1,
                      .logits = all_logits ? logits + (size_t)i0 * V : logits};
        if (im) {
            b.rope_pos = im->rope_pos ? im->rope_pos + 3 * (size_t)i0 : NULL;
            b.embd = im->embd ? im->embd + i0 : NULL;
            b.n_deepstack = im->n_deepstack;
        }
        s = ds_model_forward(cm->model, &cm->kv, &cm->st, &b, e);
    }
    free(bt);
    return s;
}
