/* hf_model.c - a Hugging Face checkpoint directory as a ds_model_file.
 *
 * Reads config.json (fields at the top level or under text_config), the
 * safetensors file or shards named by model.safetensors.index.json, and maps
 * tensor names onto the canonical (GGUF) names, converting what differs:
 * zero-centred norms get their +1, A_log becomes -exp(A_log), the conv weight
 * loses its middle axis, fused and split MoE experts become 3-D stacks.
 * Vision tensors are skipped. The GDN value-head order stays grouped. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/half.h"
#include "loading/fp8.h"
#include "loading/hf_names.h"
#include "loading/json_file.h"
#include "loading/model_file_int.h"

#define MAX_JSON_BYTES (64u << 20)

typedef struct {
    const char *path;   /* config.json, for messages */
    const json_t *text; /* text_config, or NULL */
    const json_t *top;
    ds_err *e;
} cfg_reader;

/* Looks a field up in text_config, then at the top level. Fails when both
 * exist and disagree, because then one of them is wrong and we cannot tell which. */
static ds_status field(cfg_reader *r, const char *name, const json_t **out) {
    const json_t *a = r->text ? json_object_get(r->text, name) : NULL;
    const json_t *b = json_object_get(r->top, name);
    if (a && b && !json_is_null(a) && !json_is_null(b) && !json_equal(a, b))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s' differs between text_config and the top level", r->path, name);
    *out = (a && !json_is_null(a)) ? a : (b && !json_is_null(b)) ? b : NULL;
    return DS_OK;
}

/* def < 0: required. */
static ds_status get_int(cfg_reader *r, const char *name, int def, int *out) {
    const json_t *v;
    ds_status s = field(r, name, &v);
    if (s) return s;
    if (!v) {
        if (def >= 0) {
            *out = def;
            return DS_OK;
        }
        return ds_fail(r->e, DS_ENOTFOUND, "%s: field '%s' is missing", r->path, name);
    }
    uint64_t u;
    if (ds_json_uint(v, 1u << 30, &u) != 0)
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s' is not a non-negative integer", r->path, name);
    *out = (int)u;
    return DS_OK;
}

static ds_status get_float(cfg_reader *r, const json_t *v, const char *name, float *out) {
    /* (a double beyond the float range has no float value: converting it is undefined) */
    if (!json_is_number(v) || !(fabs(json_number_value(v)) <= FLT_MAX))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s' is not a number in the float range", r->path, name);
    *out = (float)json_number_value(v);
    return DS_OK;
}

static ds_status get_bool(cfg_reader *r, const char *name, int def, int *out) {
    const json_t *v;
    ds_status s = field(r, name, &v);
    if (s) return s;
    if (!v) { *out = def; return DS_OK; }
    if (!json_is_boolean(v)) return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s' is not a boolean", r->path, name);
    *out = json_is_true(v);
    return DS_OK;
}

/* Adds token ids (a number or a list) to cfg->eos_ids, without duplicates. */
static ds_status add_eos(ds_model_config *c, const json_t *v, const char *path, const char *name, ds_err *e) {
    if (!v || json_is_null(v)) return DS_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t k = 0; k < n; k++) {
        const json_t *one = json_is_array(v) ? json_array_get(v, k) : v;
        uint64_t u;
        if (ds_json_uint(one, INT32_MAX, &u) != 0)
            return ds_fail(e, DS_ECORRUPT, "%s: field '%s' is not a token id or a list of them", path, name);
        int32_t id = (int32_t)u;
        int dup = 0;
        for (int i = 0; i < c->n_eos; i++) dup |= c->eos_ids[i] == id;
        if (!dup && c->n_eos < DS_MAX_EOS) c->eos_ids[c->n_eos++] = id;
    }
    return DS_OK;
}

/* A number of a rope-scaling object: absent (or null) leaves *out as it is;
 * present, it must be a number above min. */
static ds_status yarn_number(cfg_reader *r, const json_t *obj, const char *where, const char *name, double min,
                             float *out, int *given) {
    const json_t *v = json_object_get(obj, name);
    if (given) *given = 0;
    if (!v || json_is_null(v)) return DS_OK;
    if (!json_is_number(v) || !(json_number_value(v) > min && json_number_value(v) <= 1e9))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.%s' is not a number above %g", r->path, where, name, min);
    *out = (float)json_number_value(v);
    if (given) *given = 1;
    return DS_OK;
}

/* Rope scaling: rope_parameters (transformers 5) or rope_scaling names a
 * rope_type (older files: type). "default" (and "mrope", Qwen2-VL's name)
 * mean none; "yarn" reads its fields with Hugging Face's defaults
 * (_compute_yarn_parameters): original_max_position_embeddings =
 * max_position_embeddings, beta_fast 32, beta_slow 1, truncate true, and
 * attention_factor = get_mscale(factor), or get_mscale(factor, mscale) /
 * get_mscale(factor, mscale_all_dim) when both of those are given. Any other
 * type would change the rotation in a way deltaserve does not compute. */
