/* quant_lowbit.h - shared by the files of the low-bit family (quant_lowbit.c,
 * quant_lowbit_k.c); private to them. */
#ifndef DS_QUANT_LOWBIT_H
#define DS_QUANT_LOWBIT_H

#include <math.h>
#include <stdint.h>

#include "common/half.h"
#include "kernels/dtype.h"

/* Largest finite fp16: scales saturate there, since a scale stored as inf
 * would decode its whole block to inf or NaN. */
#define LOWBIT_F16_MAX 65504.0

static inline uint16_t lowbit_f16_scale(double v) {
    if (v > LOWBIT_F16_MAX) v = LOWBIT_F16_MAX;
    if (v < -LOWBIT_F16_MAX) v = -LOWBIT_F16_MAX;
    return ds_f32_to_f16((float)v);
}

/* Nearest integer in [lo, hi], ties up. The clamp comes first, in floating
 * point, so that huge values and NaN never reach a float->int conversion
 * (undefined out of range); NaN lands on lo. */
static inline int lowbit_round(double v, int lo, int hi) {
    double c = v > lo ? v : lo;
    c = c < hi ? c : hi;
    return lo + (int)(c - lo + 0.5);
}

/* x * 2^-e, exact unless the result is subnormal: a multiplication where
 * 2^-e is a normal float (the common case; ldexpf is a library call). */
static inline void lowbit_scale_down(const float *x, float *out, int n, int e) {
    if (e > -126 && e < 126) {
        const float f = ds_bits_f32((uint32_t)(127 - e) << 23);
        for (int i = 0; i < n; i++) out[i] = x[i] * f;
    } else {
        for (int i = 0; i < n; i++) out[i] = ldexpf(x[i], -e);
    }
}

/* quant_lowbit_k.c: the two k-quants of the family */
void ds_lowbit_dequant_q2_K(const ds_block_q2_K *blocks, float *dst, int64_t nblocks);
void ds_lowbit_dequant_q3_K(const ds_block_q3_K *blocks, float *dst, int64_t nblocks);
void ds_lowbit_quant_q2_K(const float *x, ds_block_q2_K *blocks, int64_t nblocks);
void ds_lowbit_quant_q3_K(const float *x, ds_block_q3_K *blocks, int64_t nblocks);

#endif
