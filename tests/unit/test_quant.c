/* test_quant.c - the dtype table and the scalar reference (de)quantisers:
 * hand-built blocks of every format, round-trip error bounds, exhaustive
 * fp16/bf16 round trips, degenerate blocks and extreme magnitudes.
 *
 * `test_quant --dump DIR` instead writes, per dtype, DIR/<name>.bin (rows
 * from ds_quantize_row plus one row of random block bytes) and DIR/<name>.f32
 * (their ds_dequantize_row output), which tests/reference/test_quants_ref.py
 * decodes independently with numpy and compares bit for bit.
 * `test_quant --stats` prints the measured round-trip errors. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "kernels/dtype.h"
#include "quant_testing.h"
#include "testing.h"

static const ds_dtype quant_types[] = {DS_Q8_0, DS_Q4_0, DS_Q4_K, DS_Q5_K, DS_Q6_K};
#define N_QUANT_TYPES (int)(sizeof quant_types / sizeof quant_types[0])

static int block_elems(ds_dtype t) { return ds_dtype_get(t)->block_elems; }

/* ------------------------------------------------------------------------ */
/* (e) the table                                                             */

static void test_row_bytes_table(void) {
    CHECK(ds_dtype_row_bytes(DS_F32, 10) == 40, "f32");
    CHECK(ds_dtype_row_bytes(DS_F16, 10) == 20, "f16");
    CHECK(ds_dtype_row_bytes(DS_BF16, 6) == 12, "bf16");
    CHECK(ds_dtype_row_bytes(DS_Q8_0, 64) == 68, "q8_0");
    CHECK(ds_dtype_row_bytes(DS_Q4_0, 96) == 54, "q4_0");
    CHECK(ds_dtype_row_bytes(DS_Q4_K, 512) == 288, "q4_k");
    CHECK(ds_dtype_row_bytes(DS_Q5_K, 256) == 176, "q5_k");
    CHECK(ds_dtype_row_bytes(DS_Q6_K, 768) == 630, "q6_k");
    CHECK(ds_dtype_row_bytes(DS_Q6_K, 4096) == 16 * 210, "q6_k 4096");
    CHECK(ds_dtype_get(DS_DTYPE_COUNT) == NULL, "out of range type has no info");
}

static void test_names_and_gguf_ids(void) {
    static const struct { const char *name; ds_dtype t; uint32_t gguf; int elems; } want[] = {
        {"f32", DS_F32, 0, 1},      {"f16", DS_F16, 1, 1},     {"bf16", DS_BF16, 30, 1},
        {"q8_0", DS_Q8_0, 8, 32},   {"q4_0", DS_Q4_0, 2, 32},  {"q4_k", DS_Q4_K, 12, 256},
        {"q5_k", DS_Q5_K, 13, 256}, {"q6_k", DS_Q6_K, 14, 256},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ds_dtype_info *info = ds_dtype_get(want[i].t);
        REQUIRE(info != NULL, "%s", want[i].name);
        CHECK(strcmp(info->name, want[i].name) == 0, "%s vs %s", info->name, want[i].name);
        CHECK(info->gguf_type == want[i].gguf, "%s gguf %u", want[i].name, info->gguf_type);
        CHECK(info->block_elems == want[i].elems, "%s block %d", want[i].name, info->block_elems);
        ds_dtype t = DS_DTYPE_COUNT;
        CHECK(ds_dtype_from_name(want[i].name, &t) == 0 && t == want[i].t, "parse %s", want[i].name);
        t = DS_DTYPE_COUNT;
        CHECK(ds_dtype_from_gguf(want[i].gguf, &t) == 0 && t == want[i].t, "gguf %u", want[i].gguf);
    }
    ds_dtype t = DS_F32;
    CHECK(ds_dtype_from_name("Q4_K", &t) == 0 && t == DS_Q4_K, "upper case");
    CHECK(ds_dtype_from_name("BF16", &t) == 0 && t == DS_BF16, "upper case bf16");
    CHECK(ds_dtype_from_name("Q8_0", &t) == 0 && t == DS_Q8_0, "upper case q8_0");
    CHECK(ds_dtype_from_name("q4", &t) != 0, "prefix is not a name");
    CHECK(ds_dtype_from_name("q4_k_m", &t) != 0, "longer is not a name");
    CHECK(ds_dtype_from_name("", &t) != 0, "empty");
    CHECK(ds_dtype_from_gguf(9, &t) != 0, "q8_1 (an activation type) is not read");
    CHECK(ds_dtype_from_gguf(1000, &t) != 0, "unknown id");
}

