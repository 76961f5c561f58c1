/* model_file.h - one description of a model, whatever file it came from.
 *
 * A GGUF file and a Hugging Face safetensors directory are both turned into a
 * ds_model_file: a config and a set of tensors under canonical names (GGUF's
 * names) in canonical form:
 *   - shapes in ggml order: ne[0] is the contiguous (input) dimension, so a
 *     PyTorch Linear weight [out, in] has ne = {in, out};
 *   - every RMSNorm weight is the multiplier itself (the zero-centred "1 + w"
 *     of Qwen3.5 is folded in), in F32; the Gated DeltaNet norm stays plain;
 *   - ssm_a holds -exp(A_log) and ssm_dt.bias the dt bias, in F32;
 *   - MoE experts are 3-D {in, out, n_expert} views, one matrix per expert.
 * Only the GDN value-head order is left as the file has it and is described by
 * cfg.v_heads_tiled, because reordering it would mean rewriting quantised
 * matrices. Nothing above this layer needs to know the file format. */
#ifndef DS_MODEL_FILE_H
#define DS_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/dtype.h"

#define DS_MAX_LAYERS 512
#define DS_MAX_EOS 4

typedef enum { DS_ARCH_QWEN3 = 0, DS_ARCH_QWEN35, DS_ARCH_QWEN35MOE, DS_ARCH_COUNT } ds_arch;
typedef enum { DS_FORMAT_GGUF = 0, DS_FORMAT_SAFETENSORS } ds_format;

typedef struct {
    ds_arch arch;
    int n_layer;           /* decoder layers, MTP not included */
    int n_embd;            /* H: residual width */
    int n_vocab;           /* rows of the embedding (padded vocabulary) */
    int n_ctx_train;
    float rms_eps;
    /* full (softmax) attention */
    int n_head, n_head_kv, head_dim;
    int attn_output_gate;  /* 1: q_proj also yields a per-head sigmoid gate (Qwen3.5) */
    int rope_dim;          /* leading dims of each head that are rotated (NeoX halves) */
    float rope_theta;
    /* M-RoPE (Qwen3-VL, Qwen3.5): rotated pair i takes its angle from the T, H
     * or W position; interleaved: i % 3 == 1 -> H, 2 -> W, else T, while each
     * axis has slots left of its section count [T, H, W]; {0}: plain 1-D RoPE */
    int mrope_sections[3];
    int mrope_interleaved;
    /* YaRN context extension (HF rope_type "yarn", GGUF rope.scaling.type
     * "yarn"); yarn_factor 0: none. Pair i's frequency blends theta^(-2i/d)
     * (kept, fast pairs) and that / factor (interpolated, slow pairs) along a
     * ramp between the pairs that turn beta_fast and beta_slow times over
     * yarn_orig_ctx positions; cos and sin are scaled by yarn_mscale. */
    float yarn_factor;
    int yarn_orig_ctx;             /* original_max_position_embeddings */
    float yarn_beta_fast, yarn_beta_slow;
    float yarn_mscale;             /* attention factor (default 0.1 ln factor + 1) */
    int yarn_truncate;             /* 1: the ramp's ends rounded outward to whole pairs */
    /* dense SwiGLU FFN */
    int n_ff;
    /* mixture of experts (every layer of qwen35moe) */
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    /* Gated DeltaNet */
    int lin_k_heads, lin_v_heads;  /* Hk, Hv (Hv a multiple of Hk) */
    int lin_k_dim, lin_v_dim;      /* Dk, Dv */
    int conv_kernel;               /* K */
    int v_heads_tiled;             /* value head h uses k head h % Hk (1) or h / (Hv/Hk) (0) */
    int full_attn_interval;
    uint8_t layer_full[DS_MAX_LAYERS]; /* 1 where layer i is full attention */
    int n_mtp;             /* MTP blocks after the decoder (0 or 1); stored as blk.<n_layer> */
    int tied_embeddings;   /* no 'output' tensor: logits use token_embd */
    /* tokens */
    int32_t eos_ids[DS_MAX_EOS];
    int n_eos;
    int32_t pad_id;        /* -1 when none */
} ds_model_config;

typedef struct {
    char name[64];
    ds_dtype type;
    int n_dims;
    int64_t ne[4];
    size_t nb2;            /* bytes from one matrix to the next along ne[2]; rows are contiguous */
    const uint8_t *data;
} ds_tensor;

typedef struct ds_model_file ds_model_file;

/* Opens a GGUF file or a Hugging Face directory (or its config.json) and
 * validates every tensor against the config. On failure *out is NULL and e
 * names the file and the field or tensor. */
ds_status ds_model_open(const char *path, ds_model_file **out, ds_err *e);
void ds_model_close(ds_model_file *m);

