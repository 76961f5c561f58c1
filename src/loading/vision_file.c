/* vision_file.c - the vision tower as one description (vision_file.h): the
 * tensors a config implies, validating a loaded tower against them, the
 * shapes make-model writes, and finding the tower beside a model.
 *
 * A tower is kept in a ds_model_file of its own (model_file_int.h): the
 * tensor table, the buffers of converted tensors and the mapped GGUF file or
 * safetensors shards are the same things the text model needs, and closing
 * it frees them all. */
#include "loading/vision_file_int.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* --- the tensors of a config --- */

typedef struct {
    void (*fn)(const ds_tensor_spec *, void *);
    void *ctx;
} vemitter;

static void vemit(vemitter *em, ds_tensor_kind kind, int layer, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                  int64_t ne3, const char *fmt, ...) __attribute__((format(printf, 9, 10)));
static void vemit(vemitter *em, ds_tensor_kind kind, int layer, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                  int64_t ne3, const char *fmt, ...) {
    ds_tensor_spec s = {.n_dims = n_dims, .ne = {ne0, ne1, ne2, ne3}, .kind = kind, .layer = layer};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s.name, sizeof s.name, fmt, ap);
    va_end(ap);
    em->fn(&s, em->ctx);
}

/* A LayerNorm (weight and bias) and a linear layer (weight and bias), ggml order. */
static void layer_norm(vemitter *em, int layer, int64_t n, const char *base) {
    vemit(em, DS_TK_NORM, layer, 1, n, 1, 1, 1, "%s.weight", base);
    vemit(em, DS_TK_VECTOR, layer, 1, n, 1, 1, 1, "%s.bias", base);
}

static void linear(vemitter *em, int layer, int64_t in, int64_t out, const char *base) {
    vemit(em, DS_TK_MATRIX, layer, 2, in, out, 1, 1, "%s.weight", base);
    vemit(em, DS_TK_VECTOR, layer, 1, out, 1, 1, 1, "%s.bias", base);
}

void ds_vision_for_each_spec(const ds_vision_config *vc, void (*fn)(const ds_tensor_spec *, void *), void *ctx) {
    vemitter em = {fn, ctx};
    int64_t D = vc->n_embd, F = vc->n_ff, P = vc->patch_size, M = (int64_t)vc->merge * vc->merge * D,
            E = vc->out_embd;
    vemit(&em, DS_TK_CONV, -1, 4, P, P, 3, D, "v.patch_embd.weight");
    vemit(&em, DS_TK_CONV, -1, 4, P, P, 3, D, "v.patch_embd.weight.1");
    vemit(&em, DS_TK_VECTOR, -1, 1, D, 1, 1, 1, "v.patch_embd.bias");
    vemit(&em, DS_TK_EMBED, -1, 2, D, vc->n_pos, 1, 1, "v.position_embd.weight");
    char base[64];
    for (int i = 0; i < vc->n_layer; i++) {
        snprintf(base, sizeof base, "v.blk.%d.ln1", i);
        layer_norm(&em, i, D, base);
        snprintf(base, sizeof base, "v.blk.%d.attn_qkv", i);
        linear(&em, i, D, 3 * D, base);
        snprintf(base, sizeof base, "v.blk.%d.attn_out", i);
        linear(&em, i, D, D, base);
        snprintf(base, sizeof base, "v.blk.%d.ln2", i);
        layer_norm(&em, i, D, base);
        snprintf(base, sizeof base, "v.blk.%d.ffn_up", i);
        linear(&em, i, D, F, base);
        snprintf(base, sizeof base, "v.blk.%d.ffn_down", i);
        linear(&em, i, F, D, base);
    }
    layer_norm(&em, -1, D, "v.post_ln");
    linear(&em, -1, M, M, "mm.0");
    linear(&em, -1, M, E, "mm.2");
    for (int k = 0; k < vc->n_deepstack; k++) {
        int l = vc->deepstack_layers[k];
        snprintf(base, sizeof base, "v.deepstack.%d.norm", l);
        layer_norm(&em, l, M, base);
        snprintf(base, sizeof base, "v.deepstack.%d.fc1", l);
        linear(&em, l, M, M, base);
        snprintf(base, sizeof base, "v.deepstack.%d.fc2", l);
        linear(&em, l, M, E, base);
    }
}

