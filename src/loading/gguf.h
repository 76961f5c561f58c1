/* gguf.h - GGUF v2/v3 reader: parses and validates the header of a mapped
 * file (or any buffer) and exposes metadata and tensors in place.
 *
 * Every count, length, offset and size read from the file is checked against
 * the bytes that are really there before it is used; a bad file gives one
 * error line naming the file, the key or tensor, and the byte offset. */
#ifndef DS_GGUF_H
#define DS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mapped_file.h"
#include "common/status.h"
#include "kernels/dtype.h"

#define DS_GGUF_MAX_DIMS 4

enum {
    DS_GGUF_UINT8 = 0, DS_GGUF_INT8 = 1, DS_GGUF_UINT16 = 2, DS_GGUF_INT16 = 3,
    DS_GGUF_UINT32 = 4, DS_GGUF_INT32 = 5, DS_GGUF_FLOAT32 = 6, DS_GGUF_BOOL = 7,
    DS_GGUF_STRING = 8, DS_GGUF_ARRAY = 9, DS_GGUF_UINT64 = 10, DS_GGUF_INT64 = 11,
    DS_GGUF_FLOAT64 = 12, DS_GGUF_TYPE_COUNT
};

/* A string inside the file: not NUL-terminated. */
typedef struct { const char *ptr; uint64_t len; } ds_str;

typedef struct {
    ds_str key;
    uint32_t type;          /* DS_GGUF_* */
    uint32_t arr_type;      /* element type when type == DS_GGUF_ARRAY */
    uint64_t arr_len;       /* element count when type == DS_GGUF_ARRAY */
    const uint8_t *val;     /* the value (or the first array element) in the file */
    uint64_t val_offset;    /* byte offset of val in the file, for messages */
} ds_gguf_kv;

typedef struct {
    char name[64];          /* NUL-terminated copy (GGUF caps names at 63 bytes) */
    uint32_t n_dims;
    int64_t ne[DS_GGUF_MAX_DIMS]; /* ne[0] is the innermost (contiguous) dimension */
    ds_dtype type;
    uint64_t offset;        /* relative to the start of the data section */
    const uint8_t *data;
    size_t nbytes;
} ds_gguf_tensor;

typedef struct ds_gguf {
    const char *path;       /* borrowed; for messages */
    ds_mapped_file map;     /* owned when opened with ds_gguf_open */
    uint32_t version;
    uint64_t n_kv, n_tensors;
    ds_gguf_kv *kv;
    ds_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;
} ds_gguf;

ds_status ds_gguf_open(ds_gguf *g, const char *path, ds_err *e);
/* Parses a buffer the caller keeps alive (used by tests and fuzzing). */
ds_status ds_gguf_parse(ds_gguf *g, const uint8_t *buf, size_t size, const char *name, ds_err *e);
void ds_gguf_close(ds_gguf *g);

const ds_gguf_kv *ds_gguf_find(const ds_gguf *g, const char *key);
const ds_gguf_tensor *ds_gguf_find_tensor(const ds_gguf *g, const char *name);

/* Typed getters. They return DS_ENOTFOUND when the key is absent (so callers
 * can apply a documented default) and DS_ECORRUPT, naming the key, when it has
 * the wrong type or an out-of-range value. Integers of any width are accepted
 * when the value fits. */
ds_status ds_gguf_get_u32(const ds_gguf *g, const char *key, uint32_t *out, ds_err *e);
ds_status ds_gguf_get_f32(const ds_gguf *g, const char *key, float *out, ds_err *e);
ds_status ds_gguf_get_bool(const ds_gguf *g, const char *key, bool *out, ds_err *e);
ds_status ds_gguf_get_str(const ds_gguf *g, const char *key, ds_str *out, ds_err *e);
/* An array of integers, any width, as int64 (out must hold kv->arr_len values). */
ds_status ds_gguf_arr_ints(const ds_gguf *g, const ds_gguf_kv *kv, int64_t *out, ds_err *e);
ds_status ds_gguf_arr_floats(const ds_gguf *g, const ds_gguf_kv *kv, float *out, ds_err *e);
/* An array of strings (out must hold kv->arr_len entries, pointing into the file). */
ds_status ds_gguf_arr_strings(const ds_gguf *g, const ds_gguf_kv *kv, ds_str *out, ds_err *e);

bool ds_str_eq(ds_str s, const char *cstr);

#endif
