/* backend_cpu.c - the CPU backend (backend.h): weights uploaded once (quantised
 * matrices repacked for the SIMD kernels, the file pages they came from
 * released), activation buffers, matrix products split by weight rows over
 * the thread pool, and the elementwise operations. Attention and the Gated
 * DeltaNet live in cpu_attention.c and cpu_deltanet.c.
 *
 * Threads: one ds_pool per backend, driven by the thread that calls the ops. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kernels/backend_cpu_int.h"
#include "kernels/gblock.h"

#define ALIGN 64

/* DS_PROFILE=1: wall time per operation, printed to stderr when the backend
 * is freed. */
enum { P_MM_F, P_MM_BF16, P_MM_Q8, P_MM_Q4K, P_MM_Q6K, P_MM_GB, P_MM_OTHER, P_ATT, P_GDN, P_GDN_COMMIT, P_ELEM, P_VIT,
       P_COUNT };
static const char *prof_names[P_COUNT] = {"matmul f32/f16", "matmul bf16",  "matmul q8_0",     "matmul q4_k",
                                          "matmul q6_k",    "matmul gblock", "matmul other",   "attention",
                                          "deltanet",       "deltanet commit", "elementwise", "vit attention"};
static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *alloc_aligned(size_t bytes) {
    size_t n = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    return aligned_alloc(ALIGN, n ? n : ALIGN);
}

/* ------------------------------------------------------------------------ */
/* Weights                                                                   */

/* Whether [p, p+n) lies in a read-only file mapping: then its pages can be
 * dropped from this process (they refault from the file if read again). */
static int in_readonly_file_map(const void *p, size_t n) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[512];
    int ok = 0;
    uintptr_t a = (uintptr_t)p, b = a + n;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, inode;
        char perms[8];
        unsigned long off;
        char dev[16];
        if (sscanf(line, "%lx-%lx %7s %lx %15s %lu", &lo, &hi, perms, &off, dev, &inode) != 6) continue;
        if (a >= lo && b <= hi) {
            ok = perms[1] == '-' && inode != 0;
            break;
        }
    }
    fclose(f);
    return ok;
}

static void release_pages(const void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page, b = ((uintptr_t)p + n) / page * page;
    if (b > a && in_readonly_file_map(p, n)) madvise((void *)a, b - a, MADV_DONTNEED);
}

typedef struct {
    ds_wmat *w;
    uint8_t *dst;
    int64_t groups;
} pack_job;

static void pack_worker(void *ctx, int ith, int nth) {
    pack_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->groups, ith, nth, &lo, &hi);
    ds_pack_groups(j->w, j->dst, lo, hi);
}

typedef struct {
    const ds_wmat *w;
    int64_t groups;
    atomic_int form;
} form_job;

static void form_worker(void *ctx, int ith, int nth) {
    form_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->groups, ith, nth, &lo, &hi);
    if (hi > lo) atomic_fetch_or(&j->form, ds_pack_form(j->w, lo, hi));
}

/* nvfp4 (no integer form: kern.h NUMERICS) as BF16, exactly, in memory of
 * the weight's own */
static ds_status widen_nvfp4(ds_bweight *w, ds_err *e) {
    size_t rb = ds_dtype_row_bytes(DS_NVFP4, w->m.cols);
    uint16_t *dst = alloc_aligned((size_t)w->m.rows * (size_t)w->m.cols * 2);
    if (!dst)
        return ds_fail(e, DS_ENOMEM, "backend: cannot widen a %lldx%lld nvfp4 matrix to bf16", (long long)w->m.rows,
                       (long long)w->m.cols);
    for (int64_t r = 0; r < w->m.rows; r++)
        ds_nvfp4_row_bf16(w->m.data + (size_t)r * rb, dst + (size_t)r * (size_t)w->m.cols, w->m.cols);
    release_pages(w->m.data, rb * (size_t)w->m.rows);
    w->m.type = DS_BF16;
    w->m.data = (const uint8_t *)dst;
    w->owned = dst;
    w->owned_bytes = (size_t)w->m.rows * (size_t)w->m.cols * 2;
    return DS_OK;
}

