/* quant_ref.c - scalar reference conversion of rows between f32 and every
 * ds_dtype.
 *
 * Dequantisation repeats ggml's dequantize_row_* arithmetic operation for
 * operation (same float products in the same order), so a row decodes to the
 * very bits llama.cpp produces; faster kernels are tested against this.
 *
 * Quantisation is our own: it writes the same block formats but searches for
 * scales that minimise the squared error of the decoded row. The k-quant
 * searches run in float on each block scaled by a power of two (see
 * to_unit_range), so that no finite input, however large or small, can
 * overflow into inf or NaN on the way. */
#include "kernels/dtype.h"
#include "kernels/quant_int.h"

#include <math.h>
#include <string.h>

#include "common/half.h"

/* Largest finite fp16. Scales are clamped to it: a scale stored as inf would
 * decode every element of the block to inf or NaN. */
#define F16_MAX_FINITE 65504.0

/* Sub-block geometry of the k-quants. */
#define K_SUB_ELEMS 32          /* q4_K / q5_K: 8 sub-blocks of 32 */
#define K_SUBS (DS_QK_K / K_SUB_ELEMS)
#define Q6_SUB_ELEMS 16         /* q6_K: 16 sub-blocks of 16 */
#define Q6_SUBS (DS_QK_K / Q6_SUB_ELEMS)
#define K_CODE_MAX 63           /* 6-bit sub-block scales and mins */

/* ------------------------------------------------------------------------ */
/* Dequantisation                                                            */

/* 6-bit scale and min of sub-block j from the 12 packed bytes of q4_K/q5_K:
 * sub-blocks 0..3 keep their low 6 bits in bytes 0..7, sub-blocks 4..7 keep
 * their low 4 bits in bytes 8..11 and borrow the top 2 bits of bytes 0..7. */
static void k_unpack_scale_min(const uint8_t *packed, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = packed[j] & 63;
        *min = packed[j + 4] & 63;
    } else {
        *scale = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4);
        *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
    }
}

static void dequant_q8_0(const ds_block_q8_0 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += DS_QK8_0) {
        const float d = ds_f16_to_f32(blocks[b].d);
        for (int i = 0; i < DS_QK8_0; i++) dst[i] = blocks[b].qs[i] * d;
    }
}

static void dequant_q4_0(const ds_block_q4_0 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += DS_QK4_0) {
        const float d = ds_f16_to_f32(blocks[b].d);
        for (int i = 0; i < DS_QK4_0 / 2; i++) {
            const int lo = (blocks[b].qs[i] & 0xF) - 8;
            const int hi = (blocks[b].qs[i] >> 4) - 8;
            dst[i] = lo * d;
            dst[i + DS_QK4_0 / 2] = hi * d;
        }
    }
}

static void dequant_q4_K(const ds_block_q4_K *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        const ds_block_q4_K *blk = &blocks[b];
        const float d = ds_f16_to_f32(blk->d);
        const float dmin = ds_f16_to_f32(blk->dmin);
        const uint8_t *q = blk->qs;
        /* each group of 64 elements shares 32 bytes: low nibbles first */
        for (int sub = 0; sub < K_SUBS; sub += 2, q += 32) {
            int sc, m;
            k_unpack_scale_min(blk->scales, sub, &sc, &m);
            const float step_lo = d * sc, shift_lo = dmin * m;
            k_unpack_scale_min(blk->scales, sub + 1, &sc, &m);
            const float step_hi = d * sc, shift_hi = dmin * m;
            for (int l = 0; l < 32; l++) *dst++ = step_lo * (q[l] & 0xF) - shift_lo;
            for (int l = 0; l < 32; l++) *dst++ = step_hi * (q[l] >> 4) - shift_hi;
        }
    }
}

