/* model.c - binding a model file's tensors, checking a ragged batch, and the
 * layer loop of the forward pass (see model.h for the batch contract). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loading/vision_file.h"
#include "model/model_int.h"
#include "model/rope_freqs.h"

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


/* Uploads one matrix (NULL tensor: none) to the backend; the model owns it. */
static ds_status upload_mat(ds_model *m, ds_mat src, int flags, ds_w *out, ds_err *e) {
    *out = NULL;
    if (!src.data) return DS_OK;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 256;
        ds_bweight **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return ds_fail(e, DS_ENOMEM, "model: out of memory");
        m->owned = p;
        m->cap_owned = cap;
    }
    ds_bweight *w;
    ds_status s = ds_be_weight_new(m->be, &src, flags, &w, e);
    if (s) return s;
    ds_progress_add(&m->loading, (uint64_t)ds_dtype_row_bytes(src.type, src.cols) * (uint64_t)src.rows);
    m->owned[m->n_owned++] = w;
    *out = w;
    return DS_OK;
}

static ds_status upload(ds_model *m, const ds_tensor *t, ds_w *out, ds_err *e) {
    return upload_mat(m, mat_of(t), DS_W_MATMUL, out, e);
}

/* Uploads the E matrices of an expert stack. */
static ds_status upload_experts(ds_model *m, const ds_tensor *t, ds_w **out, ds_err *e) {
    *out = NULL;
    if (!t) return DS_OK;
    int E = m->cfg.n_expert;
    *out = calloc((size_t)E, sizeof **out);
    if (!*out) return ds_fail(e, DS_ENOMEM, "model: out of memory");
    for (int x = 0; x < E; x++) {
        ds_mat mat = {.type = t->type, .data = t->data + (size_t)x * t->nb2, .rows = t->ne[1], .cols = t->ne[0]};
        ds_status s = upload_mat(m, mat, DS_W_MATMUL, &(*out)[x], e);
        if (s) return s;
    }
    return DS_OK;
}

static void *buf(ds_model *m, size_t bytes, ds_status *s, ds_err *e) {
    if (*s) return NULL;
    if (m->n_bufs == m->cap_bufs) {
        int cap = m->cap_bufs ? 2 * m->cap_bufs : 64;
        void **p = realloc(m->bufs, (size_t)cap * sizeof *p);
        if (!p) {
            *s = ds_fail(e, DS_ENOMEM, "model: out of memory");
            return NULL;
        }
        m->bufs = p;
        m->cap_bufs = cap;
    }
    void *p = ds_be_alloc(m->be, bytes ? bytes : 1);
    if (!p) {
        *s = ds_fail(e, DS_ENOMEM, "model: cannot allocate %zu bytes of scratch", bytes);
        return NULL;
    }
    m->bufs[m->n_bufs++] = p;
    return p;
}

/* An F32 vector (norms, conv taps, gates) copied into backend memory: the
 * model reads nothing from the file's pages after loading, so none of them
 * stay mapped in this process. */
static const float *vec_of(ds_model *m, const ds_tensor *t) {
    if (!t || m->vec_status) return NULL;
    size_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= (size_t)t->ne[d];
    float *p = buf(m, n * sizeof(float), &m->vec_status, NULL);
    if (p) memcpy(p, t->data, n * sizeof(float));
    return p;
}

