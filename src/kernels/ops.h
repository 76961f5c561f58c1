/* ops.h - the numeric building blocks of the forward pass.
 * Reference versions: plain C, F32 accumulation, written to be obviously
 * right; faster variants are checked against them. Arguments go outputs
 * first, then inputs, then sizes. */
#ifndef DS_OPS_H
#define DS_OPS_H

#include <math.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* A weight matrix [rows][cols] stored row by row in `type` blocks. */
typedef struct {
    ds_dtype type;
    const void *data;
    int64_t rows, cols;
} ds_mat;

/* y[t][r] = sum_c W[r][c] * x[t][c] for t < n; x rows are ldx apart, y rows ldy apart. */
void ds_matmul(float *y, int64_t ldy, const ds_mat *w, const float *x, int64_t ldx, int64_t n);

/* y = x / sqrt(mean(x^2) + eps) * w   (w == NULL: no scale). y may be x. */
void ds_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* x / sqrt(sum(x^2) + eps): the DeltaNet l2norm, eps inside the root over the sum */
void ds_l2norm(float *x, int64_t n, float eps);

/* NeoX (rotate-half) RoPE on the first rope_dim dims of one head at position pos. */
void ds_rope_neox(float *x, int rope_dim, int pos, float theta);

static inline float ds_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float ds_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float ds_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

float ds_dot(const float *a, const float *b, int64_t n);

/* y = (x - mean(x)) / sqrt(var(x) + eps) * w + b (LayerNorm; w, b NULL: 1, 0).
 * Mean, then the variance of x - mean, each summed in order. y may be x. */
void ds_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps);

/* GELU in its two forms: the tanh approximation (PyTorch's approximate="tanh",
 * HF's gelu_pytorch_tanh) and the exact one over erf (nn.GELU()). */
/* Activations of the backend's bias_act. */
enum { DS_ACT_NONE = 0, DS_ACT_GELU_TANH = 1, DS_ACT_GELU_ERF = 2 };

static inline float ds_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
static inline float ds_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }

/* Rotate-half rotary embedding of one head of hd dims: for j < hd/2,
 * (x[j], x[j+hd/2]) turned by the angle whose cos and sin are cs[j] and
 * cs[hd/2 + j]. */
void ds_rope_half(float *x, const float *cs, int hd);

#endif
