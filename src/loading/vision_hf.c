/* vision_hf.c - the vision tower of a Hugging Face checkpoint directory
 * (Qwen3_5ForConditionalGeneration, Qwen3VLForConditionalGeneration):
 * vision_config in config.json, model.visual.* tensors in the same
 * safetensors files as the text model, preprocessor_config.json for the
 * image normalisation and pixel bounds. Tensors are mapped onto the mmproj
 * names as llama.cpp's converter maps them; the Conv3D patch embedding
 * [D, 3, 2, P, P] is split into its two frames. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loading/json_file.h"
#include "loading/vision_file_int.h"

#define MAX_JSON_BYTES (64u << 20)

static const char *const HF_NAMES[DS_VF_COUNT] = {
    [DS_VF_LAYERS] = "field 'vision_config.depth'",
    [DS_VF_EMBD] = "field 'vision_config.hidden_size'",
    [DS_VF_HEADS] = "field 'vision_config.num_heads'",
    [DS_VF_FF] = "field 'vision_config.intermediate_size'",
    [DS_VF_PATCH] = "field 'vision_config.patch_size'",
    [DS_VF_MERGE] = "field 'vision_config.spatial_merge_size'",
    [DS_VF_POS] = "field 'vision_config.num_position_embeddings'",
    [DS_VF_OUT] = "field 'vision_config.out_hidden_size'",
    [DS_VF_DEEPSTACK] = "field 'vision_config.deepstack_visual_indexes'",
    [DS_VF_EPS] = "the LayerNorm epsilon",
    [DS_VF_MEAN] = "preprocessor_config.json field 'image_mean'",
    [DS_VF_STD] = "preprocessor_config.json field 'image_std'",
    [DS_VF_PIXELS] = "preprocessor_config.json field 'size' (shortest_edge..longest_edge)",
};

/* --- names --- */

int ds_vision_hf_name(const ds_vision_config *vc, const char *name, char *hf, size_t n) {
    static const struct { const char *gguf, *hf; } BLOCK[] = {
        {"ln1.", "norm1."}, {"ln2.", "norm2."}, {"attn_qkv.", "attn.qkv."}, {"attn_out.", "attn.proj."},
        {"ffn_up.", "mlp.linear_fc1."}, {"ffn_down.", "mlp.linear_fc2."}};
    static const struct { const char *gguf, *hf; } MERGER[] = {
        {"norm.", "norm."}, {"fc1.", "linear_fc1."}, {"fc2.", "linear_fc2."}};
    int idx, off = 0;
    if (!strcmp(name, "v.patch_embd.weight")) return snprintf(hf, n, "patch_embed.proj.weight"), DS_VH_PATCH0;
    if (!strcmp(name, "v.patch_embd.weight.1")) return snprintf(hf, n, "patch_embed.proj.weight"), DS_VH_PATCH1;
    if (!strcmp(name, "v.patch_embd.bias")) return snprintf(hf, n, "patch_embed.proj.bias"), DS_VH_PLAIN;
    if (!strcmp(name, "v.position_embd.weight")) return snprintf(hf, n, "pos_embed.weight"), DS_VH_PLAIN;
    if (!strncmp(name, "v.post_ln.", 10)) return snprintf(hf, n, "merger.norm.%s", name + 10), DS_VH_PLAIN;
    if (!strncmp(name, "mm.0.", 5)) return snprintf(hf, n, "merger.linear_fc1.%s", name + 5), DS_VH_PLAIN;
    if (!strncmp(name, "mm.2.", 5)) return snprintf(hf, n, "merger.linear_fc2.%s", name + 5), DS_VH_PLAIN;
    if (sscanf(name, "v.blk.%d.%n", &idx, &off) == 1 && off > 0) {
        for (size_t i = 0; i < sizeof BLOCK / sizeof BLOCK[0]; i++)
            if (!strncmp(name + off, BLOCK[i].gguf, strlen(BLOCK[i].gguf)))
                return snprintf(hf, n, "blocks.%d.%s%s", idx, BLOCK[i].hf, name + off + strlen(BLOCK[i].gguf)),
                       DS_VH_PLAIN;
        return -1;
    }
    if (sscanf(name, "v.deepstack.%d.%n", &idx, &off) == 1 && off > 0) {
        /* the mmproj names the block a merger reads; HF numbers the mergers */
        int k = 0;
        while (k < vc->n_deepstack && vc->deepstack_layers[k] != idx) k++;
        if (k == vc->n_deepstack) return -1;
        for (size_t i = 0; i < sizeof MERGER / sizeof MERGER[0]; i++)
            if (!strncmp(name + off, MERGER[i].gguf, strlen(MERGER[i].gguf)))
                return snprintf(hf, n, "deepstack_merger_list.%d.%s%s", k, MERGER[i].hf,
                                name + off + strlen(MERGER[i].gguf)),
                       DS_VH_PLAIN;
    }
    return -1;
}

