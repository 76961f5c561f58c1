/* model.c - binding a model file's tensors, checking a ragged batch, and the
 * layer loop of the forward pass (see model.h for the batch contract). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"

static const ds_tensor *tensor(const ds_model_file *f, int layer, const char *suffix) {
    char name[64];
    if (layer >= 0) snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    else snprintf(name, sizeof name, "%s", suffix);
    return ds_model_tensor(f, name);
}

static ds_mat mat_of(const ds_tensor *t) {
    ds_mat m = {0};
    if (t) m = (ds_mat){.type = t->type, .data = t->data, .rows = t->ne[1], .cols = t->ne[0]};
    return m;
}

static const float *vec_of(const ds_tensor *t) { return t ? (const float *)t->data : NULL; }

ds_mat ds_expert_mat(const ds_tensor *t, int expert) {
    return (ds_mat){.type = t->type, .data = t->data + (size_t)expert * t->nb2, .rows = t->ne[1], .cols = t->ne[0]};
}

static void bind_layer(ds_model *m, int i, ds_layer *L) {
    const ds_model_file *f = m->file;
    const ds_model_config *c = &m->cfg;
    L->full = i >= c->n_layer || c->layer_full[i];
    L->attn_norm = vec_of(tensor(f, i, "attn_norm.weight"));
    L->ffn_norm = vec_of(tensor(f, i, c->arch == DS_ARCH_QWEN3 ? "ffn_norm.weight" : "post_attention_norm.weight"));
    if (L->full) {
        L->wq = mat_of(tensor(f, i, "attn_q.weight"));
        L->wk = mat_of(tensor(f, i, "attn_k.weight"));
        L->wv = mat_of(tensor(f, i, "attn_v.weight"));
        L->wo = mat_of(tensor(f, i, "attn_output.weight"));
        L->q_norm = vec_of(tensor(f, i, "attn_q_norm.weight"));
        L->k_norm = vec_of(tensor(f, i, "attn_k_norm.weight"));
    } else {
        L->wqkv = mat_of(tensor(f, i, "attn_qkv.weight"));
        L->wz = mat_of(tensor(f, i, "attn_gate.weight"));
        L->wbeta = mat_of(tensor(f, i, "ssm_beta.weight"));
        L->walpha = mat_of(tensor(f, i, "ssm_alpha.weight"));
        L->wout = mat_of(tensor(f, i, "ssm_out.weight"));
        L->conv = vec_of(tensor(f, i, "ssm_conv1d.weight"));
        L->dt_bias = vec_of(tensor(f, i, "ssm_dt.bias"));
        L->ssm_a = vec_of(tensor(f, i, "ssm_a"));
        L->ssm_norm = vec_of(tensor(f, i, "ssm_norm.weight"));
    }
    if (c->arch == DS_ARCH_QWEN35MOE) {
        L->router = mat_of(tensor(f, i, "ffn_gate_inp.weight"));
        L->gate_exps = tensor(f, i, "ffn_gate_exps.weight");
        L->up_exps = tensor(f, i, "ffn_up_exps.weight");
        L->down_exps = tensor(f, i, "ffn_down_exps.weight");
        L->shexp_gate = vec_of(tensor(f, i, "ffn_gate_inp_shexp.weight"));
        L->sh_gate = mat_of(tensor(f, i, "ffn_gate_shexp.weight"));
        L->sh_up = mat_of(tensor(f, i, "ffn_up_shexp.weight"));
        L->sh_down = mat_of(tensor(f, i, "ffn_down_shexp.weight"));
    } else {
        L->ffn_gate = mat_of(tensor(f, i, "ffn_gate.weight"));
        L->ffn_up = mat_of(tensor(f, i, "ffn_up.weight"));
        L->ffn_down = mat_of(tensor(f, i, "ffn_down.weight"));
    }
}

static ds_status alloc_workspace(ds_model *m, ds_err *e) {
    const ds_model_config *c = &m->cfg;
    size_t n = (size_t)m->params.max_batch_tokens, H = (size_t)c->n_embd;
    size_t q = (size_t)c->n_head * c->head_dim * 2, kv = (size_t)c->n_head_kv * c->head_dim;
    size_t ff = (size_t)(c->n_ff > c->n_ff_exp ? c->n_ff : c->n_ff_exp);
    if ((size_t)c->n_ff_shexp > ff) ff = (size_t)c->n_ff_shexp;
    size_t row = H > (size_t)c->n_vocab ? H : (size_t)c->n_vocab;
    if ((size_t)m->conv_dim > row) row = (size_t)m->conv_dim;
    size_t dk = (size_t)c->lin_k_dim, dv = (size_t)c->lin_v_dim, ch = 64;
    /* chunked DeltaNet: per head q,k,w [T][Dk], v,u,v' ,o [T][Dv] for a chunk, plus G, beta, A */
    size_t chunk = 2 * (ch * (dk + 2 * dv) + ch * ch + ch); /* doubles: G, A, U, W, V' */
    ds_workspace *w = &m->ws;
    m->max_positions = c->n_ctx_train > 0 ? c->n_ctx_train : 4096;
    size_t E = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
    float **bufs[] = {&w->x, &w->u, &w->y, &w->q, &w->k, &w->v, &w->att, &w->scores, &w->mixed, &w->z, &w->ab,
                      &w->o, &w->ff1, &w->ff2, &w->row, &w->chunk, &w->weights, &w->router, &w->choice_w,
                      &w->gather, &w->eout, &w->cat};
    size_t sizes[] = {n * H, n * H, n * H, n * q, n * kv, n * kv, n * q / 2, (size_t)m->max_positions,
                      n * (size_t)m->conv_dim, n * (size_t)m->value_dim, n * 2 * (size_t)c->lin_v_heads,
                      n * (size_t)m->value_dim, n * ff, n * ff, row, chunk, n, n * E, n * K,
                      E ? n * H : 0, E ? n * H : 0, c->n_mtp ? 2 * n * H : 0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *bufs[i] = calloc(sizes[i] ? sizes[i] : 1, sizeof(float));
        if (!*bufs[i]) return ds_fail(e, DS_ENOMEM, "model: cannot allocate %zu floats of scratch", sizes[i]);
    }
    w->rows = calloc(n, sizeof *w->rows);
    w->choice = calloc(n * K + 1, sizeof *w->choice);
    if (!w->rows || !w->choice) return ds_fail(e, DS_ENOMEM, "model: out of memory");
    return DS_OK;
}

