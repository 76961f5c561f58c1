/* backend_cpu_int.h - the CPU backend's private state, shared by its files:
 * backend_cpu.c (weights, buffers, matrix products, elementwise ops),
 * cpu_attention.c and cpu_deltanet.c. */
#ifndef DS_BACKEND_CPU_INT_H
#define DS_BACKEND_CPU_INT_H

#include <math.h>

#include "kernels/backend.h"
#include "kernels/kern.h"
#include "kernels/threadpool.h"

struct ds_bweight {
    ds_wmat m;
    uint8_t *packed;     /* owned; NULL when the kernels read GGUF blocks */
    size_t packed_bytes;
    void *owned;         /* owned rows m.data points to (nvfp4 widened to BF16), or NULL */
    size_t owned_bytes;
};

struct mm_job; /* backend_cpu.c: the state of one matrix product call */

typedef struct {
    ds_backend base;
    ds_pool *pool;
    int nth;
    const ds_kern *k;
    ds_mm_fn bf16_mm;    /* BF16 product: VDPBF16PS where the CPU has it */
    int64_t max_cols;    /* widest weight uploaded */
    int64_t row_limit;   /* > 0 during a matmul_rows call: products stop after the weights' first row_limit rows */
    ds_be_limits lim;
    int reserved_rows;
    int64_t reserved_width; /* columns of the activation scratch */
    void *xq_buf;        /* quantised activations: reserved_rows x max_cols */
    ds_xq xq;
    uint16_t *xb;        /* BF16 activations */
    int32_t *att_blocks; /* attention: first token of each query block (reserved_rows + 1) */
    float *scratch;      /* per thread: scratch_floats each */
    size_t scratch_floats;
    struct mm_job *job;  /* reused by every product call */
    int profile;         /* DS_PROFILE set: time every operation */
    double prof_s[16];
    long prof_n[16];
} cpu_backend;

/* One row of a key block in an online softmax (both attention ops): the row's running maximum mx
 * and sum, and its output accumulator o[0..width), are rescaled when the block's maximum bm raises
 * the running one; s[0..valid) becomes exp(s - max), zero up to n for the product with V. */
static inline void cpu_softmax_block_row(const ds_kern *kern, float *s, int valid, int n, float bm, float *mx,
                                         float *sum, float *o, int width) {
    float m = bm > *mx ? bm : *mx;
    if (*mx != -INFINITY && m != *mx) {
        float corr = expf(*mx - m);
        *sum *= corr;
        kern->scale(o, corr, width);
    }
    *mx = m;
    *sum += kern->exp_sum(s, m, valid);
    for (int p = valid; p < n; p++) s[p] = 0.0f;
}

static inline float *cpu_scratch(cpu_backend *cb, int ith) { return cb->scratch + (size_t)ith * cb->scratch_floats; }

/* Static split of [0, n) among nth threads: [*lo, *hi) for thread ith. */
static inline void cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}

size_t ds_cpu_attention_scratch(const ds_be_limits *lim);
void ds_cpu_deltanet_commit(ds_backend *be, const ds_gdn_layer *L, float *conv_state, float *state, float *const *rec,
                            int n);
size_t ds_cpu_deltanet_scratch(const ds_kern *k, const ds_be_limits *lim);
void ds_cpu_attention(ds_backend *be, float *out, float *q, float *k, const float *v, int n, const ds_attn_row *rows,
                      const ds_kv_view *kv, int nh, int gated, const float *q_norm, const float *k_norm, float eps,
                      const ds_rope_freqs_view *rope);
size_t ds_cpu_vit_attention_floats(ds_backend *be, int n, int nh, int hd);
void ds_cpu_vit_attention(ds_backend *be, float *out, float *qkv, const float *rot, int n, int nh, int hd,
                          float *scratch);
void ds_cpu_deltanet(ds_backend *be, const ds_gdn_layer *L, const ds_gdn_seq *seqs, int n_seqs, float *mixed, float *ab,
                     const float *z, float *o, const float *norm_w, float eps, int chunk);

#endif
