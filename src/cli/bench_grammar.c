/* bench_grammar.c - see bench_grammar.h. */
#include "cli/bench_grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_model.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "grammar/grammar_filter.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/vocab_index.h"
#include "tokenizer/tokenizer.h"

#define COMPILE_REPS 20
/* whitespace a schema's grammar allows between JSON tokens (bytes in a row) */
#define SCHEMA_SPACE 2

static int fail(const char *what, const ds_err *e) {
    fprintf(stderr, "deltaserve bench: %s: %s\n", what, e->msg);
    return 1;
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb, cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) { free(b); return NULL; }
    b[n] = '\0';
    *len = n;
    return b;
}

/* --- compile --- */

typedef struct {
    char *gbnf;
    size_t len;
    double first_ms, mean_ms; /* schema -> grammar (or the GBNF parse alone) */
} compiled;

/* one compile: schema -> GBNF -> grammar (the GBNF text is kept from the first) */
static int compile_once(const json_t *schema, compiled *c, ds_grammar **g, ds_err *e) {
    char *text = NULL;
    if (schema) {
        ds_schema_options o = {.strict = 1, .max_space = SCHEMA_SPACE};
        if (ds_json_schema_to_gbnf(schema, "root", &o, &text, e)) return -1;
    }
    const char *t = schema ? text : c->gbnf;
    ds_status s = ds_grammar_parse(t, strlen(t), g, e);
    if (schema && !c->gbnf) c->gbnf = text, c->len = strlen(text);
    else free(text);
    return s ? -1 : 0;
}

static int compile(const ds_bench_grammar_params *p, compiled *c) {
    ds_err e = {0};
    json_t *schema = NULL;
    memset(c, 0, sizeof *c);
    if (p->schema_path) {
        json_error_t je;
        schema = json_load_file(p->schema_path, 0, &je);
        if (!schema) {
            if (je.line > 0)
                fprintf(stderr, "deltaserve bench: --schema %s: line %d column %d: %s\n", p->schema_path, je.line,
                        je.column, je.text);
            else fprintf(stderr, "deltaserve bench: --schema %s: %s\n", p->schema_path, je.text);
            return 1;
        }
    } else {
        c->gbnf = read_text(p->grammar_path, &c->len);
        if (!c->gbnf) {
            fprintf(stderr, "deltaserve bench: --grammar %s: cannot read it\n", p->grammar_path);
            return 1;
        }
    }
    int rc = 0;
    double sum = 0;
    for (int r = 0; r <= COMPILE_REPS && !rc; r++) {
        ds_grammar *g = NULL;
        double t0 = ds_now();
        if (compile_once(schema, c, &g, &e)) {
            rc = fail(p->schema_path ? p->schema_path : p->grammar_path, &e);
            break;
        }
        double ms = (ds_now() - t0) * 1e3;
        ds_grammar_unref(g);
        if (r == 0) c->first_ms = ms;
        else sum += ms;
    }
    c->mean_ms = sum / COMPILE_REPS;
    json_decref(schema);
    return rc;
}

/* --- masks --- */

typedef struct {
    double mean_us, p99_us, max_us;
    long calls;
} mask_times;

typedef struct {
    char name[96];
    int n_tokens;
    double index_ms;
    mask_times first, cached;
    int walks, walks_ended;
    double tokens_per_walk;
} mask_result;

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void summarize(double *us, long n, mask_times *t) {
    memset(t, 0, sizeof *t);
    if (n == 0) return;
    double sum = 0;
    for (long i = 0; i < n; i++) sum += us[i];
    qsort(us, (size_t)n, sizeof *us, by_value);
    t->calls = n;
    t->mean_us = sum / (double)n;
    long k = (long)((double)n * 0.99);
    t->p99_us = us[k < n ? k : n - 1];
    t->max_us = us[n - 1];
}

static uint32_t rng;
static uint32_t rnd(void) { return rng = rng * 1664525u + 1013904223u, rng >> 8; }

