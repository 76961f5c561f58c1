/* quant_grid.c - the grid types: iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m:
 * dequantisation (the format's formula), quantisation, and the common integer form.
 *
 * Every one of them stores each group of 8 elements as an index into a fixed
 * codebook (grid_tables.h), with signs, a small odd integer scale per 16 or
 * 32 elements and an fp16 scale per 256. Dequantisation repeats ggml's
 * dequantize_row_iq* float operations in their order, so a row decodes to
 * the bits llama.cpp produces.
 *
 * Quantisation is a plain nearest-codebook search (the file format must be
 * exact, not the quality of our iq files): for each scale unit a few trial
 * scales, each refitted by least squares; the fp16 super-block scale from the
 * largest; then each unit's integer scale and grid choices at that scale.
 * The nearest grid entry to a group is searched among the entries nearest to
 * the group's rounded lattice point (precomputed once per codebook), not the
 * whole codebook: a few dozen distances per group instead of up to 2048. */
#include "kernels/quant_int.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "common/half.h"
#include "kernels/grid_tables.h"

#define F16_MAX_FINITE 65504.0
#define GROUP 8                        /* elements per grid group (sign masks, iq1 deltas) */
#define BLOCK32 32                     /* elements per gblock */
#define SUPER (DS_QK_K / BLOCK32)      /* blocks of 32 per super-block */

/* ------------------------------------------------------------------------ */
/* Dequantisation                                                            */

static inline uint8_t grid8_byte(uint64_t entry, int j) { return (uint8_t)(entry >> (8 * j)); }
static inline uint8_t grid4_byte(uint32_t entry, int j) { return (uint8_t)(entry >> (8 * j)); }
static inline int8_t iq1_value(uint16_t idx, int j) { return (int8_t)grid8_byte(ds_grid_iq1s[idx], j); }

/* 8 elements db * grid * (+-1), bit j of signs negating element j. */
static void put_group8(float *y, float db, uint64_t entry, uint8_t signs) {
    for (int j = 0; j < GROUP; j++) {
        const float v = db * (float)grid8_byte(entry, j);
        y[j] = (signs >> j) & 1 ? -v : v;
    }
}

/* The same for a group made of two 4-element iq3 entries. */
static void put_group4x2(float *y, float db, uint32_t e0, uint32_t e1, uint8_t signs) {
    for (int j = 0; j < 4; j++) {
        const float v0 = db * (float)grid4_byte(e0, j), v1 = db * (float)grid4_byte(e1, j);
        y[j] = (signs >> j) & 1 ? -v0 : v0;
        y[j + 4] = (signs >> (j + 4)) & 1 ? -v1 : v1;
    }
}

static uint32_t load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static void dequant_iq2_xxs(const ds_block_iq2_xxs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        for (int ib = 0; ib < SUPER; ib++) {
            const uint32_t grids = load_u32(x[i].qs + 4 * ib), aux = load_u32(x[i].qs + 4 * ib + 2);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += GROUP)
                put_group8(y, db, ds_grid_iq2xxs[(grids >> (8 * l)) & 255], ds_grid_ksigns[(aux >> (7 * l)) & 127]);
        }
    }
}

static void dequant_iq2_xs(const ds_block_iq2_xs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        for (int ib = 0; ib < SUPER; ib++) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[ib] & 15)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += GROUP) {
                const uint16_t q = x[i].qs[4 * ib + l];
                put_group8(y, db[l / 2], ds_grid_iq2xs[q & 511], ds_grid_ksigns[q >> 9]);
            }
        }
    }
}

static void dequant_iq2_s(const ds_block_iq2_s *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        const uint8_t *signs = x[i].qs + DS_QK_K / 8;
        for (int ib = 0; ib < SUPER; ib++) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[ib] & 15)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += GROUP) {
                const int idx = x[i].qs[4 * ib + l] | (((x[i].qh[ib] >> (2 * l)) & 3) << 8);
                put_group8(y, db[l / 2], ds_grid_iq2s[idx], signs[4 * ib + l]);
            }
        }
    }
}

static void dequant_iq3_xxs(const ds_block_iq3_xxs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs, *scales_signs = x[i].qs + DS_QK_K / 4;
        for (int ib = 0; ib < SUPER; ib++) {
            const uint32_t aux = load_u32(scales_signs + 4 * ib);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += GROUP)
                put_group4x2(y, db, ds_grid_iq3xxs[qs[8 * ib + 2 * l]], ds_grid_iq3xxs[qs[8 * ib + 2 * l + 1]],
                             ds_grid_ksigns[(aux >> (7 * l)) & 127]);
        }
    }
}

static void dequant_iq3_s(const ds_block_iq3_s *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        for (int ib = 0; ib < SUPER; ib++) {
            const float db = d * (float)(1 + 2 * ((x[i].scales[ib / 2] >> (4 * (ib % 2))) & 15));
            const uint8_t *qs = x[i].qs + 8 * ib;
            for (int l = 0; l < 4; l++, y += GROUP) {
                const int i0 = qs[2 * l] | (((x[i].qh[ib] >> (2 * l)) & 1) << 8);
                const int i1 = qs[2 * l + 1] | (((x[i].qh[ib] >> (2 * l + 1)) & 1) << 8);
                put_group4x2(y, db, ds_grid_iq3s[i0], ds_grid_iq3s[i1], x[i].signs[4 * ib + l]);
            }
        }
    }
}