ds_status ds_model_new(const ds_model_file *file, const ds_model_params *params, ds_model **out, ds_err *e) {
    *out = NULL;
    ds_model *m = calloc(1, sizeof *m);
    if (!m) return ds_fail(e, DS_ENOMEM, "model: out of memory");
    m->file = file;
    m->cfg = *ds_model_config_of(file);
    m->params = *params;
    if (m->params.max_batch_tokens <= 0) m->params.max_batch_tokens = 512;
    if (m->params.gdn_chunk <= 0) m->params.gdn_chunk = 64;
    if (m->params.gdn_chunk > 64) m->params.gdn_chunk = 64;
    const ds_model_config *c = &m->cfg;
    m->key_dim = c->lin_k_heads * c->lin_k_dim;
    m->value_dim = c->lin_v_heads * c->lin_v_dim;
    m->conv_dim = 2 * m->key_dim + m->value_dim;
    m->tok_embd = ds_model_tensor(file, "token_embd.weight");
    const ds_tensor *out_t = ds_model_tensor(file, "output.weight");
    m->output = mat_of(out_t ? out_t : m->tok_embd);
    m->output_norm = vec_of(ds_model_tensor(file, "output_norm.weight"));
    m->layers = calloc((size_t)(c->n_layer + c->n_mtp), sizeof *m->layers);
    ds_status s = m->layers ? DS_OK : ds_fail(e, DS_ENOMEM, "model: out of memory");
    for (int i = 0; !s && i < c->n_layer + c->n_mtp; i++) {
        ds_layer *L = &m->layers[i];
        bind_layer(m, i, L);
        if (i < c->n_layer) L->cache_index = L->full ? m->n_attn++ : m->n_gdn++;
    }
    if (!s && c->n_mtp) {
        m->eh_proj = mat_of(tensor(file, c->n_layer, "nextn.eh_proj.weight"));
        m->enorm = vec_of(tensor(file, c->n_layer, "nextn.enorm.weight"));
        m->hnorm = vec_of(tensor(file, c->n_layer, "nextn.hnorm.weight"));
        m->head_norm = vec_of(tensor(file, c->n_layer, "nextn.shared_head_norm.weight"));
    }
    if (!s) s = alloc_workspace(m, e);
    if (s) {
        ds_model_free(m);
        return s;
    }
    *out = m;
    return DS_OK;
}

