/* cpu_vit.c - the vision tower's attention for the CPU backend: every patch
 * of one image attends to every other (no mask), after a rotate-half rotary
 * embedding given per patch (the tower's 2D positions: vision.c builds it).
 *
 * Tiles: phase 1 (patches split over threads) turns q and k in place and lays
 * K out transposed by head, KT[h][hd][np], and V by head with rows padded to
 * a whole number of vectors, V[h][n][hdp]. Phase 2 hands out (query tile,
 * head) pairs through an atomic counter: per key tile of KB patches,
 * S = scale Q K^T (one product), an online softmax per row (running max and
 * sum; the row's accumulator rescaled when the max moves), and O += P V
 * (another product). A thread holds QB x KB scores at a time, never an n x n
 * matrix, so memory grows with n alone. Every row's arithmetic is fixed by
 * the image (its tiles sit at fixed multiples), never by the thread count. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/backend_cpu_int.h"
#include "kernels/ops.h"

#define QB 96  /* query patches per tile (a multiple of the products' 6-row tiles) */
#define KB 256 /* key patches per tile */

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* per thread: scores, accumulators, row max and sum */
static size_t thread_floats(int hd) { return (size_t)QB * KB + (size_t)QB * (size_t)round_up(hd, 16) + 2 * QB + 16; }

size_t ds_cpu_vit_attention_floats(ds_backend *be, int n, int nh, int hd) {
    cpu_backend *cb = (cpu_backend *)be;
    size_t np = (size_t)round_up(n, 16), hdp = (size_t)round_up(hd, 16);
    return (size_t)nh * (size_t)hd * np + (size_t)nh * (size_t)n * hdp + (size_t)cb->nth * thread_floats(hd) + 64;
}

typedef struct {
    cpu_backend *cb;
    float *out, *qkv;
    const float *rot;
    int n, nh, hd, np, hdp;
    float *kt, *v, *tiles;
    int n_qt;
    _Alignas(64) atomic_int next;
} vit_job;

static void prep(vit_job *j, int64_t lo, int64_t hi) {
    int nh = j->nh, hd = j->hd, D = nh * hd;
    for (int64_t i = lo; i < hi; i++) {
        float *q = j->qkv + i * 3 * D, *k = q + D, *v = k + D;
        const float *cs = j->rot + i * hd;
        for (int h = 0; h < nh; h++) {
            ds_rope_half(q + h * hd, cs, hd);
            ds_rope_half(k + h * hd, cs, hd);
            float *kt = j->kt + (size_t)h * hd * j->np + i, *vr = j->v + ((size_t)h * j->n + i) * j->hdp;
            for (int d = 0; d < hd; d++) kt[(size_t)d * j->np] = k[h * hd + d];
            memcpy(vr, v + h * hd, (size_t)hd * sizeof(float));
            for (int d = hd; d < j->hdp; d++) vr[d] = 0.0f;
        }
    }
}

static void attend(vit_job *j, int qt, int h, float *scratch) {
    const ds_kern *kern = j->cb->k;
    int hd = j->hd, hdp = j->hdp, D = j->nh * hd, vw = kern->vw;
    int q0 = qt * QB, rows = j->n - q0 < QB ? j->n - q0 : QB;
    float *S = scratch, *O = S + QB * KB, *mx = O + QB * hdp, *sum = mx + QB;
    const float *Q = j->qkv + (size_t)q0 * 3 * D + (size_t)h * hd;
    const float *KT = j->kt + (size_t)h * hd * j->np, *V = j->v + (size_t)h * j->n * hdp;
    float scale = 1.0f / sqrtf((float)hd);
    memset(O, 0, (size_t)rows * hdp * sizeof(float));
    for (int r = 0; r < rows; r++) {
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
    }
    for (int p0 = 0; p0 < j->n; p0 += KB) {
        int nk = j->n - p0 < KB ? j->n - p0 : KB, nkp = round_up(nk, vw);
        memset(S, 0, (size_t)rows * nkp * sizeof(float));
        kern->gemm_acc(S, nkp, Q, 3 * D, KT + p0, j->np, rows, hd, nkp, scale);
        for (int r = 0; r < rows; r++) {
            float *s = S + (size_t)r * nkp;
            cpu_softmax_block_row(kern, s, nk, nkp, kern->max(s, nk), &mx[r], &sum[r], O + (size_t)r * hdp, hdp);
        }
        kern->gemm_acc(O, hdp, S, nkp, V + (size_t)p0 * hdp, hdp, rows, nk, hdp, 1.0f);
    }
    for (int r = 0; r < rows; r++) {
        float *o = j->out + (size_t)(q0 + r) * D + (size_t)h * hd, inv = 1.0f / sum[r];
        const float *a = O + (size_t)r * hdp;
        for (int d = 0; d < hd; d++) o[d] = a[d] * inv;
    }
}

static void vit_worker(void *ctx, int ith, int nth) {
    vit_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->n, ith, nth, &lo, &hi);
    prep(j, lo, hi);
    if (ith == 0) /* K^T's padding columns */
        for (int h = 0; h < j->nh; h++)
            for (int d = 0; d < j->hd; d++)
                for (int p = j->n; p < j->np; p++) j->kt[((size_t)h * j->hd + d) * j->np + p] = 0.0f;
    ds_pool_barrier(j->cb->pool);
    float *scratch = j->tiles + (size_t)ith * thread_floats(j->hd);
    int total = j->n_qt * j->nh;
    for (;;) {
        int c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total) break;
        attend(j, c / j->nh, c % j->nh, scratch);
    }
}

void ds_cpu_vit_attention(ds_backend *be, float *out, float *qkv, const float *rot, int n, int nh, int hd,
                          float *scratch) {
    cpu_backend *cb = (cpu_backend *)be;
    if (n <= 0) return;
    vit_job j = {.cb = cb, .out = out, .qkv = qkv, .rot = rot, .n = n, .nh = nh, .hd = hd, .np = round_up(n, 16),
                 .hdp = round_up(hd, 16), .n_qt = (n + QB - 1) / QB};
    j.kt = scratch;
    j.v = j.kt + (size_t)nh * hd * j.np;
    j.tiles = j.v + (size_t)nh * n * j.hdp;
    j.tiles += (16 - ((uintptr_t)j.tiles / sizeof(float)) % 16) % 16; /* 64-byte aligned tiles */
    atomic_init(&j.next, 0);
    ds_pool_run(cb->pool, vit_worker, &j);
}
