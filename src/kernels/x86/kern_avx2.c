/* kern_avx2.c - AVX2 + FMA + F16C kernels, for x86 CPUs without AVX-512.
 * Built with -mavx2 -mfma -mf16c: call only when ds_cpu_level() >= AVX2.
 * Same packed layout as the AVX-512 path, read as two halves of 8 rows (the
 * low and high 32 bytes of each 64-byte k-step); without VNNI the integer
 * dot products use VPMADDUBSW/VPMADDWD. Reproduces the reference numbers
 * exactly (kern.h, NUMERICS). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/ops.h"
#include "kernels/x86/avx2_rows.h"
#include "kernels/x86/kscales.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define TT_MAX 4

INLINE __m256 f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INLINE __m256i u8x8_epi32(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* ------------------------------------------------------------------------ */
/* Activations                                                               */

static inline int hsum_epi32(__m256i v) {
    int a[8], s = 0;
    _mm256_storeu_si256((__m256i *)a, v);
    for (int i = 0; i < 8; i++) s += a[i];
    return s;
}

/* 32 int32 (4 vectors) to 32 int8 in order */
static inline void pack_i8(const __m256i *iv, int8_t *q) {
    __m256i p01 = _mm256_packs_epi32(iv[0], iv[1]), p23 = _mm256_packs_epi32(iv[2], iv[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
}

static void quant_x(const ds_xq *xq, int64_t t, const float *x) {
    int64_t K = xq->K, nb = K / 32;
    int8_t *q = xq->q + t * K, *r = xq->r + t * K;
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 k128 = _mm256_set1_ps(128.0f);
    for (int64_t b = 0; b < nb; b++) {
        __m256 v[4], mx = _mm256_setzero_ps();
        __m256i iv[4], rv[4];
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        for (int i = 0; i < 4; i++) {
            __m256 sv = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[i], vid), lo), hi);
            iv[i] = _mm256_cvtps_epi32(sv);
            rv[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(sv, _mm256_cvtepi32_ps(iv[i])), k128));
        }
        pack_i8(iv, q + 32 * b);
        pack_i8(rv, r + 32 * b);
        int s0 = hsum_epi32(_mm256_add_epi32(iv[0], iv[1])), s1 = hsum_epi32(_mm256_add_epi32(iv[2], iv[3]));
        int64_t o = t * nb + b;
        xq->d[o] = d;
        xq->ms[o] = d * (float)(s0 + s1);
        xq->c128[o] = 128 * (s0 + s1);
        xq->c8[o] = 8 * (s0 + s1);
        xq->c32[2 * o] = 32 * s0;
        xq->c32[2 * o + 1] = 32 * s1;
        xq->e[o] = d * (1.0f / 128.0f);
        xq->r128[o] = 128 * hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(rv[0], rv[1]), _mm256_add_epi32(rv[2], rv[3])));
    }
}

static void to_bf16(uint16_t *dst, const float *x, int64_t n) {
    int64_t i = 0;
    const __m256i r = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), nanbit = _mm256_set1_epi32(0x400000);
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
        __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        __m256i v = _mm256_blendv_epi8(rounded, _mm256_or_si256(u, nanbit), isnan);
        v = _mm256_srli_epi32(v, 16);
        __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storeu_si128((__m128i *)(dst + i), packed);
    }
    if (i < n) ds_to_bf16_ref(dst + i, x + i, n - i);
}

/* ------------------------------------------------------------------------ */
/* Quantised matrices: one half (8 rows) of a packed group                   */

/* sum over k-steps [s0, s1) of levels (<= 63) times x; pairs of k-steps are
 * added in 16 bits first (4 products of at most 63*127 each fit) */
INLINE __m256i dot_small(const __m256i *w, const int8_t *xq, int s0, int s1) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    for (int s = s0; s < s1; s += 2) {
        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w[s], bcast4(xq + 4 * s)),
                                     _mm256_maddubs_epi16(w[s + 1], bcast4(xq + 4 * s + 4)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    return acc;
}