static ds_status read_rope_scaling(cfg_reader *r, const json_t *params, ds_model_config *c) {
    const json_t *obj = params;
    const char *where = "rope_parameters";
    ds_status s;
    const json_t *type = obj ? json_object_get(obj, "rope_type") : NULL;
    if (!type && obj) type = json_object_get(obj, "type");
    if (!type || json_is_null(type)) {
        const json_t *scaling;
        if ((s = field(r, "rope_scaling", &scaling))) return s;
        if (scaling && !json_is_object(scaling))
            return ds_fail(r->e, DS_ECORRUPT, "%s: field 'rope_scaling' is not an object", r->path);
        if (!scaling) return DS_OK;
        obj = scaling;
        where = "rope_scaling";
        type = json_object_get(obj, "rope_type");
        if (!type) type = json_object_get(obj, "type");
        if (!type || json_is_null(type)) return DS_OK;
    }
    const char *key = json_object_get(obj, "rope_type") ? "rope_type" : "type";
    if (!json_is_string(type))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.%s' is not a string", r->path, where, key);
    const char *t = json_string_value(type);
    if (!strcmp(t, "default") || !strcmp(t, "mrope")) return DS_OK;
    if (strcmp(t, "yarn"))
        return ds_fail(r->e, DS_EUNSUPPORTED, "%s: field '%s.%s' is '%s' (deltaserve supports 'default' and 'yarn')",
                       r->path, where, key, t);
    const json_t *f = json_object_get(obj, "factor");
    if (!f || json_is_null(f))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.factor' is missing (YaRN needs it)", r->path, where);
    if (!json_is_number(f) || !(json_number_value(f) > 0 && json_number_value(f) <= 1e6))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.factor' is not a number in (0, 1e6]", r->path, where);
    c->yarn_factor = (float)json_number_value(f);
    c->yarn_orig_ctx = c->n_ctx_train;
    const json_t *orig = json_object_get(obj, "original_max_position_embeddings");
    if (orig && !json_is_null(orig)) {
        uint64_t u;
        if (ds_json_uint(orig, 1u << 30, &u) != 0 || u == 0)
            return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.original_max_position_embeddings' is not a positive integer",
                           r->path, where);
        c->yarn_orig_ctx = (int)u;
    }
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    float att = 0, ms = 0, ms_all = 0;
    int has_att, has_ms, has_all;
    if ((s = yarn_number(r, obj, where, "beta_fast", 0, &c->yarn_beta_fast, NULL)) ||
        (s = yarn_number(r, obj, where, "beta_slow", 0, &c->yarn_beta_slow, NULL)) ||
        (s = yarn_number(r, obj, where, "attention_factor", 0, &att, &has_att)) ||
        (s = yarn_number(r, obj, where, "mscale", -1e9, &ms, &has_ms)) ||
        (s = yarn_number(r, obj, where, "mscale_all_dim", -1e9, &ms_all, &has_all)))
        return s;
    c->yarn_truncate = 1;
    const json_t *tr = json_object_get(obj, "truncate");
    if (tr && !json_is_null(tr)) {
        if (!json_is_boolean(tr))
            return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.truncate' is not a boolean", r->path, where);
        c->yarn_truncate = json_is_true(tr);
    }
    if (has_att) c->yarn_mscale = att;
    else if (has_ms && has_all && ms != 0 && ms_all != 0)
        c->yarn_mscale = (float)(ds_yarn_get_mscale(c->yarn_factor, ms) / ds_yarn_get_mscale(c->yarn_factor, ms_all));
    else c->yarn_mscale = (float)ds_yarn_get_mscale(c->yarn_factor, 1.0);
    return DS_OK;
}

static ds_status read_rope(cfg_reader *r, ds_model_config *c) {
    const json_t *params, *theta = NULL, *factor = NULL;
    ds_status s = field(r, "rope_parameters", &params);
    if (s) return s;
    if (params && !json_is_object(params))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field 'rope_parameters' is not an object", r->path);
    if (params) {
        theta = json_object_get(params, "rope_theta");
        factor = json_object_get(params, "partial_rotary_factor");
    }
    if (!theta && (s = field(r, "rope_theta", &theta))) return s;
    if (!factor && (s = field(r, "partial_rotary_factor", &factor))) return s;
    c->rope_theta = c->arch == DS_ARCH_QWEN3 ? 1e6f : 1e7f;
    if (theta && (s = get_float(r, theta, "rope_theta", &c->rope_theta))) return s;
    float f = c->arch == DS_ARCH_QWEN3 ? 1.0f : 0.25f;
    if (factor && (s = get_float(r, factor, "partial_rotary_factor", &f))) return s;
    if (!(f > 0 && f <= 1))
        return ds_fail(r->e, DS_ECORRUPT, "%s: field 'partial_rotary_factor' is %g, not in (0, 1]", r->path, (double)f);
    c->rope_dim = (int)lroundf((float)c->head_dim * f);
    if ((s = read_rope_scaling(r, params, c))) return s;
    if (c->arch == DS_ARCH_QWEN3) return DS_OK;
    /* M-RoPE: rope_parameters (or, in older exports, rope_scaling) has
     * mrope_section [T, H, W] and mrope_interleaved (Qwen3-VL and Qwen3.5
     * rotate interleaved: the default); no mrope_section: 1-D RoPE only */
    const json_t *sec = params ? json_object_get(params, "mrope_section") : NULL;
    const json_t *inter = params ? json_object_get(params, "mrope_interleaved") : NULL;
    const char *where = "rope_parameters";
    if (!sec) {
        const json_t *scaling;
        if ((s = field(r, "rope_scaling", &scaling))) return s;
        if (scaling && json_is_object(scaling)) {
            sec = json_object_get(scaling, "mrope_section");
            inter = json_object_get(scaling, "mrope_interleaved");
            where = "rope_scaling";
        }
    }
    if (!sec || json_is_null(sec)) return DS_OK;
    if (!json_is_array(sec) || json_array_size(sec) != 3)
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.mrope_section' is not a list of 3 integers", r->path, where);
    for (int i = 0; i < 3; i++) {
        uint64_t u;
        if (ds_json_uint(json_array_get(sec, (size_t)i), 4096, &u) != 0)
            return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.mrope_section'[%d] is not an integer in 0..4096", r->path,
                           where, i);
        c->mrope_sections[i] = (int)u;
    }
    c->mrope_interleaved = 1;
    if (inter && !json_is_null(inter)) {
        if (!json_is_boolean(inter))
            return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s.mrope_interleaved' is not a boolean", r->path, where);
        c->mrope_interleaved = json_is_true(inter);
    }
    return DS_OK;
}

