/* deltanet.c - the Gated DeltaNet mixer (spec 3.5): causal depthwise conv
 * with a K-1 window carried in the state slot, l2-normalised q and k, the
 * gated delta rule on a [Hv][Dk][Dv] F32 state, and a per-head RMSNorm gated
 * by SiLU(z).
 *
 * The recurrence runs token by token (decode, verify, and prefill when the
 * chunk length is 1) or in chunks of up to 64 tokens (prefill): the chunked
 * form computes the same state and outputs with matrix products inside a
 * chunk (spec 3.5, "Chunked (prefill) form"). */
#include <math.h>
#include <string.h>

#include "model/model_int.h"

/* v head h reads k head h % Hk in GGUF files (tiled) and h / (Hv/Hk) in HF ones (grouped) */
static int k_head_of(const ds_model_config *c, int h) {
    return c->v_heads_tiled ? h % c->lin_k_heads : h / (c->lin_v_heads / c->lin_k_heads);
}

/* Conv, q/k normalisation and gates for the tokens [i0, i1) of one sequence:
 * mixed rows become the post-conv SiLU outputs, ab rows become (beta, g). */
static void conv_and_gates(ds_model *m, const ds_layer *L, float *win, int i0, int i1) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int C = m->conv_dim, K = c->conv_kernel, Hv = c->lin_v_heads, Dk = c->lin_k_dim;
    float *acc = w->row;
    float qscale = 1.0f / sqrtf((float)Dk);
    for (int i = i0; i < i1; i++) {
        float *x = w->mixed + (size_t)i * C;
        for (int ch = 0; ch < C; ch++) {
            const float *wt = L->conv + (size_t)ch * K; /* tap j multiplies x_{t-(K-1)+j} */
            float s = wt[K - 1] * x[ch];
            for (int j = 0; j < K - 1; j++) s += wt[j] * win[(size_t)j * C + ch];
            acc[ch] = s;
        }
        /* the window keeps raw (pre-conv) inputs, oldest first */
        if (K > 1) {
            memmove(win, win + C, (size_t)(K - 2) * C * sizeof(float));
            memcpy(win + (size_t)(K - 2) * C, x, (size_t)C * sizeof(float));
        }
        for (int ch = 0; ch < C; ch++) x[ch] = ds_silu(acc[ch]);
        for (int h = 0; h < c->lin_k_heads; h++) {
            float *q = x + (size_t)h * Dk, *k = x + m->key_dim + (size_t)h * Dk;
            ds_l2norm(q, Dk, 1e-6f);
            ds_l2norm(k, Dk, 1e-6f);
            for (int d = 0; d < Dk; d++) q[d] *= qscale;
        }
        float *ab = w->ab + (size_t)i * 2 * Hv;
        for (int h = 0; h < Hv; h++) {
            float beta = ds_sigmoid(ab[h]);
            float g = L->ssm_a[h] * ds_softplus(ab[Hv + h] + L->dt_bias[h]);
            ab[h] = beta;
            ab[Hv + h] = g;
        }
    }
}

/* One token of the delta rule on head h: S = e^g S; S += k (beta (v - S^T k))^T; o = S^T q. */
static void delta_step(float *S, const float *q, const float *k, const float *v, float beta, float g, int Dk, int Dv,
                       float *o) {
    float decay = expf(g);
    for (int64_t i = 0; i < (int64_t)Dk * Dv; i++) S[i] *= decay;
    for (int j = 0; j < Dv; j++) {
        double mj = 0.0;
        for (int i = 0; i < Dk; i++) mj += (double)S[(size_t)i * Dv + j] * k[i];
        float delta = beta * (v[j] - (float)mj);
        for (int i = 0; i < Dk; i++) S[(size_t)i * Dv + j] += k[i] * delta;
    }
    for (int j = 0; j < Dv; j++) {
        double oj = 0.0;
        for (int i = 0; i < Dk; i++) oj += (double)S[(size_t)i * Dv + j] * q[i];
        o[j] = (float)oj;
    }
}

/* Chunked delta rule on head h over n <= 64 tokens (rows of q, k, v are `stride` floats apart):
 *   G_r = sum_{s<=r} g_s,  A[r][s] = beta_r (k_r . k_s) e^{G_r - G_s} (s < r)
 *   U = (I + A)^-1 (beta v),  W = (I + A)^-1 (beta e^G k),  V' = U - W S
 *   O_r = e^{G_r} q_r S + sum_{s<=r} (q_r . k_s) e^{G_r - G_s} V'_s
 *   S  <- e^{G_last} S + sum_r e^{G_last - G_r} k_r V'_r^T                                     */