/* 8 elements dl * (grid + delta) of iq1 grid entry idx. */
static void put_iq1_group(float *y, float dl, uint16_t idx, float delta) {
    for (int j = 0; j < GROUP; j++) y[j] = dl * ((float)iq1_value(idx, j) + delta);
}

static void dequant_iq1_s(const ds_block_iq1_s *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = ds_f16_to_f32(x[i].d);
        for (int ib = 0; ib < SUPER; ib++) {
            const uint16_t qh = x[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -DS_IQ1S_DELTA : DS_IQ1S_DELTA;
            for (int l = 0; l < 4; l++, y += GROUP)
                put_iq1_group(y, dl, (uint16_t)(x[i].qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)), delta);
        }
    }
}

/* iq1_m keeps its fp16 scale in the top nibble of each 16-bit scale word. */
static float iq1_m_d(const ds_block_iq1_m *x, uint16_t sc[4]) {
    memcpy(sc, x->scales, 8);
    const uint16_t h = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    return ds_f16_to_f32(h);
}

/* Index and delta sign of group l (0..3) of block ib of an iq1_m block. */
static uint16_t iq1_m_index(const ds_block_iq1_m *x, int ib, int l, int *negative) {
    const int nibble = (x->qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
    *negative = nibble >> 3;
    return (uint16_t)(x->qs[4 * ib + l] | ((nibble & 7) << 8));
}

/* Integer scale (0..7) of half h of block ib of an iq1_m block. */
static int iq1_m_scale(const uint16_t sc[4], int ib, int h) { return (sc[ib / 2] >> (6 * (ib % 2) + 3 * h)) & 7; }

static void dequant_iq1_m(const ds_block_iq1_m *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        uint16_t sc[4];
        const float d = iq1_m_d(&x[i], sc);
        for (int ib = 0; ib < SUPER; ib++) {
            const float dl[2] = {d * (float)(2 * iq1_m_scale(sc, ib, 0) + 1),
                                 d * (float)(2 * iq1_m_scale(sc, ib, 1) + 1)};
            for (int l = 0; l < 4; l++, y += GROUP) {
                int negative;
                const uint16_t idx = iq1_m_index(&x[i], ib, l, &negative);
                put_iq1_group(y, dl[l / 2], idx, negative ? -DS_IQ1M_DELTA : DS_IQ1M_DELTA);
            }
        }
    }
}

