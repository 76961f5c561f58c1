/* test_vision_file.c - loading the vision tower (vision_file.h):
 *   - make-model's mmproj GGUF loads back with the config it was made from
 *     and every tensor holding make-model's values (F32 exactly; F16 within
 *     its rounding), Qwen3.5-style and with DeepStack;
 *   - the tensor list of a config: the mmproj names and ggml shapes;
 *   - the shapes' towers (ds_vision_shape_config);
 *   - every config key missing or wrong, every tensor missing or misshaped,
 *     in an mmproj GGUF and in a Hugging Face directory, gives an error
 *     naming the file and the key or tensor;
 *   - ds_vision_find's rules. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loading/gguf.h"
#include "loading/gguf_writer.h"
#include "loading/vision_file.h"
#include "loading/vision_file_int.h"
#include "model/model_make.h"
#include "model/model_make_vision.h"
#include "testing.h"

static char tmpdir[256];

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

/* make-model of shape tiny with its tower; deepstack < 0: the shape's */
static int make_fmt(ds_format fmt, const char *text, const char *mmproj, const char *dtype, int vlayers, int n_ds,
                    const int *ds, uint64_t seed) {
    ds_make_options o = {.shape = "tiny", .dtype = dtype, .format = fmt, .seed = seed, .scale = 1.0f,
                         .out = text, .mmproj_out = mmproj, .n_layers = 1, .no_mtp = 1, .vision_layers = vlayers,
                         .vision = fmt == DS_FORMAT_SAFETENSORS,
                         .deepstack_set = n_ds >= 0, .n_deepstack = n_ds > 0 ? n_ds : 0};
    for (int k = 0; k < o.n_deepstack; k++) o.deepstack[k] = ds[k];
    ds_err e = {0};
    if (ds_make_model(&o, &e)) {
        printf("     make %s: %s\n", text, e.msg);
        return -1;
    }
    return 0;
}

static int make(const char *text, const char *mmproj, const char *dtype, int vlayers, int n_ds, const int *ds,
                uint64_t seed) {
    return make_fmt(DS_FORMAT_GGUF, text, mmproj, dtype, vlayers, n_ds, ds, seed);
}

typedef struct {
    const ds_vision_file *v;
    const ds_vision_config *vc;
    uint64_t seed;
    int n, bad, f16;
    char first_bad[96];
} values_ctx;

static void check_values(const ds_tensor_spec *s, void *arg) {
    values_ctx *c = arg;
    const ds_tensor *t = ds_vision_tensor(c->v, s->name);
    c->n++;
    if (!t) {
        if (!c->bad++) snprintf(c->first_bad, sizeof c->first_bad, "%s (missing)", s->name);
        return;
    }
    int64_t n = ds_make_vision_elems(s);
    float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    if (!want || !got) abort();
    ds_make_vision_values(c->vc, s, c->seed, 1.0f, want);
    ds_dequantize_row(t->type, t->data, got, n);
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++)
        ok = c->f16 ? fabsf(got[i] - want[i]) <= 1e-3f * (1 + fabsf(want[i])) : got[i] == want[i];
    for (int d = 0; d < 4; d++) ok &= t->ne[d] == s->ne[d];
    ok &= t->n_dims == s->n_dims;
    /* norms, biases and both embeddings are F32 after loading */
    ok &= s->kind == DS_TK_MATRIX || t->type == DS_F32;
    if (!ok && !c->bad++) snprintf(c->first_bad, sizeof c->first_bad, "%s", s->name);
    free(want);
    free(got);
}

static void roundtrip(const char *name, const char *dtype, int vlayers, int n_ds, const int *ds) {
    char text[512], mm[512];
    char f[128];
    snprintf(f, sizeof f, "text-%s.gguf", name);
    path_of(text, sizeof text, f);
    snprintf(f, sizeof f, "mmproj-%s.gguf", name);
    path_of(mm, sizeof mm, f);
    REQUIRE(make(text, mm, dtype, vlayers, n_ds, ds, 7) == 0, "make");
    ds_vision_file *v;
    ds_err e = {0};
    REQUIRE(ds_vision_open(mm, &v, &e) == DS_OK, "%s", e.msg);
    const ds_vision_config *vc = ds_vision_config_of(v);
    ds_vision_config want;
    REQUIRE(ds_vision_shape_config("tiny", vlayers, 256, &want), "shape");
    if (n_ds >= 0) {
        want.n_deepstack = n_ds;
        for (int k = 0; k < n_ds; k++) want.deepstack_layers[k] = ds[k];
    }
    CHECK(vc->n_layer == want.n_layer && vc->n_embd == 64 && vc->n_head == 4 && vc->n_ff == 128 &&
              vc->patch_size == 16 && vc->temporal_patch == 2 && vc->merge == 2 && vc->n_pos == 64 &&
              vc->out_embd == 256,
          "config: layers %d embd %d heads %d ff %d patch %d/%d merge %d pos %d out %d", vc->n_layer, vc->n_embd,
          vc->n_head, vc->n_ff, vc->patch_size, vc->temporal_patch, vc->merge, vc->n_pos, vc->out_embd);
    CHECK(vc->n_deepstack == want.n_deepstack &&
              !memcmp(vc->deepstack_layers, want.deepstack_layers, sizeof(int) * (size_t)want.n_deepstack),
          "deepstack: %d layers", vc->n_deepstack);
    CHECK(vc->eps == 1e-6f && vc->rope_theta == 10000.0f && vc->image_mean[1] == 0.5f && vc->image_std[2] == 0.5f &&
              vc->min_pixels == want.min_pixels && vc->max_pixels == want.max_pixels,
          "eps %g theta %g mean %g std %g pixels %lld..%lld", (double)vc->eps, (double)vc->rope_theta,
          (double)vc->image_mean[1], (double)vc->image_std[2], (long long)vc->min_pixels, (long long)vc->max_pixels);
    CHECK(!strcmp(ds_vision_path(v), mm), "path %s", ds_vision_path(v));
    values_ctx c = {.v = v, .vc = vc, .seed = 7, .f16 = strcmp(dtype, "f32") != 0};
    ds_vision_for_each_spec(vc, check_values, &c);
    CHECK(c.bad == 0, "%d of %d tensors differ from make-model's values, first %s", c.bad, c.n, c.first_bad);
    CHECK(ds_vision_n_tensors(v) == c.n, "%d tensors in the file, %d in the spec", ds_vision_n_tensors(v), c.n);
    CHECK(ds_vision_tensor(v, "v.blk.0.ln1.weight") != NULL && ds_vision_tensor(v, "nope") == NULL, "lookup");
    CHECK(ds_vision_tensor_at(v, 0) != NULL && ds_vision_tensor_at(v, c.n) == NULL, "tensor_at");
    ds_vision_close(v);
}