static ds_status bind_layer(ds_model *m, int i, ds_layer *L, ds_err *e) {
    const ds_model_file *f = m->file;
    const ds_model_config *c = &m->cfg;
    ds_status s = DS_OK;
    L->full = i >= c->n_layer || c->layer_full[i];
    L->attn_norm = vec_of(m, tensor(f, i, "attn_norm.weight"));
    L->ffn_norm = vec_of(m, tensor(f, i, c->arch == DS_ARCH_QWEN3 ? "ffn_norm.weight" : "post_attention_norm.weight"));
    if (L->full) {
        if (!s) s = upload(m, tensor(f, i, "attn_q.weight"), &L->wq, e);
        if (!s) s = upload(m, tensor(f, i, "attn_k.weight"), &L->wk, e);
        if (!s) s = upload(m, tensor(f, i, "attn_v.weight"), &L->wv, e);
        if (!s) s = upload(m, tensor(f, i, "attn_output.weight"), &L->wo, e);
        L->q_norm = vec_of(m, tensor(f, i, "attn_q_norm.weight"));
        L->k_norm = vec_of(m, tensor(f, i, "attn_k_norm.weight"));
    } else {
        if (!s) s = upload(m, tensor(f, i, "attn_qkv.weight"), &L->wqkv, e);
        if (!s) s = upload(m, tensor(f, i, "attn_gate.weight"), &L->wz, e);
        if (!s) s = upload(m, tensor(f, i, "ssm_beta.weight"), &L->wbeta, e);
        if (!s) s = upload(m, tensor(f, i, "ssm_alpha.weight"), &L->walpha, e);
        if (!s) s = upload(m, tensor(f, i, "ssm_out.weight"), &L->wout, e);
        L->gdn = (ds_gdn_layer){.Hk = c->lin_k_heads, .Hv = c->lin_v_heads, .Dk = c->lin_k_dim, .Dv = c->lin_v_dim,
                                .conv_dim = m->conv_dim, .conv_kernel = c->conv_kernel, .v_tiled = c->v_heads_tiled,
                                .conv_w = vec_of(m, tensor(f, i, "ssm_conv1d.weight")),
                                .dt_bias = vec_of(m, tensor(f, i, "ssm_dt.bias")), .ssm_a = vec_of(m, tensor(f, i, "ssm_a"))};
        L->ssm_norm = vec_of(m, tensor(f, i, "ssm_norm.weight"));
    }
    if (c->arch == DS_ARCH_QWEN35MOE) {
        if (!s) s = upload(m, tensor(f, i, "ffn_gate_inp.weight"), &L->router, e);
        if (!s) s = upload_experts(m, tensor(f, i, "ffn_gate_exps.weight"), &L->gate_exps, e);
        if (!s) s = upload_experts(m, tensor(f, i, "ffn_up_exps.weight"), &L->up_exps, e);
        if (!s) s = upload_experts(m, tensor(f, i, "ffn_down_exps.weight"), &L->down_exps, e);
        const ds_tensor *sg = tensor(f, i, "ffn_gate_inp_shexp.weight");
        if (!s && sg)
            s = upload_mat(m, (ds_mat){.type = sg->type, .data = sg->data, .rows = 1, .cols = sg->ne[0]}, DS_W_MATMUL,
                           &L->shexp_gate, e);
        if (!s) s = upload(m, tensor(f, i, "ffn_gate_shexp.weight"), &L->sh_gate, e);
        if (!s) s = upload(m, tensor(f, i, "ffn_up_shexp.weight"), &L->sh_up, e);
        if (!s) s = upload(m, tensor(f, i, "ffn_down_shexp.weight"), &L->sh_down, e);
    } else {
        if (!s) s = upload(m, tensor(f, i, "ffn_gate.weight"), &L->ffn_gate, e);
        if (!s) s = upload(m, tensor(f, i, "ffn_up.weight"), &L->ffn_up, e);
        if (!s) s = upload(m, tensor(f, i, "ffn_down.weight"), &L->ffn_down, e);
    }
    return s;
}

/* Scratch: x, u, y and the small tables live all the time; the buffers of
 * attention, of the DeltaNet, of the FFN and of the MTP input are never live
 * together and share one region. Everything is sized for one slice of at
 * most ub tokens (see ds_model_forward). */