/* --- config checks --- */

ds_status ds_vision_config_check(const ds_vision_config *vc, const char *path, const char *const names[DS_VF_COUNT],
                                 ds_err *e) {
#define BAD(f, ...) ds_fail(e, DS_ECORRUPT, "%s: %s " __VA_ARGS__)
    if (vc->n_layer < 1 || vc->n_layer >= DS_MAX_LAYERS)
        return BAD(DS_VF_LAYERS, "= %d is out of range (1..%d)", path, names[DS_VF_LAYERS], vc->n_layer, DS_MAX_LAYERS - 1);
    if (vc->n_embd < 1 || vc->n_embd > 65536)
        return BAD(DS_VF_EMBD, "= %d is out of range (1..65536)", path, names[DS_VF_EMBD], vc->n_embd);
    if (vc->n_head < 1 || vc->n_embd % vc->n_head != 0 || (vc->n_embd / vc->n_head) % 4 != 0)
        return BAD(DS_VF_HEADS, "= %d does not divide the width %d into heads of a multiple of 4 (two rotary axes)",
                   path, names[DS_VF_HEADS], vc->n_head, vc->n_embd);
    if (vc->n_ff < 1 || vc->n_ff > 1 << 20)
        return BAD(DS_VF_FF, "= %d is out of range (1..%d)", path, names[DS_VF_FF], vc->n_ff, 1 << 20);
    if (vc->patch_size < 1 || vc->patch_size > 1024)
        return BAD(DS_VF_PATCH, "= %d is out of range (1..1024)", path, names[DS_VF_PATCH], vc->patch_size);
    if (vc->merge < 1 || vc->merge > 8)
        return BAD(DS_VF_MERGE, "= %d is out of range (1..8)", path, names[DS_VF_MERGE], vc->merge);
    int side = (int)lround(sqrt((double)vc->n_pos));
    if (vc->n_pos < 1 || vc->n_pos > 1 << 22 || side * side != vc->n_pos)
        return BAD(DS_VF_POS, "= %d is not a square grid of positions", path, names[DS_VF_POS], vc->n_pos);
    if (vc->out_embd < 1 || vc->out_embd > 1 << 20)
        return BAD(DS_VF_OUT, "= %d is out of range (1..%d)", path, names[DS_VF_OUT], vc->out_embd, 1 << 20);
    if (vc->n_deepstack < 0 || vc->n_deepstack > DS_MAX_DEEPSTACK)
        return BAD(DS_VF_DEEPSTACK, "has %d layers (at most %d)", path, names[DS_VF_DEEPSTACK], vc->n_deepstack,
                   DS_MAX_DEEPSTACK);
    for (int k = 0; k < vc->n_deepstack; k++) {
        int l = vc->deepstack_layers[k];
        if (l < 0 || l >= vc->n_layer || (k && l <= vc->deepstack_layers[k - 1]))
            return BAD(DS_VF_DEEPSTACK, "names block %d, not an increasing block index below %d", path,
                       names[DS_VF_DEEPSTACK], l, vc->n_layer);
    }
    if (!(vc->eps > 0 && vc->eps < 1))
        return BAD(DS_VF_EPS, "= %g is not a LayerNorm epsilon in (0, 1)", path, names[DS_VF_EPS], (double)vc->eps);
    for (int c = 0; c < 3; c++) {
        if (!isfinite(vc->image_mean[c]))
            return BAD(DS_VF_MEAN, "[%d] is not finite", path, names[DS_VF_MEAN], c);
        if (!(vc->image_std[c] > 0) || !isfinite(vc->image_std[c]))
            return BAD(DS_VF_STD, "[%d] = %g is not positive", path, names[DS_VF_STD], c, (double)vc->image_std[c]);
    }
    /* (smart resize never goes below one merged patch, whatever min_pixels says) */
    if (vc->min_pixels < 1 || vc->min_pixels > vc->max_pixels || vc->max_pixels > ((int64_t)1 << 34))
        return BAD(DS_VF_PIXELS, "= %lld..%lld is not a pixel range", path, names[DS_VF_PIXELS],
                   (long long)vc->min_pixels, (long long)vc->max_pixels);
#undef BAD
    return DS_OK;
}

