/* quant_lowbit_k.c - q2_K and q3_K: 256-element super-blocks of 16 sub-blocks
 * of 16, with 4-bit (q2_K) or 6-bit (q3_K) sub-block scales under one fp16
 * super-block scale. Dequantisation repeats ggml's float32 operations in
 * order; quantisation fits each sub-block by a small least-squares search,
 * then picks the sub-block codes against the stored super-block scales.
 *
 * Both formats share one element layout: element e of a block sits in byte
 * 32 * (e / 128) + e % 32 of qs, at bits 2 * ((e % 128) / 32), and belongs to
 * sub-block e / 16. */
#include <math.h>
#include <string.h>

#include "kernels/quant_int.h"
#include "kernels/quant_lowbit.h"

#define SUB 16                 /* elements per sub-block */
#define SUBS (DS_QK_K / SUB)

static int qs_byte(int e) { return 32 * (e / 128) + e % 32; }
static int qs_shift(int e) { return 2 * ((e % 128) / 32); }

/* ------------------------------------------------------------------------ */
/* Dequantisation                                                            */

void ds_lowbit_dequant_q2_K(const ds_block_q2_K *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += DS_QK_K) {
        const ds_block_q2_K *blk = &blocks[b];
        const float d = ds_f16_to_f32(blk->d), dmin = ds_f16_to_f32(blk->dmin);
        for (int j = 0; j < SUBS; j++) {
            /* low nibble: scale, high nibble: min */
            const float step = d * (blk->scales[j] & 0xF), shift = dmin * (blk->scales[j] >> 4);
            for (int e = SUB * j; e < SUB * (j + 1); e++)
                dst[e] = step * ((blk->qs[qs_byte(e)] >> qs_shift(e)) & 3) - shift;
        }
    }
}

/* The 6-bit code of q3_K sub-block j: its low 4 bits are the low (j < 8) or
 * high nibble of scales[j % 8], its top 2 bits sit in scales[8 + j % 4] at
 * bits 2 * (j / 4). */