static ds_status alloc_workspace(ds_model *m, ds_err *e) {
    const ds_model_config *c = &m->cfg;
    size_t n = (size_t)m->ub, H = (size_t)c->n_embd, F = sizeof(float), A = 64;
    size_t q = (size_t)c->n_head * c->head_dim * 2, kv = (size_t)c->n_head_kv * c->head_dim;
    size_t ff = (size_t)(c->n_ff > c->n_ff_exp ? c->n_ff : c->n_ff_exp);
    if ((size_t)c->n_ff_shexp > ff) ff = (size_t)c->n_ff_shexp;
    size_t E = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
#define RND(x) (((x) + A - 1) / A * A)
    size_t att = RND(n * q * F) + 2 * RND(n * kv * F) + RND(n * q / 2 * F);
    size_t gdn = m->n_gdn ? RND(n * (size_t)m->conv_dim * F) + 2 * RND(n * (size_t)m->value_dim * F) +
                                RND(n * 2 * (size_t)c->lin_v_heads * F)
                          : 0;
    size_t nk = E ? n * K : n; /* rows of the FFN: every (token, expert) pair in MoE */
    size_t ffn = 2 * RND(nk * ff * F) + (E ? RND(n * E * F) + 2 * RND(nk * H * F) : 0);
    size_t mtp = c->n_mtp ? RND(2 * n * H * F) : 0;
    size_t shared = att > gdn ? att : gdn;
    shared = shared > ffn ? shared : ffn;
    shared = shared > mtp ? shared : mtp;
    ds_workspace *w = &m->ws;
    ds_status s = DS_OK;
    w->x = buf(m, n * H * F, &s, e);
    w->u = buf(m, n * H * F, &s, e);
    w->y = buf(m, n * H * F, &s, e);
    w->shg = buf(m, n * F, &s, e);
    w->choice = buf(m, (n * K + 1) * sizeof(int32_t), &s, e);
    w->choice_w = buf(m, n * K * F + F, &s, e);
    w->rows = buf(m, n * sizeof(int32_t), &s, e);
    w->ids = buf(m, n * sizeof(int32_t), &s, e);
    w->weights = buf(m, n * F, &s, e);
    w->att_rows = buf(m, n * sizeof(ds_attn_row), &s, e);
    w->gdn_seqs = buf(m, n * sizeof(ds_gdn_seq), &s, e);
    w->snaps = buf(m, n * sizeof(float *), &s, e);
    w->eoff = buf(m, (E + 1) * sizeof(int), &s, e);
    w->ecur = buf(m, (E + 1) * sizeof(int), &s, e);
    w->rowof = buf(m, (n * K + 1) * sizeof(int32_t), &s, e);
    w->src_of = buf(m, (n * K + 1) * sizeof(int32_t), &s, e);
    w->groups = buf(m, (E + 1) * sizeof(ds_mm_group), &s, e);
    w->slice_toks = buf(m, n * sizeof(ds_batch_token), &s, e);
    w->slice_seqs = buf(m, n * sizeof(ds_batch_seq), &s, e);
    uint8_t *r = buf(m, shared, &s, e);
    if (s) return s;
    uint8_t *p = r;
    w->q = (float *)p, p += RND(n * q * F);
    w->k = (float *)p, p += RND(n * kv * F);
    w->v = (float *)p, p += RND(n * kv * F);
    w->att = (float *)p;
    p = r;
    w->mixed = (float *)p, p += RND(n * (size_t)m->conv_dim * F);
    w->z = (float *)p, p += RND(n * (size_t)m->value_dim * F);
    w->o = (float *)p, p += RND(n * (size_t)m->value_dim * F);
    w->ab = (float *)p;
    p = r;
    w->ff1 = (float *)p, p += RND(nk * ff * F);
    w->ff2 = (float *)p, p += RND(nk * ff * F);
    w->router = (float *)p, p += E ? RND(n * E * F) : 0;
    w->gather = (float *)p, p += E ? RND(nk * H * F) : 0;
    w->eout = (float *)p;
    w->cat = (float *)r;
#undef RND
    ds_be_limits lim = {.max_rows = (int)n, .max_group_rows = (int)nk, .max_positions = m->max_positions, .n_heads = c->n_head,
                        .head_dim = c->head_dim, .gdn_k_dim = m->n_gdn ? c->lin_k_dim : 0,
                        .gdn_v_dim = m->n_gdn ? c->lin_v_dim : 0, .gdn_conv_dim = m->n_gdn ? m->conv_dim : 0};
    return m->be->ops->reserve(m->be, &lim, e);
}

