/* test_spec.c - MTP self-speculative decoding in the engine:
 *   - greedy: identical tokens (and logprobs, i.e. logits) with and without
 *     speculation over 100 prompts, for MTP heads agreeing ~100%, ~50% and 0%
 *     of the time, alone and in concurrent batches;
 *   - every accepted length 0..k occurs, and the step after each continues
 *     exactly (the logprobs of every token equal the plain run's);
 *   - sampling: the distribution of sampled tokens with speculation matches
 *     the one without (chi-square over many seeds);
 *   - adaptive k: a head that never agrees stops drafting. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
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

static int load(float agree, loaded *l) {
    char path[512];
    snprintf(path, sizeof path, "%s/agree%.0f.gguf", tmpdir, agree * 100);
    if (access(path, R_OK) != 0) {
        ds_make_options o = {.shape = "tiny", .dtype = "f32", .format = DS_FORMAT_GGUF, .seed = 5, .scale = 1.0f,
                             .out = path, .mtp_agree_set = 1, .mtp_agree = agree};
        ds_err e = {0};
        if (ds_make_model(&o, &e)) { printf("make: %s\n", e.msg); return -1; }
    }
    ds_err e = {0};
    ds_model_params mp = {.max_batch_tokens = 512};
    if (ds_model_open(path, &l->f, &e) || ds_model_new(l->f, &mp, &l->m, &e)) { printf("%s\n", e.msg); return -1; }
    return 0;
}

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

/* spec_max_batch: 0 lets every running sequence draft (so that concurrent runs exercise verify) */
static int spec_max_batch;

static int run(ds_model *m, int spec, int max_running, int n, const ds_sampling_params *sp, int vary_seed, outs *o,
               ds_engine_stats *st) {
    ds_engine_params ep;
    ds_engine_defaults(&ep);
    ep.spec_tokens = spec;
    ep.max_running = max_running;
    ep.spec_max_batch = spec_max_batch;
    ep.step_tokens = 512;
    ds_engine *eng;
    ds_err e = {0};
    if (ds_engine_new(m, &ep, &eng, &e)) { printf("engine: %s\n", e.msg); return -1; }
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

/* Over spec_max_batch running sequences greedy requests do not draft; at or under it they do;
 * outputs the same. Sampling requests draft regardless, so that their seeded outputs do not
 * depend on the batch (rejection sampling draws other tokens than plain sampling). */
static void test_no_drafts_over_the_batch_limit(void) {
    loaded l;
    REQUIRE(load(1.0f, &l) == 0, "load");
    make_prompts(8);
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0;
    ds_engine_stats s_lim, s_free, s_under;
    spec_max_batch = 4;
    REQUIRE(run(l.m, 3, 8, 8, &sp, 0, &A, &s_lim) == 0, "limited");
    REQUIRE(run(l.m, 3, 4, 4, &sp, 0, &B, &s_under) == 0, "under the limit");
    spec_max_batch = 0;
    REQUIRE(run(l.m, 3, 8, 8, &sp, 0, &B, &s_free) == 0, "no limit");
    CHECK(s_lim.spec_drafted == 0, "8 running over a limit of 4: %lld drafts", (long long)s_lim.spec_drafted);
    CHECK(s_under.spec_drafted > 0 && s_free.spec_drafted > 0, "4 running (limit 4): %lld drafts; no limit: %lld",
          (long long)s_under.spec_drafted, (long long)s_free.spec_drafted);
    CHECK(!memcmp(A.tok, B.tok, 8 * sizeof A.tok[0]), "outputs differ with and without the limit");
    ds_sampling_defaults(&sp);
    sp.seed = 3;
    spec_max_batch = 4;
    REQUIRE(run(l.m, 3, 8, 8, &sp, 1, &A, &s_lim) == 0, "sampled, limited");
    spec_max_batch = 0;
    REQUIRE(run(l.m, 3, 8, 8, &sp, 1, &B, &s_free) == 0, "sampled, no limit");
    CHECK(s_lim.spec_drafted > 0 && !memcmp(A.tok, B.tok, 8 * sizeof A.tok[0]),
          "sampled requests over the limit: %lld drafts, outputs %s", (long long)s_lim.spec_drafted,
          memcmp(A.tok, B.tok, 8 * sizeof A.tok[0]) ? "differ" : "same");
    unload(&l);
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

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-spec-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_greedy_identical_100);
    RUN(test_greedy_identical_50);
    RUN(test_greedy_identical_0);
    RUN(test_sampling_distribution);
    RUN(test_no_drafts_over_the_batch_limit);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return ds_test_finish();
}
