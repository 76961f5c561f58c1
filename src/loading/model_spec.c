/* model_spec.c - what tensors a Qwen3 / Qwen3.5 / Qwen3.5-MoE model has, with
 * which shapes, derived from its config alone (docs/model.md §2). The
 * loaders validate files against this list and make-model writes it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "loading/model_file.h"

static const char *const arch_names[DS_ARCH_COUNT] = {"qwen3", "qwen35", "qwen35moe"};

const char *ds_arch_name(ds_arch a) { return a < DS_ARCH_COUNT ? arch_names[a] : "unknown"; }

int ds_arch_from_name(const char *name, ds_arch *out) {
    for (int i = 0; i < DS_ARCH_COUNT; i++)
        if (strcmp(name, arch_names[i]) == 0) {
            *out = (ds_arch)i;
            return 0;
        }
    return -1;
}

typedef struct {
    void (*fn)(const ds_tensor_spec *, void *);
    void *ctx;
    int layer;
} emitter;

static void emit(emitter *em, ds_tensor_kind kind, int optional, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                 const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void emit(emitter *em, ds_tensor_kind kind, int optional, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                 const char *fmt, ...) {
    ds_tensor_spec s = {.n_dims = n_dims, .ne = {ne0, ne1, ne2, 1}, .kind = kind, .optional = optional,
                        .layer = em->layer};
    char suffix[48];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(suffix, sizeof suffix, fmt, ap);
    va_end(ap);
    if (em->layer >= 0) snprintf(s.name, sizeof s.name, "blk.%d.%s", em->layer, suffix);
    else snprintf(s.name, sizeof s.name, "%s", suffix);
    em->fn(&s, em->ctx);
}

static void full_attention(emitter *em, const ds_model_config *c) {
    int64_t H = c->n_embd, q_out = (int64_t)c->n_head * c->head_dim * (c->attn_output_gate ? 2 : 1);
    int64_t kv = (int64_t)c->n_head_kv * c->head_dim;
    emit(em, DS_TK_MATRIX, 0, 2, H, q_out, 1, "attn_q.weight");
    emit(em, DS_TK_MATRIX, 0, 2, H, kv, 1, "attn_k.weight");
    emit(em, DS_TK_MATRIX, 0, 2, H, kv, 1, "attn_v.weight");
    emit(em, DS_TK_MATRIX, 0, 2, (int64_t)c->n_head * c->head_dim, H, 1, "attn_output.weight");
    emit(em, DS_TK_NORM, 0, 1, c->head_dim, 1, 1, "attn_q_norm.weight");
    emit(em, DS_TK_NORM, 0, 1, c->head_dim, 1, 1, "attn_k_norm.weight");
}

static void gated_deltanet(emitter *em, const ds_model_config *c) {
    int64_t H = c->n_embd, key_dim = (int64_t)c->lin_k_heads * c->lin_k_dim;
    int64_t value_dim = (int64_t)c->lin_v_heads * c->lin_v_dim, conv_dim = 2 * key_dim + value_dim;
    emit(em, DS_TK_MATRIX, 0, 2, H, conv_dim, 1, "attn_qkv.weight");
    emit(em, DS_TK_MATRIX, 0, 2, H, value_dim, 1, "attn_gate.weight");
    emit(em, DS_TK_CONV, 0, 2, c->conv_kernel, conv_dim, 1, "ssm_conv1d.weight");
    emit(em, DS_TK_VECTOR, 0, 1, c->lin_v_heads, 1, 1, "ssm_dt.bias");
    emit(em, DS_TK_VECTOR, 0, 1, c->lin_v_heads, 1, 1, "ssm_a");
    emit(em, DS_TK_MATRIX, 0, 2, H, c->lin_v_heads, 1, "ssm_beta.weight");
    emit(em, DS_TK_MATRIX, 0, 2, H, c->lin_v_heads, 1, "ssm_alpha.weight");
    emit(em, DS_TK_VECTOR, 0, 1, c->lin_v_dim, 1, 1, "ssm_norm.weight");
    emit(em, DS_TK_MATRIX, 0, 2, value_dim, H, 1, "ssm_out.weight");
}

static void feed_forward(emitter *em, const ds_model_config *c) {
    int64_t H = c->n_embd;
    if (c->arch == DS_ARCH_QWEN35MOE) {
        int64_t E = c->n_expert, I = c->n_ff_exp, S = c->n_ff_shexp;
        emit(em, DS_TK_MATRIX, 0, 2, H, E, 1, "ffn_gate_inp.weight");
        emit(em, DS_TK_MATRIX, 0, 3, H, I, E, "ffn_gate_exps.weight");
        emit(em, DS_TK_MATRIX, 0, 3, H, I, E, "ffn_up_exps.weight");
        emit(em, DS_TK_MATRIX, 0, 3, I, H, E, "ffn_down_exps.weight");
        emit(em, DS_TK_VECTOR, 0, 2, H, 1, 1, "ffn_gate_inp_shexp.weight"); /* [1, H] in HF */
        emit(em, DS_TK_MATRIX, 0, 2, H, S, 1, "ffn_gate_shexp.weight");
        emit(em, DS_TK_MATRIX, 0, 2, H, S, 1, "ffn_up_shexp.weight");
        emit(em, DS_TK_MATRIX, 0, 2, S, H, 1, "ffn_down_shexp.weight");
    } else {
        emit(em, DS_TK_MATRIX, 0, 2, H, c->n_ff, 1, "ffn_gate.weight");
        emit(em, DS_TK_MATRIX, 0, 2, H, c->n_ff, 1, "ffn_up.weight");
        emit(em, DS_TK_MATRIX, 0, 2, c->n_ff, H, 1, "ffn_down.weight");
    }
}