ds_status ds_model_new(const ds_model_file *file, const ds_model_params *params, ds_model **out, ds_err *e) {
    *out = NULL;
    ds_model *m = calloc(1, sizeof *m);
    if (!m) return ds_fail(e, DS_ENOMEM, "model: out of memory");
    m->file = file;
    m->cfg = *ds_model_config_of(file);
    m->params = *params;
    if (m->params.max_batch_tokens <= 0) m->params.max_batch_tokens = 512;
    if (m->params.gdn_chunk <= 0) m->params.gdn_chunk = DS_DELTANET_CHUNK;
    if (m->params.gdn_chunk > DS_DELTANET_CHUNK || DS_DELTANET_CHUNK % m->params.gdn_chunk) {
        int chunk = m->params.gdn_chunk;
        free(m);
        return ds_fail(e, DS_EINVAL, "model: DeltaNet chunk length %d does not divide %d", chunk, DS_DELTANET_CHUNK);
    }
    m->ub = m->params.max_batch_tokens < DS_UBATCH ? m->params.max_batch_tokens : DS_UBATCH;
    const ds_model_config *c = &m->cfg;
    m->key_dim = c->lin_k_heads * c->lin_k_dim;
    m->value_dim = c->lin_v_heads * c->lin_v_dim;
    m->conv_dim = 2 * m->key_dim + m->value_dim;
    m->max_positions = c->n_ctx_train > 0 ? c->n_ctx_train : 4096;
    if (c->lin_v_heads > 0 && (size_t)m->conv_dim + 2 * (size_t)c->lin_v_heads >
                                  (size_t)c->lin_v_heads * (size_t)c->lin_k_dim * (size_t)c->lin_v_dim) {
        int dk = c->lin_k_dim, dv = c->lin_v_dim;
        free(m); /* a verify record (q, k, v, gates) must fit where a state would */
        return ds_fail(e, DS_EUNSUPPORTED, "model: DeltaNet heads of %dx%d are too small", dk, dv);
    }
    if (c->n_expert_used > 64) {
        int k = c->n_expert_used;
        free(m);
        return ds_fail(e, DS_EUNSUPPORTED, "model: %d experts per token (at most 64 supported)", k);
    }
    ds_status s = ds_backend_cpu_new(m->params.n_threads, &m->be, e);
    if (s) {
        free(m);
        return s;
    }
    /* repacking a large model's weights takes a while: a bar on a terminal */
    uint64_t total = 0;
    for (int i = 0; i < ds_model_n_tensors(file); i++) {
        const ds_tensor *t = ds_model_tensor_at(file, i);
        uint64_t n = ds_dtype_row_bytes(t->type, t->ne[0]);
        for (int d = 1; d < t->n_dims; d++) n *= (uint64_t)t->ne[d];
        total += n;
    }
    ds_progress_start(&m->loading, "loading weights", total);
    const ds_tensor *embd = ds_model_tensor(file, "token_embd.weight");
    const ds_tensor *out_t = ds_model_tensor(file, "output.weight");
    /* the output head reads its activations at 8 bits (DS_W_X8): its error stays in the logits, where
     * it measured 5e-3 of the largest (README, Batched decode), while one 8-bit term in every product
     * compounds through the layers to 5e-2 (dense) and 0.8 (MoE) */
    if (out_t) {
        s = upload_mat(m, mat_of(embd), DS_W_ROWS, &m->tok_embd, e);
        if (!s) s = upload_mat(m, mat_of(out_t), DS_W_MATMUL | DS_W_X8, &m->output, e);
    } else { /* tied: one matrix serves both, rows read back from the packed form */
        s = upload_mat(m, mat_of(embd), DS_W_ROWS | DS_W_MATMUL | DS_W_X8, &m->tok_embd, e);
        m->output = m->tok_embd;
    }
    m->output_norm = vec_of(m, ds_model_tensor(file, "output_norm.weight"));
    m->layers = calloc((size_t)(c->n_layer + c->n_mtp), sizeof *m->layers);
    if (!s && !m->layers) s = ds_fail(e, DS_ENOMEM, "model: out of memory");
    for (int i = 0; !s && i < c->n_layer + c->n_mtp; i++) {
        ds_layer *L = &m->layers[i];
        s = bind_layer(m, i, L, e);
        if (i < c->n_layer) L->cache_index = L->full ? m->n_attn++ : m->n_gdn++;
    }
    if (!s && c->n_mtp) {
        s = upload(m, tensor(file, c->n_layer, "nextn.eh_proj.weight"), &m->eh_proj, e);
        m->enorm = vec_of(m, tensor(file, c->n_layer, "nextn.enorm.weight"));
        m->hnorm = vec_of(m, tensor(file, c->n_layer, "nextn.hnorm.weight"));
        m->head_norm = vec_of(m, tensor(file, c->n_layer, "nextn.shared_head_norm.weight"));
    }
    double *inv_freq = buf(m, (size_t)(c->rope_dim / 2) * sizeof(double), &s, e);
    if (!s) {
        ds_rope_freqs(c, inv_freq, &m->rope.mscale);
        m->rope.dim = c->rope_dim;
        m->rope.inv_freq = inv_freq;
    }
    if (!s && c->mrope_sections[0] + c->mrope_sections[1] + c->mrope_sections[2] > 0) {
        /* which position turns each rotated pair: interleaved as Hugging Face's
         * apply_interleaved_mrope (pair i % 3 == 1: H and i % 3 == 2: W while
         * i < 3 x their section, T elsewhere), else contiguous sections */
        int half = c->rope_dim / 2;
        const int *sec = c->mrope_sections;
        m->rope_axis = buf(m, (size_t)half, &s, e);
        for (int i = 0; !s && i < half; i++) {
            if (c->mrope_interleaved)
                m->rope_axis[i] = i % 3 == 1 && i < 3 * sec[1] ? 1 : i % 3 == 2 && i < 3 * sec[2] ? 2 : 0;
            else
                m->rope_axis[i] = i < sec[0] ? 0 : i < sec[0] + sec[1] ? 1 : 2;
        }
    }
    if (!s && m->vec_status) s = ds_fail(e, DS_ENOMEM, "model: out of memory");
    if (!s) { /* loading read the tensors' pages; compute needs none of them resident */
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        for (int i = 0; i < ds_model_n_tensors(file); i++) {
            const ds_tensor *t = ds_model_tensor_at(file, i);
            size_t n = ds_dtype_row_bytes(t->type, t->ne[0]);
            for (int d = 1; d < t->n_dims; d++) n *= (size_t)t->ne[d];
            if ((uintptr_t)t->data < lo) lo = (uintptr_t)t->data;
            if ((uintptr_t)t->data + n > hi) hi = (uintptr_t)t->data + n;
        }
        if (hi > lo) m->be->ops->release_host(m->be, (const void *)lo, hi - lo);
    }
    if (!s) s = alloc_workspace(m, e);
    if (s) ds_progress_stop(&m->loading);
    else ds_progress_finish(&m->loading);
    if (s) {
        ds_model_free(m);
        return s;
    }
    *out = m;
    return DS_OK;
}