static void cpu_weight_free(ds_backend *be, ds_bweight *w);
static int64_t scratch_width(const cpu_backend *cb) { return cb->max_cols > 0 ? (cb->max_cols + 31) / 32 * 32 : 32; }

/* Quantised and BF16 activations of reserved_rows rows of the widest weight. */
static ds_status alloc_act_scratch(cpu_backend *cb, ds_err *e) {
    int64_t K = scratch_width(cb);
    free(cb->xq_buf);
    free(cb->xb);
    cb->xq_buf = alloc_aligned(ds_xq_bytes(cb->reserved_rows, K));
    cb->xb = alloc_aligned((size_t)cb->reserved_rows * (size_t)K * 2);
    if (!cb->xq_buf || !cb->xb) return ds_fail(e, DS_ENOMEM, "backend: cannot allocate scratch");
    ds_xq_init(&cb->xq, cb->xq_buf, cb->reserved_rows, K);
    cb->reserved_width = K;
    return DS_OK;
}

static ds_status cpu_weight_new(ds_backend *be, const ds_mat *src, int flags, ds_bweight **out, ds_err *e) {
    cpu_backend *cb = (cpu_backend *)be;
    *out = NULL;
    ds_bweight *w = calloc(1, sizeof *w);
    if (!w) return ds_fail(e, DS_ENOMEM, "backend: out of memory");
    w->m = (ds_wmat){.type = src->type, .rows = src->rows, .cols = src->cols, .data = src->data,
                     .x8 = (flags & DS_W_X8) && src->type == DS_Q8_0};
    if (src->type == DS_NVFP4) {
        ds_status s = widen_nvfp4(w, e);
        if (s) {
            free(w);
            return s;
        }
    }
    int sbe = ds_pack_sb_elems(w->m.type);
    if ((flags & DS_W_MATMUL) && cb->k->packs && sbe && src->cols % sbe == 0) {
        form_job fj = {.w = &w->m, .groups = (src->rows + DS_QG - 1) / DS_QG};
        atomic_init(&fj.form, 0);
        if (ds_gblock_type(w->m.type)) ds_pool_run(cb->pool, form_worker, &fj);
        w->m.form = atomic_load(&fj.form);
    }
    if ((flags & DS_W_MATMUL) && cb->k->packs && sbe && src->cols % sbe == 0 && !(w->m.form & DS_GF_BAD)) {
        w->packed_bytes = ds_pack_bytes(src->type, w->m.form, src->rows, src->cols);
        w->packed = alloc_aligned(w->packed_bytes);
        if (!w->packed) {
            size_t bytes = w->packed_bytes;
            free(w);
            return ds_fail(e, DS_ENOMEM, "backend: cannot allocate %zu bytes for a %lldx%lld matrix", bytes,
                           (long long)src->rows, (long long)src->cols);
        }
        pack_job j = {&w->m, w->packed, (src->rows + DS_QG - 1) / DS_QG};
        ds_pool_run(cb->pool, pack_worker, &j);
        w->m.packed = w->packed;
        w->m.sb_bytes = ds_pack_sb_bytes(src->type, w->m.form);
        w->m.group_bytes = (size_t)(src->cols / sbe) * w->m.sb_bytes;
        /* the GGUF blocks are no longer read: give their pages back */
        release_pages(src->data, ds_dtype_row_bytes(src->type, src->cols) * (size_t)src->rows);
    }
    if ((flags & DS_W_MATMUL) && src->cols > cb->max_cols) {
        cb->max_cols = src->cols;
        /* a wider weight bound after reserve (the vision tower's, beside a
         * text model): the activation scratch grows to its width now, so
         * that the product calls still allocate nothing */
        if (cb->xq_buf && scratch_width(cb) > cb->reserved_width) {
            ds_status s = alloc_act_scratch(cb, e);
            if (s) {
                cpu_weight_free(be, w);
                return s;
            }
        }
    }
    *out = w;
    return DS_OK;
}