static void test_roundtrip_gguf_f32(void) { roundtrip("f32", "f32", 0, -1, NULL); }

static void test_roundtrip_gguf_deepstack(void) {
    int ds[2] = {0, 2};
    roundtrip("ds", "f32", 3, 2, ds);
}

static void test_roundtrip_gguf_f16(void) { roundtrip("f16", "f16", 0, -1, NULL); }

/* a quantised text model gets an F16 tower, as published mmproj files are */
static void test_roundtrip_gguf_q8(void) { roundtrip("q8", "q8_0", 0, -1, NULL); }

/* The same seed gives the same tower in both formats: every tensor equal,
 * bit for bit, in F32 (the HF Conv3D split into the two GGUF frames). */
static void hf_case(const char *name, int n_ds, const int *ds, int config_path) {
    char text[512], mm[512], dir[512], f[128];
    snprintf(f, sizeof f, "text-hf-%s.gguf", name);
    path_of(text, sizeof text, f);
    snprintf(f, sizeof f, "mmproj-hf-%s.gguf", name);
    path_of(mm, sizeof mm, f);
    snprintf(f, sizeof f, "hf-%s", name);
    path_of(dir, sizeof dir, f);
    REQUIRE(make(text, mm, "f32", 0, n_ds, ds, 11) == 0, "make gguf");
    REQUIRE(make_fmt(DS_FORMAT_SAFETENSORS, dir, NULL, "f32", 0, n_ds, ds, 11) == 0, "make hf");
    char open_path[600];
    snprintf(open_path, sizeof open_path, config_path ? "%s/config.json" : "%s", dir);
    ds_vision_file *g, *h;
    ds_err e = {0};
    REQUIRE(ds_vision_open(mm, &g, &e) == DS_OK, "%s", e.msg);
    if (ds_vision_open(open_path, &h, &e) != DS_OK) {
        ds_vision_close(g);
        REQUIRE(0, "hf: %s", e.msg);
    }
    CHECK(!memcmp(ds_vision_config_of(g), ds_vision_config_of(h), sizeof(ds_vision_config)),
          "the configs differ (hf: %d layers, %d DeepStack)", ds_vision_config_of(h)->n_layer,
          ds_vision_config_of(h)->n_deepstack);
    CHECK(ds_vision_n_tensors(g) == ds_vision_n_tensors(h), "%d tensors, hf %d", ds_vision_n_tensors(g),
          ds_vision_n_tensors(h));
    int same = 0;
    for (int i = 0; i < ds_vision_n_tensors(g); i++) {
        const ds_tensor *a = ds_vision_tensor_at(g, i), *b = ds_vision_tensor(h, a->name);
        int ok = b && a->type == b->type && a->n_dims == b->n_dims && !memcmp(a->ne, b->ne, sizeof a->ne) &&
                 !memcmp(a->data, b->data, ds_tensor_bytes(a));
        if (!ok) printf("     %s differs\n", a->name);
        same += ok;
    }
    CHECK(same == ds_vision_n_tensors(g), "%d of %d tensors equal", same, ds_vision_n_tensors(g));
    ds_vision_close(g);
    ds_vision_close(h);
}

static void test_hf_equals_gguf(void) { hf_case("plain", -1, NULL, 0); }

static void test_hf_equals_gguf_deepstack(void) {
    int ds[2] = {0, 1};
    hf_case("ds", 2, ds, 1);
}

typedef struct {
    int n;
    int64_t params;
    char names[8][64];
    int64_t ne[8][4];
} list_ctx;

