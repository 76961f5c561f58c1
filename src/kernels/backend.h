/* backend.h - the compute backend the forward pass runs on.
 *
 * The model calls no kernel directly. It uploads each weight matrix once
 * (ds_be_weight_new: the backend keeps it in its own memory, in whatever
 * layout its kernels want), allocates its activation buffers from the
 * backend (ds_be_alloc), and runs operations on them through the table
 * below. A second backend (a GPU) provides the same table; nothing above
 * this header changes. Buffers handed to operations must come from
 * ds_be_alloc, or be cache storage the backend can address (the CPU backend
 * addresses host memory: KV pages and state slots live in cache.h pools).
 *
 * The CPU backend (backend_cpu.c) runs every operation on a persistent
 * thread pool, splits matrix products by weight rows, and picks its kernels
 * at run time (cpu.h: AVX-512, AVX2 or the scalar reference).
 *
 * Results of every operation on a row depend only on that row's inputs:
 * never on the number of rows in the call, nor on the thread count.
 *
 * Threads: a backend is driven by one thread at a time. */
#ifndef DS_BACKEND_H
#define DS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/ops.h"

typedef struct ds_backend ds_backend;
typedef struct ds_bweight ds_bweight; /* a weight matrix in the backend's memory */

enum {
    DS_W_MATMUL = 1, /* used in matrix products */
    DS_W_ROWS = 2,   /* rows are looked up (embeddings) */
    DS_W_X8 = 4,     /* products may read the activations at 8 bits alone (a Q8_0 matrix then
                      * skips the residual term; kernels/kern.h NUMERICS): a property of the
                      * weight, never of the batch, so batching stays invisible */
};

/* One output of a matrix product: y[t][r] = W[r] . x[t], rows ldy apart. */
typedef struct {
    float *y;
    int64_t ldy;
    const ds_bweight *w;
} ds_mm_out;

/* One group of a grouped product: its own input rows and up to four weights
 * reading them (an expert's gate and up projections, or its down projection). */
#define DS_MM_GROUP_OUTS 4
typedef struct {
    const float *x;
    int64_t ldx, n;
    int n_outs;
    ds_mm_out outs[DS_MM_GROUP_OUTS];
} ds_mm_group;

/* Paged KV storage of one attention layer as the attention op reads it:
 * K (or V) of position p lives at k + page(p) * page_stride + (p % page_size) * row. */
typedef struct {
    float *k, *v;           /* layer base of the K and V planes in page 0 */
    size_t page_stride;     /* floats from one page to the next */
    int page_size;
    int n_kv_heads, head_dim;
} ds_kv_view;

/* Per token of an attention call: where its sequence's pages are, its
 * position (its KV slot and how far it sees), and its rotation. rope_axis
 * NULL: every rotated pair turns by pos (1-D RoPE); otherwise pair i turns
 * by rope_pos[rope_axis[i]] (M-RoPE: axis 0 T, 1 H, 2 W), with the same
 * angle computation, so a text token (T = H = W = pos) gets the same bits. */
typedef struct {
    const int32_t *pages;
    int32_t pos;
    int32_t rope_pos[3];
    const uint8_t *rope_axis; /* [rope_dim / 2] */
} ds_attn_row;

/* Rotation of the first dim dims of each head (NeoX halves): pair i turns
 * by position * inv_freq[i] radians (angle in double), and cos and sin are
 * scaled by mscale (YaRN's attention factor; 1 for plain RoPE). */
typedef struct {
    int dim;
    const double *inv_freq; /* [dim / 2] */
    float mscale;
} ds_rope_freqs_view;

/* Gated DeltaNet geometry and per-layer constants. */
typedef struct {
    int Hk, Hv, Dk, Dv, conv_dim, conv_kernel, v_tiled;
    const float *conv_w;   /* [C][K] */
    const float *dt_bias, *ssm_a; /* [Hv] */
} ds_gdn_layer;

/* One sequence's slice of a DeltaNet call. */
typedef struct {
    int i0, i1;            /* its rows in the batch */
    int pos0;              /* absolute position of row i0 (chunks align to multiples of chunk) */
    float *conv_state;     /* [K-1][C] window of raw inputs */
    float *state;          /* [Hv][Dk][Dv] */
    int chunked;           /* 1: chunked form; 0: token by token */
    float *const *snap;    /* VERIFY: per row, its record (the conv window after it, then its
                            * recurrence inputs); conv_state and state are left as they were */
} ds_gdn_seq;

