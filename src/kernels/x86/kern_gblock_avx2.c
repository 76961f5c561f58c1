/* kern_gblock_avx2.c - the gblock types (gblock.h) on AVX2, one kernel for
 * every such type, on the packed layout read as two halves of 8 rows (the
 * low and high 32 bytes of each 64-byte k-step). Level indices are looked up
 * with VPSHUFB into signed int8 levels; VPMADDUBSW takes |level| times the
 * activation with the level's sign (each 16-bit pair at most 2 x 128 x 127,
 * no saturation). The numbers are kern.h NUMERICS'. Built with -mavx2 -mfma
 * -mf16c: call only when ds_cpu_level() >= AVX2. */
#include <immintrin.h>

#include "kernels/gblock.h"
#include "kernels/kern.h"
#include "kernels/x86/avx2_rows.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define TT_MAX 4

typedef struct {
    __m256i lo, hi; /* levels of indices 0..15 and 16..31, in both 128-bit lanes */
    ds_gform f;
    int form;
} gtab;

/* 8 scales (rows 8h..8h+7) */
INLINE __m256 scales8(const uint8_t *p, int h, int f32) {
    return f32 ? _mm256_loadu_ps((const float *)p + 8 * h) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
}

INLINE void levels(__m256i *w, const uint8_t *gp, int h, const gtab *tb) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    UNROLL for (int i = 0; i < 4; i++) {
        __m256i v = ld(gp + 64 * i + 32 * h);
        __m256i a = _mm256_and_si256(v, m), b = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
        w[i] = _mm256_shuffle_epi8(tb->lo, a);
        w[i + 4] = _mm256_shuffle_epi8(tb->lo, b);
        if (tb->form & DS_GF_FIVE) {
            __m256i hb = ld(gp + tb->f.hb + 32 * h);
            __m256i ba = _mm256_set1_epi8((char)(1 << i)), bb = _mm256_set1_epi8((char)(1 << (i + 4)));
            w[i] = _mm256_blendv_epi8(w[i], _mm256_shuffle_epi8(tb->hi, a), _mm256_cmpeq_epi8(_mm256_and_si256(hb, ba), ba));
            w[i + 4] = _mm256_blendv_epi8(w[i + 4], _mm256_shuffle_epi8(tb->hi, b),
                                          _mm256_cmpeq_epi8(_mm256_and_si256(hb, bb), bb));
        }
    }
}

/* sum over k-steps [s0, s0 + 4) of signed levels times x */
INLINE __m256i dot4(const __m256i *aw, const __m256i *sw, const int8_t *xq, int s0) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    UNROLL for (int s = s0; s < s0 + 4; s++) {
        __m256i p = _mm256_maddubs_epi16(aw[s], _mm256_sign_epi8(bcast4(xq + 4 * s), sw[s]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    return acc;
}

INLINE void tile(const ds_mm *m, const uint8_t *gp, int h, int64_t t0, const int TT, float *y, int nrows, const gtab *tb,
                 const int split) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32;
    const int form = tb->form, f32 = form & DS_GF_D32;
    const ds_gform f = tb->f;
    __m256 acc[TT_MAX];
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, gp += f.bytes) {
        __m256i sw[8], aw[8];
        levels(sw, gp, h, tb);
        UNROLL for (int s = 0; s < 8; s++) aw[s] = _mm256_abs_epi8(sw[s]);
        __m256 dv = scales8(gp + f.d, h, f32);
        __m256i sca = _mm256_setzero_si256(), scb = sca;
        if (form & DS_GF_SC) {
            sca = i8x8_epi32(gp + f.sc + 8 * h);
            if (split) scb = i8x8_epi32(gp + f.sc + 16 + 8 * h);
        }
        __m256 dmv = _mm256_setzero_ps(), mna = dmv, mnb = dmv, has_min = dmv;
        int any_min = 0;
        if (form & DS_GF_MIN) {
            dmv = scales8(gp + f.dm, h, f32);
            has_min = _mm256_cmp_ps(dmv, _mm256_setzero_ps(), _CMP_NEQ_UQ);
            any_min = _mm256_movemask_ps(has_min);
            if (form & DS_GF_MNS) {
                mna = _mm256_cvtepi32_ps(i8x8_epi32(gp + f.mn + 8 * h));
                mnb = _mm256_cvtepi32_ps(i8x8_epi32(gp + f.mn + 16 + 8 * h));
            } else {
                mna = mnb = _mm256_set1_ps(1.0f);
            }
        }
        UNROLL for (int t = 0; t < TT; t++) {
            int64_t bi = (t0 + t) * nb + b;
            const int8_t *xq = x->q + (t0 + t) * K + 32 * b;
            __m256i a = dot4(aw, sw, xq, 0), c = dot4(aw, sw, xq, 4), is;
            if (split) is = form & DS_GF_SC ? _mm256_add_epi32(_mm256_mullo_epi32(a, sca), _mm256_mullo_epi32(c, scb))
                                            : _mm256_add_epi32(a, c);
            else { /* one scale per block: sc (ia + ib), the same integer */
                is = _mm256_add_epi32(a, c);
                if (form & DS_GF_SC) is = _mm256_mullo_epi32(is, sca);
            }
            __m256 dx = _mm256_set1_ps(x->d[bi]);
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dv, dx)));
            if (any_min) {
                __m256 ms = _mm256_add_ps(_mm256_mul_ps(mna, _mm256_set1_ps((float)(x->c32[2 * bi] / 32))),
                                          _mm256_mul_ps(mnb, _mm256_set1_ps((float)(x->c32[2 * bi + 1] / 32))));
                /* rows without a min add +0, which leaves acc as it is (kern.h NUMERICS) */
                __m256 term = _mm256_and_ps(_mm256_mul_ps(ms, _mm256_mul_ps(dmv, dx)), has_min);
                acc[t] = _mm256_add_ps(acc[t], term);
            }
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

INLINE void tiles(const ds_mm *m, const uint8_t *gp, int h, float *y, int nrows, const gtab *tb, const int split) {
    int64_t t = 0;
    for (; t + 4 <= m->n; t += 4) tile(m, gp, h, t, 4, y, nrows, tb, split);
    switch (m->n - t) {
    case 1: tile(m, gp, h, t, 1, y, nrows, tb, split); break;
    case 2: tile(m, gp, h, t, 2, y, nrows, tb, split); break;
    case 3: tile(m, gp, h, t, 3, y, nrows, tb, split); break;
    default: break;
    }
}

void ds_mm_gblock_avx2(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    const ds_glevels *l = ds_gblock_levels(w->type);
    gtab tb;
    int8_t lo[16] = {0}, hi[16] = {0};
    for (int k = 0; k < l->count && k < 32; k++) (k < 16 ? lo : hi)[k % 16] = l->lv[k];
    tb.lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lo));
    tb.hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hi));
    tb.form = w->form;
    tb.f = ds_gform_of(w->form);
    for (int64_t g = r0 / DS_QG; g * DS_QG < r1; g++) {
        const uint8_t *gp = w->packed + (size_t)g * w->group_bytes;
        for (int h = 0; h < 2; h++) {
            int64_t left = w->rows - g * DS_QG - 8 * h;
            if (left <= 0) break;
            int nrows = (int)(left < 8 ? left : 8);
            float *y = m->y + g * DS_QG + 8 * h;
            if (tb.form & DS_GF_SPLIT) tiles(m, gp, h, y, nrows, &tb, 1);
            else tiles(m, gp, h, y, nrows, &tb, 0);
        }
    }
}