/* --- config --- */

typedef struct {
    const char *path;
    const json_t *obj;
    const char *prefix;  /* for messages: "vision_config." or "" */
    ds_err *e;
} reader;

/* def < 0: required */
static ds_status get_int(reader *r, const char *name, int def, int *out) {
    const json_t *v = json_object_get(r->obj, name);
    if (!v || json_is_null(v)) {
        if (def >= 0) {
            *out = def;
            return DS_OK;
        }
        return ds_fail(r->e, DS_ENOTFOUND, "%s: field '%s%s' is missing", r->path, r->prefix, name);
    }
    uint64_t u;
    if (ds_json_uint(v, 1u << 30, &u) != 0)
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s%s' is not a non-negative integer", r->path, r->prefix, name);
    *out = (int)u;
    return DS_OK;
}

static ds_status get_rgb(reader *r, const char *name, float *out) {
    const json_t *v = json_object_get(r->obj, name);
    if (!v) return DS_OK; /* the default stays */
    if (!json_is_array(v) || json_array_size(v) != 3)
        return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s' is not an array of 3 numbers (R, G, B)", r->path, name);
    for (int c = 0; c < 3; c++) {
        const json_t *x = json_array_get(v, (size_t)c);
        if (!json_is_number(x) || !(fabs(json_number_value(x)) <= FLT_MAX))
            return ds_fail(r->e, DS_ECORRUPT, "%s: field '%s'[%d] is not a number", r->path, name, c);
        out[c] = (float)json_number_value(x);
    }
    return DS_OK;
}

/* preprocessor_config.json: the normalisation and the smart-resize bounds
 * (size.shortest_edge / longest_edge in pixels, as Qwen3-VL's processor has
 * them, or the older min_pixels / max_pixels) */
static ds_status read_preprocessor(const char *dir, ds_vision_config *vc, ds_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    json_t *root;
    ds_status s = ds_json_file_read(path, MAX_JSON_BYTES, 1, &root, e);
    if (s || !root) return s;
    reader r = {.path = path, .obj = root, .prefix = "", .e = e};
    int lo = (int)vc->min_pixels, hi = (int)vc->max_pixels;
    const json_t *size = json_object_get(root, "size");
    if ((s = get_rgb(&r, "image_mean", vc->image_mean)) || (s = get_rgb(&r, "image_std", vc->image_std)) ||
        (s = get_int(&r, "min_pixels", lo, &lo)) || (s = get_int(&r, "max_pixels", hi, &hi))) {
        json_decref(root);
        return s;
    }
    if (json_is_object(size)) {
        reader rs = {.path = path, .obj = size, .prefix = "size.", .e = e};
        if ((s = get_int(&rs, "shortest_edge", lo, &lo)) || (s = get_int(&rs, "longest_edge", hi, &hi))) {
            json_decref(root);
            return s;
        }
    }
    vc->min_pixels = lo;
    vc->max_pixels = hi;
    json_decref(root);
    return DS_OK;
}