static ds_status read_layer_types(cfg_reader *r, ds_model_config *c) {
    const json_t *types;
    ds_status s = field(r, "layer_types", &types);
    if (s) return s;
    if (c->arch == DS_ARCH_QWEN3) {
        for (int i = 0; i < c->n_layer; i++) c->layer_full[i] = 1;
        return DS_OK;
    }
    if ((s = get_int(r, "full_attention_interval", 4, &c->full_attn_interval))) return s;
    if (!types) {
        if (c->full_attn_interval == 0)
            return ds_fail(r->e, DS_ECORRUPT, "%s: field 'full_attention_interval' is 0", r->path);
        for (int i = 0; i < c->n_layer; i++) c->layer_full[i] = (i + 1) % c->full_attn_interval == 0;
        return DS_OK;
    }
    if (!json_is_array(types) || json_array_size(types) != (size_t)c->n_layer)
        return ds_fail(r->e, DS_ECORRUPT, "%s: field 'layer_types' is not a list of num_hidden_layers (%d) entries",
                       r->path, c->n_layer);
    for (int i = 0; i < c->n_layer; i++) {
        const char *t = json_string_value(json_array_get(types, (size_t)i));
        if (t && strcmp(t, "full_attention") == 0) c->layer_full[i] = 1;
        else if (t && strcmp(t, "linear_attention") == 0) c->layer_full[i] = 0;
        else return ds_fail(r->e, DS_ECORRUPT, "%s: layer_types[%d] is neither \"full_attention\" nor \"linear_attention\"",
                            r->path, i);
    }
    return DS_OK;
}

/* quantization_config: only "fp8" with 128x128 blocks of e4m3 is read (fp8.h);
 * any other method would load as garbage, so it is refused by name. */
static ds_status read_quant_config(cfg_reader *r, int *fp8) {
    const json_t *q;
    ds_status s = field(r, "quantization_config", &q);
    *fp8 = 0;
    if (s || !q) return s;
    if (!json_is_object(q)) return ds_fail(r->e, DS_ECORRUPT, "%s: field 'quantization_config' is not an object", r->path);
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (!method) return ds_fail(r->e, DS_ECORRUPT, "%s: quantization_config.quant_method is missing", r->path);
    if (strcmp(method, "fp8") != 0)
        return ds_fail(r->e, DS_EUNSUPPORTED, "%s: quantization_config.quant_method '%.32s' is not supported (fp8 is)",
                       r->path, method);
    const char *fmt = json_string_value(json_object_get(q, "fmt"));
    if (fmt && strcmp(fmt, "e4m3") != 0)
        return ds_fail(r->e, DS_EUNSUPPORTED, "%s: quantization_config.fmt '%.16s' is not supported (e4m3 is)", r->path,
                       fmt);
    const json_t *bs = json_object_get(q, "weight_block_size");
    uint64_t b0, b1;
    if (!json_is_array(bs) || json_array_size(bs) != 2 || ds_json_uint(json_array_get(bs, 0), 1u << 20, &b0) ||
        ds_json_uint(json_array_get(bs, 1), 1u << 20, &b1))
        return ds_fail(r->e, DS_ECORRUPT, "%s: quantization_config.weight_block_size is not a pair of sizes (128x128 "
                       "blocks are read)", r->path);
    if (b0 != DS_FP8_BLOCK || b1 != DS_FP8_BLOCK)
        return ds_fail(r->e, DS_EUNSUPPORTED, "%s: quantization_config.weight_block_size is [%llu, %llu]; only [128, "
                       "128] is read", r->path, (unsigned long long)b0, (unsigned long long)b1);
    *fp8 = 1;
    return DS_OK;
}

