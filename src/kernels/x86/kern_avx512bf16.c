/* kern_avx512bf16.c - BF16 x BF16 matrix product with VDPBF16PS (AVX512_BF16).
 * Built with -mavx512bf16: call only when ds_cpu()->avx512bf16.
 *
 * Numbers: per output one accumulator of 16 lanes over steps of 32 elements
 * (the last step zero-padded), a lane adding the products of an element pair,
 * then a fixed tree over the lanes. The pairing differs from the reference's
 * order, so results match it to rounding, not bitwise; they never depend on
 * the batch or the thread count.
 *
 * Order: with one or two tokens (decode), one weight row at a time, a single
 * sequential stream per thread, which memory serves far better than several
 * interleaved rows; with more, tiles of 4 rows x 4 tokens, 16 dot products
 * per step, rows in L1 while every token tile passes. Both compute each
 * output the same way. */
#include <immintrin.h>

#include "kernels/kern.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

INLINE __m512bh ldbh(const uint16_t *p, __mmask32 k) { return (__m512bh)_mm512_maskz_loadu_epi16(k, p); }

INLINE __mmask32 step_mask(int64_t K, int64_t k) {
    return K - k >= 32 ? ~(__mmask32)0 : (__mmask32)((1ull << (K - k)) - 1);
}

INLINE void tile(const ds_mm *m, int64_t r, const int RT, int64_t t0, const int TT) {
    int64_t K = m->w->cols;
    const uint16_t *rows[4], *xs[4];
    UNROLL for (int i = 0; i < RT; i++) rows[i] = (const uint16_t *)m->w->data + (r + i) * K;
    UNROLL for (int t = 0; t < TT; t++) xs[t] = m->xb + (t0 + t) * K;
    __m512 acc[4][4];
    UNROLL for (int i = 0; i < RT; i++) UNROLL for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
        __mmask32 mk = step_mask(K, k);
        if (RT == 1) _mm_prefetch((const char *)(rows[0] + k + 1024), _MM_HINT_T0);
        __m512bh xv[4];
        UNROLL for (int t = 0; t < TT; t++) xv[t] = ldbh(xs[t] + k, mk);
        UNROLL for (int i = 0; i < RT; i++) {
            __m512bh wv = ldbh(rows[i] + k, mk);
            UNROLL for (int t = 0; t < TT; t++) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv, xv[t]);
        }
    }
    UNROLL for (int i = 0; i < RT; i++) UNROLL for (int t = 0; t < TT; t++)
        m->y[(t0 + t) * m->ldy + r + i] = _mm512_reduce_add_ps(acc[i][t]);
}

void ds_mm_bf16_avx512bf16(const ds_mm *m, int64_t r0, int64_t r1) {
    if (m->n <= 2) { /* decode: one row, one stream */
        for (int64_t r = r0; r < r1; r++) {
            if (m->n == 1) tile(m, r, 1, 0, 1);
            else tile(m, r, 1, 0, 2);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r += 4) {
        int rt = (int)(r1 - r < 4 ? r1 - r : 4);
        for (int64_t t = 0; t < m->n; t += 4) {
            int tt = (int)(m->n - t < 4 ? m->n - t : 4);
            if (rt == 4) switch (tt) {
                case 1: tile(m, r, 4, t, 1); break;
                case 2: tile(m, r, 4, t, 2); break;
                case 3: tile(m, r, 4, t, 3); break;
                default: tile(m, r, 4, t, 4); break;
                }
            else for (int i = 0; i < rt; i++) switch (tt) {
                case 1: tile(m, r + i, 1, t, 1); break;
                case 2: tile(m, r + i, 1, t, 2); break;
                case 3: tile(m, r + i, 1, t, 3); break;
                default: tile(m, r + i, 1, t, 4); break;
                }
        }
    }
}