static ds_status read_config(const char *dir, ds_vision_config *vc, ds_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root;
    ds_status s = ds_json_file_read(path, MAX_JSON_BYTES, 0, &root, e);
    if (s) return s;
    const json_t *v = json_object_get(root, "vision_config");
    if (!json_is_object(v)) {
        json_decref(root);
        return ds_fail(e, DS_ENOTFOUND, "%s: field 'vision_config' is %s: the checkpoint has no vision tower", path,
                       v ? "not an object" : "missing");
    }
    reader r = {.path = path, .obj = v, .prefix = "vision_config.", .e = e};
    int temporal, channels, text_embd = 0;
    if ((s = get_int(&r, "depth", -1, &vc->n_layer)) || (s = get_int(&r, "hidden_size", -1, &vc->n_embd)) ||
        (s = get_int(&r, "num_heads", -1, &vc->n_head)) || (s = get_int(&r, "intermediate_size", -1, &vc->n_ff)) ||
        (s = get_int(&r, "patch_size", -1, &vc->patch_size)) ||
        (s = get_int(&r, "temporal_patch_size", 2, &temporal)) ||
        (s = get_int(&r, "spatial_merge_size", 2, &vc->merge)) ||
        (s = get_int(&r, "num_position_embeddings", -1, &vc->n_pos)) ||
        (s = get_int(&r, "out_hidden_size", -1, &vc->out_embd)) || (s = get_int(&r, "in_channels", 3, &channels)))
        goto done;
    if (temporal != 2) {
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: field 'vision_config.temporal_patch_size' is %d; the tower is built for "
                    "frame pairs (2)", path, temporal);
        goto done;
    }
    if (channels != 3) {
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: field 'vision_config.in_channels' is %d, not 3 (RGB)", path, channels);
        goto done;
    }
    const json_t *act = json_object_get(v, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0)) {
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: field 'vision_config.hidden_act' is %s; the tower's MLP is "
                    "gelu_pytorch_tanh", path, json_is_string(act) ? json_string_value(act) : "not a string");
        goto done;
    }
    const json_t *ds = json_object_get(v, "deepstack_visual_indexes");
    vc->n_deepstack = 0;
    if (ds && !json_is_null(ds)) {
        if (!json_is_array(ds) || json_array_size(ds) > DS_MAX_DEEPSTACK) {
            s = ds_fail(e, DS_ECORRUPT, "%s: field 'vision_config.deepstack_visual_indexes' is not an array of at most "
                        "%d block indexes", path, DS_MAX_DEEPSTACK);
            goto done;
        }
        for (size_t k = 0; k < json_array_size(ds); k++) {
            uint64_t u;
            if (ds_json_uint(json_array_get(ds, k), 1u << 20, &u) != 0) {
                s = ds_fail(e, DS_ECORRUPT, "%s: field 'vision_config.deepstack_visual_indexes'[%zu] is not a block "
                            "index", path, k);
                goto done;
            }
            vc->deepstack_layers[vc->n_deepstack++] = (int)u;
        }
    }
    /* the merger writes into the text model's residual stream */
    const json_t *tc = json_object_get(root, "text_config");
    reader rt = {.path = path, .obj = json_is_object(tc) ? tc : root, .prefix = json_is_object(tc) ? "text_config." : "",
                 .e = e};
    if ((s = get_int(&rt, "hidden_size", 0, &text_embd))) goto done;
    if (text_embd && text_embd != vc->out_embd) {
        s = ds_fail(e, DS_ECORRUPT, "%s: field 'vision_config.out_hidden_size' = %d, but the text model's hidden_size "
                    "is %d", path, vc->out_embd, text_embd);
        goto done;
    }
    /* Qwen3-VL's vision LayerNorms are built with eps 1e-6 (llama.cpp's
     * converter writes the text model's rms_norm_eps, the same 1e-6) */
    vc->eps = 1e-6f;
    vc->temporal_patch = 2;
    vc->rope_theta = 10000.0f;
    for (int c = 0; c < 3; c++) vc->image_mean[c] = vc->image_std[c] = 0.5f;
    vc->min_pixels = 65536;
    vc->max_pixels = 16777216;
    if ((s = read_preprocessor(dir, vc, e))) goto done;
    s = ds_vision_config_check(vc, path, HF_NAMES, e);
done:
    json_decref(root);
    return s;
}

int ds_vision_hf_has_config(const char *config_json) {
    json_t *root;
    ds_err e = {0};
    if (ds_json_file_read(config_json, MAX_JSON_BYTES, 1, &root, &e) != DS_OK || !root) return 0;
    int has = json_is_object(json_object_get(root, "vision_config"));
    json_decref(root);
    return has;
}

/* --- tensors --- */

static const ds_st_tensor *find_visual(const ds_model_file *m, const char *hf, const char **shard) {
    char full[192];
    for (int pass = 0; pass < 2; pass++) {
        snprintf(full, sizeof full, "%s%s", pass ? "visual." : "model.visual.", hf);
        for (int i = 0; i < m->n_shards; i++) {
            const ds_st_tensor *t = ds_safetensors_find(&m->shards[i], full);
            if (t) {
                *shard = m->shards[i].path;
                return t;
            }
        }
    }
    return NULL;
}

static int is_visual(const char *name) { return !strncmp(name, "model.visual.", 13) || !strncmp(name, "visual.", 7); }

/* frame t of the Conv3D weight [D, 3, 2, P, P] as an F32 {P, P, 3, D} */
static ds_status split_patch(ds_vision_file *v, const ds_st_tensor *st, const char *shard, int frame, ds_tensor *t,
                             ds_err *e) {
    const ds_vision_config *vc = &v->cfg;
    int64_t D = vc->n_embd, P = vc->patch_size;
    if (st->n_dims != 5 || st->shape[0] != D || st->shape[1] != 3 || st->shape[2] != 2 || st->shape[3] != P ||
        st->shape[4] != P)
        return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' (v.patch_embd.weight and .weight.1) should have shape [%lld, "
                       "3, 2, %lld, %lld] (Conv3D: width, RGB, frames, patch, patch)", shard, st->name, (long long)D,
                       (long long)P, (long long)P);
    int64_t per = P * P, n = D * 3 * per;
    float *dst = ds_model_alloc(v->m, (size_t)n * sizeof(float));
    size_t esz = ds_dtype_row_bytes(st->type, 1);
    uint8_t *tmp = malloc((size_t)per * esz);
    if (!dst || !tmp) {
        free(tmp);
        return ds_fail(e, DS_ENOMEM, "%s: out of memory converting tensor '%s'", shard, st->name);
    }
    for (int64_t dc = 0; dc < D * 3; dc++) {
        /* through an aligned copy: safetensors data need not be aligned */
        memcpy(tmp, st->data + (size_t)((dc * 2 + frame) * per) * esz, (size_t)per * esz);
        ds_dequantize_row(st->type, tmp, dst + dc * per, per);
    }
    free(tmp);
    t->type = DS_F32;
    t->n_dims = 4;
    t->ne[0] = P;
    t->ne[1] = P;
    t->ne[2] = 3;
    t->ne[3] = D;
    t->nb2 = (size_t)(P * P) * sizeof(float);
    t->data = (const uint8_t *)dst;
    return DS_OK;
}

