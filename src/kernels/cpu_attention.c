/* cpu_attention.c - gated softmax attention over paged KV for the CPU backend
 * (spec 3.4): per-head q/k RMSNorm and partial NeoX RoPE, K and V written to
 * their page slots, then for each token and KV head the query heads that
 * share it (GQA) walk positions 0..pos together in blocks of ATT_BLOCK with
 * an online softmax (running max and sum; the accumulator is rescaled once
 * per block), and the sigmoid output gate.
 *
 * Blocks sit at multiples of ATT_BLOCK in absolute positions, so a token's
 * result is the same whatever else is in the batch and however a prompt is
 * cut into calls. Work: phase 1 splits tokens over threads; phase 2 hands
 * out (token, KV head) pairs through an atomic counter. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/backend_cpu_int.h"

#define ATT_BLOCK 64

size_t ds_cpu_attention_scratch(const ds_be_limits *lim) {
    int group = lim->n_heads > 0 ? lim->n_heads : 1; /* worst case: every query head on one KV head */
    return (size_t)group * ((size_t)lim->head_dim + ATT_BLOCK + 4) + (size_t)lim->head_dim;
}

typedef struct {
    cpu_backend *cb;
    float *out, *q, *k;
    const float *v;
    int n;
    const ds_attn_row *rows;
    const ds_kv_view *kv;
    int nh, gated;
    const float *q_norm, *k_norm;
    float eps;
    int rope_dim;
    float rope_theta;
    _Alignas(64) atomic_int next;
} att_job;

/* cos/sin of every rotated pair at position pos, as ds_rope_neox computes them */
static void rope_table(float *c, float *s, int rope_dim, int pos, float theta) {
    for (int i = 0; i < rope_dim / 2; i++) {
        double angle = (double)pos * pow((double)theta, -2.0 * i / rope_dim);
        c[i] = (float)cos(angle);
        s[i] = (float)sin(angle);
    }
}

static void rope_apply(float *x, const float *c, const float *s, int rope_dim) {
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
    }
}

static float *kv_row(const ds_kv_view *kv, float *plane, const int32_t *pages, int pos) {
    return plane + (size_t)pages[pos / kv->page_size] * kv->page_stride +
           (size_t)(pos % kv->page_size) * (size_t)kv->n_kv_heads * (size_t)kv->head_dim;
}

static void prep_tokens(att_job *j, int64_t lo, int64_t hi, float *tab) {
    const ds_kv_view *kv = j->kv;
    int hd = kv->head_dim, nkv = kv->n_kv_heads, qstride = hd * (j->gated ? 2 : 1);
    int qw = j->nh * qstride, kvw = nkv * hd;
    float *c = tab, *s = tab + j->rope_dim / 2;
    for (int64_t i = lo; i < hi; i++) {
        const ds_attn_row *r = &j->rows[i];
        rope_table(c, s, j->rope_dim, r->pos, j->rope_theta);
        float *q = j->q + i * qw, *k = j->k + i * kvw;
        for (int h = 0; h < j->nh; h++) {
            float *qh = q + (size_t)h * qstride;
            ds_rmsnorm(qh, qh, j->q_norm, hd, j->eps);
            rope_apply(qh, c, s, j->rope_dim);
        }
        for (int h = 0; h < nkv; h++) {
            ds_rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, j->k_norm, hd, j->eps);
            rope_apply(k + (size_t)h * hd, c, s, j->rope_dim);
        }
        memcpy(kv_row(kv, kv->k, r->pages, r->pos), k, (size_t)kvw * sizeof(float));
        memcpy(kv_row(kv, kv->v, r->pages, r->pos), j->v + i * kvw, (size_t)kvw * sizeof(float));
    }
}

