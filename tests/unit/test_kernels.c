/* test_kernels.c - every kernel path against the scalar reference, on this
 * machine's CPU: activation quantisation and BF16 rounding bit for bit, and
 * the matrix product of every weight type over odd sizes (rows not a multiple
 * of 16, one to seventeen tokens, columns with tails) bit for bit, except the
 * AVX512_BF16 product, which must agree to F32 rounding. The reference itself
 * is checked against the dequantised F32 product (the activation
 * quantisation error is bounded). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "kernels/backend.h"
#include "kernels/kern.h"
#include "numeric_testing.h"
#include "testing.h"

static const ds_isa levels[] = {DS_ISA_AVX2, DS_ISA_AVX512};

/* a weights matrix of the type: quantised from random floats, with one row of
 * random block bytes (sane scales) to reach every bit pattern of the levels */
static uint8_t *make_weights(ds_dtype t, int64_t rows, int64_t cols, rng *r) {
    size_t rb = ds_dtype_row_bytes(t, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *x = malloc((size_t)cols * sizeof(float));
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t c = 0; c < cols; c++) x[c] = rng_symmetric(r) * (1.0f + (float)(i % 3));
        ds_quantize_row(t, x, w + (size_t)i * rb, cols);
    }
    if (rows > 2 && t != DS_F32 && t != DS_F16 && t != DS_BF16) {
        uint8_t *row = w + rb; /* random bytes, then scales made finite and small */
        for (size_t k = 0; k < rb; k++) row[k] = (uint8_t)rng_next(r);
        int be = ds_dtype_get(t)->block_elems, bb = ds_dtype_get(t)->block_bytes;
        for (int64_t b = 0; b < cols / be; b++) {
            uint8_t *blk = row + (size_t)b * (size_t)bb;
            uint16_t d = ds_f32_to_f16(0.01f), dm = ds_f32_to_f16(0.002f);
            if (t == DS_Q6_K) memcpy(blk + 208, &d, 2);
            else memcpy(blk, &d, 2);
            if (t == DS_Q4_K || t == DS_Q5_K) memcpy(blk + 2, &dm, 2);
        }
    }
    free(x);
    return w;
}

typedef struct {
    ds_xq xq;
    void *qbuf;
    uint16_t *xb;
    float *x;
} acts;

static void acts_make(acts *a, int64_t n, int64_t K, rng *r, ds_isa level) {
    a->x = malloc((size_t)(n * K) * sizeof(float));
    for (int64_t i = 0; i < n * K; i++) a->x[i] = rng_symmetric(r) * (i % 7 == 0 ? 8.0f : 1.0f);
    if (n * K > 5) a->x[3] = 0.0f;
    a->xb = malloc((size_t)(n * K) * 2 + 2);
    a->qbuf = NULL;
    const ds_kern *k = ds_kern_for(level);
    k->to_bf16(a->xb, a->x, n * K);
    if (K % 32 == 0) {
        a->qbuf = aligned_alloc(64, (ds_xq_bytes(n, K) + 63) / 64 * 64);
        ds_xq_init(&a->xq, a->qbuf, n, K);
        for (int64_t t = 0; t < n; t++) k->quant_x(&a->xq, t, a->x + t * K);
    }
}

static void acts_free(acts *a) {
    free(a->x);
    free(a->xb);
    free(a->qbuf);
}

static int g_x8; /* the products below read the activations at 8 bits alone (ds_wmat.x8) */

static void run_mm(const ds_kern *k, ds_mm_fn fn, ds_dtype t, const uint8_t *w, int64_t rows, int64_t cols, const acts *a,
                   int64_t n, float *y, uint8_t **packed_out) {
    ds_wmat wm = {.type = t, .rows = rows, .cols = cols, .data = w, .x8 = g_x8};
    uint8_t *packed = NULL;
    if (k->packs && ds_pack_sb_elems(t)) {
        size_t bytes = ds_pack_plan(&wm);
        packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ds_pack_groups(&wm, packed, 0, (rows + DS_QG - 1) / DS_QG);
        wm.packed = packed;
    }
    ds_mm m = {.y = y, .ldy = rows + 3, .w = &wm, .n = n, .x = a->x, .ldx = cols, .xb = a->xb, .xq = &a->xq};
    /* two row ranges, split at a multiple of 16, as two threads would */
    int64_t mid = rows > 16 ? 16 : rows;
    fn(&m, 0, mid);
    if (mid < rows) fn(&m, mid, rows);
    if (packed_out) *packed_out = packed;
    else free(packed);
}