/* ------------------------------------------------------------------------ */
/* (a) hand-built blocks                                                     */

/* fp16 bit patterns of the scales used below (all exactly representable) */
#define F16_QUARTER 0x3400u
#define F16_HALF 0x3800u
#define F16_MINUS_TWO 0xC000u

static void test_q8_0_hand_block(void) {
    ds_block_q8_0 blk;
    blk.d = F16_HALF;
    for (int i = 0; i < 32; i++) blk.qs[i] = (int8_t)(i == 0 ? -128 : -127 + 8 * i);
    float y[32];
    ds_dequantize_row(DS_Q8_0, &blk, y, 32);
    for (int i = 0; i < 32; i++) {
        const float want = 0.5f * (i == 0 ? -128 : -127 + 8 * i);
        CHECK(y[i] == want, "element %d: %g, want %g", i, y[i], want);
    }
}

static void test_q4_0_hand_block(void) {
    ds_block_q4_0 blk;
    blk.d = F16_MINUS_TWO;
    /* byte i: element i in the low nibble, element i+16 in the high nibble */
    for (int i = 0; i < 16; i++) blk.qs[i] = (uint8_t)(i | ((15 - i) << 4));
    float y[32];
    ds_dequantize_row(DS_Q4_0, &blk, y, 32);
    for (int i = 0; i < 16; i++) {
        CHECK(y[i] == -2.0f * (i - 8), "element %d: %g", i, y[i]);
        CHECK(y[i + 16] == -2.0f * (15 - i - 8), "element %d: %g", i + 16, y[i + 16]);
    }
}

/* Sub-block scales and mins chosen so that sub-blocks 4..7 need their top two
 * bits (all four 2-bit patterns appear), and their packed form, worked out by
 * hand from the format: bytes 0..3 = sc[j] | (sc[j+4]>>4)<<6, bytes 4..7 =
 * m[j] | (m[j+4]>>4)<<6, bytes 8..11 = (sc[j+4]&15) | (m[j+4]&15)<<4. */
static const int hand_sc[8] = {1, 5, 17, 63, 33, 47, 20, 60};
static const int hand_m[8] = {0, 2, 63, 9, 48, 17, 31, 58};
static const uint8_t hand_packed_scales[12] = {0x81, 0x85, 0x51, 0xFF, 0xC0, 0x42,
                                               0x7F, 0xC9, 0x01, 0x1F, 0xF4, 0xAC};

/* Element i of a k-quant super-block lives in 64-element group i/64; the first
 * 32 of a group are low nibbles of bytes 32*group.., the next 32 high nibbles. */
static void k_put_nibble(uint8_t *qs, int i, int level) {
    const int group = i / 64, pos = i % 64;
    uint8_t *byte = &qs[32 * group + pos % 32];
    if (pos < 32) *byte = (uint8_t)((*byte & 0xF0) | (level & 0xF));
    else *byte = (uint8_t)((*byte & 0x0F) | ((level & 0xF) << 4));
}

static void test_q4_K_hand_block(void) {
    ds_block_q4_K blk;
    memset(&blk, 0, sizeof blk);
    blk.d = F16_HALF;
    blk.dmin = F16_QUARTER;
    memcpy(blk.scales, hand_packed_scales, 12);
    int levels[256];
    for (int i = 0; i < 256; i++) {
        levels[i] = (i * 7 + i / 32) % 16;
        k_put_nibble(blk.qs, i, levels[i]);
    }
    float y[256];
    ds_dequantize_row(DS_Q4_K, &blk, y, 256);
    for (int i = 0; i < 256; i++) {
        const int sub = i / 32;
        const float want = 0.5f * hand_sc[sub] * levels[i] - 0.25f * hand_m[sub];
        CHECK(y[i] == want, "element %d (sub-block %d): %g, want %g", i, sub, y[i], want);
    }
}