static int closing_bytes(const char *b, size_t len) {
    int n = 0;
    for (size_t i = 0; i < len; i++) n += b[i] == '}' || b[i] == ']' || b[i] == '"';
    return n;
}

/* The next token of a walk: random among the allowed, or, more often as the walk grows, the best
 * of a few candidates: one after which the text may end, else the one closing the most, else the
 * shortest. Candidates are tried by accepting and taking back (not timed). */
static int32_t pick(ds_matcher *m, const ds_tokenizer *tok, const int32_t *allowed, int n, int step, int max_steps) {
    if ((int)(rnd() % (uint32_t)(max_steps / 2 + 1)) >= step) return allowed[rnd() % (uint32_t)n];
    int32_t best = allowed[0];
    int best_close = -1;
    size_t best_len = (size_t)-1;
    for (int c = 0; c < 16; c++) {
        int32_t t = allowed[rnd() % (uint32_t)n];
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(tok, t, &len);
        if (!b || !ds_matcher_accept(m, b, len)) continue;
        int ends = ds_matcher_can_end(m);
        ds_matcher_rollback(m, 1);
        if (ends) return t;
        int cl = closing_bytes(b, len);
        if (cl > best_close || (cl == best_close && len < best_len)) best = t, best_close = cl, best_len = len;
    }
    return best;
}

/* The walks over a fresh grammar, then the same walks again (same seed, so the same states). */
static int mask_bench(const ds_bench_grammar_params *p, const compiled *c, const ds_tokenizer *tok, mask_result *res) {
    ds_err e = {0};
    ds_vocab_index *vi = NULL;
    ds_grammar *g = NULL;
    double t0 = ds_now();
    if (ds_vocab_index_new(tok, &vi, &e)) return fail(res->name, &e);
    res->index_ms = (ds_now() - t0) * 1e3;
    res->n_tokens = ds_vocab_index_n_tokens(vi);
    if (ds_grammar_parse(c->gbnf, c->len, &g, &e)) {
        ds_vocab_index_free(vi);
        return fail("grammar", &e);
    }
    size_t words = DS_MASK_WORDS(res->n_tokens), cap = (size_t)p->walks * (size_t)p->max_steps;
    uint32_t *bits = malloc(words * sizeof *bits);
    int32_t *allowed = malloc((size_t)res->n_tokens * sizeof *allowed);
    double *us = malloc(cap * sizeof *us);
    int rc = 0;
    if (!bits || !allowed || !us) {
        fprintf(stderr, "deltaserve bench: out of memory\n");
        rc = 1;
    }
    for (int pass = 0; pass < 2 && !rc; pass++) {
        rng = (uint32_t)p->seed * 2654435761u + 17;
        long n_us = 0, steps = 0;
        int ended = 0;
        for (int w = 0; w < p->walks && !rc; w++) {
            ds_matcher *m = NULL;
            if (ds_matcher_new(g, &m, &e)) { rc = fail("matcher", &e); break; }
            for (int step = 0; step < p->max_steps; step++) {
                memset(bits, 0, words * sizeof *bits);
                double ts = ds_now();
                int cnt = ds_matcher_fill_mask(m, vi, bits);
                us[n_us++] = (ds_now() - ts) * 1e6;
                steps++;
                if (cnt == 0) { ended += ds_matcher_can_end(m); break; }
                if (ds_matcher_can_end(m) && rnd() % 8 == 0) { ended++; break; }
                int n = 0;
                for (int32_t t = 0; t < res->n_tokens; t++)
                    if (DS_MASK_HAS(bits, t)) allowed[n++] = t;
                int32_t t = pick(m, tok, allowed, n, step, p->max_steps);
                size_t len = 0;
                const char *b = ds_tokenizer_token_bytes(tok, t, &len);
                if (!b || !ds_matcher_accept(m, b, len)) {
                    fprintf(stderr, "deltaserve bench: %s: the matcher refused token %d, which its mask allowed\n",
                            res->name, t);
                    rc = 1;
                    break;
                }
            }
            ds_matcher_free(m);
        }
        summarize(us, n_us, pass ? &res->cached : &res->first);
        res->walks = p->walks;
        res->walks_ended = ended;
        res->tokens_per_walk = (double)steps / p->walks;
    }
    free(bits);
    free(allowed);
    free(us);
    ds_grammar_unref(g);
    ds_vocab_index_free(vi);
    return rc;
}

