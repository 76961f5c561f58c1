/* test_fp8.c - float8 e4m3 (loading/fp8.h):
 *   - every one of the 256 codes decodes to the format's value (1 + m/8) *
 *     2^(e-7), m/8 * 2^-6 for e = 0, NaN for S.1111.111, and encodes back to
 *     itself (but -0, which is 0 of either sign);
 *   - encoding rounds to nearest, ties to even, and saturates at +-448;
 *   - the conversion to BF16 is the exact product fp8 * scale rounded once
 *     (checked against an exact rational rounding on random blocks), to Q8_0
 *     the F32 product through ds_quantize_row; the bytes do not depend on the
 *     thread count, partial edge blocks use their own scale;
 *   - a NaN byte or a negative / infinite scale is refused naming the tensor.
 * (End to end, against NumPy: tests/reference/test_fp8.py.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "loading/fp8.h"
#include "testing.h"

static double ref_value(int b) {
    int e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m / 8.0 * ldexp(1, -6) : (1 + m / 8.0) * ldexp(1, e - 7);
    return b & 0x80 ? -v : v;
}

static void test_codes(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        float v = ds_fp8_e4m3_to_f32((uint8_t)b);
        if ((b & 0x7f) == 0x7f) {
            bad += !isnan(v);
            continue;
        }
        bad += (double)v != ref_value(b);
        uint8_t back = ds_fp8_e4m3_from_f32(v);
        bad += back != b && !(b == 0x80 && back == 0);
    }
    CHECK(bad == 0, "%d codes wrong", bad);
    CHECK(ds_fp8_e4m3_to_f32(0x7e) == 448.0f && ds_fp8_e4m3_to_f32(0x01) == 0x1p-9f, "extremes");
}

static void test_rounding(void) {
    /* halfway between neighbours: ties go to the even code */
    int bad = 0;
    for (int b = 0; b < 0x7e; b++) {
        double mid = (ref_value(b) + ref_value(b + 1)) / 2;
        uint8_t want = (b & 1) ? (uint8_t)(b + 1) : (uint8_t)b;
        bad += ds_fp8_e4m3_from_f32((float)mid) != want;
        bad += ds_fp8_e4m3_from_f32((float)(mid * 1.0001)) != b + 1;
        bad += ds_fp8_e4m3_from_f32((float)(-mid * 0.9999)) != (0x80 | b);
    }
    CHECK(bad == 0, "%d roundings wrong", bad);
    CHECK(ds_fp8_e4m3_from_f32(1e6f) == 0x7e && ds_fp8_e4m3_from_f32(-460.0f) == 0xfe, "saturation");
}

static uint32_t rng = 12345;
static uint32_t next(void) { return rng = rng * 1664525u + 1013904223u; }

/* the BF16 nearest (ties to even) to the exact value a * s (double holds it exactly) */
static uint16_t exact_bf16(double p) {
    if (p == 0) return signbit(p) ? 0x8000 : 0;
    int e;
    double m = frexp(fabs(p), &e); /* [0.5, 1) */
    double scaled = ldexp(m, 8), r = floor(scaled), frac = scaled - r;
    if (frac > 0.5 || (frac == 0.5 && fmod(r, 2) == 1)) r += 1;
    float f = (float)ldexp(r, e - 8); /* 8 significant bits: exact in float */
    uint16_t h = (uint16_t)(ds_f32_bits(f) >> 16);
    return p < 0 ? (uint16_t)(h | 0x8000) : h;
}

static void convert(const ds_fp8_tensor *t, int threads, ds_status *s, ds_err *e) {
    ds_pool *pool;
    if (ds_pool_new(threads, &pool, e)) { *s = DS_ENOMEM; return; }
    *s = ds_fp8_convert(pool, t, "test.safetensors", e);
    ds_pool_free(pool);
}