static int q3_scale_code(const uint8_t *scales, int j) {
    const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    return low | ((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
}

void ds_lowbit_dequant_q3_K(const ds_block_q3_K *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += DS_QK_K) {
        const ds_block_q3_K *blk = &blocks[b];
        const float d = ds_f16_to_f32(blk->d);
        for (int j = 0; j < SUBS; j++) {
            const float step = d * (q3_scale_code(blk->scales, j) - 32);
            for (int e = SUB * j; e < SUB * (j + 1); e++) {
                /* hmask[e % 32] bit (e / 32) is the third bit; without it the code is 4 lower */
                const int low = (blk->qs[qs_byte(e)] >> qs_shift(e)) & 3;
                const int high = (blk->hmask[e % 32] >> (e / 32)) & 1;
                dst[e] = step * (low - (high ? 0 : 4));
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* q2_K quantisation: x ~ (d * sc_j) * L - (dmin * m_j), L in 0..3           */

/* Grids tried per sub-block: the range lo..hi spread over 3 + Q2_GRID_STEP*t
 * levels (t = 0..Q2_GRIDS-1 from Q2_GRID_FIRST), each refitted by least squares. */
#define Q2_GRIDS 5
#define Q2_GRID_FIRST -0.6
#define Q2_GRID_STEP 0.4

/* The searches run in float on a copy of the block scaled by a power of two
 * (exact but for elements far below the largest) that brings its largest
 * magnitude into [0.5, 1), so no finite input can overflow their sums;
 * returns the exponent that undoes it. */
static int to_unit_range(const float *x, float *xs) {
    float amax = 0;
    for (int i = 0; i < DS_QK_K; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    int e = 0;
    if (amax > 0) frexpf(amax, &e);
    lowbit_scale_down(x, xs, DS_QK_K, e);
    return e;
}

/* nearest integer in [lo, hi] in float (see lowbit_round) */
static inline int round_f(float v, int lo, int hi) {
    float c = v > (float)lo ? v : (float)lo;
    c = c < (float)hi ? c : (float)hi;
    return lo + (int)(c - (float)lo + 0.5f);
}

/* Least-squares x ~ a*L + b over levels L with b <= 0 (zero must stay inside
 * the range: the format stores mins unsigned). Returns the squared error, or
 * INFINITY when no positive a fits. */
static float fit_affine(const float *x, const uint8_t *L, float sum_x, float sum_xx, float *a_out, float *b_out) {
    int sl = 0, sl2 = 0;
    float slx = 0;
    for (int i = 0; i < SUB; i++) {
        sl += L[i];
        sl2 += L[i] * L[i];
        slx += L[i] * x[i];
    }
    return ds_fit_affine_sums(SUB, sl, sl2, slx, sum_x, sum_xx, a_out, b_out);
}

/* Fits one sub-block (unit range) to x ~ scale*L - offset with scale, offset >= 0. */
static void q2_fit_subblock(const float *x, float *scale_out, float *offset_out) {
    float lo = x[0], hi = x[0], sum_x = 0, sum_xx = 0;
    for (int i = 0; i < SUB; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sum_x += x[i];
        sum_xx += x[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (!(hi > lo)) { /* a constant non-positive sub-block: the offset alone is exact */
        *scale_out = 0;
        *offset_out = -lo;
        return;
    }
    float best_a = (hi - lo) / 3, best_b = lo, best_err = INFINITY;
    uint8_t L[SUB];
    for (int t = 0; t < Q2_GRIDS; t++) {
        const float inv = (float)(3 + Q2_GRID_FIRST + Q2_GRID_STEP * t) / (hi - lo);
        for (int i = 0; i < SUB; i++) L[i] = (uint8_t)round_f((x[i] - lo) * inv, 0, 3);
        float a, b;
        const float err = fit_affine(x, L, sum_x, sum_xx, &a, &b);
        if (err < best_err) {
            best_err = err;
            best_a = a;
            best_b = b;
        }
    }
    if (best_err < INFINITY) { /* one polish: levels re-picked for the fitted line */
        const float inv = 1.0f / best_a;
        for (int i = 0; i < SUB; i++) L[i] = (uint8_t)round_f((x[i] - best_b) * inv, 0, 3);
        float a, b;
        if (fit_affine(x, L, sum_x, sum_xx, &a, &b) < best_err) {
            best_a = a;
            best_b = b;
        }
    }
    *scale_out = best_a;
    *offset_out = -best_b;
}

static void q2_quantize_block(const float *x, ds_block_q2_K *blk) {
    float xs[DS_QK_K], scale[SUBS], offset[SUBS], max_scale = 0, max_offset = 0;
    const int e = to_unit_range(x, xs);
    for (int j = 0; j < SUBS; j++) {
        q2_fit_subblock(xs + SUB * j, &scale[j], &offset[j]);
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_offset = offset[j] > max_offset ? offset[j] : max_offset;
    }
    blk->d = lowbit_f16_scale(ldexp(max_scale, e) / 15);
    blk->dmin = lowbit_f16_scale(ldexp(max_offset, e) / 15);
    const float d = ds_f16_to_f32(blk->d), dmin = ds_f16_to_f32(blk->dmin);
    /* the super-block scales in units of the scaled block */
    const float du = (float)ldexp(d, -e), dminu = (float)ldexp(dmin, -e);
    uint8_t levels[DS_QK_K];
    for (int j = 0; j < SUBS; j++) {
        /* the 4-bit codes either side of the fit, whichever pair decodes
         * closest (as the decoder computes it, up to the scaling) */
        const float *xj = xs + SUB * j;
        const int sc_below = du > 0 ? round_f(scale[j] / du - 0.5f, 0, 14) : 0;
        const int m_below = dminu > 0 ? round_f(offset[j] / dminu - 0.5f, 0, 14) : 0;
        float best_err = INFINITY;
        int best_sc = sc_below, best_m = m_below;
        for (int sc = sc_below; sc <= sc_below + 1; sc++) {
            for (int m = m_below; m <= m_below + 1; m++) {
                const float step = du * sc, shift = dminu * m;
                const float inv = step > 0 ? 1.0f / step : 0.0f;
                float err = 0;
                for (int i = 0; i < SUB; i++) {
                    const int l = round_f((xj[i] + shift) * inv, 0, 3);
                    const float diff = (step * l - shift) - xj[i];
                    err += diff * diff;
                }
                if (err < best_err) {
                    best_err = err;
                    best_sc = sc;
                    best_m = m;
                }
            }
        }
        blk->scales[j] = (uint8_t)(best_sc | best_m << 4);
        const float step = du * best_sc, shift = dminu * best_m;
        const float inv = step > 0 ? 1.0f / step : 0.0f;
        for (int i = 0; i < SUB; i++) levels[SUB * j + i] = (uint8_t)round_f((xj[i] + shift) * inv, 0, 3);
    }
    memset(blk->qs, 0, sizeof blk->qs);
    for (int i = 0; i < DS_QK_K; i++) blk->qs[qs_byte(i)] |= (uint8_t)(levels[i] << qs_shift(i));
}

void ds_lowbit_quant_q2_K(const float *x, ds_block_q2_K *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) q2_quantize_block(x + b * DS_QK_K, &blocks[b]);
}

/* ------------------------------------------------------------------------ */
/* q3_K quantisation: x ~ (d * s_j) * q, q in -4..3, s_j in -32..31          */

/* Grids tried per sub-block: the extreme mapped onto -(4 + Q3_GRID_STEP*t)
 * for |t| <= Q3_HALF_GRIDS (-4 is the end with no positive partner). */
#define Q3_HALF_GRIDS 3
#define Q3_GRID_STEP 0.25

static float q3_fit_subblock(const float *x) {
    float extreme = 0;
    for (int i = 0; i < SUB; i++)
        if (fabsf(x[i]) > fabsf(extreme)) extreme = x[i];
    if (extreme == 0) return 0;
    /* with the least-squares scale sqx/sq2 the error is sum(x^2) - sqx^2/sq2:
     * the best grid has the largest sqx^2/sq2 */
    float best_scale = extreme / -4, best_gain = -1;
    for (int t = -Q3_HALF_GRIDS; t <= Q3_HALF_GRIDS; t++) {
        const float inv = (float)-(4 + Q3_GRID_STEP * t) / extreme;
        float sqx = 0;
        int sq2 = 0;
        for (int i = 0; i < SUB; i++) {
            const int q = round_f(x[i] * inv, -4, 3);
            sqx += q * x[i];
            sq2 += q * q;
        }
        if (!(sq2 > 0)) continue;
        const float gain = sqx * sqx / sq2;
        if (gain > best_gain) {
            best_gain = gain;
            best_scale = sqx / sq2;
        }
    }
    return best_scale;
}

static void q3_quantize_block(const float *x, ds_block_q3_K *blk) {
    float xs[DS_QK_K], scale[SUBS], extreme = 0;
    const int e = to_unit_range(x, xs);
    for (int j = 0; j < SUBS; j++) {
        scale[j] = q3_fit_subblock(xs + SUB * j);
        if (fabsf(scale[j]) > fabsf(extreme)) extreme = scale[j];
    }
    /* the largest sub-block scale goes to code -32, the end with no partner */
    blk->d = lowbit_f16_scale(ldexp(extreme, e) / -32);
    const float du = (float)ldexp(ds_f16_to_f32(blk->d), -e);
    uint8_t levels[DS_QK_K]; /* q + 4 */
    memset(blk->scales, 0, sizeof blk->scales);
    for (int j = 0; j < SUBS; j++) {
        const float *xj = xs + SUB * j;
        const int near = du != 0 ? round_f(scale[j] / du, -32, 31) : 0;
        float best_err = INFINITY;
        int best_s = near;
        for (int s = near - 1; s <= near + 1; s++) {
            if (s < -32 || s > 31) continue;
            const float step = du * s;
            const float inv = step != 0 ? 1.0f / step : 0.0f;
            float err = 0;
            for (int i = 0; i < SUB; i++) {
                const int q = round_f(xj[i] * inv, -4, 3);
                const float diff = step * q - xj[i];
                err += diff * diff;
            }
            if (err < best_err) {
                best_err = err;
                best_s = s;
            }
        }
        const int code = best_s + 32;
        if (j < 8) blk->scales[j] |= (uint8_t)(code & 0xF);
        else blk->scales[j - 8] |= (uint8_t)((code & 0xF) << 4);
        blk->scales[8 + j % 4] |= (uint8_t)((code >> 4) << (2 * (j / 4)));
        const float step = du * best_s;
        const float inv = step != 0 ? 1.0f / step : 0.0f;
        for (int i = 0; i < SUB; i++) levels[SUB * j + i] = (uint8_t)(round_f(xj[i] * inv, -4, 3) + 4);
    }
    memset(blk->qs, 0, sizeof blk->qs);
    memset(blk->hmask, 0, sizeof blk->hmask);
    for (int i = 0; i < DS_QK_K; i++) {
        blk->qs[qs_byte(i)] |= (uint8_t)((levels[i] & 3) << qs_shift(i));
        blk->hmask[i % 32] |= (uint8_t)((levels[i] >> 2) << (i / 32));
    }
}

void ds_lowbit_quant_q3_K(const float *x, ds_block_q3_K *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) q3_quantize_block(x + b * DS_QK_K, &blocks[b]);
}