/* --- decode through the engine --- */

typedef struct {
    int busy, generated, done;
    ds_grammar_filter *filter;
} slot;

static void on_event(const ds_event *ev, void *user) {
    slot *s = user;
    if (ev->finished) s->done = 1;
    else s->generated++;
}

typedef struct {
    double tok_s;
    long tokens, requests, complete; /* complete: constrained answers that ended where the grammar may end */
    int64_t drafted, accepted;
} decode_result;

/* A closed loop of conc requests at a time (8-token prompts, sampled, up to n_gen tokens each and
 * ended by an end token too), a finished one replaced at once, 4 (alone) or 2 x conc requests in
 * all; g NULL: unconstrained. */
static int decode_rate(ds_model *model, const ds_tokenizer *tok, const ds_vocab_index *vi, ds_grammar *g, int conc,
                       int n_gen, decode_result *out) {
    const ds_model_config *c = ds_model_cfg(model);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.max_running = conc;
    ep.prefix_cache = 0;
    ds_engine *eng;
    ds_err e = {0};
    memset(out, 0, sizeof *out);
    if (ds_engine_new(model, &ep, &eng, &e)) return fail("engine", &e);
    slot *slots = calloc((size_t)conc, sizeof *slots);
    if (!slots) {
        ds_engine_free(eng);
        fprintf(stderr, "deltaserve bench: out of memory\n");
        return 1;
    }
    long total = conc > 1 ? 2L * conc : 4;
    uint32_t x = 7;
    int rc = 0, live = 0;
    double t0 = ds_now();
    for (;;) {
        for (int i = 0; i < conc && !rc; i++) {
            slot *s = &slots[i];
            if (s->busy && s->done) {
                out->tokens += s->generated;
                if (s->filter) {
                    out->complete += ds_grammar_filter_complete(s->filter);
                    ds_grammar_filter_free(s->filter);
                }
                memset(s, 0, sizeof *s);
                live--;
            }
            if (s->busy || out->requests >= total) continue;
            int32_t prompt[8];
            for (int k = 0; k < 8; k++) prompt[k] = (int32_t)(((x = x * 1664525u + 1013904223u) >> 8) % 1000u);
            ds_request_params rp = {.prompt = prompt, .n_prompt = 8, .max_tokens = n_gen, .on_event = on_event,
                                    .user = s};
            ds_sampling_defaults(&rp.sampling);
            rp.sampling.temperature = 0.7f;
            rp.sampling.seed = (uint64_t)out->requests;
            if (g) {
                ds_grammar_filter_params fp = {.grammar = g, .vocab = vi, .tok = tok, .end_ids = c->eos_ids,
                                               .n_end = c->n_eos};
                if (ds_grammar_filter_new(&fp, &s->filter, &e)) { rc = fail("grammar filter", &e); break; }
                rp.filter = ds_grammar_filter_fn;
                rp.filter_user = s->filter;
            }
            if (!ds_engine_submit(eng, &rp, &e)) { rc = fail("submit", &e); break; }
            s->busy = 1;
            out->requests++;
            live++;
        }
        if (rc || live == 0) break;
        ds_engine_step(eng);
    }
    double wall = ds_now() - t0;
    ds_engine_stats st;
    ds_engine_stats_get(eng, &st);
    ds_engine_free(eng);
    for (int i = 0; i < conc; i++)
        if (slots[i].filter) ds_grammar_filter_free(slots[i].filter);
    free(slots);
    out->tok_s = wall > 0 ? (double)out->tokens / wall : 0;
    out->drafted = st.spec_drafted;
    out->accepted = st.spec_accepted;
    return rc;
}