static ds_status read_config(ds_model_file *m, const char *dir, int *fp8, ds_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root;
    ds_status s = ds_json_file_read(path, MAX_JSON_BYTES, 0, &root, e);
    if (s) return s;
    ds_model_config *c = &m->cfg;
    const json_t *text = json_object_get(root, "text_config");
    if (text && !json_is_object(text)) {
        json_decref(root);
        return ds_fail(e, DS_ECORRUPT, "%s: field 'text_config' is not an object", path);
    }
    cfg_reader r = {.path = path, .text = text, .top = root, .e = e};
    const json_t *mt = text ? json_object_get(text, "model_type") : NULL;
    if (!mt) mt = json_object_get(root, "model_type");
    const char *type = json_string_value(mt);
    if (!type) {
        s = ds_fail(e, DS_ENOTFOUND, "%s: field 'model_type' is missing", path);
    } else if (!strcmp(type, "qwen3_5_text") || !strcmp(type, "qwen3_5")) {
        c->arch = DS_ARCH_QWEN35;
    } else if (!strcmp(type, "qwen3_5_moe_text") || !strcmp(type, "qwen3_5_moe")) {
        c->arch = DS_ARCH_QWEN35MOE;
    } else if (!strcmp(type, "qwen3")) {
        c->arch = DS_ARCH_QWEN3;
    } else {
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: model_type '%.64s' is not supported (qwen3, qwen3_5, qwen3_5_moe are)",
                    path, type);
    }
    const json_t *v = NULL;
    if (!s) s = get_int(&r, "hidden_size", -1, &c->n_embd);
    if (!s) s = get_int(&r, "num_hidden_layers", -1, &c->n_layer);
    if (!s && c->n_layer >= DS_MAX_LAYERS)
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: %d layers (at most %d supported)", path, c->n_layer, DS_MAX_LAYERS - 1);
    if (!s) s = get_int(&r, "vocab_size", -1, &c->n_vocab);
    if (!s) s = get_int(&r, "num_attention_heads", -1, &c->n_head);
    if (!s) s = get_int(&r, "num_key_value_heads", c->n_head, &c->n_head_kv);
    if (!s) s = get_int(&r, "head_dim", c->n_head ? c->n_embd / c->n_head : 0, &c->head_dim);
    if (!s) s = get_int(&r, "max_position_embeddings", 32768, &c->n_ctx_train);
    if (!s) s = field(&r, "rms_norm_eps", &v);
    c->rms_eps = 1e-6f;
    if (!s && v) s = get_float(&r, v, "rms_norm_eps", &c->rms_eps);
    if (!s) s = get_bool(&r, "tie_word_embeddings", 0, &c->tied_embeddings);
    if (!s) s = read_rope(&r, c);
    if (!s) s = read_layer_types(&r, c);
    if (!s && c->arch != DS_ARCH_QWEN3) {
        c->attn_output_gate = 1;
        s = get_int(&r, "linear_num_key_heads", -1, &c->lin_k_heads);
        if (!s) s = get_int(&r, "linear_num_value_heads", -1, &c->lin_v_heads);
        if (!s) s = get_int(&r, "linear_key_head_dim", -1, &c->lin_k_dim);
        if (!s) s = get_int(&r, "linear_value_head_dim", -1, &c->lin_v_dim);
        if (!s) s = get_int(&r, "linear_conv_kernel_dim", 4, &c->conv_kernel);
        if (!s) s = get_int(&r, "mtp_num_hidden_layers", 0, &c->n_mtp);
    }
    if (!s && c->arch == DS_ARCH_QWEN35MOE) {
        s = get_int(&r, "num_experts", -1, &c->n_expert);
        if (!s) s = get_int(&r, "num_experts_per_tok", -1, &c->n_expert_used);
        if (!s) s = get_int(&r, "moe_intermediate_size", -1, &c->n_ff_exp);
        if (!s) s = get_int(&r, "shared_expert_intermediate_size", -1, &c->n_ff_shexp);
    } else if (!s) {
        s = get_int(&r, "intermediate_size", -1, &c->n_ff);
    }
    if (!s) s = read_quant_config(&r, fp8);
    if (!s && !(s = field(&r, "eos_token_id", &v))) s = add_eos(c, v, path, "eos_token_id", e);
    uint64_t pad;
    if (!s && !(s = field(&r, "pad_token_id", &v)) && json_is_number(v)) {
        if (ds_json_uint(v, INT32_MAX, &pad) == 0) c->pad_id = (int32_t)pad;
        else s = ds_fail(e, DS_ECORRUPT, "%s: field 'pad_token_id' is not a token id", path);
    }
    json_decref(root);
    if (s) return s;

    /* generation_config.json may add the chat turn's end token to the stop set */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if ((s = ds_json_file_read(path, MAX_JSON_BYTES, 1, &root, e))) return s;
    if (root) {
        s = add_eos(c, json_object_get(root, "eos_token_id"), path, "eos_token_id", e);
        json_decref(root);
    }
    return s;
}

static int file_exists(const char *path) { return access(path, R_OK) == 0; }

static ds_status read_chat_template(ds_model_file *m, const char *dir, ds_err *e) {
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (file_exists(path)) return ds_read_text_file(path, MAX_JSON_BYTES, &m->chat_template, &len, e);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *root;
    ds_status s = ds_json_file_read(path, MAX_JSON_BYTES, 1, &root, e);
    if (s || !root) return s;
    const json_t *t = json_object_get(root, "chat_template");
    if (json_is_array(t)) { /* a list of named templates: take "default" */
        const json_t *pick = NULL, *it;
        size_t i;
        json_array_foreach(t, i, it) {
            const char *nm = json_string_value(json_object_get(it, "name"));
            if (nm && strcmp(nm, "default") == 0) pick = json_object_get(it, "template");
        }
        t = pick;
    }
    if (t && !json_is_string(t)) s = ds_fail(e, DS_ECORRUPT, "%s: field 'chat_template' is not a string", path);
    /* the template is text up to its end: a NUL inside would cut it short without a word */
    else if (t && strlen(json_string_value(t)) != json_string_length(t))
        s = ds_fail(e, DS_ECORRUPT, "%s: field 'chat_template' contains a NUL character", path);
    else if (t && !(m->chat_template = strdup(json_string_value(t)))) s = ds_fail(e, DS_ENOMEM, "out of memory");
    json_decref(root);
    return s;
}

/* --- shards --- */

