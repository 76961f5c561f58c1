/* attention.c - gated softmax attention over paged KV (docs/model.md §3.4): the q/k/v
 * projections, then the backend's attention op (per-head q/k RMSNorm, partial
 * NeoX RoPE, by the M-RoPE position of each pair's axis when the batch has
 * them, K and V written to each token's page slot, GQA softmax over
 * positions 0..pos of the token's own sequence, sigmoid output gate in
 * Qwen3.5), then the output projection. Every token's K and V are written
 * before any token attends, so a token sees positions of earlier calls and of
 * earlier rows of this batch alike. */
#include "model/model_int.h"

void ds_attention(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, const ds_batch *b, const float *u,
                  float *y) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = c->n_embd, hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv;
    int gated = c->attn_output_gate, qw = nh * hd * (gated ? 2 : 1), kvw = nkv * hd;
    ds_mm_out qkv[3] = {{w->q, qw, L->wq}, {w->k, kvw, L->wk}, {w->v, kvw, L->wv}};
    ds_be_matmul(m->be, qkv, 3, u, H, n);
    for (int i = 0; i < n; i++) {
        const ds_batch_token *t = &b->tokens[i];
        ds_attn_row *r = &w->att_rows[i];
        *r = (ds_attn_row){.pages = b->seqs[t->seq].pages, .pos = t->pos};
        if (b->rope_pos) { /* M-RoPE (the batch check made sure the model has it) */
            for (int a = 0; a < 3; a++) r->rope_pos[a] = b->rope_pos[3 * (size_t)i + a];
            r->rope_axis = m->rope_axis;
        }
    }
    ds_kv_view view = {.k = ds_kv_k(kv, 0, kv_layer, 0), .v = ds_kv_v(kv, 0, kv_layer, 0),
                       .page_stride = kv->page_floats, .page_size = kv->page_size, .n_kv_heads = nkv, .head_dim = hd};
    m->be->ops->attention(m->be, w->att, w->q, w->k, w->v, n, w->att_rows, &view, nh, gated, L->q_norm, L->k_norm,
                          c->rms_eps, &m->rope);
    ds_be_matmul1(m->be, y, H, L->wo, w->att, (int64_t)nh * hd, n);
}
