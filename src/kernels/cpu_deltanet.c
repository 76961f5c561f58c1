/* cpu_deltanet.c - the Gated DeltaNet mixer for the CPU backend (docs/model.md §3.5):
 * causal depthwise conv over a K-1 window carried in the state slot, SiLU,
 * l2-normalised q and k, gates beta = sigmoid(b) and g = a_log_neg *
 * softplus(a + dt_bias), the delta rule on a [Hv][Dk][Dv] F32 state (token by
 * token, or chunked for prefill), and an RMSNorm per head gated by SiLU(z).
 *
 * Phases, each split over threads, with a barrier between them:
 *   1. conv + SiLU: channel ranges (each channel is a recurrence over its
 *      sequence's tokens, so channels are independent); VERIFY writes the
 *      conv window after each token into that token's record;
 *   2. q/k normalisation and gates: token ranges; VERIFY records each
 *      token's q, k, v, beta and g;
 *   3. the recurrence: (sequence, value head) pairs from an atomic counter;
 *      chunks sit on multiples of the chunk length in absolute positions, so
 *      cutting a prefill at such multiples changes nothing;
 *   4. the gated output norm: token ranges. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/backend_cpu_int.h"

/* Scratch per thread: the chunk kernel's (reference or SIMD, whichever is
 * larger), the conv weights transposed for a channel range, one row. */
size_t ds_cpu_deltanet_scratch(const ds_kern *k, const ds_be_limits *lim) {
    if (!lim->gdn_k_dim) return 0;
    size_t a = ds_kern_ref.gdn_chunk_floats(lim->gdn_k_dim, lim->gdn_v_dim);
    size_t b = k->gdn_chunk_floats(lim->gdn_k_dim, lim->gdn_v_dim);
    size_t head = (size_t)lim->gdn_k_dim * lim->gdn_v_dim; /* a VERIFY head's copy of the state */
    if (head > a && head > b) a = head;
    return (a > b ? a : b) + 8 * (size_t)lim->gdn_conv_dim + 2 * (size_t)lim->gdn_v_dim + 64;
}

typedef struct {
    cpu_backend *cb;
    const ds_gdn_layer *L;
    const ds_gdn_seq *seqs;
    int n_seqs, n;
    float *mixed, *ab, *o;
    const float *z, *norm_w;
    float eps;
    int chunk;
    _Alignas(64) atomic_int next;
} gdn_job;

static int k_head_of(const ds_gdn_layer *L, int h) { return L->v_tiled ? h % L->Hk : h / (L->Hv / L->Hk); }

/* conv + SiLU of channels [c0, c1) of one sequence, token by token (rows
 * are contiguous): acc = w[K-1] x_t + sum_q w[q] win[q]; the window keeps
 * raw (pre-conv) inputs, oldest first. VERIFY leaves the slot's window as it
 * was and writes the window after each token to that token's record instead
 * (the next token reads it from there). wT: the weights of the range
 * transposed, [K][c1-c0]. */
static void conv_channels(gdn_job *j, const ds_gdn_seq *s, int c0, int c1, float *wT) {
    const ds_gdn_layer *L = j->L;
    const ds_kern *kern = j->cb->k;
    int C = L->conv_dim, K = L->conv_kernel, nc = c1 - c0;
    for (int q = 0; q < K; q++)
        for (int c = 0; c < nc; c++) wT[(size_t)q * nc + c] = L->conv_w[(size_t)(c0 + c) * K + q];
    float *acc = wT + (size_t)K * nc;
    const float *win = s->conv_state;
    for (int i = s->i0; i < s->i1; i++) {
        float *x = j->mixed + (size_t)i * C + c0;
        float *next = s->snap ? s->snap[i - s->i0] : s->conv_state; /* the window after this token */
        kern->mul_add(acc, wT + (size_t)(K - 1) * nc, x, nc, 1);
        for (int q = 0; q < K - 1; q++) kern->mul_add(acc, wT + (size_t)q * nc, win + (size_t)q * C + c0, nc, 0);
        for (int q = 0; q + 1 < K - 1; q++)
            memmove(next + (size_t)q * C + c0, win + (size_t)(q + 1) * C + c0, (size_t)nc * sizeof(float));
        if (K > 1) memcpy(next + (size_t)(K - 2) * C + c0, x, (size_t)nc * sizeof(float));
        kern->silu_mul(acc, NULL, nc);
        memcpy(x, acc, (size_t)nc * sizeof(float));
        win = next;
    }
}