void ds_model_free(ds_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_bufs; i++) ds_be_free_buf(m->be, m->bufs[i]);
    for (int i = 0; i < m->n_owned; i++) ds_be_weight_free(m->be, m->owned[i]);
    if (m->layers)
        for (int i = 0; i < m->cfg.n_layer + m->cfg.n_mtp; i++) {
            free(m->layers[i].gate_exps);
            free(m->layers[i].up_exps);
            free(m->layers[i].down_exps);
        }
    free(m->bufs);
    free(m->owned);
    free(m->layers);
    ds_be_free(m->be);
    free(m);
}

const ds_model_config *ds_model_cfg(const ds_model *m) { return &m->cfg; }
int ds_model_max_batch_tokens(const ds_model *m) { return m->params.max_batch_tokens; }
int ds_model_n_attn_layers(const ds_model *m) { return m->n_attn; }
int ds_model_n_gdn_layers(const ds_model *m) { return m->n_gdn; }
int ds_model_conv_dim(const ds_model *m) { return m->conv_dim; }

double ds_model_draft_cost(const ds_model *m, int draft_vocab) {
    const ds_model_config *c = &m->cfg;
    if (!c->n_mtp) return 0.0;
    ds_model_stats st;
    ds_model_compute_stats(m->file, &st);
    double head = (double)c->n_vocab * (double)c->n_embd;
    int nv = draft_vocab > 0 && draft_vocab < c->n_vocab ? draft_vocab : c->n_vocab;
    /* active parameters count the embedding, which a token reads one row of, and, untied, the head */
    double decode = (double)st.n_params_active - (c->tied_embeddings ? 0.0 : head);
    /* the MTP block's routed experts count as a decode's do: the ones a token reads */
    return decode > 0 ? ((double)st.n_params_mtp_active + (double)nv * (double)c->n_embd) / decode : 0.0;
}

/* Image inputs: M-RoPE positions only for a model that has M-RoPE, each in
 * 0..max_positions-1; an image row (embd) only with M-RoPE positions, since
 * an image's tokens are placed by their (t, h, w) and never by pos alone;
 * DeepStack parts for at most the model's layers. */
static ds_status check_image_inputs(const ds_model *m, const ds_batch *b, ds_err *e) {
    if (b->n_deepstack < 0 || b->n_deepstack > DS_MAX_DEEPSTACK || b->n_deepstack > m->cfg.n_layer)
        return ds_fail(e, DS_EINVAL, "batch: %d DeepStack parts (0..%d allowed)", b->n_deepstack,
                       DS_MAX_DEEPSTACK < m->cfg.n_layer ? DS_MAX_DEEPSTACK : m->cfg.n_layer);
    if (b->rope_pos && !m->rope_axis)
        return ds_fail(e, DS_EINVAL, "batch: M-RoPE positions for %s, which has no M-RoPE sections",
                       ds_model_path(m->file));
    for (int i = 0; b->rope_pos && i < b->n_tokens; i++)
        for (int a = 0; a < 3; a++) {
            int32_t p = b->rope_pos[3 * (size_t)i + a];
            if (p < 0 || p >= m->max_positions)
                return ds_fail(e, DS_EINVAL, "batch row %d: M-RoPE position %d (axis %c) is outside 0..%d", i, p,
                               "THW"[a], m->max_positions - 1);
        }
    for (int i = 0; b->embd && i < b->n_tokens; i++)
        if (b->embd[i] && !b->rope_pos)
            return ds_fail(e, DS_EINVAL, "batch row %d: an image embedding without M-RoPE positions", i);
    return DS_OK;
}

