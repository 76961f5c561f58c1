/* ops_ref.c - reference implementations of ops.h. */
#include "kernels/ops.h"

#include <stdlib.h>
#include <string.h>

float ds_dot(const float *a, const float *b, int64_t n) {
    /* 16 partial sums in a fixed order: the compiler can keep them in vector
     * registers, and the result depends on n alone, never on the batch */
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += acc[l];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

void ds_matmul(float *y, int64_t ldy, const ds_mat *w, const float *x, int64_t ldx, int64_t n) {
    size_t row_bytes = ds_dtype_row_bytes(w->type, w->cols);
    const float *row = NULL;
    float *tmp = NULL;
    if (w->type != DS_F32) {
        tmp = malloc((size_t)w->cols * sizeof *tmp);
        if (!tmp) abort(); /* one row of floats; nothing sensible to do without it */
    }
    for (int64_t r = 0; r < w->rows; r++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r * row_bytes;
        if (tmp) {
            ds_dequantize_row(w->type, src, tmp, w->cols);
            row = tmp;
        } else {
            row = (const float *)src;
        }
        for (int64_t t = 0; t < n; t++) y[t * ldy + r] = ds_dot(row, x + t * ldx, w->cols);
    }
    free(tmp);
}

void ds_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void ds_l2norm(float *x, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss + eps);
    for (int64_t i = 0; i < n; i++) x[i] *= scale;
}

void ds_rope_neox(float *x, int rope_dim, int pos, float theta) {
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        /* in double: at positions of 10^5 and more a float angle is off by whole hundredths of a radian */
        double angle = (double)pos * pow((double)theta, -2.0 * i / rope_dim);
        float c = (float)cos(angle), s = (float)sin(angle);
        float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

void ds_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    float mean = sum / (float)n, ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * scale * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

void ds_rope_half(float *x, const float *cs, int hd) {
    int half = hd / 2;
    for (int j = 0; j < half; j++) {
        float c = cs[j], s = cs[half + j], a = x[j], b = x[j + half];
        x[j] = a * c - b * s;
        x[j + half] = b * c + a * s;
    }
}
