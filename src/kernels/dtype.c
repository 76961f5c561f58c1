/* dtype.c - the table of element types: user-facing names, GGUF type ids and
 * block geometry, and the lookups built on it. */
#include "kernels/dtype.h"

#include <ctype.h>

#include "common/status.h"
#include "kernels/gblock.h"

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
    [DS_Q4_1] = {"q4_1", 3, 32, (int)sizeof(ds_block_q4_1)},
    [DS_Q5_0] = {"q5_0", 6, 32, (int)sizeof(ds_block_q5_0)},
    [DS_Q5_1] = {"q5_1", 7, 32, (int)sizeof(ds_block_q5_1)},
    [DS_Q2_K] = {"q2_k", 10, DS_QK_K, (int)sizeof(ds_block_q2_K)},
    [DS_Q3_K] = {"q3_k", 11, DS_QK_K, (int)sizeof(ds_block_q3_K)},
    [DS_IQ2_XXS] = {"iq2_xxs", 16, DS_QK_K, (int)sizeof(ds_block_iq2_xxs)},
    [DS_IQ2_XS] = {"iq2_xs", 17, DS_QK_K, (int)sizeof(ds_block_iq2_xs)},
    [DS_IQ2_S] = {"iq2_s", 22, DS_QK_K, (int)sizeof(ds_block_iq2_s)},
    [DS_IQ3_XXS] = {"iq3_xxs", 18, DS_QK_K, (int)sizeof(ds_block_iq3_xxs)},
    [DS_IQ3_S] = {"iq3_s", 21, DS_QK_K, (int)sizeof(ds_block_iq3_s)},
    [DS_IQ1_S] = {"iq1_s", 19, DS_QK_K, (int)sizeof(ds_block_iq1_s)},
    [DS_IQ1_M] = {"iq1_m", 29, DS_QK_K, (int)sizeof(ds_block_iq1_m)},
    [DS_IQ4_NL] = {"iq4_nl", 20, 32, (int)sizeof(ds_block_iq4_nl)},
    [DS_IQ4_XS] = {"iq4_xs", 23, DS_QK_K, (int)sizeof(ds_block_iq4_xs)},
    [DS_MXFP4] = {"mxfp4", 39, 32, (int)sizeof(ds_block_mxfp4)},
    [DS_NVFP4] = {"nvfp4", 40, DS_QK_NVFP4, (int)sizeof(ds_block_nvfp4)},
    [DS_TQ1_0] = {"tq1_0", 34, DS_QK_K, (int)sizeof(ds_block_tq1_0)},
    [DS_TQ2_0] = {"tq2_0", 35, DS_QK_K, (int)sizeof(ds_block_tq2_0)},
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

int ds_dtype_computable(ds_dtype t) {
    switch (t) {
    case DS_F32:
    case DS_F16:
    case DS_BF16:
    case DS_Q8_0:
    case DS_Q4_0:
    case DS_Q4_K:
    case DS_Q5_K:
    case DS_Q6_K:
    case DS_NVFP4: return 1;
    default: return ds_gblock_type(t);
    }
}
