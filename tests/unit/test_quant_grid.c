/* test_quant_grid.c - the grid ("iq") types: iq2_xxs, iq2_xs, iq2_s, iq3_xxs,
 * iq3_s, iq1_s, iq1_m. Their codebooks against the format's numbers, hand
 * blocks, the common integer form (gblock.h) against ds_dequantize_row, the
 * level tables, and the quantiser's errors, signs and edge rows.
 *
 * `test_quant_grid --dump DIR` instead writes, per type, DIR/<name>.bin
 * (quantised rows, then random valid blocks) and DIR/<name>.f32 (their
 * ds_dequantize_row output), which tests/reference/test_quants_grid.py
 * decodes independently with numpy and compares bit for bit.
 * `test_quant_grid --stats` prints the measured round-trip errors. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "kernels/dtype.h"
#include "kernels/gblock.h"
#include "kernels/grid_tables.h"
#include "quant_testing.h"
#include "testing.h"

static const ds_dtype grid_types[] = {DS_IQ2_XXS, DS_IQ2_XS, DS_IQ2_S, DS_IQ3_XXS, DS_IQ3_S, DS_IQ1_S, DS_IQ1_M};
#define N_GRID_TYPES (int)(sizeof grid_types / sizeof grid_types[0])

/* A finite, nonzero fp16: sign random, exponent 5..20 (2^-10 .. 2^5). */
static uint16_t random_f16(rng *r) {
    const uint64_t bits = rng_next(r);
    return (uint16_t)(((bits & 1) << 15) | ((5 + (bits >> 1) % 16) << 10) | ((bits >> 8) & 0x3ff));
}

/* Random bytes for a block of a grid type: every index, sign and scale code
 * is valid, so only the fp16 scale needs taming (finite, moderate). */
static void random_block(rng *r, ds_dtype t, uint8_t *blk) {
    const int nbytes = ds_dtype_get(t)->block_bytes;
    for (int i = 0; i < nbytes; i++) blk[i] = (uint8_t)rng_next(r);
    const uint16_t h = random_f16(r);
    if (t != DS_IQ1_M) {
        memcpy(blk, &h, 2); /* d leads every other grid block */
        return;
    }
    /* iq1_m: the fp16 is spread over the top nibbles of the four scale words */
    uint16_t sc[4];
    memcpy(sc, blk + offsetof(ds_block_iq1_m, scales), 8);
    for (int k = 0; k < 4; k++) sc[k] = (uint16_t)((sc[k] & 0x0fff) | ((h >> (4 * k)) & 15) << 12);
    memcpy(blk + offsetof(ds_block_iq1_m, scales), sc, 8);
}

static size_t row_bytes(ds_dtype t, int64_t n) { return ds_dtype_row_bytes(t, n); }

/* ------------------------------------------------------------------------ */
/* The codebooks                                                             */

