/* test_spec.c - MTP self-speculative decoding in the engine:
 *   - greedy: identical tokens (and logprobs, i.e. logits) with and without
 *     speculation over 100 prompts, for MTP heads agreeing ~100%, ~50% and 0%
 *     of the time, alone and in concurrent batches;
 *   - every accepted length 0..k occurs, and the step after each continues
 *     exactly (the logprobs of every token equal the plain run's);
 *   - sampling: the distribution of sampled tokens with speculation matches
 *     the one without (chi-square over many seeds), and with a seed the
 *     tokens are plain sampling's own, for k = 1, 2, 3, 8, heads agreeing
 *     ~100%, ~50% and 0%, alone, 16 at a time, under preemption, with 1 or
 *     2 threads, and repeated on one engine whose prefix cache is warm;
 *   - adaptive k: a head that never agrees stops drafting; over the batch
 *     cap nobody drafts;
 *   - the per-step batch policy: its cost curves (interpolation, optimistic
 *     extrapolation, fading) and its plans on fixed costs (a lone agreeing
 *     request drafts the most, a compute-bound batch drafts nothing,
 *     expensive sampled choices keep sampled requests from drafting while
 *     greedy ones draft, drafts never accepted are never planned); in the
 *     engine, 8 mixed greedy and seeded requests give plain decoding's tokens
 *     and logprobs under the measured policy and under fixed costs that make
 *     it draft or not, a lone agreeing request drafts, and a head that never
 *     agrees stops being drafted with;
 *   - under a token filter that narrows the choices (and follows refused
 *     drafts back), requests still draft, and their tokens and logprobs are
 *     plain constrained decoding's, greedy and seeded, k up to the most,
 *     alone and batched with unconstrained requests;
 *   - drafts over a subset of the vocabulary (spec_vocab): greedy, seeded
 *     and constrained outputs are plain decoding's for several subset sizes,
 *     and the share of drafts kept follows the model's tokens in the subset;
 *   - logit_bias: the tokens and logprobs of biased requests are plain
 *     decoding's with the same bias, greedy and seeded, with speculation;
 *     -100 bans a token, 100 forces one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/spec_cost.h"
#include "engine/spec_policy.h"
#include "model/model_make.h"
#include "testing.h"

#define MAXREQ 2048
#define GEN 12

static char tmpdir[256];

typedef struct {
    int32_t tok[MAXREQ][GEN];
    float lp[MAXREQ][GEN];
    int n[MAXREQ];
} outs;

typedef struct { outs *o; int i; } ctx;
static ctx ctxs[MAXREQ];

static void on_event(const ds_event *ev, void *user) {
    ctx *c = user;
    if (ev->finished || c->o->n[c->i] >= GEN) return;
    c->o->tok[c->i][c->o->n[c->i]] = ev->token;
    c->o->lp[c->i][c->o->n[c->i]++] = ev->logprob;
}

typedef struct { ds_model_file *f; ds_model *m; } loaded;

static int load_threads(float agree, int n_threads, loaded *l) {
    char path[512];
    snprintf(path, sizeof path, "%s/agree%.0f.gguf", tmpdir, agree * 100);
    if (access(path, R_OK) != 0) {
        ds_make_options o = {.shape = "tiny", .dtype = "f32", .format = DS_FORMAT_GGUF, .seed = 5, .scale = 1.0f,
                             .out = path, .mtp_agree_set = 1, .mtp_agree = agree};
        ds_err e = {0};
        if (ds_make_model(&o, &e)) { printf("make: %s\n", e.msg); return -1; }
    }
    ds_err e = {0};
    ds_model_params mp = {.max_batch_tokens = 512, .n_threads = n_threads};
    if (ds_model_open(path, &l->f, &e) || ds_model_new(l->f, &mp, &l->m, &e)) { printf("%s\n", e.msg); return -1; }
    return 0;
}

static int load(float agree, loaded *l) { return load_threads(agree, 0, l); }

static void unload(loaded *l) { ds_model_free(l->m); ds_model_close(l->f); }

static int32_t prompts[MAXREQ][24];
static int plen[MAXREQ];

static void make_prompts(int n) {
    uint32_t x = 12345;
    for (int r = 0; r < n; r++) {
        plen[r] = 4 + (int)((x = x * 1664525u + 1013904223u) >> 28);
        for (int i = 0; i < plen[r]; i++) prompts[r][i] = (int32_t)(((x = x * 1664525u + 1013904223u) >> 8) % 1000);
    }
}

/* REQUEST lets every running sequence draft, whatever the batch (so that concurrent runs exercise
 * verify); spec_max_batch caps it; spec_given: the costs of the GIVEN policy */
static int spec_policy = DS_SPEC_POLICY_REQUEST;
static int spec_max_batch;
static ds_spec_given_costs spec_given;
/* the engine's spec_vocab: 0 (the whole vocabulary) but in the subset tests */
static int spec_vocab;

static int run_ep(ds_model *m, const ds_engine_params *ep, int n, const ds_sampling_params *sp, int vary_seed, outs *o,
                  ds_engine_stats *st) {
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, ep, &eng, &e)) { printf("engine: %s\n", e.msg); return -1; }
    memset(o, 0, sizeof *o);
    for (int r = 0; r < n; r++) {
        ctxs[r] = (ctx){o, r};
        ds_request_params rp = {.prompt = prompts[r], .n_prompt = plen[r], .max_tokens = GEN, .ignore_eos = 1, .want_logprob = 1,
                                .sampling = *sp, .on_event = on_event, .user = &ctxs[r]};
        if (vary_seed) rp.sampling.seed = (uint64_t)r * 7919 + (uint64_t)vary_seed; /* other seeds per run */
        if (!ds_engine_submit(eng, &rp, &e)) { printf("submit: %s\n", e.msg); ds_engine_free(eng); return -1; }
    }
    while (ds_engine_step(eng)) {}
    ds_engine_stats_get(eng, st);
    ds_engine_free(eng);
    return 0;
}

static void engine_params(ds_engine_params *ep, int spec, int max_running) {
    ds_engine_defaults(ep);
    ep->spec_tokens = spec;
    ep->max_running = max_running;
    ep->spec_max_batch = spec_max_batch;
    ep->spec_policy = spec_policy;
    ep->spec_given = &spec_given;
    ep->spec_vocab = spec_vocab;
    ep->step_tokens = 512;
}

static int run(ds_model *m, int spec, int max_running, int n, const ds_sampling_params *sp, int vary_seed, outs *o,
               ds_engine_stats *st) {
    ds_engine_params ep;
    engine_params(&ep, spec, max_running);
    return run_ep(m, &ep, n, sp, vary_seed, o, st);
}

static outs A, B;


