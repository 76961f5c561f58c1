/* vision_gguf.c - llama.cpp's mmproj GGUF (projector type qwen3vl_merger) as a
 * ds_vision_file. The converter (Qwen3VLVisionModel) writes the keys read
 * here under clip.* and the tensors under the names vision_file.h lists, in
 * the canonical form already: they are used in place. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "loading/vision_file_int.h"

static const char *const GGUF_NAMES[DS_VF_COUNT] = {
    [DS_VF_LAYERS] = "key 'clip.vision.block_count'",
    [DS_VF_EMBD] = "key 'clip.vision.embedding_length'",
    [DS_VF_HEADS] = "key 'clip.vision.attention.head_count'",
    [DS_VF_FF] = "key 'clip.vision.feed_forward_length'",
    [DS_VF_PATCH] = "key 'clip.vision.patch_size'",
    [DS_VF_MERGE] = "key 'clip.vision.spatial_merge_size'",
    [DS_VF_POS] = "tensor 'v.position_embd.weight' (its rows)",
    [DS_VF_OUT] = "key 'clip.vision.projection_dim'",
    [DS_VF_DEEPSTACK] = "key 'clip.vision.is_deepstack_layers'",
    [DS_VF_EPS] = "key 'clip.vision.attention.layer_norm_epsilon'",
    [DS_VF_MEAN] = "key 'clip.vision.image_mean'",
    [DS_VF_STD] = "key 'clip.vision.image_std'",
    [DS_VF_PIXELS] = "keys 'clip.vision.image_min_pixels'/'image_max_pixels'",
};

/* A required positive integer no larger than 1 << 30. */
static ds_status get_int(const ds_gguf *g, const char *key, int *out, ds_err *e) {
    uint32_t v;
    ds_status s = ds_gguf_get_u32(g, key, &v, e);
    if (s) return s;
    if (v > (1u << 30)) return ds_fail(e, DS_ECORRUPT, "%s: key '%s' = %u is out of range", g->path, key, v);
    *out = (int)v;
    return DS_OK;
}

static ds_status get_opt_int(const ds_gguf *g, const char *key, int def, int *out, ds_err *e) {
    if (!ds_gguf_find(g, key)) {
        *out = def;
        return DS_OK;
    }
    return get_int(g, key, out, e);
}

static ds_status get_rgb(const ds_gguf *g, const char *key, float *out, ds_err *e) {
    const ds_gguf_kv *kv = ds_gguf_find(g, key);
    if (!kv) return ds_fail(e, DS_ENOTFOUND, "%s: key '%s' is missing", g->path, key);
    if (kv->type != DS_GGUF_ARRAY || kv->arr_len != 3)
        return ds_fail(e, DS_ECORRUPT, "%s: key '%s' is not an array of 3 floats (R, G, B)", g->path, key);
    return ds_gguf_arr_floats(g, kv, out, e);
}

static ds_status get_flag(const ds_gguf *g, const char *key, bool *out, ds_err *e) {
    ds_status s = ds_gguf_get_bool(g, key, out, e);
    if (s == DS_ENOTFOUND) *out = false;
    return s == DS_ENOTFOUND ? DS_OK : s;
}

/* The DeepStack blocks: from is_deepstack_layers (one flag per block) when
 * the file has it, else from the v.deepstack.N tensors it has, as llama.cpp
 * finds them. */
static ds_status read_deepstack(const ds_gguf *g, ds_vision_config *vc, ds_err *e) {
    const char *key = "clip.vision.is_deepstack_layers";
    const ds_gguf_kv *kv = ds_gguf_find(g, key);
    vc->n_deepstack = 0;
    for (int l = 0; l < vc->n_layer; l++) {
        int on;
        if (kv) {
            if (kv->type != DS_GGUF_ARRAY || kv->arr_type != DS_GGUF_BOOL || kv->arr_len != (uint64_t)vc->n_layer)
                return ds_fail(e, DS_ECORRUPT, "%s: key '%s' is not an array of %d booleans (one per block)", g->path,
                               key, vc->n_layer);
            on = kv->val[l] != 0;
        } else {
            char name[64];
            snprintf(name, sizeof name, "v.deepstack.%d.fc1.weight", l);
            on = ds_gguf_find_tensor(g, name) != NULL;
        }
        if (!on) continue;
        if (vc->n_deepstack == DS_MAX_DEEPSTACK)
            return ds_fail(e, DS_EUNSUPPORTED, "%s: more than %d DeepStack layers (%s)", g->path, DS_MAX_DEEPSTACK,
                           kv ? key : "v.deepstack.* tensors");
        vc->deepstack_layers[vc->n_deepstack++] = l;
    }
    return DS_OK;
}