static void test_activation_quantisation_matches_ref(void) {
    rng r = {11};
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
        if (levels[li] > ds_cpu_best_level()) continue;
        const ds_kern *k = ds_kern_for(levels[li]);
        int64_t n = 3, K = 96;
        acts a, b;
        rng r1 = r, r2 = r;
        acts_make(&a, n, K, &r1, DS_ISA_REF);
        acts_make(&b, n, K, &r2, levels[li]);
        CHECK(memcmp(a.xq.q, b.xq.q, (size_t)(n * K)) == 0, "%s: q differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xq.d, b.xq.d, (size_t)(n * K / 32) * 4) == 0, "%s: d differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xq.ms, b.xq.ms, (size_t)(n * K / 32) * 4) == 0, "%s: ms differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xq.c32, b.xq.c32, (size_t)(n * K / 16) * 4) == 0, "%s: c32 differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xq.c128, b.xq.c128, (size_t)(n * K / 32) * 4) == 0, "%s: c128 differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xb, b.xb, (size_t)(n * K) * 2) == 0, "%s: bf16 differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xq.r, b.xq.r, (size_t)(n * K)) == 0, "%s: r differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xq.e, b.xq.e, (size_t)(n * K / 32) * 4) == 0, "%s: e differs", ds_isa_name(levels[li]));
        CHECK(memcmp(a.xq.r128, b.xq.r128, (size_t)(n * K / 32) * 4) == 0, "%s: r128 differs", ds_isa_name(levels[li]));
        /* odd lengths for BF16 rounding, with NaN and inf */
        float v[37];
        uint16_t h1[37], h2[37];
        for (int i = 0; i < 37; i++) v[i] = rng_symmetric(&r) * 1e3f;
        v[5] = NAN;
        v[6] = INFINITY;
        v[7] = -0.0f;
        v[8] = 1e-40f;
        ds_to_bf16_ref(h1, v, 37);
        k->to_bf16(h2, v, 37);
        CHECK(memcmp(h1, h2, sizeof h1) == 0, "%s: bf16 of odd length differs", ds_isa_name(levels[li]));
        acts_free(&a);
        acts_free(&b);
    }
}

