/* test_quant_lowbit.c - the low-bit types (q4_1, q5_0, q5_1, q2_K, q3_K,
 * iq4_nl, iq4_xs, mxfp4, nvfp4, tq1_0, tq2_0): their table entries, hand-built
 * blocks, round-trip error bounds, idempotent round trips, degenerate and
 * extreme rows.
 *
 * `test_quant_lowbit --dump DIR` instead writes, per type, DIR/<name>.bin
 * (quantised rows, rows of random blocks and hand-picked edge blocks) and
 * DIR/<name>.f32 (their ds_dequantize_row output), which
 * tests/reference/test_quants_ref.py decodes independently with numpy and
 * compares bit for bit. `test_quant_lowbit --stats` prints the measured
 * round-trip errors and quantisation speeds. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/half.h"
#include "kernels/dtype.h"
#include "quant_testing.h"
#include "testing.h"

static const ds_dtype lowbit_types[] = {DS_Q4_1,   DS_Q5_0,   DS_Q5_1,  DS_Q2_K,  DS_Q3_K, DS_IQ4_NL,
                                        DS_IQ4_XS, DS_MXFP4, DS_NVFP4, DS_TQ1_0, DS_TQ2_0};
#define N_LOWBIT (int)(sizeof lowbit_types / sizeof lowbit_types[0])

static const char *name_of(ds_dtype t) { return ds_dtype_get(t)->name; }

/* ------------------------------------------------------------------------ */
/* the table                                                                 */

static void test_table_matches_ggml(void) {
    /* ggml_type ids, block elements and bytes of ggml's block_* structs */
    static const struct { ds_dtype t; const char *name; uint32_t gguf; int elems, bytes; } want[] = {
        {DS_Q4_1, "q4_1", 3, 32, 20},      {DS_Q5_0, "q5_0", 6, 32, 22},       {DS_Q5_1, "q5_1", 7, 32, 24},
        {DS_Q2_K, "q2_k", 10, 256, 84},    {DS_Q3_K, "q3_k", 11, 256, 110},    {DS_IQ4_NL, "iq4_nl", 20, 32, 18},
        {DS_IQ4_XS, "iq4_xs", 23, 256, 136}, {DS_MXFP4, "mxfp4", 39, 32, 17}, {DS_NVFP4, "nvfp4", 40, 64, 36},
        {DS_TQ1_0, "tq1_0", 34, 256, 54},  {DS_TQ2_0, "tq2_0", 35, 256, 66},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ds_dtype_info *info = ds_dtype_get(want[i].t);
        REQUIRE(info != NULL, "%s", want[i].name);
        CHECK(strcmp(info->name, want[i].name) == 0, "%s vs %s", info->name, want[i].name);
        CHECK(info->gguf_type == want[i].gguf, "%s gguf %u", want[i].name, info->gguf_type);
        CHECK(info->block_elems == want[i].elems && info->block_bytes == want[i].bytes, "%s block %d/%d",
              want[i].name, info->block_elems, info->block_bytes);
        ds_dtype t = DS_DTYPE_COUNT;
        CHECK(ds_dtype_from_gguf(want[i].gguf, &t) == 0 && t == want[i].t, "gguf %u", want[i].gguf);
    }
    /* field offsets that the on-disk layout fixes */
    CHECK(offsetof(ds_block_q2_K, d) == 80 && offsetof(ds_block_q2_K, dmin) == 82, "q2_K scales at the end");
    CHECK(offsetof(ds_block_q3_K, scales) == 96 && offsetof(ds_block_q3_K, d) == 108, "q3_K layout");
    CHECK(offsetof(ds_block_iq4_xs, scales_l) == 4 && offsetof(ds_block_iq4_xs, qs) == 8, "iq4_xs layout");
    CHECK(offsetof(ds_block_tq1_0, qh) == 48 && offsetof(ds_block_tq1_0, d) == 52, "tq1_0 layout");
    CHECK(offsetof(ds_block_tq2_0, d) == 64, "tq2_0 layout");
    CHECK(offsetof(ds_block_nvfp4, qs) == 4, "nvfp4 layout");
}

