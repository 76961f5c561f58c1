/* quant_lowbit.c - q4_1, q5_0, q5_1, iq4_nl, iq4_xs, mxfp4, nvfp4, tq1_0, tq2_0
 * (q2_K and q3_K are in quant_lowbit_k.c): dequantisation and quantisation.
 * Their common integer form is in gblock_lowbit.c.
 *
 * Dequantisation repeats ggml's dequantize_row_* arithmetic operation for
 * operation (the same float32 products and sums in the same order), so rows
 * decode to the bits llama.cpp produces. Quantisation is our own: it writes
 * the same formats, choosing codes against the scales as stored, and keeps
 * every scale finite whatever the (finite) input. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/quant_int.h"
#include "kernels/quant_lowbit.h"

/* The non-linear 4-bit codebook of iq4_nl and iq4_xs. */
static const int8_t iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* E2M1 values doubled (so they are integers), shared by mxfp4 and nvfp4;
 * code 8 is minus zero. */
static const int8_t fp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ------------------------------------------------------------------------ */
/* Scale fields that are not fp16                                            */

/* E8M0 exponent e as 2^(e-128): half its value, which pairs with the doubled
 * E2M1 values. e < 2 gives the float32 subnormals 2^-128 and 2^-127. */
static float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return ds_bits_f32(bits);
}

/* UE4M3 (4 exponent bits, bias 7, 3 mantissa bits) as half its value. As in
 * llama.cpp, bit 7 is ignored except that 0x7F (the NaN code) reads as 0
 * while 0xFF does not. */
static float ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int exp = (x >> 3) & 0xF, man = x & 7;
    /* (1 + man/8) * 2^(exp-7) / 2, or man * 2^-9 / 2 when exp is 0: exact in float */
    const float pow2 = ds_bits_f32((uint32_t)((exp ? exp - 11 : -10) + 127) << 23);
    return (float)(exp ? 8 + man : man) * pow2;
}

/* ------------------------------------------------------------------------ */
/* Dequantisation                                                            */

static uint32_t load_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void dequant_q4_1(const ds_block_q4_1 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += 32) {
        const float d = ds_f16_to_f32(blocks[b].d), m = ds_f16_to_f32(blocks[b].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = (blocks[b].qs[j] & 0xF) * d + m;
            dst[j + 16] = (blocks[b].qs[j] >> 4) * d + m;
        }
    }
}

/* The 5-bit codes of q5_0/q5_1: bit 4 of element j is bit j of qh. */
static void five_bit_codes(const uint8_t *qh_bytes, const uint8_t *qs, int *codes) {
    const uint32_t qh = load_u32(qh_bytes);
    for (int j = 0; j < 16; j++) {
        codes[j] = (qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
        codes[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    }
}

static void dequant_q5_0(const ds_block_q5_0 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += 32) {
        const float d = ds_f16_to_f32(blocks[b].d);
        int q[32];
        five_bit_codes(blocks[b].qh, blocks[b].qs, q);
        for (int j = 0; j < 32; j++) dst[j] = (q[j] - 16) * d;
    }
}

static void dequant_q5_1(const ds_block_q5_1 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += 32) {
        const float d = ds_f16_to_f32(blocks[b].d), m = ds_f16_to_f32(blocks[b].m);
        int q[32];
        five_bit_codes(blocks[b].qh, blocks[b].qs, q);
        for (int j = 0; j < 32; j++) dst[j] = q[j] * d + m;
    }
}

static void dequant_iq4_nl(const ds_block_iq4_nl *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += 32) {
        const float d = ds_f16_to_f32(blocks[b].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * iq4_values[blocks[b].qs[j] & 0xF];
            dst[j + 16] = d * iq4_values[blocks[b].qs[j] >> 4];
        }
    }
}

/* 6-bit scale code of iq4_xs sub-block j: low 4 bits from scales_l, high 2 from scales_h. */
static int iq4_xs_scale(const ds_block_iq4_xs *blk, int j) {
    return ((blk->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | ((blk->scales_h >> (2 * j)) & 3) << 4;
}

static void dequant_iq4_xs(const ds_block_iq4_xs *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        const ds_block_iq4_xs *blk = &blocks[b];
        const float d = ds_f16_to_f32(blk->d);
        for (int j = 0; j < 8; j++, dst += 32) {
            const float dl = d * (iq4_xs_scale(blk, j) - 32);
            const uint8_t *qs = blk->qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                dst[l] = dl * iq4_values[qs[l] & 0xF];
                dst[l + 16] = dl * iq4_values[qs[l] >> 4];
            }
        }
    }
}