static void list_one(const ds_tensor_spec *s, void *arg) {
    list_ctx *c = arg;
    if (c->n < 8) {
        snprintf(c->names[c->n], 64, "%s", s->name);
        memcpy(c->ne[c->n], s->ne, sizeof s->ne);
    }
    c->n++;
    c->params += s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
}

static void test_specs_qwen35(void) {
    ds_vision_config vc;
    REQUIRE(ds_vision_shape_config("qwen3.5-4b", 0, 2560, &vc), "qwen3.5-4b has a tower");
    CHECK(vc.n_layer == 27 && vc.n_embd == 1152 && vc.n_ff == 4304 && vc.n_head == 16 && vc.n_pos == 2304 &&
              vc.n_deepstack == 0 && vc.out_embd == 2560 && vc.patch_size == 16 && vc.merge == 2,
          "qwen3.5 tower");
    list_ctx c = {0};
    ds_vision_for_each_spec(&vc, list_one, &c);
    /* 4 + 12 per block + 2 + 4 */
    CHECK(c.n == 4 + 12 * 27 + 6, "%d tensors", c.n);
    CHECK(!strcmp(c.names[0], "v.patch_embd.weight") && c.ne[0][0] == 16 && c.ne[0][1] == 16 && c.ne[0][2] == 3 &&
              c.ne[0][3] == 1152,
          "patch embedding %s", c.names[0]);
    CHECK(!strcmp(c.names[1], "v.patch_embd.weight.1") && !strcmp(c.names[3], "v.position_embd.weight") &&
              c.ne[3][0] == 1152 && c.ne[3][1] == 2304,
          "position embedding %s", c.names[3]);
    CHECK(!strcmp(c.names[6], "v.blk.0.attn_qkv.weight") && c.ne[6][0] == 1152 && c.ne[6][1] == 3456, "qkv %s",
          c.names[6]);
    /* the released checkpoint's tower: about 0.4B parameters */
    CHECK(c.params > 400000000 && c.params < 460000000, "%lld parameters", (long long)c.params);
    CHECK(ds_vision_shape_config("qwen3.5-0.8b", 2, 1024, &vc) && vc.n_layer == 2 && vc.out_embd == 1024,
          "vision layers override");
    CHECK(!ds_vision_shape_config("tiny-qwen3", 0, 256, &vc) && !ds_vision_shape_config("qwen3-0.6b", 0, 1024, &vc),
          "text-only shapes have no tower");
}

typedef struct {
    const char *name;
    int64_t ne[4];
    int found;
} find_ctx;

static void find_one(const ds_tensor_spec *s, void *arg) {
    find_ctx *c = arg;
    if (strcmp(s->name, c->name) == 0) {
        c->found++;
        memcpy(c->ne, s->ne, sizeof s->ne);
    }
}

