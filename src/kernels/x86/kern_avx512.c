/* kern_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels. Built with
 * -mavx512*: call only when ds_cpu_level() says AVX512. Reproduces the
 * reference numbers exactly (kern.h, NUMERICS): integer dot products with
 * VPDPBUSD on the packed layout, then per block the same F32 multiply and
 * add as kern_ref.c (deliberately no FMA there). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/ops.h"
#include "kernels/x86/kscales.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define TT_MAX 8
#define PF_SB 2     /* software prefetch distance: k-quant super-blocks ahead */

INLINE __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
INLINE __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
INLINE __m512i ld(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }

INLINE void store_rows(float *y, __m512 v, int nrows) {
    if (nrows == 16) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << nrows) - 1), v);
}

/* ------------------------------------------------------------------------ */
/* Activations                                                               */

static void quant_x(const ds_xq *xq, int64_t t, const float *x) {
    int64_t K = xq->K, nb = K / 32;
    int8_t *q = xq->q + t * K, *r = xq->r + t * K;
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f), k128 = _mm512_set1_ps(128.0f);
    for (int64_t b = 0; b < nb; b++) {
        __m512 a = _mm512_loadu_ps(x + 32 * b), c = _mm512_loadu_ps(x + 32 * b + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m512 vid = _mm512_set1_ps(id);
        __m512 va = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(a, vid), lo), hi);
        __m512 vc = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(c, vid), lo), hi);
        __m512i ia = _mm512_cvtps_epi32(va), ic = _mm512_cvtps_epi32(vc);
        __m512i ra = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(va, _mm512_cvtepi32_ps(ia)), k128));
        __m512i rc = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(vc, _mm512_cvtepi32_ps(ic)), k128));
        _mm_storeu_si128((__m128i *)(q + 32 * b), _mm512_cvtepi32_epi8(ia));
        _mm_storeu_si128((__m128i *)(q + 32 * b + 16), _mm512_cvtepi32_epi8(ic));
        _mm_storeu_si128((__m128i *)(r + 32 * b), _mm512_cvtepi32_epi8(ra));
        _mm_storeu_si128((__m128i *)(r + 32 * b + 16), _mm512_cvtepi32_epi8(rc));
        int s0 = _mm512_reduce_add_epi32(ia), s1 = _mm512_reduce_add_epi32(ic);
        int64_t o = t * nb + b;
        xq->d[o] = d;
        xq->ms[o] = d * (float)(s0 + s1);
        xq->c128[o] = 128 * (s0 + s1);
        xq->c8[o] = 8 * (s0 + s1);
        xq->c32[2 * o] = 32 * s0;
        xq->c32[2 * o + 1] = 32 * s1;
        xq->e[o] = d * (1.0f / 128.0f);
        xq->r128[o] = 128 * _mm512_reduce_add_epi32(_mm512_add_epi32(ra, rc));
    }
}

/* round to nearest even in integer arithmetic (as ds_f32_to_bf16), NaN quieted */
static void to_bf16(uint16_t *dst, const float *x, int64_t n) {
    int64_t i = 0;
    const __m512i r = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), nanbit = _mm512_set1_epi32(0x400000);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
        __mmask16 isnan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absmask), inf);
        __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(r, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
        __m512i v = _mm512_mask_mov_epi32(rounded, isnan, _mm512_or_si512(u, nanbit));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
    }
    if (i < n) ds_to_bf16_ref(dst + i, x + i, n - i);
}

/* ------------------------------------------------------------------------ */
/* Quantised matrices on the packed layout                                   */

/* isums of one chunk for TT tokens (rows of x K bytes apart), k-steps
 * [s0, s1), the tokens' chains interleaved so they run in parallel */
INLINE void dot_tokens(__m512i *is, const __m512i *w, const int8_t *x, int64_t K, const int TT, int s0, int s1) {
    if (TT == 1) {
        __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
        UNROLL for (int s = s0; s < s1; s += 2) {
            a = _mm512_dpbusd_epi32(a, w[s], bcast4(x + 4 * s));
            if (s + 1 < s1) b = _mm512_dpbusd_epi32(b, w[s + 1], bcast4(x + 4 * s + 4));
        }
        is[0] = _mm512_add_epi32(a, b);
        return;
    }
    UNROLL for (int t = 0; t < TT; t++) is[t] = _mm512_setzero_si512();
    UNROLL for (int s = s0; s < s1; s++) UNROLL for (int t = 0; t < TT; t++) is[t] = _mm512_dpbusd_epi32(is[t], w[s], bcast4(x + t * K + 4 * s));
}

