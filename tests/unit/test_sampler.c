/* test_sampler.c - sampling parameters do what OpenAI and llama.cpp users expect. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "testing.h"

#define V 50

static void fill(float *l) {
    for (int i = 0; i < V; i++) l[i] = (float)(i % 7) * 0.3f - (float)i * 0.01f;
    l[13] = 3.0f; /* the argmax */
    l[20] = 2.5f;
    l[30] = 2.0f;
}

static void test_greedy_is_argmax(void) {
    ds_sampler_scratch sc;
    REQUIRE(ds_sampler_scratch_init(&sc, V) == 0, "scratch");
    float l[V];
    fill(l);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.temperature = 0;
    ds_sampler s;
    ds_sampler_init(&s, &p);
    for (int i = 0; i < 10; i++) CHECK(ds_sampler_sample(&s, l, NULL, 0, 0, &sc) == 13, "greedy");
    l[40] = 3.0f; /* a tie goes to the lower id */
    CHECK(ds_sampler_sample(&s, l, NULL, 0, 0, &sc) == 13, "tie");
    p.temperature = 1.0f;
    p.top_k = 1;
    ds_sampler_init(&s, &p);
    CHECK(ds_sampler_sample(&s, l, NULL, 0, 0, &sc) == 13, "top_k 1");
    ds_sampler_scratch_free(&sc);
}

static void test_seed_reproduces(void) {
    ds_sampler_scratch sc;
    REQUIRE(ds_sampler_scratch_init(&sc, V) == 0, "scratch");
    float l[V];
    fill(l);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.seed = 42;
    ds_sampler a, b, c;
    ds_sampler_init(&a, &p);
    ds_sampler_init(&b, &p);
    p.seed = 43;
    ds_sampler_init(&c, &p);
    int same = 1, differs = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = ds_sampler_sample(&a, l, NULL, 0, i, &sc), y = ds_sampler_sample(&b, l, NULL, 0, i, &sc);
        same &= x == y;
        differs |= x != ds_sampler_sample(&c, l, NULL, 0, i, &sc);
    }
    CHECK(same, "same seed, same tokens");
    CHECK(differs, "another seed, other tokens");
    ds_sampler_scratch_free(&sc);
}