static void test_convert(void) {
    enum { M = 2, R = 200, C = 288 }; /* partial edge blocks in both directions */
    int sr = (R + 127) / 128, sc = (C + 127) / 128;
    uint8_t *w = malloc(M * R * C);
    float scales[M * 2 * 3];
    for (int i = 0; i < M * R * C; i++) {
        w[i] = (uint8_t)(next() >> 24);
        if ((w[i] & 0x7f) == 0x7f) w[i] ^= 1; /* no NaN */
    }
    for (int i = 0; i < M * sr * sc; i++) scales[i] = (float)((next() >> 8) + 1) * 0x1p-30f * (i == 3 ? 0 : 1);
    scales[1] = 0.25f; /* a power of two */
    uint16_t *a = malloc(M * R * C * 2), *b = malloc(M * R * C * 2);
    ds_fp8_tensor t = {.name = "w", .w = w, .mats = M, .rows = R, .cols = C, .scale = (const uint8_t *)scales,
                       .scale_type = DS_F32, .out_type = DS_BF16, .out = (uint8_t *)a};
    ds_status s;
    ds_err e = {0};
    convert(&t, 1, &s, &e);
    REQUIRE(s == DS_OK, "%s", e.msg);
    t.out = (uint8_t *)b;
    convert(&t, 4, &s, &e);
    REQUIRE(s == DS_OK, "%s", e.msg);
    CHECK(!memcmp(a, b, M * R * C * 2), "bf16: 1 and 4 threads differ");
    int bad = 0, exact_block = 0;
    for (int x = 0; x < M; x++)
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                int i = (x * R + r) * C + c;
                float s1 = scales[(x * sr + r / 128) * sc + c / 128];
                double p = (double)ds_fp8_e4m3_to_f32(w[i]) * (double)s1;
                bad += a[i] != exact_bf16(p);
                if (x == 0 && r < 128 && c >= 128 && c < 256) exact_block += ds_bf16_to_f32(a[i]) == (float)p;
            }
    CHECK(bad == 0, "bf16: %d values are not the exact product rounded once", bad);
    CHECK(exact_block == 128 * 128, "power-of-two scale: %d of %d exact", exact_block, 128 * 128);
    /* Q8_0: the F32 product, row by row */
    size_t rb = ds_dtype_row_bytes(DS_Q8_0, C);
    uint8_t *q = malloc(M * R * rb), *q4 = malloc(M * R * rb), *want = malloc(rb);
    float row[C];
    t.out_type = DS_Q8_0;
    t.out = q;
    convert(&t, 1, &s, &e);
    t.out = q4;
    convert(&t, 3, &s, &e);
    CHECK(!memcmp(q, q4, M * R * rb), "q8_0: 1 and 3 threads differ");
    bad = 0;
    for (int x = 0; x < M; x++)
        for (int r = 0; r < R; r++) {
            for (int c = 0; c < C; c++)
                row[c] = (float)((double)ds_fp8_e4m3_to_f32(w[(x * R + r) * C + c]) *
                                 (double)scales[(x * sr + r / 128) * sc + c / 128]);
            ds_quantize_row(DS_Q8_0, row, want, C);
            bad += memcmp(want, q + (size_t)(x * R + r) * rb, rb) != 0;
        }
    CHECK(bad == 0, "q8_0: %d rows differ from the quantised product", bad);
    /* bad input */
    w[5 * C + 7] = 0xff;
    t.out_type = DS_BF16;
    t.out = (uint8_t *)a;
    convert(&t, 2, &s, &e);
    CHECK(s == DS_ECORRUPT && strstr(e.msg, "'w'") && strstr(e.msg, "NaN") && strstr(e.msg, "element 1447"),
          "NaN: %s", e.msg);
    w[5 * C + 7] = 0x01;
    scales[4] = -1.0f;
    convert(&t, 2, &s, &e);
    CHECK(s == DS_ECORRUPT && strstr(e.msg, "w_scale_inv") && strstr(e.msg, "block scale 4"), "negative: %s", e.msg);
    scales[4] = INFINITY;
    convert(&t, 2, &s, &e);
    CHECK(s == DS_ECORRUPT && strstr(e.msg, "inf"), "infinite: %s", e.msg);
    free(w);
    free(a);
    free(b);
    free(q);
    free(q4);
    free(want);
}

int main(void) {
    RUN(test_codes);
    RUN(test_rounding);
    RUN(test_convert);
    return ds_test_finish();
}
