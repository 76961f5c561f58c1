/* bench_engine.c - see bench_engine.h. Everything runs through the real
 * engine (continuous batching, prefix cache, speculation) on one thread, with
 * requests submitted directly instead of over HTTP. */
#include "cli/bench_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_model.h"
#include "engine/engine.h"

/* token-id bounds the speculation bench counts the model's tokens under (the --spec-vocab sizes) */
#define N_ID_BOUNDS 5
static const int ID_BOUNDS[N_ID_BOUNDS] = {4096, 8192, 16384, 32768, 65536};

typedef struct {
    double submitted, first;   /* times */
    int generated;
    int done;
    int below[N_ID_BOUNDS];    /* tokens with an id below ID_BOUNDS[k] */
} req_clock;

static void on_event(const ds_event *ev, void *user) {
    req_clock *c = user;
    if (ev->finished) { c->done = 1; return; }
    for (int k = 0; k < N_ID_BOUNDS; k++) c->below[k] += ev->token < ID_BOUNDS[k];
    if (c->generated++ == 0) c->first = ds_now();
}

typedef struct {
    ds_model_file *file;
    ds_model *model;
} bench_model;

static ds_load_options load_opts;

void ds_bench_load_options(const ds_load_options *lo) { load_opts = *lo; }

/* Sized for engines with the default step (every engine here has one). */
static int open_model(const char *path, int n_threads, bench_model *bm) {
    ds_err e = {0};
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ds_model_params mp = {.max_batch_tokens = ds_engine_required_batch_capacity(&ep), .n_threads = n_threads};
    if (ds_model_open_ex(path, &load_opts, &bm->file, &e) || ds_model_new(bm->file, &mp, &bm->model, &e)) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        if (bm->file) ds_model_close(bm->file);
        return 1;
    }
    return 0;
}

static void close_model(bench_model *bm) {
    ds_model_free(bm->model);
    ds_model_close(bm->file);
}

static void fill(int32_t *t, int n, uint32_t seed, int vocab) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(((seed = seed * 1664525u + 1013904223u) >> 8) % (uint32_t)(vocab < 1000 ? vocab : 1000));
}

/* Runs n requests through eng (all submitted at once); returns the wall time. temp 0: greedy;
 * otherwise request i samples at temp with seed seed + i. */
static double run_requests_sampled(ds_engine *eng, int32_t **prompts, const int *lens, int n, int n_gen, req_clock *clk,
                                   float temp, int mix, uint64_t seed) {
    double t0 = ds_now();
    ds_err e = {0};
    for (int i = 0; i < n; i++) {
        memset(&clk[i], 0, sizeof clk[i]);
        clk[i].submitted = ds_now();
        ds_request_params rp = {.prompt = prompts[i], .n_prompt = lens[i], .max_tokens = n_gen, .ignore_eos = 1,
                                .on_event = on_event, .user = &clk[i]};
        ds_sampling_defaults(&rp.sampling);
        rp.sampling.temperature = mix && i % 2 == 0 ? 0.0f : temp;
        rp.sampling.seed = seed + (uint64_t)i;
        if (!ds_engine_submit(eng, &rp, &e)) fprintf(stderr, "deltaserve bench: %s\n", e.msg);
    }
    while (ds_engine_step(eng)) {}
    return ds_now() - t0;
}

static double run_requests(ds_engine *eng, int32_t **prompts, const int *lens, int n, int n_gen, req_clock *clk) {
    return run_requests_sampled(eng, prompts, lens, n, n_gen, clk, 0.0f, 0, 0);
}

