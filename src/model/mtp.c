/* mtp.c - the MTP head (spec 5.1): from the main model's normed hidden state
 * h_t and the next token x_{t+1}, one full-attention decoder layer with its
 * own KV cache predicts token t+2 through the shared output head:
 *   c = eh_proj @ [rms(E[x], enorm) ; rms(h, hnorm)],  c = Layer(c),  logits = head(rms(c, head_norm)). */
#include <string.h>

#include "model/model_int.h"

ds_status ds_model_mtp_forward(ds_model *m, ds_kv_pool *mtp_kv, const ds_batch *b, const float *hidden_in, ds_err *e) {
    const ds_model_config *c = &m->cfg;
    if (c->n_mtp == 0) return ds_fail(e, DS_EUNSUPPORTED, "model: %s has no MTP head", ds_model_path(m->file));
    ds_status s = ds_batch_check(m, mtp_kv, NULL, b, 0, e);
    if (s) return s;
    if (b->n_tokens == 0) return DS_OK;
    if (mtp_kv->n_layers < 1) return ds_fail(e, DS_EINVAL, "MTP KV pool has no layer");
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = c->n_embd;
    ds_embed_rows(m, b, w->u);
    for (int i = 0; i < n; i++) {
        float *cat = w->cat + (size_t)i * 2 * H; /* order: embedding first, hidden second */
        ds_rmsnorm(cat, w->u + (size_t)i * H, m->enorm, H, c->rms_eps);
        ds_rmsnorm(cat + H, hidden_in + (size_t)i * H, m->hnorm, H, c->rms_eps);
    }
    ds_matmul(w->x, H, &m->eh_proj, w->cat, 2 * H, n);
    ds_decoder_layer(m, &m->layers[c->n_layer], 0, mtp_kv, NULL, b);
    ds_model_outputs(m, b, m->head_norm);
    return DS_OK;
}
