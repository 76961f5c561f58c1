/* kern_gblock_avx512.c - the gblock types (gblock.h) on AVX-512 VNNI, one
 * kernel for every such type: level indices looked up with VPSHUFB into
 * levels + 128 (unsigned for VPDPBUSD; the 128 s comes off per half), the
 * integer scales and mins applied as kern.h NUMERICS states. Built with
 * -mavx512*: call only when ds_cpu_level() says AVX512. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gblock.h"
#include "kernels/kern.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define TT_MAX 8
#define TB 64

typedef struct {
    __m512i lo, hi; /* levels + 128 of indices 0..15 and 16..31, in every 128-bit lane */
    ds_gform f;
    int form;
} gtab;

INLINE __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
INLINE __m512i ld(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }

INLINE __m512 scales16(const uint8_t *p, int f32) {
    return f32 ? _mm512_loadu_ps(p) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

INLINE void store_rows(float *y, __m512 v, int nrows) {
    if (nrows == 16) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << nrows) - 1), v);
}

/* the 8 k-steps of a super-block as unsigned levels */
INLINE void levels(__m512i *w, const uint8_t *gp, const gtab *tb) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    UNROLL for (int i = 0; i < 4; i++) {
        __m512i v = ld(gp + 64 * i);
        __m512i a = _mm512_and_si512(v, m), b = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
        w[i] = _mm512_shuffle_epi8(tb->lo, a);
        w[i + 4] = _mm512_shuffle_epi8(tb->lo, b);
        if (tb->form & DS_GF_FIVE) {
            __m512i hb = ld(gp + tb->f.hb);
            __mmask64 ma = _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(1 << i)));
            __mmask64 mb = _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(1 << (i + 4))));
            w[i] = _mm512_mask_shuffle_epi8(w[i], ma, tb->hi, a);
            w[i + 4] = _mm512_mask_shuffle_epi8(w[i + 4], mb, tb->hi, b);
        }
    }
}

/* split: the halves' scales differ somewhere in the matrix, so each token
 * takes two sums (ia, ib) per block, token by token with the weights in
 * registers (sixteen live sums would spill); else one sum of all 8 k-steps,
 * times the block's one scale (sc ia + sc ib, the same integer). */
INLINE void tile(const ds_mm *m, const uint8_t *gp, int64_t t0, const int TT, float *y, int nrows, const gtab *tb,
                 const int split, const int has_sc, const int has_mins) {
    /* has_mins: 0 none, 1 dm alone (every mn 1), 2 per-half integer mins */
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32;
    const int form = (tb->form & ~(DS_GF_SC | DS_GF_MIN)) | (has_sc ? DS_GF_SC : 0) | (has_mins ? DS_GF_MIN : 0);
    const int f32 = form & DS_GF_D32;
    const ds_gform f = tb->f;
    __m512 acc[TT_MAX];
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    /* no software prefetch: it measured slower than the hardware's alone here */
    for (int64_t b = 0; b < nb; b++, gp += f.bytes) {
        __m512i w[8];
        levels(w, gp, tb);
        __m512 dv = scales16(gp + f.d, f32);
        __m512i sca = _mm512_setzero_si512(), scb = sca;
        if (form & DS_GF_SC) {
            sca = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(gp + f.sc)));
            if (split) scb = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(gp + f.sc + 16)));
        }
        __m512 dmv = _mm512_setzero_ps(), mna = dmv, mnb = dmv;
        __mmask16 has_min = 0;
        if (form & DS_GF_MIN) {
            dmv = scales16(gp + f.dm, f32);
            has_min = _mm512_cmp_ps_mask(dmv, _mm512_setzero_ps(), _CMP_NEQ_UQ);
            if (has_mins == 2) {
                mna = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(gp + f.mn))));
                mnb = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(gp + f.mn + 16))));
            }
        }
        /* one sum per token: k-steps outer, tokens inner (as kern_avx512.c's dot_tokens), TT
         * independent chains side by side */
        __m512i isj[TT_MAX];
        if (!split && TT == 1) { /* decode: two chains, half the latency */
            const int8_t *x0 = x->q + t0 * K + 32 * b;
            __m512i a = _mm512_setzero_si512(), c = a;
            UNROLL for (int s = 0; s < 8; s += 2) {
                a = _mm512_dpbusd_epi32(a, w[s], bcast4(x0 + 4 * s));
                c = _mm512_dpbusd_epi32(c, w[s + 1], bcast4(x0 + 4 * s + 4));
            }
            isj[0] = _mm512_add_epi32(a, c);
        } else if (!split) {
            const int8_t *x0 = x->q + t0 * K + 32 * b;
            UNROLL for (int t = 0; t < TT; t++) isj[t] = _mm512_setzero_si512();
            UNROLL for (int s = 0; s < 8; s++) UNROLL for (int t = 0; t < TT; t++)
                isj[t] = _mm512_dpbusd_epi32(isj[t], w[s], bcast4(x0 + t * K + 4 * s));
        }
        UNROLL for (int t = 0; t < TT; t++) {
            const int8_t *xq = x->q + (t0 + t) * K + 32 * b;
            int64_t bi = (t0 + t) * nb + b;
            int32_t c0 = x->c32[2 * bi], c1 = x->c32[2 * bi + 1]; /* 32 s0, 32 s1 */
            __m512i is;
            if (split) {
                __m512i a = _mm512_setzero_si512(), c = a;
                UNROLL for (int s = 0; s < 4; s++) {
                    a = _mm512_dpbusd_epi32(a, w[s], bcast4(xq + 4 * s));
                    c = _mm512_dpbusd_epi32(c, w[s + 4], bcast4(xq + 16 + 4 * s));
                }
                a = _mm512_sub_epi32(a, _mm512_set1_epi32(4 * c0));
                c = _mm512_sub_epi32(c, _mm512_set1_epi32(4 * c1));
                is = form & DS_GF_SC ? _mm512_add_epi32(_mm512_mullo_epi32(a, sca), _mm512_mullo_epi32(c, scb))
                                     : _mm512_add_epi32(a, c);
            } else { /* 128 (s0 + s1) is c128 */
                is = _mm512_sub_epi32(isj[t], _mm512_set1_epi32(x->c128[bi]));
                if (form & DS_GF_SC) is = _mm512_mullo_epi32(is, sca);
            }
            __m512 dx = _mm512_set1_ps(x->d[bi]);
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dv, dx)));
            if (has_min) { /* mn0 s0 + mn1 s1, exact in F32 (< 2^24); with unit mins s0 + s1 */
                __m512 ms = has_mins == 2 ? _mm512_add_ps(_mm512_mul_ps(mna, _mm512_set1_ps((float)(c0 / 32))),
                                                          _mm512_mul_ps(mnb, _mm512_set1_ps((float)(c1 / 32))))
                                          : _mm512_set1_ps((float)(x->c128[bi] / 128));
                acc[t] = _mm512_mask_add_ps(acc[t], has_min, acc[t], _mm512_mul_ps(ms, _mm512_mul_ps(dmv, dx)));
            }
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