int ds_bench_shared_prefix(const char *path, int n_threads, int prefix_len, int json) {
    bench_model bm = {0};
    if (open_model(path, n_threads, &bm)) return 1;
    const ds_model_config *c = ds_model_cfg(bm.model);
    int suffix = 64, total = prefix_len + suffix;
    int32_t *p1 = malloc((size_t)total * sizeof *p1), *p2 = malloc((size_t)total * sizeof *p2);
    fill(p1, prefix_len, 7, c->n_vocab);
    memcpy(p2, p1, (size_t)prefix_len * sizeof *p1);
    fill(p1 + prefix_len, suffix, 11, c->n_vocab);
    fill(p2 + prefix_len, suffix, 13, c->n_vocab);
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.kv_bytes = (size_t)1 << 30;
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(bm.model, &ep, &eng, &e)) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        close_model(&bm);
        return 1;
    }
    req_clock clk[64];
    int32_t *pp[1] = {p1};
    int len[1] = {total};
    run_requests(eng, pp, len, 1, 1, clk);
    double cold = (clk[0].first - clk[0].submitted) * 1e3;
    pp[0] = p2;
    run_requests(eng, pp, len, 1, 1, clk);
    double warm = (clk[0].first - clk[0].submitted) * 1e3;
    ds_engine_stats st;
    ds_engine_stats_get(eng, &st);
    ds_engine_free(eng);
    /* throughput at several concurrencies: 2 x conc requests of 128 prompt + 64 output tokens */
    static const int concs[] = {1, 4, 16, 64};
    double tput[4];
    for (int k = 0; k < 4; k++) {
        int conc = concs[k], n = 2 * conc;
        ep.max_running = conc;
        ep.prefix_cache = 0;
        if (ds_engine_new(bm.model, &ep, &eng, &e)) { fprintf(stderr, "deltaserve bench: %s\n", e.msg); break; }
        int32_t **prompts = malloc((size_t)n * sizeof *prompts);
        int *lens = malloc((size_t)n * sizeof *lens);
        req_clock *cl = calloc((size_t)n, sizeof *cl);
        for (int i = 0; i < n; i++) {
            prompts[i] = malloc(128 * sizeof(int32_t));
            fill(prompts[i], 128, 100u + (uint32_t)i, c->n_vocab);
            lens[i] = 128;
        }
        double wall = run_requests(eng, prompts, lens, n, 64, cl);
        long gen = 0;
        for (int i = 0; i < n; i++) gen += cl[i].generated;
        tput[k] = (double)gen / wall;
        for (int i = 0; i < n; i++) free(prompts[i]);
        free(prompts), free(lens), free(cl);
        ds_engine_free(eng);
    }
    if (json) {
        printf("{\"workload\": \"shared-prefix\", \"prefix_tokens\": %d, \"suffix_tokens\": %d, \"ttft_cold_ms\": %.2f, "
               "\"ttft_warm_ms\": %.2f, \"warm_speedup\": %.2f, \"cache_hit_tokens\": %lld, \"output_tok_s\": {",
               prefix_len, suffix, cold, warm, cold / warm, (long long)st.prefix_hit_tokens);
        for (int k = 0; k < 4; k++) printf("%s\"%d\": %.2f", k ? ", " : "", concs[k], tput[k]);
        printf("}}\n");
    } else {
        printf("shared prefix of %d tokens + %d-token suffix:\n", prefix_len, suffix);
        printf("| %-22s | %12s |\n|------------------------|-------------:|\n", "", "ms");
        printf("| %-22s | %12.1f |\n| %-22s | %12.1f |\n| %-22s | %11.1fx |\n", "TTFT, cache cold", cold,
               "TTFT, cache warm", warm, "warm speed-up", cold / warm);
        printf("\nconcurrent requests (128 prompt + 64 output tokens each, 2 x concurrency requests):\n");
        printf("| %-12s | %14s |\n|--------------|---------------:|\n", "concurrency", "output tok/s");
        for (int k = 0; k < 4; k++) printf("| %-12d | %14.1f |\n", concs[k], tput[k]);
    }
    free(p1);
    free(p2);
    close_model(&bm);
    return 0;
}

/* Branches of one long prompt, for choosing the checkpoint interval. For each
 * interval: a fresh engine prefills one prompt of prefix_len tokens (cold),
 * then requests that share its first N tokens (N spread over the prompt, not
 * on any grid) and add 64 of their own run one at a time. A branch resumes
 * from the deepest checkpoint at or before N, so it recomputes N mod interval
 * tokens on average interval/2; but every checkpoint costs one DeltaNet state
 * of the cache's byte budget and a copy during prefill. */