/* q8_0: w holds the signed levels; |w| * sign(x, w) keeps maddubs exact */
INLINE __m256i dot_signed(const __m256i *aw, const __m256i *sw, const int8_t *xq) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    UNROLL for (int s = 0; s < 8; s++) {
        __m256i p = _mm256_maddubs_epi16(aw[s], _mm256_sign_epi8(bcast4(xq + 4 * s), sw[s]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    return acc;
}

INLINE void nibbles(__m256i *w, const uint8_t *p, int h) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    UNROLL for (int i = 0; i < 4; i++) {
        __m256i v = ld(p + 64 * i + 32 * h);
        w[i] = _mm256_and_si256(v, m);
        w[i + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    }
}

INLINE void q8_0_tile(const ds_mm *m, const uint8_t *gp, int h, int64_t t0, const int TT, float *y, int nrows, const int x8) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32;
    __m256 acc[TT_MAX];
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, gp += 544) {
        __m256 dw = f16x8(gp + 16 * h);
        __m256i sw[8], aw[8];
        UNROLL for (int s = 0; s < 8; s++) {
            sw[s] = _mm256_xor_si256(ld(gp + 32 + 64 * s + 32 * h), flip);
            aw[s] = _mm256_abs_epi8(sw[s]);
        }
        UNROLL for (int t = 0; t < TT; t++) {
            int64_t bi = (t0 + t) * nb + b;
            __m256i is = dot_signed(aw, sw, x->q + (t0 + t) * K + 32 * b);
            if (x8) { /* one term (kern.h NUMERICS) */
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(x->d[bi]))));
                continue;
            }
            __m256i rs = dot_signed(aw, sw, x->r + (t0 + t) * K + 32 * b);
            is = _mm256_add_epi32(_mm256_slli_epi32(is, 7), rs); /* 128 isum_q + isum_r */
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(x->e[bi]))));
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

INLINE void q4_0_tile(const ds_mm *m, const uint8_t *gp, int h, int64_t t0, const int TT, float *y, int nrows) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32;
    __m256 acc[TT_MAX];
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, gp += 288) {
        __m256 dw = f16x8(gp + 16 * h);
        __m256i w[8];
        nibbles(w, gp + 32, h);
        UNROLL for (int t = 0; t < TT; t++) {
            int64_t bi = (t0 + t) * nb + b;
            __m256i is = dot_small(w, x->q + (t0 + t) * K + 32 * b, 0, 8);
            is = _mm256_sub_epi32(is, _mm256_set1_epi32(x->c8[bi]));
            __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(x->d[bi]));
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(is), sc));
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

INLINE void k45_tile(const ds_mm *m, const uint8_t *gp, int h, int64_t t0, const int TT, float *y, int nrows,
                     const int five) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32, nsb = K / 256;
    size_t sbb = five ? 2816 : 2304;
    __m256 acc[TT_MAX];
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++, gp += sbb) {
        __m256 dv = f16x8(gp + 16 * h), dminv = f16x8(gp + 32 + 16 * h);
        uint8_t scm[16][16];
        ds_k_unpack_scales(gp + 64, scm);
        for (int j = 0; j < 8; j++) {
            __m256i scj = u8x8_epi32(scm[j] + 8 * h);
            __m256 shf = _mm256_mul_ps(dminv, _mm256_cvtepi32_ps(u8x8_epi32(scm[8 + j] + 8 * h)));
            __m256i w[8];
            nibbles(w, gp + 256 + 256 * j, h);
            if (five) {
                __m256i qh = ld(gp + 256 + 2048 + 64 * j + 32 * h);
                const __m256i sixteen = _mm256_set1_epi8(16);
                UNROLL for (int k = 0; k < 8; k++) {
                    __m256i bit = _mm256_set1_epi8((char)(1 << k));
                    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
                    w[k] = _mm256_or_si256(w[k], _mm256_and_si256(set, sixteen));
                }
            }
            UNROLL for (int t = 0; t < TT; t++) {
                int64_t bi = (t0 + t) * nb + 8 * s + j;
                __m256i is = dot_small(w, x->q + (t0 + t) * K + 256 * s + 32 * j, 0, 8);
                __m256i ti = _mm256_mullo_epi32(is, scj);
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(ti), _mm256_mul_ps(dv, _mm256_set1_ps(x->d[bi]))));
                acc[t] = _mm256_sub_ps(acc[t], _mm256_mul_ps(shf, _mm256_set1_ps(x->ms[bi])));
            }
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

INLINE __m256i q6_hi(__m256i h, int sp) {
    switch (sp) {
    case 0: return _mm256_slli_epi16(h, 4);
    case 1: return _mm256_slli_epi16(h, 2);
    case 2: return h;
    default: return _mm256_srli_epi16(h, 2);
    }
}

