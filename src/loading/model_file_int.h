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
    ds_load_options opt;         /* as opened (mtp_path borrowed only while opening) */
    ds_model_file *mtp;          /* the separate MTP head file, or NULL; its tensors are in this table */
    int is_mtp_file;             /* this is such a head file: its tokens are the main file's business */
};

/* Appends a tensor; the name must be unique. */
ds_status ds_model_add_tensor(ds_model_file *m, const ds_tensor *t, ds_err *e);
/* Adds every tensor of m->gguf (opened) as the file has it. */
ds_status ds_model_add_gguf_tensors(ds_model_file *m, ds_err *e);
/* "[a, b, c]": a shape for error messages. */
void ds_tensor_shape_text(char *buf, size_t n, int n_dims, const int64_t *ne);
/* Allocates a buffer the model frees on close. */
void *ds_model_alloc(ds_model_file *m, size_t bytes);
/* Replaces t->data by an F32 copy (for norms and vectors stored in 16-bit). */
ds_status ds_model_tensor_to_f32(ds_model_file *m, ds_tensor *t, ds_err *e);

ds_status ds_model_load_gguf(ds_model_file *m, ds_err *e);
ds_status ds_model_load_hf(ds_model_file *m, const char *dir, ds_err *e);
/* Opens the safetensors file of a Hugging Face directory, or the shards its
 * model.safetensors.index.json names, into m->shards (also for the vision tower). */
ds_status ds_model_open_shards(ds_model_file *m, const char *dir, ds_err *e);
/* Opens the GGUF file at path as m's MTP head (mtp_file.c): checks that the
 * two belong together and adds the head's block to m's tensor table. */
ds_status ds_model_attach_mtp(ds_model_file *m, const char *path, ds_err *e);
/* Checks m's tensors against its config; with mtp_only, only the MTP block's. */
ds_status ds_model_validate(ds_model_file *m, int mtp_only, ds_err *e);

#endif
