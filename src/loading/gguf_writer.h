/* gguf_writer.h - streaming GGUF v3 writer.
 *
 * Metadata and tensor infos are collected first; ds_gguf_writer_begin writes
 * the header, and then the data of each tensor is handed over in the order the
 * tensors were added, so a model larger than memory can be written one tensor
 * at a time. Allocation failures while collecting are remembered and reported
 * by begin. */
#ifndef DS_GGUF_WRITER_H
#define DS_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/dtype.h"

typedef struct ds_gguf_writer ds_gguf_writer;

/* alignment: a power of two (0 means the default, 32); any other value is
 * recorded as general.alignment, which callers must then not add themselves.
 * Returns NULL when out of memory or for an alignment that is not a power of two. */
ds_gguf_writer *ds_gguf_writer_new(uint32_t alignment);
void ds_gguf_writer_free(ds_gguf_writer *w);

void ds_gguf_writer_u32(ds_gguf_writer *w, const char *key, uint32_t v);
void ds_gguf_writer_i32(ds_gguf_writer *w, const char *key, int32_t v);
void ds_gguf_writer_f32(ds_gguf_writer *w, const char *key, float v);
void ds_gguf_writer_bool(ds_gguf_writer *w, const char *key, int v);
void ds_gguf_writer_str(ds_gguf_writer *w, const char *key, const char *v);
void ds_gguf_writer_arr_i32(ds_gguf_writer *w, const char *key, const int32_t *v, size_t n);
void ds_gguf_writer_arr_f32(ds_gguf_writer *w, const char *key, const float *v, size_t n);
void ds_gguf_writer_arr_bool(ds_gguf_writer *w, const char *key, const uint8_t *v, size_t n);
void ds_gguf_writer_arr_str(ds_gguf_writer *w, const char *key, const char *const *v, size_t n);

/* Declares a tensor; ne[0] is the innermost dimension. Returns its index. */
int ds_gguf_writer_add_tensor(ds_gguf_writer *w, const char *name, ds_dtype type, int n_dims, const int64_t *ne);
size_t ds_gguf_writer_tensor_bytes(const ds_gguf_writer *w, int idx);

ds_status ds_gguf_writer_begin(ds_gguf_writer *w, const char *path, ds_err *e);
/* Writes (the next part of) the data of tensor idx; tensors must come in the
 * order they were added, each in as many chunks as the caller likes. */
ds_status ds_gguf_writer_tensor_chunk(ds_gguf_writer *w, int idx, const void *data, size_t nbytes, ds_err *e);
/* Checks that every tensor was written, flushes and closes the file. */
ds_status ds_gguf_writer_finish(ds_gguf_writer *w, ds_err *e);

#endif