static void greedy_case(float agree) {
    loaded l;
    REQUIRE(load(agree, &l) == 0, "load");
    int n = ds_test_scaled(100);
    make_prompts(n);
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0;
    for (int conc = 0; conc < 2; conc++) {
        int max_running = conc ? 16 : 1;
        ds_engine_stats s0, s1;
        REQUIRE(run(l.m, 0, max_running, n, &sp, 0, &A, &s0) == 0, "plain");
        REQUIRE(run(l.m, 3, max_running, n, &sp, 0, &B, &s1) == 0, "speculative");
        int same = 0;
        for (int r = 0; r < n; r++)
            same += A.n[r] == GEN && B.n[r] == GEN && !memcmp(A.tok[r], B.tok[r], sizeof A.tok[r]) &&
                    !memcmp(A.lp[r], B.lp[r], sizeof A.lp[r]);
        double rate = s1.spec_drafted ? (double)s1.spec_accepted / (double)s1.spec_drafted : 0;
        printf("     agree %.0f%% %s: %d/%d identical; drafted %lld accepted %lld (%.0f%%), %lld verify steps, "
               "steps %lld vs %lld; accepted lengths 0:%lld 1:%lld 2:%lld 3:%lld\n", agree * 100,
               conc ? "16 concurrent" : "alone", same, n, (long long)s1.spec_drafted, (long long)s1.spec_accepted,
               100 * rate, (long long)s1.spec_verify_steps, (long long)s1.steps, (long long)s0.steps,
               (long long)s1.spec_accept_hist[0], (long long)s1.spec_accept_hist[1], (long long)s1.spec_accept_hist[2],
               (long long)s1.spec_accept_hist[3]);
        CHECK(same == n, "agree %.0f%%, %s: %d of %d requests differ", agree * 100, conc ? "concurrent" : "alone",
              n - same, n);
        if (agree >= 0.99f) CHECK(rate > 0.8 && s1.steps < s0.steps, "a head that agrees should be accepted (%.2f)", rate);
        if (agree <= 0.01f) CHECK(rate < 0.2 && s1.spec_drafted < (long long)n * GEN / 2,
                                 "a head that never agrees should stop drafting (%lld drafted)", (long long)s1.spec_drafted);
        if (agree > 0.3f && agree < 0.7f && conc == 0 && n >= 100)
            for (int a = 0; a <= 3; a++)
                CHECK(s1.spec_accept_hist[a] > 0, "accepted length %d never happened", a);
    }
    unload(&l);
}

static void test_greedy_identical_100(void) { greedy_case(1.0f); }
static void test_greedy_identical_50(void) { greedy_case(0.5f); }
static void test_greedy_identical_0(void) { greedy_case(0.0f); }

/* Over spec_max_batch running sequences no request drafts, greedy or sampled; at or under it
 * they do; outputs the same (a seeded draw does not depend on whether a draft was made). */
static void test_no_drafts_over_the_batch_limit(void) {
    loaded l;
    REQUIRE(load(1.0f, &l) == 0, "load");
    make_prompts(8);
    for (int sampled = 0; sampled < 2; sampled++) {
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        if (sampled) sp.temperature = 1.5f, sp.seed = 3;
        else sp.temperature = 0;
        const char *what = sampled ? "sampled" : "greedy";
        ds_engine_stats s_lim, s_free, s_under;
        spec_max_batch = 4;
        REQUIRE(run(l.m, 3, 8, 8, &sp, sampled, &A, &s_lim) == 0, "limited");
        REQUIRE(run(l.m, 3, 4, 4, &sp, sampled, &B, &s_under) == 0, "under the limit");
        spec_max_batch = 0;
        REQUIRE(run(l.m, 3, 8, 8, &sp, sampled, &B, &s_free) == 0, "no limit");
        CHECK(s_lim.spec_drafted == 0, "%s: 8 running over a limit of 4: %lld drafts", what, (long long)s_lim.spec_drafted);
        CHECK(s_under.spec_drafted > 0 && s_free.spec_drafted > 0, "%s: 4 running (limit 4): %lld drafts; no limit: %lld",
              what, (long long)s_under.spec_drafted, (long long)s_free.spec_drafted);
        CHECK(!memcmp(A.tok, B.tok, 8 * sizeof A.tok[0]), "%s: outputs differ with and without the limit", what);
    }
    unload(&l);
}

static int count_same(int n, int tokens_only) {
    int same = 0;
    for (int r = 0; r < n; r++)
        same += A.n[r] == GEN && B.n[r] == GEN && !memcmp(A.tok[r], B.tok[r], sizeof A.tok[r]) &&
                (tokens_only || !memcmp(A.lp[r], B.lp[r], sizeof A.lp[r]));
    return same;
}

/* Seeded sampling: the tokens with speculation are plain sampling's, token for token, for every
 * k, whatever the head's agreement (all, some or no drafts accepted), alone and 16 at a time,
 * and when the pages run out and requests are preempted and recomputed. */
static void seeded_case(float agree) {
    loaded l;
    REQUIRE(load(agree, &l) == 0, "load");
    int n = ds_test_scaled(40);
    make_prompts(n);
    ds_sampling_params sp, gp;
    ds_sampling_defaults(&sp);
    sp.temperature = 1.5f; /* the made models are sharp: at 0.8 most tokens are the argmax */
    sp.top_p = 0.98f;
    ds_sampling_defaults(&gp);
    gp.temperature = 0;
    ds_engine_stats s0, s;
    spec_max_batch = 0; /* every running sequence drafts */
    REQUIRE(run(l.m, 0, 16, n, &gp, 0, &A, &s0) == 0, "greedy");
    REQUIRE(run(l.m, 0, 16, n, &sp, 11, &B, &s0) == 0, "plain");
    int not_greedy = n - count_same(n, 1);
    CHECK(not_greedy >= n / 2, "only %d of %d sampled requests differ from greedy: the test would test little",
          not_greedy, n);
    A = B;
    static const int ks[] = {1, 2, 3, 8};
    for (int ki = 0; ki < 4; ki++)
        for (int conc = 0; conc < 2; conc++) {
            if (!conc && ks[ki] != 3) continue; /* alone: one k is enough, the batch does not matter */
            REQUIRE(run(l.m, ks[ki], conc ? 16 : 1, n, &sp, 11, &B, &s) == 0, "speculative");
            int same = count_same(n, 0);
            printf("     agree %.0f%% k=%d %s: %d/%d identical; drafted %lld accepted %lld; accepted lengths "
                   "0:%lld 1:%lld 2:%lld 3:%lld\n", agree * 100, ks[ki], conc ? "16 concurrent" : "alone", same, n,
                   (long long)s.spec_drafted, (long long)s.spec_accepted, (long long)s.spec_accept_hist[0],
                   (long long)s.spec_accept_hist[1], (long long)s.spec_accept_hist[2], (long long)s.spec_accept_hist[3]);
            CHECK(same == n, "agree %.0f%%, k=%d, %s: %d of %d seeded requests differ from plain sampling", agree * 100,
                  ks[ki], conc ? "concurrent" : "alone", n - same, n);
            CHECK(s.spec_drafted > 0, "nothing was drafted");
            if (agree >= 0.99f) CHECK(s.spec_accepted > s.spec_drafted / 2, "a head that agrees is rarely accepted");
        }
    /* preemption: 8 pages of 16 positions for 16 requests of up to 31 tokens plus drafts */
    ds_engine_params ep;
    engine_params(&ep, 3, 16);
    ep.prefix_cache = 0;
    ep.kv_bytes = (size_t)8 * 16 * 2 * 64 * 2 * 4;
    REQUIRE(run_ep(l.m, &ep, n, &sp, 11, &B, &s) == 0, "preempted");
    int same = count_same(n, 0);
    printf("     agree %.0f%% k=3 preempted %lld times: %d/%d identical\n", agree * 100, (long long)s.preemptions,
           same, n);
    CHECK(s.preemptions > 0, "the budget was meant to force preemption");
    CHECK(same == n, "agree %.0f%%: %d of %d seeded requests changed under preemption", agree * 100, n - same, n);
    unload(&l);
}

