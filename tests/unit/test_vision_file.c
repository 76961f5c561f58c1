/* test_vision_file.c - loading the vision tower (vision_file.h):
 *   - make-model's mmproj GGUF loads back with the config it was made from
 *     and every tensor holding make-model's values (F32 exactly; F16 within
 *     its rounding), Qwen3.5-style and with DeepStack;
 *   - the tensor list of a config: the mmproj names and ggml shapes;
 *   - the shapes' towers (ds_vision_shape_config). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loading/vision_file.h"
#include "model/model_make.h"
#include "model/model_make_vision.h"
#include "testing.h"

static char tmpdir[256];

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

/* make-model of shape tiny with its tower; deepstack < 0: the shape's */
static int make(const char *text, const char *mmproj, const char *dtype, int vlayers, int n_ds, const int *ds,
                uint64_t seed) {
    ds_make_options o = {.shape = "tiny", .dtype = dtype, .format = DS_FORMAT_GGUF, .seed = seed, .scale = 1.0f,
                         .out = text, .mmproj_out = mmproj, .n_layers = 1, .no_mtp = 1, .vision_layers = vlayers,
                         .deepstack_set = n_ds >= 0, .n_deepstack = n_ds > 0 ? n_ds : 0};
    for (int k = 0; k < o.n_deepstack; k++) o.deepstack[k] = ds[k];
    ds_err e = {0};
    if (ds_make_model(&o, &e)) {
        printf("     make %s: %s\n", mmproj, e.msg);
        return -1;
    }
    return 0;
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

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ds_test_vision_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_specs_qwen35);
    RUN(test_specs_deepstack);
    RUN(test_roundtrip_gguf_f32);
    RUN(test_roundtrip_gguf_deepstack);
    RUN(test_roundtrip_gguf_f16);
    RUN(test_roundtrip_gguf_q8);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("     could not remove %s\n", tmpdir);
    return ds_test_finish();
}