static void test_specs_deepstack(void) {
    ds_vision_config vc;
    REQUIRE(ds_vision_shape_config("tiny", 0, 0, &vc), "tiny");
    CHECK(vc.n_deepstack == 0 && vc.out_embd == 256, "tiny: %d DeepStack, out %d", vc.n_deepstack, vc.out_embd);
    vc.n_deepstack = 1;
    vc.deepstack_layers[0] = 1;
    list_ctx c = {0};
    ds_vision_for_each_spec(&vc, list_one, &c);
    CHECK(c.n == 4 + 12 * 2 + 6 + 6, "%d tensors", c.n);
    /* the DeepStack merger's LayerNorm is over the 2x2-merged 4D */
    struct { const char *name; int64_t ne0, ne1; } want[] = {
        {"v.deepstack.1.norm.weight", 256, 1}, {"v.deepstack.1.norm.bias", 256, 1},
        {"v.deepstack.1.fc1.weight", 256, 256}, {"v.deepstack.1.fc2.weight", 256, 256},
        {"v.deepstack.1.fc2.bias", 256, 1}, {"v.post_ln.weight", 64, 1}, {"mm.0.weight", 256, 256},
        {"mm.2.weight", 256, 256}, {"v.blk.1.ffn_up.weight", 64, 128}, {"v.blk.1.ffn_down.weight", 128, 64},
        {"v.blk.1.attn_out.weight", 64, 64}, {"v.patch_embd.bias", 64, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        find_ctx f = {.name = want[i].name};
        ds_vision_for_each_spec(&vc, find_one, &f);
        CHECK(f.found == 1 && f.ne[0] == want[i].ne0 && f.ne[1] == want[i].ne1, "%s: found %d, [%lld, %lld]",
              want[i].name, f.found, (long long)f.ne[0], (long long)f.ne[1]);
    }
    find_ctx none = {.name = "v.deepstack.0.fc1.weight"};
    ds_vision_for_each_spec(&vc, find_one, &none);
    CHECK(none.found == 0, "a DeepStack merger after block 0");
}

/* --- damaged files --- */

/* A copy of the GGUF file src at dst, with key `key` dropped (kind 'd') or
 * set to a value ('u' u32, 'f' f32, 's' string, 'b' bool, 'F' 3 floats,
 * 'B' bools), and tensor `tensor` dropped (grow < 0) or grown by `grow`
 * elements along ne[0] (ne[1] for grow_dim 1). */
typedef struct {
    const char *key;
    char kind;
    uint32_t u;
    float f;
    const char *str;
    const float *fs;
    int n;
    const uint8_t *bs;
} kv_edit;

static int copy_gguf(const char *src, const char *dst, const kv_edit *ed, const char *tensor, int grow, int grow_dim) {
    ds_gguf g;
    ds_err e = {0};
    if (ds_gguf_open(&g, src, &e)) {
        printf("     %s\n", e.msg);
        return -1;
    }
    ds_gguf_writer *w = ds_gguf_writer_new(32);
    int done = 0;
    for (uint64_t i = 0; i < g.n_kv; i++) {
        const ds_gguf_kv *kv = &g.kv[i];
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (ed && !strcmp(key, ed->key)) {
            done = 1;
            switch (ed->kind) {
            case 'u': ds_gguf_writer_u32(w, key, ed->u); break;
            case 'f': ds_gguf_writer_f32(w, key, ed->f); break;
            case 's': ds_gguf_writer_str(w, key, ed->str); break;
            case 'b': ds_gguf_writer_bool(w, key, (int)ed->u); break;
            case 'F': ds_gguf_writer_arr_f32(w, key, ed->fs, (size_t)ed->n); break;
            case 'B': ds_gguf_writer_arr_bool(w, key, ed->bs, (size_t)ed->n); break;
            default: break; /* 'd': dropped */
            }
            continue;
        }
        if (kv->type == DS_GGUF_STRING) {
            ds_str v;
            ds_gguf_get_str(&g, key, &v, &e);
            char *c = strndup(v.ptr, (size_t)v.len);
            ds_gguf_writer_str(w, key, c);
            free(c);
        } else if (kv->type == DS_GGUF_BOOL) {
            ds_gguf_writer_bool(w, key, kv->val[0]);
        } else if (kv->type == DS_GGUF_FLOAT32) {
            float f;
            memcpy(&f, kv->val, 4);
            ds_gguf_writer_f32(w, key, f);
        } else if (kv->type == DS_GGUF_UINT32) {
            uint32_t u;
            memcpy(&u, kv->val, 4);
            ds_gguf_writer_u32(w, key, u);
        } else if (kv->type == DS_GGUF_ARRAY && kv->arr_type == DS_GGUF_FLOAT32) {
            float f[16];
            ds_gguf_arr_floats(&g, kv, f, &e);
            ds_gguf_writer_arr_f32(w, key, f, kv->arr_len);
        } else if (kv->type == DS_GGUF_ARRAY && kv->arr_type == DS_GGUF_BOOL) {
            ds_gguf_writer_arr_bool(w, key, kv->val, kv->arr_len);
        } else {
            printf("     %s: key type %u not copied\n", key, kv->type);
        }
    }
    if (ed && !done && ed->kind != 'd') { /* a key the file does not have: added */
        kv_edit add = *ed;
        if (add.kind == 'u') ds_gguf_writer_u32(w, add.key, add.u);
        else if (add.kind == 'b') ds_gguf_writer_bool(w, add.key, (int)add.u);
    }
    int idx[1024], n = 0;
    size_t cap = 0;
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const ds_gguf_tensor *t = &g.tensors[i];
        int64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        if (tensor && !strcmp(t->name, tensor)) {
            if (grow < 0) continue;
            ne[grow_dim] += grow;
        }
        idx[n++] = (int)i;
        ds_gguf_writer_add_tensor(w, t->name, t->type, (int)t->n_dims, ne);
        if (ds_gguf_writer_tensor_bytes(w, n - 1) > cap) cap = ds_gguf_writer_tensor_bytes(w, n - 1);
    }
    uint8_t *buf = calloc(1, cap + 1);
    ds_status st = ds_gguf_writer_begin(w, dst, &e);
    for (int k = 0; k < n && !st; k++) {
        const ds_gguf_tensor *t = &g.tensors[idx[k]];
        size_t bytes = ds_gguf_writer_tensor_bytes(w, k);
        memset(buf, 0, bytes);
        memcpy(buf, t->data, bytes < t->nbytes ? bytes : t->nbytes);
        st = ds_gguf_writer_tensor_chunk(w, k, buf, bytes, &e);
    }
    if (!st) st = ds_gguf_writer_finish(w, &e);
    if (st) printf("     writing %s: %s\n", dst, e.msg);
    free(buf);
    ds_gguf_writer_free(w);
    ds_gguf_close(&g);
    return st ? -1 : 0;
}

/* opening path fails, with a message that has every one of the strings */
static int refused(const char *path, const char *what, const char *s1, const char *s2) {
    ds_vision_file *v;
    ds_err e = {0};
    if (ds_vision_open(path, &v, &e) == DS_OK) {
        ds_vision_close(v);
        printf("     %s: loaded\n", what);
        return 0;
    }
    if (v != NULL || !strstr(e.msg, path) || (s1 && !strstr(e.msg, s1)) || (s2 && !strstr(e.msg, s2))) {
        printf("     %s: message '%s' (wanted '%s'%s%s)\n", what, e.msg, s1 ? s1 : "", s2 ? " and " : "", s2 ? s2 : "");
        return 0;
    }
    return 1;
}

