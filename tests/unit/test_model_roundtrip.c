/* test_model_roundtrip.c - make-model writes, the loaders read back, and every
 * tensor is what make-model meant to write:
 *   - GGUF: ds_make_values -> ds_make_to_gguf_form -> ds_quantize_row to the
 *     type ds_make_gguf_type names, compared byte for byte;
 *   - safetensors: the values rounded to the file dtype, then the loader's
 *     canonicalisation (norm + 1 in F32 for Qwen3.5, -exp(A_log), conv and
 *     vectors in F32, grouped V heads kept, experts as 3-D views with nb2),
 *     compared bit for bit.
 * Then GGUF f32 and safetensors f32 of the same options must hold identical
 * canonical tensors except for the V-head order, which is checked against an
 * independent grouped -> tiled permutation. Configs must agree between the
 * formats, and the derived sizes (ds_model_compute_stats) must match numbers
 * worked out by hand for the test shapes and the table of docs/model.md §4. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/half.h"
#include "kernels/dtype.h"
#include "loading/model_file.h"
#include "loading/model_file_int.h"
#include "loading/model_shapes.h"
#include "model/model_make.h"
#include "testing.h"

static char g_dir[512];

static void make_dir(void) {
    const char *base = getenv("DS_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/roundtrip.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void rm_rf(const char *path) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

/* ------------------------------------------------------------------------ */
/* variants                                                                 */

typedef struct {
    const char *shape;
    int layers;
    ds_format fmt;
    const char *dtype;
    int hf_flat, split, no_mtp;
    size_t shard_bytes;
    uint64_t seed;
    float scale;
} variant;

static void variant_name(const variant *v, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%d-%s-%s%s%s%s%s-s%llu", v->shape, v->layers ? "-L" : "", v->layers,
             v->fmt == DS_FORMAT_GGUF ? "gguf" : "st", v->dtype, v->hf_flat ? "-flat" : "", v->split ? "-split" : "",
             v->no_mtp ? "-nomtp" : "", v->shard_bytes ? "-sharded" : "", (unsigned long long)v->seed);
}

static ds_status make(const variant *v, char *path, size_t n, ds_err *e) {
    char name[200];
    variant_name(v, name, sizeof name);
    snprintf(path, n, "%s/%s%s", g_dir, name, v->fmt == DS_FORMAT_GGUF ? ".gguf" : "");
    ds_make_options o = {.shape = v->shape, .n_layers = v->layers, .dtype = v->dtype, .format = v->fmt,
                         .seed = v->seed, .scale = v->scale, .out = path, .no_mtp = v->no_mtp,
                         .hf_flat = v->hf_flat, .split_experts = v->split, .shard_bytes = v->shard_bytes};
    return ds_make_model(&o, e);
}

/* the config make-model builds for v (n_vocab and tokens come from the loaded file) */
static void expected_config(const variant *v, ds_model_config *c) {
    const ds_model_shape *sh = ds_model_shape_find(v->shape);
    ds_model_shape_config(sh, v->layers, c);
    if (v->no_mtp) c->n_mtp = 0;
}

/* Compares the fields that describe the network. */
static void check_config(const char *what, const ds_model_config *got, const ds_model_config *want, int check_tiled) {
#define SAME(f) CHECK(got->f == want->f, "%s: %s is %g, expected %g", what, #f, (double)got->f, (double)want->f)
    SAME(arch);
    SAME(n_layer);
    SAME(n_embd);
    SAME(n_ctx_train);
    SAME(rms_eps);
    SAME(n_head);
    SAME(n_head_kv);
    SAME(head_dim);
    SAME(attn_output_gate);
    SAME(rope_dim);
    SAME(rope_theta);
    SAME(n_ff);
    SAME(n_expert);
    SAME(n_expert_used);
    SAME(n_ff_exp);
    SAME(n_ff_shexp);
    SAME(lin_k_heads);
    SAME(lin_v_heads);
    SAME(lin_k_dim);
    SAME(lin_v_dim);
    SAME(conv_kernel);
    SAME(full_attn_interval);
    SAME(n_mtp);
    SAME(tied_embeddings);
    if (check_tiled) SAME(v_heads_tiled);
#undef SAME
    for (int i = 0; i < want->n_layer && i < DS_MAX_LAYERS; i++)
        CHECK(got->layer_full[i] == want->layer_full[i], "%s: layer %d kind", what, i);
}