static void test_seeded_identical_100(void) { seeded_case(1.0f); }
static void test_seeded_identical_50(void) { seeded_case(0.5f); }
static void test_seeded_identical_0(void) { seeded_case(0.0f); }

/* Seeded sampling with speculation: 1 and 2 compute threads give the same tokens. */
static void test_seeded_threads(void) {
    loaded l1, l2;
    REQUIRE(load_threads(0.5f, 1, &l1) == 0, "load");
    if (load_threads(0.5f, 2, &l2) != 0) {
        unload(&l1);
        REQUIRE(0, "load with 2 threads");
    }
    int n = ds_test_scaled(40);
    make_prompts(n);
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 1.5f;
    ds_engine_stats s1, s2;
    spec_max_batch = 0;
    int ok = run(l1.m, 3, 16, n, &sp, 5, &A, &s1) == 0 && run(l2.m, 3, 16, n, &sp, 5, &B, &s2) == 0;
    unload(&l1);
    unload(&l2);
    REQUIRE(ok, "runs");
    int same = count_same(n, 0);
    CHECK(s1.spec_accepted > 0 && s2.spec_accepted > 0, "nothing was accepted");
    CHECK(same == n, "%d of %d seeded requests differ between 1 and 2 threads", n - same, n);
}

/* One engine, its prefix cache warm from the earlier runs: the same seeded request 8 times
 * alone, then 8 times while 16 others (other prompts and seeds) run, gives one answer. */
static void test_seed_repeats_on_one_engine(void) {
    loaded l;
    REQUIRE(load(0.5f, &l) == 0, "load");
    ds_engine_params ep;
    spec_max_batch = 0;
    engine_params(&ep, 3, 17);
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(l.m, &ep, &eng, &e)) { unload(&l); REQUIRE(0, "engine: %s", e.msg); }
    static int32_t prompt[100];
    for (int i = 0; i < 100; i++) prompt[i] = (int32_t)((i * 7919 + 13) % 1000);
    make_prompts(16);
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0.8f;
    sp.seed = 11;
    static outs O;
    memset(&O, 0, sizeof O);
    int n_runs = 16;
    for (int run_i = 0; run_i < n_runs; run_i++) {
        ctxs[run_i] = (ctx){&O, run_i};
        ds_request_params rp = {.prompt = prompt, .n_prompt = 90, .max_tokens = GEN, .ignore_eos = 1,
                                .want_logprob = 1, .sampling = sp, .on_event = on_event, .user = &ctxs[run_i]};
        REQUIRE(ds_engine_submit(eng, &rp, &e), "submit: %s", e.msg);
        if (run_i >= n_runs / 2) /* the others */
            for (int r = 0; r < 16; r++) {
                ctxs[100 + r] = (ctx){&O, 100 + r};
                ds_request_params o = {.prompt = prompts[r], .n_prompt = plen[r], .max_tokens = GEN, .ignore_eos = 1,
                                       .sampling = sp, .on_event = on_event, .user = &ctxs[100 + r]};
                o.sampling.seed = (uint64_t)(run_i * 16 + r);
                REQUIRE(ds_engine_submit(eng, &o, &e), "submit: %s", e.msg);
            }
        while (ds_engine_step(eng)) {}
    }
    ds_engine_stats st;
    ds_engine_stats_get(eng, &st);
    ds_engine_free(eng);
    unload(&l);
    int same = 0;
    for (int i = 0; i < n_runs; i++) same += O.n[i] == GEN && !memcmp(O.tok[i], O.tok[0], sizeof O.tok[0]);
    printf("     %d/%d identical; drafted %lld accepted %lld; prefix cache hits %lld of %lld tokens\n", same, n_runs,
           (long long)st.spec_drafted, (long long)st.spec_accepted, (long long)st.prefix_hit_tokens,
           (long long)st.prefix_query_tokens);
    CHECK(st.spec_accepted > 0, "nothing was accepted: the test would not test speculation");
    CHECK(same == n_runs, "%d of %d runs of the same seeded request differ from the first", n_runs - same, n_runs);
}

