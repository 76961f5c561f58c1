/* kern_avx512bf16.c - BF16 x BF16 matrix product with VDPBF16PS (AVX512_BF16).
 * Built with -mavx512bf16: call only when ds_cpu()->avx512bf16. Each output
 * keeps 16 lanes; a lane adds the products of an element pair per step of 32
 * elements, then the lanes are summed with a fixed tree. The pairing differs
 * from the reference's order, so results match it to rounding, not bitwise;
 * they still never depend on the batch or the thread count. */
#include <immintrin.h>

#include "kernels/kern.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

INLINE __m512bh ldbh(const uint16_t *p, __mmask32 k) { return (__m512bh)_mm512_maskz_loadu_epi16(k, p); }

INLINE void tile(const ds_mm *m, int64_t r, const int RT, int64_t t0, const int TT) {
    int64_t K = m->w->cols;
    const uint16_t *rows[4], *xs[4];
    UNROLL for (int i = 0; i < RT; i++) rows[i] = (const uint16_t *)m->w->data + (r + i) * K;
    UNROLL for (int t = 0; t < TT; t++) xs[t] = m->xb + (t0 + t) * K;
    __m512 acc[4][4];
    UNROLL for (int i = 0; i < RT; i++)
        UNROLL for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512bh xv[4];
        UNROLL for (int t = 0; t < TT; t++) xv[t] = ldbh(xs[t] + k, ~(__mmask32)0);
        UNROLL for (int i = 0; i < RT; i++) {
            __m512bh wv = ldbh(rows[i] + k, ~(__mmask32)0);
            UNROLL for (int t = 0; t < TT; t++) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv, xv[t]);
        }
    }
    if (k < K) {
        __mmask32 mk = (__mmask32)((1ull << (K - k)) - 1);
        __m512bh xv[4];
        UNROLL for (int t = 0; t < TT; t++) xv[t] = ldbh(xs[t] + k, mk);
        UNROLL for (int i = 0; i < RT; i++) {
            __m512bh wv = ldbh(rows[i] + k, mk);
            UNROLL for (int t = 0; t < TT; t++) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv, xv[t]);
        }
    }
    UNROLL for (int i = 0; i < RT; i++)
        UNROLL for (int t = 0; t < TT; t++) m->y[(t0 + t) * m->ldy + r + i] = _mm512_reduce_add_ps(acc[i][t]);
}

void ds_mm_bf16_avx512bf16(const ds_mm *m, int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < m->n; t += 4) {
        int tt = (int)(m->n - t < 4 ? m->n - t : 4);
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) switch (tt) {
            case 1: tile(m, r, 4, t, 1); break;
            case 2: tile(m, r, 4, t, 2); break;
            case 3: tile(m, r, 4, t, 3); break;
            default: tile(m, r, 4, t, 4); break;
            }
        for (; r < r1; r++) switch (tt) {
            case 1: tile(m, r, 1, t, 1); break;
            case 2: tile(m, r, 1, t, 2); break;
            case 3: tile(m, r, 1, t, 3); break;
            default: tile(m, r, 1, t, 4); break;
            }
    }
}
