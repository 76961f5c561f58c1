/* vision.c - the vision tower's forward pass (vision.h), as Hugging Face's
 * Qwen3-VL vision model computes it (the same for Qwen3.5 / 3.6):
 *
 *   patch embedding  the Conv3D over (frame, row, column) as two products,
 *                    one per frame of the temporal pair, summed, plus bias;
 *   position         the learned side x side grid bilinearly interpolated to
 *                    the image's grid (fast_pos_embed_interpolate: linspace
 *                    with the corners aligned, 4 neighbours), in patch order;
 *   blocks           x += proj(attn(LN1(x))), x += fc2(gelu_tanh(fc1(LN2(x))));
 *                    attention over every patch of the image, q and k turned
 *                    by a 2D rotary embedding: head_dim/2 rotated pairs in
 *                    rotate-half form, the first head_dim/4 by the patch's row,
 *                    the next head_dim/4 by its column, frequencies
 *                    theta^(-2i / (head_dim/2)) (VisionRotaryEmbedding(head_dim/2));
 *   DeepStack        after a listed block: LayerNorm over the 4D of each 2x2
 *                    group, fc1, GELU (erf: nn.GELU()), fc2;
 *   merger           post_ln per patch, the 2x2 group as one 4D row, fc1,
 *                    GELU (erf), fc2.
 * (llama.cpp's mtmd runs the mergers' GELU in its tanh form; HF's is exact.)
 *
 * A job keeps one image's residual stream x between calls; a call advances
 * jobs piece by piece (the patch embedding, one block with its DeepStack
 * merger, the final merger), and the jobs that take the same kind of piece in
 * a round share their matrix products (one grouped call; every row's result
 * depends on that row alone, so batching and cutting leave the bits alone).
 *
 * DS_VISION_DUMP=DIR (tests): each job writes its residual stream after the
 * patch embedding (embed.f32) and after block N (block_N.f32), and its
 * output rows (out.f32), as raw little-endian float32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"
#include "model/vision.h"

#define MAX_ROUND 16 /* jobs whose products share one grouped call */
#define MLP_ROWS 256 /* rows of the MLP's hidden layer held at once */

typedef struct {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    ds_w qkv, out, up, down;
    const float *qkv_b, *out_b, *up_b, *down_b;
    int ds; /* its DeepStack merger, or -1 */
} vblock;

typedef struct {
    const float *norm_w, *norm_b;
    ds_w fc1, fc2;
    const float *fc1_b, *fc2_b;
} vmerger;

struct ds_vision {
    ds_backend *be;
    ds_vision_config c;
    int D, hd, F, E, pd, row_out, side;
    ds_w patch[2];
    const float *patch_b;
    float *pos_table;           /* [n_pos][D] */
    vblock *blocks;
    vmerger merger, deep[DS_MAX_DEEPSTACK];
    ds_bweight **owned;
    int n_owned;
    float **vecs;               /* every F32 vector copied at load */
    int n_vecs, cap_vecs;
    float *hidden;              /* [MLP_ROWS][F] */
    const char *dump;
};

enum { PIECE_EMBED = 0 }; /* then blocks 1..L, the merger L+1, done L+2 */

struct ds_vision_job {
    ds_vision *v;
    int n, gt, gh, gw;
    int next;                  /* the piece it runs next */
    float *x;                  /* [n][D] residual stream */
    float *big;                /* [n][max(3D, pd)]: patches, qkv, products */
    float *att;                /* [n][D]: normed input, attention output */
    float *rot;                /* [n][hd]: cos, sin of each patch */
    float *ascratch;           /* the backend's attention scratch */
    float *out;                /* [n/4][E * (1 + n_deepstack)] */
    void *mem;
};

/* ------------------------------------------------------------------------ */
/* Binding                                                                   */

static const ds_tensor *tensor(const ds_vision_file *f, const char *fmt, int i) {
    char name[64];
    snprintf(name, sizeof name, fmt, i);
    return ds_vision_tensor(f, name);
}

static size_t elems(const ds_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= (size_t)t->ne[d];
    return n;
}