int ds_bench_branch(const char *path, int n_threads, int prefix_len, int json) {
    static const int intervals[] = {0, 128, 256, 512, 1024};
    enum { N_INTERVALS = 5, N_BRANCH = 8, SUFFIX = 64 };
    bench_model bm = {0};
    if (open_model(path, n_threads, &bm)) return 1;
    const ds_model_config *c = ds_model_cfg(bm.model);
    int32_t *base = malloc((size_t)prefix_len * sizeof *base);
    int32_t *br = malloc((size_t)(prefix_len + SUFFIX) * sizeof *br);
    if (!base || !br) {
        fprintf(stderr, "deltaserve bench: out of memory\n");
        free(base), free(br), close_model(&bm);
        return 1;
    }
    fill(base, prefix_len, 7, c->n_vocab);
    int at[N_BRANCH];
    uint32_t r = 12345;
    for (int b = 0; b < N_BRANCH; b++) {
        r = r * 1664525u + 1013904223u;
        /* spread over the prompt, one per eighth, never on a checkpoint position */
        int lo = prefix_len * b / N_BRANCH, span = prefix_len / N_BRANCH;
        at[b] = lo + 1 + (int)((r >> 8) % (uint32_t)(span > 2 ? span - 2 : 1));
        if (at[b] % DS_DELTANET_CHUNK == 0) at[b]++;
    }
    double cold[N_INTERVALS], ttft[N_INTERVALS], recomputed[N_INTERVALS];
    int ckpts[N_INTERVALS];
    size_t ck_bytes = 0; /* one checkpoint: the cache's budget over its slots */
    int code = 0;
    for (int k = 0; k < N_INTERVALS && !code; k++) {
        ds_engine_params ep;
        ds_engine_defaults(&ep);
        ep.kv_bytes = (size_t)1 << 30;
        ep.checkpoint_interval = intervals[k];
        ds_engine *eng;
        ds_err e = {0};
        if (ds_engine_new(bm.model, &ep, &eng, &e)) {
            fprintf(stderr, "deltaserve bench: %s\n", e.msg);
            code = 1;
            break;
        }
        req_clock clk[1];
        int32_t *pp[1] = {base};
        int len[1] = {prefix_len};
        run_requests(eng, pp, len, 1, 1, clk);
        cold[k] = (clk[0].first - clk[0].submitted) * 1e3;
        ds_engine_stats st0, st;
        ds_engine_stats_get(eng, &st0);
        ckpts[k] = st0.checkpoint_slots_used;
        if (st0.checkpoint_slots_total > 0) ck_bytes = ep.cache_state_bytes / (size_t)st0.checkpoint_slots_total;
        double sum = 0;
        for (int b = 0; b < N_BRANCH; b++) {
            memcpy(br, base, (size_t)at[b] * sizeof *br);
            fill(br + at[b], SUFFIX, 1000u + (uint32_t)b, c->n_vocab);
            pp[0] = br;
            len[0] = at[b] + SUFFIX;
            run_requests(eng, pp, len, 1, 1, clk);
            sum += (clk[0].first - clk[0].submitted) * 1e3;
        }
        ds_engine_stats_get(eng, &st);
        ttft[k] = sum / N_BRANCH;
        recomputed[k] = (double)((st.prefix_query_tokens - st0.prefix_query_tokens) -
                                 (st.prefix_hit_tokens - st0.prefix_hit_tokens)) / N_BRANCH;
        ds_engine_free(eng);
        if (!json)
            fprintf(stderr, "bench: interval %d: cold %.0f ms, branch TTFT %.0f ms\n", intervals[k], cold[k], ttft[k]);
    }
    if (!code && json) {
        printf("{\"workload\": \"branch\", \"prefix_tokens\": %d, \"suffix_tokens\": %d, \"branches\": %d, "
               "\"checkpoint_bytes\": %zu, \"intervals\": [", prefix_len, SUFFIX, N_BRANCH, ck_bytes);
        for (int k = 0; k < N_INTERVALS; k++)
            printf("%s{\"interval\": %d, \"checkpoints\": %d, \"ttft_cold_ms\": %.2f, \"ttft_branch_ms\": %.2f, "
                   "\"recomputed_tokens\": %.1f}", k ? ", " : "", intervals[k], ckpts[k], cold[k], ttft[k], recomputed[k]);
        printf("]}\n");
    } else if (!code) {
        printf("%d branches of a %d-token prompt (each shares its first N tokens, N spread over the prompt, + %d own):\n",
               N_BRANCH, prefix_len, SUFFIX);
        printf("| checkpoint interval | checkpoints kept | MB kept | prompt TTFT ms | branch TTFT ms | tokens recomputed |\n");
        printf("|--------------------:|-----------------:|--------:|---------------:|---------------:|------------------:|\n");
        for (int k = 0; k < N_INTERVALS; k++) {
            char name[32];
            if (intervals[k]) snprintf(name, sizeof name, "%d", intervals[k]);
            else snprintf(name, sizeof name, "prompt end only");
            printf("| %19s | %16d | %7.1f | %14.0f | %14.0f | %17.1f |\n", name, ckpts[k],
                   (double)ckpts[k] * (double)ck_bytes / 1e6, cold[k], ttft[k], recomputed[k]);
        }
    }
    free(base);
    free(br);
    close_model(&bm);
    return code;
}

