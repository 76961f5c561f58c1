/* image_prep.c - smart resize, resampling, normalisation and patches
 * (image_prep.h), made to give the Hugging Face Qwen2-VL image processor's
 * numbers: its smart_resize with Python's rounding, PIL's Image.resize with
 * BICUBIC on the uint8 picture (PIL's separable fixed-point resampler,
 * rounded and clipped to uint8 after each pass), then rescale by 1/255 and
 * normalise in float32 as its numpy code does. */
#include "image/image_prep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the processor refuses pictures longer than this many times their width (or
 * the other way round) */
#define MAX_ASPECT 200

static ds_status check_config(const ds_vision_config *vc, ds_err *e) {
    if (vc->patch_size <= 0 || vc->merge <= 0 || vc->temporal_patch <= 0 || vc->patch_size > 1024 || vc->merge > 64 ||
        vc->temporal_patch > 16)
        return ds_fail(e, DS_EINVAL, "image: vision config has patch %d, merge %d, temporal patch %d", vc->patch_size,
                       vc->merge, vc->temporal_patch);
    if (vc->min_pixels < 0 || vc->max_pixels <= 0 || vc->min_pixels > vc->max_pixels)
        return ds_fail(e, DS_EINVAL, "image: vision config has min_pixels %lld, max_pixels %lld",
                       (long long)vc->min_pixels, (long long)vc->max_pixels);
    return DS_OK;
}

ds_status ds_image_target_size(const ds_vision_config *vc, int width, int height, int *out_w, int *out_h, ds_err *e) {
    ds_status s = check_config(vc, e);
    if (s != DS_OK) return s;
    if (width <= 0 || height <= 0) return ds_fail(e, DS_EINVAL, "image: %dx%d pixels (zero size)", width, height);
    int64_t lo = width < height ? width : height, hi = width < height ? height : width;
    if (hi > (int64_t)MAX_ASPECT * lo)
        return ds_fail(e, DS_EINVAL, "image: %dx%d pixels, an aspect ratio of %.1f, past the limit of %d", width,
                       height, (double)hi / (double)lo, MAX_ASPECT);
    const double f = (double)vc->patch_size * vc->merge;
    const double min_px = (double)vc->min_pixels, max_px = (double)vc->max_pixels;
    const double hd = height, wd = width;
    /* Python's round() rounds halves to even, as rint() does */
    double h_bar = rint(hd / f) * f, w_bar = rint(wd / f) * f;
    if (h_bar * w_bar > max_px) {
        double beta = sqrt(hd * wd / max_px);
        h_bar = fmax(f, floor(hd / beta / f) * f);
        w_bar = fmax(f, floor(wd / beta / f) * f);
    } else if (h_bar * w_bar < min_px) {
        double beta = sqrt(min_px / (hd * wd));
        h_bar = ceil(hd * beta / f) * f;
        w_bar = ceil(wd * beta / f) * f;
    }
    if (h_bar > 1 << 20 || w_bar > 1 << 20)
        return ds_fail(e, DS_EINVAL, "image: %dx%d pixels resize to %.0fx%.0f, too large", width, height, w_bar, h_bar);
    *out_w = (int)w_bar;
    *out_h = (int)h_bar;
    return DS_OK;
}

ds_status ds_image_token_count(const ds_vision_config *vc, int width, int height, int *n_tokens, ds_err *e) {
    int tw, th;
    ds_status s = ds_image_target_size(vc, width, height, &tw, &th, e);
    if (s != DS_OK) return s;
    int64_t unit = (int64_t)vc->patch_size * vc->merge;
    *n_tokens = (int)((th / unit) * (tw / unit));
    return DS_OK;
}

/* ---- PIL's resampler (Resample.c), BICUBIC with a = -0.5 ---- */

#define PRECISION_BITS (32 - 8 - 2)

static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

typedef struct {
    int ksize;
    int *bounds;   /* [out][2]: first source pixel, count */
    int32_t *k;    /* [out][ksize] fixed-point weights */
} resample_coeffs;

static void coeffs_free(resample_coeffs *c) {
    free(c->bounds);
    free(c->k);
}

/* The weights of each output pixel over the source pixels, as PIL's
 * precompute_coeffs and normalize_coeffs_8bpc compute them. */
static int coeffs_make(int in_size, int out_size, resample_coeffs *c) {
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->bounds = malloc((size_t)out_size * 2 * sizeof *c->bounds);
    c->k = malloc((size_t)out_size * c->ksize * sizeof *c->k);
    double *kk = malloc((size_t)c->ksize * sizeof *kk);
    if (!c->bounds || !c->k || !kk) {
        free(kk);
        return 0;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double w = bicubic((x + xmin - center + 0.5) * ss);
            kk[x] = w;
            ww += w;
        }
        int32_t *k = c->k + (size_t)xx * c->ksize;
        for (int x = 0; x < c->ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? kk[x] / ww : kk[x]) : 0.0;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS)) : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax;
    }
    free(kk);
    return 1;
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* src [sh][sw][3] -> dst [sh][dw][3] */
static void resample_rows(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, const resample_coeffs *c) {
    for (int y = 0; y < sh; y++) {
        const uint8_t *in = src + (size_t)y * sw * 3;
        uint8_t *o = dst + (size_t)y * dw * 3;
        for (int xx = 0; xx < dw; xx++) {
            int xmin = c->bounds[2 * xx], xmax = c->bounds[2 * xx + 1];
            const int32_t *k = c->k + (size_t)xx * c->ksize;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int x = 0; x < xmax; x++) {
                const uint8_t *p = in + (size_t)(x + xmin) * 3;
                s0 += p[0] * k[x], s1 += p[1] * k[x], s2 += p[2] * k[x];
            }
            o[3 * xx] = clip8(s0), o[3 * xx + 1] = clip8(s1), o[3 * xx + 2] = clip8(s2);
        }
    }
}