ds_status ds_model_open_shards(ds_model_file *m, const char *dir, ds_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *index;
    ds_status s = ds_json_file_read(path, MAX_JSON_BYTES, 1, &index, e);
    if (s) return s;
    if (!index) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (!file_exists(path))
            return ds_fail(e, DS_ENOTFOUND, "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
        m->shards = calloc(1, sizeof *m->shards);
        if (!m->shards) return ds_fail(e, DS_ENOMEM, "out of memory");
        char *p = strdup(path);
        if (!p) return ds_fail(e, DS_ENOMEM, "out of memory");
        s = ds_safetensors_open(&m->shards[0], p, e);
        if (s) { free(p); return s; }
        m->shards[0].path = p;
        m->n_shards = 1;
        return DS_OK;
    }
    const json_t *map = json_object_get(index, "weight_map");
    size_t n = json_is_object(map) ? json_object_size(map) : 0;
    if (n == 0) {
        json_decref(index);
        return ds_fail(e, DS_ECORRUPT, "%s: field 'weight_map' is missing, empty or not an object", path);
    }
    const char **files = calloc(n, sizeof *files);
    m->shards = calloc(n, sizeof *m->shards);
    if (!files || !m->shards) {
        free(files);
        json_decref(index);
        return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    int n_files = 0;
    const char *key;
    const json_t *it;
    json_object_foreach((json_t *)map, key, it) {
        const char *file = json_string_value(it);
        if (!file || !*file || strchr(file, '/') || file[0] == '.') {
            s = ds_fail(e, DS_ECORRUPT, "%s: weight_map entry '%s' does not name a file in the directory", path, key);
            break;
        }
        int seen = 0;
        for (int i = 0; i < n_files; i++) seen |= strcmp(files[i], file) == 0;
        if (!seen) files[n_files++] = file;
    }
    for (int i = 0; i < n_files && !s; i++) {
        char shard_path[4096];
        snprintf(shard_path, sizeof shard_path, "%s/%s", dir, files[i]);
        char *p = strdup(shard_path);
        if (!p) { s = ds_fail(e, DS_ENOMEM, "out of memory"); break; }
        s = ds_safetensors_open(&m->shards[i], p, e);
        if (s) { free(p); break; }
        m->shards[i].path = p;
        m->n_shards++;
    }
    /* every tensor the index names must be in the shard it names */
    json_object_foreach((json_t *)map, key, it) {
        if (s) break;
        const char *file = json_string_value(it);
        for (int i = 0; i < m->n_shards; i++) {
            size_t ln = strlen(m->shards[i].path), lf = strlen(file);
            if (ln >= lf && strcmp(m->shards[i].path + ln - lf, file) == 0 && !ds_safetensors_find(&m->shards[i], key))
                s = ds_fail(e, DS_ECORRUPT, "%s: the index puts tensor '%s' in %s, which does not have it", path, key,
                            file);
        }
    }
    free(files);
    json_decref(index);
    return s;
}

/* --- name mapping --- */

/* Split-form experts are copied into one stack per (layer, kind) as they appear. */
typedef struct {
    int layer, kind;     /* kind: 0 gate, 1 up, 2 down */
    ds_tensor *t;        /* in the model table once complete; NULL before */
    uint8_t *buf;
    int n_seen;
    uint8_t *seen;
    ds_dtype type;
    int64_t rows, cols;
} expert_stack;

typedef struct {
    ds_model_file *m;
    expert_stack *stacks;
    int n_stacks, cap_stacks;
    ds_err *e;
    int fp8;                /* quantization_config says fp8 */
    ds_pool *pool;          /* converts FP8 weights; NULL when there are none */
    ds_progress progress;
} mapper;

static void torch_to_ne(const ds_st_tensor *st, ds_tensor *t) {
    t->n_dims = st->n_dims ? st->n_dims : 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (int d = 0; d < st->n_dims && d < 4; d++) t->ne[d] = st->shape[st->n_dims - 1 - d];
    if (st->n_dims == 0) t->ne[0] = 1;
}

static ds_status check_dtype(const ds_st_tensor *st, const char *path, ds_err *e) {
    if (!st->has_dtype && strcmp(st->st_dtype, "F8_E4M3") != 0)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: tensor '%s' has dtype %s; model weights must be F32, F16 or BF16", path,
                       st->name, st->st_dtype);
    if (st->n_dims > 4) return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' has %d dimensions", path, st->name, st->n_dims);
    return DS_OK;
}

/* --- FP8 weights (fp8.h) --- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static const ds_st_tensor *find_any(const ds_model_file *m, const char *name) {
    for (int i = 0; i < m->n_shards; i++) {
        const ds_st_tensor *t = ds_safetensors_find(&m->shards[i], name);
        if (t) return t;
    }
    return NULL;
}

static void fmt_dims(char *buf, size_t n, int n_dims, const int64_t *d) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < n_dims && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

/* A block scale must belong to an FP8 weight: one beside a BF16 weight means
 * the file and its config disagree about what was quantised. */
static ds_status check_scale_owner(mapper *mp, const ds_st_tensor *sc, const char *shard) {
    char wname[512];
    snprintf(wname, sizeof wname, "%.*s", (int)(strlen(sc->name) - strlen("_scale_inv")), sc->name);
    const ds_st_tensor *w = find_any(mp->m, wname);
    if (!w) return ds_fail(mp->e, DS_ECORRUPT, "%s: block scale '%s' has no weight '%s'", shard, sc->name, wname);
    if (strcmp(w->st_dtype, "F8_E4M3") != 0)
        return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' is a block scale, but its weight '%s' is %s, not F8_E4M3",
                       shard, sc->name, wname, w->st_dtype);
    return DS_OK;
}

/* Replaces an F8_E4M3 weight *st by its conversion to the load type (*tmp,
 * in a buffer the model owns); other tensors pass unchanged. */