ds_status ds_batch_check(const ds_model *m, const ds_kv_pool *kv, const ds_state_pool *st, const ds_batch *b,
                         int needs_state, ds_err *e) {
    if (b->n_tokens < 0 || b->n_tokens > m->params.max_batch_tokens)
        return ds_fail(e, DS_EINVAL, "batch: %d tokens (1..%d allowed)", b->n_tokens, m->params.max_batch_tokens);
    ds_status img = check_image_inputs(m, b, e);
    if (img) return img;
    if (b->logits_vocab < 0 || b->logits_vocab > m->cfg.n_vocab)
        return ds_fail(e, DS_EINVAL, "batch: logits over the first %d tokens (1..%d allowed, 0: all)", b->logits_vocab,
                       m->cfg.n_vocab);
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
            if (n > m->ub) return ds_fail(e, DS_EINVAL, "sequence %d: a verify of %d tokens (at most %d)", s, n, m->ub);
            const ds_state_pool *rp = b->records ? b->records : st;
            if (b->records && (rp->n_layers != st->n_layers || rp->layer_floats < ds_model_verify_record_floats(m)))
                return ds_fail(e, DS_EINVAL, "sequence %d: the record pool's slots do not fit this model's records", s);
            for (int j = 0; j < n; j++)
                if (q->verify_slots[j] < 0 || q->verify_slots[j] >= rp->n_slots ||
                    (!b->records && q->verify_slots[j] == q->state_slot))
                    return ds_fail(e, DS_EINVAL, "sequence %d: verify slot %d is %d: out of range or the sequence's own slot",
                                   s, j, q->verify_slots[j]);
        }
    }
    return DS_OK;
}

/* The next run of image rows at or after row *i1 whose embd pointers lie ld
 * floats apart (one image's rows, as the tower writes them: one copy per
 * run): rows [*i0, *i1). 0 when there is none. */
static int next_image_run(const ds_batch *b, size_t ld, int *i0, int *i1) {
    int i = *i1;
    while (i < b->n_tokens && !b->embd[i]) i++;
    if (i == b->n_tokens) return 0;
    *i0 = i++;
    while (i < b->n_tokens && b->embd[i] && b->embd[i] == b->embd[i - 1] + ld) i++;
    *i1 = i;
    return 1;
}

void ds_embed_rows(ds_model *m, const ds_batch *b, float *x) {
    int H = m->cfg.n_embd;
    for (int i = 0; i < b->n_tokens; i++) m->ws.ids[i] = b->tokens[i].token;
    m->be->ops->get_rows(m->be, x, m->tok_embd, m->ws.ids, b->n_tokens);
    size_t ld = (size_t)H * (size_t)(1 + b->n_deepstack);
    for (int i0 = 0, i1 = 0; b->embd && next_image_run(b, ld, &i0, &i1);)
        m->be->ops->gather_rows(m->be, x + (size_t)i0 * H, H, b->embd[i0], (int)ld, NULL, i1 - i0, H);
}

/* DeepStack (Qwen3-VL): after decoder layer k, each image row's k-th part is
 * added to its hidden state (Hugging Face's _deepstack_process); text rows
 * are left untouched. */
static void add_deepstack(ds_model *m, const ds_batch *b, int k) {
    int H = m->cfg.n_embd;
    size_t ld = (size_t)H * (size_t)(1 + b->n_deepstack);
    float *x = m->ws.x, *y = m->ws.y;
    for (int i0 = 0, i1 = 0; next_image_run(b, ld, &i0, &i1);) {
        m->be->ops->gather_rows(m->be, y + (size_t)i0 * H, H, b->embd[i0] + (size_t)H * (size_t)(1 + k), (int)ld, NULL,
                                i1 - i0, H);
        m->be->ops->add_rmsnorm(m->be, x + (size_t)i0 * H, y + (size_t)i0 * H, NULL, NULL, i1 - i0, H, m->cfg.rms_eps);
    }
}

