/* hf_names.h - how Hugging Face Qwen3/Qwen3.5 tensor names correspond to the
 * canonical (GGUF) names, and which conversion each needs. Used by the HF
 * loader (HF -> canonical) and by make-model (canonical -> HF). */
#ifndef DS_HF_NAMES_H
#define DS_HF_NAMES_H

#include "loading/model_file.h"

typedef enum {
    DS_HF_PLAIN,    /* same bytes, shape reversed */
    DS_HF_NORM,     /* RMSNorm weight: zero-centred in Qwen3.5 (scale = 1 + w) */
    DS_HF_VECTOR,   /* small vector, kept in F32 */
    DS_HF_ALOG,     /* A_log -> ssm_a = -exp(A_log) */
    DS_HF_CONV1D,   /* [C, 1, K] -> {K, C} */
    DS_HF_GATE_UP,  /* fused experts [E, 2I, H] -> ffn_gate_exps + ffn_up_exps */
} ds_hf_conversion;

typedef struct {
    const char *hf;    /* after "layers.<i>." or "mtp." */
    const char *gguf;  /* after "blk.<i>."; NULL: see ds_hf_layer_gguf_name */
    ds_hf_conversion conv;
} ds_hf_name;

extern const ds_hf_name DS_HF_LAYER_NAMES[];
extern const int DS_HF_N_LAYER_NAMES;
extern const ds_hf_name DS_HF_MTP_NAMES[];  /* the MTP block's own tensors (mtp.<hf>) */
extern const int DS_HF_N_MTP_NAMES;

/* The canonical suffix of a layer entry for this architecture. */
const char *ds_hf_layer_gguf_name(const ds_hf_name *n, ds_arch arch);

#endif