static ds_status resolve_fp8(mapper *mp, const ds_st_tensor **st, const char *shard, ds_st_tensor *tmp) {
    const ds_st_tensor *w = *st;
    if (strcmp(w->st_dtype, "F8_E4M3") != 0) return DS_OK;
    ds_model_file *m = mp->m;
    if (!mp->fp8)
        return ds_fail(mp->e, DS_EUNSUPPORTED, "%s: tensor '%s' is F8_E4M3, but config.json has no quantization_config "
                       "with quant_method fp8 to say how it is scaled", shard, w->name);
    if (w->n_dims != 2 && w->n_dims != 3)
        return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' is F8_E4M3 with %d dimensions; block-scaled weights are "
                       "matrices or expert stacks", shard, w->name, w->n_dims);
    char sname[512];
    snprintf(sname, sizeof sname, "%s_scale_inv", w->name);
    const ds_st_tensor *sc = find_any(m, sname);
    if (!sc) return ds_fail(mp->e, DS_ENOTFOUND, "%s: FP8 tensor '%s' has no block scale '%s'", shard, w->name, sname);
    if (!sc->has_dtype || (sc->type != DS_F32 && sc->type != DS_BF16 && sc->type != DS_F16))
        return ds_fail(mp->e, DS_ECORRUPT, "%s: block scale '%s' has dtype %s, not F32, BF16 or F16", shard, sname,
                       sc->st_dtype);
    int64_t mats = w->n_dims == 3 ? w->shape[0] : 1, rows = w->shape[w->n_dims - 2], cols = w->shape[w->n_dims - 1];
    int64_t want[3] = {mats, (rows + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK, (cols + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK};
    const int64_t *wd = want + (w->n_dims == 3 ? 0 : 1);
    int same = sc->n_dims == w->n_dims;
    for (int d = 0; same && d < w->n_dims; d++) same = sc->shape[d] == wd[d];
    if (!same) {
        char got[96], need[96], ws[96];
        fmt_dims(got, sizeof got, sc->n_dims, sc->shape);
        fmt_dims(need, sizeof need, w->n_dims, wd);
        fmt_dims(ws, sizeof ws, w->n_dims, w->shape);
        return ds_fail(mp->e, DS_ECORRUPT, "%s: block scale '%s' has shape %s; weight '%s' of shape %s in 128x128 "
                       "blocks needs %s", shard, sname, got, w->name, ws, need);
    }
    ds_dtype out = m->opt.fp8_as == DS_FP8_AS_Q8_0 && cols % DS_QK8_0 == 0 ? DS_Q8_0 : DS_BF16;
    size_t bytes = ds_dtype_row_bytes(out, cols) * (size_t)rows * (size_t)mats;
    uint8_t *buf = ds_model_alloc(m, bytes);
    if (!buf) return ds_fail(mp->e, DS_ENOMEM, "%s: out of memory converting tensor '%s'", shard, w->name);
    ds_fp8_tensor ft = {.name = w->name, .w = w->data, .mats = mats, .rows = rows, .cols = cols, .scale = sc->data,
                        .scale_type = sc->type, .out_type = out, .out = buf};
    ds_status s = ds_fp8_convert(mp->pool, &ft, shard, mp->e);
    if (s) return s;
    ds_progress_add(&mp->progress, (uint64_t)(mats * rows * cols));
    *tmp = *w;
    tmp->has_dtype = 1;
    tmp->type = out;
    snprintf(tmp->st_dtype, sizeof tmp->st_dtype, "%s", ds_dtype_get(out)->name);
    tmp->data = buf;
    tmp->nbytes = bytes;
    *st = tmp;
    return DS_OK;
}

static ds_status add_converted(mapper *mp, const ds_st_tensor *st, const char *shard, const char *name, ds_hf_conversion conv) {
    ds_model_file *m = mp->m;
    ds_st_tensor tmp;
    ds_status s = resolve_fp8(mp, &st, shard, &tmp);
    if (s) return s;
    ds_tensor t = {.type = st->type, .data = st->data};
    snprintf(t.name, sizeof t.name, "%s", name);
    torch_to_ne(st, &t);
    t.nb2 = ds_dtype_row_bytes(t.type, t.ne[0]) * (size_t)t.ne[1];
    switch (conv) {
    case DS_HF_PLAIN:
        break;
    case DS_HF_CONV1D: /* [C, 1, K] -> {K, C} */
        if (st->n_dims != 3 || st->shape[1] != 1)
            return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' should have shape [channels, 1, kernel]", shard, st->name);
        t.n_dims = 2;
        t.ne[1] = t.ne[2];
        t.ne[2] = 1;
        if ((s = ds_model_tensor_to_f32(m, &t, mp->e))) return s;
        break;
    case DS_HF_VECTOR:
        if ((s = ds_model_tensor_to_f32(m, &t, mp->e))) return s;
        break;
    case DS_HF_NORM:
    case DS_HF_ALOG: {
        if ((s = ds_model_tensor_to_f32(m, &t, mp->e))) return s;
        int64_t n = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
        float *dst = ds_model_alloc(m, (size_t)n * sizeof(float));
        if (!dst) return ds_fail(mp->e, DS_ENOMEM, "out of memory");
        const float *src = (const float *)t.data;
        int add_one = m->cfg.arch != DS_ARCH_QWEN3; /* Qwen3.5 norms are zero-centred: the scale is 1 + w */
        for (int64_t i = 0; i < n; i++)
            dst[i] = conv == DS_HF_ALOG ? -expf(src[i]) : add_one ? 1.0f + src[i] : src[i];
        t.data = (const uint8_t *)dst;
        break;
    }
    case DS_HF_GATE_UP: { /* [E, 2I, H]: rows 0..I-1 of each expert are the gate, I..2I-1 the up projection */
        if (st->n_dims != 3 || st->shape[1] % 2)
            return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' should have shape [experts, 2*moe_intermediate, hidden]",
                           shard, st->name);
        int64_t I = st->shape[1] / 2;
        size_t half = ds_dtype_row_bytes(t.type, t.ne[0]) * (size_t)I;
        ds_tensor up = t;
        t.ne[1] = up.ne[1] = I;
        t.nb2 = up.nb2 = 2 * half;
        char *gate = strstr(up.name, "ffn_gate_exps"); /* t is "blk.N.ffn_gate_exps.weight" */
        if (gate) memcpy(gate, "ffn_up_exps.weight", sizeof "ffn_up_exps.weight");
        up.data = t.data + half;
        if ((s = ds_model_add_tensor(m, &up, mp->e))) return s;
        break;
    }
    }
    return ds_model_add_tensor(m, &t, mp->e);
}