static void dequant_mxfp4(const ds_block_mxfp4 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, dst += 32) {
        const float d = e8m0_half(blocks[b].e);
        for (int j = 0; j < 16; j++) {
            dst[j] = fp4_values[blocks[b].qs[j] & 0xF] * d;
            dst[j + 16] = fp4_values[blocks[b].qs[j] >> 4] * d;
        }
    }
}

static void dequant_nvfp4(const ds_block_nvfp4 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        for (int s = 0; s < 4; s++, dst += 16) {
            const float d = ue4m3_half(blocks[b].d[s]);
            const uint8_t *qs = blocks[b].qs + 8 * s;
            for (int j = 0; j < 8; j++) {
                dst[j] = fp4_values[qs[j] & 0xF] * d;
                dst[j + 8] = fp4_values[qs[j] >> 4] * d;
            }
        }
    }
}

/* One trit of a tq1_0 byte: the byte is a base-3 fraction of 256 (most
 * significant trit first), so multiplying by 3^n (mod 256) brings trit n to
 * the top, where times 3 over 256 reads it. */
static int tq1_trit(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t shifted = (uint8_t)(byte * pow3[n]);
    return ((uint16_t)shifted * 3) >> 8;
}

static void dequant_tq1_0(const ds_block_tq1_0 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        const ds_block_tq1_0 *blk = &blocks[b];
        const float d = ds_f16_to_f32(blk->d);
        /* qs[0..31]: five runs of 32; qs[32..47]: five runs of 16; qh: four runs of 4 */
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 32; m++) *dst++ = (float)(tq1_trit(blk->qs[m], n) - 1) * d;
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 16; m++) *dst++ = (float)(tq1_trit(blk->qs[32 + m], n) - 1) * d;
        for (int n = 0; n < 4; n++)
            for (int j = 0; j < 4; j++) *dst++ = (float)(tq1_trit(blk->qh[j], n) - 1) * d;
    }
}

static void dequant_tq2_0(const ds_block_tq2_0 *blocks, float *dst, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        const float d = ds_f16_to_f32(blocks[b].d);
        for (int half = 0; half < 2; half++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *dst++ = (float)(((blocks[b].qs[32 * half + m] >> (2 * l)) & 3) - 1) * d;
    }
}

int ds_lowbit_dequantize(ds_dtype t, const void *src, float *dst, int64_t n) {
    const ds_dtype_info *info = ds_dtype_get(t);
    if (!info) return 0;
    const int64_t nb = n / info->block_elems;
    switch (t) {
    case DS_Q4_1: dequant_q4_1(src, dst, nb); return 1;
    case DS_Q5_0: dequant_q5_0(src, dst, nb); return 1;
    case DS_Q5_1: dequant_q5_1(src, dst, nb); return 1;
    case DS_Q2_K: ds_lowbit_dequant_q2_K(src, dst, nb); return 1;
    case DS_Q3_K: ds_lowbit_dequant_q3_K(src, dst, nb); return 1;
    case DS_IQ4_NL: dequant_iq4_nl(src, dst, nb); return 1;
    case DS_IQ4_XS: dequant_iq4_xs(src, dst, nb); return 1;
    case DS_MXFP4: dequant_mxfp4(src, dst, nb); return 1;
    case DS_NVFP4: dequant_nvfp4(src, dst, nb); return 1;
    case DS_TQ1_0: dequant_tq1_0(src, dst, nb); return 1;
    case DS_TQ2_0: dequant_tq2_0(src, dst, nb); return 1;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Quantisation: q4_1, q5_0, q5_1                                            */

/* The element of x with the largest magnitude, sign kept (the first of equals). */
static float signed_absmax(const float *x, int n) {
    float best = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(best)) best = x[i];
    return best;
}

/* x ~ d * L + m with L in 0..nmax: m the block minimum, d spreading the range
 * over the levels; both are stored first and the levels chosen against the
 * stored values, so that fp16 rounding is absorbed where it can be and a
 * decoded row quantises back to the same bytes. */
static void quant_affine_block(const float *x, int nmax, uint16_t *d_out, uint16_t *m_out, uint8_t *levels) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *m_out = lowbit_f16_scale(lo);
    const double m = ds_f16_to_f32(*m_out);
    /* a minimum stored above the data (fp16 rounding) must not turn d negative */
    *d_out = lowbit_f16_scale(hi > m ? ((double)hi - m) / nmax : 0.0);
    const double d = ds_f16_to_f32(*d_out);
    const double inv = d > 0 ? 1.0 / d : 0.0;
    for (int i = 0; i < 32; i++) levels[i] = (uint8_t)lowbit_round(((double)x[i] - m) * inv, 0, nmax);
}