/* Time of `reps` forward calls of n tokens at the same positions (DECODE, or
 * VERIFY with the commit of all n tokens that acceptance would do). */
static double time_calls(ds_model *m, ds_kv_pool *kv, ds_state_pool *st, int pos, int n, int reps) {
    ds_batch_token t[16];
    int32_t pages[64];
    for (int i = 0; i < 64; i++) pages[i] = i;
    int32_t vs[16];
    for (int i = 0; i < 16; i++) vs[i] = 1 + i;
    ds_batch_seq s = {.mode = n == 1 ? DS_SEQ_DECODE : DS_SEQ_VERIFY, .pages = pages, .n_pages = 64, .state_slot = 0,
                      .verify_slots = vs};
    float *logits = malloc((size_t)n * (size_t)ds_model_cfg(m)->n_vocab * sizeof(float));
    double t0 = ds_now();
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < n; i++) t[i] = (ds_batch_token){.token = 5 + i, .seq = 0, .pos = pos + i, .want_logits = 1};
        ds_batch b = {.tokens = t, .n_tokens = n, .seqs = &s, .n_seqs = 1, .logits = logits};
        ds_err e = {0};
        if (ds_model_forward(m, kv, st, &b, &e) || (n > 1 && ds_model_verify_commit(m, st, NULL, 0, vs, n, &e))) {
            fprintf(stderr, "deltaserve bench: %s\n", e.msg);
            break;
        }
    }
    free(logits);
    return (ds_now() - t0) / reps;
}

/* Decode tokens/s of n (at most 64) sequences (different 32-token prompts, greedy or sampled at
 * temp) decoding at once through an engine, timed from their first token to the end; *st gets the
 * engine's counters. */
static int decode_rate(ds_model *m, const ds_bench_spec_params *sp, int spec, int n, double *tok_s,
                       ds_engine_stats *st, double *below) {
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.spec_tokens = spec ? sp->spec_tokens : 0;
    ep.spec_policy = sp->spec_policy;
    ep.spec_vocab = sp->spec_vocab;
    if (sp->spec_state_bytes) ep.spec_state_bytes = sp->spec_state_bytes;
    if (sp->spec_max_batch >= 0) ep.spec_max_batch = sp->spec_max_batch;
    int n_gen = sp->n_gen;
    ep.max_running = n;
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, &ep, &eng, &e)) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        return -1;
    }
    int32_t *prompts[64] = {0};
    int lens[64] = {0};
    req_clock clk[64];
    int32_t *buf = malloc((size_t)n * 32 * sizeof *buf);
    if (!buf || n > 64) {
        free(buf);
        ds_engine_free(eng);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        prompts[i] = buf + (size_t)i * 32;
        lens[i] = 32;
        fill(prompts[i], 32, 3 + (uint32_t)i * 977, ds_model_cfg(m)->n_vocab);
    }
    run_requests_sampled(eng, prompts, lens, n, n_gen, clk, sp->temp, sp->mix, sp->seed);
    /* the prompts are prefilled together, so every first token comes out of the same step */
    double end = ds_now(), start = clk[0].first;
    int tokens = 0, all = 0, below_n[N_ID_BOUNDS] = {0};
    for (int i = 0; i < n; i++) {
        if (clk[i].first < start) start = clk[i].first;
        tokens += clk[i].generated - 1;
        all += clk[i].generated;
        for (int k = 0; k < N_ID_BOUNDS; k++) below_n[k] += clk[i].below[k];
    }
    *tok_s = (double)tokens / (end - start);
    for (int k = 0; below && k < N_ID_BOUNDS; k++) below[k] = all ? (double)below_n[k] / all : 0.0;
    ds_engine_stats_get(eng, st);
    ds_engine_free(eng);
    free(buf);
    return 0;
}