static void cpu_weight_free(ds_backend *be, ds_bweight *w) {
    (void)be;
    free(w->packed);
    free(w->owned);
    free(w);
}

static void cpu_release_host(ds_backend *be, const void *p, size_t n) {
    (void)be;
    release_pages(p, n);
}

static size_t cpu_weight_bytes(const ds_bweight *w) {
    return w->packed ? w->packed_bytes : w->owned ? w->owned_bytes : ds_dtype_row_bytes(w->m.type, w->m.cols) * (size_t)w->m.rows;
}

/* ------------------------------------------------------------------------ */
/* Buffers and scratch                                                       */

static void *cpu_alloc(ds_backend *be, size_t bytes) {
    (void)be;
    void *p = alloc_aligned(bytes);
    if (p) memset(p, 0, (bytes + ALIGN - 1) / ALIGN * ALIGN);
    return p;
}

static void cpu_free_buf(ds_backend *be, void *p) {
    (void)be;
    free(p);
}

static ds_status cpu_reserve(ds_backend *be, const ds_be_limits *lim, ds_err *e) {
    cpu_backend *cb = (cpu_backend *)be;
    cb->lim = *lim;
    int rows = lim->max_rows > 0 ? lim->max_rows : 1;
    if (lim->max_group_rows > rows) rows = lim->max_group_rows;
    free(cb->scratch);
    free(cb->att_blocks);
    cb->att_blocks = alloc_aligned(((size_t)rows + 1) * sizeof(int32_t));
    size_t a = ds_cpu_attention_scratch(lim), d = ds_cpu_deltanet_scratch(cb->k, lim);
    cb->scratch_floats = ((a > d ? a : d) + 15) / 16 * 16 + 16;
    cb->scratch = alloc_aligned(cb->scratch_floats * sizeof(float) * (size_t)cb->nth);
    if (!cb->scratch || !cb->att_blocks) return ds_fail(e, DS_ENOMEM, "backend: cannot allocate scratch");
    cb->reserved_rows = rows;
    return alloc_act_scratch(cb, e);
}

/* ------------------------------------------------------------------------ */
/* Matrix products                                                           */

/* One call: groups of (input rows, weights); the inputs are quantised once
 * into consecutive rows of the scratch, then (group, weight, row chunk)
 * items are handed out through an atomic counter. */
#define MAX_ITEMS 1024
typedef struct mm_job {
    cpu_backend *cb;
    const ds_mm_group *groups;
    int n_groups;
    int64_t K;
    int64_t row0[MAX_ITEMS + 1];        /* first scratch row of each group */
    int n_mm;
    ds_mm mm[MAX_ITEMS];                /* one per (group, weight) */
    ds_wmat wv[MAX_ITEMS];              /* per (group, weight): its weight, cut to the rows asked for */
    ds_mm_fn fn[MAX_ITEMS];
    ds_xq xqv[MAX_ITEMS];               /* per group: views of the scratch at its rows */
    int64_t first_chunk[MAX_ITEMS + 1];
    int64_t chunk_rows;
    int need_q, need_b, quant_in_pool;
    ds_xq xq;
    _Alignas(64) atomic_llong next;
} mm_job;

static void quantise_rows(mm_job *j, int64_t r0, int64_t r1) {
    const ds_kern *k = j->cb->k;
    int g = 0;
    for (int64_t r = r0; r < r1; r++) {
        while (r >= j->row0[g + 1]) g++;
        const ds_mm_group *gr = &j->groups[g];
        const float *x = gr->x + (r - j->row0[g]) * gr->ldx;
        if (j->need_q) k->quant_x(&j->xq, r, x);
        if (j->need_b) k->to_bf16(j->cb->xb + r * j->K, x, j->K);
    }
}