/* frequencies over many draws match the softmax at temperature T */
static void test_distribution_matches_softmax(void) {
    ds_sampler_scratch sc;
    REQUIRE(ds_sampler_scratch_init(&sc, V) == 0, "scratch");
    float l[V];
    fill(l);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.temperature = 0.7f;
    p.seed = 1;
    ds_sampler s;
    ds_sampler_init(&s, &p);
    double want[V], sum = 0;
    for (int i = 0; i < V; i++) sum += want[i] = exp(l[i] / 0.7);
    int counts[V] = {0}, N = 200000;
    for (int i = 0; i < N; i++) counts[ds_sampler_sample(&s, l, NULL, 0, i, &sc)]++;
    double chi2 = 0;
    for (int i = 0; i < V; i++) {
        double e = want[i] / sum * N;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    /* 49 degrees of freedom: the 99.99th percentile is about 95 */
    CHECK(chi2 < 95, "chi-square %.1f", chi2);
    ds_sampler_scratch_free(&sc);
}

static void test_truncations(void) {
    ds_sampler_scratch sc;
    REQUIRE(ds_sampler_scratch_init(&sc, V) == 0, "scratch");
    float l[V];
    fill(l);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    ds_sampler s;
    p.top_k = 3;
    ds_sampler_init(&s, &p);
    ds_sampler_probs(&s, l, NULL, 0, &sc);
    int nz = 0;
    double tot = 0;
    for (int i = 0; i < V; i++) { nz += sc.probs[i] > 0; tot += sc.probs[i]; }
    CHECK(nz == 3 && sc.probs[13] > 0 && sc.probs[20] > 0 && sc.probs[30] > 0, "top_k 3 keeps the 3 best (%d kept)", nz);
    CHECK(fabs(tot - 1) < 1e-5, "renormalised: %g", tot);
    p.top_k = 0;
    p.top_p = 0.3f; /* softmax: 13 has 0.17, 20 has 0.10, 30 has 0.06, then the rest 0.05 and less */
    ds_sampler_init(&s, &p);
    ds_sampler_probs(&s, l, NULL, 0, &sc);
    double full[V], z = 0;
    for (int i = 0; i < V; i++) z += full[i] = exp(l[i]);
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++) /* selection sort, descending */
        for (int j = i + 1; j < V; j++)
            if (full[order[j]] > full[order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
    double cum = 0;
    int want = 0;
    while (cum < 0.3 * z) cum += full[order[want++]];
    nz = 0;
    for (int i = 0; i < V; i++) nz += sc.probs[i] > 0;
    CHECK(nz == want, "top_p 0.3 keeps the smallest head with 30%% of the mass: %d kept, %d expected", nz, want);
    CHECK(fabs(sc.probs[order[0]] - full[order[0]] / cum) < 1e-5, "renormalised over the head");
    p.top_p = 1.0f;
    p.min_p = 0.5f; /* keeps p >= 0.5 p_max: e^-0.5 = 0.61 for token 20, e^-1 = 0.37 for 30 */
    ds_sampler_init(&s, &p);
    ds_sampler_probs(&s, l, NULL, 0, &sc);
    CHECK(sc.probs[13] > 0 && sc.probs[20] > 0 && sc.probs[30] == 0, "min_p");
    ds_sampler_scratch_free(&sc);
}

static void test_penalties(void) {
    ds_sampler_scratch sc;
    REQUIRE(ds_sampler_scratch_init(&sc, V) == 0, "scratch");
    float l[V];
    fill(l);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.temperature = 0;
    p.presence_penalty = 0.6f; /* 13 seen once: 3.0 - 0.6 = 2.4 < 2.5 */
    ds_sampler s;
    ds_sampler_init(&s, &p);
    int32_t hist[] = {13};
    CHECK(ds_sampler_sample(&s, l, hist, 1, 0, &sc) == 20, "presence penalty");
    p.presence_penalty = 0;
    p.frequency_penalty = 0.3f; /* 13 seen twice: 3.0 - 0.6 */
    ds_sampler_init(&s, &p);
    int32_t hist2[] = {13, 13};
    CHECK(ds_sampler_sample(&s, l, hist2, 2, 0, &sc) == 20, "frequency penalty");
    CHECK(ds_sampler_sample(&s, l, hist, 1, 0, &sc) == 13, "frequency penalty once: 2.7 > 2.5");
    p.frequency_penalty = 0;
    p.repetition_penalty = 1.3f; /* 3.0 / 1.3 = 2.31 */
    ds_sampler_init(&s, &p);
    CHECK(ds_sampler_sample(&s, l, hist, 1, 0, &sc) == 20, "repetition penalty");
    CHECK(ds_sampler_sample(&s, l, NULL, 0, 0, &sc) == 13, "no history, no penalty");
    ds_sampler_scratch_free(&sc);
}

/* A draw is a function of (seed, choice, position) and the distribution: the order of the calls
 * and what was drawn before do not matter, and the choice index is a key of its own (choice 1 of
 * seed s is not choice 0 of seed s + 1). */
static void test_draws_are_keyed(void) {
    ds_sampler_scratch sc;
    REQUIRE(ds_sampler_scratch_init(&sc, V) == 0, "scratch");
    float l[V];
    fill(l);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.temperature = 2.0f;
    p.seed = 42;
    ds_sampler a, b, c, d;
    ds_sampler_init(&a, &p);
    ds_sampler_init(&b, &p);
    p.choice = 1;
    ds_sampler_init(&c, &p);
    p.seed = 43;
    p.choice = 0;
    ds_sampler_init(&d, &p);
    int32_t fwd[100];
    for (int i = 0; i < 100; i++) fwd[i] = ds_sampler_sample(&a, l, NULL, 0, i, &sc);
    int same = 1, same_choice = 0, same_shift = 0;
    for (int i = 99; i >= 0; i--) { /* backwards, with draws at other positions in between */
        (void)ds_sampler_sample(&b, l, NULL, 0, 1000 + i, &sc);
        same &= ds_sampler_sample(&b, l, NULL, 0, i, &sc) == fwd[i];
        same_choice += ds_sampler_sample(&c, l, NULL, 0, i, &sc) == fwd[i];
        same_shift += ds_sampler_sample(&c, l, NULL, 0, i, &sc) == ds_sampler_sample(&d, l, NULL, 0, i, &sc);
    }
    CHECK(same, "the same key drew another token");
    CHECK(same_choice < 40, "choice 1 drew choice 0's token at %d of 100 positions", same_choice);
    CHECK(same_shift < 40, "choice 1 of seed 42 drew choice 0 of seed 43's token at %d of 100 positions", same_shift);
    ds_sampler_scratch_free(&sc);
}

/* Drafts and the model's choices are drawn with the same key from two distributions p and q:
 * each draw is distributed as its own distribution (chi-square, also after top-k), and they
 * agree at least o / (2 - o) of the time, o = sum(min(p, q)) (rejection sampling's acceptance). */
static void test_coupled_draws(void) {
    ds_sampler_scratch sc;
    REQUIRE(ds_sampler_scratch_init(&sc, V) == 0, "scratch");
    float lp[V], lq[V];
    fill(lp);
    for (int i = 0; i < V; i++) lq[i] = lp[i] + 0.6f * sinf((float)i * 1.7f);
    for (int top_k = 0; top_k <= 6; top_k += 6) {
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        sp.temperature = 0.8f;
        sp.top_k = top_k;
        sp.seed = 7;
        ds_sampler s;
        ds_sampler_init(&s, &sp);
        static float p[V], q[V];
        ds_sampler_probs(&s, lp, NULL, 0, &sc);
        memcpy(p, sc.probs, sizeof p);
        ds_sampler_probs(&s, lq, NULL, 0, &sc);
        memcpy(q, sc.probs, sizeof q);
        double overlap = 0;
        for (int i = 0; i < V; i++) overlap += p[i] < q[i] ? p[i] : q[i];
        int N = 100000, agree = 0, counts[V] = {0};
        for (int i = 0; i < N; i++) {
            memcpy(sc.probs, q, sizeof q);
            int32_t d = ds_sampler_draw(&s, &sc, i);
            memcpy(sc.probs, p, sizeof p);
            int32_t t = ds_sampler_draw(&s, &sc, i);
            counts[t]++;
            agree += d == t;
        }
        double chi2 = 0;
        int dof = -1;
        for (int i = 0; i < V; i++) {
            if (p[i] == 0) { CHECK(counts[i] == 0, "top_k %d: token %d has no mass but was drawn", top_k, i); continue; }
            double e = p[i] * N;
            chi2 += (counts[i] - e) * (counts[i] - e) / e;
            dof++;
        }
        double z = 3.72, crit = dof * pow(1 - 2.0 / (9 * dof) + z * sqrt(2.0 / (9 * dof)), 3); /* 99.99% */
        double rate = (double)agree / N, bound = overlap / (2 - overlap);
        printf("     top_k %d: chi-square %.1f (%d dof, 99.99%% point %.1f); draws agree %.3f, overlap %.3f, bound %.3f\n",
               top_k, chi2, dof, crit, rate, overlap, bound);
        CHECK(chi2 < crit, "top_k %d: the draws are not distributed as p (chi-square %.1f)", top_k, chi2);
        CHECK(rate > bound - 0.01 && rate <= overlap + 0.01, "top_k %d: agreement %.3f outside [%.3f, %.3f]", top_k, rate,
              bound, overlap);
    }
    ds_sampler_scratch_free(&sc);
}

/* ds_sampler_probs as it was before top-k, top-p and min-p stopped sorting
 * every candidate: the reference the faster one must match bit for bit. */
static int ref_by_prob_desc(const void *a, const void *b, void *probs) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float px = ((const float *)probs)[x], py = ((const float *)probs)[y];
    if (px != py) return px > py ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void ref_probs(const ds_sampling_params *p, const float *logits, int nv, float *z, int32_t *ids) {
    memcpy(z, logits, (size_t)nv * sizeof *z);
    int best = 0;
    for (int i = 1; i < nv; i++)
        if (z[i] > z[best]) best = i;
    if (p->temperature <= 0.0f || p->top_k == 1) {
        memset(z, 0, (size_t)nv * sizeof *z);
        z[best] = 1.0f;
        return;
    }
    float mx = z[best], inv_t = 1.0f / p->temperature;
    double sum = 0.0;
    for (int i = 0; i < nv; i++) sum += z[i] = expf((z[i] - mx) * inv_t);
    for (int i = 0; i < nv; i++) z[i] = (float)(z[i] / sum);
    if (!(p->top_k > 0 || p->top_p < 1.0f || p->min_p > 0.0f)) return;
    int n = 0;
    float floor_p = z[best] * 1e-12f;
    for (int i = 0; i < nv; i++)
        if (z[i] >= floor_p) ids[n++] = i;
    qsort_r(ids, (size_t)n, sizeof *ids, ref_by_prob_desc, z);
    int keep = n;
    if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
    if (p->min_p > 0.0f)
        for (int i = 1; i < keep; i++)
            if (z[ids[i]] < p->min_p * z[best]) { keep = i; break; }
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < keep; i++) {
            cum += z[ids[i]];
            if (cum >= p->top_p) { keep = i + 1; break; }
        }
    }
    double kept = 0.0;
    for (int i = 0; i < keep; i++) kept += z[ids[i]];
    for (int i = 0; i < keep; i++) ids[i] = -ids[i] - 1;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0) z[ids[i]] = 0.0f;
    for (int i = 0; i < nv; i++)
        if (z[i] < floor_p) z[i] = 0.0f;
    for (int i = 0; i < keep; i++) {
        int32_t t = -ids[i] - 1;
        z[t] = (float)(z[t] / kept);
    }
}