static ds_status want(const ds_vision_file *f, const ds_tensor *t, const char *fmt, int i, ds_err *e) {
    if (t) return DS_OK;
    char name[64];
    snprintf(name, sizeof name, fmt, i);
    return ds_fail(e, DS_ENOTFOUND, "%s: the vision tower has no tensor %s", ds_vision_path(f), name);
}

/* An F32 copy of a vector (norms, biases) of the expected length. */
static ds_status vec(ds_vision *v, const ds_vision_file *f, const char *fmt, int i, int64_t len, const float **out,
                     ds_err *e) {
    const ds_tensor *t = tensor(f, fmt, i);
    ds_status s = want(f, t, fmt, i, e);
    if (s) return s;
    if ((int64_t)elems(t) != len)
        return ds_fail(e, DS_ECORRUPT, "%s: tensor %s has %zu elements, the tower needs %lld", ds_vision_path(f), t->name,
                       elems(t), (long long)len);
    if (v->n_vecs == v->cap_vecs) {
        int cap = v->cap_vecs ? 2 * v->cap_vecs : 64;
        float **p = realloc(v->vecs, (size_t)cap * sizeof *p);
        if (!p) return ds_fail(e, DS_ENOMEM, "vision: out of memory");
        v->vecs = p;
        v->cap_vecs = cap;
    }
    float *p = malloc((size_t)len * sizeof(float));
    if (!p) return ds_fail(e, DS_ENOMEM, "vision: out of memory");
    v->vecs[v->n_vecs++] = p;
    ds_dequantize_row(t->type, t->data, p, len);
    *out = p;
    return DS_OK;
}

/* A matrix of rows x cols on the backend: ne[last] = rows, the dims below
 * flattened into each row (the patch embedding's {P, P, 3}). */
static ds_status mat(ds_vision *v, const ds_vision_file *f, const char *fmt, int i, int64_t rows, int64_t cols, ds_w *out,
                     ds_err *e) {
    const ds_tensor *t = tensor(f, fmt, i);
    ds_status s = want(f, t, fmt, i, e);
    if (s) return s;
    if ((int64_t)elems(t) != rows * cols || t->ne[t->n_dims - 1] != rows)
        return ds_fail(e, DS_ECORRUPT, "%s: tensor %s is not %lldx%lld", ds_vision_path(f), t->name, (long long)rows,
                       (long long)cols);
    ds_mat m = {.type = t->type, .data = t->data, .rows = rows, .cols = cols};
    ds_bweight *w;
    s = ds_be_weight_new(v->be, &m, DS_W_MATMUL, &w, e);
    if (s) return s;
    v->owned[v->n_owned++] = w;
    *out = w;
    return DS_OK;
}

/* A merger: its norm (norm_width), fc1 [4D][4D] and fc2 [E][4D]; names are
 * formats of the DeepStack index's block i */
static ds_status bind_merger(ds_vision *v, const ds_vision_file *f, const char *norm, const char *fc1, const char *fc2,
                             int i, int norm_width, vmerger *m, ds_err *e) {
    char w[64], b[64];
    int D4 = 4 * v->D;
    ds_status s = DS_OK;
    snprintf(w, sizeof w, "%s.weight", norm), snprintf(b, sizeof b, "%s.bias", norm);
    if (!s) s = vec(v, f, w, i, norm_width, &m->norm_w, e);
    if (!s) s = vec(v, f, b, i, norm_width, &m->norm_b, e);
    snprintf(w, sizeof w, "%s.weight", fc1), snprintf(b, sizeof b, "%s.bias", fc1);
    if (!s) s = mat(v, f, w, i, D4, D4, &m->fc1, e);
    if (!s) s = vec(v, f, b, i, D4, &m->fc1_b, e);
    snprintf(w, sizeof w, "%s.weight", fc2), snprintf(b, sizeof b, "%s.bias", fc2);
    if (!s) s = mat(v, f, w, i, v->E, D4, &m->fc2, e);
    if (!s) s = vec(v, f, b, i, v->E, &m->fc2_b, e);
    return s;
}