/* The pre-FFN norm is 'post_attention_norm' in qwen35 files and 'ffn_norm' in qwen3 ones. */
static const char *ffn_norm_name(const ds_model_config *c) {
    return c->arch == DS_ARCH_QWEN3 ? "ffn_norm.weight" : "post_attention_norm.weight";
}

void ds_model_for_each_spec(const ds_model_config *c, void (*fn)(const ds_tensor_spec *, void *), void *ctx) {
    emitter em = {.fn = fn, .ctx = ctx, .layer = -1};
    int64_t H = c->n_embd;
    emit(&em, DS_TK_EMBED, 0, 2, H, c->n_vocab, 1, "token_embd.weight");
    for (int i = 0; i < c->n_layer; i++) {
        em.layer = i;
        emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "attn_norm.weight");
        if (c->layer_full[i]) full_attention(&em, c);
        else gated_deltanet(&em, c);
        emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "%s", ffn_norm_name(c));
        feed_forward(&em, c);
    }
    for (int j = 0; j < c->n_mtp; j++) {
        em.layer = c->n_layer + j;
        emit(&em, DS_TK_MATRIX, 0, 2, 2 * H, H, 1, "nextn.eh_proj.weight");
        emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "nextn.enorm.weight");
        emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "nextn.hnorm.weight");
        emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "nextn.shared_head_norm.weight");
        emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "attn_norm.weight");
        full_attention(&em, c);
        emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "%s", ffn_norm_name(c));
        feed_forward(&em, c);
    }
    em.layer = -1;
    emit(&em, DS_TK_NORM, 0, 1, H, 1, 1, "output_norm.weight");
    emit(&em, DS_TK_MATRIX, c->tied_embeddings, 2, H, c->n_vocab, 1, "output.weight");
}

/* What each format calls the sizes checked below, so that a message names the key in the file. */
static const struct { const char *field, *gguf, *hf; } KEYS[] = {
    {"n_layer", "block_count", "num_hidden_layers"},
    {"n_embd", "embedding_length", "hidden_size"},
    {"n_vocab", "vocab_size", "vocab_size"},
    {"n_head", "attention.head_count", "num_attention_heads"},
    {"n_head_kv", "attention.head_count_kv", "num_key_value_heads"},
    {"head_dim", "attention.key_length", "head_dim"},
};

static ds_status not_positive(const ds_model_config *c, const char *path, int format, const char *field, int value,
                              ds_err *e) {
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        if (strcmp(KEYS[i].field, field)) continue;
        if (format == DS_FORMAT_GGUF)
            return ds_fail(e, DS_ECORRUPT, "%s: key '%s.%s' is %d, must be positive", path, ds_arch_name(c->arch),
                           KEYS[i].gguf, value);
        if (format == DS_FORMAT_SAFETENSORS)
            return ds_fail(e, DS_ECORRUPT, "%s/config.json: '%s' is %d, must be positive", path, KEYS[i].hf, value);
    }
    return ds_fail(e, DS_ECORRUPT, "%s: config field %s is %d, must be positive", path, field, value);
}