/* What the calls of one model will need at most (weights' widths are known
 * from ds_be_weight_new). */
typedef struct {
    int max_rows;          /* tokens per call */
    int max_group_rows;    /* rows of all groups of one grouped product (MoE: tokens x experts per token) */
    int max_positions;     /* attention span */
    int n_heads, head_dim; /* attention */
    int gdn_k_dim, gdn_v_dim, gdn_conv_dim; /* Gated DeltaNet (0: none) */
} ds_be_limits;

typedef struct ds_backend_ops {
    const char *name;
    void (*free)(ds_backend *be);
    /* weights: flags say what the weight is used for (DS_W_*) */
    ds_status (*weight_new)(ds_backend *be, const ds_mat *src, int flags, ds_bweight **out, ds_err *e);
    void (*weight_free)(ds_backend *be, ds_bweight *w);
    size_t (*weight_bytes)(const ds_bweight *w);
    /* the host bytes [p, p+n) (a mapped model file) need not stay resident:
     * everything the backend reads from them it has copied, or rereads on demand */
    void (*release_host)(ds_backend *be, const void *p, size_t n);
    /* buffers */
    void *(*alloc)(ds_backend *be, size_t bytes);
    void (*free_buf)(ds_backend *be, void *p);
    /* sizes scratch for the calls of a model; no allocation happens in later calls */
    ds_status (*reserve)(ds_backend *be, const ds_be_limits *lim, ds_err *e);
    /* y = W x for several weights that share x [n][cols] */
    void (*matmul)(ds_backend *be, const ds_mm_out *outs, int n_outs, const float *x, int64_t ldx, int64_t n);
    /* y = W x over W's first `rows` rows only: their bytes alone are read, and each row gets the
     * bits the whole product gives it (the MTP head's drafts over the vocabulary's first tokens) */
    void (*matmul_rows)(ds_backend *be, float *y, int64_t ldy, const ds_bweight *w, int64_t rows, const float *x,
                        int64_t ldx, int64_t n);
    /* several products in one pass, each group with its own input (MoE
     * experts); every group's weights have the same width */
    void (*matmul_grouped)(ds_backend *be, const ds_mm_group *groups, int n_groups);
    /* rows of a weight dequantised to F32: y[i] = W[ids[i]] (rows of y are W's width apart) */
    void (*get_rows)(ds_backend *be, float *y, const ds_bweight *w, const int32_t *ids, int n);
    /* dst[i] = src[rows[i]] (rows NULL: src[i]) for n rows of d floats */
    void (*gather_rows)(ds_backend *be, float *dst, int ld_dst, const float *src, int ld_src, const int32_t *rows, int n,
                        int d);
    /* MoE routing: softmax of logits [n][E] in place, then per row the top k
     * (ties to the lower index) with weights renormalised to sum 1 */
    void (*moe_route)(ds_backend *be, float *logits, int n, int E, int k, int32_t *choice, float *weight);
    /* MoE output: y[i] = sigmoid(gate[i]) y[i] (the shared expert), then
     * y[i] += weight[i][j] eout[rowof[i][j]] over the k choices in expert order */
    void (*moe_combine)(ds_backend *be, float *y, const float *gate, const float *eout, const int32_t *rowof,
                        const int32_t *choice, const float *weight, int n, int k, int d);
    /* y[i] = rmsnorm(x[i]) * w for n rows of width d (rows ld apart); y may be x */
    void (*rmsnorm)(ds_backend *be, float *y, const float *x, const float *w, int n, int d, int ld, float eps);
    /* x[i] += y[i]; then u[i] = rmsnorm(x[i]) * w (w NULL: skip the norm) */
    void (*add_rmsnorm)(ds_backend *be, float *x, const float *y, float *u, const float *w, int n, int d, float eps);
    /* a[i] = silu(a[i]) * b[i] over n rows of d, rows ld apart */
    void (*swiglu)(ds_backend *be, float *a, const float *b, int n, int d, int ld);
    /* attention: q/k RMSNorm and RoPE, K and V written to their pages, softmax
     * over each token's positions 0..pos, optional sigmoid gate; out [n][nh*hd] */
    void (*attention)(ds_backend *be, float *out, float *q, float *k, const float *v, int n, const ds_attn_row *rows,
                      const ds_kv_view *kv, int nh, int gated, const float *q_norm, const float *k_norm, float eps,
                      const ds_rope_freqs_view *rope);
    /* Gated DeltaNet: conv, gates, recurrence, output norm gated by SiLU(z);
     * mixed [n][C] (overwritten), ab [n][2Hv] (beta in, gates out), z [n][Hv*Dv], o [n][Hv*Dv] */
    void (*deltanet)(ds_backend *be, const ds_gdn_layer *L, const ds_gdn_seq *seqs, int n_seqs, float *mixed, float *ab,
                     const float *z, float *o, const float *norm_w, float eps, int chunk);
    /* vision tower: y[i] = layernorm(x[i]) * w + b for n rows of d, rows ld apart; y may be x */
    void (*layernorm)(ds_backend *be, float *y, const float *x, const float *w, const float *b, int n, int d, int ld,
                      float eps);
    /* y[i] = act(y[i] + bias) over n rows of d, rows ld apart (bias NULL: none; act DS_ACT_*, ops.h) */
    void (*bias_act)(ds_backend *be, float *y, const float *bias, int n, int d, int ld, int act);
    /* vision tower: full (non-causal) attention over one image's n patches.
     * qkv [n][3][nh][hd] (biases added): q and k are turned in place by each
     * patch's rotary table rot [n][hd] (ops.h ds_rope_half: cos then sin);
     * out [n][nh*hd] = softmax(q k^T / sqrt(hd)) v per head. Works in tiles
     * of patches: scratch (a buffer of vit_attention_floats floats) holds
     * K^T and V by head and per-thread tiles, never an n x n matrix. */
    size_t (*vit_attention_floats)(ds_backend *be, int n, int nh, int hd);
    void (*vit_attention)(ds_backend *be, float *out, float *qkv, const float *rot, int n, int nh, int hd,
                          float *scratch);
    /* Advances a state (conv window, recurrent state) by the first n tokens of
     * a VERIFY call, from their records rec[0..n-1] (see ds_gdn_seq.snap) */
    void (*deltanet_commit)(ds_backend *be, const ds_gdn_layer *L, float *conv_state, float *state, float *const *rec,
                            int n);
} ds_backend_ops;

