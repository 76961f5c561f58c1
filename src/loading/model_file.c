/* model_file.c - opening a model of either format, validating it against its
 * config, and the derived sizes that `info` prints. */
#include "loading/model_file_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

ds_status ds_model_add_tensor(ds_model_file *m, const ds_tensor *t, ds_err *e) {
    if (ds_model_tensor(m, t->name))
        return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' is defined twice", m->path, t->name);
    if (m->n_tensors == m->cap_tensors) {
        int cap = m->cap_tensors ? 2 * m->cap_tensors : 256;
        ds_tensor *p = realloc(m->tensors, (size_t)cap * sizeof *p);
        if (!p) return ds_fail(e, DS_ENOMEM, "%s: out of memory for the tensor table", m->path);
        m->tensors = p;
        m->cap_tensors = cap;
    }
    m->tensors[m->n_tensors++] = *t;
    return DS_OK;
}

void *ds_model_alloc(ds_model_file *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *buf = malloc(bytes ? bytes : 1);
    if (buf) m->owned[m->n_owned++] = buf;
    return buf;
}

static int64_t n_elements(const ds_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

size_t ds_tensor_bytes(const ds_tensor *t) {
    return ds_dtype_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1] * (size_t)t->ne[2] * (size_t)t->ne[3];
}

ds_status ds_model_tensor_to_f32(ds_model_file *m, ds_tensor *t, ds_err *e) {
    /* safetensors offsets need not be aligned: the result is always an aligned F32 array */
    size_t align = t->type == DS_F32 ? sizeof(float) : 2;
    int misaligned = (uintptr_t)t->data % align != 0;
    if (t->type == DS_F32 && !misaligned) return DS_OK;
    int64_t n = n_elements(t);
    float *dst = ds_model_alloc(m, (size_t)n * sizeof(float));
    if (!dst) return ds_fail(e, DS_ENOMEM, "%s: out of memory converting tensor '%s'", m->path, t->name);
    if (t->type == DS_F32) {
        memcpy(dst, t->data, (size_t)n * sizeof(float));
    } else if (misaligned) { /* 16-bit values at an odd address: convert from an aligned copy */
        size_t bytes = ds_dtype_row_bytes(t->type, n);
        void *tmp = malloc(bytes ? bytes : 1);
        if (!tmp) return ds_fail(e, DS_ENOMEM, "%s: out of memory converting tensor '%s'", m->path, t->name);
        memcpy(tmp, t->data, bytes);
        ds_dequantize_row(t->type, tmp, dst, n);
        free(tmp);
    } else {
        ds_dequantize_row(t->type, t->data, dst, n);
    }
    t->data = (const uint8_t *)dst;
    t->type = DS_F32;
    t->nb2 = (size_t)t->ne[0] * (size_t)t->ne[1] * sizeof(float);
    return DS_OK;
}

typedef struct {
    ds_model_file *m;
    ds_err *e;
    ds_status status;
    int mtp_only;
} validate_ctx;

void ds_tensor_shape_text(char *buf, size_t n, int n_dims, const int64_t *ne) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < n_dims && off < n; d++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", d ? ", " : "", (long long)ne[d]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

static void validate_one(const ds_tensor_spec *s, void *arg) {
    validate_ctx *v = arg;
    if (v->status || (v->mtp_only && s->layer < v->m->cfg.n_layer)) return;
    ds_tensor *t = (ds_tensor *)ds_model_tensor(v->m, s->name);
    if (!t) {
        if (!s->optional)
            v->status = ds_fail(v->e, DS_ENOTFOUND, "%s: tensor '%s' is missing", v->m->path, s->name);
        return;
    }
    int same = 1;
    for (int d = 0; d < 4; d++) same &= (d < t->n_dims ? t->ne[d] : 1) == s->ne[d];
    if (!same) {
        char got[96], want[96];
        ds_tensor_shape_text(got, sizeof got, t->n_dims, t->ne);
        ds_tensor_shape_text(want, sizeof want, s->n_dims, s->ne);
        v->status = ds_fail(v->e, DS_ECORRUPT, "%s: tensor '%s' has shape %s, the config implies %s", v->m->path,
                            s->name, got, want);
        return;
    }
    t->n_dims = s->n_dims;
    if (!ds_dtype_computable(t->type)) {
        v->status = ds_fail(v->e, DS_EUNSUPPORTED, "%s: tensor '%s' is %s, a type deltaserve reads but cannot compute yet",
                            v->m->path, s->name, ds_dtype_get(t->type)->name);
        return;
    }
    if (s->kind != DS_TK_MATRIX && s->kind != DS_TK_EMBED) {
        const ds_dtype_info *ti = ds_dtype_get(t->type);
        if (ti->block_elems != 1) {
            v->status = ds_fail(v->e, DS_EUNSUPPORTED, "%s: tensor '%s' is %s; norms, vectors and conv weights must be "
                                "f32, f16 or bf16", v->m->path, s->name, ti->name);
            return;
        }
        v->status = ds_model_tensor_to_f32(v->m, t, v->e);
    }
}

ds_status ds_model_validate(ds_model_file *m, int mtp_only, ds_err *e) {
    ds_status s = ds_model_config_check(&m->cfg, m->path, (int)ds_model_format(m), e);
    if (s) return s;
    validate_ctx v = {.m = m, .e = e, .mtp_only = mtp_only};
    ds_model_for_each_spec(&m->cfg, validate_one, &v);
    return v.status;
}

