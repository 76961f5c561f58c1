/* mtp.c - the MTP head (docs/model.md §5.1): from the main model's normed hidden state
 * h_t and the next token x_{t+1}, one full-attention decoder layer with its
 * own KV cache predicts token t+2 through the shared output head:
 *   c = eh_proj @ [rms(E[x], enorm) ; rms(h, hnorm)],  c = Layer(c),  logits = head(rms(c, head_norm)). */
#include <string.h>

#include "model/model_int.h"

static void mtp_slice(ds_model *m, ds_kv_pool *mtp_kv, const ds_batch *b, const float *hidden_in) {
    const ds_model_config *c = &m->cfg;
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = c->n_embd;
    ds_embed_rows(m, b, w->u);
    /* order: embedding first, hidden second */
    m->be->ops->gather_rows(m->be, w->cat, 2 * H, w->u, H, NULL, n, H);
    m->be->ops->gather_rows(m->be, w->cat + H, 2 * H, hidden_in, H, NULL, n, H);
    m->be->ops->rmsnorm(m->be, w->cat, w->cat, m->enorm, n, H, 2 * H, c->rms_eps);
    m->be->ops->rmsnorm(m->be, w->cat + H, w->cat + H, m->hnorm, n, H, 2 * H, c->rms_eps);
    ds_be_matmul1(m->be, w->x, H, m->eh_proj, w->cat, 2 * H, n);
    ds_decoder_layer(m, &m->layers[c->n_layer], 0, mtp_kv, NULL, b);
    ds_model_outputs(m, b, m->head_norm);
}

ds_status ds_model_mtp_forward(ds_model *m, ds_kv_pool *mtp_kv, const ds_batch *b, const float *hidden_in, ds_err *e) {
    const ds_model_config *c = &m->cfg;
    if (c->n_mtp == 0) return ds_fail(e, DS_EUNSUPPORTED, "model: %s has no MTP head", ds_model_path(m->file));
    ds_status s = ds_batch_check(m, mtp_kv, NULL, b, 0, e);
    if (s) return s;
    if (b->n_tokens == 0) return DS_OK;
    if (mtp_kv->n_layers < 1) return ds_fail(e, DS_EINVAL, "MTP KV pool has no layer");
    if (b->n_tokens <= m->ub) {
        mtp_slice(m, mtp_kv, b, hidden_in);
        return DS_OK;
    }
    /* long batches in slices (the head has no DeltaNet: cuts anywhere) */
    int V = b->logits_vocab ? b->logits_vocab : c->n_vocab, H = c->n_embd, n_log = 0, n_hid = 0;
    for (int s0 = 0, s1; s0 < b->n_tokens; s0 = s1) {
        s1 = ds_model_next_slice(m, b, s0, 1);
        ds_batch sl;
        ds_model_slice(m, b, s0, s1, &sl);
        if (b->logits) sl.logits = b->logits + (size_t)n_log * V;
        if (b->hidden) sl.hidden = b->hidden + (size_t)n_hid * H;
        mtp_slice(m, mtp_kv, &sl, hidden_in + (size_t)s0 * H);
        for (int i = s0; i < s1; i++) {
            n_log += b->tokens[i].want_logits;
            n_hid += b->tokens[i].want_hidden;
        }
    }
    return DS_OK;
}
