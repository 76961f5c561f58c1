/* kern_ref.c - the scalar reference kernels: activation quantisation and the
 * matrix product for every weight type, reading GGUF blocks directly. These
 * define the numbers (see kern.h, NUMERICS); the SIMD files must reproduce
 * them. Plain C, never vectorised by hand, never removed: DS_KERNELS=ref runs
 * the whole model on them. */
#include <math.h>
#include <string.h>

#include "common/half.h"
#include "kernels/gblock.h"
#include "kernels/kern.h"
#include "kernels/ops.h"

/* ------------------------------------------------------------------------ */
/* Activations                                                               */

size_t ds_xq_bytes(int64_t n, int64_t K) {
    size_t nb = (size_t)(K / 32), a = 64;
    size_t q = ((size_t)n * (size_t)K + a - 1) / a * a;
    size_t f = ((size_t)n * nb * 4 + a - 1) / a * a;
    size_t f16 = ((size_t)n * nb * 2 * 4 + a - 1) / a * a;
    return 2 * q + 6 * f + f16;
}

void ds_xq_init(ds_xq *xq, void *buf, int64_t n, int64_t K) {
    size_t nb = (size_t)(K / 32), a = 64;
    size_t q = ((size_t)n * (size_t)K + a - 1) / a * a;
    size_t f = ((size_t)n * nb * 4 + a - 1) / a * a;
    size_t f16 = ((size_t)n * nb * 2 * 4 + a - 1) / a * a;
    uint8_t *p = buf;
    xq->K = K;
    xq->q = (int8_t *)p, p += q;
    xq->r = (int8_t *)p, p += q;
    xq->d = (float *)p, p += f;
    xq->ms = (float *)p, p += f;
    xq->c128 = (int32_t *)p, p += f;
    xq->c8 = (int32_t *)p, p += f;
    xq->e = (float *)p, p += f;
    xq->r128 = (int32_t *)p, p += f;
    xq->c32 = (int32_t *)p, p += f16;
}

/* v = x / d clamped to the int8 range (clamping first keeps NaN and rounding
 * noise inside int8: NaN maps to -127, as the SIMD max does) */
static float scaled(float x, float id) {
    float v = x * id;
    v = fmaxf(v, -127.0f);
    return fminf(v, 127.0f);
}

void ds_quant_x_ref(const ds_xq *xq, int64_t t, const float *x) {
    int64_t K = xq->K, nb = K / 32;
    int8_t *q = xq->q + t * K, *r = xq->r + t * K;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int s0 = 0, s1 = 0, sr = 0;
        for (int i = 0; i < 32; i++) {
            float v = scaled(xb[i], id), lv = nearbyintf(v);
            q[32 * b + i] = (int8_t)lv;
            r[32 * b + i] = (int8_t)nearbyintf((v - lv) * 128.0f); /* |v - lv| <= 1/2: r in -64..64 */
            if (i < 16) s0 += q[32 * b + i];
            else s1 += q[32 * b + i];
            sr += r[32 * b + i];
        }
        int64_t o = t * nb + b;
        xq->d[o] = d;
        xq->ms[o] = d * (float)(s0 + s1);
        xq->c128[o] = 128 * (s0 + s1);
        xq->c8[o] = 8 * (s0 + s1);
        xq->c32[2 * o] = 32 * s0;
        xq->c32[2 * o + 1] = 32 * s1;
        xq->e[o] = d * (1.0f / 128.0f);
        xq->r128[o] = 128 * sr;
    }
}

void ds_to_bf16_ref(uint16_t *dst, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ds_f32_to_bf16(x[i]);
}

/* ------------------------------------------------------------------------ */
/* Float weights: ds_dot's order                                             */

static void mm_f32(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    for (int64_t r = r0; r < r1; r++) {
        const float *row = (const float *)w->data + r * w->cols;
        for (int64_t t = 0; t < m->n; t++) m->y[t * m->ldy + r] = ds_dot(row, m->x + t * m->ldx, w->cols);
    }
}

/* F16 and BF16: rows widened to F32 (exact), then ds_dot's order */
static void mm_f16(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *h = (const uint16_t *)w->data + r * w->cols;
        for (int64_t t = 0; t < m->n; t++) {
            const float *x = m->x + t * m->ldx;
            float acc[16] = {0}, s = 0.0f;
            int64_t i = 0;
            for (; i + 16 <= w->cols; i += 16)
                for (int l = 0; l < 16; l++) acc[l] += ds_f16_to_f32(h[i + l]) * x[i + l];
            for (int l = 0; l < 16; l++) s += acc[l];
            for (; i < w->cols; i++) s += ds_f16_to_f32(h[i]) * x[i];
            m->y[t * m->ldy + r] = s;
        }
    }
}