static void check_type(ds_dtype t, const int64_t *colss, int ncols) {
    static const int64_t rowss[] = {1, 5, 16, 17, 40};
    static const int64_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 17};
    rng r = {(uint64_t)t * 77 + 1};
    for (int ci = 0; ci < ncols; ci++)
        for (size_t ri = 0; ri < sizeof rowss / sizeof rowss[0]; ri++) {
            int64_t cols = colss[ci], rows = rowss[ri];
            uint8_t *w = make_weights(t, rows, cols, &r);
            acts a;
            acts_make(&a, 17, cols, &r, DS_ISA_REF);
            size_t ysz = (size_t)17 * (size_t)(rows + 3);
            float *want = calloc(ysz, sizeof(float)), *got = calloc(ysz, sizeof(float));
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int64_t n = ns[ni];
                run_mm(&ds_kern_ref, ds_kern_ref.mm[t], t, w, rows, cols, &a, n, want, NULL);
                /* the reference against the dequantised product in double: with the activations as the
                 * kernels see them (quantised, or rounded to BF16) it must agree to F32 rounding; with the
                 * exact activations, to the activation quantisation error */
                if (ni == 0) {
                    float *row = malloc((size_t)cols * sizeof(float)), *f = malloc((size_t)rows * sizeof(float));
                    float *fx = malloc((size_t)rows * sizeof(float));
                    int quant = t != DS_F32 && t != DS_F16 && t != DS_BF16;
                    for (int64_t i = 0; i < rows; i++) {
                        ds_dequantize_row(t, w + (size_t)i * ds_dtype_row_bytes(t, cols), row, cols);
                        double s = 0, sx = 0;
                        for (int64_t c = 0; c < cols; c++) {
                            double xv = t == DS_Q8_0 && !g_x8 ? ((double)a.xq.q[c] * 128 + a.xq.r[c]) * a.xq.e[c / 32]
                                        : quant ? (double)a.xq.q[c] * a.xq.d[c / 32]
                                        : t == DS_BF16 ? (double)ds_bf16_to_f32(a.xb[c]) : (double)a.x[c];
                            s += (double)row[c] * xv;
                            sx += (double)row[c] * a.x[c];
                        }
                        f[i] = (float)s;
                        fx[i] = (float)sx;
                    }
                    double d = rel_diff(want, f, (size_t)rows), dx = rel_diff(want, fx, (size_t)rows);
                    CHECK(d <= 1e-5, "%s %lldx%lld: reference vs dequantised product: %.3e", ds_dtype_get(t)->name,
                          (long long)rows, (long long)cols, d);
                    CHECK(dx <= (t == DS_Q8_0 && !g_x8 ? 5e-4 : quant ? 0.1 : t == DS_BF16 ? 2e-2 : 1e-5),
                          "%s %lldx%lld: reference vs exact activations: %.3e", ds_dtype_get(t)->name, (long long)rows,
                          (long long)cols, dx);
                    free(row);
                    free(f);
                    free(fx);
                }
                for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
                    if (levels[li] > ds_cpu_best_level()) continue;
                    const ds_kern *k = ds_kern_for(levels[li]);
                    memset(got, 0, ysz * sizeof(float));
                    run_mm(k, k->mm[t], t, w, rows, cols, &a, n, got, NULL);
                    int same = 1;
                    for (int64_t tt = 0; tt < n; tt++)
                        same &= memcmp(got + tt * (rows + 3), want + tt * (rows + 3), (size_t)rows * sizeof(float)) == 0;
                    CHECK(same, "%s %s: %lld rows x %lld cols, %lld tokens: differs from the reference (rel %.2e)",
                          ds_isa_name(levels[li]), ds_dtype_get(t)->name, (long long)rows, (long long)cols, (long long)n,
                          rel_diff(got, want, ysz));
#if defined(__x86_64__)
                    if (t == DS_BF16 && levels[li] == DS_ISA_AVX512 && ds_cpu()->avx512bf16) {
                        memset(got, 0, ysz * sizeof(float));
                        run_mm(k, ds_mm_bf16_avx512bf16, t, w, rows, cols, &a, n, got, NULL);
                        double d = 0;
                        for (int64_t tt = 0; tt < n; tt++) {
                            double e = rel_diff(got + tt * (rows + 3), want + tt * (rows + 3), (size_t)rows);
                            d = e > d ? e : d;
                        }
                        CHECK(d <= 1e-5, "avx512bf16: %lldx%lld, %lld tokens: rel %.3e", (long long)rows,
                              (long long)cols, (long long)n, d);
                    }
#endif
                }
            }
            free(want);
            free(got);
            acts_free(&a);
            free(w);
        }
}

static void test_f32(void) {
    static const int64_t cols[] = {1, 15, 16, 17, 33, 100};
    check_type(DS_F32, cols, 6);
}
static void test_f16(void) {
    static const int64_t cols[] = {3, 16, 47, 64};
    check_type(DS_F16, cols, 4);
}
static void test_bf16(void) {
    static const int64_t cols[] = {1, 17, 31, 32, 33, 100, 256};
    check_type(DS_BF16, cols, 7);
}
static void test_q8_0(void) {
    static const int64_t cols[] = {32, 96, 256};
    check_type(DS_Q8_0, cols, 3);
    g_x8 = 1; /* the one-term form (DS_W_X8) */
    check_type(DS_Q8_0, cols, 3);
    g_x8 = 0;
}
static void test_q4_0(void) {
    static const int64_t cols[] = {32, 96, 256};
    check_type(DS_Q4_0, cols, 3);
}
static void test_q4_K(void) {
    static const int64_t cols[] = {256, 768};
    check_type(DS_Q4_K, cols, 2);
}
static void test_q5_K(void) {
    static const int64_t cols[] = {256, 512};
    check_type(DS_Q5_K, cols, 2);
}
static void test_q6_K(void) {
    static const int64_t cols[] = {256, 768};
    check_type(DS_Q6_K, cols, 2);
}

/* a packed row read back gives the very floats of the GGUF row */
static void test_unpack_row_equals_dequantize(void) {
    static const ds_dtype types[] = {DS_Q8_0, DS_Q4_0, DS_Q4_K, DS_Q5_K, DS_Q6_K};
    rng r = {5};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        ds_dtype t = types[ti];
        int64_t rows = 21, cols = 512;
        uint8_t *w = make_weights(t, rows, cols, &r);
        ds_wmat wm = {.type = t, .rows = rows, .cols = cols, .data = w};
        size_t bytes = ds_pack_plan(&wm);
        uint8_t *packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ds_pack_groups(&wm, packed, 0, (rows + DS_QG - 1) / DS_QG);
        wm.packed = packed;
        float a[512], b[512];
        int bad = 0;
        for (int64_t i = 0; i < rows; i++) {
            ds_dequantize_row(t, w + (size_t)i * ds_dtype_row_bytes(t, cols), a, cols);
            ds_unpack_row(&wm, i, b);
            bad += memcmp(a, b, sizeof a) != 0;
        }
        CHECK(bad == 0, "%s: %d rows differ", ds_dtype_get(t)->name, bad);
        free(packed);
        free(w);
    }
}

