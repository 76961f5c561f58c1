/* cmd_logits.c - `deltaserve logits`: raw model outputs for a token list,
 * written as little-endian F32 files, for checking the forward pass against
 * other implementations (tests/reference/test_parity.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_model.h"
#include "cli/commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve logits -m PATH --tokens ID,ID,... --out FILE [--hidden FILE] [--mtp FILE] [--batch N]\n"
               "  writes the logits of every position ([n][vocab] F32) to FILE; --hidden the final hidden\n"
               "  states ([n][hidden]); --mtp the MTP head's logits for (h_t, token t+1), t = 0..n-2;\n"
               "  --batch N runs the prompt N tokens per call (default: all at once; 1 = token by token)\n"
               DS_CLI_LOAD_USAGE);
}

static int write_f32(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(x, sizeof *x, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "deltaserve logits: cannot write %s\n", path);
    return ok ? 0 : 1;
}

int ds_cmd_logits(int argc, char **argv) {
    const char *path = NULL, *list = NULL, *out = NULL, *hid_out = NULL, *mtp_out = NULL;
    long batch = 0;
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
        else if ((r = ds_cli_load_arg("logits", a, v, &lo))) { if (r < 0) return 2; }
        else { fprintf(stderr, "deltaserve logits: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!path || !list || !out) { usage(stderr); return 2; }
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
    ds_err e = {0};
    if (!logits || !hidden || !bt) goto out;
    ds_batch_seq seq = {.mode = DS_SEQ_PREFILL, .pages = cm.pages, .n_pages = cm.n_pages, .state_slot = 0};
    for (int i0 = 0; i0 < n; i0 += cm.batch) {
        int m = n - i0 < cm.batch ? n - i0 : cm.batch;
        seq.mode = m == 1 ? DS_SEQ_DECODE : DS_SEQ_PREFILL;
        for (int i = 0; i < m; i++) bt[i] = (ds_batch_token){toks[i0 + i], 0, i0 + i, 1, 1};
        ds_batch b = {.tokens = bt, .n_tokens = m, .seqs = &seq, .n_seqs = 1, .logits = logits + (size_t)i0 * V,
                      .hidden = hidden + (size_t)i0 * H};
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
        ds_batch b = {.tokens = bt, .n_tokens = n - 1, .seqs = &seq, .n_seqs = 1, .logits = logits};
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
    free(logits);
    free(hidden);
    free(bt);
    free(toks);
    ds_cli_model_close(&cm);
    return rc;
}