/* ------------------------------------------------------------------------ */
/* hand-built blocks (values worked out from the format definitions)         */

#define F16_HALF 0x3800u
#define F16_MINUS_ONE 0xBC00u
#define F16_TWO 0x4000u

static void test_q4_1_q5_hand_blocks(void) {
    ds_block_q4_1 a = {.d = F16_HALF, .m = F16_MINUS_ONE};
    for (int i = 0; i < 16; i++) a.qs[i] = (uint8_t)(i | (15 - i) << 4);
    float y[32];
    ds_dequantize_row(DS_Q4_1, &a, y, 32);
    for (int i = 0; i < 16; i++) {
        CHECK(y[i] == 0.5f * i - 1.0f, "q4_1 element %d: %g", i, y[i]);
        CHECK(y[i + 16] == 0.5f * (15 - i) - 1.0f, "q4_1 element %d: %g", i + 16, y[i + 16]);
    }
    /* q5: the fifth bit of element j is bit j of the little-endian qh */
    ds_block_q5_0 b = {.d = F16_TWO, .qh = {0x01, 0x00, 0x01, 0x80}};
    memset(b.qs, 0x00, sizeof b.qs);
    ds_dequantize_row(DS_Q5_0, &b, y, 32);
    CHECK(y[0] == 0.0f && y[16] == 0.0f && y[31] == 0.0f, "q5_0 high bits: %g %g %g", y[0], y[16], y[31]);
    CHECK(y[1] == -32.0f && y[17] == -32.0f, "q5_0 clear high bits: %g %g", y[1], y[17]);
    ds_block_q5_1 c = {.d = F16_HALF, .m = F16_MINUS_ONE, .qh = {0x00, 0x00, 0x00, 0x80}};
    memset(c.qs, 0xFF, sizeof c.qs);
    ds_dequantize_row(DS_Q5_1, &c, y, 32);
    CHECK(y[31] == 0.5f * 31 - 1.0f && y[30] == 0.5f * 15 - 1.0f, "q5_1: %g %g", y[31], y[30]);
}

static void test_k_hand_blocks(void) {
    /* q2_K: sub-block j has scale code j % 16 and min code 15 - j; element
     * levels cycle 0..3 by their position in the qs byte */
    ds_block_q2_K a = {.d = F16_HALF, .dmin = F16_TWO};
    for (int j = 0; j < 16; j++) a.scales[j] = (uint8_t)(j | (15 - j) << 4);
    for (int i = 0; i < 64; i++) a.qs[i] = 0xE4; /* levels 0, 1, 2, 3 at bits 0, 2, 4, 6 */
    float y[256];
    ds_dequantize_row(DS_Q2_K, &a, y, 256);
    for (int e = 0; e < 256; e++) {
        const int level = (e % 128) / 32, j = e / 16;
        const float want = 0.5f * j * level - 2.0f * (15 - j);
        CHECK(y[e] == want, "q2_K element %d: %g, want %g", e, y[e], want);
    }
    /* q3_K: 6-bit scale codes 0, 63, 32, 33, ... (all four top-bit patterns);
     * hmask set for the second 128 elements only */
    ds_block_q3_K b = {.d = F16_HALF};
    static const int codes[16] = {0, 63, 32, 33, 17, 48, 5, 40, 1, 62, 31, 16, 47, 15, 50, 2};
    memset(b.scales, 0, sizeof b.scales);
    for (int j = 0; j < 16; j++) {
        b.scales[j % 8] |= (uint8_t)((codes[j] & 0xF) << (j < 8 ? 0 : 4));
        b.scales[8 + j % 4] |= (uint8_t)((codes[j] >> 4) << (2 * (j / 4)));
    }
    memset(b.qs, 0xE4, sizeof b.qs);
    memset(b.hmask, 0xF0, sizeof b.hmask); /* bits 4..7: the half at 128..255 */
    ds_dequantize_row(DS_Q3_K, &b, y, 256);
    for (int e = 0; e < 256; e++) {
        const int level = (e % 128) / 32 - (e < 128 ? 4 : 0);
        const float want = 0.5f * (codes[e / 16] - 32) * level;
        CHECK(y[e] == want, "q3_K element %d: %g, want %g", e, y[e], want);
    }
}

