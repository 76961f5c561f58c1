/* model_make.h - writes deterministic random-weight models, real-shaped, as
 * a GGUF file (llama.cpp's conventions) or a Hugging Face directory. The same
 * options give the same weights in both formats: values are drawn per tensor
 * (and per expert) from the seed and the tensor's name, in Hugging Face form,
 * and the GGUF writer applies the converter's transformations to them. */
#ifndef DS_MODEL_MAKE_H
#define DS_MODEL_MAKE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "loading/model_file.h"
#include "loading/vision_file.h"

typedef struct {
    const char *shape;          /* a ds_model_shape name */
    int n_layers;               /* 0: the shape's own */
    const char *dtype;          /* a llama-quantize file type name (see model_make_policy.h), any case */
    const char *const *tensor_types; /* --tensor-type REGEX=TYPE overrides, the first match decides */
    int n_tensor_types;
    ds_format format;
    uint64_t seed;
    float scale;                /* weight scale: matrices get std scale/sqrt(fan_in) */
    const char *tokenizer_json; /* NULL: generate a byte-level BPE vocabulary */
    const char *out;            /* file (GGUF) or directory (safetensors) */
    int no_mtp;
    float yarn_factor;          /* > 0: YaRN with this factor over the shape's context (0: none) */
    int hf_flat;                /* HF: text-only ForCausalLM layout ("model." prefix, no text_config) */
    int split_experts;          /* HF: experts as mlp.experts.<e>.<proj>.weight */
    size_t shard_bytes;         /* HF: split into shards of about this size (0: one file) */
    int mtp_agree_set;          /* 1: make the MTP head agree with the model on mtp_agree of the tokens */
    float mtp_agree;            /* 0..1 (see model_make_mtp.c); needs an MTP head */
    float vocab_skew;           /* 0: off; a: output-head row v scaled by (1 + v/1024)^-a, so that the
                                 * model's choices fall mostly on low ids, as a real model's do on a BPE
                                 * vocabulary ordered by merge rank (model_make_mtp.c) */
    int n_threads;              /* quantising threads; <= 0: one per core. The file is the same for any count */
    const char *mtp_out;        /* GGUF: the MTP head to this file of its own and `out` without it, as
                                 * llama.cpp's converter does with --mtp / --no-mtp (mtp_file.c) */
    /* the vision tower (model_make_vision.h): as an mmproj GGUF at mmproj_out,
     * and in the Hugging Face directory when vision is set */
    const char *mmproj_out;
    int vision;
    int vision_layers;          /* 0: the shape's own depth */
    int deepstack_set;          /* 1: deepstack[0..n_deepstack) replaces the shape's DeepStack blocks */
    int n_deepstack;
    int deepstack[DS_MAX_DEEPSTACK];
} ds_make_options;

ds_status ds_make_model(const ds_make_options *o, ds_err *e);
/* The generator of every random weight make-model writes: uniform in [-1, 1), from a splitmix64 state. */
float ds_make_uniform(uint64_t *state);

/* The values make-model writes for a canonical tensor, in Hugging Face form
 * (zero-centred norms, A_log, grouped value heads), for tests: fills
 * ne[0]*ne[1] floats of matrix `expert` (0 for 2-D tensors). */
void ds_make_values(const ds_model_config *cfg, const ds_tensor_spec *s, uint64_t seed, float scale, int expert,
                    float *dst);
/* ds_make_values plus the --mtp-agree adjustments (beta from ds_make_mtp_calibrate). */
void ds_make_values_ex(const ds_model_config *cfg, const ds_tensor_spec *s, const ds_make_options *o, float beta,
                       int expert, float *dst);
/* Finds the MTP perturbation that gives o->mtp_agree; *measured is the
 * agreement reached on a sample of tokens. Does nothing when the knob is off. */
ds_status ds_make_mtp_calibrate(const ds_model_config *cfg, const ds_make_options *o, float *beta, float *measured,
                                ds_err *e);
/* Turns Hugging Face form into GGUF form in place (norm +1, -exp(A_log),
 * grouped to tiled value heads) for one matrix of tensor s. */
void ds_make_to_gguf_form(const ds_model_config *cfg, const ds_tensor_spec *s, float *data);
/* The tensor type make-model writes to GGUF for tensor s of a model with
 * options o (file type and overrides); fails on an unknown file type, a bad
 * override, or a tensor the model does not have. */
ds_status ds_make_tensor_type(const ds_model_config *cfg, const ds_tensor_spec *s, const ds_make_options *o,
                              ds_dtype *type, ds_err *e);
/* The same for file type `dtype` without overrides, for tests; F32 where
 * ds_make_tensor_type would fail. */
ds_dtype ds_make_gguf_type(const ds_model_config *cfg, const ds_tensor_spec *s, const char *dtype);

#endif