/* unpacks 4 vectors of nibble pairs into k-steps 0..7 */
INLINE void nibbles(__m512i *w, const uint8_t *p) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    UNROLL for (int i = 0; i < 4; i++) {
        __m512i v = ld(p + 64 * i);
        w[i] = _mm512_and_si512(v, m);
        w[i + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
}

INLINE void q8_0_tile(const ds_mm *m, const uint8_t *gp, int64_t t0, const int TT, float *y, int nrows, const int x8) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32;
    __m512 acc[TT_MAX];
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    /* software prefetch a fixed time ahead: the more tokens, the longer a block takes; one token
     * streams fastest on the hardware prefetchers alone */
    const int pf = TT == 1 ? 0 : TT <= 4 ? 3 : 8;
    for (int64_t b = 0; b < nb; b++, gp += 544) {
        if (pf)
            UNROLL for (int l = 0; l < 9; l++) _mm_prefetch((const char *)(gp + pf * 544 + 64 * l), _MM_HINT_T0);
        __m512 dw = f16x16(gp);
        __m512i w[8];
        UNROLL for (int s = 0; s < 8; s++) w[s] = ld(gp + 32 + 64 * s);
        __m512i isv[TT_MAX], rsv[TT_MAX];
        if (x8) { /* one term: q4_0's form */
            dot_tokens(isv, w, x->q + t0 * K + 32 * b, K, TT, 0, 8);
            UNROLL for (int t = 0; t < TT; t++) {
                int64_t bi = (t0 + t) * nb + b;
                __m512i is = _mm512_sub_epi32(isv[t], _mm512_set1_epi32(x->c128[bi]));
                acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, _mm512_set1_ps(x->d[bi]))));
            }
            continue;
        }
        if (TT == 1) {
            dot_tokens(isv, w, x->q + t0 * K + 32 * b, K, 1, 0, 8);
            dot_tokens(rsv, w, x->r + t0 * K + 32 * b, K, 1, 0, 8);
        } else { /* both chains of every token in one pass: 2 TT independent accumulators */
            const int8_t *xq = x->q + t0 * K + 32 * b, *xr = x->r + t0 * K + 32 * b;
            UNROLL for (int t = 0; t < TT; t++) isv[t] = rsv[t] = _mm512_setzero_si512();
            UNROLL for (int s = 0; s < 8; s++) UNROLL for (int t = 0; t < TT; t++) {
                isv[t] = _mm512_dpbusd_epi32(isv[t], w[s], bcast4(xq + t * K + 4 * s));
                rsv[t] = _mm512_dpbusd_epi32(rsv[t], w[s], bcast4(xr + t * K + 4 * s));
            }
        }
        UNROLL for (int t = 0; t < TT; t++) {
            int64_t bi = (t0 + t) * nb + b;
            /* 128 (isum_q - c128) + (isum_r - r128), with the two offsets folded into one in
             * scalar registers (the same integers: every intermediate fits in 32 bits) */
            int32_t off = x->c128[bi] * 128 + x->r128[bi];
            __m512i is = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(isv[t], 7), rsv[t]), _mm512_set1_epi32(off));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, _mm512_set1_ps(x->e[bi]))));
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

INLINE void q4_0_tile(const ds_mm *m, const uint8_t *gp, int64_t t0, const int TT, float *y, int nrows) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32;
    __m512 acc[TT_MAX];
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, gp += 288) {
        __m512 dw = f16x16(gp);
        __m512i w[8];
        nibbles(w, gp + 32);
        __m512i isv[TT_MAX];
        dot_tokens(isv, w, x->q + t0 * K + 32 * b, K, TT, 0, 8);
        UNROLL for (int t = 0; t < TT; t++) {
            int64_t bi = (t0 + t) * nb + b;
            __m512i is = _mm512_sub_epi32(isv[t], _mm512_set1_epi32(x->c8[bi]));
            __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(x->d[bi]));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(is), sc));
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