static void mm_worker(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    if (j->quant_in_pool) {
        int64_t lo, hi;
        cpu_split(j->row0[j->n_groups], ith, nth, &lo, &hi);
        quantise_rows(j, lo, hi);
        ds_pool_barrier(j->cb->pool);
    }
    int64_t total = j->first_chunk[j->n_mm];
    int i = 0;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total) break;
        while (c >= j->first_chunk[i + 1]) i++;
        while (c < j->first_chunk[i]) i--;
        int64_t r0 = (c - j->first_chunk[i]) * j->chunk_rows, r1 = r0 + j->chunk_rows;
        if (r1 > j->mm[i].w->rows) r1 = j->mm[i].w->rows;
        j->fn[i](&j->mm[i], r0, r1);
    }
}

static void xq_at(ds_xq *v, const ds_xq *base, int64_t row) {
    int64_t K = base->K, nb = K / 32;
    *v = *base;
    v->q += row * K;
    v->r += row * K;
    v->d += row * nb;
    v->ms += row * nb;
    v->c128 += row * nb;
    v->c8 += row * nb;
    v->e += row * nb;
    v->r128 += row * nb;
    v->c32 += row * 2 * nb;
}

/* groups whose rows fit the scratch (reserved_rows in all) */
static void matmul_run(cpu_backend *cb, const ds_mm_group *groups, int n_groups) {
    mm_job *j = cb->job;
    j->cb = cb;
    j->groups = groups;
    j->n_groups = n_groups;
    j->n_mm = 0;
    j->need_q = j->need_b = j->quant_in_pool = 0;
    j->K = groups[0].outs[0].w->m.cols;
    int64_t rows_in = 0, wgroups = 0;
    for (int g = 0; g < n_groups; g++) {
        j->row0[g] = rows_in;
        rows_in += groups[g].n;
        for (int o = 0; o < groups[g].n_outs; o++) {
            ds_dtype t = groups[g].outs[o].w->m.type;
            j->need_q |= ds_mm_reads_xq(t);
            j->need_b |= t == DS_BF16;
        }
    }
    j->row0[n_groups] = rows_in;
    if (j->need_q) {
        j->xq = cb->xq;
        ds_xq_init(&j->xq, cb->xq_buf, rows_in, j->K); /* row strides follow this call's width */
    }
    for (int g = 0; g < n_groups; g++) {
        const ds_mm_group *gr = &groups[g];
        if (j->need_q) xq_at(&j->xqv[g], &j->xq, j->row0[g]);
        for (int o = 0; o < gr->n_outs; o++) {
            int i = j->n_mm++;
            /* a prefix of the rows is the same matrix with fewer rows: row-major blocks and
             * 16-row packed groups both keep the first rows first */
            j->wv[i] = gr->outs[o].w->m;
            if (cb->row_limit > 0 && cb->row_limit < j->wv[i].rows) j->wv[i].rows = cb->row_limit;
            const ds_wmat *w = &j->wv[i];
            ds_dtype t = w->type;
            int quant = ds_mm_reads_xq(t);
            j->fn[i] = t == DS_BF16 && cb->bf16_mm ? cb->bf16_mm : cb->k->mm[t];
            if (quant && !w->packed) j->fn[i] = ds_kern_ref.mm[t]; /* not packable (odd width): GGUF blocks */
            j->mm[i] = (ds_mm){.y = gr->outs[o].y, .ldy = gr->outs[o].ldy, .w = w, .n = gr->n, .x = gr->x, .ldx = gr->ldx,
                               .xb = cb->xb + j->row0[g] * j->K, .xq = &j->xqv[g]};
            wgroups += (w->rows + DS_QG - 1) / DS_QG;
        }
    }
    /* about 8 chunks per thread, whole 16-row groups */
    int64_t want = (int64_t)cb->nth * 8, per = (wgroups + want - 1) / want;
    if (per < 1) per = 1;
    j->chunk_rows = per * DS_QG;
    j->first_chunk[0] = 0;
    for (int i = 0; i < j->n_mm; i++)
        j->first_chunk[i + 1] = j->first_chunk[i] + (j->mm[i].w->rows + j->chunk_rows - 1) / j->chunk_rows;
    atomic_init(&j->next, 0);
    if ((j->need_q || j->need_b) && rows_in >= 4 && cb->nth > 1) j->quant_in_pool = 1;
    else if (j->need_q || j->need_b) quantise_rows(j, 0, rows_in);
    ds_pool_run(cb->pool, mm_worker, j);
}

