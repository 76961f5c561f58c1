/* bench_kernel.c - `deltaserve bench --kernel TYPE[,TYPE...]`: the matrix
 * product alone, per weight type, on the CPU backend (packing and threads as
 * a model gets them), for decode-like (1 token) and prefill-like calls. The
 * weights are random blocks with finite scales: speed does not depend on the
 * values. Per (type, shape, tokens): milliseconds per call (median of the
 * runs), GB/s of the file's weight bytes, GFLOP/s (2 x rows x cols x tokens).
 * With one thread the rates come from the process's CPU time, so that other
 * work on a shared machine does not count; with more, from the wall clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/bench_kernel.h"
#include "common/half.h"
#include "kernels/backend.h"
#include "kernels/cpu.h"

#define MAX_TYPES 32
#define MAX_SHAPES 8
#define MAX_NS 8

static double clock_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* byte offsets of a block's fp16 scale fields (-1: none) */
static void scale_fields(ds_dtype t, int *a, int *b) {
    *a = 0, *b = -1;
    switch (t) {
    case DS_Q4_K:
    case DS_Q5_K:
    case DS_Q4_1:
    case DS_Q5_1: *b = 2; break;
    case DS_Q6_K: *a = 208; break;
    case DS_Q2_K: *a = 80, *b = 82; break;
    case DS_Q3_K: *a = 108; break;
    case DS_TQ1_0: *a = 52; break;
    case DS_TQ2_0: *a = 64; break;
    case DS_MXFP4:
    case DS_NVFP4:
    case DS_IQ1_M: *a = -1; break;
    default: break;
    }
}

/* rows of random blocks, scale fields set to small finite values */
static void random_rows(ds_dtype t, uint8_t *w, int64_t rows, int64_t cols, uint64_t seed) {
    const ds_dtype_info *ti = ds_dtype_get(t);
    size_t bytes = ds_dtype_row_bytes(t, cols) * (size_t)rows, k = 0;
    uint64_t s = seed;
    for (; k + 8 <= bytes; k += 8) {
        uint64_t v = next(&s);
        memcpy(w + k, &v, 8);
    }
    for (; k < bytes; k++) w[k] = (uint8_t)next(&s);
    if (ti->block_elems == 1) { /* floats: small finite values */
        for (size_t i = 0; i < bytes / (size_t)ti->block_bytes; i++) {
            float v = (float)((int)(next(&s) % 2001) - 1000) * 1e-4f;
            if (t == DS_F32) memcpy(w + 4 * i, &v, 4);
            else {
                uint16_t h = t == DS_F16 ? ds_f32_to_f16(v) : ds_f32_to_bf16(v);
                memcpy(w + 2 * i, &h, 2);
            }
        }
        return;
    }
    int fa, fb;
    scale_fields(t, &fa, &fb);
    uint16_t d = ds_f32_to_f16(0.01f), m = ds_f32_to_f16(0.002f);
    for (size_t b = 0; b < bytes / (size_t)ti->block_bytes; b++) {
        uint8_t *x = w + b * (size_t)ti->block_bytes;
        if (fa >= 0) memcpy(x + fa, &d, 2);
        if (fb >= 0) memcpy(x + fb, &m, 2);
        if (t == DS_MXFP4) x[0] = 120;
        if (t == DS_IQ1_M) x[55] &= 0xBF;
    }
}

