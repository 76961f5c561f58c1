/* fp8.h - float8 weights of Hugging Face "fp8" checkpoints, turned at load
 * into a type the kernels run.
 *
 * The official Qwen3.5/3.6 *-FP8 releases (and DeepSeek's, whose convention
 * they follow) store each quantised Linear weight [out, in] as float8_e4m3fn
 * (safetensors dtype "F8_E4M3": 1 sign, 4 exponent bits with bias 7, 3
 * mantissa bits, no infinities, S.1111.111 is NaN, largest 448) next to
 * "<name>_scale_inv", one float per 128x128 block ([ceil(out/128),
 * ceil(in/128)], edge blocks partial; F32 or BF16). Despite its name the
 * scale is multiplied: value = fp8 * scale_inv of the value's block. Fused
 * 3-D expert stacks [E, out, in] carry [E, ceil(out/128), ceil(in/128)].
 *
 * Conversion: the exact product (at most 4 + 24 significant bits, done in
 * double) rounded once, to nearest even, to BF16; or that product rounded to
 * F32 and quantised to Q8_0. BF16 is exact when the block's scale is a power
 * of two (the product then has 4 significant bits) and otherwise within half
 * a BF16 step (2^-9 relative), below e4m3's own step (2^-4). */
#ifndef DS_FP8_H
#define DS_FP8_H

#include <stdint.h>

#include "common/progress.h"
#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/threadpool.h"

#define DS_FP8_BLOCK 128

float ds_fp8_e4m3_to_f32(uint8_t b);
/* Nearest e4m3 value (ties to even), saturating at +-448 as the format has no infinity. */
uint8_t ds_fp8_e4m3_from_f32(float x);

/* Writing such weights (make-model): per 128x128 block of the rows x cols
 * matrix x, scale = max|x| / 448, so that the largest value maps to e4m3's
 * largest; then q = e4m3(x / scale). scales has ceil(rows/128) x ceil(cols/128). */
void ds_fp8_block_scales(const float *x, int64_t rows, int64_t cols, float *scales);
void ds_fp8_quantize(const float *x, int64_t rows, int64_t cols, const float *scales, uint8_t *q);

typedef struct {
    const char *name;        /* for messages */
    const uint8_t *w;        /* [mats][rows][cols] e4m3 bytes */
    int64_t mats, rows, cols;
    const uint8_t *scale;    /* [mats][ceil(rows/128)][ceil(cols/128)] of scale_type (any alignment) */
    ds_dtype scale_type;     /* DS_F32, DS_BF16 or DS_F16 */
    ds_dtype out_type;       /* DS_BF16 or DS_Q8_0 (then cols % 32 == 0) */
    uint8_t *out;            /* mats * rows rows of out_type */
} ds_fp8_tensor;

/* Converts t on every thread of pool; fails (naming t and the element) on a
 * NaN weight byte or a scale that is not a finite number >= 0. */
ds_status ds_fp8_convert(ds_pool *pool, const ds_fp8_tensor *t, const char *path, ds_err *e);

#endif
