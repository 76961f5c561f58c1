/* model_shapes.c - the configurations make-model knows by name. Real shapes
 * follow the released config.json values (docs/model.md §1.2); test shapes are small
 * but keep every structural feature: 3 GDN layers per full-attention layer,
 * Hk != Hv (so the V-head order matters), GQA, partial RoPE, an MTP block,
 * and widths that are multiples of 256 so K-quant blocks fit. */
#include "loading/model_shapes.h"

#include <string.h>

#define QWEN35_COMMON                                                                                   \
    .rms_eps = 1e-6f, .rope_theta = 1e7f, .attn_output_gate = 1, .conv_kernel = 4, .full_attn_interval = 4, \
    .n_mtp = 1, .pad_id = -1

static const ds_model_shape SHAPES[] = {
    {"tiny", "hybrid dense test model: 4 layers, H=256, Hk=2/Hv=4, MTP",
     {.arch = DS_ARCH_QWEN35, QWEN35_COMMON, .n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
      .rope_dim = 16, .n_ff = 512, .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 32, .lin_v_dim = 32,
      .n_ctx_train = 4096},
     1024},
    {"tiny-moe", "hybrid MoE test model: 4 layers, H=256, 8 experts top-2, shared expert, MTP",
     {.arch = DS_ARCH_QWEN35MOE, QWEN35_COMMON, .n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2,
      .head_dim = 64, .rope_dim = 16, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 256,
      .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 32, .lin_v_dim = 32, .n_ctx_train = 4096},
     1024},
    {"tiny-qwen3", "plain dense attention test model (qwen3): 2 layers, H=256",
     {.arch = DS_ARCH_QWEN3, .rms_eps = 1e-6f, .rope_theta = 1e6f, .n_layer = 2, .n_embd = 256, .n_head = 4,
      .n_head_kv = 2, .head_dim = 64, .rope_dim = 64, .n_ff = 512, .n_ctx_train = 4096, .pad_id = -1},
     1024},
    {"qwen3.5-0.8b", "Qwen3.5-0.8B: 24 layers, H=1024, 8/2 heads, GDN 16/16, FFN 3584, tied",
     {.arch = DS_ARCH_QWEN35, QWEN35_COMMON, .n_layer = 24, .n_embd = 1024, .n_head = 8, .n_head_kv = 2,
      .head_dim = 256, .rope_dim = 64, .n_ff = 3584, .lin_k_heads = 16, .lin_v_heads = 16, .lin_k_dim = 128,
      .lin_v_dim = 128, .tied_embeddings = 1, .n_ctx_train = 262144, .n_vocab = 248320},
     248044},
    {"qwen3.5-4b", "Qwen3.5-4B: 32 layers, H=2560, 16/4 heads, GDN 16/32, FFN 9216, tied",
     {.arch = DS_ARCH_QWEN35, QWEN35_COMMON, .n_layer = 32, .n_embd = 2560, .n_head = 16, .n_head_kv = 4,
      .head_dim = 256, .rope_dim = 64, .n_ff = 9216, .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128,
      .lin_v_dim = 128, .tied_embeddings = 1, .n_ctx_train = 262144, .n_vocab = 248320},
     248044},
    {"qwen3.5-27b", "Qwen3.5-27B: 64 layers, H=5120, 24/4 heads, GDN 16/48, FFN 17408",
     {.arch = DS_ARCH_QWEN35, QWEN35_COMMON, .n_layer = 64, .n_embd = 5120, .n_head = 24, .n_head_kv = 4,
      .head_dim = 256, .rope_dim = 64, .n_ff = 17408, .lin_k_heads = 16, .lin_v_heads = 48, .lin_k_dim = 128,
      .lin_v_dim = 128, .n_ctx_train = 262144, .n_vocab = 248320},
     248044},
    {"qwen3.5-35b-a3b", "Qwen3.5-35B-A3B: 40 layers, H=2048, 16/2 heads, GDN 16/32, 256 experts top-8",
     {.arch = DS_ARCH_QWEN35MOE, QWEN35_COMMON, .n_layer = 40, .n_embd = 2048, .n_head = 16, .n_head_kv = 2,
      .head_dim = 256, .rope_dim = 64, .n_expert = 256, .n_expert_used = 8, .n_ff_exp = 512, .n_ff_shexp = 512,
      .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128, .n_ctx_train = 262144, .n_vocab = 248320},
     248044},
    {"qwen3-0.6b", "Qwen3-0.6B: 28 layers, H=1024, 16/8 heads of 128, FFN 3072, tied",
     {.arch = DS_ARCH_QWEN3, .rms_eps = 1e-6f, .rope_theta = 1e6f, .n_layer = 28, .n_embd = 1024, .n_head = 16,
      .n_head_kv = 8, .head_dim = 128, .rope_dim = 128, .n_ff = 3072, .n_ctx_train = 40960, .tied_embeddings = 1, .n_vocab = 151936,
      .pad_id = -1},
     151643},
};

int ds_model_shape_count(void) { return (int)(sizeof SHAPES / sizeof SHAPES[0]); }
const ds_model_shape *ds_model_shape_at(int i) { return &SHAPES[i]; }

const ds_model_shape *ds_model_shape_find(const char *name) {
    for (int i = 0; i < ds_model_shape_count(); i++)
        if (strcmp(SHAPES[i].name, name) == 0) return &SHAPES[i];
    return NULL;
}

void ds_model_shape_config(const ds_model_shape *s, int n_layers, ds_model_config *cfg) {
    *cfg = s->cfg;
    if (n_layers > 0) cfg->n_layer = n_layers;
    for (int i = 0; i < cfg->n_layer; i++)
        cfg->layer_full[i] = cfg->arch == DS_ARCH_QWEN3 || (i + 1) % cfg->full_attn_interval == 0;
}
