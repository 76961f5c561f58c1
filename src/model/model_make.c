/* model_make.c - make-model: deterministic random weights in real shapes,
 * written as GGUF or as a Hugging Face directory (see model_make.h). */
#include "model/model_make.h"

#include <jansson.h>
#include <errno.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/half.h"
#include "common/progress.h"
#include "common/mapped_file.h"
#include "kernels/threadpool.h"
#include "loading/fp8.h"
#include "loading/gguf_writer.h"
#include "loading/hf_names.h"
#include "loading/model_shapes.h"
#include "loading/vision_file_int.h"
#include "model/model_make_policy.h"
#include "model/model_make_vision.h"
#include "tokenizer/default_chat_template.h"
#include "tokenizer/vocab.h"

/* --- values --- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float ds_make_uniform(uint64_t *s) { return (float)((double)(splitmix(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

static uint64_t stream_seed(uint64_t seed, const char *name, int expert) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h ^ ((uint64_t)(expert + 1) * 0x9E3779B97F4A7C15ull);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

void ds_make_values(const ds_model_config *cfg, const ds_tensor_spec *s, uint64_t seed, float scale, int expert,
                    float *dst) {
    uint64_t st = stream_seed(seed, s->name, expert);
    int64_t n = s->ne[0] * s->ne[1];
    const float sqrt3 = 1.7320508f;
    float amp; /* uniform amplitude = std * sqrt(3) */
    switch (s->kind) {
    case DS_TK_EMBED:
        amp = sqrt3;
        break;
    case DS_TK_NORM:
        /* Qwen3.5 stores zero-centred norms (scale 1 + w); Qwen3 stores the scale */
        for (int64_t i = 0; i < n; i++) dst[i] = (cfg->arch == DS_ARCH_QWEN3 ? 1.0f : 0.0f) + 0.1f * ds_make_uniform(&st);
        return;
    case DS_TK_VECTOR:
        if (ends_with(s->name, "ssm_a")) { /* A_log, as the model initialises it: log of U(1, 16) */
            for (int64_t i = 0; i < n; i++) dst[i] = logf(8.5f + 7.5f * ds_make_uniform(&st));
            return;
        }
        if (ends_with(s->name, "ssm_dt.bias")) { /* inverse softplus of dt in U(0.001, 0.1) */
            for (int64_t i = 0; i < n; i++) dst[i] = logf(expm1f(0.0505f + 0.0495f * ds_make_uniform(&st)));
            return;
        }
        if (ends_with(s->name, "ssm_norm.weight")) { /* plain weight, not zero-centred */
            for (int64_t i = 0; i < n; i++) dst[i] = 1.0f + 0.1f * ds_make_uniform(&st);
            return;
        }
        amp = scale * sqrt3 / sqrtf((float)s->ne[0]);
        break;
    default:
        amp = scale * sqrt3 / sqrtf((float)s->ne[0]);
        break;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = amp * ds_make_uniform(&st);
}

/* Grouped value-head order (HF: head h belongs to key head h / r) to tiled
 * order (ggml broadcasting: key head h % Hk), on `heads` blocks of `block`
 * consecutive floats starting at data, repeated `reps` times `stride` apart. */
static void grouped_to_tiled(float *data, int hk, int hv, int64_t block, int64_t reps, int64_t stride) {
    int r = hv / hk;
    float *tmp = malloc((size_t)(hv * block) * sizeof *tmp);
    if (!tmp) abort(); /* a few KiB; a failure here is not recoverable anyway */
    for (int64_t rep = 0; rep < reps; rep++) {
        float *base = data + rep * stride;
        for (int t = 0; t < hv; t++) {
            int k = t % hk, j = t / hk, g = k * r + j;
            memcpy(tmp + (int64_t)t * block, base + (int64_t)g * block, (size_t)block * sizeof *tmp);
        }
        memcpy(base, tmp, (size_t)(hv * block) * sizeof *tmp);
    }
    free(tmp);
}

void ds_make_to_gguf_form(const ds_model_config *c, const ds_tensor_spec *s, float *data) {
    int64_t n = s->ne[0] * s->ne[1];
    if (s->kind == DS_TK_NORM && c->arch != DS_ARCH_QWEN3)
        for (int64_t i = 0; i < n; i++) data[i] += 1.0f;
    if (ends_with(s->name, ".ssm_a"))
        for (int64_t i = 0; i < n; i++) data[i] = -expf(data[i]);
    int hk = c->lin_k_heads, hv = c->lin_v_heads;
    if (hk == hv || s->layer < 0 || s->layer >= c->n_layer || c->layer_full[s->layer]) return;
    int64_t H = c->n_embd, dv = c->lin_v_dim, key_dim = (int64_t)hk * c->lin_k_dim;
    if (ends_with(s->name, "attn_qkv.weight"))
        grouped_to_tiled(data + 2 * key_dim * H, hk, hv, dv * H, 1, 0);
    else if (ends_with(s->name, "attn_gate.weight"))
        grouped_to_tiled(data, hk, hv, dv * H, 1, 0);
    else if (ends_with(s->name, "ssm_beta.weight") || ends_with(s->name, "ssm_alpha.weight"))
        grouped_to_tiled(data, hk, hv, H, 1, 0);
    else if (ends_with(s->name, "ssm_a") || ends_with(s->name, "ssm_dt.bias"))
        grouped_to_tiled(data, hk, hv, 1, 1, 0);
    else if (ends_with(s->name, "ssm_conv1d.weight"))
        grouped_to_tiled(data + 2 * key_dim * s->ne[0], hk, hv, dv * s->ne[0], 1, 0);
    else if (ends_with(s->name, "ssm_out.weight")) /* columns: each output row holds Hv blocks of Dv */
        grouped_to_tiled(data, hk, hv, dv, H, (int64_t)hv * dv);
}

/* --- shared set-up --- */

typedef struct {
    ds_tensor_spec *specs;
    int n, cap;
} spec_list;

static void collect(const ds_tensor_spec *s, void *arg) {
    spec_list *l = arg;
    if (s->optional) return; /* only 'output' of a tied model */
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        ds_tensor_spec *p = realloc(l->specs, (size_t)l->cap * sizeof *p);
        if (!p) abort();
        l->specs = p;
    }
    l->specs[l->n++] = *s;
}

/* The model's tensors, as a GGUF file holds them (the optional ones left out) */
static ds_status model_specs(const ds_model_config *c, spec_list *l, ds_err *e) {
    *l = (spec_list){0};
    ds_model_for_each_spec(c, collect, l);
    return l->n > 0 ? DS_OK : ds_fail(e, DS_EINVAL, "the model has no tensors");
}

/* the file type and overrides of o, checked */
static ds_status policy_of(const ds_make_options *o, const ds_file_type **ft, ds_type_overrides **ov, ds_err *e) {
    const char *dtype = o->dtype ? o->dtype : "f32";
    if (o->format == DS_FORMAT_SAFETENSORS && !strcasecmp(dtype, "fp8")) dtype = "bf16"; /* what the matrices it leaves alone hold */
    if (!(*ft = ds_file_type_find(dtype))) return ds_fail(e, DS_EINVAL, "--dtype '%s' is not a file type make-model writes", dtype);
    return ds_type_overrides_new(o->tensor_types, o->n_tensor_types, ov, e);
}