/* The k-th sampled token over many seeds: speculation must not change its distribution. */
static void test_sampling_distribution(void) {
    loaded l;
    REQUIRE(load(1.0f, &l) == 0, "load");
    int n = ds_test_scaled(1500) < 1500 ? 600 : 1500;
    for (int r = 0; r < n; r++) { /* one prompt, many seeds */
        plen[r] = 6;
        for (int i = 0; i < 6; i++) prompts[r][i] = (int32_t)(100 + 37 * i);
    }
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 1.5f;
    sp.top_k = 8; /* a support small enough for every token to be counted often */
    ds_engine_stats s0, s1;
    /* independent samples: the two runs use different seeds */
    REQUIRE(run(l.m, 0, 64, n, &sp, 1, &A, &s0) == 0, "plain");
    REQUIRE(run(l.m, 3, 64, n, &sp, 2, &B, &s1) == 0, "speculative");
    CHECK(s1.spec_accepted > 0, "nothing was accepted: the test would not test anything");
    /* chi-square test of homogeneity on tokens 2..6, bins with enough counts, the rest pooled; a
     * position where the chain has collapsed to one token has nothing to compare */
    int tested = 0;
    for (int pos = 1; pos <= 5; pos++) {
        static int ca[1100], cb[1100];
        memset(ca, 0, sizeof ca);
        memset(cb, 0, sizeof cb);
        for (int r = 0; r < n; r++) {
            ca[A.tok[r][pos] % 1100]++;
            cb[B.tok[r][pos] % 1100]++;
        }
        double chi2 = 0;
        int dof = -1, pool_a = 0, pool_b = 0;
        for (int t = 0; t < 1100; t++) {
            if (ca[t] + cb[t] < 20) { pool_a += ca[t]; pool_b += cb[t]; continue; }
            double e = (ca[t] + cb[t]) / 2.0;
            chi2 += (ca[t] - e) * (ca[t] - e) / e + (cb[t] - e) * (cb[t] - e) / e;
            dof++;
        }
        if (pool_a + pool_b >= 20) {
            double e = (pool_a + pool_b) / 2.0;
            chi2 += (pool_a - e) * (pool_a - e) / e + (pool_b - e) * (pool_b - e) / e;
            dof++;
        }
        /* Wilson-Hilferty 99.9% quantile of chi-square(dof) */
        double z = 3.09, q = dof * pow(1 - 2.0 / (9 * dof) + z * sqrt(2.0 / (9 * dof)), 3);
        printf("     token %d: chi-square %.1f with %d degrees of freedom (99.9%% point %.1f); accepted %lld of %lld\n",
               pos + 1, chi2, dof, q, (long long)s1.spec_accepted, (long long)s1.spec_drafted);
        if (dof < 3) continue;
        tested++;
        CHECK(chi2 < q, "token %d: distributions differ (chi-square %.1f, dof %d)", pos + 1, chi2, dof);
    }
    int want = ds_test_scaled(10) < 10 ? 1 : 2; /* the smaller sanitizer sample spreads over fewer tokens */
    CHECK(tested >= want, "only %d positions had enough spread to test", tested);
    unload(&l);
}

/* A filter whose allowed set at each position depends on the whole answer
 * before it (a hash chain over its tokens): a quarter of the vocabulary, or
 * three tokens, or any token (FREE), and DS_FILTER_DONE from done_at on. It
 * keeps the answer it followed, takes back what a new answer no longer holds
 * (drafts refused), and checks every token it follows was one it allowed. */
#define FOLLOW_MAX (GEN + DS_MAX_SPEC + 2)
typedef struct {
    uint32_t h[FOLLOW_MAX + 1];  /* h[i]: the state after i tokens */
    int32_t followed[FOLLOW_MAX];
    int n_followed, done_at, done_len, last_n;
    int calls, taken_back, refused_followed, calls_after_done;
    int revisits;                /* calls not one token past the last: only drafts make them */
} rot_filter;

static uint32_t rot_mix(uint32_t h, int32_t t) {
    h ^= (uint32_t)t * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    return h ^ (h >> 13);
}

/* what the filter answers at answer position i in state h: DS_FILTER_MASK with a kind of set */
static ds_filter_result rot_decide(const rot_filter *f, int i, uint32_t h) {
    if (i >= f->done_at) return DS_FILTER_DONE;
    return h % 5 == 0 ? DS_FILTER_FREE : DS_FILTER_MASK;
}
static int rot_allows(uint32_t h, int32_t t) {
    if (h % 7 == 1) return t == (int32_t)(h >> 8) % 997 || t == (int32_t)(h >> 12) % 991 || t == (int32_t)(h >> 16) % 983;
    return (((uint32_t)t * 40503u) ^ h) % 4 == 0;
}

static ds_filter_result rot_filter_fn(void *user, const int32_t *gen, int n, uint32_t *allowed, int n_vocab) {
    rot_filter *f = user;
    f->calls++;
    f->revisits += n != f->last_n + 1;
    f->last_n = n;
    int common = 0;
    while (common < n && common < f->n_followed && gen[common] == f->followed[common]) common++;
    if (common < f->n_followed) f->taken_back += f->n_followed - common;
    f->n_followed = common;
    if (f->done_len >= 0) {
        if (common >= f->done_len) f->calls_after_done++; /* it said DONE for a prefix of this answer */
        else f->done_len = -1;                            /* that answer was taken back */
    }
    for (int i = common; i < n && i < FOLLOW_MAX; i++) {
        if (rot_decide(f, i, f->h[i]) == DS_FILTER_MASK && !rot_allows(f->h[i], gen[i])) f->refused_followed++;
        f->followed[i] = gen[i];
        f->h[i + 1] = rot_mix(f->h[i], gen[i]);
        f->n_followed = i + 1;
    }
    if (n >= FOLLOW_MAX) return DS_FILTER_FREE;
    ds_filter_result d = rot_decide(f, n, f->h[n]);
    if (d == DS_FILTER_DONE) f->done_len = n;
    if (d != DS_FILTER_MASK) return d;
    int any = 0;
    for (int32_t t = 0; t < n_vocab; t++)
        if (rot_allows(f->h[n], t)) DS_MASK_SET(allowed, t), any = 1;
    if (!any) DS_MASK_SET(allowed, 0);
    return DS_FILTER_MASK;
}

static rot_filter rots[MAXREQ];

/* n requests; every one (constrained 2) or every other one (1) or none (0) carries a filter */
static int run_constrained(ds_model *m, int spec, int max_running, int n, const ds_sampling_params *sp,
                           int constrained, outs *o, ds_engine_stats *st) {
    ds_engine_params ep;
    engine_params(&ep, spec, max_running);
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, &ep, &eng, &e)) { printf("engine: %s\n", e.msg); return -1; }
    memset(o, 0, sizeof *o);
    for (int r = 0; r < n; r++) {
        ctxs[r] = (ctx){o, r};
        rot_filter *f = &rots[r];
        memset(f, 0, sizeof *f);
        f->h[0] = 0x9e3779b9u * (uint32_t)(r + 1);
        f->done_at = r % 3 == 0 ? 3 + r % 7 : 1 << 30; /* some let go part way */
        f->done_len = f->last_n = -1;
        ds_request_params rp = {.prompt = prompts[r], .n_prompt = plen[r], .max_tokens = GEN, .ignore_eos = 1,
                                .want_logprob = 1, .sampling = *sp, .on_event = on_event, .user = &ctxs[r]};
        rp.sampling.seed = (uint64_t)r * 31 + 7;
        if (constrained == 2 || (constrained == 1 && r % 2 == 0)) rp.filter = rot_filter_fn, rp.filter_user = f;
        if (!ds_engine_submit(eng, &rp, &e)) { printf("submit: %s\n", e.msg); ds_engine_free(eng); return -1; }
    }
    while (ds_engine_step(eng)) {}
    ds_engine_stats_get(eng, st);
    ds_engine_free(eng);
    return 0;
}