static ds_status add_split_expert(mapper *mp, const ds_st_tensor *st, const char *shard, int layer, int expert, int kind) {
    ds_model_file *m = mp->m;
    const ds_model_config *c = &m->cfg;
    ds_st_tensor tmp;
    ds_status s = resolve_fp8(mp, &st, shard, &tmp);
    if (s) return s;
    if (c->n_expert <= 0 || expert < 0 || expert >= c->n_expert)
        return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' names expert %d, the config has %d experts", shard, st->name,
                       expert, c->n_expert);
    if (st->n_dims != 2)
        return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' should be 2-D", shard, st->name);
    expert_stack *es = NULL;
    for (int i = 0; i < mp->n_stacks; i++)
        if (mp->stacks[i].layer == layer && mp->stacks[i].kind == kind) es = &mp->stacks[i];
    if (!es) {
        if (mp->n_stacks == mp->cap_stacks) {
            int cap = mp->cap_stacks ? 2 * mp->cap_stacks : 64;
            expert_stack *p = realloc(mp->stacks, (size_t)cap * sizeof *p);
            if (!p) return ds_fail(mp->e, DS_ENOMEM, "out of memory");
            mp->stacks = p;
            mp->cap_stacks = cap;
        }
        es = &mp->stacks[mp->n_stacks++];
        memset(es, 0, sizeof *es);
        es->layer = layer;
        es->kind = kind;
        es->type = st->type;
        es->rows = st->shape[0];
        es->cols = st->shape[1];
        /* each expert is a tensor of its own in the files, so the stack cannot be larger than they are:
         * checked before allocating, since num_experts comes from config.json */
        uint64_t files = 0, matrix = ds_dtype_row_bytes(es->type, es->cols) * (uint64_t)es->rows;
        for (int i = 0; i < m->n_shards; i++) files += m->shards[i].map.size;
        if (matrix && (uint64_t)c->n_expert > files / matrix)
            return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s': %d experts of %llu bytes cannot be in %llu bytes of files",
                           shard, st->name, c->n_expert, (unsigned long long)matrix, (unsigned long long)files);
        size_t bytes = ds_dtype_row_bytes(es->type, es->cols) * (size_t)es->rows * (size_t)c->n_expert;
        es->buf = ds_model_alloc(m, bytes);
        es->seen = ds_model_alloc(m, (size_t)c->n_expert);
        if (!es->buf || !es->seen) return ds_fail(mp->e, DS_ENOMEM, "out of memory for expert weights of layer %d", layer);
        memset(es->seen, 0, (size_t)c->n_expert);
    }
    if (st->type != es->type || st->shape[0] != es->rows || st->shape[1] != es->cols)
        return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' differs in dtype or shape from the other experts", shard,
                       st->name);
    if (es->seen[expert]) return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' is defined twice", shard, st->name);
    size_t matrix = ds_dtype_row_bytes(es->type, es->cols) * (size_t)es->rows;
    memcpy(es->buf + matrix * (size_t)expert, st->data, matrix);
    es->seen[expert] = 1;
    es->n_seen++;
    return DS_OK;
}

static ds_status finish_expert_stacks(mapper *mp) {
    static const char *const names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
    static const char *const hf[3] = {"gate_proj", "up_proj", "down_proj"};
    ds_model_file *m = mp->m;
    for (int i = 0; i < mp->n_stacks; i++) {
        expert_stack *es = &mp->stacks[i];
        if (es->n_seen != m->cfg.n_expert) {
            int missing = 0;
            while (es->seen[missing]) missing++;
            return ds_fail(mp->e, DS_ENOTFOUND, "%s: expert %d's %s of layer %d is missing", m->path, missing,
                           hf[es->kind], es->layer);
        }
        ds_tensor t = {.type = es->type, .n_dims = 3, .ne = {es->cols, es->rows, m->cfg.n_expert, 1}, .data = es->buf};
        t.nb2 = ds_dtype_row_bytes(es->type, es->cols) * (size_t)es->rows;
        snprintf(t.name, sizeof t.name, "blk.%d.%s", es->layer, names[es->kind]);
        ds_status s = ds_model_add_tensor(m, &t, mp->e);
        if (s) return s;
    }
    return DS_OK;
}