static void dequant_q5_K(const ds_block_q5_K *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        const ds_block_q5_K *blk = &blocks[b];
        const float d = ds_f16_to_f32(blk->d);
        const float dmin = ds_f16_to_f32(blk->dmin);
        const uint8_t *q = blk->qs;
        /* qh[l] holds the fifth bit of element l of every sub-block: bit s for sub-block s */
        uint8_t bit_lo = 1, bit_hi = 2;
        for (int sub = 0; sub < K_SUBS; sub += 2, q += 32, bit_lo <<= 2, bit_hi <<= 2) {
            int sc, m;
            k_unpack_scale_min(blk->scales, sub, &sc, &m);
            const float step_lo = d * sc, shift_lo = dmin * m;
            k_unpack_scale_min(blk->scales, sub + 1, &sc, &m);
            const float step_hi = d * sc, shift_hi = dmin * m;
            for (int l = 0; l < 32; l++)
                *dst++ = step_lo * ((q[l] & 0xF) + (blk->qh[l] & bit_lo ? 16 : 0)) - shift_lo;
            for (int l = 0; l < 32; l++)
                *dst++ = step_hi * ((q[l] >> 4) + (blk->qh[l] & bit_hi ? 16 : 0)) - shift_hi;
        }
    }
}

static void dequant_q6_K(const ds_block_q6_K *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        const ds_block_q6_K *blk = &blocks[b];
        const float d = ds_f16_to_f32(blk->d);
        /* each half of 128 elements: 64 ql bytes hold the low nibbles of four
         * runs of 32, 32 qh bytes their top two bits, 8 scales */
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = blk->ql + 64 * half;
            const uint8_t *qh = blk->qh + 32 * half;
            const int8_t *sc = blk->scales + 8 * half;
            float *y = dst + 128 * half;
            for (int l = 0; l < 32; l++) {
                const int s = l / 16;
                const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[s + 0] * q0;
                y[l + 32] = d * sc[s + 2] * q1;
                y[l + 64] = d * sc[s + 4] * q2;
                y[l + 96] = d * sc[s + 6] * q3;
            }
        }
        dst += DS_QK_K;
    }
}

void ds_dequantize_row(ds_dtype t, const void *src, float *dst, int64_t n) {
    if (n <= 0) return;
    switch (t) {
    case DS_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case DS_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = ds_f16_to_f32(h[i]);
        break;
    }
    case DS_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = ds_bf16_to_f32(h[i]);
        break;
    }
    case DS_Q8_0: dequant_q8_0(src, dst, n / DS_QK8_0); break;
    case DS_Q4_0: dequant_q4_0(src, dst, n / DS_QK4_0); break;
    case DS_Q4_K: dequant_q4_K(src, dst, n / DS_QK_K); break;
    case DS_Q5_K: dequant_q5_K(src, dst, n / DS_QK_K); break;
    case DS_Q6_K: dequant_q6_K(src, dst, n / DS_QK_K); break;
    default:
        if (!ds_lowbit_dequantize(t, src, dst, n)) ds_grid_dequantize(t, src, dst, n);
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Quantisation helpers                                                      */

/* Nearest integer in [lo, hi]. Clamping happens in floating point first, so
 * huge values and NaN never reach a float->int conversion (undefined when out
 * of range); NaN lands on lo. */
static inline int round_clamped(double v, int lo, int hi) {
    /* selects rather than branches, so that the search loops below vectorise */
    double c = v > lo ? v : lo;
    c = c < hi ? c : hi;
    /* c - lo is not negative here, so truncating c - lo + 0.5 rounds (ties
     * up) without a libm call; this sits in the innermost search loops */
    return lo + (int)(c - lo + 0.5);
}

/* Stores a block scale as fp16, saturating at the largest finite value. */
static uint16_t f16_scale(double v) {
    if (v > F16_MAX_FINITE) v = F16_MAX_FINITE;
    if (v < -F16_MAX_FINITE) v = -F16_MAX_FINITE;
    return ds_f32_to_f16((float)v);
}

static int f16_is_subnormal(uint16_t h) { return (h & 0x7c00u) == 0 && (h & 0x3ffu) != 0; }

/* The element of x with the largest magnitude, sign kept. */
static float signed_absmax(const float *x, int n) {
    float best = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(best)) best = x[i];
    return best;
}

/* ------------------------------------------------------------------------ */
/* q8_0 and q4_0: one fp16 scale per 32 elements, set from the extreme value */