/* the form's scale and min flags as constants: each variant compiles to straight code */
INLINE void tiles(const ds_mm *m, const uint8_t *gp, int64_t t, int64_t b1, float *y, int nrows, const gtab *tb,
                  const int split, const int sc, const int mn) {
    for (; t + 8 <= b1; t += 8) tile(m, gp, t, 8, y, nrows, tb, split, sc, mn);
    switch (b1 - t) {
    case 1: tile(m, gp, t, 1, y, nrows, tb, split, sc, mn); break;
    case 2: tile(m, gp, t, 2, y, nrows, tb, split, sc, mn); break;
    case 3: tile(m, gp, t, 3, y, nrows, tb, split, sc, mn); break;
    case 4: tile(m, gp, t, 4, y, nrows, tb, split, sc, mn); break;
    case 5: tile(m, gp, t, 5, y, nrows, tb, split, sc, mn); break;
    case 6: tile(m, gp, t, 6, y, nrows, tb, split, sc, mn); break;
    case 7: tile(m, gp, t, 7, y, nrows, tb, split, sc, mn); break;
    default: break;
    }
}

/* groups of rows [r0, r1), tokens in tiles of up to 8 and blocks of TB (as kern_avx512.c) */
void ds_mm_gblock_avx512(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    const ds_glevels *l = ds_gblock_levels(w->type);
    gtab tb;
    uint8_t lo[16] = {0}, hi[16] = {0};
    for (int k = 0; k < l->count && k < 32; k++) (k < 16 ? lo : hi)[k % 16] = (uint8_t)(l->lv[k] ^ 0x80);
    tb.lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lo));
    tb.hi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)hi));
    tb.form = w->form;
    tb.f = ds_gform_of(w->form);
    for (int64_t b0 = 0; b0 < m->n; b0 += TB) {
        int64_t b1 = b0 + TB < m->n ? b0 + TB : m->n;
        for (int64_t g = r0 / DS_QG; g * DS_QG < r1; g++) {
            const uint8_t *gp = w->packed + (size_t)g * w->group_bytes;
            int nrows = (int)(w->rows - g * DS_QG < DS_QG ? w->rows - g * DS_QG : DS_QG);
            float *y = m->y + g * DS_QG;
            int mn = tb.form & DS_GF_MIN ? (tb.form & DS_GF_MNS ? 2 : 1) : 0;
            switch ((tb.form & (DS_GF_SPLIT | DS_GF_SC)) | mn << 8) {
            case 0: tiles(m, gp, b0, b1, y, nrows, &tb, 0, 0, 0); break;
            case 1 << 8: tiles(m, gp, b0, b1, y, nrows, &tb, 0, 0, 1); break;
            case 2 << 8: tiles(m, gp, b0, b1, y, nrows, &tb, 0, 0, 2); break;
            case DS_GF_SC: tiles(m, gp, b0, b1, y, nrows, &tb, 0, 1, 0); break;
            case DS_GF_SC | 1 << 8: tiles(m, gp, b0, b1, y, nrows, &tb, 0, 1, 1); break;
            case DS_GF_SC | 2 << 8: tiles(m, gp, b0, b1, y, nrows, &tb, 0, 1, 2); break;
            case DS_GF_SPLIT | DS_GF_SC: tiles(m, gp, b0, b1, y, nrows, &tb, 1, 1, 0); break;
            case DS_GF_SPLIT | DS_GF_SC | 1 << 8: tiles(m, gp, b0, b1, y, nrows, &tb, 1, 1, 1); break;
            default: tiles(m, gp, b0, b1, y, nrows, &tb, 1, 1, 2); break; /* the general case */
            }
        }
    }
}