/* ------------------------------------------------------------------------ */
/* what each tensor should hold                                             */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static float round_to(ds_dtype t, float v) {
    if (t == DS_BF16) return ds_bf16_to_f32(ds_f32_to_bf16(v));
    if (t == DS_F16) return ds_f16_to_f32(ds_f32_to_f16(v));
    return v;
}

typedef struct {
    const variant *v;
    ds_model_config cfg;   /* expected, with the file's vocabulary size */
    const ds_model_file *m;
    ds_dtype file_type;    /* safetensors: the dtype of the weights */
    int n_specs, n_present;
    int failures;          /* tensors that differ (reported once each, up to a limit) */
    float *vals;
    uint8_t *bytes;
    size_t cap;
} cmp_ctx;

static void grow(cmp_ctx *c, size_t n) {
    if (n <= c->cap) return;
    free(c->vals);
    free(c->bytes);
    c->vals = malloc(n * sizeof(float));
    c->bytes = malloc(n * sizeof(float));
    c->cap = n;
}

static void fail_tensor(cmp_ctx *c, const char *fmt, const char *name, long long x) {
    if (c->failures++ < 8) CHECK(0, fmt, name, x);
    else ds_t_case_failed = 1;
}

static void check_one(const ds_tensor_spec *s, void *arg) {
    cmp_ctx *c = arg;
    const variant *v = c->v;
    c->n_specs++;
    const ds_tensor *t = ds_model_tensor(c->m, s->name);
    if (s->optional && c->cfg.tied_embeddings) {
        if (t) fail_tensor(c, "%s: present in a tied model (%lld)", s->name, 0);
        return;
    }
    if (!t) {
        fail_tensor(c, "%s: missing (%lld)", s->name, 0);
        return;
    }
    c->n_present++;
    if (t->n_dims != s->n_dims) fail_tensor(c, "%s: n_dims %lld", s->name, t->n_dims);
    for (int d = 0; d < 4; d++)
        if ((d < t->n_dims ? t->ne[d] : 1) != s->ne[d]) fail_tensor(c, "%s: ne[%lld] differs", s->name, d);
    int gguf = v->fmt == DS_FORMAT_GGUF;
    int matrix = s->kind == DS_TK_MATRIX || s->kind == DS_TK_EMBED;
    ds_dtype want_type = gguf ? ds_make_gguf_type(&c->cfg, s, v->dtype) : matrix ? c->file_type : DS_F32;
    if (t->type != want_type) {
        fail_tensor(c, "%s: type %lld", s->name, t->type);
        return;
    }
    size_t row = ds_dtype_row_bytes(t->type, s->ne[0]), matrix_bytes = row * (size_t)s->ne[1];
    size_t want_nb2 = matrix_bytes;
    /* fused gate_up stacks: gate and up are views with each expert 2 matrices apart */
    if (!gguf && !v->split && s->n_dims == 3 && (ends_with(s->name, "ffn_gate_exps.weight") || ends_with(s->name, "ffn_up_exps.weight")))
        want_nb2 = 2 * matrix_bytes;
    if (s->n_dims == 3 && t->nb2 != want_nb2) fail_tensor(c, "%s: nb2 %lld", s->name, (long long)t->nb2);
    if (ds_tensor_bytes(t) != matrix_bytes * (size_t)s->ne[2])
        fail_tensor(c, "%s: ds_tensor_bytes %lld", s->name, (long long)ds_tensor_bytes(t));
    int64_t per = s->ne[0] * s->ne[1];
    grow(c, (size_t)per);
    int qwen35 = c->cfg.arch != DS_ARCH_QWEN3;
    for (int64_t x = 0; x < s->ne[2]; x++) {
        const uint8_t *got = t->data + (size_t)x * (s->n_dims == 3 ? t->nb2 : 0);
        ds_make_values(&c->cfg, s, v->seed, v->scale, (int)x, c->vals);
        if (gguf) {
            ds_make_to_gguf_form(&c->cfg, s, c->vals);
            for (int64_t r = 0; r < s->ne[1]; r++) ds_quantize_row(t->type, c->vals + r * s->ne[0], c->bytes + r * row, s->ne[0]);
        } else if (matrix) {
            for (int64_t r = 0; r < s->ne[1]; r++) ds_quantize_row(t->type, c->vals + r * s->ne[0], c->bytes + r * row, s->ne[0]);
        } else {
            /* what the loader makes of the stored value: A_log is stored in F32 whatever the dtype */
            int alog = ends_with(s->name, ".ssm_a");
            float *out = (float *)c->bytes;
            for (int64_t i = 0; i < per; i++) {
                float w = round_to(alog ? DS_F32 : c->file_type, c->vals[i]);
                if (alog) w = -expf(w);
                else if (s->kind == DS_TK_NORM && qwen35) w = 1.0f + w;
                out[i] = w;
            }
        }
        if (memcmp(got, c->bytes, matrix_bytes) != 0) {
            fail_tensor(c, "%s: data of matrix %lld differs from what make-model meant", s->name, x);
            break;
        }
    }
}