static void prof_mm(cpu_backend *cb, ds_dtype ty, double t0) {
    int k = ty == DS_F32 || ty == DS_F16 ? P_MM_F : ty == DS_BF16 ? P_MM_BF16 : ty == DS_Q8_0 ? P_MM_Q8
          : ty == DS_Q4_K ? P_MM_Q4K : ty == DS_Q6_K ? P_MM_Q6K : ds_gblock_type(ty) ? P_MM_GB : P_MM_OTHER;
    cb->prof_s[k] += prof_now() - t0;
    cb->prof_n[k]++;
}

static void cpu_matmul_grouped(ds_backend *be, const ds_mm_group *groups, int n_groups) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    /* batches of groups that fit the scratch and the job's tables */
    for (int g0 = 0; g0 < n_groups;) {
        int64_t rows = 0;
        int g1 = g0, mms = 0;
        while (g1 < n_groups && mms + groups[g1].n_outs <= MAX_ITEMS && g1 - g0 < MAX_ITEMS &&
               (g1 == g0 || rows + groups[g1].n <= cb->reserved_rows)) {
            rows += groups[g1].n;
            mms += groups[g1].n_outs;
            g1++;
        }
        if (rows <= cb->reserved_rows) {
            matmul_run(cb, groups + g0, g1 - g0);
        } else { /* one group longer than the scratch: in slices of its rows */
            const ds_mm_group *gr = &groups[g0];
            for (int64_t t = 0; t < gr->n; t += cb->reserved_rows) {
                ds_mm_group sl = *gr;
                sl.n = gr->n - t < cb->reserved_rows ? gr->n - t : cb->reserved_rows;
                sl.x = gr->x + t * gr->ldx;
                for (int o = 0; o < sl.n_outs; o++) sl.outs[o].y = gr->outs[o].y + t * gr->outs[o].ldy;
                matmul_run(cb, &sl, 1);
            }
        }
        g0 = g1;
    }
    if (cb->profile && n_groups) prof_mm(cb, groups[0].outs[0].w->m.type, t0);
}

static void cpu_matmul(ds_backend *be, const ds_mm_out *outs, int n_outs, const float *x, int64_t ldx, int64_t n) {
    if (n <= 0 || n_outs <= 0) return;
    ds_mm_group g[8];
    int ng = 0;
    for (int o = 0; o < n_outs && ng < 8; o += DS_MM_GROUP_OUTS, ng++) {
        g[ng] = (ds_mm_group){.x = x, .ldx = ldx, .n = n};
        g[ng].n_outs = n_outs - o < DS_MM_GROUP_OUTS ? n_outs - o : DS_MM_GROUP_OUTS;
        for (int k = 0; k < g[ng].n_outs; k++) g[ng].outs[k] = outs[o + k];
    }
    cpu_matmul_grouped(be, g, ng);
}

static void cpu_matmul_rows(ds_backend *be, float *y, int64_t ldy, const ds_bweight *w, int64_t rows, const float *x,
                            int64_t ldx, int64_t n) {
    cpu_backend *cb = (cpu_backend *)be;
    ds_mm_out o = {y, ldy, w};
    cb->row_limit = rows > 0 ? rows : 0; /* matmul_run cuts the weight; a backend has one driving thread */
    cpu_matmul(be, &o, 1, x, ldx, n);
    cb->row_limit = 0;
}

static void cpu_get_rows(ds_backend *be, float *y, const ds_bweight *w, const int32_t *ids, int n) {
    (void)be;
    size_t rb = ds_dtype_row_bytes(w->m.type, w->m.cols);
    for (int i = 0; i < n; i++) {
        float *dst = y + (size_t)i * (size_t)w->m.cols;
        if (w->m.packed) ds_unpack_row(&w->m, ids[i], dst);
        else if (ds_gblock_type(w->m.type)) ds_gblock_row(w->m.type, w->m.data + (size_t)ids[i] * rb, dst, w->m.cols);
        else ds_dequantize_row(w->m.type, w->m.data + (size_t)ids[i] * rb, dst, w->m.cols);
    }
}

