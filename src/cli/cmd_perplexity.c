/* cmd_perplexity.c - `deltaserve perplexity`: perplexity of a text file,
 * computed the way llama.cpp's llama-perplexity does so the two can be put
 * side by side: the text is tokenized whole and cut into chunks of N tokens,
 * each chunk is evaluated from an empty cache, and only the second half of
 * each chunk is scored (every scored token sees at least N/2 of context). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_model.h"
#include "cli/commands.h"
#include "common/mapped_file.h"
#include "engine/sampler.h"

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve perplexity -m PATH -f FILE [-c N] [--chunks K]\n"
               "  -c N          tokens per chunk (default 512)\n"
               "  --chunks K    score only the first K chunks (default: all)\n"
               DS_CLI_LOAD_USAGE);
}

int ds_cmd_perplexity(int argc, char **argv) {
    const char *path = NULL, *file = NULL;
    long n_ctx = 512, max_chunks = -1;
    ds_load_options lo = {0};
    int r;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (ds_cli_load_flag(a, &lo)) continue;
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) path = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (ds_arg_int(a, v, 8, 1 << 20, &n_ctx)) return 2; }
        else if (!strcmp(a, "--chunks")) { if (ds_arg_int(a, v, 1, 1 << 30, &max_chunks)) return 2; }
        else if ((r = ds_cli_load_arg("perplexity", a, v, &lo))) { if (r < 0) return 2; }
        else { fprintf(stderr, "deltaserve perplexity: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!path || !file) {
        fprintf(stderr, "deltaserve perplexity: -m PATH and -f FILE are required\n");
        usage(stderr);
        return 2;
    }
    ds_err e = {0};
    char *text = NULL;
    size_t len = 0;
    if (ds_read_text_file(file, (size_t)1 << 30, &text, &len, &e) != DS_OK) {
        fprintf(stderr, "deltaserve perplexity: %s\n", e.msg);
        return 1;
    }
    ds_cli_model cm;
    if (ds_cli_model_open_ex(&cm, "perplexity", path, n_ctx < 512 ? (int)n_ctx : 512, &lo)) {
        free(text);
        return 1;
    }
    ds_tokens toks = {0};
    int rc = 1;
    float *logits = NULL;
    if (ds_tokenizer_encode(cm.tok, text, len, 0, &toks, &e) != DS_OK) {
        fprintf(stderr, "deltaserve perplexity: %s\n", e.msg);
        goto out;
    }
    long n_chunks = (long)toks.n / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        fprintf(stderr, "deltaserve perplexity: %s has %zu tokens; at least one chunk of %ld is needed\n", file, toks.n,
                n_ctx);
        goto out;
    }
    if (ds_cli_model_reserve(&cm, "perplexity", (int)n_ctx)) goto out;
    if (cm.max_tokens < n_ctx) {
        fprintf(stderr, "deltaserve perplexity: -c %ld is longer than the model's context (%d)\n", n_ctx, cm.max_tokens);
        goto out;
    }
    int V = ds_model_cfg(cm.model)->n_vocab;
    logits = malloc((size_t)n_ctx * (size_t)V * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "deltaserve perplexity: out of memory for %ld x %d logits\n", n_ctx, V);
        goto out;
    }
    fprintf(stderr, "perplexity: %zu tokens, %ld chunks of %ld, scoring the second half of each\n", toks.n, n_chunks,
            n_ctx);
    double nll = 0, nll2 = 0, t0 = ds_now();
    long count = 0;
    int first = (int)n_ctx / 2;
    for (long ch = 0; ch < n_chunks; ch++) {
        const int32_t *chunk = toks.ids + ch * n_ctx;
        ds_cli_model_reset(&cm);
        if (ds_cli_model_run(&cm, chunk, (int)n_ctx, 0, 1, logits, &e) != DS_OK) {
            fprintf(stderr, "\ndeltaserve perplexity: %s\n", e.msg);
            goto out;
        }
        for (int j = first; j < n_ctx - 1; j++) {
            double lp = ds_log_softmax_at(logits + (size_t)j * V, V, chunk[j + 1]);
            nll -= lp;
            nll2 += lp * lp;
            count++;
        }
        printf("[%ld]%.4f,", ch + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    double err = count > 1 && var > 0 ? sqrt(var / (double)(count - 1)) : 0.0;
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", exp(mean), exp(mean) * err);
    fprintf(stderr, "perplexity: %ld tokens scored in %.2f s\n", count, ds_now() - t0);
    rc = 0;
out:
    free(logits);
    free(toks.ids);
    free(text);
    ds_cli_model_close(&cm);
    return rc;
}
