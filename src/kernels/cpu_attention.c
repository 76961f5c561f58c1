/* cpu_attention.c - gated softmax attention over paged KV for the CPU backend
 * (docs/model.md §3.4): per-head q/k RMSNorm and partial NeoX RoPE (1-D, or
 * M-RoPE with a position per pair's axis), K and V written to their page
 * slots, then attention by blocks and the sigmoid output gate.
 *
 * Blocks: up to QB consecutive tokens of one sequence and the query heads
 * that share one KV head (GQA) form the rows of a query block; keys come in
 * blocks of KB positions that sit at multiples of KB in absolute positions.
 * Per key block: S = Q K^T (one matrix product), an online softmax per row
 * (running max and sum; the row's accumulator rescaled once per block), and
 * O += P V (another product). Every row's arithmetic is fixed by its own
 * token and position alone: positions past a row's token get P = 0, and the
 * products' extra zero terms leave sums unchanged, so a token's output is the
 * same alone, in any batch, and however a prompt is cut into calls.
 *
 * Work: phase 1 splits tokens over threads; phase 2 hands out (query block,
 * KV head) pairs through an atomic counter. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/backend_cpu_int.h"

#define QB 64 /* tokens per query block */
#define KB 64 /* positions per key block */

size_t ds_cpu_attention_scratch(const ds_be_limits *lim) {
    size_t group = (size_t)(lim->n_heads > 0 ? lim->n_heads : 1); /* worst case: one KV head */
    size_t hd = (size_t)lim->head_dim, rows = QB * group;
    /* Q rows, accumulators, K^T, V, scores, row max and sum, the rope table */
    return rows * hd * 2 + hd * KB * 2 + rows * KB + 2 * rows + hd + 64;
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
    const ds_rope_freqs_view *rope;
    int n_blocks;
    int32_t *block0; /* first token of each query block; [n_blocks] = n */
    _Alignas(64) atomic_int next;
} att_job;

/* cos/sin of every rotated pair at the row's position (M-RoPE: the position
 * of the pair's axis), as ds_rope_neox computes them for plain RoPE; YaRN
 * scales both by its attention factor (mscale 1 leaves the bits alone) */
static void rope_table(float *c, float *s, const ds_rope_freqs_view *rope, const ds_attn_row *r) {
    for (int i = 0; i < rope->dim / 2; i++) {
        int pos = r->rope_axis ? r->rope_pos[r->rope_axis[i]] : r->pos;
        double angle = (double)pos * rope->inv_freq[i];
        c[i] = (float)(cos(angle) * rope->mscale);
        s[i] = (float)(sin(angle) * rope->mscale);
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
    int rope_dim = j->rope->dim;
    float *c = tab, *s = tab + rope_dim / 2;
    for (int64_t i = lo; i < hi; i++) {
        const ds_attn_row *r = &j->rows[i];
        rope_table(c, s, j->rope, r);
        float *q = j->q + i * qw, *k = j->k + i * kvw;
        for (int h = 0; h < j->nh; h++) {
            float *qh = q + (size_t)h * qstride;
            ds_rmsnorm(qh, qh, j->q_norm, hd, j->eps);
            rope_apply(qh, c, s, rope_dim);
        }
        for (int h = 0; h < nkv; h++) {
            ds_rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, j->k_norm, hd, j->eps);
            rope_apply(k + (size_t)h * hd, c, s, rope_dim);
        }
        memcpy(kv_row(kv, kv->k, r->pages, r->pos), k, (size_t)kvw * sizeof(float));
        memcpy(kv_row(kv, kv->v, r->pages, r->pos), j->v + i * kvw, (size_t)kvw * sizeof(float));
    }
}

/* Query block b (tokens t0..t1 of one sequence) against KV head g. Row
 * r = (token - t0) * group + h; positions of a row's token: pos0 + (token - t0). */