static void pack_five_bit(const uint8_t *levels, uint8_t *qh, uint8_t *qs) {
    memset(qh, 0, 4);
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((levels[j] & 0xF) | (levels[j + 16] & 0xF) << 4);
        qh[j / 8] |= (uint8_t)((levels[j] >> 4) << (j % 8));
        qh[2 + j / 8] |= (uint8_t)((levels[j + 16] >> 4) << (j % 8));
    }
}

static void quant_q4_1(const float *x, ds_block_q4_1 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += 32) {
        uint8_t lv[32];
        quant_affine_block(x, 15, &blocks[b].d, &blocks[b].m, lv);
        for (int j = 0; j < 16; j++) blocks[b].qs[j] = (uint8_t)(lv[j] | lv[j + 16] << 4);
    }
}

static void quant_q5_1(const float *x, ds_block_q5_1 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += 32) {
        uint8_t lv[32];
        quant_affine_block(x, 31, &blocks[b].d, &blocks[b].m, lv);
        pack_five_bit(lv, blocks[b].qh, blocks[b].qs);
    }
}

static void quant_q5_0(const float *x, ds_block_q5_0 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += 32) {
        /* a negative scale maps the extreme onto -16, which has no +16
         * partner, so the range -16..15 is used in full on the side that needs it */
        blocks[b].d = lowbit_f16_scale((double)signed_absmax(x, 32) / -16.0);
        const double d = ds_f16_to_f32(blocks[b].d);
        const double inv = d != 0 ? 1.0 / d : 0.0;
        uint8_t lv[32];
        for (int i = 0; i < 32; i++) lv[i] = (uint8_t)(lowbit_round(x[i] * inv, -16, 15) + 16);
        pack_five_bit(lv, blocks[b].qh, blocks[b].qs);
    }
}

/* ------------------------------------------------------------------------ */
/* Quantisation: iq4_nl, iq4_xs                                              */

/* The codebook entry nearest v (in codebook units). Every midpoint between
 * entries is a multiple of 1/2, so the entry is a function of floor(2v):
 * IQ4_LUT_HALF_RANGE half-units either side, beyond which the ends win. */
#define IQ4_LUT_HALF_RANGE 256
static uint8_t iq4_lut[2 * IQ4_LUT_HALF_RANGE];

static int iq4_nearest_slow(float v) {
    int k = 0;
    for (int i = 0; i < 15; i++) k += v > (iq4_values[i] + iq4_values[i + 1]) * 0.5f;
    return k;
}

static pthread_once_t iq4_lut_once = PTHREAD_ONCE_INIT;

static void iq4_lut_init(void) {
    /* entry of the half-open half-unit [h/2, h/2 + 1/2): that of its middle */
    for (int h = -IQ4_LUT_HALF_RANGE; h < IQ4_LUT_HALF_RANGE; h++)
        iq4_lut[h + IQ4_LUT_HALF_RANGE] = (uint8_t)iq4_nearest_slow(h * 0.5f + 0.25f);
}

static inline int iq4_nearest(float v) {
    float h = 2.0f * v;
    h = h > -IQ4_LUT_HALF_RANGE ? h : -IQ4_LUT_HALF_RANGE;
    h = h < IQ4_LUT_HALF_RANGE - 1 ? h : IQ4_LUT_HALF_RANGE - 1;
    /* h + range is not negative, so truncation is floor */
    return iq4_lut[(int)(h + IQ4_LUT_HALF_RANGE)];
}

/* Candidate spacings tried per group: the extreme element mapped onto
 * -127 + step*t for |t| <= IQ4_TRIES (the -127 end has no positive partner,
 * as q4_0's -8), each refitted by least squares. */
#define IQ4_TRIES 2
#define IQ4_TRY_STEP 4.0