static ds_status bind(ds_vision *v, const ds_vision_file *f, ds_err *e) {
    const ds_vision_config *c = &v->c;
    int D = v->D, P = c->patch_size;
    ds_status s = DS_OK;
    for (int k = 0; !s && k < 2; k++)
        s = mat(v, f, k ? "v.patch_embd.weight.%d" : "v.patch_embd.weight", 1, D, 3 * P * P, &v->patch[k], e);
    if (!s) s = vec(v, f, "v.patch_embd.bias", 0, D, &v->patch_b, e);
    if (!s) { /* the position grid, as F32 rows */
        const ds_tensor *t = ds_vision_tensor(f, "v.position_embd.weight");
        s = want(f, t, "v.position_embd.weight", 0, e);
        if (!s && (t->ne[0] != D || (int64_t)elems(t) != (int64_t)D * c->n_pos))
            s = ds_fail(e, DS_ECORRUPT, "%s: tensor %s is not %dx%d", ds_vision_path(f), t->name, c->n_pos, D);
        if (!s && !(v->pos_table = malloc((size_t)c->n_pos * (size_t)D * sizeof(float))))
            s = ds_fail(e, DS_ENOMEM, "vision: out of memory");
        size_t rb = s ? 0 : ds_dtype_row_bytes(t->type, D);
        for (int r = 0; !s && r < c->n_pos; r++)
            ds_dequantize_row(t->type, t->data + (size_t)r * rb, v->pos_table + (size_t)r * D, D);
    }
    for (int l = 0; !s && l < c->n_layer; l++) {
        vblock *b = &v->blocks[l];
        b->ds = -1;
        for (int k = 0; k < c->n_deepstack; k++)
            if (c->deepstack_layers[k] == l) b->ds = k;
        if (!s) s = vec(v, f, "v.blk.%d.ln1.weight", l, D, &b->ln1_w, e);
        if (!s) s = vec(v, f, "v.blk.%d.ln1.bias", l, D, &b->ln1_b, e);
        if (!s) s = vec(v, f, "v.blk.%d.ln2.weight", l, D, &b->ln2_w, e);
        if (!s) s = vec(v, f, "v.blk.%d.ln2.bias", l, D, &b->ln2_b, e);
        if (!s) s = mat(v, f, "v.blk.%d.attn_qkv.weight", l, 3 * D, D, &b->qkv, e);
        if (!s) s = vec(v, f, "v.blk.%d.attn_qkv.bias", l, 3 * D, &b->qkv_b, e);
        if (!s) s = mat(v, f, "v.blk.%d.attn_out.weight", l, D, D, &b->out, e);
        if (!s) s = vec(v, f, "v.blk.%d.attn_out.bias", l, D, &b->out_b, e);
        if (!s) s = mat(v, f, "v.blk.%d.ffn_up.weight", l, v->F, D, &b->up, e);
        if (!s) s = vec(v, f, "v.blk.%d.ffn_up.bias", l, v->F, &b->up_b, e);
        if (!s) s = mat(v, f, "v.blk.%d.ffn_down.weight", l, D, v->F, &b->down, e);
        if (!s) s = vec(v, f, "v.blk.%d.ffn_down.bias", l, D, &b->down_b, e);
    }
    if (!s) s = bind_merger(v, f, "v.post_ln", "mm.0", "mm.2", 0, D, &v->merger, e);
    for (int k = 0; !s && k < c->n_deepstack; k++)
        s = bind_merger(v, f, "v.deepstack.%d.norm", "v.deepstack.%d.fc1", "v.deepstack.%d.fc2", c->deepstack_layers[k],
                        4 * D, &v->deep[k], e);
    return s;
}