int ds_bench_grammar(const ds_bench_grammar_params *p) {
    compiled c;
    if (compile(p, &c)) { free(c.gbnf); return 1; }
    ds_err e = {0};
    ds_model_file *file = NULL;
    ds_model *model = NULL;
    ds_tokenizer *toks[2] = {NULL, NULL};
    mask_result mr[2];
    memset(mr, 0, sizeof mr);
    decode_result dr[2][2];
    memset(dr, 0, sizeof dr);
    int n_tok = 0, rc = 1, concs[2] = {1, p->conc}, n_conc = p->conc > 1 ? 2 : 1;
    if (ds_model_open_ex(p->model_path, p->load, &file, &e)) { fail(p->model_path, &e); goto out; }
    if (ds_tokenizer_from_model(file, &toks[0], &e)) { fail("the model's tokenizer", &e); goto out; }
    snprintf(mr[0].name, sizeof mr[0].name, "model (%s)",
             strrchr(p->model_path, '/') ? strrchr(p->model_path, '/') + 1 : p->model_path);
    n_tok = 1;
    if (p->tokenizer_path) {
        if (ds_tokenizer_open(p->tokenizer_path, &toks[1], &e)) { fail(p->tokenizer_path, &e); goto out; }
        size_t pl = strlen(p->tokenizer_path); /* the end of a long path says the most */
        snprintf(mr[1].name, sizeof mr[1].name, "%s%s", pl > 40 ? ".." : "", p->tokenizer_path + (pl > 40 ? pl - 38 : 0));
        n_tok = 2;
    }
    for (int i = 0; i < n_tok; i++) {
        if (!p->json) fprintf(stderr, "bench: masks over %s ...\n", mr[i].name);
        if (mask_bench(p, &c, toks[i], &mr[i])) goto out;
    }
    if (p->n_gen > 0) {
        ds_engine_params ep;
        ds_engine_defaults(&ep);
        ds_model_params mp = {.max_batch_tokens = ds_engine_required_batch_capacity(&ep), .n_threads = p->n_threads};
        ds_vocab_index *vi = NULL;
        ds_grammar *g = NULL;
        if (ds_model_new(file, &mp, &model, &e)) { fail(p->model_path, &e); goto out; }
        if (ds_vocab_index_new(toks[0], &vi, &e)) { fail("vocab index", &e); goto out; }
        if (ds_grammar_parse(c.gbnf, c.len, &g, &e)) { ds_vocab_index_free(vi); fail("grammar", &e); goto out; }
        /* warm-up: the first run would pay for bringing the weights into memory */
        decode_result warm;
        int bad = decode_rate(model, toks[0], vi, NULL, 1, p->n_gen < 8 ? p->n_gen : 8, &warm);
        for (int k = 0; k < n_conc && !bad; k++)
            for (int constrained = 0; constrained < 2 && !bad; constrained++) {
                if (!p->json)
                    fprintf(stderr, "bench: decode, %d at once, %s ...\n", concs[k], constrained ? "constrained" : "free");
                bad = decode_rate(model, toks[0], vi, constrained ? g : NULL, concs[k], p->n_gen, &dr[k][constrained]);
            }
        ds_grammar_unref(g);
        ds_vocab_index_free(vi);
        if (bad) goto out;
    }
    const char *src = p->schema_path ? p->schema_path : p->grammar_path;
    if (p->json) {
        printf("{\"%s\": \"%s\", \"gbnf_bytes\": %zu, \"compile_ms_first\": %.3f, \"compile_ms_mean\": %.3f, "
               "\"tokenizers\": [", p->schema_path ? "schema" : "grammar", src, c.len, c.first_ms, c.mean_ms);
        for (int i = 0; i < n_tok; i++) {
            const mask_result *m = &mr[i];
            printf("%s{\"name\": \"%s\", \"n_tokens\": %d, \"index_ms\": %.1f, \"walks\": %d, \"walks_ended\": %d, "
                   "\"tokens_per_walk\": %.1f", i ? ", " : "", m->name, m->n_tokens, m->index_ms, m->walks,
                   m->walks_ended, m->tokens_per_walk);
            const mask_times *t[2] = {&m->first, &m->cached};
            for (int k = 0; k < 2; k++)
                printf(", \"%s\": {\"calls\": %ld, \"mean_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f}",
                       k ? "cached" : "first", t[k]->calls, t[k]->mean_us, t[k]->p99_us, t[k]->max_us);
            printf("}");
        }
        printf("], \"decode\": [");
        for (int k = 0; p->n_gen > 0 && k < n_conc; k++) {
            const decode_result *f = &dr[k][0], *s = &dr[k][1];
            printf("%s{\"concurrency\": %d, \"tok_s_free\": %.2f, \"tok_s_constrained\": %.2f, \"ratio\": %.3f, "
                   "\"requests_constrained\": %ld, \"complete\": %ld, \"drafted\": %lld, \"accepted\": %lld}",
                   k ? ", " : "", concs[k], f->tok_s, s->tok_s, f->tok_s > 0 ? s->tok_s / f->tok_s : 0, s->requests,
                   s->complete, (long long)s->drafted, (long long)s->accepted);
        }
        printf("]}\n");
    } else {
        printf("%s %s: %zu bytes of GBNF\n", p->schema_path ? "schema" : "grammar", src, c.len);
        printf("| %-34s | %10s |\n|------------------------------------|-----------:|\n", "compile", "ms");
        printf("| %-34s | %10.3f |\n| %-34s | %10.3f |\n", p->schema_path ? "schema -> grammar, first" : "parse, first",
               c.first_ms, p->schema_path ? "schema -> grammar, mean of 20" : "parse, mean of 20", c.mean_ms);
        printf("\ntoken masks (ds_matcher_fill_mask), %d walks per tokenizer, first visit then the same walks cached:\n",
               p->walks);
        printf("| %-40s | %8s | %9s | %6s | %9s | %9s | %9s |\n", "tokenizer", "tokens", "index ms", "pass",
               "mean us", "p99 us", "max us");
        printf("|------------------------------------------|---------:|----------:|--------|----------:|----------:|"
               "----------:|\n");
        for (int i = 0; i < n_tok; i++)
            for (int k = 0; k < 2; k++) {
                const mask_times *t = k ? &mr[i].cached : &mr[i].first;
                printf("| %-40.40s | %8d | %9.1f | %6s | %9.2f | %9.2f | %9.2f |\n", mr[i].name, mr[i].n_tokens,
                       mr[i].index_ms, k ? "cached" : "first", t->mean_us, t->p99_us, t->max_us);
            }
        for (int i = 0; i < n_tok; i++)
            printf("%s: %.1f tokens per walk, %d of %d walks ended where the grammar may end\n", mr[i].name,
                   mr[i].tokens_per_walk, mr[i].walks_ended, mr[i].walks);
        if (p->n_gen > 0) {
            printf("\ndecode through the engine (up to %d tokens per request, a finished request replaced at once):\n",
                   p->n_gen);
            printf("| %-11s | %12s | %18s | %7s | %22s |\n", "concurrency", "free tok/s", "constrained tok/s", "ratio",
                   "constrained: complete");
            printf("|------------:|-------------:|-------------------:|--------:|-----------------------:|\n");
            for (int k = 0; k < n_conc; k++) {
                const decode_result *f = &dr[k][0], *s = &dr[k][1];
                char done[40];
                snprintf(done, sizeof done, "%ld of %ld", s->complete, s->requests);
                printf("| %11d | %12.2f | %18.2f | %6.1f%% | %22s |\n", concs[k], f->tok_s, s->tok_s,
                       f->tok_s > 0 ? 100 * s->tok_s / f->tok_s : 0, done);
            }
        }
    }
    rc = 0;
out:
    ds_model_free(model);
    for (int i = 0; i < 2; i++) ds_tokenizer_free(toks[i]);
    if (file) ds_model_close(file);
    free(c.gbnf);
    return rc;
}