ds_status ds_make_tensor_type(const ds_model_config *c, const ds_tensor_spec *s, const ds_make_options *o,
                              ds_dtype *type, ds_err *e) {
    const ds_file_type *ft;
    ds_type_overrides *ov = NULL;
    spec_list l = {0};
    ds_dtype *types = NULL;
    ds_status st = policy_of(o, &ft, &ov, e);
    if (!st) st = model_specs(c, &l, e);
    if (!st && !(types = malloc((size_t)l.n * sizeof *types))) st = ds_fail(e, DS_ENOMEM, "out of memory");
    if (!st) st = ds_quant_plan(c, l.specs, l.n, ft, ov, types, e);
    int found = -1;
    for (int i = 0; !st && i < l.n && found < 0; i++)
        if (strcmp(l.specs[i].name, s->name) == 0) found = i;
    if (!st && found < 0) st = ds_fail(e, DS_EINVAL, "tensor '%s' is not in the model", s->name);
    if (!st) *type = types[found];
    free(types);
    free(l.specs);
    ds_type_overrides_free(ov);
    return st;
}

ds_dtype ds_make_gguf_type(const ds_model_config *c, const ds_tensor_spec *s, const char *dtype) {
    ds_make_options o = {.dtype = dtype};
    ds_dtype t = DS_F32;
    ds_err e = {0};
    return ds_make_tensor_type(c, s, &o, &t, &e) == DS_OK ? t : DS_F32;
}

/* --- quantising on every thread --- */

/* Rows are quantised independently of each other, so whichever thread takes
 * a row, its bytes are the same: the file does not depend on the thread count. */
typedef struct {
    ds_dtype type;
    const float *src;
    uint8_t *dst;
    int64_t rows, cols;
    size_t row_bytes;
    atomic_llong next; /* first row not yet taken */
} quant_job;

static void quant_rows(void *ctx, int ith, int nth) {
    quant_job *j = ctx;
    (void)ith;
    /* chunks of at most 64K elements, and at least 4 per thread where the
     * matrix has the rows: taking one costs nothing next to quantising it,
     * and the slow types (the grid searches) keep every thread busy even on
     * small matrices */
    int64_t chunk = j->cols >= 65536 ? 1 : 65536 / j->cols, share = j->rows / (4 * (int64_t)nth);
    if (share < chunk) chunk = share > 1 ? share : 1;
    for (;;) {
        int64_t r = atomic_fetch_add(&j->next, chunk);
        if (r >= j->rows) break;
        int64_t end = r + chunk < j->rows ? r + chunk : j->rows;
        for (; r < end; r++)
            ds_quantize_row(j->type, j->src + r * j->cols, j->dst + (size_t)r * j->row_bytes, j->cols);
    }
}

/* dst = rows x cols floats of src in type t, one row after the other */
static void quantize_matrix(ds_pool *pool, ds_dtype t, const float *src, void *dst, int64_t rows, int64_t cols) {
    quant_job j = {.type = t, .src = src, .dst = dst, .rows = rows, .cols = cols,
                   .row_bytes = ds_dtype_row_bytes(t, cols)};
    atomic_init(&j.next, 0);
    ds_pool_run(pool, quant_rows, &j);
}

typedef struct {
    const ds_make_options *o;
    ds_model_config cfg;
    ds_vocab vocab;
    spec_list specs;
    const ds_file_type *ft;     /* --dtype */
    ds_type_overrides *ov;      /* --tensor-type */
    ds_dtype *types;            /* GGUF: the type of each of specs */
    ds_pool *pool;              /* quantises (and converts) the rows of a matrix */
    ds_progress progress;
    uint64_t total_elems;
    float mtp_beta;             /* --mtp-agree perturbation */
    ds_vision_config vision;    /* --mmproj / --vision: the tower */
    ds_tensor_spec *vspecs;     /* --vision: its tensors, for the Hugging Face directory */
    int n_vspecs;
} maker;

static int64_t spec_elems(const ds_tensor_spec *s) { return s->ne[0] * s->ne[1] * s->ne[2]; }

static ds_status setup(maker *mk, ds_err *e) {
    const ds_make_options *o = mk->o;
    const ds_model_shape *shape = ds_model_shape_find(o->shape);
    if (!shape) {
        char names[512] = "";
        for (int i = 0; i < ds_model_shape_count(); i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, ds_model_shape_at(i)->name, sizeof names - strlen(names) - 1);
        }
        return ds_fail(e, DS_EINVAL, "unknown shape '%s' (known: %s)", o->shape, names);
    }
    if (o->n_layers < 0 || o->n_layers >= DS_MAX_LAYERS)
        return ds_fail(e, DS_EINVAL, "--layers %d is out of range (1..%d)", o->n_layers, DS_MAX_LAYERS - 1);
    ds_model_shape_config(shape, o->n_layers, &mk->cfg);
    if (!(o->yarn_factor >= 0 && o->yarn_factor <= 1e6f))
        return ds_fail(e, DS_EINVAL, "--yarn %g is out of range (0..1e6)", (double)o->yarn_factor);
    if (o->yarn_factor > 0) { /* Hugging Face's defaults, written out as a converted file has them */
        ds_model_config *yc = &mk->cfg;
        yc->yarn_factor = o->yarn_factor;
        yc->yarn_orig_ctx = yc->n_ctx_train;
        yc->yarn_beta_fast = 32.0f;
        yc->yarn_beta_slow = 1.0f;
        yc->yarn_truncate = 1;
        yc->yarn_mscale = (float)ds_yarn_get_mscale(yc->yarn_factor, 1.0);
    }
    if (o->no_mtp) mk->cfg.n_mtp = 0;
    ds_status s = o->tokenizer_json ? ds_vocab_read_tokenizer_json(&mk->vocab, o->tokenizer_json, e)
                                    : ds_vocab_generate(&mk->vocab, shape->n_vocab_regular, e);
    if (s) return s;
    int rows = (mk->vocab.n_tokens + 63) / 64 * 64;
    if (mk->cfg.n_vocab < rows) mk->cfg.n_vocab = rows;
    if ((s = ds_vocab_pad(&mk->vocab, mk->cfg.n_vocab, e))) return s;
    mk->cfg.n_eos = 0;
    if (mk->vocab.eos_id >= 0) mk->cfg.eos_ids[mk->cfg.n_eos++] = mk->vocab.eos_id;
    if (mk->vocab.eot_id >= 0) mk->cfg.eos_ids[mk->cfg.n_eos++] = mk->vocab.eot_id;
    mk->cfg.pad_id = mk->vocab.pad_id;
    if ((s = ds_model_config_check(&mk->cfg, o->shape, -1, e))) return s;
    if ((s = policy_of(o, &mk->ft, &mk->ov, e))) return s;
    if ((s = model_specs(&mk->cfg, &mk->specs, e))) return s;
    if (o->format == DS_FORMAT_GGUF) {
        if (!(mk->types = malloc((size_t)mk->specs.n * sizeof *mk->types))) return ds_fail(e, DS_ENOMEM, "out of memory");
        if ((s = ds_quant_plan(&mk->cfg, mk->specs.specs, mk->specs.n, mk->ft, mk->ov, mk->types, e))) return s;
    }
    float agree;
    if ((s = ds_make_mtp_calibrate(&mk->cfg, o, &mk->mtp_beta, &agree, e))) return s;
    if (o->mtp_agree_set)
        fprintf(stderr, "make-model: MTP head agrees with the model on %.0f%% of sampled tokens (asked %.0f%%)\n",
                100.0 * agree, 100.0 * o->mtp_agree);
    for (int i = 0; i < mk->specs.n; i++) mk->total_elems += (uint64_t)spec_elems(&mk->specs.specs[i]);
    if (o->vision && o->format == DS_FORMAT_GGUF && !o->mmproj_out)
        return ds_fail(e, DS_EINVAL, "--vision: a GGUF model's tower is a file of its own (--mmproj PATH)");
    if (o->vision && (mk->cfg.arch == DS_ARCH_QWEN3 || o->hf_flat))
        return ds_fail(e, DS_EINVAL, "--vision: a text-only layout (%s) has no vision tower",
                       o->hf_flat ? "--hf-flat" : "qwen3");
    if ((o->mmproj_out || o->vision) && (s = ds_make_vision_config(o, &mk->cfg, &mk->vision, e))) return s;
    if (o->vision) {
        if ((s = ds_make_vision_specs(&mk->vision, &mk->vspecs, &mk->n_vspecs, e))) return s;
        for (int i = 0; i < mk->n_vspecs; i++) mk->total_elems += (uint64_t)ds_make_vision_elems(&mk->vspecs[i]);
    }
    return DS_OK;
}

