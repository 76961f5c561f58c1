/* safetensors.h - reader for one .safetensors file: an 8-byte little-endian
 * header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
 * raw tensor bytes. The header is validated in full; data is used in place. */
#ifndef DS_SAFETENSORS_H
#define DS_SAFETENSORS_H

#include <stdint.h>

#include "common/mapped_file.h"
#include "common/status.h"
#include "kernels/dtype.h"

#define DS_ST_MAX_DIMS 8
#define DS_ST_MAX_HEADER (100u << 20) /* the format's own limit on the JSON header */

typedef struct {
    char *name;
    char st_dtype[16];        /* as written in the file: "BF16", "F32", ... */
    int has_dtype;            /* 1 when st_dtype maps to a ds_dtype deltaserve reads */
    ds_dtype type;
    int n_dims;
    int64_t shape[DS_ST_MAX_DIMS]; /* outermost first, as in the file (PyTorch order) */
    const uint8_t *data;
    size_t nbytes;
} ds_st_tensor;

typedef struct {
    const char *path;
    ds_mapped_file map;
    ds_st_tensor *tensors;
    int n_tensors;
} ds_safetensors;

ds_status ds_safetensors_open(ds_safetensors *st, const char *path, ds_err *e);
ds_status ds_safetensors_parse(ds_safetensors *st, const uint8_t *buf, size_t size, const char *name, ds_err *e);
void ds_safetensors_close(ds_safetensors *st);
const ds_st_tensor *ds_safetensors_find(const ds_safetensors *st, const char *name);

#endif
