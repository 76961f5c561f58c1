/* cmd_logits.c - `deltaserve logits`: raw model outputs for a token list,
 * written as little-endian F32 files, for checking the forward pass against
 * other implementations (tests/reference/test_parity.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_model.h"
#include "cli/commands.h"
#include "model/mrope.h"

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve logits -m PATH --tokens ID,ID,... --out FILE [--hidden FILE] [--mtp FILE] [--batch N]\n"
               "                        [--images FIRST:T:H:W,... --embd FILE [--deepstack N] [--positions FILE]]\n"
               "  writes the logits of every position ([n][vocab] F32) to FILE; --hidden the final hidden\n"
               "  states ([n][hidden]); --mtp the MTP head's logits for (h_t, token t+1), t = 0..n-2;\n"
               "  --batch N runs the prompt N tokens per call (default: all at once; 1 = token by token)\n"
               "  --images: image token spans (first token, merged grid t x h x w) whose input rows are\n"
               "  read in order from --embd (F32 [image tokens][hidden x (1 + N)], N DeepStack parts),\n"
               "  placed with M-RoPE positions; --positions writes those ([n][3] int32)\n"
               DS_CLI_LOAD_USAGE);
}

/* "FIRST:T:H:W,..." into imgs (at most max); returns the count, -1 when malformed. */
static int parse_images(const char *v, ds_mrope_image *imgs, int max) {
    int n = 0;
    for (const char *p = v; *p;) {
        int f, t, h, w, used = 0;
        if (n == max || sscanf(p, "%d:%d:%d:%d%n", &f, &t, &h, &w, &used) != 4) return -1;
        imgs[n++] = (ds_mrope_image){f, t, h, w};
        p += used;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return n;
}

static float *read_f32(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    float *x = f ? malloc(n * sizeof *x + 1) : NULL;
    int ok = x && fread(x, sizeof *x, n, f) == n && fgetc(f) == EOF;
    if (f) fclose(f);
    if (!ok) {
        fprintf(stderr, "deltaserve logits: %s is not %zu F32 values\n", path, n);
        free(x);
        return NULL;
    }
    return x;
}

static int write_f32(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(x, sizeof *x, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "deltaserve logits: cannot write %s\n", path);
    return ok ? 0 : 1;
}

int ds_cmd_logits(int argc, char **argv) {
    const char *path = NULL, *list = NULL, *out = NULL, *hid_out = NULL, *mtp_out = NULL, *embd_path = NULL,
               *pos_out = NULL;
    long batch = 0, deepstack = 0;
    enum { MAX_IMAGES = 64 };
    ds_mrope_image imgs[MAX_IMAGES];
    int n_imgs = 0;
    ds_load_options lo = {0};
    int r;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (ds_cli_load_flag(a, &lo)) continue;
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m")) path = v;
        else if (!strcmp(a, "--tokens")) list = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--hidden")) hid_out = v;
        else if (!strcmp(a, "--mtp")) mtp_out = v;
        else if (!strcmp(a, "--batch")) { if (ds_arg_int(a, v, 1, 1 << 16, &batch)) return 2; }
        else if (!strcmp(a, "--images")) {
            if ((n_imgs = parse_images(v, imgs, MAX_IMAGES)) < 0) {
                fprintf(stderr, "deltaserve logits: --images: '%s' is not a list of FIRST:T:H:W (at most %d)\n", v,
                        MAX_IMAGES);
                return 2;
            }
        }
        else if (!strcmp(a, "--embd")) embd_path = v;
        else if (!strcmp(a, "--positions")) pos_out = v;
        else if (!strcmp(a, "--deepstack")) { if (ds_arg_int(a, v, 0, DS_MAX_DEEPSTACK, &deepstack)) return 2; }
        else if ((r = ds_cli_load_arg("logits", a, v, &lo))) { if (r < 0) return 2; }
        else { fprintf(stderr, "deltaserve logits: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!path || !list || !out || (n_imgs > 0) != (embd_path != NULL)) { usage(stderr); return 2; }
    int n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    if (!toks) return 1;
    const char *p = list;
    for (int i = 0; i < n; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',')) {
            fprintf(stderr, "deltaserve logits: --tokens: '%s' is not a list of integers\n", list);
            free(toks);
            return 2;
        }
        toks[i] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    ds_cli_model cm;
    if (ds_cli_model_open_ex(&cm, "logits", path, batch ? (int)batch : n, &lo) || ds_cli_model_reserve(&cm, "logits", n + 1)) {
        free(toks);
        return 1;
    }
    const ds_model_config *c = ds_model_cfg(cm.model);
    int V = c->n_vocab, H = c->n_embd, rc = 1;
    float *logits = malloc((size_t)n * V * sizeof(float)), *hidden = malloc((size_t)n * H * sizeof(float));
    ds_batch_token *bt = malloc((size_t)n * sizeof *bt);
    int32_t *rope = NULL;
    const float **embd = NULL, **mtp_embd = NULL;
    float *rows = NULL;
    ds_err e = {0};
    if (!logits || !hidden || !bt) goto out;
    if (n_imgs) { /* image rows in order of their tokens, M-RoPE positions for all */
        size_t ld = (size_t)H * (size_t)(1 + deepstack), n_rows = 0;
        int delta;
        rope = malloc((size_t)n * 3 * sizeof *rope);
        embd = calloc((size_t)n, sizeof *embd);
        mtp_embd = calloc((size_t)n, sizeof *mtp_embd);
        if (!rope || !embd || !mtp_embd) goto out;
        if (ds_mrope_positions(n, imgs, n_imgs, rope, &delta, &e) != DS_OK) {
            fprintf(stderr, "deltaserve logits: --images: %s\n", e.msg);
            goto out;
        }
        for (int k = 0; k < n_imgs; k++) n_rows += (size_t)imgs[k].grid_t * imgs[k].grid_h * imgs[k].grid_w;
        if (!(rows = read_f32(embd_path, n_rows * ld))) goto out;
        size_t row = 0;
        for (int k = 0; k < n_imgs; k++)
            for (int j = 0; j < imgs[k].grid_t * imgs[k].grid_h * imgs[k].grid_w; j++) embd[imgs[k].first + j] = rows + ld * row++;
        for (int i = 0; i + 1 < n; i++) mtp_embd[i] = embd[i + 1]; /* the head reads token i+1 at position i */
        if (pos_out) {
            FILE *f = fopen(pos_out, "wb");
            int ok = f && fwrite(rope, sizeof *rope, (size_t)n * 3, f) == (size_t)n * 3;
            if (f && fclose(f) != 0) ok = 0;
            if (!ok) {
                fprintf(stderr, "deltaserve logits: cannot write %s\n", pos_out);
                goto out;
            }
        }
    }
    ds_batch_seq seq = {.mode = DS_SEQ_PREFILL, .pages = cm.pages, .n_pages = cm.n_pages, .state_slot = 0};
    for (int i0 = 0; i0 < n; i0 += cm.batch) {
        int m = n - i0 < cm.batch ? n - i0 : cm.batch;
        seq.mode = m == 1 ? DS_SEQ_DECODE : DS_SEQ_PREFILL;
        for (int i = 0; i < m; i++) bt[i] = (ds_batch_token){toks[i0 + i], 0, i0 + i, 1, 1};
        ds_batch b = {.tokens = bt, .n_tokens = m, .seqs = &seq, .n_seqs = 1, .logits = logits + (size_t)i0 * V,
                      .hidden = hidden + (size_t)i0 * H, .rope_pos = rope ? rope + 3 * (size_t)i0 : NULL,
                      .embd = embd ? embd + i0 : NULL, .n_deepstack = (int)deepstack};
        if (ds_model_forward(cm.model, &cm.kv, &cm.st, &b, &e) != DS_OK) {
            fprintf(stderr, "deltaserve logits: %s\n", e.msg);
            goto out;
        }
    }
    if (write_f32(out, logits, (size_t)n * V) || (hid_out && write_f32(hid_out, hidden, (size_t)n * H))) goto out;
    if (mtp_out && n > 1) {
        ds_kv_pool mkv;
        if (ds_kv_pool_init(&mkv, 1, c->n_head_kv, c->head_dim, cm.kv.page_size,
                            cm.kv.page_floats / (size_t)cm.kv.n_layers * sizeof(float) * (size_t)cm.n_pages, &e) != DS_OK) {
            fprintf(stderr, "deltaserve logits: %s\n", e.msg);
            goto out;
        }
        /* MTP over (h_t, x_{t+1}) at position t */
        for (int i = 0; i < n - 1; i++) bt[i] = (ds_batch_token){toks[i + 1], 0, i, 1, 0};
        ds_batch b = {.tokens = bt, .n_tokens = n - 1, .seqs = &seq, .n_seqs = 1, .logits = logits, .rope_pos = rope,
                      .embd = mtp_embd, .n_deepstack = (int)deepstack};
        seq.mode = DS_SEQ_PREFILL;
        ds_status s = n - 1 <= cm.batch ? ds_model_mtp_forward(cm.model, &mkv, &b, hidden, &e)
                                        : ds_fail(&e, DS_EINVAL, "--mtp needs --batch of at least %d", n - 1);
        ds_kv_pool_free(&mkv);
        if (s != DS_OK) {
            fprintf(stderr, "deltaserve logits: %s\n", e.msg);
            goto out;
        }
        if (write_f32(mtp_out, logits, (size_t)(n - 1) * V)) goto out;
    }
    rc = 0;
out:
    free(rope);
    free(embd);
    free(mtp_embd);
    free(rows);
    free(logits);
    free(hidden);
    free(bt);
    free(toks);
    ds_cli_model_close(&cm);
    return rc;
}