static int parse_list(const char *s, char out[][16], int max) {
    int n = 0;
    while (*s && n < max) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len >= 16) len = 15;
        memcpy(out[n], s, len);
        out[n++][len] = 0;
        if (!e) break;
        s = e + 1;
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int ds_bench_kernels(const char *types, const char *shapes, const char *tokens, int threads, int reps) {
    char tn[MAX_TYPES][16], sn[MAX_SHAPES][16], nn[MAX_NS][16];
    int ntypes = parse_list(types, tn, MAX_TYPES), nshapes = parse_list(shapes, sn, MAX_SHAPES);
    int nns = parse_list(tokens, nn, MAX_NS);
    long ns[MAX_NS], nmax = 1;
    int64_t R[MAX_SHAPES], K[MAX_SHAPES];
    ds_dtype ts[MAX_TYPES];
    for (int i = 0; i < ntypes; i++)
        if (ds_dtype_from_name(tn[i], &ts[i]) || !ds_dtype_computable(ts[i])) {
            fprintf(stderr, "deltaserve bench: --kernel '%s' is not a type the kernels compute\n", tn[i]);
            return 2;
        }
    for (int i = 0; i < nshapes; i++) {
        long long r, k;
        char tail;
        if (sscanf(sn[i], "%lldx%lld%c", &r, &k, &tail) != 2 || r < 1 || k < 1 || r > (1ll << 24) || k > (1ll << 20)) {
            fprintf(stderr, "deltaserve bench: --shape '%s' is not ROWSxCOLS\n", sn[i]);
            return 2;
        }
        R[i] = r, K[i] = k;
    }
    for (int i = 0; i < nns; i++) {
        if (ds_arg_int("--tokens", nn[i], 1, 4096, &ns[i])) return 2;
        if (ns[i] > nmax) nmax = ns[i];
    }
    ds_err e;
    ds_backend *be = NULL;
    if (ds_backend_cpu_new(threads, &be, &e)) {
        fprintf(stderr, "deltaserve bench: %s\n", e.msg);
        return 1;
    }
    printf("kernels %s, %d threads, median of %d runs; GB/s of the file's weight bytes\n", ds_isa_name(ds_cpu_level()),
           ds_backend_cpu_threads(be), reps);
    int nth = ds_backend_cpu_threads(be);
    printf("| %-7s | %-13s | %9s | %9s | %5s | %10s | %10s | %8s | %9s |\n", "type", "shape", "file MiB", "held MiB",
           "n", "ms/call", "cpu ms", "GB/s", "GFLOP/s");
    printf("| %-7s | %-13s | %9s | %9s | %5s | %10s | %10s | %8s | %9s |\n", "-------", "-------------", "--------:",
           "--------:", "----:", "---------:", "---------:", "-------:", "--------:");
    int rc = 0;
    for (int si = 0; si < nshapes && !rc; si++)
        for (int ti = 0; ti < ntypes && !rc; ti++) {
            ds_dtype t = ts[ti];
            const ds_dtype_info *info = ds_dtype_get(t);
            if (K[si] % info->block_elems) {
                printf("| %-7s | %6lldx%-6lld | %s\n", info->name, (long long)R[si], (long long)K[si],
                       "skipped: columns not a multiple of the block");
                continue;
            }
            size_t fb = ds_dtype_row_bytes(t, K[si]) * (size_t)R[si];
            uint8_t *w = malloc(fb);
            float *x = ds_be_alloc(be, (size_t)nmax * (size_t)K[si] * sizeof(float));
            float *y = ds_be_alloc(be, (size_t)nmax * (size_t)R[si] * sizeof(float));
            ds_bweight *bw = NULL;
            if (!w || !x || !y) {
                fprintf(stderr, "deltaserve bench: out of memory for %s %lldx%lld\n", info->name, (long long)R[si],
                        (long long)K[si]);
                rc = 1;
            } else {
                random_rows(t, w, R[si], K[si], 1234 + (uint64_t)t);
                uint64_t s = 99;
                for (int64_t i = 0; i < nmax * K[si]; i++) x[i] = (float)((int)(next(&s) % 2001) - 1000) * 1e-3f;
                ds_mat src = {.type = t, .data = w, .rows = R[si], .cols = K[si]};
                ds_be_limits lim = {.max_rows = (int)nmax, .max_group_rows = (int)nmax};
                if (ds_be_weight_new(be, &src, DS_W_MATMUL, &bw, &e) || be->ops->reserve(be, &lim, &e)) {
                    fprintf(stderr, "deltaserve bench: %s\n", e.msg);
                    rc = 1;
                }
            }
            for (int ni = 0; ni < nns && !rc; ni++) {
                double v[64], c[64];
                int runs = reps < 64 ? reps : 64;
                ds_be_matmul1(be, y, R[si], bw, x, K[si], ns[ni]); /* warm-up */
                for (int r = 0; r < runs; r++) {
                    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
                    ds_be_matmul1(be, y, R[si], bw, x, K[si], ns[ni]);
                    v[r] = clock_s(CLOCK_MONOTONIC) - t0;
                    c[r] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
                }
                qsort(v, (size_t)runs, sizeof v[0], cmp_double);
                qsort(c, (size_t)runs, sizeof c[0], cmp_double);
                double sec = nth == 1 ? c[runs / 2] : v[runs / 2];
                char shape[32];
                snprintf(shape, sizeof shape, "%lldx%lld", (long long)R[si], (long long)K[si]);
                printf("| %-7s | %-13s | %9.1f | %9.1f | %5ld | %10.3f | %10.3f | %8.1f | %9.1f |\n", info->name, shape,
                       (double)fb / (1 << 20), (double)be->ops->weight_bytes(bw) / (1 << 20), ns[ni], v[runs / 2] * 1e3,
                       c[runs / 2] * 1e3,
                       (double)fb / sec * 1e-9, 2.0 * (double)R[si] * (double)K[si] * (double)ns[ni] / sec * 1e-9);
                fflush(stdout);
            }
            if (bw) ds_be_weight_free(be, bw);
            ds_be_free_buf(be, x);
            ds_be_free_buf(be, y);
            free(w);
        }
    ds_be_free(be);
    return rc;
}