/* Maps one "layers.<i>.<rest>" tensor (main or MTP) to block `block`. */
static ds_status map_layer_tensor(mapper *mp, const ds_st_tensor *st, const char *shard, int block, const char *rest) {
    int expert, n = 0;
    char proj[16];
    if (sscanf(rest, "mlp.experts.%d.%15[a-z_]%n", &expert, proj, &n) == 2 && strcmp(rest + n, ".weight") == 0) {
        int kind = !strcmp(proj, "gate_proj") ? 0 : !strcmp(proj, "up_proj") ? 1 : !strcmp(proj, "down_proj") ? 2 : -1;
        if (kind < 0) return DS_OK;
        return add_split_expert(mp, st, shard, block, expert, kind);
    }
    for (int i = 0; i < DS_HF_N_LAYER_NAMES; i++) {
        const ds_hf_name *hn = &DS_HF_LAYER_NAMES[i];
        if (strcmp(rest, hn->hf) != 0) continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.%s", block, ds_hf_layer_gguf_name(hn, mp->m->cfg.arch));
        return add_converted(mp, st, shard, name, hn->conv);
    }
    return DS_OK; /* a tensor deltaserve does not use (e.g. a rotary cache) */
}

static ds_status map_tensor(mapper *mp, const ds_st_tensor *st, const char *shard) {
    const ds_model_config *c = &mp->m->cfg;
    const char *name = st->name, *body;
    if (!strncmp(name, "model.visual.", 13) || !strncmp(name, "visual.", 7)) return DS_OK;
    if (ends_with(name, "_scale_inv")) return check_scale_owner(mp, st, shard);
    /* FP8 checkpoints with static activation scales: activations run in F32 here */
    if (ends_with(name, ".input_scale") || ends_with(name, ".activation_scale")) return DS_OK;
    ds_status s = check_dtype(st, shard, mp->e);
    if (s) return s;
    if (!strcmp(name, "lm_head.weight")) {
        if (c->tied_embeddings) return DS_OK; /* tied: the embedding serves as the head */
        return add_converted(mp, st, shard, "output.weight", DS_HF_PLAIN);
    }
    if (!strncmp(name, "mtp.", 4)) {
        if (c->n_mtp == 0) return DS_OK;
        body = name + 4;
        int layer, n = 0;
        if (sscanf(body, "layers.%d.%n", &layer, &n) == 1 && n > 0) {
            if (layer != 0) return ds_fail(mp->e, DS_EUNSUPPORTED, "%s: tensor '%s': only one MTP layer is supported",
                                           shard, name);
            return map_layer_tensor(mp, st, shard, c->n_layer, body + n);
        }
        for (int i = 0; i < DS_HF_N_MTP_NAMES; i++)
            if (!strcmp(body, DS_HF_MTP_NAMES[i].hf)) {
                char nm[64];
                snprintf(nm, sizeof nm, "blk.%d.%s", c->n_layer, DS_HF_MTP_NAMES[i].gguf);
                return add_converted(mp, st, shard, nm, DS_HF_MTP_NAMES[i].conv);
            }
        return DS_OK;
    }
    if (!strncmp(name, "model.language_model.", 21)) body = name + 21;
    else if (!strncmp(name, "model.", 6)) body = name + 6;
    else return DS_OK;
    if (!strcmp(body, "embed_tokens.weight")) return add_converted(mp, st, shard, "token_embd.weight", DS_HF_PLAIN);
    if (!strcmp(body, "norm.weight")) return add_converted(mp, st, shard, "output_norm.weight", DS_HF_NORM);
    int layer, n = 0;
    if (sscanf(body, "layers.%d.%n", &layer, &n) == 1 && n > 0) {
        if (layer < 0 || layer >= c->n_layer)
            return ds_fail(mp->e, DS_ECORRUPT, "%s: tensor '%s' is for layer %d, the config has %d layers", shard, name,
                           layer, c->n_layer);
        return map_layer_tensor(mp, st, shard, layer, body + n);
    }
    return DS_OK;
}

ds_status ds_model_load_hf(ds_model_file *m, const char *dir, ds_err *e) {
    int fp8 = 0;
    ds_status s = read_config(m, dir, &fp8, e);
    if (s) return s;
    if ((s = ds_model_open_shards(m, dir, e))) return s;
    mapper mp = {.m = m, .e = e, .fp8 = fp8};
    uint64_t fp8_elems = 0;
    for (int i = 0; i < m->n_shards; i++)
        for (int j = 0; j < m->shards[i].n_tensors; j++)
            if (!strcmp(m->shards[i].tensors[j].st_dtype, "F8_E4M3")) fp8_elems += m->shards[i].tensors[j].nbytes;
    if (fp8 && fp8_elems) {
        if ((s = ds_pool_new(m->opt.n_threads, &mp.pool, e))) return s;
        ds_progress_start(&mp.progress, m->opt.fp8_as == DS_FP8_AS_BF16 ? "fp8 -> bf16" : "fp8 -> q8_0", fp8_elems);
    }
    for (int i = 0; i < m->n_shards && !s; i++)
        for (int j = 0; j < m->shards[i].n_tensors && !s; j++)
            s = map_tensor(&mp, &m->shards[i].tensors[j], m->shards[i].path);
    if (!s) s = finish_expert_stacks(&mp);
    free(mp.stacks);
    if (mp.pool) {
        if (s) ds_progress_stop(&mp.progress);
        else ds_progress_finish(&mp.progress);
        ds_pool_free(mp.pool);
    }
    if (s) return s;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (file_exists(path) && !(m->tokenizer_json = strdup(path))) return ds_fail(e, DS_ENOMEM, "out of memory");
    return read_chat_template(m, dir, e);
}