int ds_bench_spec(const char *path, int n_threads, const ds_bench_spec_params *sp, int json) {
    int spec_tokens = sp->spec_tokens, batch = sp->batch;
    float temp = sp->temp;
    bench_model bm = {0};
    if (open_model(path, n_threads, &bm)) return 1;
    const ds_model_config *c = ds_model_cfg(bm.model);
    if (!c->n_mtp) {
        fprintf(stderr, "deltaserve bench: %s has no MTP head to speculate with\n", path);
        close_model(&bm);
        return 1;
    }
    int spec_vocab = sp->spec_vocab;
    if (spec_vocab < 0) spec_vocab = DS_SPEC_VOCAB_DEFAULT; /* not given: the engine's, whatever the vocabulary */
    else if (spec_vocab > c->n_vocab) {
        fprintf(stderr, "deltaserve bench: --spec-vocab %d: %s has %d tokens in its vocabulary (0 drafts over all)\n",
                spec_vocab, path, c->n_vocab);
        close_model(&bm);
        return 2;
    }
    int draft_vocab = spec_vocab > 0 && spec_vocab < c->n_vocab ? spec_vocab : c->n_vocab;
    ds_bench_spec_params vsp = *sp;
    vsp.spec_vocab = spec_vocab;
    /* verify cost: one forward of k+1 tokens against one of 1 token, at position 64 */
    ds_kv_pool kv;
    ds_state_pool st;
    ds_err e = {0};
    size_t page = (size_t)ds_model_n_attn_layers(bm.model) * 64 * (size_t)c->n_head_kv * (size_t)c->head_dim * 2 * 4;
    if (ds_kv_pool_init(&kv, ds_model_n_attn_layers(bm.model), c->n_head_kv, c->head_dim, 64, page * 64, &e) ||
        ds_state_pool_init(&st, ds_model_n_gdn_layers(bm.model), c->conv_kernel, ds_model_conv_dim(bm.model),
                           c->lin_v_heads, c->lin_k_dim, c->lin_v_dim, 2 + spec_tokens, &e)) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        close_model(&bm);
        return 1;
    }
    time_calls(bm.model, &kv, &st, 0, 1, 2); /* warm-up */
    double t_dec = time_calls(bm.model, &kv, &st, 64, 1, 10);
    double t_ver = time_calls(bm.model, &kv, &st, 64, spec_tokens + 1, 10);
    ds_kv_pool_free(&kv);
    ds_state_pool_free(&st);
    /* decode speed through the engine, one sequence and `batch` at once, with and without drafts */
    double tok_s[2], batch_tok_s[2] = {0, 0};
    ds_engine_stats sst = {0}, bst = {0};
    double below[N_ID_BOUNDS]; /* of the model's own tokens (the same with or without drafts) */
    for (int spec = 0; spec < 2; spec++) {
        if (decode_rate(bm.model, &vsp, spec, 1, &tok_s[spec], &sst, spec ? NULL : below) ||
            (batch > 1 && decode_rate(bm.model, &vsp, spec, batch, &batch_tok_s[spec], &bst, NULL))) {
            close_model(&bm);
            return 1;
        }
    }
    /* sequences verifying drafts per step at `batch` (the verify records' budget limits it) */
    double verifying = bst.steps ? (double)bst.spec_verify_steps / (double)bst.steps : 0.0;
    double acc = sst.spec_drafted ? (double)sst.spec_accepted / (double)sst.spec_drafted : 0.0;
    double mean_len = sst.spec_verify_steps ? (double)sst.spec_accepted / (double)sst.spec_verify_steps : 0.0;
    double per_draft = sst.spec_compared ? (double)sst.spec_accepted / (double)sst.spec_compared : 0.0;
    /* what the batch policy decided at `batch`: the share of planned steps with drafts, drafts per step */
    double plan_drafting = bst.spec_plan_steps ? (double)bst.spec_plan_draft_steps / (double)bst.spec_plan_steps : 0.0;
    double drafts_per_step = bst.steps ? (double)bst.spec_drafted / (double)bst.steps : 0.0;
    const char *policy = sp->spec_policy == DS_SPEC_POLICY_REQUEST ? "request" : "batch";
    if (json) {
        printf("{\"spec_tokens\": %d, \"temperature\": %g, \"tg_tok_s\": %.2f, \"tg_tok_s_spec\": %.2f, \"speedup\": %.3f, "
               "\"verify_cost_ratio\": %.3f, \"acceptance\": %.3f, \"draft_acceptance\": %.3f, \"mean_accepted\": %.3f, "
               "\"drafted\": %lld, \"batch\": %d, \"batch_tok_s\": %.2f, \"batch_tok_s_spec\": %.2f, "
               "\"batch_speedup\": %.3f, \"batch_verifying_per_step\": %.2f, \"spec_vocab\": %d, \"n_vocab\": %d, "
               "\"draft_cost_ratio\": %.3f, \"tokens_below\": {\"4096\": %.3f, \"8192\": %.3f, \"16384\": %.3f, "
               "\"32768\": %.3f, \"65536\": %.3f}, \"policy\": \"%s\", \"mix\": %s, "
               "\"batch_plan_drafting\": %.3f, \"batch_drafts_per_step\": %.2f}\n",
               spec_tokens, temp, tok_s[0], tok_s[1], tok_s[1] / tok_s[0], t_ver / t_dec, acc, per_draft, mean_len,
               (long long)sst.spec_drafted, batch, batch_tok_s[0], batch_tok_s[1],
               batch_tok_s[0] > 0 ? batch_tok_s[1] / batch_tok_s[0] : 0.0, verifying, draft_vocab, c->n_vocab,
               ds_model_draft_cost(bm.model, draft_vocab), below[0], below[1], below[2], below[3], below[4], policy,
               sp->mix ? "true" : "false", plan_drafting, drafts_per_step);
    } else {
        printf("| %-32s | %12s |\n|----------------------------------|-------------:|\n", "", "");
        printf("| %-32s | %12d |\n", "drafts over token ids below", draft_vocab);
        printf("| %-32s | %11.2fx |\n", "draft reads / decode reads", ds_model_draft_cost(bm.model, draft_vocab));
        printf("| %-32s | %12.2f |\n", "decode tok/s, no speculation", tok_s[0]);
        printf("| decode tok/s, %d drafts per step%*s | %12.2f |\n", spec_tokens, spec_tokens > 9 ? 0 : 1, "", tok_s[1]);
        printf("| %-32s | %11.2fx |\n", "speed-up", tok_s[1] / tok_s[0]);
        printf("| %-32s | %11.2fx |\n", "verify of k+1 vs decode of 1", t_ver / t_dec);
        printf("| %-32s | %11.0f%% |\n", "drafts accepted", 100 * acc);
        printf("| %-32s | %11.0f%% |\n", "accepted of those compared", 100 * per_draft);
        printf("| %-32s | %12lld |\n", "drafts made", (long long)sst.spec_drafted);
        printf("| %-32s | %4.0f%%,%5.0f%% |\n", "model's tokens below 16k, 32k", 100 * below[2], 100 * below[3]);
        printf("| %-32s | %12.2f |\n", "mean accepted per verify", mean_len);
        if (batch > 1) {
            printf("| %2d sequences: tok/s, no drafts   | %12.2f |\n", batch, batch_tok_s[0]);
            printf("| %2d sequences: tok/s, %d drafts    | %12.2f |\n", batch, spec_tokens, batch_tok_s[1]);
            printf("| %-32s | %11.2fx |\n", "speed-up at that batch", batch_tok_s[0] > 0 ? batch_tok_s[1] / batch_tok_s[0] : 0.0);
            printf("| %-32s | %12.2f |\n", "sequences verifying per step", verifying);
            printf("| %-32s | %12.2f |\n", "drafts per step", drafts_per_step);
            if (sp->spec_policy != DS_SPEC_POLICY_REQUEST)
                printf("| %-32s | %11.0f%% |\n", "planned steps with drafts", 100 * plan_drafting);
        }
    }
    close_model(&bm);
    return 0;
}