/* --- GGUF --- */

/* Which tensors a GGUF file gets: all, the main model without its MTP head, or
 * the head alone (its block and the shared embedding, final norm and output). */
enum { PART_ALL, PART_MAIN, PART_HEAD };

static int in_part(const ds_model_config *c, const ds_tensor_spec *s, int part) {
    if (part == PART_ALL) return 1;
    if (part == PART_MAIN) return s->layer < c->n_layer;
    return s->layer >= c->n_layer || s->layer < 0;
}

static void write_gguf_metadata(maker *mk, ds_gguf_writer *w, int part) {
    const ds_model_config *c = &mk->cfg;
    const char *arch = ds_arch_name(c->arch);
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)
    ds_gguf_writer_str(w, "general.architecture", arch);
    ds_gguf_writer_str(w, "general.type", "model");
    char name[96];
    snprintf(name, sizeof name, "deltaserve %s seed %llu", mk->o->shape, (unsigned long long)mk->o->seed);
    ds_gguf_writer_str(w, "general.name", name);
    ds_gguf_writer_u32(w, "general.file_type", mk->ft->ftype);
    ds_gguf_writer_u32(w, "general.quantization_version", 2);
    int n_mtp = part == PART_MAIN ? 0 : c->n_mtp;
    ds_gguf_writer_u32(w, KEY("block_count"), (uint32_t)(c->n_layer + n_mtp));
    ds_gguf_writer_u32(w, KEY("context_length"), (uint32_t)c->n_ctx_train);
    ds_gguf_writer_u32(w, KEY("embedding_length"), (uint32_t)c->n_embd);
    if (c->arch != DS_ARCH_QWEN35MOE) ds_gguf_writer_u32(w, KEY("feed_forward_length"), (uint32_t)c->n_ff);
    ds_gguf_writer_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    ds_gguf_writer_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    ds_gguf_writer_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
    ds_gguf_writer_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    ds_gguf_writer_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->rms_eps);
    ds_gguf_writer_f32(w, KEY("rope.freq_base"), c->rope_theta);
    if (c->yarn_factor > 0) { /* as llama.cpp's converter writes a "yarn" rope_scaling */
        ds_gguf_writer_str(w, KEY("rope.scaling.type"), "yarn");
        ds_gguf_writer_f32(w, KEY("rope.scaling.factor"), c->yarn_factor);
        ds_gguf_writer_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->yarn_orig_ctx);
    }
    if (c->arch != DS_ARCH_QWEN3) {
        ds_gguf_writer_u32(w, KEY("rope.dimension_count"), (uint32_t)c->rope_dim);
        /* M-RoPE sections (T, H, W) in frequency slots, rotated interleaved (pair i % 3: T, H, W):
         * each axis gets every slot of its residue, [11, 11, 10] for 32 pairs as the real models */
        int half = c->rope_dim / 2;
        int32_t sections[4] = {(half + 2) / 3, (half + 1) / 3, half / 3, 0};
        ds_gguf_writer_arr_i32(w, KEY("rope.dimension_sections"), sections, 4);
        ds_gguf_writer_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c->conv_kernel);
        ds_gguf_writer_u32(w, KEY("ssm.state_size"), (uint32_t)c->lin_k_dim);
        ds_gguf_writer_u32(w, KEY("ssm.group_count"), (uint32_t)c->lin_k_heads);
        ds_gguf_writer_u32(w, KEY("ssm.time_step_rank"), (uint32_t)c->lin_v_heads);
        ds_gguf_writer_u32(w, KEY("ssm.inner_size"), (uint32_t)(c->lin_v_heads * c->lin_v_dim));
        ds_gguf_writer_u32(w, KEY("full_attention_interval"), (uint32_t)c->full_attn_interval);
        if (n_mtp) ds_gguf_writer_u32(w, KEY("nextn_predict_layers"), (uint32_t)n_mtp);
    }
    if (c->arch == DS_ARCH_QWEN35MOE) {
        ds_gguf_writer_u32(w, KEY("expert_count"), (uint32_t)c->n_expert);
        ds_gguf_writer_u32(w, KEY("expert_used_count"), (uint32_t)c->n_expert_used);
        ds_gguf_writer_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c->n_ff_exp);
        ds_gguf_writer_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c->n_ff_shexp);
    }
#undef KEY
    ds_vocab_write_gguf(&mk->vocab, w);
    ds_gguf_writer_str(w, "tokenizer.chat_template", DS_DEFAULT_CHAT_TEMPLATE);
}