static uint64_t fnv1a(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The FNV-1a hashes of the tables' little-endian bytes, computed from the
 * format's published numbers: a changed digit anywhere shows. */
static void test_tables_match_format(void) {
    CHECK(fnv1a(ds_grid_ksigns, sizeof ds_grid_ksigns) == 0xf19ba8f8c3292ba5ull, "ksigns");
    CHECK(fnv1a(ds_grid_iq2xxs, sizeof ds_grid_iq2xxs) == 0xbb4ee025b5ac6e8eull, "iq2xxs");
    CHECK(fnv1a(ds_grid_iq2xs, sizeof ds_grid_iq2xs) == 0xc9b1ee61e79909bdull, "iq2xs");
    CHECK(fnv1a(ds_grid_iq2s, sizeof ds_grid_iq2s) == 0x123edd38a3b62b90ull, "iq2s");
    CHECK(fnv1a(ds_grid_iq3xxs, sizeof ds_grid_iq3xxs) == 0xdfa5dc83d6a155d5ull, "iq3xxs");
    CHECK(fnv1a(ds_grid_iq3s, sizeof ds_grid_iq3s) == 0xfa37020c25b44829ull, "iq3s");
    CHECK(fnv1a(ds_grid_iq1s, sizeof ds_grid_iq1s) == 0x6703ed863501ae2eull, "iq1s");
    for (int i = 0; i < 128; i++) /* 7 stored bits; the eighth makes the count of negatives even */
        CHECK(ds_grid_ksigns[i] == (i | (__builtin_popcount((unsigned)i) & 1) << 7), "ksigns[%d]", i);
    CHECK(DS_IQ1S_DELTA == 0.125f && DS_IQ1M_DELTA == 0.125f, "iq1 deltas");
}

static void test_ids_and_sizes(void) {
    static const struct { ds_dtype t; const char *name; uint32_t id; int bytes; } want[] = {
        {DS_IQ2_XXS, "iq2_xxs", 16, 66}, {DS_IQ2_XS, "iq2_xs", 17, 74}, {DS_IQ2_S, "iq2_s", 22, 82},
        {DS_IQ3_XXS, "iq3_xxs", 18, 98}, {DS_IQ3_S, "iq3_s", 21, 110}, {DS_IQ1_S, "iq1_s", 19, 50},
        {DS_IQ1_M, "iq1_m", 29, 56},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ds_dtype_info *info = ds_dtype_get(want[i].t);
        CHECK(strcmp(info->name, want[i].name) == 0, "%s", info->name);
        CHECK(info->gguf_type == want[i].id && info->block_bytes == want[i].bytes && info->block_elems == 256,
              "%s: id %u bytes %d elems %d", want[i].name, info->gguf_type, info->block_bytes, info->block_elems);
        ds_dtype t;
        CHECK(ds_dtype_from_gguf(want[i].id, &t) == 0 && t == want[i].t, "%s from gguf id", want[i].name);
    }
}

/* ------------------------------------------------------------------------ */
/* Hand blocks                                                               */

/* iq2_xxs block 1, group 2: grid entry 1 (43 then seven 8s), sign code 1
 * (elements 0 and 7 negative: the eighth bit restores an even count), scale
 * code 3: db = 1 * 3.5 / 4. */
static void test_iq2_xxs_hand_block(void) {
    ds_block_iq2_xxs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3c00; /* 1.0 */
    const uint32_t grids = 1u << 16, aux = 3u << 28 | 1u << 14;
    memcpy(&b.qs[4], &grids, 4);
    memcpy(&b.qs[6], &aux, 4);
    float y[256];
    ds_dequantize_row(DS_IQ2_XXS, &b, y, 256);
    CHECK(y[48] == -0.875f * 43 && y[49] == 0.875f * 8 && y[55] == -0.875f * 8, "%g %g %g", y[48], y[49], y[55]);
    CHECK(y[0] == 0.125f * 8 && y[32] == 0.875f * 8, "other groups: entry 0, all 8s: %g %g", y[0], y[32]);
}

/* iq1_m: d = 0.5 (0x3800) spread over the scale words' top nibbles; block 3,
 * second half scale code 5 (x 11), group 3 index 0x5ff with a negative shift. */
static void test_iq1_m_hand_block(void) {
    ds_block_iq1_m b;
    memset(&b, 0, sizeof b);
    uint16_t sc[4] = {0x0000, 0x0000, 0x8000, 0x3000};
    sc[1] |= (uint16_t)(5 << (6 + 3)); /* block 3 = word 1, high 6 bits, second half */
    memcpy(b.scales, sc, 8);
    b.qs[4 * 3 + 3] = 0xff;
    b.qh[2 * 3 + 1] = (uint8_t)((5 | 8) << 4);
    float y[256];
    ds_dequantize_row(DS_IQ1_M, &b, y, 256);
    const uint64_t e = ds_grid_iq1s[0x5ff];
    for (int j = 0; j < 8; j++) {
        const float want = 0.5f * 11 * ((float)(int8_t)(e >> (8 * j)) - 0.125f);
        CHECK(y[96 + 24 + j] == want, "element %d: %g want %g", j, y[96 + 24 + j], want);
    }
    CHECK(y[96] == 0.5f * ((float)(int8_t)ds_grid_iq1s[0] + 0.125f), "first half of block 3: %g", y[96]);
}

/* iq3_s block 0, group 1, second entry: index bit 8 from qh bit 3. */
static void test_iq3_s_hand_block(void) {
    ds_block_iq3_s b;
    memset(&b, 0, sizeof b);
    b.d = 0x4000; /* 2.0 */
    b.qh[0] = 1 << 3;
    b.qs[3] = 7;
    b.signs[1] = 0x80;
    b.scales[0] = 0x42; /* block 0: code 2 (x 5); block 1: code 4 */
    float y[256];
    ds_dequantize_row(DS_IQ3_S, &b, y, 256);
    const uint32_t e = ds_grid_iq3s[256 + 7];
    for (int j = 0; j < 4; j++) {
        const float v = 2.0f * 5 * (float)(uint8_t)(e >> (8 * j));
        CHECK(y[8 + 4 + j] == (j == 3 ? -v : v), "element %d: %g", j, y[12 + j]);
    }
    CHECK(y[32] == 2.0f * 9 * (float)(uint8_t)ds_grid_iq3s[0], "block 1 scale: %g", y[32]);
}

/* ------------------------------------------------------------------------ */
/* The common integer form                                                   */

/* Every product of the form is exact in float (fp16 d, 5-bit scales, 6-bit
 * levels), so d * sc * lv must be the decoded float itself. */
static void test_gblock_matches_dequant(void) {
    rng r = {7};
    const int blocks = ds_test_scaled(200);
    for (int ti = 0; ti < N_GRID_TYPES; ti++) {
        const ds_dtype t = grid_types[ti];
        REQUIRE(ds_gblock_type(t), "%s takes the integer form", ds_dtype_get(t)->name);
        uint8_t blk[128];
        float y[256];
        int bad = 0;
        for (int k = 0; k < blocks && !bad; k++) {
            random_block(&r, t, blk);
            ds_dequantize_row(t, blk, y, 256);
            for (int b = 0; b < 8 && !bad; b++) {
                ds_gblock g;
                memset(&g, 0x55, sizeof g);
                ds_gblock_decode(t, blk, b, &g);
                CHECK(g.mn[0] == 0 && g.mn[1] == 0 && g.dm == 0.0f, "%s: no min", ds_dtype_get(t)->name);
                for (int i = 0; i < 32 && !bad; i++) {
                    const float v = g.d * (float)g.sc[i / 16] * (float)g.lv[i];
                    if (v != y[32 * b + i]) {
                        bad = 1;
                        CHECK(0, "%s block %d sub %d elem %d: d %g sc %d lv %d -> %g, dequant %g",
                              ds_dtype_get(t)->name, k, b, i, g.d, g.sc[i / 16], g.lv[i], v, y[32 * b + i]);
                    }
                }
            }
        }
    }
}

/* The second block of 32 in a row of two super-blocks reads the right super-block. */
static void test_gblock_block_index(void) {
    rng r = {8};
    for (int ti = 0; ti < N_GRID_TYPES; ti++) {
        const ds_dtype t = grid_types[ti];
        uint8_t row[2 * 128];
        float y[512];
        const int bb = ds_dtype_get(t)->block_bytes;
        random_block(&r, t, row);
        random_block(&r, t, row + bb);
        ds_dequantize_row(t, row, y, 512);
        ds_gblock g;
        ds_gblock_decode(t, row, 13, &g);
        for (int i = 0; i < 32; i++)
            CHECK(g.d * (float)g.sc[i / 16] * (float)g.lv[i] == y[13 * 32 + i], "%s elem %d", ds_dtype_get(t)->name, i);
    }
}

/* The level table holds every level a block can decode to (a packer stores
 * indices into it), and nothing else: ascending, distinct, at most 16. */
static void test_levels_cover_decoded_levels(void) {
    rng r = {9};
    for (int ti = 0; ti < N_GRID_TYPES; ti++) {
        const ds_dtype t = grid_types[ti];
        const char *name = ds_dtype_get(t)->name;
        const ds_glevels *L = ds_gblock_levels(t);
        REQUIRE(L != NULL, "%s has levels", name);
        CHECK(L->count > 0 && L->count <= 16, "%s: %d levels", name, L->count);
        for (int k = 1; k < L->count; k++) CHECK(L->lv[k - 1] < L->lv[k], "%s: ascending at %d", name, k);
        int seen[32] = {0};
        uint8_t blk[128];
        for (int k = 0; k < ds_test_scaled(2000); k++) {
            random_block(&r, t, blk);
            for (int b = 0; b < 8; b++) {
                ds_gblock g;
                ds_gblock_decode(t, blk, b, &g);
                for (int i = 0; i < 32; i++) {
                    int at = -1;
                    for (int m = 0; m < L->count; m++)
                        if (L->lv[m] == g.lv[i]) at = m;
                    if (at < 0) {
                        CHECK(0, "%s: level %d decoded but not in the table", name, g.lv[i]);
                        return;
                    }
                    seen[at] = 1;
                }
            }
        }
        for (int m = 0; m < L->count; m++) CHECK(seen[m], "%s: level %d in the table never decoded", name, L->lv[m]);
    }
}

/* ------------------------------------------------------------------------ */
/* Quantisation                                                              */

/* Relative RMS error bounds, about 5% above what the quantiser measures
 * (test_quant_grid --stats): on Gaussian rows, and on rows with a mean and
 * 1% outliers of 6 sigma. A plain nearest-codebook search: llama.cpp's
 * importance-weighted search does better; the format is what must be exact. */
typedef struct { ds_dtype t; double gaussian, skewed; } rmse_bound;
static const rmse_bound rmse_bounds[] = {
    {DS_IQ2_XXS, 0.350, 0.385}, {DS_IQ2_XS, 0.300, 0.320}, {DS_IQ2_S, 0.255, 0.285}, {DS_IQ3_XXS, 0.187, 0.202},
    {DS_IQ3_S, 0.137, 0.153},   {DS_IQ1_S, 0.475, 0.490},  {DS_IQ1_M, 0.440, 0.445},
};

static void test_roundtrip_error_bounds(void) {
    const int rows = ds_test_scaled(10) > 0 ? ds_test_scaled(10) : 1;
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const rmse_bound *b = &rmse_bounds[k];
        const double g = roundtrip_rel_rmse(b->t, 4096, rows, 1.0, 0.0, 0, 100 + k);
        const double s = roundtrip_rel_rmse(b->t, 4096, rows, 0.02, 0.015, 1, 200 + k);
        CHECK(g < b->gaussian, "%s gaussian rel rmse %.4f >= %.2f", ds_dtype_get(b->t)->name, g, b->gaussian);
        CHECK(s < b->skewed, "%s skewed rel rmse %.4f >= %.2f", ds_dtype_get(b->t)->name, s, b->skewed);
        /* scaling a row by a power of two scales its blocks' fp16 scale and
         * nothing else, while that scale stays a normal fp16 */
        const double big = roundtrip_rel_rmse(b->t, 4096, 1, 256.0, 0.0, 0, 300 + k);
        const double small = roundtrip_rel_rmse(b->t, 4096, 1, 1.0 / 64, 0.0, 0, 300 + k);
        CHECK(fabs(big - small) <= 1e-12 * big, "%s: rel rmse %.9f at sigma 256, %.9f at 1/64",
              ds_dtype_get(b->t)->name, big, small);
    }
}