static void mm_bf16(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    int64_t K = w->cols;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *h = (const uint16_t *)w->data + r * K;
        for (int64_t t = 0; t < m->n; t++) {
            const uint16_t *xb = m->xb + t * K;
            float acc[16] = {0}, s = 0.0f;
            int64_t i = 0;
            for (; i + 16 <= K; i += 16)
                for (int l = 0; l < 16; l++) acc[l] += ds_bf16_to_f32(h[i + l]) * ds_bf16_to_f32(xb[i + l]);
            for (int l = 0; l < 16; l++) s += acc[l];
            for (; i < K; i++) s += ds_bf16_to_f32(h[i]) * ds_bf16_to_f32(xb[i]);
            m->y[t * m->ldy + r] = s;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Quantised weights                                                         */

static void mm_q8_0(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    const ds_xq *xq = m->xq;
    int64_t nb = w->cols / 32;
    size_t rb = ds_dtype_row_bytes(w->type, w->cols);
    for (int64_t r = r0; r < r1; r++) {
        const ds_block_q8_0 *blk = (const ds_block_q8_0 *)(w->data + (size_t)r * rb);
        for (int64_t t = 0; t < m->n; t++) {
            const int8_t *q = xq->q + t * w->cols;
            float acc = 0.0f;
            const int8_t *rq = xq->r + t * w->cols;
            const float *ex = xq->e + t * nb; /* d / 128: the scale of 128 q + r */
            const float *dx = xq->d + t * nb;
            for (int64_t b = 0; b < nb; b++) {
                int isum = 0, rsum = 0;
                for (int i = 0; i < 32; i++) {
                    isum += blk[b].qs[i] * q[32 * b + i];
                    rsum += blk[b].qs[i] * rq[32 * b + i];
                }
                if (w->x8) acc = acc + (float)isum * (ds_f16_to_f32(blk[b].d) * dx[b]);
                else acc = acc + (float)(128 * isum + rsum) * (ds_f16_to_f32(blk[b].d) * ex[b]);
            }
            m->y[t * m->ldy + r] = acc;
        }
    }
}

static void mm_q4_0(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    const ds_xq *xq = m->xq;
    int64_t nb = w->cols / 32;
    size_t rb = ds_dtype_row_bytes(w->type, w->cols);
    for (int64_t r = r0; r < r1; r++) {
        const ds_block_q4_0 *blk = (const ds_block_q4_0 *)(w->data + (size_t)r * rb);
        for (int64_t t = 0; t < m->n; t++) {
            const int8_t *q = xq->q + t * w->cols;
            const float *dx = xq->d + t * nb;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int isum = 0;
                for (int i = 0; i < 16; i++)
                    isum += ((blk[b].qs[i] & 0xF) - 8) * q[32 * b + i] + ((blk[b].qs[i] >> 4) - 8) * q[32 * b + 16 + i];
                acc = acc + (float)isum * (ds_f16_to_f32(blk[b].d) * dx[b]);
            }
            m->y[t * m->ldy + r] = acc;
        }
    }
}

/* 6-bit scale and min of sub-block j of a q4_K/q5_K block (GGUF packing) */
static void k_scale_min(const uint8_t *p, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = p[j] & 63;
        *mn = p[j + 4] & 63;
    } else {
        *sc = (p[j + 4] & 0xF) | ((p[j - 4] >> 6) << 4);
        *mn = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
    }
}

/* levels of the 256 elements of a q4_K (qh NULL) or q5_K block */
static void k_levels(const uint8_t *qs, const uint8_t *qh, uint8_t *lv) {
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            lv[64 * g + l] = qs[32 * g + l] & 0xF;
            lv[64 * g + 32 + l] = qs[32 * g + l] >> 4;
            if (qh) {
                lv[64 * g + l] |= (uint8_t)(((qh[l] >> (2 * g)) & 1) << 4);
                lv[64 * g + 32 + l] |= (uint8_t)(((qh[l] >> (2 * g + 1)) & 1) << 4);
            }
        }
}