/* --- validation of a loaded tower --- */

typedef struct {
    ds_vision_file *v;
    ds_err *e;
    ds_status status;
    int n_seen;
} validate_ctx;

/* How a Hugging Face checkpoint calls tensor s, for messages ("" for GGUF). */
static void hf_alias(const ds_vision_file *v, const char *name, char *buf, size_t n) {
    char hf[160];
    *buf = 0;
    if (v->m->format == DS_FORMAT_SAFETENSORS && ds_vision_hf_name(&v->cfg, name, hf, sizeof hf) >= 0)
        snprintf(buf, n, " (model.visual.%s)", hf);
}

static void validate_one(const ds_tensor_spec *s, void *arg) {
    validate_ctx *c = arg;
    ds_model_file *m = c->v->m;
    if (c->status) return;
    char alias[200];
    hf_alias(c->v, s->name, alias, sizeof alias);
    ds_tensor *t = (ds_tensor *)ds_model_tensor(m, s->name);
    if (!t) {
        c->status = ds_fail(c->e, DS_ENOTFOUND, "%s: tensor '%s'%s is missing", m->path, s->name, alias);
        return;
    }
    c->n_seen++;
    int same = t->n_dims <= 4;
    for (int d = 0; d < 4; d++) same &= (d < t->n_dims ? t->ne[d] : 1) == s->ne[d];
    if (!same) {
        char got[96], want[96];
        ds_tensor_shape_text(got, sizeof got, t->n_dims, t->ne);
        ds_tensor_shape_text(want, sizeof want, s->n_dims, s->ne);
        c->status = ds_fail(c->e, DS_ECORRUPT, "%s: tensor '%s'%s has shape %s, the config implies %s", m->path,
                            s->name, alias, got, want);
        return;
    }
    t->n_dims = s->n_dims;
    if (!ds_dtype_computable(t->type)) {
        c->status = ds_fail(c->e, DS_EUNSUPPORTED, "%s: tensor '%s' is %s, a type deltaserve reads but cannot compute yet",
                            m->path, s->name, ds_dtype_get(t->type)->name);
        return;
    }
    if (s->kind == DS_TK_MATRIX) return;
    /* the patch and position embeddings are read element by element: F32,
     * as norms and biases, whatever the file stored */
    if (ds_dtype_get(t->type)->block_elems != 1 && s->kind != DS_TK_EMBED && s->kind != DS_TK_CONV) {
        c->status = ds_fail(c->e, DS_EUNSUPPORTED, "%s: tensor '%s' is %s; norms and biases must be f32, f16 or bf16",
                            m->path, s->name, ds_dtype_get(t->type)->name);
        return;
    }
    if (ds_dtype_get(t->type)->block_elems != 1) {
        int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        float *dst = ds_model_alloc(m, (size_t)n * sizeof(float));
        if (!dst) {
            c->status = ds_fail(c->e, DS_ENOMEM, "%s: out of memory converting tensor '%s'", m->path, s->name);
            return;
        }
        ds_dequantize_row(t->type, t->data, dst, n);
        t->data = (const uint8_t *)dst;
        t->type = DS_F32;
        t->nb2 = (size_t)t->ne[0] * (size_t)t->ne[1] * sizeof(float);
        return;
    }
    c->status = ds_model_tensor_to_f32(m, t, c->e);
}