static uint64_t rng_state;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }
static int rng_below(int n) { return (int)(rng_next() % (uint64_t)n); }

/* logits of one of several shapes: flat noise, wide (many probabilities far
 * below 2^-29), few distinct values (exact ties), all equal, a single spike */
static void random_logits(float *l, int nv, int shape) {
    for (int i = 0; i < nv; i++) {
        double u = rng_unit();
        switch (shape) {
        case 0: l[i] = (float)(u * 0.05); break;
        case 1: l[i] = (float)((u - 0.5) * 60.0); break;
        case 2: l[i] = (float)rng_below(4) * 0.7f; break;
        case 3: l[i] = 1.5f; break;
        default: l[i] = (float)(u * 2.0) + (i == nv / 3 ? 25.0f : 0.0f); break;
        }
    }
    if (shape == 1 && nv > 4) l[rng_below(nv)] = -INFINITY;
}

static void random_params(ds_sampling_params *p, int nv) {
    ds_sampling_defaults(p);
    p->temperature = (float)(0.3 + rng_unit() * 2.0);
    int what = rng_below(8); /* bit 0: top_k, bit 1: top_p, bit 2: min_p; 0: all three */
    if (what == 0) what = 7;
    if (what & 1) {
        int r = rng_below(4);
        p->top_k = r == 0 ? 1 + rng_below(nv) : r == 1 ? nv + rng_below(3) : 1 + rng_below(nv < 200 ? nv : 200);
    }
    if (what & 2) {
        int r = rng_below(5);
        p->top_p = r == 0 ? 1.0f - 0x1p-24f * (float)(1 + rng_below(4)) : r == 1 ? 1e-6f : (float)(0.01 + rng_unit() * 0.99);
    }
    if (what & 4) p->min_p = rng_below(6) == 0 ? (float)(rng_unit() * 1e-9) : (float)(rng_unit() * (rng_below(8) ? 0.3 : 1.2));
}