static void test_q5_K_hand_block(void) {
    ds_block_q5_K blk;
    memset(&blk, 0, sizeof blk);
    blk.d = F16_HALF;
    blk.dmin = F16_QUARTER;
    memcpy(blk.scales, hand_packed_scales, 12);
    int levels[256];
    for (int i = 0; i < 256; i++) {
        levels[i] = (i * 11 + i / 64) % 32;
        k_put_nibble(blk.qs, i, levels[i]);
        /* the fifth bit of element l of sub-block s is bit s of qh[l] */
        if (levels[i] & 16) blk.qh[i % 32] |= (uint8_t)(1u << (i / 32));
    }
    float y[256];
    ds_dequantize_row(DS_Q5_K, &blk, y, 256);
    for (int i = 0; i < 256; i++) {
        const int sub = i / 32;
        const float want = 0.5f * hand_sc[sub] * levels[i] - 0.25f * hand_m[sub];
        CHECK(y[i] == want, "element %d (sub-block %d): %g, want %g", i, sub, y[i], want);
    }
}

static void test_q6_K_hand_block(void) {
    static const int8_t scales[16] = {-128, 127, 3, -7, 1, -1, 64, -64, 100, 2, -3, 5, 0, 9, -50, 33};
    ds_block_q6_K blk;
    memset(&blk, 0, sizeof blk);
    blk.d = F16_QUARTER;
    memcpy(blk.scales, scales, 16);
    int levels[256];
    for (int i = 0; i < 256; i++) {
        levels[i] = (i * 13 + 5) % 64;
        /* element i: half i/128, run k of 32 within it, position l in the run.
         * Runs 0,1 are low nibbles and runs 2,3 high nibbles of ql[l] (runs
         * 0,2) or ql[l+32] (runs 1,3); the top two bits sit at bit 2k of qh[l]. */
        const int half = i / 128, run = (i % 128) / 32, l = i % 32;
        uint8_t *low = &blk.ql[64 * half + l + 32 * (run & 1)];
        if (run < 2) *low = (uint8_t)(*low | (levels[i] & 0xF));
        else *low = (uint8_t)(*low | ((levels[i] & 0xF) << 4));
        blk.qh[32 * half + l] |= (uint8_t)((levels[i] >> 4) << (2 * run));
    }
    float y[256];
    ds_dequantize_row(DS_Q6_K, &blk, y, 256);
    for (int i = 0; i < 256; i++) {
        const float want = 0.25f * scales[i / 16] * (levels[i] - 32);
        CHECK(y[i] == want, "element %d (sub-block %d): %g, want %g", i, i / 16, y[i], want);
    }
}

/* Two blocks in a row decode independently (the row walks whole blocks). */
static void test_multi_block_rows(void) {
    ds_block_q4_0 blks[2];
    memset(blks, 0, sizeof blks);
    blks[0].d = F16_HALF;
    blks[1].d = F16_MINUS_TWO;
    for (int i = 0; i < 16; i++) blks[0].qs[i] = blks[1].qs[i] = 0x9A; /* low 10, high 9 */
    float y[64];
    ds_dequantize_row(DS_Q4_0, blks, y, 64);
    CHECK(y[0] == 1.0f && y[16] == 0.5f, "block 0: %g %g", y[0], y[16]);
    CHECK(y[32] == -4.0f && y[48] == -2.0f, "block 1: %g %g", y[32], y[48]);
}

/* ------------------------------------------------------------------------ */
/* (b) round trips                                                           */

typedef struct {
    ds_dtype t;
    double gauss_bound;   /* zero-mean gaussian rows */
    double skewed_bound;  /* rows with a mean and outliers */
} rmse_bound;

/* Measured (see --stats; n=4096, gaussian / skewed): q8_0 0.0054 / 0.0068,
 * q4_0 0.086 / 0.107, q4_k 0.0704 / 0.069, q5_k 0.0348 / 0.0341,
 * q6_k 0.0174 / 0.0204, f16 0.00021, bf16 0.00166. The bounds leave about
 * 10-15% of headroom: a broken layout lands near 1, a quantiser that lost
 * its scale search lands well above them. */
