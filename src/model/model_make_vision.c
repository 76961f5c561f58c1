/* model_make_vision.c - make-model's vision tower: random weights of a
 * shape's real tower (ds_vision_shape_config), written as llama.cpp's mmproj
 * GGUF (the keys and types its converter writes for projector qwen3vl) or
 * into a Hugging Face directory beside the text model (model_make.c). The
 * values depend only on the seed and the tensor's name, so both formats
 * hold the same numbers. */
#include "model/model_make_vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "loading/gguf_writer.h"
#include "loading/vision_file_int.h"
#include "model/model_make_policy.h"

static const char *const CLI_NAMES[DS_VF_COUNT] = {
    [DS_VF_LAYERS] = "--vision-layers", [DS_VF_EMBD] = "the tower's width", [DS_VF_HEADS] = "the tower's heads",
    [DS_VF_FF] = "the tower's FFN size", [DS_VF_PATCH] = "the patch size", [DS_VF_MERGE] = "the merge size",
    [DS_VF_POS] = "the position grid", [DS_VF_OUT] = "the output width", [DS_VF_DEEPSTACK] = "--deepstack",
    [DS_VF_EPS] = "the LayerNorm epsilon", [DS_VF_MEAN] = "image_mean", [DS_VF_STD] = "image_std",
    [DS_VF_PIXELS] = "the pixel bounds",
};

ds_status ds_make_vision_config(const ds_make_options *o, const ds_model_config *text, ds_vision_config *vc,
                                ds_err *e) {
    if (!ds_vision_shape_config(o->shape, o->vision_layers, text->n_embd, vc))
        return ds_fail(e, DS_EINVAL, "shape '%s' has no vision tower (the qwen3.5-* shapes, tiny and tiny-moe have one)",
                       o->shape);
    if (o->deepstack_set) {
        vc->n_deepstack = o->n_deepstack;
        memcpy(vc->deepstack_layers, o->deepstack, sizeof vc->deepstack_layers);
    }
    return ds_vision_config_check(vc, o->shape, CLI_NAMES, e);
}


int64_t ds_make_vision_elems(const ds_tensor_spec *s) { return s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3]; }