static void norms_and_gates(gdn_job *j, int i) {
    const ds_gdn_layer *L = j->L;
    int C = L->conv_dim, Dk = L->Dk, Hv = L->Hv, key_dim = L->Hk * Dk;
    float qscale = 1.0f / sqrtf((float)Dk);
    float *x = j->mixed + (size_t)i * C;
    for (int h = 0; h < L->Hk; h++) {
        float *q = x + (size_t)h * Dk, *k = x + key_dim + (size_t)h * Dk;
        ds_l2norm(q, Dk, 1e-6f);
        ds_l2norm(k, Dk, 1e-6f);
        for (int d = 0; d < Dk; d++) q[d] *= qscale;
    }
    float *ab = j->ab + (size_t)i * 2 * Hv;
    for (int h = 0; h < Hv; h++) {
        float beta = ds_sigmoid(ab[h]);
        float g = L->ssm_a[h] * ds_softplus(ab[Hv + h] + L->dt_bias[h]);
        ab[h] = beta;
        ab[Hv + h] = g;
    }
}

/* A VERIFY token's record, after its conv window: its q, k, v row as the
 * recurrence reads it, then beta and g of every value head. */
static void record_token(gdn_job *j, const ds_gdn_seq *s, int i) {
    const ds_gdn_layer *L = j->L;
    int C = L->conv_dim, Hv = L->Hv;
    float *rec = s->snap[i - s->i0] + (size_t)(L->conv_kernel - 1) * C;
    memcpy(rec, j->mixed + (size_t)i * C, (size_t)C * sizeof(float));
    memcpy(rec + C, j->ab + (size_t)i * 2 * Hv, 2 * (size_t)Hv * sizeof(float));
}

static void recur_head(gdn_job *j, const ds_gdn_seq *s, int h, float *scratch) {
    const ds_gdn_layer *L = j->L;
    int Hv = L->Hv, Dk = L->Dk, Dv = L->Dv, C = L->conv_dim, key_dim = L->Hk * Dk, value_dim = Hv * Dv;
    size_t abs = 2 * (size_t)Hv;
    int kh = k_head_of(L, h), i0 = s->i0, n = s->i1 - s->i0;
    const ds_kern *kern = j->cb->k;
    if (Dk % kern->vw || Dv % kern->vw) kern = &ds_kern_ref;
    float *S = s->state + (size_t)h * Dk * Dv;
    const float *q = j->mixed + (size_t)i0 * C + (size_t)kh * Dk;
    const float *k = j->mixed + (size_t)i0 * C + key_dim + (size_t)kh * Dk;
    const float *v = j->mixed + (size_t)i0 * C + 2 * (size_t)key_dim + (size_t)h * Dv;
    const float *beta = j->ab + (size_t)i0 * abs + h, *g = j->ab + (size_t)i0 * abs + Hv + h;
    float *o = j->o + (size_t)i0 * value_dim + (size_t)h * Dv;
    if (s->chunked && !s->snap && j->chunk > 1) {
        int cl = j->chunk;
        for (int r0 = 0, m; r0 < n; r0 += m) {
            m = cl - (s->pos0 + r0) % cl;
            if (m > n - r0) m = n - r0;
            kern->gdn_chunk(S, q + (size_t)r0 * C, k + (size_t)r0 * C, v + (size_t)r0 * C, (size_t)C, beta + r0 * abs,
                            g + r0 * abs, abs, m, Dk, Dv, scratch, o + (size_t)r0 * value_dim, (size_t)value_dim);
        }
        return;
    }
    if (s->snap) { /* VERIFY: the slot keeps the state before the call; this head runs on a copy */
        memcpy(scratch, S, (size_t)Dk * Dv * sizeof(float));
        S = scratch;
    }
    for (int r = 0; r < n; r++)
        kern->gdn_step(S, q + (size_t)r * C, k + (size_t)r * C, v + (size_t)r * C, beta[r * abs], g[r * abs], Dk, Dv,
                       o + (size_t)r * value_dim);
}

static void gated_norm(gdn_job *j, int i, float *tmp) {
    const ds_gdn_layer *L = j->L;
    int Dv = L->Dv, value_dim = L->Hv * Dv;
    for (int h = 0; h < L->Hv; h++) {
        float *o = j->o + (size_t)i * value_dim + (size_t)h * Dv;
        ds_rmsnorm(o, o, j->norm_w, Dv, j->eps);
        memcpy(tmp, j->z + (size_t)i * value_dim + (size_t)h * Dv, (size_t)Dv * sizeof(float));
        j->cb->k->silu_mul(tmp, o, Dv); /* silu(z) * o */
        memcpy(o, tmp, (size_t)Dv * sizeof(float));
    }
}