static void quant_q8_0(const float *x, ds_block_q8_0 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK8_0) {
        const double amax = fabs((double)signed_absmax(x, DS_QK8_0));
        blocks[b].d = f16_scale(amax / 127.0);
        /* quantise against the scale as stored, not as computed, so the fp16
         * rounding of d is absorbed by the integers where it can be */
        const double d = ds_f16_to_f32(blocks[b].d);
        const double inv = d > 0 ? 1.0 / d : 0.0;
        for (int i = 0; i < DS_QK8_0; i++)
            blocks[b].qs[i] = (int8_t)round_clamped(x[i] * inv, -127, 127);
    }
}

static void quant_q4_0(const float *x, ds_block_q4_0 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK4_0) {
        /* a negative scale maps the extreme onto -8, which has no +8 partner,
         * so the range -8..7 is used in full on the side that needs it */
        blocks[b].d = f16_scale((double)signed_absmax(x, DS_QK4_0) / -8.0);
        const double d = ds_f16_to_f32(blocks[b].d);
        const double inv = d != 0 ? 1.0 / d : 0.0;
        for (int i = 0; i < DS_QK4_0 / 2; i++) {
            const int lo = round_clamped(x[i] * inv, -8, 7) + 8;
            const int hi = round_clamped(x[i + DS_QK4_0 / 2] * inv, -8, 7) + 8;
            blocks[b].qs[i] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* q4_K and q5_K: x ~ (d*sc_j) * L - (dmin*m_j), L in 0..nmax                */

/* The searches below run in float on a copy of the block scaled by a power
 * of two (exact but for elements far below the block's largest) that brings its largest magnitude into [0.5, 1): then no finite input can
 * overflow a sum of squares into inf. Their sums keep LANES partial sums in
 * a fixed order, so the compiler may vectorise them and the bytes still do
 * not depend on how it did. */
#define LANES 8

/* Search sizes. Against 21 grids, four polishing passes, a q6_K search over
 * 21 spacings and two least-squares refits of d (and dmin) that redid every
 * code, these raise the relative RMS error of normal(0, 0.02) rows by about
 * 0.4% for q4_K, 0.5% for q5_K and 0.1% for q6_K, for a fifth of the time
 * (the refits alone were 0.2-0.5% and a third of the q4_K time). */
#define K_FIT_GRIDS 7
#define K_FIT_GRID_STEP 0.3f
#define K_POLISH_PASSES 1
#define Q6_FIT_HALF_GRIDS 2
#define Q6_FIT_GRID_STEP 0.5f

/* round_clamped in float, for the search loops. */
static inline int round_clamped_f(float v, int lo, int hi) {
    float c = v > (float)lo ? v : (float)lo;
    c = c < (float)hi ? c : (float)hi;
    return lo + (int)(c - (float)lo + 0.5f);
}

static float lanes_sum(const float *s) {
    float t = 0;
    for (int k = 0; k < LANES; k++) t += s[k];
    return t;
}

static int lanes_isum(const int *s) {
    int t = 0;
    for (int k = 0; k < LANES; k++) t += s[k];
    return t;
}

/* Copies n elements into xs scaled by a power of two so that the largest
 * magnitude lies in [0.5, 1); returns the factor that undoes it. */
static double to_unit_range(const float *x, int n, float *xs) {
    float amax = 0;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    int e = 0;
    if (amax > 0 && isfinite(amax)) frexpf(amax, &e);
    const double down = ldexp(1.0, -e);
    for (int i = 0; i < n; i++) xs[i] = (float)(x[i] * down);
    return ldexp(1.0, e);
}

/* A stored fp16 scale in the units of the scaled block. */
static float f16_in_units(uint16_t h, double unit) { return (float)(ds_f16_to_f32(h) / unit); }

/* See quant_int.h; q2_K's quantiser (quant_lowbit_k.c) fits through it too. */
float ds_fit_affine_sums(int n, int sl, int sl2, float slx, float sum_x, float sum_xx, float *scale, float *shift) {
    const float det = (float)(n * sl2 - sl * sl);
    float a = 0, b = 1;
    if (det > 0) {
        a = (n * slx - sl * sum_x) / det;
        b = (sl2 * sum_x - sl * slx) / det;
    }
    if (b > 0) {
        b = 0;
        a = sl2 > 0 ? slx / sl2 : 0;
    }
    if (!(a > 0)) return INFINITY;
    *scale = a;
    *shift = b;
    const float err = sum_xx - 2 * a * slx - 2 * b * sum_x + a * a * sl2 + 2 * a * b * sl + n * b * b;
    return err > 0 ? err : 0;
}

/* Levels of x against x ~ scale*L + shift (inv = 1/scale), summed for the
 * least-squares fit. */
static float fit_affine_levels(const float *x, int nmax, float inv, float origin, float sum_x,
                               float sum_xx, float *scale, float *shift) {
    int sl[LANES] = {0}, sl2[LANES] = {0};
    float slx[LANES] = {0};
    for (int i = 0; i < K_SUB_ELEMS; i += LANES)
        for (int k = 0; k < LANES; k++) {
            const int l = round_clamped_f((x[i + k] - origin) * inv, 0, nmax);
            sl[k] += l;
            sl2[k] += l * l;
            slx[k] += (float)l * x[i + k];
        }
    return ds_fit_affine_sums(K_SUB_ELEMS, lanes_isum(sl), lanes_isum(sl2), lanes_sum(slx), sum_x, sum_xx,
                           scale, shift);
}

/* Fits one sub-block to x ~ scale*L - offset, L in 0..nmax, scale >= 0,
 * offset >= 0. The plain min..max grid wastes levels on outliers, so grids
 * slightly coarser and finer are tried, each refitted by least squares; the
 * winner is then polished by re-picking levels and refitting while that
 * helps. */
static void fit_affine_subblock(const float *x, int nmax, float *scale_out, float *offset_out) {
    float lo = x[0], hi = x[0], sx[LANES] = {0}, sxx[LANES] = {0};
    for (int i = 0; i < K_SUB_ELEMS; i += LANES)
        for (int k = 0; k < LANES; k++) {
            const float v = x[i + k];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            sx[k] += v;
            sxx[k] += v * v;
        }
    const float sum_x = lanes_sum(sx), sum_xx = lanes_sum(sxx);
    if (lo > 0) lo = 0;
    if (!(hi > lo)) { /* constant non-positive block: the offset alone is exact */
        *scale_out = 0;
        *offset_out = -lo;
        return;
    }
    float best_scale = (hi - lo) / nmax, best_shift = lo, best_err = INFINITY;
    for (int attempt = 0; attempt < K_FIT_GRIDS; attempt++) {
        const float inv = (nmax - 1.0f + K_FIT_GRID_STEP * attempt) / (hi - lo);
        float scale, shift;
        const float err = fit_affine_levels(x, nmax, inv, lo, sum_x, sum_xx, &scale, &shift);
        if (err < best_err) {
            best_err = err;
            best_scale = scale;
            best_shift = shift;
        }
    }
    for (int pass = 0; pass < K_POLISH_PASSES && best_err < INFINITY; pass++) {
        float scale, shift;
        const float err = fit_affine_levels(x, nmax, 1.0f / best_scale, best_shift, sum_x, sum_xx, &scale, &shift);
        if (!(err < best_err)) break;
        best_err = err;
        best_scale = scale;
        best_shift = shift;
    }
    *scale_out = best_scale;
    *offset_out = -best_shift;
}

/* Codes of one k-quant sub-block given the stored super-block scales (in
 * block units). The 6-bit codes are coarse for sub-blocks with small scales,
 * so the neighbours of the nearest codes are tried too, each with levels
 * re-picked, and the pair that decodes closest to x (computed as the decoder
 * computes it) wins. Returns the squared error. */
static float choose_k_codes(const float *x, int nmax, float d, float dmin, float scale, float offset,
                            uint8_t *sc_out, uint8_t *m_out, uint8_t *levels) {
    const int sc_near = d > 0 ? round_clamped_f(scale / d, 0, K_CODE_MAX) : 0;
    const int m_near = dmin > 0 ? round_clamped_f(offset / dmin, 0, K_CODE_MAX) : 0;
    float best_err = INFINITY, best_step = 0, best_shift = 0;
    for (int sc = sc_near - 1; sc <= sc_near + 1; sc++) {
        if (sc < 0 || sc > K_CODE_MAX) continue;
        for (int m = m_near - 1; m <= m_near + 1; m++) {
            if (m < 0 || m > K_CODE_MAX) continue;
            const float step = d * sc, shift = dmin * m;
            const float inv_step = step > 0 ? 1.0f / step : 0.0f;
            float e[LANES] = {0};
            for (int i = 0; i < K_SUB_ELEMS; i += LANES)
                for (int k = 0; k < LANES; k++) {
                    const int l = round_clamped_f((x[i + k] + shift) * inv_step, 0, nmax);
                    const float diff = (step * l - shift) - x[i + k];
                    e[k] += diff * diff;
                }
            const float err = lanes_sum(e);
            if (err < best_err || best_err == INFINITY) {
                best_err = err;
                best_step = step;
                best_shift = shift;
                *sc_out = (uint8_t)sc;
                *m_out = (uint8_t)m;
            }
        }
    }
    const float inv_step = best_step > 0 ? 1.0f / best_step : 0.0f;
    for (int i = 0; i < K_SUB_ELEMS; i++)
        levels[i] = (uint8_t)round_clamped_f((x[i] + best_shift) * inv_step, 0, nmax);
    return best_err;
}

/* A whole k-quant super-block in unpacked form. */
typedef struct {
    uint16_t d, dmin;
    uint8_t sc[K_SUBS], m[K_SUBS];
    uint8_t levels[DS_QK_K];
} k_codes;

static float k_codes_for_scales(const float *xs, double unit, int nmax, const float *scales,
                                const float *offsets, uint16_t d, uint16_t dmin, k_codes *out) {
    out->d = d;
    out->dmin = dmin;
    const float dn = f16_in_units(d, unit), dminn = f16_in_units(dmin, unit);
    float err = 0;
    for (int j = 0; j < K_SUBS; j++)
        err += choose_k_codes(xs + j * K_SUB_ELEMS, nmax, dn, dminn, scales[j], offsets[j], &out->sc[j],
                              &out->m[j], out->levels + j * K_SUB_ELEMS);
    return err;
}

/* Quantises 256 elements to codes with L in 0..nmax (15 for q4_K, 31 for q5_K). */
static void quantize_k_block(const float *x, int nmax, k_codes *best) {
    float xs[DS_QK_K];
    const double unit = to_unit_range(x, DS_QK_K, xs);
    float scales[K_SUBS], offsets[K_SUBS], max_scale = 0, max_offset = 0;
    for (int j = 0; j < K_SUBS; j++) {
        fit_affine_subblock(xs + j * K_SUB_ELEMS, nmax, &scales[j], &offsets[j]);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (offsets[j] > max_offset) max_offset = offsets[j];
    }
    /* Mapping the largest scale to code 63 is right unless d lands among the
     * fp16 subnormals, whose fixed spacing is then coarse relative to d; a
     * larger d with smaller codes can decode closer, so a few are tried. */
    static const int top_codes[] = {K_CODE_MAX, 47, 31};
    float best_err = INFINITY;
    for (size_t c = 0; c < sizeof top_codes / sizeof top_codes[0]; c++) {
        if (c > 0 && !f16_is_subnormal(best->d) && !f16_is_subnormal(best->dmin)) break;
        k_codes trial;
        const float err = k_codes_for_scales(xs, unit, nmax, scales, offsets,
                                             f16_scale(max_scale * unit / top_codes[c]),
                                             f16_scale(max_offset * unit / top_codes[c]), &trial);
        if (err < best_err || c == 0) {
            best_err = err;
            *best = trial;
        }
    }
}

/* Inverse of k_unpack_scale_min for all eight sub-blocks. */
static void k_pack_scales_mins(const uint8_t *sc, const uint8_t *m, uint8_t *packed) {
    for (int j = 0; j < 4; j++) {
        packed[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        packed[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        packed[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

static void quant_q4_K(const float *x, ds_block_q4_K *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK_K) {
        k_codes codes;
        quantize_k_block(x, 15, &codes);
        ds_block_q4_K *blk = &blocks[b];
        blk->d = codes.d;
        blk->dmin = codes.dmin;
        k_pack_scales_mins(codes.sc, codes.m, blk->scales);
        for (int group = 0; group < DS_QK_K / 64; group++) {
            const uint8_t *lv = codes.levels + 64 * group;
            for (int l = 0; l < 32; l++)
                blk->qs[32 * group + l] = (uint8_t)(lv[l] | (lv[l + 32] << 4));
        }
    }
}

static void quant_q5_K(const float *x, ds_block_q5_K *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK_K) {
        k_codes codes;
        quantize_k_block(x, 31, &codes);
        ds_block_q5_K *blk = &blocks[b];
        blk->d = codes.d;
        blk->dmin = codes.dmin;
        k_pack_scales_mins(codes.sc, codes.m, blk->scales);
        memset(blk->qh, 0, sizeof blk->qh);
        for (int group = 0; group < DS_QK_K / 64; group++) {
            const uint8_t *lv = codes.levels + 64 * group;
            for (int l = 0; l < 32; l++) {
                blk->qs[32 * group + l] = (uint8_t)((lv[l] & 0xF) | ((lv[l + 32] & 0xF) << 4));
                blk->qh[l] |= (uint8_t)(((lv[l] >> 4) << (2 * group)) | ((lv[l + 32] >> 4) << (2 * group + 1)));
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* q6_K: x ~ (d*sc_j) * q, q in -32..31, sc_j int8                           */

/* Least-squares symmetric scale for one sub-block of 16 (in block units):
 * the extreme goes near -32 (the side with the extra level); nearby grids are
 * tried and each refitted, since the extreme alone rarely gives the best
 * spacing. */
static float fit_symmetric_subblock(const float *x) {
    const float extreme = signed_absmax(x, Q6_SUB_ELEMS);
    if (extreme == 0) return 0;
    /* With the least-squares scale sqx/sq2 the error is sum(x^2) - sqx^2/sq2,
     * so the best grid is the one with the largest sqx^2/sq2: one pass over
     * the sub-block per grid. */
    float best_scale = extreme / -32.0f, best_gain = -INFINITY;
    for (int attempt = -Q6_FIT_HALF_GRIDS; attempt <= Q6_FIT_HALF_GRIDS; attempt++) {
        const float inv = -(32.0f + Q6_FIT_GRID_STEP * attempt) / extreme;
        int sq2[LANES] = {0};
        float sqx[LANES] = {0};
        for (int i = 0; i < Q6_SUB_ELEMS; i += LANES)
            for (int k = 0; k < LANES; k++) {
                const int q = round_clamped_f(x[i + k] * inv, -32, 31);
                sqx[k] += (float)q * x[i + k];
                sq2[k] += q * q;
            }
        const float sx = lanes_sum(sqx);
        const int s2 = lanes_isum(sq2);
        if (!(s2 > 0)) continue;
        const float gain = sx * sx / s2;
        if (gain > best_gain) {
            best_gain = gain;
            best_scale = sx / s2;
        }
    }
    return best_scale;
}

typedef struct {
    uint16_t d;
    int8_t sc[Q6_SUBS];
    uint8_t levels[DS_QK_K]; /* q + 32 */
} q6_codes;

/* Picks int8 sub-block scales (nearest and its neighbours) and the levels for
 * a stored d; returns the squared error of the decoded block (block units). */
static float q6_codes_for_scale(const float *xs, double unit, const float *scales, uint16_t d_bits,
                                q6_codes *out) {
    const float d = f16_in_units(d_bits, unit);
    out->d = d_bits;
    float total = 0;
    for (int j = 0; j < Q6_SUBS; j++) {
        const float *x = xs + j * Q6_SUB_ELEMS;
        const int nearest_sc = d != 0 ? round_clamped_f(scales[j] / d, -128, 127) : 0;
        float best_err = INFINITY, best_step = 0;
        for (int sc = nearest_sc - 1; sc <= nearest_sc + 1; sc++) {
            if (sc < -128 || sc > 127) continue;
            const float step = d * sc;
            const float inv_step = step != 0 ? 1.0f / step : 0.0f;
            float e[LANES] = {0};
            for (int i = 0; i < Q6_SUB_ELEMS; i += LANES)
                for (int k = 0; k < LANES; k++) {
                    const int q = round_clamped_f(x[i + k] * inv_step, -32, 31);
                    const float diff = step * q - x[i + k];
                    e[k] += diff * diff;
                }
            const float err = lanes_sum(e);
            if (err < best_err || best_err == INFINITY) {
                best_err = err;
                best_step = step;
                out->sc[j] = (int8_t)sc;
            }
        }
        const float inv_step = best_step != 0 ? 1.0f / best_step : 0.0f;
        for (int i = 0; i < Q6_SUB_ELEMS; i++)
            out->levels[j * Q6_SUB_ELEMS + i] = (uint8_t)(round_clamped_f(x[i] * inv_step, -32, 31) + 32);
        total += best_err;
    }
    return total;
}

static void quantize_q6_block(const float *x, q6_codes *best) {
    float xs[DS_QK_K];
    const double unit = to_unit_range(x, DS_QK_K, xs);
    float scales[Q6_SUBS], extreme = 0;
    for (int j = 0; j < Q6_SUBS; j++) {
        scales[j] = fit_symmetric_subblock(xs + j * Q6_SUB_ELEMS);
        if (fabsf(scales[j]) > fabsf(extreme)) extreme = scales[j];
    }
    /* The largest scale goes to -128, the int8 end with no positive partner,
     * unless d falls among the coarse fp16 subnormals; then a larger d with
     * smaller codes can decode closer (see quantize_k_block). */
    static const int top_codes[] = {128, 96, 64, 32};
    uint16_t d_bits = f16_scale(extreme * unit / -top_codes[0]);
    if (f16_is_subnormal(d_bits)) {
        /* Rank the candidates by how far the decoded sub-block scales d*sc
         * land from the fitted ones, weighted by the sub-block's energy:
         * the error that mismatch adds, without re-picking every level. */
        float energy[Q6_SUBS];
        for (int j = 0; j < Q6_SUBS; j++) {
            float e = 0;
            for (int i = 0; i < Q6_SUB_ELEMS; i++) e += xs[j * Q6_SUB_ELEMS + i] * xs[j * Q6_SUB_ELEMS + i];
            energy[j] = scales[j] != 0 ? e / (scales[j] * scales[j]) : 0;
        }
        float best_mismatch = INFINITY;
        for (size_t c = 0; c < sizeof top_codes / sizeof top_codes[0]; c++) {
            const uint16_t bits = f16_scale(extreme * unit / -top_codes[c]);
            const float d = f16_in_units(bits, unit);
            float mismatch = 0;
            for (int j = 0; j < Q6_SUBS; j++) {
                const int sc = d != 0 ? round_clamped_f(scales[j] / d, -128, 127) : 0;
                const float delta = d * sc - scales[j];
                mismatch += energy[j] * delta * delta;
            }
            if (mismatch < best_mismatch) {
                best_mismatch = mismatch;
                d_bits = bits;
            }
        }
    }
    q6_codes_for_scale(xs, unit, scales, d_bits, best);
}

static void quant_q6_K(const float *x, ds_block_q6_K *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK_K) {
        q6_codes codes;
        quantize_q6_block(x, &codes);
        ds_block_q6_K *blk = &blocks[b];
        blk->d = codes.d;
        memcpy(blk->scales, codes.sc, sizeof blk->scales);
        for (int half = 0; half < 2; half++) {
            const uint8_t *lv = codes.levels + 128 * half;
            uint8_t *ql = blk->ql + 64 * half;
            uint8_t *qh = blk->qh + 32 * half;
            for (int l = 0; l < 32; l++) {
                const uint8_t q0 = lv[l], q1 = lv[l + 32], q2 = lv[l + 64], q3 = lv[l + 96];
                ql[l] = (uint8_t)((q0 & 0xF) | ((q2 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                qh[l] = (uint8_t)((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
            }
        }
    }
}

void ds_quantize_row(ds_dtype t, const float *src, void *dst, int64_t n) {
    if (n <= 0) return;
    switch (t) {
    case DS_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case DS_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = ds_f32_to_f16(src[i]);
        break;
    }
    case DS_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = ds_f32_to_bf16(src[i]);
        break;
    }
    case DS_Q8_0: quant_q8_0(src, dst, n / DS_QK8_0); break;
    case DS_Q4_0: quant_q4_0(src, dst, n / DS_QK4_0); break;
    case DS_Q4_K: quant_q4_K(src, dst, n / DS_QK_K); break;
    case DS_Q5_K: quant_q5_K(src, dst, n / DS_QK_K); break;
    case DS_Q6_K: quant_q6_K(src, dst, n / DS_QK_K); break;
    default:
        if (!ds_lowbit_quantize(t, src, dst, n)) ds_grid_quantize(t, src, dst, n);
        break;
    }
}
