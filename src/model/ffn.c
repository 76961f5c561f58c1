/* ffn.c - the feed-forward block: SwiGLU (docs/model.md §3.6), or the
 * Qwen3.5 mixture of experts (§3.7): softmax over all experts in F32, top-k,
 * weights renormalised, plus a shared expert gated by a per-token sigmoid.
 * Tokens are grouped by expert so each expert's weights are read once per call. */
#include <math.h>
#include <string.h>

#include "model/model_int.h"

/* y[n][H] = down @ (silu(gate @ u) * (up @ u)) */
static void swiglu(ds_model *m, ds_w gate, ds_w up, ds_w down, int F, int n, const float *u, int ldu, float *y,
                   int ldy) {
    ds_workspace *w = &m->ws;
    ds_mm_out gu[2] = {{w->ff1, F, gate}, {w->ff2, F, up}};
    ds_be_matmul(m->be, gu, 2, u, ldu, n);
    m->be->ops->swiglu(m->be, w->ff1, w->ff2, n, F, F);
    ds_be_matmul1(m->be, y, ldy, down, w->ff1, F, n);
}

/* Experts (docs/model.md §3.7): tokens grouped by expert, then every active expert's
 * gate and up projections in one grouped product (each expert's weights read
 * once), one SwiGLU over all routed rows, the down projections likewise, and
 * each token's experts added to it in expert order, so its sum does not
 * depend on which other tokens share the batch. */
static void moe(ds_model *m, const ds_layer *L, int n, const float *u, float *y) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int H = c->n_embd, E = c->n_expert, K = c->n_expert_used, F = c->n_ff_exp;
    /* shared expert: y = SwiGLU_shared(u), scaled by sigmoid(g . u) in moe_combine */
    swiglu(m, L->sh_gate, L->sh_up, L->sh_down, c->n_ff_shexp, n, u, H, y, H);
    /* routing logits and the shared gate in one pass over u; then softmax over
     * all experts in F32, top-k, renormalised */
    ds_mm_out r[2] = {{w->router, E, L->router}, {w->shg, 1, L->shexp_gate}};
    ds_be_matmul(m->be, r, 2, u, H, n);
    m->be->ops->moe_route(m->be, w->router, n, E, K, w->choice, w->choice_w);
    /* rows grouped by expert: expert e's rows start at w->eoff[e]; row of (i, j) in w->rowof */
    for (int e = 0; e <= E; e++) w->eoff[e] = 0;
    for (int q = 0; q < n * K; q++) w->eoff[w->choice[q] + 1]++;
    for (int e = 0; e < E; e++) w->eoff[e + 1] += w->eoff[e];
    for (int e = 0; e < E; e++) w->ecur[e] = w->eoff[e];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < K; j++) {
            int row = w->ecur[w->choice[(size_t)i * K + j]]++;
            w->rowof[(size_t)i * K + j] = row;
            w->src_of[row] = i;
        }
    m->be->ops->gather_rows(m->be, w->gather, H, u, H, w->src_of, n * K, H);
    int ng = 0;
    for (int e = 0; e < E; e++) {
        int cnt = w->eoff[e + 1] - w->eoff[e];
        if (!cnt) continue;
        size_t r0 = (size_t)w->eoff[e];
        w->groups[ng++] = (ds_mm_group){.x = w->gather + r0 * H, .ldx = H, .n = cnt, .n_outs = 2,
                                         .outs = {{w->ff1 + r0 * F, F, L->gate_exps[e]}, {w->ff2 + r0 * F, F, L->up_exps[e]}}};
    }
    m->be->ops->matmul_grouped(m->be, w->groups, ng);
    m->be->ops->swiglu(m->be, w->ff1, w->ff2, n * K, F, F);
    ng = 0;
    for (int e = 0; e < E; e++) {
        int cnt = w->eoff[e + 1] - w->eoff[e];
        if (!cnt) continue;
        size_t r0 = (size_t)w->eoff[e];
        w->groups[ng++] = (ds_mm_group){.x = w->ff1 + r0 * F, .ldx = F, .n = cnt, .n_outs = 1,
                                         .outs = {{w->eout + r0 * H, H, L->down_exps[e]}}};
    }
    m->be->ops->matmul_grouped(m->be, w->groups, ng);
    m->be->ops->moe_combine(m->be, y, w->shg, w->eout, w->rowof, w->choice, w->choice_w, n, K, H);
}

void ds_ffn(ds_model *m, const ds_layer *L, int n, const float *u, float *y) {
    int H = m->cfg.n_embd;
    if (m->cfg.arch == DS_ARCH_QWEN35MOE) moe(m, L, n, u, y);
    else swiglu(m, L->ffn_gate, L->ffn_up, L->ffn_down, m->cfg.n_ff, n, u, H, y, H);
}
