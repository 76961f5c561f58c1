/* gblock_lowbit.c - q4_1, q5_0, q5_1, q2_K, q3_K, iq4_nl, iq4_xs, mxfp4, tq1_0 and
 * tq2_0 in the kernels' common integer form (gblock.h).
 *
 * Each decoder states the format's formula as d sc lv + dm mn with the very
 * factors the format multiplies, so that (d sc) lv (+ dm mn) in F32 is the
 * format's own float: q2_K's "dl q - ml" is d sc lv + (-dmin) mn, mxfp4's
 * doubled E2M1 values come with the halved E8M0 scale. nvfp4 has no entry:
 * its per-16 float scales have no integer form (the CPU backend widens it to
 * BF16 at load, exactly). */
#include <math.h>
#include <string.h>

#include "common/half.h"
#include "kernels/kern.h"
#include "kernels/quant_int.h"

static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t fp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128): the E8M0 exponent halved, as the doubled E2M1 values want */
static float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return ds_bits_f32(bits);
}

static void no_min(ds_gblock *g) {
    g->sc[0] = g->sc[1] = 1;
    g->mn[0] = g->mn[1] = 0;
    g->dm = 0.0f;
}

/* the 32 nibbles of a legacy block: element i < 16 low nibble of qs[i], i + 16 the high one */
static void legacy_nibbles(const uint8_t *qs, int8_t *lv) {
    for (int i = 0; i < 16; i++) {
        lv[i] = (int8_t)(qs[i] & 0xF);
        lv[i + 16] = (int8_t)(qs[i] >> 4);
    }
}

/* the fifth bit of element i is bit i of qh (little-endian) */
static void legacy_fifth_bit(const uint8_t qh[4], int8_t *lv) {
    uint32_t h;
    memcpy(&h, qh, 4);
    for (int i = 0; i < 32; i++) lv[i] = (int8_t)(lv[i] | (((h >> i) & 1) << 4));
}

/* 6-bit scale j (0..15) of a q3_K block, minus 32 */
static int q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* base-3 digit n of a tq1_0 byte: the byte holds a fixed-point fraction of 3^5 */
static int tq1_digit(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t q = (uint8_t)(byte * pow3[n]);
    return ((uint16_t)q * 3) >> 8;
}

/* element e (0..255) of a tq1_0 block as its trit 0..2 */
static int tq1_trit(const ds_block_tq1_0 *b, int e) {
    if (e < 160) return tq1_digit(b->qs[e % 32], e / 32);
    if (e < 240) return tq1_digit(b->qs[32 + (e - 160) % 16], (e - 160) / 16);
    return tq1_digit(b->qh[(e - 240) % 4], (e - 240) / 4);
}