typedef struct {
    ds_vision_file *v;
    ds_err *e;
    ds_status status;
    int n_found;
} map_ctx;

static void map_one(const ds_tensor_spec *s, void *arg) {
    map_ctx *c = arg;
    if (c->status) return;
    char hf[160];
    int conv = ds_vision_hf_name(&c->v->cfg, s->name, hf, sizeof hf);
    const char *shard = NULL;
    const ds_st_tensor *st = conv < 0 ? NULL : find_visual(c->v->m, hf, &shard);
    if (!st) {
        c->status = ds_fail(c->e, DS_ENOTFOUND, "%s: tensor 'model.visual.%s' is missing (the tower's %s)",
                            c->v->m->path, conv < 0 ? s->name : hf, s->name);
        return;
    }
    if (conv != DS_VH_PATCH1) c->n_found++;
    if (!st->has_dtype || (st->type != DS_F32 && st->type != DS_F16 && st->type != DS_BF16)) {
        c->status = ds_fail(c->e, DS_EUNSUPPORTED, "%s: tensor '%s' has dtype %s; vision weights must be F32, F16 or "
                            "BF16", shard, st->name, st->st_dtype);
        return;
    }
    if (st->n_dims > 5) {
        c->status = ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' has %d dimensions", shard, st->name, st->n_dims);
        return;
    }
    ds_tensor t = {.type = st->type, .data = st->data};
    snprintf(t.name, sizeof t.name, "%s", s->name);
    if (conv == DS_VH_PATCH0 || conv == DS_VH_PATCH1) {
        c->status = split_patch(c->v, st, shard, conv == DS_VH_PATCH1, &t, c->e);
        if (c->status) return;
    } else {
        if (st->n_dims > 4) {
            c->status = ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s' has %d dimensions", shard, st->name, st->n_dims);
            return;
        }
        t.n_dims = st->n_dims ? st->n_dims : 1;
        for (int d = 0; d < 4; d++) t.ne[d] = d < st->n_dims ? st->shape[st->n_dims - 1 - d] : 1;
        t.nb2 = ds_dtype_row_bytes(t.type, t.ne[0]) * (size_t)t.ne[1];
    }
    c->status = ds_model_add_tensor(c->v->m, &t, c->e);
}

ds_status ds_vision_load_hf(ds_vision_file *v, const char *dir, ds_err *e) {
    ds_status s = read_config(dir, &v->cfg, e);
    if (s) return s;
    if ((s = ds_model_open_shards(v->m, dir, e))) return s;
    map_ctx c = {.v = v, .e = e};
    ds_vision_for_each_spec(&v->cfg, map_one, &c);
    if (c.status) return c.status;
    /* a visual tensor the config does not explain (a DeepStack merger
     * deepstack_visual_indexes leaves out, a block beyond depth) */
    int n_visual = 0;
    for (int i = 0; i < v->m->n_shards; i++)
        for (int j = 0; j < v->m->shards[i].n_tensors; j++) n_visual += is_visual(v->m->shards[i].tensors[j].name);
    if (n_visual == c.n_found) return DS_OK;
    for (int i = 0; i < v->m->n_shards; i++)
        for (int j = 0; j < v->m->shards[i].n_tensors; j++) {
            const char *name = v->m->shards[i].tensors[j].name;
            if (!is_visual(name)) continue;
            const char *body = name + (name[0] == 'm' ? 13 : 7);
            int known = 0;
            for (int k = 0; k < v->m->n_tensors && !known; k++) {
                char hf[160];
                known = ds_vision_hf_name(&v->cfg, v->m->tensors[k].name, hf, sizeof hf) >= 0 && !strcmp(hf, body);
            }
            if (!known)
                return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' is not part of a tower with this config (depth %d, "
                               "%d DeepStack mergers)", v->m->shards[i].path, name, v->cfg.n_layer, v->cfg.n_deepstack);
        }
    return DS_OK;
}