static void test_gguf_keys(void) {
    char plain[512], ds[512], text[512], bad[512];
    path_of(plain, sizeof plain, "mmproj-keys.gguf");
    path_of(ds, sizeof ds, "mmproj-keys-ds.gguf");
    path_of(text, sizeof text, "text-keys.gguf");
    path_of(bad, sizeof bad, "mmproj-bad.gguf");
    int dsl[2] = {0, 1};
    REQUIRE(make(text, plain, "f32", 0, -1, NULL, 3) == 0, "make");
    REQUIRE(make(text, ds, "f32", 0, 2, dsl, 3) == 0, "make deepstack");
    const char *required[] = {"clip.projector_type", "clip.has_vision_encoder", "clip.use_gelu",
                              "clip.vision.block_count", "clip.vision.embedding_length",
                              "clip.vision.feed_forward_length", "clip.vision.attention.head_count",
                              "clip.vision.projection_dim", "clip.vision.patch_size", "clip.vision.image_size",
                              "clip.vision.attention.layer_norm_epsilon", "clip.vision.image_mean",
                              "clip.vision.image_std"};
    int n_ok = 0, n = 0;
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++, n++) {
        kv_edit ed = {.key = required[i], .kind = 'd'};
        n_ok += copy_gguf(plain, bad, &ed, NULL, 0, 0) == 0 && refused(bad, required[i], required[i], NULL);
    }
    /* the optional keys have llama.cpp's defaults: the file still loads */
    const char *optional[] = {"clip.vision.spatial_merge_size", "clip.vision.is_deepstack_layers",
                              "clip.vision.image_min_pixels", "general.architecture"};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++, n++) {
        kv_edit ed = {.key = optional[i], .kind = 'd'};
        ds_vision_file *v = NULL;
        ds_err e = {0};
        int ok = copy_gguf(ds, bad, &ed, NULL, 0, 0) == 0 && ds_vision_open(bad, &v, &e) == DS_OK;
        /* without is_deepstack_layers the mergers are found by their tensors */
        ok = ok && ds_vision_config_of(v)->n_deepstack == 2 && ds_vision_config_of(v)->merge == 2;
        if (!ok) printf("     without %s: %s\n", optional[i], e.msg);
        n_ok += ok;
        ds_vision_close(v);
    }
    static const float two[2] = {0.5f, 0.5f}, zero_std[3] = {0.5f, 0.0f, 0.5f};
    static const uint8_t flags3[3] = {1, 0, 0}, flags_none[2] = {0, 0}, flags_one[2] = {0, 1};
    struct {
        kv_edit ed;
        const char *src, *s1, *s2;
    } wrong[] = {
        {{"clip.projector_type", 's', .str = "mlp"}, plain, "clip.projector_type", "'mlp'"},
        {{"general.architecture", 's', .str = "qwen35"}, plain, "general.architecture", "not an mmproj"},
        {{"clip.has_vision_encoder", 'b', .u = 0}, plain, "clip.has_vision_encoder", NULL},
        {{"clip.use_gelu", 'b', .u = 0}, plain, "clip.use_gelu", NULL},
        {{"clip.use_silu", 'b', .u = 1}, plain, "clip.use_silu", NULL},
        {{"clip.vision.block_count", 'u', .u = 0}, plain, "clip.vision.block_count", NULL},
        {{"clip.vision.block_count", 'u', .u = 3}, plain, "clip.vision.is_deepstack_layers", "3 booleans"},
        {{"clip.vision.block_count", 's', .str = "two"}, plain, "clip.vision.block_count", NULL},
        {{"clip.vision.embedding_length", 'u', .u = 128}, plain, "v.patch_embd.weight", "shape"},
        {{"clip.vision.embedding_length", 'u', .u = 65}, plain, "clip.vision.attention.head_count", NULL},
        {{"clip.vision.attention.head_count", 'u', .u = 3}, plain, "clip.vision.attention.head_count", NULL},
        {{"clip.vision.attention.head_count", 'u', .u = 0}, plain, "clip.vision.attention.head_count", NULL},
        {{"clip.vision.attention.head_count_kv", 'u', .u = 2}, plain, "clip.vision.attention.head_count_kv", NULL},
        {{"clip.vision.attention.head_dim", 'u', .u = 8}, plain, "clip.vision.attention.head_dim", NULL},
        {{"clip.vision.feed_forward_length", 'u', .u = 100}, plain, "v.blk.0.ffn_up.weight", "shape"},
        {{"clip.vision.feed_forward_length", 'u', .u = 0}, plain, "clip.vision.feed_forward_length", NULL},
        {{"clip.vision.projection_dim", 'u', .u = 128}, plain, "mm.2.weight", "shape"},
        {{"clip.vision.projection_dim", 'u', .u = 0}, plain, "clip.vision.projection_dim", NULL},
        {{"clip.vision.patch_size", 'u', .u = 14}, plain, "clip.vision.image_size", "14-pixel"},
        {{"clip.vision.patch_size", 'u', .u = 0}, plain, "clip.vision.patch_size", NULL},
        {{"clip.vision.image_size", 'u', .u = 100}, plain, "clip.vision.image_size", NULL},
        {{"clip.vision.spatial_merge_size", 'u', .u = 3}, plain, "mm.0.weight", "shape"},
        {{"clip.vision.spatial_merge_size", 'u', .u = 0}, plain, "clip.vision.spatial_merge_size", NULL},
        {{"clip.vision.attention.layer_norm_epsilon", 'f', .f = -1}, plain, "layer_norm_epsilon", NULL},
        {{"clip.vision.attention.layer_norm_epsilon", 'u', .u = 1}, plain, "layer_norm_epsilon", NULL},
        {{"clip.vision.image_mean", 'F', .fs = two, .n = 2}, plain, "clip.vision.image_mean", NULL},
        {{"clip.vision.image_std", 'F', .fs = zero_std, .n = 3}, plain, "clip.vision.image_std", NULL},
        {{"clip.vision.is_deepstack_layers", 'B', .bs = flags3, .n = 3}, plain, "is_deepstack_layers", NULL},
        {{"clip.vision.is_deepstack_layers", 'B', .bs = flags_one, .n = 2}, plain, "v.deepstack.1.norm.weight",
         "missing"},
        {{"clip.vision.is_deepstack_layers", 'B', .bs = flags_none, .n = 2}, ds, "v.deepstack.0", "not part of"},
        {{"clip.vision.is_deepstack_layers", 'u', .u = 1}, plain, "is_deepstack_layers", NULL},
        {{"clip.vision.image_min_pixels", 'u', .u = 0}, plain, "image_min_pixels", NULL},
        {{"clip.vision.image_max_pixels", 'u', .u = 1000}, plain, "image_max_pixels", NULL},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++, n++) {
        char what[160];
        snprintf(what, sizeof what, "%s (%c)", wrong[i].ed.key, wrong[i].ed.kind);
        n_ok += copy_gguf(wrong[i].src, bad, &wrong[i].ed, NULL, 0, 0) == 0 &&
                refused(bad, what, wrong[i].s1, wrong[i].s2);
    }
    CHECK(n_ok == n, "%d of %d key cases as expected", n_ok, n);
}

