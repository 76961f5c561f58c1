/* cmd_generate.c - `deltaserve generate`: one prompt, streamed completion,
 * then a line with prompt and decode speed. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_hub.h"
#include "cli/cli_image.h"
#include "cli/cli_model.h"
#include "cli/cli_constraint.h"
#include "cli/commands.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "grammar/grammar_filter.h"
#include "grammar/vocab_index.h"
#include "tokenizer/stream_decoder.h"

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve generate (-m PATH | -hf ORG/NAME[:QUANT]) -p TEXT [-n N] [--temp T] [--top-p P] [--top-k K] [--seed S]\n"
               "                           [--json-schema FILE | --grammar FILE | --regex PATTERN] [--image FILE...]\n"
               "  -m PATH       GGUF file or Hugging Face directory\n"
               DS_CLI_HUB_HELP
               "  -p TEXT       the prompt (used as is: no chat template)\n"
               "  -n N          tokens to generate (default 64); stops early at an end-of-sequence token\n"
               "  --temp T      temperature (default 0.8; 0 = greedy)\n"
               "  --top-p P     nucleus sampling (default 0.95)\n"
               "  --top-k K     keep the K most likely tokens (default 40; 0 = off)\n"
               "  --seed S      random seed (default 0)\n"
               "  --json-schema FILE  the answer is JSON valid under this JSON Schema (compact, no whitespace)\n"
               "  --grammar FILE      the answer follows this GBNF grammar (start rule root)\n"
               "  --regex PATTERN     the answer fully matches this regular expression\n"
               "                (with one of these the answer ends only where the constraint may end; a\n"
               "                line 'grammar: complete' or 'grammar: incomplete' on stderr says how it ended)\n"
               "  --image FILE  a picture (JPEG, PNG, WebP, GIF) before the prompt text, through the model's\n"
               "                vision tower (--mmproj, or the mmproj file beside the model); repeatable\n"
               DS_CLI_LOAD_USAGE);
}


int ds_cmd_generate(int argc, char **argv) {
    const char *path = NULL, *prompt = NULL, *schema_path = NULL, *grammar_path = NULL, *pattern = NULL;
    const char *images[16];
    int n_images = 0;
    long n_gen = 64;
    ds_load_options lo = {0};
    int r;
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0.8f;
    sp.top_p = 0.95f;
    sp.top_k = 40;
    ds_cli_hub hub = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double x;
        long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        int hf = ds_cli_hub_option(&hub, argc, argv, &i);
        if (hf) { if (hf < 0) return 2; continue; }
        if (ds_cli_load_flag(a, &lo)) continue;
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) path = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "-n")) { if (ds_arg_int(a, v, 0, 1 << 20, &n_gen)) return 2; }
        else if (!strcmp(a, "--temp")) { if (ds_arg_float(a, v, 0, 100, &x)) return 2; sp.temperature = (float)x; }
        else if (!strcmp(a, "--top-p")) { if (ds_arg_float(a, v, 0, 1, &x)) return 2; sp.top_p = (float)x; }
        else if (!strcmp(a, "--top-k")) { if (ds_arg_int(a, v, 0, 1 << 24, &n)) return 2; sp.top_k = (int)n; }
        else if (!strcmp(a, "--seed")) { if (ds_arg_u64(a, v, &sp.seed)) return 2; }
        else if (!strcmp(a, "--json-schema")) schema_path = v;
        else if (!strcmp(a, "--grammar")) grammar_path = v;
        else if (!strcmp(a, "--regex")) pattern = v;
        else if (!strcmp(a, "--image")) {
            if (n_images == (int)(sizeof images / sizeof images[0])) {
                fprintf(stderr, "deltaserve generate: at most %d --image\n", n_images);
                return 2;
            }
            images[n_images++] = v;
        }
        else if ((r = ds_cli_load_arg("generate", a, v, &lo))) { if (r < 0) return 2; }
        else { fprintf(stderr, "deltaserve generate: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (prompt) {
        int rc = ds_cli_hub_model(&hub, "generate", &path);
        if (rc) return rc;
        if (hub.res.mtp && !lo.mtp_path) lo.mtp_path = hub.res.mtp; /* the head file beside it */
    }
    if (!path || !prompt) {
        fprintf(stderr, "deltaserve generate: -m PATH (or -hf REPO) and -p TEXT are required\n");
        usage(stderr);
        return 2;
    }
    char *gbnf = NULL;
    ds_schema_options so = {0};
    int crc = 0;
    if (!!schema_path + !!grammar_path + !!pattern > 1) {
        fprintf(stderr, "deltaserve generate: give at most one of --json-schema, --grammar, --regex\n");
        crc = 2;
    } else {
        crc = ds_cli_constraint_gbnf("generate", schema_path, grammar_path, pattern, &so, 2, &gbnf);
    }
    if (crc) return crc;
    ds_err e = {0};
    ds_grammar *grammar = NULL;
    if (gbnf && ds_grammar_parse(gbnf, strlen(gbnf), &grammar, &e) != DS_OK) {
        fprintf(stderr, "deltaserve generate: the grammar: %s\n", e.msg);
        free(gbnf);
        return 2;
    }
    free(gbnf);
    ds_tokens toks = {0};
    ds_cli_model cm;
    int open_rc = ds_cli_model_open_ex(&cm, "generate", path, 256, &lo);
    ds_cli_hub_free(&hub); /* the model keeps its own copy of the path */
    if (open_rc) { ds_grammar_unref(grammar); return 1; }
    ds_cli_image_prompt ip = {0};
    if (n_images) { /* the prompt with its images: tokens, image rows, M-RoPE positions */
        int irc = ds_cli_image_prompt_build(&cm, "generate", images, n_images, prompt, &ip);
        if (irc) {
            ds_vision_free(cm.vision);
            cm.vision = NULL;
            ds_cli_model_close(&cm);
            ds_grammar_unref(grammar);
            return irc;
        }
        toks.ids = ip.tokens, toks.n = (size_t)ip.n;
        ip.tokens = NULL; /* freed as toks.ids */
    } else if (ds_tokenizer_encode(cm.tok, prompt, strlen(prompt), 1, &toks, &e) != DS_OK) {
        fprintf(stderr, "deltaserve generate: %s\n", e.msg);
        free(toks.ids);
        ds_cli_model_close(&cm);
        return 1;
    }
    if (toks.n == 0 || ds_cli_model_reserve(&cm, "generate", (int)toks.n + (int)n_gen + 1)) {
        if (toks.n == 0) fprintf(stderr, "deltaserve generate: the prompt encodes to no tokens\n");
        free(toks.ids);
        ds_cli_image_prompt_free(&ip);
        ds_vision_free(cm.vision);
        cm.vision = NULL;
        ds_cli_model_close(&cm);
        return toks.n == 0 ? 2 : 1;
    }
    if ((int)toks.n >= cm.max_tokens) {
        fprintf(stderr, "deltaserve generate: the prompt has %zu tokens, the model's context is %d\n", toks.n,
                cm.max_tokens);
        free(toks.ids);
        ds_cli_image_prompt_free(&ip);
        ds_vision_free(cm.vision);
        cm.vision = NULL;
        ds_cli_model_close(&cm);
        return 1;
    }
    if (n_gen > cm.max_tokens - (long)toks.n) n_gen = cm.max_tokens - (long)toks.n;
    const ds_model_config *c = ds_model_cfg(cm.model);
    int V = c->n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *hist = malloc(((size_t)toks.n + (size_t)n_gen + 1) * sizeof *hist);
    ds_sampler_scratch sc = {0};
    ds_stream_decoder dec = {0};
    ds_vocab_index *vocab = NULL;
    ds_grammar_filter *filter = NULL;
    uint32_t *allowed = NULL;
    int rc = 1, filtering = grammar != NULL;
    if (!logits || !hist || ds_sampler_scratch_init(&sc, V) != 0 ||
        ds_stream_decoder_init(&dec, cm.tok, 1, &e) != DS_OK) {
        fprintf(stderr, "deltaserve generate: out of memory\n");
        goto out;
    }
    if (grammar) {
        ds_grammar_filter_params fp = {.grammar = grammar, .tok = cm.tok, .end_ids = c->eos_ids, .n_end = c->n_eos};
        if (ds_vocab_index_new(cm.tok, &vocab, &e) != DS_OK ||
            (fp.vocab = vocab, ds_grammar_filter_new(&fp, &filter, &e)) != DS_OK) {
            fprintf(stderr, "deltaserve generate: %s\n", e.msg);
            goto out;
        }
        if (!(allowed = malloc(DS_MASK_WORDS(V) * sizeof *allowed))) {
            fprintf(stderr, "deltaserve generate: out of memory\n");
            goto out;
        }
    }
    memcpy(hist, toks.ids, toks.n * sizeof *hist);
    int n_hist = (int)toks.n;
    double t0 = ds_now();
    ds_cli_image_inputs im = {.rope_pos = ip.rope, .embd = ip.embd, .n_deepstack = ip.n_deepstack};
    if (ds_cli_model_run_ex(&cm, toks.ids, (int)toks.n, 0, n_images ? &im : NULL, 0, logits, &e) != DS_OK) {
        fprintf(stderr, "deltaserve generate: %s\n", e.msg);
        goto out;
    }
    double t1 = ds_now();
    ds_sampler smp;
    ds_sampler_init(&smp, &sp);
    fputs(prompt, stdout);
    int produced = 0;
    const char *text;
    size_t len;
    for (; produced < n_gen; produced++) {
        if (filtering) { /* the tokens the constraint allows next; the others cannot be drawn */
            memset(allowed, 0, DS_MASK_WORDS(V) * sizeof *allowed);
            ds_filter_result fr = ds_grammar_filter_fn(filter, hist + toks.n, n_hist - (int)toks.n, allowed, V);
            if (fr == DS_FILTER_DONE) filtering = 0;
            else if (fr == DS_FILTER_MASK)
                for (int t = 0; t < V; t++) if (!DS_MASK_HAS(allowed, t)) logits[t] = -INFINITY;
        }
        int32_t next = ds_sampler_sample(&smp, logits, hist + toks.n, n_hist - (int)toks.n, n_hist, &sc);
        int stop = 0;
        for (int k = 0; k < c->n_eos; k++) stop |= next == c->eos_ids[k];
        if (stop) break;
        hist[n_hist++] = next;
        if (ds_stream_decoder_push(&dec, next, &text, &len, &e) != DS_OK) {
            fprintf(stderr, "\ndeltaserve generate: %s\n", e.msg);
            goto out;
        }
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        /* past an image, position p turns by p + delta on every axis */
        int32_t rope[3] = {n_hist - 1 + ip.delta, n_hist - 1 + ip.delta, n_hist - 1 + ip.delta};
        ds_cli_image_inputs dec_im = {.rope_pos = rope};
        if (produced + 1 < n_gen &&
            ds_cli_model_run_ex(&cm, &next, 1, n_hist - 1, n_images ? &dec_im : NULL, 0, logits, &e) != DS_OK) {
            fprintf(stderr, "\ndeltaserve generate: %s\n", e.msg);
            goto out;
        }
    }
    ds_stream_decoder_flush(&dec, &text, &len);
    fwrite(text, 1, len, stdout);
    double t2 = ds_now();
    printf("\n");
    /* the text's last line ends before the statistics begin, also when stdout and stderr share a pipe */
    fflush(stdout);
    fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s\n", toks.n,
            (double)toks.n / (t1 - t0), produced, produced ? (double)produced / (t2 - t1) : 0.0);
    if (grammar) {
        /* the filter has seen the answer up to its last token: show it that one too */
        if (filtering) {
            memset(allowed, 0, DS_MASK_WORDS(V) * sizeof *allowed);
            ds_grammar_filter_fn(filter, hist + toks.n, n_hist - (int)toks.n, allowed, V);
        }
        fprintf(stderr, "grammar: %s\n", ds_grammar_filter_complete(filter) ? "complete" : "incomplete");
    }
    rc = 0;
out:
    ds_grammar_filter_free(filter);
    ds_vocab_index_free(vocab);
    ds_grammar_unref(grammar);
    free(allowed);
    ds_stream_decoder_free(&dec);
    ds_sampler_scratch_free(&sc);
    free(logits);
    free(hist);
    free(toks.ids);
    ds_cli_image_prompt_free(&ip);
    ds_vision_free(cm.vision); /* bound by ds_cli_image_prompt_build */
    cm.vision = NULL;
    ds_cli_model_close(&cm);
    return rc;
}