INLINE void k45_tile(const ds_mm *m, const uint8_t *gp, int64_t t0, const int TT, float *y, int nrows, const int five) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32, nsb = K / 256;
    size_t sbb = five ? 2816 : 2304;
    __m512 acc[TT_MAX];
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++, gp += sbb) {
        __m512 dv = f16x16(gp), dminv = f16x16(gp + 32);
        uint8_t scm[16][16];
        ds_k_unpack_scales(gp + 64, scm);
        for (int j = 0; j < 8; j++) {
            __m512i scj = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)scm[j]));
            __m512 shf = _mm512_mul_ps(dminv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)scm[8 + j]))));
            __m512i w[8];
            UNROLL for (int l = 0; l < 6; l++) _mm_prefetch((const char *)(gp + PF_SB * sbb + 384 * j + 64 * l), _MM_HINT_T0);
            nibbles(w, gp + 256 + 256 * j);
            if (five) {
                __m512i qh = ld(gp + 256 + 2048 + 64 * j);
                const __m512i sixteen = _mm512_set1_epi8(16);
                UNROLL for (int k = 0; k < 8; k++) {
                    __mmask64 mk = _mm512_test_epi8_mask(qh, _mm512_set1_epi8((char)(1 << k)));
                    w[k] = _mm512_mask_add_epi8(w[k], mk, w[k], sixteen);
                }
            }
            __m512i isv[TT_MAX];
            dot_tokens(isv, w, x->q + t0 * K + 256 * s + 32 * j, K, TT, 0, 8);
            UNROLL for (int t = 0; t < TT; t++) {
                int64_t bi = (t0 + t) * nb + 8 * s + j;
                __m512i ti = _mm512_mullo_epi32(isv[t], scj);
                acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(ti), _mm512_mul_ps(dv, _mm512_set1_ps(x->d[bi]))));
                acc[t] = _mm512_sub_ps(acc[t], _mm512_mul_ps(shf, _mm512_set1_ps(x->ms[bi])));
            }
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

/* bits 2sp, 2sp+1 of each byte moved to bits 4, 5 (16-bit shifts; the mask drops what crosses bytes) */
INLINE __m512i q6_hi(__m512i h, int sp) {
    switch (sp) {
    case 0: return _mm512_slli_epi16(h, 4);
    case 1: return _mm512_slli_epi16(h, 2);
    case 2: return h;
    default: return _mm512_srli_epi16(h, 2);
    }
}

INLINE void q6_k_tile(const ds_mm *m, const uint8_t *gp, int64_t t0, const int TT, float *y, int nrows) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32, nsb = K / 256;
    __m512 acc[TT_MAX];
    const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++, gp += 3360) {
        __m512 dv = f16x16(gp);
        for (int j = 0; j < 8; j++) {
            __m512i sca = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(gp + 32 + 32 * j)));
            __m512i scb = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(gp + 32 + 32 * j + 16)));
            const uint8_t *qp = gp + 288 + 256 * j, *hp = gp + 288 + 2048 + 128 * j;
            UNROLL for (int l = 0; l < 7; l++) _mm_prefetch((const char *)(gp + PF_SB * 3360 + 448 * j + 64 * l), _MM_HINT_T0);
            __m512i h0 = ld(hp), h1 = ld(hp + 64), w[8];
            UNROLL for (int p = 0; p < 4; p++) {
                __m512i v = ld(qp + 64 * p);
                __m512i lo = _mm512_and_si512(v, m0f), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
                w[p] = _mm512_ternarylogic_epi32(lo, q6_hi(h0, p), m30, 0xF8);
                w[p + 4] = _mm512_ternarylogic_epi32(hi, q6_hi(h1, p), m30, 0xF8);
            }
            __m512i iav[TT_MAX], ibv[TT_MAX];
            dot_tokens(iav, w, x->q + t0 * K + 256 * s + 32 * j, K, TT, 0, 4);
            dot_tokens(ibv, w, x->q + t0 * K + 256 * s + 32 * j, K, TT, 4, 8);
            UNROLL for (int t = 0; t < TT; t++) {
                int64_t bi = (t0 + t) * nb + 8 * s + j;
                __m512i ia = _mm512_sub_epi32(iav[t], _mm512_set1_epi32(x->c32[2 * bi]));
                __m512i ib = ibv[t];
                ib = _mm512_sub_epi32(ib, _mm512_set1_epi32(x->c32[2 * bi + 1]));
                __m512i ti = _mm512_add_epi32(_mm512_mullo_epi32(ia, sca), _mm512_mullo_epi32(ib, scb));
                acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(ti), _mm512_mul_ps(dv, _mm512_set1_ps(x->d[bi]))));
            }
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

/* groups of rows [r0, r1), tokens in tiles of up to 8; tokens in blocks of
 * TB so that a block's activations stay in L1/L2 while the groups of the
 * range (in L2) pass over them */