static ds_status write_gguf(maker *mk, const char *path, int part, ds_err *e) {
    ds_gguf_writer *w = ds_gguf_writer_new(32);
    if (!w) return ds_fail(e, DS_ENOMEM, "out of memory");
    write_gguf_metadata(mk, w, part);
    const ds_dtype *types = mk->types;
    for (int i = 0; i < mk->specs.n; i++) {
        ds_tensor_spec *s = &mk->specs.specs[i];
        if (in_part(&mk->cfg, s, part)) ds_gguf_writer_add_tensor(w, s->name, types[i], s->n_dims, s->ne);
    }
    ds_status st = ds_gguf_writer_begin(w, path, e);
    float *vals = NULL;
    uint8_t *out = NULL;
    size_t cap = 0;
    for (int i = 0, idx = 0; i < mk->specs.n && !st; i++) {
        ds_tensor_spec *s = &mk->specs.specs[i];
        if (!in_part(&mk->cfg, s, part)) continue;
        int64_t per = s->ne[0] * s->ne[1];
        size_t need = (size_t)per * sizeof(float);
        if (need > cap) {
            free(vals);
            free(out);
            vals = malloc(need);
            out = malloc(need);
            cap = need;
            if (!vals || !out) { st = ds_fail(e, DS_ENOMEM, "out of memory for tensor '%s'", s->name); break; }
        }
        size_t bytes = ds_dtype_row_bytes(types[i], s->ne[0]) * (size_t)s->ne[1];
        /* one expert matrix at a time keeps memory at one matrix, whatever the expert count */
        for (int64_t x = 0; x < s->ne[2] && !st; x++) {
            ds_make_values_ex(&mk->cfg, s, mk->o, mk->mtp_beta, (int)x, vals);
            ds_make_to_gguf_form(&mk->cfg, s, vals);
            quantize_matrix(mk->pool, types[i], vals, out, s->ne[1], s->ne[0]);
            st = ds_gguf_writer_tensor_chunk(w, idx, out, bytes, e);
            ds_progress_add(&mk->progress, (uint64_t)per);
        }
        idx++;
    }
    if (!st) st = ds_gguf_writer_finish(w, e);
    free(vals);
    free(out);
    ds_gguf_writer_free(w);
    return st;
}

/* --- Hugging Face directory --- */

typedef struct {
    char name[160];
    int spec, spec_up;   /* spec_up: the up half of a fused gate_up tensor, else -1 */
    int vspec;           /* a vision tensor: its index in maker.vspecs (spec is then -1), else -1 */
    int expert;          /* -1: every matrix of the spec; e: expert e of a split stack */
    ds_dtype type;
    int n_dims;
    int64_t shape[5];    /* PyTorch order (the Conv3D patch embedding has 5) */
    uint64_t nbytes, begin;
    int shard;
    int fp8;             /* --dtype fp8: 1 an F8_E4M3 weight, 2 its block scales (fp8.h) */
} hf_entry;

typedef struct {
    hf_entry *v;
    int n, cap;
} hf_list;

static hf_entry *hf_push(hf_list *l) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        hf_entry *p = realloc(l->v, (size_t)l->cap * sizeof *p);
        if (!p) return NULL;
        l->v = p;
    }
    hf_entry *en = &l->v[l->n++];
    memset(en, 0, sizeof *en);
    en->spec_up = -1;
    en->vspec = -1;
    en->expert = -1;
    return en;
}

static const char *hf_layer_name(const ds_model_config *c, const char *suffix, ds_hf_conversion *conv) {
    for (int i = 0; i < DS_HF_N_LAYER_NAMES; i++)
        if (strcmp(ds_hf_layer_gguf_name(&DS_HF_LAYER_NAMES[i], c->arch), suffix) == 0) {
            *conv = DS_HF_LAYER_NAMES[i].conv;
            return DS_HF_LAYER_NAMES[i].hf;
        }
    return NULL;
}

static int find_spec(const maker *mk, const char *name) {
    for (int i = 0; i < mk->specs.n; i++)
        if (strcmp(mk->specs.specs[i].name, name) == 0) return i;
    return -1;
}

static ds_status plan_hf(maker *mk, hf_list *l, ds_dtype type, ds_err *e) {
    const ds_model_config *c = &mk->cfg;
    const char *prefix = (c->arch == DS_ARCH_QWEN3 || mk->o->hf_flat) ? "model." : "model.language_model.";
    for (int i = 0; i < mk->specs.n; i++) {
        const ds_tensor_spec *s = &mk->specs.specs[i];
        char hf[160] = "";
        ds_hf_conversion conv = DS_HF_PLAIN;
        if (!strcmp(s->name, "token_embd.weight")) snprintf(hf, sizeof hf, "%sembed_tokens.weight", prefix);
        else if (!strcmp(s->name, "output_norm.weight")) snprintf(hf, sizeof hf, "%snorm.weight", prefix), conv = DS_HF_NORM;
        else if (!strcmp(s->name, "output.weight")) snprintf(hf, sizeof hf, "lm_head.weight");
        else {
            const char *suffix = strchr(s->name + 4, '.') + 1; /* after "blk.<i>." */
            if (strstr(suffix, "ffn_up_exps") && !mk->o->split_experts) continue; /* written with the gate */
            if (s->layer >= c->n_layer)
                for (int j = 0; j < DS_HF_N_MTP_NAMES; j++)
                    if (!strcmp(suffix, DS_HF_MTP_NAMES[j].gguf)) {
                        snprintf(hf, sizeof hf, "mtp.%s", DS_HF_MTP_NAMES[j].hf);
                        conv = DS_HF_MTP_NAMES[j].conv;
                    }
            if (!*hf) {
                const char *rest = hf_layer_name(c, suffix, &conv);
                if (s->n_dims == 3 && mk->o->split_experts) {
                    const char *proj = strstr(suffix, "gate") ? "gate_proj" : strstr(suffix, "up") ? "up_proj" : "down_proj";
                    for (int x = 0; x < s->ne[2]; x++) {
                        hf_entry *en = hf_push(l);
                        if (!en) return ds_fail(e, DS_ENOMEM, "out of memory");
                        if (s->layer >= c->n_layer)
                            snprintf(en->name, sizeof en->name, "mtp.layers.0.mlp.experts.%d.%s.weight", x, proj);
                        else
                            snprintf(en->name, sizeof en->name, "%slayers.%d.mlp.experts.%d.%s.weight", prefix, s->layer, x, proj);
                        en->spec = i;
                        en->expert = x;
                        en->type = type;
                        en->n_dims = 2;
                        en->shape[0] = s->ne[1];
                        en->shape[1] = s->ne[0];
                    }
                    continue;
                }
                if (!rest) return ds_fail(e, DS_EINVAL, "no Hugging Face name for tensor '%s'", s->name);
                if (s->layer >= c->n_layer) snprintf(hf, sizeof hf, "mtp.layers.0.%s", rest);
                else snprintf(hf, sizeof hf, "%slayers.%d.%s", prefix, s->layer, rest);
            }
        }
        hf_entry *en = hf_push(l);
        if (!en) return ds_fail(e, DS_ENOMEM, "out of memory");
        snprintf(en->name, sizeof en->name, "%s", hf);
        en->spec = i;
        en->type = conv == DS_HF_ALOG ? DS_F32 : type; /* A_log stays F32, as exports keep it */
        en->n_dims = s->n_dims;
        for (int d = 0; d < s->n_dims; d++) en->shape[d] = s->ne[s->n_dims - 1 - d];
        if (conv == DS_HF_CONV1D) { /* [C, 1, K] */
            en->n_dims = 3;
            en->shape[0] = s->ne[1];
            en->shape[1] = 1;
            en->shape[2] = s->ne[0];
        } else if (conv == DS_HF_GATE_UP) { /* [E, 2I, H] */
            char up[64];
            snprintf(up, sizeof up, "blk.%d.ffn_up_exps.weight", s->layer);
            en->spec_up = find_spec(mk, up);
            en->shape[1] *= 2;
        }
    }
    for (int i = 0; i < mk->n_vspecs; i++) {
        const ds_tensor_spec *s = &mk->vspecs[i];
        char hf[128];
        int form = ds_vision_hf_name(&mk->vision, s->name, hf, sizeof hf);
        if (form < 0) return ds_fail(e, DS_EINVAL, "no Hugging Face name for tensor '%s'", s->name);
        if (form == DS_VH_PATCH1) continue; /* written with frame 0, as one Conv3D weight */
        hf_entry *en = hf_push(l);
        if (!en) return ds_fail(e, DS_ENOMEM, "out of memory");
        snprintf(en->name, sizeof en->name, "model.visual.%s", hf);
        en->spec = -1;
        en->vspec = i;
        en->type = type;
        en->n_dims = s->n_dims;
        for (int d = 0; d < s->n_dims; d++) en->shape[d] = s->ne[s->n_dims - 1 - d];
        if (form == DS_VH_PATCH0) { /* [D, 3, 2, P, P] */
            en->n_dims = 5;
            en->shape[0] = s->ne[3];
            en->shape[1] = 3;
            en->shape[2] = 2;
            en->shape[3] = s->ne[1];
            en->shape[4] = s->ne[0];
        }
    }
    return DS_OK;
}