ds_status ds_vision_new(ds_model *text, const ds_vision_file *f, ds_vision **out, ds_err *e) {
    *out = NULL;
    const ds_vision_config *c = ds_vision_config_of(f);
    const ds_model_config *tc = ds_model_cfg(text);
    if (c->out_embd != tc->n_embd)
        return ds_fail(e, DS_EINVAL, "%s: the vision tower's output width %d is not the text model's width %d (%s)",
                       ds_vision_path(f), c->out_embd, tc->n_embd, ds_model_path(text->file));
    int side = (int)lrint(sqrt((double)c->n_pos));
    if (c->n_embd <= 0 || c->n_head <= 0 || c->n_embd % c->n_head || (c->n_embd / c->n_head) % 4 || c->merge != 2 ||
        c->temporal_patch != 2 || c->patch_size <= 0 || side * side != c->n_pos || c->n_layer <= 0 ||
        c->n_deepstack < 0 || c->n_deepstack > DS_MAX_DEEPSTACK)
        return ds_fail(e, DS_EUNSUPPORTED,
                       "%s: a vision tower of width %d, %d heads, merge %d, temporal patch %d and %d position "
                       "embeddings is not supported (head size a multiple of 4, 2x2 merge, frame pairs, a square "
                       "position grid)",
                       ds_vision_path(f), c->n_embd, c->n_head, c->merge, c->temporal_patch, c->n_pos);
    for (int k = 0; k < c->n_deepstack; k++)
        if (c->deepstack_layers[k] < 0 || c->deepstack_layers[k] >= c->n_layer)
            return ds_fail(e, DS_ECORRUPT, "%s: DeepStack layer %d is not one of the tower's %d blocks", ds_vision_path(f),
                           c->deepstack_layers[k], c->n_layer);
    ds_vision *v = calloc(1, sizeof *v);
    if (!v) return ds_fail(e, DS_ENOMEM, "vision: out of memory");
    v->be = text->be;
    v->c = *c;
    v->D = c->n_embd;
    v->hd = c->n_embd / c->n_head;
    v->F = c->n_ff;
    v->E = c->out_embd;
    v->pd = 3 * c->temporal_patch * c->patch_size * c->patch_size;
    v->row_out = v->E * (1 + c->n_deepstack);
    v->side = side;
    const char *dump = getenv("DS_VISION_DUMP");
    v->dump = dump && *dump ? dump : NULL;
    v->blocks = calloc((size_t)c->n_layer, sizeof *v->blocks);
    v->owned = calloc((size_t)(2 + 4 * c->n_layer + 2 * (1 + c->n_deepstack)), sizeof *v->owned);
    v->hidden = ds_be_alloc(v->be, (size_t)MLP_ROWS * (size_t)v->F * sizeof(float));
    ds_status s = v->blocks && v->owned && v->hidden ? bind(v, f, e) : ds_fail(e, DS_ENOMEM, "vision: out of memory");
    if (s) {
        ds_vision_free(v);
        return s;
    }
    *out = v;
    return DS_OK;
}

void ds_vision_free(ds_vision *v) {
    if (!v) return;
    for (int i = 0; i < v->n_owned; i++) ds_be_weight_free(v->be, v->owned[i]);
    for (int i = 0; i < v->n_vecs; i++) free(v->vecs[i]);
    ds_be_free_buf(v->be, v->hidden);
    free(v->vecs);
    free(v->owned);
    free(v->blocks);
    free(v->pos_table);
    free(v);
}

const ds_vision_config *ds_vision_cfg(const ds_vision *v) { return &v->c; }

/* ------------------------------------------------------------------------ */
/* Jobs                                                                      */

typedef struct {
    size_t x, big, att, rot, ascratch, out, total;
} job_layout;

static size_t rnd(size_t floats) { return (floats + 15) / 16 * 16; }

/* Patches of an image the tower takes, or 0. One frame pair only: HF
 * attends within each temporal slice of a video (cu_seqlens), which jobs
 * do not cut. */
static int job_patches(const ds_vision *v, const ds_image_patches *p) {
    if (!p || p->grid_t != 1 || p->grid_h <= 0 || p->grid_w <= 0 || p->grid_h % 2 || p->grid_w % 2 || p->patch_dim != v->pd)
        return 0;
    int64_t n = (int64_t)p->grid_t * p->grid_h * p->grid_w;
    return n <= (1 << 20) ? (int)n : 0;
}

static job_layout layout(const ds_vision *v, int n) {
    job_layout L;
    size_t N = (size_t)n, D = (size_t)v->D, wide = 3 * D > (size_t)v->pd ? 3 * D : (size_t)v->pd;
    size_t o = 0;
    L.x = o, o += rnd(N * D);
    L.big = o, o += rnd(N * wide);
    L.att = o, o += rnd(N * D);
    L.rot = o, o += rnd(N * (size_t)v->hd);
    L.ascratch = o, o += rnd(v->be->ops->vit_attention_floats(v->be, n, v->c.n_head, v->hd));
    L.out = o, o += rnd(N / 4 * (size_t)v->row_out);
    L.total = o;
    return L;
}

