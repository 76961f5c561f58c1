/* attention.c - gated softmax attention over paged KV (spec 3.4): per-head
 * q/k RMSNorm, partial NeoX RoPE, GQA, and a sigmoid output gate in Qwen3.5.
 * Every token's K and V are written to its page slot first, so that a token
 * attends to positions 0..pos of its own sequence whether they came from an
 * earlier call or from earlier rows of this batch. */
#include <math.h>
#include <string.h>

#include "model/model_int.h"

void ds_attention(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, const ds_batch *b, const float *u,
                  float *y) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = c->n_embd, hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv;
    int gated = c->attn_output_gate, qw = nh * hd * (gated ? 2 : 1), kvw = nkv * hd;
    ds_matmul(w->q, qw, &L->wq, u, H, n);
    ds_matmul(w->k, kvw, &L->wk, u, H, n);
    ds_matmul(w->v, kvw, &L->wv, u, H, n);
    for (int i = 0; i < n; i++) {
        const ds_batch_token *t = &b->tokens[i];
        float *q = w->q + (size_t)i * qw, *k = w->k + (size_t)i * kvw;
        for (int h = 0; h < nh; h++) {
            float *qh = q + (size_t)h * hd * (gated ? 2 : 1); /* gated: [query | gate] per head */
            ds_rmsnorm(qh, qh, L->q_norm, hd, c->rms_eps);
            ds_rope_neox(qh, c->rope_dim, t->pos, c->rope_theta);
        }
        for (int h = 0; h < nkv; h++) {
            ds_rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, L->k_norm, hd, c->rms_eps);
            ds_rope_neox(k + (size_t)h * hd, c->rope_dim, t->pos, c->rope_theta);
        }
        const ds_batch_seq *s = &b->seqs[t->seq];
        int page = s->pages[t->pos / kv->page_size], slot = t->pos % kv->page_size;
        memcpy(ds_kv_k(kv, page, kv_layer, slot), k, (size_t)kvw * sizeof(float));
        memcpy(ds_kv_v(kv, page, kv_layer, slot), w->v + (size_t)i * kvw, (size_t)kvw * sizeof(float));
    }
    float scale = 1.0f / sqrtf((float)hd);
    int group = nh / nkv;
    for (int i = 0; i < n; i++) {
        const ds_batch_token *t = &b->tokens[i];
        const ds_batch_seq *s = &b->seqs[t->seq];
        for (int h = 0; h < nh; h++) {
            const float *qh = w->q + (size_t)i * qw + (size_t)h * hd * (gated ? 2 : 1);
            int kvh = h / group;
            float mx = -INFINITY;
            for (int p = 0; p <= t->pos; p++) {
                const float *kp = ds_kv_k(kv, s->pages[p / kv->page_size], kv_layer, p % kv->page_size) + (size_t)kvh * hd;
                w->scores[p] = ds_dot(qh, kp, hd) * scale;
                if (w->scores[p] > mx) mx = w->scores[p];
            }
            float sum = 0.0f;
            for (int p = 0; p <= t->pos; p++) {
                w->scores[p] = expf(w->scores[p] - mx);
                sum += w->scores[p];
            }
            float *out = w->att + (size_t)i * nh * hd + (size_t)h * hd;
            memset(out, 0, (size_t)hd * sizeof(float));
            for (int p = 0; p <= t->pos; p++) {
                const float *vp = ds_kv_v(kv, s->pages[p / kv->page_size], kv_layer, p % kv->page_size) + (size_t)kvh * hd;
                float wgt = w->scores[p] / sum;
                for (int d = 0; d < hd; d++) out[d] += wgt * vp[d];
            }
            if (gated) {
                const float *gate = qh + hd;
                for (int d = 0; d < hd; d++) out[d] *= ds_sigmoid(gate[d]);
            }
        }
    }
    ds_matmul(y, H, &L->wo, w->att, (int64_t)nh * hd, n);
}