static void test_iq4_hand_blocks(void) {
    static const int book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    ds_block_iq4_nl a = {.d = F16_HALF};
    for (int i = 0; i < 16; i++) a.qs[i] = (uint8_t)(i | (15 - i) << 4);
    float y[256];
    ds_dequantize_row(DS_IQ4_NL, &a, y, 32);
    for (int i = 0; i < 16; i++)
        CHECK(y[i] == 0.5f * book[i] && y[i + 16] == 0.5f * book[15 - i], "iq4_nl %d: %g %g", i, y[i], y[i + 16]);
    /* iq4_xs: sub-block codes 0, 63, 32, 47, 16, 1, 62, 33 (scale minus 32) */
    static const int codes[8] = {0, 63, 32, 47, 16, 1, 62, 33};
    ds_block_iq4_xs b = {.d = F16_TWO};
    for (int j = 0; j < 8; j++) {
        b.scales_l[j / 2] |= (uint8_t)((codes[j] & 0xF) << (4 * (j % 2)));
        b.scales_h |= (uint16_t)((codes[j] >> 4) << (2 * j));
    }
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)((i % 16) | (15 - i % 16) << 4);
    ds_dequantize_row(DS_IQ4_XS, &b, y, 256);
    for (int e = 0; e < 256; e++) {
        const int l = e % 32, code = l < 16 ? l : 15 - (l - 16);
        const float want = 2.0f * (codes[e / 32] - 32) * book[code];
        CHECK(y[e] == want, "iq4_xs element %d: %g, want %g", e, y[e], want);
    }
}

static void test_fp4_hand_blocks(void) {
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    float y[64];
    /* mxfp4: E8M0 e is 2^(e-127); the element is e2m1 * that */
    static const uint8_t exps[] = {127, 0, 1, 2, 130, 254};
    for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
        ds_block_mxfp4 a = {.e = exps[k]};
        for (int i = 0; i < 16; i++) a.qs[i] = (uint8_t)(i | (15 - i) << 4);
        ds_dequantize_row(DS_MXFP4, &a, y, 32);
        const double scale = ldexp(1.0, exps[k] - 127);
        for (int i = 0; i < 32; i++) {
            const int code = i < 16 ? i : 15 - (i - 16);
            const double want = (code < 8 ? 1 : -1) * e2m1[code % 8] * scale;
            if (fabs(want) > FLT_MAX) continue; /* e = 254 with the large magnitudes */
            CHECK(y[i] == (float)want, "mxfp4 e=%d element %d: %g want %g", exps[k], i, y[i], want);
        }
    }
    /* nvfp4: UE4M3 scales per 16: 0x38 = 1.0, 0x01 = 2^-9 (subnormal),
     * 0x7F = NaN read as 0, 0x7E = 448 */
    ds_block_nvfp4 b = {.d = {0x38, 0x01, 0x7F, 0x7E}};
    for (int i = 0; i < 32; i++) b.qs[i] = 0x7F; /* low nibble (first 8 of each 16) -6, high nibble +6 */
    ds_dequantize_row(DS_NVFP4, &b, y, 64);
    static const float scales[4] = {1.0f, 1.0f / 512, 0.0f, 448.0f};
    for (int e = 0; e < 64; e++) {
        const float want = ((e % 16) < 8 ? -6.0f : 6.0f) * scales[e / 16];
        CHECK(y[e] == want, "nvfp4 element %d: %g want %g", e, y[e], want);
    }
}