/* token i, KV head g: the query heads h = g*group ... share each K and V row */
static void attend(att_job *j, int i, int g, float *scratch) {
    const ds_kern *kern = j->cb->k;
    const ds_kv_view *kv = j->kv;
    int hd = kv->head_dim, nkv = kv->n_kv_heads, group = j->nh / nkv, qstride = hd * (j->gated ? 2 : 1);
    const ds_attn_row *r = &j->rows[i];
    float *acc = scratch, *sc = acc + (size_t)group * hd, *mx = sc + (size_t)group * ATT_BLOCK, *sum = mx + group;
    const float *q = j->q + (size_t)i * j->nh * qstride;
    float scale = 1.0f / sqrtf((float)hd);
    memset(acc, 0, (size_t)group * hd * sizeof(float));
    for (int h = 0; h < group; h++) {
        mx[h] = -INFINITY;
        sum[h] = 0.0f;
    }
    for (int p0 = 0; p0 <= r->pos; p0 += ATT_BLOCK) {
        int p1 = p0 + ATT_BLOCK - 1 < r->pos ? p0 + ATT_BLOCK : r->pos + 1, nb = p1 - p0;
        for (int p = p0; p < p1; p++) {
            const float *kp = kv_row(kv, kv->k, r->pages, p) + (size_t)g * hd;
            for (int h = 0; h < group; h++)
                sc[h * ATT_BLOCK + (p - p0)] = kern->dot(q + (size_t)(g * group + h) * qstride, kp, hd) * scale;
        }
        for (int h = 0; h < group; h++) {
            float *s = sc + h * ATT_BLOCK, bm = s[0];
            for (int p = 1; p < nb; p++) bm = s[p] > bm ? s[p] : bm;
            float m = bm > mx[h] ? bm : mx[h];
            if (mx[h] != -INFINITY && m != mx[h]) {
                float corr = expf(mx[h] - m);
                sum[h] *= corr;
                kern->scale(acc + (size_t)h * hd, corr, hd);
            }
            mx[h] = m;
            sum[h] += kern->exp_sum(s, m, nb);
        }
        for (int p = p0; p < p1; p++) {
            const float *vp = kv_row(kv, kv->v, r->pages, p) + (size_t)g * hd;
            for (int h = 0; h < group; h++) kern->axpy(acc + (size_t)h * hd, sc[h * ATT_BLOCK + (p - p0)], vp, hd);
        }
    }
    for (int h = 0; h < group; h++) {
        int hh = g * group + h;
        float *o = j->out + (size_t)i * j->nh * hd + (size_t)hh * hd, inv = 1.0f / sum[h];
        const float *a = acc + (size_t)h * hd;
        if (j->gated) {
            const float *gate = q + (size_t)hh * qstride + hd;
            for (int d = 0; d < hd; d++) o[d] = a[d] * inv * ds_sigmoid(gate[d]);
        } else {
            for (int d = 0; d < hd; d++) o[d] = a[d] * inv;
        }
    }
}

static void att_worker(void *ctx, int ith, int nth) {
    att_job *j = ctx;
    float *scratch = cpu_scratch(j->cb, ith);
    int64_t lo, hi;
    cpu_split(j->n, ith, nth, &lo, &hi);
    prep_tokens(j, lo, hi, scratch);
    ds_pool_barrier(j->cb->pool); /* every K and V of the batch is in its page */
    int nkv = j->kv->n_kv_heads, total = j->n * nkv;
    for (;;) {
        int c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total) break;
        attend(j, c / nkv, c % nkv, scratch);
    }
}

void ds_cpu_attention(ds_backend *be, float *out, float *q, float *k, const float *v, int n, const ds_attn_row *rows,
                      const ds_kv_view *kv, int nh, int gated, const float *q_norm, const float *k_norm, float eps,
                      int rope_dim, float rope_theta) {
    cpu_backend *cb = (cpu_backend *)be;
    att_job j = {.cb = cb, .out = out, .q = q, .k = k, .v = v, .n = n, .rows = rows, .kv = kv, .nh = nh, .gated = gated,
                 .q_norm = q_norm, .k_norm = k_norm, .eps = eps, .rope_dim = rope_dim, .rope_theta = rope_theta};
    atomic_init(&j.next, 0);
    ds_pool_run(cb->pool, att_worker, &j);
}