void ds_model_free(ds_model *m) {
    if (!m) return;
    ds_workspace *w = &m->ws;
    float *bufs[] = {w->x, w->u, w->y, w->q, w->k, w->v, w->att, w->scores, w->mixed, w->z, w->ab,
                     w->o, w->ff1, w->ff2, w->row, w->chunk, w->weights, w->router, w->choice_w, w->gather, w->eout,
                     w->cat};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(w->rows);
    free(w->choice);
    free(m->layers);
    free(m);
}

const ds_model_config *ds_model_cfg(const ds_model *m) { return &m->cfg; }
int ds_model_n_attn_layers(const ds_model *m) { return m->n_attn; }
int ds_model_n_gdn_layers(const ds_model *m) { return m->n_gdn; }
int ds_model_conv_dim(const ds_model *m) { return m->conv_dim; }

ds_status ds_batch_check(const ds_model *m, const ds_kv_pool *kv, const ds_state_pool *st, const ds_batch *b,
                         int needs_state, ds_err *e) {
    if (b->n_tokens < 0 || b->n_tokens > m->params.max_batch_tokens)
        return ds_fail(e, DS_EINVAL, "batch: %d tokens (1..%d allowed)", b->n_tokens, m->params.max_batch_tokens);
    int last_seq = -1;
    for (int i = 0; i < b->n_tokens; i++) {
        const ds_batch_token *t = &b->tokens[i];
        if (t->token < 0 || t->token >= m->cfg.n_vocab)
            return ds_fail(e, DS_EINVAL, "batch row %d: token %d is outside the vocabulary (%d)", i, t->token, m->cfg.n_vocab);
        if (t->seq < 0 || t->seq >= b->n_seqs)
            return ds_fail(e, DS_EINVAL, "batch row %d: sequence %d does not exist (%d sequences)", i, t->seq, b->n_seqs);
        if (t->pos < 0 || t->pos >= m->max_positions)
            return ds_fail(e, DS_EINVAL, "batch row %d: position %d is outside 0..%d", i, t->pos, m->max_positions - 1);
        if (t->seq != last_seq) {
            for (int j = 0; j < i; j++)
                if (b->tokens[j].seq == t->seq)
                    return ds_fail(e, DS_EINVAL, "batch row %d: the tokens of sequence %d are not contiguous", i, t->seq);
            last_seq = t->seq;
        } else if (t->pos != b->tokens[i - 1].pos + 1) {
            return ds_fail(e, DS_EINVAL, "batch row %d: position %d does not follow %d in sequence %d", i, t->pos,
                           b->tokens[i - 1].pos, t->seq);
        }
        const ds_batch_seq *s = &b->seqs[t->seq];
        if (t->pos / kv->page_size >= s->n_pages)
            return ds_fail(e, DS_EINVAL, "batch row %d: position %d needs page %d, sequence %d has %d pages", i, t->pos,
                           t->pos / kv->page_size, t->seq, s->n_pages);
        for (int p = 0; p <= t->pos / kv->page_size; p++)
            if (s->pages[p] < 0 || s->pages[p] >= kv->n_pages)
                return ds_fail(e, DS_EINVAL, "sequence %d: page table entry %d is %d, the pool has %d pages", t->seq, p,
                               s->pages[p], kv->n_pages);
    }
    if (!needs_state) return DS_OK;
    for (int s = 0; s < b->n_seqs; s++) {
        const ds_batch_seq *q = &b->seqs[s];
        if (q->state_slot < 0 || q->state_slot >= st->n_slots)
            return ds_fail(e, DS_EINVAL, "sequence %d: state slot %d is outside 0..%d", s, q->state_slot, st->n_slots - 1);
        if (q->mode == DS_SEQ_VERIFY) {
            if (!q->verify_slots) return ds_fail(e, DS_EINVAL, "sequence %d: verify mode without verify slots", s);
            int n = 0;
            for (int i = 0; i < b->n_tokens; i++) n += b->tokens[i].seq == s;
            for (int j = 0; j < n; j++)
                if (q->verify_slots[j] < 0 || q->verify_slots[j] >= st->n_slots || q->verify_slots[j] == q->state_slot)
                    return ds_fail(e, DS_EINVAL, "sequence %d: verify slot %d is %d: out of range or the sequence's own slot",
                                   s, j, q->verify_slots[j]);
        }
    }
    return DS_OK;
}