static void constrained_case(float agree) {
    loaded l;
    REQUIRE(load(agree, &l) == 0, "load");
    int n = ds_test_scaled(16) < 8 ? 8 : 16;
    long long drafted = 0, accepted = 0;
    make_prompts(n);
    spec_max_batch = 0;
    for (int sampled = 0; sampled < 2; sampled++) {
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        if (sampled) sp.temperature = 1.5f, sp.top_p = 0.98f;
        else sp.temperature = 0;
        const char *what = sampled ? "seeded" : "greedy";
        for (int mixed = 0; mixed < 2; mixed++) {
            int constrained = mixed ? 1 : 2;
            ds_engine_stats s0, s;
            REQUIRE(run_constrained(l.m, 0, 16, n, &sp, 0, &A, &s0) == 0, "unconstrained");
            REQUIRE(run_constrained(l.m, 0, 16, n, &sp, constrained, &B, &s0) == 0, "plain constrained");
            int narrowed = 0;
            for (int r = 0; r < n; r += mixed ? 2 : 1) narrowed += memcmp(A.tok[r], B.tok[r], sizeof A.tok[r]) != 0;
            CHECK(narrowed >= (mixed ? n / 2 : n) * 3 / 4, "%s: the filter changed only %d answers: the test would "
                  "test little", what, narrowed);
            A = B;
            static const int ks[] = {1, 3, DS_MAX_SPEC};
            for (int ki = 0; ki < 3; ki++)
                for (int conc = 0; conc < 2; conc++) {
                    if (!conc && (mixed || ks[ki] != 3)) continue; /* alone: one k, and a mix means nothing */
                    if (mixed && ks[ki] == 1) continue;
                    REQUIRE(run_constrained(l.m, ks[ki], conc ? 16 : 1, n, &sp, constrained, &B, &s) == 0, "spec");
                    int same = count_same(n, 0), bad = 0, after_done = 0, taken_back = 0, revisits = 0;
                    for (int r = 0; r < n; r++) {
                        revisits += rots[r].revisits;
                        bad += rots[r].refused_followed;
                        after_done += rots[r].calls_after_done;
                        taken_back += rots[r].taken_back;
                    }
                    printf("     agree %.0f%% %s k=%d %s%s: %d/%d identical; drafted %lld accepted %lld; filters took "
                           "back %d tokens\n", agree * 100, what, ks[ki], conc ? "16 concurrent" : "alone",
                           mixed ? " (half unconstrained)" : "", same, n, (long long)s.spec_drafted,
                           (long long)s.spec_accepted, taken_back);
                    CHECK(same == n, "agree %.0f%% %s k=%d %s: %d of %d requests differ from plain constrained "
                          "decoding", agree * 100, what, ks[ki], conc ? "concurrent" : "alone", n - same, n);
                    CHECK(bad == 0, "%s k=%d: %d tokens the filter refused were drawn", what, ks[ki], bad);
                    CHECK(after_done == 0, "%s k=%d: %d filter calls after it was done", what, ks[ki], after_done);
                    CHECK(s.spec_drafted > 0 && revisits > 0, "%s k=%d: constrained requests made no drafts (%lld "
                          "in all; the filters saw each answer once, in order)", what, ks[ki],
                          (long long)s.spec_drafted);
                    if (agree >= 0.99f)
                        CHECK(s.spec_accepted > s.spec_drafted / 2, "%s k=%d: a head that agrees is rarely accepted "
                              "(%lld of %lld)", what, ks[ki], (long long)s.spec_accepted, (long long)s.spec_drafted);
                    drafted += s.spec_drafted;
                    accepted += s.spec_accepted;
                    /* drafts past the first show the filter answers it will see shortened */
                    if (ks[ki] > 1) CHECK(taken_back > 0, "%s k=%d: the filters never took anything back", what, ks[ki]);
                }
        }
    }
    if (agree < 0.99f)
        CHECK(accepted > 0 && accepted < drafted, "%lld of %lld drafts accepted: both were meant to be tested",
              accepted, drafted);
    unload(&l);
}

static void test_constrained_identical_100(void) { constrained_case(1.0f); }
static void test_constrained_identical_50(void) { constrained_case(0.5f); }

/* Drafts over a subset of the vocabulary (spec_vocab: ids below N), greedy: the tokens and
 * logprobs are plain decoding's for every N, alone and 16 at a time. With a head that agrees, a
 * draft is kept exactly where the model's token is below N (the head's argmax over the subset is
 * its argmax over all whenever that one is in it), so the share of drafts kept follows the share
 * of the model's tokens below N: the subset is in force, and costs only what lies outside it. */
static void test_subset_greedy_identical(void) {
    loaded l;
    REQUIRE(load(1.0f, &l) == 0, "load");
    int V = ds_model_cfg(l.m)->n_vocab, n = ds_test_scaled(60);
    make_prompts(n);
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0;
    spec_max_batch = 0;
    const int Ns[] = {V / 8, V / 2, V - 7, 1};
    for (int ni = 0; ni < 4; ni++)
        for (int conc = 0; conc < 2; conc++) {
            ds_engine_stats s0, s1;
            spec_vocab = 0;
            REQUIRE(run(l.m, 0, conc ? 16 : 1, n, &sp, 0, &A, &s0) == 0, "plain");
            spec_vocab = Ns[ni];
            REQUIRE(run(l.m, 3, conc ? 16 : 1, n, &sp, 0, &B, &s1) == 0, "speculative over a subset");
            spec_vocab = 0;
            int same = count_same(n, 0), below = 0, all = 0;
            for (int r = 0; r < n; r++)
                for (int i = 0; i < A.n[r]; i++) below += A.tok[r][i] < Ns[ni], all++;
            double share = all ? (double)below / all : 0;
            double kept = s1.spec_compared ? (double)s1.spec_accepted / (double)s1.spec_compared : 0;
            printf("     subset %d of %d %s: %d/%d identical; model's tokens below it %.0f%%; drafted %lld, kept "
                   "%.0f%% of those compared\n", Ns[ni], V, conc ? "16 concurrent" : "alone", same, n, 100 * share,
                   (long long)s1.spec_drafted, 100 * kept);
            CHECK(same == n, "subset %d %s: %d of %d requests differ from plain decoding", Ns[ni],
                  conc ? "concurrent" : "alone", n - same, n);
            CHECK(s1.spec_drafted > 0, "subset %d: nothing was drafted", Ns[ni]);
            CHECK(kept <= share + 0.15, "subset %d: %.0f%% of drafts kept, but only %.0f%% of the model's tokens lie "
                  "in the subset: the drafts were not drawn from it", Ns[ni], 100 * kept, 100 * share);
            if (Ns[ni] >= V / 2)
                CHECK(kept >= share - 0.2, "subset %d: %.0f%% of drafts kept, %.0f%% of the model's tokens lie in it",
                      Ns[ni], 100 * kept, 100 * share);
        }
    unload(&l);
}

/* Seeded sampling with drafts over a subset (drawn with the same key over the subset's logits):
 * the tokens and logprobs are plain sampling's, for several N, k and heads, alone and batched. */