void ds_decoder_layer(ds_model *m, const ds_layer *L, int kv_layer, ds_kv_pool *kv, ds_state_pool *st,
                      const ds_batch *b) {
    ds_workspace *w = &m->ws;
    int n = b->n_tokens, H = m->cfg.n_embd;
    float eps = m->cfg.rms_eps;
    m->be->ops->rmsnorm(m->be, w->u, w->x, L->attn_norm, n, H, H, eps);
    if (L->full) ds_attention(m, L, kv_layer, kv, b, w->u, w->y);
    else ds_deltanet(m, L, st, b, w->u, w->y);
    m->be->ops->add_rmsnorm(m->be, w->x, w->y, w->u, L->ffn_norm, n, H, eps);
    ds_ffn(m, L, n, w->u, w->y);
    m->be->ops->add_rmsnorm(m->be, w->x, w->y, NULL, NULL, n, H, eps);
}

/* Rows wanting outputs are gathered, normed, and their logits computed in one
 * product (the output matrix is read once per call, not once per row). */
void ds_model_outputs(ds_model *m, const ds_batch *b, const float *norm_w) {
    ds_workspace *w = &m->ws;
    int H = m->cfg.n_embd, V = b->logits_vocab ? b->logits_vocab : m->cfg.n_vocab;
    int n_logits = 0, n_hidden = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        const ds_batch_token *t = &b->tokens[i];
        if (t->want_logits) w->rows[n_logits++] = i;
    }
    if (n_logits) {
        m->be->ops->gather_rows(m->be, w->u, H, w->x, H, w->rows, n_logits, H);
        m->be->ops->rmsnorm(m->be, w->u, w->u, norm_w, n_logits, H, H, m->cfg.rms_eps);
        /* over a subset, only the head's first V rows are read */
        if (V < m->cfg.n_vocab) ds_be_matmul_rows(m->be, b->logits, V, m->output, V, w->u, H, n_logits);
        else ds_be_matmul1(m->be, b->logits, V, m->output, w->u, H, n_logits);
    }
    for (int i = 0; i < b->n_tokens; i++) {
        const ds_batch_token *t = &b->tokens[i];
        if (t->want_hidden) w->rows[n_hidden++] = i;
    }
    if (n_hidden) { /* normed straight into the caller's buffer */
        m->be->ops->gather_rows(m->be, b->hidden, H, w->x, H, w->rows, n_hidden, H);
        m->be->ops->rmsnorm(m->be, b->hidden, b->hidden, norm_w, n_hidden, H, H, m->cfg.rms_eps);
    }
}

/* Whether a slice may end right before token i: at a change of sequence,
 * anywhere in a decode, never inside a verify (at most ub tokens: checked),
 * and in a chunked prefill only at positions that are multiples of the chunk
 * length, so the DeltaNet chunks are those of one whole call. */
static int can_cut(const ds_model *m, const ds_batch *b, int i) {
    const ds_batch_token *t = &b->tokens[i];
    if (t->seq != b->tokens[i - 1].seq) return 1;
    /* a VERIFY's later tokens start from states that only its records hold */
    if (b->seqs[t->seq].mode == DS_SEQ_VERIFY && m->n_gdn > 0) return 0;
    if (b->seqs[t->seq].mode != DS_SEQ_PREFILL || m->n_gdn == 0 || m->params.gdn_chunk <= 1) return 1;
    return t->pos % m->params.gdn_chunk == 0;
}

int ds_model_next_slice(const ds_model *m, const ds_batch *b, int s0, int cuts_free) {
    int n = b->n_tokens, s1 = s0 + m->ub < n ? s0 + m->ub : n;
    if (s1 < n && !cuts_free)
        while (s1 > s0 + 1 && !can_cut(m, b, s1)) s1--;
    return s1;
}

void ds_model_slice(ds_model *m, const ds_batch *b, int s0, int s1, ds_batch *out) {
    ds_workspace *w = &m->ws;
    int n_seqs = 0, last = -1;
    for (int i = s0; i < s1; i++) {
        const ds_batch_token *t = &b->tokens[i];
        if (t->seq != last) {
            w->slice_seqs[n_seqs++] = b->seqs[t->seq];
            last = t->seq;
        }
        w->slice_toks[i - s0] = *t;
        w->slice_toks[i - s0].seq = n_seqs - 1;
    }
    *out = (ds_batch){.tokens = w->slice_toks, .n_tokens = s1 - s0, .seqs = w->slice_seqs, .n_seqs = n_seqs,
                      .logits = b->logits, .hidden = b->hidden, .records = b->records,
                      .rope_pos = b->rope_pos ? b->rope_pos + 3 * (size_t)s0 : NULL,
                      .embd = b->embd ? b->embd + s0 : NULL, .n_deepstack = b->n_deepstack,
                      .logits_vocab = b->logits_vocab};
}