size_t ds_vision_job_bytes(const ds_vision *v, const ds_image_patches *p) {
    int n = job_patches(v, p);
    return n ? layout(v, n).total * sizeof(float) + sizeof(ds_vision_job) : 0;
}

/* Patch i of the image in image_prep.h's order: 2x2 group g = i / 4 (groups
 * row by row), (dy, dx) = its place in the group; frames one after another. */
static void patch_rc(const ds_vision_job *j, int i, int *row, int *col) {
    int per = j->gh * j->gw, k = i % per, g = k / 4, q = k % 4, gw = j->gw / 2;
    *row = g / gw * 2 + q / 2;
    *col = g % gw * 2 + q % 2;
}

ds_status ds_vision_job_new(ds_vision *v, const ds_image_patches *p, ds_vision_job **out, ds_err *e) {
    *out = NULL;
    int n = job_patches(v, p);
    if (!n)
        return ds_fail(e, DS_EINVAL, "vision: an image of %dx%dx%d patches of %d values is not what the tower takes "
                       "(one frame pair, an even grid of patches of %d)", p ? p->grid_t : 0, p ? p->grid_h : 0, p ? p->grid_w : 0,
                       p ? p->patch_dim : 0, v->pd);
    ds_vision_job *j = calloc(1, sizeof *j);
    job_layout L = layout(v, n);
    float *m = j ? ds_be_alloc(v->be, L.total * sizeof(float)) : NULL;
    if (!m) {
        free(j);
        return ds_fail(e, DS_ENOMEM, "vision: cannot allocate %zu bytes for a %dx%d image", L.total * sizeof(float),
                       p->grid_w, p->grid_h);
    }
    *j = (ds_vision_job){.v = v, .n = n, .gt = p->grid_t, .gh = p->grid_h, .gw = p->grid_w, .mem = m, .x = m + L.x,
                         .big = m + L.big, .att = m + L.att, .rot = m + L.rot, .ascratch = m + L.ascratch,
                         .out = m + L.out};
    /* patches by frame: [frame][channel][P*P], so that each frame's half of
     * the Conv3D is one product over consecutive values */
    int T = v->c.temporal_patch, PP = v->c.patch_size * v->c.patch_size;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < 3; ch++)
            for (int t = 0; t < T; t++)
                memcpy(j->big + (size_t)i * v->pd + (size_t)(t * 3 + ch) * PP,
                       p->patches + (size_t)i * v->pd + (size_t)(ch * T + t) * PP, (size_t)PP * sizeof(float));
    /* rotary table: the first hd/4 pairs turn by the row, the next hd/4 by the column */
    int hd = v->hd, q = hd / 4;
    for (int i = 0; i < n; i++) {
        int row, col;
        patch_rc(j, i, &row, &col);
        float *cs = j->rot + (size_t)i * hd;
        for (int k = 0; k < hd / 2; k++) {
            int f = k < q ? k : k - q;
            float inv = 1.0f / powf(v->c.rope_theta, (float)(2 * f) / (float)(hd / 2));
            float angle = (float)(k < q ? row : col) * inv;
            cs[k] = cosf(angle);
            cs[hd / 2 + k] = sinf(angle);
        }
    }
    *out = j;
    return DS_OK;
}

void ds_vision_job_free(ds_vision_job *j) {
    if (!j) return;
    ds_be_free_buf(j->v->be, j->mem);
    free(j);
}

static int64_t merger_flops(const ds_vision *v, int n) {
    int64_t D4 = 4 * (int64_t)v->D;
    return (int64_t)(n / 4) * (D4 * D4 + D4 * v->E);
}

/* Multiply-adds of piece k of a job of n patches. */
static int64_t piece_flops(const ds_vision *v, int n, int k) {
    int64_t D = v->D, N = n;
    if (k == PIECE_EMBED) return N * D * v->pd;
    if (k <= v->c.n_layer) {
        int64_t f = N * (4 * D * D + 2 * D * v->F) + 2 * N * N * D;
        return f + (v->blocks[k - 1].ds >= 0 ? merger_flops(v, n) : 0);
    }
    return merger_flops(v, n);
}

