/* ffn.c - the feed-forward block: SwiGLU (spec 3.6), or the Qwen3.5 mixture
 * of experts (spec 3.7): softmax over all experts in F32, top-k, weights
 * renormalised, plus a shared expert gated by a per-token sigmoid.
 * Tokens are grouped by expert so each expert's weights are read once per call. */
#include <math.h>
#include <string.h>

#include "model/model_int.h"

/* y[n][H] = down @ (silu(gate @ u) * (up @ u)) */
static void swiglu(ds_model *m, const ds_mat *gate, const ds_mat *up, const ds_mat *down, int n, const float *u,
                   int ldu, float *y, int ldy) {
    ds_workspace *w = &m->ws;
    int F = (int)gate->rows;
    ds_matmul(w->ff1, F, gate, u, ldu, n);
    ds_matmul(w->ff2, F, up, u, ldu, n);
    for (size_t i = 0; i < (size_t)n * F; i++) w->ff1[i] = ds_silu(w->ff1[i]) * w->ff2[i];
    ds_matmul(y, ldy, down, w->ff1, F, n);
}

/* Picks the top k of p[E] (ties to the lower index), renormalised to sum 1. */
static void top_k(const float *p, int E, int k, int *idx, float *wt) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int t = 0; t < j; t++) taken |= idx[t] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        idx[j] = best;
        wt[j] = p[best];
    }
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += wt[j];
    for (int j = 0; j < k; j++) wt[j] /= sum;
}

static void moe(ds_model *m, const ds_layer *L, int n, const float *u, float *y) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int H = c->n_embd, E = c->n_expert, K = c->n_expert_used;
    /* shared expert: y = sigmoid(g . u) * SwiGLU_shared(u) */
    swiglu(m, &L->sh_gate, &L->sh_up, &L->sh_down, n, u, H, y, H);
    for (int i = 0; i < n; i++) {
        float g = ds_sigmoid(ds_dot(L->shexp_gate, u + (size_t)i * H, H));
        for (int d = 0; d < H; d++) y[(size_t)i * H + d] *= g;
    }
    /* routing: softmax over all experts in F32, top-k, renormalised */
    ds_matmul(w->router, E, &L->router, u, H, n);
    for (int i = 0; i < n; i++) {
        float *p = w->router + (size_t)i * E, mx = p[0], sum = 0.0f;
        for (int x = 1; x < E; x++) mx = p[x] > mx ? p[x] : mx;
        for (int x = 0; x < E; x++) sum += p[x] = expf(p[x] - mx);
        for (int x = 0; x < E; x++) p[x] /= sum;
        top_k(p, E, K, w->choice + (size_t)i * K, w->choice_w + (size_t)i * K);
    }
    /* each expert once, over the tokens that chose it; experts are added in index order so a
     * token's sum does not depend on which other tokens share the batch */
    for (int e = 0; e < E; e++) {
        int cnt = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < K; j++)
                if (w->choice[(size_t)i * K + j] == e) {
                    w->rows[cnt] = i;
                    w->weights[cnt] = w->choice_w[(size_t)i * K + j];
                    memcpy(w->gather + (size_t)cnt * H, u + (size_t)i * H, (size_t)H * sizeof(float));
                    cnt++;
                }
        if (!cnt) continue;
        ds_mat gate = ds_expert_mat(L->gate_exps, e), up = ds_expert_mat(L->up_exps, e),
               down = ds_expert_mat(L->down_exps, e);
        swiglu(m, &gate, &up, &down, cnt, w->gather, H, w->eout, H);
        for (int r = 0; r < cnt; r++) {
            float *yr = y + (size_t)w->rows[r] * H;
            const float *er = w->eout + (size_t)r * H;
            for (int d = 0; d < H; d++) yr[d] += w->weights[r] * er[d];
        }
    }
}

void ds_ffn(ds_model *m, const ds_layer *L, int n, const float *u, float *y) {
    int H = m->cfg.n_embd;
    if (m->cfg.arch == DS_ARCH_QWEN35MOE) moe(m, L, n, u, y);
    else swiglu(m, &L->ffn_gate, &L->ffn_up, &L->ffn_down, n, u, H, y, H);
}