static void test_truncation_matches_full_sort(void) {
    enum { MAXV = 300000 };
    float *l = malloc(MAXV * sizeof *l), *want = malloc(MAXV * sizeof *want);
    int32_t *ids = malloc(MAXV * sizeof *ids);
    ds_sampler_scratch sc = {0};
    REQUIRE(l && want && ids, "alloc");
    rng_state = 12345;
    int cases = ds_test_scaled(2500), mismatches = 0;
    for (int c = 0; c < cases && mismatches < 5; c++) {
        /* mostly small vocabularies, some up to 300k */
        int r = rng_below(100);
        int nv = r < 60 ? 1 + rng_below(64) : r < 95 ? 1 + rng_below(5000) : 1 + rng_below(MAXV);
        if (c < 10) nv = c < 5 ? 248320 : 300000;
        int shape = rng_below(5);
        random_logits(l, nv, shape);
        ds_sampling_params p;
        random_params(&p, nv);
        ds_sampler s;
        ds_sampler_init(&s, &p);
        REQUIRE(ds_sampler_scratch_init(&sc, nv) == 0, "scratch");
        ds_sampler_probs(&s, l, NULL, 0, &sc);
        ref_probs(&p, l, nv, want, ids);
        int same = memcmp(sc.probs, want, (size_t)nv * sizeof *want) == 0;
        CHECK(same, "case %d: V %d shape %d temperature %g top_k %d top_p %.9g min_p %g differs from the full sort", c,
              nv, shape, p.temperature, p.top_k, p.top_p, p.min_p);
        mismatches += !same;
        ds_sampler_scratch_free(&sc);
    }
    free(l);
    free(want);
    free(ids);
}

static void test_log_softmax(void) {
    float l[3] = {1.0f, 2.0f, 3.0f};
    double z = log(exp(1.0) + exp(2.0) + exp(3.0));
    CHECK(fabs(ds_log_softmax_at(l, 3, 1) - (2.0 - z)) < 1e-9, "log softmax");
}

int main(void) {
    RUN(test_greedy_is_argmax);
    RUN(test_seed_reproduces);
    RUN(test_distribution_matches_softmax);
    RUN(test_truncations);
    RUN(test_penalties);
    RUN(test_draws_are_keyed);
    RUN(test_coupled_draws);
    RUN(test_log_softmax);
    RUN(test_truncation_matches_full_sort);
    return ds_test_finish();
}