/* ------------------------------------------------------------------------ */
/* Elementwise                                                               */

typedef struct {
    const ds_kern *k;
    float *y, *x, *u;
    const float *c, *w, *b;
    int n, d, ld, act;
    float eps;
} rows_job;

static void rmsnorm_worker(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) ds_rmsnorm(j->y + i * j->ld, j->c + i * j->ld, j->w, j->d, j->eps);
}

/* small calls stay on the calling thread: waking the pool costs more */
static int worth_threads(const cpu_backend *cb, int64_t work) { return cb->nth > 1 && work >= 16384; }

static void cpu_rmsnorm(ds_backend *be, float *y, const float *x, const float *w, int n, int d, int ld, float eps) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    rows_job j = {.y = y, .c = x, .w = w, .n = n, .d = d, .ld = ld, .eps = eps};
    if (worth_threads(cb, (int64_t)n * d)) ds_pool_run(cb->pool, rmsnorm_worker, &j);
    else rmsnorm_worker(&j, 0, 1);
    if (cb->profile) cb->prof_s[P_ELEM] += prof_now() - t0, cb->prof_n[P_ELEM]++;
}

static void add_rmsnorm_worker(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        float *x = j->x + i * j->d;
        const float *y = j->c + i * j->d;
        for (int k = 0; k < j->d; k++) x[k] += y[k];
        if (j->w) ds_rmsnorm(j->u + i * j->d, x, j->w, j->d, j->eps);
    }
}

static void cpu_add_rmsnorm(ds_backend *be, float *x, const float *y, float *u, const float *w, int n, int d, float eps) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    rows_job j = {.x = x, .c = y, .u = u, .w = w, .n = n, .d = d, .eps = eps};
    if (worth_threads(cb, (int64_t)n * d)) ds_pool_run(cb->pool, add_rmsnorm_worker, &j);
    else add_rmsnorm_worker(&j, 0, 1);
    if (cb->profile) cb->prof_s[P_ELEM] += prof_now() - t0, cb->prof_n[P_ELEM]++;
}

static void swiglu_worker(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        float *a = j->y + i * j->ld;
        const float *b = j->c + i * j->ld;
        j->k->silu_mul(a, b, j->d);
    }
}

static void cpu_swiglu(ds_backend *be, float *a, const float *b, int n, int d, int ld) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    rows_job j = {.k = cb->k, .y = a, .c = b, .n = n, .d = d, .ld = ld};
    if (worth_threads(cb, (int64_t)n * d)) ds_pool_run(cb->pool, swiglu_worker, &j);
    else swiglu_worker(&j, 0, 1);
    if (cb->profile) cb->prof_s[P_ELEM] += prof_now() - t0, cb->prof_n[P_ELEM]++;
}

static void layernorm_worker(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) ds_layernorm(j->y + i * j->ld, j->c + i * j->ld, j->w, j->b, j->d, j->eps);
}

static void cpu_layernorm(ds_backend *be, float *y, const float *x, const float *w, const float *b, int n, int d, int ld,
                          float eps) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    rows_job j = {.y = y, .c = x, .w = w, .b = b, .n = n, .d = d, .ld = ld, .eps = eps};
    if (worth_threads(cb, (int64_t)n * d)) ds_pool_run(cb->pool, layernorm_worker, &j);
    else layernorm_worker(&j, 0, 1);
    if (cb->profile) cb->prof_s[P_ELEM] += prof_now() - t0, cb->prof_n[P_ELEM]++;
}

static void bias_act_worker(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    cpu_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) j->k->bias_act(j->y + i * j->ld, j->b, j->d, j->act);
}

static void cpu_bias_act(ds_backend *be, float *y, const float *bias, int n, int d, int ld, int act) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    rows_job j = {.k = cb->k, .y = y, .b = bias, .n = n, .d = d, .ld = ld, .act = act};
    if (worth_threads(cb, (int64_t)n * d)) ds_pool_run(cb->pool, bias_act_worker, &j);
    else bias_act_worker(&j, 0, 1);
    if (cb->profile) cb->prof_s[P_ELEM] += prof_now() - t0, cb->prof_n[P_ELEM]++;
}