/* Signs: iq2_s and iq3_s store all 8, so every decoded sign is the input's;
 * the types with 7 stored bits (an even count of negatives) may get one sign
 * per group of 8 wrong, and then only the group's smallest magnitude. */
static void test_signs_follow_input(void) {
    static const ds_dtype signed_types[] = {DS_IQ2_XXS, DS_IQ2_XS, DS_IQ2_S, DS_IQ3_XXS, DS_IQ3_S};
    enum { N = 2048 };
    rng r = {11};
    float x[N], y[N];
    uint8_t q[N];
    for (size_t k = 0; k < sizeof signed_types / sizeof signed_types[0]; k++) {
        const ds_dtype t = signed_types[k];
        const int free_signs = t == DS_IQ2_S || t == DS_IQ3_S;
        fill_row(&r, x, N, 1.0, 0.0, 1);
        ds_quantize_row(t, x, q, N);
        ds_dequantize_row(t, q, y, N);
        int wrong_groups = 0, bad = 0;
        for (int g = 0; g < N / 8 && !bad; g++) {
            int wrong = 0, wrong_at = -1, smallest = 0;
            for (int j = 0; j < 8; j++) {
                if (fabsf(x[8 * g + j]) < fabsf(x[8 * g + smallest])) smallest = j;
                if ((x[8 * g + j] < 0) != (y[8 * g + j] < 0)) wrong++, wrong_at = j;
            }
            wrong_groups += wrong > 0;
            if (wrong > (free_signs ? 0 : 1) || (wrong && wrong_at != smallest)) {
                bad = 1;
                CHECK(0, "%s group %d: %d signs differ from the input's (at %d, smallest %d)", ds_dtype_get(t)->name,
                      g, wrong, wrong_at, smallest);
            }
        }
        /* about half the groups have an odd count of negatives */
        if (!free_signs)
            CHECK(wrong_groups > N / 8 / 4 && wrong_groups < N / 8 * 3 / 4, "%s: %d groups with a flipped sign",
                  ds_dtype_get(t)->name, wrong_groups);
    }
}