int64_t ds_vision_job_remaining_flops(const ds_vision_job *j) {
    int64_t f = 0;
    for (int k = j->next; k <= j->v->c.n_layer + 1; k++) f += piece_flops(j->v, j->n, k);
    return f;
}

int ds_vision_job_done(const ds_vision_job *j) { return j->next > j->v->c.n_layer + 1; }

const float *ds_vision_job_output(const ds_vision_job *j, int *n_tokens) {
    if (!ds_vision_job_done(j)) {
        *n_tokens = 0;
        return NULL;
    }
    *n_tokens = j->n / 4;
    return j->out;
}

/* ------------------------------------------------------------------------ */
/* Pieces                                                                    */

static void dump(const ds_vision_job *j, const char *name, int layer, const float *x, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, layer >= 0 ? "%s/%s_%d.f32" : "%s/%s.f32", j->v->dump, name, layer);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(x, sizeof(float), n, f);
    fclose(f);
}

/* The interpolated position embedding of every patch into pe [n][D]. */
static void position_rows(const ds_vision_job *j, float *pe) {
    const ds_vision *v = j->v;
    int D = v->D, S = v->side;
    for (int i = 0; i < j->n; i++) {
        int row, col;
        patch_rc(j, i, &row, &col);
        /* linspace(0, S-1, steps) with the corners aligned */
        float hp = j->gh > 1 ? (float)((double)row * (S - 1) / (j->gh - 1)) : 0.0f;
        float wp = j->gw > 1 ? (float)((double)col * (S - 1) / (j->gw - 1)) : 0.0f;
        int h0 = (int)hp, w0 = (int)wp, h1 = h0 + 1 < S ? h0 + 1 : S - 1, w1 = w0 + 1 < S ? w0 + 1 : S - 1;
        float dh = hp - (float)h0, dw = wp - (float)w0;
        float w00 = (1 - dh) * (1 - dw), w01 = (1 - dh) * dw, w10 = dh * (1 - dw), w11 = dh * dw;
        const float *p00 = v->pos_table + ((size_t)h0 * S + w0) * D, *p01 = v->pos_table + ((size_t)h0 * S + w1) * D;
        const float *p10 = v->pos_table + ((size_t)h1 * S + w0) * D, *p11 = v->pos_table + ((size_t)h1 * S + w1) * D;
        float *o = pe + (size_t)i * D;
        for (int d = 0; d < D; d++) o[d] = p00[d] * w00 + p01[d] * w01 + p10[d] * w10 + p11[d] * w11;
    }
}

static void residual(ds_backend *be, float *x, const float *y, int n, int d) {
    be->ops->add_rmsnorm(be, x, y, NULL, NULL, n, d, 0.0f);
}

static void run_embed(ds_vision *v, ds_vision_job **js, int nj) {
    ds_backend *be = v->be;
    ds_mm_group g[2 * MAX_ROUND] = {0};
    int half = v->pd / 2;
    for (int i = 0; i < nj; i++)
        for (int t = 0; t < 2; t++)
            g[2 * i + t] = (ds_mm_group){.x = js[i]->big + t * half, .ldx = v->pd, .n = js[i]->n, .n_outs = 1,
                                         .outs = {{t ? js[i]->att : js[i]->x, v->D, v->patch[t]}}};
    be->ops->matmul_grouped(be, g, 2 * nj);
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        residual(be, j->x, j->att, j->n, v->D);
        be->ops->bias_act(be, j->x, v->patch_b, j->n, v->D, v->D, DS_ACT_NONE);
        position_rows(j, j->att);
        residual(be, j->x, j->att, j->n, v->D);
        if (v->dump) dump(j, "embed", -1, j->x, (size_t)j->n * v->D);
    }
}

/* fc2(gelu(fc1(norm(rows)))) of the jobs' 2x2 groups into their output rows
 * at column col; deep: the DeepStack form (norm over the 4D group) */
