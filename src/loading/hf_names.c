/* hf_names.c - the Hugging Face <-> canonical tensor name table (docs/model.md §2). */
#include "loading/hf_names.h"

const ds_hf_name DS_HF_LAYER_NAMES[] = {
    {"input_layernorm.weight", "attn_norm.weight", DS_HF_NORM},
    {"post_attention_layernorm.weight", NULL, DS_HF_NORM},
    {"self_attn.q_proj.weight", "attn_q.weight", DS_HF_PLAIN},
    {"self_attn.k_proj.weight", "attn_k.weight", DS_HF_PLAIN},
    {"self_attn.v_proj.weight", "attn_v.weight", DS_HF_PLAIN},
    {"self_attn.o_proj.weight", "attn_output.weight", DS_HF_PLAIN},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", DS_HF_NORM},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", DS_HF_NORM},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", DS_HF_PLAIN},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", DS_HF_PLAIN},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", DS_HF_PLAIN},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", DS_HF_PLAIN},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", DS_HF_CONV1D},
    {"linear_attn.dt_bias", "ssm_dt.bias", DS_HF_VECTOR},
    {"linear_attn.A_log", "ssm_a", DS_HF_ALOG},
    {"linear_attn.norm.weight", "ssm_norm.weight", DS_HF_VECTOR},
    {"linear_attn.out_proj.weight", "ssm_out.weight", DS_HF_PLAIN},
    {"mlp.gate_proj.weight", "ffn_gate.weight", DS_HF_PLAIN},
    {"mlp.up_proj.weight", "ffn_up.weight", DS_HF_PLAIN},
    {"mlp.down_proj.weight", "ffn_down.weight", DS_HF_PLAIN},
    {"mlp.gate.weight", "ffn_gate_inp.weight", DS_HF_PLAIN},
    {"mlp.experts.gate_up_proj", "ffn_gate_exps.weight", DS_HF_GATE_UP},
    {"mlp.experts.down_proj", "ffn_down_exps.weight", DS_HF_PLAIN},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", DS_HF_PLAIN},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", DS_HF_PLAIN},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", DS_HF_PLAIN},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", DS_HF_VECTOR},
};
const int DS_HF_N_LAYER_NAMES = (int)(sizeof DS_HF_LAYER_NAMES / sizeof DS_HF_LAYER_NAMES[0]);

const ds_hf_name DS_HF_MTP_NAMES[] = {
    {"fc.weight", "nextn.eh_proj.weight", DS_HF_PLAIN},
    {"pre_fc_norm_embedding.weight", "nextn.enorm.weight", DS_HF_NORM},
    {"pre_fc_norm_hidden.weight", "nextn.hnorm.weight", DS_HF_NORM},
    {"norm.weight", "nextn.shared_head_norm.weight", DS_HF_NORM},
};
const int DS_HF_N_MTP_NAMES = (int)(sizeof DS_HF_MTP_NAMES / sizeof DS_HF_MTP_NAMES[0]);

const char *ds_hf_layer_gguf_name(const ds_hf_name *n, ds_arch arch) {
    if (n->gguf) return n->gguf;
    return arch == DS_ARCH_QWEN3 ? "ffn_norm.weight" : "post_attention_norm.weight";
}