/* one head of the Gated DeltaNet: n tokens token by token and chunked, on
 * every path, against the reference's token-by-token form (in double) */
static void gdn_inputs(rng *r, int n, int Dk, int Dv, float *q, float *k, float *v, float *beta, float *g, float *S) {
    for (int t = 0; t < n; t++) {
        double nq = 0, nk = 0;
        for (int i = 0; i < Dk; i++) {
            q[t * Dk + i] = rng_symmetric(r);
            k[t * Dk + i] = rng_symmetric(r);
            nq += (double)q[t * Dk + i] * q[t * Dk + i];
            nk += (double)k[t * Dk + i] * k[t * Dk + i];
        }
        for (int i = 0; i < Dk; i++) {
            q[t * Dk + i] = (float)(q[t * Dk + i] / sqrt(nq) / sqrt((double)Dk));
            k[t * Dk + i] = (float)(k[t * Dk + i] / sqrt(nk));
        }
        for (int j = 0; j < Dv; j++) v[t * Dv + j] = rng_symmetric(r) * 2.0f;
        beta[t] = 0.5f + 0.5f * rng_symmetric(r);
        g[t] = -0.05f - 0.3f * (rng_symmetric(r) + 1.0f);
    }
    for (int i = 0; i < Dk * Dv; i++) S[i] = rng_symmetric(r) * 0.5f;
}

static void test_deltanet_kernels(void) {
    static const int dims[][2] = {{32, 32}, {128, 128}, {64, 32}};
    static const int lens[] = {1, 5, 17, 64};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int Dk = dims[di][0], Dv = dims[di][1], n = lens[li];
            rng r = {(uint64_t)(di * 10 + li + 1)};
            float *q = malloc((size_t)n * Dk * 4), *k = malloc((size_t)n * Dk * 4), *v = malloc((size_t)n * Dv * 4);
            float beta[64], g[64];
            float *S0 = malloc((size_t)Dk * Dv * 4), *S = malloc((size_t)Dk * Dv * 4), *Sw = malloc((size_t)Dk * Dv * 4);
            float *o = malloc((size_t)n * Dv * 4), *ow = malloc((size_t)n * Dv * 4);
            gdn_inputs(&r, n, Dk, Dv, q, k, v, beta, g, S0);
            /* want: reference, token by token */
            memcpy(Sw, S0, (size_t)Dk * Dv * 4);
            for (int t = 0; t < n; t++)
                ds_kern_ref.gdn_step(Sw, q + t * Dk, k + t * Dk, v + t * Dv, beta[t], g[t], Dk, Dv, ow + t * Dv);
            const ds_isa all[] = {DS_ISA_REF, DS_ISA_AVX2, DS_ISA_AVX512};
            for (size_t ai = 0; ai < 3; ai++) {
                if (all[ai] > ds_cpu_best_level()) continue;
                const ds_kern *kk = ds_kern_for(all[ai]);
                if (Dk % kk->vw || Dv % kk->vw) continue;
                for (int chunked = 0; chunked < 2; chunked++) {
                    if (all[ai] == DS_ISA_REF && !chunked) continue;
                    memcpy(S, S0, (size_t)Dk * Dv * 4);
                    if (chunked) {
                        size_t fl = kk->gdn_chunk_floats(Dk, Dv);
                        float *scr = malloc(fl * 4);
                        /* separate q/k/v rows with a common stride, as the model lays them out */
                        size_t stride = (size_t)(2 * Dk + Dv);
                        float *mix = malloc((size_t)n * stride * 4), ab[128];
                        for (int t = 0; t < n; t++) {
                            memcpy(mix + t * stride, q + t * Dk, (size_t)Dk * 4);
                            memcpy(mix + t * stride + Dk, k + t * Dk, (size_t)Dk * 4);
                            memcpy(mix + t * stride + 2 * Dk, v + t * Dv, (size_t)Dv * 4);
                            ab[2 * t] = beta[t];
                            ab[2 * t + 1] = g[t];
                        }
                        kk->gdn_chunk(S, mix, mix + Dk, mix + 2 * Dk, stride, ab, ab + 1, 2, n, Dk, Dv, scr, o, (size_t)Dv);
                        free(mix);
                        free(scr);
                    } else {
                        for (int t = 0; t < n; t++)
                            kk->gdn_step(S, q + t * Dk, k + t * Dk, v + t * Dv, beta[t], g[t], Dk, Dv, o + t * Dv);
                    }
                    double eo = rel_diff(o, ow, (size_t)n * Dv), es = rel_diff(S, Sw, (size_t)Dk * Dv);
                    CHECK(eo <= 2e-6 && es <= 2e-6, "%s %s Dk %d Dv %d n %d: output %.2e state %.2e",
                          ds_isa_name(all[ai]), chunked ? "chunk" : "step", Dk, Dv, n, eo, es);
                    if (n == 64 && Dk == 128) printf("     %s %s: output %.2e state %.2e\n", ds_isa_name(all[ai]), chunked ? "chunk" : "step", eo, es);
                }
            }
            free(q); free(k); free(v); free(S0); free(S); free(Sw); free(o); free(ow);
        }
}