/* A tq1_0 byte holding trits t[0..n) (most significant first), as the format
 * defines it: the base-3 number as a fraction of 3^5, scaled to 256 and rounded up. */
static uint8_t trit_byte(const int *t, int n) {
    int v = 0;
    for (int k = 0; k < 5; k++) v = v * 3 + (k < n ? t[k] : 0);
    return (uint8_t)((v * 256 + 242) / 243);
}

static void test_ternary_hand_blocks(void) {
    int trits[256];
    for (int e = 0; e < 256; e++) trits[e] = (e * 7 + e / 5) % 3;
    ds_block_tq1_0 a = {.d = F16_TWO};
    for (int m = 0; m < 32; m++) {
        const int t[5] = {trits[m], trits[m + 32], trits[m + 64], trits[m + 96], trits[m + 128]};
        a.qs[m] = trit_byte(t, 5);
    }
    for (int m = 0; m < 16; m++) {
        const int t[5] = {trits[160 + m], trits[176 + m], trits[192 + m], trits[208 + m], trits[224 + m]};
        a.qs[32 + m] = trit_byte(t, 5);
    }
    for (int j = 0; j < 4; j++) {
        const int t[4] = {trits[240 + j], trits[244 + j], trits[248 + j], trits[252 + j]};
        a.qh[j] = trit_byte(t, 4);
    }
    float y[256];
    ds_dequantize_row(DS_TQ1_0, &a, y, 256);
    for (int e = 0; e < 256; e++) CHECK(y[e] == 2.0f * (trits[e] - 1), "tq1_0 element %d: %g", e, y[e]);
    ds_block_tq2_0 b = {.d = F16_HALF};
    for (int e = 0; e < 256; e++) b.qs[32 * (e / 128) + e % 32] |= (uint8_t)(trits[e] << (2 * ((e % 128) / 32)));
    ds_dequantize_row(DS_TQ2_0, &b, y, 256);
    for (int e = 0; e < 256; e++) CHECK(y[e] == 0.5f * (trits[e] - 1), "tq2_0 element %d: %g", e, y[e]);
}

/* ------------------------------------------------------------------------ */
/* round trips                                                               */

typedef struct {
    ds_dtype t;
    double gauss_bound;  /* zero-mean gaussian rows, sigma 1 */
    double skewed_bound; /* sigma 0.02, mean 0.015, 1% outliers */
} rmse_bound;

/* Relative RMS error (RMS of y - x over RMS of x), measured with --stats at
 * n = 4096 (gaussian / skewed): q4_1 0.0785 / 0.0761, q5_0 0.0428 / 0.0536,
 * q5_1 0.0379 / 0.0370, q2_K 0.266 / 0.239, q3_K 0.144 / 0.162,
 * iq4_nl 0.0751 / 0.0862, iq4_xs 0.0757 / 0.0875, mxfp4 0.112 / 0.125,
 * nvfp4 0.0859 / 0.0928, tq1_0 and tq2_0 0.806 / 0.856 (d = the block's
 * largest magnitude, as in llama.cpp's reference quantiser: most elements of
 * a gaussian row fall to zero). The bounds leave about 10% of headroom (more
 * for short rows): a broken layout lands near 1 or above. */
static const rmse_bound rmse_bounds[] = {
    {DS_Q4_1, 0.087, 0.085},   {DS_Q5_0, 0.048, 0.060},   {DS_Q5_1, 0.042, 0.041}, {DS_Q2_K, 0.295, 0.265},
    {DS_Q3_K, 0.16, 0.18},     {DS_IQ4_NL, 0.084, 0.096}, {DS_IQ4_XS, 0.084, 0.097},
    {DS_MXFP4, 0.125, 0.14},   {DS_NVFP4, 0.096, 0.104},  {DS_TQ1_0, 0.88, 0.93},  {DS_TQ2_0, 0.88, 0.93},
};

