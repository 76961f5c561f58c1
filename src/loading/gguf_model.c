/* gguf_model.c - a GGUF file (llama.cpp conventions) as a ds_model_file.
 * GGUF already stores the canonical form (norms with +1 folded in, ssm_a =
 * -exp(A_log), tiled value heads), so tensors are used in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loading/model_file_int.h"

typedef struct {
    const ds_gguf *g;
    char arch[32];
    ds_err *e;
} kv_reader;

/* Reads "<arch>.<suffix>" as a positive integer; def < 0 makes it required. */
static ds_status arch_u32(kv_reader *r, const char *suffix, int def, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    uint32_t v;
    ds_status s = ds_gguf_get_u32(r->g, key, &v, r->e);
    if (s == DS_ENOTFOUND && def >= 0) {
        *out = def;
        return DS_OK;
    }
    if (s) return s;
    if (v > (1u << 30)) return ds_fail(r->e, DS_ECORRUPT, "%s: key '%s' = %u is out of range", r->g->path, key, v);
    *out = (int)v;
    return DS_OK;
}

static ds_status arch_f32(kv_reader *r, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    ds_status s = ds_gguf_get_f32(r->g, key, out, r->e);
    if (s == DS_ENOTFOUND && def >= 0) {
        *out = def;
        return DS_OK;
    }
    return s;
}

/* M-RoPE sections: "<arch>.rope.dimension_sections" holds [T, H, W, extra] in
 * frequency slots (llama.cpp writes [11, 11, 10, 0] for qwen35 and qwen35moe,
 * which it rotates interleaved); absent: plain 1-D RoPE, and no image input. */
static ds_status read_mrope(kv_reader *r, ds_model_config *c) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", r->arch);
    const ds_gguf_kv *kv = ds_gguf_find(r->g, key);
    if (!kv) return DS_OK;
    if (kv->type != DS_GGUF_ARRAY || kv->arr_len < 3 || kv->arr_len > 4)
        return ds_fail(r->e, DS_ECORRUPT, "%s: key '%s' is not an array of 3 or 4 integers", r->g->path, key);
    int64_t v[4] = {0};
    ds_status s = ds_gguf_arr_ints(r->g, kv, v, r->e);
    if (s) return s;
    for (int i = 0; i < 4; i++)
        if (v[i] < 0 || v[i] > 4096 || (i == 3 && v[i] != 0))
            return ds_fail(r->e, DS_ECORRUPT, "%s: key '%s'[%d] = %lld is out of range (the extra section must be 0)",
                           r->g->path, key, i, (long long)v[i]);
    for (int i = 0; i < 3; i++) c->mrope_sections[i] = (int)v[i];
    c->mrope_interleaved = 1;
    return DS_OK;
}

/* An optional float key "<arch>.rope.scaling.<name>" above min; absent: *out unchanged. */
static ds_status scaling_f32(kv_reader *r, const char *name, float min, float *out, int *given) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.%s", r->arch, name);
    float v;
    ds_status s = ds_gguf_get_f32(r->g, key, &v, r->e);
    if (given) *given = s == DS_OK;
    if (s == DS_ENOTFOUND) return DS_OK;
    if (s) return s;
    if (!(v > min && v <= 1e9f)) return ds_fail(r->e, DS_ECORRUPT, "%s: key '%s' = %g is not above %g", r->g->path, key, (double)v, (double)min);
    *out = v;
    return DS_OK;
}

/* Rope scaling as llama.cpp's converter writes it: rope.scaling.type
 * ("none", "linear", "yarn", ...), .factor, .original_context_length
 * (default context_length), and for YaRN Hugging Face's optional fields as
 * .yarn_beta_fast, .yarn_beta_slow, .yarn_attn_factor (attention_factor:
 * replaces the default get_mscale(factor)), .yarn_ext_factor (only 1, the
 * plain ramp, is computed here); .attn_factor multiplies the result as in
 * llama.cpp. No type: no scaling. */