INLINE void q6_k_tile(const ds_mm *m, const uint8_t *gp, int h, int64_t t0, const int TT, float *y, int nrows) {
    const ds_xq *x = m->xq;
    int64_t K = m->w->cols, nb = K / 32, nsb = K / 256;
    __m256 acc[TT_MAX];
    const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    UNROLL for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++, gp += 3360) {
        __m256 dv = f16x8(gp + 16 * h);
        for (int j = 0; j < 8; j++) {
            __m256i sca = i8x8_epi32(gp + 32 + 32 * j + 8 * h), scb = i8x8_epi32(gp + 32 + 32 * j + 16 + 8 * h);
            const uint8_t *qp = gp + 288 + 256 * j, *hp = gp + 288 + 2048 + 128 * j;
            __m256i h0 = ld(hp + 32 * h), h1 = ld(hp + 64 + 32 * h), w[8];
            UNROLL for (int p = 0; p < 4; p++) {
                __m256i v = ld(qp + 64 * p + 32 * h);
                __m256i lo = _mm256_and_si256(v, m0f), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
                w[p] = _mm256_or_si256(lo, _mm256_and_si256(q6_hi(h0, p), m30));
                w[p + 4] = _mm256_or_si256(hi, _mm256_and_si256(q6_hi(h1, p), m30));
            }
            UNROLL for (int t = 0; t < TT; t++) {
                int64_t bi = (t0 + t) * nb + 8 * s + j;
                const int8_t *xq = x->q + (t0 + t) * K + 256 * s + 32 * j;
                __m256i ia = _mm256_sub_epi32(dot_small(w, xq, 0, 4), _mm256_set1_epi32(x->c32[2 * bi]));
                __m256i ib = _mm256_sub_epi32(dot_small(w, xq, 4, 8), _mm256_set1_epi32(x->c32[2 * bi + 1]));
                __m256i ti = _mm256_add_epi32(_mm256_mullo_epi32(ia, sca), _mm256_mullo_epi32(ib, scb));
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(ti), _mm256_mul_ps(dv, _mm256_set1_ps(x->d[bi]))));
            }
        }
    }
    UNROLL for (int t = 0; t < TT; t++) store_rows(y + (t0 + t) * m->ldy, acc[t], nrows);
}