static void test_roundtrip_error_bounds(void) {
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const rmse_bound *b = &rmse_bounds[k];
        const int be = ds_dtype_get(b->t)->block_elems;
        const int64_t lengths[] = {be, 3 * be, 4096};
        for (int li = 0; li < 3; li++) {
            const int64_t n = lengths[li];
            const int rows = n < 1024 ? 32 : 4;
            const double g = roundtrip_rel_rmse(b->t, n, rows, 1.0, 0.0, 0, 100 + (uint64_t)li);
            const double s = roundtrip_rel_rmse(b->t, n, rows, 0.02, 0.015, 1, 200 + (uint64_t)li);
            CHECK(g < b->gauss_bound, "%s n=%lld gaussian: rel rmse %.5f >= %.5f", name_of(b->t), (long long)n, g,
                  b->gauss_bound);
            CHECK(s < b->skewed_bound, "%s n=%lld skewed: rel rmse %.5f >= %.5f", name_of(b->t), (long long)n, s,
                  b->skewed_bound);
        }
    }
}

/* The bounds hold whatever the magnitude while the scales stay in range
 * (nvfp4 has no scale beyond its UE4M3 ones: 2^-10 to 224 per element step). */
static void test_roundtrip_magnitudes(void) {
    static const double sigmas[] = {0.01, 30.0, 1000.0};
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const rmse_bound *b = &rmse_bounds[k];
        for (int si = 0; si < 3; si++) {
            const double sigma = b->t == DS_NVFP4 ? sigmas[si] / 10 + 0.1 : sigmas[si];
            const double e = roundtrip_rel_rmse(b->t, 1024, 8, sigma, 0.0, 0, 300 + (uint64_t)si);
            CHECK(e < b->gauss_bound, "%s sigma=%g: rel rmse %.5f", name_of(b->t), sigma, e);
        }
    }
}

/* Quantising a decoded row gives back the same bytes, for the formats whose
 * scales can be recovered from the values they decode to. */
static void test_idempotent_roundtrip(void) {
    static const ds_dtype types[] = {DS_Q4_1, DS_Q5_0, DS_Q5_1, DS_IQ4_NL, DS_TQ1_0, DS_TQ2_0};
    enum { N = 2048 };
    float x[N], y[N];
    uint8_t q1[N], q2[N];
    rng r = {21};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const ds_dtype t = types[k];
        const size_t bytes = ds_dtype_row_bytes(t, N);
        for (int row = 0; row < 6; row++) {
            static const double sigmas[6] = {1.0, 0.02, 0.001, 40.0, 3000.0, 0.5};
            fill_row(&r, x, N, sigmas[row], row == 5 ? 0.3 : 0.0, row >= 4);
            ds_quantize_row(t, x, q1, N);
            ds_dequantize_row(t, q1, y, N);
            ds_quantize_row(t, y, q2, N);
            size_t first = bytes;
            for (size_t i = 0; i < bytes && first == bytes; i++)
                if (q1[i] != q2[i]) first = i;
            CHECK(first == bytes, "%s row %d: byte %zu differs (%02x then %02x)", name_of(t), row, first,
                  first < bytes ? q1[first] : 0, first < bytes ? q2[first] : 0);
        }
    }
}

/* Blocks are quantised on their own: a row quantised whole or block by block
 * (as threads split rows) gives the same bytes, and twice the same. */
static void test_blocks_independent_and_deterministic(void) {
    enum { N = 1024 };
    float x[N];
    uint8_t whole[N], parts[N], again[N];
    rng r = {5};
    fill_row(&r, x, N, 0.7, 0.1, 1);
    for (int k = 0; k < N_LOWBIT; k++) {
        const ds_dtype t = lowbit_types[k];
        const ds_dtype_info *info = ds_dtype_get(t);
        memset(whole, 0x55, sizeof whole);
        memset(parts, 0xAA, sizeof parts);
        ds_quantize_row(t, x, whole, N);
        ds_quantize_row(t, x, again, N);
        for (int b = 0; b < N / info->block_elems; b++)
            ds_quantize_row(t, x + b * info->block_elems, parts + b * info->block_bytes, info->block_elems);
        const size_t bytes = ds_dtype_row_bytes(t, N);
        CHECK(memcmp(whole, parts, bytes) == 0, "%s: block by block differs", info->name);
        CHECK(memcmp(whole, again, bytes) == 0, "%s: a second run differs", info->name);
    }
}