ds_status ds_model_open(const char *path, ds_model_file **out, ds_err *e) {
    return ds_model_open_ex(path, NULL, out, e);
}

ds_status ds_model_open_ex(const char *path, const ds_load_options *o, ds_model_file **out, ds_err *e) {
    *out = NULL;
    ds_model_file *m = calloc(1, sizeof *m);
    if (!m) return ds_fail(e, DS_ENOMEM, "%s: out of memory", path);
    if (o) m->opt = *o;
    m->path = strdup(path);
    m->cfg.pad_id = -1;
    ds_status s;
    struct stat st;
    if (!m->path) {
        s = ds_fail(e, DS_ENOMEM, "%s: out of memory", path);
    } else if (stat(path, &st) != 0) {
        s = ds_fail(e, DS_ENOTFOUND, "%s: no such file or directory", path);
    } else if (S_ISDIR(st.st_mode)) {
        m->format = DS_FORMAT_SAFETENSORS;
        s = ds_model_load_hf(m, path, e);
    } else {
        size_t n = strlen(path);
        if (n >= 12 && strcmp(path + n - 11, "config.json") == 0) {
            /* a config.json names its directory */
            char *dir = strndup(path, n - 11);
            m->format = DS_FORMAT_SAFETENSORS;
            s = dir ? ds_model_load_hf(m, *dir ? dir : ".", e) : ds_fail(e, DS_ENOMEM, "out of memory");
            free(dir);
        } else {
            m->format = DS_FORMAT_GGUF;
            s = ds_model_load_gguf(m, e);
        }
    }
    if (!s) s = ds_model_validate(m, 0, e);
    if (!s && m->opt.mtp_path) s = ds_model_attach_mtp(m, m->opt.mtp_path, e);
    m->opt.mtp_path = NULL; /* the caller's string: not kept */
    if (s) {
        ds_model_close(m);
        return s;
    }
    *out = m;
    return DS_OK;
}

void ds_model_close(ds_model_file *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->tensors);
    if (m->format == DS_FORMAT_GGUF) ds_gguf_close(&m->gguf);
    for (int i = 0; i < m->n_shards; i++) {
        char *shard_path = (char *)m->shards[i].path; /* strdup'd by the HF loader */
        ds_safetensors_close(&m->shards[i]);
        free(shard_path);
    }
    free(m->shards);
    free(m->tokenizer_json);
    free(m->chat_template);
    free(m->path);
    ds_model_close(m->mtp);
    free(m);
}

const ds_model_config *ds_model_config_of(const ds_model_file *m) { return &m->cfg; }
ds_format ds_model_format(const ds_model_file *m) { return m->format; }
const char *ds_model_path(const ds_model_file *m) { return m->path; }
int ds_model_n_tensors(const ds_model_file *m) { return m->n_tensors; }
const ds_tensor *ds_model_tensor_at(const ds_model_file *m, int i) { return &m->tensors[i]; }
const char *ds_model_tokenizer_json(const ds_model_file *m) { return m->tokenizer_json; }
const ds_gguf *ds_model_gguf(const ds_model_file *m) { return m->format == DS_FORMAT_GGUF ? &m->gguf : NULL; }
const char *ds_model_chat_template(const ds_model_file *m) { return m->chat_template; }
const char *ds_model_mtp_path(const ds_model_file *m) { return m->mtp ? m->mtp->path : m->cfg.n_mtp ? m->path : NULL; }

const ds_tensor *ds_model_tensor(const ds_model_file *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

typedef struct {
    const ds_model_file *m;
    ds_model_stats *st;
} stats_ctx;

static void count_params(const ds_tensor_spec *s, void *arg) {
    stats_ctx *c = arg;
    const ds_model_config *cfg = &c->m->cfg;
    const ds_tensor *t = ds_model_tensor(c->m, s->name);
    if (!t) return;
    int64_t n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
    int64_t active = n;
    if (s->n_dims == 3 && cfg->n_expert > 0) active = n / cfg->n_expert * cfg->n_expert_used;
    c->st->weight_bytes += (int64_t)ds_tensor_bytes(t);
    if (s->layer >= cfg->n_layer) {
        c->st->n_params_mtp += n;
        c->st->n_params_mtp_active += active;
        return;
    }
    c->st->n_params += n;
    c->st->n_params_active += active;
}

void ds_model_compute_stats(const ds_model_file *m, ds_model_stats *st) {
    const ds_model_config *c = &m->cfg;
    memset(st, 0, sizeof *st);
    for (int i = 0; i < c->n_layer; i++) {
        if (c->layer_full[i]) st->n_full_layers++;
        else st->n_gdn_layers++;
    }
    stats_ctx ctx = {.m = m, .st = st};
    ds_model_for_each_spec(c, count_params, &ctx);
    st->kv_bytes_per_token = (int64_t)st->n_full_layers * 2 * c->n_head_kv * c->head_dim * 2;
    int64_t conv_dim = 2LL * c->lin_k_heads * c->lin_k_dim + (int64_t)c->lin_v_heads * c->lin_v_dim;
    int64_t per_layer = (int64_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim * 4 +
                        (int64_t)(c->conv_kernel - 1) * conv_dim * 2;
    st->gdn_state_bytes_per_seq = st->n_gdn_layers * per_layer;
}