static size_t cpu_vit_attention_floats(ds_backend *be, int n, int nh, int hd) {
    return ds_cpu_vit_attention_floats(be, n, nh, hd);
}

static void cpu_vit_attention(ds_backend *be, float *out, float *qkv, const float *rot, int n, int nh, int hd,
                              float *scratch) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    ds_cpu_vit_attention(be, out, qkv, rot, n, nh, hd, scratch);
    if (cb->profile) cb->prof_s[P_VIT] += prof_now() - t0, cb->prof_n[P_VIT]++;
}

/* ------------------------------------------------------------------------ */

static void cpu_gather_rows(ds_backend *be, float *dst, int ld_dst, const float *src, int ld_src, const int32_t *rows,
                            int n, int d) {
    (void)be;
    for (int i = 0; i < n; i++)
        memcpy(dst + (size_t)i * ld_dst, src + (size_t)(rows ? rows[i] : i) * ld_src, (size_t)d * sizeof(float));
}

/* Picks the top k of p[E] (ties to the lower index), renormalised to sum 1. */
static void top_k(const float *p, int E, int k, int32_t *idx, float *wt) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int t = 0; t < j; t++) taken |= idx[t] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        idx[j] = best;
        wt[j] = p[best];
    }
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += wt[j];
    for (int j = 0; j < k; j++) wt[j] /= sum;
}

static void cpu_moe_route(ds_backend *be, float *logits, int n, int E, int k, int32_t *choice, float *weight) {
    (void)be;
    for (int i = 0; i < n; i++) {
        float *p = logits + (size_t)i * E, mx = p[0], sum = 0.0f;
        for (int x = 1; x < E; x++) mx = p[x] > mx ? p[x] : mx;
        for (int x = 0; x < E; x++) sum += p[x] = expf(p[x] - mx);
        for (int x = 0; x < E; x++) p[x] /= sum;
        top_k(p, E, k, choice + (size_t)i * k, weight + (size_t)i * k);
    }
}

static void cpu_moe_combine(ds_backend *be, float *y, const float *gate, const float *eout, const int32_t *rowof,
                            const int32_t *choice, const float *weight, int n, int k, int d) {
    (void)be;
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)i * d, g = ds_sigmoid(gate[i]);
        for (int x = 0; x < d; x++) yr[x] *= g;
        int order[64]; /* this token's experts in index order */
        for (int j = 0; j < k; j++) order[j] = j;
        for (int a = 1; a < k; a++)
            for (int b = a; b > 0 && choice[(size_t)i * k + order[b]] < choice[(size_t)i * k + order[b - 1]]; b--) {
                int t = order[b];
                order[b] = order[b - 1];
                order[b - 1] = t;
            }
        for (int j = 0; j < k; j++) {
            float wt = weight[(size_t)i * k + order[j]];
            const float *er = eout + (size_t)rowof[(size_t)i * k + order[j]] * d;
            for (int x = 0; x < d; x++) yr[x] += wt * er[x];
        }
    }
}

static void prof_attention(ds_backend *be, float *out, float *q, float *k, const float *v, int n, const ds_attn_row *rows,
                           const ds_kv_view *kv, int nh, int gated, const float *q_norm, const float *k_norm, float eps,
                           const ds_rope_freqs_view *rope) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    ds_cpu_attention(be, out, q, k, v, n, rows, kv, nh, gated, q_norm, k_norm, eps, rope);
    if (cb->profile) {
        cb->prof_s[P_ATT] += prof_now() - t0;
        cb->prof_n[P_ATT]++;
    }
}

