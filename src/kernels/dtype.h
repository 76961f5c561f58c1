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
    /* read from files and computed through the kernels' common integer form (gblock.h) */
    DS_Q4_1,
    DS_Q5_0,
    DS_Q5_1,
    DS_Q2_K,
    DS_Q3_K,
    DS_IQ2_XXS,
    DS_IQ2_XS,
    DS_IQ2_S,
    DS_IQ3_XXS,
    DS_IQ3_S,
    DS_IQ1_S,
    DS_IQ1_M,
    DS_IQ4_NL,
    DS_IQ4_XS,
    DS_MXFP4,
    DS_NVFP4,
    DS_TQ1_0,
    DS_TQ2_0,
    DS_DTYPE_COUNT
} ds_dtype;

#define DS_QK8_0 32
#define DS_QK4_0 32
#define DS_QK_K 256
#define DS_K_SCALE_SIZE 12
#define DS_QK_NVFP4 64

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

/* value = d * q + m, q the nibble (layout of q4_0) */
typedef struct { uint16_t d, m; uint8_t qs[16]; } ds_block_q4_1;
/* value = d * (q - 16); bit 4 of element i is bit i of qh (little-endian) */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } ds_block_q5_0;
/* value = d * q + m, q as in q5_0 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } ds_block_q5_1;
/* 16 sub-blocks of 16; scales[j] = scale (low nibble) | min (high nibble);
 * value = d * scale * q - dmin * min, q 2-bit */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } ds_block_q2_K;
/* 16 sub-blocks of 16 with 6-bit scales (minus 32) packed in scales[12];
 * q = 2 low bits from qs, minus 4 unless the hmask bit is set */
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } ds_block_q3_K;
/* the grid ("iq") types: 8-element groups indexed into fixed codebooks */
typedef struct { uint16_t d; uint16_t qs[32]; } ds_block_iq2_xxs;
typedef struct { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; } ds_block_iq2_xs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } ds_block_iq2_s;
typedef struct { uint16_t d; uint8_t qs[96]; } ds_block_iq3_xxs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } ds_block_iq3_s;
typedef struct { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; } ds_block_iq1_s;
/* no d field: the fp16 super-block scale is spread over the top nibbles of scales[] */
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } ds_block_iq1_m;
/* value = d * kvalues[nibble] (a fixed non-linear 16-entry codebook) */
typedef struct { uint16_t d; uint8_t qs[16]; } ds_block_iq4_nl;
/* 8 sub-blocks of 32 with 6-bit scales (minus 32): low 4 bits in scales_l, high 2 in scales_h */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } ds_block_iq4_xs;
/* e: E8M0 shared exponent; nibbles are E2M1 values */
typedef struct { uint8_t e; uint8_t qs[16]; } ds_block_mxfp4;
/* 64 elements: four UE4M3 scales, one per 16, and E2M1 nibbles */
typedef struct { uint8_t d[4]; uint8_t qs[32]; } ds_block_nvfp4;
/* ternary: 5 elements per byte in base 3 (qs), 4 per byte in qh */
typedef struct { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; } ds_block_tq1_0;
/* ternary as 2-bit q, value = d * (q - 1) */
typedef struct { uint8_t qs[64]; uint16_t d; } ds_block_tq2_0;

_Static_assert(sizeof(ds_block_q8_0) == 34, "ds_block_q8_0: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q4_0) == 18, "ds_block_q4_0: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q4_K) == 144, "ds_block_q4_K: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q5_K) == 176, "ds_block_q5_K: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q6_K) == 210, "ds_block_q6_K: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q4_1) == 20 && sizeof(ds_block_q5_0) == 22 && sizeof(ds_block_q5_1) == 24,
               "legacy blocks: layout is the GGUF format");
_Static_assert(sizeof(ds_block_q2_K) == 84 && sizeof(ds_block_q3_K) == 110, "k-quant blocks: layout is the GGUF format");
_Static_assert(sizeof(ds_block_iq2_xxs) == 66 && sizeof(ds_block_iq2_xs) == 74 && sizeof(ds_block_iq2_s) == 82 &&
                   sizeof(ds_block_iq3_xxs) == 98 && sizeof(ds_block_iq3_s) == 110 && sizeof(ds_block_iq1_s) == 50 &&
                   sizeof(ds_block_iq1_m) == 56 && sizeof(ds_block_iq4_nl) == 18 && sizeof(ds_block_iq4_xs) == 136,
               "iq blocks: layout is the GGUF format");
_Static_assert(sizeof(ds_block_mxfp4) == 17 && sizeof(ds_block_nvfp4) == 36 && sizeof(ds_block_tq1_0) == 54 &&
                   sizeof(ds_block_tq2_0) == 66,
               "fp4 and ternary blocks: layout is the GGUF format");

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
/* Whether the kernels compute products of type t (the gblock types once
 * their decoder is built in; nvfp4 widened to BF16 at load). */
int ds_dtype_computable(ds_dtype t);
/* Bytes of n elements; n must be a multiple of the block size (checked by callers). */
size_t ds_dtype_row_bytes(ds_dtype t, int64_t n);

/* Scalar reference conversions of one row of n elements (n a multiple of the
 * block size). These are the definitions every faster kernel is tested against. */
void ds_dequantize_row(ds_dtype t, const void *src, float *dst, int64_t n);
void ds_quantize_row(ds_dtype t, const float *src, void *dst, int64_t n);

#endif