typedef struct {
    const ds_model_file *m;
    int64_t count;
} count_ctx;

/* Opens a made model and checks config and every tensor. Returns the model
 * (the caller closes it) or NULL. */
static ds_model_file *open_and_check(const variant *v, const char *path) {
    char name[200];
    variant_name(v, name, sizeof name);
    ds_model_file *m = NULL;
    ds_err e = {0};
    ds_status s = ds_model_open(path, &m, &e);
    CHECK(s == DS_OK, "%s: open: %s", name, e.msg);
    if (s) return NULL;
    CHECK(ds_model_format(m) == v->fmt, "%s: format", name);
    cmp_ctx c = {.v = v, .m = m};
    expected_config(v, &c.cfg);
    const ds_model_config *got = ds_model_config_of(m);
    const ds_model_shape *sh = ds_model_shape_find(v->shape);
    CHECK(got->n_vocab % 64 == 0 && got->n_vocab >= sh->n_vocab_regular && got->n_vocab >= c.cfg.n_vocab,
          "%s: n_vocab %d", name, got->n_vocab);
    c.cfg.n_vocab = got->n_vocab;
    c.cfg.v_heads_tiled = v->fmt == DS_FORMAT_GGUF && c.cfg.arch != DS_ARCH_QWEN3;
    check_config(name, got, &c.cfg, 1);
    CHECK(got->n_eos >= 1, "%s: no end-of-sequence token", name);
    if (v->fmt == DS_FORMAT_SAFETENSORS) {
        int bad = ds_dtype_from_name(v->dtype, &c.file_type);
        CHECK(!bad, "dtype %s", v->dtype);
    }
    ds_model_for_each_spec(&c.cfg, check_one, &c);
    /* nothing but the specs: the table holds exactly the present tensors */
    CHECK(ds_model_n_tensors(m) == c.n_present, "%s: %d tensors, %d expected", name, ds_model_n_tensors(m), c.n_present);
    CHECK(c.failures == 0, "%s: %d tensors differ", name, c.failures);
    free(c.vals);
    free(c.bytes);
    return m;
}

/* ------------------------------------------------------------------------ */
/* parameter counts worked out from the tensor tables of docs/model.md §2,  */
/* independently of model_spec.c                                            */

typedef struct {
    int64_t total, active, mtp, mtp_active;
} param_counts;

static param_counts hand_params(const ds_model_config *c) {
    int64_t H = c->n_embd, V = c->n_vocab;
    int64_t attn_q = H * c->n_head * c->head_dim * (c->arch == DS_ARCH_QWEN3 ? 1 : 2);
    int64_t attn = attn_q + 2 * H * c->n_head_kv * c->head_dim + c->n_head * c->head_dim * H + 2 * c->head_dim;
    int64_t kd = (int64_t)c->lin_k_heads * c->lin_k_dim, vd = (int64_t)c->lin_v_heads * c->lin_v_dim;
    int64_t gdn = H * (2 * kd + vd) /* in_proj_qkv */ + H * vd /* in_proj_z */ + (2 * kd + vd) * c->conv_kernel /* conv1d */
                  + 2 * c->lin_v_heads /* dt_bias, A_log */ + 2 * H * c->lin_v_heads /* in_proj_a, in_proj_b */
                  + c->lin_v_dim /* norm */ + vd * H /* out_proj */;
    int64_t ffn, ffn_active;
    if (c->arch == DS_ARCH_QWEN35MOE) {
        int64_t router = H * c->n_expert, shared = 3 * H * c->n_ff_shexp + H;
        ffn = router + 3 * H * c->n_ff_exp * c->n_expert + shared;
        ffn_active = router + 3 * H * c->n_ff_exp * c->n_expert_used + shared;
    } else {
        ffn = ffn_active = 3 * H * c->n_ff;
    }
    param_counts p = {0, 0, 0, 0};
    int64_t globals = H * V * (c->tied_embeddings ? 1 : 2) + H;
    p.total = p.active = globals;
    for (int i = 0; i < c->n_layer; i++) {
        int64_t mixer = c->layer_full[i] ? attn : gdn;
        p.total += 2 * H + mixer + ffn;
        p.active += 2 * H + mixer + ffn_active;
    }
    if (c->n_mtp) p.mtp = 2 * H * H + 3 * H + 2 * H + attn + ffn;
    if (c->n_mtp) p.mtp_active = p.mtp - ffn + ffn_active;
    return p;
}