#define QUANT_DRIVER(NAME, TILE, ...)                                                              \
    static void NAME(const ds_mm *m, int64_t r0, int64_t r1) {                                     \
        const ds_wmat *w = m->w;                                                                   \
        for (int64_t g = r0 / DS_QG; g * DS_QG < r1; g++) {                                        \
            const uint8_t *gp = w->packed + (size_t)g * w->group_bytes;                            \
            for (int h = 0; h < 2; h++) {                                                          \
                int64_t left = w->rows - g * DS_QG - 8 * h;                                        \
                if (left <= 0) break;                                                              \
                int nrows = (int)(left < 8 ? left : 8);                                            \
                float *y = m->y + g * DS_QG + 8 * h;                                               \
                int64_t t = 0;                                                                     \
                for (; t + 4 <= m->n; t += 4) TILE(m, gp, h, t, 4, y, nrows, ##__VA_ARGS__);       \
                switch (m->n - t) {                                                                \
                case 1: TILE(m, gp, h, t, 1, y, nrows, ##__VA_ARGS__); break;                      \
                case 2: TILE(m, gp, h, t, 2, y, nrows, ##__VA_ARGS__); break;                      \
                case 3: TILE(m, gp, h, t, 3, y, nrows, ##__VA_ARGS__); break;                      \
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
/* Float matrices: 16 lanes per output as two vectors of 8                   */

enum { FT_F32, FT_F16, FT_BF16 };

INLINE __m256 load8(const void *row, int64_t i, const int kind) {
    if (kind == FT_F32) return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (kind == FT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float at(const void *row, int64_t i, const int kind) {
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

INLINE void float_tile(const ds_mm *m, int64_t r, const int RT, int64_t t0, const int TT, const int kind) {
    const ds_wmat *w = m->w;
    int64_t K = w->cols;
    size_t esz = kind == FT_F32 ? 4 : 2;
    const int xk = kind == FT_BF16 ? FT_BF16 : FT_F32;
    const void *rows[2], *xs[2];
    UNROLL for (int i = 0; i < RT; i++) rows[i] = w->data + (size_t)(r + i) * K * esz;
    UNROLL for (int t = 0; t < TT; t++)
        xs[t] = kind == FT_BF16 ? (const void *)(m->xb + (t0 + t) * K) : (const void *)(m->x + (t0 + t) * m->ldx);
    __m256 lo[2][2], hi[2][2];
    UNROLL for (int i = 0; i < RT; i++)
        UNROLL for (int t = 0; t < TT; t++) lo[i][t] = hi[i][t] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m256 xl[2], xh[2];
        UNROLL for (int t = 0; t < TT; t++) {
            xl[t] = load8(xs[t], k, xk);
            xh[t] = load8(xs[t], k + 8, xk);
        }
        UNROLL for (int i = 0; i < RT; i++) {
            __m256 wl = load8(rows[i], k, kind), wh = load8(rows[i], k + 8, kind);
            UNROLL for (int t = 0; t < TT; t++) {
                lo[i][t] = _mm256_add_ps(lo[i][t], _mm256_mul_ps(wl, xl[t]));
                hi[i][t] = _mm256_add_ps(hi[i][t], _mm256_mul_ps(wh, xh[t]));
            }
        }
    }
    UNROLL for (int i = 0; i < RT; i++)
        UNROLL for (int t = 0; t < TT; t++) {
            float l[16], s = 0.0f;
            _mm256_storeu_ps(l, lo[i][t]);
            _mm256_storeu_ps(l + 8, hi[i][t]);
            UNROLL for (int q = 0; q < 16; q++) s += l[q];
            for (int64_t kk = k; kk < K; kk++) s += at(rows[i], kk, kind) * at(xs[t], kk, xk);
            m->y[(t0 + t) * m->ldy + r + i] = s;
        }
}

/* rows outer, tokens inner: weights stream from memory once per call */
#define FLOAT_DRIVER(NAME, KIND)                                                                   \
    static void NAME(const ds_mm *m, int64_t r0, int64_t r1) {                                     \
        for (int64_t r = r0; r < r1; r += 2) {                                                     \
            int rt = (int)(r1 - r < 2 ? r1 - r : 2);                                               \
            for (int64_t t = 0; t < m->n; t += 2) {                                                \
                int tt = (int)(m->n - t < 2 ? m->n - t : 2);                                       \
                if (rt == 2) {                                                                     \
                    if (tt == 2) float_tile(m, r, 2, t, 2, KIND);                                  \
                    else float_tile(m, r, 2, t, 1, KIND);                                          \
                } else {                                                                           \
                    if (tt == 2) float_tile(m, r, 1, t, 2, KIND);                                  \
                    else float_tile(m, r, 1, t, 1, KIND);                                          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

FLOAT_DRIVER(mm_f32, FT_F32)
FLOAT_DRIVER(mm_f16, FT_F16)
FLOAT_DRIVER(mm_bf16, FT_BF16)

/* ------------------------------------------------------------------------ */
/* Vector primitives (FMA; four accumulators)                                 */

static inline float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

static float vdot(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void vaxpy(float *y, float a, const float *x, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static void vscale(float *y, float a, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}


/* ------------------------------------------------------------------------ */
/* Vector math and the Gated DeltaNet (vecmath.inc)                          */

typedef __m256 VF;
#define VW 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define VSET1(x) _mm256_set1_ps(x)
#define VZERO _mm256_setzero_ps()
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VMAX _mm256_max_ps
#define VMIN _mm256_min_ps
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VHSUM(v) hsum8(v)
#define VEXP2I(y, n) _mm256_mul_ps((y), _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)))
#define VROUND(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#include "kernels/x86/vecmath.inc"

const ds_kern ds_kern_avx2 = {
    .isa = DS_ISA_AVX2,
    .packs = 1,
    .quant_x = quant_x,
    .to_bf16 = to_bf16,
    .mm = {[DS_F32] = mm_f32, [DS_F16] = mm_f16, [DS_BF16] = mm_bf16, [DS_Q8_0] = mm_q8_0, [DS_Q4_0] = mm_q4_0,
           [DS_Q4_K] = mm_q4_K, [DS_Q5_K] = mm_q5_K, [DS_Q6_K] = mm_q6_K, DS_GBLOCK_MM(ds_mm_gblock_avx2)},
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