static void forward_slice(ds_model *m, ds_kv_pool *kv, ds_state_pool *st, const ds_batch *b) {
    ds_embed_rows(m, b, m->ws.x);
    for (int i = 0; i < m->cfg.n_layer; i++) {
        const ds_layer *L = &m->layers[i];
        ds_decoder_layer(m, L, L->cache_index, kv, st, b);
        if (i < b->n_deepstack && b->embd) add_deepstack(m, b, i);
    }
    ds_model_outputs(m, b, m->output_norm);
}

/* Batches longer than ub tokens run as consecutive slices: every row's
 * arithmetic is the same as in one call (see can_cut), only the scratch is
 * bounded. */
ds_status ds_model_forward(ds_model *m, ds_kv_pool *kv, ds_state_pool *st, const ds_batch *b, ds_err *e) {
    ds_status s = ds_batch_check(m, kv, st, b, m->n_gdn > 0, e);
    if (s) return s;
    if (b->n_tokens == 0) return DS_OK;
    if (kv->n_layers < m->n_attn)
        return ds_fail(e, DS_EINVAL, "KV pool has %d layers per page, the model has %d attention layers", kv->n_layers,
                       m->n_attn);
    if (b->n_tokens <= m->ub) {
        forward_slice(m, kv, st, b);
        return DS_OK;
    }
    int V = b->logits_vocab ? b->logits_vocab : m->cfg.n_vocab, H = m->cfg.n_embd, n_log = 0, n_hid = 0;
    for (int s0 = 0, s1; s0 < b->n_tokens; s0 = s1) {
        s1 = ds_model_next_slice(m, b, s0, 0);
        ds_batch sl;
        ds_model_slice(m, b, s0, s1, &sl);
        if (b->logits) sl.logits = b->logits + (size_t)n_log * V;
        if (b->hidden) sl.hidden = b->hidden + (size_t)n_hid * H;
        forward_slice(m, kv, st, &sl);
        for (int i = s0; i < s1; i++) {
            n_log += b->tokens[i].want_logits;
            n_hid += b->tokens[i].want_hidden;
        }
    }
    return DS_OK;
}

size_t ds_model_verify_record_floats(const ds_model *m) {
    if (m->n_gdn == 0) return 0;
    /* the conv window after the token, its q, k, v row, then beta and g per value head */
    return (size_t)m->cfg.conv_kernel * (size_t)m->conv_dim + 2 * (size_t)m->cfg.lin_v_heads;
}

ds_status ds_model_verify_commit(ds_model *m, ds_state_pool *st, const ds_state_pool *records, int32_t slot,
                                 const int32_t *verify_slots, int n, ds_err *e) {
    if (m->n_gdn == 0) return DS_OK;
    const ds_state_pool *rp = records ? records : st;
    if (n < 1 || n > m->ub) return ds_fail(e, DS_EINVAL, "verify commit: %d tokens (1..%d allowed)", n, m->ub);
    if (slot < 0 || slot >= st->n_slots) return ds_fail(e, DS_EINVAL, "verify commit: state slot %d is out of range", slot);
    for (int j = 0; j < n; j++)
        if (verify_slots[j] < 0 || verify_slots[j] >= rp->n_slots || (!records && verify_slots[j] == slot))
            return ds_fail(e, DS_EINVAL, "verify commit: verify slot %d is %d: out of range or the state slot", j,
                           verify_slots[j]);
    float **rec = m->ws.snaps;
    for (int i = 0; i < m->cfg.n_layer; i++) {
        const ds_layer *L = &m->layers[i];
        if (L->full) continue;
        for (int j = 0; j < n; j++) rec[j] = ds_state_conv(rp, verify_slots[j], L->cache_index);
        m->be->ops->deltanet_commit(m->be, &L->gdn, ds_state_conv(st, slot, L->cache_index),
                                    ds_state_rec(st, slot, L->cache_index), rec, n);
    }
    return DS_OK;
}