struct ds_backend {
    const ds_backend_ops *ops;
};

/* The CPU backend: n_threads <= 0 means one per online core. */
ds_status ds_backend_cpu_new(int n_threads, ds_backend **out, ds_err *e);
int ds_backend_cpu_threads(const ds_backend *be);

/* Thin wrappers over the table. */
static inline void ds_be_free(ds_backend *be) { if (be) be->ops->free(be); }
static inline ds_status ds_be_weight_new(ds_backend *be, const ds_mat *src, int flags, ds_bweight **out, ds_err *e) {
    return be->ops->weight_new(be, src, flags, out, e);
}
static inline void ds_be_weight_free(ds_backend *be, ds_bweight *w) { if (w) be->ops->weight_free(be, w); }
static inline void *ds_be_alloc(ds_backend *be, size_t bytes) { return be->ops->alloc(be, bytes); }
static inline void ds_be_free_buf(ds_backend *be, void *p) { if (p) be->ops->free_buf(be, p); }
static inline void ds_be_matmul(ds_backend *be, const ds_mm_out *outs, int n_outs, const float *x, int64_t ldx,
                                int64_t n) {
    be->ops->matmul(be, outs, n_outs, x, ldx, n);
}
static inline void ds_be_matmul1(ds_backend *be, float *y, int64_t ldy, const ds_bweight *w, const float *x,
                                 int64_t ldx, int64_t n) {
    ds_mm_out o = {y, ldy, w};
    be->ops->matmul(be, &o, 1, x, ldx, n);
}
static inline void ds_be_matmul_rows(ds_backend *be, float *y, int64_t ldy, const ds_bweight *w, int64_t rows,
                                     const float *x, int64_t ldx, int64_t n) {
    be->ops->matmul_rows(be, y, ldy, w, rows, x, ldx, n);
}

#endif