static void mm_k45(const ds_mm *m, int64_t r0, int64_t r1, int five) {
    const ds_wmat *w = m->w;
    const ds_xq *xq = m->xq;
    int64_t nsb = w->cols / 256, nb = w->cols / 32;
    size_t rb = ds_dtype_row_bytes(w->type, w->cols);
    uint8_t lv[256];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w->data + (size_t)r * rb;
        for (int64_t t = 0; t < m->n; t++) {
            const int8_t *q = xq->q + t * w->cols;
            const float *dx = xq->d + t * nb, *ms = xq->ms + t * nb;
            float acc = 0.0f;
            for (int64_t s = 0; s < nsb; s++) {
                const uint8_t *scales;
                float d, dmin;
                if (five) {
                    const ds_block_q5_K *blk = (const ds_block_q5_K *)row + s;
                    k_levels(blk->qs, blk->qh, lv);
                    scales = blk->scales;
                    d = ds_f16_to_f32(blk->d);
                    dmin = ds_f16_to_f32(blk->dmin);
                } else {
                    const ds_block_q4_K *blk = (const ds_block_q4_K *)row + s;
                    k_levels(blk->qs, NULL, lv);
                    scales = blk->scales;
                    d = ds_f16_to_f32(blk->d);
                    dmin = ds_f16_to_f32(blk->dmin);
                }
                for (int j = 0; j < 8; j++) {
                    int sc, mn, isum = 0;
                    k_scale_min(scales, j, &sc, &mn);
                    const int8_t *qj = q + 256 * s + 32 * j;
                    for (int i = 0; i < 32; i++) isum += lv[32 * j + i] * qj[i];
                    int64_t b = 8 * s + j;
                    acc = acc + (float)(sc * isum) * (d * dx[b]);
                    acc = acc - (dmin * (float)mn) * ms[b];
                }
            }
            m->y[t * m->ldy + r] = acc;
        }
    }
}

static void mm_q4_K(const ds_mm *m, int64_t r0, int64_t r1) { mm_k45(m, r0, r1, 0); }
static void mm_q5_K(const ds_mm *m, int64_t r0, int64_t r1) { mm_k45(m, r0, r1, 1); }