typedef struct {
    char names[128][64];
    int n;
} names_ctx;

static void name_one(const ds_tensor_spec *s, void *arg) {
    names_ctx *c = arg;
    if (c->n < 128) snprintf(c->names[c->n++], 64, "%s", s->name);
}

static void test_gguf_tensors(void) {
    char src[512], text[512], bad[512];
    path_of(src, sizeof src, "mmproj-tensors.gguf");
    path_of(text, sizeof text, "text-tensors.gguf");
    path_of(bad, sizeof bad, "mmproj-tbad.gguf");
    int dsl[1] = {1};
    REQUIRE(make(text, src, "f32", 0, 1, dsl, 3) == 0, "make");
    ds_vision_config vc;
    REQUIRE(ds_vision_shape_config("tiny", 0, 256, &vc), "shape");
    vc.n_deepstack = 1;
    vc.deepstack_layers[0] = 1;
    names_ctx c = {.n = 0};
    ds_vision_for_each_spec(&vc, name_one, &c);
    int n_ok = 0;
    for (int i = 0; i < c.n; i++) {
        n_ok += copy_gguf(src, bad, NULL, c.names[i], -1, 0) == 0 && refused(bad, c.names[i], c.names[i], "missing");
        /* a row longer, or (for the position grid) a row more: not a square */
        int dim = !strcmp(c.names[i], "v.position_embd.weight");
        n_ok += copy_gguf(src, bad, NULL, c.names[i], dim ? 1 : 16, dim) == 0 &&
                refused(bad, c.names[i], c.names[i], dim ? "square" : "has shape");
    }
    CHECK(n_ok == 2 * c.n, "%d of %d tensor cases as expected", n_ok, 2 * c.n);
}

/* --- damaged Hugging Face directories --- */

static json_t *read_json(const char *path) { return json_load_file(path, 0, NULL); }

/* dir's model.safetensors with tensor `name` dropped (shrink 0) or its
 * first dimension one smaller, written back in place */
static int edit_safetensors(const char *dir, const char *name, int shrink) {
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)size);
    if (fread(b, 1, (size_t)size, f) != (size_t)size) size = -1;
    fclose(f);
    uint64_t hlen;
    memcpy(&hlen, b, 8);
    json_t *h = json_loadb((const char *)b + 8, hlen, 0, NULL);
    json_t *t = json_object_get(h, name);
    int rc = -1;
    if (t && size > 0) {
        if (!shrink) {
            json_object_del(h, name);
        } else {
            json_t *shape = json_object_get(t, "shape"), *offs = json_object_get(t, "data_offsets");
            json_int_t d0 = json_integer_value(json_array_get(shape, 0)), total = 1;
            for (size_t d = 0; d < json_array_size(shape); d++) total *= json_integer_value(json_array_get(shape, d));
            json_int_t begin = json_integer_value(json_array_get(offs, 0)), end = json_integer_value(json_array_get(offs, 1));
            json_int_t esz = (end - begin) / total;
            json_array_set_new(shape, 0, json_integer(d0 - 1));
            json_array_set_new(offs, 1, json_integer(begin + total / d0 * (d0 - 1) * esz));
        }
        char *js = json_dumps(h, JSON_COMPACT);
        size_t jl = strlen(js), padded = (jl + 7) / 8 * 8;
        f = fopen(path, "wb");
        uint64_t nl = padded;
        fwrite(&nl, 8, 1, f);
        fwrite(js, 1, jl, f);
        for (size_t i = jl; i < padded; i++) fputc(' ', f);
        fwrite(b + 8 + hlen, 1, (size_t)size - 8 - hlen, f);
        rc = fclose(f) == 0 ? 0 : -1;
        free(js);
    }
    json_decref(h);
    free(b);
    return rc;
}