static int all_finite(const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(y[i])) return 0;
    return 1;
}

/* Rows no real weight has: zeros, the float extremes, denormals, constants,
 * a single spike among zeros. Every one quantises to blocks that decode to
 * finite values; a zero row decodes to zeros; the same input always gives
 * the same bytes. */
static void test_edge_rows(void) {
    enum { N = 512, KINDS = 9 };
    float x[N], y[N];
    uint8_t q[N], q2[N];
    for (int ti = 0; ti < N_GRID_TYPES; ti++) {
        const ds_dtype t = grid_types[ti];
        const char *name = ds_dtype_get(t)->name;
        for (int kind = 0; kind < KINDS; kind++) {
            for (int i = 0; i < N; i++) {
                switch (kind) {
                case 0: x[i] = 0.0f; break;
                case 1: x[i] = i % 2 ? FLT_MAX : -FLT_MAX; break;
                case 2: x[i] = (float)(i % 7 - 3) * 1e-42f; break; /* denormals */
                case 3: x[i] = -0.3f; break;
                case 4: x[i] = i == 100 ? 5.0f : 0.0f; break;
                case 5: x[i] = i % 32 == 0 ? 3e38f : (float)(i % 5) * 1e-30f; break;
                case 6: x[i] = i < 256 ? 1e6f : 1e-6f; break;
                case 7: x[i] = (float)(i % 3) * 7e4f; break; /* beyond fp16's range */
                default: x[i] = i % 8 == 3 ? -1.0f : 0.0f; break; /* one negative per group */
                }
            }
            memset(q, 0xAB, sizeof q);
            ds_quantize_row(t, x, q, N);
            ds_dequantize_row(t, q, y, N);
            CHECK(all_finite(y, N), "%s edge row %d decodes to non-finite values", name, kind);
            memset(q2, 0x11, sizeof q2);
            ds_quantize_row(t, x, q2, N);
            CHECK(memcmp(q, q2, row_bytes(t, N)) == 0, "%s edge row %d: not deterministic", name, kind);
            if (kind == 0)
                for (int i = 0; i < N; i++)
                    if (y[i] != 0.0f) {
                        CHECK(0, "%s: zero row decodes %g at %d", name, y[i], i);
                        break;
                    }
            if (kind == 3 || kind == 7) { /* representable well enough to keep the sign and rough size */
                double err = 0, sig = 0;
                for (int i = 0; i < N; i++) {
                    err += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
                    sig += (double)x[i] * x[i];
                }
                CHECK(sqrt(err / sig) < 0.6, "%s edge row %d: rel rmse %g", name, kind, sqrt(err / sig));
            }
        }
    }
}