static void attend(att_job *j, int b, int g, float *scratch) {
    const ds_kern *kern = j->cb->k;
    const ds_kv_view *kv = j->kv;
    int hd = kv->head_dim, nkv = kv->n_kv_heads, group = j->nh / nkv, qstride = hd * (j->gated ? 2 : 1);
    int t0 = j->block0[b], nt = j->block0[b + 1] - t0, rows = nt * group;
    const int32_t *pages = j->rows[t0].pages;
    int pos0 = j->rows[t0].pos, last = pos0 + nt - 1;
    int vw = kern->vw, np_max = (KB + vw - 1) / vw * vw;
    float *Q = scratch, *O = Q + (size_t)QB * group * hd, *KT = O + (size_t)QB * group * hd, *V = KT + (size_t)hd * np_max;
    float *S = V + (size_t)KB * hd, *mx = S + (size_t)QB * group * np_max, *sum = mx + QB * group;
    float scale = 1.0f / sqrtf((float)hd);
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < group; h++)
            memcpy(Q + (size_t)(t * group + h) * hd, j->q + (size_t)(t0 + t) * j->nh * qstride + (size_t)(g * group + h) * qstride,
                   (size_t)hd * sizeof(float));
    memset(O, 0, (size_t)rows * hd * sizeof(float));
    for (int r = 0; r < rows; r++) {
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
    }
    for (int p0 = 0; p0 <= last; p0 += KB) {
        int nk = last - p0 + 1 < KB ? last - p0 + 1 : KB, np = (nk + vw - 1) / vw * vw;
        /* K^T (zero-padded to np columns) and V of this key block */
        for (int p = 0; p < nk; p++) {
            const float *kp = kv_row(kv, kv->k, pages, p0 + p) + (size_t)g * hd;
            for (int d = 0; d < hd; d++) KT[(size_t)d * np + p] = kp[d];
            memcpy(V + (size_t)p * hd, kv_row(kv, kv->v, pages, p0 + p) + (size_t)g * hd, (size_t)hd * sizeof(float));
        }
        for (int d = 0; d < hd; d++)
            for (int p = nk; p < np; p++) KT[(size_t)d * np + p] = 0.0f;
        memset(S, 0, (size_t)rows * np * sizeof(float));
        kern->gemm_acc(S, np, Q, hd, KT, np, rows, hd, np, 1.0f);
        for (int r = 0; r < rows; r++) {
            float *s = S + (size_t)r * np;
            int valid = pos0 + r / group - p0 + 1; /* positions this row may see */
            if (valid > nk) valid = nk;
            if (valid <= 0) {
                memset(s, 0, (size_t)np * sizeof(float));
                continue;
            }
            float bm = -INFINITY;
            for (int p = 0; p < valid; p++) {
                s[p] *= scale;
                bm = s[p] > bm ? s[p] : bm;
            }
            cpu_softmax_block_row(kern, s, valid, np, bm, &mx[r], &sum[r], O + (size_t)r * hd, hd);
        }
        kern->gemm_acc(O, hd, S, np, V, hd, rows, nk, hd, 1.0f);
    }
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < group; h++) {
            int r = t * group + h, hh = g * group + h;
            float *o = j->out + (size_t)(t0 + t) * j->nh * hd + (size_t)hh * hd, inv = 1.0f / sum[r];
            const float *a = O + (size_t)r * hd;
            if (j->gated) {
                const float *gate = j->q + (size_t)(t0 + t) * j->nh * qstride + (size_t)hh * qstride + hd;
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
    int nkv = j->kv->n_kv_heads, total = j->n_blocks * nkv;
    for (;;) {
        int c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total) break;
        attend(j, c / nkv, c % nkv, scratch);
    }
}

void ds_cpu_attention(ds_backend *be, float *out, float *q, float *k, const float *v, int n, const ds_attn_row *rows,
                      const ds_kv_view *kv, int nh, int gated, const float *q_norm, const float *k_norm, float eps,
                      const ds_rope_freqs_view *rope) {
    cpu_backend *cb = (cpu_backend *)be;
    att_job j = {.cb = cb, .out = out, .q = q, .k = k, .v = v, .n = n, .rows = rows, .kv = kv, .nh = nh, .gated = gated,
                 .q_norm = q_norm, .k_norm = k_norm, .eps = eps, .rope = rope,
                 .block0 = cb->att_blocks};
    /* query blocks: runs of one sequence (same page table, consecutive positions), at most QB tokens */
    int nb = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || rows[i].pages != rows[i - 1].pages || rows[i].pos != rows[i - 1].pos + 1 ||
            i - cb->att_blocks[nb - 1] == QB)
            cb->att_blocks[nb++] = i;
    cb->att_blocks[nb] = n;
    j.n_blocks = nb;
    atomic_init(&j.next, 0);
    ds_pool_run(cb->pool, att_worker, &j);
}