/* Least-squares scale of a group of 32 for the codebook: the scale s with
 * x ~ s * iq4_values[code] that the search found best. The search runs in
 * float on the group scaled by a power of two (exact) that brings its
 * largest magnitude into [0.5, 1), so no finite input overflows its sums. */
static double iq4_fit_group(const float *x) {
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    if (!(amax > 0)) return 0;
    int e;
    frexpf(amax, &e);
    float xs[32];
    lowbit_scale_down(x, xs, 32, e);
    const float extreme = signed_absmax(xs, 32);
    float best_scale = extreme / -127.0f, best_gain = -1;
    for (int t = -IQ4_TRIES; t <= IQ4_TRIES; t++) {
        const float inv = (float)((-127.0 + IQ4_TRY_STEP * t) / extreme);
        float sqx = 0, sq2 = 0;
        for (int i = 0; i < 32; i++) {
            const float q = iq4_values[iq4_nearest(xs[i] * inv)];
            sqx += q * xs[i];
            sq2 += q * q;
        }
        /* with the least-squares scale sqx/sq2 the error is sum(x^2) - sqx^2/sq2 */
        const float gain = sqx * sqx / sq2;
        if (gain > best_gain) {
            best_gain = gain;
            best_scale = sqx / sq2;
        }
    }
    return ldexp(best_scale, e);
}

/* Codes of a group against a decoded scale; returns the squared error when
 * err_wanted (the decoded products are exact in float: an fp16 scale times a
 * 6-bit code times a 7-bit value). */
static float iq4_codes(const float *x, float scale, uint8_t *codes, int err_wanted) {
    const float inv = scale != 0 ? 1.0f / scale : 0.0f;
    float err = 0;
    for (int i = 0; i < 32; i++) codes[i] = (uint8_t)iq4_nearest(x[i] * inv);
    if (err_wanted)
        for (int i = 0; i < 32; i++) {
            const float diff = scale * iq4_values[codes[i]] - x[i];
            err += diff * diff;
        }
    return err;
}

static void pack_nibbles(const uint8_t *codes, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(codes[j] | codes[j + 16] << 4);
}

static void quant_iq4_nl(const float *x, ds_block_iq4_nl *blocks, int64_t nblocks) {
    pthread_once(&iq4_lut_once, iq4_lut_init);
    for (int64_t b = 0; b < nblocks; b++, x += 32) {
        blocks[b].d = lowbit_f16_scale(iq4_fit_group(x));
        uint8_t codes[32];
        iq4_codes(x, ds_f16_to_f32(blocks[b].d), codes, 0);
        pack_nibbles(codes, blocks[b].qs);
    }
}

/* Sub-block codes and levels of an iq4_xs block for a stored d; returns the
 * squared error of the decoded block. */
static double iq4_xs_encode(const float *x, const double *scales, uint16_t d_bits, ds_block_iq4_xs *blk) {
    blk->d = d_bits;
    const float d = ds_f16_to_f32(d_bits);
    blk->scales_h = 0;
    memset(blk->scales_l, 0, sizeof blk->scales_l);
    double total = 0;
    for (int j = 0; j < 8; j++) {
        /* the 6-bit codes either side of the fitted scale, whichever
         * decodes closer (computed as the decoder computes it) */
        const int below = d != 0 ? lowbit_round(scales[j] / d - 0.5, -32, 30) : 0;
        float best_err = INFINITY;
        int best_ls = below;
        uint8_t codes[32], best_codes[32] = {0};
        for (int ls = below; ls <= below + 1; ls++) {
            /* huge inputs make every error inf: the first candidate stands */
            const float err = iq4_codes(x + 32 * j, d * ls, codes, 1);
            if (err < best_err || ls == below) {
                best_err = err;
                best_ls = ls;
                memcpy(best_codes, codes, sizeof codes);
            }
        }
        const int code = best_ls + 32;
        blk->scales_l[j / 2] |= (uint8_t)((code & 0xF) << (4 * (j % 2)));
        blk->scales_h |= (uint16_t)((code >> 4) << (2 * j));
        pack_nibbles(best_codes, blk->qs + 16 * j);
        total += best_err;
    }
    return total;
}

static int f16_is_subnormal(uint16_t h) { return (h & 0x7c00u) == 0 && (h & 0x3ffu) != 0; }