static void prof_deltanet(ds_backend *be, const ds_gdn_layer *L, const ds_gdn_seq *seqs, int n_seqs, float *mixed,
                          float *ab, const float *z, float *o, const float *norm_w, float eps, int chunk) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    ds_cpu_deltanet(be, L, seqs, n_seqs, mixed, ab, z, o, norm_w, eps, chunk);
    if (cb->profile) {
        cb->prof_s[P_GDN] += prof_now() - t0;
        cb->prof_n[P_GDN]++;
    }
}

static void prof_deltanet_commit(ds_backend *be, const ds_gdn_layer *L, float *conv_state, float *state,
                                 float *const *rec, int n) {
    cpu_backend *cb = (cpu_backend *)be;
    double t0 = cb->profile ? prof_now() : 0;
    ds_cpu_deltanet_commit(be, L, conv_state, state, rec, n);
    if (cb->profile) {
        cb->prof_s[P_GDN_COMMIT] += prof_now() - t0;
        cb->prof_n[P_GDN_COMMIT]++;
    }
}

static void cpu_free(ds_backend *be) {
    cpu_backend *cb = (cpu_backend *)be;
    if (cb->profile) {
        double tot = 0;
        for (int i = 0; i < P_COUNT; i++) tot += cb->prof_s[i];
        fprintf(stderr, "backend profile (%d threads, %s kernels):\n", cb->nth, ds_isa_name(cb->k->isa));
        for (int i = 0; i < P_COUNT; i++)
            if (cb->prof_n[i])
                fprintf(stderr, "  %-16s %9.3f s %5.1f%% %8ld calls\n", prof_names[i], cb->prof_s[i],
                        tot > 0 ? 100 * cb->prof_s[i] / tot : 0, cb->prof_n[i]);
    }
    ds_pool_free(cb->pool);
    free(cb->job);
    free(cb->att_blocks);
    free(cb->xq_buf);
    free(cb->xb);
    free(cb->scratch);
    free(cb);
}

static const ds_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .weight_new = cpu_weight_new,
    .weight_free = cpu_weight_free,
    .weight_bytes = cpu_weight_bytes,
    .release_host = cpu_release_host,
    .alloc = cpu_alloc,
    .free_buf = cpu_free_buf,
    .reserve = cpu_reserve,
    .matmul = cpu_matmul,
    .matmul_rows = cpu_matmul_rows,
    .matmul_grouped = cpu_matmul_grouped,
    .get_rows = cpu_get_rows,
    .gather_rows = cpu_gather_rows,
    .moe_route = cpu_moe_route,
    .moe_combine = cpu_moe_combine,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .swiglu = cpu_swiglu,
    .attention = prof_attention,
    .deltanet = prof_deltanet,
    .deltanet_commit = prof_deltanet_commit,
    .layernorm = cpu_layernorm,
    .bias_act = cpu_bias_act,
    .vit_attention_floats = cpu_vit_attention_floats,
    .vit_attention = cpu_vit_attention,
};

ds_status ds_backend_cpu_new(int n_threads, ds_backend **out, ds_err *e) {
    *out = NULL;
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return ds_fail(e, DS_ENOMEM, "backend: out of memory");
    cb->base.ops = &cpu_ops;
    ds_status s = ds_pool_new(n_threads, &cb->pool, e);
    if (s) {
        free(cb);
        return s;
    }
    cb->nth = ds_pool_threads(cb->pool);
    cb->job = aligned_alloc(64, (sizeof(struct mm_job) + 63) / 64 * 64);
    if (!cb->job) {
        ds_pool_free(cb->pool);
        free(cb);
        return ds_fail(e, DS_ENOMEM, "backend: out of memory");
    }
    const char *prof = getenv("DS_PROFILE");
    cb->profile = prof && *prof && *prof != '0';
    ds_isa level = ds_cpu_level();
    cb->k = ds_kern_for(level);
    cb->bf16_mm = NULL;
#if defined(__x86_64__)
    if (level == DS_ISA_AVX512 && ds_cpu()->avx512bf16) cb->bf16_mm = ds_mm_bf16_avx512bf16;
#endif
    *out = &cb->base;
    return DS_OK;
}

int ds_backend_cpu_threads(const ds_backend *be) { return ((const cpu_backend *)be)->nth; }