static void test_subset_seeded_identical(void) {
    static const float agrees[] = {1.0f, 0.5f};
    for (int ai = 0; ai < 2; ai++) {
        loaded l;
        REQUIRE(load(agrees[ai], &l) == 0, "load");
        int V = ds_model_cfg(l.m)->n_vocab, n = ds_test_scaled(40);
        make_prompts(n);
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        sp.temperature = 1.5f;
        sp.top_p = 0.98f;
        spec_max_batch = 0;
        spec_vocab = 0;
        ds_engine_stats s0, s;
        REQUIRE(run(l.m, 0, 16, n, &sp, 11, &A, &s0) == 0, "plain");
        const int Ns[] = {V / 4, V - 100};
        for (int ni = 0; ni < 2; ni++)
            for (int conc = 0; conc < 2; conc++) {
                int k = conc ? 2 : 3;
                spec_vocab = Ns[ni];
                REQUIRE(run(l.m, k, conc ? 16 : 1, n, &sp, 11, &B, &s) == 0, "speculative over a subset");
                spec_vocab = 0;
                int same = count_same(n, 0);
                printf("     agree %.0f%% subset %d of %d k=%d %s: %d/%d identical; drafted %lld accepted %lld\n",
                       agrees[ai] * 100, Ns[ni], V, k, conc ? "16 concurrent" : "alone", same, n,
                       (long long)s.spec_drafted, (long long)s.spec_accepted);
                CHECK(same == n, "agree %.0f%% subset %d k=%d: %d of %d seeded requests differ from plain sampling",
                      agrees[ai] * 100, Ns[ni], k, n - same, n);
                CHECK(s.spec_drafted > 0 && s.spec_accepted > 0, "subset %d: %lld drafted, %lld accepted: both were "
                      "meant to be tested", Ns[ni], (long long)s.spec_drafted, (long long)s.spec_accepted);
            }
        unload(&l);
    }
}

/* Constrained requests drafting over a subset: the filter's mask covers the whole vocabulary, the
 * drafts only the subset (a position where it allows nothing below N gets no draft); the tokens
 * are plain constrained decoding's (constrained_case's checks, with the subset in force). */
static void test_subset_constrained_identical(void) {
    spec_vocab = 1000; /* most of the tiny vocabulary: a head that agrees is still mostly kept */
    constrained_case(1.0f);
    spec_vocab = 512;
    constrained_case(0.5f);
    spec_vocab = 0;
}

/* A bias goes through the one sampling function every path uses: drafts, verification and plain
 * decoding agree bit for bit, and the bias does what it says. */
static void bias_case(float agree) {
    loaded l;
    REQUIRE(load(agree, &l) == 0, "load");
    int n = ds_test_scaled(40);
    make_prompts(n);
    static outs C;
    for (int seeded = 0; seeded < 2; seeded++) {
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        sp.temperature = seeded ? 1.0f : 0.0f;
        ds_engine_stats s0, s1;
        REQUIRE(run(l.m, 0, 16, n, &sp, seeded, &A, &s0) == 0, "plain, no bias");
        /* ban every token the unbiased run produced first, lift a few others */
        for (int r = 0; r < n && sp.n_bias < DS_MAX_LOGIT_BIAS; r++) {
            int seen = 0;
            for (int i = 0; i < sp.n_bias; i++) seen |= sp.bias[i].token == A.tok[r][0];
            if (!seen) sp.bias[sp.n_bias++] = (ds_logit_bias){.token = A.tok[r][0], .bias = -100};
        }
        for (int32_t t = 500; t < 505; t++) sp.bias[sp.n_bias++] = (ds_logit_bias){.token = t, .bias = 3.5f};
        REQUIRE(run(l.m, 0, 16, n, &sp, seeded, &B, &s0) == 0, "plain, biased");
        REQUIRE(run(l.m, 3, 16, n, &sp, seeded, &C, &s1) == 0, "speculative, biased");
        int same = 0, banned = 0, changed = 0;
        for (int r = 0; r < n; r++) {
            same += B.n[r] == GEN && C.n[r] == GEN && !memcmp(B.tok[r], C.tok[r], sizeof B.tok[r]) &&
                    !memcmp(B.lp[r], C.lp[r], sizeof B.lp[r]);
            changed += memcmp(A.tok[r], B.tok[r], sizeof A.tok[r]) != 0;
            for (int j = 0; j < GEN; j++)
                for (int i = 0; i < sp.n_bias; i++) banned += sp.bias[i].bias < 0 && B.tok[r][j] == sp.bias[i].token;
        }
        printf("     agree %.0f%% %s: %d/%d identical with speculation; drafted %lld accepted %lld\n", agree * 100,
               seeded ? "seeded" : "greedy", same, n, (long long)s1.spec_drafted, (long long)s1.spec_accepted);
        CHECK(same == n, "%s: %d/%d biased requests identical with speculation", seeded ? "seeded" : "greedy", same, n);
        CHECK(banned == 0, "%d banned tokens were drawn", banned);
        CHECK(changed == n, "the bias changed %d/%d answers (each one's first token is banned)", changed, n);
        CHECK(s1.spec_drafted > 0, "%s", "no drafts: speculation was not exercised");
        /* 100 forces: every token is the forced one, drafts included */
        sp.n_bias = 1;
        sp.bias[0] = (ds_logit_bias){.token = 77, .bias = 100};
        REQUIRE(run(l.m, 3, 16, n, &sp, seeded, &C, &s1) == 0, "speculative, forced");
        int forced = 0;
        for (int r = 0; r < n; r++)
            for (int j = 0; j < C.n[r]; j++) forced += C.tok[r][j] == 77;
        CHECK(forced == n * GEN, "%d/%d tokens are the forced one", forced, n * GEN);
        if (agree >= 1.0f) CHECK(s1.spec_accepted > 0, "%s", "forced drafts were never accepted");
    }
    unload(&l);
}

static void test_logit_bias_identical_100(void) { bias_case(1.0f); }
static void test_logit_bias_identical_50(void) { bias_case(0.5f); }

/* --- the per-step batch policy --- */

/* Cost curves: nothing known costs nothing (what was never tried is tried); one measured count
 * reads flat above and proportional below; two read as the line through them in between and
 * beyond; a measurement left to fade while its neighbour is refreshed counts for less and less. */