#define TB 64
#define QUANT_DRIVER(NAME, TILE, ...)                                                              \
    static void NAME(const ds_mm *m, int64_t r0, int64_t r1) {                                     \
        const ds_wmat *w = m->w;                                                                   \
        for (int64_t b0 = 0; b0 < m->n; b0 += TB) {                                                \
            int64_t b1 = b0 + TB < m->n ? b0 + TB : m->n;                                          \
            for (int64_t g = r0 / DS_QG; g * DS_QG < r1; g++) {                                    \
                const uint8_t *gp = w->packed + (size_t)g * w->group_bytes;                        \
                int nrows = (int)(w->rows - g * DS_QG < DS_QG ? w->rows - g * DS_QG : DS_QG);      \
                float *y = m->y + g * DS_QG;                                                       \
                int64_t t = b0;                                                                    \
                for (; t + 8 <= b1; t += 8) TILE(m, gp, t, 8, y, nrows, ##__VA_ARGS__);           \
                switch (b1 - t) {                                                                  \
                case 1: TILE(m, gp, t, 1, y, nrows, ##__VA_ARGS__); break;                         \
                case 2: TILE(m, gp, t, 2, y, nrows, ##__VA_ARGS__); break;                         \
                case 3: TILE(m, gp, t, 3, y, nrows, ##__VA_ARGS__); break;                         \
                case 4: TILE(m, gp, t, 4, y, nrows, ##__VA_ARGS__); break;                         \
                case 5: TILE(m, gp, t, 5, y, nrows, ##__VA_ARGS__); break;                         \
                case 6: TILE(m, gp, t, 6, y, nrows, ##__VA_ARGS__); break;                         \
                case 7: TILE(m, gp, t, 7, y, nrows, ##__VA_ARGS__); break;                         \
                default: break;                                                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

QUANT_DRIVER(mm_q8_0_x15, q8_0_tile, 0)
QUANT_DRIVER(mm_q8_0_x8, q8_0_tile, 1)
static void mm_q8_0(const ds_mm *m, int64_t r0, int64_t r1) { (m->w->x8 ? mm_q8_0_x8 : mm_q8_0_x15)(m, r0, r1); }
QUANT_DRIVER(mm_q4_0, q4_0_tile)
QUANT_DRIVER(mm_q4_K, k45_tile, 0)
QUANT_DRIVER(mm_q5_K, k45_tile, 1)
QUANT_DRIVER(mm_q6_K, q6_k_tile)

/* ------------------------------------------------------------------------ */
/* Float matrices (row-major): per output 16 lanes, then lanes in order       */

enum { FT_F32, FT_F16, FT_BF16 };

INLINE __m512 load_w(const void *row, int64_t i, const int kind) {
    if (kind == FT_F32) return _mm512_loadu_ps((const float *)row + i);
    if (kind == FT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

INLINE float w_at(const void *row, int64_t i, const int kind) {
    float v;
    if (kind == FT_F32) return ((const float *)row)[i];
    uint16_t h = ((const uint16_t *)row)[i];
    if (kind == FT_BF16) {
        uint32_t u = (uint32_t)h << 16;
        memcpy(&v, &u, 4);
        return v;
    }
    return _cvtsh_ss(h);
}

INLINE float lanes_in_order(__m512 a) {
    float l[16], s = 0.0f;
    _mm512_storeu_ps(l, a);
    UNROLL for (int i = 0; i < 16; i++) s += l[i];
    return s;
}

INLINE void float_tile(const ds_mm *m, int64_t r, const int RT, int64_t t0, const int TT, const int kind) {
    const ds_wmat *w = m->w;
    int64_t K = w->cols;
    size_t esz = kind == FT_F32 ? 4 : 2;
    const void *rows[4];
    const void *xs[4];
    UNROLL for (int i = 0; i < RT; i++) rows[i] = w->data + (size_t)(r + i) * K * esz;
    UNROLL for (int t = 0; t < TT; t++)
        xs[t] = kind == FT_BF16 ? (const void *)(m->xb + (t0 + t) * K) : (const void *)(m->x + (t0 + t) * m->ldx);
    __m512 acc[4][4];
    UNROLL for (int i = 0; i < RT; i++)
        UNROLL for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        UNROLL for (int i = 0; i < RT; i++) _mm_prefetch((const char *)rows[i] + (k + 256) * esz, _MM_HINT_T0);
        __m512 xv[4];
        UNROLL for (int t = 0; t < TT; t++) xv[t] = load_w(xs[t], k, kind == FT_BF16 ? FT_BF16 : FT_F32);
        UNROLL for (int i = 0; i < RT; i++) {
            __m512 wv = load_w(rows[i], k, kind);
            UNROLL for (int t = 0; t < TT; t++) acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(wv, xv[t]));
        }
    }
    UNROLL for (int i = 0; i < RT; i++)
        UNROLL for (int t = 0; t < TT; t++) {
            float s = lanes_in_order(acc[i][t]);
            for (int64_t kk = k; kk < K; kk++)
                s += w_at(rows[i], kk, kind) * w_at(xs[t], kk, kind == FT_BF16 ? FT_BF16 : FT_F32);
            m->y[(t0 + t) * m->ldy + r + i] = s;
        }
}

/* rows outer, tokens inner: a block of 4 rows (in L1) meets every token
 * tile before the next rows are read, so weights stream from memory once */
#define FLOAT_DRIVER(NAME, KIND)                                                                   \
    static void NAME(const ds_mm *m, int64_t r0, int64_t r1) {                                     \
        int64_t r = r0;                                                                            \
        for (; r < r1; r += 4) {                                                                   \
            int rt = (int)(r1 - r < 4 ? r1 - r : 4);                                               \
            for (int64_t t = 0; t < m->n; t += 4) {                                                \
                int tt = (int)(m->n - t < 4 ? m->n - t : 4);                                       \
                if (rt == 4) switch (tt) {                                                         \
                    case 1: float_tile(m, r, 4, t, 1, KIND); break;                                \
                    case 2: float_tile(m, r, 4, t, 2, KIND); break;                                \
                    case 3: float_tile(m, r, 4, t, 3, KIND); break;                                \
                    default: float_tile(m, r, 4, t, 4, KIND); break;                               \
                    }                                                                              \
                else for (int i = 0; i < rt; i++) switch (tt) {                                    \
                    case 1: float_tile(m, r + i, 1, t, 1, KIND); break;                            \
                    case 2: float_tile(m, r + i, 1, t, 2, KIND); break;                            \
                    case 3: float_tile(m, r + i, 1, t, 3, KIND); break;                            \
                    default: float_tile(m, r + i, 1, t, 4, KIND); break;                           \
                    }                                                                              \
            }                                                                                      \
        }                                                                                          \
    }

FLOAT_DRIVER(mm_f32, FT_F32)
FLOAT_DRIVER(mm_f16, FT_F16)
FLOAT_DRIVER(mm_bf16, FT_BF16)

/* ------------------------------------------------------------------------ */
/* Vector primitives (FMA; four accumulators)                                 */

static float vdot(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void vaxpy(float *y, float a, const float *x, int64_t n) {
    __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static void vscale(float *y, float a, int64_t n) {
    __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}


/* ------------------------------------------------------------------------ */
/* Vector math and the Gated DeltaNet (vecmath.inc)                          */

typedef __m512 VF;
#define VW 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define VSET1(x) _mm512_set1_ps(x)
#define VZERO _mm512_setzero_ps()
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VMAX _mm512_max_ps
#define VMIN _mm512_min_ps
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VHSUM(v) _mm512_reduce_add_ps(v)
#define VEXP2I(y, n) _mm512_scalef_ps((y), (n))
#define VROUND(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define GDN_NB 8 /* a whole row of 128 in registers */
#define GEMM_NV 4
#include "kernels/x86/vecmath.inc"

const ds_kern ds_kern_avx512 = {
    .isa = DS_ISA_AVX512,
    .packs = 1,
    .quant_x = quant_x,
    .to_bf16 = to_bf16,
    .mm = {[DS_F32] = mm_f32, [DS_F16] = mm_f16, [DS_BF16] = mm_bf16, [DS_Q8_0] = mm_q8_0, [DS_Q4_0] = mm_q4_0,
           [DS_Q4_K] = mm_q4_K, [DS_Q5_K] = mm_q5_K, [DS_Q6_K] = mm_q6_K, DS_GBLOCK_MM(ds_mm_gblock_avx512)},
    .dot = vdot,
    .axpy = vaxpy,
    .scale = vscale,
    .silu_mul = vsilu_mul,
    .exp_sum = vexp_sum,
    .bias_act = vbias_act,
    .max = vmax,
    .mul_add = vmul_add,
    .gemm_acc = vgemm_acc,
    .vw = VW,
    .gdn_step = vgdn_step,
    .gdn_chunk = vgdn_chunk,
    .gdn_chunk_floats = vgdn_chunk_floats,
};