void ds_embed_rows(const ds_model *m, const ds_batch *b, float *x) {
    const ds_tensor *t = m->tok_embd;
    size_t row_bytes = ds_dtype_row_bytes(t->type, t->ne[0]);
    for (int i = 0; i < b->n_tokens; i++)
        ds_dequantize_row(t->type, t->data + (size_t)b->tokens[i].token * row_bytes, x + (size_t)i * m->cfg.n_embd,
                          t->ne[0]);
}

void ds_decoder_layer(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, ds_state_pool *st,
                      const ds_batch *b) {
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = m->cfg.n_embd;
    for (int i = 0; i < n; i++) ds_rmsnorm(w->u + (size_t)i * H, w->x + (size_t)i * H, L->attn_norm, H, m->cfg.rms_eps);
    if (L->full) ds_attention(m, L, kv_layer, kv, b, w->u, w->y);
    else ds_deltanet(m, L, st, b, w->u, w->y);
    for (size_t i = 0; i < (size_t)n * H; i++) w->x[i] += w->y[i];
    for (int i = 0; i < n; i++) ds_rmsnorm(w->u + (size_t)i * H, w->x + (size_t)i * H, L->ffn_norm, H, m->cfg.rms_eps);
    ds_ffn(m, L, n, w->u, w->y);
    for (size_t i = 0; i < (size_t)n * H; i++) w->x[i] += w->y[i];
}

void ds_model_outputs(ds_model *m, const ds_batch *b, const float *norm_w) {
    ds_workspace *w = &m->ws;
    int H = m->cfg.n_embd, V = m->cfg.n_vocab;
    int n_logits = 0, n_hidden = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        const ds_batch_token *t = &b->tokens[i];
        if (!t->want_logits && !t->want_hidden) continue;
        ds_rmsnorm(w->row, w->x + (size_t)i * H, norm_w, H, m->cfg.rms_eps);
        if (t->want_hidden) memcpy(b->hidden + (size_t)n_hidden++ * H, w->row, (size_t)H * sizeof(float));
        if (t->want_logits) ds_matmul(b->logits + (size_t)n_logits++ * V, V, &m->output, w->row, H, 1);
    }
}

ds_status ds_model_forward(ds_model *m, ds_kv_pool *kv, ds_state_pool *st, const ds_batch *b, ds_err *e) {
    ds_status s = ds_batch_check(m, kv, st, b, m->n_gdn > 0, e);
    if (s) return s;
    if (b->n_tokens == 0) return DS_OK;
    if (kv->n_layers < m->n_attn)
        return ds_fail(e, DS_EINVAL, "KV pool has %d layers per page, the model has %d attention layers", kv->n_layers,
                       m->n_attn);
    ds_embed_rows(m, b, m->ws.x);
    for (int i = 0; i < m->cfg.n_layer; i++) {
        const ds_layer *L = &m->layers[i];
        ds_decoder_layer(m, L, L->cache_index, kv, st, b);
    }
    ds_model_outputs(m, b, m->output_norm);
    return DS_OK;
}
