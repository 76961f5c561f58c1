/* model_file_int.h - what the GGUF and Hugging Face loaders share inside the
 * loading layer: the ds_model_file struct and helpers to fill it. */
#ifndef DS_MODEL_FILE_INT_H
#define DS_MODEL_FILE_INT_H

#include "loading/gguf.h"
#include "loading/model_file.h"
#include "loading/safetensors.h"

struct ds_model_file {
    char *path;
    ds_format format;
    ds_model_config cfg;
    ds_tensor *tensors;
    int n_tensors, cap_tensors;
    void **owned;                /* heap buffers holding converted tensors */
    int n_owned, cap_owned;
    ds_gguf gguf;                /* GGUF: the mapped file */
    ds_safetensors *shards;      /* HF: one per .safetensors file */
    int n_shards;
    char *tokenizer_json;        /* HF: path of tokenizer.json, or NULL */
    char *chat_template;         /* owned copy, or NULL */
};

/* Appends a tensor; the name must be unique. */
ds_status ds_model_add_tensor(ds_model_file *m, const ds_tensor *t, ds_err *e);
/* Allocates a buffer the model frees on close. */
void *ds_model_alloc(ds_model_file *m, size_t bytes);
/* Replaces t->data by an F32 copy (for norms and vectors stored in 16-bit). */
ds_status ds_model_tensor_to_f32(ds_model_file *m, ds_tensor *t, ds_err *e);

ds_status ds_model_load_gguf(ds_model_file *m, ds_err *e);
ds_status ds_model_load_hf(ds_model_file *m, const char *dir, ds_err *e);

#endif