static void check_stats(const char *name, const ds_model_file *m) {
    const ds_model_config *c = ds_model_config_of(m);
    ds_model_stats st;
    ds_model_compute_stats(m, &st);
    param_counts p = hand_params(c);
    CHECK(st.n_params == p.total, "%s: n_params %lld, by hand %lld", name, (long long)st.n_params, (long long)p.total);
    CHECK(st.n_params_active == p.active, "%s: active %lld, by hand %lld", name, (long long)st.n_params_active,
          (long long)p.active);
    CHECK(st.n_params_mtp == p.mtp, "%s: mtp %lld, by hand %lld", name, (long long)st.n_params_mtp, (long long)p.mtp);
    CHECK(st.n_params_mtp_active == p.mtp_active, "%s: mtp active %lld, by hand %lld", name,
          (long long)st.n_params_mtp_active, (long long)p.mtp_active);
    int full = 0;
    for (int i = 0; i < c->n_layer; i++) full += c->layer_full[i];
    CHECK(st.n_full_layers == full && st.n_gdn_layers == c->n_layer - full, "%s: layer counts", name);
    /* K and V of every full-attention layer in 16 bits */
    CHECK(st.kv_bytes_per_token == (int64_t)full * 2 * c->n_head_kv * c->head_dim * 2, "%s: kv bytes %lld", name,
          (long long)st.kv_bytes_per_token);
    /* per GDN layer: S = Hv*Dk*Dv F32, conv window (K-1)*conv_dim 16-bit */
    int64_t conv_dim = 2LL * c->lin_k_heads * c->lin_k_dim + (int64_t)c->lin_v_heads * c->lin_v_dim;
    int64_t per = (int64_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim * 4 + (c->conv_kernel - 1) * conv_dim * 2;
    CHECK(st.gdn_state_bytes_per_seq == (c->n_layer - full) * per, "%s: gdn bytes %lld", name,
          (long long)st.gdn_state_bytes_per_seq);
    int64_t bytes = 0;
    for (int i = 0; i < ds_model_n_tensors(m); i++) bytes += (int64_t)ds_tensor_bytes(ds_model_tensor_at(m, i));
    CHECK(st.weight_bytes == bytes, "%s: weight bytes %lld, tensors hold %lld", name, (long long)st.weight_bytes,
          (long long)bytes);
}

/* ------------------------------------------------------------------------ */
/* the round trips                                                          */

static void run_variants(const variant *vs, int n) {
    for (int i = 0; i < n; i++) {
        char path[800], name[200];
        variant_name(&vs[i], name, sizeof name);
        ds_err e = {0};
        ds_status s = make(&vs[i], path, sizeof path, &e);
        CHECK(s == DS_OK, "%s: make-model: %s", name, e.msg);
        if (s) continue;
        ds_model_file *m = open_and_check(&vs[i], path);
        if (m) check_stats(name, m);
        ds_model_close(m);
        if (vs[i].fmt == DS_FORMAT_SAFETENSORS && i == 0) {
            /* a directory can also be named by its config.json */
            char cfg[900];
            snprintf(cfg, sizeof cfg, "%s/config.json", path);
            ds_model_file *m2 = NULL;
            s = ds_model_open(cfg, &m2, &e);
            CHECK(s == DS_OK && ds_model_n_tensors(m2) > 0, "%s: open via config.json: %s", name, e.msg);
            ds_model_close(m2);
        }
        rm_rf(path);
    }
}

#define G(shape, layers, dtype) {shape, layers, DS_FORMAT_GGUF, dtype, 0, 0, 0, 0, 1, 1.0f}
#define S(shape, layers, dtype, flat, split, shard) {shape, layers, DS_FORMAT_SAFETENSORS, dtype, flat, split, 0, shard, 1, 1.0f}

static void test_gguf_roundtrip(void) {
    static const variant vs[] = {
        G("tiny", 0, "f32"),        G("tiny", 0, "f16"),      G("tiny", 0, "bf16"),
        G("tiny", 0, "q8_0"),       G("tiny", 0, "q4_k_m"),   G("tiny", 5, "f32"),
        G("tiny-moe", 0, "f32"),    G("tiny-moe", 0, "q8_0"), G("tiny-moe", 2, "bf16"),
        G("tiny-qwen3", 0, "f32"),  G("tiny-qwen3", 0, "bf16"), G("tiny-qwen3", 3, "q4_k_m"),
        {"tiny", 0, DS_FORMAT_GGUF, "f32", 0, 0, 1, 0, 42, 0.5f},       /* no MTP, other seed and scale */
        {"tiny-moe", 1, DS_FORMAT_GGUF, "q4_k_m", 0, 0, 0, 0, 3, 1.0f}, /* MoE K-quant mix incl. MTP */
    };
    run_variants(vs, (int)(sizeof vs / sizeof vs[0]));
}

static void test_safetensors_roundtrip(void) {
    static const variant vs[] = {
        S("tiny", 0, "f32", 0, 0, 0),           S("tiny", 0, "bf16", 0, 0, 0),
        S("tiny", 0, "f16", 0, 0, 0),           S("tiny", 0, "f32", 1, 0, 0),
        S("tiny", 0, "bf16", 0, 0, 1 << 20),    S("tiny", 6, "f16", 1, 0, 300000),
        S("tiny-moe", 0, "f32", 0, 0, 0),       S("tiny-moe", 0, "bf16", 0, 1, 0),
        S("tiny-moe", 2, "f16", 1, 1, 1 << 20), S("tiny-moe", 0, "bf16", 0, 0, 3 << 20),
        S("tiny-qwen3", 0, "f32", 0, 0, 0),     S("tiny-qwen3", 0, "bf16", 0, 0, 1 << 20),
        S("tiny-qwen3", 3, "f16", 0, 0, 0),
        {"tiny", 0, DS_FORMAT_SAFETENSORS, "bf16", 0, 0, 1, 0, 42, 0.5f},
    };
    run_variants(vs, (int)(sizeof vs / sizeof vs[0]));
}

/* Independent grouped -> tiled permutation (docs/model.md §2.4): tiled V head j holds
 * grouped head (j % Hk) * R + j / Hk; both pair it with K head j % Hk. */
static int tiled_source(int j, int hk, int hv) { return (j % hk) * (hv / hk) + j / hk; }

/* out = in with Hv blocks of `blk` floats, starting at `start`, permuted;
 * repeated `reps` times `stride` floats apart. */
static void permute_heads(float *out, const float *in, int64_t n, int hk, int hv, int64_t start, int64_t blk,
                          int64_t reps, int64_t stride) {
    memcpy(out, in, (size_t)n * sizeof *out);
    for (int64_t r = 0; r < reps; r++)
        for (int j = 0; j < hv; j++)
            memcpy(out + r * stride + start + j * blk, in + r * stride + start + tiled_source(j, hk, hv) * blk,
                   (size_t)blk * sizeof *out);
}

typedef struct {
    const ds_model_file *g, *h;
    int n_permuted, n_same, failures;
} cross_ctx;

static void cross_one(const ds_tensor_spec *s, void *arg) {
    cross_ctx *x = arg;
    const ds_model_config *c = ds_model_config_of(x->g);
    const ds_tensor *a = ds_model_tensor(x->g, s->name), *b = ds_model_tensor(x->h, s->name);
    if (!a || !b) {
        CHECK(!a && !b && s->optional, "%s: present in one format only", s->name);
        return;
    }
    CHECK(a->type == DS_F32 && b->type == DS_F32, "%s: not F32", s->name);
    int64_t n = s->ne[0] * s->ne[1];
    int hk = c->lin_k_heads, hv = c->lin_v_heads;
    int64_t H = c->n_embd, dv = c->lin_v_dim, kd = (int64_t)hk * c->lin_k_dim, vd = (int64_t)hv * dv;
    int gdn = s->layer >= 0 && s->layer < c->n_layer && !c->layer_full[s->layer] && c->arch != DS_ARCH_QWEN3;
    int64_t start = 0, blk = 0, reps = 1, stride = 0;
    if (gdn) {
        if (ends_with(s->name, "attn_qkv.weight")) start = 2 * kd * H, blk = dv * H;
        else if (ends_with(s->name, "attn_gate.weight")) blk = dv * H;
        else if (ends_with(s->name, "ssm_beta.weight") || ends_with(s->name, "ssm_alpha.weight")) blk = H;
        else if (ends_with(s->name, "ssm_a") || ends_with(s->name, "ssm_dt.bias")) blk = 1;
        else if (ends_with(s->name, "ssm_conv1d.weight")) start = 2 * kd * c->conv_kernel, blk = dv * c->conv_kernel;
        else if (ends_with(s->name, "ssm_out.weight")) blk = dv, reps = H, stride = vd;
    }
    for (int64_t e = 0; e < s->ne[2]; e++) {
        const float *ga = (const float *)(a->data + (size_t)e * (s->n_dims == 3 ? a->nb2 : 0));
        const float *hb = (const float *)(b->data + (size_t)e * (s->n_dims == 3 ? b->nb2 : 0));
        if (!blk) {
            if (memcmp(ga, hb, (size_t)n * 4) != 0 && x->failures++ < 8) CHECK(0, "%s: differs between formats", s->name);
            x->n_same++;
            continue;
        }
        float *p = malloc((size_t)n * sizeof *p);
        permute_heads(p, hb, n, hk, hv, start, blk, reps, stride);
        if (memcmp(ga, p, (size_t)n * 4) != 0 && x->failures++ < 8)
            CHECK(0, "%s: GGUF is not the tiled permutation of the HF tensor", s->name);
        /* with Hk != Hv the order really differs: the unpermuted tensors must not match */
        if (hk != hv && memcmp(ga, hb, (size_t)n * 4) == 0 && x->failures++ < 8)
            CHECK(0, "%s: identical without the V-head permutation", s->name);
        free(p);
        x->n_permuted++;
    }
}

static void test_cross_format(void) {
    static const char *const shapes[] = {"tiny", "tiny-moe", "tiny-qwen3"};
    for (int i = 0; i < 3; i++) {
        variant vg = G(shapes[i], 0, "f32"), vh = S(shapes[i], 0, "f32", 0, i == 1, 0);
        char pg[800], ph[800];
        ds_err e = {0};
        ds_status s = make(&vg, pg, sizeof pg, &e);
        if (!s) s = make(&vh, ph, sizeof ph, &e);
        REQUIRE(s == DS_OK, "%s: make-model: %s", shapes[i], e.msg);
        ds_model_file *g = NULL, *h = NULL;
        s = ds_model_open(pg, &g, &e);
        if (!s) s = ds_model_open(ph, &h, &e);
        CHECK(s == DS_OK, "%s: open: %s", shapes[i], e.msg);
        if (!s) {
            const ds_model_config *cg = ds_model_config_of(g), *ch = ds_model_config_of(h);
            check_config(shapes[i], ch, cg, 0);
            CHECK(cg->n_vocab == ch->n_vocab, "%s: n_vocab %d vs %d", shapes[i], cg->n_vocab, ch->n_vocab);
            CHECK(cg->pad_id == ch->pad_id, "%s: pad %d vs %d", shapes[i], cg->pad_id, ch->pad_id);
            CHECK(cg->v_heads_tiled == (cg->arch != DS_ARCH_QWEN3) && ch->v_heads_tiled == 0, "%s: v_heads_tiled", shapes[i]);
            /* the same stop tokens, in whatever order */
            CHECK(cg->n_eos == ch->n_eos, "%s: %d vs %d stop tokens", shapes[i], cg->n_eos, ch->n_eos);
            for (int k = 0; k < cg->n_eos; k++) {
                int found = 0;
                for (int j = 0; j < ch->n_eos; j++) found |= cg->eos_ids[k] == ch->eos_ids[j];
                CHECK(found, "%s: stop token %d only in the GGUF", shapes[i], cg->eos_ids[k]);
            }
            CHECK(ds_model_n_tensors(g) == ds_model_n_tensors(h), "%s: tensor counts %d vs %d", shapes[i],
                  ds_model_n_tensors(g), ds_model_n_tensors(h));
            cross_ctx x = {.g = g, .h = h};
            ds_model_for_each_spec(cg, cross_one, &x);
            CHECK(x.n_same > 0, "%s: nothing compared", shapes[i]);
            if (cg->arch != DS_ARCH_QWEN3)
                CHECK(x.n_permuted == 6 * 3 + 2 * 3, "%s: %d permuted tensors, expected 24", shapes[i], x.n_permuted);
            ds_model_stats sg, sh;
            ds_model_compute_stats(g, &sg);
            ds_model_compute_stats(h, &sh);
            CHECK(sg.n_params == sh.n_params && sg.n_params_active == sh.n_params_active &&
                      sg.n_params_mtp == sh.n_params_mtp && sg.kv_bytes_per_token == sh.kv_bytes_per_token &&
                      sg.gdn_state_bytes_per_seq == sh.gdn_state_bytes_per_seq && sg.weight_bytes == sh.weight_bytes,
                  "%s: stats differ between formats", shapes[i]);
        }
        ds_model_close(g);
        ds_model_close(h);
        rm_rf(pg);
        rm_rf(ph);
    }
}

/* The tiny shapes' numbers, worked out by hand from their configs (H=256,
 * 3 GDN + 1 attention layer, vocabulary 1088 rows, untied, MTP):
 *   GDN layer: norms 2*256 + qkv 256*256 + z 256*128 + conv 4*256 + dt,A 2*4
 *     + a,b 2*256*4 + norm 32 + out 128*256 + FFN 3*256*512 = 527,912
 *   attention layer: norms 512 + q 256*512 + k,v 2*256*128 + o 256*256
 *     + q,k norms 2*64 + FFN 393,216 = 656,000
 *   total 2*256*1088 + 256 + 3*527,912 + 656,000 = 2,797,048; MTP 131,072 + 768 + 656,000
 *   KV per token 1 * 2 * 2 * 64 * 2 = 512; GDN state 3 * (4*32*32*4 + 3*256*2) = 53,760
 * tiny-moe: each FFN is router 2,048 + experts 3*8*256*256 + shared 3*256*256 + 256
 *   (active: 2 of 8 experts). */
static void test_stats_tiny(void) {
    static const struct {
        const char *shape;
        int64_t total, active, mtp, kv, gdn;
    } want[] = {
        {"tiny", 2797048, 2797048, 787840, 512, 53760},
        {"tiny-moe", 8311288, 3592696, 2166400, 512, 53760},
        /* 2 attention layers of norms 512 + q 256*256 + k,v 2*256*128 + o 256*256 + q,k norms 128 + FFN 393,216 */
        {"tiny-qwen3", 557312 + 2 * 590464, 557312 + 2 * 590464, 0, 1024, 0},
    };
    for (int i = 0; i < 3; i++) {
        for (int f = 0; f < 2; f++) {
            variant v = f ? (variant)S(want[i].shape, 0, "bf16", 0, 0, 0) : (variant)G(want[i].shape, 0, "q8_0");
            char path[800];
            ds_err e = {0};
            ds_status s = make(&v, path, sizeof path, &e);
            REQUIRE(s == DS_OK, "make: %s", e.msg);
            ds_model_file *m = NULL;
            s = ds_model_open(path, &m, &e);
            REQUIRE(s == DS_OK, "open: %s", e.msg);
            ds_model_stats st;
            ds_model_compute_stats(m, &st);
            CHECK(ds_model_config_of(m)->n_vocab == 1088, "%s: vocabulary %d", want[i].shape, ds_model_config_of(m)->n_vocab);
            CHECK(st.n_params == want[i].total, "%s: total %lld", want[i].shape, (long long)st.n_params);
            CHECK(st.n_params_active == want[i].active, "%s: active %lld", want[i].shape, (long long)st.n_params_active);
            CHECK(st.n_params_mtp == want[i].mtp, "%s: mtp %lld", want[i].shape, (long long)st.n_params_mtp);
            CHECK(st.kv_bytes_per_token == want[i].kv, "%s: kv %lld", want[i].shape, (long long)st.kv_bytes_per_token);
            CHECK(st.gdn_state_bytes_per_seq == want[i].gdn, "%s: gdn %lld", want[i].shape,
                  (long long)st.gdn_state_bytes_per_seq);
            ds_model_close(m);
            rm_rf(path);
        }
    }
}

/* Stats of the real shapes without writing weights: a model description with
 * the shape's config and a table of tensors without data. */
static void add_spec_tensor(const ds_tensor_spec *s, void *arg) {
    ds_model_file *m = arg;
    if (s->optional && m->cfg.tied_embeddings) return;
    ds_tensor t = {.type = DS_BF16, .n_dims = s->n_dims, .ne = {s->ne[0], s->ne[1], s->ne[2], s->ne[3]}};
    snprintf(t.name, sizeof t.name, "%s", s->name);
    ds_err e;
    if (ds_model_add_tensor(m, &t, &e) != DS_OK) abort();
}

static void shape_stats(const char *shape, ds_model_stats *st, ds_model_config *cfg) {
    ds_model_file *m = calloc(1, sizeof *m);
    m->path = strdup(shape);
    m->format = DS_FORMAT_SAFETENSORS;
    ds_model_shape_config(ds_model_shape_find(shape), 0, &m->cfg);
    ds_model_for_each_spec(&m->cfg, add_spec_tensor, m);
    ds_model_compute_stats(m, st);
    *cfg = m->cfg;
    ds_model_close(m);
}

/* docs/model.md §4: GDN state per sequence (S in F32, conv window 3 rows in
 * 16 bits) and KV per token (16-bit K and V of every attention layer). */
static void test_stats_spec_table(void) {
    static const struct {
        const char *shape;
        int full, gdn;
        int64_t conv_dim, state_per_seq, kv_per_token;
        double params_lo, params_hi, active_lo, active_hi;
    } rows[] = {
        {"qwen3.5-0.8b", 6, 18, 6144, 19537920, 12288, 0.7e9, 0.9e9, 0.7e9, 0.9e9},
        {"qwen3.5-4b", 8, 24, 8192, 51511296, 32768, 3.5e9, 4.5e9, 3.5e9, 4.5e9},
        {"qwen3.5-27b", 16, 48, 10240, 153944064, 65536, 25e9, 28e9, 25e9, 28e9},
        {"qwen3.5-35b-a3b", 10, 30, 8192, 64389120, 20480, 33e9, 36e9, 2.5e9, 3.6e9},
    };
    for (int i = 0; i < 4; i++) {
        ds_model_stats st;
        ds_model_config c;
        shape_stats(rows[i].shape, &st, &c);
        CHECK(st.n_full_layers == rows[i].full && st.n_gdn_layers == rows[i].gdn, "%s: %d full, %d GDN", rows[i].shape,
              st.n_full_layers, st.n_gdn_layers);
        CHECK(2LL * c.lin_k_heads * c.lin_k_dim + (int64_t)c.lin_v_heads * c.lin_v_dim == rows[i].conv_dim,
              "%s: conv_dim", rows[i].shape);
        CHECK(st.gdn_state_bytes_per_seq == rows[i].state_per_seq, "%s: GDN state %lld, table %lld", rows[i].shape,
              (long long)st.gdn_state_bytes_per_seq, (long long)rows[i].state_per_seq);
        CHECK(st.kv_bytes_per_token == rows[i].kv_per_token, "%s: KV %lld, table %lld", rows[i].shape,
              (long long)st.kv_bytes_per_token, (long long)rows[i].kv_per_token);
        param_counts p = hand_params(&c);
        CHECK(st.n_params == p.total && st.n_params_active == p.active && st.n_params_mtp == p.mtp,
              "%s: params %lld/%lld/%lld, by hand %lld/%lld/%lld", rows[i].shape, (long long)st.n_params,
              (long long)st.n_params_active, (long long)st.n_params_mtp, (long long)p.total, (long long)p.active,
              (long long)p.mtp);
        CHECK(st.n_params >= rows[i].params_lo && st.n_params <= rows[i].params_hi, "%s: %lld parameters",
              rows[i].shape, (long long)st.n_params);
        CHECK(st.n_params_active >= rows[i].active_lo && st.n_params_active <= rows[i].active_hi,
              "%s: %lld active parameters", rows[i].shape, (long long)st.n_params_active);
        CHECK(st.weight_bytes == 2 * (st.n_params + st.n_params_mtp), "%s: bf16 weight bytes", rows[i].shape);
    }
    /* Qwen3-0.6B: 0.6B parameters, 0.44B without the (tied) embedding; 28 attention layers */
    ds_model_stats st;
    ds_model_config c;
    shape_stats("qwen3-0.6b", &st, &c);
    int64_t layer = 1024LL * 2048 + 2 * 1024LL * 1024 + 2048LL * 1024 + 2 * 128 + 2 * 1024 + 3 * 1024LL * 3072;
    CHECK(st.n_params == 151936LL * 1024 + 1024 + 28 * layer && st.n_params == 596049920, "qwen3-0.6b: %lld",
          (long long)st.n_params);
    CHECK(st.n_params - 151936LL * 1024 > 0.43e9 && st.n_params - 151936LL * 1024 < 0.45e9, "qwen3-0.6b non-embedding");
    CHECK(st.kv_bytes_per_token == 28LL * 2 * 8 * 128 * 2 && st.gdn_state_bytes_per_seq == 0, "qwen3-0.6b: kv %lld",
          (long long)st.kv_bytes_per_token);
}

int main(void) {
    make_dir();
    RUN(test_gguf_roundtrip);
    RUN(test_safetensors_roundtrip);
    RUN(test_cross_format);
    RUN(test_stats_tiny);
    RUN(test_stats_spec_table);
    rm_rf(g_dir);
    return ds_test_finish();
}
