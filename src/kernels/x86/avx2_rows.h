/* avx2_rows.h - the loads and the row store both AVX2 matrix kernels
 * (kern_avx2.c, kern_gblock_avx2.c) read their packed layout with. Include
 * only from files built with -mavx2. */
#ifndef DS_AVX2_ROWS_H
#define DS_AVX2_ROWS_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* 4 int8 broadcast to every 32-bit lane */
static inline __attribute__((always_inline)) __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline __attribute__((always_inline)) __m256i ld(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

/* 8 int8 widened to int32 */
static inline __attribute__((always_inline)) __m256i i8x8_epi32(const uint8_t *p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* 8 rows of results, or the first nrows of them at a matrix's last rows */
static inline __attribute__((always_inline)) void store_rows(float *y, __m256 v, int nrows) {
    if (nrows >= 8) {
        _mm256_storeu_ps(y, v);
    } else {
        float l[8];
        _mm256_storeu_ps(l, v);
        for (int i = 0; i < nrows; i++) y[i] = l[i];
    }
}

#endif