static void test_cost_curve(void) {
    ds_cost_curve c;
    REQUIRE(ds_cost_curve_init(&c, 64) == 0, "init");
    CHECK(ds_cost_curve_at(&c, 8, 0) == 0.0, "no data: %g", ds_cost_curve_at(&c, 8, 0));
    ds_cost_curve_add(&c, 8, 1.0, 0);
    CHECK(fabs(ds_cost_curve_at(&c, 8, 0) - 1.0) < 1e-9, "the measured count: %g", ds_cost_curve_at(&c, 8, 0));
    CHECK(fabs(ds_cost_curve_at(&c, 16, 0) - 1.0) < 1e-9, "above one count, flat: %g", ds_cost_curve_at(&c, 16, 0));
    CHECK(fabs(ds_cost_curve_at(&c, 4, 0) - 0.5) < 1e-9, "below one count, proportional: %g", ds_cost_curve_at(&c, 4, 0));
    ds_cost_curve_free(&c);
    /* t = 1 + 0.25 x, measured at 4 and 16, eight times each */
    REQUIRE(ds_cost_curve_init(&c, 64) == 0, "init");
    for (int i = 0; i < 8; i++) {
        ds_cost_curve_add(&c, 4, 2.0, i);
        ds_cost_curve_add(&c, 16, 5.0, i);
    }
    double at8 = ds_cost_curve_at(&c, 8, 8), at32 = ds_cost_curve_at(&c, 32, 8), at2 = ds_cost_curve_at(&c, 2, 8);
    CHECK(fabs(at8 - 3.0) < 0.15, "between two counts: %g, not 3", at8);
    CHECK(at32 > 5.0 && at32 < 9.5, "beyond them, between flat (5) and the line (9): %g", at32);
    CHECK(at2 > 1.0 && at2 < 2.0, "below them: %g, not in (1, 2)", at2);
    /* the count 16 is not measured again for 2, then 5 half-lives while 4 is, every step */
    for (int64_t t = 9; t < 9 + 2 * 512; t++) ds_cost_curve_add(&c, 4, 2.0, t);
    double fading = ds_cost_curve_at(&c, 16, 9 + 2 * 512);
    for (int64_t t = 9 + 2 * 512; t < 9 + 5 * 512; t++) ds_cost_curve_add(&c, 4, 2.0, t);
    double gone = ds_cost_curve_at(&c, 16, 9 + 5 * 512);
    CHECK(fabs(fading - 5.0) < 0.3, "a fading measurement still holds: %g (was 5)", fading);
    CHECK(fabs(gone - 2.0) < 1e-9, "a stale one counts as none (flat from 4: 2): %g", gone);
    /* out-of-range row counts are clamped, bad times ignored */
    ds_cost_curve_add(&c, 1000, 7.0, 0);
    ds_cost_curve_add(&c, 3, NAN, 0);
    CHECK(ds_cost_curve_at(&c, 0, 0) == 0.0 && isfinite(ds_cost_curve_at(&c, 3, 0)), "edges");
    ds_cost_curve_free(&c);
}

/* Fixed costs for the pure planner: forward = step + row * R, every MTP call call + call_row * m */
typedef struct { double step, row, call, call_row; } lin;
static double lin_fwd(void *u, int r) { const lin *l = u; return l->step + l->row * r; }
static double lin_call(void *u, int r) { const lin *l = u; return l->call + l->call_row * r; }

static int plan(lin *l, int n, const double *p, const double *choice, int k_max, int max_drafts, int *k) {
    ds_spec_costs_fn fn = {lin_fwd, lin_call, lin_call, l};
    ds_spec_cand c[64];
    double base_s = 0;
    for (int i = 0; i < n; i++) {
        c[i] = (ds_spec_cand){.p = p[i], .choice_s = choice[i], .catchup_rows = 1, .k_max = k_max};
        base_s += choice[i];
    }
    ds_spec_step st = {.base_rows = n, .base_s = base_s, .base_tokens = n, .max_drafts = max_drafts};
    ds_spec_policy_plan(&fn, &st, c, n);
    int total = 0;
    for (int i = 0; i < n; i++) total += k[i] = c[i].k;
    return total;
}

static void test_policy_plans(void) {
    double p1[16], p0[16], cheap[16], mixed[16];
    for (int i = 0; i < 16; i++) p1[i] = 1.0, p0[i] = 0.0, cheap[i] = 0.001, mixed[i] = i % 2 ? 0.5 : 0.001;
    int k[16];
    /* bandwidth-bound: a row costs 5% of a step, a draft call 10% */
    lin mem = {1.0, 0.05, 0.1, 0.01};
    CHECK(plan(&mem, 1, p1, cheap, 3, 64, k) == 3, "a lone agreeing request drafts the most: k=%d", k[0]);
    CHECK(plan(&mem, 1, p0, cheap, 3, 64, k) == 0, "drafts never accepted are not planned: k=%d", k[0]);
    double half = 0.5;
    int kh = plan(&mem, 1, &half, cheap, 8, 64, k);
    CHECK(kh >= 1 && kh < 8, "at 50%% acceptance k is between: %d", kh);
    CHECK(plan(&mem, 4, p1, cheap, 3, 5, k) == 5, "the step's budget of drafts holds: %d", k[0] + k[1] + k[2] + k[3]);
    /* compute-bound: a row costs what a token of the step costs; drafting cannot pay */
    lin cpu = {0.0, 1.0, 0.1, 0.3};
    CHECK(plan(&cpu, 8, p1, cheap, 3, 64, k) == 0, "a compute-bound batch drafts nothing");
    /* sampled choices that cost half a step: only the greedy (even) requests draft */
    int total = plan(&mem, 8, p1, mixed, 3, 64, k), greedy = 0, sampled = 0;
    for (int i = 0; i < 8; i++) *(i % 2 ? &sampled : &greedy) += k[i];
    CHECK(greedy == 12 && sampled == 0, "greedy ones draft (%d of 12), expensive sampled ones not (%d)", greedy, sampled);
    CHECK(total == greedy, "total");
    /* partly compute-bound: 16 sequences draft less than one alone */
    lin mid = {1.0, 0.12, 0.2, 0.05};
    int alone = plan(&mid, 1, p1, cheap, 3, 64, k), batch16 = plan(&mid, 16, p1, cheap, 3, 64, k);
    CHECK(alone == 3 && batch16 < 16 * 3, "alone %d drafts; 16 at once %d (should be fewer than 48)", alone, batch16);
}

/* 8 requests, the even ones greedy and the odd ones seeded at temperature 1.5, all at once */
static int run_mixed(ds_model *m, int spec, int policy, outs *o, ds_engine_stats *st) {
    ds_engine_params ep;
    int saved = spec_policy;
    spec_policy = policy;
    engine_params(&ep, spec, 8);
    spec_policy = saved;
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, &ep, &eng, &e)) { printf("engine: %s\n", e.msg); return -1; }
    memset(o, 0, sizeof *o);
    for (int r = 0; r < 8; r++) {
        ctxs[r] = (ctx){o, r};
        ds_request_params rp = {.prompt = prompts[r], .n_prompt = plen[r], .max_tokens = GEN, .ignore_eos = 1,
                                .want_logprob = 1, .on_event = on_event, .user = &ctxs[r]};
        ds_sampling_defaults(&rp.sampling);
        rp.sampling.temperature = r % 2 ? 1.5f : 0.0f;
        rp.sampling.seed = (uint64_t)r * 31 + 7;
        if (!ds_engine_submit(eng, &rp, &e)) { printf("submit: %s\n", e.msg); ds_engine_free(eng); return -1; }
    }
    while (ds_engine_step(eng)) {}
    ds_engine_stats_get(eng, st);
    ds_engine_free(eng);
    return 0;
}

