/* dtype.h - element types of weight tensors and their block formats.
 *
 * The quantised block structs are the GGUF on-disk layout (llama.cpp's ggml
 * formats) and the kernel contract at once. Rows are stored as whole blocks:
 * a row of n elements of type t takes ds_dtype_row_bytes(t, n) bytes, and n
 * must be a multiple of the block size. */
#ifndef DS_DTYPE_H
#define DS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DS_F32 = 0,
    DS_F16,
    DS_BF16,
    DS_Q8_0,
    DS_Q4_0,
    DS_Q4_K,
    DS_Q5_K,
    DS_Q6_K,
    DS_DTYPE_COUNT
} ds_dtype;

#define DS_QK8_0 32
#define DS_QK4_0 32
#define DS_QK_K 256
#define DS_K_SCALE_SIZE 12

/* d: fp16 scale; value = d * qs[i] */
typedef struct { uint16_t d; int8_t qs[DS_QK8_0]; } ds_block_q8_0;
/* d: fp16 scale; element i (i<16) is the low nibble of qs[i], element i+16 the
 * high nibble; value = d * (nibble - 8) */
typedef struct { uint16_t d; uint8_t qs[DS_QK4_0 / 2]; } ds_block_q4_0;
/* 8 sub-blocks of 32 with 6-bit scales and mins packed in scales[12];
 * value = d * scale_j * q - dmin * min_j */
typedef struct { uint16_t d, dmin; uint8_t scales[DS_K_SCALE_SIZE]; uint8_t qs[DS_QK_K / 2]; } ds_block_q4_K;
/* as q4_K, plus a fifth bit per element in qh */
typedef struct { uint16_t d, dmin; uint8_t scales[DS_K_SCALE_SIZE]; uint8_t qh[DS_QK_K / 8]; uint8_t qs[DS_QK_K / 2]; } ds_block_q5_K;
/* 16 sub-blocks of 16 with int8 scales; 6-bit quants split into ql (low 4) and qh (high 2);
 * value = d * scale_j * (q - 32) */
typedef struct { uint8_t ql[DS_QK_K / 2]; uint8_t qh[DS_QK_K / 4]; int8_t scales[DS_QK_K / 16]; uint16_t d; } ds_block_q6_K;

_Static_assert(sizeof(ds_block_q8_0) == 34, "ds_block_q8_0: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q4_0) == 18, "ds_block_q4_0: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q4_K) == 144, "ds_block_q4_K: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q5_K) == 176, "ds_block_q5_K: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q6_K) == 210, "ds_block_q6_K: layout is the GGUF format");

typedef struct {
    const char *name;     /* "f32", "q4_k", ... as users type it */
    uint32_t gguf_type;   /* ggml_type id in GGUF files */
    int block_elems;      /* elements per block (1 for plain floats) */
    int block_bytes;      /* bytes per block */
} ds_dtype_info;

const ds_dtype_info *ds_dtype_get(ds_dtype t);
/* DS_OK-style: returns 0 and sets *out when the GGUF type id is one we read. */
int ds_dtype_from_gguf(uint32_t gguf_type, ds_dtype *out);
/* Parses a user-facing name ("bf16", "q8_0", "Q4_K"); returns 0 on success. */
int ds_dtype_from_name(const char *name, ds_dtype *out);
/* Bytes of n elements; n must be a multiple of the block size (checked by callers). */
size_t ds_dtype_row_bytes(ds_dtype t, int64_t n);

/* Scalar reference conversions of one row of n elements (n a multiple of the
 * block size). These are the definitions every faster kernel is tested against. */
void ds_dequantize_row(ds_dtype t, const void *src, float *dst, int64_t n);
void ds_quantize_row(ds_dtype t, const float *src, void *dst, int64_t n);

#endif
