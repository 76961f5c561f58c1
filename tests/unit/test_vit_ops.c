/* test_vit_ops.c - the backend operations of the vision tower (backend.h:
 * layernorm, bias_act, vit_attention) on every kernel level this CPU has,
 * against plain double-precision loops written here. */
#include <math.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "testing.h"

static uint32_t rng = 1;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* softmax(q k^T / sqrt(hd)) v per head after the rotate-half rotation, in double */
static void naive_attention(double *out, const float *qkv, const float *rot, int n, int nh, int hd) {
    int D = nh * hd, half = hd / 2;
    double *q = malloc(sizeof(double) * (size_t)n * D), *k = malloc(sizeof(double) * (size_t)n * D);
    double *s = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < hd; j++) {
                const float *qi = qkv + (size_t)i * 3 * D + h * hd, *ki = qi + D, *cs = rot + (size_t)i * hd;
                int jj = j % half;
                double c = cs[jj], sn = cs[half + jj];
                double rq = j < half ? -qi[j + half] : qi[j - half], rk = j < half ? -ki[j + half] : ki[j - half];
                q[(size_t)i * D + h * hd + j] = qi[j] * c + rq * sn;
                k[(size_t)i * D + h * hd + j] = ki[j] * c + rk * sn;
            }
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < n; i++) {
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p < n; p++) {
                double d = 0;
                for (int j = 0; j < hd; j++) d += q[(size_t)i * D + h * hd + j] * k[(size_t)p * D + h * hd + j];
                s[p] = d / sqrt((double)hd);
                mx = s[p] > mx ? s[p] : mx;
            }
            for (int p = 0; p < n; p++) sum += s[p] = exp(s[p] - mx);
            for (int j = 0; j < hd; j++) {
                double a = 0;
                for (int p = 0; p < n; p++) a += s[p] * qkv[(size_t)p * 3 * D + 2 * D + h * hd + j];
                out[(size_t)i * D + h * hd + j] = a / sum;
            }
        }
    free(q);
    free(k);
    free(s);
}

static void check_attention(ds_isa lvl, int n, int nh, int hd) {
    int D = nh * hd;
    float *qkv = malloc(sizeof(float) * (size_t)n * 3 * D), *rot = malloc(sizeof(float) * (size_t)n * hd);
    float *work = malloc(sizeof(float) * (size_t)n * 3 * D);
    double *want = malloc(sizeof(double) * (size_t)n * D);
    for (size_t i = 0; i < (size_t)n * 3 * D; i++) qkv[i] = 2.0f * frand();
    for (int i = 0; i < n; i++)
        for (int j = 0; j < hd / 2; j++) {
            double a = (i % 7) * pow(10000.0, -2.0 * j / hd) + (i / 7) * 0.3;
            rot[(size_t)i * hd + j] = (float)cos(a);
            rot[(size_t)i * hd + hd / 2 + j] = (float)sin(a);
        }
    naive_attention(want, qkv, rot, n, nh, hd);
    float *outs[2] = {0};
    for (int t = 0; t < 2; t++) {
        ds_backend *be;
        ds_err e = {0};
        REQUIRE(ds_backend_cpu_new(t ? 3 : 1, &be, &e) == DS_OK, "%s", e.msg);
        float *scratch = ds_be_alloc(be, be->ops->vit_attention_floats(be, n, nh, hd) * sizeof(float));
        outs[t] = malloc(sizeof(float) * (size_t)n * D);
        memcpy(work, qkv, sizeof(float) * (size_t)n * 3 * D);
        be->ops->vit_attention(be, outs[t], work, rot, n, nh, hd, scratch);
        ds_be_free_buf(be, scratch);
        ds_be_free(be);
    }
    double err = 0, big = 0;
    for (size_t i = 0; i < (size_t)n * D; i++) {
        err = fmax(err, fabs(outs[0][i] - want[i]));
        big = fmax(big, fabs(want[i]));
    }
    CHECK(err <= 2e-6 * big, "%s n=%d nh=%d hd=%d: max error %g of %g", ds_isa_name(lvl), n, nh, hd, err, big);
    CHECK(!memcmp(outs[0], outs[1], sizeof(float) * (size_t)n * D), "%s n=%d: 1 and 3 threads differ", ds_isa_name(lvl),
          n);
    free(outs[0]);
    free(outs[1]);
    free(qkv);
    free(rot);
    free(work);
    free(want);
}

static void test_vit_attention(void) {
    ds_isa best = ds_cpu_best_level();
    for (int l = 0; l <= (int)best; l++) {
        ds_cpu_set_level((ds_isa)l);
        /* one patch; under one tile; across query and key tiles with ragged ends; head sizes
         * of 16, 24 and the real 72 (not a multiple of the vector width) */
        check_attention((ds_isa)l, 1, 2, 16);
        check_attention((ds_isa)l, 47, 3, 24);
        check_attention((ds_isa)l, 300, 2, 72);
    }
    ds_cpu_set_level(best);
}

static void test_layernorm_and_bias_act(void) {
    ds_isa best = ds_cpu_best_level();
    enum { N = 5, d = 77 };
    float x[N * d], w[d], b[d], y[N * d];
    for (int i = 0; i < N * d; i++) x[i] = 3.0f * frand() + 1.0f;
    for (int i = 0; i < d; i++) w[i] = 1.0f + frand(), b[i] = frand();
    for (int l = 0; l <= (int)best; l++) {
        ds_cpu_set_level((ds_isa)l);
        ds_backend *be;
        ds_err e = {0};
        REQUIRE(ds_backend_cpu_new(2, &be, &e) == DS_OK, "%s", e.msg);
        be->ops->layernorm(be, y, x, w, b, N, d, d, 1e-6f);
        double err = 0;
        for (int r = 0; r < N; r++) {
            double mean = 0, var = 0;
            for (int i = 0; i < d; i++) mean += x[r * d + i] / d;
            for (int i = 0; i < d; i++) var += (x[r * d + i] - mean) * (x[r * d + i] - mean) / d;
            for (int i = 0; i < d; i++)
                err = fmax(err, fabs(y[r * d + i] - ((x[r * d + i] - mean) / sqrt(var + 1e-6) * w[i] + b[i])));
        }
        CHECK(err < 1e-5, "%s layernorm: error %g", ds_isa_name((ds_isa)l), err);
        for (int act = DS_ACT_NONE; act <= DS_ACT_GELU_ERF; act++) {
            memcpy(y, x, sizeof x);
            be->ops->bias_act(be, y, b, N, d, d, act);
            double gerr = 0;
            for (int r = 0; r < N; r++)
                for (int i = 0; i < d; i++) {
                    double v = (double)x[r * d + i] + b[i], g;
                    if (act == DS_ACT_NONE) g = v;
                    else if (act == DS_ACT_GELU_TANH) g = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                    else g = 0.5 * v * (1 + erf(v / sqrt(2.0)));
                    gerr = fmax(gerr, fabs(y[r * d + i] - g) / fmax(1.0, fabs(g)));
                }
            CHECK(gerr < 2e-6, "%s bias_act %d: error %g", ds_isa_name((ds_isa)l), act, gerr);
        }
        ds_be_free(be);
    }
    ds_cpu_set_level(best);
}

int main(void) {
    RUN(test_vit_attention);
    RUN(test_layernorm_and_bias_act);
    return ds_test_finish();
}