void ds_make_vision_values(const ds_vision_config *vc, const ds_tensor_spec *s, uint64_t seed, float scale, float *dst) {
    uint64_t st = 1469598103934665603ull ^ seed ^ 0x5669736f6e000000ull; /* "Vision": apart from the text streams */
    for (const char *p = s->name; *p; p++) st = (st ^ (uint8_t)*p) * 1099511628211ull;
    int64_t n = ds_make_vision_elems(s);
    const float sqrt3 = 1.7320508f;
    float amp, base = 0.0f;
    switch (s->kind) {
    case DS_TK_NORM: /* LayerNorm weights near 1 keep every block's input at unit scale */
        base = 1.0f;
        amp = 0.1f;
        break;
    case DS_TK_VECTOR: /* biases: small next to the unit-scale activations */
        amp = 0.05f;
        break;
    case DS_TK_EMBED: /* learned positions: a quarter of the patch signal */
        amp = 0.25f * sqrt3;
        break;
    case DS_TK_CONV: { /* the Conv3D over both frames: fan-in 2 x 3 x P x P */
        amp = scale * sqrt3 / sqrtf((float)(vc->temporal_patch * 3 * vc->patch_size * vc->patch_size));
        break;
    }
    default:
        amp = scale * sqrt3 / sqrtf((float)s->ne[0]);
        break;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = base + amp * ds_make_uniform(&st);
}

/* The types llama.cpp's converter gives an mmproj of file type ft: vectors
 * and the position embedding F32, the patch embedding F16 in an F16 file
 * and F32 otherwise, matrices in the file's float type; mmproj files beside
 * a quantised model are published in F16, so a quantised ft gets F16. */
ds_dtype ds_make_vision_type(const ds_tensor_spec *s, const char *dtype) {
    const ds_file_type *ft = ds_file_type_find(dtype ? dtype : "f32");
    ds_dtype base = ft && ds_file_type_is_float(ft) ? ft->base : DS_F16;
    if (s->n_dims <= 1 || s->kind == DS_TK_EMBED) return DS_F32;
    if (s->kind == DS_TK_CONV) return base == DS_F16 ? DS_F16 : DS_F32;
    return base;
}

typedef struct {
    ds_tensor_spec *v;
    int n, cap;
    int oom;
} vspecs;

static void collect(const ds_tensor_spec *s, void *arg) {
    vspecs *l = arg;
    if (l->oom) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 128;
        ds_tensor_spec *p = realloc(l->v, (size_t)cap * sizeof *p);
        if (!p) { l->oom = 1; return; }
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = *s;
}

ds_status ds_make_vision_specs(const ds_vision_config *vc, ds_tensor_spec **specs, int *n, ds_err *e) {
    vspecs l = {0};
    ds_vision_for_each_spec(vc, collect, &l);
    if (l.oom) {
        free(l.v);
        return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    *specs = l.v;
    *n = l.n;
    return DS_OK;
}

ds_status ds_make_vision_gguf(const ds_make_options *o, const ds_vision_config *vc, const char *path, ds_err *e) {
    ds_tensor_spec *specs = NULL;
    int n = 0;
    ds_status st = ds_make_vision_specs(vc, &specs, &n, e);
    if (st) return st;
    ds_gguf_writer *w = ds_gguf_writer_new(32);
    if (!w) {
        free(specs);
        return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    const ds_file_type *ft = ds_file_type_find(o->dtype ? o->dtype : "f32");
    const char *dtype = ft && ds_file_type_is_float(ft) ? ft->name : "f16";
    ds_gguf_writer_str(w, "general.architecture", "clip");
    ds_gguf_writer_str(w, "general.type", "mmproj");
    char name[128];
    snprintf(name, sizeof name, "deltaserve %s vision seed %llu", o->shape, (unsigned long long)o->seed);
    ds_gguf_writer_str(w, "general.name", name);
    ds_gguf_writer_u32(w, "general.file_type", ds_file_type_find(dtype)->ftype);
    ds_gguf_writer_str(w, "clip.projector_type", "qwen3vl_merger");
    ds_gguf_writer_bool(w, "clip.has_vision_encoder", 1);
    ds_gguf_writer_bool(w, "clip.use_gelu", 1);
    ds_gguf_writer_u32(w, "clip.vision.projection_dim", (uint32_t)vc->out_embd);
    int side = (int)lround(sqrt((double)vc->n_pos));
    ds_gguf_writer_u32(w, "clip.vision.image_size", (uint32_t)(side * vc->patch_size));
    ds_gguf_writer_u32(w, "clip.vision.patch_size", (uint32_t)vc->patch_size);
    ds_gguf_writer_u32(w, "clip.vision.embedding_length", (uint32_t)vc->n_embd);
    ds_gguf_writer_u32(w, "clip.vision.feed_forward_length", (uint32_t)vc->n_ff);
    ds_gguf_writer_u32(w, "clip.vision.block_count", (uint32_t)vc->n_layer);
    ds_gguf_writer_u32(w, "clip.vision.attention.head_count", (uint32_t)vc->n_head);
    ds_gguf_writer_arr_f32(w, "clip.vision.image_mean", vc->image_mean, 3);
    ds_gguf_writer_arr_f32(w, "clip.vision.image_std", vc->image_std, 3);
    ds_gguf_writer_u32(w, "clip.vision.spatial_merge_size", (uint32_t)vc->merge);
    ds_gguf_writer_f32(w, "clip.vision.attention.layer_norm_epsilon", vc->eps);
    uint8_t *flags = calloc((size_t)vc->n_layer, 1);
    if (!flags) st = ds_fail(e, DS_ENOMEM, "out of memory");
    for (int k = 0; flags && k < vc->n_deepstack; k++) flags[vc->deepstack_layers[k]] = 1;
    if (flags) ds_gguf_writer_arr_bool(w, "clip.vision.is_deepstack_layers", flags, (size_t)vc->n_layer);
    free(flags);
    /* the preprocessor's bounds (llama.cpp bounds Qwen-VL images by tokens itself and ignores these) */
    ds_gguf_writer_u32(w, "clip.vision.image_min_pixels", (uint32_t)vc->min_pixels);
    ds_gguf_writer_u32(w, "clip.vision.image_max_pixels", (uint32_t)vc->max_pixels);
    size_t cap = 0;
    for (int i = 0; i < n; i++) {
        ds_gguf_writer_add_tensor(w, specs[i].name, ds_make_vision_type(&specs[i], dtype), specs[i].n_dims, specs[i].ne);
        size_t need = (size_t)ds_make_vision_elems(&specs[i]) * sizeof(float);
        if (need > cap) cap = need;
    }
    if (!st) st = ds_gguf_writer_begin(w, path, e);
    float *vals = st ? NULL : malloc(cap);
    uint8_t *out = st ? NULL : malloc(cap);
    if (!st && (!vals || !out)) st = ds_fail(e, DS_ENOMEM, "out of memory");
    for (int i = 0; i < n && !st; i++) {
        ds_dtype t = ds_make_vision_type(&specs[i], dtype);
        int64_t cnt = ds_make_vision_elems(&specs[i]);
        ds_make_vision_values(vc, &specs[i], o->seed, o->scale > 0 ? o->scale : 1.0f, vals);
        ds_quantize_row(t, vals, out, cnt);
        st = ds_gguf_writer_tensor_chunk(w, i, out, ds_dtype_row_bytes(t, cnt), e);
    }
    if (!st) st = ds_gguf_writer_finish(w, e);
    free(vals);
    free(out);
    free(specs);
    ds_gguf_writer_free(w);
    return st;
}