static void delta_chunk(float *S, const float *q, const float *k, const float *v, size_t stride, const float *beta,
                        const float *g, size_t gstride, int n, int Dk, int Dv, double *scratch, float *o, size_t ostride) {
    /* in double: the substitution and the chunk sums would otherwise round differently from the
     * token-by-token form by more than the 1e-5 the two must agree to */
    double *G = scratch, *A = G + 64, *U = A + 64 * 64, *W = U + (size_t)64 * Dv, *Vp = W + (size_t)64 * Dk;
    double acc = 0.0;
    for (int r = 0; r < n; r++) G[r] = acc += g[(size_t)r * gstride];
    for (int r = 0; r < n; r++)
        for (int s = 0; s < r; s++) {
            double kk = 0.0;
            for (int i = 0; i < Dk; i++) kk += (double)k[r * stride + i] * k[s * stride + i];
            A[r * 64 + s] = beta[(size_t)r * gstride] * kk * exp(G[r] - G[s]);
        }
    for (int r = 0; r < n; r++) { /* forward substitution: row r of (I + A) X = B */
        double br = beta[(size_t)r * gstride], eg = exp(G[r]);
        double *u = U + (size_t)r * Dv, *wr = W + (size_t)r * Dk;
        for (int j = 0; j < Dv; j++) u[j] = br * v[r * stride + j];
        for (int i = 0; i < Dk; i++) wr[i] = br * eg * k[r * stride + i];
        for (int s = 0; s < r; s++) {
            double a = A[r * 64 + s];
            for (int j = 0; j < Dv; j++) u[j] -= a * U[(size_t)s * Dv + j];
            for (int i = 0; i < Dk; i++) wr[i] -= a * W[(size_t)s * Dk + i];
        }
        double *vp = Vp + (size_t)r * Dv;
        for (int j = 0; j < Dv; j++) {
            double ws = 0.0;
            for (int i = 0; i < Dk; i++) ws += wr[i] * S[(size_t)i * Dv + j];
            vp[j] = u[j] - ws;
        }
    }
    for (int r = 0; r < n; r++) {
        const float *qr = q + r * stride;
        float *out = o + r * ostride;
        double eg = exp(G[r]);
        for (int j = 0; j < Dv; j++) {
            double s0 = 0.0;
            for (int i = 0; i < Dk; i++) s0 += (double)qr[i] * S[(size_t)i * Dv + j];
            double oj = eg * s0;
            for (int s = 0; s <= r; s++) {
                double qk = 0.0;
                for (int i = 0; i < Dk; i++) qk += (double)qr[i] * k[s * stride + i];
                oj += qk * exp(G[r] - G[s]) * Vp[(size_t)s * Dv + j];
            }
            out[j] = (float)oj;
        }
    }
    double glast = G[n - 1], decay = exp(glast);
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++) {
            double sij = decay * S[(size_t)i * Dv + j];
            for (int r = 0; r < n; r++) sij += exp(glast - G[r]) * k[r * stride + i] * Vp[(size_t)r * Dv + j];
            S[(size_t)i * Dv + j] = (float)sij;
        }
}