int ds_grid_dequantize(ds_dtype t, const void *src, float *dst, int64_t n) {
    const int64_t nb = n / DS_QK_K;
    switch (t) {
    case DS_IQ2_XXS: dequant_iq2_xxs(src, dst, nb); return 1;
    case DS_IQ2_XS: dequant_iq2_xs(src, dst, nb); return 1;
    case DS_IQ2_S: dequant_iq2_s(src, dst, nb); return 1;
    case DS_IQ3_XXS: dequant_iq3_xxs(src, dst, nb); return 1;
    case DS_IQ3_S: dequant_iq3_s(src, dst, nb); return 1;
    case DS_IQ1_S: dequant_iq1_s(src, dst, nb); return 1;
    case DS_IQ1_M: dequant_iq1_m(src, dst, nb); return 1;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* The common integer form                                                   */
/*
 * iq2:     d (0.5 + ls) / 4 * g       = (d / 8) (2 ls + 1) g
 * iq3_xxs: d (0.5 + ls) / 2 * g       = (d / 4) (2 ls + 1) g
 * iq3_s:   d (2 ls + 1) g
 * iq1:     d (2 ls + 1) (g +- 1/8)    = (d / 8) (2 ls + 1) (8 g +- 1)
 * Every product is exact in float (fp16 d, at most 5-bit scales, at most
 * 6-bit levels), so d * sc * lv is the very value ds_dequantize_row gives. */

/* Fills out from the 32 integer levels (held as floats), the half scales and d. */
static void gblock_fill(ds_gblock *out, float d, int sc0, int sc1, const float *levels) {
    out->d = d, out->dm = 0.0f;
    out->sc[0] = (int8_t)sc0, out->sc[1] = (int8_t)sc1;
    out->mn[0] = out->mn[1] = 0;
    for (int i = 0; i < BLOCK32; i++) out->lv[i] = (int8_t)levels[i];
}

/* The 4-bit scale codes of the two halves of a block of 32 (iq2_xs, iq2_s) as odd scales. */
static int half_scale(uint8_t codes, int h) { return 2 * ((codes >> (4 * h)) & 15) + 1; }

/* Block b of 32: the signed grid values are the levels (put_group* at db = 1). */
int ds_grid_gblock(ds_dtype t, const void *row, int64_t b, ds_gblock *out) {
    const int64_t i = b / SUPER;
    const int ib = (int)(b % SUPER);
    float lv[BLOCK32];
    switch (t) {
    case DS_IQ2_XXS: {
        const ds_block_iq2_xxs *x = (const ds_block_iq2_xxs *)row + i;
        const uint32_t grids = load_u32(x->qs + 4 * ib), aux = load_u32(x->qs + 4 * ib + 2);
        for (int l = 0; l < 4; l++)
            put_group8(lv + GROUP * l, 1.0f, ds_grid_iq2xxs[(grids >> (8 * l)) & 255],
                       ds_grid_ksigns[(aux >> (7 * l)) & 127]);
        const int sc = 2 * (int)(aux >> 28) + 1;
        gblock_fill(out, ds_f16_to_f32(x->d) * 0.125f, sc, sc, lv);
        return 1;
    }
    case DS_IQ2_XS: {
        const ds_block_iq2_xs *x = (const ds_block_iq2_xs *)row + i;
        for (int l = 0; l < 4; l++) {
            const uint16_t q = x->qs[4 * ib + l];
            put_group8(lv + GROUP * l, 1.0f, ds_grid_iq2xs[q & 511], ds_grid_ksigns[q >> 9]);
        }
        gblock_fill(out, ds_f16_to_f32(x->d) * 0.125f, half_scale(x->scales[ib], 0), half_scale(x->scales[ib], 1), lv);
        return 1;
    }
    case DS_IQ2_S: {
        const ds_block_iq2_s *x = (const ds_block_iq2_s *)row + i;
        for (int l = 0; l < 4; l++) {
            const int idx = x->qs[4 * ib + l] | (((x->qh[ib] >> (2 * l)) & 3) << 8);
            put_group8(lv + GROUP * l, 1.0f, ds_grid_iq2s[idx], x->qs[DS_QK_K / 8 + 4 * ib + l]);
        }
        gblock_fill(out, ds_f16_to_f32(x->d) * 0.125f, half_scale(x->scales[ib], 0), half_scale(x->scales[ib], 1), lv);
        return 1;
    }
    case DS_IQ3_XXS: {
        const ds_block_iq3_xxs *x = (const ds_block_iq3_xxs *)row + i;
        const uint32_t aux = load_u32(x->qs + DS_QK_K / 4 + 4 * ib);
        for (int l = 0; l < 4; l++)
            put_group4x2(lv + GROUP * l, 1.0f, ds_grid_iq3xxs[x->qs[8 * ib + 2 * l]],
                         ds_grid_iq3xxs[x->qs[8 * ib + 2 * l + 1]], ds_grid_ksigns[(aux >> (7 * l)) & 127]);
        const int sc = 2 * (int)(aux >> 28) + 1;
        gblock_fill(out, ds_f16_to_f32(x->d) * 0.25f, sc, sc, lv);
        return 1;
    }
    case DS_IQ3_S: {
        const ds_block_iq3_s *x = (const ds_block_iq3_s *)row + i;
        for (int l = 0; l < 4; l++) {
            const int i0 = x->qs[8 * ib + 2 * l] | (((x->qh[ib] >> (2 * l)) & 1) << 8);
            const int i1 = x->qs[8 * ib + 2 * l + 1] | (((x->qh[ib] >> (2 * l + 1)) & 1) << 8);
            put_group4x2(lv + GROUP * l, 1.0f, ds_grid_iq3s[i0], ds_grid_iq3s[i1], x->signs[4 * ib + l]);
        }
        const int sc = 2 * ((x->scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
        gblock_fill(out, ds_f16_to_f32(x->d), sc, sc, lv);
        return 1;
    }
    case DS_IQ1_S: {
        const ds_block_iq1_s *x = (const ds_block_iq1_s *)row + i;
        const uint16_t qh = x->qh[ib];
        const int shift = qh & 0x8000 ? -1 : 1;
        for (int l = 0; l < 4; l++) {
            const uint16_t idx = (uint16_t)(x->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8));
            for (int j = 0; j < GROUP; j++) lv[GROUP * l + j] = (float)(8 * iq1_value(idx, j) + shift);
        }
        const int sc = 2 * ((qh >> 12) & 7) + 1;
        gblock_fill(out, ds_f16_to_f32(x->d) * 0.125f, sc, sc, lv);
        return 1;
    }
    case DS_IQ1_M: {
        const ds_block_iq1_m *x = (const ds_block_iq1_m *)row + i;
        uint16_t sc[4];
        const float d = iq1_m_d(x, sc);
        for (int l = 0; l < 4; l++) {
            int negative;
            const uint16_t idx = iq1_m_index(x, ib, l, &negative);
            for (int j = 0; j < GROUP; j++) lv[GROUP * l + j] = (float)(8 * iq1_value(idx, j) + (negative ? -1 : 1));
        }
        gblock_fill(out, d * 0.125f, 2 * iq1_m_scale(sc, ib, 0) + 1, 2 * iq1_m_scale(sc, ib, 1) + 1, lv);
        return 1;
    }
    default: return 0;
    }
}

static const ds_glevels levels_iq2 = {6, {-43, -25, -8, 8, 25, 43}};
static const ds_glevels levels_iq3_xxs = {16, {-62, -52, -44, -36, -28, -20, -12, -4, 4, 12, 20, 28, 36, 44, 52, 62}};
static const ds_glevels levels_iq3_s = {16, {-15, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 15}};
static const ds_glevels levels_iq1 = {6, {-9, -7, -1, 1, 7, 9}};

const ds_glevels *ds_grid_levels(ds_dtype t) {
    switch (t) {
    case DS_IQ2_XXS: case DS_IQ2_XS: case DS_IQ2_S: return &levels_iq2;
    case DS_IQ3_XXS: return &levels_iq3_xxs;
    case DS_IQ3_S: return &levels_iq3_s;
    case DS_IQ1_S: case DS_IQ1_M: return &levels_iq1;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Nearest-entry search                                                      */

/* Candidates kept per lattice point: the entries nearest to the point. More
 * lower the error of Gaussian rows by under 1% (16 or 64 of them) and cost
 * time in proportion. */
#define NCAND 8
#define MAX_ALPHA 8

/* A codebook as the search sees it. Its grid values all come from a small
 * alphabet; the lattice of all alphabet vectors has nalpha^dim points, and
 * each point keeps the NCAND entries nearest to it. A target vector is
 * rounded element by element to its lattice point, and only that point's
 * candidates are measured. */
typedef struct {
    int dim, nalpha, entries, cells;
    float alpha[MAX_ALPHA];   /* ascending */
    float mid[MAX_ALPHA - 1]; /* rounding thresholds between neighbours */
    float *val;               /* entries x dim */
    uint16_t *cand;           /* cells x NCAND, nearest first */
} codebook;

static int8_t entry_value(ds_dtype t, int e, int j) {
    switch (t) {
    case DS_IQ2_XXS: return (int8_t)grid8_byte(ds_grid_iq2xxs[e], j);
    case DS_IQ2_XS: return (int8_t)grid8_byte(ds_grid_iq2xs[e], j);
    case DS_IQ2_S: return (int8_t)grid8_byte(ds_grid_iq2s[e], j);
    case DS_IQ3_XXS: return (int8_t)grid4_byte(ds_grid_iq3xxs[e], j);
    case DS_IQ3_S: return (int8_t)grid4_byte(ds_grid_iq3s[e], j);
    default: return iq1_value((uint16_t)e, j);
    }
}

static void codebook_build(codebook *cb, ds_dtype t, int entries, int dim, int nalpha, const int8_t *alpha,
                           float *val, uint16_t *cand) {
    cb->dim = dim, cb->nalpha = nalpha, cb->entries = entries, cb->val = val, cb->cand = cand;
    cb->cells = 1;
    for (int j = 0; j < dim; j++) cb->cells *= nalpha;
    for (int k = 0; k < nalpha; k++) cb->alpha[k] = alpha[k];
    for (int k = 0; k + 1 < nalpha; k++) cb->mid[k] = 0.5f * (cb->alpha[k] + cb->alpha[k + 1]);
    for (int e = 0; e < entries; e++)
        for (int j = 0; j < dim; j++) val[e * dim + j] = entry_value(t, e, j);
    for (int c = 0; c < cb->cells; c++) {
        int point[GROUP];
        for (int j = dim - 1, rest = c; j >= 0; j--, rest /= nalpha) point[j] = alpha[rest % nalpha];
        int best_d[NCAND], best_e[NCAND], kept = 0;
        for (int e = 0; e < entries; e++) {
            int dist = 0;
            for (int j = 0; j < dim; j++) {
                const int diff = point[j] - (int)val[e * dim + j];
                dist += diff * diff;
            }
            if (kept == NCAND && dist >= best_d[NCAND - 1]) continue;
            int k = kept < NCAND ? kept++ : NCAND - 1;
            for (; k > 0 && best_d[k - 1] > dist; k--) best_d[k] = best_d[k - 1], best_e[k] = best_e[k - 1];
            best_d[k] = dist, best_e[k] = e;
        }
        for (int k = 0; k < NCAND; k++) cand[c * NCAND + k] = (uint16_t)best_e[k < kept ? k : 0];
    }
}

/* The codebooks, built on first use (one pthread_once each). */
enum { CB_IQ2XXS, CB_IQ2XS, CB_IQ2S, CB_IQ3XXS, CB_IQ3S, CB_IQ1S, CB_COUNT };
static codebook codebooks[CB_COUNT];
static const int8_t alpha_iq2[] = {8, 25, 43}, alpha_iq3xxs[] = {4, 12, 20, 28, 36, 44, 52, 62},
                    alpha_iq3s[] = {1, 3, 5, 7, 9, 11, 13, 15}, alpha_iq1[] = {-1, 0, 1};
#define LATTICE8 6561 /* 3^8 */
#define LATTICE4 4096 /* 8^4 */
static float val_iq2xxs[256 * 8], val_iq2xs[512 * 8], val_iq2s[1024 * 8], val_iq3xxs[256 * 4], val_iq3s[512 * 4],
    val_iq1s[2048 * 8];
static uint16_t cand_iq2xxs[LATTICE8 * NCAND], cand_iq2xs[LATTICE8 * NCAND], cand_iq2s[LATTICE8 * NCAND],
    cand_iq3xxs[LATTICE4 * NCAND], cand_iq3s[LATTICE4 * NCAND], cand_iq1s[LATTICE8 * NCAND];

static void build_iq2xxs(void) {
    codebook_build(&codebooks[CB_IQ2XXS], DS_IQ2_XXS, 256, 8, 3, alpha_iq2, val_iq2xxs, cand_iq2xxs);
}
static void build_iq2xs(void) {
    codebook_build(&codebooks[CB_IQ2XS], DS_IQ2_XS, 512, 8, 3, alpha_iq2, val_iq2xs, cand_iq2xs);
}
static void build_iq2s(void) {
    codebook_build(&codebooks[CB_IQ2S], DS_IQ2_S, 1024, 8, 3, alpha_iq2, val_iq2s, cand_iq2s);
}
static void build_iq3xxs(void) {
    codebook_build(&codebooks[CB_IQ3XXS], DS_IQ3_XXS, 256, 4, 8, alpha_iq3xxs, val_iq3xxs, cand_iq3xxs);
}
static void build_iq3s(void) {
    codebook_build(&codebooks[CB_IQ3S], DS_IQ3_S, 512, 4, 8, alpha_iq3s, val_iq3s, cand_iq3s);
}
static void build_iq1s(void) {
    codebook_build(&codebooks[CB_IQ1S], DS_IQ1_S, 2048, 8, 3, alpha_iq1, val_iq1s, cand_iq1s);
}

static const codebook *codebook_get(int which) {
    static pthread_once_t once[CB_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                            PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
    static void (*const build[CB_COUNT])(void) = {build_iq2xxs, build_iq2xs, build_iq2s,
                                                  build_iq3xxs, build_iq3s, build_iq1s};
    pthread_once(&once[which], build[which]);
    return &codebooks[which];
}

/* The candidate of t's lattice point nearest to t (dim values); *err gets the
 * squared distance. NaN-safe: a NaN target still yields a valid index. dim is
 * a constant at each call, so the loops unroll. */
static inline int nearest_in(const codebook *cb, const float *t, float *err, const int dim) {
    int cell = 0;
    for (int j = 0; j < dim; j++) {
        int k = 0;
        for (int m = 0; m + 1 < cb->nalpha; m++) k += t[j] > cb->mid[m];
        cell = cell * cb->nalpha + k;
    }
    const uint16_t *cand = cb->cand + (size_t)cell * NCAND;
    int best = cand[0];
    float best_err = INFINITY;
    for (int k = 0; k < NCAND; k++) {
        const float *g = cb->val + (size_t)cand[k] * dim;
        float e = 0.0f;
        for (int j = 0; j < dim; j++) e += (t[j] - g[j]) * (t[j] - g[j]);
        if (e < best_err) best_err = e, best = cand[k];
    }
    *err = best_err;
    return best;
}

static int nearest_entry(const codebook *cb, const float *t, float *err) {
    return cb->dim == 8 ? nearest_in(cb, t, err, 8) : nearest_in(cb, t, err, 4);
}

/* ------------------------------------------------------------------------ */
/* Quantisation                                                              */

/* iq1 grids are signed themselves; iq2_s and iq3_s store 8 sign bits per
 * group; the others 7, the eighth making the count of negatives even. */
enum { SIGNS_NONE, SIGNS_FREE, SIGNS_EVEN };
/* iq1_s has one +-1/8 shift per 32 elements, iq1_m one per 8. */
enum { DELTA_NONE, DELTA_UNIT, DELTA_GROUP };

typedef struct {
    int cb;          /* codebook */
    int signs;       /* SIGNS_* */
    int delta;       /* DELTA_* */
    int unit;        /* elements under one integer scale: 16 or 32 */
    int ls_max;      /* largest integer scale code */
    double mscale;   /* effective scale of code ls: d * mscale * (2 ls + 1) */
    double qmax;     /* largest |grid value| (plus the iq1 shift) */
} grid_spec;

/* One group of 8: its entry indices (two for iq3), sign bits and iq1 shift sign. */
typedef struct {
    uint16_t idx[2];
    uint8_t mask;
    uint8_t negative;
} group_choice;

#define MAX_UNITS (DS_QK_K / 16)
#define GROUPS (DS_QK_K / GROUP)

/* Chooses group x's entries at inverse scale inv; q gets the chosen values
 * in grid units (signs and shift included). delta_sign: +1 or -1 forces the
 * iq1 shift, 0 lets the group choose the nearer. */
static void quant_group(const grid_spec *s, const codebook *cb, const float *x, double inv, int delta_sign,
                         group_choice *ch, float *q) {
    float t[GROUP];
    for (int j = 0; j < GROUP; j++) t[j] = (float)((double)x[j] * inv);
    if (s->signs == SIGNS_NONE) {
        float err = INFINITY;
        int first = 1;
        for (int neg = 0; neg < 2; neg++) {
            if ((delta_sign > 0 && neg) || (delta_sign < 0 && !neg)) continue;
            const float delta = neg ? -DS_IQ1S_DELTA : DS_IQ1S_DELTA;
            float shifted[GROUP], e;
            for (int j = 0; j < GROUP; j++) shifted[j] = t[j] - delta;
            const int idx = nearest_entry(cb, shifted, &e);
            if (first || e < err) err = e, ch->idx[0] = (uint16_t)idx, ch->negative = (uint8_t)neg;
            first = 0;
        }
        const float delta = ch->negative ? -DS_IQ1S_DELTA : DS_IQ1S_DELTA;
        for (int j = 0; j < GROUP; j++) q[j] = cb->val[(size_t)ch->idx[0] * GROUP + j] + delta;
        return;
    }
    unsigned mask = 0;
    for (int j = 0; j < GROUP; j++)
        if (t[j] < 0.0f) mask |= 1u << j, t[j] = -t[j];
    if (s->signs == SIGNS_EVEN && (__builtin_popcount(mask) & 1)) {
        /* an odd count cannot be stored: the smallest element takes the wrong sign */
        int m = 0;
        for (int j = 1; j < GROUP; j++)
            if (t[j] < t[m]) m = j;
        mask ^= 1u << m, t[m] = -t[m];
    }
    for (int p = 0; p < GROUP / cb->dim; p++) {
        float e;
        ch->idx[p] = (uint16_t)nearest_entry(cb, t + p * cb->dim, &e);
        for (int j = 0; j < cb->dim; j++) q[p * cb->dim + j] = cb->val[(size_t)ch->idx[p] * cb->dim + j];
    }
    for (int j = 0; j < GROUP; j++)
        if ((mask >> j) & 1) q[j] = -q[j];
    ch->mask = (uint8_t)mask;
    ch->negative = 0;
}

/* Quantises the unit of s->unit elements at scale scale (> 0); fills sums
 * x.q and q.q for the least-squares scale of the choices. */
static void quant_unit(const grid_spec *s, const codebook *cb, const float *x, double scale, int delta_sign,
                       group_choice *ch, double *sxq, double *sqq) {
    const double inv = 1.0 / scale;
    double xq = 0, qq = 0;
    for (int g = 0; g < s->unit / GROUP; g++) {
        float q[GROUP];
        quant_group(s, cb, x + g * GROUP, inv, delta_sign, &ch[g], q);
        for (int j = 0; j < GROUP; j++) xq += (double)x[g * GROUP + j] * q[j], qq += (double)q[j] * q[j];
    }
    *sxq = xq, *sqq = qq;
}

/* Squared error of a unit's choices at scale scale, from its sums. */
static double unit_error(double sxx, double sxq, double sqq, double scale) {
    return sxx - 2.0 * scale * sxq + scale * scale * sqq;
}

/* The iq1_s unit (one shift sign for all 32) tries both signs; others let
 * quant_group decide. Returns the error at scale. */
static double quant_unit_best(const grid_spec *s, const codebook *cb, const float *x, double sxx, double scale,
                              group_choice *ch, double *sxq, double *sqq) {
    if (s->delta != DELTA_UNIT) {
        quant_unit(s, cb, x, scale, 0, ch, sxq, sqq);
        return unit_error(sxx, *sxq, *sqq, scale);
    }
    group_choice alt[BLOCK32 / GROUP];
    double axq, aqq;
    quant_unit(s, cb, x, scale, 1, ch, sxq, sqq);
    quant_unit(s, cb, x, scale, -1, alt, &axq, &aqq);
    const double e = unit_error(sxx, *sxq, *sqq, scale), ae = unit_error(sxx, axq, aqq, scale);
    if (ae < e) {
        memcpy(ch, alt, sizeof alt);
        *sxq = axq, *sqq = aqq;
        return ae;
    }
    return e;
}

/* Trial scales: the unit's largest magnitude lands on qmax times these. */
static const double trial_ratios[] = {0.8, 1.0, 1.2};

/* The scale that fits a unit best before the scale fields' rounding: each
 * trial refitted by least squares; 0 for a zero unit. */
static double unit_scale(const grid_spec *s, const codebook *cb, const float *x, double sxx) {
    double amax = 0;
    for (int i = 0; i < s->unit; i++) amax = fmax(amax, fabs((double)x[i]));
    if (!(amax > 0)) return 0;
    double best = amax / s->qmax, best_err = INFINITY;
    group_choice ch[BLOCK32 / GROUP];
    for (size_t r = 0; r < sizeof trial_ratios / sizeof trial_ratios[0]; r++) {
        const double scale = amax / (s->qmax * trial_ratios[r]);
        double sxq, sqq;
        quant_unit_best(s, cb, x, sxx, scale, ch, &sxq, &sqq);
        const double fit = sxq > 0 && sqq > 0 ? sxq / sqq : scale;
        const double e = unit_error(sxx, sxq, sqq, fit);
        if (e < best_err) best_err = e, best = fit;
    }
    return best;
}

/* Nearest scale code of a wanted scale, given the super-block scale d > 0. */
static int scale_code(const grid_spec *s, double want, double d) {
    const double v = (want / (d * s->mscale) - 1.0) * 0.5;
    if (!(v > 0)) return 0;
    if (v >= s->ls_max) return s->ls_max;
    return (int)(v + 0.5);
}

/* One super-block of 256: the fp16 scale d, a code per unit and a choice per group. */
typedef struct {
    uint16_t d;
    int ls[MAX_UNITS];
    group_choice ch[GROUPS];
} super_choice;

static void quant_super(const grid_spec *s, const float *x, super_choice *out) {
    const codebook *cb = codebook_get(s->cb);
    const int units = DS_QK_K / s->unit;
    double sxx[MAX_UNITS], want[MAX_UNITS], smax = 0;
    for (int u = 0; u < units; u++) {
        sxx[u] = 0;
        for (int i = 0; i < s->unit; i++) sxx[u] += (double)x[u * s->unit + i] * x[u * s->unit + i];
        want[u] = unit_scale(s, cb, x + u * s->unit, sxx[u]);
        smax = fmax(smax, want[u]);
    }
    double d = smax / (s->mscale * (2 * s->ls_max + 1));
    if (!(d < F16_MAX_FINITE)) d = F16_MAX_FINITE; /* a stored inf would decode to inf/NaN */
    out->d = ds_f32_to_f16((float)d);
    const double df = ds_f16_to_f32(out->d);
    for (int u = 0; u < units; u++) {
        group_choice *ch = out->ch + u * (s->unit / GROUP);
        double sxq, sqq;
        if (!(df > 0)) { /* every value decodes to 0: any valid choice will do */
            out->ls[u] = 0;
            quant_unit_best(s, cb, x + u * s->unit, sxx[u], 1.0, ch, &sxq, &sqq);
            continue;
        }
        /* the nearest code and its neighbours, by the error they leave */
        const int ls0 = scale_code(s, want[u], df);
        double best_err = INFINITY;
        for (int ls = ls0 > 0 ? ls0 - 1 : 0; ls <= ls0 + 1 && ls <= s->ls_max; ls++) {
            group_choice trial[BLOCK32 / GROUP];
            const double scale = df * s->mscale * (2 * ls + 1);
            const double e = quant_unit_best(s, cb, x + u * s->unit, sxx[u], scale, trial, &sxq, &sqq);
            if (e < best_err || best_err == INFINITY) {
                best_err = e, out->ls[u] = ls;
                memcpy(ch, trial, sizeof(group_choice) * (size_t)(s->unit / GROUP));
            }
        }
    }
}

static const grid_spec spec_iq2_xxs = {CB_IQ2XXS, SIGNS_EVEN, DELTA_NONE, 32, 15, 0.125, 43};
static const grid_spec spec_iq2_xs = {CB_IQ2XS, SIGNS_EVEN, DELTA_NONE, 16, 15, 0.125, 43};
static const grid_spec spec_iq2_s = {CB_IQ2S, SIGNS_FREE, DELTA_NONE, 16, 15, 0.125, 43};
static const grid_spec spec_iq3_xxs = {CB_IQ3XXS, SIGNS_EVEN, DELTA_NONE, 32, 15, 0.25, 62};
static const grid_spec spec_iq3_s = {CB_IQ3S, SIGNS_FREE, DELTA_NONE, 32, 15, 1.0, 15};
static const grid_spec spec_iq1_s = {CB_IQ1S, SIGNS_NONE, DELTA_UNIT, 32, 7, 1.0, 1.125};
static const grid_spec spec_iq1_m = {CB_IQ1S, SIGNS_NONE, DELTA_GROUP, 16, 7, 1.0, 1.125};

static void store_u32(void *p, uint32_t v) { memcpy(p, &v, 4); }

static void write_iq2_xxs(ds_block_iq2_xxs *y, const super_choice *c) {
    y->d = c->d;
    for (int ib = 0; ib < SUPER; ib++) {
        uint32_t grids = 0, aux = (uint32_t)c->ls[ib] << 28;
        for (int l = 0; l < 4; l++) {
            const group_choice *g = &c->ch[4 * ib + l];
            grids |= (uint32_t)g->idx[0] << (8 * l);
            aux |= (uint32_t)(g->mask & 127) << (7 * l);
        }
        store_u32(y->qs + 4 * ib, grids);
        store_u32(y->qs + 4 * ib + 2, aux);
    }
}

static void write_iq2_xs(ds_block_iq2_xs *y, const super_choice *c) {
    y->d = c->d;
    for (int ib = 0; ib < SUPER; ib++) {
        y->scales[ib] = (uint8_t)(c->ls[2 * ib] | c->ls[2 * ib + 1] << 4);
        for (int l = 0; l < 4; l++) {
            const group_choice *g = &c->ch[4 * ib + l];
            y->qs[4 * ib + l] = (uint16_t)(g->idx[0] | (g->mask & 127) << 9);
        }
    }
}

static void write_iq2_s(ds_block_iq2_s *y, const super_choice *c) {
    y->d = c->d;
    for (int ib = 0; ib < SUPER; ib++) {
        y->scales[ib] = (uint8_t)(c->ls[2 * ib] | c->ls[2 * ib + 1] << 4);
        y->qh[ib] = 0;
        for (int l = 0; l < 4; l++) {
            const group_choice *g = &c->ch[4 * ib + l];
            y->qs[4 * ib + l] = (uint8_t)g->idx[0];
            y->qh[ib] |= (uint8_t)((g->idx[0] >> 8) << (2 * l));
            y->qs[DS_QK_K / 8 + 4 * ib + l] = g->mask;
        }
    }
}

static void write_iq3_xxs(ds_block_iq3_xxs *y, const super_choice *c) {
    y->d = c->d;
    for (int ib = 0; ib < SUPER; ib++) {
        uint32_t aux = (uint32_t)c->ls[ib] << 28;
        for (int l = 0; l < 4; l++) {
            const group_choice *g = &c->ch[4 * ib + l];
            y->qs[8 * ib + 2 * l] = (uint8_t)g->idx[0];
            y->qs[8 * ib + 2 * l + 1] = (uint8_t)g->idx[1];
            aux |= (uint32_t)(g->mask & 127) << (7 * l);
        }
        store_u32(y->qs + DS_QK_K / 4 + 4 * ib, aux);
    }
}

static void write_iq3_s(ds_block_iq3_s *y, const super_choice *c) {
    y->d = c->d;
    memset(y->scales, 0, sizeof y->scales);
    for (int ib = 0; ib < SUPER; ib++) {
        y->scales[ib / 2] |= (uint8_t)(c->ls[ib] << (4 * (ib % 2)));
        y->qh[ib] = 0;
        for (int l = 0; l < 4; l++) {
            const group_choice *g = &c->ch[4 * ib + l];
            for (int p = 0; p < 2; p++) {
                y->qs[8 * ib + 2 * l + p] = (uint8_t)g->idx[p];
                y->qh[ib] |= (uint8_t)((g->idx[p] >> 8) << (2 * l + p));
            }
            y->signs[4 * ib + l] = g->mask;
        }
    }
}

static void write_iq1_s(ds_block_iq1_s *y, const super_choice *c) {
    y->d = c->d;
    for (int ib = 0; ib < SUPER; ib++) {
        uint16_t qh = (uint16_t)(c->ls[ib] << 12 | c->ch[4 * ib].negative << 15);
        for (int l = 0; l < 4; l++) {
            const group_choice *g = &c->ch[4 * ib + l];
            y->qs[4 * ib + l] = (uint8_t)g->idx[0];
            qh |= (uint16_t)((g->idx[0] >> 8) << (3 * l));
        }
        y->qh[ib] = qh;
    }
}

static void write_iq1_m(ds_block_iq1_m *y, const super_choice *c) {
    uint16_t sc[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) sc[k] = (uint16_t)(((c->d >> (4 * k)) & 15) << 12);
    for (int ib = 0; ib < SUPER; ib++) {
        sc[ib / 2] |= (uint16_t)((c->ls[2 * ib] | c->ls[2 * ib + 1] << 3) << (6 * (ib % 2)));
        y->qh[2 * ib] = y->qh[2 * ib + 1] = 0;
        for (int l = 0; l < 4; l++) {
            const group_choice *g = &c->ch[4 * ib + l];
            y->qs[4 * ib + l] = (uint8_t)g->idx[0];
            y->qh[2 * ib + l / 2] |= (uint8_t)(((g->idx[0] >> 8) | g->negative << 3) << (4 * (l % 2)));
        }
    }
    memcpy(y->scales, sc, sizeof sc);
}

int ds_grid_quantize(ds_dtype t, const float *src, void *dst, int64_t n) {
    const grid_spec *s;
    switch (t) {
    case DS_IQ2_XXS: s = &spec_iq2_xxs; break;
    case DS_IQ2_XS: s = &spec_iq2_xs; break;
    case DS_IQ2_S: s = &spec_iq2_s; break;
    case DS_IQ3_XXS: s = &spec_iq3_xxs; break;
    case DS_IQ3_S: s = &spec_iq3_s; break;
    case DS_IQ1_S: s = &spec_iq1_s; break;
    case DS_IQ1_M: s = &spec_iq1_m; break;
    default: return 0;
    }
    const int bytes = ds_dtype_get(t)->block_bytes;
    for (int64_t i = 0; i < n / DS_QK_K; i++) {
        super_choice c;
        quant_super(s, src + i * DS_QK_K, &c);
        void *y = (uint8_t *)dst + i * bytes;
        switch (t) {
        case DS_IQ2_XXS: write_iq2_xxs(y, &c); break;
        case DS_IQ2_XS: write_iq2_xs(y, &c); break;
        case DS_IQ2_S: write_iq2_s(y, &c); break;
        case DS_IQ3_XXS: write_iq3_xxs(y, &c); break;
        case DS_IQ3_S: write_iq3_s(y, &c); break;
        case DS_IQ1_S: write_iq1_s(y, &c); break;
        default: write_iq1_m(y, &c); break;
        }
    }
    return 1;
}