ds_status ds_vision_validate(ds_vision_file *v, ds_err *e) {
    validate_ctx c = {.v = v, .e = e};
    ds_vision_for_each_spec(&v->cfg, validate_one, &c);
    if (c.status) return c.status;
    if (c.n_seen != v->m->n_tensors) {
        /* a tensor the config does not explain: a DeepStack merger the config
         * leaves out, or a block beyond the count, would be silently unused */
        for (int i = 0; i < v->m->n_tensors; i++)
            if (!ds_vision_spec_has(&v->cfg, v->m->tensors[i].name))
                return ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' is not part of a tower with this config (%d blocks, "
                               "%d DeepStack mergers)", v->m->path, v->m->tensors[i].name, v->cfg.n_layer,
                               v->cfg.n_deepstack);
    }
    return DS_OK;
}

typedef struct {
    const char *name;
    int found;
} has_ctx;

static void has_one(const ds_tensor_spec *s, void *arg) {
    has_ctx *c = arg;
    c->found |= strcmp(s->name, c->name) == 0;
}

int ds_vision_spec_has(const ds_vision_config *vc, const char *name) {
    has_ctx c = {name, 0};
    ds_vision_for_each_spec(vc, has_one, &c);
    return c.found;
}

/* --- opening and closing --- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

ds_status ds_vision_open(const char *path, ds_vision_file **out, ds_err *e) {
    *out = NULL;
    ds_vision_file *v = calloc(1, sizeof *v);
    ds_model_file *m = calloc(1, sizeof *m);
    if (!v || !m || !(m->path = strdup(path))) {
        free(v);
        if (m) free(m->path);
        free(m);
        return ds_fail(e, DS_ENOMEM, "%s: out of memory", path);
    }
    v->m = m;
    m->cfg.pad_id = -1;
    ds_status s;
    struct stat st;
    if (stat(path, &st) != 0) {
        s = ds_fail(e, DS_ENOTFOUND, "%s: no such file or directory (the vision tower)", path);
    } else if (S_ISDIR(st.st_mode)) {
        m->format = DS_FORMAT_SAFETENSORS;
        s = ds_vision_load_hf(v, path, e);
    } else if (ends_with(path, "config.json") && (strlen(path) == 11 || path[strlen(path) - 12] == '/')) {
        char *dir = strndup(path, strlen(path) - 11);
        m->format = DS_FORMAT_SAFETENSORS;
        s = dir ? ds_vision_load_hf(v, *dir ? dir : ".", e) : ds_fail(e, DS_ENOMEM, "out of memory");
        free(dir);
    } else {
        m->format = DS_FORMAT_GGUF;
        s = ds_vision_load_gguf(v, e);
    }
    if (!s) s = ds_vision_validate(v, e);
    if (s) {
        ds_vision_close(v);
        return s;
    }
    *out = v;
    return DS_OK;
}

void ds_vision_close(ds_vision_file *v) {
    if (!v) return;
    ds_model_close(v->m);
    free(v);
}

const ds_vision_config *ds_vision_config_of(const ds_vision_file *v) { return &v->cfg; }
const char *ds_vision_path(const ds_vision_file *v) { return v->m->path; }
const ds_tensor *ds_vision_tensor(const ds_vision_file *v, const char *name) { return ds_model_tensor(v->m, name); }
int ds_vision_n_tensors(const ds_vision_file *v) { return v->m->n_tensors; }
const ds_tensor *ds_vision_tensor_at(const ds_vision_file *v, int i) {
    return i >= 0 && i < v->m->n_tensors ? &v->m->tensors[i] : NULL;
}

/* --- the shapes make-model writes --- */