/* The codebook search tables are built on first use: several threads
 * quantising at once get the bytes one thread gets. Runs first, before any
 * other test has built them. */
typedef struct { ds_dtype t; const float *x; uint8_t *out; } quant_job;

static void *quant_thread(void *arg) {
    const quant_job *j = arg;
    ds_quantize_row(j->t, j->x, j->out, 1024);
    return NULL;
}

static void test_threads_build_tables_once(void) {
    enum { THREADS = 4, N = 1024 };
    static float x[N];
    static uint8_t out[N_GRID_TYPES][THREADS][N], want[N];
    rng r = {12};
    fill_row(&r, x, N, 1.0, 0.0, 1);
    pthread_t th[N_GRID_TYPES][THREADS];
    quant_job jobs[N_GRID_TYPES][THREADS];
    for (int ti = 0; ti < N_GRID_TYPES; ti++)
        for (int k = 0; k < THREADS; k++) {
            jobs[ti][k] = (quant_job){grid_types[ti], x, out[ti][k]};
            REQUIRE(pthread_create(&th[ti][k], NULL, quant_thread, &jobs[ti][k]) == 0, "thread");
        }
    for (int ti = 0; ti < N_GRID_TYPES; ti++)
        for (int k = 0; k < THREADS; k++) pthread_join(th[ti][k], NULL);
    for (int ti = 0; ti < N_GRID_TYPES; ti++) {
        ds_quantize_row(grid_types[ti], x, want, N);
        for (int k = 0; k < THREADS; k++)
            CHECK(memcmp(out[ti][k], want, row_bytes(grid_types[ti], N)) == 0, "%s thread %d",
                  ds_dtype_get(grid_types[ti])->name, k);
    }
}