static void gdn_worker(void *ctx, int ith, int nth) {
    gdn_job *j = ctx;
    const ds_gdn_layer *L = j->L;
    float *scratch = cpu_scratch(j->cb, ith);
    int64_t lo, hi;
    /* 1. conv: channel ranges of every sequence, in whole blocks of 64 so that
     * no channel's arithmetic depends on the thread count */
    int blocks = (L->conv_dim + 63) / 64;
    cpu_split(blocks, ith, nth, &lo, &hi);
    int c0 = (int)lo * 64, c1 = (int)hi * 64 < L->conv_dim ? (int)hi * 64 : L->conv_dim;
    if (c1 > c0)
        for (int q = 0; q < j->n_seqs; q++) conv_channels(j, &j->seqs[q], c0, c1, scratch);
    ds_pool_barrier(j->cb->pool);
    /* 2. norms and gates: token ranges */
    cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) norms_and_gates(j, (int)i);
    for (int q = 0; q < j->n_seqs; q++) /* VERIFY: each token's inputs to the recurrence, for a commit */
        if (j->seqs[q].snap)
            for (int64_t i = lo > j->seqs[q].i0 ? lo : j->seqs[q].i0; i < hi && i < j->seqs[q].i1; i++)
                record_token(j, &j->seqs[q], (int)i);
    ds_pool_barrier(j->cb->pool);
    /* 3. recurrence: (sequence, head) pairs */
    int total = j->n_seqs * L->Hv;
    for (;;) {
        int c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total) break;
        recur_head(j, &j->seqs[c / L->Hv], c % L->Hv, scratch);
    }
    ds_pool_barrier(j->cb->pool);
    /* 4. output norm gated by SiLU(z): token ranges */
    cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) gated_norm(j, (int)i, scratch);
}
void ds_cpu_deltanet(ds_backend *be, const ds_gdn_layer *L, const ds_gdn_seq *seqs, int n_seqs, float *mixed, float *ab,
                     const float *z, float *o, const float *norm_w, float eps, int chunk) {
    cpu_backend *cb = (cpu_backend *)be;
    int n = 0;
    for (int q = 0; q < n_seqs; q++) n = seqs[q].i1 > n ? seqs[q].i1 : n;
    gdn_job j = {.cb = cb, .L = L, .seqs = seqs, .n_seqs = n_seqs, .n = n, .mixed = mixed, .ab = ab, .o = o, .z = z,
                 .norm_w = norm_w, .eps = eps, .chunk = chunk};
    atomic_init(&j.next, 0);
    ds_pool_run(cb->pool, gdn_worker, &j);
}

/* Commit of the first n verified tokens: the slot's recurrent state takes
 * the same steps, on the same inputs (read back from the records), as the
 * verify took on its copies, so it ends bitwise where a decode of those
 * tokens would have left it; the conv window is the n-th token's. */
typedef struct {
    cpu_backend *cb;
    const ds_gdn_layer *L;
    float *conv_state, *state;
    float *const *rec;
    int n;
    _Alignas(64) atomic_int next;
} commit_job;

static void commit_worker(void *ctx, int ith, int nth) {
    commit_job *j = ctx;
    const ds_gdn_layer *L = j->L;
    int Hv = L->Hv, Dk = L->Dk, Dv = L->Dv, C = L->conv_dim, key_dim = L->Hk * Dk;
    size_t conv_floats = (size_t)(L->conv_kernel - 1) * C;
    const ds_kern *kern = j->cb->k;
    if (Dk % kern->vw || Dv % kern->vw) kern = &ds_kern_ref;
    if (ith == 0) memcpy(j->conv_state, j->rec[j->n - 1], conv_floats * sizeof(float));
    (void)nth;
    for (;;) {
        int h = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (h >= Hv) break;
        int kh = k_head_of(L, h);
        float *S = j->state + (size_t)h * Dk * Dv;
        for (int r = 0; r < j->n; r++) {
            const float *x = j->rec[r] + conv_floats;
            kern->gdn_step(S, x + (size_t)kh * Dk, x + key_dim + (size_t)kh * Dk, x + 2 * (size_t)key_dim + (size_t)h * Dv,
                           x[C + h], x[C + Hv + h], Dk, Dv, NULL);
        }
    }
}

void ds_cpu_deltanet_commit(ds_backend *be, const ds_gdn_layer *L, float *conv_state, float *state, float *const *rec,
                            int n) {
    cpu_backend *cb = (cpu_backend *)be;
    if (n <= 0) return;
    commit_job j = {.cb = cb, .L = L, .conv_state = conv_state, .state = state, .rec = rec, .n = n};
    atomic_init(&j.next, 0);
    ds_pool_run(cb->pool, commit_worker, &j);
}