static const rmse_bound rmse_bounds[] = {
    {DS_Q8_0, 0.0065, 0.0078},
    {DS_Q4_0, 0.095, 0.118},
    {DS_Q4_K, 0.077, 0.076},
    {DS_Q5_K, 0.038, 0.038},
    {DS_Q6_K, 0.019, 0.023},
    {DS_F16, 0.00025, 0.00025},
    {DS_BF16, 0.0019, 0.0019},
};

static void test_roundtrip_error_bounds(void) {
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const rmse_bound *b = &rmse_bounds[k];
        const int be = block_elems(b->t) > 1 ? block_elems(b->t) : 32;
        const int64_t lengths[] = {be, 3 * be, 4096};
        for (int li = 0; li < 3; li++) {
            const int64_t n = lengths[li];
            const int rows = n < 1024 ? 32 : 4;
            const double g = roundtrip_rel_rmse(b->t, n, rows, 1.0, 0.0, 0, 100 + (uint64_t)li);
            const double s = roundtrip_rel_rmse(b->t, n, rows, 0.02, 0.015, 1, 200 + (uint64_t)li);
            CHECK(g < b->gauss_bound, "%s n=%lld gaussian: rel rmse %.5f >= %.5f",
                  ds_dtype_get(b->t)->name, (long long)n, g, b->gauss_bound);
            CHECK(s < b->skewed_bound, "%s n=%lld skewed: rel rmse %.5f >= %.5f",
                  ds_dtype_get(b->t)->name, (long long)n, s, b->skewed_bound);
        }
    }
}

/* The bounds hold whatever the overall magnitude, while scales stay in fp16 range. */
static void test_roundtrip_magnitudes(void) {
    static const double sigmas[] = {0.01, 30.0, 1000.0};
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const rmse_bound *b = &rmse_bounds[k];
        if (block_elems(b->t) == 1) continue;
        for (int si = 0; si < 3; si++) {
            const double e = roundtrip_rel_rmse(b->t, 1024, 8, sigmas[si], 0.0, 0, 300 + (uint64_t)si);
            CHECK(e < b->gauss_bound, "%s sigma=%g: rel rmse %.5f", ds_dtype_get(b->t)->name, sigmas[si], e);
        }
    }
}