static void run_mergers(ds_vision *v, ds_vision_job **js, const vmerger *const *ms, int nj, int deep, int col) {
    ds_backend *be = v->be;
    int D = v->D, D4 = 4 * D;
    ds_mm_group g[MAX_ROUND] = {0};
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        if (deep) be->ops->layernorm(be, j->att, j->x, ms[i]->norm_w, ms[i]->norm_b, j->n / 4, D4, D4, v->c.eps);
        else be->ops->layernorm(be, j->att, j->x, ms[i]->norm_w, ms[i]->norm_b, j->n, D, D, v->c.eps);
        g[i] = (ds_mm_group){.x = j->att, .ldx = D4, .n = j->n / 4, .n_outs = 1, .outs = {{j->big, D4, ms[i]->fc1}}};
    }
    be->ops->matmul_grouped(be, g, nj);
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        be->ops->bias_act(be, j->big, ms[i]->fc1_b, j->n / 4, D4, D4, DS_ACT_GELU_ERF);
        g[i] = (ds_mm_group){.x = j->big, .ldx = D4, .n = j->n / 4, .n_outs = 1,
                             .outs = {{j->out + (deep ? col : 0), v->row_out, ms[i]->fc2}}};
    }
    be->ops->matmul_grouped(be, g, nj);
    for (int i = 0; i < nj; i++)
        be->ops->bias_act(be, js[i]->out + (deep ? col : 0), ms[i]->fc2_b, js[i]->n / 4, v->E, v->row_out, DS_ACT_NONE);
}

/* The MLP of each job's block on att (LN2 of x) into big, MLP_ROWS rows of
 * the hidden layer at a time, whatever job they belong to. */
static void run_mlp(ds_vision *v, ds_vision_job **js, int nj) {
    ds_backend *be = v->be;
    int D = v->D, F = v->F;
    ds_mm_group g[MAX_ROUND] = {0};
    int owner[MAX_ROUND], i = 0, r = 0;
    while (i < nj) {
        int ng = 0, rows = 0;
        while (i < nj && rows < MLP_ROWS && ng < MAX_ROUND) { /* a slice of up to MLP_ROWS rows */
            ds_vision_job *j = js[i];
            int take = j->n - r < MLP_ROWS - rows ? j->n - r : MLP_ROWS - rows;
            const vblock *b = &v->blocks[j->next - 1];
            g[ng] = (ds_mm_group){.x = j->att + (size_t)r * D, .ldx = D, .n = take, .n_outs = 1,
                                  .outs = {{v->hidden + (size_t)rows * F, F, b->up}}};
            owner[ng++] = i;
            rows += take;
            r += take;
            if (r == j->n) i++, r = 0;
        }
        be->ops->matmul_grouped(be, g, ng);
        for (int k = 0; k < ng; k++) {
            ds_vision_job *j = js[owner[k]];
            const vblock *b = &v->blocks[j->next - 1];
            float *h = g[k].outs[0].y;
            be->ops->bias_act(be, h, b->up_b, (int)g[k].n, F, F, DS_ACT_GELU_TANH);
            size_t r0 = (size_t)(g[k].x - j->att) / (size_t)D;
            g[k] = (ds_mm_group){.x = h, .ldx = F, .n = g[k].n, .n_outs = 1, .outs = {{j->big + r0 * D, D, b->down}}};
        }
        be->ops->matmul_grouped(be, g, ng);
    }
}