static void quant_iq4_xs(const float *x, ds_block_iq4_xs *blocks, int64_t nblocks) {
    pthread_once(&iq4_lut_once, iq4_lut_init);
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK_K) {
        double scales[8], extreme = 0;
        for (int j = 0; j < 8; j++) {
            scales[j] = iq4_fit_group(x + 32 * j);
            if (fabs(scales[j]) > fabs(extreme)) extreme = scales[j];
        }
        /* The largest sub-block scale goes to code -32, the end with no
         * partner, unless d lands among the fp16 subnormals, whose fixed
         * spacing is coarse relative to d: then a larger d with smaller
         * codes may decode closer, so a few are tried. */
        static const int top_codes[] = {32, 24, 16, 8};
        double best_err = INFINITY;
        for (size_t c = 0; c < sizeof top_codes / sizeof top_codes[0]; c++) {
            const uint16_t d_bits = lowbit_f16_scale(extreme / -top_codes[c]);
            if (c > 0 && !f16_is_subnormal(d_bits)) break;
            ds_block_iq4_xs trial;
            const double err = iq4_xs_encode(x, scales, d_bits, &trial);
            if (err < best_err || c == 0) {
                best_err = err;
                blocks[b] = trial;
            }
            if (!f16_is_subnormal(d_bits)) break;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Quantisation: mxfp4, nvfp4                                                */

/* The E2M1 code nearest v (in doubled units); ties to the smaller magnitude,
 * and zero always as code 0 (plus zero). */
static inline int fp4_nearest(float v) {
    /* every midpoint is a multiple of 1/2: floor(2|v|) picks the magnitude */
    static const uint8_t lut[21] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 7};
    float h = 2.0f * fabsf(v);
    h = h < 20.0f ? h : 20.0f;
    const int k = lut[(int)h];
    return k | (v < 0 && k ? 8 : 0);
}

/* Codes of n elements against a decoded scale (inv its inverse, in double:
 * the smallest scales have no float inverse); returns the squared error. */
static double fp4_codes(const float *x, int n, float scale, double inv, uint8_t *codes) {
    double err = 0;
    for (int i = 0; i < n; i++) {
        codes[i] = (uint8_t)fp4_nearest((float)(x[i] * inv));
        const double diff = (double)(fp4_values[codes[i]] * scale) - x[i];
        err += diff * diff;
    }
    return err;
}

/* Largest E8M0 code used: one more would let 8 * 2^(e-128) overflow float. */
#define MXFP4_E_MAX 252

static void quant_mxfp4(const float *x, ds_block_mxfp4 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        /* e puts the block maximum between 8 and 16 doubled units, where the
         * largest value (12) may clip it; e + 1 (between 4 and 8) never clips
         * but is coarser: the one that decodes closer wins */
        int e = 0;
        if (amax > 0) {
            int ex;
            frexpf(amax, &ex);
            e = ex + 124;
            e = e < 0 ? 0 : e > MXFP4_E_MAX ? MXFP4_E_MAX : e;
        }
        double best_err = INFINITY;
        uint8_t codes[32], best_codes[32] = {0};
        for (int c = e; c <= e + 1 && c <= MXFP4_E_MAX; c++) {
            const float scale = e8m0_half((uint8_t)c);
            const double err = fp4_codes(x, 32, scale, 1.0 / scale, codes);
            if (err < best_err) {
                best_err = err;
                blocks[b].e = (uint8_t)c;
                memcpy(best_codes, codes, sizeof codes);
            }
        }
        pack_nibbles(best_codes, blocks[b].qs);
    }
}

/* The UE4M3 code (0..0x7E, increasing in value) whose decoded value is
 * nearest v. */
static int ue4m3_nearest(float v) {
    int lo = 0, hi = 0x7E;
    while (lo < hi) { /* the first code decoding to at least v */
        const int mid = (lo + hi) / 2;
        if (ue4m3_half((uint8_t)mid) < v) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0 && v - ue4m3_half((uint8_t)(lo - 1)) <= ue4m3_half((uint8_t)lo) - v) lo--;
    return lo;
}