/* signed 6-bit values (q - 32) of the 256 elements of a q6_K block */
static void q6_values(const ds_block_q6_K *blk, int8_t *v) {
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = blk->ql + 64 * half, *qh = blk->qh + 32 * half;
        int8_t *o = v + 128 * half;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static void mm_q6_K(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    const ds_xq *xq = m->xq;
    int64_t nsb = w->cols / 256, nb = w->cols / 32;
    size_t rb = ds_dtype_row_bytes(w->type, w->cols);
    int8_t v[256];
    for (int64_t r = r0; r < r1; r++) {
        const ds_block_q6_K *row = (const ds_block_q6_K *)(w->data + (size_t)r * rb);
        for (int64_t t = 0; t < m->n; t++) {
            const int8_t *q = xq->q + t * w->cols;
            const float *dx = xq->d + t * nb;
            float acc = 0.0f;
            for (int64_t s = 0; s < nsb; s++) {
                q6_values(&row[s], v);
                float d = ds_f16_to_f32(row[s].d);
                for (int j = 0; j < 8; j++) {
                    const int8_t *qj = q + 256 * s + 32 * j;
                    int ia = 0, ib = 0;
                    for (int i = 0; i < 16; i++) {
                        ia += v[32 * j + i] * qj[i];
                        ib += v[32 * j + 16 + i] * qj[16 + i];
                    }
                    int tsum = row[s].scales[2 * j] * ia + row[s].scales[2 * j + 1] * ib;
                    acc = acc + (float)tsum * (d * dx[8 * s + j]);
                }
            }
            m->y[t * m->ldy + r] = acc;
        }
    }
}

/* The gblock types through their integer form (kern.h NUMERICS). A row's
 * blocks are decoded a stretch at a time and every token's sum carried in y
 * between stretches (a float stored is the float read back). */
#define GB_STRETCH 64
static void mm_gblock(const ds_mm *m, int64_t r0, int64_t r1) {
    const ds_wmat *w = m->w;
    const ds_xq *xq = m->xq;
    int64_t nb = w->cols / 32;
    size_t rb = ds_dtype_row_bytes(w->type, w->cols);
    ds_gblock g[GB_STRETCH];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w->data + (size_t)r * rb;
        for (int64_t b0 = 0; b0 < nb; b0 += GB_STRETCH) {
            int64_t nbs = nb - b0 < GB_STRETCH ? nb - b0 : GB_STRETCH;
            for (int64_t b = 0; b < nbs; b++) ds_gblock_decode(w->type, row, b0 + b, &g[b]);
            for (int64_t t = 0; t < m->n; t++) {
                const int8_t *q = xq->q + t * w->cols + 32 * b0;
                const float *dx = xq->d + t * nb + b0;
                float acc = b0 ? m->y[t * m->ldy + r] : 0.0f;
                for (int64_t b = 0; b < nbs; b++) {
                    const ds_gblock *gb = &g[b];
                    int ia = 0, ib = 0, s0 = 0, s1 = 0;
                    for (int i = 0; i < 16; i++) {
                        ia += gb->lv[i] * q[32 * b + i];
                        ib += gb->lv[16 + i] * q[32 * b + 16 + i];
                        s0 += q[32 * b + i];
                        s1 += q[32 * b + 16 + i];
                    }
                    int isum = gb->sc[0] * ia + gb->sc[1] * ib;
                    acc = acc + (float)isum * (gb->d * dx[b]);
                    if (gb->dm != 0.0f) acc = acc + (float)(gb->mn[0] * s0 + gb->mn[1] * s1) * (gb->dm * dx[b]);
                }
                m->y[t * m->ldy + r] = acc;
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Vector primitives                                                         */

static float vdot(const float *a, const float *b, int64_t n) { return ds_dot(a, b, n); }
static void vaxpy(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
static void vscale(float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

/* One token of the delta rule on one head: S = e^g S; S += k (beta (v - S^T k))^T; o = S^T q. */
static void gdn_step_ref(float *S, const float *q, const float *k, const float *v, float beta, float g, int Dk, int Dv,
                       float *o) {
    float decay = expf(g);
    for (int64_t i = 0; i < (int64_t)Dk * Dv; i++) S[i] *= decay;
    for (int jj = 0; jj < Dv; jj++) {
        double mj = 0.0;
        for (int i = 0; i < Dk; i++) mj += (double)S[(size_t)i * Dv + jj] * k[i];
        float delta = beta * (v[jj] - (float)mj);
        for (int i = 0; i < Dk; i++) S[(size_t)i * Dv + jj] += k[i] * delta;
    }
    for (int jj = 0; o && jj < Dv; jj++) {
        double oj = 0.0;
        for (int i = 0; i < Dk; i++) oj += (double)S[(size_t)i * Dv + jj] * q[i];
        o[jj] = (float)oj;
    }
}

/* Chunked delta rule on one head over n <= 64 tokens (rows of q, k, v are `stride` floats apart):
 *   G_r = sum_{s<=r} g_s,  A[r][s] = beta_r (k_r . k_s) e^{G_r - G_s} (s < r)
 *   U = (I + A)^-1 (beta v),  W = (I + A)^-1 (beta e^G k),  V' = U - W S
 *   O_r = e^{G_r} q_r S + sum_{s<=r} (q_r . k_s) e^{G_r - G_s} V'_s
 *   S  <- e^{G_last} S + sum_r e^{G_last - G_r} k_r V'_r^T                                     */
static void gdn_chunk_ref_d(float *S, const float *q, const float *k, const float *v, size_t stride, const float *beta,
                        const float *g, size_t gstride, int n, int Dk, int Dv, double *scratch, float *o, size_t ostride) {
    double *G = scratch, *A = G + 64, *U = A + 64 * 64, *W = U + (size_t)64 * Dv, *Vp = W + (size_t)64 * Dk;
    double acc = 0.0;
    for (int r = 0; r < n; r++) G[r] = acc += g[(size_t)r * gstride];
    for (int r = 0; r < n; r++)
        for (int s = 0; s < r; s++) {
            double kk = 0.0;
            for (int i = 0; i < Dk; i++) kk += (double)k[r * stride + i] * k[s * stride + i];
            A[r * 64 + s] = beta[(size_t)r * gstride] * kk * exp(G[r] - G[s]);
        }
    for (int r = 0; r < n; r++) {
        double br = beta[(size_t)r * gstride], eg = exp(G[r]);
        double *u = U + (size_t)r * Dv, *wr = W + (size_t)r * Dk;
        for (int jj = 0; jj < Dv; jj++) u[jj] = br * v[r * stride + jj];
        for (int i = 0; i < Dk; i++) wr[i] = br * eg * k[r * stride + i];
        for (int s = 0; s < r; s++) {
            double a = A[r * 64 + s];
            for (int jj = 0; jj < Dv; jj++) u[jj] -= a * U[(size_t)s * Dv + jj];
            for (int i = 0; i < Dk; i++) wr[i] -= a * W[(size_t)s * Dk + i];
        }
        double *vp = Vp + (size_t)r * Dv;
        for (int jj = 0; jj < Dv; jj++) {
            double ws = 0.0;
            for (int i = 0; i < Dk; i++) ws += wr[i] * S[(size_t)i * Dv + jj];
            vp[jj] = u[jj] - ws;
        }
    }
    for (int r = 0; r < n; r++) {
        const float *qr = q + r * stride;
        for (int s = 0; s <= r; s++) {
            double qk = 0.0;
            for (int i = 0; i < Dk; i++) qk += (double)qr[i] * k[s * stride + i];
            A[r * 64 + s] = qk * exp(G[r] - G[s]);
        }
        float *out = o + r * ostride;
        double eg = exp(G[r]);
        for (int jj = 0; jj < Dv; jj++) {
            double s0 = 0.0;
            for (int i = 0; i < Dk; i++) s0 += (double)qr[i] * S[(size_t)i * Dv + jj];
            double oj = eg * s0;
            for (int s = 0; s <= r; s++) oj += A[r * 64 + s] * Vp[(size_t)s * Dv + jj];
            out[jj] = (float)oj;
        }
    }
    double glast = G[n - 1], decay = exp(glast);
    for (int r = 0; r < n; r++) G[r] = exp(glast - G[r]);
    for (int i = 0; i < Dk; i++)
        for (int jj = 0; jj < Dv; jj++) {
            double sij = decay * S[(size_t)i * Dv + jj];
            for (int r = 0; r < n; r++) sij += G[r] * k[r * stride + i] * Vp[(size_t)r * Dv + jj];
            S[(size_t)i * Dv + jj] = (float)sij;
        }
}

static void gdn_chunk_ref(float *S, const float *q, const float *k, const float *v, size_t stride, const float *beta,
                          const float *g, size_t gstride, int n, int Dk, int Dv, float *scratch, float *o, size_t ostride) {
    gdn_chunk_ref_d(S, q, k, v, stride, beta, g, gstride, n, Dk, Dv, (double *)scratch, o, ostride);
}

static size_t gdn_chunk_ref_floats(int Dk, int Dv) {
    /* doubles: G, A, U, W, V' */
    return 2 * (64 + 64 * 64 + 64 * (size_t)Dv * 2 + 64 * (size_t)Dk) + 16;
}

static void vsilu_mul(float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = ds_silu(a[i]) * (b ? b[i] : 1.0f);
}

static float vmax(const float *x, int64_t n) {
    float m = x[0];
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static void vbias_act(float *y, const float *b, int64_t n, int act) {
    for (int64_t i = 0; i < n; i++) {
        float v = y[i] + (b ? b[i] : 0.0f);
        y[i] = act == DS_ACT_GELU_TANH ? ds_gelu_tanh(v) : act == DS_ACT_GELU_ERF ? ds_gelu_erf(v) : v;
    }
}

static void vmul_add(float *acc, const float *a, const float *b, int64_t n, int init) {
    for (int64_t i = 0; i < n; i++) acc[i] = (init ? 0.0f : acc[i]) + a[i] * b[i];
}

static void vgemm_acc(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int M, int K, int N,
                      float alpha) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += A[(size_t)m * lda + k] * B[(size_t)k * ldb + n];
            C[(size_t)m * ldc + n] += alpha * s;
        }
}

static float vexp_sum(float *x, float m, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i] = expf(x[i] - m);
    return s;
}

const ds_kern ds_kern_ref = {
    .isa = DS_ISA_REF,
    .packs = 0,
    .quant_x = ds_quant_x_ref,
    .to_bf16 = ds_to_bf16_ref,
    .mm = {[DS_F32] = mm_f32, [DS_F16] = mm_f16, [DS_BF16] = mm_bf16, [DS_Q8_0] = mm_q8_0, [DS_Q4_0] = mm_q4_0,
           [DS_Q4_K] = mm_q4_K, [DS_Q5_K] = mm_q5_K, [DS_Q6_K] = mm_q6_K, DS_GBLOCK_MM(mm_gblock)},
    .dot = vdot,
    .axpy = vaxpy,
    .scale = vscale,
    .silu_mul = vsilu_mul,
    .exp_sum = vexp_sum,
    .bias_act = vbias_act,
    .max = vmax,
    .mul_add = vmul_add,
    .gemm_acc = vgemm_acc,
    .vw = 1,
    .gdn_step = gdn_step_ref,
    .gdn_chunk = gdn_chunk_ref,
    .gdn_chunk_floats = gdn_chunk_ref_floats,
};

const ds_kern *ds_kern_for(ds_isa level) {
#if defined(__x86_64__)
    if (level == DS_ISA_AVX512) return &ds_kern_avx512;
    if (level == DS_ISA_AVX2) return &ds_kern_avx2;
#endif
    (void)level;
    return &ds_kern_ref;
}