/* vector exp and SiLU against libm */
static void test_vector_math(void) {
    float x[103], a[103], b[103], want[103];
    for (int i = 0; i < 103; i++) x[i] = -30.0f + 0.6f * (float)i;
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
        if (levels[li] > ds_cpu_best_level()) continue;
        const ds_kern *k = ds_kern_for(levels[li]);
        memcpy(a, x, sizeof a);
        for (int i = 0; i < 103; i++) b[i] = 1.0f + 0.01f * (float)i;
        k->silu_mul(a, b, 103);
        double worst = 0;
        for (int i = 0; i < 103; i++) {
            want[i] = x[i] / (1.0f + expf(-x[i])) * b[i];
            double e = fabs((double)a[i] - want[i]) / (fabs((double)want[i]) + 1e-30);
            worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-6, "%s: silu rel error %.2e", ds_isa_name(levels[li]), worst);
        memcpy(a, x, sizeof a);
        float s = k->exp_sum(a, 10.0f, 103);
        double ws = 0;
        worst = 0;
        for (int i = 0; i < 103; i++) {
            double w = exp((double)(x[i] - 10.0f)); /* the kernel subtracts in F32 */
            ws += w;
            double e = fabs(a[i] - w) / w;
            worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-6 && fabs(s - ws) / ws < 1e-6, "%s: exp rel error %.2e, sum %.2e", ds_isa_name(levels[li]),
              worst, fabs(s - ws) / ws);
    }
}

/* Which paths this run tests bit for bit and which it cannot, and why (the levels above run
 * against the reference where the CPU has them; the extensions without a kernel are named so a
 * reader of the log knows they were not tested). */
static void report_paths(void) {
    printf("     path ref: ran (the reference)\n");
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++)
        printf("     path %s: %s\n", ds_isa_name(levels[li]),
               levels[li] <= ds_cpu_best_level() ? "ran" : "skipped: CPU lacks it");
    int n;
    const ds_cpu_ext *ext = ds_cpu_extensions(&n);
    for (int i = 2; i < n; i++) /* AVX2 and AVX-512 are the levels above */
        printf("     path %s: %s\n", ext[i].name,
               ext[i].used ? "ran" : !ext[i].kernel ? (ext[i].cpu_has ? "skipped: no kernel for it in this build"
                                                                      : "skipped: CPU lacks it (and no kernel for it in this build)")
                                                    : "skipped: CPU lacks it");
    char line[512];
    ds_cpu_describe(line, sizeof line);
    printf("     cpu: %s\n", line);
}

/* The report's facts agree with the features: a path runs only where the CPU has it, the
 * AVX512-BF16 path exactly where test_matmul runs it, AMX is never permitted without the tiles. */
static void test_path_report(void) {
    int n;
    const ds_cpu_ext *ext = ds_cpu_extensions(&n);
    REQUIRE(n == 8, "%d extensions", n);
    static const char *names[] = {"AVX2", "AVX-512", "AVX512-BF16", "AMX-INT8", "AMX-BF16", "AVX512-FP16", "AVX-VNNI",
                                  "AVX-VNNI-INT8"};
    for (int i = 0; i < n; i++) {
        CHECK(!strcmp(ext[i].name, names[i]), "extension %d is %s", i, ext[i].name);
        CHECK(ext[i].used == (ext[i].kernel && ext[i].cpu_has), "%s: used %d", ext[i].name, ext[i].used);
    }
    CHECK(ext[1].cpu_has == (ds_cpu_best_level() == DS_ISA_AVX512), "AVX-512 %d", ext[1].cpu_has);
    CHECK(ext[2].used == (ds_cpu_best_level() == DS_ISA_AVX512 && ds_cpu()->avx512bf16), "AVX512-BF16 %d", ext[2].used);
    if (!ds_cpu()->amx_tile) CHECK(!ds_cpu_amx_permitted(), "AMX permitted without tiles");
    CHECK(!ext[3].kernel && !ext[4].kernel, "an AMX kernel is claimed");
}

