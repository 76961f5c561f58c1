/* dtype.c - the table of element types: user-facing names, GGUF type ids and
 * block geometry, and the lookups built on it. */
#include "kernels/dtype.h"

#include <ctype.h>

#include "common/status.h"

/* Indexed by ds_dtype; the GGUF ids are ggml_type values and must never be
 * renumbered, since they are what model files contain. */
static const ds_dtype_info dtype_table[DS_DTYPE_COUNT] = {
    [DS_F32] = {"f32", 0, 1, 4},
    [DS_F16] = {"f16", 1, 1, 2},
    [DS_BF16] = {"bf16", 30, 1, 2},
    [DS_Q8_0] = {"q8_0", 8, DS_QK8_0, (int)sizeof(ds_block_q8_0)},
    [DS_Q4_0] = {"q4_0", 2, DS_QK4_0, (int)sizeof(ds_block_q4_0)},
    [DS_Q4_K] = {"q4_k", 12, DS_QK_K, (int)sizeof(ds_block_q4_K)},
    [DS_Q5_K] = {"q5_k", 13, DS_QK_K, (int)sizeof(ds_block_q5_K)},
    [DS_Q6_K] = {"q6_k", 14, DS_QK_K, (int)sizeof(ds_block_q6_K)},
};

const ds_dtype_info *ds_dtype_get(ds_dtype t) {
    if ((unsigned)t >= DS_DTYPE_COUNT) return NULL;
    return &dtype_table[t];
}

int ds_dtype_from_gguf(uint32_t gguf_type, ds_dtype *out) {
    for (int t = 0; t < DS_DTYPE_COUNT; t++) {
        if (dtype_table[t].gguf_type == gguf_type) {
            *out = (ds_dtype)t;
            return DS_OK;
        }
    }
    return DS_EUNSUPPORTED;
}

static int names_equal_ignoring_case(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    }
    return *a == *b;
}

int ds_dtype_from_name(const char *name, ds_dtype *out) {
    if (!name) return DS_EINVAL;
    for (int t = 0; t < DS_DTYPE_COUNT; t++) {
        if (names_equal_ignoring_case(name, dtype_table[t].name)) {
            *out = (ds_dtype)t;
            return DS_OK;
        }
    }
    return DS_EINVAL;
}

size_t ds_dtype_row_bytes(ds_dtype t, int64_t n) {
    const ds_dtype_info *info = ds_dtype_get(t);
    if (!info || n <= 0) return 0;
    return (size_t)(n / info->block_elems) * (size_t)info->block_bytes;
}
