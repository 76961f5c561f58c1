/* quant_int.h - the two families of quantised types beyond the original five,
 * each in its own file (private to src/kernels). Every function returns 1
 * when it handled type t and 0 when t is not of its family. */
#ifndef DS_QUANT_INT_H
#define DS_QUANT_INT_H

#include <stdint.h>

#include "kernels/dtype.h"
#include "kernels/gblock.h"

/* quant_lowbit.c: q4_1, q5_0, q5_1, q2_K, q3_K, iq4_nl, iq4_xs, mxfp4, nvfp4, tq1_0, tq2_0 */
int ds_lowbit_dequantize(ds_dtype t, const void *src, float *dst, int64_t n);
int ds_lowbit_quantize(ds_dtype t, const float *src, void *dst, int64_t n);
/* gblock_lowbit.c: the same types but nvfp4 (whose per-16 float scales have no integer form) */
int ds_lowbit_gblock(ds_dtype t, const void *row, int64_t b, ds_gblock *out);
const ds_glevels *ds_lowbit_levels(ds_dtype t);

/* quant_grid.c: iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m */
int ds_grid_dequantize(ds_dtype t, const void *src, float *dst, int64_t n);
int ds_grid_quantize(ds_dtype t, const float *src, void *dst, int64_t n);
int ds_grid_gblock(ds_dtype t, const void *row, int64_t b, ds_gblock *out);
const ds_glevels *ds_grid_levels(ds_dtype t);

/* quant_ref.c, for the k-quant quantisers with a min (q4_K, q5_K, q2_K):
 * least-squares fit of x ~ scale*L + shift over n elements from the sums
 * sl = sum L, sl2 = sum L^2, slx = sum L*x, sum_x, sum_xx, with shift <= 0
 * (the formats store mins unsigned, so zero must stay inside the range). The
 * error is expanded from the sums rather than summed again. Returns the
 * squared error, or INFINITY (scale and shift untouched) when no positive
 * scale fits. */
float ds_fit_affine_sums(int n, int sl, int sl2, float slx, float sum_x, float sum_xx, float *scale, float *shift);

#endif