/* A batch of 8 mixed greedy and sampled requests gives plain decoding's tokens and logprobs
 * under the measured policy (whatever it decides on this machine), under fixed costs that make
 * drafting pay (everyone drafts and verifies) and under costs where it never pays (nobody does). */
static void test_policy_mixed_batch_identical(void) {
    loaded l;
    REQUIRE(load(1.0f, &l) == 0, "load");
    make_prompts(8);
    ds_engine_stats s0, s;
    REQUIRE(run_mixed(l.m, 0, DS_SPEC_POLICY_BATCH, &A, &s0) == 0, "plain");
    static const struct { int policy; ds_spec_given_costs c; const char *what; } cases[] = {
        {DS_SPEC_POLICY_BATCH, {0}, "measured costs"},
        {DS_SPEC_POLICY_GIVEN, {1.0, 0.02, 0.05, 0.01, 0.001, 0.002}, "costs where drafting pays"},
        {DS_SPEC_POLICY_GIVEN, {0.0, 1.0, 0.5, 0.5, 0.001, 0.002}, "compute-bound costs"},
    };
    for (int c = 0; c < 3; c++) {
        spec_given = cases[c].c;
        REQUIRE(run_mixed(l.m, 3, cases[c].policy, &B, &s) == 0, "speculative");
        int same = count_same(8, 0);
        printf("     %s: %d/8 identical; planned steps %lld, with drafts %lld; sequences %lld, drafting %lld; "
               "drafted %lld accepted %lld\n", cases[c].what, same, (long long)s.spec_plan_steps,
               (long long)s.spec_plan_draft_steps, (long long)s.spec_plan_seqs, (long long)s.spec_plan_drafting_seqs,
               (long long)s.spec_drafted, (long long)s.spec_accepted);
        CHECK(same == 8, "%s: %d of 8 requests differ from plain decoding", cases[c].what, 8 - same);
        CHECK(s.spec_plan_steps > 0, "%s: no step was planned", cases[c].what);
        if (c == 1)
            CHECK(s.spec_plan_drafting_seqs > s.spec_plan_seqs / 2 && s.spec_verify_steps > s.steps,
                  "%s: most sequences should draft (%lld of %lld), several verify per step (%lld in %lld steps)",
                  cases[c].what, (long long)s.spec_plan_drafting_seqs, (long long)s.spec_plan_seqs,
                  (long long)s.spec_verify_steps, (long long)s.steps);
        if (c == 2)
            CHECK(s.spec_drafted == 0 && s.spec_plan_draft_steps == 0, "%s: %lld drafts", cases[c].what,
                  (long long)s.spec_drafted);
    }
    unload(&l);
}

/* Fixed bandwidth-bound costs: a lone request whose head agrees drafts the most every step (3
 * accepted each time, fewer steps); one whose head never agrees stops being drafted with (and
 * 16 of them do too), while the same costs keep 16 agreeing ones drafting. */
static void test_policy_lone_and_never_accepted(void) {
    spec_given = (ds_spec_given_costs){1.0, 0.05, 0.1, 0.01, 0.001, 0.002};
    ds_sampling_params gp;
    ds_sampling_defaults(&gp);
    gp.temperature = 0;
    int saved = spec_policy;
    spec_policy = DS_SPEC_POLICY_GIVEN;
    for (int agree = 1; agree >= 0; agree--) {
        loaded l;
        REQUIRE(load((float)agree, &l) == 0, "load");
        int n = 16;
        make_prompts(n);
        ds_engine_stats s0, s1, s16;
        int ok = run(l.m, 0, 1, 1, &gp, 0, &A, &s0) == 0 && run(l.m, 3, 1, 1, &gp, 0, &B, &s1) == 0;
        int same1 = count_same(1, 0);
        ok = ok && run(l.m, 0, 16, n, &gp, 0, &A, &s0) == 0 && run(l.m, 3, 16, n, &gp, 0, &B, &s16) == 0;
        unload(&l);
        REQUIRE(ok, "runs");
        int same16 = count_same(n, 0);
        printf("     agree %d: alone drafted %lld accepted %lld in %lld steps (hist 3: %lld); 16 at once drafted %lld "
               "of %d tokens\n", agree * 100, (long long)s1.spec_drafted, (long long)s1.spec_accepted,
               (long long)s1.steps, (long long)s1.spec_accept_hist[3], (long long)s16.spec_drafted, n * GEN);
        CHECK(same1 == 1 && same16 == n, "agree %d: outputs differ from plain decoding", agree * 100);
        if (agree) {
            CHECK(s1.spec_drafted > 0 && s1.spec_accepted == s1.spec_drafted && s1.spec_accept_hist[3] >= 2,
                  "a lone agreeing request should draft 3 each step (%lld drafted, %lld accepted)",
                  (long long)s1.spec_drafted, (long long)s1.spec_accepted);
            CHECK(s16.spec_drafted >= n * GEN / 2, "16 agreeing requests should keep drafting (%lld)",
                  (long long)s16.spec_drafted);
        } else {
            /* 3 at first, then fewer while the estimate falls (33 if it kept drafting 3 a step) */
            CHECK(s1.spec_accepted == 0 && s1.spec_drafted <= 8, "a head that never agrees: %lld drafts alone",
                  (long long)s1.spec_drafted);
            CHECK(s16.spec_drafted < n * GEN / 3, "a head that never agrees: %lld drafts for 16 requests",
                  (long long)s16.spec_drafted);
        }
    }
    spec_policy = saved;
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-spec-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_cost_curve);
    RUN(test_policy_plans);
    RUN(test_policy_mixed_batch_identical);
    RUN(test_policy_lone_and_never_accepted);
    RUN(test_greedy_identical_100);
    RUN(test_greedy_identical_50);
    RUN(test_greedy_identical_0);
    RUN(test_sampling_distribution);
    RUN(test_no_drafts_over_the_batch_limit);
    RUN(test_seeded_identical_100);
    RUN(test_seeded_identical_50);
    RUN(test_seeded_identical_0);
    RUN(test_seeded_threads);
    RUN(test_seed_repeats_on_one_engine);
    RUN(test_constrained_identical_100);
    RUN(test_constrained_identical_50);
    RUN(test_subset_greedy_identical);
    RUN(test_subset_seeded_identical);
    RUN(test_subset_constrained_identical);
    RUN(test_logit_bias_identical_100);
    RUN(test_logit_bias_identical_50);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
