/* model_make_policy.h - the tensor types of a GGUF file type: llama-quantize's
 * file types (Q4_K_M, IQ3_XXS, MXFP4_MOE, ...), the type it gives each tensor
 * of a model at each of them, and --tensor-type overrides (REGEX=TYPE, the
 * first regex found in a tensor's name decides), so that make-model writes
 * the files users download, and mixes of their own. */
#ifndef DS_MODEL_MAKE_POLICY_H
#define DS_MODEL_MAKE_POLICY_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/dtype.h"
#include "loading/model_file.h"

typedef struct {
    const char *name; /* as llama-quantize spells it: "Q4_K_M" */
    uint32_t ftype;   /* general.file_type: llama.cpp's LLAMA_FTYPE_* number */
    ds_dtype base;    /* the type of the matrices no rule picks out */
} ds_file_type;

/* Case-insensitive ("q4_k_m" and "Q4_K_M"; the aliases Q3_K, Q4_K, Q5_K as
 * llama-quantize has them); NULL when unknown. */
const ds_file_type *ds_file_type_find(const char *name);
int ds_file_type_count(void);
const ds_file_type *ds_file_type_at(int i);
/* F32, F16 and BF16: every matrix in that float type */
int ds_file_type_is_float(const ds_file_type *ft);

/* --tensor-type arguments, compiled */
typedef struct ds_type_overrides ds_type_overrides;
/* Parses args[0..n) ("REGEX=TYPE", TYPE a ggml type name such as q4_K or
 * iq4_nl, any case); an error names the argument. *out is NULL when n is 0. */
ds_status ds_type_overrides_new(const char *const *args, int n, ds_type_overrides **out, ds_err *e);
void ds_type_overrides_free(ds_type_overrides *ov);

/* The type of each of the n tensors of a model (its spec list without the
 * optional ones) in a file of type ft, into types[0..n): llama-quantize's
 * choices for the file type (which depend on the tensor's name, its layer,
 * its place among the tensors of its kind, and the model's heads and
 * experts), then the first override whose regex is found in the name, then
 * llama-quantize's fallback for rows the type's block does not divide.
 * Norms, other vectors, the conv weight and the MoE router stay F32 whatever
 * is asked. Fails when a row fits neither the type nor a fallback. */
ds_status ds_quant_plan(const ds_model_config *c, const ds_tensor_spec *specs, int n, const ds_file_type *ft,
                        const ds_type_overrides *ov, ds_dtype *types, ds_err *e);

#endif