/* Quantising finite input never yields inf or NaN, at any magnitude. */
static void test_extreme_magnitudes_stay_finite(void) {
    static const double sigmas[] = {1e-38, 1e-30, 1e-8, 1e-5, 1e5, 1e8, 1e30, 1e38};
    enum { N = 512 };
    float x[N], y[N];
    uint8_t q[N * 4];
    rng r = {7};
    for (int k = 0; k < N_QUANT_TYPES; k++) {
        const ds_dtype t = quant_types[k];
        for (size_t si = 0; si <= sizeof sigmas / sizeof sigmas[0]; si++) {
            if (si < sizeof sigmas / sizeof sigmas[0]) {
                fill_row(&r, x, N, sigmas[si], 0.0, 0);
            } else { /* the largest finite floats, both signs, with a subnormal mixed in */
                for (int i = 0; i < N; i++) x[i] = (i % 3 == 0) ? -FLT_MAX : (i % 3 == 1) ? FLT_MAX : 1e-45f;
            }
            ds_quantize_row(t, x, q, N);
            ds_dequantize_row(t, q, y, N);
            int bad = -1;
            for (int i = 0; i < N && bad < 0; i++)
                if (!isfinite(y[i])) bad = i;
            CHECK(bad < 0, "%s case %zu: element %d decodes to %g", ds_dtype_get(t)->name, si, bad,
                  bad >= 0 ? y[bad] : 0.0);
            /* signs survive saturation: a huge positive value must not flip */
            if (si == sizeof sigmas / sizeof sigmas[0])
                CHECK(y[1] > 0 && y[0] < 0, "%s saturated signs: %g %g", ds_dtype_get(t)->name, y[0], y[1]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* (c) fp16 and bf16                                                         */

static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }

static void test_f16_exhaustive_roundtrip(void) {
    static uint16_t h[65536], back[65536];
    static float f[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    ds_dequantize_row(DS_F16, h, f, 65536);
    ds_quantize_row(DS_F16, f, back, 65536);
    int mismatches = 0;
    for (int i = 0; i < 65536; i++) {
        /* NaN payloads may be quietened; a NaN must stay a NaN */
        const int ok = f16_is_nan(h[i]) ? (isnan(f[i]) && f16_is_nan(back[i])) : back[i] == h[i];
        if (!ok && mismatches++ < 5) CHECK(ok, "0x%04x -> %g -> 0x%04x", h[i], f[i], back[i]);
    }
    CHECK(mismatches == 0, "%d patterns do not round-trip", mismatches);
}

static void test_bf16_exhaustive_roundtrip(void) {
    static uint16_t h[65536], back[65536];
    static float f[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    ds_dequantize_row(DS_BF16, h, f, 65536);
    ds_quantize_row(DS_BF16, f, back, 65536);
    int mismatches = 0;
    for (int i = 0; i < 65536; i++) {
        const int ok = bf16_is_nan(h[i]) ? (isnan(f[i]) && bf16_is_nan(back[i])) : back[i] == h[i];
        if (!ok && mismatches++ < 5) CHECK(ok, "0x%04x -> %g -> 0x%04x", h[i], f[i], back[i]);
    }
    CHECK(mismatches == 0, "%d patterns do not round-trip", mismatches);
}

static uint16_t to_bf16(uint32_t f32_bits) {
    const float f = ds_bits_f32(f32_bits);
    uint16_t h;
    ds_quantize_row(DS_BF16, &f, &h, 1);
    return h;
}

static void test_bf16_round_to_nearest_even(void) {
    CHECK(to_bf16(0x3F800000u) == 0x3F80, "1.0");
    CHECK(to_bf16(0x3F808000u) == 0x3F80, "1+2^-8: tie goes down to even 0x3F80");
    CHECK(to_bf16(0x3F818000u) == 0x3F82, "1+3*2^-8: tie goes up to even 0x3F82");
    CHECK(to_bf16(0x3F808001u) == 0x3F81, "just above a tie rounds up");
    CHECK(to_bf16(0x3F817FFFu) == 0x3F81, "just below a tie rounds down");
    CHECK(to_bf16(0xBF818000u) == 0xBF82, "negative tie to even");
    CHECK(to_bf16(0x7F800000u) == 0x7F80, "inf");
    CHECK(to_bf16(0xFF800000u) == 0xFF80, "-inf");
    CHECK(to_bf16(0x7F7FFFFFu) == 0x7F80, "FLT_MAX rounds to inf");
    CHECK(bf16_is_nan(to_bf16(0x7FC00000u)), "NaN stays NaN");
    CHECK(bf16_is_nan(to_bf16(0x7F800001u)), "NaN with a payload only in the low bits stays NaN");
    CHECK(to_bf16(0x00000001u) == 0x0000, "smallest subnormal rounds to zero");
    CHECK(to_bf16(0x80000000u) == 0x8000, "-0 keeps its sign");
}

static uint16_t to_f16(float f) {
    uint16_t h;
    ds_quantize_row(DS_F16, &f, &h, 1);
    return h;
}

static float from_f16(uint16_t h) {
    float f;
    ds_dequantize_row(DS_F16, &h, &f, 1);
    return f;
}

static void test_f16_subnormals_and_overflow(void) {
    const float tiny = ldexpf(1.0f, -24); /* smallest f16 subnormal */
    CHECK(from_f16(0x0001) == tiny, "0x0001 = 2^-24");
    CHECK(from_f16(0x03FF) == 1023 * tiny, "largest subnormal");
    CHECK(from_f16(0x0400) == ldexpf(1.0f, -14), "smallest normal");
    CHECK(from_f16(0x8001) == -tiny, "negative subnormal");
    CHECK(to_f16(tiny) == 0x0001, "2^-24");
    CHECK(to_f16(0.5f * tiny) == 0x0000, "half of 2^-24 ties to even zero");
    CHECK(to_f16(0.75f * tiny) == 0x0001, "0.75 ulp rounds up");
    CHECK(to_f16(1.5f * tiny) == 0x0002, "1.5 ulp ties to even 2");
    CHECK(to_f16(2.5f * tiny) == 0x0002, "2.5 ulp ties to even 2");
    CHECK(to_f16(1023 * tiny) == 0x03FF, "largest subnormal");
    CHECK(to_f16(-3 * tiny) == 0x8003, "negative subnormal");
    CHECK(to_f16(1e-10f) == 0x0000, "far below the subnormals");
    CHECK(to_f16(65504.0f) == 0x7BFF, "max finite");
    CHECK(to_f16(65519.0f) == 0x7BFF, "below the midpoint to inf stays finite");
    CHECK(to_f16(65520.0f) == 0x7C00, "midpoint to inf overflows");
    CHECK(to_f16(1e10f) == 0x7C00, "overflow");
    CHECK(to_f16(-1e10f) == 0xFC00, "negative overflow");
    CHECK(to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3C00, "tie to even at 1");
    CHECK(to_f16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3C02, "tie to even at 1+2^-10");
    CHECK(isinf(from_f16(0x7C00)) && from_f16(0x7C00) > 0, "inf");
}

/* ------------------------------------------------------------------------ */
/* (d) degenerate blocks                                                     */

static void test_zero_blocks(void) {
    enum { N = 512 };
    float x[N] = {0}, y[N];
    uint8_t q[N * 4];
    for (int k = 0; k < N_QUANT_TYPES; k++) {
        const ds_dtype t = quant_types[k];
        memset(q, 0xAB, sizeof q);
        ds_quantize_row(t, x, q, N);
        for (int i = 0; i < N; i++) y[i] = 1.0f;
        ds_dequantize_row(t, q, y, N);
        int bad = -1;
        for (int i = 0; i < N && bad < 0; i++)
            if (y[i] != 0.0f) bad = i;
        CHECK(bad < 0, "%s: element %d decodes to %g", ds_dtype_get(t)->name, bad, bad >= 0 ? y[bad] : 0.0);
    }
}

static void test_constant_blocks(void) {
    static const float constants[] = {0.7f, -3.2f, 25.0f, -1000.0f, 0.001f};
    enum { N = 512 };
    float x[N], y[N];
    uint8_t q[N * 4];
    for (int k = 0; k < N_QUANT_TYPES; k++) {
        const ds_dtype t = quant_types[k];
        for (size_t c = 0; c < sizeof constants / sizeof constants[0]; c++) {
            for (int i = 0; i < N; i++) x[i] = constants[c];
            ds_quantize_row(t, x, q, N);
            ds_dequantize_row(t, q, y, N);
            int uneven = 0;
            for (int i = 1; i < N; i++) uneven += y[i] != y[0];
            CHECK(uneven == 0, "%s %g: %d elements differ from the first", ds_dtype_get(t)->name,
                  constants[c], uneven);
            const double rel = fabs((double)y[0] - constants[c]) / fabs(constants[c]);
            CHECK(rel < 0.005, "%s %g decodes to %.8g (rel error %.5f)", ds_dtype_get(t)->name,
                  constants[c], y[0], rel);
        }
    }
}

/* A block of zeros between busy blocks stays zero, and does not disturb them. */
static void test_zero_block_inside_row(void) {
    enum { N = 768 };
    float x[N], y[N];
    uint8_t q[N * 4];
    rng r = {11};
    for (int k = 0; k < N_QUANT_TYPES; k++) {
        const ds_dtype t = quant_types[k];
        fill_row(&r, x, N, 1.0, 0.0, 0);
        for (int i = 256; i < 512; i++) x[i] = 0.0f;
        ds_quantize_row(t, x, q, N);
        ds_dequantize_row(t, q, y, N);
        int nonzero = 0;
        for (int i = 256; i < 512; i++) nonzero += y[i] != 0.0f;
        CHECK(nonzero == 0, "%s: %d elements of the zero block decode non-zero", ds_dtype_get(t)->name, nonzero);
        double err = 0, sig = 0;
        for (int i = 0; i < N; i++) {
            err += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            sig += (double)x[i] * x[i];
        }
        CHECK(sqrt(err / sig) < 0.12, "%s: rel rmse %.4f", ds_dtype_get(t)->name, sqrt(err / sig));
    }
}

/* ------------------------------------------------------------------------ */
/* --dump and --stats modes                                                  */

/* Random bytes for a block, with its fp16 scale fields replaced by finite,
 * moderate values so the decoded floats are finite (NaN payload propagation
 * is not something two implementations need to agree on). */
static void random_block_bytes(rng *r, ds_dtype t, uint8_t *blk) {
    const int nbytes = ds_dtype_get(t)->block_bytes;
    for (int i = 0; i < nbytes; i++) blk[i] = (uint8_t)rng_next(r);
    size_t scale_offsets[2] = {0, 0};
    int n_scales = 1;
    switch (t) {
    case DS_Q8_0: case DS_Q4_0: scale_offsets[0] = 0; break;
    case DS_Q4_K: case DS_Q5_K: scale_offsets[1] = 2; n_scales = 2; break;
    case DS_Q6_K: scale_offsets[0] = offsetof(ds_block_q6_K, d); break;
    default: return;
    }
    for (int s = 0; s < n_scales; s++) {
        const uint64_t bits = rng_next(r);
        /* sign random, exponent 5..20 (2^-10 .. 2^5), mantissa random */
        const uint16_t h = (uint16_t)(((bits & 1) << 15) | ((5 + (bits >> 1) % 16) << 10) | ((bits >> 8) & 0x3ff));
        memcpy(blk + scale_offsets[s], &h, 2);
    }
}

static int dump_reference_rows(const char *dir) {
    enum { ROWS = 4, N = 512 };
    for (int ti = 0; ti < DS_DTYPE_COUNT; ti++) {
        const ds_dtype t = (ds_dtype)ti;
        const ds_dtype_info *info = ds_dtype_get(t);
        const size_t row_bytes = ds_dtype_row_bytes(t, N);
        const int quantised = info->block_elems > 1;
        const int total_rows = ROWS + quantised; /* quant types get a row of random blocks */
        uint8_t *bytes = malloc(row_bytes * total_rows);
        float *decoded = malloc(sizeof(float) * N * total_rows);
        float x[N];
        rng r = {1000 + (uint64_t)ti};
        for (int row = 0; row < ROWS; row++) {
            static const double sigmas[ROWS] = {1.0, 0.01, 300.0, 0.05};
            fill_row(&r, x, N, sigmas[row], row == 3 ? 0.04 : 0.0, row >= 2);
            if (row == 3) /* a zero block and a negative constant block */
                for (int i = 0; i < N / 2; i++) x[i] = i < N / 4 ? 0.0f : -0.3f;
            ds_quantize_row(t, x, bytes + row * row_bytes, N);
        }
        if (quantised)
            for (int b = 0; b < N / info->block_elems; b++)
                random_block_bytes(&r, t, bytes + ROWS * row_bytes + (size_t)b * info->block_bytes);
        for (int row = 0; row < total_rows; row++)
            ds_dequantize_row(t, bytes + row * row_bytes, decoded + (size_t)row * N, N);
        const int failed = write_file(dir, info->name, "bin", bytes, row_bytes * total_rows) ||
                           write_file(dir, info->name, "f32", decoded, sizeof(float) * N * total_rows);
        free(bytes);
        free(decoded);
        if (failed) return 1;
    }
    return 0;
}

static void print_stats(void) {
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const ds_dtype t = rmse_bounds[k].t;
        printf("%-5s gaussian %.5f  skewed %.5f  (n=4096, relative rmse)\n", ds_dtype_get(t)->name,
               roundtrip_rel_rmse(t, 4096, 16, 1.0, 0.0, 0, 1), roundtrip_rel_rmse(t, 4096, 16, 0.02, 0.015, 1, 2));
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump_reference_rows(argv[2]);
    if (argc == 2 && strcmp(argv[1], "--stats") == 0) {
        print_stats();
        return 0;
    }
    RUN(test_row_bytes_table);
    RUN(test_names_and_gguf_ids);
    RUN(test_q8_0_hand_block);
    RUN(test_q4_0_hand_block);
    RUN(test_q4_K_hand_block);
    RUN(test_q5_K_hand_block);
    RUN(test_q6_K_hand_block);
    RUN(test_multi_block_rows);
    RUN(test_roundtrip_error_bounds);
    RUN(test_roundtrip_magnitudes);
    RUN(test_extreme_magnitudes_stay_finite);
    RUN(test_f16_exhaustive_roundtrip);
    RUN(test_bf16_exhaustive_roundtrip);
    RUN(test_bf16_round_to_nearest_even);
    RUN(test_f16_subnormals_and_overflow);
    RUN(test_zero_blocks);
    RUN(test_constant_blocks);
    RUN(test_zero_block_inside_row);
    return ds_test_finish();
}