static ds_status read_rope_scaling(kv_reader *r, ds_model_config *c) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", r->arch);
    ds_str type;
    ds_status s = ds_gguf_get_str(r->g, key, &type, r->e);
    if (s == DS_ENOTFOUND) return DS_OK;
    if (s) return s;
    if (type.len == 4 && !memcmp(type.ptr, "none", 4)) return DS_OK;
    if (!(type.len == 4 && !memcmp(type.ptr, "yarn", 4)))
        return ds_fail(r->e, DS_EUNSUPPORTED, "%s: key '%s' is '%.*s' (deltaserve supports 'none' and 'yarn')",
                       r->g->path, key, (int)(type.len < 64 ? type.len : 64), type.ptr);
    snprintf(key, sizeof key, "%s.rope.scaling.factor", r->arch);
    if ((s = ds_gguf_get_f32(r->g, key, &c->yarn_factor, r->e))) return s;
    if (!(c->yarn_factor > 0 && c->yarn_factor <= 1e6f))
        return ds_fail(r->e, DS_ECORRUPT, "%s: key '%s' = %g is not in (0, 1e6]", r->g->path, key, (double)c->yarn_factor);
    if ((s = arch_u32(r, "rope.scaling.original_context_length", c->n_ctx_train, &c->yarn_orig_ctx))) return s;
    if (c->yarn_orig_ctx == 0)
        return ds_fail(r->e, DS_ECORRUPT, "%s: key '%s.rope.scaling.original_context_length' is 0", r->g->path, r->arch);
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    c->yarn_truncate = 1;
    float att = 0, mul = 1, ext = 1;
    int has_att, has_ext;
    if ((s = scaling_f32(r, "yarn_beta_fast", 0, &c->yarn_beta_fast, NULL)) ||
        (s = scaling_f32(r, "yarn_beta_slow", 0, &c->yarn_beta_slow, NULL)) ||
        (s = scaling_f32(r, "yarn_attn_factor", 0, &att, &has_att)) ||
        (s = scaling_f32(r, "attn_factor", 0, &mul, NULL)) ||
        (s = scaling_f32(r, "yarn_ext_factor", -1, &ext, &has_ext)))
        return s;
    if (has_ext && ext != 1.0f)
        return ds_fail(r->e, DS_EUNSUPPORTED, "%s: key '%s.rope.scaling.yarn_ext_factor' = %g (only 1 is supported)",
                       r->g->path, r->arch, (double)ext);
    c->yarn_mscale = (has_att ? att : (float)ds_yarn_get_mscale(c->yarn_factor, 1.0)) * mul;
    return DS_OK;
}

