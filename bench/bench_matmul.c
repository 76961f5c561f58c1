/* bench_matmul.c - the matrix kernels of the CPU backend, verified then timed.
 *
 *   make && gcc -std=c17 -O2 -D_GNU_SOURCE -Isrc -o build/bench_matmul bench/bench_matmul.c \
 *        build/libdeltaserve.a -lm -lpthread && ./build/bench_matmul [ROWS COLS] [THREADS]
 *
 * For each weight type: the result of the selected kernels is checked against
 * the scalar reference first (bitwise, as the unit tests do), then the
 * product is timed for 1, 16 and 512 tokens: GB/s of weights streamed (what
 * decode is bound by) and GMAC/s (what prefill is bound by). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu.h"
#include "kernels/dtype.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int64_t rows = argc > 2 ? atoll(argv[1]) : 4096, cols = argc > 2 ? atoll(argv[2]) : 1024;
    int threads = argc > 3 ? atoi(argv[3]) : 0;
    static const ds_dtype types[] = {DS_Q8_0, DS_Q4_K, DS_Q6_K, DS_BF16, DS_Q4_0, DS_Q5_K, DS_F32};
    ds_err e = {0};
    ds_backend *be, *ref;
    ds_isa lvl = ds_cpu_level();
    ds_cpu_set_level(DS_ISA_REF);
    if (ds_backend_cpu_new(threads, &ref, &e)) return 1;
    ds_cpu_set_level(lvl);
    if (ds_backend_cpu_new(threads, &be, &e)) return 1;
    printf("kernels %s, %d threads, %lld x %lld\n", ds_isa_name(lvl), ds_backend_cpu_threads(be), (long long)rows,
           (long long)cols);
    int64_t nmax = 512;
    float *x = malloc((size_t)(nmax * cols) * sizeof(float)), *y = malloc((size_t)(nmax * rows) * sizeof(float));
    float *y2 = malloc((size_t)(nmax * rows) * sizeof(float)), *row = malloc((size_t)cols * sizeof(float));
    for (int64_t i = 0; i < nmax * cols; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        ds_dtype t = types[ti];
        size_t rb = ds_dtype_row_bytes(t, cols);
        uint8_t *w = malloc(rb * (size_t)rows);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < cols; c++) row[c] = (float)(((r * 31 + c * 17) % 255) - 127) / 127.0f;
            if (r < 64 || t == DS_F32 || t == DS_BF16) ds_quantize_row(t, row, w + (size_t)r * rb, cols);
            else memcpy(w + (size_t)r * rb, w + (size_t)(r % 64) * rb, rb);
        }
        ds_mat m = {.type = t, .data = w, .rows = rows, .cols = cols};
        ds_bweight *bw, *rw;
        ds_be_limits lim = {.max_rows = (int)nmax, .n_heads = 1, .head_dim = 64};
        if (be->ops->weight_new(be, &m, DS_W_MATMUL, &bw, &e) || ref->ops->weight_new(ref, &m, DS_W_MATMUL, &rw, &e) ||
            be->ops->reserve(be, &lim, &e) || ref->ops->reserve(ref, &lim, &e)) {
            printf("%s\n", e.msg);
            return 1;
        }
        ds_be_matmul1(be, y, rows, bw, x, cols, 3);
        ds_be_matmul1(ref, y2, rows, rw, x, cols, 3);
        int same = memcmp(y, y2, (size_t)(3 * rows) * sizeof(float)) == 0;
        printf("%-5s %s", ds_dtype_get(t)->name, same ? "same bits as ref" : "DIFFERS from ref ");
        static const int64_t ns[] = {1, 16, 512};
        for (int k = 0; k < 3; k++) {
            int64_t n = ns[k];
            int iters = 0;
            double t0 = now(), dt;
            do {
                ds_be_matmul1(be, y, rows, bw, x, cols, n);
                iters++;
            } while ((dt = now() - t0) < 0.3);
            double per = dt / iters;
            printf("  n=%-3lld %6.1f GB/s %7.1f GMAC/s", (long long)n, (double)rb * rows / per / 1e9,
                   (double)rows * cols * n / per / 1e9);
        }
        printf("\n");
        be->ops->weight_free(be, bw);
        ref->ops->weight_free(ref, rw);
        free(w);
    }
    ds_be_free(be);
    ds_be_free(ref);
    return 0;
}