/* --dtype fp8 as the official FP8 releases have it: every matrix but the
 * embedding, the output and the MoE routers in float8 with 128x128 block
 * scales beside it ("<name>_scale_inv"), the rest BF16. */
static ds_status plan_fp8(maker *mk, hf_list *l, ds_err *e) {
    int n0 = l->n;
    for (int i = 0; i < n0; i++) {
        if (l->v[i].vspec >= 0) continue; /* the tower stays in BF16 */
        const ds_tensor_spec *s = &mk->specs.specs[l->v[i].spec];
        if (s->kind != DS_TK_MATRIX || !strcmp(s->name, "output.weight") || ends_with(s->name, "ffn_gate_inp.weight"))
            continue;
        l->v[i].fp8 = 1;
        hf_entry *sc = hf_push(l);
        if (!sc) return ds_fail(e, DS_ENOMEM, "out of memory");
        const hf_entry *w = &l->v[i];
        *sc = *w;
        snprintf(sc->name, sizeof sc->name, "%.140s_scale_inv", w->name);
        sc->fp8 = 2;
        sc->type = DS_F32;
        for (int d = sc->n_dims - 2; d < sc->n_dims; d++) sc->shape[d] = (w->shape[d] + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK;
    }
    return DS_OK;
}

/* One fp8 entry's data: for each matrix (expert), its values (both halves of
 * a fused gate_up, whose blocks may straddle the two), then the e4m3 bytes or
 * the block scales. */
static int write_fp8_entry(maker *mk, const hf_entry *en, FILE *f) {
    const ds_tensor_spec *s = &mk->specs.specs[en->spec];
    int halves = en->spec_up >= 0 ? 2 : 1;
    int64_t cols = s->ne[0], rows = s->ne[1] * halves;
    int64_t n_scales = ((rows + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK) * ((cols + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK);
    float *vals = malloc((size_t)(rows * cols) * sizeof *vals), *scales = malloc((size_t)n_scales * sizeof *scales);
    uint8_t *q = malloc((size_t)(rows * cols));
    int bad = !vals || !scales || !q ? 2 : 0;
    int first = en->expert >= 0 ? en->expert : 0, last = en->expert >= 0 ? en->expert + 1 : (int)s->ne[2];
    for (int x = first; x < last && !bad; x++) {
        for (int half = 0; half < halves; half++)
            ds_make_values_ex(&mk->cfg, half ? &mk->specs.specs[en->spec_up] : s, mk->o, mk->mtp_beta, x,
                              vals + half * s->ne[1] * cols);
        ds_fp8_block_scales(vals, rows, cols, scales);
        if (en->fp8 == 2) {
            bad = fwrite(scales, sizeof *scales, (size_t)n_scales, f) != (size_t)n_scales;
        } else {
            ds_fp8_quantize(vals, rows, cols, scales, q);
            bad = fwrite(q, 1, (size_t)(rows * cols), f) != (size_t)(rows * cols);
            ds_progress_add(&mk->progress, (uint64_t)(rows * cols));
        }
    }
    free(vals);
    free(scales);
    free(q);
    return bad;
}

/* One tensor of the tower: make-model's values (model_make_vision.c), the
 * two frames of the patch embedding interleaved into the Conv3D weight. */
static int write_vision_entry(maker *mk, const hf_entry *en, FILE *f) {
    const ds_tensor_spec *s = &mk->vspecs[en->vspec];
    int64_t n = ds_make_vision_elems(s);
    int patch = en->n_dims == 5;
    int64_t total = patch ? 2 * n : n;
    float *vals = malloc((size_t)total * sizeof *vals), *conv = patch ? malloc((size_t)total * sizeof *conv) : NULL;
    uint8_t *out = malloc((size_t)total * sizeof(float));
    int bad = !vals || !out || (patch && !conv) ? 2 : 0;
    if (!bad) {
        ds_make_vision_values(&mk->vision, s, mk->o->seed, mk->o->scale, vals);
        if (patch) { /* frame t of [D, 3, 2, P, P] is GGUF's v.patch_embd.weight(.1) */
            ds_tensor_spec s1 = *s;
            snprintf(s1.name, sizeof s1.name, "v.patch_embd.weight.1");
            ds_make_vision_values(&mk->vision, &s1, mk->o->seed, mk->o->scale, vals + n);
            int64_t per = s->ne[0] * s->ne[1];
            for (int64_t dc = 0; dc < n / per; dc++)
                for (int t = 0; t < 2; t++) memcpy(conv + (dc * 2 + t) * per, vals + t * n + dc * per, (size_t)per * sizeof *conv);
        }
        ds_quantize_row(en->type, patch ? conv : vals, out, total);
        size_t bytes = ds_dtype_row_bytes(en->type, total);
        bad = fwrite(out, 1, bytes, f) != bytes;
        ds_progress_add(&mk->progress, (uint64_t)total);
    }
    free(vals);
    free(conv);
    free(out);
    return bad;
}

static ds_status write_file(const char *path, const char *text, ds_err *e) {
    FILE *f = fopen(path, "wb");
    if (!f) return ds_fail(e, DS_EIO, "%s: cannot create: %s", path, strerror(errno));
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    return bad ? ds_fail(e, DS_EIO, "%s: write failed", path) : DS_OK;
}

/* Builders that remember a failure (out of memory, text that is not UTF-8) in
 * *bad instead of making every call site check; set returns v for nesting. */
static json_t *set(json_t *obj, const char *key, json_t *v, int *bad) {
    if (json_object_set_new(obj, key, v) != 0) {
        *bad = 1;
        return NULL;
    }
    return v;
}

static void append(json_t *arr, json_t *v, int *bad) { *bad |= json_array_append_new(arr, v) != 0; }

/* an integral value is written as an integer, as Hugging Face's files have rope_theta */
static json_t *number(double d) {
    return d == floor(d) && fabs(d) < 0x1p53 ? json_integer((json_int_t)d) : json_real(d);
}

static json_t *int_array(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n && a; i++)
        if (json_array_append_new(a, json_integer(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* real_digits: 17 for doubles widened from floats, which need every digit to
 * read back the same; 15 for decimal constants, so 0.6 stays "0.6" */
static ds_status write_json(const char *dir, const char *file, json_t *root, int bad, int real_digits, ds_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text = bad || !root ? NULL
                              : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(real_digits));
    json_decref(root);
    if (!text) return ds_fail(e, DS_ENOMEM, "%s: out of memory, or text that is not UTF-8, building the JSON", path);
    ds_status s = write_file(path, text, e);
    free(text);
    return s;
}

static ds_status write_hf_config(maker *mk, ds_err *e) {
    const ds_model_config *c = &mk->cfg;
    int flat = c->arch == DS_ARCH_QWEN3 || mk->o->hf_flat;
    static const char *const arch_class[DS_ARCH_COUNT][2] = {
        {"Qwen3ForCausalLM", "Qwen3ForCausalLM"},
        {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"},
        {"Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"}};
    static const char *const text_type[DS_ARCH_COUNT] = {"qwen3", "qwen3_5_text", "qwen3_5_moe_text"};
    static const char *const top_type[DS_ARCH_COUNT] = {"qwen3", "qwen3_5", "qwen3_5_moe"};
    const char *dtype = mk->ft->base == DS_F32 ? "float32" : mk->ft->base == DS_F16 ? "float16" : "bfloat16";
    json_t *root = json_object();
    int bad = 0;
    append(set(root, "architectures", json_array(), &bad), json_string(arch_class[c->arch][!flat]), &bad);
    set(root, "model_type", json_string(flat ? text_type[c->arch] : top_type[c->arch]), &bad);
    set(root, "tie_word_embeddings", json_boolean(c->tied_embeddings), &bad);
    json_t *t = flat ? root : set(root, "text_config", json_object(), &bad);
    if (!flat) set(t, "model_type", json_string(text_type[c->arch]), &bad);
    set(t, "hidden_size", number(c->n_embd), &bad);
    set(t, "num_hidden_layers", number(c->n_layer), &bad);
    set(t, "num_attention_heads", number(c->n_head), &bad);
    set(t, "num_key_value_heads", number(c->n_head_kv), &bad);
    set(t, "head_dim", number(c->head_dim), &bad);
    set(t, "vocab_size", number(c->n_vocab), &bad);
    set(t, "rms_norm_eps", number(c->rms_eps), &bad);
    set(t, "max_position_embeddings", number(c->n_ctx_train), &bad);
    set(t, "hidden_act", json_string("silu"), &bad);
    set(t, "dtype", json_string(dtype), &bad);
    if (!flat) set(t, "tie_word_embeddings", json_boolean(c->tied_embeddings), &bad);
    if (c->arch == DS_ARCH_QWEN35MOE) {
        set(t, "num_experts", number(c->n_expert), &bad);
        set(t, "num_experts_per_tok", number(c->n_expert_used), &bad);
        set(t, "moe_intermediate_size", number(c->n_ff_exp), &bad);
        set(t, "shared_expert_intermediate_size", number(c->n_ff_shexp), &bad);
    } else {
        set(t, "intermediate_size", number(c->n_ff), &bad);
    }
    if (c->arch == DS_ARCH_QWEN3) {
        set(t, "rope_theta", number(c->rope_theta), &bad);
        if (c->yarn_factor > 0) {
            json_t *sc = set(t, "rope_scaling", json_object(), &bad);
            set(sc, "rope_type", json_string("yarn"), &bad);
            set(sc, "factor", json_real(c->yarn_factor), &bad);
            set(sc, "original_max_position_embeddings", number(c->yarn_orig_ctx), &bad);
        }
    } else {
        json_t *types = set(t, "layer_types", json_array(), &bad);
        for (int i = 0; i < c->n_layer; i++)
            append(types, json_string(c->layer_full[i] ? "full_attention" : "linear_attention"), &bad);
        set(t, "full_attention_interval", number(c->full_attn_interval), &bad);
        set(t, "linear_num_key_heads", number(c->lin_k_heads), &bad);
        set(t, "linear_num_value_heads", number(c->lin_v_heads), &bad);
        set(t, "linear_key_head_dim", number(c->lin_k_dim), &bad);
        set(t, "linear_value_head_dim", number(c->lin_v_dim), &bad);
        set(t, "linear_conv_kernel_dim", number(c->conv_kernel), &bad);
        set(t, "attn_output_gate", json_boolean(1), &bad);
        set(t, "mtp_num_hidden_layers", number(c->n_mtp), &bad);
        set(t, "mtp_use_dedicated_embeddings", json_boolean(0), &bad);
        set(t, "mamba_ssm_dtype", json_string("float32"), &bad);
        json_t *rope = set(t, "rope_parameters", json_object(), &bad);
        set(rope, "rope_type", json_string(c->yarn_factor > 0 ? "yarn" : "default"), &bad);
        if (c->yarn_factor > 0) {
            set(rope, "factor", json_real(c->yarn_factor), &bad);
            set(rope, "original_max_position_embeddings", number(c->yarn_orig_ctx), &bad);
        }
        set(rope, "rope_theta", number(c->rope_theta), &bad);
        set(rope, "partial_rotary_factor", number((double)c->rope_dim / c->head_dim), &bad);
        int half = c->rope_dim / 2; /* as the GGUF's rope.dimension_sections */
        int sections[3] = {(half + 2) / 3, (half + 1) / 3, half / 3};
        set(rope, "mrope_section", int_array(sections, 3), &bad);
        set(rope, "mrope_interleaved", json_boolean(1), &bad);
    }
    if (mk->o->vision) {
        const ds_vision_config *vc = &mk->vision;
        json_t *v = set(root, "vision_config", json_object(), &bad);
        set(v, "model_type", json_string(c->arch == DS_ARCH_QWEN35MOE ? "qwen3_5_moe" : "qwen3_5"), &bad);
        set(v, "depth", number(vc->n_layer), &bad);
        set(v, "hidden_size", number(vc->n_embd), &bad);
        set(v, "hidden_act", json_string("gelu_pytorch_tanh"), &bad);
        set(v, "intermediate_size", number(vc->n_ff), &bad);
        set(v, "num_heads", number(vc->n_head), &bad);
        set(v, "in_channels", number(3), &bad);
        set(v, "patch_size", number(vc->patch_size), &bad);
        set(v, "spatial_merge_size", number(vc->merge), &bad);
        set(v, "temporal_patch_size", number(vc->temporal_patch), &bad);
        set(v, "out_hidden_size", number(vc->out_embd), &bad);
        set(v, "num_position_embeddings", number(vc->n_pos), &bad);
        set(v, "deepstack_visual_indexes", int_array(vc->deepstack_layers, vc->n_deepstack), &bad);
        set(v, "initializer_range", number(0.02), &bad);
        int id;
        if ((id = ds_vocab_find(&mk->vocab, "<|image_pad|>")) >= 0) set(root, "image_token_id", number(id), &bad);
        if ((id = ds_vocab_find(&mk->vocab, "<|video_pad|>")) >= 0) set(root, "video_token_id", number(id), &bad);
        if ((id = ds_vocab_find(&mk->vocab, "<|vision_start|>")) >= 0) set(root, "vision_start_token_id", number(id), &bad);
        if ((id = ds_vocab_find(&mk->vocab, "<|vision_end|>")) >= 0) set(root, "vision_end_token_id", number(id), &bad);
    }
    if (mk->vocab.eot_id >= 0) set(t, "eos_token_id", number(mk->vocab.eot_id), &bad);
    if (mk->vocab.pad_id >= 0) set(t, "pad_token_id", number(mk->vocab.pad_id), &bad);
    if (!strcasecmp(mk->o->dtype, "fp8")) { /* as the official FP8 releases describe themselves */
        json_t *q = set(root, "quantization_config", json_object(), &bad);
        set(q, "activation_scheme", json_string("dynamic"), &bad);
        set(q, "fmt", json_string("e4m3"), &bad);
        set(q, "quant_method", json_string("fp8"), &bad);
        int block[2] = {DS_FP8_BLOCK, DS_FP8_BLOCK};
        set(q, "weight_block_size", int_array(block, 2), &bad);
        json_t *keep = set(q, "modules_to_not_convert", json_array(), &bad);
        const char *prefix = flat ? "model." : "model.language_model.";
        char nm[160];
        append(keep, json_string("lm_head"), &bad);
        snprintf(nm, sizeof nm, "%sembed_tokens", prefix);
        append(keep, json_string(nm), &bad);
        for (int i = 0; c->arch == DS_ARCH_QWEN35MOE && i <= c->n_layer; i++) {
            if (i == c->n_layer && !c->n_mtp) break;
            if (i < c->n_layer) snprintf(nm, sizeof nm, "%slayers.%d.mlp.gate", prefix, i);
            else snprintf(nm, sizeof nm, "mtp.layers.0.mlp.gate");
            append(keep, json_string(nm), &bad);
            snprintf(nm + strlen(nm) - strlen("gate"), 32, "shared_expert_gate");
            append(keep, json_string(nm), &bad);
        }
    }
    ds_status s = write_json(mk->o->out, "config.json", root, bad, 17, e);
    if (s) return s;
    if (mk->o->vision) { /* what the image processor reads (and llama.cpp's converter, for mean and std) */
        const ds_vision_config *vc = &mk->vision;
        json_t *pp = json_object();
        bad = 0;
        json_t *mean = set(pp, "image_mean", json_array(), &bad), *std = set(pp, "image_std", json_array(), &bad);
        for (int i = 0; i < 3; i++) {
            append(mean, json_real(vc->image_mean[i]), &bad);
            append(std, json_real(vc->image_std[i]), &bad);
        }
        json_t *size = set(pp, "size", json_object(), &bad);
        set(size, "longest_edge", number((double)vc->max_pixels), &bad);
        set(size, "shortest_edge", number((double)vc->min_pixels), &bad);
        set(pp, "patch_size", number(vc->patch_size), &bad);
        set(pp, "temporal_patch_size", number(vc->temporal_patch), &bad);
        set(pp, "merge_size", number(vc->merge), &bad);
        set(pp, "image_processor_type", json_string("Qwen2VLImageProcessorFast"), &bad);
        if ((s = write_json(mk->o->out, "preprocessor_config.json", pp, bad, 15, e))) return s;
    }

    json_t *gen = json_object();
    bad = 0;
    int eos[2], n = 0;
    if (mk->vocab.eos_id >= 0) eos[n++] = mk->vocab.eos_id;
    if (mk->vocab.eot_id >= 0) eos[n++] = mk->vocab.eot_id;
    set(gen, "eos_token_id", int_array(eos, n), &bad);
    if (mk->vocab.pad_id >= 0) set(gen, "pad_token_id", number(mk->vocab.pad_id), &bad);
    set(gen, "do_sample", json_boolean(1), &bad);
    set(gen, "temperature", number(0.6), &bad);
    set(gen, "top_p", number(0.95), &bad);
    set(gen, "top_k", number(20), &bad);
    if ((s = write_json(mk->o->out, "generation_config.json", gen, bad, 15, e))) return s;

    json_t *tc = json_object();
    bad = 0;
    set(tc, "add_bos_token", json_boolean(0), &bad);
    set(tc, "add_prefix_space", json_boolean(0), &bad);
    set(tc, "bos_token", json_null(), &bad);
    if (mk->vocab.eos_id >= 0) set(tc, "eos_token", json_string(mk->vocab.tokens[mk->vocab.eos_id]), &bad);
    if (mk->vocab.pad_id >= 0) set(tc, "pad_token", json_string(mk->vocab.tokens[mk->vocab.pad_id]), &bad);
    set(tc, "unk_token", json_null(), &bad);
    set(tc, "model_max_length", number(c->n_ctx_train), &bad);
    set(tc, "tokenizer_class", json_string("Qwen2Tokenizer"), &bad);
    set(tc, "chat_template", json_string(DS_DEFAULT_CHAT_TEMPLATE), &bad);
    if ((s = write_json(mk->o->out, "tokenizer_config.json", tc, bad, 15, e))) return s;

    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", mk->o->out);
    if (!mk->o->tokenizer_json) return ds_vocab_write_tokenizer_json(&mk->vocab, path, e);
    char *text; /* a given tokenizer is copied as it is: ids must not change in a round trip */
    size_t len;
    if ((s = ds_read_text_file(mk->o->tokenizer_json, 512u << 20, &text, &len, e))) return s;
    s = write_file(path, text, e);
    free(text);
    return s;
}

static void shard_name(char *buf, size_t n, int i, int n_shards) {
    if (n_shards == 1) snprintf(buf, n, "model.safetensors");
    else snprintf(buf, n, "model-%05d-of-%05d.safetensors", i + 1, n_shards);
}

static ds_status write_shard(maker *mk, hf_list *l, int shard, int n_shards, ds_err *e) {
    char file[64], path[4096];
    shard_name(file, sizeof file, shard, n_shards);
    snprintf(path, sizeof path, "%s/%s", mk->o->out, file);
    json_t *hdr = json_object();
    int bad = 0;
    set(set(hdr, "__metadata__", json_object(), &bad), "format", json_string("pt"), &bad);
    for (int i = 0; i < l->n; i++) {
        hf_entry *en = &l->v[i];
        if (en->shard != shard) continue;
        json_t *t = set(hdr, en->name, json_object(), &bad);
        set(t, "dtype", json_string(en->fp8 == 1 ? "F8_E4M3" : en->type == DS_F32 ? "F32" : en->type == DS_F16 ? "F16" : "BF16"), &bad);
        json_t *shape = set(t, "shape", json_array(), &bad);
        for (int d = 0; d < en->n_dims; d++) append(shape, json_integer((json_int_t)en->shape[d]), &bad);
        json_t *offs = set(t, "data_offsets", json_array(), &bad);
        append(offs, json_integer((json_int_t)en->begin), &bad);
        append(offs, json_integer((json_int_t)(en->begin + en->nbytes)), &bad);
    }
    /* the format's own writer keeps the entries in file order; so do we */
    char *json = bad ? NULL : json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (!json) return ds_fail(e, DS_ENOMEM, "%s: out of memory building the header", path);
    size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8; /* data starts 8-aligned, padded with spaces */
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(json);
        return ds_fail(e, DS_EIO, "%s: cannot create: %s", path, strerror(errno));
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    uint64_t hlen = padded;
    bad = fwrite(&hlen, 8, 1, f) != 1 || fwrite(json, 1, jlen, f) != jlen;
    for (size_t i = jlen; i < padded; i++) bad |= fputc(' ', f) == EOF;
    free(json);
    float *vals = NULL;
    uint8_t *out = NULL;
    size_t cap = 0;
    for (int i = 0; i < l->n && !bad; i++) {
        hf_entry *en = &l->v[i];
        if (en->shard != shard) continue;
        if (en->fp8) {
            bad = write_fp8_entry(mk, en, f);
            continue;
        }
        if (en->vspec >= 0) {
            bad = write_vision_entry(mk, en, f);
            continue;
        }
        const ds_tensor_spec *s = &mk->specs.specs[en->spec];
        int64_t per = s->ne[0] * s->ne[1];
        if ((size_t)per * 4 > cap) {
            free(vals);
            free(out);
            cap = (size_t)per * 4;
            vals = malloc(cap);
            out = malloc(cap);
            if (!vals || !out) { bad = 2; break; }
        }
        size_t bytes = ds_dtype_row_bytes(en->type, per);
        int first = en->expert >= 0 ? en->expert : 0, last = en->expert >= 0 ? en->expert + 1 : (int)s->ne[2];
        for (int x = first; x < last && !bad; x++) {
            for (int half = 0; half < (en->spec_up >= 0 ? 2 : 1); half++) { /* fused: gate rows, then up rows */
                const ds_tensor_spec *src = half ? &mk->specs.specs[en->spec_up] : s;
                ds_make_values_ex(&mk->cfg, src, mk->o, mk->mtp_beta, x, vals);
                quantize_matrix(mk->pool, en->type, vals, out, s->ne[1], s->ne[0]);
                bad |= fwrite(out, 1, bytes, f) != bytes;
                ds_progress_add(&mk->progress, (uint64_t)per);
            }
        }
    }
    free(vals);
    free(out);
    bad |= fclose(f) != 0;
    if (bad == 2) return ds_fail(e, DS_ENOMEM, "out of memory");
    return bad ? ds_fail(e, DS_EIO, "%s: write failed: %s", path, strerror(errno)) : DS_OK;
}

static ds_status write_hf(maker *mk, ds_err *e) {
    int fp8 = !strcasecmp(mk->o->dtype, "fp8");
    if (!ds_file_type_is_float(mk->ft))
        return ds_fail(e, DS_EINVAL, "--dtype %s: safetensors checkpoints hold f32, f16, bf16 or fp8", mk->o->dtype);
    if (mk->ov) return ds_fail(e, DS_EINVAL, "--tensor-type: safetensors checkpoints hold one type; GGUF files take overrides");
    ds_dtype type = mk->ft->base;
    if (mkdir(mk->o->out, 0755) != 0 && errno != EEXIST)
        return ds_fail(e, DS_EIO, "%s: cannot create directory: %s", mk->o->out, strerror(errno));
    ds_status s = write_hf_config(mk, e);
    if (s) return s;
    hf_list l = {0};
    if ((s = plan_hf(mk, &l, type, e)) || (fp8 && (s = plan_fp8(mk, &l, e)))) { free(l.v); return s; }
    /* assign shards in file order, then offsets within each shard */
    int shard = 0;
    uint64_t in_shard = 0;
    for (int i = 0; i < l.n; i++) {
        hf_entry *en = &l.v[i];
        int64_t n = 1;
        for (int d = 0; d < en->n_dims; d++) n *= en->shape[d];
        en->nbytes = en->fp8 == 1 ? (uint64_t)n : ds_dtype_row_bytes(en->type, n);
        if (mk->o->shard_bytes && in_shard > 0 && in_shard + en->nbytes > mk->o->shard_bytes) {
            shard++;
            in_shard = 0;
        }
        en->shard = shard;
        en->begin = in_shard;
        in_shard += en->nbytes;
    }
    int n_shards = shard + 1;
    for (int i = 0; i < n_shards && !s; i++) s = write_shard(mk, &l, i, n_shards, e);
    if (!s && n_shards > 1) {
        json_t *index = json_object();
        int bad = 0;
        uint64_t total = 0;
        for (int i = 0; i < l.n; i++) total += l.v[i].nbytes;
        set(set(index, "metadata", json_object(), &bad), "total_size", json_integer((json_int_t)total), &bad);
        json_t *map = set(index, "weight_map", json_object(), &bad);
        for (int i = 0; i < l.n; i++) {
            char file[64];
            shard_name(file, sizeof file, l.v[i].shard, n_shards);
            set(map, l.v[i].name, json_string(file), &bad);
        }
        s = write_json(mk->o->out, "model.safetensors.index.json", index, bad, 17, e);
    }
    free(l.v);
    return s;
}

ds_status ds_make_model(const ds_make_options *o, ds_err *e) {
    maker mk = {.o = o};
    ds_status s = ds_pool_new(o->n_threads, &mk.pool, e);
    if (s) return s;
    s = setup(&mk, e);
    if (!s) {
        if (o->mtp_out) /* the shared tensors are written twice */
            for (int i = 0; i < mk.specs.n; i++)
                if (mk.specs.specs[i].layer < 0) mk.total_elems += (uint64_t)spec_elems(&mk.specs.specs[i]);
        ds_progress_start(&mk.progress, "make-model", mk.total_elems);
        if (o->mtp_out && (o->format != DS_FORMAT_GGUF || mk.cfg.n_mtp == 0))
            s = ds_fail(e, DS_EINVAL, "--mtp-out %s: %s", o->mtp_out,
                        o->format != DS_FORMAT_GGUF ? "a separate MTP head is written as GGUF only"
                                                    : "the model has no MTP head (--no-mtp, or a shape without one)");
        else if (o->format == DS_FORMAT_GGUF)
            s = write_gguf(&mk, o->out, o->mtp_out ? PART_MAIN : PART_ALL, e);
        else
            s = write_hf(&mk, e);
        if (!s && o->mtp_out) s = write_gguf(&mk, o->mtp_out, PART_HEAD, e);
        ds_progress_finish(&mk.progress);
        if (!s && o->mmproj_out) s = ds_make_vision_gguf(o, &mk.vision, o->mmproj_out, e);
    }
    ds_vocab_free(&mk.vocab);
    free(mk.specs.specs);
    free(mk.vspecs);
    free(mk.types);
    ds_type_overrides_free(mk.ov);
    ds_pool_free(mk.pool);
    return s;
}
