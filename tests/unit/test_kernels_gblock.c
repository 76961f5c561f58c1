/* test_kernels_gblock.c - the types computed through the common integer form
 * (gblock.h), every one whose decoder is built in: the level tables and
 * decoders, the packed layout read back, and the matrix product on every
 * kernel path this CPU has, bit for bit against the scalar reference, over
 * odd sizes (rows not a multiple of 16; 1, 3, 17 and 64 tokens), with the
 * reference itself checked against the F32 product of the decoded weights;
 * batch and thread-count invariance through the CPU backend; nvfp4 widened
 * to BF16 exactly. Weights are random block bytes with finite scale fields. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "kernels/backend.h"
#include "kernels/gblock.h"
#include "kernels/kern.h"
#include "numeric_testing.h"
#include "testing.h"

static const ds_isa simd_levels[] = {DS_ISA_AVX2, DS_ISA_AVX512};

/* a finite fp16 scale of either sign, zero now and then */
static uint16_t rand_scale(rng *r, int zero_sometimes) {
    if (zero_sometimes && rng_next(r) % 5 == 0) return 0;
    float v = 0.002f + 0.03f * fabsf(rng_symmetric(r));
    return ds_f32_to_f16(rng_next(r) & 1 ? -v : v);
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* One row of random valid blocks of type t: random bytes, then the scale
 * fields made finite (and some mins zero, so that rows with and without a
 * min share a group). */
static void rand_row(ds_dtype t, uint8_t *row, int64_t cols, rng *r) {
    const ds_dtype_info *ti = ds_dtype_get(t);
    size_t rb = ds_dtype_row_bytes(t, cols);
    for (size_t k = 0; k < rb; k++) row[k] = (uint8_t)rng_next(r);
    for (int64_t b = 0; b < cols / ti->block_elems; b++) {
        uint8_t *x = row + (size_t)b * (size_t)ti->block_bytes;
        switch (t) {
        case DS_Q4_1:
        case DS_Q5_1: put16(x, rand_scale(r, 0)), put16(x + 2, rand_scale(r, 1)); break;
        case DS_Q2_K: put16(x + 80, rand_scale(r, 0)), put16(x + 82, rand_scale(r, 1)); break;
        case DS_Q3_K: put16(x + 108, rand_scale(r, 0)); break;
        case DS_TQ1_0: put16(x + 52, rand_scale(r, 0)); break;
        case DS_TQ2_0: put16(x + 64, rand_scale(r, 0)); break;
        case DS_MXFP4: x[0] = (uint8_t)(110 + rng_next(r) % 41); break; /* 2^-18 .. 2^22: beyond f16 at the top */
        case DS_IQ1_M: x[55] &= 0xBF; break; /* the scale spread over the top nibbles: exponent below 31 */
        case DS_NVFP4: break;                /* every byte is a finite UE4M3 scale */
        default: put16(x, rand_scale(r, 0)); break; /* d first: the legacy, iq4 and grid blocks */
        }
    }
}

static uint8_t *rand_matrix(ds_dtype t, int64_t rows, int64_t cols, rng *r) {
    size_t rb = ds_dtype_row_bytes(t, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    for (int64_t i = 0; i < rows; i++) rand_row(t, w + (size_t)i * rb, cols, r);
    return w;
}

typedef struct {
    ds_xq xq;
    void *buf;
    float *x;
} acts;

static void acts_make(acts *a, int64_t n, int64_t K, rng *r) {
    a->x = malloc((size_t)(n * K) * sizeof(float));
    for (int64_t i = 0; i < n * K; i++) a->x[i] = rng_symmetric(r) * (i % 7 == 0 ? 8.0f : 1.0f);
    a->buf = aligned_alloc(64, (ds_xq_bytes(n, K) + 63) / 64 * 64);
    ds_xq_init(&a->xq, a->buf, n, K);
    for (int64_t t = 0; t < n; t++) ds_quant_x_ref(&a->xq, t, a->x + t * K);
}

static void acts_free(acts *a) {
    free(a->x);
    free(a->buf);
}

/* y (rows + 3 apart) = W x for n tokens on kernel table k, split in two row ranges as two threads would */
static void run_mm(const ds_kern *k, ds_dtype t, const uint8_t *w, int64_t rows, int64_t cols, const ds_xq *xq,
                   int64_t n, float *y) {
    ds_wmat wm = {.type = t, .rows = rows, .cols = cols, .data = w};
    uint8_t *packed = NULL;
    if (k->packs) {
        size_t bytes = ds_pack_plan(&wm);
        packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ds_pack_groups(&wm, packed, 0, (rows + DS_QG - 1) / DS_QG);
        wm.packed = packed;
    }
    ds_mm m = {.y = y, .ldy = rows + 3, .w = &wm, .n = n, .xq = xq};
    int64_t mid = rows > 16 ? 16 : rows;
    k->mm[t](&m, 0, mid);
    if (mid < rows) k->mm[t](&m, mid, rows);
    free(packed);
}

static int n_types(ds_dtype *out) {
    int n = 0;
    for (int t = 0; t < DS_DTYPE_COUNT; t++)
        if (ds_gblock_type((ds_dtype)t)) out[n++] = (ds_dtype)t;
    return n;
}

static void test_paths_and_types(void) {
    ds_dtype ts[DS_DTYPE_COUNT];
    int n = n_types(ts);
    printf("     paths: ref ran");
    for (size_t li = 0; li < sizeof simd_levels / sizeof simd_levels[0]; li++)
        printf(", %s %s", ds_isa_name(simd_levels[li]), simd_levels[li] <= ds_cpu_best_level() ? "ran" : "skipped (not on this cpu)");
    printf("\n     gblock types:");
    for (int i = 0; i < n; i++) printf(" %s", ds_dtype_get(ts[i])->name);
    printf("\n     not computed through the form:");
    for (int t = DS_Q4_1; t < DS_DTYPE_COUNT; t++)
        if (!ds_gblock_type((ds_dtype)t)) printf(" %s", ds_dtype_get((ds_dtype)t)->name);
    printf("\n");
    /* the ten low-bit types are always of the form; the grid types join with their decoders */
    static const ds_dtype lowbit[] = {DS_Q4_1, DS_Q5_0, DS_Q5_1,  DS_Q2_K,  DS_Q3_K,
                                      DS_IQ4_NL, DS_IQ4_XS, DS_MXFP4, DS_TQ1_0, DS_TQ2_0};
    for (size_t i = 0; i < sizeof lowbit / sizeof lowbit[0]; i++)
        CHECK(ds_gblock_type(lowbit[i]) && ds_dtype_computable(lowbit[i]), "%s is not computed",
              ds_dtype_get(lowbit[i])->name);
    CHECK(!ds_gblock_type(DS_NVFP4) && ds_dtype_computable(DS_NVFP4), "nvfp4: widened to bf16, not of the form");
    CHECK(!ds_gblock_type(DS_Q4_0) && !ds_gblock_type(DS_Q4_K), "the dedicated kernels' types are not of the form");
}

/* tables ascending and distinct; every decoded level in its table; the form
 * read back equals the format's dequantisation where that is built in */
static void test_levels_and_decoders(void) {
    ds_dtype ts[DS_DTYPE_COUNT];
    int n = n_types(ts);
    rng r = {3};
    for (int i = 0; i < n; i++) {
        ds_dtype t = ts[i];
        const ds_glevels *l = ds_gblock_levels(t);
        int sorted = l->count >= 2 && l->count <= 32;
        for (int k = 1; k < l->count; k++) sorted &= l->lv[k] > l->lv[k - 1];
        CHECK(sorted, "%s: level table of %d not ascending", ds_dtype_get(t)->name, l->count);
        int64_t cols = 512;
        uint8_t *w = rand_matrix(t, 8, cols, &r);
        size_t rb = ds_dtype_row_bytes(t, cols);
        int outside = 0, differ = 0, dequant_built = 1;
        float a[512], b[512];
        for (int row = 0; row < 8; row++) {
            for (int64_t blk = 0; blk < cols / 32; blk++) {
                ds_gblock g;
                ds_gblock_decode(t, w + (size_t)row * rb, blk, &g);
                for (int e = 0; e < 32; e++) {
                    int found = 0;
                    for (int k = 0; k < l->count; k++) found |= l->lv[k] == g.lv[e];
                    outside += !found;
                }
            }
            ds_gblock_row(t, w + (size_t)row * rb, a, cols);
            for (int e = 0; e < 512; e++) b[e] = NAN;
            ds_dequantize_row(t, w + (size_t)row * rb, b, cols);
            if (isnan(b[0]) && isnan(b[511])) dequant_built = 0;
            for (int e = 0; dequant_built && e < 512; e++) differ += !(a[e] == b[e]);
        }
        CHECK(outside == 0, "%s: %d decoded levels outside the table", ds_dtype_get(t)->name, outside);
        CHECK(differ == 0, "%s: %d values of the integer form differ from the format's dequantisation",
              ds_dtype_get(t)->name, differ);
        if (!dequant_built) printf("     %s: format dequantisation not built in, form not compared\n", ds_dtype_get(t)->name);
        free(w);
    }
}

/* a packed row read back gives the form's floats, whatever the packed form */
static void test_unpack_row(void) {
    ds_dtype ts[DS_DTYPE_COUNT];
    int n = n_types(ts);
    rng r = {5};
    for (int i = 0; i < n; i++) {
        ds_dtype t = ts[i];
        int64_t rows = 21, cols = 512;
        uint8_t *w = rand_matrix(t, rows, cols, &r);
        ds_wmat wm = {.type = t, .rows = rows, .cols = cols, .data = w};
        size_t bytes = ds_pack_plan(&wm);
        REQUIRE(!(wm.form & DS_GF_BAD), "%s: form %d", ds_dtype_get(t)->name, wm.form);
        uint8_t *packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ds_pack_groups(&wm, packed, 0, (rows + DS_QG - 1) / DS_QG);
        wm.packed = packed;
        float a[512], b[512];
        int bad = 0;
        for (int64_t k = 0; k < rows; k++) {
            ds_gblock_row(t, w + (size_t)k * ds_dtype_row_bytes(t, cols), a, cols);
            ds_unpack_row(&wm, k, b);
            bad += memcmp(a, b, sizeof a) != 0;
        }
        CHECK(bad == 0, "%s (form %d): %d rows differ", ds_dtype_get(t)->name, wm.form, bad);
        printf("     %s: packed as%s%s%s%s, %zu bytes per 16 x 32\n", ds_dtype_get(t)->name,
               wm.form & DS_GF_D32 ? " f32 scales" : " f16 scales", wm.form & DS_GF_SC ? ", integer scales" : "",
               wm.form & DS_GF_MIN ? (wm.form & DS_GF_MNS ? ", integer mins" : ", unit mins") : "", wm.form & DS_GF_FIVE ? ", five-bit indices" : "", wm.sb_bytes);
        free(packed);
        free(w);
    }
}

/* The reference against the double product of the decoded weights and the
 * dequantised activations (q dx): only F32 rounding apart, 1e-5 of the
 * largest output; then every SIMD path bit for bit against the reference. */
static void check_products(ds_dtype t, int64_t cols, int64_t rows, rng *r) {
    static const int64_t ns[] = {1, 3, 17, 64};
    uint8_t *w = rand_matrix(t, rows, cols, r);
    acts a;
    acts_make(&a, 64, cols, r);
    size_t ysz = (size_t)64 * (size_t)(rows + 3);
    float *want = calloc(ysz, sizeof(float)), *got = calloc(ysz, sizeof(float));
    const char *name = ds_dtype_get(t)->name;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        int64_t n = ns[ni];
        run_mm(&ds_kern_ref, t, w, rows, cols, &a.xq, n, want);
        if (ni == 0) {
            float *row = malloc((size_t)cols * sizeof(float)), *f = malloc((size_t)rows * sizeof(float));
            for (int64_t i = 0; i < rows; i++) {
                ds_gblock_row(t, w + (size_t)i * ds_dtype_row_bytes(t, cols), row, cols);
                double s = 0;
                for (int64_t c = 0; c < cols; c++) s += (double)row[c] * a.xq.q[c] * a.xq.d[c / 32];
                f[i] = (float)s;
            }
            double d = rel_diff(want, f, (size_t)rows);
            CHECK(d <= 1e-5, "%s %lldx%lld: reference vs decoded product: %.3e", name, (long long)rows, (long long)cols, d);
            free(row);
            free(f);
        }
        for (size_t li = 0; li < sizeof simd_levels / sizeof simd_levels[0]; li++) {
            if (simd_levels[li] > ds_cpu_best_level()) continue;
            const ds_kern *k = ds_kern_for(simd_levels[li]);
            memset(got, 0, ysz * sizeof(float));
            run_mm(k, t, w, rows, cols, &a.xq, n, got);
            int same = 1;
            for (int64_t tt = 0; tt < n; tt++)
                same &= memcmp(got + tt * (rows + 3), want + tt * (rows + 3), (size_t)rows * sizeof(float)) == 0;
            CHECK(same, "%s %s: %lld rows x %lld cols, %lld tokens: differs from the reference (rel %.2e)",
                  ds_isa_name(simd_levels[li]), name, (long long)rows, (long long)cols, (long long)n,
                  rel_diff(got, want, ysz));
        }
    }
    free(want);
    free(got);
    acts_free(&a);
    free(w);
}

static void test_products_match_reference(void) {
    ds_dtype ts[DS_DTYPE_COUNT];
    int n = n_types(ts);
    static const int64_t rowss[] = {1, 5, 17, 40};
    for (int i = 0; i < n; i++) {
        ds_dtype t = ts[i];
        rng r = {(uint64_t)t * 131 + 7};
        int be = ds_dtype_get(t)->block_elems;
        int64_t colss[3] = {be, 3 * be, be == 32 ? 2048 : 1024};
        for (int ci = 0; ci < 3; ci++)
            for (size_t ri = 0; ri < sizeof rowss / sizeof rowss[0]; ri++) check_products(t, colss[ci], rowss[ri], &r);
    }
}

/* Through the CPU backend (packing, form scan and row split all on the pool):
 * the same bits with 1 and 3 threads, a token's outputs the same alone and
 * among 33, and rows looked up (embeddings) as the form reads them. */
static void test_backend_batch_and_threads(void) {
    ds_dtype ts[DS_DTYPE_COUNT];
    int n = n_types(ts);
    const int64_t rows = 37, cols = 768, ntok = 33;
    ds_err e;
    ds_backend *be1 = NULL, *be3 = NULL;
    REQUIRE(ds_backend_cpu_new(1, &be1, &e) == DS_OK, "%s", e.msg);
    REQUIRE(ds_backend_cpu_new(3, &be3, &e) == DS_OK, "%s", e.msg);
    rng r = {17};
    float *x = malloc((size_t)(ntok * cols) * sizeof(float));
    for (int64_t i = 0; i < ntok * cols; i++) x[i] = rng_symmetric(&r);
    for (int i = 0; i < n; i++) {
        ds_dtype t = ts[i];
        const char *name = ds_dtype_get(t)->name;
        uint8_t *w = rand_matrix(t, rows, cols, &r);
        ds_mat src = {.type = t, .data = w, .rows = rows, .cols = cols};
        ds_bweight *w1, *w3;
        REQUIRE(ds_be_weight_new(be1, &src, DS_W_MATMUL | DS_W_ROWS, &w1, &e) == DS_OK, "%s", e.msg);
        REQUIRE(ds_be_weight_new(be3, &src, DS_W_MATMUL | DS_W_ROWS, &w3, &e) == DS_OK, "%s", e.msg);
        ds_be_limits lim = {.max_rows = (int)ntok, .max_group_rows = (int)ntok};
        REQUIRE(be1->ops->reserve(be1, &lim, &e) == DS_OK, "%s", e.msg);
        REQUIRE(be3->ops->reserve(be3, &lim, &e) == DS_OK, "%s", e.msg);
        float *y1 = ds_be_alloc(be1, (size_t)(ntok * rows) * 4), *y3 = ds_be_alloc(be3, (size_t)(ntok * rows) * 4);
        float *ya = ds_be_alloc(be3, (size_t)rows * 4);
        ds_be_matmul1(be1, y1, rows, w1, x, cols, ntok);
        ds_be_matmul1(be3, y3, rows, w3, x, cols, ntok);
        CHECK(memcmp(y1, y3, (size_t)(ntok * rows) * 4) == 0, "%s: 1 and 3 threads differ", name);
        int alone_differs = 0;
        for (int64_t tk = 0; tk < ntok; tk += 8) {
            ds_be_matmul1(be3, ya, rows, w3, x + tk * cols, cols, 1);
            alone_differs += memcmp(ya, y3 + tk * rows, (size_t)rows * 4) != 0;
        }
        CHECK(alone_differs == 0, "%s: %d tokens differ alone and in a batch of %lld", name, alone_differs, (long long)ntok);
        int32_t ids[3] = {0, 17, 36};
        float *got = malloc(3 * (size_t)cols * 4), *want = malloc((size_t)cols * 4);
        be3->ops->get_rows(be3, got, w3, ids, 3);
        int rows_differ = 0;
        for (int k = 0; k < 3; k++) {
            ds_gblock_row(t, w + (size_t)ids[k] * ds_dtype_row_bytes(t, cols), want, cols);
            rows_differ += memcmp(got + (size_t)k * (size_t)cols, want, (size_t)cols * 4) != 0;
        }
        CHECK(rows_differ == 0, "%s: %d looked-up rows differ from the form's", name, rows_differ);
        free(got);
        free(want);
        ds_be_free_buf(be1, y1);
        ds_be_free_buf(be3, y3);
        ds_be_free_buf(be3, ya);
        ds_be_weight_free(be1, w1);
        ds_be_weight_free(be3, w3);
        free(w);
    }
    free(x);
    ds_be_free(be1);
    ds_be_free(be3);
}

/* nvfp4: every block byte pattern widened to BF16 is E2M1 times the scale
 * exactly, and products run on the widened copy */
static void test_nvfp4_widened(void) {
    rng r = {23};
    const int64_t rows = 19, cols = 256;
    uint8_t *w = rand_matrix(DS_NVFP4, rows, cols, &r);
    size_t rb = ds_dtype_row_bytes(DS_NVFP4, cols);
    uint16_t *h = malloc((size_t)(rows * cols) * 2);
    static const int8_t e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    int inexact = 0;
    for (int64_t i = 0; i < rows; i++) {
        ds_nvfp4_row_bf16(w + (size_t)i * rb, h + i * cols, cols);
        const ds_block_nvfp4 *b = (const ds_block_nvfp4 *)(w + (size_t)i * rb);
        for (int64_t c = 0; c < cols; c++) {
            const ds_block_nvfp4 *x = b + c / 64;
            int s = (int)(c % 64) / 16, j = (int)(c % 16);
            uint8_t q = x->qs[8 * s + j % 8], code = x->d[s];
            int v = e2m1x2[j < 8 ? q & 0xF : q >> 4];
            int ex = (code >> 3) & 0xF, m = code & 7;
            double sc = code == 0 || code == 0x7F ? 0 : ex == 0 ? ldexp(m, -9) : ldexp(1 + m / 8.0, ex - 7);
            inexact += (double)ds_bf16_to_f32(h[i * cols + c]) != v * sc * 0.5;
        }
    }
    CHECK(inexact == 0, "%d widened values differ from E2M1 x UE4M3", inexact);
    ds_err e;
    ds_backend *be = NULL;
    REQUIRE(ds_backend_cpu_new(2, &be, &e) == DS_OK, "%s", e.msg);
    ds_mat a = {.type = DS_NVFP4, .data = w, .rows = rows, .cols = cols};
    ds_mat bm = {.type = DS_BF16, .data = (const uint8_t *)h, .rows = rows, .cols = cols};
    ds_bweight *wa, *wb;
    REQUIRE(ds_be_weight_new(be, &a, DS_W_MATMUL | DS_W_ROWS, &wa, &e) == DS_OK, "%s", e.msg);
    REQUIRE(ds_be_weight_new(be, &bm, DS_W_MATMUL | DS_W_ROWS, &wb, &e) == DS_OK, "%s", e.msg);
    ds_be_limits lim = {.max_rows = 5, .max_group_rows = 5};
    REQUIRE(be->ops->reserve(be, &lim, &e) == DS_OK, "%s", e.msg);
    float *x = ds_be_alloc(be, 5 * (size_t)cols * 4), *ya = ds_be_alloc(be, 5 * (size_t)rows * 4);
    float *yb = ds_be_alloc(be, 5 * (size_t)rows * 4);
    for (int64_t i = 0; i < 5 * cols; i++) x[i] = rng_symmetric(&r);
    ds_be_matmul1(be, ya, rows, wa, x, cols, 5);
    ds_be_matmul1(be, yb, rows, wb, x, cols, 5);
    CHECK(memcmp(ya, yb, 5 * (size_t)rows * 4) == 0, "nvfp4 product differs from its bf16 copy's");
    int32_t id = 7;
    float ra[256], rbf[256];
    be->ops->get_rows(be, ra, wa, &id, 1);
    be->ops->get_rows(be, rbf, wb, &id, 1);
    CHECK(memcmp(ra, rbf, sizeof ra) == 0, "nvfp4 row lookup differs");
    ds_be_free_buf(be, x);
    ds_be_free_buf(be, ya);
    ds_be_free_buf(be, yb);
    ds_be_weight_free(be, wa);
    ds_be_weight_free(be, wb);
    ds_be_free(be);
    free(h);
    free(w);
}

int main(void) {
    RUN(test_paths_and_types);
    RUN(test_levels_and_decoders);
    RUN(test_unpack_row);
    RUN(test_products_match_reference);
    RUN(test_backend_batch_and_threads);
    RUN(test_nvfp4_widened);
    return ds_test_finish();
}