/* What a float8 (e4m3, block-scaled) Hugging Face checkpoint's weights become
 * at load: the kernels do not run FP8. Q8_0 (the default) keeps the memory of
 * the FP8 file and runs the fastest 8-bit kernels; BF16 doubles the memory and
 * is exact wherever the block scale is a power of two (see fp8.h). */
typedef enum { DS_FP8_AS_Q8_0 = 0, DS_FP8_AS_BF16 } ds_fp8_as;

typedef struct {
    const char *mtp_path;  /* the MTP head from this GGUF file (llama.cpp's mtp-*.gguf); NULL: none */
    ds_fp8_as fp8_as;
    int n_threads;         /* threads converting FP8 weights; <= 0: one per core */
    /* the vision tower (vision_file.h), opened beside the model by its users
     * (serve, generate): --mmproj PATH; NULL: ds_vision_find's; no_mmproj: none */
    const char *mmproj_path;
    int no_mmproj;
} ds_load_options;

/* ds_model_open with options (NULL: the defaults). With mtp_path, the main
 * file must have no head of its own and the two files must belong together
 * (architecture, hidden size, vocabulary, layer count): a pair that does not
 * is refused with a message naming both files and the difference. */
ds_status ds_model_open_ex(const char *path, const ds_load_options *o, ds_model_file **out, ds_err *e);
/* The file the MTP head came from (the main file's path when it has its own), or NULL without a head. */
const char *ds_model_mtp_path(const ds_model_file *m);

const ds_model_config *ds_model_config_of(const ds_model_file *m);
ds_format ds_model_format(const ds_model_file *m);
const char *ds_model_path(const ds_model_file *m);
int ds_model_n_tensors(const ds_model_file *m);
const ds_tensor *ds_model_tensor_at(const ds_model_file *m, int i);
/* NULL when absent (optional tensors, e.g. 'output' of a tied model). */
const ds_tensor *ds_model_tensor(const ds_model_file *m, const char *name);
/* Where the tokenizer lives: a GGUF file holds it in its metadata; a
 * Hugging Face directory has tokenizer.json (NULL when absent). */
const char *ds_model_tokenizer_json(const ds_model_file *m);
struct ds_gguf;
const struct ds_gguf *ds_model_gguf(const ds_model_file *m);
/* The model's chat template, or NULL. */
const char *ds_model_chat_template(const ds_model_file *m);

/* Bytes of one tensor matrix row of n elements of m's type etc. */
size_t ds_tensor_bytes(const ds_tensor *t);

const char *ds_arch_name(ds_arch a);
int ds_arch_from_name(const char *name, ds_arch *out);

/* --- the expected tensor set of a config (shared by loaders, validation and make-model) --- */

typedef enum {
    DS_TK_MATRIX,    /* a weight matrix or expert stack: quantisable */
    DS_TK_NORM,      /* RMSNorm multiplier (zero-centred in HF Qwen3.5 files) */
    DS_TK_VECTOR,    /* other small F32 vectors: ssm_a, ssm_dt.bias, ssm_norm */
    DS_TK_CONV,      /* depthwise conv weight {K, channels} */
    DS_TK_EMBED,     /* token embedding */
} ds_tensor_kind;

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[4];
    ds_tensor_kind kind;
    int optional;
    int layer;       /* block index, -1 for globals; n_layer for the MTP block */
} ds_tensor_spec;

/* Calls fn for each tensor a model with this config has, in file order. */
void ds_model_for_each_spec(const ds_model_config *cfg, void (*fn)(const ds_tensor_spec *, void *), void *ctx);
/* Checks the config for values that cannot be right (zero sizes, Hv % Hk,
 * layer kinds); names the first field that is wrong, as the file's format
 * (a ds_format) calls it, or by its name here for -1 (a config made in memory). */
ds_status ds_model_config_check(const ds_model_config *cfg, const char *path, int format, ds_err *e);
/* YaRN's get_mscale: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1. */
double ds_yarn_get_mscale(double scale, double mscale);
/* The longest context the config supports: context_length (HF
 * max_position_embeddings), or with YaRN the original context times the
 * factor, as vLLM derives its max_model_len; at most 1 << 30. */
int ds_model_context_limit(const ds_model_config *cfg);

/* Derived sizes (exact, in bytes, for the runtime's own cache formats: KV in
 * F16/BF16, conv state in F32... see model_info.c for the definitions). */
typedef struct {
    int64_t n_params, n_params_active;  /* main model, MTP counted separately */
    int64_t n_params_mtp;
    int64_t n_params_mtp_active;        /* what one MTP step reads: its routed experts, not all */
    int n_full_layers, n_gdn_layers;
    int64_t kv_bytes_per_token;         /* K and V of every full-attention layer, 16-bit */
    int64_t gdn_state_bytes_per_seq;    /* recurrent state (F32) + conv state (16-bit) */
    int64_t weight_bytes;
} ds_model_stats;
void ds_model_compute_stats(const ds_model_file *m, ds_model_stats *st);

#endif