static void run_sequence(ds_model *m, const ds_layer *L, ds_state_pool *st, const ds_batch *b, int i0, int i1) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    const ds_batch_seq *s = &b->seqs[b->tokens[i0].seq];
    int Hv = c->lin_v_heads, Dk = c->lin_k_dim, Dv = c->lin_v_dim, C = m->conv_dim, li = L->cache_index;
    size_t abs = 2 * (size_t)Hv;
    conv_and_gates(m, L, ds_state_conv(st, s->state_slot, li), i0, i1);
    float *state = ds_state_rec(st, s->state_slot, li);
    int chunked = s->mode == DS_SEQ_PREFILL && m->params.gdn_chunk > 1 && i1 - i0 > 1;
    for (int h = 0; h < Hv; h++) {
        int kh = k_head_of(c, h);
        float *S = state + (size_t)h * Dk * Dv;
        const float *q = w->mixed + (size_t)i0 * C + (size_t)kh * Dk;
        const float *k = w->mixed + (size_t)i0 * C + m->key_dim + (size_t)kh * Dk;
        const float *v = w->mixed + (size_t)i0 * C + 2 * (size_t)m->key_dim + (size_t)h * Dv;
        const float *beta = w->ab + (size_t)i0 * abs + h, *g = w->ab + (size_t)i0 * abs + Hv + h;
        float *o = w->o + (size_t)i0 * m->value_dim + (size_t)h * Dv;
        if (chunked) {
            /* chunks sit on multiples of the chunk length in absolute positions, so that a prefill cut
             * into calls at such multiples computes exactly what one call would: where a scheduler cuts
             * a prompt must not change its outputs */
            int pos0 = b->tokens[i0].pos, cl = m->params.gdn_chunk;
            for (int r0 = 0, n; r0 < i1 - i0; r0 += n) {
                n = cl - (pos0 + r0) % cl;
                if (n > i1 - i0 - r0) n = i1 - i0 - r0;
                delta_chunk(S, q + (size_t)r0 * C, k + (size_t)r0 * C, v + (size_t)r0 * C, (size_t)C, beta + r0 * abs,
                            g + r0 * abs, abs, n, Dk, Dv, (double *)w->chunk, o + (size_t)r0 * m->value_dim, (size_t)m->value_dim);
            }
        } else {
            for (int r = 0; r < i1 - i0; r++)
                delta_step(S, q + (size_t)r * C, k + (size_t)r * C, v + (size_t)r * C, beta[r * abs], g[r * abs], Dk,
                           Dv, o + (size_t)r * m->value_dim);
        }
    }
}

/* VERIFY: token by token over all heads, copying this layer's conv window and
 * state into the token's verify slot right after it is computed, so that any
 * accepted prefix can be resumed from without recomputing. */
static void run_verify(ds_model *m, const ds_layer *L, ds_state_pool *st, const ds_batch *b, int i0, int i1) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    const ds_batch_seq *s = &b->seqs[b->tokens[i0].seq];
    int Hv = c->lin_v_heads, Dk = c->lin_k_dim, Dv = c->lin_v_dim, C = m->conv_dim, li = L->cache_index;
    size_t abs = 2 * (size_t)Hv;
    float *win = ds_state_conv(st, s->state_slot, li);
    float *state = ds_state_rec(st, s->state_slot, li);
    for (int i = i0; i < i1; i++) {
        conv_and_gates(m, L, win, i, i + 1);
        for (int h = 0; h < Hv; h++) {
            int kh = k_head_of(c, h);
            const float *x = w->mixed + (size_t)i * C;
            delta_step(state + (size_t)h * Dk * Dv, x + (size_t)kh * Dk, x + m->key_dim + (size_t)kh * Dk,
                       x + 2 * (size_t)m->key_dim + (size_t)h * Dv, w->ab[i * abs + h], w->ab[i * abs + Hv + h], Dk,
                       Dv, w->o + (size_t)i * m->value_dim + (size_t)h * Dv);
        }
        int dst = s->verify_slots[i - i0];
        memcpy(ds_state_conv(st, dst, li), win, st->layer_floats * sizeof(float));
    }
}

void ds_deltanet(ds_model *m, const ds_layer *L, ds_state_pool *st, const ds_batch *b, const float *u, float *y) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = c->n_embd, Hv = c->lin_v_heads, Dv = c->lin_v_dim;
    ds_matmul(w->mixed, m->conv_dim, &L->wqkv, u, H, n);
    ds_matmul(w->z, m->value_dim, &L->wz, u, H, n);
    ds_matmul(w->ab, 2 * Hv, &L->wbeta, u, H, n);
    ds_matmul(w->ab + Hv, 2 * Hv, &L->walpha, u, H, n);
    for (int i0 = 0; i0 < n;) {
        int i1 = i0 + 1;
        while (i1 < n && b->tokens[i1].seq == b->tokens[i0].seq) i1++;
        if (b->seqs[b->tokens[i0].seq].mode == DS_SEQ_VERIFY) run_verify(m, L, st, b, i0, i1);
        else run_sequence(m, L, st, b, i0, i1);
        i0 = i1;
    }
    for (int i = 0; i < n; i++)
        for (int h = 0; h < Hv; h++) {
            float *o = w->o + (size_t)i * m->value_dim + (size_t)h * Dv;
            const float *z = w->z + (size_t)i * m->value_dim + (size_t)h * Dv;
            ds_rmsnorm(o, o, L->ssm_norm, Dv, c->rms_eps);
            for (int d = 0; d < Dv; d++) o[d] *= ds_silu(z[d]);
        }
    ds_matmul(y, H, &L->wout, w->o, m->value_dim, n);
}