static void quant_nvfp4(const float *x, ds_block_nvfp4 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++) {
        for (int s = 0; s < 4; s++, x += 16) {
            float amax = 0;
            for (int i = 0; i < 16; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            /* the scale nearest amax/12 (the largest doubled E2M1 value) and
             * its two neighbours, whichever decodes closest */
            const int near = ue4m3_nearest(amax / 12.0f);
            double best_err = INFINITY;
            uint8_t codes[16], best_codes[16] = {0};
            blocks[b].d[s] = 0;
            for (int c = near - 1; c <= near + 1; c++) {
                if (c < 0 || c > 0x7E || (c == 0 && amax > 0)) continue;
                const float scale = ue4m3_half((uint8_t)c);
                const double err = fp4_codes(x, 16, scale, scale > 0 ? 1.0 / scale : 0.0, codes);
                if (err < best_err) {
                    best_err = err;
                    blocks[b].d[s] = (uint8_t)c;
                    memcpy(best_codes, codes, sizeof codes);
                }
            }
            for (int j = 0; j < 8; j++) blocks[b].qs[8 * s + j] = (uint8_t)(best_codes[j] | best_codes[j + 8] << 4);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Quantisation: tq1_0, tq2_0 (ternary, d = the block's largest magnitude)   */

/* Trits (0, 1, 2 for -1, 0, +1) of the 256 elements of a ternary block. */
static uint16_t ternary_block(const float *x, uint8_t *trits) {
    float amax = 0;
    for (int i = 0; i < DS_QK_K; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    const uint16_t d_bits = lowbit_f16_scale(amax);
    const double d = ds_f16_to_f32(d_bits);
    const double inv = d > 0 ? 1.0 / d : 0.0;
    for (int i = 0; i < DS_QK_K; i++) trits[i] = (uint8_t)(lowbit_round(x[i] * inv, -1, 1) + 1);
    return d_bits;
}

/* n trits (first the most significant) as a byte whose top trit reads back
 * through tq1_trit: the base-3 fraction v/243 scaled to 256, rounded up. */
static uint8_t tq1_pack(const uint8_t *trits, int stride, int n) {
    unsigned v = 0;
    for (int k = 0; k < 5; k++) v = v * 3 + (k < n ? trits[k * stride] : 0);
    return (uint8_t)((v * 256 + 242) / 243);
}

static void quant_tq1_0(const float *x, ds_block_tq1_0 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK_K) {
        uint8_t t[DS_QK_K];
        blocks[b].d = ternary_block(x, t);
        for (int m = 0; m < 32; m++) blocks[b].qs[m] = tq1_pack(t + m, 32, 5);
        for (int m = 0; m < 16; m++) blocks[b].qs[32 + m] = tq1_pack(t + 160 + m, 16, 5);
        for (int j = 0; j < 4; j++) blocks[b].qh[j] = tq1_pack(t + 240 + j, 4, 4);
    }
}

static void quant_tq2_0(const float *x, ds_block_tq2_0 *blocks, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; b++, x += DS_QK_K) {
        uint8_t t[DS_QK_K];
        blocks[b].d = ternary_block(x, t);
        for (int half = 0; half < 2; half++)
            for (int m = 0; m < 32; m++) {
                const uint8_t *e = t + 128 * half + m;
                blocks[b].qs[32 * half + m] = (uint8_t)(e[0] | e[32] << 2 | e[64] << 4 | e[96] << 6);
            }
    }
}

int ds_lowbit_quantize(ds_dtype t, const float *src, void *dst, int64_t n) {
    const ds_dtype_info *info = ds_dtype_get(t);
    if (!info) return 0;
    const int64_t nb = n / info->block_elems;
    switch (t) {
    case DS_Q4_1: quant_q4_1(src, dst, nb); return 1;
    case DS_Q5_0: quant_q5_0(src, dst, nb); return 1;
    case DS_Q5_1: quant_q5_1(src, dst, nb); return 1;
    case DS_Q2_K: ds_lowbit_quant_q2_K(src, dst, nb); return 1;
    case DS_Q3_K: ds_lowbit_quant_q3_K(src, dst, nb); return 1;
    case DS_IQ4_NL: quant_iq4_nl(src, dst, nb); return 1;
    case DS_IQ4_XS: quant_iq4_xs(src, dst, nb); return 1;
    case DS_MXFP4: quant_mxfp4(src, dst, nb); return 1;
    case DS_NVFP4: quant_nvfp4(src, dst, nb); return 1;
    case DS_TQ1_0: quant_tq1_0(src, dst, nb); return 1;
    case DS_TQ2_0: quant_tq2_0(src, dst, nb); return 1;
    default: return 0;
    }
}