/* Quantising finite input never yields inf or NaN, at any magnitude, and
 * signs survive saturation. */
static void test_extreme_magnitudes_stay_finite(void) {
    static const double sigmas[] = {1e-38, 1e-30, 1e-8, 1e-5, 1e5, 1e8, 1e30, 1e38};
    enum { N = 512, CASES = sizeof sigmas / sizeof sigmas[0] + 2 };
    float x[N], y[N];
    uint8_t q[N * 4];
    rng r = {7};
    for (int k = 0; k < N_LOWBIT; k++) {
        const ds_dtype t = lowbit_types[k];
        for (size_t c = 0; c < CASES; c++) {
            if (c < sizeof sigmas / sizeof sigmas[0]) {
                fill_row(&r, x, N, sigmas[c], 0.0, 1);
            } else if (c == CASES - 2) { /* the largest finite floats, both signs, a subnormal mixed in */
                for (int i = 0; i < N; i++) x[i] = (i % 3 == 0) ? -FLT_MAX : (i % 3 == 1) ? FLT_MAX : 1e-45f;
            } else { /* tiny and huge in one block */
                for (int i = 0; i < N; i++) x[i] = (i % 5 == 0) ? 3e38f * (i % 2 ? 1 : -1) : 1e-40f * (i % 7);
            }
            memset(q, 0, sizeof q);
            ds_quantize_row(t, x, q, N);
            ds_dequantize_row(t, q, y, N);
            int bad = -1;
            for (int i = 0; i < N && bad < 0; i++)
                if (!isfinite(y[i])) bad = i;
            CHECK(bad < 0, "%s case %zu: element %d decodes to %g", name_of(t), c, bad, bad >= 0 ? y[bad] : 0.0);
            if (c == CASES - 2)
                CHECK(y[1] > 0 && y[0] < 0, "%s saturated signs: %g %g", name_of(t), y[0], y[1]);
        }
    }
}