static ds_status read_config(const ds_gguf *g, ds_vision_config *vc, ds_err *e) {
    ds_str str;
    ds_status s = ds_gguf_get_str(g, "general.architecture", &str, e);
    if (s == DS_OK && !ds_str_eq(str, "clip"))
        return ds_fail(e, DS_EINVAL, "%s: general.architecture is '%.*s', not 'clip': this is not an mmproj (vision "
                       "tower) file", g->path, (int)(str.len < 64 ? str.len : 64), str.ptr);
    if (s && s != DS_ENOTFOUND) return s;
    const char *proj_key = "clip.projector_type";
    if (!ds_gguf_find(g, proj_key)) proj_key = "clip.vision.projector_type";
    if ((s = ds_gguf_get_str(g, proj_key, &str, e))) {
        if (s == DS_ENOTFOUND)
            return ds_fail(e, DS_ENOTFOUND, "%s: key 'clip.projector_type' (or clip.vision.projector_type) is missing",
                           g->path);
        return s;
    }
    if (!ds_str_eq(str, "qwen3vl_merger"))
        return ds_fail(e, DS_EUNSUPPORTED, "%s: key '%s' is '%.*s'; the Qwen3-VL / Qwen3.5 tower (qwen3vl_merger) is the only "
                       "one deltaserve runs", g->path, proj_key, (int)(str.len < 64 ? str.len : 64), str.ptr);
    bool flag;
    if ((s = ds_gguf_get_bool(g, "clip.has_vision_encoder", &flag, e))) return s;
    if (!flag) return ds_fail(e, DS_EINVAL, "%s: key 'clip.has_vision_encoder' is false: the file has no vision tower", g->path);
    /* llama.cpp takes the MLP's activation from these flags: without use_gelu
     * it runs GELU-quick, another function than the model was trained with */
    if ((s = get_flag(g, "clip.use_gelu", &flag, e))) return s;
    if (!flag)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: key 'clip.use_gelu' is %s; the qwen3vl tower's MLP is GELU (tanh form)",
                       g->path, ds_gguf_find(g, "clip.use_gelu") ? "false" : "missing");
    if ((s = get_flag(g, "clip.use_silu", &flag, e))) return s;
    if (flag) return ds_fail(e, DS_EUNSUPPORTED, "%s: key 'clip.use_silu' is true; the qwen3vl tower's MLP is GELU", g->path);

    int image_size, head_dim, n_head_kv, min_px, max_px;
    if ((s = get_int(g, "clip.vision.block_count", &vc->n_layer, e)) ||
        (s = get_int(g, "clip.vision.embedding_length", &vc->n_embd, e)) ||
        (s = get_int(g, "clip.vision.feed_forward_length", &vc->n_ff, e)) ||
        (s = get_int(g, "clip.vision.attention.head_count", &vc->n_head, e)) ||
        (s = get_int(g, "clip.vision.projection_dim", &vc->out_embd, e)) ||
        (s = get_int(g, "clip.vision.patch_size", &vc->patch_size, e)) ||
        (s = get_int(g, "clip.vision.image_size", &image_size, e)) ||
        (s = get_opt_int(g, "clip.vision.spatial_merge_size", 2, &vc->merge, e)) ||
        (s = ds_gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &vc->eps, e)) ||
        (s = get_rgb(g, "clip.vision.image_mean", vc->image_mean, e)) ||
        (s = get_rgb(g, "clip.vision.image_std", vc->image_std, e)))
        return s;
    if (vc->n_layer < 1 || vc->n_layer >= DS_MAX_LAYERS)
        return ds_fail(e, DS_ECORRUPT, "%s: %s = %d is out of range (1..%d)", g->path, GGUF_NAMES[DS_VF_LAYERS],
                       vc->n_layer, DS_MAX_LAYERS - 1);
    if (vc->n_head < 1) return ds_fail(e, DS_ECORRUPT, "%s: %s is 0", g->path, GGUF_NAMES[DS_VF_HEADS]);
    if ((s = get_opt_int(g, "clip.vision.attention.head_count_kv", vc->n_head, &n_head_kv, e)) ||
        (s = get_opt_int(g, "clip.vision.attention.head_dim", vc->n_embd / vc->n_head, &head_dim, e)))
        return s;
    if (n_head_kv != vc->n_head)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: key 'clip.vision.attention.head_count_kv' = %d, not head_count %d: the "
                       "qwen3vl tower has no grouped-query attention", g->path, n_head_kv, vc->n_head);
    if (ds_gguf_find(g, "clip.vision.attention.head_dim") && head_dim * vc->n_head != vc->n_embd)
        return ds_fail(e, DS_ECORRUPT, "%s: key 'clip.vision.attention.head_dim' = %d, but %d heads of it are not the "
                       "width %d", g->path, head_dim, vc->n_head, vc->n_embd);
    /* llama.cpp bounds Qwen-VL images by token count; these keys, when a file
     * has them, say the pixels, and otherwise the HF processor's defaults hold */
    if ((s = get_opt_int(g, "clip.vision.image_min_pixels", 65536, &min_px, e)) ||
        (s = get_opt_int(g, "clip.vision.image_max_pixels", 16777216, &max_px, e)))
        return s;
    vc->min_pixels = min_px;
    vc->max_pixels = max_px;
    vc->temporal_patch = 2;
    vc->rope_theta = 10000.0f;
    if ((s = read_deepstack(g, vc, e))) return s;
    const ds_gguf_tensor *pos = ds_gguf_find_tensor(g, "v.position_embd.weight");
    if (!pos) return ds_fail(e, DS_ENOTFOUND, "%s: tensor 'v.position_embd.weight' is missing", g->path);
    vc->n_pos = pos->ne[1] > 0 && pos->ne[1] <= (1 << 22) ? (int)pos->ne[1] : 0;
    if ((s = ds_vision_config_check(vc, g->path, GGUF_NAMES, e))) return s;
    int side = 1;
    while (side * side < vc->n_pos) side++;
    /* the converter writes image_size as sqrt(positions) x patch */
    if (image_size != side * vc->patch_size)
        return ds_fail(e, DS_ECORRUPT, "%s: key 'clip.vision.image_size' = %d, but %d positions of %d-pixel patches "
                       "make %d", g->path, image_size, vc->n_pos, vc->patch_size, side * vc->patch_size);
    return DS_OK;
}

ds_status ds_vision_load_gguf(ds_vision_file *v, ds_err *e) {
    ds_model_file *m = v->m;
    ds_status s = ds_gguf_open(&m->gguf, m->path, e);
    if (s) return s;
    if ((s = read_config(&m->gguf, &v->cfg, e))) return s;
    return ds_model_add_gguf_tensors(m, e);
}