/* src [sh][w][3] -> dst [dh][w][3] */
static void resample_cols(const uint8_t *src, int w, uint8_t *dst, int dh, const resample_coeffs *c) {
    size_t stride = (size_t)w * 3;
    for (int yy = 0; yy < dh; yy++) {
        int ymin = c->bounds[2 * yy], ymax = c->bounds[2 * yy + 1];
        const int32_t *k = c->k + (size_t)yy * c->ksize;
        uint8_t *o = dst + (size_t)yy * stride;
        for (size_t i = 0; i < stride; i++) {
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int y = 0; y < ymax; y++) s += src[(size_t)(y + ymin) * stride + i] * k[y];
            o[i] = clip8(s);
        }
    }
}

/* PIL's Image.resize((dw, dh), BICUBIC) of an RGB image: the horizontal pass
 * first (only when the width changes), then the vertical one (only when the
 * height does), each rounded to uint8. Returns a new buffer or NULL. */
static uint8_t *resize_bicubic(const uint8_t *src, int sw, int sh, int dw, int dh) {
    resample_coeffs ch = {0}, cv = {0};
    uint8_t *tmp = NULL, *out = NULL;
    int ok = coeffs_make(sw, dw, &ch) && coeffs_make(sh, dh, &cv);
    const uint8_t *cur = src;
    if (ok && dw != sw) {
        tmp = malloc((size_t)dw * sh * 3);
        ok = tmp != NULL;
        if (ok) resample_rows(src, sw, sh, tmp, dw, &ch);
        cur = tmp;
    }
    if (ok) {
        out = malloc((size_t)dw * dh * 3);
        if (out && dh != sh) resample_cols(cur, dw, out, dh, &cv);
        else if (out) memcpy(out, cur, (size_t)dw * dh * 3);
    }
    free(tmp);
    coeffs_free(&ch);
    coeffs_free(&cv);
    return out;
}

ds_status ds_image_preprocess(const ds_image *im, const ds_vision_config *vc, ds_image_patches *out, ds_err *e) {
    memset(out, 0, sizeof *out);
    if (!im || !im->rgb) return ds_fail(e, DS_EINVAL, "image: no pixels to preprocess");
    int tw, th;
    ds_status s = ds_image_target_size(vc, im->width, im->height, &tw, &th, e);
    if (s != DS_OK) return s;
    const int P = vc->patch_size, T = vc->temporal_patch, M = vc->merge;
    const int gh = th / P, gw = tw / P;
    const int dim = 3 * T * P * P;
    uint8_t *px = resize_bicubic(im->rgb, im->width, im->height, tw, th);
    float *patches = px ? malloc((size_t)gh * gw * dim * sizeof *patches) : NULL;
    if (!patches) {
        free(px);
        return ds_fail(e, DS_ENOMEM, "image: no memory to preprocess %dx%d -> %dx%d", im->width, im->height, tw, th);
    }
    /* the processor's rescale (float64 product stored as float32), then
     * (x - mean) / std in float32, per uint8 value and channel */
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float x = (float)(v * (1.0 / 255.0));
            lut[c][v] = (x - vc->image_mean[c]) / vc->image_std[c];
        }
    /* patch order: merge group (row, column), then within it (row, column);
     * each patch [3][T][P][P] with the frame repeated over T */
    size_t idx = 0;
    for (int by = 0; by < gh / M; by++)
        for (int bx = 0; bx < gw / M; bx++)
            for (int my = 0; my < M; my++)
                for (int mx = 0; mx < M; mx++, idx++) {
                    int py = by * M + my, pxx = bx * M + mx;
                    float *dst = patches + idx * dim;
                    for (int c = 0; c < 3; c++)
                        for (int t = 0; t < T; t++)
                            for (int r = 0; r < P; r++) {
                                const uint8_t *row = px + ((size_t)(py * P + r) * tw + (size_t)pxx * P) * 3 + c;
                                for (int q = 0; q < P; q++) *dst++ = lut[c][row[3 * q]];
                            }
                }
    free(px);
    out->grid_t = 1;
    out->grid_h = gh;
    out->grid_w = gw;
    out->patch_dim = dim;
    out->patches = patches;
    return DS_OK;
}

void ds_image_patches_free(ds_image_patches *p) {
    if (!p) return;
    free(p->patches);
    p->patches = NULL;
}