/* ------------------------------------------------------------------------ */
/* --dump and --stats                                                        */

/* Per type: 4 quantised rows of 512 (Gaussian at three scales, one with a
 * zero and a constant block), then 256 random valid blocks. */
static int dump_reference_rows(const char *dir) {
    enum { ROWS = 4, N = 512, RANDOM_BLOCKS = 256 };
    for (int ti = 0; ti < N_GRID_TYPES; ti++) {
        const ds_dtype t = grid_types[ti];
        const ds_dtype_info *info = ds_dtype_get(t);
        const size_t rb = row_bytes(t, N), total = rb * ROWS + (size_t)RANDOM_BLOCKS * info->block_bytes;
        const int64_t elems = (int64_t)N * ROWS + (int64_t)RANDOM_BLOCKS * 256;
        uint8_t *bytes = malloc(total);
        float *decoded = malloc(sizeof(float) * (size_t)elems), x[N];
        rng r = {5000 + (uint64_t)ti};
        for (int row = 0; row < ROWS; row++) {
            static const double sigmas[ROWS] = {1.0, 0.01, 300.0, 0.05};
            fill_row(&r, x, N, sigmas[row], row == 3 ? 0.04 : 0.0, row >= 2);
            if (row == 3)
                for (int i = 0; i < N / 2; i++) x[i] = i < N / 4 ? 0.0f : -0.3f;
            ds_quantize_row(t, x, bytes + row * rb, N);
        }
        for (int b = 0; b < RANDOM_BLOCKS; b++) random_block(&r, t, bytes + ROWS * rb + (size_t)b * info->block_bytes);
        ds_dequantize_row(t, bytes, decoded, elems);
        const int failed = write_file(dir, info->name, "bin", bytes, total) ||
                           write_file(dir, info->name, "f32", decoded, sizeof(float) * (size_t)elems);
        free(bytes);
        free(decoded);
        if (failed) return 1;
    }
    return 0;
}

static void print_stats(void) {
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        const ds_dtype t = rmse_bounds[k].t;
        printf("%-8s gaussian %.4f  skewed %.4f  (n=4096 x 10 rows, relative rmse)\n", ds_dtype_get(t)->name,
               roundtrip_rel_rmse(t, 4096, 10, 1.0, 0.0, 0, 100 + k),
               roundtrip_rel_rmse(t, 4096, 10, 0.02, 0.015, 1, 200 + k));
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump_reference_rows(argv[2]);
    if (argc == 2 && strcmp(argv[1], "--stats") == 0) {
        print_stats();
        return 0;
    }
    RUN(test_threads_build_tables_once);
    RUN(test_tables_match_format);
    RUN(test_ids_and_sizes);
    RUN(test_iq2_xxs_hand_block);
    RUN(test_iq1_m_hand_block);
    RUN(test_iq3_s_hand_block);
    RUN(test_gblock_matches_dequant);
    RUN(test_gblock_block_index);
    RUN(test_levels_cover_decoded_levels);
    RUN(test_roundtrip_error_bounds);
    RUN(test_signs_follow_input);
    RUN(test_edge_rows);
    return ds_test_finish();
}