static int make_hf(const char *dir, int n_ds, const int *ds) {
    return make_fmt(DS_FORMAT_SAFETENSORS, dir, NULL, "f32", 0, n_ds, ds, 3);
}

static void test_hf_fields(void) {
    char dir[512], cfg[600];
    path_of(dir, sizeof dir, "hf-fields");
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    REQUIRE(make_hf(dir, -1, NULL) == 0, "make");
    json_t *orig = read_json(cfg);
    REQUIRE(orig, "config.json");
    const char *required[] = {"depth", "hidden_size", "num_heads", "intermediate_size", "patch_size",
                              "num_position_embeddings", "out_hidden_size"};
    int n_ok = 0, n = 0;
    char want[128];
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++, n++) {
        json_t *c = json_deep_copy(orig);
        json_object_del(json_object_get(c, "vision_config"), required[i]);
        json_dump_file(c, cfg, 0);
        json_decref(c);
        snprintf(want, sizeof want, "'vision_config.%s' is missing", required[i]);
        n_ok += refused(dir, required[i], want, NULL);
    }
    struct {
        const char *field, *value, *s1;
    } wrong[] = {
        {"depth", "0", "vision_config.depth"},
        {"depth", "3", "blocks.2.norm1.weight"},
        {"depth", "1", "blocks.1"},
        {"depth", "\"2\"", "vision_config.depth"},
        {"hidden_size", "60", "vision_config.num_heads"},
        {"hidden_size", "128", "model.visual.patch_embed.proj.weight"},
        {"num_heads", "3", "vision_config.num_heads"},
        {"intermediate_size", "100", "v.blk.0.ffn_up.weight"},
        {"patch_size", "14", "patch_embed.proj.weight"},
        {"temporal_patch_size", "1", "temporal_patch_size"},
        {"in_channels", "1", "in_channels"},
        {"spatial_merge_size", "0", "spatial_merge_size"},
        {"num_position_embeddings", "60", "num_position_embeddings"},
        {"num_position_embeddings", "81", "v.position_embd.weight"},
        {"out_hidden_size", "128", "out_hidden_size"},
        {"hidden_act", "\"silu\"", "hidden_act"},
        {"deepstack_visual_indexes", "[2]", "deepstack_visual_indexes"},
        {"deepstack_visual_indexes", "[1, 0]", "deepstack_visual_indexes"},
        {"deepstack_visual_indexes", "[1]", "deepstack_merger_list.0.norm.weight"},
        {"deepstack_visual_indexes", "\"x\"", "deepstack_visual_indexes"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++, n++) {
        json_t *c = json_deep_copy(orig);
        json_object_set_new(json_object_get(c, "vision_config"), wrong[i].field, json_loads(wrong[i].value, JSON_DECODE_ANY, NULL));
        json_dump_file(c, cfg, 0);
        json_decref(c);
        snprintf(want, sizeof want, "%s = %s", wrong[i].field, wrong[i].value);
        n_ok += refused(dir, want, wrong[i].s1, NULL);
    }
    json_t *c = json_deep_copy(orig);
    json_object_del(c, "vision_config");
    json_dump_file(c, cfg, 0);
    json_decref(c);
    n_ok += refused(dir, "no vision_config", "'vision_config' is missing", NULL);
    n++;
    /* preprocessor_config.json */
    char pp[600];
    snprintf(pp, sizeof pp, "%s/preprocessor_config.json", dir);
    json_dump_file(orig, cfg, 0);
    json_t *p0 = read_json(pp);
    struct {
        const char *field, *value, *s1;
    } pwrong[] = {{"image_mean", "[0.5, 0.5]", "image_mean"}, {"image_std", "[0.5, 0, 0.5]", "image_std"},
                  {"size", "{\"shortest_edge\": 100, \"longest_edge\": 10}", "size"},
                  {"size", "{\"shortest_edge\": -1}", "size.shortest_edge"}};
    for (size_t i = 0; p0 && i < sizeof pwrong / sizeof pwrong[0]; i++, n++) {
        json_t *q = json_deep_copy(p0);
        json_object_set_new(q, pwrong[i].field, json_loads(pwrong[i].value, JSON_DECODE_ANY, NULL));
        json_dump_file(q, pp, 0);
        json_decref(q);
        n_ok += refused(dir, pwrong[i].field, pwrong[i].s1, NULL);
    }
    json_decref(p0);
    json_decref(orig);
    CHECK(n_ok == n, "%d of %d field cases as expected", n_ok, n);
}