int ds_vision_shape_config(const char *shape, int n_layers, int out_embd, ds_vision_config *vc) {
    memset(vc, 0, sizeof *vc);
    /* both Qwen3.5 and Qwen3.6 keep Qwen3-VL's preprocessing: mean = std = 0.5,
     * smart resize between 256x256 and 4096x4096 pixels */
    vc->patch_size = 16;
    vc->temporal_patch = 2;
    vc->merge = 2;
    vc->eps = 1e-6f;
    vc->rope_theta = 10000.0f;
    for (int c = 0; c < 3; c++) vc->image_mean[c] = vc->image_std[c] = 0.5f;
    vc->min_pixels = 65536;
    vc->max_pixels = 16777216;
    if (!strcmp(shape, "tiny") || !strcmp(shape, "tiny-moe")) {
        /* small, with every structural feature: heads of 16 (two rotary axes of
         * 8), a 8x8 learned position grid to interpolate from */
        vc->n_layer = 2;
        vc->n_embd = 64;
        vc->n_head = 4;
        vc->n_ff = 128;
        vc->n_pos = 64;
        vc->out_embd = 256;
        vc->min_pixels = 1024;
        vc->max_pixels = 1048576;
    } else if (!strncmp(shape, "qwen3.5-", 8)) {
        /* the released Qwen3.5 towers: 27 blocks of 1152, no DeepStack */
        vc->n_layer = 27;
        vc->n_embd = 1152;
        vc->n_head = 16;
        vc->n_ff = 4304;
        vc->n_pos = 2304;
        vc->out_embd = 0;
    } else {
        return 0;
    }
    if (out_embd > 0) vc->out_embd = out_embd;
    if (n_layers > 0) vc->n_layer = n_layers;
    return vc->out_embd > 0;
}

/* --- finding the tower beside a model --- */

static size_t common_prefix(const char *a, const char *b) {
    size_t n = 0;
    while (a[n] && a[n] == b[n]) n++;
    return n;
}

/* What a model's name and an mmproj's share, after the mmproj's own prefix:
 * "Qwen3.5-4B-Q4_K_M.gguf" and "mmproj-Qwen3.5-4B-F16.gguf" share "Qwen3.5-4B-". */
static size_t name_match(const char *model, const char *mmproj) {
    const char *p = mmproj + 6;
    while (*p == '-' || *p == '_' || *p == '.') p++;
    return common_prefix(model, p);
}

int ds_vision_find(const char *model_path, char *out, size_t out_size) {
    struct stat st;
    if (!model_path || stat(model_path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode) || ends_with(model_path, "config.json")) {
        /* a Hugging Face checkpoint: the tower is in the same files */
        char cfg[4096];
        if (S_ISDIR(st.st_mode)) snprintf(cfg, sizeof cfg, "%s/config.json", model_path);
        else snprintf(cfg, sizeof cfg, "%s", model_path);
        if (!ds_vision_hf_has_config(cfg)) return 0;
        if (S_ISDIR(st.st_mode)) return snprintf(out, out_size, "%s", model_path) < (int)out_size;
        size_t n = strlen(model_path) - strlen("config.json"); /* the directory, its slash left out */
        if (n > 1) n--;
        return snprintf(out, out_size, "%.*s", (int)(n ? n : 1), n ? model_path : ".") < (int)out_size;
    }
    char dir[4096];
    const char *slash = strrchr(model_path, '/');
    const char *base = slash ? slash + 1 : model_path;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - model_path ? slash - model_path : 1), model_path);
    else snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(dir);
    if (!d) return 0;
    char best[1024] = "";
    size_t best_match = 0;
    int n_found = 0, n_best = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (strncasecmp(nm, "mmproj", 6) != 0 || !ends_with(nm, ".gguf") || !strcmp(nm, base)) continue;
        char full[4096 + 256];
        snprintf(full, sizeof full, "%s/%s", dir, nm);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t m = name_match(base, nm);
        n_found++;
        if (n_found == 1 || m > best_match) {
            best_match = m;
            n_best = 1;
            snprintf(best, sizeof best, "%s", nm);
        } else if (m == best_match) {
            n_best++;
        }
    }
    closedir(d);
    /* several towers and none of them named for the model more than the
     * others: picking one would be a guess, and a wrong tower encodes images
     * into nonsense without an error */
    if (n_found == 0 || (n_found > 1 && (best_match == 0 || n_best > 1))) return 0;
    if (slash) return snprintf(out, out_size, "%s/%s", dir, best) < (int)out_size;
    return snprintf(out, out_size, "%s", best) < (int)out_size;
}