static void run_blocks(ds_vision *v, ds_vision_job **js, int nj) {
    ds_backend *be = v->be;
    int D = v->D;
    float eps = v->c.eps;
    ds_mm_group g[MAX_ROUND] = {0};
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        const vblock *b = &v->blocks[j->next - 1];
        be->ops->layernorm(be, j->att, j->x, b->ln1_w, b->ln1_b, j->n, D, D, eps);
        g[i] = (ds_mm_group){.x = j->att, .ldx = D, .n = j->n, .n_outs = 1, .outs = {{j->big, 3 * D, b->qkv}}};
    }
    be->ops->matmul_grouped(be, g, nj);
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        const vblock *b = &v->blocks[j->next - 1];
        be->ops->bias_act(be, j->big, b->qkv_b, j->n, 3 * D, 3 * D, DS_ACT_NONE);
        be->ops->vit_attention(be, j->att, j->big, j->rot, j->n, v->c.n_head, v->hd, j->ascratch);
        g[i] = (ds_mm_group){.x = j->att, .ldx = D, .n = j->n, .n_outs = 1, .outs = {{j->big, D, b->out}}};
    }
    be->ops->matmul_grouped(be, g, nj);
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        const vblock *b = &v->blocks[j->next - 1];
        be->ops->bias_act(be, j->big, b->out_b, j->n, D, D, DS_ACT_NONE);
        residual(be, j->x, j->big, j->n, D);
        be->ops->layernorm(be, j->att, j->x, b->ln2_w, b->ln2_b, j->n, D, D, eps);
    }
    run_mlp(v, js, nj);
    ds_vision_job *deep[MAX_ROUND];
    const vmerger *ms[MAX_ROUND];
    int nd = 0;
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        const vblock *b = &v->blocks[j->next - 1];
        be->ops->bias_act(be, j->big, b->down_b, j->n, D, D, DS_ACT_NONE);
        residual(be, j->x, j->big, j->n, D);
        if (v->dump) dump(j, "block", j->next - 1, j->x, (size_t)j->n * D);
        if (b->ds >= 0) deep[nd] = j, ms[nd++] = &v->deep[b->ds];
    }
    /* the DeepStack mergers of this round's blocks, each into its columns */
    for (int k = 0; k < v->c.n_deepstack; k++) {
        ds_vision_job *dj[MAX_ROUND];
        const vmerger *dm[MAX_ROUND];
        int n = 0;
        for (int i = 0; i < nd; i++)
            if (ms[i] == &v->deep[k]) dj[n] = deep[i], dm[n++] = ms[i];
        if (n) run_mergers(v, dj, dm, n, 1, v->E * (1 + k));
    }
}

static void run_round(ds_vision *v, ds_vision_job **js, int nj) {
    ds_vision_job *sel[MAX_ROUND];
    const vmerger *ms[MAX_ROUND];
    int L = v->c.n_layer, n;
    n = 0;
    for (int i = 0; i < nj; i++)
        if (js[i]->next == PIECE_EMBED) sel[n++] = js[i];
    if (n) run_embed(v, sel, n);
    n = 0;
    for (int i = 0; i < nj; i++)
        if (js[i]->next >= 1 && js[i]->next <= L) sel[n++] = js[i];
    if (n) run_blocks(v, sel, n);
    n = 0;
    for (int i = 0; i < nj; i++)
        if (js[i]->next == L + 1) ms[n] = &v->merger, sel[n++] = js[i];
    if (n) run_mergers(v, sel, ms, n, 0, 0);
    for (int i = 0; i < nj; i++) {
        ds_vision_job *j = js[i];
        if (j->next == L + 1 && v->dump) dump(j, "out", -1, j->out, (size_t)j->n / 4 * v->row_out);
        j->next++;
    }
}

ds_status ds_vision_run(ds_vision *v, ds_vision_job *const *jobs, int n_jobs, int64_t flop_budget, ds_err *e) {
    for (int i = 0; i < n_jobs; i++)
        if (!jobs[i] || jobs[i]->v != v) return ds_fail(e, DS_EINVAL, "vision: job %d is not one of this tower's", i);
    int64_t spent = 0;
    for (int round = 0;; round++) {
        int any = 0;
        for (int w0 = 0; w0 < n_jobs; w0 += MAX_ROUND) {
            ds_vision_job *sel[MAX_ROUND];
            int n = 0;
            for (int i = w0; i < n_jobs && i < w0 + MAX_ROUND; i++) {
                ds_vision_job *j = jobs[i];
                if (ds_vision_job_done(j)) continue;
                int64_t c = piece_flops(v, j->n, j->next);
                if (round > 0 && spent + c > flop_budget) continue;
                sel[n++] = j;
                spent += c;
            }
            if (n) run_round(v, sel, n), any = 1;
        }
        if (!any) return DS_OK;
    }
}

ds_status ds_vision_encode(ds_vision *v, const ds_image_patches *p, float *out, ds_err *e) {
    ds_vision_job *j;
    ds_status s = ds_vision_job_new(v, p, &j, e);
    if (s) return s;
    s = ds_vision_run(v, &j, 1, INT64_MAX, e);
    if (!s) memcpy(out, j->out, (size_t)j->n / 4 * (size_t)v->row_out * sizeof(float));
    ds_vision_job_free(j);
    return s;
}