static void test_hf_tensors(void) {
    char dir[512];
    path_of(dir, sizeof dir, "hf-tensors");
    int dsl[1] = {1};
    ds_vision_config vc;
    REQUIRE(ds_vision_shape_config("tiny", 0, 256, &vc), "shape");
    vc.n_deepstack = 1;
    vc.deepstack_layers[0] = 1;
    names_ctx c = {.n = 0};
    ds_vision_for_each_spec(&vc, name_one, &c);
    int n_ok = 0, n = 0;
    for (int i = 0; i < c.n; i++) {
        if (!strcmp(c.names[i], "v.patch_embd.weight.1")) continue; /* one HF tensor with frame 0 */
        char hf[160], full[200];
        REQUIRE(ds_vision_hf_name(&vc, c.names[i], hf, sizeof hf) >= 0, "%s has no HF name", c.names[i]);
        REQUIRE(make_hf(dir, 1, dsl) == 0, "make");
        snprintf(full, sizeof full, "model.visual.%s", hf);
        n++;
        n_ok += edit_safetensors(dir, full, 0) == 0 && refused(dir, full, full, "missing");
        REQUIRE(make_hf(dir, 1, dsl) == 0, "make");
        n++;
        n_ok += edit_safetensors(dir, full, 1) == 0 && refused(dir, full, c.names[i], hf);
    }
    CHECK(n_ok == n, "%d of %d tensor cases as expected", n_ok, n);
}

/* --- finding the tower --- */

static void touch(const char *dir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (f) fclose(f);
}

static int found(const char *dir, const char *model, const char *want) {
    char m[600], out[700], w[700];
    snprintf(m, sizeof m, "%s/%s", dir, model);
    int r = ds_vision_find(m, out, sizeof out);
    if (!want) {
        if (r) printf("     %s: found %s\n", model, out);
        return !r;
    }
    snprintf(w, sizeof w, "%s/%s", dir, want);
    if (!r || strcmp(out, w) != 0) printf("     %s: found %s, wanted %s\n", model, r ? out : "nothing", w);
    return r && !strcmp(out, w);
}

static void test_find(void) {
    char d[512];
    path_of(d, sizeof d, "find");
    REQUIRE(mkdir(d, 0755) == 0, "mkdir");
    touch(d, "Qwen3.5-4B-Q4_K_M.gguf");
    touch(d, "mmproj.bin");
    char sub[600];
    snprintf(sub, sizeof sub, "%s/mmproj-dir.gguf", d);
    mkdir(sub, 0755);
    CHECK(found(d, "Qwen3.5-4B-Q4_K_M.gguf", NULL), "none: not .gguf, a directory");
    touch(d, "mmproj-F16.gguf");
    CHECK(found(d, "Qwen3.5-4B-Q4_K_M.gguf", "mmproj-F16.gguf"), "the only one, whatever its name");
    touch(d, "mmproj-Qwen3.5-4B-BF16.gguf");
    touch(d, "MMPROJ-Qwen3.5-0.8B-F16.gguf");
    CHECK(found(d, "Qwen3.5-4B-Q4_K_M.gguf", "mmproj-Qwen3.5-4B-BF16.gguf"), "the best name match");
    touch(d, "Qwen3.5-0.8B-Q8_0.gguf");
    CHECK(found(d, "Qwen3.5-0.8B-Q8_0.gguf", "MMPROJ-Qwen3.5-0.8B-F16.gguf"), "any case");
    touch(d, "Other.gguf");
    CHECK(found(d, "Other.gguf", NULL), "several, none sharing the name: no guess");
    touch(d, "mmproj-Qwen3.5-4B-F16.gguf");
    CHECK(found(d, "Qwen3.5-4B-Q4_K_M.gguf", NULL), "two sharing as much of the name: no guess");
    CHECK(found(d, "missing.gguf", NULL), "a model that is not there");
    /* Hugging Face directories: the directory, when its config has a vision_config */
    char hf[512], plain[512], cfg[600], out[700];
    path_of(hf, sizeof hf, "hf-find");
    path_of(plain, sizeof plain, "hf-find-text");
    REQUIRE(make_hf(hf, -1, NULL) == 0, "make hf");
    ds_make_options o = {.shape = "tiny", .dtype = "f32", .format = DS_FORMAT_SAFETENSORS, .seed = 1, .scale = 1.0f,
                         .out = plain, .n_layers = 1, .no_mtp = 1};
    ds_err e = {0};
    REQUIRE(ds_make_model(&o, &e) == DS_OK, "%s", e.msg);
    CHECK(ds_vision_find(hf, out, sizeof out) && !strcmp(out, hf), "hf dir: %s", out);
    snprintf(cfg, sizeof cfg, "%s/config.json", hf);
    CHECK(ds_vision_find(cfg, out, sizeof out) && !strcmp(out, hf), "hf config.json: %s", out);
    CHECK(!ds_vision_find(plain, out, sizeof out), "a text-only directory");
    char small[8];
    CHECK(!ds_vision_find(hf, small, sizeof small), "a path that does not fit");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds_test_vision_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_specs_qwen35);
    RUN(test_specs_deepstack);
    RUN(test_roundtrip_gguf_f32);
    RUN(test_roundtrip_gguf_deepstack);
    RUN(test_roundtrip_gguf_f16);
    RUN(test_roundtrip_gguf_q8);
    RUN(test_hf_equals_gguf);
    RUN(test_hf_equals_gguf_deepstack);
    RUN(test_gguf_keys);
    RUN(test_gguf_tensors);
    RUN(test_hf_fields);
    RUN(test_hf_tensors);
    RUN(test_find);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("     could not remove %s\n", tmpdir);
    return ds_test_finish();
}