static ds_status read_config(ds_model_file *m, ds_err *e) {
    const ds_gguf *g = &m->gguf;
    ds_model_config *c = &m->cfg;
    kv_reader r = {.g = g, .e = e};
    ds_str arch;
    ds_status s = ds_gguf_get_str(g, "general.architecture", &arch, e);
    if (s) return s;
    snprintf(r.arch, sizeof r.arch, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    if (ds_arch_from_name(r.arch, &c->arch) != 0)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: architecture '%s' is not supported (qwen3, qwen35, qwen35moe are)",
                       g->path, r.arch);
    int block_count, key_length;
    if ((s = arch_u32(&r, "block_count", -1, &block_count)) || (s = arch_u32(&r, "context_length", -1, &c->n_ctx_train)) ||
        (s = arch_u32(&r, "embedding_length", -1, &c->n_embd)) ||
        (s = arch_u32(&r, "attention.head_count", -1, &c->n_head)) ||
        (s = arch_u32(&r, "attention.head_count_kv", c->n_head, &c->n_head_kv)) ||
        (s = arch_f32(&r, "attention.layer_norm_rms_epsilon", -1, &c->rms_eps)) ||
        (s = arch_f32(&r, "rope.freq_base", 10000.0f, &c->rope_theta)) ||
        (s = arch_u32(&r, "nextn_predict_layers", 0, &c->n_mtp)))
        return s;
    if (c->n_head == 0) return ds_fail(e, DS_ECORRUPT, "%s: key '%s.attention.head_count' is 0", g->path, r.arch);
    if ((s = arch_u32(&r, "attention.key_length", c->n_embd / c->n_head, &key_length))) return s;
    c->head_dim = key_length;
    if ((s = arch_u32(&r, "rope.dimension_count", c->head_dim, &c->rope_dim))) return s;
    if (c->arch != DS_ARCH_QWEN3 && (s = read_mrope(&r, c))) return s;
    if ((s = read_rope_scaling(&r, c))) return s;
    if (c->n_mtp >= block_count)
        return ds_fail(e, DS_ECORRUPT, "%s: %s.nextn_predict_layers (%d) must be below block_count (%d)", g->path,
                       r.arch, c->n_mtp, block_count);
    c->n_layer = block_count - c->n_mtp;
    if (c->n_layer >= DS_MAX_LAYERS)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: %d layers (at most %d supported)", g->path, c->n_layer, DS_MAX_LAYERS - 1);
    if (c->arch == DS_ARCH_QWEN35MOE) {
        if ((s = arch_u32(&r, "expert_count", -1, &c->n_expert)) ||
            (s = arch_u32(&r, "expert_used_count", -1, &c->n_expert_used)) ||
            (s = arch_u32(&r, "expert_feed_forward_length", -1, &c->n_ff_exp)) ||
            (s = arch_u32(&r, "expert_shared_feed_forward_length", -1, &c->n_ff_shexp)))
            return s;
    } else if ((s = arch_u32(&r, "feed_forward_length", -1, &c->n_ff))) {
        return s;
    }
    if (c->arch == DS_ARCH_QWEN3) {
        for (int i = 0; i < c->n_layer; i++) c->layer_full[i] = 1;
    } else {
        int inner;
        c->attn_output_gate = 1;
        if ((s = arch_u32(&r, "ssm.conv_kernel", -1, &c->conv_kernel)) ||
            (s = arch_u32(&r, "ssm.state_size", -1, &c->lin_k_dim)) ||
            (s = arch_u32(&r, "ssm.group_count", -1, &c->lin_k_heads)) ||
            (s = arch_u32(&r, "ssm.time_step_rank", -1, &c->lin_v_heads)) ||
            (s = arch_u32(&r, "ssm.inner_size", -1, &inner)) ||
            (s = arch_u32(&r, "full_attention_interval", 4, &c->full_attn_interval)))
            return s;
        if (c->lin_v_heads == 0 || inner % c->lin_v_heads != 0)
            return ds_fail(e, DS_ECORRUPT, "%s: %s.ssm.inner_size (%d) is not a multiple of ssm.time_step_rank (%d)",
                           g->path, r.arch, inner, c->lin_v_heads);
        c->lin_v_dim = inner / c->lin_v_heads;
        if (c->full_attn_interval == 0)
            return ds_fail(e, DS_ECORRUPT, "%s: %s.full_attention_interval is 0", g->path, r.arch);
        for (int i = 0; i < c->n_layer; i++) c->layer_full[i] = (i + 1) % c->full_attn_interval == 0;
        c->v_heads_tiled = 1;
    }
    const ds_gguf_tensor *embd = ds_gguf_find_tensor(g, "token_embd.weight");
    if (!embd) return ds_fail(e, DS_ENOTFOUND, "%s: tensor 'token_embd.weight' is missing", g->path);
    if (embd->ne[1] > INT32_MAX) return ds_fail(e, DS_ECORRUPT, "%s: token_embd.weight has too many rows", g->path);
    c->n_vocab = (int)embd->ne[1];
    c->tied_embeddings = ds_gguf_find_tensor(g, "output.weight") == NULL;
    if (m->is_mtp_file) return DS_OK;

    uint32_t id;
    if ((s = ds_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &id, e)) == DS_OK) c->eos_ids[c->n_eos++] = (int32_t)id;
    else if (s != DS_ENOTFOUND) return s;
    if ((s = ds_gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &id, e)) == DS_OK && (c->n_eos == 0 || c->eos_ids[0] != (int32_t)id))
        c->eos_ids[c->n_eos++] = (int32_t)id;
    else if (s && s != DS_ENOTFOUND) return s;
    if ((s = ds_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &id, e)) == DS_OK) c->pad_id = (int32_t)id;
    else if (s != DS_ENOTFOUND) return s;
    /* Qwen chat models end a turn with <|im_end|> and a document with <|endoftext|>:
     * a generation stops at either, whichever of them the file names as eos */
    const ds_gguf_kv *tokens = ds_gguf_find(g, "tokenizer.ggml.tokens");
    if (tokens && tokens->type == DS_GGUF_ARRAY && tokens->arr_type == DS_GGUF_STRING) {
        const uint8_t *p = tokens->val;
        for (uint64_t i = 0; i < tokens->arr_len && i < (uint64_t)c->n_vocab; i++) {
            uint64_t len;
            memcpy(&len, p, 8);
            ds_str tok = {(const char *)p + 8, len};
            p += 8 + len;
            int dup = 0;
            for (int k = 0; k < c->n_eos; k++) dup |= c->eos_ids[k] == (int32_t)i;
            if (!dup && c->n_eos < DS_MAX_EOS && (ds_str_eq(tok, "<|im_end|>") || ds_str_eq(tok, "<|endoftext|>")))
                c->eos_ids[c->n_eos++] = (int32_t)i;
        }
    }
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] >= c->n_vocab)
            return ds_fail(e, DS_ECORRUPT, "%s: end-of-sequence token %d is outside the vocabulary (%d)", g->path,
                           c->eos_ids[i], c->n_vocab);
    return DS_OK;
}

ds_status ds_model_add_gguf_tensors(ds_model_file *m, ds_err *e) {
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) {
        const ds_gguf_tensor *gt = &m->gguf.tensors[i];
        ds_tensor t = {.type = gt->type, .n_dims = (int)gt->n_dims, .data = gt->data};
        snprintf(t.name, sizeof t.name, "%s", gt->name);
        for (int d = 0; d < 4; d++) t.ne[d] = gt->ne[d];
        t.nb2 = ds_dtype_row_bytes(gt->type, gt->ne[0]) * (size_t)gt->ne[1];
        ds_status s = ds_model_add_tensor(m, &t, e);
        if (s) return s;
    }
    return DS_OK;
}

ds_status ds_model_load_gguf(ds_model_file *m, ds_err *e) {
    ds_status s = ds_gguf_open(&m->gguf, m->path, e);
    if (s) return s;
    if ((s = read_config(m, e))) return s;
    if ((s = ds_model_add_gguf_tensors(m, e))) return s;
    ds_str tmpl;
    s = ds_gguf_get_str(&m->gguf, "tokenizer.chat_template", &tmpl, e);
    if (s == DS_OK) {
        m->chat_template = strndup(tmpl.ptr, (size_t)tmpl.len);
        if (!m->chat_template) return ds_fail(e, DS_ENOMEM, "%s: out of memory", m->path);
    } else if (s != DS_ENOTFOUND) {
        return s;
    }
    return DS_OK;
}