static void test_zero_and_constant_blocks(void) {
    static const float constants[] = {0.7f, -3.2f, 25.0f, -1000.0f, 0.001f};
    enum { N = 512 };
    float x[N], y[N];
    uint8_t q[N * 4];
    for (int k = 0; k < N_LOWBIT; k++) {
        const ds_dtype t = lowbit_types[k];
        for (int i = 0; i < N; i++) x[i] = 0.0f;
        memset(q, 0xAB, sizeof q);
        ds_quantize_row(t, x, q, N);
        for (int i = 0; i < N; i++) y[i] = 1.0f;
        ds_dequantize_row(t, q, y, N);
        int nonzero = 0;
        for (int i = 0; i < N; i++) nonzero += y[i] != 0.0f;
        CHECK(nonzero == 0, "%s: %d elements of a zero row decode non-zero", name_of(t), nonzero);
        /* a constant row decodes to one value everywhere; the fp4 formats
         * can only get within their grid's relative spacing of it */
        const double tolerance = t == DS_MXFP4 || t == DS_NVFP4 ? 0.2 : 0.005;
        for (size_t c = 0; c < sizeof constants / sizeof constants[0]; c++) {
            if (t == DS_NVFP4 && fabsf(constants[c]) < 0.01f) continue; /* below its smallest scale */
            for (int i = 0; i < N; i++) x[i] = constants[c];
            ds_quantize_row(t, x, q, N);
            ds_dequantize_row(t, q, y, N);
            int uneven = 0;
            for (int i = 1; i < N; i++) uneven += y[i] != y[0];
            CHECK(uneven == 0, "%s %g: %d elements differ from the first", name_of(t), constants[c], uneven);
            const double rel = fabs((double)y[0] - constants[c]) / fabs(constants[c]);
            CHECK(rel < tolerance, "%s %g decodes to %.8g (rel error %.5f)", name_of(t), constants[c], y[0], rel);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* --dump and --stats modes                                                  */

enum { DUMP_N = 1024, DUMP_QUANT_ROWS = 4, DUMP_RANDOM_ROWS = 8, DUMP_EDGE_ROWS = 2 };

/* A finite fp16: zero (either sign), a subnormal, the largest, or random. */
static uint16_t random_f16(rng *r) {
    const uint64_t bits = rng_next(r);
    const uint16_t sign = (uint16_t)((bits & 1) << 15);
    switch ((bits >> 1) % 16) {
    case 0: return sign;
    case 1: return (uint16_t)(sign | (1 + (bits >> 8) % 0x3FF));
    case 2: return (uint16_t)(sign | 0x7BFF);
    default: return (uint16_t)(sign | ((bits >> 8) % 0x7C00)); /* exponent field 0..30 */
    }
}

/* Byte offsets of a type's fp16 scale fields (up to two). */
static int f16_fields(ds_dtype t, size_t *off) {
    switch (t) {
    case DS_Q4_1: off[0] = offsetof(ds_block_q4_1, d), off[1] = offsetof(ds_block_q4_1, m); return 2;
    case DS_Q5_1: off[0] = offsetof(ds_block_q5_1, d), off[1] = offsetof(ds_block_q5_1, m); return 2;
    case DS_Q2_K: off[0] = offsetof(ds_block_q2_K, d), off[1] = offsetof(ds_block_q2_K, dmin); return 2;
    case DS_Q5_0: case DS_IQ4_NL: case DS_IQ4_XS: off[0] = 0; return 1;
    case DS_Q3_K: off[0] = offsetof(ds_block_q3_K, d); return 1;
    case DS_TQ1_0: off[0] = offsetof(ds_block_tq1_0, d); return 1;
    case DS_TQ2_0: off[0] = offsetof(ds_block_tq2_0, d); return 1;
    default: return 0;
    }
}

/* Random block bytes with scale fields that decode finite: every fp16 but
 * inf and NaN; E8M0 exponents whose products stay below FLT_MAX (above 252
 * only with the small E2M1 magnitudes); any UE4M3 byte (all are finite).
 * edge picks the extremes: zero, subnormal and largest scales, e = 0..2 and
 * 252..255, the UE4M3 codes 0x00, 0x01, 0x7E, 0x7F, 0x80, 0xFF. */
static void random_block(rng *r, ds_dtype t, uint8_t *blk, int edge, int index) {
    const ds_dtype_info *info = ds_dtype_get(t);
    for (int i = 0; i < info->block_bytes; i++) blk[i] = (uint8_t)rng_next(r);
    size_t off[2];
    const int nf = f16_fields(t, off);
    for (int f = 0; f < nf; f++) {
        static const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x0400, 0x3C00};
        const uint16_t h = edge ? edges[(index + 3 * f) % 8] : random_f16(r);
        memcpy(blk + off[f], &h, 2);
    }
    if (t == DS_MXFP4) {
        static const uint8_t edges[] = {0, 1, 2, 252, 253, 254, 255, 127};
        const uint8_t e = edge ? edges[index % 8] : (uint8_t)(rng_next(r) % 253);
        blk[0] = e;
        /* above 252 keep |E2M1| small enough: 3 * 2^126 and 1 * 2^127 are finite */
        const uint8_t mask = e == 255 ? 0x99 : e >= 253 ? 0xBB : 0xFF;
        for (int i = 1; i < info->block_bytes; i++) blk[i] &= mask;
    }
    if (t == DS_NVFP4 && edge) {
        static const uint8_t edges[] = {0x00, 0x01, 0x7E, 0x7F, 0x80, 0xFF, 0x08, 0x07};
        for (int s = 0; s < 4; s++) blk[s] = edges[(index * 4 + s) % 8];
    }
}

static int dump_reference_rows(const char *dir) {
    enum { ROWS = DUMP_QUANT_ROWS + DUMP_RANDOM_ROWS + DUMP_EDGE_ROWS };
    for (int k = 0; k < N_LOWBIT; k++) {
        const ds_dtype t = lowbit_types[k];
        const ds_dtype_info *info = ds_dtype_get(t);
        const size_t row_bytes = ds_dtype_row_bytes(t, DUMP_N);
        const int blocks_per_row = DUMP_N / info->block_elems;
        uint8_t *bytes = malloc(row_bytes * ROWS);
        float *decoded = malloc(sizeof(float) * DUMP_N * ROWS);
        float x[DUMP_N];
        rng r = {2000 + (uint64_t)k};
        for (int row = 0; row < ROWS; row++) {
            uint8_t *out = bytes + (size_t)row * row_bytes;
            if (row < DUMP_QUANT_ROWS) {
                static const double sigmas[DUMP_QUANT_ROWS] = {1.0, 0.01, 300.0, 0.05};
                fill_row(&r, x, DUMP_N, sigmas[row], row == 3 ? 0.04 : 0.0, row >= 2);
                if (row == 3) /* a zero block and a negative constant block */
                    for (int i = 0; i < DUMP_N / 2; i++) x[i] = i < DUMP_N / 4 ? 0.0f : -0.3f;
                ds_quantize_row(t, x, out, DUMP_N);
            } else {
                const int edge = row >= DUMP_QUANT_ROWS + DUMP_RANDOM_ROWS;
                for (int b = 0; b < blocks_per_row; b++)
                    random_block(&r, t, out + (size_t)b * info->block_bytes, edge, b);
            }
            ds_dequantize_row(t, out, decoded + (size_t)row * DUMP_N, DUMP_N);
        }
        const int failed = write_file(dir, info->name, "bin", bytes, row_bytes * ROWS) ||
                           write_file(dir, info->name, "f32", decoded, sizeof(float) * DUMP_N * ROWS);
        free(bytes);
        free(decoded);
        if (failed) return 1;
    }
    return 0;
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void print_stats(void) {
    enum { N = 1 << 16 };
    float *x = malloc(sizeof(float) * N);
    uint8_t *q = malloc(N * 2);
    rng r = {3};
    fill_row(&r, x, N, 0.02, 0.0, 1);
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const ds_dtype t = rmse_bounds[k].t;
        int reps = 0;
        const double start = seconds_now();
        do {
            ds_quantize_row(t, x, q, N);
            reps++;
        } while (seconds_now() - start < 0.3);
        const double rate = (double)N * reps / (seconds_now() - start) / 1e6;
        printf("%-6s gaussian %.4f  skewed %.4f  (n=4096, relative rmse)  quantise %.1f M elements/s\n", name_of(t),
               roundtrip_rel_rmse(t, 4096, 16, 1.0, 0.0, 0, 1), roundtrip_rel_rmse(t, 4096, 16, 0.02, 0.015, 1, 2),
               rate);
    }
    free(x);
    free(q);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump_reference_rows(argv[2]);
    if (argc == 2 && strcmp(argv[1], "--stats") == 0) {
        print_stats();
        return 0;
    }
    RUN(test_table_matches_ggml);
    RUN(test_q4_1_q5_hand_blocks);
    RUN(test_k_hand_blocks);
    RUN(test_iq4_hand_blocks);
    RUN(test_fp4_hand_blocks);
    RUN(test_ternary_hand_blocks);
    RUN(test_roundtrip_error_bounds);
    RUN(test_roundtrip_magnitudes);
    RUN(test_idempotent_roundtrip);
    RUN(test_blocks_independent_and_deterministic);
    RUN(test_extreme_magnitudes_stay_finite);
    RUN(test_zero_and_constant_blocks);
    return ds_test_finish();
}