#define REQUIRE_POS(field)                                                              \
    do {                                                                                \
        if (c->field <= 0) return not_positive(c, path, format, #field, (int)c->field, e); \
    } while (0)

ds_status ds_model_config_check(const ds_model_config *c, const char *path, int format, ds_err *e) {
    REQUIRE_POS(n_layer);
    REQUIRE_POS(n_embd);
    REQUIRE_POS(n_vocab);
    REQUIRE_POS(n_head);
    REQUIRE_POS(n_head_kv);
    REQUIRE_POS(head_dim);
    if (c->n_layer > DS_MAX_LAYERS - 1)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: %d layers (at most %d supported)", path, c->n_layer, DS_MAX_LAYERS - 1);
    if (c->n_head % c->n_head_kv != 0)
        return ds_fail(e, DS_ECORRUPT, "%s: attention heads (%d) are not a multiple of key/value heads (%d)", path,
                       c->n_head, c->n_head_kv);
    if (c->rope_dim <= 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
        return ds_fail(e, DS_ECORRUPT, "%s: rotary dimension %d does not fit head_dim %d", path, c->rope_dim,
                       c->head_dim);
    int sec = c->mrope_sections[0] + c->mrope_sections[1] + c->mrope_sections[2];
    if (sec && sec != c->rope_dim / 2) /* every rotated pair takes its angle from one axis */
        return ds_fail(e, DS_ECORRUPT, "%s: M-RoPE sections [%d, %d, %d] do not add up to the %d rotated pairs", path,
                       c->mrope_sections[0], c->mrope_sections[1], c->mrope_sections[2], c->rope_dim / 2);
    if (!(c->rms_eps > 0 && c->rms_eps < 1))
        return ds_fail(e, DS_ECORRUPT, "%s: rms_norm_eps %g is out of range", path, (double)c->rms_eps);
    if (!(c->rope_theta > 0))
        return ds_fail(e, DS_ECORRUPT, "%s: rope theta %g is not positive", path, (double)c->rope_theta);
    if (c->yarn_factor != 0 &&
        !(c->yarn_factor > 0 && c->yarn_orig_ctx > 0 && c->yarn_beta_fast > 0 && c->yarn_beta_slow > 0 &&
          c->yarn_mscale > 0 && isfinite(c->yarn_mscale)))
        return ds_fail(e, DS_ECORRUPT, "%s: YaRN factor %g, original context %d, beta %g/%g, attention factor %g: "
                       "each must be positive", path, (double)c->yarn_factor, c->yarn_orig_ctx,
                       (double)c->yarn_beta_fast, (double)c->yarn_beta_slow, (double)c->yarn_mscale);
    if (c->n_mtp < 0 || c->n_mtp > 1)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: %d MTP layers (0 or 1 supported)", path, c->n_mtp);
    int any_gdn = 0;
    for (int i = 0; i < c->n_layer; i++) any_gdn |= !c->layer_full[i];
    if (c->arch == DS_ARCH_QWEN3) {
        if (any_gdn) return ds_fail(e, DS_ECORRUPT, "%s: qwen3 models have only full-attention layers", path);
    } else if (any_gdn) {
        REQUIRE_POS(lin_k_heads);
        REQUIRE_POS(lin_v_heads);
        REQUIRE_POS(lin_k_dim);
        REQUIRE_POS(lin_v_dim);
        REQUIRE_POS(conv_kernel);
        if (c->lin_v_heads % c->lin_k_heads != 0)
            return ds_fail(e, DS_ECORRUPT, "%s: linear value heads (%d) are not a multiple of key heads (%d)", path,
                           c->lin_v_heads, c->lin_k_heads);
    }
    if (c->arch == DS_ARCH_QWEN35MOE) {
        REQUIRE_POS(n_expert);
        REQUIRE_POS(n_expert_used);
        REQUIRE_POS(n_ff_exp);
        REQUIRE_POS(n_ff_shexp);
        if (c->n_expert_used > c->n_expert)
            return ds_fail(e, DS_ECORRUPT, "%s: %d experts per token but only %d experts", path, c->n_expert_used,
                           c->n_expert);
    } else {
        REQUIRE_POS(n_ff);
    }
    return DS_OK;
}

double ds_yarn_get_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

int ds_model_context_limit(const ds_model_config *c) {
    double n = c->yarn_factor > 0 ? (double)c->yarn_orig_ctx * c->yarn_factor : (double)c->n_ctx_train;
    return n >= (double)(1 << 30) ? 1 << 30 : (int)n;
}
