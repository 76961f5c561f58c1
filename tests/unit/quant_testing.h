/* quant_testing.h - what the quantiser tests (test_quant, test_quant_lowbit,
 * test_quant_grid) share: seeded random rows, the round-trip error they
 * bound, and writing the --dump files that tests/reference decodes. */
#ifndef DS_QUANT_TESTING_H
#define DS_QUANT_TESTING_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/dtype.h"
#include "numeric_testing.h"

/* Gaussian row with a mean and, if asked, ~1% outliers of 6 sigma: the shape
 * of real weight rows that simple absmax quantisers handle worst. */
static inline void fill_row(rng *r, float *x, int64_t n, double sigma, double mean, int outliers) {
    for (int64_t i = 0; i < n; i++) {
        double v = rng_gauss(r);
        if (outliers && rng_uniform(r) < 0.01) v *= 6.0;
        x[i] = (float)(mean + sigma * v);
    }
}

/* Relative RMS error of quantise + dequantise over `rows` rows of n from
 * fill_row. */
static inline double roundtrip_rel_rmse(ds_dtype t, int64_t n, int rows, double sigma, double mean, int outliers,
                                        uint64_t seed) {
    rng r = {seed};
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    void *q = malloc(ds_dtype_row_bytes(t, n));
    double err = 0, sig = 0;
    for (int row = 0; row < rows; row++) {
        fill_row(&r, x, n, sigma, mean, outliers);
        ds_quantize_row(t, x, q, n);
        ds_dequantize_row(t, q, y, n);
        for (int64_t i = 0; i < n; i++) {
            const double diff = (double)y[i] - x[i];
            err += diff * diff;
            sig += (double)x[i] * x[i];
        }
    }
    free(x);
    free(y);
    free(q);
    return sqrt(err / sig);
}

/* Writes DIR/NAME.EXT for --dump; 1 (with a message) if it cannot. */
static inline int write_file(const char *dir, const char *name, const char *ext, const void *data, size_t size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot create %s\n", path);
        return 1;
    }
    const int ok = fwrite(data, 1, size, f) == size;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    return 0;
}

#endif
