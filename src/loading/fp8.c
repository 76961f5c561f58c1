/* fp8.c - see fp8.h. */
#include "loading/fp8.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"

float ds_fp8_e4m3_to_f32(uint8_t b) {
    int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
    float v;
    if (exp == 15 && man == 7) return NAN;
    if (exp == 0) v = ldexpf((float)man, -9);                 /* subnormal: man/8 * 2^-6 */
    else v = ldexpf((float)(8 + man), exp - 10);              /* (1 + man/8) * 2^(exp-7) */
    return sign ? -v : v;
}

static float scale_at(const ds_fp8_tensor *t, int64_t i) {
    if (t->scale_type == DS_F32) {
        float f;
        memcpy(&f, t->scale + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, t->scale + 2 * i, 2);
    return t->scale_type == DS_BF16 ? ds_bf16_to_f32(h) : ds_f16_to_f32(h);
}

/* The float nearest p, except that an inexact result has an odd last bit
 * ("round to odd"): rounding that to BF16 then gives BF16's correct rounding
 * of p, where rounding p to F32 first could round a second time. */
static float round_to_odd(double p) {
    float f = (float)p;
    if ((double)f == p) return f;
    uint32_t u = ds_f32_bits(f);
    if (!(u & 1)) u = fabs((double)f) > fabs(p) ? u - 1 : u + 1;
    return ds_bits_f32(u);
}

typedef struct {
    const ds_fp8_tensor *t;
    float lut[256];
    float *scratch;          /* one row per thread */
    int64_t n_rows, srows, scols;
    size_t row_bytes;
    atomic_llong next;
    atomic_int bad;          /* 0, 1: NaN weight, 2: bad scale */
    atomic_llong bad_at;     /* element (weight) or scale index */
} fp8_job;

static void note_bad(fp8_job *j, int kind, int64_t at) {
    int none = 0;
    if (atomic_compare_exchange_strong(&j->bad, &none, kind)) atomic_store(&j->bad_at, at);
}

static void convert_rows(void *ctx, int ith, int nth) {
    (void)nth;
    fp8_job *j = ctx;
    const ds_fp8_tensor *t = j->t;
    float *row = j->scratch + (size_t)ith * (size_t)t->cols;
    const int64_t chunk = t->cols >= 65536 ? 1 : 65536 / t->cols;
    for (;;) {
        int64_t r = atomic_fetch_add(&j->next, chunk);
        if (r >= j->n_rows || atomic_load(&j->bad)) break;
        int64_t end = r + chunk < j->n_rows ? r + chunk : j->n_rows;
        for (; r < end; r++) {
            int64_t mat = r / t->rows, rr = r % t->rows;
            const uint8_t *w = t->w + (size_t)r * (size_t)t->cols;
            int64_t srow = (mat * j->srows + rr / DS_FP8_BLOCK) * j->scols;
            for (int64_t c0 = 0; c0 < t->cols; c0 += DS_FP8_BLOCK) {
                float s = scale_at(t, srow + c0 / DS_FP8_BLOCK);
                if (!(s >= 0) || isinf(s)) { note_bad(j, 2, srow + c0 / DS_FP8_BLOCK); return; }
                int64_t c1 = c0 + DS_FP8_BLOCK < t->cols ? c0 + DS_FP8_BLOCK : t->cols;
                for (int64_t c = c0; c < c1; c++) {
                    float v = j->lut[w[c]];
                    if (v != v) { note_bad(j, 1, r * t->cols + c); return; }
                    double p = (double)v * (double)s; /* exact: 4 + 24 significant bits */
                    row[c] = t->out_type == DS_BF16 ? round_to_odd(p) : (float)p;
                }
            }
            ds_quantize_row(t->out_type, row, t->out + (size_t)r * j->row_bytes, t->cols);
        }
    }
}

ds_status ds_fp8_convert(ds_pool *pool, const ds_fp8_tensor *t, const char *path, ds_err *e) {
    fp8_job *j = calloc(1, sizeof *j);
    if (!j) return ds_fail(e, DS_ENOMEM, "%s: out of memory converting tensor '%s'", path, t->name);
    j->t = t;
    for (int b = 0; b < 256; b++) j->lut[b] = ds_fp8_e4m3_to_f32((uint8_t)b);
    j->n_rows = t->mats * t->rows;
    j->srows = (t->rows + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK;
    j->scols = (t->cols + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK;
    j->row_bytes = ds_dtype_row_bytes(t->out_type, t->cols);
    j->scratch = malloc((size_t)ds_pool_threads(pool) * (size_t)(t->cols ? t->cols : 1) * sizeof(float));
    if (!j->scratch) {
        free(j);
        return ds_fail(e, DS_ENOMEM, "%s: out of memory converting tensor '%s'", path, t->name);
    }
    atomic_init(&j->next, 0);
    atomic_init(&j->bad, 0);
    atomic_init(&j->bad_at, 0);
    if (j->n_rows > 0 && t->cols > 0) ds_pool_run(pool, convert_rows, j);
    ds_status s = DS_OK;
    long long at = atomic_load(&j->bad_at);
    if (atomic_load(&j->bad) == 1)
        s = ds_fail(e, DS_ECORRUPT, "%s: tensor '%s' holds a NaN (float8 byte 0x%02x) at element %lld", path, t->name,
                    t->w[at], at);
    else if (atomic_load(&j->bad) == 2)
        s = ds_fail(e, DS_ECORRUPT, "%s: tensor '%s_scale_inv': block scale %lld is %g, not a finite number >= 0",
                    path, t->name, at, (double)scale_at(t, at));
    free(j->scratch);
    free(j);
    return s;
}

uint8_t ds_fp8_e4m3_from_f32(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a != a) return 0x7f;
    if (a >= 448.0f) return sign | 0x7e; /* saturate: e4m3fn has no infinity */
    if (a < 0x1p-6f) return sign | (uint8_t)lrintf(a * 512.0f); /* subnormal steps of 2^-9; 8 is 2^-6 itself */
    int e;
    frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    e -= 1;        /* a = (1 + m/8) * 2^e */
    long m = lrintf(ldexpf(a, -e) * 8.0f) - 8;
    if (m == 8) {
        m = 0;
        e++;
    }
    if (e + 7 > 15 || (e + 7 == 15 && m == 7)) return sign | 0x7e;
    return sign | (uint8_t)((e + 7) << 3) | (uint8_t)m;
}

void ds_fp8_block_scales(const float *x, int64_t rows, int64_t cols, float *scales) {
    int64_t sc = (cols + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK, sr = (rows + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK;
    for (int64_t i = 0; i < sr * sc; i++) scales[i] = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float *s = &scales[(r / DS_FP8_BLOCK) * sc + c / DS_FP8_BLOCK], a = fabsf(x[r * cols + c]);
            if (a > *s) *s = a;
        }
    for (int64_t i = 0; i < sr * sc; i++) scales[i] /= 448.0f;
}

void ds_fp8_quantize(const float *x, int64_t rows, int64_t cols, const float *scales, uint8_t *q) {
    int64_t sc = (cols + DS_FP8_BLOCK - 1) / DS_FP8_BLOCK;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float s = scales[(r / DS_FP8_BLOCK) * sc + c / DS_FP8_BLOCK];
            q[r * cols + c] = ds_fp8_e4m3_from_f32(s > 0 ? x[r * cols + c] / s : 0.0f);
        }
}