/* The backend's product over a weight's first rows (matmul_rows: the MTP head's drafts over the
 * vocabulary's first tokens) gives those rows the whole product's bits, with 1 and 3 threads, a
 * prefix ending inside a 16-row packed group or on its edge, and writes nothing past it. */
static void test_backend_prefix_rows(void) {
    static const ds_dtype ts[] = {DS_F32, DS_F16, DS_BF16, DS_Q8_0, DS_Q4_0, DS_Q4_K, DS_Q5_K, DS_Q6_K};
    static const int64_t prefixes[] = {1, 17, 32, 36};
    const int64_t rows = 37, cols = 256, ntok = 5;
    rng r = {91};
    float *x = malloc((size_t)(ntok * cols) * sizeof(float));
    for (int64_t i = 0; i < ntok * cols; i++) x[i] = rng_symmetric(&r);
    for (int nth = 1; nth <= 3; nth += 2) {
        ds_backend *be = NULL;
        ds_err e;
        REQUIRE(ds_backend_cpu_new(nth, &be, &e) == DS_OK, "%s", e.msg);
        ds_be_limits lim = {.max_rows = (int)ntok, .max_group_rows = (int)ntok};
        for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
            ds_dtype t = ts[ti];
            uint8_t *w = make_weights(t, rows, cols, &r);
            ds_mat src = {.type = t, .data = w, .rows = rows, .cols = cols};
            ds_bweight *bw;
            REQUIRE(ds_be_weight_new(be, &src, DS_W_MATMUL, &bw, &e) == DS_OK, "%s", e.msg);
            REQUIRE(be->ops->reserve(be, &lim, &e) == DS_OK, "%s", e.msg);
            float *full = ds_be_alloc(be, (size_t)(ntok * rows) * 4), *part = ds_be_alloc(be, (size_t)(ntok * rows) * 4);
            ds_be_matmul1(be, full, rows, bw, x, cols, ntok);
            for (size_t pi = 0; pi < sizeof prefixes / sizeof prefixes[0]; pi++) {
                int64_t p = prefixes[pi];
                for (int64_t i = 0; i < ntok * rows; i++) part[i] = 12345.0f;
                ds_be_matmul_rows(be, part, rows, bw, p, x, cols, ntok);
                int differ = 0, past = 0;
                for (int64_t tk = 0; tk < ntok; tk++) {
                    differ += memcmp(part + tk * rows, full + tk * rows, (size_t)p * 4) != 0;
                    for (int64_t i = p; i < rows; i++) past += part[tk * rows + i] != 12345.0f;
                }
                CHECK(differ == 0, "%s, %d threads, first %lld of %lld rows: %d tokens differ from the whole product",
                      ds_dtype_get(t)->name, nth, (long long)p, (long long)rows, differ);
                CHECK(past == 0, "%s, %d threads, first %lld rows: %d values written past them", ds_dtype_get(t)->name,
                      nth, (long long)p, past);
            }
            ds_be_free_buf(be, full);
            ds_be_free_buf(be, part);
            ds_be_weight_free(be, bw);
            free(w);
        }
        ds_be_free(be);
    }
    free(x);
}

int main(void) {
    printf("     cpu: best level %s, avx512_bf16 %d\n", ds_isa_name(ds_cpu_best_level()), ds_cpu()->avx512bf16);
    report_paths();
    RUN(test_path_report);
    RUN(test_activation_quantisation_matches_ref);
    RUN(test_f32);
    RUN(test_f16);
    RUN(test_bf16);
    RUN(test_q8_0);
    RUN(test_q4_0);
    RUN(test_q4_K);
    RUN(test_q5_K);
    RUN(test_q6_K);
    RUN(test_unpack_row_equals_dequantize);
    RUN(test_deltanet_kernels);
    RUN(test_vector_math);
    RUN(test_backend_prefix_rows);
    return ds_test_finish();
}