int ds_lowbit_gblock(ds_dtype t, const void *row, int64_t b, ds_gblock *g) {
    switch (t) {
    case DS_Q4_1: {
        const ds_block_q4_1 *x = (const ds_block_q4_1 *)row + b;
        legacy_nibbles(x->qs, g->lv);
        no_min(g);
        g->d = ds_f16_to_f32(x->d);
        g->dm = ds_f16_to_f32(x->m);
        g->mn[0] = g->mn[1] = 1;
        return 1;
    }
    case DS_Q5_0: {
        const ds_block_q5_0 *x = (const ds_block_q5_0 *)row + b;
        legacy_nibbles(x->qs, g->lv);
        legacy_fifth_bit(x->qh, g->lv);
        for (int i = 0; i < 32; i++) g->lv[i] = (int8_t)(g->lv[i] - 16);
        no_min(g);
        g->d = ds_f16_to_f32(x->d);
        return 1;
    }
    case DS_Q5_1: {
        const ds_block_q5_1 *x = (const ds_block_q5_1 *)row + b;
        legacy_nibbles(x->qs, g->lv);
        legacy_fifth_bit(x->qh, g->lv);
        no_min(g);
        g->d = ds_f16_to_f32(x->d);
        g->dm = ds_f16_to_f32(x->m);
        g->mn[0] = g->mn[1] = 1;
        return 1;
    }
    case DS_Q2_K: {
        const ds_block_q2_K *x = (const ds_block_q2_K *)row + b / 8;
        int j = (int)(b % 8), shift = 2 * (j % 4);
        const uint8_t *q = x->qs + 32 * (j / 4);
        for (int i = 0; i < 32; i++) g->lv[i] = (int8_t)((q[i] >> shift) & 3);
        for (int h = 0; h < 2; h++) {
            g->sc[h] = (int8_t)(x->scales[2 * j + h] & 0xF);
            g->mn[h] = (int8_t)(x->scales[2 * j + h] >> 4);
        }
        g->d = ds_f16_to_f32(x->d);
        g->dm = -ds_f16_to_f32(x->dmin);
        return 1;
    }
    case DS_Q3_K: {
        const ds_block_q3_K *x = (const ds_block_q3_K *)row + b / 8;
        int j = (int)(b % 8), shift = 2 * (j % 4);
        const uint8_t *q = x->qs + 32 * (j / 4);
        for (int i = 0; i < 32; i++)
            g->lv[i] = (int8_t)(((q[i] >> shift) & 3) - ((x->hmask[i] >> j) & 1 ? 0 : 4));
        no_min(g);
        g->sc[0] = (int8_t)q3k_scale(x->scales, 2 * j);
        g->sc[1] = (int8_t)q3k_scale(x->scales, 2 * j + 1);
        g->d = ds_f16_to_f32(x->d);
        return 1;
    }
    case DS_IQ4_NL: {
        const ds_block_iq4_nl *x = (const ds_block_iq4_nl *)row + b;
        for (int i = 0; i < 16; i++) {
            g->lv[i] = iq4nl_values[x->qs[i] & 0xF];
            g->lv[i + 16] = iq4nl_values[x->qs[i] >> 4];
        }
        no_min(g);
        g->d = ds_f16_to_f32(x->d);
        return 1;
    }
    case DS_IQ4_XS: {
        const ds_block_iq4_xs *x = (const ds_block_iq4_xs *)row + b / 8;
        int j = (int)(b % 8);
        const uint8_t *q = x->qs + 16 * j;
        for (int i = 0; i < 16; i++) {
            g->lv[i] = iq4nl_values[q[i] & 0xF];
            g->lv[i + 16] = iq4nl_values[q[i] >> 4];
        }
        no_min(g);
        int ls = ((x->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((x->scales_h >> (2 * j)) & 3) << 4);
        g->sc[0] = g->sc[1] = (int8_t)(ls - 32);
        g->d = ds_f16_to_f32(x->d);
        return 1;
    }
    case DS_MXFP4: {
        const ds_block_mxfp4 *x = (const ds_block_mxfp4 *)row + b;
        for (int i = 0; i < 16; i++) {
            g->lv[i] = fp4_values[x->qs[i] & 0xF];
            g->lv[i + 16] = fp4_values[x->qs[i] >> 4];
        }
        no_min(g);
        g->d = e8m0_half(x->e);
        return 1;
    }
    case DS_TQ1_0: {
        const ds_block_tq1_0 *x = (const ds_block_tq1_0 *)row + b / 8;
        int e0 = 32 * (int)(b % 8);
        for (int i = 0; i < 32; i++) g->lv[i] = (int8_t)(tq1_trit(x, e0 + i) - 1);
        no_min(g);
        g->d = ds_f16_to_f32(x->d);
        return 1;
    }
    case DS_TQ2_0: {
        /* byte m of each 32-byte half holds elements 128 half + 32 l + m in bits 2l */
        const ds_block_tq2_0 *x = (const ds_block_tq2_0 *)row + b / 8;
        int j = (int)(b % 8);
        const uint8_t *q = x->qs + 32 * (j / 4);
        for (int i = 0; i < 32; i++) g->lv[i] = (int8_t)(((q[i] >> (2 * (j % 4))) & 3) - 1);
        no_min(g);
        g->d = ds_f16_to_f32(x->d);
        return 1;
    }
    default: return 0;
    }
}

static const ds_glevels lv_q4_1 = {16, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
static const ds_glevels lv_q5_0 = {32, {-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1,
                                        0,   1,   2,   3,   4,   5,   6,   7,  8,  9,  10, 11, 12, 13, 14, 15}};
static const ds_glevels lv_q5_1 = {32, {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                        16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}};
static const ds_glevels lv_q2_K = {4, {0, 1, 2, 3}};
static const ds_glevels lv_q3_K = {8, {-4, -3, -2, -1, 0, 1, 2, 3}};
static const ds_glevels lv_iq4 = {16, {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}};
static const ds_glevels lv_mxfp4 = {15, {-12, -8, -6, -4, -3, -2, -1, 0, 1, 2, 3, 4, 6, 8, 12}};
static const ds_glevels lv_tq1_0 = {3, {-1, 0, 1}};
static const ds_glevels lv_tq2_0 = {4, {-1, 0, 1, 2}};

const ds_glevels *ds_lowbit_levels(ds_dtype t) {
    switch (t) {
    case DS_Q4_1: return &lv_q4_1;
    case DS_Q5_0: return &lv_q5_0;
    case DS_Q5_1: return &lv_q5_1;
    case DS_Q2_K: return &lv_q2_K;
    case DS_Q3_K: return &lv_q3_K;
    case DS_IQ4_NL:
    case DS_IQ4_XS: return &lv_iq4;
    case DS_MXFP4: return &lv_mxfp4;
    case DS_TQ1_0: return &lv_tq1_0;
    case DS_TQ2_0: return &lv_tq2_0;
    default: return 0;
    }
}

/* UE4M3 (unsigned, 4 exponent bits of bias 7, 3 mantissa bits) halved, as the
 * doubled E2M1 values want; 0x7F (the NaN code) reads as 0 */
static float ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    int e = (x >> 3) & 0xF, m = x & 7;
    float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

void ds_nvfp4_row_bf16(const void *row, uint16_t *dst, int64_t n) {
    const ds_block_nvfp4 *x = row;
    for (int64_t b = 0; b < n / DS_QK_NVFP4; b++, dst += DS_QK_NVFP4)
        for (int s = 0; s < 4; s++) {
            float d = ue4m3_half(x[b].d[s]);
            for (int j = 0; j < 8; j++) {
                uint8_t q = x[b].qs[8 * s + j];
                dst[16 * s + j] = ds_f32_to_bf16((float)fp4_values[q & 0xF] * d);
                dst[16 * s + j + 8] = ds_f32_to_bf16((float)fp4_values[q >> 4] * d);
            }
        }
}
